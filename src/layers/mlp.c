/* mlp.c: SwiGLU and gated MLPs (spec implicit-lm §1.6, dropout §1.7); see mlp.h.
 *
 * Forward, with M = B*T rows:  a = x Wa^T, b = x Wb^T (both (M,h)),  s = silu(a) * b,
 * s *= mask_h,  y = s fc2^T,  y *= mask_o.
 * Backward:  gy = dy * mask_o;  gs = (gy fc2) * mask_h;  dfc2 += gy^T s;
 *            (ga, gb) = swiglu_bwd(gs);  dx += ga Wa + gb Wb;  dWa += ga^T x;  dWb += gb^T x.
 * s is not cached: one silu per element is cheaper than M*h floats of memory per layer.
 */
#include "mlp.h"

#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "linear.h"

int mlp_hidden(MlpKind kind, int d_inner) {
    if (d_inner <= 0) return 0;
    switch (kind) {
    case MLP_SWIGLU: return 2 * d_inner / 3;          /* llama_mlp, multiple_of = 1 */
    case MLP_GATED: return (d_inner + 127) / 128 * 128; /* gated_mlp: round up to 128 */
    default: return 0;
    }
}

MlpCfg mlp_cfg(MlpKind kind, int D, int d_inner) {
    MlpCfg c = {kind, D, mlp_hidden(kind, d_inner)};
    if (c.h == 0) c.kind = MLP_NONE;
    return c;
}

size_t mlp_param_floats(const MlpCfg *c) {
    if (c->kind == MLP_NONE) return 0;
    /* W1 + W3 + fc2, or fc1 (2h) + fc2: the same count for both kinds */
    return 3 * (size_t)c->h * (size_t)c->D;
}

size_t mlp_cache_floats(const MlpCfg *c, int B, int T) {
    if (c->kind == MLP_NONE) return 0;
    return 2 * (size_t)B * (size_t)T * (size_t)c->h;
}

size_t mlp_scratch_floats(const MlpCfg *c, int B, int T) {
    if (c->kind == MLP_NONE) return 0;
    size_t M = (size_t)B * (size_t)T;
    /* backward: gy (M,D) + s, gs, ga, gb (M,h each); the forward needs at most 3 (M,h) */
    return M * (size_t)c->D + 4 * M * (size_t)c->h;
}

/* The two input projections: a ("gate", goes through silu) and b (the linear branch).
 * For the gated MLP these are row blocks of fc1, so dW blocks are row blocks of dW->fc1 too. */
static void input_weights(const MlpCfg *c, const MlpW *w, float **Wa, float **Wb) {
    if (c->kind == MLP_SWIGLU) {
        *Wa = w->w1;
        *Wb = w->w3;
    } else {
        *Wa = w->fc1 ? w->fc1 + (size_t)c->h * (size_t)c->D : NULL;
        *Wb = w->fc1;
    }
}

/* The pack (mlp_pack): gate projection | linear branch | fc2, each linear_pack's two forms. */
enum { PK_A, PK_B, PK_FC2 };

static const float *pack_of(const MlpCfg *c, const MlpW *w, int which) {
    if (!w->packed) return NULL;
    size_t in = linear_pack_floats(c->D, c->h);
    return w->packed + (size_t)which * in;
}

size_t mlp_pack_floats(const MlpCfg *c) {
    if (c->kind == MLP_NONE) return 0;
    return 2 * linear_pack_floats(c->D, c->h) + linear_pack_floats(c->h, c->D);
}

void mlp_pack(const MlpCfg *c, MlpW *w, float *packed) {
    if (c->kind == MLP_NONE) return;
    float *Wa, *Wb;
    input_weights(c, w, &Wa, &Wb);
    w->packed = packed;
    linear_pack((float *)pack_of(c, w, PK_A), Wa, c->D, c->h);
    linear_pack((float *)pack_of(c, w, PK_B), Wb, c->D, c->h);
    linear_pack((float *)pack_of(c, w, PK_FC2), w->fc2, c->h, c->D);
}

/* x[b, t, j] *= mask[b, j] for x:(B,T,n)  mask:(B,n) */
static void apply_mask(float *x, const float *mask, int B, int T, int n) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = x + ((size_t)b * T + t) * (size_t)n;
            const float *m = mask + (size_t)b * n;
            for (int j = 0; j < n; j++) row[j] *= m[j];
        }
}

