/* threading.h: the OpenMP queries the CPU kernels share (internal to src/kernels/cpu/), with
 * serial fallbacks so every kernel builds with OMP=0. */
#ifndef IMPLICIT_KERNELS_THREADING_H
#define IMPLICIT_KERNELS_THREADING_H

#ifdef _OPENMP
#include <omp.h>
#endif

static inline int kt_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int kt_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#endif
