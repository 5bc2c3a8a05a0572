/* bench_kernels.c: throughput of the dense kernels against this machine's measured peak.
 *
 * 1. Peak: bench_util.h's FMA peak and read bandwidth (machine_roof) on 1 and 2 threads.
 * 2. GEMM GFLOP/s of the built-in blocked GEMM (k_gemm_blocked) and of OpenBLAS (cblas_sgemm
 *    called directly; "n/a" in builds without it), square 256/512/1024 and the three GEMMs of
 *    a Linear with M = 8192 rows, C = 256, OC = 1024 (fwd, dx, dW), at 1 and 2 threads, each as
 *    a fraction of the roofline for that many threads (work_gemm: 2 M N K FLOPs; A, B read and C
 *    written once; every case here is FLOP-bound, so this is the fraction of the FMA peak).
 * 3. GEMV-shaped products (M = 1, K = N = 288, 768, 2048): k_gemm (dot form), k_gemm_pb on packed
 *    panels and OpenBLAS, in GB/s of weight; then the dot form and the panels at the shapes of
 *    batch-1 generation, with weights cycled through L3 and memory as a model's layers are.
 * 4. Bandwidth-bound kernels in GB/s (bytes that must move, as counted in the table) and as a
 *    fraction of the read-bandwidth roofline (their few FLOPs per element never bind).
 * 5. The one-token steps at the shapes of sequential generation: the SSD step (k_ssd_step, us
 *    per call and GB/s of state), the S6 step (k_s6_step) and attention against a KV cache
 *    (k_attn_step, GB/s of K, V).
 * 6. The S6 scan (k_s6_fwd, k_s6_bwd) over whole sequences at the D-64 baselines' shape and an
 *    LM layer's, one thread: us per call and ns per state element and token.
 * 7. The elementwise functions of cpu/vmath.h over an array (kvm_*, one thread), in GB/s and as
 *    a share of a memcpy of the same size (read x, write y: 8 bytes per element): the median of
 *    five rounds, each a memcpy timing and the function's right after (a shared machine's speed
 *    drifts within a run).
 * Each number is the best of a few timed repeats (the machine is shared). Whole run ~70 s.
 * Usage: bench_kernels [--quick] [--only gemm,gemv,bandwidth,step,scan,vmath] (--cases, which
 * bench/run.sh passes on to every program, runs nothing here: no table case is a kernel section)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../src/core/rng.h"
#include "../src/core/timer.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/cpu/vmath.h"
#include "../src/kernels/kernels.h"

#ifdef IM_OPENBLAS
#include <cblas.h>
#endif

static double min_time = 0.25; /* seconds of repeats per measurement (--quick: 0.08) */

/* ---- timing helpers -------------------------------------------------------------------------- */

typedef void (*Fn)(void *);

/* Best seconds per call over repeats lasting at least min_time (one warm-up call first). */
static double best_time(Fn fn, void *ctx) {
    fn(ctx);
    double best = 1e30, start = timer_now();
    int reps = 0;
    do {
        double t0 = timer_now();
        fn(ctx);
        double t = timer_now() - t0;
        if (t < best) best = t;
        reps++;
    } while (timer_now() - start < min_time || reps < 3);
    return best;
}

static float *randn(size_t n, Rng *r) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r);
    return x;
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

typedef struct { int ta, tb, M, N, K; const float *A, *B; float *C; } GemmCase;

static void run_builtin(void *p) {
    GemmCase *g = p;
    k_gemm_blocked(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B,
                   g->tb ? g->K : g->N, 0.0f, g->C, g->N);
}

#ifdef IM_OPENBLAS
static void run_openblas(void *p) {
    GemmCase *g = p;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B, g->tb ? g->K : g->N, 0.0f,
                g->C, g->N);
}
#endif

