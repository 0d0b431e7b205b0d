/* libomni: the elastic data-parallel runtime linked into trainers (slurm-omni, issue 6).
 *
 * Two parts: the rank runtime (omni_init .. omni_finalize: who this rank is, the
 * data-parallel communicator, the boundary protocol, the state hand-off of a reshape, the
 * runtime's own ledger) and the stand-alone sample ledger (omni_ledger_*). The ledger answers "which global sample indices does DP rank r process in
 * micro-step m of the current step" for an epoch order fixed by a seed, keeps the global
 * batch B fixed while the DP size d changes (gradient accumulation GA = B / (b * d), an error
 * when not integral) and guarantees that every sample of every epoch is consumed exactly once
 * whatever sequence of resizes happens at step boundaries.
 *
 * Model: the data is the endless concatenation of per-epoch permutations of [0, D); step k
 * consumes stream positions [k*B, (k+1)*B), independent of d. Inside a step, rank r owns the
 * contiguous slice [r*B/d, (r+1)*B/d) and walks it in GA micro-batches of b samples.
 *
 * Conventions: the error idiom of omni/status.h: every function returns OMNI_OK (0) or a
 * negative omni_status, and omni_last_error() says what was wrong (per thread). No function
 * throws, calls exit() or keeps a pointer it was given. Handles are not thread-safe; use one per thread or lock.
 * Link with -lomni.
 */
#ifndef OMNI_OMNI_H
#define OMNI_OMNI_H

#include <stddef.h>
#include <stdint.h>

#include "omni/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last failed call on this thread ("" when none). Valid until the next
 * libomni call on this thread. */
const char *omni_last_error(void);

/* ---- The rank runtime ------------------------------------------------------------------
 * One runtime per process, used from one thread. Life of a rank:
 *   omni_init(); omni_register_params(p, P); omni_state_add(P, &m); omni_state_add(P, &v);
 *   omni_data_configure(D, seed, 0, 0); omni_start(&step, &rewind);
 *   loop: GA = omni_data_grad_accum(); for each micro-step: omni_data_micro_batch(...),
 *         forward/backward; omni_allreduce(grad, ...); update the shard (omni_state_shard);
 *         omni_allgather(...) the parameters; omni_boundary(++step, &d);
 *         d.kind: CONTINUE go on | RESHAPED go on (rank, world, shards, GA are new) |
 *                 REWIND reload the last checkpoint, then go on | STOP or LEFT: omni_finalize, exit 0.
 *
 * Environment (set by omni-launch; see launcher/runtime/env.h for every rule):
 *   OMNI_COORD_ADDR, OMNI_COORD_SECRET (or OMNI_JOB_DIR)   the coordinator and the job secret.
 *     None of them and at most one process: standalone, world 1, no resizes.
 *   OMNI_UNIT_ID, OMNI_UNIT_SLOT   this rank's unit and slot; when absent,
 *     unit = OMNI_UNIT_BASE (default 0) + R / OMNI_UNIT_SIZE, slot = R % OMNI_UNIT_SIZE with
 *     R the PMIx rank of the srun step (else SLURM_PROCID).
 *   OMNI_UNIT_SIZE, OMNI_GLOBAL_BATCH, OMNI_MICRO_BATCH, OMNI_MP (must be 1 here).
 *   Optional: OMNI_MEMBER_ID, SLURMD_NODENAME (told to the coordinator: where the rank runs),
 *     OMNI_GLOO_HOST, OMNI_COMM_BACKEND=gloo|nccl, OMNI_CUDA_DEVICE,
 *     OMNI_JOIN_TIMEOUT_MS, OMNI_BOUNDARY_TIMEOUT_MS, OMNI_COMM_TIMEOUT_MS.
 */

/* The *_FORCE_INT values are not dtypes or operations. They make every int a value of the
 * type, so that a wrong value from a caller is refused with OMNI_EINVAL instead of being
 * undefined behaviour inside the library, which is C++. */
