// NCCL backend: device buffers, one CUDA stream per communicator, non-blocking NCCL calls
// polled with a timeout so that a dead peer turns into an error instead of a hang.
//
// Version handling: the headers decide what can be compiled (NCCL_VERSION_CODE), the library
// loaded at run time decides what can be called (ncclGetVersion, and dlsym for the calls
// that arrived after the oldest NCCL we run with), so one build serves clusters whose NCCL
// is newer or older than the build machine's.
#include "config.h"

#ifdef HAVE_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/nccl.h"
#include "coord/log.h"
#include <gloo/rendezvous/store.h>

// Non-blocking communicators (ncclConfig_t.blocking) and ncclCommFinalize arrived in 2.14.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 21400
#error "slurm-omni's NCCL backend needs NCCL 2.14 or newer headers (configure --without-cuda to build without it)"
#endif

// ncclCommShrink's flags arrived with it in 2.27; this build may use older headers and still
// call ncclCommShrink where the library loaded at run time has it (found with dlsym).
#ifndef NCCL_SHRINK_DEFAULT
#define NCCL_SHRINK_DEFAULT 0x00
#endif
#ifndef NCCL_SHRINK_ABORT
#define NCCL_SHRINK_ABORT 0x01
#endif

namespace omni::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's own status codes carried up with the call that failed, as NCCLCHECK does.
#define OMNI_NCCL_TRY(call)                                                               \
    do {                                                                                  \
        ncclResult_t r_ = (call);                                                         \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                                    \
            return make_error(std::string(#call) + ": " + ncclGetErrorString(r_));        \
    } while (0)

#define OMNI_CUDA_TRY(call)                                                               \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) return make_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
    } while (0)

ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::fp32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        case DType::i64: return ncclInt64;
    }
    return ncclFloat32;
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclAvg; }

using ShrinkFn = ncclResult_t (*)(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);

ShrinkFn shrink_fn() {
    static ShrinkFn fn = reinterpret_cast<ShrinkFn>(dlsym(RTLD_DEFAULT, "ncclCommShrink"));
    return fn;
}

// ncclCommGrow and ncclCommGetUniqueId (NCCL 2.29+), declared here so that this builds
// against older headers: existing ranks pass their communicator (the root also the id it got
// from ncclCommGetUniqueId) and rank -1; joiners no communicator, the id and their rank.
using GrowFn = ncclResult_t (*)(ncclComm_t, int, const ncclUniqueId *, int, ncclComm_t *, ncclConfig_t *);
using CommIdFn = ncclResult_t (*)(ncclComm_t, ncclUniqueId *);
struct GrowFns {
    GrowFn grow = nullptr;
    CommIdFn id = nullptr;
};
const GrowFns *grow_fns() {
    static const GrowFns fns{reinterpret_cast<GrowFn>(dlsym(RTLD_DEFAULT, "ncclCommGrow")),
                             reinterpret_cast<CommIdFn>(dlsym(RTLD_DEFAULT, "ncclCommGetUniqueId"))};
    return fns.grow && fns.id ? &fns : nullptr;
}

