// The placement core's decision time (#30's goal: 4096 nodes x 8 GPUs at 50% random
// occupancy, median under 1 ms and p99 under 5 ms), best fit and first fit side by side in
// one run, on the same states and requests. Prints the medians, p99s and their ratio; then
// the time of place_nodes, select/omni's call per start attempt, with every node a candidate.
//
//   placement_bench [--nodes N] [--decisions D] [--seed S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "placement/placement.h"

using namespace omni::placement;

namespace {

NodeLayout dgx() {
    NodeLayout l;
    l.gpus = 8;
    l.domains[0] = {0x03, 0x0c, 0x30, 0xc0};
    l.domains[1] = {0xff};
    l.domains[2] = {0x0f, 0xf0};
    l.domains[3] = {0xff};
    return l;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char **argv) {
    std::uint32_t nodes_n = 4096, decisions = 400;
    unsigned seed = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if ((a == "--nodes" || a == "--decisions" || a == "--seed") && i + 1 < argc) {
            const unsigned long v = std::strtoul(argv[++i], nullptr, 10);
            if (v == 0 || v > 1000000) {
                std::fprintf(stderr, "placement_bench: %s: expected 1..1000000\n", a.c_str());
                return 2;
            }
            (a == "--nodes" ? nodes_n : a == "--decisions" ? decisions : seed) = static_cast<unsigned>(v);
        } else {
            std::fprintf(stderr, "usage: placement_bench [--nodes N] [--decisions D] [--seed S]\n");
            return a == "--help" ? 0 : 2;
        }
    }
    std::mt19937 rng(seed);
    const std::vector<NodeLayout> nodes(nodes_n, dgx());
    static const Request kinds[] = {
        {2, Kind::Pcie, 1, 8, 100}, {4, Kind::Numa, 1, 4, 100}, {8, Kind::Nvlink, 1, 2, 100},
        {1, Kind::Pcie, 1, 16, 100}, {1, Kind::Node, 1, 4, 50}};
    static const std::uint32_t per_node[] = {1, 2, 4, 1, 2};
    std::vector<double> best_ms, first_ms, nodes_ms;
    std::uint64_t nodes_chosen = 0;
    std::uint64_t best_units = 0, first_units = 0;
    for (std::uint32_t d = 0; d < decisions; ++d) {
        std::vector<NodeFree> free(nodes_n, NodeFree{std::vector<std::uint8_t>(8, 100)});
        for (auto &f : free)
            for (auto &s : f.share) s = rng() % 2 ? 100 : 0;  // 50% of the GPUs taken
        const Request &r = kinds[d % 5];
        auto t0 = std::chrono::steady_clock::now();
        auto b = place(nodes, free, r);
        auto t1 = std::chrono::steady_clock::now();
        auto f = place_first_fit(nodes, free, r);
        auto t2 = std::chrono::steady_clock::now();
        if (!b || !f) {
            std::fprintf(stderr, "placement_bench: %s\n", (!b ? b.error() : f.error()).c_str());
            return 1;
        }
        // select/omni's shape: whole-GPU units of r's size and kind (Any: Node), units_per_node
        // a node, 1..16 nodes; every node a candidate.
        std::vector<NodeCandidate> cands(nodes_n);
        for (std::uint32_t n = 0; n < nodes_n; ++n) {
            cands[n].layout = n;
            cands[n].free = free[n];
        }
        NodesRequest nr;
        nr.unit = {std::min<std::uint32_t>(r.ranks_per_unit, 8 / per_node[d % 5]), r.kind == Kind::Any ? Kind::Node : r.kind,
                   1, 1u << 20, 100};
        nr.units_per_node = per_node[d % 5];
        nr.min_nodes = 1;
        nr.max_nodes = 16;
        auto t3 = std::chrono::steady_clock::now();
        auto pn = place_nodes(nodes, cands, nr);
        auto t4 = std::chrono::steady_clock::now();
        if (!pn) {
            std::fprintf(stderr, "placement_bench: %s\n", pn.error().c_str());
            return 1;
        }
        nodes_chosen += pn.value().size();
        nodes_ms.push_back(std::chrono::duration<double, std::milli>(t4 - t3).count());
        best_units += b.value().units.size();
        first_units += f.value().units.size();
        best_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        first_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    const double bm = percentile(best_ms, 0.5), b99 = percentile(best_ms, 0.99);
    const double fm = percentile(first_ms, 0.5), f99 = percentile(first_ms, 0.99);
    std::printf("placement of elastic units on %u nodes x 8 GPUs, 50%% taken, %u decisions (5 request kinds)\n",
                nodes_n, decisions);
    std::printf("  best fit:  median %.3f ms, p99 %.3f ms  (goal: median < 1 ms, p99 < 5 ms)\n", bm, b99);
    std::printf("  first fit: median %.3f ms, p99 %.3f ms\n", fm, f99);
    std::printf("  best fit / first fit: median %.2fx, p99 %.2fx; units placed %llu vs %llu\n", bm / fm, b99 / f99,
                static_cast<unsigned long long>(best_units), static_cast<unsigned long long>(first_units));
    std::printf("  place_nodes (select/omni, every node a candidate, 1..16 nodes): median %.3f ms, p99 %.3f ms; "
                "%llu nodes chosen\n",
                percentile(nodes_ms, 0.5), percentile(nodes_ms, 0.99), static_cast<unsigned long long>(nodes_chosen));
    return 0;
}
