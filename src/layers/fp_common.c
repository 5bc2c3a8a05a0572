/* fp_common.c: the pieces the fixed-point layers share (see fp_common.h). */
#include "fp_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void fpc_shift_fwd(float *dst, const float *src, int B, int T, int E) {
    for (int b = 0; b < B; b++) {
        float *d = dst + (size_t)b * T * E;
        const float *s = src + (size_t)b * T * E;
        memset(d, 0, (size_t)E * sizeof(float));
        if (T > 1) memcpy(d + E, s, (size_t)(T - 1) * E * sizeof(float));
    }
}

void fpc_shift_bwd(float *dsrc, const float *ddst, int B, int T, int E) {
    for (int b = 0; b < B; b++)
        k_axpby(dsrc + (size_t)b * T * E, 1.0f, ddst + ((size_t)b * T + 1) * E, 1.0f, (size_t)(T - 1) * E);
}

void fpc_l2norm_rows(float *y, const float *x, int M, int N, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * N;
        double s = 0;
        for (int j = 0; j < N; j++) s += (double)xm[j] * xm[j];
        float nrm = (float)sqrt(s), inv = 1.0f / (nrm > eps ? nrm : eps);
        for (int j = 0; j < N; j++) y[(size_t)m * N + j] = xm[j] * inv;
    }
}

void fpc_l2norm_rows_bwd(float *dx, const float *dy, const float *x, int M, int N, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * N, *gm = dy + (size_t)m * N;
        double s = 0, dot = 0;
        for (int j = 0; j < N; j++) s += (double)xm[j] * xm[j], dot += (double)xm[j] * gm[j];
        float nrm = (float)sqrt(s);
        if (nrm > eps) {
            float a = 1.0f / nrm, bcoef = (float)(dot / ((double)nrm * nrm * nrm));
            for (int j = 0; j < N; j++) dx[(size_t)m * N + j] += a * gm[j] - bcoef * xm[j];
        } else { /* the clamp: normalize(x) = x / eps */
            for (int j = 0; j < N; j++) dx[(size_t)m * N + j] += gm[j] / eps;
        }
    }
}

int fpc_check_finite(const float *out, size_t n, const char *who) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(out[i])) return err_set(IM_ENUM, "%s: non-finite output", who);
    return IM_OK;
}

/* ---- parameters -------------------------------------------------------------------------------- */

void fpc_param_add(ParamTable *t, const char *prefix, const char *suffix, InitRule init, float a, float b, int decay,
                   int nd, int d0, int d1, int d2) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    if (nd == 1) ptab_add(t, name, init, a, b, decay, 1, d0);
    else if (nd == 2) ptab_add(t, name, init, a, b, decay, 2, d0, d1);
    else ptab_add(t, name, init, a, b, decay, 3, d0, d1, d2);
}

float *fpc_param_find(const ParamTable *t, float *block, const char *prefix, const char *suffix) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const ParamInfo *p = ptab_find(t, name);
    return p ? block + p->offset : NULL;
}

void fpc_mixer_add_params(const MixerCfg *mix, ParamTable *t, const char *prefix) {
    char mp[PARAM_NAME_LEN];
    snprintf(mp, sizeof mp, "%s.mixer", prefix);
    mixer_add_params(mix, t, mp);
}

MixerW *fpc_mixer_bind(const MixerCfg *mix, const ParamTable *t, float *block, const char *prefix, float *eff) {
    char mp[PARAM_NAME_LEN];
    snprintf(mp, sizeof mp, "%s.mixer", prefix);
    MixerW *w = calloc(1, sizeof *w);
    CHECK(w, "out of memory");
    mixer_bind(mix, w, t, block, mp, eff);
    return w;
}

void fpc_bczy_add_params(ParamTable *t, const char *prefix, int N, int E, int has_zy) {
    fpc_param_add(t, prefix, "bc_proj.weight_g", INIT_ONE, 0, 0, 1, 2, 2 * N, 1, 0);
    fpc_param_add(t, prefix, "bc_proj.weight_v", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, 2 * N, E, 0);
    if (has_zy) {
        fpc_param_add(t, prefix, "zy_proj.weight_g", INIT_ONE, 0, 0, 1, 2, E, 1, 0);
        fpc_param_add(t, prefix, "zy_proj.weight_v", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, E, E, 0);
    }
}

