// Unit tests for omni-launch's pure parts: command line, settings, allocation, srun command
// lines, the per-task unit mapping, node addresses and the events file.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch/bind.h"
#include "launch/events.h"
#include "launch/metrics.h"
#include "launch/options.h"
#include "launch/plan.h"
#include "launch/background.h"
#include "launch/expansion.h"
#include "launch/satellite.h"

using namespace omni::launcher;

namespace {

std::map<std::string, std::string> g_env;
const char *fake_env(const char *name) {
    auto it = g_env.find(name);
    return it == g_env.end() ? nullptr : it->second.c_str();
}

ParsedCommandLine parse(std::vector<std::string> args) {
    args.insert(args.begin(), "omni-launch");
    std::vector<const char *> argv;
    for (auto &a : args) argv.push_back(a.c_str());
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST(LaunchOptions, HelpAndProgram) {
    auto h = parse({"--help"});
    EXPECT_EQ(h.exit_code, 0);
    EXPECT_NE(h.text.find("--srun-args"), std::string::npos);
    EXPECT_NE(h.text.find("--boundary-timeout"), std::string::npos);
    // The program's own options stay the program's, even when they look like ours.
    auto p = parse({"--units", "4", "--", "./train", "--units", "9", "--help"});
    ASSERT_EQ(p.exit_code, -1) << p.text;
    EXPECT_EQ(*p.options.units, 4u);
    EXPECT_EQ(p.options.program, (std::vector<std::string>{"./train", "--units", "9", "--help"}));
    EXPECT_EQ(p.options.boundary_timeout_ms, 30000);
}

TEST(LaunchOptions, UsageErrorsNameTheOption) {
    struct Case {
        std::vector<std::string> args;
        std::string needle;
    };
    for (const auto &c : std::vector<Case>{
             {{"./train"}, "PROGRAM is required after '--'"},
             {{"--"}, "PROGRAM is required"},
             {{"--units", "0", "--", "x"}, "--units"},
             {{"--units", "3x", "--", "x"}, "expected --units K"},
             {{"--unit-size", "-1", "--", "x"}, "--unit-size"},
             {{"--boundary-timeout", "0", "--", "x"}, "expected --boundary-timeout SECONDS"},
             {{"--bind", "0.0.0.0", "--", "x"}, "wildcard"},
             {{"--bind", "node1", "--", "x"}, "expected a literal IPv4 address"},
             {{"--job-dir", "rel", "--", "x"}, "absolute path"},
             {{"--srun-args", "-n 4", "--", "x"}, "'-n' is set by omni-launch"},
             {{"--srun-args", "--gres='gpu:1", "--", "x"}, "unbalanced single quote"},
             {{"--satellite-args", "--job-name=x", "--", "x"}, "--satellite-args: '--job-name=x' is set by omni-launch"},
             {{"--satellite", "--dry-run", "--", "x"}, "--satellite and --dry-run"},
             {{"--mpi", "pmi2", "--", "x"}, "--mpi 'pmi2': expected auto, pmix or none"},
             {{"--mpi", "", "--", "x"}, "--mpi '': expected auto, pmix or none"},
             {{"--frobnicate", "--", "x"}, "frobnicate"},
         }) {
        auto p = parse(c.args);
        EXPECT_EQ(p.exit_code, 2) << c.args.front();
        EXPECT_NE(p.text.find(c.needle), std::string::npos) << p.text;
    }
}

// --mpi, OMNI_LAUNCH_MPI and auto (launch/plan.h). Fails if a bad value passed, the option
// stopped winning over the variable, or auto stopped falling back to none.
TEST(LaunchOptions, MpiMode) {
    g_env.clear();
    auto p = parse({"--", "x"});
    ASSERT_EQ(p.exit_code, -1) << p.text;
    EXPECT_EQ(p.options.mpi, "");
    EXPECT_EQ(mpi_mode_setting(p.options, fake_env).value(), "auto");
    g_env[kEnvLaunchMpi] = "";
    EXPECT_EQ(mpi_mode_setting(p.options, fake_env).value(), "auto");
    g_env[kEnvLaunchMpi] = "none";
    EXPECT_EQ(mpi_mode_setting(p.options, fake_env).value(), "none");
    for (const char *m : {"auto", "pmix", "none"}) {
        auto q = parse({"--mpi", m, "--", "x"});
        ASSERT_EQ(q.exit_code, -1) << q.text;
        EXPECT_EQ(mpi_mode_setting(q.options, fake_env).value(), m);  // the option wins
    }
    g_env[kEnvLaunchMpi] = "PMIx";
    auto bad = mpi_mode_setting(p.options, fake_env);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("OMNI_LAUNCH_MPI 'PMIx': expected auto, pmix or none"), std::string::npos)
        << bad.error();
    g_env.clear();
    // auto: what srun --mpi=list said; none when it could not be asked.
    EXPECT_EQ(resolve_mpi("auto", true, fake_env).value(), "pmix");
    EXPECT_EQ(resolve_mpi("auto", false, fake_env).value(), "none");
    EXPECT_EQ(resolve_mpi("auto", std::nullopt, fake_env).value(), "none");
    EXPECT_EQ(resolve_mpi("pmix", false, fake_env).value(), "pmix");  // as asked: srun says the rest
    EXPECT_EQ(resolve_mpi("none", true, fake_env).value(), "none");
    // Ranks told to wire up through PMIx only cannot start without it.
    g_env["OMNI_MP_WIREUP"] = "pmix";
    auto clash = resolve_mpi("auto", false, fake_env);
    ASSERT_FALSE(clash);
    EXPECT_NE(clash.error().find("OMNI_MP_WIREUP=pmix"), std::string::npos) << clash.error();
    EXPECT_NE(clash.error().find("srun --mpi=list offers no pmix"), std::string::npos) << clash.error();
    EXPECT_FALSE(resolve_mpi("none", true, fake_env));
    EXPECT_EQ(resolve_mpi("pmix", false, fake_env).value(), "pmix");
    g_env["OMNI_MP_WIREUP"] = "coordinator";
    EXPECT_EQ(resolve_mpi("none", true, fake_env).value(), "none");
    g_env.clear();
}

// `srun --mpi=list` as Slurm 22.05 (Debian 12, with pmix), 24.11 (Debian 13, versioned pmix
// plugins) and Debian unstable's 26.05.5 (no mpi/pmix) print it.
TEST(LaunchPlan, MpiListOffersPmix) {
    EXPECT_TRUE(mpi_list_offers_pmix("MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n\tpmix\n"
                                     "specific pmix plugin versions available: pmix_v4\n"));
    EXPECT_TRUE(mpi_list_offers_pmix("MPI plugin types are...\n\tnone\n\tpmi2\n"
                                     "specific pmix plugin versions available: pmix_v5\n"));
    EXPECT_TRUE(mpi_list_offers_pmix("MPI plugin types are...\r\n  pmix_v3  \r\n"));
    EXPECT_FALSE(mpi_list_offers_pmix("MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"));
    EXPECT_FALSE(mpi_list_offers_pmix(""));
    EXPECT_FALSE(mpi_list_offers_pmix("srun: error: Invalid MPI type 'pmix'\n\tpmixy\n"));
    EXPECT_FALSE(mpi_list_offers_pmix("specific pmix plugin versions available: \n"));
    EXPECT_TRUE(parse_mpi_mode("none", "--mpi"));
    auto bad = parse_mpi_mode("list", "--mpi");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("--mpi 'list': expected auto, pmix or none"), std::string::npos) << bad.error();
}