static void check_cfg(const MlpCfg *c, const MlpW *w) {
    CHECK(c && w, "mlp: NULL cfg or weights");
    CHECK(c->kind == MLP_SWIGLU || c->kind == MLP_GATED, "mlp: kind %d has no MLP", (int)c->kind);
    CHECK(c->D > 0 && c->h > 0, "mlp: bad dims D=%d h=%d", c->D, c->h);
    float *Wa, *Wb;
    input_weights(c, w, &Wa, &Wb);
    CHECK(Wa && Wb && w->fc2, "mlp: missing weights for kind %d", (int)c->kind);
}

void mlp_fwd(const MlpCfg *c, const MlpW *w, float *y, const float *x, const float *mask_h,
             const float *mask_o, float *cache, float *scratch, int B, int T) {
    check_cfg(c, w);
    CHECK(y && x && scratch && y != x, "mlp_fwd: NULL or aliased buffer");
    const int D = c->D, h = c->h, M = B * T;
    const size_t Mh = (size_t)M * h;
    float *Wa, *Wb;
    input_weights(c, w, &Wa, &Wb);
    /* a, b live in the cache when a backward follows, else in scratch */
    float *a = cache ? cache : scratch, *bb = a + Mh;
    float *s = cache ? scratch : scratch + 2 * Mh;
    linear_fwd_pk(a, x, Wa, pack_of(c, w, PK_A), NULL, M, D, h);
    linear_fwd_pk(bb, x, Wb, pack_of(c, w, PK_B), NULL, M, D, h);
    k_swiglu_fwd(s, a, bb, Mh);
    if (mask_h) apply_mask(s, mask_h, B, T, h);
    linear_fwd_pk(y, s, w->fc2, pack_of(c, w, PK_FC2), NULL, M, h, D);
    if (mask_o) apply_mask(y, mask_o, B, T, D);
}

void mlp_bwd(const MlpCfg *c, const MlpW *w, MlpW *dW, float *dx, const float *dy, const float *x,
             const float *mask_h, const float *mask_o, const float *cache, float *scratch, int B,
             int T) {
    check_cfg(c, w);
    MlpW none = {0};
    if (!dW) dW = &none;
    float *dWa, *dWb, *Wa, *Wb;
    input_weights(c, dW, &dWa, &dWb);
    input_weights(c, w, &Wa, &Wb);
    if (!dx && !dWa && !dWb && !dW->fc2) return;
    CHECK(dy && x && cache && scratch, "mlp_bwd: NULL buffer (a backward needs the cache)");
    const int D = c->D, h = c->h, M = B * T;
    const size_t Mh = (size_t)M * h;
    const float *a = cache, *bb = cache + Mh;
    float *gy = scratch, *s = gy + (size_t)M * D, *gs = s + Mh, *ga = gs + Mh, *gb = ga + Mh;

    /* through the output mask and fc2 */
    const float *gyo = dy;
    if (mask_o) {
        k_copy_rows(gy, (size_t)M * D, dy, (size_t)M * D, 1, (size_t)M * D, 0);
        apply_mask(gy, mask_o, B, T, D);
        gyo = gy;
    }
    if (dW->fc2) { /* dfc2 needs s, the (masked) hidden activation: recompute it */
        k_swiglu_fwd(s, a, bb, Mh);
        if (mask_h) apply_mask(s, mask_h, B, T, h);
        k_linear_bwd(NULL, dW->fc2, NULL, gyo, s, w->fc2, M, h, D);
    }
    if (!dx && !dWa && !dWb) return;
    k_zero(gs, Mh);
    linear_bwd_pk(gs, NULL, NULL, gyo, s, w->fc2, pack_of(c, w, PK_FC2), M, h, D); /* x unused without dW */
    if (mask_h) apply_mask(gs, mask_h, B, T, h);

    /* through s = silu(a) * b, then the two input projections */
    k_zero(ga, 2 * Mh); /* ga and gb are adjacent */
    k_swiglu_bwd(ga, gb, gs, a, bb, Mh);
    if (dx || dWa) linear_bwd_pk(dx, dWa, NULL, ga, x, Wa, pack_of(c, w, PK_A), M, D, h);
    if (dx || dWb) linear_bwd_pk(dx, dWb, NULL, gb, x, Wb, pack_of(c, w, PK_B), M, D, h);
}
