// omni-ctl: requests to the coordinator of the current job (omni-launch).
//
//   omni-ctl status [--json]        where the job stands: generation, units, world, ...
//   omni-ctl reshape --units K      a planned resize to K units at a coming boundary
//   omni-ctl shrink --units K | --nodes LIST
//                                   a planned shrink that then gives the emptied nodes back
//                                   to Slurm (scontrol update NodeList=)
//   omni-ctl grow --units K [--via auto|satellite|expand|allocation] | --cancel
//                                   a planned grow whose units start in a satellite job
//                                   (default) or in the job's own allocation
//
// The coordinator's endpoint and the job secret come from --address / the environment
// (OMNI_COORD_ADDR, OMNI_COORD_SECRET) or from the job's private directory (--job-dir,
// OMNI_JOB_DIR, else /tmp/omni-UID/job-SLURM_CLUSTER_NAME-SLURM_JOB_ID). With --job J,
// omni-ctl runs itself as a step of job J on its batch host (ctl/remote.h).
// Exit: 0 success, 1 failure, 2 usage.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "common/hostlist.h"
#include "common/parse.h"
#include "coord/client.h"
#include "coord/protocol.h"
#include "coord/secret.h"
#include "ctl/remote.h"
#include "ctl/shrink_plan.h"
#include "slurmjob/job.h"
#include "slurmjob/proc.h"

namespace po = boost::program_options;
using namespace omni::launcher;
using omni::Error;
using omni::make_error;
using omni::Result;

namespace {

constexpr int kExitOk = 0, kExitFail = 1, kExitUsage = 2;

const char *env(const char *name) { return std::getenv(name); }

std::string or_none(const nlohmann::json &v) { return v.is_null() ? "none" : v.dump(); }

void print_status(const std::string &endpoint, const nlohmann::json &s) {
    std::cout << "coordinator:      " << endpoint << "\n"
              << "phase:            " << s.value("phase", "?") << "\n"
              << "generation:       " << s.value("generation", 0) << "\n"
              << "units:            " << s.value("units", 0) << " (range " << s.value("min_units", 0)
              << ".." << s.value("max_units", 0) << ", unit size " << s.value("unit_size", 0)
              << ")\n"
              << "world:            " << s.value("world", 0) << " ranks\n"
              << "target units:     " << or_none(s.value("target_units", nlohmann::json())) << "\n";
    // Where each unit runs, as its ranks told the coordinator: "0@n1 1@n2,n3".
    std::map<std::uint32_t, std::set<std::string>> where;
    for (const auto &m : s.value("members", nlohmann::json::array()))
        if (m.contains("node") && m.at("node").is_string())
            where[m.value("unit", 0u)].insert(m.at("node").get<std::string>());
    if (!where.empty()) {
        std::cout << "nodes:           ";
        for (const auto &[unit, nodes] : where) {
            std::string list;
            for (const auto &n : nodes) list += (list.empty() ? "" : ",") + n;
            std::cout << " " << unit << "@" << list;
        }
        std::cout << "\n";
    }
    auto ga = s.value("grad_accum", nlohmann::json());
    if (ga.is_number())
        std::cout << "batch:            global " << s.value("global_batch", 0) << ", micro "
                  << s.value("micro_batch", 0) << ", gradient accumulation " << ga.dump()
                  << (s.value("mp", 1) > 1 ? ", model parallel " + std::to_string(s.value("mp", 1)) + " (DP " +
                                                 std::to_string(s.value("world", 0) / s.value("mp", 1)) + ")"
                                           : std::string())
                  << "\n";
    auto rate = s.value("samples_per_s", nlohmann::json());
    if (rate.is_number()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", rate.get<double>());
        std::cout << "throughput:       " << buf << " samples/s\n";
    }
    auto changes = s.value("changes", nlohmann::json::object());
    if (!changes.empty()) {
        std::cout << "changes:         ";
        for (auto it = changes.begin(); it != changes.end(); ++it) std::cout << " " << it.key() << " " << it.value().dump();
        std::cout << "\n";
    }
    const auto pending = s.value("pending_joiners", nlohmann::json::array()).size();
    auto target = s.value("target_units", nlohmann::json());
    if (target.is_number() && target.get<std::uint32_t>() > s.value("units", 0u))
        std::cout << "pending grow:     to " << target.dump() << " units, " << pending
                  << " joining rank(s) waiting\n";
    auto step = s.value("boundary_step", nlohmann::json());
    if (!step.is_null())
        std::cout << "boundary:         step " << step.dump() << ", " << s.value("arrived", 0)
                  << " of " << s.value("world", 0) << " ranks arrived\n";
    std::cout << "last step:        " << s.value("last_step", 0) << "\n"
              << "pending joiners:  " << s.value("pending_joiners", nlohmann::json::array()).size() << "\n";
    auto last = s.value("last_change", nlohmann::json());
    if (last.is_object()) {
        std::cout << "last change:      " << last.value("kind", "?") << " at generation "
                  << last.value("generation", 0) << " step " << last.value("step", 0) << " ("
                  << last.value("reason", "?") << ")";
        if (last.contains("next_world"))
            std::cout << " -> generation " << last.value("next_generation", 0) << ", world "
                      << last.value("next_world", 0);
        std::cout << "\n";
    }
    auto pause = s.value("change_pause_ms", nlohmann::json());
    if (pause.is_number())
        std::cout << "change pause:     " << pause.dump() << " ms (decision to every rank ready)\n";
    auto resize = s.value("last_resize", nlohmann::json());
    if (resize.is_object()) {
        std::cout << "last resize:      " << resize.value("kind", "?") << ", " << resize.value("old_units", 0)
                  << " -> " << resize.value("new_units", 0) << " units at step " << resize.value("step", 0)
                  << " (generation " << resize.value("generation", 0) << ")";
        auto p = resize.value("pause_ms", nlohmann::json());
        if (p.is_number()) std::cout << ", pause " << p.dump() << " ms";
        std::cout << "\n";
    }
    auto ckpt = s.value("last_checkpoint", nlohmann::json());
    if (ckpt.is_object()) {
        std::cout << "last checkpoint:  step " << ckpt.value("step", 0);
        const auto when = ckpt.value("time", std::int64_t(0));
        if (when > 0) {
            const std::time_t t = static_cast<std::time_t>(when);
            std::tm tm{};
            char buf[32];
            if (::gmtime_r(&t, &tm) && std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm))
                std::cout << " at " << buf;
        }
        auto where = ckpt.value("location", nlohmann::json());
        if (where.is_string()) std::cout << " in " << where.get<std::string>();
        std::cout << "\n";
    }
}

