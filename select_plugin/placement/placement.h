// The placement core of select/omni: where the units of an elastic job go, as a pure
// function of the nodes' domain layouts, what is free on them, and the request. No Slurm
// types, no I/O, no clock: select/omni's glue (and a grow) feed it what slurmctld knows,
// and it is unit- and property-tested alone.
//
// A unit is N ranks, one GPU each. For a domain kind (pcie, nvlink, numa, node) a unit lies
// inside one domain of that kind on one node; for `any`, inside one node when a node has N
// GPUs, else on whole free nodes. A whole-GPU rank takes a GPU nobody uses; an SM-slice rank
// (share P%, 1..99) takes P% of a GPU that no whole-GPU job holds, up to 100% per GPU. No GPU
// is ever over-committed.
//
// An elastic job gets as many units as fit, up to max_units; fewer than min_units is "not
// now" (an empty placement). Among the valid choices the core prefers, unit by unit, the one
// that leaves the most whole domains free (fragmentation-aware best fit), then the tightest
// domain, then the lowest node and domain; the result depends on nothing but the input.
#ifndef OMNI_SELECT_PLACEMENT_PLACEMENT_H
#define OMNI_SELECT_PLACEMENT_PLACEMENT_H

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni::placement {

// The kinds a unit must not straddle; Any: no constraint.
enum class Kind { Pcie = 0, Nvlink = 1, Numa = 2, Node = 3, Any = 4 };
constexpr std::size_t kKinds = 4;  // the kinds with domains (all but Any)
constexpr std::uint32_t kMaxGpusPerNode = 64;  // a node's GPUs are bits of one word

// One node's GPUs and domains: domains[kind] are GPU masks (bit g: GPU index g), disjoint
// and covering the node's GPUs, as omni-topology(5) requires.
struct NodeLayout {
    std::uint32_t gpus = 0;
    std::array<std::vector<std::uint64_t>, kKinds> domains;
};

// What is free on one node: share[g] percent of GPU g (100: unused; 0: taken whole or full).
// A GPU some SM-slice job uses has 1..99; a whole-GPU rank needs 100.
struct NodeFree {
    std::vector<std::uint8_t> share;  // one per GPU
};

struct Request {
    std::uint32_t ranks_per_unit = 1;  // N
    Kind kind = Kind::Node;
    std::uint32_t min_units = 1, max_units = 1;
    std::uint32_t sm_share = 100;      // percent of each GPU a rank takes; 100: whole GPUs
};

struct UnitPlace {
    // One (node, GPU mask) per node the unit uses: one entry, except for `any` units wider
    // than a node.
    std::vector<std::pair<std::uint32_t, std::uint64_t>> parts;
};

struct Placement {
    std::vector<UnitPlace> units;  // empty: not now (fewer than min_units fit)
};

// Checks the layouts (masks within each node's GPUs, each kind's domains disjoint and
// covering, at most kMaxGpusPerNode GPUs) and the request (N >= 1, 1 <= MIN <= MAX, share
// 1..100); errors name the node or field. `free` has one entry per layout, `share` one per GPU.
Status check_input(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free, const Request &req);

// The placement (see above). Work is bounded by the nodes' domains times log of their number,
// plus max_units; max_units is clamped to what the GPUs could ever hold.
Result<Placement> place(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free,
                        const Request &req);

// Slurm's shape of a request: a job gets the same number of GPUs on every node it is given
// (G per node), so each chosen node must hold exactly units_per_node = G / N units. The
// candidates are the nodes Slurm would consider, each naming its layout in `nodes`.
struct NodeCandidate {
    std::uint32_t layout = 0;  // index into `nodes`
    NodeFree free;
    bool required = false;     // the job names this node (sbatch -w): it must be chosen
};

struct NodesRequest {
    Request unit;                      // ranks_per_unit, kind, sm_share, and the job's MIN..MAX units
    std::uint32_t units_per_node = 1;
    std::uint32_t min_nodes = 1, max_nodes = 1;  // Slurm's node range of the job
};

struct NodeChoice {
    std::uint32_t candidate = 0;  // index into the candidates
    std::uint64_t gpus = 0;       // the GPUs of its units
    bool operator==(const NodeChoice &o) const { return candidate == o.candidate && gpus == o.gpus; }
};

// The nodes, and on each the GPUs, for such a job. A node qualifies when its free GPUs hold
// units_per_node units, each inside one domain of the kind (chosen on the node as place()
// chooses). The required candidates come first and must all qualify; then the others that
// break the fewest wholly free domains, then leave the fewest usable GPUs, then in candidate
// order. As many as qualify, up to max_nodes and max_units / units_per_node; none (an empty
// result: not now) when fewer than min_nodes or ceil(min_units / units_per_node) qualify.
// Sorted by candidate. Errors: bad input (as check_input), a layout index out of range, or a
// node range no count of nodes satisfies (the error says which bounds clash). Work is the
// candidates times their domains times units_per_node, plus a sort.
Result<std::vector<NodeChoice>> place_nodes(const std::vector<NodeLayout> &nodes,
                                            const std::vector<NodeCandidate> &candidates, const NodesRequest &req);

// `free` after `p` is applied with `req`'s share (for tests and sequences of jobs).
void apply(std::vector<NodeFree> &free, const Placement &p, const Request &req);

// The domains of every kind that are wholly free (every GPU at 100%): what best fit keeps.
std::uint64_t whole_free_domains(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free);

// The baseline of the benchmarks and the fragmentation test: the first domain in node order
// that fits, lowest GPUs first; same validity rules, no preference.
Result<Placement> place_first_fit(const std::vector<NodeLayout> &nodes, const std::vector<NodeFree> &free,
                                  const Request &req);

const char *kind_name(Kind k);
Result<Kind> parse_kind(const std::string &text);

}  // namespace omni::placement

#endif
