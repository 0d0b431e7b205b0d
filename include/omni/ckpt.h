/* slurm-omni: C API of libomni-ckpt, HDF5 checkpoints for elastic training.
 *
 * For trainers and runtimes that are not C++ (or that want a stable ABI). The C++ API is in
 * omni/ckpt_cpp.h; the on-disk format in omni-ckpt(5).
 *
 * Conventions, for every function below:
 *  - the error idiom of omni/status.h: returns OMNI_OK (0) on success or a negative
 *    omni_status, and omni_ckpt_last_error() then returns a message naming the checkpoint,
 *    tensor and file involved (valid until the next call on the same thread). The codes:
 *    OMNI_EINVAL a bad argument (NULL, out of range, not a value of its enum);
 *    OMNI_EIO the checkpoint's files could not be written or read, or what they hold is not
 *    valid (a malformed or inconsistent checkpoint, a name or range it does not hold);
 *    OMNI_ERANGE a caller's buffer too small; OMNI_ENOMEM; OMNI_EINTERNAL a bug.
 *    No function throws or aborts on bad input;
 *  - pointers are borrowed for the duration of the call only, except where noted;
 *  - shapes are arrays of `ndim` uint64_t (1 <= ndim <= 8), row-major, dimension 0 first;
 *  - handles are not thread-safe: use one handle from one thread at a time (different handles
 *    may be used concurrently).
 *
 * A checkpoint of a job with W writing ranks:
 *    every rank:   omni_ckpt_writer_open(root, step, rank, attempt, base, &w);
 *                  omni_ckpt_writer_add_tensor(w, ...);            (its own slices)
 *                  omni_ckpt_writer_add_rank_state(w, rank, ...);
 *                  omni_ckpt_writer_finish(w); omni_ckpt_writer_free(w);
 *    barrier;
 *    one rank:     omni_ckpt_commit(root, W, attempt, &meta, path, sizeof path);
 */
#ifndef OMNI_CKPT_H
#define OMNI_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "omni/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OMNI_CKPT_FP32 = 0,
    OMNI_CKPT_BF16 = 1,
    OMNI_CKPT_FP16 = 2,
    OMNI_CKPT_INT64 = 3,
    OMNI_CKPT_UINT8 = 4,
    /* Not a dtype. It makes every int a value of the type, so that a wrong value from a
     * caller is refused with OMNI_EINVAL instead of being undefined behaviour inside the
     * library, which is C++; the same in the other enums below. */
    OMNI_CKPT_DTYPE_FORCE_INT = 0x7fffffff
} omni_ckpt_dtype;

/* How an incremental writer decides whether a slice changed since the base checkpoint. */
typedef enum {
    OMNI_CKPT_DETECT = 0,     /* hash and compare with the base (always correct) */
    OMNI_CKPT_CHANGED = 1,    /* caller knows it changed: write it */
    OMNI_CKPT_UNCHANGED = 2,  /* caller knows it is unchanged: reuse the base's slice */
    OMNI_CKPT_CHANGE_FORCE_INT = 0x7fffffff   /* not a mode (see omni_ckpt_dtype) */
} omni_ckpt_change;

typedef struct {
    uint64_t step;
    uint64_t generation;
    uint64_t world_size;
    const char *unit_layout;      /* NULL or printable text, <= 255 bytes */
    const char *lr_kind;          /* NULL or e.g. "cosine", <= 64 bytes */
    double lr_base;
    uint64_t lr_warmup_steps;
    uint64_t lr_total_steps;
    uint64_t lr_last_step;
    uint64_t epoch;
    uint64_t seed;
} omni_ckpt_meta;

typedef struct omni_ckpt_writer omni_ckpt_writer;
typedef struct omni_ckpt_async omni_ckpt_async;
typedef struct omni_ckpt_reader omni_ckpt_reader;

/* The message of the last failure on this thread ("" if none). */
const char *omni_ckpt_last_error(void);

/* ---- writing ---- */

/* Starts rank `rank`'s shard of checkpoint `step` under directory `root` (created if
 * missing). `attempt` (NULL = "0") tells attempts at the same step apart: pass the job's
 * generation; 1..32 characters of [A-Za-z0-9_-]. `base` (NULL = full checkpoint) is the path
 * of an earlier committed checkpoint in the same root: slices equal to the base's are then
 * referenced instead of written. On success *out is a writer to free with
 * omni_ckpt_writer_free. */
int omni_ckpt_writer_open(const char *root, uint64_t step, uint32_t rank, const char *attempt,
                          const char *base, omni_ckpt_writer **out);

/* Adds this rank's slice [offset, offset+count) of logical tensor `name` with global shape
 * `shape`; `data` holds prod(count) elements of `dtype`, read during the call only. Every
 * element of a tensor must be added by exactly one rank (commit checks). */
