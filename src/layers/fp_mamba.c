/* fp_mamba.c: the FP-Mamba mixer layer (see fp_mamba.h). */
#include "fp_mamba.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "layernorm.h"

/* F.normalize's default eps for b̄, c̄ */
#define BC_EPS 1e-12f
#define PAR_MIN 16384

int fp_mamba_cfg_init(FpMambaCfg *c, int D, int expand, int N, int R, int W, int conv, int h_dep, int symm,
                      int bc_norm, int glu_in_loop, int n_back, float eps, const char *mixer_type, int rank,
                      const char *ac, int proj_rank, const char *kron_norm) {
    memset(c, 0, sizeof *c);
    if (D < 1 || expand < 1 || N < 1 || R < 1 || W < 1 || n_back < 1)
        return err_set(IM_EINVAL, "fp_mamba: sizes must be >= 1 (d_model %d, expand %d, d_state %d, dt_rank %d, "
                       "d_conv %d, fp_n_backwards %d)", D, expand, N, R, W, n_back);
    *c = (FpMambaCfg){.D = D, .E = expand * D, .N = N, .R = R, .W = W, .conv = conv, .h_dep = h_dep,
                      .symm = symm, .bc_norm = bc_norm, .glu_in_loop = glu_in_loop, .n_back = n_back, .eps = eps};
    c->dp = h_dep && !symm ? 2 * c->E : c->E;
    return mixer_cfg_init(&c->mix, mixer_type, c->E, c->dp, rank, ac, proj_rank, kron_norm, eps);
}

/* ---- parameters ------------------------------------------------------------------------------ */

static void add(ParamTable *t, const char *prefix, const char *suffix, InitRule init, float a, float b, int decay,
                int nd, int d0, int d1, int d2) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    if (nd == 1) ptab_add(t, name, init, a, b, decay, 1, d0);
    else if (nd == 2) ptab_add(t, name, init, a, b, decay, 2, d0, d1);
    else ptab_add(t, name, init, a, b, decay, 3, d0, d1, d2);
}

