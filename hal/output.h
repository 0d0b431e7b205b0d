/* slurm-omni: what omni-hal prints: readable tables, the versioned JSON document, Slurm
 * gres.conf lines. Kept in the library so that tests and other tools produce the same text.
 */
#ifndef OMNI_HAL_OUTPUT_H
#define OMNI_HAL_OUTPUT_H

#include <string>
#include <vector>

#include "hal/health.h"
#include "hal/model.h"

namespace omni::hal {

/* Version of the `omni-hal show --json` document ("schema": "omni-hal/node"). Bumped when a
 * field changes meaning or disappears; new fields may appear without a bump. */
constexpr int kNodeSchemaVersion = 1;
/* Version of the `omni-hal check --json` document ("schema": "omni-hal/check"). */
constexpr int kCheckSchemaVersion = 1;

std::string node_json(const Node &node, int indent);
std::string node_table(const Node &node);
/* The GPU x GPU and GPU x NIC path matrix, laid out like `nvidia-smi topo -m`. */
std::string path_matrix(const Node &node);
std::string checks_json(const Node &node, const std::vector<Finding> &findings, int indent);
std::string checks_text(const std::vector<Finding> &findings);
std::string units_json(const Node &node, DomainKind kind, unsigned k, bool disjoint,
                       const UnitCandidates &c, int indent);

struct GresOptions {
    std::string nvidia_prefix = "/dev/nvidia";     // File=<prefix><device number>
    std::string amd_prefix = "/dev/dri/renderD";   // AMD render nodes start at 128
    unsigned amd_first = 128;
    std::string node_name;  // when set, every line starts with NodeName=<name>
    std::string type;       // overrides Type= for every GPU
    bool mps = false;       // also a Name=mps Count=100 line per NVIDIA GPU (SM shares)
};
/* One gres.conf line per GPU, in GPU index order, preceded by a comment naming the source.
 * Links= lists NVLink counts to every GPU in index order, -1 for itself (Slurm matches
 * Links positions to the order of the gpu lines). With `mps`, the gpu lines are followed by
 * one "Name=mps Count=100 File=..." line per NVIDIA GPU (AMD GPUs have no MPS), so that
 * gres/mps hands out percent shares of each GPU, and a comment names the slurm.conf lines
 * that go with it. */
std::string gres_conf(const Node &node, const GresOptions &opts);

}  // namespace omni::hal

#endif
