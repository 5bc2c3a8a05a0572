/* cpu/dense_misc.c: fast CPU versions of the remaining dense kernels of kernels.h: embedding,
 * causal depthwise conv1d (spec implicit-lm §1.4), LSTM cell, AdamW, sum of squares, the
 * fixed-point solvers' per-sample residuals, axpby.
 * Same contracts as the references in ref/dense.c.
 *
 * Threading (STYLE §8.7): OpenMP on the outermost independent loop, schedule(static). Scatter
 * and parameter-gradient reductions (embedding dE, conv dw/dbias) are split over columns or
 * channels, so each output entry is summed by one thread in the reference's order; k_sumsq
 * sums fixed chunks (sized from n alone) and adds the partials in chunk order. Everything is
 * therefore bit-identical at any thread count.
 * Out of scope: norms, softmax, activations (cpu/dense.c), GEMM (cpu/gemm.c).
 */
#include "../kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../../core/check.h"
#include "kscratch.h"
#include "threading.h"
#include "vmath.h"


static int imin(int a, int b) { return a < b ? a : b; }

/* Columns per chunk when a reduction is split over columns: one chunk per thread, rounded to a
 * multiple of 16 floats (whole cache lines). The chunking never changes any sum's order. */
static int col_chunk(int D) {
    int nt = k_get_threads();
    int cs = (D + nt - 1) / nt;
    cs = (cs + 15) / 16 * 16;
    return cs < 16 ? 16 : cs;
}


/* ---- embedding ------------------------------------------------------------------------------- */

static void check_ids(const int *ids, int M, int V) {
    for (int i = 0; i < M; i++)
        CHECK(ids[i] >= 0 && ids[i] < V, "embed: id %d out of range [0, %d) at %d", ids[i], V, i);
}

/* A gather: ids are validated up front so the parallel copy loop has no failure path. */
void k_embed_fwd(float *y, const int *ids, const float *E, int M, int V, int D) {
    check_ids(ids, M, V);
    KT_FOR(kt_team((double)M * D * KT_NS_COPY, M),
    for (int i = 0; i < M; i++) memcpy(y + (size_t)i * D, E + (size_t)ids[i] * D, (size_t)D * sizeof(float)));
}

void k_embed_bwd(float *dE, const float *dy, const int *ids, int M, int V, int D) {
    check_ids(ids, M, V);
    /* Repeated ids make rows collide, so split columns instead: each thread scatters its column
     * range of every row, in row order, exactly as the reference does. */
    int cs = col_chunk(D), nch = (D + cs - 1) / cs;
    KT_FOR(kt_team((double)M * D * KT_NS_COPY, nch),
    for (int ch = 0; ch < nch; ch++) {
        int d0 = ch * cs, d1 = imin(D, d0 + cs);
        for (int i = 0; i < M; i++) {
            float *dst = dE + (size_t)ids[i] * D;
            const float *src = dy + (size_t)i * D;
            for (int d = d0; d < d1; d++) dst[d] += src[d];
        }
    });
}

/* ---- causal depthwise conv1d ----------------------------------------------------------------- */

/* wt (W, C) = w (C, W) transposed, so the inner loops run along contiguous channels. */
static float *transpose_w(const float *w, int C, int W) {
    float *wt = kscratch_floats(KS_CONV_WT, (size_t)W * C); /* persistent, a few C floats */
    for (int c = 0; c < C; c++)
        for (int k = 0; k < W; k++) wt[(size_t)k * C + c] = w[(size_t)c * W + k];
    return wt;
}

/* Taps fused into one pass over a row: up to this many (W = 4 in every config). */
#define CONV_MAXW 8

/* y[c] = b[c] + w0[c] x0[c] + w1[c] x1[c] + w2[c] x2[c] + w3[c] x3[c] for one row of n channels,
 * added in the reference's tap order: taps w rows ldw apart, inputs x rows ldx apart (oldest
 * first). restrict lets the loop vectorise without overlap checks. */