void fp_mamba_add_params(const FpMambaCfg *c, ParamTable *t, const char *prefix, float out_scale) {
    int D = c->D, E = c->E, N = c->N, R = c->R, W = c->W;
    add(t, prefix, "in_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 0, 1, 2, 2 * E, D, 0);
    if (c->conv) {
        add(t, prefix, "conv1d.weight", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 1, 3, E, 1, W);
        add(t, prefix, "conv1d.bias", INIT_UNIFORM, 1 / sqrtf((float)W), 0, 0, 1, E, 0, 0);
    }
    add(t, prefix, "x_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, R + 2 * N, E, 0);
    add(t, prefix, "dt_proj.weight", INIT_UNIFORM, 1 / sqrtf((float)R), 0, 1, 2, E, R, 0);
    add(t, prefix, "dt_proj.bias", INIT_DT_BIAS, 1e-3f, 0.1f, 0, 1, E, 0, 0);
    add(t, prefix, "A_log", INIT_ZERO, 0, 0, 0, 2, E, N, 0); /* S4D-real, set by post_init */
    add(t, prefix, "D", INIT_ONE, 0, 0, 0, 1, E, 0, 0);
    add(t, prefix, "bc_proj.weight_g", INIT_ONE, 0, 0, 1, 2, 2 * N, 1, 0);
    add(t, prefix, "bc_proj.weight_v", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, 2 * N, E, 0);
    if (!c->glu_in_loop) {
        add(t, prefix, "zy_proj.weight_g", INIT_ONE, 0, 0, 1, 2, E, 1, 0);
        add(t, prefix, "zy_proj.weight_v", INIT_UNIFORM, 1 / sqrtf((float)E), 0, 1, 2, E, E, 0);
    }
    char mp[PARAM_NAME_LEN];
    snprintf(mp, sizeof mp, "%s.mixer", prefix);
    mixer_add_params(&c->mix, t, mp);
    add(t, prefix, "out_norm.weight", INIT_ONE, 0, 0, 0, 1, E, 0, 0);
    add(t, prefix, "out_norm.bias", INIT_ZERO, 0, 0, 0, 1, E, 0, 0);
    add(t, prefix, "out_proj.weight", INIT_UNIFORM, out_scale / sqrtf((float)E), 0, 1, 2, D, E, 0);
}

size_t fp_mamba_eff_floats(const FpMambaCfg *c) {
    size_t n = 2 * (size_t)c->N * c->E + 16;
    if (!c->glu_in_loop) n += (size_t)c->E * c->E + 16;
    return n + mixer_eff_floats(&c->mix);
}

static float *find(const ParamTable *t, float *block, const char *prefix, const char *suffix) {
    char name[PARAM_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const ParamInfo *p = ptab_find(t, name);
    return p ? block + p->offset : NULL;
}

void fp_mamba_bind(const FpMambaCfg *c, FpMambaW *w, const ParamTable *t, float *block, const char *prefix, float *eff) {
    memset(w, 0, sizeof *w);
    w->in_proj = find(t, block, prefix, "in_proj.weight");
    w->conv_w = find(t, block, prefix, "conv1d.weight");
    w->conv_b = find(t, block, prefix, "conv1d.bias");
    w->x_proj = find(t, block, prefix, "x_proj.weight");
    w->dt_w = find(t, block, prefix, "dt_proj.weight");
    w->dt_b = find(t, block, prefix, "dt_proj.bias");
    w->A_log = find(t, block, prefix, "A_log");
    w->Dskip = find(t, block, prefix, "D");
    w->bc.g = find(t, block, prefix, "bc_proj.weight_g");
    w->bc.v = find(t, block, prefix, "bc_proj.weight_v");
    w->bc.W = eff;
    eff += 2 * (size_t)c->N * c->E + 16;
    if (!c->glu_in_loop) {
        w->zy.g = find(t, block, prefix, "zy_proj.weight_g");
        w->zy.v = find(t, block, prefix, "zy_proj.weight_v");
        w->zy.W = eff;
        eff += (size_t)c->E * c->E + 16;
    }
    w->ln_w = find(t, block, prefix, "out_norm.weight");
    w->ln_b = find(t, block, prefix, "out_norm.bias");
    w->out_proj = find(t, block, prefix, "out_proj.weight");
    CHECK(w->in_proj && w->x_proj && w->A_log && w->bc.v && w->out_proj, "fp_mamba tensors of '%s' missing", prefix);
    char mp[PARAM_NAME_LEN];
    snprintf(mp, sizeof mp, "%s.mixer", prefix);
    w->mixer = calloc(1, sizeof *w->mixer);
    CHECK(w->mixer, "out of memory");
    mixer_bind(&c->mix, w->mixer, t, block, mp, eff);
}

void fp_mamba_unbind(FpMambaW *w) {
    free(w->mixer);
    w->mixer = NULL;
}

void fp_mamba_post_init(const FpMambaCfg *c, FpMambaW *w) {
    for (int i = 0; i < c->E; i++)
        for (int j = 0; j < c->N; j++) w->A_log[(size_t)i * c->N + j] = logf((float)(j + 1));
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_init(&w->bc, &o, 2 * c->N, c->E);
    if (!c->glu_in_loop) linear_wn_init(&w->zy, &o, c->E, c->E);
    mixer_post_init(&c->mix, w->mixer);
}

void fp_mamba_refresh(const FpMambaCfg *c, FpMambaW *w) {
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_refresh(&w->bc, &o, 2 * c->N, c->E);
    if (!c->glu_in_loop) linear_wn_refresh(&w->zy, &o, c->E, c->E);
    mixer_refresh(&c->mix, w->mixer);
}

void fp_mamba_wn_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw) {
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_bwd(&w->bc, &dw->bc, &o, 2 * c->N, c->E);
    if (!c->glu_in_loop) linear_wn_bwd(&w->zy, &dw->zy, &o, c->E, c->E);
    mixer_wn_bwd(&c->mix, w->mixer, dw->mixer);
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* Bump allocation; with base NULL it only measures (STYLE §8.6). */
typedef struct {
    float *base;
    size_t used;
} Carve;

static float *take(Carve *k, size_t n) {
    float *p = k->base ? k->base + k->used : NULL;
    k->used += (n + 15) & ~(size_t)15; /* 64-byte aligned pieces */
    return p;
}

/* Buffers of one application of f over M = B·T tokens (or B tokens in the step path). */
typedef struct {
    float *yin;        /* (M,E) input iterate (graded steps keep it) */
    float *s;          /* (M,E) shift(yin) */
    float *p;          /* (M,dp) mixer input */
    float *v;          /* (M,E) x − yin */
    float *mcache;     /* mixer cache | NULL */
    float *xt;         /* (M,E) x̃ */
    float *braw, *craw;/* (M,N) B + By, C + Cy */
    float *bbar, *cbar;/* (M,N) normalised */
    float *opre;       /* (M,E) S6 output before the gate (glu_in_loop) */
    float *o;          /* (M,E) LayerNorm input */
    float *ln;         /* (2M) LayerNorm cache */
    float *y;          /* (M,E) output */
} StepBufs;

static void carve_step(const FpMambaCfg *c, Carve *k, StepBufs *s, int M, int with_cache) {
    size_t ME = (size_t)M * c->E, MN = (size_t)M * c->N;
    s->yin = with_cache ? take(k, ME) : NULL;
    s->s = take(k, ME);
    s->p = take(k, (size_t)M * c->dp);
    s->v = take(k, ME);
    s->mcache = with_cache ? take(k, mixer_cache_floats(&c->mix, M)) : NULL;
    s->xt = take(k, ME);
    s->braw = take(k, MN);
    s->craw = take(k, MN);
    s->bbar = take(k, MN);
    s->cbar = take(k, MN);
    s->opre = c->glu_in_loop ? take(k, ME) : NULL;
    s->o = take(k, ME);
    s->ln = take(k, layernorm_cache_floats(M));
    s->y = take(k, ME);
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
    f->xpre = take(k, ME);
    f->z = take(k, ME);
    f->xc = c->conv ? take(k, ME) : f->xpre;
    f->dlow = take(k, (size_t)M * c->R);
    f->Bm = take(k, MN);
    f->Cm = take(k, MN);
    f->dtpre = take(k, ME);
    f->dt = take(k, ME);
    f->A = take(k, (size_t)c->E * c->N);
    for (int i = 0; i < c->n_back; i++) carve_step(c, k, &f->step[i], M, 1);
    f->sy = take(k, ME);
    f->zs = take(k, ME);
    f->gy = take(k, ME);
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
    s->Y = take(k, (size_t)M * c->E);
    s->solver = take(k, fpo_scratch_floats((size_t)M * c->E, B));
    s->mscratch = take(k, mixer_scratch_floats(&c->mix, M));
    s->rawfix = fixed_split(c, M) ? take(k, mixer_fixed_floats(&c->mix, M)) : NULL;
    if (with_pre) {
        FpMambaCfg c1 = *c;
        c1.n_back = 0; /* prepare + output buffers only */
        carve_cache(&c1, k, &s->pre, M);
    }
}

/* Backward temporaries. */
typedef struct {
    float *dy, *dyprev, *dxt, *dv, *dp, *ds, *dop, *dxc, *dz, *ddt, *dbbar, *dcbar, *dbraw, *dcraw, *dB, *dC,
        *ddlow, *dxpre, *dA, *dgy, *dzs, *dsy, *mscratch;
} BwdScratch;

static void carve_bwd_scratch(const FpMambaCfg *c, Carve *k, BwdScratch *s, int M) {
    size_t ME = (size_t)M * c->E, MN = (size_t)M * c->N;
    s->dy = take(k, ME);
    s->dyprev = take(k, ME);
    s->dxt = take(k, ME);
    s->dv = take(k, ME);
    s->dp = take(k, (size_t)M * c->dp);
    s->ds = take(k, ME);
    s->dop = take(k, ME);
    s->dxc = take(k, ME);
    s->dz = take(k, ME);
    s->ddt = take(k, ME);
    s->dbbar = take(k, MN);
    s->dcbar = take(k, MN);
    s->dbraw = take(k, MN);
    s->dcraw = take(k, MN);
    s->dB = take(k, MN);
    s->dC = take(k, MN);
    s->ddlow = take(k, (size_t)M * c->R);
    s->dxpre = take(k, ME);
    s->dA = take(k, (size_t)c->E * c->N);
    s->dgy = take(k, ME);
    s->dzs = take(k, ME);
    s->dsy = take(k, ME);
    s->mscratch = take(k, mixer_scratch_floats(&c->mix, M));
}

size_t fp_mamba_cache_floats(const FpMambaCfg *c, int B, int T) {
    Carve k = {0};
    FwdCache f;
    carve_cache(c, &k, &f, B * T);
    return k.used + 16;
}

size_t fp_mamba_scratch_floats(const FpMambaCfg *c, int B, int T) {
    Carve k = {0}, kb = {0};
    FwdScratch s;
    BwdScratch b;
    carve_fwd_scratch(c, &k, &s, B, T, 1);
    carve_bwd_scratch(c, &kb, &b, B * T);
    return (k.used > kb.used ? k.used : kb.used) + 16;
}

static float *align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* ---- the pieces ------------------------------------------------------------------------------- */

/* dst[b,t] = src[b,t−1], dst[b,0] = 0, rows of E */
static void shift_fwd(float *dst, const float *src, int B, int T, int E) {
    for (int b = 0; b < B; b++) {
        float *d = dst + (size_t)b * T * E;
        const float *s = src + (size_t)b * T * E;
        memset(d, 0, (size_t)E * sizeof(float));
        if (T > 1) memcpy(d + E, s, (size_t)(T - 1) * E * sizeof(float));
    }
}

/* dsrc[b,t−1] += ddst[b,t] */
static void shift_bwd(float *dsrc, const float *ddst, int B, int T, int E) {
    for (int b = 0; b < B; b++)
        k_axpby(dsrc + (size_t)b * T * E, 1.0f, ddst + ((size_t)b * T + 1) * E, 1.0f, (size_t)(T - 1) * E);
}

/* p from x and s: [x ; s] per token, x + s, or x */
static void make_p(const FpMambaCfg *c, float *p, const float *x, const float *s, int M) {
    int E = c->E;
#pragma omp parallel for schedule(static) if ((long)M * E >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * E, *sm = s + (size_t)m * E;
        float *pm = p + (size_t)m * c->dp;
        if (!c->h_dep) memcpy(pm, xm, (size_t)E * sizeof(float));
        else if (c->symm)
            for (int i = 0; i < E; i++) pm[i] = xm[i] + sm[i];
        else {
            memcpy(pm, xm, (size_t)E * sizeof(float));
            memcpy(pm + E, sm, (size_t)E * sizeof(float));
        }
    }
}

static void l2norm_rows(float *y, const float *x, int M, int N) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * N;
        double s = 0;
        for (int j = 0; j < N; j++) s += (double)xm[j] * xm[j];
        float nrm = (float)sqrt(s), inv = 1.0f / (nrm > BC_EPS ? nrm : BC_EPS);
        for (int j = 0; j < N; j++) y[(size_t)m * N + j] = xm[j] * inv;
    }
}

