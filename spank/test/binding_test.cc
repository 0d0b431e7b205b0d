// Unit tests for the task binding plan, on real machines' topologies. Expected answers come
// from reading the hwloc XML files (see tests/fixtures/topologies/README.md), not from the code.
#include <gtest/gtest.h>

#include <string>

#include "binding.h"
#include "hal/model.h"

using omni::hal::SiteNode;
using omni_spank::Binding;
using omni_spank::plan_binding;
using omni_spank::task_gpus;

namespace {

SiteNode site_of(const std::string &file, const std::string &host) {
    omni::hal::LoadOptions o;
    o.topology_file = std::string(OMNI_FIXTURES) + "/" + file;
    o.query_devices = false;
    auto n = omni::hal::load_node(o);
    EXPECT_TRUE(n.ok()) << (n.ok() ? "" : n.error());
    return n.ok() ? omni::hal::site_node(n.value(), host) : SiteNode{};
}

std::vector<unsigned> v(std::initializer_list<unsigned> l) { return l; }

}  // namespace

TEST(TaskGpus, PlainAndRenumbered) {
    EXPECT_EQ(task_gpus("1", "").value(), v({1}));
    EXPECT_EQ(task_gpus("2,3", "2,3").value(), v({2, 3}));  // Slurm did not renumber
    EXPECT_EQ(task_gpus("1", "4,6").value(), v({6}));      // ConstrainDevices renumbered 0..k-1
    EXPECT_EQ(task_gpus("0,1", "4,6").value(), v({4, 6}));
    // --gpus-per-task: Slurm narrows SLURM_STEP_GPUS to the task's own GPU (global 5) and
    // leaves CUDA_VISIBLE_DEVICES at its place in the step (1).
    EXPECT_EQ(task_gpus("1", "5").value(), v({5}));
    EXPECT_EQ(task_gpus("2,3", "6,7").value(), v({6, 7}));
    EXPECT_TRUE(task_gpus("", "").value().empty());
    EXPECT_TRUE(task_gpus("", "0,1").value().empty());
}

TEST(TaskGpus, Rejects) {
    auto uuid = task_gpus("GPU-8d5b0f2e", "");
    ASSERT_FALSE(uuid.ok());
    EXPECT_NE(uuid.error().find("CUDA_VISIBLE_DEVICES: 'GPU-8d5b0f2e' is not a number"), std::string::npos)
        << uuid.error();
    auto beyond = task_gpus("3", "4,6");
    ASSERT_FALSE(beyond.ok());
    EXPECT_EQ(beyond.error(), "CUDA_VISIBLE_DEVICES index 3 is beyond SLURM_STEP_GPUS '4,6'");
    auto job = task_gpus("3", "4,5", "SLURM_JOB_GPUS");  // named after where it came from
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.error(), "CUDA_VISIBLE_DEVICES index 3 is beyond SLURM_JOB_GPUS '4,5'");
    EXPECT_FALSE(task_gpus("0,", "").ok());
}

// DGX-2: the file keeps 2 PUs per socket; GPUs 0-7 hang off socket 0 (cores 0,1 = PUs 0,1),
// GPUs 8-15 off socket 1 (cores 2,3 = PUs 24,25). PCIe domains: 0-3, 4-7, 8-11, 12-15.
TEST(PlanBinding, Dgx2GpuCoresWithinTheAllocation) {
    const SiteNode n = site_of("nvidiaDGX2.xml", "dgx01");
    auto b = plan_binding(n, {9}, {0, 1, 2, 3}, "pcie");
    ASSERT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(b.value().cpus, v({24, 25}));
    EXPECT_EQ(b.value().domain, "pcie:2");
    auto part = plan_binding(n, {9}, {0, 3}, "nvlink");
    ASSERT_TRUE(part.ok());
    EXPECT_EQ(part.value().cpus, v({25}));       // only core 3 of the GPU's cores 2,3
    EXPECT_EQ(part.value().domain, "nvlink:0");  // NVSwitch: one NVLink domain of 16
    auto gpu0 = plan_binding(n, {0}, {0, 1, 2, 3}, "any");
    ASSERT_TRUE(gpu0.ok());
    EXPECT_EQ(gpu0.value().cpus, v({0, 1}));
    EXPECT_EQ(gpu0.value().domain, "node:0");
    auto numa = plan_binding(n, {12}, {2}, "numa");
    ASSERT_TRUE(numa.ok());
    EXPECT_EQ(numa.value().domain, "numa:1");
}

