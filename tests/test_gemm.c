/* test_gemm.c: the fast GEMM paths of cpu/gemm.c and cpu/gemm_small.c against k_gemm_ref.
 *
 * 1. Parity: k_gemm_small (few rows, streaming), k_gemm_blocked (packed, register-tiled) and the
 *    router k_gemm on shapes that are not multiples of any tile or vector (M = 1, 2, 3, 7, ...;
 *    K and N across the vector width, the 8-row blocks, the 512-column blocks and KC (256, 512)), all
 *    four transpose combinations, padded strides, alpha/beta including beta = 0 with NaN in C, and
 *    a sentinel in C's padding column. The tolerance is the forward error bound of a K-term dot
 *    product, |c - c_ref| <= 2 K eps (|alpha| sum_k |a_ik||b_kj| + |beta c_ij|) + tiny, so that it
 *    holds for any summation order, any FMA use and any ISA, not for one machine.
 * 2. Determinism: outputs are bit-identical at 1, 2 and 3 threads (BLAS builds: k_gemm and the
 *    Linear kernels at 2 vs 3 threads, as one thread there may call OpenBLAS; narrow products, which
 *    run there on OpenBLAS in row slices, within the bound and the same at 2 and 3); every row of a
 *    small-M product equals the same row computed alone (batch invariance); k_gemm and the Linear
 *    forward route few rows to k_gemm_small (bitwise equal to calling it); a pre-packed op(B)
 *    (k_gemm_pack_b + k_gemm_packed) gives k_gemm_blocked's bits, and k_gemm_pb on it k_gemm's (no BLAS),
 *    except one row on mostly full panels, which gives row 0 of k_gemm_blocked (the packed GEMV);
 *    a narrow product (op(A) read in place) gives the bits of the same columns of a wide one.
 * 3. The BLAS only runs products when OpenBLAS's kernel for this host has the build's vector class
 *    (a generic one does not), checked on this host's choice and under OPENBLAS_CORETYPE=Prescott.
 * Out of scope: speed (bench/bench_kernels.c); the Linear gradients (test_kernels.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/kernels.h"
#include "th.h"

static Rng rng;

typedef void (*GemmFn)(int, int, int, int, int, float, const float *, int, const float *, int, float,
                       float *, int);

/* One product's operands with padded strides: op(A) (M, K), op(B) (K, N), C (M, N) in ldc. */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float *A, *B, *C0; /* C0: C before the call */
} Prod;

static Prod prod_new(int ta, int tb, int M, int N, int K, int nan_c) {
    Prod p = {ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 2, N + 1, NULL, NULL, NULL};
    size_t na = (size_t)(ta ? K : M) * p.lda, nb = (size_t)(tb ? N : K) * p.ldb, nc = (size_t)M * p.ldc;
    p.A = th_alloc(na), p.B = th_alloc(nb), p.C0 = th_alloc(nc);
    th_fill_normal(p.A, na, &rng, 1.0f);
    th_fill_normal(p.B, nb, &rng, 1.0f);
    th_fill_normal(p.C0, nc, &rng, 1.0f);
    for (int i = 0; i < M; i++) {
        if (nan_c)
            for (int j = 0; j < N; j++) p.C0[(size_t)i * p.ldc + j] = NAN;
        p.C0[(size_t)i * p.ldc + N] = 12345.0f; /* padding column: must stay untouched */
    }
    return p;
}

static void prod_free(Prod *p) { free(p->A), free(p->B), free(p->C0); }

static float *prod_run(const Prod *p, GemmFn fn, float alpha, float beta) {
    size_t nc = (size_t)p->M * p->ldc;
    float *C = th_alloc(nc);
    memcpy(C, p->C0, nc * sizeof(float));
    fn(p->ta, p->tb, p->M, p->N, p->K, alpha, p->A, p->lda, p->B, p->ldb, beta, C, p->ldc);
    return C;
}

