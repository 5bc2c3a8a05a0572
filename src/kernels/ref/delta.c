/* ref/delta.c: scalar reference of the delta-rule recurrence behind DeltaNet, Gated DeltaNet and
 * (Gated) DeltaProduct (spec fp-rnn §5.4, §5.5); contract in kernels.h (k_delta_*).
 *
 * One (b, h) at a time, token by token, the state S:(K, V) held in double:
 *   S <- exp(g_t) S;   for j: u = S^T k_j,  S <- S + beta_j k_j (v_j - u)^T;   o_t = S^T q_t
 * The backward stores every state the reverse pass reads (the state entering each sub-step and
 * the state after each token: (T (nh + 1)) K V doubles per (b, h), malloc'd and freed) and walks
 * time backwards with the adjoint of each sub-step, with dS = dL/dS after the sub-step:
 *   p = dS^T k,  r = dS e  (e = v - u):   dbeta += k . r;   dk += beta (r - S_pre p);
 *   dv += beta p;   dS <- dS - beta k p^T;     gate:  dg += exp(g) <dS, S_prev>,  dS <- exp(g) dS
 *   output:  dq += S_t do;   dS += q do^T.
 * Single-threaded, no BLAS, nothing clever: this file is the oracle of the parity tests.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"

static void check_dims(int B, int T, int H, int nh, int K, int V) {
    CHECK(B >= 0 && T >= 0 && H > 0 && nh > 0 && K > 0 && V > 0,
          "delta: bad dims B=%d T=%d H=%d nh=%d K=%d V=%d", B, T, H, nh, K, V);
}

/* Row pointers of token t of sequence b, head h (layouts of kernels.h). */
typedef struct {
    const float *q, *k, *v, *beta, *g;
    int T, H, nh, K, V;
} Seq;

static const float *q_at(const Seq *s, int b, int t, int h) {
    return s->q + (((size_t)b * s->T + t) * s->H + h) * s->K;
}
static const float *k_at(const Seq *s, int b, int t, int j, int h) {
    return s->k + ((((size_t)b * s->T + t) * s->nh + j) * s->H + h) * s->K;
}
static const float *v_at(const Seq *s, int b, int t, int j, int h) {
    return s->v + ((((size_t)b * s->T + t) * s->nh + j) * s->H + h) * s->V;
}
static size_t beta_idx(const Seq *s, int b, int t, int j, int h) {
    return (((size_t)b * s->T + t) * s->nh + j) * s->H + h;
}
static size_t g_idx(const Seq *s, int b, int t, int h) { return ((size_t)b * s->T + t) * s->H + h; }

/* One token on S (K, V), double. pre:(nh, K, V)|NULL receives the state entering each sub-step. */
static void token(double *S, double *pre, const Seq *s, int b, int t, int h) {
    const int K = s->K, V = s->V;
    if (s->g) {
        double a = exp((double)s->g[g_idx(s, b, t, h)]);
        for (int i = 0; i < K * V; i++) S[i] *= a;
    }
    for (int j = 0; j < s->nh; j++) {
        const float *k = k_at(s, b, t, j, h), *v = v_at(s, b, t, j, h);
        double beta = s->beta[beta_idx(s, b, t, j, h)];
        if (pre) memcpy(pre + (size_t)j * K * V, S, sizeof(double) * K * V);
        for (int c = 0; c < V; c++) {
            double u = 0;
            for (int a = 0; a < K; a++) u += (double)k[a] * S[a * V + c];
            double e = (double)v[c] - u;
            for (int a = 0; a < K; a++) S[a * V + c] += beta * k[a] * e;
        }
    }
}

/* o = S^T q */
static void readout(float *o, const double *S, const float *q, int K, int V) {
    for (int c = 0; c < V; c++) {
        double acc = 0;
        for (int a = 0; a < K; a++) acc += (double)q[a] * S[a * V + c];
        o[c] = (float)acc;
    }
}

void k_delta_fwd_ref(float *o, float *S_out, const float *q, const float *k, const float *v,
                     const float *beta, const float *g, int B, int T, int H, int nh, int K, int V) {
    check_dims(B, T, H, nh, K, V);
    Seq s = {q, k, v, beta, g, T, H, nh, K, V};
    double *S = malloc(sizeof(double) * K * V);
    CHECK(S, "delta ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            memset(S, 0, sizeof(double) * K * V);
            for (int t = 0; t < T; t++) {
                token(S, NULL, &s, b, t, h);
                readout(o + (((size_t)b * T + t) * H + h) * V, S, q_at(&s, b, t, h), K, V);
            }
            if (S_out)
                for (int i = 0; i < K * V; i++) S_out[((size_t)b * H + h) * K * V + i] = (float)S[i];
        }
    free(S);
}

