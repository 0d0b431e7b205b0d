// Reference shards: what a rank that writes no tensor data leaves for commit().
//
// In an incremental checkpoint most ranks usually changed nothing: every slice they add
// references the base. Such a rank still owes commit() its shard manifest (which slices it
// owns, and where their bytes are) and its rank states, and commit() copies both into
// index.h5; after that nothing reads the rank's file. Creating and closing an HDF5 file for
// this costs about 0.7 ms of CPU per rank inside HDF5's global lock, most of the fixed cost
// of a 1% incremental checkpoint, so the rank writes a plain file instead:
//
//   shard-RRRRR.ref, all integers little-endian (omni-ckpt(5), REFERENCE SHARDS):
//     8 bytes  "omni-ref"
//     u64      format version (kFormatVersion)
//     u64      J, the length of the manifest
//     u64      P, the length of the rank states
//     J bytes  the shard manifest as JSON, exactly as /omni_shard of an HDF5 shard
//     P bytes  each rank state of the manifest in its order: rng bytes, then consumed
//              indices as int64
//     u64      XXH3-64 of every byte before it
//
// Parsing goes through the same validation as every other manifest (format.h): a damaged
// or hostile file is refused with a message, never read past its end.
#ifndef OMNI_CKPT_REF_SHARD_H
#define OMNI_CKPT_REF_SHARD_H

#include <string>
#include <vector>

#include "format.h"
#include "omni/result.h"

namespace omni {
namespace ckpt {

// What commit() takes from a finished rank: its manifest and its rank states, in the order
// of manifest.rank_states.
struct ShardRecord {
    ShardManifest manifest;
    std::vector<RankState> states;
};

// The file's bytes. `states` must match m.rank_states one for one (sizes and order).
std::string encode_ref_shard(const ShardManifest &m, const std::vector<RankState> &states);

// Parses and checks a whole file: magic, version, lengths, trailing checksum, the manifest
// (parse_shard_manifest) and that the rank states' sizes add up to P. Each state's own
// checksum (RankStateInfo::xxh3) is the caller's to compare, as for an HDF5 shard.
Result<ShardRecord> parse_ref_shard(const std::string &bytes);

// The largest reference shard read: its manifest is bounded by kMaxManifestBytes, and its
// rank states by the same again.
constexpr std::uint64_t kMaxRefShardBytes = 2 * std::uint64_t(kMaxManifestBytes);

}  // namespace ckpt
}  // namespace omni

#endif
