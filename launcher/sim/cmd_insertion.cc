// omni-sim insertion: encoder work in the LLM's pipeline, layout by layout (omni-sim(1)).
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

}  // namespace omni::sim::cli
