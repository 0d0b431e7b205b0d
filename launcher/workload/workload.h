// Synthetic multimodal workloads: what a step's samples cost, for the balancing policies
// (launcher/balance/), the reference trainer's paced runs (omni-train-demo --workload) and
// omni-sim.
//
// Why it is shaped like this:
//  - MegaScale-Omni's imbalance comes from the lengths of samples of different modalities
//    (image encodings of different datasets up to 2.71x apart in length, audio 17.6x longer
//    than text on average) and from a mix of modalities that changes over training. So a
//    workload is a list of modalities, each with a length distribution in its own unit
//    (tokens, patches, frames), and a list of phases, each a mix of modalities over a number
//    of steps; the last phase lasts for ever.
//  - A sample's modality and length are a pure function of (seed, sample index, the step that
//    consumes it): every rank, a joiner and omni-sim see the same workload without sharing
//    state, and a run is repeatable. The functions use only 64-bit integer hashing and
//    <cmath>'s log/exp/sqrt/cos, so two machines with other libm builds may differ by one in
//    a length; the runtime plans a step with the costs one rank of each replica computed,
//    all-gathered, so ranks never disagree about a step (runtime/balanced_step.h).
//  - Bounds: lengths up to 2^24 and factors up to 2^15 keep a sample's tokens and its
//    encoder part below 2^39 each, so every cost kind fits balance::kMaxCost (2^40).
//  - Costs are integers (balance/balance.h): the LLM tokens a sample becomes, its length in
//    its own unit, or the compute of encoder plus LLM in token-equivalents.
#ifndef OMNI_LAUNCHER_WORKLOAD_WORKLOAD_H
#define OMNI_LAUNCHER_WORKLOAD_WORKLOAD_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni::workload {

// Bounds on what a file may ask for: a workload is data from users.
constexpr std::size_t kMaxModalities = 16;
constexpr std::size_t kMaxPhases = 256;
constexpr std::size_t kMaxChoices = 256;
constexpr std::size_t kMaxNameLength = 32;
constexpr std::uint64_t kMaxLength = std::uint64_t(1) << 24;      // per sample, in its unit
constexpr double kMaxFactor = 1 << 15;                             // tokens or compute per unit

// A length distribution; every draw is clamped to [min, max] (1 <= min <= max <= kMaxLength).
struct Length {
    enum class Kind { Fixed, Uniform, Lognormal, Choice };
    Kind kind = Kind::Fixed;
    std::uint64_t value = 1;               // Fixed
    std::uint64_t low = 1, high = 1;       // Uniform: integers in [low, high]
    double mu = 0, sigma = 0;              // Lognormal: exp(N(mu, sigma^2)), rounded
    std::vector<std::uint64_t> choices;    // Choice: one of these, equally likely
    std::uint64_t min = 1, max = kMaxLength;
    double mean() const;                   // of the clamped distribution (exact for all but
                                           // Lognormal, whose clamping is ignored)
};

struct Modality {
    std::string name;                   // [A-Za-z0-9_-], 1..kMaxNameLength, unique
    std::string unit = "tokens";        // what a length counts: tokens, patches, frames, ...
    Length length;
    double tokens_per_unit = 1;         // LLM tokens the encoder makes of one unit (0 < f)
    double encoder_cost_per_unit = 0;   // encoder compute per unit, in LLM-token equivalents
};

struct Phase {
    std::uint64_t steps = 0;            // >= 1; 0 (not given) only for the last phase, which
                                        // lasts for ever whatever its steps
    std::vector<double> mix;            // per modality, >= 0, not all 0; normalised on parse
};

struct Sample {
    std::uint32_t modality = 0;
    std::uint64_t length = 0;           // in the modality's unit
};

// What a cost counts (the balancing policies minimise the slowest replica's sum of it).
enum class CostKind {
    Tokens,   // the LLM tokens the sample becomes: ceil(length * tokens_per_unit), at least 1
    Units,    // its length in its own unit (tokens, patches, frames)
    Compute   // encoder plus LLM: tokens + ceil(length * encoder_cost_per_unit)
};
const char *cost_kind_name(CostKind k);
// "tokens", "units" or "compute"; else an error naming the text and the choices.
Result<CostKind> parse_cost_kind(std::string_view text);

class Workload {
public:
    // From JSON text (the format in omni-workload(5)). Every error names the field
    // (e.g. "modalities[2].length.sigma") and what was expected; unknown keys are errors.
    static Result<Workload> parse(std::string_view json);
    // A file, or the name of a built-in workload (presets()).
    static Result<Workload> load(const std::string &path_or_preset);
    // The built-in workloads' names: "paper" (MegaScale-Omni's mix: text, images of three
    // datasets up to 2.71x apart, audio 17.6x text's mean length, the mix moving from text
    // towards audio over three phases), "text" (text only, long-tailed), "uniform" (every
    // sample the same length: no imbalance to remove).
    static std::vector<std::string> presets();

    const std::vector<Modality> &modalities() const { return modalities_; }
    const std::vector<Phase> &phases() const { return phases_; }
    // The phase that step `step` (0-based, as the ledger counts committed steps) is in.
    std::size_t phase_at(std::uint64_t step) const;

    // Sample `index` as step `step` consumes it, under `seed`.
    Sample sample(std::uint64_t seed, std::uint64_t index, std::uint64_t step) const;
    std::uint64_t cost(const Sample &s, CostKind kind) const;
    std::uint64_t cost(std::uint64_t seed, std::uint64_t index, std::uint64_t step, CostKind kind) const {
        return cost(sample(seed, index, step), kind);
    }

    // Canonical JSON (parse(to_json()) gives the same workload).
    std::string to_json() const;

private:
    std::vector<Modality> modalities_;
    std::vector<Phase> phases_;
};

}  // namespace omni::workload

#endif
