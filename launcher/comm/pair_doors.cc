// Pair doors and their doorman thread; see pair_doors.h.
#include "config.h"

#include "comm/pair_doors.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "comm/gloo_guard.h"

namespace omni::launcher {

static_assert(std::tuple_size<DoorToken>::value == kPairTokenBytes, "a door's token is a pair's token");

using Clock = std::chrono::steady_clock;

std::string door_endpoint_text(const sockaddr_storage &a) {
    char host[INET6_ADDRSTRLEN] = "?";
    if (a.ss_family == AF_INET) {
        const auto &v4 = reinterpret_cast<const sockaddr_in &>(a);
        ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
        return std::string(host) + ":" + std::to_string(ntohs(v4.sin_port));
    }
    if (a.ss_family == AF_INET6) {
        const auto &v6 = reinterpret_cast<const sockaddr_in6 &>(a);
        ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
        return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6.sin6_port));
    }
    return "?";
}

// Everything below is guarded by the doorman's mutex.
struct Held {
    int fd = -1;
    Clock::time_point since;
    DoorToken got{};
    std::size_t n = 0;
    std::string from;
};

struct DoorState {
    DoorToken token{};
    DoorRefusal refused = nullptr;
    int listen_fd = -1;
    std::uint64_t listen_id = 0;
    std::map<std::uint64_t, Held> held;  // by id: ids grow, so the first is the oldest
    int adopted = -1;                    // the connection that sent the token, until taken
    bool closed = false;
    std::condition_variable cv;
};

namespace {

// One per process, never destroyed (its thread may outlive static destruction by a moment).
// Events carry an id, never a pointer: an event read before a door went is looked up and
// found gone.
class Doorman {
public:
    static Doorman &get() {
        static Doorman *d = new Doorman;
        return *d;
    }
    std::mutex m;

    // A new door's listener, watched from now on.
    void add(DoorState &d) {
        std::lock_guard<std::mutex> l(m);
        d.listen_id = next_id_++;
        watch(d.listen_fd, d.listen_id, &d);
        doors_.insert(&d);
        if (!running_) {
            running_ = true;
            std::thread([this] { run(); }).detach();
        }
    }

    void remove(DoorState &d) {  // with m held
        close_door(d, nullptr);
        if (d.adopted >= 0) ::close(d.adopted);
        d.adopted = -1;
        doors_.erase(&d);
    }

    // Closes the listener and every held connection (refused with `why`, unless nullptr).
    void close_door(DoorState &d, const char *why) {  // with m held
        if (d.listen_fd >= 0) {
            unwatch(d.listen_fd, d.listen_id);
            ::close(d.listen_fd);
            d.listen_fd = -1;
        }
        while (!d.held.empty()) drop(d, d.held.begin(), why);
        d.closed = true;
        d.cv.notify_all();
    }

private:
    struct Watched {
        DoorState *door;
        bool listener;
    };

    Doorman() {
        ep_ = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
        // A child of fork() has no doorman thread and shares the parent's epoll instance: it
        // starts afresh (its copies of the parent's doors are the parent's to serve).
        ::pthread_atfork([] { get().m.lock(); }, [] { get().m.unlock(); }, [] { get().after_fork(); });
    }

    void after_fork() {
        running_ = false;
        ids_.clear();
        doors_.clear();
        ::close(ep_);
        ep_ = ::epoll_create1(EPOLL_CLOEXEC);  // -1: watch() then fails and a door cannot open
        m.unlock();
    }

