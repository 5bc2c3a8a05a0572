/* cpu/gemm_small.c: products with few rows (small M): batch-1 generation, sequential steps, small
 * batches (gemm.h k_gemm_small; k_gemm and the Linear kernels route M <= GEMM_SMALL_M here).
 *
 * A packing GEMM copies all of op(B) (the weight) before it uses it, and with few rows of A it then
 * uses each packed element only M times: for a matrix-vector product the copy costs as much as the
 * product. Here op(B) is streamed once, in place, and every element read is used for all M rows:
 *   transB = 1 (y = x W^T, W stored (N, K): the Linear forward): "dot" form. A block of NB rows of
 *     W and MB rows of op(A) keep MB x NB vector accumulators along K, reduced at the end by a fixed
 *     lane tree (hsum4); the K tail (K mod VW) is one scalar sum per output, added after.
 *   transB = 0 (dx = dy W, B stored (K, N)): "axpy" form. Rows of C for up to 4 rows of op(A)
 *     are accumulated in an L1-resident block of up to 512 columns, y += a[i, k] B[k, :], whole
 *     rows of B streamed in order, four rows of B fused per pass over y.
 * op(A) with transA = 1 is read with strides in the axpy form and copied to (M, K) rows (M K floats,
 * tiny next to the K N of B) in the dot form.
 *
 * Determinism: each C element is one accumulator chain in k order plus a fixed reduction, whatever
 * block it falls in (rows past the edge of a block re-read the last row and are dropped), and
 * threads split only the N columns, in whole blocks. So the result is the same at any thread count.
 * The vector code uses GNU C vector types (gcc, clang): VW = 16 floats with AVX-512, 8 with AVX2,
 * 4 (SSE2) otherwise; -ffp-contract=fast makes acc += a * b one FMA where the ISA has one.
 * Out of scope: large M (the blocked GEMM, gemm.c), strided C columns.
 */
#include "../kernels.h"
#include "gemm.h"

#include <string.h>

#include "../../core/check.h"
#include "kscratch.h"

#include "threading.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__GNUC__)
#define IM_NOINLINE __attribute__((noinline))
#else
#define IM_NOINLINE
#endif

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX2__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * sizeof(float))));

/* One-thread time of a small product, for threading.h's kt_team: every multiply-add plus every
 * weight element streamed (the M = 1 product is bound by reading op(B)). Measured on Zen 4
 * (AVX-512, 2 cores) in quiet moments of a shared machine: M = 1, K = N = 768 (590k MACs) takes
 * 32 us on one thread and 15-17 us on two (both forms), K = N = 288 (83k) 3.5-4 us on one and
 * barely less on two, so it stays serial: when another process holds a core, a region waits for
 * a whole time slice (then 768 took 0.2-2 ms on two threads), and a small product has nothing to
 * win against that risk. */
#define SMALL_NS_MAC 0.012
#define SMALL_NS_WEIGHT 0.04

static int imin(int a, int b) { return a < b ? a : b; }

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* out[0..3] = the lane sums of a, b, c, d, each in the same fixed tree order. */
static inline void hsum4(vf a, vf b, vf c, vf d, float *out) {
#if defined(__AVX512F__)
    /* 16 -> 8 lanes: lane l + lane l + 8, then the AVX2 tree */
    __m512 va = (__m512)a, vb = (__m512)b, vc = (__m512)c, vd = (__m512)d;
#define HALVES(v) _mm256_add_ps(_mm512_castps512_ps256(v), \
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
    __m256 ya = HALVES(va), yb = HALVES(vb), yc = HALVES(vc), yd = HALVES(vd);
#undef HALVES
#elif defined(__AVX2__)
    __m256 ya = (__m256)a, yb = (__m256)b, yc = (__m256)c, yd = (__m256)d;
#endif
#if defined(__AVX2__) || defined(__AVX512F__)
    /* hadd pairs lanes (0+1, 2+3) within each 128-bit half; then the two halves are added */
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(ya, yb), _mm256_hadd_ps(yc, yd));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    _mm_storeu_ps(out, s);
#else
    const vf *v[4] = {&a, &b, &c, &d};
    for (int q = 0; q < 4; q++) {
        float l[VW];
        memcpy(l, v[q], sizeof l);
        out[q] = (l[0] + l[1]) + (l[2] + l[3]);
    }
