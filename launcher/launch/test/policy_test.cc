// The elastic policy (launch/policy.h): what it wants from one look, and when it acts.
// Expected answers are worked out by hand from the rules in policy.h.
#include <iostream>

#include <gtest/gtest.h>

#include "launch/policy.h"

using namespace omni::launcher;

namespace {

PolicyJob job4(std::uint32_t units = 2) {
    PolicyJob j;
    j.units = units;
    j.min_units = 1;
    j.max_units = 4;
    j.priority = 1000;
    return j;
}

PolicyQueue idle(std::vector<std::string> nodes, std::vector<PendingJob> pending = {}) {
    return PolicyQueue{std::move(nodes), std::move(pending)};
}

omni::PolicyOptions quick(std::uint64_t grow_after, std::uint64_t shrink_after, std::uint64_t grow_cd,
                    std::uint64_t shrink_cd) {
    omni::PolicyOptions o;
    o.grow_after = grow_after;
    o.shrink_after = shrink_after;
    o.grow_cooldown = grow_cd;
    o.shrink_cooldown = shrink_cd;
    return o;
}

TEST(PolicyWish, GrowsIntoIdleNodesUpToTheMaximum) {
    auto w = policy_wish(job4(2), idle({"n3", "n4"}));
    EXPECT_EQ(w.action, PolicyAction::Grow);
    EXPECT_EQ(w.target, 4u);
    w = policy_wish(job4(2), idle({"n3", "n4", "n5"}));
    EXPECT_EQ(w.target, 4u) << "capped at --omni-elastic's MAX";
    w = policy_wish(job4(4), idle({"n5"}));
    EXPECT_EQ(w.action, PolicyAction::None);
    EXPECT_NE(w.reason.find("maximum"), std::string::npos) << w.reason;
    w = policy_wish(job4(2), idle({}));
    EXPECT_EQ(w.action, PolicyAction::None);
    EXPECT_NE(w.reason.find("no idle node"), std::string::npos) << w.reason;
}

TEST(PolicyWish, UnitsOfSeveralNodesNeedThemAllIdle) {
    PolicyJob j = job4(1);
    j.nodes_per_unit = 2;
    EXPECT_EQ(policy_wish(j, idle({"n3"})).action, PolicyAction::None);
    auto w = policy_wish(j, idle({"n3", "n4", "n5"}));
    EXPECT_EQ(w.action, PolicyAction::Grow);
    EXPECT_EQ(w.target, 2u);
    j.nodes_per_unit = 1;
    j.units_per_node = 2;
    w = policy_wish(j, idle({"n3"}));
    EXPECT_EQ(w.target, 3u) << "one idle node holds two units";
}

TEST(PolicyWish, AWaitingJobOfHigherOrEqualPriorityBlocksAGrow) {
    auto w = policy_wish(job4(2), idle({"n3", "n4"}, {{77, 1000, 3, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::None);
    EXPECT_NE(w.reason.find("job 77"), std::string::npos) << w.reason;
    // A lower priority does not: Slurm would start our satellite first.
    w = policy_wish(job4(2), idle({"n3", "n4"}, {{78, 999, 3, "Priority"}}));
    EXPECT_EQ(w.action, PolicyAction::Grow);
    // Nor does a job that does not wait for nodes.
    for (const char *reason : {"Dependency", "JobHeldUser", "BeginTime", "QOSMaxJobsPerUserLimit"}) {
        w = policy_wish(job4(2), idle({"n3", "n4"}, {{79, 5000, 1, reason}}));
        EXPECT_EQ(w.action, PolicyAction::Grow) << reason;
    }
}

TEST(PolicyWish, GivesBackJustTheNodesAHigherPriorityJobLacks) {
    // 4 units on 4 nodes, nothing idle, job 90 needs 2 nodes: 2 units go.
    auto w = policy_wish(job4(4), idle({}, {{90, 2000, 2, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::Shrink);
    EXPECT_EQ(w.target, 2u);
    EXPECT_NE(w.reason.find("job 90"), std::string::npos) << w.reason;
    // One node is idle already: one unit goes.
    w = policy_wish(job4(4), idle({"n9"}, {{90, 2000, 2, "Resources"}}));
    EXPECT_EQ(w.target, 3u);
    // Equal priority is not higher: no shrink, and no grow either.
    w = policy_wish(job4(4), idle({}, {{90, 1000, 2, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::None);
}

TEST(PolicyWish, NoShrinkThatWouldNotStartTheJob) {
    // Needs 5 nodes, the job can give 3 above its minimum of 1: pointless.
    auto w = policy_wish(job4(4), idle({}, {{90, 2000, 5, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::None);
    // The minimum bounds it.
    PolicyJob j = job4(4);
    j.min_units = 3;
    EXPECT_EQ(policy_wish(j, idle({}, {{90, 2000, 2, "Resources"}})).action, PolicyAction::None);
    // The batch host's units never leave: two units a node, min 1, four units: only two can go.
    j = job4(4);
    j.units_per_node = 2;
    EXPECT_EQ(policy_wish(j, idle({}, {{90, 2000, 2, "Resources"}})).action, PolicyAction::None);
    w = policy_wish(j, idle({}, {{90, 2000, 1, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::Shrink);
    EXPECT_EQ(w.target, 2u);
}

TEST(PolicyWish, IdleNodesGoToHigherJobsFirstInPriorityOrder) {
    // Job 91 (3000) takes the idle node; job 92 (2500) needs 2 more: two units go.
    auto w = policy_wish(job4(4), idle({"n9"}, {{92, 2500, 2, "Priority"}, {91, 3000, 1, "Resources"}}));
    EXPECT_EQ(w.action, PolicyAction::Shrink);
    EXPECT_EQ(w.target, 2u);
    EXPECT_NE(w.reason.find("job 92"), std::string::npos) << w.reason;
    // A job we cannot help is skipped for the next (backfill may start that one).
    w = policy_wish(job4(4), idle({}, {{93, 3000, 9, "Resources"}, {94, 2000, 1, "Resources"}}));
    EXPECT_EQ(w.target, 3u);
    EXPECT_NE(w.reason.find("job 94"), std::string::npos) << w.reason;
}

TEST(ElasticPolicy, AWishMustHoldForItsThreshold) {
    ElasticPolicy p(quick(60, 30, 0, 0));
    const auto q = idle({"n3", "n4"});
    auto d = p.decide(0, job4(2), q);
    EXPECT_EQ(d.action, PolicyAction::None);
    EXPECT_TRUE(d.report) << "the wish is told once";
    EXPECT_NE(d.reason.find("grow_after"), std::string::npos) << d.reason;
    d = p.decide(30000, job4(2), q);
    EXPECT_EQ(d.action, PolicyAction::None);
    EXPECT_FALSE(d.report) << "and not again while it waits";
    d = p.decide(59999, job4(2), q);
    EXPECT_EQ(d.action, PolicyAction::None);
    d = p.decide(60000, job4(2), q);
    EXPECT_EQ(d.action, PolicyAction::Grow);
    EXPECT_EQ(d.target, 4u);
    EXPECT_TRUE(d.report);
}

TEST(ElasticPolicy, AnInterruptedWishStartsItsWaitAgain) {
    ElasticPolicy p(quick(60, 30, 0, 0));
    p.decide(0, job4(2), idle({"n3"}));
    auto d = p.decide(30000, job4(2), idle({}));  // gone
    EXPECT_TRUE(d.report);
    EXPECT_NE(d.reason.find("no resize wanted"), std::string::npos) << d.reason;
    p.decide(40000, job4(2), idle({"n3"}));
    EXPECT_EQ(p.decide(90000, job4(2), idle({"n3"})).action, PolicyAction::None) << "held 50 s of 60";
    EXPECT_EQ(p.decide(100000, job4(2), idle({"n3"})).action, PolicyAction::Grow);
}

TEST(ElasticPolicy, CooldownsCountFromTheLastResize) {
    ElasticPolicy p(quick(0, 0, 180, 600));
    PolicyJob j = job4(2);
    j.last_resize_ms = 1000;
    auto d = p.decide(11000, j, idle({"n3"}));
    EXPECT_EQ(d.action, PolicyAction::None);
    EXPECT_NE(d.reason.find("grow_cooldown=180"), std::string::npos) << d.reason;
    EXPECT_EQ(p.decide(180999, j, idle({"n3"})).action, PolicyAction::None);
    EXPECT_EQ(p.decide(181000, j, idle({"n3"})).action, PolicyAction::Grow);
    // A shrink waits for its own, longer cooldown.
    j = job4(3);
    j.last_resize_ms = 181000;
    const auto waiting = idle({}, {{90, 5000, 1, "Resources"}});
    EXPECT_EQ(p.decide(300000, j, waiting).action, PolicyAction::None);
    EXPECT_EQ(p.decide(781000, j, waiting).action, PolicyAction::Shrink);
    // A job that never resized has no cooldown to wait.
    ElasticPolicy fresh(quick(0, 0, 180, 600));
    EXPECT_EQ(fresh.decide(5, job4(2), idle({"n3"})).action, PolicyAction::Grow);
}

TEST(ElasticPolicy, AChangeInFlightSuspendsAndRestartsTheWait) {
    ElasticPolicy p(quick(60, 30, 0, 0));
    p.decide(0, job4(2), idle({"n3"}));
    PolicyJob busy = job4(2);
    busy.busy = true;
    EXPECT_EQ(p.decide(70000, busy, idle({"n3"})).action, PolicyAction::None);
    EXPECT_EQ(p.decide(80000, job4(2), idle({"n3"})).action, PolicyAction::None) << "the wait starts anew";
    EXPECT_EQ(p.decide(140000, job4(2), idle({"n3"})).action, PolicyAction::Grow);
}

TEST(ElasticPolicy, WithdrawsItsWaitingGrowWhenAHigherJobComes) {
    ElasticPolicy p(quick(0, 0, 0, 0));
    PolicyJob j = job4(2);
    j.busy = true;
    j.policy_grow = 4;
    // Still wanted: nothing to do while it is in flight.
    EXPECT_EQ(p.decide(0, j, idle({"n3", "n4"})).action, PolicyAction::None);
    auto d = p.decide(1000, j, idle({"n3", "n4"}, {{95, 1500, 2, "Resources"}}));
    EXPECT_EQ(d.action, PolicyAction::Withdraw);
    EXPECT_EQ(d.target, 2u);
    EXPECT_TRUE(d.report);
    EXPECT_NE(d.reason.find("job 95"), std::string::npos) << d.reason;
}

TEST(ElasticPolicy, KeepsItsGrowWhenItsOwnSatelliteTookTheIdleNodes) {
    ElasticPolicy p(quick(0, 0, 0, 0));
    PolicyJob j = job4(2);
    j.busy = true;
    j.policy_grow = 4;
    EXPECT_EQ(p.decide(0, j, idle({})).action, PolicyAction::None) << "no idle node is no reason to withdraw";
}

TEST(ElasticPolicy, AWithdrawnGrowIsAskedAgainOnlyAfterItsCooldown) {
    ElasticPolicy p(quick(0, 0, 20, 30));
    EXPECT_EQ(p.decide(0, job4(2), idle({"n3", "n4"})).action, PolicyAction::Grow);
    PolicyJob j = job4(2);
    j.busy = true;
    j.policy_grow = 4;
    EXPECT_EQ(p.decide(1000, j, idle({"n3", "n4"}, {{96, 2000, 2, "Resources"}})).action, PolicyAction::Withdraw);
    // The job never changed size, but its last request was at 0.
    EXPECT_EQ(p.decide(9000, job4(2), idle({"n3", "n4"})).action, PolicyAction::None);
    EXPECT_EQ(p.decide(20000, job4(2), idle({"n3", "n4"})).action, PolicyAction::Grow);
}

// A flapping queue: a job of higher priority that needs 2 nodes comes for 6 s and goes for
// 4 s, over and over, for an hour. Whatever the policy does, two resizes are never closer than
// the cooldown of the second one, and the count stays within what the cooldowns allow.
TEST(ElasticPolicy, AFlappingQueueMakesOnlyTheResizesItsCooldownsAllow) {
    const std::uint64_t grow_cd = 180, shrink_cd = 600;
    ElasticPolicy p(quick(0, 0, grow_cd, shrink_cd));
    PolicyJob j = job4(2);
    std::vector<std::pair<std::int64_t, PolicyAction>> resizes;
    const std::int64_t hour = 3600 * 1000;
    for (std::int64_t t = 0; t <= hour; t += 1000) {
        const bool present = (t / 1000) % 10 < 6;
        // Nodes the job does not hold are idle unless the other job runs on them.
        const std::uint32_t cluster = 4;
        PolicyQueue q;
        std::uint32_t free_nodes = cluster - j.units;
        if (present && free_nodes >= 2) free_nodes -= 2;  // it runs
        else if (present) q.pending.push_back({99, 9000, 2, "Resources"});
        for (std::uint32_t i = 0; i < free_nodes; ++i) q.idle_nodes.push_back("f" + std::to_string(i));
        auto d = p.decide(t, j, q);
        if (d.action == PolicyAction::Grow || d.action == PolicyAction::Shrink) {
            ASSERT_TRUE(d.report);
            resizes.emplace_back(t, d.action);
            j.units = d.target;
            j.last_resize_ms = t;
        }
    }
    std::size_t grows = 0;
    for (const auto &r : resizes) grows += r.second == PolicyAction::Grow;
    std::cout << resizes.size() << " resizes in an hour (" << grows << " grows)\n";
    ASSERT_GE(grows, 1u) << "the policy did grow";
    ASSERT_GE(resizes.size() - grows, 1u) << "and shrink";
    for (std::size_t i = 1; i < resizes.size(); ++i) {
        const std::int64_t gap = resizes[i].first - resizes[i - 1].first;
        const std::uint64_t cd = resizes[i].second == PolicyAction::Grow ? grow_cd : shrink_cd;
        EXPECT_GE(gap, static_cast<std::int64_t>(cd) * 1000) << "resize " << i;
    }
    EXPECT_LE(resizes.size(), 1 + hour / 1000 / grow_cd);
}

}  // namespace
