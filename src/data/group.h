/* group.h: finite groups and the small monoids of the state-tracking tasks, as product tables.
 *
 * Spec: implicit-lm §8.1 (G x M word problem) and fp-rnn §6.1 (Illusion-of-State word problems).
 * Tables are computed, never typed in:
 *   S<n>  permutations of (1..n) in lexicographic order of the image tuples (index 0 = identity),
 *   A<n>  the even permutations, kept in that same relative order (index 0 = identity),
 *   Z<n>  0..n-1 under addition mod n,
 *   F1xF2x...  direct products (the 'x' is case-insensitive), componentwise; the element (a, b) of
 *         AxB has index a*|B| + b, and longer products fold left: ((F1xF2)xF3), so the first
 *         factor is the most significant digit.
 * Composition convention for permutations: (a∘b)(i) = a(b(i)) (apply b first), and the table is
 * mul[a*order + b] = a∘b. The monoids are "aperiodic" = {E, A, B, X} with the Cayley table of
 * implicit-lm §8.1 (E identity, X absorbing) and "trivial" = {E}.
 * Out of scope: presentations, subgroups other than A_n, sequence sampling (task.h).
 */
#ifndef IMPLICIT_GROUP_H
#define IMPLICIT_GROUP_H

#include <stddef.h>
#include <stdint.h>

/* The largest table we build: |S7| = 5040 elements (a 5040^2 uint16 table = 51 MB). Every index
 * then fits in uint16, and so do the word-problem tokens |G|*|M| <= 20160. */
#define GROUP_MAX_ORDER 5040
#define GROUP_MAX_FACTORS 8
#define GROUP_NAME_LEN 64

typedef struct {
    char kind;            /* 'S', 'A', 'Z', or 'M' (a monoid: aperiodic or trivial) */
    int n;                /* degree for S/A, modulus for Z, order for M */
    int order;            /* number of elements of this factor */
    unsigned char *perm;  /* (order, n) images (1-based) of each element for S/A; NULL otherwise */
} GroupFactor;

typedef struct {
    char name[GROUP_NAME_LEN];   /* canonical name, e.g. "A4xZ5", "aperiodic" */
    int order;                   /* number of elements */
    int is_group;                /* 1 when every element is invertible (0 for the aperiodic monoid) */
    int n_factor;
    GroupFactor factor[GROUP_MAX_FACTORS];
    uint16_t *mul;               /* (order, order): mul[a*order + b] = a·b */
    int *inv;                    /* (order): the inverse of a, or -1 when a has none (monoids) */
} Group;

/* Build the group named `name` ("S5", "a5", "Z60", "A4xZ5", "A5xZ2xZ3"). On a malformed name, an
 * unknown factor or an order above GROUP_MAX_ORDER: IM_EINVAL with a message naming the bad part,
 * and *g is left empty (group_free is still safe). */
int group_create(Group *g, const char *name);
/* Build a monoid: "aperiodic" (implicit-lm §8.1) or "trivial". IM_EINVAL otherwise. */
int group_create_monoid(Group *g, const char *name);
void group_free(Group *g);

/* Check a group name and return its order through *order without building any table. */
int group_parse(const char *name, int *order);

static inline int group_mul(const Group *g, int a, int b) { return g->mul[(size_t)a * (size_t)g->order + (size_t)b]; }

/* Human-readable element: "(1,2,4,5,3)" for a permutation, "7" for Z_n, "E".."X" for the monoid,
 * "((1,2,3,4),3)" for a product. Returns the length written (snprintf rules). */
int group_elem_str(const Group *g, int idx, char *buf, size_t cap);

#endif
