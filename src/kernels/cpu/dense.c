/* cpu/dense.c: fast CPU versions of the row-wise dense kernels of kernels.h: weight norm (spec
 * implicit-lm §6), RMSNorm and gated RMSNorm (§1.2), softmax, cross-entropy, SiLU and SwiGLU.
 * Same contracts as the references in ref/dense.c.
 *
 * Threading (STYLE §8.7): OpenMP over rows with schedule(static), forking only for calls whose
 * estimated work reaches threading.h's threshold (KT_FOR, kt_team); a row is always handled by
 * one thread, with lane-parallel sums (vmath.h) whose order depends only on the row length.
 * Parameter gradients that sum over rows (dw of the norms) are summed per fixed block of rows
 * into scratch, then the block partials are added in block order. So every output is
 * bit-identical at any thread count. Transcendentals use vmath.h's vectorisable vexp / vlog /
 * vsigmoid / vsilu (error bounds there).
 * Out of scope: embedding, conv1d, LSTM, optimiser (cpu/dense_misc.c), GEMM (cpu/gemm.c).
 */
#include "../kernels.h"

#include <math.h>
#include <stdlib.h>

#include "../../core/check.h"
#include "kscratch.h"
#include "vecw.h"
#include "vmath.h"

#include "threading.h"

/* The team of a loop over M rows of C elements, and of an elementwise loop over n (threading.h). */
#define ROW_TEAM(M, C) kt_team((double)(M) * (double)(C) * KT_NS_ROW_ELEM, (M))
/* Rows in groups of KV_W (cpu/vecw.h; the norms' forwards): the number of groups, their team, and
 * the rows in group g (KV_W but in the last). */
#define ROW_GROUPS(M) (((M) + KV_W - 1) / KV_W)
#define GROUP_TEAM(M, C) kt_team((double)(M) * (double)(C) * KT_NS_ROW_ELEM, ROW_GROUPS(M))
static inline int group_rows(int M, int g) { return M - g * KV_W < KV_W ? M - g * KV_W : KV_W; }
#define ELEM_TEAM(n) kt_team((double)(n) * KT_NS_ELEM, (long)(n))
/* Column chunk when partial sums are combined: a stack accumulator of this many floats. */
#define COLCHUNK 128

