/* test_fp_rnn.c: the FPMamba2 layer (src/layers/fp_mamba2.h, spec fp-rnn §3.2) and the vector
 * FP-RNN layer (src/layers/fp_rnn.h, §3.3), and their LMs "fp_mamba2" / "fp_rnn" (lm_fp.c).
 *
 *  - the one-step gradient (Y* / h* held constant, n_backwards 1 and 2, and 3) by finite
 *    differences and the directional test, over concat / symmetric / input-only mixer inputs,
 *    conv on / off (FPMamba2), the gate inside / outside the loop, several mixers;
 *  - spec §1.1 / §10, the key test: FPRNN without hidden-state dependence and with a contractive
 *    Q converges to the explicit dense recurrence
 *        (Λ_t + (I − Λ_t) Q_t) h_t = Λ_t h_{t−1} + (I − Λ_t) Q_t (b_t ⊙ x_t),
 *    solved per token in double here, with λ, b ⊙ x and the mixer input recomputed independently
 *    from the weights and Q_t from mixer_matrix;
 *  - sequential mode (token by token) equals the parallel fixed point on contractive maps;
 *  - bit-identical forward and gradients at two thread counts (2 and 3 in a BLAS build);
 *  - the LMs: step == parallel logits, ~30 AdamW steps decrease the loss on a toy task,
 *    checkpoint round trip, config errors (fp_rnn short_conv 0, bad headdim).
 */
#include "th.h"
#include "gradcheck.h"
#include "fp_testutil.h"
#include "../src/kernels/kernels.h"
#include "../src/layers/fp_mamba2.h"
#include "../src/layers/fp_rnn.h"
#include "../src/train/optim.h"

#define DM 6 /* d_model of the layer tests */

/* ---- one case of either layer ------------------------------------------------------------------ */

typedef struct {
    FptCase b; /* tensors, inputs and buffers (fp_testutil.h) */
    int rnn;   /* 0 = FPMamba2, 1 = FPRNN */
    FpMamba2Cfg c2;
    FpRnnCfg cr;
    FpMamba2W w2, dw2;
    FpRnnW wr, dwr;
    const FpLayerOps *L;  /* the layer interface (fp_layer.h) over ... */
    const void *cfg;      /* ... &c2 or &cr, */
    void *w, *dw;         /* ... &w2 / &dw2 or &wr / &dwr */
} Case;

typedef struct {
    const char *mixer;
    int rank, h_dep, symm, conv, glu, n_back;
    const char *kron_norm;
} Opt;

static void refresh(Case *k) { fp_layer_refresh(k->L, k->cfg, k->w); }

static void case_init(Case *k, int rnn, Opt o, int B, int T, uint64_t seed) {
    memset(k, 0, sizeof *k);
    k->rnn = rnn;
    int rc = rnn ? fp_rnn_cfg_init(&k->cr, DM, 2, 4, 1, o.h_dep, o.symm, o.n_back, 1e-5f, o.mixer, o.rank, "silu", -1,
                                   o.kron_norm)
                 : fp_mamba2_cfg_init(&k->c2, DM, 2, 4, 4, 4, o.conv, o.h_dep, o.symm, o.glu, o.n_back, 1e-5f,
                                      o.mixer, o.rank, "silu", -1, o.kron_norm);
    CHECK(rc == IM_OK, "cfg: %s", err_msg());
    k->L = rnn ? &fp_rnn_layer : &fp_mamba2_layer;
    k->cfg = rnn ? (const void *)&k->cr : (const void *)&k->c2;
    k->w = rnn ? (void *)&k->wr : (void *)&k->w2;
    k->dw = rnn ? (void *)&k->dwr : (void *)&k->dw2;
    FptCase *b = &k->b;
    ptab_init(&b->t);
    fp_layer_add_params(k->L, k->cfg, &b->t, "L", 1.0f);
    fpt_case_params(b, fp_layer_eff_floats(k->L, k->cfg), seed);
    fp_layer_bind(k->L, k->cfg, k->w, &b->t, b->theta, "L", b->eff);
    fp_layer_bind(k->L, k->cfg, k->dw, &b->t, b->dtheta, "L", b->deff);
    fp_layer_post_init(k->L, k->cfg, k->w);
    fpt_case_inputs(b, B, T, DM, 2 * DM, fp_layer_cache_floats(k->L, k->cfg, B, T),
                    fp_layer_scratch_floats(k->L, k->cfg, B, T), seed);
    refresh(k);
}

