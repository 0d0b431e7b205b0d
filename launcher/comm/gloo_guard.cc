// Guarded Gloo pairs; see gloo_guard.h.
#include "config.h"

#include "comm/gloo_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "coord/log.h"

#define OMNI_GLOO_GUARDED 1
#if defined(HAVE_GLOO_TRANSPORT_TCP_LISTENER_H) || defined(OMNI_GLOO_HANDLER_LOOP)
// Gloo from 2023-05 on: one listener per device; pairs listen on doors of their own.
#define OMNI_GLOO_SHARED_LISTENER 1
#endif
#include <gloo/common/error.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>
#ifdef OMNI_GLOO_SHARED_LISTENER
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <cstdlib>
#endif
// door_endpoint_text, for both Gloos' refusal lines.
#include "comm/pair_doors.h"

namespace omni::launcher {

namespace {

std::atomic<std::size_t> g_refused{0};

#ifdef OMNI_GLOO_GUARDED
PairToken random_token() {
    PairToken t{};
    std::size_t at = 0;
    while (at < t.size()) {
        const ssize_t n = ::getrandom(t.data() + at, t.size() - at, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
        }
        at += static_cast<std::size_t>(n);
    }
    return t;
}

namespace tcp = gloo::transport::tcp;

// A refusal, logged for the first 32 of the process (a flood must not flood the log).
void note_refused(const std::string &from, const char *why) {
    const std::size_t n = ++g_refused;
    if (n <= 32)
        log_line(LogLevel::Warning, "libomni",
                 "refused a Gloo pair connection from " + from + ": " + why +
                     (n == 32 ? " (further refusals are not logged)" : ""));
}

// Where Gloo's connectFullMesh lets the transport context rendezvous by itself: Gloo's
// tcp::Context publishes one device address and sequence numbers, and makes plain pairs (its
// createPair(rank, bool) is not virtual). A guarded context takes Gloo's generic route instead:
// every pair's address().bytes() (with the token) through the store, then pair->connect().
#if defined(OMNI_GLOO_CONNECT_ALL_SHARED)
#define OMNI_GUARDED_CONNECT_ALL                                                   \
    void createAndConnectAllPairs(std::shared_ptr<gloo::IStore> store) override { \
        gloo::transport::Context::createAndConnectAllPairs(std::move(store));      \
    }
#elif defined(OMNI_GLOO_CONNECT_ALL_REF)
#define OMNI_GUARDED_CONNECT_ALL                                  \
    void createAndConnectAllPairs(gloo::IStore &store) override { \
        gloo::transport::Context::createAndConnectAllPairs(store); \
    }
#else
#define OMNI_GUARDED_CONNECT_ALL
#endif

// What a pair of a guarded device publishes (gloo_guard.h): Gloo's address, then, for a
// rendezvous that passes only addresses, the pair's token.
class TokenAddress final : public tcp::Address {
public:
    TokenAddress(const tcp::Address &a, const PairToken &token, bool with_token)
        : tcp::Address(a), token_(token), with_token_(with_token) {}
    std::vector<char> bytes() const override {
        std::vector<char> b = tcp::Address::bytes();
        if (with_token_) b.insert(b.end(), token_.begin(), token_.end());
        return b;
    }

private:
    const PairToken token_;
    const bool with_token_;
};

// A peer's address bytes from such a rendezvous: its token off the end into `token`.
std::vector<char> split_token(const std::vector<char> &bytes, PairToken &token) {
    if (bytes.size() <= kPairTokenBytes)
        throw std::runtime_error("a guarded Gloo pair's peer address has " + std::to_string(bytes.size()) +
                                 " bytes, expected an address and a " + std::to_string(kPairTokenBytes) +
                                 "-byte token (is the peer's Gloo group guarded too?)");
    std::memcpy(token.data(), bytes.data() + bytes.size() - kPairTokenBytes, kPairTokenBytes);
    return std::vector<char>(bytes.begin(), bytes.end() - kPairTokenBytes);
}

#ifndef OMNI_GLOO_SHARED_LISTENER
class GuardedPair;

// A slot for an accepted connection that owes its token. Slots are the pair's own and are
// reused, never freed while the pair lives: Gloo's loop may still deliver an event of this
// tick to a slot whose descriptor was just dropped (it then reads nothing, or from the
// connection that took the slot since; both harmless).
struct Slot final : tcp::Handler {
    GuardedPair *pair = nullptr;
    int fd = -1;
    std::chrono::steady_clock::time_point since;
    PairToken got{};
    std::size_t n = 0;
    std::string from;
    void handleEvents(int events) override;
};

// The deadline of held connections: a timerfd in Gloo's loop, armed while any is held.
struct Sweeper final : tcp::Handler {
    GuardedPair *pair = nullptr;
    int fd = -1;
    void handleEvents(int events) override;
};

class GuardedPair final : public tcp::Pair {
public:
    GuardedPair(tcp::Context *context, tcp::Device *device, int rank, std::chrono::milliseconds timeout,
                const PairToken &own, bool token_in_address)
        : tcp::Pair(context, device, rank, timeout),
          own_(own),
          token_in_address_(token_in_address),
          published_(self_, own, token_in_address) {
        for (auto &s : slots_) s.pair = this;
        sweeper_.pair = this;
        std::lock_guard<std::mutex> l(m_);
        if (state_ == LISTENING && fd_ >= 0) {
            // Gloo's listener blocks and has a backlog of 1; ours takes everything queued
            // without blocking the loop, and strangers queued meanwhile leave the peer room.
            const int fl = ::fcntl(fd_, F_GETFL);
            if (fl >= 0) (void)::fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
            (void)::listen(fd_, 64);
        }
    }

