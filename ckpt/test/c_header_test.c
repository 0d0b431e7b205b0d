/* omni/ckpt.h is usable from plain C (C11, warnings as errors): write one shard, commit,
 * read it back. Prints nothing and exits 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omni/ckpt.h"

static int check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", what, omni_ckpt_last_error());
        exit(1);
    }
    return rc;
}

int main(void) {
    char root[] = "/tmp/omni-ckpt-c.XXXXXX";
    if (!mkdtemp(root)) return 1;
    const int64_t data[6] = {1, -2, 3, -4, 5, -6};
    const uint64_t shape[2] = {3, 2}, off[2] = {0, 0};
    omni_ckpt_writer *w = NULL;
    check(omni_ckpt_writer_open(root, 1, 0, NULL, NULL, &w), "open");
    check(omni_ckpt_writer_add_tensor(w, "optim/step", OMNI_CKPT_INT64, 2, shape, off, shape, data,
                                      OMNI_CKPT_CHANGED), "add_tensor");
    check(omni_ckpt_writer_finish(w), "finish");
    omni_ckpt_writer_free(w);
    omni_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = 1;
    meta.world_size = 1;
    check(omni_ckpt_commit(root, 1, NULL, &meta, NULL, 0), "commit");
    omni_ckpt_reader *r = NULL;
    check(omni_ckpt_reader_open(root, 1, 1, &r), "reader_open");
    int64_t back[2];
    const uint64_t roff[2] = {1, 0}, rcnt[2] = {1, 2};
    check(omni_ckpt_reader_read(r, "optim/step", 2, roff, rcnt, back, sizeof back), "read");
    omni_ckpt_reader_close(r);
    omni_ckpt_async *a = NULL;
    omni_ckpt_async_stats st;
    check(omni_ckpt_async_create(&a), "async_create");
    check(omni_ckpt_async_set_snapshot(a, OMNI_CKPT_SNAPSHOT_COPY_ON_WRITE), "set_snapshot");
    check(omni_ckpt_async_get_stats(a, &st), "get_stats");
    omni_ckpt_async_free(a);
    if (st.faults != 0 || st.fallback == NULL) return 1;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) return 1;
    return back[0] == 3 && back[1] == -4 ? 0 : 1;
}
