// Satellite jobs: how omni-launch grows a job beyond its own allocation on any Slurm.
//
// A grow requested "via satellite" (omni-ctl grow) starts its units in a separate batch job
// that omni-launch submits: `omni-launch --satellite` runs there, launches the units' steps
// as joiners of the main job's coordinator, and leaves when the satellite job is signalled.
// The satellite is named omni-sat-<main job id>, so that squeue lists a job's satellites and
// omni-launch cancels them when the grow is withdrawn or the main job ends.
//
// The job secret reaches the satellite in sbatch's environment, which Slurm hands to the job
// and shows to nobody else: never on a command line, in squeue/scontrol show job output or in
// a file. The satellite gets none of the main job's SLURM_* variables (they describe another
// job) except SLURM_CONF.
#ifndef OMNI_LAUNCHER_LAUNCH_SATELLITE_H
#define OMNI_LAUNCHER_LAUNCH_SATELLITE_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace omni::launcher {

// The satellite's own settings, from the main omni-launch: its units (OMNI_SATELLITE_UNITS,
// a unit list) and the main job's id (OMNI_SATELLITE_OF).
inline constexpr const char *kEnvSatelliteUnits = "OMNI_SATELLITE_UNITS";
inline constexpr const char *kEnvSatelliteOf = "OMNI_SATELLITE_OF";

struct SatelliteSpec {
    std::uint32_t main_job = 0;
    std::vector<std::uint32_t> units;      // the unit ids it runs
    std::uint32_t unit_size = 1;           // ranks per unit
    std::uint32_t nodes = 1;               // grow_shape(): the nodes its units run on at once
    std::uint32_t tasks_per_node = 0;      // and their ranks per node (0: left to Slurm)
    std::string partition;                 // the main job's; empty: Slurm's default
    std::string tres_per_node;             // the main job's TresPerNode ("gres:gpu:2")
    bool exclusive = false;                // the main job has whole nodes
    std::vector<std::string> sbatch_extra; // omni-launch --satellite-args
    // The command the satellite runs.
    std::string self;                      // omni-launch's absolute path
    std::vector<std::string> srun_extra;   // the main job's --srun-args
    std::string mpi;                       // the main job's resolved --mpi (empty: not passed)
    std::int64_t boundary_timeout_ms = 30000;
    std::vector<std::string> program;      // PROGRAM ARGS
};

// "omni-sat-<main job>".
std::string satellite_job_name(std::uint32_t main_job);

// sbatch's options for the satellite (without --parsable and the script): its name, nodes,
// tasks and tasks per node for its units (so that they run there at once, as in the job), the main job's partition, GRES and exclusivity, then the extra
// options (which may override any of them).
std::vector<std::string> satellite_sbatch_args(const SatelliteSpec &spec);

// The satellite's batch script: `exec omni-launch --satellite ... -- PROGRAM ARGS`, every
// word quoted for the shell. It holds no secret. Its steps start their ranks as the main
// job's do (--mpi, as resolved there): the same cluster, and no second `srun --mpi=list`.
std::string satellite_script(const SatelliteSpec &spec);

// The environment changes for sbatch: the names of `environ` to remove (every SLURM_* and
// SBATCH_* but SLURM_CONF; the launcher's own OMNI_* per-step variables), and what to set:
// the coordinator, the secret, the job directory, the unit size and the satellite's units.
std::vector<std::string> satellite_env_unset(const char *const *environ);
std::map<std::string, std::string> satellite_env_set(const SatelliteSpec &spec,
                                                     const std::string &endpoint,
                                                     const std::string &secret,
                                                     const std::string &job_dir);

}  // namespace omni::launcher

#endif
