// The elastic policy of a job submitted with --omni-policy=auto: when omni-launch grows the
// job into idle nodes and when it gives nodes back to a waiting job of higher priority. A
// pure state machine (no Slurm, no clock of its own): omni-launch feeds it what it read of the
// job and the queue every `interval` seconds and carries out what it decides.
//
// What it wants, from one look:
//  - shrink, when a waiting job of strictly higher priority than ours, in the job's partition,
//    would start with nodes the job can give back: it needs more nodes than are idle, and the
//    difference is within what the job holds above its elastic minimum (never the batch
//    host's units). It gives back just the units that free those nodes; among several such
//    jobs, the one of highest priority.
//  - grow, when the idle nodes fit whole units and no waiting job of higher or equal priority
//    would start sooner (Slurm orders by priority; such a job needs those nodes), up to the
//    elastic maximum.
//  - nothing, otherwise. Only jobs that wait for nodes count (reason Resources, Priority or
//    None): a job held, waiting on a dependency or a limit would not start on our nodes.
// When it acts (hysteresis): a wish must hold at every look for grow_after (shrink_after)
// seconds, and the job's last resize of any kind, and the policy's own last grow or shrink
// request (a grow withdrawn before it applied counts), must be grow_cooldown
// (shrink_cooldown) seconds ago. A change in flight (a grow, shrink or reshape not applied yet) suspends it and
// restarts the wait. A grow the policy asked for whose satellite job has not started is
// withdrawn at once when a waiting job of higher or equal priority wants nodes: it must not
// find our satellite taking them.
#ifndef OMNI_LAUNCHER_LAUNCH_POLICY_H
#define OMNI_LAUNCHER_LAUNCH_POLICY_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/job_options.h"
#include "slurmjob/queue.h"

namespace omni::launcher {

struct PolicyJob {
    std::uint32_t units = 0;              // in the current generation
    std::uint32_t min_units = 1, max_units = 1;
    std::uint32_t nodes_per_unit = 1;     // a unit spans this many nodes, or
    std::uint32_t units_per_node = 1;     // this many units share a node
    std::uint64_t priority = 0;           // Slurm's priority of the job
    bool busy = false;                    // a change is in flight
    // The target of the policy's own grow while its satellite job waits to start (once it
    // runs, the nodes are the job's and the grow is no longer withdrawn).
    std::optional<std::uint32_t> policy_grow;
    std::optional<std::int64_t> last_resize_ms;  // when the size last changed (none: never)
};

struct PolicyQueue {
    std::vector<std::string> idle_nodes;  // in the job's partition
    std::vector<PendingJob> pending;      // other jobs of the partition (not our satellites)
};

enum class PolicyAction { None, Grow, Shrink, Withdraw };
const char *policy_action_name(PolicyAction a);  // "none", "grow", "shrink", "withdraw"

struct PolicyDecision {
    PolicyAction action = PolicyAction::None;  // what to do now
    std::uint32_t target = 0;  // the units after a grow or shrink; the job's units otherwise
    std::string reason;        // why, in words, naming the jobs and nodes it saw
    // Worth a line in the log and the events file: an action, or a change in what the policy
    // wants or waits for (not every look).
    bool report = false;
    // A waiting job of higher (for a grow: or equal) priority wants nodes: what withdraws the
    // policy's own grow in flight.
    bool contended = false;
};

// What the policy wants from one look, without hysteresis: Grow, Shrink or None with its
// target and reason.
PolicyDecision policy_wish(const PolicyJob &job, const PolicyQueue &queue);

class ElasticPolicy {
public:
    explicit ElasticPolicy(const PolicyOptions &opts) : opts_(opts) {}
    // One look at time now_ms (a monotonic clock, the one last_resize_ms is on).
    PolicyDecision decide(std::int64_t now_ms, const PolicyJob &job, const PolicyQueue &queue);
    const PolicyOptions &options() const { return opts_; }

private:
    PolicyOptions opts_;
    PolicyAction wish_ = PolicyAction::None;  // the wish being held, since wish_since_
    std::int64_t wish_since_ = 0;
    std::optional<std::int64_t> acted_ms_;  // the last grow or shrink it asked for
    std::string reported_;  // the key of the last report, so that a state is told once
};

}  // namespace omni::launcher

#endif
