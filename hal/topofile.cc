// The site topology file: writer and strict reader; see hal/topofile.h.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "common/hostlist.h"
#include "common/parse.h"
#include "hal/topofile.h"

namespace omni::hal {
namespace {

using nlohmann::json;

// Nesting of a valid file is at most 5 (root, nodes, node, domains, kind, set); anything much
// deeper is rejected while parsing, before it can cost memory.
constexpr int kMaxDepth = 8;

std::string shown(const json &v) {
    std::string s = v.dump();
    if (s.size() > 64) s = s.substr(0, 64) + "...";
    return s;
}

// Walks one JSON object, checking that every key is known and typed as expected. Errors
// carry "<file>: <path>: ..." so an admin can find the spot in a large site file.
class Reader {
public:
    explicit Reader(std::string source) : source_(std::move(source)) {}

    Error fail(const std::string &path, const std::string &msg) const {
        return make_error(source_ + ": " + path + ": " + msg);
    }

    Status keys(const json &obj, const std::string &path, const std::vector<std::string> &allowed,
                const std::vector<std::string> &required) const {
        if (!obj.is_object()) return fail(path, "expected a JSON object, got " + shown(obj));
        for (auto it = obj.begin(); it != obj.end(); ++it)
            if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
                return fail(path, "unknown key '" + it.key().substr(0, 64) + "'; expected " +
                                      join(allowed, ", "));
        for (const auto &k : required)
            if (!obj.contains(k)) return fail(path, "missing key '" + k + "'");
        return Status::success();
    }

    Result<unsigned> uint(const json &v, const std::string &path, unsigned max) const {
        if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max)
            return fail(path, shown(v) + ": expected an integer in 0.." + std::to_string(max));
        return static_cast<unsigned>(v.get<std::uint64_t>());
    }

    Result<int> numa(const json &v, const std::string &path) const {
        if (v.is_null()) return -1;
        auto u = uint(v, path, 4095);
        if (!u) return make_error(u.error() + " or null");
        return static_cast<int>(u.value());
    }

    Result<std::string> str(const json &v, const std::string &path) const {
        if (!v.is_string()) return fail(path, shown(v) + ": expected a string");
        const auto &s = v.get_ref<const std::string &>();
        if (auto st = check_env_value(path, s, 256); !st) return fail(path, st.error());
        return s;
    }

    Result<std::optional<Bdf>> bdf(const json &v, const std::string &path) const {
        if (v.is_null()) return std::optional<Bdf>();
        if (!v.is_string()) return fail(path, shown(v) + ": expected a string " + kBdfForm + " or null");
        auto b = parse_bdf(v.get<std::string>(), "");
        if (!b) return fail(path, b.error());
        return std::optional<Bdf>(b.value());
    }

    Result<std::vector<unsigned>> cpulist(const json &v, const std::string &path) const {
        if (!v.is_string()) return fail(path, shown(v) + ": expected a CPU list string such as \"0-3,8\"");
        auto l = parse_cpulist(v.get<std::string>(), 65535, "");
        if (!l) return fail(path, l.error());
        return l;
    }

