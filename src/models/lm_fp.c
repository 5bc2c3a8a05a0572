/* lm_fp.c: the fixed-point mixer kinds of the residual LM (lm_resid.h), one Fixed-Point RNN layer
 * per block: "fp_mamba" (FPMamba1, layers/fp_mamba.h, spec fp-rnn §3.1), "fp_mamba2" (FPMamba2,
 * §3.2) and "fp_rnn" (the vector FP-RNN, §3.3). The three are one kind over the layer interface
 * of layers/fp_layer.h; a family row (FpFamily) adds what is its own: its layer row, its cfg
 * from the model keys and its out_proj rule.
 *
 * The kind is also the model side of the layers' solve. The layer hands its map to the solver the
 * kind passes (an FpSolve over fixedpoint/fp.h's table): the model key fp_solver picks the row
 * (fixed_point_optimizer, the reference's FixedPointOptimizer, by default; every row with
 * FP_USE_FPRNN may be chosen), and the options of each forward follow the policy of spec §1.4,
 * §1.6:
 *   training   quantile 1 − fp_outlier_q of the batch, cap ℓ_max = fp_max_iter, or, when
 *              fp_max_iter < 0, ceil(Gamma(4, fp_gamma_k/16 + 1)) ("code") or ceil(Gamma(4, 1))
 *              ("paper") drawn once per optimizer step for all layers (a pure function of the
 *              step, so a resumed run draws the same values)
 *   evaluation quantile 1 (every sequence), cap fp_eval_cap; sequential steps use the same rule
 *              per token.
 * tol is fp_threshold for every solver (the other solvers stop on their relative residual); the
 * options are read from the live config at every call, so evaluation-time overrides
 * (`implicit eval --fp_eval_cap N --max_iters ...`) apply without rebuilding the model.
 *
 * The families take the fp_* keys as given, whose defaults are FPMamba1's (s0 0.99, decay 0.9,
 * q_out 0.25). The reference's constants differ (spec §1.4):
 *   fp_mamba2   s0 0.99, decay 0.9, q_out 0.10, cap 100    → set fp_outlier_q 0.1
 *   fp_rnn      s0 1, decay 1 (no damping), q_out 0.10, cap 1000
 *               → set fp_step0 1 fp_decay 1 fp_outlier_q 0.1 (and fp_max_iter for the cap)
 * fp_rnn also differs in: short_conv must be on (-1 = on; 0 is rejected: the reference block
 * crashes without its convs, §9 item 5); the reference's Kronecker mixer uses kron_norm spectral
 * (the key is taken as given); its output projection is not rescaled by 1/sqrt(n_layer) unless
 * rescale_out_proj is 1 (§3.4: the reference's rule matches only the name out_proj). fp_mamba2:
 * short_conv -1 = off (the word-problem runs), bc_norm is ignored (always normalised, as the
 * reference), the reference's after-loop gate bug is fixed (fp_mamba2.h). fp_mamba: short_conv
 * -1 = off.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../fixedpoint/fp.h"
#include "../fixedpoint/fpo.h"
#include "../layers/fp_mamba.h"
#include "../layers/fp_mamba2.h"
#include "../layers/fp_rnn.h"
#include "lm_resid.h"

/* The cfgs and weight structs of the families (the kind's memory holds any of them). */
typedef union {
    FpMambaCfg m1;
    FpMamba2Cfg m2;
    FpRnnCfg rn;
} FamCfg;

typedef union {
    FpMambaW m1;
    FpMamba2W m2;
    FpRnnW rn;
} FamW;

typedef struct {
    const FpLayerOps *layer;
    int (*cfg_init)(FamCfg *k, const ModelCfg *c, float eps);
    int rescale_by_default; /* rescale_out_proj -1 rescales out_proj by 1/sqrt(n_layer) (spec §3.4) */
} FpFamily;

typedef struct {
    const FpFamily *fam;
    FpOpts solve; /* the solver row and its history sizes (fixed at build); the rest per call */
    FamCfg c;
} FpKindCfg;

