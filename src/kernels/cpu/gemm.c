/* cpu/gemm.c: fast single-precision GEMM and the Linear layer built on it (kernels.h "GEMM").
 *
 * k_gemm calls cblas_sgemm when built with OpenBLAS (-DIM_OPENBLAS) and running on one thread,
 * and otherwise the built-in k_gemm_blocked below (see use_blas), a GotoBLAS/BLIS-style blocked
 * GEMM written in plain C:
 *   for each NC-wide column block of C, for each KC-deep slice of K:
 *     pack op(B)[slice, block] into NR-wide panels (shared by all threads),
 *     for each MC-tall row block (in parallel): pack op(A) into MR-tall panels, then run an
 *     MR x NR register-blocked micro-kernel over every (MR, NR) tile of the block.
 * The micro-kernel is an outer-product loop on a local accumulator array that gcc -O3
 * -march=native turns into broadcast-FMA code (AVX-512: 12 x 32 tile in 24 zmm registers;
 * otherwise 6 x 16 in 12 ymm). Packing zero-pads edge panels, so edge tiles run the very same
 * arithmetic as interior ones and only their write-back is masked.
 *
 * Determinism: KC is a constant, every C element is accumulated by exactly one thread, in k
 * order within a slice and slice after slice, so results are bit-identical at any thread count
 * (threads only change which tiles a thread owns). Threads share nothing writable and never
 * wait for each other, which also keeps a busy, shared machine from stalling them at barriers.
 * Out of scope: complex types, strided C columns, GEMV-specific paths (M = 1 runs through the
 * same code, its columns split over threads).
 */
#include "../kernels.h"
#include "gemm.h"
#include "kscratch.h"

#include <stdlib.h>
#include <string.h>

#include "../../core/check.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef IM_OPENBLAS
#include <cblas.h>
#endif

#if defined(__AVX512F__)
#define MR 12 /* 12 x 32 accumulators = 24 zmm of 32: the best measured on Zen 4 */
#define NR 32
#else
#define MR 6 /* 6 x 16 = 12 ymm of 16, the classic AVX2 shape */
#define NR 16
#endif
#define KC 256       /* fixed: it sets the summation order, so it must not depend on threads */
#define MC (MR * 12) /* A block MC x KC (~144 KiB) stays in L2 */
#define NC 2048      /* B block KC x NC (2 MiB) stays in L3 */
/* Below this many multiply-adds a parallel region costs more than it saves. */
#define PAR_MIN_MACS (64.0 * 64.0 * 64.0)

static int imin(int a, int b) { return a < b ? a : b; }

/* Pack op(A)[i0 .. i0+mc, k0 .. k0+kc] as MR-row panels: ap[(p/MR)*kc*MR + k*MR + r]; rows past
 * mc are zero so the micro-kernel never needs an edge case. */
static void pack_a(float *restrict ap, const float *A, int lda, int transA, int i0, int mc, int k0,
                   int kc) {
    for (int p = 0; p < mc; p += MR) {
        int mr = imin(MR, mc - p);
        float *dst = ap + (size_t)p * kc;
        if (!transA) {
            const float *rows[MR];
            for (int r = 0; r < mr; r++) rows[r] = A + (size_t)(i0 + p + r) * lda + k0;
            for (int k = 0; k < kc; k++) {
                for (int r = 0; r < mr; r++) dst[k * MR + r] = rows[r][k];
                for (int r = mr; r < MR; r++) dst[k * MR + r] = 0.0f;
            }
        } else { /* op(A)[i, k] = A[k, i]: MR consecutive floats of row k */
            for (int k = 0; k < kc; k++) {
                const float *src = A + (size_t)(k0 + k) * lda + i0 + p;
                for (int r = 0; r < mr; r++) dst[k * MR + r] = src[r];
                for (int r = mr; r < MR; r++) dst[k * MR + r] = 0.0f;
            }
        }
    }
}

