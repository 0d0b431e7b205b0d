/* The C API used from C, as a SPANK plugin written in C would: the header must compile as
 * C11 with warnings as errors, and the library must link into a C program. */
#include <stdio.h>
#include <string.h>

#include "hal/hal.h"

int main(int argc, char **argv) {
    const char *file = argc > 1 ? argv[1] : OMNI_FIXTURES "/power8gpudistances.xml";
    omni_hal_node *node = NULL;
    if (omni_hal_load(file, &node) != OMNI_OK) {
        fprintf(stderr, "FAIL: %s\n", omni_hal_last_error());
        return 1;
    }
    enum omni_hal_domain_kind kind;
    char buf[64];
    int ok = omni_hal_gpu_count(node) == 4 &&
             omni_hal_domain_kind_parse("nvlink", &kind) == OMNI_OK &&
             omni_hal_domain_count(node, kind) == 2 &&
             omni_hal_gpu_path(node, 2, 3, buf, sizeof buf) == OMNI_OK && strcmp(buf, "NV2") == 0;
    omni_hal_free(node);
    puts(ok ? "PASS: C API from C" : "FAIL: unexpected answers");
    return ok ? 0 : 1;
}
