/* cpu/ssd_scan.c: the Mamba2 SSD scan (spec implicit-lm §1.4) in its recurrent form, the fast path
 * for small states (kssd_use_scan). Same contract as k_ssd_fwd / k_ssd_bwd (kernels.h), and the
 * same `saved` (the chunk-entry states, (B, H, nchunks, P, N)), so either path's backward can
 * follow either path's forward, and the reference's.
 *
 * Why two paths: the chunked form (cpu/ssd.c) turns the scan into small matrix products, but pays
 * O(Q^2) elementwise work per chunk and head (the decay matrix, its gradients) and tile overheads
 * that dominate when P and N are small (P = N = 16: a product of 64 x 16 x 16 is a few hundred
 * cycles). The recurrence costs O(P N) per token and head, with no waste:
 *   fwd   S_t = a_t S_{t-1} + dt_t x_t (x) B_t,  a_t = exp(dt_t A);   y_t = S_t C_t + D x_t
 *   bwd   G_t = dL/dS_t = dy_t (x) C_t + a_{t+1} G_{t+1}   (G_{T-1} starts from dhT)
 *         dx_t += dt_t G_t B_t + D dy_t;   dB_t += dt_t G_t^T x_t;   dC_t += S_t^T dy_t
 *         ddt_t += x_t . G_t B_t + <G_t, S_{t-1}> a_t A;   dA += <G_t, S_{t-1}> a_t dt_t
 *         dD += dy_t . x_t;   dh0 += a_0 G_0
 * (the reference's equations, ref/ssd.c). Every product is a vector operation along P or N with
 * no horizontal sum inside a loop: the forward keeps S transposed, (N, P), so y_t = sum_n C_t[n]
 * S^T[n, :]; the backward keeps G in both layouts (G rows for dB, G^T rows for G B) and recomputes
 * each chunk's states S_t (P, N) from `saved` into scratch (dC needs S_t, ddt needs S_{t-1}).
 *
 * Threads (deterministic at any count): the forward runs one (b, h) per item; the backward one
 * sequence b per item with its heads in order, so dBm, dCm (sums over heads) are accumulated by one
 * thread in head order; dA, dD partials per (b, h) are summed over b in a fixed order at the end.
 * Scratch (kscratch.h, persistent): per thread P N + Q (N + 1) floats in the forward, (Q + 3) P N
 * + Q in the backward, plus 2 B H doubles.
 * Out of scope: large states (the chunked form is faster there: its products run near FMA peak),
 * rows that are not whole vectors (P, N multiples of KV_W; kssd_use_scan says no otherwise).
 */
#include <math.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"
#include "kscratch.h"
#include "ssd_paths.h"
#include "vecw.h"
#include "vmath.h"

#include "threading.h"

#define Q SSD_CHUNK

static int imin(int a, int b) { return a < b ? a : b; }

/* Vectors of KV_W floats (cpu/vecw.h): state rows along P or N are whole vectors, so every update
 * is a vector FMA, and for P = N = 16 the compiler keeps the states in registers. MAXV: vectors in
 * the largest state the scan takes (kssd_use_scan: P N <= 256). */
#define MAXV (256 / KV_W)
/* Lane sum in a fixed order (the same on every thread). */
static inline float vsum(kv_f v) {
    float s = 0.0f;
    for (int l = 0; l < KV_W; l++) s += v[l];
    return s;
}

/* The recurrence beats the chunked products while the state is a handful of vectors (measured
 * with the kernels alone, 1 thread, B 32, T 256, H 8: P = N = 16 fwd+bwd 8 ms vs 17 ms chunked;
 * P = N = 32 and P = 16, N = 32 slower than chunked). */
int kssd_use_scan(int P, int N) { return P % KV_W == 0 && N % KV_W == 0 && (size_t)P * N <= 256; }