/* Pack one NR-column panel of op(B)[k0 .. k0+kc, j0 .. j0+nr]: bp[k*NR + c], zero past nr. */
static void pack_b_panel(float *restrict bp, const float *B, int ldb, int transB, int k0, int kc,
                         int j0, int nr) {
    if (!transB) {
        for (int k = 0; k < kc; k++) {
            const float *src = B + (size_t)(k0 + k) * ldb + j0;
            for (int c = 0; c < nr; c++) bp[k * NR + c] = src[c];
            for (int c = nr; c < NR; c++) bp[k * NR + c] = 0.0f;
        }
    } else { /* op(B)[k, j] = B[j, k]: gather from NR rows of B, each read in order */
        const float *cols[NR];
        for (int c = 0; c < nr; c++) cols[c] = B + (size_t)(j0 + c) * ldb + k0;
        for (int k = 0; k < kc; k++) {
            for (int c = 0; c < nr; c++) bp[k * NR + c] = cols[c][k];
            for (int c = nr; c < NR; c++) bp[k * NR + c] = 0.0f;
        }
    }
}

/* The register-blocked kernel: acc = sum_k a[k, :] (x) b[k, :] over one packed MR-panel of A and
 * one NR-panel of B, then C[0..m, 0..n] = alpha acc + beta C (first slice) or += alpha acc.
 * The k loop is the outer-product form gcc vectorises along NR with broadcast loads of a. */
static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *C, int ldc,
                         int m, int n, float alpha, float beta, int first) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * NR, *ak = a + (size_t)k * MR;
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            float ai = ak[i];
            for (int j = 0; j < NR; j++) acc[i][j] += ai * bk[j];
        }
    }
    /* one write-back expression per case, shared by full and edge tiles (bit-identity) */
    for (int i = 0; i < m; i++) {
        float *c = C + (size_t)i * ldc;
        if (!first)
            for (int j = 0; j < n; j++) c[j] += alpha * acc[i][j];
        else if (beta == 0.0f) /* BLAS semantics: C is not read, NaNs there are ignored */
            for (int j = 0; j < n; j++) c[j] = alpha * acc[i][j];
        else
            for (int j = 0; j < n; j++) c[j] = alpha * acc[i][j] + beta * c[j];
    }
}

/* C = beta C for K = 0 (no product to add). */
static void scale_c(float *C, int ldc, int M, int N, float beta) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
}

/* The operands of one GEMM call, shared read-only by the threads. */
typedef struct {
    int transA, transB, K;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb, ldc;
    float *C;
} GemmArgs;

/* C[r0..r1, c0..c1] of the product, single-threaded, with private packing buffers
 * bp (KC x NC) and ap (MC x KC): the classic five-loop blocked GEMM on one region. */
static void gemm_region(const GemmArgs *g, int r0, int r1, int c0, int c1, float *bp, float *ap) {
    for (int jc = c0; jc < c1; jc += NC) {
        int nc = imin(NC, c1 - jc), npan = (nc + NR - 1) / NR;
        for (int pc = 0; pc < g->K; pc += KC) {
            int kc = imin(KC, g->K - pc), first = pc == 0;
            for (int q = 0; q < npan; q++)
                pack_b_panel(bp + (size_t)q * kc * NR, g->B, g->ldb, g->transB, pc, kc, jc + q * NR,
                             imin(NR, nc - q * NR));
            for (int ic = r0; ic < r1; ic += MC) {
                int mc = imin(MC, r1 - ic);
                pack_a(ap, g->A, g->lda, g->transA, ic, mc, pc, kc);
                /* B micro-panel stays in L1 while the MR-panels of the A block stream from L2 */
                for (int q = 0; q < npan; q++)
                    for (int p = 0; p < mc; p += MR)
                        micro_kernel(kc, ap + (size_t)p * kc, bp + (size_t)q * kc * NR,
                                     g->C + (size_t)(ic + p) * g->ldc + jc + q * NR, g->ldc,
                                     imin(MR, mc - p), imin(NR, nc - q * NR), g->alpha, g->beta, first);
            }
        }
    }
}

void k_gemm_blocked(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        scale_c(C, ldc, M, N, beta);
        return;
    }
    GemmArgs g = {transA, transB, K, alpha, beta, A, B, lda, ldb, ldc, C};
    int nt = k_get_threads();
    int par = nt > 1 && (double)M * N * K >= PAR_MIN_MACS;
    if (!par) nt = 1;
    /* Bounded scratch (kscratch.h, kept between calls): private packed B and A blocks for each
     * thread. Every thread packs the B it needs itself (a K x N copy per thread, small next to
     * M N K / threads), so threads never wait for each other: no barrier in the parallel region. */
    int kc_max = imin(KC, K);
    size_t bp_floats = (size_t)kc_max * imin(NC, (N + NR - 1) / NR * NR);
    size_t ap_floats = (size_t)kc_max * imin(MC, (M + MR - 1) / MR * MR);
    float *buf = kscratch_floats(KS_GEMM, (bp_floats + ap_floats) * nt);
    int mt = (M + MR - 1) / MR, ntile = (N + NR - 1) / NR; /* tiles along M and N */

