/* test_mamba2.c: the Mamba2 mixer layer (src/layers/mamba2.c, spec implicit-lm §1.4).
 *
 * 1. Forward and backward against a double-precision reference of §1.4 written here, in plain
 *    loops, independently of the kernels: the float y matches it, and every gradient of
 *    L = <dy, y> (x, u and all 8 parameter tensors) matches central finite differences
 *    (4-point stencil, in double, so the tolerance can be tight) on 4 sampled entries per tensor
 *    and along a random direction over the whole tensor; with and without u and a dropout mask,
 *    T = 10 and T = 70 (> SSD_CHUNK, so the scan's chunk-entry states are exercised).
 *    The dot-product test <J v, w> = <v, J^T w> for x and u runs on the float layer itself.
 *    Also: d* accumulate (+=), partial requests (dW = NULL, NULL fields) give the same numbers.
 * 2. Step vs parallel: committed steps equal the full forward, and the stepped state equals the
 *    prefill state; prefill of T0 tokens + steps equals the full forward; a non-committing step
 *    leaves the state untouched and returns the committing step's y.
 * 3. The no-grad forward (cache NULL) equals the caching forward bit for bit.
 * Scratch is poisoned with NaN before every call so a read of an unwritten temporary shows up.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/layers/mamba2.h"
#include "th.h"

#define NTENS 8
static const char *TNAMES[NTENS] = {"in_proj", "conv_w", "conv_b", "dt_bias",
                                    "A_log",   "Dskip",  "norm_w", "out_proj"};

/* One mixer instance plus every buffer a (B, T) call needs. */
typedef struct {
    Mamba2Cfg c;
    int B, T;
    size_t tsize[NTENS], np;
    float *p, *g;     /* parameter block and gradient block, (np) each */
    Mamba2W w, dw;    /* pointers into p and g */
    float *x, *u, *mask, *y, *dy, *dx, *du, *cache, *scratch;
    size_t nx, nu, nscr;
} Fix;

static void point(const Fix *f, float *base, Mamba2W *w) {
    float **fld[NTENS] = {&w->in_proj, &w->conv_w, &w->conv_b, &w->dt_bias,
                          &w->A_log,   &w->Dskip,  &w->norm_w, &w->out_proj};
    size_t off = 0;
    for (int i = 0; i < NTENS; i++) {
        *fld[i] = base + off;
        off += f->tsize[i];
    }
}

static float *tensor(const Mamba2W *w, int i) {
    float *fld[NTENS] = {w->in_proj, w->conv_w, w->conv_b, w->dt_bias,
                         w->A_log,   w->Dskip,  w->norm_w, w->out_proj};
    return fld[i];
}

/* Spec §1.4 inits, except dt drawn from [0.05, 0.5] (instead of [1e-3, 0.1]) so the scan mixes
 * visibly over 70 tokens, and norm_w / Dskip perturbed away from 1 so their gradients are
 * generic. */
