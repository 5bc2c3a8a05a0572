/* test_attention.c: the attention mixer layer (src/layers/attention.c, spec implicit-lm §1.5,
 * §2.1 injection, §4.1 KV-cache stepping).
 *
 * Checks, at tiny sizes (D = 16, NH = 2 and 4, B = 2, T = 9):
 *  1. forward against an independent double-precision transcription of §1.5 (u split order,
 *     head layout, rotate-half RoPE, causal softmax), including the cached q_rot / k_rot;
 *  2. no-grad forward (cache NULL) equals the forward with cache;
 *  3. backward: central finite differences of L = <dy, y> for x, u and every weight, the
 *     accumulate (+=) convention, NULL gradient fields, and directional ("dot-product") tests
 *     <w, J v> = <J^T w, v>, exact where y is linear (u_v, Wv, Wo);
 *  4. step vs parallel: stepping with commits equals the forward row by row and rebuilds the
 *     prefill KV cache; prefill T0 tokens then step; a non-committing step changes nothing;
 *  5. RoPE relative-position property with Wq = Wk = I;
 *  6. attn_step aborts (CHECK) on pos >= Tmax.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "th.h"
#include "../src/layers/attention.h"

enum { B_ = 2, T_ = 9, D_ = 16 };

/* One problem instance: config, weights, inputs and the probe dy. */
typedef struct {
    AttnCfg cfg;
    float *wbuf;  /* (4, D, D): wq | wk | wv | wo */
    AttnW w;
    float *x;     /* (B, T, D) */
    float *u;     /* (B, T, 3D) */
    float *dy;    /* (B, T, D) */
    float *cache, *scratch;
    int B, T;
} Prob;

static void prob_init(Prob *p, int NH, float theta, int Tmax, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed, 1);
    attn_cfg_init(&p->cfg, D_, NH, theta, Tmax);
    p->B = B_;
    p->T = T_;
    size_t dd = (size_t)D_ * D_, n = (size_t)B_ * T_ * D_;
    p->wbuf = th_alloc(4 * dd);
    th_fill_normal(p->wbuf, 4 * dd, &r, 0.35f);
    p->w = (AttnW){p->wbuf, p->wbuf + dd, p->wbuf + 2 * dd, p->wbuf + 3 * dd, NULL};
    p->x = th_alloc(n);
    p->u = th_alloc(3 * n);
    p->dy = th_alloc(n);
    th_fill_normal(p->x, n, &r, 1.0f);
    th_fill_normal(p->u, 3 * n, &r, 0.5f);
    th_fill_normal(p->dy, n, &r, 1.0f);
    p->cache = th_alloc(attn_cache_floats(&p->cfg, B_, T_));
    p->scratch = th_alloc(attn_scratch_floats(&p->cfg, B_, T_));
}

static void prob_free(Prob *p) {
    free(p->wbuf); free(p->x); free(p->u); free(p->dy); free(p->cache); free(p->scratch);
}

/* ---- 1. independent reference forward (double) --------------------------------------------- */

/* Rotate-half RoPE of one (D) row at position pos, per spec §1.5, in double. */
static void ref_rope(double *z, int D, int HD, int pos, double theta) {
    for (int h = 0; h < D / HD; h++) {
        double *zh = z + h * HD;
        for (int i = 0; i < HD / 2; i++) {
            double ang = pos * pow(theta, -2.0 * i / HD), c = cos(ang), s = sin(ang);
            double a = zh[i], b = zh[i + HD / 2];
            zh[i] = a * c - b * s;
            zh[i + HD / 2] = b * c + a * s;
        }
    }
}

