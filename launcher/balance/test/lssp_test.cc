// LSSP's planner (balance/lssp.h): worked examples whose makespans are computed by hand here,
// properties over random long-tailed steps (every sample once, whole or split; shards within
// memory; aligned power-of-two blocks; never slower than splitting nothing), and bad input.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>

#include <random>

#include "balance/balance.h"
#include "balance/lssp.h"

using namespace omni::balance;

namespace {

LsspOptions opts(std::uint64_t memory, std::uint32_t max_degree, double comm = 0) {
    LsspOptions o;
    o.memory_tokens = memory;
    o.max_degree = max_degree;
    o.cost.sp_comm_per_token = comm;
    return o;
}

}  // namespace

TEST(Lssp, SplitsTheLongSampleOnly) {
    // 4 replicas; one sample of 1000 tokens and twelve of 100; cost = tokens, and a split
    // sample's replicas each pay 0.1 * L * (k-1)/k on top.
    //  - split nothing: 1000 alone on one replica, the twelve 100s on the other three (400
    //    each): makespan 1000;
    //  - LSSP, threshold 100: the 1000 over 4 replicas, 250 + 0.1*1000*3/4 = 325 each, then
    //    three 100s each: 625;
    //  - static SP (memory 300: degree 4 for the longest, so for all): 325 for the long one,
    //    and each 100 costs 25 + 0.1*100*3/4 = 32.5 on all four: 325 + 12*32.5 = 715.
    std::vector<std::uint64_t> l(13, 100);
    l[5] = 1000;
    auto whole = plan_lssp(l, 4, opts(1000, 1, 0.1));
    ASSERT_TRUE(whole) << whole.error();
    EXPECT_DOUBLE_EQ(whole.value().makespan, 1000);
    EXPECT_TRUE(whole.value().split.empty());
    auto p = plan_lssp(l, 4, opts(1000, 4, 0.1));
    ASSERT_TRUE(p) << p.error();
    EXPECT_DOUBLE_EQ(p.value().makespan, 625);
    EXPECT_EQ(p.value().threshold, 100u);
    ASSERT_EQ(p.value().split.size(), 1u);
    EXPECT_EQ(p.value().split[0].position, 5u);
    EXPECT_EQ(p.value().split[0].degree, 4u);
    EXPECT_EQ(p.value().peak_tokens, 250u);
    for (const auto &w : p.value().whole) EXPECT_EQ(w.size(), 3u);
    auto st = plan_static_sp(l, 4, opts(300, 4, 0.1));
    ASSERT_TRUE(st) << st.error();
    EXPECT_DOUBLE_EQ(st.value().makespan, 715);
    EXPECT_EQ(st.value().split.size(), 13u);
    // With memory 300 LSSP must split the long sample too, and still beats static SP.
    auto m = plan_lssp(l, 4, opts(300, 4, 0.1));
    ASSERT_TRUE(m) << m.error();
    EXPECT_DOUBLE_EQ(m.value().makespan, 625);
    EXPECT_LE(m.value().peak_tokens, 300u);
}

TEST(Lssp, DegreesAreAlignedBlocks) {
    // Two samples of 800 on 8 replicas, shards of at most 200: degree 4 each, on blocks 0-3
    // and 4-7 (the second block is the less loaded one once the first is taken).
    const std::vector<std::uint64_t> l{800, 800};
    auto p = plan_lssp(l, 8, opts(200, 8));
    ASSERT_TRUE(p) << p.error();
    ASSERT_EQ(p.value().split.size(), 2u);
    EXPECT_EQ(p.value().split[0].degree, 4u);
    EXPECT_EQ(p.value().split[0].first, 0u);
    EXPECT_EQ(p.value().split[1].first, 4u);
    EXPECT_DOUBLE_EQ(p.value().makespan, 200);
    const auto g = p.value().groups();
    EXPECT_EQ(g, (std::set<std::pair<std::uint32_t, std::uint32_t>>{{4, 0}, {4, 4}}));
    // Built on demand: step 1 builds both, step 2 (the same) none, step 3 one new (a block of
    // 8). Built once: 4 blocks of 2, 2 of 4, 1 of 8.
    LsspPlan s3;
    s3.split = {{0, 8, 0}};
    EXPECT_EQ(groups_built_on_demand({p.value(), p.value(), s3}), 3u);
    EXPECT_EQ(groups_prebuilt(8, 8), 7u);
    EXPECT_EQ(groups_prebuilt(8, 1), 0u);
}

