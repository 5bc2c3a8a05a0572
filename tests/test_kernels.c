/* test_kernels.c: the dense kernels of kernels.h (GEMM, Linear, weight norm, RMSNorm, gated
 * RMSNorm, softmax, cross-entropy, SiLU/SwiGLU, embedding, conv1d, LSTM cell, AdamW, sumsq,
 * axpby). STYLE §8.11 items 1-3.
 *
 * For every kernel: fast k_<name> against k_<name>_ref on random inputs and several shapes,
 * including sizes that are not multiples of any block (1, 3, 17, 65, K across the GEMM's KC).
 * Backward kernels: accumulation (+=) onto existing values, NULL gradients skipped, and the
 * fast gradient checked by 4-point central finite differences per element and along a random
 * direction (<J v, w> = <v, J^T w> with J v by differences; exact for the linear maps Linear,
 * conv1d and embedding). Plus conv1d_step over T tokens vs conv1d_fwd, an AdamW step against
 * a hand computation, and (with OpenMP) bit-identity of every fast kernel at 1 (2 with BLAS) and 4 threads.
 * Out of scope: SSD/RoPE/attention (test_seq_kernels.c). Max errors are printed at the end.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/kernels.h"
#include "th.h"

static Rng rng;

/* ---- helpers --------------------------------------------------------------------------------- */

/* Largest error seen per kernel and kind, printed at the end (informational). */
enum { E_PAR, E_FD, E_DIR, E_NKIND };
static struct { const char *name; double e[E_NKIND]; } worst[40];
static int n_worst;

static void track(const char *kernel, int kind, double e) {
    int i = 0;
    while (i < n_worst && strcmp(worst[i].name, kernel) != 0) i++;
    if (i == n_worst) worst[n_worst++].name = kernel;
    if (!(e <= worst[i].e[kind])) worst[i].e[kind] = e; /* NaN sticks */
}

/* a ~ b (relative to max |b|); records the error under `kernel`. */
static void close_(const char *kernel, const char *what, const float *a, const float *b, size_t n,
                   double tol) {
    double e = th_rel_err(a, b, n);
    track(kernel, E_PAR, e);
    TH_CHECK(e <= tol, "%s %s: rel err %.3g > %.3g", kernel, what, e, tol);
}

static float *rnd(size_t n, float scale) {
    float *p = th_alloc(n);
    th_fill_normal(p, n, &rng, scale);
    return p;
}

static float *dup(const float *x, size_t n) {
    float *p = th_alloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---- gradient checks ------------------------------------------------------------------------- */

/* A scalar loss evaluated from the current contents of the inputs (reference forward). */
typedef double (*LossFn)(void *ctx);

/* 4-point central difference of f along direction v at param (param is restored exactly). */
static double fd_dir(LossFn f, void *ctx, float *param, const float *v, size_t n, float h) {
    float *x0 = dup(param, n);
    double L[4];
    const float steps[4] = {h, -h, 2 * h, -2 * h};
    for (int s = 0; s < 4; s++) {
        for (size_t i = 0; i < n; i++) param[i] = x0[i] + steps[s] * v[i];
        L[s] = f(ctx);
    }
    memcpy(param, x0, n * sizeof(float));
    free(x0);
    return (8.0 * (L[0] - L[1]) - (L[2] - L[3])) / (12.0 * h);
}

/* Checks grad = dL/dparam: per element (up to 40 entries spread over the array) and along a
 * random direction v, <v, grad> vs the directional difference. Tolerances are relative to
 * max |grad| and to sum |v_i grad_i| respectively, floored at 1e-2 (all test gradients are
 * O(0.1..10), so that only matters where the true gradient is 0, e.g. weight norm with C = 1). */
static void grad_check(const char *kernel, const char *what, LossFn f, void *ctx, float *param,
                       size_t n, const float *grad, float h, double tol) {
    double gmax = 1e-2, err = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(grad[i]));
    size_t stride = n > 40 ? n / 40 : 1;
    float *e = th_alloc(n);
    for (size_t i = 0; i < n; i += stride) {
        memset(e, 0, n * sizeof(float));
        e[i] = 1.0f;
        double d = fabs(fd_dir(f, ctx, param, e, n, h) - grad[i]) / gmax;
        if (!(d <= err)) err = d;
    }
    track(kernel, E_FD, err);
    TH_CHECK(err <= tol, "%s FD %s: rel err %.3g > %.3g", kernel, what, err, tol);
    float *v = rnd(n, 1.0f);
    double an = dotd(v, grad, n), scale = 1e-2;
    for (size_t i = 0; i < n; i++) scale += fabs((double)v[i] * grad[i]);
    double d = fabs(fd_dir(f, ctx, param, v, n, h) - an) / scale;
    track(kernel, E_DIR, d);
    TH_CHECK(d <= tol, "%s <Jv,w> vs <v,J^T w> %s: rel err %.3g > %.3g", kernel, what, d, tol);
    free(e);
    free(v);
}

/* Exact adjoint test for a map linear in one input: <f(v), w> = <v, f^T(w)>. */
static void dot_test(const char *kernel, const char *what, double fwd_dot, double adj_dot) {
    double d = fabs(fwd_dot - adj_dot) / fmax(fabs(fwd_dot), 1e-12);
    track(kernel, E_DIR, d);
    TH_CHECK(d <= 1e-4, "%s dot test %s: <f(v),w> %.9g vs <v,f^T w> %.9g", kernel, what, fwd_dot,
             adj_dot);
}

/* grad buffers start at random values so that += is exercised; this returns the increment. */
static float *increment(const float *after, const float *before, size_t n) {
    float *d = th_alloc(n);
    for (size_t i = 0; i < n; i++) d[i] = after[i] - before[i];
    return d;
}


/* ---- GEMM and Linear ------------------------------------------------------------------------- */

typedef void (*GemmFn)(int, int, int, int, int, float, const float *, int, const float *, int, float,
                       float *, int);

/* One GEMM case through `fn` vs the reference, with padded strides (lda > K etc.), NaNs in C
 * when beta = 0 (must be ignored) and a sentinel in C's padding (must stay untouched). */
static void gemm_case(const char *kernel, GemmFn fn, int ta, int tb, int M, int N, int K, float alpha,
                      float beta) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = rnd(na, 1.0f), *B = rnd(nb, 1.0f), *C = rnd(nc, 1.0f);
    for (int i = 0; i < M; i++) {
        if (beta == 0.0f)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = NAN;
        C[(size_t)i * ldc + N] = 12345.0f; /* padding column */
    }
    float *Cr = dup(C, nc);
    fn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    k_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc);
    char what[96];
    snprintf(what, sizeof what, "tA=%d tB=%d M=%d N=%d K=%d alpha=%g beta=%g", ta, tb, M, N, K,
             alpha, beta);
    close_(kernel, what, C, Cr, nc, 1e-5);
    int pad_ok = 1;
    for (int i = 0; i < M; i++) pad_ok &= C[(size_t)i * ldc + N] == 12345.0f;
    TH_CHECK(pad_ok, "%s %s: wrote outside the N columns of C", kernel, what);
    free(A), free(B), free(C), free(Cr);
}

static void test_gemm(void) {
    /* M, N, K: ones, odd sizes, K across KC = 256, M across the 12-row tiles, GEMV-like, K = 0 */
    static const int shapes[][3] = {{1, 1, 1},    {3, 17, 5},    {17, 3, 65},  {65, 65, 65},
                                    {13, 100, 300}, {130, 70, 513}, {1, 257, 33}, {200, 1, 40},
                                    {5, 7, 0}};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.7f, 0.5f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int k = 0; k < 3; k++) {
                    const int *d = shapes[s];
                    gemm_case("gemm", k_gemm, ta, tb, d[0], d[1], d[2], ab[k][0], ab[k][1]);
                    gemm_case("gemm_blocked", k_gemm_blocked, ta, tb, d[0], d[1], d[2], ab[k][0],
                              ab[k][1]);
                }
    /* M = 0 or N = 0: nothing is touched */
    float c = 7.0f;
    k_gemm(0, 0, 0, 1, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, &c, 1);
    k_gemm_blocked(0, 0, 1, 0, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, &c, 1);
    TH_CHECK(c == 7.0f, "gemm with M = 0 or N = 0 wrote C");
}

/* Linear: y = x W^T + b; the loss <wy, y> for the finite-difference checks. */
typedef struct { float *x, *W, *b, *wy, *y; int M, C, OC; } LinCtx;
static double lin_loss(void *p) {
    LinCtx *c = p;
    k_linear_fwd_ref(c->y, c->x, c->W, c->b, c->M, c->C, c->OC);
    return dotd(c->wy, c->y, (size_t)c->M * c->OC);
}

