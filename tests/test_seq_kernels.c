/* test_seq_kernels.c: the sequence kernels of kernels.h (SSD scan, RoPE, causal attention).
 *
 * For each: fast vs reference on several shapes (T not a multiple of SSD_CHUNK, odd P and N,
 * with and without h0/hT), the reference backward vs central finite differences and the
 * dot-product test <J v, w> = <v, J^T w>, step-by-step vs full-sequence consistency, and (with
 * OpenMP) bit-identity of the fast kernels at 1 and 3 threads. Sizes are small so that the binary
 * stays fast under SAN=1. Max errors seen per family are printed at the end (informational).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../src/kernels/cpu/seq_mm.h"
#include "../src/kernels/cpu/ssd_paths.h"
#include "../src/kernels/cpu/vecw.h"
#include "../src/kernels/kernels.h"
#include "th.h"

/* Largest error seen per family, for the closing report line. */
static double max_err_fwd, max_err_bwd, max_err_fd, max_err_step;

static double close_arr(const float *a, const float *b, size_t n, double tol, double *track,
                        const char *what, const char *shape) {
    double e = th_rel_err(a, b, n);
    TH_CHECK(e <= tol, "%s [%s]: rel err %.3g > %.3g", what, shape, e, tol);
    if (track && e > *track) *track = e;
    return e;
}

