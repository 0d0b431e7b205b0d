// The built plugin (spank_omni.so) in slurmstepd's place: this program provides the spank_*
// API a SPANK plugin calls, loads the plugin with dlopen as Slurm does, and drives its hooks
// in remote context: slurm_spank_init with plugstack arguments, the option callbacks,
// slurm_spank_init_post_opt, slurm_spank_task_init. Each case runs in a forked child, since
// the plugin keeps per-process state as it may (Slurm loads it once per process).
//
// What is checked: a job whose options this node refuses does not run without them (Slurm
// ignores option callback errors in slurmstepd, and post_opt errors never reach the user),
// and options from a hostile job environment cannot crash slurmstepd.
extern "C" {
#include <slurm/spank.h>
}

#include <dlfcn.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hal/hal.h"
#include "hal/topofile.h"

namespace {

std::map<std::string, std::string> g_env;
std::vector<spank_option> g_opts;
std::string g_errors;
std::string g_cores = "0-1";
std::string g_step_cores;  // "": slurmstepd gives no S_STEP_ALLOC_CORES

}  // namespace

// Slurm's handle is opaque to plugins; any object will do for this host.
struct spank_handle {
    int unused;
};
static spank_handle g_handle;

// Slurm 22.05 defines the ESPANK_* codes as plain integers.
static spank_err_t err(int e) { return static_cast<spank_err_t>(e); }

// The SPANK API, as slurmstepd gives it to the plugin (only what the plugin uses).
extern "C" {
spank_context_t spank_context(void) { return S_CTX_REMOTE; }
spank_err_t spank_option_register(spank_t, struct spank_option *o) {
    g_opts.push_back(*o);
    return err(ESPANK_SUCCESS);
}
const char *spank_strerror(spank_err_t e) { return e == err(ESPANK_SUCCESS) ? "success" : "error"; }
spank_err_t spank_job_control_setenv(spank_t, const char *, const char *, int) { return err(ESPANK_SUCCESS); }
spank_err_t spank_getenv(spank_t, const char *var, char *buf, int len) {
    auto it = g_env.find(var);
    if (it == g_env.end()) return err(ESPANK_ENV_NOEXIST);
    if (static_cast<int>(it->second.size()) >= len) return err(ESPANK_NOSPACE);
    std::memcpy(buf, it->second.c_str(), it->second.size() + 1);
    return err(ESPANK_SUCCESS);
}
spank_err_t spank_setenv(spank_t, const char *var, const char *val, int) {
    g_env[var] = val;
    return err(ESPANK_SUCCESS);
}
spank_err_t spank_get_item(spank_t, spank_item_t item, ...) {
    const std::string *cores = item == S_JOB_ALLOC_CORES ? &g_cores
                               : item == S_STEP_ALLOC_CORES && !g_step_cores.empty() ? &g_step_cores
                                                                                      : nullptr;
    if (!cores) return err(ESPANK_BAD_ARG);
    va_list ap;
    va_start(ap, item);
    *va_arg(ap, char **) = const_cast<char *>(cores->c_str());
    va_end(ap);
    return err(ESPANK_SUCCESS);
}
void slurm_error(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_errors += std::string(buf) + "\n";
}
}

