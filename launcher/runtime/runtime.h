// libomni's rank-side runtime: the C++ API that trainers in this repository use (the C API in
// omni/omni.h is a thin layer over it).
//
// Life of a rank:
//   auto rt = Runtime::from_environment();     // PMIx, OMNI_* (runtime/env.h), join
//   rt->register_params(p, P);                 // this rank's parameters (trainer-owned): the
//                                              // model, or its model-parallel slice
//   rt->register_shard(&adam_m, P);            // ZeRO-1 optimizer vectors (runtime resizes them)
//   rt->configure_ledger({D, B, b, seed});     // B, b = 0: from OMNI_GLOBAL_BATCH/MICRO_BATCH
//   auto s = rt->start();                      // joiners receive state here; s.step = steps done
//   loop: for micro in 0..GA-1: samples = ledger.micro_batch(rt->dp_rank(), micro) ...
//         (model-parallel collectives on rt->mp_comm() inside the forward/backward)
//         allreduce gradients on rt->comm(); optimizer step on the shard; allgather params;
//         auto b = rt->boundary(++step);       // the same answer on every rank
//         CONTINUE: go on; RESHAPED: rank/world/shards/ledger are already the new ones;
//         REWIND: reload the last checkpoint (restore_ledger, params, shards), go on from it;
//         STOP or LEFT: checkpoint if wanted, exit 0.
//
// Model parallelism (OMNI_MP = M > 1, runtime/groups.h): a unit of N ranks holds N/M
// replicas of M ranks. comm() is this rank's data-parallel group (one replica's rank per
// MP index: the ranks holding the same slice of the model), mp_comm() its replica's MP group.
// Everything data-parallel works per group: the ledger hands samples to DP ranks, the
// registered parameters and optimizer vectors are this MP slice's, ZeRO-1 shards them over
// the DP group, and a reshape hands each slice's state over among that slice's DP ranks
// only (joiners receive their own slice). The MP group is wired once, when the rank joins,
// through PMIx (its unit is one srun step: one namespace; runtime/mp_wireup.h), else through
// the coordinator; it lives as long as the unit, since units come and go whole. With M = 1,
// comm() is every rank of the generation and mp_comm() a single-rank communicator.
//
// Liveness (runtime/liveness.h): under a coordinator a thread of the runtime's own sends
// heartbeats. When the coordinator declares a hung member of this generation lost, that
// thread aborts the generation's Gloo communicators (comm(), world_comm(), sp_comm(); mp_comm()
// too when the lost rank is of this rank's unit), so a collective waiting for the hung rank
// fails at once; the trainer goes to boundary() as after any failed collective, and gets
// REWIND. A rank that was itself declared lost (stopped, then resumed) is fenced out: its
// collectives fail, boundary() and check_member() fail (a peer fault), and it must exit
// without writing anything. NCCL communicators are not aborted by that thread.
//
// A runtime is one rank; it is not thread-safe (the coordinator connection belongs to the
// thread that uses it). Several runtimes may live in one process (the tests run ranks as
// threads). Nothing here throws; errors name what failed.
#ifndef OMNI_LAUNCHER_RUNTIME_H
#define OMNI_LAUNCHER_RUNTIME_H

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comm/comm.h"
#include "coord/protocol.h"
#include "omni/result.h"
#include "runtime/balanced_step.h"
#include "runtime/env.h"
#include "runtime/groups.h"
#include "runtime/handoff.h"
#include "runtime/ledger.h"

