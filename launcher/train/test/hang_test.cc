// A hung rank (issue #46), without Slurm: four omni-train-demo processes under a coordinator
// on 127.0.0.1 with liveness on (boundary timeout 3 s, as omni-launch sets it). Rank 0 (the
// one that writes the metrics and commits checkpoints) is stopped with SIGSTOP in the middle
// of training: its sockets stay open, so the others wait for it inside a collective. Checked:
//  - the other three reach generation 2 of world 3 within the boundary timeout + 3 s, and
//    finish every step (exit 0);
//  - resumed with SIGCONT while they still train, the stopped rank exits 1 (fenced out)
//    without a metrics line or a checkpoint: the metrics hold each step once, in order, the
//    steps after the loss at world 3, and every checkpoint after the loss is of generation 2;
//  - the coordinator made no further change for it (still generation 2, one loss).
// Without liveness (liveness_timeout_ms left at 0, tried 2026-12-07) the survivors wait for
// the stopped rank inside a collective, never reach the boundary, and the test fails with
// "no new generation 8 s after SIGSTOP" (the coordinator still at generation 1, step 8).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "coord/client.h"
#include "coord/test/served_coordinator.h"
#include "omni/ckpt_cpp.h"

using namespace omni::launcher;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kTimeoutMs = 3000;  // boundary and liveness timeout
constexpr int kRanks = 4, kSteps = 60, kVictim = 0;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The child processes, killed (and continued first) whatever the test's outcome.
struct Ranks {
    std::vector<pid_t> pids;
    ~Ranks() {
        for (pid_t p : pids)
            if (p > 0) {
                ::kill(p, SIGCONT);
                ::kill(p, SIGKILL);
                ::waitpid(p, nullptr, 0);
            }
    }
    // Exit status of pids[i] within `secs`, or -1.
    int wait(std::size_t i, double secs) {
        const auto t0 = Clock::now();
        while (seconds_since(t0) < secs) {
            int status = 0;
            if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                pids[i] = -1;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }
};

pid_t spawn_rank(const std::string &demo, const fs::path &dir, int unit) {
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    // No job around this one: the ranks get only what is set here.
    for (const char *v : {"OMNI_COORD_ADDR", "OMNI_COORD_SECRET", "OMNI_CKPT_DIR", "OMNI_CKPT_EVERY",
                          "OMNI_GLOBAL_BATCH", "OMNI_MICRO_BATCH", "OMNI_MP", "OMNI_ELASTIC_MIN", "OMNI_ELASTIC_MAX",
                          "SLURM_PROCID", "PMIX_RANK", "PMIX_NAMESPACE"})
        ::unsetenv(v);
    ::setenv("OMNI_JOB_DIR", (dir / "job").c_str(), 1);
    ::setenv("OMNI_UNIT_ID", std::to_string(unit).c_str(), 1);
    ::setenv("OMNI_UNIT_SLOT", "0", 1);
    ::setenv("OMNI_UNIT_SIZE", "1", 1);
    ::setenv("OMNI_MEMBER_ID", ("unit-" + std::to_string(unit)).c_str(), 1);
    ::setenv("OMNI_GLOO_HOST", "127.0.0.1", 1);
    ::setenv("OMNI_JOIN_TIMEOUT_MS", "60000", 1);
    const std::string log = (dir / ("rank-" + std::to_string(unit) + ".log")).string();
    if (!std::freopen(log.c_str(), "w", stderr) || !std::freopen("/dev/null", "w", stdout)) ::_exit(120);
    const std::string ckpt = (dir / "ckpt").string(), metrics = (dir / "metrics.jsonl").string();
    const std::string steps = std::to_string(kSteps);
    // B = 48, b = 4: GA is whole at world 4 (3) and at world 3 (4).
    ::execl(demo.c_str(), demo.c_str(), "--steps", steps.c_str(), "--global-batch", "48", "--micro-batch", "4",
            "--ckpt", ckpt.c_str(), "--ckpt-every", "5", "--metrics", metrics.c_str(), "--pace-ms", "100",
            static_cast<char *>(nullptr));
    ::_exit(127);
}

nlohmann::json status(CoordinatorClient &c) {
    Request r;
    r.op = Op::Status;
    auto s = c.call(r, 2000);
    return s ? s.value().body["status"] : nlohmann::json();
}

std::string slurp(const fs::path &p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST(HungRank, StoppedRankIsLostThenFencedOut) {
    const char *demo = std::getenv("OMNI_TRAIN_DEMO");
    if (!demo || !*demo) GTEST_SKIP() << "OMNI_TRAIN_DEMO is not set (make check sets it)";
    char tmpl[] = "/tmp/omni-hang-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const fs::path dir(tmpl);
    struct Cleanup {
        fs::path d;
        ~Cleanup() {
            std::error_code ec;
            if (!::testing::Test::HasFailure()) fs::remove_all(d, ec);
        }
    } cleanup{dir};
    ASSERT_EQ(::mkdir((dir / "job").c_str(), 0700), 0);

    ProtocolConfig pc;
    pc.unit_size = 1;
    pc.initial_units = pc.max_units = kRanks;
    pc.min_units = 1;
    pc.boundary_timeout_ms = pc.liveness_timeout_ms = kTimeoutMs;  // as omni-launch sets them
    auto served = test::serve_coordinator("hang_test", (dir / "job").string(), pc);
    ASSERT_TRUE(served);
    auto ctl = CoordinatorClient::connect(served->endpoint, served->secret);
    ASSERT_TRUE(ctl) << ctl.error();

    Ranks ranks;
    for (int u = 0; u < kRanks; ++u) ranks.pids.push_back(spawn_rank(demo, dir, u));

    // Training in generation 1, past its first checkpoint (step 5).
    auto t = Clock::now();
    nlohmann::json s;
    while (seconds_since(t) < 60) {
        s = status(*ctl.value());
        if (s.is_object() && s["generation"] == 1 && s["last_step"].get<std::uint64_t>() >= 8) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(s.is_object() && s["last_step"].get<std::uint64_t>() >= 8) << s.dump() << "\n"
                                                                           << slurp(dir / "rank-0.log");
    ASSERT_EQ(::kill(ranks.pids[kVictim], SIGSTOP), 0);
    const auto stopped = Clock::now();
    const std::uint64_t stop_step = status(*ctl.value())["last_step"].get<std::uint64_t>();

    // The survivors' new generation, within the stated bound.
    const double bound = kTimeoutMs / 1000.0 + 3.0;
    double detected = -1;
    while (seconds_since(stopped) < bound + 2.0) {
        s = status(*ctl.value());
        if (s.is_object() && s["generation"].get<std::uint64_t>() >= 2) {
            detected = seconds_since(stopped);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::cerr << "hang_test: stopped after step " << stop_step << "; generation 2 after " << detected << " s\n";
    ASSERT_GE(detected, 0.0) << "no new generation " << bound + 2.0 << " s after SIGSTOP: " << s.dump();
    EXPECT_LE(detected, bound);
    EXPECT_GE(detected, kTimeoutMs / 1000.0 - 0.5);  // lost for its silence, not earlier
    EXPECT_EQ(s["generation"], 2);
    EXPECT_EQ(s["world"], 3);
    EXPECT_EQ(s["last_resize"]["kind"], "lost") << s.dump();
    EXPECT_EQ(s["unit_ids"], nlohmann::json::array({1, 2, 3})) << s.dump();

    // Resumed while the others still train: fenced out, it exits 1 and changes nothing.
    t = Clock::now();
    while (seconds_since(t) < 30 && status(*ctl.value())["last_step"].get<std::uint64_t>() < stop_step + 3)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::kill(ranks.pids[kVictim], SIGCONT), 0);
    EXPECT_EQ(ranks.wait(kVictim, 15), 1) << slurp(dir / "rank-0.log");
    EXPECT_NE(slurp(dir / "rank-0.log").find("fenced out"), std::string::npos) << slurp(dir / "rank-0.log");
    for (int u = 0; u < kRanks; ++u) {
        if (u == kVictim) continue;
        EXPECT_EQ(ranks.wait(static_cast<std::size_t>(u), 120), 0) << slurp(dir / ("rank-" + std::to_string(u) + ".log"));
    }

    s = status(*ctl.value());
    EXPECT_EQ(s["generation"], 2) << s.dump();
    EXPECT_EQ(s["changes"]["lost"], 1) << s.dump();

    // Each step once, in order; after the loss at world 3 in generation 2.
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    std::uint64_t n = 0;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        ++n;
        ASSERT_EQ(j["step"], n) << line;
        if (n > stop_step + 1) {
            EXPECT_EQ(j["world"], 3) << line;
            EXPECT_EQ(j["generation"], 2) << line;
        }
    }
    EXPECT_EQ(n, static_cast<std::uint64_t>(kSteps));
    // Checkpoints: generation 1's none past the stop, every later one of the three.
    auto list = omni::ckpt::list((dir / "ckpt").string());
    ASSERT_TRUE(list) << list.error();
    std::size_t after = 0;
    for (const auto &e : list.value()) {
        if (!e.complete) continue;
        if (e.generation == 1) {
            EXPECT_LE(e.step, stop_step + 1) << e.name;
            EXPECT_EQ(e.world_size, 4u) << e.name;
        } else {
            EXPECT_EQ(e.generation, 2u) << e.name;
            EXPECT_EQ(e.world_size, 3u) << e.name;
            EXPECT_EQ(e.writers, 3u) << e.name;
            ++after;
        }
    }
    EXPECT_GT(after, 0u);
}
