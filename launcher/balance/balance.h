// Load balancing of a step's samples over data-parallel replicas: the partitioning core of
// grouped reordering (MegaScale-Omni's decentralized grouped reordering). Pure: costs in, an
// assignment out; no communication, no clock. The runtime gathers each group's sample
// metadata, calls this, and moves the samples.
//
// Why it is shaped like this:
//  - Every replica processes the same number of samples per step (the ledger's B/d, walked in
//    micro-batches), so this is balanced partitioning: equal part sizes, the slowest part (the
//    largest summed cost) as small as it can be made. The step's samples stay the step's
//    samples: a reordering changes which replica computes a sample, never which samples a
//    step holds, so the ledger's exactly-once holds unchanged.
//  - Costs are integers (tokens, patches, frames, or a trainer's own estimate scaled to
//    integers), so every policy is exact and deterministic: ties break by position.
//  - Grouped: parts form groups of consecutive parts (ranks grouped by locality, e.g. a node);
//    a group divides among its parts only its own contiguous share of the step, the samples
//    the ledger gives those parts anyway, so samples move only inside a group.
#ifndef OMNI_LAUNCHER_BALANCE_BALANCE_H
#define OMNI_LAUNCHER_BALANCE_BALANCE_H

#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::balance {

// none: contiguous slices in position order (the ledger's own split, the baseline);
// lpt: longest processing time first, each sample to the lightest part with room;
// kk: Karmarkar-Karp's largest differencing with equal part sizes (the balanced variant),
//     then pairwise swaps between the heaviest and the lightest part while they help.
enum class Policy { None, Lpt, Kk };

const char *policy_name(Policy p);
// "none", "lpt" or "kk"; anything else is an error naming the value and the choices.
Result<Policy> parse_policy(const std::string &text);

constexpr std::uint64_t kMaxSamples = std::uint64_t(1) << 24;  // per call
constexpr std::uint64_t kMaxCost = std::uint64_t(1) << 40;      // per sample: sums stay below 2^64

// part[r]: the positions (indices into the costs) part r gets, in increasing order.
using Assignment = std::vector<std::vector<std::uint32_t>>;

// Splits the samples (costs[i]: sample i's cost) into `parts` parts of costs.size() / parts
// samples each. Errors: parts 0, a sample count parts does not divide, more than kMaxSamples
// samples, a cost above kMaxCost. Work: O(n log n) for lpt and kk, O(n) for none.
Result<Assignment> partition(const std::vector<std::uint64_t> &costs, std::uint32_t parts, Policy policy);

// The same within groups of `group` consecutive parts: group g (parts g*group ..) divides its
// contiguous share of the samples (positions g*group*m .., m = n / parts) among its parts.
// group must divide parts; group == parts is partition().
Result<Assignment> partition_grouped(const std::vector<std::uint64_t> &costs, std::uint32_t parts,
                                     std::uint32_t group, Policy policy);

// The general form: part r belongs to the group labelled group_of_part[r] (any labels; parts
// = group_of_part.size()). Part r's own share is the contiguous slice [r*m, (r+1)*m) of the
// positions (m = n / parts, the ledger's split); a group divides the union of its parts'
// shares among its parts, in the order of their part numbers (the lowest-numbered part gets
// the group's first subset), so samples move only inside a group. All labels equal is
// partition(); labels r / group is partition_grouped().
Result<Assignment> partition_by_group(const std::vector<std::uint64_t> &costs,
                                      const std::vector<std::uint64_t> &group_of_part, Policy policy);

struct Balance {
    std::uint64_t max_part = 0;  // the slowest part's summed cost
    double mean_part = 0;        // the mean part's
    double imbalance = 0;        // max / mean (1: perfect); 0 when all costs are 0
};

// How balanced an assignment is (parts as given; positions must be valid indices).
Balance measure(const std::vector<std::uint64_t> &costs, const Assignment &a);

}  // namespace omni::balance

#endif
