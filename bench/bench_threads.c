/* bench_threads.c: where forking pays, kernel by kernel: the measurements behind the fork
 * threshold and the per-kernel costs of src/kernels/cpu/threading.h.
 *
 * 1. The cost of a fork/join of the whole pool: k_axpby on 64 floats with every call forced to
 *    fork (k_set_fork_ns(0)) minus the same call on one thread.
 * 2. For each kernel, a sweep of sizes whose estimated one-thread time (units x the KT_NS_* cost
 *    the kernel uses) runs from 1 us to 160 us. At each size: the time on one thread (t1) and on
 *    the whole pool with the fork forced (tN). Printed per kernel: the measured ns per unit at
 *    the largest size next to the constant, the speedup t1 / tN at the size the threshold
 *    (KT_MIN_NS) falls on, and the smallest size from which forking wins at every larger size.
 * A constant is right when the measured ns per unit is close to it (within ~2x: the threshold
 * only has to fall where forking clearly wins), and the threshold is right when the speedup at it
 * is well above 1 on every kernel. Each time is the best of repeats lasting >= 20 ms (the machine
 * may be shared). Needs two threads or more (`--threads N`, default: all cores); ~10 s.
 * Usage: bench_threads [--quick] [--threads N] [--cases a,b] (kernels whose name contains a or b)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/rng.h"
#include "../src/core/timer.h"
#include "../src/kernels/cpu/threading.h"
#include "../src/kernels/kernels.h"

#include <unistd.h>

static double min_time = 0.02; /* seconds of repeats per timing (--quick: 0.006) */

/* A kernel at size n (rows, tokens or elements, as the case says) on buffers big enough for the
 * largest n of the sweep. */
typedef struct Case Case;
struct Case {
    const char *name, *cost; /* the kernel, and the KT_NS_* constant it uses */
    double ns_per_unit;      /* that constant */
    double unit_per_n;       /* units of work per n */
    void (*run)(int n);
};

static float *A, *Bf, *Cf, *Df, *Ef; /* shared random buffers, BUF floats each */
#define BUF (8u << 20)

/* D = 128 rows for the row kernels; conv: C 256 channels, width 4; LSTM: 256 hidden units;
 * SSD: H 8, P 32 (chunked) or 16 (scan), N 16 per token; delta rule: H 4, K = V = 32 per token; S6: E 256, N 16 per token; attention: one sequence of n
 * tokens, 4 heads of 32; GEMM: n x 128 x 128; small GEMM: M = 1, n x 256 weights (its cost,
 * 0.012 ns per multiply-add + 0.04 per weight, is SMALL_NS_* of cpu/gemm_small.c). */
static void r_silu(int n) { k_silu_fwd(Bf, A, (size_t)n); }
static void r_axpby(int n) { k_axpby(Bf, 0.5f, A, 0.25f, (size_t)n); }
static void r_rms(int n) { k_rmsnorm_fwd(Bf, Cf, A, Df, n, 128, 1e-5f); }
static void r_softmax(int n) { k_softmax(Bf, A, n, 128); }
static void r_adamw(int n) {
    k_adamw(Bf, Cf, Df, A, (size_t)n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 3);
}
static void r_conv(int n) { k_conv1d_fwd(Bf, A, Df, NULL, 1, n, 256, 4); }
static void r_lstm(int n) { k_lstm_cell_fwd(Bf, Cf, Ef, A, Df, n, 256); }
static void r_ssd_step(int n) {
    k_ssd_step(Bf, Cf, Cf, A, Ef, Df, A, A, Ef, n, 8, 32, 16);
}
static void r_ssd_step16(int n) { k_ssd_step(Bf, Cf, Cf, A, Ef, Df, A, A, Ef, n, 8, 16, 16); }
static void r_ssd_fwd(int n) {
    k_ssd_fwd(Bf, NULL, NULL, A, Ef, Df, A, A, Ef, NULL, 4, n, 8, 32, 16);
}
static void r_ssd_scan(int n) { k_ssd_fwd(Bf, NULL, NULL, A, Ef, Df, A, A, Ef, NULL, 4, n, 8, 16, 16); }
static void r_delta(int n) { k_delta_fwd(Bf, NULL, A, Cf, Df, Ef, NULL, 4, n, 4, 1, 32, 32); }
static void r_s6(int n) { k_s6_fwd(Bf, NULL, A, Ef, Df, NULL, A, A, NULL, 4, n, 256, 16); }
static void r_attn(int n) { k_attn_fwd(Bf, NULL, A, Cf, Df, 1, n, 4, 32); }
static void r_gemm(int n) {
    k_gemm(0, 1, n, 128, 128, 1.0f, A, 128, Df, 128, 0.0f, Bf, 128);
}
static void r_gemv(int n) {
    k_gemm(0, 1, 1, n, 256, 1.0f, A, 256, Df, 256, 0.0f, Bf, n);
}

