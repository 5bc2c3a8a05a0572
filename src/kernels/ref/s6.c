/* ref/s6.c: scalar reference of the Mamba-1 selective scan S6 (spec fp-rnn §3.1, §3.5, §5.2).
 *
 * One (b, i) channel at a time, in time order, with its N states:
 *   H_t[j] = exp(dt_t A[j]) H_{t-1}[j] + dt_t Bm_t[j] x_t;   y_t = sum_j Cm_t[j] H_t[j] + D x_t
 * and the reverse-time backward of §3.5 with G_t = ∂L/∂H_t:
 *   G_t[j] = dy_t Cm_t[j] + a_{t+1}[j] G_{t+1}[j]          (a_t[j] = exp(dt_t A[j]))
 *   dCm_t[j] += dy_t H_t[j];   dBm_t[j] += G_t[j] dt_t x_t;   dx_t += D dy_t + dt_t sum_j G_t[j] Bm_t[j]
 *   ddt_t += sum_j G_t[j] (Bm_t[j] x_t + A[j] a_t[j] H_{t-1}[j]);   dA[j] += sum_t G_t[j] dt_t a_t[j] H_{t-1}[j]
 *   dD += sum_t dy_t x_t
 * Single-threaded, no BLAS. The sums the fast version orders differently (over j, over t, over
 * channels and sequences) are accumulated in double, so this file is the more accurate side of
 * every parity test. The backward keeps every state of one channel, (T+1)*N floats, in a buffer
 * malloc'd per call (the fast version uses bounded persistent scratch instead).
 * Out of scope: an initial state (the scan starts from 0), gradients on the final state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"

static void check_dims(int B, int T, int E, int N) {
    CHECK(B >= 0 && T >= 0 && E > 0 && N > 0, "s6: bad dims B=%d T=%d E=%d N=%d", B, T, E, N);
}

/* Index of (sequence b, token t, channel i, state j) in a decay table (kernels.h). */
static size_t decay_index(int b, int t, int i, int j, int T, int E, int N) {
    const size_t S = K_S6_GROUP, per = K_S6_BLOCK / K_S6_GROUP, G = ((size_t)E + S - 1) / S;
    size_t g = (size_t)i / S, k = g / per, q = g % per, n_k = G - per * k < per ? G - per * k : per;
    return (size_t)b * T * G * N * S + k * T * per * N * S + (size_t)t * n_k * N * S + q * N * S + (size_t)j * S +
           (size_t)i % S;
}

void k_s6_decay_ref(float *a, const float *dt, const float *A, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    memset(a, 0, sizeof(float) * k_s6_decay_floats(B, T, E, N)); /* the padding lanes */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < E; i++)
                for (int j = 0; j < N; j++)
                    a[decay_index(b, t, i, j, T, E, N)] = expf(dt[((size_t)b * T + t) * E + i] * A[(size_t)i * N + j]);
}

/* exp(dt_t A[j]) of sequence b, token t, channel i: from the table when there is one */
static float decay_at(const float *decay, float d, float Aij, int b, int t, int i, int j, int T, int E, int N) {
    return decay ? decay[decay_index(b, t, i, j, T, E, N)] : expf(d * Aij);
}

void k_s6_fwd_ref(float *y, float *h_out, const float *x, const float *dt, const float *A, const float *decay,
                  const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    float *h = malloc(sizeof(float) * (size_t)N); /* (N) running state of one channel */
    CHECK(h, "s6_fwd_ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            const float *Ai = A + (size_t)i * N;
            memset(h, 0, sizeof(float) * (size_t)N);
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t, r = bt * E + i;
                const float *bm = Bm + bt * N, *cm = Cm + bt * N;
                float d = dt[r], xv = x[r];
                double acc = 0;
                for (int j = 0; j < N; j++) {
                    h[j] = decay_at(decay, d, Ai[j], b, t, i, j, T, E, N) * h[j] + d * bm[j] * xv;
                    acc += (double)cm[j] * h[j];
                }
                if (D) acc += (double)D[i] * xv;
                y[r] = (float)acc;
            }
            if (h_out) memcpy(h_out + ((size_t)b * E + i) * N, h, sizeof(float) * (size_t)N);
        }
    free(h);
}

