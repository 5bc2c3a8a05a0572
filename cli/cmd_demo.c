/* cmd_demo.c: `implicit demo` — the first step of the README.s tour. Trains an explicit and an implicit
 * 1-layer Mamba2 on the same state-tracking task (S3 x aperiodic monoid word problem, 10% hard
 * tokens, the configs' length T) with the configs in configs/demo_explicit.json and
 * configs/demo_implicit.json, then evaluates both out of distribution (50% hard tokens) at T and 4T
 * token by token, and prints the accuracies side by side. A smaller version of the experiment in
 * docs/results/state-tracking.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "cli.h"
#include "../src/core/timer.h"
#include "../src/io/keyjson.h"
#include "../src/train/progress.h"
#include "../src/train/run_report.h"
#include "../src/train/trainer.h"

static int load(const char *path, ModelCfg *m, TaskCfg *t, TrainCfg *r, const char *out) {
    cfg_defaults(m);
    task_cfg_defaults(t);
    train_cfg_defaults(r);
    char *text;
    size_t len;
    if (keyjson_read_file(path, &text, &len)) return err_wrap(IM_EIO, "run `implicit demo` from the repository root");
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {m, t, r};
    int rc = keyjson_apply(tabs, objs, 3, text, len, path);
    free(text);
    if (rc) return rc;
    if (out) snprintf(r->out, sizeof r->out, "%s", out);
    Task *task;
    if ((rc = task_create(&task, t))) return rc;
    m->vocab_size = task_vocab(task);
    task_free(task);
    return IM_OK;
}

typedef struct {
    const char *label;
    int len[2];
    double acc[2], seq[2], iters[2], seconds;
    EvalRow eval[2];   /* the out-of-distribution rows, for the report */
} DemoRow;

static int run_one(const char *path, const char *out, int threads, DemoRow *row) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    int rc = load(path, &m, &t, &r, out);
    if (rc) return rc;
    if (threads > 0) r.threads = threads;
    r.overwrite = 1;   /* the demo's own folders: every demo starts over */
    Trainer tr;
    double t0 = timer_now();
    fprintf(stderr, "== training %s (%s, %d steps) -> %s\n", m.model, path, r.steps, r.out);
    if ((rc = trainer_init(&tr, &m, &t, &r))) return rc;
    rc = trainer_run(&tr, 0);
    row->seconds = timer_now() - t0;
    row->len[0] = t.train_len;
    row->len[1] = 4 * t.train_len;
    Progress pg;   /* the two evaluations, token by token, take a while: a bar on a terminal */
    progress_init(&pg, r.progress, 0, 0);
    double t1 = timer_now();
    for (int i = 0; i < 2 && !rc; i++) {
        EvalRow e;
        ProgressEval bar = {&pg, i, 2, row->len[i], 0.5f, t1};
        rc = eval_run_progress(&tr.model, tr.task, row->len[i], 0.5f, 256, 64, EVAL_SEQUENTIAL, &e, progress_eval_batch, &bar);
        row->acc[i] = e.last10_acc;
        row->seq[i] = e.seq_acc;
        row->iters[i] = e.iters;
        row->eval[i] = e;
    }
    progress_done(&pg);
    trainer_free(&tr);
    return rc;
}

/* DIR/report.html: both runs overlaid, with the out-of-distribution evaluation as an evaluation of each. */
static int demo_report(const char *path, const char *out_e, const char *out_i, const DemoRow *rows) {
    RunReport *r = run_report_new("implicit demo: explicit vs implicit Mamba2 on the S3 x monoid word problem");
    const char *dirs[2] = {out_e, out_i};
    int rc = IM_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        int run = run_report_add_run(r, dirs[i]);
        size_t len;
        char *text = run < 0 ? NULL : eval_json_text(NULL, "word", rows[i].eval, 2, "last10_acc", 0.9, NULL, 0, &len);
        rc = run < 0 ? run : !text ? err_set(IM_ENOMEM, "out of memory") :
             run_report_add_eval_json(r, run, text, len, "OOD p 0.5, token by token");
        free(text);
    }
    if (!rc) rc = run_report_write(r, path);
    run_report_free(r);
    return rc;
}

