/* lm_lstm.c: the LSTM language model baseline: embedding → n_layer LSTM layers (hidden D,
 * PyTorch nn.LSTM semantics) → norm_f RMSNorm → tied head. Names:
 * backbone.layers.{i}.weight_ih / weight_hh / bias_ih / bias_hh; init U(±1/√D) for all four
 * (PyTorch's LSTM default). No dropout between layers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../layers/embed.h"
#include "../layers/lstm.h"
#include "lm_common.h"

typedef struct {
    LstmCfg lc;
    LstmW *w, *dw;      /* (n_layer) */
    Arena acts;
    LmEnds ends;
    float *y;           /* (n_layer+1, B,T,D) layer inputs; y[n_layer] goes to norm_f */
    float *cache;       /* (n_layer, lstm_cache_floats) */
    size_t cache_per_layer;
    float *scratch, *dy, *dy2;
    Arena st;
    float *state, *step_scratch, *zs, *zs2, *head_scratch;
} LstmLm;

/* X(member, suffix, decay, ndim, d0, d1) */
#define LSTM_LAYER_PARAMS(X)                    \
    X(W_ih, "weight_ih", 1, 2, 4 * D, D)        \
    X(W_hh, "weight_hh", 1, 2, 4 * D, D)        \
    X(b_ih, "bias_ih", 0, 1, 4 * D, 0)          \
    X(b_hh, "bias_hh", 0, 1, 4 * D, 0)

static int build(Model *m) {
    int D = m->cfg.d_model, L = m->cfg.n_layer;
    LstmLm *lm = xcalloc(1, sizeof *lm);
    m->impl = lm;
    lm->lc.D = D;
    lm->lc.H = D;
    lm->w = xcalloc((size_t)L, sizeof *lm->w);
    lm->dw = xcalloc((size_t)L, sizeof *lm->dw);
    ptab_add(&m->tab, EMB_NAME, INIT_NORMAL, (float)m->cfg.emb_init_std, 0, 0, 2, m->V, D);
    float a = 1.0f / sqrtf((float)D);
    char name[PARAM_NAME_LEN];
    for (int i = 0; i < L; i++) {
#define ADD(member, suffix, decay, nd, d0, d1)                                               \
    snprintf(name, sizeof name, "backbone.layers.%d.%s", i, suffix);                         \
    lm->w[i].member = (float *)(uintptr_t)(nd == 1 ? ptab_add(&m->tab, name, INIT_UNIFORM, a, 0, decay, 1, d0) \
                                                   : ptab_add(&m->tab, name, INIT_UNIFORM, a, 0, decay, 2, d0, d1));
        LSTM_LAYER_PARAMS(ADD)
#undef ADD
    }
    ptab_add(&m->tab, NORM_F_NAME, INIT_ONE, 0, 0, 0, 1, D);
    lm_head_add(m);
    return IM_OK;
}

static void bind_all(Model *m) {
    LstmLm *lm = m->impl;
    if (lm->dw[0].W_ih) return;
    for (int i = 0; i < m->cfg.n_layer; i++) {
        LstmW off = lm->w[i];
#define BIND(member, ...)                                                   \
    lm->w[i].member = m->params + (size_t)(uintptr_t)off.member;            \
    lm->dw[i].member = m->grads + (size_t)(uintptr_t)off.member;
        LSTM_LAYER_PARAMS(BIND)
#undef BIND
    }
}

/* A no_grad forward (evaluation, scoring) keeps nothing for a backward: no caches (lstm_fwd's
 * no-grad mode) and two hidden-sequence slots used in turn instead of one per layer. */
static void carve(Model *m, Arena *a, int B, int T) {
    LstmLm *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    int L = m->cfg.n_layer, keep = !m->no_grad;
    lm_ends_carve(&lm->ends, a, m, B, T);
    lm->y = arena_floats(a, (keep ? (size_t)L + 1 : 2) * MD);
    lm->cache_per_layer = keep ? lstm_cache_floats(&lm->lc, B, T) : 0;
    lm->cache = keep ? arena_floats(a, (size_t)L * lm->cache_per_layer) : NULL;
    lm->scratch = arena_floats(a, lstm_scratch_floats(&lm->lc, B, T));
    lm->dy = keep ? arena_floats(a, MD) : NULL;
    lm->dy2 = keep ? arena_floats(a, MD) : NULL;
}

