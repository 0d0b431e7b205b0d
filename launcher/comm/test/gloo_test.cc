// The Gloo communicator with 3 ranks (threads) on 127.0.0.1, rendezvous through Gloo's
// in-memory HashStore. Expected results are computed here from the inputs' formulas.
#include <gtest/gtest.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/bf16.h"
#include "comm/comm.h"
#include "comm/test/gloo_ranks.h"

using namespace omni::launcher;

namespace {

constexpr int kRanks = 3;

// Runs body(comm) on kRanks threads, each with its own communicator.
void on_ranks(const std::function<void(Communicator &)> &body,
              const std::function<GlooOptions(int)> &options = {}) {
    omni::launcher::test::on_gloo_ranks(kRanks, body, options);
}

}  // namespace

TEST(GlooComm, AllreduceFp32SumAndAvg) {
    const std::size_t n = 1000003;  // odd and > 1 MiB of floats: several segments per rank
    on_ranks([&](Communicator &c) {
        std::vector<float> a(n), b(n);
        for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<float>((c.rank() + 1) * (i % 1000)) + 0.5f;
        ASSERT_TRUE(c.allreduce(a.data(), n, DType::fp32, ReduceOp::sum).ok());
        ASSERT_TRUE(c.allreduce(b.data(), n, DType::fp32, ReduceOp::avg).ok());
        // sum over r of (r+1)*k + 0.5 = 6k + 1.5; the mean is 2k + 0.5 (exact in fp32 here)
        for (std::size_t i = 0; i < n; i += 997) {
            const float k = static_cast<float>(i % 1000);
            ASSERT_EQ(a[i], 6 * k + 1.5f) << i;
            ASSERT_EQ(b[i], 2 * k + 0.5f) << i;
        }
    });
}

TEST(GlooComm, AllreduceBf16) {
    on_ranks([&](Communicator &c) {
        // Small integers are exact in bf16: rank r holds r + i; the sum is 3 + 3i.
        std::vector<std::uint16_t> h(64);
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = float_to_bf16(static_cast<float>(c.rank() + i));
        ASSERT_TRUE(c.allreduce(h.data(), h.size(), DType::bf16, ReduceOp::sum).ok());
        for (std::size_t i = 0; i < h.size(); ++i) ASSERT_EQ(bf16_to_float(h[i]), 3.0f + 3.0f * i) << i;
    });
}

TEST(GlooComm, AllreduceI64IsExact) {
    on_ranks([&](Communicator &c) {
        // Values beyond float/double precision: 2^60 + r; the sum is 3 * 2^60 + 3 exactly.
        std::vector<std::int64_t> v{(std::int64_t(1) << 60) + c.rank(), -7 * (c.rank() + 1)};
        ASSERT_TRUE(c.allreduce(v.data(), v.size(), DType::i64, ReduceOp::sum).ok());
        EXPECT_EQ(v[0], 3 * (std::int64_t(1) << 60) + 3);
        EXPECT_EQ(v[1], -42);
        EXPECT_FALSE(c.allreduce(v.data(), v.size(), DType::i64, ReduceOp::avg).ok());
    });
}

TEST(GlooComm, BroadcastAllgatherReduceScatterBarrier) {
    on_ranks([&](Communicator &c) {
        const int r = c.rank();
        std::vector<float> v(5, static_cast<float>(r));
        ASSERT_TRUE(c.broadcast(v.data(), v.size(), DType::fp32, 2).ok());
        for (float x : v) ASSERT_EQ(x, 2.0f);

        std::vector<float> mine{static_cast<float>(10 * r), static_cast<float>(10 * r + 1)};
        std::vector<float> all(2 * kRanks, -1.0f);
        ASSERT_TRUE(c.allgather(mine.data(), all.data(), 2, DType::fp32).ok());
        EXPECT_EQ(all, (std::vector<float>{0, 1, 10, 11, 20, 21}));

        // send[j] = r * 100 + j; rank q gets sum over r of (r*100 + j) for j in its part:
        // 300 + 3j.
        std::vector<float> send(2 * kRanks), recv(2);
        for (int j = 0; j < 2 * kRanks; ++j) send[j] = static_cast<float>(r * 100 + j);
        ASSERT_TRUE(c.reduce_scatter(send.data(), recv.data(), 2, DType::fp32, ReduceOp::sum).ok());
        EXPECT_EQ(recv[0], 300.0f + 3.0f * (2 * r));
        EXPECT_EQ(recv[1], 300.0f + 3.0f * (2 * r + 1));
        // A count whose scratch size overflows is refused on each rank before anything moves.
        auto huge = c.reduce_scatter(send.data(), recv.data(), SIZE_MAX / 4, DType::fp32, ReduceOp::sum);
        ASSERT_FALSE(huge.ok());
        EXPECT_NE(huge.error().find("overflow"), std::string::npos) << huge.error();
        ASSERT_TRUE(c.barrier().ok());
        EXPECT_STREQ(c.backend(), "gloo");
        EXPECT_EQ(c.size(), kRanks);
    });
}

