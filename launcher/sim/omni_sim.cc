// omni-sim: MegaScale-Omni's balancing policies on synthetic multimodal workloads, without
// GPUs, with the runtime's own ledger and planner (sim/dp_sim.h). Commands:
//   balance    the policies side by side at several scales (a table, CSV);
//   lssp       long/short sequence parallelism against whole samples and a static degree;
//   insertion  encoder work in the LLM's pipeline, layout by layout;
//   system     the techniques together against static systems (sim/system_sim.h), the
//              paper's numbers beside;
//   predict    a real run's steps (omni-train-demo --metrics) as the model predicts them, and
//              the run's measured step times beside them;
//   workload   a workload as JSON (the generator: presets to edit), or its statistics.
#include <boost/program_options.hpp>
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
#include "sim/dp_sim.h"
#include "sim/plot.h"
#include "sim/system_sim.h"
#include "workload/workload.h"

namespace po = boost::program_options;
using omni::sim::DpJob;
using omni::sim::StepCost;
using omni::sim::TimeModel;
using omni::workload::Workload;

namespace {

constexpr const char *kProg = "omni-sim";
constexpr std::uint64_t kMaxGpus = 1u << 16;
constexpr std::uint64_t kMaxSteps = 100000;

int usage_error(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\nTry '" << kProg << " --help'.\n";
    return 2;
}

int fail(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\n";
    return 1;
}

const char *kUsage =
    "Usage: omni-sim COMMAND [OPTIONS]\n\n"
    "MegaScale-Omni's balancing of multimodal samples over data-parallel replicas, simulated\n"
    "with libomni's own ledger and planner on a synthetic workload (omni-workload(5)).\n\n"
    "Commands:\n"
    "  balance    the policies side by side at several scales: the slowest replica's cost per\n"
    "             step, imbalance, step time and throughput against none\n"
    "  predict    a real run (omni-train-demo --metrics FILE): every step's slowest replica as\n"
    "             the model predicts it, checked against the run's own \"cost\", and the\n"
    "             predicted step times beside the measured ones\n"
    "  lssp       long/short sequence parallelism against whole samples and a static\n"
    "             sequence-parallel degree: the step's makespan under a memory limit\n"
    "  insertion  encoder work in the LLM's 1F1B pipeline: in front of stage 0, on a stage of\n"
    "             its own, or spread over the stages' idle time (uniform insertion)\n"
    "  system     the techniques together against static systems at several scales: step\n"
    "             time, imbalance, bubble, memory per stage and throughput, the paper's beside\n"
    "  workload   a workload as JSON (--workload PRESET writes a file to edit), or --stats\n\n"
    "'omni-sim COMMAND --help' lists a command's options. Exit status: 0 done, 1 failed,\n"
    "2 bad usage.\n";

// A comma-separated list of integers in [min, max].
omni::Result<std::vector<std::uint64_t>> parse_list(const std::string &text, std::uint64_t min, std::uint64_t max,
                                                    const std::string &what) {
    std::vector<std::uint64_t> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        auto v = omni::parse_uint(item, min, max, what);
        if (!v) return omni::Error{v.error()};
        out.push_back(v.value());
    }
    if (out.empty() || out.size() > 64)
        return omni::make_error(what + " '" + text + "': expected 1..64 comma-separated numbers");
    return out;
}

// Options shared by the commands that simulate: the workload and what a cost counts.
struct WorkloadArgs {
    std::string workload = "paper", cost = "tokens";
    Workload w;
    omni::workload::CostKind kind = omni::workload::CostKind::Tokens;
    void add(po::options_description &d) {
        d.add_options()("workload", po::value<std::string>(&workload)->default_value(workload),
                        "FILE or preset (paper, text, uniform): omni-workload(5)")(
            "cost", po::value<std::string>(&cost)->default_value(cost),
            "what a sample costs: tokens, units or compute");
    }
    omni::Status load() {
        auto k = omni::workload::parse_cost_kind(cost);
        if (!k) return omni::make_error("--cost: " + k.error());
        kind = k.value();
        auto l = Workload::load(workload);
        if (!l) return omni::make_error("--workload " + workload + ": " + l.error());
        w = std::move(l).value();
        return omni::Status::success();
    }
};

