/* deltanet.c: the (Gated) DeltaNet / DeltaProduct mixer (spec fp-rnn §5.4, §5.5): forward,
 * backward and single-token step; see deltanet.h for the equations.
 *
 * Every projection is its own weight (FLA's q_proj, k_proj, ...), so each is one k_linear GEMM
 * straight into a contiguous array that the next kernel reads as is: k_proj's rows are ordered
 * (n, h, d), which is the kernel's (B, T, nh, H, K) layout. The recurrence is k_delta_*; what is
 * left here is elementwise per token (l2 norms; the sigmoid and softplus gates are k_sigmoid /
 * k_softplus), single-threaded, O(M H K).
 * Backward order (reverse of the forward): o_proj -> output gate -> per-head RMSNorm -> k_delta_bwd
 * -> gate / beta / l2 norms -> silu -> conv -> the input projections, each adding into dx.
 * Out of scope: see deltanet.h.
 */
#include "deltanet.h"

#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void deltanet_cfg_init(DeltaCfg *c, int D, int H, int K, int V, int nh, int W, int gated, int neg_eig,
                       float eps) {
    CHECK(c && D > 0 && H > 0 && K > 0 && V > 0 && nh > 0 && W >= 0 && eps > 0.f,
          "deltanet: bad cfg D=%d H=%d K=%d V=%d nh=%d W=%d eps=%g", D, H, K, V, nh, W, (double)eps);
    c->D = D, c->H = H, c->K = K, c->V = V, c->nh = nh, c->W = W;
    c->gated = gated != 0, c->neg_eig = neg_eig != 0, c->eps = eps;
    c->HK = H * K, c->HV = H * V, c->NK = nh * H * K, c->NV = nh * H * V, c->NB = nh * H;
}

static void check_cfg(const DeltaCfg *c) {
    CHECK(c && c->D > 0 && c->H > 0 && c->K > 0 && c->V > 0 && c->nh > 0 && c->W >= 0 &&
              c->HK == c->H * c->K && c->NK == c->nh * c->HK && c->NV == c->nh * c->HV && c->NB == c->nh * c->H,
          "deltanet: inconsistent cfg (use deltanet_cfg_init)");
}

/* Bump allocation over a float buffer; base NULL only counts (the _floats functions and the
 * carving share one layout). */
static float *take(float *base, size_t *off, size_t n) {
    float *r = base ? base + *off : NULL;
    *off += n;
    return r;
}

/* What the forward produces and the backward reads (the cache; in scratch without one). */
typedef struct {
    float *zq, *zk, *zv; /* (M,HK) (M,NK) (M,NV) projections = conv inputs */
    float *q, *k, *v;    /* kernel inputs, same shapes */
    float *rq, *rk;      /* (M*H) (M*NB) l2-norm rstd */
    float *beta;         /* (M,NB) */
    float *za, *g;       /* (M,H) a_proj u and the log decay | NULL (not gated) */
    float *zg;           /* (M,HV) g_proj u | NULL (not gated) */
    float *o;            /* (M,HV) kernel output */
    float *rstd;         /* (M*H) output norm */
} Keep;

static size_t keep_carve(const DeltaCfg *c, size_t M, float *base, Keep *k) {
    size_t off = 0;
    k->zq = take(base, &off, M * c->HK);
    k->zk = take(base, &off, M * c->NK);
    k->zv = take(base, &off, M * c->NV);
    k->q = take(base, &off, M * c->HK);
    k->k = take(base, &off, M * c->NK);
    k->v = take(base, &off, M * c->NV);
    k->rq = take(base, &off, M * c->H);
    k->rk = take(base, &off, M * c->NB);
    k->beta = take(base, &off, M * c->NB);
    k->za = c->gated ? take(base, &off, M * c->H) : NULL;
    k->g = c->gated ? take(base, &off, M * c->H) : NULL;
    k->zg = c->gated ? take(base, &off, M * c->HV) : NULL;
    k->o = take(base, &off, M * c->HV);
    k->rstd = take(base, &off, M * c->H);
    return off;
}

/* Output-side temporaries of a forward: yn = RMSNorm(o), yp = yn * silu(zg) (= yn if plain). */
static size_t out_carve(const DeltaCfg *c, size_t M, float *base, float **yn, float **yp) {
    size_t off = 0;
    *yn = take(base, &off, M * c->HV);
    *yp = c->gated ? take(base, &off, M * c->HV) : *yn;
    return off;
}

