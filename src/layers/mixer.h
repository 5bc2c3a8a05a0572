/* mixer.h: the channel mixers Q(p) of the Fixed-Point RNNs (spec fp-rnn §2), forward and backward.
 *
 * Per token t of M:  out_t = Q(p_t) v_t,   p:(M,dp) the "param arg", v:(M,d) the vector to mix.
 *   householder     Q = H_{r-1}..H_0,  H_i = I - 2 a_i u_i u_i^T,  u_i = normalize(ac(W_u p)_i),
 *                   a = sigmoid(W_a p + b_a)                                        (§2.1)
 *   dplr            Q = I - 2 sum_i a_i u_i u_i^T  (all terms on the original v)      (§2.2)
 *   kronecker       Q = I - 2 (U^T (x) W) on row-major vec, U = diag(d1) K1^, W = diag(d2) K2^,
 *                   K_k = L_k L_k^T from triu fills of ac(W_K p), rows normalised, optional
 *                   "spectral" 16-step power-iteration scaling; d = (sigmoid(W_D p + b_D))  (§2.3)
 *   monarch         block-diagonal v_k - a_k M_k^ v_k, block size b = rank          (§2.4)
 *   selectivedense  Q = L L^T / (e + eps), e from 32 power iterations               (§2.5)
 *   nonselective    Q = O0 expm(S - S^T), input independent (p ignored)            (§2.6)
 *   mixture         r sub-mixers in sequence: even householder r=1, odd kronecker
 *                   column-wise, each with its own projections, eps 1e-5             (§2.7)
 * Every projection is a weight-normed linear W_i = g_i v_i/||v_i|| (linear.h), either one dp -> out
 * (proj_rank -1) or two stacked dp -> R -> out (proj_rank R, no bias or activation between, the
 * bias, if any, on the second). mixer_ac acts on the raw matrix/vector entries only, never on the
 * sigmoid gates. Costs per token: householder/dplr O(r d) apply (Q is never built), kronecker
 * O(d^{3/2}), monarch O(d b^2) (forming each block's L L^T), selectivedense O(32 d^2) (L L^T is
 * never formed).
 *
 * Memory (STYLE §8.3): the caller owns everything. `eff` holds the effective weights (and, for
 * nonselective, O and its expm workspace); `cache` keeps the raw projection outputs for the
 * backward, which recomputes the cheap per-token math from them; `scratch` is dead after each call.
 * Threads: projections are k_linear GEMMs; the per-token math runs under OpenMP, one token per
 * iteration with its own workspace, so results are bit-identical at any thread count.
 * Out of scope: the non-symmetric Kronecker variant (no block uses it), selectivedense with
 * proj_rank > 0 (broken in the reference, rejected), the symmetric/concat choice of p (the block's).
 */
#ifndef IMPLICIT_LAYERS_MIXER_H
#define IMPLICIT_LAYERS_MIXER_H

#include <stddef.h>

#include "../core/params.h"
#include "linear.h"

/* The mixers, listed once: id and `mixer_type` name. The first MIX_N_SIMPLE are simple mixers, each
 * one row of per-token math in mixer_tok.c (TOK_OPS); nonselective (input independent) and mixture
 * (simple mixers in sequence) are assembled in mixer.c. Names, the key's help, its validation and
 * its messages all come from this list (docs/extending.md). */
#define MIXER_LIST(X)                                                                              \
    X(MIX_HOUSEHOLDER, "householder")                                                              \
    X(MIX_DPLR, "dplr")                                                                            \
    X(MIX_KRONECKER, "kronecker")                                                                  \
    X(MIX_MONARCH, "monarch")                                                                      \
    X(MIX_SELECTIVEDENSE, "selectivedense")                                                        \
    X(MIX_NONSELECTIVE, "nonselective")                                                            \
    X(MIX_MIXTURE, "mixture")