// Parses argv for one command; returns an exit code when the command should end (help, bad
// usage), else nothing.
std::optional<int> parse(int argc, char **argv, po::options_description &desc, const std::string &usage,
                         po::variables_map &vm) {
    desc.add_options()("help,h", "show this help and exit");
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
        po::notify(vm);
    } catch (const std::exception &e) {
        return usage_error(e.what());
    }
    if (vm.count("help")) {
        std::cout << usage << "\n" << desc << "\n";
        return 0;
    }
    return std::nullopt;
}

double mean(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Integer options, read as text and parsed strictly (common/parse.h): each --NAME from `num`
// into *to, within [min, max]. The first bad one is the error, naming the option.
struct UintOption {
    const char *name;
    std::uint64_t *to, min, max;
};
omni::Status parse_uints(std::map<std::string, std::string> &num, std::initializer_list<UintOption> options) {
    for (const UintOption &n : options) {
        auto v = omni::parse_uint(num[n.name], n.min, n.max, std::string("--") + n.name);
        if (!v) return omni::Error{v.error()};
        *n.to = v.value();
    }
    return omni::Status::success();
}

// Options shared by the commands that run LSSP's planner: the memory limit, the degrees and
// the cost model (balance/lssp.h).
struct LsspArgs {
    std::string memory = "32768", degree = "8";
    double quadratic = 1e-5, comm = 0.1, latency = 50;
    omni::balance::LsspOptions options;
    void add(po::options_description &d) {
        d.add_options()("memory-tokens", po::value<std::string>(&memory)->default_value(memory),
                        "most tokens of one sample a replica may hold (activation memory)")(
            "max-degree", po::value<std::string>(&degree)->default_value(degree),
            "largest sequence-parallel degree, a power of two")(
            "quadratic", po::value<double>(&quadratic)->default_value(quadratic),
            "cost model: compute per token^2 (attention), per token's 1")(
            "sp-comm", po::value<double>(&comm)->default_value(comm),
            "cost model: a split sample's exchange per token and (k-1)/k")(
            "sp-latency", po::value<double>(&latency)->default_value(latency),
            "cost model: a split sample's fixed cost per replica");
    }
    omni::Status load() {
        auto m = omni::parse_uint(memory, 1, std::uint64_t(1) << 32, "--memory-tokens");
        if (!m) return omni::Error{m.error()};
        auto k = omni::parse_uint(degree, 1, 1024, "--max-degree");
        if (!k) return omni::Error{k.error()};
        if (k.value() & (k.value() - 1))
            return omni::make_error("--max-degree " + std::to_string(k.value()) + ": expected a power of two");
        for (auto [name, v] :
             {std::pair{"--quadratic", quadratic}, std::pair{"--sp-comm", comm}, std::pair{"--sp-latency", latency}})
            if (!(v >= 0 && v < 1e9)) return omni::make_error(std::string(name) + ": expected a number in [0, 1e9)");
        options.memory_tokens = m.value();
        options.max_degree = static_cast<std::uint32_t>(k.value());
        options.cost = {1, quadratic, comm, latency};
        return omni::Status::success();
    }
    // "memory T tokens, degrees up to K; time per sample: ..." for a table's heading.
    std::string describe() const {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "memory %" PRIu64
                      " tokens, degrees up to %u; time per sample: L + %.6g L^2, split over k: / k + "
                      "%.6g L (k-1)/k + %.6g",
                      options.memory_tokens, options.max_degree, quadratic, comm, latency);
        return buf;
    }
};

// A comma-separated list, each item through `parse` (a Result-returning parser): the values
// and the items' texts. At least one item; an error names the option.
template <typename Parse>
auto parse_each(const std::string &text, const std::string &option, Parse parse) -> omni::Result<
    std::pair<std::vector<std::decay_t<decltype(parse(std::string()).value())>>, std::vector<std::string>>> {
    std::pair<std::vector<std::decay_t<decltype(parse(std::string()).value())>>, std::vector<std::string>> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        auto v = parse(item);
        if (!v) return omni::make_error(option + ": " + v.error());
        out.first.push_back(v.value());
        out.second.push_back(item);
    }
    if (out.first.empty()) return omni::make_error(option + ": expected at least one item");
    return out;
}

