/* mixer.c: configuration, parameters and the batched forward/backward of the channel mixers
 * (spec fp-rnn §2); see mixer.h. The per-token math is in mixer_tok.c, expm in mixer_expm.c.
 *
 * Forward: every projection is one (or two) k_linear GEMMs over all M tokens, the activations are
 * applied in bulk, then each token is mixed independently (OpenMP, one workspace slot per token of a
 * chunk). Backward: the same activations are recomputed from the cached raw outputs, each token's
 * backward overwrites its activated values with their gradients, those are pushed through the
 * activations in place, and the projections' backward are again GEMMs (k_linear_bwd), which sum the
 * parameter gradients over tokens in a fixed order.
 */
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

#define SLOT_BUDGET ((size_t)1 << 22) /* floats of per-token workspace kept at once */
/* One-thread cost estimates for k_foreach: a token of the mixer per float of its workspace (the
 * token loop used to fork from 32768 floats of workspace, i.e. from 20 us at this rate) and a
 * ReLU element. */
#define NS_PER_WORK_FLOAT 0.6
#define NS_RELU 0.1

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- configuration ------------------------------------------------------------------------------ */

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

void mixer_add_proj(MixerCfg *c, int sub, const char *name, int out, int gate) {
    CHECK(c->n_proj < MIX_MAX_PROJ, "mixer: too many projections");
    MixProjCfg *p = &c->proj[c->n_proj++];
    *p = (MixProjCfg){.out = out, .bias = gate, .gate = gate, .sub = sub, .name = name, .off = c->out_total};
    c->out_total += (size_t)out;
}

/* One simple mixer (a whole mixer, or one mixture term) and its projections. */
static void add_sub(MixerCfg *c, int type, int r, int spectral, float eps) {
    int k = c->n_sub++, d = c->d;
    MixSub *s = &c->sub[k];
    *s = (MixSub){.type = type, .r = r, .spectral = spectral, .eps = eps, .proj = c->n_proj};
    mixer_tok_layout(c, k);
    s->work = (int)mixer_tok_work(s, d);
}

#define MIXER_NAME(id, name) name,
static const char *const TYPE_NAMES[] = {MIXER_LIST(MIXER_NAME)};
static const char *const AC_NAMES[] = {MIXER_AC_LIST(MIXER_NAME)};
#undef MIXER_NAME
_Static_assert(sizeof TYPE_NAMES / sizeof TYPE_NAMES[0] == MIX_N_TYPE, "one name per MixerType");
_Static_assert(sizeof AC_NAMES / sizeof AC_NAMES[0] == MIX_N_AC, "one name per MixerAc");

