// omni-ctl shrink's choice (ctl/shrink_plan.h): which units leave and which nodes go back.
#include <gtest/gtest.h>

#include "ctl/shrink_plan.h"

using namespace omni::launcher;
using Units = std::vector<std::uint32_t>;
using Nodes = std::vector<std::string>;

namespace {

// Four nodes, one unit each (unit u on node n(u+1)), n1 the batch host.
ShrinkInput one_per_node() {
    ShrinkInput in;
    in.units = {0, 1, 2, 3};
    in.placements = {{0, "n1"}, {1, "n2"}, {2, "n3"}, {3, "n4"}};
    in.min_units = 1;
    in.job_nodes = {"n1", "n2", "n3", "n4"};
    in.batch_host = "n1";
    return in;
}

}  // namespace

TEST(ShrinkPlan, NewestNodesFirstNeverTheBatchHost) {
    auto p = plan_shrink_to(one_per_node(), 2);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p.value().target, 2u);
    EXPECT_EQ(p.value().leave, (Units{2, 3}));
    EXPECT_EQ(p.value().release, (Nodes{"n3", "n4"}));
    EXPECT_EQ(p.value().keep, (Nodes{"n1", "n2"}));
    p = plan_shrink_to(one_per_node(), 1);
    ASSERT_TRUE(p);
    EXPECT_EQ(p.value().leave, (Units{1, 2, 3}));
    EXPECT_EQ(p.value().keep, (Nodes{"n1"}));
}

TEST(ShrinkPlan, WholeNodesBeforeNewestUnits) {
    // n2 holds units 0 and 4 (two ranks each of size-1 units), n3 holds 1, n4 holds 2 and 3;
    // n1 (batch) holds 5. Shrinking by 2: n3 alone frees a node with 1 unit, then n2 or n4
    // would need 2 more; the plan empties n3 and takes the newest unit left (5) for the rest.
    ShrinkInput in;
    in.units = {0, 1, 2, 3, 4, 5};
    in.placements = {{0, "n2"}, {4, "n2"}, {1, "n3"}, {2, "n4"}, {3, "n4"}, {5, "n1"}};
    in.job_nodes = {"n1", "n2", "n3", "n4"};
    in.batch_host = "n1";
    auto p = plan_shrink_to(in, 4);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p.value().leave, (Units{1, 5}));
    EXPECT_EQ(p.value().release, (Nodes{"n3"}));
    // By 3: n3 (1 unit), then two units of one node: n2 and n4 tie on size, and n2 holds the
    // newer unit (4 against 3).
    p = plan_shrink_to(in, 3);
    ASSERT_TRUE(p);
    EXPECT_EQ(p.value().leave, (Units{0, 1, 4}));
    EXPECT_EQ(p.value().release, (Nodes{"n2", "n3"}));
}

TEST(ShrinkPlan, UnitsWithoutANodeLeaveButFreeNothing) {
    ShrinkInput in = one_per_node();
    in.placements.clear();  // ranks that did not say where they run
    auto p = plan_shrink_to(in, 2);
    ASSERT_TRUE(p);
    EXPECT_EQ(p.value().leave, (Units{2, 3}));
    EXPECT_TRUE(p.value().release.empty());
    EXPECT_EQ(p.value().keep, in.job_nodes);
}

TEST(ShrinkPlan, ByNodes) {
    auto p = plan_shrink_nodes(one_per_node(), {"n4", "n2"});
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p.value().target, 2u);
    EXPECT_EQ(p.value().leave, (Units{1, 3}));
    EXPECT_EQ(p.value().release, (Nodes{"n2", "n4"}));
    EXPECT_EQ(p.value().keep, (Nodes{"n1", "n3"}));
}

TEST(ShrinkPlan, RefusesWithTheReason) {
    auto in = one_per_node();
    auto p = plan_shrink_to(in, 4);
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: --units 4 is not below the job's 4 units (grow or reshape to add units)");
    in.min_units = 3;
    p = plan_shrink_to(in, 2);
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: --units 2 is below the elastic minimum 3");
    p = plan_shrink_nodes(in, {"n3", "n4"});
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: releasing those nodes would leave 2 unit(s), below the elastic minimum 3");
    in.min_units = 1;
    p = plan_shrink_nodes(in, {"n1"});
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: node 'n1' is the job's batch host, where omni-launch runs; it cannot be released");
    p = plan_shrink_nodes(in, {"n9"});
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: node 'n9' is not one of the job's nodes");
    p = plan_shrink_nodes(in, {"n2", "n2"});
    ASSERT_FALSE(p);
    EXPECT_EQ(p.error(), "shrink: node 'n2' is named twice");
}
