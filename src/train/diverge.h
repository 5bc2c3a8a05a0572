/* diverge.h: telling a diverging training run from a noisy one.
 *
 * The loss and gradient norm of every healthy step go into windows of the last `window` healthy
 * steps. Once `warmup` healthy steps are in, a step is suspect when its loss is above
 * factor x max(lowest running median of the loss, DIVERGE_LOSS_FLOOR), or its gradient norm
 * above grad_factor x max(running median of the norm, DIVERGE_GNORM_FLOOR); `steps` suspect
 * steps in a row are divergence (and so is every further suspect step while the streak lasts).
 * Suspect steps stay out of the windows, so the medians keep describing the run before the
 * trouble.
 *
 * Why these choices: medians, not means, so that one spike does not move the reference; a
 * streak, so that a few noisy batches never stop a run; for the loss the lowest median seen since
 * the first step (warm-up steps count), because a run can start diverging within its warm-up (a
 * far too high learning rate from step 1), when its current median is already far off, while a
 * healthy loss does not settle at several times a level it has reached; for the gradient norm
 * the current median, because healthy norms do drift up over a run. Floors, because near a loss
 * of 0 (a solved task, where most batches are perfect) a ratio alone would call ordinary noise
 * divergence (the healthy demo run's single-step spikes reach 0.44 nats over a median of 0.002):
 * 0.25 nats per token (a threshold of 1 nat at the default factor 4) and a gradient norm of 1
 * (the default clip) are levels from which a rise by the factor means real trouble. Non-finite
 * values are the caller's to catch: they are errors at once, not after a streak.
 */
#ifndef IMPLICIT_DIVERGE_H
#define IMPLICIT_DIVERGE_H

#include <stddef.h>

#define DIVERGE_LOSS_FLOOR 0.25
#define DIVERGE_GNORM_FLOOR 1.0

typedef struct {
    double factor, grad_factor;   /* > 1, or 0 = that check off */
    int window, warmup, steps;    /* >= 1, >= 0, >= 1 */
} DivergeCfg;

typedef struct {
    DivergeCfg c;
    double *loss, *gnorm, *sorted;   /* (window) rings of healthy steps, and scratch for medians */
    double loss_ref;                 /* lowest running median of the loss (INFINITY: none yet) */
    int n, at, streak;               /* healthy steps held, next ring slot, suspect steps in a row */
} Diverge;

typedef enum { DIVERGE_HEALTHY, DIVERGE_SUSPECT, DIVERGE_DIVERGED } DivergeVerdict;

void diverge_init(Diverge *d, const DivergeCfg *c);
void diverge_free(Diverge *d);
/* Forget the history (a curriculum switch changes what a normal loss is): warm-up again. */
void diverge_reset(Diverge *d);
/* One step's finite loss and gradient norm. On DIVERGE_DIVERGED, why (cap bytes) says which
 * threshold was crossed, e.g. "the loss diverged: 3.6e+04 > 4 x 1.37 (the lowest running median) for
 * 10 steps in a row". */
DivergeVerdict diverge_observe(Diverge *d, double loss, double gnorm, char *why, size_t cap);

#endif
