// Rendezvous stores for a unit's model-parallel communicators, which never go through the
// coordinator: a unit is one srun step, one PMIx namespace, and its ranks meet through PMIx.
//
// PmixStore is a gloo::rendezvous::Store over PMIx for a group of processes of this
// process's namespace that share this node. set() publishes the pair as this process's PMIx
// data (PMIx_Put of "omni.PREFIX.KEY", PMIx_Commit) and fences the group with data
// collection (PMIx_Fence over the group's processes, PMIX_COLLECT_DATA); get() then reads it
// from the process that set it (PMIx_Get). So every member must call set() the same number
// of times: Gloo's full-mesh rendezvous sets the same keys on every rank ("rank_R", then "R").
// Why a fence in every set(), not one before the first get: Gloo's ranks get in different
// sequences (rank 0 reads no peer's host name, the others every lower rank's). Why one node
// only: between nodes, Slurm 22.05.8's mpi/pmix with OpenPMIx 4.2 lost a second collecting
// fence's data (ring: the fence hung in 3 of 4 jobs; tree: PMIx_Get NOT-FOUND) and answered
// a direct-modex get NOT-FOUND; on one node the server completes the fence itself. A key
// names its owner by its trailing decimal number, the owner's index in the group: Gloo names
// every key after the rank that sets it ("3", "rank_3"). A key without one, or with a number
// outside the group, is an error.
//
// BroadcastStore serves a store user in which rank 0 sets a key once and every other rank
// gets it once (make_nccl_communicator's unique id) over an existing communicator: set() on
// rank 0 and get() elsewhere are one broadcast.
//
// Both report failures as gloo::IoException, as Gloo's stores do (caught by the runtime).
#ifndef OMNI_LAUNCHER_RUNTIME_PMIX_STORE_H
#define OMNI_LAUNCHER_RUNTIME_PMIX_STORE_H

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/comm.h"

namespace omni::launcher {

class PmixStore : public gloo::rendezvous::Store {
public:
    // `procs`: the PMIx ranks of the group's members in `nspace` (this process among them);
    // `prefix` tells this group's keys from other groups' ([A-Za-z0-9._-], at most 64).
    PmixStore(std::string nspace, std::vector<std::uint32_t> procs, std::string prefix,
              std::chrono::milliseconds timeout);

    void set(const std::string &key, const std::vector<char> &data) override;
    std::vector<char> get(const std::string &key) override;
    void wait(const std::vector<std::string> &keys) override;
    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override;

private:
    std::string nspace_;
    std::vector<std::uint32_t> procs_;
    std::string prefix_;
    std::chrono::milliseconds timeout_;
};

// The index in a group of the process that sets `key`: its trailing decimal number, if any.
std::optional<std::size_t> key_owner(const std::string &key);

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
