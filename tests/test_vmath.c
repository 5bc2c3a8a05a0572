/* test_vmath.c: the elementwise functions of src/kernels/cpu/vmath.h (vexp, vlog, vsigmoid, vsilu,
 * vtanh, vsoftplus) against double-precision libm.
 *
 * What is tested is the array form kvm_<f> from the library, i.e. the vectorised code this build
 * runs in its kernels (AVX-512, AVX2 or SSE2; with or without FMA). For each function:
 *  - the error over a dense sweep of the whole float range: every 1021st bit pattern (both signs,
 *    subnormals, huge values, infinities, NaNs), plus every pattern within 4096 of each threshold
 *    where a formula switches or a result over/underflows. It must be within the bound documented
 *    in vmath.h: `ulp` ulps of the exact result where |exact| >= `floor`, and an absolute error
 *    below `floor` elsewhere (where the function flushes what would be subnormal or tiny);
 *  - a NaN result exactly when the exact result is NaN (never for a non-NaN input, except log of
 *    a negative number), and infinities only where the exact result overflows;
 *  - special values exactly as documented (+-0, +-inf, NaN, overflow/underflow thresholds).
 * The largest error found is printed per function.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../src/kernels/cpu/vmath.h"
#include "th.h"

/* ---- double-precision references ------------------------------------------------------------ */

static double ref_exp(double x) { return exp(x); }
static double ref_log(double x) { return log(x); }
static double ref_sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static double ref_silu(double x) { return x * ref_sigmoid(x); }
static double ref_tanh(double x) { return tanh(x); }
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double ref_expm1(double x) { return expm1(x); }

/* The bounds of vmath.h's header comment. floor: where the relative bound stops applying. */
typedef struct {
    const char *name;
    void (*fn)(float *, const float *, size_t);
    double (*ref)(double);
    double ulp, floor;
} Func;

static const Func FUNCS[] = {
    {"exp", kvm_exp, ref_exp, 1.5, FLT_MIN},
    {"log", kvm_log, ref_log, 1.5, 0},
    {"sigmoid", kvm_sigmoid, ref_sigmoid, 3.0, FLT_MIN},
    {"silu", kvm_silu, ref_silu, 3.0, 2.61e-37},
    {"tanh", kvm_tanh, ref_tanh, 2.0, 0},
    {"softplus", kvm_softplus, ref_softplus, 2.5, FLT_MIN},
    {"expm1", kvm_expm1, ref_expm1, 2.0, 0},
};
#define NFUNC (sizeof FUNCS / sizeof FUNCS[0])

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Error of y against the exact r in ulps of r (a subnormal r: ulps of 2^-149). */
static double ulp_err(float y, double r) {
    double a = fabs(r);
    double ulp = a >= FLT_MIN ? ldexp(1.0, ilogb(a) - 23) : ldexp(1.0, -149);
    return fabs((double)y - r) / ulp;
}

typedef struct { double ulp, abs_small; float at_ulp; long n, bad; } Stats;

/* Checks y = f(x) for n inputs, accumulating the worst errors; the first few failures print. */
static void check_batch(const Func *f, const float *x, const float *y, size_t n, Stats *st) {
    for (size_t i = 0; i < n; i++) {
        double r = f->ref((double)x[i]);
        float yi = y[i];
        int ok;
        st->n++;
        if (isnan(r) || isnan(yi)) {
            ok = isnan(r) && isnan(yi);
        } else if (fabs(r) > FLT_MAX) { /* overflows: +-inf (or FLT_MAX if it rounds there) */
            ok = (isinf(yi) || fabs(yi) == FLT_MAX) && (yi > 0) == (r > 0);
        } else if (isinf(yi)) {
            ok = 0;
        } else if (fabs(r) >= f->floor) {
            double e = ulp_err(yi, r);
            ok = e <= f->ulp;
            if (e > st->ulp) st->ulp = e, st->at_ulp = x[i];
        } else {
            double e = fabs((double)yi - r);
            ok = e < f->floor;
            if (e > st->abs_small) st->abs_small = e;
        }
        if (!ok && st->bad++ < 5)
            TH_CHECK(0, "v%s(%a) = %a, exact %a (bound %.1f ulp, floor %g)", f->name, x[i], yi, r,
                     f->ulp, f->floor);
    }
}

#define BATCH 8192

