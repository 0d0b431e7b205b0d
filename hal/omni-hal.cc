// omni-hal: hardware topology, domains, health checks and Slurm configuration of a node.
//
// Exit status (omni-hal(1)): 0 success; 1 failure (unreadable or malformed input, output not
// written; for `check`: findings); 2 bad usage (for `check`: any error, including input that
// cannot be loaded, so that 1 always means "the node has findings").
#include <fcntl.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "hal/health.h"
#include "hal/model.h"
#include "hal/output.h"
#include "hal/topofile.h"
#include "common/parse.h"

namespace po = boost::program_options;
using namespace omni::hal;

namespace {

constexpr int kOk = 0;
constexpr int kFail = 1;
constexpr int kUsage = 2;

struct UsageError {
    std::string message;
};

const char *const kCommands =
    "Commands:\n"
    "  show       the node: CPUs, GPUs, NICs, NVMe, domains (--json: omni-hal/node v1)\n"
    "  matrix     GPU/NIC path matrix, as nvidia-smi topo -m prints it\n"
    "  units      elastic-unit candidates: GPU sets of a size inside one domain\n"
    "  gres-conf  Slurm gres.conf lines for the GPUs\n"
    "  export     write the site topology file (omni-topology(5)) for this node\n"
    "  merge      combine several topology files into one site file\n"
    "  validate   check a site topology file\n"
    "  topology-conf  Slurm topology.conf blocks (topology/block) from a site file\n"
    "  check      health findings OMNI-HAL-NNN (exit 0 healthy, 1 findings, 2 error)\n"
    "  codes      list every finding code\n";

void usage_top(std::ostream &o) {
    o << "Usage: omni-hal COMMAND [OPTIONS]\n"
         "       omni-hal COMMAND --help\n"
         "       omni-hal --version\n\n"
      << kCommands
      << "\nThe topology is the live machine, or --topology FILE (hwloc XML, lstopo --of xml),\n"
         "or $HWLOC_XMLFILE; $HWLOC_FSROOT is honoured for the live machine.\n"
         "See omni-hal(1) and omni-topology(5).\n";
}

std::string arg(const po::variables_map &vm, const char *name) {
    return vm.count(name) ? vm[name].as<std::string>() : std::string();
}

// Writes `text` to `path` ("-" = stdout) through a temporary file and rename, so that a
// reader (slurmctld, the plugins) never sees half a file.
omni::Status write_output(const std::string &path, const std::string &text) {
    if (path == "-") {
        std::cout << text << std::flush;
        if (!std::cout) return omni::make_error("cannot write to standard output");
        return omni::Status::success();
    }
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return omni::make_error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
    std::size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string e = std::strerror(errno);
            ::close(fd);
            ::unlink(tmp.c_str());
            return omni::make_error(path + ": write failed: " + e);
        }
        off += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        const std::string e = std::strerror(errno);
        ::unlink(tmp.c_str());
        return omni::make_error(path + ": write failed: " + e);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string e = std::strerror(errno);
        ::unlink(tmp.c_str());
        return omni::make_error(path + ": cannot rename " + tmp + " into place: " + e);
    }
    return omni::Status::success();
}

class Command {
public:
    Command(std::string name, std::string synopsis, std::string about)
        : name_(std::move(name)), synopsis_(std::move(synopsis)), about_(std::move(about)),
          desc_("Options") {
        desc_.add_options()("help,h", "show this help and exit");
    }
    virtual ~Command() = default;

    /* Everything the command parses: its documented options and the hidden ones that
     * carry positional arguments (help shows only the former). */
    po::options_description options() const {
        po::options_description all;
        all.add(desc_).add(hidden_);
        return all;
    }
    void add_topology() {
        desc_.add_options()("topology,t", po::value<std::string>(),
                            "hwloc XML file to read instead of the live machine");
    }
    void help(std::ostream &o) const {
        o << "Usage: omni-hal " << name_ << " " << synopsis_ << "\n\n" << about_ << "\n\n" << desc_;
    }
    const std::string &name() const { return name_; }
    virtual int run(const po::variables_map &vm) = 0;
    /* Exit status for input that cannot be loaded. */
    virtual int load_failure() const { return kFail; }

