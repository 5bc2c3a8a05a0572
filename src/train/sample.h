/* sample.h: next-token sampling and the token-by-token generation loop (issue 6, item 4).
 *
 * Sampling (llama2.c / Hugging Face order): logits / temperature -> softmax -> keep the top_k most
 * likely -> renormalise -> keep the smallest prefix with mass >= top_p -> renormalise -> draw one
 * id with a seeded PCG32 stream. Temperature 0 is greedy (argmax, ties to the lowest id) and
 * ignores top_k / top_p. Candidates are ordered by logit, ties by id, so every step is a pure
 * function of (logits, cfg, draws so far): a fixed seed reproduces a generation exactly.
 *
 * Generation runs the model in sequential mode: model_state_init(1), the prompt fed one token at a
 * time through model_step (recurrent state for Mamba2 / LSTM / delta models, KV cache for Llama,
 * the per-token fixed point with committed caches for implicit_* and fp_* models), then each
 * sampled token is fed back. Nothing in the loop grows with the number of tokens except the
 * caller's output array (and, inside the model, the KV cache of attention models, which is
 * allocated once for max_seq_len positions).
 */
#ifndef IMPLICIT_SAMPLE_H
#define IMPLICIT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/rng.h"
#include "../models/ckpt.h"
#include "../tok/tokenizer.h"

typedef struct {
    float temperature;  /* 0 = greedy; > 0 divides the logits */
    int top_k;          /* keep the k most likely ids (0 = all) */
    float top_p;        /* keep the smallest set with mass >= top_p (1 = all) */
    uint64_t seed;      /* PCG32 seed of the draws */
} SampleCfg;

typedef struct {
    SampleCfg cfg;
    Rng rng;
    int V;              /* ids 0 .. V-1 are candidates */
    int *idx;           /* (V) candidates of the last call, most likely first */
    double *prob;       /* (V) their probabilities after filtering, summing to 1 */
    int n;              /* candidates kept by the last sample_candidates */
    struct SamplePair *work; /* (V) sort scratch */
} Sampler;

void sample_cfg_default(SampleCfg *c);              /* temperature 1, top_k 0, top_p 1, seed 0 */
/* Validate cfg (temperature >= 0, top_k >= 0, 0 < top_p <= 1) and allocate for V ids.
 * IM_EINVAL naming the option. Free with sampler_free. */
int sampler_init(Sampler *s, const SampleCfg *cfg, int V);
void sampler_free(Sampler *s);
/* The filtered distribution for logits:(>= V) (only the first V entries are read): fills
 * s->idx[0..n) and s->prob[0..n), returns n. Temperature 0 gives the argmax alone (n = 1). */
int sample_candidates(Sampler *s, const float *logits);
/* Draw the next id from logits:(>= V); greedy at temperature 0 (no random draw then). */
int sample_next(Sampler *s, const float *logits);
/* Index of the largest of x[0..n) (the first one on ties). */
int sample_argmax(const float *x, int n);

/* ---- generation ------------------------------------------------------------------------------ */

typedef struct {
    int max_tokens;     /* generate at most this many tokens (>= 0) */
    const char *stop;   /* stop when the generated text contains this string (not emitted) | NULL */
    int stop_at_eos;    /* 1: stop when the tokenizer's end-of-text id is drawn (not emitted) */
    /* Streaming: called with each run of decoded bytes as soon as it cannot be part of the stop
     * string; a non-zero return stops generation with that status. NULL = no streaming. */
    int (*emit)(void *ctx, const char *bytes, size_t n);
    void *emit_ctx;
} GenOpts;

typedef struct {
    int n_prompt, n_gen;       /* tokens fed / tokens drawn (the stopping token included) */
    double prompt_s, gen_s;    /* wall-clock of the prompt pass and of the generation loop */
    double prompt_iters;       /* mean solver f-evaluations per prompt token (0 for explicit models) */
    double gen_iters;          /* ... per generated token */
    const char *stop_reason;   /* "max_tokens" | "stop" | "eos" | "emit" | "error" */
} GenStats;

void gen_opts_default(GenOpts *o);                 /* 256 tokens, no stop string, stop at eos */
/* Generate from prompt:(n_prompt) ids (n_prompt >= 1). tok decodes for emit and the stop string
 * (NULL: neither; then ids are drawn from the model's vocab_size). out:(max_tokens) receives the
 * drawn ids | NULL. The model is run in evaluation mode (restored after). Errors from model_step
 * (e.g. the KV cache is full) are returned with st filled so far. */
int gen_run(Model *m, const Tokenizer *tok, Sampler *s, const int *prompt, int n_prompt, const GenOpts *o, int *out,
            GenStats *st);

/* ckpt_load with model-config overrides kv = {"key", "value", ..., NULL} (NULL = none) applied
 * before the model is built: evaluation-time keys such as max_seq_len (the KV-cache capacity),
 * eval_f_max_iter or seq_solver. IM_EINVAL naming a bad key. */
int gen_load_model(Model *m, const char *path, const char *const *kv, const CkptLoadOpts *o);

/* The tokenizer of a checkpoint, the first of: `override` if non-NULL; the tokenizer file stored
 * inside the checkpoint (tokenizer.kind / tokenizer.data, written by training runs); the
 * "tokenizer" path of the task config stored in its metadata (older runs; also tried relative
 * to the checkpoint's folder); a tokenizer.json or tokenizer.bpe in the checkpoint's folder (a
 * Hugging Face folder, an export); "byte". IM_EMISMATCH when the tokenizer has more ids than the
 * model's vocab_size. *t freed by tok_free. */
int gen_load_tokenizer(Tokenizer **t, const char *ckpt_path, const char *override, const Model *m);
/* The same without the vocabulary check (for `implicit export`, which copies the tokenizer). */
int gen_find_tokenizer(Tokenizer **t, const char *ckpt_path, const char *override);

#endif
