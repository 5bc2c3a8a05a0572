/* fp_mamba2.c: the FPMamba2 mixer layer (see fp_mamba2.h). The arithmetic lives in the kernels
 * (k_linear_*, k_conv1d_*, k_ssd_*, k_gated_rmsnorm_*), the mixer and the pieces all FP layers
 * share (fp_common.h: the mixing stage, b̄ / c̄, the solve); this file wires the prepare part, one
 * fixed-point application, the solve and the graded steps. */
#include "fp_mamba2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_common.h"

int fp_mamba2_cfg_init(FpMamba2Cfg *c, int D, int expand, int N, int P, int W, int conv, int h_dep, int symm,
                       int glu_in_loop, int n_back, float eps, const char *mixer_type, int rank, const char *ac,
                       int proj_rank, const char *kron_norm) {
    memset(c, 0, sizeof *c);
    if (D < 1 || expand < 1 || N < 1 || W < 1)
        return err_set(IM_EINVAL, "fp_mamba2: sizes must be >= 1 (d_model %d, expand %d, d_state %d, d_conv %d)", D,
                       expand, N, W);
    if (P < 1 || (expand * D) % P)
        return err_set(IM_EINVAL, "config key 'headdim': %d does not divide expand*d_model = %d", P, expand * D);
    if (n_back < 1 || n_back > FP_MAX_BACK)
        return err_set(IM_EINVAL, "config key 'fp_n_backwards': %d must be in 1..%d", n_back, FP_MAX_BACK);
    int E = expand * D;
    *c = (FpMamba2Cfg){.D = D, .E = E, .N = N, .P = P, .H = E / P, .W = W, .C = E + 2 * N, .conv = conv,
                       .h_dep = h_dep, .symm = symm, .glu_in_loop = glu_in_loop, .n_back = n_back, .eps = eps};
    c->K = 2 * E + 2 * N + c->H;
    c->dp = h_dep && !symm ? 2 * E : E;
    return mixer_cfg_init(&c->mix, mixer_type, E, c->dp, rank, ac, proj_rank, kron_norm, eps);
}

/* ---- parameters ------------------------------------------------------------------------------ */

