// omni-sim system: the techniques together against static systems, the paper's numbers beside (omni-sim(1)).
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

}  // namespace

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

}  // namespace omni::sim::cli
