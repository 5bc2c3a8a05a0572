/* layernorm.c: see layernorm.h. */
#include "layernorm.h"

#include <math.h>
#include <string.h>

size_t layernorm_cache_floats(int M) { return 2 * (size_t)M; }

void layernorm_fwd(float *y, float *cache, const float *x, const float *w, const float *b, int M, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)M * C >= 16384)
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        double s = 0, s2 = 0;
        for (int c = 0; c < C; c++) s += xi[c];
        double mean = s / C;
        for (int c = 0; c < C; c++) {
            double d = xi[c] - mean;
            s2 += d * d;
        }
        float rstd = (float)(1.0 / sqrt(s2 / C + eps)), mu = (float)mean;
        for (int c = 0; c < C; c++) yi[c] = (xi[c] - mu) * rstd * w[c] + b[c];
        if (cache) {
            cache[i] = mu;
            cache[M + i] = rstd;
        }
    }
}

void layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                   const float *cache, int M, int C) {
    const float *mean = cache, *rstd = cache + M;
    if (dx) {
#pragma omp parallel for schedule(static) if ((long)M * C >= 16384)
        for (int i = 0; i < M; i++) {
            const float *xi = x + (size_t)i * C, *gi = dy + (size_t)i * C;
            float mu = mean[i], r = rstd[i];
            /* dx = r (g·w − mean(g·w) − xhat·mean(g·w·xhat)) */
            double a = 0, bsum = 0;
            for (int c = 0; c < C; c++) {
                double gw = (double)gi[c] * w[c], xh = (xi[c] - mu) * r;
                a += gw;
                bsum += gw * xh;
            }
            float ma = (float)(a / C), mb = (float)(bsum / C);
            float *dxi = dx + (size_t)i * C;
            for (int c = 0; c < C; c++) {
                float xh = (xi[c] - mu) * r;
                dxi[c] += r * (gi[c] * w[c] - ma - xh * mb);
            }
        }
    }
    if (dw || db) {
        /* per-feature sums over rows: parallel over features, rows in order */
#pragma omp parallel for schedule(static) if ((long)M * C >= 16384)
        for (int c = 0; c < C; c++) {
            double sw = 0, sb = 0;
            for (int i = 0; i < M; i++) {
                float g = dy[(size_t)i * C + c];
                sw += (double)g * (x[(size_t)i * C + c] - mean[i]) * rstd[i];
                sb += g;
            }
            if (dw) dw[c] += (float)sw;
            if (db) db[c] += (float)sb;
        }
    }
}