void fp_mamba2_add_params(const FpMamba2Cfg *c, ParamTable *t, const char *prefix, float out_scale) {
    int D = c->D, E = c->E, N = c->N, H = c->H, W = c->W, C = c->C;
    fpc_param_add(t, prefix, "in_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 0, 1, 2, c->K, D, 0);
    if (c->conv) {
        fpc_param_add(t, prefix, "conv1d.weight", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 1, 3, C, 1, W);
        fpc_param_add(t, prefix, "conv1d.bias", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 0, 1, C, 0, 0);
    }
    fpc_param_add(t, prefix, "dt_bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, H, 0, 0);
    fpc_param_add(t, prefix, "A_log", INIT_A_LOG, 1, 16, 0, 1, H, 0, 0);
    fpc_param_add(t, prefix, "D", INIT_ONE, 0, 0, 0, 1, H, 0, 0);
    fpc_bczy_add_params(t, prefix, N, E, !c->glu_in_loop);
    fpc_mixer_add_params(&c->mix, t, prefix);
    fpc_param_add(t, prefix, "norm.weight", INIT_ONE, 0, 0, 0, 1, E, 0, 0);
    fpc_param_add(t, prefix, "out_proj.weight", INIT_UNIFORM, out_scale / sqrtf((float)E), 0, 1, 2, D, E, 0);
}

size_t fp_mamba2_eff_floats(const FpMamba2Cfg *c) {
    return fpc_bczy_eff_floats(c->N, c->E, !c->glu_in_loop) + mixer_eff_floats(&c->mix);
}

void fp_mamba2_bind(const FpMamba2Cfg *c, FpMamba2W *w, const ParamTable *t, float *block, const char *prefix,
                    float *eff) {
    memset(w, 0, sizeof *w);
    w->in_proj = fpc_param_find(t, block, prefix, "in_proj.weight");
    w->conv_w = fpc_param_find(t, block, prefix, "conv1d.weight");
    w->conv_b = fpc_param_find(t, block, prefix, "conv1d.bias");
    w->dt_bias = fpc_param_find(t, block, prefix, "dt_bias");
    w->A_log = fpc_param_find(t, block, prefix, "A_log");
    w->Dskip = fpc_param_find(t, block, prefix, "D");
    eff = fpc_bczy_bind(&w->bc, c->glu_in_loop ? NULL : &w->zy, t, block, prefix, eff, c->N, c->E);
    w->norm_w = fpc_param_find(t, block, prefix, "norm.weight");
    w->out_proj = fpc_param_find(t, block, prefix, "out_proj.weight");
    CHECK(w->in_proj && w->dt_bias && w->A_log && w->Dskip && w->bc.v && w->norm_w && w->out_proj &&
              (!c->conv || w->conv_w),
          "fp_mamba2 tensors of '%s' missing", prefix);
    w->mixer = fpc_mixer_bind(&c->mix, t, block, prefix, eff);
}

void fp_mamba2_unbind(FpMamba2W *w) {
    free(w->mixer);
    w->mixer = NULL;
}

void fp_mamba2_post_init(const FpMamba2Cfg *c, FpMamba2W *w) {
    fpc_bczy_init(&w->bc, c->glu_in_loop ? NULL : &w->zy, c->N, c->E);
    mixer_post_init(&c->mix, w->mixer);
}

void fp_mamba2_refresh(const FpMamba2Cfg *c, FpMamba2W *w) {
    fpc_bczy_refresh(&w->bc, c->glu_in_loop ? NULL : &w->zy, c->N, c->E);
    mixer_refresh(&c->mix, w->mixer);
}

void fp_mamba2_wn_bwd(const FpMamba2Cfg *c, const FpMamba2W *w, FpMamba2W *dw) {
    fpc_bczy_wn_bwd(&w->bc, &dw->bc, c->glu_in_loop ? NULL : &w->zy, &dw->zy, c->N, c->E);
    mixer_wn_bwd(&c->mix, w->mixer, dw->mixer);
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* Buffers of one application of f over M = B·T tokens (or B tokens in the step path). */
typedef struct {
    FpcMix mix;          /* yin, s = shift(yin), p, v = x − yin, mixer cache, x̃ */
    FpcBc bc;            /* (M,N) B + By, C + Cy and b̄, c̄ */
    float *saved;        /* SSD's backward memory | NULL */
    float *opre;         /* (M,E) SSD output before the in-loop gate (glu_in_loop) */
    float *o;            /* (M,E) the gated norm's input */
    float *rstd;         /* (M) */
    float *y;            /* (M,E) output */
} StepBufs;

static void carve_step(const FpMamba2Cfg *c, Carve *k, StepBufs *s, int B, int T, int with_cache) {
    size_t M = (size_t)B * T, ME = M * c->E;
    fpc_carve_mix(k, &s->mix, &c->mix, (int)M, with_cache);
    fpc_carve_bc(k, &s->bc, (int)M, c->N);
    s->saved = with_cache ? fpc_take(k, k_ssd_saved_floats(B, T, c->H, c->P, c->N)) : NULL;
    s->opre = c->glu_in_loop ? fpc_take(k, ME) : NULL;
    s->o = fpc_take(k, ME);
    s->rstd = fpc_take(k, M);
    s->y = fpc_take(k, ME);
}

/* Forward cache: the prepare part, the graded steps and the output gate. */
typedef struct {
    float *z;              /* (M,E) gate */
    float *xbc_pre, *xbc;  /* (M,C) before / after conv + silu (the same buffer without conv) */
    float *x, *Bm, *Cm;    /* (M,E), (M,N), (M,N) contiguous splits of xbc */
    float *dtraw, *dt;     /* (M,H) δ, softplus(δ + dt_bias) */
    float *A;              /* (H) */
    StepBufs step[FP_MAX_BACK];
    float *sy, *zs, *gy;   /* (M,E) shift(y), z + W_zy shift(y), gate ⊙ y */
} FwdCache;

static void carve_cache(const FpMamba2Cfg *c, Carve *k, FwdCache *f, int B, int T, int n_back) {
    size_t M = (size_t)B * T, ME = M * c->E, MN = M * c->N;
    f->z = fpc_take(k, ME);
    f->xbc_pre = fpc_take(k, M * c->C);
    f->xbc = c->conv ? fpc_take(k, M * c->C) : f->xbc_pre;
    f->x = fpc_take(k, ME);
    f->Bm = fpc_take(k, MN);
    f->Cm = fpc_take(k, MN);
    f->dtraw = fpc_take(k, M * c->H);
    f->dt = fpc_take(k, M * c->H);
    f->A = fpc_take(k, (size_t)c->H);
    for (int i = 0; i < n_back; i++) carve_step(c, k, &f->step[i], B, T, 1);
    f->sy = fpc_take(k, ME);
    f->zs = fpc_take(k, ME);
    f->gy = fpc_take(k, ME);
}

/* Scratch of the forward: the no-grad step, the iterate, the solver's memory, the mixer's. */
typedef struct {
    StepBufs ng;
    float *Y, *solver, *mscratch;
    FwdCache pre; /* prepare buffers when no cache is given */
} FwdScratch;

static void carve_fwd_scratch(const FpMamba2Cfg *c, Carve *k, FwdScratch *s, int B, int T, int with_pre) {
    int M = B * T;
    carve_step(c, k, &s->ng, B, T, 0);
    s->Y = fpc_take(k, (size_t)M * c->E);
    s->solver = fpc_take(k, fpo_scratch_floats((size_t)M * c->E, B));
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
    if (with_pre) carve_cache(c, k, &s->pre, B, T, 0);
}

/* Backward temporaries. */
typedef struct {
    float *dy, *dyprev;
    FpcMixGrad mix; /* dxt, dv, dp, ds */
    float *dop, *dz, *dx, *ddt;
    FpcBcGrad bc;   /* dbbar, dcbar, dbraw, dcraw, dB, dC */
    float *dA, *dxbc, *dpre, *dconv, *dgy, *dzs, *dsy, *mscratch;
} BwdScratch;

static void carve_bwd_scratch(const FpMamba2Cfg *c, Carve *k, BwdScratch *s, int M) {
    size_t ME = (size_t)M * c->E;
    s->dy = fpc_take(k, ME);
    s->dyprev = fpc_take(k, ME);
    fpc_carve_mix_grad(k, &s->mix, &c->mix, M);
    s->dop = fpc_take(k, ME);
    s->dz = fpc_take(k, ME);
    s->dx = fpc_take(k, ME);
    s->ddt = fpc_take(k, (size_t)M * c->H);
    fpc_carve_bc_grad(k, &s->bc, M, c->N);
    s->dA = fpc_take(k, (size_t)c->H);
    s->dxbc = fpc_take(k, (size_t)M * c->C);
    s->dpre = fpc_take(k, (size_t)M * c->C);
    s->dconv = c->conv ? fpc_take(k, (size_t)M * c->C) : NULL;
    s->dgy = fpc_take(k, ME);
    s->dzs = fpc_take(k, ME);
    s->dsy = fpc_take(k, ME);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
}

size_t fp_mamba2_cache_floats(const FpMamba2Cfg *c, int B, int T) {
    Carve k = {0};
    FwdCache f;
    carve_cache(c, &k, &f, B, T, c->n_back);
    return fpc_carved(&k);
}

size_t fp_mamba2_scratch_floats(const FpMamba2Cfg *c, int B, int T) {
    Carve k = {0}, kb = {0};
    FwdScratch s;
    BwdScratch b;
    carve_fwd_scratch(c, &k, &s, B, T, 1);
    carve_bwd_scratch(c, &kb, &b, B * T);
    return fpc_carved(k.used > kb.used ? &k : &kb);
}

/* ---- small pieces ----------------------------------------------------------------------------- */

/* xbc rows (C) → x (E), B (N), C (N) contiguous arrays */
static void split_xbc(const FpMamba2Cfg *c, float *x, float *Bm, float *Cm, const float *xbc, int M) {
    int E = c->E, N = c->N;
    for (int m = 0; m < M; m++) {
        const float *r = xbc + (size_t)m * c->C;
        memcpy(x + (size_t)m * E, r, (size_t)E * sizeof(float));
        memcpy(Bm + (size_t)m * N, r + E, (size_t)N * sizeof(float));
        memcpy(Cm + (size_t)m * N, r + E + N, (size_t)N * sizeof(float));
    }
}

/* The prepare part: in_proj, conv, splits, Δ and A. u:(M,D) rows of one token each. */
static void prepare(const FpMamba2Cfg *c, const FpMamba2W *w, FwdCache *f, const float *u, int B, int T) {
    int M = B * T, E = c->E, D = c->D, C = c->C, H = c->H;
    k_linear_fwd(f->z, u, w->in_proj, NULL, M, D, E);
    k_linear_fwd(f->xbc_pre, u, w->in_proj + (size_t)E * D, NULL, M, D, C);
    k_linear_fwd(f->dtraw, u, w->in_proj + (size_t)(E + C) * D, NULL, M, D, H);
    if (c->conv) {
        k_conv1d_fwd(f->xbc, f->xbc_pre, w->conv_w, w->conv_b, B, T, C, c->W);
        k_silu_fwd(f->xbc, f->xbc, (size_t)M * C);
    }
    split_xbc(c, f->x, f->Bm, f->Cm, f->xbc, M);
    k_softplus(f->dt, f->dtraw, w->dt_bias, M, H);
    for (int h = 0; h < H; h++) f->A[h] = -expf(w->A_log[h]);
}

/* o ← opre ⊙ silu(z) (glu_in_loop), then y = RMSNorm(o ⊙ silu(z)) · norm_w */
static void gate_norm(const FpMamba2Cfg *c, const FpMamba2W *w, StepBufs *s, const float *z, float *y, int M,
                      int keep_rstd) {
    size_t ME = (size_t)M * c->E;
    if (c->glu_in_loop) k_swiglu_fwd(s->o, z, s->opre, ME);
    k_gated_rmsnorm_fwd(y, keep_rstd ? s->rstd : NULL, s->o, z, w->norm_w, M, c->E, c->eps);
}

/* One application of f on yin (B,T): fills s and s->y. s->mix.mcache NULL = no-grad. */
static void step_fwd(const FpMamba2Cfg *c, const FpMamba2W *w, const FwdCache *f, StepBufs *s, const float *yin,
                     float *mscratch, int B, int T) {
    int M = B * T;
    fpc_mix_fwd(&c->mix, c->h_dep, c->symm, w->mixer, &s->mix, f->x, f->x, yin, NULL, mscratch, B, T);
    fpc_bc_fwd(&s->bc, w->bc.W, s->mix.s, f->Bm, f->Cm, M, c->E, c->N, 1, c->eps);
    k_ssd_fwd(c->glu_in_loop ? s->opre : s->o, s->saved, NULL, s->mix.xt, f->dt, f->A, s->bc.bbar, s->bc.cbar,
              w->Dskip, NULL, B, T, c->H, c->P, c->N);
    gate_norm(c, w, s, f->z, s->y, M, s->mix.mcache != NULL);
}

/* Backward of one graded step: dy (M,E) → parameter grads, prepare grads (dx, dz, ddt, dB, dC,
 * dA), and, when dyprev != NULL, the gradient with respect to the step's input. */
static void step_bwd(const FpMamba2Cfg *c, const FpMamba2W *w, FpMamba2W *dw, const FwdCache *f, const StepBufs *s,
                     BwdScratch *g, const float *dy, float *dyprev, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    memset(g->dop, 0, ME * sizeof(float));
    k_gated_rmsnorm_bwd(g->dop, g->dz, dw->norm_w, dy, s->o, f->z, w->norm_w, s->rstd, M, E);
    if (c->glu_in_loop) fpc_glu_bwd(g->dz, g->dop, s->opre, f->z, ME);
    memset(g->mix.dxt, 0, ME * sizeof(float));
    memset(g->bc.dbbar, 0, MN * sizeof(float));
    memset(g->bc.dcbar, 0, MN * sizeof(float));
    k_ssd_bwd(g->mix.dxt, g->ddt, g->dA, g->bc.dbbar, g->bc.dcbar, dw->Dskip, NULL, g->dop, NULL, s->mix.xt, f->dt,
              f->A, s->bc.bbar, s->bc.cbar, w->Dskip, NULL, s->saved, B, T, c->H, c->P, N);
    /* W_bc: the gradient on s only matters when chaining to an earlier graded step */
    memset(g->mix.ds, 0, ME * sizeof(float));
    fpc_bc_bwd(&s->bc, &g->bc, dw->bc.W, dyprev ? g->mix.ds : NULL, w->bc.W, s->mix.s, M, E, N, 1, c->eps);
    /* x̃ = Q(p)(x − yin) + yin, p from x and s */
    fpc_mix_bwd(&c->mix, c->h_dep, c->symm, w->mixer, dw->mixer, &s->mix, &g->mix, g->dx, g->dx, dyprev, g->mscratch,
                B, T);
}

/* ---- forward / backward ------------------------------------------------------------------------ */

typedef struct {
    const FpMamba2Cfg *c;
    const FpMamba2W *w;
    const FwdCache *f;
    StepBufs *ng;
    float *mscratch;
    int B, T;
} SolveCtx;

static void solve_f(void *ctx, float *out, const float *y) {
    SolveCtx *s = ctx;
    float *keep = s->ng->y;
    s->ng->y = out;
    step_fwd(s->c, s->w, s->f, s->ng, y, s->mscratch, s->B, s->T);
    s->ng->y = keep;
}

/* out = W_out(silu(z + W_zy shift(y)) ⊙ y) or W_out y; fills f->sy, zs, gy. The reference's
 * transposed z (spec §9 item 4) is not reproduced. */
static void output_fwd(const FpMamba2Cfg *c, const FpMamba2W *w, FwdCache *f, float *out, const float *y, int B,
                       int T) {
    int M = B * T, E = c->E;
    size_t ME = (size_t)M * E;
    if (c->glu_in_loop) {
        k_linear_fwd(out, y, w->out_proj, NULL, M, E, c->D);
        return;
    }
    fpc_shift_fwd(f->sy, y, B, T, E);
    k_linear_fwd(f->zs, f->sy, w->zy.W, NULL, M, E, E);
    k_axpby(f->zs, 1.0f, f->z, 1.0f, ME);
    k_swiglu_fwd(f->gy, f->zs, y, ME); /* gy = silu(zs) y */
    k_linear_fwd(out, f->gy, w->out_proj, NULL, M, E, c->D);
}

/* n_back undamped applications from sc->Y (= Y*), then the output. */
static int graded_and_output(const FpMamba2Cfg *c, const FpMamba2W *w, FwdCache *f, FwdScratch *sc, float *out,
                             int with_cache, int B, int T) {
    size_t ME = (size_t)B * T * c->E;
    const float *y = sc->Y;
    for (int k = 0; k < c->n_back; k++) {
        if (with_cache) {
            step_fwd(c, w, f, &f->step[k], y, sc->mscratch, B, T);
            y = f->step[k].y;
        } else {
            step_fwd(c, w, f, &sc->ng, y, sc->mscratch, B, T);
            memcpy(sc->Y, sc->ng.y, ME * sizeof(float));
        }
    }
    output_fwd(c, w, f, out, y, B, T);
    return fpc_check_finite(out, (size_t)B * T * c->D, "fp_mamba2");
}

/* Carve the forward's memory and run the prepare part; f points at the cache or the scratch. */
static FwdCache *begin_fwd(const FpMamba2Cfg *c, const FpMamba2W *w, FwdScratch *sc, FwdCache *fc, const float *u,
                           float *cache, float *scratch, int B, int T) {
    Carve ks = fpc_carve(scratch);
    carve_fwd_scratch(c, &ks, sc, B, T, cache == NULL);
    FwdCache *f = &sc->pre;
    if (cache) {
        Carve kc = fpc_carve(cache);
        carve_cache(c, &kc, fc, B, T, c->n_back);
        f = fc;
    }
    prepare(c, w, f, u, B, T);
    return f;
}

static int solve(const FpMamba2Cfg *c, const FpMamba2W *w, FwdCache *f, FwdScratch *sc, const FpoOpts *opts,
                 FpMambaStats *st, int B, int T) {
    SolveCtx sx = {c, w, f, &sc->ng, sc->mscratch, B, T};
    FpMap map = {.ctx = &sx, .n = (size_t)B * T * c->E, .nb = B, .f = solve_f};
    return fpc_solve(&map, c->E, sc->Y, opts, st, 0, sc->solver);
}

int fp_mamba2_fwd(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, const FpoOpts *opts,
                  FpMambaStats *st, float *cache, float *scratch, int B, int T) {
    FwdScratch sc;
    FwdCache fc;
    FwdCache *f = begin_fwd(c, w, &sc, &fc, u, cache, scratch, B, T);
    int rc = solve(c, w, f, &sc, opts, st, B, T);
    return rc ? rc : graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
}

int fp_mamba2_solve(const FpMamba2Cfg *c, const FpMamba2W *w, float *ystar, const float *u, const FpoOpts *opts,
                    FpMambaStats *st, float *scratch, int B, int T) {
    FwdScratch sc;
    FwdCache fc;
    FwdCache *f = begin_fwd(c, w, &sc, &fc, u, NULL, scratch, B, T);
    int rc = solve(c, w, f, &sc, opts, st, B, T);
    memcpy(ystar, sc.Y, (size_t)B * T * c->E * sizeof(float));
    return rc;
}

int fp_mamba2_fwd_at(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, const float *ystar,
                     float *cache, float *scratch, int B, int T) {
    FwdScratch sc;
    FwdCache fc;
    FwdCache *f = begin_fwd(c, w, &sc, &fc, u, cache, scratch, B, T);
    memcpy(sc.Y, ystar, (size_t)B * T * c->E * sizeof(float));
    return graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
}

void fp_mamba2_bwd(const FpMamba2Cfg *c, const FpMamba2W *w, FpMamba2W *dw, float *du, const float *dout,
                   const float *u, const float *cache, float *scratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N, D = c->D, C = c->C, H = c->H;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    Carve kc = fpc_carve((float *)cache);
    FwdCache fc, *f = &fc;
    carve_cache(c, &kc, &fc, B, T, c->n_back);
    Carve ks = fpc_carve(scratch);
    BwdScratch g;
    carve_bwd_scratch(c, &ks, &g, M);
    const float *y = f->step[c->n_back - 1].y;
    memset(g.dz, 0, ME * sizeof(float));
    memset(g.dx, 0, ME * sizeof(float));
    memset(g.ddt, 0, (size_t)M * H * sizeof(float));
    memset(g.bc.dB, 0, MN * sizeof(float));
    memset(g.bc.dC, 0, MN * sizeof(float));
    memset(g.dA, 0, (size_t)H * sizeof(float));
    memset(g.dy, 0, ME * sizeof(float));
    /* output */
    if (c->glu_in_loop) {
        k_linear_bwd(g.dy, dw->out_proj, NULL, dout, y, w->out_proj, M, E, D);
    } else {
        memset(g.dgy, 0, ME * sizeof(float));
        k_linear_bwd(g.dgy, dw->out_proj, NULL, dout, f->gy, w->out_proj, M, E, D);
        memset(g.dzs, 0, ME * sizeof(float)); /* g.dy is zero here too: both accumulate */
        k_swiglu_bwd(g.dzs, g.dy, g.dgy, f->zs, y, ME);
        k_axpby(g.dz, 1.0f, g.dzs, 1.0f, ME);
        memset(g.dsy, 0, ME * sizeof(float));
        k_linear_bwd(g.dsy, dw->zy.W, NULL, g.dzs, f->sy, w->zy.W, M, E, E);
        fpc_shift_bwd(g.dy, g.dsy, B, T, E);
    }
    /* graded steps, last first; the first step's input Y* is a constant */
    for (int k = c->n_back - 1; k >= 0; k--) {
        float *dprev = k > 0 ? g.dyprev : NULL;
        if (dprev) memset(dprev, 0, ME * sizeof(float));
        step_bwd(c, w, dw, f, &f->step[k], &g, g.dy, dprev, B, T);
        if (dprev) memcpy(g.dy, dprev, ME * sizeof(float));
    }
    /* prepare: Δ = softplus(δ + dt_bias), A = −exp(A_log) */
    k_mul_sigmoid(g.ddt, f->dtraw, w->dt_bias, M, H); /* softplus' = sigmoid */
    if (dw->dt_bias)
        for (int m = 0; m < M; m++)
            for (int h = 0; h < H; h++) dw->dt_bias[h] += g.ddt[(size_t)m * H + h];
    if (dw->A_log)
        for (int h = 0; h < H; h++) dw->A_log[h] += g.dA[h] * f->A[h];
    /* d xBC = [dx | dB | dC] per token */
    for (int m = 0; m < M; m++) {
        float *r = g.dxbc + (size_t)m * C;
        memcpy(r, g.dx + (size_t)m * E, (size_t)E * sizeof(float));
        memcpy(r + E, g.bc.dB + (size_t)m * N, (size_t)N * sizeof(float));
        memcpy(r + E + N, g.bc.dC + (size_t)m * N, (size_t)N * sizeof(float));
    }
    float *dxbc_pre = g.dxbc;
    if (c->conv) {
        /* xbc = silu(conv(xbc_pre)): recompute the conv output for silu' */
        float *pre = g.dpre;
        k_conv1d_fwd(pre, f->xbc_pre, w->conv_w, w->conv_b, B, T, C, c->W);
        /* dconv = dxbc ⊙ silu'(pre), the gradient on the conv output */
        memset(g.dconv, 0, (size_t)M * C * sizeof(float));
        k_silu_bwd(g.dconv, g.dxbc, pre, (size_t)M * C);
        memset(g.dxbc, 0, (size_t)M * C * sizeof(float));
        k_conv1d_bwd(g.dxbc, dw->conv_w, dw->conv_b, g.dconv, f->xbc_pre, w->conv_w, B, T, C, c->W);
        dxbc_pre = g.dxbc;
    }
    k_linear_bwd(du, dw->in_proj, NULL, g.dz, u, w->in_proj, M, D, E);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)E * D : NULL, NULL, dxbc_pre, u, w->in_proj + (size_t)E * D,
                 M, D, C);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)(E + C) * D : NULL, NULL, g.ddt, u,
                 w->in_proj + (size_t)(E + C) * D, M, D, H);
}

