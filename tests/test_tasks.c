/* test_tasks.c: the copy, formal-language and catbAbI tasks (src/data/tasks_copy.c,
 * tasks_formal.c, babi.c). Spec: fp-rnn §6.2-§6.5.
 *
 * Each worked example of §6.5 is found in the task's own eval stream and its row checked token by
 * token (the generators are random, so the example is searched for, not constructed). Then many
 * rows are checked against independent brute force written differently from the generators: a
 * shunting-yard evaluator for modular arithmetic, a recursive-descent parser for the bracket
 * expressions, a walk on the cycle, parity and first/last comparisons; copy rows are re-parsed
 * into examples (masks, the truncated last example, the '|' offset of the eval targets, scored
 * through task_score with an oracle); the bAbI reader against a committed fixture in the real
 * format (vocabulary order, dropped last stories, "n,w", supporting ids), the generated stories
 * against a re-simulation of their world, and determinism / batch-split independence throughout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/data/babi.h"
#include "../src/data/task.h"
#include "th.h"

static Task *make_task(const char *const *kv) {
    TaskCfg c;
    task_cfg_defaults(&c);
    for (int i = 0; kv && kv[i]; i += 2) TH_CHECK(task_cfg_set(&c, kv[i], kv[i + 1]) == IM_OK, "set %s: %s", kv[i], err_msg());
    Task *t = NULL;
    int rc = task_create(&t, &c);
    TH_CHECK(rc == IM_OK && t, "task_create: %s", err_msg());
    return t;
}

/* Search the eval stream at length len for a row whose input starts with want[0..n); -1 if none. */
static long find_row(const Task *t, int len, const int *want, int n, long max, int *ids, int *tg) {
    int T = task_seq_len(t, len);
    for (long i = 0; i < max; i++) {
        task_eval_batch(t, len, -1, (uint64_t)i, 1, ids, tg);
        if (!memcmp(ids, want, sizeof(int) * (size_t)(n < T ? n : T))) return i;
    }
    (void)T;
    return -1;
}

/* The single scored position of a row (-1 if none or several). */
static int scored_at(const int *tg, int T) {
    int at = -1;
    for (int i = 0; i < T; i++)
        if (tg[i] != TASK_IGNORE) {
            if (at >= 0) return -1;
            at = i;
        }
    return at;
}

/* ---------------------------------------------------------------- copy */

static void test_copy_worked_example(void) {
    Task *t = make_task((const char *[]){"task", "copy", "eval_pad", "tight", NULL});
    TH_CHECK(task_vocab(t) == 30 && task_seq_len(t, 3) == 8, "copy vocab %d, tight T(3) %d", task_vocab(t), task_seq_len(t, 3));
    /* "abc": ids [26, 0,1,2, 27, 0,1,2, 28]; the model sees the first 8 tokens */
    int want[8] = {26, 0, 1, 2, 27, 0, 1, 2}, ids[8], tg[8];
    long at = find_row(t, 3, want, 8, 400000, ids, tg);
    TH_CHECK(at >= 0, "no 'abc' in the first 400000 eval samples");
    if (at >= 0) {
        /* '|' sits at index 4; predictions at 4, 5, 6 are scored against a, b, c */
        int wt[8] = {TASK_IGNORE, TASK_IGNORE, TASK_IGNORE, TASK_IGNORE, 0, 1, 2, TASK_IGNORE};
        TH_CHECK(!memcmp(tg, wt, sizeof wt), "copy eval targets of 'abc'");
        /* the same sample padded to the context: '.' (28) from index 8 on, same targets */
        Task *tc = make_task((const char *[]){"task", "copy", NULL});
        int T = task_seq_len(tc, 3);
        TH_CHECK(T == 255, "copy context T %d", T);
        int *id2 = malloc(sizeof(int) * (size_t)T), *tg2 = malloc(sizeof(int) * (size_t)T);
        task_eval_batch(tc, 3, -1, (uint64_t)at, 1, id2, tg2);
        int ok = !memcmp(id2, want, sizeof want) && !memcmp(tg2, wt, sizeof wt);
        for (int i = 8; i < T; i++) ok &= id2[i] == 28 && tg2[i] == TASK_IGNORE;
        TH_CHECK(ok, "padded copy row of 'abc'");
        free(id2);
        free(tg2);
        task_free(tc);
    }
    task_free(t);
}

/* Re-parse a training row into examples: complete ones are scored on their copy and '.', the
 * cut last one is not scored, lengths are in range, the row is packed. */
