// Growing a job by Slurm's job expansion; see launch/expansion.h.
#include "launch/expansion.h"

#include <algorithm>

#include "common/hostlist.h"

namespace omni::launcher {

std::string expansion_job_name(std::uint32_t main_job) { return "omni-exp-" + std::to_string(main_job); }

std::vector<std::string> expansion_salloc_argv(const ExpansionSpec &spec) {
    std::vector<std::string> argv = {
        "salloc",
        "--no-shell",
        "--job-name=" + expansion_job_name(spec.main_job),
        "--dependency=expand:" + std::to_string(spec.main_job),
        "--nodes=" + std::to_string(spec.nodes),
        "--ntasks-per-node=" + std::to_string(spec.tasks_per_node),
    };
    if (!spec.partition.empty()) argv.push_back("--partition=" + spec.partition);
    if (spec.exclusive) argv.push_back("--exclusive");
    if (!spec.exclude.empty()) argv.push_back("--exclude=" + compress_hostlist(spec.exclude));
    return argv;
}

std::optional<std::string> expansion_refusal(const std::string &scheduler_parameters, const std::string &select_type,
                                             const JobInfo &job) {
    bool permitted = false;
    for (std::size_t at = 0; at <= scheduler_parameters.size();) {
        std::size_t comma = scheduler_parameters.find(',', at);
        if (comma == std::string::npos) comma = scheduler_parameters.size();
        if (scheduler_parameters.compare(at, comma - at, "permit_job_expansion") == 0) permitted = true;
        at = comma + 1;
    }
    if (!permitted) return std::string("SchedulerParameters has no permit_job_expansion, so Slurm expands no job");
    const bool gpus = std::any_of(job.gpus.begin(), job.gpus.end(), [](std::uint32_t g) { return g > 0; });
    if (!job.tres_per_node.empty() || gpus)
        return "job " + std::to_string(job.job_id) + " holds GRES" +
               (job.tres_per_node.empty() ? std::string() : " (" + job.tres_per_node + ")") +
               ", and Slurm's cons_tres refuses to expand a job that holds GRES";
    if (select_type != "select/omni")
        return "SelectType is " + (select_type.empty() ? std::string("unset") : select_type) +
               ": Slurm's cons_tres merge leaves the nodes an expansion adds without cores, and steps fail "
               "there; select/omni repairs it";
    return std::nullopt;
}

}  // namespace omni::launcher
