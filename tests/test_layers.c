/* test_layers.c: VJP checks of the layers in src/layers (linear + weight norm, embed, rmsnorm,
 * MLPs, block over both mixers and all MLP kinds, tied head) (STYLE §8.11 items 2-3).
 *
 * Every layer is exercised through a scalar L = <w, f(inputs, params)> with a fixed random w:
 *  - central finite differences (4-point stencil) on a sample of entries of every tensor, and
 *  - the dot-product test: the directional derivative along one random direction v over all
 *    tensors at once, <v, J^T w> from the backward against the same stencil along v
 *    (for maps linear in a tensor, an exact <f(v), w> = <v, J^T w> is checked too);
 *  - gradients accumulate: a second backward without zeroing doubles them.
 * L is evaluated with cache = NULL (the no-grad path) and the backward runs after a caching
 * forward, so the two forward paths are also compared. Sizes are tiny. TH_VERBOSE=1 in the
 * environment prints the measured error of every check.
 */
#include <stdint.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/kernels/kernels.h"
#include "../src/layers/block.h"
#include "../src/layers/embed.h"
#include "../src/layers/head.h"
#include "../src/layers/linear.h"
#include "../src/layers/mlp.h"
#include "../src/layers/rmsnorm.h"

#include "gradcheck.h"

/* ---- linear and weight norm ---------------------------------------------------------------- */

typedef struct {
    int M, C, OC, wn;
    WnOpts o;
    LinearW w, dw;
    float *x, *dx, *y, *wout, *dWeff;
} LinCtx;

static double lin_loss(void *p) {
    LinCtx *c = p;
    if (c->wn) linear_wn_refresh(&c->w, &c->o, c->OC, c->C);
    linear_fwd(&c->w, c->y, c->x, c->M, c->C, c->OC);
    return dotd(c->wout, c->y, (size_t)c->M * c->OC);
}

static void lin_bwd(void *p) {
    LinCtx *c = p;
    if (!c->wn) {
        linear_bwd(&c->w, &c->dw, c->dx, c->wout, c->x, c->M, c->C, c->OC);
        return;
    }
    /* the effective-weight gradient is per-forward scratch; dg, dv accumulate */
    linear_wn_refresh(&c->w, &c->o, c->OC, c->C);
    memset(c->dWeff, 0, (size_t)c->OC * c->C * sizeof(float));
    LinearW dw = c->dw;
    dw.W = c->dWeff;
    linear_bwd(&c->w, &dw, c->dx, c->wout, c->x, c->M, c->C, c->OC);
    linear_wn_bwd(&c->w, &dw, &c->o, c->OC, c->C);
}

static void test_linear(Rng *r, int wn, WnOpts o, const char *name) {
    LinCtx c = {.M = 6, .C = 5, .OC = 4, .wn = wn, .o = o};
    size_t nx = (size_t)c.M * c.C, nw = (size_t)c.OC * c.C;
    c.x = th_alloc(nx); c.dx = th_alloc(nx); c.y = th_alloc((size_t)c.M * c.OC);
    c.wout = th_alloc((size_t)c.M * c.OC); c.dWeff = th_alloc(nw);
    c.w.W = th_alloc(nw); c.w.b = th_alloc(c.OC); c.dw.W = th_alloc(nw); c.dw.b = th_alloc(c.OC);
    th_fill_normal(c.x, nx, r, 1.f);
    th_fill_normal(c.wout, (size_t)c.M * c.OC, r, 1.f);
    th_fill_normal(c.w.W, nw, r, 0.5f);
    th_fill_normal(c.w.b, c.OC, r, 0.5f);
    GradCase gc = {.name = name, .loss = lin_loss, .bwd = lin_bwd, .ctx = &c, .h = 1e-2f,
                   .tol = 2e-3};
    add_tensor(&gc, "x", c.x, c.dx, nx, 12);
    add_tensor(&gc, "b", c.w.b, c.dw.b, c.OC, 4);
    if (wn) {
        c.w.v = th_alloc(nw); c.w.g = th_alloc(c.OC);
        c.dw.v = th_alloc(nw); c.dw.g = th_alloc(c.OC);
        th_fill_normal(c.w.v, nw, r, 0.5f);
        linear_wn_init(&c.w, &c.o, c.OC, c.C);
        if (o.clip > 0) /* factors g/||v|| alternate 0.6 and 1.6 around clip = 1: both branches */
            for (int i = 0; i < c.OC; i++) c.w.g[i] *= (i & 1) ? 1.6f : 0.6f;
        if (!o.no_scale) add_tensor(&gc, "g", c.w.g, c.dw.g, c.OC, 4);
        add_tensor(&gc, "v", c.w.v, c.dw.v, nw, 12);
    } else {
        add_tensor(&gc, "W", c.w.W, c.dw.W, nw, 12);
        /* exact adjoint test in x (y is linear in x): <v W^T, w> == <v, w W> */
        float *v = th_alloc(nx), *yv = th_alloc((size_t)c.M * c.OC), *dv = th_alloc(nx);
        th_fill_uniform(v, nx, r, -1, 1);
        LinearW nob = {c.w.W, NULL, NULL, NULL};
        linear_fwd(&nob, yv, v, c.M, c.C, c.OC);
        linear_bwd(&nob, NULL, dv, c.wout, v, c.M, c.C, c.OC);
        double a = dotd(yv, c.wout, (size_t)c.M * c.OC), b = dotd(v, dv, nx);
        TH_CHECK(fabs(a - b) <= 1e-5 * fmax(1, fabs(a)), "linear adjoint %.8g vs %.8g", a, b);
        free(v); free(yv); free(dv);
    }
    run_grad_case(&gc, r);
    free(c.x); free(c.dx); free(c.y); free(c.wout); free(c.dWeff);
    free(c.w.W); free(c.w.b); free(c.dw.W); free(c.dw.b);
    if (wn) { free(c.w.v); free(c.w.g); free(c.dw.v); free(c.dw.g); }
}

