/* fp_rnn.c: the vector FP-RNN layer (see fp_rnn.h). The diagonal scan h_t = a_t ⊙ h_{t−1} + u_t
 * is O(B·T·E), negligible next to the projections, so it stays a plain loop here (spec §3.5 gives
 * its backward); everything else goes through the kernels, the mixer and the pieces all FP layers
 * share (fp_common.h: the mixing stage, the solve, the memory scheme). */
#include "fp_rnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_common.h"

int fp_rnn_cfg_init(FpRnnCfg *c, int D, int expand, int W, int conv, int h_dep, int symm, int n_back, float eps,
                    const char *mixer_type, int rank, const char *ac, int proj_rank, const char *kron_norm) {
    memset(c, 0, sizeof *c);
    if (!conv)
        return err_set(IM_EINVAL, "config key 'short_conv': fp_rnn needs its short convs (use 1 or -1); the "
                       "reference block without them crashes (spec fp-rnn §9 item 5)");
    if (D < 1 || expand < 1 || W < 1)
        return err_set(IM_EINVAL, "fp_rnn: sizes must be >= 1 (d_model %d, expand %d, d_conv %d)", D, expand, W);
    if (n_back < 1 || n_back > FP_MAX_BACK)
        return err_set(IM_EINVAL, "config key 'fp_n_backwards': %d must be in 1..%d", n_back, FP_MAX_BACK);
    *c = (FpRnnCfg){.D = D, .E = expand * D, .W = W, .h_dep = h_dep, .symm = symm, .n_back = n_back, .eps = eps};
    c->dp = h_dep && !symm ? 2 * c->E : c->E;
    return mixer_cfg_init(&c->mix, mixer_type, c->E, c->dp, rank, ac, proj_rank, kron_norm, eps);
}

/* ---- parameters ------------------------------------------------------------------------------ */

/* fpc_param_add without the init rule's second argument (none of these rules uses it) */
static void add(ParamTable *t, const char *prefix, const char *suffix, InitRule init, float a, int decay, int nd,
                int d0, int d1, int d2) {
    fpc_param_add(t, prefix, suffix, init, a, 0, decay, nd, d0, d1, d2);
}

static void add_conv(ParamTable *t, const char *prefix, const char *name, int ch, int W) {
    char s[64];
    float a = 1 / sqrtf((float)W); /* PyTorch Conv1d default, fan_in = W (depthwise) */
    snprintf(s, sizeof s, "%s.weight", name);
    add(t, prefix, s, INIT_UNIFORM, a, 1, 3, ch, 1, W);
    snprintf(s, sizeof s, "%s.bias", name);
    add(t, prefix, s, INIT_UNIFORM, a, 0, 1, ch, 0, 0);
}

