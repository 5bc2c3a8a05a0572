/* lm_delta.c: the DeltaNet-family language models of spec fp-rnn §5.4 / §5.5 (FLA's
 * GatedDeltaNet / GatedDeltaProduct / DeltaNet LMs):
 *   embedding -> n_layer x [ r += mixer(RMSNorm(r));  r += SwiGLU(RMSNorm2(r)) ] -> norm_f
 *   -> UNTIED linear head (lm_head.weight, no bias)
 *   gated_deltanet: forget gate + output gate (layers/deltanet.h, gated = 1)
 *   deltanet:       neither gate
 * n_householder > 1 turns either into (Gated) DeltaProduct; allow_neg_eigval picks beta = 2 sigma
 * (1) or sigma (0); short_conv -1 (default) = on, with d_conv taps.
 * Widths: heads n_head, key head dim delta_head_dim, value head dim expand_v * delta_head_dim.
 * MLP hidden: d_inner = 0 -> FLA's 256 ceil(floor(8 d_model / 3) / 256) (1536 for d_model 512);
 * d_inner > 0 -> the project's SwiGLU convention floor(2 d_inner / 3).
 *
 * Tensor names: the project's (word_emb.emb.weight, backbone.layers.{i}.norm / norm2 / mlp.w1 /
 * w3 / fc2, backbone.norm_f.weight) so the shared embedding code, the trainer's weight-decay
 * rules and checkpoint tooling apply unchanged; inside the mixer FLA's names
 * (backbone.layers.{i}.mixer.q_proj.weight, k_proj, v_proj, b_proj, a_proj, A_log, dt_bias,
 * q_conv1d.weight (C,1,W), k_conv1d, v_conv1d, g_proj, o_norm.weight, o_proj); and lm_head.weight
 * (V_pad, D). FLA's gate_proj / up_proj / down_proj are mlp.w1 / w3 / fc2.
 * Init (spec §5.4): N(0, 0.02) for every Linear / conv weight and lm_head, the embedding
 * N(0, emb_init_std); o_proj and fc2 further divided by sqrt(2 n_layer) (rescale_out_proj 0 turns
 * this off); norms 1; A = exp(A_log) ~ U(0, 16) (floored at 16 * 2^-24, the draw's resolution,
 * so that ln never sees 0); dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1] (Mamba).
 * Weight decay on every matrix / conv weight and lm_head; not on norms, A_log, dt_bias.
 * Out of scope: backbone_dropout (rejected), tied embeddings.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../layers/deltanet.h"
#include "../layers/embed.h"
#include "../layers/head.h"
#include "../layers/mlp.h"
#include "../layers/rmsnorm.h"
#include "lm_common.h"

#define HEAD_NAME "lm_head.weight"
#define INIT_STD 0.02f
#define A_MIN (16.0f / 16777216.0f)

typedef struct {
    float *norm, *norm2; /* (D) */
    DeltaW mix;
    MlpW mlp;
} LayerW;

/* X(member, suffix, init, a, b, decay, ndim, d0, d1, d2, present); uses the dims of DIMS. */
#define DELTA_LAYER_PARAMS(X)                                                                     \
    X(norm, "norm.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0, 1)                                      \
    X(mix.q_proj, "mixer.q_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, HK, D, 0, 1)             \
    X(mix.k_proj, "mixer.k_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, NK, D, 0, 1)             \
    X(mix.v_proj, "mixer.v_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, NV, D, 0, 1)             \
    X(mix.b_proj, "mixer.b_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, NB, D, 0, 1)             \
    X(mix.a_proj, "mixer.a_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, H, D, 0, G)              \
    X(mix.A_log, "mixer.A_log", INIT_A_LOG, A_MIN, 16, 0, 1, H, 0, 0, G)                          \
    X(mix.dt_bias, "mixer.dt_bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, H, 0, 0, G)                  \
    X(mix.q_conv, "mixer.q_conv1d.weight", INIT_NORMAL, INIT_STD, 0, 1, 3, HK, 1, W, W > 0)       \
    X(mix.k_conv, "mixer.k_conv1d.weight", INIT_NORMAL, INIT_STD, 0, 1, 3, NK, 1, W, W > 0)       \
    X(mix.v_conv, "mixer.v_conv1d.weight", INIT_NORMAL, INIT_STD, 0, 1, 3, NV, 1, W, W > 0)       \
    X(mix.g_proj, "mixer.g_proj.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, HV, D, 0, G)             \
    X(mix.o_norm, "mixer.o_norm.weight", INIT_ONE, 0, 0, 0, 1, Vd, 0, 0, 1)                       \
    X(mix.o_proj, "mixer.o_proj.weight", INIT_NORMAL, INIT_STD * os, 0, 1, 2, D, HV, 0, 1)        \
    X(norm2, "norm2.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0, 1)                                    \
    X(mlp.w1, "mlp.w1.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, Hm, D, 0, 1)                       \
    X(mlp.w3, "mlp.w3.weight", INIT_NORMAL, INIT_STD, 0, 1, 2, Hm, D, 0, 1)                       \
    X(mlp.fc2, "mlp.fc2.weight", INIT_NORMAL, INIT_STD * os, 0, 1, 2, D, Hm, 0, 1)

