// Synthetic workloads (workload/workload.h): the presets, the draws' determinism and
// statistics against the distributions' means worked out by hand, phases, costs on worked
// examples, and bad files refused with the field they got wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <unistd.h>

#include "workload/workload.h"

using namespace omni::workload;

namespace {

Workload ok(const std::string &json) {
    auto w = Workload::parse(json);
    EXPECT_TRUE(w) << w.error() << "\n  in " << json;
    return w ? w.value() : Workload{};
}

// One modality "m" with the given length object and extra modality keys, one phase.
std::string one(const std::string &length, const std::string &extra = "") {
    return R"({"modalities": [{"name": "m", "length": )" + length + extra + R"(}], "phases": [{"mix": {"m": 1}}]})";
}

// The draws of `n` samples at `step`: per modality, the count and the sum of lengths.
struct Tally {
    std::map<std::uint32_t, std::uint64_t> count;
    std::map<std::uint32_t, double> sum;
    double mean(std::uint32_t m) const { return sum.at(m) / double(count.at(m)); }
};
Tally tally(const Workload &w, std::uint64_t seed, std::uint64_t step, std::uint64_t n) {
    Tally t;
    for (std::uint64_t i = 0; i < n; ++i) {
        const Sample s = w.sample(seed, i, step);
        ++t.count[s.modality];
        t.sum[s.modality] += double(s.length);
    }
    return t;
}

}  // namespace

TEST(Workload, PresetsLoadAndRoundTrip) {
    ASSERT_EQ(Workload::presets(), (std::vector<std::string>{"paper", "text", "uniform"}));
    for (const auto &name : Workload::presets()) {
        auto w = Workload::load(name);
        ASSERT_TRUE(w) << name << ": " << w.error();
        const std::string j = w.value().to_json();
        auto again = Workload::parse(j);
        ASSERT_TRUE(again) << name << ": " << again.error() << "\n  in " << j;
        EXPECT_EQ(again.value().to_json(), j) << name;
        EXPECT_EQ(again.value().modalities().size(), w.value().modalities().size());
        EXPECT_EQ(again.value().phases().size(), w.value().phases().size());
    }
    // "uniform": every sample is 512 tokens.
    const Workload u = Workload::load("uniform").value();
    for (std::uint64_t i = 0; i < 100; ++i) EXPECT_EQ(u.sample(7, i, i * 13).length, 512u);
    // "text": lognormal(6, 1) clamped to [16, 32768], one phase that lasts for ever.
    const Workload t = Workload::load("text").value();
    ASSERT_EQ(t.modalities().size(), 1u);
    EXPECT_EQ(t.modalities()[0].length.kind, Length::Kind::Lognormal);
    EXPECT_EQ(t.modalities()[0].length.min, 16u);
    EXPECT_EQ(t.modalities()[0].length.max, 32768u);
    EXPECT_EQ(t.phase_at(1000000000), 0u);
}

TEST(Workload, PaperPresetShape) {
    const Workload w = Workload::load("paper").value();
    ASSERT_EQ(w.modalities().size(), 3u);
    const auto &text = w.modalities()[0], &image = w.modalities()[1], &audio = w.modalities()[2];
    EXPECT_EQ(text.name, "text");
    EXPECT_EQ(image.unit, "patches");
    EXPECT_EQ(audio.unit, "frames");
    // Images: 576, 1024, 1560 patches; the longest is 1560/576 = 2.708x the shortest.
    ASSERT_EQ(image.length.choices, (std::vector<std::uint64_t>{576, 1024, 1560}));
    EXPECT_NEAR(double(image.length.choices[2]) / double(image.length.choices[0]), 2.71, 0.01);
    EXPECT_DOUBLE_EQ(image.encoder_cost_per_unit, 0.5);
    // Text's mean e^(5.5 + 0.81/2) = e^5.905 ~ 366.9; audio's is 17.6x that by construction
    // (its mu is solved for it), so the ratio of the means is 17.6 up to rounding.
    EXPECT_NEAR(text.length.mean(), std::exp(5.905), 1e-9);
    EXPECT_NEAR(audio.length.mean() / text.length.mean(), 17.6, 1e-9);
    // Phases: 200 + 200 steps, then for ever; the mixes as written (they sum to 1 already).
    ASSERT_EQ(w.phases().size(), 3u);
    EXPECT_EQ(w.phases()[0].steps, 200u);
    EXPECT_EQ(w.phases()[1].steps, 200u);
    EXPECT_EQ(w.phases()[2].steps, 0u);
    EXPECT_NEAR(w.phases()[0].mix[0], 0.7, 1e-12);
    EXPECT_NEAR(w.phases()[1].mix[2], 0.2, 1e-12);
    EXPECT_NEAR(w.phases()[2].mix[2], 0.4, 1e-12);
}

