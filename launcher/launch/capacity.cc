// A job's capacity in ranks and units, and each unit step's share; see launch/capacity.h.
#include "launch/capacity.h"

#include <algorithm>

namespace omni::launcher {
namespace {

std::string plural(std::uint64_t n, const std::string &word) {
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

NodeShare smallest_node(const JobInfo &job) {
    NodeShare n;
    if (job.cpus.empty()) return n;
    n.cpus = *std::min_element(job.cpus.begin(), job.cpus.end());
    if (!job.gpus.empty()) n.gpus = *std::min_element(job.gpus.begin(), job.gpus.end());
    if (!job.mem_mb.empty()) n.mem_mb = *std::min_element(job.mem_mb.begin(), job.mem_mb.end());
    return n;
}

Capacity job_capacity(std::uint32_t unit_size, const JobHolding &job) {
    Capacity c;
    if (job.nodes == 0 || unit_size == 0) return c;
    const NodeShare &n = job.node;
    std::uint64_t ranks = 0;
    if (job.tasks_per_node > 0) {
        c.ranks_per_node = job.tasks_per_node;
        ranks = std::uint64_t(job.nodes) * job.tasks_per_node;
        c.basis = "--ntasks-per-node=" + std::to_string(job.tasks_per_node);
    } else if (job.tasks > 0) {
        c.ranks_per_node = static_cast<std::uint32_t>((std::uint64_t(job.tasks) + job.nodes - 1) / job.nodes);
        ranks = job.tasks;
        c.basis = "--ntasks=" + std::to_string(job.tasks) + " on " + plural(job.nodes, "node");
    } else if (n.gpus > 0 && n.cpus > 0 && n.cpus < n.gpus) {
        c.ranks_per_node = n.cpus;
        c.basis = plural(n.cpus, "CPU") + " a node for " + plural(n.gpus, "GPU") +
                  ": a rank needs a CPU of its own; --ntasks-per-node or --cpus-per-gpu ask for more";
    } else if (n.gpus > 0) {
        c.ranks_per_node = n.gpus;
        c.basis = plural(n.gpus, "GPU") + " a node";
    } else if (n.cpus > 0) {
        c.ranks_per_node = n.cpus;
        c.basis = plural(n.cpus, "CPU") + " a node";
    } else {
        c.ranks_per_node = 1;
        c.basis = "one rank a node (the job's CPUs per node are unknown)";
    }
    if (ranks == 0) ranks = std::uint64_t(job.nodes) * c.ranks_per_node;
    c.ranks = static_cast<std::uint32_t>(std::min<std::uint64_t>(ranks, UINT32_MAX));
    std::uint64_t units;
    if (unit_size <= c.ranks_per_node) {
        c.units_per_node = c.ranks_per_node / unit_size;
        c.nodes_per_unit = 1;
        units = std::uint64_t(job.nodes) * c.units_per_node;
    } else {
        c.units_per_node = 1;
        c.nodes_per_unit = (unit_size + c.ranks_per_node - 1) / c.ranks_per_node;
        units = job.nodes / c.nodes_per_unit;
    }
    c.units = static_cast<std::uint32_t>(std::min<std::uint64_t>(units, ranks / unit_size));
    return c;
}

std::string capacity_text(const Capacity &cap, std::uint32_t nodes, std::uint32_t unit_size) {
    if (cap.ranks_per_node == 0) return "the allocation is unknown (not inside a Slurm job)";
    std::string out = plural(nodes, "node") + " run " + plural(cap.ranks, "rank") + " at once (" + cap.basis +
                      "): " + plural(cap.units, "unit") + " of " + plural(unit_size, "rank");
    if (cap.units_per_node > 1) out += ", " + std::to_string(cap.units_per_node) + " a node";
    if (cap.nodes_per_unit > 1) out += ", " + plural(cap.nodes_per_unit, "node") + " a unit";
    return out;
}

std::vector<std::string> step_share_args(std::uint32_t unit_size, const Capacity &cap, const NodeShare &node,
                                         const std::vector<std::string> &user_args) {
    if (cap.units_per_node <= 1 || unit_size == 0 || node.cpus == 0) return {};
    for (const auto &arg : user_args) {
        for (const char *opt : {"--exact", "--cpus-per-task", "--gres", "--gpus", "--mem"})
            if (arg.rfind(opt, 0) == 0) return {};
        if (arg.rfind("-c", 0) == 0) return {};
    }
    // The ranks the node's units run: the divisor of every share.
    const std::uint32_t ranks = cap.units_per_node * unit_size;
    std::vector<std::string> out = {"--exact",
                                    "--cpus-per-task=" + std::to_string(std::max<std::uint32_t>(1, node.cpus / ranks))};
    if (node.gpus >= ranks) out.push_back("--gres=gpu:" + std::to_string(node.gpus / ranks * unit_size));
    if (node.mem_mb > 0) out.push_back("--mem=" + std::to_string(node.mem_mb / ranks * unit_size) + "M");
    return out;
}

GrowShape grow_shape(std::uint32_t units, std::uint32_t unit_size, const Capacity &cap) {
    GrowShape g;
    if (cap.ranks_per_node == 0) {
        // Nothing known of the job: a node per unit, as many tasks there as the unit has.
        g.nodes = units;
        return g;
    }
    const std::uint32_t per = std::max<std::uint32_t>(1, cap.units_per_node);
    g.nodes = (units + per - 1) / per * std::max<std::uint32_t>(1, cap.nodes_per_unit);
    g.tasks_per_node = cap.nodes_per_unit > 1 ? (unit_size + cap.nodes_per_unit - 1) / cap.nodes_per_unit
                                              : per * unit_size;
    return g;
}

}  // namespace omni::launcher
