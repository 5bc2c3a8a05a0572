/* ref/attn.c: scalar references of rotary embedding and causal softmax attention
 * (spec implicit-lm §1.5: rotate-half / NeoX RoPE, HF Llama default; no GQA, no scaling).
 *
 * RoPE angles are computed the way the PyTorch reference does, in float:
 *   inv_freq_i = 1 / theta^((2i)/HD),  angle = (float)p * inv_freq_i,  cos/sin of that float
 * (cos/sin evaluated in double and rounded, i.e. the correctly rounded float result). cpu/attn.c
 * uses the same helper formula, so fast and reference RoPE agree bit for bit.
 * Attention: o_t = sum_{s<=t} softmax_s(q_t.k_s / sqrt(HD)) v_s, lse_t saved for the backward,
 * which recomputes probabilities P_ts = exp(score_ts - lse_t) (flash-attention style):
 *   D_t = dO_t . O_t,  dP_ts = dO_t . v_s,  dS_ts = P_ts (dP_ts - D_t),
 *   dq_t += scale sum_s dS_ts k_s,  dk_s += scale sum_t dS_ts q_t,  dv_s += sum_t P_ts dO_t.
 * Dots and softmax sums are accumulated in double here (the fast side uses float).
 * Out of scope: masks other than causal, dropout on probabilities, GQA.
 */
#include <math.h>
#include <stdlib.h>

#include "../kernels.h"
#include "../../core/check.h"

/* cos and sin of the RoPE angle for position p and pair index i (exact float recipe above). */
static void rope_cs(int p, int i, int HD, float theta, float *c, float *s) {
    float e = (float)(2 * i) / (float)HD;
    float inv_freq = 1.0f / powf(theta, e);
    float ang = (float)p * inv_freq;
    *c = (float)cos((double)ang);
    *s = (float)sin((double)ang);
}

void k_rope_fwd_ref(float *y, const float *x, int B, int T, int NH, int HD, int pos0, float theta) {
    CHECK(HD > 0 && HD % 2 == 0, "rope: HD=%d must be even", HD);
    int half = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                size_t o = (((size_t)b * T + t) * NH + h) * HD;
                for (int i = 0; i < half; i++) {
                    float c, s;
                    rope_cs(pos0 + t, i, HD, theta, &c, &s);
                    float x1 = x[o + i], x2 = x[o + i + half]; /* read both first: y may alias x */
                    y[o + i] = x1 * c - x2 * s;
                    y[o + i + half] = x2 * c + x1 * s;
                }
            }
}

void k_rope_bwd_ref(float *dx, const float *dy, int B, int T, int NH, int HD, int pos0,
                    float theta) {
    CHECK(HD > 0 && HD % 2 == 0, "rope: HD=%d must be even", HD);
    int half = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                size_t o = (((size_t)b * T + t) * NH + h) * HD;
                for (int i = 0; i < half; i++) {
                    float c, s;
                    rope_cs(pos0 + t, i, HD, theta, &c, &s);
                    float g1 = dy[o + i], g2 = dy[o + i + half];
                    /* R = [[c, -s], [s, c]] per pair, so R^T = [[c, s], [-s, c]] */
                    dx[o + i] += g1 * c + g2 * s;
                    dx[o + i + half] += g2 * c - g1 * s;
                }
            }
}