static void fix_init(Fix *f, int B, int T, uint64_t seed) {
    memset(f, 0, sizeof(*f));
    mamba2_cfg_init(&f->c, 16, 2, 8, 8, 4, 1e-5f);
    const Mamba2Cfg *c = &f->c;
    f->B = B;
    f->T = T;
    size_t sz[NTENS] = {(size_t)c->K * c->D, (size_t)c->C * c->W, (size_t)c->C, (size_t)c->H,
                        (size_t)c->H, (size_t)c->H, (size_t)c->E, (size_t)c->D * c->E};
    for (int i = 0; i < NTENS; i++) f->np += (f->tsize[i] = sz[i]);
    f->p = th_alloc(f->np);
    f->g = th_alloc(f->np);
    point(f, f->p, &f->w);
    point(f, f->g, &f->dw);
    Rng r;
    rng_seed(&r, seed, 1);
    th_fill_uniform(f->w.in_proj, sz[0], &r, -0.25f, 0.25f);
    th_fill_uniform(f->w.conv_w, sz[1], &r, -0.5f, 0.5f);
    th_fill_uniform(f->w.conv_b, sz[2], &r, -0.5f, 0.5f);
    for (int h = 0; h < c->H; h++) {
        float dt = expf(rng_uniform_range(&r, logf(0.05f), logf(0.5f)));
        f->w.dt_bias[h] = dt + logf(-expm1f(-dt)); /* inverse softplus */
        f->w.A_log[h] = logf(rng_uniform_range(&r, 1.f, 16.f));
        f->w.Dskip[h] = 1.f + 0.2f * rng_normal(&r);
    }
    for (int e = 0; e < c->E; e++) f->w.norm_w[e] = 1.f + 0.2f * rng_normal(&r);
    th_fill_uniform(f->w.out_proj, sz[7], &r, -0.18f, 0.18f);

    f->nx = (size_t)B * T * c->D;
    f->nu = (size_t)B * T * c->K;
    f->x = th_alloc(f->nx);
    f->u = th_alloc(f->nu);
    f->mask = th_alloc((size_t)B * c->D);
    f->y = th_alloc(f->nx);
    f->dy = th_alloc(f->nx);
    f->dx = th_alloc(f->nx);
    f->du = th_alloc(f->nu);
    th_fill_normal(f->x, f->nx, &r, 1.f);
    th_fill_normal(f->u, f->nu, &r, 0.5f);
    th_fill_normal(f->dy, f->nx, &r, 1.f);
    for (int i = 0; i < B * c->D; i++) f->mask[i] = rng_uniform(&r) < 0.25f ? 0.f : 1.f / 0.75f;
    f->cache = th_alloc(mamba2_cache_floats(c, B, T));
    f->nscr = mamba2_scratch_floats(c, B, T);
    f->scratch = th_alloc(f->nscr);
}

static void fix_free(Fix *f) {
    float *all[] = {f->p,  f->g,  f->x,  f->u,     f->mask,   f->y,
                    f->dy, f->dx, f->du, f->cache, f->scratch};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
}

static void poison(float *a, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = NAN;
}

/* y = mixer(x, u) with the fixture's weights; cache may be NULL. */
static void fwd(Fix *f, const float *u, const float *mask, float *cache) {
    poison(f->scratch, f->nscr);
    mamba2_fwd(&f->c, &f->w, f->y, f->x, u, mask, cache, f->scratch, NULL, f->B, f->T);
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double loss(Fix *f, const float *u, const float *mask) {
    fwd(f, u, mask, NULL);
    return dot(f->dy, f->y, f->nx);
}

/* d/dh L(p + h v) at h = 0 by the 4-point stencil; p is restored exactly afterwards. */
static double fd_dir(Fix *f, float *p, const float *v, size_t n, float h, const float *u,
                     const float *mask) {
    static const double cf[4] = {1, -8, 8, -1}, st[4] = {-2, -1, 1, 2};
    float *save = th_alloc(n);
    memcpy(save, p, n * sizeof(float));
    double acc = 0;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) p[i] = save[i] + (float)(st[k] * h) * v[i];
        acc += cf[k] * loss(f, u, mask);
    }
    memcpy(p, save, n * sizeof(float));
    free(save);
    return acc / (12.0 * h);
}

/* Analytic gradients of L = <dy, y>: zero f->g, f->dx, f->du and run fwd (cached) + bwd. */
static void grads(Fix *f, const float *u, const float *mask) {
    memset(f->g, 0, f->np * sizeof(float));
    memset(f->dx, 0, f->nx * sizeof(float));
    memset(f->du, 0, f->nu * sizeof(float));
    poison(f->cache, mamba2_cache_floats(&f->c, f->B, f->T));
    fwd(f, u, mask, f->cache);
    poison(f->scratch, f->nscr);
    mamba2_bwd(&f->c, &f->w, &f->dw, f->dx, u ? f->du : NULL, f->dy, f->x, u, mask, f->cache,
               f->scratch, f->B, f->T);
}