int omni_ckpt_writer_add_tensor(omni_ckpt_writer *w, const char *name, omni_ckpt_dtype dtype,
                                uint32_t ndim, const uint64_t *shape, const uint64_t *offset,
                                const uint64_t *count, const void *data,
                                omni_ckpt_change change);

/* Turns write tracking on (on != 0) or off for the slices added from now on: with
 * OMNI_CKPT_DETECT, a slice of 64 KiB or more whose pages nobody wrote since this process
 * last checkpointed it (same address and length) is compared with the base by its remembered
 * hash instead of being hashed again. Memory written by a device through DMA must not be
 * tracked. See WriterOptions::track_writes in omni/ckpt_cpp.h and omni-ckpt(5). Where the
 * kernel cannot track writes the writer hashes as usual. */
int omni_ckpt_writer_track_writes(omni_ckpt_writer *w, int on);

/* NULL if write tracking works in this process, else why not (valid until the next call
 * from this thread). */
const char *omni_ckpt_write_tracking_status(void);

/* Records the RNG state bytes and consumed sample indices of rank `rank` (normally the
 * writer's own). Either array may be empty (pointer may then be NULL). */
int omni_ckpt_writer_add_rank_state(omni_ckpt_writer *w, uint32_t rank, const void *rng,
                                    size_t rng_bytes, const int64_t *consumed,
                                    size_t n_consumed);

/* Writes and publishes the shard (shard-R.h5, fsynced; or shard-R.ref for a rank that wrote no
 * slice, see omni-ckpt(5)). After success the writer can only be freed. */
int omni_ckpt_writer_finish(omni_ckpt_writer *w);

/* Frees a writer; an unfinished one removes its temporary file. NULL is a no-op. */
void omni_ckpt_writer_free(omni_ckpt_writer *w);

/* After all `writers` ranks finished (the caller's barrier): checks that the shards tile every
 * tensor, writes the index, fsyncs and renames ROOT/.step-N.partial-ATTEMPT to ROOT/step-N,
 * then points ROOT/latest at it. Writes the committed path into path_out (may be NULL) if
 * it fits in path_len bytes. The previous checkpoints are untouched on any failure. */
int omni_ckpt_commit(const char *root, uint32_t writers, const char *attempt,
                     const omni_ckpt_meta *meta, char *path_out, size_t path_len);

/* Removes ROOT/.step-N.partial-ATTEMPT (step N written as `attempt`, NULL: "0"), a checkpoint
 * that will not be committed because a writer failed, so that its space comes back at once.
 * Call it once every writer of the attempt has stopped. No such directory is success. */
int omni_ckpt_abandon(const char *root, uint64_t step, const char *attempt);

/* ---- asynchronous persist ---- */

/* How an asynchronous writer takes its snapshot of a slice (omni_ckpt_async_set_snapshot). */
typedef enum {
    /* add_tensor copies the slice into host memory the handle keeps; the caller's buffer is
     * free again when add_tensor returns. The default. */
    OMNI_CKPT_SNAPSHOT_COPY = 0,
    /* add_tensor write-protects the caller's buffer (userfaultfd) instead of copying it; the
     * persist thread makes the copy, un-protecting as it goes, before it writes anything; a
     * write that gets to a part first stops while the library copies the enclosing 2 MiB.
     * The checkpoint holds the values as of add_tensor. The
     * buffer must stay allocated and mapped (not freed, munmap'ed, mremap'ed or
     * madvise(MADV_DONTNEED)'ed) until omni_ckpt_async_wait returns or the next
     * omni_ckpt_async_begin; only CPU stores are seen (memory a device writes by DMA belongs
     * in COPY mode); without CAP_SYS_PTRACE or vm.unprivileged_userfaultfd = 1, a system call
     * writing into a protected buffer (read(2), recv(2)) fails with EFAULT. Slices below
     * 64 KiB and memory userfaultfd cannot protect (file or shared mappings, hugetlbfs
     * pages) are copied; so is everything with OMNI_CKPT_NO_UFFD=1 in the environment. See
     * omni-ckpt(5). */
    OMNI_CKPT_SNAPSHOT_COPY_ON_WRITE = 1,
    OMNI_CKPT_SNAPSHOT_FORCE_INT = 0x7fffffff   /* not a mode (see omni_ckpt_dtype) */
} omni_ckpt_snapshot;

