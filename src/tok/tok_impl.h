/* tok_impl.h: the Tokenizer struct shared by the kinds (tok_byte.c, tok_bpe.c, tok_hf.c) and the
 * dispatch in tokenizer.c. */
#ifndef IMPLICIT_TOK_IMPL_H
#define IMPLICIT_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

struct Tokenizer {
    char *spec;
    const char *kind;
    int vocab, eos;
    char **pieces;      /* (vocab) the bytes of each id (NULL: an id with no text, e.g. unused) */
    size_t *piece_len;  /* (vocab) */
    int (*encode)(const Tokenizer *t, const char *text, size_t n, int **ids, size_t *n_ids);
    void (*free_impl)(Tokenizer *t);
    void *impl;
    int n_merges, pretok;  /* tok_merges / tok_pretok (0 / TOK_PRETOK_NONE for byte) */
    char *source;          /* the file's bytes it was built from (NULL for byte), for tok_source */
    size_t source_len;
};

/* ---- the BPE engine shared by FILE.bpe and tokenizer.json (tok_bpe.c) ---------------------- */

/* Merge rules: the pair (left id, right id) -> (rank, id of the merged token). Open addressing. */
typedef struct {
    uint64_t *keys;      /* (cap) left << 32 | right, or UINT64_MAX for an empty slot */
    int *rank, *id;      /* (cap) */
    size_t cap, n;
} MergeMap;

typedef struct {
    int base[256];       /* id of each single byte */
    MergeMap merges;
} BpeEngine;

#define TOK_BPE_MAGIC "implicit-bpe"
#define TOK_BPE_VERSION 1
#define TOK_EOS_TEXT "<|endoftext|>"

/* Allocate room for n merges. IM_ENOMEM. */
int merge_map_init(MergeMap *m, size_t n);
void merge_map_free(MergeMap *m);
/* Set (a, b) -> (rank, id); returns 1 if the pair was already there (now overwritten, as a later
 * duplicate overrides an earlier one in Hugging Face's loader). */
int merge_map_put(MergeMap *m, int a, int b, int rank, int id);
/* Rank of (a, b) (and its merged id in *id), or -1. */
int merge_map_get(const MergeMap *m, int a, int b, int *id);
/* Make t use the engine (t->impl = e, owned): encode = pre-tokenise per t->pretok, then apply the
 * merges lowest rank first, leftmost first, within each chunk. */
void tok_use_bpe_engine(Tokenizer *t, BpeEngine *e);
/* Read a whole file (at most 256 MiB) into *buf (malloc'd). IM_EIO / IM_EFORMAT naming the path. */
int tok_read_file(const char *path, char **buf, size_t *n);

/* pieces[0..255] = the single bytes, the rest NULL; vocab entries allocated. */
int tok_set_byte_pieces(Tokenizer *t, int vocab);
int tok_byte_init(Tokenizer *t);                 /* tok_byte.c, both */
/* Build t from the bytes of a FILE.bpe / tokenizer.json; `path` names it in messages. */
int tok_bpe_parse(Tokenizer *t, const char *path, const char *buf, size_t n);  /* tok_bpe.c */
int tok_hf_parse(Tokenizer *t, const char *path, const char *buf, size_t n);   /* tok_hf.c */

#endif
