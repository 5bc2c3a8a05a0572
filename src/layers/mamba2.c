/* mamba2.c: the Mamba2 mixer (spec implicit-lm §1.4): full-sequence forward, its backward, and
 * the single-token step used by sequential mode (§4.1).
 *
 * All arithmetic lives in the kernels (k_gemm, k_linear_*, k_softplus, k_sigmoid,
 * k_conv1d_*, k_silu_*, k_ssd_*, k_gated_rmsnorm_*). The splits zgate | xBC | dtraw
 * of zx and xs | Bm | Cm of xBC would be strided inside a token's row, while kernels take
 * contiguous arrays; instead of copying, in_proj runs as one GEMM per row block and writes each
 * split into its own contiguous array ("blocked" zx, see in_proj_fwd), and the gradients come
 * back the same way. Only the single-token step (B rows) still copies.
 *
 * Memory (STYLE §8.3): see mamba2.h. The cache holds zx (blocked), ys, rstd, dt and the scan's
 * chunk-entry states; the backward recomputes the conv, silu and (only when dW of out_proj is
 * wanted) the normed yn from them.
 * Out of scope: see mamba2.h.
 */
#include "mamba2.h"

#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "linear.h"

void mamba2_cfg_init(Mamba2Cfg *c, int D, int expand, int N, int P, int W, float eps) {
    CHECK(c != NULL, "mamba2_cfg_init: NULL cfg");
    CHECK(D > 0 && expand > 0 && N > 0 && P > 0 && W > 0 && eps > 0.f,
          "mamba2: bad cfg D=%d expand=%d N=%d P=%d W=%d eps=%g", D, expand, N, P, W, (double)eps);
    c->D = D;
    c->E = expand * D;
    CHECK(c->E % P == 0, "mamba2: E=%d is not a multiple of headdim P=%d", c->E, P);
    c->N = N;
    c->P = P;
    c->H = c->E / P;
    c->W = W;
    c->C = c->E + 2 * N;
    c->K = 2 * c->E + 2 * N + c->H;
    c->eps = eps;
    c->u_parts = 0;
}

static void check_cfg(const Mamba2Cfg *c) {
    CHECK(c && c->D > 0 && c->N > 0 && c->P > 0 && c->W > 0 && c->H * c->P == c->E &&
              c->C == c->E + 2 * c->N && c->K == 2 * c->E + 2 * c->N + c->H,
          "mamba2: inconsistent cfg (use mamba2_cfg_init)");
}

/* Bump allocation over a float buffer. With base == NULL it only counts, so the _floats
 * functions and the carving below share one layout and cannot drift apart. */
static float *take(float *base, size_t *off, size_t n) {
    float *r = base ? base + *off : NULL;
    *off += n;
    return r;
}

/* ---- the five row blocks of in_proj ------------------------------------------------------------
 * zx = in_proj(x) + u is K wide per token: zgate (E) | x (E) | B (N) | C (N) | dtraw (H), where
 * x | B | C is the conv input xBC. Instead of one (M, K) GEMM whose output the kernels would need
 * copied into contiguous arrays, the layer runs one GEMM per row block of in_proj and stores zx
 * "blocked": block p is a contiguous (M, n_p) array at zx + M * off_p. So zgate, dtraw and the
 * three conv groups are ready-made kernel inputs, the conv output splits into xs | Bm | Cm without
 * copies, and the backward runs the same GEMMs on blocked gradients (no scatter into a (M, K)
 * buffer). The depthwise conv is per channel, so running it per group changes no arithmetic. */
enum { PZ, PX, PB, PC, PDT, NPART };

typedef struct {
    int off[NPART]; /* first in_proj row (= column of zx) of each block */
    int n[NPART];   /* rows of each block */
} Parts;

static Parts parts_of(const Mamba2Cfg *c) {
    Parts p;
    p.n[PZ] = c->E, p.n[PX] = c->E, p.n[PB] = c->N, p.n[PC] = c->N, p.n[PDT] = c->H;
    p.off[0] = 0;
    for (int i = 1; i < NPART; i++) p.off[i] = p.off[i - 1] + p.n[i - 1];
    return p;
}

