// omni-sim balance: the balancing policies side by side at several scales (omni-sim(1)).
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

int cmd_balance(int argc, char **argv) {
    WorkloadArgs wa;
    std::string gpus_text = "64,128,256,512", policies_text = "none,lpt,kk,grouped", csv, plot;
    std::uint64_t mp = 1, per_node = 8, per_replica = 16, steps = 50, first = 0, seed = 1;
    double ns_per_token = 1000, overhead_ms = 0;
    po::options_description desc("Options");
    wa.add(desc);
    std::map<std::string, std::string> num;
    desc.add_options()("gpus", po::value<std::string>(&gpus_text)->default_value(gpus_text),
                       "GPUs, a comma-separated list of scales")(
        "mp", po::value<std::string>(&num["mp"])->default_value("1"),
        "GPUs per replica (model parallel); divides --gpus-per-node")(
        "gpus-per-node", po::value<std::string>(&num["gpus-per-node"])->default_value("8"),
        "GPUs per node: the groups of grouped")("batch-per-replica",
                                                po::value<std::string>(&num["batch-per-replica"])->default_value("16"),
                                                "samples per replica per step (B = replicas x this)")(
        "steps", po::value<std::string>(&num["steps"])->default_value("50"), "steps per scale and policy")(
        "first-step", po::value<std::string>(&num["first-step"])->default_value("0"),
        "steps done before (the workload's phase)")("seed", po::value<std::string>(&num["seed"])->default_value("1"),
                                                    "data order and draws")(
        "policies", po::value<std::string>(&policies_text)->default_value(policies_text),
        "comma-separated: none, lpt, kk, grouped, POLICY:job|node, lssp")(
        "ns-per-token", po::value<double>(&ns_per_token)->default_value(ns_per_token),
        "time model: compute per unit of cost")(
        "overhead-ms", po::value<double>(&overhead_ms)->default_value(overhead_ms), "time model: fixed time per step")(
        "csv", po::value<std::string>(&csv), "also write the table as CSV to FILE")(
        "plot", po::value<std::string>(&plot), "also plot each policy's speedup over none against the GPUs (PNG)");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim balance [OPTIONS]", vm)) return *rc;
    if (auto st = parse_uints(
            num, {UintOption{"mp", &mp, 1, 1024}, UintOption{"gpus-per-node", &per_node, 1, 1024},
                  UintOption{"batch-per-replica", &per_replica, 1, 4096}, UintOption{"steps", &steps, 1, kMaxSteps},
                  UintOption{"first-step", &first, 0, kMaxSteps}, UintOption{"seed", &seed, 0, UINT64_MAX}});
        !st)
        return usage_error(st.error());
    if (!(ns_per_token > 0 && ns_per_token < 1e9)) return usage_error("--ns-per-token: expected a number in (0, 1e9)");
    if (!(overhead_ms >= 0 && overhead_ms < 1e7)) return usage_error("--overhead-ms: expected a number in [0, 1e7)");
    if (per_node % mp)
        return usage_error("--mp " + std::to_string(mp) + ": expected a divisor of --gpus-per-node " +
                           std::to_string(per_node));
    auto gpus = parse_list(gpus_text, 1, kMaxGpus, "--gpus");
    if (!gpus) return usage_error(gpus.error());
    for (auto g : gpus.value())
        if (g % per_node)
            return usage_error("--gpus " + std::to_string(g) + ": expected whole nodes of --gpus-per-node " +
                               std::to_string(per_node));
    auto parsed = parse_each(policies_text, "--policies", omni::launcher::parse_balance);
    if (!parsed) return usage_error(parsed.error());
    const std::vector<omni::launcher::BalanceOptions> policies = parsed.value().first;
    const std::vector<std::string> names = parsed.value().second;
    if (auto st = wa.load(); !st) return usage_error(st.error());
    std::ofstream csv_out;
    if (!csv.empty()) {
        csv_out.open(csv);
        if (!csv_out) return fail("--csv " + csv + ": cannot write");
        csv_out << "gpus,replicas,policy,slowest_mean,imbalance_mean,imbalance_max,bound_mean,step_ms,samples_per_s,vs_"
                   "none,"
                   "plan_ms_per_10k\n";
    }
    const TimeModel tm{ns_per_token, overhead_ms};
    std::vector<omni::sim::Series> series;
    std::printf("workload %s, cost %s, %" PRIu64 " steps from step %" PRIu64 ", %" PRIu64
                " samples per replica, MP %" PRIu64 ", %" PRIu64
                " GPUs per node; time: %.6g ns per token + %.6g ms per step\n",
                wa.workload.c_str(), omni::workload::cost_kind_name(wa.kind), steps, first, per_replica, mp, per_node,
                ns_per_token, overhead_ms);
    std::printf("%6s %8s %-10s %14s %10s %10s %10s %10s %14s %8s %10s\n", "GPUS", "REPLICAS", "POLICY", "SLOWEST",
                "IMBALANCE", "IMB-MAX", "BOUND", "STEP-MS", "SAMPLES/S", "VS-NONE", "PLAN-MS/10K");
    for (auto g : gpus.value()) {
        const std::uint64_t d = g / mp;
        if (d > omni::launcher::kMaxDpSize || d * per_replica > omni::balance::kMaxSamples)
            return usage_error("--gpus " + std::to_string(g) + ": too many samples a step");
        struct Row {
            double slowest, imb, imb_max, bound, step_ms, plan;
        };
        std::vector<Row> rows;
        for (std::size_t pi = 0; pi < policies.size(); ++pi) {
            DpJob job;
            job.ledger = {std::uint64_t(1) << 40, d * per_replica, 1, seed};
            job.replicas_per_node = static_cast<std::uint32_t>(per_node / mp);
            job.balance = policies[pi];
            job.cost = wa.kind;
            // The steps before --first-step only move the ledger; the means start there.
            std::vector<std::uint32_t> reps(first + steps, static_cast<std::uint32_t>(d));
            auto r = omni::sim::simulate(job, wa.w, reps);
            if (!r) return fail(r.error());
            std::vector<double> slowest, imb, ms, bound;
            double plan_us = 0, samples = 0;
            for (std::size_t k = first; k < r.value().size(); ++k) {
                const StepCost &c = r.value()[k];
                slowest.push_back(static_cast<double>(c.slowest));
                imb.push_back(c.imbalance());
                bound.push_back(c.bound());
                ms.push_back(tm.step_ms(c));
                plan_us += c.plan_us;
                samples += static_cast<double>(d * per_replica);
            }
            rows.push_back({mean(slowest), mean(imb), *std::max_element(imb.begin(), imb.end()), mean(bound), mean(ms),
                            plan_us / 1000.0 / (samples / 10000.0)});
        }
        // Against none when it is listed, else against the first policy.
        std::size_t base = 0;
        for (std::size_t pi = 0; pi < policies.size(); ++pi)
            if (!policies[pi].active()) base = pi;
        for (std::size_t pi = 0; pi < rows.size(); ++pi) {
            const Row &w = rows[pi];
            const double per_s = static_cast<double>(d * per_replica) / (w.step_ms / 1000.0);
            const double vs = rows[base].step_ms / w.step_ms;
            std::printf("%6" PRIu64 " %8" PRIu64 " %-10s %14.0f %10.4f %10.4f %10.4f %10.3f %14.1f %8.3f %10.4f\n", g,
                        d, names[pi].c_str(), w.slowest, w.imb, w.imb_max, w.bound, w.step_ms, per_s, vs, w.plan);
            if (csv_out.is_open())
                csv_out << g << "," << d << "," << names[pi] << "," << w.slowest << "," << w.imb << "," << w.imb_max
                        << "," << w.bound << "," << w.step_ms << "," << per_s << "," << vs << "," << w.plan << "\n";
            series.resize(rows.size());
            series[pi].title = names[pi];
            series[pi].x.push_back(static_cast<double>(g));
            series[pi].y.push_back(vs);
        }
    }
    if (!plot.empty())
        if (auto st = omni::sim::plot_lines(plot, "omni-sim balance: workload " + wa.workload, "GPUs",
                                            "step time of none / this policy's", series, true);
            !st)
            return fail("--plot " + plot + ": " + st.error());
    if (csv_out.is_open() && !csv_out.flush()) return fail("--csv " + csv + ": write failed");
    std::printf(
        "SLOWEST: the slowest replica's cost, mean over the steps; IMBALANCE: slowest / mean replica; BOUND: the\n"
        "least imbalance whole samples allow (the costliest sample, or the mean);\n");
    std::printf(
        "VS-NONE: none's step time / this policy's (the first policy's when none is not listed); PLAN-MS/10K:\n"
        "the planner's time per 10k samples of a step, every group's on one core\n");
    return 0;
}

}  // namespace omni::sim::cli
