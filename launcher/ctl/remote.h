// omni-ctl --job J: asking a job's coordinator from outside the job (a login node).
//
// The coordinator's address and secret live in the job's private directory on its batch host,
// readable by the job's owner only. omni-ctl therefore runs itself as a short step of the job
// on that host (srun --jobid=J --overlap) that reads them and hands them back through srun's
// output, so that Slurm's own authentication decides who may ask: the job's owner may; root
// acts as the owner (through runuser, since Slurm 22.05 lets no one else create a step in a
// job); anyone else is refused before srun is tried. The request itself then goes to the
// coordinator directly: a step that stayed for it would hold a CPU of the job, which a grow
// inside the allocation may need.
#ifndef OMNI_LAUNCHER_CTL_REMOTE_H
#define OMNI_LAUNCHER_CTL_REMOTE_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

struct RemoteCall {
    std::uint32_t job_id = 0;
    std::string batch_host;            // where omni-launch and the job directory are
    std::string job_user;              // the job's owner
    std::uint32_t job_uid = 0;
    std::string cluster;               // ClusterName (part of the job directory's name)
    std::uint32_t caller_uid = 0;
    std::string self;                  // omni-ctl's absolute path
};

// The option of the step's omni-ctl: print the coordinator's endpoint and the secret, one
// line each, as locate_coordinator finds them in --job-dir.
inline constexpr const char *kPrintCoordinatorOption = "--print-coordinator";

// The command that runs `self --print-coordinator --job-dir DIR` as a step of the job on its
// batch host:
//   [runuser -u USER --] srun --jobid=J --overlap --nodes=1 --ntasks=1 --nodelist=HOST
//   --job-name=omni-ctl --quiet SELF --print-coordinator --job-dir /tmp/omni-UID/job-CLUSTER-J
// Refuses a caller who is neither the job's owner nor root, naming the owner.
Result<std::vector<std::string>> remote_argv(const RemoteCall &call);

// The step's output back into an endpoint and a secret (not yet validated).
Result<std::pair<std::string, std::string>> parse_printed_coordinator(const std::string &out);

}  // namespace omni::launcher

#endif
