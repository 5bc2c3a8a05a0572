/* cpu/vmath.h: small inline helpers shared by the fast CPU kernels (internal to cpu/).
 *
 * Elementwise transcendentals, written so that gcc -O3 vectorises any loop calling them (libm's
 * expf/logf/tanhf are scalar calls without -ffast-math, ~1-2 GB/s where memcpy moves 20):
 * straight-line float and integer arithmetic, no libm calls, no branches on data; out-of-range
 * inputs are handled by selects after the main computation. The loops vectorise only under
 * -fno-trapping-math (KERNEL_CFLAGS in the Makefile): otherwise gcc keeps the arithmetic that
 * feeds a select (which could raise an FP exception) behind a branch, and AVX2 and SSE2, having
 * no masked arithmetic, then get scalar code. Nothing here reads the FP exception flags.
 *
 * Error bounds (tests/test_vmath.c asserts them over a dense sweep of all floats, and every special
 * value below): ulps of the exact result, against double-precision libm; in brackets the largest
 * error measured over every float with FMA contraction (AVX2/AVX-512 builds; without FMA, as
 * in an SSE2 build, every third float gave the same maxima to within 0.05 ulp).
 *   vexp(x)      <= 1.5 ulp [1.03] where exp(x) >= FLT_MIN (x >= -87.33654). Below, +0: the
 *                exact value is subnormal (absolute error < FLT_MIN), flushed on purpose (slow on
 *                some cores, never needed here). +inf above 88.72283; exp(-inf) = 0,
 *                exp(+inf) = +inf. vexp_nonpos(x), for x <= 88 only: vexp's bits (NaN: NaN).
 *   vlog(x)      <= 1.5 ulp [0.83] for every positive x, subnormals included; log(+-0) = -inf,
 *                log(x < 0) = NaN, log(+inf) = +inf, log(1) = 0.
 *   vsigmoid(x)  <= 3 ulp [2.48] where the result is >= FLT_MIN (x >= -87.33); below, absolute
 *                error < FLT_MIN (0 for x <= -88.73). Never NaN for non-NaN x: 0 at -inf,
 *                1 at +inf and for x > 16.64 (where 1 + e^-x rounds to 1).
 *   vsilu(x)     x sigmoid(x): <= 3 ulp [2.41] for x >= -88.72; below, -0 (the exact value is
 *                smaller than 2.61e-37 in magnitude). silu(-inf) = -0, silu(+inf) = +inf.
 *   vtanh(x)     <= 2 ulp [1.33] everywhere; odd (tanh(-0) = -0, subnormals returned as they
 *                are); exactly +-1 for |x| > 9.01 and at +-inf.
 *   vsoftplus(x) log(1 + e^x): <= 2.5 ulp [1.97; the log_core form without FMA: 1.99] where the
 *                result is >= FLT_MIN; below, absolute error < FLT_MIN (0 for x < -87.34).
 *                Exactly x for x > 16.7 (PyTorch's threshold-20 rule gives the same floats),
 *                +inf at +inf, 0 at -inf.
 *   vexpm1(x)    e^x - 1: <= 2 ulp [1.46] everywhere, subnormals included (x returned for
 *                |x| < 2^-24 within the bound); exactly -1 for x < -17.5 and at -inf, +inf above
 *                EXP_HI; expm1(+-0) = +-0.
 * Every function maps NaN to NaN (a diverging solver must still show up in the output).
 * Each is a fixed sequence of operations, so results depend on the input only (not on threads);
 * the AVX-512, AVX2 and SSE2 builds may differ in the last bit (FMA contraction).
 *
 * Lane-parallel reductions: LANES independent partial sums combined in a fixed order (a pairwise
 * tree), the reassociation -ffast-math would allow, done explicitly so the result depends only
 * on n.
 */
#ifndef IMPLICIT_KERNELS_CPU_VMATH_H
#define IMPLICIT_KERNELS_CPU_VMATH_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Partial sums per reduction: 32 floats = two AVX-512 or four AVX2 registers, which also gives
 * the FMA pipes independent chains. */
#define LANES 32

static inline uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* exp(x) overflows above EXP_HI (the largest float below ln FLT_MAX) and is subnormal below
 * EXP_LO (the smallest float above ln FLT_MIN). */
#define EXP_HI 88.72283172607421875f
#define EXP_LO -87.33654022216796875f

