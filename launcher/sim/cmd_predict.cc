// omni-sim predict: a real run's steps as the model predicts them, beside the measured ones (omni-sim(1)).
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

namespace {

struct MetricsLine {
    std::uint64_t step = 0, world = 0;
    bool has_cost = false, has_time = false;
    std::uint64_t slowest = 0, total = 0;
    double time_ms = 0;
};

omni::Result<std::vector<MetricsLine>> read_metrics(const std::string &path) {
    std::ifstream in(path);
    if (!in) return omni::make_error(path + ": cannot read");
    std::vector<MetricsLine> out;
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        if (n > kMaxSteps) return omni::make_error(path + ": more than " + std::to_string(kMaxSteps) + " lines");
        auto j = nlohmann::json::parse(line, nullptr, false);
        const auto where = path + ":" + std::to_string(n) + ": ";
        if (j.is_discarded() || !j.is_object()) return omni::make_error(where + "not a JSON object");
        MetricsLine m;
        if (!j.contains("step") || !j["step"].is_number_unsigned() || !j.contains("world") ||
            !j["world"].is_number_unsigned())
            return omni::make_error(where + "no \"step\" and \"world\" (an omni-train-demo --metrics file?)");
        m.step = j["step"].get<std::uint64_t>();
        m.world = j["world"].get<std::uint64_t>();
        if (j.contains("cost")) {
            const auto &c = j["cost"];
            if (!c.is_array() || c.size() != 2 || !c[0].is_number_unsigned() || !c[1].is_number_unsigned())
                return omni::make_error(where + "\"cost\": expected [slowest, total]");
            m.has_cost = true;
            m.slowest = c[0].get<std::uint64_t>();
            m.total = c[1].get<std::uint64_t>();
        }
        if (j.contains("time_ms")) {
            if (!j["time_ms"].is_number()) return omni::make_error(where + "\"time_ms\": expected a number");
            m.has_time = true;
            m.time_ms = j["time_ms"].get<double>();
        }
        if (m.step != out.size() + 1)
            return omni::make_error(where + "step " + std::to_string(m.step) + "; expected " +
                                    std::to_string(out.size() + 1) + " (a complete run: steps 1, 2, ... once each)");
        out.push_back(m);
    }
    if (out.empty()) return omni::make_error(path + ": no steps");
    return out;
}

}  // namespace

