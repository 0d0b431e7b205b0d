// Encoder work in the LLM pipeline (balance/insertion.h): worked 1F1B examples whose times are
// derived here by hand, the planner's invariants (every op once, dependencies kept, no
// overlap) on random costs, and a broken schedule caught by the checker.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "balance/insertion.h"

using namespace omni::balance;

namespace {

PipelineSpec pipe(std::uint32_t S, std::uint32_t M, double f, double b, double transfer = 0) {
    PipelineSpec p;
    p.stages = S;
    p.micro_batches = M;
    p.forward.assign(S, f);
    p.backward.assign(S, b);
    p.transfer = transfer;
    return p;
}

EncoderWork enc(std::uint32_t M, double f, double b) {
    EncoderWork e;
    e.forward.assign(M, f);
    e.backward.assign(M, b);
    return e;
}

Schedule ok(const PipelineSpec &p, const EncoderWork &e, Insertion how) {
    auto s = schedule(p, e, how);
    EXPECT_TRUE(s) << s.error();
    if (!s) return {};
    auto c = check_schedule(s.value(), p, e, how);
    EXPECT_TRUE(c) << insertion_name(how) << ": " << c.error();
    return s.value();
}

}  // namespace

TEST(Insertion, WorkedOneFOneB) {
    // 4 stages, 8 micro-batches, forward 1, backward 2: 1F1B takes (M + S - 1)(f + b) = 33,
    // and its bubble is (S - 1) / (M + S - 1) = 3/11.
    const auto p = pipe(4, 8, 1, 2);
    const auto e = enc(8, 1, 0);  // frozen encoders, 1 per micro-batch
    const Schedule none = ok(p, e, Insertion::None);
    EXPECT_DOUBLE_EQ(none.makespan, 33);
    EXPECT_NEAR(none.bubble(), 3.0 / 11, 1e-12);
    // Front: the 8 encoder forwards (8) before stage 0's first LLM work shift it all: 41.
    const Schedule front = ok(p, e, Insertion::Front);
    EXPECT_DOUBLE_EQ(front.makespan, 41);
    // An encoder stage: 5 stages, its forwards back to back, the LLM one step behind: 34, on
    // 5 GPUs.
    const Schedule stage = ok(p, e, Insertion::EncoderStage);
    EXPECT_DOUBLE_EQ(stage.makespan, 34);
    EXPECT_EQ(stage.gpus, 5u);
    // Uniform: only the first encoder forward delays the pipeline (nothing can run before
    // it); the others fill the later stages' start-up idle time: 34 on 4 GPUs, and the
    // bubble falls below the LLM's own, since the idle time now holds encoder work.
    const Schedule uni = ok(p, e, Insertion::Uniform);
    EXPECT_DOUBLE_EQ(uni.makespan, 34);
    EXPECT_EQ(uni.gpus, 4u);
    EXPECT_LT(uni.bubble(), none.bubble());
    int off_stage_0 = 0;
    for (std::uint32_t g = 1; g < 4; ++g)
        for (const Op &o : uni.stages[g]) off_stage_0 += o.kind == OpKind::EncoderForward;
    EXPECT_GT(off_stage_0, 0) << "uniform put every encoder forward on stage 0";
}

TEST(Insertion, TrainableEncodersGoAfterTheirBackward) {
    // With encoder backwards (2 each), every layout keeps EB(j) after B(0, j).
    const auto p = pipe(3, 6, 1, 2, 0.25);
    const auto e = enc(6, 1, 2);
    for (Insertion how : {Insertion::Front, Insertion::EncoderStage, Insertion::Uniform}) {
        const Schedule s = ok(p, e, how);
        int eb = 0;
        for (const auto &st : s.stages)
            for (const Op &o : st) eb += o.kind == OpKind::EncoderBackward;
        EXPECT_EQ(eb, 6) << insertion_name(how);
    }
}

TEST(Insertion, InvariantsOnRandomCosts) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(0.2, 3);
    for (int round = 0; round < 60; ++round) {
        const std::uint32_t S = 1 + rng() % 8, M = 1 + rng() % 24;
        PipelineSpec p = pipe(S, M, 1, 2, round % 3 ? 0.1 : 0);
        for (std::uint32_t s = 0; s < S; ++s) {
            p.forward[s] = u(rng);
            p.backward[s] = 2 * p.forward[s];
        }
        EncoderWork e = enc(M, 0, 0);
        for (std::uint32_t j = 0; j < M; ++j) {
            e.forward[j] = u(rng) * (rng() % 4 == 0 ? 4 : 1);  // a long-tailed mix
            e.backward[j] = round % 2 ? 2 * e.forward[j] : 0;
        }
        if (round % 4 == 3) {  // micro-batches of different sizes
            p.weight.resize(M);
            for (double &w : p.weight) w = u(rng);
        }
        const Schedule none = ok(p, e, Insertion::None);
        const Schedule front = ok(p, e, Insertion::Front);
        const Schedule uni = ok(p, e, Insertion::Uniform);
        ok(p, e, Insertion::EncoderStage);
        ok(p, e, Insertion::FirstStage);
        // Encoder work only adds: nothing beats the LLM alone; and spreading it over the
        // stages is never worse than running it all in front on stage 0 by more than a bit
        // of transfer.
        EXPECT_GE(uni.makespan + 1e-9, none.makespan);
        EXPECT_LE(uni.makespan, front.makespan + p.transfer * M + 1e-9) << "S=" << S << " M=" << M;
    }
}

