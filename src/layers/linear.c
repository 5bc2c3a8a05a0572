/* linear.c: Linear layer and its weight normalisation (spec implicit-lm §6); see linear.h.
 * Thin wrappers over k_linear_* and k_weightnorm_*: this file only routes pointers and options. */
#include "linear.h"

#include <math.h>

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
