/* th.h: a tiny test harness (in the spirit of sds' testhelp.h).
 *
 * Each test binary counts checks, prints every failure with file:line, and ends with
 * `<name>: N passed, N failed` alone on a line; main returns th_done(), non-zero on any failure.
 * tests/run.sh sums the lines of all binaries into the closing line CI reads.
 */
#ifndef IMPLICIT_TH_H
#define IMPLICIT_TH_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../src/core/rng.h"
#include "../src/kernels/kernels.h"

static int th_passed, th_failed;
static const char *th_name = "tests";

#define TH_CHECK(cond, ...)                                                    \
    do {                                                                       \
        if (cond) {                                                            \
            th_passed++;                                                       \
        } else {                                                               \
            th_failed++;                                                       \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                        \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
            fflush(stdout);                                                    \
        }                                                                      \
    } while (0)

/* max_i |a_i - b_i| / max(max_i |b_i|, floor): a relative error robust to tiny entries. */
static inline double th_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= num)) num = d; /* also catches NaN */
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* Compare two arrays; report name and error on failure. Returns the error. */
#define TH_CLOSE(a, b, n, tol, name)                                                   \
    do {                                                                               \
        double th_e_ = th_rel_err((a), (b), (n));                                      \
        TH_CHECK(th_e_ <= (tol), "%s: rel err %.3g > %.3g", (name), th_e_, (double)(tol)); \
    } while (0)

static inline void th_fill_uniform(float *x, size_t n, Rng *r, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform_range(r, lo, hi);
}

static inline void th_fill_normal(float *x, size_t n, Rng *r, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(r);
}

static inline float *th_alloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) { printf("FAIL: out of memory\n"); exit(2); }
    return p;
}

/* The smaller thread count of a bit-identity pair (the larger is one more or beyond). Our kernels
 * give the same bits at any thread count, but in a BLAS build one thread hands matrix products to
 * OpenBLAS, whose summation order is its own (and differs between its kernels for each processor),
 * so there the pairs that compare one code path start at two threads. */
static inline int th_thread_base(void) { return strcmp(k_blas_name(), "none") ? 2 : 1; }

/* The whole file at path, NUL-terminated (malloc'd; *n = its length if n), or NULL if it cannot
 * be read. Tests run from the repository root (tests/run.sh), so paths are relative to it. */
static inline char *th_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (len >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)len + 1)) != NULL) {
        size_t got = fread(buf, 1, (size_t)len, f);
        if (got != (size_t)len) { free(buf); buf = NULL; }
        else { buf[got] = 0; if (n) *n = got; }
    }
    fclose(f);
    return buf;
}

/* Runs the shell command cmd, which sends the output the caller wants into the file `log`
 * ("... > log 2>&1"), and reads that file back into out (NUL-terminated, at most cap - 1 bytes;
 * empty when there is none). Returns the exit status, -1 when the command did not exit. */
static inline int th_run_log(const char *cmd, const char *log, char *out, size_t cap) {
    int st = system(cmd);
    out[0] = 0;
    FILE *f = fopen(log, "rb");
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = 0;
        fclose(f);
    }
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One run of a bit-identity pair at n threads: every kernel call forks whenever it has two items
 * (kernels.h k_set_fork_ns(0)), so that the small shapes of tests reach the parallel code that
 * the default threshold keeps for large calls. th_threads_restore(keep) ends the pair. */
static inline void th_bitid_threads(int n) {
    k_set_threads(n);
    k_set_fork_ns(0);
}
static inline void th_threads_restore(int n) {
    k_set_threads(n);
    k_set_fork_ns(-1);
}

static inline int th_done(void) {
    printf("%s: %d passed, %d failed\n", th_name, th_passed, th_failed);
    return th_failed ? 1 : 0;
}

#endif
