/* test_convergence.c: the fixed-point diagnostics of the implicit models, where the answer is known.
 * - convergence share: a contractive map solved to its tolerance has share 1 in the training
 *   solve, the evaluation loop and the sequential solve; a cap below convergence has share 0
 * - fixed-point gap (eval_gap): on a contractive map the training forward and the tight solve give
 *   the same loss and accuracy (gap ≈ 0); with the training forward capped at one call they differ
 * - converge-or-extend (f_extend_max_iter): on a contractive map with a cap at which some sequences
 *   of the batch have reached f_tol and some have not, the extended solve brings every sequence to
 *   f_tol and gives the loss of the solve with the large cap, dropout masks included
 * - the sequential solve stops at its own cap (eval_seq_f_max_iter), in evaluation and model_step
 * - the trainer logs the share per step and a "gap" record per evaluation (length, p)
 */
#include <math.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/io/keyjson.h"
#include "../src/train/evaluate.h"
#include "../src/train/trainer.h"
#include "th.h"

enum { LEN = 8, N_EVAL = 8 };

static void make_task_cfg(TaskCfg *t) {
    task_cfg_defaults(t);
    keytab_set(&task_keytab, t, "group", "S3");
    keytab_set(&task_keytab, t, "train_len", "8");
    keytab_set(&task_keytab, t, "eval_lens", "8");
    keytab_set(&task_keytab, t, "eval_ps", "0.5");
    keytab_set(&task_keytab, t, "eval_samples", "8");
}

static void model_cfg(ModelCfg *c, int vocab, const char *const *kv) {
    cfg_defaults(c);
    static const char *const base[] = {"model", "implicit_mamba2", "d_model", "16", "n_layer", "1", "d_state", "4",
                                       "headdim", "8", "tau", "0.8", NULL};
    for (int i = 0; base[i]; i += 2) CHECK(cfg_set(c, base[i], base[i + 1]) == 0, "%s", err_msg());
    for (int i = 0; kv && kv[i]; i += 2) CHECK(cfg_set(c, kv[i], kv[i + 1]) == 0, "%s", err_msg());
    c->vocab_size = vocab;
}

/* Shrink the weight-norm gains of the mixer projections: the map becomes a contraction (as in
 * test_implicit; its spectral radius at z* is checked there to be below 1). */
static void contract(Model *m) {
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        if (strstr(p->name, "_g") && (strstr(p->name, "in_proj") || strstr(p->name, "out_proj")))
            for (size_t j = 0; j < p->numel; j++) m->params[p->offset + j] *= 0.3f;
    }
}

static void make(Model *m, Task *t, const char *const *kv, int contractive) {
    ModelCfg c;
    model_cfg(&c, task_vocab(t), kv);
    CHECK(model_create(m, &c) == 0, "%s", err_msg());
    model_init_params(m, 3);
    if (contractive) contract(m);
}

/* The share of the training solve on one batch. */
static double train_share(Model *m, Task *t) {
    int ids[4 * LEN], tg[4 * LEN];
    task_train_batch(t, 0, 0, 4, ids, tg);
    m->training = 1;
    m->train_step = 0;
    float loss;
    TH_CHECK(model_fwd(m, ids, tg, 4, LEN, &loss) == 0, "training forward: %s", err_msg());
    m->training = 0;
    return m->fp_conv;
}

