// omni-launch's command line and the job settings derived from it, the OMNI_* job options
// and the allocation. Pure: the environment comes in through a getenv-like function.
#ifndef OMNI_LAUNCHER_LAUNCH_OPTIONS_H
#define OMNI_LAUNCHER_LAUNCH_OPTIONS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/plan.h"
#include "omni/result.h"

namespace omni::launcher {

struct LaunchOptions {
    std::optional<std::uint32_t> units, min_units, max_units, unit_size;
    std::string events;                    // empty: omni-events-JOBID.jsonl (omni_launch.cc)
    std::string metrics_file;              // empty: no Prometheus text file
    std::string job_dir;                   // empty: OMNI_JOB_DIR or /tmp/omni-UID/job-CLUSTER-JOBID
    std::int64_t boundary_timeout_ms = 30000;
    std::int64_t formation_timeout_ms = 120000;
    std::int64_t grow_wait_ms = 60000;
    bool announce = true;                  // planned resizes announced a boundary ahead
    std::string bind;                      // empty: the batch node's NodeAddr
    std::string mpi;                       // --mpi auto|pmix|none; empty: not given (plan.h)
    std::vector<std::string> srun_args;    // split --srun-args
    std::vector<std::string> satellite_args;  // split --satellite-args: sbatch options
    bool satellite = false;                // run a satellite job's units (launch/satellite.h)
    bool dry_run = false;
    std::vector<std::string> program;      // PROGRAM ARGS after "--"
};

// What parsing decided: run with the options, or exit now with `exit_code` after printing
// `text` (to stdout for --help, to stderr for usage errors).
struct ParsedCommandLine {
    LaunchOptions options;
    int exit_code = -1;  // -1: run; 0: --help printed; 2: bad usage
    std::string text;
};
ParsedCommandLine parse_command_line(int argc, const char *const *argv);

// How the steps start their ranks before `srun --mpi=list` is asked: --mpi, else
// OMNI_LAUNCH_MPI (empty: as unset), else auto (launch/plan.h). A bad OMNI_LAUNCH_MPI is an
// error naming it.
Result<std::string> mpi_mode_setting(const LaunchOptions &o, GetEnv get);

// The mode the steps use, once auto is resolved: `offers_pmix` is what `srun --mpi=list`
// said (nullopt: it could not be asked; then none, which needs nothing of Slurm). Refuses
// none for ranks told to wire up through PMIx only (OMNI_MP_WIREUP=pmix), naming both.
Result<std::string> resolve_mpi(const std::string &mode, std::optional<bool> offers_pmix, GetEnv get);

// The settings of the run once defaults are applied:
//   unit size: --unit-size, else OMNI_UNIT_SIZE, else 1;
//   capacity:  job_capacity() of the allocation for that unit size (launch/capacity.h);
//   MIN units: --min-units, else OMNI_ELASTIC_MIN, else 1;
//   MAX units: --max-units, else OMNI_ELASTIC_MAX, else the capacity in units (at least the
//              initial units);
//   initial:   --units, else the smaller of OMNI_ELASTIC_MAX and the capacity in units, else
//              the capacity. An elastic job thus starts with the units its allocation runs at
//              once; a capacity below MIN is an error naming both. Outside a job (no nodes
//              known) OMNI_ELASTIC_MAX or --units decide alone.
struct LaunchSettings {
    std::uint32_t units = 0, min_units = 0, max_units = 0, unit_size = 0;
    Capacity capacity;  // of the allocation, for units of unit_size
};
// `env_min`, `env_max`, `env_unit_size` come from job_options_from_env (0: unset). Errors name
// the option or variable and the range that was expected.
Result<LaunchSettings> resolve_settings(const LaunchOptions &o, const Allocation &a,
                                        std::uint64_t env_min, std::uint64_t env_max,
                                        std::uint64_t env_unit_size);

}  // namespace omni::launcher

#endif
