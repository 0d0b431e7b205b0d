// The point-to-point re-partition of the planned hand-off (runtime/handoff.h): its plan
// checked against ranges worked out by hand, and real moves among Gloo ranks (threads on
// 127.0.0.1) checked element by element against the logical vector's formula.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/test/gloo_ranks.h"
#include "runtime/handoff.h"

using namespace omni::launcher;

namespace {

// The logical vector: exact in fp32 for the lengths used here.
float value(std::size_t i) { return static_cast<float>(i) * 0.5f + 3.0f; }

void on_ranks(int n, const std::function<void(Communicator &)> &body) {
    omni::launcher::test::on_gloo_ranks(n, body);
}

// Runs `plan` on n ranks; each holds value() over have[r] and must end with value() over
// want[r].
void run_plan(const Repartition &plan) {
    const int n = static_cast<int>(plan.have.size());
    on_ranks(n, [&](Communicator &c) {
        const auto r = static_cast<std::size_t>(c.rank());
        const ShardRange h = plan.have[r], w = plan.want[r];
        std::vector<float> src(h.size()), dst(w.size(), -1.0f);
        for (std::size_t i = 0; i < h.size(); ++i) src[i] = value(h.begin + i);
        auto st = repartition(c, plan, src.data(), dst.data());
        ASSERT_TRUE(st.ok()) << st.error();
        for (std::size_t i = 0; i < w.size(); ++i) ASSERT_EQ(dst[i], value(w.begin + i)) << "rank " << r << " element " << w.begin + i;
    });
}

ShardRange R(std::size_t b, std::size_t e) { return ShardRange{b, e}; }

}  // namespace

TEST(Handoff, Zero1RangesSplitEvenlyLowerRanksFirst) {
    EXPECT_EQ(zero1_range(10, 0, 4), R(0, 3));
    EXPECT_EQ(zero1_range(10, 1, 4), R(3, 6));
    EXPECT_EQ(zero1_range(10, 2, 4), R(6, 8));
    EXPECT_EQ(zero1_range(10, 3, 4), R(8, 10));
    EXPECT_EQ(zero1_range(2, 3, 4), R(2, 2));  // more ranks than elements: empty ranges
}

TEST(Handoff, PlanOfAFourToTwoShrinkMovesOnlyWhatChangesOwner) {
    // 10 elements held by 4 ranks, wanted by the first 2 (the survivors): worked by hand.
    Repartition p{{R(0, 3), R(3, 6), R(6, 8), R(8, 10)}, {R(0, 5), R(5, 10), R(0, 0), R(0, 0)}};
    auto r0 = plan_repartition(p, 0), r1 = plan_repartition(p, 1), r2 = plan_repartition(p, 2),
         r3 = plan_repartition(p, 3);
    ASSERT_TRUE(r0.ok() && r1.ok() && r2.ok() && r3.ok());
    EXPECT_EQ(r0.value().local, R(0, 3));
    EXPECT_TRUE(r0.value().sends.empty());
    ASSERT_EQ(r0.value().recvs.size(), 1u);
    EXPECT_EQ(r0.value().recvs[0].peer, 1);
    EXPECT_EQ(r0.value().recvs[0].range, R(3, 5));
    EXPECT_EQ(r1.value().local, R(5, 6));
    ASSERT_EQ(r1.value().sends.size(), 1u);
    EXPECT_EQ(r1.value().sends[0].range, R(3, 5));
    ASSERT_EQ(r1.value().recvs.size(), 2u);
    EXPECT_EQ(r1.value().recvs[0].peer, 2);
    EXPECT_EQ(r1.value().recvs[0].range, R(6, 8));
    EXPECT_EQ(r1.value().recvs[1].peer, 3);
    EXPECT_EQ(r1.value().recvs[1].range, R(8, 10));
    EXPECT_EQ(r2.value().local.size(), 0u);
    ASSERT_EQ(r2.value().sends.size(), 1u);
    EXPECT_EQ(r2.value().sends[0].peer, 1);
    EXPECT_TRUE(r3.value().recvs.empty());
}

