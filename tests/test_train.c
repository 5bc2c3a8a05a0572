/* test_train.c: the training loop — bit-exact resume, atomic checkpoints under a kill,
 * NaN handling, gradient accumulation, config parsing, schedules. Tiny models, a few dozen
 * steps each, so the whole binary runs in seconds. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/io/json.h"
#include "../src/io/keyjson.h"
#include "../src/models/ckpt.h"
#include "../src/train/sched.h"
#include "../src/train/trainer.h"
#include "th.h"

static char root[64];
static const char *len_curriculum = "";   /* the task key configs() sets (curriculum runs) */

static void configs(ModelCfg *m, TaskCfg *t, TrainCfg *r, const char *family, const char *out, int steps) {
    cfg_defaults(m);
    task_cfg_defaults(t);
    train_cfg_defaults(r);
    cfg_set(m, "model", family);
    cfg_set(m, "d_model", "16");
    cfg_set(m, "n_layer", "1");
    cfg_set(m, "d_state", "8");
    cfg_set(m, "headdim", "8");
    cfg_set(m, "dropout", "0.1");            /* dropout draws: resume must restore the RNG */
    keytab_set(&task_keytab, t, "group", "S3");
    keytab_set(&task_keytab, t, "train_len", "8");
    keytab_set(&task_keytab, t, "eval_lens", "8");
    keytab_set(&task_keytab, t, "eval_samples", "16");
    keytab_set(&task_keytab, t, "len_curriculum", len_curriculum);
    Task *tk;
    task_create(&tk, t);
    m->vocab_size = task_vocab(tk);
    task_free(tk);
    snprintf(r->out, sizeof r->out, "%s/%s", root, out);
    r->steps = steps;
    r->batch = 4;
    r->warmup = 3;
    r->lr = 3e-3;
    r->log_every = 5;
    r->eval_every = 10;
    r->ckpt_every = 10;
    snprintf(r->progress, sizeof r->progress, "none");
}

static void bit_exact_resume(const char *family) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a, b;
    enum { N = 20 };
    char full[64], half[64];   /* one pair of run folders per family: a folder holds one run */
    const char *tag = *len_curriculum ? "cur-" : "";
    snprintf(full, sizeof full, "full-%s%s", tag, family);
    snprintf(half, sizeof half, "half-%s%s", tag, family);
    configs(&m, &t, &r, family, full, N);
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "%s init: %s", family, err_msg());
    TH_CHECK(trainer_run(&a, 0) == 0, "%s run: %s", family, err_msg());
    configs(&m, &t, &r, family, half, N);
    TH_CHECK(trainer_init(&b, &m, &t, &r) == 0, "%s init: %s", family, err_msg());
    TH_CHECK(trainer_run(&b, N / 2) == 0 && b.step == N / 2, "%s half run: %s", family, err_msg());
    double first[N];
    memcpy(first, b.losses, sizeof first);
    trainer_free(&b);  /* the process "dies" here: state.safetensors at step N/2 is all that is left */
    TH_CHECK(trainer_resume(&b, r.out, NULL, NULL) == 0, "%s resume: %s", family, err_msg());
    TH_CHECK(b.step == N / 2, "%s resumed at step %d", family, b.step);
    TH_CHECK(trainer_run(&b, 0) == 0, "%s resumed run: %s", family, err_msg());
    int same = 1;
    for (int i = 0; i < N; i++) same &= (i < N / 2 ? first[i] : b.losses[i]) == a.losses[i];
    TH_CHECK(same, "%s: resumed losses differ from the uninterrupted run", family);
    TH_CHECK(!memcmp(a.model.params, b.model.params, a.model.tab.total * sizeof(float)),
             "%s: final weights differ after resume", family);
    TH_CHECK(a.losses[N - 1] < a.losses[0], "%s: loss did not go down (%g -> %g)", family, a.losses[0], a.losses[N - 1]);
    trainer_free(&a);
    trainer_free(&b);
}

