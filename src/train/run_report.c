/* run_report.c: see run_report.h. */
#include "run_report.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "../data/task.h"
#include "../io/atomic.h"
#include "../io/json.h"
#include "../io/jsonl.h"
#include "evaluate.h"

#define MAX_FILE_BYTES ((size_t)256 << 20)   /* a log of millions of steps still fits */
#define MAX_SOURCES 16                      /* evaluation files per run */
#define PLOT_W 600
#define PLOT_H 300

/* ---- the data of one run ------------------------------------------------------------------- */
/* The numeric fields of a "train" record that panels plot, listed once. */
#define TRAIN_FIELDS(X) \
    X(loss) X(acc) X(grad_norm) X(lr) X(tok_s) X(elapsed) X(fp_iters) X(fp_iters_median) X(fp_rel_res) \
    X(fp_rel_res_max) X(fp_step_max) X(fp_conv) X(jac_loss)
#define FIELD_ENUM(name) F_##name,
enum { TRAIN_FIELDS(FIELD_ENUM) NF };
#define FIELD_NAME(name) #name,
static const char *const FIELD_NAMES[NF] = {TRAIN_FIELDS(FIELD_NAME)};

typedef struct {
    int src;          /* 0: the run's log; k > 0: evaluation file k */
    double step;      /* training step (log); -1 for files */
    double len;       /* -1: the val mix */
    double p;         /* NaN: none */
    int mode;         /* EvalMode */
    double max_iter;  /* 0: explicit model */
    double samples, loss, ppl, tok_acc, last10_acc, seq_acc, scaled_acc, iters, agree, conv;
    double hist[EVAL_HIST_BINS];
    int has_hist;
} EvalPt;

typedef struct {
    int src;
    double len, width, max_iter;
    int n;
    double hi[EVAL_MAX_BUCKETS], loss[EVAL_MAX_BUCKETS];
} PosCurve;

typedef struct {
    double step, train_cap, tight;
} GapPt;

typedef struct {
    char *dir, *label;
    Json *config;
    /* training records, sorted by step */
    int nt;
    double *step, *f[NF], *wall;   /* wall: elapsed made cumulative over resumed segments */
    char **phase;
    /* evaluations */
    EvalPt *ev;
    int nev, cap_ev;
    char *src_name[MAX_SOURCES + 1];   /* [0] "log", then the files */
    char src_metric[MAX_SOURCES + 1][32];
    int nsrc;
    PosCurve *pos;
    int npos;
    GapPt *gap;
    int ngap;
    /* the log itself */
    int has_log, lines, malformed, first_bad, torn, replaced, starts;
    char host[160], build[160];
    double params, threads;
    char notes[512];
} Run;

struct RunReport {
    char *title;
    Run *runs;
    int n;
};

static char *sdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

static double num(const Json *o, const char *k) {
    const Json *v = json_get(o, k);
    return v && v->type == JSON_NUMBER ? v->number : NAN;
}

static const char *str(const Json *o, const char *k) {
    const Json *v = json_get(o, k);
    return v && v->type == JSON_STRING ? v->string : NULL;
}

static const Json *section(const Run *r, const char *name) { return json_get(r->config, name); }

RunReport *run_report_new(const char *title) {
    RunReport *r = xcalloc(1, sizeof *r);
    r->title = title ? sdup(title) : NULL;
    return r;
}

static void run_free(Run *r) {
    free(r->dir), free(r->label);
    json_free(r->config);
    free(r->step), free(r->wall);
    for (int k = 0; k < NF; k++) free(r->f[k]);
    for (int i = 0; i < r->nt; i++) free(r->phase[i]);
    free(r->phase);
    free(r->ev), free(r->pos), free(r->gap);
    for (int i = 0; i < r->nsrc; i++) free(r->src_name[i]);
}

void run_report_free(RunReport *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) run_free(&r->runs[i]);
    free(r->runs);
    free(r->title);
    free(r);
}

int run_report_runs(const RunReport *r) { return r->n; }

static Run *new_run(RunReport *r, const char *dir, const char *label) {
    Run *nr = realloc(r->runs, sizeof *r->runs * (size_t)(r->n + 1));
    CHECK(nr, "out of memory");
    r->runs = nr;
    Run *run = &r->runs[r->n++];
    memset(run, 0, sizeof *run);
    run->dir = dir ? sdup(dir) : NULL;
    run->label = sdup(label);
    run->src_name[0] = sdup("log");
    run->nsrc = 1;
    run->params = run->threads = NAN;
    return run;
}

/* Key of a log record for deduplication: a record repeated after a resume has the same type,
 * step and (evaluations) length, p, mode and iteration cap. */
static int log_key(const Json *j, char *key, size_t cap) {
    const char *type = str(j, "type");
    double step = num(j, "step");
    if (!type || !isfinite(step)) return 0;
    if (!strcmp(type, "eval") || !strcmp(type, "gap")) {
        const char *lv = str(j, "len"), *mode = str(j, "mode");
        snprintf(key, cap, "%s/%.17g/%s%.17g/%.9g/%s/%.17g", type, step, lv ? lv : "", num(j, "len"), num(j, "p"),
                 mode ? mode : "", num(j, "max_iter"));
    } else {
        snprintf(key, cap, "%s/%.17g", type, step);
    }
    return 1;
}

static void add_eval(Run *run, const Json *j, int src, double step) {
    if (run->nev == run->cap_ev) {
        run->cap_ev = run->cap_ev ? 2 * run->cap_ev : 64;
        EvalPt *e = realloc(run->ev, sizeof *e * (size_t)run->cap_ev);
        CHECK(e, "out of memory");
        run->ev = e;
    }
    EvalPt *e = &run->ev[run->nev++];
    memset(e, 0, sizeof *e);
    e->src = src;
    e->step = step;
    const char *lv = str(j, "len");
    e->len = lv && !strcmp(lv, "val") ? -1 : num(j, "len");
    e->p = num(j, "p");
    const char *mode = str(j, "mode");
    e->mode = mode && eval_mode_parse(mode) >= 0 ? eval_mode_parse(mode) : EVAL_SIMULTANEOUS;
    e->max_iter = isfinite(num(j, "max_iter")) ? num(j, "max_iter") : 0;
    e->samples = num(j, "samples"), e->loss = num(j, "loss"), e->ppl = num(j, "ppl");
    e->tok_acc = num(j, "tok_acc"), e->last10_acc = num(j, "last10_acc"), e->seq_acc = num(j, "seq_acc");
    e->scaled_acc = num(j, "scaled_acc"), e->iters = num(j, "iters"), e->agree = num(j, "agree");
    e->conv = isfinite(num(j, "conv_seq")) ? num(j, "conv_seq") : num(j, "conv_sim");
    const Json *h = json_get(j, "iter_hist");
    if (h && h->type == JSON_ARRAY && json_len(h) == EVAL_HIST_BINS) {
        e->has_hist = 1;
        for (int k = 0; k < EVAL_HIST_BINS; k++) {
            const Json *v = json_at(h, (size_t)k);
            e->hist[k] = v->type == JSON_NUMBER ? v->number : 0;
        }
    }
}