TEST(Workload, PhaseBoundaries) {
    const Workload w = Workload::load("paper").value();
    // Steps 0..199 are phase 0, 200..399 phase 1, 400 on phase 2.
    EXPECT_EQ(w.phase_at(0), 0u);
    EXPECT_EQ(w.phase_at(199), 0u);
    EXPECT_EQ(w.phase_at(200), 1u);
    EXPECT_EQ(w.phase_at(399), 1u);
    EXPECT_EQ(w.phase_at(400), 2u);
    EXPECT_EQ(w.phase_at(1000000000), 2u);
    EXPECT_EQ(w.phase_at(UINT64_MAX), 2u);
    // A last phase with steps still lasts for ever after them.
    const Workload v = ok(R"({"modalities": [{"name": "m", "length": {"fixed": 1}}],
        "phases": [{"steps": 3, "mix": {"m": 1}}, {"steps": 5, "mix": {"m": 1}}]})");
    EXPECT_EQ(v.phase_at(2), 0u);
    EXPECT_EQ(v.phase_at(3), 1u);
    EXPECT_EQ(v.phase_at(8), 1u);
    EXPECT_EQ(v.phase_at(UINT64_MAX), 1u);
    EXPECT_EQ(v.phases()[1].steps, 5u);
}

TEST(Workload, Deterministic) {
    const Workload w = Workload::load("paper").value();
    int differ_seed = 0, differ_phase = 0;
    for (std::uint64_t i = 0; i < 200; ++i) {
        const Sample a = w.sample(42, i, 10), b = w.sample(42, i, 10);
        EXPECT_EQ(a.modality, b.modality);
        EXPECT_EQ(a.length, b.length);
        // Within a phase the step does not matter: step 10 and step 199 are both phase 0.
        const Sample c = w.sample(42, i, 199);
        EXPECT_EQ(a.modality, c.modality);
        EXPECT_EQ(a.length, c.length);
        const Sample d = w.sample(43, i, 10), e = w.sample(42, i, 200);
        differ_seed += d.modality != a.modality || d.length != a.length;
        differ_phase += e.modality != a.modality || e.length != a.length;
    }
    // Another seed (or phase) is another sequence: two independent draws of a long-tailed
    // length coincide rarely (text's lengths spread over hundreds of values), so nearly all
    // 200 samples differ; half is a loose floor that a stuck or seed-blind hash fails.
    EXPECT_GT(differ_seed, 100);
    EXPECT_GT(differ_phase, 100);
}

TEST(Workload, MixIsHonoured) {
    const Workload w = Workload::load("paper").value();
    // Phase 0 is 0.7 / 0.25 / 0.05. Over 100k draws a fraction's standard deviation is at most
    // sqrt(0.25 / 1e5) = 0.0016: 0.01 is more than 6 of them.
    const std::uint64_t n = 100000;
    const Tally t = tally(w, 1, 0, n);
    EXPECT_NEAR(double(t.count.at(0)) / n, 0.7, 0.01);
    EXPECT_NEAR(double(t.count.at(1)) / n, 0.25, 0.01);
    EXPECT_NEAR(double(t.count.at(2)) / n, 0.05, 0.01);
    // A weight of 0 is never drawn; other weights are normalised (2 : 6 is 0.25 : 0.75).
    const Workload z = ok(R"({"modalities": [{"name": "a", "length": {"fixed": 1}},
        {"name": "b", "length": {"fixed": 2}}, {"name": "c", "length": {"fixed": 3}}],
        "phases": [{"mix": {"a": 2, "b": 0, "c": 6}}]})");
    EXPECT_NEAR(z.phases()[0].mix[0], 0.25, 1e-15);
    EXPECT_EQ(z.phases()[0].mix[1], 0.0);
    EXPECT_NEAR(z.phases()[0].mix[2], 0.75, 1e-15);
    const Tally u = tally(z, 9, 0, 40000);
    EXPECT_EQ(u.count.count(1), 0u);
    EXPECT_NEAR(double(u.count.at(0)) / 40000, 0.25, 0.01);  // sd 0.0022
}

