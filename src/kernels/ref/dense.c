/* ref/dense.c: scalar references for every dense (non-GEMM, non-sequence-mixing) kernel of
 * kernels.h: weight norm (spec implicit-lm §6), RMSNorm and gated RMSNorm (§1.2), softmax,
 * cross-entropy, SiLU/SwiGLU, embedding, causal depthwise conv1d (§1.4), LSTM cell, AdamW,
 * sum of squares and axpby.
 *
 * Each is the formula from the kernels.h contract written as plain loops: single-threaded,
 * no BLAS, libm transcendental functions, float arithmetic in the obvious order (double only
 * where the contract says so). Backward kernels accumulate (+=) and skip NULL gradients.
 * Out of scope: speed (see cpu/dense.c), SSD/RoPE/attention (other files).
 */
#include "../kernels.h"

#include <math.h>
#include <string.h>

#include "../../core/check.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float siluf(float x) { return x * sigmoidf(x); }
/* d silu / dx = s (1 + x (1 - s)) */
static float silu_grad(float x) {
    float s = sigmoidf(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---- weight normalisation ------------------------------------------------------------------ */

/* Per row: the factor W_i / v_i, whether it was clipped, and ||v_i||. */
static float wn_factor(const float *g, const float *v, int i, int C, float target, float clip,
                       float *norm, int *clipped) {
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += v[(size_t)i * C + c] * v[(size_t)i * C + c];
    *norm = sqrtf(ss);
    *clipped = 0;
    if (*norm == 0.0f) return 0.0f; /* W_i = 0 for a zero row (no direction to keep) */
    float f = (g ? g[i] : target) / *norm;
    if (clip > 0.0f && f > clip) {
        f = clip;
        *clipped = 1;
    }
    return f;
}

/* W_i = f_i v_i with f_i = s_i / ||v_i|| (or clip), s_i = g_i or target. */
void k_weightnorm_fwd_ref(float *W, const float *g, const float *v, int R, int C, float target,
                          float clip) {
    for (int i = 0; i < R; i++) {
        float norm;
        int clipped;
        float f = wn_factor(g, v, i, C, target, clip, &norm, &clipped);
        for (int c = 0; c < C; c++) W[(size_t)i * C + c] = f * v[(size_t)i * C + c];
    }
}

/* With W_i = s v_i / ||v_i||: dW/ds = v_i / ||v_i||, and the Jacobian in v_i is
 * (s / ||v_i||)(I - v_i v_i^T / ||v_i||^2), a projection off the radial direction. */
void k_weightnorm_bwd_ref(float *dg, float *dv, const float *dW, const float *g, const float *v,
                          int R, int C, float target, float clip) {
    for (int i = 0; i < R; i++) {
        float norm;
        int clipped;
        float f = wn_factor(g, v, i, C, target, clip, &norm, &clipped);
        if (norm == 0.0f) continue; /* W_i = 0 is constant near v_i = 0: no gradient */
        const float *dWi = dW + (size_t)i * C, *vi = v + (size_t)i * C;
        if (clipped) { /* W_i = clip * v_i: a plain scaling, g has no influence */
            if (dv)
                for (int c = 0; c < C; c++) dv[(size_t)i * C + c] += f * dWi[c];
            continue;
        }
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += dWi[c] * vi[c];
        if (g && dg) dg[i] += dot / norm;
        if (dv) {
            float proj = dot / (norm * norm);
            for (int c = 0; c < C; c++) dv[(size_t)i * C + c] += f * (dWi[c] - proj * vi[c]);
        }
    }
}

/* ---- RMSNorm and gated RMSNorm --------------------------------------------------------------- */

/* y = x r w,  r = (sum(x^2) / C + eps)^-1/2 per row (spec §1.2). */
void k_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *w, int M, int C, float eps) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xi[c] * xi[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        if (rstd) rstd[i] = r;
        for (int c = 0; c < C; c++) y[(size_t)i * C + c] = xi[c] * r * w[c];
    }
}