static void test_linear_case(int M, int C, int OC) {
    size_t nx = (size_t)M * C, nw = (size_t)OC * C, ny = (size_t)M * OC;
    LinCtx c = {rnd(nx, 1), rnd(nw, 0.5f), rnd(OC, 1), rnd(ny, 1), th_alloc(ny), M, C, OC};
    float *y = th_alloc(ny), *yr = th_alloc(ny);
    char what[64];
    snprintf(what, sizeof what, "M=%d C=%d OC=%d", M, C, OC);
    for (int hb = 0; hb < 2; hb++) {
        k_linear_fwd(y, c.x, c.W, hb ? c.b : NULL, M, C, OC);
        k_linear_fwd_ref(yr, c.x, c.W, hb ? c.b : NULL, M, C, OC);
        close_("linear_fwd", what, y, yr, ny, 1e-5);
    }
    /* backward from random starting gradients (+=), fast vs reference */
    float *dx0 = rnd(nx, 1), *dW0 = rnd(nw, 1), *db0 = rnd(OC, 1);
    float *dx = dup(dx0, nx), *dW = dup(dW0, nw), *db = dup(db0, OC);
    float *dxr = dup(dx0, nx), *dWr = dup(dW0, nw), *dbr = dup(db0, OC);
    k_linear_bwd(dx, dW, db, c.wy, c.x, c.W, M, C, OC);
    k_linear_bwd_ref(dxr, dWr, dbr, c.wy, c.x, c.W, M, C, OC);
    close_("linear_bwd", "dx", dx, dxr, nx, 1e-5);
    close_("linear_bwd", "dW", dW, dWr, nw, 1e-5);
    close_("linear_bwd", "db", db, dbr, OC, 1e-5);
    /* NULL gradients are skipped, the others unchanged by the omission */
    float *dW2 = dup(dW0, nw);
    k_linear_bwd(NULL, dW2, NULL, c.wy, c.x, c.W, M, C, OC);
    close_("linear_bwd", "dW alone", dW2, dW, nw, 1e-6);
    k_linear_bwd(NULL, NULL, NULL, c.wy, c.x, c.W, M, C, OC);
    float *gx = increment(dx, dx0, nx), *gW = increment(dW, dW0, nw), *gb = increment(db, db0, OC);
    if (ny * C < 100000) { /* finite differences on the small shapes only (time) */
        grad_check("linear_bwd", what, lin_loss, &c, c.x, nx, gx, 1e-2f, 1e-3);
        grad_check("linear_bwd", what, lin_loss, &c, c.W, nw, gW, 1e-2f, 1e-3);
        grad_check("linear_bwd", what, lin_loss, &c, c.b, OC, gb, 1e-2f, 1e-3);
    }
    /* exact adjoint test in x: <linear(v), wy> = <v, dx(wy)> */
    float *v = rnd(nx, 1), *yv = th_alloc(ny);
    k_linear_fwd(yv, v, c.W, NULL, M, C, OC);
    dot_test("linear_bwd", what, dotd(yv, c.wy, ny), dotd(v, gx, nx));
    free(v), free(yv), free(gx), free(gW), free(gb), free(dW2);
    free(dx0), free(dW0), free(db0), free(dx), free(dW), free(db), free(dxr), free(dWr), free(dbr);
    free(c.x), free(c.W), free(c.b), free(c.wy), free(c.y), free(y), free(yr);
}

static void test_linear(void) {
    test_linear_case(1, 1, 1);
    test_linear_case(5, 17, 3);
    test_linear_case(65, 33, 17);
    test_linear_case(40, 300, 70);
}

/* ---- weight normalisation -------------------------------------------------------------------- */

typedef struct { float *g, *v, *wW, *W; int R, C; float target, clip; } WnCtx;
static double wn_loss(void *p) {
    WnCtx *c = p;
    k_weightnorm_fwd_ref(c->W, c->g, c->v, c->R, c->C, c->target, c->clip);
    return dotd(c->wW, c->W, (size_t)c->R * c->C);
}

/* mode 0: learned g;  1: g = NULL (s = target);  2: clip, some rows clipped, some not */
static void test_weightnorm_case(int R, int C, int mode) {
    size_t n = (size_t)R * C;
    WnCtx c = {rnd(R, 1), rnd(n, 1), rnd(n, 1), th_alloc(n), R, C, 1.5f, mode == 2 ? 0.8f : 0.0f};
    float *g_mem = c.g;
    for (int i = 0; i < R; i++) { /* |g| well away from the clip kink: ratio ~ 0.3 or ~ 3 */
        float nv = sqrtf((float)dotd(c.v + (size_t)i * C, c.v + (size_t)i * C, C));
        c.g[i] = (i % 2 ? 3.0f : 0.3f) * 0.8f * nv;
    }
    float *gp = mode == 1 ? NULL : c.g;
    char what[64];
    snprintf(what, sizeof what, "R=%d C=%d mode=%d", R, C, mode);
    float *W = th_alloc(n), *Wr = th_alloc(n);
    k_weightnorm_fwd(W, gp, c.v, R, C, c.target, c.clip);
    k_weightnorm_fwd_ref(Wr, gp, c.v, R, C, c.target, c.clip);
    close_("weightnorm_fwd", what, W, Wr, n, 1e-6);
    float *dg0 = rnd(R, 1), *dv0 = rnd(n, 1);
    float *dg = dup(dg0, R), *dv = dup(dv0, n), *dgr = dup(dg0, R), *dvr = dup(dv0, n);
    k_weightnorm_bwd(dg, dv, c.wW, gp, c.v, R, C, c.target, c.clip);
    k_weightnorm_bwd_ref(dgr, dvr, c.wW, gp, c.v, R, C, c.target, c.clip);
    close_("weightnorm_bwd", "dg", dg, dgr, R, 1e-5);
    close_("weightnorm_bwd", "dv", dv, dvr, n, 1e-5);
    float *dv2 = dup(dv0, n);
    k_weightnorm_bwd(NULL, dv2, c.wW, gp, c.v, R, C, c.target, c.clip);
    close_("weightnorm_bwd", "dv alone", dv2, dv, n, 1e-6);
    float *gg = increment(dg, dg0, R), *gv = increment(dv, dv0, n);
    c.g = gp; /* the loss sees the same g (or NULL) */
    if (gp) grad_check("weightnorm_bwd", what, wn_loss, &c, gp, R, gg, 1e-2f, 2e-3);
    grad_check("weightnorm_bwd", what, wn_loss, &c, c.v, n, gv, 1e-2f, 2e-3);
    free(gg), free(gv), free(dv2), free(dg0), free(dv0), free(dg), free(dv), free(dgr), free(dvr);
    free(W), free(Wr), free(c.v), free(c.wW), free(c.W), free(g_mem);
}

static void test_weightnorm(void) {
    static const int shapes[][2] = {{1, 1}, {3, 17}, {17, 65}, {4, 300}};
    for (int s = 0; s < 4; s++)
        for (int mode = 0; mode < 3; mode++) test_weightnorm_case(shapes[s][0], shapes[s][1], mode);
    /* g = ||v_i|| gives W = v; a zero row gives W = 0 and no gradient */
    int R = 5, C = 33;
    float *v = rnd((size_t)R * C, 1), *g = th_alloc(R), *W = th_alloc((size_t)R * C);
    for (int c = 0; c < C; c++) v[3 * C + c] = 0.0f;
    for (int i = 0; i < R; i++) g[i] = sqrtf((float)dotd(v + (size_t)i * C, v + (size_t)i * C, C));
    k_weightnorm_fwd(W, g, v, R, C, 1.0f, 0.0f);
    close_("weightnorm_fwd", "g = ||v||", W, v, (size_t)R * C, 1e-6);
    float *dW = rnd((size_t)R * C, 1), *dg = th_alloc(R), *dv = th_alloc((size_t)R * C);
    k_weightnorm_bwd(dg, dv, dW, g, v, R, C, 1.0f, 0.0f);
    int zero_ok = dg[3] == 0.0f;
    for (int c = 0; c < C; c++) zero_ok &= dv[3 * C + c] == 0.0f;
    TH_CHECK(zero_ok, "weightnorm_bwd: a zero row v_i must get no gradient");
    free(v), free(g), free(W), free(dW), free(dg), free(dv);
}

/* ---- RMSNorm and gated RMSNorm --------------------------------------------------------------- */

typedef struct { float *x, *z, *w, *wy, *y; int M, C; } NormCtx;
static double rms_loss(void *p) {
    NormCtx *c = p;
    if (c->z)
        k_gated_rmsnorm_fwd_ref(c->y, NULL, c->x, c->z, c->w, c->M, c->C, 1e-5f);
    else
        k_rmsnorm_fwd_ref(c->y, NULL, c->x, c->w, c->M, c->C, 1e-5f);
    return dotd(c->wy, c->y, (size_t)c->M * c->C);
}

static void test_norm_case(int M, int C, int gated) {
    const char *kf = gated ? "gated_rmsnorm_fwd" : "rmsnorm_fwd";
    const char *kb = gated ? "gated_rmsnorm_bwd" : "rmsnorm_bwd";
    size_t n = (size_t)M * C;
    NormCtx c = {rnd(n, 1), gated ? rnd(n, 1.5f) : NULL, rnd(C, 1), rnd(n, 1), th_alloc(n), M, C};
    for (int j = 0; j < C; j++) c.w[j] += 1.0f;
    char what[48];
    snprintf(what, sizeof what, "M=%d C=%d", M, C);
    float *y = th_alloc(n), *yr = th_alloc(n), *rs = th_alloc(M), *rsr = th_alloc(M);
    if (gated) {
        k_gated_rmsnorm_fwd(y, rs, c.x, c.z, c.w, M, C, 1e-5f);
        k_gated_rmsnorm_fwd_ref(yr, rsr, c.x, c.z, c.w, M, C, 1e-5f);
    } else {
        k_rmsnorm_fwd(y, rs, c.x, c.w, M, C, 1e-5f);
        k_rmsnorm_fwd_ref(yr, rsr, c.x, c.w, M, C, 1e-5f);
        float *xa = dup(c.x, n); /* y aliasing x, and rstd = NULL */
        k_rmsnorm_fwd(xa, NULL, xa, c.w, M, C, 1e-5f);
        close_(kf, "in place", xa, yr, n, 1e-5);
        free(xa);
    }
    close_(kf, what, y, yr, n, 1e-5);
    close_(kf, "rstd", rs, rsr, M, 1e-5);
    /* backward: three gradients, from random starting values */
    float *dx0 = rnd(n, 1), *dz0 = rnd(n, 1), *dw0 = rnd(C, 1);
    float *dx = dup(dx0, n), *dz = dup(dz0, n), *dw = dup(dw0, C);
    float *dxr = dup(dx0, n), *dzr = dup(dz0, n), *dwr = dup(dw0, C);
    float *dx2 = dup(dx0, n), *dw2 = dup(dw0, C);
    if (gated) {
        k_gated_rmsnorm_bwd(dx, dz, dw, c.wy, c.x, c.z, c.w, rs, M, C);
        k_gated_rmsnorm_bwd_ref(dxr, dzr, dwr, c.wy, c.x, c.z, c.w, rsr, M, C);
        k_gated_rmsnorm_bwd(dx2, NULL, NULL, c.wy, c.x, c.z, c.w, rs, M, C);
        k_gated_rmsnorm_bwd(NULL, NULL, dw2, c.wy, c.x, c.z, c.w, rs, M, C);
        close_(kb, "dz", dz, dzr, n, 2e-5);
    } else {
        k_rmsnorm_bwd(dx, dw, c.wy, c.x, c.w, rs, M, C);
        k_rmsnorm_bwd_ref(dxr, dwr, c.wy, c.x, c.w, rsr, M, C);
        k_rmsnorm_bwd(dx2, NULL, c.wy, c.x, c.w, rs, M, C);
        k_rmsnorm_bwd(NULL, dw2, c.wy, c.x, c.w, rs, M, C);
    }
    close_(kb, "dx", dx, dxr, n, 2e-5);
    close_(kb, "dw", dw, dwr, C, 2e-5);
    close_(kb, "dx alone", dx2, dx, n, 1e-6);
    close_(kb, "dw alone", dw2, dw, C, 1e-6);
    if (n <= 2000 && C >= 3) { /* C = 1: y = sign(v) w, a kink of width sqrt(eps) */
        float *gx = increment(dx, dx0, n), *gw = increment(dw, dw0, C);
        grad_check(kb, what, rms_loss, &c, c.x, n, gx, 1e-2f, 5e-3);
        grad_check(kb, what, rms_loss, &c, c.w, C, gw, 1e-2f, 5e-3);
        if (gated) {
            float *gz = increment(dz, dz0, n);
            grad_check(kb, what, rms_loss, &c, c.z, n, gz, 1e-2f, 5e-3);
            free(gz);
        }
        free(gx), free(gw);
    }
    free(dx0), free(dz0), free(dw0), free(dx), free(dz), free(dw), free(dxr), free(dzr), free(dwr);
    free(dx2), free(dw2), free(y), free(yr), free(rs), free(rsr);
    free(c.x), free(c.z), free(c.w), free(c.wy), free(c.y);
}