#pragma omp parallel num_threads(nt) if (par)
    {
        int tid = 0, team = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num(), team = omp_get_num_threads();
#endif
        /* A grid of tr x tc threads over whole tiles: rows first, columns only when there
         * are fewer row tiles than threads (GEMV-like shapes). */
        int tr = imin(team, mt), tc = imin(team / tr, ntile);
        if (tid < tr * tc) {
            int rr = tid / tc, cc = tid % tc;
            int r0 = (int)((long)mt * rr / tr) * MR, r1 = imin(M, (int)((long)mt * (rr + 1) / tr) * MR);
            int c0 = (int)((long)ntile * cc / tc) * NR, c1 = imin(N, (int)((long)ntile * (cc + 1) / tc) * NR);
            float *bp = buf + (bp_floats + ap_floats) * tid;
            if (r0 < r1 && c0 < c1) gemm_region(&g, r0, r1, c0, c1, bp, bp + bp_floats);
        }
    }
}

/* With OpenBLAS, a single thread calls cblas_sgemm (5-15% faster than k_gemm_blocked on the
 * model's shapes), but with more than one thread the built-in GEMM runs on OpenMP's pool: OpenBLAS
 * (pthreads build) keeps its own pool, whose workers spin between calls on the very cores the
 * OpenMP workers need, and vice versa. Measured on the 2-core machine at 2 threads (bench_layers,
 * bench_train): 16-40% shorter steps with the one pool (llama, Mamba2 blocks, train_small), and
 * far steadier ones. Results stay bit-identical at any thread count >= 2. */
static int use_blas(void) {
#ifdef IM_OPENBLAS
    return k_get_threads() == 1;
#else
    return 0;
#endif
}

const char *k_gemm_backend(void) { return use_blas() ? "openblas" : "builtin"; }

void k_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc) {
    if (!use_blas()) {
        k_gemm_blocked(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#ifdef IM_OPENBLAS
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    if (K == 0) { /* cblas would reject lda = 0 here; the answer is just beta C */
        scale_c(C, ldc, M, N, beta);
        return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

/* ---- Linear ---------------------------------------------------------------------------------- */

void k_linear_fwd(float *y, const float *x, const float *W, const float *b, int M, int C, int OC) {
    if (b) { /* start every row at the bias and let the GEMM accumulate onto it (beta = 1) */
#pragma omp parallel for schedule(static) if ((double)M * OC > 65536.0)
        for (int i = 0; i < M; i++) memcpy(y + (size_t)i * OC, b, (size_t)OC * sizeof(float));
    }
    /* y (M, OC) = x (M, C) @ W^T, W stored (OC, C) */
    k_gemm(0, 1, M, OC, C, 1.0f, x, C, W, C, b ? 1.0f : 0.0f, y, OC);
}

/* db[o] += sum_i dy[i, o]: threads own disjoint column ranges, each column summed in row order. */
static void bias_grad(float *db, const float *dy, int M, int OC) {
    enum { CHUNK = 256 };
    int nchunk = (OC + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if ((double)M * OC > 65536.0)
    for (int ch = 0; ch < nchunk; ch++) {
        int o0 = ch * CHUNK, o1 = imin(OC, o0 + CHUNK);
        float acc[CHUNK];
        for (int o = o0; o < o1; o++) acc[o - o0] = 0.0f;
        for (int i = 0; i < M; i++) {
            const float *row = dy + (size_t)i * OC;
            for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
        }
        for (int o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
}

void k_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
                  int M, int C, int OC) {
    /* dx (M, C) += dy (M, OC) @ W (OC, C) */
    if (dx) k_gemm(0, 0, M, C, OC, 1.0f, dy, OC, W, C, 1.0f, dx, C);
    /* dW (OC, C) += dy^T @ x: the batch is the GEMM's K, so each entry is one thread's sum */
    if (dW) k_gemm(1, 0, OC, C, M, 1.0f, dy, OC, x, C, 1.0f, dW, C);
    if (db) bias_grad(db, dy, M, OC);
}