#define MIXER_AC_LIST(X) X(MIX_AC_IDENTITY, "identity") X(MIX_AC_RELU, "relu") X(MIX_AC_SILU, "silu")
#define MIXER_ENUM_ID(id, name) id,
typedef enum { MIXER_LIST(MIXER_ENUM_ID) MIX_N_TYPE } MixerType;
typedef enum { MIXER_AC_LIST(MIXER_ENUM_ID) MIX_N_AC } MixerAc;
#define MIX_N_SIMPLE MIX_NONSELECTIVE /* the simple mixers come first in MIXER_LIST, then the composite ones */

#define MIX_MAX_SUB 16  /* mixture terms (mixer_rank) */
#define MIX_MAX_PROJ 32 /* projections of one mixer (two per term) */

/* One simple mixer inside a MixerCfg (the mixture has several). */
typedef struct {
    int type;     /* MIX_HOUSEHOLDER .. MIX_SELECTIVEDENSE */
    int r;        /* reflections / DPLR rank / monarch block size */
    int m1, m2;   /* kronecker factor sizes, d = m1 m2 */
    int spectral; /* kronecker: 1 = "spectral" normalisation, 0 = "column-wise" */
    float eps;
    int proj;     /* index of its matrix projection; proj + 1 is its sigmoid gate (if any) */
    int work;     /* floats of per-token workspace its forward/backward use */
} MixSub;

/* One weight-normed projection dp -> out (through R when proj_rank > 0). */
typedef struct {
    int out;          /* output width */
    int bias;         /* 1: has a bias (the sigmoid gates) */
    int gate;         /* 1: sigmoid on the output, 0: mixer_ac */
    int sub;          /* owning term (mixture names) */
    const char *name; /* "proj_u", "proj_alpha", ... */
    size_t off;       /* its (M, out) block starts at M*off in the act/raw arrays */
} MixProjCfg;

/* Hyperparameters; fill with mixer_cfg_init. */
typedef struct {
    int type, d, dp, r, proj_rank, ac, spectral, m1, m2;
    float eps;
    int n_sub;
    MixSub sub[MIX_MAX_SUB];
    int n_proj;
    MixProjCfg proj[MIX_MAX_PROJ];
    size_t out_total; /* sum of proj[].out: raw floats per token */
    size_t work;      /* per-token workspace of the fwd/bwd token loop */
} MixerCfg;

/* Parse and validate. type: householder (alias householderproduct) | dplr | kronecker | monarch |
 * selectivedense | nonselective | mixture; ac: identity | relu | silu; kron_norm: column-wise |
 * spectral (NULL = column-wise; used by kronecker only). rank: r, or the monarch block size.
 * Returns IM_OK, or IM_EINVAL with err_msg naming the config key (mixer_type, mixer_rank, mixer_ac,
 * mixer_proj_rank, kron_norm, norm_eps): e.g. a monarch block size that is not a power of two
 * dividing d, a mixture with rank outside 2..MIX_MAX_SUB, selectivedense with proj_rank > 0. */
int mixer_cfg_init(MixerCfg *c, const char *type, int d, int dp, int rank, const char *ac, int proj_rank,
                   const char *kron_norm, float eps);
/* The checks of the mixer keys that need no widths (type, ac, proj_rank, kron_norm, eps), written
 * once: mixer_cfg_init runs them, and so does the model config's validation. */
int mixer_check_keys(const char *type, const char *ac, int proj_rank, const char *kron_norm, float eps);
/* "householder | dplr | ..." and "identity | relu | silu", from the lists above. */
const char *mixer_type_names(void);
const char *mixer_ac_names(void);
/* MixerType / MixerAc of a name, or -1. "householderproduct" is the reference's householder. */
int mixer_type_parse(const char *name);
int mixer_ac_parse(const char *name);

/* The two stacked linears of one projection: l[0] is dp -> out (or dp -> R), l[1] is R -> out
 * when proj_rank > 0 (all NULL otherwise). In a gradient-side MixerW every member accumulates. */
typedef struct {
    LinearW l[2];
} MixProjW;

