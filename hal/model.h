/* slurm-omni: the node model of libomni-hal (C++ interface).
 *
 * One Node describes one machine: packages, NUMA nodes, cores, the GPUs, NICs, NVMe drives and
 * NVSwitches found in its PCI tree, the NVLink links between GPUs, and the facts derived from
 * them (path types, domains, closest devices). A Node is a plain value: it keeps no hwloc
 * handle, so it can be copied, compared in tests, and freed at any time.
 *
 * Nothing here throws; functions that can fail return omni::Result / omni::Status with a
 * message that names the input and the expected form.
 */
#ifndef OMNI_HAL_MODEL_H
#define OMNI_HAL_MODEL_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "omni/result.h"

namespace omni::hal {

/* ---- small value types ------------------------------------------------------------------ */

/* A PCI address. The only accepted text form is the strict "DDDD:BB:DD.F" (4 hex digits of
 * domain, 2 of bus, 2 of device in 00..1f, 1 function digit in 0..7), as the kernel writes it
 * under /sys/bus/pci/devices; format() writes lower-case hex. */
struct Bdf {
    std::uint16_t domain = 0;
    std::uint8_t bus = 0;
    std::uint8_t device = 0;
    std::uint8_t function = 0;
    bool operator==(const Bdf &o) const {
        return domain == o.domain && bus == o.bus && device == o.device && function == o.function;
    }
    bool operator<(const Bdf &o) const;
    std::string format() const;
};
constexpr const char *kBdfForm = "DDDD:BB:DD.F in hex, e.g. 0000:3b:00.0";
Result<Bdf> parse_bdf(std::string_view text, std::string_view what);

/* CPU lists in the kernel's "0-3,8,10-11" form; values are OS (physical) PU numbers. */
std::string format_cpulist(const std::vector<unsigned> &cpus);
Result<std::vector<unsigned>> parse_cpulist(std::string_view text, unsigned max_cpu,
                                            std::string_view what);

/* How two devices are connected, in `nvidia-smi topo -m` terms, best first. */
enum class PathType { Self, NV, PIX, PXB, PHB, NODE, SYS };
struct Path {
    PathType type = PathType::SYS;
    unsigned nvlinks = 0;  // number of NVLink links when type == NV
};
std::string path_name(const Path &p);  // "X", "NV6", "PIX", ...

/* The kinds of domains an elastic unit must not straddle. */
enum class DomainKind { Pcie = 0, Nvlink = 1, Numa = 2, Node = 3 };
constexpr std::size_t kDomainKinds = 4;
const char *domain_kind_name(DomainKind kind);
Result<DomainKind> parse_domain_kind(std::string_view text, std::string_view what);

/* ---- the model -------------------------------------------------------------------------- */

/* Where a device sits in the PCI tree: the chain of bridges from its parent up to and
 * including the host bridge, as hwloc global indexes (unique within one topology). Devices
 * without a PCI parent have an empty chain. */
struct PciPlace {
    std::optional<Bdf> bdf;
    std::vector<std::uint64_t> chain;  // chain.front(): parent bridge; chain.back(): host bridge
    double link_gbps = 0;              // hwloc's link speed of the device itself (GB/s)
    bool has_pci_parent() const { return !chain.empty(); }
};

/* CPU locality of a device: the PUs hwloc considers local to it, and their NUMA node and
 * package (-1 when the topology does not say). */
struct Locality {
    std::vector<unsigned> cpus;   // OS PU numbers
    std::vector<unsigned> cores;  // core logical indexes (Slurm's gres.conf Cores= numbering)
    int numa = -1;                // OS index of the NUMA node
    int package = -1;             // OS index of the package
};

struct Package {
    unsigned os_index = 0;
    std::vector<unsigned> cpus;
};
struct NumaNode {
    unsigned os_index = 0;
    std::vector<unsigned> cpus;
    std::uint64_t memory_bytes = 0;
};
struct Core {
    unsigned logical_index = 0;
    std::vector<unsigned> pus;
    int package = -1;
};

enum class GpuVendor { Nvidia, Amd };
struct Gpu {
    unsigned index = 0;  // device number: nvmlN/rsmiN when present, else order in the PCI tree
    GpuVendor vendor = GpuVendor::Nvidia;
    std::string model;                    // e.g. "Tesla V100-SXM3-32GB-H"
    std::string uuid;                     // NVIDIAUUID / AMDUUID when known
    std::vector<std::string> os_devices;  // nvml0, cuda0, opencl0d0, card0, ...
    PciPlace pci;
    Locality loc;
};

struct NicPort {
    unsigned number = 0;
    int state = -1;       // ibv_port_state: 4 = ACTIVE; -1 unknown
    double rate_gbps = 0;  // 0 unknown
};
struct Nic {
    std::string name;                  // OpenFabrics name (mlx5_0) or else the netdev (eth0)
    std::vector<std::string> netdevs;  // eth0, ib0, ...
    bool rdma = false;                 // an OpenFabrics (verbs) device
    std::vector<NicPort> ports;
    PciPlace pci;
    Locality loc;
};

struct Nvme {
    std::string name;  // block device, e.g. nvme0n1
    std::string model;
    std::string serial;
    std::optional<unsigned> critical_warning;  // SMART critical warning byte, when read
    PciPlace pci;
    Locality loc;
};

struct NvSwitch {
    PciPlace pci;
};

/* One domain of one kind: the GPUs in it (Gpu::index values) and its CPUs. */
struct Domain {
    unsigned id = 0;
    std::vector<unsigned> gpus;
    std::vector<unsigned> cpus;
};

struct Node {
    std::string hostname;
    std::string source;       // "live machine" or the topology file that was read
    bool io_discovered = false;  // the topology has PCI objects
    std::vector<std::string> warnings;

