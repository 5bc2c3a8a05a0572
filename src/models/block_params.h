/* block_params.h: the tensors of one pre-norm block, listed once per mixer / MLP kind, with the
 * reference state_dict suffixes (spec implicit-lm §14) and init rules (§1.8). Used by the explicit
 * block LMs (lm_block.c) and the implicit LMs (implicit_lm.c), which weight-normalise the entries
 * with decay = 1 (every Linear / Conv1d weight).
 *
 * X(member, name suffix, init, a, b, decay, ndim, d0, d1, d2); the expressions may use D, K, C,
 * W, H, E (Mamba2), Hm (MLP hidden) and out_scale (GPT-2 residual rescale) from the caller.
 */
#ifndef IMPLICIT_BLOCK_PARAMS_H
#define IMPLICIT_BLOCK_PARAMS_H

#include <stdint.h>
#include <string.h>

#include "../layers/block.h"
#include "config.h"

#define MAMBA2_MIXER_PARAMS(X)                                                                 \
    X(mamba2.in_proj, "mixer.in_proj.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, K, D, 0)    \
    X(mamba2.conv_w, "mixer.conv1d.weight", INIT_UNIFORM, 1 / sqrtf(W), 0, 1, 3, C, 1, W)      \
    X(mamba2.conv_b, "mixer.conv1d.bias", INIT_UNIFORM, 1 / sqrtf(W), 0, 0, 1, C, 0, 0)        \
    X(mamba2.dt_bias, "mixer.dt_bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, H, 0, 0)               \
    X(mamba2.A_log, "mixer.A_log", INIT_A_LOG, 1, 16, 0, 1, H, 0, 0)                           \
    X(mamba2.Dskip, "mixer.D", INIT_ONE, 0, 0, 0, 1, H, 0, 0)                                  \
    X(mamba2.norm_w, "mixer.norm.weight", INIT_ONE, 0, 0, 0, 1, E, 0, 0)                       \
    X(mamba2.out_proj, "mixer.out_proj.weight", INIT_UNIFORM, out_scale / sqrtf(E), 0, 1, 2, D, E, 0)
#define ATTN_MIXER_PARAMS(X)                                                                   \
    X(attn.wq, "mixer.wq.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, D, D, 0)                \
    X(attn.wk, "mixer.wk.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, D, D, 0)                \
    X(attn.wv, "mixer.wv.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, D, D, 0)                \
    X(attn.wo, "mixer.out_proj.weight", INIT_UNIFORM, out_scale / sqrtf(D), 0, 1, 2, D, D, 0)
#define SWIGLU_PARAMS(X)                                                                       \
    X(mlp.w1, "mlp.w1.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, Hm, D, 0)                  \
    X(mlp.w3, "mlp.w3.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, Hm, D, 0)                  \
    X(mlp.fc2, "mlp.fc2.weight", INIT_UNIFORM, out_scale / sqrtf(Hm), 0, 1, 2, D, Hm, 0)
#define GATED_MLP_PARAMS(X)                                                                    \
    X(mlp.fc1, "mlp.fc1.weight", INIT_UNIFORM, 1 / sqrtf(D), 0, 1, 2, 2 * Hm, D, 0)            \
    X(mlp.fc2, "mlp.fc2.weight", INIT_UNIFORM, out_scale / sqrtf(Hm), 0, 1, 2, D, Hm, 0)

/* Turn a BlockW whose members hold offsets (cast to pointers while a table is built) into
 * pointers into the block `base`; members the block kind does not have stay NULL. */
static inline void block_params_bind(BlockW *w, const BlockW *off, float *base, const BlockCfg *bc) {
#define BLOCK_PARAMS_BIND(member, ...) w->member = base + (size_t)(uintptr_t)off->member;
    memset(w, 0, sizeof *w);
    w->norm_w = base + (size_t)(uintptr_t)off->norm_w;
    if (bc->mixer == MIXER_MAMBA2) { MAMBA2_MIXER_PARAMS(BLOCK_PARAMS_BIND) } else { ATTN_MIXER_PARAMS(BLOCK_PARAMS_BIND) }
    if (bc->mlp.kind != MLP_NONE) w->norm2_w = base + (size_t)(uintptr_t)off->norm2_w;
    if (bc->mlp.kind == MLP_SWIGLU) { SWIGLU_PARAMS(BLOCK_PARAMS_BIND) }
    if (bc->mlp.kind == MLP_GATED) { GATED_MLP_PARAMS(BLOCK_PARAMS_BIND) }
#undef BLOCK_PARAMS_BIND
}


/* The block of a block-stack LM from its config: Mamba2 or attention (RoPE, KV cache of
 * max_seq_len) mixer, then the MLP of d_inner, whose "auto" kind is the reference's choice per
 * family (SwiGLU with attention, gated with Mamba2). */
static inline void block_cfg_of(BlockCfg *bc, const ModelCfg *c, int is_attn) {
    MlpKind mk = c->d_inner <= 0                  ? MLP_NONE
                 : !strcmp(c->mlp_type, "swiglu") ? MLP_SWIGLU
                 : !strcmp(c->mlp_type, "gated")  ? MLP_GATED
                 : is_attn                        ? MLP_SWIGLU
                                                  : MLP_GATED;
    if (is_attn) {
        AttnCfg ac;
        attn_cfg_init(&ac, c->d_model, c->n_head, (float)c->rope_theta, c->max_seq_len);
        block_cfg_attn(bc, &ac, mk, c->d_inner, (float)c->norm_eps);
    } else {
        Mamba2Cfg mc;
        mamba2_cfg_init(&mc, c->d_model, c->expand, c->d_state, c->headdim, c->d_conv, (float)c->norm_eps);
        block_cfg_mamba2(bc, &mc, mk, c->d_inner, (float)c->norm_eps);
    }
}

#endif
