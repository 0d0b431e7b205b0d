/* slurm-omni: the C++ API of libomni-ckpt, HDF5 checkpoints for elastic training.
 *
 * A checkpoint is one directory under a checkpoint root:
 *
 *   ROOT/step-0000000100/            committed (the rename of the directory is the commit)
 *   ROOT/.step-0000000100.partial-G/ being written, or left behind by a crash (incomplete)
 *   ROOT/latest -> step-0000000100   convenience symlink for tools, replaced atomically
 *
 * Every writing rank writes one shard file (ShardWriter): an HDF5 file with its slices, or, for
 * a rank that wrote no slice (an incremental checkpoint's rank whose slices all reference the
 * base), a small reference shard that only carries its manifest and rank states. Once all
 * ranks have finished (the caller's barrier), one process calls commit(), which checks that
 * the shards tile every logical tensor exactly, writes index.h5 (metadata plus one HDF5
 * virtual dataset per tensor, so h5dump/h5ls/h5py read whole logical tensors), fsyncs and
 * renames. The on-disk format is documented in omni-ckpt(5).
 *
 * Loading at any data-parallel size is a matter of asking Reader::read for another slice.
 * Every function reports failures through omni::Result/omni::Status with a message naming the
 * checkpoint, tensor and file involved; nothing here throws. A ShardWriter, AsyncShardWriter
 * or Reader is used by one thread at a time; different objects may be used concurrently
 * (HDF5 serialises its own calls).
 */
#ifndef OMNI_CKPT_CPP_H
#define OMNI_CKPT_CPP_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "omni/result.h"