static void add_params(const void *cv, ParamTable *t, const char *prefix, float out_scale) {
    const FpRnnCfg *c = cv;
    int D = c->D, E = c->E, W = c->W;
    float aE = 1 / sqrtf((float)E);
    add(t, prefix, "in_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 1, 2, 2 * E, D, 0);
    add_conv(t, prefix, "x_conv", E, W);
    add_conv(t, prefix, "b_conv", E, W);
    add_conv(t, prefix, "lam_conv", E, W);
    add_conv(t, prefix, "mix_conv", E, W);
    add_conv(t, prefix, "c_conv", 2 * E, W);
    add(t, prefix, "lam_proj.weight", INIT_UNIFORM, aE, 1, 2, E, E, 0);
    add(t, prefix, "lam_proj.bias", INIT_ZERO, 0, 0, 1, E, 0, 0);
    add(t, prefix, "b_proj.weight", INIT_UNIFORM, aE, 1, 2, E, E, 0);
    add(t, prefix, "c_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)(2 * E)), 1, 2, E, 2 * E, 0);
    fpc_mixer_add_params(&c->mix, t, prefix);
    add(t, prefix, "norm.weight", INIT_ONE, 0, 0, 1, E, 0, 0);
    add(t, prefix, "o_proj.weight", INIT_UNIFORM, out_scale * aE, 1, 2, D, E, 0);
}

/* every tensor of the layer is required */
static float *find(const ParamTable *t, float *block, const char *prefix, const char *suffix) {
    float *p = fpc_param_find(t, block, prefix, suffix);
    CHECK(p, "fp_rnn tensor '%s.%s' missing", prefix, suffix);
    return p;
}

static void bind(const void *cv, void *wv, const ParamTable *t, float *block, const char *prefix) {
    (void)cv;
    FpRnnW *w = wv;
    w->in_proj = find(t, block, prefix, "in_proj.weight");
    w->cx_w = find(t, block, prefix, "x_conv.weight");
    w->cx_b = find(t, block, prefix, "x_conv.bias");
    w->cb_w = find(t, block, prefix, "b_conv.weight");
    w->cb_b = find(t, block, prefix, "b_conv.bias");
    w->cl_w = find(t, block, prefix, "lam_conv.weight");
    w->cl_b = find(t, block, prefix, "lam_conv.bias");
    w->cm_w = find(t, block, prefix, "mix_conv.weight");
    w->cm_b = find(t, block, prefix, "mix_conv.bias");
    w->cc_w = find(t, block, prefix, "c_conv.weight");
    w->cc_b = find(t, block, prefix, "c_conv.bias");
    w->lam_w = find(t, block, prefix, "lam_proj.weight");
    w->lam_b = find(t, block, prefix, "lam_proj.bias");
    w->b_w = find(t, block, prefix, "b_proj.weight");
    w->c_w = find(t, block, prefix, "c_proj.weight");
    w->norm_w = find(t, block, prefix, "norm.weight");
    w->o_proj = find(t, block, prefix, "o_proj.weight");
}

static void parts(const void *cv, const void *wv, FpcParts *p) {
    const FpRnnCfg *c = cv;
    if (c) *p = (FpcParts){.D = c->D, .E = c->E, .n_back = c->n_back, .mix = &c->mix};
    if (wv) p->mixer = &((FpRnnW *)wv)->mixer;
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* Buffers of one application of f over M tokens. */
typedef struct {
    FpcMix mix;     /* the input iterate h, s = shift(h), p, v = bx − h, mixer cache, x̃ */
    float *h;       /* (M,E) output of the scan */
} StepBufs;

static void carve_step(const FpRnnCfg *c, Carve *k, StepBufs *s, int M, int with_cache) {
    fpc_carve_mix(k, &s->mix, &c->mix, M, with_cache);
    s->h = fpc_take(k, (size_t)M * c->E);
}

/* The four input branches: pre = conv output, act = silu(pre). */
enum { BR_X, BR_B, BR_L, BR_M, N_BR };

typedef struct {
    float *xpre, *z;               /* (M,E) pre-conv x, gate */
    float *pre[N_BR], *act[N_BR];  /* (M,E) conv outputs and their silu: x, x^b, x^λ, x^m */
    float *bpre, *bg;              /* (M,E) W_b x^b, b = silu(bpre) */
    float *lam, *bx;               /* (M,E) λ, b ⊙ x */
    StepBufs step[FP_MAX_BACK];
    float *cin, *ccpre, *cc;       /* (M,2E) [x ; h], conv_c output, its silu */
    float *cpre, *cg, *yv;         /* (M,E) W_c cc, c = silu(cpre), c ⊙ h */
    float *rstd;                   /* (M) */
    float *nrm;                    /* (M,E) RMSNorm(silu(z) ⊙ yv) · w */
} FwdCache;

static void carve_cache(const FpRnnCfg *c, Carve *k, FwdCache *f, int M, int n_back) {
    size_t ME = (size_t)M * c->E;
    f->xpre = fpc_take(k, ME);
    f->z = fpc_take(k, ME);
    for (int i = 0; i < N_BR; i++) {
        f->pre[i] = fpc_take(k, ME);
        f->act[i] = fpc_take(k, ME);
    }
    f->bpre = fpc_take(k, ME);
    f->bg = fpc_take(k, ME);
    f->lam = fpc_take(k, ME);
    f->bx = fpc_take(k, ME);
    for (int i = 0; i < n_back; i++) carve_step(c, k, &f->step[i], M, 1);
    f->cin = fpc_take(k, 2 * ME);
    f->ccpre = fpc_take(k, 2 * ME);
    f->cc = fpc_take(k, 2 * ME);
    f->cpre = fpc_take(k, ME);
    f->cg = fpc_take(k, ME);
    f->yv = fpc_take(k, ME);
    f->rstd = fpc_take(k, (size_t)M);
    f->nrm = fpc_take(k, ME);
}

typedef struct {
    StepBufs ng;
    float *Y, *mscratch;
} FwdScratch;

static void carve_fwd_scratch(const FpRnnCfg *c, Carve *k, FwdScratch *s, int B, int T) {
    int M = B * T;
    carve_step(c, k, &s->ng, M, 0);
    s->Y = fpc_take(k, (size_t)M * c->E);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
}

typedef struct {
    float *dh, *dhprev, *gs;
    FpcMixGrad mix; /* dxt, dv, dp, ds */
    float *dlam, *dbx, *dxm, *dx, *dz, *dxpre, *dnrm, *dyv, *dt1, *dt2, *dcc, *dcin, *mscratch;
} BwdScratch;

static void carve_bwd_scratch(const FpRnnCfg *c, Carve *k, BwdScratch *s, int M) {
    size_t ME = (size_t)M * c->E;
    s->dh = fpc_take(k, ME);
    s->dhprev = fpc_take(k, ME);
    s->gs = fpc_take(k, ME);
    fpc_carve_mix_grad(k, &s->mix, &c->mix, M);
    s->dlam = fpc_take(k, ME);
    s->dbx = fpc_take(k, ME);
    s->dxm = fpc_take(k, ME);
    s->dx = fpc_take(k, ME);
    s->dz = fpc_take(k, ME);
    s->dxpre = fpc_take(k, ME);
    s->dnrm = fpc_take(k, ME);
    s->dyv = fpc_take(k, ME);
    s->dt1 = fpc_take(k, 2 * ME);
    s->dt2 = fpc_take(k, ME);
    s->dcc = fpc_take(k, 2 * ME);
    s->dcin = fpc_take(k, 2 * ME);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
}

/* ---- small pieces ----------------------------------------------------------------------------- */

/* Diagonal scan h_t = a_t ⊙ h_{t−1} + (1 − a_t) ⊙ x_t from h_0 = 0.  a, x, h:(B,T,E). */
static void dscan_fwd(float *h, const float *a, const float *x, int B, int T, int E) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            float acc = 0;
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)b * T + t) * E + i;
                acc = a[o] * acc + (1.0f - a[o]) * x[o];
                h[o] = acc;
            }
        }
}