static double worst_entry, worst_dir, worst_dot, worst_ref; /* measured errors, printed at end */
static double worst_t[NTENS + 2];                   /* per tensor: params, then x, u */

static int tensor_slot(const char *name) {
    for (int i = 0; i < NTENS; i++)
        if (!strcmp(name, TNAMES[i])) return i;
    return name[0] == 'x' ? NTENS : NTENS + 1;
}

/* ---- double-precision reference of spec §1.4, written independently of the kernels ------ *
 * One double block z = parameters (fixture layout) | x (B,T,D) | u (B,T,K) holds every input,
 * so finite differences perturb it in double: no float noise in L, which lets the gradient
 * tolerances be tight. The float forward is checked against it too. */
static double dsilu(double v) { return v / (1.0 + exp(-v)); }
static double dsoftplus(double v) { return v > 20.0 ? v : log1p(exp(v)); }

static void ref_fwd(const Fix *f, double *y, const double *z, int use_u, const float *mask) {
    const Mamba2Cfg *c = &f->c;
    const int D = c->D, E = c->E, N = c->N, P = c->P, H = c->H, W = c->W, K = c->K, C = c->C;
    const int T = f->T;
    size_t o[NTENS + 1] = {0};
    for (int i = 0; i < NTENS; i++) o[i + 1] = o[i] + f->tsize[i];
    const double *in_proj = z + o[0], *conv_w = z + o[1], *conv_b = z + o[2], *dt_bias = z + o[3],
                 *A_log = z + o[4], *Dskip = z + o[5], *norm_w = z + o[6], *out_proj = z + o[7];
    const double *x = z + f->np, *u = z + f->np + f->nx;
    double *pre = malloc(sizeof(double) * ((size_t)T * C + (size_t)H * P * N + K + C + 2 * E));
    double *S = pre + (size_t)T * C, *zx = S + (size_t)H * P * N, *xa = zx + K, *ys = xa + C;
    double *yn = ys + E;
    for (int b = 0; b < f->B; b++) {
        memset(S, 0, sizeof(double) * H * P * N);
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            for (int k = 0; k < K; k++) { /* zx = in_proj x + u */
                double a = use_u ? u[bt * K + k] : 0.0;
                for (int d = 0; d < D; d++) a += in_proj[(size_t)k * D + d] * x[bt * D + d];
                zx[k] = a;
            }
            memcpy(pre + (size_t)t * C, zx + E, sizeof(double) * C);
            for (int ch = 0; ch < C; ch++) { /* causal conv, then silu */
                double a = conv_b[ch];
                for (int k = 0; k < W; k++) {
                    int ts = t - W + 1 + k; /* negative times are the zero padding */
                    if (ts >= 0) a += conv_w[ch * W + k] * pre[(size_t)ts * C + ch];
                }
                xa[ch] = dsilu(a);
            }
            const double *xs = xa, *Bm = xa + E, *Cm = xa + E + N;
            for (int h = 0; h < H; h++) { /* S = exp(dt A) S + dt xs Bm^T;  ys = S Cm + D xs */
                double dt = dsoftplus(zx[E + C + h] + dt_bias[h]), al = exp(-dt * exp(A_log[h]));
                for (int p = 0; p < P; p++) {
                    double *Sp = S + ((size_t)h * P + p) * N, a = Dskip[h] * xs[h * P + p];
                    for (int n = 0; n < N; n++) {
                        Sp[n] = al * Sp[n] + dt * xs[h * P + p] * Bm[n];
                        a += Sp[n] * Cm[n];
                    }
                    ys[h * P + p] = a;
                }
            }
            double ms = 0; /* gated RMSNorm: v = ys silu(zgate), v rstd(v) w */
            for (int e = 0; e < E; e++) {
                ys[e] *= dsilu(zx[e]);
                ms += ys[e] * ys[e];
            }
            double rs = 1.0 / sqrt(ms / E + c->eps);
            for (int e = 0; e < E; e++) yn[e] = ys[e] * rs * norm_w[e];
            for (int d = 0; d < D; d++) { /* out_proj, dropout mask */
                double a = 0;
                for (int e = 0; e < E; e++) a += out_proj[(size_t)d * E + e] * yn[e];
                y[bt * D + d] = a * (mask ? mask[(size_t)b * D + d] : 1.0);
            }
        }
    }
    free(pre);
}