/* At init g = ||v||, so the effective weight is v itself (spec §6). */
static void test_wn_init(Rng *r) {
    int R = 5, C = 7;
    float *v = th_alloc((size_t)R * C), *g = th_alloc(R), *W = th_alloc((size_t)R * C);
    th_fill_normal(v, (size_t)R * C, r, 1.f);
    LinearW w = {W, NULL, g, v};
    WnOpts o = WN_OPTS_DEFAULT;
    linear_wn_init(&w, &o, R, C);
    TH_CLOSE(W, v, (size_t)R * C, 1e-6, "weight norm: W == v at init");
    double n0 = sqrt(dotd(v, v, (size_t)C));
    TH_CHECK(fabs(g[0] - n0) <= 1e-6 * n0, "weight norm: g0 %.7g != ||v0|| %.7g", g[0], n0);
    /* no_scale: every row has norm target */
    WnOpts ns = {1, 2.0f, 0};
    linear_wn_refresh(&w, &ns, R, C);
    double n1 = sqrt(dotd(W + C, W + C, (size_t)C));
    TH_CHECK(fabs(n1 - 2.0) <= 1e-5, "weight norm no_scale: row norm %.7g != 2", n1);
    free(v); free(g); free(W);
}

/* ---- embedding ------------------------------------------------------------------------------ */

typedef struct {
    int M, V, D;
    int *ids;
    float *E, *dE, *y, *wout;
} EmbCtx;

static double emb_loss(void *p) {
    EmbCtx *c = p;
    embed_fwd(c->y, c->ids, c->E, c->M, c->V, c->D);
    return dotd(c->wout, c->y, (size_t)c->M * c->D);
}

static void emb_bwd(void *p) {
    EmbCtx *c = p;
    embed_bwd(c->dE, c->wout, c->ids, c->M, c->V, c->D);
}

static void test_embed(Rng *r) {
    int ids[7] = {3, 0, 5, 3, 3, 1, 5}; /* repeats: the scatter-add must sum them */
    EmbCtx c = {.M = 7, .V = 6, .D = 4, .ids = ids};
    size_t nE = (size_t)c.V * c.D, ny = (size_t)c.M * c.D;
    c.E = th_alloc(nE); c.dE = th_alloc(nE); c.y = th_alloc(ny); c.wout = th_alloc(ny);
    th_fill_normal(c.E, nE, r, 1.f);
    th_fill_normal(c.wout, ny, r, 1.f);
    GradCase gc = {.name = "embed", .loss = emb_loss, .bwd = emb_bwd, .ctx = &c, .h = 1e-2f,
                   .tol = 1e-3};
    add_tensor(&gc, "E", c.E, c.dE, nE, 24);
    run_grad_case(&gc, r);
    /* exact: row 3 gets three contributions, row 2 none */
    memset(c.dE, 0, nE * sizeof(float));
    emb_bwd(&c);
    float want = c.wout[0 * 4 + 1] + c.wout[3 * 4 + 1] + c.wout[4 * 4 + 1];
    TH_CHECK(fabsf(c.dE[3 * 4 + 1] - want) <= 1e-6f, "embed: scatter-add of repeated id");
    TH_CHECK(c.dE[2 * 4] == 0 && c.dE[4 * 4 + 3] == 0, "embed: unused rows must stay 0");
    /* validation: a runtime error naming position and value, never an abort */
    TH_CHECK(embed_check_ids(ids, 7, 6) == IM_OK, "embed_check_ids: valid ids rejected");
    int bad[4] = {1, 2, 6, -1};
    TH_CHECK(embed_check_ids(bad, 4, 6) == IM_EINVAL, "embed_check_ids: id 6 >= V accepted");
    TH_CHECK(strstr(err_msg(), "position 2") && strstr(err_msg(), "6"), "embed msg: %s", err_msg());
    TH_CHECK(embed_check_ids(bad + 3, 1, 6) == IM_EINVAL, "embed_check_ids: negative id accepted");
    free(c.E); free(c.dE); free(c.y); free(c.wout);
}

/* ---- rmsnorm -------------------------------------------------------------------------------- */

typedef struct {
    int M, C;
    float *x, *dx, *w, *dw, *y, *wout, *rstd;
} NormCtx;

static double norm_loss(void *p) {
    NormCtx *c = p;
    rmsnorm_fwd(c->y, NULL, c->x, c->w, c->M, c->C, RMSNORM_EPS);
    return dotd(c->wout, c->y, (size_t)c->M * c->C);
}

static void norm_bwd(void *p) {
    NormCtx *c = p;
    rmsnorm_fwd(c->y, c->rstd, c->x, c->w, c->M, c->C, RMSNORM_EPS);
    rmsnorm_bwd(c->dx, c->dw, c->wout, c->x, c->w, c->rstd, c->M, c->C);
}