size_t fpc_bczy_eff_floats(int N, int E, int has_zy) {
    size_t n = 2 * (size_t)N * E + 16;
    if (has_zy) n += (size_t)E * E + 16;
    return n;
}

float *fpc_bczy_bind(LinearW *bc, LinearW *zy, const ParamTable *t, float *block, const char *prefix, float *eff, int N,
                     int E) {
    bc->g = fpc_param_find(t, block, prefix, "bc_proj.weight_g");
    bc->v = fpc_param_find(t, block, prefix, "bc_proj.weight_v");
    bc->W = eff;
    eff += 2 * (size_t)N * E + 16;
    if (zy) {
        zy->g = fpc_param_find(t, block, prefix, "zy_proj.weight_g");
        zy->v = fpc_param_find(t, block, prefix, "zy_proj.weight_v");
        zy->W = eff;
        eff += (size_t)E * E + 16;
    }
    return eff;
}

void fpc_bczy_init(LinearW *bc, LinearW *zy, int N, int E) {
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_init(bc, &o, 2 * N, E);
    if (zy) linear_wn_init(zy, &o, E, E);
}

void fpc_bczy_refresh(LinearW *bc, LinearW *zy, int N, int E) {
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_refresh(bc, &o, 2 * N, E);
    if (zy) linear_wn_refresh(zy, &o, E, E);
}

void fpc_bczy_wn_bwd(const LinearW *bc, LinearW *dbc, const LinearW *zy, LinearW *dzy, int N, int E) {
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_bwd(bc, dbc, &o, 2 * N, E);
    if (zy) linear_wn_bwd(zy, dzy, &o, E, E);
}

/* ---- the mixing stage -------------------------------------------------------------------------- */

void fpc_carve_mix(Carve *k, FpcMix *s, const MixerCfg *mix, int M, int with_cache) {
    size_t ME = (size_t)M * mix->d;
    s->yin = with_cache ? fpc_take(k, ME) : NULL;
    s->s = fpc_take(k, ME);
    s->p = fpc_take(k, (size_t)M * mix->dp);
    s->v = fpc_take(k, ME);
    s->mcache = with_cache ? fpc_take(k, mixer_cache_floats(mix, M)) : NULL;
    s->xt = fpc_take(k, ME);
}

void fpc_carve_mix_grad(Carve *k, FpcMixGrad *g, const MixerCfg *mix, int M) {
    size_t ME = (size_t)M * mix->d;
    g->dxt = fpc_take(k, ME);
    g->dv = fpc_take(k, ME);
    g->dp = fpc_take(k, (size_t)M * mix->dp);
    g->ds = fpc_take(k, ME);
}

/* The rows [m0, m1) of fpc_make_p / fpc_make_p_bwd (k_foreach items). */
typedef struct { float *p, *dx, *ds; const float *x, *s, *dp; int E, h_dep, symm; } MakeP;

static void make_p_rows(void *ctx, long m0, long m1) {
    const MakeP *a = ctx;
    const float *x = a->x, *s = a->s;
    float *p = a->p;
    int E = a->E, h_dep = a->h_dep, symm = a->symm, dp = h_dep && !symm ? 2 * E : E;
    for (long m = m0; m < m1; m++) {
        const float *xm = x + (size_t)m * E, *sm = s + (size_t)m * E;
        float *pm = p + (size_t)m * dp;
        if (!h_dep) memcpy(pm, xm, (size_t)E * sizeof(float));
        else if (symm)
            for (int i = 0; i < E; i++) pm[i] = xm[i] + sm[i];
        else {
            memcpy(pm, xm, (size_t)E * sizeof(float));
            memcpy(pm + E, sm, (size_t)E * sizeof(float));
        }
    }
}

