/* tok_hf.c: Hugging Face tokenizer.json files with a byte-level BPE model (GPT-2, GPT-NeoX, Pythia
 * and other models whose pre-tokenizer is ByteLevel), encoded by the engine of tok_bpe.c.
 *
 * Byte-level BPE stores each token as text in which every byte is replaced by a printable code
 * point (GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the other 68
 * bytes become U+0100..U+0143). Loading maps the vocabulary back to bytes, finds the id of each
 * single byte, and turns the merges ("a b" strings or ["a", "b"] pairs, rank = position) into
 * id pairs -> (rank, id of "ab"). What is supported and what is not (docs/cli.md, "Tokenizers"):
 *   - model.type "BPE" only (WordPiece, Unigram, WordLevel are rejected), no continuing-subword
 *     prefix or end-of-word suffix, no byte fallback, no ignore_merges, no dropout;
 *   - pre_tokenizer ByteLevel with add_prefix_space false; use_regex true means the GPT-2 pattern
 *     (tok_gpt2_chunk: ASCII approximation of \p{L} / \p{N}), false means no split;
 *   - normalizer null, or NFC, which is NOT applied (text that is already NFC, e.g. all ASCII,
 *     encodes exactly as Hugging Face does; other text still round-trips losslessly);
 *   - decoder null or ByteLevel; post_processor ignored (no BOS/EOS is added);
 *   - added_tokens (e.g. <|endoftext|>) are ids whose text is their content; encode never produces
 *     them (Hugging Face would match them inside the text), so any text round-trips.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../io/json.h"
#include "tok_impl.h"

#define MAX_HF_VOCAB (1 << 24)

/* ---- GPT-2's byte <-> code point table -------------------------------------------------------- */

static int printable_latin1(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

/* cp[b]: the code point standing for byte b; byte_of[cp]: the inverse (-1 elsewhere). */
static void byte_table(int cp[256], int byte_of[324]) {
    for (int c = 0; c < 324; c++) byte_of[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        cp[b] = printable_latin1(b) ? b : 256 + extra++;
        byte_of[cp[b]] = b;
    }
}

static size_t utf8_put(char *out, int c) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* Bytes of a byte-level token text s[0..n) (valid UTF-8 from the parser) into out (n bytes room);
 * returns the length, or 0 if some character is outside the table (then the text is used as is,
 * as Hugging Face's ByteLevel decoder does). */
static size_t byte_level_decode(const char *s, size_t n, const int byte_of[324], char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int code, len;
        if (c < 0x80) code = c, len = 1;
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) code = (c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F), len = 2;
        else return 0;
        if (code >= 324 || byte_of[code] < 0) return 0;
        out[k++] = (char)byte_of[code];
        i += (size_t)len;
    }
    return k;
}

/* ---- token text -> id ------------------------------------------------------------------------- */

typedef struct {
    const char *s;   /* NULL: empty slot */
    size_t len;
    int id;
} VEnt;

typedef struct {
    VEnt *e;
    size_t cap;
} VocabMap;

static size_t str_hash(const char *s, size_t n, size_t cap) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

static int vocab_get(const VocabMap *m, const char *s, size_t n) {
    for (size_t i = str_hash(s, n, m->cap); m->e[i].s; i = (i + 1) & (m->cap - 1))
        if (m->e[i].len == n && !memcmp(m->e[i].s, s, n)) return m->e[i].id;
    return -1;
}

static void vocab_put(VocabMap *m, const char *s, size_t n, int id) {
    size_t i = str_hash(s, n, m->cap);
    while (m->e[i].s) i = (i + 1) & (m->cap - 1);
    m->e[i] = (VEnt){s, n, id};
}

/* ---- checks on the pipeline ------------------------------------------------------------------- */

static const char *type_of(const Json *j) {
    const Json *t = json_get(j, "type");
    return t && t->type == JSON_STRING ? t->string : NULL;
}

static int is_true(const Json *j) { return j && j->type == JSON_BOOL && j->boolean; }

