/* broyden.c: Broyden's ("good") method for fp_solve, after torchdeq's broyden_solver (spec
 * implicit-lm §3.1 "Other solver choices"), limited to a fixed history and made robust.
 *
 * It solves g(x) = f(x) − x = 0 per sample with a low-rank estimate B of the inverse Jacobian of g:
 * B = −I + Σ_i u_i v_iᵀ (so the first step, −B g = g, is a Picard step), x ← x − B g, and after
 * each step the rank-one update that makes B map Δg onto Δx while changing it least along Δxᵀ B:
 *     v = Bᵀ Δx,   u = (Δx − B Δg) / (vᵀ Δg).
 * Every dot product is per sample (torchdeq's einsum 'bi,bi->b'), so samples never interact and a
 * batch gives each sample exactly the iterates it would get alone.
 *
 * Differences from torchdeq, each for robustness or bounded memory:
 *  - the history keeps the last `broyden_m` updates (torchdeq's LBFGS_thres, which defaults to
 *    max_iter: memory would grow with the iteration count);
 *  - an update whose denominator vᵀΔg is zero or not finite is dropped (torchdeq zeroes NaNs only,
 *    so an inf survives);
 *  - restart: when a sample's residual exceeds RESTART × its lowest so far, or its next step is not
 *    finite, that sample's history is cleared and it goes back to its best f-output (the point a
 *    Picard step from the lowest-residual iterate reaches). The worst case is then Picard from the
 *    best point, never a blow-up;
 *  - like our other solvers (and unlike torchdeq's broyden, which returns the iterate x), the
 *    returned value is the f-output of the lowest-residual evaluation, so z* = f(x) holds exactly
 *    for what the caller gets; the residuals and the stop rule are torchdeq's.
 * No line search (torchdeq's default `ls=False`), no damping (`tau` is not used).
 */
#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_impl.h"

/* Residual growth (against the sample's lowest) that triggers a restart. Broyden's residuals are
 * not monotone; a spike of a few × is normal early on, two orders of magnitude is not. */
#define RESTART 100.0

static double dot(const float *a, const float *b, size_t d) {
    double s = 0.0;
    for (size_t e = 0; e < d; e++) s += (double)a[e] * (double)b[e];
    return s;
}

/* out = −in + Σ_i u_i (v_i·in) (transpose = 0: B·in) or −in + Σ_i v_i (u_i·in) (transpose = 1:
 * Bᵀ·in) over one sample: U, V hold nh slots of n floats, the sample at offset off. out may alias
 * in (the coefficients are taken first). */
static void apply_b(float *out, const float *in, const float *U, const float *V, size_t n, size_t off,
                    size_t d, int nh, int transpose) {
    double c[FP_BROYDEN_MAX_M];
    const float *P = transpose ? U : V, *Q = transpose ? V : U;
    for (int i = 0; i < nh; i++) c[i] = dot(P + (size_t)i * n + off, in + off, d);
    for (size_t e = off; e < off + d; e++) {
        double acc = -(double)in[e];
        for (int i = 0; i < nh; i++) acc += (double)Q[(size_t)i * n + e] * c[i];
        out[e] = (float)acc;
    }
}

static int all_finite(const float *a, size_t d) {
    for (size_t e = 0; e < d; e++)
        if (!isfinite(a[e])) return 0;
    return 1;
}

size_t fp_broyden_scratch(const FpOpts *o, size_t n, int nb) {
    CHECK(o->broyden_m >= 1 && o->broyden_m <= FP_BROYDEN_MAX_M, "broyden_m=%d outside [1, %d]", o->broyden_m,
          FP_BROYDEN_MAX_M);
    return (2 * (size_t)o->broyden_m + 5) * n + fp_track_floats(nb);
}

/* One Broyden step of the samples [b0, b1) (k_foreach items): each sample owns its d floats of
 * every buffer, so samples never share a write. */
typedef struct {
    float *x, *fx, *g, *up, *w, *U, *V, *z;
    const double *low_abs;
    size_t n, d;
    int mm, nh, nh_new, slot, first;
} BroydenStep;

