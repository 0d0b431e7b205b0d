// Gloo backend of the communicator: TCP, host buffers. Gloo reports failures by throwing
// gloo::Exception; every entry point here turns that into an omni::Status.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

#include "bf16.h"
#include "comm.h"

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
    void handleEvents(int) override {
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

private:
    int fd_;
    std::mutex m_;
    std::condition_variable cv_;
    bool poking_ = false, paused_ = false;
    std::thread poker_;
};

// The rendezvous store as connectFullMesh sees it: the caller's, with the waker paused for
// the duration of every call (see LoopWaker).
class WakingStore final : public gloo::rendezvous::Store {
public:
    WakingStore(gloo::rendezvous::Store &inner, LoopWaker &waker) : inner_(inner), waker_(waker) {}
    void set(const std::string &key, const std::vector<char> &data) override {
        Paused p(waker_);
        inner_.set(key, data);
    }
    std::vector<char> get(const std::string &key) override {
        Paused p(waker_);
        return inner_.get(key);
    }
    void wait(const std::vector<std::string> &keys) override {
        Paused p(waker_);
        inner_.wait(keys);
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
        Paused p(waker_);
        inner_.wait(keys, timeout);
    }

private:
    struct Paused {
        explicit Paused(LoopWaker &w) : w_(w) { w_.pause(true); }
        ~Paused() { w_.pause(false); }
        LoopWaker &w_;
    };
    gloo::rendezvous::Store &inner_;
    LoopWaker &waker_;
};

class GlooCommunicator final : public Communicator {
public:
    GlooCommunicator(std::shared_ptr<gloo::Context> ctx,
                     std::shared_ptr<gloo::transport::Device> device,
                     std::unique_ptr<LoopWaker> waker, std::chrono::milliseconds timeout)
        : ctx_(std::move(ctx)), device_(std::move(device)), waker_(std::move(waker)),
          timeout_(timeout) {}
    ~GlooCommunicator() override {
        waker_->start();
        ctx_.reset();  // closes every pair: one loop turn each
        if (device_.use_count() == 1) {
            device_.reset();  // joins the loop: one more turn
            waker_->stop();
        } else {
            // Someone still holds the device, so its loop may call the waker later: keep
            // the waker alive (a few bytes and one descriptor) rather than risk that.
            waker_->stop();
            (void)waker_.release();
        }
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
        return run("allgather", [&] {
            const std::size_t bytes = count * dtype_size(type);
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
        const std::size_t bytes = count * dtype_size(type);
        try {
            scratch_.resize(bytes * static_cast<std::size_t>(ctx_->size));
        } catch (const std::bad_alloc &) {
            return make_error("reduce_scatter: out of memory for " + std::to_string(scratch_.size()) + " bytes");
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
        // One slot per call (tags advance on every rank alike, see exchange()'s contract),
        // plus the lane; the pair of ranks tells the rest apart.
        const gloo::Slot slot = gloo::Slot::build(kExchangeSlotPrefix, next_tag());
        return run("exchange", [&] {
            std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> out, in;
            // Receives first, so that data arriving early lands in place instead of waiting.
            for (const auto &r : recvs) {
                if (!r.bytes) continue;
                in.push_back(ctx_->createUnboundBuffer(r.data, r.bytes));
                in.back()->recv(r.peer, slot + r.lane);
            }
            for (const auto &s : sends) {
                if (!s.bytes) continue;
                // Gloo's buffers are not const; a send only reads.
                out.push_back(ctx_->createUnboundBuffer(const_cast<void *>(s.data), s.bytes));
                out.back()->send(s.peer, slot + s.lane);
            }
            for (auto &b : in)
                if (!b->waitRecv(timeout_)) throw std::runtime_error("receive aborted");
            for (auto &b : out)
                if (!b->waitSend(timeout_)) throw std::runtime_error("send aborted");
        });
    }

private:
    // Slot prefix of exchange(): above Gloo's own collective prefixes (0x01..0x08).
    static constexpr std::uint8_t kExchangeSlotPrefix = 0x40;

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
    std::uint32_t tag_ = 1;
    std::vector<char> scratch_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_gloo_communicator(gloo::rendezvous::Store &store,
                                                             int rank, int size,
                                                             const GlooOptions &options) {
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
        std::shared_ptr<gloo::rendezvous::Context> ctx;
        try {
            if (tcp) waker->start();
            ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
            ctx->setTimeout(options.timeout);
            WakingStore waking(store, *waker);
            ctx->connectFullMesh(waking, device);
            waker->stop();
        } catch (...) {
            // Tear down (pairs, then the device's loop) while the waker still runs.
            ctx.reset();
            if (device.use_count() == 1) {
                device.reset();
                waker->stop();
            } else {
                waker->stop();
                (void)waker.release();  // see ~GlooCommunicator
            }
            throw;
        }
        return std::unique_ptr<Communicator>(
            new GlooCommunicator(ctx, std::move(device), std::move(waker), options.timeout));
    } catch (const std::exception &e) {
        return make_error("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ": rendezvous on " + options.hostname + " failed: " + e.what());
    }
}

}  // namespace omni::launcher