/* ---- sequential mode --------------------------------------------------------------------------- */

typedef struct {
    const FpMamba2Cfg *c;
    const FpMamba2W *w;
    const float *x, *Bm, *Cm, *z, *dt, *A, *S;
    StepBufs *sb;
    float *mscratch;
    float *Sout; /* NULL in the inner iterations */
    int B;
} TokCtx;

static void tok_f(void *ctx, float *out, const float *y) {
    TokCtx *t = ctx;
    const FpMamba2Cfg *c = t->c;
    StepBufs *s = t->sb;
    fpc_mix_apply(&c->mix, t->w->mixer, s->mix.xt, s->mix.v, s->mix.p, NULL, t->x, y, t->B, t->mscratch);
    fpc_bc_fwd(&s->bc, t->w->bc.W, s->mix.s, t->Bm, t->Cm, t->B, c->E, c->N, 1, c->eps);
    k_ssd_step(c->glu_in_loop ? s->opre : s->o, t->Sout, t->S, s->mix.xt, t->dt, t->A, s->bc.bbar, s->bc.cbar,
               t->w->Dskip, t->B, c->H, c->P, c->N);
    gate_norm(c, t->w, s, t->z, out, t->B, 0);
}

size_t fp_mamba2_state_floats(const FpMamba2Cfg *c, int B) {
    return (size_t)B * ((size_t)c->C * c->W + (size_t)c->H * c->P * c->N + c->E);
}