void k_s6_bwd_ref(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                  const float *dy, const float *x, const float *dt, const float *A,
                  const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    if (T == 0 || B == 0) return;
    size_t nN = (size_t)N;
    /* Hs: (T+1, N) states of one channel, row 0 = H_0 = 0; G: (N) running ∂L/∂H_t;
     * dBmd, dCmd: (B,T,N) and dAd: (E,N) in double, added to the outputs at the end */
    float *Hs = malloc(sizeof(float) * (size_t)(T + 1) * nN);
    double *G = malloc(sizeof(double) * nN);
    size_t nbc = (size_t)B * T * nN;
    double *dBmd = dBm ? calloc(nbc, sizeof(double)) : NULL;
    double *dCmd = dCm ? calloc(nbc, sizeof(double)) : NULL;
    double *dAd = dA ? calloc((size_t)E * nN, sizeof(double)) : NULL;
    CHECK(Hs && G && (!dBm || dBmd) && (!dCm || dCmd) && (!dA || dAd), "s6_bwd_ref: out of memory");
    for (int i = 0; i < E; i++) {
        const float *Ai = A + (size_t)i * N;
        double dDacc = 0;
        for (int b = 0; b < B; b++) {
            memset(Hs, 0, sizeof(float) * nN);
            for (int t = 0; t < T; t++) { /* the forward recurrence, every state kept */
                size_t bt = (size_t)b * T + t, r = bt * E + i;
                const float *bm = Bm + bt * N;
                float d = dt[r], xv = x[r];
                float *hp = Hs + (size_t)t * N, *hc = hp + N;
                for (int j = 0; j < N; j++) hc[j] = expf(d * Ai[j]) * hp[j] + d * bm[j] * xv;
            }
            for (int j = 0; j < N; j++) G[j] = 0;
            for (int t = T - 1; t >= 0; t--) {
                size_t bt = (size_t)b * T + t, r = bt * E + i;
                const float *bm = Bm + bt * N, *cm = Cm + bt * N;
                const float *hp = Hs + (size_t)t * N, *hc = hp + N;
                double d = dt[r], xv = x[r], g = dy[r];
                double gx = D ? D[i] * g : 0, gdt = 0;
                for (int j = 0; j < N; j++) {
                    /* G holds a_{t+1} G_{t+1} from the previous (later) step */
                    double Gj = g * cm[j] + G[j];
                    double a = exp(d * Ai[j]);
                    if (dCmd) dCmd[bt * N + j] += g * hc[j];
                    if (dBmd) dBmd[bt * N + j] += Gj * d * xv;
                    gx += d * Gj * bm[j];
                    gdt += Gj * (bm[j] * xv + Ai[j] * a * hp[j]);
                    if (dAd) dAd[(size_t)i * N + j] += Gj * d * a * hp[j];
                    G[j] = a * Gj;
                }
                if (dx) dx[r] += (float)gx;
                if (ddt) ddt[r] += (float)gdt;
                dDacc += g * xv;
            }
        }
        if (dD) dD[i] += (float)dDacc;
    }
    for (size_t k = 0; dBm && k < nbc; k++) dBm[k] += (float)dBmd[k];
    for (size_t k = 0; dCm && k < nbc; k++) dCm[k] += (float)dCmd[k];
    for (size_t k = 0; dA && k < (size_t)E * nN; k++) dA[k] += (float)dAd[k];
    free(Hs); free(G); free(dBmd); free(dCmd); free(dAd);
}

void k_s6_step_decay_ref(float *a, const float *dt, const float *A, int B, int E, int N) {
    check_dims(B, 1, E, N);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++)
            for (int j = 0; j < N; j++)
                a[((size_t)b * E + i) * N + j] = expf(dt[(size_t)b * E + i] * A[(size_t)i * N + j]);
}

void k_s6_step_ref(float *y, float *h_out, const float *h_in, const float *x, const float *dt,
                   const float *A, const float *decay, const float *Bm, const float *Cm, const float *D,
                   int B, int E, int N) {
    check_dims(B, 1, E, N);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < E; i++) {
            size_t r = (size_t)b * E + i;
            const float *Ai = A + (size_t)i * N, *hi = h_in + r * N;
            const float *bm = Bm + (size_t)b * N, *cm = Cm + (size_t)b * N;
            float d = dt[r], xv = x[r];
            double acc = 0;
            for (int j = 0; j < N; j++) {
                float a = decay ? decay[r * N + j] : expf(d * Ai[j]);
                float hn = a * hi[j] + d * bm[j] * xv;
                acc += (double)cm[j] * hn;
                if (h_out) h_out[r * N + j] = hn; /* h_out may be h_in: element j is read first */
            }
            if (D) acc += (double)D[i] * xv;
            y[r] = (float)acc;
        }
}
