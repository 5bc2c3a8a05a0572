/* bench_util.h: what the bench programs share: timing, the machine's roofline (FMA peak and read
 * bandwidth, measured), and the work of each case (FLOPs and bytes, counted from its shapes).
 *
 * A case's "% of roofline" is (time it would take at max(FLOPs / peak, bytes / bandwidth)) /
 * (measured time), with the peak and bandwidth of as many threads as the case ran on. 100% means
 * the case runs at the speed of whichever of the two limits binds; above 100% on a bytes-bound case
 * means its working set stays in cache (the bandwidth here is DRAM's).
 *
 * bench/run.sh runs bench_machine once and hands its numbers to the other programs through the
 * environment (BENCH_MACHINE="threads:gflops:gbs,..."); a program started alone measures them
 * itself (about a second).
 */
#ifndef IMPLICIT_BENCH_UTIL_H
#define IMPLICIT_BENCH_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/core/timer.h"
#include "../src/kernels/kernels.h"
#include "../src/models/model.h"

/* ==== threads ================================================================================= */

/* Runs the cases under the thread policy the CLI sets (--threads goes through k_set_threads): as
 * many OpenMP threads as OMP_NUM_THREADS gives, OpenBLAS kept on one. Without it a linked
 * OpenBLAS starts its own pool of OPENBLAS_NUM_THREADS threads, which spins against OpenMP's and
 * made two-thread runs slower than one in a way no command of ours is. */
static inline void bench_threads_as_cli(void) { k_set_threads(k_get_threads()); }

/* ==== timing ================================================================================== */

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

/* ==== one thread against several, step by step ================================================ */

/* The value of a numeric option (--scaling PAIRS): a whole number from 1 to 100000, else a message
 * naming the program and the option, and exit 2. */
static inline int bench_count_arg(const char *prog, const char *opt, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 100000) {
        fprintf(stderr, "%s: %s takes a whole number from 1 to 100000, not '%s'\n", prog, opt, s);
        exit(2);
    }
    return (int)v;
}

/* --scaling compares one thread with more: with one (OMP_NUM_THREADS=1, or a build without
 * OpenMP) a message naming the program, and exit 2. */
static inline void bench_scaling_needs_threads(const char *prog) {
    if (k_get_threads() >= 2) return;
    fprintf(stderr, "%s: --scaling compares one thread with more, and this run has %d (OMP_NUM_THREADS; a build "
                    "without OpenMP has one)\n", prog, k_get_threads());
    exit(2);
}

/* The speedup of `threads` threads over one, as the median of `pairs` ratios: each pair times one
 * call of step(ctx) at one thread, then one at `threads` (k_set_threads, the CLI's policy), after
 * one untimed call of each. The two calls of a pair run milliseconds apart in one process, so a
 * drift of the host's speed over seconds (20-40% on this project's 2-vCPU hosts, which decided
 * the process-level pairs of run.sh's BENCH_SCALING in some runs) weighs on both sides of every
 * ratio alike. A phase in which the host gives the second vCPU less lasts longer than that,
 * though, and shifts the whole median; so the line also gives best = (fastest one-thread call) /
 * (fastest N-thread call), what the code does when the host lends it N whole cores (contention
 * only ever slows a call down). Prints `scaling <name> threads=N pairs=P speedup=<median> min=...
 * max=... best=... ms_1=<median> ms_N=<median>` and leaves the thread count as it found it. */
typedef void (*BenchStepFn)(void *ctx);