/* y:(B,T,D); q_rot, k_rot:(B,T,D) also returned (what the cache must hold). */
static void ref_fwd(const Prob *p, const float *u, double *y, double *qr, double *kr) {
    int B = p->B, T = p->T, D = D_, NH = p->cfg.NH, HD = p->cfg.HD;
    size_t n = (size_t)B * T * D;
    double *v = calloc(n, sizeof(double)), *o = calloc(n, sizeof(double));
    double sc[T_];
    for (size_t r = 0; r < (size_t)B * T; r++) {
        int t = (int)(r % (size_t)T);
        for (int d = 0; d < D; d++) {
            double aq = 0, ak = 0, av = 0;
            for (int c = 0; c < D; c++) {
                double xc = p->x[r * D + c];
                aq += xc * p->w.wq[d * D + c];
                ak += xc * p->w.wk[d * D + c];
                av += xc * p->w.wv[d * D + c];
            }
            if (u) { // row of u = [u_q | u_k | u_v]
                aq += u[r * 3 * D + d];
                ak += u[r * 3 * D + D + d];
                av += u[r * 3 * D + 2 * D + d];
            }
            qr[r * D + d] = aq; kr[r * D + d] = ak; v[r * D + d] = av;
        }
        ref_rope(qr + r * D, D, HD, t, p->cfg.theta);
        ref_rope(kr + r * D, D, HD, t, p->cfg.theta);
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *qt = qr + ((size_t)b * T + t) * D + h * HD;
                double mx = -1e300, z = 0;
                for (int s = 0; s <= t; s++) {
                    const double *ks = kr + ((size_t)b * T + s) * D + h * HD;
                    double dot = 0;
                    for (int i = 0; i < HD; i++) dot += qt[i] * ks[i];
                    sc[s] = dot / sqrt((double)HD);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = 0; s <= t; s++) z += (sc[s] = exp(sc[s] - mx));
                double *ot = o + ((size_t)b * T + t) * D + h * HD;
                for (int s = 0; s <= t; s++)
                    for (int i = 0; i < HD; i++)
                        ot[i] += sc[s] / z * v[((size_t)b * T + s) * D + h * HD + i];
            }
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int d = 0; d < D; d++) {
            double a = 0;
            for (int c = 0; c < D; c++) a += o[r * D + c] * p->w.wo[d * D + c];
            y[r * D + d] = a;
        }
    free(v); free(o);
}

static double rel_err_d(const float *a, const double *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= num)) num = e;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

static void test_reference(Prob *p, const char *tag) {
    size_t n = (size_t)p->B * p->T * D_;
    float *y = th_alloc(n), *y0 = th_alloc(n);
    double *yr = calloc(n, sizeof(double)), *qr = calloc(n, sizeof(double));
    double *kr = calloc(n, sizeof(double));
    for (int with_u = 0; with_u < 2; with_u++) {
        const float *u = with_u ? p->u : NULL;
        attn_fwd(&p->cfg, &p->w, y, p->x, u, p->cache, NULL, NULL, p->B, p->T);
        ref_fwd(p, u, yr, qr, kr);
        double ey = rel_err_d(y, yr, n), eq = rel_err_d(p->cache, qr, n);
        double ek = rel_err_d(p->cache + n, kr, n);
        printf("  %s u=%d: fwd vs double reference y %.2e  q_rot %.2e  k_rot %.2e\n", tag, with_u,
               ey, eq, ek);
        TH_CHECK(ey <= 1e-5, "%s u=%d: y vs reference %.3g", tag, with_u, ey);
        TH_CHECK(eq <= 1e-5 && ek <= 1e-5, "%s u=%d: cached q/k vs reference %.3g %.3g", tag,
                 with_u, eq, ek);
        // 2. no-grad forward (cache NULL, scratch used) gives the same y
        attn_fwd(&p->cfg, &p->w, y0, p->x, u, NULL, p->scratch, NULL, p->B, p->T);
        TH_CLOSE(y0, y, n, 1e-6, "no-grad fwd vs fwd with cache");
    }
    // y may alias x: run in place on a copy
    float *xy = th_alloc(n);
    memcpy(xy, p->x, n * sizeof(float));
    attn_fwd(&p->cfg, &p->w, xy, xy, p->u, NULL, p->scratch, NULL, p->B, p->T);
    attn_fwd(&p->cfg, &p->w, y, p->x, p->u, NULL, p->scratch, NULL, p->B, p->T);
    TH_CHECK(memcmp(xy, y, n * sizeof(float)) == 0, "%s: in-place fwd (y == x) differs", tag);
    free(xy); free(y); free(y0); free(yr); free(qr); free(kr);
}

