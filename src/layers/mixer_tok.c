/* mixer_tok.c: the per-token math of the simple channel mixers (spec fp-rnn §2.1-§2.5), forward and
 * backward, on the activated projection outputs of one token (see mixer.h).
 *
 * The backward recomputes every intermediate from the activated projections (cheap next to the
 * projections themselves) and then walks the forward in reverse; the formulas are those of spec
 * §3.5 (Householder step, Kronecker) plus the chain rule through normalize, L L^T, the row / column
 * normalisations and the power iterations, which are differentiated step by step as torch does.
 * Everything here is serial: the caller runs one token per OpenMP iteration.
 * TOK_OPS at the end is the table of simple mixers: one row (projection layout, workspace size,
 * forward, backward) per MixerType below MIX_N_SIMPLE; mixer.c dispatches through it only.
 */
#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/cpu/vmath.h"
#include "mixer.h"

#define PI_EPS 1e-12f /* F.normalize's default eps, used by the spectral power iteration (§2.3) */

/* Lane-parallel (vmath.h): a left-to-right sum is one chain of dependent adds, and the Householder
 * and DPLR mixers take two dots of width E per reflection, token and solver iteration. */
static float dotf(const float *a, const float *b, int n) { return dot_lanes(a, b, n); }

static void axpy(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Gradient through y = x / max(||x||, eps) given y (u), ||x|| (n) and dy; written into dx.
 * torch's clamp_min passes the gradient to the norm only while ||x|| >= eps. */
static void normalize_bwd(float *dx, const float *dy, const float *u, float n, float eps, int len) {
    if (n >= eps) {
        float c = dotf(u, dy, len);
        for (int i = 0; i < len; i++) dx[i] = (dy[i] - c * u[i]) / n;
    } else {
        for (int i = 0; i < len; i++) dx[i] = dy[i] / eps;
    }
}

void mixer_triu_fill(float *L, const float *P, int m) {
    memset(L, 0, (size_t)m * m * sizeof(float));
    for (int i = 0, k = 0; i < m; i++)
        for (int j = i; j < m; j++) L[i * m + j] = P[k++];
}

/* dP (triu order) = the upper triangle of (dK + dK^T) L, the gradient of K = L L^T.  S:(m,m) temp. */
static void llt_bwd(float *dP, const float *dK, const float *L, int m, float *S) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) S[i * m + j] = dK[i * m + j] + dK[j * m + i];
    for (int i = 0, k = 0; i < m; i++)
        for (int j = i; j < m; j++) {
            float s = 0;
            for (int l = 0; l <= j; l++) s += S[i * m + l] * L[l * m + j];
            dP[k++] = s;
        }
}

/* K = L L^T for upper-triangular L (K symmetric, computed once per pair). */
static void llt(float *K, const float *L, int m) {
    for (int i = 0; i < m; i++)
        for (int j = i; j < m; j++) {
            float s = 0;
            for (int l = j; l < m; l++) s += L[i * m + l] * L[j * m + l];
            K[i * m + j] = K[j * m + i] = s;
        }
}

static void matvec(float *y, const float *A, const float *x, int m) {
    for (int i = 0; i < m; i++) y[i] = dotf(A + (size_t)i * m, x, m);
}

static void matvec_t(float *y, const float *A, const float *x, int m) {
    memset(y, 0, (size_t)m * sizeof(float));
    for (int i = 0; i < m; i++) axpy(y, x[i], A + (size_t)i * m, m);
}

/* ---- power iterations ------------------------------------------------------------------------- */

float mixer_spectral_est(const float *A, int m, float *w, float *nrm) {
    CHECK(w && nrm && m > 0, "mixer_spectral_est: needs iterate and norm buffers");
    for (int i = 0; i < m; i++) w[i] = 1.0f / sqrtf((float)m);
    /* w_{k+1} = normalize(A w_k): the code's u/v alternation applies A (not A^T) both ways, so
     * u = w_15 and v = w_16 are just consecutive iterates */
    for (int k = 0; k < 16; k++) {
        float *y = w + (size_t)(k + 1) * m;
        matvec(y, A, w + (size_t)k * m, m);
        float n = sqrtf(dotf(y, y, m));
        nrm[k] = n;
        float den = n > PI_EPS ? n : PI_EPS;
        for (int i = 0; i < m; i++) y[i] /= den;
    }
    float *t = w + (size_t)17 * m; /* caller provides 18 m: one scratch row */
    matvec(t, A, w + (size_t)16 * m, m);
    return dotf(w + (size_t)15 * m, t, m);
}

