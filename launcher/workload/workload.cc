// Synthetic multimodal workloads (workload.h): the JSON format, the presets, the draws.
//
// The format (one JSON object; every key below is the only one allowed where it stands):
//
//   {"modalities": [
//      {"name": "text", "unit": "tokens", "length": {"lognormal": {"mu": 5.5, "sigma": 0.9}, "min": 1, "max": 32768}},
//      {"name": "image", "unit": "patches", "length": {"choice": [576, 1024, 1560]}, "tokens_per_unit": 1,
//       "encoder_cost_per_unit": 0.5},
//      {"name": "audio", "unit": "frames", "length": {"uniform": [100, 4000]}, "tokens_per_unit": 0.5,
//       "encoder_cost_per_unit": 1}],
//    "phases": [{"steps": 100, "mix": {"text": 0.6, "image": 0.3, "audio": 0.1}},
//               {"mix": {"text": 0.3, "image": 0.3, "audio": 0.4}}]}
//
//  modalities  1..16 objects:
//    name                    required; 1..32 of [A-Za-z0-9_-]; unique.
//    unit                    optional, default "tokens"; what a length counts, same characters.
//    length                  required; exactly one of
//                              "fixed": N             every sample N long,
//                              "uniform": [LOW, HIGH] an integer in [LOW, HIGH], equally likely,
//                              "lognormal": {"mu": M, "sigma": S}  round(exp(N(M, S^2))),
//                              "choice": [N, ...]     1..256 values, equally likely;
//                            plus "min", "max" (default 1 and 16777216): every draw is clamped to
//                            [min, max]. Lengths are integers in 1..16777216 (2^24), LOW <= HIGH,
//                            min <= max; M and S are finite, S >= 0, M <= 17 and S <= 4 (e^17 and
//                            e^(6*4) are already beyond 16777216: larger values only pile draws up
//                            at max).
//    tokens_per_unit         optional, default 1; the LLM tokens one unit becomes; in (0, 32768].
//    encoder_cost_per_unit   optional, default 0; encoder compute per unit, in LLM-token
//                            equivalents; in [0, 32768].
//  phases      1..256 objects, in order:
//    steps                   the phase's length in steps, an integer >= 1; required but in the
//                            last phase, which lasts for ever: a last phase's steps, if given, are
//                            kept (to_json writes them back) but it goes on after them.
//    mix                     required; modality name -> weight, a finite number >= 0; a name that
//                            is missing weighs 0; not all 0. The weights are normalised to sum 1 (a
//                            mix that already sums to 1 within 1e-9 is kept as written, so that
//                            to_json's output reads back to exactly the same numbers).
// Integers must be written as integers (1.0, 1e3, -1 and "1" are refused). The text is at most
// 1 MiB and nests at most 16 deep. A key that appears twice in one object is an error.
//
// Draws (sample()): a 64-bit key mixes the seed, the sample index and the phase number with
// splitmix64's finaliser; the modality and the length come from further splitmix64 outputs of
// that key. The step enters only through its phase, so a sample drawn twice in a phase (a
// replayed step) is the same sample.
#include "workload/workload.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/parse.h"