// A job of `nodes` nodes that asked for `per` ranks a node.
Allocation per_node(std::uint32_t nodes, std::uint32_t per) {
    Allocation a;
    a.nodes = a.holding.nodes = nodes;
    a.holding.tasks_per_node = per;
    a.holding.node.cpus = per;
    return a;
}

TEST(LaunchOptions, SettingsDefaults) {
    LaunchOptions o;
    Allocation a = per_node(4, 2);
    auto s = resolve_settings(o, a, 0, 0, 0);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s.value().units, 8u);
    EXPECT_EQ(s.value().min_units, 1u);
    EXPECT_EQ(s.value().max_units, 8u);
    EXPECT_EQ(s.value().unit_size, 1u);
    EXPECT_EQ(s.value().capacity.units_per_node, 2u);
    // The job's OMNI_* options: units of 4 ranks, elastic 2:6, on 8 nodes of 2 ranks: 4 units
    // of 2 nodes run at once, so it starts with 4 (not MAX, 6).
    a = per_node(8, 2);
    s = resolve_settings(o, a, 2, 6, 4);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s.value().units, 4u);
    EXPECT_EQ(s.value().min_units, 2u);
    EXPECT_EQ(s.value().max_units, 6u);
    EXPECT_EQ(s.value().unit_size, 4u);
    EXPECT_EQ(s.value().capacity.nodes_per_unit, 2u);
    // Options win over the environment, and --units over the capacity.
    o.units = 6;
    o.unit_size = 2;
    s = resolve_settings(o, a, 2, 6, 4);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s.value().units, 6u);
    EXPECT_EQ(s.value().unit_size, 2u);
    o.units = 7;
    s = resolve_settings(o, a, 2, 6, 4);
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().find("outside the elastic range 2..6"), std::string::npos) << s.error();
    LaunchOptions none;
    Allocation empty;
    // Outside a job, OMNI_ELASTIC_MAX decides alone.
    s = resolve_settings(none, empty, 1, 4, 1);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s.value().units, 4u);
    s = resolve_settings(none, empty, 0, 0, 0);
    ASSERT_FALSE(s);
    EXPECT_NE(s.error().find("give --units K"), std::string::npos);
}