namespace omni {
namespace ckpt {

/* Version written into every index (attribute omni_ckpt_format_version) and shard. Readers
 * refuse any other version rather than guess. */
constexpr std::uint32_t kFormatVersion = 1;
/* Limits enforced on every writer and on every manifest that is read back. */
constexpr std::uint32_t kMaxRank = 8;               // tensor dimensions
constexpr std::uint32_t kMaxWriters = 1u << 20;     // shard files per checkpoint
constexpr std::size_t kMaxNameLength = 255;         // tensor names

enum class DType : std::uint8_t { fp32 = 0, bf16 = 1, fp16 = 2, int64 = 3, uint8 = 4 };

const char *dtype_name(DType t);
std::size_t dtype_size(DType t);
/* "fp32", "bf16", "fp16", "int64" or "uint8". */
Result<DType> parse_dtype(const std::string &text);

using Shape = std::vector<std::uint64_t>;

struct LrScheduler {
    std::string kind;           // e.g. "cosine", "linear", "constant"
    double base_lr = 0.0;
    std::uint64_t warmup_steps = 0;
    std::uint64_t total_steps = 0;
    std::uint64_t last_step = 0;
};

/* Position in the data: epoch and sampler seed; the consumed indices are per rank
 * (RankState) because each rank records what it consumed. */
struct Ledger {
    std::uint64_t epoch = 0;
    std::uint64_t seed = 0;
};

/* Job-wide state, given once to commit(). */
struct Meta {
    std::uint64_t step = 0;
    std::uint64_t generation = 0;
    std::uint64_t world_size = 0;
    std::string unit_layout;    // free text such as "4@pcie x2"; printable, <= 255 bytes
    LrScheduler lr;
    Ledger ledger;
};

/* Per-rank state: RNG bytes (opaque, e.g. torch/cuda generator states) and the global sample
 * indices the rank consumed in the current epoch. */
struct RankState {
    std::uint32_t rank = 0;
    std::vector<std::uint8_t> rng;
    std::vector<std::int64_t> consumed;
};

/* Where one slice of a logical tensor lives. `file` is relative to the checkpoint directory:
 * "shard-00003.h5", or "../step-0000000090/shard-00003.h5" for a slice an incremental
 * checkpoint reuses from an earlier one. `xxh3` is XXH3-64 of the slice's bytes in row-major
 * order. `writer` is the shard (rank) that owns the slice in this checkpoint. */
struct SourceRef {
    std::uint32_t writer = 0;
    std::string file;
    std::string dataset;
    Shape offset;
    Shape count;
    std::uint64_t xxh3 = 0;
    // Where the writer put the slice's bytes in `file` (one contiguous run, no filters), so a
    // reader can pread them without opening the file or the dataset through HDF5; 0: not
    // recorded (written through HDF5, or by an older writer), read through HDF5.
    std::uint64_t data_offset = 0;
};

struct TensorInfo {
    std::string name;
    DType dtype = DType::fp32;
    Shape shape;
    std::vector<SourceRef> sources;
};

struct RankStateInfo {
    std::uint32_t rank = 0;
    std::uint64_t rng_bytes = 0;
    std::uint64_t consumed = 0;
    std::uint64_t xxh3 = 0;      // over the rng bytes followed by the consumed indices
};

/* The content of index.h5's /manifest dataset. */
struct Manifest {
    std::uint32_t format_version = kFormatVersion;
    Meta meta;
    std::uint32_t writers = 0;
    std::uint64_t created_unix = 0;
    std::vector<TensorInfo> tensors;
    std::vector<RankStateInfo> rank_states;
};

/* Progress callback for long operations: done and total units of work (bytes). */
using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/* ---- writing ------------------------------------------------------------------------- */

/* How an incremental writer decides whether a slice changed since the base checkpoint. */
enum class Change {
    detect,     // hash the slice and compare with the base (always correct; costs one hash)
    changed,    // the caller knows it changed: write it
    unchanged,  // the caller knows it did not change (e.g. a frozen encoder): reuse the base's
                // slice without hashing, if the base has exactly this slice; else write it
};

struct WriterOptions {
    /* Distinguishes attempts at the same step (the runtime passes its generation), so a crashed
     * attempt's leftovers never mix with a new one. [A-Za-z0-9_-]{1,32}. */
    std::string attempt = "0";
    /* Path of an earlier committed checkpoint in the same root: makes this an incremental
     * checkpoint that references the base's unchanged slices instead of writing them. */
    std::string base;
    /* fsync the shard file. Only benchmarks of the raw HDF5 path turn this off. */
    bool fsync = true;
    /* Change::detect without hashing what was not written: the writer asks the kernel to
     * track writes to the pages of every slice of 64 KiB or more that it is given as a
     * buffer (userfaultfd asynchronous write protection, Linux >= 6.7) and remembers the
     * slice's hash; at the next checkpoint of this process a slice whose pages nobody wrote
     * in between, at the same address and length, is compared with the base by that hash.
     * Only private anonymous memory is tracked: a file or shared mapping (memfd, /dev/shm,
     * MAP_SHARED|MAP_ANONYMOUS, even privately mapped files) can change without a store
     * through this mapping (another mapping or process, pwrite, a punched hole), so such a
     * slice is hashed, as is memory another userfaultfd guards (e.g. a copy-on-write
     * snapshot's). Exact like hashing for stores by the CPU through this process's page
     * tables and for ordinary system calls (read(2), recv(2)). Costs: the first store to
     * each 4 KiB page after a checkpoint takes a minor fault (about a microsecond), and a
     * scan of the slice's page tables per checkpoint. Contract: memory pinned long-term and
     * written without page-table faults, by a device's DMA or by the kernel
     * (cudaHostRegister'ed, RDMA-registered, vfio, AF_XDP umem, io_uring registered/fixed
     * buffers, e.g. IORING_OP_READ_FIXED), is not seen and cannot be detected: it must not
     * be given to a tracking writer. Without kernel support (write_tracking_status() says
     * why) the writer hashes as usual.
     * AsyncShardWriter: a tracked slice that nobody wrote and whose checksum equals the
     * base's is not snapshotted at all (nor is one the caller calls Change::unchanged); the
     * others are snapshotted, and their checksums, taken by the persist, are remembered. */
    bool track_writes = false;
};

/* "" if WriterOptions::track_writes can work in this process, else why not. */
std::string write_tracking_status();

class ShardWriter {
public:
    /* Starts rank `rank`'s shard of checkpoint `step` under `root` (created if missing). With
     * WriterOptions::base, the base must be a committed checkpoint: its slices are looked up
     * in the shard this process wrote as this rank of it, if it did and the file is unchanged,
     * else in its index (read here). */
    static Result<std::unique_ptr<ShardWriter>> open(const std::string &root, std::uint64_t step,
                                                     std::uint32_t rank,
                                                     const WriterOptions &options = {});
    /* Adds this rank's slice [offset, offset+count) of the logical tensor `name` (global shape
     * `shape`). `data` holds prod(count) elements in row-major order and is only read during
     * the call (with Change::unchanged and a base that holds exactly this slice it is not
     * read at all and may be null). Names are '/'-separated components of [A-Za-z0-9_.:+-],
     * <= 255 bytes. Every element of every tensor must be added by exactly one rank; commit()
     * checks. */
    Status add_tensor(const std::string &name, DType dtype, const Shape &shape,
                      const Shape &offset, const Shape &count, const void *data,
                      Change change = Change::detect);
    /* Records a rank's RNG state and consumed indices (copied; written by finish()); normally
     * the writer's own rank. */
    Status add_rank_state(const RankState &state);
    /* Writes the shard's manifest and rank states, closes, fsyncs (a shard with slices) and
     * publishes the shard in the partial checkpoint directory: shard-R.h5, or shard-R.ref
     * when no slice was written. Must succeed on every rank before commit(). */
    Status finish();
    /* Bytes of tensor data written / reused from the base so far. */
    std::uint64_t bytes_written() const;
    std::uint64_t bytes_reused() const;
    /* Bytes of slices that write tracking found unwritten since their hash was taken, so
     * they were not hashed again (WriterOptions::track_writes). */
    std::uint64_t bytes_tracked_clean() const;
    /* An unfinished writer removes its temporary file. */
    ~ShardWriter();