static inline void bench_scaling(const char *name, int threads, int pairs, BenchStepFn step, void *ctx) {
    int before = k_get_threads();
    double *r = malloc(sizeof(double) * (size_t)pairs), *t1 = malloc(sizeof(double) * (size_t)pairs);
    double *tn = malloc(sizeof(double) * (size_t)pairs);
    if (!r || !t1 || !tn) {
        fprintf(stderr, "bench_scaling: out of memory\n");
        exit(1);
    }
    for (int i = -1; i < pairs; i++) { /* i = -1: the warm-up of each */
        k_set_threads(1);
        double a = timer_now();
        step(ctx);
        double b = timer_now();
        k_set_threads(threads);
        step(ctx);
        double c = timer_now();
        if (i >= 0) t1[i] = b - a, tn[i] = c - b, r[i] = (b - a) / (c - b);
    }
    k_set_threads(before);
    double lo = r[0], hi = r[0], f1 = t1[0], fn = tn[0];
    for (int i = 1; i < pairs; i++) {
        lo = r[i] < lo ? r[i] : lo, hi = r[i] > hi ? r[i] : hi;
        f1 = t1[i] < f1 ? t1[i] : f1, fn = tn[i] < fn ? tn[i] : fn;
    }
    printf("scaling %s threads=%d pairs=%d speedup=%.3f min=%.3f max=%.3f best=%.3f ms_1=%.3f ms_%d=%.3f\n", name,
           threads, pairs, median(r, pairs), lo, hi, f1 / fn, 1e3 * median(t1, pairs), threads, 1e3 * median(tn, pairs));
    fflush(stdout);
    free(r), free(t1), free(tn);
}

/* ==== the widest vector ISA this build targets ================================================ */

/* BVec is one register; bv_fma(a, b, c) = a * b + c, one fused instruction where the ISA has one
 * (SSE2 has none: a multiply and an add, the same 2 FLOPs per lane). */
#if defined(__AVX512F__)
#include <immintrin.h>
#define BENCH_ISA "AVX-512"
typedef __m512 BVec;
#define BV_LANES 16
#define bv_set1 _mm512_set1_ps
#define bv_load _mm512_load_ps
#define bv_add _mm512_add_ps
#define bv_fma _mm512_fmadd_ps
#define bv_first _mm512_cvtss_f32
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define BENCH_ISA "AVX2"
typedef __m256 BVec;
#define BV_LANES 8
#define bv_set1 _mm256_set1_ps
#define bv_load _mm256_load_ps
#define bv_add _mm256_add_ps
#define bv_fma _mm256_fmadd_ps
#define bv_first _mm256_cvtss_f32
#elif defined(__SSE2__)
#include <emmintrin.h>
#define BENCH_ISA "SSE2"
typedef __m128 BVec;
#define BV_LANES 4
#define bv_set1 _mm_set1_ps
#define bv_load _mm_load_ps
#define bv_add _mm_add_ps
#define bv_fma(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define bv_first _mm_cvtss_f32
#else
#define BENCH_ISA "scalar"
typedef float BVec;
#define BV_LANES 1
#define bv_set1(x) (x)
#define bv_load(p) (*(p))
#define bv_add(a, b) ((a) + (b))
#define bv_fma(a, b, c) ((a) * (b) + (c))
#define bv_first(v) (v)
#endif

/* ==== machine: FMA peak and read bandwidth ==================================================== */

/* 12 independent chains of one register each: more than FMA latency (4 cycles) x FMA pipes (2) on
 * current x86 cores, and few enough to stay in registers (AVX2 has 16). */
#define PEAK_CHAINS 12
#define PEAK_ITERS 10000000L
#define MACHINE_REPEATS 5 /* best of: the machine may be shared */
#define MACHINE_MAX_THREADS 256

typedef struct { float seed; double seconds; } PeakArg;

/* CPU seconds of the calling thread. The machine's limits are rates per second of CPU time of each
 * thread, so that time slices lost to other jobs on a shared machine do not lower them: the
 * roofline is what the cores can do, and a case that lost time to other jobs shows it as a lower
 * % of roofline (its own time is wall-clock). */