void k_delta_bwd_ref(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                     const float *q, const float *k, const float *v, const float *beta,
                     const float *g, int B, int T, int H, int nh, int K, int V) {
    check_dims(B, T, H, nh, K, V);
    Seq s = {q, k, v, beta, g, T, H, nh, K, V};
    const size_t KV = (size_t)K * V;
    /* post:(T+1, K, V): post[t+1] = state after token t, post[0] = 0;  pre:(T, nh, K, V) */
    double *post = malloc(sizeof(double) * (T + 1) * KV), *pre = malloc(sizeof(double) * ((size_t)T * nh + 1) * KV);
    double *dS = malloc(sizeof(double) * KV), *p = malloc(sizeof(double) * V), *e = malloc(sizeof(double) * V), *r = malloc(sizeof(double) * K);
    CHECK(post && pre && dS && p && e && r, "delta ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            memset(post, 0, sizeof(double) * KV);
            for (int t = 0; t < T; t++) {
                memcpy(post + (t + 1) * KV, post + t * KV, sizeof(double) * KV);
                token(post + (t + 1) * KV, pre + (size_t)t * nh * KV, &s, b, t, h);
            }
            memset(dS, 0, sizeof(double) * KV);
            for (int t = T - 1; t >= 0; t--) {
                const double *St = post + (t + 1) * KV;
                const float *qt = q_at(&s, b, t, h), *gy = dout + (((size_t)b * T + t) * H + h) * V;
                /* o = S_t^T q */
                for (int a = 0; a < K; a++) {
                    double acc = 0;
                    for (int c = 0; c < V; c++) acc += St[a * V + c] * gy[c];
                    if (dq) dq[(((size_t)b * T + t) * H + h) * K + a] += (float)acc;
                    for (int c = 0; c < V; c++) dS[a * V + c] += (double)qt[a] * gy[c];
                }
                for (int j = nh - 1; j >= 0; j--) {
                    const double *Sp = pre + ((size_t)t * nh + j) * KV;
                    const float *kj = k_at(&s, b, t, j, h), *vj = v_at(&s, b, t, j, h);
                    size_t bi = beta_idx(&s, b, t, j, h);
                    double bj = beta[bi], db = 0;
                    for (int c = 0; c < V; c++) {
                        double acc = 0, u = 0;
                        for (int a = 0; a < K; a++) acc += dS[a * V + c] * kj[a];
                        for (int a = 0; a < K; a++) u += (double)kj[a] * Sp[a * V + c];
                        p[c] = acc;
                        e[c] = (double)vj[c] - u;
                    }
                    for (int a = 0; a < K; a++) {
                        double acc = 0, sp = 0;
                        for (int c = 0; c < V; c++) {
                            acc += dS[a * V + c] * e[c];
                            sp += Sp[a * V + c] * p[c];
                        }
                        r[a] = acc;
                        db += kj[a] * acc;
                        if (dk) dk[(((((size_t)b * T + t) * nh + j) * H + h) * K) + a] += (float)(bj * (acc - sp));
                    }
                    if (dbeta) dbeta[bi] += (float)db;
                    if (dv)
                        for (int c = 0; c < V; c++) dv[(((((size_t)b * T + t) * nh + j) * H + h) * V) + c] += (float)(bj * p[c]);
                    for (int a = 0; a < K; a++)
                        for (int c = 0; c < V; c++) dS[a * V + c] -= bj * kj[a] * p[c];
                }
                if (g) {
                    const double *Sprev = post + t * KV;
                    double a = exp((double)g[g_idx(&s, b, t, h)]), acc = 0;
                    for (size_t i = 0; i < KV; i++) acc += dS[i] * Sprev[i];
                    if (dg) dg[g_idx(&s, b, t, h)] += (float)(acc * a);
                    for (size_t i = 0; i < KV; i++) dS[i] *= a;
                }
            }
        }
    free(post); free(pre); free(dS); free(p); free(e); free(r);
}

void k_delta_step_ref(float *o, float *S_out, const float *S_in, const float *q, const float *k,
                      const float *v, const float *beta, const float *g, int B, int H, int nh, int K,
                      int V) {
    check_dims(B, 1, H, nh, K, V);
    Seq s = {q, k, v, beta, g, 1, H, nh, K, V};
    const size_t KV = (size_t)K * V;
    double *S = malloc(sizeof(double) * KV);
    CHECK(S, "delta ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *si = S_in + ((size_t)b * H + h) * KV;
            for (size_t i = 0; i < KV; i++) S[i] = si[i];
            token(S, NULL, &s, b, 0, h);
            readout(o + ((size_t)b * H + h) * V, S, q_at(&s, b, 0, h), K, V);
            if (S_out)
                for (size_t i = 0; i < KV; i++) S_out[((size_t)b * H + h) * KV + i] = (float)S[i];
        }
    free(S);
}
