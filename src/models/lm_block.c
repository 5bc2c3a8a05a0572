/* lm_block.c: the explicit block-stack language models of spec implicit-lm §1.1:
 * embedding → n_layer pre-norm residual blocks → norm_f → tied head.
 *   mamba2: Mamba2 mixer blocks, no MLP by default (d_inner 0) — "Mamba2 LM"
 *   llama:  attention (RoPE) + SwiGLU blocks                       — "Llama LM"
 * Tensor names are the reference state_dict keys (spec §14); init follows spec §1.8.
 * The implicit (fixed-point) variants reuse the same blocks and live elsewhere.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../layers/embed.h"
#include "../layers/block.h"
#include "block_params.h"
#include "lm_stack.h"

typedef struct {
    LmStack stack;      /* the layer-stack skeleton (lm_stack.h): memory, the layer loops, the ends */
    BlockCfg bc;
    BlockW *w, *dw;     /* (n_layer) pointers into θ and dθ */
    float *masks;       /* (n_layer, B, mask floats) variational dropout | NULL */
    size_t mask_per_layer;
    float *packed;      /* (n_layer, block_pack_floats) the weights packed for a generation | NULL */
} BlockLm;

static const LmLayerOps BLOCK_OPS;

/* ---- parameter table: the lists are in block_params.h (shared with the implicit models) -- */
static size_t add_param(ParamTable *t, int layer, const char *suffix, InitRule init, float a, float b,
                        int decay, int ndim, int d0, int d1, int d2) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "backbone.layers.%d.%s", layer, suffix);
    return ndim == 1   ? ptab_add(t, name, init, a, b, decay, 1, d0)
           : ndim == 2 ? ptab_add(t, name, init, a, b, decay, 2, d0, d1)
                       : ptab_add(t, name, init, a, b, decay, 3, d0, d1, d2);
}