static inline double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void *peak_worker(void *arg) {
    PeakArg *pa = arg;
    double t0 = thread_cpu_now();
    /* starting values known only at run time, so the compiler can neither fold nor merge chains */
    BVec m = bv_set1(0.9999999f), c = bv_set1(1e-7f), a[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) a[i] = bv_set1(pa->seed * (float)(i + 1));
    BVec a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5];
    BVec a6 = a[6], a7 = a[7], a8 = a[8], a9 = a[9], a10 = a[10], a11 = a[11];
    for (long it = 0; it < PEAK_ITERS; it++) {
        a0 = bv_fma(a0, m, c), a1 = bv_fma(a1, m, c), a2 = bv_fma(a2, m, c), a3 = bv_fma(a3, m, c);
        a4 = bv_fma(a4, m, c), a5 = bv_fma(a5, m, c), a6 = bv_fma(a6, m, c), a7 = bv_fma(a7, m, c);
        a8 = bv_fma(a8, m, c), a9 = bv_fma(a9, m, c), a10 = bv_fma(a10, m, c), a11 = bv_fma(a11, m, c);
    }
    BVec s = bv_add(bv_add(bv_add(a0, a1), bv_add(a2, a3)), bv_add(bv_add(a4, a5), bv_add(a6, a7)));
    s = bv_add(s, bv_add(bv_add(a8, a9), bv_add(a10, a11)));
    pa->seed = bv_first(s); /* keeps the chains alive */
    pa->seconds = thread_cpu_now() - t0;
    return NULL;
}

typedef struct { const float *x; size_t n; float sum; double seconds; } ReadArg;

/* Streaming sum of x (aligned to 64 bytes, n a multiple of 4 * BV_LANES): 4 accumulators so that
 * the adds never wait on each other, and nothing but loads reaches memory. */
static inline void *read_worker(void *arg) {
    ReadArg *ra = arg;
    double t0 = thread_cpu_now();
    BVec s0 = bv_set1(0), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < ra->n; i += 4 * BV_LANES) {
        s0 = bv_add(s0, bv_load(ra->x + i));
        s1 = bv_add(s1, bv_load(ra->x + i + BV_LANES));
        s2 = bv_add(s2, bv_load(ra->x + i + 2 * BV_LANES));
        s3 = bv_add(s3, bv_load(ra->x + i + 3 * BV_LANES));
    }
    ra->sum = bv_first(bv_add(bv_add(s0, s1), bv_add(s2, s3)));
    ra->seconds = thread_cpu_now() - t0;
    return NULL;
}

/* Runs fn on args[0..nt) in nt threads at once. */
static inline void run_threads(void *(*fn)(void *), void *args, size_t arg_size, int nt) {
    pthread_t th[MACHINE_MAX_THREADS];
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * arg_size)) {
            fprintf(stderr, "error: cannot start bench thread %d\n", i);
            exit(1);
        }
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
}

/* FMA peak of nt threads in GFLOP/s (2 FLOPs per lane per FMA): the sum of the threads' rates,
 * best of MACHINE_REPEATS. */
static inline double machine_peak_gflops(int nt) {
    PeakArg pa[MACHINE_MAX_THREADS];
    double best = 0, flops = 2.0 * PEAK_CHAINS * BV_LANES * (double)PEAK_ITERS;
    for (int rep = 0; rep < MACHINE_REPEATS; rep++) {
        for (int i = 0; i < nt; i++) pa[i].seed = 1.0f + (float)i;
        run_threads(peak_worker, pa, sizeof *pa, nt);
        double rate = 0;
        for (int i = 0; i < nt; i++) rate += flops / pa[i].seconds;
        if (rate > best) best = rate;
    }
    return best / 1e9;
}

/* The FMA peak of nt threads run at once on the wall clock (GFLOP/s, best of MACHINE_REPEATS): the
 * sum of machine_peak_gflops' per-thread rates assumes the threads had a core each. A virtual
 * machine whose vCPUs share physical cores (SMT siblings on the host, or one core time-sliced)
 * scores well below nt x one thread here, and no program can then gain nt x from threads. */