/* Gradient accumulation: 2 micro-batches of 4 rows = 1 batch of 8 rows (same rows by design). */
/* len_curriculum through the trainer: rows of 4, then 6, then 8 positions; a resume inside the
 * second phase is bit-exact (rows are functions of the step), the log says each step's length, and
 * the implicit LMs take the changing T as the explicit ones do. */
static void curriculum_runs(void) {
    len_curriculum = "4:7,6:14";
    bit_exact_resume("mamba2");
    bit_exact_resume("implicit_mamba2");
    char path[128], line[4096];
    snprintf(path, sizeof path, "%s/full-cur-implicit_mamba2/log.jsonl", root);
    FILE *f = fopen(path, "r");
    int n = 0, bad = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *st = strstr(line, "\"type\":\"train\",\"step\":");
        if (!st) continue;
        int step = atoi(st + 22), want = step <= 7 ? 4 : step <= 14 ? 6 : 8;   /* the step logged is 1-based */
        const char *tl = strstr(line, "\"train_len\":");
        bad += !tl || atoi(tl + 12) != want;
        n++;
    }
    if (f) fclose(f);
    TH_CHECK(n == 4 && !bad, "train records with the step's train_len: %d records, %d wrong", n, bad);
    len_curriculum = "";
}

static void grad_accum(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a, b;
    configs(&m, &t, &r, "lstm", "acc1", 3);
    cfg_set(&m, "dropout", "0");
    r.batch = 8;
    trainer_init(&a, &m, &t, &r);
    configs(&m, &t, &r, "lstm", "acc2", 3);
    cfg_set(&m, "dropout", "0");
    r.batch = 4;
    r.grad_accum = 2;
    trainer_init(&b, &m, &t, &r);
    TH_CHECK(trainer_run(&a, 0) == 0 && trainer_run(&b, 0) == 0, "accum runs: %s", err_msg());
    double e = 0;
    for (int i = 0; i < 3; i++) e = fmax(e, fabs(a.losses[i] - b.losses[i]) / fabs(a.losses[i]));
    TH_CHECK(e < 1e-5, "grad_accum 2x4 vs batch 8: loss rel diff %g", e);
    trainer_free(&a);
    trainer_free(&b);
}

/* A NaN stops the run with IM_ENUM and leaves the last good checkpoint loadable. */
static void nan_stop(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a;
    configs(&m, &t, &r, "mamba2", "nan", 30);
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "%s", err_msg());
    TH_CHECK(trainer_run(&a, 10) == 0, "%s", err_msg());   /* a good checkpoint at step 10 */
    trainer_free(&a);
    TH_CHECK(trainer_resume(&a, r.out, NULL, NULL) == 0, "%s", err_msg());
    /* poison the weights: the next loss is NaN */
    a.model.params[0] = NAN;
    int rc = trainer_run(&a, 0);
    TH_CHECK(rc == IM_ENUM && strstr(err_msg(), "not finite") && strstr(err_msg(), "(step 10)"), "NaN loss: rc %d, %s",
             rc, err_msg());
    TH_CHECK(a.step == 10, "stopped at step %d", a.step);
    trainer_free(&a);
    Model chk;
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", r.out);
    TH_CHECK(ckpt_load(&chk, p, NULL) == 0 && isfinite(chk.params[0]), "last good checkpoint: %s", err_msg());
    model_free(&chk);
    /* on_nan = skip: the run goes on */
    TH_CHECK(trainer_resume(&a, r.out, NULL, NULL) == 0, "%s", err_msg());
    snprintf(a.cfg.on_nan, sizeof a.cfg.on_nan, "skip");
    a.cfg.explode_norm = 1e-30;
    TH_CHECK(trainer_run(&a, 12) == 0 && a.skipped == 2 && a.step == 12, "skip: rc/skipped %d/%d", a.step, a.skipped);
    trainer_free(&a);
}

/* The divergence rule on made-up curves: noise, short spikes and near-zero wobbles are healthy;
 * a sustained rise of the loss or of the gradient norm is divergence after `steps` steps. */
