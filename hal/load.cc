// Opens an hwloc topology (a file or the live machine) with every I/O object kept, and runs
// discovery and derivation on it. All hwloc handles stay inside this file.
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>

#include "config.h"
#include "device_query.h"
#include "hal/model.h"

namespace omni::hal {
namespace {

struct TopologyDeleter {
    void operator()(hwloc_topology *t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

constexpr const char *kXmlForm = "expected an hwloc XML topology (lstopo --of xml FILE)";
// hwloc XML of the largest machines is a few MiB; anything far larger is not a topology.
constexpr off_t kMaxXmlBytes = off_t{256} << 20;

// Checks the file ourselves first: hwloc reports every failure as "invalid argument", which
// would not tell an admin whether the path, the permissions or the content is wrong.
Result<std::string> read_xml(const std::string &path, const std::string &what) {
    struct stat st;
    const std::string name = what + " '" + path + "'";
    if (::stat(path.c_str(), &st) != 0)
        return make_error(name + ": " + std::strerror(errno) + "; " + kXmlForm);
    if (!S_ISREG(st.st_mode)) return make_error(name + ": not a regular file; " + kXmlForm);
    if (::access(path.c_str(), R_OK) != 0)
        return make_error(name + ": cannot read: " + std::strerror(errno));
    if (st.st_size == 0) return make_error(name + ": empty file; " + kXmlForm);
    if (st.st_size > kMaxXmlBytes) return make_error(name + ": larger than 256 MiB; " + kXmlForm);
    std::ifstream in(path, std::ios::binary);
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    if (!in.read(text.data(), st.st_size))
        return make_error(name + ": cannot read: " + std::strerror(errno));
    return text;
}

// hwloc's bitmap text form: optional "0xf...f," (an infinite set), then comma-separated words
// "0x" + 1..8 hex digits, where words after the first may be empty (zero).
bool valid_bitmap_text(std::string_view v) {
    if (v.substr(0, 8) == "0xf...f,") v.remove_prefix(8);
    else if (v == "0xf...f") return true;
    bool first = true;
    while (true) {
        const std::size_t comma = std::min(v.find(','), v.size());
        const std::string_view word = v.substr(0, comma);
        if (!word.empty() || first) {
            if (word.size() < 3 || word.size() > 10 || word[0] != '0' || word[1] != 'x') return false;
            for (char c : word.substr(2))
                if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
        }
        first = false;
        if (comma == v.size()) return true;
        v.remove_prefix(comma + 1);
    }
}

// Refuses XML that crashes hwloc 2.9's importer instead of being rejected by it (all found by
// fuzz_hwloc_xml; lstopo crashes on them too): an object with a cpuset but no
// complete_cpuset, or a nodeset but no complete_nodeset (NULL bitmap dereference), and a
// cpuset/nodeset value that is not a bitmap (assertion in hwloc_bitmap_sscanf). A damaged
// file then gives an error message, not a crashed command or daemon.
Status refuse_known_hwloc_crashes(const std::string &text, const std::string &source) {
    std::size_t pos = 0, line = 1, line_pos = 0;
    while ((pos = text.find("<object", pos)) != std::string::npos) {
        const std::size_t end = std::min(text.find('>', pos), text.size());
        const std::string_view tag(text.data() + pos, end - pos);
        for (; line_pos < pos; ++line_pos)
            if (text[line_pos] == '\n') ++line;
        const auto fail = [&](const std::string &why) {
            return make_error(source + ": line " + std::to_string(line) + ": " + why + "; " + kXmlForm);
        };
        for (const char *set : {"cpuset", "nodeset"}) {
            const std::string plain = std::string(" ") + set + "=";
            const std::string complete = std::string(" complete_") + set + "=";
            if (tag.find(plain) != std::string_view::npos &&
                tag.find(complete) == std::string_view::npos)
                return fail(std::string("object with a ") + set + " but no complete_" + set);
        }
        for (std::size_t a = tag.find("set=\""); a != std::string_view::npos;
             a = tag.find("set=\"", a + 1)) {
            const std::size_t start = a + 5;
            const std::size_t close = tag.find('"', start);
            if (close == std::string_view::npos) break;  // hwloc's parser rejects this itself
            if (!valid_bitmap_text(tag.substr(start, close - start)))
                return fail("'" + std::string(tag.substr(start, std::min<std::size_t>(close - start, 40))) +
                            "' is not an hwloc bitmap (0x... words separated by commas)");
        }
        if (end == text.size()) break;
        pos = end;
    }
    return Status::success();
}

Result<Node> finish(hwloc_topology_t topo, const std::string &source) {
    auto node = discover(topo, source);
    if (node) derive(node.value());
    return node;
}

}  // namespace

Result<Node> load_xml_text(const std::string &text, const std::string &source) {
    if (text.size() >= static_cast<std::size_t>(kMaxXmlBytes))
        return make_error(source + ": larger than 256 MiB; " + kXmlForm);
    if (auto st = refuse_known_hwloc_crashes(text, source); !st) return make_error(st.error());
    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0)
        return make_error(std::string("hwloc_topology_init failed: ") + std::strerror(errno));
    TopologyPtr topo(raw);
    // Keep every PCI bridge and OS device: the PCIe domains are defined by the bridges, and
    // the default filter drops bridges without interesting children.
    hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
    // The size hwloc wants includes the terminating NUL, which std::string guarantees.
    if (hwloc_topology_set_xmlbuffer(raw, text.c_str(), static_cast<int>(text.size() + 1)) != 0)
        return make_error(source + ": not a well-formed hwloc XML file; " + kXmlForm);
    if (hwloc_topology_load(raw) != 0)
        return make_error(source + ": malformed or unsupported XML; " + kXmlForm);
    return finish(raw, source);
}

Result<Node> load_node(const LoadOptions &opts) {
    std::string file = opts.topology_file;
    std::string what = "--topology";
    if (file.empty()) {
        const char *env = std::getenv("HWLOC_XMLFILE");
        if (env && *env) {
            file = env;
            what = "HWLOC_XMLFILE";
        }
    }
    if (!file.empty()) {
        auto text = read_xml(file, what);
        if (!text) return make_error(text.error());
        auto node = load_xml_text(text.value(), what + " '" + file + "'");
        if (node) node.value().source = file;
        return node;
    }

    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0)
        return make_error(std::string("hwloc_topology_init failed: ") + std::strerror(errno));
    TopologyPtr topo(raw);
    hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_load(raw) != 0)
        return make_error(std::string("cannot discover the live machine: ") + std::strerror(errno));
    auto node = discover(raw, "live machine");
    if (!node) return node;
    Node &n = node.value();
    if (n.hostname.empty()) {
        char host[256] = {0};
        if (gethostname(host, sizeof host - 1) == 0) n.hostname = host;
    }
    if (opts.query_devices) query_devices(n);
    derive(n);
    return node;
}

}  // namespace omni::hal