static inline double machine_peak_gflops_wall(int nt) {
    PeakArg pa[MACHINE_MAX_THREADS];
    double best = 0, flops = 2.0 * PEAK_CHAINS * BV_LANES * (double)PEAK_ITERS * nt;
    for (int rep = 0; rep < MACHINE_REPEATS; rep++) {
        for (int i = 0; i < nt; i++) pa[i].seed = 1.0f + (float)i;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        run_threads(peak_worker, pa, sizeof *pa, nt);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double rate = flops / ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
        if (rate > best) best = rate;
    }
    return best / 1e9;
}

/* Last-level cache in bytes from sysfs (0 when unknown). */
static inline size_t machine_l3_bytes(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long kb = 0;
    char unit = 'K';
    if (f) {
        if (fscanf(f, "%lu%c", &kb, &unit) < 1) kb = 0;
        fclose(f);
    }
    return unit == 'M' ? kb << 20 : kb << 10;
}

/* Bytes of the read-bandwidth buffer: 512 MiB or 4x the L3, whichever is larger, so that no
 * level of cache holds a useful part of it. */
static inline size_t machine_read_buffer_bytes(void) {
    size_t b = (size_t)512 << 20, l3 = 4 * machine_l3_bytes();
    return l3 > b ? l3 : b;
}

/* Read bandwidth of nt threads in GB/s (each sums its own slice; the sum of their rates), best of
 * MACHINE_REPEATS. Threads that did not run at the same time (a busy machine) do not contend for
 * memory, so there the all-thread figure can be optimistic. */
static inline double machine_read_gbs(int nt) {
    size_t bytes = machine_read_buffer_bytes(), n = bytes / sizeof(float);
    size_t slice = n / (size_t)nt / (4 * BV_LANES) * (4 * BV_LANES);
    float *x = aligned_alloc(64, bytes);
    if (!x) {
        fprintf(stderr, "error: cannot allocate %zu MiB for the bandwidth bench\n", bytes >> 20);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) x[i] = 1e-3f; /* commits the pages before any timing */
    ReadArg ra[MACHINE_MAX_THREADS];
    double best = 0;
    for (int rep = 0; rep < MACHINE_REPEATS; rep++) {
        for (int i = 0; i < nt; i++) ra[i] = (ReadArg){x + (size_t)i * slice, slice, 0, 0};
        run_threads(read_worker, ra, sizeof *ra, nt);
        double rate = 0;
        for (int i = 0; i < nt; i++) rate += (double)slice * sizeof(float) / ra[i].seconds;
        if (rate > best) best = rate;
    }
    if (ra[0].sum < 0) printf("(impossible sum)\n"); /* keeps the loads alive */
    free(x);
    return best / 1e9;
}

/* Repeated streaming sums over one slice (machine_read_gbs_resident). */
typedef struct { ReadArg ra; size_t sweeps; double seconds; } SweepArg;

static inline void *sweep_worker(void *arg) {
    SweepArg *sa = arg;
    const float *x = sa->ra.x;
    double t0 = thread_cpu_now();
    BVec s0 = bv_set1(0), s1 = s0, s2 = s0, s3 = s0;
    for (size_t k = 0; k < sa->sweeps; k++)
        for (size_t i = 0; i < sa->ra.n; i += 4 * BV_LANES) {
            s0 = bv_add(s0, bv_load(x + i));
            s1 = bv_add(s1, bv_load(x + i + BV_LANES));
            s2 = bv_add(s2, bv_load(x + i + 2 * BV_LANES));
            s3 = bv_add(s3, bv_load(x + i + 3 * BV_LANES));
        }
    sa->ra.sum = bv_first(bv_add(bv_add(s0, s1), bv_add(s2, s3)));
    sa->seconds = thread_cpu_now() - t0;
    return NULL;
}

/* Read bandwidth of nt threads over a working set of `bytes` (each thread its own slice), read
 * again and again so that it stays in whichever cache level holds that size: what a loop that
 * re-reads the same weights (an M = 1 product per solver iteration) can draw on. Each thread sums
 * its slice until it has read 64 MiB, best of MACHINE_REPEATS; memoised by size (within 1/8).
 * Above the L3 this approaches the DRAM figure of machine_read_gbs. */
