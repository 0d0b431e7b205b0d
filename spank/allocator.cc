// spank/: allocator (sbatch, salloc) and local (srun) context. Runs as the submitting user,
// before anything is submitted: the place to reject bad options.
#include <cstdlib>

#include "state.h"

namespace omni_spank {

int allocator_post_opt(spank_t sp) {
    auto &st = state();
    if (!st.any_option) return 0;
    if (auto v = omni::validate_job_options(st.opts, st.site); !v) {
        slurm_error(OMNI_SPANK_PREFIX "%s", v.error().c_str());
        return -1;
    }
    for (const auto &[name, value] : omni::job_option_env(st.opts, st.site)) {
        // The job's own environment (sbatch exports its environment to the batch script,
        // srun to its tasks), and the spank job environment that slurmctld, the prolog and
        // epilog (as SPANK_<name>) and every step see even with --export=NONE.
        if (setenv(name.c_str(), value.c_str(), 1) != 0) {
            slurm_error(OMNI_SPANK_PREFIX "cannot set %s in the environment", name.c_str());
            return -1;
        }
        const spank_err_t rc = spank_job_control_setenv(sp, name.c_str(), value.c_str(), 1);
        // srun inside an existing allocation has no job control environment to change.
        if (rc != ESPANK_SUCCESS && rc != ESPANK_NOT_AVAIL && rc != ESPANK_BAD_ARG) {
            slurm_error(OMNI_SPANK_PREFIX "spank_job_control_setenv(%s): %s", name.c_str(),
                        spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

}  // namespace omni_spank