/* attention: n tokens of one sequence do 2 (n + 1) / 2 n HD NH multiply-adds: not linear in n,
 * so its sweep is over the work, not n (see units()). */
static double units(const Case *c, int n) {
    if (c->run == r_attn) return 2.0 * 4 * (n + 1.0) * n / 2 * 32;
    return c->unit_per_n * n;
}

static const Case CASES[] = {
    {"silu_fwd", "KT_NS_ELEM", KT_NS_ELEM, 1, r_silu},
    {"axpby", "KT_NS_COPY", KT_NS_COPY, 1, r_axpby},
    {"rmsnorm_fwd D128", "KT_NS_ROW_ELEM", KT_NS_ROW_ELEM, 128, r_rms},
    {"softmax C128", "KT_NS_ROW_ELEM", KT_NS_ROW_ELEM, 128, r_softmax},
    {"adamw", "KT_NS_ADAMW", KT_NS_ADAMW, 1, r_adamw},
    {"conv1d_fwd C256 W4", "KT_NS_CONV_TAP", KT_NS_CONV_TAP, 256 * 4, r_conv},
    {"lstm_cell_fwd H256", "KT_NS_LSTM", KT_NS_LSTM, 256, r_lstm},
    {"ssd_step H8 P32 N16", "KT_NS_SSD_STEP", KT_NS_SSD_STEP, 8 * 32 * 16, r_ssd_step},
    {"ssd_step H8 P16 N16", "KT_NS_SSD_STEP", KT_NS_SSD_STEP, 8 * 16 * 16, r_ssd_step16},
    {"ssd_fwd B4 H8 P32 N16", "KT_NS_SSD", KT_NS_SSD, 4 * 8 * (32 * 16 + 64 * 48 / 2.0), r_ssd_fwd},
    {"ssd_fwd B4 H8 P16 N16", "KT_NS_SCAN", KT_NS_SCAN, 4 * 8 * 16 * 16, r_ssd_scan},
    {"delta_fwd B4 H4 K32 V32", "KT_NS_SCAN", KT_NS_SCAN, 4 * 4 * 32 * 32, r_delta},
    {"s6_fwd B4 E256 N16", "KT_NS_SCAN_EXP", KT_NS_SCAN_EXP, 4 * 256 * 16, r_s6},
    {"attn_fwd NH4 HD32", "KT_NS_ATTN", KT_NS_ATTN, 0, r_attn},
    {"gemm n x 128 x 128", "KT_NS_MAC", KT_NS_MAC, 128 * 128, r_gemm},
    {"gemm M=1 K=256 N=n", "gemm_small.c", 0.052, 256, r_gemv},
};