TEST(Handoff, PlansThatCannotWorkAreRefusedOnEveryRank) {
    // Two holders of element 2.
    Repartition overlap{{R(0, 3), R(2, 5)}, {R(0, 5), R(0, 0)}};
    for (std::uint32_t r = 0; r < 2; ++r) {
        auto p = plan_repartition(overlap, r);
        ASSERT_FALSE(p.ok());
        EXPECT_NE(p.error().find("both hold elements [2, 3)"), std::string::npos) << p.error();
    }
    // Rank 1 wants elements nobody holds: rank 0 refuses as well, so nobody waits for it.
    Repartition hole{{R(0, 3), R(0, 0)}, {R(0, 0), R(0, 5)}};
    for (std::uint32_t r = 0; r < 2; ++r) {
        auto p = plan_repartition(hole, r);
        ASSERT_FALSE(p.ok());
        EXPECT_NE(p.error().find("rank 1 needs [0, 5), but only 3"), std::string::npos) << p.error();
    }
    EXPECT_FALSE(plan_repartition(Repartition{{R(0, 1)}, {}}, 0).ok());
    EXPECT_FALSE(plan_repartition(Repartition{{R(0, 1)}, {R(0, 1)}}, 1).ok());
}

TEST(Handoff, OldLayoutToSurvivorsForEveryShrink) {
    // Every old world of 1..5 ranks onto every number of survivors 1..old, odd lengths so
    // that ranges are uneven.
    for (std::uint32_t old_world = 1; old_world <= 5; ++old_world)
        for (std::uint32_t survivors = 1; survivors <= old_world; ++survivors) {
            SCOPED_TRACE(std::to_string(old_world) + " -> " + std::to_string(survivors));
            const std::size_t len = 1000 + 37 * old_world + survivors;
            Repartition p;
            for (std::uint32_t r = 0; r < old_world; ++r) {
                p.have.push_back(zero1_range(len, r, old_world));
                p.want.push_back(r < survivors ? zero1_range(len, r, survivors) : ShardRange{});
            }
            run_plan(p);
        }
}

TEST(Handoff, SurvivorsToNewLayoutWithJoinersAndParametersToJoiners) {
    for (auto [survivors, world] : {std::pair{1u, 2u}, {2u, 4u}, {3u, 4u}, {2u, 5u}}) {
        SCOPED_TRACE(std::to_string(survivors) + " -> " + std::to_string(world));
        const std::size_t len = 100003;
        // Optimizer vector: survivor layout -> new ZeRO-1 layout on every rank.
        Repartition opt, params;
        for (std::uint32_t r = 0; r < world; ++r) {
            opt.have.push_back(r < survivors ? zero1_range(len, r, survivors) : ShardRange{});
            opt.want.push_back(zero1_range(len, r, world));
            // Parameters: survivors offer a part each, joiners want all of them.
            params.have.push_back(r < survivors ? zero1_range(len, r, survivors) : ShardRange{});
            params.want.push_back(r < survivors ? ShardRange{} : ShardRange{0, len});
        }
        run_plan(opt);
        run_plan(params);
    }
}

TEST(Handoff, InPlaceWhenWantedLiesInsideHeld) {
    Repartition p{{R(0, 6), R(6, 10)}, {R(2, 5), R(0, 2)}};
    ASSERT_TRUE(in_place_offset(p, 0).has_value());
    EXPECT_EQ(*in_place_offset(p, 0), 2u);
    EXPECT_FALSE(in_place_offset(p, 1).has_value());  // wants what rank 0 holds
    Repartition nothing{{R(0, 4)}, {R(0, 0)}};
    EXPECT_FALSE(in_place_offset(nothing, 0).has_value());  // nothing wanted: nothing to keep
    EXPECT_FALSE(in_place_offset(nothing, 1).has_value());  // no such rank
}