namespace omni::launcher {

class CoordinatorClient;
class CoordinatorStore;
class Liveness;
class PmixSession;

enum class Outcome {
    Continue,  // same generation; go on
    Reshaped,  // a planned change: new generation, state handed off, keep training
    Rewind,    // ranks were lost: new generation, reload the last checkpoint, then go on
    Stop,      // the job ends: every rank of the generation gets it
    Left       // this rank's unit was removed by a planned shrink: exit cleanly
};
const char *to_string(Outcome o);

struct BoundaryResult {
    Outcome outcome = Outcome::Continue;
    std::uint64_t generation = 0;      // the generation after the decision
    std::uint32_t world = 0, rank = 0;  // after the decision (LEFT: the old ones)
    std::uint32_t previous_world = 0;
    std::vector<std::uint32_t> leaving_units, joining_units;
    std::vector<std::string> lost;      // member ids of lost ranks (REWIND)
    std::string reason;                 // the coordinator's reason ("planned", "lost", ...)
    std::uint32_t grad_accum = 0;       // the ledger's GA after the decision (0: no ledger)
};

// What the last failed start()/boundary() was: the caller's mistake (usage: a step out of
// sequence with the ledger, a joiner's registration that differs from the survivors', a
// global batch the new world does not divide) or the job's (peer: the coordinator or a peer
// failed or timed out). The C API maps them to OMNI_EINVAL and OMNI_ECOMM.
enum class Fault { none, usage, peer };

struct StartResult {
    std::uint64_t step = 0;  // optimizer steps already done by the job (0 on a fresh start)
    bool joined = false;     // this rank joined a running job
    bool rewind = false;     // joined in a generation that lost ranks: load the checkpoint
};

class Runtime {
public:
    // PMIx (if under srun --mpi=pmix), the environment, then create().
    static Result<std::unique_ptr<Runtime>> from_environment();
    // Standalone: world 1 at once. Otherwise joins the coordinator and waits (up to
    // join_timeout_ms) to be admitted, then builds the generation's communicator. A joiner
    // that an announced grow names returns at the announcement instead, with the rank and
    // world it is to have (rank(), world(), generation()), so that it registers its state
    // off the survivors' pause; its start() then waits for the admission and the
    // communicator. No collective may be used before start().
    // `pmix`: this process's PMIx session (from_environment), for the MP group's wire-up.
    static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions &options,
                                                   const PmixSession *pmix = nullptr);
    // Keeps the PMIx session open as long as the runtime (from_environment and the C API).
    void keep_pmix(std::unique_ptr<PmixSession> session);
    ~Runtime();
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;

    bool standalone() const { return opts_.standalone; }
    std::uint32_t rank() const { return rank_; }    // in the generation
    std::uint32_t world() const { return world_; }  // ranks in the generation
    // The groups of runtime/groups.h (with M = 1: dp_rank() == rank(), dp_size() == world()).
    std::uint32_t dp_rank() const { return groups_.dp_rank; }
    std::uint32_t dp_size() const { return groups_.dp_size; }
    std::uint32_t mp_rank() const { return groups_.mp_rank; }
    std::uint32_t mp_size() const { return groups_.mp_size; }
    std::uint32_t unit() const { return opts_.unit; }
    std::uint32_t slot() const { return opts_.slot; }
    std::uint64_t generation() const { return generation_; }
    std::uint64_t step() const { return step_; }
    const std::string &member_id() const { return opts_.member_id; }
    const RuntimeOptions &options() const { return opts_; }
    bool started() const { return started_; }
    bool finished() const { return finished_; }  // after STOP or LEFT
    Fault last_fault() const { return fault_; }

    // The data-parallel communicator trainers use (Gloo, NCCL when OMNI_COMM_BACKEND=nccl, or
    // the single-rank one): dp_size() ranks, this one dp_rank(). Valid until the next
    // boundary() that returns RESHAPED or REWIND.
    Communicator &comm();
    // The model-parallel communicator: mp_size() ranks of this replica, this one mp_rank();
    // NCCL under OMNI_COMM_BACKEND=nccl when M > 1. Valid as long as the runtime. With M = 1
    // it is a single-rank communicator whose allgather/reduce_scatter copy with memmove
    // (host buffers, or send == recv).
    Communicator &mp_comm();
    // Every rank of the generation over host buffers (Gloo): barriers and host-side
    // agreements that span MP indices (a checkpoint's commit). Valid as comm() is.
    Communicator &world_comm();
    // The sequence-parallel group of `degree`: the aligned block of `degree` DP ranks of this
    // rank's MP index that holds it (DP ranks dp_rank() / degree * degree onwards), where an
    // LSSP plan (plan(), StepPlan::shards) splits a sample over `degree` replicas; this rank
    // is dp_rank() % degree in it. Host buffers (Gloo). Built at its first call in a
    // generation, so every rank of the block must make that call (they all compute the split
    // sample); valid as comm() is. Degree 1: a single-rank communicator. Errors: a degree
    // that is not a power of two dividing dp_size(), or before start() (usage); the
    // rendezvous failing (a peer fault, last_fault()).
    Result<Communicator *> sp_comm(std::uint32_t degree);
    // False for a joiner between an early return of create() and start(), and after
    // abandon_collectives().
    bool has_comm() const { return nccl_ || control_; }
    // After a collective of this generation failed (a peer died or timed out): closes this
    // rank's Gloo connections of the generation at once, so that ranks still waiting on this
    // one in a collective fail too and reach the boundary, instead of waiting there until the
    // boundary timeout declares them lost as well (a ring allreduce tells only the dead
    // rank's neighbours). The boundary's REWIND builds the next generation's. The MP group
    // (the unit's own, for its life) and NCCL (aborted at the rewind) are left as they are.
    void abandon_collectives();
    bool collectives_abandoned() const { return abandoned_; }
    bool nccl_backend() const { return nccl_ != nullptr; }
    // NCCL: comm()'s operations go on the trainer's CUDA stream (a cudaStream_t on
    // OMNI_CUDA_DEVICE), in this and every later generation; null: the communicator's own.
    // With Gloo or a single rank only null is valid (host buffers need no stream).
    Status set_cuda_stream(void *stream);

