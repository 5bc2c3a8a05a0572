/* fpo.c: the Fixed-Point RNN solver (see fpo.h for the semantics). */
#include "fpo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_impl.h"

void fpo_opts_default(FpoOpts *o) {
    *o = (FpoOpts){.step0 = 0.99f, .decay = 0.9f, .patience = 15, .thr = 0.1, .quantile = 0.75,
                   .cap = 100, .step_min = 1e-3, .eps = 1e-8};
}

size_t fpo_scratch_floats(size_t n, int nb) { return n + 8 * (size_t)nb + 4; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fpo_quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1) return v[n - 1];
    double frac = pos - lo;
    return v[lo] + frac * (v[lo + 1] - v[lo]);
}

double fpo_gamma(Rng *r, double shape, double scale) {
    CHECK(shape >= 1 && scale > 0, "gamma(%g, %g) needs shape >= 1, scale > 0", shape, scale);
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = rng_uniform(r);
        if (u < 1 - 0.0331 * x * x * x * x || log(u + 1e-300) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v * scale;
    }
}

/* The per-sample passes of fpo_solve (k_foreach items): residuals, then the relaxed update. */
typedef struct { float *y; const float *F, *step; double *res; size_t per, tok; double eps; } FpoStep;

static void fpo_residuals(void *ctx, long b0, long b1) {
    const FpoStep *a = ctx;
    for (long b = b0; b < b1; b++)
        a->res[b] = k_resid_rel_inf(a->y + b * a->per, a->F + b * a->per, a->per, a->tok, a->eps);
}

static void fpo_relax(void *ctx, long b0, long b1) {
    const FpoStep *a = ctx;
    for (long b = b0; b < b1; b++) {
        float s = a->step[b], *yb = a->y + b * a->per;
        const float *Fb = a->F + b * a->per;
        for (size_t i = 0; i < a->per; i++) yb[i] = s * Fb[i] + (1 - s) * yb[i];
    }
}

int fpo_solve(const FpMap *m, size_t tok, float *y, const FpoOpts *o, FpoStats *st, float *scratch) {
    CHECK(m && m->f && m->nb >= 1 && m->n % (size_t)m->nb == 0 && tok >= 1 && (m->n / m->nb) % tok == 0,
          "map of %zu floats, %d samples, tokens of %zu", m->n, m->nb, tok);
    if (!(o->step0 > 0 && o->step0 <= 1) || !(o->decay > 0 && o->decay <= 1) || o->patience < 1 ||
        !(o->thr > 0) || !(o->quantile >= 0 && o->quantile <= 1) || o->cap < 1 || !(o->step_min >= 0) ||
        !(o->eps >= 0))
        return err_set(IM_EINVAL, "fixed-point solver options out of range (step0 %g, decay %g, patience %d, "
                       "threshold %g, quantile %g, cap %d)", o->step0, o->decay, o->patience, o->thr,
                       o->quantile, o->cap);
    int nb = m->nb;
    size_t per = m->n / (size_t)nb;
    double *best = (double *)scratch, *res = best + nb, *qtmp = res + nb;
    float *step = (float *)(qtmp + nb);
    int *pat = (int *)(step + nb);
    float *F = (float *)(pat + nb);
    for (int b = 0; b < nb; b++) {
        best[b] = INFINITY;
        step[b] = o->step0;
        pat[b] = o->patience;
        if (st && st->sample_conv) st->sample_conv[b] = -1;
    }
    int it = 0, bad = 0;
    double bq = INFINITY;
    for (;;) {
        if (it > 0) {
            memcpy(qtmp, best, (size_t)nb * sizeof *qtmp);
            bq = fpo_quantile(qtmp, nb, o->quantile);
            float smax = 0;
            for (int b = 0; b < nb; b++) smax = step[b] > smax ? step[b] : smax;
            if (!(bq >= o->thr && smax >= o->step_min && it < o->cap)) break;
        }
        m->f(m->ctx, F, y);
        FpoStep a = {y, F, step, res, per, tok, o->eps};
        k_foreach(nb, (double)per * FP_NS_PER_FLOAT, fpo_residuals, &a);
        for (int b = 0; b < nb; b++) bad |= !isfinite(res[b]);
        if (bad) {
            if (st) memset(st, 0, offsetof(FpoStats, sample_best));
            return fp_nonfinite(it + 1);
        }
        k_foreach(nb, (double)per * FP_NS_PER_FLOAT, fpo_relax, &a);
        it++;
        for (int b = 0; b < nb; b++) {
            if (res[b] < best[b]) {
                best[b] = res[b];
                pat[b] = o->patience;
            } else if (--pat[b] == 0) {
                pat[b] = o->patience;
                step[b] *= o->decay;
            }
            if (st && st->sample_conv && st->sample_conv[b] < 0 && res[b] < o->thr) st->sample_conv[b] = it;
        }
    }
    if (st) {
        st->iters = it;
        st->best_q = bq;
        st->converged = bq < o->thr;
        st->best_max = 0;
        for (int b = 0; b < nb; b++) {
            if (best[b] > st->best_max) st->best_max = best[b];
            if (st->sample_best) st->sample_best[b] = (float)best[b];
            if (st->sample_conv && st->sample_conv[b] < 0) st->sample_conv[b] = it + 1;
        }
    }
    return IM_OK;
}

/* ---- the row of the solver table (fp.h's FP_OPTIMIZER) ---------------------------------------- */

size_t fp_optimizer_scratch(const FpOpts *o, size_t n, int nb) {
    (void)o;
    return fpo_scratch_floats(n, nb);
}

int fp_optimizer(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    FpoOpts fo = {.step0 = o->step0, .decay = o->decay, .patience = o->patience, .thr = o->tol,
                  .quantile = o->quantile, .cap = o->max_iter, .step_min = o->step_min, .eps = o->res_eps};
    FpoStats fs = {0};
    if (st) {
        fs.sample_best = st->sample_res;
        fs.sample_conv = st->sample_step;
    }
    int rc = fpo_solve(m, o->tok ? o->tok : m->n / (size_t)m->nb, z, &fo, &fs, scratch);
    if (st) {
        st->iters = fs.iters;
        st->converged = fs.converged;
        st->abs_res = 0;
        st->rel_res = fs.best_q;
        st->best_step = fs.iters;
        st->best_max = fs.best_max;
    }
    return rc;
}