static float op_at(const float *X, int ld, int trans, int r, int c) {
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* fn against k_gemm_ref within the dot-product error bound (see the header). */
static void check_case(const char *name, GemmFn fn, int ta, int tb, int M, int N, int K, float alpha,
                       float beta) {
    Prod p = prod_new(ta, tb, M, N, K, beta == 0.0f);
    float *C = prod_run(&p, fn, alpha, beta), *R = prod_run(&p, k_gemm_ref, alpha, beta);
    int ok = 1, pad_ok = 1;
    double worst = 0;
    for (int i = 0; i < M && ok; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += fabs((double)op_at(p.A, p.lda, ta, i, k) * op_at(p.B, p.ldb, tb, k, j));
            size_t at = (size_t)i * p.ldc + j;
            double c0 = beta == 0.0f ? 0.0 : fabs((double)beta * p.C0[at]);
            double bound = 2.0 * (K + 1) * FLT_EPSILON * (fabs(alpha) * s + c0) + 1e-30;
            double err = fabs((double)C[at] - (double)R[at]);
            if (!(err <= bound)) ok = 0; /* NaN fails too */
            if (err / bound > worst) worst = err / bound;
        }
        pad_ok &= C[(size_t)i * p.ldc + N] == 12345.0f;
    }
    TH_CHECK(ok, "%s tA=%d tB=%d M=%d N=%d K=%d alpha=%g beta=%g: error above 2 K eps sum|a||b| (%.3g of it)",
             name, ta, tb, M, N, K, alpha, beta, worst);
    TH_CHECK(pad_ok, "%s tA=%d tB=%d M=%d N=%d K=%d: wrote outside the N columns of C", name, ta, tb, M, N, K);
    free(C), free(R);
    prod_free(&p);
}

/* k_gemm_pack_b + k_gemm_packed in the GemmFn shape (the B passed is packed first). */
static void packed_fn(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    float *pk = th_alloc(k_gemm_pack_floats(N, K));
    k_gemm_pack_b(pk, tb, N, K, B, ldb);
    k_gemm_packed(ta, M, N, K, alpha, A, lda, pk, beta, C, ldc);
    free(pk);
}

/* k_gemm_pb on a pack made here (the router a layer calls with its packed weights). */
static void pb_fn(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
    float *pk = th_alloc(k_gemm_pack_floats(N, K));
    k_gemm_pack_b(pk, tb, N, K, B, ldb);
    k_gemm_pb(ta, tb, M, N, K, alpha, A, lda, B, ldb, pk, beta, C, ldc);
    free(pk);
}

/* the reference of k_gemm_pb (which ignores the pack) in the GemmFn shape */
static void pb_ref_fn(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    k_gemm_pb_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, NULL, beta, C, ldc);
}

static const float AB[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.7f, 0.5f}};

