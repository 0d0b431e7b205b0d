// Text and JSON renderings of the node model; see hal/output.h.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hal/output.h"

namespace omni::hal {
namespace {

// ordered_json keeps keys in the order written: "schema" first, then the fields as documented.
using json = nlohmann::ordered_json;

const char *vendor_name(GpuVendor v) { return v == GpuVendor::Nvidia ? "nvidia" : "amd"; }

json bdf_json(const PciPlace &p) { return p.bdf ? json(p.bdf->format()) : json(nullptr); }

json int_or_null(int v) { return v >= 0 ? json(v) : json(nullptr); }

std::string pad(std::string s, std::size_t w) {
    // Always at least one blank between columns, even when a value is wider than its column.
    s.append(s.size() < w ? w - s.size() : 1, ' ');
    return s;
}

std::string names(const std::vector<std::size_t> &idx, const std::vector<std::string> &all) {
    std::string out;
    for (auto i : idx) out += (out.empty() ? "" : ",") + all[i];
    return out.empty() ? "-" : out;
}

}  // namespace

std::string node_json(const Node &node, int indent) {
    json j;
    j["schema"] = "omni-hal/node";
    j["schema_version"] = kNodeSchemaVersion;
    j["hostname"] = node.hostname;
    j["source"] = node.source;
    j["io_discovery"] = node.io_discovered;
    j["warnings"] = node.warnings;
    j["cpus"] = format_cpulist(node.cpus);
    j["cpu_count"] = node.cpus.size();
    j["core_count"] = node.cores.size();
    j["packages"] = json::array();
    for (const auto &p : node.packages)
        j["packages"].push_back({{"id", p.os_index}, {"cpus", format_cpulist(p.cpus)}});
    j["numa_nodes"] = json::array();
    for (const auto &m : node.numa_nodes)
        j["numa_nodes"].push_back({{"id", m.os_index},
                                   {"cpus", format_cpulist(m.cpus)},
                                   {"memory_bytes", m.memory_bytes}});

    std::vector<std::string> nic_names, nvme_names;
    for (const auto &n : node.nics) nic_names.push_back(n.name);
    for (const auto &d : node.nvmes) nvme_names.push_back(d.name);

    j["gpus"] = json::array();
    for (std::size_t g = 0; g < node.gpus.size(); ++g) {
        const Gpu &x = node.gpus[g];
        json links = json::object();
        for (std::size_t o = 0; o < node.gpus.size(); ++o)
            if (node.nvlinks[g][o]) links[std::to_string(node.gpus[o].index)] = node.nvlinks[g][o];
        json nics = json::array(), nvmes = json::array();
        for (auto i : node.closest_nics[g]) nics.push_back(nic_names[i]);
        for (auto i : node.closest_nvmes[g]) nvmes.push_back(nvme_names[i]);
        j["gpus"].push_back({
            {"index", x.index},
            {"vendor", vendor_name(x.vendor)},
            {"model", x.model},
            {"slurm_type", slurm_type(x.model)},
            {"uuid", x.uuid},
            {"bdf", bdf_json(x.pci)},
            {"os_devices", x.os_devices},
            {"pcie_link_gbytes_per_s", x.pci.link_gbps},
            {"numa", int_or_null(x.loc.numa)},
            {"package", int_or_null(x.loc.package)},
            {"cpus", format_cpulist(x.loc.cpus)},
            {"cores", format_cpulist(x.loc.cores)},
            {"domains",
             {{"pcie", node.gpu_domain[0][g]},
              {"nvlink", node.gpu_domain[1][g]},
              {"numa", node.gpu_domain[2][g]},
              {"node", node.gpu_domain[3][g]}}},
            {"nvlinks", links},
            {"closest_nics", nics},
            {"closest_nvme", nvmes},
        });
    }
    j["nics"] = json::array();
    for (const auto &n : node.nics) {
        json ports = json::array();
        for (const auto &p : n.ports) {
            json pj = {{"port", p.number}, {"state", p.state}};
            pj["rate_gbits_per_s"] = p.rate_gbps > 0 ? json(p.rate_gbps) : json(nullptr);
            ports.push_back(pj);
        }
        j["nics"].push_back({{"name", n.name},
                             {"netdevs", n.netdevs},
                             {"rdma", n.rdma},
                             {"bdf", bdf_json(n.pci)},
                             {"numa", int_or_null(n.loc.numa)},
                             {"cpus", format_cpulist(n.loc.cpus)},
                             {"ports", ports}});
    }
    j["nvme"] = json::array();
    for (const auto &d : node.nvmes) {
        json dj = {{"name", d.name}, {"model", d.model}, {"serial", d.serial},
                   {"bdf", bdf_json(d.pci)}, {"numa", int_or_null(d.loc.numa)}};
        dj["critical_warning"] = d.critical_warning ? json(*d.critical_warning) : json(nullptr);
        j["nvme"].push_back(dj);
    }
    j["nvswitches"] = json::array();
    for (const auto &s : node.nvswitches) j["nvswitches"].push_back({{"bdf", bdf_json(s.pci)}});

    json paths = json::array();
    for (const auto &row : node.gpu_paths) {
        json r = json::array();
        for (const auto &p : row) r.push_back(path_name(p));
        paths.push_back(r);
    }
    j["gpu_paths"] = paths;
    json nic_paths = json::array();
    for (const auto &row : node.gpu_nic_paths) {
        json r = json::array();
        for (const auto &p : row) r.push_back(path_name(p));
        nic_paths.push_back(r);
    }
    j["gpu_nic_paths"] = nic_paths;

    json doms = json::object();
    for (std::size_t k = 0; k < kDomainKinds; ++k) {
        json list = json::array();
        for (const auto &d : node.domains[k])
            list.push_back({{"id", d.id}, {"gpus", d.gpus}, {"cpus", format_cpulist(d.cpus)}});
        doms[domain_kind_name(static_cast<DomainKind>(k))] = list;
    }
    j["domains"] = doms;
    return j.dump(indent) + "\n";
}

std::string node_table(const Node &node) {
    std::ostringstream o;
    o << "host      " << (node.hostname.empty() ? "-" : node.hostname) << "\n"
      << "source    " << node.source << "\n"
      << "cpus      " << node.cpus.size() << " (" << format_cpulist(node.cpus) << "), "
      << node.cores.size() << " cores, " << node.packages.size() << " packages, "
      << node.numa_nodes.size() << " NUMA nodes\n";
    for (const auto &m : node.numa_nodes)
        o << "numa " << pad(std::to_string(m.os_index), 5) << "cpus " << format_cpulist(m.cpus)
          << "\n";
    std::vector<std::string> nic_names, nvme_names;
    for (const auto &n : node.nics) nic_names.push_back(n.name);
    for (const auto &d : node.nvmes) nvme_names.push_back(d.name);
    o << "\n" << pad("GPU", 5) << pad("BDF", 14) << pad("MODEL", 28) << pad("NUMA", 6)
      << pad("CPUS", 14) << pad("PCIE", 6) << pad("NVL", 5) << pad("NIC", 12) << "NVME\n";
    for (std::size_t g = 0; g < node.gpus.size(); ++g) {
        const Gpu &x = node.gpus[g];
        o << pad(std::to_string(x.index), 5) << pad(x.pci.bdf ? x.pci.bdf->format() : "-", 14)
          << pad(x.model.substr(0, 27), 28)
          << pad(x.loc.numa >= 0 ? std::to_string(x.loc.numa) : "-", 6)
          << pad(format_cpulist(x.loc.cpus), 14) << pad(std::to_string(node.gpu_domain[0][g]), 6)
          << pad(std::to_string(node.gpu_domain[1][g]), 5)
          << pad(names(node.closest_nics[g], nic_names), 12)
          << names(node.closest_nvmes[g], nvme_names) << "\n";
    }
    if (node.gpus.empty()) o << "(no GPUs)\n";
    o << "\n" << pad("NIC", 12) << pad("BDF", 14) << pad("NUMA", 6) << pad("RDMA", 6) << "NETDEVS\n";
    for (const auto &n : node.nics) {
        std::string nd;
        for (const auto &d : n.netdevs) nd += (nd.empty() ? "" : ",") + d;
        o << pad(n.name, 12) << pad(n.pci.bdf ? n.pci.bdf->format() : "-", 14)
          << pad(n.loc.numa >= 0 ? std::to_string(n.loc.numa) : "-", 6)
          << pad(n.rdma ? "yes" : "no", 6) << (nd.empty() ? "-" : nd) << "\n";
    }
    if (node.nics.empty()) o << "(no NICs)\n";
    if (!node.nvmes.empty()) {
        o << "\n" << pad("NVME", 12) << pad("BDF", 14) << "MODEL\n";
        for (const auto &d : node.nvmes)
            o << pad(d.name, 12) << pad(d.pci.bdf ? d.pci.bdf->format() : "-", 14)
              << (d.model.empty() ? "-" : d.model) << "\n";
    }
    if (!node.nvswitches.empty()) o << "\nnvswitches " << node.nvswitches.size() << "\n";
    o << "\n";
    // Domains are sets of GPUs: a node without any has none worth a line each.
    if (node.gpus.empty()) return o.str() + pad("domains", 16) + "(no GPUs)\n";
    for (std::size_t k = 0; k < kDomainKinds; ++k) {
        o << pad(std::string(domain_kind_name(static_cast<DomainKind>(k))) + " domains", 16);
        bool first = true;
        for (const auto &d : node.domains[k]) {
            std::vector<unsigned> g = d.gpus;
            o << (first ? "" : " ") << "{" << format_cpulist(g) << "}";
            first = false;
        }
        o << "\n";
    }
    return o.str();
}

std::string path_matrix(const Node &node) {
    std::ostringstream o;
    std::vector<std::string> cols;
    for (const auto &g : node.gpus) cols.push_back("GPU" + std::to_string(g.index));
    for (const auto &n : node.nics) cols.push_back(n.name);
    std::size_t w = 6;
    for (const auto &c : cols) w = std::max(w, c.size() + 2);
    o << pad("", w);
    for (const auto &c : cols) o << pad(c, w);
    o << pad("CPU Affinity", 16) << "NUMA Affinity\n";
    for (std::size_t g = 0; g < node.gpus.size(); ++g) {
        o << pad(cols[g], w);
        for (const auto &p : node.gpu_paths[g]) o << pad(path_name(p), w);
        for (const auto &p : node.gpu_nic_paths[g]) o << pad(path_name(p), w);
        o << pad(format_cpulist(node.gpus[g].loc.cpus), 16)
          << (node.gpus[g].loc.numa >= 0 ? std::to_string(node.gpus[g].loc.numa) : "N/A") << "\n";
    }
    for (std::size_t i = 0; i < node.nics.size(); ++i) {
        o << pad(node.nics[i].name, w);
        for (std::size_t g = 0; g < node.gpus.size(); ++g) o << pad(path_name(node.gpu_nic_paths[g][i]), w);
        for (std::size_t k = 0; k < node.nics.size(); ++k)
            o << pad(k == i ? "X"
                            : path_name(pci_path(node.nics[i].pci, node.nics[i].loc,
                                                 node.nics[k].pci, node.nics[k].loc)),
                     w);
        o << "\n";
    }
    o << "\nLegend:\n"
         "  X    = Self\n"
         "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
         "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
         "Bridges within a NUMA node\n"
         "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
         "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
         "Bridge)\n"
         "  PIX  = Connection traversing at most a single PCIe bridge\n"
         "  NV#  = Connection traversing a bonded set of # NVLinks\n";
    return o.str();
}

std::string checks_json(const Node &node, const std::vector<Finding> &findings, int indent) {
    json j;
    j["schema"] = "omni-hal/check";
    j["schema_version"] = kCheckSchemaVersion;
    j["hostname"] = node.hostname;
    j["source"] = node.source;
    j["healthy"] = findings.empty();
    j["findings"] = json::array();
    for (const auto &f : findings)
        j["findings"].push_back({{"code", f.code},
                                 {"severity", severity_name(f.severity)},
                                 {"device", f.device},
                                 {"message", f.message},
                                 {"hint", f.hint}});
    return j.dump(indent) + "\n";
}

std::string checks_text(const std::vector<Finding> &findings) {
    if (findings.empty()) return "healthy: no findings\n";
    std::ostringstream o;
    for (const auto &f : findings)
        o << f.code << " " << severity_name(f.severity) << " " << f.device << ": " << f.message
          << "\n    hint: " << f.hint << "\n";
    return o.str();
}

std::string units_json(const Node &node, DomainKind kind, unsigned k, bool disjoint,
                       const UnitCandidates &c, int indent) {
    json j;
    j["schema"] = "omni-hal/units";
    j["schema_version"] = kNodeSchemaVersion;
    j["hostname"] = node.hostname;
    j["domain"] = domain_kind_name(kind);
    j["unit_size"] = k;
    j["mode"] = disjoint ? "disjoint" : "all";
    j["total"] = c.total;
    j["truncated"] = c.truncated;
    j["sets"] = c.sets;
    return j.dump(indent) + "\n";
}

std::string gres_conf(const Node &node, const GresOptions &opts) {
    std::ostringstream o;
    o << "# gres.conf generated by omni-hal from " << node.source << "\n";
    unsigned nv = 0, amd = 0;
    // Device numbers per vendor follow GPU index order, which discover() sorted by the
    // driver's own numbering.
    for (std::size_t g = 0; g < node.gpus.size(); ++g) {
        const Gpu &x = node.gpus[g];
        if (!opts.node_name.empty()) o << "NodeName=" << opts.node_name << " ";
        o << "Name=gpu Type=" << (opts.type.empty() ? slurm_type(x.model) : opts.type)
          << " File=";
        if (x.vendor == GpuVendor::Nvidia) o << opts.nvidia_prefix << nv++;
        else o << opts.amd_prefix << opts.amd_first + amd++;
        if (!x.loc.cores.empty()) o << " Cores=" << format_cpulist(x.loc.cores);
        bool any = false;
        for (auto l : node.nvlinks[g]) any = any || l;
        if (any) {
            o << " Links=";
            for (std::size_t b = 0; b < node.gpus.size(); ++b)
                o << (b ? "," : "") << (b == g ? -1 : static_cast<int>(node.nvlinks[g][b]));
        }
        o << "\n";
    }
    if (opts.mps) {
        std::vector<std::string> files;
        nv = 0;
        for (const Gpu &x : node.gpus)
            if (x.vendor == GpuVendor::Nvidia) files.push_back(opts.nvidia_prefix + std::to_string(nv++));
        o << "# MPS: percent shares of each NVIDIA GPU; slurm.conf needs GresTypes=gpu,mps and the node's "
          << "Gres=gpu:" << node.gpus.size() << ",mps:" << 100 * files.size() << "\n";
        for (const auto &f : files) {
            if (!opts.node_name.empty()) o << "NodeName=" << opts.node_name << " ";
            o << "Name=mps Count=100 File=" << f << "\n";
        }
    }
    return o.str();
}

}  // namespace omni::hal
