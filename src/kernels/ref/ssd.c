/* ref/ssd.c: scalar reference of the Mamba2 SSD scan (spec implicit-lm §1.4), G = 1.
 *
 * The plain sequential scan, one (b, h) at a time:
 *   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t (x) B_t ;   y_t = S_t C_t + D_h x_t
 * its reverse-time backward (§1.4 "Backward of the scan", derivation in docs/derivations/ssd.md)
 * and the single-token step. Single-threaded, no BLAS; reductions that the fast version orders
 * differently (dots over N, sums over t and heads) are accumulated in double so that this file is
 * the more accurate side of every parity test.
 *
 * `saved` (shared meaning with cpu/ssd.c, see k_ssd_saved_floats): the state ENTERING each chunk
 * of SSD_CHUNK tokens, layout (B, H, nchunks, P, N), nchunks = ceil(T / SSD_CHUNK); entry c holds
 * S_{c*Q - 1} (h0 or 0 for c = 0). The reference backward does not need it: it recomputes every
 * S_t from h0 into a per-(b,h) scratch of (T+1)*P*N floats (malloc, freed before return).
 * Out of scope: ngroups > 1, dt clamping, the chunked form (that is cpu/ssd.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"

size_t k_ssd_saved_floats(int B, int T, int H, int P, int N) {
    size_t nchunks = T > 0 ? (size_t)(T + SSD_CHUNK - 1) / SSD_CHUNK : 0;
    return (size_t)B * (size_t)H * nchunks * (size_t)P * (size_t)N;
}

static void check_dims(int B, int T, int H, int P, int N) {
    CHECK(B >= 0 && T >= 0 && H > 0 && P > 0 && N > 0, "ssd: bad dims B=%d T=%d H=%d P=%d N=%d",
          B, T, H, P, N);
}

/* Forward scan for one (b, h): S:(P,N) holds the entry state and leaves holding S_{T-1}. */
static void scan_bh(float *y, float *saved_bh, float *S, const float *x, const float *dt, float A,
                    const float *Bm, const float *Cm, float Dh, int T, int H, int P, int N) {
    for (int t = 0; t < T; t++) {
        if (saved_bh && t % SSD_CHUNK == 0)
            memcpy(saved_bh + (size_t)(t / SSD_CHUNK) * P * N, S, sizeof(float) * P * N);
        const float *xt = x + (size_t)t * H * P;     /* (P) row of x:(B,T,H,P) at (b,t,h) */
        const float *bt = Bm + (size_t)t * N;         /* (N) */
        const float *ct = Cm + (size_t)t * N;         /* (N) */
        float dtt = dt[(size_t)t * H];
        float alpha = expf(dtt * A);
        for (int p = 0; p < P; p++) {
            float *Sp = S + (size_t)p * N;
            double acc = 0;
            for (int n = 0; n < N; n++) {
                Sp[n] = alpha * Sp[n] + dtt * xt[p] * bt[n];
                acc += (double)Sp[n] * ct[n];
            }
            y[(size_t)t * H * P + p] = (float)(acc + (double)Dh * xt[p]);
        }
    }
}

void k_ssd_fwd_ref(float *y, float *saved, float *hT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, int B, int T, int H, int P, int N) {
    check_dims(B, T, H, P, N);
    size_t PN = (size_t)P * N, nch = (size_t)(T + SSD_CHUNK - 1) / SSD_CHUNK;
    float *S = malloc(sizeof(float) * PN); /* (P, N) running state */
    CHECK(S, "ssd_fwd_ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t bh = (size_t)b * H + h;
            if (h0) memcpy(S, h0 + bh * PN, sizeof(float) * PN);
            else memset(S, 0, sizeof(float) * PN);
            scan_bh(y + (size_t)b * T * H * P + (size_t)h * P, saved ? saved + bh * nch * PN : NULL,
                    S, x + (size_t)b * T * H * P + (size_t)h * P, dt + (size_t)b * T * H + h, A[h],
                    Bm + (size_t)b * T * N, Cm + (size_t)b * T * N, Dskip[h], T, H, P, N);
            if (hT) memcpy(hT + bh * PN, S, sizeof(float) * PN);
        }
    free(S);
}

/* Per-(b,h) views and gradient outputs of the backward (all pointers already offset to (b,h)). */
typedef struct {
    const float *x, *dt, *Bm, *Cm, *dy; /* x,dy: stride H*P per t; dt: stride H; Bm,Cm: stride N */
    float *dx, *ddt, *dBm, *dCm;        /* same strides; any may be NULL */
    float A, Dh;
    int T, H, P, N;
} BhView;

/* Reverse-time recurrence for one (b,h). Sall:((T+1),P,N) holds S_{-1..T-1}; gS:(P,N) enters
 * holding dhT (or 0) and leaves holding dS_{-1} = dh0. dA_acc, dD_acc: per-head sums (double). */