/* ---- 3. gradients --------------------------------------------------------------------------- */

/* L = <dy, y> in double, no-grad forward. */
static double loss(Prob *p, float *y) {
    attn_fwd(&p->cfg, &p->w, y, p->x, p->u, NULL, p->scratch, NULL, p->B, p->T);
    double L = 0;
    for (size_t i = 0; i < (size_t)p->B * p->T * D_; i++) L += (double)p->dy[i] * y[i];
    return L;
}

/* Central differences of L w.r.t. every `stride`-th entry of buf (which the Prob reads), against
 * the analytic gradient g. Returns max |fd - g| / max |g|. */
static double fd_check(Prob *p, float *buf, const float *g, size_t n, size_t stride, float *y) {
    const float h = 1e-2f;
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++)
        if (fabs(g[i]) > den) den = fabs(g[i]);
    for (size_t i = 0; i < n; i += stride) {
        float keep = buf[i];
        buf[i] = keep + h;
        double lp = loss(p, y);
        buf[i] = keep - h;
        double lm = loss(p, y);
        buf[i] = keep;
        double fd = (lp - lm) / (2.0 * h), e = fabs(fd - g[i]);
        if (!(e <= num)) num = e;
    }
    return num / den;
}

/* <w, J v> by a 4-point stencil along direction dir (same shape as buf), in double. */
static double dir_deriv(Prob *p, float *buf, const float *dir, size_t n, float h, float *y) {
    float *keep = th_alloc(n);
    memcpy(keep, buf, n * sizeof(float));
    static const double c[4] = {-2, -1, 1, 2}, wgt[4] = {1, -8, 8, -1};
    double acc = 0;
    for (int s = 0; s < 4; s++) {
        for (size_t i = 0; i < n; i++) buf[i] = keep[i] + (float)(c[s] * h) * dir[i];
        acc += wgt[s] * loss(p, y);
    }
    memcpy(buf, keep, n * sizeof(float));
    free(keep);
    return acc / (12.0 * h);
}

