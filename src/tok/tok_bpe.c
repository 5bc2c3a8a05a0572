/* tok_bpe.c: the byte-level BPE engine (pre-tokenisation + merges by rank) shared by FILE.bpe and
 * tokenizer.json, and the loader of FILE.bpe (written by tok_train.c; format in docs/formats.md).
 *
 * Encoding a chunk is the usual priority-queue BPE: every adjacent pair that has a merge rule goes
 * into a min-heap keyed by (rank, position); the top is merged if the pair at that position is
 * still the same, and the two new neighbour pairs are pushed. Entries are checked when popped, not
 * removed when they go stale, so each merge costs O(log n) and a whole-text chunk (pretokenize
 * none) of megabytes encodes in one pass. Lowest rank first, leftmost first is the order GPT-2's
 * bpe() and Hugging Face's BPE model apply merges in, and it is also the order tok_train.c uses,
 * so encoding the training text reproduces the training segmentation.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/fsutil.h"
#include "tok_impl.h"

/* ---- pre-tokenisation ------------------------------------------------------------------------- */

enum { C_OTHER, C_LETTER, C_DIGIT, C_SPACE };

static int byte_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return C_LETTER;
    if (c >= '0' && c <= '9') return C_DIGIT;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return C_SPACE;
    return C_OTHER;
}

size_t tok_gpt2_chunk(const char *text, size_t n, size_t i) {
    const unsigned char *s = (const unsigned char *)text;
    /* the contractions come first in the alternation, so they win only at a chunk start */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char c2 = s[i + 2];
            if ((c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l')) return i + 3;
        }
    }
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class */
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n && byte_class(s[j + 1]) != C_SPACE) j++;
    int k = byte_class(s[j]);
    if (k != C_SPACE) {
        for (j++; j < n && byte_class(s[j]) == k;) j++;
        return j;
    }
    /* "\s+(?!\S)" backs off one byte so that a following word keeps its leading space; a single
     * whitespace byte before a non-space falls through to "\s+" */
    for (j = i; j < n && byte_class(s[j]) == C_SPACE;) j++;
    if (j < n && j - i >= 2) return j - 1;
    return j;
}

/* ---- merge map -------------------------------------------------------------------------------- */

#define EMPTY_KEY UINT64_MAX

static uint64_t pair_key(int a, int b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static size_t key_slot(uint64_t key, size_t cap) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

int merge_map_init(MergeMap *m, size_t n) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->rank = malloc(cap * sizeof *m->rank);
    m->id = malloc(cap * sizeof *m->id);
    if (!m->keys || !m->rank || !m->id) {
        merge_map_free(m);
        return err_set(IM_ENOMEM, "tokenizer: out of memory for %zu merges", n);
    }
    for (size_t i = 0; i < cap; i++) m->keys[i] = EMPTY_KEY;
    m->cap = cap;
    return IM_OK;
}

void merge_map_free(MergeMap *m) {
    free(m->keys);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

int merge_map_put(MergeMap *m, int a, int b, int rank, int id) {
    CHECK(2 * (m->n + 1) <= m->cap, "merge map sized for fewer merges (%zu of %zu slots)", m->n, m->cap);
    uint64_t key = pair_key(a, b);
    size_t i = key_slot(key, m->cap);
    for (; m->keys[i] != EMPTY_KEY; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            m->rank[i] = rank;
            m->id[i] = id;
            return 1;
        }
    m->keys[i] = key;
    m->rank[i] = rank;
    m->id[i] = id;
    m->n++;
    return 0;
}

int merge_map_get(const MergeMap *m, int a, int b, int *id) {
    uint64_t key = pair_key(a, b);
    for (size_t i = key_slot(key, m->cap); m->keys[i] != EMPTY_KEY; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            if (id) *id = m->id[i];
            return m->rank[i];
        }
    return -1;
}

/* ---- encoding --------------------------------------------------------------------------------- */

typedef struct {
    int rank, pos;
} HeapEnt;

/* Per-call scratch, grown to the longest chunk: symbols as a linked list plus the pair heap. */
typedef struct {
    int *sym, *next, *prev;   /* (cap) sym < 0: consumed by its left neighbour */
    HeapEnt *heap;            /* (3 cap): L-1 initial pairs + 2 per merge */
    size_t cap, hn;
} Work;

static int ent_less(HeapEnt x, HeapEnt y) { return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos); }

