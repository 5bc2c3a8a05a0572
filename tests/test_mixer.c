/* test_mixer.c: the Fixed-Point RNN channel mixers (src/layers/mixer.h, spec fp-rnn §2).
 *
 * 1. Config: every bad option is IM_EINVAL naming its key; the Kronecker m1 x m2 rule; the §2.8
 *    parameter counts (d = 1024, d_p = 2048) and the tensor names.
 * 2. Q against an explicit d x d matrix built here in double from the documented formulas (product
 *    of I - 2a u u^T; I - 2 sum; I - 2 (U^T kron W) on row-major vec; blockdiag(I - a M^); L L^T/e;
 *    O0 expm(S - S^T) by a plain Taylor series; the mixture's product), for mixer_matrix and for
 *    mixer_fwd on many tokens.
 * 3. Properties: Householder r=1 with a = 1 preserves norms and squares to I; DPLR r=1 == Householder
 *    r=1 bit for bit; the triangular fill order; the two power-iteration estimators against closed
 *    forms and against loops written here (16 alternating / 32 steps); post_init gives W == v and
 *    an orthogonal base.
 * 4. Backward: 4-point finite differences on p, v and every trained parameter (g, v, b through the
 *    weight norm; nonselective S through expm), the directional test, accumulation (+=); an exact
 *    adjoint test <Q a, b> = <a, Q^T b>; dv alone (dw = dp = NULL) equals the full backward.
 * 5. Bit-identical results at 1 and 2 threads (several token chunks).
 * 6. PyTorch: tests/ref/mixer.safetensors (gen_mixer.py): out and every gradient.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/io/safetensors.h"
#include "../src/kernels/kernels.h"
#include "../src/layers/mixer.h"
#include "../src/models/model.h"
#include "th.h"

#include "gradcheck.h"

/* ---- a mixer instance with its parameter table and buffers ------------------------------------- */

typedef struct {
    MixerCfg c;
    ParamTable t;
    MixerW w, dw;
    int M;
    float *th, *dth, *eff, *deff;
    float *p, *v, *out, *wout, *dp, *dv, *cache, *scratch;
} Mx;

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Table-initialised, then g and biases perturbed (so g != ||v|| and every gradient is generic). */
static void mx_init(Mx *x, const char *type, int d, int dp, int r, const char *ac, int R, const char *kn,
                    float eps, int M, uint64_t seed, const char *prefix) {
    memset(x, 0, sizeof *x);
    int rc = mixer_cfg_init(&x->c, type, d, dp, r, ac, R, kn, eps);
    CHECK(rc == IM_OK, "mixer_cfg_init(%s): %s", type, err_msg());
    ptab_init(&x->t);
    mixer_add_params(&x->c, &x->t, prefix);
    x->M = M;
    x->th = th_alloc(x->t.total);
    x->dth = th_alloc(x->t.total);
    x->eff = th_alloc(mixer_eff_floats(&x->c));
    x->deff = th_alloc(mixer_eff_floats(&x->c));
    mixer_bind(&x->c, &x->w, &x->t, x->th, prefix, x->eff);
    mixer_bind(&x->c, &x->dw, &x->t, x->dth, prefix, x->deff);
    ptab_init_values(&x->t, x->th, seed);
    mixer_post_init(&x->c, &x->w);
    Rng rg;
    rng_seed(&rg, seed, 7);
    for (int i = 0; i < x->t.n; i++) {
        const ParamInfo *pi = &x->t.p[i];
        float *a = x->th + pi->offset;
        for (size_t j = 0; j < pi->numel; j++) {
            if (ends_with(pi->name, "weight_g")) a[j] *= 1.0f + 0.1f * rng_normal(&rg);
            if (ends_with(pi->name, ".bias")) a[j] = 0.3f * rng_normal(&rg);
            if (ends_with(pi->name, ".skew")) a[j] = 0.3f * rng_normal(&rg);
        }
    }
    mixer_refresh(&x->c, &x->w);
    x->p = th_alloc((size_t)M * dp);
    x->v = th_alloc((size_t)M * d);
    x->out = th_alloc((size_t)M * d);
    x->wout = th_alloc((size_t)M * d);
    x->dp = th_alloc((size_t)M * dp);
    x->dv = th_alloc((size_t)M * d);
    x->cache = th_alloc(mixer_cache_floats(&x->c, M));
    x->scratch = th_alloc(mixer_scratch_floats(&x->c, M));
    th_fill_normal(x->p, (size_t)M * dp, &rg, 1.0f);
    th_fill_normal(x->v, (size_t)M * d, &rg, 1.0f);
    th_fill_normal(x->wout, (size_t)M * d, &rg, 1.0f);
}

static void mx_free(Mx *x) {
    free(x->th);
    free(x->dth);
    free(x->eff);
    free(x->deff);
    free(x->p);
    free(x->v);
    free(x->out);
    free(x->wout);
    free(x->dp);
    free(x->dv);
    free(x->cache);
    free(x->scratch);
    ptab_free(&x->t);
}

static double mx_loss(void *ctx) {
    Mx *x = ctx;
    mixer_refresh(&x->c, &x->w);
    mixer_fwd(&x->c, &x->w, x->out, x->p, x->v, x->M, NULL, x->scratch);
    return dotd(x->wout, x->out, (size_t)x->M * x->c.d);
}

/* the caller's per-backward protocol: zero deff, refresh, forward with cache, bwd, wn_bwd */
static void mx_bwd(void *ctx) {
    Mx *x = ctx;
    memset(x->deff, 0, mixer_eff_floats(&x->c) * sizeof(float));
    mixer_refresh(&x->c, &x->w);
    mixer_fwd(&x->c, &x->w, x->out, x->p, x->v, x->M, x->cache, x->scratch);
    mixer_bwd(&x->c, &x->w, &x->dw, x->dp, x->dv, x->wout, x->p, x->v, x->M, x->cache, x->scratch);
    mixer_wn_bwd(&x->c, &x->w, &x->dw);
}

/* ---- explicit matrices, in double, from the spec's formulas ---------------------------------------- */

static double sigd(double z) { return 1.0 / (1.0 + exp(-z)); }

static double acd(int ac, double z) {
    return ac == MIX_AC_SILU ? z * sigd(z) : ac == MIX_AC_RELU ? (z > 0 ? z : 0) : z;
}

/* y = W x (+ b), W_i = g_i v_i / ||v_i|| from the raw parameters */
static void wn_apply(const LinearW *l, int out, int in, const double *x, double *y) {
    for (int i = 0; i < out; i++) {
        double n = 0, s = 0;
        for (int j = 0; j < in; j++) n += (double)l->v[i * in + j] * l->v[i * in + j];
        for (int j = 0; j < in; j++) s += (double)l->v[i * in + j] * x[j];
        y[i] = l->g[i] * s / sqrt(n) + (l->b ? l->b[i] : 0);
    }
}