static double ref_loss(const Fix *f, const double *z, int use_u, const float *mask, double *y) {
    ref_fwd(f, y, z, use_u, mask);
    double s = 0;
    for (size_t i = 0; i < f->nx; i++) s += f->dy[i] * y[i];
    return s;
}

/* d/dh L_ref(z + h v) at h = 0, 4-point stencil in double (error O(h^4) + 1e-16 |L| / h). */
static double ref_fd(const Fix *f, double *z, const double *v, size_t off, size_t n, double h,
                     int use_u, const float *mask, double *y) {
    static const double cf[4] = {1, -8, 8, -1}, st[4] = {-2, -1, 1, 2};
    double *save = malloc(sizeof(double) * n), acc = 0;
    memcpy(save, z + off, sizeof(double) * n);
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) z[off + i] = save[i] + st[k] * h * v[i];
        acc += cf[k] * ref_loss(f, z, use_u, mask, y);
    }
    memcpy(z + off, save, sizeof(double) * n);
    free(save);
    return acc / (12.0 * h);
}

/* Check the float gradient g:(n) of the tensor at z[off..off+n) against the reference:
 * 4 sampled entries (error relative to max|g|), then a random direction v (error relative to
 * max(|<v,g>|, ||v*g||), the typical size of <v,g>, so an unlucky cancellation does not count). */
static void check_tensor(const Fix *f, const char *name, double *z, size_t off, const float *g,
                         size_t n, int use_u, const float *mask, Rng *r) {
    double gmax = 1e-12, ss = 0;
    for (size_t i = 0; i < n; i++) {
        gmax = fmax(gmax, fabs(g[i]));
        ss += z[off + i] * z[off + i];
    }
    const double h = 1e-3 * sqrt(ss / (double)n); /* relative step */
    double *v = calloc(n, sizeof(double)), *y = malloc(sizeof(double) * f->nx), err = 0;
    for (int s = 0; s < 4; s++) {
        size_t i = rng_below(r, (uint32_t)n);
        v[i] = 1.0;
        err = fmax(err, fabs(ref_fd(f, z, v, off, n, h, use_u, mask, y) - g[i]) / gmax);
        v[i] = 0.0;
    }
    TH_CHECK(err < 2e-5, "%s (T=%d%s%s): entry err %.3g (max|g| %.3g)", name, f->T,
             use_u ? " u" : "", mask ? " mask" : "", err, gmax);
    double an = 0, typ = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = rng_normal(r);
        an += v[i] * g[i];
        typ += v[i] * g[i] * v[i] * g[i];
    }
    double fd = ref_fd(f, z, v, off, n, h, use_u, mask, y);
    double derr = fabs(fd - an) / fmax(fabs(an), sqrt(typ));
    TH_CHECK(derr < 2e-5, "%s (T=%d%s%s): directional fd %.8g vs %.8g (rel %.3g)", name, f->T,
             use_u ? " u" : "", mask ? " mask" : "", fd, an, derr);
    int slot = tensor_slot(name);
    worst_entry = fmax(worst_entry, err);
    worst_dir = fmax(worst_dir, derr);
    worst_t[slot] = fmax(worst_t[slot], fmax(err, derr));
    free(v);
    free(y);
}

