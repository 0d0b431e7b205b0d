// The site topology file: what export writes, that the reader takes it back unchanged, that
// sites merge, and that every kind of damage is refused with a message naming the spot.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "hal/topofile.h"

using namespace omni::hal;
using namespace omni::hal::test;

namespace {

std::string dgx2_file() {
    SiteTopology s;
    s.nodes.push_back(site_node(load_fixture(kDgx2), "dgx01"));
    return site_json(s);
}

std::string parse_error(const std::string &text) {
    auto r = parse_site_topology(text, "site.json");
    return r ? std::string("(accepted)") : r.error();
}

std::string replace(std::string s, const std::string &from, const std::string &to) {
    const auto p = s.find(from);
    if (p == std::string::npos) ADD_FAILURE() << "'" << from << "' not in text";
    else s.replace(p, from.size(), to);
    return s;
}

}  // namespace

TEST(TopologyFile, Dgx2RoundTrip) {
    const std::string text = dgx2_file();
    auto r = parse_site_topology(text, "site.json");
    ASSERT_TRUE(r) << r.error();
    ASSERT_EQ(r.value().nodes.size(), 1u);
    const SiteNode &n = r.value().nodes[0];
    EXPECT_EQ(n.hostname, "dgx01");
    EXPECT_EQ(n.cpu_count, 4u);
    EXPECT_EQ(n.core_count, 4u);
    // The DGX-2 file keeps 2 PUs of each socket, one per core: cores 0,1 -> PUs 0,1 and
    // cores 2,3 -> PUs 24,25.
    EXPECT_EQ(n.core_cpus, (std::vector<std::vector<unsigned>>{{0}, {1}, {24}, {25}}));
    ASSERT_EQ(n.gpus.size(), 16u);
    EXPECT_EQ(n.gpus[3].bdf->format(), "0000:3b:00.0");
    EXPECT_EQ(n.gpus[3].type, "tesla_v100-sxm3-32gb-h");
    EXPECT_EQ(n.gpus[9].cpus, (std::vector<unsigned>{24, 25}));
    EXPECT_EQ(n.domains[0], (std::vector<std::vector<unsigned>>{{0, 1, 2, 3}, {4, 5, 6, 7},
                                                                {8, 9, 10, 11}, {12, 13, 14, 15}}));
    EXPECT_EQ(n.domains[1].size(), 1u);
    EXPECT_EQ(n.domains[2].size(), 2u);
    EXPECT_EQ(site_json(r.value()), text);  // writing what was read gives the same bytes
    EXPECT_NE(text.find("\"format\": \"omni-topology\""), std::string::npos);
    EXPECT_NE(text.find("\"version\": 1"), std::string::npos);
}

TEST(TopologyFile, MergeSites) {
    SiteTopology a, b;
    a.nodes.push_back(site_node(load_fixture(kDgx2), "dgx01"));
    b.nodes.push_back(site_node(load_fixture(kXeonIb), "conan"));
    ASSERT_TRUE(merge_site(a, b, "b.json"));
    EXPECT_EQ(a.nodes.size(), 2u);
    auto again = merge_site(a, b, "b.json");
    ASSERT_FALSE(again);
    EXPECT_NE(again.error().find("'conan'"), std::string::npos);
    auto r = parse_site_topology(site_json(a), "site.json");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r.value().nodes[1].gpus[2].nics, std::vector<std::string>{"mlx5_0"});
    EXPECT_TRUE(r.value().nodes[1].nics[2].rdma);
}

TEST(TopologyFile, RejectsDamage) {
    const std::string good = dgx2_file();
    struct Case {
        std::string from, to, expect;
    } cases[] = {
        {"\"version\": 1", "\"version\": 2", "written by a newer omni-hal"},
        {"\"version\": 1", "\"version\": \"1\"", "\"version\" missing or not a positive integer"},
        {"\"format\": \"omni-topology\"", "\"format\": \"hwloc\"", "\"format\" is not"},
        {"\"bdf\": \"0000:34:00.0\"", "\"bdf\": \"34:00.0\"",
         "nodes[0].gpus[0].bdf: '34:00.0' is not a PCI address"},
        {"\"cpus\": \"0-1\"", "\"cpus\": \"1-0\"", "nodes[0].gpus[0].cpus"},
        {"\"hostname\": \"dgx01\"", "\"hostname\": \"dgx 01\"", "nodes[0].hostname"},
        {"\"hostname\": \"dgx01\"", "\"hostnam\": \"dgx01\"", "unknown key 'hostnam'"},
        {"\"index\": 1,", "\"index\": 7,", "nodes[0].gpus[1].index: is 7; expected 1"},
        {"\"pcie\": [\n          [\n            0,", "\"pcie\": [\n          [\n            1,",
         "GPU 1 is in more than one pcie domain"},
        {"\"numa\": 0,", "\"numa\": -1,", "nodes[0].gpus[0].numa"},
        {"\"type\": \"tesla_v100-sxm3-32gb-h\"", "\"type\": \"Tesla V100\"", "expected a gres type"},
        {"\"cpu_count\": 4", "\"cpu_count\": 0", "cpu_count and core_count"},
        {"\"core_cpus\": [\n        \"0\",\n        \"1\",", "\"core_cpus\": [\n        \"0\",\n        \"0\",",
         "nodes[0].core_cpus[1]: CPU 0 belongs to two cores"},
        {"\"core_cpus\": [\n        \"0\",", "\"core_cpus\": [", "expected an array of core_count (4) CPU lists"},
        {"\"cpu_count\": 4", "\"cpu_count\": 5", "holds 4 CPUs; cpu_count is 5"},
    };
    for (const auto &c : cases) {
        const auto e = parse_error(replace(good, c.from, c.to));
        EXPECT_NE(e.find(c.expect), std::string::npos) << c.to << " -> " << e;
        EXPECT_EQ(e.rfind("site.json", 0), 0u) << e;
    }
}

