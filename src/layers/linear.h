/* linear.h: the Linear layer y = x W^T (+ b), with optional weight normalisation.
 *
 * Spec implicit-lm §6 (torchdeq weight_norm, "dim 0": one norm per output row):
 *   W_i = s_i * v_i / ||v_i||,   s_i = g_i (learned) or norm_target_norm (norm_no_scale),
 *   optionally factor s_i/||v_i|| clipped to <= clip (norm_clip).
 * W is the *effective* weight, materialised once per model forward by linear_wn_refresh and then
 * reused by every fixed-point iteration; linear_bwd accumulates into dW (the effective weight's
 * gradient) and linear_wn_bwd maps that accumulated dW onto dg, dv once, at the end.
 * The same refresh/bwd pair serves any weight-normed matrix, e.g. the depthwise conv weight
 * (C, W) (one norm per channel over its taps) or MLP weights held as plain pointers.
 * Out of scope: spectral norm (sn_n_power_iters), which no configuration uses.
 */
#ifndef IMPLICIT_LAYERS_LINEAR_H
#define IMPLICIT_LAYERS_LINEAR_H

#include <stddef.h>

/* Parameters of one Linear. The gradient struct has the same shape (llm.c's ParameterTensors
 * used twice): in a dW struct every member is an accumulator, and NULL means "not wanted". */
typedef struct {
    float *W; /* (OC, C) effective weight read by linear_fwd/bwd; written by linear_wn_refresh */
    float *b; /* (OC) | NULL: no bias */
    float *g; /* (OC) | NULL: weight-norm scale (unused when no_scale) */
    float *v; /* (OC, C) | NULL: weight-norm direction; NULL = plain weight, no weight norm */
} LinearW;

/* Weight-norm options (config keys norm_no_scale, norm_target_norm, norm_clip/clip_value). */
typedef struct {
    int no_scale; /* 1: s_i = target instead of g_i */
    float target; /* used only when no_scale (REF default 1.0) */
    float clip;   /* > 0: factor s_i/||v_i|| = min(factor, clip); 0 = no clipping (REF default) */
} WnOpts;

#define WN_OPTS_DEFAULT ((WnOpts){0, 1.0f, 0.0f})

/* y = x W^T + b       x:(M,C)  y:(M,OC) written */
void linear_fwd(const LinearW *w, float *y, const float *x, int M, int C, int OC);
/* dx += dy W;  dw->W += dy^T x;  dw->b += sum_M dy.   dw may be NULL, as may dx, dw->W, dw->b.
 * dy:(M,OC)  x:(M,C)  dx:(M,C)  (dw->g, dw->v are untouched: see linear_wn_bwd) */
void linear_bwd(const LinearW *w, LinearW *dw, float *dx, const float *dy, const float *x,
                int M, int C, int OC);

/* ---- weights packed once (kernels.h k_gemm_pb) ------------------------------------------------
 * The two products a Linear's weight W:(OC, C) takes part in as the B operand, y = x W^T and
 * dx = dy W, can each run on a copy of W packed once (linear_pack) while W does not change: the
 * layers with a `packed` member in their weight struct (Mamba2W, MlpW, AttnW) take one, filled
 * by their *_pack function; NULL = none. Packed form: [x W^T panels | dy W panels]. */
size_t linear_pack_floats(int C, int OC);
void linear_pack(float *packed, const float *W, int C, int OC);
/* The dy W form inside a pack (NULL for a NULL pack). */
const float *linear_pack_dx(const float *packed, int C, int OC);
/* y = x W^T + b (b|NULL), on the pack when there is one (packed|NULL) */
void linear_fwd_pk(float *y, const float *x, const float *W, const float *packed, const float *b, int M, int C,
                   int OC);
/* dx += dy W (on the pack);  dW += dy^T x;  db += sum_M dy      dx, dW, db may be NULL */
void linear_bwd_pk(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
                   const float *packed, int M, int C, int OC);

/* W = s * v / ||v|| row by row (k_weightnorm_fwd). Requires w->v, and w->g unless o->no_scale. */
void linear_wn_refresh(const LinearW *w, const WnOpts *o, int OC, int C);
/* dw->g += d/dg, dw->v += d/dv of <dw->W, W(g, v)>  (k_weightnorm_bwd). dw->W must hold the
 * accumulated effective-weight gradient; dw->g (ignored when no_scale) and dw->v may be NULL. */
void linear_wn_bwd(const LinearW *w, const LinearW *dw, const WnOpts *o, int OC, int C);
/* Initialise a weight-normed linear from its current v: g_i = ||v_i|| (so W == v, spec §6),
 * then refresh W. With no_scale only W is refreshed. */
void linear_wn_init(const LinearW *w, const WnOpts *o, int OC, int C);

#endif