static void test_norms(void) {
    /* rows of whole vectors (C a multiple of 16, 8 or 4) go in groups of a vector's width: full
     * and partial groups */
    static const int shapes[][2] = {{1, 1}, {3, 17}, {9, 65}, {7, 300}, {2, 1000},
                                    {37, 64}, {19, 128}, {5, 32}, {16, 48}, {33, 16}, {3, 256}};
    for (int s = 0; s < 11; s++)
        for (int gated = 0; gated < 2; gated++) test_norm_case(shapes[s][0], shapes[s][1], gated);
    /* RMSNorm(0) = 0 exactly (the implicit model starts from z = 0) */
    float x[8] = {0}, w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    k_rmsnorm_fwd(y, NULL, x, w, 1, 8, 1e-5f);
    int zero = 1;
    for (int i = 0; i < 8; i++) zero &= y[i] == 0.0f;
    TH_CHECK(zero, "rmsnorm_fwd(0) != 0");
}

/* ---- LayerNorm --------------------------------------------------------------------------------- */

typedef struct { float *x, *w, *b, *wy, *y; int M, C; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    k_layernorm_fwd_ref(c->y, NULL, NULL, c->x, c->w, c->b, c->M, c->C, 1e-5f);
    return dotd(c->wy, c->y, (size_t)c->M * c->C);
}

/* fast vs reference forward and backward, each gradient alone, and finite differences (x, w, b). */
static void test_layernorm_case(int M, int C) {
    size_t n = (size_t)M * C;
    LnCtx c = {rnd(n, 1), rnd(C, 1), rnd(C, 1), rnd(n, 1), th_alloc(n), M, C};
    for (int j = 0; j < C; j++) c.w[j] += 1.0f;
    char what[48];
    snprintf(what, sizeof what, "M=%d C=%d", M, C);
    float *y = th_alloc(n), *yr = th_alloc(n), *st = th_alloc(2 * (size_t)M), *str = th_alloc(2 * (size_t)M);
    k_layernorm_fwd(y, st, st + M, c.x, c.w, c.b, M, C, 1e-5f);
    k_layernorm_fwd_ref(yr, str, str + M, c.x, c.w, c.b, M, C, 1e-5f);
    close_("layernorm_fwd", what, y, yr, n, 1e-5);
    close_("layernorm_fwd", "mean, rstd", st, str, 2 * (size_t)M, 1e-5);
    float *y2 = th_alloc(n);
    k_layernorm_fwd(y2, NULL, NULL, c.x, c.w, c.b, M, C, 1e-5f);
    TH_CHECK(memcmp(y, y2, n * sizeof(float)) == 0, "layernorm_fwd %s: output depends on mean/rstd being wanted", what);
    float *dx0 = rnd(n, 1), *dw0 = rnd(C, 1), *db0 = rnd(C, 1);
    float *dx = dup(dx0, n), *dw = dup(dw0, C), *db = dup(db0, C);
    float *dxr = dup(dx0, n), *dwr = dup(dw0, C), *dbr = dup(db0, C);
    float *dx2 = dup(dx0, n), *dw2 = dup(dw0, C), *db2 = dup(db0, C);
    k_layernorm_bwd(dx, dw, db, c.wy, c.x, c.w, st, st + M, M, C);
    k_layernorm_bwd_ref(dxr, dwr, dbr, c.wy, c.x, c.w, str, str + M, M, C);
    k_layernorm_bwd(dx2, NULL, NULL, c.wy, c.x, c.w, st, st + M, M, C);
    k_layernorm_bwd(NULL, dw2, NULL, c.wy, c.x, c.w, st, st + M, M, C);
    k_layernorm_bwd(NULL, NULL, db2, c.wy, c.x, c.w, st, st + M, M, C);
    close_("layernorm_bwd", "dx", dx, dxr, n, 2e-5);
    close_("layernorm_bwd", "dw", dw, dwr, C, 2e-5);
    close_("layernorm_bwd", "db", db, dbr, C, 2e-5);
    close_("layernorm_bwd", "dx alone", dx2, dx, n, 1e-6);
    close_("layernorm_bwd", "dw alone", dw2, dw, C, 1e-6);
    close_("layernorm_bwd", "db alone", db2, db, C, 1e-6);
    if (n <= 2000 && C >= 3) { /* C <= 2: y is (nearly) constant in x */
        float *gx = increment(dx, dx0, n), *gw = increment(dw, dw0, C), *gb = increment(db, db0, C);
        grad_check("layernorm_bwd", what, ln_loss, &c, c.x, n, gx, 1e-2f, 5e-3);
        grad_check("layernorm_bwd", "w", ln_loss, &c, c.w, C, gw, 1e-2f, 5e-3);
        grad_check("layernorm_bwd", "b", ln_loss, &c, c.b, C, gb, 1e-2f, 5e-3);
        free(gx), free(gw), free(gb);
    }
    free(c.x), free(c.w), free(c.b), free(c.wy), free(c.y), free(y), free(yr), free(y2), free(st), free(str);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db), free(dxr), free(dwr), free(dbr);
    free(dx2), free(dw2), free(db2);
}

static void test_layernorm(void) {
    /* with rows of whole vectors up to 128 columns, full and partial groups of rows */
    static const int shapes[][2] = {{1, 1}, {2, 3}, {3, 17}, {7, 65}, {9, 300}, {2, 1000},
                                    {37, 64}, {19, 128}, {5, 32}, {33, 16}, {3, 256}};
    for (int s = 0; s < 11; s++) test_layernorm_case(shapes[s][0], shapes[s][1]);
}

/* ---- k_foreach -------------------------------------------------------------------------------- */

/* Each call records its range: hits counts the visits of every index, starts the ranges that
 * begin there (disjoint per call, so threads never write the same int). */
typedef struct { int *hits, *starts; } ForeachCtx;
static void foreach_mark(void *p, long i0, long i1) {
    ForeachCtx *c = p;
    c->starts[i0]++;
    for (long i = i0; i < i1; i++) c->hits[i]++;
}

static void test_foreach(void) {
    static const long sizes[] = {1, 2, 3, 7, 1000, 100003};
    int keep = k_get_threads();
    for (int si = 0; si < 6; si++)
        for (int t = 1; t <= 4; t++)
            for (int forced = 0; forced < 2; forced++)
                for (int ref = 0; ref < 2; ref++) {
                    long n = sizes[si];
                    ForeachCtx c = {calloc((size_t)n, sizeof(int)), calloc((size_t)n, sizeof(int))};
                    if (forced) th_bitid_threads(t);
                    else th_threads_restore(t);
                    /* 0.05 ns per item, 5 us at the largest n: only the forced runs reach the
                     * default threshold (7 us) */
                    (ref ? k_foreach_ref : k_foreach)(n, 0.05, foreach_mark, &c);
                    int once = 1;
                    long calls = 0;
                    for (long i = 0; i < n; i++) once &= c.hits[i] == 1, calls += c.starts[i];
                    long most = ref || !forced ? 1 : (n < t ? n : t);
                    TH_CHECK(once && c.starts[0] == 1 && calls <= most,
                             "foreach%s n=%ld at %d threads%s: %ld ranges (at most %ld), every index once: %d",
                             ref ? "_ref" : "", n, t, forced ? " (forced fork)" : "", calls, most, once);
                    free(c.hits), free(c.starts);
                }
    th_threads_restore(keep);
    ForeachCtx c = {calloc(1, sizeof(int)), calloc(1, sizeof(int))};
    k_foreach(0, 1.0, foreach_mark, &c);
    k_foreach_ref(0, 1.0, foreach_mark, &c);
    TH_CHECK(c.starts[0] == 0 && c.hits[0] == 0, "foreach over 0 items called fn");
    free(c.hits), free(c.starts);
}

/* ---- softmax and cross-entropy --------------------------------------------------------------- */

typedef struct { float *logits, *dloss, *loss; int *t; int M, V; } XentCtx;
static double xent_loss(void *p) {
    XentCtx *c = p;
    k_xent_fwd_ref(c->loss, c->logits, c->t, c->M, c->V, -100);
    return dotd(c->dloss, c->loss, (size_t)c->M);
}