static int find_name(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* "a | b | c" of a name list, built once into buf. */
static const char *join(char *buf, size_t cap, const char *const *names, int n) {
    if (!buf[0])
        for (int i = 0, at = 0; i < n; i++) at += snprintf(buf + at, cap - (size_t)at, "%s%s", i ? " | " : "", names[i]);
    return buf;
}

const char *mixer_type_names(void) {
    static char buf[160];
    return join(buf, sizeof buf, TYPE_NAMES, MIX_N_TYPE);
}

const char *mixer_ac_names(void) {
    static char buf[64];
    return join(buf, sizeof buf, AC_NAMES, MIX_N_AC);
}

int mixer_type_parse(const char *name) {
    if (name && !strcmp(name, "householderproduct")) return MIX_HOUSEHOLDER; /* the reference's name */
    return find_name(TYPE_NAMES, MIX_N_TYPE, name);
}

int mixer_ac_parse(const char *name) { return find_name(AC_NAMES, MIX_N_AC, name); }

int mixer_check_keys(const char *type, const char *ac, int proj_rank, const char *kron_norm, float eps) {
    if (mixer_type_parse(type) < 0)
        return err_set(IM_EINVAL, "config key 'mixer_type': unknown '%s' (%s)", type ? type : "(null)",
                       mixer_type_names());
    if (mixer_ac_parse(ac) < 0)
        return err_set(IM_EINVAL, "config key 'mixer_ac': unknown '%s' (%s)", ac ? ac : "(null)", mixer_ac_names());
    if (proj_rank == 0 || proj_rank < -1)
        return err_set(IM_EINVAL, "config key 'mixer_proj_rank': %d must be -1 (full) or >= 1", proj_rank);
    if (kron_norm && strcmp(kron_norm, "column-wise") && strcmp(kron_norm, "spectral"))
        return err_set(IM_EINVAL, "config key 'kron_norm': unknown '%s' (column-wise | spectral)", kron_norm);
    if (!(eps >= 0)) return err_set(IM_EINVAL, "config key 'norm_eps': %g must be >= 0", (double)eps);
    return IM_OK;
}

int mixer_cfg_init(MixerCfg *c, const char *type_s, int d, int dp, int rank, const char *ac, int proj_rank,
                   const char *kron_norm, float eps) {
    CHECK(c, "mixer_cfg_init: NULL cfg");
    memset(c, 0, sizeof *c);
    int rc = mixer_check_keys(type_s, ac, proj_rank, kron_norm, eps);
    if (rc) return rc;
    int type = mixer_type_parse(type_s), aci = mixer_ac_parse(ac);
    if (d < 1 || dp < 1) return err_set(IM_EINVAL, "mixer: widths must be >= 1 (d=%d, dp=%d)", d, dp);
    if (rank < 1) return err_set(IM_EINVAL, "config key 'mixer_rank': %d must be >= 1", rank);
    if (type == MIX_MONARCH && !is_pow2(d))
        return err_set(IM_EINVAL, "config key 'mixer_type': monarch needs a power-of-two width, got d=%d", d);
    if (type == MIX_MONARCH && (!is_pow2(rank) || rank > d))
        return err_set(IM_EINVAL,
                       "config key 'mixer_rank': monarch block size %d must be a power of two dividing d=%d",
                       rank, d);
    if (type == MIX_MIXTURE && (rank < 2 || rank > MIX_MAX_SUB))
        return err_set(IM_EINVAL, "config key 'mixer_rank': a mixture has 2..%d terms, got %d", MIX_MAX_SUB,
                       rank);
    if (type == MIX_SELECTIVEDENSE && proj_rank != -1)
        return err_set(IM_EINVAL,
                       "config key 'mixer_proj_rank': selectivedense supports only -1 (the reference's "
                       "factorised path is broken, fp-rnn §2.5), got %d",
                       proj_rank);
    *c = (MixerCfg){.type = type, .d = d, .dp = dp, .r = rank, .proj_rank = proj_rank, .ac = aci, .eps = eps};
    c->spectral = type == MIX_KRONECKER && kron_norm && !strcmp(kron_norm, "spectral");
    if (type == MIX_MIXTURE) {
        /* terms use eps 1e-5 whatever norm_eps is (§2.7) */
        for (int k = 0; k < rank; k++) add_sub(c, k % 2 ? MIX_KRONECKER : MIX_HOUSEHOLDER, 1, 0, 1e-5f);
    } else if (type != MIX_NONSELECTIVE) {
        add_sub(c, type, rank, c->spectral, eps);
    }
    for (int k = 0; k < c->n_sub; k++)
        if (c->sub[k].type == MIX_KRONECKER) c->m1 = c->sub[k].m1, c->m2 = c->sub[k].m2;
    /* token workspace: mixture inputs (n_sub d) + two gradient rows + the largest term's */
    size_t w = 0;
    for (int k = 0; k < c->n_sub; k++) w = w > (size_t)c->sub[k].work ? w : (size_t)c->sub[k].work;
    c->work = al16(w + (size_t)(c->n_sub + 2) * d);
    return IM_OK;
}

/* ---- parameters ------------------------------------------------------------------------------- */

/* in/out widths of linear k (0 or 1) of projection j */
static int lin_in(const MixerCfg *c, int k) { return c->proj_rank > 0 && k == 1 ? c->proj_rank : c->dp; }
static int lin_out(const MixerCfg *c, int j, int k) {
    return c->proj_rank > 0 && k == 0 ? c->proj_rank : c->proj[j].out;
}
static int n_lin(const MixerCfg *c) { return c->proj_rank > 0 ? 2 : 1; }

/* "prefix.[sub<k>.]<proj>[.<k>]" */
static void lin_name(char *buf, size_t n, const MixerCfg *c, const char *prefix, int j, int k) {
    char sub[16] = "";
    if (c->type == MIX_MIXTURE) snprintf(sub, sizeof sub, "sub%d.", c->proj[j].sub);
    if (c->proj_rank > 0)
        snprintf(buf, n, "%s.%s%s.%d", prefix, sub, c->proj[j].name, k);
    else
        snprintf(buf, n, "%s.%s%s", prefix, sub, c->proj[j].name);
}

void mixer_add_params(const MixerCfg *c, ParamTable *t, const char *prefix) {
    char base[PARAM_NAME_LEN], name[PARAM_NAME_LEN + 16];
    if (c->type == MIX_NONSELECTIVE) {
        snprintf(name, sizeof name, "%s.skew", prefix);
        ptab_add(t, name, INIT_ZERO, 0, 0, 1, 2, c->d, c->d);
        snprintf(name, sizeof name, "%s.base", prefix);
        ptab_add(t, name, INIT_UNIFORM, 1.0f / sqrtf((float)c->d), 0, 0, 2, c->d, c->d);
        return;
    }
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++) {
            int in = lin_in(c, k), out = lin_out(c, j, k);
            lin_name(base, sizeof base, c, prefix, j, k);
            snprintf(name, sizeof name, "%s.weight_g", base);
            ptab_add(t, name, INIT_ONE, 0, 0, 1, 2, out, 1);
            snprintf(name, sizeof name, "%s.weight_v", base);
            ptab_add(t, name, INIT_UNIFORM, 1.0f / sqrtf((float)in), 0, 1, 2, out, in);
            if (c->proj[j].bias && k == n_lin(c) - 1) {
                snprintf(name, sizeof name, "%s.bias", base);
                ptab_add(t, name, INIT_ZERO, 0, 0, 0, 1, out);
            }
        }
}

