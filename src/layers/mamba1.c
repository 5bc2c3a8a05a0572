/* mamba1.c: the Mamba-1 mixer (spec fp-rnn §5.2): full-sequence forward, its backward, and the
 * single-token step. Equations and memory contract in mamba1.h.
 *
 * All arithmetic lives in the kernels (k_gemm, k_linear_*, k_softplus,
 * k_conv1d_*, k_silu_*, k_swiglu_*, k_s6_*). As in mamba2.c, the projections whose outputs are
 * split (in_proj into xin | z, x_proj into dlow | Bm | Cm) run as one GEMM per row block, each
 * writing its own contiguous array, so the kernels get contiguous inputs without copies and the
 * backward runs the same GEMMs on the split gradients.
 * The output gate o * silu(z) is k_swiglu (silu(a) * b with a = z, b = o).
 * dt's backward needs sigmoid(dt_proj output); it is recovered from the cached dt itself,
 * sigmoid(v) = 1 - exp(-softplus(v)) = -expm1(-dt), so the pre-activation is not cached.
 * Out of scope: see mamba1.h.
 */
#include "mamba1.h"

#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void mamba1_cfg_init(Mamba1Cfg *c, int D, int expand, int N, int R, int W) {
    CHECK(c != NULL, "mamba1_cfg_init: NULL cfg");
    CHECK(D > 0 && expand > 0 && N > 0 && R >= 0 && W > 0, "mamba1: bad cfg D=%d expand=%d N=%d R=%d W=%d",
          D, expand, N, R, W);
    c->D = D;
    c->E = expand * D;
    c->N = N;
    c->R = R > 0 ? R : (D + 15) / 16; /* mamba_ssm dt_rank "auto" = ceil(d_model / 16) */
    c->W = W;
    c->K = c->R + 2 * N;
}

static void check_cfg(const Mamba1Cfg *c) {
    CHECK(c && c->D > 0 && c->E > 0 && c->N > 0 && c->R > 0 && c->W > 0 && c->K == c->R + 2 * c->N,
          "mamba1: inconsistent cfg (use mamba1_cfg_init)");
}

/* Bump allocation over a float buffer; base == NULL only counts (sizes and carving share code). */
static float *take(float *base, size_t *off, size_t n) {
    float *r = base ? base + *off : NULL;
    *off += n;
    return r;
}

/* ---- what the forward keeps ------------------------------------------------------------------ */
typedef struct {
    float *xin;   /* (M, E) pre-conv x */
    float *z;     /* (M, E) gate input */
    float *dl;    /* (M, R) | bm (M, N) | cm (M, N): x_proj output, contiguous blocks */
    float *bm, *cm;
    float *dt;    /* (M, E) softplus(dt_proj(dl) + dt_bias) */
    float *o;     /* (M, E) scan output */
} Keep;

static size_t keep_carve(const Mamba1Cfg *c, size_t M, float *base, Keep *k) {
    size_t off = 0;
    k->xin = take(base, &off, M * c->E);
    k->z = take(base, &off, M * c->E);
    k->dl = take(base, &off, M * c->R);
    k->bm = take(base, &off, M * c->N);
    k->cm = take(base, &off, M * c->N);
    k->dt = take(base, &off, M * c->E);
    k->o = take(base, &off, M * c->E);
    return off;
}

/* Temporaries: forward uses xa and A (and the Keep when there is no cache); the backward uses all
 * (dead buffers are reused, see mamba1_bwd). */
typedef struct {
    float *xc, *xa;          /* (M, E) conv output before / after silu */
    float *A, *dA;           /* (E, N) */
    float *g1, *g2, *g3, *g4;/* (M, E) gradient buffers */
    float *dk;               /* (M, K) d(dlow | Bm | Cm), blocked like Keep */
} Tmp;

