/* test_data.c: groups, monoids, the word-problem generators, scoring and the dump format
 * (src/data/). Spec: implicit-lm §8 (G x M with p) and fp-rnn §6.1 / §6.5 (Illusion-of-State
 * format and its worked examples).
 *
 * Group axioms for every group the tasks use, the composition convention, the worked examples
 * exactly, vocabulary sizes, prefix products against an independent brute-force composition of
 * the permutations (not the tables), determinism and independence of the batch split, the ios
 * layout, config and name errors, and a dump/read round trip with a truncated file rejected.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/core/rng.h"
#include "../src/data/datafile.h"
#include "../src/data/group.h"
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

/* ---------------------------------------------------------------- groups */

static void check_axioms(const char *name, int want_order, int all_triples) {
    Group g;
    int rc = group_create(&g, name);
    TH_CHECK(rc == IM_OK, "group_create(%s): %s", name, err_msg());
    if (rc) return;
    int n = g.order, bad_closure = 0, bad_id = 0, bad_inv = 0, bad_assoc = 0;
    TH_CHECK(n == want_order, "|%s| = %d, want %d", name, n, want_order);
    TH_CHECK(g.is_group, "%s: is_group", name);
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) bad_closure += group_mul(&g, a, b) >= n;
        bad_id += group_mul(&g, 0, a) != a || group_mul(&g, a, 0) != a;
        int v = g.inv[a];
        bad_inv += v < 0 || v >= n || group_mul(&g, a, v) != 0 || group_mul(&g, v, a) != 0;
    }
    if (all_triples) {
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                for (int c = 0; c < n; c++)
                    bad_assoc += group_mul(&g, group_mul(&g, a, b), c) != group_mul(&g, a, group_mul(&g, b, c));
    } else {
        Rng r;
        rng_seed(&r, 7, 0);
        for (int i = 0; i < 200000; i++) {
            int a = (int)rng_below(&r, (uint32_t)n), b = (int)rng_below(&r, (uint32_t)n), c = (int)rng_below(&r, (uint32_t)n);
            bad_assoc += group_mul(&g, group_mul(&g, a, b), c) != group_mul(&g, a, group_mul(&g, b, c));
        }
    }
    TH_CHECK(!bad_closure, "%s: %d products outside the group", name, bad_closure);
    TH_CHECK(!bad_id, "%s: index 0 is not the identity for %d elements", name, bad_id);
    TH_CHECK(!bad_inv, "%s: %d bad inverses", name, bad_inv);
    TH_CHECK(!bad_assoc, "%s: %d non-associative triples", name, bad_assoc);
    group_free(&g);
}

static void test_group_axioms(void) {
    check_axioms("S3", 6, 1);
    check_axioms("S4", 24, 1);
    check_axioms("S5", 120, 1);
    check_axioms("A4", 12, 1);
    check_axioms("A5", 60, 1);
    check_axioms("Z60", 60, 1);
    check_axioms("A4xZ5", 60, 1);
    check_axioms("a5xz2XZ3", 360, 0);
    check_axioms("S6", 720, 0);
    check_axioms("S1", 1, 1);
    check_axioms("A2", 1, 1);
    check_axioms("Z1", 1, 1);
    int order = 0;
    TH_CHECK(group_parse("S7", &order) == IM_OK && order == 5040, "S7 order %d", order);
    TH_CHECK(group_parse("A7xZ2", &order) == IM_OK && order == 5040, "A7xZ2 order %d", order);
}

static int lex_less(const unsigned char *a, const unsigned char *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i];
    return 0;
}

/* S_n in lex order; A_n = the even ones in the same order; (a∘b)(i) = a(b(i)) in the table. */
static void test_perm_convention(void) {
    Group s, a;
    TH_CHECK(group_create(&s, "S5") == IM_OK && group_create(&a, "A5") == IM_OK, "%s", err_msg());
    const GroupFactor *fs = &s.factor[0], *fa = &a.factor[0];
    int n = 5, bad_order = 0, bad_comp = 0, j = 0, bad_sub = 0;
    for (int i = 1; i < s.order; i++) bad_order += !lex_less(fs->perm + (i - 1) * n, fs->perm + i * n, n);
    for (int i = 0; i < s.order; i++) {
        const unsigned char *p = fs->perm + i * n;
        int inv = 0;
        for (int x = 0; x < n; x++)
            for (int y = x + 1; y < n; y++) inv += p[x] > p[y];
        if (inv % 2 == 0) bad_sub += j >= a.order || memcmp(p, fa->perm + j++ * n, (size_t)n);
    }
    TH_CHECK(!bad_order, "S5 not in lexicographic order (%d)", bad_order);
    TH_CHECK(!bad_sub && j == 60, "A5 is not the even perms of S5 in the same order (%d bad, %d)", bad_sub, j);
    for (int x = 0; x < s.order; x++)
        for (int y = 0; y < s.order; y++) {
            const unsigned char *px = fs->perm + x * n, *py = fs->perm + y * n, *pc = fs->perm + group_mul(&s, x, y) * n;
            for (int i = 0; i < n; i++) bad_comp += pc[i] != px[py[i] - 1];
        }
    TH_CHECK(!bad_comp, "S5 table is not (a∘b)(i) = a(b(i)): %d mismatches", bad_comp);
    int abelian_a5 = 1;
    for (int x = 0; x < a.order; x++)
        for (int y = 0; y < a.order; y++) abelian_a5 &= group_mul(&a, x, y) == group_mul(&a, y, x);
    TH_CHECK(!abelian_a5, "A5 must be non-abelian");
    group_free(&s);
    group_free(&a);
}