static void share(Task *t) {
    Model m;
    /* contractive, solved far below its tolerance: every sample reaches it in every solve */
    static const char *const conv[] = {"f_max_iter", "300", "f_tol", "1e-4", "eval_f_max_iter", "300",
                                       "eval_seq_f_max_iter", "0", NULL};
    make(&m, t, conv, 1);
    double s = train_share(&m, t);
    TH_CHECK(s == 1.0, "contractive map, training solve: share %g, want 1", s);
    /* batch 1: the evaluation loop's batch-wide stopping ratio is then each sample's own */
    EvalRow r;
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 1, EVAL_BOTH, &r) == 0, "%s", err_msg());
    TH_CHECK(r.conv_sim == 1.0 && r.conv_seq == 1.0, "contractive map, evaluation: share sim %g seq %g, want 1", r.conv_sim,
             r.conv_seq);
    TH_CHECK(r.agree == 1.0, "contractive map: duality %g, want 1", r.agree);
    printf("  contractive: share train %.2f, sim %.2f, seq %.2f, agreement %.3f\n", s, r.conv_sim, r.conv_seq, r.agree);
    model_free(&m);
    /* the same map capped at 2 calls with a tolerance it cannot reach in 2 */
    static const char *const cap[] = {"f_max_iter", "2", "f_tol", "1e-7", "eval_f_max_iter", "2", "eval_seq_f_max_iter", "0", NULL};
    make(&m, t, cap, 1);
    s = train_share(&m, t);
    TH_CHECK(s == 0.0, "capped map, training solve: share %g, want 0", s);
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_BOTH, &r) == 0, "%s", err_msg());
    TH_CHECK(r.conv_sim == 0.0 && r.conv_seq == 0.0, "capped map, evaluation: share sim %g seq %g, want 0", r.conv_sim,
             r.conv_seq);
    printf("  capped at 2: share train %.2f, sim %.2f, seq %.2f\n", s, r.conv_sim, r.conv_seq);
    /* explicit rows and a cap of 1 (the final call alone) have no tolerance: no share */
    m.cfg.eval_f_max_iter = 1;
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_SIMULTANEOUS, &r) == 0, "%s", err_msg());
    TH_CHECK(r.conv_sim == -1 && r.conv_seq == -1, "cap 1: share %g %g, want none (-1)", r.conv_sim, r.conv_seq);
    model_free(&m);
    ModelCfg c;
    model_cfg(&c, task_vocab(t), NULL);
    cfg_set(&c, "model", "mamba2");
    CHECK(model_create(&m, &c) == 0, "%s", err_msg());
    model_init_params(&m, 3);
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_BOTH, &r) == 0, "%s", err_msg());
    TH_CHECK(r.conv_sim == -1 && r.conv_seq == -1, "explicit model: share %g %g, want none (-1)", r.conv_sim, r.conv_seq);
    EvalGap g;
    TH_CHECK(eval_gap(&m, t, LEN, 0.5f, N_EVAL, 4, 1e-3, 64, &g) == IM_EINVAL, "gap of an explicit model must be refused");
    model_free(&m);
}

/* The evaluation tolerance is min(f_tol, eval_f_tol): the default 0.01 tightens a model trained at
 * the reference's 0.05, and never loosens a tighter f_tol. */
static void eval_tolerance(Task *t) {
    Model m;
    static const char *const kv[] = {"f_tol", "0.05", "eval_f_max_iter", "300", NULL};
    make(&m, t, kv, 1);
    EvalRow loose, dflt, tight;
    m.cfg.eval_f_tol = 0;   /* = f_tol */
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_SIMULTANEOUS, &loose) == 0, "%s", err_msg());
    m.cfg.eval_f_tol = 0.01;
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_SIMULTANEOUS, &dflt) == 0, "%s", err_msg());
    m.cfg.f_tol = 0.001;    /* tighter than eval_f_tol: f_tol wins */
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_SIMULTANEOUS, &tight) == 0, "%s", err_msg());
    TH_CHECK(loose.iters < dflt.iters && dflt.iters < tight.iters, "iterations at tol 0.05 / 0.01 / 0.001: %g %g %g",
             loose.iters, dflt.iters, tight.iters);
    printf("  evaluation loop iterations at tol 0.05 / 0.01 (default) / 0.001: %.0f / %.0f / %.0f\n", loose.iters,
           dflt.iters, tight.iters);
    model_free(&m);
}

