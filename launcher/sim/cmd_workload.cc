// omni-sim workload: a workload as JSON, or its statistics (omni-sim(1)).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "balance/balance.h"
#include "balance/insertion.h"
#include "balance/lssp.h"
#include "common/parse.h"
#include "runtime/balanced_step.h"
#include "sim/cli.h"
#include "sim/dp_sim.h"
#include "sim/plot.h"
#include "sim/system_sim.h"
#include "workload/workload.h"

namespace omni::sim::cli {

int cmd_workload(int argc, char **argv) {
    WorkloadArgs wa;
    std::map<std::string, std::string> num;
    po::options_description desc("Options");
    wa.add(desc);
    desc.add_options()("stats", "draw samples and print each modality's share, mean length and mean cost per phase")(
        "samples", po::value<std::string>(&num["samples"])->default_value("100000"), "--stats: samples per phase")(
        "seed", po::value<std::string>(&num["seed"])->default_value("1"), "--stats: the draws' seed");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim workload [--workload FILE|PRESET] [--stats]", vm))
        return *rc;
    std::uint64_t samples = 0, seed = 0;
    auto s = omni::parse_uint(num["samples"], 1, 10000000, "--samples");
    if (!s) return usage_error(s.error());
    samples = s.value();
    auto sd = omni::parse_uint(num["seed"], 0, UINT64_MAX, "--seed");
    if (!sd) return usage_error(sd.error());
    seed = sd.value();
    if (auto st = wa.load(); !st) return usage_error(st.error());
    if (!vm.count("stats")) {
        std::cout << wa.w.to_json() << "\n";
        return std::cout.flush() ? 0 : 1;
    }
    const auto &mods = wa.w.modalities();
    std::uint64_t at = 0;
    std::printf("%5s %10s %-12s %8s %12s %12s %12s\n", "PHASE", "FROM-STEP", "MODALITY", "SHARE", "MEAN-LENGTH",
                "MEAN-COST", "COST-SHARE");
    for (std::size_t p = 0; p < wa.w.phases().size(); ++p) {
        std::vector<double> n(mods.size()), len(mods.size()), cost(mods.size());
        double total_cost = 0;
        for (std::uint64_t i = 0; i < samples; ++i) {
            const auto smp = wa.w.sample(seed, i, at);
            n[smp.modality] += 1;
            len[smp.modality] += static_cast<double>(smp.length);
            const double c = static_cast<double>(wa.w.cost(smp, wa.kind));
            cost[smp.modality] += c;
            total_cost += c;
        }
        for (std::size_t m = 0; m < mods.size(); ++m)
            std::printf("%5zu %10" PRIu64 " %-12s %8.4f %12.1f %12.1f %12.4f\n", p, at, mods[m].name.c_str(),
                        n[m] / static_cast<double>(samples), n[m] ? len[m] / n[m] : 0.0, n[m] ? cost[m] / n[m] : 0.0,
                        total_cost ? cost[m] / total_cost : 0.0);
        at += wa.w.phases()[p].steps;
    }
    return 0;
}

}  // namespace omni::sim::cli
