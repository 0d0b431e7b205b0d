// omni-launch's command line; see launch/options.h.
#include "launch/options.h"

#include <algorithm>
#include <sstream>

#include <boost/program_options.hpp>

#include "common/parse.h"
#include "coord/protocol.h"
#include "coord/wire.h"

namespace po = boost::program_options;

namespace omni::launcher {
namespace {

constexpr const char *kUsage =
    "Usage: omni-launch [OPTIONS] -- PROGRAM [ARGS...]\n\n"
    "Runs PROGRAM as the ranks of an elastic slurm-omni job, inside the job's batch script:\n"
    "starts the job's coordinator, launches the ranks with srun (--mpi), applies resizes\n"
    "requested with omni-ctl and exits with the ranks' status (see omni-launch(1)).\n\nOptions";

po::options_description describe() {
    po::options_description o(kUsage);
    o.add_options()
        ("help,h", "show this help and exit")
        ("units", po::value<std::string>(), "K: initial elastic units (default $OMNI_ELASTIC_MAX, "
                                            "else the allocation's capacity)")
        ("min-units", po::value<std::string>(), "K: fewest units before the job stops "
                                                "(default $OMNI_ELASTIC_MIN, else 1)")
        ("max-units", po::value<std::string>(), "K: most units a reshape may ask for "
                                                "(default $OMNI_ELASTIC_MAX, else the capacity)")
        ("unit-size", po::value<std::string>(), "N: ranks per unit (default $OMNI_UNIT_SIZE, else 1)")
        ("events", po::value<std::string>(), "FILE: JSONL generation events "
                                             "(default omni-events-JOBID.jsonl in a Slurm job, else JOB_DIR/events.jsonl)")
        ("metrics-file", po::value<std::string>(), "FILE: the job's figures in Prometheus text "
                                                   "format, rewritten atomically every second "
                                                   "(node_exporter's textfile collector)")
        ("job-dir", po::value<std::string>(), "DIR: the job's private directory "
                                              "(default $OMNI_JOB_DIR, else /tmp/omni-UID/job-CLUSTER-JOBID)")
        ("boundary-timeout", po::value<std::string>(), "SECONDS: a rank missing a boundary, or silent "
                                                       "(no heartbeat: stopped, hung), this long is lost (default 30)")
        ("formation-timeout", po::value<std::string>(), "SECONDS: wait for the initial ranks "
                                                        "(default 120)")
        ("grow-wait", po::value<std::string>(), "SECONDS: a grow applies the complete joiner units "
                                                "it has after this long (default 60)")
        ("bind", po::value<std::string>(), "ADDR: IPv4 address the coordinator listens on "
                                           "(default: this node's NodeAddr)")
        ("mpi", po::value<std::string>(), "auto|pmix|none: how srun starts the ranks: pmix (Slurm's "
                                          "mpi/pmix), none (no PMI: model-parallel groups wire up "
                                          "through the coordinator) or auto (default $OMNI_LAUNCH_MPI, "
                                          "else pmix where srun --mpi=list offers it, else none)")
        ("srun-args", po::value<std::string>(), "'ARGS': extra srun options for every step, "
                                                "e.g. '--gres=gpu:4'")
        ("satellite-args", po::value<std::string>(), "'ARGS': extra sbatch options for the satellite "
                                                     "jobs of grows via satellite, e.g. '--qos=scavenger'")
        ("satellite", "internal: run the units of a satellite job (omni-launch submits it)")
        ("announce", po::value<std::string>(), "yes|no: announce a planned resize one step ahead, "
                                                "so that ranks allocate for it during that step and the "
                                                "pause is shorter (default yes)")
        ("dry-run", "print the srun command line of every initial unit's step and exit");
    return o;
}

Result<std::uint32_t> uint_option(const po::variables_map &vm, const char *name, std::uint64_t lo,
                                  std::uint64_t hi, const char *form) {
    const auto &text = vm[name].as<std::string>();
    auto v = parse_uint(text, lo, hi, std::string("--") + name);
    if (!v) return make_error(v.error() + " (expected --" + name + " " + form + ")");
    return static_cast<std::uint32_t>(v.value());
}

Result<std::int64_t> seconds_option(const po::variables_map &vm, const char *name,
                                    std::uint64_t max_seconds) {
    auto v = uint_option(vm, name, 1, max_seconds, "SECONDS");
    if (!v) return Error{v.error()};
    return static_cast<std::int64_t>(v.value()) * 1000;
}

}  // namespace

ParsedCommandLine parse_command_line(int argc, const char *const *argv) {
    ParsedCommandLine out;
    auto usage = [&](const std::string &msg) {
        out.exit_code = 2;
        out.text = "omni-launch: " + msg + "\nTry 'omni-launch --help'.\n";
        return out;
    };
    // PROGRAM's own options must never be read as ours: everything after the first "--" is
    // the program, untouched.
    int split = argc;
    for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]) == "--") {
            split = i;
            break;
        }
    auto desc = describe();
    po::variables_map vm;
    try {
        std::vector<std::string> ours(argv + 1, argv + split);
        po::store(po::command_line_parser(ours).options(desc).run(), vm);
        po::notify(vm);
    } catch (const po::error &e) {
        return usage(e.what());
    }
    if (vm.count("help")) {
        std::ostringstream s;
        s << desc << "\nEnvironment: OMNI_ELASTIC_MIN, OMNI_ELASTIC_MAX, OMNI_UNIT_SIZE (set by "
                     "sbatch --omni-elastic/--omni-unit),\nOMNI_POLICY (sbatch --omni-policy=auto: "
                     "the job resizes itself), OMNI_JOB_DIR,\nOMNI_LAUNCH_MPI (the default of --mpi).\nRanks get OMNI_UNIT_ID, "
                     "OMNI_UNIT_SLOT, OMNI_UNIT_SIZE, OMNI_MEMBER_ID, OMNI_COORD_ADDR, "
                     "OMNI_COORD_SECRET and OMNI_JOB_DIR.\n"
                     "Exit status: the trainer's: 0 when the ranks finished (also after losing units\n"
                     "the job went on without), else the first failure it could not recover from;\n"
                     "1 when omni-launch itself fails, 2 on bad usage (see omni-launch(1)).\n";
        out.exit_code = 0;
        out.text = s.str();
        return out;
    }
    LaunchOptions &o = out.options;
    if (split >= argc - 1) return usage("PROGRAM is required after '--' (omni-launch [OPTIONS] -- PROGRAM [ARGS...])");
    o.program.assign(argv + split + 1, argv + argc);
    struct U {
        const char *name;
        std::optional<std::uint32_t> *dst;
        std::uint64_t hi;
        const char *form;
    };
    for (const U &u : {U{"units", &o.units, kMaxUnits, "K"},
                       U{"min-units", &o.min_units, kMaxUnits, "K"},
                       U{"max-units", &o.max_units, kMaxUnits, "K"},
                       U{"unit-size", &o.unit_size, kMaxUnitSizeRanks, "N"}}) {
        if (!vm.count(u.name)) continue;
        auto v = uint_option(vm, u.name, 1, u.hi, u.form);
        if (!v) return usage(v.error());
        *u.dst = v.value();
    }
    struct S {
        const char *name;
        std::int64_t *dst;
        std::uint64_t max;
    };
    for (const S &s : {S{"boundary-timeout", &o.boundary_timeout_ms, 86400},
                       S{"formation-timeout", &o.formation_timeout_ms, 86400},
                       S{"grow-wait", &o.grow_wait_ms, 86400}}) {
        if (!vm.count(s.name)) continue;
        auto v = seconds_option(vm, s.name, s.max);
        if (!v) return usage(v.error());
        *s.dst = v.value();
    }
    if (vm.count("events")) {
        o.events = vm["events"].as<std::string>();
        if (o.events.empty()) return usage("--events needs a FILE");
    }
    if (vm.count("metrics-file")) {
        o.metrics_file = vm["metrics-file"].as<std::string>();
        if (o.metrics_file.empty() || o.metrics_file.back() == '/')
            return usage("--metrics-file '" + o.metrics_file + "': expected a FILE");
    }
    if (vm.count("job-dir")) {
        o.job_dir = vm["job-dir"].as<std::string>();
        if (o.job_dir.empty() || o.job_dir[0] != '/')
            return usage("--job-dir '" + o.job_dir + "': expected an absolute path");
    }
    if (vm.count("bind")) {
        o.bind = vm["bind"].as<std::string>();
        auto e = parse_endpoint("tcp://" + o.bind + ":0", true);
        if (!e) return usage("--bind '" + o.bind + "': expected a literal IPv4 address such as 10.0.0.5 (" + e.error() + ")");
        if (o.bind == "0.0.0.0") return usage("--bind 0.0.0.0: the coordinator never listens on a wildcard address");
    }
    if (vm.count("mpi")) {
        auto m = parse_mpi_mode(vm["mpi"].as<std::string>(), "--mpi");
        if (!m) return usage(m.error());
        o.mpi = m.value();
    }
    if (vm.count("srun-args")) {
        auto words = split_srun_args(vm["srun-args"].as<std::string>());
        if (!words) return usage(words.error() + " (expected --srun-args 'SRUN OPTIONS')");
        o.srun_args = std::move(words.value());
    }
    if (vm.count("satellite-args")) {
        auto words = split_sbatch_args(vm["satellite-args"].as<std::string>());
        if (!words) return usage(words.error() + " (expected --satellite-args 'SBATCH OPTIONS')");
        o.satellite_args = std::move(words.value());
    }
    o.satellite = vm.count("satellite") > 0;
    o.dry_run = vm.count("dry-run") > 0;
    if (o.satellite && o.dry_run) return usage("--satellite and --dry-run do not go together");
    if (vm.count("announce")) {
        auto a = parse_yes_no(vm["announce"].as<std::string>(), "--announce");
        if (!a) return usage(a.error());
        o.announce = a.value();
    }
    return out;
}

