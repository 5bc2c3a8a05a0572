/* cpu/seq_mm.h: internal to the sequence kernels (cpu/ssd.c, cpu/attn.c), not a public contract.
 *
 * A small register-tiled matrix product for operands that fit in L1/L2 (a chunk of the SSD scan,
 * a block of attention scores). It is called INSIDE OpenMP regions, where BLAS must not be, and is
 * itself serial and deterministic (each C element is summed in k order). kseq_mm is defined in
 * cpu/seq_mm.c, kseq_dot inline below.
 */
#ifndef IMPLICIT_KERNELS_CPU_SEQ_MM_H
#define IMPLICIT_KERNELS_CPU_SEQ_MM_H

#include <stddef.h>

/* Which part of a product is needed. Only whole tiles are skipped, so entries of A that a
 * triangular mode promises to be zero must really be stored as 0. */
enum {
    KSEQ_TRI_NONE,   /* full product */
    KSEQ_TRI_K_LE_I, /* op(A) lower triangular: row i only uses k <= i */
    KSEQ_TRI_K_GE_I, /* op(A) upper triangular: row i only uses k >= i */
    KSEQ_TRI_J_LE_I  /* only C[i, j <= i] is wanted; entries above the diagonal are left partial */
};

/* Floats of packing space kseq_mm needs for a product with inner size K and N output columns. */
size_t kseq_mm_pack_floats(int K, int N);

/* C (M x N, ldc) += op(A) (M x K) @ op(B) (K x N).  op(A) = A (row stride lda) or, if ta, A^T
 * (A stored K x M); op(B) = B (ldb) or, if tb, B^T (B stored N x K).  pk: packing scratch of
 * kseq_mm_pack_floats(K, N) floats. tri: one of the KSEQ_TRI_* modes. */
void kseq_mm(float *pk, int M, int N, int K, const float *A, int lda, int ta, const float *B,
             int ldb, int tb, float *C, int ldc, int tri);

/* sum_i a[i] b[i] with 16 fixed partial sums: vectorisable and the same on every thread.
 * Inline: the sequence kernels call it on rows of 16..128 floats, where a call costs as much as
 * the arithmetic. */
static inline float kseq_dot(const float *a, const float *b, int n) {
    float part[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) part[j] += a[i + j] * b[i + j];
    for (; i < n; i++) part[i & 15] += a[i] * b[i];
    for (int w = 8; w >= 1; w /= 2) /* pairwise tree: a few vector adds, not 16 dependent ones */
        for (int j = 0; j < w; j++) part[j] += part[j + w];
    return part[0];
}

#endif
