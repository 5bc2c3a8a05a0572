/* group.c: permutation groups, cyclic groups, direct products and the two monoids (see group.h).
 *
 * Permutations are enumerated with the classic "next permutation" step, which visits the image
 * tuples in lexicographic order starting at the identity, so index 0 is the identity for S_n and
 * for A_n (the identity is even). To find the index of a product we rank the composed tuple by
 * its Lehmer code (its position among all n! tuples) and map that rank to the factor's index.
 */
#include "group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

/* ---------------------------------------------------------------- name parsing */

/* Order of one factor, or a value > GROUP_MAX_ORDER when it is too large (never overflows). */
static long factor_order(char kind, long n) {
    if (kind == 'Z') return n;
    long f = 1;
    for (long i = 2; i <= n && f <= GROUP_MAX_ORDER; i++) f *= i;
    if (kind == 'A' && n >= 2) f = (f <= GROUP_MAX_ORDER) ? f / 2 : f;
    return f;
}

/* Parse one factor "S5" / "a4" / "Z60" from tok[0..len). */
static int parse_factor(const char *tok, size_t len, const char *full, GroupFactor *f) {
    if (len == 0) return err_set(IM_EINVAL, "group '%s': empty factor (factors are S<n>, A<n>, Z<n> joined by 'x')", full);
    char kind = tok[0];
    if (kind >= 'a' && kind <= 'z') kind = (char)(kind - 'a' + 'A');
    if (kind != 'S' && kind != 'A' && kind != 'Z')
        return err_set(IM_EINVAL, "group '%s': unknown factor '%.*s' (factors are S<n>, A<n>, Z<n> joined by 'x', e.g. A4xZ5)",
                       full, (int)len, tok);
    /* at most 9 digits, so the size cannot overflow a long while it is read */
    if (len == 1 || len > 10)
        return err_set(IM_EINVAL, "group '%s': factor '%.*s' needs a size of 1..%d digits, e.g. %c5", full, (int)len, tok, 9, kind);
    long n = 0;
    for (size_t i = 1; i < len; i++) {
        if (tok[i] < '0' || tok[i] > '9')
            return err_set(IM_EINVAL, "group '%s': factor '%.*s' has a non-digit size", full, (int)len, tok);
        n = n * 10 + (tok[i] - '0');
    }
    if (n < 1) return err_set(IM_EINVAL, "group '%s': factor '%.*s' must have size >= 1", full, (int)len, tok);
    long order = factor_order(kind, n);
    if (order > GROUP_MAX_ORDER)
        return err_set(IM_EINVAL, "group '%s': factor '%.*s' has more than %d elements (the table cap)", full, (int)len, tok,
                       GROUP_MAX_ORDER);
    f->kind = kind;
    f->n = (int)n;
    f->order = (int)order;
    f->perm = NULL;
    return IM_OK;
}

/* Split `name` on 'x'/'X' into factors; fills factors and the canonical name, returns the order. */
static int parse_name(const char *name, GroupFactor *fac, int *n_factor, char *canon, int *order) {
    if (!name || !*name) return err_set(IM_EINVAL, "empty group name (examples: S5, A5, Z60, A4xZ5)");
    if (strlen(name) >= GROUP_NAME_LEN) return err_set(IM_EINVAL, "group name '%.40s...' is too long", name);
    long total = 1;
    int nf = 0;
    size_t at = 0;
    const char *s = name;
    for (;;) {
        size_t len = strcspn(s, "xX");
        if (nf == GROUP_MAX_FACTORS)
            return err_set(IM_EINVAL, "group '%s': more than %d factors", name, GROUP_MAX_FACTORS);
        int rc = parse_factor(s, len, name, &fac[nf]);
        if (rc) return rc;
        total *= fac[nf].order;
        if (total > GROUP_MAX_ORDER)
            return err_set(IM_EINVAL, "group '%s': more than %d elements (the table cap; %d = |S7|)", name, GROUP_MAX_ORDER,
                           GROUP_MAX_ORDER);
        at += (size_t)snprintf(canon + at, GROUP_NAME_LEN - at, "%s%c%d", nf ? "x" : "", fac[nf].kind, fac[nf].n);
        nf++;
        if (!s[len]) break;
        s += len + 1;
    }
    *n_factor = nf;
    *order = (int)total;
    return IM_OK;
}

