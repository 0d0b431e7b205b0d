// A one-line progress bar on stderr for long omni-ckpt operations, drawn only when stderr
// is a terminal (never into logs or pipes).
#ifndef OMNI_CKPT_CLI_PROGRESS_H
#define OMNI_CKPT_CLI_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <string>

#include "omni/ckpt_cpp.h"

namespace omni {
namespace ckpt {

class ProgressBar {
public:
    ProgressBar(std::string label, bool enabled);
    ~ProgressBar();
    // A callback for the library's long operations.
    Progress callback();
    void update(std::uint64_t done, std::uint64_t total);
    void finish();

private:
    std::string label_;
    bool enabled_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point start_, last_;
};

std::string human_bytes(std::uint64_t n);

}  // namespace ckpt
}  // namespace omni

#endif