/* Gradients and recomputed activations of the backward. */
typedef struct {
    float *xc;                /* (M, HK+NK+NV) conv outputs before silu | NULL (W = 0) */
    float *dyp, *dyn, *dO;    /* (M,HV) at o_proj's input, at the norm output, at o */
    float *dzg;               /* (M,HV) | NULL */
    float *dq, *dk, *dv;      /* kernel-input gradients, reused for the projections' */
    float *db, *dg;           /* (M,NB) (M,H) */
    float *tmp;               /* (M, max(HK, NK, NV)) silu backward */
} Back;

static size_t back_carve(const DeltaCfg *c, size_t M, float *base, Back *g) {
    size_t off = 0, wid = (size_t)(c->HK > c->NK ? c->HK : c->NK);
    if ((size_t)c->NV > wid) wid = (size_t)c->NV;
    g->xc = c->W ? take(base, &off, M * (size_t)(c->HK + c->NK + c->NV)) : NULL;
    g->dyp = take(base, &off, M * c->HV);
    g->dyn = c->gated ? take(base, &off, M * c->HV) : g->dyp;
    g->dO = take(base, &off, M * c->HV);
    g->dzg = c->gated ? take(base, &off, M * c->HV) : NULL;
    g->dq = take(base, &off, M * c->HK);
    g->dk = take(base, &off, M * c->NK);
    g->dv = take(base, &off, M * c->NV);
    g->db = take(base, &off, M * c->NB);
    g->dg = take(base, &off, M * c->H);
    g->tmp = take(base, &off, M * wid);
    return off;
}

size_t deltanet_cache_floats(const DeltaCfg *c, int B, int T) {
    check_cfg(c);
    Keep k;
    return keep_carve(c, (size_t)B * T, NULL, &k);
}

size_t deltanet_scratch_floats(const DeltaCfg *c, int B, int T) {
    check_cfg(c);
    size_t M = (size_t)B * T;
    Keep k;
    Back g;
    float *yn, *yp;
    size_t fwd = keep_carve(c, M, NULL, &k) + out_carve(c, M, NULL, &yn, &yp);
    size_t bwd = out_carve(c, M, NULL, &yn, &yp) + back_carve(c, M, NULL, &g);
    return fwd > bwd ? fwd : bwd;
}

static size_t conv_floats(const DeltaCfg *c, int B) {
    return c->W ? (size_t)B * (c->HK + c->NK + c->NV) * c->W : 0;
}

size_t deltanet_state_floats(const DeltaCfg *c, int B) {
    check_cfg(c);
    return conv_floats(c, B) + (size_t)B * c->H * c->K * c->V;
}

size_t deltanet_step_scratch_floats(const DeltaCfg *c, int B) {
    check_cfg(c);
    Keep k;
    float *yn, *yp;
    return keep_carve(c, (size_t)B, NULL, &k) + out_carve(c, (size_t)B, NULL, &yn, &yp);
}

/* ---- elementwise pieces ------------------------------------------------------------------- */

/* Each of `rows` rows of n: r = (|x|^2 + eps)^-1/2, x <- x r s. */
static void l2_fwd(float *x, float *r, size_t rows, int n, float s) {
    for (size_t i = 0; i < rows; i++) {
        float *xi = x + i * n, ss = 0.f;
        for (int j = 0; j < n; j++) ss += xi[j] * xi[j];
        float ri = 1.f / sqrtf(ss + DELTA_L2_EPS);
        if (r) r[i] = ri;
        for (int j = 0; j < n; j++) xi[j] *= ri * s;
    }
}

/* In place, d = dL/dy -> dL/dx for y = s x r:  dx = r (s dy - (y / s)(y . dy)). */
static void l2_bwd(float *d, const float *y, const float *r, size_t rows, int n, float s) {
    for (size_t i = 0; i < rows; i++) {
        float *di = d + i * n, dot = 0.f;
        const float *yi = y + i * n;
        for (int j = 0; j < n; j++) dot += yi[j] * di[j];
        float a = dot / s;
        for (int j = 0; j < n; j++) di[j] = r[i] * (s * di[j] - yi[j] * a);
    }
}

static float beta_scale(const DeltaCfg *c) { return c->neg_eig ? 2.f : 1.f; }

/* z -> silu(conv(z)) (or silu(z) without conv); C channels over (B, T). */
static void act_fwd(const DeltaCfg *c, float *out, const float *z, const float *cw, int C, int B, int T) {
    if (c->W) k_conv1d_silu_fwd(NULL, out, z, cw, NULL, B, T, C, c->W);
    else k_silu_fwd(out, z, (size_t)B * T * C);
}