#define DIMS(lm)                                                                                  \
    const int D = (lm)->dc.D, H = (lm)->dc.H, Vd = (lm)->dc.V, W = (lm)->dc.W, G = (lm)->dc.gated; \
    const int HK = (lm)->dc.HK, HV = (lm)->dc.HV, NK = (lm)->dc.NK, NV = (lm)->dc.NV;              \
    const int NB = (lm)->dc.NB, Hm = (lm)->mc.h;                                                  \
    (void)D, (void)H, (void)Vd, (void)W, (void)G, (void)HK, (void)HV, (void)NK, (void)NV, (void)NB, (void)Hm

typedef struct {
    DeltaCfg dc;
    MlpCfg mc;
    LayerW *w, *dw;      /* (n_layer) pointers into θ and dθ */
    size_t *off;         /* (n_layer * n_fields) table offsets, until bind_all */
    Arena acts;
    LmEnds ends;
    float *r;            /* (2L+1, B,T,D) residual stream: r[2l] layer input, r[2l+1] after the mixer */
    float *xn;           /* (2L, B,T,D) normed sub-block inputs */
    float *rstd;         /* (2L, B*T) */
    float *mcache, *pcache; /* (L, deltanet cache) (L, mlp cache) */
    size_t mper, pper;
    float *scratch, *tmp, *dz, *dxn;
    Arena st;
    float *state, *step_scratch, *zs, *zn, *zo, *head_scratch;
    size_t sper;
} DeltaLm;

/* Number of X entries (offsets kept per layer while the table is built). */
#define COUNT1(...) +1
enum { NFIELD = 0 DELTA_LAYER_PARAMS(COUNT1) };
#undef COUNT1

/* FLA GatedMLP: 256 ceil(floor(8 D / 3) / 256); the project's floor(2 d_inner / 3) otherwise. */
static int mlp_width(int d_model, int d_inner) {
    if (d_inner > 0) return 2 * d_inner / 3;
    int h = (int)((long)d_model * 8 / 3);
    return (h + 255) / 256 * 256;
}