    ~GuardedPair() override {
        // Gloo's own destructor then closes the listener or the connection. Unregistering
        // from this thread waits for a loop tick; the loop's handlers only try the lock.
        std::lock_guard<std::mutex> l(m_);
        drop_all(nullptr);
        if (sweeper_.fd >= 0) {
            device_->unregisterDescriptor(sweeper_.fd, &sweeper_);
            ::close(sweeper_.fd);
            sweeper_.fd = -1;
        }
    }

    const PairToken &own() const { return own_; }
    void set_peer_token(const PairToken &t) {
        std::lock_guard<std::mutex> l(m_);
        peer_token_ = t;
    }

    const tcp::Address &address() const override { return published_; }
    void connect(const std::vector<char> &bytes) override {
        if (!token_in_address_) {
            tcp::Pair::connect(bytes);
            return;
        }
        PairToken t;
        const std::vector<char> a = split_token(bytes, t);
        set_peer_token(t);
        tcp::Pair::connect(a);
    }

    void handleEvents(int events) override {
        std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
        if (!lock) return;  // as Gloo: another thread changes the pair; the next tick retries
        if (state_ == LISTENING) {
            accept_one();
            return;
        }
        if (state_ == CONNECTING) {
            finish_connect();
            return;
        }
        lock.unlock();
        tcp::Pair::handleEvents(events);
    }

    // A held connection is readable (Slot::handleEvents).
    void on_slot(Slot &s) {
        std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
        if (!lock || s.fd < 0) return;  // level-triggered: it comes again
        if (state_ != LISTENING) {
            drop(s, "the pair is connected already");
            return;
        }
        const ssize_t r = ::recv(s.fd, s.got.data() + s.n, kPairTokenBytes - s.n, 0);  // never past it
        if (r == 0) {
            drop(s, "closed before sending the pair's token");
            return;
        }
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(s, std::strerror(errno));
            return;
        }
        s.n += static_cast<std::size_t>(r);
        if (s.n < kPairTokenBytes) return;
        unsigned char diff = 0;  // constant time
        for (std::size_t i = 0; i < kPairTokenBytes; ++i) diff |= static_cast<unsigned char>(s.got[i] ^ own_[i]);
        if (diff) {
            drop(s, "wrong token");
            return;
        }
        adopt(s);
    }

    void sweep() {
        std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
        if (!lock) return;
        std::uint64_t ticks;
        while (::read(sweeper_.fd, &ticks, sizeof ticks) > 0) {
        }
        const auto now = std::chrono::steady_clock::now();
        bool held = false;
        for (auto &s : slots_) {
            if (s.fd < 0) continue;
            if (now - s.since >= kPairHandshake)
                drop(s, "no token within 2000 ms");
            else
                held = true;
        }
        if (!held) arm(false);
    }

private:
    void accept_one() {
        sockaddr_storage a{};
        socklen_t al = sizeof a;
        const int fd = ::accept4(fd_, reinterpret_cast<sockaddr *>(&a), &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;  // EAGAIN, or a connection reset while queued; EMFILE: retried next tick
        Slot *slot = nullptr;
        for (auto &s : slots_)
            if (s.fd < 0) {
                slot = &s;
                break;
            }
        if (!slot) {  // all held: the oldest goes (the peer sends its token within a round trip)
            slot = &slots_[0];
            for (auto &s : slots_)
                if (s.since < slot->since) slot = &s;
            drop(*slot, "more than 8 connections owe their token");
        }
        slot->fd = fd;
        slot->n = 0;
        slot->since = std::chrono::steady_clock::now();
        slot->from = door_endpoint_text(a);
        device_->registerDescriptor(fd, EPOLLIN, slot);
        arm(true);
    }

    // The connection proved it holds the token: it is the peer, as Gloo's own accept would
    // have made it; the listener and every other held connection go.
    void adopt(Slot &s) {
        const int fd = s.fd;
        device_->unregisterDescriptor(fd, &s);  // from the loop thread: no wait
        s.fd = -1;
        device_->unregisterDescriptor(fd_, this);
        ::close(fd_);
        drop_all("the pair's peer connected");
        arm(false);
        fd_ = fd;
        handleConnected();
    }

    // The connecting side: connected (or failed); the token goes first. A fresh socket's
    // send buffer takes 16 bytes at once.
    void finish_connect() {
        drop_all("the pair connects to its peer instead");
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err) {
            signalException(GLOO_ERROR_MSG("connect ", peer_.str(), ": ", std::strerror(err)));
            return;
        }
        const ssize_t w = ::send(fd_, peer_token_.data(), kPairTokenBytes, MSG_NOSIGNAL);
        if (w != static_cast<ssize_t>(kPairTokenBytes)) {
            signalException(GLOO_ERROR_MSG("sending the pair's token to ", peer_.str(), ": ",
                                           w < 0 ? std::strerror(errno) : "short write"));
            return;
        }
        handleConnected();
    }

