// Satellite jobs; see launch/satellite.h.
#include "launch/satellite.h"

#include <cstring>

#include "coord/secret.h"
#include "launch/plan.h"

namespace omni::launcher {

std::string satellite_job_name(std::uint32_t main_job) { return "omni-sat-" + std::to_string(main_job); }

std::vector<std::string> satellite_sbatch_args(const SatelliteSpec &spec) {
    const auto units = static_cast<std::uint32_t>(spec.units.size());
    std::vector<std::string> args = {
        "--job-name=" + satellite_job_name(spec.main_job),
        "--nodes=" + std::to_string(spec.nodes),
        "--ntasks=" + std::to_string(units * spec.unit_size),
        // Its units leave the job for good when it ends: a requeued satellite (PreemptMode
        // REQUEUE) would start later as units nobody waits for.
        "--no-requeue",
    };
    if (spec.tasks_per_node > 0) args.push_back("--ntasks-per-node=" + std::to_string(spec.tasks_per_node));
    if (!spec.partition.empty()) args.push_back("--partition=" + spec.partition);
    // TresPerNode is "gres:NAME[:TYPE]:COUNT"; sbatch takes the part after "gres:".
    if (spec.tres_per_node.rfind("gres:", 0) == 0) args.push_back("--gres=" + spec.tres_per_node.substr(5));
    if (spec.exclusive) args.push_back("--exclusive");
    args.insert(args.end(), spec.sbatch_extra.begin(), spec.sbatch_extra.end());
    return args;
}

std::string satellite_script(const SatelliteSpec &spec) {
    std::vector<std::string> argv = {"exec", spec.self, "--satellite", "--boundary-timeout",
                                     std::to_string(spec.boundary_timeout_ms / 1000)};
    if (!spec.mpi.empty()) {
        argv.push_back("--mpi");
        argv.push_back(spec.mpi);
    }
    if (!spec.srun_extra.empty()) {
        argv.push_back("--srun-args");
        argv.push_back(shell_join(spec.srun_extra));
    }
    argv.push_back("--");
    argv.insert(argv.end(), spec.program.begin(), spec.program.end());
    return "#!/bin/sh\n# A satellite of job " + std::to_string(spec.main_job) +
           ", submitted by its omni-launch (omni-launch(1), SATELLITE JOBS).\n" + shell_join(argv) + "\n";
}

std::vector<std::string> satellite_env_unset(const char *const *environ) {
    std::vector<std::string> out;
    for (const char *const *e = environ; e && *e; ++e) {
        const char *eq = std::strchr(*e, '=');
        if (!eq) continue;
        std::string name(*e, static_cast<std::size_t>(eq - *e));
        const bool slurm = name.rfind("SLURM_", 0) == 0 || name.rfind("SBATCH_", 0) == 0;
        if (slurm && name != "SLURM_CONF") out.push_back(std::move(name));
    }
    for (const char *n : {kEnvUnitId, kEnvUnitSlot, kEnvMemberId, kEnvLaunchUnits})
        out.emplace_back(n);
    return out;
}

std::map<std::string, std::string> satellite_env_set(const SatelliteSpec &spec,
                                                     const std::string &endpoint,
                                                     const std::string &secret,
                                                     const std::string &job_dir) {
    return {{kEnvCoordAddr, endpoint},
            {kEnvCoordSecret, secret},
            {kEnvJobDir, job_dir},
            {kEnvUnitSize, std::to_string(spec.unit_size)},
            {kEnvSatelliteUnits, format_unit_list(spec.units)},
            {kEnvSatelliteOf, std::to_string(spec.main_job)}};
}

}  // namespace omni::launcher
