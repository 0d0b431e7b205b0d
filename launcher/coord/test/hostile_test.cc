// Raw TCP against the real coordinator on 127.0.0.1 (issue 46): garbage, a frame announcing
// a huge length, half a greeting then silence, hundreds of idle connections, and a captured
// handshake and request replayed on a new connection and injected into the same one. Each
// is refused or closed within a stated bound, memory and unfinished connections stay
// bounded, and an authenticated client is served meanwhile.
//
// How each fails with its protection removed (each tried once, 2026-12-06):
//  - CloseGarbageAndHugeLengths: without ZMQ_MAXMSGSIZE the huge-length connection stays
//    open (libzmq allocates the announced 1 GiB and waits for it) and the 1 s bound fails.
//  - HalfAGreetingIsClosedWithinTheHandshakeDeadline: without handshake_ivl in
//    require_credentials libzmq's default (30 s) applies and the 6.5 s bound fails.
//  - UnfinishedConnectionsAreCapped: without bound_pending() all 300 stay open, the
//    pending count is 300 and no connection is closed within 1 s.
//  - ABurstOfTheJobsOwnConnectionsIsServed: with the cap fixed at 64 (as before
//    max_pending_connections), most of the burst is dropped and not all are answered.
//  - ReplayedHandshakeAndRequestAreRefused: with PLAIN (the secret in clear, as before) the
//    replay on a new connection is executed (the counter reads 2, then 3).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "coord/client.h"
#include "coord/conn_auth.h"
#include "coord/coordinator.h"
#include "coord/log.h"
#include "coord/test/test_secret.h"
#include "coord/wire.h"

using namespace omni::launcher;

namespace {

const std::string kSecret = test_secret();

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<Coordinator> start() {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = 1;
    cfg.protocol.min_units = 1;
    cfg.protocol.max_units = 1;
    auto c = Coordinator::start(cfg);
    EXPECT_TRUE(c) << c.error();
    return c ? std::move(c).value() : nullptr;
}

std::unique_ptr<CoordinatorClient> client(const std::string &endpoint) {
    auto cl = CoordinatorClient::connect(endpoint, kSecret);
    EXPECT_TRUE(cl) << cl.error();
    return cl ? std::move(cl).value() : nullptr;
}

// An authenticated status request answered within `ms`.
bool served(const Coordinator &c, int ms = 1000) {
    auto cl = client(c.endpoints().front());
    Request r;
    r.op = Op::Status;
    return cl && cl->call(r, ms);
}

sockaddr_in address(const std::string &endpoint) {
    const auto colon = endpoint.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    inet_pton(AF_INET, endpoint.substr(6, colon - 6).c_str(), &a.sin_addr);
    return a;
}

int dial(const std::string &endpoint) {
    sockaddr_in a = address(endpoint);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

bool put(int fd, const std::string &b) {
    return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
}

// Seconds until the peer closes `fd` (reads end-of-file or an error, discarding what it
// sends), or -1 if it is still open after `limit_s`.
double seconds_to_close(int fd, double limit_s) {
    const auto t0 = Clock::now();
    char buf[4096];
    while (since(t0) < limit_s) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return since(t0);
    }
    return -1;
}

// Whether `fd` was closed by the peer already (without waiting).
bool closed_now(int fd) { return seconds_to_close(fd, 0.02) >= 0; }

// A ZMTP 3.0 greeting (RFC 23) announcing `mechanism`, as a server-bound client sends it.
std::string greeting(const char *mechanism) {
    std::string g(64, '\0');
    g[0] = '\xff';
    g[9] = '\x7f';
    g[10] = 3;
    std::memcpy(&g[12], mechanism, std::strlen(mechanism));
    return g;
}

long rss_kib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

struct LogCapture {
    std::mutex m;
    std::vector<std::string> lines;
    LogCapture() {
        set_log_sink([this](LogLevel, const std::string &line) {
            std::lock_guard<std::mutex> g(m);
            lines.push_back(line);
        });
    }
    ~LogCapture() {
        set_log_sink(nullptr);
        if (::testing::Test::HasFailure())
            for (const auto &l : lines) std::fprintf(stderr, "log: %s\n", l.c_str());
    }
    bool contains(const std::string &s) {
        std::lock_guard<std::mutex> g(m);
        for (const auto &l : lines)
            if (l.find(s) != std::string::npos) return true;
        return false;
    }
};

}  // namespace

