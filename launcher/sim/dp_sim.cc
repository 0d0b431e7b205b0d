// omni-sim's data-parallel part; see sim/dp_sim.h.
#include "sim/dp_sim.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace omni::sim {

Result<std::vector<StepCost>> simulate(const DpJob &job, const workload::Workload &w,
                                       const std::vector<std::uint32_t> &replicas) {
    if (job.replicas_per_node == 0) return make_error("0 replicas per node");
    if (replicas.empty()) return std::vector<StepCost>{};
    auto made = launcher::Ledger::create(job.ledger, replicas.front());
    if (!made) return make_error("step 1: " + made.error());
    launcher::Ledger ledger = std::move(made).value();
    std::vector<StepCost> out;
    out.reserve(replicas.size());
    std::vector<std::uint64_t> gathered;
    for (std::size_t k = 0; k < replicas.size(); ++k) {
        const std::uint32_t d = replicas[k];
        if (d != ledger.dp_size())
            if (auto st = ledger.resize(d); !st) return make_error("step " + std::to_string(k + 1) + ": " + st.error());
        const std::vector<std::uint64_t> samples = ledger.step_samples();
        const std::size_t m = samples.size() / d;
        // The all-gather's records, as the d replicas would send them (the runtime's own
        // plan_record), a node's replicas sharing a key.
        const launcher::CostFn cost = [&](std::uint64_t index, std::uint64_t step) {
            return w.cost(job.ledger.seed, index, step, job.cost);
        };
        gathered.clear();
        for (std::uint32_t r = 0; r < d; ++r) {
            const std::vector<std::uint64_t> share(samples.begin() + static_cast<std::ptrdiff_t>(r * m),
                                                   samples.begin() + static_cast<std::ptrdiff_t>((r + 1) * m));
            auto rec = launcher::plan_record(r / job.replicas_per_node, share, ledger.step(), cost);
            if (!rec) return make_error("step " + std::to_string(k + 1) + ": " + rec.error());
            gathered.insert(gathered.end(), rec.value().begin(), rec.value().end());
        }
        std::uint64_t largest = 0;
        for (std::size_t i = 0; i < gathered.size(); ++i)
            if (i % (m + 1)) largest = std::max(largest, gathered[i]);  // not a record's key
        const auto t0 = std::chrono::steady_clock::now();
        auto plan = launcher::plan_step(samples, gathered, d, 0, job.balance);
        const auto t1 = std::chrono::steady_clock::now();
        if (!plan) return make_error("step " + std::to_string(k + 1) + ": " + plan.error());
        StepCost c;
        c.step = k + 1;
        c.replicas = d;
        c.slowest = plan.value().max_cost();
        c.largest = largest;
        for (auto x : plan.value().costs) c.total += x;
        c.plan_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
        out.push_back(c);
        if (auto st = ledger.commit_step(); !st) return make_error(st.error());
    }
    return out;
}

Result<std::vector<std::vector<std::uint64_t>>> step_costs(const DpJob &job, const workload::Workload &w,
                                                           std::uint64_t count, std::uint32_t replicas) {
    auto made = launcher::Ledger::create(job.ledger, replicas);
    if (!made) return make_error(made.error());
    launcher::Ledger ledger = std::move(made).value();
    std::vector<std::vector<std::uint64_t>> out;
    for (std::uint64_t k = 0; k < count; ++k) {
        std::vector<std::uint64_t> c;
        for (std::uint64_t i : ledger.step_samples()) c.push_back(w.cost(job.ledger.seed, i, ledger.step(), job.cost));
        out.push_back(std::move(c));
        if (auto st = ledger.commit_step(); !st) return make_error(st.error());
    }
    return out;
}

}  // namespace omni::sim
