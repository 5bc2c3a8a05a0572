/* cpu/ssd.c: fast Mamba2 SSD scan (spec implicit-lm §1.4, "Equivalent chunked form"), G = 1.
 *
 * Tokens are cut into chunks of Q = SSD_CHUNK. Inside a chunk, with a_t = dt_t A_h and the
 * inclusive cumulative sum c_t of a over the chunk (c_t <= 0, decreasing):
 *   y_t   = sum_{s<=t} (C_t.B_s) e^{c_t-c_s} dt_s x_s  +  e^{c_t} S0 C_t  +  D x_t
 *   S_end = e^{c_L} S0 + sum_s e^{c_L-c_s} dt_s x_s (x) B_s
 * where S0 is the state entering the chunk. Every exponent is a difference c_t - c_s with s <= t,
 * or c_t itself, so it is <= 0: no overflow, whatever A and dt are. The sums are small matrix
 * products (kseq_mm, cpu/seq_mm.c: register-tiled, in L1/L2; BLAS is not called here because this
 * runs inside OpenMP regions).
 *
 * Work split (deterministic at any thread count: every output element and every partial sum is
 * computed by exactly one thread in a fixed order, and head/batch reductions are done serially):
 *   fwd  A. per (b,h): chain of chunk-entry states S0 (P x N products only) -> saved, hT
 *        B. per (b,chunk): G = C B^T once (B and C are shared by the heads), then per head the
 *           intra-chunk and inter-chunk outputs.
 *   bwd  1. per (b,h): reverse chain of dL/dS_end per chunk (and dh0).
 *        2. per (b,chunk): all other gradients; the head sums of dBm, dCm are accumulated in one
 *           thread (through sum_h dL/dG, one product for all heads); dA, dD partials per
 *           (b,chunk,h) are summed in a fixed order at the end.
 * The backward math is in docs/derivations/ssd.md.
 *
 * `saved` = the chunk-entry states, (B, H, nchunks, P, N) (same meaning as ref/ssd.c).
 * Scratch (kscratch.h: persistent grow-only buffers, reused by the next call): per thread a chunk
 * workspace of ~(5Q^2 + 6QP + 3QN + PN + 32 max(Q,P,N)) floats; and, when the forward has no
 * `saved` and always in the backward, chunk states (or their gradients) for a group of at most
 * 2*threads sequences: min(B, 2*threads)*H*nchunks*P*N floats. Groups are processed one after the
 * other (both phases) so their states stay in cache; the result does not depend on the group size.
 * Small states (P N <= 256, whole vector rows) take the recurrent path (cpu/ssd_scan.c, ssd_paths.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"
#include "kscratch.h"
#include "seq_mm.h"
#include "ssd_paths.h"
#include "vecw.h"
#include "vmath.h"

#include "threading.h"

#define Q SSD_CHUNK

static int imin(int a, int b) { return a < b ? a : b; }

/* ---- per-thread chunk workspace ------------------------------------------------------------ */

typedef struct {
    float *G, *M, *Lm, *gM, *gGs;             /* (Q, Q) */
    float *gY, *Xd, *gXd, *Z, *Xw, *Y;        /* (Q, P) */
    float *pk;                                /* mm packing space */
    float *S;                                 /* (P, N) running state or its gradient */
    float *Qm, *gC, *gB;                      /* (Q, N) */
    float *ec, *w, *dts;                      /* (Q) e^{c_t}, e^{c_L - c_t}, dt_t of this head */
    double *c, *gc, *r;                       /* (Q) cumulative log-decay, its gradient, a row */
} Ws;

static int kn_max(int P, int N) { return P > N ? (P > Q ? P : Q) : (N > Q ? N : Q); }

static size_t ws_floats(int P, int N) {
    int kn = kn_max(P, N);
    size_t n = 5 * (size_t)Q * Q + 6 * (size_t)Q * P + kseq_mm_pack_floats(kn, kn) + (size_t)P * N +
               3 * (size_t)Q * N + 3 * Q + 3 * 2 * Q /* doubles */ + 16 /* alignment slack */;
    return (n + 15) / 16 * 16; /* keeps every thread's slice 64-byte aligned */
}

static Ws ws_carve(float *base, int P, int N) {
    Ws w;
    float *p = base;
#define TAKE(f, n) (w.f = p, p += (n))
    TAKE(G, Q * Q); TAKE(M, Q * Q); TAKE(Lm, Q * Q); TAKE(gM, Q * Q); TAKE(gGs, Q * Q);
    TAKE(gY, Q * P); TAKE(Xd, Q * P); TAKE(gXd, Q * P); TAKE(Z, Q * P);
    TAKE(Xw, Q * P); TAKE(Y, Q * P); TAKE(pk, kseq_mm_pack_floats(kn_max(P, N), kn_max(P, N)));
    TAKE(S, P * N); TAKE(Qm, Q * N); TAKE(gC, Q * N); TAKE(gB, Q * N);
    TAKE(ec, Q); TAKE(w, Q); TAKE(dts, Q);
#undef TAKE
    p += (8 - ((size_t)(p - base) & 7)) & 7; /* doubles on an 8-float (32-byte) boundary */
    w.c = (double *)(void *)p;
    w.gc = w.c + Q;
    w.r = w.gc + Q;
    CHECK((size_t)(p - base) + 6 * Q <= ws_floats(P, N), "ssd: workspace layout");
    return w;
}