static int bits_equal(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ================================ SSD ================================ */

typedef struct {
    int B, T, H, P, N;
    float *x, *dt, *A, *Bm, *Cm, *D, *h0; /* (B,T,H,P) (B,T,H) (H) (B,T,N) (B,T,N) (H) (B,H,P,N) */
} SsdIn;

typedef struct {
    float *dx, *ddt, *dA, *dBm, *dCm, *dD, *dh0; /* shapes as the inputs */
} SsdGrad;

static size_t sz_x(const SsdIn *s) { return (size_t)s->B * s->T * s->H * s->P; }
static size_t sz_dt(const SsdIn *s) { return (size_t)s->B * s->T * s->H; }
static size_t sz_bc(const SsdIn *s) { return (size_t)s->B * s->T * s->N; }
static size_t sz_S(const SsdIn *s) { return (size_t)s->B * s->H * s->P * s->N; }

static SsdIn ssd_in_new(int B, int T, int H, int P, int N, Rng *r) {
    SsdIn s = {B, T, H, P, N, 0, 0, 0, 0, 0, 0, 0};
    s.x = th_alloc(sz_x(&s));
    s.dt = th_alloc(sz_dt(&s));
    s.A = th_alloc(H);
    s.Bm = th_alloc(sz_bc(&s));
    s.Cm = th_alloc(sz_bc(&s));
    s.D = th_alloc(H);
    s.h0 = th_alloc(sz_S(&s));
    th_fill_normal(s.x, sz_x(&s), r, 1.0f);
    th_fill_uniform(s.dt, sz_dt(&s), r, 0.01f, 0.5f);
    th_fill_uniform(s.A, H, r, -2.0f, -0.1f);
    th_fill_normal(s.Bm, sz_bc(&s), r, 1.0f);
    th_fill_normal(s.Cm, sz_bc(&s), r, 1.0f);
    th_fill_uniform(s.D, H, r, 0.5f, 1.5f);
    th_fill_normal(s.h0, sz_S(&s), r, 1.0f);
    return s;
}

static void ssd_in_free(SsdIn *s) {
    free(s->x); free(s->dt); free(s->A); free(s->Bm); free(s->Cm); free(s->D); free(s->h0);
}

static SsdGrad ssd_grad_new(const SsdIn *s) {
    SsdGrad g = {th_alloc(sz_x(s)), th_alloc(sz_dt(s)), th_alloc(s->H), th_alloc(sz_bc(s)),
                 th_alloc(sz_bc(s)), th_alloc(s->H), th_alloc(sz_S(s))};
    return g;
}

static void ssd_grad_free(SsdGrad *g) {
    free(g->dx); free(g->ddt); free(g->dA); free(g->dBm); free(g->dCm); free(g->dD); free(g->dh0);
}

typedef void (*SsdFwdFn)(float *, float *, float *, const float *, const float *, const float *,
                         const float *, const float *, const float *, const float *, int, int, int,
                         int, int);
typedef void (*SsdBwdFn)(float *, float *, float *, float *, float *, float *, float *,
                         const float *, const float *, const float *, const float *, const float *,
                         const float *, const float *, const float *, const float *, const float *,
                         int, int, int, int, int);

static void ssd_run_fwd(SsdFwdFn f, const SsdIn *s, int use_h0, float *y, float *saved, float *hT) {
    f(y, saved, hT, s->x, s->dt, s->A, s->Bm, s->Cm, s->D, use_h0 ? s->h0 : NULL, s->B, s->T, s->H,
      s->P, s->N);
}

static void ssd_run_bwd(SsdBwdFn f, const SsdIn *s, int use_h0, SsdGrad *g, const float *dy,
                        const float *dhT, const float *saved) {
    f(g->dx, g->ddt, g->dA, g->dBm, g->dCm, g->dD, use_h0 ? g->dh0 : NULL, dy, dhT, s->x, s->dt,
      s->A, s->Bm, s->Cm, s->D, use_h0 ? s->h0 : NULL, saved, s->B, s->T, s->H, s->P, s->N);
}

/* L = <wy, y> + <wh, hT> through the reference forward, in double. */
static double ssd_loss(const SsdIn *s, const float *wy, const float *wh) {
    float *y = th_alloc(sz_x(s)), *hT = th_alloc(sz_S(s));
    ssd_run_fwd(k_ssd_fwd_ref, s, 1, y, NULL, hT);
    double L = 0;
    for (size_t i = 0; i < sz_x(s); i++) L += (double)wy[i] * y[i];
    for (size_t i = 0; i < sz_S(s); i++) L += (double)wh[i] * hT[i];
    free(y);
    free(hT);
    return L;
}

/* Reference backward vs central differences of every input entry, then the dot-product test. */
static void test_ssd_fd(int B, int T, int H, int P, int N, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d H%d P%d N%d", B, T, H, P, N);
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    SsdGrad g = ssd_grad_new(&s);
    float *wy = th_alloc(sz_x(&s)), *wh = th_alloc(sz_S(&s));
    th_fill_normal(wy, sz_x(&s), r, 1.0f);
    th_fill_normal(wh, sz_S(&s), r, 1.0f);
    ssd_run_bwd(k_ssd_bwd_ref, &s, 1, &g, wy, wh, NULL);

    float *ins[7] = {s.x, s.dt, s.A, s.Bm, s.Cm, s.D, s.h0};
    float *grads[7] = {g.dx, g.ddt, g.dA, g.dBm, g.dCm, g.dD, g.dh0};
    size_t ns[7] = {sz_x(&s), sz_dt(&s), (size_t)H, sz_bc(&s), sz_bc(&s), (size_t)H, sz_S(&s)};
    const char *names[7] = {"ssd fd dx", "ssd fd ddt", "ssd fd dA", "ssd fd dBm", "ssd fd dCm",
                            "ssd fd dD", "ssd fd dh0"};
    const float eps = 2e-3f;
    for (int a = 0; a < 7; a++) {
        float *fd = th_alloc(ns[a]);
        for (size_t i = 0; i < ns[a]; i++) {
            float keep = ins[a][i];
            ins[a][i] = keep + eps;
            double lp = ssd_loss(&s, wy, wh);
            ins[a][i] = keep - eps;
            double lm = ssd_loss(&s, wy, wh);
            ins[a][i] = keep;
            fd[i] = (float)((lp - lm) / (2.0 * (double)eps));
        }
        close_arr(grads[a], fd, ns[a], 5e-3, &max_err_fd, names[a], shape);
        free(fd);
    }
    /* Dot-product test along one random direction v over all inputs at once. */
    double jtw_v = 0;
    float *v[7];
    for (int a = 0; a < 7; a++) {
        v[a] = th_alloc(ns[a]);
        th_fill_normal(v[a], ns[a], r, 1.0f);
        for (size_t i = 0; i < ns[a]; i++) jtw_v += (double)grads[a][i] * v[a][i];
    }
    double lpm[2];
    for (int sg = 0; sg < 2; sg++) {
        float **saves = malloc(sizeof(float *) * 7);
        for (int a = 0; a < 7; a++) {
            saves[a] = th_alloc(ns[a]);
            memcpy(saves[a], ins[a], ns[a] * sizeof(float));
            for (size_t i = 0; i < ns[a]; i++) ins[a][i] += (sg ? -eps : eps) * v[a][i];
        }
        lpm[sg] = ssd_loss(&s, wy, wh);
        for (int a = 0; a < 7; a++) {
            memcpy(ins[a], saves[a], ns[a] * sizeof(float));
            free(saves[a]);
        }
        free(saves);
    }
    double jv_w = (lpm[0] - lpm[1]) / (2.0 * (double)eps);
    double e = fabs(jv_w - jtw_v) / fmax(fabs(jtw_v), 1e-6);
    TH_CHECK(e < 2e-3, "ssd dot-product test [%s]: <Jv,w>=%.8g <v,J^Tw>=%.8g rel %.3g", shape, jv_w,
             jtw_v, e);
    if (e > max_err_fd) max_err_fd = e;
    for (int a = 0; a < 7; a++) free(v[a]);
    free(wy);
    free(wh);
    ssd_grad_free(&g);
    ssd_in_free(&s);
}

/* Fast vs reference: y, hT, saved; then all gradients (with dhT), incl. crossed saved buffers. */
static void test_ssd_parity(int B, int T, int H, int P, int N, int use_h0, int use_hT, Rng *r) {
    char shape[80];
    snprintf(shape, sizeof shape, "B%d T%d H%d P%d N%d h0=%d hT=%d", B, T, H, P, N, use_h0, use_hT);
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    size_t nx = sz_x(&s), nS = sz_S(&s), nsv = k_ssd_saved_floats(B, T, H, P, N);
    float *y0 = th_alloc(nx), *y1 = th_alloc(nx), *h0r = th_alloc(nS), *h1 = th_alloc(nS);
    float *sv0 = th_alloc(nsv), *sv1 = th_alloc(nsv);
    ssd_run_fwd(k_ssd_fwd_ref, &s, use_h0, y0, sv0, use_hT ? h0r : NULL);
    ssd_run_fwd(k_ssd_fwd, &s, use_h0, y1, sv1, use_hT ? h1 : NULL);
    close_arr(y1, y0, nx, 2e-5, &max_err_fwd, "ssd fwd y", shape);
    if (use_hT) close_arr(h1, h0r, nS, 2e-5, &max_err_fwd, "ssd fwd hT", shape);
    close_arr(sv1, sv0, nsv, 2e-5, &max_err_fwd, "ssd fwd saved", shape);

    float *dy = th_alloc(nx), *dhT = th_alloc(nS);
    th_fill_normal(dy, nx, r, 1.0f);
    th_fill_normal(dhT, nS, r, 1.0f);
    SsdGrad gr = ssd_grad_new(&s), gf = ssd_grad_new(&s), gx = ssd_grad_new(&s);
    /* start from non-zero gradients to check accumulation (+=) */
    float *gfa[7] = {gf.dx, gf.ddt, gf.dA, gf.dBm, gf.dCm, gf.dD, gf.dh0};
    float *gra[7] = {gr.dx, gr.ddt, gr.dA, gr.dBm, gr.dCm, gr.dD, gr.dh0};
    float *gxa[7] = {gx.dx, gx.ddt, gx.dA, gx.dBm, gx.dCm, gx.dD, gx.dh0};
    size_t ns[7] = {nx, sz_dt(&s), (size_t)H, sz_bc(&s), sz_bc(&s), (size_t)H, nS};
    const char *names[7] = {"ssd bwd dx", "ssd bwd ddt", "ssd bwd dA", "ssd bwd dBm",
                            "ssd bwd dCm", "ssd bwd dD", "ssd bwd dh0"};
    for (int a = 0; a < 7; a++) {
        for (size_t i = 0; i < ns[a]; i++) gra[a][i] = gfa[a][i] = gxa[a][i] = 0.25f;
    }
    ssd_run_bwd(k_ssd_bwd_ref, &s, use_h0, &gr, dy, use_hT ? dhT : NULL, sv0);
    ssd_run_bwd(k_ssd_bwd, &s, use_h0, &gf, dy, use_hT ? dhT : NULL, sv1);
    ssd_run_bwd(k_ssd_bwd, &s, use_h0, &gx, dy, use_hT ? dhT : NULL, sv0); /* fast after ref fwd */
    for (int a = 0; a < 7; a++) {
        if (a == 6 && !use_h0) continue;
        close_arr(gfa[a], gra[a], ns[a], 1e-4, &max_err_bwd, names[a], shape);
        close_arr(gxa[a], gra[a], ns[a], 1e-4, NULL, names[a], shape);
    }
    ssd_grad_free(&gr);
    ssd_grad_free(&gf);
    ssd_grad_free(&gx);
    free(y0); free(y1); free(h0r); free(h1); free(sv0); free(sv1); free(dy); free(dhT);
    ssd_in_free(&s);
}

/* Gradients requested one at a time equal the full run; dh0 without h0 is the gradient at a
 * zero initial state (fast and reference agree); T = 0 passes the state through. */
static void test_ssd_subsets(Rng *r) {
    int B = 2, T = 70, H = 2, P = 3, N = 5;
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    size_t nx = sz_x(&s), nS = sz_S(&s), nsv = k_ssd_saved_floats(B, T, H, P, N);
    float *y = th_alloc(nx), *sv = th_alloc(nsv), *dy = th_alloc(nx), *dhT = th_alloc(nS);
    th_fill_normal(dy, nx, r, 1.0f);
    th_fill_normal(dhT, nS, r, 1.0f);
    ssd_run_fwd(k_ssd_fwd, &s, 0, y, sv, NULL);
    SsdGrad all = ssd_grad_new(&s), one = ssd_grad_new(&s), ref = ssd_grad_new(&s);
    k_ssd_bwd(all.dx, all.ddt, all.dA, all.dBm, all.dCm, all.dD, all.dh0, dy, dhT, s.x, s.dt, s.A,
              s.Bm, s.Cm, s.D, NULL, sv, B, T, H, P, N);
    k_ssd_bwd_ref(ref.dx, ref.ddt, ref.dA, ref.dBm, ref.dCm, ref.dD, ref.dh0, dy, dhT, s.x, s.dt,
                  s.A, s.Bm, s.Cm, s.D, NULL, NULL, B, T, H, P, N);
    close_arr(all.dh0, ref.dh0, nS, 1e-4, &max_err_bwd, "ssd bwd dh0 without h0", "subsets");
    float *oa[7] = {one.dx, one.ddt, one.dA, one.dBm, one.dCm, one.dD, one.dh0};
    float *aa[7] = {all.dx, all.ddt, all.dA, all.dBm, all.dCm, all.dD, all.dh0};
    size_t ns[7] = {nx, sz_dt(&s), (size_t)H, sz_bc(&s), sz_bc(&s), (size_t)H, nS};
    for (int a = 0; a < 7; a++) {
        float *p[7] = {0};
        p[a] = oa[a];
        k_ssd_bwd(p[0], p[1], p[2], p[3], p[4], p[5], p[6], dy, dhT, s.x, s.dt, s.A, s.Bm, s.Cm,
                  s.D, NULL, sv, B, T, H, P, N);
        TH_CHECK(bits_equal(oa[a], aa[a], ns[a]), "ssd bwd gradient %d alone differs", a);
    }
    /* T = 0: hT = h0, dh0 += dhT, nothing else touched */
    float *hT = th_alloc(nS), *dh0 = th_alloc(nS);
    k_ssd_fwd(y, NULL, hT, s.x, s.dt, s.A, s.Bm, s.Cm, s.D, s.h0, B, 0, H, P, N);
    TH_CHECK(bits_equal(hT, s.h0, nS), "ssd fwd T=0: hT != h0");
    k_ssd_bwd(NULL, NULL, NULL, NULL, NULL, NULL, dh0, dy, dhT, s.x, s.dt, s.A, s.Bm, s.Cm, s.D,
              s.h0, NULL, B, 0, H, P, N);
    TH_CHECK(bits_equal(dh0, dhT, nS), "ssd bwd T=0: dh0 != dhT");
    ssd_grad_free(&all);
    ssd_grad_free(&one);
    ssd_grad_free(&ref);
    free(y); free(sv); free(dy); free(dhT); free(hT); free(dh0);
    ssd_in_free(&s);
}

/* More sequences than one scratch group (2 per thread): the forward without `saved` (grouped
 * chunk states) equals the one with it bit for bit, and the grouped backward matches the ref. */
static void test_ssd_groups(Rng *r) {
    int B = 5, T = 70, H = 2, P = 3, N = 4;
    int keep = k_get_threads();
    k_set_threads(1);
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    size_t nx = sz_x(&s), nS = sz_S(&s), nsv = k_ssd_saved_floats(B, T, H, P, N);
    float *y0 = th_alloc(nx), *y1 = th_alloc(nx), *h0 = th_alloc(nS), *h1 = th_alloc(nS);
    float *sv = th_alloc(nsv), *dy = th_alloc(nx);
    th_fill_normal(dy, nx, r, 1.0f);
    ssd_run_fwd(k_ssd_fwd, &s, 1, y0, sv, h0);
    ssd_run_fwd(k_ssd_fwd, &s, 1, y1, NULL, h1);
    TH_CHECK(bits_equal(y0, y1, nx) && bits_equal(h0, h1, nS), "ssd fwd with/without saved differ");
    SsdGrad gf = ssd_grad_new(&s), gr = ssd_grad_new(&s);
    ssd_run_bwd(k_ssd_bwd, &s, 1, &gf, dy, h0, sv);
    ssd_run_bwd(k_ssd_bwd_ref, &s, 1, &gr, dy, h0, NULL);
    close_arr(gf.dx, gr.dx, nx, 1e-4, &max_err_bwd, "ssd bwd dx", "groups");
    close_arr(gf.dBm, gr.dBm, sz_bc(&s), 1e-4, &max_err_bwd, "ssd bwd dBm", "groups");
    close_arr(gf.dA, gr.dA, (size_t)H, 1e-4, &max_err_bwd, "ssd bwd dA", "groups");
    close_arr(gf.dh0, gr.dh0, nS, 1e-4, &max_err_bwd, "ssd bwd dh0", "groups");
    k_set_threads(keep);
    ssd_grad_free(&gf);
    ssd_grad_free(&gr);
    free(y0); free(y1); free(h0); free(h1); free(sv); free(dy);
    ssd_in_free(&s);
}

/* Both fast SSD paths (ssd_paths.h: the recurrent scan k_ssd_* takes for small states, and the
 * chunked form) at a shape where both apply: parity with the reference (with h0, hT, dhT; the
 * scan's backward after its own forward, the chunked one after the reference's `saved`), and
 * bit-identity at 1 and 3 threads. */
static void test_ssd_paths(Rng *r) {
    int B = 3, T = 130, H = 2, P = 16, N = 16, keep = k_get_threads();
    TH_CHECK(kssd_use_scan(P, N) && !kssd_use_scan(64, 128), "ssd path choice");
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    size_t nx = sz_x(&s), nS = sz_S(&s), nsv = k_ssd_saved_floats(B, T, H, P, N);
    float *y0 = th_alloc(nx), *sv0 = th_alloc(nsv), *h0r = th_alloc(nS), *dy = th_alloc(nx);
    float *dhT = th_alloc(nS);
    th_fill_normal(dy, nx, r, 1.0f);
    th_fill_normal(dhT, nS, r, 1.0f);
    ssd_run_fwd(k_ssd_fwd_ref, &s, 1, y0, sv0, h0r);
    SsdGrad gr = ssd_grad_new(&s);
    ssd_run_bwd(k_ssd_bwd_ref, &s, 1, &gr, dy, dhT, NULL);
    SsdFwdFn fw[2] = {kssd_scan_fwd, kssd_chunked_fwd};
    SsdBwdFn bw[2] = {kssd_scan_bwd, kssd_chunked_bwd};
    for (int path = 0; path < 2; path++) {
        const char *tag = path ? "chunked" : "scan";
        float *y[2], *sv[2], *hT[2];
        SsdGrad g[2];
        for (int run = 0; run < 2; run++) { /* the base count (th.h), then 3 */
            th_bitid_threads(run ? 3 : th_thread_base());
            y[run] = th_alloc(nx), sv[run] = th_alloc(nsv), hT[run] = th_alloc(nS);
            ssd_run_fwd(fw[path], &s, 1, y[run], sv[run], hT[run]);
            g[run] = ssd_grad_new(&s);
            ssd_run_bwd(bw[path], &s, 1, &g[run], dy, dhT, path ? sv0 : sv[run]);
        }
        th_threads_restore(keep);
        close_arr(y[0], y0, nx, 2e-5, &max_err_fwd, "ssd path fwd y", tag);
        close_arr(sv[0], sv0, nsv, 2e-5, &max_err_fwd, "ssd path fwd saved", tag);
        close_arr(hT[0], h0r, nS, 2e-5, &max_err_fwd, "ssd path fwd hT", tag);
        float *ga[7] = {g[0].dx, g[0].ddt, g[0].dA, g[0].dBm, g[0].dCm, g[0].dD, g[0].dh0};
        float *gb[7] = {g[1].dx, g[1].ddt, g[1].dA, g[1].dBm, g[1].dCm, g[1].dD, g[1].dh0};
        float *gra[7] = {gr.dx, gr.ddt, gr.dA, gr.dBm, gr.dCm, gr.dD, gr.dh0};
        size_t ns[7] = {nx, sz_dt(&s), (size_t)H, sz_bc(&s), sz_bc(&s), (size_t)H, nS};
        int same = bits_equal(y[0], y[1], nx) && bits_equal(sv[0], sv[1], nsv);
        for (int a = 0; a < 7; a++) {
            close_arr(ga[a], gra[a], ns[a], 1e-4, &max_err_bwd, "ssd path bwd", tag);
            same &= bits_equal(ga[a], gb[a], ns[a]);
        }
        TH_CHECK(same, "ssd %s path differs between 1 and 3 threads", tag);
        for (int run = 0; run < 2; run++) {
            free(y[run]); free(sv[run]); free(hT[run]);
            ssd_grad_free(&g[run]);
        }
    }
    ssd_grad_free(&gr);
    free(y0); free(sv0); free(h0r); free(dy); free(dhT);
    ssd_in_free(&s);
}

/* kseq_dot (seq_mm.h, inline in the sequence kernels and in the steps' readouts of rows that are
 * not whole vectors) against a double sum, every length from 0 to 80 and a few long rows: each
 * product is rounded once and each sum goes through at most ceil(n / 16) + 4 float additions (16
 * lane sums, then the 4-level tree), so the error is below (ceil(n / 16) + 5) u sum |a_i b_i|,
 * u = 2^-24. Also: the same row at an offset in memory gives the same bits (the lanes follow the
 * index, not the alignment). */
static void test_seq_dot(Rng *r) {
    enum { NMAX = 300 };
    float a[NMAX + 3], b[NMAX + 3];
    double worst = 0;
    static const int longs[] = {127, 128, 255, 300};
    for (int k = 0; k <= 80 + 4; k++) {
        int n = k <= 80 ? k : longs[k - 81];
        for (int i = 0; i < n + 3; i++) a[i] = rng_normal(r), b[i] = rng_normal(r);
        double exact = 0, mag = 0;
        for (int i = 0; i < n; i++) exact += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
        float got = kseq_dot(a, b, n);
        double bound = ((n + 15) / 16 + 5) * ldexp(1.0, -24) * mag;
        TH_CHECK(fabs(got - exact) <= bound, "kseq_dot n %d: %.9g vs %.9g (bound %.3g)", n, got, exact, bound);
        if (mag > 0 && fabs(got - exact) / mag > worst) worst = fabs(got - exact) / mag;
        float shifted[NMAX + 3], sb[NMAX + 3]; /* the same values one float further on */
        memcpy(shifted + 1, a, sizeof(float) * (size_t)n);
        memcpy(sb + 1, b, sizeof(float) * (size_t)n);
        float again = kseq_dot(shifted + 1, sb + 1, n);
        TH_CHECK(memcmp(&got, &again, sizeof got) == 0, "kseq_dot n %d depends on alignment", n);
        if (n == 0) TH_CHECK(got == 0.0f, "kseq_dot of nothing is %g", got);
    }
    printf("  kseq_dot: worst error %.2g x sum|ab| over n = 0..80, 127, 128, 255, 300\n", worst);
}

/* kseq_dot_fold in 8-float halves (the SSD step's readout of rows that are not whole vectors)
 * then kseq_dot_finish against kseq_dot, bit for bit, at row lengths 1..40 and 64, with signed
 * zeros and values of mixed magnitude. */
static void test_seq_dot_halves(Rng *r) {
    enum { NMAX = 64 };
    float a[NMAX], b[NMAX];
    int bad = 0;
    for (int n = 1; n <= 41; n++) {
        int len = n <= 40 ? n : NMAX;
        for (int i = 0; i < len; i++) {
            b[i] = rng_normal(r) * (i % 3 ? 1.0f : 1e3f);
            a[i] = (n % 5 == 0 && i % 2) ? -0.0f : rng_normal(r);
        }
        for (int halves = 0; halves < 2; halves++) {
            kseq_v8 w;
            kseq_dot_fold(&w, a, b, len, halves);
            float got = kseq_dot_finish(&w), want = kseq_dot(a, b, len);
            bad += memcmp(&got, &want, sizeof want) != 0;
        }
    }
    TH_CHECK(bad == 0, "kseq_dot_fold + kseq_dot_finish differ from kseq_dot in %d rows", bad);
}

/* kv_sum_rows (cpu/vecw.h: the steps' and norms' sums of KV_W rows at once) against its
 * row-by-row form bit for bit, and against a double sum: a row's KV_W lanes go through log2 KV_W
 * float additions, so the error is below log2(KV_W) u sum |x|, u = 2^-24. Rows of mixed magnitude,
 * and in every seventh group a row of -0. */
static void test_sum_rows(Rng *r) {
    int bad_bits = 0, bad_err = 0, levels = 0;
    double worst = 0;
    for (int w = KV_W; w > 1; w /= 2) levels++;
    for (int rep = 0; rep < 200; rep++) {
        float v[KV_W][KV_W];
        for (int j = 0; j < KV_W; j++)
            for (int l = 0; l < KV_W; l++)
                v[j][l] = rep % 7 == 0 && j == 3 ? -0.0f : rng_normal(r) * (l % 3 ? 1.0f : 1e4f);
        kv_f in[KV_W], in2[KV_W];
        for (int j = 0; j < KV_W; j++) memcpy(&in[j], v[j], sizeof in[j]), in2[j] = in[j];
        kv_f got = kv_sum_rows(in), want = kv_sum_rows_generic(in2);
        bad_bits += memcmp(&got, &want, sizeof got) != 0;
        for (int k = 0; k < KV_W; k++) { /* lane k: the row in slot kv_slot_row(k) */
            const float *row = v[kv_slot_row(k)];
            double exact = 0, mag = 0;
            for (int l = 0; l < KV_W; l++) exact += row[l], mag += fabs(row[l]);
            double err = fabs((double)got[k] - exact), bound = levels * mag * 0x1p-24 + 1e-300;
            if (err > bound) bad_err++;
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    }
    TH_CHECK(bad_bits == 0, "kv_sum_rows differs from kv_sum_rows_generic in %d of 200 groups", bad_bits);
    TH_CHECK(bad_err == 0, "kv_sum_rows: %d sums beyond the error bound", bad_err);
    printf("  kv_sum_rows (%d lanes): worst error %.2g x sum|x|\n", KV_W, worst);
}

/* ssd_step applied T times equals ssd_fwd (both the fast and the reference pair). */
static void test_ssd_step(int B, int T, int H, int P, int N, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d H%d P%d N%d", B, T, H, P, N);
    SsdIn s = ssd_in_new(B, T, H, P, N, r);
    size_t nx = sz_x(&s), nS = sz_S(&s), HP = (size_t)H * P;
    float *y = th_alloc(nx), *hT = th_alloc(nS), *ys = th_alloc(nx), *S = th_alloc(nS);
    float *xt = th_alloc((size_t)B * HP), *yt = th_alloc((size_t)B * HP);
    float *dtt = th_alloc((size_t)B * H);
    float *bt = th_alloc((size_t)B * N), *ct = th_alloc((size_t)B * N);
    for (int fast = 0; fast < 2; fast++) {
        ssd_run_fwd(fast ? k_ssd_fwd : k_ssd_fwd_ref, &s, 1, y, NULL, hT);
        memcpy(S, s.h0, nS * sizeof(float));
        for (int t = 0; t < T; t++) {
            for (int b = 0; b < B; b++) { /* gather token t of every sequence */
                size_t bt_ = (size_t)b * T + t;
                memcpy(xt + b * HP, s.x + bt_ * HP, HP * sizeof(float));
                memcpy(dtt + (size_t)b * H, s.dt + bt_ * H, (size_t)H * sizeof(float));
                memcpy(bt + (size_t)b * N, s.Bm + bt_ * N, (size_t)N * sizeof(float));
                memcpy(ct + (size_t)b * N, s.Cm + bt_ * N, (size_t)N * sizeof(float));
            }
            (fast ? k_ssd_step : k_ssd_step_ref)(yt, S, S, xt, dtt, s.A, bt, ct, s.D, B, H, P, N);
            for (int b = 0; b < B; b++)
                memcpy(ys + ((size_t)b * T + t) * HP, yt + b * HP, HP * sizeof(float));
        }
        close_arr(ys, y, nx, 1e-5, &max_err_step, fast ? "ssd step y (fast)" : "ssd step y (ref)",
                  shape);
        close_arr(S, hT, nS, 1e-5, &max_err_step, fast ? "ssd step S (fast)" : "ssd step S (ref)",
                  shape);
    }
    /* S_out == NULL must leave S_in untouched and still give y */
    float *S2 = th_alloc(nS);
    memcpy(S2, s.h0, nS * sizeof(float));
    float *yc = th_alloc((size_t)B * HP);
    k_ssd_step(yc, S, S2, xt, dtt, s.A, bt, ct, s.D, B, H, P, N); /* commits into S */
    k_ssd_step(yt, NULL, S2, xt, dtt, s.A, bt, ct, s.D, B, H, P, N);
    TH_CHECK(bits_equal(S2, s.h0, nS), "ssd_step with S_out=NULL modified S_in");
    TH_CHECK(bits_equal(yt, yc, (size_t)B * HP), "ssd_step y depends on S_out");
    free(yc);
    free(S2);
    free(y); free(hT); free(ys); free(S); free(xt); free(yt); free(dtt); free(bt); free(ct);
    ssd_in_free(&s);
}

/* ================================ RoPE ================================ */

static void test_rope(int B, int T, int NH, int HD, int pos0, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d NH%d HD%d pos0=%d", B, T, NH, HD, pos0);
    const float theta = 500000.0f;
    size_t n = (size_t)B * T * NH * HD;
    float *x = th_alloc(n), *y0 = th_alloc(n), *y1 = th_alloc(n), *w = th_alloc(n);
    float *g0 = th_alloc(n), *g1 = th_alloc(n);
    th_fill_normal(x, n, r, 1.0f);
    th_fill_normal(w, n, r, 1.0f);
    k_rope_fwd_ref(y0, x, B, T, NH, HD, pos0, theta);
    k_rope_fwd(y1, x, B, T, NH, HD, pos0, theta);
    close_arr(y1, y0, n, 1e-6, &max_err_fwd, "rope fwd", shape);
    /* in place (y aliases x) gives the same result */
    memcpy(g1, x, n * sizeof(float));
    k_rope_fwd(g1, g1, B, T, NH, HD, pos0, theta);
    TH_CHECK(bits_equal(g1, y1, n), "rope fwd in place differs [%s]", shape);
    /* backward: fast vs ref, accumulating onto 0.5 */
    for (size_t i = 0; i < n; i++) g0[i] = g1[i] = 0.5f;
    k_rope_bwd_ref(g0, w, B, T, NH, HD, pos0, theta);
    k_rope_bwd(g1, w, B, T, NH, HD, pos0, theta);
    close_arr(g1, g0, n, 1e-6, &max_err_bwd, "rope bwd", shape);
    /* dot-product test (RoPE is linear): <R x, w> == <x, R^T w> */
    memset(g0, 0, n * sizeof(float));
    k_rope_bwd_ref(g0, w, B, T, NH, HD, pos0, theta);
    double a = 0, b = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        a += (double)y0[i] * w[i];
        b += (double)x[i] * g0[i];
        scale += fabs((double)y0[i] * w[i]);
    }
    TH_CHECK(fabs(a - b) <= 1e-6 * scale, "rope dot test [%s]: %.9g vs %.9g", shape, a, b);
    /* inverse after rotation is the identity; a rotation keeps each pair's norm */
    memset(g1, 0, n * sizeof(float));
    k_rope_bwd(g1, y1, B, T, NH, HD, pos0, theta);
    close_arr(g1, x, n, 1e-6, &max_err_fwd, "rope inverse(rope(x)) = x", shape);
    free(x); free(y0); free(y1); free(w); free(g0); free(g1);
}

/* Rotating at position 0 is the identity; positions pos0 + t match a single token at that pos. */
static void test_rope_positions(Rng *r) {
    int T = 6, NH = 2, HD = 8;
    size_t n = (size_t)T * NH * HD, tok = (size_t)NH * HD;
    float *x = th_alloc(n), *y = th_alloc(n), *y1 = th_alloc(tok);
    th_fill_normal(x, n, r, 1.0f);
    k_rope_fwd(y, x, 1, 1, NH, HD, 0, 500000.0f);
    TH_CHECK(bits_equal(y, x, tok), "rope at position 0 is not the identity");
    k_rope_fwd(y, x, 1, T, NH, HD, 17, 500000.0f);
    for (int t = 0; t < T; t++) {
        k_rope_fwd(y1, x + t * tok, 1, 1, NH, HD, 17 + t, 500000.0f);
        TH_CHECK(bits_equal(y1, y + t * tok, tok), "rope token %d differs from pos0+t", t);
    }
    free(x); free(y); free(y1);
}

/* ============================== attention ============================== */

typedef struct {
    int B, T, NH, HD;
    float *q, *k, *v; /* (B,T,NH,HD) */
} AttnIn;

static AttnIn attn_in_new(int B, int T, int NH, int HD, Rng *r) {
    AttnIn a = {B, T, NH, HD, 0, 0, 0};
    size_t n = (size_t)B * T * NH * HD;
    a.q = th_alloc(n); a.k = th_alloc(n); a.v = th_alloc(n);
    th_fill_normal(a.q, n, r, 1.5f);
    th_fill_normal(a.k, n, r, 1.5f);
    th_fill_normal(a.v, n, r, 1.0f);
    return a;
}

static void attn_in_free(AttnIn *a) { free(a->q); free(a->k); free(a->v); }

static double attn_loss(const AttnIn *a, const float *w) {
    size_t n = (size_t)a->B * a->T * a->NH * a->HD;
    float *o = th_alloc(n);
    k_attn_fwd_ref(o, NULL, a->q, a->k, a->v, a->B, a->T, a->NH, a->HD);
    double L = 0;
    for (size_t i = 0; i < n; i++) L += (double)w[i] * o[i];
    free(o);
    return L;
}

static void test_attn_fd(int B, int T, int NH, int HD, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d NH%d HD%d", B, T, NH, HD);
    AttnIn a = attn_in_new(B, T, NH, HD, r);
    size_t n = (size_t)B * T * NH * HD;
    float *o = th_alloc(n), *lse = th_alloc((size_t)B * NH * T), *w = th_alloc(n);
    float *g[3] = {th_alloc(n), th_alloc(n), th_alloc(n)};
    th_fill_normal(w, n, r, 1.0f);
    k_attn_fwd_ref(o, lse, a.q, a.k, a.v, B, T, NH, HD);
    k_attn_bwd_ref(g[0], g[1], g[2], w, a.q, a.k, a.v, o, lse, B, T, NH, HD);
    float *ins[3] = {a.q, a.k, a.v};
    const char *names[3] = {"attn fd dq", "attn fd dk", "attn fd dv"};
    const float eps = 2e-3f;
    for (int j = 0; j < 3; j++) {
        float *fd = th_alloc(n);
        for (size_t i = 0; i < n; i++) {
            float keep = ins[j][i];
            ins[j][i] = keep + eps;
            double lp = attn_loss(&a, w);
            ins[j][i] = keep - eps;
            double lm = attn_loss(&a, w);
            ins[j][i] = keep;
            fd[i] = (float)((lp - lm) / (2.0 * (double)eps));
        }
        close_arr(g[j], fd, n, 5e-3, &max_err_fd, names[j], shape);
        free(fd);
    }
    /* dot-product test along a random direction in (q, k, v) */
    float *dir = th_alloc(3 * n), *keep = th_alloc(3 * n);
    th_fill_normal(dir, 3 * n, r, 1.0f);
    double jtw_v = 0, lpm[2];
    for (int j = 0; j < 3; j++) {
        memcpy(keep + j * n, ins[j], n * sizeof(float));
        for (size_t i = 0; i < n; i++) jtw_v += (double)g[j][i] * dir[j * n + i];
    }
    for (int sg = 0; sg < 2; sg++) {
        for (int j = 0; j < 3; j++)
            for (size_t i = 0; i < n; i++)
                ins[j][i] = keep[j * n + i] + (sg ? -eps : eps) * dir[j * n + i];
        lpm[sg] = attn_loss(&a, w);
    }
    for (int j = 0; j < 3; j++) memcpy(ins[j], keep + j * n, n * sizeof(float));
    double jv_w = (lpm[0] - lpm[1]) / (2.0 * (double)eps);
    double e = fabs(jv_w - jtw_v) / fmax(fabs(jtw_v), 1e-6);
    TH_CHECK(e < 2e-3, "attn dot-product test [%s]: %.8g vs %.8g rel %.3g", shape, jv_w, jtw_v, e);
    if (e > max_err_fd) max_err_fd = e;
    free(dir); free(keep); free(o); free(lse); free(w);
    for (int j = 0; j < 3; j++) free(g[j]);
    attn_in_free(&a);
}

static void test_attn_parity(int B, int T, int NH, int HD, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d NH%d HD%d", B, T, NH, HD);
    AttnIn a = attn_in_new(B, T, NH, HD, r);
    size_t n = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T;
    float *o0 = th_alloc(n), *o1 = th_alloc(n), *l0 = th_alloc(nl), *l1 = th_alloc(nl);
    float *dout = th_alloc(n);
    th_fill_normal(dout, n, r, 1.0f);
    k_attn_fwd_ref(o0, l0, a.q, a.k, a.v, B, T, NH, HD);
    k_attn_fwd(o1, l1, a.q, a.k, a.v, B, T, NH, HD);
    close_arr(o1, o0, n, 2e-5, &max_err_fwd, "attn fwd o", shape);
    close_arr(l1, l0, nl, 2e-5, &max_err_fwd, "attn fwd lse", shape);
    /* lse may be NULL: o unchanged */
    float *o2 = th_alloc(n);
    k_attn_fwd(o2, NULL, a.q, a.k, a.v, B, T, NH, HD);
    TH_CHECK(bits_equal(o2, o1, n), "attn fwd with lse=NULL differs [%s]", shape);
    float *gr[3] = {th_alloc(n), th_alloc(n), th_alloc(n)};
    float *gf[3] = {th_alloc(n), th_alloc(n), th_alloc(n)};
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < n; i++) gr[j][i] = gf[j][i] = -0.5f; /* accumulation */
    k_attn_bwd_ref(gr[0], gr[1], gr[2], dout, a.q, a.k, a.v, o0, l0, B, T, NH, HD);
    k_attn_bwd(gf[0], gf[1], gf[2], dout, a.q, a.k, a.v, o1, l1, B, T, NH, HD);
    const char *names[3] = {"attn bwd dq", "attn bwd dk", "attn bwd dv"};
    for (int j = 0; j < 3; j++) close_arr(gf[j], gr[j], n, 1e-4, &max_err_bwd, names[j], shape);
    /* NULL gradients are skipped, the others unchanged */
    memset(o2, 0, n * sizeof(float));
    k_attn_bwd(NULL, o2, NULL, dout, a.q, a.k, a.v, o1, l1, B, T, NH, HD);
    for (size_t i = 0; i < n; i++) o2[i] += -0.5f;
    close_arr(o2, gf[1], n, 1e-6, NULL, "attn bwd dk alone", shape);
    for (int j = 0; j < 3; j++) { free(gr[j]); free(gf[j]); }
    free(o0); free(o1); free(o2); free(l0); free(l1); free(dout);
    attn_in_free(&a);
}

