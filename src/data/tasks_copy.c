/* tasks_copy.c: the copy task (fp-rnn §6.2, Jelassi et al. 2024 "Repeat after me").
 *
 * Tokens: letters 0..V-1, '$' = V (start), '|' = V+1 (separator), '.' = V+2 (end and padding),
 * '*' = V+3 (never emitted; the reference's ignore index). One example of length L is
 * "$ s | s ." (2L+3 tokens) with s = L uniform letters; its loss mask covers the L+1 answer
 * tokens (the copy and '.').
 * Training row: C tokens of back-to-back fresh examples, L ~ U{L_min..L_max}; the example that
 * would overflow is cut to fill the row and gets mask 0. Input = row[0..C-2], target[i] =
 * row[i+1] where mask[i+1] = 1, TASK_IGNORE elsewhere.
 * Eval row at length L: one example, right-padded with '.' (to C, or to 2L+3 with eval_pad =
 * tight). Teacher forcing as in the reference: with k = L+1 the index of '|', the positions
 * k..k+L-1 are scored against s (each predicts the next token), nothing else — so token
 * accuracy is the reference's character accuracy and sequence accuracy its string accuracy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "task_impl.h"

/* Row length (tokens, the model sees one less) for eval length len. */
static int row_len(const Task *t, int len) {
    int need = 2 * len + 3;
    return strcmp(t->cfg.eval_pad, "tight") && t->C > need ? t->C : need;
}

int copy_seq_len(const Task *t, int len) { return row_len(t, len) - 1; }

/* Write "$ s | s ." at row[0..2L+2] with letters drawn from r. */
static void example(const Task *t, Rng *r, int L, int *row) {
    int V = t->cfg.alphabet;
    row[0] = V;
    row[L + 1] = V + 1;
    for (int i = 0; i < L; i++) row[1 + i] = row[L + 2 + i] = (int)rng_below(r, (uint32_t)V);
    row[2 * L + 2] = V + 2;
}

void copy_train_row(const Task *t, Rng *r, int *ids, int *tg) {
    int C = t->C;
    int *row = xmalloc(sizeof(int) * (size_t)C), *ex = xmalloc(sizeof(int) * (size_t)(2 * t->Lmax + 3));
    unsigned char *mask = xmalloc((size_t)C);
    for (int pos = 0; pos < C;) {
        int L = t->Lmin + (int)rng_below(r, (uint32_t)(t->Lmax - t->Lmin + 1)), n = 2 * L + 3;
        example(t, r, L, ex);
        int fits = pos + n <= C, k = fits ? n : C - pos;
        for (int i = 0; i < k; i++) {
            row[pos + i] = ex[i];
            mask[pos + i] = fits && i >= L + 2;   /* the overflowing example is never scored */
        }
        pos += k;
    }
    for (int i = 0; i < C - 1; i++) {
        ids[i] = row[i];
        tg[i] = mask[i + 1] ? row[i + 1] : TASK_IGNORE;
    }
    free(row);
    free(ex);
    free(mask);
}

void copy_eval_row(const Task *t, Rng *r, int len, int T, int *ids, int *tg) {
    int R = T + 1, V = t->cfg.alphabet;
    CHECK(R >= 2 * len + 3, "copy row of %d tokens for length %d", R, len);
    ids[0] = V;
    ids[len + 1] = V + 1;
    for (int i = 0; i < len; i++) {
        int c = (int)rng_below(r, (uint32_t)V);
        ids[1 + i] = c;
        ids[len + 2 + i] = c;
    }
    for (int i = 2 * len + 2; i < T; i++) ids[i] = V + 2;   /* '.' then '.' padding */
    for (int i = 0; i < T; i++) tg[i] = TASK_IGNORE;
    for (int i = 0; i < len; i++) tg[len + 1 + i] = ids[len + 2 + i];   /* p[k + i] predicts s_i */
}

/* ---- the row ------------------------------------------------------------------------------------- */

static int copy_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    (void)kind;
    int rc = task_check_eval_pad(c), Lmin, Lmax, C, K;
    if (rc) return rc;
    task_resolve(c, ops, &Lmin, &Lmax, &C, &K);
    if (Lmin < 1 || Lmax < Lmin)
        return err_set(IM_EINVAL, "task keys 'min_len', 'max_len': need 1 <= min_len <= max_len (got %d, %d)", Lmin, Lmax);
    if (C < 2 * Lmax + 3)
        return err_set(IM_EINVAL,
                       "task key 'context': %d cannot hold a copy example of length max_len %d (needs >= 2 max_len + 3 = %d)",
                       C, Lmax, 2 * Lmax + 3);
    return IM_OK;
}

static int copy_create(Task *t) {
    t->V = t->cfg.alphabet + 4;
    return IM_OK;
}

static void copy_evals(Task *t) {   /* the paper's range reaches 2 L_max ("x2") */
    for (int m = 1; m <= 4; m++) task_add_len(t, m * t->Lmax / 2 > 0 ? m * t->Lmax / 2 : 1);
}

static int copy_train_len(const Task *t) { return t->C - 1; }

static void copy_train(const Task *t, Rng *r, int T, int *ids, int *tg) {
    (void)T;
    copy_train_row(t, r, ids, tg);
}

static void copy_eval(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)p, (void)index;
    copy_eval_row(t, r, len, T, ids, tg);
}

static int copy_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "copy: %d letters, lengths %d..%d, context %d", t->cfg.alphabet, t->Lmin, t->Lmax, t->C);
}

static int copy_token_str(const Task *t, int id, char *buf, size_t cap) {
    int V = t->cfg.alphabet;
    if (id >= V) return snprintf(buf, cap, "%c", "$|.*"[id - V]);
    return V <= 26 ? snprintf(buf, cap, "%c", 'a' + id) : snprintf(buf, cap, "l%d", id);
}

const TaskOps task_copy_ops = {
    .name = "copy", .help = "copy (6.2)", .metric = "seq_acc", .def_min_len = 5, .def_max_len = 50,
    .def_context = 256, .def_modulus = 2, .check = copy_check, .create = copy_create, .default_evals = copy_evals,
    .seq_len = copy_seq_len, .train_seq_len = copy_train_len, .train_row = copy_train, .eval_row = copy_eval,
    .describe = copy_describe, .token_str = copy_token_str,
};
