/* optim.c: see optim.h. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void adamw_cfg_default(AdamWCfg *c) {
    c->lr = 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip = 1.0f;
}

int adamw_init(AdamW *o, const Model *m, const AdamWCfg *c) {
    memset(o, 0, sizeof *o);
    o->cfg = *c;
    o->n = m->tab.total;
    o->m = calloc(o->n ? o->n : 1, sizeof(float));
    o->v = calloc(o->n ? o->n : 1, sizeof(float));
    if (!o->m || !o->v) { adamw_free(o); return err_set(IM_ENOMEM, "cannot allocate AdamW moments"); }
    return IM_OK;
}

void adamw_free(AdamW *o) { free(o->m); free(o->v); memset(o, 0, sizeof *o); }

double optim_grad_norm(const Model *m) { return sqrt(k_sumsq(m->grads, m->tab.total)); }

double adamw_step(AdamW *o, Model *m, float lr) {
    double norm = optim_grad_norm(m);
    if (!isfinite(norm)) return -1;
    float gscale = 1.0f;
    if (o->cfg.clip > 0) {
        double coef = o->cfg.clip / (norm + 1e-6);
        if (coef < 1) gscale = (float)coef;
    }
    o->t++;
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        k_adamw(m->params + p->offset, o->m + p->offset, o->v + p->offset, m->grads + p->offset, p->numel, lr,
                o->cfg.beta1, o->cfg.beta2, o->cfg.eps, p->decay ? o->cfg.weight_decay : 0.0f, gscale, o->t);
    }
    return norm;
}