static inline double machine_read_gbs_resident(int nt, double bytes) {
    static struct { int nt; double bytes, gbs; } memo[32];
    static int n_memo;
    for (int i = 0; i < n_memo; i++)
        if (memo[i].nt == nt && bytes >= memo[i].bytes * 0.875 && bytes <= memo[i].bytes * 1.125) return memo[i].gbs;
    size_t slice = (size_t)(bytes / sizeof(float) / nt) / (4 * BV_LANES) * (4 * BV_LANES);
    if (slice < 4 * BV_LANES) slice = 4 * BV_LANES;
    size_t n = slice * (size_t)nt, sweeps = ((size_t)64 << 20) / (slice * sizeof(float)) + 1;
    float *x = aligned_alloc(64, n * sizeof(float));
    if (!x) {
        fprintf(stderr, "error: cannot allocate %zu MiB for the bandwidth bench\n", (n * sizeof(float)) >> 20);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) x[i] = 1e-3f;
    SweepArg sw[MACHINE_MAX_THREADS];
    double best = 0;
    for (int rep = 0; rep < MACHINE_REPEATS; rep++) {
        for (int i = 0; i < nt; i++) sw[i] = (SweepArg){{x + (size_t)i * slice, slice, 0, 0}, sweeps, 0};
        run_threads(sweep_worker, sw, sizeof *sw, nt);
        double rate = 0;
        for (int i = 0; i < nt; i++) rate += (double)slice * sizeof(float) * (double)sweeps / sw[i].seconds;
        if (rate > best) best = rate;
    }
    if (sw[0].ra.sum < 0) printf("(impossible sum)\n"); /* keeps the loads alive */
    free(x);
    if (n_memo < 32) memo[n_memo].nt = nt, memo[n_memo].bytes = bytes, memo[n_memo++].gbs = best / 1e9;
    return best / 1e9;
}

/* "model name" of /proc/cpuinfo, with family and model numbers when present (x86). */
static inline void machine_cpu_name(char *buf, size_t cap) {
    char line[256], name[160] = "unknown CPU", fam[32] = "", mod[32] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v) continue;
        v += v[1] == ' ' ? 2 : 1;
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10) && !strcmp(name, "unknown CPU")) snprintf(name, sizeof name, "%s", v);
        else if (!strncmp(line, "cpu family", 10) && !fam[0]) snprintf(fam, sizeof fam, "%s", v);
        else if (!strncmp(line, "model\t", 6) && !mod[0]) snprintf(mod, sizeof mod, "%s", v);
        if (line[0] == '\n') break; /* end of the first processor's block */
    }
    if (f) fclose(f);
    if (fam[0] && mod[0]) snprintf(buf, cap, "%s (family %s, model %s)", name, fam, mod);
    else snprintf(buf, cap, "%s", name);
}

/* The two limits of the roofline for a thread count. */
typedef struct { int threads; double gflops, gbs; } Roof;

/* Roof of nt threads: from BENCH_MACHINE when it lists nt, else measured (once per process). */
static inline Roof machine_roof(int nt) {
    static Roof known[16];
    static int n_known;
    for (int i = 0; i < n_known; i++)
        if (known[i].threads == nt) return known[i];
    Roof r = {nt, 0, 0};
    for (const char *p = getenv("BENCH_MACHINE"); p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        Roof e;
        if (sscanf(p, "%d:%lf:%lf", &e.threads, &e.gflops, &e.gbs) == 3 && e.threads == nt && e.gflops > 0 &&
            e.gbs > 0) {
            r = e;
            break;
        }
    }
    if (r.gflops <= 0) r.gflops = machine_peak_gflops(nt), r.gbs = machine_read_gbs(nt);
    if (n_known < 16) known[n_known++] = r;
    return r;
}

/* ==== work of a case: FLOPs and bytes ========================================================= */

/* flops, bytes: the work at the roofline (bytes from memory once). reread, resident (generation
 * only, else 0): the bytes a step loop actually reads again, call after call, and the size of the
 * set they come from, for the re-read bound (roof_fields). */