TEST(Lssp, PropertiesOnLongTailedSteps) {
    std::mt19937 rng(7);
    std::lognormal_distribution<double> text(5.5, 0.9), audio(8.45, 0.8);
    for (int step = 0; step < 40; ++step) {
        const std::uint32_t replicas = step % 2 ? 16 : 8;
        std::vector<std::uint64_t> l(replicas * 8);
        for (auto &x : l)
            x = rng() % 10 == 0 ? static_cast<std::uint64_t>(audio(rng)) + 1
                                : static_cast<std::uint64_t>(text(rng)) + 1;
        for (auto &x : l) x = std::min<std::uint64_t>(x, 8 * 4096);
        LsspOptions o = opts(4096, 8, 0.05);
        o.cost.quadratic = 1e-4;
        o.cost.sp_latency = 20;
        auto p = plan_lssp(l, replicas, o);
        ASSERT_TRUE(p) << p.error();
        std::vector<int> seen(l.size(), 0);
        for (const auto &s : p.value().split) {
            ++seen[s.position];
            EXPECT_GT(l[s.position], p.value().threshold);
            EXPECT_TRUE(s.degree >= 2 && s.degree <= 8 && !(s.degree & (s.degree - 1))) << s.degree;
            EXPECT_EQ(s.first % s.degree, 0u);
            EXPECT_LE(s.first + s.degree, replicas);
            EXPECT_LE((l[s.position] + s.degree - 1) / s.degree, o.memory_tokens);
        }
        for (const auto &w : p.value().whole)
            for (auto i : w) {
                ++seen[i];
                EXPECT_LE(l[i], p.value().threshold);
                EXPECT_LE(l[i], o.memory_tokens);
            }
        for (std::size_t i = 0; i < l.size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
        EXPECT_LE(p.value().peak_tokens, o.memory_tokens);
        // The makespan is the slowest replica's time, and the replicas' times add up to
        // the model's cost of every sample as placed.
        double total = 0, sum = 0;
        for (const auto &s : p.value().split) total += s.degree * o.cost.time(l[s.position], s.degree);
        for (const auto &w : p.value().whole)
            for (auto i : w) total += o.cost.time(l[i], 1);
        for (double t : p.value().time) sum += t;
        EXPECT_NEAR(sum, total, 1e-6 * total);
        EXPECT_DOUBLE_EQ(p.value().makespan, *std::max_element(p.value().time.begin(), p.value().time.end()));
        // Deterministic.
        auto again = plan_lssp(l, replicas, o);
        ASSERT_TRUE(again);
        EXPECT_EQ(again.value().makespan, p.value().makespan);
        EXPECT_EQ(again.value().whole, p.value().whole);
    }
}

TEST(Lssp, BadInputIsRefusedWithItsName) {
    EXPECT_EQ(plan_lssp({1, 2}, 0, opts(10, 1)).error(), "lssp: 0 replicas; expected at least 1");
    EXPECT_EQ(plan_lssp({1, 2}, 4, opts(0, 1)).error(), "lssp: a memory limit of 0 tokens; expected at least 1");
    EXPECT_EQ(plan_lssp({1, 2}, 4, opts(10, 3)).error(),
              "lssp: largest degree 3: expected a power of two that divides the 4 replicas");
    EXPECT_EQ(plan_lssp({1, 2}, 4, opts(10, 8)).error(),
              "lssp: largest degree 8: expected a power of two that divides the 4 replicas");
    EXPECT_EQ(plan_lssp({1, kMaxCost + 1}, 4, opts(10, 4)).error(),
              "lssp: sample 1 has 1099511627777 tokens; at most 1099511627776");
    // A sample that no allowed split fits in memory (41 over 4: shards of 11 > 10) is split
    // over the largest degree all the same, and counted; a sample of 0 tokens costs nothing.
    using Planner =
        std::function<omni::Result<LsspPlan>(const std::vector<std::uint64_t> &, std::uint32_t, const LsspOptions &)>;
    for (Planner plan :
         {Planner([](auto &l, auto r, auto &o) { return plan_lssp(l, r, o); }), Planner(plan_static_sp)}) {
        auto over = plan({1, 41, 0, 2}, 4, opts(10, 4));
        ASSERT_TRUE(over) << over.error();
        EXPECT_EQ(over.value().over_memory, 1u);
        EXPECT_EQ(over.value().peak_tokens, 11u);
    }
    auto empty = plan_lssp({}, 4, opts(10, 4));
    ASSERT_TRUE(empty) << empty.error();
    EXPECT_EQ(empty.value().makespan, 0);
}

TEST(Lssp, LoadsBeforeArePlannedAround) {
    // Replicas 0 and 1 already hold 100 each (an earlier micro-batch): two samples of 50 go
    // to replicas 2 and 3, and the makespan counts the loads.
    auto p = plan_lssp({50, 50}, 4, opts(1000, 2), {100, 100, 0, 0});
    ASSERT_TRUE(p) << p.error();
    EXPECT_TRUE(p.value().whole[0].empty() && p.value().whole[1].empty());
    EXPECT_EQ(p.value().whole[2].size() + p.value().whole[3].size(), 2u);
    EXPECT_DOUBLE_EQ(p.value().makespan, 100);
    EXPECT_EQ(plan_lssp({1}, 4, opts(10, 2), {1, 2}).error(), "lssp: loads for 2 replicas; expected 4");
    EXPECT_EQ(plan_lssp({1}, 2, opts(10, 2), {1, -2}).error(), "lssp: replica 1's load: expected a finite number >= 0");
}