void fpc_make_p(float *p, const float *x, const float *s, int M, int E, int h_dep, int symm) {
    MakeP a = {p, NULL, NULL, x, s, NULL, E, h_dep, symm};
    k_foreach(M, E * FPC_NS_PER_FLOAT, make_p_rows, &a);
}

static void make_p_bwd_rows(void *ctx, long m0, long m1) {
    const MakeP *a = ctx;
    const float *dp = a->dp;
    float *dx = a->dx, *ds = a->ds;
    int E = a->E, h_dep = a->h_dep, symm = a->symm, w = h_dep && !symm ? 2 * E : E;
    for (long m = m0; m < m1; m++) {
        const float *pm = dp + (size_t)m * w;
        float *xm = dx + (size_t)m * E;
        for (int i = 0; i < E; i++) xm[i] += pm[i];
        if (h_dep && ds) {
            float *sm = ds + (size_t)m * E;
            for (int i = 0; i < E; i++) sm[i] += symm ? pm[i] : pm[E + i];
        }
    }
}

void fpc_make_p_bwd(float *dx, float *ds, const float *dp, int M, int E, int h_dep, int symm) {
    MakeP a = {NULL, dx, ds, NULL, NULL, dp, E, h_dep, symm};
    k_foreach(M, E * FPC_NS_PER_FLOAT, make_p_bwd_rows, &a);
}

/* v = a − y, xt = Q(p) v + y; with rawfix the fixed share of the projections stands for p's
 * first split columns and pvar:(M, dp − split) for the rest (mixer_fwd_fixed). */
static void mix_apply(const MixerCfg *mix, const MixerW *w, float *xt, float *v, const float *p, const float *rawfix,
                      const float *pvar, int split, const float *a, const float *y, int M, float *mcache,
                      float *mscratch) {
    size_t ME = (size_t)M * mix->d;
    k_axpby(v, 1.0f, a, 0.0f, ME); /* v = a, then v = a - y (one rounding, as a[i] - y[i]) */
    k_axpby(v, -1.0f, y, 1.0f, ME);
    if (rawfix) mixer_fwd_fixed(mix, w, xt, rawfix, pvar, split, v, M, mscratch);
    else mixer_fwd(mix, w, xt, p, v, M, mcache, mscratch);
    k_axpby(xt, 1.0f, y, 1.0f, ME);
}

void fpc_mix_fwd(const MixerCfg *mix, int h_dep, int symm, const MixerW *w, FpcMix *s, const float *x,
                 const float *a, const float *yin, const float *rawfix, float *mscratch, int B, int T) {
    int M = B * T, E = mix->d;
    if (s->yin && s->yin != yin) memcpy(s->yin, yin, (size_t)M * E * sizeof(float));
    fpc_shift_fwd(s->s, yin, B, T, E);
    if (rawfix) {
        /* x's share is in rawfix; only s (h_dep) still enters the projections */
        mix_apply(mix, w, s->xt, s->v, NULL, rawfix, h_dep ? s->s : NULL, mix->dp - (h_dep ? E : 0), a, yin, M, NULL,
                  mscratch);
    } else {
        fpc_make_p(s->p, x, s->s, M, E, h_dep, symm);
        mix_apply(mix, w, s->xt, s->v, s->p, NULL, NULL, 0, a, yin, M, s->mcache, mscratch);
    }
}

void fpc_mix_apply(const MixerCfg *mix, const MixerW *w, float *xt, float *v, const float *p, const float *rawfix,
                   const float *a, const float *y, int M, float *mscratch) {
    mix_apply(mix, w, xt, v, p, rawfix, NULL, mix->dp, a, y, M, NULL, mscratch);
}

