/* implicit_lm.c: implicit Mamba2 and implicit Llama LMs ("Implicit Language Models are RNNs",
 * spec implicit-lm §2-§6).
 *
 *   u  = Linear_inj(RMSNorm_inj(Emb(ids)))           injected into every layer, every iteration
 *   f(z, u) = norm_f(Block_n(… Block_1(z, u) …, u))  the same blocks as the explicit models
 *   z* = f(z*, u), z0 = 0;  logits = z* · Embᵀ       (norm_f is inside f: no further norm)
 *
 * Training (model->training): the unrolled warm-up (§5.2, while train_step < pretrain_steps),
 * else a gradient-free solve (fp_solve, torchdeq semantics, undamped: §12-B7) followed by `grad`
 * differentiable relaxed steps (phantom gradient, §5.1), or with `ift` one cached f call whose
 * backward solves the adjoint fixed point (§5.4). Evaluation: the reference's damped loop (§3.2)
 * plus one final f call. model_step: sequential mode (§4): per token the same loop with every
 * layer's cache read-only, then one committing call, so memory does not depend on iterations.
 *
 * Weight norm (§6): every backbone Linear / Conv1d weight is stored as (weight_g, weight_v); the
 * effective weights live in a separate block with the explicit models' layout, refreshed once
 * per forward; its gradient is mapped back to g and v once per backward.
 *
 * Jacobian regularisation (torchdeq jac_reg, the reference's jac_loss_weight / jac_loss_freq):
 * R = w·‖εᵀJ‖²/numel with J = ∂f/∂z at z* (detached, as torchdeq) and one Gaussian ε (Hutchinson).
 * Its parameter gradient is a mixed second derivative, which a hand-written backward does not
 * have; with v = Jᵀε held fixed, ∇θ ‖Jᵀε‖² = 2 ∇θ ⟨ε, J v⟩ and J v = (f(z*+hv) − f(z*−hv))/2h + O(h²),
 * so it costs three cached f calls and three backward passes, and is accurate to O(h²)
 * (tests/test_implicit.c checks it against finite differences of R). Noise injection is §7's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../layers/embed.h"
#include "../fixedpoint/fp.h"
#include "../kernels/kernels.h"
#include "../layers/block.h"
#include "../layers/head.h"
#include "../layers/rmsnorm.h"
#include "block_params.h"
#include "lm_stack.h"

enum { MODE_PHANTOM, MODE_UNROLLED, MODE_IFT, MODE_EVAL };

/* One effective tensor and where it comes from in θ. */
typedef struct {
    size_t eff;        /* offset in the effective block */
    size_t g, v;       /* θ offsets: weight-normalised (g may be SIZE_MAX: no_scale), or copy from v */
    int rows, cols;
    int wn;
} EffMap;

typedef struct {
    LmStack stack;        /* the plumbing of lm_stack.h: activation and state arenas, the ends */
    BlockCfg bc;
    int L, D, K;
    ParamTable eff_tab;   /* names/shapes of the effective tensors (explicit layout) */
    EffMap *map;
    int n_map, cap_map;
    float *eff, *deff;    /* (eff_tab.total) */
    BlockW *w, *dw;       /* (L) into eff / deff */
    float *packed;        /* (L, pack_per): each layer's projections packed by block_pack at refresh */
    size_t pack_per;
    size_t o_inj_w, o_inj_b, o_inj_norm, o_norm_f;   /* effective offsets */
    /* activations */
    float *xn_inj, *rstd_inj, *u, *du, *dxn;  /* injection path; u, du (B,T,K) in rows, one buffer */
    float *ub, *dub;      /* u and du in the mixer's parts (block_set_u_parts), what the blocks read
                             and write: converted once per forward and backward, not per f call */
    float *zs;            /* (S_max+1, B,T,D) */
    float *fout, *hbuf;   /* (B,T,D), (2, B,T,D) */
    float *fcache;        /* (S_max, fcache_per) */
    size_t fcache_per, block_cache_per;
    float *scratch, *dz, *dz2, *dh, *dh2;
    float *solver_scratch;
    float *masks;         /* (L, B, mask floats) | NULL */
    float *sample_res;    /* (B) per-sample residuals of the last solve */
    int *sample_step;     /* (B) per-sample steps of the last solve */
    /* converge-or-extend (f_extend_max_iter): the sequences that missed f_tol, solved on alone */
    int *ext_idx;         /* (B) their rows */
    float *ext_z, *ext_ub, *ext_masks, *ext_res;   /* (B,T,D), (B,T,K) in parts, masks, (B): gathered */
    int *ext_step;        /* (B) */
    size_t mask_per;
    int S_max, S, mode;
    float taus[256];
    float *cur_cache;     /* linearisation point of vjp (IFT) */
    /* step state (the layers' state and step scratch are the stack's) */
    float *zt, *zt_out, *ut, *utb, *x0t, *xnt, *rstdt, *step_solver, *hstep, *step_res;
    int *step_first;      /* (B) sequential: per-row step diagnostics of the token's solve */
    size_t step_solver_n; /* floats of step_solver: sized for the sequential solver at state init */
    Rng noise_rng;        /* spec §7 noise, reseeded per sequence batch */
} ImplicitLm;

static float *eff_at(ImplicitLm *im, size_t off) { return im->eff + off; }

/* ---- parameter tables ----------------------------------------------------------------------- */
typedef struct {
    Model *m;
    ImplicitLm *im;
    int layer;   /* -1: top-level names */
} Emit;

/* Add one tensor: to the effective table under its plain name, and to θ either as it is or as a
 * weight-norm pair (decay = 1 marks Linear/Conv weights, spec §6). Returns the effective offset. */
