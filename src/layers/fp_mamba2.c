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

static void add_params(const void *cv, ParamTable *t, const char *prefix, float out_scale) {
    const FpMamba2Cfg *c = cv;
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

static void bind(const void *cv, void *wv, const ParamTable *t, float *block, const char *prefix) {
    const FpMamba2Cfg *c = cv;
    FpMamba2W *w = wv;
    w->in_proj = fpc_param_find(t, block, prefix, "in_proj.weight");
    w->conv_w = fpc_param_find(t, block, prefix, "conv1d.weight");
    w->conv_b = fpc_param_find(t, block, prefix, "conv1d.bias");
    w->dt_bias = fpc_param_find(t, block, prefix, "dt_bias");
    w->A_log = fpc_param_find(t, block, prefix, "A_log");
    w->Dskip = fpc_param_find(t, block, prefix, "D");
    w->norm_w = fpc_param_find(t, block, prefix, "norm.weight");
    w->out_proj = fpc_param_find(t, block, prefix, "out_proj.weight");
    CHECK(w->in_proj && w->dt_bias && w->A_log && w->Dskip && w->norm_w && w->out_proj && (!c->conv || w->conv_w),
          "fp_mamba2 tensors of '%s' missing", prefix);
}

static void parts(const void *cv, const void *wv, FpcParts *p) {
    const FpMamba2Cfg *c = cv;
    FpMamba2W *w = (FpMamba2W *)wv;
    if (c)
        *p = (FpcParts){.D = c->D, .E = c->E, .n_back = c->n_back, .mix = &c->mix, .N = c->N,
                        .has_zy = !c->glu_in_loop};
    if (w) p->mixer = &w->mixer;
    if (w && c) {
        p->bc = &w->bc;
        p->zy = c->glu_in_loop ? NULL : &w->zy;
    }
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

/* Scratch of the forward: the no-grad step, the iterate, the mixer's memory. */
typedef struct {
    StepBufs ng;
    float *Y, *mscratch;
} FwdScratch;

static void carve_fwd_scratch(const FpMamba2Cfg *c, Carve *k, FwdScratch *s, int B, int T) {
    int M = B * T;
    carve_step(c, k, &s->ng, B, T, 0);
    s->Y = fpc_take(k, (size_t)M * c->E);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
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
    k_zero(g->dop, ME);
    k_gated_rmsnorm_bwd(g->dop, g->dz, dw->norm_w, dy, s->o, f->z, w->norm_w, s->rstd, M, E);
    if (c->glu_in_loop) fpc_glu_bwd(g->dz, g->dop, s->opre, f->z, ME);
    k_zero(g->mix.dxt, ME);
    k_zero(g->bc.dbbar, MN);
    k_zero(g->bc.dcbar, MN);
    k_ssd_bwd(g->mix.dxt, g->ddt, g->dA, g->bc.dbbar, g->bc.dcbar, dw->Dskip, NULL, g->dop, NULL, s->mix.xt, f->dt,
              f->A, s->bc.bbar, s->bc.cbar, w->Dskip, NULL, s->saved, B, T, c->H, c->P, N);
    /* W_bc: the gradient on s only matters when chaining to an earlier graded step */
    k_zero(g->mix.ds, ME);
    fpc_bc_bwd(&s->bc, &g->bc, dw->bc.W, dyprev ? g->mix.ds : NULL, w->bc.W, s->mix.s, M, E, N, 1, c->eps);
    /* x̃ = Q(p)(x − yin) + yin, p from x and s */
    fpc_mix_bwd(&c->mix, c->h_dep, c->symm, w->mixer, dw->mixer, &s->mix, &g->mix, g->dx, g->dx, dyprev, g->mscratch,
                B, T);
}

/* ---- the row ------------------------------------------------------------------------------- */

typedef struct {
    const float *x, *Bm, *Cm, *z, *dt, *A, *S;
    float *Sout; /* NULL in the inner iterations */
} TokCtx;

typedef struct {
    float *z, *xbc_pre, *xbc, *x, *Bm, *Cm, *dtraw, *dt, *A, *Y, *y, *zs, *gy, *mscratch;
    StepBufs sb;
} TokBufs;

/* The buffers of one call (fp_common.h's FpcState). */
typedef struct {
    FpcBufs b;     /* what the drivers reach (first) */
    FwdCache f;    /* in the cache, or without one its prepare and output buffers in the scratch */
    FwdScratch sc;
    BwdScratch g;
    TokBufs t;
    TokCtx tc;
    float *yprev;  /* (B,E) the state's previous y */
} State;
_Static_assert(offsetof(State, b) == 0, "the drivers' view first");
_Static_assert(sizeof(State) <= FPC_STATE_BYTES, "fp_mamba2's buffers fit an FpcState");

static void carve_fwd(const void *cv, void *sv, Carve *kc, Carve *ks, int B, int T) {
    const FpMamba2Cfg *c = cv;
    State *s = sv;
    carve_fwd_scratch(c, ks, &s->sc, B, T);
    /* without a cache: the prepare and output buffers from the scratch */
    carve_cache(c, kc ? kc : ks, &s->f, B, T, kc ? c->n_back : 0);
    s->b.Y = s->sc.Y;
    s->b.ng_out = &s->sc.ng.y;
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
    return sb->y;
}

/* out = W_out(silu(z + W_zy shift(y)) ⊙ y) or W_out y; fills f->sy, zs, gy. The reference's
 * transposed z (spec §9 item 4) is not reproduced. */
static void output(const void *cv, const void *wv, void *sv, float *out, const float *y, int with_cache, int B,
                   int T) {
    (void)with_cache;
    const FpMamba2Cfg *c = cv;
    const FpMamba2W *w = wv;
    FwdCache *f = &((State *)sv)->f;
    if (!c->glu_in_loop) fpc_shift_fwd(f->sy, y, B, T, c->E);
    fpc_gate_out_fwd(out, f->zs, f->gy, y, f->sy, f->z, c->glu_in_loop ? NULL : &w->zy, w->out_proj, B * T, c->E,
                     c->D);
}

static void carve_bwd(const void *cv, void *sv, Carve *kc, Carve *ks, int B, int T) {
    const FpMamba2Cfg *c = cv;
    State *s = sv;
    carve_cache(c, kc, &s->f, B, T, c->n_back);
    carve_bwd_scratch(c, ks, &s->g, B * T);
    s->b.dy = s->g.dy;
    s->b.dprev = s->g.dyprev;
}

static void bwd_step(const void *c, const void *w, void *dw, void *sv, int k, const float *dy, float *dyprev, int B,
                     int T) {
    State *s = sv;
    step_bwd(c, w, dw, &s->f, &s->f.step[k], &s->g, dy, dyprev, B, T);
}

static void bwd(const void *cv, const void *wv, void *dwv, void *sv, const float *dout, float *du, const float *u,
                int B, int T) {
    const FpMamba2Cfg *c = cv;
    const FpMamba2W *w = wv;
    FpMamba2W *dw = dwv;
    State *s = sv;
    FwdCache *f = &s->f;
    BwdScratch *g = &s->g;
    int M = B * T, E = c->E, N = c->N, D = c->D, C = c->C, H = c->H;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    const float *y = f->step[c->n_back - 1].y;
    k_zero(g->dz, ME);
    k_zero(g->dx, ME);
    k_zero(g->ddt, (size_t)M * H);
    k_zero(g->bc.dB, MN);
    k_zero(g->bc.dC, MN);
    k_zero(g->dA, (size_t)H);
    fpc_gate_out_bwd(g->dy, g->dz, dw->out_proj, &dw->zy, dout, y, f->sy, f->zs, f->gy,
                     c->glu_in_loop ? NULL : &w->zy, w->out_proj, g->dgy, g->dzs, g->dsy, B, T, E, D);
    /* the graded steps, last first (fp_common.c); then the prepare part: Δ = softplus(δ + dt_bias),
     * A = −exp(A_log), xBC = silu(conv(xBC_pre)), W_in */
    fpc_graded_bwd(&fp_mamba2_layer, c, w, dw, sv, B, T);
    k_mul_sigmoid(g->ddt, f->dtraw, w->dt_bias, M, H); /* softplus' = sigmoid */
    if (dw->dt_bias)
        for (int m = 0; m < M; m++)
            for (int h = 0; h < H; h++) dw->dt_bias[h] += g->ddt[(size_t)m * H + h];
    if (dw->A_log)
        for (int h = 0; h < H; h++) dw->A_log[h] += g->dA[h] * f->A[h];
    /* d xBC = [dx | dB | dC] per token */
    for (int m = 0; m < M; m++) {
        float *r = g->dxbc + (size_t)m * C;
        memcpy(r, g->dx + (size_t)m * E, (size_t)E * sizeof(float));
        memcpy(r + E, g->bc.dB + (size_t)m * N, (size_t)N * sizeof(float));
        memcpy(r + E + N, g->bc.dC + (size_t)m * N, (size_t)N * sizeof(float));
    }
    float *dxbc_pre = g->dxbc;
    if (c->conv) {
        /* xbc = silu(conv(xbc_pre)): recompute the conv output for silu' */
        float *pre = g->dpre;
        k_conv1d_fwd(pre, f->xbc_pre, w->conv_w, w->conv_b, B, T, C, c->W);
        /* dconv = dxbc ⊙ silu'(pre), the gradient on the conv output */
        k_zero(g->dconv, (size_t)M * C);
        k_silu_bwd(g->dconv, g->dxbc, pre, (size_t)M * C);
        k_zero(g->dxbc, (size_t)M * C);
        k_conv1d_bwd(g->dxbc, dw->conv_w, dw->conv_b, g->dconv, f->xbc_pre, w->conv_w, B, T, C, c->W);
        dxbc_pre = g->dxbc;
    }
    k_linear_bwd(du, dw->in_proj, NULL, g->dz, u, w->in_proj, M, D, E);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)E * D : NULL, NULL, dxbc_pre, u, w->in_proj + (size_t)E * D,
                 M, D, C);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)(E + C) * D : NULL, NULL, g->ddt, u,
                 w->in_proj + (size_t)(E + C) * D, M, D, H);
}