// The jobs of issue 48, on nodes of 2 CPUs (and 2 fake GPUs): each starts with the units its
// nodes run at once, not MAX.
TEST(LaunchOptions, ElasticJobStartsWithWhatItsNodesRun) {
    LaunchOptions none;
    struct Case {
        const char *what;
        JobHolding job;
        std::uint32_t unit_size, units, per_node;
    } cases[] = {
        {"-N2 --ntasks-per-node=1", {2, 1, 2, {1, 0, 0}}, 1, 2, 1},
        {"-N2 --exclusive --ntasks-per-node=1", {2, 1, 2, {2, 0, 0}}, 1, 2, 1},
        {"-N2 --exclusive", {2, 0, 0, {2, 0, 0}}, 1, 4, 2},
        {"-N2 --exclusive --omni-unit=2", {2, 0, 0, {2, 0, 0}}, 2, 2, 1},
        {"-N2 --ntasks-per-node=1 --omni-unit=2", {2, 1, 2, {1, 0, 0}}, 2, 1, 1},
        {"-N2 --gres=gpu:2 (2 CPUs a node)", {2, 0, 0, {2, 2, 0}}, 1, 4, 2},
        {"-N2 --gres=gpu:2 (1 CPU a node)", {2, 0, 0, {1, 2, 0}}, 1, 2, 1},
        {"-N2 --gres=gpu:2 --exclusive --omni-unit=2", {2, 0, 0, {2, 2, 0}}, 2, 2, 1},
        {"-N2 --ntasks-per-node=2 --gres=gpu:2", {2, 2, 4, {2, 2, 0}}, 1, 4, 2},
    };
    for (const auto &c : cases) {
        Allocation a;
        a.nodes = c.job.nodes;
        a.holding = c.job;
        auto s = resolve_settings(none, a, 1, 4, c.unit_size);
        ASSERT_TRUE(s) << c.what << ": " << s.error();
        EXPECT_EQ(s.value().units, c.units) << c.what;
        EXPECT_EQ(s.value().max_units, 4u) << c.what;
        EXPECT_EQ(s.value().capacity.units_per_node, c.per_node) << c.what;
    }
    // Fewer than MIN run at once: an error naming both and why.
    Allocation a;
    a.nodes = 2;
    a.holding = {2, 1, 2, {1, 0, 0}};
    auto s = resolve_settings(none, a, 3, 4, 1);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error(), "the allocation's 2 node(s) run 2 unit(s) of 1 rank(s) at once (--ntasks-per-node=1), "
                         "fewer than the elastic minimum 3");
}

TEST(LaunchPlan, AllocationFromEnv) {
    g_env = {{"SLURM_JOB_ID", "42"}, {"SLURMD_NODENAME", "n1"}, {"SLURM_JOB_NUM_NODES", "4"}};
    auto a = allocation_from_env(fake_env);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a.value().job_id, 42u);
    EXPECT_EQ(a.value().batch_node, "n1");
    EXPECT_EQ(a.value().nodes, 4u);
    EXPECT_EQ(a.value().holding.nodes, 4u);
    EXPECT_EQ(a.value().holding.tasks, 0u);
    EXPECT_EQ(a.value().holding.node.cpus, 0u);  // unknown
    g_env["SLURM_NTASKS"] = "8";
    g_env["SLURM_NTASKS_PER_NODE"] = "2";
    g_env["SLURM_JOB_CPUS_PER_NODE"] = "4(x3),2";
    g_env["SLURM_GPUS_ON_NODE"] = "2";
    a = allocation_from_env(fake_env);
    ASSERT_TRUE(a) << a.error();
    EXPECT_EQ(a.value().holding.tasks, 8u);
    EXPECT_EQ(a.value().holding.tasks_per_node, 2u);
    EXPECT_EQ(a.value().holding.node.cpus, 2u);  // the smallest node
    EXPECT_EQ(a.value().holding.node.gpus, 2u);
    EXPECT_EQ(a.value().holding.node.mem_mb, 0u);
    g_env["SLURM_MEM_PER_CPU"] = "1000";
    EXPECT_EQ(allocation_from_env(fake_env).value().holding.node.mem_mb, 2000u);
    g_env["SLURM_MEM_PER_NODE"] = "6000";
    EXPECT_EQ(allocation_from_env(fake_env).value().holding.node.mem_mb, 6000u);
    for (auto [name, bad] : std::vector<std::pair<std::string, std::string>>{
             {"SLURM_GPUS_ON_NODE", "2x"},
             {"SLURM_JOB_NUM_NODES", "four"},
             {"SLURM_JOB_CPUS_PER_NODE", "4(x3"},
             {"SLURM_JOB_CPUS_PER_NODE", "4(x0)"},
             {"SLURM_JOB_CPUS_PER_NODE", "-1"},
             {"SLURM_MEM_PER_NODE", "1G"}}) {
        auto keep = g_env[name];
        g_env[name] = bad;
        auto r = allocation_from_env(fake_env);
        ASSERT_FALSE(r) << name << "=" << bad;
        EXPECT_NE(r.error().find(name), std::string::npos) << r.error();
        g_env[name] = keep;
    }
    g_env.clear();
}

TEST(SlurmCounts, ExpandAndCompress) {
    EXPECT_EQ(expand_counts("2(x3),1", 16, "X").value(), (std::vector<std::uint32_t>{2, 2, 2, 1}));
    EXPECT_EQ(expand_counts("72", 16, "X").value(), (std::vector<std::uint32_t>{72}));
    EXPECT_EQ(compress_counts(expand_counts("2(x3),1,4(x2)", 16, "X").value()), "2(x3),1,4(x2)");
    for (const char *bad : {"", ",", "2,", "2(x)", "2(x3", "(x3)", "2(y3)", "2(x17)", "a", "2(x9),1(x9)"}) {
        auto r = expand_counts(bad, 16, "SLURM_JOB_CPUS_PER_NODE");
        ASSERT_FALSE(r) << bad;
        EXPECT_NE(r.error().find("SLURM_JOB_CPUS_PER_NODE"), std::string::npos) << r.error();
    }
}