typedef struct {
    int layer;
    float *eff; /* owned: effective weights (θ side) or their gradients (dθ side) */
    FamW w;
} FpKindW;

/* ---- the families ------------------------------------------------------------------------------ */

static int m1_cfg(FamCfg *k, const ModelCfg *c, float eps) {
    int R = c->dt_rank > 0 ? c->dt_rank : (c->d_model + 15) / 16;
    int conv = c->short_conv == 1; /* -1 = the word-problem default: no conv */
    return fp_mamba_cfg_init(&k->m1, c->d_model, c->expand, c->d_state, R, c->d_conv, conv, c->mixer_h_dep,
                             c->symm_mixer, c->bc_norm, c->glu_in_loop, c->fp_n_backwards, eps, c->mixer_type,
                             c->mixer_rank, c->mixer_ac, c->mixer_proj_rank, c->kron_norm);
}

static int m2_cfg(FamCfg *k, const ModelCfg *c, float eps) {
    return fp_mamba2_cfg_init(&k->m2, c->d_model, c->expand, c->d_state, c->headdim, c->d_conv, c->short_conv == 1,
                              c->mixer_h_dep, c->symm_mixer, c->glu_in_loop, c->fp_n_backwards, eps, c->mixer_type,
                              c->mixer_rank, c->mixer_ac, c->mixer_proj_rank, c->kron_norm);
}

static int rn_cfg(FamCfg *k, const ModelCfg *c, float eps) {
    return fp_rnn_cfg_init(&k->rn, c->d_model, c->expand, c->d_conv, c->short_conv != 0, c->mixer_h_dep,
                           c->symm_mixer, c->fp_n_backwards, eps, c->mixer_type, c->mixer_rank, c->mixer_ac,
                           c->mixer_proj_rank, c->kron_norm);
}

static const FpFamily FAM_M1 = {&fp_mamba_layer, m1_cfg, 1};
static const FpFamily FAM_M2 = {&fp_mamba2_layer, m2_cfg, 1};
static const FpFamily FAM_RN = {&fp_rnn_layer, rn_cfg, 0};

/* ---- the kind ---------------------------------------------------------------------------------- */

static int kind_init(void **cfg, const ModelCfg *c, const FpFamily *fam) {
    if (c->backbone_dropout > 0)
        return err_set(IM_EINVAL, "config key 'backbone_dropout': not supported by %s (use 0)", c->model);
    FpKindCfg *k = xcalloc(1, sizeof *k);
    k->fam = fam;
    /* the epsilon inside the layer: mixer_norm_eps when set, else norm_eps (the reference sets the
     * two apart: its word-problem and arithmetic runs pass norm_eps 1e-6 to the layer while the
     * block norms keep 1e-5) */
    float eps = (float)(c->mixer_norm_eps > 0 ? c->mixer_norm_eps : c->norm_eps);
    int rc = fam->cfg_init(&k->c, c, eps);
    if (rc) {
        free(k);
        return rc;
    }
    fp_opts_default(&k->solve);
    k->solve.solver = (FpSolver)fp_solver_parse(c->fp_solver, FP_USE_FPRNN); /* validated in config.c */
    k->solve.stop = FP_STOP_REL;
    k->solve.anderson_m = c->anderson_m;
    k->solve.anderson_lambda = c->anderson_lambda;
    k->solve.broyden_m = c->broyden_m;
    *cfg = k;
    return IM_OK;
}

static int m1_init(void **cfg, const ModelCfg *c) { return kind_init(cfg, c, &FAM_M1); }
static int m2_init(void **cfg, const ModelCfg *c) { return kind_init(cfg, c, &FAM_M2); }
static int rn_init(void **cfg, const ModelCfg *c) { return kind_init(cfg, c, &FAM_RN); }

static void free_cfg(void *cfg) { free(cfg); }

static const FpLayerOps *layer_of(const void *cfg) { return ((const FpKindCfg *)cfg)->fam->layer; }