static void check_copy_train_row(const int *ids, const int *tg, int C, int V, int Lmin, int Lmax, int *ok, long *n_examples) {
    int T = C - 1, pos = 0, scored = 0, expect_scored = 0;
    while (pos < T) {
        if (ids[pos] != V) { *ok = 0; return; }                   /* every example starts with '$' */
        int bar = pos + 1;
        while (bar < T && ids[bar] != V + 1) bar++;
        int L = bar - pos - 1, end = pos + 2 * L + 3;          /* one past the example */
        if (bar < T && end <= C) {
            if (L < Lmin || L > Lmax) { *ok = 0; return; }
            for (int i = 0; i < L; i++) {
                int c = ids[pos + 1 + i];
                if (c < 0 || c >= V) *ok = 0;
                if (pos + L + 2 + i < T && ids[pos + L + 2 + i] != c) *ok = 0;   /* the copy */
                if (tg[pos + L + 1 + i] != c) *ok = 0;                         /* predicted from the token before */
            }
            if (end - 1 < T && ids[end - 1] != V + 2) *ok = 0;
            if (tg[end - 2] != V + 2) *ok = 0;                                 /* '.' is scored too */
            expect_scored += L + 1;
            (*n_examples)++;
            pos = end;
        } else {
            /* the cut example: must really overflow, never scored */
            if (bar < T && end <= C) *ok = 0;
            pos = T;
        }
    }
    for (int i = 0; i < T; i++) scored += tg[i] != TASK_IGNORE;
    if (scored != expect_scored) *ok = 0;
}

static void test_copy_train_rows(void) {
    Task *t = make_task((const char *[]){"task", "copy", "seed", "3", NULL});
    int T = task_train_seq_len(t), C = T + 1;
    TH_CHECK(T == 255, "copy train T %d", T);
    enum { B = 16 };
    int *ids = malloc(sizeof(int) * B * (size_t)T), *tg = malloc(sizeof(int) * B * (size_t)T);
    int *ids2 = malloc(sizeof(int) * B * (size_t)T), *tg2 = malloc(sizeof(int) * B * (size_t)T);
    int ok = 1, cut = 0;
    long n_ex = 0;
    for (int step = 0; step < 20; step++) {
        task_train_batch(t, (uint64_t)step, 0, B, ids, tg);
        for (int b = 0; b < B; b++) {
            check_copy_train_row(ids + b * T, tg + b * T, C, 26, 5, 50, &ok, &n_ex);
            cut += tg[b * T + T - 1] == TASK_IGNORE;
        }
    }
    TH_CHECK(ok, "copy training rows parse into packed, correctly masked examples");
    TH_CHECK(n_ex > 20 * B * 3 && cut > 0, "examples %ld, rows ending in a cut example %d", n_ex, cut);
    /* pure function of (step, row): two half batches equal the whole batch */
    task_train_batch(t, 7, 0, B, ids, tg);
    task_train_batch(t, 7, 0, B / 2, ids2, tg2);
    task_train_batch(t, 7, B / 2, B / 2, ids2 + (B / 2) * T, tg2 + (B / 2) * T);
    TH_CHECK(!memcmp(ids, ids2, sizeof(int) * B * (size_t)T) && !memcmp(tg, tg2, sizeof(int) * B * (size_t)T),
             "copy rows do not depend on the batch split");
    /* an exactly filled row: C = 2 L + 3 with L fixed leaves no cut example */
    Task *t1 = make_task((const char *[]){"task", "copy", "min_len", "4", "max_len", "4", "context", "22", NULL});
    task_train_batch(t1, 0, 0, 1, ids, tg);
    int n_sc = 0;
    for (int i = 0; i < 21; i++) n_sc += tg[i] != TASK_IGNORE;
    TH_CHECK(n_sc == 10 && tg[20] == 28 && tg[19] == ids[15] && ids[11] == 26, "two examples of length 4 fill 22 tokens: %d scored", n_sc);
    task_free(t1);
    free(ids); free(tg); free(ids2); free(tg2);
    task_free(t);
}

/* The '|' offset in scoring: logits that predict the next input token score 100%; predicting the
 * current token (one position late) scores only chance. */