/* From the projections in k->z*, za, zb (beta holds b_proj u on entry) to the kernel inputs. */
static void front_fwd(const DeltaCfg *c, const DeltaW *w, const Keep *k, size_t M) {
    const float cb = beta_scale(c);
    k_sigmoid(k->beta, k->beta, NULL, (int)M, c->NB);
    if (cb != 1.f)
        for (size_t i = 0; i < M * c->NB; i++) k->beta[i] *= cb;
    l2_fwd(k->q, k->rq, M * c->H, c->K, 1.f / sqrtf((float)c->K));
    l2_fwd(k->k, k->rk, M * c->NB, c->K, 1.f);
    if (!c->gated) return;
    k_softplus(k->g, k->za, w->dt_bias, (int)M, c->H); /* PyTorch F.softplus: threshold 20 */
    for (int h = 0; h < c->H; h++) {
        float a = -expf(w->A_log[h]);
        for (size_t m = 0; m < M; m++) k->g[m * c->H + h] *= a;
    }
}

/* o -> yn = RMSNorm(o) per head -> yp (gated: yn * silu(zg)) */
static void out_fwd(const DeltaCfg *c, const DeltaW *w, float *yn, float *yp, float *rstd,
                    const float *o, const float *zg, size_t M) {
    k_rmsnorm_fwd(yn, rstd, o, w->o_norm, (int)(M * c->H), c->V, c->eps);
    if (c->gated) k_swiglu_fwd(yp, zg, yn, M * c->HV);
}

/* Prefill: the window of the last W projections per channel, oldest first, zero-padded. */
static void fill_window(float *cs, const float *z, int C, int W, int B, int T) {
    for (int b = 0; b < B; b++)
        for (int ch = 0; ch < C; ch++)
            for (int i = 0; i < W; i++) {
                int t = T - W + i;
                cs[((size_t)b * C + ch) * W + i] = t >= 0 ? z[((size_t)b * T + t) * C + ch] : 0.f;
            }
}

void deltanet_fwd(const DeltaCfg *c, const DeltaW *w, float *y, const float *x, float *cache,
                  float *scratch, float *state_out, int B, int T) {
    check_cfg(c);
    CHECK(w && y && x && scratch && y != x && B > 0 && T > 0, "deltanet_fwd: bad arguments (B=%d T=%d)", B, T);
    const size_t M = (size_t)B * T;
    const int D = c->D;
    Keep k;
    float *yn, *yp;
    size_t off = cache ? 0 : keep_carve(c, M, scratch, &k);
    if (cache) keep_carve(c, M, cache, &k);
    out_carve(c, M, scratch + off, &yn, &yp);

    k_linear_fwd(k.zq, x, w->q_proj, NULL, (int)M, D, c->HK);
    k_linear_fwd(k.zk, x, w->k_proj, NULL, (int)M, D, c->NK);
    k_linear_fwd(k.zv, x, w->v_proj, NULL, (int)M, D, c->NV);
    k_linear_fwd(k.beta, x, w->b_proj, NULL, (int)M, D, c->NB);
    if (c->gated) {
        k_linear_fwd(k.za, x, w->a_proj, NULL, (int)M, D, c->H);
        k_linear_fwd(k.zg, x, w->g_proj, NULL, (int)M, D, c->HV);
    }
    act_fwd(c, k.q, k.zq, w->q_conv, c->HK, B, T);
    act_fwd(c, k.k, k.zk, w->k_conv, c->NK, B, T);
    act_fwd(c, k.v, k.zv, w->v_conv, c->NV, B, T);
    front_fwd(c, w, &k, M);

    size_t cn = conv_floats(c, B);
    k_delta_fwd(k.o, state_out ? state_out + cn : NULL, k.q, k.k, k.v, k.beta, k.g, B, T, c->H, c->nh,
                c->K, c->V);
    out_fwd(c, w, yn, yp, k.rstd, k.o, k.zg, M);
    k_linear_fwd(y, yp, w->o_proj, NULL, (int)M, c->HV, D);

    if (state_out && c->W) {
        fill_window(state_out, k.zq, c->HK, c->W, B, T);
        fill_window(state_out + (size_t)B * c->HK * c->W, k.zk, c->NK, c->W, B, T);
        fill_window(state_out + (size_t)B * (c->HK + c->NK) * c->W, k.zv, c->NV, c->W, B, T);
    }
}

/* ---- backward ------------------------------------------------------------------------------- */

/* d (dL/d of the activation, (M, C)) -> dL/dz of its projection, left in d:
 * through silu (into tmp) and, with a conv, the conv (back into d; dconv accumulates). xc holds
 * the conv output before silu (recomputed here), z the projection. */
