// The coordinator service: the generation protocol (protocol.h) and the rendezvous store
// (kv_store.h) behind a ZeroMQ ROUTER socket, on a thread of its own.
//
// Security (issue 6, item 4; issue 46): it binds only to the literal IPv4 addresses it is
// given (the job's node addresses; never a wildcard). A peer must prove it holds the job
// secret at the ZeroMQ handshake (CURVE with keys derived from the secret, checked by the
// coordinator's own ZAP handler, conn_auth.h) before libzmq accepts any frame from it; the
// traffic is encrypted, and a captured handshake or frame is useless on another connection
// and ends the one it is injected into. Peers without the secret are disconnected, counted
// as refused and logged with their address and port (rate-limited). Unauthenticated peers
// are bounded: a handshake must finish within kHandshakeMs (5 s), at most
// max_pending_connections() (64 + 3 a rank of the largest world) may be unfinished at once
// (the oldest is dropped), and a frame
// announcing more than ZMQ_MAXMSGSIZE (1 MiB) ends its connection before anything is
// allocated for it. Every request carries the secret as well, compared in constant time, and
// is answered "refused" without it. Inputs are bounded before parsing: a request has at most
// two frames, the header is strict JSON (wire.h), and the store, the waiting rooms and the
// joiners are capped. MUNGE for omni-ctl from outside the job is later work.
//
// Replies to join, boundary, kv_get and kv_wait are deferred until the protocol or the store
// can answer (or the request's timeout passes), so ranks block in their request, not in a
// polling loop.
#ifndef OMNI_LAUNCHER_COORDINATOR_H
#define OMNI_LAUNCHER_COORDINATOR_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coord/kv_store.h"
#include "coord/protocol.h"
#include "omni/result.h"

namespace omni::launcher {

struct CoordinatorConfig {
    std::vector<std::string> bind;  // "tcp://IPV4:PORT", PORT 0 for an ephemeral port
    std::string secret;             // check_secret_format()
    ProtocolConfig protocol;
    KvLimits kv;
    std::size_t max_waiters = 65536;  // deferred kv_get/kv_wait requests
    std::size_t max_waiting_keys = 1u << 20;  // the keys they wait for, all together
};

struct CoordinatorCounters {
    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> refused{0};    // missing or wrong secret: connections and requests
    std::atomic<std::uint64_t> malformed{0};  // failed parsing
    std::atomic<std::uint64_t> pending_connections{0};  // now: accepted, handshake unfinished
    std::atomic<std::uint64_t> dropped_connections{0};  // unfinished ones dropped for the cap
};

class Coordinator {
public:
    // Validates the configuration, binds every endpoint (all or none) and starts the service
    // thread. Errors name the endpoint or setting that failed.
    static Result<std::unique_ptr<Coordinator>> start(const CoordinatorConfig &cfg);
    ~Coordinator();  // stop()s
    Coordinator(const Coordinator &) = delete;
    Coordinator &operator=(const Coordinator &) = delete;

    // The bound endpoints, with ephemeral ports resolved ("tcp://127.0.0.1:41234").
    const std::vector<std::string> &endpoints() const { return endpoints_; }
    const CoordinatorCounters &counters() const { return counters_; }
    // Stops the service thread (idempotent); pending requests get no reply.
    void stop();

private:
    struct Impl;
    explicit Coordinator(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    std::vector<std::string> endpoints_;
    CoordinatorCounters counters_;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace omni::launcher

#endif
