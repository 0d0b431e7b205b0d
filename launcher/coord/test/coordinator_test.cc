// The coordinator service over ZeroMQ on 127.0.0.1: the secret is enforced (and refusals are
// logged), inputs are bounded, the protocol runs end to end with deferred replies, and the
// generation-prefixed key/value store answers set/get/wait with timeouts.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include "coord/client.h"
#include "coord/conn_auth.h"
#include "coord/coordinator.h"
#include "coord/log.h"
#include "coord/secret.h"
#include "coord/test/test_secret.h"

using namespace omni::launcher;
using omni::Result;

namespace {

const std::string kSecret = test_secret();
const std::string kOther = std::string(64, 'b');

std::unique_ptr<Coordinator> start(std::uint32_t units, std::uint32_t min, std::uint32_t max,
                                   std::size_t max_waiters = CoordinatorConfig{}.max_waiters,
                                   std::size_t max_waiting_keys = CoordinatorConfig{}.max_waiting_keys) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = units;
    cfg.protocol.min_units = min;
    cfg.protocol.max_units = max;
    cfg.protocol.boundary_timeout_ms = 3000;
    cfg.max_waiters = max_waiters;
    cfg.max_waiting_keys = max_waiting_keys;
    auto c = Coordinator::start(cfg);
    EXPECT_TRUE(c) << c.error();
    return c ? std::move(c).value() : nullptr;
}

std::unique_ptr<CoordinatorClient> client(const Coordinator &c, const std::string &secret = kSecret) {
    auto cl = CoordinatorClient::connect(c.endpoints().front(), secret);
    EXPECT_TRUE(cl) << cl.error();
    return cl ? std::move(cl).value() : nullptr;
}

Result<Reply> status(CoordinatorClient &cl) {
    Request r;
    r.op = Op::Status;
    return cl.call(r, 3000);
}

// Captures log lines for the duration of a test.
struct LogCapture {
    std::mutex m;
    std::vector<std::string> lines;
    LogCapture() {
        set_log_sink([this](LogLevel, const std::string &line) {
            std::lock_guard<std::mutex> g(m);
            lines.push_back(line);
        });
    }
    ~LogCapture() { set_log_sink(nullptr); }
    bool contains(const std::string &s) {
        std::lock_guard<std::mutex> g(m);
        for (const auto &l : lines)
            if (l.find(s) != std::string::npos) return true;
        return false;
    }
};

// A raw DEALER for requests the client class would never send. It proves `password` at the
// handshake as the client does (the job secret by default, CURVE keys derived from it); with
// `plain` false it uses ZeroMQ's NULL mechanism, as a peer that knows nothing of the job would.
struct Raw {
    zmq::context_t ctx{1};
    zmq::socket_t sock{ctx, zmq::socket_type::dealer};
    explicit Raw(const std::string &ep, bool plain = true, const std::string &password = kSecret) {
        sock.set(zmq::sockopt::linger, 0);
        if (plain) set_client_credentials(sock, password);
        sock.connect(ep);
    }
    // Sends frames and returns the first reply frame, or "" after timeout_ms.
    std::string roundtrip(const std::vector<std::string> &frames, int timeout_ms = 3000) {
        for (std::size_t i = 0; i < frames.size(); ++i)
            sock.send(zmq::buffer(frames[i]),
                      i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        zmq::pollitem_t item{static_cast<void *>(sock), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
        if (!(item.revents & ZMQ_POLLIN)) return "";
        zmq::message_t m;
        (void)sock.recv(m);
        std::string out(m.data<char>(), m.size());
        while (m.more()) (void)sock.recv(m);
        return out;
    }
};

}  // namespace

TEST(Coordinator, RefusesBadConfiguration) {
    CoordinatorConfig cfg;
    cfg.secret = kSecret;
    cfg.bind = {"tcp://0.0.0.0:0"};
    EXPECT_FALSE(Coordinator::start(cfg));  // wildcard
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = "short";
    EXPECT_FALSE(Coordinator::start(cfg));
    cfg.secret = kSecret;
    cfg.bind = {};
    EXPECT_FALSE(Coordinator::start(cfg));
    cfg.bind = {"tcp://192.0.2.1:0"};  // TEST-NET address: not ours, bind fails
    auto r = Coordinator::start(cfg);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("192.0.2.1"), std::string::npos) << r.error();
}