static void divergence_rule(void) {
    DivergeCfg dc = {4, 100, 100, 20, 10};
    Diverge d;
    diverge_init(&d, &dc);
    char why[256] = "";
    Rng r;
    rng_seed(&r, 5, 0);
    int tripped = 0;
    for (int i = 0; i < 3000; i++) {   /* 3 nats down to ~1e-6, +-50% noise, 9-step spikes of 30x */
        double base = 3 * exp(-i / 200.0) + 1e-6, noise = 0.5 + rng_uniform(&r), spike = i % 500 < 9 && i > 100 ? 30 : 1;
        tripped |= diverge_observe(&d, base * noise * spike, 5 * base * noise * spike, why, sizeof why) == DIVERGE_DIVERGED;
    }
    for (int i = 0; i < 50; i++)       /* solved: a loss of 1e-3 wobbling up to 0.9 (below 4 x the 0.25 floor) */
        tripped |= diverge_observe(&d, i % 2 ? 0.9 : 1e-3, 0.5, why, sizeof why) == DIVERGE_DIVERGED;
    TH_CHECK(!tripped, "a healthy curve tripped the divergence rule: %s", why);
    int at = 0;
    for (int i = 1; i <= 12 && !at; i++)
        if (diverge_observe(&d, 50, 0.5, why, sizeof why) == DIVERGE_DIVERGED) at = i;
    TH_CHECK(at == 10 && strstr(why, "the loss diverged: 50 > 4 x 0.25 (the floor"), "sustained loss: step %d, %s", at, why);
    diverge_reset(&d);
    at = 0;
    for (int i = 1; i <= 45 && !at; i++)
        if (diverge_observe(&d, 1, i <= 30 ? 2 : 1e4, why, sizeof why) == DIVERGE_DIVERGED) at = i;
    TH_CHECK(at == 40 && strstr(why, "the gradient norm exploded: 1e+04 > 100 x 2 (the running median)"), "sustained norm: step %d, %s",
             at, why);
    diverge_free(&d);
    dc.factor = dc.grad_factor = 0;    /* off */
    diverge_init(&d, &dc);
    for (int i = 0; i < 100; i++) tripped |= diverge_observe(&d, i < 30 ? 1 : 1e6, 1e6, why, sizeof why) == DIVERGE_DIVERGED;
    TH_CHECK(!tripped, "the rule switched off still tripped");
    diverge_free(&d);
}

/* A tiny LSTM at a constant lr of 50 from step 1: it diverges to a finite loss thousands of nats
 * high within a few dozen steps (NaN only after ~60 on the hosts tried). */
static void start_lr50(Trainer *a, const char *out, int steps, double factor, const char *on_nan) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    configs(&m, &t, &r, "lstm", out, steps);
    cfg_set(&m, "dropout", "0");
    r.lr = 50, r.warmup = 0, r.eval_every = r.ckpt_every = 0, r.diverge_factor = r.diverge_grad_factor = factor;
    snprintf(r.schedule, sizeof r.schedule, "constant");
    snprintf(r.on_nan, sizeof r.on_nan, "%s", on_nan);
    TH_CHECK(trainer_init(a, &m, &t, &r) == 0, "%s", err_msg());
}

/* With the defaults that run stops (with the check off, nothing else stops it that far);
 * on_nan = skip goes on, keeps the last applied loss, and marks skipped steps NaN. */
