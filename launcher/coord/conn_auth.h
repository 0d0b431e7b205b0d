// The job secret at the coordinator's ZeroMQ handshake, before any request is read.
//
// Why at the handshake: libzmq buffers every frame of a multipart message until its last
// frame arrives, and ZMQ_MAXMSGSIZE bounds one frame only, so a peer that never sends the
// last frame could make the coordinator hold any amount of memory before the per-request
// secret check ever ran. With ZMTP's PLAIN mechanism the client presents the secret as its
// password, and the coordinator answers libzmq's ZAP requests (RFC 27) itself: a peer
// without the secret (or that does not speak PLAIN) is disconnected before libzmq accepts
// a single frame from it. PLAIN sends the password in clear, as requests carried the secret
// before; the job's network is trusted as for Slurm's own PMIx wire-up (coordinator.h).
//
// The coordinator polls the ZAP socket and a monitor of its ROUTER socket (for peers whose
// handshake fails before ZAP is asked); clients watch a monitor of their DEALER socket, so a
// wrong secret is reported at once as "refused" instead of as a timeout.
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

// The PLAIN user name clients present; the password is the job secret.
inline constexpr const char *kPlainUser = "omni";

// Client side: present `secret` at every (re)connection of `sock`. Call before connect().
void set_client_credentials(zmq::socket_t &sock, const std::string &secret);

// Server side: make `sock` require PLAIN, and bind the context's ZAP handler socket
// (`zap`, a REP socket of the same context). Call before binding `sock`. Throws
// zmq::error_t as cppzmq does; the coordinator turns that into its start() error.
void require_credentials(zmq::socket_t &sock, zmq::socket_t &zap);

// One ZAP request read from the handler socket (all its frames, at most 16 kept).
struct ZapRequest {
    std::string request_id;
    std::string address;    // the peer's IP address
    std::string mechanism;  // "PLAIN" for our clients
    std::string password;   // empty unless PLAIN
};
// Reads a pending ZAP request without blocking; nullopt if none is queued.
std::optional<ZapRequest> read_zap_request(zmq::socket_t &zap);
// Answers it: 200 admits the peer, 400 disconnects it. Never blocks.
void send_zap_reply(zmq::socket_t &zap, const ZapRequest &req, bool admit);

// Monitors `sock`'s handshake failures on an inproc PAIR socket of the same context, named
// `name` (unique within the context). Returns the PAIR socket to poll.
zmq::socket_t monitor_handshakes(zmq::context_t &ctx, zmq::socket_t &sock, const std::string &name);

struct HandshakeFailure {
    bool auth = false;         // the secret was refused (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    std::uint32_t code = 0;    // the ZAP status code or ZMQ_PROTOCOL_ERROR_* value
    std::string endpoint;      // as libzmq reports it
};
// Reads one queued monitor event without blocking; nullopt if none is queued.
std::optional<HandshakeFailure> read_handshake_failure(zmq::socket_t &monitor);

}  // namespace omni::launcher

#endif