static float silu_grad(float x) {
    float s = vsigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---- weight normalisation -------------------------------------------------------------------- */

/* As ref/dense.c: the factor W_i / v_i of row i, whether it was clipped, and ||v_i||. */
static float wn_factor(float s, const float *vi, int C, float clip, float *norm, int *clipped) {
    *norm = sqrtf(dot_lanes(vi, vi, C));
    *clipped = 0;
    if (*norm == 0.0f) return 0.0f;
    float f = s / *norm;
    if (clip > 0.0f && f > clip) {
        f = clip;
        *clipped = 1;
    }
    return f;
}

/* One row per iteration: norm, factor, scale; rows are independent. */
void k_weightnorm_fwd(float *W, const float *g, const float *v, int R, int C, float target, float clip) {
    KT_FOR(ROW_TEAM(R, C),
    for (int i = 0; i < R; i++) {
        const float *vi = v + (size_t)i * C;
        float *Wi = W + (size_t)i * C;
        float norm;
        int clipped;
        float f = wn_factor(g ? g[i] : target, vi, C, clip, &norm, &clipped);
        for (int c = 0; c < C; c++) Wi[c] = f * vi[c];
    });
}

/* Per row: dg = <dW, v> / ||v||;  dv = f (dW - <dW, v> v / ||v||^2)  (see ref/dense.c). */
void k_weightnorm_bwd(float *dg, float *dv, const float *dW, const float *g, const float *v, int R,
                      int C, float target, float clip) {
    KT_FOR(ROW_TEAM(R, C),
    for (int i = 0; i < R; i++) {
        const float *vi = v + (size_t)i * C, *dWi = dW + (size_t)i * C;
        float *dvi = dv ? dv + (size_t)i * C : NULL;
        float norm;
        int clipped;
        float f = wn_factor(g ? g[i] : target, vi, C, clip, &norm, &clipped);
        if (norm == 0.0f) continue; /* constant W_i = 0: no gradient */
        if (clipped) {              /* W_i = clip v_i */
            if (dvi)
                for (int c = 0; c < C; c++) dvi[c] += f * dWi[c];
            continue;
        }
        float dot = dot_lanes(dWi, vi, C);
        if (g && dg) dg[i] += dot / norm;
        if (dvi) {
            float proj = dot / (norm * norm); /* remove the radial part of dW_i */
            for (int c = 0; c < C; c++) dvi[c] += f * (dWi[c] - proj * vi[c]);
        }
    });
}

/* ---- RMSNorm --------------------------------------------------------------------------------- */

/* Rows whose length is whole vectors go KV_W at a time (cpu/vecw.h): each row's sum of squares in
 * two vector chains, the rows' lanes summed together (kv_sum_rows) and the KV_W reciprocal roots
 * taken as one vector. A row at a time, the horizontal sum, the square root and the division were
 * a chain of ~100 cycles per row whatever its length (C 64 and 128 alike: 26 ns per row, 5x a
 * memcpy of the rows). Measured (Zen 4, one thread, M 8192, the kernel alone), C 64 / 128:
 * rmsnorm 219 -> 93 / 209 -> 152 us with AVX-512, 201 -> 90 / 266 -> 166 with AVX2; gated
 * 565 -> 235 / 642 -> 432 and 496 -> 321 / 804 -> 596. The sums' order differs from dot_lanes'
 * (the last bits of r); a row's result does not depend on the rows around it. */
static inline __attribute__((always_inline)) kv_f rows_rstd(const float *v, int nrows, int C,
                                                            float eps) {
    kv_f acc[KV_W];
    for (int j = 0; j < KV_W; j++) {
        int k = kv_slot_row(j);
        kv_f a0 = {0}, a1 = {0};
        if (k < nrows) {
            const float *row = v + (size_t)k * C;
            int c = 0;
            for (; c + 2 * KV_W <= C; c += 2 * KV_W) {
                kv_f p = kv_load(row + c), q = kv_load(row + c + KV_W);
                a0 += p * p;
                a1 += q * q;
            }
            if (c < C) {
                kv_f p = kv_load(row + c);
                a0 += p * p;
            }
        }
        acc[j] = a0 + a1;
    }
    kv_f ms = kv_sum_rows(acc) / (float)C + eps, r;
    for (int l = 0; l < KV_W; l++) r[l] = 1.0f / sqrtf(ms[l]);
    return r;
}

/* y = v r w over a group of rows (y may be v), rstd of the group. */
static inline void rows_scale(float *y, const float *v, float *rstd, kv_f r, const float *w, int nrows,
                              int C) {
    for (int k = 0; k < nrows; k++) {
        const float *vk = v + (size_t)k * C;
        float *yk = y + (size_t)k * C, rk = r[k];
        if (rstd) rstd[k] = rk;
        for (int c = 0; c < C; c++) yk[c] = vk[c] * rk * w[c];
    }
}

void k_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int M, int C, float eps) {
    /* up to 128 columns: at 256 the rows alone were 5% faster with AVX-512 (level with AVX2),
     * the chain being short against the row then */
    if (C % KV_W == 0 && C <= 128) {
        KT_FOR(GROUP_TEAM(M, C),
        for (int g = 0; g < ROW_GROUPS(M); g++) {
            int i0 = g * KV_W, nr = group_rows(M, g);
            size_t o = (size_t)i0 * C;
            kv_f r = rows_rstd(x + o, nr, C, eps); /* all rows read before any is written: y may be x */
            rows_scale(y + o, x + o, rstd ? rstd + i0 : NULL, r, w, nr, C);
        });
        return;
    }
    KT_FOR(ROW_TEAM(M, C),
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        /* pass 1: sum of squares; pass 2: scale (y may alias x: pass 1 is done reading) */
        float r = 1.0f / sqrtf(dot_lanes(xi, xi, C) / (float)C + eps);
        if (rstd) rstd[i] = r;
        for (int c = 0; c < C; c++) yi[c] = xi[c] * r * w[c];
    });
}