static int build(Model *m, int gated) {
    const ModelCfg *c = &m->cfg;
    if (c->backbone_dropout > 0)
        return err_set(IM_EINVAL, "config key 'backbone_dropout': not supported by model '%s' (use 0)", c->model);
    int taps = c->short_conv == 0 ? 0 : c->d_conv;
    if (taps && (c->d_conv < 1 || c->d_conv > 64))
        return err_set(IM_EINVAL, "config key 'd_conv': %d out of range 1..64", c->d_conv);
    if (c->d_inner > 0 && 2 * c->d_inner / 3 < 1)
        return err_set(IM_EINVAL, "config key 'd_inner': too small for SwiGLU (hidden floor(2*d_inner/3) = 0)");
    long Vh = (long)c->expand_v * c->delta_head_dim;
    if (Vh > 65536 || (long)c->n_head * c->delta_head_dim * c->n_householder > (1L << 24))
        return err_set(IM_EINVAL, "config keys 'n_head' x 'delta_head_dim' x 'n_householder' / 'expand_v': too large");
    DeltaLm *lm = xcalloc(1, sizeof *lm);
    m->impl = lm;
    deltanet_cfg_init(&lm->dc, c->d_model, c->n_head, c->delta_head_dim, (int)Vh, c->n_householder, taps, gated,
                      c->allow_neg_eigval, (float)c->norm_eps);
    lm->mc = (MlpCfg){MLP_SWIGLU, c->d_model, mlp_width(c->d_model, c->d_inner)};
    int L = c->n_layer;
    float os = c->rescale_out_proj != 0 ? 1.0f / sqrtf(2.0f * L) : 1.0f;
    DIMS(lm);
    lm->w = xcalloc((size_t)L, sizeof *lm->w);
    lm->dw = xcalloc((size_t)L, sizeof *lm->dw);
    lm->off = xcalloc((size_t)L * NFIELD, sizeof *lm->off);
    ptab_add(&m->tab, EMB_NAME, INIT_NORMAL, (float)c->emb_init_std, 0, 0, 2, m->V, D);
    char name[PARAM_NAME_LEN];
    for (int i = 0; i < L; i++) {
        size_t *o = lm->off + (size_t)i * NFIELD;
        int f = 0;
#define ADD(member, suffix, init, a, b, decay, nd, d0, d1, d2, present)                             \
    if (present) {                                                                                  \
        snprintf(name, sizeof name, "backbone.layers.%d.%s", i, suffix);                            \
        o[f] = nd == 1 ? ptab_add(&m->tab, name, init, a, b, decay, 1, d0)                          \
             : nd == 2 ? ptab_add(&m->tab, name, init, a, b, decay, 2, d0, d1)                      \
                       : ptab_add(&m->tab, name, init, a, b, decay, 3, d0, d1, d2);                 \
    }                                                                                               \
    f++;
        DELTA_LAYER_PARAMS(ADD)
#undef ADD
    }
    ptab_add(&m->tab, NORM_F_NAME, INIT_ONE, 0, 0, 0, 1, D);
    ptab_add(&m->tab, HEAD_NAME, INIT_NORMAL, INIT_STD, 0, 1, 2, m->V, D);
    return IM_OK;
}

/* Pointers into θ and dθ, once they exist (model_create allocates them after build). */
static void bind_all(Model *m) {
    DeltaLm *lm = m->impl;
    if (lm->w[0].norm) return;
    DIMS(lm);
    for (int i = 0; i < m->cfg.n_layer; i++) {
        const size_t *o = lm->off + (size_t)i * NFIELD;
        int f = 0;
#define BIND(member, suffix, init, a, b, decay, nd, d0, d1, d2, present)             \
    lm->w[i].member = (present) ? m->params + o[f] : NULL;                          \
    lm->dw[i].member = (present) ? m->grads + o[f] : NULL;                          \
    f++;
        DELTA_LAYER_PARAMS(BIND)
#undef BIND
    }
}

static int build_gated(Model *m) { return build(m, 1); }
static int build_plain(Model *m) { return build(m, 0); }

/* ---- activations ----------------------------------------------------------------------------- */
/* A no_grad forward (evaluation, scoring) keeps one layer's normed inputs and caches, reused by
 * every layer, and two stream slots in turn (r0 and r2 share one), since nothing is read back. */
static void carve(Model *m, Arena *a, int B, int T) {
    DeltaLm *lm = m->impl;
    size_t M = (size_t)B * T, MD = M * m->cfg.d_model, L = (size_t)m->cfg.n_layer;
    int keep = !m->no_grad;
    size_t slots = keep ? L : 1;
    lm_ends_carve(&lm->ends, a, m, B, T);
    lm->r = arena_floats(a, (keep ? 2 * L + 1 : 2) * MD);
    lm->xn = arena_floats(a, 2 * slots * MD);
    lm->rstd = arena_floats(a, 2 * slots * M);
    lm->mper = deltanet_cache_floats(&lm->dc, B, T);
    lm->pper = mlp_cache_floats(&lm->mc, B, T);
    lm->mcache = arena_floats(a, slots * lm->mper);
    lm->pcache = arena_floats(a, slots * lm->pper);
    size_t s1 = deltanet_scratch_floats(&lm->dc, B, T), s2 = mlp_scratch_floats(&lm->mc, B, T);
    lm->scratch = arena_floats(a, s1 > s2 ? s1 : s2);
    lm->tmp = arena_floats(a, MD);
    lm->dz = keep ? arena_floats(a, MD) : NULL;
    lm->dxn = keep ? arena_floats(a, MD) : NULL;
}

static int plan(Model *m, int B, int T) {
    DeltaLm *lm = m->impl;
    bind_all(m);
    int rc = lm_arena_plan(&lm->acts, m, B, T, carve);
    m->act_bytes = lm->acts.cap;
    return rc;
}

