// Model-parallel units: how the ranks of a generation form model-parallel (MP) groups inside
// each unit and one data-parallel (DP) group per MP index across units. Pure functions of a
// layout, so that every rank computes the same groups without talking to anyone.
//
// A unit of N ranks with M-way model parallelism (M divides N, OMNI_MP) holds N/M replicas of
// M ranks each: the ranks of slots k*M .. k*M+M-1 form replica k's MP group, and a rank's MP
// index is slot % M. Rank r's DP group is every member of the generation with its MP index,
// in generation-rank order; its DP rank is its position there. Because the coordinator
// numbers ranks unit by unit, slot by slot (Layout), replica k of the u-th unit has DP rank
// u*N/M + k in every MP index's DP group: the M ranks of one replica get the same DP rank,
// hence the same samples from the ledger (which hands samples to replicas, DP ranks, not
// to ranks).
//
// Units come and go whole, so MP groups never change while a unit lives; a resize changes
// the DP groups only (DP size u*N/M at u units).
#ifndef OMNI_LAUNCHER_RUNTIME_GROUPS_H
#define OMNI_LAUNCHER_RUNTIME_GROUPS_H

#include <cstdint>

#include "coord/protocol.h"
#include "omni/result.h"

namespace omni::launcher {

struct Groups {
    std::uint32_t mp_size = 1, mp_rank = 0;  // M, and slot % M
    std::uint32_t dp_size = 1, dp_rank = 0;  // replicas in the generation, this one's index
    std::uint32_t replica_in_unit = 0;       // slot / M
};

// The groups of (unit, slot) in `layout` with M = mp. Errors: M is 0 or does not divide the
// layout's unit size, or (unit, slot) is not in the layout.
Result<Groups> groups_of(const Layout &layout, std::uint32_t unit, std::uint32_t slot,
                         std::uint32_t mp);

// The DP group of MP index `mp_rank` as a layout of its own: the members whose slot % mp is
// mp_rank, in rank order, renumbered 0..d-1 (rank = DP rank), each with slot = its replica
// inside the unit (slot / mp), with the same generation and units: rank_of(unit, slot / mp)
// on it is a member's DP rank. mp = 1: the layout itself.
Layout dp_layout(const Layout &layout, std::uint32_t mp, std::uint32_t mp_rank);

// A decision seen by one DP group: next is dp_layout(next), the rest unchanged.
Decision dp_decision(const Decision &d, std::uint32_t mp, std::uint32_t mp_rank);

}  // namespace omni::launcher

#endif