/* OMNI_INT64: 64-bit integers, for exact sums (fixed-point gradients, counters): the reductions
 * take OMNI_SUM only (wrapping on overflow is the caller's to prevent). */
typedef enum omni_dtype { OMNI_FP32 = 0, OMNI_BF16 = 1, OMNI_INT64 = 2, OMNI_DTYPE_FORCE_INT = 0x7fffffff } omni_dtype;
typedef enum omni_reduce_op { OMNI_SUM = 0, OMNI_AVG = 1, OMNI_REDUCE_OP_FORCE_INT = 0x7fffffff } omni_reduce_op;

typedef enum omni_decision_kind {
    OMNI_CONTINUE = 0, /* same generation */
    OMNI_RESHAPED = 1, /* planned change applied: new rank/world, shards re-partitioned */
    OMNI_REWIND = 2,   /* ranks were lost: new communicator; reload the last checkpoint */
    OMNI_STOP = 3,     /* the job ends (every rank gets it) */
    OMNI_LEFT = 4      /* this rank's unit was removed: exit cleanly */
} omni_decision_kind;

typedef struct omni_decision {
    int kind;                  /* an omni_decision_kind */
    uint64_t generation;       /* after the decision */
    uint32_t world;            /* after the decision (LEFT: the old world) */
    uint32_t rank;             /* this rank after the decision (LEFT: the old rank) */
    uint32_t previous_world;
    uint32_t units_joined;     /* whole units admitted / removed at this boundary */
    uint32_t units_left;
    uint32_t grad_accum;       /* GA of the runtime's ledger afterwards (0: none configured) */
} omni_decision;

/* Initialises the runtime from the environment: PMIx under `srun --mpi=pmix`, the OMNI_*
 * variables, then joins the coordinator and waits to be admitted (a joiner waits for the next
 * boundary of the running job, up to OMNI_JOIN_TIMEOUT_MS) and builds the communicator.
 * A joiner that an announced grow names (omni-launch --announce yes) returns at the
 * announcement, a step before its admission, with the rank and world it is to have: it
 * registers its state meanwhile, and omni_start waits for the admission and builds the
 * communicator (collectives before omni_start are then OMNI_ESTATE).
 * Errors: OMNI_EINVAL (a variable is wrong; the message names it), OMNI_ECOMM (no
 * coordinator, refused secret, timeout), OMNI_ESTATE (already initialised). */
int omni_init(void);

/* Leaves the runtime: frees the communicator, the coordinator connection, the optimizer
 * shards held for omni_state_*, and finalises PMIx. Idempotent. Call after STOP or LEFT;
 * calling it mid-generation makes the others' next boundary see this rank as lost. */
int omni_finalize(void);

/* Who this rank is now (each changes only in omni_boundary). NULL outputs are skipped.
 * omni_rank and omni_world_size count every rank of the generation; with model parallelism
 * the data-parallel rank and size are omni_group_info(OMNI_GROUP_DP, ...). */
int omni_rank(uint32_t *rank);
int omni_world_size(uint32_t *world);
int omni_unit(uint32_t *unit, uint32_t *slot);
int omni_generation(uint64_t *generation);
/* 1 when running standalone (no coordinator), else 0. */
int omni_standalone(int *standalone);
/* "gloo", "nccl" or "solo" (standalone); a static string. NULL when not initialised, and
 * while this rank has no communicator: a joiner before omni_start, a rank after OMNI_LEFT. */
const char *omni_backend(void);

/* The parameters this rank holds, replicated over its DP group (with M > 1, its MP slice of
 * the model): `count` fp32 values in the caller's memory, which must stay valid until the
 * next omni_register_params or omni_finalize. A joining rank receives them in omni_start()
 * from its DP group; survivors send theirs at a RESHAPED boundary. Register before
 * omni_start. */
int omni_register_params(float *params, size_t count);