static void bench_gemm(Rng *r) {
    static const struct { const char *name; int ta, tb, M, N, K; } cases[] = {
        {"square 256", 0, 0, 256, 256, 256},
        {"square 512", 0, 0, 512, 512, 512},
        {"square 1024", 0, 0, 1024, 1024, 1024},
        {"linear fwd  y=xW^T", 0, 1, 8192, 1024, 256}, /* M=8192 C=256 OC=1024 */
        {"linear bwd dx=dyW", 0, 0, 8192, 256, 1024},
        {"linear bwd dW=dy^Tx", 1, 0, 1024, 256, 8192},
    };
    printf("\nGEMM (GFLOP/s, %% of roofline for that many threads)\n");
    printf("  %-21s %-6s %-7s %-16s %-16s\n", "case", "tA tB", "threads", "built-in", "openblas");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        GemmCase g = {cases[c].ta, cases[c].tb, cases[c].M, cases[c].N, cases[c].K, NULL, NULL, NULL};
        float *A = randn((size_t)g.M * g.K, r), *B = randn((size_t)g.K * g.N, r);
        float *C = calloc((size_t)g.M * g.N, sizeof(float));
        g.A = A, g.B = B, g.C = C;
        Work w = work_gemm(g.M, g.N, g.K);
        for (int nt = 1; nt <= 2; nt++) {
            k_set_threads(nt);
            double tb = best_time(run_builtin, &g);
            char ob[32] = "n/a";
#ifdef IM_OPENBLAS
            openblas_set_num_threads(nt); /* k_set_threads keeps OpenBLAS on one thread */
            double to = best_time(run_openblas, &g);
            snprintf(ob, sizeof ob, "%7.1f (%3.0f%%)", w.flops / to / 1e9, roofline_pct(w, to, nt));
#endif
            printf("  %-21s %d  %d   %-7d %7.1f (%3.0f%%)   %s\n", cases[c].name, g.ta, g.tb, nt, w.flops / tb / 1e9,
                   roofline_pct(w, tb, nt), ob);
        }
        free(A), free(B), free(C);
    }
}

/* GEMV-shaped products (M = 1, K = N): k_gemm (its small-M path: the weight streamed in place, dot
 * form), k_gemm_pb on the weight packed once (the panels that generation reads where they are
 * mostly full) and OpenBLAS, in GB/s of weight read (4 K N bytes; x and y are noise next to it),
 * y = x W^T (tB = 1) and y = x W (tB = 0). The dot form and the panels are timed in turns, so a
 * drift of the machine's speed reaches both. */
static void run_kgemm(void *p) {
    GemmCase *g = p;
    k_gemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B, g->tb ? g->K : g->N,
           0.0f, g->C, g->N);
}

typedef struct { GemmCase g; float *packed; } PackedCase;

static void run_kgemm_pb(void *p) {
    PackedCase *c = p;
    GemmCase *g = &c->g;
    k_gemm_pb(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->ta ? g->M : g->K, g->B, g->tb ? g->K : g->N,
              c->packed, 0.0f, g->C, g->N);
}

/* One-row products y = x W^T at the shapes of batch-1 generation (stories15M's D 288, hidden 768,
 * vocabulary 32000; D 768), each weight one of `copies` cycled as a model's layers are, so that
 * they come from L3 or memory as in generation: the dot form (k_gemm) against the packed panels
 * (k_gemm_pb; the same as k_gemm where the build keeps the dot form), one thread, in turns. */
typedef struct { int N, K, copies, packed; const float *x; float *y; float **W, **pk; } GenRow;

static void run_gen_row(void *p) {
    GenRow *g = p;
    for (int c = 0; c < g->copies; c++)
        if (g->packed) k_gemm_pb(0, 1, 1, g->N, g->K, 1.0f, g->x, g->K, g->W[c], g->K, g->pk[c], 0.0f, g->y, g->N);
        else k_gemm(0, 1, 1, g->N, g->K, 1.0f, g->x, g->K, g->W[c], g->K, 0.0f, g->y, g->N);
}