static void test_softmax_xent_case(int M, int V) {
    size_t n = (size_t)M * V;
    char what[48];
    snprintf(what, sizeof what, "M=%d V=%d", M, V);
    float *x = rnd(n, 3.0f), *y = th_alloc(n), *yr = th_alloc(n);
    x[0] += 80.0f; /* large logits must not overflow (max subtraction) */
    k_softmax(y, x, M, V);
    k_softmax_ref(yr, x, M, V);
    close_("softmax", what, y, yr, n, 1e-5);
    float *xa = dup(x, n);
    k_softmax(xa, xa, M, V);
    close_("softmax", "in place", xa, yr, n, 1e-5);
    double worst_sum = 0;
    for (int i = 0; i < M; i++) {
        double s = 0;
        for (int j = 0; j < V; j++) s += y[(size_t)i * V + j];
        worst_sum = fmax(worst_sum, fabs(s - 1.0));
    }
    TH_CHECK(worst_sum < 1e-5, "softmax rows sum to 1 +- %.3g", worst_sum);
    /* cross-entropy with every third row ignored */
    XentCtx c = {x, rnd(M, 1), th_alloc(M), malloc(sizeof(int) * M), M, V};
    for (int i = 0; i < M; i++) c.t[i] = i % 3 == 1 ? -100 : (int)rng_below(&rng, (uint32_t)V);
    float *loss = th_alloc(M), *lossr = th_alloc(M);
    k_xent_fwd(loss, x, c.t, M, V, -100);
    k_xent_fwd_ref(lossr, x, c.t, M, V, -100);
    close_("xent_fwd", what, loss, lossr, M, 1e-5);
    int ign_ok = 1;
    for (int i = 0; i < M; i++) ign_ok &= c.t[i] != -100 || loss[i] == 0.0f;
    TH_CHECK(ign_ok, "xent_fwd: ignored rows must have loss 0");
    float *d0 = rnd(n, 1), *d = dup(d0, n), *dr = dup(d0, n);
    k_xent_bwd(d, x, c.t, c.dloss, M, V, -100);
    k_xent_bwd_ref(dr, x, c.t, c.dloss, M, V, -100);
    close_("xent_bwd", what, d, dr, n, 1e-5);
    for (int i = 0; i < M; i++)
        if (c.t[i] == -100)
            ign_ok &= memcmp(d + (size_t)i * V, d0 + (size_t)i * V, V * sizeof(float)) == 0;
    TH_CHECK(ign_ok, "xent_bwd: ignored rows must be untouched");
    if (n <= 2000) {
        float *g = increment(d, d0, n);
        grad_check("xent_bwd", what, xent_loss, &c, x, n, g, 1e-2f, 2e-3);
        free(g);
    }
    free(x), free(y), free(yr), free(xa), free(c.dloss), free(c.loss), free(c.t), free(loss);
    free(lossr), free(d0), free(d), free(dr);
}

static void test_softmax_xent(void) {
    static const int shapes[][2] = {{1, 1}, {3, 17}, {5, 65}, {4, 300}, {3, 5000}};
    for (int s = 0; s < 5; s++) test_softmax_xent_case(shapes[s][0], shapes[s][1]);
    /* NaN must propagate (the solver detects divergence by it), -inf logits give 0 */
    float x[4] = {1.0f, NAN, 2.0f, 0.5f}, y[4], z[3] = {0.0f, -INFINITY, 1.0f};
    k_softmax(y, x, 1, 4);
    TH_CHECK(isnan(y[0]) && isnan(y[2]), "softmax: a NaN input must give NaN outputs");
    k_softmax(z, z, 1, 3);
    TH_CHECK(z[1] == 0.0f && fabsf(z[0] + z[2] - 1.0f) < 1e-6f, "softmax: -inf must give 0");
}

/* ---- activations ----------------------------------------------------------------------------- */

typedef struct { float *a, *b, *wy, *y; size_t n; } ActCtx;
static double silu_loss(void *p) {
    ActCtx *c = p;
    k_silu_fwd_ref(c->y, c->a, c->n);
    return dotd(c->wy, c->y, c->n);
}
static double swiglu_loss(void *p) {
    ActCtx *c = p;
    k_swiglu_fwd_ref(c->y, c->a, c->b, c->n);
    return dotd(c->wy, c->y, c->n);
}

static void test_act_case(size_t n) {
    char what[32];
    snprintf(what, sizeof what, "n=%zu", n);
    ActCtx c = {rnd(n, 3.0f), rnd(n, 1), rnd(n, 1), th_alloc(n), n};
    /* extremes: exp over/underflow inside sigmoid (h = 5e-2 below: silu(100) has ulp 8e-6) */
    const float ext[] = {-100.0f, 100.0f, -88.5f, 88.5f, 1e-4f, -1e-4f, 0.0f, -20.0f, 20.0f};
    for (size_t i = 0; i < n && i < 9; i++) c.a[i] = ext[i];
    float *y = th_alloc(n), *yr = th_alloc(n);
    k_silu_fwd(y, c.a, n);
    k_silu_fwd_ref(yr, c.a, n);
    close_("silu_fwd", what, y, yr, n, 1e-6);
    float *ya = dup(c.a, n);
    k_silu_fwd(ya, ya, n);
    close_("silu_fwd", "in place", ya, yr, n, 1e-6);
    k_swiglu_fwd(y, c.a, c.b, n);
    k_swiglu_fwd_ref(yr, c.a, c.b, n);
    close_("swiglu_fwd", what, y, yr, n, 1e-6);
    float *da0 = rnd(n, 1), *db0 = rnd(n, 1);
    float *da = dup(da0, n), *db = dup(db0, n), *dar = dup(da0, n), *dbr = dup(db0, n);
    k_silu_bwd(da, c.wy, c.a, n);
    k_silu_bwd_ref(dar, c.wy, c.a, n);
    close_("silu_bwd", what, da, dar, n, 1e-6);
    float *ga = increment(da, da0, n);
    if (n <= 2000) grad_check("silu_bwd", what, silu_loss, &c, c.a, n, ga, 5e-2f, 1e-3);
    memcpy(da, da0, n * sizeof(float)), memcpy(dar, da0, n * sizeof(float));
    k_swiglu_bwd(da, db, c.wy, c.a, c.b, n);
    k_swiglu_bwd_ref(dar, dbr, c.wy, c.a, c.b, n);
    close_("swiglu_bwd", "da", da, dar, n, 1e-6);
    close_("swiglu_bwd", "db", db, dbr, n, 1e-6);
    float *db2 = dup(db0, n);
    k_swiglu_bwd(NULL, db2, c.wy, c.a, c.b, n);
    close_("swiglu_bwd", "db alone", db2, db, n, 0.0);
    if (n <= 2000) {
        float *ga2 = increment(da, da0, n), *gb = increment(db, db0, n);
        grad_check("swiglu_bwd", what, swiglu_loss, &c, c.a, n, ga2, 5e-2f, 1e-3);
        grad_check("swiglu_bwd", what, swiglu_loss, &c, c.b, n, gb, 5e-2f, 1e-3);
        free(ga2), free(gb);
    }
    free(ga), free(db2), free(da0), free(db0), free(da), free(db), free(dar), free(dbr);
    free(y), free(yr), free(ya), free(c.a), free(c.b), free(c.wy), free(c.y);
}

static void test_activations(void) {
    static const size_t sizes[] = {1, 3, 17, 65, 1000, 100003};
    for (int s = 0; s < 6; s++) test_act_case(sizes[s]);
    float x[2] = {NAN, INFINITY}, y[2];
    k_silu_fwd(y, x, 2);
    TH_CHECK(isnan(y[0]) && y[1] == INFINITY, "silu: NaN -> NaN, inf -> inf (got %g, %g)", y[0], y[1]);
}

/* ---- gates ----------------------------------------------------------------------------------- */

/* Elementwise: |a - b| <= ulps * 2^-23 |b| + FLT_MIN for every element (NaN only where b is NaN). */
static void ulp_close(const char *kernel, const char *what, const float *a, const float *b, size_t n,
                      double ulps) {
    double max_ulp = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(b[i]) || isnan(a[i])) {
            TH_CHECK(isnan(a[i]) && isnan(b[i]), "%s %s: NaN mismatch at %zu (%g vs %g)", kernel, what, i, a[i], b[i]);
            continue;
        }
        if (a[i] == b[i]) continue; /* also equal infinities */
        double e = (fabs((double)a[i] - b[i]) - FLT_MIN) / (ldexp(fabs((double)b[i]), -23) + 1e-300);
        if (e > max_ulp) max_ulp = e, at = i;
    }
    track(kernel, E_PAR, max_ulp * 0x1p-23);
    TH_CHECK(max_ulp <= ulps, "%s %s: %.2f ulp at %zu (%.9g vs %.9g) > %.1f", kernel, what, max_ulp, at, a[at], b[at],
             ulps);
}

/* Bounds: the fast side's vmath.h bound plus the reference's own error (libm's expf, log1pf are
 * correctly rounded to within 0.5-1 ulp, and each of 1 + e, 1 / (.), x * (.) adds half an ulp):
 *   softplus  2.5 + ~1.5 (log1pf of a rounded expf)          -> 4.5
 *   sigmoid   3 + ~1.5 (expf, 1 + e, 1 / (.))                 -> 4.5
 *   mul_sigmoid  sigmoid's + the product's half ulp per side  -> 5.5
 *   mul_silu     silu's 3 + the reference's silu (~2) + products -> 6.5
 *   neg_exp      exp's 1.5 + expf's 0.5                        -> 2
 *   mul_dsigmoid two sigmoids (3 + 1.5 each) + two products    -> 11
 *   mul_dsoftplus_out  expm1's 2 + expm1f's 1 + the product's  -> 4
 *   mul_dsilu    relative to the gradient's norm, as silu_bwd (the factor crosses zero at x = -1.28,
 *                where no ulp bound holds)                     -> 1e-6 */
