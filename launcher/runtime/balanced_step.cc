// Grouped reordering in the data path; see runtime/balanced_step.h.
#include "runtime/balanced_step.h"

#include <algorithm>
#include <cmath>

namespace omni::launcher {

Result<BalanceOptions> parse_balance(std::string_view text) {
    const auto bad = [&] {
        return make_error("balance '" + std::string(text.substr(0, 32)) +
                          "': expected none, lpt, kk, grouped (kk per node), lssp, or POLICY:SCOPE with "
                          "POLICY none, lpt or kk and SCOPE job or node");
    };
    if (text == "grouped") return BalanceOptions{balance::Policy::Kk, BalanceScope::node};
    if (text == "lssp") {
        BalanceOptions o;
        o.lssp = true;
        o.lssp_options.memory_tokens = 32768;
        o.lssp_options.max_degree = 8;
        o.lssp_options.cost.sp_comm_per_token = 0.1;
        return o;
    }
    const auto colon = text.find(':');
    auto policy = balance::parse_policy(std::string(text.substr(0, colon)));
    if (!policy) return bad();
    BalanceOptions o{policy.value(), BalanceScope::job};
    if (colon == std::string_view::npos) return o;
    const std::string_view scope = text.substr(colon + 1);
    if (scope == "node")
        o.scope = BalanceScope::node;
    else if (scope != "job")
        return bad();
    return o;
}

std::string balance_name(const BalanceOptions &o) {
    if (o.lssp) return "lssp";
    std::string s = balance::policy_name(o.policy);
    if (o.active()) s += o.scope == BalanceScope::node ? ":node" : ":job";
    return s;
}

std::uint64_t locality_key(std::string_view node) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : node) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

std::uint64_t StepPlan::max_cost() const { return costs.empty() ? 0 : *std::max_element(costs.begin(), costs.end()); }

double StepPlan::mean_cost() const {
    if (costs.empty()) return 0;
    double total = 0;
    for (auto c : costs) total += static_cast<double>(c);
    return total / static_cast<double>(costs.size());
}

double StepPlan::imbalance() const {
    const double mean = mean_cost();
    return mean > 0 ? static_cast<double>(max_cost()) / mean : 0;
}

Result<std::vector<std::uint64_t>> plan_record(std::uint64_t key, const std::vector<std::uint64_t> &share,
                                               std::uint64_t step, const CostFn &cost) {
    std::vector<std::uint64_t> rec;
    rec.reserve(1 + share.size());
    rec.push_back(key);
    for (std::uint64_t index : share) {
        const std::uint64_t c = cost(index, step);
        if (c > balance::kMaxCost)
            return make_error("balance: the cost function gave sample " + std::to_string(index) + " (step " +
                              std::to_string(step) + ") cost " + std::to_string(c) + "; at most " +
                              std::to_string(balance::kMaxCost));
        rec.push_back(c);
    }
    return rec;
}

namespace {

Result<StepPlan> plan_lssp_step(const std::vector<std::uint64_t> &step_samples,
                                const std::vector<std::uint64_t> &lengths, std::uint32_t dp_size, std::uint32_t dp_rank,
                                balance::LsspOptions o) {
    // The largest degree must divide the replicas: the largest power of two that does.
    while (o.max_degree > 1 && dp_size % o.max_degree) o.max_degree /= 2;
    auto plan = balance::plan_lssp(lengths, dp_size, o);
    if (!plan) return Error{plan.error()};
    const balance::LsspPlan &l = plan.value();
    StepPlan p;
    p.lssp = true;
    p.over_memory = l.over_memory;
    p.dp_rank = dp_rank;
    p.dp_size = dp_size;
    for (double t : l.time) p.costs.push_back(static_cast<std::uint64_t>(std::ceil(t)));
    p.time = l.time[dp_rank];
    for (std::uint32_t i : l.whole[dp_rank]) p.samples.push_back(step_samples[i]);
    for (const auto &s : l.split) {
        if (dp_rank < s.first || dp_rank >= s.first + s.degree) continue;
        p.shards.push_back({step_samples[s.position], s.degree, dp_rank - s.first});
        if (dp_rank == s.first) p.samples.push_back(step_samples[s.position]);
    }
    return p;
}

}  // namespace

Result<StepPlan> plan_step(const std::vector<std::uint64_t> &step_samples, const std::vector<std::uint64_t> &gathered,
                           std::uint32_t dp_size, std::uint32_t dp_rank, const BalanceOptions &options) {
    if (dp_size == 0 || dp_rank >= dp_size || step_samples.size() % dp_size != 0)
        return make_error("balance: " + std::to_string(step_samples.size()) + " samples over DP rank " +
                          std::to_string(dp_rank) + " of " + std::to_string(dp_size));
    const std::size_t m = step_samples.size() / dp_size;
    if (gathered.size() != std::size_t(dp_size) * (1 + m))
        return make_error("balance: the all-gather holds " + std::to_string(gathered.size()) + " values; expected " +
                          std::to_string(std::size_t(dp_size) * (1 + m)));
    std::vector<std::uint64_t> costs, labels(dp_size, 0);
    costs.reserve(step_samples.size());
    for (std::uint32_t r = 0; r < dp_size; ++r) {
        const std::uint64_t *rec = gathered.data() + std::size_t(r) * (1 + m);
        if (options.scope == BalanceScope::node) labels[r] = rec[0];
        costs.insert(costs.end(), rec + 1, rec + 1 + m);
    }
    if (options.lssp) return plan_lssp_step(step_samples, costs, dp_size, dp_rank, options.lssp_options);
    auto a = balance::partition_by_group(costs, labels, options.policy);
    if (!a) return Error{a.error()};
    StepPlan p;
    p.dp_rank = dp_rank;
    p.dp_size = dp_size;
    p.costs.assign(dp_size, 0);
    for (std::uint32_t r = 0; r < dp_size; ++r)
        for (std::uint32_t i : a.value()[r]) p.costs[r] += costs[i];
    p.samples.reserve(m);
    for (std::uint32_t i : a.value()[dp_rank]) p.samples.push_back(step_samples[i]);
    return p;
}

}  // namespace omni::launcher
