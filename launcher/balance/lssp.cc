// LSSP's planner; see balance/lssp.h.
#include "balance/lssp.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <queue>
#include <string>

#include "balance/balance.h"

namespace omni::balance {

double SpCostModel::time(std::uint64_t length, std::uint32_t k) const {
    const double l = static_cast<double>(length);
    double t = (per_token * l + quadratic * l * l) / k;
    if (k > 1) t += sp_comm_per_token * l * static_cast<double>(k - 1) / k + sp_latency;
    return t;
}

std::set<std::pair<std::uint32_t, std::uint32_t>> LsspPlan::groups() const {
    std::set<std::pair<std::uint32_t, std::uint32_t>> g;
    for (const auto &s : split) g.insert({s.degree, s.first});
    return g;
}

namespace {

bool power_of_two(std::uint32_t x) { return x && !(x & (x - 1)); }

Status check(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas, const LsspOptions &o) {
    if (replicas == 0) return make_error("lssp: 0 replicas; expected at least 1");
    if (lengths.size() > kMaxSamples)
        return make_error("lssp: " + std::to_string(lengths.size()) + " samples; at most " +
                          std::to_string(kMaxSamples));
    if (o.memory_tokens == 0) return make_error("lssp: a memory limit of 0 tokens; expected at least 1");
    if (!power_of_two(o.max_degree) || replicas % o.max_degree)
        return make_error("lssp: largest degree " + std::to_string(o.max_degree) +
                          ": expected a power of two that divides the " + std::to_string(replicas) + " replicas");
    for (std::size_t i = 0; i < lengths.size(); ++i)
        if (lengths[i] > kMaxCost)
            return make_error("lssp: sample " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                              " tokens; at most " + std::to_string(kMaxCost));
    return Status::success();
}

Status check_load(const std::vector<double> &load, std::uint32_t replicas) {
    if (!load.empty() && load.size() != replicas)
        return make_error("lssp: loads for " + std::to_string(load.size()) + " replicas; expected " +
                          std::to_string(replicas));
    for (std::size_t r = 0; r < load.size(); ++r)
        if (!(load[r] >= 0 && load[r] < 1e300))
            return make_error("lssp: replica " + std::to_string(r) + "'s load: expected a finite number >= 0");
    return Status::success();
}

// The smallest power-of-two degree up to max_degree whose shards hold at most `shard`
// tokens of a sample of `length`; 0 when none does.
std::uint32_t degree_for(std::uint64_t length, std::uint64_t shard, std::uint32_t max_degree) {
    for (std::uint32_t k = 1; k <= max_degree; k *= 2)
        if ((length + k - 1) / k <= shard) return k;
    return 0;
}

// Places the samples: those above `threshold` split (degree `forced`, or the smallest whose
// shards are at most min(threshold, memory)), costliest first, each on the aligned block
// whose slowest replica is least loaded; then the others whole, costliest first, each on the
// least loaded replica.
LsspPlan place(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas, const LsspOptions &o,
               const std::vector<std::uint32_t> &order, std::uint64_t threshold, std::uint32_t forced,
               const std::vector<double> &load) {
    LsspPlan p;
    p.threshold = threshold;
    p.time = load.empty() ? std::vector<double>(replicas, 0) : load;
    p.whole.assign(replicas, {});
    const std::uint64_t shard = std::min(threshold, o.memory_tokens);
    for (std::uint32_t i : order) {
        const std::uint64_t l = lengths[i];
        if (l <= threshold) continue;
        // No allowed degree gets the shards down to the threshold: the largest, which may
        // still leave a shard above the memory limit (counted: the plan still runs).
        std::uint32_t k = forced ? forced : degree_for(l, shard, o.max_degree);
        if (k == 0) k = o.max_degree;
        if ((l + k - 1) / k > o.memory_tokens) ++p.over_memory;
        std::uint32_t best = 0;
        double best_load = -1;
        for (std::uint32_t first = 0; first < replicas; first += k) {
            const double load = *std::max_element(p.time.begin() + first, p.time.begin() + first + k);
            if (best_load < 0 || load < best_load) {
                best_load = load;
                best = first;
            }
        }
        const double t = o.cost.time(l, k);
        for (std::uint32_t r = best; r < best + k; ++r) p.time[r] += t;
        p.split.push_back({i, k, best});
        p.peak_tokens = std::max(p.peak_tokens, (l + k - 1) / k);
    }
    using Slot = std::pair<double, std::uint32_t>;
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> open;
    for (std::uint32_t r = 0; r < replicas; ++r) open.push({p.time[r], r});
    for (std::uint32_t i : order) {
        const std::uint64_t l = lengths[i];
        if (l > threshold) continue;
        auto [t, r] = open.top();
        open.pop();
        p.time[r] = t + o.cost.time(l, 1);
        p.whole[r].push_back(i);
        open.push({p.time[r], r});
        p.peak_tokens = std::max(p.peak_tokens, l);
    }
    for (auto &w : p.whole) std::sort(w.begin(), w.end());
    p.makespan = p.time.empty() ? 0 : *std::max_element(p.time.begin(), p.time.end());
    return p;
}

std::vector<std::uint32_t> costliest_first(const std::vector<std::uint64_t> &lengths) {
    std::vector<std::uint32_t> order(lengths.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return lengths[a] > lengths[b]; });
    return order;
}

}  // namespace

