/* task.c: the task config table, the dispatch to the task families, the word-problem generators
 * and scoring (see task.h; copy in tasks_copy.c, formal tasks in tasks_formal.c, catbAbI in babi.c,
 * language modelling in tasks_lm.c).
 *
 * Generators draw every random number of a row from one PCG32 seeded by a hash of
 * (seed, stream tag, index...), so rows are pure functions and never share state. The word task
 * always draws (u, g, m) for every token, even when u says "identity", so that token t uses the
 * same numbers whatever p is and a sample of length L is a prefix of the longer samples.
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
const KeyTab task_keytab = {"task", TASK_KEYS, (int)(sizeof TASK_KEYS / sizeof TASK_KEYS[0]), TASK_BOUNDS,
                            (int)(sizeof TASK_BOUNDS / sizeof TASK_BOUNDS[0]), NULL};

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

static const char *const KIND_NAMES[TASK_N_KIND] = {
    "word", "ios", "copy", "parity", "even_pairs", "cycle_navigation", "modular_arithmetic",
    "modular_arithmetic_brackets", "catbabi", "lm",
};

static int kind_of(const char *name) {
    for (int k = 0; k < TASK_N_KIND; k++)
        if (!strcmp(name, KIND_NAMES[k])) return k;
    return -1;
}

const char *task_kind_name(int kind) { return kind >= 0 && kind < TASK_N_KIND ? KIND_NAMES[kind] : "?"; }

static int is_formal(int kind) { return kind >= TASK_PARITY && kind <= TASK_BRACKETS; }

/* Shortest training length a formal task accepts (parity, cycle: one token before the answer). */
static int formal_min(int kind) { return kind == TASK_PARITY || kind == TASK_CYCLE ? 2 : 3; }

/* The "0 = task default" keys, resolved: min_len, max_len, context, modulus. */
static void resolve(const TaskCfg *c, int kind, int *Lmin, int *Lmax, int *C, int *K) {
    int copy = kind == TASK_COPY;
    *Lmin = c->min_len ? c->min_len : copy ? 5 : 3;
    *Lmax = c->max_len ? c->max_len : copy ? 50 : 40;
    *C = c->context ? c->context : kind == TASK_CATBABI ? 200 : 256;   /* lm too: 256 */
    *K = c->modulus ? c->modulus : kind == TASK_CYCLE ? 6 : kind == TASK_MODARITH || kind == TASK_BRACKETS ? 5 : 2;
}

/* Keys of the copy, formal, catbabi and lm tasks. */
static int validate_new(const TaskCfg *c, int kind) {
    if (strcmp(c->eval_pad, "context") && strcmp(c->eval_pad, "tight"))
        BAD("task key 'eval_pad': unknown '%s' (context | tight)", c->eval_pad);
    int Lmin, Lmax, C, K;
    resolve(c, kind, &Lmin, &Lmax, &C, &K);
    if (kind == TASK_COPY) {
        if (Lmin < 1 || Lmax < Lmin) BAD("task keys 'min_len', 'max_len': need 1 <= min_len <= max_len (got %d, %d)", Lmin, Lmax);
        if (C < 2 * Lmax + 3)
            BAD("task key 'context': %d cannot hold a copy example of length max_len %d (needs >= 2 max_len + 3 = %d)", C,
                Lmax, 2 * Lmax + 3);
    } else if (is_formal(kind)) {
        int m = formal_min(kind);
        if (Lmin < m || Lmax < Lmin)
            BAD("task keys 'min_len', 'max_len': %s needs %d <= min_len <= max_len (got %d, %d)", KIND_NAMES[kind], m, Lmin, Lmax);
        if (Lmax > C) BAD("task key 'context': %d is shorter than max_len %d", C, Lmax);
        if (c->val_min < m || c->val_max < c->val_min || c->val_max > TASK_MAX_CONTEXT)
            BAD("task keys 'val_min', 'val_max': need %d <= val_min <= val_max <= %d (got %d, %d)", m, TASK_MAX_CONTEXT,
                c->val_min, c->val_max);
        if ((kind == TASK_PARITY || kind == TASK_EVEN_PAIRS) && K != 2)
            BAD("task key 'modulus': %s is binary (0 or 2, got %d)", KIND_NAMES[kind], c->modulus);
        if (K < 2 || K > 1000) BAD("task key 'modulus': %d out of range 2..1000", K);
    } else if (kind == TASK_LM) {
        if (!c->data[0]) BAD("task lm: task key 'data' must name a token file (make one with `implicit data prepare`)");
    } else {
        if (C < 2) BAD("task key 'context': a catbabi window needs >= 2 tokens (got %d)", C);
        if (strcmp(c->babi_split, "valid") && strcmp(c->babi_split, "test"))
            BAD("task key 'babi_split': unknown '%s' (valid | test)", c->babi_split);
        }
    return IM_OK;
}