typedef struct { double flops, bytes, reread, resident; } Work;

/* C = A B with A (M,K), B (K,N): one multiply-add per (m, n, k); A and B read and C written once. */
static inline Work work_gemm(double M, double N, double K) {
    return (Work){2 * M * N * K, 4 * (M * K + K * N + M * N), 0, 0};
}

/* What the counts of a model need, from its config and parameter table. "Weights" are applied to
 * every token: one multiply-add (2 FLOPs) per weight per token, which is exact for the linear
 * layers and the depthwise conv and ignores norms and elementwise maps (O(D) per token). */
typedef struct {
    double body;     /* weights applied once per token and f call (pass through the layers) */
    double rest;     /* weights applied once per token and forward: the head (tied: the embedding), an
                      * implicit model's injection, a Fixed-Point RNN's layer outside its loop */
    double params;   /* all trainable scalars (optimizer traffic) */
    double read_tok; /* scalars one step reads: all weights but the embedding rows not looked up */
    double mix_tok;  /* sequence-mixer FLOPs per token and f call beyond its weights (the scan) */
    double attn_pos; /* attention FLOPs per token and f call per context position: 4 D per layer
                      * (q k^T and the weighted sum of v, 2 D each) */
    double state;    /* recurrent-state floats per sequence, read and written by each step */
    double kv_pos;   /* KV-cache floats per position: 2 D per attention layer, written once, read by
                      * every later step */
} Shape;

/* Adds one layer's mixer terms: family is a model name or "mamba2" / "llama" for a bare block.
 * Scans count their recurrent form: Mamba2 / Mamba-1 h = a h + dt x B^T (3 FLOPs per state entry)
 * and y = C h (2), so 5 E N; delta rules S k, the rank-1 update and S q, about 6 dk dv per head. */
static inline void shape_add_mixer(Shape *s, const char *family, int D, int E, int N, int W, int H, int dk, int dv) {
    if (strstr(family, "llama")) {
        s->attn_pos += 4.0 * D, s->kv_pos += 2.0 * D;
    } else if (strstr(family, "mamba")) {   /* mamba2 (C = E + 2N conv channels), mamba1, fp_mamba */
        int C = strstr(family, "mamba2") ? E + 2 * N : E;
        s->mix_tok += 5.0 * E * N, s->state += (double)E * N + (double)C * W;
    } else if (strstr(family, "deltanet")) {
        s->mix_tok += 6.0 * H * dk * dv, s->state += (double)H * dk * dv;
    } else if (strstr(family, "lstm")) {
        s->state += 2.0 * D;                /* h and c */
    }
}

/* The registry's kind of the config's model (explicit for an unknown name). */
static inline ModelFamily family_of(const ModelCfg *c) {
    const ModelType *t = model_type_find(c->model);
    return t ? t->family : MODEL_EXPLICIT;
}

