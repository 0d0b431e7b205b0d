// Discovery and derived facts on real and synthetic topologies. Every expected value below
// was read off the XML files by hand (lstopo-no-graphics --input FILE -v, grep); the comment
// above each test says where it comes from.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fixtures.h"
#include "hal/model.h"

using namespace omni::hal;
using namespace omni::hal::test;

namespace {

std::vector<std::vector<unsigned>> domain_sets(const Node &n, DomainKind k) {
    std::vector<std::vector<unsigned>> out;
    for (const auto &d : n.domains[static_cast<std::size_t>(k)])
        if (!d.gpus.empty()) out.push_back(d.gpus);
    return out;
}

std::string path(const Node &n, unsigned a, unsigned b) { return path_name(n.gpu_paths[a][b]); }

std::vector<std::string> nic_names(const Node &n, unsigned g) {
    std::vector<std::string> out;
    for (auto i : n.closest_nics[g]) out.push_back(n.nics[i].name);
    return out;
}

}  // namespace

// DGX-2H: 16 PCI devices of class 0302 vendor 10de with NVML OS devices nvml0..nvml15, bus
// ids 34 36 39 3b 57 59 5c 5e (package 0) and b7 b9 bc be e0 e2 e5 e7 (package 1).
TEST(Dgx2, SixteenGpusInNvmlOrder) {
    Node n = load_fixture(kDgx2);
    ASSERT_EQ(n.gpus.size(), 16u);
    const char *bus[] = {"34", "36", "39", "3b", "57", "59", "5c", "5e",
                         "b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"};
    for (unsigned i = 0; i < 16; ++i) {
        EXPECT_EQ(n.gpus[i].index, i);
        ASSERT_TRUE(n.gpus[i].pci.bdf);
        EXPECT_EQ(n.gpus[i].pci.bdf->format(), std::string("0000:") + bus[i] + ":00.0");
        EXPECT_EQ(n.gpus[i].model, "Tesla V100-SXM3-32GB-H");
        EXPECT_EQ(n.gpus[i].os_devices, std::vector<std::string>{"nvml" + std::to_string(i)});
    }
    EXPECT_EQ(n.gpus[0].uuid, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
    EXPECT_TRUE(n.nics.empty());
    EXPECT_TRUE(n.nvmes.empty());
    // 12 PCI(NVSwitch) objects: 61 62 63 65 66 67 and c1 c2 c3 c5 c6 c7 (66 has id 0000:0000
    // and class 0000 but hwloc still marks it NVSwitch).
    EXPECT_EQ(n.nvswitches.size(), 12u);
}

// CPUs: Package 0 holds PU P#0 P#1 (cores L#0 L#1, NUMA 0); package 1 holds P#24 P#25 (cores
// L#2 L#3, NUMA 1). The four host bridges 2b and 4e sit under package 0, ae and d7 under 1.
TEST(Dgx2, LocalCpusAndNuma) {
    Node n = load_fixture(kDgx2);
    ASSERT_EQ(n.gpus.size(), 16u);
    EXPECT_EQ(n.cpus, (std::vector<unsigned>{0, 1, 24, 25}));
    ASSERT_EQ(n.numa_nodes.size(), 2u);
    for (unsigned g = 0; g < 8; ++g) {
        EXPECT_EQ(n.gpus[g].loc.cpus, (std::vector<unsigned>{0, 1})) << g;
        EXPECT_EQ(n.gpus[g].loc.cores, (std::vector<unsigned>{0, 1})) << g;
        EXPECT_EQ(n.gpus[g].loc.numa, 0) << g;
    }
    for (unsigned g = 8; g < 16; ++g) {
        EXPECT_EQ(n.gpus[g].loc.cpus, (std::vector<unsigned>{24, 25})) << g;
        EXPECT_EQ(n.gpus[g].loc.cores, (std::vector<unsigned>{2, 3})) << g;
        EXPECT_EQ(n.gpus[g].loc.numa, 1) << g;
    }
}

// PCIe: each root port (8086:2030 at 2b:00.0, 4e:00.0, ae:00.0, d7:00.0) carries a cascade of
// PLX switches with four GPUs below it, so four pcie domains of four GPUs.
TEST(Dgx2, FourPcieDomains) {
    Node n = load_fixture(kDgx2);
    EXPECT_EQ(domain_sets(n, DomainKind::Pcie),
              (std::vector<std::vector<unsigned>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11},
                                                  {12, 13, 14, 15}}));
    EXPECT_EQ(domain_sets(n, DomainKind::Numa),
              (std::vector<std::vector<unsigned>>{{0, 1, 2, 3, 4, 5, 6, 7},
                                                  {8, 9, 10, 11, 12, 13, 14, 15}}));
    EXPECT_EQ(domain_sets(n, DomainKind::Node).size(), 1u);
    EXPECT_EQ(domain_sets(n, DomainKind::Node)[0].size(), 16u);
}