/* Direct products: (a, b) has index a*|B| + b and multiplies componentwise; three factors fold left. */
static void test_products(void) {
    Group p, a4, z5, a5, z2, z3, p3;
    TH_CHECK(!group_create(&p, "A4xZ5") && !group_create(&a4, "A4") && !group_create(&z5, "Z5"), "%s", err_msg());
    int bad = 0;
    for (int x = 0; x < 60; x++)
        for (int y = 0; y < 60; y++)
            bad += group_mul(&p, x, y) != group_mul(&a4, x / 5, y / 5) * 5 + group_mul(&z5, x % 5, y % 5);
    TH_CHECK(!bad, "A4xZ5 is not componentwise with index 5a+z: %d", bad);
    TH_CHECK(!strcmp(p.name, "A4xZ5"), "canonical name %s", p.name);
    char buf[64];
    group_elem_str(&p, 5 * 1 + 3, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "((1,3,4,2),3)"), "A4xZ5 label of 5*1+3: %s", buf);
    TH_CHECK(!group_create(&p3, "A5xZ2xZ3") && !group_create(&a5, "A5") && !group_create(&z2, "Z2") && !group_create(&z3, "Z3"),
             "%s", err_msg());
    bad = 0;
    Rng r;
    rng_seed(&r, 3, 0);
    for (int i = 0; i < 20000; i++) {
        int ga = (int)rng_below(&r, 60), gb = (int)rng_below(&r, 2), gc = (int)rng_below(&r, 3);
        int ha = (int)rng_below(&r, 60), hb = (int)rng_below(&r, 2), hc = (int)rng_below(&r, 3);
        int want = (group_mul(&a5, ga, ha) * 2 + group_mul(&z2, gb, hb)) * 3 + group_mul(&z3, gc, hc);
        bad += group_mul(&p3, (ga * 2 + gb) * 3 + gc, (ha * 2 + hb) * 3 + hc) != want;
    }
    TH_CHECK(!bad, "A5xZ2xZ3 index ((a*2+b)*3+c) componentwise: %d", bad);
    group_elem_str(&p3, (6 * 2 + 1) * 3 + 2, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "((1,4,2,3,5),1,2)"), "A5xZ2xZ3 label %s", buf);
    group_free(&p); group_free(&a4); group_free(&z5); group_free(&p3); group_free(&a5); group_free(&z2); group_free(&z3);
}

/* implicit-lm §8.1 table, typed in here (the library builds its own) */
static const int SPEC_M[4][4] = {{0, 1, 2, 3}, {1, 3, 3, 3}, {2, 1, 2, 3}, {3, 3, 3, 3}};

static void test_monoids(void) {
    Group m, t;
    TH_CHECK(!group_create_monoid(&m, "aperiodic") && !group_create_monoid(&t, "trivial"), "%s", err_msg());
    int bad = 0, bad_assoc = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            bad += group_mul(&m, a, b) != SPEC_M[a][b];
            for (int c = 0; c < 4; c++) bad_assoc += group_mul(&m, group_mul(&m, a, b), c) != group_mul(&m, a, group_mul(&m, b, c));
        }
    TH_CHECK(!bad && !bad_assoc, "aperiodic table %d wrong, %d non-associative", bad, bad_assoc);
    TH_CHECK(m.order == 4 && !m.is_group && m.inv[0] == 0 && m.inv[1] < 0 && m.inv[3] < 0, "aperiodic: not a group, E invertible");
    TH_CHECK(t.order == 1 && t.is_group && group_mul(&t, 0, 0) == 0, "trivial monoid");
    group_free(&m);
    group_free(&t);
    TH_CHECK(group_create_monoid(&t, "cyclic") == IM_EINVAL && strstr(err_msg(), "cyclic") && !t.mul, "bad monoid: %s", err_msg());
}

static void test_bad_names(void) {
    static const struct { const char *name, *part; } cases[] = {
        {"", "empty"}, {"Q8", "Q8"}, {"S", "'S'"}, {"S0", "S0"}, {"S8", "S8"}, {"A8", "A8"}, {"Z5041", "Z5041"},
        {"A4xQ2", "Q2"}, {"A4x", "empty factor"}, {"xA4", "empty factor"}, {"S5y", "non-digit"}, {"A5xA5xA5", "5040"},
        {"S99999999999", "S99999999999"}, {"Z-3", "non-digit"}, {"A4xxZ5", "empty factor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Group g;
        int rc = group_create(&g, cases[i].name);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), cases[i].part), "group '%s': rc %d, message '%s' lacks '%s'",
                 cases[i].name, rc, err_msg(), cases[i].part);
        TH_CHECK(g.mul == NULL && g.order == 0, "failed create leaves an empty group");
        group_free(&g);
    }
}

/* ---------------------------------------------------------------- worked examples (fp-rnn §6.5) */