/* The polynomials below are evaluated in pairs of terms, c_k + c_{k+1} x, combined by Horner's rule
 * in x^2: the loops that call them are bound by latency, not by arithmetic. An iteration's chain of
 * dependent operations is 60-100 cycles long and the out-of-order window (the FP scheduler) holds
 * only two or three 8-float iterations of it, so an AVX2 core idles along a plain Horner chain of
 * n FMAs (AVX-512 puts twice the floats in the same window); the pairs halve the chain for one
 * extra multiply. Not Estrin's x^4, x^8: for small x those are subnormal, and a product that
 * rounds to a subnormal costs a microcode assist (~100 cycles). Where x^2 can itself become
 * subnormal, it is x x + 2^-k (one FMA where there is FMA), 2^-k far below the weight of the
 * terms it feeds. */

/* e^r for |r| <= ln2 / 2 by the Cephes degree-6 polynomial: 1 + r + r^2 (c5 + c4 r + ... + c0 r^5),
 * the last two additions in this order (r + 1 first would round r's low bits away). */
static inline float exp_poly(float r) {
    float r2 = r * r;
    float p01 = 1.9875691500e-4f * r + 1.3981999507e-3f;
    float p23 = 8.3334519073e-3f * r + 4.1665795894e-2f;
    float p45 = 1.6666665459e-1f * r + 5.0000001201e-1f;
    float p = (p01 * r2 + p23) * r2 + p45;
    return (p * r2 + r) + 1.0f;
}

/* x = n ln2 + r, |r| <= ln2 / 2 (Cody-Waite: ln2 in two parts, the first exact in n * C1); returns
 * r, and t, which holds n in its low mantissa bits. */
#define EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it leaves round(x) in the low mantissa bits */
static inline float exp_reduce(float x, float *t_out) {
    float t = x * 1.44269504088896341f + EXP_MAGIC;
    float n = t - EXP_MAGIC;
    float r = x - n * 0.693359375f; /* ln2 = 0.693359375 - 2.12194440e-4, first part exact */
    *t_out = t;
    return r - n * -2.12194440e-4f;
}

/* e^r by exp_poly, and 2^n added into the exponent field as an integer (exact, and unlike a
 * multiply by 2^n it also reaches n = 128 for x up to EXP_HI: p < 1 there). */
static inline float exp_unchecked(float x) {
    float t, p = exp_poly(exp_reduce(x, &t));
    /* unsigned: wraps (no UB) for the garbage out-of-range x leave here; the callers' selects
     * (or clamps) deal with those */
    return u2f(f2u(p) + ((f2u(t) - f2u(EXP_MAGIC)) << 23));
}

/* exp_unchecked(x) is right for EXP_LO <= x <= EXP_HI only. */
static inline float vexp(float x) {
    float res = exp_unchecked(x);
    res = x < EXP_LO ? 0.0f : res;
    return x <= EXP_HI ? res : x + INFINITY; /* overflow: +inf; NaN: NaN (one test for both) */
}

/* vexp(x) for arguments well below EXP_HI (x <= 88: softmax's x - max, which rounding may leave a
 * few ulps above 0; softplus's -|x|), without the overflow select: 2^n is built as a float and
 * multiplied in, which keeps a NaN a NaN (the integer add into p's exponent turns some NaN
 * payloads into numbers: vexp's last select is what catches those). The same results as vexp
 * from EXP_LO up; 0 below. */
static inline float vexp_nonpos(float x) {
    float t, p = exp_poly(exp_reduce(x, &t));
    float res = p * u2f((f2u(t) + (127u - f2u(EXP_MAGIC))) << 23);
    return x < EXP_LO ? 0.0f : res;
}

/* log(x 2^-escale) for positive normal finite x: x = 2^e m, m in [sqrt(1/2), sqrt(2)), f = m - 1
 * (exact), log = (e - escale) ln2 + log1p(f), the Cephes degree-9 polynomial for log1p there. */
