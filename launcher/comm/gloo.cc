// Gloo backend of the communicator: TCP, host buffers. Gloo reports failures by throwing
// gloo::Exception; every entry point here turns that into an omni::Status.
#include "config.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

#include "comm/bf16.h"
#include "comm/comm.h"
#include "comm/gloo_guard.h"
#include "comm/pair_sockets.h"
#include "comm/same_host.h"
#include "coord/log.h"

namespace omni::launcher {

std::size_t dtype_size(DType t) {
    switch (t) {
        case DType::fp32: return 4;
        case DType::bf16: return 2;
        case DType::i64: return 8;
    }
    return 0;
}

namespace {

void sum_fp32(void *out, const void *a, const void *b, std::size_t n) {
    auto *o = static_cast<float *>(out);
    const auto *x = static_cast<const float *>(a);
    const auto *y = static_cast<const float *>(b);
    for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void sum_bf16(void *out, const void *a, const void *b, std::size_t n) {
    auto *o = static_cast<std::uint16_t *>(out);
    const auto *x = static_cast<const std::uint16_t *>(a);
    const auto *y = static_cast<const std::uint16_t *>(b);
    for (std::size_t i = 0; i < n; ++i) o[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}

void sum_i64(void *out, const void *a, const void *b, std::size_t n) {
    auto *o = static_cast<std::int64_t *>(out);
    const auto *x = static_cast<const std::int64_t *>(a);
    const auto *y = static_cast<const std::int64_t *>(b);
    // Wrapping addition: exact while the true sum fits, and associative either way.
    for (std::size_t i = 0; i < n; ++i)
        o[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(x[i]) + static_cast<std::uint64_t>(y[i]));
}

void scale(void *buf, std::size_t n, DType t, float factor) {
    if (t == DType::fp32) {
        auto *f = static_cast<float *>(buf);
        for (std::size_t i = 0; i < n; ++i) f[i] *= factor;
    } else {
        auto *h = static_cast<std::uint16_t *>(buf);
        for (std::size_t i = 0; i < n; ++i) h[i] = float_to_bf16(bf16_to_float(h[i]) * factor);
    }
}

// Gloo's TCP device runs an epoll loop that sleeps up to 10 ms when idle, and every socket
// it stops watching (a connecting pair dropping its listener, every pair of a context being
// closed, the loop itself being joined) waits for that loop's next turn. A communicator of n
// ranks pays this for about n pairs one after another on build and on teardown: tens of
// milliseconds of a resize pause spent asleep. The waker is an eventfd watched by the loop;
// while a communicator is built or torn down it is poked every 200 us, so the loop turns at
// once, except while the build waits on the rendezvous store (WakingStore below): that wait
// can be long (joiners wait for the survivors' hand-off) and needs no loop turns, and
// pokes then would only steal CPU from the ranks being waited for. It must outlive the
// device's loop (the loop may call it until joined).
class LoopWaker final : public gloo::transport::tcp::Handler {
public:
    LoopWaker() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    }
    ~LoopWaker() override {
        stop();
        ::close(fd_);
    }
    LoopWaker(const LoopWaker &) = delete;
    LoopWaker &operator=(const LoopWaker &) = delete;

    void attach(gloo::transport::tcp::Device &dev) { dev.registerDescriptor(fd_, EPOLLIN, this); }
#ifdef OMNI_GLOO_HANDLER_LOOP
    void handleEvents(gloo::transport::tcp::Loop &, int) override {
#else
    void handleEvents(int) override {
#endif
        std::uint64_t v;
        while (::read(fd_, &v, sizeof v) > 0) {
        }
    }
    void start() {
        if (poker_.joinable()) return;
        {
            std::lock_guard<std::mutex> l(m_);
            poking_ = true;
        }
        poker_ = std::thread([this] {
            std::unique_lock<std::mutex> l(m_);
            while (poking_) {
                if (paused_) {
                    cv_.wait(l);
                    continue;
                }
                const std::uint64_t one = 1;
                (void)!::write(fd_, &one, sizeof one);
                cv_.wait_for(l, std::chrono::microseconds(200));
            }
        });
    }
    // Around waits that need no loop turns.
    void pause(bool on) {
        {
            std::lock_guard<std::mutex> l(m_);
            paused_ = on;
        }
        cv_.notify_all();
    }
    void stop() {
        if (!poker_.joinable()) return;
        {
            std::lock_guard<std::mutex> l(m_);
            poking_ = false;
        }
        cv_.notify_all();
        poker_.join();
    }

    // Drops the caller's hold on the device and stops the waker; the last hold joins the
    // device's loop. Gloo with tcp/loop.h (OMNI_GLOO_HANDLER_LOOP: upstream since 2025-03,
    // Debian unstable's) leaves its loop only on an epoll_wait that times out, 10 ms without
    // an event; pokes every 200 us give it one every turn, so the join never returned (sid:
    // gloo_test hung in ~Device -> Loop::shutdown -> thread::join with every poker running,
    // and ranks freeing a communicator stalled). There the waker stops before the join, which
    // then costs one 10 ms timeout; older Gloo checks its flag every turn, so pokes still make
    // its join quick. If someone else still holds the device, its loop may call the waker
    // later: the waker is kept alive (a few bytes and one descriptor) rather than risk that.
    static void release_device(std::shared_ptr<gloo::transport::Device> &device,
                               std::unique_ptr<LoopWaker> &waker) {
        if (device.use_count() == 1) {
#ifdef OMNI_GLOO_HANDLER_LOOP
            waker->stop();
#endif
            device.reset();  // joins the loop
            waker->stop();
        } else {
            waker->stop();
            (void)waker.release();
        }
    }

private:
    int fd_;
    std::mutex m_;
    std::condition_variable cv_;
    bool poking_ = false, paused_ = false;
    std::thread poker_;
};

class GlooCommunicator final : public Communicator {
public:
    GlooCommunicator(std::shared_ptr<gloo::Context> ctx,
                     std::shared_ptr<gloo::transport::Device> device,
                     std::unique_ptr<LoopWaker> waker, const GlooOptions &options)
        : ctx_(std::move(ctx)), device_(std::move(device)), waker_(std::move(waker)),
          timeout_(options.timeout), fail_reads_(options.same_host_copy == SameHostCopy::failing) {}
    ~GlooCommunicator() override {
        waker_->start();
        ctx_.reset();  // closes every pair: one loop turn each
        LoopWaker::release_device(device_, waker_);
    }

    int rank() const override { return ctx_->rank; }
    int size() const override { return ctx_->size; }
    const char *backend() const override { return "gloo"; }

    Status allreduce(void *buf, std::size_t count, DType type, ReduceOp op) override {
        if (type == DType::i64 && op != ReduceOp::sum)
            return make_error("gloo allreduce: i64 buffers take sum only");
        return run("allreduce", [&] {
            gloo::AllreduceOptions o(ctx_);
            if (type == DType::fp32) {
                o.setOutput(static_cast<float *>(buf), count);
                o.setReduceFunction(sum_fp32);
            } else if (type == DType::i64) {
                o.setOutput(static_cast<std::int64_t *>(buf), count);
                o.setReduceFunction(sum_i64);
            } else {
                o.setOutput(static_cast<std::uint16_t *>(buf), count);
                o.setReduceFunction(sum_bf16);
            }
            o.setTag(next_tag());
            o.setTimeout(timeout_);
            gloo::allreduce(o);
            if (op == ReduceOp::avg) scale(buf, count, type, 1.0f / static_cast<float>(ctx_->size));
        });
    }

    Status broadcast(void *buf, std::size_t count, DType type, int root) override {
        if (root < 0 || root >= ctx_->size)
            return make_error("broadcast: root " + std::to_string(root) + " is not a rank of " +
                              std::to_string(ctx_->size));
        return run("broadcast", [&] {
            gloo::BroadcastOptions o(ctx_);
            o.setOutput(static_cast<char *>(buf), count * dtype_size(type));
            o.setRoot(root);
            o.setTag(next_tag());
            o.setTimeout(timeout_);
            gloo::broadcast(o);
        });
    }

    Status allgather(const void *send, void *recv, std::size_t count, DType type) override {
        return allgather_bytes(send, recv, count * dtype_size(type));
    }

    Status allgather_bytes(const void *send, void *recv, std::size_t bytes) {
        return run("allgather", [&] {
            // Gloo reads the input from the output when they alias; copy ours into place.
            char *out = static_cast<char *>(recv);
            std::memmove(out + static_cast<std::size_t>(ctx_->rank) * bytes, send, bytes);
            gloo::AllgatherOptions o(ctx_);
            o.setOutput(out, bytes * static_cast<std::size_t>(ctx_->size));
            o.setTag(next_tag());
            o.setTimeout(timeout_);
            gloo::allgather(o);
        });
    }

    Status reduce_scatter(const void *send, void *recv, std::size_t count, DType type,
                          ReduceOp op) override {
        // Gloo's new-style API has no reduce-scatter: reduce the whole buffer (ring
        // allreduce moves 2(n-1)/n of it, against (n-1)/n for a ring reduce-scatter) and keep
        // this rank's part. Correct for every size; the cost is one extra pass.
        std::size_t bytes = 0, total = 0;
        if (__builtin_mul_overflow(count, dtype_size(type), &bytes) ||
            __builtin_mul_overflow(bytes, static_cast<std::size_t>(ctx_->size), &total))
            return make_error("reduce_scatter: " + std::to_string(count) + " elements per rank x " +
                              std::to_string(ctx_->size) + " ranks overflow the address space");
        try {
            scratch_.resize(total);
        } catch (const std::exception &) {  // bad_alloc, or length_error past max_size()
            return make_error("reduce_scatter: out of memory for " + std::to_string(total) + " bytes");
        }
        std::memcpy(scratch_.data(), send, scratch_.size());
        if (auto st = allreduce(scratch_.data(), count * static_cast<std::size_t>(ctx_->size), type, op); !st)
            return make_error("reduce_scatter: " + st.error());
        std::memcpy(recv, scratch_.data() + static_cast<std::size_t>(ctx_->rank) * bytes, bytes);
        return Status::success();
    }

    Status barrier() override {
        return run("barrier", [&] {
            gloo::BarrierOptions o(ctx_);
            o.setTag(next_tag());
            o.setTimeout(timeout_);
            gloo::barrier(o);
        });
    }

    Status exchange(const std::vector<PeerSend> &sends,
                    const std::vector<PeerRecv> &recvs) override {
        for (const auto &s : sends)
            if (s.peer < 0 || s.peer >= ctx_->size || s.peer == ctx_->rank)
                return make_error("exchange: cannot send to rank " + std::to_string(s.peer) +
                                  " from rank " + std::to_string(ctx_->rank) + " of " +
                                  std::to_string(ctx_->size));
        for (const auto &r : recvs)
            if (r.peer < 0 || r.peer >= ctx_->size || r.peer == ctx_->rank)
                return make_error("exchange: cannot receive from rank " + std::to_string(r.peer) +
                                  " at rank " + std::to_string(ctx_->rank) + " of " +
                                  std::to_string(ctx_->size));
        // One tag per call (tags advance on every rank alike, see exchange()'s contract), plus
        // the lane; the pair of ranks tells the rest apart.
        const std::uint32_t tag = next_tag();
        const gloo::Slot data = gloo::Slot::build(kExchangeSlotPrefix, tag);
        const gloo::Slot acks = gloo::Slot::build(kAckSlotPrefix, tag);
        const gloo::Slot retry = gloo::Slot::build(kRetrySlotPrefix, tag);
        return run("exchange", [&] {
            using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;
            // A same-host pair moves a descriptor instead of the data: the receiver copies
            // from the sender's memory and answers with an ack (0: copied; 1: the kernel
            // refused, send it over TCP after all). The sender's buffer is untouched until
            // the ack, as the contract requires anyway.
            struct Descriptor {
                std::uint64_t addr = 0, bytes = 0;
            };
            std::vector<Buffer> in, out, ctl;
            std::vector<Descriptor> desc_in(recvs.size()), desc_out(sends.size());
            std::vector<std::uint64_t> ack_in(sends.size()), ack_out(recvs.size());
            std::vector<Buffer> desc_bufs(recvs.size()), ack_bufs(sends.size());
            // 1. Post everything that waits for nobody: receives first, so that data arriving
            // early lands in place instead of waiting.
            for (std::size_t i = 0; i < recvs.size(); ++i) {
                const PeerRecv &r = recvs[i];
                if (!r.bytes) continue;
                if (reads_from(r.peer)) {
                    desc_bufs[i] = ctx_->createUnboundBuffer(&desc_in[i], sizeof(Descriptor));
                    desc_bufs[i]->recv(r.peer, data + r.lane);
                } else {
                    in.push_back(ctx_->createUnboundBuffer(r.data, r.bytes));
                    in.back()->recv(r.peer, data + r.lane);
                }
            }
            for (std::size_t i = 0; i < sends.size(); ++i) {
                const PeerSend &s = sends[i];
                if (!s.bytes) continue;
                if (read_by(s.peer)) {
                    desc_out[i] = {reinterpret_cast<std::uintptr_t>(s.data), s.bytes};
                    out.push_back(ctx_->createUnboundBuffer(&desc_out[i], sizeof(Descriptor)));
                    out.back()->send(s.peer, data + s.lane);
                    ack_bufs[i] = ctx_->createUnboundBuffer(&ack_in[i], sizeof ack_in[i]);
                    ack_bufs[i]->recv(s.peer, acks + s.lane);
                } else {
                    // Gloo's buffers are not const; a send only reads.
                    out.push_back(ctx_->createUnboundBuffer(const_cast<void *>(s.data), s.bytes));
                    out.back()->send(s.peer, data + s.lane);
                }
            }
            // 2. Same-host copies: waits only for descriptors, which every peer posted in 1.
            for (std::size_t i = 0; i < recvs.size(); ++i) {
                if (!desc_bufs[i]) continue;
                const PeerRecv &r = recvs[i];
                if (!desc_bufs[i]->waitRecv(timeout_)) throw std::runtime_error("receive aborted");
                const Descriptor &d = desc_in[i];
                if (d.bytes != r.bytes)
                    throw std::runtime_error("rank " + std::to_string(r.peer) + " offers " +
                                             std::to_string(d.bytes) + " bytes on lane " +
                                             std::to_string(r.lane) + ", this rank expects " +
                                             std::to_string(r.bytes));
                Status st = fail_reads_ ? make_error("same-host copy disabled for testing")
                                        : read_from_process(records_[static_cast<std::size_t>(r.peer)].pid,
                                                            r.data, d.addr, r.bytes);
                ack_out[i] = st ? 0 : 1;
                if (!st) {
                    note_refused(r.peer, st.error());
                    in.push_back(ctx_->createUnboundBuffer(r.data, r.bytes));
                    in.back()->recv(r.peer, retry + r.lane);
                }
                ctl.push_back(ctx_->createUnboundBuffer(&ack_out[i], sizeof ack_out[i]));
                ctl.back()->send(r.peer, acks + r.lane);
            }
            // 3. Acks: receivers sent them in 2. A refused copy goes over TCP now.
            for (std::size_t i = 0; i < sends.size(); ++i) {
                if (!ack_bufs[i]) continue;
                if (!ack_bufs[i]->waitRecv(timeout_)) throw std::runtime_error("receive aborted");
                if (ack_in[i] == 0) continue;
                const PeerSend &s = sends[i];
                out.push_back(ctx_->createUnboundBuffer(const_cast<void *>(s.data), s.bytes));
                out.back()->send(s.peer, retry + s.lane);
            }
            // 4. Everything else.
            for (auto &b : in)
                if (!b->waitRecv(timeout_)) throw std::runtime_error("receive aborted");
            for (auto &b : out)
                if (!b->waitSend(timeout_)) throw std::runtime_error("send aborted");
            for (auto &b : ctl)
                if (!b->waitSend(timeout_)) throw std::runtime_error("send aborted");
        });
    }

    // Shuts the pairs' sockets down (pair_sockets.h): Gloo's loop reads end-of-file on each
    // and fails every operation pending on it, here and at the peer.
    void abort() override {
        if (!pair_sockets_.empty()) (void)shutdown_sockets(pair_sockets_);
    }
    void set_pair_sockets(std::set<ino_t> s) { pair_sockets_ = std::move(s); }

    // The build is over: the loop may idle again (see LoopWaker).
    void built() { waker_->stop(); }

    int same_host_peers() const override {
        return static_cast<int>(std::count(reads_from_.begin(), reads_from_.end(), true));
    }

    // Collective, once after the rendezvous: which peers share this kernel and may be read
    // from (same_host.h). Every rank takes part whatever its options; one that offers no
    // same-host copies publishes an empty record. Learns nothing when it fails: TCP only.
    Status learn_same_host(bool enabled) {
        const auto n = static_cast<std::size_t>(ctx_->size);
        reads_from_.assign(n, false);
        read_by_.assign(n, false);
        if (n < 2) return Status::success();
        std::random_device rd;
        nonce_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
        HostRecord mine = enabled ? local_host_record(&nonce_) : HostRecord{};
        std::vector<HostRecord> all(n);
        if (auto st = allgather_bytes(&mine, all.data(), sizeof mine); !st) return st;
        const std::size_t row = (n + 7) / 8;
        std::vector<std::uint8_t> probed(row), rows(row * n);
        for (std::size_t p = 0; p < n; ++p) {
            if (p == static_cast<std::size_t>(ctx_->rank) || !same_kernel(mine, all[p])) continue;
            if (auto st = probe_peer(all[p]); st) {
                probed[p / 8] |= static_cast<std::uint8_t>(1u << (p % 8));
            } else {
                // Typically Yama's ptrace_scope or a non-dumpable process: TCP is correct,
                // only slower, and an admin may want to know why. Once per process.
                static std::atomic<bool> said{false};
                if (!said.exchange(true))
                    log_line(LogLevel::Info, "libomni",
                             "ranks on this host cannot copy from each other (" + st.error() +
                                 "): the state hand-off between them goes over TCP (OMNI_SAME_HOST_COPY in libomni(3))");
            }
        }
        if (auto st = allgather_bytes(probed.data(), rows.data(), row); !st) return st;
        const auto me = static_cast<std::size_t>(ctx_->rank);
        for (std::size_t p = 0; p < n; ++p) {
            reads_from_[p] = probed[p / 8] & (1u << (p % 8));
            read_by_[p] = rows[p * row + me / 8] & (1u << (me % 8));
        }
        records_ = std::move(all);
        return Status::success();
    }

private:
    // Slot prefix of exchange(): above Gloo's own collective prefixes (0x01..0x08).
    static constexpr std::uint8_t kExchangeSlotPrefix = 0x40;
    static constexpr std::uint8_t kAckSlotPrefix = 0x41;    // same-host copy done / refused
    static constexpr std::uint8_t kRetrySlotPrefix = 0x42;  // a refused copy, over TCP

    bool reads_from(int peer) const { return static_cast<std::size_t>(peer) < reads_from_.size() && reads_from_[static_cast<std::size_t>(peer)]; }
    bool read_by(int peer) const { return static_cast<std::size_t>(peer) < read_by_.size() && read_by_[static_cast<std::size_t>(peer)]; }
    // A copy the kernel refused after the probe allowed it (the peer's credentials changed,
    // or it is going away) falls back to TCP for that transfer; said once per peer. Both
    // sides keep the same-host protocol (the sender cannot know before the ack).
    void note_refused(int peer, const std::string &why) {
        if (fail_reads_ || warned_.count(peer)) return;
        warned_.insert(peer);
        log_line(LogLevel::Warning, "libomni", "same-host copy from rank " + std::to_string(peer) +
                                                   " refused (" + why + "); that transfer went over TCP");
    }

    template <typename F>
    Status run(const char *what, F &&f) {
        try {
            f();
            return Status::success();
        } catch (const std::exception &e) {
            return make_error(std::string("gloo ") + what + " (rank " + std::to_string(ctx_->rank) +
                              " of " + std::to_string(ctx_->size) + "): " + e.what());
        }
    }

    // Operations run one at a time per communicator; distinct tags keep a late message of
    // one operation from being matched by the next.
    std::uint32_t next_tag() { return tag_++; }

    std::shared_ptr<gloo::Context> ctx_;
    std::shared_ptr<gloo::transport::Device> device_;
    std::unique_ptr<LoopWaker> waker_;
    std::chrono::milliseconds timeout_;
    std::set<ino_t> pair_sockets_;   // what abort() shuts down; empty: abort does nothing
    std::uint32_t tag_ = 1;
    std::vector<char> scratch_;
    bool fail_reads_ = false;
    std::uint64_t nonce_ = 0;                 // the probe word of this rank's HostRecord
    std::vector<HostRecord> records_;         // every rank's, for its pid
    std::vector<bool> reads_from_, read_by_;  // same-host copies from / by each peer
    std::set<int> warned_;
};

// A full mesh from one exchange of pair addresses (make_gloo_communicator(BlobExchange)):
// what connectFullMesh does, with every address published at once. Blob of rank r: for each
// peer p, (u32 p, u32 length, the address of r's pair to p, then that pair's token). The
// pairs are guarded (gloo_guard.h): a connection to r's pair to p must send r's token first,
// which only p learns, through the exchange (authenticated: the coordinator's store over
// CurveZMQ, or a PMIx fence).
class ExchangedContext final : public gloo::Context {
public:
    ExchangedContext(int rank, int size) : gloo::Context(rank, size) {}
    void connect(const std::shared_ptr<gloo::transport::Device> &dev, const BlobExchange &exchange,
                 LoopWaker &waker, std::chrono::milliseconds hold) {
        device_ = dev;
        transportContext_ = make_guarded_context(dev, rank, size);
        transportContext_->setTimeout(getTimeout());
        std::vector<char> mine;
        auto put32 = [&](std::uint32_t v) {
            for (int i = 0; i < 4; ++i) mine.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
        };
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            auto &pair = transportContext_->createPair(p);
            const std::vector<char> a = pair->address().bytes();
            const PairToken t = own_token(*pair);
            put32(static_cast<std::uint32_t>(p));
            put32(static_cast<std::uint32_t>(a.size() + t.size()));
            mine.insert(mine.end(), a.begin(), a.end());
            mine.insert(mine.end(), t.begin(), t.end());
        }
        std::vector<std::vector<char>> all;
        {
            waker.pause(true);  // the exchange waits on peers; the loop needs no turns
            struct Resume {
                LoopWaker &w;
                ~Resume() { w.pause(false); }
            } resume{waker};
            all = exchange(mine);
            if (hold.count() > 0) std::this_thread::sleep_for(hold);
        }
        if (all.size() != static_cast<std::size_t>(size))
            throw std::runtime_error("the exchange returned " + std::to_string(all.size()) + " blobs for " +
                                     std::to_string(size) + " ranks");
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            std::vector<char> a = address_for(all[p], p);
            if (a.size() <= kPairTokenBytes)
                throw std::runtime_error("rank " + std::to_string(p) + "'s address for rank " + std::to_string(rank) +
                                         " has " + std::to_string(a.size()) + " bytes, expected an address and a token");
            PairToken t;
            std::memcpy(t.data(), a.data() + a.size() - kPairTokenBytes, kPairTokenBytes);
            a.resize(a.size() - kPairTokenBytes);
            auto &pair = transportContext_->getPair(p);
            set_peer_token(*pair, t);
            pair->connect(a);
        }
    }

private:
    // The address in peer p's blob of its pair to this rank.
    std::vector<char> address_for(const std::vector<char> &blob, int p) const {
        std::size_t at = 0;
        auto get32 = [&](std::uint32_t &v) {
            if (blob.size() - at < 4) return false;
            v = 0;
            for (int i = 0; i < 4; ++i) v |= std::uint32_t(static_cast<unsigned char>(blob[at + i])) << (8 * i);
            at += 4;
            return true;
        };
        std::uint32_t peer = 0, len = 0;
        while (at < blob.size()) {
            if (!get32(peer) || !get32(len) || blob.size() - at < len) break;
            if (peer == static_cast<std::uint32_t>(rank))
                return std::vector<char>(blob.begin() + at, blob.begin() + at + len);
            at += len;
        }
        throw std::runtime_error("rank " + std::to_string(p) + "'s addresses (" + std::to_string(blob.size()) +
                                 " bytes) hold none for rank " + std::to_string(rank));
    }
};

// The sockets of ctx's pairs (pair_sockets.h): the connected TCP sockets on this rank's
// address that appeared since `before`, one a peer. Any other count (a thread of this process
// opened a socket on that address meanwhile) leaves none: abort() then does nothing and a
// pending operation ends at its timeout, as it did before abort() existed.
std::set<ino_t> pair_sockets_of(gloo::Context &ctx, const std::set<ino_t> &before) {
    if (ctx.size < 2) return {};
    const int peer = ctx.rank == 0 ? 1 : 0;
    const auto *addr = dynamic_cast<const gloo::transport::tcp::Address *>(&ctx.getPair(peer)->address());
    if (!addr) return {};
    std::set<ino_t> fresh;
    for (ino_t i : socket_inodes())
        if (!before.count(i)) fresh.insert(i);
    const sockaddr_storage local = addr->getSockaddr();
    auto mine = connected_tcp_on(fresh, &local);
    if (mine.size() == static_cast<std::size_t>(ctx.size - 1)) return mine;
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
        log_line(LogLevel::Info, "libomni",
                 "found " + std::to_string(mine.size()) + " sockets for " + std::to_string(ctx.size - 1) +
                     " Gloo pairs: a hung peer's collectives end at their timeout, not when it is declared lost");
    return {};
}

// One communicator build: a device, its waker, and `connect(context, waker)`, which makes the
// full mesh; everything else (the waker's life, teardown on failure, the same-host probe) is
// shared by both rendezvous routes.
template <typename Ctx, typename Connect>
Result<std::unique_ptr<Communicator>> build_gloo(int rank, int size, const GlooOptions &options, Connect connect) {
    if (size < 1 || rank < 0 || rank >= size)
        return make_error("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ": expected 0 <= rank < size");
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = options.hostname;
        auto waker = std::make_unique<LoopWaker>();
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto *tcp = dynamic_cast<gloo::transport::tcp::Device *>(device.get());
        if (tcp) waker->attach(*tcp);
        std::shared_ptr<Ctx> ctx;
        std::set<ino_t> before;
        try {
            if (tcp) waker->start();
            ctx = std::make_shared<Ctx>(rank, size);
            ctx->setTimeout(options.timeout);
            before = socket_inodes();
            connect(*ctx, device, *waker);
            // Still waking: the first messages below go over pairs the loop has just
            // started to watch.
        } catch (...) {
            // Tear down (pairs while the waker still runs, then the device's loop).
            ctx.reset();
            LoopWaker::release_device(device, waker);
            throw;
        }
        auto comm = std::make_unique<GlooCommunicator>(ctx, std::move(device), std::move(waker), options);
        comm->set_pair_sockets(pair_sockets_of(*ctx, before));
        auto st = comm->learn_same_host(options.same_host_copy != SameHostCopy::off);
        comm->built();
        if (!st)
            return make_error("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                              ": learning which peers share this host: " + st.error());
        return std::unique_ptr<Communicator>(std::move(comm));
    } catch (const std::exception &e) {
        return make_error("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ": rendezvous on " + options.hostname + " failed: " + e.what());
    }
}

}  // namespace

Result<std::unique_ptr<Communicator>> make_gloo_communicator(gloo::rendezvous::Store &store,
                                                             int rank, int size,
                                                             const GlooOptions &options) {
    // Gloo's connectFullMesh, through the store: each rank sets its blob under its rank
    // number and reads everyone else's (ExchangedContext, so that its pairs are guarded).
    const BlobExchange exchange = [&](const std::vector<char> &mine) {
        store.set(std::to_string(rank), mine);
        std::vector<std::string> keys;
        for (int p = 0; p < size; ++p)
            if (p != rank) keys.push_back(std::to_string(p));
        if (!keys.empty()) store.wait(keys, options.timeout);
        std::vector<std::vector<char>> all(static_cast<std::size_t>(size));
        for (int p = 0; p < size; ++p) all[static_cast<std::size_t>(p)] = p == rank ? mine : store.get(std::to_string(p));
        return all;
    };
    return make_gloo_communicator(exchange, rank, size, options);
}

Result<std::unique_ptr<Communicator>> make_gloo_communicator(const BlobExchange &exchange, int rank,
                                                             int size, const GlooOptions &options) {
    return build_gloo<ExchangedContext>(
        rank, size, options,
        [&](ExchangedContext &ctx, std::shared_ptr<gloo::transport::Device> &dev, LoopWaker &waker) {
            ctx.connect(dev, exchange, waker, options.hold_before_connect);
        });
}

}  // namespace omni::launcher
