/* lm_resid.c: the residual-stream LM of spec fp-rnn §3.4 with pluggable mixers (lm_resid.h), and
 * its first mixer kind, Mamba-1 (spec §5.2, init §3.1/§3.4).
 *
 * An explicit stack family of lm_stack.h whose layer is y = x + Mixer_l(Norm_l(x)). The layer's
 * cache holds the normed mixer input, the norm's rstd and the mixer's cache; the mixer writes
 * straight into y and x is added on top. Its backward passes dy through the identity path and
 * adds the norm's backward of the mixer's d(normed input).
 * Weight decay (spec §4.1, word problem & LM groups): none for biases, norms, A_log, D, dt bias;
 * every other tensor decays, the embedding included.
 */
#include "lm_resid.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../layers/mamba1.h"
#include "../layers/blocknorm.h"
#include "lm_stack.h"

/* The mixer kinds, looked up by cfg.model. */
static const LmMixerKind *const KINDS[] = {&lm_mixer_mamba1, &lm_mixer_fp_mamba, &lm_mixer_fp_mamba2, &lm_mixer_fp_rnn};

typedef struct {
    LmStack stack;             /* the layer-stack skeleton (lm_stack.h) */
    const LmMixerKind *kind;
    void *kcfg;                /* the kind's hyperparameters */
    char *w_off, *w, *dw;      /* (n_layer) weight structs: offsets, into θ, into dθ */
    BlockNormType nt;          /* cfg.norm_type: RMSNorm or LayerNorm blocks and norm_f */
    size_t *norm_off;          /* (n_layer) offsets of backbone.layers.<l>.norm.weight */
    size_t *norm_b_off;        /* (n_layer) offsets of backbone.layers.<l>.norm.bias (layernorm) */
    double *layer_stat;        /* (2 n_layer) per-layer diagnostics of the kinds (LmMixCtx) */
    int bound;
} LmResid;

static const LmLayerOps RESID_OPS;

static void *wl(const LmResid *lm, char *base, int l) { return base + (size_t)l * lm->kind->w_size; }

static LmMixCtx ctx_of(Model *m, int l) {
    LmResid *lm = m->impl;
    return (LmMixCtx){m, lm->kcfg, l, lm->layer_stat};
}

/* ---- build, bind, init ------------------------------------------------------------------------ */

static int build(Model *m) {
    const ModelCfg *c = &m->cfg;
    const LmMixerKind *kind = NULL;
    for (size_t k = 0; k < sizeof KINDS / sizeof *KINDS; k++)
        if (!strcmp(KINDS[k]->name, c->model)) kind = KINDS[k];
    if (!kind) return err_set(IM_EINVAL, "lm_resid: no mixer kind for model '%s'", c->model);
    LmResid *lm = xcalloc(1, sizeof *lm);
    m->impl = lm;
    lm->stack.ops = &RESID_OPS;
    lm->kind = kind;
    int rc = kind->init(&lm->kcfg, c);
    if (rc) return rc;
    int L = c->n_layer, D = c->d_model;
    lm->w_off = xcalloc((size_t)L, kind->w_size);
    lm->w = xcalloc((size_t)L, kind->w_size);
    lm->dw = xcalloc((size_t)L, kind->w_size);
    lm->nt = lm_norm_type(m);
    lm->norm_off = xcalloc((size_t)L, sizeof *lm->norm_off);
    lm->norm_b_off = xcalloc((size_t)L, sizeof *lm->norm_b_off);
    lm->layer_stat = xcalloc(2 * (size_t)L, sizeof *lm->layer_stat);
    ptab_add(&m->tab, EMB_NAME, INIT_NORMAL, (float)c->emb_init_std, 0, 1, 2, m->V, D);
    char name[PARAM_NAME_LEN];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "backbone.layers.%d.norm.weight", l);
        lm->norm_off[l] = ptab_add(&m->tab, name, INIT_ONE, 0, 0, 0, 1, D);
        if (blocknorm_has_bias(lm->nt)) {
            snprintf(name, sizeof name, "backbone.layers.%d.norm.bias", l);
            lm->norm_b_off[l] = ptab_add(&m->tab, name, INIT_ZERO, 0, 0, 0, 1, D);
        }
        kind->add_params(lm->kcfg, c, &m->tab, l, wl(lm, lm->w_off, l));
    }
    ptab_add(&m->tab, NORM_F_NAME, INIT_ONE, 0, 0, 0, 1, D);
    if (blocknorm_has_bias(lm->nt)) ptab_add(&m->tab, NORM_F_BIAS_NAME, INIT_ZERO, 0, 0, 0, 1, D);
    lm_head_add(m);
    return IM_OK;
}

