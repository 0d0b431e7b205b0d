// index.h5: reading and writing a checkpoint's index file (manifest, virtual datasets,
// rank state), and the commit step that turns a directory of finished shards into a
// committed checkpoint. Shared by commit(), merge and reshard.
#ifndef OMNI_CKPT_INDEX_H
#define OMNI_CKPT_INDEX_H

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "format.h"
#include "omni/ckpt_cpp.h"
#include "omni/result.h"
#include "ref_shard.h"

namespace omni {
namespace ckpt {

// Reads and validates index.h5 of a checkpoint directory (format version attribute and the
// manifest). Does not look at the source files.
Result<Manifest> read_index(const std::string &ckpt_dir);

// read_index() through a small process-wide cache of parsed manifests, keyed by the path
// and the bytes of index.h5 (size and XXH3 of the whole file: reading and hashing an index is
// cheap next to parsing it); a miss parses the manifest from those same bytes, read once. A
// hit is therefore exactly what a fresh read would return, even for a checkpoint deleted and
// written again under the same name. Used where one process
// opens the same checkpoint many times: every ShardWriter of an incremental checkpoint reads
// the same base, and every Reader of a single-controller trainer (one process, many shards)
// the same index.
// Shared and immutable: a hit costs no copy of the manifest.
Result<std::shared_ptr<const Manifest>> read_index_cached(const std::string &ckpt_dir);

// Reads an HDF5 shard file's own manifest and the rank states it holds, opening the file
// once. As for a reference shard, comparing each state with its checksum is the caller's.
Result<ShardRecord> read_shard(const std::string &shard_path);

// verify's check of each HDF5 shard file the index names (shard_records.cc): its own manifest
// (/omni_shard) parses and matches its checksum, records every slice the index names in the
// file with the index's checksum, and its rank states match theirs. Files in `skip` (already
// reported missing or unreadable) are left out. Problems go to `rep`.
void check_shard_records(const Manifest &man, const std::string &ckpt_dir, const std::set<std::string> &skip,
                         VerifyReport &rep);

// A ShardWriter that has finished (closed, fsynced if needed, and renamed) its shard leaves
// what it wrote here (the manifest and the rank states), keyed by the
// shard's path and identity (device, inode, size, modification and change times); commit in
// the same process takes it instead of opening the file and parsing it again. Any change to
// the file since gives it a new identity, and commit then reads the file as it would from
// another process.
void remember_shard(const std::string &shard_path, ShardRecord shard);
// The remembered record of `shard_path` if the file still has the identity it had when
// remembered, else the file read: a reference shard (shard-N.ref, parse_ref_shard) or an
// HDF5 shard (read_shard). Forgets the entry either way.
Result<ShardRecord> take_shard(const std::string &shard_path);

// What this process wrote: a ShardWriter that finishes records its shard's manifest here by
// the file's identity, which the commit's rename of the checkpoint directory keeps. A writer
// of the same rank given that checkpoint as its base then finds its slices' sources there
// instead of reading the base's index: commit copies every shard's sources into the index
// unchanged, so for this rank's slices they are the index's. Bounded (the newest 256).
void remember_written_shard(const std::string &path, const ShardManifest &m);
// The manifest this process wrote as rank `rank`'s shard of the committed checkpoint
// `ckpt_dir`, if that shard file (shard-R.h5 or shard-R.ref) still has the identity it had
// then; else null (another process wrote it, it changed, or `ckpt_dir` has no index).
std::shared_ptr<const ShardManifest> written_shard(const std::string &ckpt_dir, std::uint32_t rank);
// Reads one rank's state from a file holding /state/rank-N (index or shard) and checks it
// against `info`.
Result<RankState> read_rank_state(const std::string &file, const RankStateInfo &info);
// `s` (read from `file`) if its checksum is info.xxh3, else an error naming the file.
Result<RankState> check_rank_state(const std::string &file, const RankStateInfo &info, RankState s);

// Turns `partial_dir` (holding shard-0..writers-1, finished: each an HDF5 shard or a
// reference shard, ref_shard.h) into the committed checkpoint
// `final_dir`: checks the shards, writes index.h5, fsyncs, renames. When `latest_root` is
// not empty, ROOT/latest is pointed at the new checkpoint afterwards.
struct CommitRequest {
    std::string partial_dir;
    std::string final_dir;
    std::string attempt;
    std::uint32_t writers = 0;
    Meta meta;
    std::string latest_root;
    bool fsync = true;
};
Result<std::string> commit_partial(const CommitRequest &req);

// The name of the committed checkpoint with the highest step under `root`: a step-N directory
// holding an index.h5, readable or not (an index that cannot be read right now, or of a newer
// format, is still a commit). "" if there is none.
Result<std::string> newest_committed(const std::string &root);
// Points ROOT/latest at newest_committed(root), as found at that moment, so it never moves to
// a lower step than a committed one it named; leaves it alone when nothing is committed.
// Scans again after replacing the link: a commit that replaced it between our scan and our
// replace would otherwise be overwritten with an older step.
Status update_latest(const std::string &root);
// Test seam: when set, gc calls it after its removals and before it updates `latest` (a test
// commits a checkpoint there, as a trainer may while gc runs).
void set_gc_before_latest_hook(std::function<void()> hook);

// Refuses the index `m` of `ckpt_dir` when the directory (symbolic links resolved) is named
// step-N and `m` records another step: a checkpoint root takes step-N for step N, so such a
// directory (copied or renamed by hand) is neither loaded nor counted as that step.
Status check_index_step(const std::string &ckpt_dir, const Manifest &m);

// The XXH3-64 of a rank's state: its rng bytes followed by its consumed indices.
std::uint64_t rank_state_hash(const RankState &s);

}  // namespace ckpt
}  // namespace omni

#endif
