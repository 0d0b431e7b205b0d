// Model-parallel units through real reshapes: a coordinator on 127.0.0.1 and ranks as threads
// (no PMIx here, so each unit's MP group meets through the coordinator). Units of N = 4 ranks
// with M = 1, 2 and 4 (four replicas of one rank, two of two, one of four per unit). 2 units
// -> 1 (planned shrink) -> 2 (a new unit joins) -> STOP. The two MP slices hold vectors of different lengths, so that a hand-off
// mixing slices could not go unnoticed. Expected groups come from the layout rule written out
// here (slot % M, unit index * N/M + slot / M), expected shards from
// omni::train::shard_range, not from the runtime. Every generation also balances its step
// (kk over the replicas, runtime/balanced_step.h): the M ranks of a replica get the same
// samples, the replicas together get exactly the step's samples, and no replica is slower
// than under the ledger's own split; the plan follows MP rank 0's costs when the other MP
// ranks' differ. In every generation with an even DP size, the sequence-parallel pairs
// (sp_comm(2): DP ranks 2j, 2j+1 of one MP index) are built afresh and sum as the rule says.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
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
constexpr std::uint32_t N = 4;
// The length of MP slice m's vectors: unequal, and odd, so shards differ in size too.
std::size_t slice_len(std::uint32_t m) { return 1001 - 224 * m; }

float param_at(std::uint32_t m, std::size_t i, std::uint64_t s) { return 0.25f * float(i) + float(s) + 5000.0f * float(m); }
float mom_at(std::uint32_t m, std::size_t i, std::uint64_t s) { return 0.5f * float(i) - 1000.0f * float(s) - 7.0f * float(m); }

std::vector<float> expected_shard(std::uint32_t m, std::uint64_t s, int dp_rank, int dp_size) {
    const auto r = omni::train::shard_range(slice_len(m), dp_rank, dp_size);
    std::vector<float> out;
    for (std::size_t i = r.begin; i < r.end; ++i) out.push_back(mom_at(m, i, s));
    return out;
}

// What one rank saw in one generation.
struct Gen {
    std::uint32_t world = 0, mp_rank = 0, mp_size = 0, dp_rank = 0, dp_size = 0;
    int comm_size = 0, mp_comm_size = 0, world_comm_size = 0;
    float dp_sum = 0, mp_sum = 0;  // allreduce of dp_rank+1 on comm(), of slot+1 on mp_comm()
    float sp_sum = 0;              // allreduce of dp_rank+1 on sp_comm(2), when dp_size is even
    int sp_rank = -1, sp_size = 0;
    std::vector<float> shard;       // after the change
    std::vector<float> params;
    std::uint32_t ledger_dp = 0, ga = 0;
    std::uint64_t ledger_step = 0;
    std::vector<std::uint64_t> samples;     // this replica's, from micro_batch() under kk
    std::vector<std::uint64_t> plan_costs;  // every replica's, from the plan
};

// A long-tailed cost: most samples cost 1..100, one in eight 1000 or more.
std::uint64_t skewed_cost(std::uint64_t index, std::uint64_t step) {
    const std::uint64_t h = (index * 0x9e3779b97f4a7c15ull + step) >> 40;
    return h % 8 == 0 ? 1000 + h % 3000 : 1 + h % 100;
}
struct Seen {
    std::string error;
    std::vector<Gen> gens;
    std::vector<Outcome> outcomes;
};

std::string member(std::uint32_t unit, std::uint32_t slot) {
    return "unit-" + std::to_string(unit) + "-s" + std::to_string(slot);
}

}  // namespace

class RuntimeModelParallel : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(RuntimeModelParallel, GroupsAndSlicesSurviveShrinkAndGrow) {
    const std::uint32_t M = GetParam();
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = N;
    cfg.protocol.initial_units = 2;
    cfg.protocol.min_units = 1;
    cfg.protocol.max_units = 2;
    cfg.protocol.boundary_timeout_ms = 30000;
    cfg.protocol.grow_wait_ms = 30000;
    auto started = Coordinator::start(cfg);
    ASSERT_TRUE(started) << started.error();
    auto coord = std::move(started).value();
    const std::string ep = coord->endpoints().front();
    auto call = [&](Request r) {
        auto cl = CoordinatorClient::connect(ep, kSecret);
        ASSERT_TRUE(cl) << cl.error();
        auto rep = cl.value()->call(r, 5000);
        ASSERT_TRUE(rep) << rep.error();
    };