static void test_gates_case(int M, int C, float scale) {
    char what[48];
    snprintf(what, sizeof what, "M=%d C=%d scale=%g", M, C, scale);
    size_t n = (size_t)M * C;
    float *x = rnd(n, scale), *bias = rnd((size_t)C, 2.0f), *y0 = rnd(n, 1.0f);
    const float ext[] = {-100.0f, 100.0f, -88.5f, 88.5f, 20.0f, 20.5f, 19.9f, -20.0f, 16.7f, 1e-4f,
                         -1e-30f, 0.0f, -87.0f, 30.0f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < n && i < sizeof ext / sizeof *ext; i++) x[i] = ext[i];
    float *y = th_alloc(n), *yr = th_alloc(n);
    for (int b = 0; b < 2; b++) {
        const float *bb = b ? bias : NULL;
        const char *w = b ? "bias" : "no bias";
        k_softplus(y, x, bb, M, C);
        k_softplus_ref(yr, x, bb, M, C);
        ulp_close("softplus", w, y, yr, n, 4.5);
        k_sigmoid(y, x, bb, M, C);
        k_sigmoid_ref(yr, x, bb, M, C);
        ulp_close("sigmoid", w, y, yr, n, 4.5);
        memcpy(y, y0, n * sizeof(float)), memcpy(yr, y0, n * sizeof(float));
        k_mul_sigmoid(y, x, bb, M, C);
        k_mul_sigmoid_ref(yr, x, bb, M, C);
        ulp_close("mul_sigmoid", w, y, yr, n, 5.5);
    }
    /* silu(-inf): libm's -inf * 0 is NaN, vsilu's the limit -0 (vmath.h); compared apart */
    float *xs = dup(x, n);
    for (size_t i = 0; i < n; i++) xs[i] = xs[i] == -INFINITY ? -1e4f : xs[i];
    memcpy(y, y0, n * sizeof(float)), memcpy(yr, y0, n * sizeof(float));
    k_mul_silu(y, xs, n);
    k_mul_silu_ref(yr, xs, n);
    ulp_close("mul_silu", what, y, yr, n, 6.5);
    free(xs);
    float *xs_finite = dup(x, n);   /* the silu gradient: finite inputs (inf * 0 in both) */
    for (size_t i = 0; i < n; i++) xs_finite[i] = isfinite(xs_finite[i]) ? xs_finite[i] : 0.0f;
    /* neg_exp: vexp's 1.5 ulp + expf's 0.5; below exp's normal range vexp flushes to 0 (vmath.h),
     * which ulp_close's FLT_MIN floor covers */
    k_neg_exp(y, x, n);
    k_neg_exp_ref(yr, x, n);
    ulp_close("neg_exp", what, y, yr, n, 2.0);
    memcpy(y, y0, n * sizeof(float)), memcpy(yr, y0, n * sizeof(float));
    k_mul_dsigmoid(y, x, n);
    k_mul_dsigmoid_ref(yr, x, n);
    ulp_close("mul_dsigmoid", what, y, yr, n, 11.0);
    memcpy(y, y0, n * sizeof(float)), memcpy(yr, y0, n * sizeof(float));
    k_mul_dsilu(y, xs_finite, n);
    k_mul_dsilu_ref(yr, xs_finite, n);
    close_("mul_dsilu", what, y, yr, n, 1e-6);
    float *sp = dup(x, n);   /* softplus outputs are >= 0 */
    for (size_t i = 0; i < n; i++) sp[i] = fabsf(sp[i]);
    memcpy(y, y0, n * sizeof(float)), memcpy(yr, y0, n * sizeof(float));
    k_mul_dsoftplus_out(y, sp, n);
    k_mul_dsoftplus_out_ref(yr, sp, n);
    ulp_close("mul_dsoftplus_out", what, y, yr, n, 4.0);
    free(sp), free(xs_finite);
    /* in place (y aliases x) gives the same as out of place */
    float *xa = dup(x, n);
    k_softplus(xa, xa, bias, M, C);
    k_softplus(y, x, bias, M, C);
    TH_CHECK(memcmp(xa, y, n * sizeof(float)) == 0, "softplus %s: in place differs", what);
    memcpy(xa, x, n * sizeof(float));
    k_sigmoid(xa, xa, bias, M, C);
    k_sigmoid(y, x, bias, M, C);
    TH_CHECK(memcmp(xa, y, n * sizeof(float)) == 0, "sigmoid %s: in place differs", what);
    free(x), free(bias), free(y0), free(y), free(yr), free(xa);
}

static void test_gates(void) {
    static const int shapes[][2] = {{1, 1}, {1, 17}, {3, 5}, {7, 33}, {64, 300}, {300, 400}};
    for (int s = 0; s < 6; s++) {
        test_gates_case(shapes[s][0], shapes[s][1], 3.0f);
        test_gates_case(shapes[s][0], shapes[s][1], 40.0f);
    }
    /* special values, exactly */
    float x[4] = {NAN, INFINITY, -INFINITY, 0.0f}, y[4];
    k_softplus(y, x, NULL, 1, 4);
    TH_CHECK(isnan(y[0]) && y[1] == INFINITY && y[2] == 0.0f && fabsf(y[3] - 0.69314718f) < 1e-7f,
             "softplus: NaN, inf, -inf, 0 -> %g %g %g %g", y[0], y[1], y[2], y[3]);
    k_sigmoid(y, x, NULL, 1, 4);
    TH_CHECK(isnan(y[0]) && y[1] == 1.0f && y[2] == 0.0f && y[3] == 0.5f, "sigmoid: NaN, inf, -inf, 0 -> %g %g %g %g",
             y[0], y[1], y[2], y[3]);
    float g[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    k_mul_silu(g, x, 4);
    TH_CHECK(isnan(g[0]) && g[1] == INFINITY && g[2] == 0.0f && g[3] == 0.0f, "mul_silu: NaN, inf, -inf, 0 -> %g %g %g %g",
             g[0], g[1], g[2], g[3]);
}

/* ---- embedding ------------------------------------------------------------------------------- */

static void test_embed_case(int M, int V, int D) {
    char what[48];
    snprintf(what, sizeof what, "M=%d V=%d D=%d", M, V, D);
    size_t ny = (size_t)M * D, ne = (size_t)V * D;
    int *ids = malloc(sizeof(int) * M);
    for (int i = 0; i < M; i++) ids[i] = (int)rng_below(&rng, (uint32_t)V); /* M > V: repeats */
    float *E = rnd(ne, 1), *y = th_alloc(ny), *yr = th_alloc(ny);
    k_embed_fwd(y, ids, E, M, V, D);
    k_embed_fwd_ref(yr, ids, E, M, V, D);
    TH_CHECK(memcmp(y, yr, ny * sizeof(float)) == 0, "embed_fwd %s: not an exact copy", what);
    float *dy = rnd(ny, 1), *dE0 = rnd(ne, 1), *dE = dup(dE0, ne), *dEr = dup(dE0, ne);
    k_embed_bwd(dE, dy, ids, M, V, D);
    k_embed_bwd_ref(dEr, dy, ids, M, V, D);
    /* same additions in the same row order: bit-exact */
    TH_CHECK(memcmp(dE, dEr, ne * sizeof(float)) == 0, "embed_bwd %s: differs from reference", what);
    float *g = increment(dE, dE0, ne), *v = rnd(ne, 1);
    k_embed_fwd(y, ids, v, M, V, D); /* linear in E: exact adjoint test */
    dot_test("embed_bwd", what, dotd(y, dy, ny), dotd(v, g, ne));
    free(ids), free(E), free(y), free(yr), free(dy), free(dE0), free(dE), free(dEr), free(g), free(v);
}

static void test_embed(void) {
    test_embed_case(1, 1, 1);
    test_embed_case(17, 3, 5);
    test_embed_case(65, 10, 33);
    test_embed_case(300, 50, 96);
}

/* ---- causal depthwise conv1d ----------------------------------------------------------------- */

typedef struct { float *x, *w, *bias, *wy, *y; int B, T, C, W; } ConvCtx;
static double conv_loss(void *p) {
    ConvCtx *c = p;
    k_conv1d_fwd_ref(c->y, c->x, c->w, c->bias, c->B, c->T, c->C, c->W);
    return dotd(c->wy, c->y, (size_t)c->B * c->T * c->C);
}

/* conv1d_step over T tokens from a zero state equals conv1d_fwd; the state ends as the last W
 * inputs (zeros where T < W). Exercises state_out aliasing state_in and state_out = NULL. */
static void conv_step_check(const ConvCtx *c, const float *yfwd, const char *what) {
    int B = c->B, T = c->T, C = c->C, W = c->W;
    float *st = th_alloc((size_t)B * C * W), *xt = th_alloc((size_t)B * C), *yt = th_alloc((size_t)B * C);
    float *ys = th_alloc((size_t)B * T * C), *st2 = th_alloc((size_t)B * C * W);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * C, c->x + ((size_t)b * T + t) * C, C * sizeof(float));
        memcpy(st2, st, (size_t)B * C * W * sizeof(float));
        k_conv1d_step(yt, NULL, st, xt, c->w, c->bias, B, C, W); /* no commit: state unchanged */
        TH_CHECK(memcmp(st, st2, (size_t)B * C * W * sizeof(float)) == 0, "conv1d_step NULL state_out");
        k_conv1d_step(yt, st, st, xt, c->w, c->bias, B, C, W);
        for (int b = 0; b < B; b++) memcpy(ys + ((size_t)b * T + t) * C, yt + (size_t)b * C, C * sizeof(float));
    }
    close_("conv1d_step", what, ys, yfwd, (size_t)B * T * C, 1e-5);
    int st_ok = 1;
    for (int b = 0; b < B; b++)
        for (int ch = 0; ch < C; ch++)
            for (int k = 0; k < W; k++) {
                int t = T - W + k;
                float want = t >= 0 ? c->x[((size_t)b * T + t) * C + ch] : 0.0f;
                st_ok &= st[((size_t)b * C + ch) * W + k] == want;
            }
    TH_CHECK(st_ok, "conv1d_step %s: final state is not the last W inputs", what);
    /* fast vs reference step, one token from a random state */
    float *s0 = rnd((size_t)B * C * W, 1), *so = th_alloc((size_t)B * C * W), *sor = th_alloc((size_t)B * C * W);
    float *yr = th_alloc((size_t)B * C);
    k_conv1d_step(yt, so, s0, xt, c->w, c->bias, B, C, W);
    k_conv1d_step_ref(yr, sor, s0, xt, c->w, c->bias, B, C, W);
    close_("conv1d_step", "vs ref", yt, yr, (size_t)B * C, 1e-5);
    TH_CHECK(memcmp(so, sor, (size_t)B * C * W * sizeof(float)) == 0, "conv1d_step state vs ref");
    free(st), free(xt), free(yt), free(ys), free(st2), free(s0), free(so), free(sor), free(yr);
}

