// omni-sim's whole-system model (sim/system_sim.h): 1F1B times and memory derived here by hand
// for workloads of one fixed length, the static encoder stage's GPUs counted, samples above
// the memory limit split, and bad configurations refused naming the field.
#include <gtest/gtest.h>

#include <algorithm>

#include "sim/system_sim.h"

using namespace omni::sim;
using omni::workload::Workload;

namespace {

// One modality, every sample `length` long; `enc` encoder cost per unit.
Workload fixed(std::uint64_t length, double enc) {
    const std::string json = R"({"modalities": [{"name": "m", "length": {"fixed": )" + std::to_string(length) +
                             R"(}, "encoder_cost_per_unit": )" + std::to_string(enc) +
                             R"(}], "phases": [{"mix": {"m": 1}}]})";
    auto w = Workload::parse(json);
    EXPECT_TRUE(w) << w.error();
    return w ? std::move(w).value() : Workload{};
}

// No transfer time and a linear cost model.
SystemConfig config(std::uint32_t gpus, std::uint32_t stages, std::uint32_t per_replica, std::uint32_t micro_batches,
                    std::uint32_t steps, std::uint64_t memory, std::uint32_t degree) {
    SystemConfig c;
    c.gpus = gpus;
    c.stages = stages;
    c.per_replica = per_replica;
    c.micro_batches = micro_batches;
    c.steps = steps;
    c.transfer = 0;
    c.lssp.memory_tokens = memory;
    c.lssp.max_degree = degree;
    c.lssp.cost = {1, 0, 0, 0};
    return c;
}

// 16 GPUs as 4 replicas of 4 stages, 8 samples a replica in 4 micro-batches, 3 steps, memory
// for 1000 tokens, degrees up to 2.
SystemConfig small() { return config(16, 4, 8, 4, 3, 1000, 2); }

SystemResult run(const SystemConfig &c, const Workload &w, System s) {
    auto r = simulate_system(c, w, s);
    EXPECT_TRUE(r) << system_name(s) << ": " << r.error();
    return r ? r.value() : SystemResult{};
}

}  // namespace

TEST(SystemSim, EqualSamplesWithoutEncodersAreOneFOneBEverywhere) {
    // Every micro-batch 2 samples of 100 tokens: forward 200/4 = 50 a stage, backward 100;
    // 1F1B takes (M + S - 1)(f + b) = 7 * 150 = 1050 on every replica, under every system.
    // Stage s holds min(S - s, M) micro-batches of 200/4 = 50 tokens at its peak.
    const Workload w = fixed(100, 0);
    for (System s : {System::StaticFirst, System::Multiplex, System::Reorder, System::Omni}) {
        const SystemResult r = run(small(), w, s);
        EXPECT_DOUBLE_EQ(r.step_time, 1050) << system_name(s);
        EXPECT_DOUBLE_EQ(r.imbalance, 1) << system_name(s);
        EXPECT_EQ(r.gpus, 16u);
        EXPECT_EQ(r.split_steps, 0u);
        EXPECT_DOUBLE_EQ(r.throughput(), 32.0 / 1050 / 16);
        ASSERT_EQ(r.peak_memory.size(), 4u);
        for (int g = 0; g < 4; ++g) EXPECT_DOUBLE_EQ(r.peak_memory[g], 50.0 * (4 - g)) << system_name(s);
        EXPECT_DOUBLE_EQ(r.first_stage_memory, 200);
    }
    // An encoder stage with nothing to do still costs its GPUs: E = 1 is the best, 4 x 5 GPUs.
    const SystemResult st = run(small(), w, System::StaticStage);
    EXPECT_EQ(st.encoder_gpus, 1u);
    EXPECT_EQ(st.gpus, 20u);
    EXPECT_DOUBLE_EQ(st.step_time, 1050);
    EXPECT_DOUBLE_EQ(st.throughput(), 32.0 / 1050 / 20);
}

