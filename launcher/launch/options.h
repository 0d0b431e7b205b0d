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
    std::string events;                    // empty: JOB_DIR/events.jsonl
    std::string metrics_file;              // empty: no Prometheus text file
    std::string job_dir;                   // empty: OMNI_JOB_DIR or /tmp/omni-UID/job-CLUSTER-JOBID
    std::int64_t boundary_timeout_ms = 30000;
    std::int64_t formation_timeout_ms = 120000;
    std::int64_t grow_wait_ms = 60000;
    bool announce = true;                  // planned resizes announced a boundary ahead
    std::string bind;                      // empty: the batch node's NodeAddr
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

// The settings of the run once defaults are applied:
//   unit size: --unit-size, else OMNI_UNIT_SIZE, else 1;
//   MIN units: --min-units, else OMNI_ELASTIC_MIN, else 1;
//   MAX units: --max-units, else OMNI_ELASTIC_MAX, else the allocation's capacity in units
//              (at least the initial units);
//   initial:   --units, else OMNI_ELASTIC_MAX, else the allocation's capacity in units.
//              An elastic job whose GPUs per node (SLURM_GPUS_ON_NODE) are whole units, or
//              whose units are whole nodes of GPUs, starts with no more units than its nodes'
//              GPUs hold: Slurm may give it fewer nodes than MAX units need (job_submit/omni's
//              node range, select/omni); fewer than MIN is an error naming both.
struct LaunchSettings {
    std::uint32_t units = 0, min_units = 0, max_units = 0, unit_size = 0;
};
// `env_min`, `env_max`, `env_unit_size` come from job_options_from_env (0: unset). Errors name
// the option or variable and the range that was expected.
Result<LaunchSettings> resolve_settings(const LaunchOptions &o, const Allocation &a,
                                        std::uint64_t env_min, std::uint64_t env_max,
                                        std::uint64_t env_unit_size);

}  // namespace omni::launcher

#endif
