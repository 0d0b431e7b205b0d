// The placement core; see placement/placement.h.
#include "placement/placement.h"

#include <algorithm>
#include <deque>
#include <queue>
#include <tuple>

namespace omni::placement {
namespace {

std::uint32_t popcount(std::uint64_t m) { return static_cast<std::uint32_t>(__builtin_popcountll(m)); }
std::uint64_t all_gpus(std::uint32_t n) { return n >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << n) - 1; }

// Per node, what the request can use and what is wholly free.
struct NodeView {
    std::uint64_t usable = 0;  // GPUs a rank of the request may take
    std::uint64_t unused = 0;  // GPUs at 100%
};

NodeView view(const NodeLayout &l, const NodeFree &f, const Request &r) {
    NodeView v;
    for (std::uint32_t g = 0; g < l.gpus; ++g) {
        const std::uint8_t s = f.share[g];
        if (s == 100) v.unused |= std::uint64_t(1) << g;
        if (r.sm_share >= 100 ? s == 100 : s >= r.sm_share) v.usable |= std::uint64_t(1) << g;
    }
    return v;
}

// The domains a unit of `kind` may lie in on node `l` (for Any within a node: the node).
const std::vector<std::uint64_t> &unit_domains(const NodeLayout &l, Kind kind) {
    return l.domains[kind == Kind::Any ? static_cast<std::size_t>(Kind::Node) : static_cast<std::size_t>(kind)];
}

// The wholly free domains (of every kind) that taking `take` breaks.
std::uint32_t broken(const NodeLayout &l, std::uint64_t unused, std::uint64_t take) {
    std::uint32_t n = 0;
    for (const auto &kind : l.domains)
        for (std::uint64_t d : kind)
            if ((d & unused) == d && (d & take)) ++n;
    return n;
}

// N GPUs of `usable & domain`: first those whose taking breaks the fewest wholly free
// domains (already used GPUs, then GPUs of broken sub-domains), for slices the fullest
// first, then the lowest index.
std::uint64_t choose(const NodeLayout &l, const NodeFree &f, std::uint64_t unused, std::uint64_t avail,
                     std::uint32_t n) {
    std::uint32_t idx[kMaxGpusPerNode], cost[kMaxGpusPerNode], count = 0;
    for (std::uint32_t g = 0; g < l.gpus; ++g)
        if (avail >> g & 1) {
            idx[count] = g;
            cost[count] = broken(l, unused, std::uint64_t(1) << g) * 256u + f.share[g];
            ++count;
        }
    // Insertion sort: at most 64 GPUs, stable, so equal costs keep index order.
    for (std::uint32_t i = 1; i < count; ++i)
        for (std::uint32_t j = i; j > 0 && cost[j - 1] > cost[j]; --j) {
            std::swap(cost[j - 1], cost[j]);
            std::swap(idx[j - 1], idx[j]);
        }
    std::uint64_t take = 0;
    for (std::uint32_t i = 0; i < n && i < count; ++i) take |= std::uint64_t(1) << idx[i];
    return take;
}

struct Candidate {
    std::uint32_t broken, leftover, node, domain;
    std::uint64_t take;
    std::uint64_t version;
    bool operator>(const Candidate &o) const {
        return std::tie(broken, leftover, node, domain) > std::tie(o.broken, o.leftover, o.node, o.domain);
    }
};

// The free state as a placement changes it: the input, with copies of just the nodes it
// changed (copying every node's vector would cost more than the whole decision).
class FreeView {
public:
    explicit FreeView(const std::vector<NodeFree> &in) : in_(in), slot_(in.size(), kNone) {}
    const NodeFree &at(std::uint32_t n) const { return slot_[n] == kNone ? in_[n] : copies_[slot_[n]]; }
    NodeFree &mut(std::uint32_t n) {
        if (slot_[n] == kNone) {
            slot_[n] = static_cast<std::uint32_t>(copies_.size());
            copies_.push_back(in_[n]);
        }
        return copies_[slot_[n]];
    }

private:
    static constexpr std::uint32_t kNone = UINT32_MAX;
    const std::vector<NodeFree> &in_;
    std::vector<std::uint32_t> slot_;
    std::deque<NodeFree> copies_;
};

void take_gpus(NodeFree &f, std::uint64_t mask, std::uint32_t share) {
    for (std::uint32_t g = 0; mask; ++g, mask >>= 1)
        if (mask & 1) f.share[g] = static_cast<std::uint8_t>(share >= 100 ? 0 : f.share[g] - share);
}

// Units of `any` wider than a node: whole unused nodes, in node order.
Placement place_wide(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free_in, const Request &r,
                     std::uint32_t max_units) {
    FreeView free(free_in);
    Placement p;
    std::uint32_t next = 0;
    while (p.units.size() < max_units) {
        UnitPlace u;
        std::uint32_t have = 0;
        while (have < r.ranks_per_unit && next < nodes.size()) {
            const std::uint32_t n = next++;
            const NodeView v = view(nodes[n], free.at(n), r);
            const std::uint64_t every = all_gpus(nodes[n].gpus);
            if (nodes[n].gpus == 0 || (v.usable & every) != every || (r.sm_share >= 100 && (v.unused & every) != every))
                continue;
            std::uint64_t take = 0;
            for (std::uint32_t g = 0; g < nodes[n].gpus && have < r.ranks_per_unit; ++g, ++have)
                take |= std::uint64_t(1) << g;
            u.parts.emplace_back(n, take);
        }
        if (have < r.ranks_per_unit) break;
        for (const auto &[n, m] : u.parts) take_gpus(free.mut(n), m, r.sm_share);
        p.units.push_back(std::move(u));
    }
    return p;
}

std::uint32_t clamp_units(const std::vector<NodeLayout> &nodes, const Request &r) {
    std::uint64_t gpus = 0;
    for (const auto &l : nodes) gpus += l.gpus;
    const std::uint64_t per_gpu = r.sm_share >= 100 ? 1 : 100 / r.sm_share;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(r.max_units, gpus * per_gpu / r.ranks_per_unit));
}