    void drop(Slot &s, const char *why) {
        if (s.fd < 0) return;
        device_->unregisterDescriptor(s.fd, &s);
        ::close(s.fd);
        s.fd = -1;
        if (why) note_refused(s.from, why);
    }
    void drop_all(const char *why) {
        for (auto &s : slots_) drop(s, why);
    }

    void arm(bool on) {
        if (on && sweeper_.fd < 0) {
            sweeper_.fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
            if (sweeper_.fd < 0) return;  // no deadline then; the cap still bounds what is held
            device_->registerDescriptor(sweeper_.fd, EPOLLIN, &sweeper_);
        }
        if (sweeper_.fd < 0) return;
        itimerspec t{};
        if (on) t.it_value.tv_nsec = t.it_interval.tv_nsec = 100 * 1000 * 1000;  // 100 ms
        (void)::timerfd_settime(sweeper_.fd, 0, &t, nullptr);
    }

    const PairToken own_;
    const bool token_in_address_;
    const TokenAddress published_;
    PairToken peer_token_{};
    std::array<Slot, kMaxPendingPerPair> slots_;
    Sweeper sweeper_;
};

void Slot::handleEvents(int) { pair->on_slot(*this); }
void Sweeper::handleEvents(int) { pair->sweep(); }

class GuardedContext final : public tcp::Context {
public:
    GuardedContext(std::shared_ptr<tcp::Device> device, int rank, int size, bool token_in_address)
        : tcp::Context(std::move(device), rank, size), token_in_address_(token_in_address) {}
    std::unique_ptr<gloo::transport::Pair> &createPair(int rank) override {
        pairs_[rank] = std::make_unique<GuardedPair>(this, device_.get(), rank, getTimeout(), random_token(),
                                                     token_in_address_);
        return pairs_[rank];
    }
    OMNI_GUARDED_CONNECT_ALL

private:
    const bool token_in_address_;
};
#else
#include "comm/gloo_guard_shared.inc"
#endif

// make_guarded_device's: Gloo's TCP device, whose contexts are guarded with the tokens in the
// addresses. Gloo's own contexts hold the TCP device (their pairs use it), this one only makes
// them.
class GuardedDevice final : public gloo::transport::Device {
public:
    explicit GuardedDevice(std::shared_ptr<tcp::Device> tcp) : tcp_(std::move(tcp)) {}
    std::string str() const override { return tcp_->str(); }
    const std::string &getPCIBusID() const override { return tcp_->getPCIBusID(); }
    int getInterfaceSpeed() const override { return tcp_->getInterfaceSpeed(); }
    bool hasGPUDirect() const override { return tcp_->hasGPUDirect(); }
    std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override {
        return std::make_shared<GuardedContext>(tcp_, rank, size, true);
    }

private:
    const std::shared_ptr<tcp::Device> tcp_;
};
#endif

}  // namespace

bool gloo_pairs_guarded() {
#ifdef OMNI_GLOO_GUARDED
    return true;
#else
    return false;
#endif
}

std::shared_ptr<gloo::transport::Context> make_guarded_context(
    const std::shared_ptr<gloo::transport::Device> &device, int rank, int size) {
#ifdef OMNI_GLOO_GUARDED
    if (auto tcp = std::dynamic_pointer_cast<tcp::Device>(device))
        return std::make_shared<GuardedContext>(tcp, rank, size, false);
#endif
    return device->createContext(rank, size);
}

std::shared_ptr<gloo::transport::Device> make_guarded_device(const gloo::transport::tcp::attr &attr) {
    auto device = gloo::transport::tcp::CreateDevice(attr);
#ifdef OMNI_GLOO_GUARDED
    if (auto tcp = std::dynamic_pointer_cast<tcp::Device>(device)) return std::make_shared<GuardedDevice>(tcp);
#endif
    return device;
}

PairToken own_token(gloo::transport::Pair &pair) {
#ifdef OMNI_GLOO_GUARDED
    if (auto *g = dynamic_cast<GuardedPair *>(&pair)) return g->own();
#endif
    (void)pair;
    return PairToken{};
}

void set_peer_token(gloo::transport::Pair &pair, const PairToken &token) {
#ifdef OMNI_GLOO_GUARDED
    if (auto *g = dynamic_cast<GuardedPair *>(&pair)) g->set_peer_token(token);
#endif
    (void)pair;
    (void)token;
}

std::size_t refused_pair_connections() { return g_refused.load(); }

}  // namespace omni::launcher