static void conv4_row(float *restrict y, const float *restrict b, const float *restrict w,
                      size_t ldw, const float *restrict x, size_t ldx, int n) {
    for (int c = 0; c < n; c++) {
        float acc = b ? b[c] : 0.0f;
        acc += w[c] * x[c];
        acc += w[ldw + c] * x[ldx + c];
        acc += w[2 * ldw + c] * x[2 * ldx + c];
        acc += w[3 * ldw + c] * x[3 * ldx + c];
        y[c] = acc;
    }
}

/* dx[c] += w0[c] g0[c] + w1[c] g1[c] + ... in tap order k = 0..3, where g_k is the dy row k rows
 * BEFORE g (g0 = g: the output s + 3 that tap 0 of input s feeds). */
static void conv4_dx_row(float *restrict dx, const float *restrict w, size_t ldw,
                         const float *restrict g, size_t ldg, int n) {
    for (int c = 0; c < n; c++) {
        float acc = dx[c];
        acc += w[c] * g[c];
        acc += w[ldw + c] * g[c - ldg];
        acc += w[2 * ldw + c] * g[c - 2 * ldg];
        acc += w[3 * ldw + c] * g[c - 3 * ldg];
        dx[c] = acc;
    }
}

/* Parallel over the B*T output rows; each row sums its W taps over all C channels in one pass
 * (vectorised along C), in tap order k = 0..W-1 as the reference, so every element is the same
 * sequence of multiply-adds as there. Rows with fewer than W past inputs (t < W-1) skip the
 * missing taps, which the reference adds as zero padding (x * 0 adds +-0: the same value).
 * conv_row is row bt = b T + t: yr = bias + the taps over the inputs the row has. */
static void conv_row(float *yr, const float *x, const float *wt, const float *bias, int bt, int T, int C, int W) {
    int t = bt % T, k0 = W - 1 - t > 0 ? W - 1 - t : 0; /* first tap with an input */
    const float *xr[CONV_MAXW], *wk[CONV_MAXW];
    int nk = 0;
    for (int k = k0; k < W && W <= CONV_MAXW; k++, nk++) {
        xr[nk] = x + (size_t)(bt - (W - 1 - k)) * C; /* input at t - W + 1 + k */
        wk[nk] = wt + (size_t)k * C;
    }
    if (W > CONV_MAXW) { /* generic: one pass per tap */
        for (int c = 0; c < C; c++) yr[c] = bias ? bias[c] : 0.0f;
        for (int k = k0; k < W; k++) {
            const float *xk = x + (size_t)(bt - (W - 1 - k)) * C, *wkk = wt + (size_t)k * C;
            for (int c = 0; c < C; c++) yr[c] += wkk[c] * xk[c];
        }
        return;
    }
    if (nk == 4) { /* the common case */
        conv4_row(yr, bias, wt, C, xr[0], C, C);
    } else {
        for (int c = 0; c < C; c++) {
            float acc = bias ? bias[c] : 0.0f;
            for (int k = 0; k < nk; k++) acc += wk[k][c] * xr[k][c];
            yr[c] = acc;
        }
    }
}

void k_conv1d_fwd(float *y, const float *x, const float *w, const float *bias, int B, int T, int C, int W) {
    float *wt = transpose_w(w, C, W);
    KT_FOR(kt_team((double)B * T * C * W * KT_NS_CONV_TAP, (long)B * T),
    for (int bt = 0; bt < B * T; bt++) conv_row(y + (size_t)bt * C, x, wt, bias, bt, T, C, W));
}

/* The conv's rows as k_conv1d_fwd, each followed at once by its SiLU while the row is in L1: one
 * pass over memory fewer than the conv and k_silu_fwd after it, the same values. */
void k_conv1d_silu_fwd(float *y, float *ya, const float *x, const float *w, const float *bias, int B, int T, int C,
                       int W) {
    float *wt = transpose_w(w, C, W);
    KT_FOR(kt_team((double)B * T * C * (W * KT_NS_CONV_TAP + KT_NS_ELEM), (long)B * T),
    for (int bt = 0; bt < B * T; bt++) {
        float *ar = ya + (size_t)bt * C, *yr = y ? y + (size_t)bt * C : ar;
        conv_row(yr, x, wt, bias, bt, T, C, W);
        for (int c = 0; c < C; c++) ar[c] = vsilu(yr[c]);
    });
}