Result<LsspPlan> plan_lssp(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas,
                           const LsspOptions &options, const std::vector<double> &load) {
    if (auto st = check(lengths, replicas, options); !st) return Error{st.error()};
    if (auto st = check_load(load, replicas); !st) return Error{st.error()};
    const auto order = costliest_first(lengths);
    // Thresholds: the step's distinct lengths up to the memory limit (a longer sample must be
    // split), at most kMaxCandidates of them spread over the range, and "split nothing" when
    // everything fits.
    std::vector<std::uint64_t> distinct;
    for (auto it = order.rbegin(); it != order.rend(); ++it)
        if (lengths[*it] <= options.memory_tokens && (distinct.empty() || distinct.back() != lengths[*it]))
            distinct.push_back(lengths[*it]);
    const bool all_fit = lengths.empty() || lengths[order.front()] <= options.memory_tokens;
    const std::uint64_t last = all_fit ? UINT64_MAX : options.memory_tokens;
    std::optional<LsspPlan> best;
    const auto consider = [&](std::uint64_t t) {
        LsspPlan p = place(lengths, replicas, options, order, t, 0, load);
        // Ties go to the larger threshold: fewer samples split.
        if (!best || p.makespan < best->makespan || (p.makespan == best->makespan && t > best->threshold))
            best = std::move(p);
    };
    // Coarse then fine: kMaxCandidates of the distinct lengths spread over them, then as many
    // between the best one's neighbours (all of them when they are few).
    const auto spread = [&](std::size_t lo, std::size_t hi) {  // indices into distinct, inclusive
        const std::size_t n = hi - lo + 1;
        for (std::size_t c = 0; c < std::min(n, kMaxCandidates); ++c)
            consider(distinct[lo + (n <= kMaxCandidates ? c : c * (n - 1) / (kMaxCandidates - 1))]);
    };
    consider(last);
    if (!distinct.empty()) {
        spread(0, distinct.size() - 1);
        if (distinct.size() > kMaxCandidates && best->threshold != last) {
            const std::size_t at = static_cast<std::size_t>(
                std::lower_bound(distinct.begin(), distinct.end(), best->threshold) - distinct.begin());
            const std::size_t step = (distinct.size() - 1) / (kMaxCandidates - 1) + 1;
            spread(at > step ? at - step : 0, std::min(distinct.size() - 1, at + step));
        }
    }
    return std::move(*best);
}

Result<LsspPlan> plan_static_sp(const std::vector<std::uint64_t> &lengths, std::uint32_t replicas,
                                const LsspOptions &options) {
    if (auto st = check(lengths, replicas, options); !st) return Error{st.error()};
    const auto order = costliest_first(lengths);
    const std::uint64_t longest = lengths.empty() ? 1 : lengths[order.front()];
    const std::uint32_t k = degree_for(longest, options.memory_tokens, options.max_degree);
    // When no degree fits the longest in memory, the largest (the plan counts over_memory).
    const std::uint32_t degree = k ? k : options.max_degree;
    return degree == 1 ? place(lengths, replicas, options, order, UINT64_MAX, 0, {})
                       : place(lengths, replicas, options, order, 0, degree, {});
}

std::size_t groups_built_on_demand(const std::vector<LsspPlan> &steps) {
    std::size_t built = 0;
    std::set<std::pair<std::uint32_t, std::uint32_t>> before;
    for (const auto &s : steps) {
        auto now = s.groups();
        for (const auto &g : now)
            if (!before.count(g)) ++built;
        before = std::move(now);
    }
    return built;
}

std::size_t groups_prebuilt(std::uint32_t replicas, std::uint32_t max_degree) {
    std::size_t n = 0;
    for (std::uint32_t k = 2; k <= max_degree; k *= 2) n += replicas / k;
    return n;
}

}  // namespace omni::balance
