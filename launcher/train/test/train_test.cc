// The reference trainer's math: exact, partition-independent gradient sums; ZeRO-1 Adam that
// gives the same parameters for any DP size and resize history; the LR schedule; and the
// gradient itself against finite differences (an independent computation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>

#include "train/model.h"
#include "train/optim.h"
#include "omni/ckpt_cpp.h"
#include "train/state_io.h"

using namespace omni::train;

namespace {

std::vector<std::uint64_t> iota_indices(std::uint64_t from, std::uint64_t n) {
    std::vector<std::uint64_t> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
}

void add(Accum &into, const Accum &a) {
    for (std::size_t k = 0; k < into.v.size(); ++k) into.v[k] += a.v[k];
    into.clamped += a.clamped;
}

// One optimizer step of a simulated DP job: `world` ranks, each with its contiguous part of
// the batch (micro-batches of `micro`), summed exactly (the allreduce), then each rank
// updates its ZeRO shard of the shared parameters (the allgather). Returns the step loss.
double dp_step(std::vector<float> &params, std::vector<AdamShard> &shards, const DataSpec &data,
               const std::vector<std::uint64_t> &batch, std::size_t micro, const LrSchedule &lr,
               std::uint64_t step) {
    const int world = static_cast<int>(shards.size());
    Accum total;
    const std::size_t per_rank = batch.size() / static_cast<std::size_t>(world);
    for (int r = 0; r < world; ++r) {
        Accum mine;
        for (std::size_t off = 0; off < per_rank; off += micro)  // gradient accumulation
            accumulate(params, data, batch.data() + r * per_rank + off, micro, mine);
        add(total, mine);
    }
    const auto grad = mean_gradient(total, batch.size());
    for (auto &s : shards) s.update(params.data(), grad, lr.at(step), step + 1);
    return mean_loss(total, batch.size());
}

// Re-partitions the moments for a new world size, as the runtime's state hand-off does.
std::vector<AdamShard> reshard(const std::vector<AdamShard> &old, int world) {
    std::vector<float> m(kParams), v(kParams);
    for (const auto &s : old)
        for (std::size_t i = 0; i < s.range.size(); ++i) {
            m[s.range.begin + i] = s.m[i];
            v[s.range.begin + i] = s.v[i];
        }
    std::vector<AdamShard> out;
    for (int r = 0; r < world; ++r) {
        AdamShard s(shard_range(kParams, r, world));
        for (std::size_t i = 0; i < s.range.size(); ++i) {
            s.m[i] = m[s.range.begin + i];
            s.v[i] = v[s.range.begin + i];
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<AdamShard> shards_for(int world) {
    std::vector<AdamShard> s;
    for (int r = 0; r < world; ++r) s.emplace_back(shard_range(kParams, r, world));
    return s;
}

}  // namespace

TEST(TrainModel, SumsDoNotDependOnPartitionOrOrder) {
    const DataSpec data{7, 4096};
    const auto params = init_params(3);
    auto idx = iota_indices(100, 60);
    Accum whole;
    accumulate(params, data, idx.data(), idx.size(), whole);
    // Uneven parts, summed in another order.
    Accum a, b, c, parts;
    accumulate(params, data, idx.data() + 41, 19, c);
    accumulate(params, data, idx.data(), 7, a);
    accumulate(params, data, idx.data() + 7, 34, b);
    add(parts, c);
    add(parts, a);
    add(parts, b);
    EXPECT_EQ(parts.v, whole.v);
    EXPECT_EQ(whole.clamped, 0u);
}

TEST(TrainModel, GradientMatchesFiniteDifferences) {
    const DataSpec data{11, 1024};
    auto p = init_params(5);
    const std::uint64_t i = 17;
    Accum acc;
    accumulate(p, data, &i, 1, acc);
    const auto g = mean_gradient(acc, 1);
    EXPECT_NEAR(mean_loss(acc, 1), sample_loss(p, data, i), 1e-9);
    // Central differences in double through the independent loss function, on a spread of
    // parameters from every block (W1, b1, W2, b2).
    for (std::size_t k : {std::size_t(0), std::size_t(37), std::size_t(kHidden * kIn + 3),
                          std::size_t(kHidden * kIn + kHidden + 5), kParams - 1}) {
        const float saved = p[k];
        const float h = 1e-3f;
        p[k] = saved + h;
        const double up = sample_loss(p, data, i);
        p[k] = saved - h;
        const double down = sample_loss(p, data, i);
        p[k] = saved;
        const double fd = (up - down) / (static_cast<double>(saved + h) - static_cast<double>(saved - h));
        EXPECT_NEAR(g[k], fd, 1e-4 + 1e-3 * std::fabs(fd)) << "parameter " << k;
    }
}

TEST(TrainOptim, LrScheduleByHand) {
    LrSchedule lr;  // base 0.01, warmup 20, total 1000, min ratio 0.1
    EXPECT_DOUBLE_EQ(lr.at(0), 0.0005);
    EXPECT_DOUBLE_EQ(lr.at(19), 0.01);
    EXPECT_DOUBLE_EQ(lr.at(20), 0.01);              // progress 0: cos 0 = 1
    EXPECT_NEAR(lr.at(510), 0.0055, 1e-15);         // progress 1/2: 0.01 * (0.1 + 0.9 / 2)
    EXPECT_NEAR(lr.at(1000), 0.001, 1e-15);
    EXPECT_NEAR(lr.at(5000), 0.001, 1e-15);
}

TEST(TrainOptim, AdamFirstStepByHand) {
    // g = 0.5, t = 1: m = 0.05, v = 0.00025; bias-corrected m = 0.5, v = 0.25; the step is
    // lr * 0.5 / (0.5 + 1e-8) ~ lr.
    AdamShard s(Range{0, 1});
    std::vector<float> p{1.0f};
    s.update(p.data(), {0.5}, 0.01, 1);
    EXPECT_FLOAT_EQ(p[0], 0.99f);
    EXPECT_FLOAT_EQ(s.m[0], 0.05f);
    EXPECT_FLOAT_EQ(s.v[0], 0.00025f);
}

TEST(TrainOptim, ShardRanges) {
    EXPECT_EQ(shard_range(10, 0, 3).begin, 0u);
    EXPECT_EQ(shard_range(10, 0, 3).end, 4u);
    EXPECT_EQ(shard_range(10, 1, 3).begin, 4u);
    EXPECT_EQ(shard_range(10, 1, 3).end, 7u);
    EXPECT_EQ(shard_range(10, 2, 3).end, 10u);
    EXPECT_EQ(shard_range(2, 3, 4).size(), 0u);  // more ranks than parameters: empty shards
}

TEST(TrainLoop, SameLossAndParamsForAnyDpSizeAndResizes) {
    const DataSpec data{42, 8192};
    LrSchedule lr;
    lr.base = 0.02;
    lr.total = 160;
    const std::size_t B = 48;  // divisible by b * d for d in {1, 2, 3, 4} with b = 4
    auto run = [&](const std::vector<int> &worlds) {
        std::vector<float> p = init_params(9);
        std::vector<AdamShard> shards = shards_for(worlds[0]);
        std::vector<double> losses;
        for (std::uint64_t step = 0; step < 160; ++step) {
            const int world = worlds[step * worlds.size() / 160];
            if (static_cast<int>(shards.size()) != world) shards = reshard(shards, world);
            losses.push_back(dp_step(p, shards, data, iota_indices(step * B, B), 4, lr, step));
        }
        return std::make_pair(losses, p);
    };
    const auto fixed = run({4});
    const auto elastic = run({4, 2, 3, 4});   // 4 -> 2 -> 3 -> 4, every 40 steps
    const auto single = run({1});
    EXPECT_EQ(fixed.first, elastic.first);    // bitwise, every step
    EXPECT_EQ(fixed.second, elastic.second);
    EXPECT_EQ(fixed.first, single.first);
    EXPECT_EQ(fixed.second, single.second);
    const auto &l = fixed.first;
    const double first = std::accumulate(l.begin(), l.begin() + 10, 0.0) / 10;
    const double last = std::accumulate(l.end() - 10, l.end(), 0.0) / 10;
    EXPECT_LT(last, 0.5 * first) << "the model does not learn";
}

namespace {

// Where each tensor starts in the whole model's flat vector (model.h: W1, b1, W2, b2).
std::size_t tensor_start(std::size_t t) {
    const std::size_t starts[4] = {0, std::size_t(kHidden) * kIn, std::size_t(kHidden) * (kIn + 1),
                                   std::size_t(kHidden) * (kIn + 2)};
    return starts[t];
}

// The slice's flat vector cut from a whole-model vector (the test's own copy of the layout
// model.h describes: W1 rows, b1 part, W2 part, b2).
std::vector<float> cut_slice(const std::vector<float> &whole, const Slice &s) {
    std::vector<float> out;
    const std::size_t h0 = s.h0(), h1 = s.h1();
    for (std::size_t j = h0; j < h1; ++j)
        for (std::size_t i = 0; i < std::size_t(kIn); ++i) out.push_back(whole[j * kIn + i]);
    for (std::size_t j = h0; j < h1; ++j) out.push_back(whole[tensor_start(1) + j]);
    for (std::size_t j = h0; j < h1; ++j) out.push_back(whole[tensor_start(2) + j]);
    out.push_back(whole[tensor_start(3)]);
    return out;
}

}  // namespace

TEST(TrainModel, ModelParallelSlicesGiveTheWholeModelsSumsExactly) {
    const DataSpec data{11, 5000};
    // Not the initial values (b1 = 0 there): every parameter moved a little.
    std::vector<float> whole = init_params(4);
    for (std::size_t k = 0; k < whole.size(); ++k) whole[k] += 0.001f * float(int(k % 7) - 3);
    const auto idx = iota_indices(100, 40);
    Accum one;
    accumulate(whole, data, idx.data(), idx.size(), one);
    EXPECT_FALSE(valid_mp(3));
    EXPECT_FALSE(valid_mp(0));
    EXPECT_FALSE(valid_mp(64));
    std::vector<std::int64_t> total;
    for (int M : {1, 2, 4, 8, 32}) {
        ASSERT_TRUE(valid_mp(M));
        std::vector<std::vector<float>> params;
        std::vector<std::vector<double>> hidden(M);
        total.assign(idx.size(), 0);
        std::uint64_t clamped = 0;
        for (int m = 0; m < M; ++m) {
            const Slice s{m, M};
            params.push_back(cut_slice(whole, s));
            ASSERT_EQ(params.back().size(), s.params());
            EXPECT_EQ(init_params(4, s), cut_slice(init_params(4), s)) << "M=" << M << " m=" << m;
            std::vector<std::int64_t> part(idx.size());
            partial_outputs(params.back(), s, data, idx.data(), idx.size(), hidden[m], part.data(), clamped);
            for (std::size_t i = 0; i < idx.size(); ++i) total[i] += part[i];  // the MP allreduce
        }
        for (int m = 0; m < M; ++m) {
            const Slice s{m, M};
            Accum acc(s.params());
            accumulate(params[m], s, data, idx.data(), idx.size(), hidden[m], total.data(), acc);
            // Every gradient sum and the loss sum, bit for bit the single rank's.
            std::vector<std::int64_t> whole_sums(one.v.begin(), one.v.end() - 1);
            std::vector<std::int64_t> mine(acc.v.begin(), acc.v.end() - 1), want;
            const std::size_t h0 = s.h0(), h1 = s.h1();
            for (std::size_t j = h0; j < h1; ++j)
                for (std::size_t i = 0; i < std::size_t(kIn); ++i) want.push_back(whole_sums[j * kIn + i]);
            for (std::size_t j = h0; j < h1; ++j) want.push_back(whole_sums[tensor_start(1) + j]);
            for (std::size_t j = h0; j < h1; ++j) want.push_back(whole_sums[tensor_start(2) + j]);
            want.push_back(whole_sums[tensor_start(3)]);
            EXPECT_EQ(mine, want) << "M=" << M << " m=" << m;
            EXPECT_EQ(acc.v.back(), one.v.back()) << "loss, M=" << M << " m=" << m;
        }
    }
}

TEST(TrainModel, SliceSegmentsCoverEveryTensorOnce) {
    for (int M : {1, 2, 4, 16}) {
        std::vector<std::vector<int>> owners;
        for (const TensorSpec &t : model_tensors()) owners.emplace_back(t.length, 0);
        for (int m = 0; m < M; ++m) {
            std::size_t local = 0;
            for (const Segment &g : slice_segments(Slice{m, M})) {
                EXPECT_EQ(g.local, local) << "segments are the slice's vector in order";
                local += g.length;
                if (g.replicated && m != 0) continue;
                for (std::size_t k = g.begin; k < g.begin + g.length; ++k) ++owners[g.tensor][k];
            }
            EXPECT_EQ(local, Slice({m, M}).params());
        }
        for (const auto &o : owners)
            for (int c : o) ASSERT_EQ(c, 1) << "M=" << M;
    }
}

namespace {

// The logical values the checkpoint test writes: parameter k of the whole model, and its
// two Adam moments.
float lp(std::size_t k) { return 0.5f * float(k) + 0.25f; }
float lm(std::size_t k) { return -float(k); }
float lv(std::size_t k) { return 2.0f * float(k) + 1.0f; }

std::vector<float> whole_of(float (*f)(std::size_t)) {
    std::vector<float> w(kParams);
    for (std::size_t k = 0; k < kParams; ++k) w[k] = f(k);
    return w;
}

TrainState state_for(const StateRank &at) {
    TrainState s;
    s.step = 7;
    s.generation = 2;
    s.lr = LrSchedule{};
    s.ledger_json = "{\"not\": \"read here\"}";
    s.params = cut_slice(whole_of(lp), at.slice);
    s.adam = AdamShard(shard_range(s.params.size(), at.dp_rank, at.dp_size));
    const auto m = cut_slice(whole_of(lm), at.slice), v = cut_slice(whole_of(lv), at.slice);
    for (std::size_t j = 0; j < s.adam.range.size(); ++j) {
        s.adam.m[j] = m[s.adam.range.begin + j];
        s.adam.v[j] = v[s.adam.range.begin + j];
    }
    return s;
}

}  // namespace

TEST(TrainState, ACheckpointOfOneLayoutLoadsInAnother) {
    char tmpl[] = "/tmp/omni-train-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string root = tmpl;
    // Written by M = 2 x DP = 3: six writers, world ranks unit-major as the runtime numbers them.
    int writer = 0;
    for (int dp = 0; dp < 3; ++dp)
        for (int m = 0; m < 2; ++m) {
            const StateRank at{writer++, Slice{m, 2}, dp, 3};
            auto st = save_shard(root, state_for(at), at);
            ASSERT_TRUE(st) << st.error();
        }
    auto c = commit_state(root, state_for({0, Slice{0, 2}, 0, 3}), 6);
    ASSERT_TRUE(c) << c.error();
    // Read back at M = 1, 2, 4 and other DP sizes: every rank gets the logical values.
    for (int M : {1, 2, 4})
        for (int D : {1, 2, 5})
            for (int m = 0; m < M; ++m)
                for (int r = 0; r < D; ++r) {
                    const StateRank at{0, Slice{m, M}, r, D};
                    TrainState got;
                    auto l = load_latest(root, at, got);
                    ASSERT_TRUE(l) << l.error();
                    ASSERT_TRUE(l.value());
                    const TrainState want = state_for(at);
                    EXPECT_EQ(got.step, 7u);
                    EXPECT_EQ(got.params, want.params) << "M=" << M << " m=" << m;
                    EXPECT_EQ(got.adam.range.begin, want.adam.range.begin);
                    EXPECT_EQ(got.adam.m, want.adam.m) << "M=" << M << " m=" << m << " D=" << D << " r=" << r;
                    EXPECT_EQ(got.adam.v, want.adam.v) << "M=" << M << " m=" << m << " D=" << D << " r=" << r;
                    EXPECT_EQ(got.ledger_json, want.ledger_json);
                }
    std::string cmd = "rm -rf '" + root + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(TrainState, ACheckpointOfAnotherModelIsRefusedByTensor) {
    char tmpl[] = "/tmp/omni-train-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string root = tmpl;
    // One writer, the whole model under the single name an older omni-train-demo used.
    auto w = omni::ckpt::ShardWriter::open(root, 3, 0);
    ASSERT_TRUE(w) << w.error();
    std::vector<float> p(kParams, 1.0f);
    const omni::ckpt::Shape all{kParams};
    ASSERT_TRUE(w.value()->add_tensor("model/params", omni::ckpt::DType::fp32, all, {0}, all, p.data(),
                                      omni::ckpt::Change::changed));
    omni::ckpt::RankState rs;
    ASSERT_TRUE(w.value()->add_rank_state(rs));
    ASSERT_TRUE(w.value()->finish());
    omni::ckpt::Meta meta;
    meta.step = 3;
    meta.world_size = 1;
    meta.lr.kind = "warmup_cosine";
    ASSERT_TRUE(omni::ckpt::commit(root, 1, meta));
    TrainState got;
    auto l = load_latest(root, StateRank{}, got);
    ASSERT_FALSE(l);
    EXPECT_NE(l.error().find("no tensor model/W1"), std::string::npos) << l.error();
    std::string cmd = "rm -rf '" + root + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
}
