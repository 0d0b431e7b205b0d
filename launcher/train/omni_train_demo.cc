// omni-train-demo: the reference trainer of slurm-omni. Data-parallel training of a two-layer
// MLP regression on a deterministic synthetic dataset, with the hidden layer optionally split
// over M model-parallel ranks (--mp, tensor parallel), ZeRO-1 sharded Adam, LR warmup and
// cosine decay, gradient accumulation, periodic checkpoints (libomni-ckpt) and a JSONL metrics
// file with one line per optimizer step.
//
// Exactness: the loss of every step is bitwise the same for any data-parallel size, any
// model-parallel size and any resize history. The ledger gives step k the same samples
// whatever the DP size; the output sum over hidden units and per-sample gradients are summed
// in 64-bit fixed point (exact, order-free, so the MP group's and the DP group's integer
// allreduces give the single rank's sums); Adam is element-wise. See train/model.h.
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
#include <thread>
#include <vector>

#include "common/job_options.h"
#include "common/parse.h"
#include "omni/ckpt_cpp.h"

#include "comm/comm.h"
#include "runtime/balanced_step.h"
#include "runtime/ledger.h"
#include "runtime/runtime.h"
#include "train/model.h"
#include "train/optim.h"
#include "train/state_io.h"
#include "workload/workload.h"

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
    // --workload: every sample's modality and length; --cost: what balancing minimises and
    // the pace counts; --pace-ns-per-token: a rank sleeps its samples' cost times this.
    std::optional<omni::workload::Workload> workload;
    omni::workload::CostKind cost = omni::workload::CostKind::Tokens;
    std::uint64_t pace_ns_per_token = 0;
    omni::launcher::BalanceOptions balance;
    std::uint64_t mp = 1;        // --mp: model-parallel ranks per replica
    bool timestamps = false;
    std::string ckpt, metrics, sample_log, layout_log;
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

