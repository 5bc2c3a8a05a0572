/* lm_stack.h: the skeleton of the layer-stack language models, so that a family file holds only
 * its layer (lm_block.c, lm_lstm.c, lm_delta.c, and lm_resid.c's residual layer around its mixer
 * kinds) or its solve (implicit_lm.c). Internal to src/models/.
 *
 *   x_0 = Emb(ids)                  (embedding dropout, lm_common.h)
 *   x_{l+1} = Layer_l(x_l)          l = 0 .. n_layer-1, the family's LmLayerOps
 *   logits = norm_f(x_L) · Headᵀ    (lm_common.h: tied, untied, or the family's own head)
 *
 * Two levels:
 * - The plumbing every family shares, the implicit LMs included: the activation arena planned by
 *   a measuring pass, the cap on the length (attention's KV cache), the generation state of
 *   n_layer equal slots with its scratch, zeroed at state init, and their release.
 * - An explicit stack over LmLayerOps: the ModelType functions plan / fwd / bwd / state_init /
 *   step written once. The stack keeps every layer's input and cache for the backward, or, in a
 *   no_grad forward (evaluation, scoring), one input slot (two when a layer cannot write over its
 *   input) and one cache slot shared by the layers. The backward runs the layers in reverse with
 *   two gradient buffers in turn.
 *
 * A family's impl struct begins with an LmStack (m->impl points at both). A family with a head of
 * its own name sets ends.head_name at build.
 */
#ifndef IMPLICIT_LM_STACK_H
#define IMPLICIT_LM_STACK_H

#include <stddef.h>

#include "lm_common.h"

/* One family's layer, for the explicit stack. Sizes are floats and may read m->impl and
 * m->no_grad. Every function gets the model and the layer index l. */
typedef struct {
    /* Kept from fwd for bwd, per layer. With m->no_grad the stack carves one slot of this size
     * for all layers (a layer that needs buffers even without a backward), or passes cache NULL
     * when it is 0. */
    size_t (*cache_floats)(const Model *m, int B, int T);
    size_t (*scratch_floats)(const Model *m, int B, int T);   /* temporaries, shared by the layers */
    size_t (*state_floats)(const Model *m, int B);            /* the recurrent state of one layer */
    size_t (*step_scratch_floats)(const Model *m, int B);
    int in_place;   /* 1: fwd (without a cache) and step may write y over x */
    void (*bind)(Model *m);                            /* point the weights into θ / dθ, once | NULL */
    void (*carve)(Model *m, Arena *a, int B, int T);   /* the family's own activations | NULL */
    void (*begin)(Model *m, int B, int T);             /* before the layers of a forward | NULL */
    /* y:(B,T,D) = Layer_l(x:(B,T,D)); fills cache (NULL: no_grad with cache_floats 0). */
    int (*fwd)(Model *m, int l, float *y, const float *x, float *cache, float *scratch, int B, int T);
    /* dx:(B,T,D) += dy · ∂Layer_l/∂x, and the layer's parameter gradients, for the fwd of cache. */
    void (*bwd)(Model *m, int l, float *dx, const float *dy, const float *x, const float *cache, float *scratch,
                int B, int T);
    /* One token y:(B,D) = Layer_l(x:(B,D)) at position m->pos; commits the new state in place. */
    int (*step)(Model *m, int l, float *y, const float *x, float *state, float *scratch, int B);
    void (*release)(Model *m);   /* free what build allocated inside m->impl (not m->impl) | NULL */
    void (*begin_steps)(Model *m, int B);   /* after state init zeroed the state, before the steps | NULL */
} LmLayerOps;

typedef struct {
    const LmLayerOps *ops;   /* NULL: the family runs its own layers (implicit LMs) */
    int max_len;             /* > 0: forwards longer than this and steps at this position are refused */
    Arena acts;              /* activations of one forward */
    LmEnds ends;
    Arena st;                /* generation state */
    float *state;            /* (n_layer, state_per), zeroed by state init */
    size_t state_per, step_scratch_n;
    float *step_scratch;     /* (step_scratch_n) */
    void (*carve_state)(Model *m, Arena *a, int B, int T);   /* the family's own step buffers | NULL */
    /* the explicit stack's buffers */
    float *x;                /* (n_layer+1 | 1 | 2, B,T,D) layer inputs; the last goes to norm_f */
    float *cache;            /* (n_layer | 1, cache_per) | NULL */
    size_t cache_per;
    float *scratch;
    float *dx, *dx2;         /* (B,T,D) gradient buffers in turn | NULL after a no_grad plan */
    float *xs, *ys;          /* (B,D) the token's stream (ys: layers that do not step in place) */
    float *head_scratch;     /* (B*D + B) */
} LmStack;

/* ---- plumbing ---------------------------------------------------------------------------------- */
/* Refuse T above max_len, then measure, allocate and carve the activations with carve(m, a, B, T)
 * (lm_arena_plan); m->act_bytes = what it took. */
int lm_stack_plan_acts(Model *m, int B, int T, void (*carve)(Model *, Arena *, int, int));
/* Allocate the generation state for batch B: n_layer slots of state_per floats (zeroed), the
 * step scratch, and the family's own buffers by s->carve_state. */
int lm_stack_plan_state(Model *m, int B, size_t state_per, size_t step_scratch_n);
/* IM_EINVAL when the next step's position m->pos reaches max_len. */
int lm_stack_check_pos(const Model *m);
void lm_stack_free(LmStack *s);
/* Round a float count up to whole 64-byte lines, for buffers carved inside one slot. */
static inline size_t lm_floats_up(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- the explicit stack: ModelType functions over s->ops -------------------------------------- */
int lm_stack_plan(Model *m, int B, int T);
int lm_stack_fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss);
void lm_stack_bwd(Model *m);
int lm_stack_state_init(Model *m, int B);
int lm_stack_step(Model *m, const int *ids, float *logits);
/* ops->release, the arenas, then the impl itself. */
void lm_stack_free_impl(Model *m);
/* {name, family, key groups, build}: the ModelType of an explicit stack family. */
#define LM_STACK_TYPE(name, family, uses, build)                                                 \
    {name, family, uses, build, lm_stack_plan, lm_stack_fwd, lm_stack_bwd, lm_stack_state_init, \
     lm_stack_step, lm_stack_free_impl, NULL, NULL}

#endif
