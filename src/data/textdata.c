/* textdata.c: the token file writer, reader and `prepare` (see textdata.h). */
#include "textdata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "../io/atomic.h"
#include "../tok/tokenizer.h"

struct TextData {
    char *path, *spec;
    int vocab, width;
    uint64_t n[2];            /* tokens of TEXT_TRAIN, TEXT_VAL */
    unsigned char *tok;       /* (n[0] + n[1]) * width bytes, little-endian as in the file */
};

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct {
    const char *spec;
    int vocab, width;
    const int *part[2];
    uint64_t n[2];
} WriteCtx;

static int emit_tokens(FILE *f, void *ctx) {
    const WriteCtx *w = ctx;
    unsigned char head[TEXTDATA_HEADER_BYTES];
    uint32_t S = (uint32_t)strlen(w->spec);
    memcpy(head, TEXTDATA_MAGIC, 8);
    put_u32(head + 8, TEXTDATA_VERSION);
    put_u32(head + 12, (uint32_t)w->vocab);
    put_u32(head + 16, (uint32_t)w->width);
    put_u64(head + 20, w->n[0]);
    put_u64(head + 28, w->n[1]);
    put_u32(head + 36, S);
    if (fwrite(head, 1, sizeof head, f) != sizeof head || fwrite(w->spec, 1, S, f) != S)
        return err_set(IM_EIO, "short write: %s", strerror(errno));
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = xmalloc((size_t)CHUNK * 4);
    int rc = IM_OK;
    for (int s = 0; s < 2 && !rc; s++)
        for (uint64_t i0 = 0; i0 < w->n[s] && !rc; i0 += CHUNK) {
            size_t k = w->n[s] - i0 < CHUNK ? (size_t)(w->n[s] - i0) : CHUNK;
            for (size_t j = 0; j < k; j++) {
                uint32_t v = (uint32_t)w->part[s][i0 + j];
                if (w->width == 2) buf[2 * j] = (unsigned char)v, buf[2 * j + 1] = (unsigned char)(v >> 8);
                else put_u32(buf + 4 * j, v);
            }
            if (fwrite(buf, (size_t)w->width, k, f) != k) rc = err_set(IM_EIO, "short write: %s", strerror(errno));
        }
    free(buf);
    return rc;
}

int textdata_write(const char *path, const char *spec, int vocab, const int *train, uint64_t n_train, const int *val,
                   uint64_t n_val) {
    if (!spec || !*spec || strlen(spec) > TEXTDATA_MAX_SPEC)
        return err_set(IM_EINVAL, "token file %s: the tokenizer spec must have 1..%d characters", path, TEXTDATA_MAX_SPEC);
    if (vocab < 1 || vocab > TEXTDATA_MAX_VOCAB)
        return err_set(IM_EINVAL, "token file %s: vocab %d out of range 1..%d", path, vocab, TEXTDATA_MAX_VOCAB);
    WriteCtx w = {spec, vocab, vocab <= 65536 ? 2 : 4, {train, val}, {n_train, n_val}};
    for (int s = 0; s < 2; s++)
        for (uint64_t i = 0; i < w.n[s]; i++)
            if (w.part[s][i] < 0 || w.part[s][i] >= vocab)
                return err_set(IM_EINVAL, "token file %s: %s token %llu is %d, outside the vocabulary 0..%d", path,
                               s ? "validation" : "training", (unsigned long long)i, w.part[s][i], vocab - 1);
    return atomic_write(path, emit_tokens, &w);
}

/* ---- reader ---------------------------------------------------------------------------------- */

#define BADF(...) do { rc = err_set(IM_EFORMAT, __VA_ARGS__); goto fail; } while (0)

