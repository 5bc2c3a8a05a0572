/* fp_mamba2.h: the FPMamba2 mixer layer (spec fp-rnn §3.2): a Mamba-2 (SSD, scalar decay per
 * head) layer with an input- and state-dependent channel mixer Q, iterated in depth to a fixed
 * point. Same structure as FPMamba1 (fp_mamba.h), driven through fp_layer.h with the row
 * fp_mamba2_layer: prepare / one fixed-point step / the caller's solve / n_backwards graded
 * steps / output.
 *
 * Prepare (once per forward, differentiable):
 *   [z ; xBC ; δ] = W_in u            widths E, E + 2N, H  (H = E / P heads of width P)
 *   xBC ← silu(conv(xBC)) over all E + 2N channels if conv (raw otherwise, as the reference)
 *   [x ; B ; C] = xBC;   Δ = softplus(δ + dt_bias) (B,T,H);   A = −exp(A_log) (H)
 * One fixed-point step y' = f(y) (y, y' : (B,T,E); y⁰ = 0):
 *   s = shift(y) (s_t = y_{t−1}, s_1 = 0);   p = [x ; s] (h_dep), x + s (symm) or x
 *   x̃ = Q(p)(x − y) + y;   [By ; Cy] = W_bc s;   b̄ = normalize(B + By), c̄ = normalize(C + Cy)
 *   (always normalised: the reference ignores bc_norm in this block; one group, ngroups = 1)
 *   o = SSD(x̃, Δ, A, b̄, c̄, D) per head (k_ssd_fwd);   o ← o ⊙ silu(z) if glu_in_loop
 *   y' = RMSNorm(o ⊙ silu(z)) · norm_w      (the group RMSNorm of Mamba-2 with one group; z
 *                                            gates inside the loop always, twice if glu_in_loop,
 *                                            as the reference does)
 * Forward: Y* = the caller's solve of f without gradient, n_backwards undamped graded steps from
 * Y* (constant), then
 *   out = W_out(silu(z + W_zy shift(y)) ⊙ y)   (glu_in_loop = 0)   or   out = W_out y   (= 1).
 * FIXED reference bug (spec §9 item 4): the reference transposes z as if it were (B,E,T) before
 * adding W_zy shift(y), which fails unless T == E; we implement the intended z + W_zy shift(y).
 * Backward runs through the graded steps and the prepare part only (spec §1.5).
 * W_bc, W_zy and the mixer's projections are weight-normalised (effective weights refreshed
 * once per forward by fp_layer_refresh).
 * Reference solver constants (spec §1.4): s0 0.99, decay 0.9, patience 15, q_out 0.10, cap 100.
 *
 * Step (sequential mode): one token per sequence with per-sequence state
 * [conv window (C,W) | SSD state (H,P,N) | y of the previous token (E)]; the token's fixed point
 * is solved with s = y*_{t−1} and the SSD state read-only, then one final call commits it.
 * Out of scope: ngroups > 1, dt_limit, biases on the in/out projections.
 */
#ifndef IMPLICIT_LAYERS_FP_MAMBA2_H
#define IMPLICIT_LAYERS_FP_MAMBA2_H

#include <stddef.h>

#include "fp_layer.h"
#include "linear.h"
#include "mixer.h"

typedef struct {
    int D, E, N, P, H, W; /* model width, inner width, state, head dim, heads (E/P), conv taps */
    int C, K;             /* conv channels E + 2N, in_proj rows 2E + 2N + H */
    int conv;             /* short causal conv on xBC */
    int h_dep, symm;      /* mixer input [x; s] (h_dep), x + s (h_dep && symm), x (!h_dep) */
    int glu_in_loop;
    int n_back;           /* differentiable steps after the solve (n_backwards) */
    int dp;               /* mixer input width */
    float eps;            /* RMSNorm epsilon (norm_eps) */
    MixerCfg mix;
} FpMamba2Cfg;

/* Fill cfg. IM_EINVAL with a message naming the config key on bad values (headdim not dividing
 * expand·d_model, fp_n_backwards outside 1..FP_MAX_BACK, the mixer keys). */
int fp_mamba2_cfg_init(FpMamba2Cfg *c, int D, int expand, int N, int P, int W, int conv, int h_dep, int symm,
                       int glu_in_loop, int n_back, float eps, const char *mixer_type, int rank, const char *ac,
                       int proj_rank, const char *kron_norm);

/* Parameters (θ side) or gradients (dθ side). bc / zy are weight-normed (W effective, g, v). */
typedef struct {
    float *in_proj;   /* (K, D) rows 0..E-1 → z, E..E+C-1 → xBC, E+C.. → δ */
    float *conv_w;    /* (C, W) | NULL without conv */
    float *conv_b;    /* (C) | NULL */
    float *dt_bias;   /* (H) */
    float *A_log;     /* (H) */
    float *Dskip;     /* (H) */
    LinearW bc;       /* (2N, E) W_bc */
    LinearW zy;       /* (E, E) W_zy (glu_in_loop = 0 only) */
    float *norm_w;    /* (E) */
    float *out_proj;  /* (D, E) */
    MixerW *mixer;    /* owned by the binding (fp_layer_bind allocates, fp_layer_unbind frees) */
} FpMamba2W;

/* Its tensors: prefix + ".in_proj.weight", ".conv1d.*", ".dt_bias", ".A_log", ".D", ".bc_proj.*",
 * ".zy_proj.*", ".mixer.*", ".norm.weight", ".out_proj.weight". A_log = ln U(1,16), dt_bias the
 * inverse softplus of dt ∈ [1e-3, 0.1], D = 1 (Mamba-2 init).
 * The state per sequence (fp_layer_step): conv window (C,W) | SSD state (H,P,N) | previous y (E);
 * zeros = the empty prefix. */

#endif