/* attn_step with a cache of rows [0, t) and the new row t equals row t of the full forward. */
static void test_attn_step(int B, int T, int NH, int HD, Rng *r) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d NH%d HD%d", B, T, NH, HD);
    AttnIn a = attn_in_new(B, T, NH, HD, r);
    int Tmax = T + 3;
    size_t n = (size_t)B * T * NH * HD, tok = (size_t)NH * HD, nc = (size_t)B * NH * Tmax * HD;
    float *o = th_alloc(n), *kc = th_alloc(nc), *vc = th_alloc(nc);
    float *qt = th_alloc((size_t)B * tok), *kt = th_alloc((size_t)B * tok);
    float *vt = th_alloc((size_t)B * tok);
    float *ot = th_alloc((size_t)B * tok), *os = th_alloc(n), *os_ref = th_alloc(n);
    for (size_t i = 0; i < nc; i++) kc[i] = vc[i] = NAN; /* rows >= n_cached must not be read */
    k_attn_fwd_ref(o, NULL, a.q, a.k, a.v, B, T, NH, HD);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) {
            memcpy(qt + b * tok, a.q + ((size_t)b * T + t) * tok, tok * sizeof(float));
            memcpy(kt + b * tok, a.k + ((size_t)b * T + t) * tok, tok * sizeof(float));
            memcpy(vt + b * tok, a.v + ((size_t)b * T + t) * tok, tok * sizeof(float));
        }
        for (int fast = 0; fast < 2; fast++) {
            (fast ? k_attn_step : k_attn_step_ref)(ot, qt, kt, vt, kc, vc, t, Tmax, B, NH, HD);
            float *dst = fast ? os : os_ref;
            for (int b = 0; b < B; b++)
                memcpy(dst + ((size_t)b * T + t) * tok, ot + b * tok, tok * sizeof(float));
        }
        for (int b = 0; b < B; b++) /* commit row t to the cache: (B,NH,Tmax,HD) */
            for (int h = 0; h < NH; h++) {
                size_t ci = (((size_t)b * NH + h) * Tmax + t) * HD;
                memcpy(kc + ci, kt + b * tok + (size_t)h * HD, (size_t)HD * sizeof(float));
                memcpy(vc + ci, vt + b * tok + (size_t)h * HD, (size_t)HD * sizeof(float));
            }
    }
    close_arr(os_ref, o, n, 1e-6, &max_err_step, "attn step (ref) vs fwd", shape);
    close_arr(os, o, n, 1e-5, &max_err_step, "attn step (fast) vs fwd", shape);
    free(o); free(kc); free(vc); free(qt); free(kt); free(vt); free(ot); free(os); free(os_ref);
    attn_in_free(&a);
}