    // The parameters this rank holds (fp32, `count` elements, the trainer's memory): replicated
    // across its DP group (with M > 1, its MP slice of the model). Joiners receive them in
    // start() from their DP group. Register before start(); again to move the buffer.
    Status register_params(float *data, std::size_t count);
    // An optimizer-state vector of logical length `length`, held as this rank's ZeRO-1 shard
    // in *storage (zero1_range(length, dp_rank(), dp_size()) of it). The runtime resizes *storage at a
    // reshape; a freshly registered one is resized (zero-filled) now. Returns its index.
    Result<std::size_t> register_shard(std::vector<float> *storage, std::size_t length);
    ShardRange shard_range(std::size_t length) const {
        return zero1_range(length, groups_.dp_rank, groups_.dp_size);
    }
    // The logical length vector `index` was registered with (0 for an unknown index).
    std::size_t shard_length(std::size_t index) const {
        return index < shards_.size() ? shards_[index].length : 0;
    }

    // The runtime's ledger (this rank is DP rank dp_rank() of dp_size()). global_batch and
    // micro_batch 0 take OMNI_GLOBAL_BATCH / OMNI_MICRO_BATCH (1 when unset). Before start().
    Status configure_ledger(LedgerConfig cfg);
    const Ledger *ledger() const { return ledger_ ? &*ledger_ : nullptr; }
    // After loading a checkpoint: the saved ledger, resized to the current world. When a
    // ledger was configured, the checkpoint's must have its dataset size, global batch and
    // seed (else an error naming the field), and the configured micro-batch is kept
    // (Ledger::resume_as).
    Status restore_ledger(std::string_view json);

    // Grouped reordering (runtime/balanced_step.h): the policy, and the cost of a sample this
    // rank loads. Every rank of the job configures the same policy; it applies from the next
    // step not yet planned (a step whose first micro_batch() has run keeps its split). Usage
    // error: a null cost with a policy.
    Status configure_balance(const BalanceOptions &options, CostFn cost);
    const BalanceOptions &balance_options() const { return balance_; }
    // The b indices of micro-step `micro` of the current step for this replica: the ledger's
    // share without a policy, the step's plan with one. With a policy the first call of a
    // step is collective over the DP group (an all-gather of the replicas' costs and
    // locality), and with M > 1 over the MP group too (the replica's record comes from its MP
    // rank 0), so every rank makes it at the same step; its failure is a peer fault
    // (last_fault()).
    Result<std::vector<std::uint64_t>> micro_batch(std::uint32_t micro);
    // The current step's plan (every replica's cost), once micro_batch() or plan() made it;
    // else null.
    const StepPlan *step_plan() const;
    // The current step's plan, made now if it is not yet (collective as micro_batch()'s first
    // call). With LSSP the replicas' work is unequal (StepPlan::samples and shards), so a
    // trainer reads it here; micro_batch() refuses an LSSP plan. Usage error without a policy.
    Result<const StepPlan *> plan();