    Result<bool> boolean(const json &v, const std::string &path) const {
        if (!v.is_boolean()) return fail(path, shown(v) + ": expected true or false");
        return v.get<bool>();
    }

private:
    std::string source_;
};

#define OMNI_TRY(var, expr)                              \
    auto var##_r = (expr);                               \
    if (!var##_r) return make_error(var##_r.error());    \
    auto var = std::move(var##_r).value()

#define OMNI_CHECK(expr)                                 \
    do {                                                 \
        auto st_ = (expr);                               \
        if (!st_) return make_error(st_.error());        \
    } while (0)

Result<SiteGpu> read_gpu(const Reader &r, const json &j, const std::string &p) {
    OMNI_CHECK(r.keys(j, p, {"index", "bdf", "model", "type", "numa", "cpus", "cores", "nics", "nvmes"},
                      {"index", "bdf", "model", "type", "numa", "cpus", "cores", "nics", "nvmes"}));
    SiteGpu g;
    OMNI_TRY(index, r.uint(j["index"], p + ".index", 1023));
    OMNI_TRY(bdf, r.bdf(j["bdf"], p + ".bdf"));
    OMNI_TRY(model, r.str(j["model"], p + ".model"));
    OMNI_TRY(type, r.str(j["type"], p + ".type"));
    OMNI_TRY(numa, r.numa(j["numa"], p + ".numa"));
    OMNI_TRY(cpus, r.cpulist(j["cpus"], p + ".cpus"));
    OMNI_TRY(cores, r.cpulist(j["cores"], p + ".cores"));
    if (type.empty() || type != slurm_type(type))
        return r.fail(p + ".type", "'" + type + "': expected a gres type of [a-z0-9._-]");
    g.index = index;
    g.bdf = bdf;
    g.model = model;
    g.type = type;
    g.numa = numa;
    g.cpus = cpus;
    g.cores = cores;
    if (!j["nics"].is_array()) return r.fail(p + ".nics", "expected an array of NIC names");
    for (std::size_t i = 0; i < j["nics"].size(); ++i) {
        OMNI_TRY(n, r.str(j["nics"][i], p + ".nics[" + std::to_string(i) + "]"));
        g.nics.push_back(n);
    }
    if (!j["nvmes"].is_array())
        return r.fail(p + ".nvmes", "expected an array of NVMe block device names");
    for (std::size_t i = 0; i < j["nvmes"].size(); ++i) {
        const std::string np = p + ".nvmes[" + std::to_string(i) + "]";
        OMNI_TRY(n, r.str(j["nvmes"][i], np));
        // A block device name, never a path: the SPANK plugin looks it up under /dev.
        if (n.empty() || n.find('/') != std::string::npos || n == "." || n == "..")
            return r.fail(np, "'" + n + "': expected a block device name such as nvme0n1");
        g.nvmes.push_back(n);
    }
    return g;
}

Result<SiteNic> read_nic(const Reader &r, const json &j, const std::string &p) {
    OMNI_CHECK(r.keys(j, p, {"name", "bdf", "numa", "rdma"}, {"name", "bdf", "numa", "rdma"}));
    SiteNic n;
    OMNI_TRY(name, r.str(j["name"], p + ".name"));
    OMNI_TRY(bdf, r.bdf(j["bdf"], p + ".bdf"));
    OMNI_TRY(numa, r.numa(j["numa"], p + ".numa"));
    OMNI_TRY(rdma, r.boolean(j["rdma"], p + ".rdma"));
    if (name.empty()) return r.fail(p + ".name", "empty NIC name");
    n.name = name;
    n.bdf = bdf;
    n.numa = numa;
    n.rdma = rdma;
    return n;
}

Result<SiteNode> read_node(const Reader &r, const json &j, const std::string &p) {
    OMNI_CHECK(r.keys(j, p, {"hostname", "cpu_count", "core_count", "core_cpus", "gpus", "nics", "domains", "fabric"},
                      {"hostname", "cpu_count", "core_count", "core_cpus", "gpus", "nics", "domains"}));
    SiteNode n;
    OMNI_TRY(host, r.str(j["hostname"], p + ".hostname"));
    OMNI_CHECK(check_hostname(host, r.fail(p + ".hostname", "").message));
    n.hostname = host;
    if (j.contains("fabric")) {
        OMNI_TRY(fabric, r.str(j["fabric"], p + ".fabric"));
        OMNI_CHECK(check_fabric(fabric, r.fail(p + ".fabric", "").message));
        n.fabric = fabric;
    }
    OMNI_TRY(cpus, r.uint(j["cpu_count"], p + ".cpu_count", 65536));
    OMNI_TRY(cores, r.uint(j["core_count"], p + ".core_count", 65536));
    if (cpus == 0 || cores == 0 || cores > cpus)
        return r.fail(p, "cpu_count and core_count must be >= 1 with core_count <= cpu_count");
    n.cpu_count = cpus;
    n.core_count = cores;
    const json &cc = j["core_cpus"];
    if (!cc.is_array() || cc.size() != cores)
        return r.fail(p + ".core_cpus", "expected an array of core_count (" + std::to_string(cores) +
                                            ") CPU lists, one per core");
    std::set<unsigned> pus;
    for (std::size_t c = 0; c < cc.size(); ++c) {
        const std::string cp = p + ".core_cpus[" + std::to_string(c) + "]";
        OMNI_TRY(list, r.cpulist(cc[c], cp));
        if (list.empty()) return r.fail(cp, "a core without CPUs");
        for (unsigned pu : list)
            if (!pus.insert(pu).second)
                return r.fail(cp, "CPU " + std::to_string(pu) + " belongs to two cores");
        n.core_cpus.push_back(std::move(list));
    }
    if (pus.size() != cpus)
        return r.fail(p + ".core_cpus", "holds " + std::to_string(pus.size()) +
                                            " CPUs; cpu_count is " + std::to_string(cpus));

    if (!j["gpus"].is_array()) return r.fail(p + ".gpus", "expected an array");
    for (std::size_t i = 0; i < j["gpus"].size(); ++i) {
        const std::string gp = p + ".gpus[" + std::to_string(i) + "]";
        OMNI_TRY(g, read_gpu(r, j["gpus"][i], gp));
        if (g.index != i)
            return r.fail(gp + ".index", "is " + std::to_string(g.index) + "; expected " +
                                             std::to_string(i) + " (GPUs are listed in index order)");
        n.gpus.push_back(std::move(g));
    }
    if (!j["nics"].is_array()) return r.fail(p + ".nics", "expected an array");
    for (std::size_t i = 0; i < j["nics"].size(); ++i) {
        OMNI_TRY(nic, read_nic(r, j["nics"][i], p + ".nics[" + std::to_string(i) + "]"));
        n.nics.push_back(std::move(nic));
    }
    for (const auto &g : n.gpus)
        for (const auto &name : g.nics) {
            bool known = false;
            for (const auto &nic : n.nics) known = known || nic.name == name;
            if (!known)
                return r.fail(p + ".gpus[" + std::to_string(g.index) + "].nics",
                              "NIC '" + name + "' is not in " + p + ".nics");
        }

    const json &d = j["domains"];
    OMNI_CHECK(r.keys(d, p + ".domains", {"pcie", "nvlink", "numa", "node"},
                      {"pcie", "nvlink", "numa", "node"}));
    for (std::size_t k = 0; k < kDomainKinds; ++k) {
        const std::string kind = domain_kind_name(static_cast<DomainKind>(k));
        const std::string dp = p + ".domains." + kind;
        const json &sets = d[kind];
        if (!sets.is_array()) return r.fail(dp, "expected an array of GPU index arrays");
        std::vector<int> seen(n.gpus.size(), 0);
        for (std::size_t s = 0; s < sets.size(); ++s) {
            const std::string sp = dp + "[" + std::to_string(s) + "]";
            if (!sets[s].is_array() || sets[s].empty())
                return r.fail(sp, "expected a non-empty array of GPU indexes");
            std::vector<unsigned> set;
            for (std::size_t i = 0; i < sets[s].size(); ++i) {
                OMNI_TRY(gi, r.uint(sets[s][i], sp + "[" + std::to_string(i) + "]", 1023));
                if (gi >= n.gpus.size())
                    return r.fail(sp, "GPU " + std::to_string(gi) + " does not exist (the node has " +
                                          std::to_string(n.gpus.size()) + " GPUs)");
                if (seen[gi]++)
                    return r.fail(sp, "GPU " + std::to_string(gi) + " is in more than one " + kind +
                                          " domain");
                set.push_back(gi);
            }
            n.domains[k].push_back(std::move(set));
        }
        for (std::size_t g = 0; g < seen.size(); ++g)
            if (!seen[g])
                return r.fail(dp, "GPU " + std::to_string(g) + " is in no " + kind +
                                      " domain; every GPU must be in exactly one");
    }
    return n;
}

#undef OMNI_TRY
#undef OMNI_CHECK

}  // namespace

namespace {

// Names that go into Slurm's configuration files: 1..max characters of [A-Za-z0-9._-].
Status check_name(std::string_view name, std::string_view what, const char *kind, std::size_t max) {
    if (name.empty() || name.size() > max)
        return make_error(std::string(what) + kind + " must have 1.." + std::to_string(max) + " characters");
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '.' || c == '-' || c == '_';
        if (!ok)
            return make_error(std::string(what) + kind + " '" + std::string(name.substr(0, 64)) +
                              "': expected only letters, digits, '.', '-' and '_'");
    }
    return Status::success();
}

}  // namespace

Status check_hostname(std::string_view name, std::string_view what) { return check_name(name, what, "host name", 255); }

Status check_fabric(std::string_view name, std::string_view what) { return check_name(name, what, "fabric name", 64); }

namespace {

// Host names in natural order (n2 before n10): the prefix, then the number it ends with.
bool natural_less(const std::string &a, const std::string &b) {
    const auto split = [](const std::string &h) {
        std::size_t i = h.size();
        while (i > 0 && h[i - 1] >= '0' && h[i - 1] <= '9') --i;
        return std::make_tuple(h.substr(0, i), h.size() - i, h.substr(i));
    };
    return split(a) < split(b);
}

}  // namespace

Result<std::string> block_conf(const SiteTopology &site) {
    std::map<std::string, std::vector<std::string>> fabrics;
    std::vector<std::string> loose;
    for (const auto &n : site.nodes) (n.fabric.empty() ? loose : fabrics[n.fabric]).push_back(n.hostname);
    for (auto &[name, hosts] : fabrics) std::sort(hosts.begin(), hosts.end(), natural_less);
    std::sort(loose.begin(), loose.end(), natural_less);
    if (fabrics.empty())
        return make_error("no node of the site has a fabric (omni-hal export --fabric NAME): no block to write");
    std::vector<std::pair<std::string, std::vector<std::string>>> blocks(fabrics.begin(), fabrics.end());
    std::stable_sort(blocks.begin(), blocks.end(),
                     [](const auto &a, const auto &b) { return a.second.size() < b.second.size(); });
    std::string out =
        "# topology.conf for TopologyPlugin=topology/block, written by omni-hal topology-conf from the\n"
        "# site topology file: one block per fabric (nodes whose GPUs share a multi-node NVLink\n"
        "# domain), the smallest first (Slurm takes its size as the base block size).\n";
    if (blocks.front().second.size() != blocks.back().second.size())
        out += "# The blocks differ in size: Slurm uses " + std::to_string(blocks.front().second.size()) +
               " node(s) of each as a base block.\n";
    for (const auto &[name, hosts] : blocks) out += "BlockName=" + name + " Nodes=" + compress_hostlist(hosts) + "\n";
    if (!loose.empty()) out += "# In no block (no fabric in the site file): " + compress_hostlist(loose) + "\n";
    return out;
}

SiteNode site_node(const Node &node, const std::string &hostname) {
    SiteNode s;
    s.hostname = hostname;
    s.cpu_count = static_cast<unsigned>(node.cpus.size());
    s.core_count = static_cast<unsigned>(node.cores.size());
    for (const auto &c : node.cores) s.core_cpus.push_back(c.pus);  // in logical-index order
    for (std::size_t g = 0; g < node.gpus.size(); ++g) {
        const Gpu &x = node.gpus[g];
        SiteGpu sg;
        sg.index = x.index;
        sg.bdf = x.pci.bdf;
        sg.model = x.model;
        sg.type = slurm_type(x.model);
        sg.numa = x.loc.numa;
        sg.cpus = x.loc.cpus;
        sg.cores = x.loc.cores;
        for (auto i : node.closest_nics[g]) sg.nics.push_back(node.nics[i].name);
        for (auto i : node.closest_nvmes[g]) sg.nvmes.push_back(node.nvmes[i].name);
        s.gpus.push_back(std::move(sg));
    }
    for (const auto &n : node.nics) s.nics.push_back(SiteNic{n.name, n.pci.bdf, n.loc.numa, n.rdma});
    for (std::size_t k = 0; k < kDomainKinds; ++k)
        for (const auto &d : node.domains[k])
            if (!d.gpus.empty()) s.domains[k].push_back(d.gpus);
    return s;
}

std::string site_json(const SiteTopology &site) {
    // Keys in the documented order (omni-topology(5)), so the file reads top-down.
    using ojson = nlohmann::ordered_json;
    ojson j;
    j["format"] = kTopologyFormat;
    j["version"] = kTopologyFileVersion;
    j["nodes"] = ojson::array();
    const auto bdf = [](const std::optional<Bdf> &b) { return b ? ojson(b->format()) : ojson(nullptr); };
    const auto numa = [](int n) { return n >= 0 ? ojson(n) : ojson(nullptr); };
    for (const auto &n : site.nodes) {
        ojson jn;
        jn["hostname"] = n.hostname;
        jn["cpu_count"] = n.cpu_count;
        jn["core_count"] = n.core_count;
        jn["core_cpus"] = ojson::array();
        for (const auto &c : n.core_cpus) jn["core_cpus"].push_back(format_cpulist(c));
        jn["gpus"] = ojson::array();
        for (const auto &g : n.gpus)
            jn["gpus"].push_back({{"index", g.index}, {"bdf", bdf(g.bdf)}, {"model", g.model},
                                  {"type", g.type}, {"numa", numa(g.numa)},
                                  {"cpus", format_cpulist(g.cpus)}, {"cores", format_cpulist(g.cores)},
                                  {"nics", g.nics}, {"nvmes", g.nvmes}});
        jn["nics"] = ojson::array();
        for (const auto &c : n.nics)
            jn["nics"].push_back({{"name", c.name}, {"bdf", bdf(c.bdf)}, {"numa", numa(c.numa)},
                                  {"rdma", c.rdma}});
        ojson d = ojson::object();
        for (std::size_t k = 0; k < kDomainKinds; ++k)
            d[domain_kind_name(static_cast<DomainKind>(k))] = n.domains[k];
        jn["domains"] = d;
        if (!n.fabric.empty()) jn["fabric"] = n.fabric;
        j["nodes"].push_back(jn);
    }
    return j.dump(2) + "\n";
}

Result<SiteTopology> parse_site_topology(std::string_view text, std::string_view source) {
    const std::string src(source);
    const std::string form = "expected an omni-topology(5) JSON file (omni-hal export)";
    if (text.size() > kMaxTopologyFileBytes)
        return make_error(src + ": larger than " + std::to_string(kMaxTopologyFileBytes >> 20) +
                          " MiB; " + form);
    bool too_deep = false;
    json j;
    try {
        j = json::parse(
            text.begin(), text.end(),
            [&](int depth, json::parse_event_t, json &) {
                if (depth > kMaxDepth) too_deep = true;
                return !too_deep;
            },
            true);
    } catch (const json::exception &e) {
        if (too_deep)
            return make_error(src + ": nested deeper than " + std::to_string(kMaxDepth) + " levels; " + form);
        // nlohmann reports "[json.exception.parse_error.101] parse error at line 3, column 7:
        // ..."; keep the part after the bracket, which names the position.
        std::string what = e.what();
        const auto close = what.find("] ");
        if (close != std::string::npos) what = what.substr(close + 2);
        return make_error(src + ": not valid JSON: " + what + "; " + form);
    }
    if (too_deep)
        return make_error(src + ": nested deeper than " + std::to_string(kMaxDepth) + " levels; " + form);

    Reader r(src);
    if (!j.is_object()) return make_error(src + ": " + form);
    if (!j.contains("format") || j["format"] != kTopologyFormat)
        return make_error(src + ": \"format\" is not \"" + kTopologyFormat + "\"; " + form);
    if (!j.contains("version") || !j["version"].is_number_unsigned())
        return make_error(src + ": \"version\" missing or not a positive integer; " + form);
    const auto version = j["version"].get<std::uint64_t>();
    if (version != static_cast<std::uint64_t>(kTopologyFileVersion))
        return make_error(src + ": version " + std::to_string(version) +
                          " is not supported; this omni-hal reads version " +
                          std::to_string(kTopologyFileVersion) +
                          (version > static_cast<std::uint64_t>(kTopologyFileVersion)
                               ? " (the file was written by a newer omni-hal)"
                               : ""));
    if (auto st = r.keys(j, "(top level)", {"format", "version", "nodes"}, {"nodes"}); !st)
        return make_error(st.error());
    if (!j["nodes"].is_array()) return make_error(src + ": nodes: expected an array");
    SiteTopology site;
    std::set<std::string> hosts;
    for (std::size_t i = 0; i < j["nodes"].size(); ++i) {
        auto n = read_node(r, j["nodes"][i], "nodes[" + std::to_string(i) + "]");
        if (!n) return make_error(n.error());
        if (!hosts.insert(n.value().hostname).second)
            return make_error(src + ": nodes[" + std::to_string(i) + "].hostname: '" +
                              n.value().hostname + "' appears twice");
        site.nodes.push_back(std::move(n).value());
    }
    return site;
}

Result<SiteTopology> read_site_topology(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path + ": cannot open: " + std::strerror(errno));
    std::string text;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        text.append(buf, static_cast<std::size_t>(in.gcount()));
        if (text.size() > kMaxTopologyFileBytes) break;
    }
    if (in.bad()) return make_error(path + ": read error");
    return parse_site_topology(text, path);
}

Status merge_site(SiteTopology &a, const SiteTopology &b, std::string_view source) {
    for (const auto &n : b.nodes) {
        for (const auto &m : a.nodes)
            if (m.hostname == n.hostname)
                return make_error(std::string(source) + ": host '" + n.hostname +
                                  "' is already in the site file; each node may appear once");
        a.nodes.push_back(n);
    }
    return Status::success();
}

}  // namespace omni::hal
