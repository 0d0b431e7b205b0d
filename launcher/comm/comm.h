// The data-parallel communicator: one interface over Gloo (CPU, TCP) and NCCL (GPU), so that
// trainer code is the same for both. One communicator lives for one generation; a resize
// builds the next one (or shrinks/grows this one where NCCL can).
//
// Buffers: host memory for Gloo; device memory for NCCL, ordered on the communicator's CUDA
// stream. Every call is collective: all ranks of the generation make the same calls in the
// same order with the same counts. Errors (a peer that died, a timeout) come back as
// omni::Status naming the operation; nothing throws out of this interface.
#ifndef OMNI_LAUNCHER_COMM_H
#define OMNI_LAUNCHER_COMM_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.h"  // HAVE_NCCL
#include "omni/result.h"

namespace gloo::rendezvous {
class Store;
}

namespace omni::launcher {

// i64 is for exact sums (fixed-point gradients, counters): allreduce and reduce_scatter take
// ReduceOp::sum only with it.
enum class DType { fp32, bf16, i64 };
enum class ReduceOp { sum, avg };

// One point-to-point transfer of exchange(): `bytes` bytes to or from rank `peer`. Several
// transfers between the same two ranks in one call are told apart by `lane`: a send and the
// receive it fills name the same lane.
struct PeerSend {
    int peer = 0;
    const void *data = nullptr;
    std::size_t bytes = 0;
    std::uint8_t lane = 0;
};
struct PeerRecv {
    int peer = 0;
    void *data = nullptr;
    std::size_t bytes = 0;
    std::uint8_t lane = 0;
};

std::size_t dtype_size(DType t);

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char *backend() const = 0;  // "gloo" or "nccl"

    // In place: every rank ends with the element-wise sum (or mean) of all ranks' `buf`.
    virtual Status allreduce(void *buf, std::size_t count, DType type, ReduceOp op) = 0;
    // `buf` of rank `root` copied to every rank.
    virtual Status broadcast(void *buf, std::size_t count, DType type, int root) = 0;
    // recv[r * count .. (r+1) * count) = rank r's send; recv holds size() * count elements.
    virtual Status allgather(const void *send, void *recv, std::size_t count, DType type) = 0;
    // send holds size() * count elements; rank r receives the reduction of every rank's
    // send[r * count .. (r+1) * count).
    virtual Status reduce_scatter(const void *send, void *recv, std::size_t count, DType type,
                                  ReduceOp op) = 0;
    // Blocks until every rank has arrived.
    virtual Status barrier() = 0;
    // Point-to-point: posts every send and every receive at once, then waits for all of them
    // (so a rank may send to and receive from the same peer without deadlock). Collective in
    // call order only: every rank makes the same number of exchange() calls, with empty lists
    // where it has nothing to move; nothing synchronises ranks that move nothing. Each
    // (sender, receiver, lane) appears at most once per call, both sides agree on its size and
    // post a pair's lanes in the same order, and a rank never names itself (it copies
    // locally). Buffers stay untouched by the caller until the call returns.
    virtual Status exchange(const std::vector<PeerSend> &sends,
                            const std::vector<PeerRecv> &recvs) = 0;
    // How many peers exchange() reads from with a same-host copy (see SameHostCopy).
    virtual int same_host_peers() const { return 0; }
    // From any thread, while another may be inside an operation: makes the pending
    // operation and every later one fail at once, and closes the connections so that the
    // peers' operations fail too. For leaving a generation whose member hangs (stopped, not
    // dead: its sockets stay open, so nothing else would fail before the timeout). The
    // object must stay alive until the call returns. Gloo does this; NCCL and the single-rank
    // communicator ignore it (an NCCL communicator is aborted by the rewind itself).
    virtual void abort() {}
};

// exchange() between ranks on one kernel: the receiver copies from the sender's memory
// (same_host.h) where the kernel allows it, else TCP. `failing` is for tests: every such copy
// is refused, as a kernel would, so that the TCP fallback runs.
enum class SameHostCopy { on, off, failing };

struct GlooOptions {
    std::string hostname = "127.0.0.1";  // address this rank listens on (a job node address)
    std::chrono::milliseconds timeout{30000};  // per operation, and for the rendezvous
    SameHostCopy same_host_copy = SameHostCopy::on;
    // For tests of the pairs' guard (comm/gloo_guard.h): every pair keeps listening this long
    // after the rendezvous, before any connects, so that an attack can reach each listener.
    std::chrono::milliseconds hold_before_connect{0};
};

// Connects `size` ranks through `store` (keys as the store's owner prefixes them, e.g. per
// generation) over Gloo's TCP transport.
Result<std::unique_ptr<Communicator>> make_gloo_communicator(gloo::rendezvous::Store &store,
                                                             int rank, int size,
                                                             const GlooOptions &options);

// The same over one all-to-all exchange instead of a store: `exchange` is called once with
// this rank's blob (the addresses of its pairs to every peer) and returns every rank's blob,
// indexed by rank (this rank's own included). So a rendezvous medium that can do one
// collective exchange and nothing else (a PMIx fence with data collection) is enough. It
// reports failure by throwing std::exception.
using BlobExchange = std::function<std::vector<std::vector<char>>(const std::vector<char> &)>;
Result<std::unique_ptr<Communicator>> make_gloo_communicator(const BlobExchange &exchange, int rank,
                                                             int size, const GlooOptions &options);

#ifdef HAVE_NCCL
// NCCL, built when configure found CUDA and NCCL (HAVE_NCCL). See comm/nccl.cc.
struct NcclOptions {
    int device = 0;                            // CUDA device of this rank
    std::chrono::milliseconds timeout{60000};  // non-blocking init gives up after this
};
// Rank 0 creates the unique id and publishes it in `store` under `key`; the others read it.
// `parent`: on a pure grow, this rank's NCCL communicator of the previous generation, in
// which it has the same rank (null for joiners and for any other change). When rank 0 has
// one and the running NCCL has ncclCommGrow (2.29+), the communicator is grown from it:
// existing ranks keep their connections, joiners are added; otherwise every rank makes a
// fresh one (ncclCommInitRankConfig). The parent stays the caller's, idle, to be destroyed
// after this returns.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(gloo::rendezvous::Store &store,
                                                             const std::string &key, int rank,
                                                             int size, const NcclOptions &options,
                                                             Communicator *parent = nullptr);
// The NCCL version this process runs with (ncclGetVersion), e.g. 22809, and the one it was
// built against (NCCL_VERSION_CODE).
int nccl_runtime_version();
int nccl_build_version();
#endif

}  // namespace omni::launcher

#endif
