// The coordinator's wire format: what travels between ranks / omni-ctl / omni-launch and the
// coordinator over ZeroMQ, parsed strictly because the coordinator listens on the network.
//
// A request is one or two ZeroMQ frames: a JSON header (at most kMaxHeaderBytes) and, for
// kv_set only, the raw value (at most kMaxValueBytes; binary data such as Gloo addresses or
// NCCL unique ids travels unencoded). A reply is a JSON header and, for kv_get, the value.
//
// Header fields (every request): "v" (kWireVersion), "op", "rid" (the client's request
// number, echoed in the reply), "secret" (the job secret, 64 lowercase hex digits).
// Per op:
//   join      id, unit, slot [, node]        -> {"decision": ...} once the rank is admitted
//   boundary  id, generation, step           -> {"decision": ...} once every member arrived
//   lost      id                             -> {} (the launcher saw the rank die)
//   ready     id, generation                 -> {} (the rank's pause after a change is over)
//   heartbeat id, generation                 -> {"fenced", "fenced_generation",
//             "abandon_generation", "unit_lost", "timeout_ms", "interval_ms"}
//             (Protocol::heartbeat: a rank's sign of life, sent from a thread of its own)
//   reshape   units [, leave]                -> {"target_units": K} (leave: unit ids)
//   stop      reason [, id]                  -> {} (id: the rank asking; refused when fenced)
//   status                                   -> {"status": ...}
//   kv_set    generation, key  + value frame -> {}
//   kv_get    generation, key, timeout_ms    -> {} + value frame (waits up to timeout_ms)
//   kv_wait   generation, keys, timeout_ms   -> {} once all keys exist
//   checkpoint step [, location, id]         -> {} (id: the rank; refused when fenced)
//   kv_add    generation, key, amount        -> {"value": V}: the key, read as a decimal
//             integer (0 when absent), plus amount (a signed integer), stored back as
//             decimal text, atomically (what a torch.distributed store's add needs)
// Replies: {"v":1, "rid":N, "ok":true, ...} or {"v":1, "rid":N, "ok":false, "error":"..."}.
// A decision: {"kind": "continue"|"reshaped"|"stop", "generation", "step", "reason", "rewind",
// "lost": [member ids], "leaving_units": [unit ids], "joining_units": [unit ids],
// "next": {"generation", "world", "units": [unit ids in rank order]} (reshaped only)}; a rank
// finds its new rank from its (unit, slot): Layout::rank_of().
// Unknown fields, wrong types and out-of-range values are rejected with a message that names
// the field, so a client bug shows up as a clear error instead of a misrouted request.
#ifndef OMNI_LAUNCHER_WIRE_H
#define OMNI_LAUNCHER_WIRE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coord/protocol.h"
#include "omni/result.h"

namespace omni::launcher {

constexpr int kWireVersion = 1;
constexpr std::size_t kMaxHeaderBytes = 256 * 1024;
constexpr std::size_t kMaxValueBytes = 1024 * 1024;
constexpr std::size_t kMaxKeyLength = 256;
constexpr std::size_t kMaxWaitKeys = 4096;
constexpr std::int64_t kMaxWaitMs = 24LL * 3600 * 1000;
constexpr std::size_t kSecretHexLength = 64;
constexpr std::int64_t kMaxKvAdd = std::int64_t(1) << 62;  // |amount| and |value| of kv_add

enum class Op { Join, Boundary, Lost, Ready, Reshape, Stop, Status, KvSet, KvGet, KvWait, KvAdd, Checkpoint, Heartbeat };
const char *to_string(Op op);

struct Request {
    Op op = Op::Status;
    std::uint64_t rid = 0;
    std::string secret;
    std::string id;                 // join, boundary, lost, ready, heartbeat; stop, checkpoint (optional)
    std::uint32_t unit = 0, slot = 0;  // join
    std::uint64_t generation = 0;   // boundary, ready, kv_*
    std::uint64_t step = 0;         // boundary, checkpoint
    BatchGeometry batch;            // boundary: the rank's ledger (0/0: none)
    std::string node;               // join (optional): the node the rank runs on
    std::uint32_t units = 0;        // reshape
    std::vector<std::uint32_t> leave;  // reshape (optional): the units a shrink removes
    std::string via;                // reshape (optional): where a grow's units start (protocol.h)
    std::string cause;              // reshape (optional): who asks (protocol.h, kCause*)
    std::string location;           // checkpoint (optional): where it was written
    std::string reason;             // stop
    std::vector<std::string> keys;  // kv_set/kv_get: one key; kv_wait: 1..kMaxWaitKeys
    std::int64_t timeout_ms = 0;    // kv_get, kv_wait
    std::int64_t amount = 0;        // kv_add: |amount| <= kMaxKvAdd
    std::string value;              // kv_set: the second frame
};

// A checkpoint's location as a rank reports it: at most this many printable characters.
constexpr std::size_t kMaxLocationLength = 1024;

// KV keys: 1..256 characters from [A-Za-z0-9._:/@-].
Status check_kv_key(std::string_view key);
// A value as kv_add reads it: a decimal integer, optionally negative, within +-kMaxKvAdd.
Result<std::int64_t> parse_kv_integer(std::string_view value);

// Parses and validates a request. `value` is the second frame (nullptr when there is none).
Result<Request> parse_request(std::string_view header, const std::string_view *value);
// The header of a request (for clients); the value frame travels separately.
std::string request_header(const Request &r);

nlohmann::json decision_to_json(const Decision &d);
// Parses a decision received from the coordinator (clients validate replies too). The
// members of `next` are rebuilt from the units with empty ids.
Result<Decision> decision_from_json(const nlohmann::json &j);
nlohmann::json status_to_json(const ProtocolStatus &s);
nlohmann::json heartbeat_to_json(const HeartbeatAck &a);
Result<HeartbeatAck> heartbeat_from_json(const nlohmann::json &j);

// Coordinator endpoints are "tcp://A.B.C.D:PORT" with a literal IPv4 address: the
// coordinator binds only to the job's node addresses, never to a wildcard or a name that
// could resolve elsewhere. For binding (for_bind), PORT 0 asks for an ephemeral port.
struct Endpoint {
    std::string ip;
    std::uint16_t port = 0;
    std::string zmq() const;  // "tcp://IP:PORT" (port 0: "tcp://IP:*")
};
Result<Endpoint> parse_endpoint(std::string_view text, bool for_bind);

std::string ok_reply(std::uint64_t rid, nlohmann::json body = nlohmann::json::object());
// ok_reply(rid, heartbeat_to_json(a)), byte for byte, written directly: every rank sends a
// heartbeat a second, and building the JSON object was half of the coordinator's time for one.
std::string heartbeat_reply(std::uint64_t rid, const HeartbeatAck &a);
std::string error_reply(std::uint64_t rid, std::string_view message);

}  // namespace omni::launcher

#endif