/* Block i of a blocked (M, K) array. */
static float *blk(float *zx, const Parts *p, size_t M, int i) { return zx + M * (size_t)p->off[i]; }

int mamba2_u_parts(const Mamba2Cfg *c, int n[5]) {
    Parts p = parts_of(c);
    for (int i = 0; i < NPART; i++) n[i] = p.n[i];
    return NPART;
}

/* Where part i of the injection (or of its gradient) starts, and its row stride (u_parts). */
static size_t u_off(const Mamba2Cfg *c, const Parts *p, size_t M, int i, size_t *ld) {
    *ld = c->u_parts ? (size_t)p->n[i] : (size_t)c->K;
    return c->u_parts ? M * (size_t)p->off[i] : (size_t)p->off[i];
}

/* ---- weights packed once: in_proj block 0..4 then out_proj, each linear_pack's two forms ---- */

static const float *pack_of_block(const Mamba2Cfg *c, const Mamba2W *w, const Parts *p, int i) {
    if (!w->packed) return NULL;
    size_t off = 0;
    for (int j = 0; j < i; j++) off += linear_pack_floats(c->D, p->n[j]);
    return w->packed + off;
}

static const float *pack_of_out(const Mamba2Cfg *c, const Mamba2W *w) {
    if (!w->packed) return NULL;
    Parts p = parts_of(c);
    return pack_of_block(c, w, &p, NPART - 1) + linear_pack_floats(c->D, p.n[NPART - 1]);
}

size_t mamba2_pack_floats(const Mamba2Cfg *c) {
    check_cfg(c);
    Parts p = parts_of(c);
    size_t n = linear_pack_floats(c->E, c->D);
    for (int i = 0; i < NPART; i++) n += linear_pack_floats(c->D, p.n[i]);
    return n;
}

void mamba2_pack(const Mamba2Cfg *c, Mamba2W *w, float *packed) {
    check_cfg(c);
    Parts p = parts_of(c);
    w->packed = packed;
    for (int i = 0; i < NPART; i++)
        linear_pack((float *)pack_of_block(c, w, &p, i), w->in_proj + (size_t)p.off[i] * c->D, c->D, p.n[i]);
    linear_pack((float *)pack_of_out(c, w), w->out_proj, c->E, c->D);
}

/* zx (blocked) = x @ in_proj^T + u, u:(M, K) in the layout of c->u_parts | NULL. */
static void in_proj_fwd(const Mamba2Cfg *c, const Mamba2W *w, float *zx, const float *x,
                        const float *u, size_t M) {
    const Parts p = parts_of(c);
    const int D = c->D;
    /* The injection is added to the full K-wide pre-activation: u's columns are first copied block
     * by block into zx, and the GEMMs then accumulate onto them (beta = 1), which costs no more
     * than writing (beta = 0). */
    if (u)
        for (int i = 0; i < NPART; i++) {
            size_t ld, o = u_off(c, &p, M, i, &ld);
            k_copy_rows(blk(zx, &p, M, i), (size_t)p.n[i], u + o, ld, M, (size_t)p.n[i], 0);
        }
    for (int i = 0; i < NPART; i++) /* block i (M, n_i) (+)= x (M, D) @ W[off_i .. off_i + n_i]^T */
        k_gemm_pb(0, 1, (int)M, p.n[i], D, 1.f, x, D, w->in_proj + (size_t)p.off[i] * D, D,
                  pack_of_block(c, w, &p, i), u ? 1.f : 0.f, blk(zx, &p, M, i), p.n[i]);
}

/* Backward of in_proj_fwd for a blocked gradient dzx: dx += sum_i dzx_i W_i, dW_i += dzx_i^T x,
 * du += dzx (in u's layout, c->u_parts). dx, dW, du may be NULL. */
