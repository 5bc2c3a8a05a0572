/* fp_common.h: the pieces the three fixed-point layers share (not a public header): FPMamba1
 * (fp_mamba.c), FPMamba2 (fp_mamba2.c) and the vector FP-RNN (fp_rnn.c), and the row FpLayerOps
 * through which fp_common.c drives them (fp_layer.h).
 *
 * The three differ in what they prepare and in the recurrence they iterate, but run the same
 * mixing stage on every application of f (spec fp-rnn §3.1–§3.3), from the iterate y, the
 * branch x the mixer reads and the target a it mixes:
 *   s = shift(y) (s_t = y_{t−1}, s_1 = 0);   p = [x ; s] (h_dep), x + s (h_dep && symm), x;
 *   v = a − y;   x̃ = Q(p) v + y
 * and the same solve, graded steps and memory scheme around it. The two Mamba layers also share
 * b̄ = normalize(B + By), c̄ = normalize(C + Cy) with [By ; Cy] = W_bc s, and the weight-normed
 * W_bc / W_zy. Keeping these in one place keeps the layers' forward and backward from drifting
 * apart; what stays in each layer file is what is its own.
 *
 * Memory follows STYLE §8.6: a layer carves its buffers from one caller-owned block in a fixed
 * order, and the same carve run on a NULL base measures the block.
 */
#ifndef IMPLICIT_LAYERS_FP_COMMON_H
#define IMPLICIT_LAYERS_FP_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/params.h"
#include "fp_layer.h"
#include "linear.h"
#include "mixer.h"

/* One-thread cost of the row copies and adds of the FP layers per float of a row, for
 * k_foreach (about 0.1 ns per float read and written on the Zen 4 host; bench_threads). */
#define FPC_NS_PER_FLOAT 0.1

/* ---- memory ------------------------------------------------------------------------------------ */

/* Bump allocation; with base NULL it only measures. */
typedef struct {
    float *base;
    size_t used;
} Carve;

/* n floats from k, rounded up to 16 floats so that every piece stays 64-byte aligned. */
static inline float *fpc_take(Carve *k, size_t n) {
    float *p = k->base ? k->base + k->used : NULL;
    k->used += (n + 15) & ~(size_t)15;
    return p;
}

/* A carve over mem rounded up to 64 bytes; mem NULL gives a measuring carve. */
static inline Carve fpc_carve(float *mem) {
    return (Carve){(float *)(((uintptr_t)mem + 63) & ~(uintptr_t)63), 0};
}

/* Floats a caller allocates for what a measuring carve counted (plus fpc_carve's rounding). */
static inline size_t fpc_carved(const Carve *k) { return k->used + 16; }

/* ---- small functions --------------------------------------------------------------------------- */

/* dst[b,t] = src[b,t−1], dst[b,0] = 0; dst, src:(B,T,E). */
void fpc_shift_fwd(float *dst, const float *src, int B, int T, int E);
/* Its backward: dsrc[b,t−1] += ddst[b,t]. */
void fpc_shift_bwd(float *dsrc, const float *ddst, int B, int T, int E);

/* y = x / max(‖x‖, eps) per row (F.normalize); x, y:(M,N). */
void fpc_l2norm_rows(float *y, const float *x, int M, int N, float eps);
/* dx += (∂ normalize(x) / ∂x)ᵀ dy per row; dx, dy, x:(M,N). */
void fpc_l2norm_rows_bwd(float *dx, const float *dy, const float *x, int M, int N, float eps);

/* err_set(IM_ENUM, "<who>: non-finite output") if out:(n) holds a NaN or inf, else IM_OK. */
int fpc_check_finite(const float *out, size_t n, const char *who);

/* ---- parameters -------------------------------------------------------------------------------- */

/* ptab_add of the tensor prefix.suffix with nd (1..3) of the dims d0, d1, d2. */
void fpc_param_add(ParamTable *t, const char *prefix, const char *suffix, InitRule init, float a, float b, int decay,
                   int nd, int d0, int d1, int d2);
/* block + the offset of prefix.suffix, or NULL when the table has no such tensor. */
float *fpc_param_find(const ParamTable *t, float *block, const char *prefix, const char *suffix);