/* Adds an optimizer-state vector of logical length `length` (e.g. Adam's m or v for P
 * parameters) held ZeRO-1 style: this rank keeps elements [begin, begin+len) with
 * contiguous ranges whose sizes differ by at most one, lower ranks taking the larger ones
 * (see omni_state_shard), over the DP group (the ranks holding this MP slice). The runtime
 * owns the shard's memory, zero-filled here. At a RESHAPED boundary it re-partitions every
 * vector among the DP group's new ranks over its communicator (no disk). *index receives the vector's number (0, 1, ...). At most 64 vectors; before
 * omni_start only. */
int omni_state_add(size_t length, size_t *index);

/* This rank's shard of vector `index`: *data (valid until the next RESHAPED/REWIND boundary
 * or omni_finalize; re-read it after each), its first logical element *begin and its
 * element count *count. Any output may be NULL. */
int omni_state_shard(size_t index, float **data, size_t *begin, size_t *count);

/* The runtime's ledger, DP rank and size of omni_group_info(OMNI_GROUP_DP): it hands samples
 * to replicas, so the M ranks of one replica get the same ones. global_batch and micro_batch
 * 0 take OMNI_GLOBAL_BATCH / OMNI_MICRO_BATCH (1 when unset). The ledger is committed in
 * omni_boundary and resized at every reshape (GA = B / (b * DP)); a joiner
 * receives the survivors'. Before omni_start (later, omni_data_load restores a checkpoint's).
 * Errors: OMNI_EINVAL (B not divisible by b*DP, bad sizes), OMNI_ESTATE (after start). */
int omni_data_configure(uint64_t dataset_size, uint64_t seed, uint64_t global_batch,
                        uint64_t micro_batch);
/* GA for the current world. OMNI_ESTATE when no ledger is configured. */
int omni_data_grad_accum(uint32_t *grad_accum);
/* This rank's b sample indices of micro-step `micro` of the current step; as
 * omni_ledger_micro_batch (OMNI_ERANGE with *count = b when capacity is too small). With a
 * balance policy (omni_data_balance) they come from the step's plan, and the first call of
 * a step is collective over the DP group: every DP rank makes it at the same step
 * (OMNI_ECOMM when a peer fails in it; OMNI_ERANGE answers come before it). */
int omni_data_micro_batch(uint32_t micro, uint64_t *indices, size_t capacity, size_t *count);
/* A sample's cost for balancing (tokens, patches, frames, or any integer estimate of its
 * compute, at most 2^40): from its global index and the step (0-based: the steps committed
 * before it) that consumes it. Each rank calls it for its replica's own share; with OMNI_MP > 1
 * the replica's MP rank 0's values count. */
typedef uint64_t (*omni_cost_fn)(uint64_t index, uint64_t step, void *user);
/* Grouped reordering (libomni(3) BALANCING): which replica computes which of the step's
 * samples, to make the slowest replica's cost small. `policy`: "none" (the ledger's split),
 * "lpt", "kk" (Karmarkar-Karp, over every replica), "grouped" (kk among the replicas of one
 * node), "POLICY:SCOPE" with SCOPE "job" or "node", or "lssp" (long samples split over
 * replicas, the costs being lengths in tokens; replicas then do unequal work: read it with
 * omni_data_step_samples and omni_data_step_shards, omni_data_micro_batch refuses it). The step's samples stay the same, so
 * the ledger, checkpoints and exactly-once do too. Every rank of the job sets the same
 * policy; it applies from the next step not yet planned (a step whose first
 * omni_data_micro_batch ran keeps its split). `cost` may be NULL
 * only with "none". Errors: OMNI_EINVAL (an unknown policy, a NULL cost), OMNI_ESTATE
 * (before omni_init). */
