/* trainer.c: the training loop, its logs and its checkpoints; see trainer.h. */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/check.h"
#include "../core/log.h"
#include "../core/timer.h"
#include "../io/atomic.h"
#include "../io/json.h"
#include "../io/keyjson.h"
#include "../io/safetensors.h"
#include "../kernels/kernels.h"
#include "../models/ckpt.h"
#include "../tok/tokenizer.h"
#include "dist.h"
#include "progress.h"
#include "run_report.h"
#include "rundir.h"
#include "sched.h"

#define STATE_FORMAT "implicit.state"

/* ---- config ------------------------------------------------------------------------------ */
#define KEY_STRUCT TrainCfg
static const KeyInfo TRAIN_KEYS[] = {TRAIN_CFG_KEYS(KEY_INFO)};
static const KeyBound TRAIN_BOUNDS[] = {TRAIN_CFG_BOUNDS(KEY_BOUND)};
#undef KEY_STRUCT
const KeyTab train_keytab = {"train", TRAIN_KEYS, (int)(sizeof TRAIN_KEYS / sizeof TRAIN_KEYS[0]), TRAIN_BOUNDS,
                             (int)(sizeof TRAIN_BOUNDS / sizeof TRAIN_BOUNDS[0]), NULL};

void train_cfg_defaults(TrainCfg *c) {
    memset(c, 0, sizeof *c);
    keytab_defaults(&train_keytab, c);
}

#define BAD(...) return err_set(IM_EINVAL, __VA_ARGS__)

int train_cfg_validate(const TrainCfg *c) {
    int rc = keytab_check_bounds(&train_keytab, c);
    if (rc) return rc;
    if (!c->out[0]) BAD("train key 'out': an output folder is required");
    if (!(c->lr > 0)) BAD("train key 'lr' must be > 0");
    if (c->min_lr < 0 || c->min_lr > c->lr) BAD("train key 'min_lr' must be in [0, lr]");
    if (sched_parse(c->schedule) < 0) BAD("train key 'schedule': unknown '%s' (cosine | linear | constant)", c->schedule);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) BAD("train keys 'beta1', 'beta2' must be in [0, 1)");
    if (!(c->eps > 0)) BAD("train key 'eps' must be > 0");
    if (c->weight_decay < 0) BAD("train key 'weight_decay' must be >= 0");
    if (c->clip < 0) BAD("train key 'clip' must be >= 0");
    if (!(c->gap_tol > 0)) BAD("train key 'gap_tol' must be > 0");
    EvalRow r = {0};
    double v;
    int hib;
    if (eval_metric(&r, c->best_metric, &v, &hib)) return err_wrap(IM_EINVAL, "train key 'best_metric'");
    if (eval_mode_parse(c->eval_mode) < 0) BAD("train key 'eval_mode': unknown '%s' (simultaneous | sequential | both)", c->eval_mode);
    if (strcmp(c->on_nan, "stop") && strcmp(c->on_nan, "skip")) BAD("train key 'on_nan': unknown '%s' (stop | skip)", c->on_nan);
    if (!(c->explode_norm > 0)) BAD("train key 'explode_norm' must be > 0");
    if (!(c->diverge_factor == 0 || c->diverge_factor > 1) || !(c->diverge_grad_factor == 0 || c->diverge_grad_factor > 1))
        BAD("train keys 'diverge_factor', 'diverge_grad_factor' must be > 1 (or 0 = off): the running median itself "
            "is not divergence");
    if (strcmp(c->progress, "auto") && strcmp(c->progress, "bar") && strcmp(c->progress, "plain") && strcmp(c->progress, "none"))
        BAD("train key 'progress': unknown '%s' (auto | bar | plain | none)", c->progress);
    return IM_OK;
}

char *trainer_config_json(const ModelCfg *m, const TaskCfg *task, const TrainCfg *cfg) {
    size_t nm = keytab_json(&model_keytab, m, NULL, 0), nt = task_cfg_to_json(task, NULL, 0);
    size_t nr = keytab_json(&train_keytab, cfg, NULL, 0);
    size_t cap = nm + nt + nr + 64;
    char *s = xmalloc(cap), *a = xmalloc(nm), *b = xmalloc(nt), *c = xmalloc(nr);
    keytab_json(&model_keytab, m, a, nm);
    task_cfg_to_json(task, b, nt);
    keytab_json(&train_keytab, cfg, c, nr);
    snprintf(s, cap, "{\"model\": %s, \"task\": %s, \"train\": %s}", a, b, c);
    free(a); free(b); free(c);
    return s;
}

/* ---- setup ---------------------------------------------------------------------------------- */
/* Claim the output folder (rundir.h: lock, no silent overwrite, stale temps, a resumed log cut
 * back to resume_step; -1 = fresh run) and open the log for appending. Rank 0 only. */
static int open_folder(Trainer *t, int resume_step, int overwrite) {
    /* an unusable TensorBoard folder is refused before the run folder is claimed or its log opened */
    int rc = t->cfg.tensorboard[0] ? dirs_check(t->cfg.tensorboard) : IM_OK;
    if (rc) return err_wrap(IM_EINVAL, "train key 'tensorboard'");   /* a key to change, not the --out folder */
    rc = rundir_claim(t->cfg.out, resume_step, overwrite, &t->lock);
    if (rc) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/log.jsonl", t->cfg.out);
    t->log = fopen(path, "a");
    if (!t->log) return err_set(IM_EIO, "cannot open %s: %s", path, strerror(errno));
    if (t->cfg.tensorboard[0]) return err_wrap(tb_open(&t->tb, t->cfg.tensorboard), "train key 'tensorboard'");
    return IM_OK;
}

/* batch x T (training) and eval_batch x T (every eval length) within MODEL_MAX_TOKENS, in 64 bits,
 * before any buffer of that size is allocated. */