/* Chunk geometry and views for one (b, chunk) or (b, h): token t0, length L. */
typedef struct {
    int B, T, H, P, N, nch;
    const float *x, *dt, *A, *Bm, *Cm, *Dskip;
} Dims;

/* Offset of token t0's head h in a (B,T,H,P) tensor; its rows (one per token) are H*P apart.
 * The kernels read x, dy and write y, dx in place through such strided (L, P) views. */
static size_t head_off(const Dims *d, int b, int t0, int h) {
    return (((size_t)b * d->T + t0) * d->H + h) * d->P;
}

/* Prefetch the L rows of P floats, ld apart, of a strided (L, P) view (rw: 1 = for writing).
 * The rows of one head are H*P floats apart (4 KiB at H = 16, P = 64): each is in another page,
 * which the hardware prefetchers do not follow, so without this every row of x, dy, dx was a
 * DRAM round trip (a third of the backward). Called for the NEXT head while this one computes. */
static void prefetch_rows(const float *base, size_t ld, int L, int P, int rw) {
    if (!base) return;
    for (int t = 0; t < L; t++)
        for (int q = 0; q < P; q += 16) { /* one 64-byte line per 16 floats */
            if (rw) __builtin_prefetch(base + t * ld + q, 1);
            else __builtin_prefetch(base + t * ld + q, 0);
        }
}

/* c_t = sum_{r<=t} dt_r A (double), ec_t = e^{c_t}, w_t = e^{c_{L-1} - c_t}, dts_t = dt_t
 * (contiguous copy of the head's dt, stride H in dt). Every exponent is <= 0; vexp (vmath.h)
 * keeps the loops vectorised. */
static void chunk_decay(Ws *ws, const float *dt, int H, float A, int L) {
    double c = 0;
    for (int t = 0; t < L; t++) {
        ws->dts[t] = dt[(size_t)t * H];
        c += (double)ws->dts[t] * A;
        ws->c[t] = c;
    }
    double cL = ws->c[L - 1];
    for (int t = 0; t < L; t++) {
        ws->ec[t] = vexp((float)ws->c[t]);
        ws->w[t] = vexp((float)(cL - ws->c[t]));
    }
}

/* Lm_ts = e^{c_t - c_s} for s <= t < L, else 0 (exponent <= 0 by construction). One exp per
 * entry would cost as much as the products for small P, N; instead row t = row t-1 times
 * alpha_t = e^{a_t}, refreshed with exact exps every LM_REFRESH rows (so at most 7 roundings). */