TEST(Workload, ChoiceDrawsOnlyItsValuesEvenly) {
    const Workload w = ok(one(R"({"choice": [3, 5, 7]})"));
    std::map<std::uint64_t, int> seen;
    const int n = 30000;
    for (int i = 0; i < n; ++i) ++seen[w.sample(5, i, 0).length];
    ASSERT_EQ(seen.size(), 3u);
    // Each 1/3; sd sqrt(2/9 / 30000) = 0.0027, so 0.02 is 7 of them.
    for (std::uint64_t v : {3u, 5u, 7u}) EXPECT_NEAR(double(seen[v]) / n, 1.0 / 3, 0.02) << v;
    // Clamped choices: 3 becomes 4, 7 becomes 6; the mean of 4, 5, 6 is 5.
    const Workload c = ok(one(R"({"choice": [3, 5, 7], "min": 4, "max": 6})"));
    EXPECT_DOUBLE_EQ(c.modalities()[0].length.mean(), 5.0);
    for (int i = 0; i < 1000; ++i) {
        const auto l = c.sample(5, i, 0).length;
        EXPECT_TRUE(l >= 4 && l <= 6) << l;
    }
}

TEST(Workload, UniformStaysInItsRange) {
    const Workload w = ok(one(R"({"uniform": [10, 20]})"));
    std::map<std::uint64_t, int> seen;
    double sum = 0;
    const int n = 30000;
    for (int i = 0; i < n; ++i) {
        const auto l = w.sample(3, i, 0).length;
        ASSERT_TRUE(l >= 10 && l <= 20) << l;
        ++seen[l];
        sum += double(l);
    }
    EXPECT_EQ(seen.size(), 11u);  // every value in 30000 draws of 11
    // Mean 15; sd of one draw sqrt((11^2 - 1)/12) = 3.16, of the mean 0.018.
    EXPECT_NEAR(sum / n, 15.0, 0.1);
    EXPECT_DOUBLE_EQ(w.modalities()[0].length.mean(), 15.0);
    // Clamped to [20, 50]: 1..19 count as 20 (19 values), 51..100 as 50 (50 values), 20..50
    // as themselves (31 values, sum 31 * 35 = 1085): (380 + 2500 + 1085) / 100 = 39.65.
    const Workload c = ok(one(R"({"uniform": [1, 100], "min": 20, "max": 50})"));
    EXPECT_DOUBLE_EQ(c.modalities()[0].length.mean(), 39.65);
    const Tally t = tally(c, 3, 0, 50000);
    EXPECT_NEAR(t.mean(0), 39.65, 0.5);  // sd of one draw < 15, of the mean < 0.07
}

TEST(Workload, LognormalMeanMatches) {
    // lognormal(5, 0.5): mean e^(5 + 0.125) = 168.2; its coefficient of variation is
    // sqrt(e^0.25 - 1) = 0.53, so over 100k draws the mean's sd is 0.17%: 2% is 12 of them.
    // Rounding to integers moves the mean by far less. The clamp [1, 2^24] almost never acts.
    const Workload w = ok(one(R"({"lognormal": {"mu": 5, "sigma": 0.5}})"));
    EXPECT_NEAR(w.modalities()[0].length.mean(), std::exp(5.125), 1e-9);
    EXPECT_NEAR(tally(w, 11, 0, 100000).mean(0), std::exp(5.125), 0.02 * std::exp(5.125));
    // sigma 0: every draw is round(e^mu) = round(e^2) = round(7.389) = 7.
    const Workload f = ok(one(R"({"lognormal": {"mu": 2, "sigma": 0}})"));
    for (int i = 0; i < 100; ++i) EXPECT_EQ(f.sample(1, i, 0).length, 7u);
}