typedef struct {
    float *z, *xbc_pre, *xbc, *x, *Bm, *Cm, *dtraw, *dt, *A, *Y, *y, *zs, *gy, *solver, *mscratch;
    StepBufs sb;
} TokBufs;

static void carve_tok(const FpMamba2Cfg *c, Carve *k, TokBufs *t, int B) {
    size_t BE = (size_t)B * c->E, BN = (size_t)B * c->N;
    t->z = fpc_take(k, BE);
    t->xbc_pre = fpc_take(k, (size_t)B * c->C);
    t->xbc = fpc_take(k, (size_t)B * c->C);
    t->x = fpc_take(k, BE);
    t->Bm = fpc_take(k, BN);
    t->Cm = fpc_take(k, BN);
    t->dtraw = fpc_take(k, (size_t)B * c->H);
    t->dt = fpc_take(k, (size_t)B * c->H);
    t->A = fpc_take(k, (size_t)c->H);
    t->Y = fpc_take(k, BE);
    t->y = fpc_take(k, BE);
    t->zs = fpc_take(k, BE);
    t->gy = fpc_take(k, BE);
    t->solver = fpc_take(k, fpo_scratch_floats(BE, B));
    t->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, B));
    carve_step(c, k, &t->sb, B, 1, 0);
}

