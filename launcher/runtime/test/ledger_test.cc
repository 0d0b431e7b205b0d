// Ledger: GA derivation, the epoch permutation, DP-size independence, exactly-once
// consumption across resizes, serialisation. Expected values are worked out by hand or by an
// independent Python implementation of the documented permutation (values noted inline).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "runtime/ledger.h"

using namespace omni::launcher;

TEST(GradAccum, DerivedFromGlobalBatch) {
    EXPECT_EQ(derive_grad_accum(64, 4, 4).value(), 4u);   // 64 / (4*4)
    EXPECT_EQ(derive_grad_accum(64, 4, 16).value(), 1u);  // 64 / (4*16)
    EXPECT_EQ(derive_grad_accum(96, 2, 3).value(), 16u);  // 96 / (2*3)
    auto bad = derive_grad_accum(64, 4, 3);                // 64 / 12 is not integral
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("64"), std::string::npos) << bad.error();
    EXPECT_NE(bad.error().find("12"), std::string::npos) << bad.error();
    EXPECT_FALSE(derive_grad_accum(64, 128, 1));  // b > B
    EXPECT_FALSE(derive_grad_accum(0, 1, 1));
    EXPECT_FALSE(derive_grad_accum(8, 0, 1));
    EXPECT_FALSE(derive_grad_accum(8, 1, 0));
}

TEST(Permutation, IsABijectionForAwkwardSizes) {
    for (std::uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 1000ull, 4097ull, 65536ull}) {
        Permutation p(n, 12345, 3);
        std::vector<std::uint64_t> out(n);
        for (std::uint64_t i = 0; i < n; ++i) out[i] = p(i);
        std::sort(out.begin(), out.end());
        for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i) << "n=" << n;
    }
}

TEST(Permutation, PinnedOrder) {
    // From an independent Python implementation of the documented Feistel construction; a
    // change here would make old checkpoints replay a different sample order.
    const std::vector<std::uint64_t> e0 = {1, 3, 8, 2, 7, 9, 5, 4, 6, 0};  // n=10 seed=42 epoch=0
    const std::vector<std::uint64_t> e1 = {3, 9, 5, 6, 2, 8, 0, 7, 1, 4};  // epoch=1
    const std::vector<std::uint64_t> s7 = {1, 6, 9, 4, 7, 5, 2, 8, 0, 3};  // seed=7 epoch=0
    for (std::uint64_t i = 0; i < 10; ++i) {
        EXPECT_EQ(Permutation(10, 42, 0)(i), e0[i]);
        EXPECT_EQ(Permutation(10, 42, 1)(i), e1[i]);
        EXPECT_EQ(Permutation(10, 7, 0)(i), s7[i]);
    }
    Permutation big(1000003, 1, 0);
    EXPECT_EQ(big(0), 326460u);
    EXPECT_EQ(big(1), 592139u);
    EXPECT_EQ(big(1000002), 220003u);
}

TEST(Ledger, HandWorkedSmallCase) {
    // D=10, seed 42 (epoch orders above), B=4, b=1, DP=2 -> GA=2.
    auto l = Ledger::create({10, 4, 1, 42}, 2);
    ASSERT_TRUE(l) << l.error();
    Ledger &led = l.value();
    EXPECT_EQ(led.grad_accum(), 2u);
    // Step 0 = positions 0..3 = epoch-0 order [1,3,8,2]; rank 0 owns [1,3], rank 1 owns [8,2].
    EXPECT_EQ(led.micro_batch(0, 0).value(), std::vector<std::uint64_t>{1});
    EXPECT_EQ(led.micro_batch(0, 1).value(), std::vector<std::uint64_t>{3});
    EXPECT_EQ(led.micro_batch(1, 0).value(), std::vector<std::uint64_t>{8});
    EXPECT_EQ(led.micro_batch(1, 1).value(), std::vector<std::uint64_t>{2});
    ASSERT_TRUE(led.commit_step());
    ASSERT_TRUE(led.commit_step());
    // Step 2 = positions 8..11: the last two of epoch 0 ([6,0]) then the first two of
    // epoch 1 ([3,9]).
    EXPECT_EQ(led.step_samples(), (std::vector<std::uint64_t>{6, 0, 3, 9}));
    EXPECT_EQ(led.epoch(), 0u);
    EXPECT_EQ(led.consumed_in_epoch(), 8u);
    ASSERT_TRUE(led.resize(4));  // GA = 4 / (1*4) = 1
    EXPECT_EQ(led.grad_accum(), 1u);
    EXPECT_EQ(led.micro_batch(2, 0).value(), std::vector<std::uint64_t>{3});
    ASSERT_TRUE(led.commit_step());
    EXPECT_EQ(led.epoch(), 1u);
    EXPECT_EQ(led.consumed_in_epoch(), 2u);
}

