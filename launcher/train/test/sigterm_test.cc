// SIGTERM to ranks under a coordinator (Runtime::request_stop): a coordinator on 127.0.0.1
// and two ranks as threads. The process gets SIGTERM while they train, as Slurm's
// preemption delivers it to a step's tasks (with the default disposition it would kill
// them); both ranks must receive STOP at one and the
// same boundary, soon after, with the signal as the reason, and none may fail. Its own
// binary: the signal is held process-wide, so it would stop any later test's ranks too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "coord/client.h"
#include "coord/coordinator.h"
#include "coord/test/test_secret.h"
#include "runtime/runtime.h"

using namespace omni::launcher;

namespace {

struct Seen {
    std::string error;
    std::uint64_t stop_step = 0;
    std::string reason;
};

RuntimeOptions rank_options(const std::string &ep, std::uint32_t unit) {
    RuntimeOptions o;
    o.endpoint = ep;
    o.secret = test_secret();
    o.member_id = "unit-" + std::to_string(unit);
    o.unit = unit;
    o.gloo_host = "127.0.0.1";
    o.join_timeout_ms = o.boundary_timeout_ms = o.comm_timeout_ms = 20000;
    return o;
}

}  // namespace

// A program that ignores SIGTERM (a satellite's ranks) keeps ignoring it: runs first, while
// nothing has been held yet.
TEST(RuntimeSigterm, IgnoredStaysIgnored) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = test_secret();
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = cfg.protocol.min_units = cfg.protocol.max_units = 1;
    auto c = Coordinator::start(cfg);
    ASSERT_TRUE(c) << c.error();
    struct sigaction ign {}, now {};
    ign.sa_handler = SIG_IGN;
    ASSERT_EQ(sigaction(SIGTERM, &ign, nullptr), 0);
    auto rt = Runtime::create(rank_options(c.value()->endpoints().front(), 0));
    ASSERT_TRUE(rt) << rt.error();
    ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, SIG_IGN);
    sigset_t mask;
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
    EXPECT_FALSE(sigismember(&mask, SIGTERM));
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ASSERT_EQ(sigaction(SIGTERM, &dfl, nullptr), 0);
}

TEST(RuntimeSigterm, StopsEveryRankAtOneBoundary) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = test_secret();
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = cfg.protocol.max_units = 2;
    cfg.protocol.min_units = 1;
    cfg.protocol.boundary_timeout_ms = 20000;
    // Every thread blocks SIGTERM (the coordinator's and the ranks' inherit this thread's
    // mask), as in a rank that from_environment() started: the signal stays pending, and
    // the ranks' next boundary takes it.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, nullptr), 0);
    auto c = Coordinator::start(cfg);
    ASSERT_TRUE(c) << c.error();
    const std::string ep = c.value()->endpoints().front();

    constexpr std::uint64_t kSignalAt = 5, kMaxSteps = 200;
    std::atomic<int> at_signal_step{0};
    Seen seen[2];
    auto rank = [&](std::uint32_t unit) {
        Seen &s = seen[unit];
        auto rt = Runtime::create(rank_options(ep, unit));
        if (!rt) return void(s.error = "create: " + rt.error());
        auto st = rt.value()->start();
        if (!st) return void(s.error = "start: " + st.error());
        for (std::uint64_t step = 1; step <= kMaxSteps; ++step) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            if (step == kSignalAt) at_signal_step++;
            auto b = rt.value()->boundary(step);
            if (!b) return void(s.error = "boundary " + std::to_string(step) + ": " + b.error());
            if (b.value().outcome == Outcome::Stop) {
                s.stop_step = step;
                s.reason = b.value().reason;
                return;
            }
            if (b.value().outcome != Outcome::Continue)
                return void(s.error = std::string("unexpected ") + to_string(b.value().outcome));
        }
    };
    std::thread t0(rank, 0), t1(rank, 1);
    for (int i = 0; i < 1000 && at_signal_step.load() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(at_signal_step.load(), 2);
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    t0.join();
    t1.join();
    for (const Seen &s : seen) {
        EXPECT_EQ(s.error, "");
        EXPECT_EQ(s.reason.rfind("SIGTERM to rank ", 0), 0u) << s.reason;
        // Within a few steps of the signal, not at the end of the run.
        EXPECT_GE(s.stop_step, kSignalAt);
        EXPECT_LE(s.stop_step, kSignalAt + 5);
    }
    EXPECT_EQ(seen[0].stop_step, seen[1].stop_step);
    EXPECT_EQ(seen[0].reason, seen[1].reason);
}

// A process a rank forks is not a rank: SIGTERM is neither blocked nor handled in it, and
// kills it as it would any process. Runs after the tests above, with SIGTERM held here.
TEST(RuntimeSigterm, ForkedChildrenGetSigtermBack) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
    ASSERT_NE(now.sa_handler, SIG_DFL) << "the runtime holds SIGTERM in this process";
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, nullptr), 0);  // as in a rank's threads
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(pipefd[0]);
        if (::write(pipefd[1], "x", 1) != 1) ::_exit(3);
        // Ended by the signal; a child that survives it says so by exiting 7 after 5 s.
        for (int i = 0; i < 50; ++i) ::usleep(100000);
        ::_exit(7);
    }
    ::close(pipefd[1]);
    char c;
    ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
    ::close(pipefd[0]);
    ASSERT_EQ(::kill(child, SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
}