static void test_copy_scoring(void) {
    Task *t = make_task((const char *[]){"task", "copy", "eval_pad", "tight", NULL});
    enum { B = 8, L = 12 };
    int T = task_seq_len(t, L), V = task_vocab(t);
    int *ids = malloc(sizeof(int) * B * (size_t)T), *tg = malloc(sizeof(int) * B * (size_t)T);
    float *lg = calloc((size_t)B * T * V, sizeof(float)), *lg2 = calloc((size_t)B * T * V, sizeof(float));
    task_eval_batch(t, L, -1, 0, B, ids, tg);
    int ok = 1;
    for (int b = 0; b < B; b++) {
        const int *id = ids + b * T, *g = tg + b * T;
        ok &= id[0] == 26 && id[L + 1] == 27;
        for (int i = 0; i < T; i++) ok &= (g[i] != TASK_IGNORE) == (i >= L + 1 && i <= 2 * L);
        for (int i = 0; i < T; i++) {
            int next = i + 1 < T ? id[i + 1] : 28;
            lg[((size_t)b * T + i) * V + next] = 1;
            lg2[((size_t)b * T + i) * V + id[i]] = 1;
        }
    }
    TH_CHECK(ok, "copy eval: '|' at L+1, targets exactly at L+1..2L");
    TaskScore s = {0}, s2 = {0};
    task_score(&s, lg, V, V, tg, B, T);
    task_score(&s2, lg2, V, V, tg, B, T);
    TH_CHECK(s.tok_n == B * L && s.tok_ok == B * L && s.seq_ok == B, "next-token oracle: %g/%g chars", s.tok_ok, s.tok_n);
    TH_CHECK(s2.tok_ok < B * L / 4 && s2.seq_ok == 0, "off-by-one predictions: %g/%g chars", s2.tok_ok, s2.tok_n);
    free(ids); free(tg); free(lg); free(lg2);
    task_free(t);
}

/* ---------------------------------------------------------------- formal tasks: brute force */

/* Modular arithmetic by shunting-yard over the ids (numbers 5.., + 1, - 2, * 3, = 4). */
static int shunting_yard(const int *tok, int n, int K) {
    long vals[512];
    int ops[512], nv = 0, no = 0;
    for (int i = 0; i < n; i++) {
        if (tok[i] >= 5) { vals[nv++] = tok[i] - 5; continue; }
        int prec = tok[i] == 3 ? 2 : 1;
        while (no && (ops[no - 1] == 3 ? 2 : 1) >= prec) {
            long b = vals[--nv], a = vals[--nv];
            int op = ops[--no];
            vals[nv++] = op == 1 ? a + b : op == 2 ? a - b : a * b % K;
        }
        ops[no++] = tok[i];
    }
    while (no) {
        long b = vals[--nv], a = vals[--nv];
        int op = ops[--no];
        vals[nv++] = op == 1 ? a + b : op == 2 ? a - b : a * b % K;
    }
    return (int)(((vals[0] % K) + K) % K);
}

/* Bracket expressions by recursive descent: e := num | '-' e | '(' e ')' | '(' e op e ')'. */
typedef struct { const int *tok; int n, at, K, bad; } Parser;

static long parse_e(Parser *p) {
    if (p->at >= p->n) { p->bad = 1; return 0; }
    int t = p->tok[p->at++], K = p->K;
    if (t < K) return t;
    if (t == K + 1) return -parse_e(p);
    if (t != K + 3) { p->bad = 1; return 0; }
    long a = parse_e(p);
    if (p->at < p->n && p->tok[p->at] >= K && p->tok[p->at] <= K + 2) {
        int op = p->tok[p->at++] - K;
        long b = parse_e(p);
        a = op == 0 ? a + b : op == 1 ? a - b : a * b;
        a %= K;
    }
    if (p->at >= p->n || p->tok[p->at++] != K + 4) p->bad = 1;
    return a;
}

/* The row's input up to the answer, the answer from the target; checks the wrapper as it goes. */
static int wrapper(const int *ids, const int *tg, int T, int *ans) {
    int a1 = scored_at(tg, T);   /* = answer position - 1 */
    if (a1 < 0) return -1;
    *ans = tg[a1];
    if (a1 + 1 < T && ids[a1 + 1] != 0) return -1;   /* the answer is hidden (id 0) */
    return a1 + 1;
}