static void in_proj_bwd(const Mamba2Cfg *c, const Mamba2W *w, float *dW, float *dx, float *du,
                        float *dzx, const float *x, size_t M) {
    const Parts p = parts_of(c);
    const int D = c->D;
    for (int i = 0; i < NPART; i++) {
        const float *g = blk(dzx, &p, M, i);
        size_t wo = (size_t)p.off[i] * D;
        if (dx)
            k_gemm_pb(0, 0, (int)M, D, p.n[i], 1.f, g, p.n[i], w->in_proj + wo, D,
                      linear_pack_dx(pack_of_block(c, w, &p, i), D, p.n[i]), 1.f, dx, D);
        if (dW) k_gemm(1, 0, p.n[i], D, (int)M, 1.f, g, p.n[i], x, D, 1.f, dW + wo, D);
    }
    if (!du) return;
    for (int i = 0; i < NPART; i++) {
        size_t ld, o = u_off(c, &p, M, i, &ld);
        k_copy_rows(du + o, ld, blk(dzx, &p, M, i), (size_t)p.n[i], M, (size_t)p.n[i], 1);
    }
}

/* The activations between in_proj and the scan, for M = B*T tokens. xc and xa are blocked as
 * the conv groups: xs (M, E) | Bm (M, N) | Cm (M, N), so xs, bm, cm point into xa. */
typedef struct {
    float *xc;  /* (M*C) conv output before silu (bwd only; fwd runs silu in place in xa) */
    float *xa;  /* (M*C) silu(conv) = xs | bm | cm */
    float *xs;  /* (M, E) = (B,T,H,P) scan input */
    float *bm;  /* (M, N) */
    float *cm;  /* (M, N) */
    float *A;   /* (H) -exp(A_log) */
    float *yn;  /* (M, E) gated-norm output = out_proj input */
} Front;

static size_t front_carve(const Mamba2Cfg *c, size_t M, int separate_xc, float *base, Front *f) {
    size_t off = 0;
    f->xa = take(base, &off, M * c->C);
    f->xc = separate_xc ? take(base, &off, M * c->C) : f->xa;
    f->xs = f->xa;
    f->bm = base ? f->xa + M * c->E : NULL;
    f->cm = base ? f->bm + M * c->N : NULL;
    f->A = take(base, &off, (size_t)c->H);
    f->yn = take(base, &off, M * c->E);
    return off;
}

/* Gradients of the backward. dxa = dxs | dbm | dcm is blocked like xa; dzx like zx (its zgate
 * block receives the gated norm's dz, its conv blocks the conv's dx, its dtraw block d(dtraw)).
 * The accumulating kernels' outputs are zeroed right before use. */
typedef struct {
    float *dyd;  /* (M, D) dy * drop_mask */
    float *dyn;  /* (M, E) */
    float *dys;  /* (M, E) */
    float *dxa;  /* (M*C) dxs | dbm | dcm */
    float *ddt;  /* (M, H) */
    float *dA;   /* (H) */
    float *dzx;  /* (M*K) blocked */
} Grads;

static size_t grads_carve(const Mamba2Cfg *c, size_t M, float *base, Grads *g) {
    size_t off = 0;
    g->dyd = take(base, &off, M * c->D);
    g->dyn = take(base, &off, M * c->E);
    g->dys = take(base, &off, M * c->E);
    g->dxa = take(base, &off, M * c->C);
    g->ddt = take(base, &off, M * c->H);
    g->dA = take(base, &off, (size_t)c->H);
    g->dzx = take(base, &off, M * c->K);
    return off;
}

/* The cache: zx (M*K, blocked) | ys (M,E) | rstd (M) | dt (M,H) | ssd saved. The forward without
 * a cache puts the first four in scratch (after the Front) and passes saved = NULL. dt is kept
 * (H floats a token) so the backward need not redo the scalar softplus. */
typedef struct {
    float *zx, *ys, *rstd, *dt, *saved;
} Keep;

static size_t keep_carve(const Mamba2Cfg *c, int B, int T, int with_saved, float *base, Keep *k) {
    size_t off = 0, M = (size_t)B * T;
    k->zx = take(base, &off, M * c->K);
    k->ys = take(base, &off, M * c->E);
    k->rstd = take(base, &off, M);
    k->dt = take(base, &off, M * c->H);
    k->saved = take(base, &off, with_saved ? k_ssd_saved_floats(B, T, c->H, c->P, c->N) : 0);
    return off;
}

