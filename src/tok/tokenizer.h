/* tokenizer.h: text <-> token ids for the language-modelling path (issue 6).
 *
 * One interface, three kinds, chosen by a spec string:
 *   "byte"          byte-level: id = byte value, vocabulary 256, no files (the default)
 *   PATH.bpe        a BPE model learned by `implicit tokenizer train` (merges file, see tok_bpe.c
 *                   and docs/formats.md): byte-level base vocabulary plus learned merges
 *   PATH.json       a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2 / GPT-NeoX style)
 * Every kind is lossless on arbitrary bytes (invalid UTF-8 included): decode(encode(s)) == s.
 * Ids are 0 .. tok_vocab()−1; special tokens (e.g. <|endoftext|>) are ordinary ids of the
 * vocabulary that encode() never produces from text; tok_eos() names one if the kind has it.
 */
#ifndef IMPLICIT_TOKENIZER_H
#define IMPLICIT_TOKENIZER_H

#include <stddef.h>

typedef struct Tokenizer Tokenizer;

/* Load by spec (above). IM_EINVAL / IM_EIO / IM_EFORMAT with a message naming the file and what
 * is wrong. *out freed by tok_free. */
int tok_load(Tokenizer **out, const char *spec);
void tok_free(Tokenizer *t);
/* The same from the bytes of a file held in memory (a tokenizer stored inside a checkpoint):
 * kind "bpe" (a FILE.bpe) or "hf" (a tokenizer.json); `name` is its tok_spec and names it in
 * messages. data is copied. */
int tok_load_mem(Tokenizer **out, const char *kind, const char *name, const char *data, size_t n);
/* The bytes of the file the tokenizer was built from (*n of them; NUL after the last), NULL for
 * "byte": what a checkpoint stores to be self-contained. */
const char *tok_source(const Tokenizer *t, size_t *n);
const char *tok_spec(const Tokenizer *t);  /* the spec it was loaded from */
const char *tok_kind(const Tokenizer *t);  /* "byte" | "bpe" | "hf" */
int tok_vocab(const Tokenizer *t);
int tok_eos(const Tokenizer *t);           /* end-of-text id, or -1 */

/* Encode n bytes: *ids (malloc'd, caller frees) receives *n_ids ids. IM_ENOMEM on failure. */
int tok_encode(const Tokenizer *t, const char *text, size_t n, int **ids, size_t *n_ids);
/* Decode ids to bytes: *text (malloc'd, NUL-terminated for convenience) receives *n bytes.
 * IM_EINVAL naming the position for an id outside the vocabulary. */
int tok_decode(const Tokenizer *t, const int *ids, size_t n_ids, char **text, size_t *n);
/* The bytes of one id (for streaming output): *len bytes at the returned pointer (owned by t),
 * NULL for an id outside the vocabulary. A token may be part of a multi-byte UTF-8 character. */
const char *tok_piece(const Tokenizer *t, int id, size_t *len);

/* ---- BPE details and training (tok_bpe.c, tok_train.c) ------------------------------------- */

/* Pre-tokenisation: BPE merges never cross a chunk boundary. GPT2 = the GPT-2 pattern
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ on bytes, with \p{L}
 * approximated by ASCII letters plus every byte >= 0x80, \p{N} by ASCII digits and \s by ASCII
 * whitespace (space, \t \n \v \f \r). NONE = the whole text is one chunk. */
enum { TOK_PRETOK_NONE = 0, TOK_PRETOK_GPT2 = 1 };
const char *tok_pretok_name(int mode);               /* "none" | "gpt2" */
int tok_pretok_parse(const char *name, int *mode);   /* IM_EINVAL for an unknown name */
/* End (exclusive) of the GPT-2 chunk that starts at byte i < n of text[0..n). */
size_t tok_gpt2_chunk(const char *text, size_t n, size_t i);

int tok_merges(const Tokenizer *t);   /* merge rules (0 for "byte") */
int tok_pretok(const Tokenizer *t);   /* TOK_PRETOK_* the kind encodes with */

typedef struct {
    int vocab;        /* total vocabulary: 256 bytes + merges (+ 1 end-of-text id when eos) */
    int pretok;       /* TOK_PRETOK_*; the CLI default is GPT2 */
    int eos;          /* 1: reserve the last id for "<|endoftext|>"; 0: no eos (-1 in the file) */
} TokTrainOpts;

typedef struct {
    int merges, vocab;        /* learned: fewer than asked when no pair occurs twice any more */
    size_t bytes;             /* training text */
    size_t chunks, unique;    /* pre-token chunks, distinct ones (GPT2 mode trains on distinct chunks) */
    size_t tokens;            /* tokens of the training text under the learned merges */
    double seconds;           /* wall-clock of the training (not of reading the files) */
} TokTrainStats;

/* Learn byte-level BPE merges from n_texts texts (texts[i] has lens[i] bytes; merges never cross
 * from one text to the next) and write them to out_path (a .bpe file, docs/formats.md), atomically.
 * Each step merges the most frequent adjacent pair (ties: the smallest (left id, right id)), over
 * all occurrences left to right; training stops early when no pair occurs at least twice. The
 * output is a pure function of the texts and opts. st may be NULL. IM_EINVAL for bad opts, for an
 * empty text and for a text without a single pair to merge (nothing is written then), IM_EIO for
 * the file. */
int tok_train_bpe(const char *const *texts, const size_t *lens, int n_texts, const TokTrainOpts *opts,
                  const char *out_path, TokTrainStats *st);

#endif
