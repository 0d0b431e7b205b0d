// The job secret at the coordinator's ZeroMQ handshake, before any request is read.
//
// Why at the handshake: libzmq buffers every frame of a multipart message until its last
// frame arrives, and ZMQ_MAXMSGSIZE bounds one frame only, so a peer that never sends the
// last frame could make the coordinator hold any amount of memory before the per-request
// secret check ever ran. The coordinator answers libzmq's ZAP requests (RFC 27) itself: a
// peer that cannot prove it holds the secret is disconnected before libzmq accepts a single
// frame from it.
//
// Why CURVE (RFC 26) and not PLAIN (issue 46): PLAIN sent the secret in clear at every
// handshake, so one captured handshake let anybody on the path connect, and a captured
// request replayed on a new connection (or injected into the same one) was executed again.
// Both keys are derived from the job secret (curve_keys()): the server's by the coordinator,
// the client's by every holder of the secret; the coordinator admits only the client key.
// CurveZMQ's per-connection ephemeral keys and strictly increasing nonces make a captured
// handshake or frame useless on another connection and fatal to the one it is injected
// into; the secret and the traffic are encrypted on the wire.
//
// Unauthenticated peers are bounded (coordinator.cc): a handshake must finish within
// kHandshakeMs, and at most kMaxPendingConnections may be unfinished at once (the oldest
// is dropped). The coordinator polls the ZAP socket and a monitor of its ROUTER socket
// (accepted and closed connections, handshakes refused); clients watch a monitor of their
// DEALER socket, so a wrong secret is reported at once as "refused" instead of a timeout.
#ifndef OMNI_LAUNCHER_CONN_AUTH_H
#define OMNI_LAUNCHER_CONN_AUTH_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace omni::launcher {

// Reads one whole queued message without blocking: every frame is received (libzmq queues a
// message whole), the first `keep` are returned, `count` gets how many there were. Empty
// (count 0) when none is queued.
std::vector<zmq::message_t> recv_message(zmq::socket_t &s, std::size_t keep, std::size_t *count = nullptr);

// How long a peer has, from its TCP connection, to finish the handshake (greeting and
// CURVE): libzmq closes it after that (ZMQ_HANDSHAKE_IVL; libzmq's default is 30 s).
inline constexpr int kHandshakeMs = 5000;
// Unfinished handshakes the coordinator keeps at once beyond its own job's: past
// max_pending_connections() the oldest is dropped.
inline constexpr std::size_t kMaxPendingConnections = 64;
// Connections a rank opens to the coordinator: its runtime's, its liveness thread's, the C
// API's store.
inline constexpr std::size_t kConnectionsPerRank = 3;
// The cap for a job of at most `max_world` ranks. Every rank connects at its start, so a
// job's own handshakes come in a burst, and the coordinator's one I/O thread finishes them
// one after the other (a CURVE handshake is a few Curve25519 operations on each side): with
// a fixed 64, a job of 256 ranks on a loaded 2-core machine never formed, each wave of
// reconnections was dropped again (#46, "Scaling"). The job's own connections are a bound
// the coordinator needs descriptors for anyway (omni-launch raises its limit for both).
inline constexpr std::size_t max_pending_connections(std::uint64_t max_world) {
    return kMaxPendingConnections + kConnectionsPerRank * static_cast<std::size_t>(max_world);
}

// The CURVE keys of a job, derived from its secret (check_secret_format()) with keyed
// BLAKE2b, one label per key, so neither key reveals the secret or the other key: Z85 text
// (40 characters) as libzmq's socket options take them; client_public also as the 32 bytes
// a ZAP request carries.
struct CurveKeys {
    std::string server_public, server_secret, client_public, client_secret;
    std::string client_public_raw;
};
// Throws std::invalid_argument for a malformed secret (callers check it first).
CurveKeys curve_keys(const std::string &secret);

// Client side: prove `secret` at every (re)connection of `sock`. Call before connect().
void set_client_credentials(zmq::socket_t &sock, const std::string &secret);

// Server side: make `sock` a CURVE server with the job's key that finishes handshakes within
// kHandshakeMs, and bind the context's ZAP handler socket (`zap`, a REP socket of the same
// context). Call before binding `sock`. Throws zmq::error_t as cppzmq does; the
// coordinator turns that into its start() error.
void require_credentials(zmq::socket_t &sock, zmq::socket_t &zap, const std::string &secret);

// One ZAP request read from the handler socket (all its frames, at most 16 kept).
struct ZapRequest {
    std::string request_id;
    std::string address;    // the peer's IP address
    std::string mechanism;  // "CURVE" for our clients
    std::string client_key; // CURVE: the client's long-term public key (32 bytes)
};
// Reads a pending ZAP request without blocking; nullopt if none is queued.
std::optional<ZapRequest> read_zap_request(zmq::socket_t &zap);
// Answers it: 200 admits the peer, 400 disconnects it. Never blocks.
void send_zap_reply(zmq::socket_t &zap, const ZapRequest &req, bool admit);

// Monitors `sock`'s handshake failures on an inproc PAIR socket of the same context, named
// `name` (unique within the context). Returns the PAIR socket to poll. With `connections`,
// accepted and closed connections are reported too (the coordinator tracks them).
zmq::socket_t monitor_handshakes(zmq::context_t &ctx, zmq::socket_t &sock, const std::string &name,
                                 bool connections = false);

struct HandshakeFailure {
    bool auth = false;         // the secret was refused (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    bool accepted = false, disconnected = false;  // with `connections`: value is the fd
    std::uint32_t code = 0;    // the ZAP status code, ZMQ_PROTOCOL_ERROR_* value, errno or fd
    std::string endpoint;      // as libzmq reports it (our own endpoint on a server)
};
// Reads one queued monitor event without blocking; nullopt if none is queued.
std::optional<HandshakeFailure> read_handshake_failure(zmq::socket_t &monitor);

}  // namespace omni::launcher

#endif
