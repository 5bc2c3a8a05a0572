/* rng.h: reproducible random numbers.
 *
 * Rng is PCG32 (O'Neill 2014: 64-bit LCG state, xorshift-rotate output); `stream` selects one of
 * 2^63 independent sequences, so e.g. init, dropout and data each own a stream and do not shift
 * each other when one of them draws more numbers. rng_hash is a stateless mix for generators that
 * must be pure functions of (seed, index), e.g. the data of sample i.
 */
#ifndef IMPLICIT_RNG_H
#define IMPLICIT_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
    uint64_t inc;   /* odd; encodes the stream */
} Rng;

void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(Rng *r);
uint32_t rng_below(Rng *r, uint32_t n);        /* uniform in [0, n), unbiased */
float rng_uniform(Rng *r);                     /* uniform in [0, 1), 24 random bits */
float rng_uniform_range(Rng *r, float lo, float hi);
float rng_normal(Rng *r);                      /* N(0, 1), Box-Muller on two uniforms */
uint64_t rng_hash(uint64_t seed, uint64_t a, uint64_t b); /* stateless 64-bit mix */

#endif