#define LM_REFRESH 8
static void chunk_lmat(Ws *ws, int L) {
    for (int t = 0; t < L; t++) {
        float *row = ws->Lm + (size_t)t * Q;
        if (t % LM_REFRESH == 0) {
            double ct = ws->c[t];
            for (int s = 0; s < t; s++) row[s] = vexp((float)(ct - ws->c[s]));
        } else {
            float alpha = vexp((float)(ws->c[t] - ws->c[t - 1]));
            const float *prev = row - Q;
            for (int s = 0; s < t; s++) row[s] = prev[s] * alpha;
        }
        row[t] = 1.0f;
        for (int s = t + 1; s < L; s++) row[s] = 0.0f;
    }
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Phase A for one (b, h): st:(nch, P, N) receives each chunk's entry state; hT:(P,N)|NULL.
 * Each state is computed in place in its slot: S_next = e^{c_L} S + (w o dt o X)^T B. */
static void fwd_states(Ws *ws, float *st, float *hT, const float *h0, const Dims *d, int b, int h) {
    int P = d->P, N = d->N;
    size_t PN = (size_t)P * N, ld = (size_t)d->H * P;
    float *cur = d->nch > 0 ? st : ws->S;
    if (h0) memcpy(cur, h0, sizeof(float) * PN);
    else memset(cur, 0, sizeof(float) * PN);
    for (int k = 0; k < d->nch; k++) {
        float *nxt = k + 1 < d->nch ? st + (size_t)(k + 1) * PN : hT;
        if (!nxt) break;
        int t0 = k * Q, L = imin(Q, d->T - t0);
        if (k + 1 < d->nch) /* the next chunk's rows of this head (see prefetch_rows) */
            prefetch_rows(d->x + head_off(d, b, t0 + Q, h), ld, imin(Q, d->T - t0 - Q), P, 0);
        chunk_decay(ws, d->dt + ((size_t)b * d->T + t0) * d->H + h, d->H, d->A[h], L);
        const float *X = d->x + head_off(d, b, t0, h); /* (L, P), row stride ld */
        for (int t = 0; t < L; t++) { /* Xw_s = e^{c_L - c_s} dt_s x_s */
            float f = ws->w[t] * ws->dts[t];
            for (int p = 0; p < P; p++) ws->Xw[(size_t)t * P + p] = f * X[t * ld + p];
        }
        float eL = ws->ec[L - 1];
        for (size_t i = 0; i < PN; i++) nxt[i] = eL * cur[i];
        const float *Bk = d->Bm + ((size_t)b * d->T + t0) * N; /* (L, N) */
        kseq_mm(ws->pk, P, N, L, ws->Xw, P, 1, Bk, N, 0, nxt, N, KSEQ_TRI_NONE);
        cur = nxt;
    }
    if (hT && d->nch == 0) memcpy(hT, cur, sizeof(float) * PN);
}

/* Phase B for one (b, chunk k): y for every head, given the entry states st:(H, nch, P, N)
 * of sequence b. s0_zero: the entry state of chunk 0 is zero (no h0), skip its term.
 * y_t = (e^{c_t} S0 C_t + D x_t) + sum_{s<=t} M_ts x_s, the last product added in place. */
static void fwd_chunk(Ws *ws, float *y, const float *st, int s0_zero, const Dims *d, int b, int k) {
    int P = d->P, N = d->N, t0 = k * Q, L = imin(Q, d->T - t0), ld = d->H * P;
    const float *Bk = d->Bm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    const float *Ck = d->Cm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    memset(ws->G, 0, sizeof(float) * Q * Q);
    /* G_ts = C_t . B_s for s <= t */
    kseq_mm(ws->pk, L, L, N, Ck, N, 0, Bk, N, 1, ws->G, Q, KSEQ_TRI_J_LE_I);
    for (int h = 0; h < d->H; h++) {
        if (h + 1 < d->H) {
            prefetch_rows(d->x + head_off(d, b, t0, h + 1), (size_t)ld, L, P, 0);
            prefetch_rows(y + head_off(d, b, t0, h + 1), (size_t)ld, L, P, 1);
        }
        chunk_decay(ws, d->dt + ((size_t)b * d->T + t0) * d->H + h, d->H, d->A[h], L);
        chunk_lmat(ws, L);
        for (int t = 0; t < L; t++) /* M_ts = G_ts e^{c_t - c_s} dt_s (causal; Lm is 0 above) */
            for (int s = 0; s < L; s++)
                ws->M[t * Q + s] = ws->G[t * Q + s] * ws->Lm[t * Q + s] * ws->dts[s];
        const float *X = d->x + head_off(d, b, t0, h); /* (L, P) views, row stride ld */
        float *Yo = y + head_off(d, b, t0, h), D = d->Dskip[h];
        if (!(k == 0 && s0_zero)) { /* inter-chunk term e^{c_t} S0 C_t */
            const float *S0 = st + ((size_t)h * d->nch + k) * P * N; /* (P, N) */
            memset(ws->Y, 0, sizeof(float) * L * P);
            kseq_mm(ws->pk, L, P, N, Ck, N, 0, S0, N, 1, ws->Y, P, KSEQ_TRI_NONE);
            for (int t = 0; t < L; t++)
                for (int p = 0; p < P; p++)
                    Yo[(size_t)t * ld + p] = ws->ec[t] * ws->Y[(size_t)t * P + p] + D * X[(size_t)t * ld + p];
        } else {
            for (int t = 0; t < L; t++)
                for (int p = 0; p < P; p++) Yo[(size_t)t * ld + p] = D * X[(size_t)t * ld + p];
        }
        kseq_mm(ws->pk, L, P, L, ws->M, Q, 0, X, ld, 0, Yo, ld, KSEQ_TRI_K_LE_I);
    }
}

/* Sequences per group: phase A (or 1) for a group, then phase B (or 2) for it, so that the group's
 * chunk states (H nch P N floats per sequence, 2 MiB at H 16, P 64, N 128) are still in cache when
 * phase B reads them, whether they live in `saved` or in scratch. */
static int group_size(int B) { return imin(B > 0 ? B : 1, 2 * kt_max_threads()); }

/* The team of one phase over nb sequences (threading.h): per token and head the state update
 * (P N) plus its share of the chunk products (Q (P + N) / 2); the backward does about three
 * times the forward's work. */
static int ssd_team(const Dims *d, int nb, double passes, long items) {
    double per = (double)d->P * d->N + Q * (d->P + d->N) / 2.0;
    return kt_team(passes * nb * (double)d->T * d->H * per * KT_NS_SSD, items);
}

void kssd_chunked_fwd(float *y, float *saved, float *hT, const float *x, const float *dt,
                      const float *A, const float *Bm, const float *Cm, const float *Dskip,
                      const float *h0, int B, int T, int H, int P, int N) {
    CHECK(B >= 0 && T >= 0 && H > 0 && P > 0 && N > 0, "ssd: bad dims B=%d T=%d H=%d P=%d N=%d",
          B, T, H, P, N);
    Dims d = {B, T, H, P, N, (T + Q - 1) / Q, x, dt, A, Bm, Cm, Dskip};
    size_t PN = (size_t)P * N, per_b = (size_t)H * d.nch * PN, wsz = ws_floats(P, N);
    int nt = kt_max_threads(), gb = group_size(B);
    float *wsbuf = kscratch_floats(KS_SSD_WS, wsz * nt);
    float *stbuf = saved ? NULL : kscratch_floats(KS_SSD_ST, per_b * gb + 1);
    for (int b0 = 0; b0 < B; b0 += gb) {
        int nb = imin(gb, B - b0);
        float *st = saved ? saved + (size_t)b0 * per_b : stbuf; /* (nb, H, nch, P, N) */
        KT_FOR(ssd_team(&d, nb, 1.0, (long)nb * H),
        for (int i = 0; i < nb * H; i++) {
            Ws ws = ws_carve(wsbuf + wsz * kt_thread_id(), P, N);
            int b = b0 + i / H, h = i % H;
            size_t bh = (size_t)b * H + h;
            fwd_states(&ws, st + (size_t)i * d.nch * PN, hT ? hT + bh * PN : NULL,
                       h0 ? h0 + bh * PN : NULL, &d, b, h);
        });
        KT_FOR(ssd_team(&d, nb, 1.0, (long)nb * d.nch),
        for (int i = 0; i < nb * d.nch; i++) {
            Ws ws = ws_carve(wsbuf + wsz * kt_thread_id(), P, N);
            int bl = i / d.nch;
            fwd_chunk(&ws, y, st + (size_t)bl * per_b, h0 == NULL, &d, b0 + bl, i % d.nch);
        });
    }
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Phase 1 for one (b, h): gse:(nch, P, N) receives dL/dS_end of every chunk (dhT for the last);
 * dh0:(P,N)|NULL accumulates dL/dS_{-1}.   dS0 = e^{c_L} dS_end + sum_t e^{c_t} dy_t (x) C_t */
static void bwd_chain(Ws *ws, float *gse, float *dh0, const float *dhT, const float *dy,
                      const Dims *d, int b, int h) {
    int P = d->P, N = d->N;
    size_t PN = (size_t)P * N, ld = (size_t)d->H * P;
    float *cur = d->nch > 0 ? gse + (size_t)(d->nch - 1) * PN : ws->S;
    if (dhT) memcpy(cur, dhT, sizeof(float) * PN);
    else memset(cur, 0, sizeof(float) * PN);
    for (int k = d->nch - 1; k >= 0; k--) {
        float *nxt = k > 0 ? gse + (size_t)(k - 1) * PN : (dh0 ? ws->S : NULL);
        if (!nxt) break;
        int t0 = k * Q, L = imin(Q, d->T - t0);
        if (k > 0) /* the previous chunk's rows of this head (see prefetch_rows) */
            prefetch_rows(dy + head_off(d, b, t0 - Q, h), ld, Q, P, 0);
        chunk_decay(ws, d->dt + ((size_t)b * d->T + t0) * d->H + h, d->H, d->A[h], L);
        const float *gy = dy + head_off(d, b, t0, h); /* (L, P), row stride ld */
        for (int t = 0; t < L; t++)
            for (int p = 0; p < P; p++) ws->gY[(size_t)t * P + p] = ws->ec[t] * gy[t * ld + p];
        float eL = ws->ec[L - 1];
        for (size_t i = 0; i < PN; i++) nxt[i] = eL * cur[i];
        const float *Ck = d->Cm + ((size_t)b * d->T + t0) * N; /* (L, N) */
        kseq_mm(ws->pk, P, N, L, ws->gY, P, 1, Ck, N, 0, nxt, N, KSEQ_TRI_NONE);
        cur = nxt;
    }
    if (dh0)
        for (size_t i = 0; i < PN; i++) dh0[i] += cur[i];
}

/* Gradient outputs of the backward (any may be NULL) and the dA/dD partials (B, nch, H). */
typedef struct {
    float *dx, *ddt;
    double *pA, *pD;
} Grads;

/* sum_{s<=t} r_s in double with 8 fixed partial sums (vectorisable; order depends on t only). */
static double row_sum(const double *r, int n) {
    double acc[8] = {0};
    int s = 0;
    for (; s + 8 <= n; s += 8)
        for (int l = 0; l < 8; l++) acc[l] += r[s + l];
    double tot = 0;
    for (; s < n; s++) tot += r[s];
    for (int l = 0; l < 8; l++) tot += acc[l];
    return tot;
}

/* Intra-chunk part of one head: y_t += sum_{s<=t} M_ts Xd_s with M = G o Lm. Sets ws->gXd = M^T dY
 * and ws->gc (the d/dc terms of Lm), adds this head's dL/dG = (dY Xd^T) o Lm into ws->gGs.
 * gy:(L, P) the head's dy, row stride ld. */
static void bwd_intra(Ws *ws, const float *gy, int ld, int L, int P) {
    memset(ws->gM, 0, sizeof(float) * Q * Q);
    kseq_mm(ws->pk, L, L, P, gy, ld, 0, ws->Xd, P, 1, ws->gM, Q, KSEQ_TRI_J_LE_I);
    for (int t = 0; t < L; t++) {
        ws->gc[t] = 0;
        for (int s = 0; s < L; s++) ws->M[t * Q + s] = ws->G[t * Q + s] * ws->Lm[t * Q + s];
    }
    for (int t = 0; t < L; t++) { /* d/dc of e^{c_t - c_s}: +R_ts to c_t, -R_ts to c_s */
        const float *gm = ws->gM + t * Q, *mt = ws->M + t * Q, *lt = ws->Lm + t * Q;
        float *gg = ws->gGs + t * Q;
        for (int s = 0; s <= t; s++) {
            double r = (double)gm[s] * mt[s];
            ws->r[s] = r;
            ws->gc[s] -= r;
            gg[s] += gm[s] * lt[s];
        }
        ws->gc[t] += row_sum(ws->r, t + 1);
    }
    memset(ws->gXd, 0, sizeof(float) * L * P);
    kseq_mm(ws->pk, L, P, L, ws->M, Q, 1, gy, ld, 0, ws->gXd, P, KSEQ_TRI_K_GE_I);
}

/* Phase 2, one head h of chunk (b, k): uses ws->G; adds this head's dL/dG into ws->gGs and its
 * direct dBm/dCm terms into ws->gB, ws->gC. S0, gSe:(P,N) entry state and dL/dS_end. */
static void bwd_head(Ws *ws, const Grads *g, const float *dy, const float *S0, const float *gSe,
                     const Dims *d, int b, int k, int h) {
    int P = d->P, N = d->N, t0 = k * Q, L = imin(Q, d->T - t0), H = d->H, ld = H * P;
    const float *Bk = d->Bm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    const float *Ck = d->Cm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    const float *X = d->x + head_off(d, b, t0, h), *gy = dy + head_off(d, b, t0, h); /* (L,P), ld */
    chunk_decay(ws, d->dt + ((size_t)b * d->T + t0) * H + h, H, d->A[h], L);
    chunk_lmat(ws, L);
    for (int s = 0; s < L; s++) {
        float dts = ws->dts[s];
        for (int p = 0; p < P; p++) ws->Xd[(size_t)s * P + p] = dts * X[(size_t)s * ld + p];
    }
    bwd_intra(ws, gy, ld, L, P);
    /* chunk-end state: S_end = e^{c_L} S0 + sum_s w_s Xd_s (x) B_s;  Z = B dS_end^T */
    memset(ws->Z, 0, sizeof(float) * L * P);
    kseq_mm(ws->pk, L, P, N, Bk, N, 0, gSe, N, 1, ws->Z, P, KSEQ_TRI_NONE);
    for (int s = 0; s < L; s++) {
        float *zs = ws->Z + (size_t)s * P, *xw = ws->Xw + (size_t)s * P, w = ws->w[s];
        const float *xd = ws->Xd + (size_t)s * P;
        double u = (double)w * kseq_dot(xd, zs, P);
        ws->gc[s] -= u;
        ws->gc[L - 1] += u;
        for (int p = 0; p < P; p++) {
            ws->gXd[(size_t)s * P + p] += w * zs[p];
            xw[p] = w * xd[p];
        }
    }
    ws->gc[L - 1] += (double)ws->ec[L - 1] * kseq_dot(gSe, S0, P * N);
    /* dB_s += w_s dS_end^T Xd_s */
    kseq_mm(ws->pk, L, N, P, ws->Xw, P, 0, gSe, N, 0, ws->gB, N, KSEQ_TRI_NONE);
    /* inter-chunk: y_t += e^{c_t} S0 C_t;  Qm = dY S0 */
    memset(ws->Qm, 0, sizeof(float) * L * N);
    kseq_mm(ws->pk, L, N, P, gy, ld, 0, S0, N, 0, ws->Qm, N, KSEQ_TRI_NONE);
    for (int t = 0; t < L; t++) {
        float e = ws->ec[t], *qt = ws->Qm + (size_t)t * N, *gct = ws->gC + (size_t)t * N;
        ws->gc[t] += (double)e * kseq_dot(qt, Ck + (size_t)t * N, N);
        for (int n = 0; n < N; n++) gct[n] += e * qt[n];
    }
    /* c_t = sum_{r<=t} dt_r A: da_r = sum_{t>=r} dc_t; then dt enters through a and Xd */
    double ga = 0, pA = 0, pD = 0;
    float A = d->A[h], D = d->Dskip[h];
    for (int s = L - 1; s >= 0; s--) {
        ga += ws->gc[s];
        float dts = ws->dts[s];
        const float *xs = X + (size_t)s * ld, *gys = gy + (size_t)s * ld;
        const float *gxs = ws->gXd + (size_t)s * P;
        pA += ga * dts;
        pD += kseq_dot(gys, xs, P);
        size_t ti = ((size_t)b * d->T + t0 + s) * H + h;
        if (g->ddt) g->ddt[ti] += (float)(ga * A + kseq_dot(xs, gxs, P));
        if (g->dx)
            for (int p = 0; p < P; p++) g->dx[ti * P + p] += dts * gxs[p] + D * gys[p];
    }
    size_t pi = ((size_t)b * d->nch + k) * H + h;
    g->pA[pi] = pA;
    g->pD[pi] = pD;
}

/* Phase 2 for chunk (b, k), all heads in order; then the shared dBm, dCm products. */
static void bwd_chunk(Ws *ws, const Grads *g, float *dBm, float *dCm, const float *dy,
                      const float *st, const float *gse, const Dims *d, int b, int k) {
    int N = d->N, t0 = k * Q, L = imin(Q, d->T - t0);
    size_t PN = (size_t)d->P * N;
    const float *Bk = d->Bm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    const float *Ck = d->Cm + ((size_t)b * d->T + t0) * N;  /* (L, N) */
    memset(ws->G, 0, sizeof(float) * Q * Q);
    kseq_mm(ws->pk, L, L, N, Ck, N, 0, Bk, N, 1, ws->G, Q, KSEQ_TRI_J_LE_I);
    memset(ws->gGs, 0, sizeof(float) * Q * Q);
    memset(ws->gB, 0, sizeof(float) * L * N);
    memset(ws->gC, 0, sizeof(float) * L * N);
    for (int h = 0; h < d->H; h++) {
        size_t o = ((size_t)h * d->nch + k) * PN, ld = (size_t)d->H * d->P;
        if (h + 1 < d->H) {
            size_t ho = head_off(d, b, t0, h + 1);
            prefetch_rows(d->x + ho, ld, L, d->P, 0);
            prefetch_rows(dy + ho, ld, L, d->P, 0);
            prefetch_rows(g->dx ? g->dx + ho : NULL, ld, L, d->P, 1);
        }
        bwd_head(ws, g, dy, st + o, gse + o, d, b, k, h);
    }
    /* G_ts = C_t . B_s:  dC += (sum_h dG) B,  dB += (sum_h dG)^T C   (dG lower triangular) */
    kseq_mm(ws->pk, L, N, L, ws->gGs, Q, 0, Bk, N, 0, ws->gC, N, KSEQ_TRI_K_LE_I);
    kseq_mm(ws->pk, L, N, L, ws->gGs, Q, 1, Ck, N, 0, ws->gB, N, KSEQ_TRI_K_GE_I);
    size_t o = ((size_t)b * d->T + t0) * N;
    if (dCm)
        for (size_t i = 0; i < (size_t)L * N; i++) dCm[o + i] += ws->gC[i];
    if (dBm)
        for (size_t i = 0; i < (size_t)L * N; i++) dBm[o + i] += ws->gB[i];
}

void kssd_chunked_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                      float *dh0, const float *dy, const float *dhT, const float *x, const float *dt,
                      const float *A, const float *Bm, const float *Cm, const float *Dskip,
                      const float *h0, const float *saved, int B, int T, int H, int P, int N) {
    CHECK(B >= 0 && T >= 0 && H > 0 && P > 0 && N > 0, "ssd: bad dims B=%d T=%d H=%d P=%d N=%d",
          B, T, H, P, N);
    CHECK(saved || T == 0, "ssd_bwd: saved is NULL (run the forward with saved)");
    (void)h0; /* the entry state of chunk 0 is in saved */
    Dims d = {B, T, H, P, N, (T + Q - 1) / Q, x, dt, A, Bm, Cm, Dskip};
    size_t PN = (size_t)P * N, per_b = (size_t)H * d.nch * PN, wsz = ws_floats(P, N);
    int nt = kt_max_threads(), gb = group_size(B);
    float *wsbuf = kscratch_floats(KS_SSD_WS, wsz * nt);
    float *gse = kscratch_floats(KS_SSD_ST, per_b * gb + 1); /* (gb, H, nch, P, N) */
    double *part = kscratch(KS_SSD_PART, sizeof(double) * (2 * (size_t)B * d.nch * H + 1)); /* pA, pD */
    Grads g = {dx, ddt, part, part + (size_t)B * d.nch * H};
    for (int b0 = 0; b0 < B; b0 += gb) {
        int nb = imin(gb, B - b0);
        KT_FOR(ssd_team(&d, nb, 1.0, (long)nb * H),
        for (int i = 0; i < nb * H; i++) {
            Ws ws = ws_carve(wsbuf + wsz * kt_thread_id(), P, N);
            int b = b0 + i / H, h = i % H;
            size_t bh = (size_t)b * H + h;
            bwd_chain(&ws, gse + (size_t)i * d.nch * PN, dh0 ? dh0 + bh * PN : NULL,
                      dhT ? dhT + bh * PN : NULL, dy, &d, b, h);
        });
        KT_FOR(ssd_team(&d, nb, 2.0, (long)nb * d.nch),
        for (int i = 0; i < nb * d.nch; i++) {
            Ws ws = ws_carve(wsbuf + wsz * kt_thread_id(), P, N);
            int bl = i / d.nch;
            bwd_chunk(&ws, &g, dBm, dCm, dy, saved + (size_t)(b0 + bl) * per_b,
                      gse + (size_t)bl * per_b, &d, b0 + bl, i % d.nch);
        });
    }
    for (int h = 0; h < H; h++) { /* fixed-order reduction over (b, chunk) */
        double sa = 0, sd = 0;
        for (size_t i = 0; i < (size_t)B * d.nch; i++) {
            sa += g.pA[i * H + h];
            sd += g.pD[i * H + h];
        }
        if (dA) dA[h] += (float)sa;
        if (dD) dD[h] += (float)sd;
    }
}

/* ---- dispatch (ssd_paths.h) ----------------------------------------------------------------- */

void k_ssd_fwd(float *y, float *saved, float *hT, const float *x, const float *dt, const float *A,
               const float *Bm, const float *Cm, const float *Dskip, const float *h0,
               int B, int T, int H, int P, int N) {
    if (kssd_use_scan(P, N)) kssd_scan_fwd(y, saved, hT, x, dt, A, Bm, Cm, Dskip, h0, B, T, H, P, N);
    else kssd_chunked_fwd(y, saved, hT, x, dt, A, Bm, Cm, Dskip, h0, B, T, H, P, N);
}

void k_ssd_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
               const float *dy, const float *dhT, const float *x, const float *dt, const float *A,
               const float *Bm, const float *Cm, const float *Dskip, const float *h0,
               const float *saved, int B, int T, int H, int P, int N) {
    if (kssd_use_scan(P, N))
        kssd_scan_bwd(dx, ddt, dA, dBm, dCm, dD, dh0, dy, dhT, x, dt, A, Bm, Cm, Dskip, h0, saved, B,
                      T, H, P, N);
    else
        kssd_chunked_bwd(dx, ddt, dA, dBm, dCm, dD, dh0, dy, dhT, x, dt, A, Bm, Cm, Dskip, h0, saved,
                         B, T, H, P, N);
}