/* The dw of both norms sums over rows. To read dy and x only once, the backward runs over
 * fixed blocks of NORM_RB rows: each block writes its partial dw row into scratch, and the
 * partials are then added in block order, column by column. Blocks depend on M alone, so the
 * order of every sum (and the bits) do not depend on the thread count. */
#define NORM_RB 32

/* dw[c] += sum_b part[b, c], b in order; columns split over threads. */
static void add_partials(float *dw, const float *part, int nb, int C) {
    int nchunk = (C + COLCHUNK - 1) / COLCHUNK;
    KT_FOR(kt_team((double)nb * C * KT_NS_COPY, nchunk),
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * COLCHUNK, n = C - c0 < COLCHUNK ? C - c0 : COLCHUNK;
        float acc[COLCHUNK];
        for (int c = 0; c < n; c++) acc[c] = 0.0f;
        for (int b = 0; b < nb; b++)
            for (int c = 0; c < n; c++) acc[c] += part[(size_t)b * C + c0 + c];
        for (int c = 0; c < n; c++) dw[c0 + c] += acc[c];
    });
}

/* (nb, C) partial dw rows, in persistent kernel scratch (kscratch.h). */
static float *norm_scratch(int nb, int C) { return kscratch_floats(KS_NORM, (size_t)nb * C); }

void k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                   const float *rstd, int M, int C) {
    int nb = (M + NORM_RB - 1) / NORM_RB;
    float *part = dw ? norm_scratch(nb, C) : NULL; /* (nb, C) partial dw */
    KT_FOR(ROW_TEAM(M, C),
    for (int b = 0; b < nb; b++) {
        float *pw = part ? part + (size_t)b * C : NULL;
        if (pw)
            for (int c = 0; c < C; c++) pw[c] = 0.0f;
        for (int i = b * NORM_RB; i < M && i < (b + 1) * NORM_RB; i++) {
            const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
            float r = rstd[i];
            if (dx) { /* dx = r a - (r^3 / C) x sum(a x), a = dy w */
                float *dxi = dx + (size_t)i * C;
                float k = r * r * r / (float)C * dot3_lanes(dyi, w, xi, C);
                for (int c = 0; c < C; c++) dxi[c] += r * dyi[c] * w[c] - k * xi[c];
            }
            if (pw)
                for (int c = 0; c < C; c++) pw[c] += dyi[c] * xi[c] * r;
        }
    });
    if (dw) add_partials(dw, part, nb, C);
}

/* ---- gated RMSNorm: v = x silu(z), y = v rstd(v) w ------------------------------------------- */

void k_gated_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w,
                         int M, int C, float eps) {
    if (C % KV_W == 0) { /* KV_W rows at a time, as k_rmsnorm_fwd */
        KT_FOR(GROUP_TEAM(M, C),
        for (int g = 0; g < ROW_GROUPS(M); g++) {
            int i0 = g * KV_W, nr = group_rows(M, g);
            size_t o = (size_t)i0 * C, n = (size_t)nr * C;
            for (size_t c = 0; c < n; c++) y[o + c] = x[o + c] * vsilu(z[o + c]); /* y holds v */
            rows_scale(y + o, y + o, rstd ? rstd + i0 : NULL, rows_rstd(y + o, nr, C, eps), w, nr, C);
        });
        return;
    }
    KT_FOR(ROW_TEAM(M, C),
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C, *zi = z + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        for (int c = 0; c < C; c++) yi[c] = xi[c] * vsilu(zi[c]); /* y holds v for now */
        float r = 1.0f / sqrtf(dot_lanes(yi, yi, C) / (float)C + eps);
        if (rstd) rstd[i] = r;
        for (int c = 0; c < C; c++) yi[c] = yi[c] * r * w[c];
    });
}