/* dst (cols, rows) = src (rows, cols) transposed. */
static void transpose(float *dst, const float *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Views of one (b, h): x, y rows H*P apart, dt H apart, Bm, Cm N apart. */
typedef struct {
    const float *x, *dt, *Bm, *Cm;
    float A, D;
    int T, H, P, N;
} BhIn;

/* at[i] = exp(dt_{t0+i} A), i < L, by vmath.h's vexp: one pass before the token loops, whose vector
 * registers all hold the state (a libm call there spilled them all). */
static void decays(float *at, const BhIn *v, int t0, int L) {
    for (int i = 0; i < L; i++) at[i] = vexp(v->dt[(size_t)(t0 + i) * v->H] * v->A);
}

/* bq[i N + n] = dt_{t0+i} B_{t0+i}[n], i < L: the forward's input weights of a chunk, one pass, so
 * that the token loop broadcasts each from memory into its FMA instead of forming it (a scalar
 * multiply and a broadcast per state vector). The same products, so the same bits. */
static void input_weights(float *bq, const BhIn *v, int t0, int L) {
    const int N = v->N;
    for (int i = 0; i < L; i++) {
        float d = v->dt[(size_t)(t0 + i) * v->H];
        const float *b = v->Bm + (size_t)(t0 + i) * N;
        for (int n = 0; n < N; n++) bq[(size_t)i * N + n] = d * b[n];
    }
}

/* Tokens [t0, t1) of one (b, h); ST:(N, P/KV_W) vectors, the running state transposed; at:(t1-t0)
 * the decays, bq:(t1-t0, N) the input weights. always_inline so that the call with constant P, N
 * (fwd_run_any) gets fully unrolled code. */
static inline __attribute__((always_inline)) void fwd_run(float *y, kv_f *ST, const float *at,
                                                          const float *bq, const BhIn *v, int t0,
                                                          int t1, const int P, const int N) {
    const size_t ld = (size_t)v->H * P;
    const int NP = P / KV_W;
    kv_f st[MAXV]; /* a local copy: no store through y can alias it, so it can live in registers */
    memcpy(st, ST, sizeof(kv_f) * N * NP);
    for (int t = t0; t < t1; t++) {
        const float *xt = v->x + t * ld, *bw = bq + (size_t)(t - t0) * N, *ct = v->Cm + (size_t)t * N;
        float a = at[t - t0];
        for (int j = 0; j < NP; j++) {
            kv_f x = kv_load(xt + j * KV_W), y0 = {0}, y1 = {0};
            for (int n = 0; n < N; n += 2) { /* S^T[n] = a S^T[n] + (dt B[n]) x; y += C[n] S^T[n] */
                kv_f s0 = a * st[n * NP + j] + bw[n] * x;
                kv_f s1 = a * st[(n + 1) * NP + j] + bw[n + 1] * x;
                st[n * NP + j] = s0;
                st[(n + 1) * NP + j] = s1;
                y0 += ct[n] * s0; /* two interleaved chains (N is even) */
                y1 += ct[n + 1] * s1;
            }
            kv_store(y + t * ld + j * KV_W, v->D * x + (y0 + y1));
        }
    }
    memcpy(ST, st, sizeof(kv_f) * N * NP);
}

#if KV_W < 16
/* fwd_run without 512-bit registers: a 16 x 16 state is 32 AVX2 (64 SSE) vectors, more than the
 * 16 registers, so fwd_run stores and reloads all of it every token. Here the chunk is swept once
 * per column block j of P and group of NG states, whose NG vectors stay in registers; y collects
 * the groups' partial sums in memory: y = D x + (((y_0) + y_1) + ...), groups in order. */
#define NG 8
static inline __attribute__((always_inline)) void fwd_run_grouped(float *y, kv_f *ST, const float *at,
                                                                  const float *bq, const BhIn *v,
                                                                  int t0, int t1, const int P,
                                                                  const int N) {
    const size_t ld = (size_t)v->H * P;
    const int NP = P / KV_W;
    for (int j = 0; j < NP; j++)
        for (int g = 0; g < N; g += NG) {
            kv_f st[NG];
            for (int k = 0; k < NG; k++) st[k] = ST[(g + k) * NP + j];
            for (int t = t0; t < t1; t++) {
                const float *bw = bq + (size_t)(t - t0) * N + g, *ct = v->Cm + (size_t)t * N + g;
                float a = at[t - t0], *yt = y + t * ld + j * KV_W;
                kv_f x = kv_load(v->x + t * ld + j * KV_W), y0 = {0}, y1 = {0};
                for (int k = 0; k < NG; k += 2) {
                    kv_f s0 = a * st[k] + bw[k] * x;
                    kv_f s1 = a * st[k + 1] + bw[k + 1] * x;
                    st[k] = s0;
                    st[k + 1] = s1;
                    y0 += ct[k] * s0;
                    y1 += ct[k + 1] * s1;
                }
                kv_f part = y0 + y1;
                if (g > 0) part = kv_load(yt) + part;
                if (g + NG >= N) part = v->D * x + part;
                kv_store(yt, part);
            }
            for (int k = 0; k < NG; k++) ST[(g + k) * NP + j] = st[k];
        }
}
#endif

/* Generic and specialised copies of fwd_run (P, N compile-time constants in the latter). */
static void fwd_run_any(float *y, kv_f *ST, const float *at, const float *bq, const BhIn *v, int t0,
                        int t1) {
#if KV_W < 16
    if (v->N % NG == 0) {
        if (v->P == 16 && v->N == 16) fwd_run_grouped(y, ST, at, bq, v, t0, t1, 16, 16);
        else fwd_run_grouped(y, ST, at, bq, v, t0, t1, v->P, v->N);
        return;
    }
#endif
    if (v->P == 16 && v->N == 16) fwd_run(y, ST, at, bq, v, t0, t1, 16, 16);
    else fwd_run(y, ST, at, bq, v, t0, t1, v->P, v->N);
}

/* One (b, h): saved_bh:(nch, P, N)|NULL, hT:(P, N)|NULL, h0:(P, N)|NULL; ws: P N + Q (N + 1)
 * floats. */
static void fwd_bh(float *y, float *saved_bh, float *hT, const float *h0, float *ws, const BhIn *v) {
    int P = v->P, N = v->N;
    size_t PN = (size_t)P * N;
    float *ST = ws, *at = ws + PN, *bq = at + Q; /* (N, P) running state (ws 64-byte aligned, P a
                                                  * multiple of KV_W), (Q) decays and (Q, N)
                                                  * input weights of a chunk */
    if (h0) transpose(ST, h0, P, N);
    else memset(ST, 0, sizeof(float) * PN);
    for (int t0 = 0; t0 < v->T; t0 += Q) {
        int t1 = imin(v->T, t0 + Q);
        if (saved_bh) transpose(saved_bh + (size_t)(t0 / Q) * PN, ST, N, P);
        decays(at, v, t0, t1 - t0);
        input_weights(bq, v, t0, t1 - t0);
        fwd_run_any(y, (kv_f *)(void *)ST, at, bq, v, t0, t1);
    }
    if (hT) transpose(hT, ST, N, P);
}

void kssd_scan_fwd(float *y, float *saved, float *hT, const float *x, const float *dt, const float *A,
                   const float *Bm, const float *Cm, const float *Dskip, const float *h0, int B, int T,
                   int H, int P, int N) {
    CHECK(B >= 0 && T >= 0 && H > 0 && P > 0 && N > 0, "ssd: bad dims B=%d T=%d H=%d P=%d N=%d",
          B, T, H, P, N);
    CHECK(kssd_use_scan(P, N), "ssd scan: P=%d N=%d not supported (use the chunked form)", P, N);
    size_t PN = (size_t)P * N, nch = (size_t)(T + Q - 1) / Q;
    size_t wsz = (PN + Q * ((size_t)N + 1) + 15) / 16 * 16;
    float *wsbuf = kscratch_floats(KS_SSD_WS, wsz * kt_max_threads());
    KT_FOR(kt_team((double)B * T * H * PN * KT_NS_SCAN, (long)B * H),
    for (int i = 0; i < B * H; i++) {
        int b = i / H, h = i % H;
        size_t xo = (size_t)b * T * H * P + (size_t)h * P;
        BhIn v = {x + xo, dt + (size_t)b * T * H + h, Bm + (size_t)b * T * N, Cm + (size_t)b * T * N,
                  A[h], Dskip[h], T, H, P, N};
        fwd_bh(y + xo, saved ? saved + (size_t)i * nch * PN : NULL, hT ? hT + (size_t)i * PN : NULL,
               h0 ? h0 + (size_t)i * PN : NULL, wsbuf + wsz * kt_thread_id(), &v);
    });
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Gradient views of one (b, h) (NULL = not wanted) and its dA, dD partials. */
typedef struct {
    float *dx, *ddt, *dBm, *dCm;
    double pA, pD;
} BhOut;

/* dst[0 .. KV_W) += v */
static inline void vadd_to(float *dst, kv_f v) { kv_store(dst, kv_load(dst) + v); }

/* Chunk [t0, t0 + L) in reverse. St:(L+1, P, N) holds S_{t0-1 .. t0+L-1}; G:(P, N) and GT:(N, P)
 * (vectors along N and along P) enter holding dL/dS_{t0+L} (or dhT) with its decay a_{t0+L} still
 * to apply (*pend), and leave holding dL/dS_{t0} with *pend = a_{t0}: deferring the scale lets
 * each step fold it into the update's FMA (G = a G + dy C) instead of a separate multiply. */
static inline __attribute__((always_inline)) void bwd_run(BhOut *o, kv_f *G, kv_f *GT, float *pend,
                                                          const float *St, const float *at,
                                                          const float *dy, const BhIn *v, int t0,
                                                          int L, const int P, const int N) {
    const size_t ld = (size_t)v->H * P, PN = (size_t)P * N;
    const int NP = P / KV_W, NN = N / KV_W;
    kv_f Gl[MAXV], GTl[MAXV]; /* local copies (see fwd_run) */
    memcpy(Gl, G, sizeof(kv_f) * P * NN);
    memcpy(GTl, GT, sizeof(kv_f) * N * NP);
    float sc = *pend;
    for (int i = L - 1; i >= 0; i--) {
        int t = t0 + i;
        const float *xt = v->x + t * ld, *gy = dy + t * ld;
        const float *bt = v->Bm + (size_t)t * N, *ct = v->Cm + (size_t)t * N;
        const float *Sp = St + (size_t)i * PN, *Sc = Sp + PN; /* S_{t-1}, S_t */
        float dtt = v->dt[(size_t)t * v->H], a = at[i];
        /* G_t = a_{t+1} G_{t+1} + dy_t (x) C_t, in both layouts */
        for (int p = 0; p < P; p++)
            for (int j = 0; j < NN; j++) Gl[p * NN + j] = sc * Gl[p * NN + j] + gy[p] * kv_load(ct + j * KV_W);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < NP; j++) GTl[n * NP + j] = sc * GTl[n * NP + j] + ct[n] * kv_load(gy + j * KV_W);
        /* <G_t, S_{t-1}>;  dC_t += sum_p dy[p] S_t[p,:];  dB_t += dt sum_p x[p] G[p,:]
         * (each sum as two interleaved chains: twice the FMAs in flight) */
        kv_f ga0 = {0}, ga1 = {0};
        for (int j = 0; j < NN; j++) {
            kv_f dc0 = {0}, dc1 = {0}, db0 = {0}, db1 = {0};
            for (int p = 0; p < P; p += 2) { /* P is even (a multiple of KV_W) */
                const float *s0 = Sp + (size_t)p * N + j * KV_W, *s1 = Sc + (size_t)p * N + j * KV_W;
                kv_f g0 = Gl[p * NN + j], g1 = Gl[(p + 1) * NN + j];
                ga0 += g0 * kv_load(s0);
                ga1 += g1 * kv_load(s0 + N);
                dc0 += gy[p] * kv_load(s1);
                dc1 += gy[p + 1] * kv_load(s1 + N);
                db0 += xt[p] * g0;
                db1 += xt[p + 1] * g1;
            }
            if (o->dCm) vadd_to(o->dCm + (size_t)t * N + j * KV_W, dc0 + dc1);
            if (o->dBm) vadd_to(o->dBm + (size_t)t * N + j * KV_W, dtt * (db0 + db1));
        }
        /* gb = G_t B_t (along P, from G^T);  dx += dt gb + D dy */
        kv_f gdt = {0}, gd = {0};
        for (int j = 0; j < NP; j++) {
            kv_f gb0 = {0}, gb1 = {0}, x = kv_load(xt + j * KV_W), g = kv_load(gy + j * KV_W);
            for (int n = 0; n < N; n += 2) {
                gb0 += bt[n] * GTl[n * NP + j];
                gb1 += bt[n + 1] * GTl[(n + 1) * NP + j];
            }
            kv_f gb = gb0 + gb1;
            gdt += gb * x;
            gd += g * x;
            if (o->dx) vadd_to(o->dx + t * ld + j * KV_W, dtt * gb + v->D * g);
        }
        float g_alpha = vsum(ga0 + ga1);
        o->pD += vsum(gd);
        /* a_t = exp(dt A): d a / d dt = a A, d a / d A = a dt */
        if (o->ddt) o->ddt[(size_t)t * v->H] += vsum(gdt) + g_alpha * a * v->A;
        o->pA += (double)g_alpha * a * dtt;
        sc = a; /* the step before t gets a_t G_t */
    }
    *pend = sc;
    memcpy(G, Gl, sizeof(kv_f) * P * NN);
    memcpy(GT, GTl, sizeof(kv_f) * N * NP);
}

#if KV_W < 16
/* Without AVX-512, G and G^T (2 P N floats: 64 AVX2 vectors at P = N = 16, four times the
 * register file) went through memory on every token of bwd_run. Here each sweep over the chunk
 * keeps a few rows of one of them in registers (at most 8 vectors): the sweeps over rows of G give
 * <G_t, S_{t-1}> and sum_p x_t[p] G_t[p, :], those over rows of G^T give G_t B_t, each summed
 * over the sweeps into per-token buffers; a last pass writes dx, ddt, dB, dC and the dA, dD
 * partials. The same products as bwd_run, summed in another order. Used at P = N = 16, where the
 * dimensions are constants and the rows stay in registers (1 thread, B 32, T 256, H 8: 1.3x);
 * with run-time dimensions the arrays of rows stay in memory and it was 1.05-1.2x slower. */
#define RMAX (256 / KV_W) /* the longest state row (P, N <= 256 / KV_W) */

/* Rows of vecs_per_row vectors each that make at most 8 vectors, dividing rows. */
static inline int rows_per_sweep(int vecs_per_row, int rows) {
    int r = vecs_per_row >= 8 ? 1 : 8 / vecs_per_row;
    while (rows % r) r /= 2;
    return r;
}

/* g[r * nv + j] <-> row r, vector j of a matrix with rows ld floats apart */
static inline __attribute__((always_inline)) void rows_load(kv_f *g, const float *m, int rows,
                                                            int nv, int ld) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < nv; j++) g[r * nv + j] = kv_load(m + (size_t)r * ld + j * KV_W);
}
static inline __attribute__((always_inline)) void rows_store(float *m, const kv_f *g, int rows,
                                                             int nv, int ld) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < nv; j++) kv_store(m + (size_t)r * ld + j * KV_W, g[r * nv + j]);
}

