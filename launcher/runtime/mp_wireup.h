// How a unit's model-parallel group meets, without the coordinator: a unit is one srun step,
// one PMIx namespace, and its ranks exchange their Gloo pair addresses through PMIx.
//
// pmix_exchange() is the one collective step of that wire-up: every member of the group puts
// its blob under `key` (PMIx_Put, PMIx_Commit), fences the group's processes with data
// collection (PMIx_Fence over them, PMIX_COLLECT_DATA), and reads every member's blob
// (PMIx_Get). One fence, because Gloo's full mesh is built from one exchange of all its pair
// addresses (comm.h, make_gloo_communicator(BlobExchange)) instead of through a store that
// needs a fence per write (Gloo's ranks write and read in different orders). By default
// (OMNI_MP_WIREUP=auto) the runtime takes this path only for a group on one node: Slurm
// 22.05.8's mpi/pmix with OpenPMIx 4.2 loses fences between nodes when a job's steps run on
// different nodes (one step per unit). Its step daemons get collectives of procs they do not
// hold ("No process controlled by this slurmstepd is involved", ring fences) or send to a
// node where the step has no socket ("Cannot send message to .../stepd.slurm.pmix.J.S", tree
// fences, SLURM_PMIX_FENCE=tree), and the fence hangs. This holds with every node its own
// host (omni-cluster --hosts netns), so it is not the shared host of the test clusters. A
// group across nodes meets through the coordinator; OMNI_MP_WIREUP=pmix tries PMIx there.
//
// BroadcastStore serves a store user in which rank 0 sets a key once and every other rank
// gets it once (make_nccl_communicator's unique id) over an existing communicator: set() on
// rank 0 and get() elsewhere are one broadcast. It reports failures as gloo::IoException, as
// Gloo's stores do (caught by the runtime).
#ifndef OMNI_LAUNCHER_RUNTIME_MP_WIREUP_H
#define OMNI_LAUNCHER_RUNTIME_MP_WIREUP_H

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/comm.h"

namespace omni::launcher {

// `procs`: the PMIx ranks of the group in `nspace`, in group order, this process among them.
// Returns their blobs in that order; throws std::runtime_error naming the PMIx call that
// failed. Every member must call it once with the same key.
std::vector<std::vector<char>> pmix_exchange(const std::string &nspace, const std::vector<std::uint32_t> &procs,
                                             const std::string &key, const std::vector<char> &blob,
                                             std::chrono::milliseconds timeout);

class BroadcastStore : public gloo::rendezvous::Store {
public:
    // `comm` must outlive the store; at most `max_bytes` per value.
    BroadcastStore(Communicator &comm, std::size_t max_bytes) : comm_(comm), max_(max_bytes) {}
    void set(const std::string &key, const std::vector<char> &data) override;
    std::vector<char> get(const std::string &key) override;
    void wait(const std::vector<std::string> &) override {}

private:
    Communicator &comm_;
    std::size_t max_;
};

}  // namespace omni::launcher

#endif