#endif
}

/* ---- dot form: C[i, j] = sum_k opA[i, k] W[j, k] ------------------------------------------- */

/* out[i][j] = <x_i, w_j> for MB rows of X (row stride ldx, m valid) and NB rows of W (ldw, n
 * valid): MB x NB accumulator vectors, one load of each W vector per k step. */
#define DEFINE_DOT(MB, NB)                                                                         \
    static IM_NOINLINE void dot_##MB##x##NB(int K, const float *X, size_t ldx, int m,            \
                                            const float *W, size_t ldw, int n,                   \
                                            float out[][DOT_NB], int oc) {                                 \
        const float *x[MB], *w[NB];                                                               \
        for (int i = 0; i < MB; i++) x[i] = X + (size_t)(i < m ? i : m - 1) * ldx;               \
        for (int j = 0; j < NB; j++) w[j] = W + (size_t)(j < n ? j : n - 1) * ldw;               \
        vf acc[MB][NB];                                                                           \
        for (int i = 0; i < MB; i++)                                                              \
            for (int j = 0; j < NB; j++) acc[i][j] = (vf){0};                                     \
        int k = 0;                                                                                \
        for (; k + VW <= K; k += VW) {                                                            \
            vf wv[NB];                                                                            \
            for (int j = 0; j < NB; j++) wv[j] = vload(w[j] + k);                                 \
            for (int i = 0; i < MB; i++) {                                                        \
                vf xv = vload(x[i] + k);                                                          \
                for (int j = 0; j < NB; j++) acc[i][j] += xv * wv[j];                             \
            }                                                                                     \
        }                                                                                         \
        for (int i = 0; i < MB; i++)                                                              \
            for (int j = 0; j < NB; j += 4)                                                       \
                hsum4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3], &out[i][oc + j]);        \
        if (k < K)                                                                                \
            for (int i = 0; i < MB; i++)                                                          \
                for (int j = 0; j < NB; j++) {                                                    \
                    float t = 0.0f;                                                               \
                    for (int kk = k; kk < K; kk++) t += x[i][kk] * w[j][kk];                      \
                    out[i][oc + j] += t;                                                               \
                }                                                                                 \
    }

/* Register budgets: MB x NB accumulators plus the loaded W vectors must fit the vector file
 * (32 zmm, 16 ymm/xmm), with at least 8 independent chains (FMA latency x pipes) at M = 1; and
 * enough W rows per call, as with K ~ 300 the reduction and call overhead weigh against 18 vector
 * steps, but not so many that the prefetchers lose the streams (AVX-512, M = 1, GB/s at
 * K = N = 288 / 2048: 63 / - with 4 rows per call, 78 / 58 with 8, 74 / 30 with 16). Blocks are
 * DOT_NB = 8 rows of W, each covered by one or two calls of the kernel for the rows left. */
#define DOT_NB 8
#if defined(__AVX512F__)
DEFINE_DOT(1, 8)
DEFINE_DOT(2, 8)
DEFINE_DOT(4, 4) /* 16 accumulators; 8 loads per 16 FMAs */
#define DOT_K1 dot_1x8
#define DOT_K2 dot_2x8
#define DOT_K4 dot_4x4
enum { NB1 = 8, NB2 = 8, NB4 = 4 };
#else
DEFINE_DOT(1, 8)
DEFINE_DOT(2, 4)
#define DOT_K1 dot_1x8
#define DOT_K2 dot_2x4
#define DOT_K4 dot_2x4 /* no 4-row kernel in 16 registers: two rows at a time */
enum { NB1 = 8, NB2 = 4, NB4 = 4 };
#endif