// The DP group's parameters (its MP slice) are the same on every member after an optimizer
// step: each rank updated its own ZeRO-1 range; an allgather of the (padded) ranges rebuilds
// the whole vector exactly.
omni::Status gather_params(omni::launcher::Communicator &comm, std::vector<float> &params) {
    const int world = comm.size(), rank = comm.rank();
    if (world == 1) return omni::Status::success();
    const std::size_t n = params.size();
    const std::size_t chunk = (n + world - 1) / world;
    std::vector<float> send(chunk, 0.0f), recv(chunk * world);
    const Range mine = shard_range(n, rank, world);
    std::copy(params.begin() + mine.begin, params.begin() + mine.end, send.begin());
    if (auto st = comm.allgather(send.data(), recv.data(), chunk, omni::launcher::DType::fp32); !st) return st;
    for (int r = 0; r < world; ++r) {
        const Range rr = shard_range(n, r, world);
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

// What one optimizer step computed, before it is recorded.
struct StepResult {
    omni::Status comm;          // the step's collectives; an error: a peer is gone
    double loss = 0, lr = 0;
    std::uint64_t clamped = 0;
    // Which samples the step consumed, summed over ranks (count, sum and sum of squares of
    // the indices, wrapping): the metrics let a test check each epoch at a glance.
    std::int64_t seen[3] = {0, 0, 0};
    std::string indices;        // this rank's indices, as text (--sample-log)
    std::uint64_t cost = 0;     // this replica's samples' cost (--workload)
    double pace_units = 0;      // what --pace-ns-per-token multiplies: the cost, or LSSP's time
};

// What the training loop does after a boundary.
enum class Next { train, train_without_checkpoint, exit };

// One rank of the reference trainer. run() is the whole life of the rank: start (resume from
// the newest checkpoint), then steps until --steps, each followed by the runtime's boundary.
class Trainer {
public:
    Trainer(const Options &o, omni::launcher::Runtime &rt) : o_(o), rt_(rt), data_{o.seed, o.dataset_size} {}

    int run() {
        if (auto st = start(); !st) return fail(st.error());
        // A joiner enters at the boundary the survivors just left, before what they do after
        // it: the periodic checkpoint of that step is collective, so the joiner takes it too.
        if (joined_at_boundary_)
            if (auto code = periodic_checkpoint_or_term()) return *code;
        while (s_.step < o_.steps) {
            StepResult r;
            if (auto st = compute_step(r); !st) return fail(st.error());
            if (!r.comm) {
                const Next n = after_failed_step(r.comm);
                if (n == Next::exit) return exit_code_;
                continue;
            }
            ++s_.step;
            if (auto st = record_step(r); !st) return fail(st.error());
            const Next n = after_boundary();
            if (n == Next::exit) return exit_code_;
            if (n == Next::train_without_checkpoint) continue;
            if (auto code = periodic_checkpoint_or_term()) return *code;
        }
        return 0;
    }

private:
    // Registers the model with the runtime, joins the job, and loads the newest checkpoint
    // on a fresh start (or the rewind a joiner is told about).
    omni::Status start() {
        s_.lr.base = o_.lr;
        s_.lr.warmup = o_.warmup;
        s_.lr.total = o_.steps;
        // The runtime knows the layout before start(): the MP slice this rank holds.
        if (rt_.mp_size() != o_.mp)
            return omni::make_error("--mp " + std::to_string(o_.mp) + ": the job runs " +
                                    std::to_string(rt_.mp_size()) +
                                    " model-parallel ranks per replica (OMNI_MP, sbatch --omni-mp); "
                                    "give the trainer the job's value");
        slice_ = Slice{static_cast<int>(rt_.mp_rank()), static_cast<int>(rt_.mp_size())};
        s_.params = init_params(o_.seed, slice_);
        // The runtime owns the shard sizes: it resizes m and v at every reshape.
        if (auto st = rt_.register_params(s_.params.data(), s_.params.size()); !st) return st;
        for (auto *v : {&s_.adam.m, &s_.adam.v})
            if (auto r = rt_.register_shard(v, s_.params.size()); !r) return omni::Error{r.error()};
        if (auto st = rt_.configure_ledger({o_.dataset_size, o_.global_batch, o_.micro_batch, o_.seed}); !st)
            return st;
        if (o_.workload)
            if (auto st = rt_.configure_balance(o_.balance, [this](std::uint64_t i, std::uint64_t step) {
                    return sample_cost(i, step);
                }); !st)
                return st;
        auto started = rt_.start();
        if (!started) return omni::Error{started.error()};
        if (rt_.rank() == 0)
            for (const auto &n : o_.notes) std::cerr << kProg << ": note: " << n << "\n";
        s_.step = started.value().step;
        s_.generation = rt_.generation();
        // After a rewind the survivors reload and go on without a checkpoint; so does the joiner.
        joined_at_boundary_ = started.value().joined && !started.value().rewind && s_.step > 0;
        reshard_optimizer();
        if (!o_.ckpt.empty() && (!started.value().joined || started.value().rewind)) {
            auto r = load_newest();
            if (!r) return omni::make_error("--ckpt " + o_.ckpt + ": " + r.error());
            if (r.value() && rt_.rank() == 0)
                std::cerr << kProg << ": resumed at step " << s_.step << " from " << o_.ckpt << "\n";
        }
        if (auto st = reopen_metrics(); !st) return st;
        if (auto st = open_sample_log(); !st) return st;
        return open_layout_log();
    }

    // This rank's ZeRO-1 shard of its slice's optimizer state, for the current DP group.
    void reshard_optimizer() {
        s_.adam.range = shard_range(s_.params.size(), static_cast<int>(rt_.dp_rank()), static_cast<int>(rt_.dp_size()));
    }

    omni::train::StateRank state_rank() const {
        return {static_cast<int>(rt_.rank()), slice_, static_cast<int>(rt_.dp_rank()), static_cast<int>(rt_.dp_size())};
    }

    // Loads the newest checkpoint into the registered buffers (a fresh start, or a rewind
    // after lost ranks). False when there is none.
    omni::Result<bool> load_newest() {
        TrainState c;
        auto r = load_latest(o_.ckpt, state_rank(), c);
        if (!r || !r.value()) return r;
        if (auto st = check_schedule(c.lr, s_.lr); !st) return omni::Error{st.error()};
        s_.step = c.step;
        s_.lr = c.lr;
        std::copy(c.params.begin(), c.params.end(), s_.params.begin());
        s_.adam.range = c.adam.range;
        s_.adam.m = c.adam.m;  // same vector objects: the runtime keeps pointers to them
        s_.adam.v = c.adam.v;
        if (auto st = rt_.restore_ledger(c.ledger_json); !st) return omni::Error{st.error()};
        return true;
    }

    // Rank 0 writes the metrics (whichever rank is 0 now: rank 0 may have been lost); a resumed
    // or rewound run rewrites the steps after its checkpoint.
    omni::Status reopen_metrics() {
        if (metrics_.is_open()) metrics_.close();
        if (o_.metrics.empty() || rt_.rank() != 0) return omni::Status::success();
        if (s_.step > 0)
            if (auto st = trim_metrics(o_.metrics, s_.step); !st) return st;
        metrics_.open(o_.metrics, s_.step > 0 ? std::ios::app : std::ios::trunc);
        if (!metrics_) return omni::make_error("--metrics " + o_.metrics + ": cannot open for writing");
        return omni::Status::success();
    }

    // --sample-log: the indices this rank trained on, "STEP GENERATION I I ...\n" per step, so
    // a test can check exactly which samples each epoch used. A step redone after a rewind
    // has a higher generation than its lost first run. One file per process: HOST-PID. With
    // M > 1 only MP rank 0 of each replica writes (its MP peers train on the same samples).
    omni::Status open_sample_log() {
        if (o_.sample_log.empty() || rt_.mp_rank() != 0) return omni::Status::success();
        const std::string path = o_.sample_log + "/" + process_name() + ".samples";
        sample_log_.open(path, std::ios::app);
        if (!sample_log_) return omni::make_error("--sample-log " + o_.sample_log + ": cannot write " + path);
        return omni::Status::success();
    }

    static std::string process_name() {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "host");
        return std::string(host) + "-" + std::to_string(getpid());
    }

    // --layout-log: after every step, "STEP GENERATION UNIT SLOT MP_RANK MP_SIZE DP_RANK
    // DP_SIZE FINGERPRINT\n", the fingerprint that of the parameters this rank holds (its MP
    // slice), so that a test can check the groups and that every DP rank of a slice holds the
    // same parameters after every resize. One file per process: HOST-PID.layout.
    omni::Status open_layout_log() {
        if (o_.layout_log.empty()) return omni::Status::success();
        const std::string path = o_.layout_log + "/" + process_name() + ".layout";
        layout_log_.open(path, std::ios::app);
        if (!layout_log_) return omni::make_error("--layout-log " + o_.layout_log + ": cannot write " + path);
        return omni::Status::success();
    }

    // After ranks were lost: every survivor reloads the newest checkpoint.
    omni::Status rewind() {
        if (o_.ckpt.empty()) return omni::make_error("ranks were lost and there is no --ckpt to rewind to");
        auto r = load_newest();
        if (!r) return omni::make_error("rewind: " + r.error());
        if (!r.value()) return omni::make_error("ranks were lost before the first checkpoint in " + o_.ckpt);
        if (rt_.rank() == 0)
            std::cerr << kProg << ": ranks lost; rewound to step " << s_.step << " with world "
                      << rt_.world() << "\n";
        return reopen_metrics();
    }

    // Every rank writes its shard; then all of them learn whether every shard was written (a
    // sum of failures over the world), and rank 0 commits only then. A checkpoint that cannot
    // be written (a full file system, say) is abandoned whole: its files are removed, `latest`
    // and the previous checkpoints are untouched, and every rank returns written = false at
    // the same step, so the caller decides alike everywhere. Errors of the communicator are
    // errors; `peer` is set when one failed (a rank was lost meanwhile: the lost-rank path,
    // not a fatal error).
    struct Saved {
        bool written = false;
        std::string why;   // this rank's own failure, or rank 0's commit failure
    };
    omni::Result<Saved> checkpoint(bool *peer = nullptr) {
        // A rank declared lost while it was stopped writes nothing (Runtime::check_member).
        if (auto st = rt_.check_member(); !st) return omni::Error{st.error()};
        s_.generation = rt_.generation();
        s_.ledger_json = rt_.ledger()->serialise();
        s_.data_epoch = rt_.ledger()->epoch();
        s_.data_seed = rt_.ledger()->config().seed;
        const int rank = static_cast<int>(rt_.rank()), world = static_cast<int>(rt_.world());
        Saved out;
        auto st = save_shard(o_.ckpt, s_, state_rank());
        if (!st) {
            out.why = st.error();
            std::cerr << kProg << ": rank " << rank << ": checkpoint of step " << s_.step
                      << ": writing its shard: " << out.why << "\n";
        }
        // Every rank of the generation, every MP index: on host buffers whatever the backend.
        std::int64_t failed = st ? 0 : 1;
        if (auto c = rt_.world_comm().allreduce(&failed, 1, omni::launcher::DType::i64,
                                                omni::launcher::ReduceOp::sum);
            !c) {
            if (peer) *peer = true;
            return omni::Error{c.error()};
        }
        if (failed == 0 && rank == 0) {
            auto c = commit_state(o_.ckpt, s_, world);
            if (!c) {
                out.why = c.error();   // it names the commit
                if (auto a = abandon_state(o_.ckpt, s_); !a)
                    std::cerr << kProg << ": removing the uncommitted checkpoint of step " << s_.step << ": "
                              << a.error() << "\n";
            } else {
                out.written = true;
                // For omni-ctl status; the checkpoint stands without it.
                if (!rt_.standalone())
                    if (auto n = rt_.note_checkpoint(s_.step, c.value()); !n)
                        std::cerr << kProg << ": telling the coordinator of the checkpoint: " << n.error() << "\n";
            }
        }
        if (failed == 0 && rank != 0) out.written = true;   // rank 0 alone may still fail to commit
        if (failed && rank == 0) {
            out.why = std::to_string(failed) + " of " + std::to_string(world) + " rank(s) could not write their shard" +
                      (out.why.empty() ? "" : " (this one: " + out.why + ")");
            // Every rank has stopped writing (the sum above): its files go now, not at a gc.
            if (auto a = abandon_state(o_.ckpt, s_); !a)
                std::cerr << kProg << ": removing the unwritten checkpoint of step " << s_.step << ": " << a.error()
                          << "\n";
        }
        if (auto b = rt_.world_comm().barrier(); !b) {
            if (peer) *peer = true;
            return omni::Error{b.error()};
        }
        return out;
    }

    // The newest committed checkpoint, for messages: "step N", or "none".
    std::string newest_checkpoint() const {
        if (!o_.ckpt.empty())
            if (auto l = omni::ckpt::list(o_.ckpt))
                for (const auto &e : l.value())
                    if (e.latest) return "step " + std::to_string(e.step);
        return "none";
    }

    // The job stops because ranks were lost and too few are left: the lost ranks' optimizer
    // shards are gone, so the newest periodic checkpoint is the state to restart from. Its
    // step comes from the checkpoint list (the manifests), without reading the checkpoint.
    int stopped_after_loss(const std::string &reason) {
        if (rt_.rank() == 0) {
            std::string newest = newest_checkpoint();
            if (newest != "none") newest += " in " + o_.ckpt;
            std::cerr << kProg << ": stopped at step " << s_.step << " (" << reason
                      << "): fewer units than the elastic minimum are left; newest checkpoint: "
                      << newest << "\n";
        }
        return kExitBelowMin;
    }

    // The samples this replica computes in the step, in micro-batches: the ledger's or the
    // balanced plan's GA micro-batches of b; with --balance lssp the plan's samples (whole
    // ones, and the split ones it leads: each sample's gradient is computed once) in pieces
    // of b, the last one shorter. A peer's failure in the plan's collectives goes to r.comm.
    omni::Status step_batches(StepResult &r, std::vector<std::vector<std::uint64_t>> &out) {
        const auto fault = [&](const std::string &e) -> omni::Status {
            if (rt_.last_fault() != omni::launcher::Fault::peer) return omni::Error{e};
            r.comm = omni::Error{e};
            return omni::Status::success();
        };
        if (o_.balance.lssp) {
            auto p = rt_.plan();
            if (!p) return fault(p.error());
            const auto &v = p.value()->samples;
            for (std::size_t i = 0; i < v.size(); i += o_.micro_batch)
                out.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(i),
                                 v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i + o_.micro_batch)));
            // The plan's time covers its shards of split samples too (sequence parallel,
            // emulated by the pace): the whole sample's gradient is its leader's.
            r.pace_units = p.value()->time;
            // Each split sample's replicas meet on its sequence-parallel group, as a real
            // sequence-parallel layer would: they must all hold that sample, as shards 0..k-1.
            // The shards come in the plan's order on every replica, so replicas in two groups
            // use them in the same order.
            for (const auto &sh : p.value()->shards) {
                auto sp = rt_.sp_comm(sh.degree);
                if (!sp) return fault(sp.error());
                std::int64_t v[3] = {1, static_cast<std::int64_t>(sh.index), static_cast<std::int64_t>(sh.shard)};
                if (auto st = sp.value()->allreduce(v, 3, omni::launcher::DType::i64, omni::launcher::ReduceOp::sum);
                    !st)
                    return fault("sequence-parallel group of sample " + std::to_string(sh.index) + ": " + st.error());
                const std::int64_t k = sh.degree;
                if (v[0] != k || v[1] != k * static_cast<std::int64_t>(sh.index) || v[2] != k * (k - 1) / 2)
                    return omni::Error{"step " + std::to_string(s_.step + 1) +
                                       ": the sequence-parallel group of sample " + std::to_string(sh.index) +
                                       " (degree " + std::to_string(k) + ") does not hold its shards 0.." +
                                       std::to_string(k - 1)};
            }
            return omni::Status::success();
        }
        for (std::uint32_t m = 0; m < rt_.ledger()->grad_accum(); ++m) {
            // The replica's samples: every MP rank of the replica has its DP rank (and, with
            // --balance, the step's plan: its first call is the DP group's all-gather).
            auto idx = rt_.micro_batch(m);
            if (!idx) return fault(idx.error());
            out.push_back(std::move(idx).value());
        }
        return omni::Status::success();
    }

    // The step's micro-batches on this rank, the exact sums across ranks, the optimizer step
    // and the parameters gathered. An error return is fatal; r.comm says whether a peer died.
    omni::Status compute_step(StepResult &r) {
        const auto *ledger = rt_.ledger();
        Accum acc(s_.params.size());
        std::vector<double> hidden;
        std::vector<std::int64_t> partial;
        std::vector<std::vector<std::uint64_t>> batches;
        if (auto st = step_batches(r, batches); !st) return st;
        for (const std::vector<std::uint64_t> &ix : batches) {
            if (o_.workload && !o_.balance.lssp)
                for (std::uint64_t i : ix) r.cost += sample_cost(i, ledger->step());
            // Tensor parallel: each MP rank computes its hidden units' part of every output;
            // the group's exact sum of the parts completes the forward pass.
            partial.assign(ix.size(), 0);
            partial_outputs(s_.params, slice_, data_, ix.data(), ix.size(), hidden, partial.data(), acc.clamped);
            if (rt_.mp_size() > 1 && r.comm)
                r.comm = rt_.mp_comm().allreduce(partial.data(), partial.size(), omni::launcher::DType::i64,
                                                 omni::launcher::ReduceOp::sum);
            if (!r.comm) break;
            accumulate(s_.params, slice_, data_, ix.data(), ix.size(), hidden, partial.data(), acc);
            for (std::uint64_t i : ix) {
                if (sample_log_.is_open()) r.indices += " " + std::to_string(i);
                r.seen[0] += 1;
                r.seen[1] = static_cast<std::int64_t>(static_cast<std::uint64_t>(r.seen[1]) + i);
                r.seen[2] = static_cast<std::int64_t>(static_cast<std::uint64_t>(r.seen[2]) + i * i);
            }
        }
        if (o_.pace_ms) usleep(static_cast<useconds_t>(o_.pace_ms * 1000));
        if (!o_.balance.lssp) r.pace_units = static_cast<double>(r.cost);
        if (o_.pace_ns_per_token && r.comm) pace(r.pace_units * static_cast<double>(o_.pace_ns_per_token));
        // Exact: integer sums do not depend on how the batch was split among ranks.
        for (auto [buf, n] : {std::pair{acc.v.data(), acc.v.size()}, std::pair{r.seen, std::size_t(3)}})
            if (r.comm) r.comm = rt_.comm().allreduce(buf, n, omni::launcher::DType::i64, omni::launcher::ReduceOp::sum);
        const auto grad = mean_gradient(acc, o_.global_batch);
        r.loss = mean_loss(acc, o_.global_batch);
        r.lr = s_.lr.at(s_.step);
        r.clamped = acc.clamped;
        if (r.comm) {
            s_.adam.update(s_.params.data(), grad, r.lr, s_.step + 1);
            r.comm = gather_params(rt_.comm(), s_.params);
        }
        return omni::Status::success();
    }

    // A peer died inside the step. The survivors meet at the next boundary, where the
    // coordinator (told by omni-launch, or by the boundary timeout) answers REWIND.
    Next after_failed_step(const omni::Status &comm) {
        using omni::launcher::Outcome;
        if (rt_.standalone()) return stop(fail(comm.error()));
        std::cerr << kProg << ": rank " << rt_.rank() << ": step " << s_.step + 1 << ": "
                  << comm.error() << "; asking the coordinator\n";
        auto b = rt_.boundary(s_.step + 1);
        if (!b) return stop(fail(b.error()));
        if (b.value().outcome == Outcome::Stop) return stop(stopped_after_loss(b.value().reason));
        if (b.value().outcome == Outcome::Left) return stop(0);
        if (b.value().outcome != Outcome::Rewind)
            return stop(fail(std::string("after a failed collective the coordinator answered ") +
                             omni::launcher::to_string(b.value().outcome)));
        if (auto st = rewind(); !st) return stop(fail(st.error()));
        return Next::train;
    }

    // The step's line in --sample-log and --metrics.
    omni::Status record_step(const StepResult &r) {
        // A rank declared lost while it was stopped must not add lines (Runtime::check_member).
        if (auto st = rt_.check_member(); !st) return st;
        if (sample_log_.is_open()) {
            sample_log_ << s_.step << " " << rt_.generation() << r.indices << "\n" << std::flush;
            if (!sample_log_) return omni::make_error("--sample-log " + o_.sample_log + ": write failed");
        }
        if (layout_log_.is_open()) {
            layout_log_ << s_.step << " " << rt_.generation() << " " << rt_.unit() << " " << rt_.slot() << " "
                        << rt_.mp_rank() << " " << rt_.mp_size() << " " << rt_.dp_rank() << " " << rt_.dp_size() << " "
                        << omni::launcher::fingerprint(s_.params.data(), s_.params.size()) << "\n" << std::flush;
            if (!layout_log_) return omni::make_error("--layout-log " + o_.layout_log + ": write failed");
        }
        if (!metrics_.is_open()) return omni::Status::success();
        char line[384];
        std::snprintf(line, sizeof line,
                      "{\"step\": %" PRIu64 ", \"loss\": %.17g, \"lr\": %.17g, \"world\": %u, "
                      "\"generation\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"clamped\": %" PRIu64
                      ", \"step_samples\": [%" PRId64 ", %" PRIu64 ", %" PRIu64 "]}\n",
                      s_.step, r.loss, r.lr, rt_.world(), rt_.generation(), s_.step * o_.global_batch,
                      r.clamped, r.seen[0], static_cast<std::uint64_t>(r.seen[1]),
                      static_cast<std::uint64_t>(r.seen[2]));
        std::string l(line);
        if (o_.workload) {  // the slowest replica's cost and the step's total: what balancing changed
            auto c = replica_costs();
            if (!c) return omni::Error{c.error()};
            std::uint64_t max = 0, total = 0;
            for (auto x : c.value()) {
                max = std::max(max, x);
                total += x;
            }
            l.insert(l.size() - 2, ", \"cost\": [" + std::to_string(max) + ", " + std::to_string(total) + "]");
        }
        if (o_.timestamps) {  // wall clock, for benchmarks; off by default so runs compare bytewise
            const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
            l.insert(l.size() - 2, ", \"time_ms\": " + std::to_string(now));
        }
        metrics_ << l << std::flush;
        return omni::Status::success();
    }

    std::uint64_t sample_cost(std::uint64_t index, std::uint64_t step) const {
        return o_.workload->cost(o_.seed, index, step, o_.cost);
    }

    // Every replica's cost in the step just computed (before its boundary): the plan's, or
    // without a policy the ledger's shares'.
    omni::Result<std::vector<std::uint64_t>> replica_costs() const {
        if (const auto *p = rt_.step_plan()) return p->costs;
        const auto *ledger = rt_.ledger();
        std::vector<std::uint64_t> out;
        for (std::uint32_t r = 0; r < rt_.dp_size(); ++r) {
            auto share = ledger->share(r);
            if (!share) return omni::Error{share.error()};
            std::uint64_t sum = 0;
            for (auto i : share.value()) sum += sample_cost(i, ledger->step());
            out.push_back(sum);
        }
        return out;
    }

    // As if computing for `ns` nanoseconds (--pace-ns-per-token): a sleep, so that two cores
    // run several ranks whose step times follow their samples' lengths. At most an hour.
    static void pace(double ns) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(ns, 3.6e12))));
    }

    // The runtime's decision at the end of the step, the same on every rank.
    Next after_boundary() {
        using omni::launcher::Outcome;
        auto b = rt_.boundary(s_.step);
        if (!b) return stop(fail(b.error()));
        switch (b.value().outcome) {
            case Outcome::Continue:
                return Next::train;
            case Outcome::Reshaped:
                reshard_optimizer();
                if (auto st = reopen_metrics(); !st) return stop(fail(st.error()));
                if (rt_.rank() == 0)
                    std::cerr << kProg << ": step " << s_.step << ": world " << b.value().previous_world
                              << " -> " << rt_.world() << " (" << b.value().reason << ")\n";
                return Next::train;
            case Outcome::Rewind:
                if (auto st = rewind(); !st) return stop(fail(st.error()));
                return Next::train_without_checkpoint;  // the step was just reloaded
            case Outcome::Stop:
                if (b.value().reason == "below-min") return stop(stopped_after_loss(b.value().reason));
                if (!o_.ckpt.empty()) {
                    // The state the job stops with must be on disk, or the restart loses steps.
                    auto c = checkpoint();
                    if (!c) return stop(fail("checkpoint: " + c.error()));
                    if (!c.value().written)
                        return stop(fail("stopping at step " + std::to_string(s_.step) +
                                         ": its checkpoint was not written (" + c.value().why +
                                         "); a restart resumes from the newest one, " + newest_checkpoint()));
                }
                return stop(0);
            case Outcome::Left:
                return stop(0);
        }
        return Next::train;
    }

    // The periodic checkpoint, and SIGTERM: a standalone rank stops here; under omni-launch
    // the runtime turns it into a STOP decision that every rank receives at the same step.
    std::optional<int> periodic_checkpoint_or_term() {
        const bool periodic = o_.ckpt_every && s_.step % o_.ckpt_every == 0;
        const bool term = g_term && rt_.standalone();
        if (!o_.ckpt.empty() && (periodic || term)) {
            bool peer = false;
            auto c = checkpoint(&peer);
            if (!c) {
                if (!peer || rt_.standalone()) return fail("checkpoint: " + c.error());
                // A rank was lost in the middle of the checkpoint (left uncommitted): as after
                // a failed step, the survivors meet at the boundary and rewind.
                if (after_failed_step(omni::Status(omni::Error{c.error()})) == Next::exit) return exit_code_;
                return std::nullopt;
            }
            if (!c.value().written) {
                if (term)
                    return fail("SIGTERM at step " + std::to_string(s_.step) + ": its checkpoint was not written (" +
                                c.value().why + "); a restart resumes from the newest one, " + newest_checkpoint());
                // A periodic checkpoint that failed costs only the steps since the newest one
                // should the job need it; the next one tries again.
                if (rt_.rank() == 0)
                    std::cerr << kProg << ": checkpoint of step " << s_.step << " not written (" << c.value().why
                              << "); training goes on; the newest checkpoint is " << newest_checkpoint() << "\n";
            }
        }
        if (!term) return std::nullopt;
        std::cerr << kProg << ": SIGTERM: stopped at step " << s_.step
                  << (o_.ckpt.empty() ? " (no --ckpt: state not saved)\n" : ", checkpoint written\n");
        return 128 + SIGTERM;
    }

    Next stop(int code) {
        exit_code_ = code;
        return Next::exit;
    }

    const Options &o_;
    omni::launcher::Runtime &rt_;
    const DataSpec data_;
    TrainState s_;
    std::ofstream metrics_, sample_log_, layout_log_;
    Slice slice_;
    int exit_code_ = 0;
    bool joined_at_boundary_ = false;  // joined a running job at a boundary (not a rewind)
};