namespace {

// Every rank sends to and receives from every other one, with sizes and values that name
// both ends; then checks what it got.
void exchange_all_pairs(Communicator &c) {
    const int r = c.rank();
    // Rank r sends (r+1) * 100000 + 7 floats of value 1000 r + q to every other rank q,
    // and receives from every peer p its (p+1) * 100000 + 7 floats of value 1000 p + r.
    auto count = [](int from) { return static_cast<std::size_t>(from + 1) * 100000 + 7; };
    std::vector<std::vector<float>> out(kRanks), in(kRanks);
    std::vector<PeerSend> sends;
    std::vector<PeerRecv> recvs;
    for (int q = 0; q < kRanks; ++q) {
        if (q == r) continue;
        out[q].assign(count(r), static_cast<float>(1000 * r + q));
        in[q].assign(count(q), -1.0f);
        sends.push_back({q, out[q].data(), out[q].size() * sizeof(float)});
        recvs.push_back({q, in[q].data(), in[q].size() * sizeof(float)});
    }
    ASSERT_TRUE(c.exchange(sends, recvs).ok());
    for (int p = 0; p < kRanks; ++p) {
        if (p == r) continue;
        ASSERT_EQ(in[p].size(), count(p));
        for (float x : in[p]) ASSERT_EQ(x, static_cast<float>(1000 * p + r)) << p;
    }
}

}  // namespace

TEST(GlooComm, ExchangeMovesEachPairsBytesBothWays) {
    on_ranks([&](Communicator &c) {
        const int r = c.rank();
        // Ranks that are threads of one process share a kernel: same-host copies throughout.
        EXPECT_EQ(c.same_host_peers(), kRanks - 1);
        exchange_all_pairs(c);
        // Nothing to move is a valid call on every rank, and ranks stay in step after it.
        ASSERT_TRUE(c.exchange({}, {}).ok());
        float one = 1.0f;
        ASSERT_TRUE(c.allreduce(&one, 1, DType::fp32, ReduceOp::sum).ok());
        EXPECT_EQ(one, static_cast<float>(kRanks));
        // Naming oneself or a rank that does not exist is refused before anything moves.
        float x = 0;
        EXPECT_FALSE(c.exchange({{r, &x, sizeof x}}, {}).ok());
        EXPECT_FALSE(c.exchange({}, {{kRanks, &x, sizeof x}}).ok());
        EXPECT_FALSE(c.exchange({}, {{-1, &x, sizeof x}}).ok());
    });
}

TEST(GlooComm, ExchangeOverTcpWithoutSameHostCopies) {
    on_ranks([&](Communicator &c) {
        EXPECT_EQ(c.same_host_peers(), 0);
        exchange_all_pairs(c);
    }, [](int) {
        GlooOptions o;
        o.same_host_copy = SameHostCopy::off;
        return o;
    });
}

TEST(GlooComm, ExchangeWithSomeRanksOptingOut) {
    // Rank 1 neither reads nor is read from; ranks 0 and 2 copy between themselves and use
    // TCP with rank 1, in the same call.
    on_ranks([&](Communicator &c) {
        EXPECT_EQ(c.same_host_peers(), c.rank() == 1 ? 0 : 1);
        exchange_all_pairs(c);
    }, [](int r) {
        GlooOptions o;
        if (r == 1) o.same_host_copy = SameHostCopy::off;
        return o;
    });
}