/* The mixer's tensors under prefix.mixer. */
void fpc_mixer_add_params(const MixerCfg *mix, ParamTable *t, const char *prefix);
/* A binding of the mixer under prefix.mixer (effective weights at eff); the caller frees it. */
MixerW *fpc_mixer_bind(const MixerCfg *mix, const ParamTable *t, float *block, const char *prefix, float *eff);

/* The Mamba layers' weight-normed W_bc (2N, E) ("bc_proj") and, with has_zy (glu_in_loop = 0),
 * W_zy (E, E) ("zy_proj"): their (g, v) tensors, the floats of their effective weights (16 floats
 * of slack after each keep the pieces apart), and the binding of those, which returns eff past
 * them. zy NULL: no W_zy. */
void fpc_bczy_add_params(ParamTable *t, const char *prefix, int N, int E, int has_zy);
size_t fpc_bczy_eff_floats(int N, int E, int has_zy);
float *fpc_bczy_bind(LinearW *bc, LinearW *zy, const ParamTable *t, float *block, const char *prefix, float *eff, int N,
                     int E);
/* g = ‖v‖ after the table's init rules; effective weights from (g, v); their gradients → dg, dv. */
void fpc_bczy_init(LinearW *bc, LinearW *zy, int N, int E);
void fpc_bczy_refresh(LinearW *bc, LinearW *zy, int N, int E);
void fpc_bczy_wn_bwd(const LinearW *bc, LinearW *dbc, const LinearW *zy, LinearW *dzy, int N, int E);

/* ---- the mixing stage -------------------------------------------------------------------------- */

/* Buffers of the mixing stage of one application over M tokens (widths E = mix->d, dp = mix->dp). */
typedef struct {
    float *yin;    /* (M,E) input iterate, kept for the backward | NULL (no-grad) */
    float *s;      /* (M,E) shift(yin) */
    float *p;      /* (M,dp) mixer input */
    float *v;      /* (M,E) a − yin */
    float *mcache; /* mixer cache | NULL (no-grad) */
    float *xt;     /* (M,E) x̃ = Q(p) v + yin */
} FpcMix;

/* Its backward temporaries. */
typedef struct {
    float *dxt, *dv; /* (M,E) */
    float *dp;       /* (M,dp) */
    float *ds;       /* (M,E) the gradient on s */
} FpcMixGrad;

void fpc_carve_mix(Carve *k, FpcMix *s, const MixerCfg *mix, int M, int with_cache);
void fpc_carve_mix_grad(Carve *k, FpcMixGrad *g, const MixerCfg *mix, int M);

/* p:(M,dp) from x, s:(M,E): [x ; s] per token (h_dep), x + s (h_dep && symm), x (!h_dep). */
void fpc_make_p(float *p, const float *x, const float *s, int M, int E, int h_dep, int symm);
/* Its backward: dx += dp's x share; ds += its s share (ds NULL: dropped). */
void fpc_make_p_bwd(float *dx, float *ds, const float *dp, int M, int E, int h_dep, int symm);

/* The mixing stage over (B,T) tokens from the iterate yin: s->yin (if carved) keeps yin, then s,
 * p, v and xt as above. rawfix (no-grad only): the x share of the mixer projections, computed
 * once per solve by mixer_project_fixed over split E; p is then not built. x, a, yin:(B,T,E). */
void fpc_mix_fwd(const MixerCfg *mix, int h_dep, int symm, const MixerW *w, FpcMix *s, const float *x,
                 const float *a, const float *yin, const float *rawfix, float *mscratch, int B, int T);
/* The same for one token per sequence (M = B) whose p is already built: v = a − y,
 * xt = Q(p) v + y, no-grad. rawfix: all of p's projections (mixer_project_fixed over dp) | NULL. */
void fpc_mix_apply(const MixerCfg *mix, const MixerW *w, float *xt, float *v, const float *p, const float *rawfix,
                   const float *a, const float *y, int M, float *mscratch);
