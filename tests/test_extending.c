/* test_extending: the recipes of docs/extending.md hold.
 *
 * 1. A task family written only here (a TaskOps row, "echo": the target of each token is the token
 *    itself) runs through the generic task code exactly as a listed family does: config checks,
 *    default eval lengths, batches, determinism, describe, scoring metric, token names.
 * 2. The tables: every listed task, mixer and solver name round-trips, every solver has a row,
 *    and the messages for an unknown name list the table's names.
 * 3. A solver written only here (a row FpSolverOps, "plain": max_iter undamped steps) solves a
 *    map through fp_solve_ops, as the implicit LMs' solves do, and is the solve of a Fixed-Point
 *    RNN layer (fp_rnn, whole sequence and token by token): it must give, bit for bit, what the
 *    table's FixedPointOptimizer gives with its damping and early stop turned off (step 1, decay
 *    1, threshold 0), which is the same iteration.
 * 4. The recipes name real files: every `src/...`, `tests/...` or `docs/...` path written in
 *    docs/extending.md exists, so the document cannot drift from the tree unnoticed.
 * Runs from the repository root (tests/run.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/core/check.h"
#include "../src/data/task_impl.h"
#include "../src/core/rng.h"
#include "../src/fixedpoint/fp.h"
#include "../src/layers/fp_rnn.h"
#include "../src/layers/mixer.h"
#include "../src/models/model.h"
#include "th.h"

/* ---- the echo task: letters 0..alphabet-1, target = input ---------------------------------------- */

static int echo_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    (void)ops, (void)kind;
    if (c->alphabet < 2) return err_set(IM_EINVAL, "task echo: key 'alphabet' must be >= 2 (got %d)", c->alphabet);
    return IM_OK;
}

static int echo_create(Task *t) {
    t->V = t->cfg.alphabet;
    return IM_OK;
}

static void echo_evals(Task *t) {
    task_add_len(t, t->cfg.train_len);
    task_add_len(t, 2 * t->cfg.train_len);
}

static int echo_train_len(const Task *t) { return t->cfg.train_len; }

static void echo_row(const Task *t, Rng *r, int T, int *ids, int *tg) {
    for (int i = 0; i < T; i++) ids[i] = tg[i] = (int)rng_below(r, (uint32_t)t->V);
}

static void echo_eval(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)len, (void)p, (void)index;
    echo_row(t, r, T, ids, tg);
}

static int echo_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "echo: %d letters, length %d", t->V, t->cfg.train_len);
}

static int echo_token_str(const Task *t, int id, char *buf, size_t cap) {
    (void)t;
    return snprintf(buf, cap, "e%d", id);
}

static const TaskOps echo_ops = {
    .name = "echo", .help = "echo (a test's)", .metric = "tok_acc", .def_min_len = 1, .def_max_len = 8,
    .def_context = 16, .def_modulus = 2, .check = echo_check, .create = echo_create, .default_evals = echo_evals,
    .seq_len = task_len_as_is, .train_seq_len = echo_train_len, .train_row = echo_row, .eval_row = echo_eval,
    .describe = echo_describe, .token_str = echo_token_str,
};