static void divergence_run(void) {
    Trainer a;
    start_lr50(&a, "div", 50, 4, "stop");
    int rc = trainer_run(&a, 0);
    TH_CHECK(rc == IM_ENUM && (strstr(err_msg(), "the loss diverged") || strstr(err_msg(), "the gradient norm exploded")),
             "lr 50: rc %d, %s", rc, rc ? err_msg() : "ran to the end");
    int stopped = a.step;
    TH_CHECK(stopped < 40, "divergence stopped the run only at step %d", stopped);
    trainer_free(&a);
    start_lr50(&a, "div_off", stopped > 0 ? stopped : 1, 0, "stop");   /* as far, with the check off */
    rc = trainer_run(&a, 0);
    TH_CHECK(rc == 0 && a.last_loss > 20 * a.losses[0], "check off: rc %d, loss %g -> %g", rc, a.losses[0], a.last_loss);
    trainer_free(&a);
    start_lr50(&a, "div_skip", 60, 4, "skip");
    rc = trainer_run(&a, 0);
    int nan_marks = 0;
    for (int i = 0; i < a.step; i++) nan_marks += isnan(a.losses[i]);
    TH_CHECK(rc == 0 && a.step == 60 && a.skipped > 0 && nan_marks == a.skipped, "skip: rc %d, %d skipped, %d marked",
             rc, a.skipped, nan_marks);
    TH_CHECK(isfinite(a.last_loss) && a.last_loss == a.losses[a.last_loss_step - 1], "last applied loss %g at step %d",
             a.last_loss, a.last_loss_step);
    trainer_free(&a);
}

/* A healthy run long enough for the check to be active (to a solved task, loss near 0) never
 * trips it. */
static void divergence_quiet(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a;
    configs(&m, &t, &r, "mamba2", "quiet", 300);
    r.eval_every = r.ckpt_every = 0;
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "%s", err_msg());
    int rc = trainer_run(&a, 0);
    TH_CHECK(rc == 0 && a.skipped == 0, "healthy run: rc %d, %s", rc, rc ? err_msg() : "");
    printf("  healthy mamba2 S3: loss %.3g -> %.3g in 300 steps\n", a.losses[0], a.last_loss);
    trainer_free(&a);
}

/* best.safetensors holds only finite weights with a finite, strictly better score: a NaN model
 * scores 0%% sequence accuracy, which used to become "the best so far" at the first evaluation. */
static void best_needs_finite(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a;
    configs(&m, &t, &r, "lstm", "best", 10);
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "%s", err_msg());
    a.model.params[0] = NAN;
    TH_CHECK(trainer_eval(&a) == 0, "%s", err_msg());
    char p[512];
    snprintf(p, sizeof p, "%s/best.safetensors", r.out);
    TH_CHECK(isnan(a.best) && access(p, F_OK) != 0, "a NaN model became best.safetensors (score %g)", a.best);
    trainer_free(&a);
}

/* Kill a writer at random moments: the checkpoint on disk is always complete (old or new). */
static void kill_during_write(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    configs(&m, &t, &r, "llama", "kill", 1);
    cfg_set(&m, "d_model", "64");
    cfg_set(&m, "n_layer", "4");
    cfg_set(&m, "d_inner", "256");
    Model a;
    TH_CHECK(model_create(&a, &m) == 0, "%s", err_msg());
    model_init_params(&a, 1);
    char p[256];
    snprintf(p, sizeof p, "%s/kill.safetensors", root);
    TH_CHECK(ckpt_save(&a, p, NULL) == 0, "%s", err_msg());
    int good = 0;
    for (int trial = 0; trial < 12; trial++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0;; i++) {
                a.params[0] = (float)i;
                ckpt_save(&a, p, NULL);
            }
        }
        struct timespec ts = {0, (2000 + 1500 * trial) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        Model b;
        int rc = ckpt_load(&b, p, NULL);
        good += rc == 0;
        if (rc == 0) model_free(&b);
        else printf("  load after kill %d: %s\n", trial, err_msg());
    }
    TH_CHECK(good == 12, "checkpoint unreadable after %d of 12 kills", 12 - good);
    model_free(&a);
}

/* The records of a run's log.jsonl: every line must be a JSON object; *n_train, *n_eval count
 * them, steps[k] counts the train records of step k. Returns 0 when a line is torn or invalid. */