#define SUPPORTED_HINT " (supported: byte-level BPE, GPT-2 / GPT-NeoX style)"

static int check_model(const char *path, const Json *model) {
    if (!model || model->type != JSON_OBJECT) return err_set(IM_EFORMAT, "tokenizer '%s': no \"model\" object", path);
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE"))
        return err_set(IM_EINVAL, "tokenizer '%s': model type '%s' is not supported" SUPPORTED_HINT, path, type);
    static const char *const str_opts[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const Json *o = json_get(model, str_opts[k]);
        if (o && !(o->type == JSON_NULL || (o->type == JSON_STRING && o->str_len == 0)))
            return err_set(IM_EINVAL, "tokenizer '%s': model.%s is not supported" SUPPORTED_HINT, path, str_opts[k]);
    }
    if (is_true(json_get(model, "byte_fallback")))
        return err_set(IM_EINVAL,
                       "tokenizer '%s': model.byte_fallback (SentencePiece-style BPE) is not supported" SUPPORTED_HINT, path);
    if (is_true(json_get(model, "ignore_merges")))
        return err_set(IM_EINVAL, "tokenizer '%s': model.ignore_merges (Llama-3 style) is not supported" SUPPORTED_HINT, path);
    const Json *d = json_get(model, "dropout");
    if (d && d->type == JSON_NUMBER && d->number > 0)
        return err_set(IM_EINVAL, "tokenizer '%s': model.dropout %g is not supported (encoding would be random)", path,
                       d->number);
    return IM_OK;
}

/* The pre-tokenizer, normalizer and decoder; sets *pretok. */
static int check_pipeline(const char *path, const Json *root, int *pretok) {
    const Json *pre = json_get(root, "pre_tokenizer");
    const char *pt = type_of(pre);
    if (!pt || strcmp(pt, "ByteLevel"))
        return err_set(IM_EINVAL, "tokenizer '%s': pre_tokenizer '%s' is not supported, only ByteLevel" SUPPORTED_HINT, path,
                       pt ? pt : "null");
    const Json *aps = json_get(pre, "add_prefix_space");
    if (!aps || is_true(aps))  /* absent means true in Hugging Face's defaults */
        return err_set(IM_EINVAL, "tokenizer '%s': ByteLevel add_prefix_space is not supported (encoding would add a space "
                       "that decoding keeps)", path);
    const Json *re = json_get(pre, "use_regex");
    *pretok = re && re->type == JSON_BOOL && !re->boolean ? TOK_PRETOK_NONE : TOK_PRETOK_GPT2;
    const Json *norm = json_get(root, "normalizer");
    const char *nt = type_of(norm);
    if (norm && norm->type != JSON_NULL && (!nt || strcmp(nt, "NFC")))
        return err_set(IM_EINVAL, "tokenizer '%s': normalizer '%s' is not supported (only none or NFC)", path, nt ? nt : "?");
    const Json *dec = json_get(root, "decoder");
    const char *dt = type_of(dec);
    if (dec && dec->type != JSON_NULL && (!dt || strcmp(dt, "ByteLevel")))
        return err_set(IM_EINVAL, "tokenizer '%s': decoder '%s' is not supported, only ByteLevel" SUPPORTED_HINT, path,
                       dt ? dt : "?");
    return IM_OK;
}

/* ---- vocabulary, specials, merges ------------------------------------------------------------- */

static int set_piece(Tokenizer *t, int id, const char *s, size_t n) {
    free(t->pieces[id]);
    if (!(t->pieces[id] = malloc(n ? n : 1))) return err_set(IM_ENOMEM, "tokenizer: out of memory");
    if (n) memcpy(t->pieces[id], s, n);
    t->piece_len[id] = n;
    return IM_OK;
}

static int read_id(const char *path, const Json *v, const char *what, const char *name) {
    if (!v || v->type != JSON_NUMBER || !v->is_int || v->integer < 0 || v->integer >= MAX_HF_VOCAB) {
        char snip[48];
        json_snippet(snip, sizeof snip, name, strlen(name));
        err_set(IM_EFORMAT, "tokenizer '%s': %s '%s' needs an id in 0..%d", path, what, snip, MAX_HF_VOCAB - 1);
        return -1;
    }
    return (int)v->integer;
}

