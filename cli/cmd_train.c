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

#include "implicit.h"
#include "../src/core/timer.h"
#include "../src/io/keyjson.h"
#include "../src/train/dist.h"
#include "../src/train/trainer.h"

static int fail(const char *hint) {
    if (dist_rank() != 0) return 1;   /* MPI: the ranks agree on errors, rank 0 reports them */
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static void train_help(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    cfg_defaults(&m);
    task_cfg_defaults(&t);
    train_cfg_defaults(&r);
    printf("usage: implicit train [CONFIG.json] [--key value ...]\n"
           "       implicit train --resume DIR [--steps N ...]\n"
           "A config file is JSON, flat or sectioned {\"model\": {...}, \"task\": {...}, \"train\": {...}}, or a\n"
           "config of the PyTorch reference (backbone_config / deq_params, mapped by src/io/refcfg.c);\n"
           "--key value overrides it. vocab_size defaults to the task's vocabulary.\n\nmodel keys:\n");
    keytab_print(&model_keytab, &m, stdout);
    printf("\ntask keys:\n");
    keytab_print(&task_keytab, &t, stdout);
    printf("\ntrain keys:\n");
    keytab_print(&train_keytab, &r, stdout);
}

typedef struct {
    int argc;
    char **argv;
} Args;

/* Apply `--key value` pairs to the given tables. */
static int apply_args(const KeyTab *const *tabs, void *const *objs, int n, int argc, char **argv) {
    for (int i = 0; i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2)) return err_set(IM_EINVAL, "unexpected argument '%s' (options are --key value)", argv[i]);
        if (i + 1 >= argc) return err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
        int rc = keyjson_set_any(tabs, objs, n, argv[i] + 2, argv[i + 1]);
        if (rc) return rc;
    }
    return IM_OK;
}

static int resume_overrides(Trainer *t, void *ctx) {
    Args *a = ctx;
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&t->mcfg, &t->tcfg, &t->cfg};
    char out[KEY_STR_LEN];
    snprintf(out, sizeof out, "%s", t->cfg.out);
    int rc = apply_args(tabs, objs, 3, a->argc, a->argv);
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
    printf("final training loss %.4f; best mean %s %.4f at step %d%s\n", t->losses[t->step - 1], t->cfg.best_metric,
           t->best, t->best_step, t->skipped ? " (some steps skipped)" : "");
    eval_print_table(t->last_eval, t->n_last_eval, stdout);
    const int *lens;
    const float *ps;
    int nl = task_eval_lens(t->task, &lens), np = task_eval_ps(t->task, &ps);
    /* language models are judged by loss / perplexity per length (the table), not a length criterion */
    if (t->n_last_eval == nl * np && task_kind(t->task) != TASK_LM) print_len_summary(t->task, t->last_eval, nl, np);
    printf("checkpoints: %s/model.safetensors, best.safetensors, state.safetensors; log: %s/log.jsonl\n", t->cfg.out,
           t->cfg.out);
}

int cmd_train(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) { train_help(); return 0; }
    Trainer t;
    int rc;
    double t0 = timer_now();
    if (argc >= 2 && !strcmp(argv[0], "--resume")) {
        Args a = {argc - 2, argv + 2};
        if ((rc = trainer_resume(&t, argv[1], resume_overrides, &a)))
            return fail("--resume takes the output folder of an earlier `implicit train` run");
        if (dist_rank() == 0) fprintf(stderr, "resuming %s at step %d of %d\n", argv[1], t.step, t.cfg.steps);
    } else {
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
        int first = 0;
        if (argc >= 1 && strncmp(argv[0], "--", 2)) {
            char *text;
            size_t len;
            if (keyjson_read_file(argv[0], &text, &len)) return fail("the first argument is a JSON config file");
            rc = keyjson_apply(tabs, objs, 3, text, len, argv[0]);
            free(text);
            if (rc) return fail("run `implicit train --help` for the keys");
            first = 1;
        }
        if (apply_args(tabs, objs, 3, argc - first, argv + first)) return fail("run `implicit train --help` for the keys");
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
        if ((rc = trainer_init(&t, &m, &task, &cfg)))
            return fail(rc == IM_EMISMATCH ? "omit vocab_size: it is taken from the task"
                        : rc == IM_EIO     ? "choose a writable output folder with --out"
                                           : "check the config keys (`implicit train --help`)");
    }
    rc = trainer_run(&t, 0);
    if (rc) {
        fail(rc == IM_ENUM ? "lower lr, raise clip, or use --on_nan skip" : NULL);
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

/* Loss by position (one entry per iteration cap) for --pos_buckets; *pos is malloc'ed. */
static int eval_pos_all(Model *m, const Task *task, int n_buckets, int width, int samples, int batch, int mode,
                        const int *caps, int n_caps, EvalPos **pos) {
    int is_fp = !strncmp(m->cfg.model, "fp_", 3), own_cap = is_fp ? m->cfg.fp_eval_cap : m->cfg.eval_f_max_iter;
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
        else m->cfg.eval_f_max_iter = caps[c] > 0 ? caps[c] : own_cap;
        rc = eval_positions(m, task, len, width, samples, batch, mode, &(*pos)[c]);
    }
    if (is_fp) m->cfg.fp_eval_cap = own_cap;
    else m->cfg.eval_f_max_iter = own_cap;
    return rc;
}