/* dx += d normalize(x) / dx applied to dy */
static void l2norm_rows_bwd(float *dx, const float *dy, const float *x, int M, int N) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * N, *gm = dy + (size_t)m * N;
        double s = 0;
        for (int j = 0; j < N; j++) s += (double)xm[j] * xm[j];
        float nrm = (float)sqrt(s);
        if (nrm > BC_EPS) {
            double dot = 0;
            for (int j = 0; j < N; j++) dot += (double)xm[j] * gm[j];
            float a = 1.0f / nrm, bcoef = (float)(dot / ((double)nrm * nrm * nrm));
            for (int j = 0; j < N; j++) dx[(size_t)m * N + j] += a * gm[j] - bcoef * xm[j];
        } else {
            for (int j = 0; j < N; j++) dx[(size_t)m * N + j] += gm[j] / BC_EPS;
        }
    }
}

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
#pragma omp parallel for schedule(static) if ((long)M * E >= PAR_MIN)
    for (size_t i = 0; i < (size_t)M * E; i++) {
        float a = f->dtpre[i];
        f->dt[i] = a > 20.0f ? a : log1pf(expf(a));
    }
    for (size_t i = 0; i < (size_t)E * N; i++) f->A[i] = -expf(w->A_log[i]);
}

/* One application of f on yin (B,T): fills s->... and s->y. mcache NULL = no-grad. */
/* rawfix: the precomputed x share of the mixer projections (gradient-free solve iterations) | NULL. */
static void step_fwd(const FpMambaCfg *c, const FpMambaW *w, const FwdCache *f, StepBufs *s, const float *yin,
                     const float *rawfix, float *mscratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N;
    size_t ME = (size_t)M * E;
    if (s->yin && s->yin != yin) memcpy(s->yin, yin, ME * sizeof(float));
    shift_fwd(s->s, yin, B, T, E);
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
    for (size_t i = 0; i < ME; i++) s->v[i] = f->xc[i] - yin[i];
    if (rawfix) {
        mixer_fwd_fixed(&c->mix, w->mixer, s->xt, rawfix, c->h_dep ? s->s : NULL, c->dp - (c->h_dep ? E : 0), s->v, M,
                        mscratch);
    } else {
        make_p(c, s->p, f->xc, s->s, M);
        mixer_fwd(&c->mix, w->mixer, s->xt, s->p, s->v, M, s->mcache, mscratch);
    }
    k_axpby(s->xt, 1.0f, yin, 1.0f, ME);
    k_linear_fwd(s->braw, s->s, w->bc.W, NULL, M, E, N);
    k_linear_fwd(s->craw, s->s, w->bc.W + (size_t)N * E, NULL, M, E, N);
    k_axpby(s->braw, 1.0f, f->Bm, 1.0f, (size_t)M * N);
    k_axpby(s->craw, 1.0f, f->Cm, 1.0f, (size_t)M * N);
    if (c->bc_norm) {
        l2norm_rows(s->bbar, s->braw, M, N);
        l2norm_rows(s->cbar, s->craw, M, N);
    } else {
        memcpy(s->bbar, s->braw, (size_t)M * N * sizeof(float));
        memcpy(s->cbar, s->craw, (size_t)M * N * sizeof(float));
    }
    float *o = c->glu_in_loop ? s->opre : s->o;
    k_s6_fwd(o, NULL, s->xt, f->dt, f->A, s->bbar, s->cbar, w->Dskip, B, T, E, N);
    if (c->glu_in_loop) {
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
        for (size_t i = 0; i < ME; i++) {
            float zz = f->z[i];
            s->o[i] = s->opre[i] * zz / (1.0f + expf(-zz));
        }
    }
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
    if (c->glu_in_loop) {
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
        for (size_t i = 0; i < ME; i++) {
            float zz = f->z[i], sg = 1.0f / (1.0f + expf(-zz)), d = g->dop[i];
            g->dz[i] += d * s->opre[i] * sg * (1.0f + zz * (1.0f - sg));
            g->dop[i] = d * zz * sg;
        }
    }
    memset(g->dxt, 0, ME * sizeof(float));
    memset(g->dbbar, 0, MN * sizeof(float));
    memset(g->dcbar, 0, MN * sizeof(float));
    k_s6_bwd(g->dxt, g->ddt, g->dA, g->dbbar, g->dcbar, dw->Dskip, g->dop, s->xt, f->dt, f->A, s->bbar, s->cbar,
             w->Dskip, B, T, E, N);
    float *dbraw = g->dbbar, *dcraw = g->dcbar;
    if (c->bc_norm) {
        memset(g->dbraw, 0, MN * sizeof(float));
        memset(g->dcraw, 0, MN * sizeof(float));
        l2norm_rows_bwd(g->dbraw, g->dbbar, s->braw, M, N);
        l2norm_rows_bwd(g->dcraw, g->dcbar, s->craw, M, N);
        dbraw = g->dbraw;
        dcraw = g->dcraw;
    }
    k_axpby(g->dB, 1.0f, dbraw, 1.0f, MN);
    k_axpby(g->dC, 1.0f, dcraw, 1.0f, MN);
    /* W_bc: By = s W_bc[0:N]ᵀ, Cy = s W_bc[N:]ᵀ; ds only matters when chaining to an earlier step */
    memset(g->ds, 0, ME * sizeof(float));
    float *ds = dyprev ? g->ds : NULL;
    k_linear_bwd(ds, dw->bc.W, NULL, dbraw, s->s, w->bc.W, M, E, N);
    k_linear_bwd(ds, dw->bc.W + (size_t)N * E, NULL, dcraw, s->s, w->bc.W + (size_t)N * E, M, E, N);
    /* x̃ = Q(p) v + yin */
    memset(g->dv, 0, ME * sizeof(float));
    memset(g->dp, 0, (size_t)M * c->dp * sizeof(float));
    mixer_bwd(&c->mix, w->mixer, dw->mixer, g->dp, g->dv, g->dxt, s->p, s->v, M, s->mcache, g->mscratch);
    /* v = xc − yin;  p = [xc ; s] | xc + s | xc */
    k_axpby(g->dxc, 1.0f, g->dv, 1.0f, ME);
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
    for (int m = 0; m < M; m++) {
        const float *pm = g->dp + (size_t)m * c->dp;
        float *xm = g->dxc + (size_t)m * E, *sm = g->ds + (size_t)m * E;
        for (int i = 0; i < E; i++) xm[i] += pm[i];
        if (c->h_dep && dyprev)
            for (int i = 0; i < E; i++) sm[i] += c->symm ? pm[i] : pm[E + i];
    }
    if (dyprev) {
        k_axpby(dyprev, 1.0f, g->dxt, 1.0f, ME);
        k_axpby(dyprev, -1.0f, g->dv, 1.0f, ME);
        shift_bwd(dyprev, g->ds, B, T, E);
    }
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
    shift_fwd(f->sy, y, B, T, E);
    k_linear_fwd(f->zs, f->sy, w->zy.W, NULL, M, E, E);
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
    for (size_t i = 0; i < ME; i++) {
        float a = f->zs[i] + f->z[i];
        f->zs[i] = a;
        f->gy[i] = a / (1.0f + expf(-a)) * y[i];
    }
    k_linear_fwd(out, f->gy, w->out_proj, NULL, M, E, c->D);
}

