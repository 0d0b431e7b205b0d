// Many coordinator connections driven by one thread (the scale benchmark's ranks, #46).
//
// Why not CoordinatorClient per thread: each client owns a ZeroMQ context, that is an I/O
// thread of its own, so 1024 ranks would be 2048 threads on a 2-core machine, and the
// benchmark would measure the scheduler. Here every rank is one DEALER socket of a shared
// context (one I/O thread), each a real TCP connection with its own PLAIN handshake, and one
// thread sends the ranks' requests and waits for their replies with epoll over the sockets'
// ZMQ_FD notifications, so waiting costs O(ready sockets), not O(N) per wake-up.
#ifndef OMNI_LAUNCHER_BENCH_COORD_SWARM_H
#define OMNI_LAUNCHER_BENCH_COORD_SWARM_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "coord/wire.h"
#include "omni/result.h"

namespace omni::launcher::bench {

// One round's timing, in milliseconds of the steady clock.
struct RoundTime {
    double total_ms = 0;  // first request sent -> last awaited reply received
    double tail_ms = 0;   // the request marked as the trigger sent -> last awaited reply
};

class Swarm {
public:
    // `sockets` connections to `endpoint` (created lazily by open()).
    Swarm(std::string endpoint, std::string secret, std::size_t sockets);
    ~Swarm();
    Swarm(const Swarm &) = delete;
    Swarm &operator=(const Swarm &) = delete;

    // (Re)opens connection `i`: a dropped rank's replacement is a new TCP connection.
    void open(std::size_t i);
    void close(std::size_t i);

    // Queues request `r` on connection `i` (rid and secret filled in); nothing is sent yet.
    void queue(std::size_t i, Request r);
    // Sends the queued requests in order and waits until every connection in `await` has the
    // reply to its latest request (sent now or in an earlier round). `trigger`: the position
    // in the queue whose send starts tail_ms (default: the last one). Errors: a reply with
    // ok=false, or no reply within timeout_ms.
    Result<RoundTime> run(const std::vector<std::size_t> &await, std::int64_t timeout_ms,
                          std::size_t trigger = SIZE_MAX);
    // The header of connection i's latest reply.
    const std::string &reply(std::size_t i) const { return conns_[i].reply; }
    // Times a sweep found a reply that no notification had announced (should stay 0).
    std::uint64_t sweeps() const { return sweeps_; }

private:
    struct Conn {
        std::unique_ptr<zmq::socket_t> sock;
        std::uint64_t next_rid = 1, want_rid = 0;
        bool answered = true;
        std::string reply;
    };
    // Reads every queued reply of connection i; returns whether the awaited one came.
    bool drain(std::size_t i);

    std::string endpoint_, secret_;
    zmq::context_t ctx_;
    int epoll_ = -1;
    std::vector<Conn> conns_;
    struct Queued {
        std::size_t conn;
        std::string header;
        bool has_value;  // kv_set: a value frame follows the header
        std::string value;
    };
    std::vector<Queued> queued_;
    std::uint64_t sweeps_ = 0;
};

// Parses the rid out of a reply header without a JSON parse (the bench thread shares the
// machine with the coordinator, so its own per-reply work is kept to a scan).
bool reply_ok(const std::string &header, std::uint64_t *rid);
// The decision's JSON text inside a join/boundary reply ("" when there is none): every rank
// of a boundary must get byte-identical text.
std::string decision_text(const std::string &header);

}  // namespace omni::launcher::bench

#endif
