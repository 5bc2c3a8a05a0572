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
    if (D < 1 || expand < 1 || N < 1 || R < 1 || W < 1 || n_back < 1 || n_back > FP_MAX_BACK)
        return err_set(IM_EINVAL, "fp_mamba: sizes must be >= 1 and fp_n_backwards <= 64 (d_model %d, expand %d, "
                       "d_state %d, dt_rank %d, d_conv %d, fp_n_backwards %d)", D, expand, N, R, W, n_back);
    *c = (FpMambaCfg){.D = D, .E = expand * D, .N = N, .R = R, .W = W, .conv = conv, .h_dep = h_dep,
                      .symm = symm, .bc_norm = bc_norm, .glu_in_loop = glu_in_loop, .n_back = n_back, .eps = eps};
    c->dp = h_dep && !symm ? 2 * c->E : c->E;
    return mixer_cfg_init(&c->mix, mixer_type, c->E, c->dp, rank, ac, proj_rank, kron_norm, eps);
}

/* ---- parameters ------------------------------------------------------------------------------ */

static void add_params(const void *cv, ParamTable *t, const char *prefix, float out_scale) {
    const FpMambaCfg *c = cv;
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

static void bind(const void *cv, void *wv, const ParamTable *t, float *block, const char *prefix) {
    (void)cv;
    FpMambaW *w = wv;
    w->in_proj = fpc_param_find(t, block, prefix, "in_proj.weight");
    w->conv_w = fpc_param_find(t, block, prefix, "conv1d.weight");
    w->conv_b = fpc_param_find(t, block, prefix, "conv1d.bias");
    w->x_proj = fpc_param_find(t, block, prefix, "x_proj.weight");
    w->dt_w = fpc_param_find(t, block, prefix, "dt_proj.weight");
    w->dt_b = fpc_param_find(t, block, prefix, "dt_proj.bias");
    w->A_log = fpc_param_find(t, block, prefix, "A_log");
    w->Dskip = fpc_param_find(t, block, prefix, "D");
    w->ln_w = fpc_param_find(t, block, prefix, "out_norm.weight");
    w->ln_b = fpc_param_find(t, block, prefix, "out_norm.bias");
    w->out_proj = fpc_param_find(t, block, prefix, "out_proj.weight");
    CHECK(w->in_proj && w->x_proj && w->A_log && w->out_proj, "fp_mamba tensors of '%s' missing", prefix);
}

static void parts(const void *cv, const void *wv, FpcParts *p) {
    const FpMambaCfg *c = cv;
    FpMambaW *w = (FpMambaW *)wv;
    if (c)
        *p = (FpcParts){.D = c->D, .E = c->E, .n_back = c->n_back, .mix = &c->mix, .N = c->N,
                        .has_zy = !c->glu_in_loop};
    if (w) p->mixer = &w->mixer;
    if (w && c) {
        p->bc = &w->bc;
        p->zy = c->glu_in_loop ? NULL : &w->zy;
    }
}

/* S4D-real: A_log[i,j] = ln(j+1) */
static void post_init(const void *cv, void *wv) {
    const FpMambaCfg *c = cv;
    FpMambaW *w = wv;
    for (int i = 0; i < c->E; i++)
        for (int j = 0; j < c->N; j++) w->A_log[(size_t)i * c->N + j] = logf((float)(j + 1));
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
    StepBufs step[FP_MAX_BACK]; /* graded steps (n_back) */
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

/* Scratch of the forward: the no-grad step, the iterate, the mixer's memory. */
typedef struct {
    StepBufs ng;
    float *Y, *mscratch;
    float *rawfix;          /* the x share of the mixer projections during the solve | NULL */
    float *decay;           /* the scan's decays exp(Δ A), k_s6_decay's table | NULL (see below) */
} FwdScratch;

/* Δ and A are fixed during a solve, so the scan's exps, most of its cost, are the same in every
 * application of f: the forward takes them once (k_s6_decay, in prepare) and every scan reads
 * them (`bench_kernels --only scan`, B 64, T 17, E 128, N 16, one thread, AVX-512: 718 us per
 * scan taking them, 260 reading them, 692 once for the table). Up to this many floats (256 MiB,
 * N floats per activation); above, each scan takes its own, as without the table, and the
 * results are the same either way (the table holds the values the scan computes). */
#define DECAY_MAX_FLOATS ((size_t)64 << 20)

static int use_decay_table(const FpMambaCfg *c, int B, int T) {
    return k_s6_decay_floats(B, T, c->E, c->N) <= DECAY_MAX_FLOATS;
}

/* The mixer input's fixed columns during a solve: p = [x ; s] → E, p = x → E (= dp);
 * 0 when the projections cannot be split (x + s, factorised or input-free mixers). */
static int fixed_split(const FpMambaCfg *c, int M) {
    if (mixer_fixed_floats(&c->mix, M) == 0 || (c->h_dep && c->symm)) return 0;
    return c->E;
}

static void carve_fwd_scratch(const FpMambaCfg *c, Carve *k, FwdScratch *s, int B, int T) {
    int M = B * T;
    carve_step(c, k, &s->ng, M, 0);
    s->Y = fpc_take(k, (size_t)M * c->E);
    s->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, M));
    s->rawfix = fixed_split(c, M) ? fpc_take(k, mixer_fixed_floats(&c->mix, M)) : NULL;
    s->decay = use_decay_table(c, B, T) ? fpc_take(k, k_s6_decay_floats(B, T, c->E, c->N)) : NULL;
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
/* rawfix: the precomputed x share of the mixer projections (gradient-free solve iterations) | NULL;
 * decay: the scan's decays (FwdScratch) | NULL. */
static void step_fwd(const FpMambaCfg *c, const FpMambaW *w, const FwdCache *f, StepBufs *s, const float *yin,
                     const float *rawfix, const float *decay, float *mscratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E;
    fpc_mix_fwd(&c->mix, c->h_dep, c->symm, w->mixer, &s->mix, f->xc, f->xc, yin, rawfix, mscratch, B, T);
    fpc_bc_fwd(&s->bc, w->bc.W, s->mix.s, f->Bm, f->Cm, M, E, N, c->bc_norm, c->eps);
    float *o = c->glu_in_loop ? s->opre : s->o;
    k_s6_fwd(o, NULL, s->mix.xt, f->dt, f->A, decay, s->bc.bbar, s->bc.cbar, w->Dskip, B, T, E, N);
    if (c->glu_in_loop) k_swiglu_fwd(s->o, f->z, s->opre, ME); /* o = silu(z) opre */
    layernorm_fwd(s->y, s->ln, s->o, w->ln_w, w->ln_b, M, E, c->eps);
}

/* Backward of one graded step: dy (M,E) → parameter grads, prepare grads (dxc, dz, ddt, dB, dC),
 * and, when dyprev != NULL, the gradient with respect to the step's input. */
static void step_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw, const FwdCache *f, const StepBufs *s,
                     BwdScratch *g, const float *dy, float *dyprev, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    k_zero(g->dop, ME);
    layernorm_bwd(g->dop, dw->ln_w, dw->ln_b, dy, s->o, w->ln_w, s->ln, M, E);
    if (c->glu_in_loop) fpc_glu_bwd(g->dz, g->dop, s->opre, f->z, ME);
    k_zero(g->mix.dxt, ME);
    k_zero(g->bc.dbbar, MN);
    k_zero(g->bc.dcbar, MN);
    k_s6_bwd(g->mix.dxt, g->ddt, g->dA, g->bc.dbbar, g->bc.dcbar, dw->Dskip, g->dop, s->mix.xt, f->dt, f->A,
             s->bc.bbar, s->bc.cbar, w->Dskip, B, T, E, N);
    /* W_bc: ds only matters when chaining to an earlier step */
    k_zero(g->mix.ds, ME);
    fpc_bc_bwd(&s->bc, &g->bc, dw->bc.W, dyprev ? g->mix.ds : NULL, w->bc.W, s->mix.s, M, E, N, c->bc_norm, c->eps);
    /* x̃ = Q(p)(xc − yin) + yin, p from xc and s */
    fpc_mix_bwd(&c->mix, c->h_dep, c->symm, w->mixer, dw->mixer, &s->mix, &g->mix, g->dxc, g->dxc, dyprev,
                g->mscratch, B, T);
}

