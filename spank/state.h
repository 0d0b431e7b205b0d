// spank/: state shared by the SPANK callbacks of one process (sbatch, srun or slurmstepd).
// Slurm loads the plugin once per process and calls it from one thread, so plain globals are
// enough; nothing here outlives the process.
#ifndef OMNI_SPANK_STATE_H
#define OMNI_SPANK_STATE_H

extern "C" {
#include <slurm/spank.h>
}

#include <string>

#include "common/job_options.h"
#include "hal/topofile.h"

namespace omni_spank {

// Messages are prefixed with the plugin name, as every SPANK plugin's should be.
#define OMNI_SPANK_PREFIX "omni: "

struct State {
    omni::SiteConfig site;
    omni::JobOptions opts;
    bool any_option = false;   // at least one --omni-* option was given
    // Remote context: the site topology file (plugstack topology=), read once per slurmstepd
    // as root from the admin's path, only for jobs that use --omni-* options.
    bool topology_loaded = false;
    omni::hal::SiteTopology topology;
    std::string topology_error;  // reported by every task of the step
    // Remote context: why the job's options were refused here (Slurm ignores option
    // callback errors in slurmstepd, and post_opt errors do not reach the user): raised in
    // every task, so the job does not run without them.
    std::string options_error;
};

State &state();

// Register the --omni-* options with Slurm (all contexts that parse options).
int register_options(spank_t sp);

// Allocator/local context, after all options: validate, export OMNI_* (job env, spank env).
int allocator_post_opt(spank_t sp);

// Remote context, once per step after the options: options from the spank job environment
// when no option callback ran (batch step of an --export=NONE job), the site topology file.
int remote_post_opt(spank_t sp);

// Remote context, per task, as the user: environment, checks, binding.
int remote_task_init(spank_t sp);

}  // namespace omni_spank

#endif