// NVLinkBandwidth: nvml0..7 each have 25000 MB/s (one V100 link) to each of the six switches
// 61 62 63 65 66 67, nvml8..15 to c1 c2 c3 c5 c6 c7. NVSwitch trunks are not in the matrix;
// the fabric is one NVLink domain with 6 links per GPU (nvidia-smi shows NV6 on a DGX-2).
TEST(Dgx2, OneNvlinkDomainNv6) {
    Node n = load_fixture(kDgx2);
    std::vector<unsigned> all(16);
    for (unsigned i = 0; i < 16; ++i) all[i] = i;
    EXPECT_EQ(domain_sets(n, DomainKind::Nvlink), (std::vector<std::vector<unsigned>>{all}));
    EXPECT_EQ(path(n, 0, 1), "NV6");
    EXPECT_EQ(path(n, 0, 15), "NV6");
    EXPECT_EQ(path(n, 8, 9), "NV6");
    EXPECT_EQ(path(n, 3, 3), "X");
}

// PCIe-only paths (what the GPUs would see without NVLink): nvml0 (34) and nvml1 (36) hang
// off downstream ports 33:00.0 and 33:10.0 of the switch whose upstream port is 32:00.0 -> PIX;
// nvml0 and nvml2 (39) meet at 2c:00.0 two switches up -> PXB; nvml0 and nvml4 meet only in
// package 0 across host bridges -> NODE; nvml0 and nvml8 are on different packages -> SYS.
TEST(Dgx2, PciePathTypes) {
    Node n = load_fixture(kDgx2);
    const auto p = [&](unsigned a, unsigned b) {
        return path_name(pci_path(n.gpus[a].pci, n.gpus[a].loc, n.gpus[b].pci, n.gpus[b].loc));
    };
    EXPECT_EQ(p(0, 1), "PIX");
    EXPECT_EQ(p(2, 3), "PIX");
    EXPECT_EQ(p(0, 2), "PXB");
    EXPECT_EQ(p(1, 3), "PXB");
    EXPECT_EQ(p(0, 4), "NODE");
    EXPECT_EQ(p(0, 8), "SYS");
    EXPECT_EQ(p(12, 15), "PXB");
}

TEST(Dgx2, UnitCandidates) {
    Node n = load_fixture(kDgx2);
    auto d = unit_candidates(n, DomainKind::Pcie, 4, true, 100);
    EXPECT_EQ(d.total, 4u);
    EXPECT_EQ(d.sets, (std::vector<std::vector<unsigned>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11},
                                                           {12, 13, 14, 15}}));
    auto a = unit_candidates(n, DomainKind::Pcie, 2, false, 100);
    EXPECT_EQ(a.total, 24u);  // 4 domains x C(4,2)
    ASSERT_EQ(a.sets.size(), 24u);
    EXPECT_EQ(a.sets[0], (std::vector<unsigned>{0, 1}));
    EXPECT_EQ(a.sets[5], (std::vector<unsigned>{2, 3}));
    EXPECT_EQ(a.sets[6], (std::vector<unsigned>{4, 5}));
    auto big = unit_candidates(n, DomainKind::Node, 8, false, 10);
    EXPECT_EQ(big.total, 12870u);  // C(16,8)
    EXPECT_EQ(big.sets.size(), 10u);
    EXPECT_TRUE(big.truncated);
    EXPECT_EQ(unit_candidates(n, DomainKind::Pcie, 5, false, 100).total, 0u);
    EXPECT_EQ(unit_candidates(n, DomainKind::Nvlink, 16, true, 100).total, 1u);
}

