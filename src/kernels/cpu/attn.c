/* cpu/attn.c: fast rotary embedding and causal softmax attention (spec implicit-lm §1.5).
 *
 * RoPE: a per-call (T, HD/2) cos/sin table with exactly the float recipe of ref/attn.c, then one
 * pass over (b, t) rows in parallel.
 * Attention forward: parallel over (b, head); per block of QB query rows a two-pass softmax:
 * S = Q_blk K^T (only keys <= the block's last row), row max, exp, sum, O = P V / sum,
 * lse = max + log(sum). The products run through kseq_mm (seq_mm.h), split into the keys before
 * the block (full) and the diagonal block (triangular); K^T (and V^T in the backward) is formed
 * once per (b, head) so that no product re-packs its operands.
 * Attention backward (flash-attention style, probabilities recomputed from lse): per block
 *   P = exp(S - lse), dP = dO V^T, D = rowsum(dO o O), dS = P o (dP - D) * scale,
 *   dq_blk += dS K,  dk += dS^T Q_blk,  dv += P^T dO_blk.
 * One thread owns each (b, head) and walks its query blocks in order, so the sums over queries in
 * dk and dv are deterministic at any thread count. Softmax exponentials use vmath.h's vexp (vectorisable,
 * error bound in vmath.h, NaN-preserving) instead of scalar libm expf.
 * Scratch (kscratch.h: persistent grow-only buffers): per thread 2*QB*T + 2*HD*T + QB + 32*max(T, HD) floats; the step
 * uses n_cached + 1 floats per thread.
 * Out of scope: masks other than causal, GQA, dropout on probabilities.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"
#include "kscratch.h"
#include "seq_mm.h"
#include "vecw.h"
#include "vmath.h"

#include "threading.h"

#define QB 64 /* query rows per block */

static int imin(int a, int b) { return a < b ? a : b; }

/* x[i] = e^{x[i] scale - m} for i < n, returning their sum (LANES fixed partial sums, vmath.h), in
 * one vectorised pass; vexp instead of libm expf (a scalar call that dominated the softmax). NaN
 * stays NaN, so a diverging solver still shows up in the output. */
static float exp_sum(float *x, int n, float scale, float m) {
    float acc[LANES];
    for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float e = vexp_nonpos(x[i + l] * scale - m);
            x[i + l] = e;
            acc[l] += e;
        }
    float s = 0.0f;
    for (; i < n; i++) {
        x[i] = vexp_nonpos(x[i] * scale - m);
        s += x[i];
    }
    s += lanes_total(acc);
    return s;
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* cs:(T, HD/2, 2) cos and sin for positions pos0 + t; same float recipe as ref/attn.c rope_cs. */
static float *rope_table(int T, int HD, int pos0, float theta) {
    int half = HD / 2;
    float *cs = kscratch_floats(KS_ROPE, 2 * (size_t)T * half + 1);
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
        for (int t = 0; t < T; t++) {
            float ang = (float)(pos0 + t) * inv_freq;
            cs[((size_t)t * half + i) * 2] = (float)cos((double)ang);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin((double)ang);
        }
    }
    return cs;
}

/* y = R x (inverse = 0) or dx += R^T x (inverse = 1) over (B, T, NH, HD). */
static void rope_apply(float *y, const float *x, int B, int T, int NH, int HD, int pos0,
                       float theta, int inverse) {
    CHECK(HD > 0 && HD % 2 == 0, "rope: HD=%d must be even", HD);
    int half = HD / 2;
    float *cs = rope_table(T, HD, pos0, theta);
    /* batch-1 steps rotate a few hundred floats: not worth a parallel region */
    KT_FOR(kt_team((double)B * T * NH * HD * KT_NS_COPY, (long)B * T),
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *c = cs + (size_t)(bt % T) * half * 2;
        for (int h = 0; h < NH; h++) {
            size_t o = ((size_t)bt * NH + h) * HD;
            for (int i = 0; i < half; i++) {
                float co = c[2 * i], si = c[2 * i + 1];
                float x1 = x[o + i], x2 = x[o + i + half]; /* both read first: y may alias x */
                if (!inverse) {
                    y[o + i] = x1 * co - x2 * si;
                    y[o + i + half] = x2 * co + x1 * si;
                } else {
                    y[o + i] += x1 * co + x2 * si;
                    y[o + i + half] += x2 * co - x1 * si;
                }
            }
        }
    });
}

void k_rope_fwd(float *y, const float *x, int B, int T, int NH, int HD, int pos0, float theta) {
    rope_apply(y, x, B, T, NH, HD, pos0, theta, 0);
}

