/* textdata.h: token files for language modelling (`implicit data prepare`, task "lm").
 *
 * A token file holds a tokenized text corpus split into a training and a validation part.
 * Layout (all integers little-endian):
 *   offset  0  8 bytes  magic "IMPLTOK\0"
 *   offset  8  u32      version (= 1)
 *   offset 12  u32      vocab    V: every token is < V
 *   offset 16  u32      width    bytes per token: 2 (u16, needs V <= 65536) or 4 (u32)
 *   offset 20  u64      n_train  tokens of the training split
 *   offset 28  u64      n_val    tokens of the validation split
 *   offset 36  u32      S        length of the tokenizer spec
 *   offset 40  S bytes  the tokenizer spec (tok_load's string: "byte", a path to .bpe / .json), no NUL
 *   then       n_train tokens, then n_val tokens, `width` bytes each
 * The file size is exactly 40 + S + width * (n_train + n_val), which the reader checks before it
 * reads a token, and it checks every token against V, so a truncated, foreign or damaged file is
 * rejected with a message naming it. Files are written atomically (io/atomic.h).
 * The reader loads the whole file into memory (tinyshakespeare: 2.2 MB as u16).
 * Out of scope: memory mapping for corpora larger than memory, document boundaries (files are
 * joined with the tokenizer's end-of-text token where it has one).
 */
#ifndef IMPLICIT_TEXTDATA_H
#define IMPLICIT_TEXTDATA_H

#include <stdint.h>

#define TEXTDATA_MAGIC "IMPLTOK"    /* 7 letters + the NUL = 8 bytes */
#define TEXTDATA_VERSION 1u
#define TEXTDATA_HEADER_BYTES 40
/* Longest tokenizer spec stored (it must fit the task's `tokenizer` key). */
#define TEXTDATA_MAX_SPEC 255
/* Largest vocabulary accepted (ids are ints everywhere). */
#define TEXTDATA_MAX_VOCAB (1 << 30)

enum { TEXT_TRAIN = 0, TEXT_VAL = 1 };

typedef struct TextData TextData;

/* Write a token file: train (n_train) and val (n_val) ids in 0..vocab-1, spec the tokenizer spec.
 * The width is 2 when vocab <= 65536, else 4. IM_EINVAL naming the position of a token outside
 * the vocabulary or a bad vocab / spec; IM_EIO when the file cannot be written. */
int textdata_write(const char *path, const char *spec, int vocab, const int *train, uint64_t n_train, const int *val,
                   uint64_t n_val);

/* Open, validate and load a token file. IM_EIO (cannot open / read), IM_EFORMAT with the reason
 * and the path (bad magic, version, width, vocab, spec, counts vs file size, a token >= vocab). */
int textdata_open(TextData **out, const char *path);
void textdata_free(TextData *d);

const char *textdata_path(const TextData *d);
const char *textdata_spec(const TextData *d);   /* the tokenizer spec from the header */
int textdata_vocab(const TextData *d);
int textdata_width(const TextData *d);
uint64_t textdata_count(const TextData *d, int split); /* TEXT_TRAIN | TEXT_VAL */
/* Tokens pos..pos+n-1 of a split into out (n). The range must lie inside the split (CHECK). */
void textdata_get(const TextData *d, int split, uint64_t pos, int n, int *out);

/* `implicit data prepare`: read the text files, encode them with the tokenizer `spec` (joined by
 * its end-of-text token where it has one), split, write `out`.
 *   per_file = 0: the validation split is the last val_frac of all tokens;
 *   per_file = 1: the last val_frac of each file (each file contributes to both splits).
 * val_frac in [0, 1). A part of n tokens keeps floor(n (1 - val_frac)) for training (nanoGPT's
 * split: tinyshakespeare gives 1003854 / 111540). info (may be NULL) receives the
 * numbers for a summary. IM_EINVAL (bad arguments, no tokens), IM_EIO (a file cannot be read or
 * written), or the tokenizer's error. */
typedef struct {
    int n_files, vocab, width;
    uint64_t bytes, n_train, n_val;
} TextPrepInfo;
int textdata_prepare(const char *out, const char *const *texts, int n_texts, const char *spec, double val_frac,
                     int per_file, TextPrepInfo *info);

#endif