static void check_formal(const char *name, int kind, int n_rows, int lo, int hi) {
    char key_lo[16], key_hi[16];
    snprintf(key_lo, sizeof key_lo, "%d", lo);
    snprintf(key_hi, sizeof key_hi, "%d", hi);
    Task *t = make_task((const char *[]){"task", name, "min_len", key_lo, "max_len", key_hi, "seed", "5", NULL});
    int T = task_train_seq_len(t), K = (int)(1.0 / task_chance(t) + 0.5), V = task_vocab(t);
    int *ids = malloc(sizeof(int) * (size_t)T), *tg = malloc(sizeof(int) * (size_t)T);
    int ok = 1, seen_lo = 0, seen_hi = 0, bad_row = -1;
    for (int r = 0; r < n_rows && ok; r++) {
        task_train_batch(t, (uint64_t)(r / 8), r % 8, 1, ids, tg);
        int ans, a = wrapper(ids, tg, T, &ans);
        if (a < 1) { ok = 0; bad_row = r; break; }
        int want = -1, L = a + 1;
        for (int i = 0; i < T; i++) ok &= ids[i] >= 0 && ids[i] < V;
        if (kind == TASK_PARITY || kind == TASK_EVEN_PAIRS || kind == TASK_CYCLE) {
            int twos = 0, pos = 0;
            for (int i = 0; i < a; i++) {
                twos += ids[i] == 2;
                pos += ids[i] == 2 ? 1 : ids[i] == 3 ? K - 1 : 0;
            }
            want = kind == TASK_PARITY ? 1 + twos % 2 : kind == TASK_EVEN_PAIRS ? (ids[0] == ids[a - 1] ? 1 : 2) : pos % K + 4;
            for (int i = a + 1; i < T; i++) ok &= ids[i] == 0;
        } else if (kind == TASK_MODARITH) {
            ok &= ids[a - 1] == 4 && L % 2 == 1;
            for (int i = 0; i < a - 1; i++) ok &= i % 2 == 0 ? ids[i] >= 5 : ids[i] >= 1 && ids[i] <= 3;
            want = shunting_yard(ids, a - 1, K) + 5;
            for (int i = a + 1; i < T; i++) ok &= ids[i] == 0;
        } else {
            ok &= ids[a - 1] == K + 5;
            Parser p = {ids, a - 1, 0, K, 0};
            long v = parse_e(&p);
            ok &= !p.bad && p.at == a - 1;
            want = (int)(((v % K) + K) % K);
            L = a + 2;   /* E = a - 1 tokens, '=', answer, PAD */
            for (int i = a + 1; i < T; i++) ok &= ids[i] == K + 6;
        }
        if (ans != want || !ok) { ok = 0; bad_row = r; break; }
        int elo = kind == TASK_BRACKETS && lo < 5 ? 5 : lo;
        ok &= L >= elo - (kind == TASK_MODARITH) && L <= hi;
        seen_lo |= L <= elo + 1;
        seen_hi |= L >= hi - 1;
        if (!ok) bad_row = r;
    }
    TH_CHECK(ok, "%s: row %d disagrees with the brute force", name, bad_row);
    TH_CHECK(seen_lo && seen_hi, "%s: lengths cover %d..%d", name, lo, hi);
    /* eval rows: exact lengths, and the val mix stays in its range */
    int lens[3] = {7, 8, TASK_LEN_VAL}, ok2 = 1;
    for (int k = 0; k < 3; k++) {
        int Te = task_seq_len(t, lens[k]), elo, ehi;
        task_eval_len_range(t, lens[k], &elo, &ehi);
        int *ei = malloc(sizeof(int) * (size_t)Te), *et = malloc(sizeof(int) * (size_t)Te);
        for (int i = 0; i < 40; i++) {
            task_eval_batch(t, lens[k], -1, (uint64_t)i, 1, ei, et);
            int ans, a = wrapper(ei, et, Te, &ans);
            int L = kind == TASK_BRACKETS ? a + 2 : a + 1;
            ok2 &= a >= 1 && L >= elo && L <= ehi;
        }
        free(ei);
        free(et);
    }
    TH_CHECK(ok2, "%s: eval rows have the lengths task_eval_len_range reports", name);
    free(ids);
    free(tg);
    task_free(t);
}

static void test_formal_brute_force(void) {
    check_formal("parity", TASK_PARITY, 400, 3, 40);
    check_formal("even_pairs", TASK_EVEN_PAIRS, 400, 3, 40);
    check_formal("cycle_navigation", TASK_CYCLE, 400, 3, 40);
    check_formal("modular_arithmetic", TASK_MODARITH, 400, 3, 40);
    check_formal("modular_arithmetic_brackets", TASK_BRACKETS, 400, 3, 40);
    check_formal("modular_arithmetic_brackets", TASK_BRACKETS, 200, 60, 120);
    /* non-default moduli: the brute force reads K from task_chance */
    Task *t = make_task((const char *[]){"task", "modular_arithmetic", "modulus", "7", NULL});
    TH_CHECK(task_vocab(t) == 12 && task_chance(t) == 1.0 / 7, "modulus 7: vocab %d", task_vocab(t));
    task_free(t);
}

