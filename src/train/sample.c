/* sample.c: sampling and generation; see sample.h. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/timer.h"
#include "../io/json.h"
#include "../models/ckpt.h"

typedef struct SamplePair {
    float logit;
    int id;
} SamplePair;

void sample_cfg_default(SampleCfg *c) {
    c->temperature = 1.0f;
    c->top_k = 0;
    c->top_p = 1.0f;
    c->seed = 0;
}

int sampler_init(Sampler *s, const SampleCfg *cfg, int V) {
    memset(s, 0, sizeof *s);
    if (!(cfg->temperature >= 0) || !isfinite(cfg->temperature))
        return err_set(IM_EINVAL, "--temperature must be a finite number >= 0 (0 = greedy), got %g", cfg->temperature);
    if (cfg->top_k < 0) return err_set(IM_EINVAL, "--top_k must be >= 0 (0 = off), got %d", cfg->top_k);
    if (!(cfg->top_p > 0 && cfg->top_p <= 1))
        return err_set(IM_EINVAL, "--top_p must be in (0, 1] (1 = off), got %g", cfg->top_p);
    if (V < 1) return err_set(IM_EINVAL, "sampler: vocabulary %d must be >= 1", V);
    s->cfg = *cfg;
    s->V = V;
    /* a separate stream from the model's dropout and init streams */
    rng_seed(&s->rng, cfg->seed, 0x5a);
    s->idx = malloc(sizeof *s->idx * (size_t)V);
    s->prob = malloc(sizeof *s->prob * (size_t)V);
    s->work = malloc(sizeof *s->work * (size_t)V);
    if (!s->idx || !s->prob || !s->work) {
        sampler_free(s);
        return err_set(IM_ENOMEM, "sampler: out of memory for %d ids", V);
    }
    return IM_OK;
}

void sampler_free(Sampler *s) {
    free(s->idx);
    free(s->prob);
    free(s->work);
    memset(s, 0, sizeof *s);
}

