// Facts derived from the node model: path types between devices, the domains of each kind,
// the closest NICs and NVMe drives of each GPU, and elastic-unit candidates.
#include <algorithm>
#include <map>
#include <numeric>

#include "hal/model.h"

namespace omni::hal {
namespace {

int position_in(const std::vector<std::uint64_t> &chain, std::uint64_t id) {
    for (std::size_t i = 0; i < chain.size(); ++i)
        if (chain[i] == id) return static_cast<int>(i);
    return -1;
}

// The key of a device's PCIe domain: the bridge just below its host bridge (the root port),
// so that a cascade of switches under one root port is one domain. A device sitting directly
// on the host bridge, or outside the PCI tree, is alone in its domain (key from `self`).
std::uint64_t pcie_key(const PciPlace &p, std::uint64_t self) {
    if (p.chain.size() >= 2) return p.chain[p.chain.size() - 2];
    return (std::uint64_t{1} << 63) | self;
}

std::vector<unsigned> merge_cpus(std::vector<unsigned> a, const std::vector<unsigned> &b) {
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
    return a;
}

template <typename Dev>
std::vector<std::size_t> closest(const Node &node, std::size_t g, const std::vector<Dev> &devs,
                                 bool prefer_rdma) {
    std::vector<std::size_t> out;
    int best = -1;
    for (std::size_t i = 0; i < devs.size(); ++i) {
        const Path p = pci_path(node.gpus[g].pci, node.gpus[g].loc, devs[i].pci, devs[i].loc);
        const int t = static_cast<int>(p.type);
        if (best < 0 || t < best) {
            best = t;
            out.clear();
        }
        if (t == best) out.push_back(i);
    }
    if constexpr (std::is_same_v<Dev, Nic>) {
        // Among equally close NICs, RDMA-capable ones first: they are the ones NCCL and the
        // checkpoint transfers use.
        if (prefer_rdma)
            std::stable_sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
                return devs[a].rdma && !devs[b].rdma;
            });
    }
    return out;
}

}  // namespace

Path pci_path(const PciPlace &a, const Locality &la, const PciPlace &b, const Locality &lb) {
    Path p;
    if (a.has_pci_parent() && b.has_pci_parent() && a.chain.back() == b.chain.back()) {
        // Same host bridge: the lowest common bridge decides. Below the host bridge, a single
        // switch (the LCA is the upstream port and both devices hang off its downstream
        // ports, or off the LCA itself) is PIX; anything deeper is PXB.
        for (std::size_t ia = 0; ia < a.chain.size(); ++ia) {
            const int ib = position_in(b.chain, a.chain[ia]);
            if (ib < 0) continue;
            if (ia + 1 == a.chain.size()) p.type = PathType::PHB;
            else if (ia <= 1 && ib <= 1) p.type = PathType::PIX;
            else p.type = PathType::PXB;
            return p;
        }
    }
    if (la.numa >= 0 && la.numa == lb.numa) p.type = PathType::NODE;
    else if (la.numa < 0 && lb.numa < 0 && la.package >= 0 && la.package == lb.package)
        p.type = PathType::NODE;
    else p.type = PathType::SYS;
    return p;
}