static void test_worked_examples(void) {
    Group z, a;
    TH_CHECK(!group_create(&z, "Z60") && !group_create(&a, "A5"), "%s", err_msg());
    /* Z60: x = (5, 58, 10) -> y = (5, 3, 13) */
    int x[3] = {5, 58, 10}, want[3] = {5, 3, 13}, y = 0;
    for (int i = 0; i < 3; i++) {
        y = group_mul(&z, y, x[i]);
        TH_CHECK(y == want[i], "Z60 y_%d = %d, want %d", i + 1, y, want[i]);
    }
    /* A5 elements in lexicographic order of even permutations */
    static const struct { int idx; const char *perm; } el[] = {
        {0, "(1,2,3,4,5)"}, {1, "(1,2,4,5,3)"}, {2, "(1,2,5,3,4)"}, {3, "(1,3,2,5,4)"}, {5, "(1,3,5,4,2)"}, {6, "(1,4,2,3,5)"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof el / sizeof el[0]; i++) {
        group_elem_str(&a, el[i].idx, buf, sizeof buf);
        TH_CHECK(!strcmp(buf, el[i].perm), "A5 idx %d = %s, want %s", el[i].idx, buf, el[i].perm);
    }
    /* A5: x = (1, 3, 5) -> y = (1, 6, 2); the opposite order would give y_2 = 5 */
    int xa[3] = {1, 3, 5}, wa[3] = {1, 6, 2};
    y = 0;
    for (int i = 0; i < 3; i++) {
        y = group_mul(&a, y, xa[i]);
        TH_CHECK(y == wa[i], "A5 y_%d = %d, want %d", i + 1, y, wa[i]);
    }
    TH_CHECK(group_mul(&a, 3, 1) == 5 && group_mul(&a, 1, 3) == 6, "A5 convention check: 3∘1 = %d (5), 1∘3 = %d (6)",
             group_mul(&a, 3, 1), group_mul(&a, 1, 3));
    /* ios layout of the Z60 example: PAD 60, BOS 61, vocab 67 */
    Task *t = make_task((const char *[]){"task", "ios", "group", "Z60", "train_len", "8", NULL});
    TH_CHECK(task_special(t, TASK_PAD) == 60 && task_special(t, TASK_BOS) == 61 && task_vocab(t) == 67, "Z60 specials");
    TH_CHECK(task_seq_len(t, 3) == 4, "ios seq len of k=3 is 4");
    int ids[4], tg[4];
    task_eval_batch(t, 3, 0, 0, 1, ids, tg);
    TH_CHECK(ids[0] == 61 && tg[0] == 61, "BOS first in input and labels: %d %d", ids[0], tg[0]);
    TH_CHECK(tg[1] == ids[1] && tg[2] == (ids[1] + ids[2]) % 60 && tg[3] == (ids[1] + ids[2] + ids[3]) % 60, "Z60 prefix sums");
    task_free(t);
    group_free(&z);
    group_free(&a);
}

/* fp-rnn §6.1 indexing: S5 = the 120 permutations in lexicographic (itertools) order, A4 x Z5 =
 * (a, z) with index 5 a + z over the lexicographic even permutations of (1,2,3,4), Z60 = 0..59. */
static void test_group_indexing(void) {
    Group s5, a4z5, z60;
    TH_CHECK(!group_create(&s5, "S5") && !group_create(&a4z5, "A4xZ5") && !group_create(&z60, "Z60"), "%s", err_msg());
    /* independent enumeration: five nested loops over distinct digits visit tuples in lex order */
    int idx = 0, ok = 1, even_idx = 0, ok_a5 = 1;
    Group a5;
    TH_CHECK(!group_create(&a5, "A5"), "%s", err_msg());
    char want[64], got[64];
    for (int p0 = 1; p0 <= 5; p0++)
        for (int p1 = 1; p1 <= 5; p1++)
            for (int p2 = 1; p2 <= 5; p2++)
                for (int p3 = 1; p3 <= 5; p3++)
                    for (int p4 = 1; p4 <= 5; p4++) {
                        int p[5] = {p0, p1, p2, p3, p4}, used = 0, inv = 0;
                        for (int i = 0; i < 5; i++) used |= 1 << p[i];
                        if (used != 0x3E) continue;
                        snprintf(want, sizeof want, "(%d,%d,%d,%d,%d)", p0, p1, p2, p3, p4);
                        group_elem_str(&s5, idx++, got, sizeof got);
                        ok &= !strcmp(want, got);
                        for (int i = 0; i < 5; i++)
                            for (int j = i + 1; j < 5; j++) inv += p[i] > p[j];
                        if (inv % 2) continue;
                        group_elem_str(&a5, even_idx++, got, sizeof got);
                        ok_a5 &= !strcmp(want, got);
                    }
    TH_CHECK(ok && idx == 120 && s5.order == 120, "S5 is the lexicographic order of the 120 permutations");
    TH_CHECK(ok_a5 && even_idx == 60, "A5 keeps the lexicographic order of the even permutations");
    /* A4 x Z5: index 5 a + z; a = 2 is (1,4,2,3), the third even permutation of (1,2,3,4) */
    group_elem_str(&a4z5, 5 * 2 + 3, got, sizeof got);
    TH_CHECK(a4z5.order == 60 && !strcmp(got, "((1,4,2,3),3)"), "A4xZ5 index 13 = %s", got);
    TH_CHECK(group_mul(&a4z5, 5 * 2 + 3, 5 * 0 + 4) == 5 * 2 + 2, "A4xZ5 multiplies componentwise, z mod 5");
    TH_CHECK(group_mul(&z60, 59, 2) == 1 && z60.order == 60, "Z60 adds mod 60");
    group_free(&s5);
    group_free(&a5);
    group_free(&a4z5);
    group_free(&z60);
}

/* ---------------------------------------------------------------- tasks */

static void test_vocab(void) {
    static const struct { const char *task, *group, *monoid; int V; } cases[] = {
        {"word", "A5", "aperiodic", 240}, {"word", "S5", "aperiodic", 480}, {"word", "A5", "trivial", 60},
        {"word", "A4xZ5", "aperiodic", 240}, {"ios", "A5", "aperiodic", 67}, {"ios", "S5", "trivial", 127},
        {"ios", "A4xZ5", "aperiodic", 67}, {"ios", "Z60", "aperiodic", 67},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Task *t = make_task((const char *[]){"task", cases[i].task, "group", cases[i].group, "monoid", cases[i].monoid, NULL});
        if (!t) continue;
        TH_CHECK(task_vocab(t) == cases[i].V, "%s %s %s: vocab %d, want %d", cases[i].task, cases[i].group, cases[i].monoid,
                 task_vocab(t), cases[i].V);
        task_free(t);
    }
}

/* Index of the permutation q (1-based images) in G, by linear search of the factor's list. */
static int find_perm(const Group *g, const unsigned char *q) {
    const GroupFactor *f = &g->factor[0];
    for (int i = 0; i < f->order; i++)
        if (!memcmp(f->perm + (size_t)i * f->n, q, (size_t)f->n)) return i;
    return -1;
}

/* Brute force: the running permutation c = x_0 ∘ x_1 ∘ ... composed by applying the maps. */
static int brute_prefix(const Group *g, const int *gs, int n_tok, int stride, int offset, int *out) {
    const GroupFactor *f = &g->factor[0];
    unsigned char c[16], nc[16];
    for (int i = 0; i < f->n; i++) c[i] = (unsigned char)(i + 1);
    for (int t = 0; t < n_tok; t++) {
        const unsigned char *px = f->perm + (size_t)(gs[t] / stride - offset) * f->n;
        for (int i = 0; i < f->n; i++) nc[i] = c[px[i] - 1];   /* (c∘x)(i) = c(x(i)) */
        memcpy(c, nc, (size_t)f->n);
        out[t] = find_perm(g, c);
    }
    return 0;
}

static void test_word_prefix_products(void) {
    const char *groups[] = {"A5", "S5", "S4"};
    for (int gi = 0; gi < 3; gi++) {
        Task *t = make_task((const char *[]){"group", groups[gi], "p", "0.3", "train_len", "40", "seed", "11", NULL});
        const Group *g = task_group(t);
        enum { B = 6, T = 40 };
        int ids[B * T], tg[B * T], want_g[T], bad = 0;
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0) task_train_batch(t, 17, 0, B, ids, tg);
            else task_eval_batch(t, T, 0.5f, 100, B, ids, tg);
            for (int b = 0; b < B; b++) {
                const int *x = ids + b * T, *y = tg + b * T;
                brute_prefix(g, x, T, 4, 0, want_g);
                int m = -1;
                for (int i = 0; i < T; i++) {
                    m = i ? SPEC_M[m][x[i] % 4] : x[i] % 4;
                    bad += y[i] != want_g[i] * 4 + m;
                }
            }
        }
        TH_CHECK(!bad, "word %s: %d targets differ from the brute-force prefix product", groups[gi], bad);
        task_free(t);
    }
}

