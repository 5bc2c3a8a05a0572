/* blocknorm.h: the normalisation of the residual stream: the per-block pre-norm and norm_f of the
 * residual-stream LM (models/lm_resid.h: mamba1, fp_mamba, fp_mamba2, fp_rnn), chosen by the
 * model key norm_type. mamba_ssm builds these blocks with RMSNorm (rms_norm = True) or with
 * torch.nn.LayerNorm (rms_norm = False; spec fp-rnn §3.4), so both are offered:
 *   rmsnorm    y = x · (mean(x²) + eps)^-1/2 · w                  (layers/rmsnorm.h; no bias)
 *   layernorm  y = (x − mean) · (var + eps)^-1/2 · w + b, biased var (layers/layernorm.h)
 * BLOCKNORM_TYPES is the one list of the names (validation, help and messages come from it).
 */
#ifndef IMPLICIT_LAYERS_BLOCKNORM_H
#define IMPLICIT_LAYERS_BLOCKNORM_H

#include <stddef.h>

typedef enum { BLOCKNORM_RMS = 0, BLOCKNORM_LAYER = 1 } BlockNormType;

/* X(enum value, name, has a bias) */
#define BLOCKNORM_TYPES(X) X(BLOCKNORM_RMS, "rmsnorm", 0) X(BLOCKNORM_LAYER, "layernorm", 1)

/* The type named s, or -1. */
int blocknorm_parse(const char *s);
/* "rmsnorm | layernorm": the names, for messages and help. */
const char *blocknorm_names(void);
/* 1 if the type has a bias tensor (layernorm). */
int blocknorm_has_bias(BlockNormType t);
/* Floats of cache a forward keeps for the backward over M rows. */
size_t blocknorm_cache_floats(BlockNormType t, int M);
/* x, y:(M,C)  w:(C)  b:(C) (layernorm; ignored by rmsnorm)  cache:(blocknorm_cache_floats)|NULL.
 * y written; y must not alias x when a backward follows. */
void blocknorm_fwd(BlockNormType t, float *y, float *cache, const float *x, const float *w, const float *b, int M,
                   int C, float eps);
/* dx, dw, db accumulate (any may be NULL; db is ignored by rmsnorm). x and cache as given to
 * blocknorm_fwd. */
void blocknorm_bwd(BlockNormType t, float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                   const float *cache, int M, int C);

#endif