    po::positional_options_description positional;

protected:
    omni::Result<Node> load(const po::variables_map &vm, bool query_devices = true) const {
        LoadOptions o;
        o.topology_file = arg(vm, "topology");
        if (vm.count("topology") && o.topology_file.empty())
            throw UsageError{"--topology: empty file name; expected an hwloc XML file"};
        o.query_devices = query_devices;
        return load_node(o);
    }
    /* Loads the node, printing its warnings; on failure prints the error and returns
     * nothing (the caller exits with load_failure()). */
    std::optional<Node> load_or_report(const po::variables_map &vm, bool query_devices = true) const {
        auto r = load(vm, query_devices);
        if (!r) {
            std::cerr << "omni-hal " << name_ << ": " << r.error() << "\n";
            return std::nullopt;
        }
        for (const auto &w : r.value().warnings) std::cerr << "omni-hal: warning: " << w << "\n";
        return std::move(r).value();
    }

    std::string name_, synopsis_, about_;
    po::options_description desc_;
    po::options_description hidden_;  // positional arguments
};

class Show : public Command {
public:
    Show() : Command("show", "[--topology FILE] [--json]",
                     "Describe the node: CPUs, GPUs with their local CPUs, domains and closest "
                     "NIC/NVMe, NICs,\nNVMe drives, NVSwitches. --json prints the omni-hal/node "
                     "document (schema_version " + std::to_string(kNodeSchemaVersion) + ").") {
        add_topology();
        desc_.add_options()("json", "print JSON instead of a table");
    }
    int run(const po::variables_map &vm) override {
        auto loaded = load_or_report(vm);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        std::cout << (vm.count("json") ? node_json(node, 2) : node_table(node));
        return kOk;
    }
};

class Matrix : public Command {
public:
    Matrix() : Command("matrix", "[--topology FILE]",
                       "Print the GPU x GPU and GPU x NIC path types (X, NV#, PIX, PXB, PHB, "
                       "NODE, SYS) with\neach GPU's CPU and NUMA affinity. The same matrix is "
                       "in show --json (gpu_paths).") {
        add_topology();
    }
    int run(const po::variables_map &vm) override {
        auto loaded = load_or_report(vm, false);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        std::cout << path_matrix(node);
        return kOk;
    }
};

class Units : public Command {
public:
    Units() : Command("units", "--size K --domain KIND [--disjoint] [--limit N] [--json]",
                      "List elastic-unit candidates: sets of K GPUs that fit inside one domain "
                      "of KIND\n(pcie, nvlink, numa, node). By default every such set, at most "
                      "--limit of them;\n--disjoint cuts each domain into consecutive groups "
                      "of K instead.") {
        add_topology();
        desc_.add_options()("size,k", po::value<std::string>(), "unit size K, 1..1024")(
            "domain,d", po::value<std::string>(), "domain kind: pcie|nvlink|numa|node")(
            "disjoint", "non-overlapping groups of K per domain")(
            "limit", po::value<std::string>(), "print at most N sets (default 1000)")(
            "json", "print JSON (schema omni-hal/units)");
    }
    int run(const po::variables_map &vm) override {
        if (!vm.count("size") || !vm.count("domain"))
            throw UsageError{"--size and --domain are required"};
        auto k = omni::parse_uint(arg(vm, "size"), 1, 1024, "--size");
        if (!k) throw UsageError{k.error()};
        auto kind = parse_domain_kind(arg(vm, "domain"), "--domain");
        if (!kind) throw UsageError{kind.error()};
        std::uint64_t limit = 1000;
        if (vm.count("limit")) {
            auto l = omni::parse_uint(arg(vm, "limit"), 1, 1000000, "--limit");
            if (!l) throw UsageError{l.error()};
            limit = l.value();
        }
        auto loaded = load_or_report(vm, false);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        const bool disjoint = vm.count("disjoint") > 0;
        const auto c = unit_candidates(node, kind.value(), static_cast<unsigned>(k.value()),
                                       disjoint, limit);
        if (vm.count("json")) {
            std::cout << units_json(node, kind.value(), static_cast<unsigned>(k.value()), disjoint, c, 2);
            return kOk;
        }
        for (const auto &s : c.sets) std::cout << format_cpulist(s) << "\n";
        std::cout << "# " << c.total << " " << (disjoint ? "disjoint " : "") << "unit(s) of "
                  << k.value() << " GPU(s) in " << domain_kind_name(kind.value()) << " domains"
                  << (c.truncated ? ", list cut at --limit" : "") << "\n";
        return kOk;
    }
};