namespace {

struct Outcome {
    int status = -1;             // the child's wait status
    int post_opt = -1, task_init = -1;
    std::string errors;          // slurm_error lines
    std::string env;             // OMNI_* variables set, "K=V\n" each
};

using Hook = int (*)(spank_t, int, char **);

// Runs one slurmstepd: plugstack `args`, then the option callbacks `opts` (name, value), with
// the job environment `env`.
Outcome run_remote(std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> opts,
                   std::map<std::string, std::string> env, std::string job_cores = "0-1",
                   std::string step_cores = "") {
    int fds[2];
    if (pipe(fds) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        g_env = std::move(env);
        g_cores = job_cores;
        g_step_cores = step_cores;
        std::string report;
        void *h = dlopen(OMNI_SPANK_PLUGIN, RTLD_NOW | RTLD_LOCAL);
        int post = -2, task = -2;
        if (!h) {
            g_errors += std::string("dlopen: ") + dlerror() + "\n";
        } else {
            auto init = reinterpret_cast<Hook>(dlsym(h, "slurm_spank_init"));
            auto post_opt = reinterpret_cast<Hook>(dlsym(h, "slurm_spank_init_post_opt"));
            auto task_init = reinterpret_cast<Hook>(dlsym(h, "slurm_spank_task_init"));
            std::vector<char *> av;
            for (auto &a : args) av.push_back(a.data());
            if (init(&g_handle, static_cast<int>(av.size()), av.data()) == 0) {
                for (const auto &[name, value] : opts)
                    for (const auto &o : g_opts)
                        if (name == o.name) (void)o.cb(o.val, value.c_str(), 1);  // errors ignored, as slurmstepd does
                post = post_opt(&g_handle, 0, nullptr);
                task = task_init(&g_handle, 0, nullptr);
            }
        }
        report = std::to_string(post) + "\n" + std::to_string(task) + "\n";
        for (const auto &[k, v] : g_env)
            if (k.rfind("OMNI_", 0) == 0 || k.rfind("NCCL_", 0) == 0 || k.rfind("UCX_", 0) == 0)
                report += k + "=" + v + ";";
        report += "\n" + g_errors;
        if (write(fds[1], report.data(), report.size()) < 0) _exit(3);
        _exit(0);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    Outcome o;
    waitpid(pid, &o.status, 0);
    std::size_t a = out.find('\n'), b = a == std::string::npos ? a : out.find('\n', a + 1),
                c = b == std::string::npos ? b : out.find('\n', b + 1);
    if (c == std::string::npos) return o;
    o.post_opt = std::stoi(out.substr(0, a));
    o.task_init = std::stoi(out.substr(a + 1, b - a - 1));
    o.env = out.substr(b + 1, c - b - 1);
    o.errors = out.substr(c + 1);
    return o;
}

bool exited_cleanly(const Outcome &o) { return WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0; }

}  // namespace

TEST(Remote, GoodOptionsReachTheTask) {
    auto o = run_remote({"bind=no"}, {{"omni-elastic", "1:4"}, {"omni-unit", "2"}}, {});
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, 0) << o.errors;
    EXPECT_NE(o.env.find("OMNI_ELASTIC_MAX=4;"), std::string::npos) << o.env;
}

// This node's plugstack.conf allows fewer units than the submit host's did: the option
// callback fails, Slurm drops the option and goes on; the task must fail, saying why.
TEST(Remote, AnOptionThisNodeRefusesFailsTheTask) {
    auto o = run_remote({"bind=no", "max_units=8"}, {{"omni-elastic", "1:16"}, {"omni-ckpt", "/tmp"}}, {});
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, -1) << o.env;
    EXPECT_NE(o.errors.find("--omni-elastic=1:16"), std::string::npos) << o.errors;
    EXPECT_EQ(o.env.find("OMNI_CKPT"), std::string::npos) << "ran with part of its options: " << o.env;
}

// Options that each parse but break a rule together (M must divide N) are refused here too.
TEST(Remote, CrossOptionRulesAreCheckedInTheStep) {
    auto o = run_remote({"bind=no"}, {{"omni-unit", "4"}, {"omni-mp", "3"}}, {});
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, -1);
    EXPECT_NE(o.errors.find("--omni-mp=3: must divide the unit size 4"), std::string::npos) << o.errors;
}

// The batch step of an --export=NONE job reads its options back from the spank job
// environment, which the job's user controls: refused options fail the task.
TEST(Remote, RefusedOptionsFromTheJobEnvironmentFailTheTask) {
    auto o = run_remote({"bind=no"}, {}, {{"SLURM_SPANK_OMNI_UNIT_SIZE", "4"}, {"SLURM_SPANK_OMNI_MP", "3"}});
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, -1);
    EXPECT_NE(o.errors.find("job environment: --omni-mp=3"), std::string::npos) << o.errors;
}

// b * u * N reaches 2^68 within the limits; it wrapped to 0 and B % 0 killed slurmstepd.
TEST(Remote, HugeBatchGeometryFromTheJobEnvironmentDoesNotCrash) {
    auto o = run_remote({"bind=no", "max_units=4096"}, {},
                        {{"SLURM_SPANK_OMNI_ELASTIC_MIN", "4096"},
                         {"SLURM_SPANK_OMNI_ELASTIC_MAX", "4096"},
                         {"SLURM_SPANK_OMNI_UNIT_SIZE", "4096"},
                         {"SLURM_SPANK_OMNI_GLOBAL_BATCH", "1099511627776"},
                         {"SLURM_SPANK_OMNI_MICRO_BATCH", "1099511627776"}});
    ASSERT_TRUE(exited_cleanly(o)) << "slurmstepd's stand-in died: wait status " << o.status;
    EXPECT_EQ(o.task_init, -1);
    EXPECT_NE(o.errors.find("--omni-global-batch=1099511627776"), std::string::npos) << o.errors;
}