/* Adds layer i's tensors to the table and records their offsets in *off (as float* offsets). */
static void add_layer(Model *m, int i, BlockW *off) {
    BlockLm *lm = m->impl;
    const BlockCfg *bc = &lm->bc;
    ParamTable *t = &m->tab;
    int D = bc->D, Hm = bc->mlp.h, n_res = bc->mlp.kind == MLP_NONE ? 1 : 2;
    /* GPT-2 residual rescale of out_proj / fc2 (spec §1.8) */
    float out_scale = m->cfg.rescale_out_proj != 0 ? 1.0f / sqrtf((float)(n_res * m->cfg.n_layer)) : 1.0f;
#define ADD(member, suffix, init, a, b, decay, nd, d0, d1, d2) \
    off->member = (float *)(uintptr_t)add_param(t, i, suffix, init, a, b, decay, nd, d0, d1, d2);
    off->norm_w = (float *)(uintptr_t)add_param(t, i, "norm.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    if (bc->mixer == MIXER_MAMBA2) {
        int K = bc->mamba2.K, C = bc->mamba2.C, W = bc->mamba2.W, H = bc->mamba2.H, E = bc->mamba2.E;
        MAMBA2_MIXER_PARAMS(ADD)
    } else {
        ATTN_MIXER_PARAMS(ADD)
    }
    if (bc->mlp.kind != MLP_NONE)
        off->norm2_w = (float *)(uintptr_t)add_param(t, i, "norm2.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    if (bc->mlp.kind == MLP_SWIGLU) { SWIGLU_PARAMS(ADD) }
    if (bc->mlp.kind == MLP_GATED) { GATED_MLP_PARAMS(ADD) }
#undef ADD
}


static int build(Model *m, int is_attn) {
    const ModelCfg *c = &m->cfg;
    BlockLm *lm = xcalloc(1, sizeof *lm);
    m->impl = lm;
    lm->stack.ops = &BLOCK_OPS;
    lm->stack.max_len = is_attn ? c->max_seq_len : 0;   /* the KV cache */
    block_cfg_of(&lm->bc, c, is_attn);
    int L = c->n_layer;
    BlockW *off = xcalloc((size_t)L, sizeof *off);
    ptab_add(&m->tab, EMB_NAME, INIT_NORMAL, (float)c->emb_init_std, 0, 0, 2, m->V, c->d_model);
    for (int i = 0; i < L; i++) add_layer(m, i, &off[i]);
    ptab_add(&m->tab, NORM_F_NAME, INIT_ONE, 0, 0, 0, 1, c->d_model);
    lm_head_add(m);
    lm->w = xcalloc((size_t)L, sizeof *lm->w);
    lm->dw = xcalloc((size_t)L, sizeof *lm->dw);
    /* θ and dθ are allocated after build: keep offsets until bind_all */
    memcpy(lm->w, off, (size_t)L * sizeof *off);
    free(off);
    return IM_OK;
}

/* Called lazily, once θ/dθ exist (model_create allocates them after build). */
static void bind_all(Model *m) {
    BlockLm *lm = m->impl;
    if (lm->dw[0].norm_w) return;
    for (int i = 0; i < m->cfg.n_layer; i++) {
        BlockW off = lm->w[i];
        block_params_bind(&lm->w[i], &off, m->params, &lm->bc);
        block_params_bind(&lm->dw[i], &off, m->grads, &lm->bc);
    }
}

static int build_mamba2(Model *m) { return build(m, 0); }
static int build_llama(Model *m) { return build(m, 1); }

/* ---- the layer: one block, with its variational dropout masks -------------------------------- */
static size_t mask_floats(const BlockCfg *bc, int B) {
    size_t n = (size_t)B * bc->D;                                  /* mixer output */
    if (bc->mlp.kind == MLP_GATED) n += (size_t)B * (bc->mlp.h + bc->D);
    return n;
}

/* A no_grad forward keeps no caches: block_fwd without a cache may update its input in place,
 * so the stack needs one (B,T,D) buffer, 1/(n_layer+1) of the hidden states. */
static size_t cache_floats(const Model *m, int B, int T) {
    const BlockLm *lm = m->impl;
    return m->no_grad ? 0 : block_cache_floats(&lm->bc, B, T);
}
static size_t scratch_floats(const Model *m, int B, int T) { return block_scratch_floats(&((const BlockLm *)m->impl)->bc, B, T); }
static size_t state_floats(const Model *m, int B) { return block_state_floats(&((const BlockLm *)m->impl)->bc, B); }
static size_t step_scratch_floats(const Model *m, int B) { return block_step_scratch_floats(&((const BlockLm *)m->impl)->bc, B); }

static void carve_masks(Model *m, Arena *a, int B, int T) {
    (void)T;
    BlockLm *lm = m->impl;
    lm->mask_per_layer = mask_floats(&lm->bc, B);
    lm->masks = m->cfg.backbone_dropout > 0 ? arena_floats(a, (size_t)m->cfg.n_layer * lm->mask_per_layer) : NULL;
}

/* Weights packed for the steps of a generation: one-row products then read them as panels, one
 * stream front to back, where they otherwise stream each weight row in place as S runs of rows.
 * Measured on Zen 4 (AVX-512, one thread, `bench_lm`, four pairs alternated with the unpacked
 * steps): lm_llama_gen +6-9%, lm_mamba2_gen +5-8% (3-5 MB of weights, read from L3 every token);
 * with the stories15M shapes (24 MB of block weights next to a 37 MB classifier, read mostly from
 * memory) level, where the packs would take 48 MB. So only models whose packs stay under
 * GEN_PACK_MAX_FLOATS (both forms, linear.h: twice the weights), and only in builds that read
 * one-row products x W^T from panels (AVX-512; elsewhere the pack serves them nothing). The packs
 * follow θ at state init; a forward that keeps caches for a backward drops them (an update may
 * follow it), an evaluation forward (no_grad) keeps them. Steps after an update need a new state
 * init, as the other families' derived weights do. */
#define GEN_PACK_MAX_FLOATS ((size_t)8 << 20) /* 32 MiB */

static void begin_steps(Model *m, int B) {
    (void)B;
    BlockLm *lm = m->impl;
    size_t per = block_pack_floats(&lm->bc), L = (size_t)m->cfg.n_layer;
    if (!k_gemm_pb_row_panels(m->cfg.d_model, 1) || per * L > GEN_PACK_MAX_FLOATS) return;
    if (!lm->packed) lm->packed = xmalloc(per * L * sizeof(float));
    for (size_t l = 0; l < L; l++) block_pack(&lm->bc, &lm->w[l], lm->packed + per * l);
}

static void drop_packs(Model *m) {
    BlockLm *lm = m->impl;
    if (!lm->packed) return;
    for (int l = 0; l < m->cfg.n_layer; l++) block_pack(&lm->bc, &lm->w[l], NULL);
}

/* Before a forward: the packs go unless it is an evaluation forward (see begin_steps), and the
 * variational masks are drawn, one per sequence and channel, shared over time (spec §1.7). */
static void begin_fwd(Model *m, int B, int T) {
    (void)B, (void)T;
    BlockLm *lm = m->impl;
    if (!m->no_grad) drop_packs(m);
    if (!lm->masks) return;
    float p = (float)m->cfg.backbone_dropout;
    size_t n = (size_t)m->cfg.n_layer * lm->mask_per_layer;
    if (m->training) lm_dropout_mask(&m->rng, lm->masks, n, p);
    else for (size_t i = 0; i < n; i++) lm->masks[i] = 1.0f;
}

static BlockMasks layer_masks(const BlockLm *lm, int l, int B) {
    BlockMasks bm = {0};
    if (!lm->masks) return bm;
    float *p = lm->masks + (size_t)l * lm->mask_per_layer;
    bm.mixer = p;
    if (lm->bc.mlp.kind == MLP_GATED) {
        bm.mlp_h = p + (size_t)B * lm->bc.D;
        bm.mlp_o = p + (size_t)B * (lm->bc.D + lm->bc.mlp.h);
    }
    return bm;
}

static int layer_fwd(Model *m, int l, float *y, const float *x, float *cache, float *scratch, int B, int T) {
    BlockLm *lm = m->impl;
    BlockMasks bm = layer_masks(lm, l, B);
    block_fwd(&lm->bc, &lm->w[l], y, x, NULL, &bm, cache, scratch, NULL, B, T);
    return IM_OK;
}

static void layer_bwd(Model *m, int l, float *dx, const float *dy, const float *x, const float *cache, float *scratch,
                      int B, int T) {
    BlockLm *lm = m->impl;
    BlockMasks bm = layer_masks(lm, l, B);
    block_bwd(&lm->bc, &lm->w[l], &lm->dw[l], dx, NULL, dy, x, NULL, &bm, cache, scratch, B, T);
}

static int layer_step(Model *m, int l, float *y, const float *x, float *state, float *scratch, int B) {
    BlockLm *lm = m->impl;
    block_step(&lm->bc, &lm->w[l], y, x, NULL, state, m->pos, 1, scratch, B);
    return IM_OK;
}

static void release(Model *m) {
    BlockLm *lm = m->impl;
    free(lm->packed);
    free(lm->w);
    free(lm->dw);
}

static const LmLayerOps BLOCK_OPS = {cache_floats, scratch_floats, state_floats, step_scratch_floats, 1, bind_all,
                                     carve_masks, begin_fwd, layer_fwd, layer_bwd, layer_step, release, begin_steps};


const ModelType model_mamba2_lm = LM_STACK_TYPE("mamba2", MODEL_EXPLICIT, CFG_USE_SSD_HEADS, build_mamba2);
const ModelType model_llama_lm = LM_STACK_TYPE("llama", MODEL_EXPLICIT, CFG_USE_ATTN, build_llama);