class GresConf : public Command {
public:
    GresConf() : Command("gres-conf", "[--topology FILE] [--device-prefix P] [--node-name N] [--mps] [-o FILE]",
                         "Print Slurm gres.conf lines, one per GPU:\n  Name=gpu Type=<model> "
                         "File=<prefix><n> Cores=<local cores> Links=<NVLink counts>\nCores= "
                         "are core logical indexes as slurmd numbers them.") {
        add_topology();
        desc_.add_options()("device-prefix", po::value<std::string>(),
                            "NVIDIA device path prefix (default /dev/nvidia)")(
            "amd-device-prefix", po::value<std::string>(),
            "AMD device path prefix, numbered from 128 (default /dev/dri/renderD)")(
            "node-name", po::value<std::string>(), "start each line with NodeName=N")(
            "type", po::value<std::string>(), "Type= for every GPU instead of the model name")(
            "mps", "also Name=mps Count=100 per NVIDIA GPU (gres/mps: SM shares)")(
            "output,o", po::value<std::string>(), "write to FILE (atomically) instead of stdout");
    }
    int run(const po::variables_map &vm) override {
        GresOptions g;
        g.mps = vm.count("mps") > 0;
        if (vm.count("device-prefix")) g.nvidia_prefix = prefix(vm, "device-prefix");
        if (vm.count("amd-device-prefix")) g.amd_prefix = prefix(vm, "amd-device-prefix");
        if (vm.count("node-name")) {
            g.node_name = arg(vm, "node-name");
            if (auto st = check_hostname(g.node_name, "--node-name: "); !st) throw UsageError{st.error()};
        }
        if (vm.count("type")) {
            g.type = arg(vm, "type");
            if (g.type.empty() || slurm_type(g.type) != g.type)
                throw UsageError{"--type: '" + g.type.substr(0, 64) +
                                 "': expected lower-case letters, digits, '.', '-' and '_'"};
        }
        auto loaded = load_or_report(vm, false);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        if (node.gpus.empty()) std::cerr << "omni-hal gres-conf: warning: no GPUs found\n";
        const std::string out = vm.count("output") ? arg(vm, "output") : "-";
        if (auto st = write_output(out, gres_conf(node, g)); !st) {
            std::cerr << "omni-hal gres-conf: " << st.error() << "\n";
            return kFail;
        }
        return kOk;
    }

private:
    static std::string prefix(const po::variables_map &vm, const char *opt) {
        const std::string p = arg(vm, opt);
        const std::string what = std::string("--") + opt;
        if (p.empty() || p[0] != '/' || p.find_first_of(" \t=") != std::string::npos)
            throw UsageError{what + ": '" + p.substr(0, 64) +
                             "': expected an absolute path prefix without blanks, e.g. /dev/nvidia"};
        if (auto st = omni::check_env_value(what, p, 200); !st) throw UsageError{st.error()};
        return p;
    }
};