TEST(LaunchPlan, TaskUnits) {
    std::vector<std::uint32_t> units = {4, 7};
    auto t = task_unit(units, 2, 3);
    ASSERT_TRUE(t);
    EXPECT_EQ(t.value(), std::make_pair(7u, 1u));
    EXPECT_EQ(task_unit(units, 2, 0).value(), std::make_pair(4u, 0u));
    EXPECT_FALSE(task_unit(units, 2, 4));
    EXPECT_EQ(format_unit_list(units), "4,7");
    EXPECT_EQ(parse_unit_list("4,7").value(), units);
    EXPECT_FALSE(parse_unit_list(""));
    EXPECT_FALSE(parse_unit_list("4,,7"));
    EXPECT_FALSE(parse_unit_list("4,"));
    EXPECT_FALSE(parse_unit_list("x"));
    EXPECT_EQ(member_id(3, 1), "u3.s1");
}

TEST(LaunchPlan, SrunArgsSplitting) {
    auto w = split_srun_args("--gres=gpu:4  --cpus-per-task='2' \"--comment=a b\" x\\ y");
    ASSERT_TRUE(w) << w.error();
    EXPECT_EQ(w.value(), (std::vector<std::string>{"--gres=gpu:4", "--cpus-per-task=2", "--comment=a b", "x y"}));
    EXPECT_TRUE(split_srun_args("--ntasks-per-node=2"));  // only the exact options are reserved
    for (const char *bad : {"--ntasks=3", "-N2", "--mpi=none", "--export=NONE", "-J x", "\"open"})
        EXPECT_FALSE(split_srun_args(bad)) << bad;
}

TEST(LaunchPlan, SrunCommandLine) {
    StepSpec s;
    s.extra = {"--gres=gpu:1"};
    s.self = "/usr/bin/omni-launch";
    s.program = {"./train", "--steps", "5"};
    s.tasks = 2;
    s.nodes = 1;
    s.name = "omni-u4";
    EXPECT_EQ(shell_join(srun_argv(s)),
              "srun --mpi=pmix --no-kill --kill-on-bad-exit=0 --export=ALL -J omni-u4 -n 2 -N 1 "
              "--gres=gpu:1 /usr/bin/omni-launch --exec-task -- ./train --steps 5");
    s.nodes = 0;  // unknown: srun decides
    EXPECT_EQ(srun_argv(s)[9], "--gres=gpu:1");
    // Without PMIx (--mpi none, or auto where srun offers no pmix): the same step, --mpi=none
    // explicitly, so that the cluster's MpiDefault cannot put pmix back.
    s.mpi = "none";
    EXPECT_EQ(shell_join(srun_argv(s)),
              "srun --mpi=none --no-kill --kill-on-bad-exit=0 --export=ALL -J omni-u4 -n 2 "
              "--gres=gpu:1 /usr/bin/omni-launch --exec-task -- ./train --steps 5");
    EXPECT_EQ(shell_join({"a b", "it's", "plain-1"}), "'a b' 'it'\\''s' plain-1");
}

// Capacities worked out by hand.
TEST(JobCapacity, RanksAndUnits) {
    // 4 nodes of 4 asked ranks: units of 1 and 4 on one node, of 6 on 2 nodes.
    JobHolding j{4, 4, 0, {8, 0, 0}};
    Capacity c = job_capacity(1, j);
    EXPECT_EQ(c.ranks_per_node, 4u);
    EXPECT_EQ(c.ranks, 16u);
    EXPECT_EQ(c.units, 16u);
    EXPECT_EQ(c.units_per_node, 4u);
    EXPECT_EQ(c.nodes_per_unit, 1u);
    EXPECT_EQ(c.basis, "--ntasks-per-node=4");
    c = job_capacity(4, j);
    EXPECT_EQ(c.units, 4u);
    EXPECT_EQ(c.units_per_node, 1u);
    c = job_capacity(6, j);
    EXPECT_EQ(c.nodes_per_unit, 2u);
    EXPECT_EQ(c.units, 2u);
    c = job_capacity(3, j);  // 3 of 4 ranks a node used: one unit a node
    EXPECT_EQ(c.units, 4u);
    EXPECT_EQ(c.units_per_node, 1u);
    EXPECT_EQ(job_capacity(64, j).units, 0u);  // more than the whole job
    // -n3 on 2 nodes: 2 ranks on one, 1 on the other; never more units than ranks.
    c = job_capacity(1, JobHolding{2, 0, 3, {1, 0, 0}});
    EXPECT_EQ(c.ranks_per_node, 2u);
    EXPECT_EQ(c.units, 3u);
    EXPECT_EQ(c.basis, "--ntasks=3 on 2 nodes");
    // Nothing asked: GPUs, capped by CPUs; CPUs; or one a node.
    EXPECT_EQ(job_capacity(1, JobHolding{2, 0, 0, {8, 4, 0}}).ranks_per_node, 4u);
    c = job_capacity(1, JobHolding{2, 0, 0, {1, 2, 0}});
    EXPECT_EQ(c.ranks_per_node, 1u);
    EXPECT_NE(c.basis.find("a rank needs a CPU of its own"), std::string::npos) << c.basis;
    EXPECT_EQ(job_capacity(1, JobHolding{2, 0, 0, {6, 0, 0}}).ranks_per_node, 6u);
    c = job_capacity(1, JobHolding{3, 0, 0, {}});
    EXPECT_EQ(c.ranks_per_node, 1u);
    EXPECT_EQ(c.units, 3u);
    // Outside a job: nothing known.
    EXPECT_EQ(job_capacity(1, JobHolding{}).ranks_per_node, 0u);
    EXPECT_EQ(job_capacity(1, JobHolding{}).nodes_per_unit, 0u);
    EXPECT_EQ(capacity_text(job_capacity(1, JobHolding{2, 0, 0, {2, 0, 0}}), 2, 1),
              "2 nodes run 4 ranks at once (2 CPUs a node): 4 units of 1 rank, 2 a node");
}

