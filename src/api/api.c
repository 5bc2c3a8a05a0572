/* api.c: the public C API (include/implicit.h) over the library's modules.
 *
 * Every entry point checks its handles and sizes first and reports through the same thread-local
 * message as the rest of the library (err_set / err_msg), so a caller's mistake is a status, never
 * a CHECK abort. Loading goes through gen_load_model / gen_load_tokenizer, the entries the CLI's
 * `generate` uses, so a checkpoint loads here exactly as it does there. Only the functions marked
 * IM_API in the header are exported from libimplicit.so (the library is compiled with
 * -fvisibility=hidden).
 */
#include <stdlib.h>
#include <string.h>

#include "../../include/implicit.h"
#include "../core/check.h"
#include "../kernels/kernels.h"
#include "../models/ckpt.h"
#include "../tok/tokenizer.h"
#include "../train/sample.h"

_Static_assert((int)IM_SUCCESS == IM_OK && (int)IM_ERR_IO == IM_EIO && (int)IM_ERR_FORMAT == IM_EFORMAT &&
                   (int)IM_ERR_NOMEM == IM_ENOMEM && (int)IM_ERR_INVALID == IM_EINVAL &&
                   (int)IM_ERR_MISMATCH == IM_EMISMATCH && (int)IM_ERR_NUMERIC == IM_ENUM,
               "public status codes are the library's");
_Static_assert(sizeof(int) == 4, "token ids are 32-bit ints");

struct im_model {
    Model m;
    char *path;         /* the checkpoint, for its tokenizer */
    char *config_json;  /* cfg_to_json of m.cfg */
    im_state *state;    /* the live state, if any (the Model holds one step state) */
};

struct im_state {
    im_model *model;
    int batch;
    float *logits;      /* (batch, m.V): the padded width model_step writes */
};

struct im_sampler {
    Sampler s;
};

struct im_tokenizer {
    Tokenizer *t;
};

