// The rank runtime through real reshapes: a coordinator on 127.0.0.1 and ranks as threads,
// 4 -> 2 (planned shrink) -> 3 (planned grow with a joiner) -> STOP, and an unplanned loss
// (REWIND). Expected values are computed here independently: hand-computed sums and GA, and
// shard ranges from the reference trainer's omni::train::shard_range.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord/test/test_secret.h"
#include "runtime/runtime.h"
#include "train/optim.h"
#include "train/test/phases.h"

using namespace omni::launcher;

namespace {

const std::string kSecret = test_secret();
constexpr std::size_t P = 1001;  // odd: ZeRO-1 shards of unequal sizes at every world

// The logical values of the test's state after optimizer step s (exact in fp32).
float param_at(std::size_t i, std::uint64_t s) { return 0.25f * float(i) + float(s); }
float m_at(std::size_t i, std::uint64_t s) { return 0.5f * float(i) + 1000.0f * float(s); }
float v_at(std::size_t i, std::uint64_t s) { return -float(i) - float(s); }

std::vector<float> expected_slice(float (*f)(std::size_t, std::uint64_t), std::uint64_t s,
                                  int rank, int world) {
    const auto r = omni::train::shard_range(P, rank, world);
    std::vector<float> out;
    for (std::size_t i = r.begin; i < r.end; ++i) out.push_back(f(i, s));
    return out;
}

std::uint64_t checksum(const std::vector<float> &v) {  // independent of runtime_handoff's
    std::uint64_t h = 0;
    for (float f : v) {
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        h = h * 1000003u + bits;
    }
    return h;
}

// This rank's shards of m and v as they are after step s (m_at, v_at over its range).
void fill_shards(Runtime &rt, std::vector<float> &m, std::vector<float> &v, std::uint64_t s) {
    const ShardRange r = rt.shard_range(P);
    for (std::size_t j = 0; j < r.size(); ++j) {
        m[j] = m_at(r.begin + j, s);
        v[j] = v_at(r.begin + j, s);
    }
}

// Registers a rank's parameters and m, v; `fill` says whether this rank holds the step-0
// values (a joiner does not: it receives them).
omni::Status register_state(Runtime &rt, std::vector<float> &params, std::vector<float> &m,
                            std::vector<float> &v, bool fill) {
    params.assign(P, 0.0f);
    if (fill)
        for (std::size_t i = 0; i < P; ++i) params[i] = param_at(i, 0);
    if (auto st = rt.register_params(params.data(), P); !st) return st;
    auto im = rt.register_shard(&m, P);
    auto iv = rt.register_shard(&v, P);
    if (!im || !iv) return omni::make_error("register_shard failed");
    if (fill) fill_shards(rt, m, v, 0);
    return omni::Status::success();
}

struct Cluster {
    std::unique_ptr<Coordinator> coord;
    std::string ep;
    Cluster(std::uint32_t initial, std::uint32_t min, std::uint32_t max, bool announce = false) {
        CoordinatorConfig cfg;
        cfg.bind = {"tcp://127.0.0.1:0"};
        cfg.secret = kSecret;
        cfg.protocol.unit_size = 1;
        cfg.protocol.initial_units = initial;
        cfg.protocol.min_units = min;
        cfg.protocol.max_units = max;
        cfg.protocol.boundary_timeout_ms = 20000;
        cfg.protocol.grow_wait_ms = 20000;
        cfg.protocol.announce_planned = announce;
        auto c = Coordinator::start(cfg);
        EXPECT_TRUE(c) << c.error();
        if (c) {
            coord = std::move(c).value();
            ep = coord->endpoints().front();
        }
    }
    RuntimeOptions options(std::uint32_t unit, const std::string &secret = kSecret) const {
        RuntimeOptions o;
        o.endpoint = ep;
        o.secret = secret;
        o.member_id = "unit-" + std::to_string(unit);
        o.unit = unit;
        o.gloo_host = "127.0.0.1";
        o.join_timeout_ms = 20000;
        o.boundary_timeout_ms = 20000;
        o.comm_timeout_ms = 20000;
        o.job.global_batch = 12;
        o.job.micro_batch = 1;
        return o;
    }
    bool call(Request r) {
        auto cl = CoordinatorClient::connect(ep, kSecret);
        if (!cl) return false;
        auto rep = cl.value()->call(r, 5000);
        EXPECT_TRUE(rep) << rep.error();
        return bool(rep);
    }
    void reshape(std::uint32_t units) {
        Request r;
        r.op = Op::Reshape;
        r.units = units;
        ASSERT_TRUE(call(r));
    }
    void stop() {
        Request r;
        r.op = Op::Stop;
        r.reason = "test done";
        ASSERT_TRUE(call(r));
    }
    void lost(const std::string &id) {
        Request r;
        r.op = Op::Lost;
        r.id = id;
        ASSERT_TRUE(call(r));
    }
    bool wait_pending_joiners(std::size_t n) {
        auto cl = CoordinatorClient::connect(ep, kSecret);
        for (int i = 0; cl && i < 500; ++i) {
            Request r;
            r.op = Op::Status;
            auto s = cl.value()->call(r, 3000);
            if (s && s.value().body["status"]["pending_joiners"].size() >= n) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return false;
    }
};

float allreduce_rank_plus_one(Runtime &rt) {
    std::vector<float> x(7, float(rt.rank() + 1));
    auto st = rt.comm().allreduce(x.data(), x.size(), DType::fp32, ReduceOp::sum);
    EXPECT_TRUE(st) << st.error();
    for (float f : x) EXPECT_EQ(f, x[0]);
    return x[0];
}

// What one rank saw; checked on the main thread.
struct Seen {
    std::string error;
    std::vector<BoundaryResult> decisions;
    std::vector<float> sums;                 // allreduce results, one per generation used
    std::vector<std::uint32_t> ga;           // the ledger's GA after each decision
    std::vector<std::vector<float>> m, v;    // shards after each RESHAPED
    std::vector<std::uint32_t> rank_after;   // rank after each RESHAPED
    std::uint64_t params_sum = 0;            // checksum of the parameters at the end
    std::string ledger;                      // serialised at the end
    StartResult start;
};

#define REQUIRE_OK(expr, what)                                   \
    do {                                                         \
        const auto &_r = (expr);                                 \
        if (!_r) {                                               \
            seen.error = std::string(what) + ": " + _r.error();  \
            return;                                              \
        }                                                        \
    } while (0)

}  // namespace

TEST(RuntimeReshape, FourToTwoToThreeThenStop) {
    Cluster cl(4, 1, 4);
    ASSERT_TRUE(cl.coord);
    Phases phases;
    std::map<std::uint32_t, Seen> seen_by_unit;
    for (std::uint32_t u : {0u, 1u, 2u, 3u, 4u}) seen_by_unit[u];

    // Registers the test's state and ledger; `fill` as in register_state.
    auto setup = [&](Runtime &rt, std::vector<float> &params, std::vector<float> &m,
                     std::vector<float> &v, bool fill) -> omni::Status {
        if (auto st = register_state(rt, params, m, v, fill); !st) return st;
        return rt.configure_ledger({1000, 0, 0, 7});
    };
    // The optimizer step s: every rank updates the replicated parameters and its own shard.
    auto optimizer_step = [&](Runtime &rt, std::vector<float> &params, std::vector<float> &m,
                              std::vector<float> &v, std::uint64_t s) {
        for (std::size_t i = 0; i < P; ++i) params[i] = param_at(i, s);
        fill_shards(rt, m, v, s);
    };
    auto record = [&](Seen &seen, Runtime &rt, const BoundaryResult &b, std::vector<float> &m,
                      std::vector<float> &v) {
        seen.decisions.push_back(b);
        seen.ga.push_back(b.grad_accum);
        if (b.outcome == Outcome::Reshaped) {
            seen.m.push_back(m);
            seen.v.push_back(v);
            seen.rank_after.push_back(rt.rank());
        }
    };

    // Every rank's last step: step 3, after which the job stops.
    auto last_step = [&](Seen &seen, Runtime &rt, const std::vector<float> &params,
                         std::vector<float> &m, std::vector<float> &v) {
        seen.sums.push_back(allreduce_rank_plus_one(rt));
        seen.params_sum = checksum(params);
        phases.arrive_and_wait(3);
        auto b3 = rt.boundary(3);
        REQUIRE_OK(b3, "boundary 3");
        record(seen, rt, b3.value(), m, v);
        seen.ledger = rt.ledger()->serialise();
    };
    // create + register + start; false (and seen.error) on failure.
    auto begin = [&](std::uint32_t unit, bool original, std::unique_ptr<Runtime> &out,
                     std::vector<float> &params, std::vector<float> &m, std::vector<float> &v) {
        Seen &seen = seen_by_unit[unit];
        auto made = Runtime::create(cl.options(unit));
        if (!made) return seen.error = "create: " + made.error(), false;
        out = std::move(made).value();
        if (auto st = setup(*out, params, m, v, original); !st) return seen.error = "setup: " + st.error(), false;
        auto s = out->start();
        if (!s) return seen.error = "start: " + s.error(), false;
        seen.start = s.value();
        seen.ga.push_back(out->ledger()->grad_accum());
        return true;
    };

    auto original = [&](std::uint32_t unit) {
        Seen &seen = seen_by_unit[unit];
        std::unique_ptr<Runtime> made;
        std::vector<float> params, m, v;
        if (!begin(unit, true, made, params, m, v)) return;
        Runtime &rt = *made;
        seen.sums.push_back(allreduce_rank_plus_one(rt));
        optimizer_step(rt, params, m, v, 1);
        phases.arrive_and_wait(1);
        auto b1 = rt.boundary(1);
        REQUIRE_OK(b1, "boundary 1");
        record(seen, rt, b1.value(), m, v);
        if (b1.value().outcome == Outcome::Left) return;
        seen.sums.push_back(allreduce_rank_plus_one(rt));
        optimizer_step(rt, params, m, v, 2);
        phases.arrive_and_wait(2);
        auto b2 = rt.boundary(2);
        REQUIRE_OK(b2, "boundary 2");
        record(seen, rt, b2.value(), m, v);
        last_step(seen, rt, params, m, v);
    };
    auto joiner = [&](std::uint32_t unit) {
        Seen &seen = seen_by_unit[unit];
        std::unique_ptr<Runtime> made;
        std::vector<float> params, m, v;
        if (!begin(unit, false, made, params, m, v)) return;
        Runtime &rt = *made;
        seen.m.push_back(m);
        seen.v.push_back(v);
        seen.rank_after.push_back(rt.rank());
        last_step(seen, rt, params, m, v);
    };

    std::vector<std::thread> threads;
    for (std::uint32_t u = 0; u < 4; ++u) threads.emplace_back(original, u);
    ASSERT_TRUE(phases.wait_arrived(1, 4));
    cl.reshape(2);
    phases.open(1);
    ASSERT_TRUE(phases.wait_arrived(2, 2));
    cl.reshape(3);
    threads.emplace_back(joiner, 4u);  // a new unit id: units 2 and 3 are gone
    ASSERT_TRUE(cl.wait_pending_joiners(1));
    phases.open(2);
    ASSERT_TRUE(phases.wait_arrived(3, 3));
    cl.stop();
    phases.open(3);
    for (auto &t : threads) t.join();
    for (auto &[u, s] : seen_by_unit) ASSERT_EQ(s.error, "") << "unit " << u;

    // Generation 1: 4 ranks, sum of rank+1 = 1+2+3+4, GA = 12 / (1*4).
    for (std::uint32_t u = 0; u < 4; ++u) {
        const Seen &s = seen_by_unit[u];
        EXPECT_EQ(s.start.step, 0u);
        EXPECT_FALSE(s.start.joined);
        EXPECT_EQ(s.sums.at(0), 10.0f);
        EXPECT_EQ(s.ga.at(0), 3u);
        // The first decision: the same for all four.
        const BoundaryResult &b = s.decisions.at(0);
        EXPECT_EQ(b.previous_world, 4u);
        EXPECT_EQ(b.leaving_units, (std::vector<std::uint32_t>{2, 3}));
        EXPECT_TRUE(b.joining_units.empty());
        EXPECT_EQ(b.reason, seen_by_unit[0].decisions.at(0).reason);
    }
    // Units 2 and 3 left; 0 and 1 are ranks 0 and 1 of 2 with GA 6 and sum 1+2.
    for (std::uint32_t u : {2u, 3u}) EXPECT_EQ(seen_by_unit[u].decisions.at(0).outcome, Outcome::Left);
    for (std::uint32_t u : {0u, 1u}) {
        const Seen &s = seen_by_unit[u];
        const BoundaryResult &b = s.decisions.at(0);
        EXPECT_EQ(b.outcome, Outcome::Reshaped);
        EXPECT_EQ(b.generation, 2u);
        EXPECT_EQ(b.world, 2u);
        EXPECT_EQ(b.rank, u);
        EXPECT_EQ(s.ga.at(1), 6u);
        EXPECT_EQ(s.sums.at(1), 3.0f);
        // Shards re-partitioned: the logical vectors of step 1 sliced for 2 ranks.
        EXPECT_EQ(s.m.at(0), expected_slice(m_at, 1, int(u), 2)) << "unit " << u;
        EXPECT_EQ(s.v.at(0), expected_slice(v_at, 1, int(u), 2)) << "unit " << u;
    }
    // Generation 3: units 0, 1 and the joiner 4 as ranks 0, 1, 2; GA 4; sum 1+2+3.
    const std::uint64_t expected_params = [] {
        std::vector<float> p(P);
        for (std::size_t i = 0; i < P; ++i) p[i] = param_at(i, 2);
        return checksum(p);
    }();
    for (std::uint32_t u : {0u, 1u, 4u}) {
        const Seen &s = seen_by_unit[u];
        const std::uint32_t rank = u == 4 ? 2 : u;
        if (u != 4) {
            const BoundaryResult &b = s.decisions.at(1);
            EXPECT_EQ(b.outcome, Outcome::Reshaped);
            EXPECT_EQ(b.generation, 3u);
            EXPECT_EQ(b.world, 3u);
            EXPECT_EQ(b.previous_world, 2u);
            EXPECT_EQ(b.joining_units, std::vector<std::uint32_t>{4});
            EXPECT_EQ(s.ga.at(2), 4u);
        } else {
            EXPECT_TRUE(s.start.joined);
            EXPECT_FALSE(s.start.rewind);
            EXPECT_EQ(s.start.step, 2u);
            EXPECT_EQ(s.ga.at(0), 4u);
        }
        EXPECT_EQ(s.rank_after.back(), rank);
        EXPECT_EQ(s.m.back(), expected_slice(m_at, 2, int(rank), 3)) << "unit " << u;
        EXPECT_EQ(s.v.back(), expected_slice(v_at, 2, int(rank), 3)) << "unit " << u;
        EXPECT_EQ(s.sums.back(), 6.0f);
        // The joiner's parameters equal the survivors' (and the values of step 2).
        EXPECT_EQ(s.params_sum, expected_params) << "unit " << u;
        // Everyone stops at boundary 3 with the same ledger (3 steps of 12 samples).
        EXPECT_EQ(s.decisions.back().outcome, Outcome::Stop);
        EXPECT_EQ(s.ledger, seen_by_unit[0].ledger);
    }
    auto ledger = Ledger::load(seen_by_unit[4].ledger);
    ASSERT_TRUE(ledger) << ledger.error();
    EXPECT_EQ(ledger.value().step(), 3u);
    EXPECT_EQ(ledger.value().consumed_in_epoch(), 36u);
    EXPECT_EQ(ledger.value().dp_size(), 3u);
}

TEST(RuntimeReshape, UnplannedLossRewindsOnANewCommunicator) {
    Cluster cl(3, 1, 3);
    ASSERT_TRUE(cl.coord);
    Phases phases;
    std::map<std::uint32_t, Seen> seen_by_unit;
    for (std::uint32_t u : {0u, 1u, 2u}) seen_by_unit[u];
    auto rank = [&](std::uint32_t unit) {
        Seen &seen = seen_by_unit[unit];
        auto made = Runtime::create(cl.options(unit));
        REQUIRE_OK(made, "create");
        std::unique_ptr<Runtime> rt = std::move(made).value();
        std::vector<float> m;
        REQUIRE_OK(rt->register_shard(&m, P), "register");
        REQUIRE_OK(rt->configure_ledger({1000, 0, 0, 7}), "ledger");
        REQUIRE_OK(rt->start(), "start");
        seen.sums.push_back(allreduce_rank_plus_one(*rt));
        if (unit == 2) {
            rt.reset();  // this rank "dies": its sockets close, it never reaches the boundary
            phases.arrive_and_wait(1);
            return;
        }
        phases.arrive_and_wait(1);
        auto b = rt->boundary(1);
        REQUIRE_OK(b, "boundary");
        seen.decisions.push_back(b.value());
        seen.m.push_back(m);
        seen.sums.push_back(allreduce_rank_plus_one(*rt));
        seen.ga.push_back(rt->ledger()->grad_accum());
    };
    std::vector<std::thread> threads;
    for (std::uint32_t u = 0; u < 3; ++u) threads.emplace_back(rank, u);
    ASSERT_TRUE(phases.wait_arrived(1, 3));
    cl.lost("unit-2");  // what omni-launch reports when the task exits
    phases.open(1);
    for (auto &t : threads) t.join();
    for (auto &[u, s] : seen_by_unit) ASSERT_EQ(s.error, "") << "unit " << u;
    for (std::uint32_t u : {0u, 1u}) {
        const Seen &s = seen_by_unit[u];
        EXPECT_EQ(s.sums.at(0), 6.0f);
        const BoundaryResult &b = s.decisions.at(0);
        EXPECT_EQ(b.outcome, Outcome::Rewind);
        EXPECT_EQ(b.world, 2u);
        EXPECT_EQ(b.rank, u);
        EXPECT_EQ(b.lost, std::vector<std::string>{"unit-2"});
        EXPECT_EQ(s.sums.at(1), 3.0f);  // the new communicator works
        EXPECT_EQ(s.ga.at(0), 6u);
        // Shards are sized for the new ranges, to be filled from the checkpoint.
        EXPECT_EQ(s.m.at(0).size(), omni::train::shard_range(P, int(u), 2).size());
    }
}

TEST(RuntimeReshape, ARankWithoutTheSecretIsRefused) {
    Cluster cl(1, 1, 1);
    ASSERT_TRUE(cl.coord);
    auto rt = Runtime::create(cl.options(0, std::string(64, '0')));
    ASSERT_FALSE(rt);
    EXPECT_NE(rt.error().find("refused"), std::string::npos) << rt.error();
    // Counted when the coordinator sees the connection close, a poll after the rank may.
    for (int i = 0; i < 50 && cl.coord->counters().refused.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(cl.coord->counters().refused.load(), 1u);
}

TEST(RuntimeReshape, JoinTimesOutWhenNeverAdmitted) {
    Cluster cl(2, 2, 2);  // needs two units; only one comes
    ASSERT_TRUE(cl.coord);
    auto o = cl.options(0);
    o.join_timeout_ms = 300;
    auto rt = Runtime::create(o);
    ASSERT_FALSE(rt);
    EXPECT_NE(rt.error().find("no reply"), std::string::npos) << rt.error();
}

TEST(RuntimeStandalone, OneRankNoCoordinator) {
    RuntimeOptions o;
    o.standalone = true;
    auto made = Runtime::create(o);
    ASSERT_TRUE(made) << made.error();
    Runtime &rt = *made.value();
    EXPECT_EQ(rt.world(), 1u);
    EXPECT_EQ(rt.rank(), 0u);
    EXPECT_STREQ(rt.comm().backend(), "solo");
    std::vector<float> m;
    ASSERT_TRUE(rt.register_shard(&m, 10));
    EXPECT_EQ(m.size(), 10u);  // one rank holds the whole vector
    ASSERT_TRUE(rt.configure_ledger({100, 8, 2, 3}));
    EXPECT_EQ(rt.ledger()->grad_accum(), 4u);
    EXPECT_FALSE(rt.boundary(1)) << "boundary before start";
    auto s = rt.start();
    ASSERT_TRUE(s);
    EXPECT_EQ(s.value().step, 0u);
    float x[3] = {1, 2, 3}, y[3] = {};
    ASSERT_TRUE(rt.comm().allreduce(x, 3, DType::fp32, ReduceOp::avg));
    EXPECT_EQ(x[2], 3.0f);
    ASSERT_TRUE(rt.comm().allgather(x, y, 3, DType::fp32));
    EXPECT_EQ(y[1], 2.0f);
    auto b = rt.boundary(1);
    ASSERT_TRUE(b) << b.error();
    EXPECT_EQ(b.value().outcome, Outcome::Continue);
    EXPECT_EQ(rt.ledger()->step(), 1u);
    EXPECT_FALSE(rt.boundary(5)) << "a step out of sequence with the ledger";
    EXPECT_TRUE(rt.boundary(1)) << "repeating the last step is harmless";
    EXPECT_EQ(rt.ledger()->step(), 1u);
}

TEST(RuntimeReshape, AJoinerWhoseStateDiffersIsToldWhy) {
    Cluster cl(1, 1, 2);
    ASSERT_TRUE(cl.coord);
    Phases phases;
    std::string joiner_error;
    Fault joiner_fault = Fault::none;
    std::thread survivor([&] {
        auto o = cl.options(0);
        o.comm_timeout_ms = 3000;
        auto made = Runtime::create(o);
        ASSERT_TRUE(made) << made.error();
        std::vector<float> params(P, 1.0f);
        ASSERT_TRUE(made.value()->register_params(params.data(), P));
        ASSERT_TRUE(made.value()->start());
        phases.arrive_and_wait(1);
        // The survivor's sends may complete into socket buffers before the joiner gives up;
        // either way the call returns within the communicator's timeout.
        (void)made.value()->boundary(1);
    });
    ASSERT_TRUE(phases.wait_arrived(1, 1));
    cl.reshape(2);
    std::thread joiner([&] {
        auto o = cl.options(1);
        o.comm_timeout_ms = 3000;
        auto made = Runtime::create(o);
        ASSERT_TRUE(made) << made.error();
        std::vector<float> params(P - 1, 0.0f);  // one parameter short
        ASSERT_TRUE(made.value()->register_params(params.data(), P - 1));
        auto s = made.value()->start();
        ASSERT_FALSE(s);
        joiner_error = s.error();
        joiner_fault = made.value()->last_fault();
    });
    ASSERT_TRUE(cl.wait_pending_joiners(1));
    phases.open(1);
    joiner.join();
    survivor.join();
    EXPECT_NE(joiner_error.find("1001 parameters"), std::string::npos) << joiner_error;
    EXPECT_NE(joiner_error.find("registered 1000"), std::string::npos) << joiner_error;
    EXPECT_EQ(joiner_fault, Fault::usage);
}

TEST(RuntimeReshape, AnnouncedShrinkPreparesThenHandsOver) {
    // omni-launch's default: the shrink 4 -> 2 is announced at boundary 1 (CONTINUE; the
    // survivors allocate for their new ranges) and applied at boundary 2, with the state of
    // step 2 in the survivors' shards.
    Cluster cl(4, 1, 4, true);
    ASSERT_TRUE(cl.coord);
    Phases phases;
    std::map<std::uint32_t, Seen> seen_by_unit;
    for (std::uint32_t u = 0; u < 4; ++u) seen_by_unit[u];
    auto rank_main = [&](std::uint32_t unit) {
        Seen &seen = seen_by_unit[unit];
        auto made = Runtime::create(cl.options(unit));
        REQUIRE_OK(made, "create");
        Runtime &rt = *made.value();
        std::vector<float> params, m, v;
        REQUIRE_OK(register_state(rt, params, m, v, true), "register");
        REQUIRE_OK(rt.start(), "start");
        phases.arrive_and_wait(1);
        for (std::uint64_t s = 1; s <= 2; ++s) {
            fill_shards(rt, m, v, s);
            auto b = rt.boundary(s);
            REQUIRE_OK(b, "boundary");
            seen.decisions.push_back(b.value());
            if (b.value().outcome == Outcome::Left) return;
        }
        seen.m.push_back(m);
        seen.v.push_back(v);
        seen.rank_after.push_back(rt.rank());
        phases.arrive_and_wait(2);
        auto b3 = rt.boundary(3);
        REQUIRE_OK(b3, "boundary 3");
        seen.decisions.push_back(b3.value());
    };
    std::vector<std::thread> threads;
    for (std::uint32_t u = 0; u < 4; ++u) threads.emplace_back(rank_main, u);
    ASSERT_TRUE(phases.wait_arrived(1, 4));
    cl.reshape(2);
    phases.open(1);
    ASSERT_TRUE(phases.wait_arrived(2, 2));
    cl.stop();
    phases.open(2);
    for (auto &t : threads) t.join();
    for (std::uint32_t u = 0; u < 4; ++u) {
        const Seen &s = seen_by_unit[u];
        ASSERT_EQ(s.error, "") << "unit " << u;
        ASSERT_GE(s.decisions.size(), 2u) << "unit " << u;
        EXPECT_EQ(s.decisions[0].outcome, Outcome::Continue) << "unit " << u;  // the announcement
        EXPECT_EQ(s.decisions[0].reason, "announced");
        EXPECT_EQ(s.decisions[1].outcome, u < 2 ? Outcome::Reshaped : Outcome::Left) << "unit " << u;
    }
    for (std::uint32_t u = 0; u < 2; ++u) {
        const Seen &s = seen_by_unit[u];
        ASSERT_EQ(s.rank_after.size(), 1u);
        EXPECT_EQ(s.rank_after[0], u);
        EXPECT_EQ(s.m[0], expected_slice(m_at, 2, static_cast<int>(u), 2)) << "unit " << u;
        EXPECT_EQ(s.v[0], expected_slice(v_at, 2, static_cast<int>(u), 2)) << "unit " << u;
        ASSERT_EQ(s.decisions.size(), 3u);
        EXPECT_EQ(s.decisions[2].outcome, Outcome::Stop);
    }
}

TEST(RuntimeReshape, AnnouncedGrowAdmitsTheJoinerEarly) {
    // The grow 2 -> 3 is announced at boundary 1: the joiner's create() returns then, with
    // the rank and world it is to have and no communicator, so that it registers its state
    // during step 2; its start() waits for the admission at boundary 2 and receives the
    // parameters and its shards of step 2 from the survivors.
    Cluster cl(2, 1, 3, true);
    ASSERT_TRUE(cl.coord);
    Phases phases;
    std::map<std::uint32_t, Seen> seen_by_unit;
    for (std::uint32_t u = 0; u < 3; ++u) seen_by_unit[u];
    std::uint32_t early_rank = 99, early_world = 99;
    bool early_comm = true;
    auto rank_main = [&](std::uint32_t unit) {
        Seen &seen = seen_by_unit[unit];
        auto made = Runtime::create(cl.options(unit));
        REQUIRE_OK(made, "create");
        Runtime &rt = *made.value();
        const bool joiner = unit == 2;
        if (joiner) {
            early_rank = rt.rank();
            early_world = rt.world();
            early_comm = rt.has_comm();
        }
        std::vector<float> params, m, v;
        REQUIRE_OK(register_state(rt, params, m, v, !joiner), "register");
        auto started = rt.start();
        REQUIRE_OK(started, "start");
        seen.start = started.value();
        if (joiner) {
            seen.m.push_back(m);
            seen.v.push_back(v);
            seen.rank_after.push_back(rt.rank());
            seen.params_sum = checksum(params);
            seen.sums.push_back(allreduce_rank_plus_one(rt));
            return;
        }
        phases.arrive_and_wait(1);
        for (std::uint64_t s = 1; s <= 2; ++s) {
            fill_shards(rt, m, v, s);
            auto b = rt.boundary(s);
            REQUIRE_OK(b, "boundary");
            seen.decisions.push_back(b.value());
        }
        seen.sums.push_back(allreduce_rank_plus_one(rt));
    };
    std::vector<std::thread> threads;
    for (std::uint32_t u = 0; u < 2; ++u) threads.emplace_back(rank_main, u);
    ASSERT_TRUE(phases.wait_arrived(1, 2));
    cl.reshape(3);
    threads.emplace_back(rank_main, 2);
    ASSERT_TRUE(cl.wait_pending_joiners(1));
    phases.open(1);
    for (auto &t : threads) t.join();
    cl.stop();
    EXPECT_EQ(early_rank, 2u);
    EXPECT_EQ(early_world, 3u);
    EXPECT_FALSE(early_comm);
    for (std::uint32_t u = 0; u < 2; ++u) {
        const Seen &s = seen_by_unit[u];
        ASSERT_EQ(s.error, "") << "unit " << u;
        ASSERT_EQ(s.decisions.size(), 2u);
        EXPECT_EQ(s.decisions[0].outcome, Outcome::Continue);
        EXPECT_EQ(s.decisions[0].reason, "announced");
        EXPECT_EQ(s.decisions[1].outcome, Outcome::Reshaped);
        EXPECT_EQ(s.sums, std::vector<float>{6.0f});  // ranks 0, 1, 2 of 3: 1 + 2 + 3
    }
    const Seen &j = seen_by_unit[2];
    ASSERT_EQ(j.error, "");
    EXPECT_TRUE(j.start.joined);
    EXPECT_EQ(j.start.step, 2u);
    EXPECT_EQ(j.rank_after, std::vector<std::uint32_t>{2});
    std::vector<float> want(P);
    for (std::size_t i = 0; i < P; ++i) want[i] = param_at(i, 0);
    EXPECT_EQ(j.params_sum, checksum(want));
    EXPECT_EQ(j.m[0], expected_slice(m_at, 2, 2, 3));
    EXPECT_EQ(j.v[0], expected_slice(v_at, 2, 2, 3));
    EXPECT_EQ(j.sums, std::vector<float>{6.0f});
}
