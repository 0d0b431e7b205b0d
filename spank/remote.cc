// spank/: remote context (slurmstepd). slurm_spank_task_init runs in each task after Slurm
// has dropped to the job's user, just before exec: errors raised here reach srun (errors
// from user_init would not), and file checks happen with the user's rights, never root's.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <deque>

#include "state.h"

namespace omni_spank {

namespace {

int check_ckpt_dir(const std::string &dir) {
    struct stat sb;
    if (stat(dir.c_str(), &sb) != 0) {
        slurm_error(OMNI_SPANK_PREFIX "--omni-ckpt=%s: %s (the checkpoint directory must exist "
                    "on every node)", dir.c_str(), strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        slurm_error(OMNI_SPANK_PREFIX "--omni-ckpt=%s: not a directory", dir.c_str());
        return -1;
    }
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
        slurm_error(OMNI_SPANK_PREFIX "--omni-ckpt=%s: not writable by the job's user (uid %u)",
                    dir.c_str(), static_cast<unsigned>(getuid()));
        return -1;
    }
    return 0;
}


// The batch step of a job submitted with --export=NONE gets no option callbacks in
// slurmstepd; its options are still in the spank job environment, which Slurm hands to the
// task as SLURM_SPANK_<name>. Read them back from there.
bool options_from_spank_env(spank_t sp) {
    auto &st = state();
    std::deque<std::string> keep;  // stable addresses: getter results live until parsed
    bool any = false;
    auto get = [&](const char *name) -> const char * {
        char buf[omni::kMaxPathLength + 1];
        const std::string var = std::string("SLURM_SPANK_") + name;
        if (spank_getenv(sp, var.c_str(), buf, sizeof buf) != ESPANK_SUCCESS) return nullptr;
        any = true;
        keep.emplace_back(buf);
        return keep.back().c_str();
    };
    auto opts = omni::job_options_from_env(get, st.site);
    if (!any) return false;
    if (!opts) {
        slurm_error(OMNI_SPANK_PREFIX "job environment: %s", opts.error().c_str());
        return false;
    }
    st.opts = opts.value();
    st.any_option = true;
    return true;
}

}  // namespace

int remote_task_init(spank_t sp) {
    auto &st = state();
    if (!st.any_option && !options_from_spank_env(sp)) return 0;
    // Options reach slurmstepd again through Slurm's own option forwarding (or the spank job
    // environment), so every step sees the OMNI_* variables even with --export=NONE.
    for (const auto &[name, value] : omni::job_option_env(st.opts, st.site)) {
        const spank_err_t rc = spank_setenv(sp, name.c_str(), value.c_str(), 1);
        if (rc != ESPANK_SUCCESS) {
            slurm_error(OMNI_SPANK_PREFIX "cannot set %s: %s", name.c_str(), spank_strerror(rc));
            return -1;
        }
    }
    if (st.opts.sm_slice) {
        const std::string pct = std::to_string(*st.opts.sm_slice);
        if (spank_setenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct.c_str(), 1) != ESPANK_SUCCESS)
            return -1;
    }
    if (st.opts.ckpt_dir && check_ckpt_dir(*st.opts.ckpt_dir) != 0) return -1;
    return 0;
}

}  // namespace omni_spank