/* Every 1021st bit pattern over all 2^32, then windows around the thresholds of vmath.h. */
static void sweep(const Func *f) {
    static float x[BATCH], y[BATCH];
    Stats st = {0};
    uint64_t b = 0;
    while (b < (1ull << 32)) {
        size_t n = 0;
        for (; n < BATCH && b < (1ull << 32); n++, b += 1021) x[n] = bits_f((uint32_t)b);
        f->fn(y, x, n);
        check_batch(f, x, y, n, &st);
    }
    static const float centres[] = {EXP_HI, EXP_LO, -EXP_HI, -EXP_LO, 0.625f, -0.625f, 9.01f, 16.64f,
                                    16.7f, 1.0f, 0.70710678f, 1.41421356f, FLT_MIN, 0.0f,
                                    17.0f, -17.5f, 0.34657359f, -0.34657359f, 1.03972077f, -1.03972077f};
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++) {
        uint32_t u = f_bits(centres[c]);
        size_t n = 0;
        for (int d = -4096; d < 4096; d++) { /* both signs of 0: patterns around 0 and -0 */
            uint32_t v = centres[c] == 0.0f ? (d < 0 ? 0x80000000u + (uint32_t)(-d) : (uint32_t)d)
                                            : u + (uint32_t)d;
            x[n++] = bits_f(v);
        }
        f->fn(y, x, n);
        check_batch(f, x, y, n, &st);
    }
    TH_CHECK(st.bad == 0, "v%s: %ld of %ld inputs outside the documented bound", f->name, st.bad, st.n);
    printf("  v%-9s max %.3f ulp (at %a; bound %.1f), max abs error below %g: %.3g (%ld inputs)\n",
           f->name, st.ulp, st.at_ulp, f->ulp, f->floor, st.abs_small, st.n);
}

/* ---- special values ------------------------------------------------------------------------- */

/* One input through the array function (the code the kernels run). */
static float call(void (*fn)(float *, const float *, size_t), float x) {
    float y;
    fn(&y, &x, 1);
    return y;
}