static int read_log(const char *out, int *n_train, int *n_eval, int *steps, int max_step) {
    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", out);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t n = 0;
    int ok = f && fs_read_all(f, 0, &text, &n) == IM_OK;
    if (f) fclose(f);
    *n_train = *n_eval = 0;
    memset(steps, 0, sizeof(int) * (size_t)(max_step + 1));
    for (size_t i = 0; ok && i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        Json *j = NULL;
        ok = nl && json_parse(&j, text + i, (size_t)(nl - text - i)) == IM_OK && j->type == JSON_OBJECT;
        const Json *type = json_get(j, "type"), *step = json_get(j, "step");
        ok = ok && type && step && step->type == JSON_NUMBER && step->number >= 0 && step->number <= max_step;
        if (ok && !strcmp(type->string, "train")) (*n_train)++, steps[(int)step->number]++;
        else if (ok && strcmp(type->string, "start")) (*n_eval)++;   /* one "start" per process: not counted */
        json_free(j);
        i = nl ? (size_t)(nl - text) + 1 : n;
    }
    free(text);
    return ok;
}

static void touch(const char *out, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", out, name);
    FILE *f = fopen(path, "w");
    if (f) fputs("left over\n", f), fclose(f);
}

static int exists(const char *out, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", out, name);
    return access(path, F_OK) == 0;
}

/* One process owns a run folder: a second trainer there (fresh or resumed) fails naming the
 * owner's pid; a finished run is not replaced without overwrite; a resume removes the temp files
 * killed writers left and cuts log.jsonl back to the checkpoint's step, so no step is logged twice. */
static void run_folder(void) {
    enum { N = 20 };
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a, b;
    configs(&m, &t, &r, "lstm", "owned", N);
    char pid[32], name[64];
    snprintf(pid, sizeof pid, "pid %ld ", (long)getpid());
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "init: %s", err_msg());
    int rc = trainer_init(&b, &m, &t, &r);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "in use") && strstr(err_msg(), pid), "second trainer: rc %d, %s", rc,
             err_msg());
    TH_CHECK(trainer_run(&a, 15) == 0, "run: %s", err_msg());   /* checkpoint at 10, log records up to 15 */
    rc = trainer_resume(&b, r.out, NULL, NULL);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), pid), "resume into a folder in use: rc %d, %s", rc, err_msg());
    trainer_free(&a);   /* "killed" at step 15: steps 11..15 are logged but in no checkpoint */
    /* leftovers of killed writers: a temp of the run's own file, and temps of another writer,
     * one alive (this process) and one gone; and a torn last log line */
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    touch(r.out, "model.safetensors.tmp.1");
    snprintf(name, sizeof name, "eval.json.tmp.%ld", (long)getpid());
    touch(r.out, name);
    char gone_name[64], log[512];
    snprintf(gone_name, sizeof gone_name, "eval.json.tmp.%ld", (long)gone);
    touch(r.out, gone_name);
    snprintf(log, sizeof log, "%s/log.jsonl", r.out);
    FILE *f = fopen(log, "a");
    if (f) fputs("{\"type\": \"train\", \"step\": 16, \"lo", f), fclose(f);
    /* a fresh run into it: refused, the old run untouched */
    rc = trainer_init(&b, &m, &t, &r);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "already holds a training run") && strstr(err_msg(), "--overwrite"),
             "fresh run over a finished one: rc %d, %s", rc, err_msg());
    TH_CHECK(exists(r.out, "state.safetensors") && exists(r.out, "model.safetensors"), "the old run is untouched");
    int n_train, n_eval, steps[N + 1];
    TH_CHECK(trainer_resume(&b, r.out, NULL, NULL) == 0 && b.step == 10, "resume: %s", err_msg());
    TH_CHECK(!exists(r.out, "model.safetensors.tmp.1") && !exists(r.out, gone_name) && exists(r.out, name),
             "stale temps removed (the run's own, a dead writer's), a live writer's kept");
    TH_CHECK(read_log(r.out, &n_train, &n_eval, steps, 10) && n_train == 2 && n_eval > 0,
             "log cut back to step 10: valid JSONL, %d train records (want 2: steps 5, 10)", n_train);
    int evals_at_10 = n_eval;
    TH_CHECK(trainer_run(&b, 0) == 0, "resumed run: %s", err_msg());
    trainer_free(&b);
    int once = read_log(r.out, &n_train, &n_eval, steps, N);
    for (int k = 5; k <= N; k += 5) once &= steps[k] == 1;
    TH_CHECK(once && n_train == 4 && n_eval == 2 * evals_at_10,
             "after resume: each step logged once (%d train, %d eval records)", n_train, n_eval);
    /* overwrite starts over: the old checkpoints and log are gone, the flag is not recorded */
    r.overwrite = 1;
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "overwrite: %s", err_msg());
    TH_CHECK(!exists(r.out, "state.safetensors") && !exists(r.out, "best.safetensors") &&
             read_log(r.out, &n_train, &n_eval, steps, N) && n_train + n_eval == 0 && a.cfg.overwrite == 0,
             "overwrite deleted the earlier run");
    trainer_free(&a);
    /* a run that never logged a step (config.json, an empty log) holds nothing to lose */
    r.overwrite = 0;
    snprintf(log, sizeof log, "%s/log.jsonl", r.out);
    f = fopen(log, "w");
    if (f) fclose(f);
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "a folder without results is reused: %s", err_msg());
    trainer_free(&a);
}

