// A rank's heartbeat to the coordinator, on a thread of its own (issue #46).
//
// Why a thread: a rank that hangs (SIGSTOP, a wedged driver) keeps its TCP connections open,
// so its peers wait for it inside a collective and never reach the boundary whose timeout
// would catch it. A heartbeat from the training thread would stop whenever a collective
// blocks; one from a thread of its own stops only when the process does. The coordinator
// declares a member silent for its liveness timeout lost (Protocol::heartbeat), and the
// replies carry what the rank must do:
//  - abandon: members of this generation are lost; the hook aborts the generation's
//    collectives (Communicator::abort), so the trainer's pending one fails now and it goes
//    to the boundary, which answers REWIND;
//  - fenced: this rank was declared lost itself (it comes back after SIGCONT). It is out for
//    good: the hook aborts its collectives, the runtime refuses every further boundary and
//    Runtime::check_member() says so, and the heartbeats end.
//  - no reply at all for the liveness timeout (the coordinator's, from its last ack): the
//    coordinator has declared this rank lost by now, or is gone (omni-launch killed, the
//    node's link cut). Either way the rank is out, as if fenced ("cut off"): it cannot be
//    told so, so it must conclude it itself, or it would wait in its boundary request (up to
//    OMNI_BOUNDARY_TIMEOUT_MS, 300 s) or a collective while the survivors go on without it,
//    and a cut-off side that outlived its lease could act on stale decisions. Its last ack
//    came after the coordinator last heard from it, so it stops no earlier than the
//    coordinator's declaration, and it stopped writing at half the timeout (lease_fresh).
// The thread owns its coordinator connection (a ZeroMQ socket belongs to one thread) and
// sends nothing else: no Slurm RPC, one small request per interval to the job's own
// coordinator.
#ifndef OMNI_LAUNCHER_RUNTIME_LIVENESS_H
#define OMNI_LAUNCHER_RUNTIME_LIVENESS_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "omni/result.h"

namespace omni::launcher {

class CoordinatorClient;

class Liveness {
public:
    struct Hooks {
        // The generation the rank runs in now (read on the heartbeat thread).
        std::function<std::uint64_t()> generation;
        // Leave `generation`'s collectives (on the heartbeat thread): its members were lost,
        // or (fenced) this rank was. unit_lost: a rank of this rank's own unit is among them,
        // so its model-parallel group is gone too.
        std::function<void(std::uint64_t generation, bool unit_lost)> abandon;
    };
    // Connects (its own client) and starts the thread, which sends its first heartbeat at
    // once and then at the interval the coordinator asks for.
    static Result<std::unique_ptr<Liveness>> start(const std::string &endpoint, const std::string &secret,
                                                   const std::string &member_id, Hooks hooks);
    ~Liveness();  // stops and joins the thread
    Liveness(const Liveness &) = delete;
    Liveness &operator=(const Liveness &) = delete;

    bool fenced() const { return fenced_generation_.load() != 0; }
    // Fenced by its own conclusion: no reply from the coordinator for its liveness timeout.
    bool cut_off() const { return cut_off_.load(); }
    std::uint64_t fenced_generation() const { return fenced_generation_.load(); }
    // Whether the coordinator acknowledged this rank recently enough that it cannot have
    // declared it lost meanwhile: an ack within half its liveness timeout (a process stopped
    // long enough to be declared lost finds its lease expired when it resumes, before its
    // heartbeat thread has had a reply). Always true where the coordinator tracks no liveness.
    bool lease_fresh() const;
    // What a synchronous heartbeat of the rank's own (Runtime::check_member) learnt.
    void note_ack();
    void note_fenced(std::uint64_t generation);

private:
    Liveness(std::unique_ptr<CoordinatorClient> client, std::string member_id, Hooks hooks);
    void run();
    static std::int64_t now_ms();

    std::unique_ptr<CoordinatorClient> client_;
    const std::string id_;
    const Hooks hooks_;
    std::atomic<std::int64_t> last_ack_ms_{-1};  // -1: none yet
    std::atomic<std::int64_t> timeout_ms_{0};    // the coordinator's, from its acks
    std::atomic<std::uint64_t> fenced_generation_{0};
    std::atomic<bool> cut_off_{false};
    std::uint64_t abandoned_ = 0;  // the last generation abandoned (heartbeat thread only)
    std::mutex m_;
    std::condition_variable cv_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace omni::launcher

#endif