/* 1 when name contains one of the comma-separated parts of list. */
static int wanted(const char *list, const char *name) {
    char part[64];
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0 && n < sizeof part) {
            memcpy(part, p, n);
            part[n] = '\0';
            if (strstr(name, part)) return 1;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

/* Best seconds per call of c at size n, over repeats lasting >= min_time. */
static double best(const Case *c, int n) {
    c->run(n);
    double b = 1e30, t_end = timer_now() + min_time;
    int reps = 0;
    do {
        double t0 = timer_now();
        c->run(n);
        double t = timer_now() - t0;
        b = t < b ? t : b;
        reps++;
    } while (timer_now() < t_end || reps < 5);
    return b;
}

/* The n whose estimated time is ns (at least 1). */
static int n_for(const Case *c, double ns) {
    int n = 1;
    while (units(c, n * 2) * c->ns_per_unit <= ns) n *= 2;
    int lo = n, hi = n * 2;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (units(c, mid) * c->ns_per_unit <= ns) lo = mid;
        else hi = mid;
    }
    return lo;
}

int main(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu > 1 ? (int)ncpu : 2;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) min_time = 0.006;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_threads [--quick] [--threads N] [--cases a,b]\n");
            return 1;
        }
    }
    if (!strcmp(k_omp_name(), "serial") || nt < 2) {
        printf("bench_threads: skipped (%s build, %d threads)\n", k_omp_name(), nt);
        return 0;
    }
    Rng r;
    rng_seed(&r, 7, 1);
    float **bufs[] = {&A, &Bf, &Cf, &Df, &Ef};
    for (int b = 0; b < 5; b++) {
        *bufs[b] = malloc(sizeof(float) * BUF);
        for (size_t i = 0; i < BUF; i++) (*bufs[b])[i] = 0.5f * rng_normal(&r);
    }
    for (size_t i = 0; i < BUF; i++) Ef[i] = 0.01f + 0.1f * fabsf(Ef[i]); /* dt-like (> 0) */
    for (int i = 0; i < 256 * 16; i++) Df[i] = -0.5f - fabsf(Df[i]);     /* A of the scans (< 0) */
    printf("bench_threads: %d threads, fork threshold KT_MIN_NS = %.0f us (src/kernels/cpu/threading.h)\n", nt,
           KT_MIN_NS / 1000);

    /* 1. fork/join */
    Case ax = {"axpby", "", KT_NS_COPY, 1, r_axpby};
    k_set_threads(1);
    double s1 = best(&ax, 64);
    k_set_threads(nt);
    k_set_fork_ns(0);
    double sN = best(&ax, 64);
    k_set_fork_ns(-1);
    double sD = best(&ax, 64);
    printf("fork/join of %d threads: %.2f us (axpby of 64 floats: %.2f us forced to fork, %.2f us on one "
           "thread, %.2f us at %d threads with the default threshold)\n",
           nt, (sN - s1) * 1e6, sN * 1e6, s1 * 1e6, sD * 1e6, nt);

    /* 2. kernels */
    static const double est_us[] = {1, 2, 5, 10, 20, 40, 80, 160};
    enum { NS = sizeof est_us / sizeof est_us[0] };
    printf("%-24s %-15s %8s %9s | speedup t1/t%d at estimated one-thread us:", "kernel", "cost", "const", "measured",
           nt);
    for (int s = 0; s < NS; s++) printf(" %6.0f", est_us[s]);
    printf(" | wins from\n");
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        const Case *c = &CASES[ci];
        if (only && !wanted(only, c->name)) continue;
        double sp[NS], t1_last = 0;
        int n_last = 1;
        for (int s = 0; s < NS; s++) {
            int n = n_for(c, est_us[s] * 1000);
            k_set_threads(1);
            double t1 = best(c, n);
            k_set_threads(nt);
            k_set_fork_ns(0);
            double tn = best(c, n);
            k_set_fork_ns(-1);
            sp[s] = t1 / tn;
            t1_last = t1, n_last = n;
        }
        int from = NS;
        while (from > 0 && sp[from - 1] > 1.0) from--;
        printf("%-24s %-15s %8.3f %9.3f |", c->name, c->cost, c->ns_per_unit, t1_last * 1e9 / units(c, n_last));
        for (int s = 0; s < NS; s++) printf(" %6.2f", sp[s]);
        if (from < NS) printf(" | %.0f us\n", est_us[from]);
        else printf(" | never\n");
    }
    k_set_threads(1);
    for (int b = 0; b < 5; b++) free(*bufs[b]);
    return 0;
}