/* dy/dx = r diag(w) - (r^3 / C) (dy w) x^T per row: the second term comes through r. */
void k_rmsnorm_bwd_ref(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int M, int C) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
        float r = rstd[i];
        if (dx) {
            float s = 0.0f; /* sum(a * x), a = dy * w */
            for (int c = 0; c < C; c++) s += dyi[c] * w[c] * xi[c];
            float k = r * r * r / (float)C * s;
            for (int c = 0; c < C; c++) dx[(size_t)i * C + c] += r * dyi[c] * w[c] - k * xi[c];
        }
        if (dw)
            for (int c = 0; c < C; c++) dw[c] += dyi[c] * xi[c] * r;
    }
}

/* norm_before_gate = false: gate first, v = x silu(z), then RMSNorm of v (spec §1.2). */
void k_gated_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *z, const float *w,
                             int M, int C, float eps) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C, *zi = z + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) {
            float v = xi[c] * siluf(zi[c]);
            ss += v * v;
        }
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        if (rstd) rstd[i] = r;
        for (int c = 0; c < C; c++) y[(size_t)i * C + c] = xi[c] * siluf(zi[c]) * r * w[c];
    }
}

/* The RMSNorm backward applied to v = x silu(z), then the chain rule through the gate. */
void k_gated_rmsnorm_bwd_ref(float *dx, float *dz, float *dw, const float *dy, const float *x,
                             const float *z, const float *w, const float *rstd, int M, int C) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C, *zi = z + (size_t)i * C, *dyi = dy + (size_t)i * C;
        float r = rstd[i];
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += dyi[c] * w[c] * xi[c] * siluf(zi[c]);
        float k = r * r * r / (float)C * s;
        for (int c = 0; c < C; c++) {
            float v = xi[c] * siluf(zi[c]);
            float dv = r * dyi[c] * w[c] - k * v;
            if (dx) dx[(size_t)i * C + c] += dv * siluf(zi[c]);
            if (dz) dz[(size_t)i * C + c] += dv * xi[c] * silu_grad(zi[c]);
            if (dw) dw[c] += dyi[c] * v * r;
        }
    }
}

/* ---- softmax and cross-entropy --------------------------------------------------------------- */

/* y = exp(x - max x) / sum exp(x - max x): the max keeps exp from overflowing. */
/* LayerNorm, one row at a time, statistics in double. */
void k_layernorm_fwd_ref(float *y, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int M, int C, float eps) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        double s = 0, s2 = 0;
        for (int c = 0; c < C; c++) s += xi[c];
        double mu = s / C;
        for (int c = 0; c < C; c++) s2 += (xi[c] - mu) * (xi[c] - mu);
        float r = (float)(1.0 / sqrt(s2 / C + eps)), m = (float)mu;
        for (int c = 0; c < C; c++) y[(size_t)i * C + c] = (xi[c] - m) * r * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = r;
    }
}

void k_layernorm_bwd_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mean, const float *rstd, int M, int C) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C, *gi = dy + (size_t)i * C;
        double a = 0, bs = 0; /* mean(dy w) and mean(dy w xh), times C */
        for (int c = 0; c < C; c++) {
            double xh = (xi[c] - mean[i]) * rstd[i];
            a += (double)gi[c] * w[c];
            bs += (double)gi[c] * w[c] * xh;
        }
        for (int c = 0; c < C; c++) {
            float xh = (xi[c] - mean[i]) * rstd[i];
            if (dx) dx[(size_t)i * C + c] += rstd[i] * (gi[c] * w[c] - (float)(a / C) - xh * (float)(bs / C));
        }
    }
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

void k_softmax_ref(float *y, const float *x, int M, int C) {
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float mx = -INFINITY;
        for (int c = 0; c < C; c++) mx = xi[c] > mx ? xi[c] : mx;
        float sum = 0.0f;
        for (int c = 0; c < C; c++) {
            yi[c] = expf(xi[c] - mx);
            sum += yi[c];
        }
        for (int c = 0; c < C; c++) yi[c] /= sum;
    }
}

