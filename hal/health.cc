// Node health checks (omni-hal check). Each check is a small function over the node model
// and, for live state the model does not hold, a sysfs tree.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/parse.h"
#include "hal/health.h"

namespace omni::hal {
namespace {

const FindingCode kCodes[] = {
    {"OMNI-HAL-001", Severity::Warning, "PCIe link running below its capability",
     "reseat the card or move it to a slot of the full width/generation; check BIOS PCIe "
     "settings and riser cables"},
    {"OMNI-HAL-002", Severity::Error, "InfiniBand port not ACTIVE",
     "check the cable and the switch port, and that a subnet manager runs (ibstat, sminfo)"},
    {"OMNI-HAL-003", Severity::Error, "NVMe drive reports a critical warning",
     "read the SMART log (nvme smart-log); replace the drive or free space before jobs "
     "checkpoint to it"},
    {"OMNI-HAL-004", Severity::Warning, "fewer free hugepages than requested",
     "reserve more hugepages (vm.nr_hugepages or hugepages= on the kernel command line)"},
    {"OMNI-HAL-005", Severity::Warning, "isolated CPUs overlap the cores local to a GPU",
     "move isolcpus= away from GPU-local cores, or do not bind GPU tasks to isolated cores"},
    {"OMNI-HAL-006", Severity::Warning, "GPU with no NIC in its domain",
     "inter-node traffic of this GPU crosses the CPU interconnect; install a NIC in this "
     "domain or place units with --omni-unit accordingly"},
    {"OMNI-HAL-007", Severity::Error, "PCI address given in the wrong form",
     "write PCI addresses as DDDD:BB:DD.F in hex, e.g. 0000:3b:00.0 (as in "
     "/sys/bus/pci/devices)"},
    {"OMNI-HAL-008", Severity::Error, "expected GPU not found",
     "check that the GPU is seated and powered and that its driver is loaded (lspci -s BDF)"},
    {"OMNI-HAL-009", Severity::Warning, "I/O discovery missing",
     "the topology has no PCI objects: rebuild hwloc with PCI support or export with lstopo "
     "without --no-io; only CPUs are described"},
    {"OMNI-HAL-010", Severity::Warning, "GPU without a PCI parent",
     "export the topology from the host (not a container without /sys/bus/pci) so GPU "
     "placement can be derived"},
};

const FindingCode &code(int n) { return kCodes[n - 1]; }

Finding make(int n, std::string device, std::string message) {
    const auto &c = code(n);
    return Finding{c.code, c.severity, std::move(device), std::move(message), c.hint};
}

std::string read_line(const std::string &path, bool *ok) {
    std::ifstream in(path);
    std::string line;
    *ok = static_cast<bool>(in) && static_cast<bool>(std::getline(in, line));
    while (!line.empty() && (line.back() == ' ' || line.back() == '\n')) line.pop_back();
    return line;
}

// "16.0 GT/s PCIe" -> 16.0; "Unknown" -> 0.
double link_speed(const std::string &s) {
    try {
        return std::stod(s);
    } catch (...) {
        return 0;
    }
}

std::string gpu_name(const Gpu &g) {
    return "gpu" + std::to_string(g.index) + (g.pci.bdf ? " (" + g.pci.bdf->format() + ")" : "");
}

void check_link(const CheckOptions &o, const PciPlace &p, const std::string &device,
                bool compare_speed, std::vector<Finding> &out) {
    if (!p.bdf) return;
    const std::string dir = o.sysfs_root + "/sys/bus/pci/devices/" + p.bdf->format() + "/";
    bool ok1, ok2, ok3, ok4;
    const std::string cw = read_line(dir + "current_link_width", &ok1);
    const std::string mw = read_line(dir + "max_link_width", &ok2);
    const std::string cs = read_line(dir + "current_link_speed", &ok3);
    const std::string ms = read_line(dir + "max_link_speed", &ok4);
    if (ok1 && ok2) {
        auto c = parse_uint(cw, 0, 64, "current_link_width");
        auto m = parse_uint(mw, 0, 64, "max_link_width");
        if (c && m && c.value() > 0 && c.value() < m.value())
            out.push_back(make(1, device,
                               "link width x" + cw + " but the device is capable of x" + mw));
    }
    if (compare_speed && ok3 && ok4) {
        const double c = link_speed(cs), m = link_speed(ms);
        if (c > 0 && m > 0 && c + 1e-6 < m)
            out.push_back(make(1, device, "link speed " + cs + " but the device is capable of " + ms));
    }
}

bool same_domain(const Node &node, DomainKind kind, const Gpu &g, const Nic &nic) {
    switch (kind) {
        case DomainKind::Node: return true;
        case DomainKind::Numa: return g.loc.numa >= 0 && g.loc.numa == nic.loc.numa;
        case DomainKind::Pcie: {
            const auto &a = g.pci.chain, &b = nic.pci.chain;
            return a.size() >= 2 && b.size() >= 2 && a[a.size() - 2] == b[b.size() - 2];
        }
        case DomainKind::Nvlink: {
            // A NIC is in an NVLink domain when it shares a PCIe domain with one of its GPUs.
            const auto gp = node.gpu_position(g.index);
            const auto dom = node.gpu_domain[static_cast<std::size_t>(DomainKind::Nvlink)][gp];
            for (std::size_t i = 0; i < node.gpus.size(); ++i)
                if (node.gpu_domain[static_cast<std::size_t>(DomainKind::Nvlink)][i] == dom &&
                    same_domain(node, DomainKind::Pcie, node.gpus[i], nic))
                    return true;
            return false;
        }
    }
    return false;
}

}  // namespace

const char *severity_name(Severity s) { return s == Severity::Error ? "error" : "warning"; }

const std::vector<FindingCode> &finding_codes() {
    static const std::vector<FindingCode> all(std::begin(kCodes), std::end(kCodes));
    return all;
}

std::vector<Finding> run_checks(const Node &node, const CheckOptions &o) {
    std::vector<Finding> out;

    if (!node.io_discovered)
        out.push_back(make(9, node.source, "no PCI devices in the topology"));

    if (o.read_sysfs) {
        for (const auto &g : node.gpus) check_link(o, g.pci, gpu_name(g), o.gpu_link_speed, out);
        for (const auto &n : node.nics) check_link(o, n.pci, n.name, true, out);
        for (const auto &d : node.nvmes) check_link(o, d.pci, d.name, true, out);
    }

    for (const auto &nic : node.nics)
        for (const auto &p : nic.ports)
            if (p.state >= 0 && p.state != 4) {
                static const char *names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
                                              "ACTIVE_DEFER"};
                const std::string st = p.state < 6 ? names[p.state] : std::to_string(p.state);
                out.push_back(make(2, nic.name + " port " + std::to_string(p.number),
                                   "port state is " + st + ", expected ACTIVE"));
            }