// POWER8 "Minsky": four P100 at 0002:01:00.0, 0003:01:00.0, 000a:01:00.0, 000b:01:00.0, each
// alone under its own host bridge; OpenCL and NVML OS devices on the same PCI device are one
// GPU (cuda0, opencl0d0, nvml0 under 0002:01:00.0). NVLinkBandwidth: nvml0-nvml1 and nvml2-nvml3 40000 MB/s = 2 NVLink 1.0 links.
TEST(Power8, NvlinkPairs) {
    Node n = load_fixture(kPower8);
    ASSERT_EQ(n.gpus.size(), 4u);
    EXPECT_EQ(n.gpus[0].pci.bdf->format(), "0002:01:00.0");
    EXPECT_EQ(n.gpus[1].pci.bdf->format(), "0003:01:00.0");
    EXPECT_EQ(n.gpus[2].pci.bdf->format(), "000a:01:00.0");
    EXPECT_EQ(n.gpus[3].pci.bdf->format(), "000b:01:00.0");
    EXPECT_EQ(n.gpus[0].model, "Tesla P100-SXM2-16GB");
    EXPECT_EQ(n.gpus[0].os_devices, (std::vector<std::string>{"cuda0", "opencl0d0", "nvml0"}));
    EXPECT_EQ(n.nvlinks[0][1], 2u);
    EXPECT_EQ(n.nvlinks[2][3], 2u);
    EXPECT_EQ(n.nvlinks[0][2], 0u);
    EXPECT_EQ(path(n, 0, 1), "NV2");
    EXPECT_EQ(path(n, 2, 3), "NV2");
    EXPECT_EQ(path(n, 0, 2), "SYS");
    // Host bridges differ, NUMA node is the same: NODE when the GPUs have no NVLink.
    EXPECT_EQ(path_name(pci_path(n.gpus[0].pci, n.gpus[0].loc, n.gpus[1].pci, n.gpus[1].loc)),
              "NODE");
    EXPECT_EQ(domain_sets(n, DomainKind::Nvlink),
              (std::vector<std::vector<unsigned>>{{0, 1}, {2, 3}}));
    EXPECT_EQ(domain_sets(n, DomainKind::Pcie),
              (std::vector<std::vector<unsigned>>{{0}, {1}, {2}, {3}}));
    // Package 0: PU P#0 1 8 9 16 17 24 25; package 1: P#80 81 88 89 96 97 104 105.
    EXPECT_EQ(n.gpus[0].loc.cpus, (std::vector<unsigned>{0, 1, 8, 9, 16, 17, 24, 25}));
    EXPECT_EQ(n.gpus[3].loc.cpus, (std::vector<unsigned>{80, 81, 88, 89, 96, 97, 104, 105}));
    EXPECT_EQ(n.gpus[3].loc.cores, (std::vector<unsigned>{4, 5, 6, 7}));
}