static void test_formal_worked_examples(void) {
    /* parity L=5, tokens (2,1,2,2): answer 2; input [2,1,2,2,0,...] (255 long), target index 3 = 2 */
    Task *t = make_task((const char *[]){"task", "parity", NULL});
    TH_CHECK(task_vocab(t) == 3 && task_chance(t) == 0.5 && task_seq_len(t, 5) == 255, "parity sizes");
    int *ids = malloc(sizeof(int) * 300), *tg = malloc(sizeof(int) * 300);
    int want[5] = {2, 1, 2, 2, 0};
    long at = find_row(t, 5, want, 5, 2000, ids, tg);
    int ok = at >= 0 && scored_at(tg, 255) == 3 && tg[3] == 2;
    for (int i = 5; i < 255 && ok; i++) ok = ids[i] == 0;
    TH_CHECK(ok, "parity worked example (sample %ld)", at);
    task_free(t);
    /* modular arithmetic (V=10), L=7: "3 * 4 - 2 = 0" = [8,3,9,2,7,4,5]: the answer 5 is hidden */
    t = make_task((const char *[]){"task", "modular_arithmetic", "eval_pad", "tight", NULL});
    TH_CHECK(task_vocab(t) == 10 && task_seq_len(t, 7) == 6, "modular arithmetic sizes");
    int want_ma[6] = {8, 3, 9, 2, 7, 4};
    at = find_row(t, 7, want_ma, 6, 60000, ids, tg);
    TH_CHECK(at >= 0 && scored_at(tg, 6) == 5 && tg[5] == 5, "modular arithmetic worked example (sample %ld)", at);
    task_free(t);
    /* brackets (V=12), L=8 (E=5): "( 3 - 4 ) = 4 [PAD]" = [8,3,6,4,9,10,4,11], 11s to 256; answer index 6 */
    t = make_task((const char *[]){"task", "modular_arithmetic_brackets", NULL});
    TH_CHECK(task_vocab(t) == 12 && task_seq_len(t, 8) == 255, "brackets sizes");
    int want_br[8] = {8, 3, 6, 4, 9, 10, 0, 11};   /* the answer 4 at index 6 is replaced by 0 */
    at = find_row(t, 8, want_br, 8, 5000, ids, tg);
    ok = at >= 0 && scored_at(tg, 255) == 5 && tg[5] == 4;
    for (int i = 7; i < 255 && ok; i++) ok = ids[i] == 11;
    TH_CHECK(ok, "brackets worked example (sample %ld)", at);
    task_free(t);
    free(ids);
    free(tg);
}

static void test_formal_lengths(void) {
    Task *t = make_task((const char *[]){"task", "modular_arithmetic", NULL});
    int lo, hi;
    task_eval_len_range(t, TASK_LEN_VAL, &lo, &hi);
    TH_CHECK(lo == 39 && hi == 255, "modular arithmetic val lengths %d..%d (39..255)", lo, hi);
    task_eval_len_range(t, 8, &lo, &hi);
    TH_CHECK(lo == 7 && hi == 7, "an even length means L-1");
    TH_CHECK(task_seq_len(t, 300) == 298 && task_train_seq_len(t) == 255, "rows grow past the context for long lengths");
    const int *lens;
    int n = task_eval_lens(t, &lens);
    TH_CHECK(n == 6 && lens[0] == TASK_LEN_VAL && lens[1] == 20 && lens[2] == 40 && lens[3] == 80 && lens[4] == 160 &&
                 lens[5] == 256, "formal default eval lengths val,20,40,80,160,256 (%d entries)", n);
    task_free(t);
    t = make_task((const char *[]){"task", "modular_arithmetic_brackets", NULL});
    task_eval_len_range(t, 3, &lo, &hi);
    TH_CHECK(lo == 5 && hi == 5, "brackets: lengths 3 and 4 become 5");
    task_free(t);
}

/* ---------------------------------------------------------------- catbAbI */

#define FIXTURE "tests/fixtures/babi_small"