int cmd_eval(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        TaskCfg t;
        task_cfg_defaults(&t);
        printf("usage: implicit eval CKPT [--task-key value ...] [--samples N] [--batch N] [--threads N] [--json OUT]\n"
               "                         [--csv OUT] [--mode simultaneous|sequential|both] [--max_iters 1,2,4,8,16,0]\n"
               "The task defaults to the one stored in the checkpoint; --eval_lens and --eval_ps choose the sweep.\n"
               "It prints accuracy per length and the longest length with > 90%% accuracy (sequence accuracy for the\n"
               "word problems and copy, answer accuracy for the formal tasks and catbabi); --json / --csv write the\n"
               "curve, one row per length (and p, and iteration cap).\n"
               "--mode both evaluates token by token and reports the argmax agreement with the simultaneous pass\n"
               "(duality); --max_iters repeats the evaluation per iteration cap (implicit and fixed-point models;\n"
               "0 = as trained). Fixed-point RNNs (fp_*) also take --fp_eval_cap N and --fp_threshold X.\n"
               "Implicit models also take --tau --f_tol --eval_f_max_iter --ema_alpha --seq_warm_start 1\n"
               "--seq_solver anderson|broyden [--anderson_m M --broyden_m M] (sequential mode from the previous\n"
               "token's fixed point / with Anderson or Broyden),\n"
               "--latent_noise_db / --state_noise_db / --noise_mode / --noise_seed (noise in sequential mode, spec 7),\n"
               "and --sradius N: the spectral radius of df/dz at the fixed point by N power iterations.\n"
               "Language models (task lm) print validation loss and perplexity per length (--eval_lens, --data\n"
               "for another token file); --pos_buckets N [--pos_width W] adds the loss by position within windows\n"
               "of N x W tokens (W defaults to the training context), in buckets of W positions: the\n"
               "length-extrapolation curve; --json adds it as \"positions\", --csv writes OUT_positions.csv beside OUT.\n\n"
               "task keys:\n");
        keytab_print(&task_keytab, &t, stdout);
        return argc < 1 ? 1 : 0;
    }
    Model m;
    if (ckpt_load(&m, argv[0], NULL)) return fail("is this a checkpoint written by `implicit`?");
    TaskCfg tc;
    task_cfg_defaults(&tc);
    char *stored = NULL;
    if (!ckpt_read_meta(argv[0], "task", &stored) && stored) {
        const KeyTab *tabs[] = {&task_keytab};
        void *objs[] = {&tc};
        int rc = keyjson_apply(tabs, objs, 1, stored, strlen(stored), argv[0]);
        free(stored);
        if (rc) { model_free(&m); return fail(NULL); }
    }
    int samples = -1, batch = 64, mode = EVAL_SIMULTANEOUS, n_caps = 1, caps[32] = {0}, sradius = 0;
    int pos_buckets = 0, pos_width = 0;
    const char *json_out = NULL, *csv_out = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) { model_free(&m); err_set(IM_EINVAL, "option '%s' needs a value", argv[i]); return fail(NULL); }
        const char *k = argv[i] + 2, *v = argv[i + 1];
        if (strncmp(argv[i], "--", 2)) { model_free(&m); err_set(IM_EINVAL, "unexpected argument '%s'", argv[i]); return fail(NULL); }
        if (!strcmp(k, "samples")) samples = atoi(v);
        else if (!strcmp(k, "batch")) batch = atoi(v);
        else if (!strcmp(k, "threads")) k_set_threads(atoi(v));
        else if (!strcmp(k, "json")) json_out = v;
        else if (!strcmp(k, "csv")) csv_out = v;
        else if (!strcmp(k, "sradius")) sradius = atoi(v);
        else if (!strcmp(k, "pos_buckets") || !strcmp(k, "pos_width")) {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || end == v || x < 1 || x > (1 << 20)) {
                model_free(&m);
                err_set(IM_EINVAL, "--%s: expected a positive integer, got '%s'", k, v);
                return fail(NULL);
            }
            *(!strcmp(k, "pos_buckets") ? &pos_buckets : &pos_width) = (int)x;
        }
        else if (!strcmp(k, "mode")) {
            if ((mode = eval_mode_parse(v)) < 0) {
                model_free(&m);
                err_set(IM_EINVAL, "--mode: unknown '%s' (simultaneous | sequential | both)", v);
                return fail(NULL);
            }
        } else if (!strcmp(k, "max_iters")) {
            /* test-time compute: one evaluation per iteration cap (0 = the checkpoint's own) */
            n_caps = 0;
            for (const char *q = v; *q && n_caps < 32; q++) {
                caps[n_caps++] = atoi(q);
                while (*q && *q != ',') q++;
                if (!*q) break;
            }
            if (strncmp(m.cfg.model, "implicit_", 9) && strncmp(m.cfg.model, "fp_", 3)) {
                model_free(&m);
                err_set(IM_EINVAL, "--max_iters applies to implicit and fixed-point models only (this is '%s')", m.cfg.model);
                return fail(NULL);
            }
        }
        else {
            /* evaluation-time model keys: iteration caps, tolerances, sequential solver options */
            static const char *const eval_keys[] = {"tau", "f_tol", "eval_factor", "eval_f_max_iter", "ema_alpha",
                                                    "seq_warm_start", "seq_solver", "anderson_m", "anderson_lambda", "broyden_m",
                                                    "latent_noise_db", "state_noise_db", "noise_mode", "noise_seed",
                                                    "fp_eval_cap", "fp_threshold", NULL};
            int model_key = 0;
            for (int e = 0; eval_keys[e]; e++) model_key |= !strcmp(k, eval_keys[e]);
            int rc = model_key ? cfg_set(&m.cfg, k, v) : keytab_set(&task_keytab, &tc, k, v);
            if (!rc && model_key) rc = cfg_validate(&m.cfg);
            if (rc == KEY_NOT_MINE) rc = err_set(IM_EINVAL, "unknown option '--%s'", k);
            if (rc) { model_free(&m); return fail("run `implicit eval --help`"); }
        }
    }
    if (samples > 0) tc.eval_samples = samples;
    if (batch < 1) { model_free(&m); err_set(IM_EINVAL, "--batch must be >= 1"); return fail(NULL); }
    struct stat csv_st;   /* the positions CSV is named after a file, not after "-" or a device */
    if (pos_buckets > 0 && csv_out && (report_is_stdout(csv_out) || (!stat(csv_out, &csv_st) && !S_ISREG(csv_st.st_mode)))) {
        model_free(&m);
        err_set(IM_EINVAL, "--csv %s with --pos_buckets: the positions CSV goes beside the CSV file; give a file name", csv_out);
        return fail(NULL);
    }
    if (report_check(json_out) || report_check(csv_out)) { model_free(&m); return fail(NULL); }   /* before the work */
    if (report_is_stdout(json_out) || report_is_stdout(csv_out)) report_reserve_stdout();   /* tables to stderr */
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
    int nl = task_eval_lens(task, &lens), np = task_eval_ps(task, &ps), n = 0, rc = 0;
    EvalRow *rows = calloc((size_t)nl * np * n_caps, sizeof *rows);
    int is_fp = !strncmp(m.cfg.model, "fp_", 3), own_cap = is_fp ? m.cfg.fp_eval_cap : m.cfg.eval_f_max_iter;
    int is_lm = task_kind(task) == TASK_LM;
    EvalPos *pos = NULL;
    if (pos_buckets > 0)
        rc = eval_pos_all(&m, task, pos_buckets, pos_width, tc.eval_samples, batch, mode, caps, n_caps, &pos);
    for (int c = 0; c < n_caps && !rc; c++) {
        if (is_fp) m.cfg.fp_eval_cap = caps[c] > 0 ? caps[c] : own_cap;
        else m.cfg.eval_f_max_iter = caps[c] > 0 ? caps[c] : own_cap;
        for (int i = 0; i < nl && !rc; i++)
            for (int j = 0; j < np && !rc; j++) {
                rc = eval_run(&m, task, lens[i], ps[j], tc.eval_samples, batch, mode, &rows[n]);
                if (!rc) n++;
            }
    }
    if (!rc) {
        char desc[512];
        task_describe(task, desc, sizeof desc);
        printf("%s: %s, %s\n", argv[0], m.type->name, desc);
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
            rc = eval_write_json_pos(json_out, argv[0], tc.task, rows, n, is_lm ? NULL : task_len_metric(task), 0.9, pos,
                                     pos ? n_caps : 0);
        if (!rc && csv_out) rc = eval_write_csv(csv_out, rows, n);
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