/* dA += ds * d s / dA through the 16 steps of mixer_spectral_est.  tmp:(3 m). */
static void spectral_bwd(float *dA, const float *A, int m, const float *w, const float *nrm, float ds,
                         float *tmp) {
    const float *u = w + (size_t)15 * m, *v = w + (size_t)16 * m;
    float *gk = tmp, *gp = tmp + m, *dy = tmp + 2 * m;
    for (int i = 0; i < m; i++) axpy(dA + (size_t)i * m, ds * u[i], v, m);
    matvec_t(gk, A, u, m); /* d s / d v = A^T u */
    matvec(gp, A, v, m);   /* d s / d u = A v */
    for (int i = 0; i < m; i++) gk[i] *= ds, gp[i] *= ds;
    for (int k = 16; k >= 1; k--) {
        const float *wk = w + (size_t)k * m, *wp = w + (size_t)(k - 1) * m;
        normalize_bwd(dy, gk, wk, nrm[k - 1], PI_EPS, m);
        for (int i = 0; i < m; i++) axpy(dA + (size_t)i * m, dy[i], wp, m);
        if (k == 1) break; /* w_0 is a constant */
        /* gradient on w_{k-1}: what it already had (gp) plus A^T dy */
        for (int i = 0; i < m; i++) axpy(gp, dy[i], A + (size_t)i * m, m);
        memcpy(gk, gp, (size_t)m * sizeof(float));
        memset(gp, 0, (size_t)m * sizeof(float));
    }
}

/* Packed upper-triangular L (row i holds L[i][i..d-1] starting at i d - i(i-1)/2): pointer such
 * that row[j] = L[i][j] for j >= i. */
static const float *tri_row(const float *P, int d, int i) {
    return P + (size_t)i * d - (size_t)i * (i - 1) / 2 - i;
}

static void tri_tmv(float *z, const float *P, int d, const float *x) { /* z = L^T x */
    memset(z, 0, (size_t)d * sizeof(float));
    for (int i = 0; i < d; i++) {
        const float *row = tri_row(P, d, i);
        for (int j = i; j < d; j++) z[j] += row[j] * x[i];
    }
}

static void tri_mv(float *y, const float *P, int d, const float *z) { /* y = L z */
    for (int i = 0; i < d; i++) {
        const float *row = tri_row(P, d, i);
        float s = 0;
        for (int j = i; j < d; j++) s += row[j] * z[j];
        y[i] = s;
    }
}

/* dP += triu((a b^T + b a^T) L) = a (L^T b)^T + b (L^T a)^T on the triangle; c = L^T b, e = L^T a. */
static void tri_rank2(float *dP, int d, float s, const float *a, const float *c, const float *b,
                      const float *e) {
    for (int i = 0; i < d; i++) {
        float *row = dP + (size_t)i * d - (size_t)i * (i - 1) / 2 - i;
        float ai = s * a[i], bi = s * b[i];
        for (int j = i; j < d; j++) row[j] += ai * c[j] + bi * e[j];
    }
}

float mixer_sd_power(const float *P, int d, float eps, float *ws, float *zs, float *ys, float *es) {
    for (int i = 0; i < d; i++) ws[i] = 1.0f / sqrtf((float)d);
    float e = 0;
    for (int k = 0; k < 32; k++) {
        float *z = zs + (size_t)k * d, *y = ys + (size_t)k * d, *wn = ws + (size_t)(k + 1) * d;
        tri_tmv(z, P, d, ws + (size_t)k * d);
        tri_mv(y, P, d, z);
        e = sqrtf(dotf(y, y, d));
        es[k] = e;
        for (int i = 0; i < d; i++) wn[i] = y[i] / (e + eps);
    }
    return e;
}