static void test_babi_reader(void) {
    BabiData *d;
    int rc = babi_create(&d, FIXTURE, "valid", 1, 0);
    TH_CHECK(rc == IM_OK, "read the fixture: %s", err_msg());
    if (rc) return;
    /* the reference's order of first appearance: train (qa1, qa19), valid, test; words of the
     * dropped last stories ("journeyed", "park") never get an id */
    static const char *const VOCAB[] = {
        "<pad>", "<eos>", "mary", "moved", "to", "the", "bathroom", ".", "john", "went", "hallway", "where", "is", "?",
        "daniel", "back", "sandra", "garden", "travelled", "office", "west", "of", "bedroom", "kitchen", "south", "how",
        "do", "you", "go", "from", "n,w", "cinema",
    };
    int nv = (int)(sizeof VOCAB / sizeof VOCAB[0]), ok = babi_vocab(d) == nv;
    for (int i = 0; i < nv && ok; i++) ok = !strcmp(babi_word(d, i), VOCAB[i]);
    TH_CHECK(ok, "fixture vocabulary (%d words, want %d)", babi_vocab(d), nv);
    TH_CHECK(babi_word_id(d, "journeyed") < 0 && babi_word_id(d, "park") < 0 && babi_word_id(d, "n,w") == 30, "dropped words");
    TH_CHECK(babi_n_stories(d, BABI_TRAIN) == 3 && babi_n_stories(d, BABI_EVAL) == 2, "stories: %d train, %d valid",
             babi_n_stories(d, BABI_TRAIN), babi_n_stories(d, BABI_EVAL));
    int n, task;
    const int *w = babi_story(d, BABI_TRAIN, 2, &n, &task);
    /* qa19: "the office is west of the bedroom . the kitchen is south of the bedroom . how do you
     * go from the kitchen to the office ? n,w" — supporting ids dropped, the answer one word */
    TH_CHECK(task == 19 && n == 28 && w[n - 2] == 13 && w[n - 1] == 30, "qa19 story: task %d, %d words", task, n);
    w = babi_story(d, BABI_TRAIN, 0, &n, &task);
    TH_CHECK(task == 1 && n == 35 && w[0] == 2 && w[6] == 8, "qa1 story 1: %d words", n);
    /* §6.5: window 0 of the valid stream is exactly x = [<eos>, mary, moved, to, the, bathroom, .,
     * where, is, mary, ?, bathroom], y = <pad> except "bathroom" at the "?" */
    int ids[12], tg[12];
    TH_CHECK(babi_eval_windows(d, 12) == (11 + 1 + 28 + 1 + 11) / 12, "eval windows of 12: %lld", (long long)babi_eval_windows(d, 12));
    babi_eval_window(d, 12, 0, ids, tg);
    int wx[12] = {1, 2, 3, 4, 5, 6, 7, 11, 12, 2, 13, 6};
    ok = !memcmp(ids, wx, sizeof wx);
    for (int i = 0; i < 12; i++) ok &= tg[i] == (i == 10 ? 6 : TASK_IGNORE);
    TH_CHECK(ok, "catbAbI worked example");
    /* the last window is right-padded with <pad>, unscored */
    int last = (int)babi_eval_windows(d, 12) - 1;
    babi_eval_window(d, 12, last, ids, tg);
    TH_CHECK(ids[11] == 0 && tg[11] == TASK_IGNORE, "padded last window");
    babi_free(d);
    /* the test split: same vocabulary, its one story */
    TH_CHECK(babi_create(&d, FIXTURE, "test", 1, 0) == IM_OK && babi_vocab(d) == nv && babi_n_stories(d, BABI_EVAL) == 1,
             "test split");
    babi_free(d);
}

static void test_babi_errors(void) {
    BabiData *d = NULL;
    TH_CHECK(babi_create(&d, "/nonexistent/babi", "valid", 1, 0) == IM_EIO && !d && strstr(err_msg(), "babi_dir"),
             "missing folder: %s", err_msg());
    char dir[] = "/tmp/test_tasks_XXXXXX";
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/qa2_train.txt", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "1 Mary moved to the bathroom.\n2 Where is Mary bathroom 1\n");
    fclose(f);
    TH_CHECK(babi_create(&d, dir, "valid", 1, 0) == IM_EFORMAT && strstr(err_msg(), "qa2_train.txt:2"), "bad line: %s", err_msg());
    f = fopen(path, "w");
    fprintf(f, "1 Mary moved to the bathroom.\n2 Where is Mary? \tbathroom\t1\n1 John went to the office.\n");
    fclose(f);
    TH_CHECK(babi_create(&d, dir, "valid", 1, 0) == IM_EIO && strstr(err_msg(), "valid"), "no valid files: %s", err_msg());
    TaskCfg c;
    task_cfg_defaults(&c);
    task_cfg_set(&c, "task", "catbabi");
    task_cfg_set(&c, "babi_dir", dir);
    Task *t = (Task *)&c;
    TH_CHECK(task_create(&t, &c) == IM_EIO && t == NULL, "task_create reports the reader's error");
    unlink(path);
    rmdir(dir);
}