/* ============================== NaN propagation ============================== */

/* A NaN input must reach the output (the solver's divergence checks look for it), not be
 * clamped away by a fast exp or a max. */
static int any_nan(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}

static void test_nan_propagation(Rng *r) {
    SsdIn s = ssd_in_new(1, 70, 2, 3, 4, r);
    size_t nx = sz_x(&s);
    float *y = th_alloc(nx), *hT = th_alloc(sz_S(&s));
    s.x[5 * 2 * 3 + 1] = NAN; /* token 5, head 0 */
    ssd_run_fwd(k_ssd_fwd, &s, 1, y, NULL, hT);
    TH_CHECK(any_nan(y, nx) && any_nan(hT, sz_S(&s)), "ssd fwd: NaN in x did not propagate");
    free(y); free(hT);
    ssd_in_free(&s);
    AttnIn a = attn_in_new(1, 70, 2, 8, r);
    size_t n = (size_t)70 * 2 * 8;
    float *o = th_alloc(n), *lse = th_alloc(2 * 70);
    a.q[3 * 16 + 2] = NAN; /* query token 3, head 0 */
    k_attn_fwd(o, lse, a.q, a.k, a.v, 1, 70, 2, 8);
    TH_CHECK(isnan(o[3 * 16]) && isnan(lse[3]), "attn fwd: NaN in q did not reach its row");
    free(o); free(lse);
    attn_in_free(&a);
}