static int batch_sizes_validate(const Trainer *t) {
    long long T = task_train_seq_len(t->task), n = (long long)t->cfg.batch * T;
    if (n > MODEL_MAX_TOKENS)
        BAD("train key 'batch': %d sequences of the task's training length %lld = %lld tokens per micro-batch, more "
            "than %d", t->cfg.batch, T, n, MODEL_MAX_TOKENS);
    const int *lens;
    int nl = task_eval_lens(t->task, &lens);
    long long B = t->cfg.eval_batch < t->tcfg.eval_samples ? t->cfg.eval_batch : t->tcfg.eval_samples;
    for (int i = 0; i < nl; i++) {
        T = task_seq_len(t->task, lens[i]);
        if (B * T > MODEL_MAX_TOKENS)
            BAD("train key 'eval_batch': batches of %lld sequences (eval_batch or eval_samples, the smaller) of eval "
                "length %lld = %lld tokens, more than %d", B, T, B * T, MODEL_MAX_TOKENS);
    }
    return IM_OK;
}

/* Everything shared by a fresh start and a resume (from resume_step; -1 = fresh), once the three
 * configs are final. In an MPI job every rank builds the same model; only rank 0 owns the output
 * folder and the log. */
static int setup(Trainer *t, int resume_step) {
    int rc;
    if ((rc = train_cfg_validate(&t->cfg))) return rc;
    if (t->cfg.batch % dist_size())
        BAD("train key 'batch': %d is not divisible by the %d MPI processes (each process trains on batch / "
            "processes rows of every micro-batch; batch is the global batch)", t->cfg.batch, dist_size());
    if ((rc = task_create(&t->task, &t->tcfg))) return rc;
    if ((rc = batch_sizes_validate(t))) return rc;
    if (t->mcfg.vocab_size != task_vocab(t->task))
        return err_set(IM_EMISMATCH, "vocabulary mismatch: task '%s' on %s has %d tokens but the model's vocab_size is %d",
                       t->tcfg.task, t->tcfg.group, task_vocab(t->task), t->mcfg.vocab_size);
    if ((rc = model_create(&t->model, &t->mcfg))) return rc;
    if (t->cfg.decay_embeddings)
        for (int i = 0; i < t->model.tab.n; i++)
            if (!strcmp(t->model.tab.p[i].name, "word_emb.emb.weight")) t->model.tab.p[i].decay = 1;
    AdamWCfg oc = {(float)t->cfg.lr, (float)t->cfg.beta1, (float)t->cfg.beta2, (float)t->cfg.eps,
                   (float)t->cfg.weight_decay, (float)t->cfg.clip};
    if ((rc = adamw_init(&t->opt, &t->model, &oc))) return rc;
    if (t->cfg.threads > 0) k_set_threads(t->cfg.threads);
    t->losses = xcalloc((size_t)t->cfg.steps, sizeof(double));
    t->last_loss = NAN;
    DivergeCfg dc = {t->cfg.diverge_factor, t->cfg.diverge_grad_factor, t->cfg.diverge_window, t->cfg.diverge_warmup,
                     t->cfg.diverge_steps};
    diverge_init(&t->diverge, &dc);
    int overwrite = t->cfg.overwrite;
    t->cfg.overwrite = 0;   /* an action at the start, not part of the run's recorded config */
    if (dist_rank() != 0) return IM_OK;
    return open_folder(t, resume_step, overwrite);
}

static void keep_tokenizer(Trainer *t);

int trainer_init(Trainer *t, const ModelCfg *m, const TaskCfg *task, const TrainCfg *cfg) {
    memset(t, 0, sizeof *t);
    t->mcfg = *m;
    t->tcfg = *task;
    t->cfg = *cfg;
    t->best = NAN;
    t->saved_step = -1;
    int rc = setup(t, -1);
    /* a language-model run records the tokenizer it was trained with (the token file's), so
     * checkpoints carry it to `implicit eval` / `generate` / `mc` */
    if (!rc && task_kind(t->task) == TASK_LM)
        snprintf(t->tcfg.tokenizer, sizeof t->tcfg.tokenizer, "%s", task_cfg(t->task)->tokenizer);
    if (!rc) keep_tokenizer(t);
    if (!rc) {
        model_init_params(&t->model, (uint64_t)t->cfg.seed);
        rng_seed(&t->model.rng, (uint64_t)t->cfg.seed, 7);
    }
    if (!rc && dist_rank() == 0) {
        char *json = trainer_config_json(&t->mcfg, &t->tcfg, &t->cfg), path[4200];
        snprintf(path, sizeof path, "%s/config.json", t->cfg.out);
        rc = atomic_write_bytes(path, json, strlen(json));
        free(json);
        if (rc) rc = err_wrap(rc, "output folder '%s' is not writable", cfg->out);
    }
    if ((rc = dist_agree(rc))) { trainer_free(t); return rc; }
    return IM_OK;
}

/* ---- checkpoints --------------------------------------------------------------------------- */
static int save_state(Trainer *t, const char *path) {
    const ParamTable *tab = &t->model.tab;
    int n = tab->n;
    StWriteTensor *ts = xcalloc((size_t)3 * n, sizeof *ts);
    char (*names)[PARAM_NAME_LEN + 16] = xcalloc((size_t)3 * n, sizeof *names);
    const char *prefix[3] = {"param.", "adam.m.", "adam.v."};
    const float *blocks[3] = {t->model.params, t->opt.m, t->opt.v};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n; i++) {
            const ParamInfo *p = &tab->p[i];
            StWriteTensor *w = &ts[k * n + i];
            snprintf(names[k * n + i], sizeof names[0], "%s%s", prefix[k], p->name);
            w->name = names[k * n + i];
            w->dtype = ST_F32;
            w->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++) w->shape[d] = p->shape[d];
            w->data = blocks[k] + p->offset;
        }
    char step[32], adam_t[32], rs[32], ri[32], best[40], best_step[32], skipped[32];
    snprintf(step, sizeof step, "%d", t->step);
    snprintf(adam_t, sizeof adam_t, "%d", t->opt.t);
    snprintf(rs, sizeof rs, "%llu", (unsigned long long)t->model.rng.state);
    snprintf(ri, sizeof ri, "%llu", (unsigned long long)t->model.rng.inc);
    snprintf(best, sizeof best, "%.17g", t->best);
    snprintf(best_step, sizeof best_step, "%d", t->best_step);
    snprintf(skipped, sizeof skipped, "%d", t->skipped);
    char *cfg = trainer_config_json(&t->mcfg, &t->tcfg, &t->cfg);
    const char *kv[] = {"format", STATE_FORMAT, "format_version", "1", "step", step, "adam_t", adam_t,
                        "rng_state", rs, "rng_inc", ri, "best", best, "best_step", best_step,
                        "skipped", skipped, "config", cfg, NULL};
    int rc = st_write(path, ts, 3 * n, kv);
    free(cfg);
    free(names);
    free(ts);
    return rc;
}

