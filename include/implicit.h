/* implicit.h: the public C API of libimplicit (docs/library.md).
 *
 * A small, stable interface for programs that run a trained model: load a checkpoint, read its
 * configuration, compute logits over a batch of token ids, step token by token with a state,
 * sample the next token, and turn text into ids and back. Every object is an opaque handle that
 * the library allocates and the matching *_free releases (free(NULL)-like: NULL is ignored).
 *
 * Errors: a function returning int gives IM_SUCCESS (0) or a negative IM_ERR_* status, and
 * im_last_error() then describes what went wrong (a thread-local message). Bad input (a missing
 * file, a token id outside the vocabulary, a NULL handle, a size that does not fit) is such an
 * error; the library never exits or aborts on it.
 *
 * Threads: handles are not shared between threads without a lock; distinct models may be used
 * from distinct threads. im_set_threads sets the OpenMP / BLAS threads of the whole process.
 *
 * This header needs only C99/C11 or C++ and no feature-test macros; link with -limplicit
 * (pkg-config --cflags --libs implicit).
 */
#ifndef IMPLICIT_PUBLIC_H
#define IMPLICIT_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#define IM_VERSION_MAJOR 0
#define IM_VERSION_MINOR 1
#define IM_VERSION_PATCH 0

#if defined(_WIN32)
#define IM_API
#elif defined(__GNUC__)
#define IM_API __attribute__((visibility("default")))
#else
#define IM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (0 or negative). */
enum {
    IM_SUCCESS = 0,
    IM_ERR_IO = -1,        /* a file could not be opened, read or written */
    IM_ERR_FORMAT = -2,    /* a file is malformed or not a checkpoint / tokenizer */
    IM_ERR_NOMEM = -3,     /* out of memory */
    IM_ERR_INVALID = -4,   /* a bad argument: NULL handle, id out of range, size that does not fit */
    IM_ERR_MISMATCH = -5,  /* two things do not fit together (a tokenizer larger than the model) */
    IM_ERR_NUMERIC = -6    /* NaN / inf weights or logits */
};

typedef struct im_model im_model;          /* a loaded checkpoint */
typedef struct im_state im_state;          /* token-by-token state of one model (batch rows) */
typedef struct im_sampler im_sampler;      /* temperature / top-k / top-p sampling, seeded */
typedef struct im_tokenizer im_tokenizer;  /* text <-> ids */

IM_API const char *im_version(void);             /* "0.1.0" */
IM_API const char *im_last_error(void);          /* message of the last failed call on this thread */
IM_API const char *im_status_name(int status);   /* "I/O error", "invalid argument", ... */
IM_API void im_free(void *p);                    /* frees buffers returned by encode / decode */
/* OpenMP / BLAS threads for every later call (n >= 1; the library's default until called). */
IM_API int im_set_threads(int n);

/* ---- models --------------------------------------------------------------------------------- */

/* Load a checkpoint (the CLI's CKPT argument). *out is NULL on error. */
IM_API int im_model_load(im_model **out, const char *path);
/* As im_model_load with evaluation-time model keys applied before the model is built, as
 * `implicit generate --key value` does: overrides = {"max_seq_len", "4096", NULL} (NULL = none).
 * The key "config" names a model config file, as `--config FILE` (for weights without one). */
IM_API int im_model_load_with(im_model **out, const char *path, const char *const *overrides);
IM_API void im_model_free(im_model *m);
IM_API int im_model_vocab_size(const im_model *m);  /* ids are 0 .. vocab_size-1; -IM_ERR on NULL */
IM_API int im_model_context(const im_model *m);     /* max_seq_len: KV-cache capacity of attention models */
IM_API int im_model_d_model(const im_model *m);
IM_API int im_model_n_layer(const im_model *m);
IM_API int64_t im_model_n_params(const im_model *m);
IM_API const char *im_model_family(const im_model *m);   /* "mamba2", "implicit_llama", ... ("" on NULL) */
IM_API int im_model_is_implicit(const im_model *m);      /* 1: a fixed-point model (implicit LMs, FP-RNNs) */
/* The model configuration as JSON (the checkpoint's keys and values), owned by m. */
IM_API const char *im_model_config_json(const im_model *m);

/* Logits of a batch run in parallel: ids:(batch, len) row-major, logits:(batch, len, vocab_size)
 * written by the call (the caller owns both). Each row is an independent sequence from position 0.
 * The model keeps activations for the largest batch x len seen. */
