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
