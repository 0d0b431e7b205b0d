/* slurm-omni: libomni-hal C API, for the SPANK and select plugins.
 *
 * A node handle holds everything libomni-hal learnt about one machine (or one hwloc XML file):
 * GPUs, their PCIe/NVLink/NUMA domains, local CPUs, closest NICs and NVMe drives. The handle
 * owns no hwloc topology and no file descriptor; it is read-only after loading, so several
 * threads may query one handle at once.
 *
 * Conventions for every function: the error idiom of omni/status.h. A function returns
 * OMNI_OK (0), or a count or index (>= 0), on success, and a negative omni_status on failure;
 * omni_hal_last_error() then says what was wrong, naming the input and what was expected
 * (per thread). Nothing throws, calls exit() or prints. Codes: OMNI_EINVAL (a NULL handle or
 * argument, an out-of-range index), OMNI_EIO (the topology could not be read or parsed),
 * OMNI_ERANGE (the output buffer is too small), OMNI_ENOENT (no such object, e.g. no NIC near
 * this GPU), OMNI_ENOMEM.
 *  - Strings are written NUL-terminated into caller buffers; OMNI_ERANGE when the buffer
 *    is too small (the buffer then holds as much as fits).
 *  - GPUs are addressed by their index 0..count-1 (the order of `omni-hal show`).
 */
#ifndef OMNI_HAL_H
#define OMNI_HAL_H

#include <stddef.h>

#include "omni/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum omni_hal_domain_kind {
    OMNI_HAL_DOMAIN_PCIE = 0,   /* GPUs below one PCIe root port (PIX/PXB paths) */
    OMNI_HAL_DOMAIN_NVLINK = 1, /* GPUs joined by NVLink, directly or through NVSwitches */
    OMNI_HAL_DOMAIN_NUMA = 2,   /* GPUs local to one NUMA node */
    OMNI_HAL_DOMAIN_NODE = 3    /* all GPUs of the node */
};

typedef struct omni_hal_node omni_hal_node;

/* The message of the last failed call on this thread ("" when none). Valid until the next
 * libomni-hal call on this thread. */
const char *omni_hal_last_error(void);

/* Loads a node. `xml_path`: an hwloc XML file, or NULL/"" for HWLOC_XMLFILE when set, else
 * the live machine (hwloc honours HWLOC_FSROOT). On success *out is a new handle to free with
 * omni_hal_free(); on failure *out is NULL and OMNI_EIO is returned with a message. */
int omni_hal_load(const char *xml_path, omni_hal_node **out);

/* Frees a handle; NULL is accepted. */
void omni_hal_free(omni_hal_node *node);

/* Number of GPUs (>= 0), or OMNI_EINVAL for a NULL handle. */
int omni_hal_gpu_count(const omni_hal_node *node);

/* PCI address of a GPU in DDDD:BB:DD.F form; OMNI_ENOENT for a GPU without one. */
int omni_hal_gpu_bdf(const omni_hal_node *node, int gpu, char *buf, size_t len);

/* CPUs local to a GPU, as a kernel CPU list of OS numbers ("0-11,24-35"), ready for
 * sched_setaffinity via a cpulist parser or for --cpu-bind=map_cpu. */
int omni_hal_gpu_cpus(const omni_hal_node *node, int gpu, char *buf, size_t len);

/* NUMA node of a GPU (>= 0), OMNI_ENOENT when unknown, OMNI_EINVAL for a bad index. */
int omni_hal_gpu_numa(const omni_hal_node *node, int gpu);

/* Closest NICs of a GPU, best first, as a comma-separated list of names ("mlx5_0");
 * OMNI_ENOENT when the node has no NIC. */
int omni_hal_gpu_nics(const omni_hal_node *node, int gpu, char *buf, size_t len);

/* Closest NVMe drives (block device names, comma-separated); OMNI_ENOENT when none. */
int omni_hal_gpu_nvme(const omni_hal_node *node, int gpu, char *buf, size_t len);

/* Path type between two GPUs as nvidia-smi names it ("X", "NV6", "PIX", "PXB", "PHB",
 * "NODE", "SYS"). */
int omni_hal_gpu_path(const omni_hal_node *node, int a, int b, char *buf, size_t len);

/* Parses "pcie", "nvlink", "numa" or "node" into *kind; any other text is OMNI_EINVAL
 * with a message listing the kinds. */
int omni_hal_domain_kind_parse(const char *text, enum omni_hal_domain_kind *kind);

/* Number of domains of a kind that hold at least one GPU (>= 0). */
int omni_hal_domain_count(const omni_hal_node *node, enum omni_hal_domain_kind kind);

/* The domain (0..omni_hal_domain_count-1) of a kind that holds a GPU. */
int omni_hal_gpu_domain(const omni_hal_node *node, int gpu, enum omni_hal_domain_kind kind);

/* The GPUs of one domain: writes up to `cap` GPU indexes, ascending, and returns how many
 * the domain holds (which may exceed cap: call again with a larger array). */
int omni_hal_domain_gpus(const omni_hal_node *node, enum omni_hal_domain_kind kind, int domain,
                         int *gpus, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
