/* lstm.c: one nn.LSTM layer, forward over a sequence, BPTT backward, single-token step; see lstm.h.
 *
 * Scratch layout. Forward:  x_tm (T,B,D) | xp (T,B,4H) | act (B,4H) | h (2,B,H) | c (2,B,H)
 * (act, h and c only for a no-grad forward, h and c as a two-slot ring; act's first 4H floats hold
 * b_ih + b_hh while the input projection runs). Backward:
 * dpre_tm (T,B,4H) | dpre_bt (B,T,4H) | dh (B,H) | dc (B,H) | dc_prev (B,H).
 * Why two layouts: the recurrence walks time, so per-step slices must be contiguous (the cell
 * kernel and the recurrent GEMM take dense (B, .) blocks), while x, y and dx are (B,T,.) as the
 * rest of the toolkit. The forward copies x to time-major once (D floats a row), so that the
 * input projection of every token lands time-major and each step's recurrent GEMM adds onto its
 * (B,4H) block in place: no per-step copy of the pre-activations (4H floats a row). The cache is
 * time-major; the backward's input-side GEMMs work on (B,T,.) rows.
 */
#include "lstm.h"

#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

size_t lstm_cache_floats(const LstmCfg *c, int B, int T) {
    size_t BH = (size_t)B * c->H;
    return (size_t)T * 4 * BH + 2 * (size_t)(T + 1) * BH;
}

size_t lstm_scratch_floats(const LstmCfg *c, int B, int T) {
    size_t BH = (size_t)B * c->H, BT4H = (size_t)T * 4 * BH;
    size_t fwd = (size_t)T * B * c->D + BT4H + 4 * BH + 4 * BH;
    size_t bwd = 2 * BT4H + 3 * BH;
    return fwd > bwd ? fwd : bwd;
}

size_t lstm_state_floats(const LstmCfg *c, int B) { return 2 * (size_t)B * c->H; }

size_t lstm_step_scratch_floats(const LstmCfg *c, int B) { return 14 * (size_t)B * c->H; }

static void check_args(const LstmCfg *c, const LstmW *w, int B, int T) {
    CHECK(c && w && w->W_ih && w->W_hh, "lstm: NULL cfg or weights");
    CHECK(c->D > 0 && c->H > 0 && B > 0 && T > 0, "lstm: bad dims D=%d H=%d B=%d T=%d", c->D, c->H,
          B, T);
}

/* b_ih + b_hh into bsum (4H), or NULL when there is no bias: both biases start the input
 * projection's rows, and the recurrent GEMM then adds h_prev W_hh^T onto them. */
static const float *bias_sum(float *bsum, const LstmW *w, int G) {
    if (!w->b_ih && !w->b_hh) return NULL;
    for (int j = 0; j < G; j++) bsum[j] = (w->b_ih ? w->b_ih[j] : 0.0f) + (w->b_hh ? w->b_hh[j] : 0.0f);
    return bsum;
}

/* dst (Q,P,n) = src (P,Q,n): the (B,T,.) <-> (T,B,.) reorders between the toolkit's layout and
 * the recurrence's, one k_foreach over P so that both threads copy (as separate calls of a few
 * KB per step, each was too small to fork, and the copies ran serially). */
typedef struct {
    float *dst;
    const float *src;
    int P, Q, n;
} SwapAxes;

/* One-thread cost of a copied float (rows of 0.25-1 KB out of L2), for k_foreach's fork decision. */
#define NS_PER_FLOAT_COPIED 0.1

static void swap_axes_range(void *ctx, long p0, long p1) {
    const SwapAxes *a = ctx;
    const size_t n = (size_t)a->n;
    for (long p = p0; p < p1; p++)
        for (int q = 0; q < a->Q; q++)
            memcpy(a->dst + ((size_t)q * a->P + (size_t)p) * n, a->src + ((size_t)p * a->Q + q) * n, n * sizeof(float));
}

static void swap_axes(float *dst, const float *src, int P, int Q, int n) {
    SwapAxes a = {dst, src, P, Q, n};
    k_foreach(P, (double)Q * n * NS_PER_FLOAT_COPIED, swap_axes_range, &a);
}