static int by_step(const void *a, const void *b) {
    const Json *x = *(const Json *const *)a, *y = *(const Json *const *)b;
    double s = num(x, "step"), t = num(y, "step");
    return s < t ? -1 : s > t;
}

static void read_train(Run *run, Json **recs, int n) {
    qsort(recs, (size_t)n, sizeof *recs, by_step);   /* stable enough: steps are unique after dedup */
    run->nt = n;
    size_t sz = sizeof(double) * (size_t)(n > 0 ? n : 1);
    run->step = xmalloc(sz), run->wall = xmalloc(sz);
    run->phase = xcalloc((size_t)(n > 0 ? n : 1), sizeof *run->phase);
    for (int k = 0; k < NF; k++) run->f[k] = xmalloc(sz);
    double offset = 0, prev = -INFINITY;
    for (int i = 0; i < n; i++) {
        run->step[i] = num(recs[i], "step");
        for (int k = 0; k < NF; k++) run->f[k][i] = num(recs[i], FIELD_NAMES[k]);
        const char *ph = str(recs[i], "phase");
        run->phase[i] = ph ? sdup(ph) : NULL;
        /* each process counts elapsed from its own start: a drop means a resumed segment */
        double e = run->f[F_elapsed][i];
        if (isfinite(e) && e < prev) offset += prev;
        run->wall[i] = isfinite(e) ? e + offset : NAN;
        if (isfinite(e)) prev = e;
    }
}

static int read_log(Run *run, const char *path) {
    Jsonl l;
    int rc = jsonl_read(&l, path, MAX_FILE_BYTES, log_key);
    if (rc) return rc;
    run->has_log = 1;
    run->lines = l.lines, run->malformed = l.malformed, run->first_bad = l.first_bad, run->torn = l.torn;
    run->replaced = l.replaced;
    Json **train = xcalloc((size_t)(l.n > 0 ? l.n : 1), sizeof *train);
    int nt = 0;
    for (int i = 0; i < l.n; i++) {
        const Json *j = l.recs[i];
        const char *type = str(j, "type");
        if (!type) continue;
        if (!strcmp(type, "train") && isfinite(num(j, "step"))) train[nt++] = l.recs[i];
        else if (!strcmp(type, "eval") && isfinite(num(j, "step"))) add_eval(run, j, 0, num(j, "step"));
        else if (!strcmp(type, "gap") && isfinite(num(j, "step"))) {
            GapPt *g = realloc(run->gap, sizeof *g * (size_t)(run->ngap + 1));
            CHECK(g, "out of memory");
            run->gap = g;
            run->gap[run->ngap++] = (GapPt){num(j, "step"), num(j, "train_cap"), num(j, "tight")};
        } else if (!strcmp(type, "start")) {
            run->starts++;
            const char *h = str(j, "host_cpu"), *b = str(j, "build");
            if (h) snprintf(run->host, sizeof run->host, "%s", h);
            if (b) snprintf(run->build, sizeof run->build, "%s", b);
            if (isfinite(num(j, "params"))) run->params = num(j, "params");
            if (isfinite(num(j, "threads"))) run->threads = num(j, "threads");
        }
    }
    read_train(run, train, nt);
    free(train);
    jsonl_free(&l);
    return IM_OK;
}

/* Read a whole regular file (NULL when it does not exist: *missing = 1). */
static int slurp(const char *path, char **text, size_t *n, int *missing) {
    struct stat st;
    *missing = 0;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        *missing = 1;
        return IM_OK;
    }
    FILE *f = fs_open_regular(path, NULL);
    if (!f) return IM_EIO;
    int rc = fs_read_all(f, MAX_FILE_BYTES, text, n);
    fclose(f);
    return rc ? err_wrap(rc, "%s", path) : IM_OK;
}

/* Parameter count from a checkpoint's header (tensor shapes), without reading its data. */
static double ckpt_params(const char *path) {
    FILE *f = fs_open_regular(path, NULL);
    if (!f) return NAN;
    unsigned char len8[8];
    double total = NAN;
    if (fread(len8, 1, 8, f) == 8) {
        unsigned long long hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
        char *h = hl > 0 && hl < (100u << 20) ? malloc(hl) : NULL;
        Json *j = NULL;
        if (h && fread(h, 1, hl, f) == hl && !json_parse(&j, h, hl) && j->type == JSON_OBJECT) {
            total = 0;
            for (size_t i = 0; i < json_len(j); i++) {
                const Json *shape = json_get(json_at(j, i), "shape");
                if (!shape || shape->type != JSON_ARRAY) continue;
                double n = 1;
                for (size_t d = 0; d < json_len(shape); d++) n *= json_at(shape, d)->number;
                total += n;
            }
        }
        json_free(j);
        free(h);
    }
    fclose(f);
    return total;
}

static int add_source(Run *run, const char *origin) {
    if (run->nsrc > MAX_SOURCES) return -1;
    run->src_name[run->nsrc] = sdup(origin);
    run->src_metric[run->nsrc][0] = 0;
    return run->nsrc++;
}

static int eval_json(Run *run, const char *text, size_t len, const char *origin) {
    Json *j;
    int rc = json_parse(&j, text, len);
    if (rc) return err_wrap(rc, "%s", origin);
    const Json *rows = json_get(j, "rows");
    if (j->type != JSON_OBJECT || !rows || rows->type != JSON_ARRAY) {
        json_free(j);
        return err_set(IM_EFORMAT, "%s: not an evaluation file (no \"rows\" array; `implicit eval --json` writes them)",
                       origin);
    }
    int src = add_source(run, origin);
    if (src < 0) {
        json_free(j);
        return err_set(IM_EINVAL, "%s: more than %d evaluation files for one run", origin, MAX_SOURCES);
    }
    const char *metric = str(j, "metric");
    if (metric) snprintf(run->src_metric[src], sizeof run->src_metric[src], "%s", metric);
    for (size_t i = 0; i < json_len(rows); i++)
        if (json_at(rows, i)->type == JSON_OBJECT) add_eval(run, json_at(rows, i), src, -1);
    const Json *pos = json_get(j, "positions");
    for (size_t i = 0; pos && pos->type == JSON_ARRAY && i < json_len(pos); i++) {
        const Json *e = json_at(pos, i), *b = json_get(e, "buckets");
        if (!b || b->type != JSON_ARRAY) continue;
        PosCurve *pc = realloc(run->pos, sizeof *pc * (size_t)(run->npos + 1));
        CHECK(pc, "out of memory");
        run->pos = pc;
        PosCurve *c = &run->pos[run->npos++];
        memset(c, 0, sizeof *c);
        c->src = src, c->len = num(e, "len"), c->width = num(e, "width");
        c->max_iter = isfinite(num(e, "max_iter")) ? num(e, "max_iter") : 0;
        for (size_t k = 0; k < json_len(b) && c->n < EVAL_MAX_BUCKETS; k++)
            c->hi[c->n] = num(json_at(b, k), "hi") + 1, c->loss[c->n++] = num(json_at(b, k), "loss");
    }
    json_free(j);
    return IM_OK;
}

int run_report_add_eval_json(RunReport *r, int run, const char *text, size_t len, const char *origin) {
    CHECK(run >= 0 && run < r->n, "run %d of %d", run, r->n);
    return eval_json(&r->runs[run], text, len, origin);
}

