// What omni-launch's elastic policy (launch/policy.h) reads of the cluster around its job,
// through Slurm's commands: the jobs waiting in a partition and the partition's idle nodes.
// Two calls a look (squeue, sinfo), each bounded by a timeout; both run as the job's user,
// who sees what Slurm lets every user see of the queue.
#ifndef OMNI_LAUNCHER_SLURM_QUEUE_H
#define OMNI_LAUNCHER_SLURM_QUEUE_H

#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

struct PendingJob {
    std::uint32_t job_id = 0;
    std::uint64_t priority = 0;  // Slurm's, as squeue %Q prints it
    std::uint32_t nodes = 0;     // the node count it asks for (its minimum)
    std::string reason;          // why it waits: Resources, Priority, Dependency, ...
};

// Parses `squeue --noheader --states=PD --format="%A %Q %D %r"`: one job a line. A line that
// does not hold four fields of that form is an error naming the line.
Result<std::vector<PendingJob>> parse_pending_jobs(const std::string &text);

// The pending jobs of `partition` (squeue --states=PD --partition).
Result<std::vector<PendingJob>> pending_jobs(const std::string &partition, std::int64_t timeout_ms);

// Parses `sinfo --noheader --Node --format=%N`: one node name a line, each checked as a host
// name; duplicates (a node listed once per partition) are dropped, the order kept.
Result<std::vector<std::string>> parse_node_names(const std::string &text);

// The nodes of `partition` that are idle: no job on them, not drained or down
// (sinfo --states=idle).
Result<std::vector<std::string>> idle_nodes(const std::string &partition, std::int64_t timeout_ms);

}  // namespace omni::launcher

#endif