static int plan(Model *m, int B, int T) {
    LstmLm *lm = m->impl;
    bind_all(m);
    int rc = lm_arena_plan(&lm->acts, m, B, T, carve);
    m->act_bytes = lm->acts.cap;
    return rc;
}

static int fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    LstmLm *lm = m->impl;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    lm_embed_fwd(m, &lm->ends, ids, B, T);
    memcpy(lm->y, lm->ends.x0, MD * sizeof(float));
    int keep = lm->cache != NULL, L = m->cfg.n_layer;   /* planned without no_grad: see carve */
    for (int l = 0; l < L; l++) {
        float *x = lm->y + (keep ? (size_t)l : (size_t)(l % 2)) * MD;
        float *y = lm->y + (keep ? (size_t)l + 1 : (size_t)((l + 1) % 2)) * MD;
        lstm_fwd(&lm->lc, &lm->w[l], y, NULL, x, NULL, keep ? lm->cache + (size_t)l * lm->cache_per_layer : NULL,
                 lm->scratch, B, T);
    }
    return lm_head_fwd(m, &lm->ends, lm->y + (keep ? (size_t)L : (size_t)(L % 2)) * MD, targets, B, T, loss);
}

static void bwd(Model *m) {
    LstmLm *lm = m->impl;
    CHECK(lm->cache, "model_bwd after a no_grad forward (nothing was kept for the backward)");
    int B = m->B, T = m->T, L = m->cfg.n_layer;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    memset(lm->dy, 0, MD * sizeof(float));
    lm_head_bwd(m, &lm->ends, lm->dy, lm->y + (size_t)L * MD, B, T);
    for (int l = L - 1; l >= 0; l--) {
        memset(lm->dy2, 0, MD * sizeof(float));
        lstm_bwd(&lm->lc, &lm->w[l], &lm->dw[l], lm->dy2, NULL, lm->dy, NULL, lm->y + (size_t)l * MD,
                 lm->cache + (size_t)l * lm->cache_per_layer, lm->scratch, B, T);
        float *t = lm->dy; lm->dy = lm->dy2; lm->dy2 = t;
    }
    lm_embed_bwd(m, &lm->ends, lm->dy, B, T);
}

static void carve_state(Model *m, Arena *a, int B, int T) {
    (void)T;
    LstmLm *lm = m->impl;
    lm->state = arena_floats(a, (size_t)m->cfg.n_layer * lstm_state_floats(&lm->lc, B));
    lm->step_scratch = arena_floats(a, lstm_step_scratch_floats(&lm->lc, B));
    lm->zs = arena_floats(a, (size_t)B * m->cfg.d_model);
    lm->zs2 = arena_floats(a, (size_t)B * m->cfg.d_model);
    lm->head_scratch = arena_floats(a, (size_t)B * m->cfg.d_model + (size_t)B);
}

static int state_init(Model *m, int B) {
    LstmLm *lm = m->impl;
    bind_all(m);
    int rc = lm_arena_plan(&lm->st, m, B, 1, carve_state);
    if (rc) return rc;
    memset(lm->state, 0, (size_t)m->cfg.n_layer * lstm_state_floats(&lm->lc, B) * sizeof(float));
    return IM_OK;
}

static int step(Model *m, const int *ids, float *logits) {
    LstmLm *lm = m->impl;
    int B = m->step_B, D = m->cfg.d_model;
    const float *E = model_tensor(m, m->params, EMB_NAME);
    embed_fwd(lm->zs, ids, E, B, m->V, D);   /* ids were validated by model_step */
    size_t per = lstm_state_floats(&lm->lc, B);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        float *s = lm->state + (size_t)l * per;
        lstm_step(&lm->lc, &lm->w[l], lm->zs2, lm->zs, s, s, lm->step_scratch, B);
        float *t = lm->zs; lm->zs = lm->zs2; lm->zs2 = t;   /* y must not alias x */
    }
    lm_head_step(m, logits, lm->zs, lm->head_scratch, B);
    return IM_OK;
}

static void free_impl(Model *m) {
    LstmLm *lm = m->impl;
    if (!lm) return;
    arena_free(&lm->acts);
    arena_free(&lm->st);
    free(lm->w);
    free(lm->dw);
    free(lm);
    m->impl = NULL;
}

const ModelType model_lstm_lm = {"lstm", MODEL_EXPLICIT, 0, build, plan, fwd, bwd, state_init, step, free_impl, NULL, NULL};