size_t mixer_eff_floats(const MixerCfg *c) {
    if (c->type == MIX_NONSELECTIVE) return al16((size_t)c->d * c->d) + (size_t)10 * c->d * c->d;
    size_t n = 0;
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++) n += al16((size_t)lin_out(c, j, k) * lin_in(c, k));
    return n;
}

static float *find(const ParamTable *t, float *block, const char *name, size_t numel) {
    const ParamInfo *pi = ptab_find(t, name);
    CHECK(pi, "mixer_bind: parameter %s not in the table", name);
    CHECK(pi->numel == numel, "mixer_bind: %s has %zu floats, expected %zu", name, pi->numel, numel);
    return block + pi->offset;
}

void mixer_bind(const MixerCfg *c, MixerW *w, const ParamTable *t, float *block, const char *prefix,
                float *eff) {
    CHECK(c && w && t && block && prefix && eff, "mixer_bind: NULL argument");
    memset(w, 0, sizeof *w);
    char base[PARAM_NAME_LEN], name[PARAM_NAME_LEN + 16];
    size_t dd = (size_t)c->d * c->d;
    if (c->type == MIX_NONSELECTIVE) {
        snprintf(name, sizeof name, "%s.skew", prefix);
        w->skew = find(t, block, name, dd);
        snprintf(name, sizeof name, "%s.base", prefix);
        w->base = find(t, block, name, dd);
        w->O = eff;
        w->work = eff + al16(dd);
        return;
    }
    float *e = eff;
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++) {
            LinearW *l = &w->p[j].l[k];
            size_t in = (size_t)lin_in(c, k), out = (size_t)lin_out(c, j, k);
            lin_name(base, sizeof base, c, prefix, j, k);
            snprintf(name, sizeof name, "%s.weight_g", base);
            l->g = find(t, block, name, out);
            snprintf(name, sizeof name, "%s.weight_v", base);
            l->v = find(t, block, name, out * in);
            if (c->proj[j].bias && k == n_lin(c) - 1) {
                snprintf(name, sizeof name, "%s.bias", base);
                l->b = find(t, block, name, out);
            }
            l->W = e;
            e += al16(out * in);
        }
}

