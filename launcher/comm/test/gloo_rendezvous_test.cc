// Gloo over the coordinator: three ranks (threads, 127.0.0.1) join, build a Gloo TCP context
// through CoordinatorStore and allreduce; then a planned shrink to two units and a fresh
// context under the next generation's keys, with the new rank numbers.
#include "config.h"
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo_store.h"
#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord/test/test_secret.h"

using namespace omni::launcher;
using omni::Result;

namespace {

const std::string kSecret = test_secret();
constexpr std::size_t kCount = 1000;

// Allreduce of x[i] = (unit + 1) * i over a fresh context of this generation.
std::vector<float> allreduce_once(CoordinatorClient &cl, const Decision &d, std::uint32_t unit) {
    auto rank = d.next.rank_of(unit, 0);
    EXPECT_TRUE(rank);
    CoordinatorStore store(cl, d.next.generation, std::chrono::seconds(10));
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(rank.value_or(0)),
                                                           static_cast<int>(d.next.world));
    ctx->setTimeout(std::chrono::seconds(10));
#ifdef OMNI_GLOO_STORE_SHARED_PTR
    ctx->connectFullMesh(std::shared_ptr<gloo::rendezvous::Store>(std::shared_ptr<void>(), &store), dev);
#else
    ctx->connectFullMesh(store, dev);
#endif
    std::vector<float> x(kCount);
    for (std::size_t i = 0; i < kCount; ++i) x[i] = static_cast<float>((unit + 1) * i);
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(x.data(), x.size());
    opts.setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
    return x;
}

}  // namespace

TEST(GlooRendezvous, ThreeRanksThenTwoAfterAShrink) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = 3;
    cfg.protocol.min_units = 1;
    cfg.protocol.max_units = 3;
    cfg.protocol.boundary_timeout_ms = 10000;
    auto coord = Coordinator::start(cfg);
    ASSERT_TRUE(coord) << coord.error();
    const std::string ep = coord.value()->endpoints().front();

    std::mutex m;
    std::condition_variable cv;
    int first_done = 0;
    bool reshape_requested = false;
    std::vector<std::vector<float>> gen1(3), gen2(3);
    std::vector<std::uint32_t> gen2_rank(3, 99);
    std::vector<bool> left(3, false);
    std::vector<std::string> errors(3);

    auto rank = [&](std::uint32_t unit) {
        try {
            auto cl = CoordinatorClient::connect(ep, kSecret);
            if (!cl) throw std::runtime_error(cl.error());
            std::string id = "gloo-" + std::to_string(unit);
            auto d = cl.value()->join(id, unit, 0, 10000);
            if (!d) throw std::runtime_error(d.error());
            gen1[unit] = allreduce_once(*cl.value(), d.value(), unit);
            {
                std::unique_lock<std::mutex> lk(m);
                ++first_done;
                cv.notify_all();
                cv.wait(lk, [&] { return reshape_requested; });
            }
            auto b = cl.value()->boundary(id, d.value().next.generation, 1, 10000);
            if (!b) throw std::runtime_error(b.error());
            if (b.value().kind != DecisionKind::Reshaped) throw std::runtime_error("not reshaped");
            auto me = b.value().next.rank_of(unit, 0);
            if (!me) {
                left[unit] = true;
                return;
            }
            gen2_rank[unit] = *me;
            gen2[unit] = allreduce_once(*cl.value(), b.value(), unit);
        } catch (const std::exception &e) {
            errors[unit] = e.what();
        }
    };
    std::vector<std::thread> threads;
    for (std::uint32_t u = 0; u < 3; ++u) threads.emplace_back(rank, u);
    {
        std::unique_lock<std::mutex> lk(m);
        bool ok = cv.wait_for(lk, std::chrono::seconds(20), [&] { return first_done == 3; });
        EXPECT_TRUE(ok) << "generation 1 allreduce did not finish";
    }
    auto ctl = CoordinatorClient::connect(ep, kSecret);
    ASSERT_TRUE(ctl);
    Request r;
    r.op = Op::Reshape;
    r.units = 2;
    EXPECT_TRUE(ctl.value()->call(r, 3000));
    {
        std::lock_guard<std::mutex> lk(m);
        reshape_requested = true;
    }
    cv.notify_all();
    for (auto &t : threads) t.join();
    for (std::uint32_t u = 0; u < 3; ++u) ASSERT_EQ(errors[u], "") << "unit " << u;

    // Generation 1: sum over units 0,1,2 of (unit+1)*i = 6i.
    for (std::uint32_t u = 0; u < 3; ++u) {
        ASSERT_EQ(gen1[u].size(), kCount);
        for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(gen1[u][i], 6.0f * i) << u << " " << i;
    }
    // The shrink removes the last unit; units 0 and 1 keep ranks 0 and 1 and sum 3i.
    EXPECT_TRUE(left[2]);
    EXPECT_EQ(gen2_rank[0], 0u);
    EXPECT_EQ(gen2_rank[1], 1u);
    for (std::uint32_t u = 0; u < 2; ++u) {
        ASSERT_EQ(gen2[u].size(), kCount);
        for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(gen2[u][i], 3.0f * i) << u << " " << i;
    }
}
