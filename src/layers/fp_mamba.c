/* fp_mamba.c: the FP-Mamba mixer layer (see fp_mamba.h). The mixing stage, b̄ / c̄, the solve
 * and the memory scheme are those of all the FP layers (fp_common.h). */
#include "fp_mamba.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_common.h"
#include "layernorm.h"

int fp_mamba_cfg_init(FpMambaCfg *c, int D, int expand, int N, int R, int W, int conv, int h_dep, int symm,
                      int bc_norm, int glu_in_loop, int n_back, float eps, const char *mixer_type, int rank,
                      const char *ac, int proj_rank, const char *kron_norm) {
    memset(c, 0, sizeof *c);
    if (D < 1 || expand < 1 || N < 1 || R < 1 || W < 1 || n_back < 1 || n_back > 64)
        return err_set(IM_EINVAL, "fp_mamba: sizes must be >= 1 and fp_n_backwards <= 64 (d_model %d, expand %d, "
                       "d_state %d, dt_rank %d, d_conv %d, fp_n_backwards %d)", D, expand, N, R, W, n_back);
    *c = (FpMambaCfg){.D = D, .E = expand * D, .N = N, .R = R, .W = W, .conv = conv, .h_dep = h_dep,
                      .symm = symm, .bc_norm = bc_norm, .glu_in_loop = glu_in_loop, .n_back = n_back, .eps = eps};
    c->dp = h_dep && !symm ? 2 * c->E : c->E;
    return mixer_cfg_init(&c->mix, mixer_type, c->E, c->dp, rank, ac, proj_rank, kron_norm, eps);
}

/* ---- parameters ------------------------------------------------------------------------------ */

