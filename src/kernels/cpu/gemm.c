/* cpu/gemm.c: fast single-precision GEMM and the Linear layer built on it (kernels.h "GEMM").
 *
 * k_gemm routes each product (see use_blas below): few rows to k_gemm_small (gemm_small.c), the
 * rest to cblas_sgemm (OpenBLAS builds, products run on one thread) or to the built-in
 * k_gemm_blocked below, a GotoBLAS/BLIS-style blocked GEMM:
 *   for each NC-wide column block of C, for each KC-deep slice of K:
 *     pack op(B)[slice, block] into NR-wide panels (each thread its own),
 *     for each MC-tall row block (in parallel): pack op(A) into MR-tall panels, then run an
 *     MR x NR register-blocked micro-kernel over every (MR, NR) tile of the block.
 * The micro-kernel is written with intrinsics for the compiler's target (AVX-512: 12 x 32 tile in
 * 24 zmm; AVX2 + FMA: 6 x 16 in 12 ymm; SSE2: 6 x 8 in 12 xmm), plain C elsewhere. Packing
 * zero-pads edge panels, so edge tiles run the very same arithmetic as interior ones and only
 * their write-back goes through a local copy.
 * Determinism: KC is a constant, every C element is accumulated by exactly one thread, in k
 * order within a slice and slice after slice, so results are bit-identical at any thread count
 * (threads only change which tiles a thread owns). Threads share nothing writable and never
 * wait for each other, which also keeps a busy, shared machine from stalling them at barriers.
 * k_gemm_pack_b / k_gemm_packed (gemm.h) run the same code on an op(B) packed once in advance
 * (measured on Zen 4, one thread, x W^T with K = 288, N = 768: 97 -> 103 GFLOP/s at M = 768,
 * 75 -> 99 at M = 64, and N = 288: 58 -> 91 at M = 32).
 * One row on packed panels has its own loop (gemv_packed, below).
 * Out of scope: complex types, strided C columns, few-row products on unpacked B (gemm_small.c).
 */
#include "../kernels.h"
#include "gemm.h"
#include "kscratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/check.h"

#include "threading.h"
#ifdef IM_OPENBLAS
#include <cblas.h>
#include <stdatomic.h>
#endif
#include <strings.h>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

/* The register tile MR x NR of the micro-kernel, chosen from the compiler's target: MR rows of
 * NR / VL vectors of VL floats each (VL = vector length in floats) are the accumulators, plus the
 * NR / VL vectors of one row of B and one broadcast of A: 27 of 32 zmm with AVX-512, 15 of 16
 * registers otherwise. */
#if defined(__AVX512F__)
#define MR 12
#define NR 32
#define VL 16
typedef __m512 Vec;
#define V_LOAD _mm512_loadu_ps
#define V_STORE _mm512_storeu_ps
#define V_SET1 _mm512_set1_ps
#define V_ZERO _mm512_setzero_ps
#define V_MUL _mm512_mul_ps
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif defined(__AVX2__) && defined(__FMA__)
#define MR 6 /* 6 x 16 = 12 ymm accumulators, the classic Haswell/Zen shape */
#define NR 16
#define VL 8
typedef __m256 Vec;
#define V_LOAD _mm256_loadu_ps
#define V_STORE _mm256_storeu_ps
#define V_SET1 _mm256_set1_ps
#define V_ZERO _mm256_setzero_ps
#define V_MUL _mm256_mul_ps
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#elif defined(__SSE2__) /* plain x86-64 (NATIVE=0): no FMA, multiply then add */
#define MR 6
#define NR 8
#define VL 4
typedef __m128 Vec;
#define V_LOAD _mm_loadu_ps
#define V_STORE _mm_storeu_ps
#define V_SET1 _mm_set1_ps
#define V_ZERO _mm_setzero_ps
#define V_MUL _mm_mul_ps
#define V_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#else /* other architectures: the portable C micro-kernel below */
#define MR 6
#define NR 16
#endif
#define NV (NR / VL)
/* Cache blocking. KC is a compile-time constant: it sets the summation order (one partial sum per
 * KC slice), so it must not depend on the thread count. Measured on Zen 4, one thread, GFLOP/s of
 * the blocked GEMM over the bench shapes (square 256/512/1024, Linear 8192 x 1024 x 256 fwd, dx,
 * dW, and the 288/768 model shapes); the weakest shape, dx = dy W with N = 256, K = 1024, rules:
 *   AVX-512 (MR 12): KC 128: 78, KC 256: 88, KC 384: 90, KC 512 (MC 96): 92-93
 *   AVX2 (MR 6):     KC 256 (MC 72): 83, KC 384: 87, KC 512 (MC 48): 94-95
 * with the other shapes within +-3% of each other. */
#if defined(__AVX512F__)
#define KC 512
#define MC (MR * 8) /* A block 96 x 512 (192 KiB) stays in L2 */
#elif defined(__AVX2__) && defined(__FMA__)
#define KC 512
#define MC (MR * 8) /* 48 x 512 (96 KiB) */
#else
#define KC 256
#define MC (MR * 12)
#endif
#define NC 2048 /* B block KC x NC (4 MiB at KC 512) stays in L3 */
/* The team of an M x N x K product: below threading.h's threshold (700K multiply-adds at
 * KT_NS_MAC, ~7 us at 100 GFLOP/s; every thread also packs its own B) it stays on one thread (and
 * goes to OpenBLAS in BLAS builds). */
static int gemm_team(int M, int N, int K) { return kt_team((double)M * N * K * KT_NS_MAC, (long)M * N); }

static int imin(int a, int b) { return a < b ? a : b; }

