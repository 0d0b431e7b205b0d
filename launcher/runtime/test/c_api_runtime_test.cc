// The rank runtime through the installed C API (libomni.so, exported symbols only):
// standalone with no environment at all, argument and state errors, and init against a
// coordinator on 127.0.0.1 with a wrong or missing secret.
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include <gloo/transport/device.h>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord/test/test_secret.h"
#include "omni/omni.h"
#include "omni/omni.hpp"

extern char **environ;

namespace {

// Removes every OMNI_*, PMIX_* and SLURM_* variable: "no Slurm, no PMIx, no coordinator".
void clear_environment() {
    std::vector<std::string> names;
    for (char **e = environ; *e; ++e) {
        std::string kv = *e;
        std::string name = kv.substr(0, kv.find('='));
        if (name.rfind("OMNI_", 0) == 0 || name.rfind("PMIX_", 0) == 0 ||
            name.rfind("SLURM_", 0) == 0)
            names.push_back(name);
    }
    for (const auto &n : names) unsetenv(n.c_str());
}

}  // namespace

TEST(RuntimeCApi, StandaloneWithNoEnvironment) {
    clear_environment();
    uint32_t rank = 99;
    EXPECT_EQ(omni_rank(&rank), OMNI_ESTATE);
    EXPECT_NE(std::string(omni_last_error()).find("omni_init"), std::string::npos);

    ASSERT_EQ(omni_init(), OMNI_OK) << omni_last_error();
    EXPECT_EQ(omni_init(), OMNI_ESTATE);
    uint32_t world = 0, unit = 9, slot = 9;
    uint64_t gen = 0;
    int standalone = 0;
    ASSERT_EQ(omni_rank(&rank), OMNI_OK);
    ASSERT_EQ(omni_world_size(&world), OMNI_OK);
    ASSERT_EQ(omni_unit(&unit, &slot), OMNI_OK);
    ASSERT_EQ(omni_generation(&gen), OMNI_OK);
    ASSERT_EQ(omni_standalone(&standalone), OMNI_OK);
    EXPECT_EQ(rank, 0u);
    EXPECT_EQ(world, 1u);
    EXPECT_EQ(unit, 0u);
    EXPECT_EQ(slot, 0u);
    EXPECT_EQ(gen, 1u);
    EXPECT_EQ(standalone, 1);
    EXPECT_STREQ(omni_backend(), "solo");
    // One rank: every group is this rank alone.
    for (int g : std::initializer_list<int>{OMNI_GROUP_DP, OMNI_GROUP_MP, OMNI_GROUP_WORLD, OMNI_GROUP_SP(1)}) {
        uint32_t grank = 9, gsize = 9;
        ASSERT_EQ(omni_group_info(g, &grank, &gsize), OMNI_OK) << omni_last_error();
        EXPECT_EQ(grank, 0u);
        EXPECT_EQ(gsize, 1u);
        float x[2] = {1.5f, 2.5f};
        EXPECT_EQ(omni_group_allreduce(g, x, 2, OMNI_FP32, OMNI_SUM), OMNI_OK) << omni_last_error();
        EXPECT_EQ(x[1], 2.5f);
        EXPECT_EQ(omni_group_barrier(g), OMNI_OK);
        EXPECT_EQ(omni_group_broadcast(g, x, 2, OMNI_FP32, 1), OMNI_EINVAL);  // root 1 of a group of 1
        EXPECT_NE(std::string(omni_last_error()).find("root 1"), std::string::npos) << omni_last_error();
    }
    EXPECT_EQ(omni_group_info(7, nullptr, nullptr), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("unknown group 7"), std::string::npos) << omni_last_error();
    // A sequence-parallel degree must divide the DP size (1 here) and be a power of two.
    float z = 1;
    for (int k : {2, 3}) {
        EXPECT_EQ(omni_group_info(OMNI_GROUP_SP(k), nullptr, nullptr), OMNI_EINVAL);
        EXPECT_NE(std::string(omni_last_error()).find("OMNI_GROUP_SP(" + std::to_string(k) + ")"), std::string::npos)
            << omni_last_error();
        EXPECT_EQ(omni_group_allreduce(OMNI_GROUP_SP(k), &z, 1, OMNI_FP32, OMNI_SUM), OMNI_EINVAL);
    }
    float y = 1;
    EXPECT_EQ(omni_group_allreduce(-1, &y, 1, OMNI_FP32, OMNI_SUM), OMNI_EINVAL);
    // No job to stop; a reason outside 1..64 characters is refused before that.
    EXPECT_EQ(omni_request_stop(std::string(65, 'x').c_str()), OMNI_EINVAL);
    EXPECT_EQ(omni_request_stop(""), OMNI_EINVAL);
    EXPECT_EQ(omni_request_stop(nullptr), OMNI_EINVAL);
    EXPECT_EQ(omni_request_stop("done"), OMNI_ESTATE);
    EXPECT_EQ(omni_checkpoint_done(3, ""), OMNI_EINVAL);
    EXPECT_EQ(omni_checkpoint_done(3, std::string(1025, 'x').c_str()), OMNI_EINVAL);
    EXPECT_EQ(omni_checkpoint_done(3, "/c/step-3"), OMNI_ESTATE);
    EXPECT_NE(std::string(omni_last_error()).find("standalone"), std::string::npos) << omni_last_error();
    // Standalone: always a member; an adopt needs its begin, and finds no new connection.
    EXPECT_EQ(omni_check_member(), OMNI_OK);
    std::uint32_t adopted = 7;
    EXPECT_EQ(omni_sockets_adopt(1, &adopted), OMNI_ESTATE);
    EXPECT_NE(std::string(omni_last_error()).find("omni_sockets_begin"), std::string::npos) << omni_last_error();
    EXPECT_EQ(omni_sockets_begin(), OMNI_OK);
    EXPECT_EQ(omni_sockets_adopt(0, &adopted), OMNI_OK);
    EXPECT_EQ(adopted, 0u);
    // The guarded Gloo device for omni.torch: argument errors, then one on 127.0.0.1 (no
    // omni_init needed; comm/test/gloo_guard_test builds a mesh with it).
    void *device = nullptr;
    EXPECT_EQ(omni_gloo_guarded_device("", "127.0.0.1", nullptr), OMNI_EINVAL);
    EXPECT_EQ(omni_gloo_guarded_device(nullptr, "", &device), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("expected an interface or a hostname"), std::string::npos)
        << omni_last_error();
    EXPECT_EQ(omni_gloo_guarded_device("no-such-interface0", nullptr, &device), OMNI_ECOMM);
    EXPECT_EQ(device, nullptr);
    ASSERT_EQ(omni_gloo_guarded_device(nullptr, "127.0.0.1", &device), OMNI_OK) << omni_last_error();
    ASSERT_NE(device, nullptr);
    delete static_cast<std::shared_ptr<gloo::transport::Device> *>(device);

    float params[5] = {1, 2, 3, 4, 5};
    ASSERT_EQ(omni_register_params(params, 5), OMNI_OK);
    size_t idx = 9;
    ASSERT_EQ(omni_state_add(5, &idx), OMNI_OK) << omni_last_error();
    EXPECT_EQ(idx, 0u);
    float *shard = nullptr;
    size_t begin = 9, count = 0;
    ASSERT_EQ(omni_state_shard(0, &shard, &begin, &count), OMNI_OK);
    EXPECT_EQ(begin, 0u);
    EXPECT_EQ(count, 5u);
    ASSERT_NE(shard, nullptr);
    EXPECT_EQ(shard[4], 0.0f);
    EXPECT_EQ(omni_state_shard(1, &shard, nullptr, nullptr), OMNI_EINVAL);

    uint32_t ga = 0;
    EXPECT_EQ(omni_data_grad_accum(&ga), OMNI_ESTATE);  // no ledger yet
    EXPECT_EQ(omni_data_configure(100, 1, 6, 4), OMNI_EINVAL);  // 6 not divisible by 4*1
    ASSERT_EQ(omni_data_configure(100, 1, 8, 2), OMNI_OK) << omni_last_error();
    ASSERT_EQ(omni_data_grad_accum(&ga), OMNI_OK);
    EXPECT_EQ(ga, 4u);
    uint64_t idxs[2];
    size_t n = 0;
    EXPECT_EQ(omni_data_micro_batch(0, idxs, 1, &n), OMNI_ERANGE);
    EXPECT_EQ(n, 2u);
    ASSERT_EQ(omni_data_micro_batch(3, idxs, 2, &n), OMNI_OK);
    EXPECT_LT(idxs[0], 100u);

    omni_decision d;
    EXPECT_EQ(omni_boundary(1, &d), OMNI_ESTATE);  // before omni_start
    uint64_t step = 99;
    int rewind = 7;
    ASSERT_EQ(omni_start(&step, &rewind), OMNI_OK) << omni_last_error();
    EXPECT_EQ(step, 0u);
    EXPECT_EQ(rewind, 0);
    EXPECT_EQ(omni_state_add(5, &idx), OMNI_ESTATE);  // after omni_start

    // Balancing: bad policies and a missing cost are refused naming them; one replica's plan
    // is the ledger's own share (sorted by position, which is stream order), and a cost above
    // 2^40 from the callback fails the micro-batch, naming the sample.
    EXPECT_EQ(omni_data_balance(nullptr, nullptr, nullptr), OMNI_EINVAL);
    EXPECT_EQ(omni_data_balance("greedy", nullptr, nullptr), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("balance 'greedy': expected none, lpt, kk"), std::string::npos)
        << omni_last_error();
    EXPECT_EQ(omni_data_balance("kk", nullptr, nullptr), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("needs a cost function"), std::string::npos) << omni_last_error();
    uint64_t plain[2], balanced[2];
    ASSERT_EQ(omni_data_micro_batch(1, plain, 2, &n), OMNI_OK) << omni_last_error();
    static uint64_t calls = 0;
    const omni_cost_fn by_index = [](uint64_t index, uint64_t, void *user) -> uint64_t {
        ++*static_cast<uint64_t *>(user);
        return index + 1;
    };
    ASSERT_EQ(omni_data_balance("grouped", by_index, &calls), OMNI_OK) << omni_last_error();
    ASSERT_EQ(omni_data_micro_batch(1, balanced, 2, &n), OMNI_OK) << omni_last_error();
    EXPECT_EQ(std::vector<uint64_t>(plain, plain + 2), std::vector<uint64_t>(balanced, balanced + 2));
    EXPECT_EQ(calls, 8u);  // the rank's share of B = 8, once per step
    ASSERT_EQ(omni_data_micro_batch(0, balanced, 2, &n), OMNI_OK) << omni_last_error();
    EXPECT_EQ(calls, 8u);
    // A policy set in the middle of a planned step applies from the next step: this one keeps
    // its plan (the costly cost function is not called yet).
    const omni_cost_fn huge = [](uint64_t, uint64_t, void *) -> uint64_t { return uint64_t(1) << 41; };
    ASSERT_EQ(omni_data_balance("lpt", huge, nullptr), OMNI_OK) << omni_last_error();
    ASSERT_EQ(omni_data_micro_batch(1, balanced, 2, &n), OMNI_OK) << omni_last_error();
    EXPECT_EQ(std::vector<uint64_t>(plain, plain + 2), std::vector<uint64_t>(balanced, balanced + 2));

    // Collectives over one rank: values unchanged, copies where there is a receive buffer.
    float x[3] = {1.5f, -2, 4};
    ASSERT_EQ(omni_allreduce(x, 3, OMNI_FP32, OMNI_SUM), OMNI_OK);
    ASSERT_EQ(omni_allreduce(x, 3, OMNI_FP32, OMNI_AVG), OMNI_OK);
    EXPECT_EQ(x[0], 1.5f);
    uint16_t h[2] = {0x3f80, 0x4000}, hr[2] = {};
    ASSERT_EQ(omni_allgather(h, hr, 2, OMNI_BF16), OMNI_OK);
    EXPECT_EQ(hr[1], 0x4000);
    ASSERT_EQ(omni_reduce_scatter(x, x, 3, OMNI_FP32, OMNI_SUM), OMNI_OK);
    ASSERT_EQ(omni_broadcast(x, 3, OMNI_FP32, 0), OMNI_OK);
    EXPECT_EQ(omni_broadcast(x, 3, OMNI_FP32, 1), OMNI_EINVAL);
    EXPECT_EQ(omni_allreduce(x, 3, 7, OMNI_SUM), OMNI_EINVAL);
    EXPECT_EQ(omni_allreduce(nullptr, 3, OMNI_FP32, OMNI_SUM), OMNI_EINVAL);
    ASSERT_EQ(omni_barrier(), OMNI_OK);
    // Host buffers: no CUDA stream to run on; NULL (the default) is fine.
    int not_a_stream = 0;
    EXPECT_EQ(omni_set_cuda_stream(&not_a_stream), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("OMNI_COMM_BACKEND=nccl"), std::string::npos) << omni_last_error();
    EXPECT_EQ(omni_set_cuda_stream(nullptr), OMNI_OK);

    EXPECT_EQ(omni_boundary(3, &d), OMNI_EINVAL);  // the ledger is at step 0
    ASSERT_EQ(omni_boundary(1, &d), OMNI_OK) << omni_last_error();
    EXPECT_EQ(d.kind, OMNI_CONTINUE);
    EXPECT_EQ(d.world, 1u);
    EXPECT_EQ(d.grad_accum, 4u);
    // The next step is planned with lpt and the costly function: the micro-batch fails,
    // naming the cost; without a policy the ledger's split comes back.
    EXPECT_EQ(omni_data_micro_batch(0, balanced, 2, &n), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("cost 2199023255552; at most 1099511627776"), std::string::npos)
        << omni_last_error();
    ASSERT_EQ(omni_data_balance("none", nullptr, nullptr), OMNI_OK) << omni_last_error();
    ASSERT_EQ(omni_data_micro_batch(0, balanced, 2, &n), OMNI_OK) << omni_last_error();
    // The step's samples without a policy: the share, the micro-batches joined; no shards.
    uint64_t all[8];
    EXPECT_EQ(omni_data_step_samples(nullptr, 0, &n, nullptr), OMNI_ERANGE);
    EXPECT_EQ(n, 8u);
    double t = -1;
    ASSERT_EQ(omni_data_step_samples(all, 8, &n, &t), OMNI_OK) << omni_last_error();
    EXPECT_EQ(t, 0.0);
    EXPECT_EQ(std::vector<uint64_t>(all, all + 2), std::vector<uint64_t>(balanced, balanced + 2));
    ASSERT_EQ(omni_data_step_shards(nullptr, nullptr, nullptr, 0, &n), OMNI_OK);
    EXPECT_EQ(n, 0u);
    // LSSP on one replica: nothing to split, every sample whole, the time their summed
    // lengths (index + 1 each); the micro-batch API refuses the plan.
    ASSERT_EQ(omni_data_balance("lssp", by_index, &calls), OMNI_OK) << omni_last_error();
    uint64_t lssp[8];
    ASSERT_EQ(omni_data_step_samples(lssp, 8, &n, &t), OMNI_OK) << omni_last_error();
    ASSERT_EQ(n, 8u);
    double want = 0;
    for (uint64_t i : all) want += double(i + 1);
    EXPECT_EQ(t, want);
    std::sort(lssp, lssp + 8);
    std::sort(all, all + 8);
    EXPECT_EQ(std::vector<uint64_t>(lssp, lssp + 8), std::vector<uint64_t>(all, all + 8));
    EXPECT_EQ(omni_data_micro_batch(0, balanced, 2, &n), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("read it with plan()"), std::string::npos) << omni_last_error();
    ASSERT_EQ(omni_data_balance("none", nullptr, nullptr), OMNI_OK) << omni_last_error();

    char buf[512];
    size_t len = 0;
    ASSERT_EQ(omni_data_save(buf, sizeof buf, &len), OMNI_OK);
    EXPECT_NE(std::string(buf).find("\"step\":1"), std::string::npos) << buf;
    ASSERT_EQ(omni_data_load(buf, len - 1), OMNI_OK) << omni_last_error();
    EXPECT_EQ(omni_data_load("{}", 2), OMNI_EFORMAT);
    // A checkpoint of another data order is refused, naming the value; this run's ledger stays.
    std::string other(buf, len - 1);
    const auto seed_at = other.find("\"seed\":");
    ASSERT_NE(seed_at, std::string::npos) << other;
    other.replace(seed_at, std::string("\"seed\":").size(), "\"seed\":1");   // seed 1 -> 11
    EXPECT_EQ(omni_data_load(other.c_str(), other.size()), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("seed is 11, this run's 1"), std::string::npos)
        << omni_last_error();
    // One saved with micro-batch 4 resumes with this run's 2: GA = 8 / (2*1) = 4.
    std::string micro(buf, len - 1);
    const auto b_at = micro.find("\"micro_batch\":2");
    ASSERT_NE(b_at, std::string::npos) << micro;
    micro.replace(b_at, std::string("\"micro_batch\":2").size(), "\"micro_batch\":4");
    ASSERT_EQ(omni_data_load(micro.c_str(), micro.size()), OMNI_OK) << omni_last_error();
    ga = 0;
    ASSERT_EQ(omni_data_grad_accum(&ga), OMNI_OK);
    EXPECT_EQ(ga, 4u);

    ASSERT_EQ(omni_finalize(), OMNI_OK);
    ASSERT_EQ(omni_finalize(), OMNI_OK);  // idempotent
    EXPECT_EQ(omni_world_size(&world), OMNI_ESTATE);
    EXPECT_EQ(omni_backend(), nullptr);
}