/* log(sum_j exp(l_j)), max-subtracted. */
static float logsumexp(const float *l, int V) {
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j < V; j++) sum += expf(l[j] - mx);
    return mx + logf(sum);
}

/* loss = -log softmax(l)[t] = logsumexp(l) - l[t]. */
void k_xent_fwd_ref(float *loss, const float *logits, const int *targets, int M, int V, int ignore) {
    for (int i = 0; i < M; i++) {
        int t = targets[i];
        if (t == ignore) {
            loss[i] = 0.0f;
            continue;
        }
        CHECK(t >= 0 && t < V, "xent: target %d out of range [0, %d) at row %d", t, V, i);
        const float *l = logits + (size_t)i * V;
        loss[i] = logsumexp(l, V) - l[t];
    }
}

/* d loss / d l = softmax(l) - onehot(t), scaled by the incoming dloss. */
void k_xent_bwd_ref(float *dlogits, const float *logits, const int *targets, const float *dloss,
                    int M, int V, int ignore) {
    for (int i = 0; i < M; i++) {
        int t = targets[i];
        if (t == ignore) continue;
        CHECK(t >= 0 && t < V, "xent: target %d out of range [0, %d) at row %d", t, V, i);
        const float *l = logits + (size_t)i * V;
        float lse = logsumexp(l, V);
        for (int j = 0; j < V; j++) {
            float p = expf(l[j] - lse);
            dlogits[(size_t)i * V + j] += dloss[i] * (p - (j == t ? 1.0f : 0.0f));
        }
    }
}

/* ---- activations ----------------------------------------------------------------------------- */

void k_silu_fwd_ref(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = siluf(x[i]);
}

void k_silu_bwd_ref(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] += dy[i] * silu_grad(x[i]);
}

void k_swiglu_fwd_ref(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = siluf(a[i]) * b[i];
}

void k_swiglu_bwd_ref(float *da, float *db, const float *dy, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (da) da[i] += dy[i] * b[i] * silu_grad(a[i]);
        if (db) db[i] += dy[i] * siluf(a[i]);
    }
}

/* torch's softplus: threshold 20 */
static float softplusf(float v) { return v > 20.0f ? v : log1pf(expf(v)); }
static float bias_at(const float *bias, int c) { return bias ? bias[c] : 0.0f; }

void k_softplus_ref(float *y, const float *x, const float *bias, int M, int C) {
    for (size_t i = 0; i < (size_t)M; i++)
        for (int c = 0; c < C; c++) y[i * C + c] = softplusf(x[i * C + c] + bias_at(bias, c));
}

void k_sigmoid_ref(float *y, const float *x, const float *bias, int M, int C) {
    for (size_t i = 0; i < (size_t)M; i++)
        for (int c = 0; c < C; c++) y[i * C + c] = sigmoidf(x[i * C + c] + bias_at(bias, c));
}

void k_mul_sigmoid_ref(float *y, const float *x, const float *bias, int M, int C) {
    for (size_t i = 0; i < (size_t)M; i++)
        for (int c = 0; c < C; c++) y[i * C + c] *= sigmoidf(x[i * C + c] + bias_at(bias, c));
}

void k_mul_silu_ref(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= siluf(x[i]);
}

void k_neg_exp_ref(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = -expf(x[i]);
}

void k_mul_dsilu_ref(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= silu_grad(x[i]);
}

void k_mul_dsigmoid_ref(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= sigmoidf(x[i]) * sigmoidf(-x[i]);
}

void k_mul_dsoftplus_out_ref(float *y, const float *sp, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= -expm1f(-sp[i]);
}

/* ---- embedding ------------------------------------------------------------------------------- */

void k_embed_fwd_ref(float *y, const int *ids, const float *E, int M, int V, int D) {
    for (int i = 0; i < M; i++) {
        CHECK(ids[i] >= 0 && ids[i] < V, "embed: id %d out of range [0, %d) at %d", ids[i], V, i);
        memcpy(y + (size_t)i * D, E + (size_t)ids[i] * D, (size_t)D * sizeof(float));
    }
}