static void test_ios_prefix_and_layout(void) {
    for (int pad_loss = 0; pad_loss <= 1; pad_loss++) {
        Task *t = make_task((const char *[]){"task", "ios", "group", "S5", "train_len", "12", "pad_loss", pad_loss ? "1" : "0", NULL});
        const Group *g = task_group(t);
        int PAD = task_special(t, TASK_PAD), BOS = task_special(t, TASK_BOS), Tm = task_train_seq_len(t);
        TH_CHECK(Tm == 13, "train T = k+1 = 13, got %d", Tm);
        enum { B = 64 };
        int ids[B * 13], tg[B * 13], want[32], bad = 0, kmin = 99, kmax = 0;
        task_train_batch(t, 3, 0, B, ids, tg);
        for (int b = 0; b < B; b++) {
            const int *x = ids + b * Tm, *y = tg + b * Tm;
            int k = 0;
            while (k + 1 < Tm && x[k + 1] < g->order) k++;
            kmin = k < kmin ? k : kmin;
            kmax = k > kmax ? k : kmax;
            bad += x[0] != BOS || y[0] != BOS;
            brute_prefix(g, x + 1, k, 1, 0, want);
            for (int i = 1; i <= k; i++) bad += y[i] != want[i - 1];
            for (int i = k + 1; i < Tm; i++) bad += x[i] != PAD || y[i] != (pad_loss ? PAD : TASK_IGNORE);
        }
        TH_CHECK(!bad, "ios pad_loss=%d: %d layout/prefix errors", pad_loss, bad);
        TH_CHECK(kmin == 2 && kmax == 12, "ios lengths should span 2..12 over 64 rows: %d..%d", kmin, kmax);
        /* eval rows: exactly len+1 positions, no padding, every position scored */
        int ei[3 * 21], et[3 * 21];
        task_eval_batch(t, 20, 0, 0, 3, ei, et);
        bad = 0;
        for (int b = 0; b < 3; b++) {
            bad += ei[b * 21] != BOS || et[b * 21] != BOS;
            brute_prefix(g, ei + b * 21 + 1, 20, 1, 0, want);
            for (int i = 1; i <= 20; i++) bad += ei[b * 21 + i] >= g->order || et[b * 21 + i] != want[i - 1];
        }
        TH_CHECK(!bad, "ios eval rows: %d errors", bad);
        task_free(t);
    }
}