/* Vocabulary size, pieces and the text -> id map. */
static int load_vocab(Tokenizer *t, const char *path, const Json *vocab, const Json *added, VocabMap *map) {
    if (!vocab || vocab->type != JSON_OBJECT) return err_set(IM_EFORMAT, "tokenizer '%s': model.vocab is not an object", path);
    if (added && added->type != JSON_ARRAY && added->type != JSON_NULL)
        return err_set(IM_EFORMAT, "tokenizer '%s': added_tokens is not an array", path);
    int max_id = -1;
    for (size_t i = 0; i < vocab->count; i++) {
        int id = read_id(path, &vocab->items[i], "vocab entry", vocab->items[i].key);
        if (id < 0) return IM_EFORMAT;
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < json_len(added); i++) {
        const Json *c = json_get(&added->items[i], "content");
        if (!c || c->type != JSON_STRING)
            return err_set(IM_EFORMAT, "tokenizer '%s': added_tokens[%zu] has no content", path, i);
        int id = read_id(path, json_get(&added->items[i], "id"), "added token", c->string);
        if (id < 0) return IM_EFORMAT;
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) return err_set(IM_EFORMAT, "tokenizer '%s': the vocabulary is empty", path);
    int rc = tok_set_byte_pieces(t, max_id + 1);
    if (rc) return rc;
    for (int b = 0; b < 256 && b <= max_id; b++) {  /* byte pieces come from the vocabulary here */
        free(t->pieces[b]);
        t->pieces[b] = NULL;
        t->piece_len[b] = 0;
    }
    map->cap = 16;
    while (map->cap < 2 * vocab->count + 2) map->cap *= 2;
    if (!(map->e = calloc(map->cap, sizeof *map->e))) return err_set(IM_ENOMEM, "tokenizer: out of memory");
    int cp[256], byte_of[324];
    byte_table(cp, byte_of);
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < vocab->count && !rc; i++) {
        const Json *v = &vocab->items[i];
        int id = (int)v->integer;
        if (t->pieces[id]) {
            char snip[48];
            json_snippet(snip, sizeof snip, v->key, v->key_len);
            rc = err_set(IM_EFORMAT, "tokenizer '%s': vocab id %d is given twice (again for '%s')", path, id, snip);
            break;
        }
        if (v->key_len > cap) {
            free(buf);
            cap = 2 * v->key_len;
            if (!(buf = malloc(cap))) rc = err_set(IM_ENOMEM, "tokenizer: out of memory");
        }
        if (rc) break;
        size_t n = byte_level_decode(v->key, v->key_len, byte_of, buf);
        rc = n || !v->key_len ? set_piece(t, id, buf, n) : set_piece(t, id, v->key, v->key_len);
        vocab_put(map, v->key, v->key_len, id);
    }
    free(buf);
    for (size_t i = 0; i < json_len(added) && !rc; i++) {
        const Json *c = json_get(&added->items[i], "content");
        rc = set_piece(t, (int)json_get(&added->items[i], "id")->integer, c->string, c->str_len);
    }
    return rc;
}

/* One merge as two token texts: "a b" or ["a", "b"]. */
static int merge_parts(const char *path, size_t i, const Json *m, const char **a, size_t *la, const char **b, size_t *lb) {
    if (m->type == JSON_STRING) {
        const char *sp = memchr(m->string, ' ', m->str_len);
        if (sp && !memchr(sp + 1, ' ', m->str_len - (size_t)(sp - m->string) - 1)) {
            *a = m->string;
            *la = (size_t)(sp - m->string);
            *b = sp + 1;
            *lb = m->str_len - *la - 1;
            return IM_OK;
        }
    } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
        *a = m->items[0].string;
        *la = m->items[0].str_len;
        *b = m->items[1].string;
        *lb = m->items[1].str_len;
        return IM_OK;
    }
    return err_set(IM_EFORMAT, "tokenizer '%s': merges[%zu] is not \"a b\" nor [\"a\", \"b\"]", path, i);
}

