// Turns a loaded hwloc topology into the node model: CPUs, then the devices found in the PCI
// tree (GPUs, NICs, NVMe drives, NVSwitches), then the NVLink links between GPUs.
#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>

#include "hal/model.h"

namespace omni::hal {
namespace {

constexpr unsigned short kVendorNvidia = 0x10de;
constexpr unsigned short kVendorAmd = 0x1002;

std::vector<unsigned> bitmap_list(hwloc_const_bitmap_t set) {
    std::vector<unsigned> out;
    if (!set) return out;
    int i = hwloc_bitmap_first(set);
    // An infinite bitmap would never end; hwloc never gives one for a cpuset, but a corrupt
    // XML file should not make us loop forever, so stop at a generous bound.
    while (i >= 0 && out.size() < (1u << 20)) {
        out.push_back(static_cast<unsigned>(i));
        i = hwloc_bitmap_next(set, i);
    }
    return out;
}

const char *info(hwloc_obj_t obj, const char *name) {
    const char *v = hwloc_obj_get_info_by_name(obj, name);
    return v ? v : "";
}

// The OS device type as an int: a damaged XML file can carry a number outside the enum, and
// loading such a value through the enum type is undefined behaviour.
int osdev_type(hwloc_obj_t os) {
    int t;
    static_assert(sizeof t == sizeof os->attr->osdev.type, "hwloc_obj_osdev_type_t is an int");
    std::memcpy(&t, &os->attr->osdev.type, sizeof t);
    return t;
}

bool is_gpu_class(unsigned short cls, unsigned short vendor) {
    // 0x0300 VGA, 0x0302 3D controller (NVIDIA datacenter parts), 0x0380 "other display
    // controller" (AMD Instinct parts report it).
    const bool display = cls == 0x0300 || cls == 0x0302 || cls == 0x0380;
    return display && (vendor == kVendorNvidia || vendor == kVendorAmd);
}

bool is_nvswitch(hwloc_obj_t pci) {
    if (pci->subtype && std::strcmp(pci->subtype, "NVSwitch") == 0) return true;
    return pci->attr->pcidev.vendor_id == kVendorNvidia && pci->attr->pcidev.class_id == 0x0680;
}

// The number at the end of an OS device name with the given prefix ("nvml12" -> 12).
std::optional<unsigned> name_number(const char *name, const char *prefix) {
    if (!name) return std::nullopt;
    const std::size_t pl = std::strlen(prefix);
    if (std::strncmp(name, prefix, pl) != 0 || name[pl] == '\0') return std::nullopt;
    unsigned v = 0;
    for (const char *p = name + pl; *p; ++p) {
        if (!std::isdigit(static_cast<unsigned char>(*p)) || v > 100000) return std::nullopt;
        v = v * 10 + static_cast<unsigned>(*p - '0');
    }
    return v;
}

bool is_gpu_osdev(hwloc_obj_t os) {
    const int t = osdev_type(os);
    const char *name = os->name ? os->name : "";
    if (name_number(name, "nvml") || name_number(name, "rsmi") || name_number(name, "cuda"))
        return true;
    if (t == HWLOC_OBJ_OSDEV_COPROC && os->subtype && std::strcmp(os->subtype, "OpenCL") == 0)
        return std::strcmp(info(os, "OpenCLDeviceType"), "GPU") == 0;
    return false;
}

class Discoverer {
public:
    Discoverer(hwloc_topology_t t, Node &n) : topo_(t), node_(n) {}

