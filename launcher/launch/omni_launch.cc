// omni-launch: runs a program as the ranks of an elastic slurm-omni job (see omni-launch(1)).
//
//   omni-launch [OPTIONS] -- PROGRAM [ARGS...]      in the batch script of the job
//
// It generates the job secret, starts the coordinator on this node's address, publishes the
// job files (JOB_DIR/secret, JOB_DIR/coordinator), launches the ranks with srun (--mpi=pmix,
// or --mpi=none where Slurm has no mpi/pmix: launch/plan.h) and supervises them
// (launch/driver.h) until they end.
//
// Each srun step runs omni-launch itself on every task first ("--exec-task", internal): srun
// gives a step one environment for all its tasks, but every rank needs its own unit and slot,
// which the shim derives from SLURM_PROCID and then execs PROGRAM.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/job_options.h"
#include "common/parse.h"
#include "coord/conn_auth.h"
#include "coord/coordinator.h"
#include "coord/log.h"
#include "coord/secret.h"
#include "launch/bind.h"
#include "launch/driver.h"
#include "launch/options.h"
#include "launch/plan.h"
#include "launch/satellite.h"
#include "slurmjob/job.h"
#include "slurmjob/proc.h"

using namespace omni::launcher;

namespace {

constexpr int kExitFail = 1, kExitUsage = 2, kExitCannotExec = 127;
constexpr const char *kComponent = "omni-launch";
constexpr std::int64_t kScontrolTimeoutMs = 10000;

std::atomic<int> g_signals{0};
std::atomic<int> g_last_signal{0};
std::atomic<int> g_slurm_news{0};  // SIGURG: job_submit/omni recorded something (driver.h)

extern "C" void on_signal(int sig) {
    g_last_signal.store(sig);
    g_signals.fetch_add(1);
}

extern "C" void on_slurm_news(int) { g_slurm_news.fetch_add(1); }

const char *env(const char *name) { return std::getenv(name); }

// In a satellite, the first task of a step forks this sentinel before it execs the rank: it
// waits for the SIGTERM that Slurm sends the job's steps when it preempts the job (never to
// the batch script, which runs the satellite's omni-launch), and then runs `scancel --batch
// --signal=URG` for its job, so that omni-launch reads the job at once instead of polling it
// (driver.cc, watch_preemption). One RPC per SIGTERM, only then. It dies with the rank
// (PR_SET_PDEATHSIG), and never before it: the rank does not know it has this child and
// never waits for it, so a sentinel that exited would stay a zombie for the rank's life; it
// reaps its scancel itself and goes on waiting (Slurm signals steps for other reasons too).
// It holds nothing of the shim's but its memory: descriptors 3 and up are closed (a pipe or
// socket held open by it would keep its other end from seeing the rank's end), 0-2 are
// /dev/null. A sentinel that cannot start costs nothing but the signal: omni-launch's slow
// look remains.
void close_from(int first) {
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
    rlimit rl{};
    const rlim_t limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? std::min<rlim_t>(rl.rlim_cur, 1 << 20) : 1024;
    for (rlim_t fd = first; fd < limit; ++fd) ::close(static_cast<int>(fd));
}

void start_preemption_sentinel() {
    const char *job = env("SLURM_JOB_ID");
    if (!job) return;
    const pid_t task = ::getpid();
    if (::fork() != 0) return;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != task) ::_exit(0);
    close_from(3);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
        for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
        if (null > 2) ::close(null);
    }
    // Blocked and at its default action, so that sigwait receives it (an ignored signal is
    // discarded, blocked or not).
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, nullptr);
    ::signal(SIGTERM, SIG_DFL);
    for (;;) {
        int sig = 0;
        if (::sigwait(&term, &sig) != 0) ::pause();
        const pid_t scancel = ::fork();
        if (scancel == 0) {
            ::sigprocmask(SIG_UNBLOCK, &term, nullptr);
            ::execlp("scancel", "scancel", "--batch", "--signal=URG", job, static_cast<char *>(nullptr));
            ::_exit(kExitCannotExec);
        }
        while (scancel > 0 && ::waitpid(scancel, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
}

// The per-task shim: OMNI_LAUNCH_UNITS + OMNI_UNIT_SIZE + SLURM_PROCID -> OMNI_UNIT_ID,
// OMNI_UNIT_SLOT, OMNI_MEMBER_ID, then exec PROGRAM. Single-threaded, so setenv is safe.
int exec_task(int argc, char **argv) {
    auto fail = [](const std::string &msg) {
        std::cerr << "omni-launch --exec-task: " << msg << "\n";
        return kExitCannotExec;
    };
    if (argc < 4 || std::strcmp(argv[2], "--") != 0) return fail("usage: --exec-task -- PROGRAM [ARGS...]");
    const char *list = env(kEnvLaunchUnits);
    if (!list) return fail(std::string(kEnvLaunchUnits) + " is not set (this mode is internal to omni-launch)");
    auto units = parse_unit_list(list);
    if (!units) return fail(units.error());
    const char *size_text = env(kEnvUnitSize);
    auto size = omni::parse_uint(size_text ? size_text : "", 1, kMaxUnitSizeRanks, kEnvUnitSize);
    if (!size) return fail(size.error());
    const char *procid_text = env("SLURM_PROCID");
    auto procid = omni::parse_uint(procid_text ? procid_text : "", 0, kMaxWorld, "SLURM_PROCID");
    if (!procid) return fail(procid.error());
    auto where = task_unit(units.value(), static_cast<std::uint32_t>(size.value()),
                           static_cast<std::uint32_t>(procid.value()));
    if (!where) return fail(where.error());
    auto [unit, slot] = where.value();
    if (::setenv(kEnvUnitId, std::to_string(unit).c_str(), 1) != 0 ||
        ::setenv(kEnvUnitSlot, std::to_string(slot).c_str(), 1) != 0 ||
        ::setenv(kEnvMemberId, member_id(unit, slot).c_str(), 1) != 0)
        return fail(std::string("setenv: ") + std::strerror(errno));
    ::unsetenv(kEnvLaunchUnits);
    // A satellite's ranks ignore SIGTERM: Slurm preempting the satellite sends it to every
    // step, and its omni-launch turns the preemption into a leave at the next boundary
    // (launch/satellite.h). SIGKILL at the end of the grace time still ends them.
    if (env(kEnvSatelliteOf)) {
        if (procid.value() == 0) start_preemption_sentinel();
        ::signal(SIGTERM, SIG_IGN);
    }
    ::execvp(argv[3], argv + 3);
    return fail(std::string("cannot run ") + argv[3] + ": " + std::strerror(errno));
}

// The events file when --events is not given: in a Slurm job, omni-events-JOBID.jsonl in the
// working directory, where sbatch writes slurm-JOBID.out, since it is the job's record for
// the user: the job directory is on the batch host's /tmp (often private to the job and
// removed with it, job_container/tmpfs), holds only what the running job needs, and goes
// when omni-launch exits. Outside Slurm, JOB_DIR/events.jsonl.
std::string default_events_file(std::uint32_t job_id, const std::string &job_dir) {
    if (job_id == 0) return job_dir + "/events.jsonl";
    const std::string name = "omni-events-" + std::to_string(job_id) + ".jsonl";
    char cwd[4096];
    return ::getcwd(cwd, sizeof cwd) ? std::string(cwd) + "/" + name : name;
}

void install_signal_handlers() {
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) ::sigaction(sig, &sa, nullptr);
    // SIGURG is no request to stop: it only says "read the job now" (its default action is
    // to ignore it, so the batch shell and the sruns in its process group are unaffected).
    sa.sa_handler = on_slurm_news;
    ::sigaction(SIGURG, &sa, nullptr);
}

// The coordinator holds one descriptor per connection, and a rank opens two or three (its
// runtime's, its liveness thread's, the C API's store). Batch scripts often run with a soft
// limit of 1024 open files, which a job of a few hundred ranks exhausts: libzmq then leaves
// new connections unaccepted and those ranks time out at their join (doc/design.md,
// "Scaling"). Raised towards what the largest world needs, never past the hard limit, with
// room for as many unfinished handshakes as the coordinator keeps (conn_auth.h).
void raise_open_files(std::uint64_t max_world) {
    const rlim_t need = static_cast<rlim_t>(max_world) * kConnectionsPerRank +
                        static_cast<rlim_t>(max_pending_connections(max_world)) + 256;
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need)
        log_line(LogLevel::Warning, kComponent,
                 "open files limited to " + std::to_string(rl.rlim_cur) + " (the hard limit); " +
                     std::to_string(max_world) + " ranks may need " + std::to_string(need) +
                     " coordinator connections: raise the hard limit (ulimit -Hn) for larger jobs");
}

