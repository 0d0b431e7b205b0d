// Rank threads of a test report arrival at a phase and wait there; the test's main thread
// opens a phase once it has set up what the phase needs (a reshape request, joiners). Waits
// are bounded, so a test that goes wrong fails instead of hanging.
#ifndef OMNI_LAUNCHER_TRAIN_TEST_PHASES_H
#define OMNI_LAUNCHER_TRAIN_TEST_PHASES_H

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

class Phases {
public:
    explicit Phases(std::chrono::seconds limit = std::chrono::seconds(30)) : limit_(limit) {}
    void arrive_and_wait(int phase) {
        std::unique_lock<std::mutex> lk(m_);
        ++arrived_[phase];
        cv_.notify_all();
        cv_.wait_for(lk, limit_, [&] { return open_ >= phase; });
    }
    bool wait_arrived(int phase, int n) {
        std::unique_lock<std::mutex> lk(m_);
        return cv_.wait_for(lk, limit_, [&] { return arrived_[phase] >= n; });
    }
    void open(int phase) {
        std::lock_guard<std::mutex> lk(m_);
        open_ = phase;
        cv_.notify_all();
    }

private:
    std::chrono::seconds limit_;
    std::mutex m_;
    std::condition_variable cv_;
    std::map<int, int> arrived_;
    int open_ = 0;
};

#endif
