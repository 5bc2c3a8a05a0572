/* mamba1.h: the Mamba-1 mixer layer (mamba_ssm `Mamba`; spec fp-rnn §5.2, init §3.1), forward,
 * backward and step.
 *
 * Exactly the mixer; the caller (lm_resid) applies the pre-norm RMSNorm and the residual add:
 *   [xin ; z]       = in_proj(u)                    u:(B,T,D) normed input, no bias
 *   xa              = silu(causal depthwise conv(xin) + conv bias)      W taps
 *   [dlow ; Bm ; Cm] = x_proj(xa)                    widths R | N | N, no bias
 *   dt              = softplus(dt_proj(dlow) + dt_bias);   A = -exp(A_log)
 *   o               = S6(xa, dt, A, Bm, Cm, Dskip)   (k_s6_fwd)
 *   out             = out_proj(o * silu(z))          no bias
 * softplus is PyTorch's (the identity above 20).
 *
 * Three kinds of memory (STYLE §8.3); the layer never allocates:
 *   cache   kept from mamba1_fwd for mamba1_bwd  (mamba1_cache_floats; NULL = no-grad forward)
 *   scratch temporaries, dead after every call (mamba1_scratch_floats, _step_scratch_floats)
 *   state   the recurrence for mamba1_step       (mamba1_state_floats), layout:
 *             conv_state (B, E, W): the last W PRE-conv xin vectors, oldest first,
 *             then ssm_state (B, E, N).  All zeros = the empty prefix.
 * Out of scope: an initial state for the full-sequence forward, gradients through the state,
 * dropout, weight norm (the caller passes plain weights), the "no conv" variant of FP-Mamba.
 */
#ifndef IMPLICIT_LAYERS_MAMBA1_H
#define IMPLICIT_LAYERS_MAMBA1_H

#include <stddef.h>

/* Hyperparameters only. D model width; E = expand*D inner width; N state size; R dt rank;
 * W conv taps; K = R + 2N rows of x_proj. */
typedef struct {
    int D, E, N, R, W, K;
} Mamba1Cfg;

/* Fill every field from the free ones; R = 0 means ceil(D/16) (mamba_ssm "auto").
 * CHECKs D, expand, N, W > 0 and R >= 0. */
void mamba1_cfg_init(Mamba1Cfg *c, int D, int expand, int N, int R, int W);

/* Pointers into the parameter block; the same struct pointing into the gradient block is the dW
 * argument of mamba1_bwd (NULL fields there = not wanted). Names (mamba_ssm state_dict, under
 * "…mixer."): in_proj.weight, conv1d.weight (E,1,W), conv1d.bias, x_proj.weight, dt_proj.weight,
 * dt_proj.bias, A_log, D, out_proj.weight. */
typedef struct {
    float *in_proj;  /* (2E, D): rows [0,E) give xin, rows [E,2E) give z */
    float *conv_w;   /* (E, W) depthwise taps, tap W-1 multiplies the current token */
    float *conv_b;   /* (E) */
    float *x_proj;   /* (K, E): rows dlow (R) | Bm (N) | Cm (N) */
    float *dt_proj;  /* (E, R) */
    float *dt_bias;  /* (E) */
    float *A_log;    /* (E, N)  A = -exp(A_log) */
    float *Dskip;    /* (E) */
    float *out_proj; /* (D, E) */
} Mamba1W;

/* Floats mamba1_fwd keeps for mamba1_bwd, for a (B, T) call: per token xin (E), z (E),
 * dlow | Bm | Cm (K), dt (E, post-softplus) and the scan output o (E): 4E + K. The backward
 * recomputes the conv + silu and the scan's states (k_s6_bwd). */
size_t mamba1_cache_floats(const Mamba1Cfg *c, int B, int T);
/* Temporaries of mamba1_fwd and mamba1_bwd (one size covers both). */
size_t mamba1_scratch_floats(const Mamba1Cfg *c, int B, int T);
/* B*E*W + B*E*N: conv_state (B,E,W) followed by ssm_state (B,E,N). */
size_t mamba1_state_floats(const Mamba1Cfg *c, int B);
/* Temporaries of mamba1_step. */
size_t mamba1_step_scratch_floats(const Mamba1Cfg *c, int B);

/* Full-sequence forward from the zero state.
 *   y:(B,T,D) written.  x:(B,T,D) normed input.
 *   cache:(mamba1_cache_floats)|NULL (NULL = no backward will follow).
 *   scratch:(mamba1_scratch_floats) required.
 *   state_out:(mamba1_state_floats(B))|NULL prefill: receives conv_state = the last W pre-conv
 *     xin vectors (left zero-padded when T < W) and ssm_state = H_T: the state mamba1_step
 *     would hold after the same T tokens.
 * T >= 1. y must not alias x or the buffers. */
void mamba1_fwd(const Mamba1Cfg *c, const Mamba1W *w, float *y, const float *x, float *cache,
                float *scratch, float *state_out, int B, int T);

/* Backward of mamba1_fwd for the same (w, x, B, T) and the cache it filled.
 *   dy:(B,T,D).  dW: gradient block (NULL, or NULL fields, ok), accumulates (+=).
 *   dx:(B,T,D)|NULL += .  cache required (read-only), scratch required.
 * dA_log += dA * A; ddt_bias += sum over tokens of d(dt_proj output). */
void mamba1_bwd(const Mamba1Cfg *c, const Mamba1W *w, Mamba1W *dW, float *dx, const float *dy,
                const float *x, const float *cache, float *scratch, int B, int T);

/* One token per sequence.
 *   y:(B,D) written.  x:(B,D) normed input.
 *   state_in:(mamba1_state_floats(B)) the state after the previous tokens (read-only).
 *   state_out:(mamba1_state_floats(B))|NULL receives the new state; NULL = do not commit
 *     (fixed-point inner iterations); may equal state_in (commit in place).
 *   scratch:(mamba1_step_scratch_floats) required. */
void mamba1_step(const Mamba1Cfg *c, const Mamba1W *w, float *y, const float *x,
                 const float *state_in, float *state_out, float *scratch, int B);

#endif