/* One row of the gated backward. Pass 1 stores s = sigmoid(z) in sg (one exp per element) and
 * sums dy w v, v = x z s; pass 2: dv = r dy w - k v spreads onto x (dv silu(z)) and z
 * (dv x silu'(z), silu' = s (1 + z (1 - s))); pw (partial dw) += dy v r. Any of dx, dz, pw may be
 * NULL; the values written do not depend on which are requested. */
static void gated_bwd_row(float *dx, float *dz, float *pw, float *sg, const float *dy,
                          const float *x, const float *z, const float *w, float r, int C) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) {
            float s = vsigmoid(z[c + l]);
            sg[c + l] = s;
            acc[l] += dy[c + l] * w[c + l] * (x[c + l] * (z[c + l] * s));
        }
    float dot = 0.0f;
    for (; c < C; c++) {
        float s = vsigmoid(z[c]);
        sg[c] = s;
        dot += dy[c] * w[c] * (x[c] * (z[c] * s));
    }
    dot += lanes_total(acc);
    float k = r * r * r / (float)C * dot;
    if (dx)
        for (c = 0; c < C; c++) {
            float sil = z[c] * sg[c];
            dx[c] += (r * dy[c] * w[c] - k * (x[c] * sil)) * sil;
        }
    if (dz)
        for (c = 0; c < C; c++) {
            float s = sg[c], sil = z[c] * s;
            float dv = r * dy[c] * w[c] - k * (x[c] * sil);
            dz[c] += dv * x[c] * (s * (1.0f + z[c] * (1.0f - s)));
        }
    if (pw)
        for (c = 0; c < C; c++) pw[c] += dy[c] * (x[c] * (z[c] * sg[c])) * r;
}

void k_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dy, const float *x,
                         const float *z, const float *w, const float *rstd, int M, int C) {
    int nb = (M + NORM_RB - 1) / NORM_RB, nt = ROW_TEAM(M, C);
    float *part = dw ? norm_scratch(nb, C) : NULL; /* (nb, C) partial dw, as k_rmsnorm_bwd */
    /* one row of sigmoid(z) per thread (persistent scratch, taken outside the parallel region) */
    size_t cs = ((size_t)C + 15) / 16 * 16;
    float *sgbuf = kscratch_floats(KS_NORM_ROW, cs * (size_t)nt);
    KT_FOR(nt,
    for (int b = 0; b < nb; b++) {
        float *pw = part ? part + (size_t)b * C : NULL;
        float *sg = sgbuf + cs * kt_thread_id();
        if (pw)
            for (int c = 0; c < C; c++) pw[c] = 0.0f;
        for (int i = b * NORM_RB; i < M && i < (b + 1) * NORM_RB; i++) {
            size_t o = (size_t)i * C;
            gated_bwd_row(dx ? dx + o : NULL, dz ? dz + o : NULL, pw, sg, dy + o, x + o, z + o, w,
                          rstd[i], C);
        }
    });
    if (dw) add_partials(dw, part, nb, C);
}

/* ---- LayerNorm --------------------------------------------------------------------------------- */

/* Lanes of one row's sum (m unused) or sum of squared deviations from m, two vector chains. */
static inline __attribute__((always_inline)) kv_f row_lanes(const float *row, float m, int dev, int C) {
    kv_f a0 = {0}, a1 = {0};
    int c = 0;
    for (; c + 2 * KV_W <= C; c += 2 * KV_W) {
        kv_f p = kv_load(row + c), q = kv_load(row + c + KV_W);
        if (dev) {
            p -= m;
            q -= m;
            a0 += p * p;
            a1 += q * q;
        } else {
            a0 += p;
            a1 += q;
        }
    }
    if (c < C) {
        kv_f p = kv_load(row + c);
        if (dev) {
            p -= m;
            a0 += p * p;
        } else {
            a0 += p;
        }
    }
    return a0 + a1;
}