TEST(Coordinator, BindsOnlyTheGivenAddress) {
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    const std::string ep = c->endpoints().front();
    EXPECT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
    EXPECT_NE(ep, "tcp://127.0.0.1:0");
}

TEST(Coordinator, RefusesRequestsWithoutTheSecret) {
    LogCapture log;
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    auto good = client(*c);
    ASSERT_TRUE(status(*good)) << "the right secret works";

    // A wrong secret is refused at the handshake and reported as such, not as a timeout;
    // the client stays refused (libzmq would retry the same secret forever).
    auto wrong = client(*c, kOther);
    auto r = status(*wrong);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("refused: the job secret was not accepted"), std::string::npos) << r.error();
    Request reshape;
    reshape.op = Op::Reshape;
    reshape.units = 1;
    auto again = wrong->call(reshape, 3000);
    ASSERT_FALSE(again);
    EXPECT_NE(again.error().find("refused"), std::string::npos) << again.error();

    // Past the handshake, a request must still carry the secret.
    Raw raw(c->endpoints().front());
    std::string reply = raw.roundtrip({R"({"v":1,"op":"status","rid":9})"});  // no secret
    EXPECT_NE(reply.find("refused"), std::string::npos) << reply;
    // A peer that does not present the secret at all gets no reply.
    Raw null_peer(c->endpoints().front(), false);
    EXPECT_EQ(null_peer.roundtrip({R"({"v":1,"op":"status","rid":9})"}, 1000), "");

    // Refused connections are counted and logged when the service sees them close.
    for (int i = 0; i < 100 && (!log.contains("its handshake failed") || c->counters().refused.load() < 3); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(c->counters().refused.load(), 3u);
    // With CURVE a wrong secret is a wrong server key: the hello cannot be decrypted.
    EXPECT_TRUE(log.contains("refused a connection from "));
    EXPECT_TRUE(log.contains("wrong job secret"));
    EXPECT_TRUE(log.contains("refused status from tcp://127.0.0.1") ||
                log.contains("refused status from 127.0.0.1"));
    EXPECT_TRUE(log.contains("its handshake failed (no or a wrong job secret"));
    EXPECT_TRUE(status(*good)) << "the service is unharmed";
}

namespace {

long rss_kib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

// A peer speaking raw ZMTP 3.0 (RFC 23, RFC 24 for PLAIN) rather than through libzmq, so it
// can send what libzmq would not: its greeting and handshake (NULL, or PLAIN with
// `password`), then up to `frames` frames of `frame_bytes`, each flagged MORE, so the message
// never ends. Returns how many frames the kernel took before the coordinator closed the
// connection; -1 if the connection could not be made.
int flood_unfinished_message(const std::string &endpoint, const char *mechanism,
                             const std::string &password, int frames, std::size_t frame_bytes) {
    const auto colon = endpoint.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    inet_pton(AF_INET, endpoint.substr(6, colon - 6).c_str(), &a.sin_addr);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) return -1;
    auto put = [&](const std::string &b) {
        return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
    };
    std::string greeting(64, '\0');
    greeting[0] = '\xff';
    greeting[9] = '\x7f';
    greeting[10] = 3;  // ZMTP 3.0
    std::memcpy(&greeting[12], mechanism, std::strlen(mechanism));
    put(greeting);
    auto command = [](const std::string &body) {
        return std::string(1, '\x04') + std::string(1, static_cast<char>(body.size())) + body;
    };
    if (std::strcmp(mechanism, "PLAIN") == 0)
        put(command(std::string("\x05HELLO", 6) + std::string(1, 4) + "omni" +
                    std::string(1, static_cast<char>(password.size())) + password));
    const std::string ready_body = std::string("\x05READY", 6) + std::string(1, 11) + "Socket-Type" +
                                   std::string("\0\0\0\x06", 4) + "DEALER";
    if (std::strcmp(mechanism, "PLAIN") == 0) put(command(std::string("\x08INITIATE", 9) + ready_body.substr(6)));
    else put(command(ready_body));
    std::string header(9, '\0');
    header[0] = 0x03;  // MORE | LONG
    for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<char>((frame_bytes >> (56 - 8 * i)) & 0xff);
    const std::string payload(frame_bytes, 'x');
    int sent = 0;
    while (sent < frames && put(header) && put(payload)) ++sent;
    ::close(fd);
    return sent;
}

}  // namespace

