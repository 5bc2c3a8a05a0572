/* task.c: the task config table, the table of task families (TASKS, one TaskOps row per
 * TaskKind), the code every family shares (validation, eval lists, batches) and scoring (see
 * task.h). The rows live with their families: word and ios in tasks_group.c, copy in
 * tasks_copy.c, the formal tasks in tasks_formal.c, catbAbI in tasks_babi.c (stories in babi.c),
 * language modelling in tasks_lm.c. Adding a family: docs/extending.md.
 *
 * Generators draw every random number of a row from one PCG32 seeded by a hash of
 * (seed, stream tag, index...), so rows are pure functions and never share state.
 */
#include "task.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/rng.h"
#include "task_impl.h"


/* ---------------------------------------------------------------- config table */

#define KEY_STRUCT TaskCfg
static const KeyInfo TASK_KEYS[] = {TASK_CFG_KEYS(KEY_INFO)};
static const KeyBound TASK_BOUNDS[] = {TASK_CFG_BOUNDS(KEY_BOUND)};
#undef KEY_STRUCT
static const char *task_key_choices(const char *key); /* the families' names, from the table below */
const KeyTab task_keytab = {"task", TASK_KEYS, (int)(sizeof TASK_KEYS / sizeof TASK_KEYS[0]), TASK_BOUNDS,
                            (int)(sizeof TASK_BOUNDS / sizeof TASK_BOUNDS[0]), task_key_choices};

void task_cfg_defaults(TaskCfg *c) {
    memset(c, 0, sizeof *c);
    keytab_defaults(&task_keytab, c);
}

int task_cfg_has(const char *key) { return keytab_find(&task_keytab, key) != NULL; }

int task_cfg_set(TaskCfg *c, const char *key, const char *value) {
    int rc = keytab_set(&task_keytab, c, key, value);
    if (rc == KEY_NOT_MINE) return err_set(IM_EINVAL, "unknown task key '%s'", key);
    return rc;
}

/* Parse "a,b,c" (spaces allowed around items) into at most TASK_MAX_EVAL numbers. */
static int parse_list(const char *key, const char *s, double *out, int *n) {
    *n = 0;
    const char *at = s;
    while (*at == ' ') at++;
    if (!*at) return IM_OK;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(at, &end);
        if (errno || end == at || !isfinite(v))
            return err_set(IM_EINVAL, "task key '%s': '%s' is not a comma-separated list of numbers", key, s);
        if (*n == TASK_MAX_EVAL) return err_set(IM_EINVAL, "task key '%s': more than %d entries", key, TASK_MAX_EVAL);
        out[(*n)++] = v;
        while (*end == ' ') end++;
        if (!*end) return IM_OK;
        if (*end != ',') return err_set(IM_EINVAL, "task key '%s': unexpected '%c' in '%s'", key, *end, s);
        at = end + 1;
    }
}

/* Lengths: integers 1..TASK_MAX_LEN, and "val" (TASK_LEN_VAL) when allow_val. */
static int parse_lens(const char *s, int allow_val, int *lens, int *n) {
    *n = 0;
    const char *at = s;
    for (;;) {
        while (*at == ' ') at++;
        if (!*at && !*n) return IM_OK;
        size_t k = strcspn(at, ",");
        char item[64];
        snprintf(item, sizeof item, "%.*s", (int)(k < sizeof item - 1 ? k : sizeof item - 1), at);
        for (size_t e = strlen(item); e && item[e - 1] == ' ';) item[--e] = 0;
        if (*n == TASK_MAX_EVAL) return err_set(IM_EINVAL, "task key 'eval_lens': more than %d entries", TASK_MAX_EVAL);
        int v;
        if (!strcmp(item, "val")) {
            if (!allow_val) return err_set(IM_EINVAL, "task key 'eval_lens': 'val' applies to the formal tasks only");
            v = TASK_LEN_VAL;
        } else {
            char *end;
            errno = 0;
            double d = strtod(item, &end);
            if (errno || end == item || *end || !isfinite(d))
                return err_set(IM_EINVAL, "task key 'eval_lens': '%s' is not a comma-separated list of lengths", s);
            if (d != floor(d) || d < 1 || d > TASK_MAX_LEN)
                return err_set(IM_EINVAL, "task key 'eval_lens': %g is not a length in 1..%d", d, TASK_MAX_LEN);
            v = (int)d;
        }
        if (lens) lens[*n] = v;
        (*n)++;
        if (!at[k]) return IM_OK;
        at += k + 1;
    }
}