/* Rows split over threads. The row statistics are lane-parallel float sums (vmath.h: the
 * reference's left-to-right double sums are a chain of dependent adds, several times slower
 * than the rest of the row at C 128-512); the mean first, then the squared deviations from it
 * (two passes: no cancellation when |mean| >> spread). Rows of whole vectors up to 128 columns
 * go KV_W at a time with both sums summed together across the rows (cpu/vecw.h; the kernel alone,
 * Zen 4, one thread, AVX-512, M 8192: 285 -> 138 us at C 64, 400 -> 225 at C 128). The parameter
 * gradients split over columns, each summed over rows in order, as the reference. */
void k_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                     int M, int C, float eps) {
    if (C % KV_W == 0 && C <= 128) {
        /* KV_W rows at a time, as k_rmsnorm_fwd: the means, then the deviations' sums, each the
         * rows' lanes summed together (a row at a time, each sum ended in the chain rmsnorm_fwd
         * had once) */
        KT_FOR(GROUP_TEAM(M, C),
        for (int g = 0; g < ROW_GROUPS(M); g++) {
            int i0 = g * KV_W, nr = group_rows(M, g);
            const float *xg = x + (size_t)i0 * C;
            kv_f acc[KV_W], z = {0};
            for (int j = 0; j < KV_W; j++) {
                int k = kv_slot_row(j);
                acc[j] = k < nr ? row_lanes(xg + (size_t)k * C, 0.0f, 0, C) : z;
            }
            kv_f m = kv_sum_rows(acc) / (float)C;
            for (int j = 0; j < KV_W; j++) {
                int k = kv_slot_row(j);
                acc[j] = k < nr ? row_lanes(xg + (size_t)k * C, m[k], 1, C) : z;
            }
            kv_f v = kv_sum_rows(acc) / (float)C + eps, r;
            for (int l = 0; l < KV_W; l++) r[l] = 1.0f / sqrtf(v[l]);
            for (int k = 0; k < nr; k++) {
                const float *xi = xg + (size_t)k * C;
                float *yi = y + (size_t)(i0 + k) * C, mk = m[k], rk = r[k];
                for (int c = 0; c < C; c++) yi[c] = (xi[c] - mk) * rk * w[c] + b[c];
                if (mean) mean[i0 + k] = mk;
                if (rstd) rstd[i0 + k] = rk;
            }
        });
        return;
    }
    KT_FOR(ROW_TEAM(M, C),
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float m = sum_lanes(xi, C) / (float)C;
        float r = 1.0f / sqrtf(dev2_lanes(xi, m, C) / (float)C + eps);
        for (int c = 0; c < C; c++) yi[c] = (xi[c] - m) * r * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = r;
    });
}

/* dx = r (g w - mean(g w) - xh mean(g w xh)), xh = (x - mean) r: the two row sums in one pass of
 * lane-parallel partials. */
static void layernorm_bwd_row(float *restrict dxi, const float *restrict gi, const float *restrict xi,
                              const float *restrict w, float mu, float r, int C) {
    float sa[LANES], sb[LANES];
    for (int l = 0; l < LANES; l++) sa[l] = sb[l] = 0.0f;
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) {
            float gw = gi[c + l] * w[c + l], xh = (xi[c + l] - mu) * r;
            sa[l] += gw;
            sb[l] += gw * xh;
        }
    float a = 0.0f, bsum = 0.0f;
    for (; c < C; c++) {
        float gw = gi[c] * w[c], xh = (xi[c] - mu) * r;
        a += gw;
        bsum += gw * xh;
    }
    a += lanes_total(sa);
    bsum += lanes_total(sb);
    float ma = a / (float)C, mb = bsum / (float)C;
    for (c = 0; c < C; c++) {
        float xh = (xi[c] - mu) * r;
        dxi[c] += r * (gi[c] * w[c] - ma - xh * mb);
    }
}