/* Backward of dscan_fwd given the direct gradient dh (spec §3.5): g_t = dh_t + a_{t+1} g_{t+1};
 * dx_t = g_t (1 − a_t) (written); da_t += g_t (h_{t−1} − x_t). */
static void dscan_bwd(float *dx, float *da, const float *dh, const float *a, const float *x, const float *h, int B,
                      int T, int E) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            float g = 0;
            for (int t = T - 1; t >= 0; t--) {
                size_t o = ((size_t)b * T + t) * E + i;
                g = dh[o] + (t + 1 < T ? a[o + E] * g : 0.0f);
                float hp = t > 0 ? h[o - E] : 0.0f;
                dx[o] = g * (1.0f - a[o]);
                da[o] += g * (hp - x[o]);
            }
        }
}

/* The prepare part: in_proj, the four branch convs, b, λ, bx. */
static void prepare(const FpRnnCfg *c, const FpRnnW *w, FwdCache *f, const float *u, int B, int T) {
    int M = B * T, E = c->E, D = c->D;
    size_t ME = (size_t)M * E;
    k_linear_fwd(f->xpre, u, w->in_proj, NULL, M, D, E);
    k_linear_fwd(f->z, u, w->in_proj + (size_t)E * D, NULL, M, D, E);
    const float *cw[N_BR] = {w->cx_w, w->cb_w, w->cl_w, w->cm_w}, *cb[N_BR] = {w->cx_b, w->cb_b, w->cl_b, w->cm_b};
    for (int i = 0; i < N_BR; i++) {
        k_conv1d_fwd(f->pre[i], f->xpre, cw[i], cb[i], B, T, E, c->W);
        k_silu_fwd(f->act[i], f->pre[i], ME);
    }
    k_linear_fwd(f->bpre, f->act[BR_B], w->b_w, NULL, M, E, E);
    k_silu_fwd(f->bg, f->bpre, ME);
    k_linear_fwd(f->lam, f->act[BR_L], w->lam_w, w->lam_b, M, E, E);
    k_sigmoid(f->lam, f->lam, NULL, M, E);
    for (size_t i = 0; i < ME; i++) f->bx[i] = f->bg[i] * f->act[BR_X][i];
}