static double dot_d(const float *a, const float *b, int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

void k_attn_fwd_ref(float *o, float *lse, const float *q, const float *k, const float *v,
                    int B, int T, int NH, int HD) {
    CHECK(B >= 0 && T >= 0 && NH > 0 && HD > 0, "attn: bad dims");
    double scale = 1.0 / sqrt((double)HD);
    double *sc = malloc(sizeof(double) * ((size_t)T + 1)); /* (T) scores of one query row */
    double *acc = malloc(sizeof(double) * (size_t)HD);
    CHECK(sc && acc, "attn_fwd_ref: out of memory");
    size_t rs = (size_t)NH * HD; /* stride between tokens */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *qb = q + (size_t)b * T * rs + (size_t)h * HD;
            const float *kb = k + (size_t)b * T * rs + (size_t)h * HD;
            const float *vb = v + (size_t)b * T * rs + (size_t)h * HD;
            for (int t = 0; t < T; t++) {
                double m = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    sc[s] = dot_d(qb + t * rs, kb + s * rs, HD) * scale;
                    if (sc[s] > m) m = sc[s];
                }
                for (int d = 0; d < HD; d++) acc[d] = 0;
                for (int s = 0; s <= t; s++) {
                    double p = exp(sc[s] - m);
                    sum += p;
                    for (int d = 0; d < HD; d++) acc[d] += p * vb[s * rs + d];
                }
                float *ot = o + (size_t)b * T * rs + t * rs + (size_t)h * HD;
                for (int d = 0; d < HD; d++) ot[d] = (float)(acc[d] / sum);
                if (lse) lse[((size_t)b * NH + h) * T + t] = (float)(m + log(sum));
            }
        }
    free(sc);
    free(acc);
}

void k_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *q,
                    const float *k, const float *v, const float *o, const float *lse,
                    int B, int T, int NH, int HD) {
    CHECK(B >= 0 && T >= 0 && NH > 0 && HD > 0, "attn: bad dims");
    double scale = 1.0 / sqrt((double)HD);
    size_t rs = (size_t)NH * HD;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t base = (size_t)b * T * rs + (size_t)h * HD;
            for (int t = 0; t < T; t++) {
                const float *qt = q + base + t * rs, *gt = dout + base + t * rs;
                double Dt = dot_d(gt, o + base + t * rs, HD);
                double l = lse[((size_t)b * NH + h) * T + t];
                for (int s = 0; s <= t; s++) {
                    const float *ks = k + base + s * rs, *vs = v + base + s * rs;
                    double p = exp(dot_d(qt, ks, HD) * scale - l);
                    double ds = p * (dot_d(gt, vs, HD) - Dt);
                    for (int d = 0; d < HD; d++) {
                        if (dv) dv[base + s * rs + d] += (float)(p * gt[d]);
                        if (dq) dq[base + t * rs + d] += (float)(ds * scale * ks[d]);
                        if (dk) dk[base + s * rs + d] += (float)(ds * scale * qt[d]);
                    }
                }
            }
        }
}

void k_attn_step_ref(float *o, const float *q, const float *k_new, const float *v_new,
                     const float *kcache, const float *vcache, int n_cached, int Tmax,
                     int B, int NH, int HD) {
    CHECK(n_cached >= 0 && n_cached <= Tmax, "attn_step: n_cached=%d Tmax=%d", n_cached, Tmax);
    double scale = 1.0 / sqrt((double)HD);
    double *sc = malloc(sizeof(double) * ((size_t)n_cached + 1)); /* scores; last = new key */
    double *acc = malloc(sizeof(double) * (size_t)HD);
    CHECK(sc && acc, "attn_step_ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t bh = (size_t)b * NH + h;
            const float *qh = q + bh * HD;
            /* (Tmax, HD) rows of this (b, head) */
            const float *kc = kcache + bh * Tmax * HD, *vc = vcache + bh * Tmax * HD;
            double m = -INFINITY, sum = 0;
            for (int s = 0; s <= n_cached; s++) {
                const float *ks = s < n_cached ? kc + (size_t)s * HD : k_new + bh * HD;
                sc[s] = dot_d(qh, ks, HD) * scale;
                if (sc[s] > m) m = sc[s];
            }
            for (int d = 0; d < HD; d++) acc[d] = 0;
            for (int s = 0; s <= n_cached; s++) {
                const float *vs = s < n_cached ? vc + (size_t)s * HD : v_new + bh * HD;
                double p = exp(sc[s] - m);
                sum += p;
                for (int d = 0; d < HD; d++) acc[d] += p * vs[d];
            }
            for (int d = 0; d < HD; d++) o[bh * HD + d] = (float)(acc[d] / sum);
        }
    free(sc);
    free(acc);
}