/* Values of k packed per pass over the rows of a panel: one 64-byte line of each row. Used for rows
 * at least PACK_KB_STRIDE floats (2 KB) apart, where the rows of a panel fall in few L1 sets; with
 * closer rows the one-k-at-a-time copy, whose stores are contiguous, was 2% faster (Zen 4,
 * AVX-512, K 128) and the blocked one no faster at 2 KB; at 4 KB it gained 13% (K 1024, N 512). */
#define PACK_KB 16
#define PACK_KB_STRIDE 512

#if defined(__AVX__)
/* dst[q * W + i] = rows[i][k + q] for i, q < 8: an 8 x 8 transpose in registers (AVX). */
static inline void transpose8(float *restrict dst, int W, const float *const *rows, int k) {
    __m256 a0 = _mm256_loadu_ps(rows[0] + k), a1 = _mm256_loadu_ps(rows[1] + k);
    __m256 a2 = _mm256_loadu_ps(rows[2] + k), a3 = _mm256_loadu_ps(rows[3] + k);
    __m256 a4 = _mm256_loadu_ps(rows[4] + k), a5 = _mm256_loadu_ps(rows[5] + k);
    __m256 a6 = _mm256_loadu_ps(rows[6] + k), a7 = _mm256_loadu_ps(rows[7] + k);
    /* pairs of rows interleaved, then quads, then the 128-bit halves: column q of the block */
    __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    __m256 t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5);
    __m256 t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst + 0 * W, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + 1 * W, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2 * W, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3 * W, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4 * W, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5 * W, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6 * W, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7 * W, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* dst[q * W + i] = rows[i][k + q] for i < 4, q < 8: two 4 x 4 transposes (SSE). */
static inline void transpose4x8(float *restrict dst, int W, const float *const *rows, int k) {
    for (int h = 0; h < 8; h += 4) {
        __m128 a0 = _mm_loadu_ps(rows[0] + k + h), a1 = _mm_loadu_ps(rows[1] + k + h);
        __m128 a2 = _mm_loadu_ps(rows[2] + k + h), a3 = _mm_loadu_ps(rows[3] + k + h);
        __m128 t0 = _mm_unpacklo_ps(a0, a1), t1 = _mm_unpackhi_ps(a0, a1);
        __m128 t2 = _mm_unpacklo_ps(a2, a3), t3 = _mm_unpackhi_ps(a2, a3);
        _mm_storeu_ps(dst + (h + 0) * W, _mm_movelh_ps(t0, t2));
        _mm_storeu_ps(dst + (h + 1) * W, _mm_movehl_ps(t2, t0));
        _mm_storeu_ps(dst + (h + 2) * W, _mm_movelh_ps(t1, t3));
        _mm_storeu_ps(dst + (h + 3) * W, _mm_movehl_ps(t3, t1));
    }
}
#endif

/* dst[k * W + r] = row r's element k for the n <= W rows at src + r ld (k < kc), 0 for r >= n: the
 * gather of a panel whose W lanes are rows read along k (untransposed A, transposed B). W is MR
 * or NR, a constant after inlining. With AVX, blocks of 16 values of k go through in-register
 * transposes, 8 rows (then 4) at a time, each row's 64-byte line read whole before the next row's;
 * the rest, one value at a time. Either way a copy: the same bytes. */
static inline void gather_rows(float *restrict dst, int W, const float *src, size_t ld, int n, int kc) {
    const float *rows[NR > MR ? NR : MR];
    for (int r = 0; r < W; r++) rows[r] = src + (size_t)(r < n ? r : 0) * ld;
    int k = 0;
#if defined(__AVX__)
    if (n >= 4) {
        int n8 = n / 8 * 8, n4 = n8 + (n - n8) / 4 * 4;
        for (; k + 16 <= kc; k += 16) {
            float *d = dst + (size_t)k * W;
            for (int r = 0; r < n8; r += 8) {
                transpose8(d + r, W, rows + r, k);
                transpose8(d + 8 * W + r, W, rows + r, k + 8);
            }
            if (n4 > n8) {
                transpose4x8(d + n8, W, rows + n8, k);
                transpose4x8(d + 8 * W + n8, W, rows + n8, k + 8);
            }
            for (int q = 0; q < 16; q++) {
                for (int r = n4; r < n; r++) d[q * W + r] = rows[r][k + q];
                for (int r = n; r < W; r++) d[q * W + r] = 0.0f;
            }
        }
    }
#endif
    if (ld >= PACK_KB_STRIDE) /* a row's line read whole before the next row's */
        for (; k + PACK_KB <= kc; k += PACK_KB)
            for (int r = 0; r < W; r++)
                for (int q = 0; q < PACK_KB; q++) dst[(k + q) * W + r] = r < n ? rows[r][k + q] : 0.0f;
    for (; k < kc; k++) {
        for (int r = 0; r < n; r++) dst[k * W + r] = rows[r][k];
        for (int r = n; r < W; r++) dst[k * W + r] = 0.0f;
    }
}

/* Pack op(A)[i0 .. i0+mc, k0 .. k0+kc] as MR-row panels: ap[(p/MR)*kc*MR + k*MR + r]; rows past
 * mc are zero so the micro-kernel never needs an edge case. */
static void pack_a(float *restrict ap, const float *A, int lda, int transA, int i0, int mc, int k0,
                   int kc) {
    for (int p = 0; p < mc; p += MR) {
        int mr = imin(MR, mc - p);
        float *dst = ap + (size_t)p * kc;
        if (!transA) {
            gather_rows(dst, MR, A + (size_t)(i0 + p) * lda + k0, (size_t)lda, mr, kc);
        } else if (mr < MR) { /* op(A)[i, k] = A[k, i]: the last, partial panel */
            for (int k = 0; k < kc; k++) {
                const float *src = A + (size_t)(k0 + k) * lda + i0 + p;
                for (int r = 0; r < mr; r++) dst[k * MR + r] = src[r];
                for (int r = mr; r < MR; r++) dst[k * MR + r] = 0.0f;
            }
        }
    }
    /* op(A)[i, k] = A[k, i], whole panels: row k of A is read once, front to back, into every
     * panel (a panel at a time would read MR floats per row at a stride of lda, which for a
     * power-of-two lda maps every row to the same L1 sets and re-fetches them panel after panel) */
    int full = mc / MR * MR;
    if (transA && full > 0)
        for (int k = 0; k < kc; k++) {
            const float *src = A + (size_t)(k0 + k) * lda + i0;
            float *dst = ap + (size_t)k * MR;
            for (int p = 0; p < full; p += MR, dst += (size_t)MR * kc)
                for (int r = 0; r < MR; r++) dst[r] = src[p + r];
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
        gather_rows(bp, NR, B + (size_t)j0 * ldb + k0, (size_t)ldb, nr, kc);
    }
}

