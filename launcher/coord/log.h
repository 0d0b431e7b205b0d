// The launcher's one logging facility: timestamped lines on stderr (where Slurm collects a
// batch step's output), with a replaceable sink so tests can assert on what was logged.
#ifndef OMNI_LAUNCHER_LOG_H
#define OMNI_LAUNCHER_LOG_H

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace omni::launcher {

enum class LogLevel { Debug, Info, Warning, Error };

// Sends "TIME COMPONENT[PID] LEVEL: MESSAGE" to the sink (stderr by default). Thread-safe.
void log_line(LogLevel level, std::string_view component, std::string_view message);
// Replaces the sink (nullptr: back to stderr); returns the previous one.
using LogSink = std::function<void(LogLevel, const std::string &line)>;
LogSink set_log_sink(LogSink sink);
// Messages below this level are dropped (default Info; OMNI_LOG_LEVEL=debug lowers it).
void set_log_level(LogLevel level);

// At most `per_window` events per `window_ms`; the rest are counted, so a flood of bad
// requests cannot flood the log (the next allowed line reports how many were suppressed).
class RateLimit {
public:
    RateLimit(unsigned per_window, std::int64_t window_ms) : per_(per_window), window_(window_ms) {}
    // True when the event may be logged; `suppressed` then holds the count dropped before it.
    bool allow(std::int64_t now_ms, std::uint64_t &suppressed);

private:
    unsigned per_;
    std::int64_t window_;
    std::int64_t start_ = INT64_MIN;
    unsigned used_ = 0;
    std::uint64_t dropped_ = 0;
};

}  // namespace omni::launcher

#endif