static void act_bwd(const DeltaCfg *c, float *d, float *tmp, float *xc, float *dconv, const float *z,
                    const float *cw, int C, int B, int T) {
    size_t n = (size_t)B * T * C;
    k_zero(tmp, n);
    if (!c->W) {
        k_silu_bwd(tmp, d, z, n);
        memcpy(d, tmp, sizeof(float) * n);
        return;
    }
    k_conv1d_fwd(xc, z, cw, NULL, B, T, C, c->W);
    k_silu_bwd(tmp, d, xc, n);
    k_zero(d, n);
    k_conv1d_bwd(d, dconv, NULL, tmp, z, cw, B, T, C, c->W);
}

/* Gate: g = -exp(A_log) softplus(za + dt_bias). dg (M,H) -> d za in place; dA_log += sum dg g;
 * ddt_bias += sum d za (double, token order). */
static void gate_bwd(const DeltaCfg *c, const DeltaW *w, DeltaW *dW, float *dg, const Keep *k, size_t M) {
    const int H = c->H;
    float *dA = dW ? dW->A_log : NULL, *ddt = dW ? dW->dt_bias : NULL;
    if (dA)
        for (int h = 0; h < H; h++) {
            double sa = 0;
            for (size_t m = 0; m < M; m++) sa += (double)dg[m * H + h] * k->g[m * H + h];
            dA[h] += (float)sa;
        }
    k_mul_sigmoid(dg, k->za, w->dt_bias, (int)M, H); /* softplus' = sigmoid */
    for (int h = 0; h < H; h++) {
        double sd = 0;
        float A = expf(w->A_log[h]);
        for (size_t m = 0; m < M; m++) {
            size_t i = m * H + h;
            dg[i] *= -A;
            sd += dg[i];
        }
        if (ddt) ddt[h] += (float)sd;
    }
}

void deltanet_bwd(const DeltaCfg *c, const DeltaW *w, DeltaW *dW, float *dx, const float *dy,
                  const float *x, const float *cache, float *scratch, int B, int T) {
    check_cfg(c);
    CHECK(w && dy && x && cache && scratch && B > 0 && T > 0,
          "deltanet_bwd: bad arguments (B=%d T=%d; cache required)", B, T);
    DeltaW none = {0};
    if (!dW) dW = &none;
    const size_t M = (size_t)B * T;
    const int D = c->D, Mi = (int)M;
    Keep k;
    Back g;
    float *yn, *yp;
    keep_carve(c, M, (float *)cache, &k); /* read-only below */
    size_t off = out_carve(c, M, scratch, &yn, &yp);
    back_carve(c, M, scratch + off, &g);

    /* y = o_proj(yp):  dyp = dy Wo;  dWo += dy^T yp (yn, yp recomputed) */
    out_fwd(c, w, yn, yp, NULL, k.o, k.zg, M);
    k_gemm(0, 0, Mi, c->HV, D, 1.f, dy, D, w->o_proj, c->HV, 0.f, g.dyp, c->HV);
    if (dW->o_proj) k_linear_bwd(NULL, dW->o_proj, NULL, dy, yp, w->o_proj, Mi, c->HV, D);

    /* yp = yn * silu(zg) */
    if (c->gated) {
        k_zero(g.dyn, M * c->HV);
        k_zero(g.dzg, M * c->HV);
        k_swiglu_bwd(g.dzg, g.dyn, g.dyp, k.zg, yn, M * c->HV);
        if (dx || dW->g_proj) k_linear_bwd(dx, dW->g_proj, NULL, g.dzg, x, w->g_proj, Mi, D, c->HV);
    }
    /* yn = RMSNorm(o) per head */
    k_zero(g.dO, M * c->HV);
    k_rmsnorm_bwd(g.dO, dW->o_norm, g.dyn, k.o, w->o_norm, k.rstd, Mi * c->H, c->V);

    /* the recurrence */
    k_zero(g.dq, M * c->HK);
    k_zero(g.dk, M * c->NK);
    k_zero(g.dv, M * c->NV);
    k_zero(g.db, M * c->NB);
    k_zero(g.dg, M * c->H);
    k_delta_bwd(g.dq, g.dk, g.dv, g.db, c->gated ? g.dg : NULL, g.dO, k.q, k.k, k.v, k.beta, k.g, B, T,
                c->H, c->nh, c->K, c->V);

    /* gate and beta: back to a_proj u and b_proj u, then through their projections */
    if (c->gated) {
        gate_bwd(c, w, dW, g.dg, &k, M);
        if (dx || dW->a_proj) k_linear_bwd(dx, dW->a_proj, NULL, g.dg, x, w->a_proj, Mi, D, c->H);
    }
    const float cb = beta_scale(c);
    for (size_t i = 0; i < M * c->NB; i++) g.db[i] *= k.beta[i] * (1.f - k.beta[i] / cb);
    if (dx || dW->b_proj) k_linear_bwd(dx, dW->b_proj, NULL, g.db, x, w->b_proj, Mi, D, c->NB);

    /* q, k: l2 norms; then q, k, v: silu, conv, projection */
    l2_bwd(g.dq, k.q, k.rq, M * c->H, c->K, 1.f / sqrtf((float)c->K));
    l2_bwd(g.dk, k.k, k.rk, M * c->NB, c->K, 1.f);
    float *xq = g.xc, *xk = g.xc ? g.xc + M * c->HK : NULL, *xv = g.xc ? xk + M * c->NK : NULL;
    act_bwd(c, g.dq, g.tmp, xq, dW->q_conv, k.zq, w->q_conv, c->HK, B, T);
    act_bwd(c, g.dk, g.tmp, xk, dW->k_conv, k.zk, w->k_conv, c->NK, B, T);
    act_bwd(c, g.dv, g.tmp, xv, dW->v_conv, k.zv, w->v_conv, c->NV, B, T);
    if (dx || dW->q_proj) k_linear_bwd(dx, dW->q_proj, NULL, g.dq, x, w->q_proj, Mi, D, c->HK);
    if (dx || dW->k_proj) k_linear_bwd(dx, dW->k_proj, NULL, g.dk, x, w->k_proj, Mi, D, c->NK);
    if (dx || dW->v_proj) k_linear_bwd(dx, dW->v_proj, NULL, g.dv, x, w->v_proj, Mi, D, c->NV);
}

