// Unit tests for the --omni-* option parser and validator (common/job_options.h).
// Expected values are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/job_options.h"

using namespace omni;

namespace {

// Parses "name=value" pairs then validates; returns the first error or "".
std::string run(const std::vector<std::pair<std::string, std::string>> &opts,
                const SiteConfig &site = SiteConfig(), JobOptions *out = nullptr) {
    JobOptions o;
    for (const auto &[n, v] : opts)
        if (auto st = set_job_option(o, n, v, site); !st) return st.error();
    if (auto st = validate_job_options(o, site); !st) return st.error();
    if (out) *out = o;
    return "";
}

std::map<std::string, std::string> env_of(const JobOptions &o, const SiteConfig &s = SiteConfig()) {
    std::map<std::string, std::string> m;
    for (const auto &[k, v] : job_option_env(o, s)) m[k] = v;
    return m;
}

}  // namespace

TEST(JobOptions, GoodOptionsGiveTheirEnvironment) {
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "2:8"},
                   {"omni-unit", "4@pcie"},
                   {"omni-mp", "2"},
                   // d = u*4/2 = 2u; b*d = 8u; lcm(2..8) = 840 -> B multiple of 6720
                   {"omni-global-batch", "6720"},
                   {"omni-micro-batch", "4"},
                   {"omni-ckpt", "/scratch/run1:500"}},
                  SiteConfig(), &o),
              "");
    auto env = env_of(o);
    EXPECT_EQ(env["OMNI_ELASTIC_MIN"], "2");
    EXPECT_EQ(env["OMNI_ELASTIC_MAX"], "8");
    EXPECT_EQ(env["OMNI_UNIT_SIZE"], "4");
    EXPECT_EQ(env["OMNI_UNIT_DOMAIN"], "pcie");
    EXPECT_EQ(env["OMNI_MP"], "2");
    EXPECT_EQ(env["OMNI_GLOBAL_BATCH"], "6720");
    EXPECT_EQ(env["OMNI_MICRO_BATCH"], "4");
    EXPECT_EQ(env["OMNI_CKPT_DIR"], "/scratch/run1");
    EXPECT_EQ(env["OMNI_CKPT_EVERY"], "500");
    EXPECT_EQ(env["OMNI_SITE_MAX_UNITS"], "1024");   // SiteConfig's default
    EXPECT_EQ(env.count("OMNI_SM_SLICE"), 0u);
}

TEST(JobOptions, DefaultsAndSiteDefaultDomain) {
    SiteConfig site;
    site.default_domain = "nvlink";
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "1:4"}}, site, &o), "");
    auto env = env_of(o, site);
    EXPECT_EQ(env["OMNI_UNIT_SIZE"], "1");
    EXPECT_EQ(env["OMNI_UNIT_DOMAIN"], "nvlink");
    EXPECT_EQ(env["OMNI_MP"], "1");
    JobOptions none;
    EXPECT_TRUE(job_option_env(none, site).empty());
    JobOptions ck;
    ASSERT_EQ(run({{"omni-ckpt", "/a/b"}}, site, &ck), "");
    EXPECT_EQ(env_of(ck)["OMNI_CKPT_EVERY"], "0");
    EXPECT_EQ(env_of(ck)["OMNI_CKPT_DIR"], "/a/b");
}

TEST(JobOptions, ElasticRangeBoundedBySite) {
    SiteConfig site;
    site.max_units = 16;
    EXPECT_EQ(run({{"omni-elastic", "1:16"}}, site), "");
    EXPECT_EQ(run({{"omni-elastic", "1:17"}}, site),
              "--omni-elastic=1:17: MAX: '17' is out of range; expected an integer in 1..16");
    EXPECT_EQ(run({{"omni-elastic", "0:4"}}),
              "--omni-elastic=0:4: MIN: '0' is out of range; expected an integer in 1..1024");
    EXPECT_EQ(run({{"omni-elastic", "8:2"}}),
              "--omni-elastic=8:2: MIN is greater than MAX; expected MIN:MAX with 1 <= MIN <= "
              "MAX <= 1024");
}

