/* test_untied.c: LMs with their own output head (tie_embeddings 0, criterion.decoder.weight V x D):
 * the head is in the parameter table, forward / backward agree with finite differences (head,
 * embedding, norm_f, a layer weight), step x T equals the parallel logits, the optimizer moves the
 * head, a checkpoint round-trips it, and with the head set to the embedding the logits are those of
 * the tied model. The transformers file (lm_head.weight) is tested by test_interop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/models/ckpt.h"
#include "gradcheck.h"
#include "model_check.h"
#include "../src/train/optim.h"

#define HEAD "criterion.decoder.weight"
#define EMB "word_emb.emb.weight"

static char dir[64];

static int make_model(Model *m, const char *model, int tie) {
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", model);
    static const char *const kv[] = {"vocab_size", "11", "d_model", "8", "n_layer", "2", "n_head", "2", "d_state", "4",
                                     "headdim", "4", "f_max_iter", "40", "b_max_iter", "40", NULL};
    for (int i = 0; kv[i]; i += 2) cfg_set(&c, kv[i], kv[i + 1]);
    if (!strcmp(model, "llama") || !strcmp(model, "implicit_llama")) cfg_set(&c, "d_inner", "12");
    cfg_set(&c, "tie_embeddings", tie ? "1" : "0");
    int rc = model_create(m, &c);
    if (!rc) model_init_params(m, 5);
    return rc;
}

/* weights away from the tiny init, so that every gradient is visible */
static void spread(Model *m, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed, 3);
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        float *x = m->params + p->offset;
        if (!strcmp(p->name, EMB) || !strcmp(p->name, HEAD)) th_fill_uniform(x, p->numel, &r, -1.f, 1.f);
        else if (p->init == INIT_ONE) for (size_t j = 0; j < p->numel; j++) x[j] = 1.f + 0.2f * rng_normal(&r);
        else if (p->init == INIT_NORMAL || p->init == INIT_UNIFORM)
            for (size_t j = 0; j < p->numel; j++) x[j] *= 1.5f;
    }
}

enum { B = 2, T = 5 };

static void fill(int *ids, int *tg, int V, Rng *r) {
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int)rng_below(r, (uint32_t)V);
        tg[i] = i % 4 == 1 ? IGNORE_INDEX : (int)rng_below(r, (uint32_t)V);
    }
}

/* FD on the head (every model) and, for the explicit ones, the embedding, norm_f and a layer
 * weight (the implicit LM's other gradients come through its solver, tested elsewhere; dL/dW_head
 * does not: the head does not change z*). */
static void grads(const char *model, int explicit_lm, Rng *r) {
    Model m;
    TH_CHECK(make_model(&m, model, 0) == 0, "%s: %s", model, err_msg());
    spread(&m, 7);
    const ParamInfo *h = ptab_find(&m.tab, HEAD), *e = ptab_find(&m.tab, EMB);
    TH_CHECK(h && h->ndim == 2 && h->shape[0] == m.V && h->shape[1] == m.cfg.d_model && h->decay == 1,
             "%s: the head is a decayed (V, D) parameter", model);
    int ids[B * T], tg[B * T];
    fill(ids, tg, m.cfg.vocab_size, r);
    GradModelCtx c = {&m, ids, tg, B, T};
    m.training = 1;
    char name[64];
    snprintf(name, sizeof name, "%s untied head FD", model);
    GradCase gc = {.name = name, .loss = grad_model_loss, .bwd = grad_model_bwd, .ctx = &c, .h = 1e-2f, .tol = 1e-2};
    add_tensor(&gc, HEAD, m.params + h->offset, m.grads + h->offset, h->numel, 8);
    if (explicit_lm) {
        static const char *more[] = {EMB, "backbone.norm_f.weight", "backbone.layers.1.mixer.out_proj.weight",
                                     "backbone.layers.1.mixer.wq.weight", "backbone.layers.1.mlp.fc2.weight"};
        for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
            const ParamInfo *p = ptab_find(&m.tab, more[i]);
            if (p) add_tensor(&gc, p->name, m.params + p->offset, m.grads + p->offset, p->numel, 6);
        }
    }
    run_grad_case(&gc, r);
    /* the embedding's gradient is the lookup's only: rows of tokens that never occur stay 0 */
    memset(m.grads, 0, m.tab.total * sizeof(float));
    grad_model_bwd(&c);
    int seen[64] = {0}, stray = 0;
    for (int i = 0; i < B * T; i++) seen[ids[i]] = 1;
    for (int v = 0; v < m.V; v++)
        for (int d = 0; !seen[v] && d < m.cfg.d_model; d++) stray |= m.grads[e->offset + (size_t)v * m.cfg.d_model + d] != 0;
    TH_CHECK(!stray, "%s: an untied head writes no gradient into the embedding", model);
    model_free(&m);
}

/* step x T == the parallel logits (explicit LMs: the fixed-point models solve each to their own
 * tolerance); the optimizer moves the head */
