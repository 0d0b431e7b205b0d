/* slurm-omni: the status codes shared by every C API of the project (libomni, libomni-ckpt,
 * and libomni-hal inside the tree).
 *
 * The one error idiom of those APIs:
 *  - a function returns OMNI_OK (0) on success or a negative omni_status on failure; one that
 *    returns a count or an index returns it as a value >= 0 and still fails with a negative
 *    omni_status;
 *  - after a failure, the library's per-thread message says what was wrong, naming the input
 *    and what was expected: omni_last_error() for libomni, omni_ckpt_last_error() for
 *    libomni-ckpt, omni_hal_last_error() for libomni-hal. It is "" before the first failure and
 *    stays valid until the next call into the same library on the same thread;
 *  - no function throws, calls exit() or prints.
 * Codes are stable: a new one is only ever added at the end.
 */
#ifndef OMNI_STATUS_H
#define OMNI_STATUS_H

typedef enum omni_status {
    OMNI_OK = 0,
    OMNI_EINVAL = -1,    /* an argument is invalid (out of range, NULL, not integral) */
    OMNI_ENOMEM = -2,    /* out of memory */
    OMNI_ERANGE = -3,    /* an output buffer is too small; the size needed is reported */
    OMNI_EFORMAT = -4,   /* serialised state is malformed or from an incompatible version */
    OMNI_EINTERNAL = -5, /* a bug: please report with the message */
    OMNI_ESTATE = -6,    /* called in the wrong state (not initialised, before omni_start, ...) */
    OMNI_ECOMM = -7,     /* the coordinator or a peer failed: refused, timed out, lost */
    OMNI_EIO = -8,       /* files could not be read or written, or what they hold is not valid */
    OMNI_ENOENT = -9     /* no such object (a tensor, a rank's state, a NIC near a GPU, ...) */
} omni_status;

#endif /* OMNI_STATUS_H */