/* One application of f on hin (B,T): fills s and s->h. s->mcache NULL = no-grad. */
static void step_fwd(const FpRnnCfg *c, const FpRnnW *w, const FwdCache *f, StepBufs *s, const float *hin,
                     float *mscratch, int B, int T) {
    fpc_mix_fwd(&c->mix, c->h_dep, c->symm, w->mixer, &s->mix, f->act[BR_M], f->bx, hin, NULL, mscratch, B, T);
    dscan_fwd(s->h, f->lam, s->mix.xt, B, T, c->E);
}

/* Backward of one graded step given dh on its output: dlam, dbx, dxm accumulate; when
 * dhprev != NULL, the gradient with respect to the step's input is added there. */
static void step_bwd(const FpRnnCfg *c, const FpRnnW *w, FpRnnW *dw, const FwdCache *f, const StepBufs *s,
                     BwdScratch *g, const float *dh, float *dhprev, int B, int T) {
    dscan_bwd(g->mix.dxt, g->dlam, dh, f->lam, s->mix.xt, s->h, B, T, c->E);
    k_zero(g->mix.ds, (size_t)B * T * c->E);
    fpc_mix_bwd(&c->mix, c->h_dep, c->symm, w->mixer, dw->mixer, &s->mix, &g->mix, g->dbx, g->dxm, dhprev, g->mscratch,
                B, T);
}

/* c = silu(W_c silu(conv_c([x ; h]))); out = W_out RMSNorm(silu(z) ⊙ c ⊙ h) */
static void output_fwd(const FpRnnCfg *c, const FpRnnW *w, FwdCache *f, float *out, const float *h, int B, int T,
                       int keep_rstd) {
    int M = B * T, E = c->E;
    size_t ME = (size_t)M * E;
    for (int m = 0; m < M; m++) {
        memcpy(f->cin + (size_t)m * 2 * E, f->act[BR_X] + (size_t)m * E, (size_t)E * sizeof(float));
        memcpy(f->cin + (size_t)m * 2 * E + E, h + (size_t)m * E, (size_t)E * sizeof(float));
    }
    k_conv1d_fwd(f->ccpre, f->cin, w->cc_w, w->cc_b, B, T, 2 * E, c->W);
    k_silu_fwd(f->cc, f->ccpre, 2 * ME);
    k_linear_fwd(f->cpre, f->cc, w->c_w, NULL, M, 2 * E, E);
    k_silu_fwd(f->cg, f->cpre, ME);
    for (size_t i = 0; i < ME; i++) f->yv[i] = f->cg[i] * h[i];
    k_gated_rmsnorm_fwd(f->nrm, keep_rstd ? f->rstd : NULL, f->yv, f->z, w->norm_w, M, E, c->eps);
    k_linear_fwd(out, f->nrm, w->o_proj, NULL, M, E, c->D);
}

/* ---- the row ------------------------------------------------------------------------------- */

typedef struct {
    const float *lam, *bx, *hprev, *p;
    float *v, *xt, *mscratch;
} TokCtx;

typedef struct {
    float *xpre, *z, *act[N_BR], *bg, *lam, *bx, *s, *p, *v, *xt, *Y, *h, *cin, *cc, *cg, *yv, *nrm, *mscratch;
} TokBufs;

/* The buffers of one call (fp_common.h's FpcState). */
typedef struct {
    FpcBufs b;     /* what the drivers reach (first) */
    FwdCache f;    /* in the cache, or without one its prepare and output buffers in the scratch */
    FwdScratch sc;
    BwdScratch g;
    TokBufs t;
    TokCtx tc;
    float *xwin, *cwin, *hprev; /* the state's parts */
} State;
_Static_assert(offsetof(State, b) == 0, "the drivers' view first");
_Static_assert(sizeof(State) <= FPC_STATE_BYTES, "fp_rnn's buffers fit an FpcState");