TEST(CoordinatorHostile, CloseGarbageAndHugeLengths) {
    LogCapture log;
    auto c = start();
    ASSERT_TRUE(c);
    const long before = rss_kib();
    // Garbage: not a ZMTP signature; libzmq closes at the first bytes.
    int fd = dial(c->endpoints().front());
    ASSERT_GE(fd, 0);
    std::string junk(4096, '\0');
    for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 2654435761u) >> 13);
    put(fd, junk);
    double t = seconds_to_close(fd, 1.0);
    EXPECT_GE(t, 0) << "garbage: still open after 1 s";
    ::close(fd);
    // A valid greeting, then a command frame announcing 1 GiB: ZMQ_MAXMSGSIZE ends the
    // connection when the length is read, before anything is allocated for it. (Without it
    // libzmq allocates the 1 GiB and waits for it; 2^62 bytes would fail the allocation.)
    fd = dial(c->endpoints().front());
    ASSERT_GE(fd, 0);
    put(fd, greeting("CURVE"));
    std::string header(9, '\0');
    header[0] = 0x06;  // COMMAND | LONG
    header[5] = 0x40;  // 2^30
    put(fd, header);
    put(fd, std::string(1024, 'x'));
    const double t_huge = seconds_to_close(fd, 1.0);
    EXPECT_GE(t_huge, 0) << "huge length: still open after 1 s";
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::printf("garbage closed after %.3f s, 1 GiB length after %.3f s, RSS +%ld KiB\n", t, t_huge,
                rss_kib() - before);
    EXPECT_LT(rss_kib() - before, 8 * 1024);
    // Closed within microseconds: logged, named only if the service saw it open (see
    // note_connection_event); the long-lived connections below are named.
    EXPECT_TRUE(log.contains("refused a connection from "));
    EXPECT_TRUE(served(*c)) << "the service is unharmed";
}

