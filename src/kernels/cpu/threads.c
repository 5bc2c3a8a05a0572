/* threads.c: the one place that sets OpenMP and OpenBLAS thread counts (CLI --threads), the fork
 * threshold, and k_foreach, the parallel loop the layers and solvers use. */
#include "../kernels.h"
#include "threading.h"

#ifdef IM_OPENBLAS
#include <cblas.h>
#endif

void k_set_threads(int n) {
    if (n < 1) n = 1;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
#ifdef IM_OPENBLAS
    /* OpenBLAS only ever gets products too small for a parallel region (cpu/gemm.c use_blas):
     * on one thread, so that its pool never spins against OpenMP's. */
    openblas_set_num_threads(1);
#endif
}

int k_get_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Read on every kernel call (threading.h kt_team); written only by tests and benches, outside
 * any kernel call. */
static double fork_ns = KT_MIN_NS;

void k_set_fork_ns(double ns) { fork_ns = ns >= 0 ? ns : KT_MIN_NS; }
double k_fork_ns(void) { return fork_ns; }

/* One range per thread, [n t / nt, n (t + 1) / nt): the split of schedule(static). */
void k_foreach(long n, double ns_per_item, KForeachFn fn, void *ctx) {
    if (n <= 0) return;
    int nt = kt_team((double)n * ns_per_item, n);
    if (nt == 1) {
        fn(ctx, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        long t = kt_thread_id(), team = nt;
#ifdef _OPENMP
        team = omp_get_num_threads();
#endif
        long i0 = n * t / team, i1 = n * (t + 1) / team;
        if (i0 < i1) fn(ctx, i0, i1);
    }
}

const char *k_blas_name(void) {
#ifdef IM_OPENBLAS
    return "openblas";
#else
    return "none";
#endif
}

const char *k_omp_name(void) {
#ifdef _OPENMP
    return "omp";
#else
    return "serial";
#endif
}
