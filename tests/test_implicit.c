/* test_implicit.c: the implicit Mamba2 / Llama LMs (spec implicit-lm §2-§6).
 * - weight norm: the effective weights equal the plain init; checkpoints carry weight_g / weight_v
 * - unrolled and phantom gradients equal central finite differences of the loss of the same
 *   relaxed map (with f_max_iter 0 the phantom loss is an honest function of θ)
 * - IFT gradient ≈ finite differences of the loss at a converged solve (contractive model)
 * - sequential equals simultaneous evaluation on a converged contractive model (duality)
 * - the activation memory of a training step does not depend on f_max_iter
 * - PyTorch parity against tests/ref/implicit_<family>.safetensors when present
 */
#include <math.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
#include "../src/layers/noise.h"
#include "th.h"
#include "model_check.h"

enum { B = 2, T = 6, V = 11 };

static void make(Model *m, const char *family, const char *const *kv) {
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", family);
    static const char *const base[] = {"vocab_size", "11", "d_model", "16", "n_layer", "1", "d_state", "4", "headdim", "8",
                                       "n_head", "2", "tau", "0.8", NULL};
    for (int i = 0; base[i]; i += 2) cfg_set(&c, base[i], base[i + 1]);
    for (int i = 0; kv && kv[i]; i += 2) CHECK(cfg_set(&c, kv[i], kv[i + 1]) == 0, "%s", err_msg());
    CHECK(model_create(m, &c) == 0, "%s", err_msg());
    model_init_params(m, 7);
}

/* Shrink the weight-norm gains of the input projections: the map becomes a contraction
 * (spec §13.1's measured caution). */
static void contract(Model *m) {
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        if (strstr(p->name, "_g") && (strstr(p->name, "in_proj") || strstr(p->name, ".wq") || strstr(p->name, ".wk") ||
                                      strstr(p->name, ".wv") || strstr(p->name, "out_proj")))
            for (size_t j = 0; j < p->numel; j++) m->params[p->offset + j] *= 0.3f;
    }
}

static void batch(int *ids, int *tg) {
    Rng r;
    rng_seed(&r, 5, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int)rng_below(&r, V);
    for (int i = 0; i < B * T; i++) tg[i] = i % T == T - 1 ? IGNORE_INDEX : ids[i + 1];
}

static double loss_of(Model *m, const int *ids, const int *tg) {
    float l = 0;
    CHECK(model_fwd(m, ids, tg, B, T, &l) == 0, "%s", err_msg());
    return l;
}

/* Gradient vs central differences along a random direction in each tensor: <g, v> against
 * (L(θ+hv) − L(θ−hv)) / 2h, relative to |g|·|v| (robust for tensors with tiny gradients). */
static double fd_check(Model *m, const char *what) {
    int ids[B * T], tg[B * T];
    batch(ids, tg);
    m->training = 1;
    loss_of(m, ids, tg);
    model_zero_grad(m);
    model_bwd(m);
    double worst = 0;
    Rng r;
    rng_seed(&r, 17, 1);
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        float *x = m->params + p->offset, *x0 = th_alloc(p->numel), *v = th_alloc(p->numel);
        memcpy(x0, x, p->numel * sizeof(float));
        double gv = 0, gn = 0, vn = 0;
        for (size_t j = 0; j < p->numel; j++) {
            v[j] = rng_normal(&r);
            gv += (double)m->grads[p->offset + j] * v[j];
            gn += (double)m->grads[p->offset + j] * m->grads[p->offset + j];
            vn += (double)v[j] * v[j];
        }
        double h = 2e-3 / sqrt(vn / p->numel), lp, lm;
        for (size_t j = 0; j < p->numel; j++) x[j] = x0[j] + (float)h * v[j];
        lp = loss_of(m, ids, tg);
        for (size_t j = 0; j < p->numel; j++) x[j] = x0[j] - (float)h * v[j];
        lm = loss_of(m, ids, tg);
        memcpy(x, x0, p->numel * sizeof(float));
        double fd = (lp - lm) / (2 * h), err = fabs(fd - gv) / (sqrt(gn * vn) + 1e-4);
        /* a loss change below ~1e-6 of the loss is float rounding: too small to test here (A_log
         * and dt_bias at init; their gradients are checked in double by test_mamba2 and against
         * PyTorch by test_models) */
        if (fabs(h * sqrt(gn * vn)) < 1e-6 * fabs(lp)) err = 0;
        if (err > worst) worst = err;
        TH_CHECK(err < 2e-2, "%s: gradient of %s: <g,v> %.6g vs FD %.6g (rel %.3g)", what, p->name, gv, fd, err);
        free(x0);
        free(v);
    }
    return worst;
}

