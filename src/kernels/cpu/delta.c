/* cpu/delta.c: the delta-rule recurrence of DeltaNet / Gated DeltaNet / DeltaProduct (spec fp-rnn
 * §5.4, §5.5), fast CPU version; contract in kernels.h (k_delta_*), oracle in ref/delta.c.
 *
 * Per (b, h) the state S:(K, V) lives in per-thread scratch and every token is a few sweeps over
 * its K rows, vector operations along V with the column sums held in registers (sweep):
 *   sweep 0     S[a] *= exp(g);  u += k_0[a] S[a]                        (u = S^T k_0)
 *   sweep j+1   w = beta_j (v_j - u);  S[a] += k_j[a] w;  acc += n[a] S[a]  (n = k_{j+1}, or q)
 * so a token costs nh + 1 sweeps and the read-out o = S^T q rides on the last update.
 * Backward, with dS = dL/dS after the sub-step (derivation in ref/delta.c):
 *   output      dq[a] += S_t[a] . do;  dS[a] += q[a] do;  p += k_{nh-1}[a] dS[a]       (p = dS^T k)
 *   sub-step j  r = dS[a] . e_j;  dk_j[a] += beta (r - S_pre[a] . p);  dbeta_j += k_j[a] r;
 *               dS[a] -= beta k_j[a] p;  then p for j - 1 from the updated row;  dv_j += beta p
 *   gate        dg += exp(g) sum_a dS[a] . S_prev[a];  dS[a] *= exp(g)
 * The backward needs the state entering every token in reverse order. The map S -> (I - beta k
 * k^T) S is singular at beta |k|^2 = 1 (beta = 1 with unit keys), so the states cannot be
 * recovered by inverting the steps; instead a forward pass keeps the state entering every chunk
 * of DCH tokens, and each chunk's states are recomputed from it just before the chunk's reverse
 * pass (three forward-equivalents plus the backward; no saved buffer between fwd and bwd).
 *
 * Threads: one (b, h) per work item; every gradient entry belongs to exactly one (b, h), so no
 * reduction crosses items and the results are bit-identical at any thread count.
 * Scratch (kscratch.h, persistent, per thread): fwd and step K V + 2 V floats; bwd
 * (ceil(T / DCH) + DCH + nh + 2) K V + (nh + 2) V floats (each part rounded up to 16). The slots
 * are the SSD scan's (KS_SSD_WS, KS_SSD_STEP): a slot is only held for one kernel call, and no
 * kernel calls the other, so sharing them only caps the memory at the larger of the two users.
 * Out of scope: an initial state h0 and a gradient on the final state (the layers start from zero
 * and read the final state only in no-grad prefill), the chunked WY form (worth it for large K).
 */
#include <math.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"
#include "kscratch.h"
#include "threading.h"
#include "vecw.h"
#include "vmath.h"

#define DCH 32 /* tokens per checkpoint of the backward */

/* Vectors along V (cpu/vecw.h). */

