// The generation-change record of omni-launch: one JSON object per line (JSONL) in the events
// file, and the matching line on stderr.
//
// A line: {"time": "2026-11-29T12:00:00.123Z", "unix_ms": ..., "job": J, "generation": G,
// "old_generation": G0, "old_world": W0, "new_world": W, "old_units": [...], "new_units": [...],
// "reason": "initial"|"planned"|"lost"|"stop", "detail": the coordinator's reason,
// "step": the boundary step, "pause_ms": P, "pause_source": S, "resolution_ms": R}, and for
// a resize "kind": who asked for it (planned, preemption, policy, scontrol, lost; the
// coordinator's ResizeRecord).
// pause_ms (S = "ranks") is the time from the coordinator's decision until every rank of the
// new generation reported its communicator built and its state in place; when that report
// cannot complete (a rank died in the change), S = "poll": how long omni-launch saw the
// deciding boundary in progress (it polls every R ms, so a boundary decided between two polls
// shows 0). For "initial" (S = "launch") it is the time from the launch of the first step to
// the formation of generation 1.
#ifndef OMNI_LAUNCHER_LAUNCH_EVENTS_H
#define OMNI_LAUNCHER_LAUNCH_EVENTS_H

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/result.h"

namespace omni::launcher {

struct GenerationEvent {
    std::int64_t unix_ms = 0;
    std::uint32_t job = 0;
    std::uint64_t old_generation = 0, generation = 0;
    std::uint32_t old_world = 0, new_world = 0;
    std::vector<std::uint32_t> old_units, new_units;
    std::string reason;  // initial | planned | lost | stop
    std::string detail;  // "formed", "planned", "lost", "below-min", "signal SIGTERM", ...
    std::string kind;    // a resize's: planned | preemption | policy | scontrol | lost ("": none)
    std::uint64_t step = 0;
    std::int64_t pause_ms = 0;
    std::string pause_source = "poll";  // ranks | poll | launch (see omni-launch(1))
    std::int64_t resolution_ms = 0;
};

// A decision of the elastic policy (--omni-policy=auto, launch/policy.h), in the same file:
// {"time", "unix_ms", "job", "event": "policy", "action": "grow"|"shrink"|"withdraw"|"none",
// "units": the job's units then, "target": the units it asks for, "why": in words, naming the
// jobs and nodes it saw}. "none" lines tell what the policy waits for (a threshold, a
// cooldown) or that a wish went away. A policy line has no "reason" or "generation", so
// readers of generation changes tell the two apart.
struct PolicyEvent {
    std::int64_t unix_ms = 0;
    std::uint32_t job = 0;
    std::string action;
    std::uint32_t units = 0, target = 0;
    std::string why;
};
nlohmann::json policy_event_to_json(const PolicyEvent &e);

// The event's JSON object (keys as documented above).
nlohmann::json event_to_json(const GenerationEvent &e);
// The stderr line: "generation 1 -> 2: world 4 -> 2 (planned, step 7, pause 12 ms)".
std::string event_summary(const GenerationEvent &e);
// "planned" | "lost" | "initial" | "stop" from a coordinator decision (kind, reason).
std::string event_reason(const std::string &kind, const std::string &detail, std::uint64_t from_generation);

// Appends lines to the events file (created mode 0600, or appended to). One write(2) per line
// with O_APPEND, so a reader never sees half a line.
class EventLog {
public:
    static Result<EventLog> open(const std::string &path);
    EventLog(EventLog &&o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
    EventLog &operator=(EventLog &&) = delete;
    EventLog(const EventLog &) = delete;
    ~EventLog();
    Status append(const nlohmann::json &line);
    const std::string &path() const { return path_; }

private:
    EventLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
    int fd_ = -1;
    std::string path_;
};

// UTC "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string iso_time(std::int64_t unix_ms);

}  // namespace omni::launcher

#endif
