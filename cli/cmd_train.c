/* cmd_train.c: `implicit train` and `implicit eval`.
 *
 *   implicit train [CONFIG.json] [--key value ...]      keys: model, task and train tables
 *   implicit train --resume DIR [--key value ...]       continue a run (train keys only)
 *   implicit eval CKPT [--key value ...] [--json OUT] [--csv OUT]   task keys, plus samples / batch
 *                      [--pos_buckets N [--pos_width W]]   language models: loss by position
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include "cli.h"
#include "../src/core/timer.h"
#include "../src/io/keyjson.h"
#include "../src/train/dist.h"
#include "../src/train/progress.h"
#include "../src/train/run_report.h"
#include "../src/train/trainer.h"

static int fail(const char *hint) {
    if (dist_rank() != 0) return 1;   /* MPI: the ranks agree on errors, rank 0 reports them */
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

typedef struct {
    const char *resume;
} TrainArgs;

static const OptSpec TRAIN_OPTS[] = {
    OPT(TrainArgs, resume, 0, 0, "DIR", "continue the run in DIR bit-exactly (its config; --key value still overrides)"),
};
static const OptKeys TRAIN_KEYS[] = {{&model_keytab, NULL, 1}, {&task_keytab, NULL, 1}, {&train_keytab, NULL, 1}};
const CmdSpec train_cmd = {
    "train", "[CONFIG.json] [--key value ...]\n--resume DIR [--steps N ...]",
    "train a model on a task; `train --resume DIR` continues an interrupted run",
    "A config file is JSON, flat or sectioned {\"model\": {...}, \"task\": {...}, \"train\": {...}}, or a\n"
    "config of the PyTorch reference (backbone_config / deq_params, mapped by src/io/refcfg.c);\n"
    "--key value overrides it. vocab_size defaults to the task's vocabulary.\n",
    TRAIN_OPTS, 1, TRAIN_KEYS, 3, 0, 1};

static int resume_overrides(Trainer *t, void *ctx) {
    const OptArgs *o = ctx;
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&t->mcfg, &t->tcfg, &t->cfg};
    char out[KEY_STR_LEN];
    snprintf(out, sizeof out, "%s", t->cfg.out);
    int rc = opts_apply_keys(o, tabs, objs, 3);
    snprintf(t->cfg.out, sizeof t->cfg.out, "%s", out);   /* a resumed run stays in its folder */
    return rc;
}

/* Length generalisation per p (rows ordered length-major, then p): the longest length with the
 * task's length metric > 90%, and where it first drops below. */
static void print_len_summary(const Task *task, const EvalRow *rows, int nl, int np) {
    const char *metric = task_len_metric(task);
    EvalRow *g = malloc(sizeof *g * (size_t)(nl > 0 ? nl : 1));
    for (int j = 0; j < np && g; j++) {
        int longest, first_fail;
        for (int i = 0; i < nl; i++) g[i] = rows[i * np + j];
        eval_length_summary(g, nl, metric, 0.9, &longest, &first_fail);
        if (rows[j].p >= 0) printf("p %.2f: ", rows[j].p);
        printf("longest length with > 90%% %s: %d", metric, longest);
        if (first_fail) printf(" (first length at or below 90%%: %d)", first_fail);
        printf("\n");
    }
    free(g);
}

static void summary(const Trainer *t, double seconds) {
    char desc[512];
    task_describe(t->task, desc, sizeof desc);
    printf("\n%s on %s: %d steps in %.1f s, %zu parameters\n", t->mcfg.model, desc, t->step, seconds,
           ptab_count(&t->model.tab));
    if (isfinite(t->last_loss)) printf("final training loss %.4f (step %d)", t->last_loss, t->last_loss_step);
    else printf("no training step applied since the start or resume");
    printf("; best mean %s %.4f at step %d", t->cfg.best_metric, t->best, t->best_step);
    if (t->skipped) printf("; %d of %d steps skipped", t->skipped, t->step);
    printf("\n");
    eval_print_table(t->last_eval, t->n_last_eval, stdout);
    const int *lens;
    const float *ps;
    int nl = task_eval_lens(t->task, &lens), np = task_eval_ps(t->task, &ps);
    /* language models are judged by loss / perplexity per length (the table), not a length criterion */
    if (t->n_last_eval == nl * np && task_kind(t->task) != TASK_LM) print_len_summary(t->task, t->last_eval, nl, np);
    printf("checkpoints: %s/model.safetensors, best.safetensors, state.safetensors; log: %s/log.jsonl\n", t->cfg.out,
           t->cfg.out);
}