static void test_conv_case(int B, int T, int C, int W) {
    char what[48];
    snprintf(what, sizeof what, "B=%d T=%d C=%d W=%d", B, T, C, W);
    size_t n = (size_t)B * T * C, nw = (size_t)C * W;
    ConvCtx c = {rnd(n, 1), rnd(nw, 0.5f), rnd(C, 1), rnd(n, 1), th_alloc(n), B, T, C, W};
    float *y = th_alloc(n), *yr = th_alloc(n);
    k_conv1d_fwd(y, c.x, c.w, NULL, B, T, C, W);
    k_conv1d_fwd_ref(yr, c.x, c.w, NULL, B, T, C, W);
    close_("conv1d_fwd", "no bias", y, yr, n, 1e-5);
    k_conv1d_fwd(y, c.x, c.w, c.bias, B, T, C, W);
    k_conv1d_fwd_ref(yr, c.x, c.w, c.bias, B, T, C, W);
    close_("conv1d_fwd", what, y, yr, n, 1e-5);
    /* the conv with its SiLU in one pass: the bits of k_conv1d_fwd then k_silu_fwd, with and
     * without the pre-activation, and the reference to rounding */
    float *pre = th_alloc(n), *act = th_alloc(n), *act1 = th_alloc(n), *actr = th_alloc(n);
    k_silu_fwd(act, y, n);
    k_conv1d_silu_fwd(pre, act1, c.x, c.w, c.bias, B, T, C, W);
    TH_CHECK(memcmp(pre, y, n * sizeof(float)) == 0 && memcmp(act1, act, n * sizeof(float)) == 0,
             "conv1d_silu_fwd %s: not the bits of conv1d_fwd + silu_fwd", what);
    k_conv1d_silu_fwd(NULL, act1, c.x, c.w, c.bias, B, T, C, W);
    TH_CHECK(memcmp(act1, act, n * sizeof(float)) == 0, "conv1d_silu_fwd %s (no pre-activation): other bits", what);
    k_conv1d_silu_fwd_ref(NULL, actr, c.x, c.w, c.bias, B, T, C, W);
    close_("conv1d_silu_fwd", what, act1, actr, n, 1e-5);
    free(pre), free(act), free(act1), free(actr);
    conv_step_check(&c, y, what);
    float *dx0 = rnd(n, 1), *dw0 = rnd(nw, 1), *db0 = rnd(C, 1);
    float *dx = dup(dx0, n), *dw = dup(dw0, nw), *db = dup(db0, C);
    float *dxr = dup(dx0, n), *dwr = dup(dw0, nw), *dbr = dup(db0, C), *dw2 = dup(dw0, nw);
    k_conv1d_bwd(dx, dw, db, c.wy, c.x, c.w, B, T, C, W);
    k_conv1d_bwd_ref(dxr, dwr, dbr, c.wy, c.x, c.w, B, T, C, W);
    close_("conv1d_bwd", "dx", dx, dxr, n, 1e-5);
    close_("conv1d_bwd", "dw", dw, dwr, nw, 1e-5);
    close_("conv1d_bwd", "dbias", db, dbr, C, 1e-5);
    k_conv1d_bwd(NULL, dw2, NULL, c.wy, c.x, c.w, B, T, C, W);
    close_("conv1d_bwd", "dw alone", dw2, dw, nw, 1e-6);
    float *db2 = dup(db0, C);
    k_conv1d_bwd(NULL, NULL, db2, c.wy, c.x, c.w, B, T, C, W);
    close_("conv1d_bwd", "dbias alone", db2, db, C, 0.0);
    free(db2);
    float *gx = increment(dx, dx0, n), *gw = increment(dw, dw0, nw), *gb = increment(db, db0, C);
    if (n <= 3000) {
        grad_check("conv1d_bwd", what, conv_loss, &c, c.x, n, gx, 1e-2f, 1e-3);
        grad_check("conv1d_bwd", what, conv_loss, &c, c.w, nw, gw, 1e-2f, 1e-3);
        grad_check("conv1d_bwd", what, conv_loss, &c, c.bias, C, gb, 1e-2f, 1e-3);
    }
    /* exact adjoint tests: linear in x (for fixed w) and in w (for fixed x) */
    float *v = rnd(n, 1), *vw = rnd(nw, 1);
    k_conv1d_fwd(y, v, c.w, NULL, B, T, C, W);
    dot_test("conv1d_bwd", "x", dotd(y, c.wy, n), dotd(v, gx, n));
    k_conv1d_fwd(y, c.x, vw, NULL, B, T, C, W);
    dot_test("conv1d_bwd", "w", dotd(y, c.wy, n), dotd(vw, gw, nw));
    free(v), free(vw), free(gx), free(gw), free(gb), free(dx0), free(dw0), free(db0), free(dx);
    free(dw), free(db), free(dxr), free(dwr), free(dbr), free(dw2), free(y), free(yr);
    free(c.x), free(c.w), free(c.bias), free(c.wy), free(c.y);
}

static void test_conv1d(void) {
    test_conv_case(1, 1, 1, 1);
    test_conv_case(2, 5, 3, 4);
    test_conv_case(2, 3, 7, 5); /* T < W */
    test_conv_case(3, 17, 65, 4);
    test_conv_case(2, 40, 300, 4);
}

/* ---- LSTM cell ------------------------------------------------------------------------------- */

typedef struct { float *pre, *cp, *wh, *wc, *h, *c, *act; int B, Hd; } LstmCtx;
static double lstm_loss(void *p) {
    LstmCtx *l = p;
    k_lstm_cell_fwd_ref(l->h, l->c, l->act, l->pre, l->cp, l->B, l->Hd);
    size_t n = (size_t)l->B * l->Hd;
    return dotd(l->wh, l->h, n) + (l->wc ? dotd(l->wc, l->c, n) : 0.0);
}

static void test_lstm_case(int B, int Hd) {
    char what[32];
    snprintf(what, sizeof what, "B=%d Hd=%d", B, Hd);
    size_t n = (size_t)B * Hd, n4 = 4 * n;
    LstmCtx l = {rnd(n4, 1.5f), rnd(n, 1), rnd(n, 1), rnd(n, 1), th_alloc(n), th_alloc(n), th_alloc(n4), B, Hd};
    float *h = th_alloc(n), *c = th_alloc(n), *act = th_alloc(n4);
    k_lstm_cell_fwd(h, c, act, l.pre, l.cp, B, Hd);
    lstm_loss(&l);
    close_("lstm_cell_fwd", "h", h, l.h, n, 1e-6);
    close_("lstm_cell_fwd", "c", c, l.c, n, 1e-6);
    close_("lstm_cell_fwd", "act", act, l.act, n4, 1e-6);
    float *wc_mem = l.wc;
    for (int with_dc = 0; with_dc < 2; with_dc++) { /* dc = NULL, then a gradient on c too */
        l.wc = with_dc ? wc_mem : NULL;
        float *dp0 = rnd(n4, 1), *dc0 = rnd(n, 1);
        float *dp = dup(dp0, n4), *dcp = dup(dc0, n), *dpr = dup(dp0, n4), *dcpr = dup(dc0, n);
        k_lstm_cell_bwd(dp, dcp, l.wh, l.wc, act, l.cp, c, B, Hd);
        k_lstm_cell_bwd_ref(dpr, dcpr, l.wh, l.wc, act, l.cp, c, B, Hd);
        close_("lstm_cell_bwd", "dpre", dp, dpr, n4, 1e-6);
        close_("lstm_cell_bwd", "dc_prev", dcp, dcpr, n, 1e-6);
        float *dp2 = dup(dp0, n4); /* dc_prev = NULL skipped, dpre unchanged by that */
        k_lstm_cell_bwd(dp2, NULL, l.wh, l.wc, act, l.cp, c, B, Hd);
        close_("lstm_cell_bwd", "dpre alone", dp2, dp, n4, 0.0);
        free(dp2);
        float *gp = increment(dp, dp0, n4), *gc = increment(dcp, dc0, n);
        grad_check("lstm_cell_bwd", what, lstm_loss, &l, l.pre, n4, gp, 1e-2f, 1e-3);
        grad_check("lstm_cell_bwd", what, lstm_loss, &l, l.cp, n, gc, 1e-2f, 1e-3);
        free(dp0), free(dc0), free(dp), free(dcp), free(dpr), free(dcpr), free(gp), free(gc);
    }
    free(h), free(c), free(act), free(l.pre), free(l.cp), free(l.wh), free(wc_mem), free(l.h), free(l.c), free(l.act);
}

static void test_lstm(void) {
    test_lstm_case(1, 1);
    test_lstm_case(3, 17);
    test_lstm_case(5, 65);
    /* c_prev = NULL (beyond the contract: a zero initial cell) equals passing zeros */
    float pre[4 * 6], zeros[6] = {0}, h1[6], c1[6], a1[24], h2[6], c2[6], a2[24];
    th_fill_normal(pre, 24, &rng, 1.0f);
    k_lstm_cell_fwd(h1, c1, a1, pre, NULL, 1, 6);
    k_lstm_cell_fwd(h2, c2, a2, pre, zeros, 1, 6);
    TH_CHECK(memcmp(h1, h2, sizeof h1) == 0 && memcmp(c1, c2, sizeof c1) == 0,
             "lstm_cell_fwd: c_prev = NULL differs from zeros");
}

/* ---- optimiser and vector helpers ------------------------------------------------------------ */