static void gradients(const char *family) {
    char what[64];
    Model m;
    /* unrolled: z = f(0); 3 more damped calls; full backprop */
    static const char *const unrolled[] = {"pretrain_steps", "1000", "pretrain_iter", "4", NULL};
    make(&m, family, unrolled);
    snprintf(what, sizeof what, "%s unrolled", family);
    printf("  %-24s worst FD error %.2e\n", what, fd_check(&m, what));
    model_free(&m);
    /* phantom with no solve: 3 relaxed steps from z = 0, a function of θ */
    static const char *const phantom[] = {"f_max_iter", "0", "grad", "3", "eval_f_max_iter", "4", NULL};
    make(&m, family, phantom);
    snprintf(what, sizeof what, "%s phantom", family);
    printf("  %-24s worst FD error %.2e\n", what, fd_check(&m, what));
    model_free(&m);
}

/* IFT at a converged solve: the gradient of L(z*(θ)) by the adjoint equals finite differences
 * of the loss recomputed with a tight solve. */
static void ift(const char *family, const char *solver) {
    const char *const kv[] = {"ift", "1", "f_max_iter", "200", "f_tol", "1e-7", "b_max_iter", "200",
                              "b_tol", "1e-7", "f_solver", solver, "b_solver", solver, NULL};
    Model m;
    make(&m, family, kv);
    contract(&m);
    char what[64];
    snprintf(what, sizeof what, "%s ift %s", family, solver);
    printf("  %-24s worst FD error %.2e\n", what, fd_check(&m, what));
    model_free(&m);
}

/* Sequential (token by token, caches read-only inside the loop) equals simultaneous. */
static void duality(const char *family) {
    static const char *const kv[] = {"eval_f_max_iter", "300", "f_tol", "1e-6", "eval_seq_f_max_iter", "0", NULL};
    Model m;
    make(&m, family, kv);
    contract(&m);
    int ids[B * T], tg[B * T];
    batch(ids, tg);
    m.training = 0;
    double iters = 0;
    double worst = th_step_vs_parallel(&m, ids, B, T, family, &iters);
    TH_CHECK(model_fwd(&m, ids, NULL, B, T, NULL) == 0, "%s", err_msg());   /* for its iteration count */
    double sim_iters = m.fp_iters;
    TH_CHECK(worst < 1e-3, "%s: sequential vs simultaneous rel err %.3g", family, worst);
    printf("  %-24s duality rel err %.2e (simultaneous %g iterations, sequential %.1f per token)\n", family, worst,
           sim_iters, iters);
    model_free(&m);
}

/* Beyond the reference: warm-started, Anderson and Broyden sequential solves reach the cold-start
 * answer. */