    Phases phases(std::chrono::seconds(60));
    std::mutex seen_mu;
    std::map<std::string, Seen> seen;
    auto rank_thread = [&](std::uint32_t unit, std::uint32_t slot, bool original) {
        Seen s;
        auto finish = [&] {
            if (!s.error.empty()) std::fprintf(stderr, "%s: %s\n", member(unit, slot).c_str(), s.error.c_str());
            std::lock_guard<std::mutex> lk(seen_mu);
            seen[member(unit, slot)] = s;
        };
        RuntimeOptions o;
        o.endpoint = ep;
        o.secret = kSecret;
        o.member_id = member(unit, slot);
        o.unit = unit;
        o.slot = slot;
        o.unit_size = N;
        o.mp = M;
        o.gloo_host = "127.0.0.1";
        o.join_timeout_ms = o.boundary_timeout_ms = o.comm_timeout_ms = 30000;
        o.job.global_batch = 24;  // whole GA for DP 1, 2, 4 and 8
        o.job.micro_batch = 1;
        auto made = Runtime::create(o);
        if (!made) return s.error = "create: " + made.error(), finish();
        Runtime &rt = *made.value();
        const std::uint32_t m = slot % M;  // the test's own rule
        std::vector<float> params(slice_len(m), 0.0f), mom;
        if (original)
            for (std::size_t i = 0; i < params.size(); ++i) params[i] = param_at(m, i, 0);
        if (auto st = rt.register_params(params.data(), params.size()); !st) return s.error = st.error(), finish();
        if (auto r = rt.register_shard(&mom, slice_len(m)); !r) return s.error = r.error(), finish();
        if (auto st = rt.configure_ledger({1000, 0, 0, 7}); !st) return s.error = st.error(), finish();
        // MP rank 0's costs are the replica's: the other MP ranks' cost function is off (as
        // another libm could be), and the plan must not follow it.
        const bool off = slot % M != 0;
        const auto cost = [off](std::uint64_t i, std::uint64_t st) {
            return skewed_cost(i, st) + (off ? i % 1000 * 3 : 0);
        };
        if (auto st = rt.configure_balance({omni::balance::Policy::Kk, BalanceScope::job}, cost); !st)
            return s.error = st.error(), finish();
        if (original) {
            const auto r = rt.shard_range(slice_len(m));
            for (std::size_t j = 0; j < r.size(); ++j) mom[j] = mom_at(m, r.begin + j, 0);
        }
        auto st0 = rt.start();
        if (!st0) return s.error = "start: " + st0.error(), finish();
        auto observe = [&] {
            Gen g;
            g.world = rt.world();
            g.mp_rank = rt.mp_rank();
            g.mp_size = rt.mp_size();
            g.dp_rank = rt.dp_rank();
            g.dp_size = rt.dp_size();
            g.comm_size = rt.comm().size();
            g.mp_comm_size = rt.mp_comm().size();
            g.world_comm_size = rt.world_comm().size();
            std::vector<float> x(5, float(rt.dp_rank() + 1)), y(3, float(slot + 1));
            if (auto st = rt.comm().allreduce(x.data(), x.size(), DType::fp32, ReduceOp::sum); !st) s.error = st.error();
            if (auto st = rt.mp_comm().allreduce(y.data(), y.size(), DType::fp32, ReduceOp::sum); !st) s.error = st.error();
            g.dp_sum = x[0];
            g.mp_sum = y[0];
            if (rt.dp_size() % 2 == 0) {  // the sequence-parallel pairs: built in this generation
                auto sp = rt.sp_comm(2);
                if (!sp) s.error = "sp_comm: " + sp.error();
                std::vector<float> z(2, float(rt.dp_rank() + 1));
                if (sp && !sp.value()->allreduce(z.data(), z.size(), DType::fp32, ReduceOp::sum))
                    s.error = "sp_comm(2) allreduce";
                g.sp_sum = z[0];
                if (sp) g.sp_rank = sp.value()->rank(), g.sp_size = sp.value()->size();
            }
            g.shard = mom;
            g.params = params;
            g.ledger_dp = rt.ledger()->dp_size();
            g.ga = rt.ledger()->grad_accum();
            g.ledger_step = rt.ledger()->step();
            for (std::uint32_t k = 0; k < g.ga; ++k) {
                auto mb = rt.micro_batch(k);
                if (!mb) { s.error = "micro_batch: " + mb.error(); break; }
                g.samples.insert(g.samples.end(), mb.value().begin(), mb.value().end());
            }
            if (const auto *p = rt.step_plan()) g.plan_costs = p->costs;
            s.gens.push_back(g);
        };
        // An optimizer step: the slice's parameters and this rank's shard take step s's values.
        auto step = [&](std::uint64_t st) {
            for (std::size_t i = 0; i < params.size(); ++i) params[i] = param_at(m, i, st);
            const auto r = rt.shard_range(slice_len(m));
            for (std::size_t j = 0; j < r.size(); ++j) mom[j] = mom_at(m, r.begin + j, st);
        };
        observe();
        for (std::uint64_t st = st0.value().step + 1; st <= 3; ++st) {
            step(st);
            phases.arrive_and_wait(static_cast<int>(st));
            auto b = rt.boundary(st);
            if (!b) return s.error = "boundary " + std::to_string(st) + ": " + b.error(), finish();
            s.outcomes.push_back(b.value().outcome);
            if (b.value().outcome == Outcome::Left || b.value().outcome == Outcome::Stop) break;
            observe();
        }
        finish();
    };