IM_API int im_model_logits(im_model *m, const int *ids, int batch, int len, float *logits);
/* Mean fixed-point solver f-evaluations per token of the last logits / step (0 for explicit models). */
IM_API double im_model_last_iters(const im_model *m);

/* ---- token-by-token state ------------------------------------------------------------------- */

/* A state of `batch` independent rows at position 0 (recurrent state, KV cache, or the committed
 * per-token fixed point). A model holds at most one live state: creating a second one while the
 * first exists is IM_ERR_INVALID (load the model again, or use more batch rows). */
IM_API int im_state_create(im_state **out, im_model *m, int batch);
/* Feed ids:(batch), one per row, and write logits:(batch, vocab_size) for the next token. */
IM_API int im_state_step(im_state *s, const int *ids, float *logits);
IM_API int im_state_reset(im_state *s);           /* back to position 0, rows emptied */
IM_API int im_state_position(const im_state *s);  /* tokens fed per row since create / reset */
IM_API int im_state_batch(const im_state *s);
IM_API void im_state_free(im_state *s);

/* ---- sampling ------------------------------------------------------------------------------- */

/* Sampling over ids 0 .. vocab-1 (the CLI's order: logits / temperature -> softmax -> top_k ->
 * top_p -> one seeded draw). temperature 0 = greedy (argmax, ties to the lowest id); top_k 0 and
 * top_p 1 keep everything. The same seed and logits give the same ids, as `implicit generate
 * --seed` does. */
IM_API int im_sampler_create(im_sampler **out, int vocab, float temperature, int top_k, float top_p,
                             uint64_t seed);
/* The next id (>= 0) drawn from logits:(>= vocab), or a negative status. */
IM_API int im_sampler_next(im_sampler *s, const float *logits);
IM_API void im_sampler_free(im_sampler *s);

/* ---- generation ----------------------------------------------------------------------------- */

/* Called with each generated id, as soon as it is drawn; a non-zero return ends the generation
 * after that id (im_generate then succeeds). */
typedef int (*im_token_fn)(void *ctx, int id);
/* Continue a prompt as `implicit generate` does: the n_prompt >= 1 ids of prompt are fed token by
 * token from position 0, then up to max_new ids are drawn with s (its temperature, top-k, top-p and
 * seed), each fed back except the last. Drawing `eos` ends it before that id (-1: no such id; pass
 * im_tokenizer_eos to stop where the CLI stops). out:(max_new) receives the ids and *n_out their
 * count (either may be NULL); on_token (may be NULL) streams them. The call uses the model's one
 * state, so it is IM_ERR_INVALID while an im_state of m is live; IM_ERR_MISMATCH when s draws from
 * more ids than the model has. */
IM_API int im_generate(im_model *m, im_sampler *s, const int *prompt, size_t n_prompt, int max_new, int eos,
                       int *out, int *n_out, im_token_fn on_token, void *ctx);

/* ---- tokenizer ------------------------------------------------------------------------------ */

/* spec: "byte" | FILE.bpe (from `implicit tokenizer train`) | FILE.json (a Hugging Face
 * tokenizer.json, byte-level BPE). */
IM_API int im_tokenizer_load(im_tokenizer **out, const char *spec);
/* The tokenizer a checkpoint was trained with (what `implicit generate` uses without --tokenizer):
 * the one its metadata names, else "byte". IM_ERR_MISMATCH if it has more ids than the model. */
IM_API int im_model_tokenizer(im_tokenizer **out, const im_model *m);
IM_API void im_tokenizer_free(im_tokenizer *t);
IM_API int im_tokenizer_vocab_size(const im_tokenizer *t);
IM_API int im_tokenizer_eos(const im_tokenizer *t);   /* end-of-text id, or -1 */
/* Encode len bytes of text: *ids (free with im_free) receives *n_ids ids. */
IM_API int im_tokenizer_encode(const im_tokenizer *t, const char *text, size_t len, int **ids, size_t *n_ids);
/* Decode n_ids ids: *text (free with im_free, NUL-terminated) receives *len bytes. */
IM_API int im_tokenizer_decode(const im_tokenizer *t, const int *ids, size_t n_ids, char **text, size_t *len);
/* The bytes of one id for streaming output (owned by t; may be part of a UTF-8 character), or
 * NULL with an error for an id outside the vocabulary. */
IM_API const char *im_tokenizer_piece(const im_tokenizer *t, int id, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