bool wider_than_nodes(const std::vector<NodeLayout> &nodes, const Request &r) {
    if (r.kind != Kind::Any) return false;
    std::uint32_t widest = 0;
    for (const auto &l : nodes) widest = std::max(widest, l.gpus);
    return r.ranks_per_unit > widest;
}

// `units` units of `r` on one node, each chosen as place() chooses on that node alone: the
// mask of their GPUs, the wholly free domains they break and the usable GPUs they leave.
struct NodeFit {
    bool fits = false;
    std::uint64_t gpus = 0;
    std::uint32_t broken = 0, left = 0;
};

NodeFit fit_node(const NodeLayout &l, NodeFree f, const Request &r, std::uint32_t units) {
    NodeFit fit;
    const auto &doms = unit_domains(l, r.kind);
    for (std::uint32_t u = 0; u < units; ++u) {
        const NodeView v = view(l, f, r);
        bool found = false;
        Candidate best{};
        for (std::uint32_t d = 0; d < doms.size(); ++d) {
            const std::uint64_t avail = doms[d] & v.usable;
            const std::uint32_t have = popcount(avail);
            if (have < r.ranks_per_unit) continue;
            const std::uint64_t take = choose(l, f, v.unused, avail, r.ranks_per_unit);
            const Candidate c{broken(l, v.unused, take), have - r.ranks_per_unit, 0, d, take, 0};
            if (!found || best > c) best = c;
            found = true;
        }
        if (!found) return NodeFit{};
        take_gpus(f, best.take, r.sm_share);
        fit.gpus |= best.take;
        fit.broken += best.broken;
    }
    fit.fits = true;
    fit.left = popcount(view(l, f, r).usable);
    return fit;
}

}  // namespace

const char *kind_name(Kind k) {
    switch (k) {
        case Kind::Pcie: return "pcie";
        case Kind::Nvlink: return "nvlink";
        case Kind::Numa: return "numa";
        case Kind::Node: return "node";
        default: return "any";
    }
}

Result<Kind> parse_kind(const std::string &text) {
    for (Kind k : {Kind::Pcie, Kind::Nvlink, Kind::Numa, Kind::Node, Kind::Any})
        if (text == kind_name(k)) return k;
    return make_error("domain kind '" + text.substr(0, 32) + "': expected pcie, nvlink, numa, node or any");
}