/* ---- single-token step ---------------------------------------------------------------------- */

/* Whole-vector rows (N a multiple of SW): each new state row stays in registers from its update to
 * its readout, and the readouts of SW rows are summed together, a transposed reduction of SW
 * vectors into one vector of SW outputs (log2 SW levels of two shuffles and an add, ~3 operations
 * per row instead of a horizontal sum per row, and no reload of a row just stored). Measured with
 * `bench_kernels --only step` (Zen 4, one thread, B 32, H 8, P = N = 16): 19.9 -> 9.2 us with
 * AVX-512, 18.5 -> 8.2 with AVX2, 33 -> 17-24 with SSE2. The readouts' summation order is not
 * kseq_dot's: y differs from the row-at-a-time form below in the last bits. */
#define SW KV_W /* cpu/vecw.h; kv_sum_rows there */

/* Row p of one (b, h): the new state (into So when given) and its readout's SW lanes. */
static inline __attribute__((always_inline)) kv_f step_row(float *So, const float *S, const float *bt,
                                                         const float *ct, float alpha, float dx,
                                                         const int N) {
    kv_f a = {0};
    for (int n = 0; n < N; n += SW) {
        kv_f s = alpha * kv_load(S + n) + dx * kv_load(bt + n);
        if (So) kv_store(So + n, s);
        a += s * kv_load(ct + n);
    }
    return a;
}