static void test_rmsnorm(Rng *r) {
    NormCtx c = {.M = 5, .C = 8};
    size_t n = (size_t)c.M * c.C;
    c.x = th_alloc(n); c.dx = th_alloc(n); c.y = th_alloc(n); c.wout = th_alloc(n);
    c.w = th_alloc(c.C); c.dw = th_alloc(c.C); c.rstd = th_alloc(rmsnorm_cache_floats(c.M));
    th_fill_normal(c.x, n, r, 1.f);
    th_fill_normal(c.wout, n, r, 1.f);
    th_fill_uniform(c.w, c.C, r, 0.5f, 1.5f);
    GradCase gc = {.name = "rmsnorm", .loss = norm_loss, .bwd = norm_bwd, .ctx = &c, .h = 1e-2f,
                   .tol = 3e-3};
    add_tensor(&gc, "x", c.x, c.dx, n, 16);
    add_tensor(&gc, "w", c.w, c.dw, c.C, 8);
    run_grad_case(&gc, r);
    /* RMSNorm(0) = 0 exactly (z0 = 0 in the implicit model) */
    memset(c.x, 0, n * sizeof(float));
    rmsnorm_fwd(c.y, NULL, c.x, c.w, c.M, c.C, RMSNORM_EPS);
    TH_CHECK(sqrt(dotd(c.y, c.y, n)) == 0.0, "rmsnorm(0) != 0");
    free(c.x); free(c.dx); free(c.y); free(c.wout); free(c.w); free(c.dw); free(c.rstd);
}

/* ---- MLPs ----------------------------------------------------------------------------------- */

/* A parameter with its gradient, registered in a GradCase: the allocation helper for the layers
 * below, which hold many weights. */
static float *param(GradCase *gc, const char *name, float **g, size_t n, int fd, Rng *r, float lo,
                    float hi) {
    float *p = th_alloc(n);
    *g = th_alloc(n);
    th_fill_uniform(p, n, r, lo, hi);
    add_tensor(gc, name, p, *g, n, fd);
    return p;
}

static void free_case(GradCase *gc) {
    for (int i = 0; i < gc->nt; i++) { free(gc->t[i].p); free(gc->t[i].g); }
}

/* variational dropout mask, values {0, 1/(1-p)} with p = 0.25 */
static float *mask(size_t n, Rng *r) {
    float *m = th_alloc(n);
    for (size_t i = 0; i < n; i++) m[i] = rng_uniform(r) < 0.25f ? 0.0f : 1.0f / 0.75f;
    return m;
}

typedef struct {
    MlpCfg cfg;
    MlpW w, dw;
    int B, T;
    float *x, *dx, *y, *wout, *mh, *mo, *cache, *scratch;
} MlpCtx;

static double mlp_loss(void *p) {
    MlpCtx *c = p;
    mlp_fwd(&c->cfg, &c->w, c->y, c->x, c->mh, c->mo, NULL, c->scratch, c->B, c->T);
    return dotd(c->wout, c->y, (size_t)c->B * c->T * c->cfg.D);
}

static void mlp_bwd_case(void *p) {
    MlpCtx *c = p;
    mlp_fwd(&c->cfg, &c->w, c->y, c->x, c->mh, c->mo, c->cache, c->scratch, c->B, c->T);
    mlp_bwd(&c->cfg, &c->w, &c->dw, c->dx, c->wout, c->x, c->mh, c->mo, c->cache, c->scratch, c->B,
            c->T);
}

static void test_mlp(Rng *r, MlpKind kind, int masked, const char *name) {
    MlpCtx c = {.cfg = mlp_cfg(kind, 6, 12), .B = 2, .T = 3};
    int D = c.cfg.D, h = c.cfg.h;
    TH_CHECK(h == (kind == MLP_SWIGLU ? 8 : 128), "%s: hidden %d", name, h);
    size_t M = (size_t)c.B * c.T, hD = (size_t)h * D;
    GradCase gc = {.name = name, .loss = mlp_loss, .bwd = mlp_bwd_case, .ctx = &c, .h = 1e-2f,
                   .tol = 3e-3};
    float s = 1.0f / sqrtf((float)D);
    c.x = param(&gc, "x", &c.dx, M * D, 12, r, -1.5f, 1.5f);
    if (kind == MLP_SWIGLU) {
        c.w.w1 = param(&gc, "w1", &c.dw.w1, hD, 8, r, -s, s);
        c.w.w3 = param(&gc, "w3", &c.dw.w3, hD, 8, r, -s, s);
    } else {
        c.w.fc1 = param(&gc, "fc1", &c.dw.fc1, 2 * hD, 16, r, -s, s);
    }
    float s2 = 1.0f / sqrtf((float)h);
    c.w.fc2 = param(&gc, "fc2", &c.dw.fc2, hD, 8, r, -s2, s2);
    TH_CHECK(mlp_param_floats(&c.cfg) == 3 * hD, "%s: param count", name);
    c.y = th_alloc(M * D); c.wout = th_alloc(M * D);
    th_fill_normal(c.wout, M * D, r, 1.f);
    c.cache = th_alloc(mlp_cache_floats(&c.cfg, c.B, c.T));
    c.scratch = th_alloc(mlp_scratch_floats(&c.cfg, c.B, c.T));
    if (masked) { c.mh = mask((size_t)c.B * h, r); c.mo = mask((size_t)c.B * D, r); }
    run_grad_case(&gc, r);
    /* the gated MLP puts the value half first: with the gate rows of fc1 zeroed, silu(0) = 0
     * kills every output; with the value rows zeroed too. Check the first case only. */
    if (kind == MLP_GATED && !masked) {
        memset(c.w.fc1 + hD, 0, hD * sizeof(float));
        double l = mlp_loss(&c);
        TH_CHECK(l == 0.0, "gated MLP: zero gate rows (second half of fc1) must give 0, got %g", l);
    }
    free_case(&gc);
    free(c.y); free(c.wout); free(c.cache); free(c.scratch); free(c.mh); free(c.mo);
}