static void carve_fwd(const void *cv, void *sv, Carve *kc, Carve *ks, int B, int T) {
    const FpRnnCfg *c = cv;
    State *s = sv;
    carve_fwd_scratch(c, ks, &s->sc, B, T);
    /* without a cache: the prepare and output buffers from the scratch */
    carve_cache(c, kc ? kc : ks, &s->f, B * T, kc ? c->n_back : 0);
    s->b.Y = s->sc.Y;
    s->b.ng_out = &s->sc.ng.h;
}

static void prepare_row(const void *c, const void *w, void *sv, const float *u, int B, int T) {
    prepare(c, w, &((State *)sv)->f, u, B, T);
}

static const float *step(const void *c, const void *w, void *sv, int k, const float *yin, int solve, int B,
                         int T) {
    State *s = sv;
    StepBufs *sb = k >= 0 ? &s->f.step[k] : &s->sc.ng;
    (void)solve;
    step_fwd(c, w, &s->f, sb, yin, s->sc.mscratch, B, T);
    return sb->h;
}

static void output(const void *c, const void *w, void *sv, float *out, const float *h, int with_cache, int B, int T) {
    output_fwd(c, w, &((State *)sv)->f, out, h, B, T, with_cache);
}

static void carve_bwd(const void *cv, void *sv, Carve *kc, Carve *ks, int B, int T) {
    const FpRnnCfg *c = cv;
    State *s = sv;
    carve_cache(c, kc, &s->f, B * T, c->n_back);
    carve_bwd_scratch(c, ks, &s->g, B * T);
    s->b.dy = s->g.dh;
    s->b.dprev = s->g.dhprev;
}

/* dpre = dact ⊙ silu'(pre) (written) */
static void silu_back(float *dpre, const float *dact, const float *pre, size_t n) {
    k_zero(dpre, n);
    k_silu_bwd(dpre, dact, pre, n);
}

/* output: W_out, gated RMSNorm, c ⊙ h, W_c, conv_c over [x ; h] */
static void bwd_step(const void *c, const void *w, void *dw, void *sv, int k, const float *dh, float *dhprev, int B,
                     int T) {
    State *s = sv;
    step_bwd(c, w, dw, &s->f, &s->f.step[k], &s->g, dh, dhprev, B, T);
}

