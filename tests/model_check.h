/* model_check.h: making, stepping and checking whole models, shared by the model tests (the
 * PyTorch references through refload.h). Include after th.h. */
#ifndef IMPLICIT_MODEL_CHECK_H
#define IMPLICIT_MODEL_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/models/ckpt.h"
#include "../src/models/model.h"
#include "refload.h"

/* A model of family `model` with the config keys kv (NULL-terminated name / value pairs | NULL)
 * over the defaults, its parameters zero (model_init_params is the caller's). Returns the first
 * failing status (an unknown key, a bad config) with its message. */
static inline int th_model_create(Model *m, const char *model, const char *const *kv) {
    ModelCfg c;
    cfg_defaults(&c);
    int rc = cfg_set(&c, "model", model);
    for (int i = 0; !rc && kv && kv[i]; i += 2) rc = cfg_set(&c, kv[i], kv[i + 1]);
    return rc ? rc : model_create(m, &c);
}

/* Feeds ids:(B,T) column by column through model_step from a fresh state. out:(B,T,V) receives
 * every step's logits in the layout of a forward's m->logits; iters:(T) | NULL each step's
 * m->fp_iters. A failed call is a check failure named after `label`; returns its status. */
static inline int th_step_all(Model *m, const int *ids, int B, int T, float *out, double *iters, const char *label) {
    size_t V = (size_t)m->V;
    float *lg = th_alloc((size_t)B * V);
    int *col = malloc(sizeof(int) * (size_t)B);
    int rc = model_state_init(m, B);
    TH_CHECK(rc == 0, "%s state: %s", label, err_msg());
    for (int t = 0; t < T && !rc; t++) {
        for (int b = 0; b < B; b++) col[b] = ids[(size_t)b * T + t];
        rc = model_step(m, col, lg);
        TH_CHECK(rc == 0, "%s step %d: %s", label, t, err_msg());
        for (int b = 0; b < B; b++) memcpy(out + ((size_t)b * T + t) * V, lg + (size_t)b * V, sizeof(float) * V);
        if (iters) iters[t] = m->fp_iters;
    }
    free(lg); free(col);
    return rc;
}

/* Runs the parallel forward on ids (B x T), then th_step_all from a fresh state, and returns the
 * largest relative error of a step's logits row against the forward's row for that token (per
 * row, so every sequence counts on its own). *iters_per_token | NULL: the steps' mean fp_iters. A
 * failed call is a check failure named after `label`. */
static inline double th_step_vs_parallel(Model *m, const int *ids, int B, int T, const char *label,
                                         double *iters_per_token) {
    TH_CHECK(model_fwd(m, ids, NULL, B, T, NULL) == 0, "%s fwd: %s", label, err_msg());
    size_t V = (size_t)m->V, n = (size_t)B * T * V;
    float *full = th_alloc(n), *steps = th_alloc(n);
    double *iters = calloc((size_t)T, sizeof(double));
    memcpy(full, m->logits, sizeof(float) * n);
    th_step_all(m, ids, B, T, steps, iters, label);
    double worst = 0, sum = 0;
    for (size_t r = 0; r < (size_t)B * T; r++) worst = fmax(worst, th_rel_err(steps + r * V, full + r * V, V));
    for (int t = 0; t < T; t++) sum += iters[t];
    if (iters_per_token) *iters_per_token = sum / T;
    free(full); free(steps); free(iters);
    return worst;
}

/* Opens the PyTorch reference at path and loads it as a checkpoint, as the CLI would: 0 with *f
 * and *m open and *B, *T the reference batch. kv: config keys set over the reference's (pairs,
 * NULL-terminated) | NULL. A failure is a check failure, and leaves nothing open. */
static inline int th_ref_open(StFile *f, Model *m, const char *path, const char *const *kv, int *B, int *T) {
    if (st_read(f, path)) { TH_CHECK(0, "%s: %s", path, err_msg()); return -1; }
    ModelCfg c;
    int rc = ref_config(f, &c, B, T);
    TH_CHECK(rc == 0, "%s: cannot read the reference config", path);
    for (int i = 0; !rc && kv && kv[i]; i += 2) rc = cfg_set(&c, kv[i], kv[i + 1]);
    if (!rc) {
        rc = ckpt_load(m, path, &c);
        TH_CHECK(rc == 0, "%s: load: %s", path, err_msg());
    }
    if (rc) st_free(f);
    return rc;
}

/* Largest relative error of m's gradients (dθ) against the reference's tensors
 * "<prefix><parameter name>", each tensor checked below tol; a missing one is a failure. */
static inline double th_ref_grads(const Model *m, const StFile *f, const char *prefix, double tol, const char *label) {
    double worst = 0;
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        char name[300];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const float *g = ref_tensor(f, name, p->numel);
        TH_CHECK(g != NULL, "%s: the reference lacks %s", label, name);
        if (!g) continue;
        double e = th_rel_err(m->grads + p->offset, g, p->numel);
        worst = fmax(worst, e);
        TH_CHECK(e < tol, "%s: gradient %s rel err %.3g", label, p->name, e);
    }
    return worst;
}

#endif