// 2-socket Xeon: GPUs are the 10de/1002 display-class devices 03:00.0 (M2075, no OS device),
// 83:00.0 (M2075), 84:00.0 (cuda0 "Tesla K40m", card0) and the AMD 84:00.1 (opencl0d1); the
// Matrox VGA 05:03.0 is not a GPU. The HCA 04:00.0 (mlx5_0 + ib0) sits under root port
// 80:03.0 next to 84:00.0 and 84:00.1; eth0/eth1 are under root port 80:01.0.
TEST(XeonIb, GpusAndClosestNic) {
    Node n = load_fixture(kXeonIb);
    ASSERT_EQ(n.gpus.size(), 4u);
    EXPECT_EQ(n.gpus[0].pci.bdf->format(), "0000:03:00.0");
    EXPECT_EQ(n.gpus[1].pci.bdf->format(), "0000:83:00.0");
    EXPECT_EQ(n.gpus[2].pci.bdf->format(), "0000:84:00.0");
    EXPECT_EQ(n.gpus[3].pci.bdf->format(), "0000:84:00.1");
    EXPECT_EQ(n.gpus[2].model, "Tesla K40m");
    EXPECT_EQ(n.gpus[3].vendor, GpuVendor::Amd);
    ASSERT_EQ(n.nics.size(), 3u);
    EXPECT_EQ(nic_names(n, 2), std::vector<std::string>{"mlx5_0"});
    EXPECT_EQ(nic_names(n, 3), std::vector<std::string>{"mlx5_0"});
    EXPECT_EQ(path_name(n.gpu_nic_paths[2][2]), "PIX");
    // 83:00.0 is under root port 80:02.0: every NIC is one host-bridge hop away (PHB); the
    // RDMA one is listed first.
    EXPECT_EQ(nic_names(n, 1), (std::vector<std::string>{"mlx5_0", "eth0", "eth1"}));
    // 03:00.0 is on package 0, every NIC on package 1: SYS to all.
    EXPECT_EQ(path_name(n.gpu_nic_paths[0][0]), "SYS");
    EXPECT_EQ(n.gpus[0].loc.cpus, (std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                                          20, 21, 22, 23}));
    EXPECT_EQ(n.gpus[0].loc.cores, (std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(n.gpus[1].loc.cores, (std::vector<unsigned>{8, 9, 10, 11, 12, 13, 14, 15}));
    EXPECT_EQ(domain_sets(n, DomainKind::Pcie),
              (std::vector<std::vector<unsigned>>{{0}, {1}, {2, 3}}));
    EXPECT_EQ(path(n, 2, 3), "PIX");
    EXPECT_EQ(path(n, 1, 2), "PHB");
    EXPECT_EQ(path(n, 0, 1), "SYS");
    // mlx5_0 reports Port1State=4 (ACTIVE).
    const auto &hca = n.nics[2];
    EXPECT_EQ(hca.name, "mlx5_0");
    EXPECT_TRUE(hca.rdma);
    EXPECT_EQ(hca.netdevs, std::vector<std::string>{"ib0"});
    ASSERT_EQ(hca.ports.size(), 1u);
    EXPECT_EQ(hca.ports[0].state, 4);
}

// Many VFs: no GPU; NICs are the PCI functions with network OS devices: eth0, eth1 (I350),
// usnic_0 (eth4), usnic_1 (eth5), usnic_2 (eth6), eth7. The userspace-NIC VFs have none.
TEST(ManyVfs, NicsButNoGpu) {
    Node n = load_fixture(kManyVfs);
    EXPECT_TRUE(n.gpus.empty());
    std::vector<std::string> names;
    for (const auto &x : n.nics) names.push_back(x.name);
    EXPECT_EQ(names, (std::vector<std::string>{"eth0", "eth1", "usnic_0", "usnic_1", "usnic_2", "eth7"}));
    EXPECT_TRUE(n.nics[2].rdma);
    EXPECT_FALSE(n.nics[5].rdma);
    EXPECT_EQ(n.nics[4].loc.numa, 1);
    EXPECT_TRUE(domain_sets(n, DomainKind::Pcie).empty());
    EXPECT_TRUE(unit_candidates(n, DomainKind::Node, 1, false, 10).sets.empty());
}

// Synthetic, unbalanced switches: GPU0 03:00.0 below one switch, GPU1 06:00.0 and GPU2
// 07:00.0 below a second switch cascaded under the first, all under root port 00:01.0; GPU3
// 08:00.0 alone under root port 00:02.0; nvme0n1 under 00:03.0; mlx5_0 (port DOWN) under 00:04.0.
TEST(Synthetic, UnbalancedSwitches) {
    Node n = load_fixture(kUnbalanced);
    ASSERT_EQ(n.gpus.size(), 4u);
    EXPECT_EQ(path(n, 0, 1), "PXB");
    EXPECT_EQ(path(n, 1, 2), "PIX");
    EXPECT_EQ(path(n, 0, 3), "PHB");
    EXPECT_EQ(domain_sets(n, DomainKind::Pcie),
              (std::vector<std::vector<unsigned>>{{0, 1, 2}, {3}}));
    EXPECT_EQ(domain_sets(n, DomainKind::Nvlink),
              (std::vector<std::vector<unsigned>>{{0}, {1}, {2}, {3}}));
    ASSERT_EQ(n.nvmes.size(), 1u);
    EXPECT_EQ(n.nvmes[0].name, "nvme0n1");
    EXPECT_EQ(n.nvmes[0].model, "Samsung SSD 970 EVO Plus 1TB");
    for (unsigned g = 0; g < 4; ++g) {
        EXPECT_EQ(n.closest_nvmes[g], std::vector<std::size_t>{0});
        EXPECT_EQ(nic_names(n, g), std::vector<std::string>{"mlx5_0"});
    }
    auto c = unit_candidates(n, DomainKind::Pcie, 2, false, 100);
    EXPECT_EQ(c.sets, (std::vector<std::vector<unsigned>>{{0, 1}, {0, 2}, {1, 2}}));
    auto d = unit_candidates(n, DomainKind::Pcie, 2, true, 100);
    EXPECT_EQ(d.sets, (std::vector<std::vector<unsigned>>{{0, 1}}));
}

TEST(Synthetic, GpuWithoutPciParent) {
    Node n = load_fixture(kOrphanGpu);
    ASSERT_EQ(n.gpus.size(), 2u);
    EXPECT_TRUE(n.gpus[0].pci.bdf);
    EXPECT_FALSE(n.gpus[1].pci.bdf);
    EXPECT_FALSE(n.gpus[1].pci.has_pci_parent());
    EXPECT_EQ(n.gpus[1].os_devices, std::vector<std::string>{"nvml1"});
    EXPECT_EQ(n.gpus[1].loc.cpus, (std::vector<unsigned>{0, 1}));
    EXPECT_EQ(domain_sets(n, DomainKind::Pcie), (std::vector<std::vector<unsigned>>{{0}, {1}}));
    EXPECT_EQ(path(n, 0, 1), "NODE");
    ASSERT_FALSE(n.warnings.empty());
    EXPECT_NE(n.warnings[0].find("no PCI parent"), std::string::npos);
}

// Generated with lstopo --input "pack:2 core:2 pu:2" --no-io: 8 PUs, no PCI at all.
TEST(Synthetic, NoIoStillDescribesCpus) {
    Node n = load_fixture(kNoIo);
    EXPECT_FALSE(n.io_discovered);
    EXPECT_EQ(n.cpus.size(), 8u);
    EXPECT_EQ(n.cores.size(), 4u);
    EXPECT_TRUE(n.gpus.empty());
    ASSERT_EQ(n.warnings.size(), 1u);
    EXPECT_NE(n.warnings[0].find("I/O discovery is missing"), std::string::npos);
}

// ---- bad input ----

namespace {
std::string load_error(const std::string &path) {
    LoadOptions o;
    o.topology_file = path;
    auto r = load_node(o);
    return r ? std::string() : r.error();
}
std::string temp_file(const std::string &content) {
    char name[] = "/tmp/omni-hal-test-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) return {};
    if (!content.empty() && write(fd, content.data(), content.size()) < 0) ADD_FAILURE();
    close(fd);
    return name;
}
}  // namespace

TEST(BadInput, MissingFile) {
    const auto e = load_error("/nonexistent/omni/topology.xml");
    EXPECT_NE(e.find("'/nonexistent/omni/topology.xml'"), std::string::npos) << e;
    EXPECT_NE(e.find("No such file"), std::string::npos) << e;
    EXPECT_NE(e.find("hwloc XML"), std::string::npos) << e;
}

TEST(BadInput, Directory) {
    const auto e = load_error("/tmp");
    EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
}

TEST(BadInput, UnreadableFile) {
    const auto f = temp_file("<topology/>");
    ASSERT_FALSE(f.empty());
    chmod(f.c_str(), 0);
    if (geteuid() != 0) {
        const auto e = load_error(f);
        EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
    } else {
        // Root reads any file: the load runs in a child that has become nobody (65534).
        int fds[2];
        ASSERT_EQ(pipe(fds), 0);
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                setresuid(65534, 65534, 65534) != 0)
                _exit(3);
            const auto e = load_error(f);
            const bool ok = write(fds[1], e.data(), e.size()) == static_cast<ssize_t>(e.size());
            _exit(ok ? 0 : 4);
        }
        close(fds[1]);
        std::string e;
        char buf[512];
        for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) e.append(buf, n);
        close(fds[0]);
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0) << "3: could not become nobody, 4: could not report";
        EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
    }
    unlink(f.c_str());
}