static void bench_gen_rows(Rng *r) {
    static const int shapes[][3] = {{288, 288, 24}, {768, 288, 12}, {288, 768, 12}, {32000, 288, 1}, {2048, 768, 12}};
    printf("\nGEMV at generation shapes, y = x W^T, weights cycled (GB/s of weight read, one thread)\n");
    printf("  %-6s %-5s %-7s %-9s %-10s %-10s\n", "N", "K", "copies", "MiB", "k_gemm", "packed");
    k_set_threads(1);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        GenRow g = {shapes[s][0], shapes[s][1], shapes[s][2], 0, NULL, NULL, NULL, NULL};
        float *x = randn((size_t)g.K, r);
        g.x = x, g.y = calloc((size_t)g.N, sizeof(float));
        g.W = malloc((size_t)g.copies * sizeof *g.W), g.pk = malloc((size_t)g.copies * sizeof *g.pk);
        for (int c = 0; c < g.copies; c++) {
            g.W[c] = randn((size_t)g.N * g.K, r);
            g.pk[c] = malloc(k_gemm_pack_floats(g.N, g.K) * sizeof(float));
            k_gemm_pack_b(g.pk[c], 1, g.N, g.K, g.W[c], g.K);
        }
        double bytes = 4.0 * g.N * g.K * g.copies, td = 1e30, tp = 1e30;
        for (int turn = 0; turn < 3; turn++) {
            g.packed = 0;
            double t = best_time(run_gen_row, &g);
            if (t < td) td = t;
            g.packed = 1;
            t = best_time(run_gen_row, &g);
            if (t < tp) tp = t;
        }
        printf("  %-6d %-5d %-7d %-9.1f %8.1f   %8.1f\n", g.N, g.K, g.copies, bytes / 1048576.0, bytes / td / 1e9,
               bytes / tp / 1e9);
        for (int c = 0; c < g.copies; c++) free(g.W[c]), free(g.pk[c]);
        free(g.W), free(g.pk), free(x), free(g.y);
    }
}

static void bench_gemv(Rng *r) {
    static const int sizes[] = {288, 768, 2048};
    printf("\nGEMV M = 1 (GB/s of weight read; k_gemm = the small-M path's dot form, packed = k_gemm_pb on\n"
           "the weight packed once, best of alternated turns)\n");
    printf("  %-6s %-6s %-7s %-10s %-10s %-10s\n", "K=N", "tA tB", "threads", "k_gemm", "packed", "openblas");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int tb = 1; tb >= 0; tb--) {
            int n = sizes[s];
            GemmCase g = {0, tb, 1, n, n, NULL, NULL, NULL};
            float *A = randn((size_t)n, r), *B = randn((size_t)n * n, r), *C = calloc((size_t)n, sizeof(float));
            float *packed = malloc(k_gemm_pack_floats(n, n) * sizeof(float));
            k_gemm_pack_b(packed, tb, n, n, B, n);
            g.A = A, g.B = B, g.C = C;
            PackedCase pc = {g, packed};
            double bytes = 4.0 * n * n;
            for (int nt = 1; nt <= 2; nt++) {
                k_set_threads(nt);
                double tk = 1e30, tp = 1e30;
                for (int turn = 0; turn < 3; turn++) {
                    double t = best_time(run_kgemm, &g);
                    if (t < tk) tk = t;
                    t = best_time(run_kgemm_pb, &pc);
                    if (t < tp) tp = t;
                }
                char ob[32] = "n/a";
#ifdef IM_OPENBLAS
                openblas_set_num_threads(nt);
                snprintf(ob, sizeof ob, "%8.1f", bytes / best_time(run_openblas, &g) / 1e9);
#endif
                printf("  %-6d %d  %d   %-7d %8.1f   %8.1f   %s\n", n, 0, tb, nt, bytes / tk / 1e9, bytes / tp / 1e9, ob);
            }
            free(A), free(B), free(C), free(packed);
        }
    bench_gen_rows(r);
}

/* ---- bandwidth-bound kernels ----------------------------------------------------------------- */

enum { BM = 8192, BC = 1024 }; /* rows x features: 32 MiB per activation tensor */
typedef struct { float *x, *y, *w, *dy, *dx, *dw, *rstd, *m, *v; int *t; } Bufs;

