/* fp_testutil.h: what the fixed-point layer tests share (test_fp_mamba.c, test_fp_rnn.c): the
 * part of a layer test case that does not depend on the layer (parameter block, inputs, loss
 * weights, buffers), the gradient check on it, the token gather / scatter of the sequential
 * tests, and the LM checks every FP kind passes (token-by-token logits equal the parallel ones,
 * a checkpoint round trip keeps them). Static functions; include after th.h and gradcheck.h.
 */
#ifndef IMPLICIT_FP_TESTUTIL_H
#define IMPLICIT_FP_TESTUTIL_H

#include "../src/fixedpoint/fp.h"
#include "../src/models/ckpt.h"
#include "../src/models/model.h"
#include "../src/core/params.h"

/* ---- the layers' solve ------------------------------------------------------------------------ */

/* fpo_opts_default's options (s0 0.99, decay 0.9, patience 15, threshold 0.1, quantile 0.75, cap
 * 100) for the solver table's FixedPointOptimizer row. */
static FpOpts fpt_fpo_opts(void) {
    FpOpts o;
    fp_opts_default(&o);
    o.solver = FP_OPTIMIZER;
    o.tol = 0.1;
    o.max_iter = 100;
    return o;
}

/* A solve the layers are given: s runs o (its row, or s->ops when the caller sets one) with
 * scratch for maps of up to n floats in nb samples, and tallies the solves; free s->scratch. */
static FpSolve fpt_solve(FpSolveCtx *s, const FpOpts *o, size_t n, int nb) {
    *s = (FpSolveCtx){.o = *o, .scratch = th_alloc(fp_scratch_floats(o, n, nb))};
    return fp_solve_call(s);
}

/* ---- a layer test case --------------------------------------------------------------------- */

typedef struct {
    ParamTable t;                       /* the layer's tensors under the prefix "L" */
    float *theta, *dtheta;              /* (t.total) parameters, their gradients */
    float *eff, *deff;                  /* (neff) effective weights, their gradients */
    size_t neff;
    int B, T, D, E;
    float *u, *du;                      /* (B,T,D) layer input, its gradient */
    float *ystar;                       /* (B,T,E) the iterate the graded steps start from */
    float *R;                           /* (B,T,D) loss weights: loss = Σ out ⊙ R */
    float *out;                         /* (B,T,D) */
    float *cache, *scratch;
} FptCase;

/* After the layer's add_params into k->t (ptab_init'ed): theta with the table's init values,
 * dtheta, and neff floats each of eff, deff. The layer binds and post-inits next. */
static void fpt_case_params(FptCase *k, size_t neff, uint64_t seed) {
    k->theta = th_alloc(k->t.total);
    k->dtheta = th_alloc(k->t.total);
    k->neff = neff;
    k->eff = th_alloc(neff);
    k->deff = th_alloc(neff);
    ptab_init_values(&k->t, k->theta, seed);
}

/* After bind and post_init: every tensor moved off its init values (so that no gradient is
 * trivially symmetric), then u ~ N(0,1), Y* ~ N(0,1), R ~ U(−1,1) from the same stream, and the
 * layer's cache and scratch. The caller refreshes the effective weights. */
static void fpt_case_inputs(FptCase *k, int B, int T, int D, int E, size_t ncache, size_t nscratch, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed, 5);
    for (int i = 0; i < k->t.n; i++) {
        const ParamInfo *p = &k->t.p[i];
        for (size_t j = 0; j < p->numel; j++) k->theta[p->offset + j] += 0.1f * rng_normal(&r);
    }
    size_t M = (size_t)B * T;
    k->B = B;
    k->T = T;
    k->D = D;
    k->E = E;
    k->u = th_alloc(M * D);
    k->du = th_alloc(M * D);
    k->ystar = th_alloc(M * E);
    k->R = th_alloc(M * D);
    k->out = th_alloc(M * D);
    k->cache = th_alloc(ncache);
    k->scratch = th_alloc(nscratch);
    th_fill_normal(k->u, M * D, &r, 1.0f);
    th_fill_normal(k->ystar, M * E, &r, 1.0f);
    th_fill_uniform(k->R, M * D, &r, -1, 1);
}

static void fpt_case_free(FptCase *k) {
    ptab_free(&k->t);
    free(k->theta); free(k->dtheta); free(k->eff); free(k->deff);
    free(k->u); free(k->du); free(k->ystar); free(k->R); free(k->out); free(k->cache); free(k->scratch);
}

/* Σ out ⊙ R */
static double fpt_loss(const FptCase *k) {
    double s = 0;
    for (size_t i = 0; i < (size_t)k->B * k->T * k->D; i++) s += (double)k->out[i] * k->R[i];
    return s;
}

/* Finite differences (ntheta entries of θ, 20 of u) and the directional test of the case's
 * backward; loss and bwd receive ctx. */
static void fpt_grad_check(const char *name, FptCase *k, double (*loss)(void *), void (*bwd)(void *), void *ctx,
                           float h, int ntheta) {
    GradCase gc = {.name = name, .loss = loss, .bwd = bwd, .ctx = ctx, .h = h, .tol = 2e-2};
    add_tensor(&gc, "theta", k->theta, k->dtheta, k->t.total, ntheta);
    add_tensor(&gc, "u", k->u, k->du, (size_t)k->B * k->T * k->D, 20);
    Rng r;
    rng_seed(&r, 3, 3);
    run_grad_case(&gc, &r);
}