/* bwd_run's contract, with G (P, N) and GT (N, P) as floats. */
static inline __attribute__((always_inline)) void bwd_run_swept(BhOut *o, float *G, float *GT,
                                                                float *pend, const float *St,
                                                                const float *at, const float *dy,
                                                                const BhIn *v, int t0, int L,
                                                                const int P, const int N) {
    const size_t ld = (size_t)v->H * P, PN = (size_t)P * N;
    const int NP = P / KV_W, NN = N / KV_W;
    const int RG = rows_per_sweep(NN, P), RT = rows_per_sweep(NP, N);
    float ga[Q * KV_W];   /* per token: the lanes of <G_t, S_{t-1}> */
    float db[Q * RMAX]; /* per token: sum_p x_t[p] G_t[p, :] */
    float gb[Q * RMAX]; /* per token: G_t B_t */
    memset(ga, 0, sizeof(float) * (size_t)L * KV_W);
    memset(db, 0, sizeof(float) * (size_t)L * N);
    memset(gb, 0, sizeof(float) * (size_t)L * P);
    for (int p0 = 0; p0 < P; p0 += RG) { /* rows p0 .. p0 + RG of G */
        kv_f g[8];
        rows_load(g, G + (size_t)p0 * N, RG, NN, N);
        float sc = *pend;
        for (int i = L - 1; i >= 0; i--) {
            int t = t0 + i;
            const float *xt = v->x + t * ld, *gy = dy + t * ld, *ct = v->Cm + (size_t)t * N;
            const float *Sp = St + (size_t)i * PN;
            kv_f gav = {0};
            for (int j = 0; j < NN; j++) {
                kv_f c = kv_load(ct + j * KV_W), dbv = {0};
                for (int r = 0; r < RG; r++) {
                    int p = p0 + r;
                    kv_f gg = sc * g[r * NN + j] + gy[p] * c;
                    g[r * NN + j] = gg;
                    gav += gg * kv_load(Sp + (size_t)p * N + j * KV_W);
                    dbv += xt[p] * gg;
                }
                vadd_to(db + (size_t)i * N + j * KV_W, dbv);
            }
            vadd_to(ga + (size_t)i * KV_W, gav);
            sc = at[i];
        }
        rows_store(G + (size_t)p0 * N, g, RG, NN, N);
    }
    for (int n0 = 0; n0 < N; n0 += RT) { /* rows n0 .. n0 + RT of G^T */
        kv_f g[8];
        rows_load(g, GT + (size_t)n0 * P, RT, NP, P);
        float sc = *pend;
        for (int i = L - 1; i >= 0; i--) {
            int t = t0 + i;
            const float *gy = dy + t * ld, *ct = v->Cm + (size_t)t * N, *bt = v->Bm + (size_t)t * N;
            for (int j = 0; j < NP; j++) {
                kv_f dyv = kv_load(gy + j * KV_W), gbv = {0};
                for (int r = 0; r < RT; r++) {
                    int n = n0 + r;
                    kv_f gg = sc * g[r * NP + j] + ct[n] * dyv;
                    g[r * NP + j] = gg;
                    gbv += bt[n] * gg;
                }
                vadd_to(gb + (size_t)i * P + j * KV_W, gbv);
            }
            sc = at[i];
        }
        rows_store(GT + (size_t)n0 * P, g, RT, NP, P);
    }
    for (int i = L - 1; i >= 0; i--) {
        int t = t0 + i;
        const float *xt = v->x + t * ld, *gy = dy + t * ld, *Sc = St + (size_t)(i + 1) * PN;
        float dtt = v->dt[(size_t)t * v->H], a = at[i];
        kv_f gdt = {0}, gd = {0};
        for (int j = 0; j < NP; j++) {
            kv_f g = kv_load(gb + (size_t)i * P + j * KV_W), x = kv_load(xt + j * KV_W);
            kv_f y = kv_load(gy + j * KV_W);
            gdt += g * x;
            gd += y * x;
            if (o->dx) vadd_to(o->dx + t * ld + j * KV_W, dtt * g + v->D * y);
        }
        if (o->dBm)
            for (int j = 0; j < NN; j++)
                vadd_to(o->dBm + (size_t)t * N + j * KV_W, dtt * kv_load(db + (size_t)i * N + j * KV_W));
        if (o->dCm)
            for (int j = 0; j < NN; j++) { /* dC_t += sum_p dy[p] S_t[p, :], two chains */
                kv_f dc0 = {0}, dc1 = {0};
                for (int p = 0; p < P; p += 2) {
                    dc0 += gy[p] * kv_load(Sc + (size_t)p * N + j * KV_W);
                    dc1 += gy[p + 1] * kv_load(Sc + (size_t)(p + 1) * N + j * KV_W);
                }
                vadd_to(o->dCm + (size_t)t * N + j * KV_W, dc0 + dc1);
            }
        float g_alpha = vsum(kv_load(ga + (size_t)i * KV_W));
        o->pD += vsum(gd);
        if (o->ddt) o->ddt[(size_t)t * v->H] += vsum(gdt) + g_alpha * a * v->A;
        o->pA += (double)g_alpha * a * dtt;
    }
    *pend = at[0];
}
#endif