/* Re-simulate a generated story from its words and check every answer. */
static int check_story(const BabiData *d, const int *w, int n) {
    const char *PEOPLE[4] = {"mary", "john", "daniel", "sandra"}, *OBJ[3] = {"apple", "football", "milk"};
    const char *COUNT[4] = {"none", "one", "two", "three"};
    char loc[4][16] = {"", "", "", ""}, objloc[3][16] = {"", "", ""};
    int holder[3] = {-1, -1, -1}, questions = 0;
    int s = 0;
#define W(i) babi_word(d, w[i])
    for (int i = 0; i < n; i++) {
        if (strcmp(W(i), ".") && strcmp(W(i), "?")) continue;
        int e = i, who = -1, obj = -1;
        for (int k = s; k < e; k++) {
            for (int p = 0; p < 4; p++) if (!strcmp(W(k), PEOPLE[p])) who = p;
            for (int o = 0; o < 3; o++) if (!strcmp(W(k), OBJ[o])) obj = o;
        }
        if (!strcmp(W(e), ".")) {
            if (!strcmp(W(s + 1), "picked")) holder[obj] = who;
            else if (!strcmp(W(s + 1), "dropped")) holder[obj] = -1, snprintf(objloc[obj], 16, "%s", loc[who]);
            else snprintf(loc[who], 16, "%s", W(e - 1));
            s = e + 1;
            continue;
        }
        const char *ans = W(e + 1), *first = W(s);
        questions++;
        if (!strcmp(first, "where") && obj < 0) { if (strcmp(ans, loc[who])) return 0; }
        else if (!strcmp(first, "where")) {
            if (strcmp(ans, holder[obj] >= 0 ? loc[holder[obj]] : objloc[obj])) return 0;
        } else if (!strcmp(first, "is")) {
            if (strcmp(ans, !strcmp(W(e - 1), loc[who]) ? "yes" : "no")) return 0;
        } else if (!strcmp(first, "how")) {
            int c = 0;
            for (int o = 0; o < 3; o++) c += holder[o] == who;
            if (strcmp(ans, COUNT[c])) return 0;
        } else return 0;
        i = e + 1;
        s = e + 2;
    }
#undef W
    return questions > 0 && s == n;
}

static void test_babi_generated(void) {
    Task *t = make_task((const char *[]){"task", "catbabi", "seed", "4", "babi_eval_stories", "50", NULL});
    TH_CHECK(task_train_seq_len(t) == 200 && task_vocab(t) == 39, "generated catbabi: T %d, vocab %d", task_train_seq_len(t),
             task_vocab(t));
    BabiData *d;
    TH_CHECK(babi_create(&d, "", "valid", 50, 4) == IM_OK && babi_is_generated(d), "generated data");
    int buf[256], ok = 1, kinds[4] = {0};
    for (int i = 0; i < 2000 && ok; i++) {
        Rng r;
        rng_seed(&r, 77, (uint64_t)i);
        int n = babi_gen_story(d, &r, buf, 256);
        ok = check_story(d, buf, n);
        for (int k = 0; k + 1 < n; k++)
            if (!strcmp(babi_word(d, buf[k]), "?")) {
                const char *a = babi_word(d, buf[k + 1]);
                kinds[!strcmp(a, "yes") || !strcmp(a, "no") ? 1 : !strcmp(a, "none") || !strcmp(a, "one") || !strcmp(a, "two") ? 2 : 0]++;
            }
        if (!ok) TH_CHECK(0, "generated story %d contradicts its world", i);
    }
    TH_CHECK(ok && kinds[0] && kinds[1] && kinds[2], "2000 generated stories: where %d, yes/no %d, counting %d", kinds[0], kinds[1],
             kinds[2]);
    /* training windows: targets exactly after "?", equal to the next input token */
    enum { B = 8 };
    int T = 200, *ids = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T), q = babi_word_id(d, "?");
    int *ids2 = malloc(sizeof(int) * B * T), *tg2 = malloc(sizeof(int) * B * T);
    int n_q = 0;
    ok = 1;
    for (int step = 0; step < 10; step++) {
        task_train_batch(t, (uint64_t)step, 0, B, ids, tg);
        for (int i = 0; i < B * T; i++) {
            ok &= (tg[i] != TASK_IGNORE) == (ids[i] == q);
            if (ids[i] == q) n_q++;
            if (ids[i] == q && (i + 1) % T) ok &= ids[i + 1] == tg[i];
        }
    }
    TH_CHECK(ok && n_q > 100, "catbabi windows: answers after '?' only (%d answers)", n_q);
    task_train_batch(t, 3, 0, B, ids, tg);
    task_train_batch(t, 3, 0, 3, ids2, tg2);
    task_train_batch(t, 3, 3, B - 3, ids2 + 3 * T, tg2 + 3 * T);
    TH_CHECK(!memcmp(ids, ids2, sizeof(int) * B * T) && !memcmp(tg, tg2, sizeof(int) * B * T), "catbabi rows are pure");
    /* eval windows: sequential, a fixed count */
    long long nw = task_eval_count(t, 200);
    TH_CHECK(nw > 0 && task_eval_count(t, 100) >= 2 * nw - 1, "eval windows %lld", nw);
    task_eval_batch(t, 100, -1, 0, 2, ids, tg);
    task_eval_batch(t, 200, -1, 0, 1, ids2, tg2);
    TH_CHECK(!memcmp(ids, ids2, sizeof(int) * 200) && !memcmp(tg, tg2, sizeof(int) * 200) && ids[0] == 1,
             "eval windows are cuts of one stream that starts with <eos>");
    free(ids); free(tg); free(ids2); free(tg2);
    babi_free(d);
    task_free(t);
}