static void test_grad(int T, int use_u, int use_mask) {
    Fix f;
    fix_init(&f, 2, T, 100 + T);
    Rng r;
    rng_seed(&r, 7 + T + 2 * use_u + use_mask, 3);
    const float *u = use_u ? f.u : NULL, *mask = use_mask ? f.mask : NULL;
    grads(&f, u, mask);
    size_t nz = f.np + f.nx + f.nu;
    double *z = malloc(sizeof(double) * nz), *yr = malloc(sizeof(double) * f.nx);
    for (size_t i = 0; i < f.np; i++) z[i] = f.p[i];
    for (size_t i = 0; i < f.nx; i++) z[f.np + i] = f.x[i];
    for (size_t i = 0; i < f.nu; i++) z[f.np + f.nx + i] = f.u[i];
    /* the float forward against the reference */
    ref_fwd(&f, yr, z, use_u, mask);
    float *yrf = th_alloc(f.nx);
    for (size_t i = 0; i < f.nx; i++) yrf[i] = (float)yr[i];
    double e = th_rel_err(f.y, yrf, f.nx);
    TH_CHECK(e < 1e-5, "fwd vs double reference (T=%d u=%d mask=%d): rel err %.3g", T, use_u,
             use_mask, e);
    worst_ref = fmax(worst_ref, e);
    check_tensor(&f, "x", z, f.np, f.dx, f.nx, use_u, mask, &r);
    if (use_u) check_tensor(&f, "u", z, f.np + f.nx, f.du, f.nu, use_u, mask, &r);
    size_t off = 0;
    for (int i = 0; i < NTENS; i++) {
        check_tensor(&f, TNAMES[i], z, off, tensor(&f.dw, i), f.tsize[i], use_u, mask, &r);
        off += f.tsize[i];
    }
    free(z);
    free(yr);
    free(yrf);
    fix_free(&f);
}

/* <J v, w> = <v, J^T w> for the input ("x" or "u"): J v by finite differences of y, J^T w from
 * mamba2_bwd with dy = w. */
static void test_dot(int T, int wrt_u, int use_mask) {
    Fix f;
    fix_init(&f, 2, T, 300 + T);
    Rng r;
    rng_seed(&r, 11 + T + 2 * wrt_u + use_mask, 5);
    const float *mask = use_mask ? f.mask : NULL;
    float *in = wrt_u ? f.u : f.x, *gin = wrt_u ? f.du : f.dx;
    size_t n = wrt_u ? f.nu : f.nx;
    th_fill_normal(f.dy, f.nx, &r, 1.f); /* w */
    grads(&f, f.u, mask);
    float *v = th_alloc(n);
    th_fill_normal(v, n, &r, 1.f);
    double vjtw = dot(v, gin, n), typ = 0;
    for (size_t i = 0; i < n; i++) typ += (double)v[i] * gin[i] * v[i] * gin[i];
    double jvw = fd_dir(&f, in, v, n, 1e-2f, f.u, mask); /* = <J v, w> since L = <w, y> */
    /* relative to the typical size of <v, J^T w> (float noise in the FD is absolute) */
    double err = fabs(jvw - vjtw) / fmax(fabs(vjtw), sqrt(typ));
    TH_CHECK(err < 2e-4, "dot test wrt %s (T=%d%s): <Jv,w> %.7g vs <v,J^T w> %.7g (rel %.3g)",
             wrt_u ? "u" : "x", T, use_mask ? " mask" : "", jvw, vjtw, err);
    worst_dot = fmax(worst_dot, err);
    free(v);
    fix_free(&f);
}

