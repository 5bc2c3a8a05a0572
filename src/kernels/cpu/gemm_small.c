/* cpu/gemm_small.c: products with few rows (small M): batch-1 generation, sequential steps, small
 * batches (gemm.h k_gemm_small; k_gemm and the Linear kernels route M <= GEMM_SMALL_M here).
 *
 * A packing GEMM copies all of op(B) (the weight) before it uses it, and with few rows of A it then
 * uses each packed element only M times: for a matrix-vector product the copy costs as much as the
 * product. Here op(B) is streamed once, in place, and every element read is used for all M rows:
 *   transB = 1 (y = x W^T, W stored (N, K): the Linear forward): "dot" form. S rows of W (the
 *     next row of each of S runs of adjacent rows, so the weights are read as S sequential
 *     streams) and MB rows of op(A) keep MB x S vector accumulators along K, reduced at the end by
 *     a fixed lane tree (hsum4); the K tail (K mod VW) is one scalar sum per output, added after.
 *     The sums of up to 512 columns are buffered and stored to C in column order.
 *   transB = 0 (dx = dy W, B stored (K, N)): "axpy" form. Rows of C for up to 4 rows of op(A)
 *     are accumulated in an L1-resident block of up to 512 columns, y += a[i, k] B[k, :], whole
 *     rows of B streamed in order, four rows of B fused per pass over y.
 * op(A) with transA = 1 is read with strides in the axpy form and copied to (M, K) rows (M K floats,
 * tiny next to the K N of B) in the dot form.
 *
 * Determinism: each C element is one accumulator chain in k order plus a fixed reduction, whatever
 * run, call or block it falls in (rows past the edge of a call re-read its last row and are
 * dropped), and threads split only the N columns, in whole blocks. So the result is the same at any thread count.
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

/* The access order. The weight rows are read as S sequential streams far apart (S = dot_runs(M),
 * 4 or 8, below): a range of n rows is cut into S runs of n / S adjacent rows, and one kernel call
 * takes the next row of each run, so each run is read front to back (the rows of a run are
 * adjacent in memory). From DRAM the hardware prefetchers follow a few streams in distinct pages;
 * they lost track of the previous order, eight adjacent rows side by side (eight streams a row
 * apart that restart every eight rows), which ran at half the bandwidth. Measured on Zen 4 (AVX-512, one thread, loaded
 * machine, GB/s of weights, M = 1): 37 MB of rows with K = 288 (a 32000-word classifier), 8-16
 * eight rows side by side, 22-25 one row at a time, 26 in four runs; rows in L2 (N = K = 288)
 * 116 / 96 / 116: one row at a time leaves one chain to the FMA latency, four runs keep 4 MB
 * independent chains. The sums do not depend on the order: each output is one vector chain in k
 * order, then hsum4, then the scalar K tail, whichever run, call or thread it falls in. */
#define DOT_S_MAX 8

/* out[i ldo + s] = <x_i, w_s> for the m valid of MB rows of X (row stride ldx) and S weight rows
 * w_s = W + s wstep (n valid; the others re-read the last row): MB x S accumulator vectors, one
 * load of each weight vector per k step. All S sums of a row are stored, so out must have room
 * for S; the n - S extra ones are overwritten by the next call or land in the buffer's slack. */
#define DEFINE_DOT(MB, S)                                                                          \
    static IM_NOINLINE void dot_##MB##x##S(int K, const float *X, size_t ldx, int m,             \
                                           const float *W, size_t wstep, int n,                  \
                                           float *out, size_t ldo) {                             \
        const float *x[MB], *w[S];                                                                \
        for (int i = 0; i < MB; i++) x[i] = X + (size_t)(i < m ? i : m - 1) * ldx;               \
        for (int s = 0; s < S; s++) w[s] = W + (size_t)(s < n ? s : n - 1) * wstep;               \
        vf acc[MB][S];                                                                            \
        for (int i = 0; i < MB; i++)                                                              \
            for (int s = 0; s < S; s++) acc[i][s] = (vf){0};                                      \
        int k = 0;                                                                                \
        for (; k + VW <= K; k += VW) {                                                            \
            vf wv[S];                                                                             \
            for (int s = 0; s < S; s++) wv[s] = vload(w[s] + k);                                  \
            for (int i = 0; i < MB; i++) {                                                        \
                vf xv = vload(x[i] + k);                                                          \
                for (int s = 0; s < S; s++) acc[i][s] += xv * wv[s];                              \
            }                                                                                     \
        }                                                                                         \
        for (int i = 0; i < MB && i < m; i++)                                                     \
            for (int s = 0; s < S; s += 4)                                                        \
                hsum4(acc[i][s], acc[i][s + 1], acc[i][s + 2], acc[i][s + 3], out + i * ldo + s); \
        if (k < K)                                                                                \
            for (int i = 0; i < MB && i < m; i++)                                                 \
                for (int s = 0; s < S; s++) {                                                     \
                    float t = 0.0f;                                                               \
                    for (int kk = k; kk < K; kk++) t += x[i][kk] * w[s][kk];                      \
                    out[i * ldo + s] += t;                                                        \
                }                                                                                 \
    }