#ifdef VL
/* C[0..MR, 0..NR] (row stride ldc) = alpha acc + beta C (first slice; beta = 0: C not read) or
 * += alpha acc (later slices). */
static inline void write_tile(Vec acc[MR][NV], float *C, int ldc, float alpha, float beta, int first) {
    Vec va = V_SET1(alpha), vb = V_SET1(beta);
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) {
            float *c = C + (size_t)i * ldc + v * VL;
            if (!first) V_STORE(c, V_FMA(va, acc[i][v], V_LOAD(c)));
            else if (beta == 0.0f) V_STORE(c, V_MUL(va, acc[i][v]));
            else V_STORE(c, V_FMA(va, acc[i][v], V_MUL(vb, V_LOAD(c))));
        }
}

/* The register-blocked kernel: acc = sum_k a[k, :] (x) b[k, :] over one MR-panel of op(A),
 * a[k, i] at a[k sk + i si] (packed: sk = MR, si = 1), and one packed NR-panel of B (MR x NV
 * vector accumulators, one broadcast of a[k, i] per row, NV loads of b per k), then
 * C[0..m, 0..n] = alpha acc + beta C (first slice) or += alpha acc. An edge tile (m < MR or
 * n < NR) goes through a local copy of C with the very same vector write-back, so every element
 * sees the same arithmetic wherever it lies. */
static inline __attribute__((always_inline)) void micro_kernel_at(int kc, const float *restrict a, size_t sk,
                                                                   size_t si, const float *restrict b,
                                                                   float *C, int ldc, int m, int n,
                                                                   float alpha, float beta, int first) {
    Vec acc[MR][NV];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) acc[i][v] = V_ZERO();
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * NR, *ak = a + (size_t)k * sk;
        Vec bv[NV];
        for (int v = 0; v < NV; v++) bv[v] = V_LOAD(bk + v * VL);
        for (int i = 0; i < MR; i++) {
            Vec ai = V_SET1(ak[i * si]);
            for (int v = 0; v < NV; v++) acc[i][v] = V_FMA(ai, bv[v], acc[i][v]);
        }
    }
    if (m == MR && n == NR) {
        write_tile(acc, C, ldc, alpha, beta, first);
        return;
    }
    float tile[MR][NR];
    int read = !first || beta != 0.0f;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) tile[i][j] = read ? C[(size_t)i * ldc + j] : 0.0f;
    write_tile(acc, &tile[0][0], NR, alpha, beta, first);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] = tile[i][j];
}

static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *C, int ldc,
                         int m, int n, float alpha, float beta, int first) {
    micro_kernel_at(kc, a, MR, 1, b, C, ldc, m, n, alpha, beta, first);
}
/* The same kernel on a whole MR-row panel of op(A) read in place (DIRECT_MAX_N, below).
 * op(A) rows lda apart (A not transposed) */
static void micro_kernel_rows(int kc, const float *restrict a, int lda, const float *restrict b, float *C,
                              int ldc, int n, float alpha, float beta, int first) {
    micro_kernel_at(kc, a, 1, (size_t)lda, b, C, ldc, MR, n, alpha, beta, first);
}
/* op(A) read in place: k lda apart (A transposed) */
static void micro_kernel_cols(int kc, const float *restrict a, int lda, const float *restrict b, float *C,
                              int ldc, int n, float alpha, float beta, int first) {
    micro_kernel_at(kc, a, (size_t)lda, 1, b, C, ldc, MR, n, alpha, beta, first);
}
#else
/* Portable kernel: an outer-product loop on a local accumulator array that the compiler may
 * vectorise along NR with broadcast loads of a. */
static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *C, int ldc,
                         int m, int n, float alpha, float beta, int first) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * NR, *ak = a + (size_t)k * MR;
        for (int i = 0; i < MR; i++) {
            float ai = ak[i];
            for (int j = 0; j < NR; j++) acc[i][j] += ai * bk[j];
        }
    }
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
#endif

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
    const float *pre; /* op(B) packed by k_gemm_pack_b, or NULL: pack it here */
    size_t npad;      /* with pre: N rounded up to whole NR panels */
} GemmArgs;

/* Blocks of C at most DIRECT_MAX_N columns wide read op(A) in place instead of packing it: a packed
 * A panel serves every NR-panel of the block, so in a narrow block its copy is a large share of
 * the work (two 32-wide panels at N = 64). Each element keeps the packed path's arithmetic (same
 * values, same order), so the result is the same bit for bit. Measured on Zen 4, one thread, time
 * packed / in place over M 128-8192, K 64-2048, N 32 / 64 / 128, B not transposed:
 *   A not transposed (rows of A streamed): AVX-512 1.13-1.31 / 1.04-1.10 / 0.96-1.03,
 *     AVX2 1.27-1.54 / 1.02-1.28 / 0.93-1.24, SSE2 1.07-1.39 / 1.03-1.19 / 0.92-1.13;
 *   A transposed (op(A) rows lda apart): with lda <= 512 AVX-512 1.11-1.43 / 1.06-1.25 /
 *     1.03-1.15, AVX2 1.10-1.66 / 1.03-1.17 / 0.90-1.11; with lda >= 1024 AVX2 fell to 0.35-0.95
 *     (every k of a panel in the same few L1 sets, a page apart at lda 8192) and SSE2 (4-wide
 *     vectors: each k's few floats cost a load of their own) was 0.84-1.05 at any lda.
 * Wider blocks (N = 256) were up to 8% slower in place (AVX-512, K 256 and 1024). */