int run_report_add_source(RunReport *r, const char *label) {
    new_run(r, NULL, label);
    return r->n - 1;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* The evaluation files of a run folder: *.json with a "rows" array (others are skipped). */
static void scan_evals(Run *run, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[64];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 64;)
        if (ends_with(e->d_name, ".json") && strcmp(e->d_name, "config.json") && e->d_name[0] != '.')
            names[n++] = sdup(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)   /* a fixed order: by name */
        for (int k = i + 1; k < n; k++)
            if (strcmp(names[k], names[i]) < 0) { char *t = names[i]; names[i] = names[k]; names[k] = t; }
    for (int i = 0; i < n; i++) {
        char path[4200], *text = NULL;
        size_t len;
        int missing;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!slurp(path, &text, &len, &missing) && !missing && strstr(text, "\"rows\"")) {
            if (eval_json(run, text, len, names[i])) {
                size_t k = strlen(run->notes);
                snprintf(run->notes + k, sizeof run->notes - k, "%s skipped (%s). ", names[i], err_msg());
            }
        }
        free(text);
        free(names[i]);
    }
}

int run_report_add_run(RunReport *r, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return err_set(IM_EIO, "cannot open run folder '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(IM_EINVAL, "'%s' is not a folder (give the run folder that `implicit train --out` wrote)", dir);
    char cpath[4200], lpath[4200], *text = NULL;
    size_t len;
    int no_cfg, rc;
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(lpath, sizeof lpath, "%s/log.jsonl", dir);
    if ((rc = slurp(cpath, &text, &len, &no_cfg))) return rc;
    struct stat ls;
    int no_log = lstat(lpath, &ls) != 0 && errno == ENOENT;
    if (no_cfg && no_log) {
        free(text);
        return err_set(IM_EINVAL, "'%s' is not a run folder: it holds neither config.json nor log.jsonl", dir);
    }
    Json *cfg = NULL;
    if (!no_cfg && (rc = json_parse(&cfg, text, len))) {
        free(text);
        return err_wrap(rc, "%s", cpath);
    }
    free(text);
    Run *run = new_run(r, dir, dir);
    run->config = cfg;
    if (!no_log && (rc = read_log(run, lpath))) {
        run_free(run);
        r->n--;
        return rc;
    }
    if (!isfinite(run->params)) {
        snprintf(cpath, sizeof cpath, "%s/model.safetensors", dir);
        run->params = ckpt_params(cpath);
    }
    scan_evals(run, dir);
    return r->n - 1;
}

/* ---- what a run's numbers mean ------------------------------------------------------------------ */
/* The metric of the length-generalisation curve: the eval file's, else the task's. */
static const char *run_metric(const Run *r, int src) {
    if (src > 0 && r->src_metric[src][0]) return r->src_metric[src];
    const char *task = str(section(r, "task"), "task");
    if (!task) {   /* no config: from the rows themselves */
        for (int i = 0; i < r->nev; i++)
            if (r->ev[i].src == src && isfinite(r->ev[i].ppl)) return "loss";
        return "seq_acc";
    }
    return task_name_len_metric(task);
}

static int is_acc(const char *metric) { return strcmp(metric, "loss") != 0; }

static double metric_of(const EvalPt *e, const char *m) {
    return !strcmp(m, "tok_acc") ? e->tok_acc : !strcmp(m, "last10_acc") ? e->last10_acc
           : !strcmp(m, "scaled_acc") ? e->scaled_acc : !strcmp(m, "loss") ? e->loss : e->seq_acc;
}

static const char *metric_label(const char *m) {
    return !strcmp(m, "tok_acc") ? "token accuracy (%)" : !strcmp(m, "last10_acc") ? "accuracy on the last 10 tokens (%)"
           : !strcmp(m, "scaled_acc") ? "scaled accuracy (%)" : !strcmp(m, "loss") ? "loss (nats / token)"
                                      : "sequence accuracy (%)";
}

/* The rows a panel of final results draws for (run, src): for the log, its latest evaluation. */
static double final_step(const Run *r) {
    double s = -INFINITY;
    for (int i = 0; i < r->nev; i++)
        if (r->ev[i].src == 0 && r->ev[i].step > s) s = r->ev[i].step;
    return s;
}

static int is_final(const Run *r, const EvalPt *e, double fstep) { (void)r; return e->src > 0 || e->step == fstep; }

/* ---- panels -------------------------------------------------------------------------------------- */
static SvgPlot *new_plot(const char *id, const char *title, const char *xl, const char *yl) {
    SvgPlot *p = svg_plot_new(PLOT_W, PLOT_H, title, xl, yl);
    char full[64];
    snprintf(full, sizeof full, "panel-%s", id);
    svg_plot_id(p, full);
    return p;
}

/* A log axis when the positive data spans more than 20x. */
static SvgScaleKind auto_scale(const double *v, int n, int allow) {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        if (v[i] <= 0) return SVG_LINEAR;
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
    return allow && hi > 0 && hi / lo > 20 ? SVG_LOG10 : SVG_LINEAR;
}

static int has_field(const Run *r, int f) {
    for (int i = 0; i < r->nt; i++)
        if (isfinite(r->f[f][i])) return 1;
    return 0;
}

/* Debiased exponential moving average over the finite values, window about n / 25 points. */
static void smooth(const double *y, double *out, int n) {
    int finite = 0;
    for (int i = 0; i < n; i++) finite += isfinite(y[i]);
    double w = finite / 25.0 < 1 ? 1 : finite / 25.0, a = 1 - 1 / w, s = 0, wt = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i])) { out[i] = NAN; continue; }
        s = a * s + (1 - a) * y[i];
        wt = a * wt + (1 - a);
        out[i] = s / wt;
    }
}

static const char *label2(char *buf, size_t cap, const RunReport *R, const Run *r, const char *what) {
    if (R->n > 1 && what) snprintf(buf, cap, "%s: %s", r->label, what);
    else snprintf(buf, cap, "%s", R->n > 1 || !what ? r->label : what);
    return buf;
}

/* Curriculum switches: a vertical line where the logged phase changes. */
static void mark_phases(SvgPlot *p, const Run *r, int color, int use_time) {
    for (int i = 1; i < r->nt; i++)
        if (r->phase[i] && r->phase[i - 1] && strcmp(r->phase[i], r->phase[i - 1]))
            svg_plot_vline(p, use_time ? r->wall[i] : r->step[i], r->phase[i], color, 2);
}

/* Time unit for a wall-clock axis. */
static double time_unit(const RunReport *R, const char **name) {
    double mx = 0;
    for (int k = 0; k < R->n; k++)
        for (int i = 0; i < R->runs[k].nt; i++)
            if (R->runs[k].wall[i] > mx) mx = R->runs[k].wall[i];
    if (mx > 3 * 3600) { *name = "wall-clock time (h)"; return 3600; }
    if (mx > 300) { *name = "wall-clock time (min)"; return 60; }
    *name = "wall-clock time (s)";
    return 1;
}