size_t mamba2_cache_floats(const Mamba2Cfg *c, int B, int T) {
    check_cfg(c);
    Keep k;
    return keep_carve(c, B, T, 1, NULL, &k);
}

size_t mamba2_scratch_floats(const Mamba2Cfg *c, int B, int T) {
    check_cfg(c);
    size_t M = (size_t)B * T;
    Front f;
    Grads g;
    Keep k;
    size_t fwd = front_carve(c, M, 0, NULL, &f) + keep_carve(c, B, T, 0, NULL, &k);
    size_t bwd = front_carve(c, M, 1, NULL, &f) + grads_carve(c, M, NULL, &g);
    return fwd > bwd ? fwd : bwd;
}

size_t mamba2_state_floats(const Mamba2Cfg *c, int B) {
    check_cfg(c);
    return (size_t)B * c->C * c->W + (size_t)B * c->H * c->P * c->N;
}

/* dt = softplus(dtraw + dt_bias) for n tokens, dtraw:(n, H); A = -exp(A_log). */
static void dt_fwd(const Mamba2Cfg *c, const Mamba2W *w, float *dt, float *A, const float *dtraw,
                   size_t n) {
    const int H = c->H;
    k_softplus(dt, dtraw, w->dt_bias, (int)n, H); /* PyTorch F.softplus: beta 1, threshold 20 */
    for (int h = 0; h < H; h++) A[h] = -expf(w->A_log[h]);
}

/* Everything from the blocked zx to the scan inputs: softplus into dt (unless dt is NULL: the
 * backward reads the cached one), A, conv + silu per group. When f->xc != f->xa the pre-silu conv
 * output is kept for the backward. */
static void front_fwd(const Mamba2Cfg *c, const Mamba2W *w, const Front *f, float *zx, float *dt,
                      int B, int T) {
    const Parts p = parts_of(c);
    const size_t M = (size_t)B * T;
    if (dt) dt_fwd(c, w, dt, f->A, blk(zx, &p, M, PDT), M);
    else
        for (int h = 0; h < c->H; h++) f->A[h] = -expf(w->A_log[h]);
    /* xBC = silu(causalconv(xBC)), one depthwise conv and its silu per group x | B | C (conv
     * channels [off_i - E, off_i - E + n_i)); the pre-activation xc only where it is kept */
    for (int i = PX; i <= PC; i++) {
        size_t ch = (size_t)(p.off[i] - c->E);
        k_conv1d_silu_fwd(f->xc != f->xa ? f->xc + M * ch : NULL, f->xa + M * ch, blk(zx, &p, M, i),
                          w->conv_w + ch * c->W, w->conv_b + ch, B, T, p.n[i], c->W);
    }
}

/* Prefill: conv_state (B,C,W) = the last W pre-conv xBC vectors, oldest first, zero-padded on
 * the left when T < W (the same window k_conv1d_step would hold after T steps). */
static void fill_conv_state(const Mamba2Cfg *c, float *cs, float *zx, int B, int T) {
    const Parts p = parts_of(c);
    const int C = c->C, W = c->W;
    const size_t M = (size_t)B * T;
    for (int b = 0; b < B; b++)
        for (int i = PX; i <= PC; i++) {
            const float *src = blk(zx, &p, M, i); /* (M, n_i) */
            int ch0 = p.off[i] - c->E;
            for (int j = 0; j < p.n[i]; j++)
                for (int k = 0; k < W; k++) {
                    int t = T - W + k;
                    cs[((size_t)b * C + ch0 + j) * W + k] =
                        t >= 0 ? src[((size_t)b * T + t) * p.n[i] + j] : 0.f;
                }
        }
}