#define DIRECT_MAX_N 128
#if VL >= 8
#define DIRECT_TRANS_MAX_LDA 512
#else
#define DIRECT_TRANS_MAX_LDA 0
#endif

/* C[r0..r1, c0..c1] of the product, single-threaded, with private packing buffers
 * bp (KC x NC) and ap (MC x KC): the classic five-loop blocked GEMM on one region. */
static void gemm_region(const GemmArgs *g, int r0, int r1, int c0, int c1, float *bp, float *ap) {
    for (int jc = c0; jc < c1; jc += NC) {
        int nc = imin(NC, c1 - jc), npan = (nc + NR - 1) / NR;
        for (int pc = 0; pc < g->K; pc += KC) {
            int kc = imin(KC, g->K - pc), first = pc == 0;
            const float *bk = bp;
            if (g->pre) /* slice pc, panels from jc on (k_gemm_pack_b's layout) */
                bk = g->pre + (size_t)pc * g->npad + (size_t)(jc / NR) * kc * NR;
            else
                for (int q = 0; q < npan; q++)
                    pack_b_panel(bp + (size_t)q * kc * NR, g->B, g->ldb, g->transB, pc, kc, jc + q * NR,
                                 imin(NR, nc - q * NR));
#ifdef VL
            if (nc <= DIRECT_MAX_N && (!g->transA || g->lda <= DIRECT_TRANS_MAX_LDA)) {
                /* op(A) in place; a last, partial MR panel is packed */
                for (int ic = r0; ic < r1; ic += MC) {
                    int mc = imin(MC, r1 - ic);
                    for (int q = 0; q < npan; q++)
                        for (int p = 0; p < mc; p += MR) {
                            float *c = g->C + (size_t)(ic + p) * g->ldc + jc + q * NR;
                            int n = imin(NR, nc - q * NR);
                            const float *bq = bk + (size_t)q * kc * NR;
                            if (mc - p < MR) {
                                if (q == 0) pack_a(ap, g->A, g->lda, g->transA, ic + p, mc - p, pc, kc);
                                micro_kernel(kc, ap, bq, c, g->ldc, mc - p, n, g->alpha, g->beta, first);
                            } else if (!g->transA)
                                micro_kernel_rows(kc, g->A + (size_t)(ic + p) * g->lda + pc, g->lda, bq, c,
                                                  g->ldc, n, g->alpha, g->beta, first);
                            else
                                micro_kernel_cols(kc, g->A + (size_t)pc * g->lda + ic + p, g->lda, bq, c,
                                                  g->ldc, n, g->alpha, g->beta, first);
                        }
                }
                continue;
            }
#endif
            for (int ic = r0; ic < r1; ic += MC) {
                int mc = imin(MC, r1 - ic);
                pack_a(ap, g->A, g->lda, g->transA, ic, mc, pc, kc);
                /* B micro-panel stays in L1 while the MR-panels of the A block stream from L2 */
                for (int q = 0; q < npan; q++)
                    for (int p = 0; p < mc; p += MR)
                        micro_kernel(kc, ap + (size_t)p * kc, bk + (size_t)q * kc * NR,
                                     g->C + (size_t)(ic + p) * g->ldc + jc + q * NR, g->ldc,
                                     imin(MR, mc - p), imin(NR, nc - q * NR), g->alpha, g->beta, first);
            }
        }
    }
}

/* The blocked GEMM on g (op(B) packed here, or g->pre), M x N, over OpenMP's threads. */
static void gemm_blocked_run(const GemmArgs *g, int M, int N) {
    int K = g->K;
    if (K == 0) {
        scale_c(g->C, g->ldc, M, N, g->beta);
        return;
    }
    int nt = gemm_team(M, N, K), par = nt > 1;
    /* Bounded scratch (kscratch.h, kept between calls): private packed B and A blocks for each
     * thread. Every thread packs the B it needs itself (a K x N copy per thread, small next to
     * M N K / threads), so threads never wait for each other: no barrier in the parallel region. */
    int kc_max = imin(KC, K);
    size_t bp_floats = g->pre ? 0 : (size_t)kc_max * imin(NC, (N + NR - 1) / NR * NR);
    size_t ap_floats = (size_t)kc_max * imin(MC, (M + MR - 1) / MR * MR);
    float *buf = kscratch_floats(KS_GEMM, (bp_floats + ap_floats) * nt);
    int mt = (M + MR - 1) / MR, ntile = (N + NR - 1) / NR; /* tiles along M and N */
    if (!par) { /* no parallel region at all: even an inactive one costs 0.3 us (threading.h) */
        gemm_region(g, 0, M, 0, N, buf, buf + bp_floats);
        return;
    }

#pragma omp parallel num_threads(nt)
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
            if (r0 < r1 && c0 < c1) gemm_region(g, r0, r1, c0, c1, bp, bp + bp_floats);
        }
    }
}

void k_gemm_blocked(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    GemmArgs g = {transA, transB, K, alpha, beta, A, B, lda, ldb, ldc, C, NULL, 0};
    gemm_blocked_run(&g, M, N);
}

/* ---- op(B) packed once (gemm.h) ------------------------------------------------------------- */

static size_t npad_of(int N) { return (size_t)(N + NR - 1) / NR * NR; }

