// omni-train-demo: the reference trainer of slurm-omni. Data-parallel training of a two-layer
// MLP regression on a deterministic synthetic dataset, ZeRO-1 sharded Adam, LR warmup and
// cosine decay, gradient accumulation, periodic checkpoints (libomni-ckpt) and a JSONL metrics
// file with one line per optimizer step.
//
// Exactness: the loss of every step is bitwise the same for any data-parallel size and any
// resize history. The ledger gives step k the same samples whatever the DP size; per-sample
// gradients are summed in 64-bit fixed point (exact, order-free); Adam is element-wise. See
// train/model.h.
//
// This program runs standalone as a single rank (no Slurm, no PMIx): quick tries and tests.
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "../ledger.h"
#include "model.h"
#include "optim.h"
#include "state_io.h"

namespace po = boost::program_options;
using namespace omni::train;

namespace {

std::atomic<bool> g_term{false};
void on_term(int) { g_term = true; }

struct Options {
    std::uint64_t steps = 100, global_batch = 64, micro_batch = 8, seed = 1;
    std::uint64_t dataset_size = 131072, warmup = 20, ckpt_every = 0;
    double lr = 1e-2;
    std::string ckpt, metrics;
};

constexpr const char *kProg = "omni-train-demo";

int usage_error(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\nTry '" << kProg << " --help'.\n";
    return 2;
}

// Keeps the metrics lines of steps <= `upto` (a resumed run rewrites the steps after its
// checkpoint, which the previous run may already have logged).
omni::Status trim_metrics(const std::string &path, std::uint64_t upto) {
    std::ifstream in(path);
    if (!in) return omni::Status::success();
    std::ostringstream kept;
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_unsigned())
            return omni::make_error(path + ": not a metrics file of " + kProg + " (line '" +
                                    line.substr(0, 60) + "')");
        if (j["step"].get<std::uint64_t>() <= upto) kept << line << "\n";
    }
    in.close();
    std::ofstream out(path, std::ios::trunc);
    out << kept.str();
    if (!out) return omni::make_error(path + ": cannot rewrite");
    return omni::Status::success();
}