    // Once, after registering state and before the first step, on every rank. A joiner
    // receives step, ledger, parameters and its shards here from the survivors, who wait for
    // it in their boundary() (up to comm_timeout_ms).
    Result<StartResult> start();

    // After optimizer step `step` (1 for the first; after a rewind, the checkpoint's step + 1
    // and so on). Commits the ledger's step (it must be at step-1, or already at step when a
    // failed call is repeated), then waits for the coordinator's decision and applies it.
    // After a SIGTERM that the runtime holds (see below) it first asks for the job's stop.
    Result<BoundaryResult> boundary(std::uint64_t step);

    // Asks the coordinator to stop the whole job at the next boundary that every rank reaches
    // (STOP there on every rank: the trainer checkpoints and exits 0). `reason` (1..64
    // characters) goes to omni-launch's log and events file. Usage error when standalone.
    //
    // SIGTERM: Slurm sends it to a job's steps when it preempts the job with a GraceTime,
    // and for `scancel --signal=TERM`; its default action would kill the rank mid-step and
    // lose everything since the last checkpoint. So create() (under a coordinator) holds it
    // when its disposition is still the default: the calling thread, and every thread it
    // starts afterwards (ZeroMQ's, Gloo's; PMIx's from from_environment()), blocks it, so
    // that it interrupts none of their system calls; a handler records it in threads started
    // before. The next boundary() then calls request_stop(). Processes the rank starts
    // inherit the block. A program that ignores SIGTERM (a satellite's ranks, omni-launch(1))
    // or handles it itself keeps its disposition, and may call request_stop() itself.
    Status request_stop(const std::string &reason);

    // Tells the coordinator that the checkpoint of step `step` is complete at `location`
    // (empty, or 1..1024 printable characters), for omni-ctl status and omni-launch's
    // metrics. One rank says it, once the checkpoint is committed. Usage error when
    // standalone.
    Status note_checkpoint(std::uint64_t step, const std::string &location);

    // Before a rank publishes anything outside the job (a checkpoint, a metrics line): an
    // error (a peer fault) when this rank was declared lost and fenced out. Costs a round trip
    // to the coordinator only when its heartbeats have not been acknowledged within half the
    // liveness timeout, as after the process was stopped: then it asks. Success when
    // standalone. A rank stopped between this call and its write can still write; storage
    // that checks fencing itself is not built.
    Status check_member();
    bool fenced() const;

    // Another library's connections of this generation (torch.distributed's Gloo group):
    // begin_foreign_sockets() before it connects, adopt_foreign_sockets() after. The
    // connected TCP sockets that appeared in between are shut down when the generation is
    // aborted (a peer declared lost), as this runtime's own pairs are, so that a collective
    // of that library waiting on a hung peer fails then rather than at its own timeout. A
    // count other than `expected` (another thread opened a socket meanwhile) adopts none:
    // shutting down a socket that is not the library's would break something else. Returns
    // how many it adopted; they are forgotten at the next generation.
    void begin_foreign_sockets();
    std::size_t adopt_foreign_sockets(std::size_t expected);

private:
    struct Shard {
        std::vector<float> *storage;
        std::size_t length;
    };
    explicit Runtime(const RuntimeOptions &o);
    Error usage_error(std::string message);  // records Fault::usage
    // One generation's rendezvous store and communicators.
    // control: every rank (Gloo); dp: the DP group's Gloo one when M > 1; nccl: the DP
    // group's NCCL one.
    struct Connection {
        std::unique_ptr<CoordinatorStore> store, dp_store;
        std::unique_ptr<Communicator> control, dp, nccl;
    };
    // with_nccl = false: Gloo only (the NCCL communicator comes from ncclCommShrink).
    // nccl_parent: this rank's NCCL communicator on a pure grow (make_nccl_communicator).
    GlooOptions gloo_options() const;  // the runtime's: host, timeout, same-host copy
    Result<Connection> connect(std::uint64_t generation, std::uint32_t rank, std::uint32_t world,
                               const Groups &g, bool with_nccl,
                               Communicator *nccl_parent = nullptr) const;
    // The MP group's communicators, once, when the rank joins (generation: the decision's).
    Status connect_mp(std::uint64_t generation);
    Communicator &dp_control() { return dp_control_ ? *dp_control_ : *control_; }
    // Layout + communicator of the decision's generation (`prebuilt`: already connected;
    // `nccl_grow`: else connect with the current NCCL communicator as the grow's parent).
    Status adopt(const Decision &d, std::uint32_t new_rank,
                 std::optional<Result<Connection>> prebuilt = std::nullopt, bool nccl_grow = false);
    Status check_state_for(std::uint32_t dp_size) const;
    // The hand-off runs inside the DP group: `d` is dp_decision() of the coordinator's.
    // Phase 1 of a planned reshape (runtime/handoff.h), on the old communicator: returns
    // this rank's survivor-layout piece of each optimizer vector (empty for a leaver).
    Result<std::vector<std::vector<float>>> gather_on_survivors(const Decision &d);
    // Phase 2, on the new communicator, survivors and joiners alike: header, parameters to
    // the joiners, optimizer vectors from `held` (survivor layout) into the new layout.
    Status hand_over(const Decision &d, std::vector<std::vector<float>> &held);
    Status check_header(const Decision &d, const std::string &text);
    Status prepare(const Decision &d);
    Status receive_as_joiner();
    Status await_admission();
    Status admit(const Decision &dec);
    void report_ready();