    struct Impl;
    /* Built by the library only (Impl is opaque); use open(). */
    explicit ShardWriter(std::unique_ptr<Impl> impl);

private:
    friend struct ShardWriterAccess;   // the library's internals
    std::unique_ptr<Impl> impl_;
};

struct CommitOptions {
    std::string attempt = "0";   // must match the writers' WriterOptions::attempt
    bool update_latest = true;   // after the rename, point ROOT/latest at the newest committed
                                 // checkpoint: this one, unless a higher step is committed
    bool fsync = true;
};

/* Assembles the `writers` finished shards of `step` into a committed checkpoint and returns
 * its path. Fails, leaving the previous checkpoints untouched and the partial directory in
 * place for gc, when a shard is missing, tensors are inconsistent across shards, slices
 * overlap or leave holes, or the file system reports an error (ENOSPC included). */
Result<std::string> commit(const std::string &root, std::uint32_t writers, const Meta &meta,
                           const CommitOptions &options = {});

/* Removes ROOT/.step-N.partial-ATTEMPT, the files of checkpoint `step` written as `attempt`,
 * which will not be committed (a writer failed: a full file system, say), so that their
 * space comes back at once rather than at the next gc. Call it once every writer of the
 * attempt has stopped. No such directory is success; committed checkpoints are not touched. */
Status abandon(const std::string &root, std::uint64_t step, const std::string &attempt = "0");

/* How AsyncShardWriter takes its snapshot of a slice. */
enum class Snapshot {
    /* add_tensor copies the slice into host memory the writer keeps (its only stall, a
     * memcpy); the caller's buffer is free again when add_tensor returns. */
    copy,
    /* add_tensor write-protects the caller's buffer (userfaultfd) instead of copying it;
     * the persist thread copies it into the same host memory as copy mode, un-protecting
     * each 2 MiB as it goes, before it writes anything. A write that gets to a part first
     * stops the writing thread while the library copies the enclosing 2 MiB, then goes on.
     * The stall is a few system calls per slice; the copy runs in the background, and the
     * buffer is protected for about the time of that copy. The checkpoint holds the values
     * as of add_tensor, as with copy. Contract: the buffer stays allocated and mapped, and is not freed,
     * munmap'ed, mremap'ed or madvise(MADV_DONTNEED)'ed, until wait() returns or the next
     * begin(); only writes through the page tables are stopped, so memory pinned long-term
     * and written without page-table faults, by a device's DMA or by the kernel
     * (cudaHostRegister'ed, RDMA-registered, vfio, AF_XDP umem, io_uring registered/fixed
     * buffers, e.g. IORING_OP_READ_FIXED), is not protected (this cannot be detected) and
     * belongs in copy mode; and a system call that
     * writes into a protected buffer (read(2), recv(2)) waits like a store only where the
     * process may handle kernel faults (CAP_SYS_PTRACE or vm.unprivileged_userfaultfd = 1),
     * else it fails with EFAULT (Reader::read retries by touching its destination first).
     * A slice below 64 KiB, memory userfaultfd cannot protect (file or shared mappings,
     * hugetlbfs pages, memory another userfaultfd guards, the same memory added twice), a kernel
     * without userfaultfd write protection (Linux >= 5.14 is needed), or OMNI_CKPT_NO_UFFD=1
     * in the environment: that slice is copied, and stats().fallback says why. Always
     * correct. */
    copy_on_write,
};

/* What the last snapshot of an AsyncShardWriter did (begin() resets it). */
struct AsyncStats {
    Snapshot snapshot = Snapshot::copy;    // the mode it was taken in
    std::uint64_t slices_copied = 0;       // slices copied by add_tensor
    std::uint64_t slices_protected = 0;    // slices left in place, write-protected
    std::uint64_t bytes_copied = 0;        // by add_tensor (with the partial pages around
                                           // protected slices)
    std::uint64_t bytes_protected = 0;     // write-protected in place
    std::uint64_t slices_referenced = 0;   // not snapshotted at all: the base holds them
    std::uint64_t bytes_referenced = 0;    // unchanged (Change::unchanged, or write tracking
                                           // saw no store and the checksum equals the base's)
    std::uint64_t faults = 0;              // writes that stopped at the write protection
    std::uint64_t bytes_faulted = 0;       // copied for them (a 2 MiB chunk each, at most)
    std::uint64_t bytes_drained = 0;       // copied by the persist before it wrote anything:
                                           // the protected bytes no write reached first
    std::string fallback;                  // why a slice of a copy_on_write snapshot was
                                           // copied (the first such slice); "" if none was
    bool kernel_writes_fail = false;       // unprivileged userfaultfd: a system call writing
                                           // into protected memory fails with EFAULT
};

/* Asynchronous persist: add_tensor takes a snapshot of the slice (see Snapshot; the only
 * training stall), except of a slice that the base holds unchanged (Change::unchanged, or
 * write tracking found it unwritten and equal to the base's), which is referenced without
 * a snapshot; submit() hands the snapshot to a background thread that runs a
 * ShardWriter; wait() returns its status (call it before the commit barrier). A new begin()
 * waits for the previous persist and fails if that persist failed and nobody collected it
 * with wait(). With an HDF5 library built without thread safety, submit() persists
 * synchronously. */
class AsyncShardWriter {
public:
    AsyncShardWriter();   // Snapshot::copy
    explicit AsyncShardWriter(Snapshot snapshot);
    ~AsyncShardWriter();   // waits for an in-flight persist
    AsyncShardWriter(const AsyncShardWriter &) = delete;
    AsyncShardWriter &operator=(const AsyncShardWriter &) = delete;