static void test_task_row(void) {
    TaskCfg c;
    task_cfg_defaults(&c);
    c.alphabet = 5;
    c.train_len = 12;
    Task *t = NULL;
    int rc = task_create_ops(&t, &echo_ops, -1, &c);
    TH_CHECK(rc == IM_OK && t, "echo task: %s", rc ? err_msg() : "no task");
    if (!t) return;
    TH_CHECK(task_vocab(t) == 5 && task_train_seq_len(t) == 12 && task_seq_len(t, 30) == 30, "echo sizes");
    TH_CHECK(!strcmp(task_len_metric(t), "tok_acc") && task_chance(t) == 0.0 && task_eval_count(t, 4) == -1,
             "echo metric / chance / count");
    const int *lens;
    int n = task_eval_lens(t, &lens);
    TH_CHECK(n == 2 && lens[0] == 12 && lens[1] == 24, "echo default eval lengths (%d)", n);
    int ids[3 * 12], tg[3 * 12], ids2[3 * 12], tg2[3 * 12], same = 1, in_range = 1;
    task_train_batch(t, 7, 0, 3, ids, tg);
    task_train_batch(t, 7, 0, 3, ids2, tg2);
    for (int i = 0; i < 36; i++) {
        same &= ids[i] == ids2[i] && tg[i] == ids[i];
        in_range &= ids[i] >= 0 && ids[i] < 5;
    }
    TH_CHECK(same && in_range, "echo train rows: deterministic, in range, target = input");
    task_train_batch(t, 8, 0, 3, ids2, tg2);
    TH_CHECK(memcmp(ids, ids2, sizeof ids), "echo: another step gives other rows");
    task_eval_batch(t, 12, -1.0f, 0, 3, ids, tg);
    TH_CHECK(tg[0] == ids[0] && tg[35] == ids[35], "echo eval rows");
    char buf[64];
    task_describe(t, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "echo: 5 letters, length 12"), "echo describe: '%s'", buf);
    task_token_str(t, 3, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "e3"), "echo token 3: '%s'", buf);
    task_token_str(t, 9, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "<9?>"), "echo token out of range: '%s' (the generic guard)", buf);
    task_free(t);
    /* the shared checks run before the row's, the row's own after them */
    c.train_len = 0;
    TH_CHECK(task_create_ops(&t, &echo_ops, -1, &c) == IM_EINVAL && strstr(err_msg(), "train_len"), "echo shared check");
    c.train_len = 12;
    c.alphabet = 1;
    TH_CHECK(task_create_ops(&t, &echo_ops, -1, &c) == IM_EINVAL && strstr(err_msg(), "alphabet"), "echo own check");
}

/* ---- the tables -------------------------------------------------------------------------------- */

static void test_tables(void) {
    char names[512];
    snprintf(names, sizeof names, "%s", task_names());
    int n = 0;
    for (char *tok = strtok(names, " |"); tok; tok = strtok(NULL, " |"), n++)
        TH_CHECK(!strcmp(task_kind_name(n), tok), "task %d is '%s', listed as '%s'", n, task_kind_name(n), tok);
    TH_CHECK(n == TASK_N_KIND, "task_names lists %d of %d families", n, TASK_N_KIND);
    TaskCfg c;
    task_cfg_defaults(&c);
    snprintf(c.task, sizeof c.task, "nosuch");
    char want[640];
    snprintf(want, sizeof want, "task key 'task': unknown task 'nosuch' (%s)", task_names());
    TH_CHECK(task_cfg_validate(&c) == IM_EINVAL && !strcmp(err_msg(), want), "unknown task: '%s'", err_msg());
    TH_CHECK(strstr(mixer_type_names(), "householder | dplr") == mixer_type_names(), "mixer names: '%s'",
             mixer_type_names());
    /* solvers: each use lists its own, every listed name parses back, every solver has a row */
    TH_CHECK(!strcmp(fp_solver_names(FP_USE_SOLVE), "fixed_point_iter | anderson | broyden") &&
                 !strcmp(fp_solver_names(FP_USE_SEQ), "loop | anderson | broyden"),
             "solver names: '%s' / '%s'", fp_solver_names(FP_USE_SOLVE), fp_solver_names(FP_USE_SEQ));
    TH_CHECK(fp_solver_parse("loop", FP_USE_SOLVE) == -1 && fp_solver_parse("loop", FP_USE_SEQ) == FP_EVALLOOP &&
                 fp_solver_parse("broyden", FP_USE_SOLVE) == FP_BROYDEN && fp_solver_parse(NULL, FP_USE_SEQ) == -1,
             "solver parse");
    TH_CHECK(!strcmp(fp_solver_names(FP_USE_FPRNN), "fixed_point_iter | anderson | broyden | fixed_point_optimizer"),
             "fixed-point RNN solver names: '%s'", fp_solver_names(FP_USE_FPRNN));
    for (int s = 0; s < FP_N_SOLVER; s++) {
        FpOpts o;
        fp_opts_default(&o);
        o.solver = (FpSolver)s;
        TH_CHECK(fp_scratch_floats(&o, 64, 2) >= 64, "solver %d: scratch %zu", s, fp_scratch_floats(&o, 64, 2));
    }
    ModelCfg mc;
    cfg_defaults(&mc);
    snprintf(mc.model, sizeof mc.model, "implicit_mamba2");
    snprintf(mc.f_solver, sizeof mc.f_solver, "loop");
    snprintf(want, sizeof want, "config key 'f_solver': unknown 'loop' (%s)", fp_solver_names(FP_USE_SOLVE));
    TH_CHECK(cfg_validate(&mc) == IM_EINVAL && !strcmp(err_msg(), want), "f_solver message: '%s'", err_msg());
    cfg_defaults(&mc);
    snprintf(mc.model, sizeof mc.model, "fp_rnn");
    snprintf(mc.fp_solver, sizeof mc.fp_solver, "loop");
    snprintf(want, sizeof want, "config key 'fp_solver': unknown 'loop' (%s)", fp_solver_names(FP_USE_FPRNN));
    TH_CHECK(cfg_validate(&mc) == IM_EINVAL && !strcmp(err_msg(), want), "fp_solver message: '%s'", err_msg());
}