static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static void test_grad(Prob *p, const char *tag) {
    int B = p->B, T = p->T;
    size_t n = (size_t)B * T * D_, dd = (size_t)D_ * D_;
    float *y = th_alloc(n), *dx = th_alloc(n), *du = th_alloc(3 * n), *dwb = th_alloc(4 * dd);
    AttnW dW = {dwb, dwb + dd, dwb + 2 * dd, dwb + 3 * dd, NULL};
    // Gradients accumulate: start from 1 and subtract it afterwards (the += convention).
    for (size_t i = 0; i < n; i++) dx[i] = 1.0f;
    for (size_t i = 0; i < 3 * n; i++) du[i] = 1.0f;
    for (size_t i = 0; i < 4 * dd; i++) dwb[i] = 1.0f;
    attn_fwd(&p->cfg, &p->w, y, p->x, p->u, p->cache, p->scratch, NULL, B, T);
    attn_bwd(&p->cfg, &p->w, &dW, dx, du, p->dy, p->x, p->u, p->cache, p->scratch, B, T);
    for (size_t i = 0; i < n; i++) dx[i] -= 1.0f;
    for (size_t i = 0; i < 3 * n; i++) du[i] -= 1.0f;
    for (size_t i = 0; i < 4 * dd; i++) dwb[i] -= 1.0f;

    const double tol = 2e-3;
    double e;
    e = fd_check(p, p->x, dx, n, 1, y);
    printf("  %s: FD rel err dx %.2e", tag, e);
    TH_CHECK(e <= tol, "%s: FD dx %.3g", tag, e);
    e = fd_check(p, p->u, du, 3 * n, 1, y);
    printf("  du %.2e", e);
    TH_CHECK(e <= tol, "%s: FD du %.3g", tag, e);
    static const char *names[4] = {"wq", "wk", "wv", "wo"};
    for (int k = 0; k < 4; k++) {
        e = fd_check(p, p->wbuf + k * dd, dwb + k * dd, dd, 3, y);
        printf("  d%s %.2e", names[k], e);
        TH_CHECK(e <= tol, "%s: FD d%s %.3g", tag, names[k], e);
    }
    printf("\n");

    // Directional ("dot-product") tests: <dy, J v> = <J^T dy, v>.
    Rng r;
    rng_seed(&r, 99, 2);
    float *vx = th_alloc(n), *vu = th_alloc(3 * n);
    th_fill_normal(vx, n, &r, 1.0f);
    th_fill_normal(vu, 3 * n, &r, 1.0f);
    double lhs = dir_deriv(p, p->x, vx, n, 1e-2f, y), rhs = dotd(dx, vx, n);
    double ex = fabs(lhs - rhs) / fabs(rhs);
    lhs = dir_deriv(p, p->u, vu, 3 * n, 1e-2f, y);
    rhs = dotd(du, vu, 3 * n);
    double eu = fabs(lhs - rhs) / fabs(rhs);
    // y is linear in u_v: a one-sided difference with a unit step has no truncation error.
    float *vv = th_alloc(3 * n);
    for (size_t i = 0; i < n / D_; i++) memcpy(vv + i * 3 * D_ + 2 * D_, vu + i * 3 * D_ + 2 * D_,
                                               D_ * sizeof(float));
    double l0 = loss(p, y);
    for (size_t i = 0; i < 3 * n; i++) p->u[i] += vv[i];
    double l1 = loss(p, y);
    for (size_t i = 0; i < 3 * n; i++) p->u[i] -= vv[i];
    double euv = fabs((l1 - l0) - dotd(du, vv, 3 * n)) / fabs(dotd(du, vv, 3 * n));
    printf("  %s: dot-product rel err x %.2e  u %.2e  u_v (linear) %.2e\n", tag, ex, eu, euv);
    TH_CHECK(ex <= 1e-4, "%s: dot-product test x %.3g", tag, ex);
    TH_CHECK(eu <= 1e-4, "%s: dot-product test u %.3g", tag, eu);
    TH_CHECK(euv <= 1e-4, "%s: linear dot-product test u_v %.3g", tag, euv);

    // NULL gradients: only dW->wk and du wanted; they must match the full call.
    float *du2 = th_alloc(3 * n), *dwk2 = th_alloc(dd);
    AttnW dW2 = {NULL, dwk2, NULL, NULL, NULL};
    attn_bwd(&p->cfg, &p->w, &dW2, NULL, du2, p->dy, p->x, p->u, p->cache, p->scratch, B, T);
    TH_CLOSE(du2, du, 3 * n, 1e-6, "du with NULL dx/dW fields");
    TH_CLOSE(dwk2, dW.wk, dd, 1e-6, "dwk with other dW fields NULL");
    memset(dx, 0, n * sizeof(float));
    attn_bwd(&p->cfg, &p->w, NULL, dx, NULL, p->dy, p->x, p->u, p->cache, p->scratch, B, T);
    e = fd_check(p, p->x, dx, n, 7, y);
    TH_CHECK(e <= tol, "%s: dx with dW = NULL, du = NULL: FD %.3g", tag, e);
    free(du2); free(dwk2); free(vx); free(vu); free(vv);
    free(y); free(dx); free(du); free(dwb);
}

/* ---- 4. step vs parallel -------------------------------------------------------------------- */

/* dst:(B,D) = src[:, t, :] of a (B,T,W) array */
static void take_row(float *dst, const float *src, int B, int T, int W, int t) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * W, src + ((size_t)b * T + t) * W, (size_t)W * sizeof(float));
}