namespace omni::workload {

namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxTextBytes = std::size_t(1) << 20;
constexpr std::size_t kMaxDepth = 16;
constexpr double kMaxMu = 17, kMaxSigma = 4;
constexpr double kMixTolerance = 1e-9;
constexpr double kTwoPi = 6.283185307179586477;
const std::string kMaxLengthText = std::to_string(kMaxLength);
const std::string kMaxFactorText = std::to_string(static_cast<std::uint64_t>(kMaxFactor));

bool plain_name(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

// A JSON value as an error message shows it: numbers as written, anything else by its type
// (a string or object from the file could be long or hold control characters).
std::string shown(const json &v) {
    if (v.is_number()) return v.dump();
    if (v.is_string()) return "a string";
    if (v.is_boolean() || v.is_null()) return v.dump();
    return v.is_array() ? "an array" : "an object";
}

Error bad(const std::string &path, const std::string &expected, const json &v) {
    return make_error(path + ": expected " + expected + ", not " + shown(v));
}

// Only the allowed keys (every object in the format is closed).
Status only_keys(const json &j, const std::string &path, std::initializer_list<const char *> allowed) {
    if (!j.is_object()) return bad(path, "an object", j);
    for (const auto &item : j.items()) {
        if (std::none_of(allowed.begin(), allowed.end(), [&](const char *a) { return item.key() == a; })) {
            std::string list;
            for (const char *a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
            return make_error(path + ": unknown key " + omni::quoted(item.key()) + " (expected " + list + ")");
        }
    }
    return Status::success();
}

Result<std::uint64_t> get_uint(const json &v, const std::string &path, std::uint64_t lo, std::uint64_t hi) {
    // nlohmann stores every non-negative integer literal as unsigned; 1.0 and 1e3 are floats.
    if (v.is_number_unsigned()) {
        const auto x = v.get<std::uint64_t>();
        if (x >= lo && x <= hi) return x;
    }
    return bad(path, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi), v);
}

Result<double> get_real(const json &v, const std::string &path, double lo, double hi, bool lo_open,
                        const std::string &expected) {
    if (v.is_number()) {
        const double x = v.get<double>() + 0.0;  // + 0.0: -0 reads as 0
        if (std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi) return x;
    }
    return bad(path, expected, v);
}

Result<Length> read_length(const json &j, const std::string &path) {
    if (auto s = only_keys(j, path, {"fixed", "uniform", "lognormal", "choice", "min", "max"}); !s)
        return Error{s.error()};
    Length l;
    int kinds = 0;
    for (const char *k : {"fixed", "uniform", "lognormal", "choice"}) kinds += j.contains(k);
    if (kinds != 1) return make_error(path + ": expected exactly one of fixed, uniform, lognormal, choice");
    if (j.contains("fixed")) {
        auto v = get_uint(j["fixed"], path + ".fixed", 1, kMaxLength);
        if (!v) return Error{v.error()};
        l.kind = Length::Kind::Fixed;
        l.value = v.value();
    } else if (j.contains("uniform")) {
        const json &u = j["uniform"];
        if (!u.is_array() || u.size() != 2) return bad(path + ".uniform", "[low, high]", u);
        auto lo = get_uint(u[0], path + ".uniform[0]", 1, kMaxLength);
        if (!lo) return Error{lo.error()};
        auto hi = get_uint(u[1], path + ".uniform[1]", lo.value(), kMaxLength);
        if (!hi) return Error{hi.error() + " (high >= low)"};
        l.kind = Length::Kind::Uniform;
        l.low = lo.value();
        l.high = hi.value();
    } else if (j.contains("lognormal")) {
        const json &g = j["lognormal"];
        const std::string p = path + ".lognormal";
        if (auto s = only_keys(g, p, {"mu", "sigma"}); !s) return Error{s.error()};
        if (!g.contains("mu") || !g.contains("sigma")) return make_error(p + ": expected both mu and sigma");
        auto mu = get_real(g["mu"], p + ".mu", -HUGE_VAL, kMaxMu, false,
                           "a number <= 17 (e^17 is beyond " + kMaxLengthText + ", the longest length)");
        if (!mu) return Error{mu.error()};
        auto sigma = get_real(g["sigma"], p + ".sigma", 0, kMaxSigma, false,
                              "a number in 0..4 (e^(6*4) is beyond " + kMaxLengthText + ", the longest length)");
        if (!sigma) return Error{sigma.error()};
        l.kind = Length::Kind::Lognormal;
        l.mu = mu.value();
        l.sigma = sigma.value();
    } else {
        const json &c = j["choice"];
        if (!c.is_array() || c.empty() || c.size() > kMaxChoices)
            return bad(path + ".choice", "an array of 1.." + std::to_string(kMaxChoices) + " lengths", c);
        l.kind = Length::Kind::Choice;
        for (std::size_t i = 0; i < c.size(); ++i) {
            auto v = get_uint(c[i], path + ".choice[" + std::to_string(i) + "]", 1, kMaxLength);
            if (!v) return Error{v.error()};
            l.choices.push_back(v.value());
        }
    }
    if (j.contains("min")) {
        auto v = get_uint(j["min"], path + ".min", 1, kMaxLength);
        if (!v) return Error{v.error()};
        l.min = v.value();
    }
    if (j.contains("max")) {
        auto v = get_uint(j["max"], path + ".max", l.min, kMaxLength);
        if (!v) return Error{v.error() + " (max >= min)"};
        l.max = v.value();
    }
    return l;
}

Result<Modality> read_modality(const json &j, const std::string &path) {
    if (auto s = only_keys(j, path, {"name", "unit", "length", "tokens_per_unit", "encoder_cost_per_unit"}); !s)
        return Error{s.error()};
    const std::string names = "1.." + std::to_string(kMaxNameLength) + " of A-Z a-z 0-9 _ -";
    Modality m;
    if (!j.contains("name")) return make_error(path + ": expected a name");
    for (const char *k : {"name", "unit"}) {
        if (!j.contains(k)) continue;
        const json &v = j[k];
        if (!v.is_string()) return bad(path + "." + k, names, v);
        const auto &s = v.get_ref<const std::string &>();
        if (s.empty() || s.size() > kMaxNameLength || !plain_name(s))
            return make_error(path + "." + k + ": expected " + names + ", not " + omni::quoted(s));
        (k[0] == 'n' ? m.name : m.unit) = s;
    }
    if (!j.contains("length")) return make_error(path + ": expected a length");
    auto l = read_length(j["length"], path + ".length");
    if (!l) return Error{l.error()};
    m.length = std::move(l.value());
    if (j.contains("tokens_per_unit")) {
        auto f = get_real(j["tokens_per_unit"], path + ".tokens_per_unit", 0, kMaxFactor, true,
                          "a number in (0, " + kMaxFactorText + "]");
        if (!f) return Error{f.error()};
        m.tokens_per_unit = f.value();
    }
    if (j.contains("encoder_cost_per_unit")) {
        auto f = get_real(j["encoder_cost_per_unit"], path + ".encoder_cost_per_unit", 0, kMaxFactor, false,
                          "a number in [0, " + kMaxFactorText + "]");
        if (!f) return Error{f.error()};
        m.encoder_cost_per_unit = f.value();
    }
    return m;
}

Result<Phase> read_phase(const json &j, const std::string &path, const std::vector<Modality> &mods, bool last) {
    if (auto s = only_keys(j, path, {"steps", "mix"}); !s) return Error{s.error()};
    Phase p;
    if (j.contains("steps")) {
        auto v = get_uint(j["steps"], path + ".steps", 1, UINT64_MAX);
        if (!v) return Error{v.error()};
        p.steps = v.value();
    } else if (!last) {
        return make_error(path + ": expected steps (only the last phase may go on for ever)");
    }
    if (!j.contains("mix")) return make_error(path + ": expected a mix");
    const json &mix = j["mix"];
    if (!mix.is_object()) return bad(path + ".mix", "an object of modality name -> weight", mix);
    p.mix.assign(mods.size(), 0.0);
    for (const auto &item : mix.items()) {
        auto it = std::find_if(mods.begin(), mods.end(), [&](const Modality &m) { return m.name == item.key(); });
        if (it == mods.end()) {
            std::string list;
            for (const auto &m : mods) list += (list.empty() ? "" : ", ") + m.name;
            return make_error(path + ".mix: " + omni::quoted(item.key()) + " is not a modality (expected " + list +
                              ")");
        }
        auto w = get_real(item.value(), path + ".mix." + item.key(), 0, HUGE_VAL, false, "a finite weight >= 0");
        if (!w) return Error{w.error()};
        p.mix[it - mods.begin()] = w.value();
    }
    double sum = 0, top = 0;
    for (double w : p.mix) sum += w, top = std::max(top, w);
    if (top == 0) return make_error(path + ".mix: expected a weight > 0 for at least one modality");
    if (std::fabs(sum - 1) > kMixTolerance) {
        // Scaled by the largest weight first: a sum of weights near DBL_MAX would overflow.
        double scaled = 0;
        for (double &w : p.mix) scaled += (w /= top);
        for (double &w : p.mix) w /= scaled;
    }
    return p;
}

struct Parts {
    std::vector<Modality> modalities;
    std::vector<Phase> phases;
};

Result<Parts> read_workload(const json &j) {
    if (auto s = only_keys(j, "workload", {"modalities", "phases"}); !s) return Error{s.error()};
    if (!j.contains("modalities") || !j.contains("phases"))
        return make_error("workload: expected both modalities and phases");
    Parts w;
    const json &ms = j["modalities"], &ps = j["phases"];
    if (!ms.is_array() || ms.empty() || ms.size() > kMaxModalities)
        return bad("modalities", "an array of 1.." + std::to_string(kMaxModalities) + " modalities", ms);
    for (std::size_t i = 0; i < ms.size(); ++i) {
        const std::string path = "modalities[" + std::to_string(i) + "]";
        auto m = read_modality(ms[i], path);
        if (!m) return Error{m.error()};
        for (std::size_t k = 0; k < i; ++k)
            if (w.modalities[k].name == m.value().name)
                return make_error(path + ".name: " + omni::quoted(m.value().name) + " is already modalities[" +
                                  std::to_string(k) + "]'s name");
        w.modalities.push_back(std::move(m.value()));
    }
    if (!ps.is_array() || ps.empty() || ps.size() > kMaxPhases)
        return bad("phases", "an array of 1.." + std::to_string(kMaxPhases) + " phases", ps);
    for (std::size_t i = 0; i < ps.size(); ++i) {
        auto p = read_phase(ps[i], "phases[" + std::to_string(i) + "]", w.modalities, i + 1 == ps.size());
        if (!p) return Error{p.error()};
        w.phases.push_back(std::move(p.value()));
    }
    return w;
}

// nlohmann keeps the last of two equal keys and nests as deep as the text does; this catches
// both while it parses. The path of a duplicate is built from the open objects and arrays.
struct Scan {
    struct Frame {
        bool array = false;
        std::size_t count = 0;   // array elements seen
        std::string key;         // object: the latest key
        std::set<std::string> keys;
    };
    std::vector<Frame> stack;
    std::string error;

    bool operator()(int, json::parse_event_t event, json &parsed) {
        using E = json::parse_event_t;
        if (!error.empty()) return false;
        if ((event == E::object_start || event == E::array_start || event == E::value) && !stack.empty() &&
            stack.back().array)
            ++stack.back().count;
        if (event == E::object_start || event == E::array_start) {
            if (stack.size() >= kMaxDepth) {
                error = "workload: nests deeper than " + std::to_string(kMaxDepth) + " levels";
                return false;
            }
            stack.push_back(Frame{event == E::array_start, 0, {}, {}});
        } else if (event == E::object_end || event == E::array_end) {
            if (!stack.empty()) stack.pop_back();
        } else if (event == E::key && !stack.empty()) {
            Frame &f = stack.back();
            f.key = parsed.get<std::string>();
            if (!f.keys.insert(f.key).second) {
                std::string path;
                for (std::size_t i = 0; i + 1 < stack.size(); ++i) {
                    const Frame &g = stack[i];
                    if (g.array) path += "[" + std::to_string(g.count - 1) + "]";
                    else path += (path.empty() ? "" : ".") + (plain_name(g.key) ? g.key : omni::quoted(g.key));
                }
                error = (path.empty() ? "workload" : path) + ": key " + omni::quoted(f.key) + " appears twice";
                return false;
            }
        }
        return true;
    }
};

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser (Steele, Lea, Flood 2014)
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double unit_open_high(std::uint64_t h) { return double(h >> 11) * 0x1p-53; }         // [0, 1)
double unit_open_low(std::uint64_t h) { return double((h >> 11) + 1) * 0x1p-53; }    // (0, 1]

// ceil(length * factor) for a factor read from decimal text: 0.1 is stored a little above
// 1/10, so 30 * 0.1 may come out a hair above 3. A relative 2^-50 (a few ulps) takes that back
// without touching a genuine fraction (lengths are integers, factors have few digits).
std::uint64_t ceil_product(std::uint64_t length, double factor) {
    const double x = double(length) * factor;
    return static_cast<std::uint64_t>(std::ceil(x - x * 0x1p-50));
}

std::uint64_t clamp_length(double x, const Length &l) {
    if (!(x > double(l.min))) return l.min;  // also NaN, which finite mu and sigma never give
    if (x >= double(l.max)) return l.max;
    return static_cast<std::uint64_t>(x);
}

json preset_json(const std::string &name) {
    auto modality = [](const char *n, const char *unit, json length, double tokens, double encoder) {
        return json{{"name", n}, {"unit", unit}, {"length", std::move(length)}, {"tokens_per_unit", tokens},
                    {"encoder_cost_per_unit", encoder}};
    };
    if (name == "text")
        return {{"modalities", {modality("text", "tokens", {{"lognormal", {{"mu", 6}, {"sigma", 1}}}, {"min", 16},
                                                            {"max", 32768}}, 1, 0)}},
                {"phases", {{{"mix", {{"text", 1}}}}}}};
    if (name == "uniform")
        return {{"modalities", {modality("text", "tokens", {{"fixed", 512}}, 1, 0)}},
                {"phases", {{{"mix", {{"text", 1}}}}}}};
    // "paper": MegaScale-Omni (arXiv 2605.08962). Text: lognormal(5.5, 0.9), mean
    // e^(5.5 + 0.405) ~ 367 tokens, clamped to [16, 16384]. Images: three datasets' patch counts,
    // 576, 1024 and 1560 (1560/576 = 2.71x, the paper's spread of image encodings); the vision
    // encoder costs half an LLM token per patch. Audio: sigma 0.8 and mu chosen so that its
    // mean e^(mu + 0.32) is 17.6x text's (mu = 5.905 + ln 17.6 - 0.32 ~ 8.453, mean ~ 6458
    // frames), clamped to [16, 262144]; the audio encoder costs one token per frame. The mix
    // moves from text towards audio as in the paper's curriculum: 200 steps of 0.7/0.25/0.05,
    // 200 of 0.5/0.3/0.2, then 0.3/0.3/0.4 for ever.
    const double text_mu = 5.5, text_sigma = 0.9, audio_sigma = 0.8;
    const double audio_mu = text_mu + text_sigma * text_sigma / 2 + std::log(17.6) - audio_sigma * audio_sigma / 2;
    auto mix = [](double t, double i, double a) { return json{{"text", t}, {"image", i}, {"audio", a}}; };
    return {{"modalities",
             {modality("text", "tokens",
                       {{"lognormal", {{"mu", text_mu}, {"sigma", text_sigma}}}, {"min", 16}, {"max", 16384}}, 1, 0),
              modality("image", "patches", {{"choice", {576, 1024, 1560}}}, 1, 0.5),
              modality("audio", "frames",
                       {{"lognormal", {{"mu", audio_mu}, {"sigma", audio_sigma}}}, {"min", 16}, {"max", 262144}}, 1,
                       1)}},
            {"phases",
             {{{"steps", 200}, {"mix", mix(0.7, 0.25, 0.05)}},
              {{"steps", 200}, {"mix", mix(0.5, 0.3, 0.2)}},
              {{"mix", mix(0.3, 0.3, 0.4)}}}}};
}

}  // namespace

const char *cost_kind_name(CostKind k) {
    switch (k) {
    case CostKind::Tokens: return "tokens";
    case CostKind::Units: return "units";
    case CostKind::Compute: return "compute";
    }
    return "?";
}

Result<CostKind> parse_cost_kind(std::string_view text) {
    for (CostKind k : {CostKind::Tokens, CostKind::Units, CostKind::Compute})
        if (text == cost_kind_name(k)) return k;
    return make_error("cost kind " + omni::quoted(text) + ": expected tokens, units or compute");
}

double Length::mean() const {
    const auto clamp = [this](std::uint64_t x) { return double(std::clamp(x, min, max)); };
    switch (kind) {
    case Kind::Fixed: return clamp(value);
    case Kind::Uniform: {
        // Exact: draws below min count as min, above max as max, the rest as themselves.
        const std::uint64_t n = high - low + 1;
        const std::uint64_t below = min > low ? std::min(min - low, n) : 0;
        const std::uint64_t above = max < high ? std::min(high - max, n) : 0;
        const std::uint64_t mid = n - below - above;  // the draws in [max(low, min), min(high, max)]
        const double first = double(std::max(low, min));
        const double mid_sum = mid ? double(mid) * (first + first + double(mid - 1)) / 2 : 0;
        return (double(below) * double(min) + double(above) * double(max) + mid_sum) / double(n);
    }
    case Kind::Lognormal: return std::exp(mu + sigma * sigma / 2);
    case Kind::Choice: {
        double s = 0;
        for (auto c : choices) s += clamp(c);
        return choices.empty() ? 0 : s / double(choices.size());
    }
    }
    return 0;
}

Result<Workload> Workload::parse(std::string_view text) {
    if (text.size() > kMaxTextBytes)
        return make_error("workload: " + std::to_string(text.size()) + " bytes; at most " +
                          std::to_string(kMaxTextBytes) + " (1 MiB) are read");
    try {
        Scan scan;
        json j;
        try {
            j = json::parse(text.begin(), text.end(), std::ref(scan));
        } catch (const json::parse_error &e) {
            // A nesting or duplicate found before the syntax error is the first thing wrong.
            if (!scan.error.empty()) return make_error(scan.error);
            // Where, not what: nlohmann's message quotes the raw bytes it read.
            const std::size_t at = std::min<std::size_t>(e.byte ? e.byte - 1 : 0, text.size());
            const std::size_t nl = text.rfind('\n', at ? at - 1 : 0);
            const std::size_t line = 1 + std::count(text.begin(), text.begin() + at, '\n');
            const std::size_t column = nl == std::string_view::npos || at == 0 ? at + 1 : at - nl;
            return make_error("workload: not valid JSON (line " + std::to_string(line) + ", column " +
                              std::to_string(column) + ")");
        } catch (const json::out_of_range &) {  // the only one parsing throws: a number beyond a double
            if (!scan.error.empty()) return make_error(scan.error);
            return make_error("workload: not valid JSON: a number beyond a double's range");
        }
        if (!scan.error.empty()) return make_error(scan.error);
        auto parts = read_workload(j);
        if (!parts) return Error{parts.error()};
        Workload w;
        w.modalities_ = std::move(parts.value().modalities);
        w.phases_ = std::move(parts.value().phases);
        return w;
    } catch (const std::exception &e) {  // bad_alloc; nlohmann's type errors would be a bug here
        return make_error(std::string("workload: ") + e.what());
    }
}

// A preset's name wins over a file of that name in the working directory (./paper reads the file).
Result<Workload> Workload::load(const std::string &path_or_preset) {
    const auto names = presets();
    if (std::find(names.begin(), names.end(), path_or_preset) != names.end()) {
        auto w = parse(preset_json(path_or_preset).dump());
        if (!w) return make_error("workload preset " + path_or_preset + ": " + w.error());  // a bug
        return w;
    }
    std::FILE *f = std::fopen(path_or_preset.c_str(), "rb");
    if (!f) return make_error(path_or_preset + ": " + std::strerror(errno));
    std::string text(kMaxTextBytes + 1, '\0');
    const std::size_t n = std::fread(text.data(), 1, text.size(), f);
    const int err = std::ferror(f) ? errno : 0;
    std::fclose(f);
    if (err) return make_error(path_or_preset + ": " + std::strerror(err));
    if (n > kMaxTextBytes) return make_error(path_or_preset + ": larger than 1 MiB (a workload is at most 1 MiB)");
    text.resize(n);
    auto w = parse(text);
    if (!w) return make_error(path_or_preset + ": " + w.error());
    return w;
}

std::vector<std::string> Workload::presets() { return {"paper", "text", "uniform"}; }

std::size_t Workload::phase_at(std::uint64_t step) const {
    for (std::size_t i = 0; i + 1 < phases_.size(); ++i) {  // subtracting: no sum of steps to overflow
        if (step < phases_[i].steps) return i;
        step -= phases_[i].steps;
    }
    return phases_.empty() ? 0 : phases_.size() - 1;
}

Sample Workload::sample(std::uint64_t seed, std::uint64_t index, std::uint64_t step) const {
    Sample s;
    if (modalities_.empty() || phases_.empty()) return s;  // only a default-constructed Workload
    const std::size_t phase_index = phase_at(step);
    const Phase &phase = phases_[phase_index];
    const std::uint64_t key = mix64(mix64(mix64(seed) ^ index) ^ phase_index);
    const auto draw = [key](std::uint64_t k) { return mix64(key + k * 0x9e3779b97f4a7c15ULL); };

    // The modality: the first whose cumulative weight passes u. Rounding may leave the last
    // cumulative a hair below 1: then the last modality with weight > 0.
    const double u = unit_open_high(draw(1));
    double acc = 0;
    std::size_t chosen = modalities_.size();
    for (std::size_t i = 0; i < phase.mix.size(); ++i) {
        if (phase.mix[i] <= 0) continue;
        acc += phase.mix[i];
        chosen = i;
        if (u < acc) break;
    }
    if (chosen == modalities_.size()) chosen = 0;  // not reached: parse refuses an all-zero mix
    s.modality = static_cast<std::uint32_t>(chosen);

    const Length &l = modalities_[chosen].length;
    switch (l.kind) {
    case Length::Kind::Fixed: s.length = l.value; break;
    // At most 2^24 values: the modulo's bias (< 2^-40) does not matter.
    case Length::Kind::Uniform: s.length = l.low + draw(2) % (l.high - l.low + 1); break;
    case Length::Kind::Choice: s.length = l.choices[draw(2) % l.choices.size()]; break;
    case Length::Kind::Lognormal: {
        // Box-Muller; u1 in (0, 1] so log never sees 0 (|z| <= 8.6).
        const double z = std::sqrt(-2 * std::log(unit_open_low(draw(2)))) *
                         std::cos(kTwoPi * unit_open_high(draw(3)));
        s.length = clamp_length(std::round(std::exp(l.mu + l.sigma * z)), l);
        return s;
    }
    }
    s.length = std::clamp(s.length, l.min, l.max);
    return s;
}

std::uint64_t Workload::cost(const Sample &s, CostKind kind) const {
    // length <= 2^24 and factors <= 2^15: each product is at most 2^39 and exact in a double's
    // 53 bits of integer; Compute is at most 2^40, the balancer's kMaxCost.
    if (s.modality >= modalities_.size()) return 0;
    const Modality &m = modalities_[s.modality];
    const std::uint64_t tokens = std::max<std::uint64_t>(1, ceil_product(s.length, m.tokens_per_unit));
    switch (kind) {
    case CostKind::Tokens: return tokens;
    case CostKind::Units: return s.length;
    case CostKind::Compute: return tokens + ceil_product(s.length, m.encoder_cost_per_unit);
    }
    return 0;
}

std::string Workload::to_json() const {
    json mods = json::array(), phases = json::array();
    for (const auto &m : modalities_) {
        const Length &l = m.length;
        json length{{"min", l.min}, {"max", l.max}};
        switch (l.kind) {
        case Length::Kind::Fixed: length["fixed"] = l.value; break;
        case Length::Kind::Uniform: length["uniform"] = {l.low, l.high}; break;
        case Length::Kind::Lognormal: length["lognormal"] = {{"mu", l.mu}, {"sigma", l.sigma}}; break;
        case Length::Kind::Choice: length["choice"] = l.choices; break;
        }
        mods.push_back({{"name", m.name}, {"unit", m.unit}, {"length", std::move(length)},
                        {"tokens_per_unit", m.tokens_per_unit}, {"encoder_cost_per_unit", m.encoder_cost_per_unit}});
    }
    for (const auto &p : phases_) {
        json mix = json::object();
        for (std::size_t i = 0; i < p.mix.size() && i < modalities_.size(); ++i) mix[modalities_[i].name] = p.mix[i];
        json phase{{"mix", std::move(mix)}};
        if (p.steps) phase["steps"] = p.steps;
        phases.push_back(std::move(phase));
    }
    // nlohmann writes doubles with the fewest digits that read back to the same double.
    return json{{"modalities", std::move(mods)}, {"phases", std::move(phases)}}.dump();
}

}  // namespace omni::workload
