/* tok_train.c: learning byte-level BPE merges (tok_train_bpe, tokenizer.h) and writing FILE.bpe.
 *
 * The corpus becomes one array of symbols with prev/next links; a link never crosses a chunk (or
 * text) boundary. In GPT-2 mode identical chunks are stored once with their count as a weight, so
 * tinyshakespeare's ~300k chunks shrink to ~15k distinct ones. Each pair keeps its weighted count
 * and the list of positions where it was ever created; the list goes stale as merges happen
 * and is filtered when the pair is merged. A merge touches only the occurrences of that pair and
 * their two neighbours, updating the neighbour pairs' counts in place, so a step costs the number
 * of occurrences, not the corpus size. The most frequent pair comes from a lazy max-heap: an entry
 * whose count went stale is re-pushed with the current count when it reaches the top.
 *
 * Counting and merging follow the encoder exactly (overlapping pairs such as "aaa" count twice,
 * occurrences merge left to right), so encoding the training text gives the final segmentation
 * and stats.tokens.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/timer.h"
#include "../io/atomic.h"
#include "tok_impl.h"

#define MAX_TRAIN_VOCAB (1 << 22)

typedef struct {
    int a, b;
    int64_t count;      /* weighted occurrences now */
    int *occ;           /* (n_occ) left positions where the pair was created, some stale */
    int n_occ, cap_occ;
    int touched;        /* count grew during this merge: needs a heap entry */
} Pair;

typedef struct {
    int64_t count;
    int pair;
} HeapItem;

typedef struct {
    int *sym, *next, *prev, *w;   /* (n_pos) symbol (-1: merged into its left), links, weight */
    int n_pos;
    Pair *pairs;
    int n_pairs, cap_pairs;
    uint64_t *keys;               /* (cap) pair hash: a << 32 | b, UINT64_MAX empty */
    int *slot_pair;               /* (cap) */
    size_t cap;
    HeapItem *heap;
    size_t hn, hcap;
    int *touched;
    int n_touched, cap_touched;
} BpeTrainer;

static void *grow(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    CHECK(q, "out of memory (%zu bytes) while training the tokenizer", n);
    return q;
}

static size_t hash_u64(uint64_t k, size_t cap) {
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 29)) & (cap - 1);
}

static void rehash(BpeTrainer *T, size_t cap) {
    free(T->keys);
    free(T->slot_pair);
    T->keys = grow(NULL, cap * sizeof *T->keys);
    T->slot_pair = grow(NULL, cap * sizeof *T->slot_pair);
    T->cap = cap;
    for (size_t i = 0; i < cap; i++) T->keys[i] = UINT64_MAX;
    for (int p = 0; p < T->n_pairs; p++) {
        uint64_t k = (uint64_t)T->pairs[p].a << 32 | (uint32_t)T->pairs[p].b;
        size_t i = hash_u64(k, cap);
        while (T->keys[i] != UINT64_MAX) i = (i + 1) & (cap - 1);
        T->keys[i] = k;
        T->slot_pair[i] = p;
    }
}

/* Index of pair (a, b), created with count 0 when add is set; -1 if absent and !add. */
static int pair_find(BpeTrainer *T, int a, int b, int add) {
    uint64_t k = (uint64_t)a << 32 | (uint32_t)b;
    size_t i = hash_u64(k, T->cap);
    for (; T->keys[i] != UINT64_MAX; i = (i + 1) & (T->cap - 1))
        if (T->keys[i] == k) return T->slot_pair[i];
    if (!add) return -1;
    if (T->n_pairs == T->cap_pairs) {
        T->cap_pairs = T->cap_pairs ? 2 * T->cap_pairs : 1024;
        T->pairs = grow(T->pairs, (size_t)T->cap_pairs * sizeof *T->pairs);
    }
    int p = T->n_pairs++;
    memset(&T->pairs[p], 0, sizeof T->pairs[p]);
    T->pairs[p].a = a;
    T->pairs[p].b = b;
    if (2 * (size_t)T->n_pairs > T->cap) {
        rehash(T, 2 * T->cap);
    } else {
        T->keys[i] = k;
        T->slot_pair[i] = p;
    }
    return p;
}