/* States S_{t0-1 .. t0+L-1} of one chunk into St:(L+1, P, N), from the entry state S0:(P, N).
 * Also prefetches the chunk's rows of dy and dx (pf0, pf1; NULL = none): bwd_run walks them
 * backwards, H*P floats apart, a pattern the hardware prefetchers miss (each row was a DRAM
 * round trip, ~40% of the backward). */
static inline __attribute__((always_inline)) void states_run(float *St, const float *S0,
                                                             const float *at, const BhIn *v, int t0,
                                                             int L, const float *pf0,
                                                             const float *pf1, const int P,
                                                             const int N) {
    const size_t ld = (size_t)v->H * P, PN = (size_t)P * N;
    memcpy(St, S0, sizeof(float) * PN);
    for (int i = 0; i < L; i++) {
        int t = t0 + i;
        for (int q = 0; q < P; q += 16) { /* 16 floats = one 64-byte line */
            __builtin_prefetch(pf0 + t * ld + q, 0);
            if (pf1) __builtin_prefetch(pf1 + t * ld + q, 1);
        }
        const float *xt = v->x + t * ld, *bt = v->Bm + (size_t)t * N, *Sp = St + (size_t)i * PN;
        float *Sn = St + (size_t)(i + 1) * PN, dtt = v->dt[(size_t)t * v->H], a = at[i];
        for (int j = 0; j < N / KV_W; j++) {
            kv_f b = dtt * kv_load(bt + j * KV_W);
            for (int p = 0; p < P; p++)
                kv_store(Sn + (size_t)p * N + j * KV_W, a * kv_load(Sp + (size_t)p * N + j * KV_W) + xt[p] * b);
        }
    }
}

