// Pieces of the runtime that stand in for a cluster: the communicator of a standalone
// single-rank run (no Slurm, no coordinator) and the PMIx session of a rank under srun.
#ifndef OMNI_LAUNCHER_RUNTIME_SOLO_H
#define OMNI_LAUNCHER_RUNTIME_SOLO_H

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "omni/result.h"
#include "runtime/env.h"

namespace omni::launcher {

// A communicator of one rank: every collective is a local copy (or nothing), so a trainer
// runs the same code alone as in a job.
std::unique_ptr<Communicator> make_solo_communicator();

// PMIx, when this process runs under `srun --mpi=pmix` (PMIX_NAMESPACE and PMIX_RANK in the
// environment): PMIx_Init, the rank and the job size (PMIX_JOB_SIZE), PMIx_Finalize when the
// session ends. Without those variables there is no PMIx server to talk to and the identity
// is rank 0 of 1 (from_pmix false).
class PmixSession {
public:
    static Result<std::unique_ptr<PmixSession>> open();
    ~PmixSession();
    PmixSession(const PmixSession &) = delete;
    PmixSession &operator=(const PmixSession &) = delete;
    const ProcessIdentity &identity() const { return id_; }
    const std::string &nspace() const { return nspace_; }  // empty without PMIx
    // The ranks of this namespace on this node (PMIX_LOCAL_PEERS); empty without PMIx or
    // when PMIx does not say.
    std::vector<std::uint32_t> local_peers() const;

private:
    PmixSession() = default;
    ProcessIdentity id_;
    std::string nspace_;
    bool initialised_ = false;
};

}  // namespace omni::launcher

#endif