/* r_out = r_in + f, all (n) */
static void residual(float *r_out, const float *r_in, const float *f, size_t n) {
    memcpy(r_out, r_in, n * sizeof(float));
    k_axpby(r_out, 1.0f, f, 1.0f, n);
}

static int fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    DeltaLm *lm = m->impl;
    const int M = B * T, D = m->cfg.d_model;
    const size_t MD = (size_t)M * D;
    const float eps = (float)m->cfg.norm_eps;
    LmEnds *e = &lm->ends;
    lm_embed_fwd(m, e, ids, B, T);
    memcpy(lm->r, e->x0, MD * sizeof(float));
    int keep = lm->dz != NULL;   /* planned without no_grad: see carve */
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const LayerW *w = &lm->w[l];
        size_t at = keep ? (size_t)l : 0;
        float *r0 = lm->r + 2 * at * MD, *r1 = r0 + MD, *r2 = keep ? r1 + MD : lm->r;
        float *x0 = lm->xn + 2 * at * MD, *x1 = x0 + MD, *s0 = lm->rstd + 2 * at * M, *s1 = s0 + M;
        rmsnorm_fwd(x0, s0, r0, w->norm, M, D, eps);
        deltanet_fwd(&lm->dc, &w->mix, lm->tmp, x0, lm->mcache + at * lm->mper, lm->scratch, NULL, B, T);
        residual(r1, r0, lm->tmp, MD);
        rmsnorm_fwd(x1, s1, r1, w->norm2, M, D, eps);
        mlp_fwd(&lm->mc, &w->mlp, lm->tmp, x1, NULL, NULL, lm->pcache + at * lm->pper, lm->scratch, B, T);
        residual(r2, r1, lm->tmp, MD);
    }
    /* norm_f and the untied head */
    const float *z = lm->r + (keep ? 2 * (size_t)m->cfg.n_layer * MD : 0);
    const float *Wh = model_tensor(m, m->params, HEAD_NAME);
    rmsnorm_fwd(e->hf, e->rstd_f, z, model_tensor(m, m->params, NORM_F_NAME), M, D, eps);
    e->has_targets = targets != NULL;
    m->logits = e->head_cache;
    if (loss) *loss = 0;
    if (!targets) {
        head_logits(e->head_cache, e->hf, Wh, M, m->V, D);
        return IM_OK;
    }
    int rc = head_check_targets(targets, (size_t)M, m->cfg.vocab_size, IGNORE_INDEX);
    if (rc) return err_wrap(rc, "target");
    memcpy(e->targets, targets, (size_t)M * sizeof(int));
    float l = 0;
    rc = head_loss_fwd(&l, &e->count, e->head_cache, e->head_scratch, e->hf, Wh, e->targets, M, m->V, D,
                       IGNORE_INDEX);
    if (!rc && loss) *loss = l;
    return rc;
}

static void bwd(Model *m) {
    DeltaLm *lm = m->impl;
    const int B = m->B, T = m->T, M = B * T, D = m->cfg.d_model, L = m->cfg.n_layer;
    const size_t MD = (size_t)M * D;
    LmEnds *e = &lm->ends;
    CHECK(lm->dz, "model_bwd after a no_grad forward (nothing was kept for the backward)");
    CHECK(e->has_targets, "model_bwd needs a forward with targets");
    const float *z = lm->r + 2 * (size_t)L * MD;
    memset(e->dhf, 0, MD * sizeof(float));
    head_loss_bwd(e->dhf, model_tensor(m, m->grads, HEAD_NAME), 1.0f, e->head_cache, e->head_scratch, e->hf,
                  model_tensor(m, m->params, HEAD_NAME), e->targets, M, m->V, D, IGNORE_INDEX);
    memset(lm->dz, 0, MD * sizeof(float));
    rmsnorm_bwd(lm->dz, model_tensor(m, m->grads, NORM_F_NAME), e->dhf, z,
                model_tensor(m, m->params, NORM_F_NAME), e->rstd_f, M, D);
    /* dz is dL/dr at the current point of the stream; the residual adds pass it on unchanged */
    for (int l = L - 1; l >= 0; l--) {
        const LayerW *w = &lm->w[l];
        LayerW *dw = &lm->dw[l];
        const float *r0 = lm->r + 2 * l * MD, *r1 = r0 + MD;
        const float *x0 = lm->xn + 2 * l * MD, *x1 = x0 + MD, *s0 = lm->rstd + (size_t)2 * l * M, *s1 = s0 + M;
        memset(lm->dxn, 0, MD * sizeof(float));
        mlp_bwd(&lm->mc, &w->mlp, &dw->mlp, lm->dxn, lm->dz, x1, NULL, NULL, lm->pcache + l * lm->pper,
                lm->scratch, B, T);
        rmsnorm_bwd(lm->dz, dw->norm2, lm->dxn, r1, w->norm2, s1, M, D);
        memset(lm->dxn, 0, MD * sizeof(float));
        deltanet_bwd(&lm->dc, &w->mix, &dw->mix, lm->dxn, lm->dz, x0, lm->mcache + l * lm->mper, lm->scratch,
                     B, T);
        rmsnorm_bwd(lm->dz, dw->norm, lm->dxn, r0, w->norm, s0, M, D);
    }
    lm_embed_bwd(m, e, lm->dz, B, T);
}