/* ---- block ---------------------------------------------------------------------------------- */

enum { BB = 2, BT = 5, BD = 8 };

typedef struct {
    BlockCfg cfg;
    BlockW w, dw;
    BlockMasks masks;
    float *z, *dz, *u, *du, *zo, *wout, *cache, *scratch;
} BlkCtx;

static double blk_loss(void *p) {
    BlkCtx *c = p;
    block_fwd(&c->cfg, &c->w, c->zo, c->z, c->u, &c->masks, NULL, c->scratch, NULL, BB, BT);
    return dotd(c->wout, c->zo, (size_t)BB * BT * BD);
}

static void blk_bwd(void *p) {
    BlkCtx *c = p;
    block_fwd(&c->cfg, &c->w, c->zo, c->z, c->u, &c->masks, c->cache, c->scratch, NULL, BB, BT);
    block_bwd(&c->cfg, &c->w, &c->dw, c->dz, c->du, c->wout, c->z, c->u, &c->masks, c->cache,
              c->scratch, BB, BT);
}

/* Allocate and register every weight of the block (a few of them with FD samples). */
static void blk_params(GradCase *gc, BlkCtx *c, Rng *r) {
    const BlockCfg *k = &c->cfg;
    float s = 1.0f / sqrtf((float)BD);
    c->w.norm_w = param(gc, "norm_w", &c->dw.norm_w, BD, 4, r, 0.5f, 1.5f);
    if (k->mixer == MIXER_MAMBA2) {
        const Mamba2Cfg *m = &k->mamba2;
        Mamba2W *w = &c->w.mamba2, *d = &c->dw.mamba2;
        float se = 1.0f / sqrtf((float)m->E);
        w->in_proj = param(gc, "in_proj", &d->in_proj, (size_t)m->K * BD, 8, r, -s, s);
        w->conv_w = param(gc, "conv_w", &d->conv_w, (size_t)m->C * m->W, 0, r, -0.5f, 0.5f);
        w->conv_b = param(gc, "conv_b", &d->conv_b, m->C, 0, r, -0.5f, 0.5f);
        w->dt_bias = param(gc, "dt_bias", &d->dt_bias, m->H, 2, r, -2.0f, 0.0f);
        w->A_log = param(gc, "A_log", &d->A_log, m->H, 2, r, 0.0f, 1.4f);
        w->Dskip = param(gc, "Dskip", &d->Dskip, m->H, 0, r, 0.5f, 1.5f);
        w->norm_w = param(gc, "gnorm_w", &d->norm_w, m->E, 0, r, 0.5f, 1.5f);
        w->out_proj = param(gc, "out_proj", &d->out_proj, (size_t)BD * m->E, 8, r, -se, se);
    } else {
        AttnW *w = &c->w.attn, *d = &c->dw.attn;
        w->wq = param(gc, "wq", &d->wq, BD * BD, 6, r, -s, s);
        w->wk = param(gc, "wk", &d->wk, BD * BD, 0, r, -s, s);
        w->wv = param(gc, "wv", &d->wv, BD * BD, 0, r, -s, s);
        w->wo = param(gc, "wo", &d->wo, BD * BD, 6, r, -s, s);
    }
    if (k->mlp.kind == MLP_NONE) return;
    size_t hD = (size_t)k->mlp.h * BD;
    float s2 = 1.0f / sqrtf((float)k->mlp.h);
    c->w.norm2_w = param(gc, "norm2_w", &c->dw.norm2_w, BD, 4, r, 0.5f, 1.5f);
    if (k->mlp.kind == MLP_SWIGLU) {
        c->w.mlp.w1 = param(gc, "w1", &c->dw.mlp.w1, hD, 6, r, -s, s);
        c->w.mlp.w3 = param(gc, "w3", &c->dw.mlp.w3, hD, 0, r, -s, s);
    } else {
        c->w.mlp.fc1 = param(gc, "fc1", &c->dw.mlp.fc1, 2 * hD, 6, r, -s, s);
    }
    c->w.mlp.fc2 = param(gc, "fc2", &c->dw.mlp.fc2, hD, 6, r, -s2, s2);
}

static BlockCfg blk_cfg(MixerKind mixer, MlpKind mlp) {
    BlockCfg c;
    if (mixer == MIXER_MAMBA2) {
        Mamba2Cfg m;
        mamba2_cfg_init(&m, BD, 2, 4, 4, 4, 1e-5f);
        block_cfg_mamba2(&c, &m, mlp, 12, RMSNORM_EPS);
    } else {
        AttnCfg a;
        attn_cfg_init(&a, BD, 2, 10000.0f, BT + 3);
        block_cfg_attn(&c, &a, mlp, 12, RMSNORM_EPS);
    }
    return c;
}

/* block_step over T tokens (committing) equals block_fwd; a non-committing step leaves the
 * state as it was; a prefill by block_fwd(state_out) continues like the step path. */