/* Pointers into a parameter block (θ or dθ) and an effective-weight buffer (eff or deff). */
typedef struct MixerW {
    MixProjW p[MIX_MAX_PROJ]; /* per cfg->proj[j]: W (out,in) in eff; g, v, b in the block */
    float *skew;              /* (d, d) nonselective S, O = O0 expm(S - S^T) */
    float *base;              /* (d, d) nonselective O0: fixed, never receives a gradient, decay 0 */
    float *O;                 /* (d, d) nonselective effective matrix, in eff */
    float *work;              /* (10 d^2) nonselective expm workspace, in eff */
} MixerW;

/* Add the mixer's tensors to t as prefix.<name>: per projection "<proj>.weight_g" (out,1),
 * "<proj>.weight_v" (out,in), "<proj>.bias" (out) — with proj_rank R > 0 "<proj>.0.*" (R, dp) and
 * "<proj>.1.*" (out, R), the bias on ".1". Mixture terms are "sub<k>.<proj>". Nonselective:
 * "skew" (d,d, init 0) and "base" (d,d). decay = 1 for g, v, skew; 0 for biases and base.
 * Init: v ~ U(±1/sqrt(fan_in)), g = 1 (mixer_post_init sets ||v||), biases 0, base U(±1/sqrt(d)). */
void mixer_add_params(const MixerCfg *c, ParamTable *t, const char *prefix);
/* Floats of the effective buffer (weights, nonselective O and workspace). */
size_t mixer_eff_floats(const MixerCfg *c);
/* Point w at prefix's tensors in block (θ or dθ, laid out by t) and at eff (eff or deff, holding
 * mixer_eff_floats). CHECKs that every tensor is in t with the expected size. */
void mixer_bind(const MixerCfg *c, MixerW *w, const ParamTable *t, float *block, const char *prefix,
                float *eff);
/* After ptab_init_values: g = ||v|| per row (so W == v, as torch weight_norm starts), nonselective
 * base := the orthogonal Q factor (R with positive diagonal) of its random init; then refresh. */
void mixer_post_init(const MixerCfg *c, MixerW *w);
/* Effective weights from g, v (and O = O0 expm(S - S^T)); once per model forward. */
void mixer_refresh(const MixerCfg *c, MixerW *w);

/* Cache: the raw projection outputs (M, out_total) and, with proj_rank R, the (M, R) middles. */
size_t mixer_cache_floats(const MixerCfg *c, int M);
/* One size for both mixer_fwd and mixer_bwd. */
size_t mixer_scratch_floats(const MixerCfg *c, int M);

/* out:(M,d) written (must not alias v or p); p:(M,dp); v:(M,d).
 * cache:(mixer_cache_floats)|NULL (NULL = no backward will follow); scratch required. */
void mixer_fwd(const MixerCfg *c, const MixerW *w, float *out, const float *p, const float *v, int M,
               float *cache, float *scratch);
/* Backward of mixer_fwd for the same w, p, v, M and the cache it filled. dout:(M,d).
 * dp:(M,dp)|NULL +=;  dv:(M,d)|NULL +=;  dw: gradient-side MixerW|NULL: effective dW (deff) and
 * bias gradients accumulate (NULL members skipped). g, v gradients come from mixer_wn_bwd. */
void mixer_bwd(const MixerCfg *c, const MixerW *w, MixerW *dw, float *dp, float *dv, const float *dout,
               const float *p, const float *v, int M, const float *cache, float *scratch);
/* Once per backward, after every mixer_bwd: dg, dv (and nonselective dS) += from the accumulated
 * effective gradients in dw (the caller zeroes deff before the backward). Uses dw->work. */
