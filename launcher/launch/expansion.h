// Growing a job by Slurm's own job expansion: how omni-launch asks for it and when Slurm
// can give it.
//
// A grow "via expand" (omni-ctl grow --via expand, or --via auto where the job qualifies)
// asks Slurm for a helper allocation with `salloc --no-shell --dependency=expand:J` on nodes
// the job does not hold; once Slurm grants it, the helper gives its nodes to the job
// (merge_expansion in slurmjob/job.h) and the new units start there as joiners of the job's
// own allocation, like a grow inside it. Nothing runs in the helper (Slurm merges only a
// helper without steps), and it is named omni-exp-<job>, so that squeue lists it and
// omni-launch cancels it when the grow is withdrawn or the job ends.
//
// Slurm expands a job only under SchedulerParameters=permit_job_expansion, and cons_tres
// refuses to expand a job that holds GRES in every release. Its merge also drops the cores
// of the nodes it adds (select_plugin/select_omni.c), so steps fail there under
// task/affinity; select/omni repairs that. A job qualifies on a cluster with both, and
// without GRES (a CPU job: Gloo).
#ifndef OMNI_LAUNCHER_LAUNCH_EXPANSION_H
#define OMNI_LAUNCHER_LAUNCH_EXPANSION_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "slurmjob/job.h"

namespace omni::launcher {

struct ExpansionSpec {
    std::uint32_t main_job = 0;
    std::uint32_t nodes = 1;           // the nodes the new units need
    std::uint32_t tasks_per_node = 1;  // as the job's own nodes hold them
    std::string partition;             // the job's; empty: Slurm's default
    bool exclusive = false;            // the job has whole nodes
    std::vector<std::string> exclude;  // the job's nodes: the helper brings others
};

// "omni-exp-<main job>".
std::string expansion_job_name(std::uint32_t main_job);

// The helper's request: `salloc --no-shell --job-name=omni-exp-J --dependency=expand:J` with
// its nodes and tasks per node, the job's partition and exclusivity, and --exclude of the
// job's nodes.
std::vector<std::string> expansion_salloc_argv(const ExpansionSpec &spec);

// Why Slurm cannot grow `job` by expansion on this cluster, given `scontrol show config`'s
// SchedulerParameters and SelectType; nullopt when it can.
std::optional<std::string> expansion_refusal(const std::string &scheduler_parameters, const std::string &select_type,
                                             const JobInfo &job);

}  // namespace omni::launcher

#endif