// Under omni-launch the runtime joins the job's coordinator (world, rank, resizes); without
// one (no OMNI_COORD_*) it is a single standalone rank.
int run(const Options &o) {
    auto rtr = omni::launcher::Runtime::from_environment();
    if (!rtr) return fail(rtr.error());
    // Standalone, SIGTERM checkpoints and exits at the end of the step. Under omni-launch the
    // runtime holds it and stops the whole job at a boundary (Runtime::request_stop).
    if (rtr.value()->standalone()) {
        struct sigaction sa {};
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, nullptr);
    }
    Trainer t(o, *rtr.value());
    return t.run();
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    po::options_description desc(
        "Usage: omni-train-demo [OPTIONS]\n\n"
        "The slurm-omni reference trainer: a two-layer MLP regression, data parallel with the\n"
        "hidden layer split over --mp ranks (tensor parallel), ZeRO-1 Adam, warmup + cosine\n"
        "LR, gradient accumulation, checkpoints, JSONL metrics. The loss of every step is\n"
        "bitwise the same for any DP size, MP size and resize history. Runs standalone as one\n"
        "rank; resumes from the newest checkpoint in --ckpt (written by any layout).\n"
        "In a job submitted with --omni-global-batch, --omni-micro-batch or --omni-ckpt, the\n"
        "job's values (OMNI_GLOBAL_BATCH, OMNI_MICRO_BATCH, OMNI_CKPT_DIR, OMNI_CKPT_EVERY)\n"
        "are the defaults of --global-batch, --micro-batch, --ckpt and --ckpt-every.\n\nOptions");
    // Integers are read as text and parsed strictly (common/parse.h): boost's unsigned parser
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
        {"pace-ns-per-token", &o.pace_ns_per_token, 0, 1000000000,
         "sleep the rank's samples' cost (--cost) times this many ns in every step, as if computing (needs --workload)"},
        {"mp", &o.mp, 1, kHidden, "model-parallel ranks per replica: the hidden layer's split (a divisor of 32; the job's OMNI_MP)"},
    };
    std::map<std::string, std::string> uint_text;
    std::string workload, cost, balance;
    desc.add_options()("help,h", "show this help and exit");
    for (const auto &u : uints)
        desc.add_options()(u.name, po::value<std::string>(&uint_text[u.name])->default_value(std::to_string(*u.to)), u.help);
    desc.add_options()
        ("lr", po::value<double>(&o.lr)->default_value(o.lr), "peak learning rate")
        ("ckpt", po::value<std::string>(&o.ckpt), "checkpoint root (resume from its newest checkpoint)")
        ("metrics", po::value<std::string>(&o.metrics), "JSONL metrics file, one line per step")
        ("timestamps", po::bool_switch(&o.timestamps), "add the wall-clock time_ms to every metrics line (benchmarks)")
        ("workload", po::value<std::string>(&workload),
         "FILE or preset (paper, text, uniform): every sample's modality and length (omni-workload(5))")
        ("cost", po::value<std::string>(&cost)->default_value("tokens"),
         "a sample's cost for --balance and --pace-ns-per-token: tokens, units or compute (needs --workload)")
        ("balance", po::value<std::string>(&balance)->default_value("none"),
         "which replica computes which of the step's samples: none, lpt, kk, grouped (kk per node), "
         "POLICY:job|node, or lssp (long samples split over replicas; needs --workload)")
        ("layout-log", po::value<std::string>(&o.layout_log),
         "directory: every rank appends its groups and a fingerprint of its parameters, a line per step, to a file of its own there (tests)")
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
    if (vm["mp"].defaulted() && job.value().mp_given) o.mp = job.value().mp;
    if (job.value().mp_given && o.mp != job.value().mp)  // before joining: nothing starts
        return usage_error("--mp " + std::to_string(o.mp) + ": the job runs " + std::to_string(job.value().mp) +
                           " model-parallel ranks per replica (OMNI_MP, sbatch --omni-mp); give the trainer the job's value");
    if (!valid_mp(o.mp))
        return usage_error("--mp " + std::to_string(o.mp) + ": expected a divisor of the " + std::to_string(kHidden) +
                           " hidden units the ranks of a replica split (1, 2, 4, 8, 16 or 32)");
    if (!vm.count("ckpt") && job.value().ckpt_dir) o.ckpt = *job.value().ckpt_dir;
    if (vm["ckpt-every"].defaulted() && job.value().ckpt_dir) o.ckpt_every = job.value().ckpt_every;
    if (o.global_batch % o.micro_batch)
        return usage_error(micro_from + " " + std::to_string(o.micro_batch) + ": expected a divisor of " +
                           batch_from + " " + std::to_string(o.global_batch));
    if (!(o.lr > 0 && o.lr < 10)) return usage_error("--lr: expected a number in (0, 10)");
    if (o.ckpt_every && o.ckpt.empty()) return usage_error("--ckpt-every needs --ckpt DIR");
    auto bal = omni::launcher::parse_balance(balance);
    if (!bal) return usage_error("--balance: " + bal.error());
    o.balance = bal.value();
    auto kind = omni::workload::parse_cost_kind(cost);
    if (!kind) return usage_error("--cost: " + kind.error());
    o.cost = kind.value();
    if (vm.count("workload")) {
        auto w = omni::workload::Workload::load(workload);
        if (!w) return usage_error("--workload " + workload + ": " + w.error());
        o.workload = std::move(w).value();
    } else if (o.balance.active() || o.pace_ns_per_token || !vm["cost"].defaulted()) {
        return usage_error(std::string(o.balance.active() ? "--balance " + balance
                                       : o.pace_ns_per_token ? "--pace-ns-per-token" : "--cost " + cost) +
                           " needs --workload FILE|PRESET: the samples' costs come from it");
    }
    try {
        return run(o);
    } catch (const std::exception &e) {
        std::cerr << kProg << ": internal error: " << e.what() << "\n";
        return 1;
    }
}
