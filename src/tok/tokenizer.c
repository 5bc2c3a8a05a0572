/* tokenizer.c: spec dispatch and the kind-independent calls (see tokenizer.h). The kinds live
 * behind tok_impl.h: byte level in tok_byte.c, FILE.bpe in tok_bpe.c, tokenizer.json in tok_hf.c;
 * they call down into tok_byte.c's piece setup, never back into this file. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "tok_impl.h"

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Build t of `kind` ("bpe" | "hf") from buf (owned by t from here on). */
static int parse_kind(Tokenizer *t, const char *kind, const char *name, char *buf, size_t n) {
    t->source = buf;
    t->source_len = n;
    if (!strcmp(kind, "bpe")) return tok_bpe_parse(t, name, buf, n);
    if (!strcmp(kind, "hf")) return tok_hf_parse(t, name, buf, n);
    return err_set(IM_EINVAL, "tokenizer '%s': unknown kind '%s' (bpe | hf)", name, kind);
}

static Tokenizer *tok_new(const char *spec) {
    Tokenizer *t = calloc(1, sizeof *t);
    if (t && !(t->spec = strdup(spec))) {
        free(t);
        t = NULL;
    }
    if (!t) err_set(IM_ENOMEM, "tokenizer: out of memory");
    return t;
}

int tok_load(Tokenizer **out, const char *spec) {
    *out = NULL;
    if (!spec || !*spec) return err_set(IM_EINVAL, "tokenizer: empty spec (byte | FILE.bpe | FILE.json)");
    const char *kind = !strcmp(spec, "byte") ? "byte" : ends_with(spec, ".bpe") ? "bpe" : ends_with(spec, ".json") ? "hf" : NULL;
    if (!kind) return err_set(IM_EINVAL, "tokenizer '%s': unknown kind (byte | FILE.bpe | FILE.json)", spec);
    Tokenizer *t = tok_new(spec);
    if (!t) return IM_ENOMEM;
    char *buf = NULL;
    size_t n = 0;
    int rc = !strcmp(kind, "byte") ? tok_byte_init(t) : tok_read_file(spec, &buf, &n);
    if (!rc && buf) rc = parse_kind(t, kind, spec, buf, n);
    if (rc) {
        if (!t->source) free(buf);
        tok_free(t);
        return rc;
    }
    *out = t;
    return IM_OK;
}

int tok_load_mem(Tokenizer **out, const char *kind, const char *name, const char *data, size_t n) {
    *out = NULL;
    Tokenizer *t = tok_new(name);
    char *buf = t ? malloc(n + 1) : NULL;
    if (!buf) {
        tok_free(t);
        return err_set(IM_ENOMEM, "tokenizer: out of memory");
    }
    memcpy(buf, data, n);
    buf[n] = 0;
    int rc = parse_kind(t, kind, name, buf, n);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return IM_OK;
}

const char *tok_source(const Tokenizer *t, size_t *n) {
    if (n) *n = t->source_len;
    return t->source;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    if (t->free_impl) t->free_impl(t);
    if (t->pieces)
        for (int i = 0; i < t->vocab; i++) free(t->pieces[i]);
    free(t->pieces);
    free(t->piece_len);
    free(t->spec);
    free(t->source);
    free(t);
}

const char *tok_spec(const Tokenizer *t) { return t->spec; }
const char *tok_kind(const Tokenizer *t) { return t->kind; }
int tok_vocab(const Tokenizer *t) { return t->vocab; }
int tok_eos(const Tokenizer *t) { return t->eos; }
int tok_merges(const Tokenizer *t) { return t->n_merges; }
int tok_pretok(const Tokenizer *t) { return t->pretok; }

const char *tok_pretok_name(int mode) { return mode == TOK_PRETOK_GPT2 ? "gpt2" : "none"; }

int tok_pretok_parse(const char *name, int *mode) {
    if (!strcmp(name, "gpt2")) *mode = TOK_PRETOK_GPT2;
    else if (!strcmp(name, "none")) *mode = TOK_PRETOK_NONE;
    else return err_set(IM_EINVAL, "pre-tokenisation '%s' is not gpt2 or none", name);
    return IM_OK;
}

const char *tok_piece(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab || !t->pieces[id]) return NULL;
    *len = t->piece_len[id];
    return t->pieces[id];
}

int tok_encode(const Tokenizer *t, const char *text, size_t n, int **ids, size_t *n_ids) {
    return t->encode(t, text, n, ids, n_ids);
}

int tok_decode(const Tokenizer *t, const int *ids, size_t n_ids, char **text, size_t *n) {
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab || !t->pieces[ids[i]])
            return err_set(IM_EINVAL, "tokenizer: id %d at position %zu is outside the vocabulary (%d)", ids[i], i,
                           t->vocab);
        total += t->piece_len[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf) return err_set(IM_ENOMEM, "tokenizer: out of memory");
    size_t at = 0;
    for (size_t i = 0; i < n_ids; i++) {
        memcpy(buf + at, t->pieces[ids[i]], t->piece_len[ids[i]]);
        at += t->piece_len[ids[i]];
    }
    buf[at] = 0;
    *text = buf;
    *n = at;
    return IM_OK;
}