// libzmq holds every frame of a message until its last one, whatever ZMQ_MAXMSGSIZE says
// (it bounds one frame). A peer without the secret is dropped at the handshake, so what it
// sends is never buffered: the service's memory does not grow with it.
TEST(Coordinator, FramesOfPeersWithoutTheSecretAreNeverBuffered) {
    LogCapture log;
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    const long before = rss_kib();
    const int frames = 96;  // 96 MiB, all flagged MORE
    for (const auto &[mechanism, password] :
         {std::pair<const char *, std::string>{"NULL", ""}, {"PLAIN", kOther}}) {
        const int sent = flood_unfinished_message(c->endpoints().front(), mechanism, password,
                                                  frames, 1 << 20);
        ASSERT_GE(sent, 0) << mechanism;
        EXPECT_LT(sent, frames) << mechanism << ": the coordinator did not close the connection";
    }
    // Give the service time to take in whatever it would have buffered.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const long grown = rss_kib() - before;
    EXPECT_LT(grown, 16 * 1024) << "the coordinator grew by " << grown << " KiB";
    for (int i = 0; i < 100 && !log.contains("its handshake failed"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(log.contains("refused a connection from "));
    auto good = client(*c);
    EXPECT_TRUE(status(*good)) << "the service is unharmed";
}

TEST(Coordinator, BoundsAndValidatesInput) {
    LogCapture log;
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    Raw raw(c->endpoints().front());
    EXPECT_NE(raw.roundtrip({"{not json"}).find("\"ok\":false"), std::string::npos);
    EXPECT_NE(raw.roundtrip({"a", "b", "c"}).find("one or two frames"), std::string::npos);
    EXPECT_EQ(c->counters().malformed.load(), 2u);
    EXPECT_TRUE(log.contains("malformed request"));
    // An oversized frame makes libzmq drop the connection: no reply, service unharmed.
    Raw big(c->endpoints().front());
    EXPECT_EQ(big.roundtrip({std::string(2 << 20, 'x')}, 500), "");
    auto good = client(*c);
    EXPECT_TRUE(status(*good));
}

TEST(Coordinator, GenerationsEndToEnd) {
    auto c = start(2, 1, 3);
    ASSERT_TRUE(c);
    // Two ranks join concurrently; each join blocks until generation 1 forms.
    auto joiner = [&](std::string id, std::uint32_t unit) {
        auto cl = client(*c);
        return cl->join(id, unit, 0, 5000);
    };
    auto f0 = std::async(std::launch::async, joiner, "r0", 0);
    auto f1 = std::async(std::launch::async, joiner, "r1", 1);
    auto d0 = f0.get(), d1 = f1.get();
    ASSERT_TRUE(d0) << d0.error();
    ASSERT_TRUE(d1) << d1.error();
    EXPECT_EQ(d0.value().next.generation, 1u);
    EXPECT_EQ(d0.value().next.rank_of(0, 0), 0u);
    EXPECT_EQ(d1.value().next.rank_of(1, 0), 1u);

    // omni-ctl's request: grow to 3 units; the joiner (unit 2) waits for the boundary.
    auto ctl = client(*c);
    Request grow;
    grow.op = Op::Reshape;
    grow.units = 3;
    auto g = ctl->call(grow, 3000);
    ASSERT_TRUE(g) << g.error();
    EXPECT_EQ(g.value().body["target_units"], 3);
    Request bad = grow;
    bad.units = 4;  // above MAX
    EXPECT_FALSE(ctl->call(bad, 3000));

    auto fj = std::async(std::launch::async, joiner, "r2", 2);
    // Wait until the coordinator has the joiner before the ranks reach the boundary.
    for (int i = 0; i < 100; ++i) {
        auto s = status(*ctl);
        if (s && !s.value().body["status"]["pending_joiners"].empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto b0 = std::async(std::launch::async, [&] { return client(*c)->boundary("r0", 1, 1, 5000); });
    auto b1 = std::async(std::launch::async, [&] { return client(*c)->boundary("r1", 1, 1, 5000); });
    auto e0 = b0.get(), e1 = b1.get(), ej = fj.get();
    ASSERT_TRUE(e0 && e1 && ej);
    // The same answer for every rank, joiner included.
    EXPECT_EQ(decision_to_json(e0.value()), decision_to_json(e1.value()));
    EXPECT_EQ(decision_to_json(e0.value()), decision_to_json(ej.value()));
    EXPECT_EQ(e0.value().kind, DecisionKind::Reshaped);
    EXPECT_EQ(e0.value().next.world, 3u);
    EXPECT_EQ(e0.value().next.generation, 2u);
    EXPECT_EQ(ej.value().next.rank_of(2, 0), 2u);
    EXPECT_EQ(ej.value().joining_units, std::vector<std::uint32_t>{2});
    auto s = status(*ctl);
    ASSERT_TRUE(s);
    EXPECT_EQ(s.value().body["status"]["generation"], 2);
    EXPECT_EQ(s.value().body["status"]["units"], 3);
    EXPECT_EQ(s.value().body["status"]["phase"], "running");
    EXPECT_EQ(s.value().body["status"]["last_resize"]["kind"], "planned");
    EXPECT_EQ(s.value().body["status"]["last_resize"]["new_units"], 3);
    // A rank reports a checkpoint; status shows it, with when it was reported.
    EXPECT_TRUE(s.value().body["status"]["last_checkpoint"].is_null());
    Request note;
    note.op = Op::Checkpoint;
    note.step = 1;
    note.location = "/ckpt/step-1";
    const auto before = static_cast<std::int64_t>(::time(nullptr));
    ASSERT_TRUE(client(*c)->call(note, 3000));
    auto s2 = status(*ctl);
    ASSERT_TRUE(s2);
    const auto &ck = s2.value().body["status"]["last_checkpoint"];
    EXPECT_EQ(ck["step"], 1);
    EXPECT_EQ(ck["location"], "/ckpt/step-1");
    EXPECT_GE(ck["time"].get<std::int64_t>(), before);
    EXPECT_LE(ck["time"].get<std::int64_t>(), before + 5);
}

// Liveness over the wire: a member that stops sending is lost without any boundary, the
// survivors' heartbeats say so, and the lost one is refused from then on (issue #46).
TEST(Coordinator, SilentMemberIsLostAndFencedOut) {
    CoordinatorConfig cfg;
    cfg.bind = {"tcp://127.0.0.1:0"};
    cfg.secret = kSecret;
    cfg.protocol.unit_size = 1;
    cfg.protocol.initial_units = cfg.protocol.max_units = 2;
    cfg.protocol.min_units = 1;
    cfg.protocol.boundary_timeout_ms = cfg.protocol.liveness_timeout_ms = 400;
    auto started = Coordinator::start(cfg);
    ASSERT_TRUE(started) << started.error();
    auto &c = *started.value();
    LogCapture log;
    auto j0 = std::async(std::launch::async, [&] { return client(c)->join("r0", 0, 0, 5000); });
    auto j1 = std::async(std::launch::async, [&] { return client(c)->join("r1", 1, 0, 5000); });
    ASSERT_TRUE(j0.get() && j1.get());
    auto r0 = client(c), r1 = client(c);
    // r1 goes silent; r0 keeps sending and hears of the loss within the timeout and a tick.
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<HeartbeatAck> told;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
        auto a = r0->heartbeat("r0", 1, 2000);
        ASSERT_TRUE(a) << a.error();
        EXPECT_FALSE(a.value().fenced);
        if (a.value().abandon_generation == 1) {
            told = a.value();
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(told);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(400 + 1000));
    EXPECT_EQ(told->timeout_ms, 400);
    auto s = status(*r0);
    ASSERT_TRUE(s);
    EXPECT_EQ(s.value().body["status"]["lost"], nlohmann::json::array({"r1"}));
    EXPECT_TRUE(s.value().body["status"]["boundary_step"].is_null());
    EXPECT_TRUE(log.contains("silent for 400 ms, lost: r1"));
    auto d = r0->boundary("r0", 1, 3, 3000);
    ASSERT_TRUE(d) << d.error();
    EXPECT_TRUE(d.value().rewind);
    EXPECT_EQ(d.value().next.world, 1u);
    // r1 comes back: fenced, and nothing it sends is taken.
    auto a = r1->heartbeat("r1", 1, 2000);
    ASSERT_TRUE(a) << a.error();
    EXPECT_TRUE(a.value().fenced);
    EXPECT_EQ(a.value().fenced_generation, 1u);
    auto b = r1->boundary("r1", 1, 3, 2000);
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().find("fenced out"), std::string::npos) << b.error();
    EXPECT_FALSE(r1->ready("r1", 1, 2000));
    Request note;
    note.op = Op::Checkpoint;
    note.step = 3;
    note.id = "r1";
    EXPECT_FALSE(r1->call(note, 2000));
    Request stop;
    stop.op = Op::Stop;
    stop.reason = "from a fenced rank";
    stop.id = "r1";
    EXPECT_FALSE(r1->call(stop, 2000));
    s = status(*r0);
    ASSERT_TRUE(s);
    EXPECT_EQ(s.value().body["status"]["phase"], "running");
    EXPECT_EQ(s.value().body["status"]["generation"], 2);
    EXPECT_TRUE(s.value().body["status"]["last_checkpoint"].is_null());
}

TEST(Coordinator, KeyValueStore) {
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    auto a = client(*c), b = client(*c);
    ASSERT_TRUE(a->kv_set(1, "rank_0", std::string("\0addr", 5), 3000));
    auto v = b->kv_get(1, "rank_0", 0);
    ASSERT_TRUE(v) << v.error();
    EXPECT_EQ(v.value(), std::string("\0addr", 5));
    // Generations are separate namespaces.
    auto miss = b->kv_get(0, "rank_0", 0);
    ASSERT_FALSE(miss);
    EXPECT_NE(miss.error().find("not found"), std::string::npos) << miss.error();
    // Before formation generations 0..1 are open; 5 is out of range.
    EXPECT_FALSE(a->kv_set(5, "k", "v", 3000));
    // A wait times out, coordinator side.
    auto t0 = std::chrono::steady_clock::now();
    auto w = b->kv_wait(1, {"rank_0", "rank_1"}, 200);
    auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().find("timeout"), std::string::npos) << w.error();
    // The coordinator's clock has millisecond resolution: allow it to fire up to 1 ms early.
    EXPECT_GE(waited, std::chrono::milliseconds(199));
    EXPECT_LT(waited, std::chrono::milliseconds(3000));
    // A blocked get is answered by another client's set.
    auto pending = std::async(std::launch::async, [&] { return b->kv_get(1, "rank_1", 5000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(a->kv_set(1, "rank_1", "late", 3000));
    auto got = pending.get();
    ASSERT_TRUE(got) << got.error();
    EXPECT_EQ(got.value(), "late");
    EXPECT_TRUE(b->kv_wait(1, {"rank_0", "rank_1"}, 0));
}

// kv_add: what torch.distributed's store-based barrier counts with (omni.torch.Store).
TEST(Coordinator, KeyValueAdd) {
    auto c = start(1, 1, 1);
    ASSERT_TRUE(c);
    auto a = client(*c), b = client(*c);
    auto v = a->kv_add(1, "count", 1, 3000);
    ASSERT_TRUE(v) << v.error();
    EXPECT_EQ(v.value(), 1);
    EXPECT_EQ(b->kv_add(1, "count", 1, 3000).value(), 2);
    EXPECT_EQ(a->kv_add(1, "count", 0, 3000).value(), 2);
    EXPECT_EQ(b->kv_add(1, "count", -5, 3000).value(), -3);
    // The sum is stored as decimal text, readable with kv_get.
    EXPECT_EQ(b->kv_get(1, "count", 0).value(), "-3");
    // Concurrent adds from several clients are each counted once.
    std::vector<std::unique_ptr<CoordinatorClient>> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(client(*c));
    std::vector<std::future<Result<std::int64_t>>> adds;
    for (int i = 0; i < 4; ++i)
        adds.push_back(std::async(std::launch::async, [&, i] { return clients[i]->kv_add(1, "race", 1, 3000); }));
    std::vector<std::int64_t> seen;
    for (auto &f : adds) seen.push_back(f.get().value());
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<std::int64_t>{1, 2, 3, 4}));
    // A blocked get is answered by an add.
    auto pending = std::async(std::launch::async, [&] { return b->kv_get(1, "later", 5000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(a->kv_add(1, "later", 7, 3000));
    EXPECT_EQ(pending.get().value(), "7");
    // A value that is no integer, and a sum beyond +-2^62, are refused; the value stays.
    ASSERT_TRUE(a->kv_set(1, "text", "abc", 3000));
    auto bad = a->kv_add(1, "text", 1, 3000);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("not a decimal integer"), std::string::npos) << bad.error();
    ASSERT_TRUE(a->kv_add(1, "big", kMaxKvAdd, 3000));
    auto over = a->kv_add(1, "big", 1, 3000);
    ASSERT_FALSE(over);
    EXPECT_NE(over.error().find("the sum leaves"), std::string::npos) << over.error();
    EXPECT_EQ(a->kv_add(1, "big", 0, 3000).value(), kMaxKvAdd);
    // Generations outside the open ones are refused, as for kv_set.
    EXPECT_FALSE(a->kv_add(5, "count", 1, 3000));
}

// Deferred kv requests are bounded (CoordinatorConfig::max_waiters): one over the bound is
// refused at once, and the waiting ones are still answered.
TEST(Coordinator, WaitingKvRequestsAreBounded) {
    auto c = start(1, 1, 1, 2);
    ASSERT_TRUE(c);
    // Three waits for a key nobody has set: whichever arrives third is refused, long before
    // its 5 s timeout; the other two wait.
    std::vector<std::unique_ptr<CoordinatorClient>> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(client(*c));
    std::vector<std::future<Result<std::string>>> waits;
    for (int i = 0; i < 3; ++i)
        waits.push_back(std::async(std::launch::async, [&, i] { return clients[i]->kv_get(1, "k", 5000); }));
    int refused = -1;
    for (int tries = 0; tries < 400 && refused < 0; ++tries)
        for (int i = 0; i < 3 && refused < 0; ++i)
            if (waits[i].wait_for(std::chrono::milliseconds(10)) == std::future_status::ready) refused = i;
    ASSERT_GE(refused, 0) << "no wait was refused";
    auto over = waits[refused].get();
    ASSERT_FALSE(over);
    EXPECT_NE(over.error().find("too many waiting kv requests"), std::string::npos) << over.error();
    ASSERT_TRUE(clients[3]->kv_set(1, "k", "v", 3000));
    for (int i = 0; i < 3; ++i) {
        if (i == refused) continue;
        auto got = waits[i].get();
        ASSERT_TRUE(got) << got.error();
        EXPECT_EQ(got.value(), "v");
    }
}

// The keys all waiters wait for are bounded together (one waiter may name 4096): a wait
// that would pass the bound is refused at once; set keys stop counting.
TEST(Coordinator, KeysWaitedForAreBoundedTogether) {
    auto c = start(1, 1, 1, CoordinatorConfig{}.max_waiters, 4);
    ASSERT_TRUE(c);
    std::vector<std::unique_ptr<CoordinatorClient>> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(client(*c));
    auto wait = [&](int i, std::vector<std::string> keys) {
        return std::async(std::launch::async, [&, i, keys] { return clients[i]->kv_wait(1, keys, 5000); });
    };
    ASSERT_TRUE(clients[3]->kv_set(1, "set", "v", 3000));
    // 3 missing keys ("set" is there, "c" named twice counts once), then 1 more: 4 in all.
    auto w0 = wait(0, {"a", "b", "c", "c", "set"});
    auto w1 = wait(1, {"a"});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(w0.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
    EXPECT_EQ(w1.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
    auto over = clients[2]->kv_wait(1, {"d"}, 5000);  // a fifth: refused at once
    ASSERT_FALSE(over);
    EXPECT_NE(over.error().find("too many keys waited for (4 already, at most 4)"), std::string::npos)
        << over.error();
    // Setting "a" answers w1 (its only key) and leaves w0 waiting for b and c.
    ASSERT_TRUE(clients[3]->kv_set(1, "a", "1", 3000));
    auto r1 = w1.get();
    EXPECT_TRUE(r1) << r1.error();
    EXPECT_EQ(w0.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
    // b and c are now the only keys waited for: two more fit.
    auto w2 = wait(2, {"d", "e"});
    ASSERT_TRUE(clients[3]->kv_set(1, "b", "1", 3000));
    ASSERT_TRUE(clients[3]->kv_set(1, "c", "1", 3000));
    auto r0 = w0.get();
    EXPECT_TRUE(r0) << r0.error();
    ASSERT_TRUE(clients[3]->kv_set(1, "e", "1", 3000));
    ASSERT_TRUE(clients[3]->kv_set(1, "d", "1", 3000));
    auto r2 = w2.get();
    EXPECT_TRUE(r2) << r2.error();
}

TEST(Coordinator, ClientTimeoutKeepsTheConnectionUsable) {
    auto c = start(2, 1, 2);
    ASSERT_TRUE(c);
    auto cl = client(*c);
    // A join that cannot complete (one of two units) times out on the client side...
    auto d = cl->join("lonely", 0, 0, 200);
    ASSERT_FALSE(d);
    EXPECT_NE(d.error().find("no reply"), std::string::npos) << d.error();
    // ... and the next request on the same connection gets its own reply.
    auto s = status(*cl);
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s.value().body["status"]["phase"], "forming");
}
