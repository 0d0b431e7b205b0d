// The C API over the POWER8 and 32em64t fixtures (answers as in topology_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "fixtures.h"
#include "hal/hal.h"

using namespace omni::hal::test;

TEST(CApi, Power8) {
    omni_hal_node *n = nullptr;
    ASSERT_EQ(omni_hal_load(fixture(kPower8).c_str(), &n), OMNI_OK) << omni_hal_last_error();
    EXPECT_EQ(omni_hal_gpu_count(n), 4);
    char buf[64];
    EXPECT_EQ(omni_hal_gpu_bdf(n, 2, buf, sizeof buf), OMNI_OK);
    EXPECT_STREQ(buf, "000a:01:00.0");
    EXPECT_EQ(omni_hal_gpu_cpus(n, 0, buf, sizeof buf), OMNI_OK);
    EXPECT_STREQ(buf, "0-1,8-9,16-17,24-25");
    EXPECT_EQ(omni_hal_gpu_numa(n, 3), 1);
    EXPECT_EQ(omni_hal_gpu_path(n, 0, 1, buf, sizeof buf), OMNI_OK);
    EXPECT_STREQ(buf, "NV2");
    EXPECT_EQ(omni_hal_domain_count(n, OMNI_HAL_DOMAIN_NVLINK), 2);
    EXPECT_EQ(omni_hal_gpu_domain(n, 3, OMNI_HAL_DOMAIN_NVLINK), 1);
    int gpus[4] = {-1, -1, -1, -1};
    EXPECT_EQ(omni_hal_domain_gpus(n, OMNI_HAL_DOMAIN_NVLINK, 1, gpus, 4), 2);
    EXPECT_EQ(gpus[0], 2);
    EXPECT_EQ(gpus[1], 3);
    EXPECT_EQ(omni_hal_domain_gpus(n, OMNI_HAL_DOMAIN_NODE, 0, gpus, 1), 4);  // cap < size
    EXPECT_EQ(omni_hal_gpu_nics(n, 0, buf, sizeof buf), OMNI_ENOENT);
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_gpu_nics: the node has no NIC");
    // Errors: bad index, small buffer, NULL handle.
    EXPECT_EQ(omni_hal_gpu_bdf(n, 4, buf, sizeof buf), OMNI_EINVAL);
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_gpu_bdf: GPU 4: expected an index in 0..3");
    EXPECT_EQ(omni_hal_gpu_bdf(n, -1, buf, sizeof buf), OMNI_EINVAL);
    EXPECT_EQ(omni_hal_gpu_bdf(n, 0, buf, 5), OMNI_ERANGE);
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_gpu_bdf: the buffer holds 5 bytes, 13 are needed");
    EXPECT_STREQ(buf, "0002");
    EXPECT_EQ(omni_hal_gpu_count(nullptr), OMNI_EINVAL);
    EXPECT_EQ(omni_hal_domain_gpus(n, OMNI_HAL_DOMAIN_PCIE, 9, gpus, 4), OMNI_EINVAL);
    omni_hal_free(n);
    omni_hal_free(nullptr);
}

TEST(CApi, NumaDomainsWithoutGpusAreSkipped) {
    // 32em64t: GPU 03:00.0 on NUMA 0, the other three on NUMA 1; nearest NIC of 84:00.0 is
    // mlx5_0.
    omni_hal_node *n = nullptr;
    ASSERT_EQ(omni_hal_load(fixture(kXeonIb).c_str(), &n), OMNI_OK);
    EXPECT_EQ(omni_hal_domain_count(n, OMNI_HAL_DOMAIN_NUMA), 2);
    EXPECT_EQ(omni_hal_domain_count(n, OMNI_HAL_DOMAIN_PCIE), 3);
    char buf[64];
    EXPECT_EQ(omni_hal_gpu_nics(n, 2, buf, sizeof buf), OMNI_OK);
    EXPECT_STREQ(buf, "mlx5_0");
    EXPECT_EQ(omni_hal_gpu_nics(n, 1, buf, sizeof buf), OMNI_OK);
    EXPECT_STREQ(buf, "mlx5_0,eth0,eth1");
    omni_hal_free(n);
    // many-VFs: a NUMA node without GPU is not a domain.
    ASSERT_EQ(omni_hal_load(fixture(kManyVfs).c_str(), &n), OMNI_OK);
    EXPECT_EQ(omni_hal_domain_count(n, OMNI_HAL_DOMAIN_NUMA), 0);
    omni_hal_free(n);
}

TEST(CApi, LoadErrorsAndKinds) {
    omni_hal_node *n = reinterpret_cast<omni_hal_node *>(0x1);
    EXPECT_EQ(omni_hal_load("/nonexistent.xml", &n), OMNI_EIO);
    EXPECT_EQ(n, nullptr);
    EXPECT_NE(std::string(omni_hal_last_error()).find("/nonexistent.xml"), std::string::npos);
    EXPECT_EQ(omni_hal_load("/x", nullptr), OMNI_EINVAL);
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_load: out is NULL");
    omni_hal_domain_kind k;
    EXPECT_EQ(omni_hal_domain_kind_parse("nvlink", &k), OMNI_OK);
    EXPECT_EQ(k, OMNI_HAL_DOMAIN_NVLINK);
    EXPECT_EQ(omni_hal_domain_kind_parse("rack", &k), OMNI_EINVAL);
    EXPECT_STREQ(omni_hal_last_error(), "domain kind: 'rack': expected one of pcie|nvlink|numa|node");
    EXPECT_EQ(omni_hal_domain_count(nullptr, OMNI_HAL_DOMAIN_PCIE), OMNI_EINVAL);
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_domain_count: the node handle is NULL");
}

// The message is per thread: a failure on another thread leaves this thread's message alone.
TEST(CApi, MessagePerThread) {
    EXPECT_EQ(omni_hal_gpu_count(nullptr), OMNI_EINVAL);
    std::string other;
    std::thread([&] {
        omni_hal_domain_kind k;
        EXPECT_EQ(omni_hal_domain_kind_parse("rack", &k), OMNI_EINVAL);
        other = omni_hal_last_error();
    }).join();
    EXPECT_STREQ(omni_hal_last_error(), "omni_hal_gpu_count: the node handle is NULL");
    EXPECT_EQ(other, "domain kind: 'rack': expected one of pcie|nvlink|numa|node");
}