/* raw (pre-activation) output of projection j for one token p */
static void proj_raw(const Mx *x, int j, const float *p, double *y) {
    const MixerCfg *c = &x->c;
    double pin[4096], h[64];
    for (int i = 0; i < c->dp; i++) pin[i] = p[i];
    if (c->proj_rank < 0) {
        wn_apply(&x->w.p[j].l[0], c->proj[j].out, c->dp, pin, y);
    } else {
        wn_apply(&x->w.p[j].l[0], c->proj_rank, c->dp, pin, h);
        wn_apply(&x->w.p[j].l[1], c->proj[j].out, c->proj_rank, h, y);
    }
}

/* activated output of projection j for one token p */
static void proj_act(const Mx *x, int j, const float *p, double *y) {
    proj_raw(x, j, p, y);
    for (int i = 0; i < x->c.proj[j].out; i++) y[i] = x->c.proj[j].gate ? sigd(y[i]) : acd(x->c.ac, y[i]);
}

static void matmul_d(double *C, const double *A, const double *B, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += A[i * n + k] * B[k * n + j];
            C[i * n + j] = s;
        }
}

static void eye_d(double *A, int n) {
    memset(A, 0, (size_t)n * n * sizeof(double));
    for (int i = 0; i < n; i++) A[i * n + i] = 1;
}

/* L from P in triu order, K = L L^T */
static void llt_d(const double *P, int m, double *K) {
    double L[64 * 64] = {0};
    for (int i = 0, k = 0; i < m; i++)
        for (int j = i; j < m; j++) L[i * m + j] = P[k++];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int l = 0; l < m; l++) s += L[i * m + l] * L[j * m + l];
            K[i * m + j] = s;
        }
}

/* the 16-step alternation of §2.3, written out */
static double spectral_d(const double *A, int m) {
    double u[64], v[64], t[64];
    for (int i = 0; i < m; i++) v[i] = 1.0 / sqrt((double)m);
    for (int it = 0; it < 16; it++) {
        const double *src = it % 2 == 0 ? v : u;
        double *dst = it % 2 == 0 ? u : v, n = 0;
        for (int i = 0; i < m; i++) {
            t[i] = 0;
            for (int j = 0; j < m; j++) t[i] += A[i * m + j] * src[j];
            n += t[i] * t[i];
        }
        n = fmax(sqrt(n), 1e-12);
        for (int i = 0; i < m; i++) dst[i] = t[i] / n;
    }
    double s = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) s += u[i] * A[i * m + j] * v[j];
    return s;
}

/* U = diag(delta) K^ for one Kronecker factor */
static void kron_factor_d(const double *P, const double *delta, int m, int spectral, double eps, double *U) {
    double K[64 * 64];
    llt_d(P, m, K);
    for (int i = 0; i < m; i++) {
        double n = 0;
        for (int j = 0; j < m; j++) n += K[i * m + j] * K[i * m + j];
        n = fmax(sqrt(n), eps);
        for (int j = 0; j < m; j++) K[i * m + j] /= n;
    }
    double s = spectral ? spectral_d(K, m) + eps : 1.0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) U[i * m + j] = delta[i] * K[i * m + j] / s;
}

/* SelectiveDense e after 32 steps (explicit M) */
static double sd_power_d(const double *M, int d, double eps) {
    double w[64], y[64], e = 0;
    for (int i = 0; i < d; i++) w[i] = 1.0 / sqrt((double)d);
    for (int k = 0; k < 32; k++) {
        e = 0;
        for (int i = 0; i < d; i++) {
            y[i] = 0;
            for (int j = 0; j < d; j++) y[i] += M[i * d + j] * w[j];
            e += y[i] * y[i];
        }
        e = sqrt(e);
        for (int i = 0; i < d; i++) w[i] = y[i] / (e + eps);
    }
    return e;
}

/* smallest relative lead of the largest column norm over the runner-up, over monarch blocks */
static double monarch_gap(const Mx *x, const MixSub *s, const float *p) {
    if (s->type != MIX_MONARCH) return 1;
    static double a[4096], K[64 * 64];
    int b = s->r, tb = b * (b + 1) / 2;
    double gap = 1;
    proj_act(x, s->proj, p, a);
    for (int blk = 0; blk < x->c.d / b; blk++) {
        llt_d(a + blk * tb, b, K);
        double c1 = 0, c2 = 0;
        for (int j = 0; j < b; j++) {
            double n = 0;
            for (int i = 0; i < b; i++) n += K[i * b + j] * K[i * b + j];
            n = sqrt(n);
            if (n > c1)
                c2 = c1, c1 = n;
            else if (n > c2)
                c2 = n;
        }
        if (b > 1) gap = fmin(gap, (c1 - c2) / c1);
    }
    return gap;
}

/* Redraw each token's p ~ N(0, scale^2) until every mixer_ac input is at least `margin` from 0
 * and every monarch block's largest column norm leads the next by 15%. relu has a kink at 0, a
 * Kronecker factor's last row of L L^T flips sign with L[m-1][m-1] (its row normalisation is then
 * a near-jump), and the monarch max switches columns at ties: finite differences must not straddle
 * any of these. */
static void kinkfree_p(Mx *x, float scale, float margin, Rng *r) {
    static double y[4096];
    for (int t = 0; t < x->M; t++) {
        float *pt = x->p + (size_t)t * x->c.dp;
        int ok = 0;
        for (int tries = 0; tries < 100000 && !ok; tries++) {
            th_fill_normal(pt, (size_t)x->c.dp, r, scale);
            ok = 1;
            for (int j = 0; j < x->c.n_proj && ok; j++) {
                if (x->c.proj[j].gate) continue;
                proj_raw(x, j, pt, y);
                for (int i = 0; i < x->c.proj[j].out; i++) ok &= fabs(y[i]) >= margin;
            }
            for (int k = 0; k < x->c.n_sub && ok; k++) ok &= monarch_gap(x, &x->c.sub[k], pt) >= 0.15;
        }
        CHECK(ok, "kinkfree_p: no token found");
    }
}

