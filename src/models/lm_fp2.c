/* lm_fp2.c: the "fp_mamba2" and "fp_rnn" mixer kinds of the residual LM (lm_resid.h): one
 * FPMamba2 layer (layers/fp_mamba2.h, spec fp-rnn §3.2) or one vector FP-RNN layer
 * (layers/fp_rnn.h, §3.3) per block, with the solver policy and diagnostics of lm_fp.h (shared
 * with the "fp_mamba" kind).
 *
 * Both kinds take the fp_* keys as given, whose defaults are FPMamba1's (s0 0.99, decay 0.9,
 * q_out 0.25). The reference's constants differ (spec §1.4):
 *   fp_mamba2   s0 0.99, decay 0.9, q_out 0.10, cap 100    → set fp_outlier_q 0.1
 *   fp_rnn      s0 1, decay 1 (no damping), q_out 0.10, cap 1000
 *               → set fp_step0 1 fp_decay 1 fp_outlier_q 0.1 (and fp_max_iter for the cap)
 * fp_rnn also differs in: short_conv must be on (-1 = on; 0 is rejected: the reference block
 * crashes without its convs, §9 item 5); the reference's Kronecker mixer uses
 * kron_norm spectral (the key is taken as given); its output projection is not rescaled by
 * 1/sqrt(n_layer) unless rescale_out_proj is 1 (§3.4: the reference's rule matches only the
 * name out_proj). fp_mamba2: short_conv -1 = off (the word-problem runs), bc_norm is ignored
 * (always normalised, as the reference), the reference's after-loop gate bug is fixed
 * (fp_mamba2.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../layers/fp_mamba2.h"
#include "../layers/fp_rnn.h"
#include "lm_fp.h"

static void layer_prefix(char *buf, size_t cap, int layer) { snprintf(buf, cap, "backbone.layers.%d.mixer", layer); }

static int no_dropout(const ModelCfg *c) {
    if (c->backbone_dropout > 0)
        return err_set(IM_EINVAL, "config key 'backbone_dropout': not supported by %s (use 0)", c->model);
    return IM_OK;
}

/* ==== kind "fp_mamba2" ========================================================================= */

typedef struct {
    FpMamba2Cfg c;
} M2Cfg;

typedef struct {
    int layer;
    FpMamba2W w;
    float *eff; /* owned: effective weights (θ side) or their gradients (dθ side) */
} M2W;

static int m2_init(void **cfg, const ModelCfg *c) {
    int rc = no_dropout(c);
    if (rc) return rc;
    M2Cfg *k = xcalloc(1, sizeof *k);
    rc = fp_mamba2_cfg_init(&k->c, c->d_model, c->expand, c->d_state, c->headdim, c->d_conv, c->short_conv == 1,
                            c->mixer_h_dep, c->symm_mixer, c->glu_in_loop, c->fp_n_backwards, lm_fp_layer_eps(c),
                            c->mixer_type, c->mixer_rank, c->mixer_ac, c->mixer_proj_rank, c->kron_norm);
    if (rc) {
        free(k);
        return rc;
    }
    *cfg = k;
    return IM_OK;
}

static void free_cfg(void *cfg) { free(cfg); }

static void m2_add_params(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off) {
    char prefix[PARAM_NAME_LEN];
    layer_prefix(prefix, sizeof prefix, layer);
    /* §3.4: out_proj re-drawn U(±1/√fan_in)/√n_layer (rescale_out_proj -1 = as the reference) */
    float out_scale = c->rescale_out_proj != 0 ? 1.0f / sqrtf((float)c->n_layer) : 1.0f;
    fp_mamba2_add_params(&((const M2Cfg *)cfg)->c, t, prefix, out_scale);
    ((M2W *)w_off)->layer = layer;
}

static void m2_bind(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base) {
    const M2Cfg *k = cfg;
    M2W *p = w;
    char prefix[PARAM_NAME_LEN];
    p->layer = ((const M2W *)w_off)->layer;
    layer_prefix(prefix, sizeof prefix, p->layer);
    p->eff = xcalloc(fp_mamba2_eff_floats(&k->c) + 16, sizeof(float));
    fp_mamba2_bind(&k->c, &p->w, t, base, prefix, p->eff);
}