TEST(JobOptions, BatchNotDivisibleListsUnitCountsAndSuggests) {
    // unit 1, mp 1, b 1: d = u; B must be divisible by u for u in 1..4: lcm = 12.
    // 30 fails for u = 4 only; nearest working sizes: 24 and 36.
    EXPECT_EQ(run({{"omni-elastic", "1:4"}, {"omni-global-batch", "30"}}),
              "--omni-global-batch=30: must be divisible by micro-batch * data-parallel size for "
              "every unit count in 1..4 (d = u*1/1); it is not for u = 4 (d=4, b*d=4); nearest "
              "global batch sizes that work for the whole range: 24, 36");
    // unit 4, mp 1, b 4: b*d = 16u, u in 2..8; lcm(2..8) = 840; step 13440. 1000 fails for
    // u = 3 (48), 5 (80), 6 (96), 7 (112), 8 (128)... 1000 % 32 = 8 too, so u = 2 fails also.
    auto msg = run({{"omni-elastic", "2:8"}, {"omni-unit", "4"}, {"omni-global-batch", "1000"},
                    {"omni-micro-batch", "4"}});
    EXPECT_NE(msg.find("it is not for u = 2 (d=8, b*d=32), 3 (d=12, b*d=48)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8 (d=32, b*d=128)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nearest global batch sizes that work for the whole range: 13440"),
              std::string::npos) << msg;
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "2:8"}, {"omni-unit", "4"}, {"omni-micro-batch", "4"},
                   {"omni-global-batch", "13440"}}, SiteConfig(), &o), "");
    EXPECT_EQ(global_batch_step(o).value(), 13440u);
}

TEST(JobOptions, BatchStepOverflowIsAClearError) {
    // lcm(1..100) is far beyond 2^40.
    auto msg = run({{"omni-elastic", "1:100"}, {"omni-global-batch", "1024"}});
    EXPECT_NE(msg.find("no global batch size up to 2^40 works for every unit count in 1..100"),
              std::string::npos) << msg;
}

// b * u * (N/M) can pass 2^64 within the limits (b <= 2^40, u <= 65536 with max_units,
// N <= 4096): it wrapped to exactly 0 here, and B % 0 killed slurmstepd with SIGFPE.
TEST(JobOptions, HugeMicroBatchTimesWorldIsNotDivisible) {
    SiteConfig big;
    big.max_units = 65536;
    auto msg = run({{"omni-elastic", "4096:4096"}, {"omni-unit", "4096"},
                    {"omni-global-batch", "1099511627776"}, {"omni-micro-batch", "1099511627776"}},
                   big);
    EXPECT_NE(msg.find("it is not for u = 4096 (d=16777216, b*d=over 2^64)"), std::string::npos) << msg;
}

// The value may itself hold ": ", which must not be mistaken for the end of the quoted value.
TEST(JobOptions, ElasticErrorKeepsAValueWithAColonSpace) {
    JobOptions o;
    auto st = set_job_option(o, "omni-elastic", "1: 2", SiteConfig());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error(), "--omni-elastic=1: 2: MAX: ' 2' is not a number; expected an integer in 1..1024")
        << st.error();
}

TEST(JobOptions, CrossOptionRules) {
    EXPECT_EQ(run({{"omni-unit", "4"}, {"omni-mp", "3"}}),
              "--omni-mp=3: must divide the unit size 4 (--omni-unit=N)");
    EXPECT_EQ(run({{"omni-micro-batch", "2"}}), "--omni-micro-batch=2: needs --omni-global-batch=B");
    EXPECT_EQ(run({{"omni-global-batch", "10"}, {"omni-micro-batch", "4"}}),
              "--omni-global-batch=10: not divisible by --omni-micro-batch=4");
    EXPECT_EQ(run({{"omni-sm-slice", "50"}}),
              "--omni-sm-slice=50: SM slices are not allowed on this cluster (plugstack.conf "
              "allow_sm_slice=no)");
    SiteConfig allow;
    allow.allow_sm_slice = true;
    EXPECT_EQ(run({{"omni-sm-slice", "50"}}, allow), "");
}