static int graded_and_output(const FpMambaCfg *c, const FpMambaW *w, FwdCache *f, FwdScratch *sc, float *out,
                             int with_cache, int B, int T);

int fp_mamba_fwd(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, const FpoOpts *opts,
                 FpMambaStats *st, float *cache, float *scratch, int B, int T) {
    int M = B * T, E = c->E;
    size_t ME = (size_t)M * E;
    Carve ks = {align64(scratch), 0};
    FwdScratch sc;
    carve_fwd_scratch(c, &ks, &sc, B, T, cache == NULL);
    FwdCache fc, *f = &sc.pre;
    if (cache) {
        Carve kc = {align64(cache), 0};
        carve_cache(c, &kc, &fc, M);
        f = &fc;
    }
    prepare(c, w, f, u, B, T);
    memset(sc.Y, 0, ME * sizeof(float));
    /* x is fixed during the solve: its share of the mixer projections is computed once */
    if (sc.rawfix) mixer_project_fixed(&c->mix, w->mixer, sc.rawfix, f->xc, c->E, M);
    SolveCtx sx = {c, w, f, &sc.ng, sc.rawfix, sc.mscratch, B, T};
    FpMap map = {.ctx = &sx, .n = ME, .nb = B, .f = solve_f};
    FpoStats fs = {0};
    int rc = fpo_solve(&map, (size_t)E, sc.Y, opts, &fs, sc.solver);
    if (st) *st = (FpMambaStats){fs.iters, 0, fs.converged, fs.best_max};
    if (rc) return rc;
    return graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
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
    for (size_t i = 0; i < (size_t)B * T * c->D; i++)
        if (!isfinite(out[i])) return err_set(IM_ENUM, "fp_mamba: non-finite output");
    return IM_OK;
}