/* The run's tokenizer file, read once, so that every checkpoint stores it and `generate` /
 * `eval` / `mc` never depend on where it was (a moved file, another machine). A resumed run whose
 * file has gone takes the copy inside its own model.safetensors. Not found at all: the
 * checkpoints keep the spec only, as before, with a warning. */
static void keep_tokenizer(Trainer *t) {
    const char *spec = t->tcfg.tokenizer;
    if (!spec[0] || !strcmp(spec, "byte")) return;
    Tokenizer *tk = NULL;
    char *kind = NULL, *data = NULL, path[4200];
    if (tok_load(&tk, spec)) {
        snprintf(path, sizeof path, "%s/model.safetensors", t->cfg.out);
        if (!ckpt_read_meta(path, "tokenizer.kind", &kind) && kind && !ckpt_read_meta(path, "tokenizer.data", &data) && data)
            tok_load_mem(&tk, kind, spec, data, strlen(data));
        free(kind);
        free(data);
    }
    if (!tk) {
        log_msg(LOG_WARN, "checkpoints will name the tokenizer '%s' without storing it: %s", spec, err_msg());
        return;
    }
    size_t n = 0;
    const char *src = tok_source(tk, &n);
    if (src && json_utf8_valid(src, n) && !memchr(src, 0, n)) {
        t->tok_data = xmalloc(n + 1);
        memcpy(t->tok_data, src, n + 1);
        t->tok_len = n;
        t->tok_kind = !strcmp(tok_kind(tk), "bpe") ? "bpe" : "hf";
    }
    tok_free(tk);
}

static int save_model(Trainer *t, const char *name) {
    char path[4200], step[32];
    snprintf(path, sizeof path, "%s/%s", t->cfg.out, name);
    snprintf(step, sizeof step, "%d", t->step);
    char *cfg = trainer_config_json(&t->mcfg, &t->tcfg, &t->cfg);
    size_t nt = task_cfg_to_json(&t->tcfg, NULL, 0);
    char *task = xmalloc(nt);
    task_cfg_to_json(&t->tcfg, task, nt);
    const char *base = strrchr(t->tcfg.tokenizer, '/');
    const char *kv[] = {"step", step, "task", task, "run_config", cfg,
                        t->tok_data ? "tokenizer.kind" : NULL, t->tok_kind, "tokenizer.file",
                        base ? base + 1 : t->tcfg.tokenizer, "tokenizer.data", t->tok_data, NULL};
    int rc = ckpt_save(&t->model, path, kv);
    free(cfg);
    free(task);
    return rc;
}

int trainer_save(Trainer *t) {
    char path[4200];
    if (dist_rank() != 0) { t->saved_step = t->step; return IM_OK; }   /* rank 0 writes for all */
    /* state first: it is self-contained, so a kill before model.safetensors is renamed loses
     * nothing that resume needs */
    snprintf(path, sizeof path, "%s/state.safetensors", t->cfg.out);
    int rc = save_state(t, path);
    if (!rc) rc = save_model(t, "model.safetensors");
    if (!rc) t->saved_step = t->step;
    return rc;
}

static int meta_u64(const StFile *f, const char *key, unsigned long long *out, const char *path) {
    const char *v = st_meta(f, key);
    char *end;
    if (!v) return err_set(IM_EFORMAT, "%s: metadata '%s' missing", path, key);
    errno = 0;
    *out = strtoull(v, &end, 10);
    if (errno || end == v || *end) return err_set(IM_EFORMAT, "%s: metadata '%s' = '%s' is not a number", path, key, v);
    return IM_OK;
}