int omni_data_balance(const char *policy, omni_cost_fn cost, void *user);
/* This replica's work in the current step, under any policy: the samples it computes
 * (*count of them, in order; without a policy its ledger share; with "lssp" the whole ones
 * and the split ones it leads, so that every sample is computed once) and its time in the
 * plan (*time: its summed cost; with LSSP the plan's model time, split shards included; 0
 * without a policy). Makes the step's plan when it is not made yet, collective as the first
 * omni_data_micro_batch. OMNI_ERANGE with *count set when capacity is too small; the plan
 * is kept, so asking again with room communicates no more. time may be NULL. */
int omni_data_step_samples(uint64_t *indices, size_t capacity, size_t *count, double *time);
/* With "lssp": the split samples this replica computes a shard of: index[i], its degree[i]
 * (replicas sharing it) and this replica's shard[i] (0: it leads, and computes the sample's
 * gradient; the others run their part of its sequence). *count is 0 under other policies.
 * As omni_data_step_samples otherwise. */
int omni_data_step_shards(uint64_t *index, uint32_t *degree, uint32_t *shard, size_t capacity, size_t *count);
/* The ledger as JSON text for a checkpoint, as omni_ledger_save. */
int omni_data_save(char *buffer, size_t capacity, size_t *length);
/* After loading a checkpoint (a resumed job, or REWIND): restores the saved ledger, resized
 * to the current world. After omni_data_configure, the saved ledger must have the configured
 * dataset size, global batch and seed (a resumed run keeps its data order), and the
 * configured micro-batch replaces the saved one (it only sets GA). OMNI_EFORMAT names the
 * field of the text that is wrong; OMNI_EINVAL names the configured value the checkpoint
 * differs in, or says that B is not divisible by b * world; the ledger is unchanged then. */
int omni_data_load(const char *text, size_t length);

/* Once per rank, after registering parameters and optimizer state and before the first
 * step. A rank that joined a running job receives the step counter, the ledger, the
 * parameters and its optimizer shards here (the survivors wait for it in their boundary, up
 * to OMNI_COMM_TIMEOUT_MS, so call it promptly). *step = optimizer steps the job has done
 * (0 on a fresh start); *rewind = 1 when this rank joined a generation that lost ranks:
 * load the last checkpoint instead. Either output may be NULL. A joiner whose registration
 * (parameter count, vector lengths, ledger) differs from the survivors' gets OMNI_EINVAL. */
int omni_start(uint64_t *step, int *rewind);

/* After every optimizer step, on every rank: `step` is the number of optimizer steps done
 * (1 after the first). Commits the ledger's step, then waits for the coordinator's decision,
 * the same for every rank of the generation, and applies it before returning:
 * RESHAPED: the communicator of the new generation is built, optimizer shards are
 *   re-partitioned, joiners got the parameters, the ledger is resized (GA re-derived);
 * REWIND: the new communicator is built, shards are resized to the new ranges (zeros):
 *   reload the last checkpoint (parameters, shards, omni_data_load) and continue from it;
 * LEFT (this unit was removed) and STOP: call omni_finalize and exit 0.
 * `out` may be NULL. Errors: OMNI_ECOMM (coordinator or peer failure; the job cannot go on
 * with this rank), OMNI_EINVAL (step out of sequence with the ledger, B not divisible),
 * OMNI_ESTATE (before omni_start, after STOP/LEFT). */
int omni_boundary(uint64_t step, omni_decision *out);

/* Asks the coordinator to stop the whole job at the next boundary every rank reaches: there
 * every rank gets STOP (checkpoint, then exit 0). `reason` (1..64 characters) goes to
 * omni-launch's log and events file. Under omni-launch, omni_init holds SIGTERM (what Slurm
 * sends a job's steps when it preempts the job with a grace time) unless the program
 * ignores or handles it: the thread that calls omni_init, and the threads started after,
 * block it, and the next omni_boundary makes this request. A process the rank forks gets
 * SIGTERM back; one started by posix_spawn or system() inherits the block. A program with
 * its own SIGTERM handler calls this itself. Errors: OMNI_EINVAL (reason), OMNI_ESTATE (standalone, not
 * initialised), OMNI_ECOMM (no answer from the coordinator). */