static void heap_push(Work *w, int rank, int pos) {
    size_t i = w->hn++;
    HeapEnt e = {rank, pos};
    while (i > 0 && ent_less(e, w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = e;
}

static HeapEnt heap_pop(Work *w) {
    HeapEnt top = w->heap[0], last = w->heap[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->hn) break;
        if (c + 1 < w->hn && ent_less(w->heap[c + 1], w->heap[c])) c++;
        if (!ent_less(w->heap[c], last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->hn) w->heap[i] = last;
    return top;
}

static int work_reserve(Work *w, size_t L) {
    if (L <= w->cap) return IM_OK;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < L) cap *= 2;
    int *s = realloc(w->sym, cap * sizeof *s);
    if (s) w->sym = s;
    int *nx = realloc(w->next, cap * sizeof *nx);
    if (nx) w->next = nx;
    int *pv = realloc(w->prev, cap * sizeof *pv);
    if (pv) w->prev = pv;
    HeapEnt *h = realloc(w->heap, 3 * cap * sizeof *h);
    if (h) w->heap = h;
    if (!s || !nx || !pv || !h) return err_set(IM_ENOMEM, "tokenizer: out of memory for a chunk of %zu bytes", L);
    w->cap = cap;
    return IM_OK;
}

static void push_pair(const MergeMap *m, Work *w, int pos, int right) {
    int r = merge_map_get(m, w->sym[pos], w->sym[right], NULL);
    if (r >= 0) heap_push(w, r, pos);
}

/* BPE on one chunk of L >= 1 bytes; writes its ids to out and returns how many. */
static size_t merge_chunk(const BpeEngine *e, const unsigned char *s, size_t L, Work *w, int *out) {
    int n = (int)L;
    for (int i = 0; i < n; i++) {
        w->sym[i] = e->base[s[i]];
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < n ? i + 1 : -1;
    }
    w->hn = 0;
    for (int i = 0; i + 1 < n; i++) push_pair(&e->merges, w, i, i + 1);
    while (w->hn) {
        HeapEnt top = heap_pop(w);
        int p = top.pos, q = w->next[p], id = -1;
        if (w->sym[p] < 0 || q < 0 || merge_map_get(&e->merges, w->sym[p], w->sym[q], &id) != top.rank) continue;
        int r = w->next[q], l = w->prev[p];
        w->sym[p] = id;
        w->sym[q] = -1;
        w->next[p] = r;
        if (r >= 0) w->prev[r] = p;
        if (l >= 0) push_pair(&e->merges, w, l, p);
        if (r >= 0) push_pair(&e->merges, w, p, r);
    }
    size_t k = 0;
    for (int p = 0; p >= 0; p = w->next[p]) out[k++] = w->sym[p];
    return k;
}

static int bpe_encode(const Tokenizer *t, const char *text, size_t n, int **ids, size_t *n_ids) {
    const BpeEngine *e = t->impl;
    if (n > (size_t)INT_MAX / 4) return err_set(IM_EINVAL, "tokenizer: text of %zu bytes is too long to encode at once", n);
    int *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return err_set(IM_ENOMEM, "tokenizer: out of memory for %zu ids", n);
    Work w = {0};
    size_t k = 0;
    int rc = IM_OK;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = t->pretok == TOK_PRETOK_GPT2 ? tok_gpt2_chunk(text, n, i) : n;
        if (j - i == 1) {
            out[k++] = e->base[(unsigned char)text[i]];
        } else if (!(rc = work_reserve(&w, j - i))) {
            k += merge_chunk(e, (const unsigned char *)text + i, j - i, &w, out + k);
        }
        i = j;
    }
    free(w.sym);
    free(w.next);
    free(w.prev);
    free(w.heap);
    if (rc) {
        free(out);
        return rc;
    }
    *ids = out;
    *n_ids = k;
    return IM_OK;
}

static void bpe_free_impl(Tokenizer *t) {
    BpeEngine *e = t->impl;
    if (e) merge_map_free(&e->merges);
    free(e);
    t->impl = NULL;
}

void tok_use_bpe_engine(Tokenizer *t, BpeEngine *e) {
    t->impl = e;
    t->encode = bpe_encode;
    t->free_impl = bpe_free_impl;
}

/* ---- FILE.bpe --------------------------------------------------------------------------------- */

/* Token texts can double with every merge; a bound keeps a hostile file from exhausting memory. */
#define MAX_PIECE_BYTES ((size_t)1 << 28)
#define MAX_FILE_BYTES ((size_t)1 << 28)
#define MAX_VOCAB (1 << 24)

typedef struct {
    const char *path, *buf;
    size_t n, at;
    int line;           /* of the line last read, 1-based */
    const char *s;      /* that line, without '\n' */
    size_t len;
} Lines;

static int fmt_err(const Lines *r, const char *fmt, ...) IM_PRINTF(2, 3);

static int fmt_err(const Lines *r, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return err_set(IM_EFORMAT, "tokenizer '%s' line %d: %s", r->path, r->line, what);
}

/* Next line into r->s; 0 at the end of the file; IM_EFORMAT for a last line without '\n'. */
static int next_line(Lines *r) {
    if (r->at >= r->n) {
        r->line++;
        return 0;
    }
    r->line++;
    const char *nl = memchr(r->buf + r->at, '\n', r->n - r->at);
    if (!nl) return fmt_err(r, "the line has no end (the file is truncated?)");
    r->s = r->buf + r->at;
    r->len = (size_t)(nl - r->s);
    r->at += r->len + 1;
    return 1;
}

/* A decimal integer in s[0..len) (optional '-'), the whole of it. */
static int parse_int(const char *s, size_t len, long long lo, long long hi, long long *v) {
    size_t i = 0;
    int neg = 0;
    if (i < len && s[i] == '-') neg = 1, i++;
    if (i == len || len - i > 12) return 0;
    long long x = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        x = 10 * x + (s[i] - '0');
    }
    x = neg ? -x : x;
    if (x < lo || x > hi) return 0;
    *v = x;
    return 1;
}

