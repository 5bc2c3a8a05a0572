/* cpu/vmath.h: small inline helpers shared by the fast CPU kernels (internal to cpu/).
 *
 * - vexp: expf written so that gcc can vectorise loops calling it (libm's expf is a scalar
 *   call without -ffast-math). Cody-Waite reduction x = n ln2 + r with a two-part ln2 and the
 *   Cephes degree-6 polynomial for exp(r): about 2 ulp on the normal range. Underflow gives 0,
 *   overflow gives +inf and NaN stays NaN (the solver's divergence checks rely on that), with
 *   no float-to-int conversion of NaN (type punning of the rounded value instead).
 * - lane-parallel dot products: LANES independent partial sums combined in a fixed order (a
 *   pairwise tree), the reassociation -ffast-math would allow, done explicitly so the result
 *   depends only on n.
 * Out of scope: log/tanh (libm is used where they appear; they are not on hot paths).
 */
#ifndef IMPLICIT_KERNELS_CPU_VMATH_H
#define IMPLICIT_KERNELS_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Partial sums per reduction: 32 floats = two AVX-512 or four AVX2 registers, which also gives
 * the FMA pipes independent chains. */
#define LANES 32
/* Elementwise kernels go parallel above this many elements (below, fork/join costs more). */
#define PAR_MIN_ELEMS 32768

static inline float vexp(float x0) {
    /* clamp to where 2^n is a normal float; the selects below restore 0 / inf / NaN */
    float x = x0 < -87.3f ? -87.3f : x0;
    x = x > 88.3f ? 88.3f : x;
    /* n = round(x / ln2): adding 1.5 * 2^23 leaves the rounded integer in the low mantissa */
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f; /* ln2 = 0.693359375 - 2.12194440e-4, first part exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t ti, mi; /* unsigned: wraps (no UB) for the garbage bits a NaN leaves here */
    memcpy(&ti, &t, sizeof ti);
    memcpy(&mi, &magic, sizeof mi);
    uint32_t e = (ti - mi + 127u) << 23; /* 2^n assembled in the exponent field */
    float s;
    memcpy(&s, &e, sizeof s);
    float res = p * s;
    res = x0 < -87.3f ? 0.0f : res;
    res = x0 > 88.7f ? INFINITY : res;
    return res;
}

static inline float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }
static inline float vsilu(float x) { return x / (1.0f + vexp(-x)); }

/* acc[0] + ... + acc[LANES-1] as a pairwise tree (halves added lane by lane: a few vector adds,
 * where a left-to-right sum is a chain of LANES dependent adds, ~100 cycles per row). The order is
 * fixed, so results still depend on n only. acc is clobbered. */
static inline float lanes_total(float *acc) {
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* sum_i a[i] b[i] with LANES partial sums: depends on n only, never on threads. */
static inline float dot_lanes(const float *a, const float *b, int n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    s += lanes_total(acc);
    return s;
}

/* sum_i a[i] b[i] c[i] (three-way product, e.g. dy * w * x), same lane scheme. */
static inline float dot3_lanes(const float *a, const float *b, const float *c, int n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l] * c[i + l];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i] * c[i];
    s += lanes_total(acc);
    return s;
}

/* sum_i x[i], same lane scheme. */
static inline float sum_lanes(const float *x, int n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
    float s = 0.0f;
    for (; i < n; i++) s += x[i];
    s += lanes_total(acc);
    return s;
}

/* max_i x[i] (NaNs may be dropped here; they reappear through exp(x - max) downstream). */
static inline float max_lanes(const float *x, int n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = -INFINITY;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    float m = -INFINITY;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int w = LANES / 2; w >= 1; w /= 2) /* pairwise, as lanes_total */
        for (int l = 0; l < w; l++) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
    return acc[0] > m ? acc[0] : m;
}

#endif
