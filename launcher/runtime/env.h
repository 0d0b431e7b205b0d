// How a rank learns who it is: the environment contract between omni-launch (and Slurm/PMIx)
// and libomni's runtime, as one pure function of a getenv-like lookup and what PMIx said, so
// that every rule is unit-tested without a cluster.
//
// The contract (omni-launch sets these for every task it starts):
//   OMNI_COORD_ADDR, OMNI_COORD_SECRET, OMNI_JOB_DIR
//                     where the coordinator is and the job secret (secret.h). When none of
//                     the three is set and there is at most one process (no PMIx, or a PMIx
//                     job of size 1) the rank runs standalone: world 1, no coordinator, no
//                     resizes. Several processes without a coordinator are an error.
//   OMNI_UNIT_ID      this rank's elastic-unit id (stable across generations, chosen by the
//                     launcher, 0..65535).
//   OMNI_UNIT_SLOT    this rank's slot inside its unit, 0..OMNI_UNIT_SIZE-1.
//                     Fallback when either is absent (one srun step per set of whole units):
//                       unit = OMNI_UNIT_BASE + R / OMNI_UNIT_SIZE,  slot = R % OMNI_UNIT_SIZE
//                     with R the PMIx rank in the step (else SLURM_PROCID, else 0) and
//                     OMNI_UNIT_BASE the first unit id of the step (default 0). A joining
//                     step therefore needs only OMNI_UNIT_BASE set to its first new unit id.
//   OMNI_UNIT_SIZE, OMNI_MP, OMNI_GLOBAL_BATCH, OMNI_MICRO_BATCH, OMNI_ELASTIC_MIN/MAX
//                     the job options (common/job_options.h), as the SPANK plugin sets them.
//                     OMNI_MP (M, default 1) must divide OMNI_UNIT_SIZE: a unit holds
//                     OMNI_UNIT_SIZE/M replicas of M model-parallel ranks (runtime/groups.h).
//   OMNI_MEMBER_ID    optional: the rank's id at the coordinator ([A-Za-z0-9._:@-], at most
//                     128). Default "u<unit>s<slot>-<pid>@<host>". omni-launch reports a dead
//                     task by this id, so when it needs to do that it sets the id itself.
//   OMNI_GLOO_HOST    optional: the IPv4 address this rank's Gloo transport listens on.
//                     Default: the local address of the route to the coordinator, i.e. the
//                     address of the interface the job's traffic already uses.
//   OMNI_MP_WIREUP    optional: how a model-parallel group meets: "auto" (default: through
//                     PMIx where this process's step holds its unit, else the coordinator),
//                     "pmix" (through PMIx, an error where it cannot) or "coordinator".
//   OMNI_COMM_BACKEND optional: "gloo" (default) or "nccl" (if built with NCCL).
//   OMNI_CUDA_DEVICE  optional: the CUDA device of the NCCL communicator (default 0; Slurm's
//                     CUDA_VISIBLE_DEVICES makes the task's GPU device 0).
//   OMNI_JOIN_TIMEOUT_MS      how long a rank waits to be admitted (default 600000: a joiner
//                             waits for the next boundary of a running job).
//   OMNI_BOUNDARY_TIMEOUT_MS  how long a rank waits for a boundary decision (default 300000;
//                             the coordinator declares missing ranks lost long before).
//   OMNI_COMM_TIMEOUT_MS      per collective and per rendezvous (default 60000).
#ifndef OMNI_LAUNCHER_RUNTIME_ENV_H
#define OMNI_LAUNCHER_RUNTIME_ENV_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/job_options.h"
#include "omni/result.h"

namespace omni::launcher {

enum class CommBackend { gloo, nccl };

// What PMIx (or nothing) told this process about its step.
struct ProcessIdentity {
    std::uint32_t rank = 0;  // rank in the srun step
    std::uint32_t size = 1;  // tasks in the step
    bool from_pmix = false;
};

struct RuntimeOptions {
    bool standalone = false;
    std::string endpoint, secret;  // the coordinator (not standalone)
    std::string member_id;
    std::string node;  // SLURMD_NODENAME: where the rank runs, told to the coordinator
    std::uint32_t unit = 0, slot = 0, unit_size = 1;
    std::uint32_t mp = 1;      // OMNI_MP: ranks per model-parallel group (divides unit_size)
    ProcessIdentity process;   // this process in its srun step (PMIx): the unit's MP wire-up
    std::string gloo_host = "127.0.0.1";
    bool same_host_copy = true;  // OMNI_SAME_HOST_COPY: hand-off copies between local ranks
    std::int64_t gloo_hold_ms = 0;  // OMNI_GLOO_TEST_HOLD_MS: pairs listen this long (tests)
    std::string mp_wireup = "auto";  // OMNI_MP_WIREUP: auto, pmix or coordinator
    CommBackend backend = CommBackend::gloo;
    int cuda_device = 0;
    std::int64_t join_timeout_ms = 600000;
    std::int64_t boundary_timeout_ms = 300000;
    std::int64_t comm_timeout_ms = 60000;
    JobOptions job;  // OMNI_GLOBAL_BATCH etc. (defaults when unset)
};

using EnvLookup = std::function<const char *(const char *)>;

// Applies the contract above. Errors name the variable and quote its value.
Result<RuntimeOptions> runtime_options_from_env(const EnvLookup &get,
                                                const ProcessIdentity &process);

// The default member id for (unit, slot) on this host and process (sanitised host name).
std::string default_member_id(std::uint32_t unit, std::uint32_t slot);

// The local IPv4 address of the route to `ip` (a connected UDP socket's own address: no
// packet is sent). Used as the Gloo listening address when OMNI_GLOO_HOST is unset.
Result<std::string> local_address_towards(const std::string &ip);

}  // namespace omni::launcher

#endif