TEST(GlooComm, RefusedSameHostCopiesFallBackToTcp) {
    // Every copy is refused after the probe allowed it (as when a peer's credentials change):
    // each transfer goes over TCP after the ack, with the right bytes, twice in a row.
    on_ranks([&](Communicator &c) {
        EXPECT_EQ(c.same_host_peers(), kRanks - 1);
        exchange_all_pairs(c);
        exchange_all_pairs(c);
    }, [](int) {
        GlooOptions o;
        o.same_host_copy = SameHostCopy::failing;
        return o;
    });
}

// Two processes (a real process_vm_readv between different pids) exchange 8 MiB both ways,
// rendezvous through a FileStore. Rank r runs as user uid[r] (-1: this process's) and exits
// 0 only if it got the peer's bytes and reads from `peers[r]` peers by same-host copy.
static void exchange_between_processes(const int uid[2], const int peers[2]) {
    char dir[] = "/tmp/omni-gloo-procs.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    ASSERT_EQ(chmod(dir, 0777), 0);
    std::vector<pid_t> kids;
    for (int r = 0; r < 2; ++r) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            if (uid[r] >= 0 && (setgid(static_cast<gid_t>(uid[r])) != 0 || setuid(static_cast<uid_t>(uid[r])) != 0))
                _exit(9);
            gloo::rendezvous::FileStore store(dir);
            GlooOptions o;
            o.timeout = std::chrono::milliseconds(20000);
            auto c = make_gloo_communicator(store, r, 2, o);
            if (!c) _exit(10);
            if (c.value()->same_host_peers() != peers[r]) _exit(11);
            const std::size_t n = (8u << 20) / sizeof(float) + 3;  // not a whole page
            std::vector<float> out(n), in(n, -1.0f);
            for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(r * 1000003 + i);
            if (!c.value()->exchange({{1 - r, out.data(), n * sizeof(float)}},
                                     {{1 - r, in.data(), n * sizeof(float)}}))
                _exit(12);
            for (std::size_t i = 0; i < n; ++i)
                if (in[i] != static_cast<float>((1 - r) * 1000003 + i)) _exit(13);
            _exit(c.value()->barrier() ? 0 : 14);
        }
        kids.push_back(pid);
    }
    for (pid_t k : kids) {
        int status = 0;
        ASSERT_EQ(waitpid(k, &status, 0), k);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    }
    std::filesystem::remove_all(dir);
}

TEST(GlooComm, ExchangeBetweenProcesses) {
    const int uid[2] = {-1, -1}, peers[2] = {1, 1};
    exchange_between_processes(uid, peers);
}

TEST(GlooComm, ExchangeWhereTheKernelRefusesOneDirection) {
    // Rank 1 runs as user nobody: it may not read root's memory (the kernel refuses the
    // probe), while root may read its. One direction copies, the other goes over TCP.
    if (geteuid() != 0) GTEST_SKIP() << "needs root, to run one rank as another user";
    const int uid[2] = {-1, 65534}, peers[2] = {1, 0};
    exchange_between_processes(uid, peers);
}

TEST(GlooComm, BadArguments) {
    gloo::rendezvous::HashStore store;
    auto c = make_gloo_communicator(store, 3, 3, GlooOptions());
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error(), "gloo: rank 3 of 3: expected 0 <= rank < size");
}

TEST(GlooComm, MissingPeerTimesOut) {
    // Rank 1 of 2 never shows up: the rendezvous must fail within the timeout, not hang.
    gloo::rendezvous::HashStore store;
    GlooOptions o;
    o.timeout = std::chrono::milliseconds(1500);
    const auto t0 = std::chrono::steady_clock::now();
    auto c = make_gloo_communicator(store, 0, 2, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().find("rendezvous on 127.0.0.1 failed"), std::string::npos) << c.error();
    EXPECT_LT(took, std::chrono::seconds(20));
}