void fp_mamba_add_params(const FpMambaCfg *c, ParamTable *t, const char *prefix, float out_scale) {
    int D = c->D, E = c->E, N = c->N, R = c->R, W = c->W;
    fpc_param_add(t, prefix, "in_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 0, 1, 2, 2 * E, D, 0);
    if (c->conv) {
        fpc_param_add(t, prefix, "conv1d.weight", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 1, 3, E, 1, W);
        fpc_param_add(t, prefix, "conv1d.bias", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 0, 1, E, 0, 0);
    }
    fpc_param_add(t, prefix, "x_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, R + 2 * N, E, 0);
    fpc_param_add(t, prefix, "dt_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)R), 0, 1, 2, E, R, 0);
    fpc_param_add(t, prefix, "dt_proj.bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, E, 0, 0);
    fpc_param_add(t, prefix, "A_log", INIT_ZERO, 0, 0, 0, 2, E, N, 0); /* S4D-real, set by post_init */
    fpc_param_add(t, prefix, "D", INIT_ONE, 0, 0, 0, 1, E, 0, 0);
    fpc_bczy_add_params(t, prefix, N, E, !c->glu_in_loop);
    fpc_mixer_add_params(&c->mix, t, prefix);
    fpc_param_add(t, prefix, "out_norm.weight", INIT_ONE, 0, 0, 0, 1, E, 0, 0);
    fpc_param_add(t, prefix, "out_norm.bias", INIT_ZERO, 0, 0, 0, 1, E, 0, 0);
    fpc_param_add(t, prefix, "out_proj.weight", INIT_UNIFORM, out_scale / sqrtf((float)E), 0, 1, 2, D, E, 0);
}

size_t fp_mamba_eff_floats(const FpMambaCfg *c) {
    return fpc_bczy_eff_floats(c->N, c->E, !c->glu_in_loop) + mixer_eff_floats(&c->mix);
}

void fp_mamba_bind(const FpMambaCfg *c, FpMambaW *w, const ParamTable *t, float *block, const char *prefix, float *eff) {
    memset(w, 0, sizeof *w);
    w->in_proj = fpc_param_find(t, block, prefix, "in_proj.weight");
    w->conv_w = fpc_param_find(t, block, prefix, "conv1d.weight");
    w->conv_b = fpc_param_find(t, block, prefix, "conv1d.bias");
    w->x_proj = fpc_param_find(t, block, prefix, "x_proj.weight");
    w->dt_w = fpc_param_find(t, block, prefix, "dt_proj.weight");
    w->dt_b = fpc_param_find(t, block, prefix, "dt_proj.bias");
    w->A_log = fpc_param_find(t, block, prefix, "A_log");
    w->Dskip = fpc_param_find(t, block, prefix, "D");
    eff = fpc_bczy_bind(&w->bc, c->glu_in_loop ? NULL : &w->zy, t, block, prefix, eff, c->N, c->E);
    w->ln_w = fpc_param_find(t, block, prefix, "out_norm.weight");
    w->ln_b = fpc_param_find(t, block, prefix, "out_norm.bias");
    w->out_proj = fpc_param_find(t, block, prefix, "out_proj.weight");
    CHECK(w->in_proj && w->x_proj && w->A_log && w->bc.v && w->out_proj, "fp_mamba tensors of '%s' missing", prefix);
    w->mixer = fpc_mixer_bind(&c->mix, t, block, prefix, eff);
}

void fp_mamba_unbind(FpMambaW *w) {
    free(w->mixer);
    w->mixer = NULL;
}

void fp_mamba_post_init(const FpMambaCfg *c, FpMambaW *w) {
    for (int i = 0; i < c->E; i++)
        for (int j = 0; j < c->N; j++) w->A_log[(size_t)i * c->N + j] = logf((float)(j + 1));
    fpc_bczy_init(&w->bc, c->glu_in_loop ? NULL : &w->zy, c->N, c->E);
    mixer_post_init(&c->mix, w->mixer);
}

void fp_mamba_refresh(const FpMambaCfg *c, FpMambaW *w) {
    fpc_bczy_refresh(&w->bc, c->glu_in_loop ? NULL : &w->zy, c->N, c->E);
    mixer_refresh(&c->mix, w->mixer);
}

void fp_mamba_wn_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw) {
    fpc_bczy_wn_bwd(&w->bc, &dw->bc, c->glu_in_loop ? NULL : &w->zy, &dw->zy, c->N, c->E);
    mixer_wn_bwd(&c->mix, w->mixer, dw->mixer);
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* Buffers of one application of f over M = B·T tokens (or B tokens in the step path). */
typedef struct {
    FpcMix mix;        /* yin, s = shift(yin), p, v = x − yin, mixer cache, x̃ */
    FpcBc bc;          /* (M,N) B + By, C + Cy and b̄, c̄ */
    float *opre;       /* (M,E) S6 output before the gate (glu_in_loop) */
    float *o;          /* (M,E) LayerNorm input */
    float *ln;         /* (2M) LayerNorm cache */
    float *y;          /* (M,E) output */
} StepBufs;

static void carve_step(const FpMambaCfg *c, Carve *k, StepBufs *s, int M, int with_cache) {
    size_t ME = (size_t)M * c->E;
    fpc_carve_mix(k, &s->mix, &c->mix, M, with_cache);
    fpc_carve_bc(k, &s->bc, M, c->N);
    s->opre = c->glu_in_loop ? fpc_take(k, ME) : NULL;
    s->o = fpc_take(k, ME);
    s->ln = fpc_take(k, layernorm_cache_floats(M));
    s->y = fpc_take(k, ME);
}

/* Forward cache: the prepare part, the graded steps and the output gate. */
typedef struct {
    float *xpre, *z, *xc;   /* (M,E) pre-conv x, gate, mixer-branch x */
    float *dlow;            /* (M,R) */
    float *Bm, *Cm;         /* (M,N) */
    float *dtpre, *dt;      /* (M,E) δ + b_dt, softplus of it */
    float *A;               /* (E,N) */
    StepBufs step[64];      /* graded steps (n_back) */
    float *sy, *zs, *gy;    /* (M,E) shift(y), z + W_zy shift(y), gate ⊙ y */
} FwdCache;

static void carve_cache(const FpMambaCfg *c, Carve *k, FwdCache *f, int M) {
    size_t ME = (size_t)M * c->E, MN = (size_t)M * c->N;
    f->xpre = fpc_take(k, ME);
    f->z = fpc_take(k, ME);
    f->xc = c->conv ? fpc_take(k, ME) : f->xpre;
    f->dlow = fpc_take(k, (size_t)M * c->R);
    f->Bm = fpc_take(k, MN);
    f->Cm = fpc_take(k, MN);
    f->dtpre = fpc_take(k, ME);
    f->dt = fpc_take(k, ME);
    f->A = fpc_take(k, (size_t)c->E * c->N);
    for (int i = 0; i < c->n_back; i++) carve_step(c, k, &f->step[i], M, 1);
    f->sy = fpc_take(k, ME);
    f->zs = fpc_take(k, ME);
    f->gy = fpc_take(k, ME);
}

/* Scratch of the forward: the no-grad step, the iterate, the solver's memory, the mixer's. */
typedef struct {
    StepBufs ng;
    float *Y, *solver, *mscratch;
    float *rawfix;          /* the x share of the mixer projections during the solve | NULL */
    FwdCache pre;           /* prepare buffers when no cache is given */
} FwdScratch;

/* The mixer input's fixed columns during a solve: p = [x ; s] → E, p = x → E (= dp);
 * 0 when the projections cannot be split (x + s, factorised or input-free mixers). */
static int fixed_split(const FpMambaCfg *c, int M) {
    if (mixer_fixed_floats(&c->mix, M) == 0 || (c->h_dep && c->symm)) return 0;
    return c->E;
}

static void carve_fwd_scratch(const FpMambaCfg *c, Carve *k, FwdScratch *s, int B, int T, int with_pre) {
    int M = B * T;
    carve_step(c, k, &s->ng, M, 0);
    s->Y = fpc_take(k, (size_t)M * c->E);
    s->solver = fpc_take(k, fpo_scratch_floats((size_t)M * c->E, B));
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
    s->rawfix = fixed_split(c, M) ? fpc_take(k, mixer_fixed_floats(&c->mix, M)) : NULL;
    if (with_pre) {
        FpMambaCfg c1 = *c;
        c1.n_back = 0; /* prepare + output buffers only */
        carve_cache(&c1, k, &s->pre, M);
    }
}

/* Backward temporaries. */
typedef struct {
    float *dy, *dyprev;
    FpcMixGrad mix; /* dxt, dv, dp, ds */
    float *dop, *dxc, *dz, *ddt;
    FpcBcGrad bc;   /* dbbar, dcbar, dbraw, dcraw, dB, dC */
    float *ddlow, *dxpre, *dA, *dgy, *dzs, *dsy, *mscratch;
} BwdScratch;

static void carve_bwd_scratch(const FpMambaCfg *c, Carve *k, BwdScratch *s, int M) {
    size_t ME = (size_t)M * c->E;
    s->dy = fpc_take(k, ME);
    s->dyprev = fpc_take(k, ME);
    fpc_carve_mix_grad(k, &s->mix, &c->mix, M);
    s->dop = fpc_take(k, ME);
    s->dxc = fpc_take(k, ME);
    s->dz = fpc_take(k, ME);
    s->ddt = fpc_take(k, ME);
    fpc_carve_bc_grad(k, &s->bc, M, c->N);
    s->ddlow = fpc_take(k, (size_t)M * c->R);
    s->dxpre = fpc_take(k, ME);
    s->dA = fpc_take(k, (size_t)c->E * c->N);
    s->dgy = fpc_take(k, ME);
    s->dzs = fpc_take(k, ME);
    s->dsy = fpc_take(k, ME);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
}

size_t fp_mamba_cache_floats(const FpMambaCfg *c, int B, int T) {
    Carve k = {0};
    FwdCache f;
    carve_cache(c, &k, &f, B * T);
    return fpc_carved(&k);
}

size_t fp_mamba_scratch_floats(const FpMambaCfg *c, int B, int T) {
    Carve k = {0}, kb = {0};
    FwdScratch s;
    BwdScratch b;
    carve_fwd_scratch(c, &k, &s, B, T, 1);
    carve_bwd_scratch(c, &kb, &b, B * T);
    return fpc_carved(k.used > kb.used ? &k : &kb);
}

/* ---- the pieces ------------------------------------------------------------------------------- */

/* The prepare part: in_proj, conv, x_proj, dt. */
static void prepare(const FpMambaCfg *c, const FpMambaW *w, FwdCache *f, const float *u, int B, int T) {
    int M = B * T, E = c->E, N = c->N, R = c->R, D = c->D;
    k_linear_fwd(f->xpre, u, w->in_proj, NULL, M, D, E);
    k_linear_fwd(f->z, u, w->in_proj + (size_t)E * D, NULL, M, D, E);
    if (c->conv) {
        k_conv1d_fwd(f->xc, f->xpre, w->conv_w, w->conv_b, B, T, E, c->W);
        k_silu_fwd(f->xc, f->xc, (size_t)M * E);
    }
    k_linear_fwd(f->dlow, f->xc, w->x_proj, NULL, M, E, R);
    k_linear_fwd(f->Bm, f->xc, w->x_proj + (size_t)R * E, NULL, M, E, N);
    k_linear_fwd(f->Cm, f->xc, w->x_proj + (size_t)(R + N) * E, NULL, M, E, N);
    k_linear_fwd(f->dtpre, f->dlow, w->dt_w, w->dt_b, M, R, E);
    k_softplus(f->dt, f->dtpre, NULL, M, E);
    k_neg_exp(f->A, w->A_log, (size_t)E * N);
}

/* One application of f on yin (B,T): fills s->... and s->y. mcache NULL = no-grad. */
/* rawfix: the precomputed x share of the mixer projections (gradient-free solve iterations) | NULL. */
static void step_fwd(const FpMambaCfg *c, const FpMambaW *w, const FwdCache *f, StepBufs *s, const float *yin,
                     const float *rawfix, float *mscratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E;
    fpc_mix_fwd(&c->mix, c->h_dep, c->symm, w->mixer, &s->mix, f->xc, f->xc, yin, rawfix, mscratch, B, T);
    fpc_bc_fwd(&s->bc, w->bc.W, s->mix.s, f->Bm, f->Cm, M, E, N, c->bc_norm, c->eps);
    float *o = c->glu_in_loop ? s->opre : s->o;
    k_s6_fwd(o, NULL, s->mix.xt, f->dt, f->A, s->bc.bbar, s->bc.cbar, w->Dskip, B, T, E, N);
    if (c->glu_in_loop) k_swiglu_fwd(s->o, f->z, s->opre, ME); /* o = silu(z) opre */
    layernorm_fwd(s->y, s->ln, s->o, w->ln_w, w->ln_b, M, E, c->eps);
}

/* Backward of one graded step: dy (M,E) → parameter grads, prepare grads (dxc, dz, ddt, dB, dC),
 * and, when dyprev != NULL, the gradient with respect to the step's input. */
static void step_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw, const FwdCache *f, const StepBufs *s,
                     BwdScratch *g, const float *dy, float *dyprev, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    memset(g->dop, 0, ME * sizeof(float));
    layernorm_bwd(g->dop, dw->ln_w, dw->ln_b, dy, s->o, w->ln_w, s->ln, M, E);
    if (c->glu_in_loop) fpc_glu_bwd(g->dz, g->dop, s->opre, f->z, ME);
    memset(g->mix.dxt, 0, ME * sizeof(float));
    memset(g->bc.dbbar, 0, MN * sizeof(float));
    memset(g->bc.dcbar, 0, MN * sizeof(float));
    k_s6_bwd(g->mix.dxt, g->ddt, g->dA, g->bc.dbbar, g->bc.dcbar, dw->Dskip, g->dop, s->mix.xt, f->dt, f->A,
             s->bc.bbar, s->bc.cbar, w->Dskip, B, T, E, N);
    /* W_bc: ds only matters when chaining to an earlier step */
    memset(g->mix.ds, 0, ME * sizeof(float));
    fpc_bc_bwd(&s->bc, &g->bc, dw->bc.W, dyprev ? g->mix.ds : NULL, w->bc.W, s->mix.s, M, E, N, c->bc_norm, c->eps);
    /* x̃ = Q(p)(xc − yin) + yin, p from xc and s */
    fpc_mix_bwd(&c->mix, c->h_dep, c->symm, w->mixer, dw->mixer, &s->mix, &g->mix, g->dxc, g->dxc, dyprev,
                g->mscratch, B, T);
}

/* ---- forward / backward ------------------------------------------------------------------------ */

typedef struct {
    const FpMambaCfg *c;
    const FpMambaW *w;
    const FwdCache *f;
    StepBufs *ng;
    const float *rawfix;
    float *mscratch;
    int B, T;
} SolveCtx;

static void solve_f(void *ctx, float *out, const float *y) {
    SolveCtx *s = ctx;
    float *keep = s->ng->y;
    s->ng->y = out;
    step_fwd(s->c, s->w, s->f, s->ng, y, s->rawfix, s->mscratch, s->B, s->T);
    s->ng->y = keep;
}

/* out = W_out(silu(z + W_zy shift(y)) ⊙ y) or W_out y; fills f->sy, zs, gy */
static void output_fwd(const FpMambaCfg *c, const FpMambaW *w, FwdCache *f, float *out, const float *y, int B, int T) {
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
static int graded_and_output(const FpMambaCfg *c, const FpMambaW *w, FwdCache *f, FwdScratch *sc, float *out,
                             int with_cache, int B, int T) {
    size_t ME = (size_t)B * T * c->E;
    const float *y = sc->Y;
    for (int k = 0; k < c->n_back; k++) {
        if (with_cache) {
            step_fwd(c, w, f, &f->step[k], y, NULL, sc->mscratch, B, T);
            y = f->step[k].y;
        } else {
            step_fwd(c, w, f, &sc->ng, y, NULL, sc->mscratch, B, T);
            memcpy(sc->Y, sc->ng.y, ME * sizeof(float));
        }
    }
    output_fwd(c, w, f, out, y, B, T);
    return fpc_check_finite(out, (size_t)B * T * c->D, "fp_mamba");
}

/* Carve the forward's memory and run the prepare part; f points at the cache or the scratch. */
static FwdCache *begin_fwd(const FpMambaCfg *c, const FpMambaW *w, FwdScratch *sc, FwdCache *fc, const float *u,
                           float *cache, float *scratch, int B, int T) {
    Carve ks = fpc_carve(scratch);
    carve_fwd_scratch(c, &ks, sc, B, T, cache == NULL);
    FwdCache *f = &sc->pre;
    if (cache) {
        Carve kc = fpc_carve(cache);
        carve_cache(c, &kc, fc, B * T);
        f = fc;
    }
    prepare(c, w, f, u, B, T);
    return f;
}

int fp_mamba_fwd(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, const FpoOpts *opts,
                 FpMambaStats *st, float *cache, float *scratch, int B, int T) {
    FwdScratch sc;
    FwdCache fc;
    FwdCache *f = begin_fwd(c, w, &sc, &fc, u, cache, scratch, B, T);
    /* x is fixed during the solve: its share of the mixer projections is computed once */
    if (sc.rawfix) mixer_project_fixed(&c->mix, w->mixer, sc.rawfix, f->xc, c->E, B * T);
    SolveCtx sx = {c, w, f, &sc.ng, sc.rawfix, sc.mscratch, B, T};
    FpMap map = {.ctx = &sx, .n = (size_t)B * T * c->E, .nb = B, .f = solve_f};
    int rc = fpc_solve(&map, c->E, sc.Y, opts, st, 0, sc.solver);
    return rc ? rc : graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
}

int fp_mamba_fwd_at(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, const float *ystar,
                    float *cache, float *scratch, int B, int T) {
    FwdScratch sc;
    FwdCache fc;
    FwdCache *f = begin_fwd(c, w, &sc, &fc, u, cache, scratch, B, T);
    memcpy(sc.Y, ystar, (size_t)B * T * c->E * sizeof(float));
    return graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
}

void fp_mamba_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw, float *du, const float *dout,
                  const float *u, const float *cache, float *scratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N, R = c->R, D = c->D;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    Carve kc = fpc_carve((float *)cache);
    FwdCache fc, *f = &fc;
    carve_cache(c, &kc, &fc, M);
    Carve ks = fpc_carve(scratch);
    BwdScratch g;
    carve_bwd_scratch(c, &ks, &g, M);
    const float *y = f->step[c->n_back - 1].y;
    memset(g.dz, 0, ME * sizeof(float));
    memset(g.dxc, 0, ME * sizeof(float));
    memset(g.ddt, 0, ME * sizeof(float));
    memset(g.bc.dB, 0, MN * sizeof(float));
    memset(g.bc.dC, 0, MN * sizeof(float));
    memset(g.dA, 0, (size_t)E * N * sizeof(float));
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
    /* prepare: Δ = softplus(dtpre), dtpre = dlow W_dtᵀ + b_dt */
    k_mul_sigmoid(g.ddt, f->dtpre, NULL, M, E); /* softplus' = sigmoid */
    memset(g.ddlow, 0, (size_t)M * R * sizeof(float));
    k_linear_bwd(g.ddlow, dw->dt_w, dw->dt_b, g.ddt, f->dlow, w->dt_w, M, R, E);
    k_linear_bwd(g.dxc, dw->x_proj, NULL, g.ddlow, f->xc, w->x_proj, M, E, R);
    k_linear_bwd(g.dxc, dw->x_proj ? dw->x_proj + (size_t)R * E : NULL, NULL, g.bc.dB, f->xc, w->x_proj + (size_t)R * E,
                 M, E, N);
    k_linear_bwd(g.dxc, dw->x_proj ? dw->x_proj + (size_t)(R + N) * E : NULL, NULL, g.bc.dC, f->xc,
                 w->x_proj + (size_t)(R + N) * E, M, E, N);
    if (dw->A_log)
        for (size_t i = 0; i < (size_t)E * N; i++) dw->A_log[i] += g.dA[i] * f->A[i];
    float *dxpre = g.dxc;
    if (c->conv) {
        /* xc = silu(conv(xpre)): recompute the conv output for silu' */
        float *pre = g.mix.dv;
        k_conv1d_fwd(pre, f->xpre, w->conv_w, w->conv_b, B, T, E, c->W);
        memset(g.dxpre, 0, ME * sizeof(float));
        float *dconv = g.mix.dxt;
        memset(dconv, 0, ME * sizeof(float));
        k_silu_bwd(dconv, g.dxc, pre, ME);
        k_conv1d_bwd(g.dxpre, dw->conv_w, dw->conv_b, dconv, f->xpre, w->conv_w, B, T, E, c->W);
        dxpre = g.dxpre;
    }
    k_linear_bwd(du, dw->in_proj, NULL, dxpre, u, w->in_proj, M, D, E);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)E * D : NULL, NULL, g.dz, u, w->in_proj + (size_t)E * D, M, D, E);
}

/* ---- sequential mode --------------------------------------------------------------------------- */

typedef struct {
    const FpMambaCfg *c;
    const FpMambaW *w;
    const float *xc, *z, *p, *dt, *A, *bbar, *cbar, *H;
    float *v, *xt, *o, *opre, *ln, *mscratch;
    const float *rawfix; /* the token's whole mixer projection (p is fixed per token) | NULL */
    float *Hout; /* NULL in the inner iterations */
    int B;
} TokCtx;

static void tok_f(void *ctx, float *out, const float *y) {
    TokCtx *t = ctx;
    const FpMambaCfg *c = t->c;
    int B = t->B, E = c->E;
    size_t BE = (size_t)B * E;
    fpc_mix_apply(&c->mix, t->w->mixer, t->xt, t->v, t->p, t->rawfix, t->xc, y, B, t->mscratch);
    float *o = c->glu_in_loop ? t->opre : t->o;
    k_s6_step(o, t->Hout, t->H, t->xt, t->dt, t->A, t->bbar, t->cbar, t->w->Dskip, B, E, c->N);
    if (c->glu_in_loop)
        k_swiglu_fwd(t->o, t->z, t->opre, BE);
    layernorm_fwd(out, NULL, t->o, t->w->ln_w, t->w->ln_b, B, E, c->eps);
}

size_t fp_mamba_state_floats(const FpMambaCfg *c, int B) {
    return (size_t)B * ((size_t)c->E * c->W + (size_t)c->E * c->N + c->E);
}

typedef struct {
    float *xpre, *z, *xc, *dlow, *Bm, *Cm, *dtpre, *dt, *A, *s, *p, *v, *xt, *o, *opre, *ln, *Y, *y, *zs, *gy,
        *solver, *mscratch, *rawfix;
} TokBufs;

static void carve_tok(const FpMambaCfg *c, Carve *k, TokBufs *t, int B) {
    size_t BE = (size_t)B * c->E, BN = (size_t)B * c->N;
    t->xpre = fpc_take(k, BE);
    t->z = fpc_take(k, BE);
    t->xc = fpc_take(k, BE);
    t->dlow = fpc_take(k, (size_t)B * c->R);
    t->Bm = fpc_take(k, BN);
    t->Cm = fpc_take(k, BN);
    t->dtpre = fpc_take(k, BE);
    t->dt = fpc_take(k, BE);
    t->A = fpc_take(k, (size_t)c->E * c->N);
    t->s = fpc_take(k, BE);
    t->p = fpc_take(k, (size_t)B * c->dp);
    t->v = fpc_take(k, BE);
    t->xt = fpc_take(k, BE);
    t->o = fpc_take(k, BE);
    t->opre = fpc_take(k, BE);
    t->ln = fpc_take(k, 2 * (size_t)B);
    t->Y = fpc_take(k, BE);
    t->y = fpc_take(k, BE);
    t->zs = fpc_take(k, BE);
    t->gy = fpc_take(k, BE);
    t->solver = fpc_take(k, fpo_scratch_floats(BE, B));
    t->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, B));
    t->rawfix = mixer_fixed_floats(&c->mix, B) ? fpc_take(k, mixer_fixed_floats(&c->mix, B)) : NULL;
}

