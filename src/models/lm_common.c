/* lm_common.c: embedding, final norm and tied head shared by the explicit LMs; see lm_common.h. */
#include "lm_common.h"

#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../layers/embed.h"
#include "../layers/head.h"

void lm_ends_carve(LmEnds *e, Arena *a, const Model *m, int B, int T) {
    size_t M = (size_t)B * T, D = (size_t)m->cfg.d_model, V = (size_t)m->V;
    e->ids = arena_alloc(a, M * sizeof(int));
    e->targets = arena_alloc(a, M * sizeof(int));
    e->x0 = arena_floats(a, M * D);
    e->emb_mask = m->cfg.dropout > 0 ? arena_floats(a, M * D) : NULL;
    e->hf = arena_floats(a, M * D);
    e->rstd_f = arena_floats(a, blocknorm_cache_floats(lm_norm_type(m), (int)M));
    e->head_cache = arena_floats(a, head_cache_floats((int)M, (int)V));
    e->head_scratch = arena_floats(a, head_scratch_floats((int)M, (int)V));
    e->dhf = arena_floats(a, M * D);
}

BlockNormType lm_norm_type(const Model *m) {
    int t = blocknorm_parse(m->cfg.norm_type);
    return t < 0 ? BLOCKNORM_RMS : (BlockNormType)t;
}

void lm_head_add(Model *m) {
    /* a linear weight like any projection (decayed), drawn as the embedding is */
    if (!m->cfg.tie_embeddings)
        ptab_add(&m->tab, HEAD_W_NAME, INIT_NORMAL, (float)m->cfg.emb_init_std, 0, 1, 2, m->V, m->cfg.d_model);
}

float *lm_head_w(const Model *m, float *block) {
    return model_tensor(m, block, m->cfg.tie_embeddings ? EMB_NAME : HEAD_W_NAME);
}

float *lm_ends_head_w(const Model *m, const LmEnds *e, float *block) {
    return e->head_name ? model_tensor(m, block, e->head_name) : lm_head_w(m, block);
}

/* norm_f's bias in block (θ or dθ), NULL without one */
static float *norm_f_bias(const Model *m, float *block) {
    const ParamInfo *p = ptab_find(&m->tab, NORM_F_BIAS_NAME);
    return p ? block + p->offset : NULL;
}

void lm_dropout_mask(Rng *r, float *mask, size_t n, float p) {
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) mask[i] = rng_uniform(r) < p ? 0.0f : keep;
}

void lm_embed_fwd(Model *m, LmEnds *e, const int *ids, int B, int T) {
    size_t M = (size_t)B * T, D = (size_t)m->cfg.d_model;
    memcpy(e->ids, ids, M * sizeof(int));
    const float *E = model_tensor(m, m->params, EMB_NAME);
    embed_fwd(e->x0, e->ids, E, (int)M, m->V, (int)D);
    /* standard (per-element) dropout on the embeddings, spec §1.7; mask kept for the backward */
    if (e->emb_mask && m->training) {
        lm_dropout_mask(&m->rng, e->emb_mask, M * D, (float)m->cfg.dropout);
        for (size_t i = 0; i < M * D; i++) e->x0[i] *= e->emb_mask[i];
    } else if (e->emb_mask) {
        for (size_t i = 0; i < M * D; i++) e->emb_mask[i] = 1.0f;
    }
}

void lm_embed_bwd(Model *m, LmEnds *e, const float *dx0, int B, int T) {
    size_t M = (size_t)B * T, D = (size_t)m->cfg.d_model;
    float *dE = model_tensor(m, m->grads, EMB_NAME);
    if (e->emb_mask) {
        /* reuse dhf (dead by now) for the masked gradient */
        for (size_t i = 0; i < M * D; i++) e->dhf[i] = dx0[i] * e->emb_mask[i];
        dx0 = e->dhf;
    }
    embed_bwd(dE, dx0, e->ids, (int)M, m->V, (int)D);
}

int lm_head_fwd(Model *m, LmEnds *e, const float *z, const int *targets, int B, int T, float *loss) {
    int M = B * T, D = m->cfg.d_model;
    const float *E = lm_ends_head_w(m, e, m->params);
    const float *nw = model_tensor(m, m->params, NORM_F_NAME);
    blocknorm_fwd(lm_norm_type(m), e->hf, e->rstd_f, z, nw, norm_f_bias(m, m->params), M, D, (float)m->cfg.norm_eps);
    e->has_targets = targets != NULL;
    m->logits = e->head_cache;
    if (!targets) {
        head_logits(e->head_cache, e->hf, E, M, m->V, D);
        if (loss) *loss = 0;
        return IM_OK;
    }
    /* targets index the padded head too; only the real vocabulary is valid */
    int rc = head_check_targets(targets, (size_t)M, m->cfg.vocab_size, IGNORE_INDEX);
    if (rc) return err_wrap(rc, "target");
    memcpy(e->targets, targets, (size_t)M * sizeof(int));
    float l = 0;
    rc = head_loss_fwd(&l, &e->count, e->head_cache, e->head_scratch, e->hf, E, e->targets, M, m->V, D,
                       IGNORE_INDEX);
    if (rc) return rc;
    if (loss) *loss = l;
    return IM_OK;
}

void lm_head_bwd(Model *m, LmEnds *e, float *dz, const float *z, int B, int T) {
    int M = B * T, D = m->cfg.d_model;
    CHECK(e->has_targets, "model_bwd needs a forward with targets");
    const float *E = lm_ends_head_w(m, e, m->params);
    const float *nw = model_tensor(m, m->params, NORM_F_NAME);
    k_zero(e->dhf, (size_t)M * D);
    head_loss_bwd(e->dhf, lm_ends_head_w(m, e, m->grads), 1.0f, e->head_cache, e->head_scratch, e->hf, E,
                  e->targets, M, m->V, D, IGNORE_INDEX);
    blocknorm_bwd(lm_norm_type(m), dz, model_tensor(m, m->grads, NORM_F_NAME), norm_f_bias(m, m->grads), e->dhf, z, nw,
                  e->rstd_f, M, D);
}

void lm_head_step(const Model *m, float *logits, const float *z, float *scratch, int B) {
    lm_head_step_w(m, lm_head_w(m, m->params), logits, z, scratch, B);
}

void lm_head_step_w(const Model *m, const float *W, float *logits, const float *z, float *scratch, int B) {
    int D = m->cfg.d_model;
    float *hf = scratch; /* no-grad: the norm keeps no cache */
    blocknorm_fwd(lm_norm_type(m), hf, NULL, z, model_tensor(m, m->params, NORM_F_NAME), norm_f_bias(m, m->params), B,
                  D, (float)m->cfg.norm_eps);
    head_logits(logits, hf, W, B, m->V, D);
}

int lm_arena_plan(Arena *a, Model *m, int B, int T, void (*carve)(Model *, Arena *, int, int)) {
    arena_free(a);
    Arena probe;
    arena_measure(&probe);
    carve(m, &probe, B, T);
    int rc = arena_init(a, probe.peak);
    if (rc) return rc;
    carve(m, a, B, T);
    return IM_OK;
}