static void m2_unbind(const void *cfg, void *w) {
    (void)cfg;
    M2W *p = w;
    fp_mamba2_unbind(&p->w);
    free(p->eff);
    p->eff = NULL;
}

static void m2_post_init(const LmMixCtx *x, void *w) {
    fp_mamba2_post_init(&((const M2Cfg *)x->cfg)->c, &((M2W *)w)->w);
}

static void m2_prepare(const LmMixCtx *x, const void *w) {
    fp_mamba2_refresh(&((const M2Cfg *)x->cfg)->c, (FpMamba2W *)&((const M2W *)w)->w);
}

static size_t m2_cache(const void *cfg, int B, int T) { return fp_mamba2_cache_floats(&((const M2Cfg *)cfg)->c, B, T); }
static size_t m2_scratch(const void *cfg, int B, int T) {
    return fp_mamba2_scratch_floats(&((const M2Cfg *)cfg)->c, B, T);
}
static size_t m2_state(const void *cfg, int B) { return fp_mamba2_state_floats(&((const M2Cfg *)cfg)->c, B); }
static size_t m2_step_scratch(const void *cfg, int B) {
    return fp_mamba2_step_scratch_floats(&((const M2Cfg *)cfg)->c, B);
}

static int m2_fwd(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache, float *scratch, int B,
                  int T) {
    const M2Cfg *k = x->cfg;
    FpoOpts o = lm_fp_solver_opts(x->m, 0);
    FpMambaStats st = {0};
    int rc = fp_mamba2_fwd(&k->c, &((const M2W *)w)->w, y, xin, &o, &st, cache, scratch, B, T);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, x->m->training ? "fp train" : "fp eval");
    return IM_OK;
}

static void m2_bwd(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy, const float *xin,
                   const float *cache, float *scratch, int B, int T) {
    const M2Cfg *k = x->cfg;
    const M2W *p = w;
    M2W *d = dw;
    /* the effective-weight gradients are per backward: map them onto (g, v) at the end */
    memset(d->eff, 0, fp_mamba2_eff_floats(&k->c) * sizeof(float));
    fp_mamba2_bwd(&k->c, &p->w, &d->w, dx, dy, xin, cache, scratch, B, T);
    fp_mamba2_wn_bwd(&k->c, &p->w, &d->w);
}

static int m2_step(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state, float *scratch,
                   int B) {
    const M2Cfg *k = x->cfg;
    FpMambaStats st = {0};
    FpoOpts o = lm_fp_solver_opts(x->m, 1);
    int rc = fp_mamba2_step(&k->c, &((const M2W *)w)->w, y, xin, state, &o, &st, scratch, B);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, "fp sequential");
    return IM_OK;
}

const LmMixerKind lm_mixer_fp_mamba2 = {
    "fp_mamba2",  sizeof(M2W), m2_init,    free_cfg, m2_add_params,   m2_bind, m2_unbind,
    m2_post_init, m2_prepare,  m2_cache,   m2_scratch, m2_state,      m2_step_scratch,
    m2_fwd,       m2_bwd,      m2_step,
};

/* ==== kind "fp_rnn" ============================================================================= */

typedef struct {
    FpRnnCfg c;
} RnCfg;

typedef struct {
    int layer;
    FpRnnW w;
    float *eff; /* owned: effective mixer weights (θ side) or their gradients (dθ side) */
} RnW;

static int rn_init(void **cfg, const ModelCfg *c) {
    int rc = no_dropout(c);
    if (rc) return rc;
    RnCfg *k = xcalloc(1, sizeof *k);
    rc = fp_rnn_cfg_init(&k->c, c->d_model, c->expand, c->d_conv, c->short_conv != 0, c->mixer_h_dep, c->symm_mixer,
                         c->fp_n_backwards, lm_fp_layer_eps(c), c->mixer_type, c->mixer_rank, c->mixer_ac,
                         c->mixer_proj_rank, c->kron_norm);
    if (rc) {
        free(k);
        return rc;
    }
    *cfg = k;
    return IM_OK;
}

