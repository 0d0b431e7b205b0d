// omni-launch's pure planning; see launch/plan.h.
#include "launch/plan.h"

#include <algorithm>

#include "common/parse.h"
#include "coord/protocol.h"
#include "slurmjob/job.h"

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
    a.holding.nodes = a.nodes;
    auto ntasks = env_uint(get, "SLURM_NTASKS", kMaxWorld);
    if (!ntasks) return Error{ntasks.error()};
    a.holding.tasks = static_cast<std::uint32_t>(ntasks.value());
    // SLURM_NTASKS_PER_NODE may not be set at all; a plain number is all we accept. It wins
    // over SLURM_NTASKS: a node range may give the job more nodes than sbatch assumed, and
    // SLURM_NTASKS then counts the tasks of the nodes sbatch assumed.
    auto per = env_uint(get, "SLURM_NTASKS_PER_NODE", kMaxUnitSizeRanks);
    if (!per) return Error{per.error()};
    a.holding.tasks_per_node = static_cast<std::uint32_t>(per.value());
    if (const char *cpus = get("SLURM_JOB_CPUS_PER_NODE"); cpus && *cpus) {
        auto counts = expand_counts(cpus, kMaxWorld, "SLURM_JOB_CPUS_PER_NODE");
        if (!counts) return Error{counts.error()};
        a.holding.node.cpus = *std::min_element(counts.value().begin(), counts.value().end());
    }
    auto gpus = env_uint(get, "SLURM_GPUS_ON_NODE", kMaxUnitSizeRanks);
    if (!gpus) return Error{gpus.error()};
    a.holding.node.gpus = static_cast<std::uint32_t>(gpus.value());
    // Memory, where Slurm tracks it: per node, or per CPU (times the node's CPUs).
    constexpr std::uint64_t kMaxMemMb = std::uint64_t(1) << 40;
    auto mem_node = env_uint(get, "SLURM_MEM_PER_NODE", kMaxMemMb);
    if (!mem_node) return Error{mem_node.error()};
    auto mem_cpu = env_uint(get, "SLURM_MEM_PER_CPU", kMaxMemMb);
    if (!mem_cpu) return Error{mem_cpu.error()};
    a.holding.node.mem_mb = mem_node.value() ? mem_node.value() : mem_cpu.value() * a.holding.node.cpus;
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
                return make_error(option + ": " + quoted(w) + " is set by omni-launch itself");
        for (auto rv : reserved_short)
            if (w.compare(0, rv.size(), rv) == 0)
                return make_error(option + ": " + quoted(w) + " is set by omni-launch itself");
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

std::vector<std::string> srun_argv(const StepSpec &s) {
    std::vector<std::string> a = {s.srun,         "--mpi=" + s.mpi, "--no-kill", "--kill-on-bad-exit=0",
                                  "--export=ALL", "-J",             s.name,      "-n",
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

Result<std::string> parse_mpi_mode(const std::string &text, const std::string &what) {
    if (text == kMpiAuto || text == kMpiPmix || text == kMpiNone) return text;
    return make_error(what + " " + quoted(text.substr(0, 64)) + ": expected auto, pmix or none");
}

bool mpi_list_offers_pmix(const std::string &text) {
    // Plugin lines are indented names; the versioned plugins (mpi_pmix_v4.so ...) come in a
    // closing "specific pmix plugin versions available: pmix_v4,pmix_v5" line.
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        std::string_view line(text.data() + pos, nl - pos);
        pos = nl + 1;
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
        if (line == "pmix" || line.rfind("pmix_v", 0) == 0) return true;
        constexpr std::string_view kVersions = "specific pmix plugin versions available:";
        if (line.rfind(kVersions, 0) == 0 && line.find("pmix_", kVersions.size()) != std::string_view::npos)
            return true;
    }
    return false;
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