/* ---- Householder product (§2.1) and DPLR (§2.2) ------------------------------------------------ */

static void hh_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    (void)work;
    memcpy(y, x, (size_t)d * sizeof(float));
    for (int i = 0; i < s->r; i++) {
        const float *U = act[0] + (size_t)i * d;
        float den = fmaxf(sqrtf(dotf(U, U, d)), s->eps);
        float c = dotf(U, y, d) / den;
        axpy(y, -2.0f * act[1][i] * c / den, U, d);
    }
}

static void hh_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *gin, float *dx,
                   int want, float *work) {
    int r = s->r;
    float *u = work, *xs = u + (size_t)r * d, *nrm = xs + (size_t)r * d, *al = nrm + r, *du = al + r;
    for (int i = 0; i < r; i++) {
        const float *U = act[0] + (size_t)i * d;
        nrm[i] = sqrtf(dotf(U, U, d));
        float den = fmaxf(nrm[i], s->eps);
        for (int j = 0; j < d; j++) u[(size_t)i * d + j] = U[j] / den;
        al[i] = act[1][i];
    }
    memcpy(xs, x, (size_t)d * sizeof(float)); /* xs[i] = input of reflection i */
    for (int i = 0; i + 1 < r; i++) {
        float *xi = xs + (size_t)i * d, *xn = xi + d;
        const float *ui = u + (size_t)i * d;
        memcpy(xn, xi, (size_t)d * sizeof(float));
        axpy(xn, -2.0f * al[i] * dotf(ui, xi, d), ui, d);
    }
    float *g = dx;
    memcpy(g, gin, (size_t)d * sizeof(float));
    for (int i = r - 1; i >= 0; i--) {
        const float *ui = u + (size_t)i * d, *xi = xs + (size_t)i * d;
        float c = dotf(ui, xi, d), e = dotf(ui, g, d);
        if (want) {
            /* v' = v - 2a u (u.v):  du = -2a((u.v) g + (u.g) v),  da = -2 (u.v)(u.g)   (§3.5) */
            for (int j = 0; j < d; j++) du[j] = -2.0f * al[i] * (c * g[j] + e * xi[j]);
            normalize_bwd(act[0] + (size_t)i * d, du, ui, nrm[i], s->eps, d);
            act[1][i] = -2.0f * c * e;
        }
        axpy(g, -2.0f * al[i] * e, ui, d);
    }
}

static void dplr_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    (void)work;
    memcpy(y, x, (size_t)d * sizeof(float));
    for (int i = 0; i < s->r; i++) {
        const float *U = act[0] + (size_t)i * d;
        float den = fmaxf(sqrtf(dotf(U, U, d)), s->eps);
        float c = dotf(U, x, d) / den; /* every term reads the ORIGINAL x */
        axpy(y, -2.0f * act[1][i] * c / den, U, d);
    }
}

static void dplr_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx,
                     int want, float *work) {
    int r = s->r;
    float *u = work, *nrm = u + (size_t)r * d, *du = nrm + r;
    memcpy(dx, g, (size_t)d * sizeof(float));
    for (int i = 0; i < r; i++) {
        float *ui = u + (size_t)i * d;
        const float *U = act[0] + (size_t)i * d;
        nrm[i] = sqrtf(dotf(U, U, d));
        float den = fmaxf(nrm[i], s->eps);
        for (int j = 0; j < d; j++) ui[j] = U[j] / den;
        float al = act[1][i], c = dotf(ui, x, d), e = dotf(ui, g, d);
        axpy(dx, -2.0f * al * e, ui, d); /* Q is symmetric: dx = Q g */
        if (want) {
            for (int j = 0; j < d; j++) du[j] = -2.0f * al * (c * g[j] + e * x[j]);
            normalize_bwd(act[0] + (size_t)i * d, du, ui, nrm[i], s->eps, d);
            act[1][i] = -2.0f * c * e;
        }
    }
}

/* ---- Kronecker (§2.3) --------------------------------------------------------------------------- */

/* One factor: U = diag(delta) Kh, Kh = N (/(s + eps) when spectral), N = row-normalised L L^T. */
typedef struct {
    int m;
    float *L, *N, *Kh, *U, *rn, *pw, *pn, *dU, *T;
    float s;
} KFac;

