// How many ranks and units a job's allocation runs at once, and what each unit's srun step
// asks for so that no step of the job waits on another one of the job. The one place that
// decides it: omni-launch's start and --dry-run, its grows (satellite jobs and expansion
// helpers are sized by it) and its elastic policy all read a Capacity. Pure: the job's
// holding comes in as numbers (from the batch environment, or from scontrol's per-node
// details), so every rule here is unit-tested.
//
// Why it matters: on Slurm 22.05 and later a step started without --exact and without a GRES
// request of its own gets every CPU and every GPU the job holds on its nodes, and a second
// step on such a node waits ("Requested nodes are busy") until the first ends. A unit is a
// step of its own (launch/plan.h), so a job that starts more units than its nodes run at
// once, or whose units share a node without each asking for its share, stalls at start.
#ifndef OMNI_LAUNCHER_LAUNCH_CAPACITY_H
#define OMNI_LAUNCHER_LAUNCH_CAPACITY_H

#include <cstdint>
#include <string>
#include <vector>

#include "slurmjob/job.h"

namespace omni::launcher {

// What the job holds on one node: CPUs, GPUs (GRES gpu) and memory in MB (0: not tracked).
struct NodeShare {
    std::uint32_t cpus = 0, gpus = 0;
    std::uint64_t mem_mb = 0;
};

// The smallest of the job's nodes as `scontrol show job -d` lists them, each resource on its
// own (cpus 0 where the details list no node).
NodeShare smallest_node(const JobInfo &job);

// The job as far as its capacity goes.
struct JobHolding {
    std::uint32_t nodes = 0;           // 0: not inside a job (nothing is known)
    std::uint32_t tasks_per_node = 0;  // ranks per node the job asked for (--ntasks-per-node); 0: none
    std::uint32_t tasks = 0;           // ranks the job asked for (-n/--ntasks); 0: none
    NodeShare node;                    // the smallest of its nodes (cpus 0: unknown)
};

// What the allocation runs at once, for units of a given size.
struct Capacity {
    std::uint32_t ranks_per_node = 0;  // 0: unknown (outside a job)
    std::uint32_t ranks = 0;           // on all its nodes
    std::uint32_t units = 0;           // whole units that run at once
    std::uint32_t units_per_node = 0;  // units that share a node (1: a unit has its node(s) alone)
    std::uint32_t nodes_per_unit = 0;  // nodes one unit's step spans (0: unknown, srun decides)
    std::string basis;                 // why, in words: "--ntasks-per-node=2", "2 CPUs a node", ...
};

// The ranks per node of a job:
//  - the ranks it asked for per node (--ntasks-per-node), or
//  - the ranks it asked for in all (--ntasks), spread over its nodes (rounded up per node),
//  - else what each node's resources allow: one rank per GPU where it holds GPUs, but no
//    more ranks than CPUs (each rank's step needs a CPU of its own); one rank per CPU
//    where it holds no GPU; one rank per node where even its CPUs are unknown.
// Units of N ranks: where N <= ranks per node, floor(ranks per node / N) units share each
// node; otherwise a unit spans ceil(N / ranks per node) nodes, and the job holds
// floor(nodes / that) of them. Never more units than its ranks allow in all.
Capacity job_capacity(std::uint32_t unit_size, const JobHolding &job);

// The capacity in words, for the log and --dry-run: "2 node(s) run 4 rank(s) at once (2 CPUs a
// node): 4 unit(s) of 1 rank(s), 2 a node".
std::string capacity_text(const Capacity &cap, std::uint32_t nodes, std::uint32_t unit_size);

// The srun options that give a unit's step its share of a node where several units share
// one (units_per_node > 1): each of the node's units gets the CPUs, GPUs and memory the job
// holds there divided by the units on it:
//   --exact --cpus-per-task=C [--gres=gpu:G] [--mem=MM]   (G and M for the unit's ranks)
// GPUs only where each rank gets at least one. Empty where units have their nodes alone,
// where the node's CPUs are unknown, or where `user_args` (--srun-args) sizes steps itself
// (--exact, -c/--cpus-per-task, --gres, --gpus*, --mem*): the user's choice wins.
std::vector<std::string> step_share_args(std::uint32_t unit_size, const Capacity &cap, const NodeShare &node,
                                         const std::vector<std::string> &user_args);

// The nodes a grow of `units` units asks Slurm for, and its ranks per node, so that the
// units run there at once as they do in the job (satellite jobs, expansion helpers):
// ceil(units / units_per_node) x nodes_per_unit nodes.
struct GrowShape {
    std::uint32_t nodes = 0;
    std::uint32_t tasks_per_node = 0;  // 0: leave it to Slurm
};
GrowShape grow_shape(std::uint32_t units, std::uint32_t unit_size, const Capacity &cap);

}  // namespace omni::launcher

#endif