static void case_free(Case *k) {
    fp_layer_unbind(k->L, k->w);
    fp_layer_unbind(k->L, k->dw);
    fpt_case_free(&k->b);
}

static int fwd_at(Case *k, float *out, float *cache) {
    FptCase *b = &k->b;
    return fp_layer_fwd_at(k->L, k->cfg, k->w, out, b->u, b->ystar, cache, b->scratch, b->B, b->T);
}

static int fwd(Case *k, float *out, const FpSolve *sv, float *cache) {
    FptCase *b = &k->b;
    return fp_layer_fwd(k->L, k->cfg, k->w, out, b->u, sv, cache, b->scratch, b->B, b->T);
}

static void bwd(Case *k) {
    FptCase *b = &k->b;
    fp_layer_bwd(k->L, k->cfg, k->w, k->dw, b->du, b->R, b->u, b->cache, b->scratch, b->B, b->T);
    fp_layer_wn_bwd(k->L, k->cfg, k->w, k->dw);
}

static double loss_at(void *ctx) {
    Case *k = ctx;
    refresh(k);
    CHECK(fwd_at(k, k->b.out, NULL) == IM_OK, "fwd: %s", err_msg());
    return fpt_loss(&k->b);
}

static void bwd_at(void *ctx) {
    Case *k = ctx;
    refresh(k);
    memset(k->b.deff, 0, k->b.neff * sizeof(float));
    CHECK(fwd_at(k, k->b.out, k->b.cache) == IM_OK, "fwd: %s", err_msg());
    bwd(k);
}

static void test_grad(const char *name, int rnn, Opt o, float h) {
    Case k;
    case_init(&k, rnn, o, 2, 5, 11);
    fpt_grad_check(name, &k.b, loss_at, bwd_at, &k, h, 150);
    case_free(&k);
}

static FpOpts tight_opts(int rnn) {
    FpOpts o = fpt_fpo_opts();
    if (rnn) { /* the reference's FPRNN constants: no damping */
        o.step0 = 1.0f;
        o.decay = 1.0f;
    }
    o.quantile = 1.0;
    o.max_iter = 1000;
    o.tol = 1e-5;
    return o;
}

/* ---- spec §1.1 / §10: the dense recurrence -------------------------------------------------------- */

static double sigd(double v) { return 1.0 / (1.0 + exp(-v)); }
static double silud(double v) { return v * sigd(v); }

/* y:(B,T,E) = silu(conv(x)) in double, depthwise, w:(E,W), tap W-1 on the current token */
static void conv_silu_d(double *y, const double *x, const float *w, const float *b, int B, int T, int E, int W) {
    for (int bb = 0; bb < B; bb++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < E; c++) {
                double s = b[c];
                for (int j = 0; j < W; j++) {
                    int tt = t - W + 1 + j;
                    if (tt >= 0) s += (double)w[c * W + j] * x[((size_t)bb * T + tt) * E + c];
                }
                y[((size_t)bb * T + t) * E + c] = silud(s);
            }
}

/* Solve A z = r (n×n, Gaussian elimination with partial pivoting), A and r destroyed. */
static void solve_d(double *A, double *r, double *z, int n) {
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int i = c + 1; i < n; i++)
            if (fabs(A[i * n + c]) > fabs(A[piv * n + c])) piv = i;
        if (piv != c) {
            for (int j = 0; j < n; j++) {
                double tmp = A[c * n + j];
                A[c * n + j] = A[piv * n + j];
                A[piv * n + j] = tmp;
            }
            double tmp = r[c];
            r[c] = r[piv];
            r[piv] = tmp;
        }
        for (int i = c + 1; i < n; i++) {
            double f = A[i * n + c] / A[c * n + c];
            for (int j = c; j < n; j++) A[i * n + j] -= f * A[c * n + j];
            r[i] -= f * r[c];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = r[i];
        for (int j = i + 1; j < n; j++) s -= A[i * n + j] * z[j];
        z[i] = s / A[i * n + i];
    }
}

