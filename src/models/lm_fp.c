/* lm_fp.c: the "fp_mamba" mixer kind of the residual LM (lm_resid.h): one FP-Mamba layer
 * (layers/fp_mamba.h) per block, and the model-level side of the FixedPointOptimizer (spec
 * fp-rnn §1.4, §1.6): which options a forward uses, the per-batch ℓ_max, the diagnostics.
 *
 * The solver policy (options per forward, random ℓ_max, diagnostics) is written here once and
 * shared through lm_fp.h with the fp_mamba2 / fp_rnn kinds (lm_fp2.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../layers/fp_mamba.h"
#include "lm_fp.h"

typedef struct {
    FpMambaCfg c;
} FpKindCfg;

typedef struct {
    int layer;
    FpMambaW w;
    float *eff;         /* owned: effective weights (θ side) or their gradients (dθ side) */
} FpKindW;

static int fpk_init(void **cfg, const ModelCfg *c) {
    if (c->backbone_dropout > 0)
        return err_set(IM_EINVAL, "config key 'backbone_dropout': not supported by fp_mamba (use 0)");
    FpKindCfg *k = calloc(1, sizeof *k);
    CHECK(k, "out of memory");
    int R = c->dt_rank > 0 ? c->dt_rank : (c->d_model + 15) / 16;
    int conv = c->short_conv == 1; /* -1 = the word-problem default: no conv */
    int rc = fp_mamba_cfg_init(&k->c, c->d_model, c->expand, c->d_state, R, c->d_conv, conv, c->mixer_h_dep,
                               c->symm_mixer, c->bc_norm, c->glu_in_loop, c->fp_n_backwards, lm_fp_layer_eps(c),
                               c->mixer_type, c->mixer_rank, c->mixer_ac, c->mixer_proj_rank, c->kron_norm);
    if (rc) {
        free(k);
        return rc;
    }
    *cfg = k;
    return IM_OK;
}

static void fpk_free_cfg(void *cfg) { free(cfg); }

static void layer_prefix(char *buf, size_t cap, int layer) { snprintf(buf, cap, "backbone.layers.%d.mixer", layer); }

static void fpk_add_params(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off) {
    const FpKindCfg *k = cfg;
    char prefix[PARAM_NAME_LEN];
    layer_prefix(prefix, sizeof prefix, layer);
    /* §3.4: out_proj re-drawn U(±1/√fan_in)/√n_layer (rescale_out_proj -1 = as the reference) */
    float out_scale = c->rescale_out_proj != 0 ? 1.0f / sqrtf((float)c->n_layer) : 1.0f;
    fp_mamba_add_params(&k->c, t, prefix, out_scale);
    ((FpKindW *)w_off)->layer = layer;
}

static void fpk_bind(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base) {
    const FpKindCfg *k = cfg;
    FpKindW *p = w;
    char prefix[PARAM_NAME_LEN];
    p->layer = ((const FpKindW *)w_off)->layer;
    layer_prefix(prefix, sizeof prefix, p->layer);
    p->eff = calloc(fp_mamba_eff_floats(&k->c) + 16, sizeof(float));
    CHECK(p->eff, "out of memory");
    fp_mamba_bind(&k->c, &p->w, t, base, prefix, p->eff);
}

static void fpk_unbind(const void *cfg, void *w) {
    (void)cfg;
    FpKindW *p = w;
    fp_mamba_unbind(&p->w);
    free(p->eff);
    p->eff = NULL;
}

static void fpk_post_init(const LmMixCtx *x, void *w) {
    const FpKindCfg *k = x->cfg;
    fp_mamba_post_init(&k->c, &((FpKindW *)w)->w);
}

static void fpk_prepare(const LmMixCtx *x, const void *w) {
    const FpKindCfg *k = x->cfg;
    fp_mamba_refresh(&k->c, (FpMambaW *)&((const FpKindW *)w)->w);
}

static size_t fpk_cache(const void *cfg, int B, int T) { return fp_mamba_cache_floats(&((const FpKindCfg *)cfg)->c, B, T); }
static size_t fpk_scratch(const void *cfg, int B, int T) { return fp_mamba_scratch_floats(&((const FpKindCfg *)cfg)->c, B, T); }
static size_t fpk_state(const void *cfg, int B) { return fp_mamba_state_floats(&((const FpKindCfg *)cfg)->c, B); }
static size_t fpk_step_scratch(const void *cfg, int B) { return fp_mamba_step_scratch_floats(&((const FpKindCfg *)cfg)->c, B); }