static int load_block(const StFile *f, const char *path, const char *prefix, const ParamTable *tab, float *block) {
    char name[PARAM_NAME_LEN + 16];
    for (int i = 0; i < tab->n; i++) {
        const ParamInfo *p = &tab->p[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const StTensor *st = st_find(f, name);
        if (!st || st->dtype != ST_F32 || st_numel(st) != p->numel)
            return err_set(IM_EMISMATCH, "%s: tensor '%s' missing or of the wrong size", path, name);
        memcpy(block + p->offset, st_data(f, st), p->numel * sizeof(float));
    }
    return IM_OK;
}

int trainer_resume(Trainer *t, const char *dir, int (*overrides)(Trainer *, void *), void *ctx) {
    memset(t, 0, sizeof *t);
    char path[4200];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    StFile f;
    /* every rank reads the state itself (the folder is on a shared or local file system) */
    int rc = st_read(&f, path);
    if (rc) rc = err_wrap(rc, "cannot resume from '%s'", dir);
    const char *fmt = rc ? NULL : st_meta(&f, "format"), *cfg = rc ? NULL : st_meta(&f, "config");
    if (!rc && (!fmt || strcmp(fmt, STATE_FORMAT) || !cfg)) {
        rc = err_set(IM_EFORMAT, "%s: not a training state (format '%s')", path, fmt ? fmt : "missing");
        st_free(&f);   /* after the message: fmt points into f */
    }
    int own = rc;
    if ((rc = dist_agree(rc))) {
        if (!own) st_free(&f);
        return rc;
    }
    cfg_defaults(&t->mcfg);
    task_cfg_defaults(&t->tcfg);
    train_cfg_defaults(&t->cfg);
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&t->mcfg, &t->tcfg, &t->cfg};
    rc = keyjson_apply(tabs, objs, 3, cfg, strlen(cfg), path);
    snprintf(t->cfg.out, sizeof t->cfg.out, "%s", dir);
    ModelCfg m0 = t->mcfg;
    TaskCfg t0 = t->tcfg;
    if (!rc && overrides) rc = overrides(t, ctx);
    if (!rc && (memcmp(&m0, &t->mcfg, sizeof m0) || memcmp(&t0, &t->tcfg, sizeof t0)))
        rc = err_set(IM_EINVAL, "--resume may change training keys only, not the model or the task");
    if (!rc && t->cfg.overwrite)
        rc = err_set(IM_EINVAL, "--resume continues the run in '%s'; --overwrite starts a new one: give one of them", dir);
    unsigned long long step = 0, adam_t = 0, rs = 0, ri = 0, bs = 0, sk = 0;
    if (!rc) rc = meta_u64(&f, "step", &step, path);
    if (!rc && step > (unsigned long long)t->cfg.steps)
        rc = err_set(IM_EINVAL, "the state is at step %llu, beyond --steps %d", step, t->cfg.steps);
    if (!rc) rc = setup(t, (int)step);
    if (!rc) keep_tokenizer(t);
    if (!rc) rc = meta_u64(&f, "adam_t", &adam_t, path);
    if (!rc) rc = meta_u64(&f, "rng_state", &rs, path);
    if (!rc) rc = meta_u64(&f, "rng_inc", &ri, path);
    if (!rc) rc = meta_u64(&f, "best_step", &bs, path);
    if (!rc) rc = meta_u64(&f, "skipped", &sk, path);
    if (!rc) rc = load_block(&f, path, "param.", &t->model.tab, t->model.params);
    if (!rc) rc = ckpt_check_finite(&t->model, path);
    if (!rc) rc = load_block(&f, path, "adam.m.", &t->model.tab, t->opt.m);
    if (!rc) rc = load_block(&f, path, "adam.v.", &t->model.tab, t->opt.v);
    if (!rc) {
        t->step = (int)step;
        t->saved_step = (int)step;   /* the state we resume from is the latest checkpoint */
        t->opt.t = (int)adam_t;
        t->model.rng.state = rs;
        t->model.rng.inc = ri;
        t->best_step = (int)bs;
        t->skipped = (int)sk;
        const char *b = st_meta(&f, "best");
        t->best = b ? strtod(b, NULL) : NAN;
    }
    st_free(&f);
    if ((rc = dist_agree(rc))) trainer_free(t);
    return rc;
}

/* ---- the loop ----------------------------------------------------------------------------- */
static void log_eval(Trainer *t, const EvalRow *r) {
    if (!t->log) return;   /* ranks other than 0 */
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    json_buf_key(&b, "type"); json_buf_str(&b, "eval");
    json_buf_key(&b, "step"); json_buf_int(&b, t->step);
    json_buf_key(&b, "len"); json_buf_int(&b, r->len);
    if (r->len_min != r->len_max) { /* a range of lengths (the formal tasks' "val" split) */
        json_buf_key(&b, "len_min"); json_buf_int(&b, r->len_min);
        json_buf_key(&b, "len_max"); json_buf_int(&b, r->len_max);
    }
    if (r->p >= 0) { json_buf_key(&b, "p"); json_buf_num(&b, r->p); }
    json_buf_key(&b, "samples"); json_buf_int(&b, r->samples);
    json_buf_key(&b, "loss"); json_buf_num(&b, r->loss);
    json_buf_key(&b, "tok_acc"); json_buf_num(&b, r->tok_acc);
    json_buf_key(&b, "last10_acc"); json_buf_num(&b, r->last10_acc);
    json_buf_key(&b, "seq_acc"); json_buf_num(&b, r->seq_acc);
    if (r->chance > 0) { json_buf_key(&b, "scaled_acc"); json_buf_num(&b, r->scaled_acc); }
    if (r->ppl > 0) { json_buf_key(&b, "ppl"); json_buf_num(&b, r->ppl); }
    json_buf_key(&b, "seconds"); json_buf_num(&b, r->seconds);
    json_buf_key(&b, "mode"); json_buf_str(&b, eval_mode_name(r->mode));
    if (r->max_iter > 0) {
        json_buf_key(&b, "max_iter"); json_buf_int(&b, r->max_iter);
        json_buf_key(&b, "iters"); json_buf_num(&b, r->iters);
        if (r->iters_ref > 0) { json_buf_key(&b, "iters_ref"); json_buf_num(&b, r->iters_ref); }
    }
    if (r->agree >= 0) { json_buf_key(&b, "agree"); json_buf_num(&b, r->agree); }
    if (r->conv_sim >= 0) { json_buf_key(&b, "conv_sim"); json_buf_num(&b, r->conv_sim); }
    if (r->conv_seq >= 0) { json_buf_key(&b, "conv_seq"); json_buf_num(&b, r->conv_seq); }
    eval_json_hist(&b, r);
    json_buf_end_obj(&b);
    if (t->tb.f) {   /* TensorBoard: one tag per metric, length and p */
        char where[64], tag[128];
        snprintf(where, sizeof where, r->p >= 0 ? "len_%d_p_%.2f" : "len_%d", r->len, r->p);
        const char *names[3] = {"loss", "tok_acc", "seq_acc"};
        double vals[3] = {r->loss, r->tok_acc, r->seq_acc};
        for (int k = 0; k < 3; k++) {
            snprintf(tag, sizeof tag, "eval/%s/%s", names[k], where);
            tb_scalar(&t->tb, tag, t->step, (double)time(NULL), vals[k]);
        }
    }
    fprintf(t->log, "%s\n", b.data);
    fflush(t->log);
    json_buf_free(&b);
}

