// The generation-change record; see launch/events.h.
#include "launch/events.h"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <unistd.h>

namespace omni::launcher {

std::string iso_time(std::int64_t unix_ms) {
    std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(unix_ms % 1000));
    return buf;
}

nlohmann::json event_to_json(const GenerationEvent &e) {
    nlohmann::json j = {{"time", iso_time(e.unix_ms)},   {"unix_ms", e.unix_ms},
            {"job", e.job},                  {"old_generation", e.old_generation},
            {"generation", e.generation},    {"old_world", e.old_world},
            {"new_world", e.new_world},      {"old_units", e.old_units},
            {"new_units", e.new_units},      {"reason", e.reason},
            {"detail", e.detail},            {"step", e.step},
            {"pause_ms", e.pause_ms},        {"pause_source", e.pause_source},
            {"resolution_ms", e.resolution_ms}};
    if (!e.kind.empty()) j["kind"] = e.kind;
    return j;
}

nlohmann::json policy_event_to_json(const PolicyEvent &e) {
    return {{"time", iso_time(e.unix_ms)}, {"unix_ms", e.unix_ms}, {"job", e.job},
            {"event", "policy"},           {"action", e.action},   {"units", e.units},
            {"target", e.target},          {"why", e.why}};
}

std::string event_summary(const GenerationEvent &e) {
    std::string s = "generation " + std::to_string(e.old_generation) + " -> " +
                    (e.reason == "stop" ? std::string("stop") : std::to_string(e.generation)) +
                    ": world " + std::to_string(e.old_world) + " -> " + std::to_string(e.new_world) +
                    " (" + e.reason;
    if (e.detail != e.reason) s += ": " + e.detail;
    s += ", step " + std::to_string(e.step) + ", pause " + std::to_string(e.pause_ms) + " ms)";
    return s;
}

std::string event_reason(const std::string &kind, const std::string &detail,
                         std::uint64_t from_generation) {
    if (kind == "stop") return "stop";
    if (from_generation == 0) return "initial";
    return detail == "lost" ? "lost" : "planned";
}

Result<EventLog> EventLog::open(const std::string &path) {
    if (path.empty()) return make_error("--events: empty path");
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return make_error("--events " + path + ": " + std::strerror(errno));
    return EventLog(fd, path);
}

EventLog::~EventLog() {
    if (fd_ >= 0) ::close(fd_);
}

Status EventLog::append(const nlohmann::json &line) {
    std::string text = line.dump() + "\n";
    std::size_t off = 0;
    while (off < text.size()) {
        ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return make_error(path_ + ": write: " + std::strerror(errno));
        off += static_cast<std::size_t>(n);
    }
    return Status::success();
}

}  // namespace omni::launcher