// Waits for a non-blocking communicator to leave ncclInProgress.
Status wait_ready(ncclComm_t comm, std::chrono::milliseconds timeout, const char *what) {
    const auto deadline = Clock::now() + timeout;
    ncclResult_t state = ncclInProgress;
    while (true) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
        if (state != ncclInProgress) break;
        if (Clock::now() > deadline)
            return make_error(std::string(what) + ": no progress within " +
                              std::to_string(timeout.count()) + " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (state != ncclSuccess) return make_error(std::string(what) + ": " + ncclGetErrorString(state));
    return Status::success();
}

class Nccl final : public NcclCommunicator {
public:
    Nccl(ncclComm_t comm, cudaStream_t stream, int rank, int size, NcclOptions o)
        : comm_(comm), stream_(stream), rank_(rank), size_(size), opts_(o) {}
    ~Nccl() override {
        if (comm_) {
            ncclCommFinalize(comm_);
            if (wait_ready(comm_, opts_.timeout, "ncclCommFinalize")) ncclCommDestroy(comm_);
            else ncclCommAbort(comm_);
        }
        if (stream_) cudaStreamDestroy(stream_);
        // The barrier's word lives on this communicator's device, which need not be the
        // thread's current one when the communicator goes.
        if (scratch_) {
            int current = -1;
            const bool switched = cudaGetDevice(&current) == cudaSuccess && current != opts_.device &&
                                  cudaSetDevice(opts_.device) == cudaSuccess;
            cudaFree(scratch_);
            if (switched) cudaSetDevice(current);
        }
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char *backend() const override { return "nccl"; }
    ncclComm_t handle() const { return comm_; }

    Status allreduce(void *buf, std::size_t count, DType t, ReduceOp op) override {
        if (auto st = usable(); !st) return st;
        if (t == DType::i64 && op != ReduceOp::sum) return make_error("ncclAllReduce: i64 buffers take sum only");
        OMNI_NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), comm_, active()));
        return complete("ncclAllReduce");
    }
    Status broadcast(void *buf, std::size_t count, DType t, int root) override {
        if (auto st = usable(); !st) return st;
        if (root < 0 || root >= size_) return make_error("broadcast: root " + std::to_string(root) + " out of range");
        OMNI_NCCL_TRY(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, active()));
        return complete("ncclBroadcast");
    }
    Status allgather(const void *send, void *recv, std::size_t count, DType t) override {
        if (auto st = usable(); !st) return st;
        OMNI_NCCL_TRY(ncclAllGather(send, recv, count, nccl_type(t), comm_, active()));
        return complete("ncclAllGather");
    }
    Status reduce_scatter(const void *send, void *recv, std::size_t count, DType t,
                          ReduceOp op) override {
        if (auto st = usable(); !st) return st;
        OMNI_NCCL_TRY(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), comm_, active()));
        return complete("ncclReduceScatter");
    }
    Status barrier() override {
        // NCCL has no barrier: a one-element allreduce on a scratch device word is one. The
        // word is made on the communicator's device, zeroed so the sum stays finite.
        if (auto st = usable(); !st) return st;
        if (!scratch_) {
            int current = -1;
            OMNI_CUDA_TRY(cudaGetDevice(&current));
            if (current != opts_.device) OMNI_CUDA_TRY(cudaSetDevice(opts_.device));
            cudaError_t e = cudaMalloc(&scratch_, sizeof(float));
            if (e == cudaSuccess) e = cudaMemset(scratch_, 0, sizeof(float));
            if (current != opts_.device) cudaSetDevice(current);
            if (e != cudaSuccess) return make_error(std::string("barrier: cudaMalloc: ") + cudaGetErrorString(e));
        }
        return allreduce(scratch_, 1, DType::fp32, ReduceOp::sum);
    }

    Status exchange(const std::vector<PeerSend> &sends,
                    const std::vector<PeerRecv> &recvs) override {
        if (auto st = usable(); !st) return st;
        for (const auto &s : sends)
            if (s.peer < 0 || s.peer >= size_ || s.peer == rank_)
                return make_error("exchange: cannot send to rank " + std::to_string(s.peer));
        for (const auto &r : recvs)
            if (r.peer < 0 || r.peer >= size_ || r.peer == rank_)
                return make_error("exchange: cannot receive from rank " + std::to_string(r.peer));
        if (sends.empty() && recvs.empty()) return Status::success();
        // One group: NCCL schedules the sends and receives together, so pairs that send to
        // each other cannot deadlock.
        // The group is closed whatever fails inside it.
        auto failed = [](ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; };
        OMNI_NCCL_TRY(ncclGroupStart());
        ncclResult_t r = ncclSuccess;
        for (const auto &in : recvs)
            if (in.bytes && !failed(r)) r = ncclRecv(in.data, in.bytes, ncclUint8, in.peer, comm_, active());
        for (const auto &out : sends)
            if (out.bytes && !failed(r)) r = ncclSend(out.data, out.bytes, ncclUint8, out.peer, comm_, active());
        const ncclResult_t end = ncclGroupEnd();
        if (failed(r)) return make_error(std::string("ncclSend/ncclRecv: ") + ncclGetErrorString(r));
        if (failed(end)) return make_error(std::string("ncclGroupEnd: ") + ncclGetErrorString(end));
        return complete("ncclSend/ncclRecv");
    }

    Result<std::unique_ptr<Communicator>> shrink(const std::vector<int> &exclude, bool abort_ops) override {
        if (auto st = usable(); !st) return Error{st.error()};
        ShrinkFn fn = shrink_fn();
        if (!fn)
            return make_error("ncclCommShrink: not in the NCCL in use (" +
                              std::to_string(nccl_runtime_version()) + "; needs 2.27 or newer)");
        std::vector<int> ex(exclude);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t next = nullptr;
        const ncclResult_t r = fn(comm_, ex.data(), static_cast<int>(ex.size()), &next, &config,
                                  abort_ops ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT);
        if (r != ncclSuccess && r != ncclInProgress)
            return make_error(std::string("ncclCommShrink: ") + ncclGetErrorString(r));
        if (auto st = wait_ready(next, opts_.timeout, "ncclCommShrink"); !st) {
            ncclCommAbort(next);
            return Error{st.error()};
        }
        int new_rank = 0, new_size = 0;
        ncclCommUserRank(next, &new_rank);
        ncclCommCount(next, &new_size);
        // The parent's operations are over (drained or aborted): free it here.
        if (abort_ops) ncclCommAbort(comm_);
        else ncclCommDestroy(comm_);
        comm_ = nullptr;
        cudaStream_t s = stream_;
        stream_ = nullptr;
        auto shrunk = std::make_unique<Nccl>(next, s, new_rank, new_size, opts_);
        shrunk->use_stream(user_);
        return std::unique_ptr<Communicator>(std::move(shrunk));
    }

    void use_stream(void *cuda_stream) override { user_ = static_cast<cudaStream_t>(cuda_stream); }

    void abort() override {
        if (comm_) ncclCommAbort(comm_);
        comm_ = nullptr;
    }

