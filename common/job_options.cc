// The --omni-* job options: parsing, cross-option validation and the OMNI_* environment.
// See common/job_options.h for the contract.
#include "common/job_options.h"

#include <algorithm>

#include "common/parse.h"

namespace omni {
namespace {

std::string opt_label(std::string_view name, std::string_view value) {
    std::string v(value.substr(0, 64));
    if (value.size() > 64) v += "...";
    return "--" + std::string(name) + "=" + v;
}

// Strips the "what: " prefix that parse_* put in front so that one message names the option
// once, in the --name=value form the user typed.
Status fail(std::string_view name, std::string_view value, const std::string &why) {
    return make_error(opt_label(name, value) + ": " + why);
}

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

std::uint64_t gcd(std::uint64_t a, std::uint64_t b) {
    while (b) {
        const std::uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

std::string range_text(const JobOptions &o) {
    return std::to_string(o.elastic->first) + ".." + std::to_string(o.elastic->second);
}

// The keys of --omni-policy=auto,KEY=S and where each lands; the order is policy_text's.
struct PolicyKey {
    const char *name;
    std::uint64_t PolicyOptions::*field;
    std::uint64_t min, max;
};
const PolicyKey kPolicyKeys[] = {
    {"grow_cooldown", &PolicyOptions::grow_cooldown, 0, kMaxPolicySeconds},
    {"shrink_cooldown", &PolicyOptions::shrink_cooldown, 0, kMaxPolicySeconds},
    {"grow_after", &PolicyOptions::grow_after, 0, kMaxPolicySeconds},
    {"shrink_after", &PolicyOptions::shrink_after, 0, kMaxPolicySeconds},
    {"interval", &PolicyOptions::interval, 1, kMaxPolicyInterval},
};

// "none" | "auto[,KEY=S...]". Returns nullopt for none.
Result<std::optional<PolicyOptions>> parse_policy(std::string_view value) {
    const auto comma = value.find(',');
    const std::string_view mode = value.substr(0, comma);
    if (mode == "none") {
        if (comma != std::string_view::npos) return make_error("'none' takes no settings");
        return std::optional<PolicyOptions>();
    }
    if (mode != "auto") return make_error(quoted(mode) + ": expected auto or none (form auto[,KEY=SECONDS...])");
    PolicyOptions p;
    std::vector<std::string> items;
    std::size_t pos = comma;
    while (pos != std::string_view::npos) {
        const std::size_t next = value.find(',', pos + 1);
        items.emplace_back(value.substr(pos + 1, next == std::string_view::npos ? next : next - pos - 1));
        pos = next;
    }
    std::vector<std::string> names;
    for (const auto &k : kPolicyKeys) names.push_back(k.name);
    auto kvs = parse_key_values(items, names, "");
    if (!kvs) {
        const std::string &e = kvs.error();
        return make_error(e.rfind(": ", 0) == 0 ? e.substr(2) : e);
    }
    for (const auto &kv : kvs.value())
        for (const auto &k : kPolicyKeys)
            if (kv.key == k.name) {
                auto n = parse_uint(kv.value, k.min, k.max, kv.key);
                if (!n) return Error{n.error()};
                p.*(k.field) = n.value();
            }
    return std::optional<PolicyOptions>(p);
}

}  // namespace

std::string policy_text(const PolicyOptions &p) {
    std::string out = "auto";
    for (const auto &k : kPolicyKeys) out += "," + std::string(k.name) + "=" + std::to_string(p.*(k.field));
    return out;
}

const std::vector<std::string> &domain_kinds() {
    static const std::vector<std::string> kinds{"pcie", "nvlink", "numa", "node", "any"};
    return kinds;
}

const std::vector<std::string> &job_option_names() {
    static const std::vector<std::string> names{
        "omni-elastic",      "omni-unit",     "omni-mp",   "omni-global-batch",
        "omni-micro-batch", "omni-sm-slice", "omni-ckpt",         "omni-policy"};
    return names;
}

Result<SiteConfig> parse_site_config(const std::vector<std::string> &args) {
    static const std::vector<std::string> keys{"topology",       "bind",
                                               "allow_sm_slice", "max_units",
                                               "default_domain", "policy",
                                               "policy_min_cooldown", "policy_min_interval",
                                               "grow"};
    auto kvs = parse_key_values(args, keys, "plugstack.conf");
    if (!kvs) return Error{kvs.error()};
    SiteConfig site;
    for (const auto &kv : kvs.value()) {
        const std::string what = "plugstack.conf: " + kv.key;
        if (kv.key == "topology") {
            if (kv.value.empty() || kv.value[0] != '/' || kv.value.size() > kMaxPathLength)
                return make_error(what + ": " + quoted(kv.value) + ": expected an absolute path");
            site.topology = kv.value;
        } else if (kv.key == "bind" || kv.key == "allow_sm_slice") {
            auto b = parse_yes_no(kv.value, what);
            if (!b) return Error{b.error()};
            (kv.key == "bind" ? site.bind : site.allow_sm_slice) = b.value();
        } else if (kv.key == "max_units") {
            auto n = parse_uint(kv.value, 1, 65536, what);
            if (!n) return Error{n.error()};
            site.max_units = n.value();
        } else if (kv.key == "policy") {
            auto p = parse_choice(kv.value, {"allow", "deny"}, what);
            if (!p) return Error{p.error()};
            site.allow_policy = p.value() == "allow";
        } else if (kv.key == "grow") {
            auto g = parse_choice(kv.value, {"auto", "satellite", "expand"}, what);
            if (!g) return Error{g.error()};
            site.grow = g.value();
        } else if (kv.key == "policy_min_cooldown" || kv.key == "policy_min_interval") {
            const bool cd = kv.key == "policy_min_cooldown";
            auto n = parse_uint(kv.value, cd ? 0 : 1, cd ? kMaxPolicySeconds : kMaxPolicyInterval, what);
            if (!n) return Error{n.error()};
            (cd ? site.policy_min_cooldown : site.policy_min_interval) = n.value();
        } else {  // default_domain
            auto d = parse_choice(kv.value, domain_kinds(), what);
            if (!d) return Error{d.error()};
            site.default_domain = d.value();
        }
    }
    return site;
}

Status set_job_option(JobOptions &o, std::string_view name, std::string_view value,
                      const SiteConfig &site) {
    if (value.size() > kMaxValueLength) return fail(name, value, "value too long");
    if (name == "omni-elastic") {
        auto r = parse_range(value, ':', 1, site.max_units, "");
        if (!r) {
            // The error starts with the quoted value, which fail() shows already; cut exactly
            // that (the value itself may hold ": ").
            const std::string head = quoted(value) + ": ";
            const std::string &e = r.error();
            return fail(name, value, e.rfind(head, 0) == 0 ? e.substr(head.size()) : e);
        }
        o.elastic = r.value();
    } else if (name == "omni-unit") {
        const auto at = value.find('@');
        auto n = parse_uint(value.substr(0, at), 1, kMaxUnitSize, "");
        if (!n) return fail(name, value, "N: " + n.error() + " (form N[@DOMAIN])");
        if (at != std::string_view::npos) {
            auto d = parse_choice(value.substr(at + 1), domain_kinds(), "");
            if (!d) return fail(name, value, "DOMAIN: " + d.error().substr(d.error().find('\'')));
            o.unit_domain = d.value();
        }
        o.unit_size = n.value();
        o.unit_given = true;
    } else if (name == "omni-mp") {
        auto m = parse_uint(value, 1, kMaxUnitSize, "");
        if (!m) return fail(name, value, m.error());
        o.mp = m.value();
        o.mp_given = true;
    } else if (name == "omni-global-batch") {
        auto b = parse_uint(value, 1, kMaxBatch, "");
        if (!b) return fail(name, value, b.error());
        o.global_batch = b.value();
    } else if (name == "omni-micro-batch") {
        auto b = parse_uint(value, 1, kMaxBatch, "");
        if (!b) return fail(name, value, b.error());
        o.micro_batch = b.value();
    } else if (name == "omni-sm-slice") {
        auto p = parse_uint(value, 1, 100, "");
        if (!p) return fail(name, value, p.error() + " (percent of a GPU's SMs)");
        o.sm_slice = p.value();
    } else if (name == "omni-ckpt") {
        // DIR[:EVERY]: EVERY is the part after the last ':' when it is all digits.
        std::string_view dir = value;
        std::uint64_t every = 0;
        const auto colon = value.rfind(':');
        if (colon != std::string_view::npos) {
            const auto tail = value.substr(colon + 1);
            const bool digits = !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) {
                return c >= '0' && c <= '9';
            });
            if (digits || tail.empty()) {
                auto e = parse_uint(tail, 1, kMaxCkptEvery, "");
                if (!e) return fail(name, value, "EVERY: " + e.error() + " (form DIR[:EVERY])");
                every = e.value();
                dir = value.substr(0, colon);
            }
        }
        if (dir.empty() || dir[0] != '/')
            return fail(name, value, "DIR must be an absolute path (form DIR[:EVERY])");
        if (dir.size() > kMaxPathLength)
            return fail(name, value, "DIR is longer than " + std::to_string(kMaxPathLength));
        if (auto st = check_env_value("DIR", dir); !st) return fail(name, value, st.error());
        o.ckpt_dir = std::string(dir);
        o.ckpt_every = every;
    } else if (name == "omni-policy") {
        auto p = parse_policy(value);
        if (!p) return fail(name, value, p.error());
        o.policy = p.value();
    } else {
        return make_error("--" + std::string(name.substr(0, 64)) + ": not an slurm-omni option");
    }
    return Status::success();
}

Result<std::uint64_t> global_batch_step(const JobOptions &o) {
    // B must be a multiple of b * d_u = b * u * (N/M) for every u, i.e. of b*(N/M)*lcm(u).
    std::uint64_t l = 1;
    for (std::uint64_t u = o.elastic->first; u <= o.elastic->second; ++u) {
        const std::uint64_t g = gcd(l, u);
        if (mul_overflows(l / g, u, &l) || l > kMaxBatch)
            return make_error("no global batch size up to 2^40 works for every unit count in " +
                              range_text(o) + "; narrow --omni-elastic");
    }
    std::uint64_t step = 0;
    const std::uint64_t b = o.micro_batch.value_or(1);
    if (mul_overflows(l, b * (o.unit_size / o.mp), &step) || step > kMaxBatch)
        return make_error("no global batch size up to 2^40 works for every unit count in " +
                          range_text(o) + "; narrow --omni-elastic");
    return step;
}

Status validate_job_options(const JobOptions &o, const SiteConfig &site) {
    if (o.unit_size % o.mp != 0)
        return make_error("--omni-mp=" + std::to_string(o.mp) + ": must divide the unit size " +
                          std::to_string(o.unit_size) + " (--omni-unit=N)");
    if (o.micro_batch && !o.global_batch)
        return make_error("--omni-micro-batch=" + std::to_string(*o.micro_batch) +
                          ": needs --omni-global-batch=B");
    if (o.sm_slice && !site.allow_sm_slice)
        return make_error("--omni-sm-slice=" + std::to_string(*o.sm_slice) +
                          ": SM slices are not allowed on this cluster (plugstack.conf "
                          "allow_sm_slice=no)");
    if (o.policy) {
        const std::string pl = "--omni-policy=auto";
        if (!o.elastic)
            return make_error(pl + ": needs --omni-elastic=MIN:MAX (a policy resizes the job within that range)");
        if (!site.allow_policy)
            return make_error(pl + ": elastic policies are not allowed on this cluster (plugstack.conf policy=deny)");
        for (auto [key, v] : {std::pair{"grow_cooldown", o.policy->grow_cooldown},
                              std::pair{"shrink_cooldown", o.policy->shrink_cooldown}})
            if (v < site.policy_min_cooldown)
                return make_error(pl + ": " + key + "=" + std::to_string(v) + " is below this cluster's minimum " +
                                  std::to_string(site.policy_min_cooldown) + " s (plugstack.conf policy_min_cooldown)");
        if (o.policy->interval < site.policy_min_interval)
            return make_error(pl + ": interval=" + std::to_string(o.policy->interval) +
                              " is below this cluster's minimum " + std::to_string(site.policy_min_interval) +
                              " s (plugstack.conf policy_min_interval)");
    }
    if (o.global_batch) {
        const std::uint64_t B = *o.global_batch, b = o.micro_batch.value_or(1);
        const std::string bl = "--omni-global-batch=" + std::to_string(B);
        if (B % b != 0)
            return make_error(bl + ": not divisible by --omni-micro-batch=" + std::to_string(b));
        if (o.elastic) {
            const std::uint64_t per_unit = o.unit_size / o.mp;
            std::vector<std::string> bad;
            std::size_t nbad = 0;
            for (std::uint64_t u = o.elastic->first; u <= o.elastic->second; ++u) {
                // b * u * per_unit reaches 2^68 (b <= 2^40, u <= 2^16, per_unit <= 2^12) and
                // could wrap to 0 (SIGFPE below, in slurmstepd): past 2^64 it exceeds B anyway.
                std::uint64_t need = 0;
                if (mul_overflows(b, u * per_unit, &need) || B % need != 0) {
                    if (++nbad <= 12)
                        bad.push_back(std::to_string(u) + " (d=" + std::to_string(u * per_unit) + ", b*d=" +
                                      (need ? std::to_string(need) : std::string("over 2^64")) + ")");
                }
            }
            if (nbad) {
                std::string msg = bl + ": must be divisible by micro-batch * data-parallel size "
                                  "for every unit count in " + range_text(o) + " (d = u*" +
                                  std::to_string(o.unit_size) + "/" + std::to_string(o.mp) +
                                  "); it is not for u = " + join(bad, ", ");
                if (nbad > bad.size())
                    msg += " and " + std::to_string(nbad - bad.size()) + " more";
                auto step = global_batch_step(o);
                if (!step) return make_error(msg + "; " + step.error());
                const std::uint64_t s = step.value();
                std::vector<std::string> near;
                if (B / s > 0) near.push_back(std::to_string(B / s * s));
                if (B / s + 1 <= kMaxBatch / s) near.push_back(std::to_string((B / s + 1) * s));
                msg += "; nearest global batch sizes that work for the whole range: " +
                       join(near, ", ");
                return make_error(msg);
            }
        } else if (B % (b * (o.unit_size / o.mp)) != 0) {
            return make_error(bl + ": not divisible by micro-batch * ranks per unit / mp = " +
                              std::to_string(b * (o.unit_size / o.mp)));
        }
    }
    return Status::success();
}

std::vector<std::pair<std::string, std::string>> job_option_env(const JobOptions &o,
                                                               const SiteConfig &site) {
    std::vector<std::pair<std::string, std::string>> env;
    if (o.elastic) {
        env.emplace_back("OMNI_ELASTIC_MIN", std::to_string(o.elastic->first));
        env.emplace_back("OMNI_ELASTIC_MAX", std::to_string(o.elastic->second));
        env.emplace_back("OMNI_SITE_MAX_UNITS", std::to_string(site.max_units));
        if (site.grow != "auto") env.emplace_back("OMNI_SITE_GROW", site.grow);
    }
    if (o.elastic || o.unit_given) {
        env.emplace_back("OMNI_UNIT_SIZE", std::to_string(o.unit_size));
        env.emplace_back("OMNI_UNIT_DOMAIN", o.unit_domain.value_or(site.default_domain));
    }
    if (o.elastic || o.mp_given) env.emplace_back("OMNI_MP", std::to_string(o.mp));
    if (o.global_batch) {
        env.emplace_back("OMNI_GLOBAL_BATCH", std::to_string(*o.global_batch));
        env.emplace_back("OMNI_MICRO_BATCH", std::to_string(o.micro_batch.value_or(1)));
    }
    if (o.sm_slice) env.emplace_back("OMNI_SM_SLICE", std::to_string(*o.sm_slice));
    if (o.ckpt_dir) {
        env.emplace_back("OMNI_CKPT_DIR", *o.ckpt_dir);
        env.emplace_back("OMNI_CKPT_EVERY", std::to_string(o.ckpt_every));
    }
    if (o.policy) env.emplace_back("OMNI_POLICY", policy_text(*o.policy));
    return env;
}

Result<JobOptions> job_options_from_env(const std::function<const char *(const char *)> &get,
                                        const SiteConfig &site) {
    JobOptions o;
    auto num = [&](const char *var, const char *opt) -> Status {
        const char *v = get(var);
        if (!v) return Status::success();
        return set_job_option(o, opt, v, site);
    };
    const char *mn = get("OMNI_ELASTIC_MIN"), *mx = get("OMNI_ELASTIC_MAX");
    if ((mn == nullptr) != (mx == nullptr))
        return make_error("OMNI_ELASTIC_MIN and OMNI_ELASTIC_MAX must be set together");
    if (mn) {
        if (auto st = set_job_option(o, "omni-elastic", std::string(mn) + ":" + mx, site); !st)
            return Error{st.error()};
    }
    if (const char *n = get("OMNI_UNIT_SIZE")) {
        std::string unit = n;
        if (const char *d = get("OMNI_UNIT_DOMAIN")) unit += std::string("@") + d;
        if (auto st = set_job_option(o, "omni-unit", unit, site); !st) return Error{st.error()};
    }
    for (auto [var, opt] : {std::pair{"OMNI_MP", "omni-mp"},
                            std::pair{"OMNI_GLOBAL_BATCH", "omni-global-batch"},
                            std::pair{"OMNI_MICRO_BATCH", "omni-micro-batch"},
                            std::pair{"OMNI_SM_SLICE", "omni-sm-slice"}}) {
        if (auto st = num(var, opt); !st) return Error{st.error()};
    }
    if (const char *d = get("OMNI_CKPT_DIR")) {
        std::string v = d;
        const char *e = get("OMNI_CKPT_EVERY");
        if (e && std::string_view(e) != "0") v += std::string(":") + e;
        if (auto st = set_job_option(o, "omni-ckpt", v, site); !st) return Error{st.error()};
    }
    if (const char *p = get("OMNI_POLICY")) {
        if (auto st = set_job_option(o, "omni-policy", p, site); !st) return Error{st.error()};
    }
    // The environment is read after submission: SM slices and the policy were checked against
    // the site's plugstack.conf then, which the launcher does not see.
    SiteConfig lenient = site;
    lenient.allow_sm_slice = true;
    lenient.allow_policy = true;
    lenient.policy_min_cooldown = 0;
    lenient.policy_min_interval = 1;
    if (auto st = validate_job_options(o, lenient); !st) return Error{st.error()};
    return o;
}

Result<SiteConfig> site_config_from_env(const std::function<const char *(const char *)> &get) {
    SiteConfig site;
    if (const char *v = get("OMNI_SITE_MAX_UNITS")) {
        // The same bounds as plugstack.conf's max_units.
        auto n = parse_uint(v, 1, 65536, "OMNI_SITE_MAX_UNITS");
        if (!n) return Error{n.error()};
        site.max_units = n.value();
    }
    if (const char *v = get("OMNI_SITE_GROW")) {
        auto g = parse_choice(v, {"auto", "satellite", "expand"}, "OMNI_SITE_GROW");
        if (!g) return Error{g.error()};
        site.grow = g.value();
    }
    return site;
}

Result<JobOptions> job_options_from_job_env(const std::function<const char *(const char *)> &get) {
    auto site = site_config_from_env(get);
    if (!site) return Error{site.error()};
    return job_options_from_env(get, site.value());
}

}  // namespace omni
