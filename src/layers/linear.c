/* linear.c: Linear layer and its weight normalisation (spec implicit-lm §6); see linear.h.
 * Thin wrappers over k_linear_* and k_weightnorm_*: this file only routes pointers and options. */
#include "linear.h"

#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void linear_fwd(const LinearW *w, float *y, const float *x, int M, int C, int OC) {
    CHECK(w && w->W && y && x, "linear_fwd: NULL weight or buffer");
    CHECK(M >= 0 && C > 0 && OC > 0, "linear_fwd: bad dims M=%d C=%d OC=%d", M, C, OC);
    k_linear_fwd(y, x, w->W, w->b, M, C, OC);
}

void linear_bwd(const LinearW *w, LinearW *dw, float *dx, const float *dy, const float *x,
                int M, int C, int OC) {
    CHECK(w && w->W && dy && x, "linear_bwd: NULL weight or buffer");
    float *dW = dw ? dw->W : NULL;
    /* a bias gradient is only meaningful when the layer has a bias */
    float *db = (dw && w->b) ? dw->b : NULL;
    if (!dx && !dW && !db) return;
    k_linear_bwd(dx, dW, db, dy, x, w->W, M, C, OC);
}

size_t linear_pack_floats(int C, int OC) { return k_gemm_pack_floats(OC, C) + k_gemm_pack_floats(C, OC); }

void linear_pack(float *packed, const float *W, int C, int OC) {
    k_gemm_pack_b(packed, 1, OC, C, W, C);                             /* op(B) = W^T (C, OC) */
    k_gemm_pack_b(packed + k_gemm_pack_floats(OC, C), 0, C, OC, W, C); /* op(B) = W (OC, C) */
}

const float *linear_pack_dx(const float *packed, int C, int OC) {
    return packed ? packed + k_gemm_pack_floats(OC, C) : NULL;
}

void linear_fwd_pk(float *y, const float *x, const float *W, const float *packed, const float *b, int M, int C,
                   int OC) {
    if (!packed) {
        k_linear_fwd(y, x, W, b, M, C, OC);
        return;
    }
    if (b) /* start every row at the bias and let the product accumulate onto it (as k_linear_fwd) */
        for (int i = 0; i < M; i++) memcpy(y + (size_t)i * OC, b, (size_t)OC * sizeof(float));
    k_gemm_pb(0, 1, M, OC, C, 1.0f, x, C, W, C, packed, b ? 1.0f : 0.0f, y, OC);
}

void linear_bwd_pk(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
                   const float *packed, int M, int C, int OC) {
    if (!packed) {
        k_linear_bwd(dx, dW, db, dy, x, W, M, C, OC);
        return;
    }
    if (dx) k_gemm_pb(0, 0, M, C, OC, 1.0f, dy, OC, W, C, linear_pack_dx(packed, C, OC), 1.0f, dx, C);
    if (dW || db) k_linear_bwd(NULL, dW, db, dy, x, W, M, C, OC);
}

/* The g actually fed to the kernels: NULL selects the s_i = target path. */
static const float *wn_scale(const LinearW *w, const WnOpts *o) {
    if (o->no_scale) return NULL;
    CHECK(w->g, "weight norm: g is NULL but no_scale is off");
    return w->g;
}

void linear_wn_refresh(const LinearW *w, const WnOpts *o, int OC, int C) {
    CHECK(w && o && w->W && w->v, "linear_wn_refresh: needs W and v");
    k_weightnorm_fwd(w->W, wn_scale(w, o), w->v, OC, C, o->target, o->clip);
}

/* Called once per model backward, after every fixed-point / phantom step has accumulated into
 * dw->W: the map dW -> (dg, dv) is linear, so applying it once to the sum is exact. */
void linear_wn_bwd(const LinearW *w, const LinearW *dw, const WnOpts *o, int OC, int C) {
    CHECK(w && dw && o && w->v && dw->W, "linear_wn_bwd: needs v and the accumulated dW");
    float *dg = o->no_scale ? NULL : dw->g;
    if (!dg && !dw->v) return;
    k_weightnorm_bwd(dg, dw->v, dw->W, wn_scale(w, o), w->v, OC, C, o->target, o->clip);
}

void linear_wn_init(const LinearW *w, const WnOpts *o, int OC, int C) {
    CHECK(w && o && w->v, "linear_wn_init: needs v");
    if (!o->no_scale) {
        CHECK(w->g, "linear_wn_init: needs g");
        /* torchdeq initialises g to the row norms so the effective weight starts equal to v */
        for (int i = 0; i < OC; i++)
            w->g[i] = (float)sqrt(k_sumsq(w->v + (size_t)i * C, (size_t)C));
    }
    if (w->W) linear_wn_refresh(w, o, OC, C);
}