private:
    // After abort() or a shrink the NCCL handle is gone: every call is an error, not a call
    // into NCCL with a null communicator.
    Status usable() const {
        if (!comm_) return make_error("nccl: this communicator was aborted or shrunk; use its successor");
        return Status::success();
    }

    // Waits for the enqueued operation, watching NCCL's async error so that a peer's death or
    // a hang becomes an error within the timeout (the communicator is then to be aborted).
    Status complete(const char *what) {
        const auto deadline = Clock::now() + opts_.timeout;
        while (true) {
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(comm_, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                return make_error(std::string(what) + ": " + ncclGetErrorString(async));
            // On a non-blocking communicator a call may still be ncclInProgress, its kernels
            // not yet on the stream: an idle stream means done only once that has cleared.
            if (async == ncclSuccess) {
                const cudaError_t q = cudaStreamQuery(active());
                if (q == cudaSuccess) return Status::success();
                if (q != cudaErrorNotReady)
                    return make_error(std::string(what) + ": " + cudaGetErrorString(q));
            }
            if (Clock::now() > deadline)
                return make_error(std::string(what) + ": not finished within " +
                                  std::to_string(opts_.timeout.count()) + " ms (a peer may be gone)");
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    ncclComm_t comm_;
    // The communicator's own stream, and the trainer's (use_stream) that replaces it for
    // operations when set; the own one is kept for when the trainer sets none again.
    cudaStream_t stream_;
    cudaStream_t user_ = nullptr;
    cudaStream_t active() const { return user_ ? user_ : stream_; }
    int rank_, size_;
    NcclOptions opts_;
    void *scratch_ = nullptr;
};

}  // namespace

int nccl_build_version() { return NCCL_VERSION_CODE; }

int nccl_runtime_version() {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

bool nccl_has_shrink() { return shrink_fn() != nullptr; }

// The library loaded at run time against the headers built with: the same major version
// (the ABI), 2.14 or newer (non-blocking communicators). Said once per process, with what
// the library offers.
Status check_runtime_version() {
    static const Status verdict = [] {
        const int run = nccl_runtime_version(), built = nccl_build_version();
        auto text = [](int v) {
            return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
        };
        if (run < 21400 || run / 10000 != built / 10000)
            return Status(make_error("nccl: the library loaded is NCCL " + text(run) + ", built against " +
                                     text(built) + ": expected the same major version, 2.14 or newer"));
        log_line(LogLevel::Info, "libomni",
                 "NCCL " + text(run) + " (built against " + text(built) + "); ncclCommShrink " +
                     (nccl_has_shrink() ? "yes" : "no") + ", ncclCommGrow " + (nccl_has_grow() ? "yes" : "no"));
        return Status::success();
    }();
    return verdict;
}
bool nccl_has_grow() { return grow_fns() != nullptr; }

Result<std::unique_ptr<Communicator>> make_nccl_communicator(gloo::rendezvous::Store &store,
                                                             const std::string &key, int rank,
                                                             int size, const NcclOptions &options,
                                                             Communicator *parent) {
    if (size < 1 || rank < 0 || rank >= size)
        return make_error("nccl: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ": expected 0 <= rank < size");
    if (auto st = check_runtime_version(); !st) return Error{st.error()};
    auto *from = dynamic_cast<Nccl *>(parent);
    if (from && !from->handle()) from = nullptr;
    // Rank 0 decides how the communicator is made and publishes it with the id: 'g' grows
    // rank 0's parent (ncclCommGrow; the id comes from ncclCommGetUniqueId on the parent),
    // 'i' is a fresh init. Everyone else follows, so that one rank's view of what its NCCL
    // can do decides for all and a mismatch is an error below rather than a hang.
    char mode = 'i';
    ncclUniqueId id;
    try {
        if (rank == 0) {
            const GrowFns *g = grow_fns();
            if (g && from && from->rank() == 0 && from->size() < size) {
                OMNI_NCCL_TRY(g->id(from->handle(), &id));
                mode = 'g';
            } else {
                OMNI_NCCL_TRY(ncclGetUniqueId(&id));
            }
            std::vector<char> v(1 + sizeof id.internal);
            v[0] = mode;
            std::copy(id.internal, id.internal + sizeof id.internal, v.begin() + 1);
            store.set(key, v);
        } else {
            const std::vector<char> v = store.get(key);  // waits, up to the store's timeout
            if (v.size() != 1 + sizeof id.internal || (v[0] != 'g' && v[0] != 'i'))
                return make_error("nccl: the id under '" + key + "' has " + std::to_string(v.size()) +
                                  " bytes; expected a mode ('g' or 'i') and " +
                                  std::to_string(sizeof id.internal) + " bytes of id");
            mode = v[0];
            std::copy(v.begin() + 1, v.end(), id.internal);
        }
    } catch (const std::exception &e) {
        return make_error("nccl: exchanging the unique id under '" + key + "': " + e.what());
    }
    const GrowFns *g = grow_fns();
    if (mode == 'g' && !g)
        return make_error("nccl: rank 0 grows the communicator with ncclCommGrow, which the NCCL "
                          "this rank runs (" + std::to_string(nccl_runtime_version()) + ") lacks");
    if (mode == 'g' && from && from->rank() != rank)
        return make_error("nccl: ncclCommGrow keeps every existing rank's number, but this rank "
                          "goes from " + std::to_string(from->rank()) + " to " + std::to_string(rank));
    OMNI_CUDA_TRY(cudaSetDevice(options.device));
    cudaStream_t stream = nullptr;
    OMNI_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const char *what = mode == 'g' ? "ncclCommGrow" : "ncclCommInitRankConfig";
    ncclResult_t r;
    if (mode == 'i')
        r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    else if (from)  // an existing rank: its parent's number; only the root passes the id
        r = g->grow(from->handle(), size, rank == 0 ? &id : nullptr, -1, &comm, &config);
    else  // a joiner
        r = g->grow(nullptr, size, &id, rank, &comm, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        cudaStreamDestroy(stream);
        return make_error(std::string(what) + ": " + ncclGetErrorString(r));
    }
    if (auto st = wait_ready(comm, options.timeout, what); !st) {
        ncclCommAbort(comm);
        cudaStreamDestroy(stream);
        return Error{st.error()};
    }
    return std::unique_ptr<Communicator>(new Nccl(comm, stream, rank, size, options));
}

}  // namespace omni::launcher

#endif  // HAVE_NCCL