static void seq_variants(void) {
    static const char *const kv[] = {"eval_f_max_iter", "300", "f_tol", "1e-6", "eval_seq_f_max_iter", "0", NULL};
    const char *variants[4][4] = {{"seq_warm_start", "0", "seq_solver", "loop"},
                                  {"seq_warm_start", "1", "seq_solver", "loop"},
                                  {"seq_warm_start", "0", "seq_solver", "anderson"},
                                  {"seq_warm_start", "0", "seq_solver", "broyden"}};
    float *out[4];
    double iters[4];
    int ids[B * T], tg[B * T], col[B];
    batch(ids, tg);
    for (int v = 0; v < 4; v++) {
        Model m;
        make(&m, "implicit_mamba2", kv);
        contract(&m);
        for (int k = 0; k < 4; k += 2) cfg_set(&m.cfg, variants[v][k], variants[v][k + 1]);
        out[v] = th_alloc((size_t)B * T * m.V);
        double step_iters[T];
        th_step_all(&m, ids, B, T, out[v], step_iters, variants[v][3]);
        iters[v] = 0;
        for (int t = 0; t < T; t++) iters[v] += step_iters[t] / T;
        model_free(&m);
    }
    double ew = th_rel_err(out[1], out[0], (size_t)B * T * V), ea = th_rel_err(out[2], out[0], (size_t)B * T * V);
    double eb = th_rel_err(out[3], out[0], (size_t)B * T * V);
    TH_CHECK(ew < 1e-3 && ea < 1e-3 && eb < 1e-3, "warm start / Anderson / Broyden vs cold start: %.3g / %.3g / %.3g",
             ew, ea, eb);
    printf("  sequential iterations per token: cold %.1f, warm start %.1f, Anderson %.1f, Broyden %.1f"
           " (rel diff %.1e, %.1e, %.1e)\n", iters[0], iters[1], iters[2], iters[3], ew, ea, eb);
    for (int v = 0; v < 4; v++) free(out[v]);
    /* the sequential solver's scratch is sized at model_state_init: a bigger one afterwards is an error */
    Model m;
    make(&m, "implicit_mamba2", kv);
    float *lg = th_alloc((size_t)B * m.V);
    TH_CHECK(model_state_init(&m, B) == 0, "%s", err_msg());
    cfg_set(&m.cfg, "seq_solver", "broyden");
    for (int b = 0; b < B; b++) col[b] = ids[b * T];
    TH_CHECK(model_step(&m, col, lg) == IM_EINVAL && strstr(err_msg(), "model_state_init"),
             "solver changed after state init: '%s'", err_msg());
    TH_CHECK(model_state_init(&m, B) == 0 && model_step(&m, col, lg) == 0, "re-init: %s", err_msg());
    free(lg);
    model_free(&m);
}

static void weight_norm_and_memory(void) {
    Model m;
    make(&m, "implicit_mamba2", NULL);
    TH_CHECK(ptab_find(&m.tab, "backbone.layers.0.mixer.in_proj.weight_g") && ptab_find(&m.tab, "backbone.injection.weight_v") &&
                 ptab_find(&m.tab, "backbone.layers.0.mixer.conv1d.weight_g")->shape[2] == 1 &&
                 !ptab_find(&m.tab, "backbone.layers.0.mixer.in_proj.weight") && ptab_find(&m.tab, "backbone.injection.bias"),
             "weight-norm tensor names (spec §14)");
    /* at init W = g v/|v| = v: an explicit model with the v tensors gives the same logits */
    const ParamInfo *g = ptab_find(&m.tab, "backbone.layers.0.mixer.out_proj.weight_g");
    const ParamInfo *v = ptab_find(&m.tab, "backbone.layers.0.mixer.out_proj.weight_v");
    double e = 0;
    for (int r = 0; r < (int)g->shape[0]; r++) {
        double s = 0;
        for (int j = 0; j < (int)v->shape[1]; j++) s += pow(m.params[v->offset + (size_t)r * v->shape[1] + j], 2);
        e = fmax(e, fabs(sqrt(s) - m.params[g->offset + r]));
    }
    TH_CHECK(e < 1e-6, "g = |v| at init: err %g", e);
    model_free(&m);
    /* memory of a training step: independent of f_max_iter, grows with grad */
    size_t bytes[3];
    const char *fmi[3] = {"4", "64", "64"}, *gr[3] = {"2", "2", "8"};
    for (int i = 0; i < 3; i++) {
        const char *kv[] = {"f_max_iter", fmi[i], "grad", gr[i], NULL};
        make(&m, "implicit_mamba2", kv);
        m.training = 1;
        TH_CHECK(model_plan(&m, B, T) == 0, "%s", err_msg());
        bytes[i] = m.act_bytes;
        model_free(&m);
    }
    TH_CHECK(bytes[0] == bytes[1], "activation memory depends on f_max_iter: %zu vs %zu", bytes[0], bytes[1]);
    TH_CHECK(bytes[2] > bytes[1], "activation memory does not grow with grad: %zu vs %zu", bytes[2], bytes[1]);
    /* evaluation plans no backward caches */
    make(&m, "implicit_mamba2", NULL);
    m.training = 0;
    TH_CHECK(model_plan(&m, B, T) == 0, "%s", err_msg());
    TH_CHECK(m.act_bytes < bytes[0], "evaluation plans %zu bytes, training %zu", m.act_bytes, bytes[0]);
    model_free(&m);
    printf("  activation bytes: f_max_iter 4/64 grad 2: %zu / %zu, grad 8: %zu\n", bytes[0], bytes[1], bytes[2]);
}

