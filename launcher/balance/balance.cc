// Balanced partitioning of a step's samples; see balance/balance.h.
#include "balance/balance.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <queue>
#include <tuple>

namespace omni::balance {
namespace {

// Positions sorted by cost, largest first; equal costs in position order.
std::vector<std::uint32_t> by_cost_desc(const std::vector<std::uint64_t> &costs) {
    std::vector<std::uint32_t> order(costs.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return costs[a] > costs[b]; });
    return order;
}

Assignment none(std::size_t n, std::uint32_t parts) {
    const std::size_t m = n / parts;
    Assignment a(parts);
    for (std::uint32_t r = 0; r < parts; ++r)
        for (std::size_t i = 0; i < m; ++i) a[r].push_back(static_cast<std::uint32_t>(r * m + i));
    return a;
}

Assignment lpt(const std::vector<std::uint64_t> &costs, std::uint32_t parts) {
    const std::size_t m = costs.size() / parts;
    Assignment a(parts);
    // The lightest part with room first; equal loads in part order.
    using Slot = std::pair<std::uint64_t, std::uint32_t>;
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> open;
    for (std::uint32_t r = 0; r < parts; ++r) open.push({0, r});
    for (std::uint32_t i : by_cost_desc(costs)) {
        auto [load, r] = open.top();
        open.pop();
        a[r].push_back(i);
        if (a[r].size() < m) open.push({load + costs[i], r});
    }
    for (auto &p : a) std::sort(p.begin(), p.end());
    return a;
}

// Pairwise swaps between the heaviest and the lightest part while one lowers the heavier of
// the two: the swap whose cost difference is nearest half their gap. Each swap lowers the sum
// of squared part costs, so this ends; it is also capped. Work per swap: O(m log m).
void refine(const std::vector<std::uint64_t> &costs, Assignment &a) {
    const std::size_t parts = a.size();
    if (parts < 2 || a[0].empty()) return;
    std::vector<std::uint64_t> sum(parts, 0);
    for (std::size_t r = 0; r < parts; ++r)
        for (auto i : a[r]) sum[r] += costs[i];
    for (std::size_t round = 0; round < 4 * parts + 16; ++round) {
        std::size_t h = 0, l = 0;
        for (std::size_t r = 1; r < parts; ++r) {
            if (sum[r] > sum[h]) h = r;
            if (sum[r] < sum[l]) l = r;
        }
        const std::uint64_t gap = sum[h] - sum[l];
        if (gap < 2) return;
        std::vector<std::pair<std::uint64_t, std::size_t>> light;  // (cost, slot in a[l])
        for (std::size_t k = 0; k < a[l].size(); ++k) light.push_back({costs[a[l][k]], k});
        std::sort(light.begin(), light.end());
        std::uint64_t best_delta = 0;
        std::size_t best_h = 0, best_l = 0;
        for (std::size_t k = 0; k < a[h].size(); ++k) {
            const std::uint64_t c = costs[a[h][k]];
            // A light sample near c - gap/2; the swap helps when 0 < c - light < gap.
            const std::uint64_t want = c > gap / 2 ? c - gap / 2 : 0;
            auto it = std::lower_bound(light.begin(), light.end(), std::make_pair(want, std::size_t(0)));
            for (auto j : {it, it == light.begin() ? it : std::prev(it)}) {
                if (j == light.end() || j->first >= c || c - j->first >= gap) continue;
                const std::uint64_t delta = c - j->first;
                // Nearest half the gap: the heavier of the two after the swap is smallest.
                const auto after = [&](std::uint64_t d) { return std::max(sum[h] - d, sum[l] + d); };
                if (best_delta == 0 || after(delta) < after(best_delta)) {
                    best_delta = delta;
                    best_h = k;
                    best_l = j->second;
                }
            }
        }
        if (best_delta == 0) return;
        std::swap(a[h][best_h], a[l][best_l]);
        sum[h] -= best_delta;
        sum[l] += best_delta;
    }
}

// Balanced largest differencing (then refine()): the step's samples, largest first, in chunks of `parts`,
// each chunk a partial solution of `parts` subsets of one sample. Repeatedly the two partial
// solutions with the largest spread (heaviest minus lightest subset) merge, heaviest subset of
// one with lightest of the other, until one remains: every subset gains one sample per
// merge, so all end with n / parts.
struct Subset {
    std::uint64_t sum = 0;
    std::vector<std::uint32_t> items;
};
struct State {
    std::vector<Subset> subsets;  // heaviest first
    std::uint64_t spread() const { return subsets.front().sum - subsets.back().sum; }
};

void sort_heaviest_first(State &s) {
    // Equal sums: the subset holding the smaller first position first (deterministic).
    std::sort(s.subsets.begin(), s.subsets.end(), [](const Subset &a, const Subset &b) {
        return std::tie(b.sum, a.items.front()) < std::tie(a.sum, b.items.front());
    });
}

Assignment kk(const std::vector<std::uint64_t> &costs, std::uint32_t parts) {
    const std::vector<std::uint32_t> order = by_cost_desc(costs);
    std::vector<State> states;
    states.reserve(order.size() / parts);
    for (std::size_t c = 0; c < order.size(); c += parts) {
        State s;
        for (std::uint32_t k = 0; k < parts; ++k) s.subsets.push_back({costs[order[c + k]], {order[c + k]}});
        sort_heaviest_first(s);
        states.push_back(std::move(s));
    }
    // The largest spread first; equal spreads: the older state first.
    using Key = std::tuple<std::uint64_t, std::int64_t>;  // spread, -index
    std::priority_queue<std::pair<Key, std::size_t>> heap;
    for (std::size_t i = 0; i < states.size(); ++i)
        heap.push({{states[i].spread(), -static_cast<std::int64_t>(i)}, i});
    while (heap.size() > 1) {
        const std::size_t a = heap.top().second;
        heap.pop();
        const std::size_t b = heap.top().second;
        heap.pop();
        State merged;
        merged.subsets.resize(parts);
        for (std::uint32_t k = 0; k < parts; ++k) {
            Subset &heavy = states[a].subsets[k], &light = states[b].subsets[parts - 1 - k];
            Subset &out = merged.subsets[k];
            out.sum = heavy.sum + light.sum;
            out.items = std::move(heavy.items);
            out.items.insert(out.items.end(), light.items.begin(), light.items.end());
        }
        states[a].subsets.clear();
        states[b].subsets.clear();
        sort_heaviest_first(merged);
        states.push_back(std::move(merged));
        heap.push({{states.back().spread(), -static_cast<std::int64_t>(states.size() - 1)}, states.size() - 1});
    }
    Assignment out;
    for (auto &s : states[heap.top().second].subsets) out.push_back(std::move(s.items));
    refine(costs, out);
    // Parts in the order of their first position, so that an already balanced step keeps its
    // samples near the ranks the ledger gives them.
    for (auto &p : out) std::sort(p.begin(), p.end());
    std::sort(out.begin(), out.end());
    return out;
}

Status check(const std::vector<std::uint64_t> &costs, std::uint32_t parts) {
    if (parts == 0) return make_error("balance: 0 parts; expected at least 1");
    if (costs.size() > kMaxSamples)
        return make_error("balance: " + std::to_string(costs.size()) + " samples; at most " + std::to_string(kMaxSamples));
    if (costs.size() % parts != 0)
        return make_error("balance: " + std::to_string(costs.size()) + " samples do not split into " +
                          std::to_string(parts) + " equal parts");
    for (std::size_t i = 0; i < costs.size(); ++i)
        if (costs[i] > kMaxCost)
            return make_error("balance: sample " + std::to_string(i) + " costs " + std::to_string(costs[i]) +
                              "; at most " + std::to_string(kMaxCost));
    return Status::success();
}

}  // namespace