void k_rope_bwd(float *dx, const float *dy, int B, int T, int NH, int HD, int pos0, float theta) {
    rope_apply(dx, dy, B, T, NH, HD, pos0, theta, 1);
}

/* ---- attention: shared block helpers -------------------------------------------------------- */

typedef struct {
    int B, T, NH, HD;
    size_t rs;   /* floats between consecutive tokens: NH * HD */
    float scale; /* 1 / sqrt(HD) */
} Dims;

/* The team of a whole-sequence pass: passes x the causal multiply-adds of q.k (and as many of
 * p.v), B NH T (T + 1) / 2 HD each (threading.h). */
static int attn_team(const Dims *d, double passes) {
    return kt_team(passes * d->B * d->NH * (d->T + 1.0) * d->T / 2 * d->HD * KT_NS_ATTN,
                   (long)d->B * d->NH);
}

/* Per-thread scratch: two (QB, T) score blocks, K^T and V^T of one head (HD, T), QB row factors,
 * then mm packing space (edge panels only). */
static size_t ws_floats(const Dims *d) {
    int kmax = d->T > d->HD ? d->T : d->HD;
    return 2 * (size_t)QB * d->T + 2 * (size_t)d->HD * d->T + QB + kseq_mm_pack_floats(kmax, d->T);
}

typedef struct {
    float *S, *dS, *KT, *VT, *rinv, *pk;
} Ws;

static Ws ws_carve(float *base, const Dims *d) {
    Ws w;
    w.S = base;
    w.dS = w.S + (size_t)QB * d->T;
    w.KT = w.dS + (size_t)QB * d->T;
    w.VT = w.KT + (size_t)d->HD * d->T;
    w.rinv = w.VT + (size_t)d->HD * d->T;
    w.pk = w.rinv + QB;
    return w;
}

/* dst:(HD, T) = the (T, HD) slice src (row stride rs) transposed, so that score products read
 * their right operand in place instead of re-packing it for every query block. */
static void transpose_head(float *dst, const float *src, const Dims *d) {
    for (int t = 0; t < d->T; t++)
        for (int e = 0; e < d->HD; e++) dst[(size_t)e * d->T + t] = src[(size_t)t * d->rs + e];
}

/* S (qb x kv, row stride kv) = A_blk B^T restricted to keys < kv = i0 + qb, for the query block
 * starting at i0; A is a (T, HD) slice with row stride rs, BT = B^T (HD, T). Entries above the
 * causal diagonal are left partial (callers mask them). */
static void causal_scores(float *S, float *pk, const float *A, const float *BT, const Dims *d,
                          int i0, int qb) {
    int kv = i0 + qb, rs = (int)d->rs;
    memset(S, 0, sizeof(float) * (size_t)qb * kv);
    const float *Ab = A + (size_t)i0 * d->rs;
    if (i0 > 0) kseq_mm(pk, qb, i0, d->HD, Ab, rs, 0, BT, d->T, 0, S, kv, KSEQ_TRI_NONE);
    kseq_mm(pk, qb, qb, d->HD, Ab, rs, 0, BT + i0, d->T, 0, S + i0, kv, KSEQ_TRI_J_LE_I);
}

/* ---- attention forward ---------------------------------------------------------------------- */

/* Query block [i0, i0 + qb) of (b, h): softmax rows, lse, and o = P V / sum. */
static void fwd_block(Ws *w, float *o, float *lse, const float *q, const float *v, const Dims *d,
                      int b, int h, int i0) {
    int qb = imin(QB, d->T - i0), kv = i0 + qb, rs = (int)d->rs;
    size_t base = (size_t)b * d->T * d->rs + (size_t)h * d->HD;
    causal_scores(w->S, w->pk, q + base, w->KT, d, i0, qb);
    for (int r = 0; r < qb; r++) { /* softmax of row i0 + r over keys 0 .. i0 + r */
        float *row = w->S + (size_t)r * kv;
        int n = i0 + r + 1;
        /* max of the scaled scores = scale * max (scale > 0); NaNs reappear through exp below */
        float m = max_lanes(row, n) * d->scale;
        float sum = exp_sum(row, n, d->scale, m);
        for (int j = n; j < kv; j++) row[j] = 0.0f;
        w->rinv[r] = 1.0f / sum;
        if (lse) lse[((size_t)b * d->NH + h) * d->T + i0 + r] = m + vlog(sum);
    }
    float *ob = o + base + (size_t)i0 * d->rs;
    for (int r = 0; r < qb; r++) memset(ob + (size_t)r * d->rs, 0, sizeof(float) * d->HD);
    if (i0 > 0) kseq_mm(w->pk, qb, d->HD, i0, w->S, kv, 0, v + base, rs, 0, ob, rs, KSEQ_TRI_NONE);
    kseq_mm(w->pk, qb, d->HD, qb, w->S + i0, kv, 0, v + base + (size_t)i0 * d->rs, rs, 0, ob, rs,
            KSEQ_TRI_K_LE_I);
    for (int r = 0; r < qb; r++)
        for (int e = 0; e < d->HD; e++) ob[(size_t)r * d->rs + e] *= w->rinv[r];
}