int group_parse(const char *name, int *order) {
    GroupFactor fac[GROUP_MAX_FACTORS];
    char canon[GROUP_NAME_LEN];
    int nf, ord;
    int rc = parse_name(name, fac, &nf, canon, &ord);
    if (!rc && order) *order = ord;
    return rc;
}

/* ---------------------------------------------------------------- permutations */

/* Advance p (0-based images) to the next tuple in lexicographic order; 0 after the last one. */
static int next_perm(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    int t = p[i]; p[i] = p[j]; p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) { t = p[a]; p[a] = p[b]; p[b] = t; }
    return 1;
}

/* Parity by counting inversions: O(n^2), but n <= 7 and it runs once per element. */
static int is_even(const int *p, int n) {
    int inv = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) inv += p[i] > p[j];
    return !(inv & 1);
}

/* Position of the tuple p among all n! tuples in lexicographic order (Lehmer code). */
static int lex_rank(const int *p, int n) {
    int r = 0;
    for (int i = 0; i < n; i++) {
        int smaller = 0;
        for (int j = i + 1; j < n; j++) smaller += p[j] < p[i];
        r = r * (n - i) + smaller;
    }
    return r;
}

/* Fill f->perm and the (order, order) table of S_n or A_n. */
static void build_perm_factor(GroupFactor *f, uint16_t *mul) {
    int n = f->n, nfact = 1, p[16], c[16];
    for (int i = 2; i <= n; i++) nfact *= i;
    /* rank among all n! tuples -> index in this factor (-1 for odd permutations of A_n) */
    int *rank_to_idx = xmalloc(sizeof(int) * (size_t)nfact);
    f->perm = xmalloc((size_t)f->order * (size_t)n);
    for (int i = 0; i < n; i++) p[i] = i;
    int idx = 0, r = 0;
    do {
        int keep = f->kind == 'S' || is_even(p, n);
        rank_to_idx[r++] = keep ? idx : -1;
        if (keep) {
            for (int i = 0; i < n; i++) f->perm[(size_t)idx * n + i] = (unsigned char)(p[i] + 1);
            idx++;
        }
    } while (next_perm(p, n));
    CHECK(idx == f->order && r == nfact, "enumerated %d of %d elements", idx, f->order);
    for (int a = 0; a < f->order; a++) {
        const unsigned char *pa = f->perm + (size_t)a * n;
        for (int b = 0; b < f->order; b++) {
            const unsigned char *pb = f->perm + (size_t)b * n;
            /* (a∘b)(i) = a(b(i)): apply b first, then a */
            for (int i = 0; i < n; i++) c[i] = pa[pb[i] - 1] - 1;
            int k = rank_to_idx[lex_rank(c, n)];
            CHECK(k >= 0, "the product of two even permutations is odd");
            mul[(size_t)a * f->order + b] = (uint16_t)k;
        }
    }
    free(rank_to_idx);
}

static void build_factor(GroupFactor *f, uint16_t *mul) {
    if (f->kind == 'Z') {
        for (int a = 0; a < f->n; a++)
            for (int b = 0; b < f->n; b++) mul[(size_t)a * f->n + b] = (uint16_t)((a + b) % f->n);
    } else {
        build_perm_factor(f, mul);
    }
}

/* out = A x B: the element (a, b) has index a*nb + b, and the product is componentwise. */
static void product_table(uint16_t *out, const uint16_t *ta, int na, const uint16_t *tb, int nb) {
    int n = na * nb;
    for (int a1 = 0; a1 < na; a1++)
        for (int b1 = 0; b1 < nb; b1++)
            for (int a2 = 0; a2 < na; a2++)
                for (int b2 = 0; b2 < nb; b2++)
                    out[(size_t)(a1 * nb + b1) * n + (size_t)(a2 * nb + b2)] =
                        (uint16_t)(ta[(size_t)a1 * na + a2] * nb + tb[(size_t)b1 * nb + b2]);
}

/* inv[a] = the b with a·b = b·a = identity (index 0), or -1; is_group = all have one. */
/* A quadratic scan rather than a formula per kind: it also serves the monoids and checks the
 * products instead of trusting them. */
static void fill_inverses(Group *g) {
    int n = g->order;
    g->inv = xmalloc(sizeof(int) * (size_t)n);
    g->is_group = 1;
    for (int a = 0; a < n; a++) {
        g->inv[a] = -1;
        for (int b = 0; b < n; b++)
            if (group_mul(g, a, b) == 0 && group_mul(g, b, a) == 0) { g->inv[a] = b; break; }
        if (g->inv[a] < 0) g->is_group = 0;
    }
}