/* Per-tensor scale-aware comparison of all parameter gradients with prefix (e.g. "grad."). */
/* PyTorch parity (tests/ref/gen_implicit.py): phantom and unrolled training forward/backward,
 * the simultaneous eval loop and sequential mode, bounded and converged. */
static void parity(const char *path) {
    StFile f;
    Model m;
    int Bn = 0, Tn = 0;
    if (th_ref_open(&f, &m, path, NULL, &Bn, &Tn)) return;
    size_t n = (size_t)Bn * Tn, nl = n * m.V;
    const int *ids = (const int *)ref_tensor(&f, "input.ids", n), *tg = (const int *)ref_tensor(&f, "input.targets", n);
    float loss;
    /* phantom: 12 undamped solve steps, 3 relaxed differentiable steps */
    m.training = 1;
    m.train_step = 1 << 30;
    TH_CHECK(model_fwd(&m, ids, tg, Bn, Tn, &loss) == 0, "%s", err_msg());
    double el = th_rel_err(m.logits, ref_tensor(&f, "out.logits", nl), nl);
    TH_CHECK(el < 1e-4 && fabsf(loss - *ref_tensor(&f, "out.loss", 1)) < 1e-4f * loss, "%s phantom logits %.3g", path, el);
    model_zero_grad(&m);
    model_bwd(&m);
    double eg = th_ref_grads(&m, &f, "grad.", 1e-3, "phantom");
    /* unrolled warm-up: z = f(0), 3 damped calls, full backprop */
    m.cfg.pretrain_steps = 1;
    m.train_step = 0;
    TH_CHECK(model_fwd(&m, ids, tg, Bn, Tn, &loss) == 0, "%s", err_msg());
    double eu = th_rel_err(m.logits, ref_tensor(&f, "unrolled.logits", nl), nl);
    TH_CHECK(eu < 1e-4, "%s unrolled logits %.3g", path, eu);
    model_zero_grad(&m);
    model_bwd(&m);
    double eug = th_ref_grads(&m, &f, "unrolled.grad.", 1e-3, "unrolled");
    /* simultaneous eval loop, f_thres 8: 7 loop calls + the final one */
    m.training = 0;
    TH_CHECK(model_fwd(&m, ids, NULL, Bn, Tn, NULL) == 0, "%s", err_msg());
    double ee = th_rel_err(m.logits, ref_tensor(&f, "eval.logits", nl), nl);
    TH_CHECK(ee < 1e-4 && m.fp_iters == 7, "%s eval logits %.3g, iters %g", path, ee, m.fp_iters);
    /* sequential mode with the same loop per token */
    float *seq = th_alloc(nl);
    double *seq_iters = calloc((size_t)Tn, sizeof(double));
    th_step_all(&m, ids, Bn, Tn, seq, seq_iters, path);
    for (int t = 0; t < Tn; t++) TH_CHECK(seq_iters[t] == 7, "seq iters %g", seq_iters[t]);
    free(seq_iters);
    double es = th_rel_err(seq, ref_tensor(&f, "seq.logits", nl), nl);
    TH_CHECK(es < 1e-4, "%s seq logits %.3g", path, es);
    printf("  %-38s phantom logits %.1e grads %.1e | unrolled %.1e / %.1e | eval %.1e | seq %.1e\n", path, el, eg, eu, eug,
           ee, es);
    free(seq);
    model_free(&m);
    st_free(&f);
}

/* Noise injection (spec §7): statistics of the two modes; off = bit-identical to no noise; the
 * same seed reproduces; on changes the sequential logits. */