/* The operands of one small-M product. A is op(A) as rows (sai, sak strides). */
typedef struct {
    int M, N, K, transB;
    float alpha, beta;
    const float *A;
    size_t sai, sak;
    const float *B;
    int ldb;
    float *C;
    int ldc;
} SmallArgs;

/* C[i, j] = alpha s + beta C[i, j], or alpha s when beta = 0 (C is not read: it may hold NaNs). */
static inline void put(float *c, float s, float alpha, float beta) {
    *c = beta == 0.0f ? alpha * s : alpha * s + beta * *c;
}

/* Columns [j0, j1) of C in the dot form; op(A) rows are contiguous (sak = 1). */
static void dot_cols(const SmallArgs *g, int j0, int j1) {
    size_t ldx = g->sai, ldw = (size_t)g->ldb;
    for (int j = j0; j < j1; j += DOT_NB) {
        int n = imin(DOT_NB, j1 - j);
        const float *w = g->B + (size_t)j * ldw;
        for (int i = 0; i < g->M;) {
            int left = g->M - i;
            int m = left == 1 ? 1 : left == 2 || NB4 == NB2 ? 2 : imin(4, left);
            int nb = m == 1 ? NB1 : m == 2 ? NB2 : NB4;
            float out[4][DOT_NB];
            const float *x = g->A + (size_t)i * ldx;
            for (int c = 0; c < n; c += nb) {
                int nc = imin(nb, n - c);
                if (m == 1) DOT_K1(g->K, x, ldx, 1, w + c * ldw, ldw, nc, out, c);
                else if (m == 2) DOT_K2(g->K, x, ldx, 2, w + c * ldw, ldw, nc, out, c);
                else DOT_K4(g->K, x, ldx, m, w + c * ldw, ldw, nc, out, c);
            }
            for (int r = 0; r < m; r++)
                for (int c = 0; c < n; c++)
                    put(g->C + (size_t)(i + r) * g->ldc + j + c, out[r][c], g->alpha, g->beta);
            i += m;
        }
    }
}

/* ---- axpy form: C[i, j0 ..] = sum_k opA[i, k] B[k, j0 ..] ----------------------------------- */

enum { AX_MB = 4, AX_CW = 512 }; /* rows of op(A) at once; columns per L1-resident block of y */

/* y[i][0 .. n) = sum_k opA[i0 + i, k] B[k, j0 .. j0 + n) for i < mb <= AX_MB, n <= AX_CW: whole
 * rows of B are streamed (n contiguous floats per k, the prefetcher's favourite pattern) into y,
 * which stays in L1. Four rows of B are fused per pass over y (4 B loads, mb y loads and stores,
 * 4 mb FMAs per vector), but each y element is still one chain in k order. */
static void axpy_block(const SmallArgs *g, int i0, int mb, int j0, int n, float y[AX_MB][AX_CW]) {
    int nv = n / VW * VW;
    for (int i = 0; i < mb; i++) memset(y[i], 0, sizeof(float) * n);
    for (int k = 0; k < g->K;) {
        int kk = g->K - k >= 4 ? 4 : 1;
        float a[AX_MB][4];
        for (int i = 0; i < mb; i++)
            for (int q = 0; q < kk; q++) a[i][q] = g->A[(size_t)(i0 + i) * g->sai + (size_t)(k + q) * g->sak];
        const float *b0 = g->B + (size_t)k * g->ldb + j0;
        if (kk == 4) {
            const float *b1 = b0 + g->ldb, *b2 = b1 + g->ldb, *b3 = b2 + g->ldb;
            for (int v = 0; v < nv; v += VW) {
                vf w0 = vload(b0 + v), w1 = vload(b1 + v), w2 = vload(b2 + v), w3 = vload(b3 + v);
                for (int i = 0; i < mb; i++) {
                    vf acc = vload(y[i] + v);
                    acc += a[i][0] * w0;
                    acc += a[i][1] * w1;
                    acc += a[i][2] * w2;
                    acc += a[i][3] * w3;
                    memcpy(y[i] + v, &acc, sizeof acc);
                }
            }
            for (int j = nv; j < n; j++)
                for (int i = 0; i < mb; i++) {
                    float t = y[i][j];
                    t += a[i][0] * b0[j];
                    t += a[i][1] * b1[j];
                    t += a[i][2] * b2[j];
                    t += a[i][3] * b3[j];
                    y[i][j] = t;
                }
        } else {
            for (int v = 0; v < nv; v += VW) {
                vf w0 = vload(b0 + v);
                for (int i = 0; i < mb; i++) {
                    vf acc = vload(y[i] + v);
                    acc += a[i][0] * w0;
                    memcpy(y[i] + v, &acc, sizeof acc);
                }
            }
            for (int j = nv; j < n; j++)
                for (int i = 0; i < mb; i++) y[i][j] += a[i][0] * b0[j];
        }
        k += kk;
    }
}

