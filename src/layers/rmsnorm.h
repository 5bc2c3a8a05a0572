/* rmsnorm.h: RMSNorm layer, y = x * (mean(x^2) + eps)^-1/2 * w  (spec implicit-lm §1.2).
 *
 * Used for the block pre-norms, norm_f and the injection norm (eps 1e-5, w init 1, no bias).
 * The cache is the per-row rstd (M floats); a NULL cache means a no-grad forward.
 * Out of scope: the gated RMSNorm inside the Mamba2 mixer (kernel k_gated_rmsnorm_*).
 */
#ifndef IMPLICIT_LAYERS_RMSNORM_H
#define IMPLICIT_LAYERS_RMSNORM_H

#include <stddef.h>

#define RMSNORM_EPS 1e-5f

/* floats of cache kept for the backward: rstd, one per row */
size_t rmsnorm_cache_floats(int M);
/* x,y:(M,C)  w:(C)  cache:(M)|NULL.  y written; y may alias x (then the backward needs x kept
 * elsewhere). */
void rmsnorm_fwd(float *y, float *cache, const float *x, const float *w, int M, int C, float eps);
/* dx += ..., dw += ...  (either may be NULL)   dy,x:(M,C)  cache:(M) from rmsnorm_fwd on x */
void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *cache, int M, int C);

#endif