/* A training field vs step or wall-clock time, every run; raw + smoothed when smoothed. */
/* A panel of one training field: the table lines of PANELS below. */
typedef struct {
    const char *id, *title, *ylabel;
    int field, use_time, smoothed, log_ok, phases;
    double scale, ymax;   /* values x scale; ymax > 0: the y axis is 0..ymax */
} TrainPanel;

static SvgPlot *train_panel(const RunReport *R, const TrainPanel *tp) {
    const char *id = tp->id, *title = tp->title, *yl = tp->ylabel;
    int f = tp->field, use_time = tp->use_time, smoothed = tp->smoothed, log_ok = tp->log_ok, phases = tp->phases;
    double scale = tp->scale;
    int any = 0;
    for (int k = 0; k < R->n; k++) any |= has_field(&R->runs[k], f);
    if (!any) return NULL;
    const char *tname = "step";
    double tu = use_time ? time_unit(R, &tname) : 1;
    SvgPlot *p = new_plot(id, title, use_time ? tname : "training step", yl);
    double *all = NULL;
    int nall = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        if (!has_field(r, f)) continue;
        double *x = xmalloc(sizeof(double) * (size_t)r->nt), *y = xmalloc(sizeof(double) * (size_t)r->nt);
        double *s = xmalloc(sizeof(double) * (size_t)r->nt);
        all = realloc(all, sizeof(double) * (size_t)(nall + r->nt));
        CHECK(all, "out of memory");
        for (int i = 0; i < r->nt; i++) {
            x[i] = use_time ? r->wall[i] / tu : r->step[i];
            y[i] = r->f[f][i] * scale;
            all[nall++] = y[i];
        }
        if (smoothed) {
            smooth(y, s, r->nt);
            svg_plot_line(p, x, y, r->nt, &(SvgStyle){.color = k, .width = 1, .opacity = 0.35, .legend = R->n == 1},
                          "raw");
            svg_plot_line(p, x, s, r->nt, &(SvgStyle){.color = k, .width = 2, .legend = 1},
                          R->n == 1 ? "smoothed" : r->label);
        } else {
            svg_plot_line(p, x, y, r->nt, &(SvgStyle){.color = k, .legend = R->n > 1}, r->label);
        }
        if (phases) mark_phases(p, r, k, use_time);
        free(x), free(y), free(s);
    }
    svg_plot_axes(p, SVG_LINEAR, auto_scale(all, nall, log_ok));
    if (tp->ymax > 0) svg_plot_ylim(p, 0, tp->ymax);
    free(all);
    return p;
}

/* Two training fields of the solver (mean solid, max dashed) with the curriculum switches. */
static SvgPlot *solver_panel(const RunReport *R, const char *id, const char *title, const char *yl, int fmean,
                             const char *mean_name, int fmax, const char *max_name, int log_ok) {
    int any = 0;
    for (int k = 0; k < R->n; k++) any |= has_field(&R->runs[k], fmean) || (fmax >= 0 && has_field(&R->runs[k], fmax));
    if (!any) return NULL;
    SvgPlot *p = new_plot(id, title, "training step", yl);
    double *all = NULL;
    int nall = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        int fs[2] = {fmean, fmax};
        const char *names[2] = {mean_name, max_name};
        for (int m = 0; m < 2; m++) {
            if (fs[m] < 0 || !has_field(r, fs[m])) continue;
            char lab[300];
            svg_plot_line(p, r->step, r->f[fs[m]], r->nt, &(SvgStyle){.color = k, .dash = m, .legend = 1},
                          label2(lab, sizeof lab, R, r, names[m]));
            all = realloc(all, sizeof(double) * (size_t)(nall + r->nt));
            CHECK(all, "out of memory");
            memcpy(all + nall, r->f[fs[m]], sizeof(double) * (size_t)r->nt);
            nall += r->nt;
        }
        mark_phases(p, r, k, 0);
    }
    svg_plot_axes(p, SVG_LINEAR, auto_scale(all, nall, log_ok));
    free(all);
    return p;
}

static SvgPlot *p_iters(const RunReport *R) {
    int fp_rnn = 0;
    for (int k = 0; k < R->n; k++) fp_rnn |= has_field(&R->runs[k], F_fp_iters_median);
    if (fp_rnn)
        return solver_panel(R, "solver-iters", "Solver iterations per training step", "f-evaluations", F_fp_iters,
                            "mean over layers", F_fp_iters_median, "median over layers", 0);
    return solver_panel(R, "solver-iters", "Solver iterations per training step", "f-evaluations", F_fp_iters,
                        "mean over tokens", F_fp_step_max, "latest per-sample best step", 0);
}
static SvgPlot *p_res(const RunReport *R) {
    return solver_panel(R, "solver-res", "Solver residual per training step", "relative residual |f(z) - z| / |z|",
                        F_fp_rel_res, "mean over samples", F_fp_rel_res_max, "max over samples", 1);
}
/* ---- evaluation panels ---- */
static const SvgMarker MARKS[4] = {SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND};

/* Distinct values of a field over a run's final rows of one source, sorted (at most cap). */
static int distinct(const Run *r, int src, double fstep, int which, double *out, int cap) {
    int n = 0;
    for (int i = 0; i < r->nev; i++) {
        const EvalPt *e = &r->ev[i];
        if (e->src != src || !is_final(r, e, fstep)) continue;
        double v = which == 0 ? e->len : which == 1 ? e->p : e->max_iter;
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= out[k] == v || (isnan(v) && isnan(out[k]));
        if (!seen && n < cap) out[n++] = v;
    }
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (out[k] < out[i]) { double t = out[i]; out[i] = out[k]; out[k] = t; }
    return n;
}

