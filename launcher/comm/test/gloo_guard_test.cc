// Guarded Gloo pairs (comm/gloo_guard.h) under raw TCP from a stranger, on 127.0.0.1: three
// ranks build a communicator through a BlobExchange that holds every rank for a while after
// all blobs are in, with every pair listening; meanwhile the test, which reads the pairs'
// addresses out of the blobs, attacks each listener. Each attack must be closed within its
// bound, the communicator must build and sum correctly, and its ports refuse connections
// once built.
//
// How it fails without the protection (make_guarded_context returning Gloo's own context,
// tried 2026-12-06): Gloo takes the garbage connection as the pair's peer ("garbage
// closed-after -1": still open after 3 s), closes that pair's listener (the next attack's
// connect is refused), and the build never completes: the real peer was refused, and the
// test was still waiting when `timeout 60` ended it. With Gloo from 2023-05 on (Debian 13's,
// the same removal, 2026-12-07): Gloo's device listener took every stranger's connection and
// kept it ("an idle connection stayed open" for all 40, none closed within 1 s), and the
// listener is open beside the pairs.
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/address.h>

#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/gloo_guard.h"

namespace omni::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int dial(const sockaddr_storage &ss) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<const sockaddr *>(&ss), sizeof(sockaddr_in)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Seconds until the peer closes fd (EOF or an error), or -1 past `limit`.
double closed_after(int fd, double limit) {
    const auto t0 = Clock::now();
    char buf[4096];
    while (since(t0) < limit) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 10) <= 0) continue;
        const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r <= 0) return since(t0);
    }
    return -1;
}

// The listeners of one build: every address in every blob, and the tokens.
struct Blobs {
    std::vector<sockaddr_storage> listeners;
    std::vector<PairToken> tokens;
};
Blobs parse(const std::vector<std::vector<char>> &all) {
    Blobs b;
    for (const auto &blob : all) {
        std::size_t at = 0;
        while (blob.size() - at >= 8) {
            std::uint32_t len = 0;
            std::memcpy(&len, blob.data() + at + 4, 4);  // little-endian host
            at += 8;
            std::vector<char> a(blob.begin() + static_cast<long>(at), blob.begin() + static_cast<long>(at + len - kPairTokenBytes));
            b.listeners.push_back(gloo::transport::tcp::Address(a).getSockaddr());
            PairToken t;
            std::memcpy(t.data(), blob.data() + at + len - kPairTokenBytes, kPairTokenBytes);
            b.tokens.push_back(t);
            at += len;
        }
    }
    return b;
}

// n ranks as threads; `during(blobs)` runs once every blob is in, while every rank waits.
// `built(blobs)` runs on rank 0 once the communicator summed, while every rank still holds it.
void build(int n, const std::function<void(const Blobs &)> &during, Blobs *seen = nullptr,
           const std::function<void(const Blobs &)> &built = {}) {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::vector<char>> all(static_cast<std::size_t>(n));
    int in = 0;
    bool released = false;
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<float> sums(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    Blobs b;
    const Blobs *seen_now = &b;  // complete before any rank is released
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            BlobExchange ex = [&](const std::vector<char> &mine) {
                std::unique_lock<std::mutex> l(m);
                all[static_cast<std::size_t>(r)] = mine;
                if (++in == n) cv.notify_all();
                cv.wait(l, [&] { return released; });
                return all;
            };
            GlooOptions o;
            o.timeout = std::chrono::milliseconds(20000);
            auto c = make_gloo_communicator(ex, r, n, o);
            if (!c) {
                errors[static_cast<std::size_t>(r)] = c.error();
                return;
            }
            float v = static_cast<float>(r + 1);
            auto st = c.value()->allreduce(&v, 1, DType::fp32, ReduceOp::sum);
            if (!st) errors[static_cast<std::size_t>(r)] = st.error();
            sums[static_cast<std::size_t>(r)] = v;
            if (r == 0 && built) built(*seen_now);
            EXPECT_TRUE(c.value()->barrier().ok());
        });
    {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return in == n; });
        b = parse(all);
    }
    during(b);
    {
        std::lock_guard<std::mutex> l(m);
        released = true;
    }
    cv.notify_all();
    for (auto &t : threads) t.join();
    for (const auto &e : errors) EXPECT_EQ(e, "");
    for (float s : sums) EXPECT_EQ(s, static_cast<float>(n * (n + 1) / 2));
    if (seen) *seen = b;
}

// Every Gloo this builds with is guarded: Debian 12's (one listener per pair) and Gloo from
// 2023-05 on (Debian 13's and unstable's: one listener per device, the pairs listen on doors
// of their own, comm/pair_doors.h).
TEST(GlooGuard, ThisGlooIsGuarded) { EXPECT_TRUE(gloo_pairs_guarded()); }