#ifdef VL
/* N columns fill their NR-wide panels but for at most an eighth of padding. */
static int panels_full(int N) {
    size_t npad = npad_of(N);
    return N > 0 && 8 * (npad - (size_t)N) <= npad;
}
#endif

size_t k_gemm_pack_floats(int N, int K) { return (size_t)K * npad_of(N); }

/* Slice after KC slice (slice at k0 starts at k0 * npad), each as the NR-column panels
 * gemm_region would pack for it, side by side: exactly the bytes the packing would produce. */
void k_gemm_pack_b(float *packed, int transB, int N, int K, const float *B, int ldb) {
    CHECK(N >= 0 && K >= 0, "gemm_pack_b: negative size N=%d K=%d", N, K);
    size_t npad = npad_of(N);
    for (int pc = 0; pc < K; pc += KC) {
        int kc = imin(KC, K - pc);
        for (int q = 0; q * NR < N; q++)
            pack_b_panel(packed + (size_t)pc * npad + (size_t)q * kc * NR, B, ldb, transB, pc, kc, q * NR,
                         imin(NR, N - q * NR));
    }
}

void k_gemm_packed(int transA, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *packed, float beta, float *C, int ldc) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_packed: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    GemmArgs g = {transA, 0, K, alpha, beta, A, NULL, lda, 0, ldc, C, packed, npad_of(N)};
    gemm_blocked_run(&g, M, N);
}

/* ---- one row on the packed panels ------------------------------------------------------------
 * y = alpha x op(B) + beta y for a single row x (batch-1 generation, sequential steps) on the
 * panels of k_gemm_pack_b: the panels are read front to back, one stream, with no horizontal sums,
 * GV_PANELS panels at a time so that 2 x GV_PANELS accumulator chains hide the FMA latency. Each
 * element is the micro-kernel's very arithmetic (one chain in k order from zero per KC slice, the
 * same write-back), so the row is bit for bit row 0 of k_gemm_packed. Measured on Zen 4 (AVX-512,
 * one thread, 5 MiB of weights re-read from L3, GB/s of weights, against k_gemm_small's dot form):
 * N 768 K 288: 84 -> 93, N 288 K 288: 79 -> 90, N 1024 K 128: 78 -> 87, N 288 K 768: 90 -> 93;
 * from DRAM about level (N 32000 K 288: 42 -> 42, N 2048 K 768: 33 -> 30). Narrow products, whose
 * panels would be mostly padding, and x W^T in AVX2 and SSE2 builds stay on the dot form
 * (gemv_packed_ok). */
#ifdef VL
enum { GV_PANELS = 4 };

/* Panels [q0, q1) of one KC slice bk (kc deep): C[q NR ..] as write_tile does for row 0. */
static void gemv_panels(int kc, const float *restrict x, const float *restrict bk, float *c, int N, int q0, int q1,
                        float alpha, float beta, int first) {
    Vec va = V_SET1(alpha), vb = V_SET1(beta);
    for (int q = q0; q < q1; q += GV_PANELS) {
        int g = imin(GV_PANELS, q1 - q);
        const float *b = bk + (size_t)q * kc * NR;
        Vec acc[GV_PANELS][NV];
        for (int p = 0; p < GV_PANELS; p++)
            for (int v = 0; v < NV; v++) acc[p][v] = V_ZERO();
        if (g == GV_PANELS) {
            for (int k = 0; k < kc; k++) {
                Vec xk = V_SET1(x[k]);
                for (int p = 0; p < GV_PANELS; p++)
                    for (int v = 0; v < NV; v++)
                        acc[p][v] = V_FMA(xk, V_LOAD(b + (size_t)p * kc * NR + (size_t)k * NR + v * VL), acc[p][v]);
            }
        } else {
            for (int p = 0; p < g; p++)
                for (int k = 0; k < kc; k++) {
                    Vec xk = V_SET1(x[k]);
                    for (int v = 0; v < NV; v++)
                        acc[p][v] = V_FMA(xk, V_LOAD(b + (size_t)p * kc * NR + (size_t)k * NR + v * VL), acc[p][v]);
                }
        }
        for (int p = 0; p < g; p++)
            for (int v = 0; v < NV; v++) {
                int j = (q + p) * NR + v * VL;
                float tile[VL], *t = tile;
                int whole = j + VL <= N, read = !first || beta != 0.0f;
                if (whole) t = c + j;
                else
                    for (int l = 0; l < VL; l++) tile[l] = read && j + l < N ? c[j + l] : 0.0f;
                if (!first) V_STORE(t, V_FMA(va, acc[p][v], V_LOAD(t)));
                else if (beta == 0.0f) V_STORE(t, V_MUL(va, acc[p][v]));
                else V_STORE(t, V_FMA(va, acc[p][v], V_MUL(vb, V_LOAD(t))));
                if (!whole)
                    for (int l = 0; l < VL && j + l < N; l++) c[j + l] = tile[l];
            }
    }
}
#endif

/* Whether a one-row product takes the packed panels: at most an eighth of the panels' width
 * padding (a Mamba2 dt block of 8 heads in 32-wide panels would read four times its weights), and
 * for y = x W^T (transB = 1, every product of generation) only in AVX-512 builds. Measured on
 * Zen 4, one thread, weights cycled through 7.6-72 MiB as a model's layers are (bench_kernels
 * --only gemv), GB/s of weight, dot form / panels, three runs:
 *   AVX-512: N 288 K 288: 55-71 / 67-81, N 768 K 288: 62-66 / 70-77, N 288 K 768: 73 / 76,
 *            N 32000 K 288: 36-37 / 34-36, N 2048 K 768: 32-33 / 31-32;
 *   AVX2:    288 x 288: 59-82 / 63-83, 768 x 288: 50-79 / 48-83, 288 x 768: 57-86 / 53-79,
 *            32000 x 288: 26-35 / 23-28, 2048 x 768: 25-29 / 25-27 (-20% .. +7%, mostly below);
 *   SSE2:    64-69 / 53-57, 53-59 / 40-49, 50 / 45, 25 / 16, 22 / 16 (8-wide panels of 4-wide
 *            vectors).
 * y = x W (transB = 0) reads the panels 1.2-2x faster than its dot form in every build. */