static inline Shape shape_of_model(const Model *m) {
    const ModelCfg *c = &m->cfg;
    Shape s;
    memset(&s, 0, sizeof s);
    const ParamInfo *emb = ptab_find(&m->tab, "word_emb.emb.weight");
    /* the delta-rule LMs' head, or any other LM's with tie_embeddings 0 */
    int untied = ptab_find(&m->tab, "lm_head.weight") != NULL || ptab_find(&m->tab, "criterion.decoder.weight") != NULL;
    /* A Fixed-Point RNN iterates only part of each layer (fp_mamba.h): the channel mixer's
     * projections (".mixer.mixer.", of which the x share is computed once per forward when the
     * mixer reads [x ; shift(y)] through full-rank projections) and bc_proj; the rest of the layer
     * (in_proj, x_proj, dt_proj, zy_proj, out_proj) runs once per forward. Other models iterate
     * (or run once) the whole layer. */
    int fp = m->type->family == MODEL_FP_RNN;
    double loop = 0, layers = 0, hoist = c->mixer_h_dep && !c->symm_mixer && c->mixer_proj_rank < 0 ? 0.5 : 1;
    for (int i = 0; i < m->tab.n; i++) {
        const char *name = m->tab.p[i].name;
        if (strncmp(name, "backbone.layers.", 16)) continue;
        layers += (double)m->tab.p[i].numel;
        if (strstr(name, ".mixer.mixer.")) loop += hoist * (double)m->tab.p[i].numel;
        else if (strstr(name, ".bc_proj.")) loop += (double)m->tab.p[i].numel;
    }
    s.body = fp && loop > 0 ? loop : layers;
    s.params = (double)ptab_count(&m->tab);
    double e = emb ? (double)emb->numel : 0;
    s.rest = s.params - s.body - (untied ? e : 0);
    s.read_tok = untied ? s.params - e + c->d_model : s.params;
    int E = c->expand * c->d_model, dk = c->delta_head_dim;
    for (int l = 0; l < c->n_layer; l++)
        shape_add_mixer(&s, c->model, c->d_model, E, c->d_state, c->d_conv, c->n_head, dk, c->expand_v * dk);
    return s;
}

/* Passes through the layers with backward in a training step: the phantom steps of an implicit
 * model, the differentiable steps after a Fixed-Point RNN's loop, else the one forward. */
static inline double f_grad_passes(const ModelCfg *c) {
    ModelFamily f = family_of(c);
    return f == MODEL_IMPLICIT ? c->grad : f == MODEL_FP_RNN ? c->fp_n_backwards : 1;
}

/* Passes through the layers per generated token, from the step's mean fp_iters: an implicit
 * model's loop calls + the committing call; a Fixed-Point RNN's iterations; else 1. */
static inline double f_gen_calls(const ModelCfg *c, double fp_iters) {
    return family_of(c) == MODEL_IMPLICIT ? fp_iters + 1 : fp_iters > 0 ? fp_iters : 1;
}

/* Per-token FLOPs of one f call (one pass through the layers) at context length ctx. */
static inline double shape_body_flops(const Shape *s, double ctx) {
    return 2 * s->body + s->mix_tok + s->attn_pos * ctx;
}

/* Forward and backward over B x T tokens: f_nograd forward-only passes through the layers (the
 * solver of an implicit model; 0 for an explicit one) and f_grad passes with backward (explicit:
 * 1). A backward costs two products per forward one, so a graded pass is 3x a forward (the
 * "6 x params x tokens" of a dense step). Causal attention averages (T + 1) / 2 positions per token.
 * Bytes: θ read by forward and backward, dθ read and written (4 floats per parameter), plus the
 * activations the forward stores (act_bytes), written once and read once by the backward. */
static inline Work work_fwdbwd(const Shape *s, double act_bytes, int B, int T, double f_nograd, double f_grad) {
    double tok = (double)B * T, body = shape_body_flops(s, (T + 1) / 2.0);
    return (Work){tok * (body * (f_nograd + 3 * f_grad) + 3 * 2 * s->rest), 4 * 4 * s->params + 2 * act_bytes, 0, 0};
}

/* A training step: work_fwdbwd + AdamW, which reads θ m v dθ and writes θ m v (7 floats per
 * parameter; its ~10 FLOPs per parameter are left out). */
static inline Work work_train(const Shape *s, double act_bytes, int B, int T, double f_nograd, double f_grad) {
    Work w = work_fwdbwd(s, act_bytes, B, T, f_nograd, f_grad);
    w.bytes += 4 * 7 * s->params;
    return w;
}

/* Forward over B x T tokens with f_calls passes through the layers (explicit: 1); θ read once,
 * activations written once. */
static inline Work work_eval(const Shape *s, double act_bytes, int B, int T, double f_calls) {
    double tok = (double)B * T;
    return (Work){tok * (shape_body_flops(s, (T + 1) / 2.0) * f_calls + 2 * s->rest), 4 * s->params + act_bytes, 0, 0};
}