/* One (b, h): rows of P, N a multiple of SW (a compile-time constant in the specialised calls).
 * Whole groups of SW rows are unrolled so that the partial sums stay in registers. */
static inline __attribute__((always_inline)) void step_item_vec(
    float *y, float *So, const float *S, const float *xi, const float *bt, const float *ct,
    float dti, float alpha, float Dh, int P, const int N) {
    int p0 = 0;
    for (; p0 + SW <= P; p0 += SW) {
        kv_f acc[SW];
#pragma GCC unroll 16
        for (int j = 0; j < SW; j++) {
            int p = p0 + kv_slot_row(j);
            acc[j] = step_row(So ? So + (size_t)p * N : NULL, S + (size_t)p * N, bt, ct, alpha,
                              dti * xi[p], N);
        }
        kv_store(y + p0, kv_sum_rows(acc) + Dh * kv_load(xi + p0));
    }
    if (p0 < P) { /* the last P mod SW rows, the other slots 0 */
        int np = P - p0;
        kv_f acc[SW];
        for (int j = 0; j < SW; j++) {
            int p = p0 + kv_slot_row(j);
            kv_f z = {0};
            acc[j] = kv_slot_row(j) < np ? step_row(So ? So + (size_t)p * N : NULL, S + (size_t)p * N,
                                                 bt, ct, alpha, dti * xi[p], N)
                                      : z;
        }
        kv_f yv = kv_sum_rows(acc);
        for (int r = 0; r < np; r++) y[p0 + r] = yv[r] + Dh * xi[p0 + r];
    }
}