/* The sequential solve has its own cap (eval_seq_f_max_iter, at most the evaluation cap; 0 = the
 * evaluation cap): at a tolerance no solve reaches, every token's solve runs to exactly that cap
 * (loop, Anderson, Broyden), while the simultaneous pass runs to its own; 1 and negative caps are
 * refused. */
static void seq_cap(Task *t) {
    Model m;
    static const char *const kv[] = {"f_tol", "1e-30", "eval_f_max_iter", "40", "eval_seq_f_max_iter", "5", NULL};
    make(&m, t, kv, 1);
    EvalRow r;
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_BOTH, &r) == 0, "%s", err_msg());
    /* the loop counts its iterations before the final call: cap N reads N - 1 */
    TH_CHECK(r.iters <= 5 && r.iters >= 4 && r.seq_max_iter == 5 && r.max_iter == 40, "sequential cap 5: %g iterations "
             "per token (cap %d, simultaneous cap %d)", r.iters, r.seq_max_iter, r.max_iter);
    TH_CHECK(eval_run(&m, t, LEN, 0.5f, N_EVAL, 4, EVAL_SIMULTANEOUS, &r) == 0, "%s", err_msg());
    TH_CHECK(r.iters <= 40 && r.iters >= 39, "simultaneous pass beside a sequential cap 5: %g iterations, want its own "
             "cap 40", r.iters);
    static const char *const solvers[] = {"loop", "anderson", "broyden"};
    for (int s = 0; s < 3; s++) {   /* generation's path: model_step, one token at a time */
        cfg_set(&m.cfg, "seq_solver", solvers[s]);
        static const int caps[3] = {5, 0, 100}, wants[3] = {5, 40, 40};   /* 0 and above: the evaluation cap */
        for (int k = 0; k < 3; k++) {
            m.cfg.eval_seq_f_max_iter = caps[k];
            TH_CHECK(model_state_init(&m, 1) == 0, "%s", err_msg());
            int want = wants[k], id = 1;
            float logits[64];
            TH_CHECK(task_vocab(t) <= 64, "vocabulary %d", task_vocab(t));
            for (int i = 0; i < 3; i++) {
                TH_CHECK(model_step(&m, &id, logits) == 0, "%s", err_msg());
                TH_CHECK(m.fp_iters <= want && m.fp_iters >= want - 1, "seq_solver %s, sequential cap %d: token %d took %g "
                         "iterations", solvers[s], want, i, m.fp_iters);
            }
        }
    }
    printf("  sequential cap 5 / 0 / 100 (eval cap 40): every token at its cap, loop, Anderson and Broyden\n");
    model_free(&m);
    ModelCfg c;
    model_cfg(&c, task_vocab(t), NULL);
    TH_CHECK(cfg_set(&c, "eval_seq_f_max_iter", "-1") != 0 || cfg_validate(&c) == IM_EINVAL,
             "eval_seq_f_max_iter -1 must be refused");
    TH_CHECK(cfg_set(&c, "eval_seq_f_max_iter", "1") == 0 && cfg_validate(&c) == IM_EINVAL,
             "eval_seq_f_max_iter 1 must be refused");
    TH_CHECK(strstr(err_msg(), "eval_seq_f_max_iter") != NULL, "the refusal names the key: %s", err_msg());
}