/* Register budgets: MB x S accumulators plus the S loaded weight vectors fit the vector file
 * (32 zmm; 16 ymm / xmm), with at least 8 independent chains where the registers allow (FMA
 * latency x pipes; in L2 at M = 1, S = 4 ran 18% below S = 8 with AVX-512, 19% with SSE2). A
 * product uses S = dot_runs(M) runs throughout; its rows of op(A) go MB_MAX at a time, the last
 * ones through a narrower kernel of the same S. */
DEFINE_DOT(1, 4)
DEFINE_DOT(2, 4)
#if defined(__AVX512F__)
DEFINE_DOT(1, 8)
DEFINE_DOT(2, 8) /* 16 accumulators + 8 weight vectors */
DEFINE_DOT(4, 4) /* 16 accumulators; 8 loads per 16 FMAs */
#define DOT_MB_MAX 4
#define DOT_HAVE_1X8 1
static int dot_runs(int M) { return M <= 2 ? 8 : 4; }
#elif defined(__AVX2__)
/* One row, AVX2: four runs, not eight. Eight 8-float streams read each cache line in two halves
 * two steps apart, and ran slower at every size measured on Zen 4 with this build (one thread,
 * `bench_kernels --only gemv`, GB/s of weights, eight runs / four): in L2 (K = N = 288) level
 * (105 / 105), in L3 (768 x 768) 86 / 92, weights cycled as in generation 78-82 / 84-87 (7.6-10
 * MiB) and 31 / 34 (72 MiB), the 110M model's 438 MB of weights 27 / 29.6. The sums are the
 * same: each output is one chain either way. (With AVX-512 a step reads whole lines and eight
 * runs stay ahead; SSE2 loses 19% in L2 with four and keeps eight.) */
#define DOT_MB_MAX 2 /* no 4-row kernel in 16 registers: two rows at a time */
#define DOT_HAVE_1X8 0
static int dot_runs(int M) { (void)M; return 4; }
#else
DEFINE_DOT(1, 8)
#define DOT_MB_MAX 2
#define DOT_HAVE_1X8 1
static int dot_runs(int M) { return M == 1 ? 8 : 4; }
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

/* dot_cols buffers the outputs of DOT_CH columns for DOT_MROWS rows of op(A) (33 KB of stack); a
 * row has DOT_S_MAX floats of slack, for the unused sums of a call at the end of a chunk (the
 * kernels store all S: copying the n valid ones out through memcpy cost 4% of batch-1 generation
 * of an implicit Mamba2 LM) */
enum { DOT_CH = 512, DOT_MROWS = 16, DOT_YW = DOT_CH + DOT_S_MAX };

/* The sums <x_i, w_c> for the n <= S weight rows c0 + s cstep into y[i][t0 + s], every row of op(A),
 * DOT_MB_MAX at a time. */
static void dot_rows(const SmallArgs *g, int S, const float *w, size_t wstep, int n, float (*y)[DOT_YW], int t0) {
    size_t ldx = g->sai;
    (void)S; /* only 4 where dot_runs never gives 8 */
    for (int i = 0; i < g->M;) {
        int m = imin(g->M - i, DOT_MB_MAX);
        const float *x = g->A + (size_t)i * ldx;
        float *out = &y[i][t0];
#if DOT_HAVE_1X8
        if (S == 8 && m == 1) dot_1x8(g->K, x, ldx, 1, w, wstep, n, out, DOT_YW);
        else
#endif
        if (m == 1) dot_1x4(g->K, x, ldx, 1, w, wstep, n, out, DOT_YW);
#if DOT_MB_MAX == 4
        else if (S == 8) dot_2x8(g->K, x, ldx, 2, w, wstep, n, out, DOT_YW);
        else if (m > 2) dot_4x4(g->K, x, ldx, m, w, wstep, n, out, DOT_YW);
#endif
        else dot_2x4(g->K, x, ldx, 2, w, wstep, n, out, DOT_YW);
        i += m;
    }
}