/* One (b, h): all chunks in reverse. G0 = dhT or NULL; dh0 (P, N) += a_0 G_0 when not NULL.
 * ws: (Q + 3) P N + Q floats, 64-byte aligned. */
static void bwd_bh(BhOut *o, float *dh0, const float *dhT, const float *saved_bh, const float *dy,
                   float *ws, const BhIn *v) {
    int P = v->P, N = v->N, nch = (v->T + Q - 1) / Q;
    size_t PN = (size_t)P * N;
    float *G = ws, *GT = G + PN, *St = GT + PN; /* P, N are multiples of KV_W: kv_f-aligned */
    float *at = St + ((size_t)Q + 1) * PN;      /* (Q) decays of a chunk */
    float pend = 1.0f;                          /* decay not yet applied to G, GT (bwd_run) */
    if (dhT) {
        memcpy(G, dhT, sizeof(float) * PN);
        transpose(GT, dhT, P, N);
    } else {
        memset(G, 0, sizeof(float) * 2 * PN);
    }
    for (int k = nch - 1; k >= 0; k--) {
        int t0 = k * Q, L = imin(Q, v->T - t0);
        const float *S0 = saved_bh + (size_t)k * PN;
        decays(at, v, t0, L);
        if (P == 16 && N == 16) {
            states_run(St, S0, at, v, t0, L, dy, o->dx, 16, 16);
#if KV_W < 16
            bwd_run_swept(o, G, GT, &pend, St, at, dy, v, t0, L, 16, 16);
#else
            bwd_run(o, (kv_f *)(void *)G, (kv_f *)(void *)GT, &pend, St, at, dy, v, t0, L, 16, 16);
#endif
        } else {
            states_run(St, S0, at, v, t0, L, dy, o->dx, P, N);
            bwd_run(o, (kv_f *)(void *)G, (kv_f *)(void *)GT, &pend, St, at, dy, v, t0, L, P, N);
        }
    }
    if (dh0) /* dL/dS_{-1} = a_0 dL/dS_0 */
        for (size_t j = 0; j < PN; j++) dh0[j] += pend * G[j];
}

