// Unit tests for Slurm host lists (common/hostlist.h). The expected expansions in Expands are
// what `scontrol show hostnames` of Slurm 22.05.8 printed for the same inputs.
#include <gtest/gtest.h>

#include "common/hostlist.h"

using omni::compress_hostlist;
using omni::expand_hostlist;
using V = std::vector<std::string>;

static V expand(const std::string &text) {
    auto r = expand_hostlist(text, "NodeList");
    EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error());
    return r ? r.value() : V{};
}

TEST(Hostlist, Expands) {
    EXPECT_EQ(expand(""), V{});
    EXPECT_EQ(expand("node1"), V{"node1"});
    EXPECT_EQ(expand("node[1-3]"), (V{"node1", "node2", "node3"}));
    EXPECT_EQ(expand("node[1-2,5],login"), (V{"node1", "node2", "node5", "login"}));
    EXPECT_EQ(expand("n[08-10]"), (V{"n08", "n09", "n10"}));
    EXPECT_EQ(expand("n[8-10]"), (V{"n8", "n9", "n10"}));
    EXPECT_EQ(expand("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
    EXPECT_EQ(expand("a,a"), (V{"a", "a"}));
}

TEST(Hostlist, RefusesWithTheInputAndWhatWasExpected) {
    for (const char *bad : {"node[", "node[1-", "node[3-1]", "node[a]", "node]", "a,,b", "a,",
                            ",a", "no de", "n[1-2", "n[]", "n[1;2]", "n[1234567890]"}) {
        auto r = expand_hostlist(bad, "NodeList");
        ASSERT_FALSE(r) << bad;
        EXPECT_NE(r.error().find("NodeList: '"), std::string::npos) << r.error();
        EXPECT_NE(r.error().find("expected a Slurm host list"), std::string::npos) << r.error();
    }
}

TEST(Hostlist, BoundedBeforeBuilding) {
    auto r = expand_hostlist("n[1-999999999]", "NodeList");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("more than 65536 names"), std::string::npos) << r.error();
    r = expand_hostlist("a[1-300]b[1-300]", "NodeList");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("more than 65536 names"), std::string::npos) << r.error();
    EXPECT_FALSE(expand_hostlist("n[1-3]", "NodeList", 2));
    EXPECT_FALSE(expand_hostlist(std::string(65, 'x'), "NodeList"));
}

// As `scontrol show hostlist` of Slurm 22.05.8 writes the same names.
TEST(Hostlist, Compresses) {
    EXPECT_EQ(compress_hostlist({}), "");
    EXPECT_EQ(compress_hostlist({"node1"}), "node1");
    EXPECT_EQ(compress_hostlist({"node1", "node2", "node3", "login"}), "node[1-3],login");
    EXPECT_EQ(compress_hostlist({"n08", "n09", "n10"}), "n[08-10]");
    EXPECT_EQ(compress_hostlist({"n9", "n10", "n1", "n3"}), "n[9-10,1,3]");
    EXPECT_EQ(compress_hostlist({"n1", "n3"}), "n[1,3]");
    EXPECT_EQ(compress_hostlist({"n2", "n1"}), "n[2,1]");  // order is kept
}

TEST(Hostlist, CompressReadsBack) {
    for (V v : {V{"node1", "node2", "node4", "node5", "x"}, V{"a09", "a10", "a11", "b"},
                V{"r1n1", "r1n2", "r2n1"}, V{"7", "8", "9"}, V{"n01", "n2", "n003", "n10"},
                V{"n08", "n10", "n9"}, V{"x0", "x1", "x00"}}) {
        EXPECT_EQ(expand(compress_hostlist(v)), v) << compress_hostlist(v);
    }
}