static void test_dense_recurrence(const char *mixer, int rank, float alpha_bias, double tol) {
    Case k;
    int B = 2, T = 9, E = 2 * DM, D = DM, W = 4;
    Opt o = {mixer, rank, 0, 0, 1, 0, 1, "spectral"};
    case_init(&k, 1, o, B, T, 41);
    /* α = σ(bias) exactly: ‖I − Q‖ = 2α for one reflection (contractive) */
    fpt_set_by_name(&k.b, "proj_alpha", "weight_g", 0.0f);
    fpt_set_by_name(&k.b, "proj_alpha", "bias", alpha_bias);
    refresh(&k);
    FpOpts opts = tight_opts(1);
    FpSolveCtx st;
    FpSolve sv = fpt_solve(&st, &opts, (size_t)B * T * E, B);
    float *hstar = th_alloc((size_t)B * T * E);
    const float *u = k.b.u;
    TH_CHECK(fp_layer_solve(k.L, k.cfg, k.w, hstar, u, &sv, k.b.scratch, B, T) == IM_OK, "solve");
    TH_CHECK(st.tally.converged, "%s: FPRNN solve converged (%d iterations, residual %g)", mixer, st.tally.iters,
             st.tally.best_max);
    /* the prepare part, independently and in double */
    size_t ME = (size_t)B * T * E;
    double *xpre = calloc(ME, sizeof(double)), *xb = calloc(ME, sizeof(double)), *xl = calloc(ME, sizeof(double)),
           *xm = calloc(ME, sizeof(double)), *x = calloc(ME, sizeof(double));
    const FpRnnW *w = &k.wr;
    for (size_t m = 0; m < (size_t)B * T; m++)
        for (int i = 0; i < E; i++) {
            double s = 0;
            for (int j = 0; j < D; j++) s += (double)w->in_proj[(size_t)i * D + j] * u[m * D + j];
            xpre[m * E + i] = s;
        }
    conv_silu_d(x, xpre, w->cx_w, w->cx_b, B, T, E, W);
    conv_silu_d(xb, xpre, w->cb_w, w->cb_b, B, T, E, W);
    conv_silu_d(xl, xpre, w->cl_w, w->cl_b, B, T, E, W);
    conv_silu_d(xm, xpre, w->cm_w, w->cm_b, B, T, E, W);
    float *pf = th_alloc((size_t)E), *Q = th_alloc((size_t)E * E);
    double *A = calloc((size_t)E * E, sizeof(double)), *r = calloc((size_t)E, sizeof(double)),
           *h = calloc((size_t)E, sizeof(double)), *lam = calloc((size_t)E, sizeof(double)),
           *bx = calloc((size_t)E, sizeof(double)), *qb = calloc((size_t)E, sizeof(double));
    float *ref = th_alloc(ME);
    double qdev = 0;
    for (int bb = 0; bb < B; bb++) {
        memset(h, 0, (size_t)E * sizeof(double));
        for (int t = 0; t < T; t++) {
            size_t m = (size_t)bb * T + t;
            for (int i = 0; i < E; i++) {
                double sl = w->lam_b[i], sb = 0;
                for (int j = 0; j < E; j++) {
                    sl += (double)w->lam_w[(size_t)i * E + j] * xl[m * E + j];
                    sb += (double)w->b_w[(size_t)i * E + j] * xb[m * E + j];
                }
                lam[i] = sigd(sl);
                bx[i] = silud(sb) * x[m * E + i];
                pf[i] = (float)xm[m * E + i];
            }
            mixer_matrix(&k.cr.mix, w->mixer, pf, Q);
            for (int i = 0; i < E; i++) {
                double s = 0;
                for (int j = 0; j < E; j++) {
                    s += (double)Q[(size_t)i * E + j] * bx[j];
                    double dq = Q[(size_t)i * E + j] - (i == j);
                    qdev = fmax(qdev, fabs(dq));
                }
                qb[i] = s;
            }
            /* (Λ + (I − Λ) Q) h_t = Λ h_{t−1} + (I − Λ) Q (b ⊙ x) */
            for (int i = 0; i < E; i++) {
                for (int j = 0; j < E; j++) A[(size_t)i * E + j] = (1 - lam[i]) * Q[(size_t)i * E + j];
                A[(size_t)i * E + i] += lam[i];
                r[i] = lam[i] * h[i] + (1 - lam[i]) * qb[i];
            }
            solve_d(A, r, h, E);
            for (int i = 0; i < E; i++) ref[m * E + i] = (float)h[i];
        }
    }
    TH_CHECK(qdev > 1e-2, "%s: Q is not (near) the identity (max |Q − I| %g)", mixer, qdev);
    char nm[96];
    snprintf(nm, sizeof nm, "%s r%d: FPRNN fixed point == dense recurrence", mixer, rank);
    TH_CLOSE(hstar, ref, ME, tol, nm);
    if (getenv("TH_VERBOSE"))
        printf("  %s: %d iterations, err %.3g, |Q-I| %.3g\n", mixer, st.tally.iters, th_rel_err(hstar, ref, ME), qdev);
    free(xpre); free(xb); free(xl); free(xm); free(x); free(A); free(r); free(h); free(lam); free(bx); free(qb);
    free(pf); free(Q); free(ref); free(hstar); free(st.scratch);
    case_free(&k);
}