/* d* accumulate, and asking for fewer gradients does not change the ones asked for. */
static void test_accumulate(void) {
    Fix f;
    fix_init(&f, 2, 10, 77);
    grads(&f, f.u, f.mask);
    float *g1 = th_alloc(f.np), *dx1 = th_alloc(f.nx), *du1 = th_alloc(f.nu);
    memcpy(g1, f.g, f.np * sizeof(float));
    memcpy(dx1, f.dx, f.nx * sizeof(float));
    memcpy(du1, f.du, f.nu * sizeof(float));
    /* second backward on top of the first: everything doubles */
    poison(f.scratch, f.nscr);
    mamba2_bwd(&f.c, &f.w, &f.dw, f.dx, f.du, f.dy, f.x, f.u, f.mask, f.cache, f.scratch, 2, 10);
    for (size_t i = 0; i < f.np; i++) g1[i] *= 2.f;
    for (size_t i = 0; i < f.nx; i++) dx1[i] *= 2.f;
    for (size_t i = 0; i < f.nu; i++) du1[i] *= 2.f;
    TH_CLOSE(f.g, g1, f.np, 1e-6, "dW accumulates");
    TH_CLOSE(f.dx, dx1, f.nx, 1e-6, "dx accumulates");
    TH_CLOSE(f.du, du1, f.nu, 1e-6, "du accumulates");
    /* dW = NULL and du = NULL: dx alone */
    memset(f.dx, 0, f.nx * sizeof(float));
    poison(f.scratch, f.nscr);
    mamba2_bwd(&f.c, &f.w, NULL, f.dx, NULL, f.dy, f.x, f.u, f.mask, f.cache, f.scratch, 2, 10);
    for (size_t i = 0; i < f.nx; i++) dx1[i] *= 0.5f;
    TH_CLOSE(f.dx, dx1, f.nx, 1e-6, "dx with dW = NULL");
    /* some dW fields NULL: the remaining ones are unchanged, the NULL ones untouched */
    Mamba2W part = f.dw;
    part.in_proj = part.A_log = NULL;
    memset(f.g, 0, f.np * sizeof(float));
    poison(f.scratch, f.nscr);
    mamba2_bwd(&f.c, &f.w, &part, NULL, NULL, f.dy, f.x, f.u, f.mask, f.cache, f.scratch, 2, 10);
    for (size_t i = 0; i < f.np; i++) g1[i] *= 0.5f;
    for (int i = 0; i < NTENS; i++) {
        size_t off = (size_t)(tensor(&f.dw, i) - f.g);
        int skipped = (i == 0 || i == 4);
        double z = 0;
        for (size_t k = 0; k < f.tsize[i]; k++) z = fmax(z, fabs(f.g[off + k]));
        if (skipped) TH_CHECK(z == 0, "NULL dW field %s was written", TNAMES[i]);
        else TH_CLOSE(f.g + off, g1 + off, f.tsize[i], 1e-6, TNAMES[i]);
    }
    free(g1);
    free(dx1);
    free(du1);
    fix_free(&f);
}

/* ---- step vs parallel ------------------------------------------------------------------- */

/* dst:(B, t1-t0, F) = src[:, t0:t1, :] of src:(B, T, F) */
static void slice(float *dst, const float *src, int B, int T, int F, int t0, int t1) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * (t1 - t0) * F, src + ((size_t)b * T + t0) * F,
               sizeof(float) * (size_t)(t1 - t0) * F);
}

/* dst[:, t0:t1, :] of dst:(B, T, F) = src:(B, t1-t0, F) */
static void unslice(float *dst, const float *src, int B, int T, int F, int t0, int t1) {
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * T + t0) * F, src + (size_t)b * (t1 - t0) * F,
               sizeof(float) * (size_t)(t1 - t0) * F);
}

/* Committing steps t0..T-1 from `state` (updated in place); outputs go to y:(B,T,D)[:, t0:]. */
static void run_steps(Fix *f, float *y, const float *u, float *state, float *scr, size_t nscr,
                      int t0) {
    const Mamba2Cfg *c = &f->c;
    int B = f->B, T = f->T;
    float *xt = th_alloc((size_t)B * c->D), *ut = th_alloc((size_t)B * c->K);
    float *yt = th_alloc((size_t)B * c->D);
    for (int t = t0; t < T; t++) {
        slice(xt, f->x, B, T, c->D, t, t + 1);
        if (u) slice(ut, u, B, T, c->K, t, t + 1);
        poison(scr, nscr);
        mamba2_step(c, &f->w, yt, xt, u ? ut : NULL, state, state, scr, B);
        unslice(y, yt, B, T, c->D, t, t + 1);
    }
    free(xt);
    free(ut);
    free(yt);
}