TEST(CoordinatorHostile, HalfAGreetingIsClosedWithinTheHandshakeDeadline) {
    LogCapture log;
    auto c = start();
    ASSERT_TRUE(c);
    std::vector<int> fds;
    for (int i = 0; i < 8; ++i) {
        fds.push_back(dial(c->endpoints().front()));
        ASSERT_GE(fds.back(), 0);
        put(fds.back(), greeting("CURVE").substr(0, 11));  // half of it, then silence
    }
    const auto t0 = Clock::now();
    EXPECT_TRUE(served(*c)) << "served while handshakes hang";
    for (int fd : fds) {
        const double left = 6.5 - since(t0);
        const double t = seconds_to_close(fd, left > 0 ? left : 0.01);
        EXPECT_GE(t, 0) << "still open after 6.5 s (deadline " << kHandshakeMs << " ms)";
        ::close(fd);
    }
    std::printf("8 half greetings all closed after %.3f s\n", since(t0));
    EXPECT_GE(since(t0), kHandshakeMs / 1000.0 - 0.5) << "closed before the deadline: not the deadline at work";
    for (int i = 0; i < 50 && !log.contains("no handshake within 5000 ms"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(log.contains("refused a connection from 127.0.0.1:")) << "the peer is named";
    EXPECT_TRUE(log.contains("no handshake within 5000 ms"));
    EXPECT_TRUE(served(*c));
}

TEST(CoordinatorHostile, UnfinishedConnectionsAreCapped) {
    LogCapture log;
    auto c = start();
    ASSERT_TRUE(c);
    const long before = rss_kib();
    const int n = 300;
    const std::size_t cap = max_pending_connections(1);  // start(): a job of one rank
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
        fds.push_back(dial(c->endpoints().front()));
        ASSERT_GE(fds.back(), 0) << i;
    }
    // The service catches up with its monitor within a few polls.
    const auto t0 = Clock::now();
    while (since(t0) < 2.0 && (c->counters().pending_connections.load() > cap ||
                               c->counters().dropped_connections.load() < static_cast<std::uint64_t>(n - cap)))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_LE(c->counters().pending_connections.load(), cap);
    EXPECT_GE(c->counters().dropped_connections.load(), static_cast<std::uint64_t>(n - cap));
    EXPECT_TRUE(served(*c)) << "an authenticated client is served during the flood";
    int closed = 0;
    for (int i = 0; i < n; ++i) closed += closed_now(fds[i]);
    // The oldest were dropped: the first n - cap are closed, well before the 5 s deadline.
    EXPECT_GE(closed, n - static_cast<int>(cap) - 1);
    EXPECT_TRUE(closed_now(fds.front())) << "the oldest goes first";
    std::printf("%d idle connections: %llu open unfinished, %llu dropped, %d closed, RSS +%ld KiB\n", n,
                static_cast<unsigned long long>(c->counters().pending_connections.load()),
                static_cast<unsigned long long>(c->counters().dropped_connections.load()), closed,
                rss_kib() - before);
    EXPECT_LT(rss_kib() - before, 16 * 1024);
    EXPECT_TRUE(log.contains("dropped the connection from 127.0.0.1:"));
    for (int fd : fds) ::close(fd);
}

// A job's own ranks connect all at once at its start. With a fixed cap of 64 unfinished
// handshakes, a burst of a few hundred was dropped wave after wave as the one I/O thread
// worked through the handshakes, and the job never formed (tried 2026-12-07 with
// max_pending_connections() returning kMaxPendingConnections: 256 ranks of the scale bench
// got no reply in 120 s; here most of the 400 connections are dropped and the 20 s bound
// fails).
TEST(CoordinatorHostile, ABurstOfTheJobsOwnConnectionsIsServed) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 4;
    cfg.protocol.initial_units = cfg.protocol.max_units = 100;
    auto started = Coordinator::start(cfg);
    ASSERT_TRUE(started) << started.error();
    auto &c = *started.value();
    const int n = 400;  // one connection for each rank of the largest world
    zmq::context_t ctx(1);
    ctx.set(zmq::ctxopt::max_sockets, n + 64);
    std::vector<zmq::socket_t> socks;
    std::vector<zmq::pollitem_t> items;
    for (int i = 0; i < n; ++i) {
        socks.emplace_back(ctx, zmq::socket_type::dealer);
        socks.back().set(zmq::sockopt::linger, 0);
        set_client_credentials(socks.back(), kSecret);
    }
    for (auto &s : socks) s.connect(c.endpoints().front());
    for (int i = 0; i < n; ++i) {
        Request r;
        r.op = Op::Status;
        r.rid = 1;
        r.secret = kSecret;
        socks[i].send(zmq::buffer(request_header(r)), zmq::send_flags::none);
        items.push_back({static_cast<void *>(socks[i]), 0, ZMQ_POLLIN, 0});
    }
    std::vector<bool> answered(n, false);
    int left = n;
    const auto t0 = Clock::now();
    while (left > 0 && since(t0) < 20.0) {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
        for (int i = 0; i < n; ++i) {
            if (answered[i] || !(items[i].revents & ZMQ_POLLIN)) continue;
            auto parts = recv_message(socks[i], 1);
            if (parts.empty()) continue;
            answered[i] = true;
            --left;
        }
    }
    std::printf("%d of %d connections opened at once answered after %.2f s, %llu dropped\n", n - left, n, since(t0),
                static_cast<unsigned long long>(c.counters().dropped_connections.load()));
    EXPECT_EQ(left, 0) << "connections without a reply after 20 s";
    EXPECT_EQ(c.counters().dropped_connections.load(), 0u);
}

namespace {

// A TCP relay between one client and the coordinator that records what the client sends
// (each chunk as read) and can inject bytes towards the coordinator, as an attacker on the
// path could.
struct Relay {
    int listener = -1;
    std::string endpoint;
    std::thread thread;
    std::atomic<bool> stop{false}, upstream_closed{false};
    std::mutex m;
    std::vector<std::string> sent;  // client -> coordinator chunks
    std::string inject;

