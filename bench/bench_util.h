/* bench_util.h: timing helpers shared by the bench programs. */
#ifndef IMPLICIT_BENCH_UTIL_H
#define IMPLICIT_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* CPU seconds of the whole process (all threads): on a shared machine, time slices lost to other
 * jobs do not count, so single-thread comparisons are steadier than with the wall clock. */
static inline double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n timings (sorts in place). */
static inline double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

#endif