class Export : public Command {
public:
    Export() : Command("export", "-o FILE [--topology FILE] [--hostname NAME] [--fabric NAME] [--merge SITEFILE]...",
                       "Write this node's entry of the site topology file (omni-topology(5), "
                       "version " + std::to_string(kTopologyFileVersion) + ").\n--merge adds "
                       "the nodes of existing topology files, so one file describes the site.") {
        add_topology();
        desc_.add_options()("output,o", po::value<std::string>(), "file to write, - for stdout")(
            "hostname", po::value<std::string>(),
            "node name in the file (default: the topology's HostName, else this host)")(
            "fabric", po::value<std::string>(),
            "the multi-node NVLink domain the node's GPUs belong to (e.g. its NVL72 rack), "
            "for topology-conf")(
            "merge", po::value<std::vector<std::string>>(), "topology file to combine (repeatable)");
    }
    int run(const po::variables_map &vm) override {
        if (!vm.count("output")) throw UsageError{"-o FILE is required (- for stdout)"};
        std::string host = arg(vm, "hostname");
        if (vm.count("hostname"))
            if (auto st = check_hostname(host, "--hostname: "); !st) throw UsageError{st.error()};
        auto loaded = load_or_report(vm, false);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        if (host.empty()) host = node.hostname;
        if (auto st = check_hostname(host, ""); !st) {
            std::cerr << "omni-hal export: " << node.source
                      << ": the topology names no valid host (" << st.error()
                      << "); give --hostname NAME\n";
            return kFail;
        }
        SiteTopology site;
        site.nodes.push_back(site_node(node, host));
        if (vm.count("fabric")) {
            const std::string fabric = arg(vm, "fabric");
            if (auto st = check_fabric(fabric, "--fabric: "); !st) throw UsageError{st.error()};
            site.nodes.back().fabric = fabric;
        }
        if (vm.count("merge"))
            for (const auto &f : vm["merge"].as<std::vector<std::string>>()) {
                auto other = read_site_topology(f);
                if (!other) {
                    std::cerr << "omni-hal export: " << other.error() << "\n";
                    return kFail;
                }
                if (auto st = merge_site(site, other.value(), f); !st) {
                    std::cerr << "omni-hal export: " << st.error() << "\n";
                    return kFail;
                }
            }
        if (auto st = write_output(arg(vm, "output"), site_json(site)); !st) {
            std::cerr << "omni-hal export: " << st.error() << "\n";
            return kFail;
        }
        return kOk;
    }
};

class Merge : public Command {
public:
    Merge() : Command("merge", "-o FILE INPUT...",
                      "Combine topology files (omni-topology(5)) into one site file; a host in "
                      "two inputs is an error.") {
        desc_.add_options()("output,o", po::value<std::string>(), "file to write, - for stdout");
        hidden_.add_options()("input", po::value<std::vector<std::string>>(), "topology files");
        positional.add("input", -1);
    }
    int run(const po::variables_map &vm) override {
        if (!vm.count("output")) throw UsageError{"-o FILE is required (- for stdout)"};
        if (!vm.count("input")) throw UsageError{"give at least one INPUT topology file"};
        SiteTopology site;
        for (const auto &f : vm["input"].as<std::vector<std::string>>()) {
            auto t = read_site_topology(f);
            if (!t) {
                std::cerr << "omni-hal merge: " << t.error() << "\n";
                return kFail;
            }
            if (auto st = merge_site(site, t.value(), f); !st) {
                std::cerr << "omni-hal merge: " << st.error() << "\n";
                return kFail;
            }
        }
        if (auto st = write_output(arg(vm, "output"), site_json(site)); !st) {
            std::cerr << "omni-hal merge: " << st.error() << "\n";
            return kFail;
        }
        return kOk;
    }
};