TEST(JobOptions, BadSingleValues) {
    SiteConfig allow;
    allow.allow_sm_slice = true;
    const std::vector<std::tuple<std::string, std::string, std::string>> cases{
        {"omni-elastic", "", "--omni-elastic=: expected MIN:MAX"},
        {"omni-elastic", "-1:4", "MIN: '-1' is not a number"},
        {"omni-elastic", "18446744073709551616:1", "MIN: '18446744073709551616' is too large"},
        {"omni-elastic", "2:4x", "MAX: '4x' is not a number"},
        {"omni-unit", "0", "--omni-unit=0: N: '0' is out of range"},
        {"omni-unit", "4@rack", "--omni-unit=4@rack: DOMAIN: 'rack': expected one of pcie|nvlink|numa|node|any"},
        {"omni-unit", "@pcie", "N: empty value"},
        {"omni-unit", "4@", "DOMAIN: '': expected one of"},
        {"omni-mp", "0", "--omni-mp=0: '0' is out of range"},
        {"omni-global-batch", "1e6", "'1e6' is not a number"},
        {"omni-micro-batch", "0", "'0' is out of range"},
        {"omni-sm-slice", "0", "--omni-sm-slice=0: '0' is out of range; expected an integer in 1..100"},
        {"omni-sm-slice", "101", "'101' is out of range; expected an integer in 1..100"},
        {"omni-ckpt", "ckpt", "--omni-ckpt=ckpt: DIR must be an absolute path"},
        {"omni-ckpt", "/ckpt:0", "EVERY: '0' is out of range"},
        {"omni-ckpt", "/ckpt:", "EVERY: empty value"},
        {"omni-ckpt", "", "DIR must be an absolute path"},
    };
    for (const auto &[name, value, want] : cases) {
        JobOptions o;
        auto st = set_job_option(o, name, value, allow);
        ASSERT_FALSE(st.ok()) << name << "=" << value << " accepted";
        EXPECT_NE(st.error().find(want), std::string::npos)
            << name << "=" << value << ": got: " << st.error() << "\nwant: " << want;
    }
    JobOptions o;
    auto nl = set_job_option(o, "omni-ckpt", std::string("/a\nb"), allow);
    ASSERT_FALSE(nl.ok());
    EXPECT_NE(nl.error().find("control character"), std::string::npos) << nl.error();
}

TEST(JobOptions, CkptDirMayContainColons) {
    JobOptions o;
    ASSERT_TRUE(set_job_option(o, "omni-ckpt", "/data/run:a/x", SiteConfig()).ok());
    EXPECT_EQ(*o.ckpt_dir, "/data/run:a/x");
    EXPECT_EQ(o.ckpt_every, 0u);
}

TEST(SiteConfig, ParsesAndRejects) {
    auto s = parse_site_config({"topology=/etc/omni/site.json", "bind=no", "allow_sm_slice=yes",
                                "max_units=64", "default_domain=pcie"});
    ASSERT_TRUE(s.ok()) << s.error();
    EXPECT_EQ(s.value().topology, "/etc/omni/site.json");
    EXPECT_FALSE(s.value().bind);
    EXPECT_TRUE(s.value().allow_sm_slice);
    EXPECT_EQ(s.value().max_units, 64u);
    EXPECT_EQ(s.value().default_domain, "pcie");
    auto d = parse_site_config({});
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value().max_units, 1024u);
    EXPECT_TRUE(d.value().bind);
    EXPECT_EQ(parse_site_config({"colour=blue"}).error(),
              "plugstack.conf: unknown key 'colour' in 'colour=blue'; expected one of topology, "
              "bind, allow_sm_slice, max_units, default_domain, policy, policy_min_cooldown, "
              "policy_min_interval, grow");
    EXPECT_EQ(d.value().grow, "auto");
    EXPECT_EQ(parse_site_config({"grow=expand"}).value().grow, "expand");
    EXPECT_FALSE(parse_site_config({"grow=elsewhere"}).ok());
    EXPECT_EQ(parse_site_config({"max_units=0"}).error(),
              "plugstack.conf: max_units: '0' is out of range; expected an integer in 1..65536");
    EXPECT_EQ(parse_site_config({"topology=site.json"}).error(),
              "plugstack.conf: topology: 'site.json': expected an absolute path");
    EXPECT_FALSE(parse_site_config({"default_domain=rack"}).ok());
    EXPECT_FALSE(parse_site_config({"bind=maybe"}).ok());
}