#ifdef VL
static int gemv_packed_ok(int N, int transB) {
#if VL >= 16
    (void)transB;
    return panels_full(N);
#else
    return !transB && panels_full(N);
#endif
}

/* Per weight read, one thread, for the team (as gemm_small.c's SMALL_NS_WEIGHT). */
#define GV_NS_WEIGHT 0.04

static void gemv_packed(int transA, int N, int K, float alpha, const float *A, int lda, const float *packed,
                        float beta, float *C) {
    const float *x = A;
    if (transA && lda != 1) { /* op(A) is column 0 of A: gather it */
        float *xs = kscratch_floats(KS_GEMM, (size_t)K);
        for (int k = 0; k < K; k++) xs[k] = A[(size_t)k * lda];
        x = xs;
    }
    size_t npad = npad_of(N);
    int npan = (int)(npad / NR), ngrp = (npan + GV_PANELS - 1) / GV_PANELS;
    /* threads own whole groups of panels, every slice of them, so each element is one thread's */
    KT_FOR(kt_team_rows((double)K * (double)npad * GV_NS_WEIGHT, ngrp),
           for (int gi = 0; gi < ngrp; gi++) {
               int q0 = gi * GV_PANELS, q1 = imin(npan, q0 + GV_PANELS);
               for (int pc = 0; pc < K; pc += KC)
                   gemv_panels(imin(KC, K - pc), x + pc, packed + (size_t)pc * npad, C, N, q0, q1, alpha, beta,
                               pc == 0);
           });
}
#endif

int k_gemm_pb_row_panels(int N, int transB) {
#ifdef VL
    return gemv_packed_ok(N, transB);
#else
    (void)N, (void)transB;
    return 0;
#endif
}

/* Which code runs a product (k_gemm):
 * - few rows (M <= small_m_max()): k_gemm_small (gemm_small.c), in every build. A packing GEMM
 *   copies all of op(B) and then uses it M times; streaming it once is 2-8x faster at M <= 4.
 *   Measured (Zen 4, one thread, GFLOP/s at K = N = 768, transB = 1 / 0; "packed" = OpenBLAS or
 *   k_gemm_blocked, whichever is faster):
 *     AVX-512: M = 1: 38 / 28 vs 39 / 33 (OpenBLAS streams M = 1 too), M = 4: 65 / 94 vs 31 / 40,
 *              M = 8: 65 / 95 vs 48 / 58, M = 16: 66 / 95 vs 68 / 78 (blocked: 37 / 59)
 *     AVX2:    M = 4: 55 / 80 vs 34 / 50, M = 8: 56 / 80 vs 52 / 68, M = 16: 57 / 80 vs 72 / 86
 *              (blocked: 42 / 62), and M = 1 at K = N = 2048: 65 / 43 vs 12 / 16 GB/s of weight.
 *   So the small path takes M <= 8 where OpenBLAS would run the rest and M <= 16 against the
 *   built-in GEMM.
 * - otherwise, with OpenBLAS, cblas_sgemm when the product is not worth a parallel region
 *   (gemm_team gives one thread) and OpenBLAS runs a kernel of the build's class (blas_usable,
 *   below): 5-8% faster than k_gemm_blocked on one core; except narrow products with nearly
 *   full panels, which k_gemm_blocked runs faster there (builtin_narrow, below). OpenBLAS always
 *   runs on one thread (threads.c), so its own pool never spins against OpenMP's.
 * - otherwise, with OpenBLAS, narrow products (N <= 48, panels far from full) on OpenBLAS in row
 *   slices on OpenMP's threads (blas_slices, below);
 * - otherwise k_gemm_blocked on OpenMP's threads.
 * The choice depends on the shape, on "one thread or more", never on how many, and on the kernel
 * OpenBLAS chose for the host: results are bit-identical at any thread count >= 2 (and at any count
 * in builds without OpenBLAS or with a generic OpenBLAS kernel). */

/* OpenBLAS builds for many CPUs at once (DYNAMIC_ARCH, as Debian's) choose their kernels when the
 * library loads, from the processor's family and model numbers, and give a model newer than their
 * tables a generic SSE3 kernel ("Prescott"). Debian's 0.3.21 does so on an Intel Xeon of family 6,
 * model 207 (AVX-512), where its square products then run at 19% of the FMA peak and the built-in
 * GEMM at 82-87% (one thread, bench_kernels --only gemm). So the BLAS runs products only when its
 * kernel has the build's vector class: AVX2 + FMA or wider in builds that have AVX2 + FMA, any
 * kernel in builds that have not (NATIVE=0: the built-in one is SSE2 too). The cores below are the
 * OpenBLAS x86-64 targets with AVX2 + FMA or AVX-512 GEMM kernels (bench/torch_bench.py has the
 * same list, to give PyTorch's OpenBLAS the host's kernel); OPENBLAS_CORETYPE, which users set to
 * correct OpenBLAS's choice, changes the name it reports and so this choice. */
int k_gemm_blas_core_ok(const char *core) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    static const char *const wide[] = {"Haswell", "Zen", "Dhyana", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; core && i < sizeof wide / sizeof wide[0]; i++)
        if (strcasecmp(core, wide[i]) == 0) return 1;
    return 0;
#else
    (void)core;
    return 1;
#endif
}

const char *k_blas_core(void) {
#ifdef IM_OPENBLAS
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
#else
    return "none";
#endif
}

#ifdef IM_OPENBLAS
/* Whether this process's OpenBLAS kernel is used at all: decided once (OpenBLAS fixes its kernel at
 * load), -1 until then; every thread that races to decide writes the same value. */
