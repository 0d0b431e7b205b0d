// Health checks: every finding code is produced by a hand-made situation (fixtures, a fake
// sysfs tree, or a model with one fact changed), and a healthy node gives none.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "fixtures.h"
#include "hal/health.h"

using namespace omni::hal;
using namespace omni::hal::test;

namespace {

std::multiset<std::string> codes(const std::vector<Finding> &f) {
    std::multiset<std::string> out;
    for (const auto &x : f) out.insert(x.code);
    return out;
}

// A throw-away sysfs tree: write(path, value) creates DIR/path.
class FakeSysfs {
public:
    FakeSysfs() {
        char tmpl[] = "/tmp/omni-hal-sysfs-XXXXXX";
        root_ = mkdtemp(tmpl);
    }
    ~FakeSysfs() {
        std::error_code ec;
        std::filesystem::remove_all(root_, ec);
    }
    void write(const std::string &rel, const std::string &value) {
        const std::filesystem::path full = std::filesystem::path(root_) / rel;
        std::filesystem::create_directories(full.parent_path());
        std::ofstream(full) << value << "\n";
    }
    const std::string &root() const { return root_; }

private:
    std::string root_;
};

}  // namespace

TEST(Health, CodesAreUniqueAndDocumentedInOrder) {
    const auto &all = finding_codes();
    ASSERT_EQ(all.size(), 10u);
    for (std::size_t i = 0; i < all.size(); ++i) {
        char want[32];
        std::snprintf(want, sizeof want, "OMNI-HAL-%03u", static_cast<unsigned>(i + 1));
        EXPECT_STREQ(all[i].code, want);
        EXPECT_GT(std::string(all[i].hint).size(), 10u);
    }
}

// 16intel64-manyVFs: no GPU, usnic ports all Port1State=4: nothing to report.
TEST(Health, HealthyNode) {
    Node n = load_fixture(kManyVfs);
    EXPECT_TRUE(run_checks(n, CheckOptions{}).empty());
}

// synthetic-unbalanced: mlx5_0 Port1State=1 (DOWN) -> OMNI-HAL-002. With the NIC domain set
// to pcie, no GPU shares a root port with mlx5_0 (00:04.0) -> OMNI-HAL-006 for all four.
TEST(Health, IbPortDownAndNicDomain) {
    Node n = load_fixture(kUnbalanced);
    auto f = run_checks(n, CheckOptions{});
    ASSERT_EQ(codes(f), (std::multiset<std::string>{"OMNI-HAL-002"}));
    EXPECT_EQ(f[0].device, "mlx5_0 port 1");
    EXPECT_EQ(f[0].severity, Severity::Error);
    EXPECT_NE(f[0].message.find("DOWN"), std::string::npos);
    CheckOptions o;
    o.nic_domain = DomainKind::Pcie;
    auto g = run_checks(n, o);
    EXPECT_EQ(g.size(), 5u);
    EXPECT_EQ(codes(g).count("OMNI-HAL-006"), 4u);
}

// DGX-2: no NIC at all -> every GPU lacks one in its NUMA domain.
TEST(Health, GpuWithoutNic) {
    Node n = load_fixture(kDgx2);
    auto f = run_checks(n, CheckOptions{});
    EXPECT_EQ(codes(f).count("OMNI-HAL-006"), 16u);
    EXPECT_EQ(f.size(), 16u);
    EXPECT_EQ(f[0].device, "gpu0 (0000:34:00.0)");
}

// 32em64t: GPU 03:00.0 is on NUMA 0, every NIC on NUMA 1 -> only gpu0 is reported.
TEST(Health, GpuWithoutNicInItsNuma) {
    Node n = load_fixture(kXeonIb);
    auto f = run_checks(n, CheckOptions{});
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].code, "OMNI-HAL-006");
    EXPECT_EQ(f[0].device, "gpu0 (0000:03:00.0)");
    CheckOptions o;
    o.nic_domain = DomainKind::Node;
    EXPECT_TRUE(run_checks(n, o).empty());
}

TEST(Health, NvmeCriticalWarning) {
    Node n = load_fixture(kUnbalanced);
    ASSERT_EQ(n.nvmes.size(), 1u);
    n.nvmes[0].critical_warning = 0x04;  // "NVM subsystem reliability degraded"
    n.nics[0].ports[0].state = 4;
    auto f = run_checks(n, CheckOptions{});
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].code, "OMNI-HAL-003");
    EXPECT_EQ(f[0].device, "nvme0n1");
    EXPECT_NE(f[0].message.find("0x04"), std::string::npos);
}