#define NEED(p, fn) \
    do { if (!(p)) return err_set(IM_EINVAL, "%s: %s is NULL", fn, #p); } while (0)

IM_API const char *im_version(void) { return IM_VERSION; }
IM_API const char *im_last_error(void) { return err_msg(); }
IM_API const char *im_status_name(int status) { return err_name(status); }
IM_API void im_free(void *p) { free(p); }

IM_API int im_set_threads(int n) {
    if (n < 1) return err_set(IM_EINVAL, "im_set_threads: %d threads (need >= 1)", n);
    k_set_threads(n);
    return IM_OK;
}

/* ---- models --------------------------------------------------------------------------------- */

IM_API int im_model_load_with(im_model **out, const char *path, const char *const *overrides) {
    NEED(out, "im_model_load");
    *out = NULL;
    NEED(path, "im_model_load");
    /* "config" names a config file (`--config FILE`); the other pairs are model keys */
    enum { MAX_KV = 64 };
    const char *kv[2 * MAX_KV + 1];
    CkptLoadOpts lo = {0};
    int nkv = 0;
    for (int i = 0; overrides && overrides[i]; i += 2) {
        if (!overrides[i + 1])
            return err_set(IM_EINVAL, "im_model_load: override '%s' has no value (pairs end with NULL)", overrides[i]);
        if (!strcmp(overrides[i], "config")) {
            lo.config_path = overrides[i + 1];
            continue;
        }
        if (nkv == 2 * MAX_KV) return err_set(IM_EINVAL, "im_model_load: more than %d overrides", MAX_KV);
        kv[nkv++] = overrides[i];
        kv[nkv++] = overrides[i + 1];
    }
    kv[nkv] = NULL;
    im_model *h = calloc(1, sizeof *h);
    if (!h || !(h->path = strdup(path))) {
        free(h);
        return err_set(IM_ENOMEM, "im_model_load: out of memory");
    }
    int rc = gen_load_model(&h->m, path, kv, &lo);
    if (rc) {
        free(h->path);
        free(h);
        return rc;
    }
    size_t n = cfg_to_json(&h->m.cfg, NULL, 0) + 1;
    if (!(h->config_json = malloc(n))) {
        im_model_free(h);
        return err_set(IM_ENOMEM, "im_model_load: out of memory");
    }
    cfg_to_json(&h->m.cfg, h->config_json, n);
    h->m.training = 0;   /* inference only: no dropout, no backward caches */
    h->m.no_grad = 1;
    *out = h;
    return IM_OK;
}

IM_API int im_model_load(im_model **out, const char *path) { return im_model_load_with(out, path, NULL); }

IM_API void im_model_free(im_model *m) {
    if (!m) return;
    if (m->state) m->state->model = NULL;   /* a state outliving its model only reports errors */
    model_free(&m->m);
    free(m->config_json);
    free(m->path);
    free(m);
}

/* The config facts: int getters, IM_EINVAL for a NULL model */
#define MODEL_FACT(type, name, expr)                  \
    IM_API type im_model_##name(const im_model *m) {  \
        NEED(m, "im_model_" #name);                   \
        return (type)(expr);                          \
    }
MODEL_FACT(int, vocab_size, m->m.cfg.vocab_size)
MODEL_FACT(int, context, m->m.cfg.max_seq_len)
MODEL_FACT(int, d_model, m->m.cfg.d_model)
MODEL_FACT(int, n_layer, m->m.cfg.n_layer)
MODEL_FACT(int64_t, n_params, ptab_count(&m->m.tab))
MODEL_FACT(int, is_implicit, model_is_fixed_point(&m->m))
#undef MODEL_FACT

IM_API const char *im_model_family(const im_model *m) {
    if (!m) { err_set(IM_EINVAL, "im_model_family: m is NULL"); return ""; }
    return m->m.type->name;
}
IM_API const char *im_model_config_json(const im_model *m) {
    if (!m) { err_set(IM_EINVAL, "im_model_config_json: m is NULL"); return ""; }
    return m->config_json;
}
IM_API double im_model_last_iters(const im_model *m) { return m ? m->m.fp_iters : 0; }

IM_API int im_model_logits(im_model *m, const int *ids, int batch, int len, float *logits) {
    NEED(m, "im_model_logits");
    NEED(ids, "im_model_logits");
    NEED(logits, "im_model_logits");
    Model *x = &m->m;
    int rc = model_fwd(x, ids, NULL, batch, len, NULL);   /* checks sizes and every id */
    if (rc) return err_wrap(rc, "im_model_logits");
    /* the model's rows may be padded past vocab_size (pad_vocab_multiple): copy the real ones */
    size_t V = (size_t)x->cfg.vocab_size, Vp = (size_t)x->V, n = (size_t)batch * (size_t)len;
    for (size_t i = 0; i < n; i++) memcpy(logits + i * V, x->logits + i * Vp, V * sizeof(float));
    return IM_OK;
}

/* ---- token-by-token state ------------------------------------------------------------------- */

IM_API int im_state_create(im_state **out, im_model *m, int batch) {
    NEED(out, "im_state_create");
    *out = NULL;
    NEED(m, "im_state_create");
    if (m->state) return err_set(IM_EINVAL, "im_state_create: this model already has a live state (free it first, "
                                            "load the model again, or use more batch rows)");
    if (batch < 1 || batch > MODEL_MAX_TOKENS)
        return err_set(IM_EINVAL, "im_state_create: batch %d (need 1 .. %d)", batch, MODEL_MAX_TOKENS);
    im_state *s = calloc(1, sizeof *s);
    if (!s || !(s->logits = malloc(sizeof(float) * (size_t)batch * (size_t)m->m.V))) {
        free(s);
        return err_set(IM_ENOMEM, "im_state_create: out of memory");
    }
    s->model = m;
    s->batch = batch;
    int rc = model_state_init(&m->m, batch);
    if (rc) {
        free(s->logits);
        free(s);
        return err_wrap(rc, "im_state_create");
    }
    m->state = s;
    *out = s;
    return IM_OK;
}

IM_API int im_state_step(im_state *s, const int *ids, float *logits) {
    NEED(s, "im_state_step");
    NEED(ids, "im_state_step");
    NEED(logits, "im_state_step");
    if (!s->model) return err_set(IM_EINVAL, "im_state_step: the state's model was freed");
    Model *x = &s->model->m;
    int rc = model_step(x, ids, s->logits);   /* checks every id against the vocabulary */
    if (rc) return err_wrap(rc, "im_state_step at position %d", x->pos);
    size_t V = (size_t)x->cfg.vocab_size, Vp = (size_t)x->V;
    for (size_t b = 0; b < (size_t)s->batch; b++) memcpy(logits + b * V, s->logits + b * Vp, V * sizeof(float));
    return IM_OK;
}

IM_API int im_state_reset(im_state *s) {
    NEED(s, "im_state_reset");
    if (!s->model) return err_set(IM_EINVAL, "im_state_reset: the state's model was freed");
    int rc = model_state_init(&s->model->m, s->batch);
    return rc ? err_wrap(rc, "im_state_reset") : IM_OK;
}

IM_API int im_state_position(const im_state *s) {
    NEED(s, "im_state_position");
    if (!s->model) return err_set(IM_EINVAL, "im_state_position: the state's model was freed");
    return s->model->m.pos;
}

IM_API int im_state_batch(const im_state *s) {
    NEED(s, "im_state_batch");
    return s->batch;
}

IM_API void im_state_free(im_state *s) {
    if (!s) return;
    if (s->model) s->model->state = NULL;
    free(s->logits);
    free(s);
}

/* ---- sampling ------------------------------------------------------------------------------- */

IM_API int im_sampler_create(im_sampler **out, int vocab, float temperature, int top_k, float top_p,
                             uint64_t seed) {
    NEED(out, "im_sampler_create");
    *out = NULL;
    if (vocab < 1) return err_set(IM_EINVAL, "im_sampler_create: vocabulary %d (need >= 1)", vocab);
    im_sampler *h = calloc(1, sizeof *h);
    if (!h) return err_set(IM_ENOMEM, "im_sampler_create: out of memory");
    SampleCfg c = {temperature, top_k, top_p, seed};
    int rc = sampler_init(&h->s, &c, vocab);   /* validates temperature, top_k, top_p */
    if (rc) {
        free(h);
        return err_wrap(rc, "im_sampler_create");
    }
    *out = h;
    return IM_OK;
}

IM_API int im_sampler_next(im_sampler *s, const float *logits) {
    NEED(s, "im_sampler_next");
    NEED(logits, "im_sampler_next");
    for (int i = 0; i < s->s.V; i++)
        if (!(logits[i] - logits[i] == 0))
            return err_set(IM_ENUM, "im_sampler_next: logit %d is %s", i, logits[i] != logits[i] ? "NaN" : "inf");
    return sample_next(&s->s, logits);
}

IM_API void im_sampler_free(im_sampler *s) {
    if (!s) return;
    sampler_free(&s->s);
    free(s);
}

/* ---- generation ----------------------------------------------------------------------------- */

/* The loop of gen_run (the CLI's), over the public state and sampler so that every step is checked
 * as a caller's would be; the stop string and the byte streaming of the CLI are the caller's. */
IM_API int im_generate(im_model *m, im_sampler *s, const int *prompt, size_t n_prompt, int max_new, int eos,
                       int *out, int *n_out, im_token_fn on_token, void *ctx) {
    if (n_out) *n_out = 0;
    NEED(m, "im_generate");
    NEED(s, "im_generate");
    if (n_prompt < 1) return err_set(IM_EINVAL, "im_generate: the prompt is empty (feed at least one id)");
    NEED(prompt, "im_generate");
    if (max_new < 0) return err_set(IM_EINVAL, "im_generate: max_new %d (need >= 0)", max_new);
    if (s->s.V > m->m.cfg.vocab_size)
        return err_set(IM_EMISMATCH, "im_generate: the sampler draws from %d ids, the model has %d", s->s.V,
                       m->m.cfg.vocab_size);
    im_state *st;
    int rc = im_state_create(&st, m, 1);
    if (rc) return err_wrap(rc, "im_generate");
    float *logits = malloc(sizeof(float) * (size_t)m->m.cfg.vocab_size);
    if (!logits) rc = err_set(IM_ENOMEM, "im_generate: out of memory");
    for (size_t i = 0; i < n_prompt && !rc; i++) rc = im_state_step(st, &prompt[i], logits);
    int n = 0;
    for (int g = 0; g < max_new && !rc; g++) {
        int id = im_sampler_next(s, logits);   /* a NaN / inf logit is an error */
        if (id < 0) { rc = id; break; }
        if (id == eos) break;
        if (out) out[n] = id;
        n++;
        if (on_token && on_token(ctx, id)) break;
        if (g + 1 < max_new) rc = im_state_step(st, &id, logits);   /* the last id needs no step */
    }
    if (n_out) *n_out = n;
    free(logits);
    im_state_free(st);
    return rc ? err_wrap(rc, "im_generate after %d generated ids", n) : IM_OK;
}

/* ---- tokenizer ------------------------------------------------------------------------------ */

static int wrap_tok(im_tokenizer **out, Tokenizer *t) {
    if (!(*out = malloc(sizeof **out))) {
        tok_free(t);
        return err_set(IM_ENOMEM, "tokenizer: out of memory");
    }
    (*out)->t = t;
    return IM_OK;
}

IM_API int im_tokenizer_load(im_tokenizer **out, const char *spec) {
    NEED(out, "im_tokenizer_load");
    *out = NULL;
    NEED(spec, "im_tokenizer_load");
    Tokenizer *t;
    int rc = tok_load(&t, spec);
    return rc ? rc : wrap_tok(out, t);
}

IM_API int im_model_tokenizer(im_tokenizer **out, const im_model *m) {
    NEED(out, "im_model_tokenizer");
    *out = NULL;
    NEED(m, "im_model_tokenizer");
    Tokenizer *t;
    int rc = gen_load_tokenizer(&t, m->path, NULL, &m->m);
    return rc ? rc : wrap_tok(out, t);
}

IM_API void im_tokenizer_free(im_tokenizer *t) {
    if (!t) return;
    tok_free(t->t);
    free(t);
}

IM_API int im_tokenizer_vocab_size(const im_tokenizer *t) {
    NEED(t, "im_tokenizer_vocab_size");
    return tok_vocab(t->t);
}

IM_API int im_tokenizer_eos(const im_tokenizer *t) {
    NEED(t, "im_tokenizer_eos");
    return tok_eos(t->t);
}

IM_API int im_tokenizer_encode(const im_tokenizer *t, const char *text, size_t len, int **ids, size_t *n_ids) {
    NEED(ids, "im_tokenizer_encode");
    *ids = NULL;
    NEED(n_ids, "im_tokenizer_encode");
    *n_ids = 0;
    NEED(t, "im_tokenizer_encode");
    if (!text && len) return err_set(IM_EINVAL, "im_tokenizer_encode: text is NULL");
    return tok_encode(t->t, text ? text : "", len, ids, n_ids);
}

IM_API int im_tokenizer_decode(const im_tokenizer *t, const int *ids, size_t n_ids, char **text, size_t *len) {
    NEED(text, "im_tokenizer_decode");
    *text = NULL;
    NEED(len, "im_tokenizer_decode");
    *len = 0;
    NEED(t, "im_tokenizer_decode");
    if (!ids && n_ids) return err_set(IM_EINVAL, "im_tokenizer_decode: ids is NULL");
    static const int none = 0;
    return tok_decode(t->t, ids ? ids : &none, n_ids, text, len);
}

IM_API const char *im_tokenizer_piece(const im_tokenizer *t, int id, size_t *len) {
    size_t n = 0;
    if (len) *len = 0;
    if (!t) { err_set(IM_EINVAL, "im_tokenizer_piece: t is NULL"); return NULL; }
    const char *p = tok_piece(t->t, id, &n);
    if (!p) { err_set(IM_EINVAL, "im_tokenizer_piece: id %d outside the vocabulary 0..%d", id, tok_vocab(t->t) - 1); return NULL; }
    if (len) *len = n;
    return p;
}
