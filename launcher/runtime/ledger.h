// The sample ledger: which global sample indices each data-parallel rank processes in each
// micro-step, and how far the job has got through the data.
//
// Why it is shaped like this:
//  - The samples of step k are a function of k alone, never of the DP size. The data is one
//    endless stream, the concatenation of per-epoch permutations of [0, D); step k consumes
//    stream positions [k*B, (k+1)*B). Membership changes only at step boundaries, so any
//    sequence of resizes consumes every sample of every epoch exactly once: that property is
//    structural, not bookkeeping that a resize could get wrong. A step that crosses the end of
//    an epoch takes the rest of that epoch and the start of the next one.
//  - Inside a step, DP rank r of d owns the contiguous slice [r*B/d, (r+1)*B/d) of the
//    step's B samples and walks it in GA = B/(b*d) micro-batches of b. Contiguous slices keep
//    "reduce in global sample order" cheap for a trainer that wants DP-size-independent sums.
//  - The epoch permutation is a keyed Feistel bijection evaluated per index (cycle-walking
//    onto [0, D)), so it costs O(1) memory for any dataset size and needs no shared state: every
//    rank, a joiner, and a restore from a checkpoint compute the same order from (seed, epoch).
//  - The whole state is (D, B, b, seed, d, committed steps); it serialises to a small JSON
//    object that checkpoints store and load() validates field by field.
#ifndef OMNI_LAUNCHER_LEDGER_H
#define OMNI_LAUNCHER_LEDGER_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

// Bounds keep every product below 2^63 (positions are step * B).
constexpr std::uint64_t kMaxDatasetSize = std::uint64_t(1) << 48;
constexpr std::uint64_t kMaxGlobalBatch = std::uint64_t(1) << 40;
constexpr std::uint32_t kMaxDpSize = 1u << 20;
constexpr std::uint64_t kMaxSteps = std::uint64_t(1) << 62;

// A keyed bijection of [0, n), n >= 1. Deterministic across platforms (only 64-bit integer
// arithmetic), cheap to construct, O(1) memory.
class Permutation {
public:
    Permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);
    std::uint64_t operator()(std::uint64_t i) const;   // i < n
    std::uint64_t size() const { return n_; }

private:
    std::uint64_t round(unsigned r, std::uint64_t half) const;
    std::uint64_t n_;
    unsigned half_bits_;            // the domain is 2^(2*half_bits_) >= n
    std::uint64_t half_mask_;
    std::uint64_t keys_[6];
};

// GA = B / (b * d), or an error that names the three numbers when it is not a positive integer.
Result<std::uint32_t> derive_grad_accum(std::uint64_t global_batch, std::uint64_t micro_batch,
                                        std::uint32_t dp_size);

struct LedgerConfig {
    std::uint64_t dataset_size = 0;  // D
    std::uint64_t global_batch = 0;  // B
    std::uint64_t micro_batch = 0;   // b
    std::uint64_t seed = 0;
};

class Ledger {
public:
    // Validates the configuration and that GA is integral for dp_size.
    static Result<Ledger> create(const LedgerConfig &cfg, std::uint32_t dp_size);
    // Restores a ledger from serialise()'s output; every field is checked.
    static Result<Ledger> load(std::string_view json);

    const LedgerConfig &config() const { return cfg_; }
    std::uint32_t dp_size() const { return dp_size_; }
    std::uint32_t grad_accum() const { return ga_; }
    std::uint64_t step() const { return step_; }            // committed steps so far
    std::uint64_t epoch() const;                            // epoch of the next sample
    std::uint64_t consumed_in_epoch() const;                // samples of that epoch consumed

    // The b global sample indices of DP rank `rank`, micro-step `micro` of the current
    // (uncommitted) step. Errors name the rank or micro-step that is out of range.
    Result<std::vector<std::uint64_t>> micro_batch(std::uint32_t rank, std::uint32_t micro) const;
    // DP rank `rank`'s B/d indices of the current step in order: its micro-batches, joined.
    Result<std::vector<std::uint64_t>> share(std::uint32_t rank) const;
    // All B indices of the current step in stream order (rank 0's slice first).
    std::vector<std::uint64_t> step_samples() const;
    // The sample at absolute stream position p (epoch p / D, offset p % D).
    std::uint64_t sample_at(std::uint64_t position) const;

    // Marks the current step's samples consumed; called once all ranks finished the step
    // (at the boundary). Fails only when the step counter would overflow kMaxSteps.
    Status commit_step();
    // A new DP size, only meaningful at a step boundary (the ledger has no partial steps).
    // On error the ledger is unchanged.
    Status resize(std::uint32_t dp_size);
    // Continues this ledger (loaded from a checkpoint) in a run configured with `cfg`, at DP
    // size `dp_size`. The data order must be the checkpoint's: another dataset size, global
    // batch or seed would give the steps still to come other samples, so that some samples
    // of the epoch are used twice and others never; the error names the field and both
    // values. The micro-batch is the run's own: it only sets GA, not which samples a step
    // takes (a run resumed on smaller GPUs may take smaller micro-batches). On error the
    // ledger is unchanged.
    Status resume_as(const LedgerConfig &cfg, std::uint32_t dp_size);

    std::string serialise() const;

private:
    Ledger(const LedgerConfig &cfg, std::uint32_t dp, std::uint32_t ga, std::uint64_t step)
        : cfg_(cfg), dp_size_(dp), ga_(ga), step_(step) {}
    LedgerConfig cfg_;
    std::uint32_t dp_size_;
    std::uint32_t ga_;
    std::uint64_t step_;
};

}  // namespace omni::launcher

#endif
