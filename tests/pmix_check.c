/* pmix_check: a PMIx wire-up check run under `srun --mpi=pmix`.
 *
 * Every rank Puts a value derived from its rank (and its host name), Commits, Fences with
 * data collection, then Gets every peer's value and checks it against what that peer must
 * have put. Exit 0 when all values are right on this rank, 1 otherwise; each rank prints one
 * line so a test can count ranks and hosts.
 */
#include <pmix.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_NUM "omni.check.num"
#define KEY_HOST "omni.check.host"

/* The value rank r must publish; any function of r that peers can recompute works. */
static uint64_t expected_for(uint32_t r) { return 0x9e3779b97f4a7c15ULL * (uint64_t)(r + 1); }

int main(void) {
    pmix_proc_t me, peer, wild;
    pmix_value_t val, *got = NULL;
    pmix_info_t collect;
    char host[256];
    int rc, bad = 0;
    uint32_t size, r;
    bool flag = true;

    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_check: PMIx_Init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    if ((rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &got)) != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_check: rank %u: get job size: %s\n", me.rank, PMIx_Error_string(rc));
        PMIx_Finalize(NULL, 0);
        return 1;
    }
    size = got->data.uint32;
    PMIX_VALUE_RELEASE(got);

    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = '\0';

    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_UINT64;
    val.data.uint64 = expected_for(me.rank);
    if ((rc = PMIx_Put(PMIX_GLOBAL, KEY_NUM, &val)) != PMIX_SUCCESS) goto fail;
    val.type = PMIX_STRING;
    val.data.string = host;
    if ((rc = PMIx_Put(PMIX_GLOBAL, KEY_HOST, &val)) != PMIX_SUCCESS) goto fail;
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) goto fail;

    PMIX_INFO_CONSTRUCT(&collect);
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
    if ((rc = PMIx_Fence(&wild, 1, &collect, 1)) != PMIX_SUCCESS) goto fail;

    for (r = 0; r < size; ++r) {
        PMIX_LOAD_PROCID(&peer, me.nspace, r);
        if (PMIx_Get(&peer, KEY_NUM, NULL, 0, &got) != PMIX_SUCCESS || got->type != PMIX_UINT64) {
            fprintf(stderr, "pmix_check: rank %u: no value from rank %u\n", me.rank, r);
            bad++;
        } else if (got->data.uint64 != expected_for(r)) {
            fprintf(stderr, "pmix_check: rank %u: rank %u put %llu, expected %llu\n", me.rank, r,
                    (unsigned long long)got->data.uint64, (unsigned long long)expected_for(r));
            bad++;
        }
        if (got) PMIX_VALUE_RELEASE(got);
        got = NULL;
        if (PMIx_Get(&peer, KEY_HOST, NULL, 0, &got) != PMIX_SUCCESS || got->type != PMIX_STRING) {
            fprintf(stderr, "pmix_check: rank %u: no host from rank %u\n", me.rank, r);
            bad++;
        }
        if (got) PMIX_VALUE_RELEASE(got);
        got = NULL;
    }
    printf("pmix_check: rank %u of %u on %s (%s): %s\n", me.rank, size, host,
           getenv("SLURMD_NODENAME") ? getenv("SLURMD_NODENAME") : "?",
           bad ? "MISMATCH" : "all peer values correct");
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return bad ? 1 : 0;

fail:
    fprintf(stderr, "pmix_check: rank %u: %s\n", me.rank, PMIx_Error_string(rc));
    PMIx_Finalize(NULL, 0);
    return 1;
}