/* Creates the trainer from a config file and --key value options (fresh run) or from a run
 * folder (--resume); the options are freed on every path. */
static int train_setup(Trainer *t, const TrainArgs *a, OptArgs *o) {
    int rc;
    if (a->resume) {
        if (o->n_pos) {
            err_set(IM_EINVAL, "--resume takes the run's own config: give no config file ('%s')", o->pos[0]);
            opts_free(o);
            return fail("implicit train --resume DIR [--steps N ...]");
        }
        rc = trainer_resume(t, a->resume, resume_overrides, o);
        opts_free(o);
        if (rc) return fail("--resume takes the output folder of an earlier `implicit train` run");
        if (dist_rank() == 0) fprintf(stderr, "resuming %s at step %d of %d\n", a->resume, t->step, t->cfg.steps);
        return 0;
    }
    ModelCfg m;
    TaskCfg task;
    TrainCfg cfg;
    cfg_defaults(&m);
    task_cfg_defaults(&task);
    train_cfg_defaults(&cfg);
    m.vocab_size = -1;   /* "from the task" unless a config says otherwise */
    cfg.best_metric[0] = 0; /* "the task's" unless given: loss for lm, seq_acc otherwise */
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&m, &task, &cfg};
    if (o->n_pos) {
        char *text;
        size_t len;
        rc = keyjson_read_file(o->pos[0], &text, &len);
        if (!rc) {
            rc = keyjson_apply(tabs, objs, 3, text, len, o->pos[0]);
            free(text);
        }
        if (rc) {
            opts_free(o);
            return fail(rc == IM_EIO ? "the first argument is a JSON config file" : "run `implicit train --help` for the keys");
        }
    }
    rc = opts_apply_keys(o, tabs, objs, 3);
    opts_free(o);
    if (rc) return fail("run `implicit train --help` for the keys");
    if (task_cfg_validate(&task)) return fail("run `implicit train --help` for the task keys");
        int is_lm = !strcmp(task.task, "lm");
        if (m.vocab_size < 0 || is_lm) {
            Task *tk;
            if ((rc = task_create(&tk, &task)))
                return fail(is_lm && rc != IM_EINVAL ? "make the token file with `implicit data prepare TEXT... --out FILE.tok`" : NULL);
            if (m.vocab_size < 0) m.vocab_size = task_vocab(tk);
            /* the checkpoints keep the tokenizer, so eval / generate can decode without the data file */
            if (is_lm) snprintf(task.tokenizer, sizeof task.tokenizer, "%s", task_cfg(tk)->tokenizer);
            task_free(tk);
        }
        if (!cfg.best_metric[0]) snprintf(cfg.best_metric, sizeof cfg.best_metric, "%s", is_lm ? "loss" : "seq_acc");
        if ((rc = trainer_init(t, &m, &task, &cfg)))
            return fail(rc == IM_EMISMATCH ? "omit vocab_size: it is taken from the task"
                        : rc == IM_EIO     ? "choose another output folder with --out, or make this one writable"
                                           : "check the config keys and the --out folder (`implicit train --help`)");
    return 0;
}

int cmd_train(int argc, char **argv) {
    TrainArgs a = {0};
    OptArgs o;
    int rc;
    if (!opts_get(&train_cmd, &a, argc, argv, &o, &rc)) return rc;
    dist_init(NULL, NULL);   /* MPI=1: join the job (main leaves it) */
    Trainer t;
    double t0 = timer_now();
    if (train_setup(&t, &a, &o)) return 1;
    rc = trainer_run(&t, 0);
    if (rc) {
        fail(rc == IM_ENUM ? "lower lr, raise clip, or use --on_nan skip (--diverge_factor 0 --diverge_grad_factor 0: no "
                             "divergence check)" : NULL);
        trainer_free(&t);
        return 1;
    }
    if (dist_rank() == 0) summary(&t, timer_now() - t0);
    trainer_free(&t);
    return 0;
}

/* ---- eval ------------------------------------------------------------------------------------ */