void lstm_fwd(const LstmCfg *c, const LstmW *w, float *y, float *stateT, const float *x,
              const float *state0, float *cache, float *scratch, int B, int T) {
    check_args(c, w, B, T);
    CHECK(y && x && scratch, "lstm_fwd: NULL buffer");
    const int H = c->H, G = 4 * H, D = c->D;
    const size_t BH = (size_t)B * H, BG = (size_t)B * G;
    float *x_tm = scratch, *xp = x_tm + (size_t)T * B * D, *s_act = xp + (size_t)T * BG;
    float *s_h = s_act + BG, *s_c = s_h + 2 * BH;
    float *c_act = cache, *c_c = cache ? cache + (size_t)T * BG : NULL;
    float *c_h = cache ? c_c + (size_t)(T + 1) * BH : NULL;

    /* input projection of every token at once, time-major: xp = x W_ih^T + b_ih + b_hh
     * (T*B, 4H); only the recurrent part h_{t-1} W_hh^T has to wait for the previous step */
    swap_axes(x_tm, x, B, T, D);
    k_linear_fwd(xp, x_tm, w->W_ih, bias_sum(s_act, w, G), T * B, D, G);
    /* slot 0 of the h and c histories is the initial state */
    float *h0 = cache ? c_h : s_h, *cc0 = cache ? c_c : s_c;
    if (state0) {
        memcpy(h0, state0, BH * sizeof(float));
        memcpy(cc0, state0 + BH, BH * sizeof(float));
    } else {
        memset(h0, 0, BH * sizeof(float));
        memset(cc0, 0, BH * sizeof(float));
    }
    float *hp = h0, *cp = cc0;
    for (int t = 0; t < T; t++) {
        float *hn = cache ? c_h + (size_t)(t + 1) * BH : s_h + (size_t)((t + 1) & 1) * BH;
        float *cn = cache ? c_c + (size_t)(t + 1) * BH : s_c + (size_t)((t + 1) & 1) * BH;
        float *act = cache ? c_act + (size_t)t * BG : s_act, *pre = xp + (size_t)t * BG;
        k_gemm(0, 1, B, G, H, 1.0f, hp, H, w->W_hh, H, 1.0f, pre, G);
        k_lstm_cell_fwd(hn, cn, act, pre, cp, B, H);
        /* y is (B,T,H): without a cache h lives in a two-slot ring, so this step's rows go out
         * now; with one, all steps go out at once after the loop */
        if (!cache) k_copy_rows(y + (size_t)t * H, (size_t)T * H, hn, (size_t)H, (size_t)B, (size_t)H, 0);
        hp = hn;
        cp = cn;
    }
    if (cache) swap_axes(y, c_h + BH, T, B, H); /* slots 1..T are h_1..h_T */
    if (stateT) {
        memcpy(stateT, hp, BH * sizeof(float));
        memcpy(stateT + BH, cp, BH * sizeof(float));
    }
}

/* Parameter and input gradients from the per-step dpre (time-major), once BPTT is done. */
static void bwd_params(const LstmCfg *c, const LstmW *w, LstmW *dW, float *dx, const float *x,
                       const float *c_h, const float *dpre_tm, float *dpre_bt, int B, int T) {
    const int H = c->H, G = 4 * H;
    /* dW_hh += sum_t dpre_t^T h_{t-1}: h slots 0..T-1 are exactly h_{t-1}, time-major like dpre */
    if (dW->W_hh)
        k_gemm(1, 0, G, H, T * B, 1.0f, dpre_tm, G, c_h, H, 1.0f, dW->W_hh, H);
    /* db_hh += the column sums of dpre (k_linear_bwd's bias gradient alone: no dx, no dW) */
    if (dW->b_hh && w->b_hh) k_linear_bwd(NULL, NULL, dW->b_hh, dpre_tm, NULL, NULL, T * B, H, G);
    float *db_ih = w->b_ih ? dW->b_ih : NULL;
    if (!dx && !dW->W_ih && !db_ih) return;
    /* reorder to (B,T,4H) so that rows match x:(B,T,D) and one GEMM covers every token */
    swap_axes(dpre_bt, dpre_tm, T, B, G);
    k_linear_bwd(dx, dW->W_ih, db_ih, dpre_bt, x, w->W_ih, B * T, c->D, G);
}

