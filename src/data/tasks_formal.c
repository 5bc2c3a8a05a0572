/* tasks_formal.c: the formal-language tasks of fp-rnn §6.3 (the xLSTM / DeltaProduct generators
 * and arithmetic_exp), with the reference's exact token ids.
 *
 * Shared wrapper: a generator fills seq[0..R-1] with one answer at position a; the model input is
 * seq[0..R-2] with seq[a] replaced by 0, and the only target is seq[a] at input position a-1 (the
 * last real token), so the answer is never seen. Lengths (K = modulus):
 *   parity (V 3)           t_0..t_{L-2} ~ U{1,2}; answer at L-1 = ((sum t) - (L-1)) mod 2 + 1; pad 0
 *   even_pairs (V 3)       tokens as parity; answer |t_{L-2} - t_0| + 1 (1 iff first == last); L >= 3
 *   cycle_navigation       t ~ U{1,2,3} = stay, +1, -1; answer (sum of steps mod K) + 4; V = K + 4
 *   modular_arithmetic     numbers 0..K-1 = ids 5.., '+' 1, '-' 2, '*' 3, '=' 4, pad 0; L odd:
 *                          L = 2 U{a..b} - 1 with a = min((L_min+1)/2, (L_max+1)/2), b = (L_max+1)/2;
 *                          number, op, number, ..., '=', answer (usual precedence, value mod K)
 *   modular_arithmetic_brackets  numbers 0..K-1 = ids 0.., '+' K, '-' K+1, '*' K+2, '(' K+3,
 *                          ')' K+4, '=' K+5, PAD K+6; L = max(U{..}, 5), E = L - 3;
 *                          gen(E) '=' answer PAD, then PAD; answer at E + 1 (its input mask 0 is the
 *                          number "0": harmless, it lies after the prediction point)
 * An eval length L is exact (modular_arithmetic: an even L means L-1; lengths below a task's
 * minimum are raised to it); TASK_LEN_VAL draws L from [val_min, val_max] like the reference's
 * validation split. Out of scope: max_step > 1 for cycle_navigation.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "task_impl.h"

int formal_vocab(int kind, int K) {
    switch (kind) {
    case TASK_PARITY: case TASK_EVEN_PAIRS: return 3;
    case TASK_CYCLE: return K + 4;
    case TASK_MODARITH: return K + 5;
    default: return K + 7;   /* brackets */
    }
}

static int min_len(int kind) { return kind == TASK_BRACKETS ? 5 : kind == TASK_PARITY || kind == TASK_CYCLE ? 2 : 3; }

/* Requested range [lo, hi] -> the range of lengths actually drawn. */
static void effective(int kind, int lo, int hi, int *elo, int *ehi) {
    if (kind == TASK_MODARITH) {
        int b = (hi + 1) / 2, a = (lo + 1) / 2 < b ? (lo + 1) / 2 : b;
        if (a < 2) a = 2;
        if (b < 2) b = 2;
        *elo = 2 * a - 1;
        *ehi = 2 * b - 1;
        return;
    }
    int m = min_len(kind);
    *elo = lo > m ? lo : m;
    *ehi = hi > m ? hi : m;
}

void formal_len_range(const Task *t, int len, int *lo, int *hi) {
    int a = len == TASK_LEN_VAL ? t->cfg.val_min : len, b = len == TASK_LEN_VAL ? t->cfg.val_max : len;
    effective(t->kind, a, b, lo, hi);
}

int formal_seq_len(const Task *t, int len) {
    int lo, hi;
    formal_len_range(t, len, &lo, &hi);
    return (strcmp(t->cfg.eval_pad, "tight") && t->C > hi ? t->C : hi) - 1;
}

/* Brackets: E tokens of a random expression at out[*n..]; returns its value mod K. */
static int gen_brackets(Rng *r, int K, int E, int *out, int *n) {
    int OPEN = K + 3, CLOSE = K + 4, MINUS = K + 1;
    if (E < 5) {
        int v = (int)rng_below(r, (uint32_t)K);
        if (E >= 3) out[(*n)++] = OPEN;
        if (E == 2 || E == 4) out[(*n)++] = MINUS;
        out[(*n)++] = v;
        if (E >= 3) out[(*n)++] = CLOSE;
        return E == 2 || E == 4 ? (K - v) % K : v;
    }
    int left = 1 + (int)rng_below(r, (uint32_t)(E - 4)), right = E - left - 3;
    out[(*n)++] = OPEN;
    int vl = gen_brackets(r, K, left, out, n), at_op = (*n)++;
    int vr = gen_brackets(r, K, right, out, n);
    int op = (int)rng_below(r, 3);   /* drawn after both operands, as the reference */
    out[at_op] = K + op;
    out[(*n)++] = CLOSE;
    long v = op == 0 ? vl + vr : op == 1 ? vl - vr : (long)vl * vr;
    return (int)(((v % K) + K) % K);
}