static size_t kfac_floats(int m) { return (size_t)7 * m * m + 22 * (size_t)m + 16; }

static float *kfac_carve(KFac *f, int m, float *w) {
    size_t mm = (size_t)m * m;
    f->m = m;
    f->L = w;
    f->N = w + mm;
    f->Kh = w + 2 * mm;
    f->U = w + 3 * mm;
    f->dU = w + 4 * mm;
    f->T = w + 5 * mm;
    f->rn = w + 7 * mm;
    f->pw = f->rn + m;
    f->pn = f->pw + (size_t)18 * m; /* pw: 18 m, pn: 16 */
    return w + kfac_floats(m);
}

static void kfac_fwd(KFac *f, const float *P, const float *delta, int spectral, float eps) {
    int m = f->m;
    mixer_triu_fill(f->L, P, m);
    llt(f->N, f->L, m);
    for (int i = 0; i < m; i++) {
        float *row = f->N + (size_t)i * m;
        f->rn[i] = sqrtf(dotf(row, row, m));
        float den = fmaxf(f->rn[i], eps);
        for (int j = 0; j < m; j++) row[j] /= den;
    }
    f->s = 0;
    if (spectral) {
        f->s = mixer_spectral_est(f->N, m, f->pw, f->pn);
        for (size_t k = 0; k < (size_t)m * m; k++) f->Kh[k] = f->N[k] / (f->s + eps);
    } else {
        memcpy(f->Kh, f->N, (size_t)m * m * sizeof(float));
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) f->U[i * m + j] = delta[i] * f->Kh[i * m + j];
}

/* Given f->dU: ddelta written, dP (triu order) written.  tmp:(3 m) */
static void kfac_bwd(KFac *f, const float *delta, int spectral, float eps, float *ddelta, float *dP,
                     float *tmp) {
    int m = f->m;
    size_t mm = (size_t)m * m;
    float *dKh = f->T, *dN = f->T + mm; /* T spans 2 m^2 */
    for (int i = 0; i < m; i++) {
        ddelta[i] = dotf(f->dU + (size_t)i * m, f->Kh + (size_t)i * m, m);
        for (int j = 0; j < m; j++) dKh[i * m + j] = delta[i] * f->dU[i * m + j];
    }
    if (spectral) {
        float inv = 1.0f / (f->s + eps);
        float ds = -dotf(dKh, f->N, (int)mm) * inv * inv;
        for (size_t k = 0; k < mm; k++) dN[k] = dKh[k] * inv;
        spectral_bwd(dN, f->N, m, f->pw, f->pn, ds, tmp);
    } else {
        memcpy(dN, dKh, mm * sizeof(float));
    }
    float *dK = f->dU; /* dU is consumed */
    for (int i = 0; i < m; i++)
        normalize_bwd(dK + (size_t)i * m, dN + (size_t)i * m, f->N + (size_t)i * m, f->rn[i], eps, m);
    llt_bwd(dP, dK, f->L, m, f->T);
}

static size_t kron_work(const MixSub *s, int d) {
    int mx = s->m1 > s->m2 ? s->m1 : s->m2;
    return kfac_floats(s->m1) + kfac_floats(s->m2) + (size_t)(s->m1 + s->m2) + 2 * (size_t)d + 3 * (size_t)mx;
}

static float *kron_setup(const MixSub *s, float *const *act, float *work, KFac *f1, KFac *f2) {
    float *w = kfac_carve(f1, s->m1, work);
    w = kfac_carve(f2, s->m2, w);
    int s1 = s->m1 * (s->m1 + 1) / 2;
    kfac_fwd(f1, act[0], act[1], s->spectral, s->eps);
    kfac_fwd(f2, act[0] + s1, act[1] + s->m1, s->spectral, s->eps);
    return w;
}