/* Q of one simple mixer (a, g: activated matrix and gate projections of the token) */
static void sub_matrix_d(const MixSub *s, int d, const double *a, const double *g, double *Q) {
    eye_d(Q, d);
    if (s->type == MIX_HOUSEHOLDER || s->type == MIX_DPLR) {
        double H[64 * 64], T[64 * 64];
        for (int i = 0; i < s->r; i++) {
            const double *U = a + i * d;
            double n = 0;
            for (int j = 0; j < d; j++) n += U[j] * U[j];
            n = fmax(sqrt(n), s->eps);
            if (s->type == MIX_DPLR) { /* I - 2 sum a_i u u^T */
                for (int j = 0; j < d; j++)
                    for (int k = 0; k < d; k++) Q[j * d + k] -= 2 * g[i] * U[j] * U[k] / (n * n);
                continue;
            }
            eye_d(H, d);
            for (int j = 0; j < d; j++)
                for (int k = 0; k < d; k++) H[j * d + k] -= 2 * g[i] * U[j] * U[k] / (n * n);
            matmul_d(T, H, Q, d); /* Q = H_i Q: reflection i acts after 0..i-1 */
            memcpy(Q, T, sizeof(double) * d * d);
        }
    } else if (s->type == MIX_KRONECKER) {
        int m1 = s->m1, m2 = s->m2;
        double U[64 * 64], W[64 * 64];
        kron_factor_d(a, g, m1, s->spectral, s->eps, U);
        kron_factor_d(a + m1 * (m1 + 1) / 2, g + m1, m2, s->spectral, s->eps, W);
        /* (U^T kron W)[(i,j),(k,l)] = U[k][i] W[j][l] */
        for (int i = 0; i < m1; i++)
            for (int j = 0; j < m2; j++)
                for (int k = 0; k < m1; k++)
                    for (int l = 0; l < m2; l++)
                        Q[(i * m2 + j) * d + k * m2 + l] -= 2 * U[k * m1 + i] * W[j * m2 + l];
    } else if (s->type == MIX_MONARCH) {
        int b = s->r, tb = b * (b + 1) / 2;
        double K[64 * 64];
        for (int blk = 0; blk < d / b; blk++) {
            llt_d(a + blk * tb, b, K);
            double c = 0;
            for (int j = 0; j < b; j++) {
                double n = 0;
                for (int i = 0; i < b; i++) n += K[i * b + j] * K[i * b + j];
                c = fmax(c, sqrt(n));
            }
            for (int i = 0; i < b; i++)
                for (int j = 0; j < b; j++)
                    Q[(blk * b + i) * d + blk * b + j] -= g[blk] * K[i * b + j] / (c + s->eps);
        }
    } else { /* selectivedense */
        double K[64 * 64];
        llt_d(a, d, K);
        double e = sd_power_d(K, d, s->eps);
        for (int i = 0; i < d * d; i++) Q[i] = K[i] / (e + s->eps);
    }
}

/* expm by a plain (unscaled) Taylor series: fine for the small ||A|| used here */
static void expm_d(const double *A, int d, double *E) {
    double T[64 * 64], Tn[64 * 64];
    eye_d(E, d);
    eye_d(T, d);
    for (int k = 1; k < 80; k++) {
        matmul_d(Tn, T, A, d);
        for (int i = 0; i < d * d; i++) T[i] = Tn[i] / k, E[i] += T[i];
    }
}

static void explicit_matrix(const Mx *x, const float *p, double *Q) {
    const MixerCfg *c = &x->c;
    int d = c->d;
    if (c->type == MIX_NONSELECTIVE) {
        double A[64 * 64], E[64 * 64], B[64 * 64];
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                A[i * d + j] = (double)x->w.skew[i * d + j] - x->w.skew[j * d + i];
                B[i * d + j] = x->w.base[i * d + j];
            }
        expm_d(A, d, E);
        matmul_d(Q, B, E, d);
        return;
    }
    static double a[4096], g[256], Qs[64 * 64], T[64 * 64];
    eye_d(Q, d);
    for (int k = 0; k < c->n_sub; k++) {
        const MixSub *s = &c->sub[k];
        proj_act(x, s->proj, p, a);
        if (s->type != MIX_SELECTIVEDENSE) proj_act(x, s->proj + 1, p, g);
        sub_matrix_d(s, d, a, g, Qs);
        matmul_d(T, Qs, Q, d); /* mixture: term k mixes the previous output */
        memcpy(Q, T, sizeof(double) * d * d);
    }
}

/* ---- tests ----------------------------------------------------------------------------------------- */

static void test_cfg(void) {
    MixerCfg c;
    struct {
        const char *type;
        int d, r;
        const char *ac;
        int R;
        const char *kn;
        const char *key;
    } bad[] = {
        {"householdr", 16, 1, "silu", -1, NULL, "mixer_type"},
        {"householder", 16, 1, "gelu", -1, NULL, "mixer_ac"},
        {"householder", 16, 0, "silu", -1, NULL, "mixer_rank"},
        {"dplr", 16, 1, "silu", 0, NULL, "mixer_proj_rank"},
        {"dplr", 16, 1, "silu", -2, NULL, "mixer_proj_rank"},
        {"monarch", 16, 3, "silu", -1, NULL, "mixer_rank"},
        {"monarch", 16, 32, "silu", -1, NULL, "mixer_rank"},
        {"monarch", 12, 4, "silu", -1, NULL, "mixer_type"},
        {"mixture", 16, 1, "silu", -1, NULL, "mixer_rank"},
        {"mixture", 16, MIX_MAX_SUB + 1, "silu", -1, NULL, "mixer_rank"},
        {"kronecker", 16, 1, "silu", -1, "frobenius", "kron_norm"},
        {"selectivedense", 16, 1, "silu", 4, NULL, "mixer_proj_rank"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = mixer_cfg_init(&c, bad[i].type, bad[i].d, 2 * bad[i].d, bad[i].r, bad[i].ac, bad[i].R,
                                bad[i].kn, 1e-5f);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i].key),
                 "cfg %s r=%d: rc %d, message '%s' lacks %s", bad[i].type, bad[i].r, rc, err_msg(),
                 bad[i].key);
    }
    int dims[][3] = {{12, 3, 4}, {16, 4, 4}, {256, 16, 16}, {1024, 32, 32}, {1536, 32, 48}, {7, 1, 7}};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        mixer_cfg_init(&c, "kronecker", dims[i][0], 8, 1, "silu", -1, "column-wise", 1e-5f);
        TH_CHECK(c.m1 == dims[i][1] && c.m2 == dims[i][2], "kronecker d=%d: %dx%d, expected %dx%d",
                 dims[i][0], c.m1, c.m2, dims[i][1], dims[i][2]);
    }
    TH_CHECK(mixer_cfg_init(&c, "householderproduct", 8, 16, 2, "identity", -1, NULL, 0) == IM_OK &&
                 c.type == MIX_HOUSEHOLDER,
             "householderproduct alias");
    TH_CHECK(mixer_cfg_init(&c, "kronecker", 16, 32, 1, "silu", -1, "spectral", 1e-5f) == IM_OK && c.spectral,
             "spectral flag");
}