TEST(Workload, PaperAudioIsAboutSeventeenTimesText) {
    const Workload w = Workload::load("paper").value();
    // Phase 2 (step 1000): 0.3 text, 0.3 image, 0.4 audio; 200k draws give ~60k text (mean's
    // sd 1.01/sqrt(60000) = 0.4%) and ~80k audio (0.95/sqrt(80000) = 0.3%). The clamps move
    // text's mean by ~0.1% (0.12% of draws fall below 16) and audio's by less. So the ratio is
    // 17.6 within well under 5%.
    const Tally t = tally(w, 2026, 1000, 200000);
    EXPECT_NEAR(t.mean(2) / t.mean(0), 17.6, 0.05 * 17.6);
    // Images: only the three patch counts; their mean is (576 + 1024 + 1560) / 3 = 1053.3.
    EXPECT_NEAR(t.mean(1), 3160.0 / 3, 0.02 * 3160 / 3);
}

TEST(Workload, CostsOnWorkedExamples) {
    // length 100, 0.5 tokens and 1 encoder unit per unit: 50 tokens, 100 units, 50 + 100.
    const Workload w = ok(one(R"({"fixed": 100})", R"(, "tokens_per_unit": 0.5, "encoder_cost_per_unit": 1)"));
    const Sample s = w.sample(1, 0, 0);
    EXPECT_EQ(s.length, 100u);
    EXPECT_EQ(w.cost(s, CostKind::Tokens), 50u);
    EXPECT_EQ(w.cost(s, CostKind::Units), 100u);
    EXPECT_EQ(w.cost(s, CostKind::Compute), 150u);
    EXPECT_EQ(w.cost(1, 0, 0, CostKind::Compute), 150u);
    // 0.33 per unit: 10 units are 3.3, rounded up to 4 (tokens and encoder: compute 8); 100
    // units are 33 exactly, and 0.33's binary error must not make it 34; 3 units are 0.99 -> 1.
    const Workload r = ok(one(R"({"fixed": 10})", R"(, "tokens_per_unit": 0.33, "encoder_cost_per_unit": 0.33)"));
    EXPECT_EQ(r.cost(Sample{0, 10}, CostKind::Tokens), 4u);
    EXPECT_EQ(r.cost(Sample{0, 10}, CostKind::Compute), 8u);
    EXPECT_EQ(r.cost(Sample{0, 100}, CostKind::Tokens), 33u);
    EXPECT_EQ(r.cost(Sample{0, 100}, CostKind::Compute), 66u);
    EXPECT_EQ(r.cost(Sample{0, 3}, CostKind::Tokens), 1u);
    // Decimal factors are stored a little off: 50 * 1.1 and 100 * 0.07 come out as
    // 55.00000000000001 and 7.000000000000001 in doubles, yet are 55 and 7 tokens, not 56 and 8.
    const Workload d = ok(one(R"({"fixed": 50})", R"(, "tokens_per_unit": 1.1, "encoder_cost_per_unit": 0.07)"));
    EXPECT_EQ(d.cost(Sample{0, 50}, CostKind::Tokens), 55u);
    EXPECT_EQ(d.cost(Sample{0, 100}, CostKind::Compute), 110u + 7u);
    // At least one token however small the factor; no encoder: compute is the tokens.
    const Workload t = ok(one(R"({"fixed": 1})", R"(, "tokens_per_unit": 0.001)"));
    EXPECT_EQ(t.cost(Sample{0, 1}, CostKind::Tokens), 1u);
    EXPECT_EQ(t.cost(Sample{0, 1}, CostKind::Compute), 1u);
    // The largest: 2^24 units at 2^15 per unit are 2^39 tokens, and 2^40 of compute: the most
    // a balanced step takes (balance::kMaxCost), so any valid workload balances.
    const Workload big =
        ok(one(R"({"fixed": 16777216})", R"(, "tokens_per_unit": 32768, "encoder_cost_per_unit": 32768)"));
    EXPECT_EQ(big.cost(1, 0, 0, CostKind::Tokens), std::uint64_t(1) << 39);
    EXPECT_EQ(big.cost(1, 0, 0, CostKind::Compute), std::uint64_t(1) << 40);
}

TEST(Workload, CostKindNames) {
    for (CostKind k : {CostKind::Tokens, CostKind::Units, CostKind::Compute})
        EXPECT_EQ(parse_cost_kind(cost_kind_name(k)).value(), k);
    EXPECT_STREQ(cost_kind_name(CostKind::Compute), "compute");
    EXPECT_EQ(parse_cost_kind("flops").error(), "cost kind 'flops': expected tokens, units or compute");
}