class TopologyConf : public Command {
public:
    TopologyConf() : Command("topology-conf", "-o FILE SITEFILE",
                             "Write Slurm's topology.conf for TopologyPlugin=topology/block: one "
                             "block per fabric\n(omni-hal export --fabric), naming its nodes.") {
        desc_.add_options()("output,o", po::value<std::string>(), "file to write, - for stdout");
        hidden_.add_options()("input", po::value<std::vector<std::string>>(), "site file");
        positional.add("input", -1);
    }
    int run(const po::variables_map &vm) override {
        if (!vm.count("output")) throw UsageError{"-o FILE is required (- for stdout)"};
        if (!vm.count("input") || vm["input"].as<std::vector<std::string>>().size() != 1)
            throw UsageError{"give one SITEFILE (omni-hal merge combines several)"};
        const std::string f = vm["input"].as<std::vector<std::string>>()[0];
        auto site = read_site_topology(f);
        if (!site) {
            std::cerr << "omni-hal topology-conf: " << site.error() << "\n";
            return kFail;
        }
        auto conf = block_conf(site.value());
        if (!conf) {
            std::cerr << "omni-hal topology-conf: " << f << ": " << conf.error() << "\n";
            return kFail;
        }
        if (auto st = write_output(arg(vm, "output"), conf.value()); !st) {
            std::cerr << "omni-hal topology-conf: " << st.error() << "\n";
            return kFail;
        }
        return kOk;
    }
};

class Validate : public Command {
public:
    Validate() : Command("validate", "FILE...",
                         "Check site topology files (omni-topology(5)); exit 0 when all are "
                         "valid, 1 otherwise.") {
        hidden_.add_options()("input", po::value<std::vector<std::string>>(), "topology files");
        positional.add("input", -1);
    }
    int run(const po::variables_map &vm) override {
        if (!vm.count("input")) throw UsageError{"give at least one topology FILE"};
        int rc = kOk;
        for (const auto &f : vm["input"].as<std::vector<std::string>>()) {
            auto t = read_site_topology(f);
            if (!t) {
                std::cerr << "omni-hal validate: " << t.error() << "\n";
                rc = kFail;
                continue;
            }
            std::size_t gpus = 0;
            for (const auto &n : t.value().nodes) gpus += n.gpus.size();
            std::cout << f << ": valid, " << t.value().nodes.size() << " node(s), " << gpus
                      << " GPU(s)\n";
        }
        return rc;
    }
};

class Check : public Command {
public:
    Check() : Command("check", "[--topology FILE] [--json] [options]",
                      "Report health findings, each with a code OMNI-HAL-NNN (omni-hal codes), "
                      "a severity,\nthe device and a fix hint. Exit 0: healthy; 1: findings; "
                      "2: error.\nsysfs state (link widths, hugepages, isolated CPUs) is read "
                      "for the live machine,\nor from --sysfs-root for a topology file.") {
        add_topology();
        desc_.add_options()("json", "print JSON (schema omni-hal/check)")(
            "sysfs-root", po::value<std::string>(), "read sysfs under DIR (DIR/sys/...)")(
            "hugepages", po::value<std::string>(), "free hugepages the jobs need")(
            "hugepage-size", po::value<std::string>(), "2M (default) or 1G")(
            "isolated-cpus", po::value<std::string>(),
            "isolated CPU list instead of /sys/devices/system/cpu/isolated")(
            "nic-domain", po::value<std::string>(),
            "domain in which every GPU needs a NIC: pcie|nvlink|numa|node (default numa)")(
            "expect-gpu", po::value<std::vector<std::string>>(),
            "PCI address DDDD:BB:DD.F of a GPU that must be present (repeatable)")(
            "gpu-link-speed", "also compare GPU PCIe link speed (GPUs slow down when idle)");
    }
    int load_failure() const override { return kUsage; }
    int run(const po::variables_map &vm) override {
        CheckOptions o;
        o.read_sysfs = !vm.count("topology") && !std::getenv("HWLOC_XMLFILE");
        if (const char *fs = std::getenv("HWLOC_FSROOT"); fs && *fs) o.sysfs_root = fs;
        if (vm.count("sysfs-root")) {
            o.sysfs_root = arg(vm, "sysfs-root");
            if (o.sysfs_root.empty()) throw UsageError{"--sysfs-root: empty; expected a directory"};
            o.read_sysfs = true;
        }
        if (vm.count("hugepages")) {
            auto n = omni::parse_uint(arg(vm, "hugepages"), 1, 1u << 30, "--hugepages");
            if (!n) throw UsageError{n.error()};
            o.hugepages = n.value();
        }
        if (vm.count("hugepage-size")) {
            auto s = omni::parse_choice(arg(vm, "hugepage-size"), {"2M", "1G"}, "--hugepage-size");
            if (!s) throw UsageError{s.error()};
            o.hugepage_kb = s.value() == "1G" ? 1048576 : 2048;
        }
        if (vm.count("isolated-cpus")) {
            auto l = parse_cpulist(arg(vm, "isolated-cpus"), 65535, "--isolated-cpus");
            if (!l) throw UsageError{l.error()};
            o.isolated_cpus = l.value();
        }
        if (vm.count("nic-domain")) {
            auto k = parse_domain_kind(arg(vm, "nic-domain"), "--nic-domain");
            if (!k) throw UsageError{k.error()};
            o.nic_domain = k.value();
        }
        if (vm.count("expect-gpu")) o.expect_gpus = vm["expect-gpu"].as<std::vector<std::string>>();
        o.gpu_link_speed = vm.count("gpu-link-speed") > 0;
        auto loaded = load_or_report(vm);
        if (!loaded) return load_failure();
        const Node &node = *loaded;
        const auto findings = run_checks(node, o);
        std::cout << (vm.count("json") ? checks_json(node, findings, 2) : checks_text(findings));
        return findings.empty() ? kOk : kFail;
    }
};