TEST(JobCapacity, GrowShapeRunsTheUnitsAtOnce) {
    // 2 units a node: 3 units need 2 nodes of 2 tasks.
    Capacity c = job_capacity(1, JobHolding{2, 2, 0, {2, 0, 0}});
    GrowShape g = grow_shape(3, 1, c);
    EXPECT_EQ(g.nodes, 2u);
    EXPECT_EQ(g.tasks_per_node, 2u);
    // A unit a node, units of 2 ranks.
    c = job_capacity(2, JobHolding{2, 2, 0, {2, 0, 0}});
    g = grow_shape(2, 2, c);
    EXPECT_EQ(g.nodes, 2u);
    EXPECT_EQ(g.tasks_per_node, 2u);
    // Units of 3 over nodes of 2: 2 nodes a unit, 2 tasks a node at most.
    c = job_capacity(3, JobHolding{4, 2, 0, {2, 0, 0}});
    g = grow_shape(2, 3, c);
    EXPECT_EQ(g.nodes, 4u);
    EXPECT_EQ(g.tasks_per_node, 2u);
    // Nothing known: a node a unit.
    g = grow_shape(2, 3, Capacity{});
    EXPECT_EQ(g.nodes, 2u);
    EXPECT_EQ(g.tasks_per_node, 0u);
}

TEST(LaunchBind, NodeAddrAndWildcards) {
    std::string out =
        "NodeName=n1 Arch=x86_64 CoresPerSocket=2 NodeAddr=127.0.0.1 NodeHostName=host Version=22.05.8\n"
        "NodeName=n10 Arch=x86_64 NodeAddr=10.0.0.10 NodeHostName=host\n";
    EXPECT_EQ(node_addr_from_scontrol(out, "n1").value(), "127.0.0.1");
    EXPECT_EQ(node_addr_from_scontrol(out, "n10").value(), "10.0.0.10");
    EXPECT_FALSE(node_addr_from_scontrol(out, "n2"));
    EXPECT_EQ(bind_address_for("127.0.0.1").value(), "127.0.0.1");
    EXPECT_EQ(bind_address_for("localhost").value(), "127.0.0.1");
    auto w = bind_address_for("0.0.0.0");
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().find("wildcard"), std::string::npos);
    EXPECT_FALSE(bind_address_for("224.0.0.1"));
    EXPECT_FALSE(bind_address_for("no-such-host.invalid"));
}

TEST(LaunchEvents, JsonLines) {
    GenerationEvent e;
    e.unix_ms = 1700000000123;
    e.job = 7;
    e.old_generation = 1;
    e.generation = 2;
    e.old_world = 4;
    e.new_world = 2;
    e.old_units = {0, 1, 2, 3};
    e.new_units = {0, 1};
    e.reason = event_reason("reshaped", "planned", 1);
    e.detail = "planned";
    e.step = 9;
    e.pause_ms = 12;
    e.resolution_ms = 50;
    auto j = event_to_json(e);
    EXPECT_EQ(j["time"], "2023-11-14T22:13:20.123Z");
    EXPECT_EQ(j["reason"], "planned");
    EXPECT_EQ(j["old_world"], 4);
    EXPECT_EQ(j["new_units"], nlohmann::json({0, 1}));
    EXPECT_FALSE(j.contains("kind"));  // not known: left out
    e.kind = "scontrol";
    EXPECT_EQ(event_to_json(e)["kind"], "scontrol");
    EXPECT_EQ(event_summary(e), "generation 1 -> 2: world 4 -> 2 (planned, step 9, pause 12 ms)");
    EXPECT_EQ(event_reason("reshaped", "formed", 0), "initial");
    EXPECT_EQ(event_reason("reshaped", "lost", 3), "lost");
    EXPECT_EQ(event_reason("stop", "below-min", 3), "stop");

    char dir[] = "/tmp/launch-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string path = std::string(dir) + "/events.jsonl";
    {
        auto log = EventLog::open(path);
        ASSERT_TRUE(log) << log.error();
        ASSERT_TRUE(log.value().append(j));
        ASSERT_TRUE(log.value().append({{"x", 1}}));
    }
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::ifstream in(path);
    std::string l1, l2;
    std::getline(in, l1);
    std::getline(in, l2);
    EXPECT_EQ(nlohmann::json::parse(l1)["generation"], 2);
    EXPECT_EQ(l2, "{\"x\":1}");
    unlink(path.c_str());
    rmdir(dir);
    EXPECT_FALSE(EventLog::open("/nonexistent-dir/events.jsonl"));
}