static void gap(Task *t) {
    Model m;
    EvalGap g;
    /* contractive: the training forward (solve to 1e-6, then 4 phantom steps at the fixed point)
     * and the tight solve land on the same z*: the same loss and argmaxes */
    static const char *const conv[] = {"f_max_iter", "300", "f_tol", "1e-6", "grad", "4", NULL};
    make(&m, t, conv, 1);
    TH_CHECK(eval_gap(&m, t, LEN, 0.5f, N_EVAL, 1, 1e-6, 400, &g) == 0, "%s", err_msg());
    double dl = g.train_cap.loss - g.tight.loss, da = g.train_cap.tok_acc - g.tight.tok_acc;
    /* both solves stop within 1e-6 of z* (relative); the loss moves by far less than 1e-4 */
    TH_CHECK(fabs(dl) < 1e-4 && da == 0, "contractive map: gap loss %g, tok_acc %g, want ≈ 0", dl, da);
    TH_CHECK(g.train_cap.conv_sim == 1 && g.tight.conv_sim == 1, "contractive: shares %g %g", g.train_cap.conv_sim,
             g.tight.conv_sim);
    TH_CHECK(m.cfg.f_tol == 1e-6 && m.cfg.eval_f_tol == 0.01 && m.cfg.eval_f_max_iter == 0 && m.eval_solve == 0,
             "eval_gap must restore the model");
    printf("  contractive: gap loss %.2e, tok acc %.4f, tight solve %.1f iterations\n", dl, da, g.tight.iters);
    model_free(&m);
    /* the same map trained at one call (f_max_iter 0, one undamped phantom step: z = f(0)):
     * the training forward is not the fixed point, and the two answers differ */
    static const char *const cap[] = {"f_max_iter", "0", "grad", "1", "tau", "1", "eval_f_max_iter", "4", NULL};
    make(&m, t, cap, 1);
    TH_CHECK(eval_gap(&m, t, LEN, 0.5f, N_EVAL, 1, 1e-6, 400, &g) == 0, "%s", err_msg());
    dl = g.train_cap.loss - g.tight.loss;
    TH_CHECK(fabs(dl) > 1e-3, "capped map: gap loss %g, want > 1e-3", dl);
    TH_CHECK(g.train_cap.conv_sim == -1 && g.tight.conv_sim == 1, "capped: shares %g %g", g.train_cap.conv_sim,
             g.tight.conv_sim);
    printf("  capped at 1 call: gap loss %.4f (training forward %.4f, tight %.4f)\n", dl, g.train_cap.loss, g.tight.loss);
    model_free(&m);
}

/* The training loss of one batch with dropout masks drawn from a fixed stream; *share, *ext, *iters. */
static double train_loss(Model *m, Task *t, double *share, double *ext, double *iters) {
    int ids[4 * LEN], tg[4 * LEN];
    task_train_batch(t, 0, 0, 4, ids, tg);
    m->training = 1;
    m->train_step = 0;
    rng_seed(&m->rng, 99, 7);
    float loss = 0;
    TH_CHECK(model_fwd(m, ids, tg, 4, LEN, &loss) == 0, "training forward: %s", err_msg());
    m->training = 0;
    *share = m->fp_conv, *ext = m->fp_extended, *iters = m->fp_iters;
    return loss;
}

static void extend(Task *t) {
    Model m;
    double share = 0, ext, iters;
    char cap[16] = "";
    /* the first cap at which the batch is partly converged */
    for (int k = 2; k < 200 && !(share > 0 && share < 1); k++) {
        snprintf(cap, sizeof cap, "%d", k);
        const char *const kv[] = {"f_max_iter", cap, "f_tol", "1e-5", "grad", "1", "backbone_dropout", "0.2", NULL};
        make(&m, t, kv, 1);
        train_loss(&m, t, &share, &ext, &iters);
        TH_CHECK(ext == -1, "the rule is off: extended share %g, want -1", ext);
        model_free(&m);
    }
    TH_CHECK(share > 0 && share < 1, "no cap gives a partly converged batch (share %g)", share);
    double missed = 1 - share;
    const char *const big[] = {"f_max_iter", "400", "f_tol", "1e-5", "grad", "1", "backbone_dropout", "0.2", NULL};
    make(&m, t, big, 1);
    double want = train_loss(&m, t, &share, &ext, &iters), big_iters = iters;
    TH_CHECK(share == 1, "cap 400: share %g", share);
    model_free(&m);
    const char *const kv[] = {"f_max_iter", cap, "f_extend_max_iter", "400", "f_tol", "1e-5", "grad", "1",
                              "backbone_dropout", "0.2", NULL};
    make(&m, t, kv, 1);
    double got = train_loss(&m, t, &share, &ext, &iters);
    TH_CHECK(share == 1, "extended: share %g, want 1", share);
    TH_CHECK(fabs(ext - missed) < 1e-12, "extended share %g, want the missed share %g", ext, missed);
    TH_CHECK(iters > atoi(cap) && iters <= 400, "extended: %g iterations", iters);
    /* the sequences that stopped at the small cap are within f_tol of z*, not at the large cap's
     * point: the losses agree to about f_tol, far inside 1e-3 */
    TH_CHECK(fabs(got - want) < 1e-3, "extended loss %.6f vs cap 400 %.6f", got, want);
    printf("  converge-or-extend: cap %s leaves %.0f%% above tol; extended (%g iterations) loss %.6f, cap 400 (%g) %.6f\n",
           cap, 100 * missed, iters, got, big_iters, want);
    model_free(&m);
    ModelCfg c;
    model_cfg(&c, task_vocab(t), NULL);
    c.f_extend_max_iter = c.f_max_iter;
    TH_CHECK(cfg_validate(&c) == IM_EINVAL, "f_extend_max_iter <= f_max_iter must be refused");
}

