/* test_extending: the recipes of docs/extending.md hold.
 *
 * 1. A task family written only here (a TaskOps row, "echo": the target of each token is the token
 *    itself) runs through the generic task code exactly as a listed family does: config checks,
 *    default eval lengths, batches, determinism, describe, scoring metric, token names.
 * 2. The tables: every listed task, mixer and solver name round-trips, every solver has a row,
 *    and the messages for an unknown name list the table's names.
 * 3. The recipes name real files: every `src/...`, `tests/...` or `docs/...` path written in
 *    docs/extending.md exists, so the document cannot drift from the tree unnoticed.
 * Runs from the repository root (tests/run.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/core/check.h"
#include "../src/data/task_impl.h"
#include "../src/fixedpoint/fp.h"
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
    test_recipe_paths();
    return th_done();
}