static int same(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

static void series_name(char *buf, size_t cap, const RunReport *R, const Run *r, int src, const char *extra) {
    size_t k = 0;
    buf[0] = 0;
    if (R->n > 1) k += (size_t)snprintf(buf + k, cap - k, "%s", r->label);
    if (src > 0 && k < cap) k += (size_t)snprintf(buf + k, cap - k, "%s%s", k ? " " : "", r->src_name[src]);
    if (extra && *extra && k < cap) snprintf(buf + k, cap - k, "%s%s", k ? ", " : "", extra);
    if (!buf[0]) snprintf(buf, cap, "%s", src > 0 ? r->src_name[src] : "final evaluation");
}

/* y(len) per (run, source, p) at the largest iteration cap: accuracy / loss, agreement or iterations. */
enum { Y_METRIC, Y_AGREE, Y_ITERS };
static SvgPlot *by_length(const RunReport *R, const char *id, const char *title, int ywhat) {
    SvgPlot *p = NULL;
    const char *yl = NULL;
    int acc = 1, k_series = 0;
    double all_len[256];
    int nall = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        double fstep = final_step(r);
        for (int src = 0; src < r->nsrc; src++) {
            const char *m = run_metric(r, src);
            double ps[16], caps[32];
            int np = distinct(r, src, fstep, 1, ps, 16), nc = distinct(r, src, fstep, 2, caps, 32);
            if (!nc) continue;
            double cap = caps[nc - 1];
            for (int j = 0; j < np; j++) {
                double x[256], y[256];
                int n = 0;
                for (int i = 0; i < r->nev && n < 256; i++) {
                    const EvalPt *e = &r->ev[i];
                    if (e->src != src || !is_final(r, e, fstep) || e->len < 1 || e->max_iter != cap || !same(e->p, ps[j]))
                        continue;
                    double v = ywhat == Y_METRIC ? metric_of(e, m) * (is_acc(m) ? 100 : 1)
                               : ywhat == Y_AGREE ? e->agree * 100 : e->iters;
                    if (!isfinite(v) || (ywhat == Y_AGREE && e->agree < 0)) continue;
                    x[n] = e->len, y[n] = v, n++;
                }
                if (n == 0) continue;
                for (int a = 0; a < n; a++)   /* by length */
                    for (int b = a + 1; b < n; b++)
                        if (x[b] < x[a]) { double t = x[a]; x[a] = x[b]; x[b] = t; t = y[a]; y[a] = y[b]; y[b] = t; }
                if (!p) {
                    acc = is_acc(m);
                    yl = ywhat == Y_METRIC ? metric_label(m) : ywhat == Y_AGREE ? "argmax agreement (%)"
                                                                                : "solver iterations (per token or forward)";
                    p = new_plot(id, title, "evaluation length (tokens)", yl);
                }
                char extra[64] = "", lab[400];
                if (np > 1 || !isnan(ps[j])) snprintf(extra, sizeof extra, isnan(ps[j]) ? "" : "p %.2f", ps[j]);
                series_name(lab, sizeof lab, R, r, src, extra);
                svg_plot_line(p, x, y, n, &(SvgStyle){.color = k_series % SVG_N_COLORS, .marker = MARKS[j % 4],
                                                      .dash = src > 0, .legend = 1}, lab);
                for (int i = 0; i < n && nall < 256; i++) all_len[nall++] = x[i];
                if (ywhat == Y_METRIC && acc) {   /* the longest length above 90% */
                    int best = -1;
                    for (int i = 0; i < n; i++)
                        if (y[i] > 90) best = i;
                    if (best >= 0) {
                        char note[64];
                        snprintf(note, sizeof note, "longest > 90%%: %g", x[best]);
                        svg_plot_note(p, x[best], y[best], note, k_series % SVG_N_COLORS);
                    }
                }
                k_series++;
            }
        }
        double T = num(section(r, "task"), "train_len");
        if (p && isfinite(T) && T > 0) {
            char lab[64];
            snprintf(lab, sizeof lab, "train length %g", T);
            int dup = 0;
            for (int q = 0; q < k; q++) dup |= num(section(&R->runs[q], "task"), "train_len") == T;
            if (!dup) svg_plot_vline(p, T, lab, 6, 1);
        }
    }
    if (!p) return NULL;
    if (!k_series) { svg_plot_free(p); return NULL; }
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < nall; i++) lo = all_len[i] < lo ? all_len[i] : lo, hi = all_len[i] > hi ? all_len[i] : hi;
    svg_plot_axes(p, hi >= 4 * lo ? SVG_LOG2 : SVG_LINEAR, SVG_LINEAR);   /* lengths double: log2 */
    if ((ywhat == Y_METRIC && acc) || ywhat == Y_AGREE) svg_plot_ylim(p, 0, 100);
    return p;
}

static SvgPlot *p_eval_len(const RunReport *R) { return by_length(R, "eval-len", "Accuracy per evaluation length", Y_METRIC); }
static SvgPlot *p_duality(const RunReport *R) {
    return by_length(R, "duality", "Duality: simultaneous vs sequential agreement per length", Y_AGREE);
}
static SvgPlot *p_eval_iters(const RunReport *R) {
    return by_length(R, "eval-iters", "Solver iterations at evaluation per length", Y_ITERS);
}

/* The lengths, p values and iteration caps of a source's final rows. */
typedef struct {
    double fstep, ps[16], lens[64], caps[32];
    int np, nl, nc;
} SourceGrid;

static void source_grid(const Run *r, int src, SourceGrid *g) {
    g->fstep = final_step(r);
    g->np = distinct(r, src, g->fstep, 1, g->ps, 16);
    g->nl = distinct(r, src, g->fstep, 0, g->lens, 64);
    g->nc = distinct(r, src, g->fstep, 2, g->caps, 32);
}

/* The final row of (src, len, p, cap); NULL when there is none. */
static const EvalPt *grid_row(const Run *r, int src, const SourceGrid *g, double len, double p, double cap) {
    for (int i = 0; i < r->nev; i++) {
        const EvalPt *e = &r->ev[i];
        if (e->src == src && is_final(r, e, g->fstep) && e->len == len && same(e->p, p) && e->max_iter == cap) return e;
    }
    return NULL;
}

/* Accuracy vs p (word problems with several p), one series per length; or (ttc) the metric vs the
 * iteration cap, one series per length and p. */
static SvgPlot *grid_panel(const RunReport *R, int ttc) {
    SvgPlot *p = NULL;
    int ks = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        for (int src = 0; src < r->nsrc; src++) {
            SourceGrid g;
            source_grid(r, src, &g);
            const char *m = run_metric(r, src);
            if (ttc ? g.nc < 2 : g.np < 2 || !g.nc || !is_acc(m)) continue;
            for (int l = 0; l < g.nl && (ttc || l < 6); l++)
                for (int j = 0; j < (ttc ? g.np : 1) && ks < SVG_MAX_SERIES; j++) {
                    double x[32], y[32];
                    int n = 0;
                    for (int c = 0; c < (ttc ? g.nc : g.np); c++) {
                        double pv = ttc ? g.ps[j] : g.ps[c], cap = ttc ? g.caps[c] : g.caps[g.nc - 1];
                        const EvalPt *e = grid_row(r, src, &g, g.lens[l], pv, cap);
                        if (!e || (!ttc && isnan(e->p))) continue;
                        x[n] = ttc ? cap : e->p, y[n] = metric_of(e, m) * (is_acc(m) ? 100 : 1), n++;
                    }
                    if (n < 2) continue;
                    if (!p) {
                        p = ttc ? new_plot("ttc", "Test-time compute: accuracy vs iteration cap", "maximum solver iterations",
                                           metric_label(m))
                                : new_plot("eval-p", "Accuracy per p (share of easy tokens)", "p", metric_label(m));
                        if (is_acc(m)) svg_plot_ylim(p, 0, 100);
                        if (ttc) svg_plot_axes(p, SVG_LOG2, SVG_LINEAR);
                    }
                    char extra[64], lab[400];
                    if (g.lens[l] < 0) snprintf(extra, sizeof extra, "val mix");
                    else if (!ttc || isnan(g.ps[j])) snprintf(extra, sizeof extra, "length %g", g.lens[l]);
                    else snprintf(extra, sizeof extra, "length %g, p %.2f", g.lens[l], g.ps[j]);
                    series_name(lab, sizeof lab, R, r, src, extra);
                    svg_plot_line(p, x, y, n, &(SvgStyle){.color = ks % SVG_N_COLORS, .marker = MARKS[k % 4], .legend = 1},
                                  lab);
                    ks++;
                }
        }
    }
    return p;
}

static SvgPlot *p_eval_p(const RunReport *R) { return grid_panel(R, 0); }
static SvgPlot *p_ttc(const RunReport *R) { return grid_panel(R, 1); }