/* The mixer list (mixer.h) drives names, parsing, messages and the model key's validation: every
 * listed mixer parses back to its id and builds; a simple one has its per-token row (a workspace
 * size); the model config rejects an unknown mixer with the layer's own message. */
static void test_table(void) {
    char names[256];
    snprintf(names, sizeof names, "%s", mixer_type_names());
    int n = 0;
    for (char *tok = strtok(names, " |"); tok; tok = strtok(NULL, " |"), n++) {
        int id = mixer_type_parse(tok);
        TH_CHECK(id == n, "mixer '%s' parses to %d, listed at %d", tok, id, n);
        MixerCfg c;
        int r = id == MIX_MIXTURE || id == MIX_MONARCH ? 2 : 1;
        int rc = mixer_cfg_init(&c, tok, 16, 32, r, "silu", -1, NULL, 1e-5f);
        TH_CHECK(rc == IM_OK && c.type == id, "mixer '%s' does not build: %s", tok, rc ? err_msg() : "wrong type");
        if (rc == IM_OK && id < MIX_N_SIMPLE)
            TH_CHECK(c.n_sub == 1 && c.sub[0].work > 0 && (size_t)c.sub[0].work == mixer_tok_work(&c.sub[0], 16),
                     "mixer '%s': no per-token row", tok);
    }
    TH_CHECK(n == MIX_N_TYPE, "mixer_type_names lists %d of %d mixers", n, MIX_N_TYPE);
    TH_CHECK(mixer_type_parse("nosuch") == -1 && mixer_ac_parse("gelu") == -1 && mixer_ac_parse("relu") == MIX_AC_RELU,
             "parse of unknown names");
    ModelCfg mc;
    cfg_defaults(&mc);
    snprintf(mc.model, sizeof mc.model, "fp_mamba");
    snprintf(mc.mixer_type, sizeof mc.mixer_type, "nosuch");
    int rc = cfg_validate(&mc);
    char want[320];
    snprintf(want, sizeof want, "config key 'mixer_type': unknown 'nosuch' (%s)", mixer_type_names());
    TH_CHECK(rc == IM_EINVAL && !strcmp(err_msg(), want), "model config: '%s', expected '%s'", err_msg(), want);
    snprintf(mc.mixer_type, sizeof mc.mixer_type, "householder");
    snprintf(mc.mixer_ac, sizeof mc.mixer_ac, "gelu");
    rc = cfg_validate(&mc);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), mixer_ac_names()), "model config mixer_ac: '%s'", err_msg());
}