void lstm_bwd(const LstmCfg *c, const LstmW *w, LstmW *dW, float *dx, float *dstate0,
              const float *dy, const float *dstateT, const float *x, const float *cache,
              float *scratch, int B, int T) {
    check_args(c, w, B, T);
    LstmW none = {0};
    if (!dW) dW = &none;
    if (!dx && !dstate0 && !dW->W_ih && !dW->W_hh && !dW->b_ih && !dW->b_hh) return;
    CHECK(x && cache && scratch, "lstm_bwd: NULL buffer (a backward needs the cache)");
    const int H = c->H, G = 4 * H;
    const size_t BH = (size_t)B * H, BG = (size_t)B * G;
    const float *c_act = cache, *c_c = cache + (size_t)T * BG, *c_h = c_c + (size_t)(T + 1) * BH;
    float *dpre_tm = scratch, *dpre_bt = dpre_tm + (size_t)T * BG;
    float *dh = dpre_bt + (size_t)T * BG, *dc = dh + BH, *dcp = dc + BH;

    if (dstateT) {
        memcpy(dh, dstateT, BH * sizeof(float));
        memcpy(dc, dstateT + BH, BH * sizeof(float));
    } else {
        memset(dh, 0, 2 * BH * sizeof(float)); /* dh and dc are adjacent */
    }
    k_zero(dpre_tm, (size_t)T * BG); /* every step's block at once: one call large enough to split */
    for (int t = T - 1; t >= 0; t--) {
        if (dy) /* h_t is both the output y_t and the next step's h_prev */
            k_copy_rows(dh, (size_t)H, dy + (size_t)t * H, (size_t)T * H, (size_t)B, (size_t)H, 1);
        float *dpre = dpre_tm + (size_t)t * BG;
        memset(dcp, 0, BH * sizeof(float));
        k_lstm_cell_bwd(dpre, dcp, dh, dc, c_act + (size_t)t * BG, c_c + (size_t)t * BH,
                        c_c + (size_t)(t + 1) * BH, B, H);
        /* dh_{t-1} = dpre_t W_hh (written: the old dh is fully consumed) */
        if (t > 0 || dstate0) k_gemm(0, 0, B, H, G, 1.0f, dpre, G, w->W_hh, H, 0.0f, dh, H);
        /* dc_prev becomes the dc of step t-1; the buffers swap instead of copying */
        float *tmp = dc;
        dc = dcp;
        dcp = tmp;
    }
    if (dstate0)
        for (size_t i = 0; i < BH; i++) {
            dstate0[i] += dh[i];
            dstate0[BH + i] += dc[i];
        }
    bwd_params(c, w, dW, dx, x, c_h, dpre_tm, dpre_bt, B, T);
}

void lstm_step(const LstmCfg *c, const LstmW *w, float *y, const float *x, const float *state_in,
               float *state_out, float *scratch, int B) {
    check_args(c, w, B, 1);
    CHECK(y && x && state_in && scratch, "lstm_step: NULL buffer");
    const int H = c->H, G = 4 * H;
    const size_t BH = (size_t)B * H, BG = (size_t)B * G;
    float *bsum = scratch, *pre = bsum + BG, *act = pre + BG, *cn = act + BG, *hn = cn + BH;
    /* as one step of lstm_fwd: (b_ih + b_hh + x W_ih^T) + h W_hh^T */
    k_linear_fwd(pre, x, w->W_ih, bias_sum(bsum, w, G), B, c->D, G);
    k_gemm(0, 1, B, G, H, 1.0f, state_in, H, w->W_hh, H, 1.0f, pre, G);
    /* new (h, c) go to scratch first: state_out may alias state_in */
    k_lstm_cell_fwd(hn, cn, act, pre, state_in + BH, B, H);
    memcpy(y, hn, BH * sizeof(float));
    if (state_out) {
        memcpy(state_out, hn, BH * sizeof(float));
        memcpy(state_out + BH, cn, BH * sizeof(float));
    }
}