/* Per-token iteration histograms of sequential evaluations (share of tokens per bin). */
static SvgPlot *p_hist(const RunReport *R) {
    static const char *const BINS[EVAL_HIST_BINS] = {"0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", ">128"};
    SvgPlot *p = NULL;
    int ks = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        double fstep = final_step(r);
        for (int i = 0; i < r->nev && ks < 8; i++) {
            const EvalPt *e = &r->ev[i];
            if (!e->has_hist || !is_final(r, e, fstep)) continue;
            double tot = 0, v[EVAL_HIST_BINS];
            for (int b = 0; b < EVAL_HIST_BINS; b++) tot += e->hist[b];
            if (!(tot > 0)) continue;
            for (int b = 0; b < EVAL_HIST_BINS; b++) v[b] = 100 * e->hist[b] / tot;
            if (!p) {
                p = new_plot("hist", "Solver iterations per token (sequential evaluation)", "iterations per token",
                             "tokens (%)");
                svg_plot_categories(p, BINS, EVAL_HIST_BINS);
            }
            char extra[96], lab[400];
            if (isnan(e->p)) snprintf(extra, sizeof extra, "length %g, cap %g", e->len, e->max_iter);
            else snprintf(extra, sizeof extra, "length %g, p %.2f, cap %g", e->len, e->p, e->max_iter);
            series_name(lab, sizeof lab, R, r, e->src, extra);
            svg_plot_bars(p, v, &(SvgStyle){.color = ks, .legend = 1}, lab);
            ks++;
        }
    }
    return p;
}

/* The mean evaluation metric over all lengths and p at every evaluation during training. */
static SvgPlot *p_eval_steps(const RunReport *R) {
    SvgPlot *p = NULL;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        const char *m = run_metric(r, 0);
        double x[512], y[512];
        int n = 0;
        for (int i = 0; i < r->nev; i++) {
            const EvalPt *e = &r->ev[i];
            if (e->src) continue;
            int slot = -1;
            for (int q = 0; q < n; q++)
                if (x[q] == e->step) slot = q;
            if (slot < 0 && n < 512) slot = n++, x[slot] = e->step, y[slot] = 0;
            if (slot >= 0) y[slot] += 1;   /* counts first, then the sum */
        }
        if (n < 2) continue;
        double *sum = xcalloc((size_t)n, sizeof *sum);
        for (int i = 0; i < r->nev; i++) {
            const EvalPt *e = &r->ev[i];
            for (int q = 0; q < n && !e->src; q++)
                if (x[q] == e->step) sum[q] += metric_of(e, m);
        }
        for (int q = 0; q < n; q++) y[q] = sum[q] / y[q] * (is_acc(m) ? 100 : 1);
        free(sum);
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++)
                if (x[b] < x[a]) { double t = x[a]; x[a] = x[b]; x[b] = t; t = y[a]; y[a] = y[b]; y[b] = t; }
        if (!p) {
            p = new_plot("eval-steps", "Evaluation during training (mean over lengths and p)", "training step",
                         metric_label(m));
            if (is_acc(m)) svg_plot_ylim(p, 0, 100);
        }
        svg_plot_line(p, x, y, n, &(SvgStyle){.color = k, .marker = SVG_MARK_CIRCLE, .legend = R->n > 1}, r->label);
    }
    return p;
}

/* The fixed-point gap: the best metric at the training cap vs a tight solve, at each evaluation. */
static SvgPlot *p_gap(const RunReport *R) {
    SvgPlot *p = NULL;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        if (r->ngap < 1) continue;
        double *x = xmalloc(sizeof(double) * (size_t)r->ngap), *a = xmalloc(sizeof(double) * (size_t)r->ngap);
        double *b = xmalloc(sizeof(double) * (size_t)r->ngap);
        /* the records of one step (lengths, p) averaged */
        int n = 0;
        for (int i = 0; i < r->ngap; i++) {
            int q = 0;
            while (q < n && x[q] != r->gap[i].step) q++;
            if (q == n) x[n] = r->gap[i].step, a[n] = b[n] = 0, n++;
        }
        for (int q = 0; q < n; q++) {
            int c = 0;
            for (int i = 0; i < r->ngap; i++)
                if (r->gap[i].step == x[q]) a[q] += r->gap[i].train_cap, b[q] += r->gap[i].tight, c++;
            a[q] /= c, b[q] /= c;
        }
        if (!p) p = new_plot("gap", "Fixed-point gap: training iteration cap vs a tight solve", "training step",
                             "best metric (mean over lengths)");
        char lab[300];
        svg_plot_line(p, x, a, n, &(SvgStyle){.color = k, .marker = SVG_MARK_CIRCLE, .legend = 1},
                      label2(lab, sizeof lab, R, r, "at the training cap"));
        svg_plot_line(p, x, b, n, &(SvgStyle){.color = k, .dash = 1, .marker = SVG_MARK_SQUARE, .legend = 1},
                      label2(lab, sizeof lab, R, r, "tight solve"));
        free(x), free(a), free(b);
    }
    return p;
}

/* Loss by position in long windows (language models): the length-extrapolation curve. */
static SvgPlot *p_positions(const RunReport *R) {
    SvgPlot *p = NULL;
    int ks = 0;
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        for (int i = 0; i < r->npos; i++) {
            const PosCurve *c = &r->pos[i];
            if (c->n < 1) continue;
            if (!p) p = new_plot("positions", "Loss by position (length extrapolation)", "position in the window (tokens)",
                                 "loss (nats / token)");
            char extra[64], lab[400];
            if (c->max_iter > 0) snprintf(extra, sizeof extra, "cap %g", c->max_iter);
            else extra[0] = 0;
            series_name(lab, sizeof lab, R, r, c->src, extra);
            svg_plot_line(p, c->hi, c->loss, c->n, &(SvgStyle){.color = ks % SVG_N_COLORS, .marker = SVG_MARK_CIRCLE,
                                                                .legend = 1}, lab);
            ks++;
        }
        double ctx = num(section(r, "task"), "context");
        if (p && isfinite(ctx) && ctx > 0) svg_plot_vline(p, ctx, "training context", 6, 1);
    }
    return p;
}

typedef struct {
    const char *section;                  /* heading the panel goes under */
    SvgPlot *(*draw)(const RunReport *R); /* NULL: a panel of one training field, `train` */
    TrainPanel train;
    const char *caption;
} PanelSpec;

