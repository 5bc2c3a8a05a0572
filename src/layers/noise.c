/* noise.c: see noise.h. */
#include "noise.h"

#include <math.h>

void noise_inject(float *x, size_t n, float db, int multiplicative, Rng *r) {
    if (!(db > 0) || n == 0) return;
    double s = pow(10.0, db / 10.0);
    if (multiplicative) {
        float sd = (float)sqrt(1.0 / s);
        for (size_t i = 0; i < n; i++) x[i] *= 1.0f + sd * rng_normal(r);
        return;
    }
    double ms = 0;
    for (size_t i = 0; i < n; i++) ms += (double)x[i] * x[i];
    float sd = (float)sqrt(ms / (double)n / s);
    for (size_t i = 0; i < n; i++) x[i] += sd * rng_normal(r);
}
