// spank/: the slurm-omni SPANK plugin: entry points, plugstack arguments and the --omni-*
// options. One file per SPANK context (allocator.cc, remote.cc), as in NVIDIA's pyxis.
//
// Every entry point catches everything: an exception must never unwind into slurmstepd,
// sbatch or srun (C code, sometimes running as root).
#include <cstring>
#include <string>
#include <vector>

#include "state.h"

extern "C" {
// Slurm looks these up by name with dlsym; they must have C linkage.
extern const char plugin_name[] = "omni";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
}

namespace omni_spank {

State &state() {
    static State s;
    return s;
}

namespace {

int option_cb(int val, const char *optarg, int remote) noexcept {
    try {
        const auto &names = omni::job_option_names();
        if (val < 0 || static_cast<std::size_t>(val) >= names.size()) return -1;
        auto &st = state();
        auto res = omni::set_job_option(st.opts, names[val], optarg ? optarg : "", st.site);
        st.any_option = true;
        if (!res) {
            slurm_error(OMNI_SPANK_PREFIX "%s", res.error().c_str());
            // slurmstepd drops an option whose callback fails and goes on: keep the first
            // refusal for task_init, where it fails the task and reaches the user.
            if (remote && st.options_error.empty()) st.options_error = res.error();
            return -1;
        }
        return 0;
    } catch (...) {
        slurm_error(OMNI_SPANK_PREFIX "out of memory while parsing --%s",
                    val >= 0 && static_cast<std::size_t>(val) < omni::job_option_names().size()
                        ? omni::job_option_names()[val].c_str() : "omni-*");
        return -1;
    }
}

struct OptionDoc {
    const char *arginfo;
    const char *usage;
};

// Indexed like omni::job_option_names().
const OptionDoc kDocs[] = {
    {"MIN:MAX", "[omni] elastic range in units, 1 <= MIN <= MAX"},
    {"N[@DOMAIN]", "[omni] ranks per unit and the domain a unit stays in: "
                   "pcie|nvlink|numa|node|any"},
    {"M", "[omni] model-parallel ranks per data-parallel replica (divides N)"},
    {"B", "[omni] global batch, fixed across resizes"},
    {"b", "[omni] micro-batch per rank"},
    {"PCT", "[omni] share of a GPU's SMs (MPS), 1..100, where the site allows it"},
    {"DIR[:EVERY]", "[omni] checkpoint directory (absolute) and interval in steps"},
    {"auto[,KEY=S...]|none", "[omni] let omni-launch grow into idle nodes and give nodes back to "
                             "higher-priority jobs (keys: grow_cooldown, shrink_cooldown, "
                             "grow_after, shrink_after, interval)"},
};

}  // namespace

int register_options(spank_t sp) {
    const auto &names = omni::job_option_names();
    static_assert(sizeof(kDocs) / sizeof(kDocs[0]) == 8, "one doc per option");
    for (std::size_t i = 0; i < names.size(); ++i) {
        // Slurm keeps the pointers: the strings must outlive the plugin's registration.
        spank_option opt{};
        opt.name = const_cast<char *>(names[i].c_str());
        opt.arginfo = const_cast<char *>(kDocs[i].arginfo);
        opt.usage = const_cast<char *>(kDocs[i].usage);
        opt.has_arg = 1;
        opt.val = static_cast<int>(i);
        opt.cb = option_cb;
        const spank_err_t rc = spank_option_register(sp, &opt);
        if (rc != ESPANK_SUCCESS) {
            slurm_error(OMNI_SPANK_PREFIX "cannot register --%s: %s", names[i].c_str(),
                        spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

}  // namespace omni_spank

using namespace omni_spank;

extern "C" int slurm_spank_init(spank_t sp, int ac, char **av) noexcept {
    try {
        std::vector<std::string> args(av, av + ac);
        auto site = omni::parse_site_config(args);
        if (!site) {
            // Refuse to load: a typo in plugstack.conf must not silently change behaviour.
            slurm_error(OMNI_SPANK_PREFIX "%s", site.error().c_str());
            return -1;
        }
        state().site = site.value();
        switch (spank_context()) {
            case S_CTX_ALLOCATOR:
            case S_CTX_LOCAL:
            case S_CTX_REMOTE:
                return register_options(sp);
            default:
                return 0;
        }
    } catch (...) {
        slurm_error(OMNI_SPANK_PREFIX "out of memory in slurm_spank_init");
        return -1;
    }
}

extern "C" int slurm_spank_init_post_opt(spank_t sp, int, char **) noexcept {
    try {
        switch (spank_context()) {
            case S_CTX_ALLOCATOR:
            case S_CTX_LOCAL:
                return allocator_post_opt(sp);
            case S_CTX_REMOTE:
                return remote_post_opt(sp);
            default:
                return 0;
        }
    } catch (...) {
        slurm_error(OMNI_SPANK_PREFIX "out of memory in slurm_spank_init_post_opt");
        return -1;
    }
}

extern "C" int slurm_spank_task_init(spank_t sp, int, char **) noexcept {
    try {
        return remote_task_init(sp);
    } catch (...) {
        slurm_error(OMNI_SPANK_PREFIX "out of memory in slurm_spank_task_init");
        return -1;
    }
}