static size_t emit(Emit *e, const char *suffix, InitRule init, float a, float b, int decay, int nd, int d0,
                   int d1, int d2) {
    char name[PARAM_NAME_LEN];
    if (e->layer >= 0) snprintf(name, sizeof name, "backbone.layers.%d.%s", e->layer, suffix);
    else snprintf(name, sizeof name, "%s", suffix);
    ImplicitLm *im = e->im;
    ParamTable *t = &e->m->tab;
    const ModelCfg *c = &e->m->cfg;
    size_t eo = nd == 1 ? ptab_add(&im->eff_tab, name, init, a, b, decay, 1, d0)
                : nd == 2 ? ptab_add(&im->eff_tab, name, init, a, b, decay, 2, d0, d1)
                          : ptab_add(&im->eff_tab, name, init, a, b, decay, 3, d0, d1, d2);
    if (im->n_map == im->cap_map) {
        im->cap_map = im->cap_map ? 2 * im->cap_map : 64;
        im->map = realloc(im->map, (size_t)im->cap_map * sizeof *im->map);
        CHECK(im->map, "out of memory");
    }
    EffMap *mp = &im->map[im->n_map++];
    memset(mp, 0, sizeof *mp);
    mp->eff = eo;
    mp->rows = d0;
    mp->cols = nd == 1 ? 1 : nd == 2 ? d1 : d1 * d2;
    mp->wn = decay && c->weight_norm;
    if (!mp->wn) {
        mp->v = nd == 1 ? ptab_add(t, name, init, a, b, decay, 1, d0)
                : nd == 2 ? ptab_add(t, name, init, a, b, decay, 2, d0, d1)
                          : ptab_add(t, name, init, a, b, decay, 3, d0, d1, d2);
        return eo;
    }
    /* torch's weight_norm(dim=0) names: g has the weight's rank with 1s after dim 0 */
    char gname[PARAM_NAME_LEN + 8], vname[PARAM_NAME_LEN + 8];
    snprintf(gname, sizeof gname, "%s_g", name);
    snprintf(vname, sizeof vname, "%s_v", name);
    mp->g = SIZE_MAX;
    if (!c->norm_no_scale)
        mp->g = nd == 2 ? ptab_add(t, gname, INIT_ONE, 0, 0, decay, 2, d0, 1) : ptab_add(t, gname, INIT_ONE, 0, 0, decay, 3, d0, 1, 1);
    mp->v = nd == 2 ? ptab_add(t, vname, init, a, b, decay, 2, d0, d1) : ptab_add(t, vname, init, a, b, decay, 3, d0, d1, d2);
    return eo;
}