class Codes : public Command {
public:
    Codes() : Command("codes", "", "List every finding code of omni-hal check with its severity and hint.") {}
    int run(const po::variables_map &) override {
        for (const auto &c : finding_codes())
            std::cout << c.code << "  " << severity_name(c.severity) << "  " << c.summary
                      << "\n    hint: " << c.hint << "\n";
        return kOk;
    }
};

int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage_top(std::cerr);
        return kUsage;
    }
    const std::string cmd = argv[1];
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
        usage_top(std::cout);
        return kOk;
    }
    if (cmd == "--version") {
        std::cout << "omni-hal (" PACKAGE_NAME ") " PACKAGE_VERSION "\n";
        return kOk;
    }
    std::vector<std::unique_ptr<Command>> all;
    all.emplace_back(new Show);
    all.emplace_back(new Matrix);
    all.emplace_back(new Units);
    all.emplace_back(new GresConf);
    all.emplace_back(new Export);
    all.emplace_back(new Merge);
    all.emplace_back(new TopologyConf);
    all.emplace_back(new Validate);
    all.emplace_back(new Check);
    all.emplace_back(new Codes);
    Command *c = nullptr;
    for (auto &x : all)
        if (x->name() == cmd) c = x.get();
    if (!c) {
        std::cerr << "omni-hal: unknown command '" << cmd.substr(0, 64) << "'\n\n";
        usage_top(std::cerr);
        return kUsage;
    }
    try {
        po::variables_map vm;
        std::vector<std::string> args(argv + 2, argv + argc);
        po::store(po::command_line_parser(args).options(c->options()).positional(c->positional).run(), vm);
        if (vm.count("help")) {
            c->help(std::cout);
            return kOk;
        }
        po::notify(vm);
        return c->run(vm);
    } catch (const UsageError &e) {
        std::cerr << "omni-hal " << cmd << ": " << e.message << "\nTry 'omni-hal " << cmd
                  << " --help'.\n";
        return kUsage;
    } catch (const po::error &e) {
        std::cerr << "omni-hal " << cmd << ": " << e.what() << "\nTry 'omni-hal " << cmd
                  << " --help'.\n";
        return kUsage;
    }
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return dispatch(argc, argv);
    } catch (const std::exception &e) {
        std::cerr << "omni-hal: internal error: " << e.what() << "\n";
        return kFail;
    }
}