/* Generation of n tokens for B sequences from an empty state, f_calls passes through the layers
 * per token (explicit: 1; the loop calls of an implicit model read the state and commit once).
 * Bytes per step: the weights once (shared by the B sequences: a batch-1 step cannot do better),
 * each sequence's state read and written, and its KV cache read up to the current position. */
static inline Work work_gen(const Shape *s, int B, int n, double f_calls) {
    double pos_sum = (double)n * (n + 1) / 2; /* context lengths 1..n */
    double flops = B * ((2 * s->body + s->mix_tok) * f_calls * n + s->attn_pos * f_calls * pos_sum + 2 * s->rest * n);
    double seq = B * (2 * s->state * n + s->kv_pos * (pos_sum + n));
    double bytes = 4 * (s->read_tok * n + seq);
    /* every f call re-reads the layers' weights (a batch shares them), from wherever they fit */
    double reread = 4 * ((s->read_tok + s->body * (f_calls - 1)) * n + seq);
    double resident = 4 * (s->read_tok + B * (s->state + s->kv_pos * n));
    return (Work){flops, bytes, reread, resident};
}

/* % of roofline: the time w takes at max(FLOPs / peak, bytes / bandwidth) of `threads` threads,
 * over the measured seconds. */
static inline double roofline_pct(Work w, double seconds, int threads) {
    Roof r = machine_roof(threads);
    double tf = w.flops / (r.gflops * 1e9), tb = w.bytes / (r.gbs * 1e9);
    return 100 * (tf > tb ? tf : tb) / seconds;
}

/* The roofline fields appended to a bench line:
 *   gflop=... gbyte=... gflop_s=... roofline=NN.N% roofline_cpu=NN.N% bound=flops|bytes
 * (work of one timed run, achieved GFLOP/s, % of roofline, which limit binds). roofline is
 * against the wall-clock seconds; roofline_cpu against the process CPU seconds per thread, which
 * leaves out the time slices other jobs took on a shared machine (both agree on an idle one;
 * threads spinning while they wait count as busy in both).
 * Generation lines add the re-read bound, which the roofline above cannot see: a step loop reads
 * every weight once per f call with one multiply-add per weight (M = 1, or the batch), so it is
 * bound by the bandwidth of the level that holds the weights, not by the FMA peak:
 *   reread_gbyte=... resident_mib=... resident_gbs=... roofline_reread=NN.N% roofline_reread_cpu=NN.N%
 * (the bytes re-read, the size of the set they come from, the measured read bandwidth of a set
 * of that size, and the time at max(FLOPs / peak, re-read bytes / that bandwidth) over the
 * measured wall-clock / CPU seconds). */
static inline const char *roof_fields(char *buf, size_t cap, Work w, double seconds, double cpu_seconds,
                                      int threads) {
    Roof r = machine_roof(threads);
    int flops_bound = w.flops / r.gflops >= w.bytes / r.gbs;
    int k = snprintf(buf, cap, "gflop=%.4g gbyte=%.4g gflop_s=%.1f roofline=%.1f%% roofline_cpu=%.1f%% bound=%s",
                     w.flops / 1e9, w.bytes / 1e9, w.flops / seconds / 1e9, roofline_pct(w, seconds, threads),
                     roofline_pct(w, cpu_seconds / threads, threads), flops_bound ? "flops" : "bytes");
    if (w.reread > 0 && k > 0 && (size_t)k < cap) {
        double gbs = machine_read_gbs_resident(threads, w.resident);
        double tf = w.flops / (r.gflops * 1e9), tb = w.reread / (gbs * 1e9);
        double t = tf > tb ? tf : tb;
        snprintf(buf + k, cap - (size_t)k,
                 " reread_gbyte=%.4g resident_mib=%.1f resident_gbs=%.1f roofline_reread=%.1f%% roofline_reread_cpu=%.1f%%",
                 w.reread / 1e9, w.resident / (1 << 20), gbs, 100 * t / seconds, 100 * t * threads / cpu_seconds);
    }
    return buf;
}

#endif