void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                     const float *mean, const float *rstd, int M, int C) {
    if (dx)
        KT_FOR(ROW_TEAM(M, C),
        for (int i = 0; i < M; i++) {
            size_t o = (size_t)i * C;
            layernorm_bwd_row(dx + o, dy + o, x + o, w, mean[i], rstd[i], C);
        });
    if (!dw && !db) return;
    /* column chunks, rows in order inside each (the reference's order per column), read row by
     * row so that every pass over dy and x is contiguous */
    int nchunk = (C + COLCHUNK - 1) / COLCHUNK;
    KT_FOR(kt_team((double)M * C * KT_NS_ROW_ELEM, nchunk),
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * COLCHUNK, n = C - c0 < COLCHUNK ? C - c0 : COLCHUNK;
        double sw[COLCHUNK], sb[COLCHUNK];
        for (int c = 0; c < n; c++) sw[c] = sb[c] = 0.0;
        for (int i = 0; i < M; i++) {
            const float *gi = dy + (size_t)i * C + c0, *xi = x + (size_t)i * C + c0;
            for (int c = 0; c < n; c++) {
                sw[c] += (double)gi[c] * (xi[c] - mean[i]) * rstd[i];
                sb[c] += gi[c];
            }
        }
        for (int c = 0; c < n; c++) {
            if (dw) dw[c0 + c] += (float)sw[c];
            if (db) db[c0 + c] += (float)sb[c];
        }
    });
}

/* ---- softmax and cross-entropy --------------------------------------------------------------- */

/* Three passes over a row that stays in L1/L2: max, exp + sum, scale by 1 / sum. */
void k_softmax(float *y, const float *x, int M, int C) {
    KT_FOR(ROW_TEAM(M, C),
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float mx = max_lanes(xi, C);
        for (int c = 0; c < C; c++) yi[c] = vexp_nonpos(xi[c] - mx); /* elementwise: aliasing is safe */
        float inv = 1.0f / sum_lanes(yi, C);
        for (int c = 0; c < C; c++) yi[c] *= inv;
    });
}

/* log sum_j exp(l_j), max-subtracted, lane sums. */
static float logsumexp(const float *l, int V) {
    float mx = max_lanes(l, V);
    float acc[LANES];
    for (int k = 0; k < LANES; k++) acc[k] = 0.0f;
    int j = 0;
    for (; j + LANES <= V; j += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += vexp_nonpos(l[j + k] - mx);
    float s = 0.0f;
    for (; j < V; j++) s += vexp_nonpos(l[j] - mx);
    s += lanes_total(acc);
    return mx + vlog(s);
}

/* Rows are independent; logits are only read, never materialised as probabilities. */
void k_xent_fwd(float *loss, const float *logits, const int *targets, int M, int V, int ignore) {
    KT_FOR(ROW_TEAM(M, V),
    for (int i = 0; i < M; i++) {
        int t = targets[i];
        if (t == ignore) {
            loss[i] = 0.0f;
            continue;
        }
        CHECK(t >= 0 && t < V, "xent: target %d out of range [0, %d) at row %d", t, V, i);
        const float *l = logits + (size_t)i * V;
        loss[i] = logsumexp(l, V) - l[t];
    });
}

void k_xent_bwd(float *dlogits, const float *logits, const int *targets, const float *dloss, int M,
                int V, int ignore) {
    KT_FOR(ROW_TEAM(M, V),
    for (int i = 0; i < M; i++) {
        int t = targets[i];
        if (t == ignore) continue;
        CHECK(t >= 0 && t < V, "xent: target %d out of range [0, %d) at row %d", t, V, i);
        const float *l = logits + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        float lse = logsumexp(l, V), g = dloss[i];
        /* softmax as exp(l - lse) directly: no second normalising pass */
        for (int j = 0; j < V; j++) d[j] += g * vexp_nonpos(l[j] - lse);
        d[t] -= g;
    });
}

/* ---- activations ----------------------------------------------------------------------------- */

/* Elementwise kernels: one vectorised loop, split statically over threads when large. */
void k_silu_fwd(float *y, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] = vsilu(x[i]));
}