static void bwd_bh(const BhView *v, const float *Sall, float *gS, double *dA_acc, double *dD_acc) {
    int H = v->H, P = v->P, N = v->N;
    size_t PN = (size_t)P * N;
    for (int t = v->T - 1; t >= 0; t--) {
        const float *xt = v->x + (size_t)t * H * P, *gy = v->dy + (size_t)t * H * P;
        const float *bt = v->Bm + (size_t)t * N, *ct = v->Cm + (size_t)t * N;
        const float *St = Sall + (size_t)(t + 1) * PN, *Sprev = Sall + (size_t)t * PN;
        float dtt = v->dt[(size_t)t * H], alpha = expf(dtt * v->A);
        /* gS = dL/dS_t: what flows back from t+1 (already scaled by alpha_{t+1}) plus gy (x) C */
        for (int p = 0; p < P; p++)
            for (int n = 0; n < N; n++) gS[(size_t)p * N + n] += gy[p] * ct[n];
        double g_alpha = 0, g_dt = 0, g_D = 0;
        for (int p = 0; p < P; p++) {
            const float *gp = gS + (size_t)p * N, *sp = Sprev + (size_t)p * N;
            double gsb = 0; /* (gS B)_p */
            for (int n = 0; n < N; n++) {
                gsb += (double)gp[n] * bt[n];
                g_alpha += (double)gp[n] * sp[n];
            }
            g_dt += gsb * xt[p];
            g_D += (double)gy[p] * xt[p];
            if (v->dx) v->dx[(size_t)t * H * P + p] += (float)(dtt * gsb + (double)v->Dh * gy[p]);
        }
        for (int n = 0; n < N; n++) {
            double gc = 0, gb = 0; /* (S_t^T gy)_n and (gS^T x)_n */
            for (int p = 0; p < P; p++) {
                gc += (double)St[(size_t)p * N + n] * gy[p];
                gb += (double)gS[(size_t)p * N + n] * xt[p];
            }
            if (v->dCm) v->dCm[(size_t)t * N + n] += (float)gc;
            if (v->dBm) v->dBm[(size_t)t * N + n] += (float)(dtt * gb);
        }
        /* alpha_t = exp(dt A): d alpha / d dt = alpha A, d alpha / d A = alpha dt */
        if (v->ddt) v->ddt[(size_t)t * H] += (float)(g_dt + g_alpha * alpha * v->A);
        *dA_acc += g_alpha * alpha * dtt;
        *dD_acc += g_D;
        for (size_t i = 0; i < PN; i++) gS[i] *= alpha; /* now dL/dS_{t-1} (partial) */
    }
}

void k_ssd_bwd_ref(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
                   const float *dy, const float *dhT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, const float *saved, int B, int T, int H, int P, int N) {
    (void)saved; /* the reference recomputes every state instead */
    check_dims(B, T, H, P, N);
    size_t PN = (size_t)P * N;
    float *Sall = malloc(sizeof(float) * PN * ((size_t)T + 1)); /* (T+1, P, N) */
    float *gS = malloc(sizeof(float) * PN);                      /* (P, N) */
    float *ytmp = malloc(sizeof(float) * ((size_t)T * H * P + 1));
    CHECK(Sall && gS && ytmp, "ssd_bwd_ref: out of memory");
    for (int h = 0; h < H; h++) {
        double dA_acc = 0, dD_acc = 0;
        for (int b = 0; b < B; b++) {
            size_t bh = (size_t)b * H + h, xo = (size_t)b * T * H * P + (size_t)h * P;
            size_t dto = (size_t)b * T * H + h, bo = (size_t)b * T * N;
            /* Recompute S_{-1..T-1} one step at a time with the forward scan of one token. */
            if (h0) memcpy(Sall, h0 + bh * PN, sizeof(float) * PN);
            else memset(Sall, 0, sizeof(float) * PN);
            for (int t = 0; t < T; t++) {
                memcpy(Sall + (size_t)(t + 1) * PN, Sall + (size_t)t * PN, sizeof(float) * PN);
                scan_bh(ytmp, NULL, Sall + (size_t)(t + 1) * PN, x + xo + (size_t)t * H * P,
                        dt + dto + (size_t)t * H, A[h], Bm + bo + (size_t)t * N,
                        Cm + bo + (size_t)t * N, Dskip[h], 1, H, P, N);
            }
            if (dhT) memcpy(gS, dhT + bh * PN, sizeof(float) * PN);
            else memset(gS, 0, sizeof(float) * PN);
            BhView v = {x + xo, dt + dto, Bm + bo, Cm + bo, dy + xo,
                        dx ? dx + xo : NULL, ddt ? ddt + dto : NULL, dBm ? dBm + bo : NULL,
                        dCm ? dCm + bo : NULL, A[h], Dskip[h], T, H, P, N};
            bwd_bh(&v, Sall, gS, &dA_acc, &dD_acc);
            if (dh0)
                for (size_t i = 0; i < PN; i++) dh0[bh * PN + i] += gS[i];
        }
        if (dA) dA[h] += (float)dA_acc;
        if (dD) dD[h] += (float)dD_acc;
    }
    free(Sall);
    free(gS);
    free(ytmp);
}

void k_ssd_step_ref(float *y, float *S_out, const float *S_in, const float *x, const float *dt,
                    const float *A, const float *Bm, const float *Cm, const float *Dskip,
                    int B, int H, int P, int N) {
    check_dims(B, 1, H, P, N);
    size_t PN = (size_t)P * N;
    float *S = malloc(sizeof(float) * PN); /* (P, N): keeps S_in intact when S_out == NULL */
    CHECK(S, "ssd_step_ref: out of memory");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t bh = (size_t)b * H + h;
            memcpy(S, S_in + bh * PN, sizeof(float) * PN);
            scan_bh(y + bh * P, NULL, S, x + bh * P, dt + bh, A[h], Bm + (size_t)b * N,
                    Cm + (size_t)b * N, Dskip[h], 1, H, P, N);
            if (S_out) memcpy(S_out + bh * PN, S, sizeof(float) * PN);
        }
    free(S);
}