    /* The snapshot mode of the checkpoints begun from now on. */
    void set_snapshot(Snapshot snapshot);
    Status begin(const std::string &root, std::uint64_t step, std::uint32_t rank,
                 const WriterOptions &options = {});
    Status add_tensor(const std::string &name, DType dtype, const Shape &shape,
                      const Shape &offset, const Shape &count, const void *data,
                      Change change = Change::detect);
    Status add_rank_state(const RankState &state);
    Status submit();
    Status wait();
    /* The current (or last) snapshot's statistics; faults keep counting until the persist
     * has written everything out. */
    AsyncStats stats() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

/* ---- reading ------------------------------------------------------------------------- */

struct ReadOptions {
    /* Check the bytes read: a slice read whole against the manifest's checksum the first
     * time, part of a slice against the block checksums of the blocks that part touches
     * (omni-ckpt(5), BLOCK CHECKSUMS; a slice without them is read whole once, to check it).
     * With it on, a slice is read at the place its manifest records (SourceRef::data_offset)
     * once its checksum proves the bytes there, without opening the file through HDF5.
     * Turning it off reads only the bytes asked for, unchecked, at the place HDF5 gives for
     * each dataset (nothing proves the manifest's), so it is no faster. */
    bool verify_checksums = true;
};

class Reader {
public:
    /* Opens a committed checkpoint directory. Fails if it is incomplete, of another format
     * version, or if any source file it references is missing. */
    static Result<std::unique_ptr<Reader>> open(const std::string &ckpt_dir,
                                                const ReadOptions &options = {});
    /* Opens the complete checkpoint with the highest step under `root` (list()'s `latest`).
     * If that one's index cannot be read (CheckpointEntry::unreadable), fails naming it rather
     * than load an older step: a job restarting silently from an older step loses work. */
    static Result<std::unique_ptr<Reader>> open_latest(const std::string &root,
                                                       const ReadOptions &options = {});
    ~Reader();

    const std::string &path() const;
    const Manifest &manifest() const;
    const TensorInfo *find(const std::string &name) const;
    /* Reads the slice [offset, offset+count) of a logical tensor into `dst` (row-major,
     * dst_bytes must equal prod(count) * dtype size). Any slice works: this is resharding. */
    Status read(const std::string &name, const Shape &offset, const Shape &count, void *dst,
                std::size_t dst_bytes);
    /* Reads a whole logical tensor. */
    Status read_all(const std::string &name, void *dst, std::size_t dst_bytes);
    Result<RankState> rank_state(std::uint32_t rank);
    /* Bytes read from source files so far (for benchmarks and progress). */
    std::uint64_t bytes_read() const;