/* base := Q of base = Q R with diag(R) > 0 (torch's _make_orthogonal), modified Gram-Schmidt on
 * the columns in double. */
static void orthogonalize(float *A, int d) {
    double *Q = xmalloc((size_t)d * d * sizeof(double));
    for (size_t i = 0; i < (size_t)d * d; i++) Q[i] = A[i];
    for (int j = 0; j < d; j++) {
        for (int k = 0; k < j; k++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += Q[(size_t)i * d + k] * Q[(size_t)i * d + j];
            for (int i = 0; i < d; i++) Q[(size_t)i * d + j] -= s * Q[(size_t)i * d + k];
        }
        double n = 0;
        for (int i = 0; i < d; i++) n += Q[(size_t)i * d + j] * Q[(size_t)i * d + j];
        n = sqrt(n);
        CHECK(n > 0, "mixer: singular nonselective base");
        for (int i = 0; i < d; i++) Q[(size_t)i * d + j] /= n;
    }
    for (size_t i = 0; i < (size_t)d * d; i++) A[i] = (float)Q[i];
    free(Q);
}

void mixer_post_init(const MixerCfg *c, MixerW *w) {
    const WnOpts o = WN_OPTS_DEFAULT;
    if (c->type == MIX_NONSELECTIVE) orthogonalize(w->base, c->d); /* setup path: one allocation */
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++) linear_wn_init(&w->p[j].l[k], &o, lin_out(c, j, k), lin_in(c, k));
    mixer_refresh(c, w);
}

void mixer_refresh(const MixerCfg *c, MixerW *w) {
    const WnOpts o = WN_OPTS_DEFAULT;
    if (c->type == MIX_NONSELECTIVE) {
        int d = c->d;
        size_t dd = (size_t)d * d;
        float *A = w->work, *E = A + dd;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                A[(size_t)i * d + j] = w->skew[(size_t)i * d + j] - w->skew[(size_t)j * d + i];
        mixer_expm(E, A, d, E + dd);
        k_gemm(0, 0, d, d, d, 1.0f, w->base, d, E, d, 0.0f, w->O, d); /* O = O0 expm(A) */
        return;
    }
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++)
            linear_wn_refresh(&w->p[j].l[k], &o, lin_out(c, j, k), lin_in(c, k));
}

void mixer_wn_bwd(const MixerCfg *c, const MixerW *w, MixerW *dw) {
    const WnOpts o = WN_OPTS_DEFAULT;
    if (c->type == MIX_NONSELECTIVE) {
        if (!dw->O || !dw->skew) return;
        int d = c->d;
        size_t dd = (size_t)d * d;
        float *At = dw->work, *dE = At + dd, *L = dE + dd;
        /* O = O0 E, E = expm(A), A = S - S^T:  dE = O0^T dO;  dA = L(A^T, dE);  dS = dA - dA^T */
        k_gemm(1, 0, d, d, d, 1.0f, w->base, d, dw->O, d, 0.0f, dE, d);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                At[(size_t)i * d + j] = w->skew[(size_t)j * d + i] - w->skew[(size_t)i * d + j];
        mixer_expm_frechet(L, At, dE, d, L + dd);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                dw->skew[(size_t)i * d + j] += L[(size_t)i * d + j] - L[(size_t)j * d + i];
        return;
    }
    for (int j = 0; j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++)
            if (dw->p[j].l[k].W)
                linear_wn_bwd(&w->p[j].l[k], &dw->p[j].l[k], &o, lin_out(c, j, k), lin_in(c, k));
}

/* ---- buffers ----------------------------------------------------------------------------------- */