namespace {

// A site topology file (omni-topology(5)) with fixture `xml` as node n1.
std::string site_file(const char *xml) {
    omni::hal::LoadOptions lo;
    lo.topology_file = std::string(OMNI_FIXTURES) + "/" + xml;
    lo.query_devices = false;
    auto n = omni::hal::load_node(lo);
    EXPECT_TRUE(n.ok()) << (n.ok() ? "" : n.error());
    if (!n.ok()) return "";
    omni::hal::SiteTopology site;
    site.nodes.push_back(omni::hal::site_node(n.value(), "n1"));
    const std::string path = "/tmp/omni-spank-remote-test-" + std::to_string(getpid()) + ".json";
    std::ofstream(path) << omni::hal::site_json(site);
    return path;
}

// The DGX-2: GPUs 0-7 next to cores 0,1 (PUs 0,1), GPUs 8-15 next to cores 2,3 (PUs 24,25).
std::string dgx2_site_file() { return site_file("nvidiaDGX2.xml"); }

std::map<std::string, std::string> task_of_gpu(const char *gpu) {
    return {{"SLURMD_NODENAME", "n1"}, {"CUDA_VISIBLE_DEVICES", gpu}};
}

}  // namespace

// The step's cores bound the binding, not the job's: the job's others may be another step's.
TEST(Remote, TheStepsCoresBoundTheBinding) {
    const std::string site = dgx2_site_file();
    ASSERT_FALSE(site.empty());
    auto o = run_remote({"topology=" + site}, {{"omni-elastic", "1:2"}}, task_of_gpu("0"), "0-3", "0");
    auto job_only = run_remote({"topology=" + site}, {{"omni-elastic", "1:2"}}, task_of_gpu("0"), "0-3");
    std::remove(site.c_str());
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, 0) << o.errors;
    EXPECT_NE(o.env.find("OMNI_BIND=0;"), std::string::npos) << o.env;
    // Without S_STEP_ALLOC_CORES (older slurmstepd) the job's cores are used.
    EXPECT_NE(job_only.env.find("OMNI_BIND=0-1;"), std::string::npos) << job_only.env;
}

// CPUs the task may not use (here: CPUs this machine lacks, as the kernel treats CPUs outside
// a step's cpuset) leave Slurm's binding in place with the reason, instead of failing the task.
TEST(Remote, CpusTheTaskMayNotUseLeaveItUnbound) {
    if (sysconf(_SC_NPROCESSORS_CONF) > 24)
        GTEST_SKIP() << "this machine has a CPU 24: GPU 8's CPUs (24,25) are usable here";
    const std::string site = dgx2_site_file();
    ASSERT_FALSE(site.empty());
    auto o = run_remote({"topology=" + site}, {{"omni-elastic", "1:2"}}, task_of_gpu("8"), "0-3", "0-3");
    std::remove(site.c_str());
    ASSERT_TRUE(exited_cleanly(o)) << o.status;
    EXPECT_EQ(o.task_init, 0) << o.errors;
    EXPECT_NE(o.env.find("OMNI_BIND=none: the CPUs near its GPUs (24-25) are outside the CPUs this task may use;"),
              std::string::npos) << o.env;
}

// The Xeon with an InfiniBand HCA: GPU 1 (0000:84:00.0) shares a PCIe switch with mlx5_0, so
// NCCL and UCX are pointed at it, unless the user named an HCA already, even as "".
TEST(Remote, TheUsersHcaChoiceWinsEvenWhenEmpty) {
    const std::string site = site_file("32em64t-2n8c2t-pci-normalio.xml");
    ASSERT_FALSE(site.empty());
    auto ours = run_remote({"topology=" + site}, {{"omni-elastic", "1:2"}}, task_of_gpu("1"), "0-15", "0-15");
    auto env = task_of_gpu("1");
    env["NCCL_IB_HCA"] = "";
    auto theirs = run_remote({"topology=" + site}, {{"omni-elastic", "1:2"}}, env, "0-15", "0-15");
    std::remove(site.c_str());
    ASSERT_TRUE(exited_cleanly(ours) && exited_cleanly(theirs));
    EXPECT_NE(ours.env.find("NCCL_IB_HCA==mlx5_0;"), std::string::npos) << ours.env << ours.errors;
    EXPECT_NE(theirs.env.find("NCCL_IB_HCA=;"), std::string::npos) << theirs.env;
    EXPECT_NE(theirs.env.find("UCX_NET_DEVICES=mlx5_0:1;"), std::string::npos) << theirs.env;
}