// This process's listening TCP sockets on `ip` (the port is ignored).
std::vector<sockaddr_storage> listening_on(const sockaddr_storage &ip) {
    std::vector<sockaddr_storage> out;
    DIR *dir = ::opendir("/proc/self/fd");
    if (!dir) return out;
    while (dirent *e = ::readdir(dir)) {
        const int fd = std::atoi(e->d_name);
        struct stat st {};
        if (fd <= 2 || fd == ::dirfd(dir) || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        int on = 0;
        socklen_t len = sizeof on;
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) != 0 || !on) continue;
        sockaddr_storage me{};
        socklen_t ml = sizeof me;
        if (::getsockname(fd, reinterpret_cast<sockaddr *>(&me), &ml) != 0 || me.ss_family != AF_INET) continue;
        if (reinterpret_cast<sockaddr_in &>(me).sin_addr.s_addr == reinterpret_cast<const sockaddr_in &>(ip).sin_addr.s_addr)
            out.push_back(me);
    }
    ::closedir(dir);
    return out;
}
bool same_port(const sockaddr_storage &a, const sockaddr_storage &b) {
    return reinterpret_cast<const sockaddr_in &>(a).sin_port == reinterpret_cast<const sockaddr_in &>(b).sin_port;
}

// Whether a connection to `ss` is established within `ms` (a dropped SYN: not).
bool answers_within(const sockaddr_storage &ss, int ms) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return false;
    bool up = ::connect(fd, reinterpret_cast<const sockaddr *>(&ss), sizeof(sockaddr_in)) == 0;
    if (!up && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        up = ::poll(&p, 1, ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
    return up;
}

TEST(GlooGuard, StrangersAreRefusedAndTheCommunicatorBuilds) {
    const std::size_t refused0 = refused_pair_connections();
    Blobs first;
    build(3, [](const Blobs &) {}, &first);
    build(3, [&](const Blobs &b) {
        ASSERT_EQ(b.listeners.size(), 6u);  // 3 ranks x 2 pairs, each listening
        // Nothing else of this process listens there: Gloo from 2023-05 on opens one listener
        // per device, which would take any connection naming a pair's sequence number and
        // keep it (see gloo_guard_shared.inc); the guard closes it.
        int others = 0;
        for (const auto &l : listening_on(b.listeners[0])) {
            bool pair = false;
            for (const auto &p : b.listeners) pair = pair || same_port(l, p);
            if (pair) continue;
            ++others;
            std::printf("a listener that is not a pair's answers within 300 ms: %d\n", answers_within(l, 300));
        }
        EXPECT_EQ(others, 0) << "Gloo's device listener is open";
        // Garbage, and a Gloo frame announcing 1 GiB (preamble: nbytes, opcode SEND_BUFFER,
        // slot, offset, length, roffset): wrong tokens, closed at once.
        for (int k = 0; k < 2; ++k) {
            const int fd = dial(b.listeners[0]);
            ASSERT_GE(fd, 0);
            std::vector<char> bytes(4096);
            if (k == 0) {
                for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
            } else {
                std::uint64_t pre[6] = {48 + (1ull << 30), 0, 1, 0, 1ull << 30, 0};
                std::memcpy(bytes.data(), pre, sizeof pre);
            }
            ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
            const double t = closed_after(fd, 3);
            std::printf("%s closed-after %.3f s\n", k == 0 ? "garbage" : "huge", t);
            EXPECT_GE(t, 0);
            EXPECT_LT(t, 0.5);
            ::close(fd);
        }
        // Replay: the token this pair had in the previous build.
        {
            const int fd = dial(b.listeners[1]);
            ASSERT_GE(fd, 0);
            ASSERT_EQ(::send(fd, first.tokens[1].data(), kPairTokenBytes, MSG_NOSIGNAL), 16);
            const double t = closed_after(fd, 3);
            std::printf("replay closed-after %.3f s\n", t);
            EXPECT_GE(t, 0);
            EXPECT_LT(t, 0.5);
            ::close(fd);
        }
        // Half a token, then silence: closed at the deadline.
        {
            const int fd = dial(b.listeners[2]);
            ASSERT_GE(fd, 0);
            ASSERT_EQ(::send(fd, b.tokens[2].data(), 8, MSG_NOSIGNAL), 8);
            const double t = closed_after(fd, 4);
            std::printf("half closed-after %.3f s\n", t);
            EXPECT_GE(t, 1.9);
            EXPECT_LT(t, 2.5);
            ::close(fd);
        }
        // 40 idle connections to one pair: at most 8 held, all closed by the deadline.
        {
            const auto t0 = Clock::now();
            std::vector<int> fds;
            for (int i = 0; i < 40; ++i) {
                const int fd = dial(b.listeners[3]);
                if (fd >= 0) fds.push_back(fd);
            }
            EXPECT_EQ(fds.size(), 40u);
            int early = 0;
            double last = 0;
            for (int fd : fds) {
                const double t = closed_after(fd, std::max(0.01, 3.5 - since(t0)));
                EXPECT_GE(t, 0) << "an idle connection stayed open";
                if (since(t0) < 1.0) ++early;
                last = since(t0);
                ::close(fd);
            }
            std::printf("idle 40: %d closed within 1 s, the last after %.3f s\n", early, last);
            EXPECT_GE(early, 32);  // all but the 8 held
            EXPECT_LT(last, 2.6);
        }
    }, nullptr, [](const Blobs &b) {
        // Built: nothing listens on those ports any more (the kernel refuses), nor does Gloo's
        // own listener.
        for (const auto &ss : b.listeners) {
            const int fd = dial(ss);
            EXPECT_LT(fd, 0) << "a built communicator's port still takes connections";
            if (fd >= 0) ::close(fd);
        }
        EXPECT_EQ(listening_on(b.listeners[0]).size(), 0u) << "a rank listens once its communicator is built";
    });
    EXPECT_GE(refused_pair_connections() - refused0, 44u);
}

// A communicator of one rank has no pair, so nothing must listen for it either (Gloo from
// 2023-05 on opens its device listener all the same; it must be gone).
TEST(GlooGuard, OneRankListensOnNothing) {
    BlobExchange ex = [](const std::vector<char> &mine) { return std::vector<std::vector<char>>{mine}; };
    GlooOptions o;
    o.timeout = std::chrono::milliseconds(5000);
    auto c = make_gloo_communicator(ex, 0, 1, o);
    ASSERT_TRUE(c) << c.error();
    sockaddr_storage lo{};
    reinterpret_cast<sockaddr_in &>(lo).sin_family = AF_INET;
    reinterpret_cast<sockaddr_in &>(lo).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(listening_on(lo).size(), 0u) << "a communicator of one rank listens";
    float v = 2;
    EXPECT_TRUE(c.value()->allreduce(&v, 1, DType::fp32, ReduceOp::sum).ok());
    EXPECT_EQ(v, 2.0f);
}

// A guarded device (make_guarded_device: what omni.torch gives PyTorch's ProcessGroupGloo)
// through Gloo's own connectFullMesh, 2 ranks as threads over a HashStore: rank 0's published
// address carries a 16-byte token after Gloo's; while rank 1 has not started, strangers at
// that address are refused (garbage at once, silence after 2 s); then the mesh forms and sums.
// Without the guard (make_guarded_device returning Gloo's device) the address has no token
// (the size check fails) and the garbage connection becomes the pair's peer.
TEST(GlooGuard, GuardedDeviceThroughConnectFullMesh) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::shared_ptr<gloo::rendezvous::Context>> ctx(2);
    std::vector<std::string> errors(2);
    auto rank = [&](int r) {
        try {
            auto dev = make_guarded_device(attr);
            auto c = std::make_shared<gloo::rendezvous::Context>(r, 2);
            c->setTimeout(std::chrono::milliseconds(20000));
#ifdef OMNI_GLOO_STORE_SHARED_PTR
            c->connectFullMesh(store, dev);
#else
            c->connectFullMesh(*store, dev);
#endif
            ctx[r] = c;
        } catch (const std::exception &e) {
            errors[r] = e.what();
        }
    };
    const std::size_t refused0 = refused_pair_connections();
    std::thread r0(rank, 0);
    store->wait({"0"}, std::chrono::milliseconds(20000));
    const std::vector<char> published = store->get("0");  // rank 0's pair to rank 1
    const gloo::transport::tcp::Address gloo_size_probe(sockaddr_storage{});
    ASSERT_EQ(published.size(), gloo_size_probe.bytes().size() + kPairTokenBytes);
    const auto where = gloo::transport::tcp::Address(
        std::vector<char>(published.begin(), published.end() - kPairTokenBytes)).getSockaddr();
    const int garbage = dial(where), idle = dial(where);
    ASSERT_GE(garbage, 0) << "rank 0's pair does not listen";
    ASSERT_GE(idle, 0);
    const char junk[64] = "not a token, and more than sixteen bytes of it";
    ASSERT_EQ(::send(garbage, junk, sizeof junk, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof junk));
    const double g = closed_after(garbage, 3), i = closed_after(idle, 5);
    ::close(garbage);
    ::close(idle);
    std::thread r1(rank, 1);
    r0.join();
    r1.join();
    std::fprintf(stderr, "guarded device: garbage closed after %.3f s, idle after %.3f s\n", g, i);
    EXPECT_GE(g, 0);
    EXPECT_LT(g, 1.0);
    EXPECT_GE(i, 1.9);
    EXPECT_LT(i, 3.0);
    EXPECT_GE(refused_pair_connections() - refused0, 2u);
    ASSERT_EQ(errors[0], "");
    ASSERT_EQ(errors[1], "");
    std::vector<float> v0{1, 2}, v1{10, 20};
    auto sum = [&](int r, std::vector<float> &v) {
        gloo::AllreduceOptions o(ctx[r]);
        o.setOutput(v.data(), v.size());
        o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        o.setTag(1);
        gloo::allreduce(o);
    };
    std::thread a(sum, 0, std::ref(v0)), b(sum, 1, std::ref(v1));
    a.join();
    b.join();
    EXPECT_EQ(v0, (std::vector<float>{11, 22}));
    EXPECT_EQ(v1, (std::vector<float>{11, 22}));
}

}  // namespace
}  // namespace omni::launcher