static int load_merges(const char *path, const Json *merges, const VocabMap *map, BpeEngine *e) {
    if (!merges || merges->type != JSON_ARRAY) return err_set(IM_EFORMAT, "tokenizer '%s': model.merges is not an array", path);
    int rc = merge_map_init(&e->merges, merges->count);
    char *cat = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < merges->count && !rc; i++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if ((rc = merge_parts(path, i, &merges->items[i], &a, &la, &b, &lb))) break;
        if (la + lb > cap) {
            free(cat);
            cap = 2 * (la + lb);
            if (!(cat = malloc(cap))) {
                rc = err_set(IM_ENOMEM, "tokenizer: out of memory");
                break;
            }
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int ia = vocab_get(map, a, la), ib = vocab_get(map, b, lb), iab = vocab_get(map, cat, la + lb);
        if (ia < 0 || ib < 0 || iab < 0) {
            char snip[64];
            json_snippet(snip, sizeof snip, ia < 0 ? a : ib < 0 ? b : cat, ia < 0 ? la : ib < 0 ? lb : la + lb);
            rc = err_set(IM_EFORMAT, "tokenizer '%s': merges[%zu] uses '%s', which is not in the vocabulary", path, i, snip);
            break;
        }
        merge_map_put(&e->merges, ia, ib, (int)i, iab);
    }
    free(cat);
    return rc;
}

static int hf_build(Tokenizer *t, const char *path, const Json *root, BpeEngine *e) {
    if (root->type != JSON_OBJECT) return err_set(IM_EFORMAT, "tokenizer '%s': not a JSON object", path);
    const Json *model = json_get(root, "model");
    int rc = check_model(path, model);
    if (!rc) rc = check_pipeline(path, root, &t->pretok);
    if (rc) return rc;
    VocabMap map = {0};
    const Json *added = json_get(root, "added_tokens");
    rc = load_vocab(t, path, json_get(model, "vocab"), added, &map);
    int cp[256], byte_of[324];
    byte_table(cp, byte_of);
    for (int b = 0; b < 256 && !rc; b++) {
        char s[2];
        size_t n = utf8_put(s, cp[b]);
        if ((e->base[b] = vocab_get(&map, s, n)) < 0)
            rc = err_set(IM_EINVAL,
                         "tokenizer '%s': the vocabulary has no token for byte 0x%02x ('%.*s'): not a byte-level BPE "
                         "vocabulary" SUPPORTED_HINT, path, b, (int)n, s);
    }
    if (!rc) rc = load_merges(path, json_get(model, "merges"), &map, e);
    t->eos = -1;
    for (size_t i = 0; i < json_len(added) && !rc; i++) {
        const Json *c = json_get(&added->items[i], "content");
        if (c->str_len == strlen(TOK_EOS_TEXT) && !memcmp(c->string, TOK_EOS_TEXT, c->str_len))
            t->eos = (int)json_get(&added->items[i], "id")->integer;
    }
    if (!rc && t->eos < 0) t->eos = vocab_get(&map, TOK_EOS_TEXT, strlen(TOK_EOS_TEXT));
    t->n_merges = rc ? 0 : (int)e->merges.n;
    free(map.e);
    return rc;
}

int tok_hf_parse(Tokenizer *t, const char *path, const char *buf, size_t n) {
    Json *root = NULL;
    int rc = json_parse(&root, buf, n);
    if (rc) return err_wrap(rc, "tokenizer '%s'", path);
    BpeEngine *e = calloc(1, sizeof *e);
    if (!e) rc = err_set(IM_ENOMEM, "tokenizer: out of memory");
    if (!rc) {
        tok_use_bpe_engine(t, e);  /* tok_free releases e from here on */
        rc = hf_build(t, path, root, e);
    }
    json_free(root);
    if (!rc) t->kind = "hf";
    return rc;
}