/* ============================ thread identity ============================ */

#ifdef _OPENMP
/* Outputs of every fast sequence kernel at one thread count, concatenated into out. */
static size_t run_all_fast(float *out, const SsdIn *s, const AttnIn *a) {
    size_t off = 0, nx = sz_x(s), nS = sz_S(s);
    size_t nsv = k_ssd_saved_floats(s->B, s->T, s->H, s->P, s->N);
    float *y = out + off; off += nx;
    float *sv = out + off; off += nsv;
    float *hT = out + off; off += nS;
    ssd_run_fwd(k_ssd_fwd, s, 1, y, sv, hT);
    SsdGrad g = {out + off, out + off + nx, out + off + nx + sz_dt(s),
                 out + off + nx + sz_dt(s) + s->H, out + off + nx + sz_dt(s) + s->H + sz_bc(s),
                 out + off + nx + sz_dt(s) + s->H + 2 * sz_bc(s),
                 out + off + nx + sz_dt(s) + 2 * s->H + 2 * sz_bc(s)};
    off += nx + sz_dt(s) + 2 * (size_t)s->H + 2 * sz_bc(s) + nS;
    ssd_run_bwd(k_ssd_bwd, s, 1, &g, s->x, s->h0, sv); /* any dy/dhT will do */
    /* step on the first token of each sequence: x is read as (B,H,P) from the first B*H*P floats */
    k_ssd_step(out + off, out + off + (size_t)s->B * s->H * s->P, s->h0, s->x, s->dt, s->A, s->Bm,
               s->Cm, s->D, s->B, s->H, s->P, s->N);
    off += (size_t)s->B * s->H * s->P + nS;
    size_t n = (size_t)a->B * a->T * a->NH * a->HD;
    float *o = out + off; off += n;
    float *lse = out + off; off += (size_t)a->B * a->NH * a->T;
    k_rope_fwd(o, a->q, a->B, a->T, a->NH, a->HD, 3, 500000.0f);
    k_rope_bwd(out + off, a->k, a->B, a->T, a->NH, a->HD, 3, 500000.0f); off += n;
    k_attn_fwd(o, lse, a->q, a->k, a->v, a->B, a->T, a->NH, a->HD);
    k_attn_bwd(out + off, out + off + n, out + off + 2 * n, a->v, a->q, a->k, a->v, o, lse, a->B,
               a->T, a->NH, a->HD);
    off += 3 * n;
    /* attn_step with the first T-1 tokens of each (b, head) read as a cache with Tmax = T */
    k_attn_step(out + off, a->q, a->k, a->v, a->k, a->v, a->T - 1, a->T, a->B, a->NH, a->HD);
    off += (size_t)a->B * a->NH * a->HD;
    return off;
}

