// omni-sim's data-parallel part: what each step of a job costs its slowest replica under a
// balancing policy, computed by the runtime's own ledger and planner (runtime/ledger.h,
// runtime/balanced_step.h) on a workload's costs (workload/workload.h), without ranks.
//
// Why it is shaped like this:
//  - The simulator must predict a real run, so it must not have a planner of its own: the
//    same ledger gives the same samples per step, the same plan_step() the same split, and a
//    real run's metrics ("cost": [slowest, total]) can be checked against it value for value.
//  - Time is a model on top (TimeModel): a step takes its slowest replica's cost times a
//    time per token, plus a fixed overhead per step (collectives, the boundary). A real run
//    calibrates both: the pace it sleeps per token, and the step time of a run that sleeps
//    nothing.
#ifndef OMNI_LAUNCHER_SIM_DP_SIM_H
#define OMNI_LAUNCHER_SIM_DP_SIM_H

#include <algorithm>
#include <cstdint>
#include <vector>

#include "omni/result.h"
#include "runtime/balanced_step.h"
#include "runtime/ledger.h"
#include "workload/workload.h"

namespace omni::sim {

struct DpJob {
    launcher::LedgerConfig ledger;        // D, B, b, seed (b only sets GA; costs ignore it)
    std::uint32_t replicas_per_node = 1;  // node scope: replicas k*g .. k*g+g-1 share a node
    launcher::BalanceOptions balance;
    workload::CostKind cost = workload::CostKind::Tokens;
};

struct StepCost {
    std::uint64_t step = 0;  // 1-based, as the trainer's metrics count
    std::uint32_t replicas = 0;
    std::uint64_t slowest = 0, total = 0;  // the slowest replica's cost, and the step's
    std::uint64_t largest = 0;             // the step's costliest sample
    double plan_us = 0;                    // wall time of the plan (partition), microseconds
    double imbalance() const {             // slowest / mean (1: perfect)
        return total ? static_cast<double>(slowest) * replicas / static_cast<double>(total) : 0;
    }
    // The least imbalance any split of whole samples can reach: a replica holds at least the
    // costliest sample, and at least the mean. Above 1 when one sample outweighs a replica's
    // mean share, which only splitting that sample (LSSP) helps.
    double bound() const {
        if (!total) return 0;
        const double mean = static_cast<double>(total) / replicas;
        return std::max(static_cast<double>(largest), mean) / mean;
    }
};

// Steps 1..replicas.size() of `job`, step k with replicas[k-1] replicas (a resize changes
// them; the ledger's samples do not depend on it). Errors: a replica count that does not
// divide B or is 0, or replicas_per_node 0 (the messages name the step and the numbers).
Result<std::vector<StepCost>> simulate(const DpJob &job, const workload::Workload &w,
                                       const std::vector<std::uint32_t> &replicas);

// Every sample's cost, step by step (steps 1..count, the ledger's order), for the planners
// that work on whole steps (balance/lssp.h). Errors: as simulate()'s.
Result<std::vector<std::vector<std::uint64_t>>> step_costs(const DpJob &job, const workload::Workload &w,
                                                           std::uint64_t count, std::uint32_t replicas);

struct TimeModel {
    double ns_per_token = 1000;  // per unit of the cost
    double overhead_ms = 0;      // per step
    double step_ms(const StepCost &c) const {
        return static_cast<double>(c.slowest) * ns_per_token * 1e-6 + overhead_ms;
    }
};

}  // namespace omni::sim

#endif