int cmd_predict(int argc, char **argv) {
    WorkloadArgs wa;
    std::string metrics, balance = "none";
    std::map<std::string, std::string> num;
    double pace = 0, overhead_ms = 0;
    po::options_description desc("Options (the run's own, as omni-train-demo took them)");
    wa.add(desc);
    desc.add_options()("metrics", po::value<std::string>(&metrics),
                       "the run's --metrics file (with --timestamps for the measured times)")(
        "global-batch", po::value<std::string>(&num["global-batch"])->default_value("64"), "the run's global batch")(
        "dataset-size", po::value<std::string>(&num["dataset-size"])->default_value("131072"),
        "the run's dataset size")("seed", po::value<std::string>(&num["seed"])->default_value("1"), "the run's seed")(
        "mp", po::value<std::string>(&num["mp"])->default_value("1"),
        "the run's ranks per replica (world / mp replicas)")(
        "replicas-per-node", po::value<std::string>(&num["replicas-per-node"])->default_value("1"),
        "replicas per node, consecutive in DP rank (the groups of grouped)")(
        "skip", po::value<std::string>(&num["skip"])->default_value("5"), "steps left out of the means (start-up)")(
        "balance", po::value<std::string>(&balance)->default_value(balance), "the run's --balance")(
        "pace-ns-per-token", po::value<double>(&pace)->default_value(pace), "the run's --pace-ns-per-token")(
        "overhead-ms", po::value<double>(&overhead_ms)->default_value(overhead_ms),
        "time per step besides the pace (calibrate: the mean step of the same job without pace)")("per-step",
                                                                                                  "print every step");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim predict --metrics FILE [OPTIONS]", vm)) return *rc;
    if (metrics.empty()) return usage_error("predict needs --metrics FILE");
    std::uint64_t batch = 0, dataset = 0, seed = 0, mp = 0, per_node = 0, skip = 0;
    if (auto st = parse_uints(
            num, {UintOption{"global-batch", &batch, 1, omni::launcher::kMaxGlobalBatch},
                  UintOption{"dataset-size", &dataset, 1, omni::launcher::kMaxDatasetSize},
                  UintOption{"seed", &seed, 0, UINT64_MAX}, UintOption{"mp", &mp, 1, 1024},
                  UintOption{"replicas-per-node", &per_node, 1, 1u << 20}, UintOption{"skip", &skip, 0, kMaxSteps}});
        !st)
        return usage_error(st.error());
    if (!(pace >= 0 && pace < 1e9)) return usage_error("--pace-ns-per-token: expected a number in [0, 1e9)");
    if (!(overhead_ms >= 0 && overhead_ms < 1e7)) return usage_error("--overhead-ms: expected a number in [0, 1e7)");
    auto bal = omni::launcher::parse_balance(balance);
    if (!bal) return usage_error("--balance: " + bal.error());
    if (auto st = wa.load(); !st) return usage_error(st.error());
    auto lines = read_metrics(metrics);
    if (!lines) return fail("--metrics " + lines.error());
    std::vector<std::uint32_t> reps;
    for (const auto &m : lines.value()) {
        if (m.world == 0 || m.world % mp)
            return fail("--metrics " + metrics + ": step " + std::to_string(m.step) + ": world " +
                        std::to_string(m.world) + " is not a multiple of --mp " + std::to_string(mp));
        reps.push_back(static_cast<std::uint32_t>(m.world / mp));
    }
    DpJob job;
    job.ledger = {dataset, batch, 1, seed};
    job.replicas_per_node = static_cast<std::uint32_t>(per_node);
    job.balance = bal.value();
    job.cost = wa.kind;
    auto sim = omni::sim::simulate(job, wa.w, reps);
    if (!sim) return fail(sim.error());
    const TimeModel tm{pace, overhead_ms};
    std::size_t mismatches = 0, with_cost = 0;
    std::vector<double> measured, predicted;
    if (vm.count("per-step"))
        std::printf("%6s %6s %12s %12s %12s %12s\n", "STEP", "WORLD", "SLOWEST", "RUN-SLOWEST", "PRED-MS", "RUN-MS");
    const auto &ls = lines.value();
    for (std::size_t k = 0; k < ls.size(); ++k) {
        const StepCost &c = sim.value()[k];
        if (ls[k].has_cost) {
            ++with_cost;
            if (ls[k].slowest != c.slowest || ls[k].total != c.total) {
                if (mismatches < 5)
                    std::fprintf(stderr,
                                 "%s: step %" PRIu64 ": the run's cost [%" PRIu64 ", %" PRIu64
                                 "], the model's [%" PRIu64 ", %" PRIu64 "]\n",
                                 kProg, ls[k].step, ls[k].slowest, ls[k].total, c.slowest, c.total);
                ++mismatches;
            }
        }
        const bool timed = k > 0 && ls[k].has_time && ls[k - 1].has_time;
        const double run_ms = timed ? ls[k].time_ms - ls[k - 1].time_ms : 0;
        if (vm.count("per-step"))
            std::printf("%6" PRIu64 " %6" PRIu64 " %12" PRIu64 " %12s %12.3f %12s\n", ls[k].step, ls[k].world,
                        c.slowest, ls[k].has_cost ? std::to_string(ls[k].slowest).c_str() : "-", tm.step_ms(c),
                        timed ? std::to_string(run_ms).c_str() : "-");
        if (k >= skip && timed) {
            measured.push_back(run_ms);
            predicted.push_back(tm.step_ms(c));
        }
    }
    std::printf("steps %zu (worlds from the run), cost checked on %zu: %zu differ\n", ls.size(), with_cost, mismatches);
    if (!measured.empty())
        std::printf("mean step over steps %" PRIu64
                    "..%zu: measured %.3f ms (median %.3f), predicted %.3f ms; predicted / "
                    "measured %.4f\n",
                    skip + 1, ls.size(), mean(measured), median(measured), mean(predicted),
                    mean(predicted) / mean(measured));
    else
        std::printf("no measured step times (run the trainer with --timestamps)\n");
    return mismatches ? 1 : 0;
}

}  // namespace omni::sim::cli