/* One "gap" record: the best metric, the loss and the token accuracy at the training cap and at the
 * tight solve (a language model's best metric is its loss; its accuracy gap reads in points). */
static void log_gap(Trainer *t, const EvalGap *g, double v_train, double v_tight) {
    if (!t->log) return;
    const EvalRow *a = &g->train_cap, *z = &g->tight;
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    json_buf_kv_str(&b, "type", "gap");
    json_buf_kv_int(&b, "step", t->step);
    json_buf_kv_int(&b, "len", a->len);
    if (a->p >= 0) json_buf_kv_num(&b, "p", a->p);
    json_buf_kv_int(&b, "samples", a->samples);
    json_buf_kv_str(&b, "metric", t->cfg.best_metric);
    json_buf_kv_num(&b, "train_cap", v_train);
    json_buf_kv_num(&b, "tight", v_tight);
    json_buf_kv_num(&b, "gap", v_train - v_tight);
    json_buf_kv_num(&b, "loss_train_cap", a->loss);
    json_buf_kv_num(&b, "loss_tight", z->loss);
    json_buf_kv_num(&b, "tok_acc_train_cap", a->tok_acc);
    json_buf_kv_num(&b, "tok_acc_tight", z->tok_acc);
    json_buf_kv_num(&b, "iters_train_cap", a->iters);
    json_buf_kv_num(&b, "iters_tight", z->iters);
    if (a->conv_sim >= 0) json_buf_kv_num(&b, "conv_train_cap", a->conv_sim);
    if (z->conv_sim >= 0) json_buf_kv_num(&b, "conv_tight", z->conv_sim);
    json_buf_kv_num(&b, "tol", t->cfg.gap_tol);
    json_buf_kv_int(&b, "max_iter", t->cfg.gap_max_iter);
    json_buf_end_obj(&b);
    fprintf(t->log, "%s\n", b.data);
    fflush(t->log);
    json_buf_free(&b);
}

/* The fixed-point gap of an implicit model at every eval (length, p): logged, and the largest
 * one shown above the progress bar. */
static int eval_gaps(Trainer *t, Progress *pg) {
    if (t->cfg.gap_samples <= 0 || t->model.type->family != MODEL_IMPLICIT) return IM_OK;
    const int *lens;
    const float *ps;
    int nl = task_eval_lens(t->task, &lens), np = task_eval_ps(t->task, &ps), hib = 1;
    int samples = t->cfg.gap_samples < t->tcfg.eval_samples ? t->cfg.gap_samples : t->tcfg.eval_samples;
    char msg[512] = "";
    double worst = -INFINITY;
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < np; j++) {
            EvalGap g;
            int rc = eval_gap(&t->model, t->task, lens[i], ps[j], samples, t->cfg.eval_batch, t->cfg.gap_tol,
                              t->cfg.gap_max_iter, &g);
            if (rc) return err_wrap(rc, "fixed-point gap");
            double a = 0, z = 0;
            eval_metric(&g.train_cap, t->cfg.best_metric, &a, &hib);
            eval_metric(&g.tight, t->cfg.best_metric, &z, &hib);
            log_gap(t, &g, a, z);
            /* the gap that matters: how much better the truncated answer is than the fixed point */
            double d = hib ? a - z : z - a;
            if (d > worst) {
                worst = d;
                snprintf(msg, sizeof msg, "fixed-point gap @ step %d, length %d: %s %.4f at the training cap, %.4f at "
                         "tol %g (%.1f iterations, %.0f%% converged)", t->step, lens[i], t->cfg.best_metric, a, z,
                         t->cfg.gap_tol, g.tight.iters, g.tight.conv_sim >= 0 ? 100 * g.tight.conv_sim : 0.0);
            }
        }
    if (msg[0] && pg && pg->mode != PROGRESS_NONE) progress_note(pg, msg);
    return IM_OK;
}

/* trainer_eval, drawing its progress on pg (NULL: none). */
static int eval_all(Trainer *t, Progress *pg) {
    /* rank 0 alone evaluates (the others wait in their next collective): evaluation reads the
     * weights, which are identical on every rank, and writes best.safetensors */
    if (dist_rank() != 0) return IM_OK;
    const int *lens;
    const float *ps;
    int nl = task_eval_lens(t->task, &lens), np = task_eval_ps(t->task, &ps);
    free(t->last_eval);
    t->last_eval = xcalloc((size_t)nl * np, sizeof *t->last_eval);
    t->n_last_eval = 0;
    double sum = 0, t0 = timer_now();
    int hib = 1;
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < np; j++) {
            EvalRow *r = &t->last_eval[t->n_last_eval];
            ProgressEval bar = {pg, t->n_last_eval, nl * np, lens[i], task_kind(t->task) == TASK_WORD ? ps[j] : -1.0f, t0};
            if (pg) progress_eval_batch(&bar, 0, t->tcfg.eval_samples);
            int rc = eval_run_progress(&t->model, t->task, lens[i], ps[j], t->tcfg.eval_samples, t->cfg.eval_batch,
                                       eval_mode_parse(t->cfg.eval_mode), r, pg ? progress_eval_batch : NULL, &bar);
            if (rc) return rc;
            t->n_last_eval++;
            log_eval(t, r);
            double v;
            eval_metric(r, t->cfg.best_metric, &v, &hib);
            sum += v;
        }
    int rc = eval_gaps(t, pg);
    if (rc) return rc;
    /* best = mean of the metric over all eval lengths and p values */
    double score = sum / t->n_last_eval;
    t->last_score = score;
    /* only a finite, strictly better score of finite weights replaces best.safetensors: a NaN
     * model scores a finite 0% accuracy, and its NaN loss compares false with everything */
    int better = isfinite(score) && (isnan(t->best) || (hib ? score > t->best : score < t->best));
    if (better && ckpt_check_finite(&t->model, "the weights") == IM_OK) {
        t->best = score;
        t->best_step = t->step;
        return save_model(t, "best.safetensors");
    }
    return IM_OK;
}