/* One (b, t) row of the W = 4 parameter gradient over n channels: acc rows k = 0..3 (tap sums) and
 * 4 (bias sums), ldc apart, += x rows t-3..t (ldx apart) times g. restrict: the five running sums
 * and the inputs never overlap, which lets the loop vectorise without overlap checks. */
static void conv4_grad_row(float *restrict acc, size_t ldc, const float *restrict g,
                           const float *restrict x, size_t ldx, int n) {
    float *restrict a0 = acc, *restrict a1 = acc + ldc, *restrict a2 = acc + 2 * ldc;
    float *restrict a3 = acc + 3 * ldc, *restrict ab = acc + 4 * ldc;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    for (int c = 0; c < n; c++) {
        float gc = g[c];
        ab[c] += gc;
        a0[c] += x0[c] * gc;
        a1[c] += x1[c] * gc;
        a2[c] += x2[c] * gc;
        a3[c] += x3[c] * gc;
    }
}

/* dw[c, k] += sum_{b,t} dy[b,t,c] x[b,t-W+1+k,c];  dbias[c] += sum_{b,t} dy[b,t,c]:
 * channel chunks in parallel, (b, t) in order inside a chunk; per (b, t) one pass over the
 * chunk updates the bias sum and every tap's sum (each sum keeps the reference's order). */
static void conv1d_param_grad(float *dw, float *dbias, const float *dy, const float *x, int B, int T,
                              int C, int W) {
    float *acc = kscratch_floats(KS_CONV_ACC, (size_t)(W + 1) * C); /* (W, C) tap sums, then (C) bias sums */
    int cs = col_chunk(C), nch = (C + cs - 1) / cs;
    KT_FOR(kt_team((double)B * T * C * W * KT_NS_CONV_TAP, nch),
    for (int ch = 0; ch < nch; ch++) {
        int c0 = ch * cs, c1 = imin(C, c0 + cs);
        for (int k = 0; k <= W; k++)
            for (int c = c0; c < c1; c++) acc[(size_t)k * C + c] = 0.0f;
        float *ab = acc + (size_t)W * C;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *g = dy + ((size_t)b * T + t) * C;
                int k0 = W - 1 - t > 0 ? W - 1 - t : 0;
                if (!dw || k0 > 0 || W != 4) { /* generic: one pass per tap */
                    for (int c = c0; c < c1; c++) ab[c] += g[c];
                    for (int k = k0; dw && k < W; k++) {
                        const float *xr = x + ((size_t)b * T + t - W + 1 + k) * C;
                        float *ak = acc + (size_t)k * C;
                        for (int c = c0; c < c1; c++) ak[c] += xr[c] * g[c];
                    }
                    continue;
                }
                conv4_grad_row(acc + c0, C, g + c0, x + ((size_t)b * T + t - 3) * C + c0, C, c1 - c0);
            }
        for (int c = c0; c < c1; c++) {
            if (dw)
                for (int k = 0; k < W; k++) dw[(size_t)c * W + k] += acc[(size_t)k * C + c];
            if (dbias) dbias[c] += ab[c];
        }
    });
}

void k_conv1d_bwd(float *dx, float *dw, float *dbias, const float *dy, const float *x, const float *w,
                  int B, int T, int C, int W) {
    if (dx) {
        /* dx[b,s,c] += sum_k w[c,k] dy[b, s+W-1-k, c] for the outputs s feeds (< T), taps in
         * order k = 0..W-1 (as the reference), all in one pass over the row */
        float *wt = transpose_w(w, C, W);
        KT_FOR(kt_team((double)B * T * C * W * KT_NS_CONV_TAP, (long)B * T),
        for (int bs = 0; bs < B * T; bs++) {
            int s = bs % T;
            float *dxr = dx + (size_t)bs * C;
            if (W == 4 && s + 3 < T) { /* taps k = 0..3 meet dy rows s+3 .. s: reversed rows */
                conv4_dx_row(dxr, wt, C, dy + (size_t)(bs + 3) * C, C, C);
                continue;
            }
            for (int k = 0; k < W; k++) {
                int t = s + W - 1 - k;
                if (t >= T) continue;
                const float *g = dy + (size_t)(bs + (t - s)) * C, *wk = wt + (size_t)k * C;
                for (int c = 0; c < C; c++) dxr[c] += wk[c] * g[c];
            }
        });
    }
    if (dw || dbias) conv1d_param_grad(dw, dbias, dy, x, B, T, C, W);
}