/* ---- the row ------------------------------------------------------------------------------- */

typedef struct {
    const float *xc, *z, *p, *dt, *A, *decay, *bbar, *cbar, *H;
    float *v, *xt, *o, *opre, *ln, *mscratch;
    const float *rawfix; /* the token's whole mixer projection (p is fixed per token) | NULL */
    float *Hout;         /* NULL in the inner iterations */
} TokCtx;

typedef struct {
    float *xpre, *z, *xc, *dlow, *Bm, *Cm, *dtpre, *dt, *A, *decay, *s, *p, *v, *xt, *o, *opre, *ln, *Y, *y, *zs, *gy,
        *mscratch, *rawfix;
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
_Static_assert(sizeof(State) <= FPC_STATE_BYTES, "fp_mamba's buffers fit an FpcState");

static void carve_fwd(const void *cv, void *sv, Carve *kc, Carve *ks, int B, int T) {
    const FpMambaCfg *c = cv;
    State *s = sv;
    carve_fwd_scratch(c, ks, &s->sc, B, T);
    FpMambaCfg c1 = *c;
    c1.n_back = 0; /* without a cache: the prepare and output buffers from the scratch */
    carve_cache(kc ? c : &c1, kc ? kc : ks, &s->f, B * T);
    s->b.Y = s->sc.Y;
    s->b.ng_out = &s->sc.ng.y;
}

static void prepare_row(const void *cv, const void *w, void *sv, const float *u, int B, int T) {
    const FpMambaCfg *c = cv;
    State *s = sv;
    prepare(c, w, &s->f, u, B, T);
    if (s->sc.decay) k_s6_decay(s->sc.decay, s->f.dt, s->f.A, B, T, c->E, c->N);
}

/* x is fixed during the solve: its share of the mixer projections is computed once */
static void presolve(const void *cv, const void *wv, void *sv, int B, int T) {
    const FpMambaCfg *c = cv;
    State *s = sv;
    if (s->sc.rawfix)
        mixer_project_fixed(&c->mix, ((const FpMambaW *)wv)->mixer, s->sc.rawfix, s->f.xc, c->E, B * T);
}

/* solve: with the x share of the projections computed once (presolve) */
static const float *step(const void *c, const void *w, void *sv, int k, const float *yin, int solve, int B,
                         int T) {
    State *s = sv;
    StepBufs *sb = k >= 0 ? &s->f.step[k] : &s->sc.ng;
    step_fwd(c, w, &s->f, sb, yin, solve ? s->sc.rawfix : NULL, s->sc.decay, s->sc.mscratch, B, T);
    return sb->y;
}

/* out = W_out(silu(z + W_zy shift(y)) ⊙ y) or W_out y; fills f->sy, zs, gy */
static void output(const void *cv, const void *wv, void *sv, float *out, const float *y, int with_cache, int B,
                   int T) {
    (void)with_cache;
    const FpMambaCfg *c = cv;
    const FpMambaW *w = wv;
    FwdCache *f = &((State *)sv)->f;
    if (!c->glu_in_loop) fpc_shift_fwd(f->sy, y, B, T, c->E);
    fpc_gate_out_fwd(out, f->zs, f->gy, y, f->sy, f->z, c->glu_in_loop ? NULL : &w->zy, w->out_proj, B * T, c->E,
                     c->D);
}

static void carve_bwd(const void *c, void *sv, Carve *kc, Carve *ks, int B, int T) {
    State *s = sv;
    carve_cache(c, kc, &s->f, B * T);
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
    const FpMambaCfg *c = cv;
    const FpMambaW *w = wv;
    FpMambaW *dw = dwv;
    State *s = sv;
    FwdCache *f = &s->f;
    BwdScratch *g = &s->g;
    int M = B * T, E = c->E, N = c->N, R = c->R, D = c->D;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    const float *y = f->step[c->n_back - 1].y;
    k_zero(g->dz, ME);
    k_zero(g->dxc, ME);
    k_zero(g->ddt, ME);
    k_zero(g->bc.dB, MN);
    k_zero(g->bc.dC, MN);
    k_zero(g->dA, (size_t)E * N);
    fpc_gate_out_bwd(g->dy, g->dz, dw->out_proj, &dw->zy, dout, y, f->sy, f->zs, f->gy,
                     c->glu_in_loop ? NULL : &w->zy, w->out_proj, g->dgy, g->dzs, g->dsy, B, T, E, D);
    /* the graded steps, last first (fp_common.c); then the prepare part: Δ = softplus(dtpre),
     * dtpre = dlow W_dtᵀ + b_dt, [δlow ; B ; C] = W_x xc, conv, W_in */
    fpc_graded_bwd(&fp_mamba_layer, c, w, dw, sv, B, T);
    k_mul_sigmoid(g->ddt, f->dtpre, NULL, M, E); /* softplus' = sigmoid */
    k_zero(g->ddlow, (size_t)M * R);
    k_linear_bwd(g->ddlow, dw->dt_w, dw->dt_b, g->ddt, f->dlow, w->dt_w, M, R, E);
    k_linear_bwd(g->dxc, dw->x_proj, NULL, g->ddlow, f->xc, w->x_proj, M, E, R);
    k_linear_bwd(g->dxc, dw->x_proj ? dw->x_proj + (size_t)R * E : NULL, NULL, g->bc.dB, f->xc,
                 w->x_proj + (size_t)R * E, M, E, N);
    k_linear_bwd(g->dxc, dw->x_proj ? dw->x_proj + (size_t)(R + N) * E : NULL, NULL, g->bc.dC, f->xc,
                 w->x_proj + (size_t)(R + N) * E, M, E, N);
    if (dw->A_log)
        for (size_t i = 0; i < (size_t)E * N; i++) dw->A_log[i] += g->dA[i] * f->A[i];
    float *dxpre = g->dxc;
    if (c->conv) {
        /* xc = silu(conv(xpre)): recompute the conv output for silu' */
        float *pre = g->mix.dv;
        k_conv1d_fwd(pre, f->xpre, w->conv_w, w->conv_b, B, T, E, c->W);
        k_zero(g->dxpre, ME);
        float *dconv = g->mix.dxt;
        k_zero(dconv, ME);
        k_silu_bwd(dconv, g->dxc, pre, ME);
        k_conv1d_bwd(g->dxpre, dw->conv_w, dw->conv_b, dconv, f->xpre, w->conv_w, B, T, E, c->W);
        dxpre = g->dxpre;
    }
    k_linear_bwd(du, dw->in_proj, NULL, dxpre, u, w->in_proj, M, D, E);
    k_linear_bwd(du, dw->in_proj ? dw->in_proj + (size_t)E * D : NULL, NULL, g->dz, u, w->in_proj + (size_t)E * D,
                 M, D, E);
}

/* ---- sequential mode --------------------------------------------------------------------------- */

static void tok_f(const FpMambaCfg *c, const FpMambaW *w, TokCtx *t, float *out, const float *y, int B) {
    size_t BE = (size_t)B * c->E;
    fpc_mix_apply(&c->mix, w->mixer, t->xt, t->v, t->p, t->rawfix, t->xc, y, B, t->mscratch);
    float *o = c->glu_in_loop ? t->opre : t->o;
    k_s6_step(o, t->Hout, t->H, t->xt, t->dt, t->A, t->decay, t->bbar, t->cbar, w->Dskip, B, c->E, c->N);
    if (c->glu_in_loop) k_swiglu_fwd(t->o, t->z, t->opre, BE);
    layernorm_fwd(out, NULL, t->o, w->ln_w, w->ln_b, B, c->E, c->eps);
}

/* [conv window (E,W) | S6 state (E,N) | previous y (E)] per sequence */
static size_t state_floats(const void *cv, int B) {
    const FpMambaCfg *c = cv;
    return (size_t)B * ((size_t)c->E * c->W + (size_t)c->E * c->N + c->E);
}

static void carve_tok(const void *cv, void *sv, Carve *k, int B) {
    const FpMambaCfg *c = cv;
    State *s = sv;
    TokBufs *t = &s->t;
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
    t->decay = fpc_take(k, BE * c->N);
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
    t->mscratch = fpc_take(k, mixer_scratch_floats(&c->mix, B));
    t->rawfix = mixer_fixed_floats(&c->mix, B) ? fpc_take(k, mixer_fixed_floats(&c->mix, B)) : NULL;
    s->b.Y = t->Y;
    s->b.tok_y = t->y;
}

static void tok_prepare(const void *cv, const void *wv, void *sv, const float *u, float *state, int B) {
    const FpMambaCfg *c = cv;
    const FpMambaW *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, N = c->N, R = c->R, D = c->D;
    size_t BE = (size_t)B * E;
    float *conv = state, *H = conv + (size_t)B * E * c->W;
    s->yprev = H + (size_t)B * E * N;
    k_linear_fwd(t->xpre, u, w->in_proj, NULL, B, D, E);
    k_linear_fwd(t->z, u, w->in_proj + (size_t)E * D, NULL, B, D, E);
    if (c->conv) {
        k_conv1d_step(t->xc, conv, conv, t->xpre, w->conv_w, w->conv_b, B, E, c->W);
        k_silu_fwd(t->xc, t->xc, BE);
    } else {
        memcpy(t->xc, t->xpre, BE * sizeof(float));
    }
    k_linear_fwd(t->dlow, t->xc, w->x_proj, NULL, B, E, R);
    k_linear_fwd(t->Bm, t->xc, w->x_proj + (size_t)R * E, NULL, B, E, N);
    k_linear_fwd(t->Cm, t->xc, w->x_proj + (size_t)(R + N) * E, NULL, B, E, N);
    k_linear_fwd(t->dtpre, t->dlow, w->dt_w, w->dt_b, B, R, E);
    k_softplus(t->dt, t->dtpre, NULL, B, E);
    k_neg_exp(t->A, w->A_log, (size_t)E * N); /* per token: E N exponentials, vectorised */
    k_s6_step_decay(t->decay, t->dt, t->A, B, E, N); /* the token's iterations share them */
    /* s = y*_{t−1} is fixed during the token's iterations, and so are p, b̄, c̄ (in place of B, C) */
    memcpy(t->s, s->yprev, BE * sizeof(float));
    fpc_make_p(t->p, t->xc, t->s, B, E, c->h_dep, c->symm);
    FpcBc bc = {t->zs, t->gy, t->Bm, t->Cm}; /* zs, gy are free until the output */
    fpc_bc_fwd(&bc, w->bc.W, t->s, t->Bm, t->Cm, B, E, N, c->bc_norm, c->eps);
    /* p does not change during the token's iterations: project it once */
    if (t->rawfix) mixer_project_fixed(&c->mix, w->mixer, t->rawfix, t->p, c->dp, B);
    s->tc = (TokCtx){t->xc, t->z, t->p, t->dt, t->A, t->decay, t->Bm, t->Cm, H, t->v, t->xt, t->o, t->opre,
                     t->ln, t->mscratch, t->rawfix, NULL};
}

/* the final application commits the S6 state */
static void tok_apply(const void *c, const void *w, void *sv, float *out, const float *y, int commit, int B) {
    State *s = sv;
    s->tc.Hout = commit ? (float *)s->tc.H : NULL;
    tok_f(c, w, &s->tc, out, y, B);
}

static void tok_output(const void *cv, const void *wv, void *sv, float *out, const float *y, float *state, int B) {
    (void)state;
    const FpMambaCfg *c = cv;
    const FpMambaW *w = wv;
    State *s = sv;
    TokBufs *t = &s->t;
    int E = c->E, D = c->D;
    size_t BE = (size_t)B * E;
    fpc_gate_out_fwd(out, t->zs, t->gy, y, s->yprev, t->z, c->glu_in_loop ? NULL : &w->zy, w->out_proj, B, E, D);
    memcpy(s->yprev, y, BE * sizeof(float));
}

const FpLayerOps fp_mamba_layer = {
    .name = "fp_mamba", .w_bytes = sizeof(FpMambaW), .parts = parts, .add_params = add_params, .bind = bind,
    .post_init = post_init, .carve_fwd = carve_fwd, .prepare = prepare_row, .presolve = presolve, .step = step,
    .output = output, .carve_bwd = carve_bwd, .bwd = bwd, .bwd_step = bwd_step,
    .state_floats = state_floats, .carve_tok = carve_tok, .tok_prepare = tok_prepare,
    .tok_apply = tok_apply, .tok_output = tok_output,
};
