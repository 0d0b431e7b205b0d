// The coordinator client; see client.h.
#include "coord/client.h"

#include <algorithm>
#include <chrono>

#include <zmq.hpp>

#include "coord/conn_auth.h"
#include "coord/secret.h"

namespace omni::launcher {
namespace {

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Time allowed for a reply beyond the coordinator-side wait of a blocking kv request.
constexpr std::int64_t kReplySlackMs = 5000;
// Replies can carry a layout of every rank; bound them all the same.
constexpr std::int64_t kMaxReplyBytes = 256 << 20;
// How often a waiting request looks at its cancel test (set_cancel).
constexpr std::int64_t kCancelPollMs = 100;

}  // namespace

struct CoordinatorClient::Impl {
    std::string secret;
    std::string endpoint;
    zmq::context_t ctx{1};
    zmq::socket_t sock{ctx, zmq::socket_type::dealer};
    zmq::socket_t monitor;  // sock's failed handshakes (conn_auth.h)
    std::string refused;    // set once the coordinator refused the handshake; sticky
    std::uint64_t next_rid = 1;
    std::function<bool()> cancelled;  // set_cancel

    // A failed handshake ends this client: libzmq would retry it forever with the same secret.
    bool note_failed_handshake() {
        auto h = read_handshake_failure(monitor);
        if (!h) return false;
        // With CURVE a wrong secret means a wrong server key: the coordinator cannot decrypt
        // our hello and closes the connection, which we see as a handshake without detail.
        refused = "coordinator " + endpoint + ": " +
                  (h->auth ? std::string("refused: the job secret was not accepted")
                           : "refused: the job secret was not accepted, or not a slurm-omni coordinator "
                             "of this version (ZeroMQ handshake failed, code " +
                                 std::to_string(h->code) + ")");
        try {
            sock.disconnect(endpoint);
        } catch (const zmq::error_t &) {
        }
        return true;
    }
};

CoordinatorClient::CoordinatorClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorClient::~CoordinatorClient() = default;

Result<std::unique_ptr<CoordinatorClient>> CoordinatorClient::connect(const std::string &endpoint,
                                                                      const std::string &secret) {
    auto ep = parse_endpoint(endpoint, false);
    if (!ep) return Error{ep.error()};
    if (auto st = check_secret_format(secret); !st) return Error{st.error()};
    try {
        auto impl = std::make_unique<Impl>();
        impl->secret = secret;
        impl->endpoint = ep.value().zmq();
        impl->sock.set(zmq::sockopt::linger, 0);
        impl->sock.set(zmq::sockopt::maxmsgsize, kMaxReplyBytes);
        set_client_credentials(impl->sock, secret);
        impl->monitor = monitor_handshakes(impl->ctx, impl->sock, "inproc://omni-client-monitor");
        impl->sock.connect(impl->endpoint);
        return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(std::move(impl)));
    } catch (const zmq::error_t &e) {
        return make_error("coordinator " + endpoint + ": " + e.what());
    }
}

void CoordinatorClient::set_cancel(std::function<bool()> cancelled) { impl_->cancelled = std::move(cancelled); }

Result<Reply> CoordinatorClient::call(Request req, std::int64_t timeout_ms) {
    req.rid = impl_->next_rid++;
    req.secret = impl_->secret;
    const std::string header = request_header(req);
    if (!impl_->refused.empty()) return make_error(impl_->refused);
    try {
        auto &s = impl_->sock;
        if (req.op == Op::KvSet) {
            s.send(zmq::buffer(header), zmq::send_flags::sndmore);
            s.send(zmq::buffer(req.value), zmq::send_flags::none);
        } else {
            s.send(zmq::buffer(header), zmq::send_flags::none);
        }
        const std::int64_t deadline = now_ms() + timeout_ms;
        while (true) {
            std::int64_t left = deadline - now_ms();
            if (left <= 0) break;
            zmq::pollitem_t items[] = {{static_cast<void *>(s), 0, ZMQ_POLLIN, 0},
                                       {static_cast<void *>(impl_->monitor), 0, ZMQ_POLLIN, 0}};
            zmq::poll(items, 2, std::chrono::milliseconds(impl_->cancelled ? std::min(left, kCancelPollMs) : left));
            if (impl_->note_failed_handshake()) return make_error(impl_->refused);
            if (impl_->cancelled && impl_->cancelled())
                return make_error(std::string("coordinator: gave up waiting for the reply to ") + to_string(req.op) +
                                  ": this process is out of the job");
            if (!(items[0].revents & ZMQ_POLLIN)) continue;
            // Read the whole message; keep the header and the first value frame.
            auto parts = recv_message(s, 2);
            if (parts.empty()) continue;
            const zmq::message_t &head = parts[0];
            const bool has_value = parts.size() > 1;
            auto body = nlohmann::json::parse(head.data<char>(), head.data<char>() + head.size(),
                                              nullptr, false);
            if (!body.is_object()) return make_error("coordinator: malformed reply");
            auto rid = body.find("rid");
            if (rid == body.end() || !rid->is_number_unsigned())
                return make_error("coordinator: reply without request number");
            if (rid->get<std::uint64_t>() != req.rid) continue;  // a late reply to an old request
            auto ok = body.find("ok");
            if (ok == body.end() || !ok->is_boolean()) return make_error("coordinator: malformed reply");
            if (!ok->get<bool>()) {
                auto err = body.find("error");
                return make_error("coordinator: " + (err != body.end() && err->is_string()
                                                         ? err->get<std::string>()
                                                         : std::string("request failed")));
            }
            Reply r;
            r.body = std::move(body);
            if (has_value) r.value.assign(parts[1].data<char>(), parts[1].size());
            return r;
        }
        return make_error(std::string("coordinator: no reply to ") + to_string(req.op) +
                          " within " + std::to_string(timeout_ms) + " ms");
    } catch (const zmq::error_t &e) {
        return make_error(std::string("coordinator: ") + e.what());
    }
}