// ---- balance --------------------------------------------------------------------------------
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

// ---- predict --------------------------------------------------------------------------------
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

// ---- lssp -----------------------------------------------------------------------------------
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

// ---- insertion ------------------------------------------------------------------------------
int cmd_insertion(int argc, char **argv) {
    WorkloadArgs wa;
    std::map<std::string, std::string> num;
    std::string layouts_text = "none,front,first-stage,encoder-stage,uniform", schedule_path, plot;
    double transfer = 0.01;
    po::options_description desc("Options");
    wa.add(desc);
    desc.add_options()("stages", po::value<std::string>(&num["stages"])->default_value("8"),
                       "the LLM pipeline's stages")("micro-batches",
                                                    po::value<std::string>(&num["micro-batches"])->default_value("32"),
                                                    "micro-batches a step (1F1B)")(
        "samples-per-micro-batch", po::value<std::string>(&num["samples-per-micro-batch"])->default_value("8"),
        "samples of one micro-batch")("step", po::value<std::string>(&num["step"])->default_value("0"),
                                      "the step drawn (the workload's phase)")(
        "seed", po::value<std::string>(&num["seed"])->default_value("1"), "data order and draws")(
        "transfer", po::value<double>(&transfer)->default_value(transfer),
        "sending one micro-batch's activations between GPUs, as a share of one stage's forward")(
        "frozen-encoders", "encoders without a backward pass")(
        "layouts", po::value<std::string>(&layouts_text)->default_value(layouts_text),
        "comma-separated: none (the LLM alone), front, first-stage, encoder-stage, uniform")(
        "schedule", po::value<std::string>(&schedule_path), "write the uniform schedule as JSON to FILE")(
        "plot", po::value<std::string>(&plot), "also draw the last layout's schedule, stage by stage (PNG)");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim insertion [OPTIONS]", vm)) return *rc;
    std::uint64_t S = 0, M = 0, b = 0, step = 0, seed = 0;
    if (auto st = parse_uints(num, {UintOption{"stages", &S, 1, omni::balance::kMaxStages},
                                    UintOption{"micro-batches", &M, 1, omni::balance::kMaxMicroBatches},
                                    UintOption{"samples-per-micro-batch", &b, 1, 4096},
                                    UintOption{"step", &step, 0, kMaxSteps}, UintOption{"seed", &seed, 0, UINT64_MAX}});
        !st)
        return usage_error(st.error());
    if (!(transfer >= 0 && transfer < 1e6)) return usage_error("--transfer: expected a number in [0, 1e6)");
    auto parsed = parse_each(layouts_text, "--layouts", omni::balance::parse_insertion);
    if (!parsed) return usage_error(parsed.error());
    const std::vector<omni::balance::Insertion> layouts = parsed.value().first;
    if (auto st = wa.load(); !st) return usage_error(st.error());
    // One step's micro-batches from the ledger: the LLM's sequences packed to the step's mean
    // tokens a micro-batch (so every LLM micro-batch costs the same), the encoders' work as
    // the samples' modalities make it (compute minus tokens: encoder_cost_per_unit).
    DpJob job;
    job.ledger = {std::uint64_t(1) << 40, M * b, 1, seed};
    auto made = omni::launcher::Ledger::create(job.ledger, 1);
    if (!made) return fail(made.error());
    omni::launcher::Ledger ledger = std::move(made).value();
    for (std::uint64_t k = 0; k < step; ++k)
        if (auto st = ledger.commit_step(); !st) return fail(st.error());
    const auto samples = ledger.step_samples();
    std::vector<double> enc_f(M, 0);
    double tokens = 0;
    for (std::uint64_t j = 0; j < M; ++j)
        for (std::uint64_t i = j * b; i < (j + 1) * b; ++i) {
            const auto smp = wa.w.sample(seed, samples[i], step);
            const auto t = wa.w.cost(smp, omni::workload::CostKind::Tokens);
            tokens += static_cast<double>(t);
            enc_f[j] += static_cast<double>(wa.w.cost(smp, omni::workload::CostKind::Compute) - t);
        }
    omni::balance::PipelineSpec pipe;
    pipe.stages = static_cast<std::uint32_t>(S);
    pipe.micro_batches = static_cast<std::uint32_t>(M);
    const double f = tokens / static_cast<double>(M) / static_cast<double>(S);
    pipe.forward.assign(S, f);
    pipe.backward.assign(S, 2 * f);
    pipe.transfer = transfer * f;
    omni::balance::EncoderWork enc;
    enc.forward = enc_f;
    for (double x : enc_f) enc.backward.push_back(vm.count("frozen-encoders") ? 0 : 2 * x);
    double enc_total = 0;
    for (std::uint64_t j = 0; j < M; ++j) enc_total += enc.forward[j] + enc.backward[j];
    std::printf(
        "workload %s, step %" PRIu64 ": %" PRIu64 " stages, %" PRIu64 " micro-batches of %" PRIu64
        " samples; LLM forward %.1f a stage, backward %.1f (packed); encoders %s, %.1f in all (%.1f%% of the LLM's)\n",
        wa.workload.c_str(), step, S, M, b, f, 2 * f, vm.count("frozen-encoders") ? "frozen" : "trained", enc_total,
        100.0 * enc_total / (3 * f * static_cast<double>(S * M)));
    std::printf("%-18s %5s %14s %8s %16s %9s\n", "LAYOUT", "GPUS", "MAKESPAN", "BUBBLE", "MB/TIME/GPU", "VS-FIRST");
    double first = 0;
    for (std::size_t k = 0; k < layouts.size(); ++k) {
        // The encoder stage at its best: E GPUs sharing its micro-batches data parallel (each
        // op a E-th as long, E more GPUs), E = 1..S, the E with the most work per GPU.
        const std::uint64_t widths = layouts[k] == omni::balance::Insertion::EncoderStage ? S : 1;
        std::optional<omni::balance::Schedule> best;
        std::uint64_t best_e = 1, gpus = 0;
        double per_gpu = 0;
        for (std::uint64_t e = 1; e <= widths; ++e) {
            omni::balance::EncoderWork shared = enc;
            for (auto *v : {&shared.forward, &shared.backward})
                for (double &x : *v) x /= static_cast<double>(e);
            auto sch = omni::balance::schedule(pipe, shared, layouts[k]);
            if (!sch) return fail(sch.error());
            if (auto st = omni::balance::check_schedule(sch.value(), pipe, shared, layouts[k]); !st)
                return fail(std::string("the ") + omni::balance::insertion_name(layouts[k]) +
                            " schedule: " + st.error());
            const std::uint64_t g = sch.value().gpus + (e - 1);
            const double r = static_cast<double>(M) / sch.value().makespan / static_cast<double>(g);
            if (!best || r > per_gpu) {
                per_gpu = r;
                best = std::move(sch).value();
                best_e = e;
                gpus = g;
            }
        }
        if (k == 0) first = per_gpu;
        const std::string name = std::string(omni::balance::insertion_name(layouts[k])) +
                                 (widths > 1 ? "(" + std::to_string(best_e) + ")" : "");
        std::printf("%-18s %5" PRIu64 " %14.1f %8.4f %16.6g %9.3f\n", name.c_str(), gpus, best->makespan,
                    omni::sim::gpu_bubble(best.value(), layouts[k] == omni::balance::Insertion::EncoderStage
                                                            ? static_cast<std::uint32_t>(best_e)
                                                            : 0),
                    per_gpu, per_gpu / first);
        if (layouts[k] == omni::balance::Insertion::Uniform && !schedule_path.empty()) {
            std::ofstream out(schedule_path);
            out << best->to_json();
            if (!out.flush()) return fail("--schedule " + schedule_path + ": cannot write");
        }
        if (k + 1 == layouts.size() && !plot.empty()) {
            std::vector<omni::sim::Box> boxes;
            const unsigned colour[] = {0x1f77b4, 0x2ca02c, 0xff7f0e, 0xd62728};  // F, B, EF, EB
            for (std::size_t g = 0; g < best->stages.size(); ++g)
                for (const auto &o : best->stages[g])
                    boxes.push_back({o.start, o.end, static_cast<double>(g), colour[static_cast<int>(o.kind)]});
            if (auto st = omni::sim::plot_boxes(plot,
                                                "omni-sim insertion: " + name + ", " + std::to_string(S) + " stages, " +
                                                    std::to_string(M) + " micro-batches",
                                                "time", "stage", boxes,
                                                {{"LLM forward", colour[0]},
                                                 {"LLM backward", colour[1]},
                                                 {"encoder forward", colour[2]},
                                                 {"encoder backward", colour[3]}});
                !st)
                return fail("--plot " + plot + ": " + st.error());
        }
    }
    std::printf(
        "BUBBLE: idle share of the GPUs' time; MB/TIME/GPU: micro-batches per unit of time per GPU; VS-FIRST: against\n"
        "the first layout listed (none: the LLM alone, which does no encoder work)\n");
    return 0;
}