TEST(Handoff, InPlaceGrowKeepsTheSurvivorsBufferAndSendsTheRest) {
    // 2 survivors holding halves, 4 ranks wanting quarters: rank 0's quarter is a prefix of
    // its half (kept in place, dst aliasing src), rank 1 receives its quarter from rank 0.
    const std::size_t len = 40001;
    Repartition p;
    for (std::uint32_t r = 0; r < 4; ++r) {
        p.have.push_back(r < 2 ? zero1_range(len, r, 2) : ShardRange{});
        p.want.push_back(zero1_range(len, r, 4));
    }
    on_ranks(4, [&](Communicator &c) {
        const auto r = static_cast<std::uint32_t>(c.rank());
        std::vector<float> held(p.have[r].size());
        for (std::size_t i = 0; i < held.size(); ++i) held[i] = value(p.have[r].begin + i);
        const float *before = held.data();
        std::vector<float> fresh;
        float *dst;
        if (auto off = in_place_offset(p, r)) {
            dst = held.data() + *off;
        } else {
            fresh.assign(p.want[r].size(), -1.0f);
            dst = fresh.data();
        }
        auto st = repartition(c, p, held.data(), dst);
        ASSERT_TRUE(st.ok()) << st.error();
        if (r == 0) {
            EXPECT_EQ(dst, before);  // no new buffer
        }
        for (std::size_t i = 0; i < p.want[r].size(); ++i) ASSERT_EQ(dst[i], value(p.want[r].begin + i)) << r;
    });
}

TEST(Handoff, SeveralVectorsInOneExchangeStayApart) {
    // Three vectors of different lengths re-partitioned 3 -> 2 in one call: the lanes keep
    // rank 2's three sends to rank 1 from landing in each other's buffers.
    const std::size_t lens[3] = {1001, 77777, 5};
    std::vector<Repartition> plans(3);
    for (int k = 0; k < 3; ++k) {
        for (std::uint32_t r = 0; r < 3; ++r) {
            plans[k].have.push_back(zero1_range(lens[k], r, 3));
            plans[k].want.push_back(r < 2 ? zero1_range(lens[k], r, 2) : ShardRange{});
        }
    }
    on_ranks(3, [&](Communicator &c) {
        const auto r = static_cast<std::uint32_t>(c.rank());
        std::vector<std::vector<float>> src(3), dst(3);
        std::vector<RepartitionJob> jobs;
        for (int k = 0; k < 3; ++k) {
            for (std::size_t i = plans[k].have[r].begin; i < plans[k].have[r].end; ++i)
                src[k].push_back(value(i) + 1000.0f * static_cast<float>(k));
            dst[k].assign(plans[k].want[r].size(), -1.0f);
            jobs.push_back({&plans[k], src[k].data(), dst[k].data()});
        }
        auto st = repartition(c, jobs);
        ASSERT_TRUE(st.ok()) << st.error();
        for (int k = 0; k < 3; ++k) {
            for (std::size_t i = 0; i < dst[k].size(); ++i)
                ASSERT_EQ(dst[k][i], value(plans[k].want[r].begin + i) + 1000.0f * static_cast<float>(k)) << k;
        }
    });
}

TEST(Handoff, AssignZeroedGivesZerosOfTheRightSize) {
    std::vector<float> v{1, 2, 3};
    assign_zeroed(v, 3u << 20);  // above the 1 MiB at which pages are faulted in at once
    ASSERT_EQ(v.size(), 3u << 20);
    for (std::size_t i = 0; i < v.size(); i += 4099) ASSERT_EQ(v[i], 0.0f);
    EXPECT_EQ(v.back(), 0.0f);
    assign_zeroed(v, 2);
    EXPECT_EQ(v, (std::vector<float>{0, 0}));
}
