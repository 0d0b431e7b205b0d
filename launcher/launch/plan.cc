// omni-launch's pure planning; see launch/plan.h.
#include "launch/plan.h"

#include <algorithm>

#include "common/parse.h"
#include "coord/protocol.h"

namespace omni::launcher {
namespace {

Result<std::uint64_t> env_uint(GetEnv get, const char *name, std::uint64_t max) {
    const char *v = get(name);
    if (!v || !*v) return std::uint64_t{0};
    return parse_uint(v, 0, max, name);
}

}  // namespace

Result<Allocation> allocation_from_env(GetEnv get) {
    Allocation a;
    auto job = env_uint(get, "SLURM_JOB_ID", UINT32_MAX);
    if (!job) return Error{job.error()};
    a.job_id = static_cast<std::uint32_t>(job.value());
    if (const char *n = get("SLURMD_NODENAME"); n && *n) {
        if (auto st = check_env_value("SLURMD_NODENAME", n, 256); !st) return Error{st.error()};
        a.batch_node = n;
    }
    auto nodes = env_uint(get, "SLURM_JOB_NUM_NODES", kMaxUnits);
    if (!nodes) return Error{nodes.error()};
    if (nodes.value() == 0) {
        nodes = env_uint(get, "SLURM_NNODES", kMaxUnits);
        if (!nodes) return Error{nodes.error()};
    }
    a.nodes = static_cast<std::uint32_t>(nodes.value());
    auto ntasks = env_uint(get, "SLURM_NTASKS", kMaxWorld);
    if (!ntasks) return Error{ntasks.error()};
    // SLURM_NTASKS_PER_NODE may not be set at all; a plain number is all we accept.
    auto per = env_uint(get, "SLURM_NTASKS_PER_NODE", kMaxUnitSizeRanks);
    if (!per) return Error{per.error()};
    if (per.value() > 0) {
        // The job's own ranks per node, times the nodes it got: right also when it got more
        // nodes than sbatch assumed (a node range), where SLURM_NTASKS is sbatch's K tasks for
        // the one node it assumed under --ntasks-per-node=K.
        std::uint64_t cap = std::uint64_t(a.nodes) * per.value();
        a.capacity_ranks = static_cast<std::uint32_t>(std::min<std::uint64_t>(cap, kMaxWorld));
    } else if (ntasks.value() > 0) {
        a.capacity_ranks = static_cast<std::uint32_t>(ntasks.value());
    } else {
        a.capacity_ranks = a.nodes;
    }
    auto gpus = env_uint(get, "SLURM_GPUS_ON_NODE", kMaxUnitSizeRanks);
    if (!gpus) return Error{gpus.error()};
    a.gpus_per_node = static_cast<std::uint32_t>(gpus.value());
    return a;
}

std::string member_id(std::uint32_t unit, std::uint32_t slot) {
    return "u" + std::to_string(unit) + ".s" + std::to_string(slot);
}

Result<std::pair<std::uint32_t, std::uint32_t>> task_unit(const std::vector<std::uint32_t> &units,
                                                          std::uint32_t unit_size,
                                                          std::uint32_t procid) {
    if (unit_size == 0) return make_error("unit size must be at least 1");
    std::uint64_t tasks = std::uint64_t(units.size()) * unit_size;
    if (procid >= tasks)
        return make_error("task " + std::to_string(procid) + " is outside the step's " +
                          std::to_string(tasks) + " tasks (" + std::to_string(units.size()) +
                          " units of " + std::to_string(unit_size) + ")");
    return std::make_pair(units[procid / unit_size], procid % unit_size);
}

std::string format_unit_list(const std::vector<std::uint32_t> &units) {
    std::string out;
    for (std::size_t i = 0; i < units.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(units[i]);
    }
    return out;
}

Result<std::vector<std::uint32_t>> parse_unit_list(const std::string &text) {
    if (text.empty()) return make_error(std::string(kEnvLaunchUnits) + ": empty unit list");
    if (text.size() > std::size_t(kMaxUnits) * 6)
        return make_error(std::string(kEnvLaunchUnits) + ": unit list too long");
    std::vector<std::uint32_t> out;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string::npos) comma = text.size();
        auto v = parse_uint(std::string_view(text).substr(pos, comma - pos), 0, UINT32_MAX,
                            kEnvLaunchUnits);
        if (!v) return Error{v.error()};
        out.push_back(static_cast<std::uint32_t>(v.value()));
        if (out.size() > kMaxUnits) return make_error(std::string(kEnvLaunchUnits) + ": too many units");
        pos = comma + 1;
    }
    return out;
}