static void pair_inc(BpeTrainer *T, int a, int b, int w, int pos) {
    int i = pair_find(T, a, b, 1);  /* may move T->pairs */
    Pair *p = &T->pairs[i];
    p->count += w;
    if (p->n_occ == p->cap_occ) {
        p->cap_occ = p->cap_occ ? 2 * p->cap_occ : 4;
        p->occ = grow(p->occ, (size_t)p->cap_occ * sizeof *p->occ);
    }
    p->occ[p->n_occ++] = pos;
    if (!p->touched) {
        p->touched = 1;
        if (T->n_touched == T->cap_touched) {
            T->cap_touched = T->cap_touched ? 2 * T->cap_touched : 1024;
            T->touched = grow(T->touched, (size_t)T->cap_touched * sizeof *T->touched);
        }
        T->touched[T->n_touched++] = i;
    }
}

static void pair_dec(BpeTrainer *T, int a, int b, int w) {
    int i = pair_find(T, a, b, 0);
    CHECK(i >= 0 && T->pairs[i].count >= w, "BPE training lost count of the pair (%d, %d)", a, b);
    T->pairs[i].count -= w;
}

/* Heap order: higher count first; ties go to the smaller (a, b) so the result is deterministic. */
static int item_before(const BpeTrainer *T, HeapItem x, HeapItem y) {
    if (x.count != y.count) return x.count > y.count;
    const Pair *p = &T->pairs[x.pair], *q = &T->pairs[y.pair];
    return p->a != q->a ? p->a < q->a : p->b < q->b;
}

