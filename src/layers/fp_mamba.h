/* fp_mamba.h: the FP-Mamba mixer layer (FPMamba1, spec fp-rnn §3.1): a diagonal Mamba-1 layer
 * with an input- and state-dependent channel mixer Q, iterated in depth to a fixed point.
 *
 * Prepare (once per forward, differentiable):
 *   [x ; z] = W_in u;   x ← silu(conv(x)) if conv (raw x otherwise, as the reference)
 *   [δlow ; B ; C] = W_x x;   Δ = softplus(W_dt δlow + b_dt);   A = −exp(A_log)
 * One fixed-point step y' = f(y) (y, y' : (B,T,E); y⁰ = 0):
 *   s = shift(y) (s_t = y_{t−1}, s_1 = 0);   p = [x ; s] (h_dep), x + s (symm) or x
 *   x̃ = Q(p)(x − y) + y;   [By ; Cy] = W_bc s;   b̄ = normalize(B + By), c̄ = normalize(C + Cy) (bc_norm)
 *   o = S6(x̃, Δ, A, b̄, c̄, D)  (k_s6_fwd);   o ← o ⊙ silu(z) if glu_in_loop;   y' = LayerNorm(o)
 * Forward: Y* = the caller's solve of f without gradient (fp_layer.h), then
 * n_backwards differentiable, undamped applications y_k = f(y_{k−1}), y_0 = Y* (constant), and
 *   out = W_out(silu(z + W_zy shift(y)) ⊙ y)  (glu_in_loop = 0)   or   out = W_out y  (glu_in_loop = 1).
 * Backward runs through the graded steps and the prepare part only (spec §1.5, §3.5): memory and
 * cost of one step per graded application, never of the solver iterations.
 * W_bc, W_zy and the mixer's projections are weight-normalised (effective weights refreshed once
 * per forward by fp_layer_refresh).
 *
 * Step (sequential mode, spec fp-rnn App E.6): one token per sequence, with per-sequence state
 * [conv window (E,W) | S6 state (E,N) | y of the previous token (E)]. Token t's fixed point is
 * solved with s = y*_{t−1} and the S6 state read-only, then one final call commits the state.
 * Layout of memory follows STYLE §8.3: caller-owned cache (for the backward), scratch and state.
 * The layer is driven through fp_layer.h with the row fp_mamba_layer, this cfg and weight struct.
 */
#ifndef IMPLICIT_LAYERS_FP_MAMBA_H
#define IMPLICIT_LAYERS_FP_MAMBA_H

#include <stddef.h>

#include "fp_layer.h"
#include "linear.h"
#include "mixer.h"

typedef struct {
    int D, E, N, R, W;   /* model width, inner width (expand·D), state, dt rank, conv taps */
    int conv;            /* short causal conv on x */
    int h_dep, symm;     /* mixer input [x; s] (h_dep), x + s (h_dep && symm), x (!h_dep) */
    int bc_norm, glu_in_loop;
    int n_back;          /* differentiable steps after the solve (n_backwards) */
    int dp;              /* mixer input width */
    float eps;           /* LayerNorm epsilon (norm_eps) */
    MixerCfg mix;
} FpMambaCfg;

/* Fill cfg from the model keys (mixer_*, kron_norm, bc_norm, glu_in_loop, fp_n_backwards,
 * dt_rank, short_conv). IM_EINVAL with a message naming the key on bad values. */
int fp_mamba_cfg_init(FpMambaCfg *c, int D, int expand, int N, int R, int W, int conv, int h_dep, int symm,
                      int bc_norm, int glu_in_loop, int n_back, float eps, const char *mixer_type, int rank,
                      const char *ac, int proj_rank, const char *kron_norm);

/* Parameters (θ side) or gradients (dθ side). bc / zy are weight-normed (W effective, g, v). */
typedef struct {
    float *in_proj;   /* (2E, D) rows 0..E-1 → x, E..2E-1 → z */
    float *conv_w;    /* (E, W) | NULL without conv */
    float *conv_b;    /* (E) | NULL */
    float *x_proj;    /* (R+2N, E) rows: δlow | B | C */
    float *dt_w;      /* (E, R) */
    float *dt_b;      /* (E) */
    float *A_log;     /* (E, N) */
    float *Dskip;     /* (E) */
    LinearW bc;       /* (2N, E) W_bc */
    LinearW zy;       /* (E, E) W_zy (glu_in_loop = 0 only) */
    float *ln_w, *ln_b; /* (E) */
    float *out_proj;  /* (D, E) */
    MixerW *mixer;    /* owned by the binding (fp_layer_bind allocates, fp_layer_unbind frees) */
} FpMambaW;

/* The state per sequence (fp_layer_step): conv window (E,W) | S6 state (E,N) | previous y (E);
 * zeros = the empty prefix. */

#endif