static void kron_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    KFac f1, f2;
    float *T1 = kron_setup(s, act, work, &f1, &f2);
    int m1 = s->m1, m2 = s->m2;
    const float *U = f1.U, *W = f2.U;
    (void)d;
    /* X' = X - 2 U^T X W^T, X = x as (m1, m2) row-major */
    memset(T1, 0, (size_t)m1 * m2 * sizeof(float));
    for (int k = 0; k < m1; k++)
        for (int a = 0; a < m1; a++) axpy(T1 + (size_t)a * m2, U[k * m1 + a], x + (size_t)k * m2, m2);
    for (int a = 0; a < m1; a++)
        for (int b = 0; b < m2; b++)
            y[a * m2 + b] = x[a * m2 + b] - 2.0f * dotf(T1 + (size_t)a * m2, W + (size_t)b * m2, m2);
}

static void kron_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *G, float *dx,
                     int want, float *work) {
    KFac f1, f2;
    float *T1 = kron_setup(s, act, work, &f1, &f2);
    int m1 = s->m1, m2 = s->m2, s1 = m1 * (m1 + 1) / 2;
    float *GW = T1 + d, *dl = GW + d, *tmp = dl + m1 + m2;
    const float *U = f1.U, *W = f2.U;
    memset(T1, 0, (size_t)d * sizeof(float));
    for (int k = 0; k < m1; k++)
        for (int a = 0; a < m1; a++) axpy(T1 + (size_t)a * m2, U[k * m1 + a], x + (size_t)k * m2, m2);
    memset(GW, 0, (size_t)d * sizeof(float)); /* GW = G W */
    for (int a = 0; a < m1; a++)
        for (int b = 0; b < m2; b++) axpy(GW + (size_t)a * m2, G[a * m2 + b], W + (size_t)b * m2, m2);
    /* dX = G - 2 U (G W)   (§3.5) */
    memcpy(dx, G, (size_t)d * sizeof(float));
    for (int k = 0; k < m1; k++)
        for (int a = 0; a < m1; a++)
            axpy(dx + (size_t)k * m2, -2.0f * U[k * m1 + a], GW + (size_t)a * m2, m2);
    if (!want) return;
    /* dU = -2 X (G W)^T,  dW = -2 G^T (U^T X) */
    for (int k = 0; k < m1; k++)
        for (int a = 0; a < m1; a++)
            f1.dU[k * m1 + a] = -2.0f * dotf(x + (size_t)k * m2, GW + (size_t)a * m2, m2);
    memset(f2.dU, 0, (size_t)m2 * m2 * sizeof(float));
    for (int a = 0; a < m1; a++)
        for (int b = 0; b < m2; b++)
            axpy(f2.dU + (size_t)b * m2, -2.0f * G[a * m2 + b], T1 + (size_t)a * m2, m2);
    memcpy(dl, act[1], (size_t)(m1 + m2) * sizeof(float)); /* the gates, before act[1] is overwritten */
    kfac_bwd(&f1, dl, s->spectral, s->eps, act[1], act[0], tmp);
    kfac_bwd(&f2, dl + m1, s->spectral, s->eps, act[1] + m1, act[0] + s1, tmp);
}

/* ---- Monarch, i.e. block-diagonal (§2.4) --------------------------------------------------------- */

/* One block: M = L L^T, M^ = M / (max column norm + eps). Returns the index of the largest column
 * (first on ties) and writes its norm to *cmax. */
static int mon_block(const float *P, int b, float *L, float *M, float *cmax) {
    mixer_triu_fill(L, P, b);
    llt(M, L, b);
    int jm = 0;
    *cmax = -1;
    for (int j = 0; j < b; j++) {
        float c = 0;
        for (int i = 0; i < b; i++) c += M[i * b + j] * M[i * b + j];
        c = sqrtf(c);
        if (c > *cmax) *cmax = c, jm = j;
    }
    return jm;
}

static void mon_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    int b = s->r, tb = b * (b + 1) / 2;
    float *L = work, *M = L + (size_t)b * b;
    for (int k = 0; k < d / b; k++) {
        float c;
        mon_block(act[0] + (size_t)k * tb, b, L, M, &c);
        float f = act[1][k] / (c + s->eps);
        const float *xk = x + (size_t)k * b;
        for (int i = 0; i < b; i++) y[k * b + i] = xk[i] - f * dotf(M + (size_t)i * b, xk, b);
    }
}