TEST(Ledger, RangeErrors) {
    auto led = Ledger::create({1000, 48, 2, 1}, 4).value();  // GA 6
    EXPECT_FALSE(led.micro_batch(4, 0));
    EXPECT_FALSE(led.micro_batch(0, 6));
    EXPECT_TRUE(led.micro_batch(3, 5));
    EXPECT_FALSE(Ledger::create({0, 48, 2, 1}, 4));
    EXPECT_FALSE(Ledger::create({1000, 48, 2, 1}, 5));  // 48 % 10 != 0
    // A failed resize leaves the ledger as it was.
    auto st = led.resize(5);
    EXPECT_FALSE(st);
    EXPECT_EQ(led.dp_size(), 4u);
    EXPECT_EQ(led.grad_accum(), 6u);
}

TEST(Ledger, ResumeAsKeepsTheDataOrderAndTakesTheRunsMicroBatch) {
    // The hand-worked case above after two steps: step 2 is positions 8..11 = [6,0,3,9].
    auto saved = Ledger::create({10, 4, 1, 42}, 2).value();
    ASSERT_TRUE(saved.commit_step());
    ASSERT_TRUE(saved.commit_step());
    auto l = Ledger::load(saved.serialise());
    ASSERT_TRUE(l) << l.error();
    Ledger &led = l.value();
    // Resumed by a run with b=2 at DP 1: GA = 4 / (2*1) = 2, the same samples in the same order.
    ASSERT_TRUE(led.resume_as({10, 4, 2, 42}, 1));
    EXPECT_EQ(led.config().micro_batch, 2u);
    EXPECT_EQ(led.dp_size(), 1u);
    EXPECT_EQ(led.grad_accum(), 2u);
    EXPECT_EQ(led.step(), 2u);
    EXPECT_EQ(led.micro_batch(0, 0).value(), (std::vector<std::uint64_t>{6, 0}));
    EXPECT_EQ(led.micro_batch(0, 1).value(), (std::vector<std::uint64_t>{3, 9}));

    // Another data order is refused, naming the field and both values; the ledger is kept.
    const struct {
        LedgerConfig cfg;
        const char *message;
    } bad[] = {{{11, 4, 2, 42}, "dataset size is 10, this run's 11"},
               {{10, 8, 2, 42}, "global batch is 4, this run's 8"},
               {{10, 4, 2, 43}, "seed is 42, this run's 43"},
               {{10, 4, 3, 42}, "not a multiple of micro-batch 3"}};
    for (const auto &b : bad) {
        auto st = led.resume_as(b.cfg, 1);
        ASSERT_FALSE(st) << b.message;
        EXPECT_NE(st.error().find(b.message), std::string::npos) << st.error();
        EXPECT_EQ(led.config().micro_batch, 2u);
        EXPECT_EQ(led.grad_accum(), 2u);
        EXPECT_EQ(led.dp_size(), 1u);
    }
}

// Concatenating rank 0's micro-batches, then rank 1's, ... gives the step in stream order.
static std::vector<std::uint64_t> gather_step(const Ledger &led) {
    std::vector<std::uint64_t> all;
    for (std::uint32_t r = 0; r < led.dp_size(); ++r)
        for (std::uint32_t m = 0; m < led.grad_accum(); ++m) {
            auto mb = led.micro_batch(r, m).value();
            EXPECT_EQ(mb.size(), led.config().micro_batch);
            all.insert(all.end(), mb.begin(), mb.end());
        }
    return all;
}

TEST(Ledger, SamplesOfAStepDoNotDependOnDpSize) {
    const LedgerConfig cfg{1000, 48, 2, 99};
    auto ref = Ledger::create(cfg, 1).value();  // one rank, GA 24
    for (std::uint32_t d : {2u, 3u, 4u, 6u, 8u, 12u, 24u}) {
        auto led = Ledger::create(cfg, d).value();
        auto r = ref;
        for (int s = 0; s < 30; ++s) {  // crosses the end of epoch 0 at step 20.8
            ASSERT_EQ(gather_step(led), gather_step(r)) << "DP " << d << " step " << s;
            ASSERT_TRUE(led.commit_step());
            ASSERT_TRUE(r.commit_step());
        }
    }
}