// ---- system ---------------------------------------------------------------------------------
// MegaScale-Omni's speedups over static systems (arXiv 2605.08962, its end-to-end table), by
// GPUs: printed beside omni-sim's own.
constexpr std::pair<std::uint64_t, double> kPaperSpeedup[] = {{64, 1.54}, {128, 3.30}, {256, 7.57}, {512, 1.98}};

std::string paper_speedup(std::uint64_t gpus) {
    for (auto [g, x] : kPaperSpeedup)
        if (g == gpus) {
            char buf[16];
            std::snprintf(buf, sizeof buf, "%.2f", x);
            return buf;
        }
    return "-";
}

// A number in (0, max], the whole text.
omni::Result<double> parse_factor(const std::string &text, double max) {
    char *end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !(v > 0 && v <= max))
        return omni::make_error("'" + text.substr(0, 32) + "': expected a number in (0, " + std::to_string(int(max)) +
                                "]");
    return v;
}

// `w` with the LLM tokens of every modality but the first times `factor`: the other modalities
// `factor` times as long against the first (text) as before, their encoders' work unchanged.
omni::Result<Workload> skewed(const Workload &w, double factor) {
    auto j = nlohmann::json::parse(w.to_json());
    for (std::size_t m = 1; m < j["modalities"].size(); ++m)
        j["modalities"][m]["tokens_per_unit"] = j["modalities"][m]["tokens_per_unit"].get<double>() * factor;
    return Workload::parse(j.dump());
}

