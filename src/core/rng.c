/* rng.c: PCG32 (XSH-RR variant) and a splitmix64-style stateless hash; see rng.h. */
#include "rng.h"

#include <math.h>

#define PCG_MULT 6364136223846793005ULL

void rng_seed(Rng *r, uint64_t seed, uint64_t stream) {
    r->state = 0;
    r->inc = (stream << 1u) | 1u;
    rng_u32(r);
    r->state += seed;
    rng_u32(r);
}

uint32_t rng_u32(Rng *r) {
    uint64_t old = r->state;
    r->state = old * PCG_MULT + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

uint32_t rng_below(Rng *r, uint32_t n) {
    /* rejection of the low residue class keeps every value equally likely */
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = rng_u32(r);
        if (x >= threshold) return x % n;
    }
}

float rng_uniform(Rng *r) { return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

float rng_uniform_range(Rng *r, float lo, float hi) { return lo + (hi - lo) * rng_uniform(r); }

float rng_normal(Rng *r) {
    /* 1 - u keeps the log argument in (0, 1] */
    double u1 = 1.0 - (double)rng_uniform(r);
    double u2 = (double)rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rng_hash(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ (a + 0x9e3779b97f4a7c15ULL));
    return mix64(h ^ (b + 0x632be59bd9b4e019ULL));
}