#define LOSS_Y "loss (nats / token)"
#define ACC_Y "token accuracy (%)"
/* Every panel, in page order; each draws only when its data exists (docs/report.md). */
static const PanelSpec PANELS[] = {
    {"Training", NULL, {"loss-step", "Training loss", LOSS_Y, F_loss, 0, 1, 1, 1, 1, 0},
     "Thin: the logged loss of each step; thick: its moving average; dotted: curriculum switches."},
    {"Training", NULL, {"loss-time", "Training loss vs wall-clock time", LOSS_Y, F_loss, 1, 1, 1, 0, 1, 0},
     "The same against wall-clock time (resumed segments joined)."},
    {"Training", NULL, {"acc-step", "Training token accuracy", ACC_Y, F_acc, 0, 1, 0, 0, 100, 100},
     "Next-token accuracy of the training batches."},
    {"Training", NULL, {"acc-time", "Training token accuracy vs wall-clock time", ACC_Y, F_acc, 1, 1, 0, 0, 100, 100}, NULL},
    {"Training", NULL, {"lr", "Learning rate", "learning rate", F_lr, 0, 0, 0, 0, 1, 0},
     "The scheduled learning rate (warm-up, then decay)."},
    {"Training", NULL, {"grad-norm", "Gradient norm (before clipping)", "global L2 norm", F_grad_norm, 0, 0, 1, 0, 1, 0},
     "The global gradient norm, before clipping."},
    {"Training", NULL, {"tok-s", "Training throughput", "tokens / s", F_tok_s, 0, 0, 0, 0, 1, 0},
     "Training tokens per second between log lines (evaluation and saving excluded)."},
    {"Solver", p_iters, {0}, "Fixed-point solver f-evaluations of the training forward; dotted: curriculum switches."},
    {"Solver", p_res, {0}, "Relative residual of the fixed point reached in the training forward."},
    {"Solver", NULL, {"solver-conv", "Training solves that reached the tolerance", "sequences converged (%)", F_fp_conv, 0,
                      0, 0, 1, 100, 100}, "Share of the training sequences whose solve reached f_tol."},
    {"Evaluation", p_eval_steps, {0}, "The evaluations run during training."},
    {"Evaluation", p_eval_len, {0}, "Length generalisation: the final evaluation per length (dashed: evaluation files); "
                                    "circled: the longest length above 90%."},
    {"Evaluation", p_eval_p, {0}, NULL},
    {"Evaluation", p_positions, {0}, "Language models: loss per bucket of positions in windows longer than the training "
                                     "context."},
    {"Evaluation", p_ttc, {0}, "Test-time compute: one evaluation per iteration cap (`implicit eval --max_iters`)."},
    {"Evaluation", p_eval_iters, {0}, NULL},
    {"Evaluation", p_hist, {0}, "How many solver iterations each token took, token by token."},
    {"Evaluation", p_duality, {0}, "Share of positions where the simultaneous and the sequential pass predict the same "
                                   "token."},
    {"Evaluation", p_gap, {0}, "Implicit models: the same evaluation at the training iteration cap and with a tight solve."},
};

/* ---- tables -------------------------------------------------------------------------------------- */
static void td(TextBuf *o, const char *cls, const char *text) {
    text_printf(o, "<td%s>", cls ? cls : "");
    text_escape(o, text);
    text_add(o, "</td>");
}

static void fmt_num(char *b, size_t cap, double v, const char *fmt) {
    if (isfinite(v)) snprintf(b, cap, fmt, v);
    else snprintf(b, cap, "-");
}

static void run_table(const RunReport *R, TextBuf *o) {
    text_add(o, "<table id=\"runs\"><tr><th class=\"l\">run</th><th class=\"l\">model</th><th>parameters</th>"
                "<th class=\"l\">task</th><th>steps</th><th>wall-clock</th><th class=\"l\">host CPU</th>"
                "<th class=\"l\">log</th></tr>\n");
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        const Json *m = section(r, "model"), *t = section(r, "task"), *tr = section(r, "train");
        char b[1100], c[200];
        text_printf(o, "<tr><td class=\"l\"><span class=\"sw\" style=\"background:%s\"></span>", svg_color(k));
        text_escape(o, r->label);
        text_add(o, "</td>");
        if (m) snprintf(b, sizeof b, "%s, d_model %g, %g layer%s", str(m, "model") ? str(m, "model") : "?",
                        num(m, "d_model"), num(m, "n_layer"), num(m, "n_layer") == 1 ? "" : "s");
        else snprintf(b, sizeof b, "-");
        td(o, " class=\"l\"", b);
        fmt_num(b, sizeof b, r->params, "%.0f");
        td(o, NULL, b);
        const char *task = str(t, "task");
        if (task && !strcmp(task, "word"))
            snprintf(b, sizeof b, "word problem %s x %s, p %.2f, length %g", str(t, "group") ? str(t, "group") : "?",
                     str(t, "monoid") ? str(t, "monoid") : "?", num(t, "p"), num(t, "train_len"));
        else if (task && !strcmp(task, "lm"))
            snprintf(b, sizeof b, "language model on %s, context %g", str(t, "data") ? str(t, "data") : "?",
                     num(t, "context"));
        else if (task) snprintf(b, sizeof b, "%s, train length %g", task, num(t, "train_len"));
        else snprintf(b, sizeof b, "-");
        td(o, " class=\"l\"", b);
        double last = r->nt ? r->step[r->nt - 1] : NAN;
        if (isfinite(last)) snprintf(b, sizeof b, "%.0f of %g", last, num(tr, "steps"));
        else fmt_num(b, sizeof b, num(tr, "steps"), "0 of %g");
        td(o, NULL, b);
        double w = r->nt ? r->wall[r->nt - 1] : NAN;
        if (isfinite(w)) snprintf(b, sizeof b, w >= 3600 ? "%.1f h" : w >= 120 ? "%.1f min" : "%.1f s",
                                  w >= 3600 ? w / 3600 : w >= 120 ? w / 60 : w);
        else snprintf(b, sizeof b, "-");
        td(o, NULL, b);
        snprintf(b, sizeof b, "%s", r->host[0] ? r->host : "-");
        if (isfinite(r->threads)) {
            snprintf(c, sizeof c, ", %g thread%s", r->threads, r->threads == 1 ? "" : "s");
            strncat(b, c, sizeof b - strlen(b) - 1);
        }
        if (r->build[0]) snprintf(c, sizeof c, " (%s)", r->build), strncat(b, c, sizeof b - strlen(b) - 1);
        td(o, " class=\"l\"", b);
        /* what the tolerant reader had to do */
        size_t n = 0;
        b[0] = 0;
        if (!r->dir) n += (size_t)snprintf(b, sizeof b, "evaluation only");
        else if (!r->has_log) n += (size_t)snprintf(b, sizeof b, "no log.jsonl yet");
        else n += (size_t)snprintf(b, sizeof b, "%d records", r->lines);
        if (r->malformed && n < sizeof b)
            n += (size_t)snprintf(b + n, sizeof b - n, "; %d malformed line%s skipped (first: line %d)", r->malformed,
                                  r->malformed == 1 ? "" : "s", r->first_bad);
        if (r->torn && n < sizeof b) n += (size_t)snprintf(b + n, sizeof b - n, "; torn last line skipped");
        if (r->replaced && n < sizeof b)
            n += (size_t)snprintf(b + n, sizeof b - n, "; %d records replaced by later ones (resumed run)", r->replaced);
        if (r->starts > 1 && n < sizeof b) n += (size_t)snprintf(b + n, sizeof b - n, "; %d segments", r->starts);
        if (r->notes[0] && n < sizeof b) snprintf(b + n, sizeof b - n, "; %s", r->notes);
        td(o, " class=\"l\"", b);
        text_add(o, "</tr>\n");
    }
    text_add(o, "</table>\n");
}

