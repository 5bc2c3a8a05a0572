/* fp_impl.h: internals shared by the solvers in fp.c, anderson.c and broyden.c, with the tracking
 * in fp_track.c (not a public header).
 *
 * FpTrack is torchdeq's per-sample bookkeeping (solver/utils.py update_state): for each sample and
 * each stop mode the lowest residual seen and the step that gave it, and in the caller's `best`
 * buffer the f-output of the stop mode's lowest step. It lives in 8·nb + 2 floats of the solver
 * scratch: this step's stop-mode residuals and the lowest residuals as doubles (8-byte aligned inside it; a float copy would make
 * "lower than" depend on rounding once residuals stall near float precision), the steps as floats
 * (small integers, exact). The scratch must be malloc'd or arena memory (no declared type).
 */
#ifndef IMPLICIT_FP_IMPL_H
#define IMPLICIT_FP_IMPL_H

#include <stddef.h>

#include "fp.h"

/* Per-sample loops run through k_foreach (one sample per thread, so sums never depend on the
 * thread count), which forks only when the batch is big enough to pay for it. Their estimated
 * one-thread cost per float of a sample (they forked from a fixed 32768 floats before, 20 us at this
 * rate; the kernels' fork threshold decides now). */
#define FP_NS_PER_FLOAT 0.6

typedef struct {
    int nb;          /* samples */
    size_t d;        /* floats per sample */
    FpStop stop;
    double *low_abs; /* (nb) lowest absolute residual so far (1e8 before the first step) */
    double *low_rel; /* (nb) lowest relative residual so far */
    float *step_abs; /* (nb) step of low_abs (0 = none yet) */
    float *step_rel; /* (nb) step of low_rel */
    double *res;     /* (nb) this step's stop-mode residual per sample (NaN: not finite) */
} FpTrack;

/* Floats fp_track_init carves. */
size_t fp_track_floats(int nb);
/* Set up the tracker for map m in mem:(fp_track_floats(m->nb)). */
void fp_track_init(FpTrack *t, const FpMap *m, FpStop stop, float *mem);
/* One step: residuals of fx against x per sample; where the stop-mode residual is a new lowest,
 * copy fx_b into best_b. Returns max_b of the stop-mode residual, or NAN if any residual is not
 * finite (best is then partly updated, and the caller discards it). best, fx, x: (n). */
double fp_track_update(FpTrack *t, float *best, const float *fx, const float *x, int step);
/* One evaluation of a solver: fp_track_update, then the stop rule. Returns 1 when every sample is
 * below tol, 0 to go on, or -1 when f produced NaN/inf: z (the caller's best buffer) then holds x,
 * the input of the failing call, st is filled and the error is set (IM_ENUM). */
int fp_track_eval(FpTrack *t, float *z, const float *fx, const float *x, int step, double tol, FpStats *st);
/* Fill st (may be NULL) from the tracker. */
void fp_track_stats(const FpTrack *t, FpStats *st, int iters, int converged);

/* err_set(IM_ENUM, ...) with the message every solver uses for a non-finite f. */
int fp_nonfinite(int iter);

/* The Anderson solver (anderson.c): same contract as fp_solve for o->solver == FP_ANDERSON,
 * options already validated. */
int fp_anderson(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);
/* Its scratch: 2·anderson_m·n + fp_track_floats(nb) (CHECKs anderson_m). */
size_t fp_anderson_scratch(const FpOpts *o, size_t n, int nb);
/* The Broyden solver (broyden.c), same contract for o->solver == FP_BROYDEN. */
int fp_broyden(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);
/* Its scratch: (2·broyden_m + 5)·n + fp_track_floats(nb) (CHECKs broyden_m). */
size_t fp_broyden_scratch(const FpOpts *o, size_t n, int nb);

/* The FixedPointOptimizer as a row (fpo.c): fpo_solve with its options taken from o (threshold
 * tol, cap max_iter) and tokens of o->tok floats (0: the whole sample). */
int fp_optimizer(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);
size_t fp_optimizer_scratch(const FpOpts *o, size_t n, int nb);

#endif