/* ---- token by token ---------------------------------------------------------------------------- */
static void carve_state(Model *m, Arena *a, int B, int T) {
    (void)T;
    DeltaLm *lm = m->impl;
    size_t BD = (size_t)B * m->cfg.d_model;
    lm->sper = deltanet_state_floats(&lm->dc, B);
    lm->state = arena_floats(a, (size_t)m->cfg.n_layer * lm->sper);
    size_t s1 = deltanet_step_scratch_floats(&lm->dc, B), s2 = mlp_scratch_floats(&lm->mc, B, 1);
    lm->step_scratch = arena_floats(a, s1 > s2 ? s1 : s2);
    lm->zs = arena_floats(a, BD);
    lm->zn = arena_floats(a, BD);
    lm->zo = arena_floats(a, BD);
    lm->head_scratch = arena_floats(a, BD + (size_t)B);
}

static int state_init(Model *m, int B) {
    DeltaLm *lm = m->impl;
    bind_all(m);
    int rc = lm_arena_plan(&lm->st, m, B, 1, carve_state);
    if (rc) return rc;
    memset(lm->state, 0, (size_t)m->cfg.n_layer * lm->sper * sizeof(float));
    return IM_OK;
}

static int step(Model *m, const int *ids, float *logits) {
    DeltaLm *lm = m->impl;
    const int B = m->step_B, D = m->cfg.d_model;
    const size_t BD = (size_t)B * D;
    const float eps = (float)m->cfg.norm_eps;
    embed_fwd(lm->zs, ids, model_tensor(m, m->params, EMB_NAME), B, m->V, D); /* ids validated */
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const LayerW *w = &lm->w[l];
        float *s = lm->state + l * lm->sper;
        rmsnorm_fwd(lm->zn, NULL, lm->zs, w->norm, B, D, eps);
        deltanet_step(&lm->dc, &w->mix, lm->zo, lm->zn, s, s, lm->step_scratch, B);
        k_axpby(lm->zs, 1.0f, lm->zo, 1.0f, BD);
        rmsnorm_fwd(lm->zn, NULL, lm->zs, w->norm2, B, D, eps);
        mlp_fwd(&lm->mc, &w->mlp, lm->zo, lm->zn, NULL, NULL, NULL, lm->step_scratch, B, 1);
        k_axpby(lm->zs, 1.0f, lm->zo, 1.0f, BD);
    }
    float *hf = lm->head_scratch;
    rmsnorm_fwd(hf, hf + BD, lm->zs, model_tensor(m, m->params, NORM_F_NAME), B, D, eps);
    head_logits(logits, hf, model_tensor(m, m->params, HEAD_NAME), B, m->V, D);
    return IM_OK;
}

static void free_impl(Model *m) {
    DeltaLm *lm = m->impl;
    if (!lm) return;
    arena_free(&lm->acts);
    arena_free(&lm->st);
    free(lm->w);
    free(lm->dw);
    free(lm->off);
    free(lm);
    m->impl = NULL;
}

const ModelType model_gated_deltanet_lm = {"gated_deltanet", MODEL_EXPLICIT, CFG_USE_DELTA, build_gated, plan, fwd, bwd, state_init, step,
                                           free_impl, NULL, NULL};
const ModelType model_deltanet_lm = {"deltanet", MODEL_EXPLICIT, CFG_USE_DELTA, build_plain, plan, fwd, bwd, state_init, step, free_impl,
                                     NULL, NULL};
