/* task.c: the task config table and the word-problem generators (see task.h).
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

/* Longest task length we accept anywhere (keeps int products like 4*train_len safe). */
#define TASK_MAX_LEN (1 << 20)

/* Stream tags: training and evaluation rows come from disjoint hash inputs and PCG streams. */
enum { STREAM_TRAIN = 1, STREAM_EVAL = 2 };

struct Task {
    TaskCfg cfg;
    int ios;                      /* 0 = word, 1 = ios */
    Group G;                      /* the group */
    Group M;                      /* word task: the monoid (order 1 for trivial); unused by ios */
    int V;                        /* vocabulary */
    float p;                      /* cfg.p as the float the sampler compares against */
    int n_lens, n_ps;
    int lens[TASK_MAX_EVAL];      /* (n_lens) eval task lengths */
    float ps[TASK_MAX_EVAL];      /* (n_ps) eval p values (ios: {-1}) */
};

/* ---------------------------------------------------------------- config table */

#define KEY_STRUCT TaskCfg
static const KeyInfo TASK_KEYS[] = {TASK_CFG_KEYS(KEY_INFO)};
#undef KEY_STRUCT
const KeyTab task_keytab = {"task", TASK_KEYS, (int)(sizeof TASK_KEYS / sizeof TASK_KEYS[0])};

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