/* One row b of the decode step (see k_conv1d_step). Inlined with a constant W = 4 (the usual
 * d_conv) the taps unroll and the channels overlap: with W only known at run time the loop over
 * k kept each channel a short serial loop, and the step cost 4% of batch-1 generation of an
 * implicit Mamba2 LM, called once per solver iteration (B 1, C 544: 3.2 -> 0.3 us on Zen 4). The
 * taps are summed in the same order either way, but with FMA the vectorised W = 4 body may round
 * a tap's product separately where the scalar loop fused it: the last bit can differ from the
 * run-time-W path (and from before), never between thread counts. */
static inline __attribute__((always_inline)) void conv1d_step_row(float *y, float *state_out, const float *state_in,
                                                                  const float *x, const float *w, const float *bias,
                                                                  int C, int W) {
    for (int c = 0; c < C; c++) {
        const float *s = state_in + (size_t)c * W, *wc = w + (size_t)c * W;
        float xv = x[c];
        /* window = s[1..W-1] then x; taps in the same order as conv1d_fwd */
        float acc = bias ? bias[c] : 0.0f;
        for (int k = 0; k + 1 < W; k++) acc += wc[k] * s[k + 1];
        acc += wc[W - 1] * xv;
        if (state_out) { /* ascending k: s[k+1] is read before a write can clobber it */
            float *so = state_out + (size_t)c * W;
            for (int k = 0; k + 1 < W; k++) so[k] = s[k + 1];
            so[W - 1] = xv;
        }
        y[c] = acc;
    }
}

/* Decode step: B*C tiny dot products of length W; parallel over the batch. */
void k_conv1d_step(float *y, float *state_out, const float *state_in, const float *x, const float *w,
                   const float *bias, int B, int C, int W) {
    KT_FOR(kt_team((double)B * C * W * KT_NS_CONV_TAP, B),
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * C, so = o * W;
        if (W == 4) conv1d_step_row(y + o, state_out ? state_out + so : NULL, state_in + so, x + o, w, bias, C, 4);
        else conv1d_step_row(y + o, state_out ? state_out + so : NULL, state_in + so, x + o, w, bias, C, W);
    });
}

/* ---- LSTM cell (gate order i, f, g, o; vmath.h sigmoid/tanh, so the loops over j vectorise) - */

/* A row of Hd zeros standing for a NULL c_prev or dc, so that the loops below have no
 * loop-invariant NULL tests (gcc would turn those into masked loads it cannot vectorise). The
 * slot is the gated norm's row temp: a slot is held only for one kernel call. */
static const float *zero_row(int Hd) {
    float *z = kscratch_floats(KS_NORM_ROW, (size_t)Hd);
    memset(z, 0, sizeof(float) * (size_t)Hd);
    return z;
}

/* Rows b are independent; act keeps the four activated gates for the backward. Per row: the
 * gates in three elementwise passes over contiguous blocks, then the cell update. */
void k_lstm_cell_fwd(float *h, float *c, float *act, const float *pre, const float *c_prev, int B, int Hd) {
    const float *zeros = c_prev ? NULL : zero_row(Hd);
    KT_FOR(kt_team((double)B * Hd * KT_NS_LSTM, B),
    for (int b = 0; b < B; b++) {
        const float *p = pre + (size_t)b * 4 * Hd;
        float *a = act + (size_t)b * 4 * Hd;
        for (int j = 0; j < 2 * Hd; j++) a[j] = vsigmoid(p[j]); /* i, f */
        vtanh_n(a + 2 * Hd, p + 2 * Hd, (size_t)Hd); /* g */
        for (int j = 3 * Hd; j < 4 * Hd; j++) a[j] = vsigmoid(p[j]); /* o */
        const float *ig = a, *fg = a + Hd, *gg = a + 2 * Hd, *og = a + 3 * Hd;
        const float *cp = c_prev ? c_prev + (size_t)b * Hd : zeros;
        float *cb = c + (size_t)b * Hd, *hb = h + (size_t)b * Hd;
        /* elementwise: more streams than gcc's runtime alias checks cover (_Pragma: this loop
         * is inside a KT_FOR argument) */
        _Pragma("GCC ivdep")
        for (int j = 0; j < Hd; j++) cb[j] = fg[j] * cp[j] + ig[j] * gg[j];
        vtanh_n(hb, cb, (size_t)Hd); /* h = o tanh(c) */
        _Pragma("GCC ivdep")
        for (int j = 0; j < Hd; j++) hb[j] *= og[j];
    });
}

