/* test_lstm.c: the LSTM layer (src/layers/lstm.h) against PyTorch nn.LSTM semantics.
 *
 *  - lstm_fwd against an independent double-precision loop written from the nn.LSTM docs
 *    (gate order i, f, g, o; both biases), from a given initial state;
 *  - lstm_bwd by 4-point finite differences on samples of every tensor and the dot-product
 *    (directional) test, with gradients on the initial state and on the final state; with and
 *    without biases / initial state; accumulation (+=);
 *  - lstm_step over T tokens equals lstm_fwd, final states match, and state_out = NULL commits
 *    nothing.
 * The gradient harness is the same as in test_layers.c (kept local: each test is one file).
 */
#include <stdint.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/kernels/kernels.h"
#include "../src/layers/lstm.h"

#include "gradcheck.h"

/* A parameter with its gradient, registered in a GradCase: the allocation helper for the layers
 * below, which hold many weights. */
static float *param(GradCase *gc, const char *name, float **g, size_t n, int fd, Rng *r, float lo,
                    float hi) {
    float *p = th_alloc(n);
    *g = th_alloc(n);
    th_fill_uniform(p, n, r, lo, hi);
    add_tensor(gc, name, p, *g, n, fd);
    return p;
}

static void free_case(GradCase *gc) {
    for (int i = 0; i < gc->nt; i++) { free(gc->t[i].p); free(gc->t[i].g); }
}

/* ---- LSTM ----------------------------------------------------------------------------------- */

enum { LB = 2, LT = 6, LD = 5, LH = 4 };

typedef struct {
    LstmCfg cfg;
    LstmW w, dw;
    int use_s0;
    float *x, *dx, *s0, *ds0, *y, *sT, *wy, *ws, *cache, *scratch;
} LstmCtx;

static double lstm_loss(void *p) {
    LstmCtx *c = p;
    lstm_fwd(&c->cfg, &c->w, c->y, c->sT, c->x, c->use_s0 ? c->s0 : NULL, NULL, c->scratch, LB, LT);
    double l = dotd(c->wy, c->y, (size_t)LB * LT * LH);
    return c->ws ? l + dotd(c->ws, c->sT, 2 * LB * LH) : l;
}

static void lstm_bwd_case(void *p) {
    LstmCtx *c = p;
    lstm_fwd(&c->cfg, &c->w, c->y, c->sT, c->x, c->use_s0 ? c->s0 : NULL, c->cache, c->scratch, LB,
             LT);
    lstm_bwd(&c->cfg, &c->w, &c->dw, c->dx, c->use_s0 ? c->ds0 : NULL, c->wy, c->ws, c->x, c->cache,
             c->scratch, LB, LT);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* nn.LSTM from its documentation, in double: y (B,T,H), final (h, c) (2,B,H). */
static void lstm_naive(const LstmCtx *c, const float *s0, double *y, double *sT) {
    for (int b = 0; b < LB; b++) {
        double h[LH], cc[LH], pre[4 * LH];
        for (int j = 0; j < LH; j++) {
            h[j] = s0 ? s0[b * LH + j] : 0;
            cc[j] = s0 ? s0[LB * LH + b * LH + j] : 0;
        }
        for (int t = 0; t < LT; t++) {
            const float *xt = c->x + ((size_t)b * LT + t) * LD;
            for (int r = 0; r < 4 * LH; r++) {
                double a = (c->w.b_ih ? c->w.b_ih[r] : 0) + (c->w.b_hh ? c->w.b_hh[r] : 0);
                for (int k = 0; k < LD; k++) a += (double)c->w.W_ih[r * LD + k] * xt[k];
                for (int k = 0; k < LH; k++) a += (double)c->w.W_hh[r * LH + k] * h[k];
                pre[r] = a;
            }
            for (int j = 0; j < LH; j++) {
                double i = sigm(pre[j]), f = sigm(pre[LH + j]), g = tanh(pre[2 * LH + j]);
                double o = sigm(pre[3 * LH + j]);
                cc[j] = f * cc[j] + i * g;
                h[j] = o * tanh(cc[j]);
                y[((size_t)b * LT + t) * LH + j] = h[j];
            }
        }
        for (int j = 0; j < LH; j++) {
            sT[b * LH + j] = h[j];
            sT[LB * LH + b * LH + j] = cc[j];
        }
    }
}

static double max_err_d(const float *a, const double *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i]));
    return e;
}

