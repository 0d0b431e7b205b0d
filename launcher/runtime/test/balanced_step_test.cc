// Grouped reordering's step plan (runtime/balanced_step.h) without communicators: the
// all-gather's records are built here by hand, as d replicas would send them.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/balanced_step.h"
#include "runtime/runtime.h"

using namespace omni::launcher;
using omni::balance::Policy;

namespace {

// Replica r's record: its key, then the costs of its share [r*m, (r+1)*m) of `costs`.
std::vector<std::uint64_t> gather(const std::vector<std::uint64_t> &keys, const std::vector<std::uint64_t> &costs) {
    const std::size_t d = keys.size(), m = costs.size() / d;
    std::vector<std::uint64_t> out;
    for (std::size_t r = 0; r < d; ++r) {
        out.push_back(keys[r]);
        out.insert(out.end(), costs.begin() + static_cast<std::ptrdiff_t>(r * m),
                   costs.begin() + static_cast<std::ptrdiff_t>((r + 1) * m));
    }
    return out;
}

}  // namespace

TEST(BalancedStep, ParsesPoliciesAndScopes) {
    struct Case {
        const char *text;
        Policy p;
        BalanceScope s;
        const char *name;
    };
    for (const Case &c :
         {Case{"none", Policy::None, BalanceScope::job, "none"}, Case{"lpt", Policy::Lpt, BalanceScope::job, "lpt:job"},
          Case{"kk", Policy::Kk, BalanceScope::job, "kk:job"},
          Case{"grouped", Policy::Kk, BalanceScope::node, "kk:node"},
          Case{"lpt:node", Policy::Lpt, BalanceScope::node, "lpt:node"},
          Case{"kk:job", Policy::Kk, BalanceScope::job, "kk:job"}}) {
        auto o = parse_balance(c.text);
        ASSERT_TRUE(o) << c.text << ": " << o.error();
        EXPECT_EQ(o.value().policy, c.p) << c.text;
        EXPECT_EQ(o.value().scope, c.s) << c.text;
        EXPECT_EQ(balance_name(o.value()), c.name) << c.text;
    }
    for (const char *bad : {"", "greedy", "kk:rack", "kk:", ":node", "grouped:node", "KK"}) {
        auto o = parse_balance(bad);
        ASSERT_FALSE(o) << bad;
        EXPECT_NE(o.error().find("expected none, lpt, kk, grouped"), std::string::npos) << o.error();
        EXPECT_NE(o.error().find(std::string("'") + bad + "'"), std::string::npos) << o.error();
    }
}