/* Compare the conv and ssm parts of two states separately (their scales differ). */
static void close_states(const Fix *f, const float *a, const float *b, const char *what) {
    size_t nconv = (size_t)f->B * f->c.C * f->c.W, n = mamba2_state_floats(&f->c, f->B);
    char name[96];
    snprintf(name, sizeof name, "%s: conv_state", what);
    TH_CLOSE(a, b, nconv, 1e-5, name);
    snprintf(name, sizeof name, "%s: ssm_state", what);
    TH_CLOSE(a + nconv, b + nconv, n - nconv, 1e-5, name);
}

static double worst_step;

static void test_step(int T, int use_u, int T0) {
    Fix f;
    fix_init(&f, 2, T, 500 + T);
    const Mamba2Cfg *c = &f.c;
    const int B = f.B;
    const float *u = use_u ? f.u : NULL;
    size_t ns = mamba2_state_floats(c, B), nscr = mamba2_step_scratch_floats(c, B);
    float *st_full = th_alloc(ns), *st = th_alloc(ns), *st2 = th_alloc(ns), *st3 = th_alloc(ns);
    float *scr = th_alloc(nscr), *y_par = th_alloc(f.nx), *y_st = th_alloc(f.nx);
    char name[96];

    /* full forward with prefill (state_out poisoned: it must be written entirely) */
    poison(st_full, ns);
    poison(f.scratch, f.nscr);
    mamba2_fwd(c, &f.w, y_par, f.x, u, NULL, NULL, f.scratch, st_full, B, T);

    /* T committed steps from the zero state */
    memset(st, 0, ns * sizeof(float));
    run_steps(&f, y_st, u, st, scr, nscr, 0);
    snprintf(name, sizeof name, "steps vs fwd (T=%d%s)", T, use_u ? " u" : "");
    TH_CLOSE(y_st, y_par, f.nx, 1e-5, name);
    worst_step = fmax(worst_step, th_rel_err(y_st, y_par, f.nx));
    close_states(&f, st, st_full, name);

    /* prefill of T0 tokens (its y too), then steps */
    Fix p = f; /* shallow view with T = T0 over copies of the first T0 tokens */
    p.T = T0;
    p.x = th_alloc((size_t)B * T0 * c->D);
    p.u = th_alloc((size_t)B * T0 * c->K);
    p.y = th_alloc((size_t)B * T0 * c->D);
    slice(p.x, f.x, B, T, c->D, 0, T0);
    slice(p.u, f.u, B, T, c->K, 0, T0);
    poison(st2, ns);
    poison(f.scratch, f.nscr);
    mamba2_fwd(c, &f.w, p.y, p.x, u ? p.u : NULL, NULL, NULL, f.scratch, st2, B, T0);
    memset(y_st, 0, f.nx * sizeof(float));
    unslice(y_st, p.y, B, T, c->D, 0, T0);
    memcpy(st, st2, ns * sizeof(float));
    run_steps(&f, y_st, u, st, scr, nscr, T0);
    snprintf(name, sizeof name, "prefill %d + steps vs fwd (T=%d%s)", T0, T, use_u ? " u" : "");
    TH_CLOSE(y_st, y_par, f.nx, 1e-5, name);
    worst_step = fmax(worst_step, th_rel_err(y_st, y_par, f.nx));
    close_states(&f, st, st_full, name);

    /* a prefill with a dropout mask leaves the same state (the mask only scales y) */
    poison(st3, ns);
    poison(f.scratch, f.nscr);
    mamba2_fwd(c, &f.w, p.y, p.x, u ? p.u : NULL, f.mask, NULL, f.scratch, st3, B, T0);
    TH_CHECK(memcmp(st3, st2, ns * sizeof(float)) == 0, "prefill state depends on the mask");

    /* token T0 from the prefilled state: non-committing, committing elsewhere, in place */
    float *xt = th_alloc((size_t)B * c->D), *ut = th_alloc((size_t)B * c->K);
    float *ya = th_alloc((size_t)B * c->D), *yb = th_alloc((size_t)B * c->D);
    float *yc = th_alloc((size_t)B * c->D);
    slice(xt, f.x, B, T, c->D, T0, T0 + 1);
    slice(ut, f.u, B, T, c->K, T0, T0 + 1);
    memcpy(st, st2, ns * sizeof(float));
    poison(scr, nscr);
    mamba2_step(c, &f.w, ya, xt, u ? ut : NULL, st2, NULL, scr, B);
    TH_CHECK(memcmp(st, st2, ns * sizeof(float)) == 0, "non-committing step changed the state");
    poison(st3, ns);
    poison(scr, nscr);
    mamba2_step(c, &f.w, yb, xt, u ? ut : NULL, st2, st3, scr, B);
    TH_CHECK(memcmp(st, st2, ns * sizeof(float)) == 0, "step into state_out changed state_in");
    poison(scr, nscr);
    mamba2_step(c, &f.w, yc, xt, u ? ut : NULL, st2, st2, scr, B);
    TH_CHECK(memcmp(ya, yb, (size_t)B * c->D * sizeof(float)) == 0 &&
                 memcmp(ya, yc, (size_t)B * c->D * sizeof(float)) == 0,
             "non-committing and committing steps give different y (T0=%d)", T0);
    TH_CHECK(memcmp(st2, st3, ns * sizeof(float)) == 0, "in-place commit != commit elsewhere");
    TH_CHECK(memcmp(st2, st, ns * sizeof(float)) != 0, "committing step did not change the state");

    float *frees[] = {st_full, st, st2, st3, scr, y_par, y_st, p.x, p.u, p.y, xt, ut, ya, yb, yc};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    fix_free(&f);
}