static size_t mid_floats(const MixerCfg *c, int M) {
    return c->proj_rank > 0 ? (size_t)M * c->proj_rank * c->n_proj : 0;
}

size_t mixer_cache_floats(const MixerCfg *c, int M) {
    if (c->type == MIX_NONSELECTIVE) return 0;
    return (size_t)M * c->out_total + mid_floats(c, M);
}

/* Tokens whose workspaces are live at once: a function of (cfg, M) only, never of the thread count. */
static int n_slots(const MixerCfg *c, int M) {
    size_t s = SLOT_BUDGET / (c->work ? c->work : 1);
    if (s < 16) s = 16;
    if (s > 256) s = 256;
    return M < (int)s ? M : (int)s;
}

/* scratch = act (M out_total) | raw (M out_total) | mid (M R n_proj) | slots (S work) */
typedef struct {
    float *act, *raw, *mid, *slots;
} Scr;

static Scr carve(const MixerCfg *c, float *scratch, int M) {
    Scr s;
    size_t n = al16((size_t)M * c->out_total);
    s.act = scratch;
    s.raw = scratch + n;
    s.mid = s.raw + n;
    s.slots = s.mid + al16(mid_floats(c, M));
    return s;
}

size_t mixer_scratch_floats(const MixerCfg *c, int M) {
    if (c->type == MIX_NONSELECTIVE) return 0;
    return 2 * al16((size_t)M * c->out_total) + al16(mid_floats(c, M)) + (size_t)n_slots(c, M) * c->work;
}

/* ---- projections and activations --------------------------------------------------------------- */

static void project(const MixerCfg *c, const MixerW *w, const float *p, int M, float *raw, float *mid) {
    for (int j = 0; j < c->n_proj; j++) {
        const MixProjW *pw = &w->p[j];
        float *out = raw + (size_t)M * c->proj[j].off;
        if (c->proj_rank < 0) {
            k_linear_fwd(out, p, pw->l[0].W, pw->l[0].b, M, c->dp, c->proj[j].out);
        } else {
            float *h = mid + (size_t)M * c->proj_rank * j;
            k_linear_fwd(h, p, pw->l[0].W, NULL, M, c->dp, c->proj_rank);
            k_linear_fwd(out, h, pw->l[1].W, pw->l[1].b, M, c->proj_rank, c->proj[j].out);
        }
    }
}

/* The elementwise activation loops (k_foreach items): y = f(x) or y *= f'(x) on [i0, i1). */
typedef struct { float *y; const float *x; } Ew;

static void relu_fwd_range(void *ctx, long i0, long i1) {
    const Ew *e = ctx;
    for (long i = i0; i < i1; i++) e->y[i] = e->x[i] > 0 ? e->x[i] : 0.0f;
}

static void relu_bwd_range(void *ctx, long i0, long i1) {
    const Ew *e = ctx;
    for (long i = i0; i < i1; i++) e->y[i] = e->x[i] > 0 ? e->y[i] : 0.0f; /* torch: no gradient at 0 */
}

/* act = f(raw): sigmoid on gates, mixer_ac on everything else */
static void activate(const MixerCfg *c, const float *raw, float *act, int M) {
    for (int j = 0; j < c->n_proj; j++) {
        size_t o = (size_t)M * c->proj[j].off;
        long n = (long)M * c->proj[j].out;
        const float *x = raw + o;
        float *y = act + o;
        int kind = c->proj[j].gate ? -1 : c->ac;
        if (kind == MIX_AC_SILU)
            k_silu_fwd(y, x, (size_t)n);
        else if (kind == MIX_AC_IDENTITY)
            memcpy(y, x, (size_t)n * sizeof(float));
        else if (kind == MIX_AC_RELU) {
            Ew e = {y, x};
            k_foreach(n, NS_RELU, relu_fwd_range, &e);
        } else {
            k_sigmoid(y, x, NULL, M, c->proj[j].out);
        }
    }
}

