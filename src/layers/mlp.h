/* mlp.h: the two block MLPs of spec implicit-lm §1.6.
 *
 *   MLP_SWIGLU (llama_mlp):  out = fc2( silu(W1 x) * (W3 x) ),     h = floor(2 d_inner / 3)
 *   MLP_GATED  (gated_mlp):  [value | gate] = fc1 x  (value half first),
 *                            out = VarDrop( fc2( VarDrop(value * silu(gate)) ) ),
 *                            h = d_inner rounded up to a multiple of 128
 * Both have the shape "a = Wa x, b = Wb x, s = silu(a) * b, out = fc2 s", so one code path serves
 * both: for SwiGLU Wa = W1, Wb = W3; for the gated MLP Wa = fc1 rows [h, 2h) (gate) and
 * Wb = fc1 rows [0, h) (value). No biases (REF zeroes / omits every backbone bias).
 * Variational dropout (§1.7): masks of values {0, 1/(1-p)}, one per sequence and channel, shared
 * over time, sampled by the caller; mask_h:(B,h) multiplies s, mask_o:(B,D) multiplies the output.
 * NULL = no dropout. REF's llama_mlp ignores dropout, so SwiGLU callers pass NULL (masks given
 * are applied all the same). No recurrence: a single token is mlp_fwd with T = 1.
 * Out of scope: the GELU `mlp` (unused by every configuration); weight norm (linear.h, applied to
 * these plain weight pointers by the model before the forward).
 */
#ifndef IMPLICIT_LAYERS_MLP_H
#define IMPLICIT_LAYERS_MLP_H

#include <stddef.h>

typedef enum { MLP_NONE = 0, MLP_SWIGLU = 1, MLP_GATED = 2 } MlpKind;

typedef struct {
    MlpKind kind;
    int D; /* model width */
    int h; /* hidden width (mlp_hidden of the backbone d_inner) */
} MlpCfg;

/* Weights (the dW struct has the same layout; NULL members = not wanted). */
typedef struct {
    float *w1;  /* (h, D)  SwiGLU "gate" W1      (NULL for MLP_GATED) */
    float *w3;  /* (h, D)  SwiGLU "up" W3        (NULL for MLP_GATED) */
    float *fc1; /* (2h, D) gated: rows [0,h) value, [h,2h) gate  (NULL for MLP_SWIGLU) */
    float *fc2; /* (D, h)  output projection, both kinds */
    const float *packed; /* (mlp_pack_floats) | NULL: the three projections packed by mlp_pack */
} MlpW;

/* Weights packed once (linear.h): the gate, the linear branch and fc2, each in both forms.
 * mlp_pack fills `packed` from w and points w->packed at it; pack again after w changes. */
size_t mlp_pack_floats(const MlpCfg *c);
void mlp_pack(const MlpCfg *c, MlpW *w, float *packed);

/* Hidden width for a backbone d_inner (0 when d_inner <= 0 or kind == MLP_NONE). */
int mlp_hidden(MlpKind kind, int d_inner);
/* Config from kind, D and the backbone's d_inner. */
MlpCfg mlp_cfg(MlpKind kind, int D, int d_inner);
/* Number of floats of each weight, for parameter tables. */
size_t mlp_param_floats(const MlpCfg *c);

/* cache: a and b, (2, B*T, h); scratch: dead after each call. */
size_t mlp_cache_floats(const MlpCfg *c, int B, int T);
size_t mlp_scratch_floats(const MlpCfg *c, int B, int T);

/* y = MLP(x)   x,y:(B,T,D)  mask_h:(B,h)|NULL  mask_o:(B,D)|NULL  cache|NULL (no-grad).
 * y is written (not added) and must not alias x. */
void mlp_fwd(const MlpCfg *c, const MlpW *w, float *y, const float *x, const float *mask_h,
             const float *mask_o, float *cache, float *scratch, int B, int T);
/* dx += dy J;  dW->* += ...   (dW, dx and any dW member may be NULL)
 * x, masks and cache exactly as given to the forward. */
void mlp_bwd(const MlpCfg *c, const MlpW *w, MlpW *dW, float *dx, const float *dy, const float *x,
             const float *mask_h, const float *mask_o, const float *cache, float *scratch, int B,
             int T);

#endif
