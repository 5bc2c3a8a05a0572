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
#include "lm_stack.h"

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
    LmStack stack;       /* the layer-stack skeleton (lm_stack.h) */
    DeltaCfg dc;
    MlpCfg mc;
    LayerW *w, *dw;      /* (n_layer) pointers into θ and dθ */
    size_t *off;         /* (n_layer * n_fields) table offsets, until bind_all */
} DeltaLm;

static const LmLayerOps DELTA_OPS;

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
    lm->stack.ops = &DELTA_OPS;
    lm->stack.ends.head_name = HEAD_NAME;
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

/* ---- the layer: r1 = r + mixer(norm(r)),  y = r1 + mlp(norm2(r1)) ------------------------------ */
/* One layer's buffers inside its cache slot: the stream after the mixer, the two normed
 * sub-block inputs and their rstd, the mixer's and the MLP's caches. A no_grad forward (evaluation,
 * scoring) keeps one such slot, reused by every layer, and updates the stream in place. */
typedef struct {
    float *r1, *x0, *x1, *s0, *s1, *mcache, *pcache;
} Slot;

/* Floats of one slot; with base, *o points into it. */
static size_t slot_at(const DeltaLm *lm, float *base, int B, int T, Slot *o) {
    size_t M = (size_t)B * T, MD = M * lm->dc.D;
    const size_t n[] = {MD, MD, MD, M, M, deltanet_cache_floats(&lm->dc, B, T), mlp_cache_floats(&lm->mc, B, T)};
    float **at[] = {&o->r1, &o->x0, &o->x1, &o->s0, &o->s1, &o->mcache, &o->pcache};
    size_t total = 0;
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        if (base) *at[i] = base + total;
        total += lm_floats_up(n[i]);
    }
    return total;
}

/* The sub-blocks' shared temporaries, then the (B,T,D) sub-block output tmp, then (with a
 * backward) the gradient dxn at a normed input. */
static size_t work_floats(const DeltaLm *lm, int B, int T) {
    size_t s1 = deltanet_scratch_floats(&lm->dc, B, T), s2 = mlp_scratch_floats(&lm->mc, B, T);
    return lm_floats_up(s1 > s2 ? s1 : s2);
}
static size_t cache_floats(const Model *m, int B, int T) { Slot o; return slot_at(m->impl, NULL, B, T, &o); }
static size_t scratch_floats(const Model *m, int B, int T) {
    size_t MD = lm_floats_up((size_t)B * T * m->cfg.d_model);
    return work_floats(m->impl, B, T) + (m->no_grad ? 1 : 2) * MD;
}

/* r_out = r_in + f, all (n) */
static void residual(float *r_out, const float *r_in, const float *f, size_t n) {
    memcpy(r_out, r_in, n * sizeof(float));
    k_axpby(r_out, 1.0f, f, 1.0f, n);
}

static int layer_fwd(Model *m, int l, float *y, const float *x, float *cache, float *scratch, int B, int T) {
    DeltaLm *lm = m->impl;
    const int M = B * T, D = m->cfg.d_model;
    const size_t MD = (size_t)M * D;
    const float eps = (float)m->cfg.norm_eps;
    const LayerW *w = &lm->w[l];
    Slot s;
    slot_at(lm, cache, B, T, &s);
    float *tmp = scratch + work_floats(lm, B, T);
    rmsnorm_fwd(s.x0, s.s0, x, w->norm, M, D, eps);
    deltanet_fwd(&lm->dc, &w->mix, tmp, s.x0, s.mcache, scratch, NULL, B, T);
    residual(s.r1, x, tmp, MD);
    rmsnorm_fwd(s.x1, s.s1, s.r1, w->norm2, M, D, eps);
    mlp_fwd(&lm->mc, &w->mlp, tmp, s.x1, NULL, NULL, s.pcache, scratch, B, T);
    residual(y, s.r1, tmp, MD);
    return IM_OK;
}

static void layer_bwd(Model *m, int l, float *dx, const float *dy, const float *x, const float *cache, float *scratch,
                      int B, int T) {
    DeltaLm *lm = m->impl;
    const int M = B * T, D = m->cfg.d_model;
    const size_t MD = (size_t)M * D;
    const LayerW *w = &lm->w[l];
    LayerW *dw = &lm->dw[l];
    Slot s;
    slot_at(lm, (float *)cache, B, T, &s);
    float *dxn = scratch + work_floats(lm, B, T) + lm_floats_up(MD);
    /* dx is dL/dr at the current point of the stream: both residual adds pass dy on unchanged */
    k_axpby(dx, 1.0f, dy, 1.0f, MD);
    k_zero(dxn, MD);
    mlp_bwd(&lm->mc, &w->mlp, &dw->mlp, dxn, dy, s.x1, NULL, NULL, s.pcache, scratch, B, T);
    rmsnorm_bwd(dx, dw->norm2, dxn, s.r1, w->norm2, s.s1, M, D);
    k_zero(dxn, MD);
    deltanet_bwd(&lm->dc, &w->mix, &dw->mix, dxn, dx, s.x0, s.mcache, scratch, B, T);
    rmsnorm_bwd(dx, dw->norm, dxn, x, w->norm, s.s0, M, D);
}

/* ---- token by token: zn, zo (B,D) then the sub-blocks' temporaries -------------------------------- */
static size_t state_floats(const Model *m, int B) { return deltanet_state_floats(&((const DeltaLm *)m->impl)->dc, B); }
static size_t step_scratch_floats(const Model *m, int B) {
    const DeltaLm *lm = m->impl;
    size_t s1 = deltanet_step_scratch_floats(&lm->dc, B), s2 = mlp_scratch_floats(&lm->mc, B, 1);
    return 2 * lm_floats_up((size_t)B * m->cfg.d_model) + (s1 > s2 ? s1 : s2);
}

/* In place: y is x (LmLayerOps.in_place). */
static int layer_step(Model *m, int l, float *y, const float *x, float *state, float *scratch, int B) {
    DeltaLm *lm = m->impl;
    const int D = m->cfg.d_model;
    const size_t BD = (size_t)B * D;
    const float eps = (float)m->cfg.norm_eps;
    const LayerW *w = &lm->w[l];
    float *zn = scratch, *zo = zn + lm_floats_up(BD), *work = zo + lm_floats_up(BD);
    if (y != x) memcpy(y, x, BD * sizeof(float));
    rmsnorm_fwd(zn, NULL, y, w->norm, B, D, eps);
    deltanet_step(&lm->dc, &w->mix, zo, zn, state, state, work, B);
    k_axpby(y, 1.0f, zo, 1.0f, BD);
    rmsnorm_fwd(zn, NULL, y, w->norm2, B, D, eps);
    mlp_fwd(&lm->mc, &w->mlp, zo, zn, NULL, NULL, NULL, work, B, 1);
    k_axpby(y, 1.0f, zo, 1.0f, BD);
    return IM_OK;
}

static void release(Model *m) {
    DeltaLm *lm = m->impl;
    free(lm->w);
    free(lm->dw);
    free(lm->off);
}

static const LmLayerOps DELTA_OPS = {cache_floats, scratch_floats, state_floats, step_scratch_floats, 1, bind_all,
                                     NULL, NULL, layer_fwd, layer_bwd, layer_step, release, NULL};


const ModelType model_gated_deltanet_lm = LM_STACK_TYPE("gated_deltanet", MODEL_EXPLICIT, CFG_USE_DELTA, build_gated);
const ModelType model_deltanet_lm = LM_STACK_TYPE("deltanet", MODEL_EXPLICIT, CFG_USE_DELTA, build_plain);
