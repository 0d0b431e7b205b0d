// Balanced partitioning of a step's samples; see balance/balance.h.
#include "balance/balance.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <queue>
#include <tuple>
#include <utility>

namespace omni::balance {
namespace {

// Positions sorted by cost, largest first; equal costs in position order. A least significant
// digit radix sort of kMaxCost - cost (41 bits, six passes of 8 bits, a pass skipped when
// every key has the same digit: most costs leave the high digits alike), stable, so equal
// costs stay in position order: a comparison sort of the positions took a third of kk's time.
std::vector<std::uint32_t> by_cost_desc(const std::vector<std::uint64_t> &costs) {
    const std::size_t n = costs.size();
    constexpr unsigned kBits = 8, kPasses = 6, kDigits = 1u << kBits;
    static_assert(kPasses * kBits >= 41, "the passes cover kMaxCost");
    std::vector<std::uint32_t> order(n), other(n);
    std::iota(order.begin(), order.end(), 0u);
    std::vector<std::uint32_t> count(kDigits);
    for (unsigned shift = 0; shift < kPasses * kBits; shift += kBits) {
        const auto digit = [&](std::uint32_t i) {
            return static_cast<std::uint32_t>(((kMaxCost - costs[i]) >> shift) & (kDigits - 1));
        };
        std::fill(count.begin(), count.end(), 0u);
        for (std::uint32_t i : order) ++count[digit(i)];
        if (n && count[digit(order[0])] == n) continue;  // one digit for all: the order stands
        std::uint32_t at = 0;
        for (auto &c : count) at += std::exchange(c, at);
        for (std::uint32_t i : order) other[count[digit(i)]++] = i;
        order.swap(other);
    }
    return order;
}

// Each part's positions in increasing order, by one pass over the positions (not a sort per
// part).
void sort_parts(Assignment &a, std::size_t n) {
    std::vector<std::uint32_t> part_of(n);
    for (std::size_t r = 0; r < a.size(); ++r) {
        for (std::uint32_t i : a[r]) part_of[i] = static_cast<std::uint32_t>(r);
        a[r].clear();
    }
    for (std::size_t i = 0; i < n; ++i) a[part_of[i]].push_back(static_cast<std::uint32_t>(i));
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
    sort_parts(a, costs.size());
    return a;
}

// Pairwise swaps between the heaviest and the lightest part while one lowers the heavier of
// the two: the swap whose cost difference is nearest half their gap. Each swap lowers the sum
// of squared part costs, so this ends; it is also capped. Every part is kept sorted by cost,
// so a round is one merge-like pass over the two parts (a light sample near c - gap/2 for
// each heavy sample c, both ascending) and a swap two sorted moves: O(m) a round.
void refine(const std::vector<std::uint64_t> &costs, Assignment &a) {
    const std::size_t parts = a.size();
    if (parts < 2 || a[0].empty()) return;
    using Item = std::pair<std::uint64_t, std::uint32_t>;  // (cost, position)
    std::vector<std::vector<Item>> sorted(parts);
    std::vector<std::uint64_t> sum(parts, 0);
    std::uint64_t total = 0, biggest = 0;
    for (std::size_t r = 0; r < parts; ++r) {
        for (auto i : a[r]) {
            sorted[r].push_back({costs[i], i});
            sum[r] += costs[i];
            biggest = std::max(biggest, costs[i]);
        }
        std::sort(sorted[r].begin(), sorted[r].end());
        total += sum[r];
    }
    // No split beats its largest sample, or its mean part rounded up: stop there.
    const std::uint64_t bound = std::max(biggest, (total + parts - 1) / parts);
    const auto move = [](std::vector<Item> &from, std::size_t at, std::vector<Item> &to) {
        const Item x = from[at];
        from.erase(from.begin() + static_cast<std::ptrdiff_t>(at));
        to.insert(std::lower_bound(to.begin(), to.end(), x), x);
    };
    for (std::size_t round = 0; round < 4 * parts + 16; ++round) {
        std::size_t h = 0, l = 0;
        for (std::size_t r = 1; r < parts; ++r) {
            if (sum[r] > sum[h]) h = r;
            if (sum[r] < sum[l]) l = r;
        }
        const std::uint64_t gap = sum[h] - sum[l];
        if (gap < 2 || sum[h] <= bound) break;
        const std::vector<Item> &H = sorted[h], &L = sorted[l];
        // The heavier of the two after a swap of difference d: smallest nearest half the gap.
        const auto after = [&](std::uint64_t d) { return std::max(sum[h] - d, sum[l] + d); };
        std::uint64_t best_delta = 0;
        std::size_t best_h = 0, best_l = 0, j = 0;
        for (std::size_t k = 0; k < H.size(); ++k) {
            const std::uint64_t c = H[k].first;
            // The light samples just below and at c - gap/2; the swap helps when 0 < c - light < gap.
            const std::uint64_t want = c > gap / 2 ? c - gap / 2 : 0;
            while (j < L.size() && L[j].first < want) ++j;
            for (std::size_t cand : {j, j - 1}) {  // j - 1 wraps past the end when j is 0
                if (cand >= L.size() || L[cand].first >= c || c - L[cand].first >= gap) continue;
                const std::uint64_t delta = c - L[cand].first;
                if (best_delta == 0 || after(delta) < after(best_delta)) {
                    best_delta = delta;
                    best_h = k;
                    best_l = cand;
                }
            }
        }
        if (best_delta == 0) break;
        // The light sample first; then the heavy one, whose slot moved if the light one went in
        // before it.
        const Item heavy = H[best_h];
        move(sorted[l], best_l, sorted[h]);
        move(sorted[h], static_cast<std::size_t>(std::lower_bound(H.begin(), H.end(), heavy) - H.begin()), sorted[l]);
        sum[h] -= best_delta;
        sum[l] += best_delta;
    }
    for (std::size_t r = 0; r < parts; ++r) {
        a[r].clear();
        for (const Item &x : sorted[r]) a[r].push_back(x.second);
    }
}

// Balanced largest differencing (then refine()): the step's samples, largest first, in chunks
// of `parts`, each chunk a partial solution of `parts` subsets of one sample. Repeatedly the
// two partial solutions with the largest spread (heaviest minus lightest subset) merge,
// heaviest subset of one with lightest of the other, until one remains: every subset gains
// one sample per merge, so all end with n / parts. Subsets are linked lists over the samples
// (a merge links two lists), and partial solutions blocks of one flat array: no allocation
// per subset.
struct Subset {
    std::uint64_t sum;
    std::uint32_t head, tail, first;  // first: the smallest position, for deterministic ties
};

Assignment kk(const std::vector<std::uint64_t> &costs, std::uint32_t parts) {
    const std::vector<std::uint32_t> order = by_cost_desc(costs);
    const std::size_t chunks = order.size() / parts;
    std::vector<std::uint32_t> next(costs.size(), UINT32_MAX);
    std::vector<Subset> pool;  // state s: pool[s*parts .. (s+1)*parts), heaviest first
    pool.reserve(2 * chunks * parts);
    const auto heaviest_first = [](const Subset &a, const Subset &b) {
        return a.sum != b.sum ? a.sum > b.sum : a.first < b.first;
    };
    using Key = std::tuple<std::uint64_t, std::int64_t>;  // spread, -state: the older first
    std::priority_queue<std::pair<Key, std::size_t>> heap;
    const auto push = [&](std::size_t st) {
        Subset *b = pool.data() + st * parts;
        std::sort(b, b + parts, heaviest_first);
        heap.push({{b[0].sum - b[parts - 1].sum, -static_cast<std::int64_t>(st)}, st});
    };
    for (std::size_t c = 0; c < chunks; ++c) {
        for (std::uint32_t k = 0; k < parts; ++k) {
            const std::uint32_t i = order[c * parts + k];
            pool.push_back({costs[i], i, i, i});
        }
        push(c);
    }
    std::size_t states = chunks;
    while (heap.size() > 1) {
        const std::size_t a = heap.top().second;
        heap.pop();
        const std::size_t b = heap.top().second;
        heap.pop();
        for (std::uint32_t k = 0; k < parts; ++k) {
            const Subset heavy = pool[a * parts + k], light = pool[b * parts + parts - 1 - k];
            next[heavy.tail] = light.head;
            pool.push_back({heavy.sum + light.sum, heavy.head, light.tail, std::min(heavy.first, light.first)});
        }
        push(states++);
    }
    Assignment out(parts);
    const Subset *last = pool.data() + heap.top().second * parts;
    for (std::uint32_t k = 0; k < parts; ++k) {
        out[k].reserve(chunks);
        for (std::uint32_t i = last[k].head; i != UINT32_MAX; i = next[i]) out[k].push_back(i);
    }
    refine(costs, out);
    // Parts in the order of their first position, so that an already balanced step keeps its
    // samples near the ranks the ledger gives them.
    sort_parts(out, costs.size());
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

Result<Assignment> partition_by_group(const std::vector<std::uint64_t> &costs,
                                      const std::vector<std::uint64_t> &group_of_part, Policy policy) {
    const auto parts = static_cast<std::uint32_t>(group_of_part.size());
    if (group_of_part.size() > UINT32_MAX) return make_error("balance: too many parts");
    if (auto st = check(costs, parts); !st) return Error{st.error()};
    const std::size_t m = costs.size() / parts;
    // Groups in the order of their first part; each group's parts in part order.
    std::vector<std::vector<std::uint32_t>> groups;
    {
        std::vector<std::pair<std::uint64_t, std::uint32_t>> byl;  // (label, part)
        for (std::uint32_t r = 0; r < parts; ++r) byl.push_back({group_of_part[r], r});
        std::stable_sort(byl.begin(), byl.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
        for (std::size_t k = 0; k < byl.size(); ++k) {
            if (k == 0 || byl[k].first != byl[k - 1].first) groups.emplace_back();
            groups.back().push_back(byl[k].second);
        }
        std::sort(groups.begin(), groups.end());
    }
    Assignment out(parts);
    std::vector<std::uint64_t> mine;
    std::vector<std::uint32_t> where;  // the group's positions, share after share
    for (const auto &g : groups) {
        mine.clear();
        where.clear();
        for (std::uint32_t r : g)
            for (std::size_t i = 0; i < m; ++i) {
                where.push_back(static_cast<std::uint32_t>(r * m + i));
                mine.push_back(costs[r * m + i]);
            }
        auto a = partition(mine, static_cast<std::uint32_t>(g.size()), policy);
        if (!a) return a;
        for (std::size_t k = 0; k < g.size(); ++k) {
            auto &part = out[g[k]];
            for (std::uint32_t i : a.value()[k]) part.push_back(where[i]);
            std::sort(part.begin(), part.end());
        }
    }
    return out;
}

Result<Assignment> partition_grouped(const std::vector<std::uint64_t> &costs, std::uint32_t parts,
                                     std::uint32_t group, Policy policy) {
    if (auto st = check(costs, parts); !st) return Error{st.error()};
    if (group == 0 || parts % group != 0)
        return make_error("balance: groups of " + std::to_string(group) + " do not divide " + std::to_string(parts) +
                          " parts");
    std::vector<std::uint64_t> labels(parts);
    for (std::uint32_t r = 0; r < parts; ++r) labels[r] = r / group;
    return partition_by_group(costs, labels, policy);
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