/* θ and dθ exist only after build (model_create): bind lazily. */
static void bind_all(Model *m) {
    LmResid *lm = m->impl;
    if (lm->bound) return;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        lm->kind->bind(lm->kcfg, wl(lm, lm->w, l), wl(lm, lm->w_off, l), &m->tab, m->params);
        lm->kind->bind(lm->kcfg, wl(lm, lm->dw, l), wl(lm, lm->w_off, l), &m->tab, m->grads);
    }
    lm->bound = 1;
}

static void post_init_all(Model *m) {
    LmResid *lm = m->impl;
    bind_all(m);
    if (!lm->kind->post_init) return;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        LmMixCtx x = ctx_of(m, l);
        lm->kind->post_init(&x, wl(lm, lm->w, l));
    }
}

/* Before a forward and after state init: the kinds' derived weights follow θ. */
static void prepare_all(Model *m) {
    LmResid *lm = m->impl;
    if (!lm->kind->prepare) return;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        LmMixCtx x = ctx_of(m, l);
        lm->kind->prepare(&x, wl(lm, lm->w, l));
    }
}

static void begin_fwd(Model *m, int B, int T) {
    (void)B;
    (void)T;
    prepare_all(m);
}

/* steps reuse the refreshed weights: re-init the state after an update */
static void begin_steps(Model *m, int B) {
    (void)B;
    prepare_all(m);
}

static float *norm_w(const Model *m, float *base, int l) {
    const LmResid *lm = m->impl;
    return base + lm->norm_off[l];
}

/* layer l's norm bias in base (θ or dθ); NULL for RMSNorm */
static float *norm_b(const Model *m, float *base, int l) {
    const LmResid *lm = m->impl;
    return blocknorm_has_bias(lm->nt) ? base + lm->norm_b_off[l] : NULL;
}

/* ---- the layer -------------------------------------------------------------------------------- */
/* One layer's cache: the normed mixer input (B,T,D), the norm's cache, the mixer's cache, each
 * on whole lines. Kept even without a backward: the mixer reads its input and fills its cache. */
typedef struct {
    float *xn, *rstd, *mix;
} ResidCache;

static ResidCache cache_at(const Model *m, float *cache, int B, int T) {
    const LmResid *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    float *rstd = cache + lm_floats_up(MD);
    return (ResidCache){cache, rstd, rstd + lm_floats_up(blocknorm_cache_floats(lm->nt, B * T))};
}

static size_t cache_floats(const Model *m, int B, int T) {
    const LmResid *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    return lm_floats_up(MD) + lm_floats_up(blocknorm_cache_floats(lm->nt, B * T)) +
           lm->kind->cache_floats(lm->kcfg, B, T);
}

/* the mixer's scratch, then (for a backward) its d(normed input) (B,T,D) */
static size_t scratch_floats(const Model *m, int B, int T) {
    const LmResid *lm = m->impl;
    size_t dxn = m->no_grad ? 0 : (size_t)B * T * m->cfg.d_model;
    return lm_floats_up(lm->kind->scratch_floats(lm->kcfg, B, T)) + dxn;
}

static size_t state_floats(const Model *m, int B) {
    const LmResid *lm = m->impl;
    return lm->kind->state_floats(lm->kcfg, B);
}

/* the normed token (B,D), then the mixer's step scratch */
static size_t step_scratch_floats(const Model *m, int B) {
    const LmResid *lm = m->impl;
    return lm_floats_up((size_t)B * m->cfg.d_model) + lm->kind->step_scratch_floats(lm->kcfg, B);
}

static int layer_fwd(Model *m, int l, float *y, const float *x, float *cache, float *scratch, int B, int T) {
    LmResid *lm = m->impl;
    const int D = m->cfg.d_model, M = B * T;
    ResidCache c = cache_at(m, cache, B, T);
    blocknorm_fwd(lm->nt, c.xn, c.rstd, x, norm_w(m, m->params, l), norm_b(m, m->params, l), M, D,
                  (float)m->cfg.norm_eps);
    LmMixCtx ctx = ctx_of(m, l);
    int rc = lm->kind->fwd(&ctx, wl(lm, lm->w, l), y, c.xn, c.mix, scratch, B, T);
    if (rc) return rc;
    k_axpby(y, 1.f, x, 1.f, (size_t)M * D); /* r_{l+1} = r_l + Mixer(Norm(r_l)) */
    return IM_OK;
}