int task_cfg_validate(const TaskCfg *c) {
    int kind = kind_of(c->task), rc, n;
    if (kind < 0)
        BAD("task key 'task': unknown task '%s' (word | ios | copy | parity | even_pairs | cycle_navigation | "
            "modular_arithmetic | modular_arithmetic_brackets | catbabi | lm)", c->task);
    if ((rc = keytab_check_bounds(&task_keytab, c))) return rc;
    int ios = kind == TASK_IOS, group_task = kind == TASK_WORD || ios;
    if (group_task) {
        int order;
        if ((rc = group_parse(c->group, &order))) return err_wrap(rc, "task key 'group'");
        if (strcmp(c->monoid, "aperiodic") && strcmp(c->monoid, "trivial"))
            BAD("task key 'monoid': unknown monoid '%s' (aperiodic | trivial)", c->monoid);
    }
    int min_len = ios ? 2 : 1;
    if (c->train_len < min_len || c->train_len > TASK_MAX_LEN)
        BAD("task key 'train_len': %d out of range %d..%d%s", c->train_len, min_len, TASK_MAX_LEN,
            ios ? " (ios trains on lengths 2..train_len)" : "");
    if ((rc = parse_lens(c->eval_lens, is_formal(kind), NULL, &n))) return rc;
    if ((rc = parse_ps(c->eval_ps, NULL, &n))) return rc;
    if (kind == TASK_WORD && c->shift && c->train_len < 2)
        BAD("task key 'shift': needs train_len >= 2 (the last position has no next target)");
    return group_task ? IM_OK : validate_new(c, kind);
}

size_t task_cfg_to_json(const TaskCfg *c, char *buf, size_t cap) { return keytab_json(&task_keytab, c, buf, cap); }

void task_cfg_print(const TaskCfg *c, FILE *f) { keytab_print(&task_keytab, c, f); }

/* ---------------------------------------------------------------- task */

static void add_len(Task *t, int L) {
    for (int i = 0; i < t->n_lens; i++)
        if (t->lens[i] == L) return;
    if (t->n_lens < TASK_MAX_EVAL) t->lens[t->n_lens++] = L;
}

/* The default eval lists (see the eval_lens / eval_ps help). */
static void default_evals(Task *t) {
    int k = t->cfg.train_len;
    t->n_lens = 0;
    t->ps[0] = -1;
    t->n_ps = 1;
    switch (t->kind) {
    case TASK_WORD:
        for (int m = 1; m <= 4; m *= 2) t->lens[t->n_lens++] = m * k;
        t->ps[0] = t->p;
        if (t->p != 0.5f) t->ps[t->n_ps++] = 0.5f;
        return;
    case TASK_IOS: {
        int s = k / 4 > 1 ? k / 4 : 1;
        t->lens[t->n_lens++] = 2;
        for (int L = s; L <= 4 * k && t->n_lens < TASK_MAX_EVAL; L += s)
            if (L > 2) t->lens[t->n_lens++] = L;
        return;
    }
    case TASK_COPY:   /* the paper's range reaches 2 L_max ("x2") */
        for (int m = 1; m <= 4; m++) add_len(t, m * t->Lmax / 2 > 0 ? m * t->Lmax / 2 : 1);
        return;
    case TASK_CATBABI:
    case TASK_LM:
        add_len(t, t->C);
        return;
    default:          /* formal: the val mix, then doubling lengths up to the context */
        t->lens[t->n_lens++] = TASK_LEN_VAL;
        for (int L = t->Lmax / 2 > 3 ? t->Lmax / 2 : 3; L < t->C; L *= 2) add_len(t, L);
        add_len(t, t->C);
    }
}

