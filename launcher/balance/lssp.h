// LSSP, long/short sequence parallelism (MegaScale-Omni): within a step, short samples stay
// data parallel, each computed whole by one replica, while a long sample is split over k
// replicas (sequence parallel) so that no replica holds more than a memory limit and no
// replica waits for one sample far longer than the others. The planner picks the split
// threshold and each long sample's degree k from a cost model and the memory limit, and
// places the work; pure, like balance.h.
//
// Why it is shaped like this:
//  - Whole-sample balancing (balance.h) cannot go below the costliest sample: on the paper's
//    mixes one audio sample often outweighs a replica's mean share (omni-sim's BOUND column).
//    Splitting only the samples above a threshold keeps the short ones free of sequence-
//    parallel communication, which a static degree for every sample pays on all of them.
//  - Degrees are powers of two and a degree-k sample runs on an aligned block of k replicas
//    (replicas j*k .. j*k+k-1). So the sequence-parallel groups a plan can use are a fixed
//    set, P/k blocks per degree, built once for the job: a step's long samples shift to the
//    groups that exist (temporal state shifting) instead of the job building the groups each
//    step needs (resharding). groups_built_on_demand() counts what the latter would build.
//  - Time is a model: a sample of L tokens costs per_token*L + quadratic*L^2 computed whole;
//    split over k each replica pays a k-th of that, plus the sequence-parallel exchange
//    sp_comm_per_token*L*(k-1)/k and a latency. The threshold is chosen among the step's own
//    lengths by the makespan: kMaxCandidates spread over them, then as many around the best.
#ifndef OMNI_LAUNCHER_BALANCE_LSSP_H
#define OMNI_LAUNCHER_BALANCE_LSSP_H

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni::balance {

struct SpCostModel {
    double per_token = 1;          // compute per token, whole sample
    double quadratic = 0;          // compute per token^2 (attention's quadratic part)
    double sp_comm_per_token = 0;  // a split sample's exchange, per token and (k-1)/k
    double sp_latency = 0;         // a split sample's fixed cost on each of its replicas
    // One replica's time for a sample of `length` tokens split over k (k = 1: whole).
    double time(std::uint64_t length, std::uint32_t k) const;
};

struct LsspOptions {
    std::uint64_t memory_tokens = 0;  // most tokens of one sample a replica may hold; >= 1
    std::uint32_t max_degree = 1;     // largest split, a power of two dividing the replicas
    SpCostModel cost;
};

constexpr std::size_t kMaxCandidates = 16;  // thresholds tried per pass (two passes)

struct SpSample {
    std::uint32_t position = 0;  // index into the lengths
    std::uint32_t degree = 1;    // k
    std::uint32_t first = 0;     // replicas first .. first+degree-1 (first % degree == 0)
};

struct LsspPlan {
    // Samples longer than this are split (UINT64_MAX: none is).
    std::uint64_t threshold = UINT64_MAX;
    std::vector<SpSample> split;                    // the long samples, costliest first
    std::vector<std::vector<std::uint32_t>> whole;  // per replica, the short samples' positions
    std::vector<double> time;                       // per replica, the model's time
    double makespan = 0;                            // the slowest replica's time
    std::uint64_t peak_tokens = 0;                  // the most tokens of one sample a replica holds
    std::size_t over_memory = 0;                    // samples whose shards exceed the memory even at the largest degree
    // The aligned blocks (degree, first replica) the plan uses.
    std::set<std::pair<std::uint32_t, std::uint32_t>> groups() const;
};

// The best plan for one step's samples (lengths in tokens) over `replicas` replicas, each
// starting from its `load` (time planned before, e.g. the earlier micro-batches of a step;
// empty: none), which the plan's times and makespan include. A sample
// longer than memory_tokens * max_degree is split over the largest degree all the same and
// counted in over_memory: the step runs (a trainer may run out of memory on it), the caller
// decides whether to say so. Errors: no replicas, more than kMaxSamples samples, a length
// above kMaxCost, max_degree not a power of two dividing the replicas, memory_tokens 0, loads
// not one per replica or not finite and >= 0.
Result<LsspPlan> plan_lssp(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas,
                           const LsspOptions &options, const std::vector<double> &load = {});

// The same samples with one degree for all (the baseline without LSSP: static sequence
// parallelism, the smallest power of two that fits the longest sample in memory; every
// sample split that way, blocks filled least loaded first). Errors as plan_lssp's.
Result<LsspPlan> plan_static_sp(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas,
                                const LsspOptions &options);

// Resharding against state shifting over consecutive steps: the groups a step uses that the
// step before did not (what building groups on demand would build at that step), summed.
std::size_t groups_built_on_demand(const std::vector<LsspPlan> &steps);
// The groups state shifting builds once: every aligned block of every degree 2..max_degree.
std::size_t groups_prebuilt(std::uint32_t replicas, std::uint32_t max_degree);

}  // namespace omni::balance

#endif