/* Backward of fpc_mix_fwd from g->dxt: the mixer's gradients into dw, da += dv, dx += p's x
 * share (da and dx may be one buffer). With dyprev != NULL (the step's input gets a gradient)
 * also g->ds += p's s share and dyprev += dxt − dv + shift_bwd(g->ds). g->ds holds the step's
 * other gradients on s on entry (the caller zeroes it); g->dv and g->dp are overwritten. */
void fpc_mix_bwd(const MixerCfg *mix, int h_dep, int symm, const MixerW *w, MixerW *dw, const FpcMix *s,
                 FpcMixGrad *g, float *da, float *dx, float *dyprev, float *mscratch, int B, int T);

/* ---- the Mamba layers: b̄, c̄ and the in-loop gate ------------------------------------------------ */

typedef struct {
    float *braw, *craw; /* (M,N) B + By, C + Cy */
    float *bbar, *cbar; /* (M,N) normalised (or copied) */
} FpcBc;

typedef struct {
    float *dbbar, *dcbar; /* (M,N) */
    float *dbraw, *dcraw; /* (M,N) */
    float *dB, *dC;       /* (M,N) accumulated over the graded steps */
} FpcBcGrad;

void fpc_carve_bc(Carve *k, FpcBc *b, int M, int N);
void fpc_carve_bc_grad(Carve *k, FpcBcGrad *g, int M, int N);

/* [By ; Cy] = W_bc s with Wbc:(2N,E), s:(M,E); braw = B + By, craw = C + Cy, Bm, Cm:(M,N);
 * bbar, cbar = their rows normalised (norm; clamp eps, the layer's norm_eps as the reference's
 * F.normalize(eps=norm_eps)) or copied. bbar may be Bm itself (and cbar Cm). */
void fpc_bc_fwd(FpcBc *b, const float *Wbc, const float *s, const float *Bm, const float *Cm, int M, int E, int N,
                int norm, float eps);
/* Backward from g->dbbar, g->dcbar: g->dB, g->dC +=, dWbc:(2N,E) += (NULL: skipped), ds:(M,E) +=
 * (NULL: skipped). g->dbraw, g->dcraw are overwritten when norm. */
void fpc_bc_bwd(const FpcBc *b, FpcBcGrad *g, float *dWbc, float *ds, const float *Wbc, const float *s, int M, int E,
                int N, int norm, float eps);

/* The output of the Mamba layers: out = W_out(silu(z + W_zy s) ⊙ y), with s = shift(y) (the
 * previous token's y in the step path); zy NULL (glu_in_loop): out = W_out y. zs, gy:(M,E)
 * receive z + W_zy s and silu(zs) ⊙ y; y, s, z:(M,E); Wout:(D,E); out:(M,D). */
void fpc_gate_out_fwd(float *out, float *zs, float *gy, const float *y, const float *s, const float *z,
                      const LinearW *zy, const float *Wout, int M, int E, int D);
/* Its backward for s = shift(y) over (B,T): dy:(M,E) = the gradient on y (written), dz +=,
 * dWout and dzy->W += (NULL: skipped); dgy, dzs, dsy:(M,E) temporaries. */
void fpc_gate_out_bwd(float *dy, float *dz, float *dWout, LinearW *dzy, const float *dout, const float *y,
                      const float *sy, const float *zs, const float *gy, const LinearW *zy, const float *Wout,
                      float *dgy, float *dzs, float *dsy, int B, int T, int E, int D);

/* Backward of the in-loop gate o = opre ⊙ silu(z) (glu_in_loop), n floats: dz += do ⊙ opre ⊙
 * silu'(z), and do ← do ⊙ silu(z) in place (the gradient on opre). */
void fpc_glu_bwd(float *dz, float *dop, const float *opre, const float *z, size_t n);

/* ---- the row of a family ------------------------------------------------------------------- */

/* What the shared code needs to know of a family's cfg and, when given, its weights. */
typedef struct {
    int D, E, n_back;      /* model width, iterate width per token, graded steps */
    const MixerCfg *mix;
    MixerW **mixer;        /* the weight struct's mixer binding | NULL (no weights given) */
    LinearW *bc, *zy;      /* its weight-normed W_bc (2N, E), W_zy (E, E) | NULL (none, or no weights) */
    int N;                 /* state width (rows of W_bc: 2N); 0 = no W_bc */
    int has_zy;            /* W_zy present */
} FpcParts;