/* Same chain rule as ref/dense.c; one thread per batch row, so no reduction at all. The gradient
 * reaching c is direct (dc) plus through h = o tanh(c); the dc_prev loop recomputes it, which
 * keeps each loop free of tests on which outputs are wanted (those are per block). */
void k_lstm_cell_bwd(float *dpre, float *dc_prev, const float *dh, const float *dc, const float *act,
                     const float *c_prev, const float *c, int B, int Hd) {
    const float *zeros = c_prev && dc ? NULL : zero_row(Hd);
    KT_FOR(kt_team((double)B * Hd * KT_NS_LSTM, B),
    for (int b = 0; b < B; b++) {
        const float *a = act + (size_t)b * 4 * Hd;
        const float *ig = a, *fg = a + Hd, *gg = a + 2 * Hd, *og = a + 3 * Hd;
        size_t o = (size_t)b * Hd;
        const float *cb = c + o, *dhb = dh + o, *dcb = dc ? dc + o : zeros;
        const float *cp = c_prev ? c_prev + o : zeros;
        float *d = dpre ? dpre + (size_t)b * 4 * Hd : NULL, *dcp = dc_prev ? dc_prev + o : NULL;
        for (int j0 = 0; j0 < Hd; j0 += VM_BLOCK) {
            int j1 = Hd - j0 < VM_BLOCK ? Hd : j0 + VM_BLOCK;
            float tcb[VM_BLOCK]; /* tanh(c) for the block (vmath.h's two passes) */
            vtanh_n(tcb, cb + j0, (size_t)(j1 - j0));
            if (d) {
                _Pragma("GCC ivdep")
                for (int j = j0; j < j1; j++) {
                    float tc = tcb[j - j0];
                    float dct = dcb[j] + dhb[j] * og[j] * (1.0f - tc * tc);
                    d[j] += dct * gg[j] * ig[j] * (1.0f - ig[j]);
                    d[Hd + j] += dct * cp[j] * fg[j] * (1.0f - fg[j]);
                    d[2 * Hd + j] += dct * ig[j] * (1.0f - gg[j] * gg[j]);
                    d[3 * Hd + j] += dhb[j] * tc * og[j] * (1.0f - og[j]);
                }
            }
            if (dcp) {
                _Pragma("GCC ivdep")
                for (int j = j0; j < j1; j++) {
                    float tc = tcb[j - j0];
                    dcp[j] += (dcb[j] + dhb[j] * og[j] * (1.0f - tc * tc)) * fg[j];
                }
            }
        }
    });
}

/* ---- optimisation and vector helpers --------------------------------------------------------- */

void k_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
             float eps, float wd, float gscale, int t) {
    CHECK(t >= 1, "adamw: step t = %d must be >= 1", t);
    /* bias corrections in double, rounded once, exactly as the reference */
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    KT_FOR(kt_team((double)n * KT_NS_ADAMW, (long)n),
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi, v[i] = vi;
        float pi = p[i] - lr * wd * p[i]; /* decoupled decay first (PyTorch order) */
        p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    });
}

/* Partial sums of k_sumsq: at most this many chunks, each at least SUMSQ_MIN_CHUNK floats. */
#define SUMSQ_MAX_CHUNKS 64
#define SUMSQ_MIN_CHUNK 16384