/* Columns [j0, j1) of C in the axpy form, in blocks of AX_CW columns and AX_MB rows. */
static void axpy_cols(const SmallArgs *g, int j0, int j1) {
    float y[AX_MB][AX_CW];
    for (int j = j0; j < j1; j += AX_CW) {
        int n = imin(AX_CW, j1 - j);
        for (int i = 0; i < g->M; i += AX_MB) {
            int m = imin(AX_MB, g->M - i);
            axpy_block(g, i, m, j, n, y);
            for (int r = 0; r < m; r++)
                for (int c = 0; c < n; c++)
                    put(g->C + (size_t)(i + r) * g->ldc + j + c, y[r][c], g->alpha, g->beta);
        }
    }
}

/* ---- entry point ----------------------------------------------------------------------------- */

/* Columns [j0, j1) of C, in whichever form op(B) asks for. */
static void small_cols(const SmallArgs *g, int j0, int j1) {
    if (j0 >= j1) return;
    if (g->K == 0) { /* no product: C = beta C */
        for (int i = 0; i < g->M; i++)
            for (int j = j0; j < j1; j++) put(g->C + (size_t)i * g->ldc + j, 0.0f, g->alpha, g->beta);
    } else if (g->transB) {
        dot_cols(g, j0, j1);
    } else {
        axpy_cols(g, j0, j1);
    }
}

void k_gemm_small(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    SmallArgs g = {M, N, K, transB, alpha, beta, A, transA ? 1 : (size_t)lda, transA ? (size_t)lda : 1,
                   B, ldb, C, ldc};
    int nt = kt_team((double)N * K * (M * SMALL_NS_MAC + SMALL_NS_WEIGHT), N);
    /* Threads own whole column blocks: [blk * t / nt, blk * (t+1) / nt) of `blk` blocks. */
    int bw = transB ? DOT_NB : VW, blk = (N + bw - 1) / bw;
    nt = imin(nt, blk);
    if (transB && transA) { /* the dot form wants op(A) rows contiguous: copy them (M x K) */
        float *ap = kscratch_floats(KS_GEMM_SMALL, (size_t)M * K);
        for (int k = 0; k < K; k++)
            for (int i = 0; i < M; i++) ap[(size_t)i * K + k] = A[(size_t)k * lda + i];
        g.A = ap, g.sai = (size_t)K, g.sak = 1;
    }
    if (nt == 1) { /* no parallel region at all: an inactive one (if false) still costs 0.3 us in
                    * libgomp (threading.h), and batch-1 generation at d_model 128 ran ~12% slower */
        small_cols(&g, 0, N);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int tid = kt_thread_id();
        int j0 = (int)((long)blk * tid / nt) * bw, j1 = imin(N, (int)((long)blk * (tid + 1) / nt) * bw);
        small_cols(&g, j0, j1);
    }
}