int omni_request_stop(const char *reason);

/* Tells the coordinator that the checkpoint of step `step` is complete, at `location` (NULL,
 * or 1..1024 printable characters: a path or URL), so that omni-ctl status and omni-launch's
 * metrics show the job's last checkpoint. Call on one rank after the checkpoint is committed.
 * Errors: OMNI_EINVAL (location), OMNI_ESTATE (standalone, not initialised), OMNI_ECOMM. */
int omni_checkpoint_done(uint64_t step, const char *location);

/* Before this rank publishes anything outside the job (a checkpoint, a metrics line, a log
 * the others read): OMNI_ECOMM when it was declared lost while it could not run (SIGSTOP, a
 * stall longer than the boundary timeout) and is fenced out: it must exit without writing.
 * A round trip to the coordinator only when its heartbeats have gone unacknowledged for half
 * the timeout, as after such a stall; otherwise free. OMNI_OK when standalone. Errors:
 * OMNI_ECOMM (fenced, or the coordinator did not answer), OMNI_ESTATE (not initialised). */
int omni_check_member(void);

/* The program's own connections of this generation (torch.distributed's Gloo group, say):
 * omni_sockets_begin() before that library connects its ranks, omni_sockets_adopt() after.
 * The connected TCP sockets that appeared in this process in between are shut down when a
 * peer of the generation is declared lost, as libomni's own are, so that the library's
 * collective waiting on a hung peer fails then (the loop recovers as from any failed
 * collective) instead of at the library's own timeout. A count other than `expected` (the
 * library's connections to its peers: world - 1 for a full mesh) adopts none, since another
 * thread's socket may be among them; *adopted (may be NULL) says how many were. Forgotten at
 * the next generation. Errors: OMNI_ESTATE (not initialised, or adopt without begin). */
int omni_sockets_begin(void);
int omni_sockets_adopt(uint32_t expected, uint32_t *adopted);

/* For a C++ caller that links the same libgloo (omni.torch's Gloo group): a Gloo TCP device
 * whose pairs are guarded as libomni's own (libomni(3) SECURITY): each pair's address bytes
 * carry a fresh token, which a connection to the pair must send before Gloo sees it, so the
 * store its rendezvous goes through must be authenticated (the coordinator's). `iface` (a
 * network interface) or else `hostname` (an address or a name) says where its pairs listen.
 * *device receives a new std::shared_ptr<gloo::transport::Device> (as void *), the caller's
 * to delete. Needs no omni_init. Errors: OMNI_EINVAL (both empty or NULL, device NULL),
 * OMNI_ECOMM (Gloo could not make the device; the message says why). */
int omni_gloo_guarded_device(const char *iface, const char *hostname, void **device);

/* Groups (OMNI_MP = M, libomni(3) LAYOUTS): a unit of N ranks holds N/M replicas of M ranks.
 *   OMNI_GROUP_DP     the data-parallel group: one rank per replica, the ranks holding this
 *                     rank's model-parallel slice (MP index slot % M); rebuilt at every
 *                     resize. With M = 1, every rank of the generation.
 *   OMNI_GROUP_MP     this rank's replica: M ranks inside its unit, the same for the unit's
 *                     life. With M = 1, this rank alone.
 *   OMNI_GROUP_WORLD  every rank of the generation; host buffers whatever the backend (Gloo).
 *   OMNI_GROUP_SP(k)  the sequence-parallel group of degree k (a power of two dividing the DP
 *                     size): the aligned block of k DP ranks of this rank's MP index that holds
 *                     it (DP ranks j*k .. j*k+k-1, j = DP rank / k), where an LSSP plan splits a
 *                     sample over k replicas (omni_data_step_shards); this rank is DP rank % k
 *                     in it. Host buffers (Gloo). Built at its first collective in a generation:
 *                     every rank of the block must make it (they all compute the split sample).
 *                     OMNI_GROUP_SP(1) is this rank alone. */
