// The coordinator service; see coordinator.h.
#include "coord/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <ctime>

#include <algorithm>

#include <chrono>
#include <map>
#include <set>

#include <zmq.hpp>

#include "coord/conn_auth.h"
#include "coord/log.h"
#include "coord/secret.h"
#include "coord/wire.h"

namespace omni::launcher {
namespace {

constexpr const char *kComponent = "omni-coordinator";
constexpr std::int64_t kPollMs = 100;  // bounds how long stop() waits for the thread

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string view(const zmq::message_t &m) { return std::string(m.data<char>(), m.size()); }

// "IP:PORT" of a socket's peer (getpeername) or its own address; "" when it has none.
std::string address_of(int fd, bool peer, std::uint16_t *port = nullptr) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &len)
              : ::getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len)) != 0 ||
        ss.ss_family != AF_INET)
        return {};
    const auto *a = reinterpret_cast<const sockaddr_in *>(&ss);
    char ip[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    if (port) *port = ntohs(a->sin_port);
    return std::string(ip) + ":" + std::to_string(ntohs(a->sin_port));
}

ino_t inode_of(int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? st.st_ino : 0;
}

}  // namespace

struct Coordinator::Impl {
    struct Waiting {  // a join/boundary request waiting for its decision
        std::string routing;
        std::uint64_t rid;
    };
    struct KvWaiter {  // a kv_get/kv_wait waiting for keys
        std::string routing;
        std::uint64_t rid;
        std::uint64_t generation;
        std::string first_key;  // kv_get answers with its value
        bool want_value;
        std::int64_t deadline;
        // The keys not set yet (each in kv_wanted). Only these are kept, so a waiter's
        // memory is bounded by max_waiting_keys, however many keys it named.
        std::set<std::string> missing;
    };

    CoordinatorConfig cfg;
    zmq::context_t ctx{1};
    zmq::socket_t sock{ctx, zmq::socket_type::router};
    zmq::socket_t zap{ctx, zmq::socket_type::rep};  // conn_auth.h
    zmq::socket_t monitor;                          // sock's failed handshakes
    Protocol protocol;
    KvStore kv;
    // The last checkpoint a rank reported (Op::Checkpoint), for status; wall-clock time.
    struct CheckpointNote {
        std::uint64_t step = 0;
        std::string location;
        std::int64_t unix_s = 0;
    };
    std::optional<CheckpointNote> last_checkpoint;
    std::map<std::string, Waiting, std::less<>> waiting;
    // Waiters by number, and the waiters missing each (generation, key): a kv_set wakes only
    // those waiting for its key, so its cost does not grow with every key everybody awaits.
    std::map<std::uint64_t, KvWaiter> kv_waiters;
    std::map<std::pair<std::uint64_t, std::string>, std::set<std::uint64_t>> kv_wanted;
    // Waiters by deadline: the service loop asks for the next one after every batch of
    // requests, and a scan of every waiter there grew a rendezvous of N ranks as O(N^2).
    std::set<std::pair<std::int64_t, std::uint64_t>> kv_deadlines;
    std::uint64_t next_waiter = 0;
    std::size_t kv_waiting_keys = 0;  // the sum of every waiter's missing keys
    // Every TCP connection libzmq accepted, by descriptor, from the monitor's "accepted" to its
    // "disconnected": who it is, since when, and whether it got past the handshake (it sent a
    // request, or outlived kHandshakeMs, after which libzmq would have closed it otherwise).
    // The inode tells a descriptor number reused by another socket from the one accepted.
    struct Conn {
        std::string peer;
        std::int64_t since = 0;
        ino_t inode = 0;
        bool authenticated = false;
        bool dropping = false;  // shut down by us, its "disconnected" still to come
    };
    std::map<int, Conn> conns;
    std::string last_failure;  // the handshake failure the next unfinished disconnect is about
    std::vector<std::uint16_t> ports;  // the bound ports
    std::string client_key;            // curve_keys(secret).client_public_raw
    std::size_t max_pending;           // max_pending_connections(the largest world)
    std::int64_t last_bound = 0;       // the last bound_pending()
    RateLimit log_limit{20, 1000};
    std::uint64_t generation_seen = 0;
    CoordinatorCounters *counters = nullptr;  // owned by the Coordinator

