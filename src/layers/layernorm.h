/* layernorm.h: LayerNorm, y = (x − mean)·rstd·w + b with rstd = (var + eps)^-1/2 and the biased
 * variance, one row of C features at a time (torch.nn.LayerNorm). FP-Mamba normalises every
 * fixed-point iterate with it (spec fp-rnn §3.1 "out_norm"); the rest of the project uses RMSNorm.
 * The cache is (mean, rstd) per row; NULL = no-grad forward.
 */
#ifndef IMPLICIT_LAYERS_LAYERNORM_H
#define IMPLICIT_LAYERS_LAYERNORM_H

#include <stddef.h>

size_t layernorm_cache_floats(int M);   /* 2M: mean then rstd */
/* x,y:(M,C)  w,b:(C)  cache:(2M)|NULL; y written, must not alias x when a backward follows. */
void layernorm_fwd(float *y, float *cache, const float *x, const float *w, const float *b, int M, int C, float eps);
/* dx, dw, db accumulate (any may be NULL). x and cache as given to layernorm_fwd. Parameter
 * gradients are summed over rows in a fixed order (thread-count independent). */
void layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                   const float *cache, int M, int C);

#endif
