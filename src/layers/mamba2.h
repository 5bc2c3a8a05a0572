/* mamba2.h: the Mamba2 mixer layer (spec implicit-lm §1.4, G = 1), forward, backward and step.
 *
 * Exactly the mixer; the caller (block/model) applies the pre-norm RMSNorm and the residual add:
 *   zx  = in_proj(x) + u                  x:(B,T,D) normed input, u:(B,T,K) injection (§2.1)
 *   split zx (per token):  zgate (E) | xBC (C = E+2N) | dtraw (H)
 *   xBC = silu(causal depthwise conv(xBC))        conv over time with W taps + bias
 *   split xBC:  xs (E = H*P) | Bm (N) | Cm (N)
 *   dt  = softplus(dtraw + dt_bias);  A = -exp(A_log)
 *   ys  = SSD scan(xs, dt, A, Bm, Cm) + Dskip*xs  (k_ssd_fwd)
 *   yn  = GatedRMSNorm(ys, zgate) * norm_w        (norm_before_gate = false, one group of E)
 *   out = out_proj(yn) * drop_mask                (variational dropout §1.7, mask shared over T)
 *
 * Three kinds of memory (STYLE §8.3); the layer never allocates:
 *   cache   kept from mamba2_fwd for mamba2_bwd  (mamba2_cache_floats; NULL = no-grad forward)
 *   scratch temporaries, dead after every call (mamba2_scratch_floats, _step_scratch_floats)
 *   state   the recurrence for mamba2_step       (mamba2_state_floats), layout:
 *             conv_state (B, C, W): the last W PRE-conv xBC vectors (u included), oldest first,
 *             then ssm_state (B, H, P, N).  All zeros = the empty prefix.
 * Sequential mode (§4.1): inner fixed-point iterations call mamba2_step with state_out = NULL
 * (the cached state is read-only); the final call commits with state_out = state_in.
 *
 * Out of scope: ngroups > 1, dt clamping (dt_limit), the in-mixer MLP (d_mlp = 0), biases on the
 * projections, noise injection (§7, applied by the caller on x / state if wanted), weight norm
 * (the caller passes already-normalised weights).
 */
#ifndef IMPLICIT_LAYERS_MAMBA2_H
#define IMPLICIT_LAYERS_MAMBA2_H

#include <stddef.h>

/* Hyperparameters only. D model width; E = expand*D inner width; N state size; P head dim;
 * H = E/P heads; W conv taps; K = 2E+2N+H = in_proj rows; C = E+2N conv channels; eps of the
 * gated RMSNorm (1e-5 in the spec). */
typedef struct {
    int D, E, N, P, H, W, K, C;
    float eps;
    /* Layout of the injection u and of its gradient du (mamba2_cfg_init: 0):
     *   0: rows, (M, K) row-major, token after token;
     *   1: parts, in_proj's five row blocks zgate (E) | x (E) | B (N) | C (N) | dt (H) one after
     *      the other, part i a contiguous (M, n_i) array at u + M * off_i (mamba2_u_parts).
     * The product of in_proj adds u part by part on every call; an implicit model, which calls
     * the layer with the same u in every solver iteration, stores u in parts once per forward so
     * that those adds read contiguous arrays (rows of H to E floats, K apart, are slower). */
    int u_parts;
} Mamba2Cfg;

/* Widths n_i of the injection's five parts (u_parts), in order; returns 5. */
int mamba2_u_parts(const Mamba2Cfg *c, int n[5]);

/* Fill every field from the free ones (CHECKs: all > 0, E divisible by P). */
void mamba2_cfg_init(Mamba2Cfg *c, int D, int expand, int N, int P, int W, float eps);

/* Pointers into the parameter block. The same struct, pointing into the gradient block, is the
 * dW argument of mamba2_bwd (a NULL field there = that gradient is not wanted). Names follow the
 * checkpoint (§14): in_proj.weight, conv1d.weight (C,1,W), conv1d.bias, dt_bias, A_log, D,
 * norm.weight, out_proj.weight. */
typedef struct {
    float *in_proj;  /* (K, D) */
    float *conv_w;   /* (C, W) depthwise taps, tap W-1 multiplies the current token */
    float *conv_b;   /* (C) */
    float *dt_bias;  /* (H) */
    float *A_log;    /* (H)  A = -exp(A_log) */
    float *Dskip;    /* (H) */
    float *norm_w;   /* (E) gated RMSNorm weight */
    float *out_proj; /* (D, E) */
    const float *packed; /* (mamba2_pack_floats) | NULL: in_proj and out_proj packed by mamba2_pack */
} Mamba2W;

