// Live-machine device queries; see device_query.h. Each source is optional at build time
// (HAVE_VERBS, HAVE_LIBNVME) and at run time (permissions, drivers).
#include "config.h"

#include "device_query.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#ifdef HAVE_VERBS
#include <infiniband/verbs.h>
#endif
#ifdef HAVE_LIBNVME
#include <libnvme.h>
#endif

namespace omni::hal {
namespace {

std::string sysfs_root() {
    const char *r = std::getenv("HWLOC_FSROOT");
    return (r && *r) ? std::string(r) : std::string();
}

std::string read_line(const std::string &path) {
    std::ifstream in(path);
    std::string line;
    if (in) std::getline(in, line);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\n')) line.pop_back();
    return line;
}

// "nvme0n1" -> "nvme0": the controller that owns a namespace block device.
std::string controller_of(const std::string &block) {
    const auto n = block.find('n', 4);
    return n == std::string::npos ? block : block.substr(0, n);
}

#ifdef HAVE_VERBS
double verbs_rate_gbps(const ibv_port_attr &a) {
    // ibv_port_attr encodes lanes and per-lane speed as bit codes (IBTA spec, table 230).
    double lanes = 0;
    switch (a.active_width) {
        case 1: lanes = 1; break;
        case 2: lanes = 4; break;
        case 4: lanes = 8; break;
        case 8: lanes = 12; break;
        case 16: lanes = 2; break;
        default: lanes = 0;
    }
    double lane = 0;
    switch (a.active_speed) {
        case 1: lane = 2.5; break;
        case 2: lane = 5; break;
        case 4: case 8: lane = 10; break;
        case 16: lane = 14; break;
        case 32: lane = 25; break;
        case 64: lane = 50; break;
        case 128: lane = 100; break;
        default: lane = 0;
    }
    return lanes * lane;
}

void query_verbs(Node &node) {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list) return;
    for (int i = 0; i < n; ++i) {
        const std::string name = ibv_get_device_name(list[i]);
        for (auto &nic : node.nics) {
            if (!nic.rdma || nic.name != name) continue;
            ibv_context *ctx = ibv_open_device(list[i]);
            if (!ctx) {
                node.warnings.push_back(nic.name + ": cannot open the verbs device; port state "
                                                   "comes from hwloc only");
                continue;
            }
            ibv_device_attr dev;
            if (ibv_query_device(ctx, &dev) == 0) {
                nic.ports.clear();
                for (unsigned p = 1; p <= dev.phys_port_cnt; ++p) {
                    ibv_port_attr pa;
                    if (ibv_query_port(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
                    NicPort port;
                    port.number = p;
                    port.state = pa.state;
                    port.rate_gbps = verbs_rate_gbps(pa);
                    nic.ports.push_back(port);
                }
            }
            ibv_close_device(ctx);
        }
    }
    ibv_free_device_list(list);
}
#endif

void query_nvme(Node &node) {
    const std::string root = sysfs_root();
    for (auto &d : node.nvmes) {
        const std::string ctrl = controller_of(d.name);
        if (d.model.empty()) d.model = read_line(root + "/sys/class/nvme/" + ctrl + "/model");
        if (d.serial.empty()) d.serial = read_line(root + "/sys/class/nvme/" + ctrl + "/serial");
#ifdef HAVE_LIBNVME
        // The SMART log needs an open controller device, normally root only; a health check
        // run as a user reports the warning as unknown instead of failing.
        if (!root.empty()) continue;  // a fake sysfs tree has no devices to open
        const std::string dev = "/dev/" + ctrl;
        const int fd = ::open(dev.c_str(), O_RDONLY);
        if (fd < 0) {
            node.warnings.push_back(dev + ": cannot open (need root?); NVMe health unknown");
            continue;
        }
        nvme_id_ctrl id;
        if (nvme_identify_ctrl(fd, &id) == 0) {
            // Identify strings are fixed-width, space-padded, not NUL-terminated.
            const auto trim = [](const char *p, std::size_t n) {
                std::string v(p, strnlen(p, n));
                while (!v.empty() && v.back() == ' ') v.pop_back();
                return v;
            };
            d.model = trim(id.mn, sizeof id.mn);
            d.serial = trim(id.sn, sizeof id.sn);
        }
        nvme_smart_log log;
        if (nvme_get_log_smart(fd, NVME_NSID_ALL, false, &log) == 0)
            d.critical_warning = log.critical_warning;
        ::close(fd);
#endif
    }
}

}  // namespace

void query_devices(Node &node) {
#ifdef HAVE_VERBS
    query_verbs(node);
#endif
    query_nvme(node);
}

}  // namespace omni::hal