enum omni_group { OMNI_GROUP_DP = 0, OMNI_GROUP_MP = 1, OMNI_GROUP_WORLD = 2 };
#define OMNI_GROUP_SP(degree) (0x10000 | (int)(degree)) /* degree 1..65535 */
/* This rank's rank in `group` and the group's size. Errors: OMNI_EINVAL (unknown group, an
 * OMNI_GROUP_SP degree that is not a power of two dividing the DP size), OMNI_ESTATE (not
 * initialised). */
int omni_group_info(int group, uint32_t *rank, uint32_t *size);

/* Collectives on a group's current communicator; every rank of the group makes the same
 * calls with the same counts. Buffers: host memory (Gloo, standalone, OMNI_GROUP_WORLD);
 * device memory on the communicator's CUDA stream with OMNI_COMM_BACKEND=nccl (DP, and MP
 * when M > 1; with M = 1 the MP group is this rank alone and its allgather and
 * reduce_scatter copy with memmove: host buffers, or send == recv). bf16 is 16-bit storage
 * (uint16_t), reduced in fp32 and rounded to nearest even. Ranks and sizes below are the
 * group's. Errors: OMNI_EINVAL (NULL buffer, bad type/op/root, unknown group), OMNI_ECOMM (a
 * peer failed or timed out), OMNI_ESTATE (not initialised). */
/* In place: every rank ends with the element-wise sum (or mean) over the group. */
int omni_group_allreduce(int group, void *buffer, size_t count, int dtype, int op);
/* `buffer` of the group's rank `root` copied to every rank of the group. */
int omni_group_broadcast(int group, void *buffer, size_t count, int dtype, uint32_t root);
/* recv[r*count .. (r+1)*count) = rank r's send; recv holds size*count elements. */
int omni_group_allgather(int group, const void *send, void *recv, size_t count, int dtype);
/* send holds size*count elements; rank r receives the reduction of every rank's
 * send[r*count .. (r+1)*count) into recv (count elements). */
int omni_group_reduce_scatter(int group, const void *send, void *recv, size_t count, int dtype, int op);
/* Returns when every rank of the group has called it. */
int omni_group_barrier(int group);
/* The same on OMNI_GROUP_DP: what a data-parallel trainer uses. */
int omni_allreduce(void *buffer, size_t count, int dtype, int op);
int omni_broadcast(void *buffer, size_t count, int dtype, uint32_t root);
int omni_allgather(const void *send, void *recv, size_t count, int dtype);
int omni_reduce_scatter(const void *send, void *recv, size_t count, int dtype, int op);
int omni_barrier(void);

/* With OMNI_COMM_BACKEND=nccl: the collectives above run on `stream` (a cudaStream_t of
 * OMNI_CUDA_DEVICE, passed as void *) after the work already queued there, in this and every
 * later generation, and still return once complete; NULL goes back to the communicator's
 * own stream. May be called before or after omni_start. Errors: OMNI_EINVAL (a non-NULL
 * stream with Gloo or a single rank, whose buffers are host memory), OMNI_ESTATE (not
 * initialised). */
int omni_set_cuda_stream(void *stream);

/* ---- The program's key/value store --------------------------------------------------
 * For the program's own rendezvous in a generation (a torch.distributed process group of
 * every generation, say): keys in the coordinator, behind the job secret, per generation (a
 * generation's keys are dropped once a later one forms), under a prefix of their own so that
 * they never meet libomni's. `generation` is omni_generation()'s value for the generation
 * whose rendezvous this is (the coordinator refuses generations older than the current one).
 * Keys: 1..251 characters of [A-Za-z0-9._:/@-]; values: at most 1 MiB. Thread-safe (a
 * connection of its own, one call at a time). Not available standalone (OMNI_ESTATE): a
 * single process needs no shared store. Errors: OMNI_EINVAL (key, sizes, timeout),
 * OMNI_ESTATE (not initialised, standalone), OMNI_ECOMM (the coordinator refused or did not
 * answer; a get or wait that timed out). */
