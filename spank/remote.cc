// spank/: remote context (slurmstepd).
//
// slurm_spank_init_post_opt runs once per step in slurmstepd, as root: it reads the site
// topology file, an admin-configured path (never one a user chose). slurm_spank_task_init
// runs in each task after Slurm has dropped to the job's user, just before exec: errors raised
// there reach srun (errors from user_init would not), and the checkpoint directory is checked
// with the user's rights, never root's.
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "binding.h"
#include "hal/model.h"
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

// A job variable as the task will see it; "" when unset. Values are bounded by `buf`.
std::string job_env(spank_t sp, const char *name) {
    char buf[4096];
    if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return "";
    return buf;
}

// Whether the job's environment has `name` at all: set to "" is the user's choice too.
bool user_set(spank_t sp, const char *name) {
    char buf[8];
    return spank_getenv(sp, name, buf, sizeof buf) != ESPANK_ENV_NOEXIST;
}

// The batch step of a job submitted with --export=NONE gets no option callbacks in
// slurmstepd; its options are still in the spank job environment, which Slurm hands to the
// job as SLURM_SPANK_<name>. Read them back from there.
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
        // Raised in every task: a job must not run without the options it asked for.
        st.options_error = "job environment: " + opts.error();
        st.any_option = true;
        return false;
    }
    st.opts = opts.value();
    st.any_option = true;
    return true;
}

int set(spank_t sp, const char *name, const std::string &value) {
    const spank_err_t rc = spank_setenv(sp, name, value.c_str(), 1);
    if (rc != ESPANK_SUCCESS) {
        slurm_error(OMNI_SPANK_PREFIX "cannot set %s: %s", name, spank_strerror(rc));
        return -1;
    }
    return 0;
}

// Binds the calling task (this process, about to exec) next to its GPU and exports where
// that is. Returns -1 only for errors the user must see.
int bind_task(spank_t sp) {
    auto &st = state();
    if (!st.topology_loaded) return set(sp, "OMNI_BIND", "none: no topology= in plugstack.conf");
    const std::string host = job_env(sp, "SLURMD_NODENAME");
    const omni::hal::SiteNode *node = find_node(st.topology, host);
    if (!node) return set(sp, "OMNI_BIND", "none: node " + host + " is not in " + st.site.topology);

    const char *gpus_var = "SLURM_STEP_GPUS";
    std::string step_gpus = job_env(sp, gpus_var);
    if (step_gpus.empty()) step_gpus = job_env(sp, gpus_var = "SLURM_JOB_GPUS");
    auto gpus = task_gpus(job_env(sp, "CUDA_VISIBLE_DEVICES"), step_gpus, gpus_var);
    if (!gpus) return set(sp, "OMNI_BIND", "none: " + gpus.error());

    // The step's cores, not the job's: the step's cpuset holds only those, and the job's
    // other cores may belong to another step of the same job.
    char *cores_text = nullptr;
    const char *cores_item = "S_STEP_ALLOC_CORES";
    if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores_text) != ESPANK_SUCCESS || !cores_text) {
        cores_item = "S_JOB_ALLOC_CORES";
        if (spank_get_item(sp, S_JOB_ALLOC_CORES, &cores_text) != ESPANK_SUCCESS || !cores_text)
            return set(sp, "OMNI_BIND", "none: Slurm did not say which cores the step holds");
    }
    auto cores = omni::hal::parse_cpulist(cores_text, 65535, cores_item);
    if (!cores) return set(sp, "OMNI_BIND", "none: " + cores.error());

    const std::string kind = st.opts.unit_domain.value_or(st.site.default_domain);
    auto plan = plan_binding(*node, gpus.value(), cores.value(), kind);
    if (!plan) {
        slurm_error(OMNI_SPANK_PREFIX "%s: %s", st.site.topology.c_str(), plan.error().c_str());
        return -1;
    }
    const Binding &b = plan.value();
    if (!b.domain.empty() && set(sp, "OMNI_DOMAIN", b.domain) != 0) return -1;
    if (!b.nics.empty() && set(sp, "OMNI_LOCAL_NIC", b.nics[0]) != 0) return -1;
    if (!b.nvmes.empty()) {
        // Read as the job's user, like any process of the job could.
        std::string mounts;
        if (FILE *f = fopen("/proc/self/mounts", "re")) {
            char buf[65536];
            std::size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0 && mounts.size() < (16u << 20))
                mounts.append(buf, n);
            fclose(f);
        }
        const std::string where = nvme_mount(b.nvmes, mounts);
        if (!where.empty() && set(sp, "OMNI_LOCAL_NVME", where) != 0) return -1;
    }
    // The user's own choice of HCA wins over ours.
    if (!b.rdma_nics.empty()) {
        if (!user_set(sp, "NCCL_IB_HCA") && set(sp, "NCCL_IB_HCA", "=" + b.rdma_nics[0]) != 0)
            return -1;
        if (!user_set(sp, "UCX_NET_DEVICES") && set(sp, "UCX_NET_DEVICES", b.rdma_nics[0] + ":1") != 0)
            return -1;
    }
    if (b.cpus.empty()) return set(sp, "OMNI_BIND", "none: " + b.why_unbound);
    cpu_set_t mask;
    CPU_ZERO(&mask);
    for (unsigned c : b.cpus)
        if (c < CPU_SETSIZE) CPU_SET(c, &mask);
    const std::string wanted = omni::hal::format_cpulist(b.cpus);
    if (sched_setaffinity(0, sizeof mask, &mask) != 0) {
        // EINVAL: none of them is in the task's cpuset. Slurm's binding stays, and says so.
        if (errno == EINVAL)
            return set(sp, "OMNI_BIND", "none: the CPUs near its GPUs (" + wanted +
                                            ") are outside the CPUs this task may use");
        slurm_error(OMNI_SPANK_PREFIX "cannot bind to CPUs %s: %s", wanted.c_str(), strerror(errno));
        return -1;
    }
    // The kernel keeps only the CPUs the cpuset allows: report what the task is bound to.
    std::vector<unsigned> bound;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
        for (unsigned c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &mask)) bound.push_back(c);
    return set(sp, "OMNI_BIND", bound.empty() ? wanted : omni::hal::format_cpulist(bound));
}

}  // namespace