static void layer_bwd(Model *m, int l, float *dx, const float *dy, const float *x, const float *cache, float *scratch,
                      int B, int T) {
    LmResid *lm = m->impl;
    const int D = m->cfg.d_model, M = B * T;
    const size_t MD = (size_t)M * D;
    ResidCache c = cache_at(m, (float *)cache, B, T);
    float *dxn = scratch + lm_floats_up(lm->kind->scratch_floats(lm->kcfg, B, T));
    k_zero(dxn, MD);
    LmMixCtx ctx = ctx_of(m, l);
    lm->kind->bwd(&ctx, wl(lm, lm->w, l), wl(lm, lm->dw, l), dxn, dy, c.xn, c.mix, scratch, B, T);
    k_axpby(dx, 1.f, dy, 1.f, MD); /* the identity path; the norm adds d(Norm_l) */
    blocknorm_bwd(lm->nt, dx, norm_w(m, m->grads, l), norm_b(m, m->grads, l), dxn, x, norm_w(m, m->params, l),
                  c.rstd, M, D);
}

static int layer_step(Model *m, int l, float *y, const float *x, float *state, float *scratch, int B) {
    LmResid *lm = m->impl;
    const int D = m->cfg.d_model;
    float *xn = scratch;
    blocknorm_fwd(lm->nt, xn, NULL, x, norm_w(m, m->params, l), norm_b(m, m->params, l), B, D,
                  (float)m->cfg.norm_eps);
    LmMixCtx ctx = ctx_of(m, l);
    int rc = lm->kind->step(&ctx, wl(lm, lm->w, l), y, xn, state, scratch + lm_floats_up((size_t)B * D), B);
    if (rc) return rc;
    k_axpby(y, 1.f, x, 1.f, (size_t)B * D);
    return IM_OK;
}

static void release(Model *m) {
    LmResid *lm = m->impl;
    if (lm->bound && lm->kind->unbind)
        for (int l = 0; l < m->cfg.n_layer; l++) {
            lm->kind->unbind(lm->kcfg, wl(lm, lm->w, l));
            lm->kind->unbind(lm->kcfg, wl(lm, lm->dw, l));
        }
    if (lm->kcfg) lm->kind->free_cfg(lm->kcfg);
    free(lm->w_off);
    free(lm->w);
    free(lm->dw);
    free(lm->norm_off);
    free(lm->norm_b_off);
    free(lm->layer_stat);
}

/* y cannot be x: the mixer writes y while x is still to be added */
static const LmLayerOps RESID_OPS = {cache_floats, scratch_floats, state_floats, step_scratch_floats, 0, bind_all,
                                     NULL, begin_fwd, layer_fwd, layer_bwd, layer_step, release, begin_steps};

#define LM_RESID_TYPE(name, family, uses)                                                                   \
    {name, family, uses, build, lm_stack_plan, lm_stack_fwd, lm_stack_bwd, lm_stack_state_init, lm_stack_step, \
     lm_stack_free_impl, post_init_all, NULL}

const ModelType model_mamba1_lm = LM_RESID_TYPE("mamba1", MODEL_EXPLICIT, CFG_USE_SCAN | CFG_USE_NORM_TYPE);
const ModelType model_fp_mamba_lm = LM_RESID_TYPE("fp_mamba", MODEL_FP_RNN, CFG_USE_SCAN | CFG_USE_NORM_TYPE);
const ModelType model_fp_mamba2_lm = LM_RESID_TYPE("fp_mamba2", MODEL_FP_RNN, CFG_USE_SCAN | CFG_USE_NORM_TYPE | CFG_USE_SSD_HEADS);
const ModelType model_fp_rnn_lm = LM_RESID_TYPE("fp_rnn", MODEL_FP_RNN, CFG_USE_SCAN | CFG_USE_NORM_TYPE);

/* ==== mixer kind "mamba1" (layers/mamba1.h) ======================================================
 * X(member, name suffix, init, a, b, decay, ndim, d0, d1, d2) with D, E, N, R, W, K from the
 * Mamba1Cfg and out_scale the §3.4 rescale of out_proj.weight. A_log's S4D-real rule
 * A_log[i,j] = ln(j+1) has no table rule: it is written by post_init. */