// How the steps start their ranks (launch/plan.h): --mpi, OMNI_LAUNCH_MPI, or auto, which
// asks `srun --mpi=list` once. Errors name the setting; the caller exits with usage status.
omni::Result<std::string> launch_mpi(const LaunchOptions &o) {
    auto mode = mpi_mode_setting(o, env);
    if (!mode) return omni::Error{mode.error()};
    std::optional<bool> offers;
    if (mode.value() == kMpiAuto) {
        auto list = run_capture({"srun", "--mpi=list"}, kScontrolTimeoutMs, 64 << 10);
        if (list) offers = mpi_list_offers_pmix(list.value());
        else
            log_line(LogLevel::Warning, kComponent,
                     "--mpi auto: " + list.error() + "; the steps start their ranks without PMIx (--mpi=none)");
    }
    auto mpi = resolve_mpi(mode.value(), offers, env);
    if (mpi && mode.value() == kMpiAuto)
        log_line(LogLevel::Info, kComponent,
                 mpi.value() == kMpiPmix ? std::string("--mpi auto: srun offers pmix; the steps use it")
                                         : std::string("--mpi auto: the steps start their ranks with --mpi=none "
                                                       "(model-parallel groups wire up through the coordinator)") +
                                               (offers ? ": srun --mpi=list offers no pmix" : ""));
    return mpi;
}

