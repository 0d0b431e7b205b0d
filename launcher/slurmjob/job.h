// What omni-launch and omni-ctl learn of a job from Slurm and ask of it, through Slurm's own
// commands (scontrol, squeue): their output is the same across Slurm releases where
// libslurm's ABI is not, and they run as the calling user, so Slurm decides what is allowed.
//
// A job's nodes change while it runs (scontrol update NumNodes=/NodeList=, an expansion):
// SLURM_JOB_NODELIST and the other variables of the batch step then describe the job as it
// started. Whoever starts a step after a change reads the job again (load_job) and gives srun
// the variables scontrol's resize script would set (allocation_environment).
#ifndef OMNI_LAUNCHER_SLURM_JOB_H
#define OMNI_LAUNCHER_SLURM_JOB_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

struct JobInfo {
    std::uint32_t job_id = 0;
    std::string state;                     // JobState: RUNNING, PENDING, ...
    std::string user;                      // UserId's name
    std::uint32_t uid = 0;
    std::string batch_host;                // where the batch script (and omni-launch) runs
    std::string node_list;                 // NodeList as Slurm wrote it ("n[1-4]")
    std::vector<std::string> nodes;        // expanded, in Slurm's order
    std::vector<std::uint32_t> cpus;       // allocated CPUs per node, in `nodes` order
    std::vector<std::uint32_t> gpus;       // allocated GPUs per node (GRES gpu), same order
    std::vector<std::uint64_t> mem_mb;     // allocated memory per node in MB (0: not tracked)
    std::string partition;                 // Partition
    std::string tres_per_node;             // TresPerNode ("gres:gpu:2"), empty when none
    bool exclusive = false;                // OverSubscribe=NO: whole nodes
    bool preempted = false;                // PreemptTime is set: Slurm is preempting it
    std::uint64_t priority = 0;            // Priority
    // A node-count shrink that job_submit/omni deferred to omni-launch: the value of the
    // "omni-release=" word of SystemComment, "HOSTLIST@UNIXTIME" (empty: none).
    std::string release_request;
};

// Parses the multi-line output of `scontrol show job -d J`. Fields are taken only where a line
// starts with them, so a job name or comment cannot pose as one. Errors name the field.
Result<JobInfo> parse_scontrol_job(const std::string &text, std::uint32_t job_id);

// Runs `scontrol show job -d J` (bounded by timeout_ms) and parses it.
Result<JobInfo> load_job(std::uint32_t job_id, std::int64_t timeout_ms);

// Slurm's compressed CPU counts: {2,2,2,1} -> "2(x3),1" (SLURM_JOB_CPUS_PER_NODE's form).
std::string compress_counts(const std::vector<std::uint32_t> &counts);
// And back: "2(x3),1" -> {2, 2, 2, 1}, at most `max_items` counts, each at most UINT32_MAX.
// Errors name `what` (the variable or field it came from).
Result<std::vector<std::uint32_t>> expand_counts(std::string_view text, std::uint32_t max_items,
                                                 std::string_view what);

// The variables srun reads for the job's shape, for a step started after the job changed
// size: SLURM_JOB_NODELIST, SLURM_NODELIST, SLURM_JOB_NUM_NODES, SLURM_NNODES and
// SLURM_JOB_CPUS_PER_NODE as the job is now; and, in `unset`, the task counts of the batch
// step that no longer hold (SLURM_NTASKS, SLURM_NPROCS, SLURM_TASKS_PER_NODE). The same as
// scontrol's slurm_job_J_resize.sh, without a file to source.
std::map<std::string, std::string> allocation_environment(const JobInfo &job,
                                                          std::vector<std::string> &unset);

// Removes nodes from a running job: `scontrol update JobId=J NodeList=<keep>`. The batch
// host must be in `keep`. Slurm ends the job's steps on the released nodes, so the caller
// first waits for them to end. scontrol runs without SLURM_JOB_ID/SLURM_JOBID, so that it
// writes no resize script into the working directory.
Status release_nodes(std::uint32_t job_id, const std::vector<std::string> &keep,
                     std::int64_t timeout_ms);

// Slurm's job expansion, second half: the helper job `helper_id` (submitted with
// --dependency=expand:J and now running, with no step) gives its nodes to job `job_id`:
// `scontrol update JobId=HELPER NumNodes=0`, then `scontrol update JobId=J NumNodes=ALL`.
// Needs SchedulerParameters=permit_job_expansion. The errors name the update that failed.
Status merge_expansion(std::uint32_t job_id, std::uint32_t helper_id, std::int64_t timeout_ms);
// Submits a batch job: `sbatch --parsable ARGS SCRIPT`. sbatch gets this process's
// environment without the names in `unset` and with `set` applied; the job gets what sbatch
// got (secrets travel this way: never on a command line). Returns the job id.
Result<std::uint32_t> submit_batch(const std::vector<std::string> &args, const std::string &script,
                                   const std::map<std::string, std::string> &set,
                                   const std::vector<std::string> &unset, std::int64_t timeout_ms);

// The caller's jobs named `name` that have not ended (squeue --me --name, its default
// states): job id -> state (PENDING, RUNNING, COMPLETING, ...).
Result<std::map<std::uint32_t, std::string>> live_jobs_named(const std::string &name,
                                                              std::int64_t timeout_ms);

// scancel of `ids` (none: nothing to do). Jobs that already ended are not an error.
Status cancel_jobs(const std::vector<std::uint32_t> &ids, std::int64_t timeout_ms);

// The value of KEY in `scontrol show config`'s text ("KEY = VALUE" lines; "(null)" is an
// empty value); nullopt when no line has KEY.
std::optional<std::string> parse_config_value(const std::string &text, const std::string &key);
// Runs `scontrol show config` and returns KEY's value; an error when it has none.
Result<std::string> config_value(const std::string &key, std::int64_t timeout_ms);

// The cluster's name (ClusterName in `scontrol show config`).
Result<std::string> cluster_name(std::int64_t timeout_ms);

// The names of the job's running steps (squeue --steps), e.g. "omni-u3".
Result<std::vector<std::string>> job_step_names(std::uint32_t job_id, std::int64_t timeout_ms);

}  // namespace omni::launcher

#endif