typedef struct {
    long long threads;
    const char *out;
} DemoArgs;

static const OptSpec DEMO_OPTS[] = {
    OPT(DemoArgs, threads, 0, 4096, "N", "threads of each training run (0 = the configs')"),
    OPT(DemoArgs, out, 0, 0, "DIR", "output folder: DIR/explicit and DIR/implicit"),
};
const CmdSpec demo_cmd = {
    "demo", "[options]",
    "train explicit and implicit Mamba2 on a word problem, compare out of distribution",
    "Trains a 1-layer explicit and a 1-layer implicit Mamba2 on the S3 x monoid word problem with\n"
    "configs/demo_explicit.json and configs/demo_implicit.json (run it from the repository root), then\n"
    "evaluates both token by token at 50% hard tokens, at the training length T and at 4T, and writes\n"
    "DIR/report.html with the plots of both runs.\n",
    DEMO_OPTS, 2, NULL, 0, 0, 0};

int cmd_demo(int argc, char **argv) {
    DemoArgs a = {0, "runs/demo"};
    OptArgs o;
    int rc;
    if (!opts_get(&demo_cmd, &a, argc, argv, &o, &rc)) return rc;
    opts_free(&o);
    int threads = (int)a.threads;
    const char *dir = a.out;
    char out_e[512], out_i[512];
    snprintf(out_e, sizeof out_e, "%s/explicit", dir);
    snprintf(out_i, sizeof out_i, "%s/implicit", dir);
    DemoRow rows[2] = {{.label = "explicit Mamba2, 1 layer"}, {.label = "implicit Mamba2, 1 layer"}};
    rc = run_one("configs/demo_explicit.json", out_e, threads, &rows[0]);
    if (!rc) rc = run_one("configs/demo_implicit.json", out_i, threads, &rows[1]);
    if (rc) {
        fprintf(stderr, "error: %s\nhint: run `implicit demo` from the repository root (it reads configs/demo_*.json)\n",
                err_msg());
        return 1;
    }
    if (rows[0].len[0] != rows[1].len[0]) {
        fprintf(stderr, "error: configs/demo_explicit.json and demo_implicit.json train at different lengths (%d, %d)\n",
                rows[0].len[0], rows[1].len[0]);
        return 1;
    }
    const int *L = rows[0].len;
    printf("\nS3 x monoid word problem, trained at p 0.9 (10%% hard tokens), length T = %d; evaluated token by token\n"
           "at p 0.5 (50%% hard tokens: out of distribution), 256 sequences, accuracy on the last 10 positions:\n\n", L[0]);
    printf("| model                    | train time | OOD acc, T %-3d | OOD acc, 4T %-3d | whole-sequence acc %3d / %-3d | iterations/token |\n",
           L[0], L[1], L[0], L[1]);
    printf("|--------------------------|-----------:|---------------:|----------------:|-----------------------------:|-----------------:|\n");
    for (int i = 0; i < 2; i++)
        printf("| %-24s | %8.0f s | %13.1f%% | %14.1f%% | %17.1f%% / %6.1f%% | %16.1f |\n", rows[i].label, rows[i].seconds,
               100 * rows[i].acc[0], 100 * rows[i].acc[1], 100 * rows[i].seq[0], 100 * rows[i].seq[1], rows[i].iters[0]);
    printf("\nThe full experiment (T 64, 6000 steps) and the explicit 4-layer baseline are in docs/results/state-tracking.md.\n");
    char path[600];
    snprintf(path, sizeof path, "%s/report.html", dir);
    if (demo_report(path, out_e, out_i, rows)) {
        fprintf(stderr, "warning: %s not written: %s\n", path, err_msg());
        return 1;
    }
    printf("Plots of both runs (training, solver, the evaluations above): %s\n", path);
    return 0;
}
