// The rank's environment contract (runtime/env.h) and the hand-off building blocks that need
// no network (ranges, header encoding).
#include <gtest/gtest.h>

#include <map>

#include "runtime/env.h"
#include "runtime/handoff.h"

using namespace omni::launcher;

namespace {

const std::string kSecret(64, 'f');

struct Env {
    std::map<std::string, std::string> vars;
    EnvLookup lookup() const {
        return [this](const char *n) -> const char * {
            auto it = vars.find(n);
            return it == vars.end() ? nullptr : it->second.c_str();
        };
    }
};

Env coordinated() {
    Env e;
    e.vars["OMNI_COORD_ADDR"] = "tcp://127.0.0.1:5555";
    e.vars["OMNI_COORD_SECRET"] = kSecret;
    return e;
}

ProcessIdentity pmix(std::uint32_t rank, std::uint32_t size) { return {rank, size, true}; }

}  // namespace

TEST(RuntimeEnv, NothingSetIsStandalone) {
    Env e;
    auto o = runtime_options_from_env(e.lookup(), ProcessIdentity{});
    ASSERT_TRUE(o) << o.error();
    EXPECT_TRUE(o.value().standalone);
}

TEST(RuntimeEnv, SeveralProcessesNeedACoordinator) {
    Env e;
    auto o = runtime_options_from_env(e.lookup(), pmix(1, 4));
    ASSERT_FALSE(o);
    EXPECT_NE(o.error().find("OMNI_COORD_ADDR"), std::string::npos) << o.error();
}

TEST(RuntimeEnv, ExplicitUnitAndSlotWin) {
    Env e = coordinated();
    e.vars["OMNI_UNIT_SIZE"] = "4";
    e.vars["OMNI_UNIT_ID"] = "7";
    e.vars["OMNI_UNIT_SLOT"] = "3";
    auto o = runtime_options_from_env(e.lookup(), pmix(0, 8));
    ASSERT_TRUE(o) << o.error();
    EXPECT_FALSE(o.value().standalone);
    EXPECT_EQ(o.value().unit, 7u);
    EXPECT_EQ(o.value().slot, 3u);
    EXPECT_EQ(o.value().unit_size, 4u);
    EXPECT_EQ(o.value().endpoint, "tcp://127.0.0.1:5555");
    EXPECT_EQ(o.value().secret, kSecret);
    EXPECT_EQ(o.value().gloo_host, "127.0.0.1");  // the route to the coordinator
    EXPECT_EQ(o.value().member_id.rfind("u7s3-", 0), 0u) << o.value().member_id;
}

TEST(RuntimeEnv, UnitDerivedFromThePmixRankAndBase) {
    Env e = coordinated();
    e.vars["OMNI_UNIT_SIZE"] = "4";
    e.vars["OMNI_UNIT_BASE"] = "10";
    auto o = runtime_options_from_env(e.lookup(), pmix(6, 8));  // 6 = unit 1, slot 2 of step
    ASSERT_TRUE(o) << o.error();
    EXPECT_EQ(o.value().unit, 11u);
    EXPECT_EQ(o.value().slot, 2u);
    // Without PMIx, SLURM_PROCID is the step rank.
    e.vars["SLURM_PROCID"] = "5";
    auto p = runtime_options_from_env(e.lookup(), ProcessIdentity{});
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p.value().unit, 11u);
    EXPECT_EQ(p.value().slot, 1u);
}

TEST(RuntimeEnv, BadValuesAreNamed) {
    Env e = coordinated();
    e.vars["OMNI_UNIT_ID"] = "3";
    auto half = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(half);
    EXPECT_NE(half.error().find("OMNI_UNIT_SLOT"), std::string::npos) << half.error();
    e.vars["OMNI_UNIT_SLOT"] = "1";  // unit size 1: slot 1 is out of range
    auto slot = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(slot);
    EXPECT_NE(slot.error().find("OMNI_UNIT_SLOT"), std::string::npos) << slot.error();
    e.vars["OMNI_UNIT_SLOT"] = "0";
    e.vars["OMNI_MEMBER_ID"] = "bad id!";
    auto id = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(id);
    EXPECT_NE(id.error().find("OMNI_MEMBER_ID"), std::string::npos) << id.error();
    e.vars.erase("OMNI_MEMBER_ID");
    e.vars["OMNI_COMM_BACKEND"] = "mpi";
    auto be = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(be);
    EXPECT_NE(be.error().find("OMNI_COMM_BACKEND"), std::string::npos) << be.error();
    e.vars.erase("OMNI_COMM_BACKEND");
    e.vars["OMNI_GLOO_HOST"] = "node1";
    auto gh = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(gh);
    EXPECT_NE(gh.error().find("OMNI_GLOO_HOST"), std::string::npos) << gh.error();
    e.vars["OMNI_GLOO_HOST"] = "10.1.2.3";
    e.vars["OMNI_COMM_TIMEOUT_MS"] = "0";
    auto to = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(to);
    EXPECT_NE(to.error().find("OMNI_COMM_TIMEOUT_MS"), std::string::npos) << to.error();
    e.vars.erase("OMNI_COMM_TIMEOUT_MS");
    e.vars["OMNI_SAME_HOST_COPY"] = "yes";
    auto sh = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(sh);
    EXPECT_NE(sh.error().find("OMNI_SAME_HOST_COPY"), std::string::npos) << sh.error();
    e.vars.erase("OMNI_SAME_HOST_COPY");
    e.vars["OMNI_MP_WIREUP"] = "mpi";
    auto wu = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_FALSE(wu);
    EXPECT_NE(wu.error().find("OMNI_MP_WIREUP"), std::string::npos) << wu.error();
    e.vars["OMNI_MP_WIREUP"] = "coordinator";
    auto coordinator = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_TRUE(coordinator) << coordinator.error();
    EXPECT_EQ(coordinator.value().mp_wireup, "coordinator");
    e.vars.erase("OMNI_MP_WIREUP");
    auto ok = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_TRUE(ok) << ok.error();
    EXPECT_EQ(ok.value().gloo_host, "10.1.2.3");
    EXPECT_TRUE(ok.value().same_host_copy);
    EXPECT_EQ(ok.value().mp_wireup, "auto");
    e.vars["OMNI_SAME_HOST_COPY"] = "0";
    auto off = runtime_options_from_env(e.lookup(), pmix(0, 2));
    ASSERT_TRUE(off) << off.error();
    EXPECT_FALSE(off.value().same_host_copy);
}