/* Every tensor whose name holds both part1 and part2 set to v. */
static void fpt_set_by_name(FptCase *k, const char *part1, const char *part2, float v) {
    for (int i = 0; i < k->t.n; i++) {
        const ParamInfo *p = &k->t.p[i];
        if (strstr(p->name, part1) && strstr(p->name, part2))
            for (size_t j = 0; j < p->numel; j++) k->theta[p->offset + j] = v;
    }
}

/* xt:(B,n) = token t of x:(B,T,n), and back */
static void fpt_get_token(float *xt, const float *x, int B, int T, int t, int n) {
    for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * n, x + ((size_t)b * T + t) * n, (size_t)n * sizeof(float));
}

static void fpt_put_token(float *x, const float *xt, int B, int T, int t, int n) {
    for (int b = 0; b < B; b++) memcpy(x + ((size_t)b * T + t) * n, xt + (size_t)b * n, (size_t)n * sizeof(float));
}

/* ---- the LM checks --------------------------------------------------------------------------- */

/* The toy batch: FPT_B sequences of FPT_T ids below 7; the target of an id is id + 1 mod 7. */
#define FPT_B 2
#define FPT_T 6
static const int fpt_ids[FPT_B * FPT_T] = {1, 4, 2, 6, 0, 3, 5, 5, 1, 2, 4, 0};

static void fpt_targets(int *tg) {
    for (int i = 0; i < FPT_B * FPT_T; i++) tg[i] = (fpt_ids[i] + 1) % 7;
}

/* A model from key/value pairs (NULL-terminated); -1 on a rejected key. */
static int fpt_make_model(Model *m, const char *const *kv) {
    ModelCfg c;
    cfg_defaults(&c);
    for (int i = 0; kv[i]; i += 2)
        if (cfg_set(&c, kv[i], kv[i + 1]) != IM_OK) return -1;
    return model_create(m, &c);
}

/* At init α = σ(0) = 1/2 and Q = I − u uᵀ is only borderline contractive: the per-token and the
 * whole-sequence solves may then settle on different points. A contractive Q (α ≈ 0.12) has one
 * fixed point, which both modes must find. */
static void fpt_model_contractive(Model *m) {
    for (int i = 0; i < m->tab.n; i++)
        if (strstr(m->tab.p[i].name, "proj_alpha.bias"))
            for (size_t j = 0; j < m->tab.p[i].numel; j++) m->params[m->tab.p[i].offset + j] = -2;
}

/* Evaluation forward on the toy batch (its solve must converge), then token by token: the
 * logits must agree. par:(FPT_B, FPT_T, V) receives the parallel logits. */
static void fpt_model_seq_vs_par(Model *m, const char *name, float *par) {
    int B = FPT_B, T = FPT_T, V = m->V, tg[FPT_B * FPT_T];
    fpt_targets(tg);
    m->training = 0;
    float loss;
    TH_CHECK(model_fwd(m, fpt_ids, tg, B, T, &loss) == IM_OK, "%s fwd: %s", name, err_msg());
    TH_CHECK(m->fp_res_max < 1e-5 && m->fp_phase && !strcmp(m->fp_phase, "fp eval"), "%s: eval solve converged (%g)",
             name, m->fp_res_max);
    memcpy(par, m->logits, (size_t)B * T * V * sizeof(float));
    float *seq = th_alloc((size_t)B * T * V), *lt = th_alloc((size_t)B * V);
    TH_CHECK(model_state_init(m, B) == IM_OK, "state: %s", err_msg());
    for (int t = 0; t < T; t++) {
        int it[FPT_B];
        for (int b = 0; b < B; b++) it[b] = fpt_ids[b * T + t];
        TH_CHECK(model_step(m, it, lt) == IM_OK, "step: %s", err_msg());
        fpt_put_token(seq, lt, B, T, t, V);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s: sequential logits == parallel", name);
    TH_CLOSE(seq, par, (size_t)B * T * V, 1e-3, nm);
    free(seq); free(lt);
}

/* Save m to path, load it back: the evaluation logits on the toy batch equal par bit for bit. */
static void fpt_model_ckpt_roundtrip(Model *m, const char *name, const char *path, const float *par) {
    int tg[FPT_B * FPT_T];
    fpt_targets(tg);
    TH_CHECK(ckpt_save(m, path, NULL) == IM_OK, "save: %s", err_msg());
    Model m2;
    TH_CHECK(ckpt_load(&m2, path, NULL) == IM_OK, "load: %s", err_msg());
    m2.training = 0;
    float loss;
    TH_CHECK(model_fwd(&m2, fpt_ids, tg, FPT_B, FPT_T, &loss) == IM_OK, "fwd after load");
    TH_CHECK(!memcmp(m2.logits, par, (size_t)FPT_B * FPT_T * m->V * sizeof(float)),
             "%s: logits identical after a checkpoint round trip", name);
    remove(path);
    model_free(&m2);
}

#endif