/* g *= f'(raw) in place (g: gradient on act, becomes the gradient on raw) */
static void activate_bwd(const MixerCfg *c, const float *raw, float *g, int M) {
    for (int j = 0; j < c->n_proj; j++) {
        size_t o = (size_t)M * c->proj[j].off;
        long n = (long)M * c->proj[j].out;
        const float *x = raw + o;
        float *y = g + o;
        int kind = c->proj[j].gate ? -1 : c->ac;
        Ew e = {y, x};
        if (kind == MIX_AC_RELU) k_foreach(n, NS_RELU, relu_bwd_range, &e);
        else if (kind == MIX_AC_SILU) k_mul_dsilu(y, x, (size_t)n);
        else if (kind < 0) k_mul_dsigmoid(y, x, (size_t)n);
    }
}

/* draw: (M, out_total) gradients on the raw outputs; mid from the forward. */
static void project_bwd(const MixerCfg *c, const MixerW *w, MixerW *dw, float *dp, const float *draw,
                        const float *p, const float *mid, float *dmid, int M) {
    for (int j = 0; j < c->n_proj; j++) {
        const MixProjW *pw = &w->p[j];
        MixProjW *dpw = dw ? &dw->p[j] : NULL;
        const float *g = draw + (size_t)M * c->proj[j].off;
        int out = c->proj[j].out, last = n_lin(c) - 1;
        float *dW0 = dpw ? dpw->l[0].W : NULL, *db = dpw && pw->l[last].b ? dpw->l[last].b : NULL;
        if (c->proj_rank < 0) {
            if (dp || dW0 || db) k_linear_bwd(dp, dW0, db, g, p, pw->l[0].W, M, c->dp, out);
            continue;
        }
        int R = c->proj_rank;
        const float *h = mid + (size_t)M * R * j;
        float *dW1 = dpw ? dpw->l[1].W : NULL, *dh = (dp || dW0) ? dmid : NULL;
        if (dh) memset(dh, 0, (size_t)M * R * sizeof(float));
        if (dh || dW1 || db) k_linear_bwd(dh, dW1, db, g, h, pw->l[1].W, M, R, out);
        if (dh) k_linear_bwd(dp, dW0, NULL, dh, p, pw->l[0].W, M, c->dp, R);
    }
}

/* ---- the token loops ----------------------------------------------------------------------------- */

/* act rows of token t for sub-mixer k */
static void tok_act(const MixerCfg *c, int k, float *act, int M, int t, float *a[2]) {
    int j = c->sub[k].proj;
    for (int i = 0; i < 2; i++) {
        int jj = j + i < c->n_proj && c->proj[j + i].sub == k ? j + i : j;
        a[i] = act + (size_t)M * c->proj[jj].off + (size_t)t * c->proj[jj].out;
    }
}

static void tok_fwd(const MixerCfg *c, float *act, int M, int t, const float *x, float *y, float *work) {
    int d = c->d, n = c->n_sub;
    float *buf = work, *sw = work + (size_t)2 * d, *a[2];
    const float *src = x;
    for (int k = 0; k < n; k++) {
        float *dst = k == n - 1 ? y : buf + (size_t)(k & 1) * d; /* ping-pong between mixture terms */
        tok_act(c, k, act, M, t, a);
        mixer_tok_fwd(&c->sub[k], d, a, src, dst, sw);
        src = dst;
    }
}

/* dv += Q^T g for token t; overwrites the token's act rows with their gradients when want */
static void tok_bwd(const MixerCfg *c, float *act, int M, int t, const float *x, const float *g, float *dv,
                    int want, float *work) {
    int d = c->d, n = c->n_sub;
    float *xs = work, *g0 = xs + (size_t)n * d, *g1 = g0 + d, *sw = g1 + d, *a[2];
    memcpy(xs, x, (size_t)d * sizeof(float)); /* xs[k] = input of term k */
    for (int k = 0; k + 1 < n; k++) {
        tok_act(c, k, act, M, t, a);
        mixer_tok_fwd(&c->sub[k], d, a, xs + (size_t)k * d, xs + (size_t)(k + 1) * d, sw);
    }
    const float *gin = g;
    for (int k = n - 1; k >= 0; k--) {
        float *gout = (n - 1 - k) & 1 ? g1 : g0;
        tok_act(c, k, act, M, t, a);
        mixer_tok_bwd(&c->sub[k], d, a, xs + (size_t)k * d, gin, gout, want, sw);
        gin = gout;
    }
    if (dv)
        for (int i = 0; i < d; i++) dv[i] += gin[i];
}