Status check_input(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free, const Request &r) {
    if (r.ranks_per_unit == 0) return make_error("request: ranks per unit must be at least 1");
    if (r.min_units == 0 || r.min_units > r.max_units)
        return make_error("request: units " + std::to_string(r.min_units) + ".." + std::to_string(r.max_units) +
                          ": expected 1 <= MIN <= MAX");
    if (r.sm_share == 0 || r.sm_share > 100) return make_error("request: SM share " + std::to_string(r.sm_share) + ": expected 1..100");
    if (free.size() != nodes.size())
        return make_error("free state for " + std::to_string(free.size()) + " nodes, layouts for " + std::to_string(nodes.size()));
    for (std::size_t n = 0; n < nodes.size(); ++n) {
        const std::string what = "node " + std::to_string(n);
        const NodeLayout &l = nodes[n];
        if (l.gpus > kMaxGpusPerNode) return make_error(what + ": " + std::to_string(l.gpus) + " GPUs, at most 64");
        if (free[n].share.size() != l.gpus) return make_error(what + ": free shares for " + std::to_string(free[n].share.size()) + " GPUs, the layout has " + std::to_string(l.gpus));
        for (auto s : free[n].share)
            if (s > 100) return make_error(what + ": a free share above 100");
        for (std::size_t k = 0; k < kKinds; ++k) {
            std::uint64_t seen = 0;
            for (std::uint64_t d : l.domains[k]) {
                if (d == 0 || (d & ~all_gpus(l.gpus)) || (d & seen))
                    return make_error(what + ": a " + std::string(kind_name(static_cast<Kind>(k))) +
                                      " domain is empty, names a GPU the node does not have, or overlaps another");
                seen |= d;
            }
            if (seen != all_gpus(l.gpus))
                return make_error(what + ": the " + std::string(kind_name(static_cast<Kind>(k))) + " domains do not cover its GPUs");
        }
    }
    return Status::success();
}

Result<Placement> place(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free_in, const Request &r) {
    if (auto st = check_input(nodes, free_in, r); !st) return Error{st.error()};
    const std::uint32_t max_units = clamp_units(nodes, r);
    Placement p;
    if (wider_than_nodes(nodes, r)) {
        p = place_wide(nodes, free_in, r, max_units);
    } else {
        FreeView free(free_in);
        std::vector<std::uint64_t> version(nodes.size(), 0);
        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
        auto push_node = [&](std::uint32_t n) {
            const NodeLayout &l = nodes[n];
            const NodeView v = view(l, free.at(n), r);
            if (popcount(v.usable) < r.ranks_per_unit) return;
            const auto &doms = unit_domains(l, r.kind);
            for (std::uint32_t d = 0; d < doms.size(); ++d) {
                const std::uint64_t avail = doms[d] & v.usable;
                const std::uint32_t have = popcount(avail);
                if (have < r.ranks_per_unit) continue;
                const std::uint64_t take = choose(l, free.at(n), v.unused, avail, r.ranks_per_unit);
                heap.push({broken(l, v.unused, take), have - r.ranks_per_unit, n, d, take, version[n]});
            }
        };
        for (std::uint32_t n = 0; n < nodes.size(); ++n) push_node(n);
        while (p.units.size() < max_units && !heap.empty()) {
            const Candidate c = heap.top();
            heap.pop();
            if (c.version != version[c.node]) continue;  // the node changed since
            take_gpus(free.mut(c.node), c.take, r.sm_share);
            p.units.push_back(UnitPlace{{{c.node, c.take}}});
            ++version[c.node];
            push_node(c.node);
        }
    }
    if (p.units.size() < r.min_units) p.units.clear();
    return p;
}

Result<Placement> place_first_fit(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free_in,
                                  const Request &r) {
    if (auto st = check_input(nodes, free_in, r); !st) return Error{st.error()};
    const std::uint32_t max_units = clamp_units(nodes, r);
    if (wider_than_nodes(nodes, r)) {
        Placement p = place_wide(nodes, free_in, r, max_units);
        if (p.units.size() < r.min_units) p.units.clear();
        return p;
    }
    FreeView free(free_in);
    Placement p;
    for (std::uint32_t n = 0; n < nodes.size() && p.units.size() < max_units; ++n) {
        const auto &doms = unit_domains(nodes[n], r.kind);
        for (std::uint32_t d = 0; d < doms.size() && p.units.size() < max_units;) {
            const std::uint64_t avail = doms[d] & view(nodes[n], free.at(n), r).usable;
            if (popcount(avail) < r.ranks_per_unit) {
                ++d;
                continue;
            }
            std::uint64_t take = 0, rest = avail;
            for (std::uint32_t i = 0; i < r.ranks_per_unit; ++i) {
                const std::uint64_t low = rest & (~rest + 1);
                take |= low;
                rest &= ~low;
            }
            take_gpus(free.mut(n), take, r.sm_share);
            p.units.push_back(UnitPlace{{{n, take}}});
        }
    }
    if (p.units.size() < r.min_units) p.units.clear();
    return p;
}

