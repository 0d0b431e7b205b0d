// The heartbeat thread; see liveness.h for why it exists and what the replies mean.
#include "runtime/liveness.h"

#include <algorithm>
#include <system_error>

#include "coord/client.h"
#include "coord/log.h"

namespace omni::launcher {

namespace {
constexpr std::int64_t kFirstIntervalMs = 500;  // until the coordinator says its own
constexpr std::int64_t kMinRequestTimeoutMs = 1000;
}  // namespace

std::int64_t Liveness::now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Result<std::unique_ptr<Liveness>> Liveness::start(const std::string &endpoint, const std::string &secret,
                                                  const std::string &member_id, Hooks hooks) {
    auto client = CoordinatorClient::connect(endpoint, secret);
    if (!client) return Error{client.error()};
    std::unique_ptr<Liveness> l(new Liveness(std::move(client).value(), member_id, std::move(hooks)));
    try {
        l->thread_ = std::thread([p = l.get()] { p->run(); });
    } catch (const std::system_error &e) {
        return make_error(std::string("starting the heartbeat thread: ") + e.what());
    }
    return l;
}

Liveness::Liveness(std::unique_ptr<CoordinatorClient> client, std::string member_id, Hooks hooks)
    : client_(std::move(client)), id_(std::move(member_id)), hooks_(std::move(hooks)) {}

Liveness::~Liveness() {
    {
        std::lock_guard<std::mutex> l(m_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

bool Liveness::lease_fresh() const {
    const std::int64_t timeout = timeout_ms_.load(), last = last_ack_ms_.load();
    if (last < 0) return false;  // not confirmed yet: ask
    return timeout == 0 || now_ms() - last < timeout / 2;
}

void Liveness::note_ack() { last_ack_ms_.store(now_ms()); }

void Liveness::note_fenced(std::uint64_t generation) {
    std::uint64_t none = 0;
    if (fenced_generation_.compare_exchange_strong(none, std::max<std::uint64_t>(generation, 1)))
        log_line(LogLevel::Warning, "libomni",
                 "member '" + id_ + "' was declared lost in generation " + std::to_string(generation) +
                     " (silent longer than the coordinator's liveness timeout, e.g. stopped) and is fenced out: "
                     "it leaves without taking part in anything more");
}

void Liveness::run() {
    std::int64_t interval = kFirstIntervalMs;
    bool said_unreachable = false;
    for (;;) {
        const std::uint64_t g = hooks_.generation();
        auto ack = client_->heartbeat(id_, g, std::max(kMinRequestTimeoutMs, interval));
        if (!ack) {
            // The coordinator is slow, gone or out of reach: keep trying until its liveness
            // timeout has passed since its last ack; by then it has declared this rank lost
            // (or is gone), and the rank leaves as a fenced one does (liveness.h).
            if (!said_unreachable)
                log_line(LogLevel::Warning, "libomni", "heartbeat of '" + id_ + "': " + ack.error());
            said_unreachable = true;
            const std::int64_t timeout = timeout_ms_.load(), last = last_ack_ms_.load();
            if (timeout > 0 && last >= 0 && now_ms() - last >= timeout) {
                cut_off_.store(true);
                std::uint64_t none = 0;
                fenced_generation_.compare_exchange_strong(none, std::max<std::uint64_t>(g, 1));
                log_line(LogLevel::Warning, "libomni",
                         "member '" + id_ + "' has had no reply from the coordinator for " +
                             std::to_string(now_ms() - last) + " ms (its liveness timeout is " +
                             std::to_string(timeout) +
                             " ms): the coordinator has declared it lost or is gone, so it is out: it "
                             "leaves its collectives and exits without writing anything");
                hooks_.abandon(g, true);
                return;
            }
        } else {
            said_unreachable = false;
            const HeartbeatAck &a = ack.value();
            if (a.fenced) {
                note_fenced(a.fenced_generation);
                hooks_.abandon(g, true);  // out of any collective, so that the trainer sees it
                return;
            }
            note_ack();
            timeout_ms_.store(a.timeout_ms);
            if (a.interval_ms > 0) interval = a.interval_ms;
            if (a.abandon_generation != 0 && a.abandon_generation == g && abandoned_ != g) {
                abandoned_ = g;
                log_line(LogLevel::Info, "libomni",
                         "generation " + std::to_string(g) +
                             " lost ranks: leaving its collectives for the boundary (REWIND)");
                hooks_.abandon(g, a.unit_lost);
            }
        }
        std::unique_lock<std::mutex> l(m_);
        if (cv_.wait_for(l, std::chrono::milliseconds(interval), [this] { return stopping_; })) return;
    }
}

}  // namespace omni::launcher