void derive(Node &node) {
    const std::size_t n = node.gpus.size();
    if (node.nvlinks.size() != n) node.nvlinks.assign(n, std::vector<unsigned>(n, 0));

    node.gpu_paths.assign(n, std::vector<Path>(n));
    for (std::size_t a = 0; a < n; ++a)
        for (std::size_t b = 0; b < n; ++b) {
            Path &p = node.gpu_paths[a][b];
            if (a == b) p.type = PathType::Self;
            else if (node.nvlinks[a][b]) p = Path{PathType::NV, node.nvlinks[a][b]};
            else p = pci_path(node.gpus[a].pci, node.gpus[a].loc, node.gpus[b].pci, node.gpus[b].loc);
        }
    node.gpu_nic_paths.assign(n, std::vector<Path>(node.nics.size()));
    for (std::size_t a = 0; a < n; ++a)
        for (std::size_t i = 0; i < node.nics.size(); ++i)
            node.gpu_nic_paths[a][i] =
                pci_path(node.gpus[a].pci, node.gpus[a].loc, node.nics[i].pci, node.nics[i].loc);

    for (auto &v : node.gpu_domain) v.assign(n, 0);
    for (auto &v : node.domains) v.clear();

    // pcie: by root port, numbered in GPU order.
    {
        auto &doms = node.domains[static_cast<std::size_t>(DomainKind::Pcie)];
        std::map<std::uint64_t, unsigned> ids;
        for (std::size_t g = 0; g < n; ++g) {
            const auto key = pcie_key(node.gpus[g].pci, g);
            auto it = ids.find(key);
            if (it == ids.end()) {
                it = ids.emplace(key, static_cast<unsigned>(doms.size())).first;
                doms.push_back(Domain{it->second, {}, {}});
            }
            doms[it->second].gpus.push_back(node.gpus[g].index);
            doms[it->second].cpus = merge_cpus(doms[it->second].cpus, node.gpus[g].loc.cpus);
            node.gpu_domain[static_cast<std::size_t>(DomainKind::Pcie)][g] = it->second;
        }
    }
    // nvlink: connected components of the NVLink graph (NVSwitch paths included).
    {
        std::vector<std::size_t> parent(n);
        std::iota(parent.begin(), parent.end(), 0);
        const auto find = [&](std::size_t x) {
            while (parent[x] != x) x = parent[x] = parent[parent[x]];
            return x;
        };
        for (std::size_t a = 0; a < n; ++a)
            for (std::size_t b = 0; b < n; ++b)
                if (node.nvlinks[a][b]) parent[find(a)] = find(b);
        auto &doms = node.domains[static_cast<std::size_t>(DomainKind::Nvlink)];
        std::map<std::size_t, unsigned> ids;
        for (std::size_t g = 0; g < n; ++g) {
            auto it = ids.find(find(g));
            if (it == ids.end()) {
                it = ids.emplace(find(g), static_cast<unsigned>(doms.size())).first;
                doms.push_back(Domain{it->second, {}, {}});
            }
            doms[it->second].gpus.push_back(node.gpus[g].index);
            doms[it->second].cpus = merge_cpus(doms[it->second].cpus, node.gpus[g].loc.cpus);
            node.gpu_domain[static_cast<std::size_t>(DomainKind::Nvlink)][g] = it->second;
        }
    }
    // numa: one domain per NUMA node, GPUs by locality; GPUs whose locality spans several
    // NUMA nodes (or none) share one extra domain at the end.
    {
        auto &doms = node.domains[static_cast<std::size_t>(DomainKind::Numa)];
        for (const auto &m : node.numa_nodes)
            doms.push_back(Domain{static_cast<unsigned>(doms.size()), {}, m.cpus});
        int extra = -1;
        for (std::size_t g = 0; g < n; ++g) {
            int id = -1;
            for (std::size_t i = 0; i < node.numa_nodes.size(); ++i)
                if (node.gpus[g].loc.numa == static_cast<int>(node.numa_nodes[i].os_index))
                    id = static_cast<int>(i);
            if (id < 0) {
                if (extra < 0) {
                    extra = static_cast<int>(doms.size());
                    doms.push_back(Domain{static_cast<unsigned>(extra), {}, {}});
                }
                id = extra;
                doms[id].cpus = merge_cpus(doms[id].cpus, node.gpus[g].loc.cpus);
            }
            doms[id].gpus.push_back(node.gpus[g].index);
            node.gpu_domain[static_cast<std::size_t>(DomainKind::Numa)][g] = static_cast<unsigned>(id);
        }
    }
    // node: everything.
    {
        Domain all{0, {}, node.cpus};
        for (const auto &g : node.gpus) all.gpus.push_back(g.index);
        node.domains[static_cast<std::size_t>(DomainKind::Node)].push_back(std::move(all));
    }

    node.closest_nics.assign(n, {});
    node.closest_nvmes.assign(n, {});
    for (std::size_t g = 0; g < n; ++g) {
        node.closest_nics[g] = closest(node, g, node.nics, true);
        node.closest_nvmes[g] = closest(node, g, node.nvmes, false);
    }
}

namespace {

std::uint64_t choose(std::uint64_t n, std::uint64_t k) {
    if (k > n) return 0;
    std::uint64_t r = 1;
    for (std::uint64_t i = 1; i <= k; ++i) {
        // r * (n - k + i) / i stays exact: r is C(n-k+i-1, i-1), times (n-k+i) divisible by i.
        if (r > UINT64_MAX / (n - k + i)) return UINT64_MAX;
        r = r * (n - k + i) / i;
    }
    return r;
}

}  // namespace

UnitCandidates unit_candidates(const Node &node, DomainKind kind, unsigned k, bool disjoint,
                               std::size_t limit) {
    UnitCandidates out;
    if (k == 0) return out;
    for (const auto &d : node.domains[static_cast<std::size_t>(kind)]) {
        const auto &g = d.gpus;
        if (g.size() < k) continue;
        if (disjoint) {
            for (std::size_t i = 0; i + k <= g.size(); i += k) {
                ++out.total;
                if (out.sets.size() < limit)
                    out.sets.emplace_back(g.begin() + static_cast<long>(i),
                                          g.begin() + static_cast<long>(i + k));
                else out.truncated = true;
            }
            continue;
        }
        const std::uint64_t c = choose(g.size(), k);
        out.total = (UINT64_MAX - out.total < c) ? UINT64_MAX : out.total + c;
        // Lexicographic k-subsets by index vector; stops as soon as the limit is reached so
        // that a 16-GPU node domain never enumerates its 12870 8-sets unless asked to.
        std::vector<std::size_t> idx(k);
        std::iota(idx.begin(), idx.end(), 0);
        while (true) {
            if (out.sets.size() >= limit) {
                out.truncated = true;
                break;
            }
            std::vector<unsigned> set;
            for (auto i : idx) set.push_back(g[i]);
            out.sets.push_back(std::move(set));
            int i = static_cast<int>(k) - 1;
            while (i >= 0 && idx[i] == g.size() - k + static_cast<std::size_t>(i)) --i;
            if (i < 0) break;
            ++idx[i];
            for (std::size_t j = static_cast<std::size_t>(i) + 1; j < k; ++j) idx[j] = idx[j - 1] + 1;
        }
    }
    return out;
}

}  // namespace omni::hal