/* y[b,t,:] *= mask[b,:]  (variational dropout: one mask per sequence, shared over time) */
static void apply_mask(float *y, const float *src, const float *mask, int B, int T, int D) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *yr = y + ((size_t)b * T + t) * D;
            const float *sr = src + ((size_t)b * T + t) * D;
            for (int d = 0; d < D; d++) yr[d] = sr[d] * mask[(size_t)b * D + d];
        }
}

void mamba2_fwd(const Mamba2Cfg *c, const Mamba2W *w, float *y, const float *x, const float *u,
                const float *drop_mask, float *cache, float *scratch, float *state_out, int B,
                int T) {
    check_cfg(c);
    CHECK(w && y && x && scratch && B > 0 && T > 0, "mamba2_fwd: bad arguments (B=%d T=%d)", B, T);
    const size_t M = (size_t)B * T;
    Front f;
    Keep k;
    size_t off = front_carve(c, M, 0, scratch, &f);
    /* Without a cache, zx/ys/rstd live in scratch after the Front and no scan state is saved. */
    if (cache) keep_carve(c, B, T, 1, cache, &k);
    else keep_carve(c, B, T, 0, scratch + off, &k);

    /* zx = in_proj(x) + u, blocked */
    in_proj_fwd(c, w, k.zx, x, u, M);
    front_fwd(c, w, &f, k.zx, k.dt, B, T);

    /* SSD scan with the Dskip term; hT goes straight into the prefill ssm_state. */
    float *hT = state_out ? state_out + (size_t)B * c->C * c->W : NULL;
    k_ssd_fwd(k.ys, cache ? k.saved : NULL, hT, f.xs, k.dt, f.A, f.bm, f.cm, w->Dskip, NULL, B, T,
              c->H, c->P, c->N);
    k_gated_rmsnorm_fwd(f.yn, cache ? k.rstd : NULL, k.ys, k.zx /* zgate block */, w->norm_w, (int)M,
                        c->E, c->eps);
    linear_fwd_pk(y, f.yn, w->out_proj, pack_of_out(c, w), NULL, (int)M, c->E, c->D);
    if (drop_mask) apply_mask(y, y, drop_mask, B, T, c->D);
    if (state_out) fill_conv_state(c, state_out, k.zx, B, T);
}

/* The dtraw block of dzx: d(dtraw) = ddt * sigmoid(dtraw + dt_bias); ddt_bias sums it over tokens
 * in double, token order, a few heads at a time (the same sums as one head at a time). */
static void dtraw_bwd(const Mamba2Cfg *c, const Mamba2W *w, float *ddt_bias, float *ddtraw,
                      const float *ddt, const float *dtraw, size_t M) {
    enum { HB = 64 };
    const int H = c->H;
    k_sigmoid(ddtraw, dtraw, w->dt_bias, (int)M, H); /* ddtraw holds the sigmoid until scaled */
    for (int h0 = 0; h0 < H; h0 += HB) {
        int nh = H - h0 < HB ? H - h0 : HB;
        double acc[HB] = {0};
        for (size_t m = 0; m < M; m++)
            for (int j = 0; j < nh; j++) {
                size_t i = m * H + h0 + j;
                float g = ddt[i] * ddtraw[i];
                ddtraw[i] = g;
                acc[j] += g;
            }
        if (ddt_bias)
            for (int j = 0; j < nh; j++) ddt_bias[h0 + j] += (float)acc[j];
    }
}

/* dxa (blocked dxs | dbm | dcm) back through silu, in place (dxa is dead afterwards: a multiply
 * where a cleared buffer and an accumulating silu backward wrote the same values), and through the
 * three group convs into the conv blocks of dzx. */
static void conv_bwd(const Mamba2Cfg *c, const Mamba2W *w, const Mamba2W *dW, const Front *f,
                     const Grads *g, const float *zx, int B, int T) {
    const Parts p = parts_of(c);
    const size_t M = (size_t)B * T;
    float *dxc = g->dxa;
    k_mul_dsilu(dxc, f->xc, M * c->C);
    k_zero(g->dzx + M * c->E, M * c->C); /* the x | B | C blocks */
    for (int i = PX; i <= PC; i++) {
        size_t ch = (size_t)(p.off[i] - c->E), o = M * (size_t)p.off[i];
        k_conv1d_bwd(g->dzx + o, dW && dW->conv_w ? dW->conv_w + ch * c->W : NULL,
                     dW && dW->conv_b ? dW->conv_b + ch : NULL, dxc + M * ch, zx + o,
                     w->conv_w + ch * c->W, B, T, p.n[i], c->W);
    }
}

