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
#include <string.h>

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

/* sum_i a[i] b[i] with 16 fixed partial sums: part[j] sums the i = j mod 16, then the pairwise tree
 * part[j] += part[j + w] for w = 8, 4, 2, 1; the same on every thread. Inline: the sequence
 * kernels call it on rows of 16..128 floats, where a call costs as much as the arithmetic. The
 * partial sums are one 16-float GNU C vector (two 8-float halves without AVX-512) and the tree its
 * halves: written as a float array,
 * gcc kept them in memory and the tree as dependent scalar loads and stores (the SSD step of
 * batch-1 generation spent most of its time there); the sums are the same, bit for bit. */
typedef float kseq_v16 __attribute__((vector_size(16 * sizeof(float))));
typedef float kseq_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef float kseq_v4 __attribute__((vector_size(4 * sizeof(float))));

/* The first part of kseq_dot: *out = its 16 partial sums folded once, part[j] + part[j + 8]
 * (vectors by pointer: an SSE build has no 32-byte registers to pass them in). With halves = 1
 * the 16 sums are two 8-float vectors on any ISA (the same sums): without 512-bit registers gcc
 * keeps a 16-float vector on the stack, a store and a reload per step (the SSD step ran 4x slower
 * than on AVX-512), and with AVX-512 the halves load what 8-float stores just wrote (the SSD
 * step writes a state row, then reads it for the readout). */
static inline void kseq_dot_fold(kseq_v8 *out, const float *a, const float *b, int n, int halves) {
    kseq_v8 lo, hi; /* lanes 0..7 and 8..15 of the partial sums */
    int i = 0;
    float ta[16], tb[16]; /* the tail, lane i mod 16; the other lanes add 0 * -0 = -0, which leaves
                           * any sum as it is (x + -0 = x, also for x = -0) */
    int tail = n % 16;
    if (tail) {
        for (int j = 0; j < 16; j++) ta[j] = 0.0f, tb[j] = -0.0f;
        memcpy(ta, a + (n - tail), sizeof(float) * (size_t)tail);
        memcpy(tb, b + (n - tail), sizeof(float) * (size_t)tail);
    }
#if defined(__AVX512F__)
    if (!halves) {
        kseq_v16 part = {0}, va, vb;
        for (; i + 16 <= n; i += 16) {
            memcpy(&va, a + i, sizeof va);
            memcpy(&vb, b + i, sizeof vb);
            part += va * vb;
        }
        if (tail) {
            memcpy(&va, ta, sizeof va);
            memcpy(&vb, tb, sizeof vb);
            part += va * vb;
        }
        /* halves by lane (not through memory: an address taken keeps part on the stack) */
        lo = (kseq_v8){part[0], part[1], part[2], part[3], part[4], part[5], part[6], part[7]};
        hi = (kseq_v8){part[8], part[9], part[10], part[11], part[12], part[13], part[14], part[15]};
        *out = lo + hi;
        return;
    }
#else
    (void)halves;
#endif
    kseq_v8 a0, a1, b0, b1;
    lo = (kseq_v8){0}, hi = (kseq_v8){0};
    for (; i + 16 <= n; i += 16) {
        memcpy(&a0, a + i, sizeof a0);
        memcpy(&a1, a + i + 8, sizeof a1);
        memcpy(&b0, b + i, sizeof b0);
        memcpy(&b1, b + i + 8, sizeof b1);
        lo += a0 * b0;
        hi += a1 * b1;
    }
    if (tail) {
        memcpy(&a0, ta, sizeof a0);
        memcpy(&a1, ta + 8, sizeof a1);
        memcpy(&b0, tb, sizeof b0);
        memcpy(&b1, tb + 8, sizeof b1);
        lo += a0 * b0;
        hi += a1 * b1;
    }
    *out = lo + hi;
}

/* The rest of the tree: w[j] + w[j + 4], then (w[0] + w[2]) + (w[1] + w[3]). */
static inline float kseq_dot_finish(const kseq_v8 *w) {
    kseq_v8 lo = *w;
    kseq_v4 l4 = {lo[0], lo[1], lo[2], lo[3]}, h4 = {lo[4], lo[5], lo[6], lo[7]};
    l4 += h4;
    return (l4[0] + l4[2]) + (l4[1] + l4[3]);
}

static inline float kseq_dot(const float *a, const float *b, int n) {
    kseq_v8 w;
    kseq_dot_fold(&w, a, b, n, 0);
    return kseq_dot_finish(&w);
}

#endif
