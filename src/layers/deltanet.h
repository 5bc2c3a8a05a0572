/* deltanet.h: the (Gated) DeltaNet / DeltaProduct token mixer (spec fp-rnn §5.4, §5.5; the FLA
 * GatedDeltaProduct layer, of which GatedDeltaNet is nh = 1), forward, backward and step.
 *
 * Exactly the mixer; the caller applies the pre-norm RMSNorm and the residual add. Per token u
 * (the normed input x_t), with nh Householder steps and H heads of key dim K, value dim V:
 *   zq = q_proj u (H K);  zk = k_proj u (nh H K);  zv = v_proj u (nh H V)    rows (n, h, d)
 *   q, k, v = silu(short causal depthwise conv(z*))   (W taps, no bias; silu(z*) when W = 0)
 *   q = l2norm(q) K^-1/2,  k = l2norm(k)  per head:  l2norm(x) = x (|x|^2 + 1e-6)^-1/2  (FLA)
 *   beta = c sigmoid(b_proj u)  (nh H),  c = 2 when neg_eig (eigenvalues in (-1, 1]), else 1
 *   gated: g = -exp(A_log) softplus(a_proj u + dt_bias)  (H), the log decay of the state
 *   o = delta rule (k_delta_fwd: S <- e^g S; S <- S + beta_j k_j (v_j - S^T k_j)^T, j < nh; o = S^T q)
 *   on = RMSNorm(o) per head (weight o_norm (V), shared by the heads; norm before the gate)
 *   out = o_proj(on * silu(g_proj u))   gated  |  o_proj(on)   plain DeltaNet
 * "gated" switches on both the forget gate (a_proj, A_log, dt_bias) and the output gate (g_proj),
 * as the spec's two families: gated_deltanet (GatedDeltaNet / GatedDeltaProduct) and deltanet.
 *
 * Memory (STYLE §8.3); the layer never allocates:
 *   cache   kept from deltanet_fwd for deltanet_bwd (deltanet_cache_floats; NULL = no-grad)
 *   scratch temporaries of one call (deltanet_scratch_floats, deltanet_step_scratch_floats)
 *   state   for deltanet_step (deltanet_state_floats), layout: when W > 0 the conv windows of
 *           zq (B, HK, W), zk (B, NK, W), zv (B, NV, W) (PRE-conv projections, oldest first),
 *           then S (B, H, K, V). All zeros = the empty prefix.
 * Out of scope: biases on the projections and convs (FLA has none), num_v_heads != num_heads,
 * dropout, attention masks / variable-length packing, weight norm.
 */
#ifndef IMPLICIT_LAYERS_DELTANET_H
#define IMPLICIT_LAYERS_DELTANET_H

#include <stddef.h>

/* l2norm epsilon of q and k (FLA's l2norm kernels) */
#define DELTA_L2_EPS 1e-6f

/* Hyperparameters. D model width; H heads; K, V key / value head dims; nh Householder steps per
 * token; W conv taps (0 = no short conv); gated (forget + output gate); neg_eig (beta = 2 sigma);
 * eps of the per-head output RMSNorm. Derived: HK = H K, HV = H V, NK = nh H K, NV = nh H V,
 * NB = nh H. */
typedef struct {
    int D, H, K, V, nh, W, gated, neg_eig;
    float eps;
    int HK, HV, NK, NV, NB;
} DeltaCfg;

/* Fill every field (CHECKs all dims > 0, W >= 0). */
void deltanet_cfg_init(DeltaCfg *c, int D, int H, int K, int V, int nh, int W, int gated, int neg_eig,
                       float eps);

/* Pointers into the parameter block; the same struct over the gradient block is dW (NULL fields
 * = not wanted). Fields of absent parts (no gate, W = 0) are NULL. Checkpoint names in
 * models/lm_delta.c. */
typedef struct {
    float *q_proj;  /* (HK, D) */
    float *k_proj;  /* (NK, D)  output rows (n, h, d) */
    float *v_proj;  /* (NV, D)  output rows (n, h, d) */
    float *b_proj;  /* (NB, D)  output rows (n, h) */
    float *a_proj;  /* (H, D)   gated */
    float *A_log;   /* (H)      gated */
    float *dt_bias; /* (H)      gated */
    float *q_conv;  /* (HK, W)  W > 0; tap W-1 multiplies the current token */
    float *k_conv;  /* (NK, W) */
    float *v_conv;  /* (NV, W) */
    float *g_proj;  /* (HV, D)  gated */
    float *o_norm;  /* (V) */
    float *o_proj;  /* (D, HV) */
} DeltaW;

/* Floats deltanet_fwd keeps for deltanet_bwd: per token the projections zq, zk, zv (the conv
 * inputs), the kernel inputs q, k, v, beta (and g, a_proj u, g_proj u when gated), the kernel
 * output o and the rstd of the l2 norms and of the output norm. The backward recomputes the
 * conv outputs and the normed o; the recurrence recomputes its states (k_delta_bwd). */
size_t deltanet_cache_floats(const DeltaCfg *c, int B, int T);
/* Temporaries of deltanet_fwd and deltanet_bwd (one size covers both). */
size_t deltanet_scratch_floats(const DeltaCfg *c, int B, int T);
/* B (HK + NK + NV) W (when W > 0) + B H K V. */
size_t deltanet_state_floats(const DeltaCfg *c, int B);
size_t deltanet_step_scratch_floats(const DeltaCfg *c, int B);

/* Full-sequence forward from the zero state.  y:(B,T,D) written; x:(B,T,D) normed input.
 * cache:(deltanet_cache_floats)|NULL (NULL = no backward follows); scratch required.
 * state_out:(deltanet_state_floats(B))|NULL prefill: receives the conv windows (the last W
 * projections, zero-padded on the left when T < W) and S after token T-1, i.e. the state that
 * T calls of deltanet_step would leave. T >= 1; y must not alias x. */
void deltanet_fwd(const DeltaCfg *c, const DeltaW *w, float *y, const float *x, float *cache,
                  float *scratch, float *state_out, int B, int T);

/* Backward of deltanet_fwd for the same (w, x, B, T) and its cache.  dy:(B,T,D).
 * dW (NULL or NULL fields ok) and dx:(B,T,D)|NULL accumulate (+=). */
void deltanet_bwd(const DeltaCfg *c, const DeltaW *w, DeltaW *dW, float *dx, const float *dy,
                  const float *x, const float *cache, float *scratch, int B, int T);

/* One token per sequence.  y:(B,D) written; x:(B,D).  state_in read; state_out|NULL receives
 * the new state (NULL = do not commit; may equal state_in).  scratch:(step_scratch) required. */
void deltanet_step(const DeltaCfg *c, const DeltaW *w, float *y, const float *x,
                   const float *state_in, float *state_out, float *scratch, int B);

#endif
