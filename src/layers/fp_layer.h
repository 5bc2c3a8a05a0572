/* fp_layer.h: the one interface of the three Fixed-Point RNN layers: FPMamba1 (fp_mamba.h),
 * FPMamba2 (fp_mamba2.h) and the vector FP-RNN (fp_rnn.h), spec fp-rnn §3.1–§3.3.
 *
 * Each family file defines its hyperparameters (cfg), its weight struct and one row,
 * FpLayerOps (fp_common.h), with what is its own: its tensors, its prepare part, one application
 * of f, its output and their backwards. Everything they share is written once in fp_common.c and
 * reached through the functions below, which take the row, the family's cfg and weight struct:
 *   forward  prepare (differentiable, once) → Y* = the caller's solve of y = f(y) from y = 0
 *            (no gradient) → n_back undamped graded steps from Y* (constant) → output
 *   backward through the graded steps, the output and the prepare part only (spec §1.5, §3.5)
 *   step     one token per sequence, the token's fixed point solved with the state read-only,
 *            then n_back applications of which the last commits the state (spec App E.6)
 * The solve is the caller's (an FpSolve, core/fpmap.h): a layer never picks a solver, so every
 * solver of the table in fixedpoint/fp.h serves these layers (the models pass one; see
 * models/lm_fp.c). The map handed to it is the iterate (B,T,E) with B samples and tokens of E
 * floats. Memory follows STYLE §8.3 (caller-owned cache, scratch and state; no allocation but
 * the mixer binding).
 */
#ifndef IMPLICIT_LAYERS_FP_LAYER_H
#define IMPLICIT_LAYERS_FP_LAYER_H

#include <stddef.h>

#include "../core/fpmap.h"
#include "../core/params.h"

typedef struct FpLayerOps FpLayerOps;
extern const FpLayerOps fp_mamba_layer, fp_mamba2_layer, fp_rnn_layer;

/* Graded steps at most (fp_n_backwards). */
#define FP_MAX_BACK 64

/* The family's name ("fp_mamba", ...), and the bytes of its weight struct. */
const char *fp_layer_name(const FpLayerOps *L);
size_t fp_layer_w_bytes(const FpLayerOps *L);
/* Width of the iterate per token (E = expand·d_model): the map a solve sees is (B,T,E) floats. */
int fp_layer_width(const FpLayerOps *L, const void *cfg);

/* ---- parameters: w is the family's weight struct, on the θ side or the dθ side ---------------- */

/* Add the layer's tensors named prefix + ".<name>" to t. out_scale divides the output
 * projection's init (1/sqrt(n_layer), spec §3.4). */
void fp_layer_add_params(const FpLayerOps *L, const void *cfg, ParamTable *t, const char *prefix, float out_scale);
/* Floats of effective (weight-normalised) weights: W_bc, W_zy and the mixer's. */
size_t fp_layer_eff_floats(const FpLayerOps *L, const void *cfg);
/* Point w into block (θ or dθ) and its effective weights into eff (θ side: refreshed weights; dθ
 * side: their accumulated gradients). Allocates the mixer binding, which unbind frees. */
void fp_layer_bind(const FpLayerOps *L, const void *cfg, void *w, const ParamTable *t, float *block,
                   const char *prefix, float *eff);
void fp_layer_unbind(const FpLayerOps *L, void *w);
/* After the table's init rules: the family's own rules, weight-norm g = ‖v‖, the mixer's init. */
void fp_layer_post_init(const FpLayerOps *L, const void *cfg, void *w);
/* Effective weights from (g, v): once per model forward. */
void fp_layer_refresh(const FpLayerOps *L, const void *cfg, void *w);
/* After a backward: the accumulated effective-weight gradients onto dg, dv (the caller zeroes
 * the effective-gradient buffer before the next backward). */
void fp_layer_wn_bwd(const FpLayerOps *L, const void *cfg, const void *w, void *dw);

/* ---- forward / backward over (B,T) ------------------------------------------------------------ */

size_t fp_layer_cache_floats(const FpLayerOps *L, const void *cfg, int B, int T);
size_t fp_layer_scratch_floats(const FpLayerOps *L, const void *cfg, int B, int T);

/* out:(B,T,D) from u:(B,T,D) (the normed block input). cache NULL = no backward follows (the
 * graded steps are then plain applications). Returns IM_OK, the solve's status, or IM_ENUM for a
 * non-finite output. */
int fp_layer_fwd(const FpLayerOps *L, const void *cfg, const void *w, float *out, const float *u,
                 const FpSolve *solve, float *cache, float *scratch, int B, int T);
/* The same forward with the solve replaced by a given Y*:(B,T,E) (tests of the one-step
 * gradient, spec §10). */
int fp_layer_fwd_at(const FpLayerOps *L, const void *cfg, const void *w, float *out, const float *u,
                    const float *ystar, float *cache, float *scratch, int B, int T);
/* Only the solve: ystar:(B,T,E) receives Y*, the iterate the graded steps start from. */
int fp_layer_solve(const FpLayerOps *L, const void *cfg, const void *w, float *ystar, const float *u,
                   const FpSolve *solve, float *scratch, int B, int T);
/* Backward of the last caching forward: du:(B,T,D) +=, dw += (the effective side for W_bc, W_zy
 * and the mixer). */
void fp_layer_bwd(const FpLayerOps *L, const void *cfg, const void *w, void *dw, float *du, const float *dout,
                  const float *u, const float *cache, float *scratch, int B, int T);

/* ---- sequential mode -------------------------------------------------------------------------- */

/* The per-sequence state (zeros = the empty prefix); its layout is the family's (its header). */
size_t fp_layer_state_floats(const FpLayerOps *L, const void *cfg, int B);
size_t fp_layer_step_scratch_floats(const FpLayerOps *L, const void *cfg, int B);
/* One token: u:(B,D) → out:(B,D); state updated in place. The solve sees (B,E) floats, B samples
 * of one token. */
int fp_layer_step(const FpLayerOps *L, const void *cfg, const void *w, float *out, const float *u, float *state,
                  const FpSolve *solve, float *scratch, int B);

#endif