static void broyden_samples(void *ctx, long b0, long b1) {
    const BroydenStep *a = ctx;
    float *x = a->x, *fx = a->fx, *g = a->g, *up = a->up, *w = a->w, *U = a->U, *V = a->V, *z = a->z;
    size_t n = a->n, d = a->d;
    int mm = a->mm, nh = a->nh, nh_new = a->nh_new, slot = a->slot, first = a->first;
    for (long b = b0; b < b1; b++) {
        size_t off = (size_t)b * d;
        float *xb = x + off, *fb = fx + off, *gb = g + off, *ub = up + off, *wb = w + off;
        for (size_t e = 0; e < d; e++) fb[e] -= xb[e];   /* fx → g(x) */
        double res = sqrt(dot(fb, fb, d));
        if (!first) {
            /* rank-one update from Δx = up, Δg = g(x) − g_prev, using the history before the
             * slot it overwrites (torchdeq computes with part_Us, then stores) */
            for (size_t e = 0; e < d; e++) gb[e] = fb[e] - gb[e];
            apply_b(w, up, U, V, n, off, d, nh, 1);   /* w = Bᵀ Δx */
            double den = dot(wb, gb, d);
            apply_b(g, g, U, V, n, off, d, nh, 0);    /* g = B Δg */
            float *us = U + (size_t)slot * n + off, *vs = V + (size_t)slot * n + off;
            if (den != 0.0 && isfinite(den)) {
                for (size_t e = 0; e < d; e++) {
                    us[e] = (float)(((double)ub[e] - (double)gb[e]) / den);
                    vs[e] = wb[e];
                }
                if (!all_finite(us, d)) memset(us, 0, d * sizeof(float));
            } else {
                memset(us, 0, d * sizeof(float));   /* a zero u drops the update */
                memset(vs, 0, d * sizeof(float));
            }
        }
        memcpy(gb, fb, d * sizeof(float));
        apply_b(up, g, U, V, n, off, d, nh_new, 0);   /* up = B g, the step is −B g */
        for (size_t e = 0; e < d; e++) ub[e] = -ub[e];
        if (res > RESTART * a->low_abs[b] || !all_finite(ub, d)) {
            /* restart this sample at its best f-output with B = −I: clear its history, take no
             * step now (the next evaluation is at the restart point; Δx = 0 drops the update) */
            for (int i = 0; i < mm; i++) {
                memset(U + (size_t)i * n + off, 0, d * sizeof(float));
                memset(V + (size_t)i * n + off, 0, d * sizeof(float));
            }
            memcpy(xb, z + off, d * sizeof(float));
            memset(ub, 0, d * sizeof(float));
        }
        for (size_t e = 0; e < d; e++) xb[e] += ub[e];
    }
}

int fp_broyden(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    size_t n = m->n, d = n / (size_t)m->nb;
    int mm = o->broyden_m, nb = m->nb;
    CHECK(mm >= 1 && mm <= FP_BROYDEN_MAX_M, "broyden_m=%d outside [1, %d]", mm, FP_BROYDEN_MAX_M);
    /* U, V: mm slots of n; x the iterate, fx its image then g(x); g the previous g then Δg;
     * up the step (= Δx once taken); w the new v */
    float *U = scratch, *V = U + (size_t)mm * n, *x = V + (size_t)mm * n;
    float *fx = x + n, *g = fx + n, *up = g + n, *w = up + n;
    FpTrack t;
    fp_track_init(&t, m, o->stop, w + n);
    memcpy(x, z, n * sizeof(float));   /* z is now the per-sample best, starting at z0 */
    int iters = 0, converged = 0, nh = 0, slot = 0;
    for (int k = 1; k <= o->max_iter; k++) {
        m->f(m->ctx, fx, x);
        int done = fp_track_eval(&t, z, fx, x, k, o->tol, st);
        if (done < 0) return IM_ENUM;
        iters = k;
        if (done) {
            converged = 1;
            break;
        }
        if (k == o->max_iter) break;   /* no evaluation left for the step */
        int first = k == 1, nh_new = first ? 0 : (nh < mm ? nh + 1 : mm);
        BroydenStep a = {x, fx, g, up, w, U, V, z, t.low_abs, n, d, mm, nh, nh_new, slot, first};
        k_foreach(nb, (double)d * FP_NS_PER_FLOAT, broyden_samples, &a);
        if (!first) {
            nh = nh_new;
            slot = (slot + 1) % mm;
        }
    }
    fp_track_stats(&t, st, iters, converged);
    return IM_OK;
}