static void mon_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx,
                    int want, float *work) {
    int b = s->r, tb = b * (b + 1) / 2;
    float *L = work, *M = L + (size_t)b * b, *dM = M + (size_t)b * b, *S = dM + (size_t)b * b,
          *y = S + (size_t)b * b;
    for (int k = 0; k < d / b; k++) {
        float c;
        int jm = mon_block(act[0] + (size_t)k * tb, b, L, M, &c);
        float den = c + s->eps, al = act[1][k];
        const float *xk = x + (size_t)k * b, *gk = g + (size_t)k * b;
        matvec(y, M, xk, b); /* M x (unscaled) */
        for (int i = 0; i < b; i++) dx[k * b + i] = gk[i] - al / den * dotf(M + (size_t)i * b, gk, b);
        if (!want) continue;
        float gy = dotf(gk, y, b);
        act[1][k] = -gy / den; /* out = x - a M^ x */
        /* dM^ = -a g x^T;  dM = dM^/den, plus the max-column term: dden = -<dM^, M>/den^2 = a g.y/den^2 */
        for (int i = 0; i < b; i++)
            for (int j = 0; j < b; j++) dM[i * b + j] = -al * gk[i] * xk[j] / den;
        float dc = al * gy / (den * den);
        if (c > 0)
            for (int i = 0; i < b; i++) dM[i * b + jm] += dc * M[i * b + jm] / c;
        llt_bwd(act[0] + (size_t)k * tb, dM, L, b, S);
    }
}

/* ---- SelectiveDense (§2.5) ----------------------------------------------------------------------- */

static void sd_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    float *ws = work, *zs = ws + (size_t)33 * d, *ys = zs + (size_t)32 * d, *es = ys + (size_t)32 * d;
    float e = mixer_sd_power(act[0], d, s->eps, ws, zs, ys, es);
    float *z = ws; /* the iterates are dead now */
    tri_tmv(z, act[0], d, x);
    tri_mv(y, act[0], d, z);
    for (int i = 0; i < d; i++) y[i] /= e + s->eps;
}

static void sd_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx,
                   int want, float *work) {
    const float *P = act[0];
    float *ws = work, *zs = ws + (size_t)33 * d, *ys = zs + (size_t)32 * d, *es = ys + (size_t)32 * d;
    float *ltx = es + 32, *ltg = ltx + d, *gk = ltg + d, *dy = gk + d, *ltdy = dy + d;
    float *dP = ltdy + d;
    size_t np = (size_t)d * (d + 1) / 2;
    float e = mixer_sd_power(P, d, s->eps, ws, zs, ys, es), den = e + s->eps;
    tri_tmv(ltx, P, d, x);
    tri_tmv(ltg, P, d, g);
    tri_mv(dx, P, d, ltg); /* Q symmetric: dx = M g / den */
    for (int i = 0; i < d; i++) dx[i] /= den;
    if (!want) return;
    memset(dP, 0, np * sizeof(float));
    /* out = M x / den:  dM = g x^T / den,  de = -g^T M x / den^2 */
    tri_rank2(dP, d, 1.0f / den, g, ltx, x, ltg);
    float de = -dotf(ltg, ltx, d) / (den * den);
    memset(gk, 0, (size_t)d * sizeof(float));
    for (int k = 32; k >= 1; k--) {
        /* w_k = y_k/(e_k + eps), e_k = ||y_k||, y_k = M w_{k-1} = L z_{k-1} */
        const float *yk = ys + (size_t)(k - 1) * d, *wp = ws + (size_t)(k - 1) * d,
                    *zp = zs + (size_t)(k - 1) * d;
        float ek = es[k - 1], dk = ek + s->eps, dek = k == 32 ? de : 0.0f;
        float coef = ek > 0 ? (dek - dotf(gk, yk, d) / (dk * dk)) / ek : 0.0f;
        for (int i = 0; i < d; i++) dy[i] = gk[i] / dk + coef * yk[i];
        tri_tmv(ltdy, P, d, dy);
        tri_rank2(dP, d, 1.0f, dy, zp, wp, ltdy); /* dM += dy w_{k-1}^T */
        if (k > 1) tri_mv(gk, P, d, ltdy);        /* gradient on w_{k-1} = M dy */
    }
    memcpy(act[0], dP, np * sizeof(float));
}