static void run_memcpy(void *p) { Bufs *b = p; memcpy(b->y, b->x, (size_t)BM * BC * sizeof(float)); }
static void run_rms_fwd(void *p) { Bufs *b = p; k_rmsnorm_fwd(b->y, b->rstd, b->x, b->w, BM, BC, 1e-5f); }
static void run_rms_bwd(void *p) { Bufs *b = p; k_rmsnorm_bwd(b->dx, b->dw, b->dy, b->x, b->w, b->rstd, BM, BC); }
static void run_silu(void *p) { Bufs *b = p; k_silu_fwd(b->y, b->x, (size_t)BM * BC); }
static void run_softmax(void *p) { Bufs *b = p; k_softmax(b->y, b->x, BM, BC); }
static void run_xent(void *p) { Bufs *b = p; k_xent_fwd(b->rstd, b->x, b->t, BM, BC, -1); }
static void run_xent_bwd(void *p) { Bufs *b = p; k_xent_bwd(b->dx, b->x, b->t, b->rstd, BM, BC, -1); }
static void run_swiglu(void *p) { Bufs *b = p; k_swiglu_fwd(b->y, b->x, b->dy, (size_t)BM * BC); }
static void run_softplus(void *p) { Bufs *b = p; k_softplus(b->y, b->x, b->w, BM, BC); }
static void run_mul_sigmoid(void *p) { Bufs *b = p; k_mul_sigmoid(b->dx, b->x, b->w, BM, BC); }
/* BM / 4 rows of 4 gates of BC: pre is x, act m; h, c, c_prev the first quarter of y, dx, v */
static void run_lstm(void *p) {
    Bufs *b = p;
    k_lstm_cell_fwd(b->y, b->dx, b->m, b->x, b->v, BM / 4, BC);
}
static void run_adamw(void *p) {
    Bufs *b = p;
    k_adamw(b->y, b->m, b->v, b->dy, (size_t)BM * BC, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 10);
}

static void bench_bandwidth(Rng *r) {
    size_t n = (size_t)BM * BC;
    Bufs b = {randn(n, r), randn(n, r), randn(BC, r), randn(n, r), calloc(n, 4), calloc(BC, 4),
              calloc(BM, 4), calloc(n, 4), calloc(n, 4), malloc(BM * sizeof(int))};
    for (int i = 0; i < BM; i++) b.t[i] = i % BC;
    static const struct { const char *name; Fn fn; double bytes_per_elem; } ks[] = {
        {"memcpy (reference)", run_memcpy, 8},
        {"rmsnorm_fwd", run_rms_fwd, 8},   /* read x, write y */
        {"rmsnorm_bwd dx+dw", run_rms_bwd, 16}, /* read dy, x, dx; write dx */
        {"silu_fwd", run_silu, 8},
        {"softmax", run_softmax, 8},
        {"xent_fwd", run_xent, 4},
        {"xent_bwd", run_xent_bwd, 12}, /* read logits, dlogits; write dlogits */
        {"swiglu_fwd", run_swiglu, 12}, /* read a, b; write y */
        {"softplus (+bias)", run_softplus, 8},
        {"mul_sigmoid (+bias)", run_mul_sigmoid, 12}, /* read x, y; write y */
        {"lstm_cell_fwd", run_lstm, 11}, /* per gate: read pre, write act; c_prev, c, h: 1/4 each */
        {"adamw", run_adamw, 28}, /* read p, m, v, g; write p, m, v */
    };
    printf("\nBandwidth-bound kernels, %d x %d floats (GB/s of bytes that must move; ms; %% of roofline)\n", BM, BC);
    printf("  %-20s %-7s %-8s %8s %9s\n", "kernel", "threads", "GB/s", "ms", "roofline");
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
        for (int nt = 1; nt <= 2; nt++) {
            k_set_threads(nt);
            double t = best_time(ks[k].fn, &b);
            Work w = {0, ks[k].bytes_per_elem * n, 0, 0};
            printf("  %-20s %-7d %8.1f %8.2f %8.0f%%\n", ks[k].name, nt, w.bytes / t / 1e9, t * 1e3,
                   roofline_pct(w, t, nt));
        }
    free(b.x), free(b.y), free(b.w), free(b.dy), free(b.dx), free(b.dw), free(b.rstd), free(b.m);
    free(b.v), free(b.t);
}