void fpc_mix_bwd(const MixerCfg *mix, int h_dep, int symm, const MixerW *w, MixerW *dw, const FpcMix *s,
                 FpcMixGrad *g, float *da, float *dx, float *dyprev, float *mscratch, int B, int T) {
    int M = B * T, E = mix->d;
    size_t ME = (size_t)M * E;
    /* x̃ = Q(p) v + yin,  v = a − yin,  p = [x ; s] | x + s | x */
    k_zero(g->dv, ME);
    k_zero(g->dp, (size_t)M * mix->dp);
    mixer_bwd(mix, w, dw, g->dp, g->dv, g->dxt, s->p, s->v, M, s->mcache, mscratch);
    k_axpby(da, 1.0f, g->dv, 1.0f, ME);
    fpc_make_p_bwd(dx, dyprev ? g->ds : NULL, g->dp, M, E, h_dep, symm);
    if (dyprev) {
        k_axpby(dyprev, 1.0f, g->dxt, 1.0f, ME);
        k_axpby(dyprev, -1.0f, g->dv, 1.0f, ME);
        fpc_shift_bwd(dyprev, g->ds, B, T, E);
    }
}

/* ---- the Mamba layers: b̄, c̄ and the in-loop gate ------------------------------------------------ */

void fpc_carve_bc(Carve *k, FpcBc *b, int M, int N) {
    size_t MN = (size_t)M * N;
    b->braw = fpc_take(k, MN);
    b->craw = fpc_take(k, MN);
    b->bbar = fpc_take(k, MN);
    b->cbar = fpc_take(k, MN);
}

void fpc_carve_bc_grad(Carve *k, FpcBcGrad *g, int M, int N) {
    size_t MN = (size_t)M * N;
    g->dbbar = fpc_take(k, MN);
    g->dcbar = fpc_take(k, MN);
    g->dbraw = fpc_take(k, MN);
    g->dcraw = fpc_take(k, MN);
    g->dB = fpc_take(k, MN);
    g->dC = fpc_take(k, MN);
}

void fpc_bc_fwd(FpcBc *b, const float *Wbc, const float *s, const float *Bm, const float *Cm, int M, int E, int N,
                int norm, float eps) {
    size_t MN = (size_t)M * N;
    k_linear_fwd(b->braw, s, Wbc, NULL, M, E, N);
    k_linear_fwd(b->craw, s, Wbc + (size_t)N * E, NULL, M, E, N);
    k_axpby(b->braw, 1.0f, Bm, 1.0f, MN);
    k_axpby(b->craw, 1.0f, Cm, 1.0f, MN);
    if (norm) {
        fpc_l2norm_rows(b->bbar, b->braw, M, N, eps);
        fpc_l2norm_rows(b->cbar, b->craw, M, N, eps);
    } else {
        memcpy(b->bbar, b->braw, MN * sizeof(float));
        memcpy(b->cbar, b->craw, MN * sizeof(float));
    }
}

void fpc_bc_bwd(const FpcBc *b, FpcBcGrad *g, float *dWbc, float *ds, const float *Wbc, const float *s, int M, int E,
                int N, int norm, float eps) {
    size_t MN = (size_t)M * N;
    float *dbraw = g->dbbar, *dcraw = g->dcbar;
    if (norm) {
        k_zero(g->dbraw, MN);
        k_zero(g->dcraw, MN);
        fpc_l2norm_rows_bwd(g->dbraw, g->dbbar, b->braw, M, N, eps);
        fpc_l2norm_rows_bwd(g->dcraw, g->dcbar, b->craw, M, N, eps);
        dbraw = g->dbraw;
        dcraw = g->dcraw;
    }
    k_axpby(g->dB, 1.0f, dbraw, 1.0f, MN);
    k_axpby(g->dC, 1.0f, dcraw, 1.0f, MN);
    /* By = s W_bc[0:N]ᵀ, Cy = s W_bc[N:]ᵀ */
    k_linear_bwd(ds, dWbc, NULL, dbraw, s, Wbc, M, E, N);
    k_linear_bwd(ds, dWbc ? dWbc + (size_t)N * E : NULL, NULL, dcraw, s, Wbc + (size_t)N * E, M, E, N);
}

void fpc_gate_out_fwd(float *out, float *zs, float *gy, const float *y, const float *s, const float *z,
                      const LinearW *zy, const float *Wout, int M, int E, int D) {
    size_t ME = (size_t)M * E;
    if (!zy) {
        k_linear_fwd(out, y, Wout, NULL, M, E, D);
        return;
    }
    k_linear_fwd(zs, s, zy->W, NULL, M, E, E);
    k_axpby(zs, 1.0f, z, 1.0f, ME);
    k_swiglu_fwd(gy, zs, y, ME); /* gy = silu(zs) y */
    k_linear_fwd(out, gy, Wout, NULL, M, E, D);
}

