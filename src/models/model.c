/* model.c: generic model lifecycle and the registry of model families. */
#include "model.h"
#include "model_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

/* More parameters than this is a mistake in the config, not a model to train on a CPU: 2^34
 * floats = 69 GB per copy, and training keeps four (weights, gradients, two AdamW moments). */
#define MODEL_MAX_PARAMS ((size_t)1 << 34)

#define MODEL_EXTERN(name, sym) extern const ModelType sym;
MODEL_LIST(MODEL_EXTERN)
#undef MODEL_EXTERN

/* The registry: one entry per row of MODEL_LIST, in its order. */
#define MODEL_ENTRY(name, sym) &sym,
static const ModelType *const MODELS[] = {MODEL_LIST(MODEL_ENTRY)};
#undef MODEL_ENTRY
#define N_MODELS ((int)(sizeof MODELS / sizeof MODELS[0]))

const ModelType *model_type_find(const char *name) {
    for (int i = 0; i < N_MODELS; i++)
        if (!strcmp(MODELS[i]->name, name)) return MODELS[i];
    return NULL;
}

static const char *const FAMILY_NAMES[] = {
#define X(id, name, uses) name,
    MODEL_FAMILY_LIST(X)
#undef X
};
_Static_assert(sizeof FAMILY_NAMES / sizeof FAMILY_NAMES[0] == MODEL_N_FAMILY, "one name per ModelFamily");
static const unsigned FAMILY_USES[] = {
#define X(id, name, uses) uses,
    MODEL_FAMILY_LIST(X)
#undef X
};

unsigned model_type_cfg_uses(const ModelType *t) { return t->cfg_uses | FAMILY_USES[t->family]; }

/* "a, b and c": the registry's families that read key group `use` (for cfg_check's messages). */
static const char *users_of(unsigned use) {
    static _Thread_local char buf[256];
    const char *names[N_MODELS];
    int n = 0;
    for (int i = 0; i < N_MODELS; i++)
        if (model_type_cfg_uses(MODELS[i]) & use) names[n++] = MODELS[i]->name;
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", names[i]);
    return n ? buf : "no model";
}

int cfg_validate(const ModelCfg *c) {
    const ModelType *t = model_type_find(c->model);
    if (!t) return err_set(IM_EINVAL, "config key 'model': unknown model '%s' (%s)", c->model, model_type_names());
    return cfg_check(c, model_type_cfg_uses(t), users_of);
}

const char *model_family_name(ModelFamily f) { return f >= 0 && f < MODEL_N_FAMILY ? FAMILY_NAMES[f] : "?"; }

int model_is_fixed_point(const Model *m) { return m->type->family != MODEL_EXPLICIT; }

const char *model_type_names(void) {
    static char buf[256];
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < N_MODELS; i++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", i ? " | " : "", MODELS[i]->name);
    return buf;
}

/* n zeroed floats, 64-byte aligned (+ 64 bytes of slack), from calloc: a large block comes as fresh
 * zero pages that cost no time and no resident memory until written, so a model that loads its
 * weights in place (ckpt.h) or never trains does not pay for the buffers it does not use.
 * *block is what to free. */
static float *zeroed_floats(size_t n, void **block) {
    unsigned char *b = calloc(n * sizeof(float) + 128, 1);
    *block = b;
    return b ? (float *)(b + (64 - (uintptr_t)b % 64) % 64) : NULL;
}

void model_adopt_params(Model *m, float *params, void *map, size_t map_len) {
    free(m->params_block_);
    m->params_block_ = NULL;
    m->params = params;
    m->params_map_ = map;
    m->params_map_len_ = map_len;
}