static Result<Decision> decision_of(Result<Reply> r) {
    if (!r) return Error{r.error()};
    auto it = r.value().body.find("decision");
    if (it == r.value().body.end()) return make_error("coordinator: reply without a decision");
    return decision_from_json(*it);
}

Result<Decision> CoordinatorClient::join(const std::string &id, std::uint32_t unit,
                                         std::uint32_t slot, std::int64_t timeout_ms,
                                         const std::string &node) {
    Request r;
    r.op = Op::Join;
    r.id = id;
    r.unit = unit;
    r.slot = slot;
    r.node = node;
    return decision_of(call(std::move(r), timeout_ms));
}

Result<Decision> CoordinatorClient::boundary(const std::string &id, std::uint64_t generation,
                                             std::uint64_t step, std::int64_t timeout_ms,
                                             BatchGeometry batch) {
    Request r;
    r.op = Op::Boundary;
    r.id = id;
    r.generation = generation;
    r.step = step;
    r.batch = batch;
    return decision_of(call(std::move(r), timeout_ms));
}

Status CoordinatorClient::ready(const std::string &id, std::uint64_t generation,
                               std::int64_t timeout_ms) {
    Request r;
    r.op = Op::Ready;
    r.id = id;
    r.generation = generation;
    auto rep = call(std::move(r), timeout_ms);
    if (!rep) return Error{rep.error()};
    return Status::success();
}

Result<HeartbeatAck> CoordinatorClient::heartbeat(const std::string &id, std::uint64_t generation,
                                                  std::int64_t timeout_ms) {
    Request r;
    r.op = Op::Heartbeat;
    r.id = id;
    r.generation = generation;
    auto rep = call(std::move(r), timeout_ms);
    if (!rep) return Error{rep.error()};
    return heartbeat_from_json(rep.value().body);
}

Status CoordinatorClient::kv_set(std::uint64_t generation, const std::string &key,
                                 const std::string &value, std::int64_t timeout_ms) {
    Request r;
    r.op = Op::KvSet;
    r.generation = generation;
    r.keys = {key};
    r.value = value;
    auto rep = call(std::move(r), timeout_ms);
    if (!rep) return Error{rep.error()};
    return Status::success();
}

Result<std::string> CoordinatorClient::kv_get(std::uint64_t generation, const std::string &key,
                                              std::int64_t wait_ms) {
    Request r;
    r.op = Op::KvGet;
    r.generation = generation;
    r.keys = {key};
    r.timeout_ms = wait_ms;
    auto rep = call(std::move(r), wait_ms + kReplySlackMs);
    if (!rep) return Error{rep.error()};
    return std::move(rep.value().value);
}

Status CoordinatorClient::kv_wait(std::uint64_t generation, const std::vector<std::string> &keys,
                                  std::int64_t wait_ms) {
    Request r;
    r.op = Op::KvWait;
    r.generation = generation;
    r.keys = keys;
    r.timeout_ms = wait_ms;
    auto rep = call(std::move(r), wait_ms + kReplySlackMs);
    if (!rep) return Error{rep.error()};
    return Status::success();
}

Result<std::int64_t> CoordinatorClient::kv_add(std::uint64_t generation, const std::string &key,
                                               std::int64_t amount, std::int64_t timeout_ms) {
    Request r;
    r.op = Op::KvAdd;
    r.generation = generation;
    r.keys = {key};
    r.amount = amount;
    auto rep = call(std::move(r), timeout_ms);
    if (!rep) return Error{rep.error()};
    const auto &body = rep.value().body;
    auto it = body.find("value");
    if (it == body.end() || !it->is_number_integer()) return make_error("kv_add: the reply holds no integer value");
    return it->get<std::int64_t>();
}

}  // namespace omni::launcher
