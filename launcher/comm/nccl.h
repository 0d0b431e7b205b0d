// NCCL backend of the communicator (built when configure found CUDA + NCCL: HAVE_NCCL).
// Beyond the common interface it can shrink in place, where the NCCL in use has
// ncclCommShrink (2.27+): a planned shrink keeps the survivors' communicator without a new
// rendezvous, and with `abort_ops` it first terminates operations stuck on a dead peer.
#ifndef OMNI_LAUNCHER_COMM_NCCL_H
#define OMNI_LAUNCHER_COMM_NCCL_H

#include <vector>

#include "comm/comm.h"

namespace omni::launcher {

#ifdef HAVE_NCCL
class NcclCommunicator : public Communicator {
public:
    // A new communicator of the ranks not in `exclude` (old rank numbers), numbered in old
    // order; this object is left unusable. Called by every surviving rank. Without
    // ncclCommShrink in the running library the error says so, and the caller falls back to
    // aborting and a fresh init with a new unique id.
    virtual Result<std::unique_ptr<Communicator>> shrink(const std::vector<int> &exclude,
                                                         bool abort_ops) = 0;
    // Ends every operation in flight (a peer died) and frees the communicator.
    virtual void abort() = 0;
    // Operations go on this CUDA stream (a cudaStream_t of this rank's device) from now on,
    // after the work the trainer already queued there; null: the communicator's own stream.
    // Every call still returns once its operation is complete.
    virtual void use_stream(void *cuda_stream) = 0;
};

// True when the running NCCL exports ncclCommShrink / ncclCommGrow.
bool nccl_has_shrink();
bool nccl_has_grow();
// An error when the NCCL loaded at run time cannot serve this build (another major version,
// or older than 2.14); make_nccl_communicator calls it. Logs the versions once.
Status check_runtime_version();
#endif

}  // namespace omni::launcher

#endif