/* All fast sequence kernels at 1 (or the base count) and 3 threads, every call forked. */
static void test_threads_at(int P, int N, int HD, Rng *r) {
    SsdIn s = ssd_in_new(3, 130, 3, P, N, r);
    AttnIn a = attn_in_new(2, 70, 3, HD, r);
    size_t cap = 8 * (sz_x(&s) + sz_S(&s) + k_ssd_saved_floats(3, 130, 3, P, N)) +
                 8 * (size_t)2 * 70 * 3 * HD;
    float *o1 = th_alloc(cap), *o3 = th_alloc(cap);
    int keep = k_get_threads();
    th_bitid_threads(th_thread_base());
    size_t n1 = run_all_fast(o1, &s, &a);
    th_bitid_threads(3);
    size_t n3 = run_all_fast(o3, &s, &a);
    th_threads_restore(keep);
    TH_CHECK(n1 == n3 && n1 <= cap, "thread test sizes %zu %zu cap %zu", n1, n3, cap);
    TH_CHECK(bits_equal(o1, o3, n1), "fast sequence kernels (P %d N %d HD %d) differ between %d and 3 threads",
             P, N, HD, th_thread_base());
    free(o1); free(o3);
    ssd_in_free(&s);
    attn_in_free(&a);
}

static void test_threads(Rng *r) {
    test_threads_at(5, 9, 8, r);    /* rows that are not whole vectors (with AVX-512) */
    test_threads_at(16, 16, 32, r); /* whole-vector rows: the steps' summed readouts */
}
#endif

