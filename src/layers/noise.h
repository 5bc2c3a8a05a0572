/* noise.h: noise injection for robustness experiments (spec implicit-lm §7; the reference's
 * state_noise_db / latent_noise_db). Signal-to-noise ratio in dB, s = 10^(db/10); db <= 0 is off.
 *   additive:       x <- x + n,        n ~ N(0, mean(x²)/s)   (mean over the whole tensor)
 *   multiplicative: x <- x ⊙ (1 + n),  n ~ N(0, 1/s) */
#ifndef IMPLICIT_NOISE_H
#define IMPLICIT_NOISE_H

#include <stddef.h>

#include "../core/rng.h"

void noise_inject(float *x, size_t n, float db, int multiplicative, Rng *r);

#endif