TEST(BalancedStep, KkEvensOutTheReplicas) {
    // Samples 100..103 cost 9, 9, 1, 1: the ledger's halves cost 18 and 2; kk gives each
    // replica one 9 and one 1 (10 and 10).
    const std::vector<std::uint64_t> samples{100, 101, 102, 103}, costs{9, 9, 1, 1};
    const auto g = gather({5, 5}, costs);
    auto none = plan_step(samples, g, 2, 0, {Policy::None, BalanceScope::job});
    ASSERT_TRUE(none) << none.error();
    EXPECT_EQ(none.value().samples, (std::vector<std::uint64_t>{100, 101}));
    EXPECT_EQ(none.value().costs, (std::vector<std::uint64_t>{18, 2}));
    EXPECT_DOUBLE_EQ(none.value().imbalance(), 1.8);
    std::vector<std::uint64_t> all;
    for (std::uint32_t r = 0; r < 2; ++r) {
        auto p = plan_step(samples, g, 2, r, {Policy::Kk, BalanceScope::job});
        ASSERT_TRUE(p) << p.error();
        EXPECT_EQ(p.value().costs, (std::vector<std::uint64_t>{10, 10}));
        EXPECT_DOUBLE_EQ(p.value().imbalance(), 1.0);
        ASSERT_EQ(p.value().samples.size(), 2u);
        all.insert(all.end(), p.value().samples.begin(), p.value().samples.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, samples);
}

TEST(BalancedStep, NodeScopeKeepsSamplesOnTheirNode) {
    // Replicas 0 and 1 on node A, 2 and 3 on node B; A's shares hold the heavy samples
    // (9, 9 | 9, 9), B's the light ones (1, 1 | 1, 1). Scope node cannot move any: A's
    // replicas cost 18 each, B's 2. Scope job pairs every 9 with a 1: 10 each.
    const std::vector<std::uint64_t> samples{0, 1, 2, 3, 4, 5, 6, 7}, costs{9, 9, 9, 9, 1, 1, 1, 1};
    const std::uint64_t a = locality_key("nodeA"), b = locality_key("nodeB");
    ASSERT_NE(a, b);
    const auto g = gather({a, a, b, b}, costs);
    for (std::uint32_t r = 0; r < 4; ++r) {
        auto p = plan_step(samples, g, 4, r, {Policy::Kk, BalanceScope::node});
        ASSERT_TRUE(p) << p.error();
        EXPECT_EQ(p.value().costs, (std::vector<std::uint64_t>{18, 18, 2, 2}));
        for (auto i : p.value().samples) EXPECT_EQ(i < 4, r < 2) << "replica " << r << " got sample " << i;
        auto j = plan_step(samples, g, 4, r, {Policy::Kk, BalanceScope::job});
        ASSERT_TRUE(j) << j.error();
        EXPECT_EQ(j.value().costs, (std::vector<std::uint64_t>{10, 10, 10, 10}));
    }
    // The same keys in another order: groups are sets, not runs of replicas.
    const auto g2 = gather({a, b, a, b}, {9, 9, 1, 1, 9, 9, 1, 1});
    for (std::uint32_t r = 0; r < 4; ++r) {
        auto p = plan_step(samples, g2, 4, r, {Policy::Kk, BalanceScope::node});
        ASSERT_TRUE(p) << p.error();
        EXPECT_EQ(p.value().costs, (std::vector<std::uint64_t>{18, 2, 18, 2}));
    }
}

TEST(BalancedStep, BadInputIsRefused) {
    const std::vector<std::uint64_t> samples{1, 2, 3, 4};
    auto short_gather = plan_step(samples, {0, 1, 1}, 2, 0, {Policy::Kk, BalanceScope::job});
    ASSERT_FALSE(short_gather);
    EXPECT_EQ(short_gather.error(), "balance: the all-gather holds 3 values; expected 6");
    EXPECT_FALSE(plan_step(samples, gather({0, 0}, {1, 1, 1, 1}), 2, 2, {Policy::Kk, BalanceScope::job}));
    EXPECT_FALSE(plan_step({1, 2, 3}, gather({0, 0}, {1, 1}), 2, 0, {Policy::Kk, BalanceScope::job}));
    auto rec = plan_record(7, {10, 11}, 3,
                           [](std::uint64_t i, std::uint64_t) { return i == 11 ? omni::balance::kMaxCost + 1 : 1; });
    ASSERT_FALSE(rec);
    EXPECT_EQ(rec.error(),
              "balance: the cost function gave sample 11 (step 3) cost 1099511627777; at most 1099511627776");
    auto ok = plan_record(7, {10, 11}, 3, [](std::uint64_t i, std::uint64_t s) { return i + s; });
    ASSERT_TRUE(ok) << ok.error();
    EXPECT_EQ(ok.value(), (std::vector<std::uint64_t>{7, 13, 14}));
}

TEST(BalancedStep, ARuntimeRefusesStepsTooLargeToBalance) {
    // A standalone rank whose step holds 2^25 samples (b = 1): balancing would gather and sort
    // them all; the first micro-batch says so instead of allocating.
    RuntimeOptions o;
    o.standalone = true;
    auto r = Runtime::create(o);
    ASSERT_TRUE(r) << r.error();
    Runtime &rt = *r.value();
    ASSERT_TRUE(rt.configure_ledger({std::uint64_t(1) << 30, std::uint64_t(1) << 25, 1, 1}));
    ASSERT_TRUE(rt.start());
    ASSERT_TRUE(rt.configure_balance({Policy::Kk, BalanceScope::job}, [](std::uint64_t, std::uint64_t) { return 1; }));
    auto mb = rt.micro_batch(0);
    ASSERT_FALSE(mb);
    EXPECT_EQ(mb.error(), "plan: balancing takes at most 16777216 samples a step; the global batch is 33554432");
    // Without a policy the ledger's own micro-batch comes back.
    ASSERT_TRUE(rt.configure_balance({}, nullptr));
    ASSERT_TRUE(rt.micro_batch(0));
}

TEST(BalancedStep, LsspSplitsTheLongSampleOverTheReplicas) {
    // 12 samples over 4 replicas, sample 5 of 1000 tokens and the rest of 100; LSSP as
    // parse_balance("lssp") sets it (a split sample's exchange 0.1 a token): the 1000 over all
    // 4 replicas (degree 4: 250 + 0.1 * 1000 * 3/4 = 325 each), the eleven 100s least loaded
    // first (3, 3, 3, 2): times 625, 625, 625, 525 in some order.
    std::vector<std::uint64_t> samples(12), costs(12, 100);
    for (std::size_t i = 0; i < 12; ++i) samples[i] = 100 + i;
    costs[5] = 1000;
    auto o = parse_balance("lssp");
    ASSERT_TRUE(o) << o.error();
    EXPECT_EQ(balance_name(o.value()), "lssp");
    const auto g = gather({1, 1, 1, 1}, costs);
    std::vector<std::uint64_t> computed;
    for (std::uint32_t r = 0; r < 4; ++r) {
        auto p = plan_step(samples, g, 4, r, o.value());
        ASSERT_TRUE(p) << p.error();
        EXPECT_TRUE(p.value().lssp);
        std::vector<std::uint64_t> t = p.value().costs;
        std::sort(t.begin(), t.end());
        EXPECT_EQ(t, (std::vector<std::uint64_t>{525, 625, 625, 625}));
        ASSERT_EQ(p.value().shards.size(), 1u) << "replica " << r;
        EXPECT_EQ(p.value().shards[0].index, 105u);
        EXPECT_EQ(p.value().shards[0].degree, 4u);
        EXPECT_EQ(p.value().shards[0].shard, r);
        EXPECT_DOUBLE_EQ(p.value().time, static_cast<double>(p.value().costs[r]));
        computed.insert(computed.end(), p.value().samples.begin(), p.value().samples.end());
    }
    // Each sample computed once: the split one by the replica that leads it.
    std::sort(computed.begin(), computed.end());
    EXPECT_EQ(computed, samples);
    // On 6 replicas the largest degree is 2 (the largest power of two dividing 6).
    std::vector<std::uint64_t> s6(12, 0), c6(12, 100);
    for (std::size_t i = 0; i < 12; ++i) s6[i] = i;
    c6[0] = 1000;
    auto p6 = plan_step(s6, gather({1, 1, 1, 1, 1, 1}, c6), 6, 0, o.value());
    ASSERT_TRUE(p6) << p6.error();
    ASSERT_EQ(p6.value().shards.size(), 1u);
    EXPECT_EQ(p6.value().shards[0].degree, 2u);
}
