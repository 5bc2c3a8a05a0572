/* cpu/kscratch.c: grow-only per-call-site scratch of the fast CPU kernels; see kscratch.h. */
#include "kscratch.h"

#include <stdlib.h>

#include "../../core/check.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Thread-local: kernels called from two application threads at once must not share buffers.
 * Only the caller's thread touches these; OpenMP workers just use the memory it hands out. */
static _Thread_local void *ks_buf[KS_COUNT];
static _Thread_local size_t ks_cap[KS_COUNT];

void *kscratch(KsSlot slot, size_t bytes) {
    CHECK((int)slot >= 0 && slot < KS_COUNT, "kscratch: bad slot %d", (int)slot);
#ifdef _OPENMP
    /* a slot is shared by the whole team: growing it from a worker would race */
    CHECK(!omp_in_parallel(), "kscratch: called inside an OpenMP parallel region (slot %d)", (int)slot);
#endif
    if (bytes == 0) bytes = 1;
    if (bytes > ks_cap[slot]) {
        /* grow by at least 1/8 so that slowly increasing sizes do not reallocate every call */
        size_t want = bytes + bytes / 8;
        want = (want + 63) / 64 * 64;
        void *p = NULL;
        free(ks_buf[slot]); /* old contents are dead: no copy */
        ks_buf[slot] = NULL;
        ks_cap[slot] = 0;
        CHECK(posix_memalign(&p, 64, want) == 0, "kscratch: out of memory (%zu bytes, slot %d)", want,
              (int)slot);
        ks_buf[slot] = p;
        ks_cap[slot] = want;
    }
    return ks_buf[slot];
}