static inline float log_core(float x, float escale) {
    /* shifting the bits by 1 - sqrt(1/2) carries into the exponent exactly when m >= sqrt(2) */
    uint32_t ix = f2u(x) + (0x3f800000u - 0x3f3504f3u);
    float e = (float)((int32_t)(ix >> 23) - 127) - escale;
    float f = u2f((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    float z = f * f;
    float y01 = -2.4999993993e-1f * f + 3.3333331174e-1f;  /* f^0, f^1 of the polynomial */
    float y23 = -1.6668057665e-1f * f + 2.0000714765e-1f;
    float y45 = -1.2420140846e-1f * f + 1.4249322787e-1f;
    float y67 = -1.1514610310e-1f * f + 1.1676998740e-1f;
    float y = (((7.0376836292e-2f * z + y67) * z + y45) * z + y23) * z + y01;
    y = y * f * z;
    y = y + e * -2.12194440e-4f; /* e ln2 in the two parts of vexp, small part first */
    y = y - 0.5f * z;
    return (f + y) + e * 0.693359375f;
}

static inline float vlog(float x) {
    /* subnormals: scaled by 2^24 (exact), which log_core takes off again in the exponent */
    int sub = x < FLT_MIN;
    float res = log_core(sub ? x * 16777216.0f : x, sub ? 24.0f : 0.0f);
    res = x == INFINITY ? INFINITY : res;
    res = x == 0.0f ? -INFINITY : res;
    return x >= 0.0f ? res : NAN; /* negative or NaN */
}

static inline float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

static inline float vsilu(float x) {
    float r = x / (1.0f + vexp(-x));
    return x < -EXP_HI ? -0.0f : r; /* e^-x = inf: -0, also for x = -inf (inf / inf) */
}

/* |x| <= 0.625: odd polynomial (Cephes); above: 1 - 2 / (e^{2|x|} + 1), which has no
 * cancellation there (the fraction is below 0.45) and reaches exactly 1 as e^{2|x|} -> inf.
 * The sign is put back as a bit, so tanh(-0) = -0. */
static inline float tanh_exp(float x) { /* the first stage: e^{2|x|}, |x| clamped to 9.5 */
    float a = fabsf(x);
    float ac = 9.5f < a ? 9.5f : a; /* q below rounds to 1 from 9.01; NaN stays NaN */
    return exp_unchecked(ac + ac);
}
static inline float vtanh_from(float x, float e) { /* e = tanh_exp(x) */
    float a = fabsf(x);
    float s = a * a, s2 = s * s + 0x1p-60f; /* never subnormal */
    float p34 = 1.33314422036e-1f * s - 3.33332819422e-1f;
    float p12 = 2.06390887954e-2f * s - 5.37397155531e-2f;
    float p = (-5.70498872745e-3f * s2 + p12) * s2 + p34;
    p = p * (s * a) + a;
    float q = 1.0f - 2.0f / (e + 1.0f);
    float r = a > 0.625f ? q : p; /* NaN takes p, which is NaN */
    return u2f(f2u(r) | (f2u(x) & 0x80000000u));
}
static inline float vtanh(float x) { return vtanh_from(x, tanh_exp(x)); }

/* softplus(x) = max(x, 0) + log1p(e^-|x|), u = e^-|x| in [0, 1]: log1p(u) = u + u^2 c(u),
 * c(u) = (log1p(u) - u) / u^2 in [ln2 - 1, -1/2], by a degree-9 polynomial fitted to relative
 * error on [0, 1] in double, its coefficients rounded to float one at a time with the higher ones
 * refitted after each (1.2e-8 relative with the float coefficients). u^2 c is at most 0.31 of the
 * result, so its error reaches the result a third as large; the rest is vexp's error in u and the
 * last roundings. No division and no logarithm: 1.15-1.25x faster than the atanh form used
 * before (2 atanh(u / (2 + u)) by its series, with the quotient carried to twice precision;
 * largest error 1.56 ulp against 1.97 now).
 * For u < 2^-40 the polynomial takes 2^-40 (c changes by 2^-41 relative, and its share of the
 * result is below 2^-41), so that its u^2 is never subnormal.
 * Without FMA the roundings of the same polynomial add up to 2.44 ulp, too close to the bound:
 * there log(w), w = 1 + u, plus the first-order correction (u - (w - 1)) / w for the rounding of
 * w (w is in [1, 2], so log_core needs no special cases). */
static inline float vsoftplus_from(float x, float u) { /* u = vexp_nonpos(-fabsf(x)) */
#if defined(__FMA__)
    float ut = u > 0x1p-40f ? u : 0x1p-40f, u2 = ut * ut;
    float c01 = 3.333328068e-01f * ut - 5.000000000e-01f;
    float c23 = 1.996474862e-01f * ut - 2.499767244e-01f;
    float c45 = 1.313077658e-01f * ut - 1.640206724e-01f;
    float c67 = 5.073027313e-02f * ut - 9.292689711e-02f;
    float c89 = 2.952529583e-03f * ut - 1.789938472e-02f;
    float c = (((c89 * u2 + c67) * u2 + c45) * u2 + c23) * u2 + c01;
    float l1p = (ut * c) * u + u;
#else
    float w = 1.0f + u;
    float l1p = log_core(w, 0.0f) + (u - (w - 1.0f)) / w;
#endif
    return (x <= 0.0f ? 0.0f : x) + l1p; /* NaN: x (and u) */
}
static inline float vsoftplus(float x) { return vsoftplus_from(x, vexp_nonpos(-fabsf(x))); }

/* expm1(x) = e^x - 1 without the cancellation of vexp(x) - 1 near 0: x clamped to [-17.5, 88.75]
 * (below, the result rounds to -1; above, it overflows), x = n ln2 + r as in vexp, expm1(r) by its
 * Taylor polynomial to degree 8 (|r| <= ln2 / 2: the first term left out is below 2^-30 |r|), then
 * 2^n expm1(r) + (2^n - 1) as 2 (h expm1(r) + (h - 1/2)), h = 2^(n-1): one FMA, the doubling exact
 * (h >= 2^-26: nothing is subnormal), and 2^(n-1) exists for n = 128 where 2^n does not, so the
 * whole range, overflow included, takes the same path. h - 1/2 = (2^n - 1) / 2 is exact for
 * n <= 24 and the sum has no cancellation (2^n e^r - 1 with n != 0 is at least 0.29 in
 * magnitude); from n = 25 on, the -1/2 it drops is below half an ulp of the result. For
 * |x| < 2^-24, x itself (within the bound; e^x - 1 - x < 2^-25 |x|): keeps the sign of -0 and
 * the low bit of subnormals, which the halving would round. */
static inline float expm1_reduce(float x, float *t_out) { /* the first stage: r, and t */
    float v = x < -17.5f ? -17.5f : x; /* NaN stays NaN through both */
    v = v > 88.75f ? 88.75f : v;
    return exp_reduce(v, t_out);
}
static inline float vexpm1_from(float x, float r, float t) { /* r = expm1_reduce(x, &t) */
    float r2 = r * r;
    float p01 = 1.66666666666666667e-1f * r + 0.5f;                   /* 1/3!, 1/2! */
    float p23 = 8.33333333333333333e-3f * r + 4.16666666666666667e-2f; /* 1/5!, 1/4! */
    float p45 = 1.98412698412698413e-4f * r + 1.38888888888888889e-3f; /* 1/7!, 1/6! */
    float p = ((2.48015873015873016e-5f * r2 + p45) * r2 + p23) * r2 + p01; /* 1/8! */
    float pm = p * r2 + r; /* expm1(r) */
    /* n sits in t's low mantissa bits: n + 126 into the exponent field, in one integer add */
    float h = u2f((f2u(t) + (126u - f2u(EXP_MAGIC))) << 23);
    float res = (h * pm + (h - 0.5f)) * 2.0f;
    return fabsf(x) < 0x1p-24f ? x : res; /* NaN: r, hence res, is NaN */
}
static inline float vexpm1(float x) {
    float t, r = expm1_reduce(x, &t);
    return vexpm1_from(x, r, t);
}

/* Over arrays, tanh, softplus and expm1 are taken in two passes per block of VM_BLOCK floats:
 * the first stage of every element into a buffer on the stack (in L1), then the rest. Each pass's
 * chain of dependent operations is half as long, so the out-of-order window covers twice as many
 * iterations (see the note on polynomials above): 1.2-1.4x with AVX2, 1.0-1.2x with AVX-512. The
 * operations are those of v<f>(x), and the stages meet at a rounded float either way, so the
 * results are the same. v<f>(x) stay as the one-element definitions (the bounds above are
 * theirs), for a loop that fuses more work around the call. y may equal x. */
#define VM_BLOCK 256

static inline void vtanh_n(float *y, const float *x, size_t n) {
    float e[VM_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += VM_BLOCK) {
        size_t m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;
        const float *xb = x + i0;
        float *yb = y + i0;
        for (size_t j = 0; j < m; j++) e[j] = tanh_exp(xb[j]);
        for (size_t j = 0; j < m; j++) yb[j] = vtanh_from(xb[j], e[j]);
    }
}

/* y = softplus(x + bias), bias may be NULL */
static inline void vsoftplus_n(float *y, const float *x, const float *bias, size_t n) {
    float u[VM_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += VM_BLOCK) {
        size_t m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;
        const float *xb = x + i0;
        float *yb = y + i0;
        if (bias) {
            const float *bb = bias + i0;
            for (size_t j = 0; j < m; j++) u[j] = vexp_nonpos(-fabsf(xb[j] + bb[j]));
            for (size_t j = 0; j < m; j++) yb[j] = vsoftplus_from(xb[j] + bb[j], u[j]);
        } else {
            for (size_t j = 0; j < m; j++) u[j] = vexp_nonpos(-fabsf(xb[j]));
            for (size_t j = 0; j < m; j++) yb[j] = vsoftplus_from(xb[j], u[j]);
        }
    }
}

/* y = sign * expm1(sign * x), sign = +-1 (what the softplus backward needs is -expm1(-x)) */
static inline void vexpm1_n(float *y, const float *x, float sign, size_t n) {
    float r[VM_BLOCK], tb[VM_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += VM_BLOCK) {
        size_t m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;
        const float *xb = x + i0;
        float *yb = y + i0;
        for (size_t j = 0; j < m; j++) r[j] = expm1_reduce(sign * xb[j], &tb[j]);
        for (size_t j = 0; j < m; j++) yb[j] = sign * vexpm1_from(sign * xb[j], r[j], tb[j]);
    }
}

/* The functions above over arrays, y[i] = v<f>(x[i]) (cpu/vmath.c): compiled with the kernels'
 * flags, so they are the vectorised code the kernels inline. tests/test_vmath.c measures their
 * error and bench/bench_kernels.c their speed. y may equal x. */
#define VMATH_FUNCS(X) X(exp) X(log) X(sigmoid) X(silu) X(tanh) X(softplus) X(expm1)
#define VMATH_DECLARE(f) void kvm_##f(float *y, const float *x, size_t n);
VMATH_FUNCS(VMATH_DECLARE)
#undef VMATH_DECLARE
/* vexp_nonpos over an array (x <= 88; not in VMATH_FUNCS, whose functions take every float):
 * tests/test_vmath.c checks it against kvm_exp bit for bit. */
void kvm_exp_nonpos(float *y, const float *x, size_t n);

/* acc[0] + ... + acc[LANES-1] as a pairwise tree (halves added lane by lane: a few vector adds,
 * where a left-to-right sum is a chain of LANES dependent adds, ~100 cycles per row). The order is
 * fixed, so results still depend on n only. acc is clobbered. */
static inline float lanes_total(float *acc) {
    /* the halves spelled out: gcc leaves the nested loop (for w, for l < w) as a loop through the
     * stack, ~10x the cost of these shuffles and adds */
    _Static_assert(LANES == 32, "lanes_total adds 32 lanes");
    for (int l = 0; l < 16; l++) acc[l] += acc[l + 16];
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
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

/* sum_i (x[i] - m)^2 (the second pass of a variance), same lane scheme. */
static inline float dev2_lanes(const float *x, float m, int n) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[i + l] - m;
            acc[l] += d * d;
        }
    float s = 0.0f;
    for (; i < n; i++) {
        float d = x[i] - m;
        s += d * d;
    }
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
    /* pairwise, the halves spelled out as in lanes_total */
    for (int l = 0; l < 16; l++) acc[l] = acc[l + 16] > acc[l] ? acc[l + 16] : acc[l];
    for (int l = 0; l < 8; l++) acc[l] = acc[l + 8] > acc[l] ? acc[l + 8] : acc[l];
    for (int l = 0; l < 4; l++) acc[l] = acc[l + 4] > acc[l] ? acc[l + 4] : acc[l];
    for (int l = 0; l < 2; l++) acc[l] = acc[l + 2] > acc[l] ? acc[l + 2] : acc[l];
    acc[0] = acc[1] > acc[0] ? acc[1] : acc[0];
    return acc[0] > m ? acc[0] : m;
}

#endif
