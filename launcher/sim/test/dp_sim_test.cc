// omni-sim's data-parallel model (sim/dp_sim.h): its costs are the ledger's samples' costs,
// split as the policy says; the expected values come from a ledger and a workload of the
// test's own, summed here.
#include <gtest/gtest.h>

#include <algorithm>

#include "sim/dp_sim.h"

using namespace omni::sim;
using omni::balance::Policy;
using omni::launcher::BalanceScope;
using omni::workload::Workload;

namespace {

Workload load(const char *name) {
    auto w = omni::workload::Workload::load(name);
    EXPECT_TRUE(w) << w.error();
    return w ? std::move(w).value() : Workload{};
}

DpJob job(Policy p, BalanceScope s = BalanceScope::job) {
    DpJob j;
    j.ledger = {960, 48, 2, 3};
    j.replicas_per_node = 2;
    j.balance = {p, s};
    return j;
}

}  // namespace

TEST(DpSim, UniformSamplesAreBalancedAlready) {
    // Every sample 512 tokens: a replica of 48/d samples costs 48/d * 512 under any policy.
    const Workload w = load("uniform");
    for (Policy p : {Policy::None, Policy::Lpt, Policy::Kk}) {
        auto r = simulate(job(p), w, {4, 2, 1});
        ASSERT_TRUE(r) << r.error();
        const std::uint64_t want[] = {12 * 512, 24 * 512, 48 * 512};
        for (int k = 0; k < 3; ++k) {
            EXPECT_EQ(r.value()[k].slowest, want[k]);
            EXPECT_EQ(r.value()[k].total, 48u * 512);
            EXPECT_DOUBLE_EQ(r.value()[k].imbalance(), 1.0);
            EXPECT_EQ(r.value()[k].step, std::uint64_t(k + 1));
        }
    }
}

TEST(DpSim, NoneIsTheLedgersSplitAndPoliciesKeepTheStep) {
    const Workload w = load("paper");
    const std::vector<std::uint32_t> reps{4, 4, 4, 2, 2, 4, 4, 4, 4, 4};
    auto none = simulate(job(Policy::None), w, reps);
    ASSERT_TRUE(none) << none.error();
    // The ledger's contiguous shares, summed here.
    auto l = omni::launcher::Ledger::create({960, 48, 2, 3}, 4);
    ASSERT_TRUE(l);
    omni::launcher::Ledger ledger = std::move(l).value();
    std::uint64_t slowest_none = 0, slowest_kk = 0;
    auto kk = simulate(job(Policy::Kk), w, reps);
    auto grouped = simulate(job(Policy::Kk, BalanceScope::node), w, reps);
    ASSERT_TRUE(kk && grouped);
    for (std::size_t k = 0; k < reps.size(); ++k) {
        ASSERT_TRUE(ledger.resize(reps[k]));
        std::uint64_t max = 0, total = 0;
        for (std::uint32_t r = 0; r < reps[k]; ++r) {
            auto share = ledger.share(r);
            ASSERT_TRUE(share);
            std::uint64_t sum = 0;
            for (auto i : share.value()) sum += w.cost(3, i, ledger.step(), omni::workload::CostKind::Tokens);
            max = std::max(max, sum);
            total += sum;
        }
        EXPECT_EQ(none.value()[k].slowest, max) << "step " << k + 1;
        EXPECT_EQ(none.value()[k].total, total) << "step " << k + 1;
        EXPECT_EQ(kk.value()[k].total, total) << "step " << k + 1;
        EXPECT_EQ(grouped.value()[k].total, total) << "step " << k + 1;
        EXPECT_EQ(kk.value()[k].replicas, reps[k]);
        // No split beats the mean replica.
        EXPECT_GE(kk.value()[k].slowest * reps[k], total) << "step " << k + 1;
        slowest_none += max;
        slowest_kk += kk.value()[k].slowest;
        ASSERT_TRUE(ledger.commit_step());
    }
    EXPECT_LT(slowest_kk, slowest_none);
    // Deterministic.
    auto again = simulate(job(Policy::Kk), w, reps);
    ASSERT_TRUE(again);
    for (std::size_t k = 0; k < reps.size(); ++k) EXPECT_EQ(again.value()[k].slowest, kk.value()[k].slowest);
}

TEST(DpSim, StepCostsAreTheStepsSamples) {
    const Workload w = load("paper");
    auto c = step_costs(job(Policy::None), w, 3, 4);
    auto s = simulate(job(Policy::None), w, {4, 4, 4});
    ASSERT_TRUE(c && s);
    ASSERT_EQ(c.value().size(), 3u);
    for (std::size_t k = 0; k < 3; ++k) {
        ASSERT_EQ(c.value()[k].size(), 48u);
        std::uint64_t total = 0;
        for (auto x : c.value()[k]) total += x;
        EXPECT_EQ(total, s.value()[k].total) << "step " << k + 1;
    }
}

TEST(DpSim, BadJobsAreRefusedNamingTheStep) {
    const Workload w = load("uniform");
    auto r = simulate(job(Policy::Kk), w, {4, 5});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("step 2: "), std::string::npos) << r.error();
    EXPECT_FALSE(simulate(job(Policy::Kk), w, {0}));
    DpJob j = job(Policy::Kk);
    j.replicas_per_node = 0;
    auto z = simulate(j, w, {4});
    ASSERT_FALSE(z);
    EXPECT_EQ(z.error(), "0 replicas per node");
    auto empty = simulate(job(Policy::Kk), w, {});
    ASSERT_TRUE(empty);
    EXPECT_TRUE(empty.value().empty());
}