/* ---- one-token steps -------------------------------------------------------------------------- */

typedef struct { int B, H, P, N; float *y, *S, *x, *dt, *A, *Bm, *Cm, *D; } StepCase;

static void run_ssd_step(void *p) {
    StepCase *c = p;
    k_ssd_step(c->y, c->S, c->S, c->x, c->dt, c->A, c->Bm, c->Cm, c->D, c->B, c->H, c->P, c->N);
}

typedef struct { int B, E, N; float *y, *h, *x, *dt, *A, *Bm, *Cm, *D; } S6StepCase;

static void run_s6_step(void *p) {
    S6StepCase *c = p;
    k_s6_step(c->y, c->h, c->h, c->x, c->dt, c->A, NULL, c->Bm, c->Cm, c->D, c->B, c->E, c->N);
}

typedef struct { int B, NH, HD, n; float *o, *q, *k, *v, *kc, *vc; } AttnStepCase;

static void run_attn_step(void *p) {
    AttnStepCase *c = p;
    k_attn_step(c->o, c->q, c->k, c->v, c->kc, c->vc, c->n, c->n + 1, c->B, c->NH, c->HD);
}

/* k_ssd_step at the shapes of sequential generation (the state committed in place, as the last
 * call of a token does), one thread: us per call and GB/s of state (read and written once). */
static void bench_ssd_step(Rng *r) {
    static const int shapes[][4] = {
        {1, 8, 16, 16},   /* imp_gen_b1: the small implicit Mamba2 */
        {32, 8, 16, 16},  /* imp_gen_b32 */
        {1, 16, 32, 16},  /* lm_mamba2 / lm_imp_mamba2 (d_inner 512, headdim 32) */
        {1, 16, 64, 128}, /* the large implicit Mamba2 (E 1024, N 128, P 64) */
    };
    printf("\nOne-token SSD step, 1 thread (state committed in place; GB/s of state read + written)\n");
    printf("  %-22s %9s %9s %8s\n", "B H P N", "us", "ns/elem", "GB/s");
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int B = shapes[k][0], H = shapes[k][1], P = shapes[k][2], N = shapes[k][3];
        size_t ns = (size_t)B * H * P * N;
        StepCase c = {B, H, P, N, calloc((size_t)B * H * P, 4), randn(ns, r), randn((size_t)B * H * P, r),
                      randn((size_t)B * H, r), randn(H, r), randn((size_t)B * N, r), randn((size_t)B * N, r),
                      randn(H, r)};
        for (int i = 0; i < B * H; i++) c.dt[i] = 0.01f + 0.1f * fabsf(c.dt[i]);
        for (int h = 0; h < H; h++) c.A[h] = -1.0f - fabsf(c.A[h]); /* decays < 1: the state stays finite */
        double t = best_time(run_ssd_step, &c);
        printf("  %3d %3d %3d %3d %14.2f %9.3f %8.1f\n", B, H, P, N, t * 1e6, t * 1e9 / (double)ns,
               8.0 * (double)ns / t / 1e9);
        free(c.y), free(c.S), free(c.x), free(c.dt), free(c.A), free(c.Bm), free(c.Cm), free(c.D);
    }
}

