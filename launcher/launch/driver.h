// omni-launch's supervisor: launches the srun steps, watches them and the coordinator, starts
// joiner steps for planned grows, reports dead ranks to the coordinator, records every
// generation change and decides the exit status.
//
// It watches the coordinator the way any client does, through status requests (every
// kPollMs): the coordinator's state machine stays the single source of truth, and the
// supervisor only acts on what it reports (a grow target with too few units, a decision).
#ifndef OMNI_LAUNCHER_LAUNCH_DRIVER_H
#define OMNI_LAUNCHER_LAUNCH_DRIVER_H

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/job_options.h"
#include "launch/options.h"
#include "launch/plan.h"

namespace omni::launcher {

inline constexpr std::int64_t kPollMs = 50;

struct DriverConfig {
    LaunchSettings settings;
    LaunchOptions options;
    Allocation alloc;
    std::string self;       // omni-launch's own path (the per-task shim)
    std::string mpi = kMpiPmix;  // every step's srun --mpi= (resolved: pmix or none)
    std::string job_dir;
    std::string endpoint;   // the coordinator, as ranks reach it
    std::string secret;
    std::string events;     // the events file
    std::string metrics;    // the Prometheus text file (empty: none)
    // Non-empty: this omni-launch runs a satellite job's units (launch/satellite.h). It starts
    // them as joiners, records no events, starts no grows, and its first signal makes its
    // units leave the job at the next boundary.
    std::vector<std::uint32_t> satellite_units;
    // --omni-policy=auto (launch/policy.h): the main omni-launch looks at the queue every
    // interval and grows (via auto) or shrinks (omni-ctl shrink) the job by itself.
    std::optional<PolicyOptions> policy;
    // plugstack.conf grow= (OMNI_SITE_GROW): auto, satellite or expand.
    std::string site_grow = "auto";
    // Counted by omni-launch's SIGURG handler: job_submit/omni sends SIGURG to the batch
    // script's process group when it records a deferred shrink, so that the job is read
    // then rather than polled (null: only the slow safety look).
    const std::atomic<int> *slurm_news = nullptr;
};

// Runs the job until every step has ended; returns omni-launch's exit status: the first
// failing step's status (srun reports its tasks' worst), else 0; 1 when the launcher itself
// cannot go on (events file, coordinator unreachable, the first srun cannot start).
// `signal` is set by the caller's signal handler: the first signal asks the coordinator to
// stop the job at the next boundary (a satellite: to let its units leave), a second one
// terminates the steps. Satellite jobs the run submitted are cancelled before it returns.
int run_driver(const DriverConfig &cfg, const std::atomic<int> &signal_count,
               const std::atomic<int> &last_signal);

}  // namespace omni::launcher

#endif