/* One row seq[0..R-1] of length L; returns the answer position. */
static int gen_seq(const Task *t, Rng *r, int L, int *seq, int R) {
    int K = t->modulus, sum = 0;
    switch (t->kind) {
    case TASK_PARITY: case TASK_EVEN_PAIRS: case TASK_CYCLE: {
        int top = t->kind == TASK_CYCLE ? 3 : 2;
        memset(seq, 0, sizeof(int) * (size_t)R);
        for (int i = 0; i < L - 1; i++) {
            seq[i] = 1 + (int)rng_below(r, (uint32_t)top);
            sum += t->kind == TASK_CYCLE ? (seq[i] <= 2 ? seq[i] - 1 : 2 - seq[i]) : seq[i];
        }
        if (t->kind == TASK_PARITY) seq[L - 1] = (sum - (L - 1)) % 2 + 1;
        else if (t->kind == TASK_EVEN_PAIRS) seq[L - 1] = abs(seq[L - 2] - seq[0]) + 1;
        else seq[L - 1] = ((sum % K) + K) % K + 4;
        return L - 1;
    }
    case TASK_MODARITH: {
        /* value = total + sign * term: '*' grows the current term, '+'/'-' close it */
        memset(seq, 0, sizeof(int) * (size_t)R);
        long total = 0, term = 0, sign = 1;
        for (int i = 0; i < L - 2; i += 2) {
            int x = (int)rng_below(r, (uint32_t)K), op = i ? seq[i - 1] : 1;
            seq[i] = x + 5;
            if (op == 3) term = term * x % K;
            else total = (total + sign * term) % K, term = x, sign = op == 1 ? 1 : -1;
            if (i + 2 < L - 2) seq[i + 1] = 1 + (int)rng_below(r, 3);
        }
        total = (total + sign * term) % K;
        seq[L - 2] = 4;
        seq[L - 1] = (int)((total + K) % K) + 5;
        return L - 1;
    }
    default: {
        int n = 0, E = L - 3, PAD = K + 6;
        int v = gen_brackets(r, K, E, seq, &n);
        CHECK(n == E, "brackets wrote %d of %d tokens", n, E);
        seq[E] = K + 5;
        seq[E + 1] = v;
        for (int i = E + 2; i < R; i++) seq[i] = PAD;
        return E + 1;
    }
    }
}

static void formal_row(const Task *t, Rng *r, int lo, int hi, int T, int *ids, int *tg) {
    int L;
    if (t->kind == TASK_MODARITH) {
        int a = (lo + 1) / 2, b = (hi + 1) / 2;   /* lo, hi odd: effective() */
        L = 2 * (a + (int)rng_below(r, (uint32_t)(b - a + 1))) - 1;
    } else {
        L = lo + (int)rng_below(r, (uint32_t)(hi - lo + 1));
    }
    int R = T + 1;
    CHECK(L <= R, "formal row of %d tokens for length %d", R, L);
    int *seq = xmalloc(sizeof(int) * (size_t)R);
    int a = gen_seq(t, r, L, seq, R);
    for (int i = 0; i < T; i++) {
        ids[i] = i == a ? 0 : seq[i];
        tg[i] = TASK_IGNORE;
    }
    tg[a - 1] = seq[a];
    free(seq);
}

void formal_train_row(const Task *t, Rng *r, int T, int *ids, int *tg) {
    int lo, hi;
    effective(t->kind, t->Lmin, t->Lmax, &lo, &hi);
    formal_row(t, r, lo, hi, T, ids, tg);
}

void formal_eval_row(const Task *t, Rng *r, int len, int T, int *ids, int *tg) {
    int lo, hi;
    formal_len_range(t, len, &lo, &hi);
    formal_row(t, r, lo, hi, T, ids, tg);
}