static void noise(void) {
    Rng r;
    rng_seed(&r, 3, 3);
    enum { NN = 200000 };
    float *x = th_alloc(NN), *y = th_alloc(NN);
    for (int i = 0; i < NN; i++) x[i] = 1.0f + 0.5f * (float)(i % 3);
    memcpy(y, x, sizeof(float) * NN);
    noise_inject(y, NN, 20.0f, 1, &r);   /* n ~ N(0, 1/100): relative deviation sd 0.1 */
    double s2 = 0;
    for (int i = 0; i < NN; i++) s2 += pow(y[i] / x[i] - 1.0, 2);
    TH_CHECK(fabs(sqrt(s2 / NN) - 0.1) < 0.003, "multiplicative noise sd %g, want 0.1", sqrt(s2 / NN));
    memcpy(y, x, sizeof(float) * NN);
    noise_inject(y, NN, 10.0f, 0, &r);   /* σ² = mean(x²)/10 */
    double ms = 0, d2 = 0;
    for (int i = 0; i < NN; i++) ms += (double)x[i] * x[i], d2 += pow(y[i] - x[i], 2);
    TH_CHECK(fabs(d2 / ms - 0.1) < 0.003, "additive noise power ratio %g, want 0.1", d2 / ms);
    memcpy(y, x, sizeof(float) * NN);
    noise_inject(y, NN, 0.0f, 1, &r);
    TH_CHECK(!memcmp(x, y, sizeof(float) * NN), "0 dB must be off");
    free(x);
    free(y);
    /* model level */
    int ids[B * T], tg[B * T];
    batch(ids, tg);
    const char *dbs[3] = {"0", "15", "15"};
    float *out[3];
    for (int v = 0; v < 3; v++) {
        static const char *const kv[] = {"eval_f_max_iter", "20", NULL};
        Model m;
        make(&m, "implicit_mamba2", kv);
        contract(&m);
        cfg_set(&m.cfg, "latent_noise_db", dbs[v]);
        cfg_set(&m.cfg, "state_noise_db", dbs[v]);
        out[v] = th_alloc((size_t)B * T * m.V);
        th_step_all(&m, ids, B, T, out[v], NULL, "noise");
        model_free(&m);
    }
    size_t n = (size_t)B * T * V;
    double e = th_rel_err(out[1], out[0], n);
    TH_CHECK(e > 1e-4 && e < 0.5, "15 dB noise changes the logits moderately: rel diff %g", e);
    TH_CHECK(!memcmp(out[1], out[2], n * sizeof(float)), "noise with the same seed is reproducible");
    for (int v = 0; v < 3; v++) free(out[v]);
}

/* Spectral radius of ∂f/∂z at z*: below 1 for the contracted model (whose Picard solve converges,
 * see duality()); the power iteration itself is checked on known maps in test_fp. Explicit models
 * have none. */
static void spectral(void) {
    int ids[B * T], tg[B * T];
    batch(ids, tg);
    Model m;
    make(&m, "implicit_mamba2", NULL);
    contract(&m);
    double rho = -1, rho2 = -1;
    TH_CHECK(model_spectral_radius(&m, ids, B, T, 30, &rho) == 0, "%s", err_msg());
    TH_CHECK(rho > 0 && rho < 1, "spectral radius of the contracted model: %g", rho);
    /* deterministic: the same call gives the same estimate */
    TH_CHECK(model_spectral_radius(&m, ids, B, T, 30, &rho2) == 0 && rho2 == rho, "repeat: %g vs %g", rho2, rho);
    printf("  spectral radius at z* of the contracted model: %.3f\n", rho);
    model_free(&m);
    static const char *const kv[] = {"vocab_size", "11", NULL};
    ModelCfg c;
    cfg_defaults(&c);
    for (int i = 0; kv[i]; i += 2) cfg_set(&c, kv[i], kv[i + 1]);
    TH_CHECK(model_create(&m, &c) == 0, "%s", err_msg());
    double r;
    TH_CHECK(model_spectral_radius(&m, ids, B, T, 5, &r) == IM_EINVAL, "explicit model has no spectral radius");
    model_free(&m);
}

/* Jacobian regularisation: the extra gradient (with jac_weight w minus without) equals central
 * differences of R = w‖εᵀJ‖²/numel along random directions, with the same ε (the model's rng
 * restored) and z* = 0 held fixed (f_max_iter 0: no solve, as the regulariser treats z* as a
 * constant); the value is logged; jac_freq 0 turns it off. */
