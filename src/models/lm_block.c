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
#include "../layers/embed.h"
#include "../layers/block.h"
#include "block_params.h"
#include "lm_common.h"

typedef struct {
    BlockCfg bc;
    BlockW *w, *dw;     /* (n_layer) pointers into θ and dθ */
    Arena acts;         /* activations of one training/eval forward */
    LmEnds ends;
    float *z;           /* (n_layer+1, B,T,D) block inputs; z[n_layer] goes to norm_f */
    float *cache;       /* (n_layer, block_cache_floats) */
    float *scratch;
    float *dz, *dz2;    /* (B,T,D) gradient ping-pong */
    float *masks;       /* (n_layer, B, mask floats) variational dropout | NULL */
    size_t cache_per_layer, mask_per_layer;
    Arena st;           /* step state */
    float *state;       /* (n_layer, block_state_floats) */
    float *step_scratch, *zs, *head_scratch;
} BlockLm;

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


static MlpKind mlp_kind_of(const ModelCfg *c, int is_attn) {
    if (c->d_inner <= 0) return MLP_NONE;
    if (!strcmp(c->mlp_type, "swiglu")) return MLP_SWIGLU;
    if (!strcmp(c->mlp_type, "gated")) return MLP_GATED;
    return is_attn ? MLP_SWIGLU : MLP_GATED;   /* "auto": the reference's choice per family */
}

