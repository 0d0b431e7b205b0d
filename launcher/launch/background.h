// A Slurm command the supervisor loop asks for without waiting on it.
//
// scontrol and squeue answer in milliseconds, but a busy or restarting slurmctld holds them
// for seconds (each call is bounded by its own timeout). omni-launch's loop also reaps steps,
// relays signals and follows the coordinator, so its looks at Slurm (the satellites, the
// expansion helper, job_submit/omni's release records) run on a thread of their own: the loop
// starts one when it is due and takes the answer on a later turn, with the time the look
// started, so that an answer older than what the loop did since (a job it submitted after)
// is read as such.
#ifndef OMNI_LAUNCHER_LAUNCH_BACKGROUND_H
#define OMNI_LAUNCHER_LAUNCH_BACKGROUND_H

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <optional>
#include <utility>

namespace omni::launcher {

template <class T>
class BackgroundLook {
public:
    struct Answer {
        T value;
        std::int64_t started_ms;  // when the look started (the caller's clock)
    };

    // Starts `fn` on a thread of its own unless one is in flight or `every_ms` has not passed
    // since the last start.
    template <class F>
    void start_every(std::int64_t now_ms, std::int64_t every_ms, F fn) {
        if (future_.valid() || now_ms - started_ms_ < every_ms) return;
        started_ms_ = now_ms;
        future_ = std::async(std::launch::async, std::move(fn));
    }
    // The answer, once, when it is ready; nullopt before.
    std::optional<Answer> take() {
        if (!future_.valid() || future_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
            return std::nullopt;
        return Answer{future_.get(), started_ms_};
    }
    bool in_flight() const { return future_.valid(); }

private:
    std::future<T> future_;
    std::int64_t started_ms_ = std::numeric_limits<std::int64_t>::min() / 2;
};

}  // namespace omni::launcher

#endif