void k_silu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) dx[i] += dy[i] * silu_grad(x[i]));
}

void k_swiglu_fwd(float *y, const float *a, const float *b, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] = vsilu(a[i]) * b[i]);
}

void k_swiglu_bwd(float *da, float *db, const float *dy, const float *a, const float *b, size_t n) {
    /* separate loops keep each one branch-free and vectorised */
    if (da) {
        KT_FOR(ELEM_TEAM(n),
        for (size_t i = 0; i < n; i++) da[i] += dy[i] * b[i] * silu_grad(a[i]));
    }
    if (db) {
        KT_FOR(ELEM_TEAM(n),
        for (size_t i = 0; i < n; i++) db[i] += dy[i] * vsilu(a[i]));
    }
}

/* ---- gates ----------------------------------------------------------------------------------- */

/* One row of a gate: yi[c] = EXPR(v) with v = xi[c] + bias[c] (or xi[c]), as two loops so that
 * each is branch-free and vectorises. */
#define GATE_ROW(EXPR)                                                                              \
    do {                                                                                            \
        const float *xi = x + (size_t)i * C;                                                        \
        float *yi = y + (size_t)i * C;                                                              \
        if (bias)                                                                                   \
            for (int c = 0; c < C; c++) {                                                           \
                float v = xi[c] + bias[c];                                                          \
                yi[c] = EXPR;                                                                       \
            }                                                                                       \
        else                                                                                        \
            for (int c = 0; c < C; c++) {                                                           \
                float v = xi[c];                                                                    \
                yi[c] = EXPR;                                                                       \
            }                                                                                       \
    } while (0)

void k_softplus(float *y, const float *x, const float *bias, int M, int C) {
    KT_FOR(kt_team((double)M * C * KT_NS_ELEM, M),
    for (int i = 0; i < M; i++) vsoftplus_n(y + (size_t)i * C, x + (size_t)i * C, bias, (size_t)C));
}

void k_sigmoid(float *y, const float *x, const float *bias, int M, int C) {
    KT_FOR(kt_team((double)M * C * KT_NS_ELEM, M),
    for (int i = 0; i < M; i++) GATE_ROW(vsigmoid(v)));
}

void k_mul_sigmoid(float *y, const float *x, const float *bias, int M, int C) {
    KT_FOR(kt_team((double)M * C * KT_NS_ELEM, M),
    for (int i = 0; i < M; i++) GATE_ROW(yi[c] * vsigmoid(v)));
}

void k_mul_silu(float *y, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] *= vsilu(x[i]));
}

void k_neg_exp(float *y, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] = -vexp(x[i]));
}

void k_mul_dsilu(float *y, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] *= silu_grad(x[i]));
}

void k_mul_dsigmoid(float *y, const float *x, size_t n) {
    KT_FOR(ELEM_TEAM(n),
    for (size_t i = 0; i < n; i++) y[i] *= vsigmoid(x[i]) * vsigmoid(-x[i]));
}

/* softplus'(x) = 1 - e^-softplus(x) = -expm1(-sp), in vmath.h's blocks of two passes */
void k_mul_dsoftplus_out(float *y, const float *sp, size_t n) {
    size_t nblk = (n + VM_BLOCK - 1) / VM_BLOCK;
    KT_FOR(ELEM_TEAM(n),
    for (size_t b = 0; b < nblk; b++) {
        size_t i0 = b * VM_BLOCK, m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;
        float g[VM_BLOCK];
        vexpm1_n(g, sp + i0, -1.0f, m);
        for (size_t j = 0; j < m; j++) y[i0 + j] *= g[j];
    });
}
