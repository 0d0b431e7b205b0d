// omni-sim lssp: long/short sequence parallelism against whole samples and a static degree (omni-sim(1)).
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

int cmd_lssp(int argc, char **argv) {
    WorkloadArgs wa;
    std::string gpus_text = "64,128,256,512", plot;
    std::map<std::string, std::string> num;
    LsspArgs la;
    po::options_description desc("Options");
    wa.add(desc);
    la.add(desc);
    desc.add_options()("gpus", po::value<std::string>(&gpus_text)->default_value(gpus_text),
                       "GPUs, a comma-separated list of scales")(
        "mp", po::value<std::string>(&num["mp"])->default_value("1"), "GPUs per replica (model parallel)")(
        "batch-per-replica", po::value<std::string>(&num["batch-per-replica"])->default_value("16"),
        "samples per replica per step")("steps", po::value<std::string>(&num["steps"])->default_value("20"),
                                        "steps per scale")(
        "first-step", po::value<std::string>(&num["first-step"])->default_value("0"),
        "steps done before (the workload's phase)")("seed", po::value<std::string>(&num["seed"])->default_value("1"),
                                                    "data order and draws")(
        "plot", po::value<std::string>(&plot), "also plot each policy's speedup over the base against the GPUs (PNG)");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim lssp [OPTIONS]", vm)) return *rc;
    std::uint64_t mp = 0, per_replica = 0, steps = 0, first = 0, seed = 0;
    if (auto st =
            parse_uints(num, {UintOption{"mp", &mp, 1, 1024}, UintOption{"batch-per-replica", &per_replica, 1, 4096},
                              UintOption{"steps", &steps, 1, 10000}, UintOption{"first-step", &first, 0, kMaxSteps},
                              UintOption{"seed", &seed, 0, UINT64_MAX}});
        !st)
        return usage_error(st.error());
    if (auto st = la.load(); !st) return usage_error(st.error());
    const omni::balance::LsspOptions &lo = la.options;
    const std::uint64_t memory = lo.memory_tokens, degree = lo.max_degree;
    auto gpus = parse_list(gpus_text, 1, kMaxGpus, "--gpus");
    if (!gpus) return usage_error(gpus.error());
    for (auto g : gpus.value())
        if (g % mp || (g / mp) % degree)
            return usage_error("--gpus " + std::to_string(g) + ": expected a multiple of --mp x --max-degree (" +
                               std::to_string(mp * degree) + ")");
    if (auto st = wa.load(); !st) return usage_error(st.error());
    std::vector<omni::sim::Series> series;
    std::printf("workload %s, cost %s, %" PRIu64 " steps from step %" PRIu64 ", %" PRIu64
                " samples per replica, MP %" PRIu64 "; %s\n",
                wa.workload.c_str(), omni::workload::cost_kind_name(wa.kind), steps, first, per_replica, mp,
                la.describe().c_str());
    std::printf("%6s %8s %-10s %14s %8s %8s %10s %11s %9s\n", "GPUS", "REPLICAS", "POLICY", "MAKESPAN", "VS-BASE",
                "SPLIT%", "THRESHOLD", "PEAK-TOKENS", "OOM-STEPS");
    for (auto g : gpus.value()) {
        const std::uint32_t d = static_cast<std::uint32_t>(g / mp);
        if (std::uint64_t(d) * per_replica > omni::balance::kMaxSamples)
            return usage_error("--gpus " + std::to_string(g) + ": too many samples a step");
        DpJob job;
        job.ledger = {std::uint64_t(1) << 40, d * per_replica, 1, seed};
        job.cost = wa.kind;
        auto costs = omni::sim::step_costs(job, wa.w, first + steps, d);
        if (!costs) return fail(costs.error());
        // none and kk: whole samples, equal counts (the ledger's split, and kk on the model's
        // times); a step with a sample above the memory limit cannot run them (OOM).
        struct Acc {
            std::vector<double> makespan, threshold;
            double split = 0, samples = 0;
            std::uint64_t peak = 0, oom = 0, over = 0;  // over: steps run above the memory limit
        } acc[4];
        std::vector<omni::balance::LsspPlan> lssp_steps;
        for (std::size_t k = first; k < costs.value().size(); ++k) {
            const auto &l = costs.value()[k];
            const std::uint64_t longest = l.empty() ? 0 : *std::max_element(l.begin(), l.end());
            std::vector<std::uint64_t> t(l.size());
            for (std::size_t i = 0; i < l.size(); ++i)
                t[i] = static_cast<std::uint64_t>(std::ceil(lo.cost.time(l[i], 1)));
            for (int w = 0; w < 2; ++w) {
                if (longest > memory) {
                    ++acc[w].oom;
                    continue;
                }
                auto a = omni::balance::partition(t, d, w ? omni::balance::Policy::Kk : omni::balance::Policy::None);
                if (!a) return fail(a.error());
                acc[w].makespan.push_back(static_cast<double>(omni::balance::measure(t, a.value()).max_part));
                acc[w].peak = std::max(acc[w].peak, longest);
                acc[w].samples += static_cast<double>(l.size());
            }
            auto st = omni::balance::plan_static_sp(l, d, lo);
            auto ls = omni::balance::plan_lssp(l, d, lo);
            if (!st) return fail("step " + std::to_string(k + 1) + ": " + st.error());
            if (!ls) return fail("step " + std::to_string(k + 1) + ": " + ls.error());
            int w = 2;
            for (const auto *p : {&st.value(), &ls.value()}) {
                acc[w].makespan.push_back(p->makespan);
                acc[w].split += static_cast<double>(p->split.size());
                acc[w].samples += static_cast<double>(l.size());
                acc[w].peak = std::max(acc[w].peak, p->peak_tokens);
                if (p->threshold != UINT64_MAX) acc[w].threshold.push_back(static_cast<double>(p->threshold));
                if (p->over_memory) ++acc[w].over;
                ++w;
            }
            lssp_steps.push_back(std::move(ls).value());
        }
        const char *names[4] = {"none", "kk", "static-sp", "lssp"};
        series.resize(4);
        // Against none, or static SP when none ran out of memory at some step.
        const int base = acc[0].oom ? 2 : 0;
        const double base_ms = mean(acc[base].makespan);
        for (int w = 0; w < 4; ++w) {
            if (acc[w].oom) {
                std::printf("%6" PRIu64 " %8u %-10s %14s %8s %8s %10s %11s %9" PRIu64 "\n", g, d, names[w], "-", "-",
                            "-", "-", "-", acc[w].oom);
                continue;
            }
            const std::string thr =
                acc[w].threshold.empty() ? "-" : std::to_string(static_cast<std::uint64_t>(mean(acc[w].threshold)));
            std::printf("%6" PRIu64 " %8u %-10s %14.0f %8.3f %8.2f %10s %11" PRIu64 " %9" PRIu64 "\n", g, d, names[w],
                        mean(acc[w].makespan), base_ms / mean(acc[w].makespan),
                        acc[w].samples ? 100.0 * acc[w].split / acc[w].samples : 0.0, thr.c_str(), acc[w].peak,
                        acc[w].over);
            series[w].title = names[w];
            series[w].x.push_back(static_cast<double>(g));
            series[w].y.push_back(base_ms / mean(acc[w].makespan));
        }
        std::printf(
            "%6s %8s sequence-parallel groups: %zu built once (state shifting) against %.1f a step built on demand\n",
            "", "", omni::balance::groups_prebuilt(d, lo.max_degree),
            static_cast<double>(omni::balance::groups_built_on_demand(lssp_steps)) / static_cast<double>(steps));
    }
    std::printf(
        "MAKESPAN: the slowest replica's time a step in the model's units (mean); VS-BASE: none's (static-sp's when\n"
        "none runs out of memory) / this one's; THRESHOLD: LSSP's mean split threshold; OOM-STEPS: steps with a "
        "sample\n"
        "above --memory-tokens, which whole-sample policies cannot run (their rows: -), or, for static-sp and lssp,\n"
        "above it even split over --max-degree (planned over it all the same)\n");
    if (!plot.empty())
        if (auto st = omni::sim::plot_lines(plot, "omni-sim lssp: workload " + wa.workload, "GPUs",
                                            "makespan of the base / this policy's", series, true);
            !st)
            return fail("--plot " + plot + ": " + st.error());
    return 0;
}

}  // namespace omni::sim::cli