/* ---------------------------------------------------------------- public */

int group_create(Group *g, const char *name) {
    memset(g, 0, sizeof *g);
    int rc = parse_name(name, g->factor, &g->n_factor, g->name, &g->order);
    if (rc) { memset(g, 0, sizeof *g); return rc; }
    /* fold the factors left to right: cur = ((F1 x F2) x F3) ... */
    int n_cur = 0;
    uint16_t *cur = NULL;
    for (int k = 0; k < g->n_factor; k++) {
        GroupFactor *f = &g->factor[k];
        uint16_t *t = xmalloc(sizeof(uint16_t) * (size_t)f->order * (size_t)f->order);
        build_factor(f, t);
        if (!cur) { cur = t; n_cur = f->order; continue; }
        uint16_t *prod = xmalloc(sizeof(uint16_t) * (size_t)(n_cur * f->order) * (size_t)(n_cur * f->order));
        product_table(prod, cur, n_cur, t, f->order);
        free(cur);
        free(t);
        cur = prod;
        n_cur *= f->order;
    }
    CHECK(n_cur == g->order, "table order %d != %d", n_cur, g->order);
    g->mul = cur;
    fill_inverses(g);
    return IM_OK;
}

/* implicit-lm §8.1: M[row][col] = row·col over {E, A, B, X} ("no substring aa" over {a, b}). */
static const uint16_t APERIODIC[4][4] = {
    {0, 1, 2, 3},  /* E */
    {1, 3, 3, 3},  /* A */
    {2, 1, 2, 3},  /* B */
    {3, 3, 3, 3},  /* X */
};

int group_create_monoid(Group *g, const char *name) {
    memset(g, 0, sizeof *g);
    int n;
    if (name && !strcmp(name, "aperiodic")) n = 4;
    else if (name && !strcmp(name, "trivial")) n = 1;
    else return err_set(IM_EINVAL, "unknown monoid '%s' (aperiodic | trivial)", name ? name : "(null)");
    snprintf(g->name, GROUP_NAME_LEN, "%s", name);
    g->order = n;
    g->n_factor = 1;
    g->factor[0] = (GroupFactor){.kind = 'M', .n = n, .order = n, .perm = NULL};
    g->mul = xmalloc(sizeof(uint16_t) * (size_t)(n * n));
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) g->mul[a * n + b] = APERIODIC[a][b];
    fill_inverses(g);
    return IM_OK;
}

void group_free(Group *g) {
    if (!g) return;
    for (int k = 0; k < g->n_factor; k++) free(g->factor[k].perm);
    free(g->mul);
    free(g->inv);
    memset(g, 0, sizeof *g);
}

static int factor_str(const GroupFactor *f, int idx, char *buf, size_t cap) {
    if (f->kind == 'Z') return snprintf(buf, cap, "%d", idx);
    if (f->kind == 'M') return snprintf(buf, cap, "%c", "EABX"[idx]);
    int at = 0;
    for (int i = 0; i < f->n; i++) {
        size_t off = (size_t)at < cap ? (size_t)at : cap;
        at += snprintf(buf + off, cap - off, "%s%d", i ? "," : "(", f->perm[(size_t)idx * f->n + i]);
    }
    size_t off = (size_t)at < cap ? (size_t)at : cap;
    return at + snprintf(buf + off, cap - off, ")");
}

/* Labels are for people (data show, test messages); nothing parses them back. */
int group_elem_str(const Group *g, int idx, char *buf, size_t cap) {
    CHECK(idx >= 0 && idx < g->order, "element %d outside 0..%d", idx, g->order - 1);
    if (g->n_factor == 1) return factor_str(&g->factor[0], idx, buf, cap);
    /* mixed radix: the last factor is the least significant digit */
    int digit[GROUP_MAX_FACTORS];
    for (int k = g->n_factor - 1; k >= 0; k--) {
        digit[k] = idx % g->factor[k].order;
        idx /= g->factor[k].order;
    }
    int at = 0;
    for (int k = 0; k < g->n_factor; k++) {
        size_t off = (size_t)at < cap ? (size_t)at : cap;
        at += snprintf(buf + off, cap - off, "%s", k ? "," : "(");
        off = (size_t)at < cap ? (size_t)at : cap;
        at += factor_str(&g->factor[k], digit[k], buf + off, cap - off);
    }
    size_t off = (size_t)at < cap ? (size_t)at : cap;
    return at + snprintf(buf + off, cap - off, ")");
}
