/* fp_track.c: the per-sample residual bookkeeping every solver shares (fp_impl.h): torchdeq's
 * update_state, the stop rule and the statistics. Kept apart from the solvers so that fp.c
 * (Picard, the evaluation loop, the adjoint), anderson.c and broyden.c each call down into it and
 * never into each other.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_impl.h"

size_t fp_track_floats(int nb) { return 8 * (size_t)nb + 2; }

int fp_nonfinite(int iter) {
    return err_set(IM_ENUM, "fixed-point solve: f produced NaN/inf at iteration %d", iter);
}

/* ---- per-sample residual bookkeeping (torchdeq update_state) ------------------------------ */

void fp_track_init(FpTrack *t, const FpMap *m, FpStop stop, float *mem) {
    t->nb = m->nb;
    t->d = m->n / (size_t)m->nb;
    t->stop = stop;
    size_t nb = (size_t)m->nb;
    t->step_abs = mem;
    t->step_rel = mem + nb;
    /* the doubles start at the first 8-byte boundary after the steps (floats are 4-aligned,
     * so at most one float of the 2 spare ones is skipped) */
    uintptr_t at = (uintptr_t)(mem + 2 * nb);
    at = (at + 7) & ~(uintptr_t)7;
    t->low_abs = (double *)at;
    t->low_rel = t->low_abs + nb;
    t->res = t->low_rel + nb;
    for (int b = 0; b < m->nb; b++) {
        /* torchdeq init_solver_info: init_loss 1e8, step 0 */
        t->low_abs[b] = t->low_rel[b] = 1e8;
        t->step_abs[b] = t->step_rel[b] = 0.0f;
    }
}

/* The samples [b0, b1) of fp_track_update (k_foreach items): each writes only its own entries. */
typedef struct { FpTrack *t; float *best; const float *fx, *x; int step; } TrackStep;

static void track_samples(void *ctx, long b0, long b1) {
    const TrackStep *a = ctx;
    FpTrack *t = a->t;
    const float *fx = a->fx, *x = a->x;
    float *best = a->best;
    int step = a->step;
    size_t d = t->d;
    for (long b = b0; b < b1; b++) {
        const float *fb = fx + (size_t)b * d, *xb = x + (size_t)b * d;
        double ss[2];
        k_resid_sumsq(fb, xb, d, ss);
        double ss_d = ss[0], ss_f = ss[1];
        /* abs = ‖fx_b − x_b‖₂, rel = abs / (‖fx_b‖₂ + 1e-9), both in double. A NaN or inf anywhere
         * in fx_b shows up here, so this is also the solvers' NaN check, at no extra pass. */
        double res_abs = sqrt(ss_d), res_rel = res_abs / (sqrt(ss_f) + 1e-9);
        if (!isfinite(res_abs) || !isfinite(res_rel)) {
            t->res[b] = NAN;
            continue;
        }
        t->res[b] = t->stop == FP_STOP_REL ? res_rel : res_abs;
        /* each mode keeps its own lowest and step; only the stop mode picks the returned value */
        /* strict <, as torchdeq: on a tie the earlier step is kept */
        int lower_abs = res_abs < t->low_abs[b], lower_rel = res_rel < t->low_rel[b];
        if (lower_abs) {
            t->low_abs[b] = res_abs;
            t->step_abs[b] = (float)step;
        }
        if (lower_rel) {
            t->low_rel[b] = res_rel;
            t->step_rel[b] = (float)step;
        }
        if (t->stop == FP_STOP_REL ? lower_rel : lower_abs)
            memcpy(best + (size_t)b * d, fb, d * sizeof(float));
    }
}

double fp_track_update(FpTrack *t, float *best, const float *fx, const float *x, int step) {
    TrackStep a = {t, best, fx, x, step};
    k_foreach(t->nb, (double)t->d * FP_NS_PER_FLOAT, track_samples, &a);
    /* worst: the batch's largest stop-mode residual, the quantity the stop rule compares with tol
     * (torchdeq: trace_dict[stop_mode][-1].max()) */
    double worst = 0.0;
    for (int b = 0; b < t->nb; b++) {
        if (isnan(t->res[b])) return NAN;
        if (t->res[b] > worst) worst = t->res[b];
    }
    return worst;
}

int fp_track_eval(FpTrack *t, float *z, const float *fx, const float *x, int step, double tol, FpStats *st) {
    double worst = fp_track_update(t, z, fx, x, step);
    if (isnan(worst)) {
        /* z may hold a mix of this step's samples: hand back x, the last finite input */
        memcpy(z, x, (size_t)t->nb * t->d * sizeof(float));
        fp_track_stats(t, st, step, 0);
        fp_nonfinite(step);
        return -1;
    }
    return worst < tol;   /* every sample below tol (torchdeq: trace[-1].max() < tol) */
}

void fp_track_stats(const FpTrack *t, FpStats *st, int iters, int converged) {
    if (!st) return;
    const double *low = t->stop == FP_STOP_REL ? t->low_rel : t->low_abs;
    const float *step = t->stop == FP_STOP_REL ? t->step_rel : t->step_abs;
    /* the logged means (spec §3.1): abs diff, rel diff, steps = mean argmin step, not iterations */
    double sa = 0.0, sr = 0.0, ss = 0.0, worst = 0.0;
    for (int b = 0; b < t->nb; b++) {
        if (low[b] > worst) worst = low[b];
        sa += t->low_abs[b];
        sr += t->low_rel[b];
        ss += step[b];
        if (st->sample_res) st->sample_res[b] = (float)low[b];
        if (st->sample_step) st->sample_step[b] = (int)step[b];
    }
    st->iters = iters;
    st->converged = converged;
    st->abs_res = sa / t->nb;
    st->rel_res = sr / t->nb;
    st->best_step = ss / t->nb;
    st->best_max = worst;
}