static void jacobian_reg(const char *family) {
    static const char *const kv[] = {"f_max_iter", "0", "grad", "2", "eval_f_max_iter", "4", "jac_weight", "0.5", NULL};
    Model m;
    make(&m, family, kv);
    int ids[B * T], tg[B * T];
    batch(ids, tg);
    m.training = 1;
    Rng keep = m.rng;
    size_t n = m.tab.total;
    float *g2 = th_alloc(n), *d = th_alloc(n), *x0 = th_alloc(n), *v = th_alloc(n);
    loss_of(&m, ids, tg);
    model_zero_grad(&m);
    model_bwd(&m);
    double R0 = m.jac_loss;
    memcpy(g2, m.grads, n * sizeof(float));
    m.cfg.jac_weight = 0;
    m.rng = keep;
    loss_of(&m, ids, tg);
    model_zero_grad(&m);
    model_bwd(&m);
    TH_CHECK(m.jac_loss == 0 && R0 > 0, "%s: jac_loss %g logged only when on", family, R0);
    for (size_t i = 0; i < n; i++) d[i] = g2[i] - m.grads[i];
    m.cfg.jac_weight = 0.5;
    memcpy(x0, m.params, n * sizeof(float));
    Rng r;
    rng_seed(&r, 23, 2);
    double worst = 0;
    for (int trial = 0; trial < 4; trial++) {
        double dv = 0, dn = 0, vn = 0;
        for (size_t i = 0; i < n; i++) {
            v[i] = rng_normal(&r);
            dv += (double)d[i] * v[i], dn += (double)d[i] * d[i], vn += (double)v[i] * v[i];
        }
        double h = 1e-3 / sqrt(vn / n), R[2];
        for (int side = 0; side < 2; side++) {
            for (size_t i = 0; i < n; i++) m.params[i] = x0[i] + (side ? -1.0f : 1.0f) * (float)h * v[i];
            m.rng = keep;
            loss_of(&m, ids, tg);
            model_zero_grad(&m);
            model_bwd(&m);
            R[side] = m.jac_loss;
        }
        memcpy(m.params, x0, n * sizeof(float));
        double fd = (R[0] - R[1]) / (2 * h), err = fabs(fd - dv) / (sqrt(dn * vn) + 1e-9);
        if (err > worst) worst = err;
        TH_CHECK(err < 2e-2, "%s: Jacobian regulariser gradient <d,v> %.6g vs FD %.6g (rel %.3g)", family, dv, fd, err);
    }
    printf("  %-24s worst FD error %.2e (R = %.4g)\n", family, worst, R0);
    m.cfg.jac_freq = 0;
    m.rng = keep;
    loss_of(&m, ids, tg);
    model_bwd(&m);
    TH_CHECK(m.jac_loss == 0, "%s: jac_freq 0 skips the regulariser", family);
    free(g2); free(d); free(x0); free(v);
    model_free(&m);
}

/* Solver keys a user can get wrong: each is rejected with a message naming the key. */
static void bad_solver_keys(void) {
    const char *bad[][3] = {{"broyden_m", "0", "'broyden_m'"},        {"broyden_m", "65", "'broyden_m'"},
                            {"f_solver", "newton", "'f_solver'"},     {"b_solver", "broyden2", "'b_solver'"},
                            {"seq_solver", "picard", "'seq_solver'"}, {"anderson_m", "17", "'anderson_m'"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ModelCfg c;
        cfg_defaults(&c);
        cfg_set(&c, "model", "implicit_mamba2");
        int rc = cfg_set(&c, bad[i][0], bad[i][1]);
        if (!rc) rc = cfg_validate(&c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i][2]), "%s %s: rc %d, '%s'", bad[i][0], bad[i][1], rc,
                 err_msg());
    }
}

int main(void) {
    th_name = "test_implicit";
    bad_solver_keys();
    jacobian_reg("implicit_mamba2");
    jacobian_reg("implicit_llama");
    spectral();
    noise();
    parity("tests/ref/implicit_mamba2.safetensors");
    parity("tests/ref/implicit_llama.safetensors");
    weight_norm_and_memory();
    gradients("implicit_mamba2");
    gradients("implicit_llama");
    ift("implicit_mamba2", "fixed_point_iter");
    ift("implicit_llama", "fixed_point_iter");
    ift("implicit_mamba2", "broyden");
    duality("implicit_mamba2");
    duality("implicit_llama");
    seq_variants();
    return th_done();
}