static void eval_table(const RunReport *R, TextBuf *o) {
    int any = 0;
    for (int k = 0; k < R->n; k++) any |= R->runs[k].nev > 0;
    if (!any) return;
    text_add(o, "<h2>Final evaluation</h2>\n<table id=\"final-eval\"><tr><th class=\"l\">run</th><th class=\"l\">source</th>"
                "<th>length</th><th>p</th><th class=\"l\">mode</th><th>samples</th><th>loss</th><th>ppl</th>"
                "<th>tok acc</th><th>last10 acc</th><th>seq acc</th><th>max it</th><th>iters</th><th>agree</th></tr>\n");
    for (int k = 0; k < R->n; k++) {
        const Run *r = &R->runs[k];
        double fstep = final_step(r);
        for (int i = 0; i < r->nev; i++) {
            const EvalPt *e = &r->ev[i];
            if (!is_final(r, e, fstep)) continue;
            char b[64], s[300];
            text_add(o, "<tr>");
            td(o, " class=\"l\"", r->label);
            if (e->src) snprintf(s, sizeof s, "%s", r->src_name[e->src]);
            else snprintf(s, sizeof s, "log, step %.0f", e->step);
            td(o, " class=\"l\"", s);
            if (e->len < 0) snprintf(b, sizeof b, "val");
            else fmt_num(b, sizeof b, e->len, "%.0f");
            td(o, NULL, b);
            fmt_num(b, sizeof b, e->p, "%.2f"), td(o, NULL, b);
            td(o, " class=\"l\"", eval_mode_name(e->mode));
            fmt_num(b, sizeof b, e->samples, "%.0f"), td(o, NULL, b);
            fmt_num(b, sizeof b, e->loss, "%.4f"), td(o, NULL, b);
            fmt_num(b, sizeof b, e->ppl, "%.3f"), td(o, NULL, b);
            fmt_num(b, sizeof b, 100 * e->tok_acc, "%.2f%%"), td(o, NULL, b);
            fmt_num(b, sizeof b, 100 * e->last10_acc, "%.2f%%"), td(o, NULL, b);
            fmt_num(b, sizeof b, 100 * e->seq_acc, "%.2f%%"), td(o, NULL, b);
            fmt_num(b, sizeof b, e->max_iter > 0 ? e->max_iter : NAN, "%.0f"), td(o, NULL, b);
            fmt_num(b, sizeof b, e->max_iter > 0 ? e->iters : NAN, "%.1f"), td(o, NULL, b);
            fmt_num(b, sizeof b, e->agree >= 0 ? 100 * e->agree : NAN, "%.1f%%"), td(o, NULL, b);
            text_add(o, "</tr>\n");
        }
    }
    text_add(o, "</table>\n");
}

/* ---- the page ------------------------------------------------------------------------------------- */
static const char CSS[] =
    "body{font-family:sans-serif;margin:16px 20px;color:#222;max-width:1240px}"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #ccc}"
    "p.meta{font-size:12px;color:#555;margin:0 0 8px}"
    ".grid{display:flex;flex-wrap:wrap;gap:14px}"
    "figure{margin:0;break-inside:avoid;page-break-inside:avoid;width:600px;max-width:100%}"
    "figcaption{font-size:12px;color:#555;margin-top:2px}"
    "svg.plot{max-width:100%;height:auto;display:block}"
    "table{border-collapse:collapse;font-size:12px;margin:6px 0}"
    "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right;vertical-align:top}th{background:#f2f2f2}"
    ".l{text-align:left}.sw{display:inline-block;width:10px;height:10px;margin-right:5px}"
    "@media print{body{margin:0;max-width:none}h2{break-after:avoid}.grid{gap:6px}"
    "*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}";

void run_report_render(const RunReport *R, TextBuf *o) {
    char title[512];
    if (R->title) snprintf(title, sizeof title, "%s", R->title);
    else if (R->n == 1) snprintf(title, sizeof title, "Training report: %s", R->runs[0].label);
    else snprintf(title, sizeof title, "Training report: %d runs", R->n);
    text_add(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
    text_escape(o, title);
    text_printf(o, "</title>\n<meta name=\"generator\" content=\"implicit %s\">\n<style>%s</style>\n</head><body>\n",
#ifdef IM_VERSION
                IM_VERSION,
#else
                "",
#endif
                CSS);
    text_add(o, "<h1>");
    text_escape(o, title);
    text_printf(o, "</h1>\n<p class=\"meta\">%d run%s; written by <code>implicit report</code>; every panel is drawn from "
                   "the run folders' log.jsonl, config.json and evaluation files.</p>\n",
                R->n, R->n == 1 ? "" : "s");
    text_add(o, "<h2>Runs</h2>\n");
    run_table(R, o);
    const char *open = NULL;
    int n_panels = (int)(sizeof PANELS / sizeof *PANELS);
    for (int i = 0; i < n_panels; i++) {
        SvgPlot *p = PANELS[i].draw ? PANELS[i].draw(R) : train_panel(R, &PANELS[i].train);
        if (!p) continue;
        if (!svg_plot_points(p)) { svg_plot_free(p); continue; }
        if (!open || strcmp(open, PANELS[i].section)) {
            if (open) text_add(o, "</div>\n");
            open = PANELS[i].section;
            text_printf(o, "<h2>%s</h2>\n<div class=\"grid\">\n", open);
        }
        text_add(o, "<figure>");
        svg_plot_render(p, o);
        if (PANELS[i].caption) {
            text_add(o, "<figcaption>");
            text_escape(o, PANELS[i].caption);
            text_add(o, "</figcaption>");
        }
        text_add(o, "</figure>\n");
        svg_plot_free(p);
    }
    if (open) text_add(o, "</div>\n");
    eval_table(R, o);
    text_add(o, "</body></html>\n");
}

/* ---- output ------------------------------------------------------------------------------------- */
int run_report_check_out(const char *path) {
    if (!path) return IM_OK;   /* no report asked for */
    int rc = report_check(path);
    if (rc) return rc;
    struct stat st;
    if (report_is_stdout(path) || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return IM_OK;
    FILE *f = fopen(path, "rb");
    char head[16] = "";
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    head[n] = 0;
    if (strncmp(head, "<!DOCTYPE html", 14))
        return err_set(IM_EIO, "'%s' exists and is not an HTML page; a report never replaces other files (choose "
                               "another --out)", path);
    return IM_OK;
}

int run_report_write(const RunReport *r, const char *path) {
    int rc = run_report_check_out(path);
    if (rc) return rc;
    TextBuf b;
    text_init(&b);
    run_report_render(r, &b);
    rc = b.failed ? err_set(IM_ENOMEM, "out of memory rendering the report") : report_write_bytes(path, b.data, b.len);
    text_free(&b);
    return rc;
}

int run_report_folder(const char *dir) {
    RunReport *r = run_report_new(NULL);
    int rc = run_report_add_run(r, dir);
    if (rc >= 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/report.html", dir);
        rc = run_report_write(r, path);
    }
    run_report_free(r);
    return rc < 0 ? rc : IM_OK;
}

void run_report_host_cpu(char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v += 1 + strspn(v + 1, " \t");
        snprintf(buf, cap, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    if (f) fclose(f);
    struct utsname u;
    if (!buf[0] && uname(&u) == 0) snprintf(buf, cap, "%s", u.machine);
}