int formal_token_str(const Task *t, int id, char *buf, size_t cap) {
    int K = t->modulus;
    switch (t->kind) {
    case TASK_PARITY: case TASK_EVEN_PAIRS: return snprintf(buf, cap, "%s", id ? (id == 1 ? "1" : "2") : "_");
    case TASK_CYCLE: {
        static const char *const MOVE[4] = {"_", "stay", "+1", "-1"};
        return id < 4 ? snprintf(buf, cap, "%s", MOVE[id]) : snprintf(buf, cap, "@%d", id - 4);
    }
    case TASK_MODARITH: return id < 5 ? snprintf(buf, cap, "%s", (const char *[]){"_", "+", "-", "*", "="}[id])
                                      : snprintf(buf, cap, "%d", id - 5);
    default:
        if (id < K) return snprintf(buf, cap, "%d", id);
        return snprintf(buf, cap, "%s", (const char *[]){"+", "-", "*", "(", ")", "=", "[PAD]"}[id - K]);
    }
}

/* ---- the rows: one per formal task, the same functions --------------------------------------- */

/* Shortest training length a formal task accepts (parity, cycle: one token before the answer). */
static int formal_min(int kind) { return kind == TASK_PARITY || kind == TASK_CYCLE ? 2 : 3; }

static int formal_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    int rc = task_check_eval_pad(c), Lmin, Lmax, C, K, m = formal_min(kind);
    if (rc) return rc;
    task_resolve(c, ops, &Lmin, &Lmax, &C, &K);
    if (Lmin < m || Lmax < Lmin)
        return err_set(IM_EINVAL, "task keys 'min_len', 'max_len': %s needs %d <= min_len <= max_len (got %d, %d)",
                       ops->name, m, Lmin, Lmax);
    if (Lmax > C) return err_set(IM_EINVAL, "task key 'context': %d is shorter than max_len %d", C, Lmax);
    if (c->val_min < m || c->val_max < c->val_min || c->val_max > TASK_MAX_CONTEXT)
        return err_set(IM_EINVAL, "task keys 'val_min', 'val_max': need %d <= val_min <= val_max <= %d (got %d, %d)", m,
                       TASK_MAX_CONTEXT, c->val_min, c->val_max);
    if ((kind == TASK_PARITY || kind == TASK_EVEN_PAIRS) && K != 2)
        return err_set(IM_EINVAL, "task key 'modulus': %s is binary (0 or 2, got %d)", ops->name, c->modulus);
    if (K < 2 || K > 1000) return err_set(IM_EINVAL, "task key 'modulus': %d out of range 2..1000", K);
    return IM_OK;
}

static int formal_create(Task *t) {
    t->V = formal_vocab(t->kind, t->modulus);
    return IM_OK;
}

static void formal_evals(Task *t) {   /* the val mix, then doubling lengths up to the context */
    t->lens[t->n_lens++] = TASK_LEN_VAL;
    for (int L = t->Lmax / 2 > 3 ? t->Lmax / 2 : 3; L < t->C; L *= 2) task_add_len(t, L);
    task_add_len(t, t->C);
}

static int formal_train_len(const Task *t) { return t->C - 1; }

static void formal_eval(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)p, (void)index;
    formal_eval_row(t, r, len, T, ids, tg);
}

static int formal_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "%s: modulus %d, lengths %d..%d, context %d", t->ops->name, t->modulus, t->Lmin, t->Lmax,
                    t->C);
}

#define FORMAL_ROW(nm, hlp, modulus)                                                                   \
    {.name = nm, .help = hlp, .formal = 1, .metric = "tok_acc", .def_min_len = 3, .def_max_len = 40,    \
     .def_context = 256, .def_modulus = modulus, .check = formal_check, .create = formal_create,          \
     .default_evals = formal_evals, .seq_len = formal_seq_len, .train_seq_len = formal_train_len,        \
     .train_row = formal_train_row, .eval_row = formal_eval, .len_range = formal_len_range,              \
     .describe = formal_describe, .token_str = formal_token_str}
const TaskOps task_parity_ops = FORMAL_ROW("parity", "parity", 2);
const TaskOps task_even_pairs_ops = FORMAL_ROW("even_pairs", "even_pairs", 2);
const TaskOps task_cycle_ops = FORMAL_ROW("cycle_navigation", "cycle_navigation", 6);
const TaskOps task_modarith_ops = FORMAL_ROW("modular_arithmetic", "modular_arithmetic", 5);
const TaskOps task_brackets_ops = FORMAL_ROW("modular_arithmetic_brackets", "modular_arithmetic_brackets (6.3)", 5);
