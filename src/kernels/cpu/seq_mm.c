/* cpu/seq_mm.c: the small matrix product of the sequence kernels (seq_mm.h; kseq_dot is inline there).
 *
 * kseq_mm multiplies operands that fit in L1/L2 (an SSD chunk, a block of attention scores) from
 * inside OpenMP regions, where BLAS must not be called. Column panels of op(B), VW or 2*VW floats
 * wide, are used in place when B is not transposed and the panel is full, otherwise packed
 * (zero-padded); A is read in place. A TM x panel tile of C is accumulated in registers over the
 * whole k range, then added to C once. Serial and deterministic: each element of C is summed in k
 * order by the calling thread. Out of scope: large matrices (use k_gemm), strided C columns.
 */
#include <string.h>

#include "seq_mm.h"

#if defined(__GNUC__)
#define IM_NOINLINE __attribute__((noinline))
#else
#define IM_NOINLINE
#endif

static int imin(int a, int b) { return a < b ? a : b; }

#if defined(__AVX512F__)
#define TM 8  /* 8 rows x 2 vectors of 16 = 16 zmm accumulators */
#define VW 16
#else
#define TM 6  /* 6 x 2 vectors of 8 = 12 ymm */
#define VW 8
#endif
#define TN (2 * VW)

/* C[0..m, 0..n] += sum_k opA[i, k] bp[k, :] for one tile: opA[i, k] = A[i*sai + k*sak] (rows
 * past m re-read row m-1, their results are dropped), bp rows of NV vectors of VW floats with row
 * stride ldbp. Written with gcc/clang vector types so that the accumulators are registers and the
 * loop is broadcast-FMA code whatever the auto-vectoriser decides; one non-inlined copy per panel
 * width (NV = 1 for the P = 16 models, 2 otherwise). A full-width tile adds its accumulators to C
 * as whole vectors; only a partial one goes through a float array (one add per element either
 * way, so the results are the same). Going through the array for every tile cost a call to
 * memcpy and a scalar loop per tile: with operands in L1, Zen 4, one thread, the vector write-back
 * ran 3-6% faster at K = 64-192 and 11-16% at K = 16 (AVX-512 and AVX2 builds). */
#if defined(__GNUC__)
typedef float vfw __attribute__((vector_size(VW * sizeof(float))));
#define DEFINE_UKERN(NV)                                                                          \
    static IM_NOINLINE void ukern##NV(int kc, const float *A, size_t sai, size_t sak,            \
                                      const float *bp, size_t ldbp, float *C, int ldc, int m,     \
                                      int n) {                                                    \
        vfw acc[TM][NV], b[NV];                                                                   \
        size_t ro[TM];                                                                            \
        for (int i = 0; i < TM; i++) {                                                            \
            ro[i] = (size_t)(i < m ? i : m - 1) * sai;                                            \
            for (int v = 0; v < NV; v++) acc[i][v] = (vfw){0};                                    \
        }                                                                                         \
        for (int k = 0; k < kc; k++) {                                                            \
            for (int v = 0; v < NV; v++) memcpy(&b[v], bp + k * ldbp + v * VW, sizeof b[v]);    \
            const float *ak = A + k * sak;                                                        \
            for (int i = 0; i < TM; i++) {                                                        \
                float a = ak[ro[i]];                                                              \
                for (int v = 0; v < NV; v++) acc[i][v] += a * b[v];                               \
            }                                                                                     \
        }                                                                                         \
        if (n == NV * VW) { /* a full-width tile: whole vectors of C, no trip through memory */   \
            for (int i = 0; i < m; i++)                                                           \
                for (int v = 0; v < NV; v++) {                                                    \
                    vfw c;                                                                        \
                    memcpy(&c, C + (size_t)i * ldc + v * VW, sizeof c);                           \
                    c += acc[i][v];                                                               \
                    memcpy(C + (size_t)i * ldc + v * VW, &c, sizeof c);                           \
                }                                                                                 \
            return;                                                                               \
        }                                                                                         \
        float out[TM][NV * VW];                                                                   \
        memcpy(out, acc, sizeof out);                                                             \
        for (int i = 0; i < m; i++)                                                               \
            for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] += out[i][j];                      \
    }
#else /* plain C fallback, same arithmetic */
#define DEFINE_UKERN(NV)                                                                          \
    static void ukern##NV(int kc, const float *A, size_t sai, size_t sak, const float *bp,       \
                          size_t ldbp, float *C, int ldc, int m, int n) {                         \
        float acc[TM][NV * VW] = {{0}};                                                           \
        for (int k = 0; k < kc; k++)                                                              \
            for (int i = 0; i < m; i++)                                                           \
                for (int j = 0; j < NV * VW; j++)                                                 \
                    acc[i][j] += A[i * sai + k * sak] * bp[k * ldbp + j];                         \
        for (int i = 0; i < m; i++)                                                               \
            for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] += acc[i][j];                      \
    }
#endif
DEFINE_UKERN(1)
DEFINE_UKERN(2)

size_t kseq_mm_pack_floats(int K, int N) {
    (void)N;
    return (size_t)K * TN;
}

/* kseq_mm (seq_mm.h): column panels of nr = VW or 2 VW; a panel of op(B) is used in place when B
 * is not transposed and the panel is full, otherwise packed (zero-padded) into pk. A is read in
 * place. Every tile runs the same arithmetic; only the write-back is masked. */
void kseq_mm(float *pk, int M, int N, int K, const float *A, int lda, int ta, const float *B,
             int ldb, int tb, float *C, int ldc, int tri) {
    int nr = N <= VW ? VW : TN;
    size_t sai = ta ? 1 : (size_t)lda, sak = ta ? (size_t)lda : 1;
    for (int j0 = 0; j0 < N; j0 += nr) {
        int n = imin(nr, N - j0);
        const float *bp = B + j0;
        size_t ldbp = (size_t)ldb;
        if (tb || n < nr) { /* pack op(B)[:, j0 .. j0+n] as K rows of nr floats */
            if (n < nr) memset(pk, 0, sizeof(float) * (size_t)K * nr);
            if (!tb)
                for (int k = 0; k < K; k++)
                    memcpy(pk + (size_t)k * nr, B + (size_t)k * ldb + j0, sizeof(float) * n);
            else
                for (int j = 0; j < n; j++) {
                    const float *src = B + (size_t)(j0 + j) * ldb;
                    for (int k = 0; k < K; k++) pk[(size_t)k * nr + j] = src[k];
                }
            bp = pk;
            ldbp = (size_t)nr;
        }
        for (int i0 = 0; i0 < M; i0 += TM) {
            int m = imin(TM, M - i0), k0 = 0, k1 = K;
            if (tri == KSEQ_TRI_K_LE_I) k1 = imin(K, i0 + m);
            if (tri == KSEQ_TRI_K_GE_I) k0 = i0;
            if (tri == KSEQ_TRI_J_LE_I && j0 >= i0 + m) continue;
            if (k1 <= k0) continue;
            const float *ai = A + i0 * sai + k0 * sak, *bk = bp + k0 * ldbp;
            float *ci = C + (size_t)i0 * ldc + j0;
            if (nr == VW) ukern1(k1 - k0, ai, sai, sak, bk, ldbp, ci, ldc, m, n);
            else ukern2(k1 - k0, ai, sai, sak, bk, ldbp, ci, ldc, m, n);
        }
    }
}