/* The bucket CSV beside --csv OUT: OUT without ".csv", then "_positions.csv". */
static void pos_csv_path(const char *csv, char *out, size_t cap) {
    size_t n = strlen(csv);
    if (n > 4 && !strcmp(csv + n - 4, ".csv")) n -= 4;
    snprintf(out, cap, "%.*s_positions.csv", (int)n, csv);
}

/* One --max_iters cap of an implicit model: it bounds both the whole-sequence and the per-token
 * sequential solve (cap 0: the checkpoint's own caps). */
static void set_caps(ModelCfg *c, int cap, int own_cap, int own_seq_cap) {
    c->eval_f_max_iter = cap > 0 ? cap : own_cap;
    c->eval_seq_f_max_iter = cap > 0 ? cap : own_seq_cap;
}

/* Loss by position (one entry per iteration cap) for --pos_buckets; *pos is malloc'ed. */
static int eval_pos_all(Model *m, const Task *task, int n_buckets, int width, int samples, int batch, int mode,
                        const int *caps, int n_caps, EvalPos **pos) {
    int is_fp = m->type->family == MODEL_FP_RNN, own_cap = is_fp ? m->cfg.fp_eval_cap : m->cfg.eval_f_max_iter;
    int own_seq_cap = m->cfg.eval_seq_f_max_iter;
    if (task_kind(task) != TASK_LM) return err_set(IM_EINVAL, "--pos_buckets applies to language models (task lm) only");
    if (width < 1) width = task_cfg(task)->context;
    if (n_buckets > EVAL_MAX_BUCKETS) return err_set(IM_EINVAL, "--pos_buckets: at most %d", EVAL_MAX_BUCKETS);
    int len = n_buckets * width;
    if (task_eval_count(task, len) < 1)
        return err_set(IM_EINVAL, "--pos_buckets %d x width %d: the validation split is shorter than one window of %d tokens",
                       n_buckets, width, len + 1);
    *pos = xcalloc((size_t)n_caps, sizeof **pos);
    int rc = IM_OK;
    for (int c = 0; c < n_caps && !rc; c++) {
        if (is_fp) m->cfg.fp_eval_cap = caps[c] > 0 ? caps[c] : own_cap;
        else set_caps(&m->cfg, caps[c], own_cap, own_seq_cap);
        rc = eval_positions(m, task, len, width, samples, batch, mode, &(*pos)[c]);
    }
    if (is_fp) m->cfg.fp_eval_cap = own_cap;
    else set_caps(&m->cfg, 0, own_cap, own_seq_cap);
    return rc;
}

typedef struct {
    long long samples, batch, threads, sradius, pos_buckets, pos_width;
    const char *json, *csv, *report, *mode, *max_iters, *config;
    int allow_nonfinite;
} EvalArgs;

