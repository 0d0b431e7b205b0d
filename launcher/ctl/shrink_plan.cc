// omni-ctl shrink's choice; see ctl/shrink_plan.h.
#include "ctl/shrink_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace omni::launcher {
namespace {

std::string u(std::uint64_t v) { return std::to_string(v); }

// Fills release/keep: the job's nodes (batch host aside) where every unit leaves.
void split_nodes(const ShrinkInput &in, ShrinkPlan &plan) {
    std::set<std::uint32_t> leaving(plan.leave.begin(), plan.leave.end());
    std::map<std::string, bool> stays, hosts_leaver;
    for (const auto &[unit, node] : in.placements) {
        if (leaving.count(unit)) hosts_leaver[node] = true;
        else stays[node] = true;
    }
    for (const auto &node : in.job_nodes) {
        if (node != in.batch_host && hosts_leaver.count(node) && !stays.count(node))
            plan.release.push_back(node);
        else
            plan.keep.push_back(node);
    }
}

}  // namespace

Result<ShrinkPlan> plan_shrink_to(const ShrinkInput &in, std::uint32_t target) {
    const std::size_t now = in.units.size();
    if (target >= now)
        return make_error("shrink: --units " + u(target) + " is not below the job's " + u(now) +
                          " units (grow or reshape to add units)");
    if (target < in.min_units)
        return make_error("shrink: --units " + u(target) + " is below the elastic minimum " +
                          u(in.min_units));
    std::size_t need = now - target;
    std::set<std::uint32_t> current(in.units.begin(), in.units.end()), chosen;
    // Units per node (of the current generation only).
    std::map<std::string, std::set<std::uint32_t>> on_node;
    for (const auto &[unit, node] : in.placements)
        if (current.count(unit)) on_node[node].insert(unit);
    std::vector<std::string> order;
    for (const auto &[node, units] : on_node)
        if (node != in.batch_host) order.push_back(node);
    std::sort(order.begin(), order.end(), [&](const std::string &a, const std::string &b) {
        const auto &ua = on_node[a], &ub = on_node[b];
        if (ua.size() != ub.size()) return ua.size() < ub.size();
        return *ua.rbegin() > *ub.rbegin();  // the node of the newest unit first
    });
    for (const auto &node : order) {
        std::vector<std::uint32_t> add;
        for (auto unit : on_node[node])
            if (!chosen.count(unit)) add.push_back(unit);
        if (add.empty() || add.size() > need - chosen.size()) continue;
        chosen.insert(add.begin(), add.end());
        if (chosen.size() == need) break;
    }
    for (auto it = current.rbegin(); it != current.rend() && chosen.size() < need; ++it)
        chosen.insert(*it);
    ShrinkPlan plan;
    plan.target = target;
    plan.leave.assign(chosen.begin(), chosen.end());
    split_nodes(in, plan);
    return plan;
}

Result<ShrinkPlan> plan_shrink_nodes(const ShrinkInput &in, const std::vector<std::string> &nodes) {
    if (nodes.empty()) return make_error("shrink: --nodes names no node");
    std::set<std::string> named;
    for (const auto &node : nodes) {
        if (!named.insert(node).second) return make_error("shrink: node '" + node + "' is named twice");
        if (std::find(in.job_nodes.begin(), in.job_nodes.end(), node) == in.job_nodes.end())
            return make_error("shrink: node '" + node + "' is not one of the job's nodes");
        if (node == in.batch_host)
            return make_error("shrink: node '" + node +
                              "' is the job's batch host, where omni-launch runs; it cannot be released");
    }
    std::set<std::uint32_t> current(in.units.begin(), in.units.end()), chosen;
    for (const auto &[unit, node] : in.placements)
        if (named.count(node) && current.count(unit)) chosen.insert(unit);
    const std::size_t left = in.units.size() - chosen.size();
    if (left < in.min_units)
        return make_error("shrink: releasing those nodes would leave " + u(left) +
                          " unit(s), below the elastic minimum " + u(in.min_units));
    ShrinkPlan plan;
    plan.target = static_cast<std::uint32_t>(left);
    plan.leave.assign(chosen.begin(), chosen.end());
    for (const auto &node : in.job_nodes)
        (named.count(node) ? plan.release : plan.keep).push_back(node);
    return plan;
}

}  // namespace omni::launcher