static void blk_step_check(BlkCtx *c, const char *name) {
    const BlockCfg *k = &c->cfg;
    int U = block_u_dim(k);
    size_t ns = block_state_floats(k, BB);
    float *st = th_alloc(ns), *st2 = th_alloc(ns), *sc = th_alloc(block_step_scratch_floats(k, BB));
    float *zt = th_alloc(BB * BD), *ut = th_alloc((size_t)BB * U), *yt = th_alloc(BB * BD);
    float *ref = th_alloc(BB * BT * BD), *seq = th_alloc(BB * BT * BD);
    block_fwd(k, &c->w, ref, c->z, c->u, NULL, NULL, c->scratch, NULL, BB, BT);
    for (int t = 0; t < BT; t++) {
        for (int b = 0; b < BB; b++) {
            memcpy(zt + b * BD, c->z + ((size_t)b * BT + t) * BD, BD * sizeof(float));
            memcpy(ut + (size_t)b * U, c->u + ((size_t)b * BT + t) * U, (size_t)U * sizeof(float));
        }
        if (t == 2) { /* a trial step must not move the state */
            memcpy(st2, st, ns * sizeof(float));
            block_step(k, &c->w, yt, zt, ut, st, t, 0, sc, BB);
            TH_CHECK(memcmp(st, st2, ns * sizeof(float)) == 0, "%s: commit=0 changed the state",
                     name);
        }
        block_step(k, &c->w, yt, zt, ut, st, t, 1, sc, BB);
        for (int b = 0; b < BB; b++)
            memcpy(seq + ((size_t)b * BT + t) * BD, yt + b * BD, BD * sizeof(float));
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s: block_step x T == block_fwd", name);
    TH_CLOSE(seq, ref, (size_t)BB * BT * BD, 2e-5, nm);
    /* prefill T-1 tokens, then one step: the last token's output must match again */
    float *zp = th_alloc(BB * (BT - 1) * BD), *up = th_alloc((size_t)BB * (BT - 1) * U);
    for (int b = 0; b < BB; b++) {
        memcpy(zp + (size_t)b * (BT - 1) * BD, c->z + (size_t)b * BT * BD,
               (BT - 1) * BD * sizeof(float));
        memcpy(up + (size_t)b * (BT - 1) * U, c->u + (size_t)b * BT * U,
               (size_t)(BT - 1) * U * sizeof(float));
    }
    memset(st, 0, ns * sizeof(float));
    block_fwd(k, &c->w, seq, zp, up, NULL, NULL, c->scratch, st, BB, BT - 1);
    block_step(k, &c->w, yt, zt, ut, st, BT - 1, 1, sc, BB); /* zt, ut hold token T-1 */
    double e = 0;
    for (int b = 0; b < BB; b++)
        e = fmax(e, th_rel_err(yt + b * BD, ref + ((size_t)b * BT + BT - 1) * BD, BD));
    TH_CHECK(e <= 2e-5, "%s: prefill + step vs fwd rel err %.3g", name, e);
    free(st); free(st2); free(sc); free(zt); free(ut); free(yt); free(ref); free(seq); free(zp);
    free(up);
}

static void test_block(Rng *r, MixerKind mixer, MlpKind mlp, int masked) {
    char name[64];
    snprintf(name, sizeof name, "block(%s,%s%s)", mixer == MIXER_MAMBA2 ? "mamba2" : "attn",
             mlp == MLP_NONE ? "none" : mlp == MLP_SWIGLU ? "swiglu" : "gated",
             masked ? ",masks" : "");
    BlkCtx c = {.cfg = blk_cfg(mixer, mlp)};
    GradCase gc = {.name = name, .loss = blk_loss, .bwd = blk_bwd, .ctx = &c, .h = 1e-2f,
                   .tol = 5e-3};
    size_t n = (size_t)BB * BT * BD, nu = (size_t)BB * BT * block_u_dim(&c.cfg);
    c.z = param(&gc, "z", &c.dz, n, 12, r, -1.5f, 1.5f);
    c.u = param(&gc, "u", &c.du, nu, 12, r, -0.5f, 0.5f);
    blk_params(&gc, &c, r);
    c.zo = th_alloc(n); c.wout = th_alloc(n);
    th_fill_normal(c.wout, n, r, 1.f);
    c.cache = th_alloc(block_cache_floats(&c.cfg, BB, BT));
    c.scratch = th_alloc(block_scratch_floats(&c.cfg, BB, BT));
    float *m1 = NULL, *mh = NULL, *mo = NULL;
    if (masked) {
        if (mixer == MIXER_MAMBA2) m1 = mask(BB * BD, r);
        if (mlp == MLP_GATED) { mh = mask((size_t)BB * c.cfg.mlp.h, r); mo = mask(BB * BD, r); }
    }
    c.masks = (BlockMasks){m1, mh, mo};
    run_grad_case(&gc, r);
    if (!masked) blk_step_check(&c, name);
    free_case(&gc);
    free(c.zo); free(c.wout); free(c.cache); free(c.scratch); free(m1); free(mh); free(mo);
}

/* A block of the given mixer and MLP with its weights, named "what(mixer,mlp)", for the tests that
 * run it on inputs of their own (attention's KV cache holds T positions). */
static void blk_case(BlkCtx *c, GradCase *gc, char name[64], const char *what, MixerKind mixer, MlpKind mlp, int T,
                     Rng *r) {
    snprintf(name, 64, "%s(%s,%s)", what, mixer == MIXER_MAMBA2 ? "mamba2" : "attn",
             mlp == MLP_NONE ? "none" : mlp == MLP_SWIGLU ? "swiglu" : "gated");
    *c = (BlkCtx){.cfg = blk_cfg(mixer, mlp)};
    if (mixer == MIXER_ATTN) c->cfg.attn.Tmax = T;
    *gc = (GradCase){.name = name};
    blk_params(gc, c, r);
}

/* Weights packed once (block_pack): forward, backward and step read the same weights as without
 * the pack, with enough rows (B T = 48, step batch 20) that the packed panels are used. Builds
 * without BLAS run the same blocked GEMM either way: the same bits. With BLAS the unpacked side
 * may be OpenBLAS: within a dot product's rounding. */
static void test_block_packed(Rng *r, MixerKind mixer, MlpKind mlp) {
    enum { PB = 4, PT = 12, SB = 20 };
    char name[64];
    BlkCtx c;
    GradCase gc;
    blk_case(&c, &gc, name, "block_pack", mixer, mlp, PT, r);
    const BlockCfg *k = &c.cfg;
    int U = block_u_dim(k);
    size_t n = (size_t)PB * PT * BD, nu = (size_t)PB * PT * U;
    float *z = th_alloc(n), *u = th_alloc(nu), *g = th_alloc(n);
    th_fill_normal(z, n, r, 1.f), th_fill_normal(u, nu, r, 0.5f), th_fill_normal(g, n, r, 1.f);
    float *cache = th_alloc(block_cache_floats(k, PB, PT)), *sc = th_alloc(block_scratch_floats(k, PB, PT));
    float *packed = th_alloc(block_pack_floats(k));
    int exact = strcmp(k_blas_name(), "openblas") != 0;
    /* two runs: [0] plain weights, [1] packed; outputs and every gradient kept for comparison */
    float *y[2], *dz[2], *du[2], *dws[2];
    for (int run = 0; run < 2; run++) {
        block_pack(k, &c.w, run ? packed : NULL);
        for (int i = 0; i < gc.nt; i++) memset(gc.t[i].g, 0, gc.t[i].n * sizeof(float));
        y[run] = th_alloc(n), dz[run] = th_alloc(n), du[run] = th_alloc(nu);
        block_fwd(k, &c.w, y[run], z, u, NULL, cache, sc, NULL, PB, PT);
        block_bwd(k, &c.w, &c.dw, dz[run], du[run], g, z, u, NULL, cache, sc, PB, PT);
        size_t nw = 0;
        for (int i = 0; i < gc.nt; i++) nw += gc.t[i].n;
        dws[run] = th_alloc(nw);
        nw = 0;
        for (int i = 0; i < gc.nt; i++) {
            memcpy(dws[run] + nw, gc.t[i].g, gc.t[i].n * sizeof(float));
            nw += gc.t[i].n;
        }
    }
    size_t nw = 0;
    for (int i = 0; i < gc.nt; i++) nw += gc.t[i].n;
    const char *what[4] = {"fwd", "dz", "du", "dW"};
    float *a[4] = {y[0], dz[0], du[0], dws[0]}, *b[4] = {y[1], dz[1], du[1], dws[1]};
    size_t len[4] = {n, n, nu, nw};
    for (int q = 0; q < 4; q++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s: %s packed vs plain", name, what[q]);
        if (exact) TH_CHECK(memcmp(a[q], b[q], len[q] * sizeof(float)) == 0, "%s: not the same bits", nm);
        else TH_CLOSE(b[q], a[q], len[q], 1e-5, nm);
    }
    /* one step of SB sequences from the zero state */
    size_t ns = block_state_floats(k, SB);
    float *st = th_alloc(ns), *ssc = th_alloc(block_step_scratch_floats(k, SB));
    float *zt = th_alloc((size_t)SB * BD), *ut = th_alloc((size_t)SB * U), *yt[2];
    th_fill_normal(zt, (size_t)SB * BD, r, 1.f), th_fill_normal(ut, (size_t)SB * U, r, 0.5f);
    for (int run = 0; run < 2; run++) {
        block_pack(k, &c.w, run ? packed : NULL);
        memset(st, 0, ns * sizeof(float));
        yt[run] = th_alloc((size_t)SB * BD);
        block_step(k, &c.w, yt[run], zt, ut, st, 0, 1, ssc, SB);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s: step packed vs plain", name);
    if (exact) TH_CHECK(memcmp(yt[0], yt[1], (size_t)SB * BD * sizeof(float)) == 0, "%s: not the same bits", nm);
    else TH_CLOSE(yt[1], yt[0], (size_t)SB * BD, 1e-5, nm);
    for (int run = 0; run < 2; run++) { free(y[run]); free(dz[run]); free(du[run]); free(dws[run]); free(yt[run]); }
    free(z); free(u); free(g); free(cache); free(sc); free(packed); free(st); free(ssc); free(zt); free(ut);
    free_case(&gc);
}

/* ---- tied head + cross-entropy -------------------------------------------------------------- */

enum { HM = 6, HV = 7, HDIM = 4 };

typedef struct {
    int targets[HM];
    float *h, *dh, *E, *dE, *cache, *scratch;
} HeadCtx;

static double head_loss(void *p) {
    HeadCtx *c = p;
    float loss = 0;
    int rc = head_loss_fwd(&loss, NULL, c->cache, c->scratch, c->h, c->E, c->targets, HM, HV, HDIM,
                           HEAD_IGNORE);
    CHECK(rc == IM_OK, "head_loss_fwd failed: %s", err_msg());
    return loss;
}

static void head_bwd(void *p) {
    HeadCtx *c = p;
    head_loss(c);
    head_loss_bwd(c->dh, c->dE, 1.0f, c->cache, c->scratch, c->h, c->E, c->targets, HM, HV, HDIM,
                  HEAD_IGNORE);
}

/* mean over kept rows of log-softmax, in double, straight from the definition */
static double head_hand_loss(const HeadCtx *c) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < HM; i++) {
        if (c->targets[i] == HEAD_IGNORE) continue;
        double lg[HV], mx = -1e300, se = 0;
        for (int v = 0; v < HV; v++) {
            lg[v] = 0;
            for (int d = 0; d < HDIM; d++) lg[v] += (double)c->h[i * HDIM + d] * c->E[v * HDIM + d];
            mx = fmax(mx, lg[v]);
        }
        for (int v = 0; v < HV; v++) se += exp(lg[v] - mx);
        sum += mx + log(se) - lg[c->targets[i]];
        n++;
    }
    return n ? sum / n : 0;
}