/* ---- sequential == parallel --------------------------------------------------------------------- */

static void test_sequential(int rnn, Opt op) {
    Case k;
    int B = 3, T = 7;
    case_init(&k, rnn, op, B, T, 21);
    /* a contractive map: a fixed point to compare at, reached to float precision */
    fpt_set_by_name(&k.b, "proj_alpha", "bias", -2.0f);
    fpt_set_by_name(&k.b, "proj_d", "bias", -2.0f);
    refresh(&k);
    FpOpts o = tight_opts(rnn);
    FpSolveCtx st, sst;
    FpSolve sv = fpt_solve(&st, &o, (size_t)B * T * k.b.E, B), ssv = fpt_solve(&sst, &o, (size_t)B * k.b.E, B);
    TH_CHECK(fwd(&k, k.b.out, &sv, NULL) == IM_OK, "fwd");
    TH_CHECK(st.tally.converged, "%s: parallel solve converged (%d iterations, residual %g)", op.mixer,
             st.tally.iters, st.tally.best_max);
    size_t nst = fp_layer_state_floats(k.L, k.cfg, B), nss = fp_layer_step_scratch_floats(k.L, k.cfg, B);
    float *state = th_alloc(nst), *ss = th_alloc(nss);
    float *ut = th_alloc((size_t)B * DM), *ot = th_alloc((size_t)B * DM), *seq = th_alloc((size_t)B * T * DM);
    for (int t = 0; t < T; t++) {
        fpt_get_token(ut, k.b.u, B, T, t, DM);
        int rc = fp_layer_step(k.L, k.cfg, k.w, ot, ut, state, &ssv, ss, B);
        TH_CHECK(rc == IM_OK, "step");
        fpt_put_token(seq, ot, B, T, t, DM);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s %s conv %d glu %d: sequential == parallel", rnn ? "fp_rnn" : "fp_mamba2", op.mixer,
             op.conv, op.glu);
    TH_CLOSE(seq, k.b.out, (size_t)B * T * DM, 1e-3, nm);
    TH_CHECK(sst.tally.solves == T && sst.tally.iters >= T, "per-token iterations counted (%d over %d)",
             sst.tally.iters, sst.tally.solves);
    free(state); free(ss); free(ut); free(ot); free(seq); free(st.scratch); free(sst.scratch);
    case_free(&k);
}

/* ---- threads ------------------------------------------------------------------------------------ */

static void test_threads(int rnn, Opt op) {
    Case k;
    int B = 4, T = 9;
    case_init(&k, rnn, op, B, T, 31);
    FptCase *b = &k.b;
    float *o1 = th_alloc((size_t)B * T * DM), *d1 = th_alloc(b->t.total);
    FpOpts o = tight_opts(rnn);
    o.max_iter = 20;
    FpSolveCtx st;
    FpSolve sv = fpt_solve(&st, &o, (size_t)B * T * b->E, B);
    int threads = k_get_threads(), t0 = th_thread_base();
    for (int run = 0; run < 2; run++) {
        th_bitid_threads(t0 + run);
        memset(b->dtheta, 0, b->t.total * sizeof(float));
        memset(b->deff, 0, b->neff * sizeof(float));
        TH_CHECK(fwd(&k, run ? b->out : o1, &sv, b->cache) == IM_OK, "fwd");
        bwd(&k);
        if (!run) memcpy(d1, b->dtheta, b->t.total * sizeof(float));
    }
    th_threads_restore(threads);
    TH_CHECK(!memcmp(o1, b->out, (size_t)B * T * DM * sizeof(float)), "%s: forward bit-identical at %d and %d threads",
             rnn ? "fp_rnn" : "fp_mamba2", t0, t0 + 1);
    TH_CHECK(!memcmp(d1, b->dtheta, b->t.total * sizeof(float)), "%s: gradients bit-identical at %d and %d threads",
             rnn ? "fp_rnn" : "fp_mamba2", t0, t0 + 1);
    free(o1); free(d1); free(st.scratch);
    case_free(&k);
}