// The exposition text of a status as the coordinator writes it (values invented here; the
// expected lines follow the Prometheus text format by hand).
TEST(LaunchMetrics, PrometheusText) {
    auto status = nlohmann::json::parse(R"({"phase":"running","generation":3,"units":2,"world":4,
        "unit_size":2,"min_units":1,"max_units":4,"target_units":null,"last_step":120,
        "pending_joiners":[],"global_batch":64,"micro_batch":4,"grad_accum":4,
        "samples_per_s":512.5,"changes":{"formed":1,"planned":2},"change_pause_ms":42,
        "last_resize":{"kind":"preemption","generation":3,"step":110,"old_units":4,"new_units":2},
        "last_checkpoint":{"step":100,"location":"/c/step-100","time":1796387442}})");
    const std::string t = prometheus_text(status, 77);
    auto has = [&](const std::string &line) { return t.find(line + "\n") != std::string::npos; };
    EXPECT_TRUE(has("# TYPE omni_up gauge")) << t;
    EXPECT_TRUE(has("omni_up{job=\"77\"} 1")) << t;
    EXPECT_TRUE(has("omni_generation{job=\"77\"} 3")) << t;
    EXPECT_TRUE(has("omni_world_size{job=\"77\"} 4")) << t;
    EXPECT_TRUE(has("omni_grad_accum{job=\"77\"} 4")) << t;
    EXPECT_TRUE(has("omni_samples_per_second{job=\"77\"} 512.5")) << t;
    EXPECT_TRUE(has("# TYPE omni_changes_total counter")) << t;
    EXPECT_TRUE(has("omni_changes_total{job=\"77\",reason=\"planned\"} 2")) << t;
    EXPECT_TRUE(has("omni_last_change_pause_seconds{job=\"77\"} 0.042")) << t;
    EXPECT_TRUE(has("omni_last_resize_info{job=\"77\",kind=\"preemption\"} 1")) << t;
    EXPECT_TRUE(has("omni_last_resize_step{job=\"77\"} 110")) << t;
    EXPECT_TRUE(has("omni_last_checkpoint_step{job=\"77\"} 100")) << t;
    EXPECT_TRUE(has("omni_last_checkpoint_timestamp_seconds{job=\"77\"} 1796387442")) << t;
    EXPECT_EQ(t.find("omni_target_units"), std::string::npos) << t;  // null: left out
    // Outside a job: no label at all.
    EXPECT_TRUE(prometheus_text(status, 0).find("\nomni_units 2\n") != std::string::npos);
}

TEST(LaunchMetrics, AtomicWrite) {
    char dir[] = "/tmp/omni-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string path = std::string(dir) + "/job.prom";
    ASSERT_TRUE(write_file_atomically(path, "a 1\n"));
    ASSERT_TRUE(write_file_atomically(path, "b 2\n"));
    std::ifstream in(path);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(all, "b 2\n");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    auto bad = write_file_atomically(std::string(dir) + "/no/such/dir/x.prom", "x");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("/no/such/dir/x.prom.tmp."), std::string::npos) << bad.error();
    EXPECT_NE(bad.error().find("No such file or directory"), std::string::npos) << bad.error();
    ::unlink(path.c_str());
    ::rmdir(dir);
}