static void heap_push(BpeTrainer *T, int64_t count, int pair) {
    if (T->hn == T->hcap) {
        T->hcap = T->hcap ? 2 * T->hcap : 1024;
        T->heap = grow(T->heap, T->hcap * sizeof *T->heap);
    }
    HeapItem e = {count, pair};
    size_t i = T->hn++;
    while (i > 0 && item_before(T, e, T->heap[(i - 1) / 2])) {
        T->heap[i] = T->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    T->heap[i] = e;
}

static HeapItem heap_pop(BpeTrainer *T) {
    HeapItem top = T->heap[0], last = T->heap[--T->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= T->hn) break;
        if (c + 1 < T->hn && item_before(T, T->heap[c + 1], T->heap[c])) c++;
        if (!item_before(T, T->heap[c], last)) break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (T->hn) T->heap[i] = last;
    return top;
}

static void flush_touched(BpeTrainer *T) {
    for (int i = 0; i < T->n_touched; i++) {
        Pair *p = &T->pairs[T->touched[i]];
        p->touched = 0;
        if (p->count > 0) heap_push(T, p->count, T->touched[i]);
    }
    T->n_touched = 0;
}

/* The pair to merge next, or -1 when the heap runs dry. */
static int best_pair(BpeTrainer *T) {
    while (T->hn) {
        HeapItem top = heap_pop(T);
        int64_t now = T->pairs[top.pair].count;
        if (top.count == now) return top.pair;
        /* a smaller stale entry means a newer, larger one is still in the heap */
        if (now > 0 && top.count > now) heap_push(T, now, top.pair);
    }
    return -1;
}

static int cmp_int(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* Replace every live occurrence of pair `best` by id x, left to right; returns the weight merged. */
static int64_t apply_merge(BpeTrainer *T, int best, int x) {
    int a = T->pairs[best].a, b = T->pairs[best].b, n = T->pairs[best].n_occ;
    int *occ = T->pairs[best].occ;
    T->pairs[best].occ = NULL;
    T->pairs[best].n_occ = T->pairs[best].cap_occ = 0;
    qsort(occ, (size_t)n, sizeof *occ, cmp_int);
    int64_t merged = 0;
    for (int k = 0; k < n; k++) {
        int p = occ[k];
        if ((k && occ[k - 1] == p) || T->sym[p] != a) continue;
        int q = T->next[p];
        if (q < 0 || T->sym[q] != b) continue;
        int w = T->w[p], l = T->prev[p], r = T->next[q];
        if (l >= 0) pair_dec(T, T->sym[l], a, w);
        if (r >= 0) pair_dec(T, b, T->sym[r], w);
        pair_dec(T, a, b, w);
        T->sym[p] = x;
        T->sym[q] = -1;
        T->next[p] = r;
        if (r >= 0) T->prev[r] = p;
        if (l >= 0) pair_inc(T, T->sym[l], x, w, l);
        if (r >= 0) pair_inc(T, x, T->sym[r], w, p);
        merged += w;
    }
    CHECK(T->pairs[best].count == 0, "BPE training: %lld occurrences of (%d, %d) left after merging",
          (long long)T->pairs[best].count, a, b);
    free(occ);
    return merged;
}

/* ---- corpus ----------------------------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t len;
    int count;
} Word;

typedef struct {
    Word *words;
    int n, cap;
    int *slots;           /* (scap) word index or -1 */
    size_t scap;
} WordSet;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void words_add(WordSet *ws, const char *s, size_t len, int dedupe) {
    if (dedupe && 2 * (size_t)(ws->n + 1) > ws->scap) {
        size_t cap = ws->scap ? 2 * ws->scap : 1 << 12;
        free(ws->slots);
        ws->slots = grow(NULL, cap * sizeof *ws->slots);
        ws->scap = cap;
        for (size_t i = 0; i < cap; i++) ws->slots[i] = -1;
        for (int k = 0; k < ws->n; k++) {
            size_t i = hash_u64(hash_bytes(ws->words[k].s, ws->words[k].len), cap);
            while (ws->slots[i] >= 0) i = (i + 1) & (cap - 1);
            ws->slots[i] = k;
        }
    }
    size_t i = 0;
    if (dedupe) {
        for (i = hash_u64(hash_bytes(s, len), ws->scap); ws->slots[i] >= 0; i = (i + 1) & (ws->scap - 1)) {
            Word *wd = &ws->words[ws->slots[i]];
            if (wd->len == len && !memcmp(wd->s, s, len)) {
                wd->count++;
                return;
            }
        }
    }
    if (ws->n == ws->cap) {
        ws->cap = ws->cap ? 2 * ws->cap : 1024;
        ws->words = grow(ws->words, (size_t)ws->cap * sizeof *ws->words);
    }
    if (dedupe) ws->slots[i] = ws->n;
    ws->words[ws->n++] = (Word){s, len, 1};
}

/* Symbols, links and initial pair counts of the distinct chunks, in order of first appearance. */
static void build_corpus(BpeTrainer *T, const WordSet *ws) {
    size_t P = 0;
    for (int k = 0; k < ws->n; k++) P += ws->words[k].len;
    T->n_pos = (int)P;
    T->sym = grow(NULL, P * sizeof *T->sym);
    T->next = grow(NULL, P * sizeof *T->next);
    T->prev = grow(NULL, P * sizeof *T->prev);
    T->w = grow(NULL, P * sizeof *T->w);
    rehash(T, 1 << 16);
    int at = 0;
    for (int k = 0; k < ws->n; k++) {
        const Word *wd = &ws->words[k];
        int n = (int)wd->len;
        for (int i = 0; i < n; i++) {
            T->sym[at + i] = (unsigned char)wd->s[i];
            T->w[at + i] = wd->count;
            T->prev[at + i] = i ? at + i - 1 : -1;
            T->next[at + i] = i + 1 < n ? at + i + 1 : -1;
        }
        for (int i = 0; i + 1 < n; i++) pair_inc(T, T->sym[at + i], T->sym[at + i + 1], wd->count, at + i);
        at += n;
    }
    flush_touched(T);
}

static void bpe_trainer_free(BpeTrainer *T) {
    for (int p = 0; p < T->n_pairs; p++) free(T->pairs[p].occ);
    free(T->pairs);
    free(T->sym);
    free(T->next);
    free(T->prev);
    free(T->w);
    free(T->keys);
    free(T->slot_pair);
    free(T->heap);
    free(T->touched);
}

/* ---- the file --------------------------------------------------------------------------------- */

static int write_bpe(const char *path, const TokTrainOpts *o, const int *merges, int n_merges) {
    size_t cap = 256 + 24 * (size_t)n_merges, len = 0;
    char *buf = grow(NULL, cap);
    int vocab = 256 + n_merges + (o->eos ? 1 : 0);
    len += (size_t)snprintf(buf, cap, "%s\nversion %d\nvocab %d\npretokenize %s\neos %d\nmerges %d\n", TOK_BPE_MAGIC,
                            TOK_BPE_VERSION, vocab, tok_pretok_name(o->pretok), o->eos ? vocab - 1 : -1, n_merges);
    for (int i = 0; i < n_merges; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%d %d\n", merges[2 * i], merges[2 * i + 1]);
    int rc = atomic_write_bytes(path, buf, len);
    free(buf);
    return rc ? err_wrap(rc, "tokenizer train: writing '%s'", path) : IM_OK;
}

int tok_train_bpe(const char *const *texts, const size_t *lens, int n_texts, const TokTrainOpts *opts,
                  const char *out_path, TokTrainStats *st) {
    TokTrainOpts o = *opts;
    int min_vocab = 256 + (o.eos ? 1 : 0);
    if (o.vocab < min_vocab || o.vocab > MAX_TRAIN_VOCAB)
        return err_set(IM_EINVAL, "tokenizer train: vocab %d is outside %d..%d (256 bytes%s + merges)", o.vocab,
                       min_vocab, MAX_TRAIN_VOCAB, o.eos ? " + eos" : "");
    if (o.pretok != TOK_PRETOK_GPT2 && o.pretok != TOK_PRETOK_NONE)
        return err_set(IM_EINVAL, "tokenizer train: unknown pre-tokenisation mode %d", o.pretok);
    size_t bytes = 0, chunks = 0;
    for (int k = 0; k < n_texts; k++) bytes += lens[k];
    if (bytes == 0)
        return err_set(IM_EINVAL, "tokenizer train: the text is empty (0 bytes in %d file%s): there is nothing to learn "
                       "merges from", n_texts, n_texts == 1 ? "" : "s");
    /* positions and weights are ints */
    if (bytes >= (size_t)INT_MAX / 2)
        return err_set(IM_EINVAL, "tokenizer train: %zu bytes of text is more than this trainer handles (1 GiB)", bytes);
    double t0 = timer_now();
    WordSet ws = {0};
    for (int k = 0; k < n_texts; k++) {
        for (size_t i = 0; i < lens[k];) {
            size_t j = o.pretok == TOK_PRETOK_GPT2 ? tok_gpt2_chunk(texts[k], lens[k], i) : lens[k];
            words_add(&ws, texts[k] + i, j - i, o.pretok == TOK_PRETOK_GPT2);
            chunks++;
            i = j;
        }
    }
    BpeTrainer T = {0};
    build_corpus(&T, &ws);
    int want = o.vocab - min_vocab, n_merges = 0;
    int *merges = grow(NULL, 2 * (size_t)(want ? want : 1) * sizeof *merges);
    size_t tokens = bytes;
    while (n_merges < want) {
        int best = best_pair(&T);
        if (best < 0 || T.pairs[best].count < 2) break;
        merges[2 * n_merges] = T.pairs[best].a;
        merges[2 * n_merges + 1] = T.pairs[best].b;
        tokens -= (size_t)apply_merge(&T, best, 256 + n_merges);
        flush_touched(&T);
        n_merges++;
    }
    double secs = timer_now() - t0;
    bpe_trainer_free(&T);
    if (want > 0 && n_merges == 0) {   /* a merge-less .bpe would just be the byte tokenizer under another name */
        free(ws.words);
        free(ws.slots);
        free(merges);
        return err_set(IM_EINVAL, "tokenizer train: no pair of tokens occurs twice in the %zu bytes of text, so there "
                       "is nothing to merge (the byte tokenizer, spec 'byte', is what this text supports)", bytes);
    }
    if (st) {
        *st = (TokTrainStats){.merges = n_merges, .vocab = 256 + n_merges + (o.eos ? 1 : 0), .bytes = bytes,
                              .chunks = chunks, .unique = (size_t)ws.n, .tokens = tokens, .seconds = secs};
    }
    free(ws.words);
    free(ws.slots);
    int rc = write_bpe(out_path, &o, merges, n_merges);
    free(merges);
    return rc;
}