static void step_and_train(const char *model, int check_step, Rng *r) {
    Model m;
    TH_CHECK(make_model(&m, model, 0) == 0, "%s: %s", model, err_msg());
    spread(&m, 9);
    int ids[B * T], tg[B * T];
    fill(ids, tg, m.cfg.vocab_size, r);
    double worst = th_step_vs_parallel(&m, ids, B, T, model, NULL);
    TH_CHECK(!check_step || worst <= 1e-5, "%s: step vs parallel logits rel err %.3g", model, worst);
    if (check_step) printf("  %-15s untied: step vs parallel logits rel err %.2e\n", model, worst);
    const ParamInfo *h = ptab_find(&m.tab, HEAD);
    float *before = th_alloc(h->numel);
    memcpy(before, m.params + h->offset, h->numel * sizeof(float));
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    AdamW o;
    TH_CHECK(adamw_init(&o, &m, &oc) == 0, "adamw: %s", err_msg());
    m.training = 1;
    memset(m.grads, 0, m.tab.total * sizeof(float));
    float l0 = 0, l1 = 0;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &l0) == 0, "%s train fwd: %s", model, err_msg());
    model_bwd(&m);
    adamw_step(&o, &m, 1e-2f);
    int moved = 0;
    for (size_t j = 0; j < h->numel; j++) moved += m.params[h->offset + j] != before[j];
    TH_CHECK(moved > 0, "%s: the optimizer step leaves the head unchanged", model);
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &l1) == 0 && l1 < l0, "%s: one step does not lower the loss (%g -> %g)", model,
             l0, l1);
    adamw_free(&o);
    free(before);
    model_free(&m);
}

/* save / load keeps the head and the key; a head equal to the embedding gives the tied logits */
static void round_trip(const char *model) {
    Model m, r, t;
    char p[128];
    snprintf(p, sizeof p, "%s/untied.safetensors", dir);
    TH_CHECK(make_model(&m, model, 0) == 0, "%s: %s", model, err_msg());
    spread(&m, 13);
    TH_CHECK(ckpt_save(&m, p, NULL) == 0, "%s save: %s", model, err_msg());
    TH_CHECK(ckpt_load(&r, p, NULL) == 0, "%s load: %s", model, err_msg());
    TH_CHECK(r.cfg.tie_embeddings == 0 && ptab_find(&r.tab, HEAD) && r.tab.total == m.tab.total &&
                 !memcmp(r.params, m.params, m.tab.total * sizeof(float)),
             "%s: the untied head does not round-trip", model);
    model_free(&r);
    /* the tied model with the same weights, head := embedding */
    TH_CHECK(make_model(&t, model, 1) == 0, "%s tied: %s", model, err_msg());
    TH_CHECK(t.tab.total < m.tab.total && t.tab.n + 1 == m.tab.n, "%s: the head is the one extra tensor", model);
    for (int i = 0; i < t.tab.n; i++) {
        const ParamInfo *q = &t.tab.p[i], *s = ptab_find(&m.tab, q->name);
        memcpy(t.params + q->offset, m.params + s->offset, q->numel * sizeof(float));
    }
    const ParamInfo *e = ptab_find(&m.tab, EMB), *h = ptab_find(&m.tab, HEAD);
    memcpy(m.params + h->offset, m.params + e->offset, h->numel * sizeof(float));
    int ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 7 + 3) % m.cfg.vocab_size;
    TH_CHECK(model_fwd(&m, ids, NULL, B, T, NULL) == 0 && model_fwd(&t, ids, NULL, B, T, NULL) == 0, "%s fwd: %s", model,
             err_msg());
    /* the same kernels on the same numbers */
    TH_CHECK(!memcmp(m.logits, t.logits, sizeof(float) * B * T * m.V), "%s: head = embedding differs from the tied model",
             model);
    model_free(&t);
    model_free(&m);
    unlink(p);
}

static void refusals(void) {
    Model m;
    TH_CHECK(make_model(&m, "deltanet", 0) == IM_EINVAL && strstr(err_msg(), "tie_embeddings"),
             "deltanet with tie_embeddings 0: %s", err_msg());
    ModelCfg c;
    cfg_defaults(&c);
    TH_CHECK(cfg_set(&c, "tie_embeddings", "2") != 0 || cfg_validate(&c) != 0, "tie_embeddings 2 is out of range");
}

int main(void) {
    th_name = "test_untied";
    snprintf(dir, sizeof dir, "/tmp/implicit-test-untied-%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    TH_CHECK(system(cmd) == 0, "mkdir");
    Rng r;
    rng_seed(&r, 1, 0);
    static const char *const explicit_lms[] = {"llama", "mamba2", "mamba1", "lstm"};
    for (size_t i = 0; i < sizeof explicit_lms / sizeof *explicit_lms; i++) {
        grads(explicit_lms[i], 1, &r);
        step_and_train(explicit_lms[i], 1, &r);
        round_trip(explicit_lms[i]);
    }
    /* the fixed-point LMs share the head code (lm_common.c; implicit_lm.c) */
    static const char *const fixed_point_lms[] = {"implicit_llama", "implicit_mamba2", "fp_mamba2"};
    for (size_t i = 0; i < sizeof fixed_point_lms / sizeof *fixed_point_lms; i++) {
        grads(fixed_point_lms[i], 0, &r);
        step_and_train(fixed_point_lms[i], 0, &r);
        round_trip(fixed_point_lms[i]);
    }
    refusals();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return th_done();
}