size_t fp_mamba_step_scratch_floats(const FpMambaCfg *c, int B) {
    Carve k = {0};
    TokBufs t;
    carve_tok(c, &k, &t, B);
    return fpc_carved(&k);
}

int fp_mamba_step(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, float *state,
                  const FpoOpts *opts, FpMambaStats *st, float *scratch, int B) {
    int E = c->E, N = c->N, R = c->R, D = c->D;
    size_t BE = (size_t)B * E;
    Carve k = fpc_carve(scratch);
    TokBufs t;
    carve_tok(c, &k, &t, B);
    float *conv = state, *H = conv + (size_t)B * E * c->W, *yprev = H + (size_t)B * E * N;
    k_linear_fwd(t.xpre, u, w->in_proj, NULL, B, D, E);
    k_linear_fwd(t.z, u, w->in_proj + (size_t)E * D, NULL, B, D, E);
    if (c->conv) {
        k_conv1d_step(t.xc, conv, conv, t.xpre, w->conv_w, w->conv_b, B, E, c->W);
        k_silu_fwd(t.xc, t.xc, BE);
    } else {
        memcpy(t.xc, t.xpre, BE * sizeof(float));
    }
    k_linear_fwd(t.dlow, t.xc, w->x_proj, NULL, B, E, R);
    k_linear_fwd(t.Bm, t.xc, w->x_proj + (size_t)R * E, NULL, B, E, N);
    k_linear_fwd(t.Cm, t.xc, w->x_proj + (size_t)(R + N) * E, NULL, B, E, N);
    k_linear_fwd(t.dtpre, t.dlow, w->dt_w, w->dt_b, B, R, E);
    k_softplus(t.dt, t.dtpre, NULL, B, E);
    k_neg_exp(t.A, w->A_log, (size_t)E * N); /* per token: E N exponentials, vectorised */
    /* s = y*_{t−1} is fixed during the token's iterations, and so are p, b̄, c̄ (in place of B, C) */
    memcpy(t.s, yprev, BE * sizeof(float));
    fpc_make_p(t.p, t.xc, t.s, B, E, c->h_dep, c->symm);
    FpcBc bc = {t.zs, t.gy, t.Bm, t.Cm}; /* zs, gy are free until the output */
    fpc_bc_fwd(&bc, w->bc.W, t.s, t.Bm, t.Cm, B, E, N, c->bc_norm, c->eps);
    /* p does not change during the token's iterations: project it once */
    if (t.rawfix) mixer_project_fixed(&c->mix, w->mixer, t.rawfix, t.p, c->dp, B);
    TokCtx tc = {c, w, t.xc, t.z, t.p, t.dt, t.A, t.Bm, t.Cm, H, t.v, t.xt, t.o, t.opre, t.ln, t.mscratch, t.rawfix, NULL, B};
    FpMap map = {.ctx = &tc, .n = BE, .nb = B, .f = tok_f};
    int rc = fpc_solve(&map, E, t.Y, opts, st, 1, t.solver);
    if (rc) return rc;
    /* the final application commits the S6 state (n_back applications, as the parallel path) */
    for (int kk = 0; kk < c->n_back; kk++) {
        tc.Hout = kk == c->n_back - 1 ? H : NULL;
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
    return IM_OK;
}