void k_attn_fwd(float *o, float *lse, const float *q, const float *k, const float *v,
                int B, int T, int NH, int HD) {
    CHECK(B >= 0 && T >= 0 && NH > 0 && HD > 0, "attn: bad dims B=%d T=%d NH=%d HD=%d", B, T, NH,
          HD);
    Dims d = {B, T, NH, HD, (size_t)NH * HD, 1.0f / sqrtf((float)HD)};
    size_t wsz = ws_floats(&d);
    float *wsbuf = kscratch_floats(KS_ATTN_WS, wsz * kt_max_threads());
    /* one (b, head) per item: K^T is formed once and serves every query block */
    KT_FOR(attn_team(&d, 2.0),
    for (int i = 0; i < B * NH; i++) {
        Ws w = ws_carve(wsbuf + wsz * kt_thread_id(), &d);
        int b = i / NH, h = i % NH;
        transpose_head(w.KT, k + (size_t)b * T * d.rs + (size_t)h * HD, &d);
        for (int i0 = 0; i0 < T; i0 += QB) fwd_block(&w, o, lse, q, v, &d, b, h, i0);
    });
}

/* ---- attention backward --------------------------------------------------------------------- */

/* All query blocks of one (b, head), in order. */
static void bwd_bh(Ws *w, float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const float *o, const float *lse, const Dims *d,
                   int b, int h) {
    size_t base = (size_t)b * d->T * d->rs + (size_t)h * d->HD;
    int ld = (int)d->rs, HD = d->HD;
    const float *lrow = lse + ((size_t)b * d->NH + h) * d->T;
    transpose_head(w->KT, k + base, d);
    transpose_head(w->VT, v + base, d);
    for (int i0 = 0; i0 < d->T; i0 += QB) {
        int qb = imin(QB, d->T - i0), kv = i0 + qb;
        const float *qblk = q + base + (size_t)i0 * d->rs, *gblk = dout + base + (size_t)i0 * d->rs;
        causal_scores(w->S, w->pk, q + base, w->KT, d, i0, qb);     /* S = Q K^T   */
        causal_scores(w->dS, w->pk, dout + base, w->VT, d, i0, qb); /* dP = dO V^T */
        for (int r = 0; r < qb; r++) {
            float *pr = w->S + (size_t)r * kv, *gr = w->dS + (size_t)r * kv;
            int n = i0 + r + 1;
            float l = lrow[i0 + r];
            float Dr = kseq_dot(gblk + (size_t)r * d->rs, o + base + (size_t)(i0 + r) * d->rs, HD);
            for (int j = 0; j < n; j++) { /* P = exp(S scale - lse); dS, score scale folded in */
                float pj = vexp_nonpos(pr[j] * d->scale - l);
                pr[j] = pj;
                gr[j] = pj * (gr[j] - Dr) * d->scale;
            }
            for (int j = n; j < kv; j++) pr[j] = gr[j] = 0.0f;
        }
        /* Each product splits into the keys before the block (full) and the diagonal block, where
         * P and dS are lower triangular (zeros stored above): key row j = i0 + jj only gets query
         * rows r >= jj, query row r only keys jj <= r; the tiles of zeros are skipped. */
        const float *kdiag = k + base + (size_t)i0 * d->rs;
        float *dqblk = dq ? dq + base + (size_t)i0 * d->rs : NULL;
        if (dv) {
            if (i0 > 0) kseq_mm(w->pk, i0, HD, qb, w->S, kv, 1, gblk, ld, 0, dv + base, ld, KSEQ_TRI_NONE);
            kseq_mm(w->pk, qb, HD, qb, w->S + i0, kv, 1, gblk, ld, 0, dv + base + (size_t)i0 * d->rs, ld,
                    KSEQ_TRI_K_GE_I);
        }
        if (dk) {
            if (i0 > 0) kseq_mm(w->pk, i0, HD, qb, w->dS, kv, 1, qblk, ld, 0, dk + base, ld, KSEQ_TRI_NONE);
            kseq_mm(w->pk, qb, HD, qb, w->dS + i0, kv, 1, qblk, ld, 0, dk + base + (size_t)i0 * d->rs, ld,
                    KSEQ_TRI_K_GE_I);
        }
        if (dq) {
            if (i0 > 0) kseq_mm(w->pk, qb, HD, i0, w->dS, kv, 0, k + base, ld, 0, dqblk, ld, KSEQ_TRI_NONE);
            kseq_mm(w->pk, qb, HD, qb, w->dS + i0, kv, 0, kdiag, ld, 0, dqblk, ld, KSEQ_TRI_K_LE_I);
        }
    }
}