TEST(JobOptions, EnvironmentRoundTrip) {
    JobOptions o;
    SiteConfig site;
    ASSERT_EQ(run({{"omni-elastic", "1:3"}, {"omni-unit", "2@numa"}, {"omni-global-batch", "12"},
                   {"omni-ckpt", "/c:10"}}, site, &o), "");
    auto env = env_of(o);
    auto back = job_options_from_env(
        [&](const char *k) -> const char * {
            auto it = env.find(k);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        site);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(env_of(back.value()), env);
    env["OMNI_MP"] = "3";
    auto bad = job_options_from_env(
        [&](const char *k) -> const char * {
            auto it = env.find(k);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        site);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error(), "--omni-mp=3: must divide the unit size 2 (--omni-unit=N)");
}

// A site limit above the default travels with the job: the job's own environment, read back
// as omni-launch and the ranks read it, accepts the range sbatch accepted; with the site
// variable gone the default limit (1024) refuses it.
TEST(JobOptions, SiteLimitTravelsInTheEnvironment) {
    SiteConfig site;
    site.max_units = 4096;
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "1:2048"}}, site, &o), "");
    auto env = env_of(o, site);
    EXPECT_EQ(env["OMNI_SITE_MAX_UNITS"], "4096");
    auto get = [&](const char *k) -> const char * {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    auto back = job_options_from_job_env(get);
    ASSERT_TRUE(back.ok()) << back.error();
    ASSERT_TRUE(back.value().elastic.has_value());
    EXPECT_EQ(back.value().elastic->second, 2048u);

    env.erase("OMNI_SITE_MAX_UNITS");
    auto dflt = job_options_from_job_env(get);
    ASSERT_FALSE(dflt.ok());
    EXPECT_NE(dflt.error().find("1..1024"), std::string::npos) << dflt.error();

    for (const char *badv : {"0", "65537", "abc", "-1", ""}) {
        env["OMNI_SITE_MAX_UNITS"] = badv;
        auto bad = job_options_from_job_env(get);
        ASSERT_FALSE(bad.ok()) << badv;
        EXPECT_EQ(bad.error().rfind("OMNI_SITE_MAX_UNITS", 0), 0u) << bad.error();
    }
    EXPECT_EQ(site_config_from_env([](const char *) -> const char * { return nullptr; }).value().max_units,
              1024u);
}

// plugstack.conf grow= reaches omni-launch in the job's environment, only when it is not the
// default; a bad value read back is an error naming the variable.
TEST(JobOptions, SiteGrowTravelsInTheEnvironment) {
    SiteConfig site;
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "1:4"}}, site, &o), "");
    EXPECT_EQ(env_of(o, site).count("OMNI_SITE_GROW"), 0u);
    site.grow = "satellite";
    auto env = env_of(o, site);
    EXPECT_EQ(env["OMNI_SITE_GROW"], "satellite");
    auto get = [&](const char *k) -> const char * {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    auto back = site_config_from_env(get);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value().grow, "satellite");
    env["OMNI_SITE_GROW"] = "elsewhere";
    auto bad = site_config_from_env(get);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().rfind("OMNI_SITE_GROW", 0), 0u) << bad.error();
    EXPECT_EQ(site_config_from_env([](const char *) -> const char * { return nullptr; }).value().grow, "auto");
}

TEST(JobOptions, SiteLimitRefusesAboveIt) {
    SiteConfig site;
    site.max_units = 4096;
    const std::string e = run({{"omni-elastic", "1:4097"}}, site);
    EXPECT_NE(e.find("--omni-elastic=1:4097"), std::string::npos) << e;
    EXPECT_NE(e.find("4096"), std::string::npos) << e;
}

// --omni-policy: the canonical text in the environment, the keys and their bounds, and the
// site's say (policy=deny, the floors), worked out from job_options.h.
TEST(JobOptions, PolicyOptionAndItsEnvironment) {
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "1:4"}, {"omni-policy", "auto"}}, SiteConfig(), &o), "");
    ASSERT_TRUE(o.policy);
    EXPECT_EQ(env_of(o)["OMNI_POLICY"],
              "auto,grow_cooldown=180,shrink_cooldown=600,grow_after=60,shrink_after=30,interval=10");
    ASSERT_EQ(run({{"omni-elastic", "1:4"}, {"omni-policy", "auto,shrink_after=5,grow_cooldown=300"}},
                  SiteConfig(), &o), "");
    EXPECT_EQ(o.policy->shrink_after, 5u);
    EXPECT_EQ(o.policy->grow_cooldown, 300u);
    EXPECT_EQ(o.policy->shrink_cooldown, 600u);
    ASSERT_EQ(run({{"omni-elastic", "1:4"}, {"omni-policy", "none"}}, SiteConfig(), &o), "");
    EXPECT_FALSE(o.policy);
    EXPECT_EQ(env_of(o).count("OMNI_POLICY"), 0u);
}