/* Row order i = 0..M-1 is the contract's deterministic order for repeated ids. */
void k_embed_bwd_ref(float *dE, const float *dy, const int *ids, int M, int V, int D) {
    for (int i = 0; i < M; i++) {
        CHECK(ids[i] >= 0 && ids[i] < V, "embed: id %d out of range [0, %d) at %d", ids[i], V, i);
        for (int d = 0; d < D; d++) dE[(size_t)ids[i] * D + d] += dy[(size_t)i * D + d];
    }
}

/* ---- causal depthwise conv1d ----------------------------------------------------------------- */

void k_conv1d_fwd_ref(float *y, const float *x, const float *w, const float *bias, int B, int T,
                      int C, int W) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float acc = bias ? bias[c] : 0.0f;
                for (int k = 0; k < W; k++) {
                    int ts = t - W + 1 + k; /* causal: inputs before t = 0 are zero padding */
                    if (ts >= 0) acc += w[(size_t)c * W + k] * x[((size_t)b * T + ts) * C + c];
                }
                y[((size_t)b * T + t) * C + c] = acc;
            }
}

void k_conv1d_silu_fwd_ref(float *y, float *ya, const float *x, const float *w, const float *bias, int B, int T,
                           int C, int W) {
    float *pre = y ? y : ya; /* the activation is elementwise: in place when y is not wanted */
    k_conv1d_fwd_ref(pre, x, w, bias, B, T, C, W);
    k_silu_fwd_ref(ya, pre, (size_t)B * T * C);
}

/* Each (b, t, c) output spreads dy back to the W inputs that produced it (dx) and to the
 * taps (dw): the transpose of the forward's gather. */
void k_conv1d_bwd_ref(float *dx, float *dw, float *dbias, const float *dy, const float *x,
                      const float *w, int B, int T, int C, int W) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float g = dy[((size_t)b * T + t) * C + c];
                if (dbias) dbias[c] += g;
                for (int k = 0; k < W; k++) {
                    int ts = t - W + 1 + k;
                    if (ts < 0) continue;
                    size_t xi = ((size_t)b * T + ts) * C + c;
                    if (dx) dx[xi] += w[(size_t)c * W + k] * g;
                    if (dw) dw[(size_t)c * W + k] += x[xi] * g;
                }
            }
}

void k_conv1d_step_ref(float *y, float *state_out, const float *state_in, const float *x,
                       const float *w, const float *bias, int B, int C, int W) {
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *s = state_in + ((size_t)b * C + c) * W;
            float xv = x[(size_t)b * C + c];
            /* window = s[1..W-1] followed by x */
            float acc = bias ? bias[c] : 0.0f;
            for (int k = 0; k + 1 < W; k++) acc += w[(size_t)c * W + k] * s[k + 1];
            acc += w[(size_t)c * W + W - 1] * xv;
            if (state_out) { /* ascending k reads s[k+1] before it is overwritten when aliased */
                float *so = state_out + ((size_t)b * C + c) * W;
                for (int k = 0; k + 1 < W; k++) so[k] = s[k + 1];
                so[W - 1] = xv;
            }
            y[(size_t)b * C + c] = acc;
        }
}

/* ---- LSTM cell ------------------------------------------------------------------------------- */

/* PyTorch nn.LSTMCell after its two matmuls: pre = [i f g o] blocks of Hd each. */
void k_lstm_cell_fwd_ref(float *h, float *c, float *act, const float *pre, const float *c_prev,
                         int B, int Hd) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hd; j++) {
            const float *p = pre + (size_t)b * 4 * Hd;
            float *a = act + (size_t)b * 4 * Hd;
            float ig = sigmoidf(p[j]), fg = sigmoidf(p[Hd + j]);
            float gg = tanhf(p[2 * Hd + j]), og = sigmoidf(p[3 * Hd + j]);
            a[j] = ig, a[Hd + j] = fg, a[2 * Hd + j] = gg, a[3 * Hd + j] = og;
            float cp = c_prev ? c_prev[(size_t)b * Hd + j] : 0.0f; /* NULL = zero initial cell */
            float cn = fg * cp + ig * gg;
            c[(size_t)b * Hd + j] = cn;
            h[(size_t)b * Hd + j] = og * tanhf(cn);
        }
}