static void test_determinism(void) {
    enum { B = 8, T = 32 };
    int a[B * T], at[B * T], b[B * T], bt[B * T];
    Task *t = make_task((const char *[]){"train_len", "32", "p", "0.5", "seed", "5", NULL});
    Task *t2 = make_task((const char *[]){"train_len", "32", "p", "0.5", "seed", "6", NULL});
    task_train_batch(t, 9, 0, B, a, at);
    task_train_batch(t, 9, 0, B, b, bt);
    TH_CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "same seed and step give the same batch");
    task_train_batch(t, 10, 0, B, b, bt);
    TH_CHECK(memcmp(a, b, sizeof a), "different steps differ");
    task_train_batch(t2, 9, 0, B, b, bt);
    TH_CHECK(memcmp(a, b, sizeof a), "different seeds differ");
    task_eval_batch(t, T, 0.5f, 0, B, b, bt);
    task_train_batch(t, 0, 0, B, a, at);
    TH_CHECK(memcmp(a, b, sizeof a), "train and eval streams differ");
    int r1[B * T], r1t[B * T];
    for (int i = 0; i < B; i++) TH_CHECK(memcmp(a + i * T, a + ((i + 1) % B) * T, sizeof(int) * T), "rows %d and %d equal", i, i + 1);
    /* rows do not depend on the batch split: eval index0 and training row0 */
    task_eval_batch(t, T, 0.5f, 40, B, a, at);
    task_eval_batch(t, T, 0.5f, 40, 3, b, bt);
    task_eval_batch(t, T, 0.5f, 43, 5, b + 3 * T, bt + 3 * T);
    TH_CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "eval batch of 8 = batches of 3 + 5 at the same indices");
    task_train_batch(t, 4, 0, B, a, at);
    task_train_batch(t, 4, 0, 3, r1, r1t);
    task_train_batch(t, 4, 3, 5, r1 + 3 * T, r1t + 3 * T);
    TH_CHECK(!memcmp(a, r1, sizeof a) && !memcmp(at, r1t, sizeof at), "train batch of 8 = rows 0..2 + 3..7 of the same step");
    /* a short eval sample is the prefix of the longer one at the same index */
    int s16[16], s16t[16];
    task_eval_batch(t, 16, 0.5f, 41, 1, s16, s16t);
    TH_CHECK(!memcmp(s16, b + T, sizeof s16) && !memcmp(s16t, bt + T, sizeof s16t), "eval prefix property");
    task_free(t);
    task_free(t2);
}

static void test_p_extremes(void) {
    enum { B = 64, T = 64 };
    static int ids[B * T], tg[B * T];
    Task *t = make_task((const char *[]){"p", "1", "train_len", "64", NULL});
    task_train_batch(t, 0, 0, B, ids, tg);
    int non_id = 0, m_seen[4] = {0};
    for (int i = 0; i < B * T; i++) { non_id += ids[i] / 4 != 0; m_seen[ids[i] % 4]++; }
    TH_CHECK(!non_id, "p = 1: %d tokens with a non-identity group part", non_id);
    TH_CHECK(m_seen[0] && m_seen[1] && m_seen[2] && m_seen[3], "p = 1 still draws every monoid element");
    task_free(t);
    t = make_task((const char *[]){"p", "0.9", "train_len", "64", NULL});
    task_train_batch(t, 0, 0, B, ids, tg);
    int id_n = 0;
    for (int i = 0; i < B * T; i++) id_n += ids[i] / 4 == 0;
    double frac = (double)id_n / (B * T), want = 0.9 + 0.1 / 60;
    TH_CHECK(frac > want - 0.03 && frac < want + 0.03, "p = 0.9: identity fraction %.3f, want ~%.3f", frac, want);
    task_eval_batch(t, T, 0.0f, 0, B, ids, tg);
    id_n = 0;
    for (int i = 0; i < B * T; i++) id_n += ids[i] / 4 == 0;
    TH_CHECK(id_n < B * T / 20, "eval p = 0: identity fraction %.3f (want ~1/60)", (double)id_n / (B * T));
    task_free(t);
}

static void test_shift(void) {
    enum { B = 4, T = 16 };
    int a[B * T], at[B * T], b[B * T], bt[B * T], bad = 0;
    Task *t0 = make_task((const char *[]){"train_len", "16", NULL});
    Task *t1 = make_task((const char *[]){"train_len", "16", "shift", "1", NULL});
    task_train_batch(t0, 2, 0, B, a, at);
    task_train_batch(t1, 2, 0, B, b, bt);
    TH_CHECK(!memcmp(a, b, sizeof a), "shift does not change inputs");
    for (int r = 0; r < B; r++) {
        for (int i = 0; i + 1 < T; i++) bad += bt[r * T + i] != at[r * T + i + 1];
        bad += bt[r * T + T - 1] != TASK_IGNORE;
    }
    TH_CHECK(!bad, "shift = 1: targets are y_{t+1}, last ignored (%d bad)", bad);
    task_eval_batch(t0, T, 0.9f, 0, B, a, at);
    task_eval_batch(t1, T, 0.9f, 0, B, b, bt);
    TH_CHECK(!memcmp(at, bt, sizeof at), "eval targets are never shifted");
    task_free(t0);
    task_free(t1);
}

/* len_curriculum: the step -> length map, rows of the curriculum's length (a word row is the prefix
 * of the full-length row of the same step and row; ios lengths stay within 2..L), the description,
 * and every malformed or impossible schedule refused with the key named. */