static int parse_ps(const char *s, float *ps, int *n) {
    double v[TASK_MAX_EVAL];
    int rc = parse_list("eval_ps", s, v, n);
    if (rc) return rc;
    for (int i = 0; i < *n; i++) {
        if (!(v[i] >= 0 && v[i] <= 1)) return err_set(IM_EINVAL, "task key 'eval_ps': %g is not a probability in [0, 1]", v[i]);
        if (ps) ps[i] = (float)v[i];
    }
    return IM_OK;
}

#define BAD(...) return err_set(IM_EINVAL, __VA_ARGS__)

/* len_curriculum "L1:S1,L2:S2,..": lengths min_len <= L1 < L2 < .. < train_len, steps 0 < S1 < S2 < ..
 * (spaces allowed around items). lens / steps may be NULL (validation only). */
static int parse_curriculum(const char *s, int min_len, int train_len, int *lens, int *steps, int *n) {
    *n = 0;
    const char *at = s;
    long prev_len = 0, prev_step = 0;
    while (*at == ' ') at++;
    if (!*at) return IM_OK;
    for (;;) {
        char *end;
        errno = 0;
        long L = strtol(at, &end, 10), S;
        if (errno || end == at || *end != ':') goto syntax;
        at = end + 1;
        S = strtol(at, &end, 10);
        if (errno || end == at) goto syntax;
        while (*end == ' ') end++;
        if (*end && *end != ',') goto syntax;
        if (*n == TASK_MAX_EVAL) BAD("task key 'len_curriculum': more than %d entries", TASK_MAX_EVAL);
        if (L < min_len || L >= train_len)
            BAD("task key 'len_curriculum': length %ld is not in %d..train_len - 1 = %d (the last phase trains at "
                "train_len)", L, min_len, train_len - 1);
        if (L <= prev_len) BAD("task key 'len_curriculum': length %ld after %ld; lengths must increase", L, prev_len);
        if (S <= prev_step || S > 100000000)
            BAD("task key 'len_curriculum': step %ld after %ld; steps must increase from 1 (at most 1e8)", S, prev_step);
        if (lens) lens[*n] = (int)L, steps[*n] = (int)S;
        (*n)++;
        prev_len = L, prev_step = S;
        if (!*end) return IM_OK;
        at = end + 1;
        while (*at == ' ') at++;
    }
syntax:
    BAD("task key 'len_curriculum': '%s' is not a list of LENGTH:STEP entries like '16:2000,32:4000'", s);
}

/* ---------------------------------------------------------------- the families */

/* One row per TaskKind, in the order of the `task` key's help; each row is in its family's file. */
static const TaskOps *const TASKS[] = {
    [TASK_WORD] = &task_word_ops,       [TASK_IOS] = &task_ios_ops,         [TASK_COPY] = &task_copy_ops,
    [TASK_PARITY] = &task_parity_ops,   [TASK_EVEN_PAIRS] = &task_even_pairs_ops,
    [TASK_CYCLE] = &task_cycle_ops,     [TASK_MODARITH] = &task_modarith_ops,
    [TASK_BRACKETS] = &task_brackets_ops, [TASK_CATBABI] = &task_catbabi_ops, [TASK_LM] = &task_lm_ops,
};
_Static_assert(sizeof TASKS / sizeof TASKS[0] == TASK_N_KIND, "one TaskOps row per TaskKind");

static int kind_of(const char *name) {
    for (int k = 0; k < TASK_N_KIND; k++)
        if (!strcmp(name, TASKS[k]->name)) return k;
    return -1;
}

const char *task_kind_name(int kind) { return kind >= 0 && kind < TASK_N_KIND ? TASKS[kind]->name : "?"; }