/* ---- a solver row written only here ------------------------------------------------------------ */

/* max_iter undamped steps z <- f(z), no stopping rule: n floats of scratch for f's output */
static size_t plain_scratch(const FpOpts *o, size_t n, int nb) {
    (void)o, (void)nb;
    return n;
}

static int plain_solve(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    for (int k = 0; k < o->max_iter; k++) {
        m->f(m->ctx, scratch, z);
        memcpy(z, scratch, m->n * sizeof(float));
    }
    if (st) {
        st->iters = o->max_iter;
        st->converged = 0;
    }
    return IM_OK;
}

static const FpSolverOps plain_ops = {plain_scratch, plain_solve};

/* z -> 0.5 z + 1 */
static void half_f(void *ctx, float *out, const float *z) {
    const size_t *n = ctx;
    for (size_t i = 0; i < *n; i++) out[i] = 0.5f * z[i] + 1.0f;
}

static void test_solver_row(void) {
    /* a map as the implicit LMs give one: 3 steps from 0 are 1, 1.5, 1.75 (exact in float) */
    size_t n = 6;
    float z[6] = {0}, scratch[6];
    FpMap m = {&n, n, 2, half_f, NULL};
    FpOpts o;
    fp_opts_default(&o);
    o.max_iter = 3;
    FpStats st = {0};
    TH_CHECK(fp_solve_ops(&plain_ops, &m, z, &o, &st, scratch) == IM_OK && st.iters == 3, "plain solver on a map");
    TH_CHECK(z[0] == 1.75f && z[5] == 1.75f, "plain solver: 3 steps give 1.75 (got %g)", z[0]);
    o.max_iter = 0;
    TH_CHECK(fp_solve_ops(&plain_ops, &m, z, &o, &st, scratch) == IM_EINVAL, "the shared option checks run first");

    /* the same row as the solve of an FP-RNN layer */
    FpRnnCfg c;
    int B = 2, T = 5, D = 4, E = 8;
    TH_CHECK(fp_rnn_cfg_init(&c, D, 2, 4, 1, 1, 0, 1, 1e-5f, "householder", 1, "silu", -1, "spectral") == IM_OK,
             "fp_rnn cfg: %s", err_msg());
    const FpLayerOps *L = &fp_rnn_layer;
    ParamTable t;
    ptab_init(&t);
    fp_layer_add_params(L, &c, &t, "L", 1.0f);
    float *theta = th_alloc(t.total), *eff = th_alloc(fp_layer_eff_floats(L, &c));
    ptab_init_values(&t, theta, 3);
    FpRnnW w;
    fp_layer_bind(L, &c, &w, &t, theta, "L", eff);
    fp_layer_post_init(L, &c, &w);
    fp_layer_refresh(L, &c, &w);
    Rng r;
    rng_seed(&r, 9, 1);
    size_t M = (size_t)B * T;
    float *u = th_alloc(M * D), *h1 = th_alloc(M * E), *h2 = th_alloc(M * E);
    float *scr = th_alloc(fp_layer_scratch_floats(L, &c, B, T));
    th_fill_normal(u, M * D, &r, 1.0f);
    fp_opts_default(&o);
    o.max_iter = 7;
    FpSolveCtx mine = {.ops = &plain_ops, .o = o, .scratch = th_alloc(M * E)};
    FpSolve solve = fp_solve_call(&mine);
    TH_CHECK(fp_layer_solve(L, &c, &w, h1, u, &solve, scr, B, T) == IM_OK, "fp_rnn with the plain solver: %s",
             err_msg());
    TH_CHECK(mine.tally.solves == 1 && mine.tally.iters == 7, "the layer ran the row given (%d solves, %d iterations)",
             mine.tally.solves, mine.tally.iters);
    FpOpts fo = o;
    fo.solver = FP_OPTIMIZER;
    fo.step0 = 1.0f;
    fo.decay = 1.0f;
    fo.tol = 1e-30;
    fo.quantile = 1.0;
    FpSolveCtx table = {.o = fo, .scratch = th_alloc(fp_scratch_floats(&fo, M * E, B))};
    FpSolve tsolve = fp_solve_call(&table);
    TH_CHECK(fp_layer_solve(L, &c, &w, h2, u, &tsolve, scr, B, T) == IM_OK && table.tally.iters == 7,
             "fp_rnn with the table's row: %s", err_msg());
    TH_CHECK(!memcmp(h1, h2, M * E * sizeof(float)),
             "plain row == FixedPointOptimizer without damping (whole sequence)");
    /* token by token: each token's solve runs the row too */
    float *st1 = th_alloc(fp_layer_state_floats(L, &c, B)), *st2 = th_alloc(fp_layer_state_floats(L, &c, B));
    float *ss = th_alloc(fp_layer_step_scratch_floats(L, &c, B)), o1[8], o2[8];
    int same = 1;
    mine.tally = (FpTally){0};
    for (int k = 0; k < T; k++) {
        float ut[8];
        for (int b = 0; b < B; b++) memcpy(ut + b * D, u + ((size_t)b * T + k) * D, (size_t)D * sizeof(float));
        TH_CHECK(fp_layer_step(L, &c, &w, o1, ut, st1, &solve, ss, B) == IM_OK, "step, plain row");
        TH_CHECK(fp_layer_step(L, &c, &w, o2, ut, st2, &tsolve, ss, B) == IM_OK, "step, table row");
        same &= !memcmp(o1, o2, sizeof o1);
    }
    TH_CHECK(same && mine.tally.solves == T,
             "plain row == FixedPointOptimizer without damping (token by token, %d solves)", mine.tally.solves);
    fp_layer_unbind(L, &w);
    ptab_free(&t);
    free(theta); free(eff); free(u); free(h1); free(h2); free(scr); free(mine.scratch); free(table.scratch);
    free(st1); free(st2); free(ss);
}

