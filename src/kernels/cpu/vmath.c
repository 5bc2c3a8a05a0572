/* cpu/vmath.c: the elementwise functions of vmath.h over arrays (kvm_exp, kvm_log, ...).
 *
 * The kernels inline vexp & co. into their own loops; these plain loops exist so that the
 * vectorised code of this build (AVX-512, AVX2 or SSE2, with the kernels' compiler flags) can be
 * tested against a double-precision reference (tests/test_vmath.c) and timed on its own
 * (bench/bench_kernels.c). Serial: callers that want threads split the array.
 */
#include "vmath.h"

#define VMATH_DEFINE(f)                                                                \
    void kvm_##f(float *y, const float *x, size_t n) {                                 \
        for (size_t i = 0; i < n; i++) y[i] = v##f(x[i]);                              \
    }
VMATH_DEFINE(exp) VMATH_DEFINE(log) VMATH_DEFINE(sigmoid) VMATH_DEFINE(silu) VMATH_DEFINE(exp_nonpos)

/* the two-pass forms (vmath.h, VM_BLOCK) */
void kvm_tanh(float *y, const float *x, size_t n) { vtanh_n(y, x, n); }
void kvm_softplus(float *y, const float *x, size_t n) { vsoftplus_n(y, x, NULL, n); }
void kvm_expm1(float *y, const float *x, size_t n) { vexpm1_n(y, x, 1.0f, n); }