int trainer_eval(Trainer *t) {
    return eval_all(t, NULL);
}

static void log_step(Trainer *t, double loss, double acc, double gnorm, float lr, double tok_s, double elapsed) {
    if (!t->log) return;
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    json_buf_key(&b, "type"); json_buf_str(&b, "train");
    json_buf_key(&b, "step"); json_buf_int(&b, t->step);
    json_buf_key(&b, "loss"); json_buf_num(&b, loss);
    json_buf_key(&b, "acc"); json_buf_num(&b, acc);
    json_buf_key(&b, "grad_norm"); json_buf_num(&b, gnorm);
    json_buf_key(&b, "lr"); json_buf_num(&b, lr);
    json_buf_key(&b, "tok_s"); json_buf_num(&b, tok_s);
    json_buf_key(&b, "elapsed"); json_buf_num(&b, elapsed);
    const char *cur = task_cfg(t->task)->len_curriculum;
    if (cur[strspn(cur, " ")]) {   /* a curriculum (as the task reads the key): the length of the step just taken */
        json_buf_key(&b, "train_len"); json_buf_int(&b, task_train_len_at(t->task, (uint64_t)(t->step - 1)));
    }
    if (t->model.fp_phase) {
        json_buf_key(&b, "phase"); json_buf_str(&b, t->model.fp_phase);
        json_buf_key(&b, "fp_iters"); json_buf_num(&b, t->model.fp_iters);
        if (t->model.fp_iters_median > 0) { json_buf_key(&b, "fp_iters_median"); json_buf_num(&b, t->model.fp_iters_median); }
        if (t->model.type->family == MODEL_FP_RNN) { json_buf_key(&b, "fp_iters_ref"); json_buf_num(&b, t->model.fp_iters_ref); }
        if (t->model.jac_loss > 0) { json_buf_key(&b, "jac_loss"); json_buf_num(&b, t->model.jac_loss); }
        json_buf_key(&b, "fp_rel_res"); json_buf_num(&b, t->model.fp_res);
        json_buf_key(&b, "fp_rel_res_max"); json_buf_num(&b, t->model.fp_res_max);
        json_buf_key(&b, "fp_step_max"); json_buf_num(&b, t->model.fp_step_max);
        if (t->model.fp_conv >= 0) { json_buf_key(&b, "fp_conv"); json_buf_num(&b, t->model.fp_conv); }
        if (t->model.fp_extended >= 0) { json_buf_key(&b, "fp_extended"); json_buf_num(&b, t->model.fp_extended); }
    }
    json_buf_end_obj(&b);
    fprintf(t->log, "%s\n", b.data);
    fflush(t->log);
    json_buf_free(&b);
    if (t->tb.f) {   /* TensorBoard: the same scalars; a write error stops the events, not the run */
        const char *tags[8] = {"train/loss", "train/accuracy", "train/grad_norm", "train/lr", "train/tokens_per_s",
                               "solver/iterations", "solver/rel_residual", "solver/rel_residual_max"};
        double vals[8] = {loss, acc, gnorm, lr, tok_s, t->model.fp_iters, t->model.fp_res, t->model.fp_res_max};
        for (int k = 0; k < (t->model.fp_phase ? 8 : 5); k++)
            if (tb_scalar(&t->tb, tags[k], t->step, (double)time(NULL), vals[k])) tb_close(&t->tb);
    }
}

/* One optimizer step over grad_accum micro-batches. Returns the mean loss (NaN propagates). */
static double train_step(Trainer *t, int *ids, int *tg, TaskScore *s, int *rc) {
    int B = t->cfg.batch, T = task_train_seq_len_at(t->task, (uint64_t)t->step), A = t->cfg.grad_accum;
    double loss_sum = 0;
    model_zero_grad(&t->model);
    t->model.training = 1;
    t->model.train_step = t->step;   /* curricula count optimizer steps, not forwards (§12-B15) */
    t->model.train_total = t->cfg.steps;
    for (int a = 0; a < A && !*rc; a++) {
        task_train_batch(t->task, (uint64_t)t->step, a * B, B, ids, tg);
        float loss = 0;
        *rc = model_fwd(&t->model, ids, tg, B, T, &loss);
        if (*rc) break;
        model_bwd(&t->model);
        loss_sum += loss;
        task_score(s, t->model.logits, task_vocab(t->task), t->model.V, tg, B, T);
    }
    if (A > 1) k_axpby(t->model.grads, 0.0f, t->model.grads, 1.0f / (float)A, t->model.tab.total);
    return loss_sum / A;
}

/* The data-parallel step (dist_size() P > 1). Rank r runs rows r·B/P .. (r+1)·B/P - 1 of every
 * micro-batch (rows are pure functions of (step, row), so the shards make up exactly the
 * single-process batch). A micro-batch's single-process loss is the mean over its N scored
 * targets; rank r's model returns the mean over its own n_r, so its gradient enters with weight
 * n_r / N (and 1/A per micro-batch, as in train_step): the sum over ranks then equals the
 * single-process gradient up to float summation order. ids, tg: (A, B/P, T); acc: (tab.total)
 * when A > 1. Loss and scores are summed alongside; a forward error on any rank fails the step
 * on all of them.
 *
 * Dropout and other draws from the model's stream: every rank draws from its own stream derived
 * from (shared state, rank, micro-batch), so shards do not share masks; the shared state then
 * advances identically everywhere (a resumable, rank-independent checkpoint). Such a run is
 * statistically, not bitwise, equal to one process. */