/* "a | b | c" of the rows' names (helps = 0) or help entries (helps = 1), built once. */
static const char *join_rows(int helps) {
    static char buf[2][1024];
    char *b = buf[helps];
    if (!b[0])
        for (int k = 0, at = 0; k < TASK_N_KIND; k++)
            at += snprintf(b + at, sizeof buf[0] - (size_t)at, "%s%s", k ? " | " : "",
                           helps ? TASKS[k]->help : TASKS[k]->name);
    return b;
}

const char *task_names(void) { return join_rows(0); }

static const char *task_key_choices(const char *key) { return strcmp(key, "task") ? NULL : join_rows(1); }

void task_resolve(const TaskCfg *c, const TaskOps *ops, int *Lmin, int *Lmax, int *C, int *K) {
    *Lmin = c->min_len ? c->min_len : ops->def_min_len;
    *Lmax = c->max_len ? c->max_len : ops->def_max_len;
    *C = c->context ? c->context : ops->def_context;
    *K = c->modulus ? c->modulus : ops->def_modulus;
}

int task_check_eval_pad(const TaskCfg *c) {
    if (strcmp(c->eval_pad, "context") && strcmp(c->eval_pad, "tight"))
        BAD("task key 'eval_pad': unknown '%s' (context | tight)", c->eval_pad);
    return IM_OK;
}

/* The checks every family shares, then the row's own. */
static int validate_with(const TaskCfg *c, const TaskOps *ops, int kind) {
    int rc, n;
    if ((rc = keytab_check_bounds(&task_keytab, c))) return rc;
    if (ops->uses_group) {
        int order;
        if ((rc = group_parse(c->group, &order))) return err_wrap(rc, "task key 'group'");
        if (strcmp(c->monoid, "aperiodic") && strcmp(c->monoid, "trivial"))
            BAD("task key 'monoid': unknown monoid '%s' (aperiodic | trivial)", c->monoid);
    }
    int min_len = ops->min_train_len > 1 ? ops->min_train_len : 1;
    char hint[96] = "";
    if (min_len > 1) snprintf(hint, sizeof hint, " (%s trains on lengths %d..train_len)", ops->name, min_len);
    if (c->train_len < min_len || c->train_len > TASK_MAX_LEN)
        BAD("task key 'train_len': %d out of range %d..%d%s", c->train_len, min_len, TASK_MAX_LEN, hint);
    if ((rc = parse_lens(c->eval_lens, ops->formal, NULL, &n))) return rc;
    if ((rc = parse_ps(c->eval_ps, NULL, &n))) return rc;
    if (c->len_curriculum[strspn(c->len_curriculum, " ")] && !ops->len_curriculum)
        BAD("task key 'len_curriculum': %s trains at one length; the key applies to word and ios", ops->name);
    /* the shifted loss needs two positions in every phase */
    int cur_min = c->shift && min_len < 2 ? 2 : min_len;
    if ((rc = parse_curriculum(c->len_curriculum, cur_min, c->train_len, NULL, NULL, &n))) return rc;
    return ops->check ? ops->check(c, ops, kind) : IM_OK;
}

int task_cfg_validate(const TaskCfg *c) {
    int kind = kind_of(c->task);
    if (kind < 0) BAD("task key 'task': unknown task '%s' (%s)", c->task, task_names());
    return validate_with(c, TASKS[kind], kind);
}

size_t task_cfg_to_json(const TaskCfg *c, char *buf, size_t cap) { return keytab_json(&task_keytab, c, buf, cap); }

void task_cfg_print(const TaskCfg *c, FILE *f) { keytab_print(&task_keytab, c, f); }

/* ---------------------------------------------------------------- task */

void task_add_len(Task *t, int L) {
    for (int i = 0; i < t->n_lens; i++)
        if (t->lens[i] == L) return;
    if (t->n_lens < TASK_MAX_EVAL) t->lens[t->n_lens++] = L;
}

int task_len_as_is(const Task *t, int len) { (void)t; return len; }
int task_context_len(const Task *t) { return t->C; }
void task_context_evals(Task *t) { task_add_len(t, t->C); }