/* §2.8 (d = 1024, d_p = 2048) and the tensor names */
static void test_param_counts(void) {
    struct {
        const char *type;
        int r;
        size_t n;
    } cases[] = {{"householder", 1, 2100226},
                 {"householder", 2, 4200452},
                 {"householder", 4, 8400904},
                 {"dplr", 2, 4200452},
                 {"kronecker", 1, 2294944}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        MixerCfg c;
        ParamTable t;
        mixer_cfg_init(&c, cases[i].type, 1024, 2048, cases[i].r, "silu", -1, "column-wise", 1e-5f);
        ptab_init(&t);
        mixer_add_params(&c, &t, "mixer");
        TH_CHECK(ptab_count(&t) == cases[i].n, "%s r=%d: %zu parameters, spec §2.8 says %zu", cases[i].type,
                 cases[i].r, ptab_count(&t), cases[i].n);
        ptab_free(&t);
    }
    MixerCfg c;
    ParamTable t;
    ptab_init(&t);
    mixer_cfg_init(&c, "mixture", 12, 24, 2, "silu", 3, NULL, 1e-6f);
    mixer_add_params(&c, &t, "layers.0.mixer");
    const char *names[] = {"layers.0.mixer.sub0.proj_u.0.weight_g", "layers.0.mixer.sub0.proj_u.1.weight_v",
                           "layers.0.mixer.sub0.proj_alpha.1.bias", "layers.0.mixer.sub1.proj_k.0.weight_v",
                           "layers.0.mixer.sub1.proj_d.1.bias"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        TH_CHECK(ptab_find(&t, names[i]), "no tensor %s", names[i]);
    const ParamInfo *pi = ptab_find(&t, "layers.0.mixer.sub1.proj_d.1.bias");
    TH_CHECK(pi && pi->decay == 0 && pi->numel == 7, "proj_d bias: decay 0, m1 + m2 = 7 floats");
    pi = ptab_find(&t, "layers.0.mixer.sub0.proj_u.1.weight_v");
    TH_CHECK(pi && pi->decay == 1 && pi->shape[0] == 12 && pi->shape[1] == 3,
             "proj_u.1.weight_v (12, 3), decay 1");
    TH_CHECK(!ptab_find(&t, "layers.0.mixer.sub0.proj_u.0.bias"), "no bias between the stacked linears");
    ptab_free(&t);
}

typedef struct {
    const char *type;
    int d, r;
    const char *ac;
    int R;
    const char *kn;
    float eps;
} Case;

static const Case CASES[] = {
    {"householder", 16, 3, "silu", -1, NULL, 1e-5f},
    {"householder", 16, 2, "relu", 4, NULL, 1e-6f},
    {"householder", 8, 1, "identity", -1, NULL, 1e-5f},
    {"dplr", 16, 2, "identity", -1, NULL, 1e-5f},
    {"dplr", 12, 3, "silu", 5, NULL, 1e-5f},
    {"kronecker", 12, 1, "silu", -1, "column-wise", 1e-5f},
    {"kronecker", 16, 1, "silu", 3, "spectral", 1e-6f},
    {"kronecker", 12, 1, "relu", -1, "spectral", 1e-5f},
    {"monarch", 16, 4, "silu", -1, NULL, 1e-5f},
    {"monarch", 8, 2, "identity", 3, NULL, 1e-5f},
    {"selectivedense", 12, 1, "silu", -1, NULL, 1e-5f},
    {"selectivedense", 6, 1, "identity", -1, NULL, 1e-5f},
    {"nonselective", 16, 1, "silu", -1, NULL, 1e-5f},
    {"mixture", 12, 3, "silu", -1, NULL, 1e-6f},
    {"mixture", 16, 2, "relu", 2, NULL, 1e-6f},
};
#define NCASES ((int)(sizeof CASES / sizeof *CASES))

static void case_name(char *buf, size_t n, const Case *k) {
    snprintf(buf, n, "%s(d=%d,r=%d,%s,R=%d%s%s)", k->type, k->d, k->r, k->ac, k->R, k->kn ? "," : "",
             k->kn ? k->kn : "");
}

static void mx_case(Mx *x, const Case *k, int M, uint64_t seed) {
    mx_init(x, k->type, k->d, 2 * k->d, k->r, k->ac, k->R, k->kn, k->eps, M, seed, "m");
}

/* mixer_matrix and mixer_fwd against the explicit matrix */
static void test_explicit(void) {
    for (int ci = 0; ci < NCASES; ci++) {
        const Case *k = &CASES[ci];
        char nm[128];
        case_name(nm, sizeof nm, k);
        Mx x;
        mx_case(&x, k, 7, 100 + ci);
        int d = k->d;
        double *Qd = malloc(sizeof(double) * d * d);
        float *Q = th_alloc((size_t)d * d), *Qr = th_alloc((size_t)d * d);
        mixer_fwd(&x.c, &x.w, x.out, x.p, x.v, x.M, NULL, x.scratch);
        double worst_m = 0, worst_f = 0;
        for (int t = 0; t < x.M; t++) {
            const float *pt = x.p + (size_t)t * x.c.dp;
            explicit_matrix(&x, pt, Qd);
            for (int i = 0; i < d * d; i++) Qr[i] = (float)Qd[i];
            mixer_matrix(&x.c, &x.w, pt, Q);
            worst_m = fmax(worst_m, th_rel_err(Q, Qr, (size_t)d * d));
            float ref[64];
            for (int i = 0; i < d; i++) {
                double s = 0;
                for (int j = 0; j < d; j++) s += Qd[i * d + j] * x.v[(size_t)t * d + j];
                ref[i] = (float)s;
            }
            worst_f = fmax(worst_f, th_rel_err(x.out + (size_t)t * d, ref, (size_t)d));
        }
        TH_CHECK(worst_m <= 2e-6, "%s: mixer_matrix vs explicit Q: rel err %.3g", nm, worst_m);
        TH_CHECK(worst_f <= 2e-6, "%s: mixer_fwd vs explicit Q v: rel err %.3g", nm, worst_f);
        /* the no-grad forward equals the caching forward bit for bit */
        float *o2 = th_alloc((size_t)x.M * d);
        mixer_fwd(&x.c, &x.w, o2, x.p, x.v, x.M, x.cache, x.scratch);
        TH_CHECK(!memcmp(o2, x.out, sizeof(float) * x.M * d), "%s: cache NULL vs cached forward differ", nm);
        free(o2);
        free(Qd);
        free(Q);
        free(Qr);
        mx_free(&x);
    }
}

static void test_reflection(void) {
    /* Householder r=1, a = sigmoid(40) = 1 in float: a true reflection */
    Mx x;
    mx_init(&x, "householder", 16, 32, 1, "silu", -1, NULL, 1e-5f, 9, 5, "m");
    x.w.p[1].l[0].b[0] = 40.0f;
    mixer_fwd(&x.c, &x.w, x.out, x.p, x.v, x.M, NULL, x.scratch);
    double worst = 0;
    for (int t = 0; t < x.M; t++) {
        double a = sqrt(dotd(x.v + t * 16, x.v + t * 16, 16)),
               b = sqrt(dotd(x.out + t * 16, x.out + t * 16, 16));
        worst = fmax(worst, fabs(a - b) / a);
    }
    TH_CHECK(worst <= 1e-6, "householder a=1 changes ||v|| by %.3g", worst);
    float Q[256], Q2[256];
    mixer_matrix(&x.c, &x.w, x.p, Q);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)Q[i * 16 + k] * Q[k * 16 + j];
            Q2[i * 16 + j] = (float)(s - (i == j));
        }
    double e2 = 0;
    for (int i = 0; i < 256; i++) e2 = fmax(e2, fabs(Q2[i]));
    TH_CHECK(e2 <= 1e-6, "reflection: |Q^2 - I| = %.3g", e2);
    mx_free(&x);
}

/* DPLR r=1 == Householder r=1 on the same tensors (same names), bit for bit */
static void test_dplr_is_householder(void) {
    Mx h, dd;
    mx_init(&h, "householder", 16, 32, 1, "silu", 2, NULL, 1e-5f, 9, 6, "m");
    mx_init(&dd, "dplr", 16, 32, 1, "silu", 2, NULL, 1e-5f, 9, 6, "m");
    memcpy(dd.th, h.th, h.t.total * sizeof(float));
    memcpy(dd.p, h.p, sizeof(float) * 9 * 32);
    memcpy(dd.v, h.v, sizeof(float) * 9 * 16);
    mixer_refresh(&dd.c, &dd.w);
    mixer_fwd(&h.c, &h.w, h.out, h.p, h.v, 9, NULL, h.scratch);
    mixer_fwd(&dd.c, &dd.w, dd.out, dd.p, dd.v, 9, NULL, dd.scratch);
    TH_CHECK(!memcmp(h.out, dd.out, sizeof(float) * 9 * 16), "dplr r=1 != householder r=1");
    mx_free(&h);
    mx_free(&dd);
}

/* post_init: g = ||v|| so W == v; nonselective base orthogonal and O == base at S = 0 */
static void test_post_init(void) {
    MixerCfg c;
    ParamTable t;
    mixer_cfg_init(&c, "kronecker", 12, 24, 1, "silu", 3, NULL, 1e-5f);
    ptab_init(&t);
    mixer_add_params(&c, &t, "k");
    float *th = th_alloc(t.total), *eff = th_alloc(mixer_eff_floats(&c));
    MixerW w;
    mixer_bind(&c, &w, &t, th, "k", eff);
    ptab_init_values(&t, th, 3);
    mixer_post_init(&c, &w);
    double ew = 0;
    for (int j = 0; j < c.n_proj; j++)
        for (int k = 0; k < 2; k++) {
            int n = (k ? c.proj[j].out : 3) * (k ? 3 : 24);
            ew = fmax(ew, th_rel_err(w.p[j].l[k].W, w.p[j].l[k].v, (size_t)n));
        }
    TH_CHECK(ew <= 1e-6, "post_init: W != v (rel %.3g)", ew);
    free(th);
    free(eff);
    ptab_free(&t);

    mixer_cfg_init(&c, "nonselective", 16, 32, 1, "silu", -1, NULL, 1e-5f);
    ptab_init(&t);
    mixer_add_params(&c, &t, "n");
    th = th_alloc(t.total);
    eff = th_alloc(mixer_eff_floats(&c));
    mixer_bind(&c, &w, &t, th, "n", eff);
    ptab_init_values(&t, th, 4);
    mixer_post_init(&c, &w);
    double eo = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)w.base[k * 16 + i] * w.base[k * 16 + j];
            eo = fmax(eo, fabs(s - (i == j)));
        }
    TH_CHECK(eo <= 1e-6, "post_init: base^T base - I = %.3g", eo);
    TH_CHECK(th_rel_err(w.O, w.base, 256) <= 1e-6, "nonselective O != base at S = 0");
    TH_CHECK(ptab_find(&t, "n.base")->decay == 0, "base must not decay");
    free(th);
    free(eff);
    ptab_free(&t);
}