static double train_step_dist(Trainer *t, int *ids, int *tg, float *acc, TaskScore *s, int *rc) {
    Model *m = &t->model;
    int P = dist_size(), B = t->cfg.batch / P, T = task_train_seq_len_at(t->task, (uint64_t)t->step), A = t->cfg.grad_accum;
    size_t BT = (size_t)B * T, n = m->tab.total;
    double *cnt = xcalloc((size_t)2 * A, sizeof(double)), red[8] = {0};   /* cnt: (2, A) own, global */
    for (int a = 0; a < A; a++) {
        task_train_batch(t->task, (uint64_t)t->step, a * t->cfg.batch + dist_rank() * B, B, ids + a * BT, tg + a * BT);
        for (size_t i = 0; i < BT; i++) cnt[a] += tg[a * BT + i] != IGNORE_INDEX;
        cnt[A + a] = cnt[a];
    }
    dist_allreduce_sum_f64(cnt + A, (size_t)A);
    model_zero_grad(m);
    if (acc) memset(acc, 0, n * sizeof(float));
    m->training = 1;
    m->train_step = t->step;
    m->train_total = t->cfg.steps;
    Rng shared = m->rng;
    TaskScore own = {0};
    int err = IM_OK;
    for (int a = 0; a < A && !err; a++) {
        if (acc) model_zero_grad(m);
        rng_seed(&m->rng, rng_hash(shared.state, (uint64_t)dist_rank(), (uint64_t)a), 7);
        float loss = 0;
        if ((err = model_fwd(m, ids + a * BT, tg + a * BT, B, T, &loss))) break;
        model_bwd(m);
        double w = cnt[A + a] > 0 ? cnt[a] / (cnt[A + a] * A) : 0;
        if (acc) k_axpby(acc, (float)w, m->grads, 1.0f, n);
        else k_axpby(m->grads, 0.0f, m->grads, (float)w, n);
        red[0] += w * loss;
        task_score(&own, m->logits, task_vocab(t->task), m->V, tg + a * BT, B, T);
    }
    m->rng = shared;
    rng_u32(&m->rng);
    free(cnt);
    red[1] = own.tok_ok, red[2] = own.tok_n, red[3] = own.last10_ok, red[4] = own.last10_n;
    red[5] = own.seq_ok, red[6] = own.seq_n, red[7] = err != IM_OK;
    dist_allreduce_sum_f64(red, 8);
    if (red[7] > 0) { *rc = dist_agree(err); return NAN; }   /* every rank sees red[7] > 0 */
    if (acc) memcpy(m->grads, acc, n * sizeof(float));
    dist_allreduce_sum(m->grads, n);
    s->tok_ok += red[1], s->tok_n += red[2], s->last10_ok += red[3], s->last10_n += red[4];
    s->seq_ok += red[5], s->seq_n += red[6];
    return red[0];
}

/* After a data-parallel run: every rank must hold rank 0's weights bit for bit (a check that the
 * steps really were identical everywhere; one pass over θ). */