void kssd_scan_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
                   const float *dy, const float *dhT, const float *x, const float *dt, const float *A,
                   const float *Bm, const float *Cm, const float *Dskip, const float *h0,
                   const float *saved, int B, int T, int H, int P, int N) {
    CHECK(B >= 0 && T >= 0 && H > 0 && P > 0 && N > 0, "ssd: bad dims B=%d T=%d H=%d P=%d N=%d",
          B, T, H, P, N);
    CHECK(saved || T == 0, "ssd_bwd: saved is NULL (run the forward with saved)");
    CHECK(kssd_use_scan(P, N), "ssd scan: P=%d N=%d not supported (use the chunked form)", P, N);
    (void)h0; /* the entry state of chunk 0 is in saved */
    size_t PN = (size_t)P * N, nch = (size_t)(T + Q - 1) / Q;
    size_t wsz = ((3 + (size_t)Q) * PN + Q + 15) / 16 * 16;
    float *wsbuf = kscratch_floats(KS_SSD_WS, wsz * kt_max_threads());
    double *part = kscratch(KS_SSD_PART, sizeof(double) * (2 * (size_t)B * H + 1)); /* pA, pD */
    KT_FOR(kt_team(3.0 * B * T * H * PN * KT_NS_SCAN, B),
    for (int b = 0; b < B; b++) {
        float *ws = wsbuf + wsz * kt_thread_id();
        for (int h = 0; h < H; h++) { /* heads in order: dBm, dCm sum over them */
            size_t bh = (size_t)b * H + h, xo = (size_t)b * T * H * P + (size_t)h * P;
            size_t dto = (size_t)b * T * H + h, bo = (size_t)b * T * N;
            BhIn v = {x + xo, dt + dto, Bm + bo, Cm + bo, A[h], Dskip[h], T, H, P, N};
            BhOut o = {dx ? dx + xo : NULL, ddt ? ddt + dto : NULL, dBm ? dBm + bo : NULL,
                       dCm ? dCm + bo : NULL, 0, 0};
            bwd_bh(&o, dh0 ? dh0 + bh * PN : NULL, dhT ? dhT + bh * PN : NULL,
                   saved ? saved + bh * nch * PN : NULL, dy + xo, ws, &v);
            part[2 * bh] = o.pA;
            part[2 * bh + 1] = o.pD;
        }
    });
    for (int h = 0; h < H; h++) { /* fixed-order reduction over b */
        double sa = 0, sd = 0;
        for (int b = 0; b < B; b++) {
            sa += part[2 * ((size_t)b * H + h)];
            sd += part[2 * ((size_t)b * H + h) + 1];
        }
        if (dA) dA[h] += (float)sa;
        if (dD) dD[h] += (float)sd;
    }
}