int task_create_ops(Task **out, const TaskOps *ops, int kind, const TaskCfg *c) {
    *out = NULL;
    int rc = validate_with(c, ops, kind);
    if (rc) return rc;
    Task *t = xcalloc(1, sizeof *t);
    t->cfg = *c;
    t->ops = ops;
    t->kind = kind;
    t->ios = kind == TASK_IOS;
    t->p = (float)c->p;
    if ((rc = group_create(&t->G, ops->uses_group ? c->group : "Z1"))) { free(t); return err_wrap(rc, "task key 'group'"); }
    if (!ops->uses_group) snprintf(t->G.name, sizeof t->G.name, "-");
    /* only the word task has a monoid: the others get the trivial one so code paths stay uniform */
    CHECK(group_create_monoid(&t->M, ops->uses_monoid ? c->monoid : "trivial") == IM_OK, "%s", err_msg());
    task_resolve(c, ops, &t->Lmin, &t->Lmax, &t->C, &t->modulus);
    if (!ops->uses_group) {
        t->cfg.min_len = t->Lmin;
        t->cfg.max_len = t->Lmax;
        t->cfg.context = t->C;
        t->cfg.modulus = t->modulus;
    }
    if ((rc = ops->create(t))) { task_free(t); return rc; }
    /* the default eval lists (see the eval_lens / eval_ps help); an empty list keeps them */
    t->n_lens = 0;
    t->ps[0] = -1;
    t->n_ps = 1;
    ops->default_evals(t);
    int lens[TASK_MAX_EVAL], n_l = 0, n_p = 0;
    float ps[TASK_MAX_EVAL];
    CHECK(!parse_lens(c->eval_lens, ops->formal, lens, &n_l) && !parse_ps(c->eval_ps, ps, &n_p), "%s", err_msg());
    if (n_l) { memcpy(t->lens, lens, sizeof(int) * (size_t)n_l); t->n_lens = n_l; }
    if (n_p && ops->uses_p) { memcpy(t->ps, ps, sizeof(float) * (size_t)n_p); t->n_ps = n_p; }
    CHECK(!parse_curriculum(c->len_curriculum, 1, c->train_len, t->cur_len, t->cur_step, &t->n_cur), "%s", err_msg());
    if (ops->finish && (rc = ops->finish(t))) { task_free(t); return rc; }
    *out = t;
    return IM_OK;
}

int task_create(Task **out, const TaskCfg *c) {
    *out = NULL;
    int kind = kind_of(c->task);
    if (kind < 0) return task_cfg_validate(c);   /* the unknown-task message */
    return task_create_ops(out, TASKS[kind], kind, c);
}

void task_free(Task *t) {
    if (!t) return;
    group_free(&t->G);
    group_free(&t->M);
    babi_free(t->babi);
    textdata_free(t->text);
    free(t);
}

const TaskCfg *task_cfg(const Task *t) { return &t->cfg; }
const Group *task_group(const Task *t) { return &t->G; }
int task_is_ios(const Task *t) { return t->ios; }
int task_kind(const Task *t) { return t->kind; }
int task_vocab(const Task *t) { return t->V; }
int task_seq_len(const Task *t, int len) { return t->ops->seq_len(t, len); }
int task_train_seq_len(const Task *t) { return t->ops->train_seq_len(t); }

int task_train_len_at(const Task *t, uint64_t step) {
    for (int i = 0; i < t->n_cur; i++)
        if (step < (uint64_t)t->cur_step[i]) return t->cur_len[i];
    return t->cfg.train_len;
}

int task_train_seq_len_at(const Task *t, uint64_t step) {
    int L = task_train_len_at(t, step);
    return L == t->cfg.train_len ? task_train_seq_len(t) : t->ops->seq_len(t, L);
}

int task_special(const Task *t, int which) {
    CHECK(which >= 0 && which < TASK_N_SPECIAL, "no special token %d", which);
    return t->ios ? t->G.order + which : -1;
}

double task_chance(const Task *t) { return t->ops->formal ? 1.0 / t->modulus : 0.0; }

void task_eval_len_range(const Task *t, int len, int *lo, int *hi) {
    if (t->ops->len_range) t->ops->len_range(t, len, lo, hi);
    else *lo = *hi = len;
}

long long task_eval_count(const Task *t, int len) { return len >= 1 && t->ops->eval_count ? t->ops->eval_count(t, len) : -1; }

const char *task_len_metric(const Task *t) { return t->ops->metric; }