/* ---- sequential mode --------------------------------------------------------------------------- */

static void tok_f(const FpMamba2Cfg *c, const FpMamba2W *w, const TokCtx *t, StepBufs *s, float *out, const float *y,
                  float *mscratch, int B) {
    fpc_mix_apply(&c->mix, w->mixer, s->mix.xt, s->mix.v, s->mix.p, NULL, t->x, y, B, mscratch);
    fpc_bc_fwd(&s->bc, w->bc.W, s->mix.s, t->Bm, t->Cm, B, c->E, c->N, 1, c->eps);
    k_ssd_step(c->glu_in_loop ? s->opre : s->o, t->Sout, t->S, s->mix.xt, t->dt, t->A, s->bc.bbar, s->bc.cbar,
               w->Dskip, B, c->H, c->P, c->N);
    gate_norm(c, w, s, t->z, out, B, 0);
}

/* [conv window (C,W) | SSD state (H,P,N) | previous y (E)] per sequence */
static size_t state_floats(const void *cv, int B) {
    const FpMamba2Cfg *c = cv;
    return (size_t)B * ((size_t)c->C * c->W + (size_t)c->H * c->P * c->N + c->E);
}

static void carve_tok(const void *cv, void *sv, Carve *k, int B) {
    const FpMamba2Cfg *c = cv;
    State *s = sv;
    TokBufs *t = &s->t;
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
    t->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, B));
    carve_step(c, k, &t->sb, B, 1, 0);
    s->b.Y = t->Y;
    s->b.tok_y = t->y;
}

