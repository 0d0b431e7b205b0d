// Value parsers of the node model: BDFs, CPU lists, domain kinds, gres types.
#include <gtest/gtest.h>

#include "hal/model.h"

using namespace omni::hal;

TEST(Bdf, AcceptsStrictForm) {
    auto b = parse_bdf("0000:3b:00.0", "--expect-gpu");
    ASSERT_TRUE(b) << b.error();
    EXPECT_EQ(b.value().domain, 0);
    EXPECT_EQ(b.value().bus, 0x3b);
    EXPECT_EQ(b.value().device, 0);
    EXPECT_EQ(b.value().function, 0);
    auto c = parse_bdf("000B:01:1F.7", "x");
    ASSERT_TRUE(c) << c.error();
    EXPECT_EQ(c.value().domain, 0xb);
    EXPECT_EQ(c.value().device, 0x1f);
    EXPECT_EQ(c.value().function, 7);
    EXPECT_EQ(c.value().format(), "000b:01:1f.7");
}

TEST(Bdf, RejectsOtherForms) {
    for (const char *bad : {"", "3b:00.0", "0000:3b:0.0", "0000:3b:00.8", "0000:3b:20.0",
                            "0000-3b-00.0", "0000:3b:00:0", "000g:3b:00.0", " 0000:3b:00.0",
                            "0000:3b:00.0 ", "00000:3b:00.0", "0000:3b:00.0\n"}) {
        auto r = parse_bdf(bad, "--expect-gpu");
        EXPECT_FALSE(r) << "accepted '" << bad << "'";
        if (!r) {
            EXPECT_NE(r.error().find("--expect-gpu"), std::string::npos) << r.error();
            EXPECT_NE(r.error().find("DDDD:BB:DD.F"), std::string::npos) << r.error();
        }
    }
}

TEST(CpuList, FormatsRanges) {
    EXPECT_EQ(format_cpulist({}), "");
    EXPECT_EQ(format_cpulist({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
    EXPECT_EQ(format_cpulist({5}), "5");
    EXPECT_EQ(format_cpulist({1, 1, 2}), "1-2");
}

TEST(CpuList, ParsesKernelForm) {
    auto r = parse_cpulist("0-3,8,10-11", 63, "isolated");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r.value(), (std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11}));
    auto e = parse_cpulist("", 63, "isolated");
    ASSERT_TRUE(e);
    EXPECT_TRUE(e.value().empty());
    for (const char *bad : {"3-1", "1,,2", "a", "1-", "-1", "64", "1 ,2", "0-3,"}) {
        auto b = parse_cpulist(bad, 63, "--isolated-cpus");
        EXPECT_FALSE(b) << "accepted '" << bad << "'";
        if (!b) {
            EXPECT_NE(b.error().find("--isolated-cpus"), std::string::npos);
        }
    }
}

TEST(DomainKind, ParsesTheFourKinds) {
    EXPECT_EQ(parse_domain_kind("pcie", "d").value(), DomainKind::Pcie);
    EXPECT_EQ(parse_domain_kind("nvlink", "d").value(), DomainKind::Nvlink);
    EXPECT_EQ(parse_domain_kind("numa", "d").value(), DomainKind::Numa);
    EXPECT_EQ(parse_domain_kind("node", "d").value(), DomainKind::Node);
    auto bad = parse_domain_kind("socket", "--domain");
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error(), "--domain: 'socket': expected one of pcie|nvlink|numa|node");
    EXPECT_FALSE(parse_domain_kind("PCIE", "d"));
}

TEST(PathName, MatchesNvidiaSmi) {
    EXPECT_EQ(path_name({PathType::Self, 0}), "X");
    EXPECT_EQ(path_name({PathType::NV, 6}), "NV6");
    EXPECT_EQ(path_name({PathType::PIX, 0}), "PIX");
    EXPECT_EQ(path_name({PathType::PXB, 0}), "PXB");
    EXPECT_EQ(path_name({PathType::PHB, 0}), "PHB");
    EXPECT_EQ(path_name({PathType::NODE, 0}), "NODE");
    EXPECT_EQ(path_name({PathType::SYS, 0}), "SYS");
}

TEST(SlurmType, LowerCaseWithUnderscores) {
    EXPECT_EQ(slurm_type("Tesla V100-SXM3-32GB-H"), "tesla_v100-sxm3-32gb-h");
    EXPECT_EQ(slurm_type("AMD Radeon R9 200 / HD 7900 Series"), "amd_radeon_r9_200_hd_7900_series");
    EXPECT_EQ(slurm_type("  "), "gpu");
    EXPECT_EQ(slurm_type("a100"), "a100");
}