std::int64_t mono_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string join_units(const std::vector<std::uint32_t> &units) {
    std::string out;
    for (auto unit : units) out += (out.empty() ? "" : ",") + std::to_string(unit);
    return out;
}

Result<nlohmann::json> fetch_status(CoordinatorClient &client, std::int64_t timeout_ms) {
    Request q;
    q.op = Op::Status;
    auto reply = client.call(q, timeout_ms);
    if (!reply) return Error{reply.error()};
    auto it = reply.value().body.find("status");
    if (it == reply.value().body.end() || !it->is_object())
        return make_error("the coordinator's reply has no status");
    return *it;
}

struct ShrinkArgs {
    std::optional<std::uint32_t> units;
    std::vector<std::string> nodes;
    std::uint32_t job_id = 0;
    std::int64_t request_timeout_ms = 10000;
    std::int64_t wait_ms = 600000;
    std::string cause = kCausePlanned;
};

// omni-ctl shrink: choose (ctl/shrink_plan.h), ask the coordinator for the planned shrink
// with those units named, wait for it to apply and for the leaving units' steps to end, then
// give the emptied nodes back to Slurm. Each stage says what it did on stdout; a failure
// names the stage, and leaves the job running (a shrink that applied but could not release
// its nodes leaves them idle in the job).
int shrink(CoordinatorClient &client, const ShrinkArgs &a) {
    auto fail = [](const std::string &msg) {
        std::cerr << "omni-ctl: shrink: " << msg << "\n";
        return kExitFail;
    };
    auto st = fetch_status(client, a.request_timeout_ms);
    if (!st) return fail(st.error());
    const nlohmann::json &s = st.value();
    ShrinkInput in;
    std::uint64_t generation = 0;
    try {
        if (s.at("phase").get<std::string>() != "running")
            return fail("the job is " + s.at("phase").get<std::string>() + ", not running");
        if (!s.at("target_units").is_null())
            return fail("a planned change to " + s.at("target_units").dump() +
                        " units is pending; shrink once it has applied");
        generation = s.at("generation").get<std::uint64_t>();
        in.units = s.at("unit_ids").get<std::vector<std::uint32_t>>();
        in.min_units = s.at("min_units").get<std::uint32_t>();
        for (const auto &m : s.at("members"))
            if (m.contains("node") && m.at("node").is_string())
                in.placements.emplace_back(m.at("unit").get<std::uint32_t>(), m.at("node").get<std::string>());
    } catch (const nlohmann::json::exception &e) {
        return fail(std::string("the coordinator's status: ") + e.what());
    }
    auto job = load_job(a.job_id, a.request_timeout_ms);
    if (!job) return fail(job.error());
    if (job.value().state != "RUNNING")
        return fail("job " + std::to_string(a.job_id) + " is " + job.value().state + ", not RUNNING");
    in.job_nodes = job.value().nodes;
    in.batch_host = job.value().batch_host;
    auto plan = a.units ? plan_shrink_to(in, *a.units) : plan_shrink_nodes(in, a.nodes);
    if (!plan) return fail(plan.error().substr(std::string("shrink: ").size()));
    const ShrinkPlan &p = plan.value();
    std::cout << "shrink " << in.units.size() << " -> " << p.target << " units: "
              << (p.leave.empty() ? std::string("no unit leaves") : "units " + join_units(p.leave) + " leave")
              << "; " << (p.release.empty() ? std::string("no node is emptied") : "nodes " + omni::join(p.release, ",") + " go back to Slurm")
              << std::endl;
    const std::int64_t deadline = mono_ms() + a.wait_ms;
    if (!p.leave.empty()) {
        Request r;
        r.op = Op::Reshape;
        r.units = p.target;
        r.leave = p.leave;
        r.cause = a.cause;
        auto reply = client.call(r, a.request_timeout_ms);
        if (!reply) return fail(reply.error());
        // Applied when a later generation holds none of the leaving units.
        for (;;) {
            auto now = fetch_status(client, a.request_timeout_ms);
            if (now) {
                const auto &n = now.value();
                auto g = n.value("generation", std::uint64_t(0));
                auto ids = n.value("unit_ids", std::vector<std::uint32_t>());
                bool gone = std::none_of(p.leave.begin(), p.leave.end(), [&](std::uint32_t unit) {
                    return std::find(ids.begin(), ids.end(), unit) != ids.end();
                });
                if (g > generation && gone) {
                    std::cout << "generation " << g << ": " << ids.size() << " units at step "
                              << n.value("last_step", std::uint64_t(0)) << std::endl;
                    break;
                }
                if (n.value("phase", std::string()) == "stopped") return fail("the job stopped before the shrink applied");
            }
            if (mono_ms() > deadline)
                return fail("the shrink did not apply within " + std::to_string(a.wait_ms / 1000) +
                            " s (it stays requested; omni-ctl status shows it)");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        // Slurm ends a job's steps on the nodes a shrink releases: the leaving units' steps
        // must have ended first, or their ranks would be killed instead of leaving.
        std::set<std::string> names;
        for (auto unit : p.leave) names.insert("omni-u" + std::to_string(unit));
        for (;;) {
            auto steps = job_step_names(a.job_id, a.request_timeout_ms);
            if (steps && std::none_of(steps.value().begin(), steps.value().end(),
                                      [&](const std::string &n) { return names.count(n) > 0; }))
                break;
            if (mono_ms() > deadline)
                return fail("the steps of units " + join_units(p.leave) + " did not end within " +
                            std::to_string(a.wait_ms / 1000) + " s; their nodes stay in the job");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
    if (p.release.empty()) return kExitOk;
    if (auto rel = release_nodes(a.job_id, p.keep, a.request_timeout_ms); !rel) return fail(rel.error());
    auto after = load_job(a.job_id, a.request_timeout_ms);
    if (!after) return fail(after.error());
    for (const auto &node : p.release)
        if (std::find(after.value().nodes.begin(), after.value().nodes.end(), node) != after.value().nodes.end())
            return fail("node " + node + " is still in job " + std::to_string(a.job_id) + " after scontrol update");
    std::cout << "released " << omni::join(p.release, ",") << ": job " << a.job_id << " now has "
              << after.value().node_list << " (" << after.value().nodes.size() << " node"
              << (after.value().nodes.size() == 1 ? "" : "s") << ")" << std::endl;
    return kExitOk;
}

struct GrowArgs {
    std::optional<std::uint32_t> units;  // none: --cancel
    std::string via;
    std::int64_t request_timeout_ms = 10000;
    std::int64_t wait_ms = 600000;       // 0: do not wait
};

// omni-ctl grow: ask for the grow, then (unless --wait 0) wait for a generation of K units.
// A grow Slurm cannot run now stays pending; --cancel withdraws it (a reshape to the job's
// current size), and omni-launch then cancels the satellite it had submitted for it.
int grow(CoordinatorClient &client, const GrowArgs &a) {
    auto fail = [](const std::string &msg) {
        std::cerr << "omni-ctl: grow: " << msg << "\n";
        return kExitFail;
    };
    auto st = fetch_status(client, a.request_timeout_ms);
    if (!st) return fail(st.error());
    std::uint32_t units = 0;
    std::optional<std::uint32_t> target;
    try {
        const nlohmann::json &s = st.value();
        if (s.at("phase").get<std::string>() != "running")
            return fail("the job is " + s.at("phase").get<std::string>() + ", not running");
        units = s.at("units").get<std::uint32_t>();
        if (!s.at("target_units").is_null()) target = s.at("target_units").get<std::uint32_t>();
    } catch (const nlohmann::json::exception &e) {
        return fail(std::string("the coordinator's status: ") + e.what());
    }
    Request r;
    r.op = Op::Reshape;
    if (!a.units) {
        if (!target || *target <= units) {
            std::cout << "no grow is pending; the job has " << units << " units" << std::endl;
            return kExitOk;
        }
        r.units = units;
        if (auto reply = client.call(r, a.request_timeout_ms); !reply) return fail(reply.error());
        std::cout << "grow to " << *target << " units withdrawn; the job stays at " << units << " units"
                  << std::endl;
        return kExitOk;
    }
    const std::uint32_t k = *a.units;
    if (k <= units)
        return fail("--units " + std::to_string(k) + " is not above the job's " + std::to_string(units) +
                    " units (omni-ctl shrink makes a job smaller)");
    r.units = k;
    r.via = a.via;
    if (auto reply = client.call(r, a.request_timeout_ms); !reply) return fail(reply.error());
    std::cout << "grow " << units << " -> " << k << " units requested (via " << a.via << ")" << std::endl;
    if (a.wait_ms == 0) return kExitOk;
    const std::int64_t deadline = mono_ms() + a.wait_ms;
    for (;;) {
        auto now = fetch_status(client, a.request_timeout_ms);
        if (now) {
            const auto &n = now.value();
            const auto have = n.value("units", 0u);
            if (have >= k) {
                std::cout << "generation " << n.value("generation", std::uint64_t(0)) << ": " << have
                          << " units at step " << n.value("last_step", std::uint64_t(0)) << std::endl;
                return kExitOk;
            }
            if (n.value("phase", std::string()) == "stopped") return fail("the job stopped before the grow applied");
            auto t = n.value("target_units", nlohmann::json());
            if (!t.is_number() || t.get<std::uint32_t>() != k)
                return fail("the grow to " + std::to_string(k) + " units was withdrawn (target now " +
                            (t.is_number() ? t.dump() : std::string("none")) +
                            "; omni-launch's log in the job's output says why)");
        }
        if (mono_ms() > deadline)
            return fail("the grow to " + std::to_string(k) + " units did not apply within " +
                        std::to_string(a.wait_ms / 1000) +
                        " s; it stays pending (omni-ctl status shows it, omni-ctl grow --cancel withdraws it)");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

// omni-ctl --job J: the coordinator of job J, read by a short step of the job
// (ctl/remote.h).
Result<CoordinatorLocation> locate_in_job(std::uint32_t job_id, std::int64_t timeout_ms) {
    auto fail = [&](const std::string &msg) { return make_error("job " + std::to_string(job_id) + ": " + msg); };
    auto job = load_job(job_id, timeout_ms);
    if (!job) return fail(job.error());
    if (job.value().state != "RUNNING") return fail("it is " + job.value().state + ", not running");
    auto cluster = cluster_name(timeout_ms);
    if (!cluster) return fail(cluster.error());
    auto self = self_executable();
    if (!self) return fail(self.error());
    RemoteCall c;
    c.job_id = job_id;
    c.batch_host = job.value().batch_host;
    c.job_user = job.value().user;
    c.job_uid = job.value().uid;
    c.cluster = cluster.value();
    c.caller_uid = ::geteuid();
    c.self = self.value();
    auto cmd = remote_argv(c);
    if (!cmd) return Error{cmd.error()};
    // A step starts in well under a second; Slurm may retry its creation for a while.
    auto out = run_capture(cmd.value(), std::max<std::int64_t>(timeout_ms, 30000), 1024);
    if (!out) return fail("reading its coordinator in a step of the job: " + out.error());
    auto printed = parse_printed_coordinator(out.value());
    if (!printed) return fail(printed.error());
    CoordinatorLocation loc{printed.value().first, printed.value().second};
    if (auto e = parse_endpoint(loc.endpoint, false); !e) return fail(e.error());
    if (auto st = check_secret_format(loc.secret); !st) return fail(st.error());
    return loc;
}

}  // namespace

static int run(int argc, char **argv);

int main(int argc, char **argv) {
    // Replies are validated where they are used; anything unexpected is a failure (1), never
    // an abort.
    try {
        return run(argc, argv);
    } catch (const std::exception &e) {
        std::cerr << "omni-ctl: " << e.what() << "\n";
        return kExitFail;
    }
}

static int run(int argc, char **argv) {
    po::options_description opts(
        "Usage: omni-ctl [OPTIONS] status [--json]\n"
        "       omni-ctl [OPTIONS] reshape --units K\n"
        "       omni-ctl [OPTIONS] shrink --units K | --nodes LIST [--job-id J] [--wait S]\n"
        "       omni-ctl [OPTIONS] grow --units K [--via auto|satellite|expand|allocation] [--wait S]\n"
        "       omni-ctl [OPTIONS] grow --cancel\n\n"
        "Talks to the coordinator of the current slurm-omni job, or with --job J of job J from\n"
        "outside it (see omni-ctl(1)).\n\nOptions");
    std::string command, units_text, address, job_dir, timeout_text = "10000", nodes_text,
        job_text, wait_text, via = kViaAuto, remote_text, cause = kCausePlanned;
    opts.add_options()
        ("help,h", "show this help and exit")
        ("json", "status: print the status as one JSON object")
        ("units", po::value<std::string>(&units_text),
         "reshape, shrink, grow: the number of elastic units wanted")
        ("nodes", po::value<std::string>(&nodes_text),
         "shrink: the nodes to give back to Slurm (a host list such as n[3-4]); their units leave")
        ("job-id", po::value<std::string>(&job_text), "shrink: the Slurm job (default: $SLURM_JOB_ID)")
        ("wait", po::value<std::string>(&wait_text),
         "shrink, grow: seconds to wait for the change (default 600; grow --wait 0: do not wait)")
        ("via", po::value<std::string>(&via),
         "grow: where the new units start: auto (default: expand where the job qualifies, else "
         "satellite), satellite (a job of their own), expand (nodes Slurm's job expansion adds to "
         "the job) or allocation (the job's own idle nodes)")
        ("cancel", "grow: withdraw a pending grow")
        ("cause", po::value<std::string>(&cause),
         "shrink: who asks, as omni-ctl status reports the resize: planned (default), scontrol "
         "(omni-launch, for a shrink that job_submit/omni deferred), policy or preemption")
        ("job", po::value<std::string>(&remote_text),
         "J: ask the coordinator of job J from outside it (a login node), as a step of the job; "
         "its owner and root may")
        ("address", po::value<std::string>(&address),
         "coordinator endpoint tcp://IPV4:PORT (default: $OMNI_COORD_ADDR or the job directory)")
        ("job-dir", po::value<std::string>(&job_dir),
         "the job's private directory (default: $OMNI_JOB_DIR, else /tmp/omni-UID/job-$SLURM_CLUSTER_NAME-$SLURM_JOB_ID)")
        ("timeout", po::value<std::string>(&timeout_text), "milliseconds to wait for the coordinator (default 10000)");
    po::options_description hidden;
    hidden.add_options()("command", po::value<std::string>(&command))(kPrintCoordinatorOption + 2, "internal");
    po::options_description all;
    all.add(opts).add(hidden);
    po::positional_options_description pos;
    pos.add("command", 1);
    po::variables_map vm;
    try {
        // No abbreviations: --job, --job-id and --job-dir differ only in their ends.
        po::store(po::command_line_parser(argc, argv)
                      .options(all)
                      .positional(pos)
                      .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                      .run(),
                  vm);
        po::notify(vm);
    } catch (const po::error &e) {
        std::cerr << "omni-ctl: " << e.what() << "\nTry 'omni-ctl --help'.\n";
        return kExitUsage;
    }
    if (vm.count("help")) {
        std::cout << opts << "\nExit status: 0 success, 1 failure, 2 bad usage.\n";
        return kExitOk;
    }
    auto usage = [](const std::string &msg) {
        std::cerr << "omni-ctl: " << msg << "\nTry 'omni-ctl --help'.\n";
        return kExitUsage;
    };
    if (command.empty() && !vm.count("print-coordinator"))
        return usage("a command is required: status, reshape, shrink or grow");
    if (command != "status" && command != "reshape" && command != "shrink" && command != "grow" &&
        !vm.count("print-coordinator"))
        return usage("unknown command '" + command + "' (expected status, reshape, shrink or grow)");
    if (command == "status" && vm.count("units")) return usage("--units belongs to reshape, shrink and grow");
    if (command != "status" && vm.count("json")) return usage("--json belongs to status");
    if (command != "shrink")
        for (const char *o : {"nodes", "job-id", "cause"})
            if (vm.count(o)) return usage(std::string("--") + o + " belongs to shrink");
    if (command != "shrink" && command != "grow" && vm.count("wait"))
        return usage("--wait belongs to shrink and grow");
    if (command != "grow")
        for (const char *o : {"via", "cancel"})
            if (vm.count(o)) return usage(std::string("--") + o + " belongs to grow");
    auto timeout = omni::parse_uint(timeout_text, 1, 3600000, "--timeout");
    if (!timeout) return usage(timeout.error());
    std::uint32_t remote_job = 0;
    if (vm.count("job")) {
        if (vm.count("address") || vm.count("job-dir"))
            return usage("--job finds the job's coordinator itself: drop --address and --job-dir");
        if (vm.count("job-id")) return usage("--job names the job already: drop --job-id");
        auto j = omni::parse_uint(remote_text, 1, UINT32_MAX, "--job");
        if (!j) return usage(j.error());
        remote_job = static_cast<std::uint32_t>(j.value());
    }
    std::uint32_t units = 0;
    ShrinkArgs shrink_args;
    shrink_args.request_timeout_ms = static_cast<std::int64_t>(timeout.value());
    if (command == "shrink") {
        if (vm.count("units") == vm.count("nodes")) return usage("shrink needs one of --units K and --nodes LIST");
        if (vm.count("units")) {
            auto u = omni::parse_uint(units_text, 1, kMaxUnits, "--units");
            if (!u) return usage(u.error());
            shrink_args.units = static_cast<std::uint32_t>(u.value());
        } else {
            auto n = omni::expand_hostlist(nodes_text, "--nodes", 4096);
            if (!n) return usage(n.error());
            if (n.value().empty()) return usage("--nodes names no node");
            shrink_args.nodes = std::move(n).value();
        }
        const char *job_env = env("SLURM_JOB_ID");
        if (!vm.count("job-id") && !job_env && !remote_job)
            return usage("shrink gives nodes back to a Slurm job: run it inside the job, or name it with --job (from outside) or --job-id");
        if (remote_job) {
            shrink_args.job_id = remote_job;
        } else {
            auto j = omni::parse_uint(vm.count("job-id") ? job_text : job_env, 1, UINT32_MAX,
                                      vm.count("job-id") ? "--job-id" : "SLURM_JOB_ID");
            if (!j) return usage(j.error());
            shrink_args.job_id = static_cast<std::uint32_t>(j.value());
        }
        if (vm.count("wait")) {
            auto w = omni::parse_uint(wait_text, 1, 86400, "--wait");
            if (!w) return usage(w.error());
            shrink_args.wait_ms = static_cast<std::int64_t>(w.value()) * 1000;
        }
        if (!check_resize_cause(cause))
            return usage("--cause '" + cause.substr(0, 32) + "': expected planned, scontrol, policy or preemption");
        shrink_args.cause = cause;
    }
    GrowArgs grow_args;
    grow_args.request_timeout_ms = static_cast<std::int64_t>(timeout.value());
    if (command == "grow") {
        if (vm.count("units") == vm.count("cancel")) return usage("grow needs one of --units K and --cancel");
        if (vm.count("cancel") && (vm.count("via") || vm.count("wait")))
            return usage("grow --cancel takes no --via or --wait");
        if (vm.count("units")) {
            auto u = omni::parse_uint(units_text, 1, kMaxUnits, "--units");
            if (!u) return usage(u.error());
            grow_args.units = static_cast<std::uint32_t>(u.value());
        }
        if (!check_grow_via(via)) return usage("--via '" + via.substr(0, 32) + "': expected auto, satellite, expand or allocation");
        grow_args.via = via;
        if (vm.count("wait")) {
            auto w = omni::parse_uint(wait_text, 0, 86400, "--wait");
            if (!w) return usage(w.error());
            grow_args.wait_ms = static_cast<std::int64_t>(w.value()) * 1000;
        }
    }
    if (command == "reshape") {
        if (!vm.count("units")) return usage("reshape needs --units K");
        auto u = omni::parse_uint(units_text, 1, kMaxUnits, "--units");
        if (!u) return usage(u.error());
        units = static_cast<std::uint32_t>(u.value());
    }
    if (vm.count("job-dir") && (job_dir.empty() || job_dir[0] != '/'))
        return usage("--job-dir must be an absolute path");
    if (vm.count("address")) {
        if (auto e = parse_endpoint(address, false); !e) return usage(e.error());
    }

    if (vm.count("print-coordinator")) {
        if (!vm.count("job-dir") || !command.empty())
            return usage(std::string(kPrintCoordinatorOption) + " is internal to omni-ctl --job (it needs --job-dir and no command)");
        auto where = locate_coordinator("", job_dir, env);
        if (!where) {
            std::cerr << "omni-ctl: " << where.error() << "\n";
            return kExitFail;
        }
        std::cout << where.value().endpoint << "\n" << where.value().secret << "\n";
        return kExitOk;
    }
    auto target = remote_job ? locate_in_job(remote_job, static_cast<std::int64_t>(timeout.value()))
                             : locate_coordinator(address, job_dir, env);
    if (!target) {
        std::cerr << "omni-ctl: " << target.error() << "\n";
        return kExitFail;
    }
    auto client = CoordinatorClient::connect(target.value().endpoint, target.value().secret);
    if (!client) {
        std::cerr << "omni-ctl: " << client.error() << "\n";
        return kExitFail;
    }
    if (command == "shrink") return shrink(*client.value(), shrink_args);
    if (command == "grow") return grow(*client.value(), grow_args);
    Request req;
    req.op = command == "status" ? Op::Status : Op::Reshape;
    req.units = units;
    auto reply = client.value()->call(req, static_cast<std::int64_t>(timeout.value()));
    if (!reply) {
        std::cerr << "omni-ctl: " << reply.error() << "\n";
        return kExitFail;
    }
    const auto &body = reply.value().body;
    if (command == "status") {
        auto it = body.find("status");
        if (it == body.end() || !it->is_object()) {
            std::cerr << "omni-ctl: the coordinator's reply has no status\n";
            return kExitFail;
        }
        if (vm.count("json")) {
            nlohmann::json out = *it;
            out["coordinator"] = target.value().endpoint;
            std::cout << out.dump(2) << "\n";
        } else {
            print_status(target.value().endpoint, *it);
        }
        return kExitOk;
    }
    std::cout << "reshape to " << units << (units == 1 ? " unit" : " units") << " requested (now " << body.value("units", 0)
              << " units, generation " << body.value("generation", 0)
              << "); it takes effect at a coming step boundary\n";
    return kExitOk;
}