int run(const Options &o) {
    const int rank = 0, world = 1;  // standalone; the elastic runtime provides these under Slurm
    TrainState s;
    s.lr.base = o.lr;
    s.lr.warmup = o.warmup;
    s.lr.total = o.steps;
    omni::launcher::LedgerConfig lc{o.dataset_size, o.global_batch, o.micro_batch, o.seed};

    bool resumed = false;
    if (!o.ckpt.empty()) {
        auto r = load_latest(o.ckpt, rank, world, s);
        if (!r) { std::cerr << kProg << ": --ckpt " << o.ckpt << ": " << r.error() << "\n"; return 1; }
        resumed = r.value();
    }
    omni::launcher::Ledger ledger = [&] {
        if (resumed) {
            auto l = omni::launcher::Ledger::load(s.ledger_json);
            if (l) return std::move(l).value();
            std::cerr << kProg << ": checkpoint ledger: " << l.error() << "\n";
            std::exit(1);
        }
        auto l = omni::launcher::Ledger::create(lc, world);
        if (!l) { std::cerr << kProg << ": " << l.error() << "\n"; std::exit(2); }
        return std::move(l).value();
    }();
    if (resumed) {
        const auto &c = ledger.config();
        if (c.dataset_size != o.dataset_size || c.global_batch != o.global_batch ||
            c.micro_batch != o.micro_batch || c.seed != o.seed) {
            std::cerr << kProg << ": the checkpoint in " << o.ckpt << " was made with other data "
                      << "options (dataset " << c.dataset_size << ", global batch " << c.global_batch
                      << ", micro batch " << c.micro_batch << ", seed " << c.seed << ")\n";
            return 1;
        }
        if (auto st = ledger.resize(world); !st) { std::cerr << kProg << ": " << st.error() << "\n"; return 1; }
        std::cerr << kProg << ": resumed at step " << s.step << " from " << o.ckpt << "\n";
    } else {
        s.params = init_params(o.seed);
        s.adam = AdamShard(shard_range(kParams, rank, world));
    }

    std::ofstream metrics;
    if (!o.metrics.empty()) {
        if (resumed) {
            if (auto st = trim_metrics(o.metrics, s.step); !st) { std::cerr << kProg << ": " << st.error() << "\n"; return 1; }
        }
        metrics.open(o.metrics, resumed ? std::ios::app : std::ios::trunc);
        if (!metrics) { std::cerr << kProg << ": --metrics " << o.metrics << ": cannot open for writing\n"; return 1; }
    }
    const DataSpec data{o.seed, o.dataset_size};
    auto checkpoint = [&]() -> bool {
        s.ledger_json = ledger.serialise();
        if (auto st = save_shard(o.ckpt, s, rank, world); !st) { std::cerr << kProg << ": checkpoint: " << st.error() << "\n"; return false; }
        auto c = commit_state(o.ckpt, s, world);
        if (!c) { std::cerr << kProg << ": checkpoint: " << c.error() << "\n"; return false; }
        return true;
    };

    while (s.step < o.steps) {
        Accum acc;
        for (std::uint32_t m = 0; m < ledger.grad_accum(); ++m) {
            auto idx = ledger.micro_batch(static_cast<std::uint32_t>(rank), m);
            if (!idx) { std::cerr << kProg << ": " << idx.error() << "\n"; return 1; }
            accumulate(s.params, data, idx.value().data(), idx.value().size(), acc);
        }
        const auto grad = mean_gradient(acc, o.global_batch);
        const double loss = mean_loss(acc, o.global_batch);
        const double lr = s.lr.at(s.step);
        s.adam.update(s.params.data(), grad, lr, s.step + 1);
        if (auto st = ledger.commit_step(); !st) { std::cerr << kProg << ": " << st.error() << "\n"; return 1; }
        ++s.step;
        if (metrics.is_open()) {
            char line[256];
            std::snprintf(line, sizeof line,
                          "{\"step\": %" PRIu64 ", \"loss\": %.17g, \"lr\": %.17g, \"world\": %d, "
                          "\"generation\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"clamped\": %" PRIu64 "}\n",
                          s.step, loss, lr, world, s.generation, s.step * o.global_batch, acc.clamped);
            metrics << line << std::flush;
        }
        const bool periodic = o.ckpt_every && s.step % o.ckpt_every == 0;
        if (!o.ckpt.empty() && (periodic || g_term) && !checkpoint()) return 1;
        if (g_term) {
            std::cerr << kProg << ": SIGTERM: stopped at step " << s.step
                      << (o.ckpt.empty() ? " (no --ckpt: state not saved)\n" : ", checkpoint written\n");
            return 128 + SIGTERM;
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    po::options_description desc(
        "Usage: omni-train-demo [OPTIONS]\n\n"
        "The slurm-omni reference trainer: a two-layer MLP regression, data parallel, ZeRO-1\n"
        "Adam, warmup + cosine LR, gradient accumulation, checkpoints, JSONL metrics. The\n"
        "loss of every step is bitwise the same for any DP size and resize history. Runs\n"
        "standalone as one rank; resumes from the newest checkpoint in --ckpt.\n\nOptions");
    desc.add_options()
        ("help,h", "show this help and exit")
        ("steps", po::value<std::uint64_t>(&o.steps)->default_value(o.steps), "optimizer steps in all (the LR decays over them)")
        ("global-batch", po::value<std::uint64_t>(&o.global_batch)->default_value(o.global_batch), "samples per optimizer step, 1..2048")
        ("micro-batch", po::value<std::uint64_t>(&o.micro_batch)->default_value(o.micro_batch), "samples per rank per micro-step; divides the global batch")
        ("seed", po::value<std::uint64_t>(&o.seed)->default_value(o.seed), "data, order and initialisation seed")
        ("dataset-size", po::value<std::uint64_t>(&o.dataset_size)->default_value(o.dataset_size), "samples per epoch")
        ("lr", po::value<double>(&o.lr)->default_value(o.lr), "peak learning rate")
        ("warmup", po::value<std::uint64_t>(&o.warmup)->default_value(o.warmup), "steps of linear warmup")
        ("ckpt", po::value<std::string>(&o.ckpt), "checkpoint root (resume from its newest checkpoint)")
        ("ckpt-every", po::value<std::uint64_t>(&o.ckpt_every)->default_value(0), "checkpoint every N steps (0: only on SIGTERM)")
        ("metrics", po::value<std::string>(&o.metrics), "JSONL metrics file, one line per step");
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
        po::notify(vm);
    } catch (const std::exception &e) {
        return usage_error(e.what());
    }
    if (vm.count("help")) { std::cout << desc << "\n"; return 0; }
    if (o.steps == 0) return usage_error("--steps: expected at least 1");
    if (o.global_batch < 1 || o.global_batch > kMaxBatch)
        return usage_error("--global-batch " + std::to_string(o.global_batch) + ": expected 1.." + std::to_string(kMaxBatch));
    if (o.micro_batch < 1 || o.global_batch % o.micro_batch)
        return usage_error("--micro-batch " + std::to_string(o.micro_batch) + ": expected a divisor of --global-batch " + std::to_string(o.global_batch));
    if (o.dataset_size < 1 || o.dataset_size > omni::launcher::kMaxDatasetSize)
        return usage_error("--dataset-size: expected 1..2^48");
    if (!(o.lr > 0 && o.lr < 10)) return usage_error("--lr: expected a number in (0, 10)");
    if (o.ckpt_every && o.ckpt.empty()) return usage_error("--ckpt-every needs --ckpt DIR");
    struct sigaction sa {};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, nullptr);
    try {
        return run(o);
    } catch (const std::exception &e) {
        std::cerr << kProg << ": internal error: " << e.what() << "\n";
        return 1;
    }
}