TEST(Workload, BadInputIsRefusedWithItsField) {
    const std::string mods = R"("modalities": [{"name": "text", "length": {"fixed": 10}},
                                                {"name": "audio", "length": {"fixed": 20}}])";
    const auto with_phases = [&](const std::string &phases) { return "{" + mods + R"(, "phases": )" + phases + "}"; };
    const struct {
        std::string json, expected;
    } cases[] = {
        {"{", "not valid JSON"},
        // The 'x' is line 2's 17th character: two spaces, "modalities" in quotes (12), ':', ' '.
        {"{\n  \"modalities\": x}", "workload: not valid JSON (line 2, column 17)"},
        {"[]", "workload: expected an object, not an array"},
        {"{" + mods + R"(, "phases": [{"mix": {"text": 1}}], "extra": 1})", "workload: unknown key 'extra'"},
        {one(R"({"fixed": 5, "avg": 3})"), "modalities[0].length: unknown key 'avg'"},
        {one(R"({"lognormal": {"mu": 1, "sigma": 1, "k": 2}})"), "modalities[0].length.lognormal: unknown key 'k'"},
        {one(R"({"fixed": 5})", R"(, "colour": "red")"), "modalities[0]: unknown key 'colour'"},
        {R"({"modalities": [{"name": "m", "length": {"fixed": 1}}, {"name": "m", "length": {"fixed": 2}}],
             "phases": [{"mix": {"m": 1}}]})",
         "modalities[1].name: 'm' is already modalities[0]'s name"},
        {with_phases(R"([{"mix": {"text": 1, "speech": 1}}])"), "phases[0].mix: 'speech' is not a modality"},
        {with_phases(R"([{"mix": {"text": 0, "audio": 0}}])"), "phases[0].mix: expected a weight > 0"},
        {with_phases(R"([{"mix": {}}])"), "phases[0].mix: expected a weight > 0"},
        {with_phases(R"([{"mix": {"text": 1, "audio": -0.5}}])"), "phases[0].mix.audio: expected a finite weight >= 0"},
        {with_phases(R"([{"mix": {"text": "1"}}])"), "phases[0].mix.text: expected a finite weight >= 0, not a string"},
        {with_phases(R"([{"mix": {"text": 1}}, {"mix": {"audio": 1}}])"), "phases[0]: expected steps"},
        {with_phases(R"([{"steps": 0, "mix": {"text": 1}}])"), "phases[0].steps: expected an integer in 1.."},
        {with_phases(R"([{"steps": 2.5, "mix": {"text": 1}}, {"mix": {"audio": 1}}])"), "phases[0].steps"},
        {with_phases(R"([{"steps": 2}])"), "phases[0]: expected a mix"},
        {with_phases("[]"), "phases: expected an array of 1..256 phases"},
        {with_phases(R"([{"mix": {"text": 1, "text": 2}}])"), "phases[0].mix: key 'text' appears twice"},
        {one(R"({"fixed": 1.5})"), "modalities[0].length.fixed: expected an integer in 1..16777216, not 1.5"},
        {one(R"({"fixed": 1.0})"), "modalities[0].length.fixed: expected an integer in 1..16777216, not 1.0"},
        {one(R"({"fixed": -3})"), "modalities[0].length.fixed: expected an integer in 1..16777216, not -3"},
        {one(R"({"fixed": "5"})"), "modalities[0].length.fixed: expected an integer in 1..16777216, not a string"},
        {one(R"({"fixed": 0})"), "modalities[0].length.fixed: expected an integer in 1..16777216, not 0"},
        {one(R"({"fixed": 16777217})"), "modalities[0].length.fixed: expected an integer in 1..16777216"},
        {one(R"({"uniform": [5, 4]})"), "modalities[0].length.uniform[1]: expected an integer in 5..16777216"},
        {one(R"({"uniform": [5]})"), "modalities[0].length.uniform: expected [low, high]"},
        {one(R"({"choice": []})"), "modalities[0].length.choice: expected an array of 1..256 lengths"},
        {one(R"({"choice": [1, 2.5]})"), "modalities[0].length.choice[1]: expected an integer"},
        {one(R"({"fixed": 5, "min": 10, "max": 9})"), "modalities[0].length.max: expected an integer in 10..16777216"},
        {one(R"({"fixed": 5, "uniform": [1, 2]})"), "modalities[0].length: expected exactly one of"},
        {one(R"({"min": 3})"), "modalities[0].length: expected exactly one of"},
        {one(R"({"lognormal": {"mu": 5, "sigma": 4.5}})"),
         "modalities[0].length.lognormal.sigma: expected a number in 0..4"},
        {one(R"({"lognormal": {"mu": 5, "sigma": -1}})"), "modalities[0].length.lognormal.sigma"},
        {one(R"({"lognormal": {"mu": 18, "sigma": 1}})"), "modalities[0].length.lognormal.mu: expected a number <= 17"},
        {one(R"({"lognormal": {"mu": 1e999, "sigma": 1}})"), "not valid JSON: a number beyond a double's range"},
        {one(R"({"lognormal": {"mu": 5}})"), "modalities[0].length.lognormal: expected both mu and sigma"},
        {one(R"({"fixed": 5})", R"(, "tokens_per_unit": 0)"),
         "modalities[0].tokens_per_unit: expected a number in (0, 32768]"},
        {one(R"({"fixed": 5})", R"(, "encoder_cost_per_unit": 65537)"), "modalities[0].encoder_cost_per_unit"},
        {one(R"({"fixed": 5})", R"(, "unit": "tok ens")"), "modalities[0].unit: expected 1..32 of"},
        {R"({"modalities": [{"name": "a b", "length": {"fixed": 1}}], "phases": [{"mix": {"a": 1}}]})",
         "modalities[0].name: expected 1..32 of A-Z a-z 0-9 _ -, not 'a b'"},
        {R"({"modalities": [{"length": {"fixed": 1}}], "phases": [{"mix": {"a": 1}}]})",
         "modalities[0]: expected a name"},
        {R"({"modalities": [{"name": "a"}], "phases": [{"mix": {"a": 1}}]})", "modalities[0]: expected a length"},
        {R"({"modalities": [], "phases": [{"mix": {"a": 1}}]})", "modalities: expected an array of 1..16"},
        {R"({"phases": []})", "workload: expected both modalities and phases"},
        {std::string(20, '[') + std::string(20, ']'), "nests deeper than 16"},
        {std::string((1 << 20) + 1, ' '), "at most 1048576"},
    };
    for (const auto &c : cases) {
        auto w = Workload::parse(c.json);
        ASSERT_FALSE(w) << c.json;
        EXPECT_NE(w.error().find(c.expected), std::string::npos)
            << "got: " << w.error() << "\nexpected to contain: " << c.expected
            << "\nfor: " << c.json.substr(0, 200);
    }
    // Seventeen modalities: one too many.
    std::string many = R"({"modalities": [)";
    for (int i = 0; i < 17; ++i)
        many += std::string(i ? "," : "") + R"({"name": "m)" + std::to_string(i) + R"(", "length": {"fixed": 1}})";
    many += R"(], "phases": [{"mix": {"m0": 1}}]})";
    EXPECT_NE(Workload::parse(many).error().find("modalities: expected an array of 1..16 modalities"),
              std::string::npos);
}

TEST(Workload, LoadNamesThePath) {
    auto missing = Workload::load("/nonexistent/omni-workload.json");
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error(), "/nonexistent/omni-workload.json: No such file or directory");

    char path[] = "/tmp/omni-workload-test.XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    const auto write = [&](const std::string &text) {
        std::FILE *f = std::fopen(path, "w");
        ASSERT_NE(f, nullptr);
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
    };
    write(one(R"({"fixed": 9})"));
    auto w = Workload::load(path);
    ASSERT_TRUE(w) << w.error();
    EXPECT_EQ(w.value().sample(1, 2, 3).length, 9u);
    write(one(R"({"fixed": 1.5})"));
    EXPECT_EQ(Workload::load(path).error(),
              std::string(path) + ": modalities[0].length.fixed: expected an integer in 1..16777216, not 1.5");
    write(std::string((1 << 20) + 1, ' '));
    EXPECT_NE(Workload::load(path).error().find(std::string(path) + ": larger than 1 MiB"), std::string::npos);
    std::remove(path);
    EXPECT_NE(Workload::load("/tmp").error().find("/tmp: "), std::string::npos);  // a directory
}
