// Benchmark: what libomni-hal adds on top of hwloc when loading a topology.
//
// For each repetition, side by side in one process: (a) hwloc alone loads the XML file with
// every I/O object kept and destroys the topology; (b) omni::hal::load_node does the same
// load plus discovery and derivation (GPUs, NICs, NVLink, paths, domains, closest devices).
// Prints the median and mean of each, and the ratio of medians. It reports numbers; it does
// not pass or fail (doc/design.md, "Benchmarks": benchmarks are not timed tests). Goal:
// ratio below 1.20.
//
// Usage: hal_bench [XML_FILE [REPETITIONS]]   (default: the DGX-2 fixture, 300 repetitions)
#include <hwloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "common/parse.h"
#include "hal/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double hwloc_only(const std::string &file) {
    const auto t0 = Clock::now();
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_set_xml(t, file.c_str()) != 0 || hwloc_topology_load(t) != 0) {
        std::fprintf(stderr, "hal_bench: hwloc cannot load '%s'\n", file.c_str());
        std::exit(1);
    }
    hwloc_topology_destroy(t);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double ours(const std::string &file, std::size_t *gpus) {
    const auto t0 = Clock::now();
    omni::hal::LoadOptions o;
    o.topology_file = file;
    auto n = omni::hal::load_node(o);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!n) {
        std::fprintf(stderr, "hal_bench: %s\n", n.error().c_str());
        std::exit(1);
    }
    *gpus = n.value().gpus.size();
    return us;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double mean(const std::vector<double> &v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
        std::printf("Usage: hal_bench [XML_FILE [REPETITIONS]]\n"
                    "Times hwloc's own load of XML_FILE against omni-hal's load+derive of the "
                    "same file,\nside by side, and prints both and their ratio.\n");
        return 0;
    }
    const std::string file = argc > 1 ? argv[1] : OMNI_FIXTURES "/nvidiaDGX2.xml";
    std::uint64_t reps = 300;
    if (argc > 2) {
        auto r = omni::parse_uint(argv[2], 10, 1000000, "REPETITIONS");
        if (!r) {
            std::fprintf(stderr, "hal_bench: %s\n", r.error().c_str());
            return 2;
        }
        reps = r.value();
    }
    std::size_t gpus = 0;
    for (int i = 0; i < 20; ++i) {  // warm the page cache and the allocator
        hwloc_only(file);
        ours(file, &gpus);
    }
    std::vector<double> a, b;
    for (std::uint64_t i = 0; i < reps; ++i) {
        // Alternate the order so that neither side always runs on a warmer cache.
        if (i % 2) {
            a.push_back(hwloc_only(file));
            b.push_back(ours(file, &gpus));
        } else {
            b.push_back(ours(file, &gpus));
            a.push_back(hwloc_only(file));
        }
    }
    std::printf("file            %s (%zu GPUs)\n", file.c_str(), gpus);
    std::printf("repetitions     %llu\n", static_cast<unsigned long long>(reps));
    std::printf("hwloc load      median %9.1f us   mean %9.1f us\n", median(a), mean(a));
    std::printf("omni load+derive median %8.1f us   mean %9.1f us\n", median(b), mean(b));
    std::printf("ratio (median)  %.3f   (goal < 1.200)\n", median(b) / median(a));
    return 0;
}