static size_t tmp_carve(const Mamba1Cfg *c, size_t M, int bwd, float *base, Tmp *s) {
    size_t off = 0, ME = M * c->E, EN = (size_t)c->E * c->N;
    memset(s, 0, sizeof *s);
    s->xa = take(base, &off, ME);
    s->A = take(base, &off, EN);
    if (!bwd) return off;
    s->xc = take(base, &off, ME);
    s->dA = take(base, &off, EN);
    s->g1 = take(base, &off, ME);
    s->g2 = take(base, &off, ME);
    s->g3 = take(base, &off, ME);
    s->g4 = take(base, &off, ME);
    s->dk = take(base, &off, M * c->K);
    return off;
}

size_t mamba1_cache_floats(const Mamba1Cfg *c, int B, int T) {
    check_cfg(c);
    Keep k;
    return keep_carve(c, (size_t)B * T, NULL, &k);
}

size_t mamba1_scratch_floats(const Mamba1Cfg *c, int B, int T) {
    check_cfg(c);
    size_t M = (size_t)B * T;
    Keep k;
    Tmp s;
    size_t fwd = tmp_carve(c, M, 0, NULL, &s) + keep_carve(c, M, NULL, &k);
    size_t bwd = tmp_carve(c, M, 1, NULL, &s);
    return fwd > bwd ? fwd : bwd;
}

size_t mamba1_state_floats(const Mamba1Cfg *c, int B) {
    check_cfg(c);
    return (size_t)B * c->E * c->W + (size_t)B * c->E * c->N;
}

/* ---- shared pieces ------------------------------------------------------------------------- */

/* xin, z = the two row blocks of in_proj applied to x:(M, D). */
static void in_proj_fwd(const Mamba1Cfg *c, const Mamba1W *w, float *xin, float *z, const float *x,
                        size_t M) {
    const int D = c->D, E = c->E;
    k_gemm(0, 1, (int)M, E, D, 1.f, x, D, w->in_proj, D, 0.f, xin, E);
    k_gemm(0, 1, (int)M, E, D, 1.f, x, D, w->in_proj + (size_t)E * D, D, 0.f, z, E);
}

/* dl | bm | cm = the three row blocks of x_proj applied to xa:(M, E); dt = softplus(dt_proj(dl)
 * + dt_bias); A = -exp(A_log). */
static void proj_dt_fwd(const Mamba1Cfg *c, const Mamba1W *w, const Keep *k, float *A, const float *xa,
                        size_t M) {
    const int E = c->E, R = c->R, N = c->N;
    k_gemm(0, 1, (int)M, R, E, 1.f, xa, E, w->x_proj, E, 0.f, k->dl, R);
    k_gemm(0, 1, (int)M, N, E, 1.f, xa, E, w->x_proj + (size_t)R * E, E, 0.f, k->bm, N);
    k_gemm(0, 1, (int)M, N, E, 1.f, xa, E, w->x_proj + (size_t)(R + N) * E, E, 0.f, k->cm, N);
    k_linear_fwd(k->dt, k->dl, w->dt_proj, w->dt_bias, (int)M, R, E);
    k_softplus(k->dt, k->dt, NULL, (int)M, E); /* PyTorch F.softplus: beta 1, threshold 20 */
    k_neg_exp(A, w->A_log, (size_t)E * N);
}

/* Prefill: conv_state (B,E,W) = the last W pre-conv xin vectors, oldest first, zero-padded on the
 * left when T < W (what k_conv1d_step would hold after T steps). */
static void fill_conv_state(const Mamba1Cfg *c, float *cs, const float *xin, int B, int T) {
    const int E = c->E, W = c->W;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++)
            for (int k = 0; k < W; k++) {
                int t = T - W + k;
                cs[((size_t)b * E + i) * W + k] = t >= 0 ? xin[((size_t)b * T + t) * E + i] : 0.f;
            }
}