static void test_adamw(void) {
    /* one step by hand, in double, from the PyTorch AdamW formulas */
    float p = 1.0f, m = 0.1f, v = 0.01f, g = 0.5f;
    float pr = p, mr = m, vr = v;
    const float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, gs = 2.0f;
    const int t = 3;
    double gg = 0.5 * 2.0, me = 0.9 * 0.1 + 0.1 * gg, ve = 0.999 * 0.01 + 0.001 * gg * gg;
    double pe = 1.0 - 0.1 * 0.01 * 1.0;
    pe -= 0.1 * (me / (1 - pow(0.9, 3))) / (sqrt(ve / (1 - pow(0.999, 3))) + 1e-8);
    k_adamw(&p, &m, &v, &g, 1, lr, b1, b2, eps, wd, gs, t);
    k_adamw_ref(&pr, &mr, &vr, &g, 1, lr, b1, b2, eps, wd, gs, t);
    TH_CHECK(fabs(p - pe) < 1e-6 && fabs(m - me) < 1e-7 && fabs(v - ve) < 1e-7,
             "adamw vs hand: p %.9g (%.9g) m %.9g (%.9g) v %.9g (%.9g)", p, pe, m, me, v, ve);
    TH_CHECK(fabs(pr - pe) < 1e-6 && fabs(mr - me) < 1e-7 && fabs(vr - ve) < 1e-7,
             "adamw_ref vs hand: p %.9g (%.9g)", pr, pe);
    track("adamw", E_FD, fabs(p - pe));
    /* arrays, fast vs reference, several steps (odd length) */
    size_t n = 100003;
    float *P = rnd(n, 1), *M = th_alloc(n), *V = th_alloc(n), *G = th_alloc(n);
    float *Pr = dup(P, n), *Mr = th_alloc(n), *Vr = th_alloc(n);
    for (int step = 1; step <= 3; step++) {
        th_fill_normal(G, n, &rng, 1.0f);
        k_adamw(P, M, V, G, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
        k_adamw_ref(Pr, Mr, Vr, G, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
    }
    close_("adamw", "p", P, Pr, n, 1e-6);
    close_("adamw", "m", M, Mr, n, 1e-6);
    close_("adamw", "v", V, Vr, n, 1e-6);
    free(P), free(M), free(V), free(G), free(Pr), free(Mr), free(Vr);
}

static void test_sumsq_axpby(void) {
    static const size_t sizes[] = {0, 1, 17, 65, 100003, 1500001};
    for (int s = 0; s < 6; s++) {
        size_t n = sizes[s];
        float *x = rnd(n, 1), *y = rnd(n, 1), *yr = dup(y, n);
        double a = k_sumsq(x, n), b = k_sumsq_ref(x, n);
        double e = fabs(a - b) / fmax(b, 1e-300);
        track("sumsq", E_PAR, e);
        TH_CHECK(e < 1e-12, "sumsq n=%zu: %.17g vs %.17g", n, a, b);
        k_axpby(y, 0.3f, x, -1.7f, n);
        k_axpby_ref(yr, 0.3f, x, -1.7f, n);
        close_("axpby", "b != 0", y, yr, n, 1e-6);
        for (size_t i = 0; i < n; i++) y[i] = NAN; /* b = 0 must not read y */
        k_axpby(y, 0.3f, x, 0.0f, n);
        k_axpby_ref(yr, 0.3f, x, 0.0f, n);
        close_("axpby", "b = 0", y, yr, n, 0.0);
        free(x), free(y), free(yr);
    }
    float ones[5] = {1, 2, 3, 4, 5};
    TH_CHECK(k_sumsq(ones, 5) == 55.0, "sumsq(1..5) = %g", k_sumsq(ones, 5));
}

/* k_resid_rel_inf against the reference, exactly (maxima only): tokens shorter than, equal to and
 * longer than the lanes, with tails; a NaN or inf in F anywhere gives NaN, a NaN in y alone is
 * passed over, an inf in y gives inf; F all zero with eps 0 (0 / 0 and d / 0). */
static int same_double(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static void test_resid_rel_inf(void) {
    static const size_t shape[][2] = {{1, 1}, {7, 7}, {16, 8}, {130, 130}, {640, 64}, {1088 * 4, 128}, {51, 17}};
    static const double eps[] = {0.0, 1e-6};
    for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++)
        for (int e = 0; e < 2; e++)
            for (int mode = 0; mode < 6; mode++) {
                size_t per = shape[s][0], tok = shape[s][1];
                float *y = rnd(per, 1), *F = rnd(per, 1);
                size_t at = (per * 5) / 7; /* a position inside some token, not the first */
                if (mode == 1) F[at] = NAN;
                if (mode == 2) F[per - 1] = -INFINITY;
                if (mode == 3) y[at] = NAN;
                if (mode == 4) y[at] = INFINITY;
                if (mode == 5)
                    for (size_t i = 0; i < per; i++) F[i] = 0.0f, y[i] = i % 3 ? 0.0f : 1e-3f * (float)i;
                double a = k_resid_rel_inf(y, F, per, tok, eps[e]), r = k_resid_rel_inf_ref(y, F, per, tok, eps[e]);
                TH_CHECK(same_double(a, r), "resid_rel_inf per %zu tok %zu eps %g mode %d: %.17g vs %.17g", per, tok,
                         eps[e], mode, a, r);
                if (mode == 1 || mode == 2) TH_CHECK(isnan(a), "resid_rel_inf: non-finite F must give NaN");
                free(y), free(F);
            }
}

/* k_resid_sumsq against the reference in one chain: within 1e-12 relative (16 partial sums in
 * double); the same bits below 16 floats (the tail alone); NaN and inf in f propagate. */
static void test_resid_sumsq(void) {
    static const size_t sizes[] = {0, 1, 15, 16, 17, 1000, 16384, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *f = rnd(n, 1), *x = rnd(n, 1);
        double a[2], b[2];
        k_resid_sumsq(f, x, n, a);
        k_resid_sumsq_ref(f, x, n, b);
        for (int q = 0; q < 2; q++) {
            double e = fabs(a[q] - b[q]) / fmax(b[q], 1e-300);
            track("resid_sumsq", E_PAR, e);
            TH_CHECK(n < 16 ? a[q] == b[q] : e < 1e-12, "resid_sumsq n=%zu sum %d: %.17g vs %.17g", n, q, a[q], b[q]);
        }
        if (n > 20) {
            f[n / 2] = INFINITY;
            k_resid_sumsq(f, x, n, a);
            TH_CHECK(isinf(a[0]) && isinf(a[1]), "resid_sumsq n=%zu: inf in f gives %g, %g", n, a[0], a[1]);
            f[n - 1] = NAN;
            k_resid_sumsq(f, x, n, a);
            TH_CHECK(isnan(a[0]) && isnan(a[1]), "resid_sumsq n=%zu: NaN in f gives %g, %g", n, a[0], a[1]);
        }
        free(f), free(x);
    }
}

/* k_copy_rows against the reference: strided blocks narrower than their rows (the injection's
 * parts: 8 to 300 floats of a wider row), contiguous arrays (one long row, split in pieces),
 * copy and add; floats outside the block must not change. Exact: one copy or add per element. */
static void test_copy_rows(void) {
    static const size_t shape[][4] = {/* rows, n, ldy, ldx */
                                      {0, 5, 5, 5},     {1, 0, 3, 3},     {1, 1, 1, 1},     {3, 7, 9, 11},
                                      {8192, 8, 8, 296}, {513, 130, 130, 300}, {7, 100, 300, 100},
                                      {1, 100003, 100003, 100003}, {37, 4099, 4099, 4099}};
    for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++) {
        size_t rows = shape[s][0], n = shape[s][1], ldy = shape[s][2], ldx = shape[s][3];
        size_t ny = rows ? (rows - 1) * ldy + n + 3 : 3, nx = rows ? (rows - 1) * ldx + n : 1;
        float *x = rnd(nx, 1);
        for (int add = 0; add < 2; add++) {
            float *y = rnd(ny, 1), *yr = dup(y, ny);
            k_copy_rows(y, ldy, x, ldx, rows, n, add);
            k_copy_rows_ref(yr, ldy, x, ldx, rows, n, add);
            char what[64];
            snprintf(what, sizeof what, "rows %zu n %zu ld %zu/%zu add %d", rows, n, ldy, ldx, add);
            close_("copy_rows", what, y, yr, ny, 0.0);
            free(y), free(yr);
        }
        free(x);
    }
}

/* k_zero against the reference: empty, short, and long enough to split over the threads (the
 * fork threshold forced to 0 and at its default); NaN and inf in the buffer are cleared, and the
 * floats past n must not change. */
static void test_zero(void) {
    static const size_t sizes[] = {0, 1, 7, 4095, 4097, 70001, 100003};
    double fork_ns = k_fork_ns();
    for (int forced = 0; forced < 2; forced++) {
        k_set_fork_ns(forced ? 0.0 : fork_ns);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            float *y = rnd(n + 3, 1);
            if (n > 2) y[0] = NAN, y[n / 2] = INFINITY, y[n - 1] = -INFINITY;
            float *yr = dup(y, n + 3);
            k_zero(y, n);
            k_zero_ref(yr, n);
            char what[48];
            snprintf(what, sizeof what, "n %zu forced %d", n, forced);
            close_("zero", what, y, yr, n + 3, 0.0);
            free(y), free(yr);
        }
    }
    k_set_fork_ns(fork_ns);
}

/* ---- bit-identity across thread counts (STYLE §8.7) ------------------------------------------- */

/* Inputs large enough that every kernel takes its parallel path; outputs land in G.out (zeroed
 * before each run, so accumulating kernels start from 0). */
#define TB_N 400000
static struct { float *a, *b, *c, *d, *out, *first; int *ids; } G;
#define O(k) (G.out + (size_t)(k) * TB_N)

