/* arena.h: bump allocators planned before allocation.
 *
 * A model's memory is measured first (arena_measure: every arena_alloc only counts bytes and
 * returns NULL), then allocated once (arena_init with the measured peak), then carved by the
 * same sequence of arena_alloc calls. mark/pop give scoped scratch. Alignment is 64 bytes.
 */
#ifndef IMPLICIT_ARENA_H
#define IMPLICIT_ARENA_H

#include <stddef.h>

typedef struct {
    char *base;     /* NULL while measuring */
    size_t cap;     /* bytes available */
    size_t top;     /* bytes in use */
    size_t peak;    /* highest top seen: the size a measuring pass reports */
    int measuring;
} Arena;

#define ARENA_ALIGN 64

void arena_measure(Arena *a);                 /* start a measuring pass (no memory) */
int arena_init(Arena *a, size_t cap);         /* one zeroed allocation; IM_ENOMEM on failure */
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t bytes);    /* NULL while measuring; CHECKs capacity */
float *arena_floats(Arena *a, size_t n);
size_t arena_mark(const Arena *a);
void arena_pop(Arena *a, size_t mark);        /* free everything allocated after mark */
void arena_reset(Arena *a);

#endif