/* c[j .. j + n) = alpha y[0], y[ys], ... (+ beta c), as put does, with the beta test out of the loop */
static void put_cols(float *c, int j, const float *y, int ys, int n, const SmallArgs *g) {
    float alpha = g->alpha, beta = g->beta;
    c += j;
    if (beta == 0.0f)
        for (int r = 0; r < n; r++) c[r] = alpha * y[(size_t)r * ys];
    else
        for (int r = 0; r < n; r++) c[r] = alpha * y[(size_t)r * ys] + beta * c[r];
}

/* Columns [j0, j0 + n) of C, n <= DOT_CH, as S runs walked together (see dot_cols). */
static void dot_chunk(const SmallArgs *g, int j0, int n, float (*y)[DOT_YW]) {
    int S = dot_runs(g->M), L = (n + S - 1) / S;
    size_t ldw = (size_t)g->ldb, row = ldw * sizeof(float);
    const float *w = g->B + (size_t)j0 * ldw;
    if (L > 1 && L * row % 4096 == 0) L++;
    int t = 0, runs = (S - 1) * L <= n; /* buffer order: call by call */
    if (runs) {
        int last = n - (S - 1) * L; /* rows of the last run: 0 .. L */
        for (int r = 0; r < L; r++) {
            int k = r < last ? S : S - 1;
            dot_rows(g, S, w + (size_t)r * ldw, (size_t)L * ldw, k, y, t);
            t += k;
        }
    } else {
        L = n / S;
        for (int r = 0; r < L; r++, t += S) dot_rows(g, S, w + (size_t)r * ldw, (size_t)L * ldw, S, y, t);
        if (n > S * L) dot_rows(g, S, w + (size_t)S * L * ldw, ldw, n - S * L, y, t);
    }
    /* y holds column (r, s) of call r at t = r S + s (the short calls of the last run shift it):
     * the column is s L + r */
    for (int i = 0; i < g->M; i++) {
        float *c = g->C + (size_t)i * g->ldc;
        const float *yi = y[i];
        if (runs) { /* calls r < last hold S columns, the later ones S - 1 */
            int last = n - (S - 1) * L;
            for (int s = 0; s < S; s++) {
                put_cols(c, j0 + s * L, yi + s, S, last, g);
                if (s < S - 1) put_cols(c, j0 + s * L + last, yi + (size_t)last * S + s, S - 1, L - last, g);
            }
        } else {
            for (int s = 0; s < S; s++) put_cols(c, j0 + s * L, yi + s, S, L, g);
            put_cols(c, j0 + S * L, yi + (size_t)S * L, 1, n - S * L, g);
        }
    }
}

/* Columns [j0, j1) of C in the dot form; op(A) rows are contiguous (sak = 1). In chunks of DOT_CH
 * columns, each cut into S runs of L rows (the last one shorter), walked together: a call takes the
 * next row of each run. L is ceil(n / S), one more where the runs would start a multiple of 4 KB
 * apart: the S rows read side by side would then share their L1 sets (with 768 x 288, eight runs
 * are 27 x 4 KB apart). With too few rows for such runs (n < S (S - 1) or so), runs of n / S rows
 * and the n mod S rows left. The sums go to a buffer in the order they come and then to C in
 * column order: stored straight to C, the S outputs of a call fall on S cache lines and the
 * kernel ran 3-10% slower in L2. Eight adjacent rows per call (the order before the runs), with
 * the same buffered stores, stayed 1-8% slower than the runs even with the weights in L2 (M = 1:
 * 1072 x 256, 288 x 288, 296 x 64, 256 x 512 on Zen 4), so no size switches between the two. */
static void dot_cols(const SmallArgs *g, int j0, int j1) {
    float y[DOT_MROWS][DOT_YW];
    for (int i = 0; i < g->M; i += DOT_MROWS) {
        SmallArgs rows = *g;
        rows.M = imin(DOT_MROWS, g->M - i);
        rows.A += (size_t)i * g->sai;
        rows.C += (size_t)i * g->ldc;
        for (int j = j0; j < j1; j += DOT_CH) dot_chunk(&rows, j, imin(DOT_CH, j1 - j), y);
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
    int nt = kt_team_rows((double)N * K * (M * SMALL_NS_MAC + SMALL_NS_WEIGHT), N);
    /* Threads own whole column blocks: [blk * t / nt, blk * (t+1) / nt) of `blk` blocks. */
    int bw = transB ? 8 : VW, blk = (N + bw - 1) / bw;
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