/* ---- the recipes name real files ----------------------------------------------------------------- */

static void test_recipe_paths(void) {
    char *doc = th_read_file("docs/extending.md", NULL);
    TH_CHECK(doc != NULL, "cannot read docs/extending.md");
    if (!doc) return;
    int n = 0;
    static const char *const ROOTS[] = {"src/", "tests/", "docs/", "cli/"};
    for (const char *p = doc; *p; p++) {
        for (size_t r = 0; r < sizeof ROOTS / sizeof ROOTS[0]; r++) {
            size_t k = strlen(ROOTS[r]);
            if (strncmp(p, ROOTS[r], k) || (p > doc && (p[-1] == '/' || p[-1] == '_' || p[-1] == '.'))) continue;
            char path[256];
            size_t len = 0;
            while (p[len] && len < sizeof path - 1 && (strchr("/_.-", p[len]) || (p[len] >= 'a' && p[len] <= 'z') ||
                                                       (p[len] >= '0' && p[len] <= '9')))
                len++;
            if (p[len] == '<') break;          /* a placeholder like src/data/tasks_<name>.c */
            while (len && (p[len - 1] == '.' || p[len - 1] == '/')) len--;   /* sentence end */
            memcpy(path, p, len);
            path[len] = 0;
            struct stat st;
            TH_CHECK(stat(path, &st) == 0, "docs/extending.md names %s, which does not exist", path);
            n++;
            p += len - 1;
            break;
        }
    }
    TH_CHECK(n >= 10, "docs/extending.md names only %d files", n);
    free(doc);
}

int main(void) {
    th_name = "test_extending";
    test_task_row();
    test_tables();
    test_solver_row();
    test_recipe_paths();
    return th_done();
}