TEST(BadInput, MalformedXml) {
    for (const std::string &text : {std::string("<topology version=\"2.0\"><object"),
                                   std::string("not xml at all"), std::string("\x01\x02\xff"),
                                   std::string("<?xml version=\"1.0\"?><html></html>")}) {
        const auto f = temp_file(text);
        const auto e = load_error(f);
        EXPECT_NE(e.find(f), std::string::npos) << e;
        EXPECT_NE(e.find("expected an hwloc XML topology"), std::string::npos) << e;
        unlink(f.c_str());
    }
    const auto empty = temp_file("");
    EXPECT_NE(load_error(empty).find("empty file"), std::string::npos);
    unlink(empty.c_str());
}

// Damage that crashes hwloc 2.9 itself (lstopo too) is refused before hwloc sees it.
TEST(BadInput, XmlThatCrashesHwlocIsRefused) {
    std::ifstream in(fixture(kNoIo));
    std::stringstream s;
    s << in.rdbuf();
    const std::string good = s.str();
    ASSERT_TRUE(load_xml_text(good, "good.xml"));
    struct Case {
        std::string from, to, expect;
    } cases[] = {
        {" complete_cpuset=\"0x000000c0\"", "", "no complete_cpuset"},
        {" complete_nodeset=\"0x00000001\" gp_index=\"16\"", " gp_index=\"16\"", "no complete_nodeset"},
        {"cpuset=\"0x000000c0\"", "cpuset=\",x000000c0\"", "is not an hwloc bitmap"},
        {"cpuset=\"0x000000c0\"", "cpuset=\"\"", "is not an hwloc bitmap"},
    };
    for (const auto &c : cases) {
        std::string bad = good;
        const auto p = bad.find(c.from);
        ASSERT_NE(p, std::string::npos) << c.from;
        bad.replace(p, c.from.size(), c.to);
        auto r = load_xml_text(bad, "damaged.xml");
        ASSERT_FALSE(r) << c.to;
        EXPECT_EQ(r.error().rfind("damaged.xml: line ", 0), 0u) << r.error();
        EXPECT_NE(r.error().find(c.expect), std::string::npos) << r.error();
    }
}

TEST(BadInput, HwlocXmlFileVariableIsHonoured) {
    setenv("HWLOC_XMLFILE", fixture(kPower8).c_str(), 1);
    LoadOptions o;
    auto r = load_node(o);
    unsetenv("HWLOC_XMLFILE");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r.value().gpus.size(), 4u);
    setenv("HWLOC_XMLFILE", "/nonexistent.xml", 1);
    auto bad = load_node(o);
    unsetenv("HWLOC_XMLFILE");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("HWLOC_XMLFILE '/nonexistent.xml'"), std::string::npos) << bad.error();
}