Result<std::string> mpi_mode_setting(const LaunchOptions &o, GetEnv get) {
    if (!o.mpi.empty()) return o.mpi;
    const char *v = get(kEnvLaunchMpi);
    if (!v || !*v) return std::string(kMpiAuto);  // set empty: as unset
    return parse_mpi_mode(v, kEnvLaunchMpi);
}

Result<std::string> resolve_mpi(const std::string &mode, std::optional<bool> offers_pmix, GetEnv get) {
    std::string mpi = mode;
    if (mode == kMpiAuto) mpi = offers_pmix.value_or(false) ? kMpiPmix : kMpiNone;
    const char *wireup = get("OMNI_MP_WIREUP");
    if (mpi == kMpiNone && wireup && std::string_view(wireup) == "pmix")
        return make_error(std::string("the ranks would start without PMIx (--mpi ") + mode +
                          (mode == kMpiAuto ? ": srun --mpi=list offers no pmix" : "") +
                          "), but OMNI_MP_WIREUP=pmix wires their model-parallel groups up through "
                          "PMIx only: unset it (auto), set it to coordinator, or give --mpi pmix");
    return mpi;
}

Result<LaunchSettings> resolve_settings(const LaunchOptions &o, const Allocation &a,
                                        std::uint64_t env_min, std::uint64_t env_max,
                                        std::uint64_t env_unit_size) {
    LaunchSettings s;
    s.unit_size = o.unit_size ? *o.unit_size : env_unit_size ? static_cast<std::uint32_t>(env_unit_size) : 1;
    s.capacity = job_capacity(s.unit_size, a.holding);
    const std::uint32_t capacity_units = s.capacity.units;
    s.units = o.units ? *o.units : env_max ? static_cast<std::uint32_t>(env_max) : capacity_units;
    if (s.units == 0)
        return make_error(a.nodes == 0 ? std::string("cannot tell how many units to start: give --units K (not "
                                                     "inside a Slurm job, and no OMNI_ELASTIC_MAX)")
                                       : "the allocation's " + std::to_string(a.nodes) + " node(s) run " +
                                             std::to_string(s.capacity.ranks) + " rank(s) at once (" +
                                             s.capacity.basis + "), no unit of " + std::to_string(s.unit_size) +
                                             "; give --units K or ask for more tasks or nodes");
    s.min_units = o.min_units ? *o.min_units : env_min ? static_cast<std::uint32_t>(env_min) : 1;
    s.max_units = o.max_units ? *o.max_units
                  : env_max   ? static_cast<std::uint32_t>(env_max)
                              : std::max(capacity_units, s.units);
    // An elastic job starts with the units its allocation runs at once: Slurm may give it
    // fewer nodes than MAX units need (a node range, select/omni), and a unit beyond them
    // would only wait for a step of the job to end.
    if (!o.units && env_max && a.nodes > 0 && capacity_units < s.units) {
        if (capacity_units < s.min_units)
            return make_error("the allocation's " + std::to_string(a.nodes) + " node(s) run " +
                              std::to_string(capacity_units) + " unit(s) of " + std::to_string(s.unit_size) +
                              " rank(s) at once (" + s.capacity.basis + "), fewer than the elastic minimum " +
                              std::to_string(s.min_units));
        s.units = capacity_units;
    }
    if (s.min_units > s.max_units)
        return make_error("--min-units " + std::to_string(s.min_units) + " exceeds --max-units " +
                          std::to_string(s.max_units));
    if (s.units < s.min_units || s.units > s.max_units)
        return make_error("--units " + std::to_string(s.units) + " is outside the elastic range " +
                          std::to_string(s.min_units) + ".." + std::to_string(s.max_units));
    if (std::uint64_t(s.max_units) * s.unit_size > kMaxWorld)
        return make_error("--max-units x --unit-size exceeds " + std::to_string(kMaxWorld) + " ranks");
    return s;
}

}  // namespace omni::launcher
