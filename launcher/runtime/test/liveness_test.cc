// The heartbeat thread when the coordinator stops answering (issue #46): omni-launch killed,
// or the rank's node cut off. The rank must conclude that it is out within the liveness
// timeout (and a heartbeat), leave its collectives, and stop waiting for replies; it must not
// wait out its boundary timeout (300 s by default) or hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord/test/test_secret.h"
#include "runtime/liveness.h"

using namespace omni::launcher;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kSecret = test_secret();
constexpr std::int64_t kTimeoutMs = 600;

std::unique_ptr<Coordinator> start_coordinator(std::int64_t liveness_ms) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = cfg.protocol.max_units = 1;
    cfg.protocol.min_units = 1;
    cfg.protocol.boundary_timeout_ms = 3000;
    cfg.protocol.liveness_timeout_ms = liveness_ms;
    auto c = Coordinator::start(cfg);
    EXPECT_TRUE(c) << c.error();
    return c ? std::move(c).value() : nullptr;
}

template <class F> bool wait_until(F f, std::chrono::milliseconds limit) {
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < limit) {
        if (f()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f();
}

}  // namespace

TEST(Liveness, CoordinatorGoneMeansCutOffWithinTheTimeout) {
    auto c = start_coordinator(kTimeoutMs);
    ASSERT_TRUE(c);
    const std::string ep = c->endpoints().front();
    auto joiner = CoordinatorClient::connect(ep, kSecret);
    ASSERT_TRUE(joiner);
    ASSERT_TRUE(joiner.value()->join("r0", 0, 0, 5000));
    std::atomic<int> abandoned{0};
    Liveness::Hooks hooks;
    hooks.generation = [] { return std::uint64_t{1}; };
    hooks.abandon = [&](std::uint64_t g, bool unit_lost) {
        EXPECT_EQ(g, 1u);
        EXPECT_TRUE(unit_lost);  // out altogether: every group of the rank is left
        ++abandoned;
    };
    auto l = Liveness::start(ep, kSecret, "r0", hooks);
    ASSERT_TRUE(l) << l.error();
    Liveness &live = *l.value();
    ASSERT_TRUE(wait_until([&] { return live.lease_fresh(); }, std::chrono::milliseconds(2000)));
    // Well within the timeout, with the coordinator answering: still a member.
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * kTimeoutMs));
    EXPECT_FALSE(live.fenced());
    EXPECT_EQ(abandoned.load(), 0);
    // The coordinator goes away (omni-launch killed): no reply from now on.
    const auto t0 = Clock::now();
    c.reset();
    ASSERT_TRUE(wait_until([&] { return live.fenced(); }, std::chrono::milliseconds(5000)));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_TRUE(live.cut_off());
    EXPECT_FALSE(live.lease_fresh());
    EXPECT_EQ(abandoned.load(), 1);
    // Not long before the timeout (the last ack came about an interval before the
    // coordinator went, later on a busy machine), and within the timeout plus an interval
    // and one heartbeat's request timeout (1 s), with room for a busy machine.
    EXPECT_GE(took, kTimeoutMs / 2);
    EXPECT_LE(took, kTimeoutMs + kTimeoutMs / 8 + 1000 + 2000);
}

// Without a liveness timeout there is no lease to run out: the rank keeps waiting, as before.
TEST(Liveness, NoLivenessTimeoutNoCutOff) {
    auto c = start_coordinator(0);
    ASSERT_TRUE(c);
    const std::string ep = c->endpoints().front();
    auto joiner = CoordinatorClient::connect(ep, kSecret);
    ASSERT_TRUE(joiner);
    ASSERT_TRUE(joiner.value()->join("r0", 0, 0, 5000));
    Liveness::Hooks hooks;
    hooks.generation = [] { return std::uint64_t{1}; };
    hooks.abandon = [](std::uint64_t, bool) { ADD_FAILURE() << "abandoned without a liveness timeout"; };
    auto l = Liveness::start(ep, kSecret, "r0", hooks);
    ASSERT_TRUE(l) << l.error();
    ASSERT_TRUE(wait_until([&] { return l.value()->lease_fresh(); }, std::chrono::milliseconds(2000)));
    c.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_FALSE(l.value()->fenced());
}

// A request waiting for a reply that will never come gives up once the rank is out.
TEST(Liveness, CancelledRequestGivesUpAtOnce) {
    auto c = start_coordinator(kTimeoutMs);
    ASSERT_TRUE(c);
    auto cl = CoordinatorClient::connect(c->endpoints().front(), kSecret);
    ASSERT_TRUE(cl);
    // One answered request first: the handshake is done, so the coordinator's going away
    // below is silence, not a failed handshake.
    Request st;
    st.op = Op::Status;
    ASSERT_TRUE(cl.value()->call(st, 3000));
    std::atomic<bool> out{false};
    cl.value()->set_cancel([&] { return out.load(); });
    c.reset();  // nobody will answer
    auto setter = std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        out = true;
    });
    const auto t0 = Clock::now();
    auto d = cl.value()->boundary("r0", 1, 5, 60000);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    setter.get();
    ASSERT_FALSE(d);
    EXPECT_NE(d.error().find("out of the job"), std::string::npos) << d.error();
    EXPECT_GE(took, 250);
    EXPECT_LT(took, 2000);  // 300 ms and a 100 ms look, with room for a busy machine
}
