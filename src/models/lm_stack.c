/* lm_stack.c: the layer-stack skeleton of lm_stack.h: the plumbing every LM family shares and
 * the explicit stack over LmLayerOps. */
#include "lm_stack.h"

#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../layers/embed.h"

static LmStack *stack_of(const Model *m) { return m->impl; }

/* ---- plumbing ---------------------------------------------------------------------------------- */
int lm_stack_plan_acts(Model *m, int B, int T, void (*carve)(Model *, Arena *, int, int)) {
    LmStack *s = stack_of(m);
    if (s->max_len > 0 && T > s->max_len)
        return err_set(IM_EINVAL, "sequence length %d exceeds max_seq_len %d", T, s->max_len);
    int rc = lm_arena_plan(&s->acts, m, B, T, carve);
    m->act_bytes = s->acts.cap;
    return rc;
}

static void carve_state(Model *m, Arena *a, int B, int T) {
    LmStack *s = stack_of(m);
    s->state = arena_floats(a, (size_t)m->cfg.n_layer * s->state_per);
    s->step_scratch = arena_floats(a, s->step_scratch_n);
    if (s->carve_state) s->carve_state(m, a, B, T);
}

int lm_stack_plan_state(Model *m, int B, size_t state_per, size_t step_scratch_n) {
    LmStack *s = stack_of(m);
    s->state_per = state_per;
    s->step_scratch_n = step_scratch_n;
    int rc = lm_arena_plan(&s->st, m, B, 1, carve_state);
    if (rc) return rc;
    memset(s->state, 0, (size_t)m->cfg.n_layer * state_per * sizeof(float));
    return IM_OK;
}

int lm_stack_check_pos(const Model *m) {
    const LmStack *s = stack_of(m);
    if (s->max_len > 0 && m->pos >= s->max_len)
        return err_set(IM_EINVAL, "position %d reaches max_seq_len %d (the KV cache is full)", m->pos, s->max_len);
    return IM_OK;
}

void lm_stack_free(LmStack *s) {
    arena_free(&s->acts);
    arena_free(&s->st);
}

/* ---- the explicit stack -------------------------------------------------------------------------- */
/* A forward that a backward may follow keeps every layer's input and cache (keep); see lm_stack.h
 * for the no_grad layout. model_plan re-plans when the flag changes. */
static void carve(Model *m, Arena *a, int B, int T) {
    LmStack *s = stack_of(m);
    const LmLayerOps *o = s->ops;
    size_t MD = (size_t)B * T * m->cfg.d_model, L = (size_t)m->cfg.n_layer;
    int keep = !m->no_grad;
    lm_ends_carve(&s->ends, a, m, B, T);
    s->x = arena_floats(a, (keep ? L + 1 : o->in_place ? 1 : 2) * MD);
    s->cache_per = lm_floats_up(o->cache_floats(m, B, T));
    s->cache = s->cache_per ? arena_floats(a, (keep ? L : 1) * s->cache_per) : NULL;
    s->scratch = arena_floats(a, o->scratch_floats(m, B, T));
    s->dx = keep ? arena_floats(a, MD) : NULL;
    s->dx2 = keep ? arena_floats(a, MD) : NULL;
    if (o->carve) o->carve(m, a, B, T);
}

int lm_stack_plan(Model *m, int B, int T) {
    LmStack *s = stack_of(m);
    if (s->ops->bind) s->ops->bind(m);
    return lm_stack_plan_acts(m, B, T, carve);
}

/* Layer input slot i of the planned layout. */
static float *slot(const Model *m, int i) {
    const LmStack *s = stack_of(m);
    size_t MD = (size_t)m->B * m->T * m->cfg.d_model;
    int at = s->dx ? i : s->ops->in_place ? 0 : i % 2;
    return s->x + (size_t)at * MD;
}

int lm_stack_fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    LmStack *s = stack_of(m);
    const LmLayerOps *o = s->ops;
    int L = m->cfg.n_layer;
    lm_embed_fwd(m, &s->ends, ids, B, T);
    memcpy(s->x, s->ends.x0, (size_t)B * T * m->cfg.d_model * sizeof(float));
    if (o->begin) o->begin(m, B, T);
    for (int l = 0; l < L; l++) {
        float *cache = s->cache && s->dx ? s->cache + (size_t)l * s->cache_per : s->cache;
        int rc = o->fwd(m, l, slot(m, l + 1), slot(m, l), cache, s->scratch, B, T);
        if (rc) return rc;
    }
    return lm_head_fwd(m, &s->ends, slot(m, L), targets, B, T, loss);
}

void lm_stack_bwd(Model *m) {
    LmStack *s = stack_of(m);
    CHECK(s->dx, "model_bwd after a no_grad forward (nothing was kept for the backward)");
    int B = m->B, T = m->T, L = m->cfg.n_layer;
    size_t MD = (size_t)B * T * m->cfg.d_model;
    k_zero(s->dx, MD);
    lm_head_bwd(m, &s->ends, s->dx, slot(m, L), B, T);
    for (int l = L - 1; l >= 0; l--) {
        k_zero(s->dx2, MD);
        s->ops->bwd(m, l, s->dx2, s->dx, slot(m, l), s->cache + (size_t)l * s->cache_per, s->scratch, B, T);
        float *t = s->dx; s->dx = s->dx2; s->dx2 = t;
    }
    lm_embed_bwd(m, &s->ends, s->dx, B, T);
}

static void carve_stream(Model *m, Arena *a, int B, int T) {
    (void)T;
    LmStack *s = stack_of(m);
    size_t BD = (size_t)B * m->cfg.d_model;
    s->xs = arena_floats(a, BD);
    s->ys = s->ops->in_place ? NULL : arena_floats(a, BD);
    s->head_scratch = arena_floats(a, BD + (size_t)B);
}

int lm_stack_state_init(Model *m, int B) {
    LmStack *s = stack_of(m);
    if (s->ops->bind) s->ops->bind(m);
    s->carve_state = carve_stream;
    int rc = lm_stack_plan_state(m, B, s->ops->state_floats(m, B), s->ops->step_scratch_floats(m, B));
    if (!rc && s->ops->begin_steps) s->ops->begin_steps(m, B);
    return rc;
}

int lm_stack_step(Model *m, const int *ids, float *logits) {
    LmStack *s = stack_of(m);
    int B = m->step_B, D = m->cfg.d_model;
    int rc = lm_stack_check_pos(m);
    if (rc) return rc;
    embed_fwd(s->xs, ids, model_tensor(m, m->params, EMB_NAME), B, m->V, D);   /* ids were validated by model_step */
    for (int l = 0; l < m->cfg.n_layer; l++) {
        float *y = s->ops->in_place ? s->xs : s->ys;
        if ((rc = s->ops->step(m, l, y, s->xs, s->state + (size_t)l * s->state_per, s->step_scratch, B))) return rc;
        if (y != s->xs) { s->ys = s->xs; s->xs = y; }
    }
    lm_head_step_w(m, lm_ends_head_w(m, &s->ends, m->params), logits, s->xs, s->head_scratch, B);
    return IM_OK;
}

void lm_stack_free_impl(Model *m) {
    LmStack *s = stack_of(m);
    if (!s) return;
    if (s->ops->release) s->ops->release(m);
    lm_stack_free(s);
    free(s);
    m->impl = NULL;
}
