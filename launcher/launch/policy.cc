// The elastic policy; see launch/policy.h.
#include "launch/policy.h"

#include <algorithm>

namespace omni::launcher {
namespace {

std::string u(std::uint64_t v) { return std::to_string(v); }
std::string plural(std::uint64_t n, const char *word) { return u(n) + " " + word + (n == 1 ? "" : "s"); }

// A job that waits for nodes, not for a dependency, a hold, a limit or a time.
bool waits_for_nodes(const PendingJob &j) {
    return j.reason == "Resources" || j.reason == "Priority" || j.reason == "None";
}

// The units to give back so that `nodes` nodes are free of them.
std::uint64_t units_for_nodes(const PolicyJob &job, std::uint64_t nodes) {
    if (job.nodes_per_unit > 1) return (nodes + job.nodes_per_unit - 1) / job.nodes_per_unit;
    return nodes * std::max<std::uint32_t>(1, job.units_per_node);
}

// Units the idle nodes hold.
std::uint64_t units_on_nodes(const PolicyJob &job, std::uint64_t nodes) {
    if (job.nodes_per_unit > 1) return nodes / job.nodes_per_unit;
    return nodes * std::max<std::uint32_t>(1, job.units_per_node);
}

}  // namespace

const char *policy_action_name(PolicyAction a) {
    switch (a) {
        case PolicyAction::Grow: return "grow";
        case PolicyAction::Shrink: return "shrink";
        case PolicyAction::Withdraw: return "withdraw";
        default: return "none";
    }
}

PolicyDecision policy_wish(const PolicyJob &job, const PolicyQueue &queue) {
    PolicyDecision d;
    d.target = job.units;
    std::vector<PendingJob> waiting;
    for (const auto &j : queue.pending)
        if (waits_for_nodes(j)) waiting.push_back(j);
    std::sort(waiting.begin(), waiting.end(), [](const PendingJob &a, const PendingJob &b) {
        return a.priority != b.priority ? a.priority > b.priority : a.job_id < b.job_id;
    });
    const std::uint64_t idle = queue.idle_nodes.size();
    // Shrink: walk the waiting jobs above ours in Slurm's order; the idle nodes go to the
    // first ones that fit in them, the first one that does not fit but would with our nodes
    // gets them.
    // The batch host's units never leave (omni-launch runs there).
    const std::uint64_t floor = std::max<std::uint64_t>(job.min_units, std::max<std::uint32_t>(1, job.units_per_node));
    const std::uint64_t spare = job.units > floor ? job.units - floor : 0;
    std::uint64_t free = idle;
    for (const auto &j : waiting) {
        if (j.priority <= job.priority) break;
        if (j.nodes <= free) {
            free -= j.nodes;
            continue;
        }
        const std::uint64_t need = j.nodes - free;
        const std::uint64_t give = units_for_nodes(job, need);
        if (give > spare) continue;  // our nodes alone would not start it
        d.action = PolicyAction::Shrink;
        d.contended = true;
        d.target = static_cast<std::uint32_t>(job.units - give);
        d.reason = "job " + u(j.job_id) + " (priority " + u(j.priority) + ", above this job's " +
                   u(job.priority) + ") waits for " + plural(j.nodes, "node") + " (" + j.reason + "), " +
                   u(free) + " idle for it: giving back " + plural(give, "unit") + " frees " +
                   plural(need, "node");
        return d;
    }
    if (job.units >= job.max_units) {
        d.reason = "the job is at its elastic maximum of " + plural(job.max_units, "unit");
        return d;
    }
    for (const auto &j : waiting)
        if (j.priority >= job.priority) {
            d.contended = true;
            d.reason = "job " + u(j.job_id) + " (priority " + u(j.priority) + ", not below this job's " +
                       u(job.priority) + ") waits for " + plural(j.nodes, "node") + " (" + j.reason +
                       "): it starts before a grow would";
            return d;
        }
    const std::uint64_t fit = units_on_nodes(job, idle);
    if (fit == 0) {
        d.reason = idle == 0 ? "no idle node in the partition"
                             : plural(idle, "idle node") + " fit no whole unit of " + plural(job.nodes_per_unit, "node");
        return d;
    }
    d.action = PolicyAction::Grow;
    d.target = static_cast<std::uint32_t>(std::min<std::uint64_t>(job.max_units, job.units + fit));
    d.reason = plural(idle, "idle node") + " in the partition fit " + plural(fit, "unit") +
               " and no job of higher or equal priority waits for nodes";
    return d;
}

PolicyDecision ElasticPolicy::decide(std::int64_t now_ms, const PolicyJob &job, const PolicyQueue &queue) {
    PolicyDecision wish = policy_wish(job, queue);
    if (job.policy_grow && wish.contended) {
        // Our grow whose satellite still waits: its satellite would take nodes a waiting job
        // of higher or equal priority needs. (No idle node alone is no reason: our own
        // satellite may have just taken them.)
        PolicyDecision d;
        d.action = PolicyAction::Withdraw;
        d.target = job.units;
        d.report = true;
        d.reason = "withdrawing the grow to " + plural(*job.policy_grow, "unit") + ": " + wish.reason;
        wish_ = PolicyAction::None;
        reported_.clear();
        return d;
    }
    if (job.busy) {
        // A change in flight: what the queue shows now says little (our satellite waits, our
        // released nodes are not idle yet). The wait starts again after it.
        wish_ = PolicyAction::None;
        return PolicyDecision{PolicyAction::None, job.units, "a change is in flight", false};
    }
    if (wish.action != wish_) {
        wish_ = wish.action;
        wish_since_ = now_ms;
    }
    const std::string want = std::string(policy_action_name(wish.action)) + ":" + u(wish.target);
    if (wish.action == PolicyAction::None) {
        // Told once when a wish goes away, not for every look at a quiet queue.
        wish.report = !reported_.empty() && reported_ != want;
        if (wish.report) wish.reason = "no resize wanted: " + wish.reason;
        if (wish.report || reported_.empty()) reported_ = want;
        return wish;
    }
    const bool grow = wish.action == PolicyAction::Grow;
    const std::int64_t after_ms = static_cast<std::int64_t>(grow ? opts_.grow_after : opts_.shrink_after) * 1000;
    const std::int64_t cooldown_ms = static_cast<std::int64_t>(grow ? opts_.grow_cooldown : opts_.shrink_cooldown) * 1000;
    const std::int64_t held = now_ms - wish_since_;
    std::optional<std::int64_t> last = job.last_resize_ms;
    if (acted_ms_ && (!last || *acted_ms_ > *last)) last = acted_ms_;
    const std::int64_t cool = last ? now_ms - *last : cooldown_ms;
    const std::string verb = grow ? "grow" : "shrink";
    if (held >= after_ms && cool >= cooldown_ms) {
        wish.report = true;
        wish.reason = verb + " " + u(job.units) + " -> " + u(wish.target) + " units: " + wish.reason;
        wish_ = PolicyAction::None;
        acted_ms_ = now_ms;
        reported_.clear();
        return wish;
    }
    // Waiting: say for what, once per state.
    std::string wait;
    std::string key = want;
    if (held < after_ms) {
        wait = "it must hold " + u(static_cast<std::uint64_t>((after_ms - held + 999) / 1000)) + " s more (" +
               verb + "_after=" + u(after_ms / 1000) + ")";
        key += ":after";
    } else {
        wait = "the last resize (or request) was " + u(static_cast<std::uint64_t>(cool / 1000)) + " s ago (" + verb +
               "_cooldown=" + u(cooldown_ms / 1000) + ")";
        key += ":cooldown";
    }
    PolicyDecision d;
    d.target = job.units;
    d.report = key != reported_;
    d.reason = "wants to " + verb + " to " + plural(wish.target, "unit") + " (" + wish.reason + "); " + wait;
    reported_ = key;
    return d;
}

}  // namespace omni::launcher