static void tok_prepare(const void *cv, const void *wv, void *sv, const float *u, float *state, int B) {
    const FpMamba2Cfg *c = cv;
    const FpMamba2W *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, D = c->D, C = c->C, H = c->H;
    size_t BE = (size_t)B * E;
    float *conv = state, *S = conv + (size_t)B * C * c->W;
    s->yprev = S + (size_t)B * H * c->P * c->N;
    k_linear_fwd(t->z, u, w->in_proj, NULL, B, D, E);
    k_linear_fwd(t->xbc_pre, u, w->in_proj + (size_t)E * D, NULL, B, D, C);
    k_linear_fwd(t->dtraw, u, w->in_proj + (size_t)(E + C) * D, NULL, B, D, H);
    if (c->conv) {
        /* the conv window does not depend on the fixed point: commit it now */
        k_conv1d_step(t->xbc, conv, conv, t->xbc_pre, w->conv_w, w->conv_b, B, C, c->W);
        k_silu_fwd(t->xbc, t->xbc, (size_t)B * C);
    } else {
        memcpy(t->xbc, t->xbc_pre, (size_t)B * C * sizeof(float));
    }
    split_xbc(c, t->x, t->Bm, t->Cm, t->xbc, B);
    k_softplus(t->dt, t->dtraw, w->dt_bias, B, H);
    for (int h = 0; h < H; h++) t->A[h] = -expf(w->A_log[h]);
    /* s = y*_{t−1} is fixed during the token's iterations, and so is p */
    memcpy(t->sb.mix.s, s->yprev, BE * sizeof(float));
    fpc_make_p(t->sb.mix.p, t->x, t->sb.mix.s, B, E, c->h_dep, c->symm);
    s->tc = (TokCtx){t->x, t->Bm, t->Cm, t->z, t->dt, t->A, S, NULL};
}

/* the final application commits the SSD state */
static void tok_apply(const void *c, const void *w, void *sv, float *out, const float *y, int commit, int B) {
    State *s = sv;
    s->tc.Sout = commit ? (float *)s->tc.S : NULL;
    tok_f(c, w, &s->tc, &s->t.sb, out, y, s->t.mscratch, B);
}

static void tok_output(const void *cv, const void *wv, void *sv, float *out, const float *y, float *state, int B) {
    (void)state;
    const FpMamba2Cfg *c = cv;
    const FpMamba2W *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, D = c->D;
    size_t BE = (size_t)B * E;
    fpc_gate_out_fwd(out, t->zs, t->gy, y, s->yprev, t->z, c->glu_in_loop ? NULL : &w->zy, w->out_proj, B, E, D);
    memcpy(s->yprev, y, BE * sizeof(float));
}

const FpLayerOps fp_mamba2_layer = {
    .name = "fp_mamba2", .w_bytes = sizeof(FpMamba2W), .parts = parts, .add_params = add_params, .bind = bind,
    .carve_fwd = carve_fwd, .prepare = prepare_row, .step = step, .output = output, .carve_bwd = carve_bwd,
    .bwd = bwd, .bwd_step = bwd_step, .state_floats = state_floats,
    .carve_tok = carve_tok, .tok_prepare = tok_prepare, .tok_apply = tok_apply, .tok_output = tok_output,
};