/* f(x) must be the float `want` bit for bit (NaN: any NaN; zeros: with their sign). */
#define EXACT(fn, x, want)                                                                   \
    do {                                                                                     \
        float y_ = call(fn, (x)), w_ = (want);                                               \
        int ok_ = isnan(w_) ? isnan(y_) : (f_bits(y_) == f_bits(w_));                        \
        TH_CHECK(ok_, "%s(%a) = %a, want %a", #fn, (double)(x), (double)y_, (double)w_);     \
    } while (0)

static void special_values(void) {
    const float inf = INFINITY, nan = NAN, tiny = FLT_TRUE_MIN;
    EXACT(kvm_exp, -inf, 0.0f);
    EXACT(kvm_exp, inf, inf);
    EXACT(kvm_exp, nan, nan);
    EXACT(kvm_exp, 0.0f, 1.0f);
    EXACT(kvm_exp, -0.0f, 1.0f);
    EXACT(kvm_exp, tiny, 1.0f);
    EXACT(kvm_exp, -tiny, 1.0f);
    EXACT(kvm_exp, nextafterf(EXP_HI, inf), inf);
    EXACT(kvm_exp, FLT_MAX, inf);
    EXACT(kvm_exp, nextafterf(EXP_LO, -inf), 0.0f);
    EXACT(kvm_exp, -FLT_MAX, 0.0f);
    TH_CHECK(call(kvm_exp, EXP_HI) <= FLT_MAX && call(kvm_exp, EXP_HI) > 3.4e38f, "exp(EXP_HI) finite");
    TH_CHECK(call(kvm_exp, EXP_LO) >= FLT_MIN, "exp(EXP_LO) = %a is normal", call(kvm_exp, EXP_LO));

    EXACT(kvm_log, 0.0f, -inf);
    EXACT(kvm_log, -0.0f, -inf);
    EXACT(kvm_log, -tiny, nan);
    EXACT(kvm_log, -1.0f, nan);
    EXACT(kvm_log, -inf, nan);
    EXACT(kvm_log, inf, inf);
    EXACT(kvm_log, nan, nan);
    EXACT(kvm_log, 1.0f, 0.0f);
    TH_CHECK(ulp_err(call(kvm_log, tiny), -149.0 * log(2.0)) <= 1.5, "log(2^-149) = %a",
             call(kvm_log, tiny));
    TH_CHECK(ulp_err(call(kvm_log, FLT_MAX), log(FLT_MAX)) <= 1.5, "log(FLT_MAX)");

    EXACT(kvm_sigmoid, -inf, 0.0f);
    EXACT(kvm_sigmoid, inf, 1.0f);
    EXACT(kvm_sigmoid, nan, nan);
    EXACT(kvm_sigmoid, 0.0f, 0.5f);
    EXACT(kvm_sigmoid, 16.64f, 1.0f);
    EXACT(kvm_sigmoid, FLT_MAX, 1.0f);
    EXACT(kvm_sigmoid, -FLT_MAX, 0.0f);
    EXACT(kvm_sigmoid, -88.73f, 0.0f);

    EXACT(kvm_silu, -inf, -0.0f);
    EXACT(kvm_silu, inf, inf);
    EXACT(kvm_silu, nan, nan);
    EXACT(kvm_silu, 0.0f, 0.0f);
    EXACT(kvm_silu, -FLT_MAX, -0.0f);
    EXACT(kvm_silu, -89.0f, -0.0f);
    EXACT(kvm_silu, FLT_MAX, FLT_MAX);
    EXACT(kvm_silu, 20.0f, 20.0f);

    EXACT(kvm_tanh, inf, 1.0f);
    EXACT(kvm_tanh, -inf, -1.0f);
    EXACT(kvm_tanh, nan, nan);
    EXACT(kvm_tanh, 0.0f, 0.0f);
    EXACT(kvm_tanh, -0.0f, -0.0f);
    EXACT(kvm_tanh, tiny, tiny);
    EXACT(kvm_tanh, -tiny, -tiny);
    EXACT(kvm_tanh, 9.02f, 1.0f);
    EXACT(kvm_tanh, -9.02f, -1.0f);
    EXACT(kvm_tanh, FLT_MAX, 1.0f);
    EXACT(kvm_tanh, -FLT_MAX, -1.0f);

    EXACT(kvm_softplus, -inf, 0.0f);
    EXACT(kvm_softplus, inf, inf);
    EXACT(kvm_softplus, nan, nan);
    EXACT(kvm_softplus, 16.7f, 16.7f);
    EXACT(kvm_softplus, 20.0f, 20.0f);
    EXACT(kvm_softplus, 1e30f, 1e30f);
    EXACT(kvm_softplus, FLT_MAX, FLT_MAX);
    EXACT(kvm_softplus, -88.0f, 0.0f);
    EXACT(kvm_softplus, -FLT_MAX, 0.0f);
    TH_CHECK(ulp_err(call(kvm_softplus, 0.0f), log(2.0)) <= 2.5, "softplus(0) = %a",
             call(kvm_softplus, 0.0f));

    EXACT(kvm_expm1, -inf, -1.0f);
    EXACT(kvm_expm1, inf, inf);
    EXACT(kvm_expm1, nan, nan);
    EXACT(kvm_expm1, 0.0f, 0.0f);
    EXACT(kvm_expm1, -0.0f, -0.0f);
    EXACT(kvm_expm1, tiny, tiny);
    EXACT(kvm_expm1, -tiny, -tiny);
    EXACT(kvm_expm1, -17.6f, -1.0f);
    EXACT(kvm_expm1, -FLT_MAX, -1.0f);
    EXACT(kvm_expm1, FLT_MAX, inf);
    EXACT(kvm_expm1, nextafterf(EXP_HI, inf), inf);
    TH_CHECK(call(kvm_expm1, EXP_HI) <= FLT_MAX, "expm1(EXP_HI) finite");

    /* in place (y == x), as the header allows: same values as out of place */
    float a[67], b[67], c[67];
    for (int i = 0; i < 67; i++) a[i] = b[i] = (float)(i - 33) * 0.37f;
    for (size_t f = 0; f < NFUNC; f++) {
        memcpy(b, a, sizeof a);
        FUNCS[f].fn(c, a, 67);
        FUNCS[f].fn(b, b, 67);
        TH_CHECK(memcmp(b, c, sizeof b) == 0, "v%s in place differs", FUNCS[f].name);
    }
}

/* vexp_nonpos (softmax, cross-entropy, attention, softplus) against vexp, bit for bit, for every
 * 1021st float up to 88 and every float around EXP_LO, 0 and 88; NaN stays NaN. */
static void exp_nonpos(void) {
    static float x[BATCH], y[BATCH], r[BATCH];
    long n_in = 0, bad = 0;
    uint64_t b = 0;
    static const float centres[] = {EXP_LO, 0.0f, -0.0f, 88.0f};
    size_t c = 0;
    while (b < (1ull << 32) || c < sizeof centres / sizeof centres[0]) {
        size_t n = 0;
        if (b < (1ull << 32)) {
            for (; n < BATCH && b < (1ull << 32); b += 1021) {
                float v = bits_f((uint32_t)b);
                if (!(v > 88.0f)) x[n++] = v; /* NaN included */
            }
        } else {
            uint32_t u = f_bits(centres[c++]);
            for (int d = -2048; d < 2048; d++) {
                float v = bits_f(u + (uint32_t)d);
                if (!(v > 88.0f)) x[n++] = v;
            }
        }
        kvm_exp_nonpos(y, x, n);
        kvm_exp(r, x, n);
        for (size_t i = 0; i < n; i++) {
            int ok = isnan(x[i]) ? isnan(y[i]) != 0 : f_bits(y[i]) == f_bits(r[i]);
            if (!ok && bad++ < 5)
                TH_CHECK(0, "vexp_nonpos(%a) = %a, vexp %a", x[i], y[i], r[i]);
        }
        n_in += (long)n;
    }
    TH_CHECK(bad == 0, "vexp_nonpos: %ld of %ld inputs differ from vexp", bad, n_in);
}

int main(void) {
    th_name = "test_vmath";
    special_values();
    exp_nonpos();
    for (size_t f = 0; f < NFUNC; f++) sweep(&FUNCS[f]);
    return th_done();
}