/* ---- the table: one row per simple mixer ----------------------------------------------------- */

static size_t hh_work(const MixSub *s, int d) { return 2 * (size_t)s->r * d + 2 * (size_t)s->r + (size_t)d; }
static size_t dplr_work(const MixSub *s, int d) { return (size_t)s->r * d + (size_t)s->r + (size_t)d; }
static size_t mon_work(const MixSub *s, int d) { (void)d; return 4 * (size_t)s->r * s->r + (size_t)s->r; }
static size_t sd_work(const MixSub *s, int d) {
    (void)s;
    return (size_t)97 * d + 32 + 5 * (size_t)d + (size_t)d * (d + 1) / 2;
}

/* The projections of term k (mixer_add_proj), in the order of its act rows. */
static void hh_layout(MixerCfg *c, int k) {
    int r = c->sub[k].r, d = c->d;
    mixer_add_proj(c, k, "proj_u", r * d, 0);
    mixer_add_proj(c, k, "proj_alpha", r, 1);
}

/* d = m1 m2 with m1 the largest divisor of d not above floor(sqrt(d)) (§2.3) */
static void kron_factor(int d, int *m1, int *m2) {
    int s = 1;
    while ((s + 1) * (s + 1) <= d) s++;
    while (d % s) s--;
    *m1 = s;
    *m2 = d / s;
}

static void kron_layout(MixerCfg *c, int k) {
    MixSub *s = &c->sub[k];
    kron_factor(c->d, &s->m1, &s->m2);
    mixer_add_proj(c, k, "proj_k", s->m1 * (s->m1 + 1) / 2 + s->m2 * (s->m2 + 1) / 2, 0);
    mixer_add_proj(c, k, "proj_d", s->m1 + s->m2, 1);
}

static void mon_layout(MixerCfg *c, int k) {
    int r = c->sub[k].r, d = c->d;
    mixer_add_proj(c, k, "proj_m", d / r * (r * (r + 1) / 2), 0);
    mixer_add_proj(c, k, "proj_alpha", d / r, 1);
}

static void sd_layout(MixerCfg *c, int k) { mixer_add_proj(c, k, "proj_l", c->d * (c->d + 1) / 2, 0); }

typedef struct {
    void (*layout)(MixerCfg *c, int k);     /* add the projections of term k */
    size_t (*work)(const MixSub *s, int d); /* floats of per-token workspace of fwd and bwd */
    void (*fwd)(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work);
    void (*bwd)(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx, int want,
                float *work);
} MixTokOps;

static const MixTokOps TOK_OPS[] = {
    [MIX_HOUSEHOLDER] = {hh_layout, hh_work, hh_fwd, hh_bwd},
    [MIX_DPLR] = {hh_layout, dplr_work, dplr_fwd, dplr_bwd}, /* the same projections as householder */
    [MIX_KRONECKER] = {kron_layout, kron_work, kron_fwd, kron_bwd},
    [MIX_MONARCH] = {mon_layout, mon_work, mon_fwd, mon_bwd},
    [MIX_SELECTIVEDENSE] = {sd_layout, sd_work, sd_fwd, sd_bwd},
};
_Static_assert(sizeof TOK_OPS / sizeof TOK_OPS[0] == MIX_N_SIMPLE, "one per-token row per simple mixer");

static const MixTokOps *ops(const MixSub *s) {
    CHECK(s->type >= 0 && s->type < MIX_N_SIMPLE && TOK_OPS[s->type].fwd, "mixer: bad sub-mixer type %d", s->type);
    return &TOK_OPS[s->type];
}

void mixer_tok_layout(MixerCfg *c, int k) { ops(&c->sub[k])->layout(c, k); }

size_t mixer_tok_work(const MixSub *s, int d) { return ops(s)->work(s, d); }

void mixer_tok_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work) {
    ops(s)->fwd(s, d, act, x, y, work);
}

void mixer_tok_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx,
                   int want, float *work) {
    ops(s)->bwd(s, d, act, x, g, dx, want, work);
}