/* ---- the shared solver policy (lm_fp.h) ------------------------------------------------------ */

FpoOpts lm_fp_solver_opts(const Model *m, int step) {
    const ModelCfg *c = &m->cfg;
    int training = m->training && !step;
    FpoOpts o;
    fpo_opts_default(&o);
    o.step0 = (float)c->fp_step0;
    o.decay = (float)c->fp_decay;
    o.patience = c->fp_patience;
    o.thr = c->fp_threshold;
    o.quantile = training ? 1.0 - c->fp_outlier_q : 1.0;
    o.cap = c->fp_eval_cap;
    if (!training) return o;
    if (c->fp_max_iter > 0) {
        o.cap = c->fp_max_iter;
        return o;
    }
    Rng r;
    rng_seed(&r, rng_hash(0x6c6d6178, (uint64_t)m->train_step, 0), 11);
    double scale = !strcmp(c->fp_gamma, "paper") ? 1.0 : c->fp_gamma_k / 16.0 + 1.0;
    double g = ceil(fpo_gamma(&r, 4.0, scale));
    o.cap = g < 1 ? 1 : g > 100000 ? 100000 : (int)g;
    return o;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void lm_fp_note_stats(const LmMixCtx *x, double iters, double best_max, int cap, const char *phase) {
    Model *m = x->m;
    int L = m->cfg.n_layer;
    if (x->layer == 0) {
        m->fp_iters = 0;
        m->fp_iters_ref = 0;
        m->fp_res = 0;
        m->fp_res_max = 0;
    }
    m->fp_iters += iters / L;
    m->fp_iters_ref += (iters + 1) / L; /* the reference logs iter_idx + 1 per solve */
    m->fp_res += best_max / L;
    if (best_max > m->fp_res_max) m->fp_res_max = best_max;
    m->fp_step_max = cap;
    m->fp_phase = phase;
    x->layer_stat[x->layer] = iters;
    if (x->layer == L - 1) {
        double *v = x->layer_stat + L; /* the wrapper gives 2·n_layer slots: values, then a sorted copy */
        memcpy(v, x->layer_stat, (size_t)L * sizeof *v);
        qsort(v, (size_t)L, sizeof *v, cmp_double);
        m->fp_iters_median = L % 2 ? v[L / 2] : 0.5 * (v[L / 2 - 1] + v[L / 2]);
    }
}

static int fpk_fwd(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache, float *scratch,
                   int B, int T) {
    const FpKindCfg *k = x->cfg;
    FpoOpts o = lm_fp_solver_opts(x->m, 0);
    FpMambaStats st = {0};
    int rc = fp_mamba_fwd(&k->c, &((const FpKindW *)w)->w, y, xin, &o, &st, cache, scratch, B, T);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, x->m->training ? "fp train" : "fp eval");
    return IM_OK;
}

static void fpk_bwd(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy, const float *xin,
                    const float *cache, float *scratch, int B, int T) {
    const FpKindCfg *k = x->cfg;
    const FpKindW *p = w;
    FpKindW *d = dw;
    /* the effective-weight gradients are per backward: map them onto (g, v) at the end */
    memset(d->eff, 0, fp_mamba_eff_floats(&k->c) * sizeof(float));
    fp_mamba_bwd(&k->c, &p->w, &d->w, dx, dy, xin, cache, scratch, B, T);
    fp_mamba_wn_bwd(&k->c, &p->w, &d->w);
}

static int fpk_step(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state, float *scratch,
                    int B) {
    const FpKindCfg *k = x->cfg;
    FpMambaStats st = {0};
    FpoOpts o = lm_fp_solver_opts(x->m, 1);
    int rc = fp_mamba_step(&k->c, &((const FpKindW *)w)->w, y, xin, state, &o, &st, scratch, B);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, "fp sequential");
    return IM_OK;
}

const LmMixerKind lm_mixer_fp_mamba = {
    "fp_mamba", sizeof(FpKindW), fpk_init,    fpk_free_cfg, fpk_add_params,   fpk_bind, fpk_unbind,
    fpk_post_init, fpk_prepare,  fpk_cache,   fpk_scratch,  fpk_state,        fpk_step_scratch,
    fpk_fwd,    fpk_bwd,         fpk_step,
};