static void test_fill_and_power(void) {
    float P[6] = {1, 2, 3, 4, 5, 6}, L[9];
    mixer_triu_fill(L, P, 3);
    float Lx[9] = {1, 2, 3, 0, 4, 5, 0, 0, 6};
    TH_CHECK(!memcmp(L, Lx, sizeof L), "triu fill order: (0,0),(0,1),(0,2),(1,1),(1,2),(2,2)");

    /* spectral estimate on diag(1, q): u = w_15 ~ (1, q^15), v = w_16 ~ (1, q^16) */
    float A[4] = {1, 0, 0, 0.9f}, it[18 * 2], nr[16];
    float s = mixer_spectral_est(A, 2, it, nr);
    double q = 0.9f;
    double cf[3];
    for (int k = 15; k <= 17; k++) {
        double a = pow(q, k - 1), b = pow(q, k);
        cf[k - 15] = (1 + a * q * b) / (sqrt(1 + a * a) * sqrt(1 + b * b));
    }
    TH_CHECK(fabs(s - cf[1]) <= 2e-7, "spectral estimate %.9g vs closed form (16 steps) %.9g", s, cf[1]);
    TH_CHECK(fabs(cf[0] - cf[1]) > 2e-5 && fabs(cf[2] - cf[1]) > 2e-5,
             "diag test cannot tell 15/16/17 steps apart");
    /* a non-symmetric 4x4 against the loop written here */
    Rng r;
    rng_seed(&r, 11, 0);
    float B[16];
    double Bd[16];
    for (int i = 0; i < 16; i++) B[i] = rng_uniform(&r), Bd[i] = B[i];
    float it4[18 * 4], nr4[16];
    s = mixer_spectral_est(B, 4, it4, nr4);
    TH_CHECK(fabs(s - spectral_d(Bd, 4)) <= 1e-6 * fabs(s), "spectral estimate 4x4: %.9g vs %.9g", s,
             spectral_d(Bd, 4));

    /* selectivedense: L = diag(1, sqrt q) gives M = diag(1, q); eps = 0: e_32 = |M^32 w0| / |M^31 w0| */
    float Pd[3] = {1, 0, sqrtf(0.9f)}, ws[33 * 2], zs[32 * 2], ys[32 * 2], es[32];
    float e = mixer_sd_power(Pd, 2, 0.0f, ws, zs, ys, es);
    double qq = (double)Pd[2] * Pd[2], ce = sqrt(1 + pow(qq, 64)) / sqrt(1 + pow(qq, 62));
    TH_CHECK(fabs(e - ce) <= 2e-7, "selectivedense power: %.9g vs closed form %.9g", e, ce);
    /* random packed L (d = 5) against an explicit M and the loop written here */
    float Pr[15];
    double Pdd[15], Md[25];
    for (int i = 0; i < 15; i++) Pr[i] = rng_uniform_range(&r, -1, 1), Pdd[i] = Pr[i];
    llt_d(Pdd, 5, Md);
    float ws5[33 * 5], zs5[32 * 5], ys5[32 * 5], es5[32];
    e = mixer_sd_power(Pr, 5, 1e-5f, ws5, zs5, ys5, es5);
    double ed = sd_power_d(Md, 5, 1e-5);
    TH_CHECK(fabs(e - ed) <= 1e-6 * ed, "selectivedense power d=5: %.9g vs %.9g", e, ed);
}

static void test_grads(Rng *r) {
    for (int ci = 0; ci < NCASES; ci++) {
        const Case *k = &CASES[ci];
        char nm[48];
        case_name(nm, sizeof nm, k);
        Mx x;
        mx_case(&x, k, 5, 200 + ci);
        if (x.c.type != MIX_NONSELECTIVE) kinkfree_p(&x, 2.0f, 0.05f, r);
        GradCase gc = {.name = nm, .loss = mx_loss, .bwd = mx_bwd, .ctx = &x, .h = 1e-3f, .tol = 3e-3};
        if (x.c.type != MIX_NONSELECTIVE) add_tensor(&gc, "p", x.p, x.dp, (size_t)x.M * x.c.dp, 12);
        add_tensor(&gc, "v", x.v, x.dv, (size_t)x.M * x.c.d, 12);
        if (x.c.type == MIX_NONSELECTIVE) {
            size_t off = ptab_find(&x.t, "m.skew")->offset; /* base is fixed: no gradient */
            add_tensor(&gc, "skew", x.th + off, x.dth + off, (size_t)x.c.d * x.c.d, 24);
        } else {
            add_tensor(&gc, "params", x.th, x.dth, x.t.total, 40);
        }
        run_grad_case(&gc, r);

        /* exact adjoint: <Q a, b> == <a, Q^T b> (dv alone, dw = dp = NULL) */
        size_t n = (size_t)x.M * x.c.d;
        float *dv2 = th_alloc(n), *dv3 = th_alloc(n);
        mixer_refresh(&x.c, &x.w);
        mixer_fwd(&x.c, &x.w, x.out, x.p, x.v, x.M, x.cache, x.scratch);
        mixer_bwd(&x.c, &x.w, NULL, NULL, dv2, x.wout, x.p, x.v, x.M, x.cache, x.scratch);
        double lhs = dotd(x.out, x.wout, n), rhs = dotd(x.v, dv2, n);
        TH_CHECK(fabs(lhs - rhs) <=
                     1e-5 * (fabs(lhs) + sqrt(dotd(x.out, x.out, n) * dotd(x.wout, x.wout, n)) * 1e-2),
                 "%s: adjoint <Qa,b> %.9g vs <a,Q^T b> %.9g", nm, lhs, rhs);
        /* dv alone equals dv of the full backward */
        memset(x.dp, 0, sizeof(float) * x.M * x.c.dp);
        memset(x.dth, 0, x.t.total * sizeof(float));
        memset(x.deff, 0, mixer_eff_floats(&x.c) * sizeof(float));
        mixer_bwd(&x.c, &x.w, &x.dw, x.dp, dv3, x.wout, x.p, x.v, x.M, x.cache, x.scratch);
        TH_CHECK(!memcmp(dv2, dv3, n * sizeof(float)), "%s: dv depends on whether dp/dw are wanted", nm);
        free(dv2);
        free(dv3);
        mx_free(&x);
    }
}

