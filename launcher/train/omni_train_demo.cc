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
// Under omni-launch it is one rank of an elastic job (libomni's runtime: PMIx, the
// coordinator, resizes at step boundaries); without a coordinator it runs standalone as a
// single rank (no Slurm, no PMIx): quick tries and tests.
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "omni/job_options.h"
#include "omni/parse.h"

#include "../comm.h"
#include "../ledger.h"
#include "../runtime.h"
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
    std::uint64_t pace_ms = 0;
    bool timestamps = false;
    std::string ckpt, metrics, sample_log;
    // Option parsing's notes, printed by rank 0 once the runtime knows the rank (every rank
    // parses the same command line and job environment, so each would print them).
    std::vector<std::string> notes;
};

constexpr const char *kProg = "omni-train-demo";
// Exit status when ranks were lost and fewer units than the elastic minimum are left.
constexpr int kExitBelowMin = 3;

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

// Every rank's parameters are the same after an optimizer step: each rank updated its own
// ZeRO-1 range; an allgather of the (padded) ranges rebuilds the whole vector exactly.
omni::Status gather_params(omni::launcher::Communicator &comm, std::vector<float> &params) {
    const int world = comm.size(), rank = comm.rank();
    if (world == 1) return omni::Status::success();
    const std::size_t chunk = (kParams + world - 1) / world;
    std::vector<float> send(chunk, 0.0f), recv(chunk * world);
    const Range mine = shard_range(kParams, rank, world);
    std::copy(params.begin() + mine.begin, params.begin() + mine.end, send.begin());
    if (auto st = comm.allgather(send.data(), recv.data(), chunk, omni::launcher::DType::fp32); !st) return st;
    for (int r = 0; r < world; ++r) {
        const Range rr = shard_range(kParams, r, world);
        std::copy(recv.begin() + r * chunk, recv.begin() + r * chunk + rr.size(), params.begin() + rr.begin);
    }
    return omni::Status::success();
}