    void watch(int fd, std::uint64_t id, DoorState *d) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = id;
        if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0)
            throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
        ids_[id] = Watched{d, d->listen_id == id};
    }
    void unwatch(int fd, std::uint64_t id) {
        (void)::epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
        ids_.erase(id);
    }

    void drop(DoorState &d, std::map<std::uint64_t, Held>::iterator it, const char *why) {
        unwatch(it->second.fd, it->first);
        ::close(it->second.fd);
        if (why && d.refused) d.refused(it->second.from, why);
        d.held.erase(it);
    }

    void accept_all(DoorState &d) {
        for (int i = 0; i < 64 && d.listen_fd >= 0; ++i) {  // the rest on the next turn
            sockaddr_storage a{};
            socklen_t al = sizeof a;
            const int fd = ::accept4(d.listen_fd, reinterpret_cast<sockaddr *>(&a), &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;  // EAGAIN, a connection reset while queued; EMFILE: next turn
            if (d.held.size() >= kMaxPendingPerPair)  // the oldest goes (the peer sends its token at once)
                drop(d, d.held.begin(), "more than 8 connections owe their token");
            const std::uint64_t id = next_id_++;
            Held h;
            h.fd = fd;
            h.since = Clock::now();
            h.from = door_endpoint_text(a);
            try {
                watch(fd, id, &d);
            } catch (const std::exception &) {
                ::close(fd);
                continue;
            }
            d.held.emplace(id, std::move(h));
        }
    }

    void on_held(DoorState &d, std::uint64_t id) {
        auto it = d.held.find(id);
        if (it == d.held.end()) return;
        Held &h = it->second;
        const ssize_t r = ::recv(h.fd, h.got.data() + h.n, kPairTokenBytes - h.n, 0);  // never past it
        if (r == 0) {
            drop(d, it, "closed before sending the pair's token");
            return;
        }
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(d, it, std::strerror(errno));
            return;
        }
        h.n += static_cast<std::size_t>(r);
        if (h.n < kPairTokenBytes) return;
        unsigned char diff = 0;  // constant time
        for (std::size_t i = 0; i < kPairTokenBytes; ++i) diff |= static_cast<unsigned char>(h.got[i] ^ d.token[i]);
        if (diff) {
            drop(d, it, "wrong token");
            return;
        }
        // The peer: it is handed over; the listener and every other held connection go.
        const int fd = h.fd;
        unwatch(fd, id);
        d.held.erase(it);
        d.adopted = fd;
        close_door(d, "the pair's peer connected");
    }

    void run() {
        std::unique_lock<std::mutex> l(m);
        epoll_event evs[64];
        while (!doors_.empty()) {
            // Sleep until the earliest held connection's deadline (at most 1 s: a door
            // closed meanwhile ends the thread within that).
            auto wake = Clock::now() + std::chrono::seconds(1);
            for (DoorState *d : doors_)
                for (const auto &h : d->held) wake = std::min(wake, h.second.since + kPairHandshake);
            const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
            l.unlock();
            const int n = ::epoll_wait(ep_, evs, 64, static_cast<int>(std::max<long long>(0, ms)));
            l.lock();
            for (int i = 0; i < n; ++i) {
                auto it = ids_.find(evs[i].data.u64);
                if (it == ids_.end()) continue;  // gone since
                const Watched w = it->second;
                if (w.listener)
                    accept_all(*w.door);
                else
                    on_held(*w.door, evs[i].data.u64);
            }
            const auto now = Clock::now();
            for (DoorState *d : doors_)
                for (auto it = d->held.begin(); it != d->held.end();) {
                    auto next = std::next(it);
                    if (now - it->second.since >= kPairHandshake) drop(*d, it, "no token within 2000 ms");
                    it = next;
                }
        }
        running_ = false;
    }

    int ep_ = -1;
    bool running_ = false;
    std::uint64_t next_id_ = 1;
    std::unordered_map<std::uint64_t, Watched> ids_;
    std::set<DoorState *> doors_;
};

}  // namespace

PairDoor::PairDoor(const sockaddr_storage &host, const DoorToken &token, DoorRefusal refused)
    : state_(std::make_unique<DoorState>()) {
    state_->token = token;
    state_->refused = refused;
    sockaddr_storage a = host;
    socklen_t al;
    if (a.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in &>(a).sin_port = 0;
        al = sizeof(sockaddr_in);
    } else if (a.ss_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6 &>(a).sin6_port = 0;
        al = sizeof(sockaddr_in6);
    } else {
        throw std::runtime_error("a pair's door: address family " + std::to_string(a.ss_family) +
                                 ", expected IPv4 or IPv6");
    }
    const int fd = ::socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("a pair's door: socket: ") + std::strerror(errno));
    // Backlog 64: strangers queued while the doorman is busy leave the peer room.
    if (::bind(fd, reinterpret_cast<const sockaddr *>(&a), al) != 0 || ::listen(fd, 64) != 0) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error("a pair's door on " + door_endpoint_text(a) + ": " + std::strerror(e));
    }
    socklen_t sl = sizeof address_;
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&address_), &sl) != 0) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error(std::string("a pair's door: getsockname: ") + std::strerror(e));
    }
    state_->listen_fd = fd;
    try {
        Doorman::get().add(*state_);
    } catch (...) {
        ::close(fd);
        throw;
    }
}

PairDoor::~PairDoor() {
    Doorman &dm = Doorman::get();
    std::lock_guard<std::mutex> l(dm.m);
    dm.remove(*state_);
}

int PairDoor::wait(std::chrono::milliseconds timeout, std::string &why) {
    Doorman &dm = Doorman::get();
    std::unique_lock<std::mutex> l(dm.m);
    DoorState &d = *state_;
    auto ready = [&] { return d.adopted >= 0 || d.closed; };
    if (timeout.count() > 0)
        d.cv.wait_for(l, timeout, ready);
    else
        d.cv.wait(l, ready);
    const int fd = d.adopted;
    d.adopted = -1;
    if (fd < 0) {
        why = d.closed ? "the pair's listener was closed" :
                         "no connection with the pair's token within " + std::to_string(timeout.count()) + " ms";
        dm.close_door(d, "the pair gave up waiting for its peer");
    }
    return fd;
}

void PairDoor::close(const char *why) {
    Doorman &dm = Doorman::get();
    std::lock_guard<std::mutex> l(dm.m);
    dm.close_door(*state_, why);
}

}  // namespace omni::launcher
