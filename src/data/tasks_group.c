/* tasks_group.c: the group tasks, the word problem (implicit-lm §8) and the Illusion-of-State
 * format (fp-rnn §6.1): their generators and their rows of the task table (task_impl.h).
 *
 * The word task always draws (u, g, m) for every token, even when u says "identity", so that token
 * t uses the same numbers whatever p is and a sample of length L is a prefix of the longer samples.
 */
#include <stdio.h>
#include <string.h>

#include "../core/check.h"
#include "task_impl.h"

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

/* ---- word -------------------------------------------------------------------------------------- */

static int word_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    (void)ops, (void)kind;
    if (c->shift && c->train_len < 2)
        return err_set(IM_EINVAL, "task key 'shift': needs train_len >= 2 (the last position has no next target)");
    return IM_OK;
}

static int word_create(Task *t) {
    t->V = t->G.order * t->M.order;
    return IM_OK;
}

static void word_evals(Task *t) {
    int k = t->cfg.train_len;
    for (int m = 1; m <= 4; m *= 2) t->lens[t->n_lens++] = m * k;
    t->ps[0] = t->p;
    if (t->p != 0.5f) t->ps[t->n_ps++] = 0.5f;
}

static int word_train_len(const Task *t) { return t->cfg.train_len; }

static void word_train_row(const Task *t, Rng *r, int T, int *ids, int *tg) {
    int k = T;   /* train_len, or the curriculum's length */
    gen_word(t, r, t->p, k, ids, tg);
    if (t->cfg.shift) {
        /* the HF causal-LM loss pairs logits_t with labels_{t+1} (spec §12-B2) */
        memmove(tg, tg + 1, sizeof(int) * (size_t)(k - 1));
        tg[k - 1] = TASK_IGNORE;
    }
}

static void word_eval_row(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)index, (void)T;
    gen_word(t, r, p, len, ids, tg);
}

static int word_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "word: %s x %s, p %.2f, length %d", t->G.name, t->M.name, t->cfg.p, t->cfg.train_len);
}

static int word_token_str(const Task *t, int id, char *buf, size_t cap) {
    int nm = t->M.order;
    if (nm == 1) return group_elem_str(&t->G, id, buf, cap);
    char g[256];
    group_elem_str(&t->G, id / nm, g, sizeof g);
    return snprintf(buf, cap, "(%s,%c)", g, "EABX"[id % nm]);
}

const TaskOps task_word_ops = {
    .name = "word", .help = "word = G x M word problem with p (implicit-lm 8)", .uses_group = 1, .uses_monoid = 1,
    .uses_p = 1, .len_curriculum = 1, .metric = "seq_acc", .def_min_len = 3, .def_max_len = 40, .def_context = 256, .def_modulus = 2,
    .check = word_check, .create = word_create, .default_evals = word_evals, .seq_len = task_len_as_is,
    .train_seq_len = word_train_len, .train_row = word_train_row, .eval_row = word_eval_row,
    .describe = word_describe, .token_str = word_token_str,
};

/* ---- ios ---------------------------------------------------------------------------------------- */

static int ios_create(Task *t) {
    t->V = t->G.order + TASK_N_SPECIAL;
    return IM_OK;
}

static void ios_evals(Task *t) {
    int k = t->cfg.train_len, s = k / 4 > 1 ? k / 4 : 1;
    t->lens[t->n_lens++] = 2;
    for (int L = s; L <= 4 * k && t->n_lens < TASK_MAX_EVAL; L += s)
        if (L > 2) t->lens[t->n_lens++] = L;
}

static int ios_seq_len(const Task *t, int len) { (void)t; return len + 1; }
static int ios_train_len(const Task *t) { return t->cfg.train_len + 1; }

static void ios_train_row(const Task *t, Rng *r, int T, int *ids, int *tg) {
    int len = 2 + (int)rng_below(r, (uint32_t)(T - 2)); /* k ~ U{2..T-1}: T - 1 = train_len or the curriculum's */
    int pad_target = t->cfg.pad_loss ? t->G.order + TASK_PAD : TASK_IGNORE;
    gen_ios(t, r, len, T, pad_target, ids, tg);
}

static void ios_eval_row(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)p, (void)index;
    gen_ios(t, r, len, T, TASK_IGNORE, ids, tg);
}

static int ios_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "ios: %s, lengths 2..%d", t->G.name, t->cfg.train_len);
}

static int ios_token_str(const Task *t, int id, char *buf, size_t cap) {
    static const char *SPECIAL[TASK_N_SPECIAL] = {"[PAD]", "[BOS]", "[UNK]", "[EOS]", "[SEP]", "[CLS]", "[MASK]"};
    if (id >= t->G.order) return snprintf(buf, cap, "%s", SPECIAL[id - t->G.order]);
    return group_elem_str(&t->G, id, buf, cap);
}

const TaskOps task_ios_ops = {
    .name = "ios", .help = "ios = Illusion-of-State format (fp-rnn 6.1)", .uses_group = 1, .min_train_len = 2, .len_curriculum = 1,
    .metric = "seq_acc", .def_min_len = 3, .def_max_len = 40, .def_context = 256, .def_modulus = 2,
    .create = ios_create, .default_evals = ios_evals, .seq_len = ios_seq_len, .train_seq_len = ios_train_len,
    .train_row = ios_train_row, .eval_row = ios_eval_row, .describe = ios_describe, .token_str = ios_token_str,
};