/* k_s6_step the same way (Mamba-1 and FP-Mamba generation). */
static void bench_s6_step(Rng *r) {
    static const int s6_shapes[][3] = {{1, 256, 16}, {1, 1024, 16}, {64, 128, 16}};
    printf("\nOne-token S6 (Mamba-1) step, 1 thread (state committed in place; GB/s of state read + "
           "written)\n");
    printf("  %-22s %9s %9s %8s\n", "B E N", "us", "ns/elem", "GB/s");
    for (size_t k = 0; k < sizeof s6_shapes / sizeof s6_shapes[0]; k++) {
        int B = s6_shapes[k][0], E = s6_shapes[k][1], N = s6_shapes[k][2];
        size_t ns = (size_t)B * E * N, nx = (size_t)B * E;
        S6StepCase c = {B, E, N, calloc(nx, 4), randn(ns, r), randn(nx, r), randn(nx, r),
                        randn((size_t)E * N, r), randn((size_t)B * N, r), randn((size_t)B * N, r),
                        randn(E, r)};
        for (size_t i = 0; i < nx; i++) c.dt[i] = 0.01f + 0.1f * fabsf(c.dt[i]);
        for (size_t i = 0; i < (size_t)E * N; i++) c.A[i] = -1.0f - fabsf(c.A[i]);
        double t = best_time(run_s6_step, &c);
        printf("  %3d %5d %3d %12.2f %9.3f %8.1f\n", B, E, N, t * 1e6, t * 1e9 / (double)ns,
               8.0 * (double)ns / t / 1e9);
        free(c.y), free(c.h), free(c.x), free(c.dt), free(c.A), free(c.Bm), free(c.Cm), free(c.D);
    }
}

/* k_attn_step with n cached rows per head, one thread: us per call and GB/s of K and V read. */
static void bench_attn_step(Rng *r) {
    static const int attn_shapes[][4] = {
        {1, 4, 32, 128},  /* lm_llama: 4 heads of 32, half of its 256 generated tokens cached */
        {1, 6, 48, 128},  /* stories15M's heads */
        {1, 12, 64, 128}, /* llama110M's heads */
        {1, 12, 64, 1024},
    };
    printf("\nOne-token attention against a KV cache, 1 thread (GB/s of K and V rows read)\n");
    printf("  %-22s %9s %9s %8s\n", "B NH HD cached", "us", "ns/key", "GB/s");
    for (size_t k = 0; k < sizeof attn_shapes / sizeof attn_shapes[0]; k++) {
        int B = attn_shapes[k][0], NH = attn_shapes[k][1], HD = attn_shapes[k][2], n = attn_shapes[k][3];
        size_t tok = (size_t)B * NH * HD, nc = tok * (size_t)(n + 1);
        AttnStepCase c = {B, NH, HD, n, calloc(tok, 4), randn(tok, r), randn(tok, r), randn(tok, r),
                          randn(nc, r), randn(nc, r)};
        double t = best_time(run_attn_step, &c);
        double keys = (double)B * NH * (n + 1);
        printf("  %3d %3d %3d %5d %12.2f %9.3f %8.1f\n", B, NH, HD, n, t * 1e6, t * 1e9 / keys,
               8.0 * keys * HD / t / 1e9);
        free(c.o), free(c.q), free(c.k), free(c.v), free(c.kc), free(c.vc);
    }
}

/* ---- full-sequence scans ---------------------------------------------------------------------- */

typedef struct {
    int B, T, E, N;
    float *y, *x, *dt, *A, *Bm, *Cm, *D, *dy, *dx, *ddt, *dA, *dB, *dC, *dD;
    float *dec, *use_dec; /* the decay table; use_dec: it or NULL (the scan takes its exps) */
} S6Case;

static void run_s6_fwd(void *p) {
    S6Case *c = p;
    k_s6_fwd(c->y, NULL, c->x, c->dt, c->A, c->use_dec, c->Bm, c->Cm, c->D, c->B, c->T, c->E, c->N);
}

static void run_s6_bwd(void *p) {
    S6Case *c = p;
    k_s6_bwd(c->dx, c->ddt, c->dA, c->dB, c->dC, c->dD, c->dy, c->x, c->dt, c->A, c->Bm, c->Cm, c->D, c->B,
             c->T, c->E, c->N);
}

static void run_s6_decay(void *p) {
    S6Case *c = p;
    k_s6_decay(c->dec, c->dt, c->A, c->B, c->T, c->E, c->N);
}