static void test_parity(void) {
    /* few rows: M across the kernels' 1/2/4-row blocks, N across the 4 or 8 runs of weight rows
     * walked together (runs of 1 row and more, with 1 to 7 rows left after them), the vector
     * widths and the 512-column blocks, K across the vector width (tails) */
    static const int small[][3] = {{1, 1, 1},   {1, 7, 5},    {2, 9, 16},  {3, 17, 33},  {4, 33, 15},
                                   {5, 8, 64},  {7, 65, 300}, {8, 520, 17}, {9, 3, 40},  {16, 100, 77},
                                   {1, 1030, 3}, {2, 5, 0},   {17, 31, 9}, {1, 61, 290}, {2, 803, 40},
                                   {3, 23, 19},  {7, 13, 50}, {1, 15, 16}};
    /* packed: across MR (6, 12), NR (8..32), KC (256, 512), the 2048-column NC block and more
     * than one MC block of rows (48, 96: op(A) packed from several row offsets, a partial panel last) */
    static const int big[][3] = {{13, 33, 257}, {25, 47, 513}, {70, 65, 31},  {12, 2050, 9},
                                 {40, 3, 300},  {20, 40, 1030}, {203, 37, 70}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int a = 0; a < 3; a++) {
                for (size_t s = 0; s < sizeof small / sizeof small[0]; s++) {
                    const int *d = small[s];
                    check_case("gemm_small", k_gemm_small, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm", k_gemm, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm_pb", pb_fn, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                }
                for (size_t s = 0; s < sizeof big / sizeof big[0]; s++) {
                    const int *d = big[s];
                    check_case("gemm_blocked", k_gemm_blocked, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm_packed", packed_fn, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm_pb", pb_fn, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm_pb_ref", pb_ref_fn, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                    check_case("gemm", k_gemm, ta, tb, d[0], d[1], d[2], AB[a][0], AB[a][1]);
                }
            }
    /* M = 0 or N = 0: nothing is touched */
    float c = 7.0f;
    k_gemm_small(0, 0, 0, 1, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, &c, 1);
    k_gemm_small(0, 1, 1, 0, 3, 1.0f, NULL, 3, NULL, 3, 0.0f, &c, 1);
    TH_CHECK(c == 7.0f, "gemm_small with M = 0 or N = 0 wrote C");
}

/* ---- determinism ----------------------------------------------------------------------------- */

/* fn's output at `threads` threads (C starts from p.C0). */
static float *at_threads(const Prod *p, GemmFn fn, int threads, float alpha, float beta) {
    th_bitid_threads(threads);
    float *C = prod_run(p, fn, alpha, beta);
    th_threads_restore(2);
    return C;
}

/* Outputs at lo..3 threads must be bitwise equal. */
static void same_at_threads(const char *name, GemmFn fn, int lo, int ta, int tb, int M, int N, int K) {
    Prod p = prod_new(ta, tb, M, N, K, 0);
    float *ref = at_threads(&p, fn, lo, 0.5f, 1.0f);
    for (int t = lo + 1; t <= 3; t++) {
        float *C = at_threads(&p, fn, t, 0.5f, 1.0f);
        TH_CHECK(memcmp(C, ref, sizeof(float) * (size_t)M * p.ldc) == 0,
                 "%s tA=%d tB=%d M=%d N=%d K=%d: %d and %d threads differ", name, ta, tb, M, N, K, lo, t);
        free(C);
    }
    free(ref);
    prod_free(&p);
}

static void test_threads(void) {
#ifndef _OPENMP
    printf("skip: thread bit-identity (serial build)\n");
    return;
#endif
    /* one thread may be OpenBLAS for k_gemm in a BLAS build: compare 2 vs 3 there */
    int lo_gemm = strcmp(k_blas_name(), "none") != 0 ? 2 : 1;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* large enough for the parallel paths: columns split over threads (small), row and
             * column tiles (blocked), and the router on both sides of its thresholds */
            same_at_threads("gemm_small", k_gemm_small, 1, ta, tb, 3, 2100, 300);
            same_at_threads("gemm_small", k_gemm_small, 1, ta, tb, 1, 4099, 257);
            same_at_threads("gemm_blocked", k_gemm_blocked, 1, ta, tb, 150, 130, 300);
            same_at_threads("gemm_blocked", k_gemm_blocked, 1, ta, tb, 5, 1000, 400);
            same_at_threads("gemm_blocked", k_gemm_blocked, 1, ta, tb, 203, 70, 600);
            same_at_threads("gemm", k_gemm, lo_gemm, ta, tb, 12, 700, 300);
            same_at_threads("gemm", k_gemm, lo_gemm, ta, tb, 200, 90, 310);
        }
}

/* Narrow products (N <= 48, panels far from full) that fork: with OpenBLAS at two or more threads
 * they run as OpenBLAS calls on row slices. Within the error bound at two threads (forking forced,
 * so the slices run even where the work estimate would not fork) and the same bits at two and
 * three threads, for k_gemm and k_gemm_pb; rows across the slice counts (2, 8, 10 slices, a short
 * last one), all four transposes. */
static void test_narrow_slices(void) {
#ifndef _OPENMP
    printf("skip: narrow products on threads (serial build)\n");
    return;
#endif
    static const int shapes[][3] = {{1000, 16, 64}, {5000, 40, 64}, {300, 8, 200}, {3777, 20, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int *d = shapes[s];
                th_bitid_threads(2);
                check_case("gemm (narrow, 2 threads)", k_gemm, ta, tb, d[0], d[1], d[2], 0.5f, 1.0f);
                check_case("gemm_pb (narrow, 2 threads)", pb_fn, ta, tb, d[0], d[1], d[2], 1.0f, 0.0f);
                th_threads_restore(2);
                same_at_threads("gemm (narrow)", k_gemm, 2, ta, tb, d[0], d[1], d[2]);
                same_at_threads("gemm_pb (narrow)", pb_fn, 2, ta, tb, d[0], d[1], d[2]);
            }
}

/* A packed op(B) gives k_gemm_blocked's very bits (the same arithmetic on the same panels), at
 * one thread and at three, across KC slices and the NC column block. */
static void test_packed_same(void) {
    static const int shapes[][3] = {{100, 2100, 600}, {13, 40, 1030}, {70, 33, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int t = 1; t <= 3; t += 2) {
                    const int *d = shapes[s];
                    Prod p = prod_new(ta, tb, d[0], d[1], d[2], 0);
                    k_set_threads(t);
                    float *C = prod_run(&p, packed_fn, 0.5f, 1.0f), *R = prod_run(&p, k_gemm_blocked, 0.5f, 1.0f);
                    k_set_threads(2);
                    TH_CHECK(memcmp(C, R, sizeof(float) * (size_t)d[0] * p.ldc) == 0,
                             "gemm_packed tA=%d tB=%d M=%d N=%d K=%d at %d threads: differs from gemm_blocked",
                             ta, tb, d[0], d[1], d[2], t);
                    free(C), free(R);
                    prod_free(&p);
                }
    /* k_gemm_pb on one row over panels that are mostly full (the packed GEMV, where the build
     * has it): row 0 of the blocked GEMM, bit for bit, at 1 and 3 threads; elsewhere k_gemm's
     * very bits (the dot form); N across the group of four panels and its tail, K across KC and
     * the NC block of columns, beta 0 with NaN in C and beta 1 */
    static const int row_shapes[][2] = {{2100, 600}, {250, 1030}, {128, 7}, {61, 290}, {1000, 1}, {64, 512}};
    for (size_t s = 0; s < sizeof row_shapes / sizeof row_shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int a = 0; a < 3; a++)
                    for (int t = 1; t <= 3; t += 2) {
                        const int *d = row_shapes[s];
                        float al = AB[a][0], be = AB[a][1];
                        Prod p = prod_new(ta, tb, 1, d[0], d[1], be == 0.0f);
                        k_set_threads(t);
                        int panels = k_gemm_pb_row_panels(d[0], tb);
                        float *C = prod_run(&p, pb_fn, al, be), *R = prod_run(&p, panels ? k_gemm_blocked : k_gemm, al, be);
                        k_set_threads(2);
                        TH_CHECK(memcmp(C, R, sizeof(float) * p.ldc) == 0,
                                 "gemm_pb tA=%d tB=%d M=1 N=%d K=%d alpha=%g beta=%g at %d threads: differs from %s",
                                 ta, tb, d[0], d[1], al, be, t, panels ? "gemm_blocked" : "gemm");
                        free(C), free(R);
                        prod_free(&p);
                    }
    /* k_gemm_pb: the same bits as k_gemm without BLAS (there both run the blocked GEMM on the same
     * panels, or k_gemm_small on few rows); with BLAS, the same bits at any thread count (tall
     * products go to k_gemm, the rest to the packed panels whatever the count) */
    static const int pb_shapes[][3] = {{3, 50, 70}, {40, 130, 300}, {600, 40, 64}};
    for (size_t s = 0; s < sizeof pb_shapes / sizeof pb_shapes[0]; s++)
        for (int tb = 0; tb < 2; tb++) {
            const int *d = pb_shapes[s];
            Prod p = prod_new(0, tb, d[0], d[1], d[2], 0);
            k_set_threads(3);
            float *C3 = prod_run(&p, pb_fn, 1.0f, 0.5f);
            k_set_threads(2);
            float *C2 = prod_run(&p, pb_fn, 1.0f, 0.5f), *R = prod_run(&p, k_gemm, 1.0f, 0.5f);
            int same3 = memcmp(C3, C2, sizeof(float) * (size_t)d[0] * p.ldc) == 0;
            int same = memcmp(C2, R, sizeof(float) * (size_t)d[0] * p.ldc) == 0;
            TH_CHECK(same3, "gemm_pb tB=%d M=%d N=%d K=%d: 2 and 3 threads differ", tb, d[0], d[1], d[2]);
            TH_CHECK(same || !strcmp(k_blas_name(), "openblas"), "gemm_pb tB=%d M=%d N=%d K=%d: differs from gemm",
                     tb, d[0], d[1], d[2]);
            free(C3), free(C2), free(R);
            prod_free(&p);
        }
}

/* A narrow product (at most 128 columns: op(A) read in place) gives the same bits as the same
 * columns of a wide one (op(A) packed): the same arithmetic on the same values. Rows across MR
 * (a partial panel last) and the MC block, K across KC, at 1 and 3 threads. */
static void test_narrow_same(void) {
    static const int shapes[][2] = {{13, 70}, {203, 600}, {100, 1}};
    static const int narrow[] = {1, 40, 128};
    const int wide = 300;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t w = 0; w < sizeof narrow / sizeof narrow[0]; w++)
                    for (int t = 1; t <= 3; t += 2) {
                        int M = shapes[s][0], K = shapes[s][1], N = narrow[w];
                        Prod p = prod_new(ta, tb, M, wide, K, 0);
                        k_set_threads(t);
                        float *W = prod_run(&p, k_gemm_blocked, 0.5f, 1.0f);
                        float *C = th_alloc((size_t)M * p.ldc);
                        memcpy(C, p.C0, sizeof(float) * (size_t)M * p.ldc);
                        k_gemm_blocked(ta, tb, M, N, K, 0.5f, p.A, p.lda, p.B, p.ldb, 1.0f, C, p.ldc);
                        k_set_threads(2);
                        int same = 1;
                        for (int i = 0; i < M; i++)
                            same &= memcmp(C + (size_t)i * p.ldc, W + (size_t)i * p.ldc, sizeof(float) * N) == 0;
                        TH_CHECK(same, "gemm_blocked tA=%d tB=%d M=%d N=%d K=%d at %d threads: differs from the "
                                 "same columns of N=%d", ta, tb, M, N, K, t, wide);
                        free(C), free(W);
                        prod_free(&p);
                    }
}

/* Each row of a small-M product is its own sums: equal to the row computed alone, whatever block
 * of rows it fell in (generation at batch 1 and batch M agree bit for bit). */
static void test_row_invariance(void) {
    for (int tb = 0; tb < 2; tb++)
        for (int M = 2; M <= 9; M++) {
            int N = 37, K = 45;
            Prod p = prod_new(0, tb, M, N, K, 0);
            float *C = prod_run(&p, k_gemm_small, 1.0f, 0.0f);
            int same = 1;
            for (int i = 0; i < M; i++) {
                float row[37];
                k_gemm_small(0, tb, 1, N, K, 1.0f, p.A + (size_t)i * p.lda, p.lda, p.B, p.ldb, 0.0f, row, N);
                same &= memcmp(row, C + (size_t)i * p.ldc, sizeof row) == 0;
            }
            TH_CHECK(same, "gemm_small tB=%d M=%d: a row differs from the same row computed alone", tb, M);
            free(C);
            prod_free(&p);
        }
}

/* k_gemm and k_linear_fwd send few rows to k_gemm_small, at one thread and at two. */
static void test_routing(void) {
    for (int threads = 1; threads <= 2; threads++) {
        k_set_threads(threads);
        for (int M = 1; M <= 8; M++)
            for (int tb = 0; tb < 2; tb++) {
                Prod p = prod_new(0, tb, M, 300, 200, 0);
                float *C = prod_run(&p, k_gemm, 1.0f, 0.0f), *S = prod_run(&p, k_gemm_small, 1.0f, 0.0f);
                TH_CHECK(memcmp(C, S, sizeof(float) * (size_t)M * p.ldc) == 0,
                         "gemm M=%d tB=%d at %d threads: not the small-M path", M, tb, threads);
                free(C), free(S);
                prod_free(&p);
            }
        int M = 1, C = 288, OC = 768;
        float *x = th_alloc((size_t)M * C), *W = th_alloc((size_t)OC * C), *y = th_alloc(OC), *s = th_alloc(OC);
        th_fill_normal(x, (size_t)M * C, &rng, 1.0f);
        th_fill_normal(W, (size_t)OC * C, &rng, 1.0f);
        k_linear_fwd(y, x, W, NULL, M, C, OC);
        k_gemm_small(0, 1, M, OC, C, 1.0f, x, C, W, C, 0.0f, s, OC);
        TH_CHECK(memcmp(y, s, sizeof(float) * OC) == 0, "linear_fwd M=1 at %d threads: not the small-M path", threads);
        free(x), free(W), free(y), free(s);
    }
    k_set_threads(2);
}

/* Whether k_gemm hands one-thread products to OpenBLAS follows the kernel OpenBLAS chose: never to
 * a generic one in builds with AVX2 + FMA (OpenBLAS gives it to processors newer than its tables),
 * always to the AVX2 / AVX-512 ones. Then, in an OpenBLAS build, the same run under
 * OPENBLAS_CORETYPE=Prescott (that generic kernel, on any host): one thread gives the built-in
 * GEMM's very bits. */
static void test_blas_core(const char *self) {
    static const char *const wide[] = {"Haswell", "zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const generic[] = {"Prescott", "Core2", "Nehalem", "Sandybridge", "Unknown", "", NULL};
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    int generic_ok = 0;
#else
    int generic_ok = 1;
#endif
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        TH_CHECK(k_gemm_blas_core_ok(wide[i]) == 1, "OpenBLAS core %s: not taken", wide[i]);
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        TH_CHECK(k_gemm_blas_core_ok(generic[i]) == generic_ok, "OpenBLAS core %s: %s", generic[i] ? generic[i] : "(null)",
                 generic_ok ? "refused in a build without AVX2 + FMA" : "taken in a build with AVX2 + FMA");
    k_set_threads(1);
    int blas = strcmp(k_blas_name(), "openblas") == 0, expect_blas = blas && k_gemm_blas_core_ok(k_blas_core());
    TH_CHECK(!strcmp(k_gemm_backend(), expect_blas ? "openblas" : "builtin"),
             "one thread, OpenBLAS core %s: k_gemm_backend says %s", k_blas_core(), k_gemm_backend());
    char desc[96];
    k_blas_describe(desc, sizeof desc);
    TH_CHECK(blas ? strstr(desc, k_blas_core()) && (strstr(desc, "generic") == NULL) == expect_blas : !strcmp(desc, "none"),
             "k_blas_describe: '%s' (OpenBLAS core %s, used %d)", desc, k_blas_core(), expect_blas);
    if (!expect_blas) {
        /* large enough for cblas_sgemm, were it used: the blocked GEMM's bits at one thread */
        Prod p = prod_new(0, 1, 150, 130, 300, 0);
        float *C = prod_run(&p, k_gemm, 1.0f, 0.5f), *R = prod_run(&p, k_gemm_blocked, 1.0f, 0.5f);
        TH_CHECK(memcmp(C, R, sizeof(float) * (size_t)p.M * p.ldc) == 0,
                 "one thread, OpenBLAS core %s: k_gemm is not the built-in GEMM", k_blas_core());
        free(C), free(R);
        prod_free(&p);
    }
    k_set_threads(2);
    if (blas && self && !getenv("OPENBLAS_CORETYPE")) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=Prescott '%s' --blas-core-only", self);
        int rc = system(cmd);
        TH_CHECK(rc == 0, "under OPENBLAS_CORETYPE=Prescott: the routing checks failed (status %d)", rc);
    }
}

int main(int argc, char **argv) {
    th_name = "test_gemm";
    rng_seed(&rng, 4321, 3);
    k_set_threads(2);
    if (argc > 1 && !strcmp(argv[1], "--blas-core-only")) { /* the child run of test_blas_core */
        test_blas_core(NULL);
        return th_done();
    }
    test_blas_core(argc > 0 && !strchr(argv[0], '\'') ? argv[0] : NULL);
    test_parity();
    test_threads();
    test_narrow_slices();
    test_packed_same();
    test_narrow_same();
    test_row_invariance();
    test_routing();
    k_set_threads(1);
    return th_done();
}