static void test_step(Prob *p, const char *tag) {
    int B = p->B, T = p->T, D = D_;
    const AttnCfg *c = &p->cfg;
    size_t n = (size_t)B * T * D, ns = attn_state_floats(c, B);
    float *y = th_alloc(n), *pre = th_alloc(ns), *st = th_alloc(ns), *st2 = th_alloc(ns);
    float *sscr = th_alloc(attn_step_scratch_floats(c, B));
    float *xt = th_alloc((size_t)B * D), *ut = th_alloc((size_t)B * 3 * D);
    float *yt = th_alloc((size_t)B * D), *yt2 = th_alloc((size_t)B * D), *ref = th_alloc((size_t)B * D);
    for (int with_u = 0; with_u < 2; with_u++) {
        const float *u = with_u ? p->u : NULL;
        memset(pre, 0, ns * sizeof(float));
        memset(st, 0, ns * sizeof(float));
        attn_fwd(c, &p->w, y, p->x, u, NULL, p->scratch, pre, B, T);
        double emax = 0;
        int same_nc = 1;
        for (int t = 0; t < T; t++) {
            take_row(xt, p->x, B, T, D, t);
            if (u) take_row(ut, u, B, T, 3 * D, t);
            // a non-committing step first: same y, state bit-identical
            memcpy(st2, st, ns * sizeof(float));
            attn_step(c, &p->w, yt2, xt, u ? ut : NULL, st, t, 0, sscr, B);
            same_nc &= memcmp(st2, st, ns * sizeof(float)) == 0;
            attn_step(c, &p->w, yt, xt, u ? ut : NULL, st, t, 1, sscr, B);
            same_nc &= memcmp(yt, yt2, (size_t)B * D * sizeof(float)) == 0;
            take_row(ref, y, B, T, D, t);
            double e = th_rel_err(yt, ref, (size_t)B * D);
            if (!(e <= emax)) emax = e;
        }
        printf("  %s u=%d: step vs fwd max rel err %.2e\n", tag, with_u, emax);
        TH_CHECK(emax <= 1e-5, "%s u=%d: step vs fwd %.3g", tag, with_u, emax);
        TH_CHECK(same_nc, "%s u=%d: non-committing step changed state or y", tag, with_u);
        TH_CLOSE(st, pre, ns, 1e-6, "KV cache after stepping vs prefill");

        // prefill T0 tokens with the sequence forward, then step the rest
        for (int T0 = 1; T0 < T; T0 += 3) {
            float *x0 = th_alloc((size_t)B * T0 * D), *u0 = th_alloc((size_t)B * T0 * 3 * D);
            float *y0 = th_alloc((size_t)B * T0 * D);
            for (int b = 0; b < B; b++) {
                memcpy(x0 + (size_t)b * T0 * D, p->x + (size_t)b * T * D, (size_t)T0 * D * sizeof(float));
                if (u) memcpy(u0 + (size_t)b * T0 * 3 * D, u + (size_t)b * T * 3 * D,
                              (size_t)T0 * 3 * D * sizeof(float));
            }
            memset(st, 0, ns * sizeof(float));
            attn_fwd(c, &p->w, y0, x0, u ? u0 : NULL, NULL, p->scratch, st, B, T0);
            double e = 0;
            for (int t = T0; t < T; t++) {
                take_row(xt, p->x, B, T, D, t);
                if (u) take_row(ut, u, B, T, 3 * D, t);
                attn_step(c, &p->w, yt, xt, u ? ut : NULL, st, t, 1, sscr, B);
                take_row(ref, y, B, T, D, t);
                double et = th_rel_err(yt, ref, (size_t)B * D);
                if (!(et <= e)) e = et;
            }
            TH_CHECK(e <= 1e-5, "%s u=%d: prefill %d then step: rel err %.3g", tag, with_u, T0, e);
            TH_CLOSE(st, pre, ns, 1e-6, "KV cache after prefill + steps vs full prefill");
            free(x0); free(u0); free(y0);
        }
    }
    free(y); free(pre); free(st); free(st2); free(sscr); free(xt); free(ut); free(yt); free(yt2);
    free(ref);
}

/* ---- 5. RoPE relative-position property ----------------------------------------------------- */

