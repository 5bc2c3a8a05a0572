/* cpu/vecw.h: the widest float vector of the build, as a GNU vector type (internal to
 * src/kernels): 16 lanes with AVX-512, 8 with AVX, 4 otherwise (an SSE build would pass a wider
 * GNU vector in memory; gcc warns about the ABI). Kernels written on it compile to whole-register
 * arithmetic on every ISA the project targets. Loads and stores go through memcpy: no alignment
 * is assumed.
 */
#ifndef IMPLICIT_KERNELS_CPU_VECW_H
#define IMPLICIT_KERNELS_CPU_VECW_H

#include <string.h>

#if defined(__AVX512F__)
#define KV_W 16
#elif defined(__AVX__)
#define KV_W 8
#else
#define KV_W 4
#endif
typedef float kv_f __attribute__((vector_size(KV_W * sizeof(float))));
typedef int kv_i __attribute__((vector_size(KV_W * sizeof(int))));

static inline kv_f kv_load(const float *p) {
    kv_f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void kv_store(float *p, kv_f v) { memcpy(p, &v, sizeof v); }

/* Transposed sums: KV_W vectors in[0..KV_W) -> one vector whose lane k is the sum of the lanes of
 * the input in slot j with kv_slot_row(j) = k (slot j holds row bitrev(j)). Used where KV_W rows'
 * dot products are wanted at once (a state's readout, a query against KV_W keys): log2 KV_W levels
 * of two shuffles and an add, ~3 operations per row, where a horizontal sum per row costs ~8.
 * Fixed order, the same on every thread. */
static inline int kv_slot_row(int j) {
    int r = 0;
    for (int b = 1; b < KV_W; b <<= 1) r = (r << 1) | ((j & b) != 0);
    return r;
}

/* Each row's lanes folded by halves, (x[l] + x[l + KV_W/2]), then again down to one lane: the
 * order kv_sum_rows adds in, row by row (the reference for it, and what compilers without gcc's
 * __builtin_shuffle run). */
static inline kv_f kv_sum_rows_generic(const kv_f *in) {
    kv_f out;
    for (int k = 0; k < KV_W; k++) {
        kv_f v = in[kv_slot_row(k)]; /* bit reversal is its own inverse */
        for (int h = KV_W / 2; h >= 1; h /= 2)
            for (int l = 0; l < h; l++) v[l] = v[l] + v[l + h];
        out[k] = v[0];
    }
    return out;
}

/* Level with blocks of s lanes (s = KV_W/2 .. 1): (u, v) -> u's and v's blocks of 2s lanes, each
 * folded to s lanes (low half + high half) and interleaved u, v; lane k of the level's result is
 * lanes lo[k] + hi[k] of (u, v) (indices >= KV_W: v's). The same additions as
 * kv_sum_rows_generic, so the same bits. The masks are tables, not computed: gcc built masks
 * computed in a loop at run time (the SSD step ran 2x slower). in is overwritten. */
static inline __attribute__((always_inline)) kv_f kv_sum_rows(kv_f *in) {
#if !defined(__GNUC__) || defined(__clang__)
    return kv_sum_rows_generic(in);
#else
#if KV_W == 16
    static const int mask[4][2][16] = {
        {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
         {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
        {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
         {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
        {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
         {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
        {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
         {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
    };
#elif KV_W == 8
    static const int mask[3][2][8] = {
        {{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}},
        {{0, 1, 8, 9, 4, 5, 12, 13}, {2, 3, 10, 11, 6, 7, 14, 15}},
        {{0, 8, 2, 10, 4, 12, 6, 14}, {1, 9, 3, 11, 5, 13, 7, 15}},
    };
#else
    static const int mask[2][2][4] = {
        {{0, 1, 4, 5}, {2, 3, 6, 7}},
        {{0, 4, 2, 6}, {1, 5, 3, 7}},
    };
#endif
    int level = 0;
#pragma GCC unroll 8
    for (int n = KV_W; n > 1; n /= 2, level++) {
        kv_i lo, hi;
        memcpy(&lo, mask[level][0], sizeof lo);
        memcpy(&hi, mask[level][1], sizeof hi);
#pragma GCC unroll 8
        for (int i = 0; i < n / 2; i++)
            in[i] = __builtin_shuffle(in[2 * i], in[2 * i + 1], lo) +
                    __builtin_shuffle(in[2 * i], in[2 * i + 1], hi);
    }
    return in[0];
#endif
}

#endif
