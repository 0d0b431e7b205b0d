// Model-parallel groups of a layout (runtime/groups.h). Expected groups are written out by
// hand for small layouts.
#include <gtest/gtest.h>

#include "runtime/groups.h"

using namespace omni::launcher;

namespace {

// units in rank order, N ranks each, as the coordinator numbers them.
Layout layout_of(const std::vector<std::uint32_t> &units, std::uint32_t n, std::uint64_t gen = 3) {
    Layout l;
    l.generation = gen;
    l.units = units;
    l.world = static_cast<std::uint32_t>(units.size()) * n;
    for (std::uint32_t i = 0; i < units.size(); ++i)
        for (std::uint32_t s = 0; s < n; ++s)
            l.members.push_back({"u" + std::to_string(units[i]) + "s" + std::to_string(s), units[i], s, i * n + s});
    return l;
}

}  // namespace

TEST(Groups, TwoUnitsOfFourWithTwoWayModelParallelism) {
    const Layout l = layout_of({7, 3}, 4);  // unit ids need not be ordered
    // Unit 7 holds replicas 0 and 1, unit 3 replicas 2 and 3; MP index = slot % 2.
    struct Want { std::uint32_t unit, slot, mp_rank, dp_rank; };
    for (const Want &w : {Want{7, 0, 0, 0}, Want{7, 1, 1, 0}, Want{7, 2, 0, 1}, Want{7, 3, 1, 1},
                          Want{3, 0, 0, 2}, Want{3, 1, 1, 2}, Want{3, 2, 0, 3}, Want{3, 3, 1, 3}}) {
        auto g = groups_of(l, w.unit, w.slot, 2);
        ASSERT_TRUE(g) << g.error();
        EXPECT_EQ(g.value().mp_size, 2u);
        EXPECT_EQ(g.value().mp_rank, w.mp_rank) << w.unit << "/" << w.slot;
        EXPECT_EQ(g.value().dp_size, 4u);
        EXPECT_EQ(g.value().dp_rank, w.dp_rank) << w.unit << "/" << w.slot;
        EXPECT_EQ(g.value().replica_in_unit, w.slot / 2);
    }
    // The DP group of MP index 1: the odd slots, in rank order, renumbered.
    const Layout dp = dp_layout(l, 2, 1);
    ASSERT_EQ(dp.world, 4u);
    EXPECT_EQ(dp.units, l.units);
    std::vector<std::string> ids;
    for (const Member &m : dp.members) ids.push_back(m.id);
    EXPECT_EQ(ids, (std::vector<std::string>{"u7s1", "u7s3", "u3s1", "u3s3"}));
    for (std::uint32_t r = 0; r < 4; ++r) EXPECT_EQ(dp.members[r].rank, r);
    EXPECT_EQ(dp.rank_of(3, 1), 3u);  // unit 3, replica 1
    EXPECT_FALSE(dp.rank_of(3, 2));   // no replica 2 in a unit of 2 replicas
}

TEST(Groups, OneWayIsTheWholeGenerationAndFourWayIsTheUnit) {
    const Layout l = layout_of({0, 1, 2}, 4);
    auto one = groups_of(l, 1, 2, 1);
    ASSERT_TRUE(one) << one.error();
    EXPECT_EQ(one.value().dp_rank, 6u);  // its rank
    EXPECT_EQ(one.value().dp_size, 12u);
    EXPECT_EQ(one.value().mp_rank, 0u);
    EXPECT_EQ(dp_layout(l, 1, 0).members, l.members);
    auto four = groups_of(l, 2, 3, 4);
    ASSERT_TRUE(four) << four.error();
    EXPECT_EQ(four.value().dp_rank, 2u);  // one replica per unit
    EXPECT_EQ(four.value().dp_size, 3u);
    EXPECT_EQ(four.value().mp_rank, 3u);
}

TEST(Groups, BadSizesAndStrangersAreRefused) {
    const Layout l = layout_of({0, 1}, 4);
    auto three = groups_of(l, 0, 0, 3);
    ASSERT_FALSE(three);
    EXPECT_NE(three.error().find("OMNI_MP=3"), std::string::npos) << three.error();
    EXPECT_NE(three.error().find("unit size 4"), std::string::npos) << three.error();
    EXPECT_FALSE(groups_of(l, 0, 0, 0));
    auto stranger = groups_of(l, 9, 0, 2);
    ASSERT_FALSE(stranger);
    EXPECT_NE(stranger.error().find("unit 9"), std::string::npos) << stranger.error();
}

TEST(Groups, ADecisionSeenByOneDataParallelGroup) {
    Decision d;
    d.kind = DecisionKind::Reshaped;
    d.step = 5;
    d.next = layout_of({0, 4}, 4, 6);
    d.joining_units = {4};
    const Decision p = dp_decision(d, 2, 0);
    EXPECT_EQ(p.step, 5u);
    EXPECT_EQ(p.joining_units, d.joining_units);
    EXPECT_EQ(p.next.world, 4u);
    EXPECT_EQ(p.next.generation, 6u);
    EXPECT_EQ(p.next.rank_of(4, 1), 3u);  // unit 4's second replica
}