static _Atomic int blas_core_usable = -1;

static int blas_usable(void) {
    int ok = atomic_load_explicit(&blas_core_usable, memory_order_relaxed);
    if (ok < 0) {
        ok = k_gemm_blas_core_ok(k_blas_core());
        atomic_store_explicit(&blas_core_usable, ok, memory_order_relaxed);
    }
    return ok;
}
#endif

int k_blas_used(void) {
#ifdef IM_OPENBLAS
    return blas_usable();
#else
    return 0;
#endif
}

void k_blas_describe(char *buf, size_t n) {
    if (!strcmp(k_blas_name(), "none")) snprintf(buf, n, "none");
    else snprintf(buf, n, "%s (%s%s)", k_blas_name(), k_blas_core(), k_blas_used() ? "" : ", generic: built-in GEMM");
}

static int use_blas(int M, int N, int K) {
#ifdef IM_OPENBLAS
    return gemm_team(M, N, K) == 1 && blas_usable();
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

static int small_m_max(int M, int N, int K) { return use_blas(M, N, K) ? 8 : 16; }

/* Narrow products that the built-in GEMM runs faster than OpenBLAS on one thread, since it reads
 * op(A) in place there (DIRECT_MAX_N) and their panels are nearly full. Measured on Zen 4, one
 * thread, OpenBLAS time / built-in time over M 256-8192, K 64 and 256, all four transposes:
 *   AVX-512 against OpenBLAS's Cooperlake kernel: N 32: 0.87-1.59, N 64: 1.05-1.32, N 96:
 *     1.02-1.24, N 128: 1.02-1.20, but N 40: 0.59-0.96, N 100: 0.75-0.96, N 17: 0.34-1.14;
 *   AVX2 against its Haswell kernel (OPENBLAS_CORETYPE=Haswell): N 16: 1.11-1.77, N 32:
 *     0.94-1.59, N 48: 0.85-1.30, N 64-128: 0.84-1.37 (the low ends with transposed A at
 *     lda 1024, which DIRECT_TRANS_MAX_LDA now packs), but N 24: 0.68-1.10, N 40: 0.70-1.02.
 *   An OpenBLAS kernel with wider vectors than the build's keeps them (blas_wider).
 * Two exceptions stay with OpenBLAS. Few rows: M = 16 (one MR panel and a padded one), dW
 * N 64 K 8192: 0.7-0.9. Products that add onto a large C (beta != 0; an implicit layer's
 * injection) when C comes from memory, where OpenBLAS's loads of C are better timed: M 8192,
 * N 128, K 64, beta 1, operands cycled through 48 MiB: 0.86, in the implicit LM's solver 0.85-0.9. */
#define NARROW_MIN_M 64
#define NARROW_MAX_READ_C (64 * 1024) /* floats of C (256 KiB) that may be read: L2-resident */
#ifdef IM_OPENBLAS
/* Whether OpenBLAS's kernel has wider vectors than the build's (an AVX2 build on an AVX-512 host,
 * any OpenBLAS under the SSE2 kernel): then it keeps the narrow products too. Decided once, as
 * blas_core_usable. */
static _Atomic int blas_core_wider = -1;

static int blas_wider(void) {
    int w = atomic_load_explicit(&blas_core_wider, memory_order_relaxed);
    if (w < 0) {
#if defined(__AVX512F__)
        w = 0;
#elif defined(__AVX2__) && defined(__FMA__)
        static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
        const char *core = k_blas_core();
        w = 0;
        for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++) w |= strcasecmp(core, avx512[i]) == 0;
#else
        w = 1;
#endif
        atomic_store_explicit(&blas_core_wider, w, memory_order_relaxed);
    }
    return w;
}
#endif

static int builtin_narrow(int transA, int M, int N, int lda, float beta) {
#if defined(VL) && defined(IM_OPENBLAS)
    return M >= NARROW_MIN_M && N <= DIRECT_MAX_N && panels_full(N) &&
           (!transA || lda <= DIRECT_TRANS_MAX_LDA) && (beta == 0.0f || (size_t)M * N <= NARROW_MAX_READ_C) &&
           !blas_wider();
#else
    (void)transA, (void)M, (void)N, (void)lda, (void)beta;
    return 0;
#endif
}

const char *k_gemm_backend(void) { return use_blas(1 << 12, 1 << 12, 1 << 12) ? "openblas" : "builtin"; }

/* Narrow products on two or more threads: OpenBLAS on row slices, one slice per call on OpenMP's
 * threads. With N under the register tile's width and panels far from full, the built-in GEMM's
 * tiles are mostly padding, and on two threads it ran such products slower than OpenBLAS on one:
 * Zen 4, AVX-512, K 64, us (k_gemm at 1 thread = OpenBLAS, k_gemm at 2 = built-in, OpenBLAS on two
 * row halves at once):
 *   M 8192: N 8: 163 / 285 / 96, N 16: 199 / 237 / 101, N 24: 318 / 241 / 161, N 40: 478 / 454 /
 *           262, N 48: 519 / 456 / 264; but N 32 (full panels): 357 / 168 / 198;
 *   M 1088: N 8: 16 / 16 / 8.9, N 16: 29 / 39 / 11, N 24: 42 / 38 / 19, N 48: 68 / 62 / 38.
 * (a Mamba2 in_proj's B and C blocks are N = d_state, its dt block N = heads). The slices depend on
 * M only (an even count, 2 to 16, of rows rounded to 16), so the bits do not depend on the thread
 * count (two or more; one thread runs the whole product on OpenBLAS, as before). */