const char *policy_name(Policy p) {
    switch (p) {
        case Policy::Lpt: return "lpt";
        case Policy::Kk: return "kk";
        default: return "none";
    }
}

Result<Policy> parse_policy(const std::string &text) {
    for (Policy p : {Policy::None, Policy::Lpt, Policy::Kk})
        if (text == policy_name(p)) return p;
    return make_error("balance policy '" + text.substr(0, 32) + "': expected none, lpt or kk");
}

Result<Assignment> partition(const std::vector<std::uint64_t> &costs, std::uint32_t parts, Policy policy) {
    if (auto st = check(costs, parts); !st) return Error{st.error()};
    if (costs.empty()) return Assignment(parts);
    switch (policy) {
        case Policy::Lpt: return lpt(costs, parts);
        case Policy::Kk: return kk(costs, parts);
        default: return none(costs.size(), parts);
    }
}

Result<Assignment> partition_grouped(const std::vector<std::uint64_t> &costs, std::uint32_t parts,
                                     std::uint32_t group, Policy policy) {
    if (auto st = check(costs, parts); !st) return Error{st.error()};
    if (group == 0 || parts % group != 0)
        return make_error("balance: groups of " + std::to_string(group) + " do not divide " + std::to_string(parts) +
                          " parts");
    const std::size_t share = costs.size() / parts * group;
    Assignment out;
    out.reserve(parts);
    for (std::uint32_t g = 0; g < parts / group; ++g) {
        const std::vector<std::uint64_t> mine(costs.begin() + static_cast<std::ptrdiff_t>(g * share),
                                              costs.begin() + static_cast<std::ptrdiff_t>((g + 1) * share));
        auto a = partition(mine, group, policy);
        if (!a) return a;
        for (auto &p : a.value()) {
            for (auto &i : p) i += static_cast<std::uint32_t>(g * share);
            out.push_back(std::move(p));
        }
    }
    return out;
}

Balance measure(const std::vector<std::uint64_t> &costs, const Assignment &a) {
    Balance b;
    if (a.empty()) return b;
    std::uint64_t total = 0;
    for (const auto &p : a) {
        std::uint64_t sum = 0;
        for (std::uint32_t i : p) sum += costs[i];
        b.max_part = std::max(b.max_part, sum);
        total += sum;
    }
    b.mean_part = static_cast<double>(total) / static_cast<double>(a.size());
    b.imbalance = b.mean_part > 0 ? static_cast<double>(b.max_part) / b.mean_part : 0;
    return b;
}

}  // namespace omni::balance