static void test_head(Rng *r) {
    HeadCtx c = {.targets = {2, HEAD_IGNORE, 6, 0, HEAD_IGNORE, 2}};
    GradCase gc = {.name = "head", .loss = head_loss, .bwd = head_bwd, .ctx = &c, .h = 1e-2f,
                   .tol = 3e-3};
    c.h = param(&gc, "h", &c.dh, HM * HDIM, 24, r, -1.5f, 1.5f);
    c.E = param(&gc, "E", &c.dE, HV * HDIM, 28, r, -1.0f, 1.0f);
    c.cache = th_alloc(head_cache_floats(HM, HV));
    c.scratch = th_alloc(head_scratch_floats(HM, HV));
    run_grad_case(&gc, r);

    float loss = -1;
    int count = -1;
    TH_CHECK(head_loss_fwd(&loss, &count, c.cache, c.scratch, c.h, c.E, c.targets, HM, HV, HDIM,
                           HEAD_IGNORE) == IM_OK, "head_loss_fwd: %s", err_msg());
    double want = head_hand_loss(&c);
    TH_CHECK(count == 4, "head: count %d != 4", count);
    TH_CHECK(fabs(loss - want) <= 1e-5 * fabs(want), "head: loss %.7g vs hand %.7g", loss, want);
    /* ignored rows contribute nothing: changing their h leaves the loss and gives dh = 0 there */
    for (int d = 0; d < HDIM; d++) c.h[1 * HDIM + d] += 3.0f;
    float loss2 = 0;
    head_loss_fwd(&loss2, NULL, c.cache, c.scratch, c.h, c.E, c.targets, HM, HV, HDIM, HEAD_IGNORE);
    TH_CHECK(loss2 == loss, "head: ignored row changed the loss (%.7g vs %.7g)", loss2, loss);
    memset(c.dh, 0, HM * HDIM * sizeof(float));
    head_bwd(&c);
    TH_CHECK(c.dh[1 * HDIM] == 0 && c.dh[4 * HDIM + 3] == 0, "head: ignored rows got a gradient");

    /* an all-ignored batch: loss 0, count 0, no NaN, no gradient */
    int all_ign[HM];
    for (int i = 0; i < HM; i++) all_ign[i] = HEAD_IGNORE;
    memcpy(c.targets, all_ign, sizeof all_ign);
    loss = NAN;
    TH_CHECK(head_loss_fwd(&loss, &count, c.cache, c.scratch, c.h, c.E, c.targets, HM, HV, HDIM,
                           HEAD_IGNORE) == IM_OK && loss == 0.0f && count == 0,
             "head: all-ignored batch gave loss %g count %d", loss, count);
    memset(c.dh, 0, HM * HDIM * sizeof(float));
    memset(c.dE, 0, HV * HDIM * sizeof(float));
    head_loss_bwd(c.dh, c.dE, 1.0f, c.cache, c.scratch, c.h, c.E, c.targets, HM, HV, HDIM,
                  HEAD_IGNORE);
    TH_CHECK(dotd(c.dh, c.dh, HM * HDIM) == 0 && dotd(c.dE, c.dE, HV * HDIM) == 0,
             "head: all-ignored batch gave a gradient");

    /* validation: an out-of-range target is a runtime error naming the position */
    int bad[HM] = {1, 2, HV, 0, 0, 0};
    TH_CHECK(head_loss_fwd(&loss, &count, c.cache, c.scratch, c.h, c.E, bad, HM, HV, HDIM,
                           HEAD_IGNORE) == IM_EINVAL, "head: target == V accepted");
    TH_CHECK(strstr(err_msg(), "position 2") != NULL, "head msg: %s", err_msg());
    bad[2] = -3;
    TH_CHECK(head_check_targets(bad, HM, HV, HEAD_IGNORE) == IM_EINVAL, "head: target -3 accepted");
    TH_CHECK(head_check_targets(bad, HM, HV, -3) == IM_OK, "head: custom ignore index rejected");
    free_case(&gc);
    free(c.cache); free(c.scratch);
}