    std::vector<std::thread> threads;
    for (std::uint32_t u : {0u, 1u})
        for (std::uint32_t sl = 0; sl < N; ++sl) threads.emplace_back(rank_thread, u, sl, true);
    ASSERT_TRUE(phases.wait_arrived(1, 8));
    Request shrink;
    shrink.op = Op::Reshape;
    shrink.units = 1;
    call(shrink);
    phases.open(1);
    ASSERT_TRUE(phases.wait_arrived(2, 4));
    Request grow;
    grow.op = Op::Reshape;
    grow.units = 2;
    call(grow);
    for (std::uint32_t sl = 0; sl < N; ++sl) threads.emplace_back(rank_thread, 2u, sl, false);
    // The survivors' next boundary admits the new unit once all four of its ranks wait.
    bool pending = false;
    for (int i = 0; i < 1000 && !pending; ++i) {
        auto cl = CoordinatorClient::connect(ep, kSecret);
        Request r;
        r.op = Op::Status;
        auto st = cl ? cl.value()->call(r, 3000) : omni::Result<Reply>(omni::make_error("no client"));
        pending = st && st.value().body["status"]["pending_joiners"].size() >= N;
        if (!pending) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(pending) << "the joining unit's ranks never reached the coordinator";
    phases.open(2);
    ASSERT_TRUE(phases.wait_arrived(3, 8));
    Request stop;
    stop.op = Op::Stop;
    stop.reason = "test done";
    call(stop);
    phases.open(3);
    for (auto &t : threads) t.join();
    for (auto &[id, s] : seen) ASSERT_EQ(s.error, "") << id;

    // Checks one generation as seen by (unit, slot): `units` in rank order, state of step st.
    auto check = [&](const Gen &g, std::uint32_t unit, std::uint32_t slot,
                     const std::vector<std::uint32_t> &units, std::uint64_t st) {
        const std::uint32_t ui = static_cast<std::uint32_t>(
            std::find(units.begin(), units.end(), unit) - units.begin());
        const std::uint32_t m = slot % M, replica = slot / M;
        const std::uint32_t dp = static_cast<std::uint32_t>(units.size()) * (N / M);
        const std::string who = member(unit, slot) + " in a world of " + std::to_string(units.size() * N);
        EXPECT_EQ(g.world, units.size() * N) << who;
        EXPECT_EQ(g.mp_size, M) << who;
        EXPECT_EQ(g.mp_rank, m) << who;
        EXPECT_EQ(g.dp_size, dp) << who;
        EXPECT_EQ(g.dp_rank, ui * (N / M) + replica) << who;
        EXPECT_EQ(g.comm_size, int(dp)) << who;
        EXPECT_EQ(g.mp_comm_size, int(M)) << who;
        EXPECT_EQ(g.world_comm_size, int(units.size() * N)) << who;
        EXPECT_EQ(g.dp_sum, float(dp * (dp + 1) / 2)) << who;
        // The sequence-parallel pair of degree 2: DP ranks 2j and 2j+1 of the same MP index.
        const std::uint32_t dpr = ui * (N / M) + replica;
        if (dp % 2 == 0) {
            EXPECT_EQ(g.sp_size, 2) << who;
            EXPECT_EQ(g.sp_rank, int(dpr % 2)) << who;
            EXPECT_EQ(g.sp_sum, float(dpr / 2 * 4 + 3)) << who;  // (2j + 1) + (2j + 2)
        }
        // The replica's MP group: slots k*M .. k*M+M-1 of the unit.
        float mp_sum = 0;
        for (std::uint32_t i = 0; i < M; ++i) mp_sum += float(replica * M + i + 1);
        EXPECT_EQ(g.mp_sum, mp_sum) << who;
        EXPECT_EQ(g.ledger_dp, dp) << who;
        EXPECT_EQ(g.ga, 24u / dp) << who;
        EXPECT_EQ(g.shard, expected_shard(m, st, int(g.dp_rank), int(dp))) << who;
        std::vector<float> want(slice_len(m));
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = param_at(m, i, st);
        EXPECT_EQ(g.params, want) << who;
    };
    for (std::uint32_t sl = 0; sl < N; ++sl) {
        for (std::uint32_t u : {0u, 1u}) check(seen[member(u, sl)].gens.at(0), u, sl, {0, 1}, 0);
        EXPECT_EQ(seen[member(1, sl)].outcomes, std::vector<Outcome>{Outcome::Left});
        const Seen &s0 = seen[member(0, sl)];
        ASSERT_EQ(s0.gens.size(), 3u) << member(0, sl);
        check(s0.gens.at(1), 0, sl, {0}, 1);     // after the shrink: one unit, DP 2
        check(s0.gens.at(2), 0, sl, {0, 2}, 2);  // after the grow: units 0 and 2, DP 4
        const Seen &j = seen[member(2, sl)];
        ASSERT_EQ(j.gens.size(), 1u) << member(2, sl);
        check(j.gens.at(0), 2, sl, {0, 2}, 2);   // the joiner received its slice only
        EXPECT_EQ(j.outcomes, std::vector<Outcome>{Outcome::Stop});
    }

    // The balanced steps, per generation: (member, generation index) of every rank in it.
    const std::vector<std::vector<std::pair<std::string, std::size_t>>> gens = [&] {
        std::vector<std::vector<std::pair<std::string, std::size_t>>> g(3);
        for (std::uint32_t sl = 0; sl < N; ++sl) {
            g[0].push_back({member(0, sl), 0});
            g[0].push_back({member(1, sl), 0});
            g[1].push_back({member(0, sl), 1});
            g[2].push_back({member(0, sl), 2});
            g[2].push_back({member(2, sl), 0});
        }
        return g;
    }();
    for (std::size_t gi = 0; gi < gens.size(); ++gi) {
        std::map<std::uint32_t, std::vector<std::uint64_t>> by_replica;  // DP rank -> samples
        std::vector<std::uint64_t> costs;
        std::uint64_t step = 0;
        for (const auto &[id, k] : gens[gi]) {
            const Gen &g = seen[id].gens.at(k);
            step = g.ledger_step;
            if (costs.empty()) costs = g.plan_costs;
            EXPECT_EQ(g.plan_costs, costs) << id << ": every rank has the same plan";
            auto [it, fresh] = by_replica.insert({g.dp_rank, g.samples});
            if (!fresh) {
                EXPECT_EQ(it->second, g.samples) << id << ": the MP peers of a replica differ";
            }
        }
        // The step's samples from a ledger of its own, split as the ledger does.
        auto ref = Ledger::create({1000, 24, 1, 7}, 1);
        ASSERT_TRUE(ref);
        for (std::uint64_t k = 0; k < step; ++k) ASSERT_TRUE(ref.value().commit_step());
        std::vector<std::uint64_t> want = ref.value().step_samples(), got;
        const std::size_t d = by_replica.size(), share = want.size() / d;
        std::uint64_t ledger_max = 0, plan_max = 0;
        for (std::size_t r = 0; r < d; ++r) {
            std::uint64_t sum = 0;
            for (std::size_t i = r * share; i < (r + 1) * share; ++i) sum += skewed_cost(want[i], step);
            ledger_max = std::max(ledger_max, sum);
        }
        ASSERT_EQ(costs.size(), d) << "generation " << gi;
        for (auto &[r, v] : by_replica) {
            std::uint64_t sum = 0;
            for (auto i : v) sum += skewed_cost(i, step);
            EXPECT_EQ(costs[r], sum) << "replica " << r << " of generation " << gi;
            plan_max = std::max(plan_max, sum);
            got.insert(got.end(), v.begin(), v.end());
        }
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, want) << "generation " << gi << ": the replicas' samples are not the step's, once each";
        EXPECT_LE(plan_max, ledger_max) << "generation " << gi;
    }
}

INSTANTIATE_TEST_SUITE_P(OneTwoFour, RuntimeModelParallel, ::testing::Values(1u, 2u, 4u));