TEST(PlanBinding, NothingLocalAllocatedKeepsSlurmsBinding) {
    const SiteNode n = site_of("nvidiaDGX2.xml", "dgx01");
    auto b = plan_binding(n, {9}, {0, 1}, "pcie");
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b.value().cpus.empty());
    EXPECT_EQ(b.value().why_unbound,
              "the job was allocated none of the cores local to GPU 9 (2-3) on dgx01");
    auto none = plan_binding(n, {}, {0, 1}, "pcie");
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none.value().why_unbound, "the task has no GPU");
}

TEST(PlanBinding, Errors) {
    const SiteNode n = site_of("nvidiaDGX2.xml", "dgx01");
    auto g = plan_binding(n, {16}, {0}, "pcie");
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.error(), "GPU 16 of the task is not in the topology file's entry for dgx01 (it lists 16 GPUs)");
    EXPECT_FALSE(plan_binding(n, {0}, {0}, "rack").ok());
}

// The 2-socket Xeon with an InfiniBand HCA: the GPU at 0000:84:00.0 and mlx5_0 share a PCIe
// switch, so mlx5_0 is its closest NIC and an RDMA device.
TEST(PlanBinding, ClosestRdmaNic) {
    const SiteNode n = site_of("32em64t-2n8c2t-pci-normalio.xml", "conan");
    int idx = -1;
    for (std::size_t i = 0; i < n.gpus.size(); ++i)
        if (n.gpus[i].bdf && n.gpus[i].bdf->format() == "0000:84:00.0") idx = static_cast<int>(i);
    ASSERT_GE(idx, 0);
    std::vector<unsigned> all;
    for (unsigned c = 0; c < n.core_count; ++c) all.push_back(c);
    auto b = plan_binding(n, {static_cast<unsigned>(idx)}, all, "pcie");
    ASSERT_TRUE(b.ok()) << b.error();
    ASSERT_FALSE(b.value().nics.empty());
    EXPECT_EQ(b.value().nics[0], "mlx5_0");
    ASSERT_FALSE(b.value().rdma_nics.empty());
    EXPECT_EQ(b.value().rdma_nics[0], "mlx5_0");
}

TEST(NvmeMount, WholeDevicePartitionsAndEscapes) {
    const std::string mounts =
        "/dev/vda1 / ext4 rw 0 0\n"
        "/dev/nvme1n1p2 /scratch\\040fast xfs rw 0 0\n"
        "/dev/nvme0n10 /other xfs rw 0 0\n"
        "/dev/nvme0n1 /local ext4 rw 0 0\n";
    EXPECT_EQ(omni_spank::nvme_mount({"nvme0n1"}, mounts), "/local");  // not nvme0n10
    EXPECT_EQ(omni_spank::nvme_mount({"nvme1n1"}, mounts), "/scratch fast");
    EXPECT_EQ(omni_spank::nvme_mount({"nvme2n1", "nvme1n1"}, mounts), "/scratch fast");
    EXPECT_EQ(omni_spank::nvme_mount({"nvme2n1"}, mounts), "");
    EXPECT_EQ(omni_spank::nvme_mount({}, mounts), "");
}

// synthetic-unbalanced.xml: nvme0n1 is every GPU's closest NVMe drive.
TEST(PlanBinding, ClosestNvme) {
    const SiteNode n = site_of("synthetic-unbalanced.xml", "n1");
    auto b = plan_binding(n, {2}, {0}, "pcie");
    ASSERT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(b.value().nvmes, (std::vector<std::string>{"nvme0n1"}));
}