/* A header line "key value": *val points into the line. */
static int header_line(Lines *r, const char *key, const char **val, size_t *vlen) {
    char snip[64];
    int rc = next_line(r);
    if (rc < 0) return rc;
    size_t kl = strlen(key);
    if (rc == 0) return fmt_err(r, "the file ends before the '%s' line (truncated?)", key);
    if (r->len <= kl + 1 || memcmp(r->s, key, kl) || r->s[kl] != ' ') {
        size_t m = r->len < sizeof snip - 1 ? r->len : sizeof snip - 1;
        memcpy(snip, r->s, m);
        snip[m] = 0;
        for (size_t i = 0; i < m; i++)
            if ((unsigned char)snip[i] < 32 || (unsigned char)snip[i] >= 127) snip[i] = '?';
        return fmt_err(r, "expected '%s <value>', found '%s'", key, snip);
    }
    *val = r->s + kl + 1;
    *vlen = r->len - kl - 1;
    return IM_OK;
}

static int header_int(Lines *r, const char *key, long long lo, long long hi, long long *v) {
    const char *val;
    size_t vlen;
    int rc = header_line(r, key, &val, &vlen);
    if (rc) return rc;
    if (!parse_int(val, vlen, lo, hi, v))
        return fmt_err(r, "'%s' needs an integer in %lld..%lld", key, lo, hi);
    return IM_OK;
}

typedef struct {
    long long version, vocab, eos, merges;
    int pretok;
} BpeHeader;

static int read_header(Lines *r, BpeHeader *h) {
    int rc = next_line(r);
    if (rc < 0) return rc;
    if (rc == 0 || r->len != strlen(TOK_BPE_MAGIC) || memcmp(r->s, TOK_BPE_MAGIC, r->len))
        return fmt_err(r, "not a BPE file of implicit (the first line must be '" TOK_BPE_MAGIC "')");
    if ((rc = header_int(r, "version", 1, 1000000, &h->version))) return rc;
    if (h->version > TOK_BPE_VERSION)
        return fmt_err(r, "format version %lld is newer than this build reads (%d)", h->version, TOK_BPE_VERSION);
    if ((rc = header_int(r, "vocab", 256, MAX_VOCAB, &h->vocab))) return rc;
    const char *val;
    size_t vlen;
    if ((rc = header_line(r, "pretokenize", &val, &vlen))) return rc;
    if (vlen == 4 && !memcmp(val, "gpt2", 4)) h->pretok = TOK_PRETOK_GPT2;
    else if (vlen == 4 && !memcmp(val, "none", 4)) h->pretok = TOK_PRETOK_NONE;
    else return fmt_err(r, "'pretokenize' must be gpt2 or none");
    if ((rc = header_int(r, "eos", -1, MAX_VOCAB, &h->eos))) return rc;
    if (h->eos >= 0 && h->eos != h->vocab - 1) return fmt_err(r, "the eos id must be -1 or the last id (vocab - 1)");
    if ((rc = header_int(r, "merges", 0, MAX_VOCAB, &h->merges))) return rc;
    if (h->vocab != 256 + h->merges + (h->eos >= 0))
        return fmt_err(r, "vocab %lld != 256 bytes + %lld merges + %d eos", h->vocab, h->merges, h->eos >= 0);
    return IM_OK;
}