TEST(SystemSim, EncodersOnTheFirstStageHoldTheirActivationsThere) {
    // Encoder cost 1 per token: 200 a micro-batch, forward and backward (trained). On the
    // first stage EF(j) runs before F(0, j), so when F(0, 3) starts the stage holds four
    // micro-batches' encoder activations (4 * 200) and four of the LLM's (4 * 50): 1000.
    // Multiplexing spreads the encoder work: its first stage holds less, and it is faster.
    const Workload w = fixed(100, 1);
    const SystemResult first = run(small(), w, System::StaticFirst);
    const SystemResult multi = run(small(), w, System::Multiplex);
    EXPECT_DOUBLE_EQ(first.first_stage_memory, 1000);
    EXPECT_LT(multi.first_stage_memory, first.first_stage_memory);
    EXPECT_LT(multi.step_time, first.step_time);
    // The LLM alone is 1050; encoder work adds 3 * 200 per micro-batch somewhere.
    EXPECT_GT(first.step_time, 1050 + 3 * 200);
}

TEST(SystemSim, SamplesAboveTheMemoryAreSplit) {
    // 1500 tokens do not fit 1000: every system splits (static: every sample over degree 2;
    // omni: LSSP's threshold), none is above memory at degree 2, so no step is over memory.
    const Workload w = fixed(1500, 0);
    for (System s : {System::StaticFirst, System::Reorder, System::Omni}) {
        const SystemResult r = run(small(), w, s);
        EXPECT_EQ(r.split_steps, 3u) << system_name(s);
        EXPECT_EQ(r.over_memory_steps, 0u);
        // Each replica computes 16 shards of 750 tokens, 4 a micro-batch: 3000 tokens, 750 on
        // each of the 4 stages; the first stage holds 4 micro-batches at its peak.
        EXPECT_DOUBLE_EQ(r.first_stage_memory, 4 * 750.0) << system_name(s);
    }
    // 3000 tokens do not fit even over 2: counted, and run all the same.
    const SystemResult over = run(small(), fixed(3000, 0), System::Omni);
    EXPECT_EQ(over.over_memory_steps, 3u);
}

TEST(SystemSim, SkewedSamplesReorderBetterThanLedgerOrder) {
    // The paper's mix at 64 replicas of 1 stage: the slowest replica under Karmarkar-Karp is
    // never slower than in ledger order, and LSSP lowers the imbalance further.
    auto w = Workload::load("paper");
    ASSERT_TRUE(w) << w.error();
    const SystemConfig c = config(64, 1, 8, 1, 5, 1 << 20, 8);
    const SystemResult multi = run(c, w.value(), System::Multiplex);
    const SystemResult kk = run(c, w.value(), System::Reorder);
    const SystemResult omni = run(c, w.value(), System::Omni);
    EXPECT_LE(kk.step_time, multi.step_time);
    EXPECT_LT(kk.imbalance, multi.imbalance);
    EXPECT_LT(omni.imbalance, kk.imbalance);
    // Deterministic: the same configuration gives the same numbers.
    const SystemResult again = run(c, w.value(), System::Omni);
    EXPECT_EQ(again.step_time, omni.step_time);
    EXPECT_EQ(again.peak_memory, omni.peak_memory);
}

TEST(SystemSim, BadConfigurationsAreRefusedNamingThem) {
    const Workload w = fixed(100, 0);
    const auto err = [&](SystemConfig c) {
        auto r = simulate_system(c, w, System::Omni);
        return r ? std::string() : r.error();
    };
    SystemConfig c = small();
    c.gpus = 18;
    EXPECT_NE(err(c).find("gpus 18: expected a multiple of the stages (4)"), std::string::npos) << err(c);
    c = small();
    c.gpus = 12;  // 3 replicas, degree 2
    EXPECT_NE(err(c).find("expected a multiple of the largest degree (2)"), std::string::npos) << err(c);
    c = small();
    c.per_replica = 2;
    EXPECT_NE(err(c).find("samples per replica 2: expected at least the micro-batches (4)"), std::string::npos);
    c = small();
    c.steps = 0;
    EXPECT_NE(err(c).find("steps 0"), std::string::npos);
    c = small();
    c.stages = 0;
    EXPECT_NE(err(c).find("stages 0"), std::string::npos);
    EXPECT_FALSE(parse_system("megatron"));
    EXPECT_NE(parse_system("megatron").error().find("expected static-first"), std::string::npos);
    for (System s : {System::StaticFirst, System::StaticStage, System::Multiplex, System::Reorder, System::Omni})
        EXPECT_EQ(parse_system(system_name(s)).value(), s);
}