void mamba1_fwd(const Mamba1Cfg *c, const Mamba1W *w, float *y, const float *x, float *cache,
                float *scratch, float *state_out, int B, int T) {
    check_cfg(c);
    CHECK(w && y && x && scratch && B > 0 && T > 0, "mamba1_fwd: bad arguments (B=%d T=%d)", B, T);
    const size_t M = (size_t)B * T;
    const int E = c->E;
    Tmp s;
    Keep k;
    size_t off = tmp_carve(c, M, 0, scratch, &s);
    keep_carve(c, M, cache ? cache : scratch + off, &k); /* no cache: the Keep lives in scratch */

    in_proj_fwd(c, w, k.xin, k.z, x, M);
    k_conv1d_fwd(s.xa, k.xin, w->conv_w, w->conv_b, B, T, E, c->W);
    k_silu_fwd(s.xa, s.xa, M * E);
    proj_dt_fwd(c, w, &k, s.A, s.xa, M);
    k_s6_fwd(k.o, state_out ? state_out + (size_t)B * E * c->W : NULL, s.xa, k.dt, s.A, NULL, k.bm, k.cm,
             w->Dskip, B, T, E, c->N);
    /* out = out_proj(silu(z) * o); the gated product goes into xa, dead after the scan */
    k_swiglu_fwd(s.xa, k.z, k.o, M * E);
    k_linear_fwd(y, s.xa, w->out_proj, NULL, (int)M, E, c->D);
    if (state_out) fill_conv_state(c, state_out, k.xin, B, T);
}

void mamba1_bwd(const Mamba1Cfg *c, const Mamba1W *w, Mamba1W *dW, float *dx, const float *dy,
                const float *x, const float *cache, float *scratch, int B, int T) {
    check_cfg(c);
    CHECK(w && dy && x && cache && scratch && B > 0 && T > 0,
          "mamba1_bwd: bad arguments (B=%d T=%d; cache required)", B, T);
    if (!dW && !dx) return;
    const size_t M = (size_t)B * T, ME = M * c->E;
    const int D = c->D, E = c->E, N = c->N, R = c->R;
    Tmp s;
    Keep k;
    tmp_carve(c, M, 1, scratch, &s);
    keep_carve(c, M, (float *)cache, &k); /* read-only below */

    /* recompute xc = conv(xin) + b, xa = silu(xc), A */
    k_conv1d_fwd(s.xc, k.xin, w->conv_w, w->conv_b, B, T, E, c->W);
    k_silu_fwd(s.xa, s.xc, ME);
    k_neg_exp(s.A, w->A_log, (size_t)E * N);

    /* out = out_proj(g), g = silu(z) o:  dg (g1) = dy Wout;  dWout += dy^T g (g in g2) */
    k_gemm(0, 0, (int)M, E, D, 1.f, dy, D, w->out_proj, E, 0.f, s.g1, E);
    if (dW && dW->out_proj) {
        k_swiglu_fwd(s.g2, k.z, k.o, ME);
        k_linear_bwd(NULL, dW->out_proj, NULL, dy, s.g2, w->out_proj, (int)M, E, D);
    }
    /* dz (g2), do (g3) */
    k_zero(s.g2, ME);
    k_zero(s.g3, ME);
    k_swiglu_bwd(s.g2, s.g3, s.g1, k.z, k.o, ME);

    /* o = S6(xa, dt, A, Bm, Cm, D): dxa (g1), ddt (g4), dA, dBm | dCm (blocks of dk) */
    float *ddl = s.dk, *dbm = s.dk + M * R, *dcm = dbm + M * N;
    k_zero(s.g1, ME);
    k_zero(s.g4, ME);
    k_zero(dbm, M * 2 * N);
    int want_dA = dW && dW->A_log;
    if (want_dA) k_zero(s.dA, (size_t)E * N);
    k_s6_bwd(s.g1, s.g4, want_dA ? s.dA : NULL, dbm, dcm, dW ? dW->Dskip : NULL, s.g3, s.xa, k.dt, s.A,
             k.bm, k.cm, w->Dskip, B, T, E, N);
    if (want_dA) /* A = -exp(A_log): dA_log = dA * A */
        for (size_t q = 0; q < (size_t)E * N; q++) dW->A_log[q] += s.dA[q] * s.A[q];

    /* dt = softplus(v), v = dt_proj(dl) + b:  dv = ddt * sigmoid(v) = ddt * -expm1(-dt) (in g4) */
    k_mul_dsoftplus_out(s.g4, k.dt, ME);
    k_zero(ddl, M * R);
    k_linear_bwd(ddl, dW ? dW->dt_proj : NULL, dW ? dW->dt_bias : NULL, s.g4, k.dl, w->dt_proj, (int)M, R, E);

    /* dl | Bm | Cm = x_proj(xa), three row blocks: dxa += dk_i Wx_i;  dWx_i += dk_i^T xa */
    const int rows[3] = {R, N, N}, first[3] = {0, R, R + N};
    const float *dki[3] = {ddl, dbm, dcm};
    for (int p = 0; p < 3; p++) {
        const float *Wp = w->x_proj + (size_t)first[p] * E;
        k_gemm(0, 0, (int)M, E, rows[p], 1.f, dki[p], rows[p], Wp, E, 1.f, s.g1, E);
        if (dW && dW->x_proj)
            k_gemm(1, 0, rows[p], E, (int)M, 1.f, dki[p], rows[p], s.xa, E, 1.f,
                   dW->x_proj + (size_t)first[p] * E, E);
    }

    /* xa = silu(xc), xc = conv(xin):  dxc (g1 in place: dxa is dead after), dxin (g4, dv is dead) */
    k_mul_dsilu(s.g1, s.xc, ME);
    k_zero(s.g4, ME);
    k_conv1d_bwd(s.g4, dW ? dW->conv_w : NULL, dW ? dW->conv_b : NULL, s.g1, k.xin, w->conv_w, B, T, E,
                 c->W);

    /* [xin ; z] = in_proj(x): dx += dxin W_x + dz W_z;  dW blocks += d^T x */
    const float *dblk[2] = {s.g4, s.g2};
    for (int p = 0; p < 2; p++) {
        size_t wo = (size_t)p * E * D;
        if (dx) k_gemm(0, 0, (int)M, D, E, 1.f, dblk[p], E, w->in_proj + wo, D, 1.f, dx, D);
        if (dW && dW->in_proj) k_gemm(1, 0, E, D, (int)M, 1.f, dblk[p], E, x, D, 1.f, dW->in_proj + wo, D);
    }
}