static void rn_add_params(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off) {
    char prefix[PARAM_NAME_LEN];
    layer_prefix(prefix, sizeof prefix, layer);
    float out_scale = c->rescale_out_proj == 1 ? 1.0f / sqrtf((float)c->n_layer) : 1.0f;
    fp_rnn_add_params(&((const RnCfg *)cfg)->c, t, prefix, out_scale);
    ((RnW *)w_off)->layer = layer;
}

static void rn_bind(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base) {
    const RnCfg *k = cfg;
    RnW *p = w;
    char prefix[PARAM_NAME_LEN];
    p->layer = ((const RnW *)w_off)->layer;
    layer_prefix(prefix, sizeof prefix, p->layer);
    p->eff = xcalloc(fp_rnn_eff_floats(&k->c) + 16, sizeof(float));
    fp_rnn_bind(&k->c, &p->w, t, base, prefix, p->eff);
}

static void rn_unbind(const void *cfg, void *w) {
    (void)cfg;
    RnW *p = w;
    fp_rnn_unbind(&p->w);
    free(p->eff);
    p->eff = NULL;
}

static void rn_post_init(const LmMixCtx *x, void *w) { fp_rnn_post_init(&((const RnCfg *)x->cfg)->c, &((RnW *)w)->w); }

static void rn_prepare(const LmMixCtx *x, const void *w) {
    fp_rnn_refresh(&((const RnCfg *)x->cfg)->c, (FpRnnW *)&((const RnW *)w)->w);
}

static size_t rn_cache(const void *cfg, int B, int T) { return fp_rnn_cache_floats(&((const RnCfg *)cfg)->c, B, T); }
static size_t rn_scratch(const void *cfg, int B, int T) { return fp_rnn_scratch_floats(&((const RnCfg *)cfg)->c, B, T); }
static size_t rn_state(const void *cfg, int B) { return fp_rnn_state_floats(&((const RnCfg *)cfg)->c, B); }
static size_t rn_step_scratch(const void *cfg, int B) { return fp_rnn_step_scratch_floats(&((const RnCfg *)cfg)->c, B); }

static int rn_fwd(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache, float *scratch, int B,
                  int T) {
    const RnCfg *k = x->cfg;
    FpoOpts o = lm_fp_solver_opts(x->m, 0);
    FpMambaStats st = {0};
    int rc = fp_rnn_fwd(&k->c, &((const RnW *)w)->w, y, xin, &o, &st, cache, scratch, B, T);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, x->m->training ? "fp train" : "fp eval");
    return IM_OK;
}

static void rn_bwd(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy, const float *xin,
                   const float *cache, float *scratch, int B, int T) {
    const RnCfg *k = x->cfg;
    const RnW *p = w;
    RnW *d = dw;
    memset(d->eff, 0, fp_rnn_eff_floats(&k->c) * sizeof(float));
    fp_rnn_bwd(&k->c, &p->w, &d->w, dx, dy, xin, cache, scratch, B, T);
    fp_rnn_wn_bwd(&k->c, &p->w, &d->w);
}

static int rn_step(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state, float *scratch,
                   int B) {
    const RnCfg *k = x->cfg;
    FpMambaStats st = {0};
    FpoOpts o = lm_fp_solver_opts(x->m, 1);
    int rc = fp_rnn_step(&k->c, &((const RnW *)w)->w, y, xin, state, &o, &st, scratch, B);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    lm_fp_note_stats(x, st.iters, st.best_max, o.cap, "fp sequential");
    return IM_OK;
}

const LmMixerKind lm_mixer_fp_rnn = {
    "fp_rnn",     sizeof(RnW), rn_init,  free_cfg,   rn_add_params, rn_bind, rn_unbind,
    rn_post_init, rn_prepare,  rn_cache, rn_scratch, rn_state,      rn_step_scratch,
    rn_fwd,       rn_bwd,      rn_step,
};