TEST(RuntimeEnv, SecretIsRequiredWithACoordinator) {
    Env e;
    e.vars["OMNI_COORD_ADDR"] = "tcp://127.0.0.1:5555";
    e.vars["OMNI_JOB_DIR"] = "/nonexistent/omni-job";
    auto o = runtime_options_from_env(e.lookup(), pmix(0, 1));
    ASSERT_FALSE(o);
    e.vars["OMNI_COORD_SECRET"] = "short";
    auto bad = runtime_options_from_env(e.lookup(), pmix(0, 1));
    ASSERT_FALSE(bad);
}

TEST(RuntimeEnv, JobOptionsAndModelParallelSize) {
    Env e = coordinated();
    e.vars["OMNI_GLOBAL_BATCH"] = "48";
    e.vars["OMNI_MICRO_BATCH"] = "2";
    auto o = runtime_options_from_env(e.lookup(), pmix(0, 1));
    ASSERT_TRUE(o) << o.error();
    EXPECT_EQ(o.value().job.global_batch.value_or(0), 48u);
    EXPECT_EQ(o.value().job.micro_batch.value_or(0), 2u);
    e.vars["OMNI_UNIT_SIZE"] = "4";
    e.vars["OMNI_MP"] = "2";
    auto mp = runtime_options_from_env(e.lookup(), pmix(0, 1));
    ASSERT_TRUE(mp) << mp.error();
    EXPECT_EQ(mp.value().mp, 2u);
    EXPECT_TRUE(mp.value().process.from_pmix);
    // M must divide the unit: 3 ranks of a model-parallel group would straddle two units.
    e.vars["OMNI_MP"] = "3";
    auto bad = runtime_options_from_env(e.lookup(), pmix(0, 1));
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("mp=3"), std::string::npos) << bad.error();
}

TEST(RuntimeHandoff, RangesAreContiguousAndBalanced) {
    // 10 over 4: 3, 3, 2, 2 (lower ranks take the larger ones).
    EXPECT_EQ(zero1_range(10, 0, 4), (ShardRange{0, 3}));
    EXPECT_EQ(zero1_range(10, 1, 4), (ShardRange{3, 6}));
    EXPECT_EQ(zero1_range(10, 2, 4), (ShardRange{6, 8}));
    EXPECT_EQ(zero1_range(10, 3, 4), (ShardRange{8, 10}));
    EXPECT_EQ(zero1_range(2, 3, 4), (ShardRange{2, 2}));  // more ranks than elements
}

TEST(RuntimeHandoff, HeaderRoundTripsAndRejectsJunk) {
    HandoffHeader h;
    h.step = 12;
    h.generation = 3;
    h.params = 1001;
    h.shard_lengths = {1001, 1001};
    h.has_ledger = true;
    h.ledger = "{\"x\":1}";
    auto d = decode_header(encode_header(h));
    ASSERT_TRUE(d) << d.error();
    EXPECT_EQ(d.value().step, 12u);
    EXPECT_EQ(d.value().shard_lengths, h.shard_lengths);
    EXPECT_EQ(d.value().ledger, h.ledger);
    EXPECT_FALSE(decode_header("{"));
    EXPECT_FALSE(decode_header("{\"step\":-1,\"generation\":1,\"params\":1,\"shards\":[],\"ledger\":null}"));
    std::string many = "{\"step\":1,\"generation\":1,\"params\":1,\"ledger\":null,\"shards\":[";
    for (int i = 0; i < 65; ++i) many += (i ? ",1" : "1");
    EXPECT_FALSE(decode_header(many + "]}"));
}