static int build(Model *m, int is_attn) {
    const ModelCfg *c = &m->cfg;
    BlockLm *lm = xcalloc(1, sizeof *lm);
    m->impl = lm;
    MlpKind mk = mlp_kind_of(c, is_attn);
    if (is_attn) {
        AttnCfg ac;
        attn_cfg_init(&ac, c->d_model, c->n_head, (float)c->rope_theta, c->max_seq_len);
        block_cfg_attn(&lm->bc, &ac, mk, c->d_inner, (float)c->norm_eps);
    } else {
        Mamba2Cfg mc;
        mamba2_cfg_init(&mc, c->d_model, c->expand, c->d_state, c->headdim, c->d_conv, (float)c->norm_eps);
        block_cfg_mamba2(&lm->bc, &mc, mk, c->d_inner, (float)c->norm_eps);
    }
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

/* ---- activations ------------------------------------------------------------------------- */
static size_t mask_floats(const BlockCfg *bc, int B) {
    size_t n = (size_t)B * bc->D;                                  /* mixer output */
    if (bc->mlp.kind == MLP_GATED) n += (size_t)B * (bc->mlp.h + bc->D);
    return n;
}

/* A forward that a backward may follow keeps every block's input and cache; a no_grad forward
 * (evaluation, scoring) keeps none of it: one (B,T,D) buffer that the blocks update in place
 * (block_fwd allows that without a cache), so it needs 1/(n_layer+1) of the hidden states and no
 * caches. model_plan re-plans when the flag changes. */
static void carve(Model *m, Arena *a, int B, int T) {
    BlockLm *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    int L = m->cfg.n_layer, keep = !m->no_grad;
    lm_ends_carve(&lm->ends, a, m, B, T);
    lm->z = arena_floats(a, (keep ? (size_t)(L + 1) : 1) * MD);
    lm->cache_per_layer = keep ? block_cache_floats(&lm->bc, B, T) : 0;
    lm->cache = keep ? arena_floats(a, (size_t)L * lm->cache_per_layer) : NULL;
    lm->scratch = arena_floats(a, block_scratch_floats(&lm->bc, B, T));
    lm->dz = keep ? arena_floats(a, MD) : NULL;
    lm->dz2 = keep ? arena_floats(a, MD) : NULL;
    lm->mask_per_layer = mask_floats(&lm->bc, B);
    lm->masks = m->cfg.backbone_dropout > 0 ? arena_floats(a, (size_t)L * lm->mask_per_layer) : NULL;
}

static int plan(Model *m, int B, int T) {
    BlockLm *lm = m->impl;
    bind_all(m);
    if (lm->bc.mixer == MIXER_ATTN && T > m->cfg.max_seq_len)
        return err_set(IM_EINVAL, "sequence length %d exceeds max_seq_len %d", T, m->cfg.max_seq_len);
    int rc = lm_arena_plan(&lm->acts, m, B, T, carve);
    m->act_bytes = lm->acts.cap;
    return rc;
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

static int fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    BlockLm *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    lm_embed_fwd(m, &lm->ends, ids, B, T);
    memcpy(lm->z, lm->ends.x0, MD * sizeof(float));
    if (lm->masks) {
        /* variational masks: one per sequence and channel, shared over time (spec §1.7) */
        float p = (float)m->cfg.backbone_dropout;
        size_t n = (size_t)m->cfg.n_layer * lm->mask_per_layer;
        if (m->training) lm_dropout_mask(&m->rng, lm->masks, n, p);
        else for (size_t i = 0; i < n; i++) lm->masks[i] = 1.0f;
    }
    int keep = lm->cache != NULL;   /* planned without no_grad: see carve */
    for (int l = 0; l < m->cfg.n_layer; l++) {
        BlockMasks bm = layer_masks(lm, l, B);
        float *zin = lm->z + (keep ? (size_t)l * MD : 0), *zout = lm->z + (keep ? (size_t)(l + 1) * MD : 0);
        block_fwd(&lm->bc, &lm->w[l], zout, zin, NULL, &bm, keep ? lm->cache + (size_t)l * lm->cache_per_layer : NULL,
                  lm->scratch, NULL, B, T);
    }
    return lm_head_fwd(m, &lm->ends, lm->z + (keep ? (size_t)m->cfg.n_layer * MD : 0), targets, B, T, loss);
}

static void bwd(Model *m) {
    BlockLm *lm = m->impl;
    CHECK(lm->cache, "model_bwd after a no_grad forward (nothing was kept for the backward)");
    int B = m->B, T = m->T, L = m->cfg.n_layer;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    memset(lm->dz, 0, MD * sizeof(float));
    lm_head_bwd(m, &lm->ends, lm->dz, lm->z + (size_t)L * MD, B, T);
    for (int l = L - 1; l >= 0; l--) {
        BlockMasks bm = layer_masks(lm, l, B);
        memset(lm->dz2, 0, MD * sizeof(float));
        block_bwd(&lm->bc, &lm->w[l], &lm->dw[l], lm->dz2, NULL, lm->dz, lm->z + (size_t)l * MD, NULL, &bm,
                  lm->cache + (size_t)l * lm->cache_per_layer, lm->scratch, B, T);
        float *t = lm->dz; lm->dz = lm->dz2; lm->dz2 = t;
    }
    lm_embed_bwd(m, &lm->ends, lm->dz, B, T);
}

/* ---- token-by-token ------------------------------------------------------------------------ */
static void carve_state(Model *m, Arena *a, int B, int T) {
    (void)T;
    BlockLm *lm = m->impl;
    lm->state = arena_floats(a, (size_t)m->cfg.n_layer * block_state_floats(&lm->bc, B));
    lm->step_scratch = arena_floats(a, block_step_scratch_floats(&lm->bc, B));
    lm->zs = arena_floats(a, (size_t)B * m->cfg.d_model);
    lm->head_scratch = arena_floats(a, (size_t)B * m->cfg.d_model + (size_t)B);
}

static int state_init(Model *m, int B) {
    BlockLm *lm = m->impl;
    bind_all(m);
    int rc = lm_arena_plan(&lm->st, m, B, 1, carve_state);
    if (rc) return rc;
    memset(lm->state, 0, (size_t)m->cfg.n_layer * block_state_floats(&lm->bc, B) * sizeof(float));
    return IM_OK;
}

static int step(Model *m, const int *ids, float *logits) {
    BlockLm *lm = m->impl;
    int B = m->step_B, D = m->cfg.d_model;
    if (lm->bc.mixer == MIXER_ATTN && m->pos >= m->cfg.max_seq_len)
        return err_set(IM_EINVAL, "position %d reaches max_seq_len %d (the KV cache is full)", m->pos,
                       m->cfg.max_seq_len);
    const float *E = model_tensor(m, m->params, EMB_NAME);
    embed_fwd(lm->zs, ids, E, B, m->V, D);   /* ids were validated by model_step */
    size_t per = block_state_floats(&lm->bc, B);
    for (int l = 0; l < m->cfg.n_layer; l++)
        block_step(&lm->bc, &lm->w[l], lm->zs, lm->zs, NULL, lm->state + (size_t)l * per, m->pos, 1,
                   lm->step_scratch, B);
    lm_head_step(m, logits, lm->zs, lm->head_scratch, B);
    return IM_OK;
}

static void free_impl(Model *m) {
    BlockLm *lm = m->impl;
    if (!lm) return;
    arena_free(&lm->acts);
    arena_free(&lm->st);
    free(lm->w);
    free(lm->dw);
    free(lm);
    m->impl = NULL;
}

const ModelType model_mamba2_lm = {"mamba2", MODEL_EXPLICIT, CFG_USE_SSD_HEADS, build_mamba2, plan, fwd, bwd, state_init, step, free_impl, NULL, NULL};
const ModelType model_llama_lm = {"llama", MODEL_EXPLICIT, CFG_USE_ATTN, build_llama, plan, fwd, bwd, state_init, step, free_impl, NULL, NULL};