TEST(Ledger, EverySampleOnceAcrossResizes) {
    // D=1000, B=48, b=2: DP may be any divisor of 24. Resize at random boundaries and check
    // that epochs 0, 1 and 2 are each consumed exactly once. The test tracks the stream
    // position itself (48 per step) to attribute samples to epochs.
    const LedgerConfig cfg{1000, 48, 2, 2024};
    const std::vector<std::uint32_t> sizes = {1, 2, 3, 4, 6, 8, 12, 24};
    std::mt19937 rng(7);
    auto led = Ledger::create(cfg, 4).value();
    std::map<std::uint64_t, std::vector<int>> seen;  // epoch -> count per sample
    std::uint64_t position = 0;
    std::set<std::uint32_t> used_sizes;
    while (position < 3 * 1000) {
        if (rng() % 3 == 0) {
            ASSERT_TRUE(led.resize(sizes[rng() % sizes.size()]));
        }
        used_sizes.insert(led.dp_size());
        for (auto idx : gather_step(led)) {
            auto &counts = seen[position / 1000];
            counts.resize(1000);
            ASSERT_LT(idx, 1000u);
            counts[idx]++;
            ++position;
        }
        ASSERT_TRUE(led.commit_step());
    }
    EXPECT_GE(used_sizes.size(), 5u);  // the walk really changed size
    for (std::uint64_t e = 0; e < 3; ++e)
        for (std::uint64_t i = 0; i < 1000; ++i)
            ASSERT_EQ(seen[e][i], 1) << "epoch " << e << " sample " << i;
    // 63 steps * 48 = 3024 positions: 24 samples of epoch 3, all distinct.
    EXPECT_EQ(position, 3024u);
    EXPECT_EQ(std::count(seen[3].begin(), seen[3].end(), 1), 24);
    EXPECT_EQ(led.epoch(), 3u);
    EXPECT_EQ(led.consumed_in_epoch(), 24u);
}

TEST(Ledger, DifferentSeedsDifferentOrders) {
    auto a = Ledger::create({1000, 48, 2, 1}, 1).value();
    auto b = Ledger::create({1000, 48, 2, 2}, 1).value();
    EXPECT_NE(a.step_samples(), b.step_samples());
}

TEST(Ledger, SerialiseAndLoad) {
    auto led = Ledger::create({1000, 48, 2, 5}, 4).value();
    for (int i = 0; i < 23; ++i) ASSERT_TRUE(led.commit_step());
    ASSERT_TRUE(led.resize(6));
    auto text = led.serialise();
    auto back = Ledger::load(text);
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back.value().step(), 23u);
    EXPECT_EQ(back.value().dp_size(), 6u);
    EXPECT_EQ(back.value().grad_accum(), 4u);  // 48 / (2*6)
    EXPECT_EQ(back.value().epoch(), 1u);       // 23*48 = 1104
    EXPECT_EQ(back.value().consumed_in_epoch(), 104u);
    EXPECT_EQ(gather_step(back.value()), gather_step(led));
    EXPECT_EQ(back.value().serialise(), text);
}

static std::string replace(std::string s, const std::string &from, const std::string &to) {
    auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    if (pos != std::string::npos) s.replace(pos, from.size(), to);
    return s;
}

TEST(Ledger, LoadRejectsBadState) {
    auto led = Ledger::create({1000, 48, 2, 5}, 4).value();
    for (int i = 0; i < 23; ++i) ASSERT_TRUE(led.commit_step());
    const std::string text = led.serialise();
    ASSERT_TRUE(Ledger::load(text));
    EXPECT_FALSE(Ledger::load(""));
    EXPECT_FALSE(Ledger::load("[]"));
    EXPECT_FALSE(Ledger::load("{\"format\":\"omni-ledger\"}"));
    EXPECT_FALSE(Ledger::load(replace(text, "\"version\":1", "\"version\":2")));
    EXPECT_FALSE(Ledger::load(replace(text, "feistel6-splitmix64", "mt19937")));
    EXPECT_FALSE(Ledger::load(replace(text, "\"step\":23", "\"step\":24")));   // epoch fields disagree
    EXPECT_FALSE(Ledger::load(replace(text, "\"dp_size\":4", "\"dp_size\":5")));  // GA not integral
    EXPECT_FALSE(Ledger::load(replace(text, "\"dp_size\":4", "\"dp_size\":-4")));
    EXPECT_FALSE(Ledger::load(replace(text, "\"seed\":5", "\"seed\":\"5\"")));
    EXPECT_FALSE(Ledger::load(std::string(5000, ' ')));
    auto err = Ledger::load(replace(text, "\"micro_batch\":2,", ""));
    ASSERT_FALSE(err);
    EXPECT_NE(err.error().find("micro_batch"), std::string::npos) << err.error();
}
