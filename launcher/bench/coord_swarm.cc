// Many coordinator connections on one thread; see coord_swarm.h.
#include "bench/coord_swarm.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "coord/conn_auth.h"

namespace omni::launcher::bench {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace

bool reply_ok(const std::string &header, std::uint64_t *rid) {
    const auto at = header.rfind("\"rid\":");
    if (at == std::string::npos) return false;
    *rid = std::strtoull(header.c_str() + at + 6, nullptr, 10);
    return header.find("\"ok\":true") != std::string::npos;
}

std::string decision_text(const std::string &header) {
    static const std::string head = "{\"decision\":", tail = ",\"ok\":true,\"rid\":";
    if (header.compare(0, head.size(), head) != 0) return {};
    const auto end = header.rfind(tail);
    if (end == std::string::npos || end < head.size()) return {};
    return header.substr(head.size(), end - head.size());
}

Swarm::Swarm(std::string endpoint, std::string secret, std::size_t sockets)
    : endpoint_(std::move(endpoint)), secret_(std::move(secret)), ctx_(1), conns_(sockets) {
    // libzmq refuses more than 1023 sockets per context by default.
    ctx_.set(zmq::ctxopt::max_sockets, static_cast<int>(sockets + 64));
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) throw std::runtime_error("epoll_create1 failed");
}

Swarm::~Swarm() {
    for (auto &c : conns_) c.sock.reset();
    if (epoll_ >= 0) ::close(epoll_);
}

void Swarm::open(std::size_t i) {
    close(i);
    auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    set_client_credentials(*s, secret_);
    s->connect(endpoint_);
    // ZMQ_FD is a notification fd: readable when the socket's state may have changed. Level
    // triggered, it stays readable until a recv (or ZMQ_EVENTS) processes the socket's
    // commands, so a wake-up is never lost between two drains.
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, s->get(zmq::sockopt::fd), &ev) != 0)
        throw std::runtime_error("epoll_ctl failed (too many open files?)");
    conns_[i].sock = std::move(s);
    conns_[i].answered = true;
}

void Swarm::close(std::size_t i) {
    auto &c = conns_[i];
    if (!c.sock) return;
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.sock->get(zmq::sockopt::fd), nullptr);
    c.sock.reset();  // linger 0: the TCP connection goes at once, as a killed rank's would
}

void Swarm::queue(std::size_t i, Request r) {
    auto &c = conns_[i];
    r.rid = c.next_rid++;
    r.secret = secret_;
    c.want_rid = r.rid;
    c.answered = false;
    queued_.push_back({i, request_header(r), r.op == Op::KvSet, std::move(r.value)});
}

bool Swarm::drain(std::size_t i) {
    auto &c = conns_[i];
    if (!c.sock) return false;
    while (true) {
        auto parts = recv_message(*c.sock, 1);
        // libzmq's recv may skip processing the socket's commands (it throttles that), so a
        // reply can sit behind a notification already consumed: ZMQ_EVENTS processes them.
        if (parts.empty() && !(c.sock->get(zmq::sockopt::events) & ZMQ_POLLIN)) return c.answered;
        if (parts.empty()) continue;
        std::string header(parts[0].data<char>(), parts[0].size());
        std::uint64_t rid = 0;
        const bool ok = reply_ok(header, &rid);
        if (rid != c.want_rid) continue;  // a late reply to an earlier request
        if (!ok) throw std::runtime_error("connection " + std::to_string(i) + ": " + header);
        c.reply = std::move(header);
        c.answered = true;
    }
}

Result<RoundTime> Swarm::run(const std::vector<std::size_t> &await, std::int64_t timeout_ms,
                             std::size_t trigger) {
    if (trigger == SIZE_MAX) trigger = queued_.empty() ? 0 : queued_.size() - 1;
    try {
        const auto t0 = std::chrono::steady_clock::now();
        auto t_trigger = t0;
        for (std::size_t k = 0; k < queued_.size(); ++k) {
            const auto &q = queued_[k];
            if (k == trigger) t_trigger = std::chrono::steady_clock::now();
            auto &sock = *conns_[q.conn].sock;
            if (q.has_value) {
                sock.send(zmq::buffer(q.header), zmq::send_flags::sndmore);
                sock.send(zmq::buffer(q.value), zmq::send_flags::none);
            } else {
                sock.send(zmq::buffer(q.header), zmq::send_flags::none);
            }
        }
        queued_.clear();
        std::vector<char> awaited(conns_.size(), 0);
        std::size_t left = 0;
        for (auto i : await) {
            awaited[i] = 1;
            if (!drain(i)) ++left;
        }
        const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
        std::vector<epoll_event> events(256);
        while (left > 0) {
            if (std::chrono::steady_clock::now() > deadline)
            {
                std::string which;
                for (auto i : await)
                    if (!conns_[i].answered) which += (which.empty() ? "" : ",") + std::to_string(i);
                return make_error(std::to_string(left) + " of " + std::to_string(await.size()) +
                                  " replies missing after " + std::to_string(timeout_ms) +
                                  " ms (connections " + which + ")");
            }
            int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 20);
            if (n < 0) continue;  // EINTR
            if (n == 0) {
                // No notification for 20 ms (the coordinator may be that busy): sweep, so
                // that a missed notification shows up as a count rather than a hang.
                std::size_t still = 0;
                for (auto i : await)
                    if (!drain(i)) ++still;
                if (still < left) ++sweeps_;
                left = still;
                continue;
            }
            for (int e = 0; e < n; ++e) {
                const std::size_t i = events[e].data.u64;
                const bool was = conns_[i].answered;
                if (drain(i) && !was && awaited[i]) --left;
            }
        }
        const auto t1 = std::chrono::steady_clock::now();
        return RoundTime{ms_since(t0, t1), ms_since(t_trigger, t1)};
    } catch (const std::exception &e) {
        queued_.clear();
        return make_error(e.what());
    }
}

}  // namespace omni::launcher::bench