TEST(Health, ExpectedGpusAndBdfForm) {
    Node n = load_fixture(kPower8);
    CheckOptions o;
    o.nic_domain = DomainKind::Node;
    o.expect_gpus = {"0002:01:00.0", "000b:01:00.0"};
    auto none = run_checks(n, o);
    EXPECT_EQ(codes(none), (std::multiset<std::string>{"OMNI-HAL-006", "OMNI-HAL-006",
                                                       "OMNI-HAL-006", "OMNI-HAL-006"}));
    o.expect_gpus = {"2:01:00.0", "0004:01:00.0"};
    auto f = run_checks(n, o);
    EXPECT_EQ(codes(f).count("OMNI-HAL-007"), 1u);
    EXPECT_EQ(codes(f).count("OMNI-HAL-008"), 1u);
    for (const auto &x : f)
        if (x.code == "OMNI-HAL-007") {
            EXPECT_EQ(x.device, "2:01:00.0");
            EXPECT_NE(x.message.find("DDDD:BB:DD.F"), std::string::npos);
        }
}

TEST(Health, NoIoAndOrphanGpu) {
    EXPECT_EQ(codes(run_checks(load_fixture(kNoIo), CheckOptions{})),
              (std::multiset<std::string>{"OMNI-HAL-009"}));
    auto f = run_checks(load_fixture(kOrphanGpu), CheckOptions{});
    EXPECT_EQ(codes(f).count("OMNI-HAL-010"), 1u);
}

// A fake sysfs: gpu0 of the DGX-2 trained at x8 of x16, hugepages short, CPUs 1 and 24
// isolated (CPU 1 is local to GPUs 0-7, CPU 24 to GPUs 8-15).
TEST(Health, SysfsLinkHugepagesIsolated) {
    Node n = load_fixture(kDgx2);
    FakeSysfs fs;
    const std::string dev = "sys/bus/pci/devices/0000:34:00.0/";
    fs.write(dev + "current_link_width", "8");
    fs.write(dev + "max_link_width", "16");
    fs.write(dev + "current_link_speed", "2.5 GT/s PCIe");
    fs.write(dev + "max_link_speed", "8.0 GT/s PCIe");
    const std::string ok = "sys/bus/pci/devices/0000:36:00.0/";
    fs.write(ok + "current_link_width", "16");
    fs.write(ok + "max_link_width", "16");
    fs.write("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "10");
    fs.write("sys/devices/system/cpu/isolated", "1,24");
    CheckOptions o;
    o.read_sysfs = true;
    o.sysfs_root = fs.root();
    o.nic_domain = DomainKind::Node;
    o.hugepages = 64;
    auto f = run_checks(n, o);
    std::multiset<std::string> c = codes(f);
    c.erase("OMNI-HAL-006");
    EXPECT_EQ(c.count("OMNI-HAL-001"), 1u);  // width only: GPU link speed is off by default
    EXPECT_EQ(c.count("OMNI-HAL-004"), 1u);
    EXPECT_EQ(c.count("OMNI-HAL-005"), 16u);
    for (const auto &x : f) {
        if (x.code == "OMNI-HAL-001") {
            EXPECT_EQ(x.device, "gpu0 (0000:34:00.0)");
            EXPECT_NE(x.message.find("x8"), std::string::npos);
        }
        if (x.code == "OMNI-HAL-004") {
            EXPECT_NE(x.message.find("64 requested, 10 free"), std::string::npos);
        }
        if (x.code == "OMNI-HAL-005" && x.device == "gpu8 (0000:b7:00.0)") {
            EXPECT_NE(x.message.find("isolated CPUs 24 "), std::string::npos) << x.message;
        }
    }
    o.gpu_link_speed = true;
    EXPECT_EQ(codes(run_checks(n, o)).count("OMNI-HAL-001"), 2u);
    o.hugepage_kb = 1048576;  // no 1G pool in the fake tree
    bool missing_pool = false;
    for (const auto &x : run_checks(n, o))
        missing_pool = missing_pool || (x.code == "OMNI-HAL-004" &&
                                        x.message.find("not available") != std::string::npos);
    EXPECT_TRUE(missing_pool);
}
