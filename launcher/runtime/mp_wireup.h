// How a unit's model-parallel group meets, without the coordinator: a unit is one srun step,
// one PMIx namespace, and its ranks exchange their Gloo pair addresses through PMIx.
//
// pmix_exchange() is the one collective step of that wire-up: every member of the group puts
// its blob under `key` (PMIx_Put, PMIx_Commit), fences with data collection (PMIx_Fence,
// PMIX_COLLECT_DATA), and reads every member's blob (PMIx_Get). One fence, because Gloo's full
// mesh is built from one exchange of all its pair addresses (comm.h,
// make_gloo_communicator(BlobExchange)) instead of through a store that needs a fence per
// write (Gloo's ranks write and read in different orders).
//
// Which processes the fence names (FenceScope): a group whose unit sits on one node fences
// just the group's ranks, which the node's PMIx server completes alone. A unit across nodes
// fences its whole namespace (PMIX_RANK_WILDCARD), every rank of the unit at once, each
// reading only its own group's blobs: Slurm's mpi/pmix (22.05 through 25.11) packs a fence's
// process list for the other nodes as the first process repeated (`procs->` in
// _pack_coll_ring_info and _pack_coll_info, src/plugins/mpi/pmix/pmixp_coll_{ring,tree}.c),
// so a fence naming ranks on several nodes reaches step daemons that hold none of them ("No
// process controlled by this slurmstepd is involved in this collective") and hangs; a
// wildcard fence packs as itself and completes.
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

enum class FenceScope {
    group,      // the fence names `procs`: only for ranks that share this node
    namespace_  // the fence names every rank of `nspace`, and every one of them must call
};

// `procs`: the PMIx ranks of the group in `nspace`, in group order, this process among them.
// Returns their blobs in that order; throws std::runtime_error naming the PMIx call that
// failed. Every member must call it once with the same key; with FenceScope::namespace_ every
// process of the namespace calls it at once (each with its own group and key).
std::vector<std::vector<char>> pmix_exchange(const std::string &nspace, const std::vector<std::uint32_t> &procs,
                                             const std::string &key, const std::vector<char> &blob,
                                             std::chrono::milliseconds timeout, FenceScope scope);

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