/* With Wq = Wk = I, u = NULL and the same input row x0 at every position, q_t = R(t) x0 and
 * k_s = R(s) x0, so the per-head score q_t . k_s = x0^T R(s - t) x0 depends on s - t only. The
 * scores are read from the cached q_rot / k_rot (layout documented in attention.h). */
static void test_rope_relative(float theta, int NH) {
    Prob p;
    prob_init(&p, NH, theta, 0, 7);
    int B = p.B, T = p.T, D = D_, HD = p.cfg.HD;
    size_t dd = (size_t)D * D, n = (size_t)B * T * D;
    memset(p.wbuf, 0, 2 * dd * sizeof(float));
    for (int i = 0; i < D; i++) p.w.wq[i * D + i] = p.w.wk[i * D + i] = 1.0f;
    for (int b = 0; b < B; b++)
        for (int t = 1; t < T; t++) memcpy(p.x + ((size_t)b * T + t) * D, p.x + (size_t)b * T * D,
                                           (size_t)D * sizeof(float));
    float *y = th_alloc(n);
    attn_fwd(&p.cfg, &p.w, y, p.x, NULL, p.cache, NULL, NULL, B, T);
    const float *q = p.cache, *k = p.cache + n;
    double emax = 0, smax = 0, spread = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int d = -(T - 1); d < T; d++) { // d = s - t
                double s0 = 0;
                int first = 1;
                for (int t = 0; t < T; t++) {
                    int s = t + d;
                    if (s < 0 || s >= T) continue;
                    double sc = 0;
                    for (int i = 0; i < HD; i++)
                        sc += (double)q[((size_t)b * T + t) * D + h * HD + i] *
                              k[((size_t)b * T + s) * D + h * HD + i];
                    if (first) s0 = sc, first = 0;
                    if (fabs(sc - s0) > emax) emax = fabs(sc - s0);
                    if (fabs(sc) > smax) smax = fabs(sc);
                    // the score must actually vary with d (RoPE is applied at all)
                    if (t == 0 && d == 0) spread -= sc;
                    if (t == 0 && d == 1) spread += sc;
                }
            }
    printf("  rope theta=%g NH=%d: score depends on s-t only, max dev %.2e (scale %.2e)\n",
           (double)theta, NH, emax, smax);
    TH_CHECK(emax <= 1e-5 * smax, "rope theta=%g: scores not relative: %.3g", (double)theta, emax);
    TH_CHECK(fabs(spread) > 1e-3 * smax, "rope theta=%g: scores do not depend on position",
             (double)theta);
    free(y);
    prob_free(&p);
}

/* ---- 6. attn_step rejects a position outside the cache -------------------------------------- */

static int step_aborts(Prob *p, int pos) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        float y[B_ * D_], scr[4 * B_ * D_];
        float *st = th_alloc(attn_state_floats(&p->cfg, B_));
        attn_step(&p->cfg, &p->w, y, p->x, NULL, st, pos, 1, scr, B_);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

int main(void) {
    th_name = "test_attention";
    for (int NH = 2; NH <= 4; NH += 2) {
        char tag[32];
        snprintf(tag, sizeof tag, "NH=%d", NH);
        Prob p;
        prob_init(&p, NH, 500000.0f, 12, 1234 + (uint64_t)NH);
        test_reference(&p, tag);
        test_grad(&p, tag);
        test_step(&p, tag);
        if (NH == 2) {
            TH_CHECK(step_aborts(&p, 12) == 1, "attn_step pos = Tmax did not abort");
            TH_CHECK(step_aborts(&p, -1) == 1, "attn_step pos = -1 did not abort");
        }
        prob_free(&p);
    }
    // a small theta rotates every pair strongly: the layout check is sharp there
    Prob p;
    prob_init(&p, 2, 10.0f, 12, 55);
    test_reference(&p, "NH=2 theta=10");
    test_grad(&p, "NH=2 theta=10");
    prob_free(&p);
    test_rope_relative(500000.0f, 2);
    test_rope_relative(10.0f, 4);
    return th_done();
}