static void test_babi_task_fixture(void) {
    Task *t = make_task((const char *[]){"task", "catbabi", "babi_dir", FIXTURE, "context", "30", NULL});
    TH_CHECK(task_vocab(t) == 32 && task_train_seq_len(t) == 30, "fixture catbabi: vocab %d", task_vocab(t));
    const int *lens;
    TH_CHECK(task_eval_lens(t, &lens) == 1 && lens[0] == 30 && task_eval_count(t, 30) == 2, "one eval entry: the window");
    char buf[32];
    task_token_str(t, 30, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "n,w"), "token 30 = %s", buf);
    int ids[30], tg[30];
    task_train_batch(t, 0, 0, 1, ids, tg);
    int ok = 1;
    for (int i = 0; i < 30; i++) ok &= ids[i] >= 0 && ids[i] < 32 && (tg[i] == TASK_IGNORE || ids[i] == 13);
    TH_CHECK(ok, "fixture training window");
    task_free(t);
}

/* ---------------------------------------------------------------- config */

static void test_new_config(void) {
    static const struct { const char *task, *key, *value, *part; } bad[] = {
        {"copy", "context", "100", "'context'"},             /* 2*50+3 = 103 > 100 */
        {"copy", "min_len", "60", "'min_len'"},
        {"copy", "alphabet", "0", "'alphabet'"},
        {"parity", "modulus", "3", "'modulus'"},
        {"parity", "min_len", "1", "'min_len'"},
        {"even_pairs", "min_len", "2", "'min_len'"},
        {"modular_arithmetic", "max_len", "300", "'context'"},
        {"cycle_navigation", "val_min", "1", "'val_min'"},
        {"copy", "eval_lens", "val", "'eval_lens'"},
        {"parity", "eval_pad", "none", "'eval_pad'"},
        {"catbabi", "babi_split", "train", "'babi_split'"},
        {"catbabi", "context", "1", "'context'"},
        {"parity", "context", "-1", "'context'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TaskCfg c;
        task_cfg_defaults(&c);
        task_cfg_set(&c, "task", bad[i].task);
        TH_CHECK(task_cfg_set(&c, bad[i].key, bad[i].value) == IM_OK, "set %s", bad[i].key);
        int rc = task_cfg_validate(&c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i].part), "%s %s = %s: rc %d '%s'", bad[i].task, bad[i].key, bad[i].value,
                 rc, err_msg());
    }
    /* resolved defaults are visible through task_cfg; the group key is ignored by these tasks */
    Task *t = make_task((const char *[]){"task", "copy", "group", "S7", NULL});
    const TaskCfg *c = task_cfg(t);
    TH_CHECK(c->min_len == 5 && c->max_len == 50 && c->context == 256 && !strcmp(task_group(t)->name, "-"), "copy defaults");
    const int *lens;
    const float *ps;
    int n = task_eval_lens(t, &lens);
    TH_CHECK(n == 4 && lens[0] == 25 && lens[3] == 100 && task_eval_ps(t, &ps) == 1 && ps[0] == -1, "copy eval lists");
    TH_CHECK(!strcmp(task_len_metric(t), "seq_acc") && task_chance(t) == 0 && task_eval_count(t, 10) == -1, "copy metric");
    char desc[128];
    task_describe(t, desc, sizeof desc);
    TH_CHECK(strstr(desc, "copy") && strstr(desc, "5..50"), "describe: %s", desc);
    task_free(t);
    t = make_task((const char *[]){"task", "cycle_navigation", "eval_lens", "val, 12", NULL});
    n = task_eval_lens(t, &lens);
    TH_CHECK(n == 2 && lens[0] == TASK_LEN_VAL && lens[1] == 12 && task_vocab(t) == 10 && !strcmp(task_len_metric(t), "tok_acc"),
             "cycle eval lens 'val, 12'");
    task_free(t);
}

int main(void) {
    th_name = "test_tasks";
    test_copy_worked_example();
    test_copy_train_rows();
    test_copy_scoring();
    test_formal_worked_examples();
    test_formal_brute_force();
    test_formal_lengths();
    test_babi_reader();
    test_babi_errors();
    test_babi_generated();
    test_babi_task_fixture();
    test_new_config();
    return th_done();
}