double k_sumsq(const float *x, size_t n) {
    /* chunking is a function of n only, so the sum's order never depends on the threads */
    size_t chunk = (n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS;
    if (chunk < SUMSQ_MIN_CHUNK) chunk = SUMSQ_MIN_CHUNK;
    int nch = (int)((n + chunk - 1) / chunk);
    double part[SUMSQ_MAX_CHUNKS];
    KT_FOR(kt_team((double)n * KT_NS_COPY, nch),
    for (int ch = 0; ch < nch; ch++) {
        size_t i0 = (size_t)ch * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double acc[16];
        for (int l = 0; l < 16; l++) acc[l] = 0.0;
        size_t i = i0;
        for (; i + 16 <= i1; i += 16)
            for (int l = 0; l < 16; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
        double s = 0.0;
        for (; i < i1; i++) s += (double)x[i] * (double)x[i];
        for (int l = 0; l < 16; l++) s += acc[l];
        part[ch] = s;
    });
    double s = 0.0;
    for (int ch = 0; ch < nch; ch++) s += part[ch];
    return s;
}

/* Rows [r0, r1) of k_copy_rows; rows of a few floats (an injection's dt block: one per head) are
 * plain loops, longer ones memcpy. */
static void copy_rows_range(float *y, size_t ldy, const float *x, size_t ldx, size_t r0, size_t r1,
                            size_t n, int add) {
    for (size_t r = r0; r < r1; r++) {
        float *restrict yr = y + r * ldy;
        const float *restrict xr = x + r * ldx;
        if (add)
            for (size_t i = 0; i < n; i++) yr[i] += xr[i];
        else if (n >= 64)
            memcpy(yr, xr, n * sizeof(float));
        else
            for (size_t i = 0; i < n; i++) yr[i] = xr[i];
    }
}

/* One add or copy per element, so any split over threads gives the same bits. Contiguous arrays
 * are cut into rows of COPY_PIECE floats, so one long row splits too. Short strided rows cost
 * more per float than their length says (measured on Zen 4, one thread, 8192 rows out of cache:
 * 6-7 ns a row at 8 or 16 floats, 16 ns at 128), hence KT_NS_ROW. */
enum { COPY_PIECE = 4096 };

void k_copy_rows(float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t n, int add) {
    if (rows == 0 || n == 0) return;
    if ((ldy == n && ldx == n) || rows == 1) {
        size_t total = rows * n, pieces = (total + COPY_PIECE - 1) / COPY_PIECE;
        KT_FOR(kt_team((double)total * KT_NS_COPY, (long)pieces),
               for (size_t p = 0; p < pieces; p++) {
                   size_t i0 = p * COPY_PIECE, len = total - i0 < COPY_PIECE ? total - i0 : COPY_PIECE;
                   copy_rows_range(y + i0, len, x + i0, len, 0, 1, len, add);
               });
        return;
    }
    KT_FOR(kt_team((double)rows * ((double)n * KT_NS_COPY + KT_NS_ROW), (long)rows),
           for (size_t r = 0; r < rows; r++) copy_rows_range(y, ldy, x, ldx, r, r + 1, n, add));
}

/* The elementwise kernels' split (schedule(static) over the elements), one memset per thread. */
void k_zero(float *y, size_t n) {
    int nt = kt_team((double)n * KT_NS_COPY, (long)(n / COPY_PIECE));
    if (nt <= 1) {
        if (n) memset(y, 0, n * sizeof(float));
        return;
    }
    KT_FOR(nt, for (int t = 0; t < nt; t++) {
        size_t i0 = n * (size_t)t / (size_t)nt, i1 = n * (size_t)(t + 1) / (size_t)nt;
        memset(y + i0, 0, (i1 - i0) * sizeof(float));
    });
}

/* Per token: running maxima of |y - F| and |F| in double vectors (the floats converted exactly),
 * max(d, acc) keeping acc when d is NaN as the reference's d > acc does, and f * 0 summed, which
 * turns NaN when F holds an inf or a NaN. The maxima are exact, so any split of the elements gives
 * the reference's value. The reference, a scalar loop with an early exit, reads ~1.2 floats per ns
 * (5% of an FP-Mamba training step at D 64: 16 solver iterations on B 64 x T 17). */
static void resid_token(const float *y, const float *F, size_t n, double *dmax, double *fmax, double *nonfinite) {
    double dm = 0, fm = 0, nf = 0;
    size_t i = 0;
#if defined(__AVX512F__)
    __m512d vd = _mm512_setzero_pd(), vf = _mm512_setzero_pd(), vn = _mm512_setzero_pd(), zero = _mm512_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m512d f = _mm512_cvtps_pd(_mm256_loadu_ps(F + i)), yy = _mm512_cvtps_pd(_mm256_loadu_ps(y + i));
        vd = _mm512_max_pd(_mm512_abs_pd(_mm512_sub_pd(yy, f)), vd);
        vf = _mm512_max_pd(_mm512_abs_pd(f), vf);
        vn = _mm512_add_pd(vn, _mm512_mul_pd(f, zero));
    }
    double ld[8], lf[8], ln[8];
    _mm512_storeu_pd(ld, vd), _mm512_storeu_pd(lf, vf), _mm512_storeu_pd(ln, vn);
    for (int l = 0; l < 8; l++) dm = ld[l] > dm ? ld[l] : dm, fm = lf[l] > fm ? lf[l] : fm, nf += ln[l];
#elif defined(__AVX2__)
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d vd = _mm256_setzero_pd(), vf = _mm256_setzero_pd(), vn = _mm256_setzero_pd(), zero = _mm256_setzero_pd();
    for (; i + 4 <= n; i += 4) {
        __m256d f = _mm256_cvtps_pd(_mm_loadu_ps(F + i)), yy = _mm256_cvtps_pd(_mm_loadu_ps(y + i));
        vd = _mm256_max_pd(_mm256_andnot_pd(sign, _mm256_sub_pd(yy, f)), vd);
        vf = _mm256_max_pd(_mm256_andnot_pd(sign, f), vf);
        vn = _mm256_add_pd(vn, _mm256_mul_pd(f, zero));
    }
    double ld[4], lf[4], ln[4];
    _mm256_storeu_pd(ld, vd), _mm256_storeu_pd(lf, vf), _mm256_storeu_pd(ln, vn);
    for (int l = 0; l < 4; l++) dm = ld[l] > dm ? ld[l] : dm, fm = lf[l] > fm ? lf[l] : fm, nf += ln[l];
#endif
    for (; i < n; i++) {
        double f = F[i], d = fabs((double)y[i] - f), a = fabs(f);
        dm = d > dm ? d : dm;
        fm = a > fm ? a : fm;
        nf += f * 0.0;
    }
    *dmax = dm, *fmax = fm, *nonfinite += nf;
}

double k_resid_rel_inf(const float *y, const float *F, size_t per, size_t tok, double eps) {
    double worst = 0, nonfinite = 0;
    for (size_t t0 = 0; t0 < per; t0 += tok) {
        double dmax, fmax;
        resid_token(y + t0, F + t0, tok, &dmax, &fmax, &nonfinite);
        double r = dmax / (fmax + eps);
        worst = r > worst ? r : worst;
    }
    return isnan(nonfinite) ? NAN : worst;
}

/* 16 partial sums of each (two AVX-512 or four AVX2 vectors of doubles), as k_sumsq: the
 * reference's one chain of dependent adds per sum made it 2.4% of the implicit Mamba2 training
 * step at D 64 (32 samples of 16384 floats per solver iteration; 0.7% now). */
void k_resid_sumsq(const float *f, const float *x, size_t n, double out[2]) {
    double ad[16], af[16];
    for (int l = 0; l < 16; l++) ad[l] = af[l] = 0.0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            double fv = f[i + l], d = fv - (double)x[i + l];
            ad[l] += d * d;
            af[l] += fv * fv;
        }
    double sd = 0.0, sf = 0.0;
    for (; i < n; i++) {
        double fv = f[i], d = fv - (double)x[i];
        sd += d * d;
        sf += fv * fv;
    }
    for (int l = 0; l < 16; l++) sd += ad[l], sf += af[l];
    out[0] = sd, out[1] = sf;
}

/* Elementwise, so any split over threads gives the same bits. */
void k_axpby(float *y, float a, const float *x, float b, size_t n) {
    if (b == 0.0f) { /* y is not read (may be uninitialised), as in the reference */
        KT_FOR(kt_team((double)n * KT_NS_COPY, (long)n),
        for (size_t i = 0; i < n; i++) y[i] = a * x[i]);
    } else {
        KT_FOR(kt_team((double)n * KT_NS_COPY, (long)n),
        for (size_t i = 0; i < n; i++) y[i] = a * x[i] + b * y[i]);
    }
}