/* fwd + bwd at two thread counts (th_thread_base: 2 vs 3 in a BLAS build, 1 vs 2 otherwise): every
 * output bit-identical (a serial build has nothing to test). */
static void test_threads(void) {
#ifndef _OPENMP
    printf("skip: mixer thread bit-identity (serial build)\n");
    return;
#endif
    int t0 = th_thread_base();
    for (int ci = 0; ci < NCASES; ci++) {
        const Case *k = &CASES[ci];
        char nm[128];
        case_name(nm, sizeof nm, k);
        int M = 300; /* > 256 tokens: several workspace chunks */
        float *res[2];
        size_t tot = 0;
        for (int run = 0; run < 2; run++) {
            Mx x;
            mx_case(&x, k, M, 300 + ci);
            th_bitid_threads(t0 + run);
            mx_bwd(&x);
            size_t no = (size_t)M * x.c.d, np = (size_t)M * x.c.dp;
            tot = no + np + no + x.t.total;
            res[run] = th_alloc(tot);
            memcpy(res[run], x.out, no * sizeof(float));
            memcpy(res[run] + no, x.dp, np * sizeof(float));
            memcpy(res[run] + no + np, x.dv, no * sizeof(float));
            memcpy(res[run] + 2 * no + np, x.dth, x.t.total * sizeof(float));
            mx_free(&x);
        }
        th_threads_restore(1);
        TH_CHECK(!memcmp(res[0], res[1], tot * sizeof(float)), "%s: %d vs %d threads differ", nm, t0, t0 + 1);
        free(res[0]);
        free(res[1]);
    }
}

/* ---- PyTorch reference -------------------------------------------------------------------------- */

static const struct {
    const char *name, *type;
    int d, r;
    const char *ac;
    int R;
    const char *kn;
    float eps;
} REF[] = {
    {"hh", "householder", 16, 3, "silu", -1, "column-wise", 1e-5f},
    {"hhlr", "householder", 16, 2, "relu", 4, "column-wise", 1e-6f},
    {"dplr", "dplr", 16, 2, "identity", -1, "column-wise", 1e-5f},
    {"kron", "kronecker", 12, 1, "silu", -1, "column-wise", 1e-5f},
    {"kspec", "kronecker", 16, 1, "silu", 3, "spectral", 1e-6f},
    {"mon", "monarch", 16, 4, "silu", -1, "column-wise", 1e-5f},
    {"sd", "selectivedense", 12, 1, "silu", -1, "column-wise", 1e-5f},
    {"nons", "nonselective", 16, 1, "silu", -1, "column-wise", 1e-5f},
    {"mix", "mixture", 12, 3, "silu", 2, "column-wise", 1e-6f},
};

static double worst_ref_out, worst_ref_grad;

/* TH_CLOSE that also records the worst error for the closing line */
static void ref_close(const float *a, const float *b, size_t n, double tol, const char *name, double *worst) {
    double e = th_rel_err(a, b, n);
    if (e > *worst) *worst = e;
    TH_CHECK(e <= tol, "%s: rel err %.3g > %.3g vs PyTorch", name, e, tol);
}

/* How far rounding alone moves each result: every input and parameter nudged by one ulp, up or down
 * at random, then the forward and backward run again. Two float32 implementations that round
 * differently (ours, with or without BLAS, and PyTorch's) differ by about this much, whatever the
 * host: an ill-conditioned result (a weight-norm gradient that cancels, say) gets a tolerance to
 * match instead of one tuned on a single machine. The perturbed results are kept here; x itself is
 * restored bit for bit. */
typedef struct {
    float *out, *dp, *dv, *dth;
} Sensitivity;

static void nudge(float *a, size_t n, Rng *r) {
    for (size_t i = 0; i < n; i++) a[i] = nextafterf(a[i], rng_below(r, 2) ? INFINITY : -INFINITY);
}

static void sens_measure(Sensitivity *s, Mx *x) {
    size_t no = (size_t)x->M * x->c.d, np = (size_t)x->M * x->c.dp, nt = x->t.total;
    float *keep = th_alloc(nt + np + 2 * no);
    memcpy(keep, x->th, nt * sizeof(float));
    memcpy(keep + nt, x->p, np * sizeof(float));
    memcpy(keep + nt + np, x->v, no * sizeof(float));
    memcpy(keep + nt + np + no, x->wout, no * sizeof(float));
    Rng r;
    rng_seed(&r, 4242, 3);
    nudge(x->th, nt, &r);
    nudge(x->p, np, &r);
    nudge(x->v, no, &r);
    nudge(x->wout, no, &r);
    memset(x->dp, 0, np * sizeof(float));
    memset(x->dv, 0, no * sizeof(float));
    memset(x->dth, 0, nt * sizeof(float));
    mx_bwd(x);
    s->out = th_alloc(no), s->dp = th_alloc(np), s->dv = th_alloc(no), s->dth = th_alloc(nt);
    memcpy(s->out, x->out, no * sizeof(float));
    memcpy(s->dp, x->dp, np * sizeof(float));
    memcpy(s->dv, x->dv, no * sizeof(float));
    memcpy(s->dth, x->dth, nt * sizeof(float));
    memcpy(x->th, keep, nt * sizeof(float));
    memcpy(x->p, keep + nt, np * sizeof(float));
    memcpy(x->v, keep + nt + np, no * sizeof(float));
    memcpy(x->wout, keep + nt + np + no, no * sizeof(float));
    free(keep);
}

static void sens_free(Sensitivity *s) {
    free(s->out), free(s->dp), free(s->dv), free(s->dth);
}

/* The tolerance for one result: its floor (what a well-conditioned result is held to), or 8x the
 * movement one ulp of input rounding causes, whichever is larger. */
static double sens_tol(double floor, const float *ours, const float *nudged, size_t n) {
    double t = 8.0 * th_rel_err(nudged, ours, n);
    return t > floor ? t : floor;
}

static const float *ref_get(const StFile *f, const char *name, size_t numel) {
    const StTensor *t = st_find(f, name);
    if (!t || t->dtype != ST_F32 || st_numel(t) != numel) return NULL;
    return st_data(f, t);
}

