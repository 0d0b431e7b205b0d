// omni-launch's pure planning: what the allocation offers, how units map onto the tasks of an
// srun step, and the srun command line of a step. No processes, no sockets, no environment
// access (callers pass a getenv-like function), so every rule here is unit-tested.
#ifndef OMNI_LAUNCHER_LAUNCH_PLAN_H
#define OMNI_LAUNCHER_LAUNCH_PLAN_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launch/capacity.h"
#include "omni/result.h"

namespace omni::launcher {

using GetEnv = const char *(*)(const char *);

// Environment set for every rank (the contract with the rank runtime, see omni-launch(1)).
inline constexpr const char *kEnvUnitId = "OMNI_UNIT_ID";      // the rank's elastic unit id
inline constexpr const char *kEnvUnitSlot = "OMNI_UNIT_SLOT";  // 0..unit_size-1 in the unit
inline constexpr const char *kEnvUnitSize = "OMNI_UNIT_SIZE";
inline constexpr const char *kEnvMemberId = "OMNI_MEMBER_ID";  // suggested coordinator id
// Internal, between omni-launch and its per-task shim: the step's unit ids in task order.
inline constexpr const char *kEnvLaunchUnits = "OMNI_LAUNCH_UNITS";

// The batch step's view of its allocation.
struct Allocation {
    std::uint32_t job_id = 0;          // 0 when not inside a job
    std::string batch_node;            // SLURMD_NODENAME: where omni-launch (the coordinator) runs
    std::uint32_t nodes = 0;           // SLURM_JOB_NUM_NODES (SLURM_NNODES)
    JobHolding holding;                // what it asked for and holds (launch/capacity.h)
};

// Reads SLURM_JOB_ID, SLURMD_NODENAME, SLURM_JOB_NUM_NODES, the task counts the job asked
// for (SLURM_NTASKS_PER_NODE, SLURM_NTASKS), and what it holds: SLURM_JOB_CPUS_PER_NODE (the
// smallest node), SLURM_GPUS_ON_NODE (the batch host's) and SLURM_MEM_PER_NODE or
// SLURM_MEM_PER_CPU. Missing variables leave zeros; malformed ones are errors naming the
// variable.
Result<Allocation> allocation_from_env(GetEnv get);

// The suggested coordinator member id of a rank: "u<UNIT>.s<SLOT>" (unique within a job because
// unit ids are never reused).
std::string member_id(std::uint32_t unit, std::uint32_t slot);

// Task `procid` of a step launched for `units` (in task order, unit_size tasks each):
// its unit id and slot. Errors when procid is out of range.
Result<std::pair<std::uint32_t, std::uint32_t>> task_unit(const std::vector<std::uint32_t> &units,
                                                          std::uint32_t unit_size,
                                                          std::uint32_t procid);
// "0,1,2" and back; parsing is strict (decimal ids, no empty items, at most kMaxUnits items).
std::string format_unit_list(const std::vector<std::uint32_t> &units);
Result<std::vector<std::uint32_t>> parse_unit_list(const std::string &text);

// Splits --srun-args the way a shell would split a simple word list: blanks separate words,
// single quotes keep everything literally, double quotes keep blanks (backslash escapes " and
// \ inside them and any character outside). No expansion of any kind. Refuses the options
// omni-launch sets itself (-n/--ntasks, -N/--nodes, --mpi, -J/--job-name, -k/--no-kill,
// --export), naming the offending word.
Result<std::vector<std::string>> split_srun_args(const std::string &text);
// The same for --satellite-args (sbatch options of satellite jobs), refusing what omni-launch
// sets itself there: -n/--ntasks, -N/--nodes, -J/--job-name, --export, --wrap, --parsable.
Result<std::vector<std::string>> split_sbatch_args(const std::string &text);

// How a unit's step starts its ranks (omni-launch --mpi, else OMNI_LAUNCH_MPI, else auto):
//   pmix  srun --mpi=pmix: each step is a PMIx namespace; ranks learn their step rank through
//         PMIx, and a unit's model-parallel groups wire up through it (runtime/mp_wireup.h).
//   none  srun --mpi=none: no PMI at all. Nothing is lost: the per-task shim gives each rank
//         its unit and slot from SLURM_PROCID, and the model-parallel groups wire up through
//         the coordinator (OMNI_MP_WIREUP=auto picks it where a process has no PMIx). For a
//         Slurm built without mpi/pmix (Debian unstable's 26.05.5) or sites that run none.
//   auto  pmix when `srun --mpi=list` offers it, else none.
inline constexpr const char *kEnvLaunchMpi = "OMNI_LAUNCH_MPI";
inline constexpr const char *kMpiAuto = "auto", *kMpiPmix = "pmix", *kMpiNone = "none";
// "auto", "pmix" or "none"; else an error naming `what` (the option or variable), the value
// and what was expected.
Result<std::string> parse_mpi_mode(const std::string &text, const std::string &what);
// Whether `srun --mpi=list`'s output offers mpi/pmix: a plugin line "pmix" (or a versioned
// "pmix_vN"), as Slurm 22.05 through 26.05 print them (src/common/plugrack.c).
bool mpi_list_offers_pmix(const std::string &text);

struct StepSpec {
    std::string srun = "srun";           // the srun program
    std::string mpi = kMpiPmix;          // srun --mpi=: pmix or none (resolved, never auto)
    std::vector<std::string> extra;      // split_srun_args(--srun-args)
    std::string self;                    // absolute path of omni-launch (the per-task shim)
    std::vector<std::string> program;    // PROGRAM ARGS
    std::uint32_t tasks = 0;             // the unit size
    std::uint32_t nodes = 0;             // Capacity::nodes_per_unit; 0: let srun decide
    std::string name;                    // step name (-J): "omni-u<UNIT>"
};

// One srun step per unit: a unit that leaves ends its step, so Slurm really frees its CPUs
// and GPUs for a later grow (a step's resources are released only when all its tasks end),
// and a step that fails names exactly the unit that is lost. Ranks of one unit share a step
// and so a PMIx namespace; across units the coordinator is the channel. How many units run
// at once and what each step asks for: launch/capacity.h.

// The argv of one unit's step:
//   srun --mpi=MPI --no-kill --kill-on-bad-exit=0 --export=ALL -J NAME -n T [-N NODES]
//        EXTRA... SELF --exec-task -- PROGRAM ARGS
// --no-kill: a lost node must not take the step down before the coordinator has turned the
// loss into an unplanned shrink. --kill-on-bad-exit=0: the launcher, not srun, decides what
// a failed rank means. MPI: spec.mpi, always explicit, so that a site's MpiDefault (or a
// user's SLURM_MPI_TYPE) never decides how the ranks meet.
std::vector<std::string> srun_argv(const StepSpec &spec);

// Variables of the batch step that srun would read as options of every step and that
// conflict with the step shape omni-launch sets (-n, -N): removed from the steps' environment.
const std::vector<std::string> &step_env_removed();

// A command line for display (--dry-run, logs): words quoted for a POSIX shell where needed.
std::string shell_join(const std::vector<std::string> &argv);

}  // namespace omni::launcher

#endif