int textdata_open(TextData **out, const char *path) {
    *out = NULL;
    FILE *f = fs_open_regular(path, "token file");
    if (!f) return IM_EIO;
    struct stat st;
    TextData *d = xcalloc(1, sizeof *d);
    int rc = IM_OK;
    unsigned char head[TEXTDATA_HEADER_BYTES];
    if (fstat(fileno(f), &st) != 0) { rc = err_set(IM_EIO, "cannot stat %s: %s", path, strerror(errno)); goto fail; }
    uint64_t size = (uint64_t)st.st_size;
    if (size < TEXTDATA_HEADER_BYTES || fread(head, 1, sizeof head, f) != sizeof head)
        BADF("%s: truncated: %llu bytes, shorter than the %d-byte header of a token file", path, (unsigned long long)size,
             TEXTDATA_HEADER_BYTES);
    if (memcmp(head, TEXTDATA_MAGIC, 8))
        BADF("%s: not a token file (bad magic; expected \"IMPLTOK\", written by `implicit data prepare`)", path);
    uint32_t version = get_u32(head + 8), vocab = get_u32(head + 12), width = get_u32(head + 16), S = get_u32(head + 36);
    d->n[0] = get_u64(head + 20);
    d->n[1] = get_u64(head + 28);
    if (version != TEXTDATA_VERSION)
        BADF("%s: token file version %u is not supported (this build reads version %u)", path, version, TEXTDATA_VERSION);
    if (width != 2 && width != 4) BADF("%s: token width %u (must be 2 or 4 bytes)", path, width);
    if (vocab < 1 || vocab > TEXTDATA_MAX_VOCAB) BADF("%s: vocab %u out of range 1..%d", path, vocab, TEXTDATA_MAX_VOCAB);
    if (width == 2 && vocab > 65536) BADF("%s: vocab %u does not fit 2-byte tokens (at most 65536)", path, vocab);
    if (S < 1 || S > TEXTDATA_MAX_SPEC) BADF("%s: tokenizer spec length %u out of range 1..%d", path, S, TEXTDATA_MAX_SPEC);
    if (size < TEXTDATA_HEADER_BYTES + (uint64_t)S)
        BADF("%s: truncated: %llu bytes, shorter than the header and its %u-byte tokenizer spec", path,
             (unsigned long long)size, S);
    /* counts against the size by division first, so huge counts cannot overflow */
    uint64_t avail = size - TEXTDATA_HEADER_BYTES - S, fit = avail / width;
    if (d->n[0] > fit || d->n[1] > fit - d->n[0])
        BADF("%s: truncated or damaged: the header counts %llu train + %llu validation tokens of %u bytes, but the file "
             "has room for %llu", path, (unsigned long long)d->n[0], (unsigned long long)d->n[1], width,
             (unsigned long long)fit);
    if ((d->n[0] + d->n[1]) * width != avail)
        BADF("%s: %llu bytes of tokens but the header counts %llu + %llu tokens of %u bytes (trailing data)", path,
             (unsigned long long)avail, (unsigned long long)d->n[0], (unsigned long long)d->n[1], width);
    d->spec = xcalloc(S + 1, 1);
    if (fread(d->spec, 1, S, f) != S) BADF("%s: truncated tokenizer spec", path);
    if (strlen(d->spec) != S) BADF("%s: the tokenizer spec contains a NUL byte", path);
    d->vocab = (int)vocab;
    d->width = (int)width;
    d->tok = malloc(avail ? (size_t)avail : 1);
    if (!d->tok) { rc = err_set(IM_ENOMEM, "%s: no memory for %llu bytes of tokens", path, (unsigned long long)avail); goto fail; }
    if (avail && fread(d->tok, 1, (size_t)avail, f) != (size_t)avail)
        { rc = err_set(IM_EIO, "%s: read error: %s", path, strerror(errno)); goto fail; }
    for (int s = 0; s < 2; s++)
        for (uint64_t i = 0; i < d->n[s]; i++) {
            const unsigned char *p = d->tok + (s ? d->n[0] + i : i) * width;
            uint32_t v = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
            if (v >= vocab)
                BADF("%s: %s token %llu is %u, not below the vocab %u (damaged file)", path, s ? "validation" : "training",
                     (unsigned long long)i, v, vocab);
        }
    d->path = xmalloc(strlen(path) + 1);
    strcpy(d->path, path);
    fclose(f);
    *out = d;
    return IM_OK;
fail:
    fclose(f);
    textdata_free(d);
    return rc;
}

void textdata_free(TextData *d) {
    if (!d) return;
    free(d->path);
    free(d->spec);
    free(d->tok);
    free(d);
}

const char *textdata_path(const TextData *d) { return d->path; }
const char *textdata_spec(const TextData *d) { return d->spec; }
int textdata_vocab(const TextData *d) { return d->vocab; }
int textdata_width(const TextData *d) { return d->width; }

uint64_t textdata_count(const TextData *d, int split) {
    CHECK(split == TEXT_TRAIN || split == TEXT_VAL, "split %d", split);
    return d->n[split];
}