static void layer_prefix(char *buf, size_t cap, int layer) { snprintf(buf, cap, "backbone.layers.%d.mixer", layer); }

static void add_params(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off) {
    const FpKindCfg *k = cfg;
    char prefix[PARAM_NAME_LEN];
    layer_prefix(prefix, sizeof prefix, layer);
    /* §3.4: out_proj re-drawn U(±1/√fan_in)/√n_layer */
    int rescale = c->rescale_out_proj == 1 || (c->rescale_out_proj == -1 && k->fam->rescale_by_default);
    float out_scale = rescale ? 1.0f / sqrtf((float)c->n_layer) : 1.0f;
    fp_layer_add_params(k->fam->layer, &k->c, t, prefix, out_scale);
    ((FpKindW *)w_off)->layer = layer;
}

static void bind(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base) {
    const FpKindCfg *k = cfg;
    FpKindW *p = w;
    char prefix[PARAM_NAME_LEN];
    p->layer = ((const FpKindW *)w_off)->layer;
    layer_prefix(prefix, sizeof prefix, p->layer);
    p->eff = xcalloc(fp_layer_eff_floats(k->fam->layer, &k->c) + 16, sizeof(float));
    fp_layer_bind(k->fam->layer, &k->c, &p->w, t, base, prefix, p->eff);
}

static void unbind(const void *cfg, void *w) {
    FpKindW *p = w;
    fp_layer_unbind(layer_of(cfg), &p->w);
    free(p->eff);
    p->eff = NULL;
}

static void post_init(const LmMixCtx *x, void *w) {
    const FpKindCfg *k = x->cfg;
    fp_layer_post_init(k->fam->layer, &k->c, &((FpKindW *)w)->w);
}

static void prepare(const LmMixCtx *x, const void *w) {
    const FpKindCfg *k = x->cfg;
    fp_layer_refresh(k->fam->layer, &k->c, (void *)&((const FpKindW *)w)->w);
}

/* The layer's scratch, then the solver's for the map of B samples of T tokens. */
static size_t layer_scratch(const FpKindCfg *k, int B, int T) {
    const FpLayerOps *L = k->fam->layer;
    return T ? fp_layer_scratch_floats(L, &k->c, B, T) : fp_layer_step_scratch_floats(L, &k->c, B);
}

static size_t solver_scratch(const FpKindCfg *k, int B, int T) {
    size_t n = (size_t)B * (T ? T : 1) * fp_layer_width(k->fam->layer, &k->c);
    return fp_scratch_floats(&k->solve, n, B);
}

static size_t cache_floats(const void *cfg, int B, int T) {
    const FpKindCfg *k = cfg;
    return fp_layer_cache_floats(k->fam->layer, &k->c, B, T);
}
static size_t scratch_floats(const void *cfg, int B, int T) {
    return layer_scratch(cfg, B, T) + solver_scratch(cfg, B, T);
}
static size_t state_floats(const void *cfg, int B) {
    const FpKindCfg *k = cfg;
    return fp_layer_state_floats(k->fam->layer, &k->c, B);
}
static size_t step_scratch_floats(const void *cfg, int B) {
    return layer_scratch(cfg, B, 0) + solver_scratch(cfg, B, 0);
}

/* ---- the solver policy --------------------------------------------------------------------------- */