static void add_layer(Model *m, ImplicitLm *im, int i, BlockW *off) {
    const BlockCfg *bc = &im->bc;
    Emit e = {m, im, i};
    int D = bc->D, Hm = bc->mlp.h, n_res = bc->mlp.kind == MLP_NONE ? 1 : 2;
    /* the reference loses the GPT-2 rescale in implicit models (spec §12-B1): -1 reproduces that */
    float out_scale = m->cfg.rescale_out_proj == 1 ? 1.0f / sqrtf((float)(n_res * m->cfg.n_layer)) : 1.0f;
#define ADD(member, suffix, init, a, b, decay, nd, d0, d1, d2) \
    off->member = (float *)(uintptr_t)emit(&e, suffix, init, a, b, decay, nd, d0, d1, d2);
    off->norm_w = (float *)(uintptr_t)emit(&e, "norm.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    if (bc->mixer == MIXER_MAMBA2) {
        int K = bc->mamba2.K, C = bc->mamba2.C, W = bc->mamba2.W, H = bc->mamba2.H, E = bc->mamba2.E;
        MAMBA2_MIXER_PARAMS(ADD)
    } else {
        ATTN_MIXER_PARAMS(ADD)
    }
    if (bc->mlp.kind != MLP_NONE) off->norm2_w = (float *)(uintptr_t)emit(&e, "norm2.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    if (bc->mlp.kind == MLP_SWIGLU) { SWIGLU_PARAMS(ADD) }
    if (bc->mlp.kind == MLP_GATED) { GATED_MLP_PARAMS(ADD) }
#undef ADD
}


static int build(Model *m, int is_attn) {
    const ModelCfg *c = &m->cfg;
    ImplicitLm *im = xcalloc(1, sizeof *im);
    m->impl = im;
    im->stack.max_len = is_attn ? c->max_seq_len : 0;   /* the KV cache */
    ptab_init(&im->eff_tab);
    block_cfg_of(&im->bc, c, is_attn);
    block_set_u_parts(&im->bc, 1);
    im->L = c->n_layer;
    im->D = c->d_model;
    im->K = block_u_dim(&im->bc);
    int D = im->D, K = im->K;
    ptab_add(&m->tab, EMB_NAME, INIT_NORMAL, (float)c->emb_init_std, 0, 0, 2, m->V, D);
    Emit top = {m, im, -1};
    im->o_inj_norm = emit(&top, "backbone.injection_norm.weight", INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    im->o_inj_w = emit(&top, "backbone.injection.weight", INIT_UNIFORM, 1 / sqrtf((float)D), 0, 1, 2, K, D, 0);
    im->o_inj_b = emit(&top, "backbone.injection.bias", INIT_ZERO, 0, 0, 0, 1, K, 0, 0);
    BlockW *off = xcalloc((size_t)im->L, sizeof *off);
    for (int i = 0; i < im->L; i++) add_layer(m, im, i, &off[i]);
    im->o_norm_f = emit(&top, NORM_F_NAME, INIT_ONE, 0, 0, 0, 1, D, 0, 0);
    lm_head_add(m);
    im->eff = xcalloc(im->eff_tab.total + 16, sizeof(float));
    im->deff = xcalloc(im->eff_tab.total + 16, sizeof(float));
    im->w = xcalloc((size_t)im->L, sizeof *im->w);
    im->dw = xcalloc((size_t)im->L, sizeof *im->dw);
    for (int i = 0; i < im->L; i++) {
        block_params_bind(&im->w[i], &off[i], im->eff, &im->bc);
        block_params_bind(&im->dw[i], &off[i], im->deff, &im->bc);
    }
    free(off);
    im->pack_per = block_pack_floats(&im->bc);
    im->packed = xcalloc((size_t)im->L * im->pack_per + 16, sizeof(float));
    im->S_max = c->grad > c->pretrain_iter ? c->grad : c->pretrain_iter;
    if ((c->bounded_steps > 0 || c->bounded_frac > 0) && c->bounded_grad > im->S_max) im->S_max = c->bounded_grad;
    return IM_OK;
}

static int build_mamba2(Model *m) { return build(m, 0); }
static int build_llama(Model *m) { return build(m, 1); }

/* g = ‖v_row‖ so that the effective weight equals v at init (spec §6). */
static void post_init(Model *m) {
    ImplicitLm *im = m->impl;
    for (int i = 0; i < im->n_map; i++) {
        const EffMap *mp = &im->map[i];
        if (!mp->wn || mp->g == SIZE_MAX) continue;
        for (int r = 0; r < mp->rows; r++) {
            const float *v = m->params + mp->v + (size_t)r * mp->cols;
            double s = 0;
            for (int j = 0; j < mp->cols; j++) s += (double)v[j] * v[j];
            m->params[mp->g + r] = (float)sqrt(s);
        }
    }
}

/* Effective weights from θ: once per forward (spec §2.4), and the projections packed for the
 * GEMM once with them: every f call of the solve, the relaxed steps and the backward (or every
 * token of a generation) then reads the same panels. */
static void refresh(Model *m) {
    ImplicitLm *im = m->impl;
    float target = (float)m->cfg.norm_target_norm, clip = (float)m->cfg.norm_clip_value;
    for (int i = 0; i < im->n_map; i++) {
        const EffMap *mp = &im->map[i];
        if (mp->wn)
            k_weightnorm_fwd(im->eff + mp->eff, mp->g == SIZE_MAX ? NULL : m->params + mp->g, m->params + mp->v,
                             mp->rows, mp->cols, target, clip);
        else
            memcpy(im->eff + mp->eff, m->params + mp->v, (size_t)mp->rows * mp->cols * sizeof(float));
    }
    for (int l = 0; l < im->L; l++) block_pack(&im->bc, &im->w[l], im->packed + (size_t)l * im->pack_per);
}

/* dθ += the effective gradients mapped through weight norm. */
static void map_back(Model *m) {
    ImplicitLm *im = m->impl;
    float target = (float)m->cfg.norm_target_norm, clip = (float)m->cfg.norm_clip_value;
    for (int i = 0; i < im->n_map; i++) {
        const EffMap *mp = &im->map[i];
        size_t n = (size_t)mp->rows * mp->cols;
        if (mp->wn)
            k_weightnorm_bwd(mp->g == SIZE_MAX ? NULL : m->grads + mp->g, m->grads + mp->v, im->deff + mp->eff,
                             mp->g == SIZE_MAX ? NULL : m->params + mp->g, m->params + mp->v, mp->rows, mp->cols,
                             target, clip);
        else
            k_axpby(m->grads + mp->v, 1.0f, im->deff + mp->eff, 1.0f, n);
    }
}

/* ---- memory ----------------------------------------------------------------------------------- */
static size_t mask_floats(const BlockCfg *bc, int B) {
    size_t n = (size_t)B * bc->D;
    if (bc->mlp.kind == MLP_GATED) n += (size_t)B * (bc->mlp.h + bc->D);
    return n;
}

/* The config's solver names (validated in config.c against fp.h's list). */
static FpSolver solver_of(const char *name) { return (FpSolver)fp_solver_parse(name, FP_USE_SOLVE); }

/* The tolerance of the evaluation loop and the sequential solve: never looser than eval_f_tol,
 * where the modes agree (duality) on the models measured in docs/results/convergence.md; the
 * training tolerance f_tol (the reference's 0.05 for both) leaves them disagreeing. */
static double eval_tol(const ModelCfg *c) { return c->eval_f_tol > 0 && c->eval_f_tol < c->f_tol ? c->eval_f_tol : c->f_tol; }

static int eval_cap(const ModelCfg *c) { return c->eval_f_max_iter > 0 ? c->eval_f_max_iter : (int)(c->f_max_iter * c->eval_factor); }

/* Each token's sequential solve has its own, lower cap: a token whose map never reaches eval_f_tol
 * would otherwise iterate to the whole-sequence cap, which is sized for the simultaneous pass (about
 * as many iterations as the sequence is long). Never above the evaluation cap, so that lowering
 * eval_f_max_iter still bounds both solves. */
static int seq_cap(const ModelCfg *c) {
    int cap = eval_cap(c);
    return c->eval_seq_f_max_iter > 0 && c->eval_seq_f_max_iter < cap ? c->eval_seq_f_max_iter : cap;
}

/* which: 0 training forward, 1 evaluation loop, 2 adjoint, 3 sequential Anderson / Broyden,
 * 4 sequential loop (the evaluation loop's rule at the sequential cap) */
static void solver_opts(const ModelCfg *c, int which, FpOpts *o) {
    fp_opts_default(o);
    o->anderson_m = c->anderson_m;
    o->anderson_lambda = c->anderson_lambda;
    o->broyden_m = c->broyden_m;
    if (which == 0) {          /* training forward: torchdeq semantics, undamped (§12-B7) */
        o->solver = solver_of(c->f_solver);
        o->max_iter = c->f_max_iter;
        o->tol = c->f_tol;
        o->stop = !strcmp(c->f_stop_mode, "abs") ? FP_STOP_ABS : FP_STOP_REL;
        o->tau = 1.0f;
    } else if (which == 1 || which == 4) {   /* evaluation loop (§3.2) */
        o->solver = FP_EVALLOOP;
        o->max_iter = which == 4 ? seq_cap(c) : eval_cap(c);
        o->tol = eval_tol(c);
        o->tau = (float)c->tau;
        o->ema_alpha = c->ema_alpha;
    } else if (which == 3) {   /* sequential mode, Anderson or Broyden (beyond the reference) */
        o->solver = (FpSolver)fp_solver_parse(c->seq_solver, FP_USE_SEQ);
        o->max_iter = seq_cap(c);
        o->tol = eval_tol(c);
        o->stop = FP_STOP_REL;
        o->tau = 1.0f;
    } else {                   /* adjoint (§5.4) */
        o->solver = solver_of(c->b_solver);
        o->max_iter = c->b_max_iter;
        o->tol = c->b_tol;
        o->stop = !strcmp(c->b_stop_mode, "abs") ? FP_STOP_ABS : FP_STOP_REL;
        o->tau = 1.0f;
    }
}

/* The sequential mode's solver: the reference's loop, or Anderson / Broyden (beyond the reference). */
static void seq_solver_opts(const ModelCfg *c, FpOpts *o) {
    solver_opts(c, !strcmp(c->seq_solver, "loop") ? 4 : 3, o);
}

/* Scratch of the whole-sequence solves: training forward, evaluation loop, adjoint (the sequential
 * solver has its own, sized per token in carve_state). */
static size_t solver_floats(const ModelCfg *c, size_t n, int nb) {
    size_t best = 0;
    for (int k = 0; k < 3; k++) {
        FpOpts o;
        solver_opts(c, k, &o);
        if (o.max_iter < 1) o.max_iter = 1;
        size_t s = fp_scratch_floats(&o, n, nb);
        if (s > best) best = s;
    }
    return best;
}

static void carve(Model *m, Arena *a, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t M = (size_t)B * T, MD = M * im->D;
    lm_ends_carve(&im->stack.ends, a, m, B, T);
    im->xn_inj = arena_floats(a, MD);
    im->rstd_inj = arena_floats(a, M);
    im->u = arena_floats(a, M * im->K);
    /* u in rows is read only to fill ub (inject), du in rows only once dub is complete (bwd): one
     * buffer holds each in turn */
    im->du = m->training ? im->u : NULL;
    im->ub = arena_floats(a, M * im->K);
    im->dub = m->training ? arena_floats(a, M * im->K) : NULL;
    im->dxn = m->training ? arena_floats(a, MD) : NULL;
    /* evaluation keeps no backward state: only training plans the S differentiable steps */
    int S = m->training ? im->S_max : 1;
    im->zs = arena_floats(a, (size_t)(S + 1) * MD);
    im->fout = arena_floats(a, MD);
    im->hbuf = arena_floats(a, 2 * MD);
    im->block_cache_per = block_cache_floats(&im->bc, B, T);
    /* per f call: each layer's input and block cache, then norm_f's input and rstd */
    im->fcache_per = (size_t)im->L * (MD + im->block_cache_per) + MD + M;
    im->fcache = m->training ? arena_floats(a, (size_t)im->S_max * im->fcache_per) : NULL;
    im->scratch = arena_floats(a, block_scratch_floats(&im->bc, B, T));
    im->dz = m->training ? arena_floats(a, MD) : NULL;
    im->dz2 = m->training ? arena_floats(a, MD) : NULL;
    im->dh = m->training ? arena_floats(a, MD) : NULL;
    im->dh2 = m->training ? arena_floats(a, MD) : NULL;
    im->solver_scratch = arena_floats(a, solver_floats(&m->cfg, MD, B));
    im->sample_res = arena_floats(a, (size_t)B);
    im->sample_step = arena_alloc(a, sizeof(int) * (size_t)B);
    im->mask_per = mask_floats(&im->bc, B);
    im->masks = m->cfg.backbone_dropout > 0 ? arena_floats(a, (size_t)im->L * im->mask_per) : NULL;
    int ext = m->cfg.f_extend_max_iter > 0;   /* training, and the training forward of eval_gap */
    im->ext_idx = ext ? arena_alloc(a, sizeof(int) * (size_t)B) : NULL;
    im->ext_step = ext ? arena_alloc(a, sizeof(int) * (size_t)B) : NULL;
    im->ext_res = ext ? arena_floats(a, (size_t)B) : NULL;
    im->ext_z = ext ? arena_floats(a, MD) : NULL;
    im->ext_ub = ext ? arena_floats(a, M * im->K) : NULL;
    im->ext_masks = ext && m->cfg.backbone_dropout > 0 ? arena_floats(a, (size_t)im->L * im->mask_per) : NULL;
}

static int plan(Model *m, int B, int T) { return lm_stack_plan_acts(m, B, T, carve); }

/* ---- f and its backward ---------------------------------------------------------------------- */
typedef struct {
    Model *m;
    int B, T;
} FCtx;

static BlockMasks layer_masks(const ImplicitLm *im, int l, int B) {
    BlockMasks bm = {0};
    if (!im->masks) return bm;
    float *p = im->masks + (size_t)l * im->mask_per;
    bm.mixer = im->bc.mixer == MIXER_MAMBA2 ? p : NULL;
    if (im->bc.mlp.kind == MLP_GATED) {
        bm.mlp_h = p + (size_t)B * im->bc.D;
        bm.mlp_o = p + (size_t)B * (im->bc.D + im->bc.mlp.h);
    }
    return bm;
}

/* z_out = f(z, u). cache = one f-call slot (NULL: gradient-free). */
static void f_fwd(Model *m, float *z_out, const float *z, float *cache, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t M = (size_t)B * T, MD = M * im->D;
    const float *cur = z;
    for (int l = 0; l < im->L; l++) {
        BlockMasks bm = layer_masks(im, l, B);
        float *out;
        if (cache) {
            float *zin = cache + (size_t)l * (MD + im->block_cache_per);
            if (l == 0) k_copy_rows(zin, MD, z, MD, 1, MD, 0);
            out = l + 1 < im->L ? cache + (size_t)(l + 1) * (MD + im->block_cache_per) : cache + (size_t)im->L * (MD + im->block_cache_per);
            block_fwd(&im->bc, &im->w[l], out, zin, im->ub, &bm, zin + MD, im->scratch, NULL, B, T);
        } else {
            out = im->hbuf + (size_t)(l % 2) * MD;
            block_fwd(&im->bc, &im->w[l], out, cur, im->ub, &bm, NULL, im->scratch, NULL, B, T);
        }
        cur = out;
    }
    float *rstd = cache ? cache + (size_t)im->L * (MD + im->block_cache_per) + MD : im->stack.ends.rstd_f;
    rmsnorm_fwd(z_out, rstd, cur, eff_at(im, im->o_norm_f), (int)M, im->D, (float)m->cfg.norm_eps);
}

/* dz_in += dz_out · ∂f/∂z at the cached call; with params, also dθ_eff += … and du += …. */
static void f_bwd(Model *m, float *dz_in, const float *dz_out, const float *cache, int params, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t M = (size_t)B * T, MD = M * im->D;
    const float *hL = cache + (size_t)im->L * (MD + im->block_cache_per);
    float *dh = im->dh, *dprev = im->dh2;
    k_zero(dh, MD);
    rmsnorm_bwd(dh, params ? im->deff + im->o_norm_f : NULL, dz_out, hL, eff_at(im, im->o_norm_f), hL + MD, (int)M, im->D);
    for (int l = im->L - 1; l >= 0; l--) {
        const float *zin = cache + (size_t)l * (MD + im->block_cache_per);
        BlockMasks bm = layer_masks(im, l, B);
        float *target = l == 0 ? dz_in : dprev;
        if (l > 0) k_zero(dprev, MD);
        block_bwd(&im->bc, &im->w[l], params ? &im->dw[l] : NULL, target, params ? im->dub : NULL, dh, zin, im->ub, &bm,
                  zin + MD, im->scratch, B, T);
        if (l > 0) { float *t = dh; dh = dprev; dprev = t; }
    }
}

static void map_f(void *ctx, float *z_out, const float *z) {
    FCtx *c = ctx;
    f_fwd(c->m, z_out, z, NULL, c->B, c->T);
}

static void map_vjp(void *ctx, float *dz, const float *g) {
    FCtx *c = ctx;
    ImplicitLm *im = c->m->impl;
    f_bwd(c->m, dz, g, im->cur_cache, 0, c->B, c->T);
}

/* ---- forward / backward ------------------------------------------------------------------------ */
/* ids → x0 (embedding, dropout) → u = Linear_inj(RMSNorm_inj(x0)). */
static void inject(Model *m, const int *ids, int B, int T) {
    ImplicitLm *im = m->impl;
    int M = B * T;
    lm_embed_fwd(m, &im->stack.ends, ids, B, T);
    rmsnorm_fwd(im->xn_inj, im->rstd_inj, im->stack.ends.x0, eff_at(im, im->o_inj_norm), M, im->D, (float)m->cfg.norm_eps);
    k_linear_fwd(im->u, im->xn_inj, eff_at(im, im->o_inj_w), eff_at(im, im->o_inj_b), M, im->D, im->K);
    block_u_to_parts(&im->bc, im->ub, im->u, (size_t)M);
}

static void sample_masks(Model *m) {
    ImplicitLm *im = m->impl;
    if (!im->masks) return;
    size_t n = (size_t)im->L * im->mask_per;
    /* one mask per forward, shared by every iteration and phantom step (spec §1.7) */
    if (m->training) lm_dropout_mask(&m->rng, im->masks, n, (float)m->cfg.backbone_dropout);
    else for (size_t i = 0; i < n; i++) im->masks[i] = 1.0f;
}

/* S differentiable steps from zs[0]: zs[i+1] = (1−τ_i) zs[i] + τ_i f(zs[i]). */
static void grad_steps(Model *m, int S, float tau0, float tau, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t MD = (size_t)B * T * im->D;
    im->S = S;
    for (int i = 0; i < S; i++) {
        float ti = i == 0 ? tau0 : tau;
        im->taus[i] = ti;
        f_fwd(m, im->fout, im->zs + (size_t)i * MD, im->fcache + (size_t)i * im->fcache_per, B, T);
        float *next = im->zs + (size_t)(i + 1) * MD;
        k_copy_rows(next, MD, im->zs + (size_t)i * MD, MD, 1, MD, 0);
        k_axpby(next, ti, im->fout, 1.0f - ti, MD);
    }
}

/* The relaxed steps without gradient (evaluation of the training forward): zs[1] = zs[0], then
 * S times zs[1] = (1−τ_i) zs[1] + τ_i f(zs[1]). */
static void relax_steps(Model *m, int S, float tau0, float tau, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t MD = (size_t)B * T * im->D;
    float *z = im->zs + MD;
    k_copy_rows(z, MD, im->zs, MD, 1, MD, 0);
    for (int i = 0; i < S; i++) {
        float ti = i == 0 ? tau0 : tau;
        f_fwd(m, im->fout, z, NULL, B, T);
        k_axpby(z, ti, im->fout, 1.0f - ti, MD);
    }
    im->S = 1;
}

/* Rows idx[0..n) of each of `parts` row blocks of src into dst, packed: block p holds B rows of
 * widths[p] floats in src and n rows in dst. */
static void gather_rows(float *dst, const float *src, const int *idx, int n, int B, const size_t *widths, int parts) {
    for (int p = 0; p < parts; p++) {
        for (int k = 0; k < n; k++) memcpy(dst + (size_t)k * widths[p], src + (size_t)idx[k] * widths[p], widths[p] * sizeof(float));
        src += (size_t)B * widths[p];
        dst += (size_t)n * widths[p];
    }
}

/* The per-layer mask blocks of layer_masks for B rows: (B, D) mixer, then (B, h), (B, D) gated MLP. */
static int mask_widths(const ImplicitLm *im, size_t *w) {
    w[0] = (size_t)im->bc.D;
    if (im->bc.mlp.kind != MLP_GATED) return 1;
    w[1] = (size_t)im->bc.mlp.h;
    w[2] = (size_t)im->bc.D;
    return 3;
}

/* Converge-or-extend: the sequences of the training solve that are still above tol go on
 * iterating, alone (a sub-batch of their rows: their u, their dropout masks, their best z so far),
 * up to f_extend_max_iter iterations in all; then their new z* and residuals go back to their
 * rows. The map acts on each sequence independently, so this is the solve each of them would
 * get with the larger cap, at the cost of the sequences that need it. Returns the status of the
 * sub-solve; *extra = its iterations, *n_ext = the sequences extended. */
static int extend_solve(Model *m, const FpOpts *o0, int done_iters, int B, int T, int *extra, int *n_ext) {
    ImplicitLm *im = m->impl;
    size_t TD = (size_t)T * im->D, TK[BLOCK_U_PARTS];
    int uw[BLOCK_U_PARTS], nu = block_u_parts(&im->bc, uw);
    for (int p = 0; p < nu; p++) TK[p] = (size_t)T * (size_t)uw[p];   /* a sequence's rows of each part */
    int n = 0;
    for (int b = 0; b < B; b++)
        if (!(im->sample_res[b] < o0->tol)) im->ext_idx[n++] = b;
    *extra = 0;
    *n_ext = n;
    if (n == 0 || o0->max_iter <= 0) return IM_OK;
    gather_rows(im->ext_z, im->zs, im->ext_idx, n, B, &TD, 1);
    gather_rows(im->ext_ub, im->ub, im->ext_idx, n, B, TK, nu);
    float *ub = im->ub, *masks = im->masks;
    size_t mask_per = im->mask_per;
    if (masks) {
        size_t w[3];
        int parts = mask_widths(im, w);
        for (int l = 0; l < im->L; l++)
            gather_rows(im->ext_masks + (size_t)l * mask_per, masks + (size_t)l * mask_per, im->ext_idx, n, B, w, parts);
        im->masks = im->ext_masks;   /* same per-layer stride, n rows used */
    }
    im->ub = im->ext_ub;
    FCtx ctx = {m, n, T};
    FpMap map = {&ctx, (size_t)n * TD, n, map_f, map_vjp};
    FpOpts o = *o0;
    o.max_iter = m->cfg.f_extend_max_iter - done_iters;
    FpStats st = {0};
    st.sample_res = im->ext_res;
    st.sample_step = im->ext_step;
    int rc = o.max_iter > 0 ? fp_solve(&map, im->ext_z, &o, &st, im->solver_scratch) : IM_OK;
    im->ub = ub;
    im->masks = masks;
    if (o.max_iter <= 0) return IM_OK;
    for (int k = 0; k < n; k++) {
        int b = im->ext_idx[k];
        memcpy(im->zs + (size_t)b * TD, im->ext_z + (size_t)k * TD, TD * sizeof(float));
        im->sample_res[b] = im->ext_res[k];
        im->sample_step[b] = done_iters + im->ext_step[k];
    }
    *extra = st.iters;
    return rc;
}

/* Share of the B samples that reached tol: Picard / Anderson / Broyden, whose res is each sample's
 * lowest residual, when it is below tol; the evaluation loop, whose res is each sample's ratio at
 * the last iteration and first_below (NULL otherwise) the first iteration its ratio was below tol
 * (`iters` if never), when it was below at some iteration. The loop stops on one batch-wide ratio,
 * so at its stop some samples may not have reached tol yet: the share says how many. */
static double conv_share(const float *res, const int *first_below, int iters, int B, double tol) {
    int n = 0;
    for (int b = 0; b < B; b++) n += res[b] < tol || (first_below && first_below[b] < iters);
    return (double)n / B;
}

static int fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss) {
    ImplicitLm *im = m->impl;
    const ModelCfg *c = &m->cfg;
    size_t MD = (size_t)B * T * im->D;
    refresh(m);
    sample_masks(m);
    inject(m, ids, B, T);
    FCtx ctx = {m, B, T};
    FpMap map = {&ctx, MD, B, map_f, map_vjp};
    FpStats st = {0};
    st.sample_res = im->sample_res;   /* per-sample diagnostics (B) */
    st.sample_step = im->sample_step;
    for (int b = 0; b < B; b++) im->sample_res[b] = 0, im->sample_step[b] = 0;
    FpOpts o;
    int rc = IM_OK;
    /* the training forward: in training, or evaluated as such (no dropout, no gradient) */
    int train_fwd = m->training || m->eval_solve == 1, grad = m->training;
    k_zero(im->zs, MD);   /* z0 = 0 (spec §2.3) */
    if (train_fwd && m->train_step < c->pretrain_steps) {
        im->mode = MODE_UNROLLED;
        m->fp_phase = "unrolled";
        /* z1 = f(0): undamped first call */
        if (grad) grad_steps(m, c->pretrain_iter, 1.0f, (float)c->tau, B, T);
        else relax_steps(m, c->pretrain_iter, 1.0f, (float)c->tau, B, T);
        st.iters = c->pretrain_iter;
    } else if (train_fwd) {
        /* the paper's curriculum: a bounded phase ("4+1") before the free one ("32+4"), §5.3 */
        /* bounded_frac: the phase ends at that fraction of the run's steps (= of its tokens, the
         * batch being constant), warm-up included; train_total is set by the trainer */
        int end = c->bounded_frac > 0 ? (int)lround(c->bounded_frac * m->train_total) : c->pretrain_steps + c->bounded_steps;
        int bounded = m->train_step < end;
        solver_opts(c, 0, &o);
        if (bounded) o.max_iter = c->bounded_f_max_iter;
        if (o.max_iter > 0) {
            rc = fp_solve(&map, im->zs, &o, &st, im->solver_scratch);
            /* the free phase of a training step only: the bounded phase is bounded on purpose */
            if (!rc && !bounded && c->f_extend_max_iter > 0) {
                int extra = 0, n_ext = 0;
                if (!st.converged) rc = extend_solve(m, &o, st.iters, B, T, &extra, &n_ext);
                st.iters += extra;
                m->fp_extended = (double)n_ext / B;
            }
            m->fp_conv = conv_share(im->sample_res, NULL, st.iters, B, o.tol);
        }
        int S = c->ift ? 1 : bounded ? c->bounded_grad : c->grad;
        float tau = c->ift ? 1.0f : (float)c->tau;
        im->mode = c->ift ? MODE_IFT : MODE_PHANTOM;
        m->fp_phase = c->ift ? "ift" : bounded ? "phantom (bounded)" : "phantom";
        if (grad) grad_steps(m, S, tau, tau, B, T);
        else relax_steps(m, S, tau, tau, B, T);
    } else {
        im->mode = MODE_EVAL;
        m->fp_phase = "eval";
        solver_opts(c, 1, &o);
        /* a cap of 1 (test-time compute sweeps) is the final call alone */
        if (o.max_iter >= 2) {
            rc = fp_solve(&map, im->zs, &o, &st, im->solver_scratch);
            m->fp_conv = conv_share(im->sample_res, im->sample_step, st.iters, B, o.tol);
        }
        f_fwd(m, im->zs + MD, im->zs, NULL, B, T);   /* the final call of §3.2 */
        im->S = 1;
    }
    if (!grad) im->mode = MODE_EVAL;   /* no backward follows */
    m->fp_iters = st.iters;
    m->fp_res = st.rel_res;
    m->fp_res_max = m->fp_step_max = 0;
    for (int b = 0; b < B; b++) {
        m->fp_res_max = fmax(m->fp_res_max, im->sample_res[b]);
        m->fp_step_max = fmax(m->fp_step_max, im->sample_step[b]);
    }
    if (rc) return rc;
    const float *z = im->zs + (size_t)im->S * MD;
    const float *E = lm_head_w(m, m->params);
    m->logits = im->stack.ends.head_cache;
    im->stack.ends.has_targets = targets != NULL;
    if (!targets) {
        head_logits(m->logits, z, E, B * T, m->V, im->D);
        if (loss) *loss = 0;
        return IM_OK;
    }
    rc = head_check_targets(targets, (size_t)B * T, c->vocab_size, IGNORE_INDEX);
    if (rc) return err_wrap(rc, "target");
    memcpy(im->stack.ends.targets, targets, sizeof(int) * (size_t)B * T);
    float l = 0;
    rc = head_loss_fwd(&l, &im->stack.ends.count, im->stack.ends.head_cache, im->stack.ends.head_scratch, z, E, im->stack.ends.targets, B * T,
                       m->V, im->D, IGNORE_INDEX);
    if (loss) *loss = l;
    return rc;
}

/* jac_freq: the step computes the regulariser with this probability (a pure function of the step,
 * so a resumed run makes the same draws). */
static int jac_due(const Model *m) {
    if (m->cfg.jac_freq >= 1) return 1;
    uint64_t h = rng_hash(0x6a6163, (uint64_t)m->train_step, 0);
    return (double)(h >> 11) * 0x1.0p-53 < m->cfg.jac_freq;
}

/* The Jacobian regulariser's value (m->jac_loss) and parameter gradient (deff, du +=), see the top. */
static void jac_reg_bwd(Model *m, int B, int T) {
    ImplicitLm *im = m->impl;
    size_t MD = (size_t)B * T * im->D;
    const float *zstar = im->zs;
    float *eps = im->dz2, *v = im->dz, *fo = im->hbuf, *zp = im->hbuf + MD, *slot = im->fcache;
    for (size_t i = 0; i < MD; i++) eps[i] = rng_normal(&m->rng);
    f_fwd(m, fo, zstar, slot, B, T);
    k_zero(v, MD);
    f_bwd(m, v, eps, slot, 0, B, T); /* v = Jᵀε */
    double vv = 0, zz = 0;
    for (size_t i = 0; i < MD; i++) vv += (double)v[i] * v[i], zz += (double)zstar[i] * zstar[i];
    double c = m->cfg.jac_weight / (double)MD;
    m->jac_loss = c * vv;
    if (!(vv > 0) || !isfinite(vv)) return;
    /* step: the perturbation's rms is 1e-3 of z*'s; at least 1e-5 absolute, for z* near 0, where
     * the pre-norms' curvature scale is sqrt(norm_eps) ≈ 3e-3 */
    double h = 1e-3 * fmax(sqrt(zz / MD), 1e-2) / sqrt(vv / MD);
    for (int side = 0; side < 2; side++) {
        float sg = side ? -1.0f : 1.0f;
        for (size_t i = 0; i < MD; i++) zp[i] = zstar[i] + sg * (float)h * v[i];
        f_fwd(m, fo, zp, slot, B, T);
        /* ∇θ of (c/h)·⟨ε, f(z*+hv)⟩ − (c/h)·⟨ε, f(z*−hv)⟩ */
        k_axpby(fo, sg * (float)(c / h), eps, 0.0f, MD);
        f_bwd(m, NULL, fo, slot, 1, B, T);
    }
}

static void bwd(Model *m) {
    ImplicitLm *im = m->impl;
    int B = m->B, T = m->T, M = B * T;
    size_t MD = (size_t)M * im->D;
    CHECK(im->stack.ends.has_targets && im->mode != MODE_EVAL, "model_bwd needs a training forward with targets");
    k_zero(im->deff, im->eff_tab.total);
    k_zero(im->dub, (size_t)M * im->K);
    k_zero(im->dz, MD);
    const float *E = lm_head_w(m, m->params);
    head_loss_bwd(im->dz, lm_head_w(m, m->grads), 1.0f, im->stack.ends.head_cache, im->stack.ends.head_scratch,
                  im->zs + (size_t)im->S * MD, E, im->stack.ends.targets, M, m->V, im->D, IGNORE_INDEX);
    if (im->mode == MODE_IFT) {
        /* y = g + y·J at z*, then the parameter gradient of one f call with y (spec §5.4) */
        FCtx ctx = {m, B, T};
        FpMap map = {&ctx, MD, B, map_f, map_vjp};
        FpOpts o;
        FpStats st = {0};
        solver_opts(&m->cfg, 2, &o);
        im->cur_cache = im->fcache;
        if (fp_adjoint(&map, im->dz2, im->dz, &o, &st, im->solver_scratch))
            memcpy(im->dz2, im->dz, MD * sizeof(float));   /* NaN: fall back to the JFB gradient */
        f_bwd(m, NULL, im->dz2, im->fcache, 1, B, T);
    } else {
        /* back through the S relaxed steps; z at step 0 is detached except in unrolled mode,
         * where it is the constant 0 anyway */
        for (int i = im->S - 1; i >= 0; i--) {
            float ti = im->taus[i];
            k_axpby(im->dz2, ti, im->dz, 0.0f, MD);          /* dz2 = τ dz: gradient at f's output */
            k_axpby(im->dz, 0.0f, im->dz, 1.0f - ti, MD);    /* dz = (1−τ) dz: the skip path */
            f_bwd(m, i > 0 ? im->dz : NULL, im->dz2, im->fcache + (size_t)i * im->fcache_per, 1, B, T);
        }
    }
    m->jac_loss = 0;
    if (m->cfg.jac_weight > 0 && im->mode != MODE_UNROLLED && jac_due(m)) jac_reg_bwd(m, B, T);
    /* injection: u = Linear_inj(RMSNorm_inj(x0)) */
    k_zero(im->dxn, MD);
    block_u_to_rows(&im->bc, im->du, im->dub, (size_t)M);
    k_linear_bwd(im->dxn, im->deff + im->o_inj_w, im->deff + im->o_inj_b, im->du, im->xn_inj, eff_at(im, im->o_inj_w), M,
                 im->D, im->K);
    k_zero(im->dz, MD);
    rmsnorm_bwd(im->dz, im->deff + im->o_inj_norm, im->dxn, im->stack.ends.x0, eff_at(im, im->o_inj_norm), im->rstd_inj, M,
                im->D);
    lm_embed_bwd(m, &im->stack.ends, im->dz, B, T);
    map_back(m);
}

/* The spectral radius of J = ∂f/∂z at the evaluated fixed point (spec §5.5): one cached f call
 * at z*, then power iteration on Jᵀ through the same vector-Jacobian product the IFT uses. */
static int spectral_radius(Model *m, const int *ids, int B, int T, int iters, double *out) {
    ImplicitLm *im = m->impl;
    size_t MD = (size_t)B * T * im->D;
    int was = m->training;
    m->training = 1;                     /* plan the backward caches ... */
    int rc = model_plan(m, B, T);
    m->training = 0;                     /* ... but no dropout: this is evaluation */
    if (!rc) {
        refresh(m);
        sample_masks(m);
        inject(m, ids, B, T);
        FCtx ctx = {m, B, T};
        FpMap map = {&ctx, MD, B, map_f, map_vjp};
        FpOpts o;
        FpStats st = {0};
        solver_opts(&m->cfg, 1, &o);
        k_zero(im->zs, MD);
        if (o.max_iter >= 2) rc = fp_solve(&map, im->zs, &o, &st, im->solver_scratch);
        if (!rc) {
            f_fwd(m, im->fout, im->zs, im->fcache, B, T);
            im->cur_cache = im->fcache;
            Rng r;
            rng_seed(&r, 12345, 3);
            for (size_t i = 0; i < MD; i++) im->dz[i] = rng_normal(&r);
            *out = fp_spectral_radius(&map, im->dz, iters, im->dz2);
            if (!isfinite(*out)) rc = err_set(IM_ENUM, "spectral radius: the Jacobian product is not finite");
        }
    }
    m->training = was;
    return rc;
}

/* ---- sequential mode (spec §4) ---------------------------------------------------------------- */
typedef struct {
    Model *m;
    int commit;
} StepCtx;

/* The noise of spec §7 in sequential mode (NULL when off). */
static const BlockNoise *step_noise(Model *m, BlockNoise *nz) {
    ImplicitLm *im = m->impl;
    const ModelCfg *c = &m->cfg;
    if (!(c->latent_noise_db > 0 || c->state_noise_db > 0)) return NULL;
    nz->latent_db = (float)c->latent_noise_db;
    nz->state_db = (float)c->state_noise_db;
    nz->multiplicative = !strcmp(c->noise_mode, "multiplicative");
    nz->rng = &im->noise_rng;
    return nz;
}

/* The sequential solve's buffers, after the layers' state (lm_stack_plan_state). */
static void carve_state(Model *m, Arena *a, int B, int T) {
    (void)T;
    ImplicitLm *im = m->impl;
    size_t BD = (size_t)B * im->D;
    im->zt = arena_floats(a, BD);
    im->zt_out = arena_floats(a, BD);
    im->hstep = arena_floats(a, BD);
    im->ut = arena_floats(a, (size_t)B * im->K);
    im->utb = arena_floats(a, (size_t)B * im->K);
    im->x0t = arena_floats(a, BD);
    im->xnt = arena_floats(a, BD);
    im->rstdt = arena_floats(a, (size_t)B);
    im->step_res = arena_floats(a, (size_t)B);
    im->step_first = arena_alloc(a, sizeof(int) * (size_t)B);
    FpOpts o;
    seq_solver_opts(&m->cfg, &o);
    im->step_solver_n = fp_scratch_floats(&o, BD, B);
    im->step_solver = arena_floats(a, im->step_solver_n);
}

static int state_init(Model *m, int B) {
    ImplicitLm *im = m->impl;
    im->stack.carve_state = carve_state;
    int rc = lm_stack_plan_state(m, B, block_state_floats(&im->bc, B), block_step_scratch_floats(&im->bc, B));
    if (rc) return rc;
    memset(im->zt, 0, (size_t)B * im->D * sizeof(float));
    rng_seed(&im->noise_rng, (uint64_t)m->cfg.noise_seed, 11);
    refresh(m);   /* weights are fixed during generation: one refresh per sequence */
    return IM_OK;
}

/* f_t(z): every layer steps from the cached state of tokens < t; commits only when asked. */
static void step_f(void *ctx, float *z_out, const float *z) {
    StepCtx *c = ctx;
    Model *m = c->m;
    ImplicitLm *im = m->impl;
    int B = m->step_B;
    const float *cur = z;
    BlockNoise nz;
    const BlockNoise *noise = step_noise(m, &nz);
    for (int l = 0; l < im->L; l++) {
        block_step_noisy(&im->bc, &im->w[l], im->hstep, cur, im->utb, im->stack.state + (size_t)l * im->stack.state_per, m->pos,
                         c->commit, im->stack.step_scratch, B, noise);
        cur = im->hstep;
    }
    rmsnorm_fwd(z_out, im->rstdt, im->hstep, eff_at(im, im->o_norm_f), B, im->D, (float)m->cfg.norm_eps);
}

static int step(Model *m, const int *ids, float *logits) {
    ImplicitLm *im = m->impl;
    int B = m->step_B, D = im->D;
    int rc = lm_stack_check_pos(m);
    if (rc) return rc;
    const float *E = model_tensor(m, m->params, EMB_NAME);
    embed_fwd(im->x0t, ids, E, B, m->V, D);   /* ids were validated by model_step */
    rmsnorm_fwd(im->xnt, im->rstdt, im->x0t, eff_at(im, im->o_inj_norm), B, D, (float)m->cfg.norm_eps);
    k_linear_fwd(im->ut, im->xnt, eff_at(im, im->o_inj_w), eff_at(im, im->o_inj_b), B, D, im->K);
    block_u_to_parts(&im->bc, im->utb, im->ut, (size_t)B);
    StepCtx ctx = {m, 0};
    FpMap map = {&ctx, (size_t)B * D, B, step_f, NULL};
    FpOpts o;
    FpStats st = {0};
    st.sample_res = im->step_res;   /* per-row residuals and steps: the convergence share */
    st.sample_step = im->step_first;
    seq_solver_opts(&m->cfg, &o);
    if (fp_scratch_floats(&o, (size_t)B * D, B) > im->step_solver_n)
        return err_set(IM_EINVAL, "the sequential solver (seq_solver, anderson_m, broyden_m) changed after "
                                  "model_state_init: call it again");
    /* z0 = 0 (the reference), or the previous token's fixed point (seq_warm_start) */
    if (!m->cfg.seq_warm_start) memset(im->zt, 0, (size_t)B * D * sizeof(float));
    rc = o.max_iter >= 2 ? fp_solve(&map, im->zt, &o, &st, im->step_solver) : IM_OK;
    if (o.max_iter >= 2)
        m->fp_conv = conv_share(im->step_res, o.solver == FP_EVALLOOP ? im->step_first : NULL, st.iters, B, o.tol);
    ctx.commit = 1;   /* the final call writes every layer's new state / KV slot */
    step_f(&ctx, im->zt_out, im->zt);
    if (m->cfg.seq_warm_start) memcpy(im->zt, im->zt_out, (size_t)B * D * sizeof(float));
    head_logits(logits, im->zt_out, lm_head_w(m, m->params), B, m->V, D);
    m->fp_iters = st.iters;
    m->fp_res = st.rel_res;
    m->fp_phase = "sequential";
    return rc;
}

static void free_impl(Model *m) {
    ImplicitLm *im = m->impl;
    if (!im) return;
    lm_stack_free(&im->stack);
    ptab_free(&im->eff_tab);
    free(im->map);
    free(im->eff);
    free(im->deff);
    free(im->w);
    free(im->dw);
    free(im->packed);
    free(im);
    m->impl = NULL;
}

const ModelType model_implicit_mamba2 = {"implicit_mamba2", MODEL_IMPLICIT, CFG_USE_SSD_HEADS | CFG_USE_NOISE, build_mamba2, plan, fwd, bwd, state_init, step, free_impl,
                                         post_init, spectral_radius};
const ModelType model_implicit_llama = {"implicit_llama", MODEL_IMPLICIT, CFG_USE_ATTN, build_llama, plan, fwd, bwd, state_init, step, free_impl,
                                        post_init, spectral_radius};