/* ---- the LMs ------------------------------------------------------------------------------------ */

static void test_model(const char *name) {
    int rnn = !strcmp(name, "fp_rnn");
    const char *kv[] = {"model", name, "vocab_size", "7", "d_model", "8", "n_layer", "2", "d_state", "4",
                        "headdim", "4", "fp_threshold", "1e-5", "fp_eval_cap", "3000", "mixer_type", "householder",
                        "short_conv", "1", "fp_step0", rnn ? "1" : "0.99", "fp_decay", rnn ? "1" : "0.9",
                        "fp_outlier_q", "0.1", NULL};
    Model m;
    TH_CHECK(fpt_make_model(&m, kv) == IM_OK, "%s create: %s", name, err_msg());
    model_init_params(&m, 5);
    fpt_model_contractive(&m);
    float *par = th_alloc((size_t)FPT_B * FPT_T * m.V);
    fpt_model_seq_vs_par(&m, name, par);
    fpt_model_ckpt_roundtrip(&m, name, "/tmp/implicit_test_fp_rnn.safetensors", par);
    /* training on the toy task (next id = id + 1 mod 7) with the library's AdamW */
    int tg[FPT_B * FPT_T];
    fpt_targets(tg);
    float loss;
    m.training = 1;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    oc.lr = 1e-2f;
    AdamW opt;
    TH_CHECK(adamw_init(&opt, &m, &oc) == IM_OK, "adamw init");
    float first = 0, last = 0;
    int ok = 1;
    for (int s = 0; s < 30; s++) {
        model_zero_grad(&m);
        m.train_step = s;
        if (model_fwd(&m, fpt_ids, tg, FPT_B, FPT_T, &loss) != IM_OK || !isfinite(loss)) { ok = 0; break; }
        model_bwd(&m);
        adamw_step(&opt, &m, oc.lr);
        if (s == 0) first = loss;
        last = loss;
    }
    TH_CHECK(ok, "%s: training forward failed: %s", name, err_msg());
    TH_CHECK(last < 0.5f * first, "%s: 30 AdamW steps: loss %.4f -> %.4f", name, first, last);
    TH_CHECK(m.fp_iters >= 1 && m.fp_step_max == 16, "%s: diagnostics (iters %g, cap %g)", name, m.fp_iters,
             m.fp_step_max);
    if (getenv("TH_VERBOSE")) printf("  %s: loss %.4f -> %.4f, fp iters %.1f\n", name, first, last, m.fp_iters);
    adamw_free(&opt);
    model_free(&m);
    free(par);
}

/* The LM with another row of the solver table (fp_solver): its fixed point, reached by another
 * iteration, gives the logits of the default solver's, in parallel and token by token. */
static void test_model_solver(const char *name, const char *solver) {
    const char *kv[] = {"model", name, "vocab_size", "7", "d_model", "8", "n_layer", "2", "d_state", "4",
                        "headdim", "4", "fp_threshold", "1e-6", "fp_eval_cap", "3000", "mixer_type", "householder",
                        "short_conv", "1", "fp_solver", solver, NULL};
    const char *kv0[sizeof kv / sizeof kv[0]];
    memcpy(kv0, kv, sizeof kv);
    kv0[20] = NULL; /* the same without fp_solver: the FixedPointOptimizer */
    Model m, m0;
    TH_CHECK(fpt_make_model(&m, kv) == IM_OK && fpt_make_model(&m0, kv0) == IM_OK, "%s create: %s", name, err_msg());
    model_init_params(&m, 5);
    model_init_params(&m0, 5);
    fpt_model_contractive(&m);
    fpt_model_contractive(&m0);
    size_t n = (size_t)FPT_B * FPT_T * m.V;
    float *par = th_alloc(n), *par0 = th_alloc(n);
    char nm[96];
    snprintf(nm, sizeof nm, "%s with %s", name, solver);
    fpt_model_seq_vs_par(&m, nm, par);
    fpt_model_seq_vs_par(&m0, name, par0);
    snprintf(nm, sizeof nm, "%s: %s logits == fixed_point_optimizer logits", name, solver);
    TH_CLOSE(par, par0, n, 1e-3, nm);
    model_free(&m);
    model_free(&m0);
    free(par);
    free(par0);
}