/* Weights packed once (linear.h): in_proj's five row blocks and out_proj, each in both forms, for
 * a caller that runs many products on unchanged weights (a fixed-point solve, a generation).
 * mamba2_pack fills `packed` from w and points w->packed at it; pack again after w changes.
 * Products with few rows (batch-1 steps) still stream the plain weights. */
size_t mamba2_pack_floats(const Mamba2Cfg *c);
void mamba2_pack(const Mamba2Cfg *c, Mamba2W *w, float *packed);

/* Floats mamba2_fwd keeps for mamba2_bwd, for a (B, T) call. What is cached (per token):
 *   zx (K)   = in_proj(x) + u, from which zgate, pre-conv xBC and dtraw are re-read (stored
 *              as five contiguous per-split arrays, an internal layout);
 *   ys (E)   = SSD output before the gated norm (needed by the norm's backward);
 *   rstd (1) = the gated norm's reciprocal RMS;   dt (H) = softplus(dtraw + dt_bias);
 * plus the scan's k_ssd_saved_floats(B,T,H,P,N) (chunk-entry states, NOT per-timestep states).
 * The backward recomputes the conv + silu (cheap, O(T*C*W)) and the normed yn. */
size_t mamba2_cache_floats(const Mamba2Cfg *c, int B, int T);
/* Temporaries of mamba2_fwd and mamba2_bwd (one size covers both). */
size_t mamba2_scratch_floats(const Mamba2Cfg *c, int B, int T);
/* B*C*W + B*H*P*N: conv_state (B,C,W) followed by ssm_state (B,H,P,N). */
size_t mamba2_state_floats(const Mamba2Cfg *c, int B);
/* Temporaries of mamba2_step. */
size_t mamba2_step_scratch_floats(const Mamba2Cfg *c, int B);

/* Full-sequence forward from the zero state.
 *   y:(B,T,D) written.  x:(B,T,D) normed input.  u:(B,T,K)|NULL injection added to all K channels
 *   (laid out as c->u_parts says).
 *   drop_mask:(B,D)|NULL variational dropout mask (values 0 or 1/(1-p)), broadcast over T.
 *   cache:(mamba2_cache_floats)|NULL (NULL = no backward will follow).
 *   scratch:(mamba2_scratch_floats) required.
 *   state_out:(mamba2_state_floats(B))|NULL prefill: receives conv_state = the last W pre-conv
 *     xBC vectors (left zero-padded when T < W) and ssm_state = S_{T-1}.  The dropout mask does
 *     not touch the state, so a prefill with a mask still gives the step path's state.
 * T >= 1. y must not alias x, u or the buffers. */
void mamba2_fwd(const Mamba2Cfg *c, const Mamba2W *w, float *y, const float *x, const float *u,
                const float *drop_mask, float *cache, float *scratch, float *state_out, int B,
                int T);

/* Backward of mamba2_fwd for the same (w, x, u, drop_mask, B, T) and the cache it filled.
 *   dy:(B,T,D) gradient on y.  dW: gradient block (NULL, or NULL fields, ok), accumulates (+=).
 *   dx:(B,T,D)|NULL += ;  du:(B,T,K)|NULL += (du = d zx, since u is added to all K channels; laid out
 *   as u).
 *   u:(B,T,K)|NULL is not read (its effect is in the cached zx); passed for symmetry.
 *   cache:(mamba2_cache_floats) required, read-only.  scratch:(mamba2_scratch_floats) required.
 * dA_log += dA * A;  ddt_bias += sum_{b,t} d(dtraw).  No gradient flows into the state. */
void mamba2_bwd(const Mamba2Cfg *c, const Mamba2W *w, Mamba2W *dW, float *dx, float *du,
                const float *dy, const float *x, const float *u, const float *drop_mask,
                const float *cache, float *scratch, int B, int T);

/* One token per sequence (no dropout in the step path, §1.7).
 *   y:(B,D) written.  x:(B,D) normed input.  u:(B,K)|NULL (laid out as c->u_parts says, M = B).
 *   state_in:(mamba2_state_floats(B)) the state after the previous tokens (read-only).
 *   state_out:(mamba2_state_floats(B))|NULL receives the new state; NULL = do not commit
 *     (sequential-mode inner iterations); may equal state_in (commit in place).
 *   scratch:(mamba2_step_scratch_floats) required. */
void mamba2_step(const Mamba2Cfg *c, const Mamba2W *w, float *y, const float *x, const float *u,
                 const float *state_in, float *state_out, float *scratch, int B);

#endif