void mamba2_bwd(const Mamba2Cfg *c, const Mamba2W *w, Mamba2W *dW, float *dx, float *du,
                const float *dy, const float *x, const float *u, const float *drop_mask,
                const float *cache, float *scratch, int B, int T) {
    check_cfg(c);
    CHECK(w && dy && x && cache && scratch && B > 0 && T > 0,
          "mamba2_bwd: bad arguments (B=%d T=%d; cache required)", B, T);
    (void)u; /* u enters zx additively: its effect is already in the cached zx */
    if (!dW && !dx && !du) return;
    const size_t M = (size_t)B * T;
    const int E = c->E, D = c->D, N = c->N, H = c->H;
    const Parts p = parts_of(c);
    Front f;
    Grads g;
    Keep k;
    size_t off = front_carve(c, M, 1, scratch, &f);
    grads_carve(c, M, scratch + off, &g);
    keep_carve(c, B, T, 1, (float *)cache, &k); /* read-only use below */

    /* Recompute the activations the cache does not hold (yn only feeds dW of out_proj). */
    front_fwd(c, w, &f, k.zx, NULL, B, T);
    int want_dwo = dW && dW->out_proj;
    if (want_dwo) k_gated_rmsnorm_fwd(f.yn, NULL, k.ys, k.zx, w->norm_w, (int)M, E, c->eps);

    /* out = out_proj(yn) * mask:  dyn = dy' Wout (written, no zeroing);  dWout += dy'^T yn */
    const float *dyo = dy;
    if (drop_mask) {
        apply_mask(g.dyd, dy, drop_mask, B, T, D);
        dyo = g.dyd;
    }
    k_gemm_pb(0, 0, (int)M, E, D, 1.f, dyo, D, w->out_proj, E, linear_pack_dx(pack_of_out(c, w), E, D), 0.f, g.dyn,
              E);
    if (want_dwo) k_linear_bwd(NULL, dW->out_proj, NULL, dyo, f.yn, w->out_proj, (int)M, E, D);

    /* yn = GatedRMSNorm(ys, zgate): dzgate goes straight into dzx's zgate block */
    float *dzg = blk(g.dzx, &p, M, PZ);
    k_zero(g.dys, M * E);
    k_zero(dzg, M * E);
    k_gated_rmsnorm_bwd(g.dys, dzg, dW ? dW->norm_w : NULL, g.dyn, k.ys, k.zx, w->norm_w, k.rstd,
                        (int)M, E);

    /* ys = SSD(xs, dt, A, Bm, Cm) + Dskip xs */
    k_zero(g.dxa, M * c->C);
    k_zero(g.ddt, M * H);
    k_zero(g.dA, H);
    float *dxs = g.dxa, *dbm = g.dxa + M * E, *dcm = dbm + M * N;
    k_ssd_bwd(dxs, g.ddt, g.dA, dbm, dcm, dW ? dW->Dskip : NULL, NULL, g.dys, NULL, f.xs, k.dt, f.A,
              f.bm, f.cm, w->Dskip, NULL, k.saved, B, T, H, c->P, N);
    if (dW && dW->A_log) /* A = -exp(A_log): dA_log = dA * A */
        for (int h = 0; h < H; h++) dW->A_log[h] += g.dA[h] * f.A[h];

    /* dt = softplus(dtraw + dt_bias); xBC = silu(conv(xBC)): fill dzx's dtraw and conv blocks */
    dtraw_bwd(c, w, dW ? dW->dt_bias : NULL, blk(g.dzx, &p, M, PDT), g.ddt, blk(k.zx, &p, M, PDT), M);
    conv_bwd(c, w, dW, &f, &g, k.zx, B, T);

    /* zx = in_proj(x) + u */
    in_proj_bwd(c, w, dW ? dW->in_proj : NULL, dx, du, g.dzx, x, M);
}