// omni-launch --satellite, the batch script of a satellite job (launch/satellite.h): its
// units join the main job's coordinator, named in the environment the main omni-launch gave
// sbatch. It runs no coordinator and records no events.
int run_satellite(DriverConfig &cfg) {
    auto fail = [](const std::string &msg) {
        std::cerr << "omni-launch --satellite: " << msg << "\n";
        return kExitFail;
    };
    const char *units_text = env(kEnvSatelliteUnits);
    if (!units_text)
        return fail(std::string(kEnvSatelliteUnits) +
                    " is not set: this mode runs in a satellite job that omni-launch submitted");
    auto units = parse_unit_list(units_text);
    if (!units) return fail(std::string(kEnvSatelliteUnits) + ": " + units.error());
    if (units.value().empty()) return fail(std::string(kEnvSatelliteUnits) + " names no unit");
    const char *size_text = env(kEnvUnitSize);
    auto size = omni::parse_uint(size_text ? size_text : "", 1, kMaxUnitSizeRanks, kEnvUnitSize);
    if (!size) return fail(size.error());
    auto where = locate_coordinator("", "", env);
    if (!where) return fail(where.error());
    cfg.endpoint = where.value().endpoint;
    cfg.secret = where.value().secret;
    const char *dir = env(kEnvJobDir);
    cfg.job_dir = dir ? dir : "";
    cfg.settings.unit_size = static_cast<std::uint32_t>(size.value());
    cfg.settings.capacity = job_capacity(cfg.settings.unit_size, cfg.alloc.holding);
    cfg.satellite_units = units.value();
    auto self = self_executable();
    if (!self) return fail(self.error());
    cfg.self = self.value();
    install_signal_handlers();
    auto mpi = launch_mpi(cfg.options);
    if (!mpi) return fail(mpi.error());
    cfg.mpi = mpi.value();
    const char *of = env(kEnvSatelliteOf);
    log_line(LogLevel::Info, kComponent,
             std::string("satellite of job ") + (of ? of : "?") + ": units [" +
                 format_unit_list(cfg.satellite_units) + "] join the coordinator " + cfg.endpoint);
    cfg.slurm_news = &g_slurm_news;
    return run_driver(cfg, g_signals, g_last_signal);
}

// What the real run would start: its units, the capacity they come from, and each initial
// unit's step with the share it asks for (read off Slurm's per-node details of the job as
// the run does, else the batch environment).
void print_dry_run(const DriverConfig &cfg) {
    const LaunchSettings &st = cfg.settings;
    std::cout << "# " << st.units << " unit(s) of " << st.unit_size << " rank(s), range " << st.min_units << ".."
              << st.max_units << "; one srun step per unit, joining units get steps of their own\n";
    if (cfg.alloc.nodes > 0) std::cout << "# " << capacity_text(st.capacity, cfg.alloc.nodes, st.unit_size) << "\n";
    if (cfg.policy) std::cout << "# elastic policy " << omni::policy_text(*cfg.policy) << " (--omni-policy)\n";
    std::vector<std::string> share;
    if (st.capacity.units_per_node > 1) {
        NodeShare node = cfg.alloc.holding.node;
        if (cfg.alloc.job_id != 0)
            if (auto job = load_job(cfg.alloc.job_id, kScontrolTimeoutMs); job && !job.value().cpus.empty())
                node = smallest_node(job.value());
        share = step_share_args(st.unit_size, st.capacity, node, cfg.options.srun_args);
    }
    for (std::uint32_t unit = 0; unit < st.units; ++unit) {
        StepSpec spec;
        spec.extra = cfg.options.srun_args;
        spec.extra.insert(spec.extra.end(), share.begin(), share.end());
        spec.self = cfg.self;
        spec.mpi = cfg.mpi;
        spec.program = cfg.options.program;
        spec.tasks = st.unit_size;
        spec.nodes = cfg.alloc.nodes > 0 ? std::min(st.capacity.nodes_per_unit, cfg.alloc.nodes) : 0;
        spec.name = "omni-u" + std::to_string(unit);
        std::cout << shell_join({std::string(kEnvCoordAddr) + "=tcp://ADDR:PORT",
                                 std::string(kEnvCoordSecret) + "=SECRET",
                                 std::string(kEnvJobDir) + "=" + cfg.job_dir,
                                 std::string(kEnvUnitSize) + "=" + std::to_string(st.unit_size),
                                 std::string(kEnvLaunchUnits) + "=" + std::to_string(unit)})
                  << " \\\n  " << shell_join(srun_argv(spec)) << "\n";
    }
}

