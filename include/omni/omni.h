/* libomni: the elastic data-parallel runtime linked into trainers (slurm-omni, issue 6).
 *
 * This header holds the parts of the C API that exist today: error reporting and the sample
 * ledger. The ledger answers "which global sample indices does DP rank r process in
 * micro-step m of the current step" for an epoch order fixed by a seed, keeps the global
 * batch B fixed while the DP size d changes (gradient accumulation GA = B / (b * d), an error
 * when not integral) and guarantees that every sample of every epoch is consumed exactly once
 * whatever sequence of resizes happens at step boundaries.
 *
 * Model: the data is the endless concatenation of per-epoch permutations of [0, D); step k
 * consumes stream positions [k*B, (k+1)*B), independent of d. Inside a step, rank r owns the
 * contiguous slice [r*B/d, (r+1)*B/d) and walks it in GA micro-batches of b samples.
 *
 * Conventions: every function returns OMNI_OK (0) or a negative omni_status; on failure
 * omni_last_error() describes what was wrong (per thread). No function throws, calls exit()
 * or keeps a pointer it was given. Handles are not thread-safe; use one per thread or lock.
 * Link with -lomni.
 */
#ifndef OMNI_OMNI_H
#define OMNI_OMNI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum omni_status {
    OMNI_OK = 0,
    OMNI_EINVAL = -1,   /* an argument is invalid (out of range, NULL, not integral) */
    OMNI_ENOMEM = -2,   /* out of memory */
    OMNI_ERANGE = -3,   /* an output buffer is too small; the size needed is reported */
    OMNI_EFORMAT = -4,  /* serialised state is malformed or from an incompatible version */
    OMNI_EINTERNAL = -5 /* a bug: please report with omni_last_error() */
} omni_status;

/* The message of the last failed call on this thread ("" when none). Valid until the next
 * libomni call on this thread. */
const char *omni_last_error(void);

typedef struct omni_ledger omni_ledger;

/* Creates a ledger at step 0 of epoch 0.
 * dataset_size D in 1..2^48, global_batch B and micro_batch b in 1..2^40, dp_size d in
 * 1..2^20, and B divisible by b*d. `seed` selects the epoch permutations; the same seed gives
 * the same sample order on every machine. On success *out owns a new handle (free it with
 * omni_ledger_destroy). Errors: OMNI_EINVAL (message names the value), OMNI_ENOMEM. */
int omni_ledger_create(uint64_t dataset_size, uint64_t global_batch, uint64_t micro_batch,
                       uint64_t seed, uint32_t dp_size, omni_ledger **out);

/* Frees a ledger; NULL is a no-op. */
void omni_ledger_destroy(omni_ledger *ledger);

/* GA = B / (b * d) for the current DP size. */
int omni_ledger_grad_accum(const omni_ledger *ledger, uint32_t *grad_accum);

/* Where the ledger stands: committed steps, the epoch of the next sample, and how many
 * samples of that epoch are already consumed. Any output pointer may be NULL. */
int omni_ledger_position(const omni_ledger *ledger, uint64_t *step, uint64_t *epoch,
                         uint64_t *consumed_in_epoch);

/* The b global sample indices (each in 0..D-1) of DP rank `rank` (0..d-1) in micro-step
 * `micro` (0..GA-1) of the current, uncommitted step, written to indices[0..b-1].
 * `capacity` is the length of `indices`; when it is below b, nothing is written,
 * *count = b and OMNI_ERANGE is returned. On success *count = b. */
int omni_ledger_micro_batch(const omni_ledger *ledger, uint32_t rank, uint32_t micro,
                            uint64_t *indices, size_t capacity, size_t *count);

/* Marks the current step's B samples consumed. Call once per optimizer step, at the
 * boundary, on every rank (each rank holds its own copy of the same ledger). */
int omni_ledger_commit_step(omni_ledger *ledger);

/* Changes the DP size at a step boundary (between commit_step and the next micro_batch).
 * Fails with OMNI_EINVAL, leaving the ledger unchanged, when B is not divisible by b*dp_size.
 * The samples of the following steps do not depend on the DP size. */
int omni_ledger_resize(omni_ledger *ledger, uint32_t dp_size);

/* Serialises the ledger as a NUL-terminated JSON text (for checkpoints). When `capacity` is
 * too small nothing is written, *length is the size needed including the NUL, and
 * OMNI_ERANGE is returned. `buffer` may be NULL with capacity 0 to ask for the size. */
int omni_ledger_save(const omni_ledger *ledger, char *buffer, size_t capacity, size_t *length);

/* Restores a ledger from omni_ledger_save()'s text (`length` bytes, NUL not required).
 * Every field is validated; OMNI_EFORMAT names the field that is wrong. */
int omni_ledger_load(const char *text, size_t length, omni_ledger **out);

#ifdef __cplusplus
}
#endif

#endif
