/* fp_rnn.h: the vector-state Fixed-Point RNN layer "FPRNN" (spec fp-rnn §1.1, §3.3, Fig. 3): a
 * diagonal linear RNN whose input is mixed by Q(p), iterated in depth to the fixed point of the
 * implied dense RNN. Same structure as FPMamba1 (fp_mamba.h), driven through fp_layer.h with the
 * row fp_rnn_layer: prepare / one fixed-point step / the caller's solve / n_backwards graded
 * steps / output.
 *
 * Prepare (once per forward, differentiable), E = expand·D channels:
 *   [x ; z] = W_in u
 *   x^m = silu(conv_m(x)), x^b = silu(conv_b(x)), x^λ = silu(conv_λ(x)), x ← silu(conv_x(x))
 *   (four depthwise causal convs, all reading the pre-conv x)
 *   b = silu(W_b x^b);   λ = σ(W_λ x^λ + b_λ);   bx = b ⊙ x
 * One fixed-point step h' = f(h) (h, h' : (B,T,E); h⁰ = 0):
 *   s = shift(h);   p = [x^m ; s] (h_dep), x^m + s (symm) or x^m
 *   x̃ = Q(p)(bx − h) + h;   h'_t = λ_t ⊙ h'_{t−1} + (1 − λ_t) ⊙ x̃_t   (h'_0 = 0, diagonal scan)
 * Without hidden-state dependence the fixed point is the dense linear RNN of spec §1.1:
 *   (Λ_t + (I − Λ_t) Q_t) h_t = Λ_t h_{t−1} + (I − Λ_t) Q_t (b_t ⊙ x_t).
 * Forward: h* = the caller's solve of f without gradient, n_backwards undamped graded steps from
 * h* (constant), then
 *   c = silu(W_c silu(conv_c([x ; h])))   (conv over the 2E concatenated channels, h unshifted)
 *   out = W_out RMSNorm(silu(z) ⊙ c ⊙ h) · norm_w
 * Backward runs through the graded steps and the prepare/output parts only (spec §1.5, §3.5).
 *
 * Reference specifics (documented, not enforced here): the reference always has the short convs
 * (without them it crashes, spec §9 item 5: cfg_init rejects conv = 0); its Kronecker mixer uses
 * the "spectral" normalisation (kron_norm is the caller's choice); its solver runs with s0 1,
 * decay 1 (no damping), q_out 0.10 and a default cap of 1000 (spec §1.4); its output projection is
 * not named out_proj, so the LM's 1/sqrt(n_layer) rescale does not touch it (spec §3.4) — ours is
 * "o_proj.weight" for the same reason. It forces E = 256 for the selectivedense mixer; here
 * E = expand·D always.
 *
 * Step (sequential mode): one token per sequence with per-sequence state
 * [pre-conv x window (E,W) | conv_c window (2E,W) | h of the previous token (E)]; the token's
 * fixed point is solved with s = h*_{t−1} (so λ_t h_{t−1} is fixed), then the state is committed.
 */
#ifndef IMPLICIT_LAYERS_FP_RNN_H
#define IMPLICIT_LAYERS_FP_RNN_H

#include <stddef.h>

#include "fp_layer.h"
#include "mixer.h"

typedef struct {
    int D, E, W;      /* model width, state width (expand·D), conv taps */
    int h_dep, symm;  /* mixer input [x^m; s] (h_dep), x^m + s (h_dep && symm), x^m (!h_dep) */
    int n_back;       /* differentiable steps after the solve (n_backwards) */
    int dp;           /* mixer input width */
    float eps;        /* RMSNorm epsilon (norm_eps) */
    MixerCfg mix;
} FpRnnCfg;

/* Fill cfg. conv must be 1: IM_EINVAL naming 'short_conv' otherwise; also IM_EINVAL for
 * fp_n_backwards outside 1..FP_MAX_BACK and bad mixer keys. */
int fp_rnn_cfg_init(FpRnnCfg *c, int D, int expand, int W, int conv, int h_dep, int symm, int n_back, float eps,
                    const char *mixer_type, int rank, const char *ac, int proj_rank, const char *kron_norm);

/* Parameters (θ side) or gradients (dθ side). Depthwise conv weights are (channels, W), tap W-1
 * on the current token. */
typedef struct {
    float *in_proj;            /* (2E, D) rows 0..E-1 → x, E..2E-1 → z */
    float *cx_w, *cx_b;        /* (E, W), (E)  conv_x */
    float *cb_w, *cb_b;        /* conv_b */
    float *cl_w, *cl_b;        /* conv_λ */
    float *cm_w, *cm_b;        /* conv_m (mixer branch) */
    float *cc_w, *cc_b;        /* (2E, W), (2E)  conv_c over [x ; h] */
    float *lam_w, *lam_b;      /* (E, E), (E)  W_λ, b_λ */
    float *b_w;                /* (E, E)  W_b */
    float *c_w;                /* (E, 2E) W_c */
    float *norm_w;             /* (E) */
    float *o_proj;             /* (D, E) W_out */
    MixerW *mixer;             /* owned by the binding (fp_layer_bind allocates, fp_layer_unbind frees) */
} FpRnnW;

/* Its tensors: prefix + ".in_proj.weight", ".x_conv.*", ".b_conv.*", ".lam_conv.*", ".mix_conv.*",
 * ".c_conv.*", ".lam_proj.weight/bias", ".b_proj.weight", ".c_proj.weight", ".mixer.*",
 * ".norm.weight", ".o_proj.weight"; out_scale divides the o_proj init (the reference leaves it
 * at 1). PyTorch default inits, linear biases 0 (spec §3.4).
 * The state per sequence (fp_layer_step): x window (E,W) | conv_c window (2E,W) | previous h (E);
 * zeros = the empty prefix. */

#endif
