// Progress bar for omni-ckpt; see progress.h.
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace omni {
namespace ckpt {

std::string human_bytes(std::uint64_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && ::isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

Progress ProgressBar::callback() {
    return [this](std::uint64_t done, std::uint64_t total) { update(done, total); };
}

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    // Redraw at most 10 times a second: a terminal is slow compared to a page-cache read.
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int fill = static_cast<int>(frac * kWidth);
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s/%s %s/s ", label_.c_str(), fill,
                 "==============================", kWidth - fill, "", static_cast<int>(frac * 100),
                 human_bytes(done).c_str(), human_bytes(total).c_str(),
                 human_bytes(static_cast<std::uint64_t>(rate)).c_str());
    std::fflush(stderr);
}

void ProgressBar::finish() {
    if (enabled_ && drawn_) {
        std::fputc('\n', stderr);
        drawn_ = false;
    }
}

}  // namespace ckpt
}  // namespace omni