    void cpus() {
        hwloc_obj_t root = hwloc_get_root_obj(topo_);
        node_.cpus = bitmap_list(root->cpuset);
        for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, o));)
            node_.packages.push_back({o->os_index, bitmap_list(o->cpuset)});
        for (hwloc_obj_t o = nullptr;
             (o = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, o));) {
            node_.numa_nodes.push_back(
                {o->os_index, bitmap_list(o->cpuset), o->attr->numanode.local_memory});
        }
        // Slurm numbers cores by hwloc logical index; a topology without Core objects (some
        // synthetic and virtual ones) gets one core per PU, as slurmd assumes too.
        hwloc_obj_type_t ctype =
            hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo_, ctype, o));) {
            Core c;
            c.logical_index = o->logical_index;
            c.pus = bitmap_list(o->cpuset);
            hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, o);
            c.package = pkg ? static_cast<int>(pkg->os_index) : -1;
            core_sets_.push_back(o->cpuset);
            node_.cores.push_back(std::move(c));
        }
    }

    Locality locality(hwloc_obj_t obj) {
        Locality l;
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, obj);
        if (!anc) return l;
        l.cpus = bitmap_list(anc->cpuset);
        for (std::size_t i = 0; i < core_sets_.size(); ++i)
            if (hwloc_bitmap_intersects(core_sets_[i], anc->cpuset))
                l.cores.push_back(node_.cores[i].logical_index);
        if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
            l.numa = hwloc_bitmap_first(anc->nodeset);
        hwloc_obj_t pkg = anc->type == HWLOC_OBJ_PACKAGE
                              ? anc
                              : hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_PACKAGE, anc);
        if (pkg) l.package = static_cast<int>(pkg->os_index);
        return l;
    }

    static PciPlace place(hwloc_obj_t obj) {
        PciPlace p;
        if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
            const auto &a = obj->attr->pcidev;
            Bdf b;
            b.domain = static_cast<std::uint16_t>(a.domain);
            b.bus = a.bus;
            b.device = a.dev;
            b.function = a.func;
            p.bdf = b;
            p.link_gbps = a.linkspeed;
        }
        for (hwloc_obj_t a = obj->parent; a && a->type == HWLOC_OBJ_BRIDGE; a = a->parent)
            p.chain.push_back(a->gp_index);
        return p;
    }

    void devices() {
        std::vector<Gpu> nvidia, amd;
        for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo_, pci));) {
            node_.io_discovered = true;
            const auto &a = pci->attr->pcidev;
            if (is_gpu_class(a.class_id, a.vendor_id)) {
                Gpu g = gpu_from(pci);
                (g.vendor == GpuVendor::Nvidia ? nvidia : amd).push_back(std::move(g));
                gpu_pci_.push_back(pci);
            } else if (is_nvswitch(pci)) {
                node_.nvswitches.push_back({place(pci)});
                switch_pci_.push_back(pci);
            } else if (a.class_id == 0x0108) {
                nvme_from(pci);
            }
            nic_from(pci);  // a NIC is any PCI function with network OS devices
        }
        orphan_gpus(nvidia, amd);
        number(nvidia, "nvml");
        number(amd, "rsmi");
        for (auto *list : {&nvidia, &amd})
            for (auto &g : *list) node_.gpus.push_back(std::move(g));
        for (std::size_t i = 0; i < node_.gpus.size(); ++i) {
            node_.gpus[i].index = static_cast<unsigned>(i);
        }
    }

    void nvlinks() {
        const std::size_t n = node_.gpus.size();
        node_.nvlinks.assign(n, std::vector<unsigned>(n, 0));
        hwloc_distances_s *d[4];
        unsigned nr = 4;
        if (hwloc_distances_get_by_name(topo_, "NVLinkBandwidth", &nr, d, 0) != 0) return;
        for (unsigned k = 0; k < nr && k < 4; ++k) {
            add_nvlink_matrix(*d[k]);
            hwloc_distances_release(topo_, d[k]);
        }
    }

    std::vector<hwloc_obj_t> gpu_pci_;     // PCI object per GPU, in discovery order
    std::vector<hwloc_obj_t> switch_pci_;  // PCI object per NVSwitch

