/* slurm-omni: the --omni-* job options, as one pure C++ module.
 *
 * The SPANK plugin parses these inside sbatch/salloc/srun and, as root, inside slurmstepd;
 * the launcher reads them back from the environment. Nothing here touches Slurm, the file
 * system or the process environment, so it is unit-tested and fuzzed on its own.
 *
 * Every function is noexcept in spirit: errors come back as omni::Status/Result with a
 * message that names the option, quotes the value and says what was expected. Input length is
 * bounded (omni::kMaxValueLength) before anything is allocated from it.
 */
#ifndef OMNI_JOB_OPTIONS_H
#define OMNI_JOB_OPTIONS_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni {

/* Domain kinds a unit must not straddle; "any" means no constraint. */
const std::vector<std::string> &domain_kinds();

/* Site settings: the plugstack.conf arguments of the SPANK plugin. */
struct SiteConfig {
    std::string topology;              /* topology=PATH: site topology file (omni-hal export) */
    bool bind = true;                  /* bind=yes|no: bind tasks to their GPU's cores */
    bool allow_sm_slice = false;       /* allow_sm_slice=yes|no */
    std::uint64_t max_units = 1024;    /* max_units=N, 1..65536 */
    std::string default_domain = "node";  /* default_domain=KIND */
    bool allow_policy = true;          /* policy=allow|deny: may jobs ask for --omni-policy */
    std::uint64_t policy_min_cooldown = 60;  /* policy_min_cooldown=S: floor of both cooldowns */
    std::uint64_t policy_min_interval = 5;   /* policy_min_interval=S: floor of interval */
    /* grow=auto|satellite|expand: how omni-launch grows a job onto nodes it does not hold
     * (omni-launch(1)): by Slurm's job expansion where the job qualifies, else a satellite
     * job (auto); or by that route only. */
    std::string grow = "auto";
};

/* Parses plugstack arguments ("key=value" each): topology, bind, allow_sm_slice, max_units,
 * default_domain, policy, policy_min_cooldown (0..86400), policy_min_interval (1..3600),
 * grow. Unknown keys, repeated keys and bad values are errors naming the key. topology must
 * be an absolute path when given. */
Result<SiteConfig> parse_site_config(const std::vector<std::string> &args);

/* --omni-policy=auto[,KEY=SECONDS...]: the elastic policy omni-launch runs for the job
 * (launch/policy.h). Times are whole seconds. */
struct PolicyOptions {
    std::uint64_t grow_cooldown = 180;    /* no policy grow sooner after the job's last resize */
    std::uint64_t shrink_cooldown = 600;  /* no policy shrink sooner after the last resize */
    std::uint64_t grow_after = 60;        /* a grow's condition holds this long first */
    std::uint64_t shrink_after = 30;      /* a shrink's condition holds this long first */
    std::uint64_t interval = 10;          /* how often omni-launch reads the queue */
};
constexpr std::uint64_t kMaxPolicySeconds = 86400;
constexpr std::uint64_t kMaxPolicyInterval = 3600;

/* The canonical text of a policy: "auto,grow_cooldown=180,...", every key in a fixed order
 * (what OMNI_POLICY holds). */
std::string policy_text(const PolicyOptions &p);

/* The options of one job, after parsing. Unset optional values are std::nullopt. */
struct JobOptions {
    std::optional<std::pair<std::uint64_t, std::uint64_t>> elastic;  /* MIN, MAX units */
    std::uint64_t unit_size = 1;                 /* ranks per unit (N) */
    std::optional<std::string> unit_domain;      /* unset: the site's default_domain */
    std::uint64_t mp = 1;                        /* model-parallel ranks per replica (M) */
    std::optional<std::uint64_t> global_batch;   /* B */
    std::optional<std::uint64_t> micro_batch;    /* b */
    std::optional<std::uint64_t> sm_slice;       /* percent, 1..100 */
    std::optional<std::string> ckpt_dir;         /* absolute */
    std::uint64_t ckpt_every = 0;                /* steps; 0: no periodic checkpoints */
    std::optional<PolicyOptions> policy;         /* --omni-policy=auto; unset: none */
    bool unit_given = false, mp_given = false;   /* for messages and the environment */
};

/* Upper bounds that keep every product below 2^63. */
constexpr std::uint64_t kMaxUnitSize = 4096;
constexpr std::uint64_t kMaxBatch = std::uint64_t(1) << 40;
constexpr std::uint64_t kMaxCkptEvery = std::uint64_t(1) << 32;
constexpr std::size_t kMaxPathLength = 4095;

/* The option names without the leading "--", in the order they are documented. */
const std::vector<std::string> &job_option_names();

/* Parses one option ("omni-elastic", "omni-unit", ...; value as given after '=') into `opts`.
 * Checks the value on its own (range, form); cross-option rules wait for validate(). */
Status set_job_option(JobOptions &opts, std::string_view name, std::string_view value,
                      const SiteConfig &site);

/* Cross-option rules, once all options are in: MP divides the unit size; the global batch is
 * divisible by micro-batch * d for every unit count u in MIN..MAX (d = u * N / M; the error
 * lists the failing unit counts and the nearest global batch sizes that work for the whole
 * range); the micro-batch needs a global batch; SM slices only where the site allows them;
 * a policy needs an elastic range, a site that allows policies, and cooldowns and interval at
 * or above the site's floors. */
Status validate_job_options(const JobOptions &opts, const SiteConfig &site);

/* The OMNI_* variables for a validated job, in a fixed order. Only options that were given
 * (or have a meaning by default, like OMNI_UNIT_SIZE once elastic is set) appear. */
std::vector<std::pair<std::string, std::string>> job_option_env(const JobOptions &opts,
                                                               const SiteConfig &site);

/* Reads OMNI_* variables back (the launcher's side): `get` returns nullptr for unset names.
 * Validates as set_job_option/validate_job_options do. */
Result<JobOptions> job_options_from_env(const std::function<const char *(const char *)> &get,
                                        const SiteConfig &site);

/* The site limits a job was submitted under. job_option_env writes the site's max_units as
 * OMNI_SITE_MAX_UNITS for an elastic job, so omni-launch and every rank check the job's
 * options against the limit sbatch checked them with, not against the default; and a grow
 * other than auto as OMNI_SITE_GROW. Unset: the defaults (a job submitted without the
 * plugin); a bad value is an error naming the variable.
 * Only the limits are read: topology, bind and default_domain act at submit and in
 * slurmstepd, where the plugstack arguments are at hand. */
Result<SiteConfig> site_config_from_env(const std::function<const char *(const char *)> &get);

/* The job's options as every process of the job reads them: site_config_from_env, then
 * job_options_from_env with that site. */
Result<JobOptions> job_options_from_job_env(const std::function<const char *(const char *)> &get);

/* Global batch sizes that work for every unit count of the elastic range: the multiples of
 * b * (N/M) * lcm(MIN..MAX). Returns that step, or an error when it exceeds kMaxBatch. */
Result<std::uint64_t> global_batch_step(const JobOptions &opts);

}  // namespace omni

#endif
