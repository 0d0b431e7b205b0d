// The point-to-point re-partition of the planned hand-off (runtime_handoff.h): its plan
// checked against ranges worked out by hand, and real moves among Gloo ranks (threads on
// 127.0.0.1) checked element by element against the logical vector's formula.
#include <gtest/gtest.h>
#include <gloo/rendezvous/hash_store.h>

#include <functional>
#include <thread>
#include <vector>

#include "../comm.h"
#include "../runtime_handoff.h"

using namespace omni::launcher;

namespace {

// The logical vector: exact in fp32 for the lengths used here.
float value(std::size_t i) { return static_cast<float>(i) * 0.5f + 3.0f; }

void on_ranks(int n, const std::function<void(Communicator &)> &body) {
    gloo::rendezvous::HashStore store;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            GlooOptions o;
            o.timeout = std::chrono::milliseconds(20000);
            auto c = make_gloo_communicator(store, r, n, o);
            if (!c) {
                errors[static_cast<std::size_t>(r)] = c.error();
                return;
            }
            body(*c.value());
            // As a runtime's ranks do (the next step's first collective): nobody tears the
            // communicator down while a peer still connects to it or reads from it.
            EXPECT_TRUE(c.value()->barrier().ok());
        });
    for (auto &t : threads) t.join();
    for (const auto &e : errors) EXPECT_EQ(e, "");
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