namespace {

// The shell-like word splitting of split_srun_args, then the refusal of `reserved` options
// (long ones as "--x" or "--x=...", short ones as a prefix); errors name `option`.
Result<std::vector<std::string>> split_option_words(const std::string &text, const std::string &option,
                                                    const std::vector<std::string_view> &reserved_long,
                                                    const std::vector<std::string_view> &reserved_short) {
    if (text.size() > kMaxValueLength)
        return make_error(option + ": longer than " + std::to_string(kMaxValueLength) + " bytes");
    std::vector<std::string> words;
    std::string cur;
    bool in_word = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word) words.push_back(std::move(cur));
            cur.clear();
            in_word = false;
        } else if (c == '\'') {
            std::size_t end = text.find('\'', i + 1);
            if (end == std::string::npos) return make_error(option + ": unbalanced single quote");
            cur.append(text, i + 1, end - i - 1);
            i = end;
            in_word = true;
        } else if (c == '"') {
            std::size_t j = i + 1;
            for (; j < text.size() && text[j] != '"'; ++j) {
                if (text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '"' || text[j + 1] == '\\'))
                    ++j;
                cur.push_back(text[j]);
            }
            if (j >= text.size()) return make_error(option + ": unbalanced double quote");
            i = j;
            in_word = true;
        } else if (c == '\\') {
            if (i + 1 >= text.size()) return make_error(option + ": trailing backslash");
            cur.push_back(text[++i]);
            in_word = true;
        } else {
            cur.push_back(c);
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(cur));
    for (const auto &w : words) {
        for (auto rv : reserved_long)
            if (w == rv || (w.size() > rv.size() && w.compare(0, rv.size(), rv) == 0 && w[rv.size()] == '='))
                return make_error(option + ": '" + w + "' is set by omni-launch itself");
        for (auto rv : reserved_short)
            if (w.compare(0, rv.size(), rv) == 0)
                return make_error(option + ": '" + w + "' is set by omni-launch itself");
    }
    return words;
}

}  // namespace

Result<std::vector<std::string>> split_srun_args(const std::string &text) {
    // omni-launch decides these per step; a second value would silently win or conflict.
    return split_option_words(text, "--srun-args",
                              {"--ntasks", "--nodes", "--mpi", "--job-name", "--no-kill", "--export"},
                              {"-n", "-N", "-J", "-k"});
}

Result<std::vector<std::string>> split_sbatch_args(const std::string &text) {
    // The satellite's shape comes from its units; its name is how omni-launch finds it; its
    // environment carries the coordinator and the secret; it is never requeued.
    return split_option_words(text, "--satellite-args",
                              {"--ntasks", "--nodes", "--job-name", "--export", "--wrap", "--parsable",
                               "--requeue"},
                              {"-n", "-N", "-J"});
}

std::uint32_t unit_nodes(std::uint32_t unit_size, const Allocation &a) {
    if (a.nodes == 0) return 0;
    std::uint32_t per_node = std::max<std::uint32_t>(1, a.capacity_ranks / a.nodes);
    return std::min(a.nodes, (unit_size + per_node - 1) / per_node);
}

std::vector<std::string> step_share_args(std::uint32_t unit_size, const Allocation &a, const NodeShare &node,
                                         const std::vector<std::string> &user_args) {
    if (a.nodes == 0 || unit_size == 0 || node.cpus == 0) return {};
    const std::uint32_t per_node = a.capacity_ranks / a.nodes;
    if (per_node <= unit_size) return {};
    for (const auto &arg : user_args) {
        for (const char *opt : {"--exact", "--cpus-per-task", "--gres", "--gpus", "--mem"})
            if (arg.rfind(opt, 0) == 0) return {};
        if (arg.rfind("-c", 0) == 0) return {};
    }
    std::vector<std::string> out = {"--exact",
                                    "--cpus-per-task=" + std::to_string(std::max<std::uint32_t>(1, node.cpus / per_node))};
    if (node.gpus >= per_node) out.push_back("--gres=gpu:" + std::to_string(node.gpus / per_node * unit_size));
    if (node.mem_mb > 0) out.push_back("--mem=" + std::to_string(node.mem_mb / per_node * unit_size) + "M");
    return out;
}

std::vector<std::string> srun_argv(const StepSpec &s) {
    std::vector<std::string> a = {s.srun,         "--mpi=pmix", "--no-kill", "--kill-on-bad-exit=0",
                                  "--export=ALL", "-J",         s.name,      "-n",
                                  std::to_string(s.tasks)};
    if (s.nodes > 0) {
        a.push_back("-N");
        a.push_back(std::to_string(s.nodes));
    }
    a.insert(a.end(), s.extra.begin(), s.extra.end());
    a.push_back(s.self);
    a.push_back("--exec-task");
    a.push_back("--");
    a.insert(a.end(), s.program.begin(), s.program.end());
    return a;
}

const std::vector<std::string> &step_env_removed() {
    // sbatch --ntasks-per-node=K leaves SLURM_NTASKS_PER_NODE=K in the batch environment; a
    // one-unit step of fewer ranks would then wait for K free CPUs on one node.
    static const std::vector<std::string> names = {"SLURM_NTASKS_PER_NODE"};
    return names;
}

std::string shell_join(const std::vector<std::string> &argv) {
    std::string out;
    for (const auto &w : argv) {
        if (!out.empty()) out += ' ';
        bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   std::string_view("-_./=:,@%+").find(c) != std::string_view::npos;
        });
        if (plain) {
            out += w;
            continue;
        }
        out += '\'';
        for (char c : w) {
            if (c == '\'') out += "'\\''";
            else out += c;
        }
        out += '\'';
    }
    return out;
}

}  // namespace omni::launcher