/* sum_i a[i] b[i] in a fixed order (two vector chains, lanes, then the tail) */
static inline float dotv(const float *a, const float *b, int n) {
    kv_f s0 = {0}, s1 = {0};
    int i = 0;
    for (; i + 2 * KV_W <= n; i += 2 * KV_W) {
        s0 += kv_load(a + i) * kv_load(b + i);
        s1 += kv_load(a + i + KV_W) * kv_load(b + i + KV_W);
    }
    if (i + KV_W <= n) {
        s0 += kv_load(a + i) * kv_load(b + i);
        i += KV_W;
    }
    s0 += s1;
    float s = 0.f;
    for (int l = 0; l < KV_W; l++) s += s0[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

static void check_dims(int B, int T, int H, int nh, int K, int V) {
    CHECK(B >= 0 && T >= 0 && H > 0 && nh > 0 && K > 0 && V > 0,
          "delta: bad dims B=%d T=%d H=%d nh=%d K=%d V=%d", B, T, H, nh, K, V);
}

/* One (b, h): base pointers at token 0 (sub-step 0) and strides per token (s*) and per
 * sub-step (j*), in the layouts of kernels.h. */
typedef struct {
    const float *q, *k, *v, *beta, *g;
    size_t sq, sk, sv, sb, sg, so, jk, jv, jb; /* so: of o and dout, (H V) */
    int T, nh, K, V;
} Bh;

static Bh bh_of(const float *q, const float *k, const float *v, const float *beta, const float *g,
                int b, int h, int T, int H, int nh, int K, int V) {
    size_t bt = (size_t)b * T;
    Bh x = {q + (bt * H + h) * K,
            k + (bt * nh * H + h) * K,
            v + (bt * nh * H + h) * V,
            beta + bt * nh * H + h,
            g ? g + bt * H + h : NULL,
            (size_t)H * K, (size_t)nh * H * K, (size_t)nh * H * V, (size_t)nh * H, (size_t)H,
            (size_t)H * V, (size_t)H * K, (size_t)H * V, (size_t)H,
            T, nh, K, V};
    return x;
}

/* ---- forward ------------------------------------------------------------------------------------ */

/* One sweep over the K rows of S:(K, V), in blocks of CB vectors of columns so that the column
 * sums stay in registers (row by row, a V-long accumulator would be loaded and stored per row):
 *   row <- row * a (scale)  +  uk[r] w (uk != NULL);   acc += n[r] row  (n != NULL)
 * Every column's sum runs over the rows in order, so the result does not depend on the blocking.
 * always_inline with literal NULLs / flags at the call sites below: one branch-free loop each. */
#define CB 4
static inline __attribute__((always_inline)) void sweep_cols(float *S, int K, int V, int c0, const int nv,
                                                             const int scale, float a, const float *uk,
                                                             const float *w, const float *n, float *acc) {
    kv_f wv[CB], av[CB];
    for (int i = 0; i < nv; i++) {
        av[i] = (kv_f){0};
        if (uk) wv[i] = kv_load(w + c0 + i * KV_W);
    }
    for (int r = 0; r < K; r++) {
        float *row = S + (size_t)r * V + c0, kr = uk ? uk[r] : 0.f, nr = n ? n[r] : 0.f;
        for (int i = 0; i < nv; i++) {
            kv_f x = kv_load(row + i * KV_W);
            if (scale) x *= a;
            if (uk) x += kr * wv[i];
            if (scale || uk) kv_store(row + i * KV_W, x);
            if (n) av[i] += nr * x;
        }
    }
    if (n)
        for (int i = 0; i < nv; i++) kv_store(acc + c0 + i * KV_W, av[i]);
}

static inline __attribute__((always_inline)) void sweep(float *S, int K, int V, const int scale, float a,
                                                        const float *uk, const float *w, const float *n,
                                                        float *acc) {
    int c0 = 0;
    for (; c0 + CB * KV_W <= V; c0 += CB * KV_W) sweep_cols(S, K, V, c0, CB, scale, a, uk, w, n, acc);
    for (; c0 + KV_W <= V; c0 += KV_W) sweep_cols(S, K, V, c0, 1, scale, a, uk, w, n, acc);
    for (int c = c0; c < V; c++) { /* the last V mod KV_W columns */
        float s = 0.f;
        for (int r = 0; r < K; r++) {
            float *x = S + (size_t)r * V + c;
            if (scale) *x *= a;
            if (uk) *x += uk[r] * w[c];
            if (n) s += n[r] * *x;
        }
        if (n) acc[c] = s;
    }
}

/* acc = S^T n, S scaled by a first when `scale` */
static void sweep_dot(float *S, int K, int V, int scale, float a, const float *n, float *acc) {
    if (scale) sweep(S, K, V, 1, a, NULL, NULL, n, acc);
    else sweep(S, K, V, 0, 1.f, NULL, NULL, n, acc);
}
/* S += uk w^T, then acc = S^T n (n NULL: the update alone) */
static void sweep_upd(float *S, int K, int V, const float *uk, const float *w, const float *n, float *acc) {
    if (n) sweep(S, K, V, 0, 1.f, uk, w, n, acc);
    else sweep(S, K, V, 0, 1.f, uk, w, NULL, NULL);
}

/* Token t on S:(K, V) in place. out:(V)|NULL receives S^T q (NULL: no read-out). u, acc:(V). */
static void fwd_token(float *restrict S, float *restrict out, float *restrict u, float *restrict acc,
                      const Bh *x, int t) {
    const int K = x->K, V = x->V, nh = x->nh;
    const float *kt = x->k + t * x->sk, *vt = x->v + t * x->sv, *bt = x->beta + t * x->sb;
    const float *qt = x->q + t * x->sq;
    sweep_dot(S, K, V, x->g != NULL, x->g ? vexp(x->g[t * x->sg]) : 1.f, kt, u); /* u = S^T k_0 */
    for (int j = 0; j < nh; j++) {
        const float *kj = kt + j * x->jk, *vj = vt + j * x->jv;
        float bj = bt[j * x->jb];
        for (int c = 0; c < V; c++) u[c] = bj * (vj[c] - u[c]); /* u now holds w */
        int last = j + 1 == nh;
        if (last) sweep_upd(S, K, V, kj, u, out ? qt : NULL, out);
        else sweep_upd(S, K, V, kj, u, kj + x->jk, acc);
        if (!last) memcpy(u, acc, sizeof(float) * V);
    }
}

/* The team of a pass over B*H states of KV floats, nh sub-steps per token; the backward is
 * about three forwards (recompute, then the two sweeps of the adjoint). */
static int delta_team(int B, int T, int H, int nh, size_t KV, double passes) {
    return kt_team(passes * B * H * (double)T * nh * KV * KT_NS_SCAN, (long)B * H);
}

void k_delta_fwd(float *o, float *S_out, const float *q, const float *k, const float *v,
                 const float *beta, const float *g, int B, int T, int H, int nh, int K, int V) {
    check_dims(B, T, H, nh, K, V);
    const size_t KV = (size_t)K * V, per = up16(KV) + 2 * up16((size_t)V);
    float *ws = kscratch_floats(KS_SSD_WS, per * kt_max_threads());
    KT_FOR(delta_team(B, T, H, nh, KV, 1.0),
    for (int i = 0; i < B * H; i++) {
        int b = i / H, h = i % H;
        Bh x = bh_of(q, k, v, beta, g, b, h, T, H, nh, K, V);
        float *S = ws + per * kt_thread_id(), *u = S + up16(KV), *acc = u + up16((size_t)V);
        float *ob = o + ((size_t)b * T * H + h) * V;
        memset(S, 0, sizeof(float) * KV);
        for (int t = 0; t < T; t++) fwd_token(S, ob + t * x.so, u, acc, &x, t);
        if (S_out) memcpy(S_out + (size_t)i * KV, S, sizeof(float) * KV);
    });
}

void k_delta_step(float *o, float *S_out, const float *S_in, const float *q, const float *k,
                  const float *v, const float *beta, const float *g, int B, int H, int nh, int K,
                  int V) {
    check_dims(B, 1, H, nh, K, V);
    const size_t KV = (size_t)K * V, per = up16(KV) + 2 * up16((size_t)V);
    float *ws = kscratch_floats(KS_SSD_STEP, per * kt_max_threads());
    /* one K x V state update per (b, head): parallel only when the states are large */
    KT_FOR(kt_team((double)B * H * nh * KV * KT_NS_STEP, (long)B * H),
    for (int i = 0; i < B * H; i++) {
        int b = i / H, h = i % H;
        Bh x = bh_of(q, k, v, beta, g, b, h, 1, H, nh, K, V);
        float *mine = ws + per * kt_thread_id(), *u = mine + up16(KV), *acc = u + up16((size_t)V);
        /* work in the committed slot directly when there is one (it may be S_in itself) */
        float *S = S_out ? S_out + (size_t)i * KV : mine;
        if (S != S_in + (size_t)i * KV) memcpy(S, S_in + (size_t)i * KV, sizeof(float) * KV);
        fwd_token(S, o + (size_t)i * V, u, acc, &x, 0);
    });
}

/* ---- backward --------------------------------------------------------------------------------- */

/* Per-thread workspace of the backward, carved from one scratch block. */
typedef struct {
    float *ck;   /* (nch, K, V) state entering each chunk */
    float *St;   /* (DCH + 1, K, V) states of the current chunk: St[i] enters its token i */
    float *Sub;  /* (nh, K, V) state entering each sub-step of the current token */
    float *dS;   /* (K, V) */
    float *E;    /* (nh, V) e_j = v_j - S_pre^T k_j */
    float *p, *pn; /* (V) */
} Ws;

static size_t ws_carve(float *base, Ws *w, int T, int nh, int K, int V) {
    size_t KV = up16((size_t)K * V), Vv = up16((size_t)V), off = 0, nch = (size_t)(T + DCH - 1) / DCH;
#define TAKE(f, n) w->f = base ? base + off : NULL, off += (n)
    TAKE(ck, nch * KV);
    TAKE(St, (DCH + 1) * KV);
    TAKE(Sub, (size_t)nh * KV);
    TAKE(dS, KV);
    TAKE(E, (size_t)nh * Vv);
    TAKE(p, Vv);
    TAKE(pn, Vv);
#undef TAKE
    return off;
}

/* Gradient views of one (b, h), same bases and strides as Bh; NULL = not wanted. */
typedef struct {
    float *dq, *dk, *dv, *dbeta, *dg;
    const float *dout;
} BhGrad;

/* Sub-states and e_j of token t from the state entering it (Sprev), into w->Sub and w->E. */
static void substates(Ws *w, const float *restrict Sprev, const Bh *x, int t) {
    const int K = x->K, V = x->V, nh = x->nh;
    const size_t KV = up16((size_t)K * V), Vv = up16((size_t)V);
    const float *kt = x->k + t * x->sk, *vt = x->v + t * x->sv, *bt = x->beta + t * x->sb;
    float gam = x->g ? vexp(x->g[t * x->sg]) : 1.f;
    float *u = w->p; /* p is free until the token's backward starts */
    memset(u, 0, sizeof(float) * V);
    for (int r = 0; r < K; r++) {
        float *row = w->Sub + (size_t)r * V, kr = kt[r];
        const float *src = Sprev + (size_t)r * V;
        for (int c = 0; c < V; c++) {
            row[c] = gam * src[c];
            u[c] += kr * row[c];
        }
    }
    for (int j = 0; j < nh; j++) {
        const float *vj = vt + j * x->jv;
        float *e = w->E + (size_t)j * Vv;
        for (int c = 0; c < V; c++) e[c] = vj[c] - u[c];
        if (j + 1 == nh) break;
        const float *kj = kt + j * x->jk, *kn = kj + x->jk;
        float bj = bt[j * x->jb];
        float *cur = w->Sub + (size_t)j * KV, *nxt = cur + KV;
        memset(u, 0, sizeof(float) * V);
        for (int r = 0; r < K; r++) {
            const float *cr = cur + (size_t)r * V;
            float *nr = nxt + (size_t)r * V, f = bj * kj[r], kr = kn[r];
            for (int c = 0; c < V; c++) {
                nr[c] = cr[c] + f * e[c];
                u[c] += kr * nr[c];
            }
        }
    }
}

/* Reverse of token t: w->dS enters as dL/dS_t (Snow = S_t) and leaves as dL/dS_{t-1}. */
static void bwd_token(Ws *w, const BhGrad *d, const float *restrict Sprev, const float *restrict Snow,
                      const Bh *x, int t) {
    const int K = x->K, V = x->V, nh = x->nh;
    const size_t KV = up16((size_t)K * V), Vv = up16((size_t)V);
    const float *kt = x->k + t * x->sk, *bt = x->beta + t * x->sb, *qt = x->q + t * x->sq;
    const float *gy = d->dout + t * x->so;
    float *dS = w->dS, *p = w->p, *pn = w->pn;
    substates(w, Sprev, x, t);
    /* o = S_t^T q */
    const float *kl = kt + (nh - 1) * x->jk;
    float *dq = d->dq ? d->dq + t * x->sq : NULL;
    memset(p, 0, sizeof(float) * V);
    for (int r = 0; r < K; r++) {
        float *row = dS + (size_t)r * V, qr = qt[r], kr = kl[r];
        if (dq) dq[r] += dotv(Snow + (size_t)r * V, gy, V);
        for (int c = 0; c < V; c++) {
            row[c] += qr * gy[c];
            p[c] += kr * row[c];
        }
    }
    float gam = x->g ? vexp(x->g[t * x->sg]) : 1.f, dgam = 0.f;
    for (int j = nh - 1; j >= 0; j--) {
        const float *kj = kt + j * x->jk, *e = w->E + (size_t)j * Vv, *Sp = w->Sub + (size_t)j * KV;
        const float *kp = j ? kj - x->jk : NULL;
        float bj = bt[j * x->jb], db = 0.f;
        float *dk = d->dk ? d->dk + t * x->sk + j * x->jk : NULL;
        if (kp) memset(pn, 0, sizeof(float) * V);
        for (int r = 0; r < K; r++) {
            float *row = dS + (size_t)r * V;
            float rr = dotv(row, e, V), f = bj * kj[r];
            if (dk) dk[r] += bj * (rr - dotv(Sp + (size_t)r * V, p, V));
            db += kj[r] * rr;
            for (int c = 0; c < V; c++) row[c] -= f * p[c];
            if (kp) {
                float kr = kp[r];
                for (int c = 0; c < V; c++) pn[c] += kr * row[c];
            } else if (x->g) { /* S_pre of sub-step 0 = exp(g) S_prev */
                dgam += dotv(row, Sprev + (size_t)r * V, V);
                for (int c = 0; c < V; c++) row[c] *= gam;
            }
        }
        if (d->dbeta) d->dbeta[t * x->sb + j * x->jb] += db;
        if (d->dv) {
            float *dv = d->dv + t * x->sv + j * x->jv;
            for (int c = 0; c < V; c++) dv[c] += bj * p[c];
        }
        float *tmp = p; p = pn; pn = tmp;
    }
    if (x->g && d->dg) d->dg[t * x->sg] += dgam * gam;
}

/* One (b, h): checkpoints, then each chunk recomputed and reversed. */
static void bwd_bh(Ws *w, const BhGrad *d, const Bh *x) {
    const int T = x->T, K = x->K, V = x->V;
    const size_t KV = up16((size_t)K * V), kv = (size_t)K * V;
    float *u = w->p, *acc = w->pn;
    float *S = w->St; /* running state of the checkpoint pass */
    memset(S, 0, sizeof(float) * kv);
    for (int t = 0; t < T; t++) {
        if (t % DCH == 0) memcpy(w->ck + (size_t)(t / DCH) * KV, S, sizeof(float) * kv);
        fwd_token(S, NULL, u, acc, x, t);
    }
    memset(w->dS, 0, sizeof(float) * kv);
    for (int c0 = (T - 1) / DCH * DCH; c0 >= 0; c0 -= DCH) {
        int L = T - c0 < DCH ? T - c0 : DCH;
        memcpy(w->St, w->ck + (size_t)(c0 / DCH) * KV, sizeof(float) * kv);
        for (int i = 0; i < L; i++) {
            memcpy(w->St + (size_t)(i + 1) * KV, w->St + (size_t)i * KV, sizeof(float) * kv);
            fwd_token(w->St + (size_t)(i + 1) * KV, NULL, w->p, w->pn, x, c0 + i);
        }
        for (int i = L - 1; i >= 0; i--)
            bwd_token(w, d, w->St + (size_t)i * KV, w->St + (size_t)(i + 1) * KV, x, c0 + i);
    }
}

void k_delta_bwd(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                 const float *q, const float *k, const float *v, const float *beta, const float *g,
                 int B, int T, int H, int nh, int K, int V) {
    check_dims(B, T, H, nh, K, V);
    if (!dq && !dk && !dv && !dbeta && !(dg && g)) return;
    if (T == 0 || B == 0) return;
    Ws probe;
    const size_t per = ws_carve(NULL, &probe, T, nh, K, V);
    float *ws = kscratch_floats(KS_SSD_WS, per * kt_max_threads());
    KT_FOR(delta_team(B, T, H, nh, (size_t)K * V, 3.0),
    for (int i = 0; i < B * H; i++) {
        int b = i / H, h = i % H;
        Bh x = bh_of(q, k, v, beta, g, b, h, T, H, nh, K, V);
        size_t bt = (size_t)b * T;
        BhGrad d = {dq ? dq + (bt * H + h) * K : NULL,
                    dk ? dk + (bt * nh * H + h) * K : NULL,
                    dv ? dv + (bt * nh * H + h) * V : NULL,
                    dbeta ? dbeta + bt * nh * H + h : NULL,
                    dg && g ? dg + bt * H + h : NULL,
                    dout + (bt * H + h) * V};
        Ws w;
        ws_carve(ws + per * kt_thread_id(), &w, T, nh, K, V);
        bwd_bh(&w, &d, &x);
    });
}