/* One chunk of the token loops (k_foreach items j: token t0 + j in workspace slot j). */
typedef struct {
    const MixerCfg *c;
    float *act; /* tok_fwd / tok_bwd take it writable */
    const float *v, *dout;
    float *out, *dv, *slots;
    int M, t0, want;
} TokChunk;

static void tok_fwd_range(void *ctx, long j0, long j1) {
    const TokChunk *k = ctx;
    int d = k->c->d;
    for (long j = j0; j < j1; j++) {
        size_t t = (size_t)(k->t0 + j);
        tok_fwd(k->c, k->act, k->M, (int)t, k->v + t * d, k->out + t * d, k->slots + (size_t)j * k->c->work);
    }
}

static void tok_bwd_range(void *ctx, long j0, long j1) {
    const TokChunk *k = ctx;
    int d = k->c->d;
    for (long j = j0; j < j1; j++) {
        size_t t = (size_t)(k->t0 + j);
        tok_bwd(k->c, k->act, k->M, (int)t, k->v + t * d, k->dout + t * d, k->dv ? k->dv + t * d : NULL, k->want,
                k->slots + (size_t)j * k->c->work);
    }
}

/* out = the mixer applied to every token, S tokens (workspace slots) at a time. */
static void tok_fwd_all(const MixerCfg *c, float *act, const float *v, float *out, float *slots, int M) {
    int S = n_slots(c, M);
    for (int t0 = 0; t0 < M; t0 += S) {
        TokChunk k = {c, act, v, NULL, out, NULL, slots, M, t0, 0};
        k_foreach(M - t0 < S ? M - t0 : S, (double)c->work * NS_PER_WORK_FLOAT, tok_fwd_range, &k);
    }
}

void mixer_fwd(const MixerCfg *c, const MixerW *w, float *out, const float *p, const float *v, int M,
               float *cache, float *scratch) {
    CHECK(c && w && out && v && M >= 0, "mixer_fwd: NULL argument");
    CHECK(out != v, "mixer_fwd: out must not alias v");
    if (c->type == MIX_NONSELECTIVE) { /* out_t = O v_t */
        k_linear_fwd(out, v, w->O, NULL, M, c->d, c->d);
        return;
    }
    CHECK(p && scratch, "mixer_fwd: p and scratch are required");
    Scr s = carve(c, scratch, M);
    float *raw = cache ? cache : s.raw, *mid = cache ? cache + (size_t)M * c->out_total : s.mid;
    project(c, w, p, M, raw, mid);
    activate(c, raw, s.act, M);
    tok_fwd_all(c, s.act, v, out, s.slots, M);
}

size_t mixer_fixed_floats(const MixerCfg *c, int M) {
    return c->type == MIX_NONSELECTIVE || c->proj_rank > 0 ? 0 : (size_t)M * c->out_total;
}

void mixer_project_fixed(const MixerCfg *c, const MixerW *w, float *raw_fixed, const float *p_fixed, int split, int M) {
    CHECK(mixer_fixed_floats(c, M) > 0 || M == 0, "mixer_project_fixed: needs full-rank projections");
    CHECK(split >= 1 && split <= c->dp, "mixer_project_fixed: split %d outside 1..%d", split, c->dp);
    for (int j = 0; j < c->n_proj; j++) {
        const LinearW *l = &w->p[j].l[0];
        float *out = raw_fixed + (size_t)M * c->proj[j].off;
        int oc = c->proj[j].out;
        /* the first `split` input columns of W (row stride dp), plus the bias */
        k_gemm(0, 1, M, oc, split, 1.0f, p_fixed, split, l->W, c->dp, 0.0f, out, oc);
        if (l->b)
            for (int t = 0; t < M; t++)
                for (int o = 0; o < oc; o++) out[(size_t)t * oc + o] += l->b[o];
    }
}