/* ---- single-token step ------------------------------------------------------------------ */

/* The conv state is (B, C, W) over all C channels, so the step assembles the (B, C) row-major
 * xBC from zx's blocks and splits the conv output back (B rows: negligible copies). */
typedef struct {
    float *zx;  /* (B*K) blocked */
    float *xbc; /* (B, C) pre-conv xBC, row-major */
    float *xr;  /* (B, C) silu(conv), row-major */
    float *ys;  /* (B, E) */
    float *dt;  /* (B, H) */
} StepBufs;

static size_t step_carve(const Mamba2Cfg *c, int B, float *base, Front *f, StepBufs *s) {
    size_t off = front_carve(c, (size_t)B, 0, base, f);
    s->zx = take(base, &off, (size_t)B * c->K);
    s->xbc = take(base, &off, (size_t)B * c->C);
    s->xr = take(base, &off, (size_t)B * c->C);
    s->ys = take(base, &off, (size_t)B * c->E);
    s->dt = take(base, &off, (size_t)B * c->H);
    return off;
}

size_t mamba2_step_scratch_floats(const Mamba2Cfg *c, int B) {
    check_cfg(c);
    Front f;
    StepBufs s;
    return step_carve(c, B, NULL, &f, &s);
}

void mamba2_step(const Mamba2Cfg *c, const Mamba2W *w, float *y, const float *x, const float *u,
                 const float *state_in, float *state_out, float *scratch, int B) {
    check_cfg(c);
    CHECK(w && y && x && state_in && scratch && B > 0, "mamba2_step: bad arguments (B=%d)", B);
    const int E = c->E, C = c->C, H = c->H;
    const Parts p = parts_of(c);
    Front f;
    StepBufs s;
    step_carve(c, B, scratch, &f, &s);
    const size_t conv_n = (size_t)B * C * c->W, nb = (size_t)B;

    /* zx = in_proj(x_t) + u_t (blocked); dt = softplus(dtraw + dt_bias); gather xBC rows */
    in_proj_fwd(c, w, s.zx, x, u, nb);
    dt_fwd(c, w, s.dt, f.A, blk(s.zx, &p, nb, PDT), nb);
    for (int i = PX; i <= PC; i++)
        for (int b = 0; b < B; b++)
            memcpy(s.xbc + (size_t)b * C + (p.off[i] - E), blk(s.zx, &p, nb, i) + (size_t)b * p.n[i],
                   sizeof(float) * p.n[i]);

    /* cs' = shift(conv_state) with xBC last; xBC = silu(sum_k cs'[.,k] w[.,k] + b) */
    k_conv1d_step(s.xr, state_out, state_in, s.xbc, w->conv_w, w->conv_b, B, C, c->W);
    k_silu_fwd(s.xr, s.xr, (size_t)B * C);
    for (int i = PX; i <= PC; i++) /* split into the blocked xs | bm | cm */
        for (int b = 0; b < B; b++)
            memcpy(f.xa + nb * (p.off[i] - E) + (size_t)b * p.n[i], s.xr + (size_t)b * C + (p.off[i] - E),
                   sizeof(float) * p.n[i]);

    /* S' = exp(dt A) S + dt xs (x) Bm ;  y = S' Cm + Dskip xs ; gated norm ; out_proj */
    k_ssd_step(s.ys, state_out ? state_out + conv_n : NULL, state_in + conv_n, f.xs, s.dt, f.A,
               f.bm, f.cm, w->Dskip, B, H, c->P, c->N);
    k_gated_rmsnorm_fwd(f.yn, NULL, s.ys, blk(s.zx, &p, nb, PZ), w->norm_w, B, E, c->eps);
    linear_fwd_pk(y, f.yn, w->out_proj, pack_of_out(c, w), NULL, B, E, c->D);
}
