// omni-ctl: requests to the coordinator of the current job (omni-launch).
//
//   omni-ctl status [--json]        where the job stands: generation, units, world, ...
//   omni-ctl reshape --units K      a planned resize to K units at a coming boundary
//
// The coordinator's endpoint and the job secret come from --address / the environment
// (OMNI_COORD_ADDR, OMNI_COORD_SECRET) or from the job's private directory (--job-dir,
// OMNI_JOB_DIR, else /tmp/omni-UID/job-SLURM_JOB_ID). Exit: 0 success, 1 failure, 2 usage.
#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "common/parse.h"
#include "coord/client.h"
#include "coord/secret.h"

namespace po = boost::program_options;
using namespace omni::launcher;

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
        "       omni-ctl [OPTIONS] reshape --units K\n\n"
        "Talks to the coordinator of the current slurm-omni job (see omni-ctl(1)).\n\nOptions");
    std::string command, units_text, address, job_dir, timeout_text = "10000";
    opts.add_options()
        ("help,h", "show this help and exit")
        ("json", "status: print the status as one JSON object")
        ("units", po::value<std::string>(&units_text), "reshape: the number of elastic units wanted")
        ("address", po::value<std::string>(&address),
         "coordinator endpoint tcp://IPV4:PORT (default: $OMNI_COORD_ADDR or the job directory)")
        ("job-dir", po::value<std::string>(&job_dir),
         "the job's private directory (default: $OMNI_JOB_DIR, else /tmp/omni-UID/job-$SLURM_JOB_ID)")
        ("timeout", po::value<std::string>(&timeout_text), "milliseconds to wait for the coordinator (default 10000)");
    po::options_description hidden;
    hidden.add_options()("command", po::value<std::string>(&command));
    po::options_description all;
    all.add(opts).add(hidden);
    po::positional_options_description pos;
    pos.add("command", 1);
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
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
    if (command.empty()) return usage("a command is required: status or reshape");
    if (command != "status" && command != "reshape")
        return usage("unknown command '" + command + "' (expected status or reshape)");
    if (command == "status" && vm.count("units")) return usage("--units belongs to reshape");
    if (command == "reshape" && vm.count("json")) return usage("--json belongs to status");
    auto timeout = omni::parse_uint(timeout_text, 1, 3600000, "--timeout");
    if (!timeout) return usage(timeout.error());
    std::uint32_t units = 0;
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

    auto target = locate_coordinator(address, job_dir, env);
    if (!target) {
        std::cerr << "omni-ctl: " << target.error() << "\n";
        return kExitFail;
    }
    auto client = CoordinatorClient::connect(target.value().endpoint, target.value().secret);
    if (!client) {
        std::cerr << "omni-ctl: " << client.error() << "\n";
        return kExitFail;
    }
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