static void test_pytorch(void) {
    StFile f;
    int rc = st_read(&f, "tests/ref/mixer.safetensors");
    TH_CHECK(rc == IM_OK, "read tests/ref/mixer.safetensors: %s", err_msg());
    if (rc) return;
    const int M = 5;
    for (size_t ci = 0; ci < sizeof REF / sizeof *REF; ci++) {
        const char *cn = REF[ci].name;
        Mx x;
        mx_init(&x, REF[ci].type, REF[ci].d, 2 * REF[ci].d, REF[ci].r, REF[ci].ac, REF[ci].R, REF[ci].kn,
                REF[ci].eps, M, 1, cn);
        int d = x.c.d, dp = x.c.dp, ok = 1;
        char nm[PARAM_NAME_LEN + 32];
        for (int i = 0; i < x.t.n; i++) {
            const ParamInfo *pi = &x.t.p[i];
            const float *src = ref_get(&f, pi->name, pi->numel);
            TH_CHECK(src, "%s: reference lacks %s", cn, pi->name);
            if (src)
                memcpy(x.th + pi->offset, src, pi->numel * sizeof(float));
            else
                ok = 0;
        }
        const float *in[3];
        const char *inn[3] = {"p", "v", "wout"};
        size_t inl[3] = {(size_t)M * dp, (size_t)M * d, (size_t)M * d};
        float *dst[3] = {x.p, x.v, x.wout};
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "%s.%s", cn, inn[i]);
            in[i] = ref_get(&f, nm, inl[i]);
            TH_CHECK(in[i], "%s: reference lacks %s", cn, nm);
            if (in[i])
                memcpy(dst[i], in[i], inl[i] * sizeof(float));
            else
                ok = 0;
        }
        if (!ok) {
            mx_free(&x);
            continue;
        }
        Sensitivity sens;
        sens_measure(&sens, &x);
        memset(x.dp, 0, inl[0] * sizeof(float));
        memset(x.dv, 0, inl[1] * sizeof(float));
        memset(x.dth, 0, x.t.total * sizeof(float));
        mx_bwd(&x);
        snprintf(nm, sizeof nm, "%s.out", cn);
        const float *o = ref_get(&f, nm, inl[1]);
        TH_CHECK(o, "%s missing", nm);
        if (o) ref_close(x.out, o, inl[1], sens_tol(2e-6, x.out, sens.out, inl[1]), nm, &worst_ref_out);
        const char *gn[2] = {"p", "v"};
        float *gg[2] = {x.dp, x.dv}, *gs[2] = {sens.dp, sens.dv};
        for (int i = 0; i < 2; i++) {
            snprintf(nm, sizeof nm, "%s.grad.%s", cn, gn[i]);
            const float *g = ref_get(&f, nm, inl[i]);
            TH_CHECK(g, "%s missing", nm);
            if (g) ref_close(gg[i], g, inl[i], sens_tol(1e-5, gg[i], gs[i], inl[i]), nm, &worst_ref_grad);
        }
        for (int i = 0; i < x.t.n; i++) {
            const ParamInfo *pi = &x.t.p[i];
            if (ends_with(pi->name, ".base")) continue;
            snprintf(nm, sizeof nm, "%s.grad.%s", cn, pi->name + strlen(cn) + 1);
            const float *g = ref_get(&f, nm, pi->numel);
            TH_CHECK(g, "%s missing", nm);
            if (g)
                ref_close(x.dth + pi->offset, g, pi->numel,
                          sens_tol(1e-5, x.dth + pi->offset, sens.dth + pi->offset, pi->numel), nm, &worst_ref_grad);
        }
        sens_free(&sens);
        mx_free(&x);
    }
    st_free(&f);
}

/* mixer_fwd_fixed (a fixed share of the projections computed once, as FP-Mamba's solve does)
 * equals mixer_fwd, for a split p = [fixed ; variable] and for a fully fixed p. */
static void test_fixed_split(void) {
    const char *types[] = {"householder", "dplr", "kronecker", "monarch", "selectivedense", "mixture"};
    for (int i = 0; i < 6; i++) {
        int d = 16, dp = 32, M = 7;
        Mx x;
        mx_init(&x, types[i], d, dp, !strcmp(types[i], "monarch") ? 4 : 2, "silu", -1, "column-wise", 1e-5f, M,
                100 + i, "m");
        TH_CHECK(mixer_fixed_floats(&x.c, M) == (size_t)M * x.c.out_total, "%s: fixed floats", types[i]);
        float *raw = th_alloc(mixer_fixed_floats(&x.c, M)), *pf = th_alloc((size_t)M * 16), *pv = th_alloc((size_t)M * 16);
        for (int t = 0; t < M; t++) {
            memcpy(pf + (size_t)t * 16, x.p + (size_t)t * dp, 16 * sizeof(float));
            memcpy(pv + (size_t)t * 16, x.p + (size_t)t * dp + 16, 16 * sizeof(float));
        }
        mixer_fwd(&x.c, &x.w, x.out, x.p, x.v, M, NULL, x.scratch);
        mixer_project_fixed(&x.c, &x.w, raw, pf, 16, M);
        mixer_fwd_fixed(&x.c, &x.w, x.dv, raw, pv, 16, x.v, M, x.scratch);
        char nm[64];
        snprintf(nm, sizeof nm, "%s: fixed split == mixer_fwd", types[i]);
        TH_CLOSE(x.dv, x.out, (size_t)M * d, 1e-5, nm);
        mixer_project_fixed(&x.c, &x.w, raw, x.p, dp, M);
        mixer_fwd_fixed(&x.c, &x.w, x.dv, raw, NULL, dp, x.v, M, x.scratch);
        snprintf(nm, sizeof nm, "%s: fully fixed p == mixer_fwd", types[i]);
        TH_CLOSE(x.dv, x.out, (size_t)M * d, 1e-5, nm);
        free(raw); free(pf); free(pv);
        mx_free(&x);
    }
    Mx x;
    mx_init(&x, "householder", 16, 32, 2, "silu", 4, "column-wise", 1e-5f, 3, 7, "m");
    TH_CHECK(mixer_fixed_floats(&x.c, 3) == 0, "factorised projections have no fixed split");
    mx_free(&x);
}

int main(void) {
    th_name = "test_mixer";
    Rng r;
    rng_seed(&r, 9090, 1);
    k_set_threads(1);
    test_cfg();
    test_table();
    test_param_counts();
    test_explicit();
    test_reflection();
    test_dplr_is_householder();
    test_post_init();
    test_fill_and_power();
    test_grads(&r);
    test_threads();
    test_pytorch();
    test_fixed_split();
    printf(
        "test_mixer: worst FD rel err %.3g, worst directional rel err %.3g; vs PyTorch: out %.3g, grads %.3g\n",
        worst_fd, worst_dir, worst_ref_out, worst_ref_grad);
    return th_done();
}