static void step_item_any(float *y, float *So, const float *S, const float *xi, const float *bt,
                          const float *ct, float dti, float alpha, float Dh, int P, int N) {
    if (N == SW) step_item_vec(y, So, S, xi, bt, ct, dti, alpha, Dh, P, SW);
    else if (N == 2 * SW) step_item_vec(y, So, S, xi, bt, ct, dti, alpha, Dh, P, 2 * SW);
    else step_item_vec(y, So, S, xi, bt, ct, dti, alpha, Dh, P, N);
}

void k_ssd_step(float *y, float *S_out, const float *S_in, const float *x, const float *dt,
                const float *A, const float *Bm, const float *Cm, const float *Dskip,
                int B, int H, int P, int N) {
    CHECK(B >= 0 && H > 0 && P > 0 && N > 0, "ssd_step: bad dims B=%d H=%d P=%d N=%d", B, H, P, N);
    size_t PN = (size_t)P * N;
    int nt = kt_team((double)B * H * PN * KT_NS_SSD_STEP, (long)B * H);
    if (N % SW == 0) {
        /* one state update per (b, head): parallel only when the states are large (B = 1: rarely) */
        KT_FOR(nt,
        for (int i = 0; i < B * H; i++) {
            int b = i / H, h = i % H;
            float dti = dt[i];
            step_item_any(y + (size_t)i * P, S_out ? S_out + (size_t)i * PN : NULL,
                          S_in + (size_t)i * PN, x + (size_t)i * P, Bm + (size_t)b * N,
                          Cm + (size_t)b * N, dti, vexp(dti * A[h]), Dskip[h], P, N);
        });
        return;
    }
    float *rows = kscratch_floats(KS_SSD_STEP, (size_t)8 * N * nt); /* new state rows per thread */
    /* rows that are not whole vectors: one row at a time, horizontal dots */
    KT_FOR(nt,
    for (int i = 0; i < B * H; i++) {
        int b = i / H, h = i % H;
        float *scr = rows + (size_t)8 * N * kt_thread_id();
        const float *bt = Bm + (size_t)b * N, *ct = Cm + (size_t)b * N, *xi = x + (size_t)i * P;
        float dti = dt[i], alpha = vexp(dti * A[h]);
        /* Rows p in groups of 8: the group's new rows first, each where it belongs (S_out, or the
         * scratch; S_out may be S_in: a row is updated element by element), then their readouts.
         * Reading a row right after storing it (one row at a time, straight into S_out) was 2x
         * slower with AVX-512, and going through one scratch row and a copy 1.3-1.6x: the
         * readout's loads wait for the stores. The dots in 8-float halves on every ISA (the same
         * bits as kseq_dot). */
        for (int p0 = 0; p0 < P; p0 += 8) {
            int np = P - p0 < 8 ? P - p0 : 8;
            float *row[8];
            for (int r = 0; r < np; r++) {
                int p = p0 + r;
                const float *sp = S_in + (size_t)i * PN + (size_t)p * N;
                row[r] = S_out ? S_out + (size_t)i * PN + (size_t)p * N : scr + (size_t)r * N;
                float dx = dti * xi[p];
                for (int n = 0; n < N; n++) row[r][n] = alpha * sp[n] + dx * bt[n];
            }
            for (int r = 0; r < np; r++) {
                kseq_v8 w;
                kseq_dot_fold(&w, row[r], ct, N, 1);
                y[(size_t)i * P + p0 + r] = kseq_dot_finish(&w) + Dskip[h] * xi[p0 + r];
            }
        }
    });
}