int main(void) {
    th_name = "test_seq_kernels";
    Rng r;
    rng_seed(&r, 1234, 7);
    TH_CHECK(k_ssd_saved_floats(2, 130, 3, 5, 7) == (size_t)2 * 3 * 3 * 5 * 7, "saved floats");
    TH_CHECK(k_ssd_saved_floats(2, 64, 3, 5, 7) == (size_t)2 * 3 * 1 * 5 * 7, "saved floats");

    test_ssd_fd(2, 5, 2, 3, 4, &r);
    test_ssd_fd(1, 70, 1, 2, 3, &r); /* crosses a chunk boundary */
    static const int shapes[][5] = {{1, 1, 1, 1, 1}, {2, 7, 3, 5, 3}, {2, 64, 2, 4, 7},
                                    {1, 100, 2, 3, 5}, {2, 130, 3, 5, 9}, {1, 129, 1, 16, 16},
                                    {1, 65, 2, 17, 33}, {1, 70, 1, 9, 80}, {1, 66, 2, 72, 5},
                                    /* the scan's other state shapes where the vectors are 8 or
                                     * 4 floats wide (AVX2, SSE; chunked with AVX-512) */
                                    {2, 70, 2, 8, 16}, {1, 66, 3, 16, 8}, {1, 40, 1, 8, 32}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *d = shapes[i];
        for (int m = 0; m < 4; m++) /* h0 and hT present or not */
            test_ssd_parity(d[0], d[1], d[2], d[3], d[4], m & 1, m >> 1, &r);
    }
    test_ssd_subsets(&r);
    test_ssd_groups(&r);
    test_ssd_paths(&r);
    test_ssd_step(2, 7, 3, 5, 3, &r);
    test_ssd_step(2, 100, 2, 4, 7, &r);
    test_ssd_step(2, 20, 2, 16, 16, &r); /* whole 16-lane rows: the generation shape */
    test_ssd_step(1, 9, 3, 8, 37, &r);   /* two whole rows and a tail */
    /* N a multiple of the vector width (8 or 16 lanes, 4 with SSE): the rows summed together */
    test_ssd_step(3, 9, 2, 20, 16, &r);  /* a partial group of rows */
    test_ssd_step(2, 9, 2, 3, 32, &r);   /* fewer rows than lanes, two vectors per row */
    test_ssd_step(1, 9, 2, 24, 48, &r);  /* three vectors per row */
    test_ssd_step(2, 9, 2, 16, 8, &r);
    test_seq_dot(&r);
    test_seq_dot_halves(&r);
    test_sum_rows(&r);

    test_rope(2, 5, 3, 8, 0, &r);
    test_rope(1, 7, 2, 6, 1000, &r);
    test_rope(2, 33, 2, 64, 123456, &r);
    test_rope_positions(&r);

    test_attn_fd(1, 5, 2, 4, &r);
    test_attn_fd(2, 3, 1, 6, &r);
    static const int ashapes[][4] = {{1, 1, 1, 2}, {2, 7, 3, 8}, {1, 64, 2, 16}, {2, 100, 2, 10},
                                     {1, 130, 1, 32}};
    for (size_t i = 0; i < sizeof ashapes / sizeof ashapes[0]; i++)
        test_attn_parity(ashapes[i][0], ashapes[i][1], ashapes[i][2], ashapes[i][3], &r);
    test_attn_step(2, 9, 2, 8, &r);
    test_attn_step(1, 40, 3, 16, &r);
    /* head widths of whole vectors (4, 8 or 16 lanes): keys in groups, the last one partial */
    test_attn_step(2, 37, 2, 32, &r);
    test_attn_step(1, 35, 2, 64, &r);
    test_attn_step(1, 21, 1, 128, &r);
    test_attn_step(1, 19, 2, 12, &r);
    test_nan_propagation(&r);
#ifdef _OPENMP
    test_threads(&r);
#else
    printf("skip: thread bit-identity (built without OpenMP)\n");
#endif
    printf("max rel err: fwd %.3g  bwd %.3g  fd/dot %.3g  step %.3g\n", max_err_fwd, max_err_bwd,
           max_err_fd, max_err_step);
    return th_done();
}