    for (const auto &d : node.nvmes)
        if (d.critical_warning && *d.critical_warning != 0) {
            char buf[16];
            std::snprintf(buf, sizeof buf, "0x%02x", *d.critical_warning & 0xffu);
            out.push_back(make(3, d.name, std::string("SMART critical warning ") + buf));
        }

    if (o.hugepages) {
        const std::string f = o.sysfs_root + "/sys/kernel/mm/hugepages/hugepages-" +
                              std::to_string(o.hugepage_kb) + "kB/free_hugepages";
        bool ok = false;
        const std::string v = read_line(f, &ok);
        auto free_pages = parse_uint(v, 0, UINT64_MAX, f);
        const std::string dev = "hugepages-" + std::to_string(o.hugepage_kb) + "kB";
        if (!ok || !free_pages)
            out.push_back(make(4, dev,
                               std::to_string(*o.hugepages) +
                                   " requested but this page size is not available (" + f + ")"));
        else if (free_pages.value() < *o.hugepages)
            out.push_back(make(4, dev,
                               std::to_string(*o.hugepages) + " requested, " + v + " free"));
    }

    std::vector<unsigned> isolated;
    if (o.isolated_cpus) {
        isolated = *o.isolated_cpus;
    } else if (o.read_sysfs) {
        bool ok = false;
        const std::string v = read_line(o.sysfs_root + "/sys/devices/system/cpu/isolated", &ok);
        if (ok) {
            if (auto l = parse_cpulist(v, 1u << 20, "isolated CPUs")) isolated = l.value();
        }
    }
    if (!isolated.empty())
        for (const auto &g : node.gpus) {
            std::vector<unsigned> both;
            std::set_intersection(g.loc.cpus.begin(), g.loc.cpus.end(), isolated.begin(),
                                  isolated.end(), std::back_inserter(both));
            if (!both.empty())
                out.push_back(make(5, gpu_name(g),
                                   "isolated CPUs " + format_cpulist(both) +
                                       " are local to this GPU (local CPUs " +
                                       format_cpulist(g.loc.cpus) + ")"));
        }

    if (node.io_discovered)
        for (const auto &g : node.gpus) {
            bool found = false;
            for (const auto &nic : node.nics) found = found || same_domain(node, o.nic_domain, g, nic);
            if (!found)
                out.push_back(make(6, gpu_name(g),
                                   std::string("no NIC in the GPU's ") +
                                       domain_kind_name(o.nic_domain) + " domain"));
        }

    for (const auto &text : o.expect_gpus) {
        auto bdf = parse_bdf(text, "--expect-gpu");
        if (!bdf) {
            out.push_back(make(7, text, bdf.error()));
            continue;
        }
        bool present = false;
        for (const auto &g : node.gpus) present = present || (g.pci.bdf && *g.pci.bdf == bdf.value());
        if (!present)
            out.push_back(make(8, bdf.value().format(), "no GPU at this PCI address"));
    }

    for (const auto &g : node.gpus)
        if (!g.pci.has_pci_parent())
            out.push_back(make(10, gpu_name(g), "the topology places this GPU outside the PCI tree"));

    return out;
}

}  // namespace omni::hal
