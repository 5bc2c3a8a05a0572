/* lm_common.h: the parts every explicit language model shares — token embedding with dropout,
 * final norm (RMSNorm, or LayerNorm where the model has norm_type layernorm) and the tied head with cross-entropy (spec implicit-lm §1.1) — and the bit of
 * bookkeeping to carve activation memory with a measuring pass (STYLE §8.6).
 * Internal to src/models/.
 */
#ifndef IMPLICIT_LM_COMMON_H
#define IMPLICIT_LM_COMMON_H

#include "../core/arena.h"
#include "../layers/blocknorm.h"
#include "model.h"

#define EMB_NAME "word_emb.emb.weight"
#define NORM_F_NAME "backbone.norm_f.weight"
/* the untied output head (cfg tie_embeddings 0): the reference's decoder name; tied models
 * compute the logits with EMB_NAME and have no such tensor */
#define HEAD_W_NAME "criterion.decoder.weight"
/* norm_f's bias: present with norm_type layernorm (residual-stream LM, lm_resid.h) only */
#define NORM_F_BIAS_NAME "backbone.norm_f.bias"

/* Buffers of the shared ends of the model, for B sequences of length T. */
typedef struct {
    int *ids, *targets;  /* (B*T) copies of the batch */
    float *x0;           /* (B,T,D) embeddings after dropout */
    float *emb_mask;     /* (B,T,D) dropout mask (scaled) | NULL when dropout is off */
    float *hf;           /* (B,T,D) norm_f output */
    float *rstd_f;       /* norm_f's cache: (B*T) rstd, or (2 B*T) mean and rstd for layernorm */
    float *head_cache;   /* (B*T, V): the logits */
    float *head_scratch;
    float *dhf;          /* (B,T,D) gradient at the norm_f output */
    int has_targets;
    int count;           /* non-ignored targets of the last fwd */
    const char *head_name; /* a family's own head tensor (V, D), set at build | NULL: lm_head_w */
} LmEnds;

/* Allocate (or measure) the ends' buffers from arena a. */
void lm_ends_carve(LmEnds *e, Arena *a, const Model *m, int B, int T);
/* ids → x0 (embedding lookup, dropout when training). */
void lm_embed_fwd(Model *m, LmEnds *e, const int *ids, int B, int T);
/* dx0 → dE (through the dropout mask). */
void lm_embed_bwd(Model *m, LmEnds *e, const float *dx0, int B, int T);
/* z:(B,T,D) → norm_f → logits (m->logits) and, with targets, the mean loss. */
int lm_head_fwd(Model *m, LmEnds *e, const float *z, const int *targets, int B, int T, float *loss);
/* Backward of the mean loss to dz (+=), dnorm_f and dE (+=). */
void lm_head_bwd(Model *m, LmEnds *e, float *dz, const float *z, int B, int T);
/* One token: z:(B,D) → logits:(B,V). scratch: (B*D + B) floats. */
void lm_head_step(const Model *m, float *logits, const float *z, float *scratch, int B);
/* The same with the head's weight W:(V, D) given (lm_ends_head_w). */
void lm_head_step_w(const Model *m, const float *W, float *logits, const float *z, float *scratch, int B);
/* Add the untied head (V, D) to the parameter table when cfg.tie_embeddings is 0. */
void lm_head_add(Model *m);
/* The head's weight (V, D) in block (θ or dθ): HEAD_W_NAME when untied, else the embedding. */
float *lm_head_w(const Model *m, float *block);
/* The head of the ends: e->head_name's tensor when the family names one, else lm_head_w. */
float *lm_ends_head_w(const Model *m, const LmEnds *e, float *block);
/* The model's block-norm type (cfg.norm_type, validated). */
BlockNormType lm_norm_type(const Model *m);

/* Sample a variational/standard dropout mask: n entries of 0 or 1/(1-p). */
void lm_dropout_mask(Rng *r, float *mask, size_t n, float p);
/* Measure, allocate and carve: calls carve(m, a, B, T) twice (measuring, then real). */
int lm_arena_plan(Arena *a, Model *m, int B, int T, void (*carve)(Model *, Arena *, int, int));

#endif