// A rank that hangs (stopped, not dead) keeps its sockets open, so its peers would wait in a
// collective for the whole timeout. abort() from another thread ends their wait at once, and
// the hung rank, when it comes back, finds its peers gone instead of a collective to join.
// Each rank is a process of its own, as in a job: abort() tells its pairs' sockets by those
// that appeared in the process while it connected (pair_sockets.h).
TEST(GlooComm, AbortFromAnotherThreadEndsAPendingCollective) {
    constexpr int n = 3, hung = 2;
    char dir[] = "/tmp/omni-gloo-abort.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    int go[2];   // the hung rank waits on it, as if stopped, until the others are done
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> kids;
    for (int r = 0; r < n; ++r) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid != 0) {
            kids.push_back(pid);
            continue;
        }
        close(go[1]);
        gloo::rendezvous::FileStore store(dir);
        GlooOptions o;
        o.timeout = std::chrono::milliseconds(20000);
        auto c = make_gloo_communicator(store, r, n, o);
        if (!c) _exit(10);
        Communicator &comm = *c.value();
        using Clock = std::chrono::steady_clock;
        if (r == hung) {
            char b;
            (void)!read(go[0], &b, 1);   // "stopped" until the parent writes or closes
            std::int64_t x = 1;
            const auto t0 = Clock::now();
            const bool ok = comm.allreduce(&x, 1, DType::i64, ReduceOp::sum).ok();
            _exit(ok ? 20 : (Clock::now() - t0 < std::chrono::seconds(5) ? 0 : 21));
        }
        std::thread stopper([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it waits for rank 2 now
            comm.abort();
        });
        std::vector<float> v(1024, 1.0f);
        const auto t0 = Clock::now();
        const bool ok = comm.allreduce(v.data(), v.size(), DType::fp32, ReduceOp::sum).ok();
        const auto waited = Clock::now() - t0;
        stopper.join();
        if (ok) _exit(30);                                   // the collective cannot have completed
        if (waited > std::chrono::seconds(5)) _exit(31);     // it waited for the timeout
        std::int64_t x = 1;                                  // and so does every later operation
        _exit(comm.allreduce(&x, 1, DType::i64, ReduceOp::sum).ok() ? 32 : 0);
    }
    close(go[0]);
    for (int r = 0; r < n; ++r) {
        if (r == hung) continue;
        int status = 0;
        ASSERT_EQ(waitpid(kids[static_cast<std::size_t>(r)], &status, 0), kids[static_cast<std::size_t>(r)]);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << ": status " << status;
    }
    close(go[1]);   // the hung rank comes back
    int status = 0;
    ASSERT_EQ(waitpid(kids[hung], &status, 0), kids[hung]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the hung rank: status " << status;
    std::filesystem::remove_all(dir);
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
    // 1 + 2^-8 lies exactly between bf16 1.0 (0x3f80) and 1.0078125 (0x3f81): ties to even.
    EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
    // 1 + 3 * 2^-8 lies between 0x3f81 and 0x3f82: ties to even 0x3f82.
    EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
    EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
}

// make_gloo_communicator(BlobExchange): the full mesh from one exchange of pair addresses, as
// PMIx carries it for a unit's model-parallel group. The exchange here is the test's own:
// threads hand their blobs to a shared table and wait for all of them.
TEST(GlooComm, AFullMeshFromOneExchange) {
    constexpr int n = 4;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<char>> table(n);
    int posted = 0, calls = 0;
    std::vector<float> sums(n, 0);
    std::vector<std::string> errors(n);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r)
        ranks.emplace_back([&, r] {
            BlobExchange exchange = [&](const std::vector<char> &mine) {
                std::unique_lock<std::mutex> lk(mu);
                table[r] = mine;
                ++posted;
                ++calls;
                cv.notify_all();
                cv.wait_for(lk, std::chrono::seconds(20), [&] { return posted == n; });
                return table;
            };
            GlooOptions o;
            auto c = make_gloo_communicator(exchange, r, n, o);
            if (!c) return void(errors[r] = c.error());
            float x[3] = {float(r + 1), 1, 2};
            if (auto st = c.value()->allreduce(x, 3, DType::fp32, ReduceOp::sum); !st) return void(errors[r] = st.error());
            sums[r] = x[0];
        });
    for (auto &t : ranks) t.join();
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(errors[r], "") << "rank " << r;
        EXPECT_EQ(sums[r], 10.0f) << "rank " << r;  // 1 + 2 + 3 + 4
    }
    EXPECT_EQ(calls, n);  // one exchange per rank, nothing else
    // An exchange that returns a blob without this rank's address is an error naming it.
    BlobExchange wrong = [](const std::vector<char> &mine) { return std::vector<std::vector<char>>{mine, {}}; };
    auto bad = make_gloo_communicator(wrong, 0, 2, GlooOptions{});
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("rank 1's addresses (0 bytes) hold none for rank 0"), std::string::npos) << bad.error();
}