static void r_gemm_nn(void) { k_gemm_blocked(0, 0, 150, 130, 300, 1.0f, G.a, 300, G.b, 130, 0.0f, O(0), 130); }
static void r_gemm_tt(void) { k_gemm_blocked(1, 1, 150, 130, 300, 0.5f, G.a, 150, G.b, 300, 0.0f, O(0), 130); }
static void r_gemv(void) { k_gemm_blocked(0, 1, 1, 1000, 400, 1.0f, G.a, 400, G.b, 400, 0.0f, O(0), 1000); }
static void r_gemm_blas(void) { k_gemm(0, 1, 300, 200, 400, 1.0f, G.a, 400, G.b, 400, 0.0f, O(0), 200); }
static void r_lin_fwd(void) { k_linear_fwd(O(0), G.a, G.b, G.c, 300, 400, 200); }
static void r_lin_bwd(void) { k_linear_bwd(O(0), O(1), O(2), G.c, G.a, G.b, 300, 400, 200); }
static void r_wn_fwd(void) { k_weightnorm_fwd(O(0), G.c, G.a, 300, 400, 1.0f, 0.0f); }
static void r_wn_bwd(void) { k_weightnorm_bwd(O(0), O(1), G.b, G.c, G.a, 300, 400, 1.0f, 0.0f); }
static void r_rms_fwd(void) { k_rmsnorm_fwd(O(0), O(1), G.a, G.c, 300, 400, 1e-5f); }
static void r_rms_bwd(void) { k_rmsnorm_bwd(O(0), O(1), G.b, G.a, G.c, G.first, 300, 400); }
static void r_grms_fwd(void) { k_gated_rmsnorm_fwd(O(0), O(1), G.a, G.d, G.c, 300, 400, 1e-5f); }
static void r_grms_bwd(void) { k_gated_rmsnorm_bwd(O(0), O(1), O(2), G.b, G.a, G.d, G.c, G.first, 300, 400); }
static void r_ln_fwd(void) { k_layernorm_fwd(O(0), O(1), O(1) + 300, G.a, G.c, G.d, 300, 400, 1e-5f); }
static void r_ln_bwd(void) { k_layernorm_bwd(O(0), O(1), O(2), G.b, G.a, G.c, G.first, G.first + 300, 300, 400); }
static void r_softmax(void) { k_softmax(O(0), G.a, 300, 400); }
static void r_xent_fwd(void) { k_xent_fwd(O(0), G.a, G.ids, 100, 4000, 7); }
static void r_xent_bwd(void) { k_xent_bwd(O(0), G.a, G.ids, G.c, 100, 4000, 7); }
static void r_silu_fwd(void) { k_silu_fwd(O(0), G.a, TB_N); }
static void r_silu_bwd(void) { k_silu_bwd(O(0), G.b, G.a, TB_N); }
static void r_swiglu_fwd(void) { k_swiglu_fwd(O(0), G.a, G.b, TB_N); }
static void r_swiglu_bwd(void) { k_swiglu_bwd(O(0), O(1), G.c, G.a, G.b, TB_N); }
static void r_softplus(void) { k_softplus(O(0), G.a, G.c, 400, TB_N / 400); }
static void r_sigmoid(void) { k_sigmoid(O(0), G.a, G.c, 400, TB_N / 400); }
static void r_mul_sigmoid(void) {
    memcpy(O(0), G.b, TB_N * sizeof(float));
    k_mul_sigmoid(O(0), G.a, G.c, 400, TB_N / 400);
}
static void r_neg_exp(void) { k_neg_exp(O(0), G.a, TB_N); }
static void r_mul_dsilu(void) {
    memcpy(O(0), G.b, TB_N * sizeof(float));
    k_mul_dsilu(O(0), G.a, TB_N);
}
static void r_mul_dsigmoid(void) {
    memcpy(O(0), G.b, TB_N * sizeof(float));
    k_mul_dsigmoid(O(0), G.a, TB_N);
}
static void r_mul_dsoftplus_out(void) {
    memcpy(O(0), G.b, TB_N * sizeof(float));
    k_mul_dsoftplus_out(O(0), G.first, TB_N);
}
static void r_mul_silu(void) {
    memcpy(O(0), G.b, TB_N * sizeof(float));
    k_mul_silu(O(0), G.a, TB_N);
}
static void r_embed_fwd(void) { k_embed_fwd(O(0), G.ids, G.a, 600, 50, 256); }
static void r_embed_bwd(void) { k_embed_bwd(O(0), G.a, G.ids, 600, 50, 256); }
static void r_conv_fwd(void) { k_conv1d_fwd(O(0), G.a, G.b, G.c, 2, 200, 300, 4); }
static void r_conv_bwd(void) { k_conv1d_bwd(O(0), O(1), O(2), G.a, G.b, G.c, 2, 200, 300, 4); }
static void r_conv_step(void) { k_conv1d_step(O(0), O(1), G.a, G.b, G.c, G.d, 64, 300, 4); }
static void r_lstm_fwd(void) { k_lstm_cell_fwd(O(0), O(1), O(2), G.a, G.b, 64, 500); }
static void r_lstm_bwd(void) { k_lstm_cell_bwd(O(0), O(1), G.a, G.b, G.first, G.c, G.d, 64, 500); }
static void r_adamw(void) {
    memcpy(O(0), G.a, TB_N * sizeof(float)); /* p starts from data, m = v = 0 */
    k_adamw(O(0), O(1), O(2), G.b, TB_N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1);
}
static void r_sumsq(void) { *(double *)O(0) = k_sumsq(G.a, TB_N) + k_sumsq(G.b, 1500000); }
static void r_copy_rows(void) {
    k_copy_rows(O(0), 400, G.a, 800, TB_N / 800, 300, 0);
    memcpy(O(1), G.b, TB_N * sizeof(float));
    k_copy_rows(O(1), 296, G.a, 296, TB_N / 296, 296, 1);
}
static void r_zero(void) {
    memcpy(O(0), G.a, TB_N * sizeof(float));
    k_zero(O(0), TB_N - 5);
}
static void r_axpby(void) {
    memcpy(O(0), G.a, TB_N * sizeof(float));
    k_axpby(O(0), 0.3f, G.b, 0.9f, TB_N);
}

/* run() at the base thread count of th.h and at 4 threads: the same bits (every kernel here,
 * k_gemm included, since with BLAS the base count is already past OpenBLAS's one-thread path). */
static void bitid(const char *name, void (*run)(void)) {
    size_t n = 4 * (size_t)TB_N;
    float *one = th_alloc(n);
    int t0 = th_thread_base();
    th_bitid_threads(t0);
    memset(G.out, 0, n * sizeof(float));
    run();
    memcpy(one, G.out, n * sizeof(float));
    th_bitid_threads(4);
    memset(G.out, 0, n * sizeof(float));
    run();
    TH_CHECK(memcmp(one, G.out, n * sizeof(float)) == 0, "%s: outputs differ between %d and 4 threads", name, t0);
    free(one);
}

static void test_threads(void) {
#ifndef _OPENMP
    printf("skip: thread bit-identity (serial build)\n");
    return;
#endif
    size_t nbig = 1500000; /* b is also the long sumsq input */
    G.a = rnd(TB_N, 1), G.b = rnd(nbig, 1), G.c = rnd(TB_N, 1), G.d = rnd(TB_N, 1.5f);
    G.out = th_alloc(4 * (size_t)TB_N), G.first = th_alloc(TB_N), G.ids = malloc(sizeof(int) * 600);
    for (int i = 0; i < 600; i++) G.ids[i] = i % 13 == 0 ? 7 : (int)rng_below(&rng, 50);
    for (int i = 0; i < TB_N; i++) G.first[i] = fabsf(G.c[i]) + 0.5f; /* rstd / act-like, > 0 */
    bitid("gemm_blocked NN", r_gemm_nn);
    bitid("gemm_blocked TT", r_gemm_tt);
    bitid("gemm_blocked GEMV", r_gemv);
    bitid("gemm", r_gemm_blas);
    bitid("linear_fwd", r_lin_fwd);
    bitid("linear_bwd", r_lin_bwd);
    static const struct { const char *name; void (*run)(void); } ours[] = {
        {"weightnorm_fwd", r_wn_fwd}, {"weightnorm_bwd", r_wn_bwd}, {"rmsnorm_fwd", r_rms_fwd},
        {"rmsnorm_bwd", r_rms_bwd}, {"gated_rmsnorm_fwd", r_grms_fwd},
        {"gated_rmsnorm_bwd", r_grms_bwd}, {"layernorm_fwd", r_ln_fwd}, {"layernorm_bwd", r_ln_bwd}, {"softmax", r_softmax}, {"xent_fwd", r_xent_fwd},
        {"xent_bwd", r_xent_bwd}, {"silu_fwd", r_silu_fwd}, {"silu_bwd", r_silu_bwd},
        {"swiglu_fwd", r_swiglu_fwd}, {"swiglu_bwd", r_swiglu_bwd}, {"softplus", r_softplus},
        {"sigmoid", r_sigmoid}, {"mul_sigmoid", r_mul_sigmoid}, {"mul_silu", r_mul_silu},
        {"neg_exp", r_neg_exp}, {"mul_dsilu", r_mul_dsilu}, {"mul_dsigmoid", r_mul_dsigmoid},
        {"mul_dsoftplus_out", r_mul_dsoftplus_out}, {"embed_fwd", r_embed_fwd}, {"embed_bwd", r_embed_bwd}, {"conv1d_fwd", r_conv_fwd}, {"conv1d_bwd", r_conv_bwd},
        {"conv1d_step", r_conv_step}, {"lstm_cell_fwd", r_lstm_fwd}, {"lstm_cell_bwd", r_lstm_bwd},
        {"adamw", r_adamw}, {"sumsq", r_sumsq}, {"axpby", r_axpby}, {"copy_rows", r_copy_rows},
        {"zero", r_zero}};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) bitid(ours[i].name, ours[i].run);
    th_threads_restore(1);
    free(G.a), free(G.b), free(G.c), free(G.d), free(G.out), free(G.first), free(G.ids);
}

int main(void) {
    th_name = "test_kernels";
    rng_seed(&rng, 1234, 7);
    k_set_threads(2);
    test_gemm();
    test_linear();
    test_weightnorm();
    test_norms();
    test_layernorm();
    test_foreach();
    test_softmax_xent();
    test_activations();
    test_gates();
    test_embed();
    test_conv1d();
    test_lstm();
    test_adamw();
    test_sumsq_axpby();
    test_copy_rows();
    test_zero();
    test_resid_rel_inf();
    test_resid_sumsq();
    test_threads();
    printf("max errors (fast vs ref | finite differences | directional/dot test):\n");
    for (int i = 0; i < n_worst; i++)
        printf("  %-18s %9.2e | %9.2e | %9.2e\n", worst[i].name, worst[i].e[E_PAR], worst[i].e[E_FD],
               worst[i].e[E_DIR]);
    return th_done();
}