static const OptSpec EVAL_OPTS[] = {
    OPT(EvalArgs, samples, 0, 1e9, "N", "sequences per length and p (0 = the task's eval_samples)"),
    OPT(EvalArgs, batch, 1, 1 << 20, "N", "sequences per forward"),
    OPT(EvalArgs, threads, 0, 4096, "N", "OpenMP / BLAS threads (0 = all cores)"),
    OPT(EvalArgs, json, 0, 0, "OUT", "write the curve as JSON (with --pos_buckets: and \"positions\")"),
    OPT(EvalArgs, csv, 0, 0, "OUT", "write the curve as CSV (with --pos_buckets: and OUT_positions.csv)"),
    OPT(EvalArgs, report, 0, 0, "FILE", "write an HTML page of these evaluations (plus the run's training plots when "
                                        "CKPT lies in a run folder; docs/report.md)"),
    OPT(EvalArgs, mode, 0, 0, "M", "simultaneous | sequential (token by token) | both (and their agreement; the default for implicit models)"),
    OPT(EvalArgs, max_iters, 0, 0, "LIST", "iteration caps, e.g. 1,2,4,8,16,0: one evaluation each (0 = as trained)"),
    OPT(EvalArgs, sradius, 0, 1e6, "N", "spectral radius of df/dz at z* by N power iterations (0 = off)"),
    OPT(EvalArgs, pos_buckets, 1, 1 << 20, "N", "language models: loss by position in windows of N x W tokens"),
    OPT(EvalArgs, pos_width, 1, 1 << 20, "W", "width of a position bucket (default: the training context)"),
    OPT(EvalArgs, allow_nonfinite, 0, 0, NULL, "load a checkpoint with NaN/inf weights anyway, for inspection"),
    OPT(EvalArgs, config, 0, 0, "FILE", "the model config when the checkpoint has none (a config.json of ours, the reference's or Hugging Face's)"),
};
/* evaluation-time model keys (config.h MODEL_EVAL_KEYS) */
static const char *const EVAL_MODEL_KEYS[] = {MODEL_EVAL_KEYS(MODEL_KEY_NAME) NULL};
static const OptKeys EVAL_KEYS[] = {{&task_keytab, NULL, 1}, {&model_keytab, EVAL_MODEL_KEYS, 1}};
const CmdSpec eval_cmd = {
    "eval", "CKPT [--key value ...]", "evaluate a checkpoint at several lengths / p values",
    "The task defaults to the one stored in the checkpoint; --eval_lens and --eval_ps choose the sweep.\n"
    "It prints accuracy per length and the longest length with > 90% accuracy (sequence accuracy for the\n"
    "word problems and copy, answer accuracy for the formal tasks and catbabi); --json / --csv write the\n"
    "curve, one row per length (and p, and iteration cap).\n"
    "--mode both evaluates token by token and reports the argmax agreement with the simultaneous pass\n"
    "(duality), and for implicit models it is the default; their rows also show the share of the solves\n"
    "that reached f_tol (conv sim: sequences, conv seq: tokens); --max_iters repeats the evaluation per iteration cap (implicit and fixed-point models).\n"
    "The model keys below apply to implicit models (sequential mode: --seq_warm_start 1 starts from the\n"
    "previous token's fixed point, --seq_solver anderson|broyden; noise in sequential mode, spec 7) and\n"
    "to fixed-point RNNs (fp_*: --fp_eval_cap N, --fp_threshold X).\n"
    "Language models (task lm) print validation loss and perplexity per length (--eval_lens, --data\n"
    "for another token file); --pos_buckets N [--pos_width W] adds the loss by position within windows\n"
    "of N x W tokens (W defaults to the training context), in buckets of W positions: the\n"
    "length-extrapolation curve.\n",
    EVAL_OPTS, (int)(sizeof EVAL_OPTS / sizeof *EVAL_OPTS), EVAL_KEYS, 2, 1, 1};

/* The checkpoint's model and task, with the task and model keys of the command line applied. */
static int eval_load(Model *m, TaskCfg *tc, const OptArgs *o, const CkptLoadOpts *lo) {
    const char *path = o->pos[0];
    int rc_load = ckpt_load_opts(m, path, NULL, lo);
    if (rc_load) return fail(cli_load_hint(rc_load));
    task_cfg_defaults(tc);
    char *stored = NULL;
    const KeyTab *tabs[] = {&task_keytab, &model_keytab};
    void *objs[] = {tc, &m->cfg};
    int rc = IM_OK;
    if (!ckpt_read_meta(path, "task", &stored) && stored) {
        rc = keyjson_apply(tabs, objs, 1, stored, strlen(stored), path);
        free(stored);
    }
    if (!rc) rc = opts_apply_keys(o, tabs, objs, 2);
    if (!rc) rc = cfg_validate(&m->cfg);
    if (rc) model_free(m);
    return rc ? fail("run `implicit eval --help`") : 0;
}

/* --report FILE: the rows as an evaluation of the checkpoint's run folder (when it lies in one:
 * its training panels come along), else of the checkpoint alone. */
static int eval_report(const char *out, const char *ckpt, const char *task, const EvalRow *rows, int n,
                       const char *metric, const EvalPos *pos, int n_pos) {
    size_t len;
    char *text = eval_json_text(ckpt, task, rows, n, metric, 0.9, pos, n_pos, &len);
    if (!text) return err_set(IM_ENOMEM, "out of memory writing the report");
    char dir[4096], origin[4200];
    const char *slash = strrchr(ckpt, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - ckpt) : 1, slash ? ckpt : ".");
    snprintf(origin, sizeof origin, "eval of %s", slash ? slash + 1 : ckpt);
    RunReport *r = run_report_new(NULL);
    int run = run_report_add_run(r, dir);
    if (run < 0) run = run_report_add_source(r, ckpt);   /* no run folder: the checkpoint alone */
    int rc = run_report_add_eval_json(r, run, text, len, origin);
    if (!rc) rc = run_report_write(r, out);
    run_report_free(r);
    free(text);
    return rc;
}