/* ---- single-token step ------------------------------------------------------------------- */

typedef struct {
    Keep k;       /* B rows */
    float *xa, *A;/* (B, E), (E, N) */
} StepBufs;

static size_t step_carve(const Mamba1Cfg *c, int B, float *base, StepBufs *s) {
    size_t off = keep_carve(c, (size_t)B, base, &s->k);
    s->xa = take(base, &off, (size_t)B * c->E);
    s->A = take(base, &off, (size_t)c->E * c->N);
    return off;
}

size_t mamba1_step_scratch_floats(const Mamba1Cfg *c, int B) {
    check_cfg(c);
    StepBufs s;
    return step_carve(c, B, NULL, &s);
}

void mamba1_step(const Mamba1Cfg *c, const Mamba1W *w, float *y, const float *x,
                 const float *state_in, float *state_out, float *scratch, int B) {
    check_cfg(c);
    CHECK(w && y && x && state_in && scratch && B > 0, "mamba1_step: bad arguments (B=%d)", B);
    const int E = c->E;
    const size_t conv_n = (size_t)B * E * c->W;
    StepBufs s;
    step_carve(c, B, scratch, &s);
    const Keep *k = &s.k;

    in_proj_fwd(c, w, k->xin, k->z, x, (size_t)B);
    /* window' = shift(conv_state) with xin last; xa = silu(sum_k window'[., k] w[., k] + b) */
    k_conv1d_step(s.xa, state_out, state_in, k->xin, w->conv_w, w->conv_b, B, E, c->W);
    k_silu_fwd(s.xa, s.xa, (size_t)B * E);
    proj_dt_fwd(c, w, k, s.A, s.xa, (size_t)B);
    k_s6_step(k->o, state_out ? state_out + conv_n : NULL, state_in + conv_n, s.xa, k->dt, s.A, NULL, k->bm,
              k->cm, w->Dskip, B, E, c->N);
    k_swiglu_fwd(s.xa, k->z, k->o, (size_t)B * E);
    k_linear_fwd(y, s.xa, w->out_proj, NULL, B, E, c->D);
}