int fp_mamba_fwd_at(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, const float *ystar,
                    float *cache, float *scratch, int B, int T) {
    Carve ks = {align64(scratch), 0};
    FwdScratch sc;
    carve_fwd_scratch(c, &ks, &sc, B, T, cache == NULL);
    FwdCache fc, *f = &sc.pre;
    if (cache) {
        Carve kc = {align64(cache), 0};
        carve_cache(c, &kc, &fc, B * T);
        f = &fc;
    }
    prepare(c, w, f, u, B, T);
    memcpy(sc.Y, ystar, (size_t)B * T * c->E * sizeof(float));
    return graded_and_output(c, w, f, &sc, out, cache != NULL, B, T);
}

void fp_mamba_bwd(const FpMambaCfg *c, const FpMambaW *w, FpMambaW *dw, float *du, const float *dout,
                  const float *u, const float *cache, float *scratch, int B, int T) {
    int M = B * T, E = c->E, N = c->N, R = c->R, D = c->D;
    size_t ME = (size_t)M * E, MN = (size_t)M * N;
    Carve kc = {align64((float *)cache), 0};
    FwdCache fc, *f = &fc;
    carve_cache(c, &kc, &fc, M);
    Carve ks = {align64(scratch), 0};
    BwdScratch g;
    carve_bwd_scratch(c, &ks, &g, M);
    const float *y = f->step[c->n_back - 1].y;
    memset(g.dz, 0, ME * sizeof(float));
    memset(g.dxc, 0, ME * sizeof(float));
    memset(g.ddt, 0, ME * sizeof(float));
    memset(g.dB, 0, MN * sizeof(float));
    memset(g.dC, 0, MN * sizeof(float));
    memset(g.dA, 0, (size_t)E * N * sizeof(float));
    memset(g.dy, 0, ME * sizeof(float));
    /* output */
    if (c->glu_in_loop) {
        k_linear_bwd(g.dy, dw->out_proj, NULL, dout, y, w->out_proj, M, E, D);
    } else {
        memset(g.dgy, 0, ME * sizeof(float));
        k_linear_bwd(g.dgy, dw->out_proj, NULL, dout, f->gy, w->out_proj, M, E, D);
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
        for (size_t i = 0; i < ME; i++) {
            float a = f->zs[i], sg = 1.0f / (1.0f + expf(-a)), gate = a * sg;
            g.dy[i] = g.dgy[i] * gate;
            g.dzs[i] = g.dgy[i] * y[i] * sg * (1.0f + a * (1.0f - sg));
        }
        k_axpby(g.dz, 1.0f, g.dzs, 1.0f, ME);
        memset(g.dsy, 0, ME * sizeof(float));
        k_linear_bwd(g.dsy, dw->zy.W, NULL, g.dzs, f->sy, w->zy.W, M, E, E);
        shift_bwd(g.dy, g.dsy, B, T, E);
    }
    /* graded steps, last first; the first step's input Y* is a constant */
    for (int k = c->n_back - 1; k >= 0; k--) {
        float *dprev = k > 0 ? g.dyprev : NULL;
        if (dprev) memset(dprev, 0, ME * sizeof(float));
        step_bwd(c, w, dw, f, &f->step[k], &g, g.dy, dprev, B, T);
        if (dprev) memcpy(g.dy, dprev, ME * sizeof(float));
    }
    /* prepare: Δ = softplus(dtpre), dtpre = dlow W_dtᵀ + b_dt */
#pragma omp parallel for schedule(static) if (ME >= PAR_MIN)
    for (size_t i = 0; i < ME; i++) g.ddt[i] *= 1.0f / (1.0f + expf(-f->dtpre[i]));
    memset(g.ddlow, 0, (size_t)M * R * sizeof(float));
    k_linear_bwd(g.ddlow, dw->dt_w, dw->dt_b, g.ddt, f->dlow, w->dt_w, M, R, E);
    k_linear_bwd(g.dxc, dw->x_proj, NULL, g.ddlow, f->xc, w->x_proj, M, E, R);
    k_linear_bwd(g.dxc, dw->x_proj ? dw->x_proj + (size_t)R * E : NULL, NULL, g.dB, f->xc, w->x_proj + (size_t)R * E, M, E, N);
    k_linear_bwd(g.dxc, dw->x_proj ? dw->x_proj + (size_t)(R + N) * E : NULL, NULL, g.dC, f->xc,
                 w->x_proj + (size_t)(R + N) * E, M, E, N);
    if (dw->A_log)
        for (size_t i = 0; i < (size_t)E * N; i++) dw->A_log[i] += g.dA[i] * f->A[i];
    float *dxpre = g.dxc;
    if (c->conv) {
        /* xc = silu(conv(xpre)): recompute the conv output for silu' */
        float *pre = g.dv;
        k_conv1d_fwd(pre, f->xpre, w->conv_w, w->conv_b, B, T, E, c->W);
        memset(g.dxpre, 0, ME * sizeof(float));
        float *dconv = g.dxt;
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
    for (size_t i = 0; i < BE; i++) t->v[i] = t->xc[i] - y[i];
    if (t->rawfix) mixer_fwd_fixed(&c->mix, t->w->mixer, t->xt, t->rawfix, NULL, c->dp, t->v, B, t->mscratch);
    else mixer_fwd(&c->mix, t->w->mixer, t->xt, t->p, t->v, B, NULL, t->mscratch);
    k_axpby(t->xt, 1.0f, y, 1.0f, BE);
    float *o = c->glu_in_loop ? t->opre : t->o;
    k_s6_step(o, t->Hout, t->H, t->xt, t->dt, t->A, t->bbar, t->cbar, t->w->Dskip, B, E, c->N);
    if (c->glu_in_loop)
        for (size_t i = 0; i < BE; i++) t->o[i] = t->opre[i] * t->z[i] / (1.0f + expf(-t->z[i]));
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
    t->xpre = take(k, BE);
    t->z = take(k, BE);
    t->xc = take(k, BE);
    t->dlow = take(k, (size_t)B * c->R);
    t->Bm = take(k, BN);
    t->Cm = take(k, BN);
    t->dtpre = take(k, BE);
    t->dt = take(k, BE);
    t->A = take(k, (size_t)c->E * c->N);
    t->s = take(k, BE);
    t->p = take(k, (size_t)B * c->dp);
    t->v = take(k, BE);
    t->xt = take(k, BE);
    t->o = take(k, BE);
    t->opre = take(k, BE);
    t->ln = take(k, 2 * (size_t)B);
    t->Y = take(k, BE);
    t->y = take(k, BE);
    t->zs = take(k, BE);
    t->gy = take(k, BE);
    t->solver = take(k, fpo_scratch_floats(BE, B));
    t->mscratch = take(k, mixer_scratch_floats(&c->mix, B));
    t->rawfix = mixer_fixed_floats(&c->mix, B) ? take(k, mixer_fixed_floats(&c->mix, B)) : NULL;
}

size_t fp_mamba_step_scratch_floats(const FpMambaCfg *c, int B) {
    Carve k = {0};
    TokBufs t;
    carve_tok(c, &k, &t, B);
    return k.used + 16;
}

int fp_mamba_step(const FpMambaCfg *c, const FpMambaW *w, float *out, const float *u, float *state,
                  const FpoOpts *opts, FpMambaStats *st, float *scratch, int B) {
    int E = c->E, N = c->N, R = c->R, D = c->D;
    size_t BE = (size_t)B * E;
    Carve k = {align64(scratch), 0};
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
    for (size_t i = 0; i < BE; i++) t.dt[i] = t.dtpre[i] > 20.0f ? t.dtpre[i] : log1pf(expf(t.dtpre[i]));
    for (size_t i = 0; i < (size_t)E * N; i++) t.A[i] = -expf(w->A_log[i]);
    /* s = y*_{t−1} is fixed during the token's iterations, and so are p, b̄, c̄ */
    memcpy(t.s, yprev, BE * sizeof(float));
    make_p(c, t.p, t.xc, t.s, B);
    float *braw = t.zs, *craw = t.gy; /* free until the output */
    k_linear_fwd(braw, t.s, w->bc.W, NULL, B, E, N);
    k_linear_fwd(craw, t.s, w->bc.W + (size_t)N * E, NULL, B, E, N);
    k_axpby(braw, 1.0f, t.Bm, 1.0f, (size_t)B * N);
    k_axpby(craw, 1.0f, t.Cm, 1.0f, (size_t)B * N);
    if (c->bc_norm) {
        l2norm_rows(t.Bm, braw, B, N);
        l2norm_rows(t.Cm, craw, B, N);
    } else {
        memcpy(t.Bm, braw, (size_t)B * N * sizeof(float));
        memcpy(t.Cm, craw, (size_t)B * N * sizeof(float));
    }
    /* p does not change during the token's iterations: project it once */
    if (t.rawfix) mixer_project_fixed(&c->mix, w->mixer, t.rawfix, t.p, c->dp, B);
    TokCtx tc = {c, w, t.xc, t.z, t.p, t.dt, t.A, t.Bm, t.Cm, H, t.v, t.xt, t.o, t.opre, t.ln, t.mscratch, t.rawfix, NULL, B};
    FpMap map = {.ctx = &tc, .n = BE, .nb = B, .f = tok_f};
    memset(t.Y, 0, BE * sizeof(float));
    FpoStats fs = {0};
    int rc = fpo_solve(&map, (size_t)E, t.Y, opts, &fs, t.solver);
    if (st) {
        st->iters += fs.iters;
        st->tokens += 1;
        st->converged = fs.converged;
        if (fs.best_max > st->best_max) st->best_max = fs.best_max;
    }
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
        for (size_t i = 0; i < BE; i++) {
            float a = t.zs[i] + t.z[i];
            t.gy[i] = a / (1.0f + expf(-a)) * t.y[i];
        }
        k_linear_fwd(out, t.gy, w->out_proj, NULL, B, E, D);
    }
    memcpy(yprev, t.y, BE * sizeof(float));
    return IM_OK;
}