int omni_store_set(uint64_t generation, const char *key, const void *value, size_t length);
/* Waits up to timeout_ms (0: not at all) for the key. *length receives the value's size;
 * OMNI_ERANGE when capacity is below it (nothing written; ask again with room). */
int omni_store_get(uint64_t generation, const char *key, void *buffer, size_t capacity, size_t *length,
                   int64_t timeout_ms);
/* Atomically adds `amount` (|amount| <= 2^62) to the key's value read as a decimal integer (0
 * when absent), stores the sum as decimal text and returns it in *value (may be NULL). */
int omni_store_add(uint64_t generation, const char *key, int64_t amount, int64_t *value);
/* Waits up to timeout_ms for all `count` keys (1..4096) to exist. */
int omni_store_wait(uint64_t generation, const char *const *keys, size_t count, int64_t timeout_ms);

/* ---- The stand-alone sample ledger ---------------------------------------------------- */

typedef struct omni_ledger omni_ledger;

/* Creates a ledger at step 0 of epoch 0.
 * dataset_size D in 1..2^48, global_batch B and micro_batch b in 1..2^40, dp_size d in
 * 1..2^20, and B divisible by b*d. `seed` selects the epoch permutations; the same seed gives
 * the same sample order on every machine. On success *out owns a new handle (free it with
 * omni_ledger_destroy). Errors: OMNI_EINVAL (message names the value), OMNI_ENOMEM. */
int omni_ledger_create(uint64_t dataset_size, uint64_t global_batch, uint64_t micro_batch,
                       uint64_t seed, uint32_t dp_size, omni_ledger **out);

/* Frees a ledger; NULL is a no-op. */
void omni_ledger_destroy(omni_ledger *ledger);

/* GA = B / (b * d) for the current DP size. */
int omni_ledger_grad_accum(const omni_ledger *ledger, uint32_t *grad_accum);

/* Where the ledger stands: committed steps, the epoch of the next sample, and how many
 * samples of that epoch are already consumed. Any output pointer may be NULL. */
int omni_ledger_position(const omni_ledger *ledger, uint64_t *step, uint64_t *epoch,
                         uint64_t *consumed_in_epoch);

/* The b global sample indices (each in 0..D-1) of DP rank `rank` (0..d-1) in micro-step
 * `micro` (0..GA-1) of the current, uncommitted step, written to indices[0..b-1].
 * `capacity` is the length of `indices`; when it is below b, nothing is written,
 * *count = b and OMNI_ERANGE is returned. On success *count = b. */
int omni_ledger_micro_batch(const omni_ledger *ledger, uint32_t rank, uint32_t micro,
                            uint64_t *indices, size_t capacity, size_t *count);

/* Marks the current step's B samples consumed. Call once per optimizer step, at the
 * boundary, on every rank (each rank holds its own copy of the same ledger). */
int omni_ledger_commit_step(omni_ledger *ledger);

/* Changes the DP size at a step boundary (between commit_step and the next micro_batch).
 * Fails with OMNI_EINVAL, leaving the ledger unchanged, when B is not divisible by b*dp_size.
 * The samples of the following steps do not depend on the DP size. */
int omni_ledger_resize(omni_ledger *ledger, uint32_t dp_size);

/* Serialises the ledger as a NUL-terminated JSON text (for checkpoints). When `capacity` is
 * too small nothing is written, *length is the size needed including the NUL, and
 * OMNI_ERANGE is returned. `buffer` may be NULL with capacity 0 to ask for the size. */
int omni_ledger_save(const omni_ledger *ledger, char *buffer, size_t capacity, size_t *length);

/* Restores a ledger from omni_ledger_save()'s text (`length` bytes, NUL not required).
 * Every field is validated; OMNI_EFORMAT names the field that is wrong. */
int omni_ledger_load(const char *text, size_t length, omni_ledger **out);

#ifdef __cplusplus
}
#endif

#endif