void fpc_gate_out_bwd(float *dy, float *dz, float *dWout, LinearW *dzy, const float *dout, const float *y,
                      const float *sy, const float *zs, const float *gy, const LinearW *zy, const float *Wout,
                      float *dgy, float *dzs, float *dsy, int B, int T, int E, int D) {
    int M = B * T;
    size_t ME = (size_t)M * E;
    k_zero(dy, ME);
    if (!zy) {
        k_linear_bwd(dy, dWout, NULL, dout, y, Wout, M, E, D);
        return;
    }
    k_zero(dgy, ME);
    k_linear_bwd(dgy, dWout, NULL, dout, gy, Wout, M, E, D);
    k_zero(dzs, ME); /* dy is zero here too: both accumulate */
    k_swiglu_bwd(dzs, dy, dgy, zs, y, ME);
    k_axpby(dz, 1.0f, dzs, 1.0f, ME);
    k_zero(dsy, ME);
    k_linear_bwd(dsy, dzy ? dzy->W : NULL, NULL, dzs, sy, zy->W, M, E, E);
    fpc_shift_bwd(dy, dsy, B, T, E);
}

void fpc_glu_bwd(float *dz, float *dop, const float *opre, const float *z, size_t n) {
    k_swiglu_bwd(dz, NULL, dop, z, opre, n); /* dz += dop opre silu'(z) */
    k_mul_silu(dop, z, n);                   /* then dop <- dop silu(z) */
}

/* ---- the drivers of fp_layer.h ------------------------------------------------------------- */

const char *fp_layer_name(const FpLayerOps *L) { return L->name; }
size_t fp_layer_w_bytes(const FpLayerOps *L) { return L->w_bytes; }

static FpcParts parts(const FpLayerOps *L, const void *c, const void *w) {
    FpcParts p = {0};
    L->parts(c, w, &p);
    return p;
}

int fp_layer_width(const FpLayerOps *L, const void *c) { return parts(L, c, NULL).E; }

void fp_layer_add_params(const FpLayerOps *L, const void *c, ParamTable *t, const char *prefix, float out_scale) {
    L->add_params(c, t, prefix, out_scale);
}

size_t fp_layer_eff_floats(const FpLayerOps *L, const void *c) {
    FpcParts p = parts(L, c, NULL);
    size_t n = mixer_eff_floats(p.mix) + 16;
    return p.N ? n + fpc_bczy_eff_floats(p.N, p.E, p.has_zy) : n;
}

void fp_layer_bind(const FpLayerOps *L, const void *c, void *w, const ParamTable *t, float *block,
                   const char *prefix, float *eff) {
    memset(w, 0, L->w_bytes);
    L->bind(c, w, t, block, prefix);
    FpcParts p = parts(L, c, w);
    if (p.N) {
        eff = fpc_bczy_bind(p.bc, p.zy, t, block, prefix, eff, p.N, p.E);
        CHECK(p.bc->v, "%s tensors of '%s' missing", L->name, prefix);
    }
    *p.mixer = fpc_mixer_bind(p.mix, t, block, prefix, eff);
}

void fp_layer_unbind(const FpLayerOps *L, void *w) {
    FpcParts p = parts(L, NULL, w);
    free(*p.mixer);
    *p.mixer = NULL;
}

void fp_layer_post_init(const FpLayerOps *L, const void *c, void *w) {
    if (L->post_init) L->post_init(c, w);
    FpcParts p = parts(L, c, w);
    if (p.N) fpc_bczy_init(p.bc, p.zy, p.N, p.E);
    mixer_post_init(p.mix, *p.mixer);
}

void fp_layer_refresh(const FpLayerOps *L, const void *c, void *w) {
    FpcParts p = parts(L, c, w);
    if (p.N) fpc_bczy_refresh(p.bc, p.zy, p.N, p.E);
    mixer_refresh(p.mix, *p.mixer);
}