#define MAMBA1_PARAMS(X)                                                                         \
    X(in_proj, "in_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 0, 1, 2, 2 * E, D, 0)       \
    X(conv_w, "conv1d.weight", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 1, 3, E, 1, W)             \
    X(conv_b, "conv1d.bias", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 0, 1, E, 0, 0)               \
    X(x_proj, "x_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, K, E, 0)             \
    X(dt_proj, "dt_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)R), 0, 1, 2, E, R, 0)           \
    X(dt_bias, "dt_proj.bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, E, 0, 0)                        \
    X(A_log, "A_log", INIT_ZERO, 0, 0, 0, 2, E, N, 0)                                           \
    X(Dskip, "D", INIT_ONE, 0, 0, 0, 1, E, 0, 0)                                                \
    X(out_proj, "out_proj.weight", INIT_UNIFORM, out_scale / sqrtf((float)E), 0, 1, 2, D, E, 0)

static int m1_init(void **cfg, const ModelCfg *c) {
    if (c->short_conv == 0)
        return err_set(IM_EINVAL, "config key 'short_conv': mamba1 always has its causal conv (use 1 or -1)");
    if (c->backbone_dropout > 0)
        return err_set(IM_EINVAL, "config key 'backbone_dropout': not supported by mamba1 (use 0)");
    Mamba1Cfg *mc = xcalloc(1, sizeof *mc);
    mamba1_cfg_init(mc, c->d_model, c->expand, c->d_state, c->dt_rank, c->d_conv);
    *cfg = mc;
    return IM_OK;
}

static void m1_free_cfg(void *cfg) { free(cfg); }

static size_t add_mixer_param(ParamTable *t, int layer, const char *suffix, InitRule init, float a, float b,
                              int decay, int ndim, int d0, int d1, int d2) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "backbone.layers.%d.mixer.%s", layer, suffix);
    return ndim == 1   ? ptab_add(t, name, init, a, b, decay, 1, d0)
           : ndim == 2 ? ptab_add(t, name, init, a, b, decay, 2, d0, d1)
                       : ptab_add(t, name, init, a, b, decay, 3, d0, d1, d2);
}

static void m1_add_params(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off) {
    const Mamba1Cfg *mc = cfg;
    Mamba1W *off = w_off;
    const int D = mc->D, E = mc->E, N = mc->N, R = mc->R, W = mc->W, K = mc->K;
    /* §3.4: out_proj.weight re-drawn U(±1/√fan_in) / √n_layer (rescale_out_proj -1 = as the reference) */
    const float out_scale = c->rescale_out_proj != 0 ? 1.0f / sqrtf((float)c->n_layer) : 1.0f;
#define ADD(member, suffix, init, a, b, decay, nd, d0, d1, d2) \
    off->member = LM_OFF(add_mixer_param(t, layer, suffix, init, a, b, decay, nd, d0, d1, d2));
    MAMBA1_PARAMS(ADD)
#undef ADD
}

static void m1_bind(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base) {
    (void)cfg;
    (void)t;
    Mamba1W *p = w;
    const Mamba1W *off = w_off;
#define BIND(member, ...) p->member = LM_AT(base, off->member);
    MAMBA1_PARAMS(BIND)
#undef BIND
}

static void m1_post_init(const LmMixCtx *x, void *w) {
    const Mamba1Cfg *mc = x->cfg;
    Mamba1W *p = w;
    for (int i = 0; i < mc->E; i++) /* S4D-real: A[i,j] = -(j+1) */
        for (int j = 0; j < mc->N; j++) p->A_log[(size_t)i * mc->N + j] = logf((float)(j + 1));
}

static size_t m1_cache(const void *cfg, int B, int T) { return mamba1_cache_floats(cfg, B, T); }
static size_t m1_scratch(const void *cfg, int B, int T) { return mamba1_scratch_floats(cfg, B, T); }
static size_t m1_state(const void *cfg, int B) { return mamba1_state_floats(cfg, B); }
static size_t m1_step_scratch(const void *cfg, int B) { return mamba1_step_scratch_floats(cfg, B); }

static int m1_fwd(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache, float *scratch,
                  int B, int T) {
    mamba1_fwd(x->cfg, w, y, xin, cache, scratch, NULL, B, T);
    return IM_OK;
}

static void m1_bwd(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy, const float *xin,
                   const float *cache, float *scratch, int B, int T) {
    mamba1_bwd(x->cfg, w, dw, dx, dy, xin, cache, scratch, B, T);
}

static int m1_step(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state, float *scratch,
                   int B) {
    mamba1_step(x->cfg, w, y, xin, state, state, scratch, B);
    return IM_OK;
}

const LmMixerKind lm_mixer_mamba1 = {
    "mamba1",      sizeof(Mamba1W), m1_init,  m1_free_cfg, m1_add_params, m1_bind, NULL,
    m1_post_init,  NULL,            m1_cache, m1_scratch,  m1_state,      m1_step_scratch,
    m1_fwd,        m1_bwd,          m1_step,
};