static void test_len_curriculum(void) {
    Task *t = make_task((const char *[]){"train_len", "32", "p", "0.5", "seed", "3", "len_curriculum", " 8:10, 16:25 ", NULL});
    Task *full = make_task((const char *[]){"train_len", "32", "p", "0.5", "seed", "3", NULL});
    static const int at[][2] = {{0, 8}, {9, 8}, {10, 16}, {24, 16}, {25, 32}, {1000, 32}};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        TH_CHECK(task_train_len_at(t, (uint64_t)at[i][0]) == at[i][1] && task_train_seq_len_at(t, (uint64_t)at[i][0]) == at[i][1],
                 "step %d: length %d, want %d", at[i][0], task_train_len_at(t, (uint64_t)at[i][0]), at[i][1]);
    TH_CHECK(task_train_seq_len(t) == 32 && task_train_len_at(full, 0) == 32, "the longest T is train_len's");
    enum { B = 5 };
    int a[B * 32], at_[B * 32], f[B * 32], ft[B * 32], bad = 0;
    static const int steps[] = {4, 12, 30};
    for (int si = 0; si < 3; si++) {
        int L = task_train_len_at(t, (uint64_t)steps[si]);
        task_train_batch(t, (uint64_t)steps[si], 0, B, a, at_);
        task_train_batch(full, (uint64_t)steps[si], 0, B, f, ft);
        for (int b = 0; b < B; b++)
            bad += memcmp(a + b * L, f + b * 32, sizeof(int) * (size_t)L) || memcmp(at_ + b * L, ft + b * 32, sizeof(int) * (size_t)L);
    }
    TH_CHECK(!bad, "word curriculum rows: %d of %d rows are not the prefix of the full-length row", bad, 3 * B);
    char d[256];
    task_describe(t, d, sizeof d);
    TH_CHECK(strstr(d, "length 32 (curriculum: length 8 before step 10, 16 before step 25)"), "describe: %s", d);
    task_free(t);
    task_free(full);
    /* ios: T = L + 1 in the phase, lengths 2..L */
    t = make_task((const char *[]){"task", "ios", "group", "S3", "train_len", "12", "len_curriculum", "4:5", NULL});
    TH_CHECK(task_train_seq_len_at(t, 0) == 5 && task_train_seq_len_at(t, 5) == 13, "ios T per phase: %d, %d",
             task_train_seq_len_at(t, 0), task_train_seq_len_at(t, 5));
    enum { R = 64 };
    int ids[R * 5], tg[R * 5], kmin = 99, kmax = 0, PAD = task_special(t, TASK_PAD);
    task_train_batch(t, 2, 0, R, ids, tg);
    for (int b = 0; b < R; b++) {
        int k = 0;
        while (k + 1 < 5 && ids[b * 5 + k + 1] != PAD) k++;
        kmin = k < kmin ? k : kmin, kmax = k > kmax ? k : kmax;
    }
    TH_CHECK(kmin == 2 && kmax == 4, "ios curriculum phase lengths 2..4, got %d..%d", kmin, kmax);
    task_free(t);
    static const struct { const char *task, *value, *part; } bad_cfg[] = {
        {"word", "16:10,8:20", "lengths must increase"}, {"word", "8:20,16:10", "steps must increase"},
        {"word", "8:0", "steps must increase"},          {"word", "64:10", "train_len - 1 = 63"},
        {"word", "0:10", "not in 1.."},                  {"word", "8", "LENGTH:STEP"},
        {"word", "8:", "LENGTH:STEP"},                   {"word", "8:10,", "LENGTH:STEP"},
        {"word", "8:10;16:20", "LENGTH:STEP"},           {"ios", "1:10", "not in 2.."},
        {"copy", "8:10", "applies to word and ios"},     {"parity", "8:10", "applies to word and ios"},
    };
    for (size_t i = 0; i < sizeof bad_cfg / sizeof bad_cfg[0]; i++) {
        TaskCfg c;
        task_cfg_defaults(&c);
        task_cfg_set(&c, "task", bad_cfg[i].task);
        task_cfg_set(&c, "len_curriculum", bad_cfg[i].value);
        int rc = task_cfg_validate(&c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "'len_curriculum'") && strstr(err_msg(), bad_cfg[i].part),
                 "%s len_curriculum '%s': rc %d, '%s'", bad_cfg[i].task, bad_cfg[i].value, rc, err_msg());
    }
    TaskCfg c;
    task_cfg_defaults(&c);
    task_cfg_set(&c, "shift", "1");
    task_cfg_set(&c, "len_curriculum", "1:10");
    TH_CHECK(task_cfg_validate(&c) == IM_EINVAL && strstr(err_msg(), "not in 2.."), "shift needs phases of length 2: %s", err_msg());
}

static void test_config(void) {
    TaskCfg c;
    task_cfg_defaults(&c);
    TH_CHECK(!strcmp(c.task, "word") && !strcmp(c.group, "A5") && c.p == 0.9 && c.eval_samples == 512 && !c.pad_loss && !c.shift,
             "defaults");
    TH_CHECK(task_cfg_validate(&c) == IM_OK, "defaults validate: %s", err_msg());
    TH_CHECK(task_cfg_has("group") && task_cfg_has("eval_ps") && !task_cfg_has("d_model"), "task_cfg_has");
    TH_CHECK(task_cfg_set(&c, "colour", "red") == IM_EINVAL && strstr(err_msg(), "'colour'"), "unknown key: %s", err_msg());
    TH_CHECK(task_cfg_set(&c, "p", "high") == IM_EINVAL && strstr(err_msg(), "'p'"), "ill-typed float: %s", err_msg());
    TH_CHECK(task_cfg_set(&c, "train_len", "1.5") == IM_EINVAL && strstr(err_msg(), "'train_len'"), "ill-typed int: %s", err_msg());
    static const struct { const char *key, *value, *part; } bad[] = {
        {"task", "copyy", "'task'"}, {"group", "B5", "'group'"}, {"group", "S9", "S9"}, {"monoid", "free", "'monoid'"},
        {"p", "1.5", "'p'"}, {"train_len", "0", "'train_len'"}, {"eval_lens", "8,x", "'eval_lens'"},
        {"eval_lens", "0", "'eval_lens'"}, {"eval_ps", "0.5,2", "'eval_ps'"}, {"eval_samples", "0", "'eval_samples'"},
        {"pad_loss", "2", "'pad_loss'"}, {"shift", "-1", "'shift'"}, {"seed", "-3", "'seed'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        task_cfg_defaults(&c);
        TH_CHECK(task_cfg_set(&c, bad[i].key, bad[i].value) == IM_OK, "set %s", bad[i].key);
        int rc = task_cfg_validate(&c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i].part), "%s = %s: rc %d, '%s'", bad[i].key, bad[i].value, rc, err_msg());
        Task *t = (Task *)&c;
        TH_CHECK(task_create(&t, &c) == IM_EINVAL && t == NULL, "task_create rejects %s = %s", bad[i].key, bad[i].value);
    }
    task_cfg_defaults(&c);
    task_cfg_set(&c, "task", "ios");
    task_cfg_set(&c, "train_len", "1");
    TH_CHECK(task_cfg_validate(&c) == IM_EINVAL && strstr(err_msg(), "'train_len'"), "ios needs train_len >= 2");
    /* JSON: every key once, exact size reporting */
    task_cfg_defaults(&c);
    task_cfg_set(&c, "eval_lens", "a\"b");
    char js[1024];
    size_t need = task_cfg_to_json(&c, js, sizeof js);
    TH_CHECK(need == strlen(js) + 1, "to_json returns bytes needed: %zu vs %zu", need, strlen(js) + 1);
    TH_CHECK(strstr(js, "\"group\": \"A5\"") && strstr(js, "\"p\": 0.90000000000000002") && strstr(js, "\"eval_lens\": \"a\\\"b\""),
             "json: %s", js);
    char small[8];
    TH_CHECK(task_cfg_to_json(&c, small, sizeof small) == need && strlen(small) == 7, "truncated json still reports the size");
}