TEST(TopologyFile, RejectsNonJsonAndDeepNesting) {
    EXPECT_NE(parse_error("").find("not valid JSON"), std::string::npos);
    EXPECT_NE(parse_error("{\"format\": ").find("not valid JSON"), std::string::npos);
    EXPECT_NE(parse_error("[]").find("expected an omni-topology(5) JSON file"), std::string::npos);
    EXPECT_NE(parse_error(std::string(100000, '[')).find("nested deeper"), std::string::npos);
    EXPECT_NE(parse_error("{\"format\":\"omni-topology\",\"version\":1}").find("missing key 'nodes'"),
              std::string::npos);
    auto dup = parse_error(
        "{\"format\":\"omni-topology\",\"version\":1,\"nodes\":["
        "{\"hostname\":\"a\",\"cpu_count\":1,\"core_count\":1,\"core_cpus\":[\"0\"],\"gpus\":[],\"nics\":[],"
        "\"domains\":{\"pcie\":[],\"nvlink\":[],\"numa\":[],\"node\":[]}},"
        "{\"hostname\":\"a\",\"cpu_count\":1,\"core_count\":1,\"core_cpus\":[\"0\"],\"gpus\":[],\"nics\":[],"
        "\"domains\":{\"pcie\":[],\"nvlink\":[],\"numa\":[],\"node\":[]}}]}");
    EXPECT_NE(dup.find("'a' appears twice"), std::string::npos) << dup;
}

TEST(TopologyFile, MissingFile) {
    auto r = read_site_topology("/nonexistent/site.json");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("/nonexistent/site.json: cannot open"), std::string::npos);
}

// synthetic-unbalanced.xml has one NVMe drive, nvme0n1, on its own root port of the only
// package: it is the closest (and only) NVMe of every GPU.
TEST(TopologyFile, NvmeNamesRoundTripAndPathsAreRefused) {
    SiteTopology site;
    site.nodes.push_back(site_node(load_fixture(kUnbalanced), "n1"));
    ASSERT_EQ(site.nodes[0].gpus.size(), 4u);
    for (const auto &g : site.nodes[0].gpus) EXPECT_EQ(g.nvmes, (std::vector<std::string>{"nvme0n1"}));
    const std::string text = site_json(site);
    auto back = parse_site_topology(text, "site.json");
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back.value().nodes[0].gpus[3].nvmes, (std::vector<std::string>{"nvme0n1"}));
    const auto bad = parse_error(replace(text, "\"nvme0n1\"", "\"/dev/nvme0n1\""));
    EXPECT_NE(bad.find("nodes[0].gpus[0].nvmes[0]: '/dev/nvme0n1': expected a block device name"),
              std::string::npos) << bad;
}

// A node's fabric (omni-hal export --fabric) is kept, absent when not given, and checked.
TEST(TopologyFile, FabricRoundTripAndChecks) {
    SiteTopology s;
    s.nodes.push_back(site_node(load_fixture(kDgx2), "dgx01"));
    const std::string plain = site_json(s);
    EXPECT_EQ(plain.find("fabric"), std::string::npos);
    s.nodes[0].fabric = "nvl72-rack.3";
    const std::string text = site_json(s);
    auto r = parse_site_topology(text, "site.json");
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r.value().nodes[0].fabric, "nvl72-rack.3");
    EXPECT_EQ(site_json(r.value()), text);
    EXPECT_EQ(parse_error(replace(text, "\"nvl72-rack.3\"", "\"rack 3\"")),
              "site.json: nodes[0].fabric: fabric name 'rack 3': expected only letters, digits, '.', '-' and '_'");
    EXPECT_EQ(parse_error(replace(text, "\"nvl72-rack.3\"", "7")), "site.json: nodes[0].fabric: 7: expected a string");
    EXPECT_FALSE(check_fabric(std::string(65, 'a'), ""));
    EXPECT_TRUE(check_fabric(std::string(64, 'a'), ""));
}

// topology.conf blocks: one per fabric with its nodes in natural order, the smallest block
// first, nodes without a fabric in a comment; no fabric at all is an error.
TEST(TopologyFile, BlockConf) {
    SiteTopology s;
    const Node dgx = load_fixture(kDgx2);
    const char *hosts[] = {"n10", "n2", "n9", "n1", "n3", "n4"};
    const char *fabric[] = {"rackB", "rackA", "rackB", "rackA", "rackB", ""};
    for (int i = 0; i < 6; ++i) {
        s.nodes.push_back(site_node(dgx, hosts[i]));
        s.nodes.back().fabric = fabric[i];
    }
    auto conf = block_conf(s);
    ASSERT_TRUE(conf) << conf.error();
    const std::string &c = conf.value();
    const auto a = c.find("BlockName=rackA Nodes=n[1-2]\n"), b = c.find("BlockName=rackB Nodes=n[3,9-10]\n");
    ASSERT_NE(a, std::string::npos) << c;
    ASSERT_NE(b, std::string::npos) << c;
    EXPECT_LT(a, b) << "the smaller block first";
    EXPECT_NE(c.find("# The blocks differ in size: Slurm uses 2 node(s) of each as a base block.\n"), std::string::npos) << c;
    EXPECT_NE(c.find("# In no block (no fabric in the site file): n4\n"), std::string::npos) << c;
    for (auto &n : s.nodes) n.fabric.clear();
    auto none = block_conf(s);
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error(), "no node of the site has a fabric (omni-hal export --fabric NAME): no block to write");
}
