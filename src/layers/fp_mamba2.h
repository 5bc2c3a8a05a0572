/* fp_mamba2.h: the FPMamba2 mixer layer (spec fp-rnn §3.2): a Mamba-2 (SSD, scalar decay per
 * head) layer with an input- and state-dependent channel mixer Q, iterated in depth to a fixed
 * point. Same structure as FPMamba1 (fp_mamba.h): prepare / one fixed-point step / the
 * FixedPointOptimizer solve (src/fixedpoint/fpo.h) / n_backwards graded steps / output.
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
 * Forward: Y* = FixedPointOptimizer(f) without gradient, n_backwards undamped graded steps from
 * Y* (constant), then
 *   out = W_out(silu(z + W_zy shift(y)) ⊙ y)   (glu_in_loop = 0)   or   out = W_out y   (= 1).
 * FIXED reference bug (spec §9 item 4): the reference transposes z as if it were (B,E,T) before
 * adding W_zy shift(y), which fails unless T == E; we implement the intended z + W_zy shift(y).
 * Backward runs through the graded steps and the prepare part only (spec §1.5).
 * W_bc, W_zy and the mixer's projections are weight-normalised (effective weights refreshed
 * once per forward by fp_mamba2_refresh).
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

#include "../fixedpoint/fpo.h"
#include "../core/params.h"
#include "fp_mamba.h"
#include "linear.h"
#include "mixer.h"

#define FP_MAX_BACK 64 /* graded steps at most (fp_n_backwards) */

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
    MixerW *mixer;    /* owned by the binding (fp_mamba2_bind allocates, fp_mamba2_unbind frees) */
} FpMamba2W;

/* Add the layer's tensors (prefix + ".in_proj.weight", ".conv1d.*", ".dt_bias", ".A_log", ".D",
 * ".bc_proj.*", ".zy_proj.*", ".mixer.*", ".norm.weight", ".out_proj.weight") to t. out_scale
 * divides the out_proj init (1/sqrt(n_layer), spec §3.4). A_log = ln U(1,16), dt_bias the
 * inverse softplus of dt ∈ [1e-3, 0.1], D = 1 (Mamba-2 init). */
void fp_mamba2_add_params(const FpMamba2Cfg *c, ParamTable *t, const char *prefix, float out_scale);
/* Floats of effective (weight-normalised) weights: W_bc, W_zy and the mixer's. */
size_t fp_mamba2_eff_floats(const FpMamba2Cfg *c);
/* Point w into block (θ or dθ) and its effective weights into eff. */
void fp_mamba2_bind(const FpMamba2Cfg *c, FpMamba2W *w, const ParamTable *t, float *block, const char *prefix,
                    float *eff);
void fp_mamba2_unbind(FpMamba2W *w);
/* After the table's init rules: weight-norm g = ||v||, mixer init. */
void fp_mamba2_post_init(const FpMamba2Cfg *c, FpMamba2W *w);
/* Effective weights from (g, v): once per model forward. */
void fp_mamba2_refresh(const FpMamba2Cfg *c, FpMamba2W *w);
/* After a backward: effective-weight gradients → dg, dv (caller zeroes deff before the backward). */
void fp_mamba2_wn_bwd(const FpMamba2Cfg *c, const FpMamba2W *w, FpMamba2W *dw);

size_t fp_mamba2_cache_floats(const FpMamba2Cfg *c, int B, int T);
size_t fp_mamba2_scratch_floats(const FpMamba2Cfg *c, int B, int T);

/* Forward over u:(B,T,D) (the normed block input); out:(B,T,D) written. opts: solver options.
 * cache NULL = no backward follows. st (FpMambaStats of fp_mamba.h) may be NULL. Returns IM_OK
 * or IM_ENUM (non-finite iterate or output). */
int fp_mamba2_fwd(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, const FpoOpts *opts,
                  FpMambaStats *st, float *cache, float *scratch, int B, int T);
/* The same forward with the solve replaced by a given Y*:(B,T,E) (tests of the one-step gradient). */
int fp_mamba2_fwd_at(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, const float *ystar,
                     float *cache, float *scratch, int B, int T);
/* Only the solve: ystar:(B,T,E) receives Y* (the damped iterate the graded steps start from).
 * scratch: fp_mamba2_scratch_floats. */
int fp_mamba2_solve(const FpMamba2Cfg *c, const FpMamba2W *w, float *ystar, const float *u, const FpoOpts *opts,
                    FpMambaStats *st, float *scratch, int B, int T);
/* Backward of the last caching forward: du:(B,T,D) +=, dw += (effective side for bc, zy, mixer). */
void fp_mamba2_bwd(const FpMamba2Cfg *c, const FpMamba2W *w, FpMamba2W *dw, float *du, const float *dout,
                   const float *u, const float *cache, float *scratch, int B, int T);

/* State layout: conv windows (B,C,W) | SSD states (B,H,P,N) | previous y (B,E); zeros = empty. */
size_t fp_mamba2_state_floats(const FpMamba2Cfg *c, int B);
size_t fp_mamba2_step_scratch_floats(const FpMamba2Cfg *c, int B);
/* One token: u:(B,D) → out:(B,D); state updated in place. st accumulates (iters, tokens). */
int fp_mamba2_step(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, float *state,
                   const FpoOpts *opts, FpMambaStats *st, float *scratch, int B);

#endif
