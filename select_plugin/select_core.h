/*
 * The C face of select/omni's C++ parts, for its Slurm glue (select_omni.c): the site's domain
 * layouts, a job's unit request read from its spank environment, and the placement core's
 * choice of nodes and GPUs (placement/placement.h, place_nodes).
 *
 * The error idiom of the project's C APIs (omni/status.h): OMNI_OK or a negative omni_status,
 * the message in omni_select_last_error() (per thread). No exception crosses into slurmctld;
 * nothing here blocks, takes a lock or touches Slurm's data.
 */
#ifndef OMNI_SELECT_CORE_H
#define OMNI_SELECT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "omni/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The message of this thread's last failed call ("" if none); valid until its next call. */
const char *omni_select_last_error(void);

/* The domain layouts of a site topology file (omni-topology(5)). */
typedef struct omni_select_site omni_select_site_t;

/* Reads and checks the file at `path` into *out. OMNI_EIO: it cannot be read or is not a
 * valid site file (the message names the file and what is wrong); OMNI_ENOENT: it does not
 * exist. */
int omni_select_site_load(const char *path, omni_select_site_t **out);

/* Frees a site (NULL: nothing). */
void omni_select_site_free(omni_select_site_t *site);

/* The number of nodes the file lists. */
size_t omni_select_site_nodes(const omni_select_site_t *site);

/* The position of `hostname` in the file, and its GPU count in *gpus; -1 when the file does
 * not list it. */
long omni_select_site_find(const omni_select_site_t *site, const char *hostname, unsigned *gpus);

/* A job's unit request, as the SPANK plugin recorded it (OMNI_UNIT_SIZE, OMNI_UNIT_DOMAIN,
 * OMNI_ELASTIC_MIN/MAX). */
typedef struct omni_select_job {
    unsigned ranks_per_unit; /* N */
    int kind;                /* placement::Kind: 0 pcie, 1 nvlink, 2 numa */
    const char *kind_name;   /* static text */
    unsigned min_units;      /* the elastic range; 1 and UINT32_MAX when the job is not elastic */
    unsigned max_units;
} omni_select_job_t;

/* Reads the request from a job's spank environment (`envc` strings NAME=VALUE). OMNI_OK with
 * *out filled when the job's units must lie inside a pcie, nvlink or numa domain;
 * OMNI_ENOENT when it has none to honour (no --omni-unit, or units of kind node or any,
 * which whole GPUs per node already keep); OMNI_EINVAL when the variables do not parse (the
 * message says which). */
int omni_select_job_read(char *const *env, unsigned envc, omni_select_job_t *out);

/* One node Slurm considers for the job. */
typedef struct omni_select_node {
    long site_node;     /* from omni_select_site_find */
    uint64_t free_gpus; /* bit g: GPU g is used by no job */
    int required;       /* the job names the node: it must be chosen */
    uint64_t gpus;      /* out: the GPUs of its units when chosen, else 0 */
} omni_select_node_t;

/* Chooses among `nodes` those that hold `units_per_node` units of `job` each, best fit
 * first, between `min_nodes` and `max_nodes` of them (placement::place_nodes), and sets
 * their `gpus`. Returns the number chosen (0: not now), OMNI_EINVAL for a request no node
 * count can satisfy or a site_node out of range. */
int omni_select_place(const omni_select_site_t *site, const omni_select_job_t *job, unsigned units_per_node,
                      unsigned min_nodes, unsigned max_nodes, omni_select_node_t *nodes, size_t n);

#ifdef __cplusplus
}
#endif

#endif