int sample_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* a ranks before b: larger logit, then smaller id (a total order, so sorting is deterministic) */
static int before(const SamplePair *a, const SamplePair *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_pair(const void *pa, const void *pb) {
    const SamplePair *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Min-heap on `before` (root = the worst kept) */
static void sift_down(SamplePair *h, int k, int i) {
    for (;;) {
        int c = 2 * i + 1, w = i;
        if (c < k && before(&h[w], &h[c])) w = c;
        if (c + 1 < k && before(&h[w], &h[c + 1])) w = c + 1;
        if (w == i) return;
        SamplePair t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k best ids of logits, sorted: a size-k heap (O(V log k)) so top_k on a 50k vocabulary does
 * not sort all of it. */
static void top_k_sorted(SamplePair *w, const float *logits, int V, int k) {
    for (int i = 0; i < k; i++) w[i] = (SamplePair){logits[i], i};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(w, k, i);
    for (int i = k; i < V; i++) {
        SamplePair p = {logits[i], i};
        if (before(&p, &w[0])) {
            w[0] = p;
            sift_down(w, k, 0);
        }
    }
    qsort(w, (size_t)k, sizeof *w, cmp_pair);
}

int sample_candidates(Sampler *s, const float *logits) {
    int V = s->V;
    if (s->cfg.temperature == 0) {
        s->idx[0] = sample_argmax(logits, V);
        s->prob[0] = 1;
        return s->n = 1;
    }
    int k = s->cfg.top_k > 0 && s->cfg.top_k < V ? s->cfg.top_k : V;
    top_k_sorted(s->work, logits, V, k);
    /* softmax over the kept ids = softmax over all, restricted and renormalised */
    double inv_t = 1.0 / s->cfg.temperature, mx = s->work[0].logit, sum = 0;
    for (int i = 0; i < k; i++) {
        s->idx[i] = s->work[i].id;
        s->prob[i] = exp(((double)s->work[i].logit - mx) * inv_t);
        sum += s->prob[i];
    }
    int n = k;
    if (s->cfg.top_p < 1) {
        /* the smallest prefix whose mass reaches top_p */
        double cum = 0, need = (double)s->cfg.top_p * sum;
        for (n = 0; n < k;) {
            cum += s->prob[n++];
            if (cum >= need) break;
        }
        sum = cum;
    }
    for (int i = 0; i < n; i++) s->prob[i] /= sum;
    return s->n = n;
}

/* uniform in [0, 1) with 53 random bits */
static double draw(Rng *r) {
    uint64_t a = rng_u32(r) >> 5, b = rng_u32(r) >> 6;
    return (double)(a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

int sample_next(Sampler *s, const float *logits) {
    if (s->cfg.temperature == 0) return sample_argmax(logits, s->V);
    int V = s->V;
    if ((s->cfg.top_k == 0 || s->cfg.top_k >= V) && s->cfg.top_p >= 1) {
        /* no filter: draw over ids in id order, no sort needed */
        double inv_t = 1.0 / s->cfg.temperature, mx = logits[sample_argmax(logits, V)], sum = 0;
        for (int i = 0; i < V; i++) sum += s->prob[i] = exp(((double)logits[i] - mx) * inv_t);
        double u = draw(&s->rng) * sum, cum = 0;
        for (int i = 0; i < V; i++)
            if ((cum += s->prob[i]) > u) return i;
        return sample_argmax(logits, V);   /* u rounded onto the total: the likeliest id */
    }
    int n = sample_candidates(s, logits);
    double u = draw(&s->rng), cum = 0;
    for (int i = 0; i < n; i++)
        if ((cum += s->prob[i]) > u) return s->idx[i];
    return s->idx[0];
}

/* ---- generation ------------------------------------------------------------------------------ */

void gen_opts_default(GenOpts *o) {
    memset(o, 0, sizeof *o);
    o->max_tokens = 256;
    o->stop_at_eos = 1;
}

/* Streams decoded bytes, holding back the longest tail that could still start the stop string,
 * so the stop string itself is never emitted and the buffer stays below stop_len + one piece. */
typedef struct {
    const GenOpts *o;
    size_t stop_len;
    char *buf;       /* (cap) held-back bytes, then the new piece */
    size_t len, cap;
    int emit_rc;
} Stream;

static int emit(Stream *s, const char *p, size_t n) {
    if (!n || !s->o->emit || s->emit_rc) return s->emit_rc;
    return s->emit_rc = s->o->emit(s->o->emit_ctx, p, n);
}

/* Append a piece; returns 1 when the stop string has appeared (text before it emitted). */
static int stream_push(Stream *s, const char *p, size_t n) {
    if (!n) return 0;
    if (s->len + n > s->cap) {
        size_t cap = 2 * (s->len + n) + 16;
        char *b = realloc(s->buf, cap);
        if (!b) return err_set(IM_ENOMEM, "generation: out of memory");
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    if (!s->stop_len) {
        emit(s, s->buf, s->len);
        s->len = 0;
        return 0;
    }
    const char *stop = s->o->stop;
    for (size_t i = 0; i + s->stop_len <= s->len; i++)
        if (!memcmp(s->buf + i, stop, s->stop_len)) {
            emit(s, s->buf, i);
            s->len = 0;
            return 1;
        }
    /* keep the longest suffix that is a proper prefix of the stop string */
    size_t keep = s->len < s->stop_len ? s->len : s->stop_len - 1;
    while (keep && memcmp(s->buf + s->len - keep, stop, keep)) keep--;
    emit(s, s->buf, s->len - keep);
    memmove(s->buf, s->buf + s->len - keep, keep);
    s->len = keep;
    return 0;
}

static int logits_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int gen_run(Model *m, const Tokenizer *tok, Sampler *s, const int *prompt, int n_prompt, const GenOpts *o, int *out,
            GenStats *st) {
    memset(st, 0, sizeof *st);
    st->stop_reason = "max_tokens";
    if (n_prompt < 1) return err_set(IM_EINVAL, "generation needs a prompt of at least one token");
    if (o->max_tokens < 0) return err_set(IM_EINVAL, "max_tokens must be >= 0, got %d", o->max_tokens);
    CHECK(s->V <= m->cfg.vocab_size, "sampler vocabulary %d exceeds the model's %d", s->V, m->cfg.vocab_size);
    float *logits = malloc(sizeof(float) * (size_t)m->V);
    if (!logits) return err_set(IM_ENOMEM, "generation: out of memory");
    Stream sm = {o, tok && o->stop ? strlen(o->stop) : 0, NULL, 0, 0, 0};
    int was_training = m->training, eos = tok && o->stop_at_eos ? tok_eos(tok) : -1, stopped = 0;
    m->training = 0;
    int rc = model_state_init(m, 1);
    double t0 = timer_now(), iters = 0;
    for (int i = 0; i < n_prompt && !rc; i++) {
        rc = model_step(m, &prompt[i], logits);
        iters += m->fp_iters;
        st->n_prompt += !rc;
    }
    st->prompt_s = timer_now() - t0;
    st->prompt_iters = st->n_prompt ? iters / st->n_prompt : 0;
    double t1 = timer_now();
    int steps = 0;
    iters = 0;
    for (int g = 0; g < o->max_tokens && !rc; g++) {
        if (!logits_finite(logits, s->V)) {
            rc = err_set(IM_ENUM, "the model produced NaN/inf logits before generated token %d", g);
            break;
        }
        int id = sample_next(s, logits);
        if (out) out[g] = id;
        st->n_gen++;
        if (id == eos) {
            st->stop_reason = "eos";
            break;
        }
        if (tok) {
            size_t n = 0;
            const char *p = tok_piece(tok, id, &n);
            int r = stream_push(&sm, p ? p : "", p ? n : 0);
            if (r < 0) { rc = r; break; }
            if (r == 1) { st->stop_reason = "stop"; stopped = 1; break; }
            if (sm.emit_rc) { st->stop_reason = "emit"; rc = sm.emit_rc; break; }
        }
        if (g + 1 == o->max_tokens) break;   /* the last token needs no step */
        rc = model_step(m, &id, logits);
        iters += m->fp_iters;
        steps++;
    }
    if (!stopped && sm.len) emit(&sm, sm.buf, sm.len);   /* the held-back tail was not the stop string */
    if (!rc && sm.emit_rc) { st->stop_reason = "emit"; rc = sm.emit_rc; }
    if (rc && strcmp(st->stop_reason, "emit")) st->stop_reason = "error";
    st->gen_s = timer_now() - t1;
    st->gen_iters = steps ? iters / steps : 0;
    m->training = was_training;
    free(sm.buf);
    free(logits);
    return rc;
}

int gen_load_model(Model *m, const char *path, const char *const *kv, const CkptLoadOpts *o) {
    int rc = ckpt_load_opts(m, path, NULL, o);
    if (rc || !kv || !kv[0]) return rc;
    ModelCfg c = m->cfg;
    model_free(m);
    for (int i = 0; kv[i] && kv[i + 1]; i += 2)
        if ((rc = cfg_set(&c, kv[i], kv[i + 1]))) return rc;
    if ((rc = cfg_validate(&c))) return rc;
    return ckpt_load_opts(m, path, &c, o);
}

/* ---- the checkpoint's tokenizer -------------------------------------------------------------- */

/* The "tokenizer" of the stored task config (malloc'd) | NULL */
static char *stored_spec(const char *ckpt_path) {
    char *task = NULL, *spec = NULL;
    Json *j = NULL;
    if (ckpt_read_meta(ckpt_path, "task", &task) || !task) return NULL;
    if (!json_parse(&j, task, strlen(task))) {
        const Json *v = json_get(j, "tokenizer");
        if (v && v->type == JSON_STRING && v->str_len) spec = strdup(v->string);
    }
    json_free(j);
    free(task);
    return spec;
}

/* The tokenizer stored inside the checkpoint (tokenizer.kind, .file, .data: `implicit train`
 * writes them): 1 loaded, 0 none stored, or an error status. */
static int embedded(Tokenizer **t, const char *ckpt_path) {
    char *kind = NULL, *file = NULL, *data = NULL;
    int rc = 0;
    if (!ckpt_read_meta(ckpt_path, "tokenizer.kind", &kind) && kind && !ckpt_read_meta(ckpt_path, "tokenizer.data", &data) &&
        data) {
        ckpt_read_meta(ckpt_path, "tokenizer.file", &file);
        char name[4200];
        snprintf(name, sizeof name, "%s (stored in %s)", file ? file : kind, ckpt_path);
        rc = tok_load_mem(t, kind, name, data, strlen(data));
        if (!rc) rc = 1;
    }
    free(kind);
    free(file);
    free(data);
    return rc;
}

/* A tokenizer file in the checkpoint's folder, as Hugging Face keeps tokenizer.json beside the
 * weights (and `implicit export` writes it): 1 loaded, 0 none there, or an error status. */
static int beside(Tokenizer **t, const char *ckpt_path) {
    static const char *const names[] = {"tokenizer.json", "tokenizer.bpe"};
    char dir[4096], path[4200];
    if (ckpt_dir(ckpt_path, dir, sizeof dir)) return 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fclose(f);
        int rc = tok_load(t, path);
        return rc ? rc : 1;
    }
    return 0;
}

int gen_load_tokenizer(Tokenizer **t, const char *ckpt_path, const char *override, const Model *m) {
    int rc = gen_find_tokenizer(t, ckpt_path, override);
    if (!rc && tok_vocab(*t) > m->cfg.vocab_size) {
        rc = err_set(IM_EMISMATCH, "tokenizer '%s' has %d ids but the model's vocabulary is %d", tok_spec(*t),
                     tok_vocab(*t), m->cfg.vocab_size);
        tok_free(*t);
        *t = NULL;
    }
    return rc;
}

int gen_find_tokenizer(Tokenizer **t, const char *ckpt_path, const char *override) {
    *t = NULL;
    int rc = override ? 0 : embedded(t, ckpt_path);
    char *stored = override || rc ? NULL : stored_spec(ckpt_path);
    if (!override && !rc && !stored) rc = beside(t, ckpt_path);
    const char *spec = override ? override : stored ? stored : "byte";
    if (rc == 1) rc = IM_OK;
    else if (!rc) rc = tok_load(t, spec);
    if (rc && stored && spec[0] != '/') {
        /* a run stores the path it was given; try it next to the checkpoint as well */
        const char *slash = strrchr(ckpt_path, '/');
        if (slash) {
            size_t dn = (size_t)(slash - ckpt_path) + 1, n = dn + strlen(spec) + 1;
            char *alt = malloc(n);
            if (alt) {
                memcpy(alt, ckpt_path, dn);
                strcpy(alt + dn, spec);
                if (!tok_load(t, alt)) rc = IM_OK;
                else err_set(rc, "tokenizer '%s' (stored in %s) not found; give one with --tokenizer", spec, ckpt_path);
                free(alt);
            }
        }
    }
    free(stored);
    return rc;
}