const char *task_name_len_metric(const char *name) {
    int kind = kind_of(name);
    return kind >= 0 ? TASKS[kind]->metric : "seq_acc";
}

int task_describe(const Task *t, char *buf, size_t cap) {
    int n = t->ops->describe(t, buf, cap);
    for (int i = 0; i < t->n_cur && n >= 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%d before step %d", i ? ", " : " (curriculum: length ", t->cur_len[i],
                      t->cur_step[i]);
    if (t->n_cur && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ")");
    return n;
}

int task_eval_lens(const Task *t, const int **out) {
    *out = t->lens;
    return t->n_lens;
}

int task_eval_ps(const Task *t, const float **out) {
    *out = t->ps;
    return t->n_ps;
}

/* ---------------------------------------------------------------- batches */

void task_row_rng(Rng *r, const Task *t, uint64_t stream, uint64_t a, uint64_t b) {
    uint64_t s = rng_hash(rng_hash((uint64_t)t->cfg.seed, stream, 0), a, b);
    rng_seed(r, s, stream);
}

void task_train_batch(const Task *t, uint64_t step, int row0, int B, int *ids, int *targets) {
    CHECK(B >= 0 && row0 >= 0, "bad batch rows %d + %d", row0, B);
    int Tm = task_train_seq_len_at(t, step);
    for (int b = 0; b < B; b++) {
        Rng r;
        task_row_rng(&r, t, STREAM_TRAIN, step, (uint64_t)(row0 + b));
        t->ops->train_row(t, &r, Tm, ids + (size_t)b * Tm, targets + (size_t)b * Tm);
    }
}

void task_eval_batch(const Task *t, int len, float p, uint64_t index0, int B, int *ids, int *targets) {
    CHECK((len >= 1 || (len == TASK_LEN_VAL && t->ops->formal)) && len <= TASK_MAX_LEN, "eval length %d out of range 1..%d",
          len, TASK_MAX_LEN);
    CHECK(!t->ops->uses_p || (p >= 0 && p <= 1), "eval p %g is not a probability", (double)p);
    int Tm = task_seq_len(t, len);
    for (int b = 0; b < B; b++) {
        Rng r;
        task_row_rng(&r, t, STREAM_EVAL, index0 + (uint64_t)b, 0);
        t->ops->eval_row(t, &r, len, p, (int64_t)(index0 + (uint64_t)b), Tm, ids + (size_t)b * Tm,
                         targets + (size_t)b * Tm);
    }
}

/* ---------------------------------------------------------------- scoring */

void task_score(TaskScore *s, const float *logits, int V, int V_stride, const int *targets, int B, int T) {
    CHECK(V >= 1 && V <= V_stride, "V %d, stride %d", V, V_stride);
    for (int b = 0; b < B; b++) {
        const int *tg = targets + (size_t)b * T;
        int n_scored = 0, seen = 0, all_ok = 1;
        for (int i = 0; i < T; i++) n_scored += tg[i] >= 0;
        if (!n_scored) continue;
        for (int i = 0; i < T; i++) {
            if (tg[i] < 0) continue;                       /* TASK_IGNORE */
            const float *l = logits + ((size_t)b * T + i) * (size_t)V_stride;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            int ok = best == tg[i];
            s->tok_ok += ok;
            s->tok_n += 1;
            if (seen++ >= n_scored - 10) { s->last10_ok += ok; s->last10_n += 1; }
            all_ok &= ok;
        }
        s->seq_ok += all_ok;
        s->seq_n += 1;
    }
}

int task_longest_len(const int *lens, const double *acc, int n, double thr) {
    int best = 0;
    for (int i = 0; i < n; i++)
        if (acc[i] > thr && lens[i] > best) best = lens[i];
    return best;
}

int task_first_fail_len(const int *lens, const double *acc, int n, double thr) {
    int first = 0;
    for (int i = 0; i < n; i++)
        if (lens[i] != TASK_LEN_VAL && !(acc[i] > thr) && (!first || lens[i] < first)) first = lens[i];
    return first;
}

int task_token_str(const Task *t, int id, char *buf, size_t cap) {
    if (id < 0 || id >= t->V) return snprintf(buf, cap, "<%d?>", id);
    return t->ops->token_str(t, id, buf, cap);
}