/* The injection in the mixer's parts (block_set_u_parts): block_u_to_parts puts element (m, j) of
 * part p (columns off_p .. off_p + n_p of the rows) at M off_p + m n_p + j and block_u_to_rows
 * undoes it; forward, backward (du converted back) and step give the very bits of the rows
 * layout, since the layers add the same values in the same order, only read from elsewhere. */
static void test_block_u_parts(Rng *r, MixerKind mixer, MlpKind mlp) {
    enum { PB = 3, PT = 7 };
    char name[64];
    BlkCtx c;
    GradCase gc;
    blk_case(&c, &gc, name, "block_u_parts", mixer, mlp, PT, r);
    BlockCfg rows = c.cfg, parts = c.cfg;
    block_set_u_parts(&parts, 1);
    int U = block_u_dim(&rows), widths[BLOCK_U_PARTS], np = block_u_parts(&rows, widths);
    size_t M = (size_t)PB * PT, n = M * BD, nu = M * U;
    float *z = th_alloc(n), *u = th_alloc(nu), *g = th_alloc(n), *up = th_alloc(nu), *back = th_alloc(nu);
    th_fill_normal(z, n, r, 1.f), th_fill_normal(u, nu, r, 0.5f), th_fill_normal(g, n, r, 1.f);
    block_u_to_parts(&rows, up, u, M);
    int sum = 0, placed = 1;
    for (int p = 0; p < np; p++) {
        for (size_t m = 0; m < M; m++)
            for (int j = 0; j < widths[p]; j++)
                placed &= up[M * (size_t)sum + m * (size_t)widths[p] + (size_t)j] == u[m * (size_t)U + (size_t)(sum + j)];
        sum += widths[p];
    }
    TH_CHECK(sum == U && placed, "%s: parts of widths summing to %d (u is %d wide), elements in place: %d", name, sum,
             U, placed);
    block_u_to_rows(&rows, back, up, M);
    TH_CHECK(memcmp(back, u, nu * sizeof(float)) == 0, "%s: to_rows(to_parts(u)) != u", name);
    float *cache = th_alloc(block_cache_floats(&rows, PB, PT)), *sc = th_alloc(block_scratch_floats(&rows, PB, PT));
    float *y[2], *dz[2], *du[2], *dws[2];
    size_t nw = 0;
    for (int i = 0; i < gc.nt; i++) nw += gc.t[i].n;
    for (int run = 0; run < 2; run++) {
        const BlockCfg *k = run ? &parts : &rows;
        const float *uu = run ? up : u;
        for (int i = 0; i < gc.nt; i++) memset(gc.t[i].g, 0, gc.t[i].n * sizeof(float));
        y[run] = th_alloc(n), dz[run] = th_alloc(n), du[run] = th_alloc(nu), dws[run] = th_alloc(nw);
        float *dur = th_alloc(nu);
        block_fwd(k, &c.w, y[run], z, uu, NULL, cache, sc, NULL, PB, PT);
        block_bwd(k, &c.w, &c.dw, dz[run], dur, g, z, uu, NULL, cache, sc, PB, PT);
        if (run) block_u_to_rows(&rows, du[run], dur, M);
        else memcpy(du[run], dur, nu * sizeof(float));
        free(dur);
        for (int i = 0, o = 0; i < gc.nt; o += (int)gc.t[i].n, i++) memcpy(dws[run] + o, gc.t[i].g, gc.t[i].n * sizeof(float));
    }
    const char *what[4] = {"fwd", "dz", "du", "dW"};
    float *a[4] = {y[0], dz[0], du[0], dws[0]}, *b[4] = {y[1], dz[1], du[1], dws[1]};
    size_t len[4] = {n, n, nu, nw};
    for (int q = 0; q < 4; q++)
        TH_CHECK(memcmp(a[q], b[q], len[q] * sizeof(float)) == 0, "%s: %s in parts differs from rows", name, what[q]);
    /* one step of PB sequences from the zero state, u of one token (M = PB) */
    size_t ns = block_state_floats(&rows, PB);
    float *st = th_alloc(ns), *ssc = th_alloc(block_step_scratch_floats(&rows, PB));
    float *zt = th_alloc((size_t)PB * BD), *ut = th_alloc((size_t)PB * U), *utp = th_alloc((size_t)PB * U), *yt[2];
    th_fill_normal(zt, (size_t)PB * BD, r, 1.f), th_fill_normal(ut, (size_t)PB * U, r, 0.5f);
    block_u_to_parts(&rows, utp, ut, PB);
    for (int run = 0; run < 2; run++) {
        memset(st, 0, ns * sizeof(float));
        yt[run] = th_alloc((size_t)PB * BD);
        block_step(run ? &parts : &rows, &c.w, yt[run], zt, run ? utp : ut, st, 0, 1, ssc, PB);
    }
    TH_CHECK(memcmp(yt[0], yt[1], (size_t)PB * BD * sizeof(float)) == 0, "%s: step in parts differs from rows", name);
    for (int run = 0; run < 2; run++) { free(y[run]); free(dz[run]); free(du[run]); free(dws[run]); free(yt[run]); }
    free(z); free(u); free(g); free(up); free(back); free(cache); free(sc); free(st); free(ssc); free(zt); free(ut);
    free(utp);
    free_case(&gc);
}