    struct Impl;
    /* Built by the library only (Impl is opaque); use open(). */
    explicit Reader(std::unique_ptr<Impl> impl);

private:
    Status read_into(const std::string &name, const Shape &offset, const Shape &count, void *dst,
                     std::size_t dst_bytes);
    std::unique_ptr<Impl> impl_;
};

/* ---- maintenance (omni-ckpt) --------------------------------------------------------- */

struct VerifyIssue {
    std::string tensor;   // empty for problems not tied to a tensor
    std::string file;
    std::string problem;
};

struct VerifyReport {
    std::string path;
    std::uint64_t sources_checked = 0;
    std::uint64_t bytes_checked = 0;
    std::vector<VerifyIssue> issues;
    bool ok() const { return issues.empty(); }
};

/* Checks every source file and dataset, shape, dtype and checksum, plus rank state, and that
 * each tensor's virtual dataset in index.h5 maps every source to the place the manifest gives
 * it (what h5py reads). The virtual datasets are read in a child process, so an index that
 * crashes or hangs HDF5 becomes an issue naming the tensor. An error Result means the
 * checkpoint could not be examined at all (no index, bad manifest or its checksum). */
Result<VerifyReport> verify(const std::string &ckpt_dir, const Progress &progress = {});

/* Materialises `ckpt_dir` (incremental or not) into a self-contained checkpoint at `out` with
 * the same shard layout. `out` must not exist, must not lie inside a checkpoint directory
 * (gc would remove it with that checkpoint) and, if named step-N, N must be the checkpoint's
 * step (a checkpoint root takes step-N for step N); merge and reshard refuse it otherwise. */
Result<std::string> merge(const std::string &ckpt_dir, const std::string &out,
                          const Progress &progress = {});
/* Rewrites `ckpt_dir` for `writers` writers: every tensor split along its first dimension
 * into near-equal slices (the first shape[0] % writers slices one row longer). */
Result<std::string> reshard(const std::string &ckpt_dir, std::uint32_t writers,
                            const std::string &out, const Progress &progress = {});

struct CheckpointEntry {
    std::string name;            // directory name
    std::string path;
    std::uint64_t step = 0;
    bool complete = false;       // committed: a step-N directory holding index.h5
    bool unreadable = false;     // complete, but its index cannot be read now (locked, newer
                                 // format, I/O error) or records another step: gc removes
                                 // nothing it might reference, open_latest fails on it
    bool latest = false;         // the highest complete step (what open_latest loads)
    std::string problem;         // why it is incomplete, or "unreadable: " and why
    std::uint64_t bytes = 0;     // bytes of the files in its own directory
    std::uint64_t referenced_bytes = 0;   // bytes of other checkpoints' files it reuses
    std::vector<std::string> bases;       // checkpoints whose files it references
    std::uint32_t writers = 0;
    std::uint64_t generation = 0;
    std::uint64_t world_size = 0;
    std::uint64_t age_seconds = 0;        // since the directory was last modified
};

/* Every checkpoint directory under `root`, complete or not, sorted by step. */
Result<std::vector<CheckpointEntry>> list(const std::string &root);

struct GcPolicy {
    std::uint32_t keep_last = 1;      // keep the K complete checkpoints with the highest steps
    std::uint64_t keep_every = 0;     // and every checkpoint whose step is a multiple of M
    std::uint64_t grace_seconds = 300;   // leave incomplete ones younger than this (in flight)
    bool dry_run = false;
};

struct GcReport {
    std::vector<std::string> kept;              // checkpoint names kept by the policy
    std::vector<std::string> removed;           // directories removed entirely
    std::vector<std::string> removed_files;     // files removed from directories kept for
                                                // files still referenced
    std::vector<std::string> retained_for_references;   // unkept, but referenced files stay
    std::vector<std::string> skipped;           // incomplete but younger than the grace time
    std::vector<std::string> unreadable;        // "NAME: reason" of each unreadable checkpoint;
                                                // if any, gc removed only partial directories
    std::uint64_t bytes_freed = 0;
};

/* Removes incomplete checkpoints and every file no kept checkpoint references; never a file
 * that a kept checkpoint references. While any checkpoint under `root` is unreadable, gc
 * cannot know which files it references: it removes only partial directories older than the
 * grace time, keeps everything else and lists the unreadable ones in GcReport::unreadable.
 * Afterwards it points ROOT/latest at the newest committed checkpoint at that moment. */
Result<GcReport> gc(const std::string &root, const GcPolicy &policy);

/* Parses a manifest as stored in index.h5 (exposed for the fuzz target and tools). */
Result<Manifest> parse_manifest(const std::string &json);
std::string manifest_to_json(const Manifest &m);

}  // namespace ckpt
}  // namespace omni

#endif