void fp_layer_wn_bwd(const FpLayerOps *L, const void *c, const void *w, void *dw) {
    FpcParts p = parts(L, c, w), d = parts(L, c, dw);
    if (p.N) fpc_bczy_wn_bwd(p.bc, d.bc, p.zy, d.zy, p.N, p.E);
    mixer_wn_bwd(p.mix, *p.mixer, *d.mixer);
}

size_t fp_layer_cache_floats(const FpLayerOps *L, const void *c, int B, int T) {
    FpcState st;
    Carve kc = {0}, ks = {0};
    L->carve_fwd(c, &st, &kc, &ks, B, T);
    return fpc_carved(&kc);
}

size_t fp_layer_scratch_floats(const FpLayerOps *L, const void *c, int B, int T) {
    FpcState st;
    Carve ks = {0}, kc = {0}, kb = {0};
    L->carve_fwd(c, &st, NULL, &ks, B, T); /* the no-cache forward carves the most scratch */
    L->carve_bwd(c, &st, &kc, &kb, B, T);
    return fpc_carved(ks.used > kb.used ? &ks : &kb);
}

/* Carve the forward's memory and run the prepare part; returns the iterate Y. */
static float *begin_fwd(const FpLayerOps *L, const void *c, const void *w, FpcState *st, const float *u,
                        float *cache, float *scratch, int B, int T) {
    Carve ks = fpc_carve(scratch), kc = fpc_carve(cache);
    L->carve_fwd(c, st, cache ? &kc : NULL, &ks, B, T);
    L->prepare(c, w, st, u, B, T);
    return ((FpcBufs *)st)->Y;
}

/* The map of a solve: a no-grad application whose output is redirected to out. */
typedef struct {
    const FpLayerOps *L;
    const void *c, *w;
    FpcState *st;
    int B, T;
} SolveCtx;

static void solve_f(void *ctx, float *out, const float *y) {
    SolveCtx *s = ctx;
    float **slot = ((FpcBufs *)s->st)->ng_out, *keep = *slot;
    *slot = out;
    s->L->step(s->c, s->w, s->st, -1, y, 1, s->B, s->T);
    *slot = keep;
}

/* Y ← 0, then the caller's solve of the layer's map. */
static int solve(const FpLayerOps *L, const void *c, const void *w, FpcState *st, float *Y, const FpSolve *sv,
                 int B, int T) {
    if (L->presolve) L->presolve(c, w, st, B, T);
    int E = parts(L, c, NULL).E;
    SolveCtx sx = {L, c, w, st, B, T};
    FpMap map = {.ctx = &sx, .n = (size_t)B * T * E, .nb = B, .f = solve_f};
    memset(Y, 0, map.n * sizeof(float));
    return sv->run(sv->ctx, &map, (size_t)E, Y);
}

/* n_back undamped applications from Y (= Y*), then the output. */
static int graded_and_output(const FpLayerOps *L, const void *c, const void *w, FpcState *st, float *Y, float *out,
                             int with_cache, int B, int T) {
    FpcParts p = parts(L, c, NULL);
    size_t ME = (size_t)B * T * p.E;
    const float *y = Y;
    for (int k = 0; k < p.n_back; k++) {
        if (with_cache) y = L->step(c, w, st, k, y, 0, B, T);
        else memcpy(Y, L->step(c, w, st, -1, Y, 0, B, T), ME * sizeof(float));
    }
    L->output(c, w, st, out, y, with_cache, B, T);
    return fpc_check_finite(out, (size_t)B * T * p.D, L->name);
}

int fp_layer_fwd(const FpLayerOps *L, const void *c, const void *w, float *out, const float *u, const FpSolve *sv,
                 float *cache, float *scratch, int B, int T) {
    FpcState st;
    float *Y = begin_fwd(L, c, w, &st, u, cache, scratch, B, T);
    int rc = solve(L, c, w, &st, Y, sv, B, T);
    return rc ? rc : graded_and_output(L, c, w, &st, Y, out, cache != NULL, B, T);
}

