// spank/: task binding plan; see binding.h.
#include "binding.h"

#include <algorithm>
#include <set>

#include "common/parse.h"

namespace omni_spank {

namespace {

// "0,1,3" -> {0,1,3}; empty -> {}. Every item a small decimal (GPU indexes < 1024).
omni::Result<std::vector<unsigned>> index_list(std::string_view text, std::string_view what) {
    std::vector<unsigned> out;
    if (text.empty()) return out;
    std::size_t start = 0;
    while (start <= text.size()) {
        const auto comma = text.find(',', start);
        const auto item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
        auto v = omni::parse_uint(item, 0, 1023, what);
        if (!v) return omni::Error{v.error() + " (GPU UUIDs and MIG devices are not bound)"};
        out.push_back(static_cast<unsigned>(v.value()));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return out;
}

}  // namespace

omni::Result<std::vector<unsigned>> task_gpus(std::string_view cuda_visible,
                                              std::string_view slurm_gpus,
                                              std::string_view slurm_gpus_name) {
    auto visible = index_list(cuda_visible, "CUDA_VISIBLE_DEVICES");
    if (!visible) return visible;
    auto real = index_list(slurm_gpus, slurm_gpus_name);
    if (!real) return real;
    if (real.value().empty()) return visible;
    const auto &r = real.value();
    // Not renumbered: every visible index is one of the step's real ones.
    if (std::all_of(visible.value().begin(), visible.value().end(),
                    [&](unsigned v) { return std::find(r.begin(), r.end(), v) != r.end(); }))
        return visible;
    const auto &vis = visible.value();
    const bool step_rule = std::all_of(vis.begin(), vis.end(), [&](unsigned v) { return v < r.size(); });
    // Per-task binding: SLURM_STEP_GPUS holds only this task's GPUs, in its order.
    if (!step_rule && vis.size() == r.size()) return real;
    std::vector<unsigned> out;
    for (unsigned v : vis) {
        if (v >= r.size())
            return omni::make_error("CUDA_VISIBLE_DEVICES index " + std::to_string(v) + " is beyond " +
                                    std::string(slurm_gpus_name) + " '" +
                                    std::string(slurm_gpus.substr(0, 64)) + "'");
        out.push_back(r[v]);
    }
    return out;
}

namespace {

// /proc/mounts escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' &&
            s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

bool is_device_or_partition(std::string_view source, const std::string &name) {
    const std::string dev = "/dev/" + name;
    if (source.substr(0, dev.size()) != dev) return false;
    auto rest = source.substr(dev.size());
    if (rest.empty()) return true;
    if (rest[0] != 'p' || rest.size() < 2) return false;
    return std::all_of(rest.begin() + 1, rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string nvme_mount(const std::vector<std::string> &nvmes, std::string_view mounts) {
    for (const auto &name : nvmes) {
        std::size_t pos = 0;
        while (pos < mounts.size()) {
            auto end = mounts.find('\n', pos);
            if (end == std::string_view::npos) end = mounts.size();
            const auto line = mounts.substr(pos, end - pos);
            pos = end + 1;
            const auto sp1 = line.find(' ');
            if (sp1 == std::string_view::npos) continue;
            const auto sp2 = line.find(' ', sp1 + 1);
            if (is_device_or_partition(line.substr(0, sp1), name))
                return unescape_mount(line.substr(sp1 + 1, sp2 == std::string_view::npos
                                                                ? std::string_view::npos
                                                                : sp2 - sp1 - 1));
        }
    }
    return "";
}

const omni::hal::SiteNode *find_node(const omni::hal::SiteTopology &site, std::string_view name) {
    for (const auto &n : site.nodes)
        if (n.hostname == name) return &n;
    return nullptr;
}

omni::Result<Binding> plan_binding(const omni::hal::SiteNode &node,
                                   const std::vector<unsigned> &gpus,
                                   const std::vector<unsigned> &alloc_cores,
                                   std::string_view kind) {
    Binding b;
    if (gpus.empty()) {
        b.why_unbound = "the task has no GPU";
        return b;
    }
    for (unsigned g : gpus)
        if (g >= node.gpus.size())
            return omni::make_error("GPU " + std::to_string(g) + " of the task is not in the topology "
                                    "file's entry for " + node.hostname + " (it lists " +
                                    std::to_string(node.gpus.size()) + " GPUs)");
    const std::string k = (kind == "any" || kind.empty()) ? "node" : std::string(kind);
    auto dk = omni::hal::parse_domain_kind(k, "domain kind");
    if (!dk) return omni::Error{dk.error()};
    const auto &sets = node.domains[static_cast<std::size_t>(dk.value())];
    for (std::size_t d = 0; d < sets.size() && b.domain.empty(); ++d)
        if (std::find(sets[d].begin(), sets[d].end(), gpus[0]) != sets[d].end())
            b.domain = k + ":" + std::to_string(d);
    const auto &first = node.gpus[gpus[0]];
    b.nics = first.nics;
    b.nvmes = first.nvmes;
    for (const auto &name : b.nics)
        for (const auto &nic : node.nics)
            if (nic.name == name && nic.rdma) b.rdma_nics.push_back(name);

    std::set<unsigned> local;
    for (unsigned g : gpus) local.insert(node.gpus[g].cores.begin(), node.gpus[g].cores.end());
    std::set<unsigned> cpus;
    for (unsigned c : alloc_cores) {
        if (!local.count(c)) continue;
        if (c >= node.core_cpus.size())
            return omni::make_error("allocated core " + std::to_string(c) + " is not in the topology "
                                    "file's entry for " + node.hostname + " (it has " +
                                    std::to_string(node.core_cpus.size()) + " cores)");
        cpus.insert(node.core_cpus[c].begin(), node.core_cpus[c].end());
    }
    if (cpus.empty()) {
        b.why_unbound = "the job was allocated none of the cores local to GPU " +
                        std::to_string(gpus[0]) + " (" + omni::hal::format_cpulist(first.cores) +
                        ") on " + node.hostname;
        return b;
    }
    b.cpus.assign(cpus.begin(), cpus.end());
    return b;
}

}  // namespace omni_spank