/* The no-grad forward (cache NULL) gives the caching forward's y and prefill state, bit for bit. */
static void test_nocache(int T) {
    Fix f;
    fix_init(&f, 2, T, 900 + T);
    size_t ns = mamba2_state_floats(&f.c, f.B);
    float *y1 = th_alloc(f.nx), *s1 = th_alloc(ns), *s2 = th_alloc(ns);
    for (int m = 0; m < 2; m++) {
        const float *mask = m ? f.mask : NULL;
        poison(f.scratch, f.nscr);
        mamba2_fwd(&f.c, &f.w, y1, f.x, f.u, mask, f.cache, f.scratch, s1, f.B, T);
        poison(f.scratch, f.nscr);
        mamba2_fwd(&f.c, &f.w, f.y, f.x, f.u, mask, NULL, f.scratch, s2, f.B, T);
        TH_CHECK(memcmp(y1, f.y, f.nx * sizeof(float)) == 0, "cache NULL changes y (T=%d mask=%d)",
                 T, m);
        TH_CHECK(memcmp(s1, s2, ns * sizeof(float)) == 0, "cache NULL changes state (T=%d)", T);
    }
    free(y1);
    free(s1);
    free(s2);
    fix_free(&f);
}

int main(void) {
    th_name = "test_mamba2";
    for (int T = 10; T <= 70; T += 60)
        for (int m = 0; m < 2; m++) {
            test_grad(T, 1, m);
            test_dot(T, 0, m);
            test_dot(T, 1, m);
        }
    test_grad(10, 0, 0);
    test_accumulate();
    for (int uu = 0; uu < 2; uu++) {
        test_step(10, uu, 2);  /* T0 < W: left zero-padded conv_state */
        test_step(10, uu, 7);
        test_step(70, uu, 65); /* prefill crosses the scan chunk */
    }
    test_nocache(10);
    test_nocache(70);
    printf("measured: fwd vs double ref %.3g, sampled-entry grad err %.3g (of max|g|), "
           "directional %.3g, dot test %.3g, step-vs-fwd %.3g\n", worst_ref, worst_entry,
           worst_dir, worst_dot, worst_step);
    printf("measured fd err per tensor:");
    for (int i = 0; i < NTENS + 2; i++)
        printf(" %s %.2g", i < NTENS ? TNAMES[i] : (i == NTENS ? "x" : "u"), worst_t[i]);
    printf("\n");
    return th_done();
}