int model_create(Model *m, const ModelCfg *cfg) {
    memset(m, 0, sizeof *m);
    int rc = cfg_validate(cfg);
    if (rc) return rc;
    m->cfg = *cfg;
    m->type = model_type_find(cfg->model);
    if (!m->type) return err_set(IM_EINVAL, "unknown model '%s' (known: %s)", cfg->model, model_type_names());
    m->V = cfg_vocab_padded(cfg);
    ptab_init(&m->tab);
    rc = m->type->build(m);
    if (rc) { model_free(m); return rc; }
    size_t total = m->tab.total;   /* floats, from the size_t products of the (bounded) tensor dims */
    if (total > MODEL_MAX_PARAMS) {
        model_free(m);
        return err_set(IM_EINVAL, "model '%s': this config has %zu parameters (%.1f GB per copy of the weights), more "
                       "than the %zu a model may have", cfg->model, total, (double)total * sizeof(float) / 1e9,
                       MODEL_MAX_PARAMS);
    }
    m->params = zeroed_floats(total, &m->params_block_);
    m->grads = zeroed_floats(total, &m->grads_block_);
    if (!m->params || !m->grads) {
        model_free(m);   /* after which m->tab is gone: report the count kept above */
        return err_set(IM_ENOMEM, "cannot allocate %zu parameters (%.1f GB for the weights and their gradients)", total,
                       (double)total * 2 * sizeof(float) / 1e9);
    }
    rng_seed(&m->rng, 0, 7);
    return IM_OK;
}

void model_free(Model *m) {
    if (m->type && m->type->free_impl) m->type->free_impl(m);
    free(m->params_block_);
    free(m->grads_block_);
    if (m->params_map_) munmap(m->params_map_, m->params_map_len_);
    ptab_free(&m->tab);
    memset(m, 0, sizeof *m);
}

void model_init_params(Model *m, uint64_t seed) {
    ptab_init_values(&m->tab, m->params, seed);
    if (m->type->post_init) m->type->post_init(m);
}

void model_zero_grad(Model *m) { k_zero(m->grads, m->tab.total); }

int model_plan(Model *m, int B, int T) {
    if (B < 1 || T < 1) return err_set(IM_EINVAL, "batch %d and length %d must be >= 1", B, T);
    if ((long long)B * T > MODEL_MAX_TOKENS)
        return err_set(IM_EINVAL, "batch %d x length %d = %lld tokens in one forward is more than %d (lower the batch)",
                       B, T, (long long)B * T, MODEL_MAX_TOKENS);
    /* evaluation needs no backward caches: a mode switch re-plans (implicit models size the
     * training arena by the number of differentiable steps) */
    if (B == m->B && T == m->T && m->planned_training == m->training && m->planned_no_grad == m->no_grad)
        return IM_OK;
    int rc = m->type->plan(m, B, T);
    if (!rc) { m->B = B; m->T = T; m->planned_training = m->training; m->planned_no_grad = m->no_grad; }
    return rc;
}

int model_fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    int rc = model_plan(m, B, T);
    if (rc) return rc;
    if ((rc = model_check_ids(m, ids, (long)B * T, "input"))) return rc;
    m->fp_conv = m->fp_extended = -1;   /* the model sets them where a solve has a tolerance */
    return m->type->fwd(m, ids, targets, B, T, loss);
}

void model_bwd(Model *m) { m->type->bwd(m); }

int model_state_init(Model *m, int B) {
    if (B < 1) return err_set(IM_EINVAL, "batch %d must be >= 1", B);
    m->pos = 0;
    m->step_B = B;
    return m->type->state_init(m, B);
}

int model_step(Model *m, const int *ids, float *logits) {
    CHECK(m->step_B > 0, "model_step before model_state_init");
    int rc = model_check_ids(m, ids, m->step_B, "input");
    if (rc) return rc;
    m->fp_conv = -1;
    rc = m->type->step(m, ids, logits);
    if (!rc) m->pos++;
    return rc;
}

int model_spectral_radius(Model *m, const int *ids, int B, int T, int iters, double *out) {
    if (!m->type->spectral_radius)
        return err_set(IM_EINVAL, "model '%s' has no fixed point: the spectral radius applies to implicit models", m->type->name);
    if (iters < 1) return err_set(IM_EINVAL, "spectral radius needs at least 1 power iteration");
    int rc = model_check_ids(m, ids, (long)B * T, "input");
    return rc ? rc : m->type->spectral_radius(m, ids, B, T, iters, out);
}

float *model_tensor(const Model *m, float *block, const char *name) {
    const ParamInfo *p = ptab_find(&m->tab, name);
    CHECK(p, "no parameter named %s", name);
    return block + p->offset;
}

int model_check_ids(const Model *m, const int *ids, long n, const char *what) {
    for (long i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return err_set(IM_EINVAL, "%s token %d at position %ld is out of range 0..%d", what, ids[i], i,
                           m->cfg.vocab_size - 1);
    return IM_OK;
}
