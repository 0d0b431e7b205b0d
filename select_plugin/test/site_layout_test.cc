// Layouts from the site file of real machines (hal's topology fixtures, as omni-hal export
// writes them), and placements on them, with answers worked out by hand from the fixtures.
#include <gtest/gtest.h>

#include "hal/test/fixtures.h"
#include "site_layout.h"

using namespace omni;
using namespace omni::placement;

namespace {

hal::SiteTopology dgx2_site(int nodes) {
    hal::SiteTopology s;
    for (int i = 0; i < nodes; ++i)
        s.nodes.push_back(hal::site_node(hal::test::load_fixture(hal::test::kDgx2), "dgx0" + std::to_string(i + 1)));
    return s;
}

}  // namespace

// The DGX-2: 16 GPUs, four PLX switches of four GPUs each (pcie), one NVSwitch fabric
// (nvlink), two sockets of eight GPUs (numa).
TEST(SiteLayout, Dgx2Domains) {
    auto l = select::layouts_from_site(dgx2_site(2));
    ASSERT_TRUE(l) << l.error();
    ASSERT_EQ(l.value().layouts.size(), 2u);
    EXPECT_EQ(l.value().hostnames[1], "dgx02");
    EXPECT_EQ(l.value().index.at("dgx02"), 1u);
    const NodeLayout &n = l.value().layouts[0];
    EXPECT_EQ(n.gpus, 16u);
    EXPECT_EQ(n.domains[0], (std::vector<std::uint64_t>{0x000f, 0x00f0, 0x0f00, 0xf000}));
    EXPECT_EQ(n.domains[1], (std::vector<std::uint64_t>{0xffff}));
    EXPECT_EQ(n.domains[2], (std::vector<std::uint64_t>{0x00ff, 0xff00}));
    EXPECT_EQ(n.domains[3], (std::vector<std::uint64_t>{0xffff}));
}

// Two DGX-2s; on the first, GPUs 0 and 4 are taken. Units of 4 @pcie: the first one goes to
// dgx01's switch {8-11} (it breaks that switch and the second socket, both wholly free; the
// NVSwitch domain and the node are broken already), the second to {12-15} (only its switch
// is whole now); the third to dgx02's first switch, which breaks four domains.
TEST(SiteLayout, Dgx2PlacementsByHand) {
    auto l = select::layouts_from_site(dgx2_site(2));
    ASSERT_TRUE(l) << l.error();
    std::vector<NodeFree> free(2, NodeFree{std::vector<std::uint8_t>(16, 100)});
    free[0].share[0] = free[0].share[4] = 0;
    Request r;
    r.ranks_per_unit = 4;
    r.kind = Kind::Pcie;
    r.min_units = 1;
    r.max_units = 3;
    auto p = place(l.value().layouts, free, r);
    ASSERT_TRUE(p) << p.error();
    ASSERT_EQ(p.value().units.size(), 3u);
    using Parts = std::vector<std::pair<std::uint32_t, std::uint64_t>>;
    EXPECT_EQ(p.value().units[0].parts, (Parts{{0, 0x0f00}}));
    EXPECT_EQ(p.value().units[1].parts, (Parts{{0, 0xf000}}));
    EXPECT_EQ(p.value().units[2].parts, (Parts{{1, 0x000f}}));
    // Units of 2 @pcie, one at a time.
    r.ranks_per_unit = 2;
    r.max_units = 1;
    auto b = place(l.value().layouts, free, r);
    auto f = place_first_fit(l.value().layouts, free, r);
    ASSERT_TRUE(b && f);
    // Best fit: switch {0-3} has GPUs 1-3 free and is broken already: GPUs 1 and 2.
    // First fit: the same switch, its lowest free GPUs: also 1 and 2.
    EXPECT_EQ(b.value().units[0].parts, (Parts{{0, 0x0006}}));
    EXPECT_EQ(f.value().units[0].parts, (Parts{{0, 0x0006}}));
    // With dgx01's first switch full, the next broken switch {4-7}: GPUs 5 and 6 (switch
    // {8-11} would break itself and the second socket).
    free[0].share[1] = free[0].share[2] = free[0].share[3] = 0;
    b = place(l.value().layouts, free, r);
    ASSERT_TRUE(b);
    EXPECT_EQ(b.value().units[0].parts, (Parts{{0, 0x0060}}));
}

TEST(SiteLayout, RefusesWhatThePlacementCannotUse) {
    auto s = dgx2_site(1);
    s.nodes[0].domains[0][0].push_back(99);
    auto l = select::layouts_from_site(s);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.error(), "site topology: node 'dgx01': a pcie domain names GPU 99 of 16");
    s = dgx2_site(1);
    s.nodes[0].domains[2].pop_back();
    l = select::layouts_from_site(s);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.error(), "site topology: node 'dgx01': the numa domains do not cover its GPUs");
    s = dgx2_site(2);
    s.nodes[1].hostname = "dgx01";
    l = select::layouts_from_site(s);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.error(), "site topology: node 'dgx01': listed twice");
}
