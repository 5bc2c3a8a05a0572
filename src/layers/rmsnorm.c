/* rmsnorm.c: RMSNorm layer over k_rmsnorm_*; see rmsnorm.h. */
#include "rmsnorm.h"

#include "../core/check.h"
#include "../kernels/kernels.h"

size_t rmsnorm_cache_floats(int M) { return M > 0 ? (size_t)M : 0; }

void rmsnorm_fwd(float *y, float *cache, const float *x, const float *w, int M, int C, float eps) {
    CHECK(y && x && w, "rmsnorm_fwd: NULL buffer");
    CHECK(M >= 0 && C > 0 && eps >= 0, "rmsnorm_fwd: bad dims M=%d C=%d eps=%g", M, C, (double)eps);
    k_rmsnorm_fwd(y, cache, x, w, M, C, eps);
}

void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *cache, int M, int C) {
    if (!dx && !dw) return;
    CHECK(dy && x && w && cache, "rmsnorm_bwd: NULL buffer (a backward needs the rstd cache)");
    k_rmsnorm_bwd(dx, dw, dy, x, w, cache, M, C);
}
