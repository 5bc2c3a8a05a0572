/* arena.c: see arena.h. */
#include "arena.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

void arena_measure(Arena *a) { memset(a, 0, sizeof *a); a->measuring = 1; }

int arena_init(Arena *a, size_t cap) {
    memset(a, 0, sizeof *a);
    cap = align_up(cap ? cap : ARENA_ALIGN);
    a->base = aligned_alloc(ARENA_ALIGN, cap);
    if (!a->base) return err_set(IM_ENOMEM, "cannot allocate an arena of %zu bytes", cap);
    memset(a->base, 0, cap);
    a->cap = cap;
    return IM_OK;
}

void arena_free(Arena *a) { free(a->base); memset(a, 0, sizeof *a); }

void *arena_alloc(Arena *a, size_t bytes) {
    size_t n = align_up(bytes);
    if (a->measuring) {
        a->top += n;
        if (a->top > a->peak) a->peak = a->top;
        return NULL;
    }
    CHECK(a->top + n <= a->cap, "arena overflow: %zu + %zu > %zu (plan and use disagree)", a->top, n, a->cap);
    void *p = a->base + a->top;
    a->top += n;
    if (a->top > a->peak) a->peak = a->top;
    return p;
}

float *arena_floats(Arena *a, size_t n) { return (float *)arena_alloc(a, n * sizeof(float)); }
size_t arena_mark(const Arena *a) { return a->top; }
void arena_pop(Arena *a, size_t mark) { CHECK(mark <= a->top, "bad arena mark"); a->top = mark; }
void arena_reset(Arena *a) { a->top = 0; }