void k_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *o, const float *lse, int B, int T, int NH, int HD) {
    CHECK(B >= 0 && T >= 0 && NH > 0 && HD > 0, "attn: bad dims B=%d T=%d NH=%d HD=%d", B, T, NH,
          HD);
    CHECK(lse || B * T == 0, "attn_bwd: lse is NULL (run the forward with lse)");
    if (!dq && !dk && !dv) return;
    Dims d = {B, T, NH, HD, (size_t)NH * HD, 1.0f / sqrtf((float)HD)};
    size_t wsz = ws_floats(&d);
    float *wsbuf = kscratch_floats(KS_ATTN_WS, wsz * kt_max_threads());
    KT_FOR(attn_team(&d, 5.0),
    for (int i = 0; i < B * NH; i++) {
        Ws w = ws_carve(wsbuf + wsz * kt_thread_id(), &d);
        bwd_bh(&w, dq, dk, dv, dout, q, k, v, o, lse, &d, i / NH, i % NH);
    });
}

/* ---- one-token attention against a KV cache ------------------------------------------------- */

/* Query . key dot products' lanes (HD a multiple of KV_W; a compile-time constant in the
 * specialised calls). */
static inline __attribute__((always_inline)) kv_f qk_lanes(const float *a, const float *b,
                                                           const int HD) {
    kv_f r = kv_load(a) * kv_load(b);
    for (int c = KV_W; c < HD; c += KV_W) r += kv_load(a + c) * kv_load(b + c);
    return r;
}

/* One (b, head) with HD a multiple of KV_W: the scores of KV_W keys at a time, their dots summed
 * together (kv_sum_rows, cpu/vecw.h) instead of one horizontal sum per key; the output row in
 * registers (below). key(s): row s of the cache, the new row at s = n_cached. Measured
 * (`bench_kernels --only step`, one thread, 4 heads of 32, 128 keys): 3.46 -> 1.86 us with
 * AVX-512, 3.23 -> 1.71 with AVX2, 6.69 -> 3.04 with SSE2. */
static inline __attribute__((always_inline)) void step_head_vec(
    float *oh, float *sc, const float *qh, const float *kc, const float *k_new, const float *vc,
    const float *v_new, int n_cached, float scale, const int HD) {
    int ns = n_cached + 1, s0 = 0;
    for (; s0 + KV_W <= n_cached; s0 += KV_W) { /* whole groups of cached keys */
        kv_f acc[KV_W];
#pragma GCC unroll 16
        for (int j = 0; j < KV_W; j++)
            acc[j] = qk_lanes(qh, kc + (size_t)(s0 + kv_slot_row(j)) * HD, HD);
        kv_store(sc + s0, kv_sum_rows(acc) * scale);
    }
    if (s0 < ns) { /* the rest, the new key last; empty slots 0 */
        kv_f acc[KV_W];
        for (int j = 0; j < KV_W; j++) {
            int s = s0 + kv_slot_row(j);
            kv_f z = {0};
            acc[j] = s < ns ? qk_lanes(qh, s < n_cached ? kc + (size_t)s * HD : k_new, HD) : z;
        }
        kv_f scv = kv_sum_rows(acc) * scale;
        for (int j = 0; s0 + j < ns; j++) sc[s0 + j] = scv[j];
    }
    float m = -INFINITY;
    for (int s = 0; s < ns; s++) m = sc[s] > m ? sc[s] : m;
    float sum = exp_sum(sc, ns, 1.0f, m);
    /* o = sum_s p_s v_s / sum in registers, in one pass over V up to OB vectors wide (wider heads
     * in blocks of OB); while the block is at most OB / 2 vectors, two sets of partial sums (even
     * and odd keys: the FMA chain per key was the bound) */
    enum { OB = 8 };
    const int nc = HD / KV_W;
    float inv = 1.0f / sum;
    for (int c0 = 0; c0 < nc; c0 += OB) {
        int cb = nc - c0 < OB ? nc - c0 : OB;
        kv_f o0[OB], o1[OB];
        for (int c = 0; c < cb; c++) o0[c] = o1[c] = (kv_f){0};
        int s = 0;
        if (2 * cb <= OB)
            for (; s + 1 < n_cached; s += 2) {
                const float *v0 = vc + (size_t)s * HD + c0 * KV_W, *v1 = v0 + HD;
                for (int c = 0; c < cb; c++) {
                    o0[c] += sc[s] * kv_load(v0 + c * KV_W);
                    o1[c] += sc[s + 1] * kv_load(v1 + c * KV_W);
                }
            }
        for (; s < ns; s++) {
            const float *vs = (s < n_cached ? vc + (size_t)s * HD : v_new) + c0 * KV_W;
            for (int c = 0; c < cb; c++) o0[c] += sc[s] * kv_load(vs + c * KV_W);
        }
        for (int c = 0; c < cb; c++) kv_store(oh + (c0 + c) * KV_W, (o0[c] + o1[c]) * inv);
    }
}