static int parse_lens(const char *s, int *lens, int *n) {
    double v[TASK_MAX_EVAL];
    int rc = parse_list("eval_lens", s, v, n);
    if (rc) return rc;
    for (int i = 0; i < *n; i++) {
        if (v[i] != floor(v[i]) || v[i] < 1 || v[i] > TASK_MAX_LEN)
            return err_set(IM_EINVAL, "task key 'eval_lens': %g is not a length in 1..%d", v[i], TASK_MAX_LEN);
        if (lens) lens[i] = (int)v[i];
    }
    return IM_OK;
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

int task_cfg_validate(const TaskCfg *c) {
    int ios = !strcmp(c->task, "ios");
    if (!ios && strcmp(c->task, "word")) BAD("task key 'task': unknown task '%s' (word | ios)", c->task);
    int order, n, rc = group_parse(c->group, &order);
    if (rc) return err_wrap(rc, "task key 'group'");
    if (strcmp(c->monoid, "aperiodic") && strcmp(c->monoid, "trivial"))
        BAD("task key 'monoid': unknown monoid '%s' (aperiodic | trivial)", c->monoid);
    if (!(c->p >= 0 && c->p <= 1)) BAD("task key 'p': %g is not a probability in [0, 1]", c->p);
    int min_len = ios ? 2 : 1;
    if (c->train_len < min_len || c->train_len > TASK_MAX_LEN)
        BAD("task key 'train_len': %d out of range %d..%d%s", c->train_len, min_len, TASK_MAX_LEN,
            ios ? " (ios trains on lengths 2..train_len)" : "");
    if (c->seed < 0) BAD("task key 'seed' must be >= 0");
    if ((rc = parse_lens(c->eval_lens, NULL, &n))) return rc;
    if ((rc = parse_ps(c->eval_ps, NULL, &n))) return rc;
    if (c->eval_samples < 1) BAD("task key 'eval_samples' must be >= 1");
    if (c->pad_loss != 0 && c->pad_loss != 1) BAD("task key 'pad_loss' must be 0 or 1");
    if (c->shift != 0 && c->shift != 1) BAD("task key 'shift' must be 0 or 1");
    if (!ios && c->shift && c->train_len < 2) BAD("task key 'shift': needs train_len >= 2 (the last position has no next target)");
    return IM_OK;
}

size_t task_cfg_to_json(const TaskCfg *c, char *buf, size_t cap) { return keytab_json(&task_keytab, c, buf, cap); }

void task_cfg_print(const TaskCfg *c, FILE *f) { keytab_print(&task_keytab, c, f); }

/* ---------------------------------------------------------------- task */

/* The default eval lists (see the eval_lens / eval_ps help). */
static void default_evals(Task *t) {
    int k = t->cfg.train_len;
    if (!t->ios) {
        t->n_lens = 0;
        for (int m = 1; m <= 4; m *= 2) t->lens[t->n_lens++] = m * k;
        t->ps[0] = t->p;
        t->n_ps = 1;
        if (t->p != 0.5f) t->ps[t->n_ps++] = 0.5f;
        return;
    }
    int s = k / 4 > 1 ? k / 4 : 1;
    t->n_lens = 0;
    t->lens[t->n_lens++] = 2;
    for (int L = s; L <= 4 * k && t->n_lens < TASK_MAX_EVAL; L += s)
        if (L > 2) t->lens[t->n_lens++] = L;
}

int task_create(Task **out, const TaskCfg *c) {
    *out = NULL;
    int rc = task_cfg_validate(c);
    if (rc) return rc;
    Task *t = xcalloc(1, sizeof *t);
    t->cfg = *c;
    t->ios = !strcmp(c->task, "ios");
    t->p = (float)c->p;
    if ((rc = group_create(&t->G, c->group))) { free(t); return err_wrap(rc, "task key 'group'"); }
    /* ios has no monoid part: give it the trivial one so word-only code paths stay uniform */
    CHECK(group_create_monoid(&t->M, t->ios ? "trivial" : c->monoid) == IM_OK, "%s", err_msg());
    t->V = t->ios ? t->G.order + TASK_N_SPECIAL : t->G.order * t->M.order;
    default_evals(t);
    /* the lists parsed in validate; an empty list keeps the defaults */
    int lens[TASK_MAX_EVAL], n_l = 0, n_p = 0;
    float ps[TASK_MAX_EVAL];
    CHECK(!parse_lens(c->eval_lens, lens, &n_l) && !parse_ps(c->eval_ps, ps, &n_p), "%s", err_msg());
    if (n_l) { memcpy(t->lens, lens, sizeof(int) * (size_t)n_l); t->n_lens = n_l; }
    if (n_p) { memcpy(t->ps, ps, sizeof(float) * (size_t)n_p); t->n_ps = n_p; }
    if (t->ios) { t->ps[0] = -1; t->n_ps = 1; }
    *out = t;
    return IM_OK;
}

void task_free(Task *t) {
    if (!t) return;
    group_free(&t->G);
    group_free(&t->M);
    free(t);
}

const TaskCfg *task_cfg(const Task *t) { return &t->cfg; }
const Group *task_group(const Task *t) { return &t->G; }
int task_is_ios(const Task *t) { return t->ios; }
int task_vocab(const Task *t) { return t->V; }
int task_seq_len(const Task *t, int len) { return t->ios ? len + 1 : len; }
int task_train_seq_len(const Task *t) { return task_seq_len(t, t->cfg.train_len); }

int task_special(const Task *t, int which) {
    CHECK(which >= 0 && which < TASK_N_SPECIAL, "no special token %d", which);
    return t->ios ? t->G.order + which : -1;
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

/* The generator of one row: a pure function of (seed, stream, a, b). */
static void row_rng(Rng *r, const Task *t, uint64_t stream, uint64_t a, uint64_t b) {
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
        row_rng(&r, t, STREAM_TRAIN, step, (uint64_t)(row0 + b));
        int *id = ids + (size_t)b * Tm, *tg = targets + (size_t)b * Tm;
        if (t->ios) {
            int len = 2 + (int)rng_below(&r, (uint32_t)(k - 1)); /* k ~ U{2..train_len} */
            int pad_target = t->cfg.pad_loss ? t->G.order + TASK_PAD : TASK_IGNORE;
            gen_ios(t, &r, len, Tm, pad_target, id, tg);
        } else {
            gen_word(t, &r, t->p, k, id, tg);
            if (t->cfg.shift) {
                /* the HF causal-LM loss pairs logits_t with labels_{t+1} (spec §12-B2) */
                memmove(tg, tg + 1, sizeof(int) * (size_t)(k - 1));
                tg[k - 1] = TASK_IGNORE;
            }
        }
    }
}

void task_eval_batch(const Task *t, int len, float p, uint64_t index0, int B, int *ids, int *targets) {
    CHECK(len >= 1 && len <= TASK_MAX_LEN, "eval length %d out of range 1..%d", len, TASK_MAX_LEN);
    CHECK(t->ios || (p >= 0 && p <= 1), "eval p %g is not a probability", (double)p);
    int Tm = task_seq_len(t, len);
    for (int b = 0; b < B; b++) {
        Rng r;
        row_rng(&r, t, STREAM_EVAL, index0 + (uint64_t)b, 0);
        int *id = ids + (size_t)b * Tm, *tg = targets + (size_t)b * Tm;
        if (t->ios) gen_ios(t, &r, len, Tm, TASK_IGNORE, id, tg);
        else gen_word(t, &r, p, len, id, tg);
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

int task_token_str(const Task *t, int id, char *buf, size_t cap) {
    static const char *SPECIAL[TASK_N_SPECIAL] = {"[PAD]", "[BOS]", "[UNK]", "[EOS]", "[SEP]", "[CLS]", "[MASK]"};
    if (id < 0 || id >= t->V) return snprintf(buf, cap, "<%d?>", id);
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