/* sigmoid' = s (1 - s), tanh' = 1 - tanh^2; c = f c_prev + i g, h = o tanh(c). */
void k_lstm_cell_bwd_ref(float *dpre, float *dc_prev, const float *dh, const float *dc,
                         const float *act, const float *c_prev, const float *c, int B, int Hd) {
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hd; j++) {
            const float *a = act + (size_t)b * 4 * Hd;
            float ig = a[j], fg = a[Hd + j], gg = a[2 * Hd + j], og = a[3 * Hd + j];
            size_t bj = (size_t)b * Hd + j;
            float tc = tanhf(c[bj]);
            float cp = c_prev ? c_prev[bj] : 0.0f;
            /* total gradient on c: the direct one plus the path through h = o tanh(c) */
            float dct = (dc ? dc[bj] : 0.0f) + dh[bj] * og * (1.0f - tc * tc);
            if (dpre) {
                float *d = dpre + (size_t)b * 4 * Hd;
                d[j] += dct * gg * ig * (1.0f - ig);
                d[Hd + j] += dct * cp * fg * (1.0f - fg);
                d[2 * Hd + j] += dct * ig * (1.0f - gg * gg);
                d[3 * Hd + j] += dh[bj] * tc * og * (1.0f - og);
            }
            if (dc_prev) dc_prev[bj] += dct * fg;
        }
}

/* ---- optimisation and vector helpers --------------------------------------------------------- */

/* torch.optim.AdamW, one step (decay applied to p before the Adam update). */
void k_adamw_ref(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                 float b2, float eps, float wd, float gscale, int t) {
    CHECK(t >= 1, "adamw: step t = %d must be >= 1", t);
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= lr * wd * p[i];
        float mh = m[i] / bc1, vh = v[i] / bc2;
        p[i] -= lr * mh / (sqrtf(vh) + eps);
    }
}

/* double accumulation: the global grad norm must not lose small tensors next to big ones. */
double k_sumsq_ref(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

double k_resid_rel_inf_ref(const float *y, const float *F, size_t per, size_t tok, double eps) {
    double worst = 0;
    for (size_t t0 = 0; t0 < per; t0 += tok) {
        double dmax = 0, fmax = 0;
        for (size_t i = t0; i < t0 + tok; i++) {
            double f = F[i];
            if (!isfinite(f)) return NAN;
            double d = fabs((double)y[i] - f), a = fabs(f);
            if (d > dmax) dmax = d;
            if (a > fmax) fmax = a;
        }
        double r = dmax / (fmax + eps);
        if (r > worst) worst = r;
    }
    return worst;
}

void k_resid_sumsq_ref(const float *f, const float *x, size_t n, double out[2]) {
    double sd = 0.0, sf = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)f[i] - (double)x[i];
        sd += d * d;
        sf += (double)f[i] * (double)f[i];
    }
    out[0] = sd, out[1] = sf;
}

void k_axpby_ref(float *y, float a, const float *x, float b, size_t n) {
    /* b == 0 overwrites y without reading it (as GEMM's beta), so y may start uninitialised */
    for (size_t i = 0; i < n; i++) y[i] = b == 0.0f ? a * x[i] : a * x[i] + b * y[i];
}

void k_copy_rows_ref(float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t n, int add) {
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < n; i++) y[r * ldy + i] = add ? y[r * ldy + i] + x[r * ldx + i] : x[r * ldx + i];
}

void k_zero_ref(float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = 0.0f;
}

void k_foreach_ref(long n, double ns_per_item, KForeachFn fn, void *ctx) {
    (void)ns_per_item; /* the reference never forks */
    if (n > 0) fn(ctx, 0, n);
}