/* What the current (or last) snapshot of a handle did; see omni_ckpt_async_get_stats. */
typedef struct {
    uint64_t slices_copied;      /* slices copied by add_tensor */
    uint64_t slices_protected;   /* slices left in place, write-protected */
    uint64_t bytes_copied;       /* by add_tensor, with the partial pages around protected slices */
    uint64_t bytes_protected;    /* write-protected in place */
    uint64_t faults;             /* writes that stopped at the write protection */
    uint64_t bytes_faulted;      /* copied for them (a 2 MiB chunk each, at most) */
    int kernel_writes_fail;      /* non-zero: system calls writing into protected memory fail */
    const char *fallback;        /* why a slice of a copy-on-write snapshot was copied (the
                                  * first one), "" if none; valid until the next call on the
                                  * handle */
    uint64_t slices_referenced;  /* not snapshotted: the base holds them unchanged (by the
                                  * caller's OMNI_CKPT_UNCHANGED, or by write tracking) */
    uint64_t bytes_referenced;
    uint64_t bytes_drained;      /* copied by the persist before it wrote anything: the
                                  * protected bytes no write reached first */
} omni_ckpt_async_stats;

/* A writer that snapshots the slices (by default into reusable host memory) and persists in
 * a background thread. */
int omni_ckpt_async_create(omni_ckpt_async **out);
/* Sets the snapshot mode of the checkpoints begun from now on. */
int omni_ckpt_async_set_snapshot(omni_ckpt_async *a, omni_ckpt_snapshot mode);
/* Write tracking (see omni_ckpt_writer_track_writes) for the checkpoints begun from now on:
 * a tracked slice that nobody wrote since its checksum was taken, and that equals the
 * base's, is not snapshotted at all. */
int omni_ckpt_async_track_writes(omni_ckpt_async *a, int on);
/* Fills *out with the statistics of the current (or last) snapshot. */
int omni_ckpt_async_get_stats(omni_ckpt_async *a, omni_ckpt_async_stats *out);
/* Like omni_ckpt_writer_open; waits for the previous persist of this handle first and fails
 * if that persist failed and was never collected by omni_ckpt_async_wait. */
int omni_ckpt_async_begin(omni_ckpt_async *a, const char *root, uint64_t step, uint32_t rank,
                          const char *attempt, const char *base);
/* Takes the slice's snapshot (a copy, or write protection: the only stall) and returns. */
int omni_ckpt_async_add_tensor(omni_ckpt_async *a, const char *name, omni_ckpt_dtype dtype,
                               uint32_t ndim, const uint64_t *shape, const uint64_t *offset,
                               const uint64_t *count, const void *data,
                               omni_ckpt_change change);
int omni_ckpt_async_add_rank_state(omni_ckpt_async *a, uint32_t rank, const void *rng,
                                   size_t rng_bytes, const int64_t *consumed, size_t n_consumed);
/* Starts the background persist of the snapshot. */
int omni_ckpt_async_submit(omni_ckpt_async *a);
/* Waits for the persist; returns its result. Call before the commit barrier. */
int omni_ckpt_async_wait(omni_ckpt_async *a);
/* Waits for an in-flight persist and frees. NULL is a no-op. */
void omni_ckpt_async_free(omni_ckpt_async *a);

/* ---- reading ---- */

/* Opens a committed checkpoint directory; with `root_latest` non-zero, `path` is a root and
 * the complete checkpoint with the highest step is opened. Fails if the checkpoint is
 * incomplete, of an unknown format version, or references a missing file. `verify` non-zero
 * checks the bytes read against their checksums (recommended): a slice read whole against
 * the manifest's, part of a slice against the block checksums of the blocks it touches
 * (omni-ckpt(5), BLOCK CHECKSUMS). */
int omni_ckpt_reader_open(const char *path, int root_latest, int verify,
                          omni_ckpt_reader **out);

/* Metadata; strings in *meta stay valid until the reader is closed. */
int omni_ckpt_reader_meta(omni_ckpt_reader *r, omni_ckpt_meta *meta);

/* Number of logical tensors, and the i-th one's name (valid until close), dtype and shape
 * (`shape` must have room for 8 entries). */
size_t omni_ckpt_reader_tensor_count(omni_ckpt_reader *r);
int omni_ckpt_reader_tensor_info(omni_ckpt_reader *r, size_t i, const char **name,
                                 omni_ckpt_dtype *dtype, uint32_t *ndim, uint64_t *shape);

/* Reads slice [offset, offset+count) of tensor `name` into dst (dst_bytes must be exactly
 * prod(count) * dtype size). Any slice is allowed: loading at another data-parallel size. */
int omni_ckpt_reader_read(omni_ckpt_reader *r, const char *name, uint32_t ndim,
                          const uint64_t *offset, const uint64_t *count, void *dst,
                          size_t dst_bytes);

/* Rank `rank`'s state. Call with rng == NULL and consumed == NULL to learn the sizes in
 * *rng_bytes and *n_consumed; then with buffers of at least those sizes. */
int omni_ckpt_reader_rank_state(omni_ckpt_reader *r, uint32_t rank, void *rng, size_t *rng_bytes,
                                int64_t *consumed, size_t *n_consumed);

void omni_ckpt_reader_close(omni_ckpt_reader *r);

#ifdef __cplusplus
}
#endif

#endif