int main(void) {
    th_name = "test_layers";
    Rng r;
    rng_seed(&r, 1234, 7);
    test_linear(&r, 0, WN_OPTS_DEFAULT, "linear");
    test_linear(&r, 1, WN_OPTS_DEFAULT, "linear+wn");
    test_linear(&r, 1, (WnOpts){1, 1.5f, 0.0f}, "linear+wn(no_scale)");
    test_linear(&r, 1, (WnOpts){0, 1.0f, 1.0f}, "linear+wn(clip)");
    test_wn_init(&r);
    test_embed(&r);
    test_rmsnorm(&r);
    test_mlp(&r, MLP_SWIGLU, 0, "mlp(swiglu)");
    test_mlp(&r, MLP_GATED, 0, "mlp(gated)");
    test_mlp(&r, MLP_GATED, 1, "mlp(gated,masks)");
    for (int mixer = 0; mixer < 2; mixer++)
        for (int mlp = 0; mlp < 3; mlp++) test_block(&r, (MixerKind)mixer, (MlpKind)mlp, 0);
    test_block(&r, MIXER_MAMBA2, MLP_GATED, 1);
    test_block(&r, MIXER_ATTN, MLP_GATED, 1);
    for (int mixer = 0; mixer < 2; mixer++)
        for (int mlp = 0; mlp < 3; mlp++) test_block_packed(&r, (MixerKind)mixer, (MlpKind)mlp);
    for (int mixer = 0; mixer < 2; mixer++) test_block_u_parts(&r, (MixerKind)mixer, MLP_GATED);
    test_head(&r);
    printf("test_layers: worst FD rel err %.3g, worst directional rel err %.3g\n", worst_fd,
           worst_dir);
    return th_done();
}