static void step_head_any(float *oh, float *sc, const float *qh, const float *kc, const float *k_new,
                          const float *vc, const float *v_new, int n_cached, float scale, int HD) {
    switch (HD / KV_W * (HD % KV_W == 0)) { /* the widths of common heads as constants */
    case 2: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, 2 * KV_W); break;
    case 3: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, 3 * KV_W); break;
    case 4: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, 4 * KV_W); break;
    case 6: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, 6 * KV_W); break;
    case 8: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, 8 * KV_W); break;
    default: step_head_vec(oh, sc, qh, kc, k_new, vc, v_new, n_cached, scale, HD);
    }
}

void k_attn_step(float *o, const float *q, const float *k_new, const float *v_new,
                 const float *kcache, const float *vcache, int n_cached, int Tmax,
                 int B, int NH, int HD) {
    CHECK(n_cached >= 0 && n_cached <= Tmax, "attn_step: n_cached=%d Tmax=%d", n_cached, Tmax);
    float scale = 1.0f / sqrtf((float)HD);
    size_t nsc = (size_t)n_cached + 1;
    float *scbuf = kscratch_floats(KS_ATTN_STEP, nsc * kt_max_threads()); /* scores of one (b, head) */
    /* parallel only once the cache reads (K and V rows of every head) are worth a fork/join */
    int nt = kt_team(2.0 * B * NH * (double)nsc * HD * KT_NS_ATTN, (long)B * NH);
    if (HD % KV_W == 0) {
        KT_FOR(nt,
        for (int i = 0; i < B * NH; i++)
            step_head_any(o + (size_t)i * HD, scbuf + nsc * kt_thread_id(), q + (size_t)i * HD,
                          kcache + (size_t)i * Tmax * HD, k_new + (size_t)i * HD,
                          vcache + (size_t)i * Tmax * HD, v_new + (size_t)i * HD, n_cached, scale,
                          HD););
        return;
    }
    /* head widths that are not whole vectors: one horizontal dot per key */
    KT_FOR(nt,
    for (int i = 0; i < B * NH; i++) {
        float *sc = scbuf + nsc * kt_thread_id();
        const float *qh = q + (size_t)i * HD;
        const float *kc = kcache + (size_t)i * Tmax * HD, *vc = vcache + (size_t)i * Tmax * HD;
        float m = -INFINITY, sum = 0.0f;
        for (int s = 0; s <= n_cached; s++) { /* the new key comes last, as row n_cached would */
            const float *ks = s < n_cached ? kc + (size_t)s * HD : k_new + (size_t)i * HD;
            sc[s] = kseq_dot(qh, ks, HD) * scale;
            m = sc[s] > m ? sc[s] : m;
        }
        float *oh = o + (size_t)i * HD;
        memset(oh, 0, sizeof(float) * HD);
        for (int s = 0; s <= n_cached; s++) sc[s] = vexp_nonpos(sc[s] - m); /* one vectorised pass */
        for (int s = 0; s <= n_cached; s++) {
            const float *vs = s < n_cached ? vc + (size_t)s * HD : v_new + (size_t)i * HD;
            float p = sc[s];
            sum += p;
            for (int e = 0; e < HD; e++) oh[e] += p * vs[e];
        }
        float inv = 1.0f / sum;
        for (int e = 0; e < HD; e++) oh[e] *= inv;
    });
}