static void test_eval_lists(void) {
    const int *lens;
    const float *ps;
    Task *t = make_task((const char *[]){"train_len", "64", NULL});
    int n = task_eval_lens(t, &lens), np = task_eval_ps(t, &ps);
    TH_CHECK(n == 3 && lens[0] == 64 && lens[1] == 128 && lens[2] == 256, "word default lens");
    TH_CHECK(np == 2 && ps[0] == 0.9f && ps[1] == 0.5f, "word default ps");
    task_free(t);
    t = make_task((const char *[]){"task", "ios", "train_len", "16", "eval_ps", "0.3", NULL});
    n = task_eval_lens(t, &lens);
    np = task_eval_ps(t, &ps);
    int ok = n == 17 && lens[0] == 2;
    for (int i = 1; i < n && ok; i++) ok = lens[i] == 4 * i;
    TH_CHECK(ok, "ios default lens 2,4,..,64 (got %d entries)", n);
    TH_CHECK(np == 1 && ps[0] == -1, "ios has one p entry, -1");
    task_free(t);
    t = make_task((const char *[]){"eval_lens", " 8, 16 ,300", "eval_ps", "0.5,1", NULL});
    n = task_eval_lens(t, &lens);
    np = task_eval_ps(t, &ps);
    TH_CHECK(n == 3 && lens[0] == 8 && lens[1] == 16 && lens[2] == 300, "custom lens");
    TH_CHECK(np == 2 && ps[0] == 0.5f && ps[1] == 1.0f, "custom ps");
    task_free(t);
}

static void test_score(void) {
    enum { B = 3, T = 12, V = 5, VS = 7 };
    float logits[B * T * VS];
    int tg[B * T];
    for (int i = 0; i < B * T; i++) {
        tg[i] = i % V;
        for (int v = 0; v < VS; v++) logits[i * VS + v] = v == tg[i] ? 1.0f : 0.0f;
        logits[i * VS + V] = 9.0f; /* a padded vocabulary row must never win */
    }
    /* row 0 all right; row 1: one mistake at position 0 (outside the last 10); row 2: two ignored + wrong last */
    logits[(1 * T + 0) * VS + (tg[T] + 1) % V] = 2.0f;
    tg[2 * T + 0] = tg[2 * T + 1] = TASK_IGNORE;
    logits[(2 * T + 11) * VS + (tg[2 * T + 11] + 1) % V] = 2.0f;
    TaskScore s = {0};
    task_score(&s, logits, V, VS, tg, B, T);
    TH_CHECK(s.tok_n == 34 && s.tok_ok == 32, "tokens %g/%g", s.tok_ok, s.tok_n);
    TH_CHECK(s.last10_n == 30 && s.last10_ok == 29, "last10 %g/%g", s.last10_ok, s.last10_n);
    TH_CHECK(s.seq_n == 3 && s.seq_ok == 1, "seq %g/%g", s.seq_ok, s.seq_n);
    /* ties go to the lowest id; a row with nothing scored is not counted */
    for (int v = 0; v < VS; v++) logits[v] = 0;
    for (int i = 0; i < T; i++) tg[i] = i ? TASK_IGNORE : 0;
    TaskScore s2 = {0};
    task_score(&s2, logits, V, VS, tg, 1, T);
    TH_CHECK(s2.tok_ok == 1 && s2.seq_ok == 1 && s2.last10_n == 1, "tie -> id 0");
    for (int i = 0; i < T; i++) tg[i] = TASK_IGNORE;
    TaskScore s3 = {0};
    task_score(&s3, logits, V, VS, tg, 1, T);
    TH_CHECK(s3.seq_n == 0 && s3.tok_n == 0, "an all-ignored row counts nothing");
    int lens[4] = {8, 32, 16, 64};
    double acc[4] = {1.0, 0.95, 0.99, 0.5};
    TH_CHECK(task_longest_len(lens, acc, 4, 0.9) == 32 && task_longest_len(lens, acc, 4, 0.999) == 8, "longest len");
}