// The modality with the most LLM tokens on average against the first: mean tokens, ignoring
// the clamps of lognormal lengths (Length::mean()).
double longest_over_first(const Workload &w) {
    const auto &m = w.modalities();
    double most = 0;
    for (const auto &x : m) most = std::max(most, x.length.mean() * x.tokens_per_unit);
    const double first = m.front().length.mean() * m.front().tokens_per_unit;
    return first > 0 ? most / first : 0;
}

int cmd_system(int argc, char **argv) {
    WorkloadArgs wa;
    std::string gpus_text = "64,128,256,512", systems_text = "static-first,static-stage,multiplex,reorder,omni", csv,
                plot, skew_text;
    std::map<std::string, std::string> num;
    LsspArgs la;
    double transfer = 0.01;
    po::options_description desc("Options");
    wa.add(desc);
    la.add(desc);
    desc.add_options()("gpus", po::value<std::string>(&gpus_text)->default_value(gpus_text),
                       "GPUs, a comma-separated list of scales")(
        "stages", po::value<std::string>(&num["stages"])->default_value("8"), "pipeline stages of one replica")(
        "batch-per-replica", po::value<std::string>(&num["batch-per-replica"])->default_value("32"),
        "samples per replica per step")("micro-batches",
                                        po::value<std::string>(&num["micro-batches"])->default_value("16"),
                                        "micro-batches per replica per step (1F1B)")(
        "steps", po::value<std::string>(&num["steps"])->default_value("50"), "steps per scale and system")(
        "first-step", po::value<std::string>(&num["first-step"])->default_value("0"),
        "steps done before (the workload's phase)")("seed", po::value<std::string>(&num["seed"])->default_value("1"),
                                                    "data order and draws")(
        "transfer", po::value<double>(&transfer)->default_value(transfer),
        "activations between stages, a share of a mean micro-batch's stage forward")(
        "frozen-encoders", "encoders without a backward pass")(
        "systems", po::value<std::string>(&systems_text)->default_value(systems_text),
        "comma-separated: static-first, static-stage, multiplex, reorder, omni")(
        "stage-memory", "also print every system's peak memory stage by stage")(
        "skew", po::value<std::string>(&skew_text),
        "instead of the table, each system's speedup over the best static one with the LLM tokens of every modality "
        "but the first times each factor of LIST")("csv", po::value<std::string>(&csv),
                                                   "also write the table as CSV to FILE")(
        "plot", po::value<std::string>(&plot),
        "also plot each system's throughput against the best static system's, and the paper's, by GPUs (PNG)");
    po::variables_map vm;
    if (auto rc = parse(argc, argv, desc, "Usage: omni-sim system [OPTIONS]", vm)) return *rc;
    std::uint64_t S = 0, per_replica = 0, M = 0, steps = 0, first = 0, seed = 0;
    if (auto st = parse_uints(
            num, {UintOption{"stages", &S, 1, 64}, UintOption{"batch-per-replica", &per_replica, 1, 4096},
                  UintOption{"micro-batches", &M, 1, 1024}, UintOption{"steps", &steps, 1, omni::sim::kMaxSystemSteps},
                  UintOption{"first-step", &first, 0, kMaxSteps}, UintOption{"seed", &seed, 0, UINT64_MAX}});
        !st)
        return usage_error(st.error());
    if (auto st = la.load(); !st) return usage_error(st.error());
    const std::uint64_t degree = la.options.max_degree;
    if (!(transfer >= 0 && transfer < 1e9)) return usage_error("--transfer: expected a number in [0, 1e9)");
    if (per_replica < M)
        return usage_error("--batch-per-replica " + std::to_string(per_replica) +
                           ": expected at least --micro-batches (" + std::to_string(M) + ")");
    auto gpus = parse_list(gpus_text, 1, kMaxGpus, "--gpus");
    if (!gpus) return usage_error(gpus.error());
    for (auto g : gpus.value())
        if (g % (S * degree))
            return usage_error("--gpus " + std::to_string(g) + ": expected a multiple of --stages x --max-degree (" +
                               std::to_string(S * degree) + ")");
    auto parsed = parse_each(systems_text, "--systems", omni::sim::parse_system);
    if (!parsed) return usage_error(parsed.error());
    const std::vector<omni::sim::System> systems = parsed.value().first;
    std::vector<double> skews;
    if (!skew_text.empty()) {
        auto sk = parse_each(skew_text, "--skew", [](const std::string &t) { return parse_factor(t, 64); });
        if (!sk) return usage_error(sk.error());
        skews = sk.value().first;
        if (skews.size() > 64) return usage_error("--skew: at most 64 factors");
    }
    if ((!skews.empty() || !plot.empty()) && std::none_of(systems.begin(), systems.end(), omni::sim::is_static))
        return usage_error(std::string(skews.empty() ? "--plot" : "--skew") +
                           ": --systems lists no static system to compare with");
    if (auto st = wa.load(); !st) return usage_error(st.error());
    if (!skews.empty() && wa.w.modalities().size() < 2)
        return usage_error("--skew: the workload '" + wa.workload +
                           "' has one modality; it scales the others against the first");
    std::ofstream csv_out;
    if (!csv.empty()) {
        csv_out.open(csv);
        if (!csv_out) return fail("--csv " + csv + ": cannot write");
        csv_out << "gpus,replicas,system,encoder_gpus,gpus_used,step_time,imbalance,bubble,first_stage_memory,"
                   "max_memory,split_steps,over_memory_steps,throughput,vs_static,paper\n";
    }
    omni::sim::SystemConfig cfg;
    cfg.stages = static_cast<std::uint32_t>(S);
    cfg.per_replica = static_cast<std::uint32_t>(per_replica);
    cfg.micro_batches = static_cast<std::uint32_t>(M);
    cfg.steps = static_cast<std::uint32_t>(steps);
    cfg.first_step = first;
    cfg.seed = seed;
    cfg.lssp = la.options;
    cfg.frozen_encoders = vm.count("frozen-encoders") > 0;
    cfg.transfer = transfer;
    std::printf("workload %s, %" PRIu64 " steps from step %" PRIu64 "; replicas of %" PRIu64
                " pipeline stages, %" PRIu64 " samples in %" PRIu64 " micro-batches a step; encoders %s; %s\n",
                wa.workload.c_str(), steps, first, S, per_replica, M, cfg.frozen_encoders ? "frozen" : "trained",
                la.describe().c_str());
    std::vector<omni::sim::Series> series(systems.size() + 1);
    std::vector<std::string> stage_lines;
    // Every listed system at `g` GPUs on `w`, and the best static throughput among them (0: none
    // listed).
    std::vector<omni::sim::SystemResult> rows;
    double best_static = 0;
    const auto run_scale = [&](std::uint64_t g, const Workload &w) -> omni::Status {
        cfg.gpus = static_cast<std::uint32_t>(g);
        rows.clear();
        best_static = 0;
        for (auto sys : systems) {
            auto r = omni::sim::simulate_system(cfg, w, sys);
            if (!r)
                return omni::make_error("--gpus " + std::to_string(g) + ", " + omni::sim::system_name(sys) + ": " +
                                        r.error());
            if (omni::sim::is_static(sys)) best_static = std::max(best_static, r.value().throughput());
            rows.push_back(std::move(r).value());
        }
        return omni::Status::success();
    };
    if (!skews.empty()) {
        std::printf(
            "throughput per GPU against the best static system listed, the LLM tokens of every modality but "
            "the first times SKEW\n%6s %14s %-12s",
            "SKEW", "LONGEST/FIRST", "SYSTEM");
        for (auto g : gpus.value()) std::printf(" %8" PRIu64, g);
        std::printf("\n");
        for (double x : skews) {
            auto w = skewed(wa.w, x);
            if (!w) return usage_error("--skew " + std::to_string(x) + ": " + w.error());
            std::vector<std::vector<double>> vs(systems.size());
            for (auto g : gpus.value()) {
                if (auto st = run_scale(g, w.value()); !st) return fail(st.error());
                for (std::size_t i = 0; i < rows.size(); ++i)
                    vs[i].push_back(best_static > 0 ? rows[i].throughput() / best_static : 0);
            }
            for (std::size_t i = 0; i < systems.size(); ++i) {
                if (omni::sim::is_static(systems[i])) continue;
                std::printf("%6.3g %14.2f %-12s", x, longest_over_first(w.value()), omni::sim::system_name(systems[i]));
                for (double v : vs[i]) std::printf(" %8.3f", v);
                std::printf("\n");
            }
        }
        return 0;
    }
    std::printf("%5s %8s %-16s %5s %12s %9s %7s %10s %10s %6s %12s %9s %6s\n", "GPUS", "REPLICAS", "SYSTEM", "USED",
                "STEP-TIME", "IMBALANCE", "BUBBLE", "FIRST-MEM", "MAX-MEM", "SPLIT", "THROUGHPUT", "VS-STATIC",
                "PAPER");
    for (auto g : gpus.value()) {
        if (auto st = run_scale(g, wa.w); !st) return fail(st.error());
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto &r = rows[i];
            std::string name = omni::sim::system_name(r.system);
            if (r.encoder_gpus) name += "(" + std::to_string(r.encoder_gpus) + ")";
            const double max_mem = *std::max_element(r.peak_memory.begin(), r.peak_memory.end());
            const std::string vs = best_static > 0 ? std::to_string(r.throughput() / best_static).substr(0, 5) : "-";
            const std::string paper = r.system == omni::sim::System::Omni ? paper_speedup(g) : "-";
            std::printf("%5" PRIu64 " %8" PRIu64 " %-16s %5" PRIu64
                        " %12.1f %9.3f %7.3f %10.0f %10.0f %6u %12.4g %9s %6s\n",
                        g, g / S, name.c_str(), r.gpus, r.step_time, r.imbalance, r.bubble, r.first_stage_memory,
                        max_mem, r.split_steps, r.throughput() * 1e6, vs.c_str(), paper.c_str());
            if (csv_out.is_open())
                csv_out << g << "," << g / S << "," << omni::sim::system_name(r.system) << "," << r.encoder_gpus << ","
                        << r.gpus << "," << r.step_time << "," << r.imbalance << "," << r.bubble << ","
                        << r.first_stage_memory << "," << max_mem << "," << r.split_steps << "," << r.over_memory_steps
                        << "," << r.throughput() << "," << (best_static > 0 ? vs : "") << ","
                        << (paper == "-" ? "" : paper) << "\n";
            if (best_static > 0) {
                series[i].title = omni::sim::system_name(r.system);
                series[i].x.push_back(static_cast<double>(g));
                series[i].y.push_back(r.throughput() / best_static);
            }
            if (vm.count("stage-memory")) {
                std::string line = "  " + std::to_string(g) + " " + name + ":";
                for (double m : r.peak_memory) line += " " + std::to_string(static_cast<std::uint64_t>(m));
                stage_lines.push_back(line);
            }
        }
        if (paper_speedup(g) != "-") {
            series.back().title = "MegaScale-Omni (paper)";
            series.back().x.push_back(static_cast<double>(g));
            series.back().y.push_back(std::stod(paper_speedup(g)));
        }
    }
    std::printf(
        "USED: GPUs (an encoder stage's included); STEP-TIME: the slowest replica's pipeline, mean over the steps, in\n"
        "token-times; IMBALANCE: slowest / mean replica; BUBBLE: idle share of the GPUs; FIRST-MEM, MAX-MEM: peak\n"
        "activations of the LLM's first stage and of any GPU, in tokens of the whole LLM; SPLIT: steps with samples\n"
        "split (sequence parallel); THROUGHPUT: samples per million token-times per GPU; VS-STATIC: against the best\n"
        "static system listed; PAPER: MegaScale-Omni's speedup over static systems at that scale\n");
    if (!stage_lines.empty()) {
        std::printf("peak memory per GPU of a replica, stage 0 first (an encoder stage before the LLM's):\n");
        for (const auto &l : stage_lines) std::printf("%s\n", l.c_str());
    }
    if (csv_out.is_open() && !csv_out.flush()) return fail("--csv " + csv + ": write failed");
    if (!plot.empty()) {
        std::vector<omni::sim::Series> drawn;
        for (auto &s : series)
            if (!s.x.empty()) drawn.push_back(s);
        if (auto st = omni::sim::plot_lines(plot, "omni-sim system: workload " + wa.workload, "GPUs",
                                            "throughput per GPU / the best static system's", drawn, true);
            !st)
            return fail("--plot " + plot + ": " + st.error());
    }
    return 0;
}

// ---- workload -------------------------------------------------------------------------------
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

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::cerr << kUsage;
        return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help") {
        std::cout << kUsage;
        return 0;
    }
    try {
        if (cmd == "balance") return cmd_balance(argc - 1, argv + 1);
        if (cmd == "predict") return cmd_predict(argc - 1, argv + 1);
        if (cmd == "workload") return cmd_workload(argc - 1, argv + 1);
        if (cmd == "lssp") return cmd_lssp(argc - 1, argv + 1);
        if (cmd == "insertion") return cmd_insertion(argc - 1, argv + 1);
        if (cmd == "system") return cmd_system(argc - 1, argv + 1);
    } catch (const std::exception &e) {
        return fail(std::string("internal error: ") + e.what());
    }
    return usage_error("unknown command '" + cmd.substr(0, 32) +
                       "'; expected balance, lssp, insertion, system, predict or workload");
}