void mixer_fwd_fixed(const MixerCfg *c, const MixerW *w, float *out, const float *raw_fixed, const float *p_var,
                     int split, const float *v, int M, float *scratch) {
    CHECK(c && w && out && v && raw_fixed && scratch && out != v, "mixer_fwd_fixed: bad arguments");
    CHECK(mixer_fixed_floats(c, M) > 0 || M == 0, "mixer_fwd_fixed: needs full-rank projections");
    Scr s = carve(c, scratch, M);
    memcpy(s.raw, raw_fixed, (size_t)M * c->out_total * sizeof(float));
    if (split < c->dp) {
        CHECK(p_var, "mixer_fwd_fixed: p_var required when split < dp");
        for (int j = 0; j < c->n_proj; j++) {
            int oc = c->proj[j].out;
            k_gemm(0, 1, M, oc, c->dp - split, 1.0f, p_var, c->dp - split, w->p[j].l[0].W + split, c->dp, 1.0f,
                   s.raw + (size_t)M * c->proj[j].off, oc);
        }
    }
    activate(c, s.raw, s.act, M);
    tok_fwd_all(c, s.act, v, out, s.slots, M);
}

void mixer_bwd(const MixerCfg *c, const MixerW *w, MixerW *dw, float *dp, float *dv, const float *dout,
               const float *p, const float *v, int M, const float *cache, float *scratch) {
    CHECK(c && w && dout && v && M >= 0, "mixer_bwd: NULL argument");
    if (c->type == MIX_NONSELECTIVE) {
        float *dO = dw ? dw->O : NULL;
        if (dv || dO) k_linear_bwd(dv, dO, NULL, dout, v, w->O, M, c->d, c->d);
        return;
    }
    CHECK(p && cache && scratch, "mixer_bwd: p, cache and scratch are required");
    int want = dp != NULL;
    for (int j = 0; dw && j < c->n_proj; j++)
        for (int k = 0; k < n_lin(c); k++) want |= dw->p[j].l[k].W != NULL || dw->p[j].l[k].b != NULL;
    if (!want && !dv) return;
    Scr s = carve(c, scratch, M);
    const float *raw = cache, *mid = cache + (size_t)M * c->out_total;
    activate(c, raw, s.act, M);
    int S = n_slots(c, M);
    for (int t0 = 0; t0 < M; t0 += S) {
        TokChunk k = {c, s.act, v, dout, NULL, dv, s.slots, M, t0, want};
        k_foreach(M - t0 < S ? M - t0 : S, (double)c->work * NS_PER_WORK_FLOAT, tok_bwd_range, &k);
    }
    if (!want) return;
    activate_bwd(c, raw, s.act, M);
    project_bwd(c, w, dw, dp, s.act, p, mid, s.mid, M);
}

void mixer_matrix(const MixerCfg *c, const MixerW *w, const float *p, float *Q) {
    int d = c->d;
    float *P = xmalloc((size_t)d * c->dp * sizeof(float) + 1), *V = xcalloc((size_t)d * d, sizeof(float));
    float *out = xmalloc((size_t)d * d * sizeof(float)),
          *scr = xmalloc(mixer_scratch_floats(c, d) * sizeof(float) + 1);
    for (int i = 0; i < d; i++) {
        if (p)
            memcpy(P + (size_t)i * c->dp, p, (size_t)c->dp * sizeof(float));
        else
            memset(P + (size_t)i * c->dp, 0, (size_t)c->dp * sizeof(float));
        V[(size_t)i * d + i] = 1.0f;
    }
    mixer_fwd(c, w, out, P, V, d, NULL, scr); /* row j of out = Q e_j = column j of Q */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) Q[(size_t)i * d + j] = out[(size_t)j * d + i];
    free(P);
    free(V);
    free(out);
    free(scr);
}