/* A short run: every logged step carries fp_conv, every evaluation a gap record. */
static void trainer_logs(Task *t) {
    char root[] = "/tmp/test_convergence_XXXXXX";
    TH_CHECK(mkdtemp(root) != NULL, "mkdtemp");
    ModelCfg m;
    TaskCfg tc;
    TrainCfg r;
    make_task_cfg(&tc);
    static const char *const kv[] = {"f_max_iter", "8", "grad", "2", NULL};
    model_cfg(&m, task_vocab(t), kv);
    train_cfg_defaults(&r);
    snprintf(r.out, sizeof r.out, "%s/run", root);
    r.steps = 6;
    r.batch = 4;
    r.warmup = 1;
    r.log_every = 2;
    r.eval_every = 3;
    r.ckpt_every = 0;
    r.gap_samples = 4;
    snprintf(r.progress, sizeof r.progress, "none");
    Trainer tr;
    TH_CHECK(trainer_init(&tr, &m, &tc, &r) == 0, "%s", err_msg());
    TH_CHECK(trainer_run(&tr, 0) == 0, "%s", err_msg());
    trainer_free(&tr);
    char path[256];
    snprintf(path, sizeof path, "%s/run/log.jsonl", root);
    FILE *f = fopen(path, "rb");
    char *log = NULL;
    size_t n = 0;
    TH_CHECK(f && fs_read_all(f, 1 << 20, &log, &n) == 0, "read %s", path);
    if (f) fclose(f);
    int train = 0, conv = 0, gaps = 0;
    for (char *line = log; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (strstr(line, "\"type\":\"train\"") || strstr(line, "\"type\": \"train\"")) train++, conv += strstr(line, "\"fp_conv\"") != NULL;
        if ((strstr(line, "\"type\":\"gap\"") || strstr(line, "\"type\": \"gap\"")) && strstr(line, "\"tight\"") &&
            strstr(line, "\"tok_acc_tight\"")) gaps++;
        line = nl ? nl + 1 : NULL;
    }
    TH_CHECK(train == 3 && conv == 3, "train records %d, with fp_conv %d (want 3, 3)", train, conv);
    TH_CHECK(gaps == 2, "gap records %d (want 2: step 3 and the final evaluation)", gaps);
    free(log);
    /* a bad tight-solve tolerance is a config error, before any work */
    r.gap_tol = 0;
    TH_CHECK(train_cfg_validate(&r) == IM_EINVAL, "gap_tol 0 must be refused");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    TH_CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    th_name = "test_convergence";
    k_set_threads(1);
    TaskCfg tc;
    make_task_cfg(&tc);
    Task *t;
    CHECK(task_create(&t, &tc) == 0, "%s", err_msg());
    share(t);
    eval_tolerance(t);
    seq_cap(t);
    gap(t);
    extend(t);
    trainer_logs(t);
    task_free(t);
    return th_done();
}
