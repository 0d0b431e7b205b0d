// Grouped reordering in the data path (MegaScale-Omni's decentralized grouped reordering):
// which of the step's samples each data-parallel replica computes, so that the slowest
// replica's cost is as small as the policy makes it.
//
// Why it is shaped like this:
//  - The ledger fixes the step's B samples and gives DP rank r the contiguous share
//    [r*B/d, (r+1)*B/d) (runtime/ledger.h). Reordering only moves samples between replicas
//    of one locality group, so the step's samples, the ledger's state, checkpoints and the
//    exactly-once property are the same with and without it, and so is the gradient of a
//    trainer whose sums do not depend on the order (the reference trainer's exact integer
//    sums): the loss is bitwise the same under every policy.
//  - Each replica knows the costs of its own share only (its loader read their metadata:
//    modality, length). One all-gather over the DP group carries every replica's locality key
//    and costs; then every replica runs the same deterministic partition (balance/balance.h)
//    and takes its part. The samples are addressed by index (a map-style dataset), so a
//    replica loads the samples it was given; none travel through the runtime.
//  - The M ranks of a replica must compute on the same samples, and they may sit on several
//    nodes and see other costs (another libm): each replica's record, its locality key (its
//    MP rank 0's node: SLURMD_NODENAME, else the host name) and its costs, is MP rank 0's,
//    broadcast over the MP group before the all-gather, so every DP group plans alike.
//  - The all-gather spans the DP group, not just the locality group: B 64-bit costs in all
//    (16 KiB at B = 2048), far below a step's gradient traffic, and it needs no communicator
//    per locality group. The partition itself runs per group, so a group's result is what a
//    group-local all-gather would give.
#ifndef OMNI_LAUNCHER_RUNTIME_BALANCED_STEP_H
#define OMNI_LAUNCHER_RUNTIME_BALANCED_STEP_H

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "balance/balance.h"
#include "balance/lssp.h"
#include "omni/result.h"

namespace omni::launcher {

enum class BalanceScope {
    job,  // one group: every replica of the DP group
    node  // a group per node: samples move only between replicas on one node
};

struct BalanceOptions {
    BalanceOptions(balance::Policy p = balance::Policy::None, BalanceScope s = BalanceScope::job)
        : policy(p), scope(s) {}
    balance::Policy policy = balance::Policy::None;
    BalanceScope scope = BalanceScope::job;
    // LSSP (balance/lssp.h) instead of a partition: long samples split over aligned blocks of
    // replicas, the rest whole; the costs are the samples' lengths in tokens. Scope job only.
    // Its largest degree is capped at the largest power of two dividing the DP size, which
    // resizes change.
    bool lssp = false;
    balance::LsspOptions lssp_options;
    bool active() const { return lssp || policy != balance::Policy::None; }
};

// "none", "lpt", "kk" (scope job), "grouped" (kk per node), "POLICY:SCOPE" with SCOPE job
// or node ("lpt:node"), or "lssp" (lssp_options at their defaults: memory 32768 tokens,
// degrees up to 8, cost = tokens, a split sample's exchange 0.1 a token). Errors name the
// text and the choices.
Result<BalanceOptions> parse_balance(std::string_view text);
std::string balance_name(const BalanceOptions &o);

// A sample's cost (tokens, patches, frames, compute: balance/balance.h's integers, at most
// balance::kMaxCost) from its global index and the step (0-based, the ledger's committed
// steps) that consumes it.
using CostFn = std::function<std::uint64_t(std::uint64_t index, std::uint64_t step)>;

// The locality key of a host name: FNV-1a, 64 bits.
std::uint64_t locality_key(std::string_view node);

// One step's plan, the same on every replica of the DP group.
struct StepPlan {
    std::uint64_t step = 0;  // the ledger's committed steps when it was made
    std::uint64_t generation = 0;
    std::uint32_t dp_rank = 0, dp_size = 0;
    std::vector<std::uint64_t> samples;  // this replica's B/d indices, in order; with LSSP the
                                         // samples it computes (whole, and split ones it leads)
    std::vector<std::uint64_t> costs;    // every replica's summed cost (DP rank order); with
                                         // LSSP its time in the plan's model, rounded up
    // LSSP: the split samples this replica takes a shard of (it leads shard 0), and its time.
    struct Shard {
        std::uint64_t index = 0;
        std::uint32_t degree = 1, shard = 0;
    };
    std::vector<Shard> shards;
    double time = 0;
    bool lssp = false;            // an LSSP plan: replicas do unequal work
    std::size_t over_memory = 0;  // LSSP: samples above the memory limit even at the largest degree
    std::uint64_t max_cost() const;
    double mean_cost() const;
    // max / mean of the replicas' costs (1: perfect; 0 when every cost is 0).
    double imbalance() const;
};

// The record DP rank r sends in the all-gather: its locality key, then its share's costs.
// Errors: a cost above balance::kMaxCost (the message names the sample index and its cost).
Result<std::vector<std::uint64_t>> plan_record(std::uint64_t key, const std::vector<std::uint64_t> &share,
                                               std::uint64_t step, const CostFn &cost);

// From the step's samples in stream order (Ledger::step_samples(): replica r's share at
// [r*m, (r+1)*m)) and the d records of the all-gather, replica `dp_rank`'s plan. Errors: the
// gathered length does not match d*(1 + B/d), or the partition's (balance/balance.h).
Result<StepPlan> plan_step(const std::vector<std::uint64_t> &step_samples, const std::vector<std::uint64_t> &gathered,
                           std::uint32_t dp_size, std::uint32_t dp_rank, const BalanceOptions &options);

}  // namespace omni::launcher

#endif