static void bwd(const void *cv, const void *wv, void *dwv, void *sv, const float *dout, float *du, const float *u,
                int B, int T) {
    const FpRnnCfg *c = cv;
    const FpRnnW *w = wv;
    FpRnnW *dw = dwv;
    State *s = sv;
    FwdCache *f = &s->f;
    BwdScratch *g = &s->g;
    int M = B * T, E = c->E, D = c->D, W = c->W;
    size_t ME = (size_t)M * E;
    const float *h = f->step[c->n_back - 1].h;
    k_zero(g->dz, ME);
    k_zero(g->dx, ME);
    k_zero(g->dlam, ME);
    k_zero(g->dbx, ME);
    k_zero(g->dxm, ME);
    k_zero(g->dh, ME);
    k_zero(g->dnrm, ME);
    k_linear_bwd(g->dnrm, dw->o_proj, NULL, dout, f->nrm, w->o_proj, M, E, D);
    k_zero(g->dyv, ME);
    k_gated_rmsnorm_bwd(g->dyv, g->dz, dw->norm_w, g->dnrm, f->yv, f->z, w->norm_w, f->rstd, M, E);
    for (size_t i = 0; i < ME; i++) g->dh[i] += g->dyv[i] * f->cg[i];
    k_zero(g->dt2, ME); /* d cpre: yv = silu(cpre) h */
    k_swiglu_bwd(g->dt2, NULL, g->dyv, f->cpre, h, ME);
    k_zero(g->dcc, 2 * ME);
    k_linear_bwd(g->dcc, dw->c_w, NULL, g->dt2, f->cc, w->c_w, M, 2 * E, E);
    silu_back(g->dt1, g->dcc, f->ccpre, 2 * ME);
    k_zero(g->dcin, 2 * ME);
    k_conv1d_bwd(g->dcin, dw->cc_w, dw->cc_b, g->dt1, f->cin, w->cc_w, B, T, 2 * E, W);
    for (int m = 0; m < M; m++) {
        const float *r = g->dcin + (size_t)m * 2 * E;
        float *dxr = g->dx + (size_t)m * E, *dhr = g->dh + (size_t)m * E;
        for (int i = 0; i < E; i++) {
            dxr[i] += r[i];
            dhr[i] += r[E + i];
        }
    }
    /* the graded steps, last first (fp_common.c); then the prepare part: λ = σ(W_λ x^λ + b_λ),
     * bx = silu(W_b x^b) ⊙ x, then the four branch convs */
    fpc_graded_bwd(&fp_rnn_layer, c, w, dw, sv, B, T);
    float *dact[N_BR] = {g->dx, g->dt1, g->dt1 + ME, g->dxm}; /* dt1 (2ME) holds d x^b | d x^λ */
    k_zero(g->dt1, 2 * ME);
    for (size_t i = 0; i < ME; i++) {
        float l = f->lam[i];
        g->dlam[i] *= l * (1.0f - l);
        g->dx[i] += g->dbx[i] * f->bg[i];
    }
    k_zero(g->dt2, ME); /* d bpre: bx = silu(bpre) x */
    k_swiglu_bwd(g->dt2, NULL, g->dbx, f->bpre, f->act[BR_X], ME);
    k_linear_bwd(dact[BR_L], dw->lam_w, dw->lam_b, g->dlam, f->act[BR_L], w->lam_w, M, E, E);
    k_linear_bwd(dact[BR_B], dw->b_w, NULL, g->dt2, f->act[BR_B], w->b_w, M, E, E);
    float *cw[N_BR] = {w->cx_w, w->cb_w, w->cl_w, w->cm_w};
    float *dcw[N_BR] = {dw->cx_w, dw->cb_w, dw->cl_w, dw->cm_w}, *dcb[N_BR] = {dw->cx_b, dw->cb_b, dw->cl_b, dw->cm_b};
    k_zero(g->dxpre, ME);
    for (int i = 0; i < N_BR; i++) {
        silu_back(g->dnrm, dact[i], f->pre[i], ME); /* dnrm is free again */
        k_conv1d_bwd(g->dxpre, dcw[i], dcb[i], g->dnrm, f->xpre, cw[i], B, T, E, W);
    }
    k_linear_bwd(du, dw->in_proj, NULL, g->dxpre, u, w->in_proj, M, D, E);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)E * D : NULL, NULL, g->dz, u, w->in_proj + (size_t)E * D, M,
                 D, E);
}

/* ---- sequential mode --------------------------------------------------------------------------- */

/* [pre-conv x window (E,W) | conv_c window (2E,W) | previous h (E)] per sequence */
static size_t state_floats(const void *cv, int B) {
    const FpRnnCfg *c = cv;
    return (size_t)B * ((size_t)c->E * c->W + 2 * (size_t)c->E * c->W + c->E);
}

static void carve_tok(const void *cv, void *sv, Carve *k, int B) {
    const FpRnnCfg *c = cv;
    State *s = sv;
    TokBufs *t = &s->t;
    size_t BE = (size_t)B * c->E;
    t->xpre = fpc_take(k, BE);
    t->z = fpc_take(k, BE);
    for (int i = 0; i < N_BR; i++) t->act[i] = fpc_take(k, BE);
    t->bg = fpc_take(k, BE);
    t->lam = fpc_take(k, BE);
    t->bx = fpc_take(k, BE);
    t->s = fpc_take(k, BE);
    t->p = fpc_take(k, (size_t)B * c->dp);
    t->v = fpc_take(k, BE);
    t->xt = fpc_take(k, BE);
    t->Y = fpc_take(k, BE);
    t->h = fpc_take(k, BE);
    t->cin = fpc_take(k, 2 * BE);
    t->cc = fpc_take(k, 2 * BE);
    t->cg = fpc_take(k, BE);
    t->yv = fpc_take(k, BE);
    t->nrm = fpc_take(k, BE);
    t->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, B));
    s->b.Y = t->Y;
    s->b.tok_y = t->h;
}