/* --mode and --max_iters (caps: up to 32 iteration caps, 0 = the checkpoint's own). */
static int eval_modes(const EvalArgs *a, const Model *m, int *mode, int *caps, int *n_caps) {
    /* implicit models: both passes and their agreement unless asked otherwise (duality is what
     * says whether the solve reached the fixed point) */
    const char *name = a->mode ? a->mode : m->type->family == MODEL_IMPLICIT ? "both" : "simultaneous";
    if ((*mode = eval_mode_parse(name)) < 0)
        return err_set(IM_EINVAL, "--mode: unknown '%s' (simultaneous | sequential | both)", name);
    *n_caps = 1;
    caps[0] = 0;
    if (!a->max_iters) return IM_OK;
    /* test-time compute: one evaluation per iteration cap */
    *n_caps = 0;
    for (const char *q = a->max_iters; *q && *n_caps < 32; q++) {
        caps[(*n_caps)++] = atoi(q);
        while (*q && *q != ',') q++;
        if (!*q) break;
    }
    if (!model_is_fixed_point(m))
        return err_set(IM_EINVAL, "--max_iters applies to implicit and fixed-point models only (this is '%s')", m->cfg.model);
    return IM_OK;
}

int cmd_eval(int argc, char **argv) {
    EvalArgs a = {.batch = 64, .mode = NULL};
    OptArgs o;
    int rc;
    if (!opts_get(&eval_cmd, &a, argc, argv, &o, &rc)) return rc;
    Model m;
    TaskCfg tc;
    rc = eval_load(&m, &tc, &o, &(CkptLoadOpts){.allow_nonfinite = a.allow_nonfinite, .config_path = a.config, .map = 1});
    const char *ckpt = o.pos[0];   /* an argv string: outlives o */
    opts_free(&o);
    if (rc) return 1;
    int samples = (int)a.samples, batch = (int)a.batch, mode = 0, n_caps = 1, caps[32] = {0}, sradius = (int)a.sradius;
    int pos_buckets = (int)a.pos_buckets, pos_width = (int)a.pos_width;
    const char *json_out = a.json, *csv_out = a.csv, *report_out = a.report;
    if (a.threads > 0) k_set_threads((int)a.threads);
    if (eval_modes(&a, &m, &mode, caps, &n_caps)) {
        model_free(&m);
        return fail(NULL);
    }
    if (samples > 0) tc.eval_samples = samples;
    struct stat csv_st;   /* the positions CSV is named after a file, not after "-" or a device */
    if (pos_buckets > 0 && csv_out && (report_is_stdout(csv_out) || (!stat(csv_out, &csv_st) && !S_ISREG(csv_st.st_mode)))) {
        model_free(&m);
        err_set(IM_EINVAL, "--csv %s with --pos_buckets: the positions CSV goes beside the CSV file; give a file name", csv_out);
        return fail(NULL);
    }
    if (report_check(json_out) || report_check(csv_out) || run_report_check_out(report_out)) {   /* before the work */
        model_free(&m);
        return fail(NULL);
    }
    if (report_is_stdout(json_out) || report_is_stdout(csv_out) || report_is_stdout(report_out))
        report_reserve_stdout();   /* tables to stderr */
    Task *task;
    if (task_create(&task, &tc)) { model_free(&m); return fail("run `implicit eval --help`"); }
    if (task_vocab(task) != m.cfg.vocab_size) {
        char desc[512];
        task_describe(task, desc, sizeof desc);
        err_set(IM_EMISMATCH, "vocabulary mismatch: the checkpoint has %d tokens, task %s needs %d", m.cfg.vocab_size, desc,
                task_vocab(task));
        task_free(task);
        model_free(&m);
        return fail("evaluate on the task the model was trained on (stored in the checkpoint)");
    }
    const int *lens;
    const float *ps;
    int nl = task_eval_lens(task, &lens), np = task_eval_ps(task, &ps), n = 0;
    EvalRow *rows = calloc((size_t)nl * np * n_caps, sizeof *rows);
    int is_fp = m.type->family == MODEL_FP_RNN, own_cap = is_fp ? m.cfg.fp_eval_cap : m.cfg.eval_f_max_iter;
    int own_seq_cap = m.cfg.eval_seq_f_max_iter;
    int is_lm = task_kind(task) == TASK_LM;
    EvalPos *pos = NULL;
    if (pos_buckets > 0)
        rc = eval_pos_all(&m, task, pos_buckets, pos_width, tc.eval_samples, batch, mode, caps, n_caps, &pos);
    Progress pg;   /* on a terminal, a bar over the sweep (stderr; wiped before the tables) */
    progress_init(&pg, "auto", 0, 0);
    double t0 = timer_now();
    for (int c = 0; c < n_caps && !rc; c++) {
        if (is_fp) m.cfg.fp_eval_cap = caps[c] > 0 ? caps[c] : own_cap;
        else set_caps(&m.cfg, caps[c], own_cap, own_seq_cap);
        for (int i = 0; i < nl && !rc; i++)
            for (int j = 0; j < np && !rc; j++) {
                ProgressEval bar = {&pg, n, n_caps * nl * np, lens[i], task_kind(task) == TASK_WORD ? ps[j] : -1.0f, t0};
                rc = eval_run_progress(&m, task, lens[i], ps[j], tc.eval_samples, batch, mode, &rows[n],
                                       progress_eval_batch, &bar);
                if (!rc) n++;
            }
    }
    progress_done(&pg);
    if (!rc) {
        char desc[512];
        task_describe(task, desc, sizeof desc);
        printf("%s: %s, %s\n", ckpt, m.type->name, desc);
        eval_print_table(rows, n, stdout);
        eval_print_hist(rows, n, stdout);
        for (int c = 0; c < n_caps && !is_lm; c++) {
            if (n_caps > 1) printf("iteration cap %d: ", rows[c * nl * np].max_iter);
            print_len_summary(task, rows + (size_t)c * nl * np, nl, np);
        }
        if (pos) eval_print_positions(pos, n_caps, stdout);
        /* diagnostic: spectral radius of df/dz at z* on the first batch of each length and p */
        for (int i = 0; i < nl && sradius > 0 && !rc; i++)
            for (int j = 0; j < np && !rc; j++) {
                int T = task_seq_len(task, lens[i]), B = batch < tc.eval_samples ? batch : tc.eval_samples;
                long long avail = task_eval_count(task, lens[i]);   /* catbabi, lm: a finite set of windows */
                if (avail >= 0 && B > avail) B = (int)avail;
                int *ids = malloc(sizeof(int) * (size_t)B * T), *tg = malloc(sizeof(int) * (size_t)B * T);
                double rho = 0;
                task_eval_batch(task, lens[i], ps[j], 0, B, ids, tg);
                rc = model_spectral_radius(&m, ids, B, T, sradius, &rho);
                if (!rc) printf("spectral radius of df/dz at z*, length %d%s: %.4f (%d power iterations, %d sequences)\n",
                                lens[i], ps[j] < 0 ? "" : (ps[j] < 0.7f ? ", p < 0.7" : ", p >= 0.7"), rho,
                                sradius, B);
                free(ids);
                free(tg);
            }
        if (!rc && json_out)
            rc = eval_write_json_pos(json_out, ckpt, tc.task, rows, n, is_lm ? NULL : task_len_metric(task), 0.9, pos,
                                     pos ? n_caps : 0);
        if (!rc && csv_out) rc = eval_write_csv(csv_out, rows, n);
        if (!rc && report_out) {
            rc = eval_report(report_out, ckpt, tc.task, rows, n, is_lm ? NULL : task_len_metric(task), pos,
                             pos ? n_caps : 0);
            if (!rc && !report_is_stdout(report_out)) printf("report: %s\n", report_out);
        }
        if (!rc && csv_out && pos) {
            char path[4200];
            pos_csv_path(csv_out, path, sizeof path);
            rc = eval_write_pos_csv(path, pos, n_caps);
            if (!rc) printf("loss by position: %s\n", path);
        }
    }
    free(pos);
    free(rows);
    task_free(task);
    model_free(&m);
    return rc ? fail(NULL) : 0;
}