static void config_parsing(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    cfg_defaults(&m);
    task_cfg_defaults(&t);
    train_cfg_defaults(&r);
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&m, &t, &r};
    const char *good = "{\"model\": {\"model\": \"llama\", \"d_model\": 32}, \"task\": {\"group\": \"S4\"}, \"lr\": 0.01, \"steps\": 7}";
    TH_CHECK(keyjson_apply(tabs, objs, 3, good, strlen(good), "good.json") == 0, "good config: %s", err_msg());
    TH_CHECK(!strcmp(m.model, "llama") && m.d_model == 32 && !strcmp(t.group, "S4") && r.lr == 0.01 && r.steps == 7,
             "good config values");
    struct { const char *json, *needle; } bad[] = {
        {"{\"stepz\": 3}", "unknown key 'stepz'"},
        {"{\"steps\": \"many\"}", "'steps'"},
        {"{\"steps\": 1.5}", "'steps'"},
        {"{\"lr\": [1]}", "'lr'"},
        {"[1, 2]", "JSON object"},
        {"{\"model\": {\"d_model\": 3", "json"},
        {"{\"train\": {\"d_model\": 3}}", "unknown key 'd_model'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = keyjson_apply(tabs, objs, 3, bad[i].json, strlen(bad[i].json), "bad.json");
        TH_CHECK(rc != 0 && strstr(err_msg(), bad[i].needle), "bad config %s: rc %d, '%s'", bad[i].json, rc, err_msg());
    }
    train_cfg_defaults(&r);
    r.steps = 0;
    TH_CHECK(train_cfg_validate(&r) == IM_EINVAL && strstr(err_msg(), "steps"), "steps 0");
    train_cfg_defaults(&r);
    snprintf(r.best_metric, sizeof r.best_metric, "f1");
    TH_CHECK(train_cfg_validate(&r) == IM_EINVAL && strstr(err_msg(), "best_metric"), "bad metric");
    /* vocabulary mismatch between model and task is reported, not trained */
    ModelCfg mm;
    TaskCfg tt;
    TrainCfg rr;
    Trainer tr;
    configs(&mm, &tt, &rr, "lstm", "vocab", 2);
    mm.vocab_size = 99;
    TH_CHECK(trainer_init(&tr, &mm, &tt, &rr) == IM_EMISMATCH && strstr(err_msg(), "vocabulary mismatch"),
             "vocab mismatch: %s", err_msg());
    /* an unwritable output folder */
    configs(&mm, &tt, &rr, "lstm", "x", 2);
    snprintf(rr.out, sizeof rr.out, "/proc/implicit-no/such");
    TH_CHECK(trainer_init(&tr, &mm, &tt, &rr) == IM_EIO, "unwritable out: %s", err_msg());
}