/* ---- single-token step ---------------------------------------------------------------------- */

void deltanet_step(const DeltaCfg *c, const DeltaW *w, float *y, const float *x,
                   const float *state_in, float *state_out, float *scratch, int B) {
    check_cfg(c);
    CHECK(w && y && x && state_in && scratch && B > 0, "deltanet_step: bad arguments (B=%d)", B);
    const size_t M = (size_t)B;
    const int D = c->D;
    Keep k;
    float *yn, *yp;
    size_t off = keep_carve(c, M, scratch, &k);
    out_carve(c, M, scratch + off, &yn, &yp);

    k_linear_fwd(k.zq, x, w->q_proj, NULL, B, D, c->HK);
    k_linear_fwd(k.zk, x, w->k_proj, NULL, B, D, c->NK);
    k_linear_fwd(k.zv, x, w->v_proj, NULL, B, D, c->NV);
    k_linear_fwd(k.beta, x, w->b_proj, NULL, B, D, c->NB);
    if (c->gated) {
        k_linear_fwd(k.za, x, w->a_proj, NULL, B, D, c->H);
        k_linear_fwd(k.zg, x, w->g_proj, NULL, B, D, c->HV);
    }
    if (c->W) { /* window' = shift(window) with z last; act = silu(sum_i window'[i] w[i]) */
        size_t oq = 0, ok = M * c->HK * c->W, ov = M * (size_t)(c->HK + c->NK) * c->W;
        k_conv1d_step(k.q, state_out ? state_out + oq : NULL, state_in + oq, k.zq, w->q_conv, NULL, B, c->HK, c->W);
        k_conv1d_step(k.k, state_out ? state_out + ok : NULL, state_in + ok, k.zk, w->k_conv, NULL, B, c->NK, c->W);
        k_conv1d_step(k.v, state_out ? state_out + ov : NULL, state_in + ov, k.zv, w->v_conv, NULL, B, c->NV, c->W);
        k_silu_fwd(k.q, k.q, M * c->HK);
        k_silu_fwd(k.k, k.k, M * c->NK);
        k_silu_fwd(k.v, k.v, M * c->NV);
    } else {
        k_silu_fwd(k.q, k.zq, M * c->HK);
        k_silu_fwd(k.k, k.zk, M * c->NK);
        k_silu_fwd(k.v, k.zv, M * c->NV);
    }
    front_fwd(c, w, &k, M);
    size_t cn = conv_floats(c, B);
    k_delta_step(k.o, state_out ? state_out + cn : NULL, state_in + cn, k.q, k.k, k.v, k.beta, k.g, B,
                 c->H, c->nh, c->K, c->V);
    out_fwd(c, w, yn, yp, k.rstd, k.o, k.zg, M);
    k_linear_fwd(y, yp, w->o_proj, NULL, B, c->HV, D);
}
