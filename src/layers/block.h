/* block.h: the pre-norm residual block of spec implicit-lm §1.3, generic over its mixer and MLP.
 *
 *   z1 = z  + Mixer(RMSNorm1(z), u)          mixer: Mamba2 (§1.4) or attention (§1.5)
 *   z2 = z1 + MLP(RMSNorm2(z1))              only when the block has an MLP (§1.6)
 * u is the implicit model's injection (§2.1), (B,T,K) for Mamba2 and (B,T,3D) for attention
 * (block_u_dim; in rows or in the mixer's parts, block_set_u_parts), or NULL for an explicit
 * model. Dropout (§1.7): the caller samples variational masks once per model forward and passes
 * them through BlockMasks; the step path uses none.
 *
 * Memory (STYLE §8.3), all by composition of the parts' own *_floats:
 *   cache   rstd1 (M) | xn1 (M,D) | mixer cache | [z1 (M,D) | rstd2 (M) | xn2 (M,D) | MLP cache]
 *           with M = B*T; NULL = no-grad forward (the solver's inner iterations).
 *   scratch two (M,D) buffers + the larger of the mixer's and the MLP's scratch.
 *   state   the mixer's (Mamba2 conv + SSM state, or the attention KV cache); the norms
 *           and the MLP have none.
 * Step commit semantics (§4.1): block_step(..., commit = 0) reads the state and leaves it
 * unchanged (inner iterations of sequential mode); commit = 1 advances it in place.
 * Out of scope: post-norm blocks (pre_norm = false, unused), embedding dropout, weight norm (the
 * model refreshes effective weights before the forward, linear.h).
 */
#ifndef IMPLICIT_LAYERS_BLOCK_H
#define IMPLICIT_LAYERS_BLOCK_H

#include <stddef.h>

#include "attention.h"
#include "mamba2.h"
#include "mlp.h"
#include "../core/rng.h"

typedef enum { MIXER_MAMBA2 = 0, MIXER_ATTN = 1 } MixerKind;

typedef struct {
    MixerKind mixer;
    int D;           /* model width (equals the mixer's D) */
    float eps;       /* eps of the two pre-norms (1e-5) */
    Mamba2Cfg mamba2; /* used when mixer == MIXER_MAMBA2 */
    AttnCfg attn;     /* used when mixer == MIXER_ATTN */
    MlpCfg mlp;       /* mlp.kind == MLP_NONE: no MLP, no norm2 */
} BlockCfg;

/* Weights; the dW struct has the same layout (NULL members = not wanted). Only the mixer struct
 * of cfg.mixer is read. */
typedef struct {
    float *norm_w;  /* (D) pre-norm of the mixer */
    Mamba2W mamba2;
    AttnW attn;
    float *norm2_w; /* (D) pre-norm of the MLP | NULL when no MLP */
    MlpW mlp;
} BlockW;

/* Variational dropout masks, values {0, 1/(1-p)}, shared over time; NULL members = none.
 * `mixer` is only supported for Mamba2 (REF's attention has no variational dropout). */
typedef struct {
    const float *mixer; /* (B, D) on the mixer output */
    const float *mlp_h; /* (B, h) on the gated MLP hidden */
    const float *mlp_o; /* (B, D) on the gated MLP output */
} BlockMasks;

/* Configs: copy the mixer cfg, build the MLP cfg from the backbone d_inner (<= 0: no MLP). */
void block_cfg_mamba2(BlockCfg *c, const Mamba2Cfg *m, MlpKind mlp, int d_inner, float eps);
void block_cfg_attn(BlockCfg *c, const AttnCfg *a, MlpKind mlp, int d_inner, float eps);
/* Width of one token of the injection u: K (Mamba2) or 3D (attention). */
int block_u_dim(const BlockCfg *c);