static int check_replicas(const Trainer *t) {
    uint64_t h = 1469598103934665603ull, h0;
    const unsigned char *p = (const unsigned char *)t->model.params;
    for (size_t i = 0; i < t->model.tab.total * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ull;
    h0 = h;
    dist_bcast(&h0, sizeof h0, 0);
    int rc = h == h0 ? IM_OK
                     : err_set(IM_ENUM, "the weights on rank %d differ from rank 0's after step %d", dist_rank(), t->step);
    return dist_agree(rc);
}

/* The "start" record of a training process: what the report's header needs and the log lacks
 * (parameters, host, threads, build). A resumed run adds one per process. */
static void log_start(Trainer *t) {
    if (!t->log) return;
    char host[160], build[160], blas[96];
    run_report_host_cpu(host, sizeof host);
    k_blas_describe(blas, sizeof blas);
    snprintf(build, sizeof build, "blas=%s, threads=%s", blas, k_omp_name());
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    json_buf_kv_str(&b, "type", "start");
    json_buf_kv_int(&b, "step", t->step);
    json_buf_kv_int(&b, "params", (int64_t)ptab_count(&t->model.tab));
    json_buf_kv_int(&b, "threads", k_get_threads());
    json_buf_kv_int(&b, "processes", dist_size());
    json_buf_kv_str(&b, "host_cpu", host);
    json_buf_kv_str(&b, "build", build);
    json_buf_end_obj(&b);
    fprintf(t->log, "%s\n", b.data);
    fflush(t->log);
    json_buf_free(&b);
}

/* report.html in the run folder (train key `report`): a picture of the run so far. Rendering
 * reads the log back (milliseconds for thousands of records); a failure is a warning, never the
 * end of the run. */
static void write_report(Trainer *t, Progress *pg) {
    if (!t->log || !t->cfg.report) return;
    fflush(t->log);
    if (run_report_folder(t->cfg.out) == IM_OK) return;
    char msg[600];
    snprintf(msg, sizeof msg, "warning: %s/report.html not written: %s", t->cfg.out, err_msg());
    if (pg) progress_note(pg, msg);
    else fprintf(stderr, "%s\n", msg);
}

int trainer_run(Trainer *t, int stop_at) {
    int B = t->cfg.batch, T = task_train_seq_len(t->task), rc = IM_OK, P = dist_size(), len_prev = 0;
    /* a data-parallel rank generates all grad_accum shards of a step first (their target counts
     * weight the gradients) */
    size_t rows = P > 1 ? (size_t)t->cfg.grad_accum * (size_t)(B / P) : (size_t)B;
    int *ids = xmalloc(sizeof(int) * rows * T), *tg = xmalloc(sizeof(int) * rows * T);
    float *gacc = P > 1 && t->cfg.grad_accum > 1 ? xmalloc(sizeof(float) * t->model.tab.total) : NULL;
    Progress pg;
    progress_init(&pg, dist_rank() == 0 ? t->cfg.progress : "none", t->cfg.steps, t->step);
    log_start(t);
    double t0 = timer_now(), t_log = t0;
    long tokens_since_log = 0;
    int kind = sched_parse(t->cfg.schedule);
    char msg[512];
    while (t->step < t->cfg.steps && (stop_at <= 0 || t->step < stop_at)) {
        TaskScore s = {0};
        int len = task_train_len_at(t->task, (uint64_t)t->step), T_step = task_train_seq_len_at(t->task, (uint64_t)t->step);
        if (len_prev && len != len_prev) {   /* len_curriculum: rows of the next length from this step on */
            snprintf(msg, sizeof msg, "step %d: training length switches from %d to %d", t->step + 1, len_prev, len);
            progress_note(&pg, msg);
            diverge_reset(&t->diverge);   /* losses over longer rows are not comparable with the shorter ones' */
        }
        len_prev = len;
        double loss = P > 1 ? train_step_dist(t, ids, tg, gacc, &s, &rc) : train_step(t, ids, tg, &s, &rc);
        if (rc) break;
        float lr = sched_lr(kind, t->step, t->cfg.steps, t->cfg.warmup, (float)t->cfg.lr, (float)t->cfg.min_lr);
        double gnorm = optim_grad_norm(&t->model);
        if (t->model.fp_phase && (!t->phase || strcmp(t->phase, t->model.fp_phase))) {
            if (t->phase) {
                snprintf(msg, sizeof msg, "step %d: curriculum switches from %s to %s", t->step + 1, t->phase, t->model.fp_phase);
                progress_note(&pg, msg);
                diverge_reset(&t->diverge);   /* the new phase's losses are not comparable with the old */
            }
            t->phase = t->model.fp_phase;
        }
        char why[256];
        const char *bad = !isfinite(loss)                 ? "the loss is not finite"
                          : !isfinite(gnorm)              ? "the gradient norm is not finite"
                          : gnorm > t->cfg.explode_norm   ? "the gradient exploded: its norm is above explode_norm"
                          : diverge_observe(&t->diverge, loss, gnorm, why, sizeof why) == DIVERGE_DIVERGED ? why
                                                                                                          : NULL;
        if (bad) {
            snprintf(msg, sizeof msg, "step %d: %s (loss %g, grad norm %g)", t->step + 1, bad, loss, gnorm);
            if (!strcmp(t->cfg.on_nan, "stop")) {
                if (t->saved_step >= 0)
                    rc = err_set(IM_ENUM, "%s; stopped. The last good checkpoint is %s/model.safetensors (step %d)",
                                 msg, t->cfg.out, t->saved_step);
                else
                    rc = err_set(IM_ENUM, "%s; stopped before the first checkpoint (nothing was saved)", msg);
                break;
            }
            progress_note(&pg, msg);
            t->losses[t->step] = NAN;
            t->skipped++;
            t->step++;
            continue;
        }
        adamw_step(&t->opt, &t->model, lr);
        t->losses[t->step] = loss;
        t->step++;
        t->last_loss = loss;
        t->last_loss_step = t->step;
        tokens_since_log += (long)B * T_step * t->cfg.grad_accum;
        double acc = s.tok_n > 0 ? s.tok_ok / s.tok_n : 0;
        progress_tick(&pg, t->step, loss, acc);
        if (t->step % t->cfg.log_every == 0 || t->step == t->cfg.steps) {
            double now = timer_now(), tok_s = tokens_since_log / fmax(now - t_log, 1e-9);
            log_step(t, loss, acc, gnorm, lr, tok_s, now - t0);
            char fp[96] = "";
            if (t->model.fp_phase)
            {
                int k = snprintf(fp, sizeof fp, "%s: %.0f it, res %.2g", t->model.fp_phase, t->model.fp_iters, t->model.fp_res);
                /* the share of the batch's samples whose training solve reached f_tol */
                if (t->model.fp_conv >= 0 && k > 0 && k < (int)sizeof fp)
                    snprintf(fp + k, sizeof fp - k, ", %.0f%% at tol", 100 * t->model.fp_conv);
            }
            progress_update(&pg, t->step, loss, acc, tok_s, fp[0] ? fp : NULL);
            t_log = now;
            tokens_since_log = 0;
        }
        if (t->cfg.eval_every > 0 && t->step % t->cfg.eval_every == 0 && t->step < t->cfg.steps) {
            if ((rc = dist_agree(eval_all(t, &pg)))) break;
            snprintf(msg, sizeof msg, "eval @ step %d: mean %s %.4f (best %.4f @ step %d)", t->step,
                     t->cfg.best_metric, t->last_score, t->best, t->best_step);
            if (pg.mode != PROGRESS_NONE) progress_note(&pg, msg);   /* above the bar */
        }
        if (t->cfg.ckpt_every > 0 && t->step % t->cfg.ckpt_every == 0 && t->step < t->cfg.steps) {
            if ((rc = dist_agree(trainer_save(t)))) break;
            write_report(t, &pg);
        }
        if (t->step % t->cfg.log_every == 0) t_log = timer_now();   /* tok/s excludes eval and saving */
    }
    if (!rc && t->step == t->cfg.steps) {
        rc = dist_agree(eval_all(t, &pg));
        if (!rc) rc = dist_agree(trainer_save(t));
    }
    progress_done(&pg);
    if (t->log) {   /* also after a failed step: the picture shows where it went wrong */
        char why[1024];
        snprintf(why, sizeof why, "%s", err_msg());
        write_report(t, NULL);
        if (rc) err_set(rc, "%s", why);   /* the run's own error stays the message */
    }
    if (!rc && P > 1) rc = check_replicas(t);
    free(ids);
    free(tg);
    free(gacc);
    return rc;
}

void trainer_free(Trainer *t) {
    if (t->log) fclose(t->log);
    tb_close(&t->tb);
    rundir_release(t->lock);
    if (t->task) task_free(t->task);
    adamw_free(&t->opt);
    model_free(&t->model);
    free(t->last_eval);
    free(t->losses);
    free(t->tok_data);
    diverge_free(&t->diverge);
    memset(t, 0, sizeof *t);
}