#define SLICE_MAX_N 48
#define SLICE_MIN_M 64
static int blas_slices(int M, int N, int K) {
#if defined(VL) && defined(IM_OPENBLAS)
    return M >= SLICE_MIN_M && N <= SLICE_MAX_N && !panels_full(N) && gemm_team(M, N, K) > 1 && blas_usable();
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

#ifdef IM_OPENBLAS
static void gemm_blas_slices(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                             const float *B, int ldb, float beta, float *C, int ldc) {
    int want = 2 * ((M + 1023) / 1024);
    want = want < 2 ? 2 : want > 16 ? 16 : want;
    int rows = ((M + want - 1) / want + 15) / 16 * 16, ns = (M + rows - 1) / rows;
    KT_FOR(imin(gemm_team(M, N, K), ns), for (int q = 0; q < ns; q++) {
        int r0 = q * rows, m = imin(rows, M - r0);
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, m, N, K,
                    alpha, transA ? A + r0 : A + (size_t)r0 * lda, lda, B, ldb, beta, C + (size_t)r0 * ldc, ldc);
    });
}
#endif

void k_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= small_m_max(M, N, K)) {
        k_gemm_small(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#ifdef IM_OPENBLAS
    if (K > 0 && blas_slices(M, N, K)) {
        gemm_blas_slices(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    if (!use_blas(M, N, K) || builtin_narrow(transA, M, N, lda, beta)) {
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

/* Products on an op(B) packed once (kernels.h). Few rows stream B in place as in k_gemm. Builds
 * without BLAS run the packed panels for the rest: the alternative is the same blocked GEMM plus
 * the copy (measured, Zen 4, one thread, CPU time, GFLOP/s unpacked / packed, M = 32: 52 / 77 at
 * N 128, K 64; 56 / 88 at N 528, K 128; 11 / 12 at N 8). In BLAS builds OpenBLAS keeps what it
 * does better, measured the same way: tall products (M = 768: 91-101 either way; M = 2048: 59-67
 * vs 58-60 at N 2320, K 256, and 65-70 vs 49-55 at N 256, K 1024) and narrow ones, where the
 * blocked GEMM's 32-wide register tile is mostly padding (M = 32: 76 / 23 at N 16, 73 / 12 at
 * N 8, 75 / 39 at N 40, 114 / 71 at N 64, K 128, B not transposed); the packed panels win for
 * short, wide products (M = 32: 78 / 88 at N 528, K 128; 54 / 90 at N 256, K 1024; 81 / 92 at
 * N 2320, K 256; M = 64: 91 / 97 at N 512). */
#define PB_BLAS_MAX_M 511
#define PB_BLAS_MIN_N 256

void k_gemm_pb(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, const float *packed, float beta, float *C, int ldc) {
#ifdef VL
    if (packed && M == 1 && K > 0 && gemv_packed_ok(N, transB)) {
        gemv_packed(transA, N, K, alpha, A, lda, packed, beta, C);
        return;
    }
#endif
    int blas_better = use_blas(M, N, K) && !builtin_narrow(transA, M, N, lda, beta) &&
                      (M > PB_BLAS_MAX_M || N < PB_BLAS_MIN_N);
    if (!packed || M <= small_m_max(M, N, K) || blas_better || blas_slices(M, N, K)) {
        k_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    k_gemm_packed(transA, M, N, K, alpha, A, lda, packed, beta, C, ldc);
}

/* ---- Linear ---------------------------------------------------------------------------------- */

void k_linear_fwd(float *y, const float *x, const float *W, const float *b, int M, int C, int OC) {
    /* start every row at the bias and let the GEMM accumulate onto it (beta = 1) */
    if (b)
        KT_FOR(kt_team((double)M * OC * KT_NS_COPY, M),
               for (int i = 0; i < M; i++) memcpy(y + (size_t)i * OC, b, (size_t)OC * sizeof(float)));
    /* y (M, OC) = x (M, C) @ W^T, W stored (OC, C) */
    k_gemm(0, 1, M, OC, C, 1.0f, x, C, W, C, b ? 1.0f : 0.0f, y, OC);
}

/* db[o] += sum_i dy[i, o]: threads own disjoint column ranges, each column summed in row order,
 * so the chunk width changes which thread sums a column, never how. 64 columns (four AVX-512
 * vectors a row) give 256-wide outputs (an LSTM's 4 H at H 64) four chunks to split; at 256 they
 * were one, summed on one thread while the other waited. */
enum { BIAS_CHUNK = 64 };

/* db[o0 .. o1) += column sums of dy, o1 - o0 <= BIAS_CHUNK. */
static void bias_chunk(float *db, const float *dy, int M, int OC, int o0, int o1) {
    float acc[BIAS_CHUNK];
    for (int o = o0; o < o1; o++) acc[o - o0] = 0.0f;
    for (int i = 0; i < M; i++) {
        const float *row = dy + (size_t)i * OC;
        for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
    }
    for (int o = o0; o < o1; o++) db[o] += acc[o - o0];
}

static void bias_grad(float *db, const float *dy, int M, int OC) {
    int nchunk = (OC + BIAS_CHUNK - 1) / BIAS_CHUNK;
    KT_FOR(kt_team((double)M * OC * KT_NS_COPY, nchunk),
           for (int ch = 0; ch < nchunk; ch++)
               bias_chunk(db, dy, M, OC, ch * BIAS_CHUNK, imin(OC, (ch + 1) * BIAS_CHUNK)));
}

void k_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
                  int M, int C, int OC) {
    /* dx (M, C) += dy (M, OC) @ W (OC, C) */
    if (dx) k_gemm(0, 0, M, C, OC, 1.0f, dy, OC, W, C, 1.0f, dx, C);
    /* dW (OC, C) += dy^T @ x: the batch is the GEMM's K, so each entry is one thread's sum */
    if (dW) k_gemm(1, 0, OC, C, M, 1.0f, dy, OC, x, C, 1.0f, dW, C);
    if (db) bias_grad(db, dy, M, OC);
}