private:
    Gpu gpu_from(hwloc_obj_t pci) {
        Gpu g;
        g.vendor = pci->attr->pcidev.vendor_id == kVendorNvidia ? GpuVendor::Nvidia : GpuVendor::Amd;
        g.pci = place(pci);
        g.loc = locality(pci);
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
            if (c->name) g.os_devices.push_back(c->name);
            take_gpu_info(g, c);
        }
        if (g.model.empty()) g.model = info(pci, "PCIDevice");
        if (g.model.empty()) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "pci-%04x-%04x", pci->attr->pcidev.vendor_id,
                          pci->attr->pcidev.device_id);
            g.model = buf;
        }
        return g;
    }

    static void take_gpu_info(Gpu &g, hwloc_obj_t os) {
        // NVML and RSMI report the marketing name; CUDA/OpenCL report it too. The first one
        // found wins, NVML/RSMI first because they are listed first by hwloc.
        if (g.model.empty()) g.model = info(os, "GPUModel");
        if (g.uuid.empty()) g.uuid = info(os, "NVIDIAUUID");
        if (g.uuid.empty()) g.uuid = info(os, "AMDUUID");
    }

    // GPU OS devices that hwloc attached to a CPU-side object: no PCI parent (some virtual
    // machines and XML files edited by hand). One GPU per UUID, else per name.
    void orphan_gpus(std::vector<Gpu> &nvidia, std::vector<Gpu> &amd) {
        std::map<std::string, Gpu> by_key;
        for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo_, os));) {
            if (!os->parent || os->parent->type == HWLOC_OBJ_PCI_DEVICE) continue;
            if (!is_gpu_osdev(os)) continue;
            std::string key = info(os, "NVIDIAUUID");
            if (key.empty()) key = info(os, "AMDUUID");
            if (key.empty()) key = os->name ? os->name : "";
            Gpu &g = by_key[key];
            if (g.os_devices.empty()) {
                const std::string vendor = info(os, "GPUVendor");
                const bool is_amd = vendor.find("AMD") != std::string::npos ||
                                    vendor.find("Advanced Micro") != std::string::npos ||
                                    name_number(os->name, "rsmi");
                g.vendor = is_amd ? GpuVendor::Amd : GpuVendor::Nvidia;
                g.loc = locality(os);
            }
            if (os->name) g.os_devices.push_back(os->name);
            take_gpu_info(g, os);
            orphan_osdev_key_[os] = key;
        }
        for (auto &[key, g] : by_key) {
            if (g.model.empty()) g.model = "gpu";
            node_.warnings.push_back("GPU " + key +
                                     " has no PCI parent in the topology: PCIe domain, PCIe "
                                     "paths and device numbering are guesses for it");
            (g.vendor == GpuVendor::Nvidia ? nvidia : amd).push_back(std::move(g));
        }
    }

    // Device numbers within one vendor: nvmlN / rsmiN when every GPU of the vendor has one
    // (that is the driver's own order), else PCI bus order, which is what NVML and ROCm use.
    static void number(std::vector<Gpu> &gpus, const char *prefix) {
        std::vector<std::optional<unsigned>> numbers;
        bool all = true;
        for (const auto &g : gpus) {
            std::optional<unsigned> n;
            for (const auto &d : g.os_devices)
                if ((n = name_number(d.c_str(), prefix))) break;
            numbers.push_back(n);
            all = all && n.has_value();
        }
        std::vector<std::size_t> order(gpus.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
            if (all) return *numbers[x] < *numbers[y];
            const auto &bx = gpus[x].pci.bdf, &by = gpus[y].pci.bdf;
            if (bx && by) return *bx < *by;
            return bx.has_value() && !by.has_value();  // GPUs without a BDF go last
        });
        std::vector<Gpu> sorted;
        for (std::size_t i : order) sorted.push_back(std::move(gpus[i]));
        gpus = std::move(sorted);
    }

    void nvme_from(hwloc_obj_t pci) {
        Nvme d;
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            if (c->type != HWLOC_OBJ_OS_DEVICE || osdev_type(c) != HWLOC_OBJ_OSDEV_BLOCK)
                continue;
            if (c->name && (d.name.empty() || std::strcmp(c->name, d.name.c_str()) < 0))
                d.name = c->name;
            if (d.model.empty()) d.model = info(c, "Model");
            if (d.serial.empty()) d.serial = info(c, "SerialNumber");
        }
        if (d.name.empty()) return;  // a controller without a namespace holds no data
        d.pci = place(pci);
        d.loc = locality(pci);
        node_.nvmes.push_back(std::move(d));
    }

    void nic_from(hwloc_obj_t pci) {
        Nic nic;
        std::string rdma_name;
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
            if (osdev_type(c) == HWLOC_OBJ_OSDEV_NETWORK) {
                nic.netdevs.push_back(c->name);
            } else if (osdev_type(c) == HWLOC_OBJ_OSDEV_OPENFABRICS) {
                rdma_name = c->name;
                nic.rdma = true;
                // hwloc records the verbs port state as Port<N>State (ibv_port_state numbers).
                for (unsigned p = 1; p <= 16; ++p) {
                    const std::string key = "Port" + std::to_string(p) + "State";
                    const char *v = hwloc_obj_get_info_by_name(c, key.c_str());
                    if (!v) continue;
                    NicPort port;
                    port.number = p;
                    port.state = std::atoi(v);
                    nic.ports.push_back(port);
                }
            }
        }
        if (nic.netdevs.empty() && !nic.rdma) return;
        nic.name = nic.rdma ? rdma_name : nic.netdevs.front();
        nic.pci = place(pci);
        nic.loc = locality(pci);
        node_.nics.push_back(std::move(nic));
    }

    // Maps an object of the NVLink matrix to a GPU position (>= 0), an NVSwitch (-2 - i), or
    // nothing (-1: CPUs of the POWER8 NVLink, unknown objects).
    long endpoint(hwloc_obj_t obj) const {
        hwloc_obj_t pci = obj;
        if (obj->type == HWLOC_OBJ_OS_DEVICE) {
            if (auto it = orphan_osdev_key_.find(obj); it != orphan_osdev_key_.end()) {
                for (std::size_t i = 0; i < node_.gpus.size(); ++i)
                    if (!node_.gpus[i].pci.bdf &&
                        std::find(node_.gpus[i].os_devices.begin(), node_.gpus[i].os_devices.end(),
                                  obj->name ? obj->name : "") != node_.gpus[i].os_devices.end())
                        return static_cast<long>(i);
                return -1;
            }
            pci = obj->parent;
        }
        if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE) return -1;
        for (std::size_t i = 0; i < switch_pci_.size(); ++i)
            if (switch_pci_[i] == pci) return -2 - static_cast<long>(i);
        Bdf b = place(pci).bdf.value_or(Bdf{});
        for (std::size_t i = 0; i < node_.gpus.size(); ++i)
            if (node_.gpus[i].pci.bdf && *node_.gpus[i].pci.bdf == b) return static_cast<long>(i);
        return -1;
    }

    void add_nvlink_matrix(const hwloc_distances_s &d) {
        const unsigned n = d.nbobjs;
        // hwloc stores the bandwidth of all links between two objects in MB/s: 20000 per
        // NVLink 1.0 link (P100), 25000 per link of later generations. The matrix does not say
        // which, so take 20000 only when every value is a multiple of it and some value is not
        // a multiple of 25000 (the POWER8 fixture: 40000 = 2 links).
        bool all20 = true, some_not25 = false, any = false;
        for (unsigned i = 0; i < n; ++i)
            for (unsigned j = 0; j < n; ++j) {
                if (i == j) continue;
                const auto v = d.values[i * n + j];
                if (!v) continue;
                any = true;
                all20 = all20 && v % 20000 == 0;
                some_not25 = some_not25 || v % 25000 != 0;
            }
        if (!any) return;
        const std::uint64_t unit = (all20 && some_not25) ? 20000 : 25000;
        const auto links = [&](std::uint64_t v) {
            return static_cast<unsigned>(std::max<std::uint64_t>(1, (v + unit / 2) / unit));
        };
        const std::size_t g = node_.gpus.size();
        std::vector<unsigned> to_switch(g, 0);
        for (unsigned i = 0; i < n; ++i) {
            const long a = endpoint(d.objs[i]);
            if (a < 0) continue;
            for (unsigned j = 0; j < n; ++j) {
                const auto v = d.values[i * n + j];
                if (i == j || !v) continue;
                const long b = endpoint(d.objs[j]);
                if (b >= 0 && b != a)
                    node_.nvlinks[a][b] = std::max(node_.nvlinks[a][b], links(v));
                else if (b <= -2)
                    to_switch[a] += links(v);
            }
        }
        // NVML reports GPU-to-NVSwitch links but not the trunks between NVSwitches (on a DGX-2
        // the two baseboards' switches are joined by trunks that no matrix shows). NVIDIA wires
        // every NVSwitch system so that all its switch-attached GPUs reach each other, so two
        // such GPUs get as many links as the less connected one has into the fabric, which is
        // what nvidia-smi prints (NV6 on a DGX-2, NV12 on an HGX A100).
        for (std::size_t a = 0; a < g; ++a)
            for (std::size_t b = 0; b < g; ++b)
                if (a != b && to_switch[a] && to_switch[b])
                    node_.nvlinks[a][b] += std::min(to_switch[a], to_switch[b]);
    }

    hwloc_topology_t topo_;
    Node &node_;
    std::vector<hwloc_const_cpuset_t> core_sets_;
    std::map<hwloc_obj_t, std::string> orphan_osdev_key_;
};

}  // namespace

Result<Node> discover(void *topology, const std::string &source) {
    auto topo = static_cast<hwloc_topology_t>(topology);
    Node node;
    node.source = source;
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    if (const char *h = hwloc_obj_get_info_by_name(root, "HostName")) node.hostname = h;
    Discoverer d(topo, node);
    d.cpus();
    if (node.cpus.empty())
        return make_error(source + ": the topology has no CPUs; expected an hwloc topology of "
                                   "a whole machine (lstopo --of xml)");
    d.devices();
    if (!node.io_discovered)
        node.warnings.push_back(source +
                                ": no PCI objects: I/O discovery is missing (hwloc built "
                                "without PCI support, or lstopo run with --no-io); only CPUs "
                                "are described");
    d.nvlinks();
    return node;
}

}  // namespace omni::hal