TEST(RuntimeCApi, CoordinatorRefusesAWrongSecretAndAMissingOneIsNamed) {
    clear_environment();
    omni::launcher::CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = test_secret();
    auto c = omni::launcher::Coordinator::start(cfg);
    ASSERT_TRUE(c) << c.error();
    const std::string ep = c.value()->endpoints().front();

    setenv("OMNI_COORD_ADDR", ep.c_str(), 1);
    setenv("OMNI_COORD_SECRET", std::string(64, 'b').c_str(), 1);
    setenv("OMNI_JOIN_TIMEOUT_MS", "3000", 1);
    EXPECT_EQ(omni_init(), OMNI_ECOMM);
    EXPECT_NE(std::string(omni_last_error()).find("refused"), std::string::npos)
        << omni_last_error();
    // Counted when the coordinator sees the connection close, a poll after the client may.
    for (int i = 0; i < 50 && c.value()->counters().refused.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(c.value()->counters().refused.load(), 1u);

    unsetenv("OMNI_COORD_SECRET");  // no secret and no job directory with one
    EXPECT_EQ(omni_init(), OMNI_EINVAL);
    EXPECT_NE(std::string(omni_last_error()).find("omni_init"), std::string::npos);

    // With the right secret the single-unit job forms and this process is rank 0 of 1.
    setenv("OMNI_COORD_SECRET", cfg.secret.c_str(), 1);
    setenv("OMNI_GLOO_HOST", "127.0.0.1", 1);
    ASSERT_EQ(omni_init(), OMNI_OK) << omni_last_error();
    int standalone = 1;
    ASSERT_EQ(omni_standalone(&standalone), OMNI_OK);
    EXPECT_EQ(standalone, 0);
    EXPECT_STREQ(omni_backend(), "gloo");
    ASSERT_EQ(omni_start(nullptr, nullptr), OMNI_OK) << omni_last_error();
    float x = 2.5f;
    ASSERT_EQ(omni_allreduce(&x, 1, OMNI_FP32, OMNI_SUM), OMNI_OK) << omni_last_error();
    EXPECT_EQ(x, 2.5f);
    omni_decision d;
    ASSERT_EQ(omni_boundary(1, &d), OMNI_OK) << omni_last_error();
    EXPECT_EQ(d.kind, OMNI_CONTINUE);
    EXPECT_EQ(d.generation, 1u);
    ASSERT_EQ(omni_finalize(), OMNI_OK);
    clear_environment();
}

// A joiner named by an announced grow returns from omni_init a step early, with no
// communicator until omni_start admits it: omni_backend says NULL (it dereferenced the
// missing communicator before), and collectives fail with OMNI_ESTATE, naming why.
TEST(RuntimeCApi, AJoinerBeforeStartHasNoBackend) {
    clear_environment();
    omni::launcher::CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = test_secret();
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = 1;
    cfg.protocol.min_units = 1;
    cfg.protocol.max_units = 2;
    cfg.protocol.announce_planned = true;
    cfg.protocol.grow_wait_ms = 20000;
    auto c = omni::launcher::Coordinator::start(cfg);
    ASSERT_TRUE(c) << c.error();
    const std::string ep = c.value()->endpoints().front();

    // Unit 0 is a bare protocol client: it forms generation 1 and asks for 2 units.
    auto member = omni::launcher::CoordinatorClient::connect(ep, cfg.secret);
    ASSERT_TRUE(member) << member.error();
    auto formed = member.value()->join("unit-0", 0, 0, 5000);
    ASSERT_TRUE(formed) << formed.error();
    omni::launcher::Request grow;
    grow.op = omni::launcher::Op::Reshape;
    grow.units = 2;
    ASSERT_TRUE(member.value()->call(grow, 5000));

    setenv("OMNI_COORD_ADDR", ep.c_str(), 1);
    setenv("OMNI_COORD_SECRET", cfg.secret.c_str(), 1);
    setenv("OMNI_UNIT_ID", "1", 1);
    setenv("OMNI_UNIT_SLOT", "0", 1);
    setenv("OMNI_GLOO_HOST", "127.0.0.1", 1);
    setenv("OMNI_JOIN_TIMEOUT_MS", "10000", 1);
    auto init = std::async(std::launch::async, [] { return omni_init(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto announced = member.value()->boundary("unit-0", 1, 1, 5000);  // announces the grow
    ASSERT_TRUE(announced) << announced.error();
    ASSERT_EQ(init.get(), OMNI_OK) << omni_last_error();
    uint32_t world = 0;
    ASSERT_EQ(omni_world_size(&world), OMNI_OK);
    EXPECT_EQ(world, 2u);
    EXPECT_EQ(omni_backend(), nullptr);
    float x = 1.0f;
    EXPECT_EQ(omni_allreduce(&x, 1, OMNI_FP32, OMNI_SUM), OMNI_ESTATE);
    EXPECT_NE(std::string(omni_last_error()).find("joins at an announced change"), std::string::npos)
        << omni_last_error();
    ASSERT_EQ(omni_finalize(), OMNI_OK);
    clear_environment();
}

// The header-only C++ layer (omni/omni.hpp) over the same C API.
TEST(RuntimeCApi, CppWrapperStandalone) {
    clear_environment();
    {
        omni::Session s;
        EXPECT_TRUE(s.standalone());
        EXPECT_EQ(s.rank(), 0u);
        EXPECT_EQ(s.world(), 1u);
        EXPECT_EQ(s.backend(), "solo");
        float params[4] = {1, 2, 3, 4};
        s.register_params(params, 4);
        const std::size_t m = s.add_state(4);
        EXPECT_EQ(s.shard(m).count, 4u);
        s.configure_data(64, 5, 16, 4);
        EXPECT_EQ(s.grad_accum(), 4u);
        EXPECT_EQ(s.micro_batch(0).size(), 4u);
        EXPECT_EQ(s.start().step, 0u);
        s.allreduce(params, 4, OMNI_FP32, OMNI_AVG);
        EXPECT_EQ(params[3], 4.0f);
        EXPECT_EQ(s.boundary(1).kind, OMNI_CONTINUE);
        try {
            s.request_stop("done");
            ADD_FAILURE() << "a standalone rank has no job to stop";
        } catch (const omni::api_error &e) {
            EXPECT_EQ(e.status(), OMNI_ESTATE);
        }
        try {
            s.boundary(7);
            ADD_FAILURE() << "a step out of sequence must throw";
        } catch (const omni::api_error &e) {
            EXPECT_EQ(e.status(), OMNI_EINVAL);
            EXPECT_NE(std::string(e.what()).find("omni_boundary"), std::string::npos);
        }
    }
    uint32_t world = 0;
    EXPECT_EQ(omni_world_size(&world), OMNI_ESTATE) << "the session finalised";
}
