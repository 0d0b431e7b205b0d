// The client side of the coordinator protocol: one ZeroMQ DEALER connection that sends a
// request and waits for its reply with a deadline. Used by ranks (libomni), by the Gloo
// store, by omni-ctl and by omni-launch itself (lost/stop).
//
// Not thread-safe (a ZeroMQ socket belongs to one thread): give each thread its own client.
// Every reply carries the request number; a late reply to an earlier request that timed out
// is recognised and dropped, so a timeout never desynchronises the connection.
#ifndef OMNI_LAUNCHER_CLIENT_H
#define OMNI_LAUNCHER_CLIENT_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coord/protocol.h"
#include "coord/wire.h"
#include "omni/result.h"

namespace omni::launcher {

struct Reply {
    nlohmann::json body;  // the reply header; body["ok"] is true
    std::string value;    // kv_get: the value frame
};

class CoordinatorClient {
public:
    // Validates the endpoint ("tcp://IPV4:PORT") and the secret; connects lazily (ZeroMQ).
    static Result<std::unique_ptr<CoordinatorClient>> connect(const std::string &endpoint,
                                                              const std::string &secret);
    ~CoordinatorClient();
    CoordinatorClient(const CoordinatorClient &) = delete;
    CoordinatorClient &operator=(const CoordinatorClient &) = delete;

    // A request waiting for its reply gives up within 100 ms of `cancelled` turning true
    // (called on the waiting thread): a rank that has concluded it is out of the job
    // (Liveness: fenced, or cut off from the coordinator) must not wait out a long boundary
    // timeout for a reply that will never come.
    void set_cancel(std::function<bool()> cancelled);

    // Sends `req` (rid and secret are filled in) and waits up to `timeout_ms` for the reply.
    // An {"ok": false} reply becomes an error carrying the coordinator's message.
    Result<Reply> call(Request req, std::int64_t timeout_ms);

    // `node`: where the rank runs (empty: not said).
    Result<Decision> join(const std::string &id, std::uint32_t unit, std::uint32_t slot,
                          std::int64_t timeout_ms, const std::string &node = {});
    // `batch`: this rank's ledger geometry (Protocol::boundary), 0/0 without a ledger.
    Result<Decision> boundary(const std::string &id, std::uint64_t generation, std::uint64_t step,
                              std::int64_t timeout_ms, BatchGeometry batch = {});
    // This rank's pause after the change that made `generation` is over (Protocol::ready).
    Status ready(const std::string &id, std::uint64_t generation, std::int64_t timeout_ms);
    // A sign of life of member `id`, which runs in `generation` (Protocol::heartbeat).
    Result<HeartbeatAck> heartbeat(const std::string &id, std::uint64_t generation, std::int64_t timeout_ms);
    Status kv_set(std::uint64_t generation, const std::string &key, const std::string &value,
                  std::int64_t timeout_ms);
    // Waits up to wait_ms for the key to exist (0: do not wait).
    Result<std::string> kv_get(std::uint64_t generation, const std::string &key,
                               std::int64_t wait_ms);
    Status kv_wait(std::uint64_t generation, const std::vector<std::string> &keys,
                   std::int64_t wait_ms);
    // Adds `amount` to the key's integer value (0 when absent) and returns the new value.
    Result<std::int64_t> kv_add(std::uint64_t generation, const std::string &key, std::int64_t amount,
                                std::int64_t timeout_ms);

private:
    struct Impl;
    explicit CoordinatorClient(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni::launcher

#endif