int remote_post_opt(spank_t sp) {
    auto &st = state();
    if (st.any_option && st.options_error.empty()) {
        // Options that came through the callbacks: the cross-option rules, as on the submit
        // host (this node's plugstack.conf may differ from it).
        if (auto v = omni::validate_job_options(st.opts, st.site); !v) st.options_error = v.error();
    }
    if (!st.any_option && !options_from_spank_env(sp)) return 0;
    if (!st.options_error.empty()) return 0;
    if (!st.site.bind || st.site.topology.empty()) return 0;
    auto topo = omni::hal::read_site_topology(st.site.topology);
    if (!topo) {
        // Raised again in every task, where srun shows it to the user.
        st.topology_error = topo.error();
        return 0;
    }
    st.topology = std::move(topo).value();
    st.topology_loaded = true;
    return 0;
}

int remote_task_init(spank_t sp) {
    auto &st = state();
    if (!st.any_option) return 0;
    if (!st.options_error.empty()) {
        slurm_error(OMNI_SPANK_PREFIX "%s (checked on node %s)", st.options_error.c_str(),
                    job_env(sp, "SLURMD_NODENAME").c_str());
        return -1;
    }
    if (!st.topology_error.empty()) {
        slurm_error(OMNI_SPANK_PREFIX "site topology file: %s", st.topology_error.c_str());
        return -1;
    }
    // Options reach slurmstepd again through Slurm's own option forwarding (or the spank job
    // environment), so every step sees the OMNI_* variables even with --export=NONE.
    for (const auto &[name, value] : omni::job_option_env(st.opts, st.site))
        if (set(sp, name.c_str(), value) != 0) return -1;
    if (st.opts.sm_slice &&
        set(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(*st.opts.sm_slice)) != 0)
        return -1;
    if (st.opts.ckpt_dir && check_ckpt_dir(*st.opts.ckpt_dir) != 0) return -1;
    if (st.site.bind && bind_task(sp) != 0) return -1;
    return 0;
}

}  // namespace omni_spank
