// omni-ctl shrink's choice, as a pure function: which units leave and which nodes the job
// then gives back to Slurm. No coordinator, no Slurm: the caller passes what both said.
#ifndef OMNI_LAUNCHER_CTL_SHRINK_PLAN_H
#define OMNI_LAUNCHER_CTL_SHRINK_PLAN_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "omni/result.h"

namespace omni::launcher {

struct ShrinkInput {
    std::vector<std::uint32_t> units;  // the current generation's units
    // Where ranks run: (unit, node) for every member that told the coordinator its node.
    std::vector<std::pair<std::uint32_t, std::string>> placements;
    std::uint32_t min_units = 1;
    std::vector<std::string> job_nodes;  // the job's nodes now (Slurm)
    std::string batch_host;              // never released: omni-launch runs there
};

struct ShrinkPlan {
    std::uint32_t target = 0;              // units after the shrink
    std::vector<std::uint32_t> leave;      // sorted
    std::vector<std::string> release;      // nodes left without a unit, in the job's order
    std::vector<std::string> keep;         // the job's other nodes, in its order
};

// Shrink to `target` units (below the current count, at least min_units). Whole nodes first:
// the nodes other than the batch host that hold the fewest units (and, among equals, the most
// recently joined ones) give all their units while that fits; the rest of the count comes
// from the most recently joined units (the highest ids). Errors say which bound was missed.
Result<ShrinkPlan> plan_shrink_to(const ShrinkInput &in, std::uint32_t target);

// Shrink by releasing these nodes: every unit with a rank on one of them leaves. Each node
// must be one of the job's, not the batch host, named once; the units left must be at least
// min_units. Errors name the node.
Result<ShrinkPlan> plan_shrink_nodes(const ShrinkInput &in, const std::vector<std::string> &nodes);

}  // namespace omni::launcher

#endif
