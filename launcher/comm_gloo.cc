// Gloo backend of the communicator: TCP, host buffers. Gloo reports failures by throwing
// gloo::Exception; every entry point here turns that into an omni::Status.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <exception>
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

class GlooCommunicator final : public Communicator {
public:
    GlooCommunicator(std::shared_ptr<gloo::Context> ctx, std::chrono::milliseconds timeout)
        : ctx_(std::move(ctx)), timeout_(timeout) {}

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

private:
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
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        ctx->setTimeout(options.timeout);
        ctx->connectFullMesh(store, device);
        return std::unique_ptr<Communicator>(new GlooCommunicator(ctx, options.timeout));
    } catch (const std::exception &e) {
        return make_error("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ": rendezvous on " + options.hostname + " failed: " + e.what());
    }
}

}  // namespace omni::launcher