TEST(Insertion, TheCheckerCatchesBrokenSchedules) {
    const auto p = pipe(2, 3, 1, 2);
    const auto e = enc(3, 1, 0);
    Schedule s = ok(p, e, Insertion::Uniform);
    Schedule early = s;
    for (auto &st : early.stages)
        for (auto &o : st)
            if (o.kind == OpKind::Forward && o.micro == 2) {
                o.end -= o.start;
                o.start = 0;
            }
    EXPECT_FALSE(check_schedule(early, p, e, Insertion::Uniform));
    Schedule missing = s;
    for (auto &st : missing.stages)
        st.erase(std::remove_if(st.begin(), st.end(),
                                [](const Op &o) { return o.kind == OpKind::EncoderForward && o.micro == 1; }),
                 st.end());
    auto c = check_schedule(missing, p, e, Insertion::Uniform);
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().find("F(1)"), std::string::npos) << c.error();
    Schedule twice = s;
    twice.stages[0].push_back(twice.stages[0].back());
    EXPECT_FALSE(check_schedule(twice, p, e, Insertion::Uniform));
}

TEST(Insertion, BadSpecsAreRefusedNamingThem) {
    const auto e = enc(4, 1, 0);
    EXPECT_EQ(schedule(pipe(0, 4, 1, 2), e, Insertion::Uniform).error(), "insertion: 0 stages; expected 1..1024");
    EXPECT_EQ(schedule(pipe(2, 3, 1, 2), e, Insertion::Uniform).error(),
              "insertion: encoder times for 4 and 4 micro-batches; expected 3");
    auto p = pipe(2, 4, 1, 2);
    p.forward[1] = -1;
    EXPECT_EQ(schedule(p, e, Insertion::Uniform).error(), "insertion: stage 1's times: expected finite numbers >= 0");
    EXPECT_EQ(parse_insertion("sideways").error(),
              "insertion 'sideways': expected none, front, first-stage, encoder-stage or uniform");
    p = pipe(2, 4, 1, 2);
    p.weight = {1, 1, 1};
    EXPECT_EQ(schedule(p, e, Insertion::Uniform).error(), "insertion: weights for 3 micro-batches; expected 4");
    p.weight = {1, 1, -2, 1};
    EXPECT_EQ(schedule(p, e, Insertion::Uniform).error(),
              "insertion: micro-batch 2's weight: expected a finite number in [0, 1e12]");
    EXPECT_EQ(parse_insertion("encoder-stage").value(), Insertion::EncoderStage);
    // The JSON names every op once.
    const Schedule s = ok(pipe(2, 2, 1, 2), enc(2, 1, 0), Insertion::Uniform);
    const std::string j = s.to_json();
    EXPECT_NE(j.find("\"gpus\": 2"), std::string::npos) << j;
    std::size_t ops = 0;
    for (std::size_t at = j.find("\"op\""); at != std::string::npos; at = j.find("\"op\"", at + 1)) ++ops;
    EXPECT_EQ(ops, 2u * 2 * 2 + 2);
}

TEST(Insertion, WeightsFirstStageAndMemoryWorkedByHand) {
    // One stage, weights 1 and 3 (f 1, b 2): F0 B0 F1 B1 back to back, 1 + 2 + 3 + 6 = 12.
    auto one = pipe(1, 2, 1, 2);
    one.weight = {1, 3};
    EXPECT_DOUBLE_EQ(ok(one, enc(2, 0, 0), Insertion::None).makespan, 12);
    // Two stages, two micro-batches, frozen encoders of 1 as part of stage 0:
    //   stage 0: EF0 0-1, F0 1-2, EF1 2-3, F1 3-4, B0 5-7 (after B(1, 0)), B1 8-10;
    //   stage 1: F0 2-3, B0 3-5, F1 5-6, B1 6-8.
    const auto p = pipe(2, 2, 1, 2);
    const Schedule first = ok(p, enc(2, 1, 0), Insertion::FirstStage);
    EXPECT_DOUBLE_EQ(first.makespan, 10);
    ASSERT_EQ(first.stages[0].size(), 6u);
    EXPECT_EQ(first.stages[0][2].kind, OpKind::EncoderForward);
    EXPECT_DOUBLE_EQ(first.stages[0][4].start, 5);
    // Memory, LLM activations 1 a stage: stage 0 holds both micro-batches from F1's start (3)
    // to B0's end (7), stage 1 one at a time; the frozen encoders' activations (4 each) live
    // only during their forward, so stage 0's peak is the 4 of EF1 over F0's 1 until F1.
    auto peak = peak_memory(first, {1, 1}, {4, 4});
    ASSERT_TRUE(peak) << peak.error();
    EXPECT_EQ(peak.value(), (std::vector<double>{5, 1}));
    // Trained encoders (backward 2) hold theirs to their backward's end: EF0's 4 and EF1's 4
    // with both LLM micro-batches, 10, on stage 0.
    const Schedule trained = ok(p, enc(2, 1, 2), Insertion::FirstStage);
    peak = peak_memory(trained, {1, 1}, {4, 4});
    ASSERT_TRUE(peak) << peak.error();
    EXPECT_EQ(peak.value(), (std::vector<double>{10, 1}));
    EXPECT_FALSE(peak_memory(trained, {1}, {4, 4}));
    // Uniform insertion runs every encoder backward where its forward ran.
    const Schedule uni = ok(pipe(4, 8, 1, 2), enc(8, 1, 2), Insertion::Uniform);
    std::vector<int> ef(8, -1), eb(8, -2);
    for (int g = 0; g < 4; ++g)
        for (const Op &o : uni.stages[g]) {
            if (o.kind == OpKind::EncoderForward) ef[o.micro] = g;
            if (o.kind == OpKind::EncoderBackward) eb[o.micro] = g;
        }
    EXPECT_EQ(ef, eb);
}