int fp_layer_fwd_at(const FpLayerOps *L, const void *c, const void *w, float *out, const float *u,
                    const float *ystar, float *cache, float *scratch, int B, int T) {
    FpcState st;
    float *Y = begin_fwd(L, c, w, &st, u, cache, scratch, B, T);
    memcpy(Y, ystar, (size_t)B * T * parts(L, c, NULL).E * sizeof(float));
    return graded_and_output(L, c, w, &st, Y, out, cache != NULL, B, T);
}

int fp_layer_solve(const FpLayerOps *L, const void *c, const void *w, float *ystar, const float *u,
                   const FpSolve *sv, float *scratch, int B, int T) {
    FpcState st;
    float *Y = begin_fwd(L, c, w, &st, u, NULL, scratch, B, T);
    int rc = solve(L, c, w, &st, Y, sv, B, T);
    memcpy(ystar, Y, (size_t)B * T * parts(L, c, NULL).E * sizeof(float));
    return rc;
}

void fpc_graded_bwd(const FpLayerOps *L, const void *c, const void *w, void *dw, void *st, int B, int T) {
    FpcParts p = parts(L, c, NULL);
    size_t ME = (size_t)B * T * p.E;
    float *dy = ((FpcBufs *)st)->dy, *dprev = ((FpcBufs *)st)->dprev;
    for (int k = p.n_back - 1; k >= 0; k--) {
        float *dp = k > 0 ? dprev : NULL;
        if (dp) k_zero(dp, ME);
        L->bwd_step(c, w, dw, st, k, dy, dp, B, T);
        if (dp) memcpy(dy, dp, ME * sizeof(float));
    }
}

void fp_layer_bwd(const FpLayerOps *L, const void *c, const void *w, void *dw, float *du, const float *dout,
                  const float *u, const float *cache, float *scratch, int B, int T) {
    FpcState st;
    Carve kc = fpc_carve((float *)cache), ks = fpc_carve(scratch);
    L->carve_bwd(c, &st, &kc, &ks, B, T);
    L->bwd(c, w, dw, &st, dout, du, u, B, T);
}

size_t fp_layer_state_floats(const FpLayerOps *L, const void *c, int B) { return L->state_floats(c, B); }

size_t fp_layer_step_scratch_floats(const FpLayerOps *L, const void *c, int B) {
    FpcState st;
    Carve k = {0};
    L->carve_tok(c, &st, &k, B);
    return fpc_carved(&k);
}

/* The map of a token's solve: tok_apply without commit. */
typedef struct {
    const FpLayerOps *L;
    const void *c, *w;
    FpcState *st;
    int B;
} TokCtx;

static void tok_f(void *ctx, float *out, const float *y) {
    TokCtx *t = ctx;
    t->L->tok_apply(t->c, t->w, t->st, out, y, 0, t->B);
}

int fp_layer_step(const FpLayerOps *L, const void *c, const void *w, float *out, const float *u, float *state,
                  const FpSolve *sv, float *scratch, int B) {
    FpcState st;
    FpcParts p = parts(L, c, NULL);
    size_t BE = (size_t)B * p.E;
    Carve k = fpc_carve(scratch);
    L->carve_tok(c, &st, &k, B);
    float *Y = ((FpcBufs *)&st)->Y, *y = ((FpcBufs *)&st)->tok_y;
    L->tok_prepare(c, w, &st, u, state, B);
    TokCtx tc = {L, c, w, &st, B};
    FpMap map = {.ctx = &tc, .n = BE, .nb = B, .f = tok_f};
    memset(Y, 0, BE * sizeof(float));
    int rc = sv->run(sv->ctx, &map, (size_t)p.E, Y);
    if (rc) return rc;
    /* n_back applications as the parallel path; the last one commits the recurrent state */
    for (int kk = 0; kk < p.n_back; kk++) {
        L->tok_apply(c, w, &st, y, Y, kk == p.n_back - 1, B);
        memcpy(Y, y, BE * sizeof(float));
    }
    L->tok_output(c, w, &st, out, y, state, B);
    return fpc_check_finite(out, (size_t)B * p.D, L->name);
}