static void test_config_errors(void) {
    Model m;
    const char *kv1[] = {"model", "fp_rnn", "vocab_size", "7", "d_model", "8", "short_conv", "0", NULL};
    int rc = fpt_make_model(&m, kv1);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "short_conv"), "fp_rnn short_conv 0 rejected naming the key (%s)",
             err_msg());
    if (rc == IM_OK) model_free(&m);
    const char *kv2[] = {"model", "fp_rnn", "vocab_size", "7", "d_model", "8", "short_conv", "-1", NULL};
    rc = fpt_make_model(&m, kv2);
    TH_CHECK(rc == IM_OK, "fp_rnn short_conv -1 = on (%s)", err_msg());
    if (rc == IM_OK) model_free(&m);
    const char *kv3[] = {"model", "fp_mamba2", "vocab_size", "7", "d_model", "8", "headdim", "5", NULL};
    rc = fpt_make_model(&m, kv3);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "headdim"), "fp_mamba2 bad headdim rejected (%s)", err_msg());
    if (rc == IM_OK) model_free(&m);
}

int main(void) {
    th_name = "fp_rnn";
    /* FPMamba2 (rnn = 0): mixer, rank, h_dep, symm, conv, glu, n_back, kron_norm */
    test_grad("m2 householder r2 concat", 0, (Opt){"householder", 2, 1, 0, 0, 0, 1, NULL}, 1e-2f);
    test_grad("m2 householder symm conv n_back 2", 0, (Opt){"householder", 1, 1, 1, 1, 0, 2, NULL}, 3e-3f);
    test_grad("m2 dplr x-only glu-in-loop", 0, (Opt){"dplr", 2, 0, 0, 0, 1, 1, NULL}, 3e-3f);
    /* Kronecker's row normalisation is discontinuous where a diagonal of L crosses 0: a small step */
    test_grad("m2 kronecker conv n_back 2", 0, (Opt){"kronecker", 1, 1, 0, 1, 0, 2, NULL}, 1e-3f);
    test_grad("m2 householder conv glu n_back 3", 0, (Opt){"householder", 1, 1, 0, 1, 1, 3, NULL}, 1e-3f);
    /* FPRNN (rnn = 1) */
    test_grad("rnn householder concat", 1, (Opt){"householder", 1, 1, 0, 1, 0, 1, NULL}, 1e-2f);
    test_grad("rnn householder r2 concat n_back 2", 1, (Opt){"householder", 2, 1, 0, 1, 0, 2, NULL}, 3e-3f);
    test_grad("rnn dplr symm n_back 2", 1, (Opt){"dplr", 2, 1, 1, 1, 0, 2, NULL}, 3e-3f);
    test_grad("rnn kronecker spectral x-only", 1, (Opt){"kronecker", 1, 0, 0, 1, 0, 1, "spectral"}, 1e-3f);
    test_grad("rnn selectivedense n_back 3", 1, (Opt){"selectivedense", 1, 1, 0, 1, 0, 3, NULL}, 1e-3f);
    /* spec §1.1 / §10 */
    test_dense_recurrence("householder", 1, -1.5f, 1e-5);
    test_dense_recurrence("householder", 2, -2.0f, 1e-5);
    test_dense_recurrence("selectivedense", 1, 0.0f, 5e-5);
    /* sequential == parallel */
    test_sequential(0, (Opt){"householder", 2, 1, 0, 0, 0, 1, NULL});
    test_sequential(0, (Opt){"kronecker", 1, 1, 0, 1, 1, 2, NULL});
    test_sequential(1, (Opt){"householder", 2, 1, 0, 1, 0, 1, NULL});
    test_sequential(1, (Opt){"kronecker", 1, 1, 1, 1, 0, 2, "spectral"});
    test_threads(0, (Opt){"kronecker", 1, 1, 0, 1, 0, 2, NULL});
    test_threads(1, (Opt){"householder", 2, 1, 0, 1, 0, 2, NULL});
    test_model("fp_mamba2");
    test_model("fp_rnn");
    test_model_solver("fp_rnn", "anderson");
    test_model_solver("fp_mamba2", "broyden");
    test_config_errors();
    return th_done();
}