static void test_token_str(void) {
    char buf[64];
    Task *t = make_task((const char *[]){"task", "ios", "group", "A5", NULL});
    task_token_str(t, 61, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "[BOS]"), "ios 61 = %s", buf);
    task_token_str(t, 1, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "(1,2,4,5,3)"), "ios 1 = %s", buf);
    task_free(t);
    t = make_task(NULL);
    task_token_str(t, 1 * 4 + 3, buf, sizeof buf);
    TH_CHECK(!strcmp(buf, "((1,2,4,5,3),X)"), "word 7 = %s", buf);
    task_free(t);
}

/* ---------------------------------------------------------------- dump format */

static void test_datafile(void) {
    char path[256], trunc[300];
    snprintf(path, sizeof path, "/tmp/test_data_%ld.bin", (long)getpid());
    snprintf(trunc, sizeof trunc, "%s.cut", path);
    Task *t = make_task((const char *[]){"task", "ios", "group", "A4xZ5", "train_len", "10", NULL});
    enum { N = 37, T = 11 };
    int ids[N * T], tg[N * T], ri[T], rt[T];
    task_train_batch(t, 0, 0, N, ids, tg);
    DataHeader h = {0, N, T, (uint32_t)task_vocab(t), DATAFILE_FLAG_IOS | DATAFILE_FLAG_TRAIN};
    DataWriter w;
    TH_CHECK(datafile_create(&w, path, &h) == IM_OK, "create: %s", err_msg());
    /* rows out of order and in two chunks */
    TH_CHECK(datafile_put(&w, 20, N - 20, ids + 20 * T, tg + 20 * T) == IM_OK, "put tail: %s", err_msg());
    TH_CHECK(access(path, F_OK) != 0, "nothing under the final name before commit");
    TH_CHECK(datafile_put(&w, 0, 20, ids, tg) == IM_OK, "put head");
    int bad_tok = -5;
    TH_CHECK(datafile_put(&w, 0, 1, &bad_tok, tg) == IM_EINVAL, "negative input token rejected");
    TH_CHECK(datafile_put(&w, 0, 20, ids, tg) == IM_OK, "rewrite head");
    TH_CHECK(datafile_commit(&w) == IM_OK, "commit: %s", err_msg());
    DataReader r;
    TH_CHECK(datafile_open(&r, path) == IM_OK, "open: %s", err_msg());
    TH_CHECK(r.h.version == 1 && r.h.N == N && r.h.T == T && r.h.V == 67 && r.h.flags == 3, "header round trip");
    int bad = 0, n_ign = 0;
    for (int i = 0; i < N; i++) {
        TH_CHECK(datafile_row(&r, (uint32_t)i, ri, rt) == IM_OK, "row %d: %s", i, err_msg());
        bad += memcmp(ri, ids + i * T, sizeof ri) || memcmp(rt, tg + i * T, sizeof rt);
        for (int j = 0; j < T; j++) n_ign += rt[j] == TASK_IGNORE;
    }
    TH_CHECK(!bad && n_ign > 0, "rows round trip (%d bad, %d ignored targets)", bad, n_ign);
    TH_CHECK(datafile_row(&r, N, ri, rt) == IM_EINVAL, "row past N rejected");
    datafile_close(&r);
    /* a truncated copy, a foreign file, a future version */
    FILE *in = fopen(path, "rb"), *out = fopen(trunc, "wb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in);
    fwrite(buf, 1, n - 3, out);
    fclose(in);
    fclose(out);
    TH_CHECK(datafile_open(&r, trunc) == IM_EFORMAT && strstr(err_msg(), "truncated"), "truncated: %s", err_msg());
    out = fopen(trunc, "wb");
    fwrite(buf, 1, 20, out);
    fclose(out);
    TH_CHECK(datafile_open(&r, trunc) == IM_EFORMAT && strstr(err_msg(), "header"), "cut header: %s", err_msg());
    out = fopen(trunc, "wb");
    fputs("{\"not\": \"a data file\"}\n", out);
    fclose(out);
    TH_CHECK(datafile_open(&r, trunc) == IM_EFORMAT && strstr(err_msg(), "magic"), "foreign: %s", err_msg());
    buf[8] = 2;
    out = fopen(trunc, "wb");
    fwrite(buf, 1, n, out);
    fclose(out);
    TH_CHECK(datafile_open(&r, trunc) == IM_EFORMAT && strstr(err_msg(), "version 2"), "version: %s", err_msg());
    TH_CHECK(datafile_open(&r, "/nonexistent/x.bin") == IM_EIO, "missing file");
    /* an unfinished writer leaves nothing behind */
    TH_CHECK(datafile_create(&w, trunc, &h) == IM_OK, "create 2");
    TH_CHECK(datafile_put(&w, 0, 3, ids, tg) == IM_OK, "put 3 rows");
    TH_CHECK(datafile_commit(&w) == IM_EINVAL && access(w.file.tmp, F_OK) != 0, "commit of a short file fails and removes the temp");
    h.V = 70000;
    TH_CHECK(datafile_create(&w, trunc, &h) == IM_EINVAL, "V > 65535 rejected");
    remove(path);
    remove(trunc);
    task_free(t);
}

int main(void) {
    th_name = "test_data";
    test_group_axioms();
    test_perm_convention();
    test_products();
    test_monoids();
    test_bad_names();
    test_worked_examples();
    test_group_indexing();
    test_vocab();
    test_word_prefix_products();
    test_ios_prefix_and_layout();
    test_determinism();
    test_p_extremes();
    test_shift();
    test_len_curriculum();
    test_config();
    test_eval_lists();
    test_score();
    test_token_str();
    test_datafile();
    return th_done();
}
