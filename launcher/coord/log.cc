// The launcher's logging facility; see log.h.
#include "coord/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <unistd.h>

namespace omni::launcher {
namespace {

std::mutex &sink_mutex() {
    static std::mutex m;
    return m;
}
LogSink &sink() {
    static LogSink s;
    return s;
}
std::atomic<int> &min_level() {
    static std::atomic<int> l{static_cast<int>(LogLevel::Info)};
    return l;
}

const char *level_name(LogLevel l) {
    switch (l) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warning: return "warning";
    case LogLevel::Error: return "error";
    }
    return "?";
}

}  // namespace

void set_log_level(LogLevel level) { min_level() = static_cast<int>(level); }

LogSink set_log_sink(LogSink s) {
    std::lock_guard<std::mutex> g(sink_mutex());
    LogSink old = std::move(sink());
    sink() = std::move(s);
    return old;
}

void log_line(LogLevel level, std::string_view component, std::string_view message) {
    if (static_cast<int>(level) < min_level()) return;
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    struct tm tm;
    gmtime_r(&t, &tm);
    char stamp[96];
    std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
    std::string line = std::string(stamp) + " " + std::string(component) + "[" +
                       std::to_string(::getpid()) + "] " + level_name(level) + ": " +
                       std::string(message);
    std::lock_guard<std::mutex> g(sink_mutex());
    if (sink()) {
        sink()(level, line);
    } else {
        line.push_back('\n');
        std::fwrite(line.data(), 1, line.size(), stderr);
    }
}

bool RateLimit::allow(std::int64_t now_ms, std::uint64_t &suppressed) {
    if (start_ == INT64_MIN || now_ms - start_ >= window_) {
        start_ = now_ms;
        used_ = 0;
    }
    if (used_ >= per_) {
        ++dropped_;
        return false;
    }
    ++used_;
    suppressed = dropped_;
    dropped_ = 0;
    return true;
}

}  // namespace omni::launcher