    RuntimeOptions opts_;
    std::unique_ptr<PmixSession> pmix_;
    const PmixSession *pmix_view_ = nullptr;  // create()'s, for connect_mp()
    std::unique_ptr<CoordinatorClient> client_;
    std::unique_ptr<Liveness> liveness_;  // the heartbeat thread (under a coordinator)
    // Taken by the heartbeat thread while it aborts communicators, and here wherever they
    // are replaced or destroyed, so that it never aborts one being freed.
    std::mutex comm_mu_;
    std::atomic<std::uint64_t> live_generation_{0};  // generation_, for that thread
    void abort_generation(std::uint64_t generation, bool unit_lost);
    std::set<ino_t> foreign_before_;   // begin_foreign_sockets()'s view
    std::set<ino_t> foreign_;          // adopted, of generation foreign_generation_
    std::uint64_t foreign_generation_ = 0;
    void drop_generation_comms();  // the generation's Gloo side (stores too); under comm_mu_
    Status start_liveness();
    Error fenced_error();
    std::unique_ptr<CoordinatorStore> store_;
    bool abandoned_ = false;                 // abandon_collectives() in this generation
    std::unique_ptr<Communicator> control_;  // Gloo (or solo): hand-off and host collectives
    std::unique_ptr<Communicator> nccl_;     // OMNI_COMM_BACKEND=nccl: the trainer's (DP group)
    std::unique_ptr<CoordinatorStore> dp_store_;
    std::unique_ptr<Communicator> dp_control_;  // M > 1: the DP group (Gloo)
    std::unique_ptr<Communicator> mp_control_, mp_nccl_;  // the MP group, for the unit's life
    std::map<std::uint32_t, std::unique_ptr<Communicator>> sp_;  // sp_comm()'s, by degree, this generation's
    void *cuda_stream_ = nullptr;            // set_cuda_stream(), applied to every nccl_
    std::uint32_t rank_ = 0, world_ = 1;
    std::uint64_t generation_ = 0, step_ = 0;
    std::optional<Decision> admission_;  // the decision that admitted this rank
    std::optional<Decision> announced_;  // an announced grow that names this rank, not applied yet
    Layout layout_;                      // this rank's generation (members by rank)
    Groups groups_;                      // in layout_
    Layout dp_layout_;                   // dp_layout(layout_) of this rank's MP index
    // Buffers for an announced change (prepare()), by optimizer vector: phase 1 and phase 2.
    std::vector<std::vector<float>> spare_, spare_next_;
    float *params_ = nullptr;
    std::size_t param_count_ = 0;
    std::vector<Shard> shards_;
    std::optional<Ledger> ledger_;
    // The locality key of this rank's node (SLURMD_NODENAME, else the host name).
    std::uint64_t node_key() const;
    BalanceOptions balance_;
    CostFn cost_;
    std::optional<StepPlan> plan_;  // the step's, once its first micro_batch() made it
    bool started_ = false, finished_ = false;
    bool stop_requested_ = false;  // request_stop() went out (once is enough)
    Fault fault_ = Fault::none;
};

}  // namespace omni::launcher

#endif