size_t fp_mamba2_step_scratch_floats(const FpMamba2Cfg *c, int B) {
    Carve k = {0};
    TokBufs t;
    carve_tok(c, &k, &t, B);
    return fpc_carved(&k);
}

int fp_mamba2_step(const FpMamba2Cfg *c, const FpMamba2W *w, float *out, const float *u, float *state,
                   const FpoOpts *opts, FpMambaStats *st, float *scratch, int B) {
    int E = c->E, D = c->D, C = c->C, H = c->H;
    size_t BE = (size_t)B * E;
    Carve k = fpc_carve(scratch);
    TokBufs t;
    carve_tok(c, &k, &t, B);
    float *conv = state, *S = conv + (size_t)B * C * c->W, *yprev = S + (size_t)B * H * c->P * c->N;
    k_linear_fwd(t.z, u, w->in_proj, NULL, B, D, E);
    k_linear_fwd(t.xbc_pre, u, w->in_proj + (size_t)E * D, NULL, B, D, C);
    k_linear_fwd(t.dtraw, u, w->in_proj + (size_t)(E + C) * D, NULL, B, D, H);
    if (c->conv) {
        /* the conv window does not depend on the fixed point: commit it now */
        k_conv1d_step(t.xbc, conv, conv, t.xbc_pre, w->conv_w, w->conv_b, B, C, c->W);
        k_silu_fwd(t.xbc, t.xbc, (size_t)B * C);
    } else {
        memcpy(t.xbc, t.xbc_pre, (size_t)B * C * sizeof(float));
    }
    split_xbc(c, t.x, t.Bm, t.Cm, t.xbc, B);
    k_softplus(t.dt, t.dtraw, w->dt_bias, B, H);
    for (int h = 0; h < H; h++) t.A[h] = -expf(w->A_log[h]);
    /* s = y*_{t−1} is fixed during the token's iterations, and so is p */
    memcpy(t.sb.mix.s, yprev, BE * sizeof(float));
    fpc_make_p(t.sb.mix.p, t.x, t.sb.mix.s, B, E, c->h_dep, c->symm);
    TokCtx tc = {c, w, t.x, t.Bm, t.Cm, t.z, t.dt, t.A, S, &t.sb, t.mscratch, NULL, B};
    FpMap map = {.ctx = &tc, .n = BE, .nb = B, .f = tok_f};
    int rc = fpc_solve(&map, E, t.Y, opts, st, 1, t.solver);
    if (rc) return rc;
    /* n_back applications as the parallel path; the last one commits the SSD state */
    for (int kk = 0; kk < c->n_back; kk++) {
        tc.Sout = kk == c->n_back - 1 ? S : NULL;
        tok_f(&tc, t.y, t.Y);
        memcpy(t.Y, t.y, BE * sizeof(float));
    }
    if (c->glu_in_loop) {
        k_linear_fwd(out, t.y, w->out_proj, NULL, B, E, D);
    } else {
        k_linear_fwd(t.zs, yprev, w->zy.W, NULL, B, E, E);
        k_axpby(t.zs, 1.0f, t.z, 1.0f, BE);
        k_swiglu_fwd(t.gy, t.zs, t.y, BE);
        k_linear_fwd(out, t.gy, w->out_proj, NULL, B, E, D);
    }
    memcpy(yprev, t.y, BE * sizeof(float));
    return fpc_check_finite(out, (size_t)B * D, "fp_mamba2");
}