static void schedules(void) {
    TH_CHECK(fabsf(sched_lr(SCHED_COSINE, 0, 100, 10, 1, 0) - 0.1f) < 1e-6f, "warm-up start");
    TH_CHECK(fabsf(sched_lr(SCHED_COSINE, 9, 100, 10, 1, 0) - 1.0f) < 1e-6f, "warm-up end");
    TH_CHECK(fabsf(sched_lr(SCHED_COSINE, 55, 100, 10, 1, 0) - 0.5f) < 1e-6f, "cosine midpoint");
    TH_CHECK(fabsf(sched_lr(SCHED_LINEAR, 55, 100, 10, 1, 0.1f) - 0.55f) < 1e-6f, "linear midpoint");
    TH_CHECK(sched_lr(SCHED_CONSTANT, 99, 100, 10, 1, 0) == 1.0f, "constant");
    TH_CHECK(sched_parse("warmup-stable") < 0, "unknown schedule");
}

/* Fixed-Point RNNs log their solver counts twice: ours (fp_iters, iters: f evaluations of the
 * solve) and the reference's (fp_iters_ref, iters_ref: iter_idx + 1 per solve). A 2-layer fp_mamba
 * run: every train record has fp_iters_ref = fp_iters + 1 and every eval row iters_ref = iters + 1
 * (to rounding: the mean over layers is taken of both); a mamba1 run logs neither. */
static void fp_iteration_convention(void) {
    const char *fams[] = {"fp_mamba", "mamba1"};
    for (int k = 0; k < 2; k++) {
        ModelCfg m;
        TaskCfg t;
        TrainCfg r;
        Trainer a;
        char out[32];
        snprintf(out, sizeof out, "fpconv-%s", fams[k]);
        configs(&m, &t, &r, fams[k], out, 10);
        cfg_set(&m, "n_layer", "2");
        TH_CHECK(trainer_init(&a, &m, &t, &r) == 0, "%s init: %s", fams[k], err_msg());
        TH_CHECK(trainer_run(&a, 0) == 0, "%s run: %s", fams[k], err_msg());
        trainer_free(&a);
        char path[512];
        snprintf(path, sizeof path, "%s/log.jsonl", r.out);
        FILE *f = fopen(path, "rb");
        char *text = NULL;
        size_t n = 0;
        int ok = f && fs_read_all(f, 0, &text, &n) == IM_OK, n_train = 0, n_eval = 0, n_bad = 0;
        if (f) fclose(f);
        for (size_t i = 0; ok && i < n;) {
            const char *nl = memchr(text + i, '\n', n - i);
            Json *j = NULL;
            const Json *type = NULL;
            if (nl && json_parse(&j, text + i, (size_t)(nl - text - i)) == IM_OK && (type = json_get(j, "type")) &&
                strcmp(type->string, "start")) {   /* a process's "start" record is neither */
                int train = type && !strcmp(type->string, "train");
                const Json *it = json_get(j, train ? "fp_iters" : "iters");
                const Json *ref = json_get(j, train ? "fp_iters_ref" : "iters_ref");
                n_train += train, n_eval += !train;
                if (k == 0) n_bad += !it || !ref || fabs(ref->number - it->number - 1) > 1e-9;
                else n_bad += ref != NULL;
            }
            json_free(j);
            i = nl ? (size_t)(nl - text) + 1 : n;
        }
        free(text);
        TH_CHECK(ok && n_train >= 2 && n_eval >= 1 && !n_bad, "%s: %d train and %d eval records, %d without the "
                 "reference's convention (or with it, for a model without a fixed point)", fams[k], n_train, n_eval,
                 n_bad);
    }
}

int main(void) {
    th_name = "test_train";
    snprintf(root, sizeof root, "/tmp/implicit-test-train-%d", (int)getpid());
    char cmd[160];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", root);
    TH_CHECK(system(cmd) == 0, "mkdir");
    schedules();
    config_parsing();
    bit_exact_resume("mamba2");
    bit_exact_resume("llama");
    bit_exact_resume("lstm");
    curriculum_runs();
    grad_accum();
    nan_stop();
    divergence_rule();
    divergence_run();
    divergence_quiet();
    best_needs_finite();
    kill_during_write();
    run_folder();
    fp_iteration_convention();
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    TH_CHECK(system(cmd) == 0, "cleanup");
    return th_done();
}