/* The injection's layout. By default u and du are rows, (B,T,block_u_dim) row-major. With
 * block_set_u_parts(c, 1) they are in the mixer's parts: Mamba2's five in_proj row blocks, or
 * attention's u_q | u_k | u_v, part p a contiguous (M, n_p) array after the parts before it
 * (Mamba2Cfg.u_parts, AttnCfg.u_parts), for block_fwd, block_bwd and the step alike (M = B T,
 * or B). A caller that keeps u over many calls (an implicit model's solver) converts it once:
 *   block_u_parts: the widths n_p (at most BLOCK_U_PARTS), returns their number;
 *   block_u_to_parts: dst (parts) = u (rows), M rows;  block_u_to_rows: dst (rows) = src (parts). */
enum { BLOCK_U_PARTS = 5 };
void block_set_u_parts(BlockCfg *c, int on);
int block_u_parts(const BlockCfg *c, int n[BLOCK_U_PARTS]);
void block_u_to_parts(const BlockCfg *c, float *dst, const float *u, size_t M);
void block_u_to_rows(const BlockCfg *c, float *dst, const float *src, size_t M);

size_t block_cache_floats(const BlockCfg *c, int B, int T);
size_t block_scratch_floats(const BlockCfg *c, int B, int T);
size_t block_state_floats(const BlockCfg *c, int B);
size_t block_step_scratch_floats(const BlockCfg *c, int B);

/* Weights packed once (linear.h): the mixer's and the MLP's projections, for a caller that runs
 * the block many times on unchanged weights (the iterations of a fixed-point solve, its relaxed
 * steps and its backward; a generation). block_pack fills `packed` (block_pack_floats) from w and
 * points w's packed members at it; packed = NULL detaches them. Pack again after w changes. */
size_t block_pack_floats(const BlockCfg *c);
void block_pack(const BlockCfg *c, BlockW *w, float *packed);

/* z_out = Block(z, u)   z,z_out:(B,T,D) (z_out may alias z only when cache is NULL: the backward
 * needs z).  u:(B,T,block_u_dim)|NULL.  masks|NULL.  cache:(block_cache_floats)|NULL.
 * scratch:(block_scratch_floats).  state_out:(block_state_floats)|NULL: prefill of the mixer
 * state from this sequence (positions 0..T-1), as the mixer's own prefill does. */
void block_fwd(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
               const BlockMasks *masks, float *cache, float *scratch, float *state_out, int B,
               int T);
/* Accumulates dz += dz_out dBlock/dz, du += ..., dW->* += ...  (dW, dz, du and any dW member may be
 * NULL). dz_out:(B,T,D); z, u, masks and cache exactly as given to / filled by block_fwd. */
void block_bwd(const BlockCfg *c, const BlockW *w, BlockW *dW, float *dz, float *du,
               const float *dz_out, const float *z, const float *u, const BlockMasks *masks,
               const float *cache, float *scratch, int B, int T);
/* One token per sequence at position pos:  z_out:(B,D) written (may alias z)  z:(B,D)
 * u:(B,block_u_dim)|NULL.  state:(block_state_floats) holds positions 0..pos-1; commit = 1 advances
 * it to include this token, commit = 0 leaves it untouched. pos is used by attention (RoPE and
 * the KV slot) and ignored by Mamba2. No dropout. scratch:(block_step_scratch_floats). */
/* Noise injection in the step path (spec §7, Mamba2 blocks only): latent noise on the mixer input
 * at every call, state noise on the conv and SSM states after each committed update. */
typedef struct {
    float latent_db, state_db;  /* SNR in dB; <= 0 = off */
    int multiplicative;         /* 1: x(1+n); 0: x + n */
    Rng *rng;
} BlockNoise;

/* block_step with optional noise (NULL = none, identical to block_step). */
void block_step_noisy(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
                      float *state, int pos, int commit, float *scratch, int B, const BlockNoise *noise);
void block_step(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
                float *state, int pos, int commit, float *scratch, int B);

#endif
