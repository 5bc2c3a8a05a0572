/* tok_byte.c: the byte-level tokenizer (one id per byte, no merges) and the byte pieces every
 * kind starts from: a BPE vocabulary's ids 0..255 are the single bytes (tok_impl.h). */
#include <stdlib.h>

#include "../core/check.h"
#include "tok_impl.h"

static int byte_encode(const Tokenizer *t, const char *text, size_t n, int **ids, size_t *n_ids) {
    (void)t;
    int *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return err_set(IM_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) out[i] = (unsigned char)text[i];
    *ids = out;
    *n_ids = n;
    return IM_OK;
}

int tok_set_byte_pieces(Tokenizer *t, int vocab) {
    t->vocab = vocab;
    t->pieces = calloc((size_t)vocab, sizeof *t->pieces);
    t->piece_len = calloc((size_t)vocab, sizeof *t->piece_len);
    if (!t->pieces || !t->piece_len) return err_set(IM_ENOMEM, "tokenizer: out of memory");
    for (int b = 0; b < 256 && b < vocab; b++) {
        if (!(t->pieces[b] = malloc(1))) return err_set(IM_ENOMEM, "tokenizer: out of memory");
        t->pieces[b][0] = (char)b;
        t->piece_len[b] = 1;
    }
    return IM_OK;
}

int tok_byte_init(Tokenizer *t) {
    t->kind = "byte";
    t->eos = -1;
    t->encode = byte_encode;
    return tok_set_byte_pieces(t, 256);
}