void textdata_get(const TextData *d, int split, uint64_t pos, int n, int *out) {
    CHECK(split == TEXT_TRAIN || split == TEXT_VAL, "split %d", split);
    CHECK(n >= 0 && pos <= d->n[split] && (uint64_t)n <= d->n[split] - pos, "tokens %llu + %d outside the split of %llu",
          (unsigned long long)pos, n, (unsigned long long)d->n[split]);
    const unsigned char *p = d->tok + (split ? d->n[0] + pos : pos) * (uint64_t)d->width;
    if (d->width == 2)
        for (int i = 0; i < n; i++) out[i] = (int)((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
    else
        for (int i = 0; i < n; i++) out[i] = (int)get_u32(p + 4 * (size_t)i);
}

/* ---- prepare --------------------------------------------------------------------------------- */

static int read_text(const char *path, char **text, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(IM_EIO, "cannot open text file %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); return err_set(IM_ENOMEM, "%s: out of memory", path); }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return err_set(IM_EIO, "cannot read text file %s", path); }
    *text = buf;
    *n = len;
    return IM_OK;
}

/* A growable id array. */
typedef struct {
    int *v;
    size_t n, cap;
} Ids;

static int ids_append(Ids *a, const int *v, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n) cap *= 2;
        int *p = realloc(a->v, cap * sizeof *p);
        if (!p) return err_set(IM_ENOMEM, "out of memory for %zu tokens", a->n + n);
        a->v = p;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
    return IM_OK;
}

/* Tokens of one part that go to validation: n - floor(n (1 - frac)), nanoGPT's split of its
 * tinyshakespeare (1003854 / 111540), so validation losses compare with its numbers. */
static size_t val_count(size_t n, double frac) { return n - (size_t)((double)n * (1 - frac)); }

int textdata_prepare(const char *out, const char *const *texts, int n_texts, const char *spec, double val_frac,
                     int per_file, TextPrepInfo *info) {
    if (n_texts < 1) return err_set(IM_EINVAL, "data prepare: no text files given");
    if (!(val_frac >= 0 && val_frac < 1)) return err_set(IM_EINVAL, "data prepare: --val_frac %g is not in [0, 1)", val_frac);
    Tokenizer *tk;
    int rc = tok_load(&tk, spec);
    if (rc) return rc;
    int eos = tok_eos(tk);
    Ids all = {0}, tr = {0}, va = {0};
    uint64_t bytes = 0;
    for (int i = 0; i < n_texts && !rc; i++) {
        char *text = NULL;
        size_t n = 0, n_ids = 0;
        int *ids = NULL;
        if ((rc = read_text(texts[i], &text, &n))) break;
        bytes += n;
        rc = tok_encode(tk, text, n, &ids, &n_ids);
        free(text);
        if (rc) break;
        if (per_file) {
            size_t nv = val_count(n_ids, val_frac);
            /* documents stay separated by the end-of-text token in both splits */
            if (eos >= 0 && tr.n) rc = ids_append(&tr, &eos, 1);
            if (!rc && eos >= 0 && va.n && nv) rc = ids_append(&va, &eos, 1);
            if (!rc) rc = ids_append(&tr, ids, n_ids - nv);
            if (!rc) rc = ids_append(&va, ids + (n_ids - nv), nv);
        } else {
            if (i > 0 && eos >= 0) rc = ids_append(&all, &eos, 1);
            if (!rc) rc = ids_append(&all, ids, n_ids);
        }
        free(ids);
    }
    if (!rc && !per_file) {
        size_t nv = val_count(all.n, val_frac);
        rc = ids_append(&tr, all.v, all.n - nv);
        if (!rc) rc = ids_append(&va, all.v + (all.n - nv), nv);
    }
    free(all.v);
    if (!rc && tr.n + va.n == 0) rc = err_set(IM_EINVAL, "data prepare: the text files hold no tokens");
    int vocab = tok_vocab(tk);
    if (!rc) rc = textdata_write(out, tok_spec(tk), vocab, tr.v, tr.n, va.v, va.n);
    if (!rc && info) {
        info->n_files = n_texts;
        info->vocab = vocab;
        info->width = vocab <= 65536 ? 2 : 4;
        info->bytes = bytes;
        info->n_train = tr.n;
        info->n_val = va.n;
    }
    free(tr.v);
    free(va.v);
    tok_free(tk);
    return rc;
}