/* Room for a family's forward, backward or step buffers (the carved pointers, not the floats):
 * the drivers keep them on their stack; each family asserts that its structs fit. */
#define FPC_STATE_BYTES 32768
typedef union {
    max_align_t align;
    unsigned char bytes[FPC_STATE_BYTES];
} FpcState;

/* What the drivers reach in a family's buffers: a family's State begins with it, and its carves
 * fill it. */
typedef struct {
    float *Y;       /* the iterate: (B,T,E) in the forward's scratch, (B,E) in the step's */
    float **ng_out; /* the output pointer of the no-grad application (a solve iteration redirects it) */
    float *dy;      /* backward: (B,T,E) the gradient on a graded step's output ... */
    float *dprev;   /* ... and on its input */
    float *tok_y;   /* step: (B,E) one application's output */
} FpcBufs;

/* A family. c, w, dw are its cfg and weight structs; st its buffers in an FpcState; the Carves
 * measure when their base is NULL (STYLE §8.6). */
struct FpLayerOps {
    const char *name;
    size_t w_bytes;
    void (*parts)(const void *c, const void *w, FpcParts *p); /* w may be NULL */
    /* parameters: its own tensors (W_bc, W_zy and the mixer are added and bound for it) */
    void (*add_params)(const void *c, ParamTable *t, const char *prefix, float out_scale);
    void (*bind)(const void *c, void *w, const ParamTable *t, float *block, const char *prefix);
    void (*post_init)(const void *c, void *w); /* init rules the table cannot express | NULL */
    /* forward: carve the buffers (kc NULL: no cache, the prepare buffers come from ks; sets Y and
     * ng_out); the prepare part; what the solve's iterations share (| NULL); one application of f
     * on yin, graded step k >= 0 into the cache or the no-grad one (k < 0; solve: an iteration of
     * the solve, which may use what presolve prepared), returning its output; the output from the
     * last graded y. */
    void (*carve_fwd)(const void *c, void *st, Carve *kc, Carve *ks, int B, int T);
    void (*prepare)(const void *c, const void *w, void *st, const float *u, int B, int T);
    void (*presolve)(const void *c, const void *w, void *st, int B, int T);
    const float *(*step)(const void *c, const void *w, void *st, int k, const float *yin, int solve, int B, int T);
    void (*output)(const void *c, const void *w, void *st, float *out, const float *y, int with_cache, int B, int T);
    /* backward: carve the cache as the forward left it and the backward's scratch (sets dy and
     * dprev); the backward: zero the gradient buffers, the output's backward into dy (the
     * gradient on the last graded output), fpc_graded_bwd, the prepare part's backward into dw
     * and du; graded step k's backward (dyprev NULL: its input is constant). */
    void (*carve_bwd)(const void *c, void *st, Carve *kc, Carve *ks, int B, int T);
    void (*bwd)(const void *c, const void *w, void *dw, void *st, const float *dout, float *du, const float *u, int B,
                int T);
    void (*bwd_step)(const void *c, const void *w, void *dw, void *st, int k, const float *dy, float *dyprev, int B,
                     int T);
    /* sequential mode: the state's floats; carve the step's scratch (sets Y and tok_y); the
     * token's prepare (all that is fixed during its
     * solve; reads and may commit state); one application (commit: the last one, which commits
     * the recurrent state); the output from y, and the state's previous-token slot. */
    size_t (*state_floats)(const void *c, int B);
    void (*carve_tok)(const void *c, void *st, Carve *k, int B);
    void (*tok_prepare)(const void *c, const void *w, void *st, const float *u, float *state, int B);
    void (*tok_apply)(const void *c, const void *w, void *st, float *out, const float *y, int commit, int B);
    void (*tok_output)(const void *c, const void *w, void *st, float *out, const float *y, float *state, int B);
};

/* The middle of a family's backward: the graded steps from dy, last first (the first one's input
 * Y* is a constant), chaining through dprev. */
void fpc_graded_bwd(const FpLayerOps *L, const void *c, const void *w, void *dw, void *st, int B, int T);

#endif