void mixer_wn_bwd(const MixerCfg *c, const MixerW *w, MixerW *dw);
/* Projections with a fixed part (gradient-free forwards only). When the first `split` columns of
 * p are the same over many calls (FP-Mamba's p = [x ; shift(y)] during a solve: x is fixed, only
 * the shifted iterate changes), their share of every projection is computed once:
 *   mixer_project_fixed: raw_fixed:(mixer_fixed_floats) = p_fixed:(M,split) · W[:, :split]ᵀ + b
 *   mixer_fwd_fixed:     out = Q(p) v with raw = raw_fixed + p_var:(M,dp−split) · W[:, split:]ᵀ
 *                        (split = dp: p is fixed entirely, p_var unused). Same result as mixer_fwd
 *                        up to float summation order. scratch: mixer_scratch_floats.
 * Available for full-rank projections (proj_rank −1) of the selective types; mixer_fixed_floats
 * returns 0 otherwise (then use mixer_fwd). */
size_t mixer_fixed_floats(const MixerCfg *c, int M);
void mixer_project_fixed(const MixerCfg *c, const MixerW *w, float *raw_fixed, const float *p_fixed, int split, int M);
void mixer_fwd_fixed(const MixerCfg *c, const MixerW *w, float *out, const float *raw_fixed, const float *p_var,
                     int split, const float *v, int M, float *scratch);
/* The explicit d x d matrix Q(p) of one token (row-major, out = Q v). Tests and diagnostics only:
 * allocates its own buffers. */
void mixer_matrix(const MixerCfg *c, const MixerW *w, const float *p, float *Q);

/* ---- internals shared by mixer*.c, exposed for the tests --------------------------------------- */
/* Kronecker "spectral" estimate s = u^T A v after 16 alternating steps from v = 1/sqrt(m)
 * (even: u = normalize(A v), odd: v = normalize(A u); normalize eps 1e-12).  A:(m,m).
 * iters:(18 m) receives the iterates w_0..w_16 (w_15 = u, w_16 = v; the last row is scratch),
 * norms:(16) the pre-normalisation norms (what the backward through the 16 steps needs). */
float mixer_spectral_est(const float *A, int m, float *iters, float *norms);
/* SelectiveDense: M = L L^T with L upper triangular given packed (triu order, d(d+1)/2); 32 steps
 * w <- M w; e = ||w||; w <- w/(e + eps) from w = 1/sqrt(d). Returns the last e (L L^T is never
 * formed: M w = L (L^T w)). ws:(33 d) receives w_0..w_32, zs:(32 d) the L^T w_k, ys:(32 d) the
 * M w_k, es:(32) the e of each step. */
float mixer_sd_power(const float *P, int d, float eps, float *ws, float *zs, float *ys, float *es);
/* L:(m,m) = the upper-triangular matrix filled row by row from P (torch.triu_indices order). */
void mixer_triu_fill(float *L, const float *P, int m);

/* Per-token math (mixer_tok.c). act[j]: token row of projection sub->proj + j (activated: ac or
 * sigmoid). tok_fwd: y = Q x (y must not alias x). tok_bwd: dx = Q^T g written; when want_dact,
 * the act rows are overwritten by the gradients on them. work: (sub->work). */
void mixer_tok_fwd(const MixSub *s, int d, float *const *act, const float *x, float *y, float *work);
void mixer_tok_bwd(const MixSub *s, int d, float *const *act, const float *x, const float *g, float *dx,
                   int want_dact, float *work);
size_t mixer_tok_work(const MixSub *s, int d);
/* Add the projections of simple term k (c->sub[k], type and r set) with mixer_add_proj. */
void mixer_tok_layout(MixerCfg *c, int k);
/* Append projection `name` of term sub: out floats per token; gate = sigmoid + bias (else mixer_ac). */
void mixer_add_proj(MixerCfg *c, int sub, const char *name, int out, int gate);
/* Nonselective expm pieces (mixer_expm.c), all (d,d): E = expm(A), work:(3 d^2);
 * L = the Fréchet derivative of expm at A in direction Edir, work:(7 d^2). */
void mixer_expm(float *E, const float *A, int d, float *work);
void mixer_expm_frechet(float *L, const float *A, const float *Edir, int d, float *work);

#endif