    std::vector<Package> packages;
    std::vector<NumaNode> numa_nodes;
    std::vector<Core> cores;
    std::vector<unsigned> cpus;  // all PUs

    std::vector<Gpu> gpus;  // sorted by index
    std::vector<Nic> nics;
    std::vector<Nvme> nvmes;
    std::vector<NvSwitch> nvswitches;

    /* nvlinks[a][b]: NVLink links between GPU positions a and b (directly or through
     * NVSwitches); 0 when none. Positions are indexes into `gpus`. */
    std::vector<std::vector<unsigned>> nvlinks;

    /* ---- derived (filled by derive()) ---- */
    std::vector<std::vector<Path>> gpu_paths;  // [a][b] by position
    std::vector<std::vector<Path>> gpu_nic_paths;  // [gpu position][nic position]
    std::array<std::vector<Domain>, kDomainKinds> domains;
    /* gpu_domain[kind][gpu position] = domain id */
    std::array<std::vector<unsigned>, kDomainKinds> gpu_domain;
    std::vector<std::vector<std::size_t>> closest_nics;  // per GPU position, NIC positions
    std::vector<std::vector<std::size_t>> closest_nvmes;  // per GPU position, NVMe positions

    /* Position of the GPU with this index, or -1. */
    int gpu_position(unsigned index) const;
};

/* ---- loading ---------------------------------------------------------------------------- */

struct LoadOptions {
    /* An hwloc XML file. Empty: HWLOC_XMLFILE when set, else the live machine (hwloc itself
     * honours HWLOC_FSROOT for a live load). */
    std::string topology_file;
    /* Query ibverbs and libnvme for port state and drive health (live machine only, and only
     * when libomni-hal was built with them). */
    bool query_devices = true;
};

/* Loads, discovers and derives. Errors name the file and the expected form. */
Result<Node> load_node(const LoadOptions &opts);

/* Loads a node from the text of an hwloc XML file; `source` names it in messages. Text that
 * is known to crash hwloc 2.9's importer is refused before hwloc sees it. */
Result<Node> load_xml_text(const std::string &text, const std::string &source);

/* The two steps after hwloc, for callers that already hold a topology (the benchmark, the
 * tests). `topology` is an hwloc_topology_t loaded with all I/O objects kept. */
Result<Node> discover(void *topology, const std::string &source);
void derive(Node &node);

/* Path between two devices given their placement; used by derive() and by the tests. */
Path pci_path(const PciPlace &a, const Locality &la, const PciPlace &b, const Locality &lb);

/* Elastic-unit candidates: GPU index sets of size k inside one domain of `kind`.
 * all: every k-subset of every domain, in lexicographic order, at most `limit` of them
 *      (`total` is the full count, so callers can tell when the list was cut short);
 * disjoint: each domain's GPUs cut into consecutive groups of k (leftovers dropped), the
 *      packing the placement code uses. */
struct UnitCandidates {
    std::vector<std::vector<unsigned>> sets;
    std::uint64_t total = 0;
    bool truncated = false;
};
UnitCandidates unit_candidates(const Node &node, DomainKind kind, unsigned k, bool disjoint,
                               std::size_t limit);

/* Slurm gres.conf Type= for a GPU model: lower case, runs of characters other than
 * [a-z0-9.-] replaced by one '_' (what Slurm's NVML autodetection produces). */
std::string slurm_type(const std::string &model);

}  // namespace omni::hal

#endif