TEST(LaunchPlan, SbatchArgsSplitting) {
    auto w = split_sbatch_args("--partition=scavenger --qos='low prio' -t 10");
    ASSERT_TRUE(w) << w.error();
    EXPECT_EQ(w.value(), (std::vector<std::string>{"--partition=scavenger", "--qos=low prio", "-t", "10"}));
    for (const char *bad : {"--job-name=x", "-Jx", "--nodes=2", "-N2", "--ntasks=4", "-n4",
                            "--export=NONE", "--wrap=true", "--parsable", "--requeue"}) {
        auto r = split_sbatch_args(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_NE(r.error().find("--satellite-args: '"), std::string::npos) << r.error();
    }
    EXPECT_TRUE(split_sbatch_args("--mpi=pmix"));  // an srun option: no business of sbatch's here
}

// The satellite of job 41 for units 6 and 7 of 2 ranks on one node each, in a job on the
// partition "gpu" holding 4 GPUs per node, whole nodes.
TEST(LaunchSatellite, SbatchArgsAndScript) {
    SatelliteSpec s;
    s.main_job = 41;
    s.units = {6, 7};
    s.unit_size = 2;
    s.nodes = 2;
    s.tasks_per_node = 2;
    s.partition = "gpu";
    s.tres_per_node = "gres:gpu:4";
    s.exclusive = true;
    s.sbatch_extra = {"--qos=scavenger"};
    s.self = "/opt/omni/bin/omni-launch";
    s.srun_extra = {"--gres=gpu:2", "--comment=a b"};
    s.boundary_timeout_ms = 45000;
    s.program = {"./train", "--data", "it's here"};
    EXPECT_EQ(satellite_job_name(41), "omni-sat-41");
    EXPECT_EQ(satellite_sbatch_args(s),
              (std::vector<std::string>{"--job-name=omni-sat-41", "--nodes=2", "--ntasks=4", "--no-requeue",
                                        "--ntasks-per-node=2", "--partition=gpu",
                                        "--gres=gpu:4", "--exclusive", "--qos=scavenger"}));
    const std::string script = satellite_script(s);
    EXPECT_EQ(script.rfind("#!/bin/sh\n", 0), 0u);
    // Its last line runs omni-launch; --srun-args is the one word that splits back into them.
    const std::string run = script.substr(script.rfind('\n', script.size() - 2) + 1);
    EXPECT_EQ(run, std::string(R"(exec /opt/omni/bin/omni-launch --satellite --boundary-timeout 45 --srun-args )") +
                       R"('--gres=gpu:2 '\''--comment=a b'\''' -- ./train --data 'it'\''s here')" + "\n");
    auto back = split_srun_args("--gres=gpu:2 '--comment=a b'");
    ASSERT_TRUE(back);
    EXPECT_EQ(back.value(), s.srun_extra);
    // The main job's --mpi, as resolved there: its satellite's steps start their ranks alike.
    s.mpi = "none";
    const std::string with_mpi = satellite_script(s);
    EXPECT_NE(with_mpi.find("--satellite --boundary-timeout 45 --mpi none --srun-args "), std::string::npos)
        << with_mpi;
    s.mpi.clear();
    // A job without GRES or a partition name: none asked for.
    s.tres_per_node.clear();
    s.partition.clear();
    s.exclusive = false;
    s.sbatch_extra.clear();
    s.tasks_per_node = 0;
    EXPECT_EQ(satellite_sbatch_args(s),
              (std::vector<std::string>{"--job-name=omni-sat-41", "--nodes=2", "--ntasks=4", "--no-requeue"}));
}

TEST(LaunchSatellite, Environment) {
    SatelliteSpec s;
    s.main_job = 41;
    s.units = {6, 7};
    s.unit_size = 2;
    const char *env[] = {"SLURM_JOB_ID=41", "SLURM_CONF=/etc/slurm/slurm.conf", "SBATCH_PARTITION=x",
                         "OMNI_UNIT_ID=0", "OMNI_ELASTIC_MAX=8", "HOME=/root", "SLURMD_NODENAME=n1",
                         "BROKEN", nullptr};
    auto unset = satellite_env_unset(env);
    auto has = [&](const char *n) { return std::find(unset.begin(), unset.end(), n) != unset.end(); };
    EXPECT_TRUE(has("SLURM_JOB_ID"));
    EXPECT_TRUE(has("SBATCH_PARTITION"));
    EXPECT_TRUE(has("OMNI_UNIT_ID"));
    EXPECT_FALSE(has("SLURM_CONF"));        // sbatch must find the same cluster
    EXPECT_FALSE(has("OMNI_ELASTIC_MAX"));  // the job's options hold for its satellites too
    EXPECT_FALSE(has("HOME"));
    EXPECT_FALSE(has("SLURMD_NODENAME"));   // no SLURM_ prefix: slurmd sets it afresh
    auto set = satellite_env_set(s, "tcp://10.0.0.1:4000", "SECRET", "/tmp/omni-0/job-c-41");
    EXPECT_EQ(set, (std::map<std::string, std::string>{{"OMNI_COORD_ADDR", "tcp://10.0.0.1:4000"},
                                                        {"OMNI_COORD_SECRET", "SECRET"},
                                                        {"OMNI_JOB_DIR", "/tmp/omni-0/job-c-41"},
                                                        {"OMNI_UNIT_SIZE", "2"},
                                                        {"OMNI_SATELLITE_UNITS", format_unit_list({6, 7})},
                                                        {"OMNI_SATELLITE_OF", "41"}}));
    auto units = parse_unit_list(set.at("OMNI_SATELLITE_UNITS"));
    ASSERT_TRUE(units);
    EXPECT_EQ(units.value(), s.units);
}

// A look runs once at a time, no more often than asked, and its answer is taken once, with
// the time it started.
TEST(LaunchBackground, OneLookAtATime) {
    BackgroundLook<int> look;
    std::promise<void> go;
    std::shared_future<void> gate = go.get_future().share();
    int calls = 0;
    look.start_every(1000, 500, [gate, &calls] {
        gate.wait();
        return ++calls;
    });
    EXPECT_TRUE(look.in_flight());
    look.start_every(5000, 500, [] { return -1; });  // one in flight: not started
    EXPECT_FALSE(look.take().has_value());
    go.set_value();
    std::optional<BackgroundLook<int>::Answer> a;
    for (int i = 0; i < 500 && !(a = look.take()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->value, 1);
    EXPECT_EQ(a->started_ms, 1000);
    EXPECT_FALSE(look.in_flight());
    EXPECT_FALSE(look.take().has_value());        // taken once
    look.start_every(1400, 500, [] { return 7; });  // too soon after the last start
    EXPECT_FALSE(look.in_flight());
    look.start_every(1500, 500, [] { return 7; });
    EXPECT_TRUE(look.in_flight());
    for (int i = 0; i < 500 && !(a = look.take()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->value, 7);
    EXPECT_EQ(a->started_ms, 1500);
}

// Two units of 2 nodes each for job 41, which holds n[1-4] whole with 2 ranks per node.
TEST(LaunchExpansion, SallocArgv) {
    ExpansionSpec x;
    x.main_job = 41;
    x.nodes = 4;
    x.tasks_per_node = 2;
    x.partition = "cpu";
    x.exclusive = true;
    x.exclude = {"n1", "n2", "n3", "n4"};
    EXPECT_EQ(expansion_job_name(41), "omni-exp-41");
    EXPECT_EQ(expansion_salloc_argv(x),
              (std::vector<std::string>{"salloc", "--no-shell", "--job-name=omni-exp-41", "--dependency=expand:41",
                                        "--nodes=4", "--ntasks-per-node=2", "--partition=cpu", "--exclusive",
                                        "--exclude=n[1-4]"}));
    x.partition.clear();
    x.exclusive = false;
    x.exclude.clear();
    EXPECT_EQ(expansion_salloc_argv(x),
              (std::vector<std::string>{"salloc", "--no-shell", "--job-name=omni-exp-41", "--dependency=expand:41",
                                        "--nodes=4", "--ntasks-per-node=2"}));
}

// Slurm expands a job only with permit_job_expansion, never one holding GRES, and its merge
// needs select/omni's repair; each refusal names its reason.
TEST(LaunchExpansion, WhenSlurmCanExpand) {
    JobInfo cpu;
    cpu.job_id = 41;
    cpu.gpus = {0, 0};
    EXPECT_EQ(expansion_refusal("bf_continue,permit_job_expansion", "select/omni", cpu), std::nullopt);
    EXPECT_EQ(expansion_refusal("permit_job_expansion", "select/omni", cpu), std::nullopt);
    auto why = [](const std::optional<std::string> &r) { return r.value_or("(none)"); };
    EXPECT_NE(why(expansion_refusal("", "select/omni", cpu)).find("no permit_job_expansion"), std::string::npos);
    // A word that only contains the name is not it.
    EXPECT_NE(why(expansion_refusal("no_permit_job_expansion_x", "select/omni", cpu)).find("no permit_job_expansion"),
              std::string::npos);
    EXPECT_NE(why(expansion_refusal("permit_job_expansion", "select/cons_tres", cpu))
                  .find("SelectType is select/cons_tres"),
              std::string::npos);
    JobInfo gpu = cpu;
    gpu.tres_per_node = "gres:gpu:2";
    gpu.gpus = {2, 2};
    EXPECT_EQ(why(expansion_refusal("permit_job_expansion", "select/omni", gpu)),
              "job 41 holds GRES (gres:gpu:2), and Slurm's cons_tres refuses to expand a job that holds GRES");
    gpu.tres_per_node.clear();  // GPUs from --gpus-per-task show per node only
    EXPECT_NE(why(expansion_refusal("permit_job_expansion", "select/omni", gpu)).find("holds GRES"), std::string::npos);
}

// Units that share a node: each unit's step asks for its share (launch/plan.h), worked out
// by hand for nodes of 8 CPUs, 4 GPUs and 64000 MB holding 4 ranks each.
TEST(StepShare, EachUnitGetsItsShareOfTheNode) {
    JobHolding job{2, 4, 0, {8, 4, 64000}};
    const NodeShare &node = job.node;
    EXPECT_EQ(step_share_args(1, job_capacity(1, job), node, {}),
              (std::vector<std::string>{"--exact", "--cpus-per-task=2", "--gres=gpu:1", "--mem=16000M"}));
    EXPECT_EQ(step_share_args(2, job_capacity(2, job), node, {}),
              (std::vector<std::string>{"--exact", "--cpus-per-task=2", "--gres=gpu:2", "--mem=32000M"}));
    // Units of whole nodes, or more: nothing of their own.
    EXPECT_TRUE(step_share_args(4, job_capacity(4, job), node, {}).empty());
    EXPECT_TRUE(step_share_args(8, job_capacity(8, job), node, {}).empty());
    // 3 of 4 ranks a node: one unit a node, which has it alone.
    EXPECT_TRUE(step_share_args(3, job_capacity(3, job), node, {}).empty());
    const Capacity c = job_capacity(1, job);
    // No GPUs, or fewer GPUs than ranks (ranks would have to share one): no GRES request;
    // memory not tracked: no --mem.
    EXPECT_EQ(step_share_args(1, c, NodeShare{8, 0, 0}, {}),
              (std::vector<std::string>{"--exact", "--cpus-per-task=2"}));
    EXPECT_EQ(step_share_args(1, c, NodeShare{8, 2, 0}, {}),
              (std::vector<std::string>{"--exact", "--cpus-per-task=2"}));
    // Fewer CPUs than ranks: one each at least. Unknown CPUs: nothing.
    EXPECT_EQ(step_share_args(1, c, NodeShare{2, 0, 0}, {})[1], "--cpus-per-task=1");
    EXPECT_TRUE(step_share_args(1, c, NodeShare{0, 4, 0}, {}).empty());
    // The user's --srun-args size the steps: theirs win.
    for (const char *own : {"--exact", "--cpus-per-task=4", "-c4", "--gres=gpu:2", "--gpus-per-task=1", "--mem=1G"})
        EXPECT_TRUE(step_share_args(1, c, node, {"--label", own}).empty()) << own;
    EXPECT_FALSE(step_share_args(1, c, node, {"--cpu-bind=cores"}).empty());
    // Nothing asked, 2 GPUs and 2 CPUs a node: a rank per GPU, each with a CPU and a GPU.
    JobHolding gpus{2, 0, 0, {2, 2, 0}};
    EXPECT_EQ(step_share_args(1, job_capacity(1, gpus), gpus.node, {}),
              (std::vector<std::string>{"--exact", "--cpus-per-task=1", "--gres=gpu:1"}));
}
