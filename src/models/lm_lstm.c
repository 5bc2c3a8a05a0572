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
#include "lm_stack.h"

typedef struct {
    LmStack stack;      /* the layer-stack skeleton (lm_stack.h) */
    LstmCfg lc;
    LstmW *w, *dw;      /* (n_layer) */
} LstmLm;

static const LmLayerOps LSTM_OPS;

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
    lm->stack.ops = &LSTM_OPS;
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

/* ---- the layer ------------------------------------------------------------------------------------ */
/* A no_grad forward keeps nothing for a backward: no caches (lstm_fwd's no-grad mode), and the
 * stack uses two hidden-sequence slots in turn (y must not alias x). */
static size_t cache_floats(const Model *m, int B, int T) {
    return m->no_grad ? 0 : lstm_cache_floats(&((const LstmLm *)m->impl)->lc, B, T);
}
static size_t scratch_floats(const Model *m, int B, int T) { return lstm_scratch_floats(&((const LstmLm *)m->impl)->lc, B, T); }
static size_t state_floats(const Model *m, int B) { return lstm_state_floats(&((const LstmLm *)m->impl)->lc, B); }
static size_t step_scratch_floats(const Model *m, int B) { return lstm_step_scratch_floats(&((const LstmLm *)m->impl)->lc, B); }

static int layer_fwd(Model *m, int l, float *y, const float *x, float *cache, float *scratch, int B, int T) {
    LstmLm *lm = m->impl;
    lstm_fwd(&lm->lc, &lm->w[l], y, NULL, x, NULL, cache, scratch, B, T);
    return IM_OK;
}

static void layer_bwd(Model *m, int l, float *dx, const float *dy, const float *x, const float *cache, float *scratch,
                      int B, int T) {
    LstmLm *lm = m->impl;
    lstm_bwd(&lm->lc, &lm->w[l], &lm->dw[l], dx, NULL, dy, NULL, x, cache, scratch, B, T);
}

static int layer_step(Model *m, int l, float *y, const float *x, float *state, float *scratch, int B) {
    LstmLm *lm = m->impl;
    lstm_step(&lm->lc, &lm->w[l], y, x, state, state, scratch, B);
    return IM_OK;
}

static void release(Model *m) {
    LstmLm *lm = m->impl;
    free(lm->w);
    free(lm->dw);
}

static const LmLayerOps LSTM_OPS = {cache_floats, scratch_floats, state_floats, step_scratch_floats, 0, bind_all,
                                    NULL, NULL, layer_fwd, layer_bwd, layer_step, release, NULL};


const ModelType model_lstm_lm = LM_STACK_TYPE("lstm", MODEL_EXPLICIT, 0, build);