/* The S6 (Mamba-1 / FP-Mamba) scan over whole sequences, forward and backward (every gradient),
 * one thread: us per call and ns per state element and token (each is an exp and a few FMAs
 * forward; the backward recomputes the states, then runs the reverse recurrence); then the decay
 * table (k_s6_decay: the exps alone, written out) and the forward reading it instead. */
static void bench_scan(Rng *r) {
    static const int shapes[][4] = {
        {64, 17, 128, 16}, /* m1_64, fp_h64: the word-problem baselines at D 64 */
        {12, 64, 512, 16}, /* an LM-sized layer */
    };
    k_set_threads(1);
    printf("\nS6 scan over whole sequences, 1 thread (ns per state element and token)\n");
    printf("  %-22s %10s %9s %10s %9s %10s %10s\n", "B T E N", "fwd us", "ns/elem", "bwd us", "ns/elem",
           "decay us", "fwd|table");
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int B = shapes[k][0], T = shapes[k][1], E = shapes[k][2], N = shapes[k][3];
        size_t nx = (size_t)B * T * E, nb = (size_t)B * T * N, nA = (size_t)E * N;
        S6Case c = {B, T, E, N, calloc(nx, 4), randn(nx, r), randn(nx, r), randn(nA, r), randn(nb, r),
                    randn(nb, r), randn(E, r), randn(nx, r), calloc(nx, 4), calloc(nx, 4), calloc(nA, 4),
                    calloc(nb, 4), calloc(nb, 4), calloc(E, 4), malloc(k_s6_decay_floats(B, T, E, N) * 4), NULL};
        for (size_t i = 0; i < nx; i++) c.dt[i] = 0.01f + 0.1f * fabsf(c.dt[i]);
        for (size_t i = 0; i < nA; i++) c.A[i] = -1.0f - fabsf(c.A[i]);
        double tf = best_time(run_s6_fwd, &c), tb = best_time(run_s6_bwd, &c), el = (double)nx * N;
        double ta = best_time(run_s6_decay, &c);
        c.use_dec = c.dec;
        double tfa = best_time(run_s6_fwd, &c);
        printf("  %3d %3d %5d %3d %13.1f %9.3f %10.1f %9.3f %10.1f %10.1f\n", B, T, E, N, tf * 1e6,
               tf * 1e9 / el, tb * 1e6, tb * 1e9 / el, ta * 1e6, tfa * 1e6);
        free(c.y), free(c.x), free(c.dt), free(c.A), free(c.Bm), free(c.Cm), free(c.D), free(c.dy);
        free(c.dx), free(c.ddt), free(c.dA), free(c.dB), free(c.dC), free(c.dD), free(c.dec);
    }
}

static void bench_step(Rng *r) {
    k_set_threads(1);
    bench_ssd_step(r);
    bench_s6_step(r);
    bench_attn_step(r);
}

/* ---- vmath.h array loops --------------------------------------------------------------------- */

typedef struct { void (*fn)(float *, const float *, size_t); float *y; const float *x; size_t n; } VmCase;

static void run_vm(void *p) { VmCase *c = p; c->fn(c->y, c->x, c->n); }
static void run_vm_memcpy(void *p) { VmCase *c = p; memcpy(c->y, c->x, c->n * sizeof(float)); }

/* Rounds of (memcpy, function) pairs per function: a shared host's speed drifts within seconds,
 * and a ratio taken inside one round sees the same host on both sides. Odd, so that bench_util.h's
 * median is the middle round. */
enum { VM_ROUNDS = 5 };