/* step x T == fwd; final state equal; state_out == NULL commits nothing */
static void step_check(LstmCtx *c, const char *name) {
    size_t ns = lstm_state_floats(&c->cfg, LB);
    float *st = th_alloc(ns), *st2 = th_alloc(ns);
    float *sc = th_alloc(lstm_step_scratch_floats(&c->cfg, LB));
    float *xt = th_alloc(LB * LD), *yt = th_alloc(LB * LH), *yt2 = th_alloc(LB * LH);
    float *seq = th_alloc((size_t)LB * LT * LH);
    lstm_fwd(&c->cfg, &c->w, c->y, c->sT, c->x, c->use_s0 ? c->s0 : NULL, NULL, c->scratch, LB, LT);
    if (c->use_s0) memcpy(st, c->s0, ns * sizeof(float));
    for (int t = 0; t < LT; t++) {
        for (int b = 0; b < LB; b++)
            memcpy(xt + b * LD, c->x + ((size_t)b * LT + t) * LD, LD * sizeof(float));
        memcpy(st2, st, ns * sizeof(float));
        lstm_step(&c->cfg, &c->w, yt2, xt, st, NULL, sc, LB); /* trial: no commit */
        TH_CHECK(memcmp(st, st2, ns * sizeof(float)) == 0, "%s: state_out=NULL changed the state",
                 name);
        lstm_step(&c->cfg, &c->w, yt, xt, st, st, sc, LB); /* commit in place */
        TH_CHECK(memcmp(yt, yt2, LB * LH * sizeof(float)) == 0, "%s: trial and commit differ",
                 name);
        for (int b = 0; b < LB; b++)
            memcpy(seq + ((size_t)b * LT + t) * LH, yt + b * LH, LH * sizeof(float));
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s: lstm_step x T == lstm_fwd", name);
    TH_CLOSE(seq, c->y, (size_t)LB * LT * LH, 1e-6, nm);
    snprintf(nm, sizeof nm, "%s: final (h, c) of step == fwd", name);
    TH_CLOSE(st, c->sT, ns, 1e-6, nm);
    free(st); free(st2); free(sc); free(xt); free(yt); free(yt2); free(seq);
}

static void test_lstm(Rng *r, int biases, int use_s0, int grad_sT, const char *name) {
    LstmCtx c = {.cfg = {LD, LH}, .use_s0 = use_s0};
    GradCase gc = {.name = name, .loss = lstm_loss, .bwd = lstm_bwd_case, .ctx = &c, .h = 1e-2f,
                   .tol = 2e-3};
    size_t nx = (size_t)LB * LT * LD, ny = (size_t)LB * LT * LH, ns = 2 * LB * LH;
    float s = 1.0f / sqrtf((float)LH); /* nn.LSTM init U(-1/sqrt(H), 1/sqrt(H)), made larger */
    c.x = param(&gc, "x", &c.dx, nx, 16, r, -1.5f, 1.5f);
    if (use_s0) c.s0 = param(&gc, "state0", &c.ds0, ns, 16, r, -1.0f, 1.0f);
    c.w.W_ih = param(&gc, "W_ih", &c.dw.W_ih, 4 * LH * LD, 16, r, -2 * s, 2 * s);
    c.w.W_hh = param(&gc, "W_hh", &c.dw.W_hh, 4 * LH * LH, 16, r, -2 * s, 2 * s);
    if (biases) {
        c.w.b_ih = param(&gc, "b_ih", &c.dw.b_ih, 4 * LH, 8, r, -s, s);
        c.w.b_hh = param(&gc, "b_hh", &c.dw.b_hh, 4 * LH, 8, r, -s, s);
    }
    c.y = th_alloc(ny); c.sT = th_alloc(ns); c.wy = th_alloc(ny);
    th_fill_normal(c.wy, ny, r, 1.f);
    if (grad_sT) { c.ws = th_alloc(ns); th_fill_normal(c.ws, ns, r, 1.f); }
    c.cache = th_alloc(lstm_cache_floats(&c.cfg, LB, LT));
    c.scratch = th_alloc(lstm_scratch_floats(&c.cfg, LB, LT));

    /* forward against the double-precision nn.LSTM loop */
    double *yr = malloc(ny * sizeof(double)), *sr = malloc(ns * sizeof(double));
    lstm_naive(&c, use_s0 ? c.s0 : NULL, yr, sr);
    lstm_fwd(&c.cfg, &c.w, c.y, c.sT, c.x, use_s0 ? c.s0 : NULL, c.cache, c.scratch, LB, LT);
    double ey = max_err_d(c.y, yr, ny), es = max_err_d(c.sT, sr, ns);
    TH_CHECK(ey <= 1e-5 && es <= 1e-5, "%s: fwd vs nn.LSTM loop: y err %.3g, state err %.3g", name,
             ey, es);
    free(yr); free(sr);

    run_grad_case(&gc, r);
    step_check(&c, name);
    free_case(&gc);
    free(c.y); free(c.sT); free(c.wy); free(c.ws); free(c.cache); free(c.scratch);
}

int main(void) {
    th_name = "test_lstm";
    Rng r;
    rng_seed(&r, 4321, 3);
    test_lstm(&r, 1, 1, 1, "lstm(bias,state0,dstateT)");
    test_lstm(&r, 1, 0, 0, "lstm(bias)");
    test_lstm(&r, 0, 1, 0, "lstm(nobias,state0)");
    printf("test_lstm: worst FD rel err %.3g, worst directional rel err %.3g\n", worst_fd,
           worst_dir);
    return th_done();
}
