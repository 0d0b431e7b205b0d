// The job secret at the ZeroMQ handshake; see conn_auth.h.
#include "coord/conn_auth.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <sodium.h>

#include "coord/secret.h"

namespace omni::launcher {
namespace {

// libzmq's ZAP endpoint (RFC 27): fixed, one handler per context.
constexpr const char *kZapEndpoint = "inproc://zeromq.zap.01";
constexpr std::size_t kMaxZapFrames = 16;

constexpr const char *kUser = "omni";  // the user id the ZAP handler reports

std::string text(const zmq::message_t &m) { return std::string(m.data<char>(), m.size()); }

std::string z85(const unsigned char (&key)[32]) {
    char out[41];
    if (!zmq_z85_encode(out, key, sizeof key)) throw std::invalid_argument("Z85 encoding failed");
    return std::string(out, 40);
}

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

CurveKeys curve_keys(const std::string &secret) {
    if (!check_secret_format(secret)) throw std::invalid_argument("malformed job secret");
    unsigned char key[32];
    for (std::size_t i = 0; i < sizeof key; ++i)
        key[i] = static_cast<unsigned char>(std::stoi(secret.substr(2 * i, 2), nullptr, 16));
    // A Curve25519 secret key is any 32 bytes (the scalar multiplication clamps them): a
    // keyed hash of a fixed label, keyed by the job secret, is one only secret holders know.
    auto derive = [&](const char *label, unsigned char (&sk)[32], unsigned char (&pk)[32]) {
        crypto_generichash(sk, sizeof sk, reinterpret_cast<const unsigned char *>(label),
                           std::strlen(label), key, sizeof key);
        if (crypto_scalarmult_base(pk, sk) != 0) throw std::invalid_argument("key derivation failed");
    };
    unsigned char ssk[32], spk[32], csk[32], cpk[32];
    derive("slurm-omni coordinator server key v1", ssk, spk);
    derive("slurm-omni coordinator client key v1", csk, cpk);
    CurveKeys k{z85(spk), z85(ssk), z85(cpk), z85(csk),
                std::string(reinterpret_cast<const char *>(cpk), sizeof cpk)};
    sodium_memzero(key, sizeof key);
    sodium_memzero(ssk, sizeof ssk);
    sodium_memzero(csk, sizeof csk);
    return k;
}

void set_client_credentials(zmq::socket_t &sock, const std::string &secret) {
    const CurveKeys k = curve_keys(secret);
    sock.set(zmq::sockopt::curve_serverkey, k.server_public);
    sock.set(zmq::sockopt::curve_publickey, k.client_public);
    sock.set(zmq::sockopt::curve_secretkey, k.client_secret);
}

void require_credentials(zmq::socket_t &sock, zmq::socket_t &zap, const std::string &secret) {
    const CurveKeys k = curve_keys(secret);
    zap.set(zmq::sockopt::linger, 0);
    zap.bind(kZapEndpoint);
    sock.set(zmq::sockopt::curve_server, 1);
    sock.set(zmq::sockopt::curve_secretkey, k.server_secret);
    sock.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
}

std::optional<ZapRequest> read_zap_request(zmq::socket_t &zap) {
    auto f = recv_message(zap, kMaxZapFrames);
    if (f.empty()) return std::nullopt;
    ZapRequest r;
    if (f.size() > 1) r.request_id = text(f[1]);
    if (f.size() > 3) r.address = text(f[3]);
    if (f.size() > 5) r.mechanism = text(f[5]);
    if (r.mechanism == "CURVE" && f.size() > 6) r.client_key = text(f[6]);
    return r;
}

void send_zap_reply(zmq::socket_t &zap, const ZapRequest &req, bool admit) {
    const std::string frames[] = {"1.0", req.request_id, admit ? "200" : "400",
                                  admit ? "OK" : "wrong job secret", admit ? kUser : "", ""};
    const std::size_t n = sizeof frames / sizeof frames[0];
    for (std::size_t i = 0; i < n; ++i)
        (void)zap.send(zmq::buffer(frames[i]),
                       (i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                           zmq::send_flags::dontwait);
}

zmq::socket_t monitor_handshakes(zmq::context_t &ctx, zmq::socket_t &sock, const std::string &name,
                                 bool connections) {
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    // Not on a server: libzmq 4.3.4 reports a replayed or forged frame on an established
    // CURVE connection as a protocol failure, and sending that event to a monitor clobbers
    // errno (EAGAIN), so the engine stops reading the connection instead of closing it.
    // Unmonitored, the connection is closed, and the "disconnected" that follows names it.
    if (connections) events |= ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED;
    else events |= ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
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
        h.accepted = event == ZMQ_EVENT_ACCEPTED;
        h.disconnected = event == ZMQ_EVENT_DISCONNECTED;
    }
    if (f.size() > 1) h.endpoint = text(f[1]);
    return h;
}

}  // namespace omni::launcher