static void bench_vmath(Rng *r) {
    static const struct { const char *name; void (*fn)(float *, const float *, size_t); } fs[] = {
#define VM_CASE(f) {#f, kvm_##f},
        VMATH_FUNCS(VM_CASE)
#undef VM_CASE
    };
    size_t n = (size_t)BM * BC;
    float *x = randn(n, r), *y = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 4.0f * x[i] + 4.0f; /* mostly positive: log is defined */
    VmCase c = {NULL, y, x, n};
    printf("\nvmath.h array loops, %zu floats, 1 thread (GB/s of x read + y written; as a share of a memcpy "
           "of the same size: the median of %d rounds of one memcpy and one function timing, and the "
           "lowest and highest)\n", n, VM_ROUNDS);
    printf("  %-20s %8s %8s %8s %13s\n", "", "GB/s", "memcpy", "share", "range");
    for (size_t f = 0; f < sizeof fs / sizeof fs[0]; f++) {
        double gb[VM_ROUNDS], gb_mc[VM_ROUNDS], share[VM_ROUNDS];
        c.fn = fs[f].fn;
        for (int k = 0; k < VM_ROUNDS; k++) {
            gb_mc[k] = 8.0 * n / best_time(run_vm_memcpy, &c) / 1e9;
            gb[k] = 8.0 * n / best_time(run_vm, &c) / 1e9;
            share[k] = gb[k] / gb_mc[k];
        }
        double med = median(share, VM_ROUNDS); /* sorts share: [0] lowest, [VM_ROUNDS - 1] highest */
        printf("  %-20s %8.1f %8.1f %7.0f%%   (%3.0f-%3.0f%%)\n", fs[f].name, median(gb, VM_ROUNDS),
               median(gb_mc, VM_ROUNDS), 100 * med, 100 * share[0], 100 * share[VM_ROUNDS - 1]);
    }
    free(x), free(y);
}

static const struct { const char *name; void (*run)(Rng *); } SECTIONS[] = {
    {"gemm", bench_gemm}, {"gemv", bench_gemv}, {"bandwidth", bench_bandwidth}, {"step", bench_step},
    {"scan", bench_scan}, {"vmath", bench_vmath}};
#define NSECTIONS (sizeof SECTIONS / sizeof SECTIONS[0])

static void usage(void) {
    fprintf(stderr, "usage: bench_kernels [--quick] [--only SECTION,...]; sections:");
    for (size_t k = 0; k < NSECTIONS; k++) fprintf(stderr, " %s", SECTIONS[k].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
    const char *only = NULL; /* comma-separated section names, all by default */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            min_time = 0.08;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--cases") && i + 1 < argc) {
            /* bench/run.sh hands --cases to every program: they name the comparison table's cases,
             * and this program has none, so it has nothing to run */
            printf("bench_kernels: no case of --cases %s is a kernel section (--only picks those)\n", argv[++i]);
            return 0;
        } else {
            fprintf(stderr, "bench_kernels: unknown argument '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    int want[NSECTIONS];
    for (size_t k = 0; k < NSECTIONS; k++) want[k] = !only;
    if (only && !*only) {
        fprintf(stderr, "bench_kernels: --only needs section names\n");
        usage();
        return 2;
    }
    for (const char *p = only; p && *p;) { /* every name in --only must be a section */
        size_t len = strcspn(p, ","), k = 0;
        while (k < NSECTIONS && !(strlen(SECTIONS[k].name) == len && !strncmp(p, SECTIONS[k].name, len)))
            k++;
        if (k == NSECTIONS) {
            fprintf(stderr, "bench_kernels: --only: no section '%.*s'\n", (int)len, p);
            usage();
            return 2;
        }
        want[k] = 1;
        p += len + (p[len] == ',');
    }
    Rng r;
    rng_seed(&r, 42, 1);
    printf("bench_kernels: blas=%s omp=%s\n", k_blas_name(), k_omp_name());
    Roof one = machine_roof(1), two = machine_roof(2);
    printf("roofline (bench_util.h): FMA peak 1 thread %.1f GFLOP/s, 2 threads %.1f GFLOP/s; read bandwidth "
           "%.1f / %.1f GB/s\n", one.gflops, two.gflops, one.gbs, two.gbs);
    for (size_t k = 0; k < NSECTIONS; k++)
        if (want[k]) SECTIONS[k].run(&r);
    k_set_threads(1);
    return 0;
}
