// The job secret at the ZeroMQ handshake; see conn_auth.h.
#include "coord/conn_auth.h"

#include <cstring>
#include <vector>

namespace omni::launcher {
namespace {

// libzmq's ZAP endpoint (RFC 27): fixed, one handler per context.
constexpr const char *kZapEndpoint = "inproc://zeromq.zap.01";
constexpr std::size_t kMaxZapFrames = 16;

std::string text(const zmq::message_t &m) { return std::string(m.data<char>(), m.size()); }

}  // namespace

std::vector<zmq::message_t> recv_message(zmq::socket_t &s, std::size_t keep, std::size_t *count) {
    std::vector<zmq::message_t> parts;
    std::size_t n = 0;
    zmq::message_t m;
    if (s.recv(m, zmq::recv_flags::dontwait)) {
        while (true) {
            const bool more = m.more();
            ++n;
            if (parts.size() < keep) parts.push_back(std::move(m));
            if (!more) break;
            m = zmq::message_t();
            (void)s.recv(m);  // the rest of a message is queued with its first frame
        }
    }
    if (count) *count = n;
    return parts;
}

void set_client_credentials(zmq::socket_t &sock, const std::string &secret) {
    sock.set(zmq::sockopt::plain_username, kPlainUser);
    sock.set(zmq::sockopt::plain_password, secret);
}

void require_credentials(zmq::socket_t &sock, zmq::socket_t &zap) {
    zap.set(zmq::sockopt::linger, 0);
    zap.bind(kZapEndpoint);
    sock.set(zmq::sockopt::plain_server, 1);
}

std::optional<ZapRequest> read_zap_request(zmq::socket_t &zap) {
    auto f = recv_message(zap, kMaxZapFrames);
    if (f.empty()) return std::nullopt;
    ZapRequest r;
    if (f.size() > 1) r.request_id = text(f[1]);
    if (f.size() > 3) r.address = text(f[3]);
    if (f.size() > 5) r.mechanism = text(f[5]);
    if (r.mechanism == "PLAIN" && f.size() > 7) r.password = text(f[7]);
    return r;
}

void send_zap_reply(zmq::socket_t &zap, const ZapRequest &req, bool admit) {
    const std::string frames[] = {"1.0", req.request_id, admit ? "200" : "400",
                                  admit ? "OK" : "wrong job secret", admit ? kPlainUser : "", ""};
    const std::size_t n = sizeof frames / sizeof frames[0];
    for (std::size_t i = 0; i < n; ++i)
        (void)zap.send(zmq::buffer(frames[i]),
                       (i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                           zmq::send_flags::dontwait);
}

zmq::socket_t monitor_handshakes(zmq::context_t &ctx, zmq::socket_t &sock, const std::string &name) {
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(sock.handle(), name.c_str(), events) != 0) throw zmq::error_t();
    zmq::socket_t mon(ctx, zmq::socket_type::pair);
    mon.set(zmq::sockopt::linger, 0);
    mon.connect(name);
    return mon;
}

std::optional<HandshakeFailure> read_handshake_failure(zmq::socket_t &monitor) {
    auto f = recv_message(monitor, 2);
    if (f.empty()) return std::nullopt;
    HandshakeFailure h;
    if (f[0].size() >= 6) {  // uint16 event, uint32 value, in host order
        std::uint16_t event;
        std::memcpy(&event, f[0].data(), sizeof event);
        std::memcpy(&h.code, f[0].data<char>() + 2, sizeof h.code);
        h.auth = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    }
    if (f.size() > 1) h.endpoint = text(f[1]);
    return h;
}

}  // namespace omni::launcher