static void tok_prepare(const void *cv, const void *wv, void *sv, const float *u, float *state, int B) {
    const FpRnnCfg *c = cv;
    const FpRnnW *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, D = c->D, W = c->W;
    size_t BE = (size_t)B * E;
    s->xwin = state;
    s->cwin = s->xwin + BE * W;
    s->hprev = s->cwin + 2 * BE * W;
    k_linear_fwd(t->xpre, u, w->in_proj, NULL, B, D, E);
    k_linear_fwd(t->z, u, w->in_proj + (size_t)E * D, NULL, B, D, E);
    /* the four convs read the same window: only the last call commits it */
    const float *cw[N_BR] = {w->cb_w, w->cl_w, w->cm_w, w->cx_w}, *cb[N_BR] = {w->cb_b, w->cl_b, w->cm_b, w->cx_b};
    float *dst[N_BR] = {t->act[BR_B], t->act[BR_L], t->act[BR_M], t->act[BR_X]};
    for (int i = 0; i < N_BR; i++) {
        k_conv1d_step(dst[i], i == N_BR - 1 ? s->xwin : NULL, s->xwin, t->xpre, cw[i], cb[i], B, E, W);
        k_silu_fwd(dst[i], dst[i], BE);
    }
    k_linear_fwd(t->bg, t->act[BR_B], w->b_w, NULL, B, E, E);
    k_silu_fwd(t->bg, t->bg, BE);
    k_linear_fwd(t->lam, t->act[BR_L], w->lam_w, w->lam_b, B, E, E);
    k_sigmoid(t->lam, t->lam, NULL, B, E);
    for (size_t i = 0; i < BE; i++) t->bx[i] = t->bg[i] * t->act[BR_X][i];
    /* s = h*_{t−1} is fixed during the token's iterations, and so is p */
    fpc_make_p(t->p, t->act[BR_M], s->hprev, B, E, c->h_dep, c->symm);
    s->tc = (TokCtx){t->lam, t->bx, s->hprev, t->p, t->v, t->xt, t->mscratch};
}

/* h' = λ ⊙ h_{t−1} + (1 − λ) ⊙ (Q(p)(bx − h) + h) for one token; no state in the loop */
static void tok_apply(const void *cv, const void *wv, void *sv, float *out, const float *h, int commit, int B) {
    (void)commit;
    const FpRnnCfg *c = cv;
    const FpRnnW *w = wv;
    TokCtx *t = &((State *)sv)->tc;
    size_t BE = (size_t)B * c->E;
    fpc_mix_apply(&c->mix, w->mixer, t->xt, t->v, t->p, NULL, t->bx, h, B, t->mscratch);
    for (size_t i = 0; i < BE; i++) out[i] = t->lam[i] * t->hprev[i] + (1.0f - t->lam[i]) * t->xt[i];
}

static void tok_output(const void *cv, const void *wv, void *sv, float *out, const float *h, float *state, int B) {
    (void)state;
    const FpRnnCfg *c = cv;
    const FpRnnW *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, D = c->D, W = c->W;
    size_t BE = (size_t)B * E;
    for (int b = 0; b < B; b++) {
        memcpy(t->cin + (size_t)b * 2 * E, t->act[BR_X] + (size_t)b * E, (size_t)E * sizeof(float));
        memcpy(t->cin + (size_t)b * 2 * E + E, h + (size_t)b * E, (size_t)E * sizeof(float));
    }
    k_conv1d_step(t->cc, s->cwin, s->cwin, t->cin, w->cc_w, w->cc_b, B, 2 * E, W);
    k_silu_fwd(t->cc, t->cc, 2 * BE);
    k_linear_fwd(t->cg, t->cc, w->c_w, NULL, B, 2 * E, E);
    k_swiglu_fwd(t->yv, t->cg, h, BE);
    k_gated_rmsnorm_fwd(t->nrm, NULL, t->yv, t->z, w->norm_w, B, E, c->eps);
    k_linear_fwd(out, t->nrm, w->o_proj, NULL, B, E, D);
    memcpy(s->hprev, h, BE * sizeof(float));
}

const FpLayerOps fp_rnn_layer = {
    .name = "fp_rnn", .w_bytes = sizeof(FpRnnW), .parts = parts, .add_params = add_params, .bind = bind,
    .carve_fwd = carve_fwd, .prepare = prepare_row, .step = step, .output = output, .carve_bwd = carve_bwd,
    .bwd = bwd, .bwd_step = bwd_step, .state_floats = state_floats,
    .carve_tok = carve_tok, .tok_prepare = tok_prepare, .tok_apply = tok_apply, .tok_output = tok_output,
};