/* The options of a forward (m->training picks the rule) or, with step = 1, of a sequential step. */
static FpOpts solver_opts(const Model *m, const FpKindCfg *k, int step) {
    const ModelCfg *c = &m->cfg;
    int training = m->training && !step;
    FpOpts o = k->solve;
    o.step0 = (float)c->fp_step0;
    o.decay = (float)c->fp_decay;
    o.patience = c->fp_patience;
    o.tol = c->fp_threshold;
    o.quantile = training ? 1.0 - c->fp_outlier_q : 1.0;
    o.max_iter = c->fp_eval_cap;
    if (!training) return o;
    if (c->fp_max_iter > 0) {
        o.max_iter = c->fp_max_iter;
        return o;
    }
    Rng r;
    rng_seed(&r, rng_hash(0x6c6d6178, (uint64_t)m->train_step, 0), 11);
    double scale = !strcmp(c->fp_gamma, "paper") ? 1.0 : c->fp_gamma_k / 16.0 + 1.0;
    double g = ceil(fpo_gamma(&r, 4.0, scale));
    o.max_iter = g < 1 ? 1 : g > 100000 ? 100000 : (int)g;
    return o;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Record one layer's solve: m->fp_iters = mean over layers of the f evaluations (per token in
 * sequential mode), m->fp_iters_median = their median over layers, m->fp_iters_ref = the mean of
 * the reference's logged counts (iter_idx + 1 per solve, so fp_iters + 1), m->fp_res = mean and
 * m->fp_res_max = worst of the layers' worst best-residuals, m->fp_step_max = the cap,
 * m->fp_phase = phase. */
static void note_stats(const LmMixCtx *x, const FpTally *t, int cap, const char *phase) {
    Model *m = x->m;
    int L = m->cfg.n_layer;
    double iters = t->iters;
    if (x->layer == 0) {
        m->fp_iters = 0;
        m->fp_iters_ref = 0;
        m->fp_res = 0;
        m->fp_res_max = 0;
    }
    m->fp_iters += iters / L;
    m->fp_iters_ref += (iters + 1) / L; /* the reference logs iter_idx + 1 per solve */
    m->fp_res += t->best_max / L;
    if (t->best_max > m->fp_res_max) m->fp_res_max = t->best_max;
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

/* ---- forward / backward / step ----------------------------------------------------------------- */

static int fwd(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache, float *scratch, int B,
               int T) {
    const FpKindCfg *k = x->cfg;
    FpSolveCtx sv = {.o = solver_opts(x->m, k, 0), .scratch = scratch + layer_scratch(k, B, T)};
    FpSolve solve = fp_solve_call(&sv);
    int rc = fp_layer_fwd(k->fam->layer, &k->c, &((const FpKindW *)w)->w, y, xin, &solve, cache, scratch, B, T);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    note_stats(x, &sv.tally, sv.o.max_iter, x->m->training ? "fp train" : "fp eval");
    return IM_OK;
}

static void bwd(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy, const float *xin,
                const float *cache, float *scratch, int B, int T) {
    const FpKindCfg *k = x->cfg;
    const FpKindW *p = w;
    FpKindW *d = dw;
    /* the effective-weight gradients are per backward: map them onto (g, v) at the end */
    memset(d->eff, 0, fp_layer_eff_floats(k->fam->layer, &k->c) * sizeof(float));
    fp_layer_bwd(k->fam->layer, &k->c, &p->w, &d->w, dx, dy, xin, cache, scratch, B, T);
    fp_layer_wn_bwd(k->fam->layer, &k->c, &p->w, &d->w);
}

static int step(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state, float *scratch, int B) {
    const FpKindCfg *k = x->cfg;
    FpSolveCtx sv = {.o = solver_opts(x->m, k, 1), .scratch = scratch + layer_scratch(k, B, 0)};
    FpSolve solve = fp_solve_call(&sv);
    int rc = fp_layer_step(k->fam->layer, &k->c, &((const FpKindW *)w)->w, y, xin, state, &solve, scratch, B);
    if (rc) return err_wrap(rc, "layer %d", x->layer);
    note_stats(x, &sv.tally, sv.o.max_iter, "fp sequential");
    return IM_OK;
}

#define FP_KIND(name, init)                                                                                 \
    {name,      sizeof(FpKindW), init,           free_cfg,     add_params,          bind, unbind, post_init, \
     prepare,   cache_floats,    scratch_floats, state_floats, step_scratch_floats, fwd,  bwd,    step}

const LmMixerKind lm_mixer_fp_mamba = FP_KIND("fp_mamba", m1_init);
const LmMixerKind lm_mixer_fp_mamba2 = FP_KIND("fp_mamba2", m2_init);
const LmMixerKind lm_mixer_fp_rnn = FP_KIND("fp_rnn", rn_init);