/* Merge line i: "a b" with both ids defined before id 256 + i. */
static int read_merge(Lines *r, long long i, const BpeHeader *h, int *a, int *b) {
    int rc = next_line(r);
    if (rc < 0) return rc;
    if (rc == 0) return fmt_err(r, "the file ends after %lld of %lld merges (truncated?)", i, h->merges);
    const char *sp = memchr(r->s, ' ', r->len);
    long long v[2];
    if (!sp || !parse_int(r->s, (size_t)(sp - r->s), 0, LLONG_MAX / 16, &v[0]) ||
        !parse_int(sp + 1, r->len - (size_t)(sp - r->s) - 1, 0, LLONG_MAX / 16, &v[1]))
        return fmt_err(r, "a merge must be two non-negative ids separated by one space");
    for (int k = 0; k < 2; k++) {
        if (v[k] >= h->vocab)
            return fmt_err(r, "merge %lld: id %lld is outside the vocabulary (%lld)", i, v[k], h->vocab);
        if (v[k] >= 256 + i)
            return fmt_err(r, "merge %lld: id %lld is defined only later (this merge defines id %lld)", i, v[k], 256 + i);
    }
    *a = (int)v[0];
    *b = (int)v[1];
    return IM_OK;
}

int tok_read_file(const char *path, char **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(IM_EIO, "tokenizer '%s': cannot open: %s", path, strerror(errno));
    int rc = fs_read_all(f, MAX_FILE_BYTES, buf, n);
    fclose(f);
    return rc ? err_wrap(rc, "tokenizer '%s'", path) : IM_OK;
}

/* Build the merges and token texts from the merge lines. */
static int load_merges(Tokenizer *t, Lines *r, const BpeHeader *h, BpeEngine *e) {
    int rc = merge_map_init(&e->merges, (size_t)h->merges);
    if (rc) return rc;
    int *line_of = malloc(((size_t)h->merges + 1) * sizeof *line_of);
    if (!line_of) return err_set(IM_ENOMEM, "tokenizer '%s': out of memory", r->path);
    size_t total = 256;
    for (long long i = 0; i < h->merges && !rc; i++) {
        int a = 0, b = 0;
        if ((rc = read_merge(r, i, h, &a, &b))) break;
        line_of[i] = r->line;
        int before = merge_map_get(&e->merges, a, b, NULL);
        if (before >= 0) {
            rc = fmt_err(r, "merge %lld repeats the pair %d %d of line %d", i, a, b, line_of[before]);
            break;
        }
        merge_map_put(&e->merges, a, b, (int)i, (int)(256 + i));
        size_t la = t->piece_len[a], lb = t->piece_len[b];
        total += la + lb;
        if (total > MAX_PIECE_BYTES) {
            rc = fmt_err(r, "the token texts exceed 256 MiB in all (a corrupt file?)");
            break;
        }
        char *p = malloc(la + lb);
        if (!p) {
            rc = err_set(IM_ENOMEM, "tokenizer '%s': out of memory", r->path);
            break;
        }
        memcpy(p, t->pieces[a], la);
        memcpy(p + la, t->pieces[b], lb);
        t->pieces[256 + i] = p;
        t->piece_len[256 + i] = la + lb;
    }
    free(line_of);
    if (rc) return rc;
    int more = next_line(r);
    if (more < 0) return more;
    if (more)
        return fmt_err(r, "unexpected content after the %lld merges", h->merges);
    return IM_OK;
}

int tok_bpe_parse(Tokenizer *t, const char *path, const char *buf, size_t n) {
    int rc = IM_OK;
    Lines r = {.path = path, .buf = buf, .n = n};
    BpeHeader h;
    BpeEngine *e = calloc(1, sizeof *e);
    if (!e) rc = err_set(IM_ENOMEM, "tokenizer '%s': out of memory", path);
    if (!rc) {
        tok_use_bpe_engine(t, e);  /* from here on tok_free releases e */
        rc = read_header(&r, &h);
    }
    if (!rc) rc = tok_set_byte_pieces(t, (int)h.vocab);
    if (!rc) {
        for (int b = 0; b < 256; b++) e->base[b] = b;
        rc = load_merges(t, &r, &h, e);
    }
    if (!rc && h.eos >= 0) {
        size_t len = strlen(TOK_EOS_TEXT);
        if (!(t->pieces[h.eos] = malloc(len))) rc = err_set(IM_ENOMEM, "tokenizer '%s': out of memory", path);
        else memcpy(t->pieces[h.eos], TOK_EOS_TEXT, len), t->piece_len[h.eos] = len;
    }
    if (rc) return rc;
    t->kind = "bpe";
    t->eos = (int)h.eos;
    t->n_merges = (int)h.merges;
    t->pretok = h.pretok;
    return IM_OK;
}