    explicit Impl(const CoordinatorConfig &c)
        : cfg(c), protocol(c.protocol), kv(c.kv),
          max_pending(max_pending_connections(std::uint64_t(c.protocol.max_units) * c.protocol.unit_size)) {}

    void send(const std::string &routing, const std::string &header, const std::string *value = nullptr) {
        // Never block the service on one slow or vanished peer: ROUTER drops what it cannot
        // route, and a full pipe drops the reply (the client times out and retries).
        try {
            if (!sock.send(zmq::buffer(routing), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
                return;
            if (value) {
                sock.send(zmq::buffer(header), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
                sock.send(zmq::buffer(*value), zmq::send_flags::dontwait);
            } else {
                sock.send(zmq::buffer(header), zmq::send_flags::dontwait);
            }
        } catch (const zmq::error_t &e) {
            log_line(LogLevel::Warning, kComponent, std::string("send: ") + e.what());
        }
    }

    void log_limited(LogLevel level, const std::string &msg) {
        std::uint64_t suppressed = 0;
        if (!log_limit.allow(now_ms(), suppressed)) return;
        log_line(level, kComponent,
                 suppressed ? msg + " (" + std::to_string(suppressed) + " similar lines suppressed)"
                            : msg);
    }

    void deliver(const std::vector<Delivery> &out) {
        // One decision, serialised once, goes to every rank of the generation.
        std::map<const Decision *, std::string> dumped;
        for (const auto &d : out) {
            auto &text = dumped[d.decision.get()];
            if (text.empty()) {
                text = decision_to_json(*d.decision).dump();
                log_decision(*d.decision);
            }
            auto it = waiting.find(d.to);
            if (it == waiting.end()) continue;  // it will repeat its request and get last_
            send(it->second.routing, "{\"decision\":" + text + ",\"ok\":true,\"rid\":" +
                                         std::to_string(it->second.rid) + ",\"v\":" +
                                         std::to_string(kWireVersion) + "}");
            waiting.erase(it);
        }
        retire_generations();
    }

    void log_decision(const Decision &d) {
        if (d.kind == DecisionKind::Continue) return;
        std::string msg = std::string(to_string(d.kind)) + " at generation " +
                          std::to_string(d.generation) + " step " + std::to_string(d.step) +
                          " (" + d.reason + ")";
        if (d.kind == DecisionKind::Reshaped)
            msg += ": generation " + std::to_string(d.next.generation) + ", world " +
                   std::to_string(d.next.world) + ", " + std::to_string(d.joining.size()) +
                   " joining, " + std::to_string(d.leaving.size()) + " leaving, " +
                   std::to_string(d.lost.size()) + " lost";
        log_line(d.kind == DecisionKind::Stop || d.rewind ? LogLevel::Warning : LogLevel::Info,
                 kComponent, msg);
    }

    // Keeps the store to the current and the previous generation: a straggler of g-1 may
    // still read, nothing older is ever needed.
    void retire_generations() {
        std::uint64_t g = protocol.generation();
        if (g == generation_seen) return;
        generation_seen = g;
        if (g < 2) return;
        kv.drop_below(g - 1);
        for (auto it = kv_waiters.begin(); it != kv_waiters.end();) {
            if (it->second.generation < g - 1) {
                send(it->second.routing, error_reply(it->second.rid, "generation " +
                                                                         std::to_string(it->second.generation) +
                                                                         " was retired"));
                it = remove_waiter(it);
            } else {
                ++it;
            }
        }
    }

    // Parks a kv_get/kv_wait whose keys are not all set, within the bounds on waiters and
    // on the keys they wait for together (each waiting key costs memory until it is set).
    Status add_waiter(KvWaiter w, const std::vector<std::string> &keys) {
        for (const auto &k : keys)
            if (!kv.get(w.generation, k)) w.missing.insert(k);
        if (kv_waiters.size() >= cfg.max_waiters) return make_error("too many waiting kv requests");
        if (w.missing.size() > cfg.max_waiting_keys - std::min(kv_waiting_keys, cfg.max_waiting_keys))
            return make_error("too many keys waited for (" + std::to_string(kv_waiting_keys) +
                              " already, at most " + std::to_string(cfg.max_waiting_keys) + ")");
        const std::uint64_t n = next_waiter++;
        for (const auto &k : w.missing) kv_wanted[{w.generation, k}].insert(n);
        kv_waiting_keys += w.missing.size();
        kv_deadlines.emplace(w.deadline, n);
        kv_waiters.emplace(n, std::move(w));
        return Status::success();
    }

    std::map<std::uint64_t, KvWaiter>::iterator remove_waiter(std::map<std::uint64_t, KvWaiter>::iterator it) {
        for (const auto &k : it->second.missing) {
            auto w = kv_wanted.find({it->second.generation, k});
            if (w == kv_wanted.end()) continue;
            w->second.erase(it->first);
            if (w->second.empty()) kv_wanted.erase(w);
        }
        kv_waiting_keys -= it->second.missing.size();
        kv_deadlines.erase({it->second.deadline, it->first});
        return kv_waiters.erase(it);
    }

    Status check_kv_generation(std::uint64_t g) const {
        std::uint64_t cur = protocol.generation();
        std::uint64_t lo = cur > 1 ? cur - 1 : 0;
        if (g < lo || g > cur + 1)
            return make_error("kv generation " + std::to_string(g) + " is outside " +
                              std::to_string(lo) + ".." + std::to_string(cur + 1));
        return Status::success();
    }

    // `key` of `generation` was set: answers the waiters it was the last missing key of.
    void wake_kv(std::uint64_t generation, const std::string &key) {
        auto wanted = kv_wanted.find({generation, key});
        if (wanted == kv_wanted.end()) return;
        const std::set<std::uint64_t> ids = std::move(wanted->second);
        kv_wanted.erase(wanted);
        for (std::uint64_t id : ids) {
            auto it = kv_waiters.find(id);
            if (it == kv_waiters.end()) continue;
            it->second.missing.erase(key);
            --kv_waiting_keys;
            if (!it->second.missing.empty()) continue;
            answer_kv(it->second);
            kv_deadlines.erase({it->second.deadline, it->first});
            kv_waiters.erase(it);
        }
    }

    void answer_kv(const KvWaiter &w) {
        if (w.want_value) {
            send(w.routing, ok_reply(w.rid), kv.get(w.generation, w.first_key));
        } else {
            send(w.routing, ok_reply(w.rid));
        }
    }

    // `frame`: the request's header frame, whose metadata names the peer (read only for a
    // log line: a string from libzmq's metadata map at every request cost more than needed).
    void handle(const std::string &routing, zmq::message_t *frame, const std::string &header,
                const std::string *value) {
        auto peer_of = [frame]() -> std::string {
            if (frame) {
                try {
                    return frame->gets("Peer-Address");
                } catch (const zmq::error_t &) {
                }
            }
            return "unknown peer";
        };
        const std::string_view value_view = value ? std::string_view(*value) : std::string_view();
        auto parsed = parse_request(header, value ? &value_view : nullptr);
        if (!parsed) {
            // Counted before the reply goes out, so a client that saw the reply sees the count.
            counters->malformed++;
            log_limited(LogLevel::Warning, "malformed request from " + peer_of() + ": " + parsed.error());
            send(routing, error_reply(0, parsed.error()));
            return;
        }
        Request &r = parsed.value();
        if (!secrets_equal(r.secret, cfg.secret)) {
            counters->refused++;
            log_limited(LogLevel::Warning,
                        std::string("refused ") + to_string(r.op) + " from " + peer_of() + ": " +
                            (r.secret.empty() ? "no job secret" : "wrong job secret"));
            send(routing, error_reply(r.rid, "refused: missing or wrong job secret"));
            return;
        }
        const std::int64_t now = now_ms();
        auto reply_status = [&](const Status &st) {
            send(routing, st ? ok_reply(r.rid) : error_reply(r.rid, st.error()));
        };
        switch (r.op) {
        case Op::Join:
        case Op::Boundary: {
            auto res = r.op == Op::Join ? protocol.join(r.id, r.unit, r.slot, now, r.node)
                                        : protocol.boundary(r.id, r.generation, r.step, now, r.batch);
            if (!res) {
                send(routing, error_reply(r.rid, res.error()));
                return;
            }
            waiting[r.id] = Waiting{routing, r.rid};  // a repeat replaces an older request
            deliver(res.value());
            return;
        }
        case Op::Lost: {
            auto res = protocol.lost(r.id, now);
            if (!res) {
                send(routing, error_reply(r.rid, res.error()));
                return;
            }
            log_line(LogLevel::Warning, kComponent, "rank '" + r.id + "' reported lost");
            waiting.erase(r.id);
            send(routing, ok_reply(r.rid));
            deliver(res.value());
            return;
        }
        case Op::Ready:
            reply_status(protocol.ready(r.id, r.generation, now));
            return;
        case Op::Reshape: {
            auto st = protocol.request_reshape(r.units, now, r.leave, r.via, r.cause);
            if (!st) {
                send(routing, error_reply(r.rid, st.error()));
                return;
            }
            std::string leaving;
            for (auto unit : r.leave) leaving += (leaving.empty() ? "" : ",") + std::to_string(unit);
            log_line(LogLevel::Info, kComponent,
                     "planned reshape to " + std::to_string(r.units) + " units requested" +
                         (leaving.empty() ? std::string() : " (leaving: units " + leaving + ")") +
                         (r.via.empty() ? std::string() : " via " + r.via) +
                         (r.cause.empty() ? std::string() : " (" + r.cause + ")"));
            auto s = protocol.status();
            send(routing, ok_reply(r.rid, {{"target_units", r.units}, {"units", s.units},
                                           {"generation", s.generation}}));
            return;
        }
        case Op::Stop: {
            if (!r.id.empty() && protocol.fenced(r.id))
                return send(routing, error_reply(r.rid, "stop: '" + r.id + "' was declared lost and is fenced out"));
            auto res = protocol.request_stop(r.reason);
            if (!res) {
                send(routing, error_reply(r.rid, res.error()));
                return;
            }
            log_line(LogLevel::Info, kComponent, "stop requested: " + r.reason);
            send(routing, ok_reply(r.rid));
            deliver(res.value());
            return;
        }
        case Op::Status: {
            auto j = status_to_json(protocol.status());
            j["kv"] = {{"keys", kv.keys()}, {"bytes", kv.bytes()}};
            j["last_checkpoint"] = nullptr;
            if (last_checkpoint)
                j["last_checkpoint"] = {{"step", last_checkpoint->step},
                                        {"location", last_checkpoint->location.empty()
                                                         ? nlohmann::json(nullptr)
                                                         : nlohmann::json(last_checkpoint->location)},
                                        {"time", last_checkpoint->unix_s}};
            send(routing, ok_reply(r.rid, {{"status", std::move(j)}}));
            return;
        }
        case Op::Heartbeat: {
            auto ack = protocol.heartbeat(r.id, r.generation, now);
            if (!ack) return send(routing, error_reply(r.rid, ack.error()));
            if (ack.value().fenced)
                log_limited(LogLevel::Warning, "heartbeat from '" + r.id + "', lost in generation " +
                                                   std::to_string(ack.value().fenced_generation) +
                                                   ": fenced out, told to exit");
            send(routing, heartbeat_reply(r.rid, ack.value()));
            return;
        }
        case Op::Checkpoint:
            if (!r.id.empty() && protocol.fenced(r.id))
                return send(routing, error_reply(r.rid, "checkpoint: '" + r.id + "' was declared lost and is fenced out"));
            last_checkpoint = CheckpointNote{r.step, r.location, static_cast<std::int64_t>(::time(nullptr))};
            send(routing, ok_reply(r.rid));
            return;
        case Op::KvSet: {
            if (auto st = check_kv_generation(r.generation); !st) return reply_status(st);
            auto st = kv.set(r.generation, r.keys.front(), r.value);
            reply_status(st);
            if (st) wake_kv(r.generation, r.keys.front());
            return;
        }
        case Op::KvAdd: {
            if (auto st = check_kv_generation(r.generation); !st) return reply_status(st);
            std::int64_t value = 0;
            if (const std::string *cur = kv.get(r.generation, r.keys.front())) {
                auto v = parse_kv_integer(*cur);
                if (!v) return send(routing, error_reply(r.rid, "key '" + r.keys.front() + "': " + v.error()));
                value = v.value();
            }
            if ((r.amount > 0 && value > kMaxKvAdd - r.amount) || (r.amount < 0 && value < -kMaxKvAdd - r.amount))
                return send(routing, error_reply(r.rid, "key '" + r.keys.front() + "': the sum leaves +-" +
                                                            std::to_string(kMaxKvAdd)));
            value += r.amount;
            auto st = kv.set(r.generation, r.keys.front(), std::to_string(value));
            if (!st) return reply_status(st);
            send(routing, ok_reply(r.rid, {{"value", value}}));
            wake_kv(r.generation, r.keys.front());
            return;
        }
        case Op::KvGet:
        case Op::KvWait: {
            if (auto st = check_kv_generation(r.generation); !st) return reply_status(st);
            KvWaiter w{routing, r.rid, r.generation, r.keys.front(), r.op == Op::KvGet, now + r.timeout_ms, {}};
            if (kv.has_all(r.generation, r.keys)) return answer_kv(w);
            if (r.timeout_ms == 0)
                return send(routing, error_reply(r.rid, "key '" + r.keys.front() + "' not found"));
            if (auto st = add_waiter(std::move(w), r.keys); !st) return send(routing, error_reply(r.rid, st.error()));
            return;
        }
        }
    }

    void expire(std::int64_t now) {
        const std::size_t lost_before = protocol.lost_members().size();
        deliver(protocol.tick(now));
        if (protocol.lost_members().size() > lost_before) {
            // Declared lost for silence, and the survivors are not at the boundary yet: they
            // hear it in their next heartbeat (the decision, once made, is logged too).
            std::string ids;
            for (const auto &id : protocol.lost_members()) ids += (ids.empty() ? "" : ", ") + id;
            log_line(LogLevel::Warning, kComponent,
                     "generation " + std::to_string(protocol.generation()) + ": silent for " +
                         std::to_string(cfg.protocol.liveness_timeout_ms) + " ms, lost: " + ids +
                         "; waiting for the survivors at the boundary");
        }
        while (!kv_deadlines.empty() && now >= kv_deadlines.begin()->first) {
            auto it = kv_waiters.find(kv_deadlines.begin()->second);
            send(it->second.routing, error_reply(it->second.rid, "timeout waiting for key(s) in generation " +
                                                                     std::to_string(it->second.generation)));
            remove_waiter(it);  // and its deadline
        }
    }

    std::int64_t poll_timeout(std::int64_t now) const {
        std::int64_t t = kPollMs;
        if (auto d = protocol.next_deadline()) t = std::min(t, std::max<std::int64_t>(0, *d - now));
        if (!kv_deadlines.empty()) t = std::min(t, std::max<std::int64_t>(0, kv_deadlines.begin()->first - now));
        return t;
    }

    // A peer's handshake: admitted only with the client key derived from the job secret. A
    // peer without the secret rarely gets here: it cannot encrypt its hello to the server
    // key, which is derived from the secret too, and fails earlier (note_connection_event).
    bool answer_zap() {
        auto req = read_zap_request(zap);
        if (!req) return false;
        const bool admit = req->mechanism == "CURVE" && secrets_equal(req->client_key, client_key);
        if (!admit) last_failure = "wrong client key";  // counted at its disconnect
        send_zap_reply(zap, *req, admit);
        return true;
    }

    std::size_t pending() const {
        std::size_t n = 0;
        for (const auto &[fd, c] : conns) n += !c.authenticated && !c.dropping;
        return n;
    }

    // The monitor's events: connections accepted and closed, handshakes refused by ZAP or
    // ended without detail (a timeout, a peer that hung up). A refused connection is counted
    // and named by the "disconnected" that ends it, which libzmq reports right after the
    // failure on its one I/O thread. Handshakes that fail on a protocol error (a wrong
    // secret's hello cannot be decrypted; not ZMTP; not CURVE) are not monitored
    // (conn_auth.cc says why) and show as a connection closed before its handshake finished.
    bool note_connection_event() {
        auto h = read_handshake_failure(monitor);
        if (!h) return false;
        const std::int64_t now = now_ms();
        if (h->accepted) {
            // Reported after the fact: a connection refused within a millisecond may be closed
            // by now (then it is logged as from an unknown peer), and in a rare race its
            // number may name a newer connection already, so the name is best effort. Only a
            // socket on one of our ports is ever shut down (bound_pending checks the inode).
            // Its first request may even have been read before this event (receive_one
            // then made the entry): it stays authenticated.
            const int fd = static_cast<int>(h->code);
            auto early = conns.find(fd);
            const bool served = early != conns.end() && early->second.authenticated && early->second.peer.empty();
            std::uint16_t local = 0;
            if (address_of(fd, false, &local).empty())
                conns[fd] = Conn{"", now, 0, served, false};
            else if (std::find(ports.begin(), ports.end(), local) != ports.end())
                conns[fd] = Conn{address_of(fd, true), now, inode_of(fd), served, false};
        } else if (h->disconnected) {
            auto it = conns.find(static_cast<int>(h->code));
            if (it != conns.end()) {
                const Conn &c = it->second;
                if (!c.authenticated && !c.dropping) {
                    counters->refused++;
                    const std::int64_t age = now - c.since;
                    std::string why = last_failure;
                    if (why.empty())
                        why = age >= kHandshakeMs - 250
                                  ? "no handshake within " + std::to_string(kHandshakeMs) + " ms"
                                  : "its handshake failed (no or a wrong job secret, not a slurm-omni client, or a replay)";
                    log_limited(LogLevel::Warning, "refused a connection from " +
                                                       (c.peer.empty() ? std::string("an unknown peer (closed before it was named)") : c.peer) +
                                                       ": " + why + " (after " + std::to_string(age) + " ms)");
                }
                conns.erase(it);
            }
            last_failure.clear();
        }
        return true;  // the caller counts the unfinished ones after its batch of events
    }

    // At most max_pending unfinished handshakes (conn_auth.h): each holds a descriptor and
    // libzmq's buffers for up to kHandshakeMs, so a peer opening connections faster than
    // they time out would otherwise exhaust descriptors and keep the job's own ranks out.
    // The oldest go first (a slow-loris holds its connections longest; an honest client,
    // accepted last, is the youngest and finishes its handshake in a round trip, so only
    // max_pending connections opened within that round trip could push it out, and it would then report
    // the coordinator refused it). shutdown(2) makes libzmq read end-of-file and close the
    // connection as if the peer had.
    void bound_pending(std::int64_t now) {
        std::vector<std::pair<std::int64_t, int>> open;  // (since, fd)
        for (auto it = conns.begin(); it != conns.end();) {
            Conn &c = it->second;
            if (!c.authenticated && !c.dropping && now - c.since > kHandshakeMs + 1000)
                c.authenticated = true;  // libzmq would have closed it otherwise
            if (!c.authenticated && !c.dropping) open.emplace_back(c.since, it->first);
            ++it;
        }
        if (open.size() <= max_pending) {
            counters->pending_connections = open.size();
            return;
        }
        std::sort(open.begin(), open.end());
        for (std::size_t i = 0; i + max_pending < open.size(); ++i) {
            const int fd = open[i].second;
            Conn &c = conns[fd];
            if (c.inode == 0 || inode_of(fd) != c.inode) {  // closed already; its number reused
                conns.erase(fd);
                continue;
            }
            (void)::shutdown(fd, SHUT_RDWR);
            c.dropping = true;
            counters->dropped_connections++;
            log_limited(LogLevel::Warning, "dropped the connection from " + c.peer + " after " +
                                               std::to_string(now - c.since) + " ms without a handshake: " +
                                               std::to_string(open.size()) + " unfinished, at most " +
                                               std::to_string(max_pending));
        }
        counters->pending_connections = pending();
    }

    // Reads one whole multipart message; returns false when none is waiting.
    bool receive_one() {
        std::size_t count = 0;
        auto parts = recv_message(sock, 3, &count);  // extra parts are dropped
        if (count == 0) return false;
        counters->requests++;
        std::string peer = "unknown peer";
        if (parts.size() >= 2) {  // its connection got past the handshake
            try {
                Conn &c = conns[parts[1].get(ZMQ_SRCFD)];  // made here if its "accepted" is still queued
                c.authenticated = true;
                if (c.since == 0) c.since = now_ms();
            } catch (const zmq::error_t &) {
            }
        }
        std::string routing = view(parts[0]);
        if (count < 2 || count > 3) {
            counters->malformed++;
            if (parts.size() >= 2) {
                try {
                    peer = parts[1].gets("Peer-Address");
                } catch (const zmq::error_t &) {
                }
            }
            log_limited(LogLevel::Warning, "malformed request from " + peer + ": " +
                                               std::to_string(count - 1) + " frames");
            send(routing, error_reply(0, "a request has one or two frames"));
            return true;
        }
        std::string header = view(parts[1]);
        std::string value;
        if (count == 3) value = view(parts[2]);
        handle(routing, &parts[1], header, count == 3 ? &value : nullptr);
        return true;
    }

    void run(std::atomic<bool> &stopping) {
        try {
            while (!stopping) {
                std::int64_t now = now_ms();
                zmq::pollitem_t items[] = {{static_cast<void *>(sock), 0, ZMQ_POLLIN, 0},
                                           {static_cast<void *>(zap), 0, ZMQ_POLLIN, 0},
                                           {static_cast<void *>(monitor), 0, ZMQ_POLLIN, 0}};
                zmq::poll(items, 3, std::chrono::milliseconds(poll_timeout(now)));
                // Bounded batches, so timers run even under a flood of requests or connections.
                for (int i = 0; i < 256 && answer_zap(); ++i) {
                }
                int events = 0;
                while (events < 1024 && note_connection_event()) ++events;
                for (int i = 0; i < 256 && receive_one(); ++i) {
                }
                // bound_pending looks at every connection: after new ones were accepted (the
                // cap applies at once), otherwise every kPollMs for the handshake deadline. At
                // every batch it was O(N) a request when requests come one by one.
                const std::int64_t after = now_ms();
                if (events > 0 || after - last_bound >= kPollMs) {
                    bound_pending(after);
                    last_bound = after;
                }
                expire(after);
            }
        } catch (const std::exception &e) {
            log_line(LogLevel::Error, kComponent, std::string("service stopped: ") + e.what());
        }
    }
};

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Coordinator>> Coordinator::start(const CoordinatorConfig &cfg) {
    if (auto st = check_secret_format(cfg.secret); !st) return Error{st.error()};
    if (auto st = validate(cfg.protocol); !st) return Error{st.error()};
    if (cfg.bind.empty()) return make_error("coordinator: no endpoint to bind to");
    if (cfg.bind.size() > 16) return make_error("coordinator: more than 16 endpoints");
    std::vector<Endpoint> eps;
    for (const auto &b : cfg.bind) {
        auto e = parse_endpoint(b, true);
        if (!e) return Error{e.error()};
        eps.push_back(e.value());
    }
    try {
        auto impl = std::make_unique<Impl>(cfg);
        auto &s = impl->sock;
        s.set(zmq::sockopt::linger, 0);
        // Per frame: the largest header or value a request may carry; bigger ones make
        // libzmq drop the connection before the data is buffered.
        s.set(zmq::sockopt::maxmsgsize,
              static_cast<std::int64_t>(std::max(kMaxHeaderBytes, kMaxValueBytes)));
        s.set(zmq::sockopt::rcvhwm, 64);
        // Every rank of a job connects at its start: with libzmq's default listen backlog
        // (100) a burst of 1024 connections overflowed it, and each dropped SYN cost its
        // rank a 1 s retransmission (registration took 1.5 s instead of 0.2 s). The kernel
        // caps it at net.core.somaxconn.
        s.set(zmq::sockopt::backlog, 4096);
        s.set(zmq::sockopt::sndhwm, 1024);
        require_credentials(s, impl->zap, cfg.secret);
        impl->client_key = curve_keys(cfg.secret).client_public_raw;
        impl->monitor = monitor_handshakes(impl->ctx, s, "inproc://omni-coordinator-monitor", true);
        std::unique_ptr<Coordinator> c(new Coordinator(std::move(impl)));
        for (const auto &e : eps) {
            try {
                c->impl_->sock.bind(e.zmq());
            } catch (const zmq::error_t &err) {
                return make_error("coordinator: bind " + e.zmq() + ": " + err.what());
            }
            c->endpoints_.push_back(c->impl_->sock.get(zmq::sockopt::last_endpoint));
            auto bound = parse_endpoint(c->endpoints_.back(), false);
            if (bound) c->impl_->ports.push_back(bound.value().port);
        }
        c->impl_->counters = &c->counters_;
        c->thread_ = std::thread([raw = c.get()] { raw->impl_->run(raw->stopping_); });
        log_line(LogLevel::Info, kComponent, "listening on " + c->endpoints_.front() +
                                                 (c->endpoints_.size() > 1 ? " (and more)" : ""));
        return c;
    } catch (const std::exception &e) {
        return make_error(std::string("coordinator: ") + e.what());
    }
}

void Coordinator::stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
}

Coordinator::~Coordinator() { stop(); }

}  // namespace omni::launcher