TEST(JobOptions, PolicyRefusals) {
    const std::vector<std::pair<std::string, std::string>> el = {{"omni-elastic", "1:4"}};
    auto with = [&](const std::string &v, const SiteConfig &site = SiteConfig()) {
        auto opts = el;
        opts.emplace_back("omni-policy", v);
        return run(opts, site);
    };
    EXPECT_EQ(with("always"), "--omni-policy=always: 'always': expected auto or none (form auto[,KEY=SECONDS...])");
    EXPECT_EQ(with("none,interval=5"), "--omni-policy=none,interval=5: 'none' takes no settings");
    EXPECT_EQ(with("auto,speed=9"),
              "--omni-policy=auto,speed=9: unknown key 'speed' in 'speed=9'; expected one of grow_cooldown, "
              "shrink_cooldown, grow_after, shrink_after, interval");
    EXPECT_EQ(with("auto,interval=0"),
              "--omni-policy=auto,interval=0: interval: '0' is out of range; expected an integer in 1..3600");
    EXPECT_EQ(with("auto,grow_after=86401"),
              "--omni-policy=auto,grow_after=86401: grow_after: '86401' is out of range; expected an integer "
              "in 0..86400");
    EXPECT_EQ(with("auto,grow_after=1,grow_after=2"),
              "--omni-policy=auto,grow_after=1,grow_after=2: key 'grow_after' given twice");
    EXPECT_EQ(with("auto,"), "--omni-policy=auto,: argument '': expected key=value with key one of "
                             "grow_cooldown, shrink_cooldown, grow_after, shrink_after, interval");
    EXPECT_EQ(run({{"omni-policy", "auto"}}),
              "--omni-policy=auto: needs --omni-elastic=MIN:MAX (a policy resizes the job within that range)");
    auto deny = parse_site_config({"policy=deny"});
    ASSERT_TRUE(deny.ok()) << deny.error();
    EXPECT_EQ(with("auto", deny.value()),
              "--omni-policy=auto: elastic policies are not allowed on this cluster (plugstack.conf policy=deny)");
    EXPECT_EQ(with("none", deny.value()), "") << "none is always allowed";
    EXPECT_EQ(with("auto,shrink_cooldown=30"),
              "--omni-policy=auto: shrink_cooldown=30 is below this cluster's minimum 60 s (plugstack.conf "
              "policy_min_cooldown)");
    EXPECT_EQ(with("auto,interval=2"),
              "--omni-policy=auto: interval=2 is below this cluster's minimum 5 s (plugstack.conf "
              "policy_min_interval)");
    auto low = parse_site_config({"policy_min_cooldown=0", "policy_min_interval=1"});
    ASSERT_TRUE(low.ok()) << low.error();
    EXPECT_EQ(with("auto,grow_cooldown=0,shrink_cooldown=0,interval=1", low.value()), "");
    EXPECT_FALSE(parse_site_config({"policy=maybe"}).ok());
    EXPECT_FALSE(parse_site_config({"policy_min_interval=0"}).ok());
    EXPECT_FALSE(parse_site_config({"policy_min_cooldown=86401"}).ok());
}

// The launcher reads the policy back after submission, where the site's floors are unknown:
// what sbatch accepted under a low floor still reads back; a bad value does not.
TEST(JobOptions, PolicyReadsBackFromTheEnvironment) {
    auto low = parse_site_config({"policy_min_cooldown=0", "policy_min_interval=1"});
    ASSERT_TRUE(low.ok());
    JobOptions o;
    ASSERT_EQ(run({{"omni-elastic", "1:4"}, {"omni-policy", "auto,grow_cooldown=5,interval=1"}}, low.value(), &o), "");
    auto env = env_of(o, low.value());
    auto get = [&](const char *k) -> const char * {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    auto back = job_options_from_job_env(get);
    ASSERT_TRUE(back.ok()) << back.error();
    ASSERT_TRUE(back.value().policy);
    EXPECT_EQ(back.value().policy->grow_cooldown, 5u);
    EXPECT_EQ(back.value().policy->interval, 1u);
    env["OMNI_POLICY"] = "auto,interval=x";
    auto bad = job_options_from_job_env(get);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("interval"), std::string::npos) << bad.error();
}