Result<std::vector<NodeChoice>> place_nodes(const std::vector<NodeLayout> &nodes,
                                            const std::vector<NodeCandidate> &cands, const NodesRequest &req) {
    const Request &r = req.unit;
    if (auto st = check_input({}, {}, r); !st) return Error{st.error()};
    const std::uint32_t upn = req.units_per_node;
    if (upn == 0 || upn > kMaxGpusPerNode) return make_error("request: units per node " + std::to_string(upn) + ": expected 1..64");
    // The node counts both ranges allow: Slurm's, and the job's units over units per node.
    const std::uint32_t lo = std::max(req.min_nodes, (r.min_units + upn - 1) / upn);
    const std::uint32_t hi = std::min(req.max_nodes, r.max_units / upn);
    if (req.min_nodes > req.max_nodes || hi < lo || hi == 0)
        return make_error("request: nodes " + std::to_string(req.min_nodes) + ".." + std::to_string(req.max_nodes) +
                          " with " + std::to_string(upn) + " unit(s) per node cannot hold " +
                          std::to_string(r.min_units) + ".." + std::to_string(r.max_units) + " units");
    struct Ranked {
        NodeFit fit;
        std::uint32_t cand;
    };
    std::vector<Ranked> required, others;
    for (std::uint32_t i = 0; i < cands.size(); ++i) {
        const NodeCandidate &c = cands[i];
        if (c.layout >= nodes.size())
            return make_error("candidate " + std::to_string(i) + ": layout " + std::to_string(c.layout) + " of " +
                              std::to_string(nodes.size()));
        const NodeLayout &l = nodes[c.layout];
        if (c.free.share.size() != l.gpus)
            return make_error("candidate " + std::to_string(i) + ": free shares for " + std::to_string(c.free.share.size()) +
                              " GPUs, the layout has " + std::to_string(l.gpus));
        for (auto s : c.free.share)
            if (s > 100) return make_error("candidate " + std::to_string(i) + ": a free share above 100");
        const NodeFit fit = fit_node(l, c.free, r, upn);
        if (c.required) {
            if (!fit.fits) return std::vector<NodeChoice>{};
            required.push_back({fit, i});
        } else if (fit.fits) {
            others.push_back({fit, i});
        }
    }
    if (required.size() > hi) return std::vector<NodeChoice>{};
    std::sort(others.begin(), others.end(), [](const Ranked &a, const Ranked &b) {
        return std::tie(a.fit.broken, a.fit.left, a.cand) < std::tie(b.fit.broken, b.fit.left, b.cand);
    });
    std::vector<NodeChoice> out;
    for (const auto &x : required) out.push_back({x.cand, x.fit.gpus});
    for (std::size_t i = 0; i < others.size() && out.size() < hi; ++i) out.push_back({others[i].cand, others[i].fit.gpus});
    if (out.size() < lo) return std::vector<NodeChoice>{};
    std::sort(out.begin(), out.end(), [](const NodeChoice &a, const NodeChoice &b) { return a.candidate < b.candidate; });
    return out;
}

void apply(std::vector<NodeFree> &free, const Placement &p, const Request &r) {
    for (const auto &u : p.units)
        for (const auto &[n, m] : u.parts) take_gpus(free[n], m, r.sm_share);
}

std::uint64_t whole_free_domains(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        std::uint64_t unused = 0;
        for (std::uint32_t g = 0; g < nodes[i].gpus; ++g)
            if (free[i].share[g] == 100) unused |= std::uint64_t(1) << g;
        for (const auto &kind : nodes[i].domains)
            for (std::uint64_t d : kind)
                if ((d & unused) == d) ++n;
    }
    return n;
}

}  // namespace omni::placement