int run(int argc, char **argv) {
    auto parsed = parse_command_line(argc, argv);
    if (parsed.exit_code == 0) {
        std::cout << parsed.text;
        return 0;
    }
    if (parsed.exit_code > 0) {
        std::cerr << parsed.text;
        return parsed.exit_code;
    }
    if (const char *lvl = env("OMNI_LOG_LEVEL"); lvl && std::strcmp(lvl, "debug") == 0)
        set_log_level(LogLevel::Debug);
    DriverConfig cfg;
    cfg.options = std::move(parsed.options);
    auto alloc = allocation_from_env(env);
    if (!alloc) {
        std::cerr << "omni-launch: " << alloc.error() << "\n";
        return kExitFail;
    }
    cfg.alloc = alloc.value();
    if (cfg.options.satellite) return run_satellite(cfg);
    auto job = omni::job_options_from_job_env(env);
    if (!job) {
        std::cerr << "omni-launch: the job's OMNI_* options: " << job.error() << "\n";
        return kExitFail;
    }
    const auto &jo = job.value();
    auto settings = resolve_settings(cfg.options, cfg.alloc, jo.elastic ? jo.elastic->first : 0,
                                     jo.elastic ? jo.elastic->second : 0,
                                     jo.unit_given || jo.elastic ? jo.unit_size : 0);
    if (!settings) {
        std::cerr << "omni-launch: " << settings.error() << "\nTry 'omni-launch --help'.\n";
        return kExitUsage;
    }
    cfg.settings = settings.value();
    if (cfg.alloc.nodes > 0 && cfg.settings.units > cfg.settings.capacity.units)
        log_line(LogLevel::Warning, kComponent,
                 "--units " + std::to_string(cfg.settings.units) + " is more than the allocation runs at once (" +
                     capacity_text(cfg.settings.capacity, cfg.alloc.nodes, cfg.settings.unit_size) +
                     "): the steps of the units beyond it wait for others to end");
    // Model-parallel groups lie inside a unit (libomni(3)): refuse a layout whose groups would
    // straddle units before any step starts.
    if (jo.mp > 1 && cfg.settings.unit_size % jo.mp != 0) {
        std::cerr << "omni-launch: OMNI_MP=" << jo.mp << " (sbatch --omni-mp): model-parallel groups of " << jo.mp
                  << " ranks do not divide units of " << cfg.settings.unit_size
                  << " ranks (--unit-size, OMNI_UNIT_SIZE); expected a unit size that M divides\n";
        return kExitUsage;
    }
    cfg.policy = jo.policy;
    if (auto site = omni::site_config_from_env(env)) cfg.site_grow = site.value().grow;
    auto self = self_executable();
    if (!self) {
        std::cerr << "omni-launch: " << self.error() << "\n";
        return kExitFail;
    }
    cfg.self = self.value();
    // The job's own directory (derived from its id), as against one the user named.
    bool own_job_dir = false;
    if (!cfg.options.job_dir.empty()) {
        cfg.job_dir = cfg.options.job_dir;
    } else {
        own_job_dir = !env(kEnvJobDir) || !*env(kEnvJobDir);
        auto d = job_dir_from_env(env);
        if (!d) {
            if (!cfg.options.dry_run) {
                std::cerr << "omni-launch: " << d.error() << " (or give --job-dir)\n";
                return kExitFail;
            }
            cfg.job_dir = "/tmp/omni-" + std::to_string(::geteuid()) + "/job-CLUSTER-JOBID";
        } else {
            cfg.job_dir = d.value();
        }
    }
    auto mpi = launch_mpi(cfg.options);
    if (!mpi) {
        std::cerr << "omni-launch: " << mpi.error() << "\nTry 'omni-launch --help'.\n";
        return kExitUsage;
    }
    cfg.mpi = mpi.value();
    if (cfg.options.dry_run) {
        print_dry_run(cfg);
        return 0;
    }

    std::string bind = cfg.options.bind;
    if (bind.empty()) {
        if (cfg.alloc.batch_node.empty()) {
            std::cerr << "omni-launch: not inside a Slurm job (SLURMD_NODENAME is not set); give "
                         "--bind ADDR\n";
            return kExitFail;
        }
        auto ip = node_bind_address(cfg.alloc.batch_node, kScontrolTimeoutMs);
        if (!ip) {
            std::cerr << "omni-launch: " << ip.error() << "\n";
            return kExitFail;
        }
        bind = ip.value();
    }
    auto secret = generate_secret();
    if (!secret) {
        std::cerr << "omni-launch: " << secret.error() << "\n";
        return kExitFail;
    }
    cfg.secret = secret.value();

    // Signals before any thread exists, so every thread inherits the handlers.
    install_signal_handlers();

    raise_open_files(std::uint64_t(cfg.settings.max_units) * cfg.settings.unit_size);
    CoordinatorConfig cc;
    cc.bind = {"tcp://" + bind + ":0"};
    cc.secret = cfg.secret;
    cc.protocol.unit_size = cfg.settings.unit_size;
    cc.protocol.initial_units = cfg.settings.units;
    cc.protocol.min_units = cfg.settings.min_units;
    cc.protocol.max_units = cfg.settings.max_units;
    cc.protocol.boundary_timeout_ms = cfg.options.boundary_timeout_ms;
    // A rank silent this long (stopped, hung: no heartbeat) is lost too, at a boundary or not.
    cc.protocol.liveness_timeout_ms = cfg.options.boundary_timeout_ms;
    cc.protocol.formation_timeout_ms = cfg.options.formation_timeout_ms;
    cc.protocol.grow_wait_ms = cfg.options.grow_wait_ms;
    cc.protocol.announce_planned = cfg.options.announce;
    auto coord = Coordinator::start(cc);
    if (!coord) {
        std::cerr << "omni-launch: coordinator: " << coord.error() << "\n";
        return kExitFail;
    }
    cfg.endpoint = coord.value()->endpoints().front();
    // A directory made here is removed at the end if it is empty then (the events file, when
    // it is there, stays for the user); one that existed is left as it was found, unless it
    // is the job's own (/tmp/omni-UID/job-CLUSTER-JOBID): then an earlier run of this job,
    // killed before it could clean up (SIGKILL, a node's crash), made it, and the requeued
    // run removes it at its end like its own.
    bool made_job_dir = false;
    omni::Status published = ensure_private_dir(cfg.job_dir, &made_job_dir);
    if (published) published = publish_job_files(cfg.job_dir, cfg.secret, cfg.endpoint);
    if (!published) {
        std::cerr << "omni-launch: " << published.error() << "\n";
        if (made_job_dir) ::rmdir(cfg.job_dir.c_str());
        return kExitFail;
    }
    cfg.events = cfg.options.events.empty() ? default_events_file(cfg.alloc.job_id, cfg.job_dir) : cfg.options.events;
    cfg.metrics = cfg.options.metrics_file;
    log_line(LogLevel::Info, kComponent,
             "coordinator " + cfg.endpoint + ", job directory " + cfg.job_dir + ", events " +
                 cfg.events + "; " + std::to_string(cfg.settings.units) + " unit(s) of " +
                 std::to_string(cfg.settings.unit_size) + " rank(s), range " +
                 std::to_string(cfg.settings.min_units) + ".." + std::to_string(cfg.settings.max_units) +
                 (cfg.alloc.nodes > 0 ? "; " + capacity_text(cfg.settings.capacity, cfg.alloc.nodes, cfg.settings.unit_size)
                                      : std::string()));
    cfg.slurm_news = &g_slurm_news;
    int rc = run_driver(cfg, g_signals, g_last_signal);
    coord.value()->stop();
    // The job is over: nobody may talk to a coordinator of this job again.
    ::unlink((cfg.job_dir + "/" + kAddressFile).c_str());
    ::unlink((cfg.job_dir + "/" + kSecretFile).c_str());
    if (made_job_dir || own_job_dir) ::rmdir(cfg.job_dir.c_str());
    return rc;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc >= 2 && std::strcmp(argv[1], "--exec-task") == 0) return exec_task(argc, argv);
    // Exceptions never cross into the C runtime: anything unexpected is a failure (1).
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::cerr << "omni-launch: " << e.what() << "\n";
        return kExitFail;
    }
}
