// spank/: where a task should run, from the site topology file: a pure module (no Slurm, no
// system calls) so that it is unit-tested on real machines' topologies.
#ifndef OMNI_SPANK_BINDING_H
#define OMNI_SPANK_BINDING_H

#include <string>
#include <string_view>
#include <vector>

#include "hal/topofile.h"
#include "omni/result.h"

namespace omni_spank {

// The node-local GPU indexes a task uses, from its CUDA_VISIBLE_DEVICES and the step's (or
// job's) SLURM_STEP_GPUS / SLURM_JOB_GPUS. Without device confinement Slurm puts the node's
// own indexes in CUDA_VISIBLE_DEVICES; with it (ConstrainDevices) it renumbers them 0..k-1 and
// the real ones are in SLURM_*_GPUS, in the same order. With GPUs bound per task
// (--gpus-per-task, --gpu-bind) Slurm narrows SLURM_STEP_GPUS to the task's own GPUs while
// CUDA_VISIBLE_DEVICES keeps their positions in the step: lists of the same length whose
// indexes do not fit the step rule pair up by position. An unset or empty value gives no GPU;
// UUIDs or MIG names give an error (binding then stays Slurm's). `slurm_gpus_name` names the
// variable `slurm_gpus` came from, in errors.
omni::Result<std::vector<unsigned>> task_gpus(std::string_view cuda_visible,
                                              std::string_view slurm_gpus,
                                              std::string_view slurm_gpus_name = "SLURM_STEP_GPUS");

struct Binding {
    std::vector<unsigned> cpus;      // OS CPUs to bind to; empty: keep Slurm's binding
    std::string domain;              // "<kind>:<id>" of the first GPU, e.g. "pcie:1"
    std::vector<std::string> nics;   // closest NICs of the first GPU, best first
    std::vector<std::string> rdma_nics;  // those of them that are RDMA (verbs) devices
    std::vector<std::string> nvmes;  // closest NVMe block devices of the first GPU
    std::string why_unbound;         // when cpus is empty: why, for the log and OMNI_BIND
};

// Binding of a task using `gpus` on `node`: the CPUs of those GPUs' local cores that are among
// the job's allocated cores on this node (`alloc_cores`, Slurm core numbers), the GPU's domain
// of `kind` ("any" counts as "node"), and its closest NICs. Errors name the GPU or core that
// the topology file does not describe.
omni::Result<Binding> plan_binding(const omni::hal::SiteNode &node,
                                   const std::vector<unsigned> &gpus,
                                   const std::vector<unsigned> &alloc_cores,
                                   std::string_view kind);

// Where the first of `nvmes` (block device names, best first) that is mounted is mounted,
// from the text of /proc/self/mounts: the whole device (/dev/nvme0n1) or one of its
// partitions (/dev/nvme0n1p2). "" when none is mounted. Octal escapes (\040) are decoded.
std::string nvme_mount(const std::vector<std::string> &nvmes, std::string_view mounts);

// The node's entry of the site file, or nullptr.
const omni::hal::SiteNode *find_node(const omni::hal::SiteTopology &site, std::string_view name);

}  // namespace omni_spank

#endif