    explicit Relay(const std::string &target) {
        listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        ::bind(listener, reinterpret_cast<sockaddr *>(&a), sizeof a);
        ::listen(listener, 1);
        ::getsockname(listener, reinterpret_cast<sockaddr *>(&a), &len);
        endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
        thread = std::thread([this, target] { run(target); });
    }
    ~Relay() {
        stop = true;
        if (thread.joinable()) thread.join();
        ::close(listener);
    }
    void run(const std::string &target) {
        pollfd lp{listener, POLLIN, 0};
        while (!stop && ::poll(&lp, 1, 20) <= 0) {
        }
        if (stop) return;
        const int down = ::accept(listener, nullptr, nullptr);
        const int up = dial(target);
        char buf[65536];
        while (!stop) {
            {
                std::lock_guard<std::mutex> g(m);
                if (!inject.empty()) {
                    put(up, inject);
                    inject.clear();
                }
            }
            pollfd p[2] = {{down, POLLIN, 0}, {up, POLLIN, 0}};
            if (::poll(p, 2, 10) <= 0) continue;
            if (p[0].revents) {
                const ssize_t n = ::recv(down, buf, sizeof buf, 0);
                if (n <= 0) break;
                {
                    std::lock_guard<std::mutex> g(m);
                    sent.emplace_back(buf, n);
                }
                put(up, std::string(buf, n));
            }
            if (p[1].revents) {
                const ssize_t n = ::recv(up, buf, sizeof buf, 0);
                if (n <= 0) {
                    upstream_closed = true;
                    break;
                }
                put(down, std::string(buf, n));
            }
        }
        ::close(down);
        ::close(up);
    }
};

}  // namespace

TEST(CoordinatorHostile, ReplayedHandshakeAndRequestAreRefused) {
    LogCapture log;
    auto c = start();
    ASSERT_TRUE(c);
    Relay relay(c->endpoints().front());
    auto victim = client(relay.endpoint);
    auto v = victim->kv_add(1, "count", 1, 3000);
    ASSERT_TRUE(v) << v.error();
    ASSERT_EQ(v.value(), 1);
    std::vector<std::string> captured;
    {
        std::lock_guard<std::mutex> g(relay.m);
        captured = relay.sent;
    }
    ASSERT_GE(captured.size(), 2u);
    std::string all;
    for (const auto &chunk : captured) all += chunk;
    auto owner = client(c->endpoints().front());

    // On a new connection: the coordinator's new ephemeral key makes the captured
    // handshake fail, so the captured request is never read.
    int fd = dial(c->endpoints().front());
    ASSERT_GE(fd, 0);
    for (const auto &chunk : captured) {
        put(fd, chunk);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double t = seconds_to_close(fd, 1.0);
    EXPECT_GE(t, 0) << "the replayed handshake was not refused within 1 s";
    ::close(fd);
    auto after = owner->kv_add(1, "count", 0, 3000);
    ASSERT_TRUE(after) << after.error();
    EXPECT_EQ(after.value(), 1) << "the replayed request was executed";

    // Inside the same connection: the request's nonce was used already; the coordinator
    // drops the connection instead of executing it again.
    {
        std::lock_guard<std::mutex> g(relay.m);
        relay.inject = captured.back();
    }
    const auto t0 = Clock::now();
    while (!relay.upstream_closed && since(t0) < 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(relay.upstream_closed) << "the injected frame did not end the connection within 1 s";
    after = owner->kv_add(1, "count", 0, 3000);
    ASSERT_TRUE(after) << after.error();
    EXPECT_EQ(after.value(), 1) << "the injected request was executed";
    EXPECT_TRUE(log.contains("refused a connection from 127.0.0.1:"));
    // The secret is not on the wire any more.
    EXPECT_EQ(all.find(kSecret), std::string::npos) << "the job secret travelled in clear";
}