int task_create(Task **out, const TaskCfg *c) {
    *out = NULL;
    int rc = task_cfg_validate(c);
    if (rc) return rc;
    Task *t = xcalloc(1, sizeof *t);
    t->cfg = *c;
    t->kind = kind_of(c->task);
    t->ios = t->kind == TASK_IOS;
    t->p = (float)c->p;
    int group_task = t->kind == TASK_WORD || t->ios;
    if ((rc = group_create(&t->G, group_task ? c->group : "Z1"))) { free(t); return err_wrap(rc, "task key 'group'"); }
    if (!group_task) snprintf(t->G.name, sizeof t->G.name, "-");
    /* only the word task has a monoid: the others get the trivial one so code paths stay uniform */
    CHECK(group_create_monoid(&t->M, t->kind == TASK_WORD ? c->monoid : "trivial") == IM_OK, "%s", err_msg());
    resolve(c, t->kind, &t->Lmin, &t->Lmax, &t->C, &t->modulus);
    if (!group_task) {
        t->cfg.min_len = t->Lmin;
        t->cfg.max_len = t->Lmax;
        t->cfg.context = t->C;
        t->cfg.modulus = t->modulus;
    }
    switch (t->kind) {
    case TASK_WORD: t->V = t->G.order * t->M.order; break;
    case TASK_IOS: t->V = t->G.order + TASK_N_SPECIAL; break;
    case TASK_COPY: t->V = c->alphabet + 4; break;
    case TASK_CATBABI:
        rc = babi_create(&t->babi, c->babi_dir, c->babi_split, c->babi_eval_stories,
                         rng_hash((uint64_t)c->seed, STREAM_EVAL, 0));
        if (rc) { task_free(t); return rc; }
        t->V = babi_vocab(t->babi);
        break;
    case TASK_LM:
        if ((rc = lm_create(t))) { task_free(t); return rc; }
        break;
    default: t->V = formal_vocab(t->kind, t->modulus);
    }
    default_evals(t);
    /* the lists parsed in validate; an empty list keeps the defaults */
    int lens[TASK_MAX_EVAL], n_l = 0, n_p = 0;
    float ps[TASK_MAX_EVAL];
    CHECK(!parse_lens(c->eval_lens, is_formal(t->kind), lens, &n_l) && !parse_ps(c->eval_ps, ps, &n_p), "%s", err_msg());
    if (n_l) { memcpy(t->lens, lens, sizeof(int) * (size_t)n_l); t->n_lens = n_l; }
    if (n_p && t->kind == TASK_WORD) { memcpy(t->ps, ps, sizeof(float) * (size_t)n_p); t->n_ps = n_p; }
    if (t->kind == TASK_LM && (rc = lm_check(t))) { task_free(t); return rc; }
    *out = t;
    return IM_OK;
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

int task_seq_len(const Task *t, int len) {
    switch (t->kind) {
    case TASK_WORD: return len;
    case TASK_IOS: return len + 1;
    case TASK_COPY: return copy_seq_len(t, len);
    case TASK_CATBABI:
    case TASK_LM: return len;
    default: return formal_seq_len(t, len);
    }
}

int task_train_seq_len(const Task *t) {
    if (t->kind == TASK_WORD || t->ios) return task_seq_len(t, t->cfg.train_len);
    return t->kind == TASK_CATBABI || t->kind == TASK_LM ? t->C : t->C - 1;
}

int task_special(const Task *t, int which) {
    CHECK(which >= 0 && which < TASK_N_SPECIAL, "no special token %d", which);
    return t->ios ? t->G.order + which : -1;
}

double task_chance(const Task *t) { return is_formal(t->kind) ? 1.0 / t->modulus : 0.0; }

void task_eval_len_range(const Task *t, int len, int *lo, int *hi) {
    if (is_formal(t->kind)) formal_len_range(t, len, lo, hi);
    else *lo = *hi = len;
}

long long task_eval_count(const Task *t, int len) {
    if (t->kind == TASK_LM && len >= 1) return (long long)lm_eval_windows(t, len);
    return t->kind == TASK_CATBABI && len >= 1 ? (long long)babi_eval_windows(t->babi, len) : -1;
}

const char *task_len_metric(const Task *t) { return task_name_len_metric(KIND_NAMES[t->kind]); }

const char *task_name_len_metric(const char *name) {
    int kind = kind_of(name);
    if (kind == TASK_LM) return "loss";
    return is_formal(kind) || kind == TASK_CATBABI ? "tok_acc" : "seq_acc";
}

int task_describe(const Task *t, char *buf, size_t cap) {
    const TaskCfg *c = &t->cfg;
    const char *name = KIND_NAMES[t->kind];
    switch (t->kind) {
    case TASK_WORD:
        return snprintf(buf, cap, "word: %s x %s, p %.2f, length %d", t->G.name, t->M.name, c->p, c->train_len);
    case TASK_IOS: return snprintf(buf, cap, "ios: %s, lengths 2..%d", t->G.name, c->train_len);
    case TASK_COPY:
        return snprintf(buf, cap, "copy: %d letters, lengths %d..%d, context %d", c->alphabet, t->Lmin, t->Lmax, t->C);
    case TASK_CATBABI:
        if (babi_is_generated(t->babi))
            return snprintf(buf, cap, "catbabi: generated stories (%d eval), vocab %d, window %d", c->babi_eval_stories, t->V,
                            t->C);
        return snprintf(buf, cap, "catbabi: %s (%d train / %d %s stories), vocab %d, window %d", c->babi_dir,
                        babi_n_stories(t->babi, BABI_TRAIN), babi_n_stories(t->babi, BABI_EVAL), c->babi_split, t->V, t->C);
    case TASK_LM: return lm_describe(t, buf, cap);
    default:
        return snprintf(buf, cap, "%s: modulus %d, lengths %d..%d, context %d", name, t->modulus, t->Lmin, t->Lmax, t->C);
    }
}

int task_eval_lens(const Task *t, const int **out) {
    *out = t->lens;
    return t->n_lens;
}

int task_eval_ps(const Task *t, const float **out) {
    *out = t->ps;
    return t->n_ps;
}

/* ---------------------------------------------------------------- generators */

void task_row_rng(Rng *r, const Task *t, uint64_t stream, uint64_t a, uint64_t b) {
    uint64_t s = rng_hash(rng_hash((uint64_t)t->cfg.seed, stream, 0), a, b);
    rng_seed(r, s, stream);
}

/* Word problem row of length T (implicit-lm §8.2): ids (T), prefix products y (T). */
static void gen_word(const Task *t, Rng *r, float p, int T, int *ids, int *y) {
    int nm = t->M.order, prev = 0;
    for (int i = 0; i < T; i++) {
        float u = rng_uniform(r);                          /* hard token iff u >= p */
        int g = (int)rng_below(r, (uint32_t)t->G.order);
        int m = (int)rng_below(r, (uint32_t)nm);
        if (u < p) g = 0;                                  /* the identity has index 0 */
        ids[i] = g * nm + m;
        if (i == 0) {
            y[i] = ids[i];                                 /* y_0 = x_0 */
        } else {
            int yg = prev / nm, ym = prev % nm;            /* (g1,m1)·(g2,m2) = (g1∘g2, m1·m2) */
            y[i] = group_mul(&t->G, yg, g) * nm + group_mul(&t->M, ym, m);
        }
        prev = y[i];
    }
}

/* IoS row (fp-rnn §6.1): k elements after BOS, then PAD up to Tm positions; pad target given. */
static void gen_ios(const Task *t, Rng *r, int k, int Tm, int pad_target, int *ids, int *tg) {
    int bos = t->G.order + TASK_BOS, pad = t->G.order + TASK_PAD, y = 0; /* y_0 = e */
    ids[0] = tg[0] = bos;
    for (int i = 1; i <= k; i++) {
        int x = (int)rng_below(r, (uint32_t)t->G.order);
        y = group_mul(&t->G, y, x);                        /* y_t = y_{t-1} ∘ x_t */
        ids[i] = x;
        tg[i] = y;
    }
    for (int i = k + 1; i < Tm; i++) {
        ids[i] = pad;
        tg[i] = pad_target;
    }
}

void task_train_batch(const Task *t, uint64_t step, int row0, int B, int *ids, int *targets) {
    CHECK(B >= 0 && row0 >= 0, "bad batch rows %d + %d", row0, B);
    int k = t->cfg.train_len, Tm = task_train_seq_len(t);
    for (int b = 0; b < B; b++) {
        Rng r;
        task_row_rng(&r, t, STREAM_TRAIN, step, (uint64_t)(row0 + b));
        int *id = ids + (size_t)b * Tm, *tg = targets + (size_t)b * Tm;
        switch (t->kind) {
        case TASK_IOS: {
            int len = 2 + (int)rng_below(&r, (uint32_t)(k - 1)); /* k ~ U{2..train_len} */
            int pad_target = t->cfg.pad_loss ? t->G.order + TASK_PAD : TASK_IGNORE;
            gen_ios(t, &r, len, Tm, pad_target, id, tg);
            break;
        }
        case TASK_WORD:
            gen_word(t, &r, t->p, k, id, tg);
            if (t->cfg.shift) {
                /* the HF causal-LM loss pairs logits_t with labels_{t+1} (spec §12-B2) */
                memmove(tg, tg + 1, sizeof(int) * (size_t)(k - 1));
                tg[k - 1] = TASK_IGNORE;
            }
            break;
        case TASK_COPY: copy_train_row(t, &r, id, tg); break;
        case TASK_CATBABI: babi_train_window(t->babi, &r, Tm, id, tg); break;
        case TASK_LM: lm_train_row(t, &r, id, tg); break;
        default: formal_train_row(t, &r, Tm, id, tg);
        }
    }
}

void task_eval_batch(const Task *t, int len, float p, uint64_t index0, int B, int *ids, int *targets) {
    CHECK((len >= 1 || (len == TASK_LEN_VAL && is_formal(t->kind))) && len <= TASK_MAX_LEN, "eval length %d out of range 1..%d",
          len, TASK_MAX_LEN);
    CHECK(t->kind != TASK_WORD || (p >= 0 && p <= 1), "eval p %g is not a probability", (double)p);
    int Tm = task_seq_len(t, len);
    for (int b = 0; b < B; b++) {
        Rng r;
        task_row_rng(&r, t, STREAM_EVAL, index0 + (uint64_t)b, 0);
        int *id = ids + (size_t)b * Tm, *tg = targets + (size_t)b * Tm;
        switch (t->kind) {
        case TASK_IOS: gen_ios(t, &r, len, Tm, TASK_IGNORE, id, tg); break;
        case TASK_WORD: gen_word(t, &r, p, len, id, tg); break;
        case TASK_COPY: copy_eval_row(t, &r, len, Tm, id, tg); break;
        case TASK_CATBABI: babi_eval_window(t->babi, len, (int64_t)(index0 + (uint64_t)b), id, tg); break;
        case TASK_LM: lm_eval_row(t, len, (int64_t)(index0 + (uint64_t)b), id, tg); break;
        default: formal_eval_row(t, &r, len, Tm, id, tg);
        }
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
    static const char *SPECIAL[TASK_N_SPECIAL] = {"[PAD]", "[BOS]", "[UNK]", "[EOS]", "[SEP]", "[CLS]", "[MASK]"};
    if (id < 0 || id >= t->V) return snprintf(buf, cap, "<%d?>", id);
    if (t->kind == TASK_COPY) {
        int V = t->cfg.alphabet;
        if (id >= V) return snprintf(buf, cap, "%c", "$|.*"[id - V]);
        return V <= 26 ? snprintf(buf, cap, "%c", 'a' + id) : snprintf(buf, cap, "l%d", id);
    }
    if (t->kind == TASK_CATBABI) return snprintf(buf, cap, "%s", babi_word(t->babi, id));
    if (t->kind == TASK_LM) return lm_token_str(t, id, buf, cap);
    if (is_formal(t->kind)) return formal_token_str(t, id, buf, cap);
    if (t->ios) {
        if (id >= t->G.order) return snprintf(buf, cap, "%s", SPECIAL[id - t->G.order]);
        return group_elem_str(&t->G, id, buf, cap);
    }
    int nm = t->M.order;
    if (nm == 1) return group_elem_str(&t->G, id, buf, cap);
    char g[256];
    group_elem_str(&t->G, id / nm, g, sizeof g);
    return snprintf(buf, cap, "(%s,%c)", g, "EABX"[id % nm]);
}
