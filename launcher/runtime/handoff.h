// The state hand-off of a planned reshape, as collective building blocks over a Communicator
// (host buffers), so that the runtime's sequence of calls is short and each piece is tested
// on its own.
//
// ZeRO-1 partition: a logical fp32 vector of length L is split among `world` ranks in
// contiguous ranges whose sizes differ by at most one, lower ranks taking the larger ones
// (the same function as omni::train::shard_range, which the reference trainer uses).
//
// A planned reshape moves every element at most once, straight from the rank that holds it
// to the rank that needs it (point-to-point, no full copies), in two phases:
//  1. on the OLD communicator (every member of the old generation, leavers included, all
//     alive because the reshape is planned): the optimizer vectors are re-partitioned from
//     the old ZeRO-1 layout onto the SURVIVORS (old members that stay), survivor i of s taking
//     zero1_range(length, i, s), survivors counted in new-rank order. Leavers are then done
//     and may exit. Without joiners the survivors are the new world and this is the end.
//  2. on the NEW communicator, only when units join: the lowest-ranked survivor broadcasts a
//     header (step, ledger, sizes); the parameters reach each joiner in s pieces, one from
//     each survivor; the optimizer vectors go from the survivor layout to the new layout.
// Nothing touches the disk. Every size a joiner allocates comes from its own registration,
// never from the network: the header only has to agree with it.
#ifndef OMNI_LAUNCHER_RUNTIME_HANDOFF_H
#define OMNI_LAUNCHER_RUNTIME_HANDOFF_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "omni/result.h"

namespace omni::launcher {

struct ShardRange {
    std::size_t begin = 0, end = 0;
    std::size_t size() const { return end - begin; }
    bool operator==(const ShardRange &o) const { return begin == o.begin && end == o.end; }
};

// The range of rank `rank` (< world) of a vector of `length` elements.
ShardRange zero1_range(std::size_t length, std::uint32_t rank, std::uint32_t world);

// A re-partition of one logical fp32 vector among the ranks of a communicator: rank r holds
// have[r] and must end with want[r] (empty ranges where it holds or needs nothing). The
// held ranges are pairwise disjoint, and together they cover every wanted element.
struct Repartition {
    std::vector<ShardRange> have, want;
};

// What one rank does in a re-partition, in logical coordinates.
struct PeerPlan {
    struct Move {
        int peer;
        ShardRange range;
    };
    std::vector<Move> sends, recvs;
    ShardRange local;  // held and wanted by this rank: copied in memory
};

// Checks the whole plan (every rank computes the same answer, so all of them accept or all
// refuse it before anything moves) and returns rank `me`'s part of it.
Result<PeerPlan> plan_repartition(const Repartition &plan, std::uint32_t me);

// Runs `plan` on `comm` (one exchange() call on every rank): `src` holds the
// have[rank] elements of this rank, `dst` receives its want[rank] elements. `src` and `dst`
// must not overlap.
Status repartition(Communicator &comm, const Repartition &plan, const float *src, float *dst);

// When rank `me` wants a non-empty part of what it holds (want inside have), the offset of
// that part in its `src`: it may then pass dst = src + offset (the local copy is skipped;
// nothing is received) and, after the call, move that part to the front of its buffer
// instead of allocating a new one.
std::optional<std::size_t> in_place_offset(const Repartition &plan, std::uint32_t me);

// v.assign(n, 0) for a buffer about to receive a shard, faulting its pages in with one
// madvise(MADV_POPULATE_WRITE) before they are written instead of one page fault at a time
// (several times faster where page faults are expensive, as in VMs; plain assign where the
// kernel lacks it).
void assign_zeroed(std::vector<float> &v, std::size_t n);

// Several re-partitions in one exchange() (at most kMaxLanes; every rank passes the same
// plans in the same order): one round of transfers instead of one per vector.
struct RepartitionJob {
    const Repartition *plan;
    const float *src;
    float *dst;
};
constexpr std::size_t kMaxLanes = 256;
Status repartition(Communicator &comm, const std::vector<RepartitionJob> &jobs);

// Broadcasts a byte string of at most `max_bytes` from `root`: its length, then the bytes.
// Non-roots pass an empty string and receive the root's; a length above max_bytes is refused
// before anything is allocated (after the length broadcast, so no rank is left waiting).
Status broadcast_bytes(Communicator &comm, std::string &bytes, int root, std::size_t max_bytes);

// What the survivors tell joiners, checked by the joiner against its own registration.
struct HandoffHeader {
    std::uint64_t step = 0;            // the boundary's step: the joiner's first step is step+1
    std::uint64_t generation = 0;      // the new generation
    std::uint64_t params = 0;          // length of the replicated parameter vector
    std::vector<std::uint64_t> shard_lengths;  // logical length of each optimizer vector
    bool has_ledger = false;
    std::string ledger;                // Ledger::serialise() after the resize
};
std::string encode_header(const HandoffHeader &h);
Result<HandoffHeader> decode_header(const std::string &text);
constexpr std::size_t kMaxHandoffHeaderBytes = 1 << 20;
constexpr std::size_t kMaxShardVectors = 64;

// A fingerprint of a float vector's bits (FNV-1a 64), for logs and tests comparing replicas.
std::uint64_t fingerprint(const float *data, std::size_t count);

}  // namespace omni::launcher

#endif