std::string shortest(double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// A resumed run keeps the LR schedule it started with: the checkpoint's schedule must be the
// one the options give (as Megatron-LM refuses a mismatch unless told which one wins), else
// the error names the option and both values. (The data order is checked by the runtime when
// the ledger is restored.)
omni::Status check_schedule(const LrSchedule &saved, const LrSchedule &run) {
    auto differs = [](const std::string &option, const std::string &was, const std::string &is) {
        return omni::make_error(option + " " + is + ": the checkpoint's LR schedule has " + was +
                                "; resume with the options of the run it continues, or start "
                                "from an empty checkpoint directory");
    };
    if (saved.total != run.total)
        return differs("--steps", "a total of " + std::to_string(saved.total) + " steps",
                       std::to_string(run.total));
    if (saved.warmup != run.warmup)
        return differs("--warmup", std::to_string(saved.warmup) + " warmup steps",
                       std::to_string(run.warmup));
    if (saved.base != run.base)   // the shortest text that reads back as each value
        return differs("--lr", "a peak LR of " + shortest(saved.base), shortest(run.base));
    return omni::Status::success();
}

int fail(const std::string &msg) {
    std::cerr << kProg << ": " << msg << "\n";
    return 1;
}

int run(const Options &o) {
    using omni::launcher::Outcome;
    // Under omni-launch the runtime joins the job's coordinator (world, rank, resizes); without
    // one (no OMNI_COORD_*) it is a single standalone rank.
    auto rtr = omni::launcher::Runtime::from_environment();
    if (!rtr) return fail(rtr.error());
    auto &rt = *rtr.value();

    TrainState s;
    s.lr.base = o.lr;
    s.lr.warmup = o.warmup;
    s.lr.total = o.steps;
    s.params = init_params(o.seed);
    // The runtime owns the shard sizes: it resizes m and v at every reshape.
    if (auto st = rt.register_params(s.params.data(), kParams); !st) return fail(st.error());
    for (auto *v : {&s.adam.m, &s.adam.v})
        if (auto r = rt.register_shard(v, kParams); !r) return fail(r.error());
    if (auto st = rt.configure_ledger({o.dataset_size, o.global_batch, o.micro_batch, o.seed}); !st)
        return fail(st.error());
    auto started = rt.start();
    if (!started) return fail(started.error());
    if (rt.rank() == 0)
        for (const auto &n : o.notes) std::cerr << kProg << ": note: " << n << "\n";
    s.step = started.value().step;
    s.generation = rt.generation();
    s.adam.range = shard_range(kParams, static_cast<int>(rt.rank()), static_cast<int>(rt.world()));

    // Loads the newest checkpoint into the registered buffers (a fresh start, or a rewind
    // after lost ranks). Returns false when there is none.
    auto load = [&]() -> omni::Result<bool> {
        TrainState c;
        auto r = load_latest(o.ckpt, static_cast<int>(rt.rank()), static_cast<int>(rt.world()), c);
        if (!r || !r.value()) return r;
        if (auto st = check_schedule(c.lr, s.lr); !st) return omni::Error{st.error()};
        s.step = c.step;
        s.lr = c.lr;
        std::copy(c.params.begin(), c.params.end(), s.params.begin());
        s.adam.range = c.adam.range;
        s.adam.m = c.adam.m;  // same vector objects: the runtime keeps pointers to them
        s.adam.v = c.adam.v;
        if (auto st = rt.restore_ledger(c.ledger_json); !st) return omni::Error{st.error()};
        return true;
    };
    const bool joined = started.value().joined;
    if (!o.ckpt.empty() && (!joined || started.value().rewind)) {
        auto r = load();
        if (!r) return fail("--ckpt " + o.ckpt + ": " + r.error());
        if (r.value() && rt.rank() == 0)
            std::cerr << kProg << ": resumed at step " << s.step << " from " << o.ckpt << "\n";
    }

    // Rank 0 writes the metrics (whichever rank is 0 now: rank 0 may have been lost); a resumed
    // or rewound run rewrites the steps after its checkpoint.
    std::ofstream metrics;
    auto reopen_metrics = [&]() -> omni::Status {
        if (metrics.is_open()) metrics.close();
        if (o.metrics.empty() || rt.rank() != 0) return omni::Status::success();
        if (s.step > 0)
            if (auto st = trim_metrics(o.metrics, s.step); !st) return st;
        metrics.open(o.metrics, s.step > 0 ? std::ios::app : std::ios::trunc);
        if (!metrics) return omni::make_error("--metrics " + o.metrics + ": cannot open for writing");
        return omni::Status::success();
    };
    if (auto st = reopen_metrics(); !st) return fail(st.error());
    // After ranks were lost: every survivor reloads the newest checkpoint.
    auto rewind = [&]() -> omni::Status {
        if (o.ckpt.empty()) return omni::make_error("ranks were lost and there is no --ckpt to rewind to");
        auto r = load();
        if (!r) return omni::make_error("rewind: " + r.error());
        if (!r.value()) return omni::make_error("ranks were lost before the first checkpoint in " + o.ckpt);
        if (rt.rank() == 0)
            std::cerr << kProg << ": ranks lost; rewound to step " << s.step << " with world "
                      << rt.world() << "\n";
        return reopen_metrics();
    };
    // --sample-log: the indices this rank trained on, "STEP GENERATION I I ...\n" per step, so
    // a test can check exactly which samples each epoch used. A step redone after a rewind
    // has a higher generation than its lost first run. One file per process: HOST-PID.
    std::ofstream sample_log;
    if (!o.sample_log.empty()) {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "host");
        const std::string path = o.sample_log + "/" + host + "-" + std::to_string(getpid()) + ".samples";
        sample_log.open(path, std::ios::app);
        if (!sample_log) return fail("--sample-log " + o.sample_log + ": cannot write " + path);
    }
    std::string step_indices;   // this rank's indices in the step, as text
    const DataSpec data{o.seed, o.dataset_size};
    // Every rank writes its shard, then rank 0 commits once all are written.
    auto checkpoint = [&]() -> omni::Status {
        s.generation = rt.generation();
        s.ledger_json = rt.ledger()->serialise();
        s.data_epoch = rt.ledger()->epoch();
        s.data_seed = rt.ledger()->config().seed;
        const int rank = static_cast<int>(rt.rank()), world = static_cast<int>(rt.world());
        if (auto st = save_shard(o.ckpt, s, rank, world); !st) return st;
        if (auto st = rt.comm().barrier(); !st) return st;
        if (rank == 0)
            if (auto c = commit_state(o.ckpt, s, world); !c) return omni::Error{c.error()};
        return rt.comm().barrier();
    };

    // The job stops because ranks were lost and too few are left: the lost ranks' optimizer
    // shards are gone, so the newest periodic checkpoint is the state to restart from.
    auto stopped_after_loss = [&](const std::string &reason) {
        if (rt.rank() == 0) {
            std::string newest = "none";
            if (!o.ckpt.empty()) {
                TrainState c;
                auto r = load_latest(o.ckpt, 0, 1, c);
                if (r && r.value()) newest = "step " + std::to_string(c.step) + " in " + o.ckpt;
            }
            std::cerr << kProg << ": stopped at step " << s.step << " (" << reason
                      << "): fewer units than the elastic minimum are left; newest checkpoint: "
                      << newest << "\n";
        }
        return kExitBelowMin;
    };

    while (s.step < o.steps) {
        const auto *ledger = rt.ledger();
        Accum acc;
        // Which samples the step consumed, summed over ranks (count, sum and sum of squares of
        // the indices, wrapping): the metrics let a test check that every sample of an epoch
        // was used exactly once whatever the resizes.
        std::int64_t seen[3] = {0, 0, 0};
        step_indices.clear();
        for (std::uint32_t m = 0; m < ledger->grad_accum(); ++m) {
            auto idx = ledger->micro_batch(rt.rank(), m);
            if (!idx) return fail(idx.error());
            const std::vector<std::uint64_t> &ix = idx.value();
            accumulate(s.params, data, ix.data(), ix.size(), acc);
            for (std::uint64_t i : ix) {
                if (sample_log.is_open()) step_indices += " " + std::to_string(i);
                seen[0] += 1;
                seen[1] = static_cast<std::int64_t>(static_cast<std::uint64_t>(seen[1]) + i);
                seen[2] = static_cast<std::int64_t>(static_cast<std::uint64_t>(seen[2]) + i * i);
            }
        }
        if (o.pace_ms) usleep(static_cast<useconds_t>(o.pace_ms * 1000));
        // Exact: integer sums do not depend on how the batch was split among ranks.
        omni::Status cs;
        for (auto [buf, n] : {std::pair{acc.v.data(), acc.v.size()}, std::pair{seen, std::size_t(3)}})
            if (cs) cs = rt.comm().allreduce(buf, n, omni::launcher::DType::i64, omni::launcher::ReduceOp::sum);
        const auto grad = mean_gradient(acc, o.global_batch);
        const double loss = mean_loss(acc, o.global_batch);
        const double lr = s.lr.at(s.step);
        if (cs) {
            s.adam.update(s.params.data(), grad, lr, s.step + 1);
            cs = gather_params(rt.comm(), s.params);
        }
        if (!cs) {
            if (rt.standalone()) return fail(cs.error());
            // A peer died inside the step. The survivors meet at the next boundary, where the
            // coordinator (told by omni-launch, or by the boundary timeout) answers REWIND.
            std::cerr << kProg << ": rank " << rt.rank() << ": step " << s.step + 1 << ": "
                      << cs.error() << "; asking the coordinator\n";
            auto b = rt.boundary(s.step + 1);
            if (!b) return fail(b.error());
            if (b.value().outcome == Outcome::Stop) return stopped_after_loss(b.value().reason);
            if (b.value().outcome == Outcome::Left) return 0;
            if (b.value().outcome != Outcome::Rewind)
                return fail(std::string("after a failed collective the coordinator answered ") +
                            omni::launcher::to_string(b.value().outcome));
            if (auto st = rewind(); !st) return fail(st.error());
            continue;
        }
        ++s.step;
        if (sample_log.is_open()) {
            sample_log << s.step << " " << rt.generation() << step_indices << "\n" << std::flush;
            if (!sample_log) return fail("--sample-log " + o.sample_log + ": write failed");
        }
        if (metrics.is_open()) {
            char line[384];
            std::snprintf(line, sizeof line,
                          "{\"step\": %" PRIu64 ", \"loss\": %.17g, \"lr\": %.17g, \"world\": %u, "
                          "\"generation\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"clamped\": %" PRIu64
                          ", \"step_samples\": [%" PRId64 ", %" PRIu64 ", %" PRIu64 "]}\n",
                          s.step, loss, lr, rt.world(), rt.generation(), s.step * o.global_batch,
                          acc.clamped, seen[0], static_cast<std::uint64_t>(seen[1]),
                          static_cast<std::uint64_t>(seen[2]));
            if (o.timestamps) {  // wall clock, for benchmarks; off by default so runs compare bytewise
                const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
                std::string l(line);
                l.insert(l.size() - 2, ", \"time_ms\": " + std::to_string(now));
                metrics << l << std::flush;
            } else {
                metrics << line << std::flush;
            }
        }
        auto b = rt.boundary(s.step);
        if (!b) return fail(b.error());
        switch (b.value().outcome) {
            case Outcome::Continue:
                break;
            case Outcome::Reshaped:
                s.adam.range = shard_range(kParams, static_cast<int>(rt.rank()), static_cast<int>(rt.world()));
                if (auto st = reopen_metrics(); !st) return fail(st.error());
                if (rt.rank() == 0)
                    std::cerr << kProg << ": step " << s.step << ": world " << b.value().previous_world
                              << " -> " << rt.world() << " (" << b.value().reason << ")\n";
                break;
            case Outcome::Rewind:
                if (auto st = rewind(); !st) return fail(st.error());
                continue;  // no periodic checkpoint for a step just reloaded
            case Outcome::Stop:
                if (b.value().reason == "below-min") return stopped_after_loss(b.value().reason);
                if (!o.ckpt.empty())
                    if (auto st = checkpoint(); !st) return fail("checkpoint: " + st.error());
                return 0;
            case Outcome::Left:
                return 0;
        }
        const bool periodic = o.ckpt_every && s.step % o.ckpt_every == 0;
        // SIGTERM: a standalone rank stops here; under omni-launch the launcher turns it into a
        // STOP decision that every rank receives at the same step.
        const bool term = g_term && rt.standalone();
        if (!o.ckpt.empty() && (periodic || term))
            if (auto st = checkpoint(); !st) return fail("checkpoint: " + st.error());
        if (term) {
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
        "standalone as one rank; resumes from the newest checkpoint in --ckpt.\n"
        "In a job submitted with --omni-global-batch, --omni-micro-batch or --omni-ckpt, the\n"
        "job's values (OMNI_GLOBAL_BATCH, OMNI_MICRO_BATCH, OMNI_CKPT_DIR, OMNI_CKPT_EVERY)\n"
        "are the defaults of --global-batch, --micro-batch, --ckpt and --ckpt-every.\n\nOptions");
    // Integers are read as text and parsed strictly (omni/parse.h): boost's unsigned parser
    // takes "-3" as 2^64 - 3, which made --steps -3 train without end.
    struct UintOption {
        const char *name;
        std::uint64_t *to, min, max;
        const char *help;
    };
    const std::uint64_t kMaxCount = std::uint64_t(1) << 40;
    const UintOption uints[] = {
        {"steps", &o.steps, 1, kMaxCount, "optimizer steps in all (the LR decays over them)"},
        {"global-batch", &o.global_batch, 1, kMaxBatch, "samples per optimizer step, 1..2048"},
        {"micro-batch", &o.micro_batch, 1, kMaxBatch, "samples per rank per micro-step; divides the global batch"},
        {"seed", &o.seed, 0, UINT64_MAX, "data, order and initialisation seed"},
        {"dataset-size", &o.dataset_size, 1, omni::launcher::kMaxDatasetSize, "samples per epoch, 1..2^48"},
        {"warmup", &o.warmup, 0, kMaxCount, "steps of linear warmup"},
        {"ckpt-every", &o.ckpt_every, 0, kMaxCount, "checkpoint every N steps (0: only on SIGTERM)"},
        {"pace-ms", &o.pace_ms, 0, 3600000, "sleep this long in every step, as if computing (demos, tests)"},
    };
    std::map<std::string, std::string> uint_text;
    desc.add_options()("help,h", "show this help and exit");
    for (const auto &u : uints)
        desc.add_options()(u.name, po::value<std::string>(&uint_text[u.name])->default_value(std::to_string(*u.to)), u.help);
    desc.add_options()
        ("lr", po::value<double>(&o.lr)->default_value(o.lr), "peak learning rate")
        ("ckpt", po::value<std::string>(&o.ckpt), "checkpoint root (resume from its newest checkpoint)")
        ("metrics", po::value<std::string>(&o.metrics), "JSONL metrics file, one line per step")
        ("timestamps", po::bool_switch(&o.timestamps), "add the wall-clock time_ms to every metrics line (benchmarks)")
        ("sample-log", po::value<std::string>(&o.sample_log),
         "directory: every rank appends the sample indices it trained on, a line per step, to a file of its own there (tests)");
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
        po::notify(vm);
    } catch (const std::exception &e) {
        return usage_error(e.what());
    }
    if (vm.count("help")) { std::cout << desc << "\n"; return 0; }
    for (const auto &u : uints) {
        auto v = omni::parse_uint(uint_text[u.name], u.min, u.max, std::string("--") + u.name);
        if (!v) return usage_error(v.error());
        *u.to = v.value();
    }
    // The job's own options (sbatch --omni-global-batch, --omni-micro-batch, --omni-ckpt,
    // validated at submit for every unit count and handed to every task as OMNI_*) are the
    // defaults of the matching options here; an option given on the command line wins, with a
    // note when it differs from the job's.
    auto job = omni::job_options_from_job_env([](const char *n) { return std::getenv(n); });
    if (!job) return usage_error("the job's OMNI_* variables: " + job.error());
    std::string batch_from = "--global-batch", micro_from = "--micro-batch";
    auto take = [&](const char *option, std::uint64_t &to, std::string &from,
                    const std::optional<std::uint64_t> &env, const char *var, const char *sbatch) {
        if (!env) return;
        if (!vm[option].defaulted()) {
            if (*env != to)
                o.notes.push_back(std::string("--") + option + " " + std::to_string(to) + " overrides the job's " +
                                  sbatch + "=" + std::to_string(*env) + " (" + var + ")");
            return;
        }
        to = *env;
        from = std::string(var) + " (sbatch " + sbatch + ")";
    };
    take("global-batch", o.global_batch, batch_from, job.value().global_batch, "OMNI_GLOBAL_BATCH", "--omni-global-batch");
    take("micro-batch", o.micro_batch, micro_from, job.value().micro_batch, "OMNI_MICRO_BATCH", "--omni-micro-batch");
    if (job.value().global_batch && !job.value().micro_batch && vm["micro-batch"].defaulted()) {
        // Submitted with a global batch and no micro-batch: sbatch checked it for b = 1, as
        // libomni's ledger takes it.
        o.micro_batch = 1;
        micro_from = "the job's micro-batch (--omni-micro-batch not given)";
    }
    if (o.global_batch > kMaxBatch)
        return usage_error(batch_from + " " + std::to_string(o.global_batch) + ": this trainer takes at most " +
                           std::to_string(kMaxBatch) + " samples a step");
    if (!vm.count("ckpt") && job.value().ckpt_dir) o.ckpt = *job.value().ckpt_dir;
    if (vm["ckpt-every"].defaulted() && job.value().ckpt_dir) o.ckpt_every = job.value().ckpt_every;
    if (o.global_batch % o.micro_batch)
        return usage_error(micro_from + " " + std::to_string(o.micro_batch) + ": expected a divisor of " +
                           batch_from + " " + std::to_string(o.global_batch));
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
