/* diverge.c: see diverge.h. */
#include "diverge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

void diverge_init(Diverge *d, const DivergeCfg *c) {
    memset(d, 0, sizeof *d);
    d->c = *c;
    CHECK(c->window >= 1 && c->steps >= 1 && c->warmup >= 0, "diverge_init: bad window %d / steps %d / warmup %d",
          c->window, c->steps, c->warmup);
    d->loss = xcalloc((size_t)c->window, sizeof(double));
    d->gnorm = xcalloc((size_t)c->window, sizeof(double));
    d->sorted = xcalloc((size_t)c->window, sizeof(double));
    d->loss_ref = INFINITY;
}

void diverge_free(Diverge *d) {
    free(d->loss);
    free(d->gnorm);
    free(d->sorted);
    memset(d, 0, sizeof *d);
}

void diverge_reset(Diverge *d) {
    d->n = d->at = d->streak = 0;
    d->loss_ref = INFINITY;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const Diverge *d, const double *ring) {
    memcpy(d->sorted, ring, (size_t)d->n * sizeof(double));
    qsort(d->sorted, (size_t)d->n, sizeof(double), cmp_double);
    return d->n % 2 ? d->sorted[d->n / 2] : 0.5 * (d->sorted[d->n / 2 - 1] + d->sorted[d->n / 2]);
}

/* value > factor x max(ref, floor)? Fills what: the comparison, for the message. */
static int above(double value, double factor, double ref, const char *ref_name, double floor, char *what, size_t cap) {
    if (!(factor > 0) || !(value > factor * (ref > floor ? ref : floor))) return 0;
    if (ref >= floor) snprintf(what, cap, "%.4g > %g x %.4g (the %s)", value, factor, ref, ref_name);
    else snprintf(what, cap, "%.4g > %g x %g (the floor; the %s is %.4g)", value, factor, floor, ref_name, ref);
    return 1;
}

DivergeVerdict diverge_observe(Diverge *d, double loss, double gnorm, char *why, size_t cap) {
    char what[160];
    int loss_bad = 0, gnorm_bad = 0;
    if (d->n >= d->c.warmup && d->n > 0) {
        loss_bad = above(loss, d->c.factor, d->loss_ref, "lowest running median", DIVERGE_LOSS_FLOOR, what, sizeof what);
        if (!loss_bad)
            gnorm_bad = above(gnorm, d->c.grad_factor, median(d, d->gnorm), "running median", DIVERGE_GNORM_FLOOR, what,
                              sizeof what);
    }
    if (!loss_bad && !gnorm_bad) {
        d->streak = 0;
        d->loss[d->at] = loss;
        d->gnorm[d->at] = gnorm;
        d->at = (d->at + 1) % d->c.window;
        if (d->n < d->c.window) d->n++;
        double m = median(d, d->loss);
        if (m < d->loss_ref) d->loss_ref = m;
        return DIVERGE_HEALTHY;
    }
    if (++d->streak < d->c.steps) return DIVERGE_SUSPECT;
    snprintf(why, cap, "%s: %s for %d steps in a row", loss_bad ? "the loss diverged" : "the gradient norm exploded",
             what, d->streak);
    return DIVERGE_DIVERGED;
}
