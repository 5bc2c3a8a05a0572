/* test_tok.c: the tokenizers (src/tok/): byte level, trained BPE (FILE.bpe) and Hugging Face
 * tokenizer.json (byte-level BPE).
 *
 * Lossless round trips on random bytes (invalid UTF-8, NUL) for every kind; the GPT-2 chunking
 * on hand-checked cases; BPE training on the textbook corpus "aaabdaaabac" (merges aa, ab, then
 * (aa)(ab)) and, byte for byte, against tests/fixtures/tok_corpus_*.bpe, which tok_gen.py writes
 * with an independent full-recount trainer; encodings of the heap encoder against a naive GPT-2
 * bpe() loop written here; corrupted .bpe files rejected with the file and line named; the tiny
 * committed tokenizer.json (both merge layouts) against the ids tok_gen.py computed; unsupported
 * tokenizer.json models rejected.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/core/rng.h"
#include "../src/io/json.h"
#include "../src/tok/tok_impl.h"
#include "../src/tok/tokenizer.h"
#include "th.h"

#define FIX "tests/fixtures/"

static char dir[128];

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    buf[got] = 0;
    *n = got;
    return buf;
}

static void write_all(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static Tokenizer *load_ok(const char *spec) {
    Tokenizer *t = NULL;
    int rc = tok_load(&t, spec);
    TH_CHECK(rc == IM_OK && t, "tok_load(%s): %s", spec, err_msg());
    return t;
}

/* encode then decode must give the bytes back; returns the number of ids (or -1). */
static long round_trip(const Tokenizer *t, const char *text, size_t n, const char *what) {
    int *ids = NULL;
    size_t n_ids = 0;
    int rc = tok_encode(t, text, n, &ids, &n_ids);
    TH_CHECK(rc == IM_OK, "%s: encode: %s", what, err_msg());
    if (rc) return -1;
    int bad_id = 0;
    for (size_t i = 0; i < n_ids; i++) bad_id += ids[i] < 0 || ids[i] >= tok_vocab(t) || ids[i] == tok_eos(t);
    TH_CHECK(!bad_id, "%s: %d ids outside the vocabulary or eos", what, bad_id);
    char *back = NULL;
    size_t m = 0;
    rc = tok_decode(t, ids, n_ids, &back, &m);
    TH_CHECK(rc == IM_OK && m == n && (n == 0 || !memcmp(back, text, n)), "%s (%s): round trip of %zu bytes gave %zu",
             what, tok_spec(t), n, m);
    free(back);
    free(ids);
    return (long)n_ids;
}

static void random_bytes(Rng *r, char *buf, size_t n, int alphabet) {
    static const char small[] = "ab ab\n'xyz.0";
    for (size_t i = 0; i < n; i++)
        buf[i] = alphabet ? small[rng_below(r, sizeof small - 1)] : (char)rng_below(r, 256);
}

/* ---------------------------------------------------------------- byte level */

static void test_byte(void) {
    Tokenizer *t = load_ok("byte");
    if (!t) return;
    TH_CHECK(!strcmp(tok_kind(t), "byte") && tok_vocab(t) == 256 && tok_eos(t) == -1 && tok_merges(t) == 0, "byte info");
    Rng r;
    rng_seed(&r, 1, 0);
    char buf[4096];
    for (int k = 0; k < 20; k++) {
        size_t n = rng_below(&r, sizeof buf);
        random_bytes(&r, buf, n, 0);
        TH_CHECK(round_trip(t, buf, n, "byte random") == (long)n, "byte: one id per byte");
    }
    const char bad[] = "\xff\xfe\xc3(\xe2\x82\x00end";
    round_trip(t, bad, sizeof bad - 1, "byte invalid utf-8");
    int ids[2] = {65, 256};
    char *out = NULL;
    size_t m;
    TH_CHECK(tok_decode(t, ids, 2, &out, &m) == IM_EINVAL && strstr(err_msg(), "position 1"), "byte: id 256 rejected: %s",
             err_msg());
    size_t len = 0;
    TH_CHECK(tok_piece(t, 65, &len) && len == 1 && tok_piece(t, -1, &len) == NULL, "tok_piece");
    tok_free(t);
    Tokenizer *u = NULL;
    TH_CHECK(tok_load(&u, "words.txt") == IM_EINVAL && !u && strstr(err_msg(), "unknown kind"), "unknown spec: %s", err_msg());
    TH_CHECK(tok_load(&u, "") == IM_EINVAL, "empty spec");
    TH_CHECK(tok_load(&u, "/nonexistent/x.bpe") == IM_EIO && strstr(err_msg(), "/nonexistent/x.bpe"), "missing file: %s",
             err_msg());
}

/* ---------------------------------------------------------------- GPT-2 chunks */

static void check_chunks(const char *text, const char *const *want) {
    size_t n = strlen(text), i = 0;
    int k = 0, ok = 1;
    while (i < n) {
        size_t j = tok_gpt2_chunk(text, n, i);
        if (j <= i || j > n || !want[k] || strlen(want[k]) != j - i || memcmp(want[k], text + i, j - i)) {
            ok = 0;
            break;
        }
        k++;
        i = j;
    }
    TH_CHECK(ok && !want[k], "chunks of '%s' differ at chunk %d (byte %zu)", text, k, i);
}

static void test_chunks(void) {
    check_chunks("Hello world", (const char *[]){"Hello", " world", NULL});
    check_chunks("a  b", (const char *[]){"a", " ", " b", NULL});
    check_chunks("it's we'll I'M", (const char *[]){"it", "'s", " we", "'ll", " I", "'", "M", NULL});
    check_chunks("x\n\ny", (const char *[]){"x", "\n", "\n", "y", NULL});
    check_chunks("end  ", (const char *[]){"end", "  ", NULL});
    check_chunks("12ab 34?!'s", (const char *[]){"12", "ab", " 34", "?!'", "s", NULL});
    check_chunks(" \tz", (const char *[]){" ", "\t", "z", NULL});
    check_chunks("caf\xc3\xa9 \xff!", (const char *[]){"caf\xc3\xa9", " \xff", "!", NULL});
    check_chunks("'", (const char *[]){"'", NULL});
    /* chunks tile any input */
    Rng r;
    rng_seed(&r, 2, 0);
    char buf[512];
    int bad = 0;
    for (int k = 0; k < 200; k++) {
        size_t n = 1 + rng_below(&r, sizeof buf - 1);
        random_bytes(&r, buf, n, k & 1);
        for (size_t i = 0; i < n;) {
            size_t j = tok_gpt2_chunk(buf, n, i);
            if (j <= i || j > n) {
                bad++;
                break;
            }
            i = j;
        }
    }
    TH_CHECK(!bad, "%d random texts not tiled by chunks", bad);
}

/* ---------------------------------------------------------------- training */

static void test_train_textbook(void) {
    const char *text = "aaabdaaabac";
    size_t len = strlen(text);
    for (int mode = 0; mode < 2; mode++) {
        char path[256];
        snprintf(path, sizeof path, "%s/abc_%d.bpe", dir, mode);
        TokTrainOpts o = {.vocab = 300, .pretok = mode, .eos = 0};
        TokTrainStats st;
        int rc = tok_train_bpe(&text, &len, 1, &o, path, &st);
        TH_CHECK(rc == IM_OK, "train textbook: %s", err_msg());
        TH_CHECK(st.merges == 3 && st.vocab == 259 && st.bytes == 11 && st.tokens == 5, "textbook stats: %d merges, %zu tokens",
                 st.merges, st.tokens);
        char want[256];
        snprintf(want, sizeof want,
                 "implicit-bpe\nversion 1\nvocab 259\npretokenize %s\neos -1\nmerges 3\n97 97\n97 98\n256 257\n",
                 mode ? "gpt2" : "none");
        size_t n = 0;
        char *got = read_all(path, &n);
        TH_CHECK(got && n == strlen(want) && !memcmp(got, want, n), "textbook file (%s):\n%s", tok_pretok_name(mode),
                 got ? got : "(missing)");
        free(got);
        Tokenizer *t = load_ok(path);
        if (!t) continue;
        int *ids = NULL;
        size_t n_ids = 0;
        tok_encode(t, text, len, &ids, &n_ids);
        TH_CHECK(n_ids == 5 && ids[0] == 258 && ids[1] == 'd' && ids[2] == 258 && ids[3] == 'a' && ids[4] == 'c',
                 "textbook encoding");
        free(ids);
        tok_free(t);
    }
    TokTrainOpts bad = {.vocab = 255, .pretok = TOK_PRETOK_GPT2};
    TH_CHECK(tok_train_bpe(&text, &len, 1, &bad, "/dev/null", NULL) == IM_EINVAL, "vocab 255 rejected");
    bad.vocab = 256, bad.eos = 1;
    TH_CHECK(tok_train_bpe(&text, &len, 1, &bad, "/dev/null", NULL) == IM_EINVAL, "vocab 256 with eos rejected");
    /* a text boundary is a merge boundary: "ab" + "ab" as two texts has no pair "ba" */
    const char *two[2] = {"ab", "ab"};
    size_t lens[2] = {2, 2};
    char path[256];
    snprintf(path, sizeof path, "%s/two.bpe", dir);
    TokTrainOpts o = {.vocab = 260, .pretok = TOK_PRETOK_NONE};
    TokTrainStats st;
    TH_CHECK(tok_train_bpe(two, lens, 2, &o, path, &st) == IM_OK && st.merges == 1 && st.tokens == 2, "two texts: %d merges",
             st.merges);
    /* nothing to learn from: an empty text, or one without a pair that occurs twice, is an error and
     * writes no file (a merge-less .bpe would pass for a trained tokenizer) */
    snprintf(path, sizeof path, "%s/nothing.bpe", dir);
    const char *empty = "", *once = "abc";
    size_t zero = 0, three = 3;
    int rc = tok_train_bpe(&empty, &zero, 1, &o, path, &st);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "empty"), "empty text: rc %d, %s", rc, err_msg());
    rc = tok_train_bpe(&once, &three, 1, &o, path, &st);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "nothing to merge"), "no repeated pair: rc %d, %s", rc, err_msg());
    FILE *f = fopen(path, "rb");
    TH_CHECK(!f, "a tokenizer file was written for a text with nothing to learn");
    if (f) fclose(f);
}

/* Naive GPT-2 bpe(): repeatedly merge every occurrence of the lowest-ranked pair, left to right. */
static size_t naive_encode(const Tokenizer *t, const char *text, size_t n, int *out) {
    const BpeEngine *e = t->impl;
    size_t k = 0;
    int *w = malloc((n ? n : 1) * sizeof *w);
    for (size_t i = 0; i < n;) {
        size_t j = tok_pretok(t) == TOK_PRETOK_GPT2 ? tok_gpt2_chunk(text, n, i) : n, L = j - i;
        for (size_t q = 0; q < L; q++) w[q] = e->base[(unsigned char)text[i + q]];
        for (;;) {
            int best = -1, id = 0;
            for (size_t q = 0; q + 1 < L; q++) {
                int nid, r = merge_map_get(&e->merges, w[q], w[q + 1], &nid);
                if (r >= 0 && (best < 0 || r < best)) best = r, id = nid;
            }
            if (best < 0) break;
            size_t o = 0;
            for (size_t q = 0; q < L; q++) {
                if (q + 1 < L && merge_map_get(&e->merges, w[q], w[q + 1], NULL) == best) w[o++] = id, q++;
                else w[o++] = w[q];
            }
            L = o;
        }
        memcpy(out + k, w, L * sizeof *w);
        k += L;
        i = j;
    }
    free(w);
    return k;
}

static void check_against_naive(const Tokenizer *t, const char *text, size_t n, const char *what) {
    int *ids = NULL, *want = malloc((n ? n : 1) * sizeof *want);
    size_t n_ids = 0, n_want = naive_encode(t, text, n, want);
    tok_encode(t, text, n, &ids, &n_ids);
    TH_CHECK(n_ids == n_want && !memcmp(ids, want, n_ids * sizeof *ids), "%s (%s): heap encoder differs from naive bpe()",
             what, tok_spec(t));
    free(ids);
    free(want);
}

static void test_train_corpus(void) {
    size_t n;
    char *corpus = read_all(FIX "tok_corpus.txt", &n);
    TH_CHECK(corpus != NULL, "read " FIX "tok_corpus.txt");
    if (!corpus) return;
    static const struct { int pretok, vocab, eos; const char *ref; } cases[] = {
        {TOK_PRETOK_GPT2, 357, 1, FIX "tok_corpus_gpt2.bpe"},
        {TOK_PRETOK_NONE, 406, 0, FIX "tok_corpus_none.bpe"},
    };
    Rng r;
    rng_seed(&r, 3, 0);
    for (int c = 0; c < 2; c++) {
        char path[2][256];
        TokTrainStats st[2];
        const char *text = corpus;
        TokTrainOpts o = {.vocab = cases[c].vocab, .pretok = cases[c].pretok, .eos = cases[c].eos};
        for (int k = 0; k < 2; k++) {
            snprintf(path[k], sizeof path[k], "%s/corpus_%d_%d.bpe", dir, c, k);
            TH_CHECK(tok_train_bpe(&text, &n, 1, &o, path[k], &st[k]) == IM_OK, "train corpus: %s", err_msg());
        }
        size_t n0, n1, nr;
        char *f0 = read_all(path[0], &n0), *f1 = read_all(path[1], &n1), *ref = read_all(cases[c].ref, &nr);
        TH_CHECK(f0 && f1 && n0 == n1 && !memcmp(f0, f1, n0), "training is not deterministic (%s)", tok_pretok_name(o.pretok));
        TH_CHECK(f0 && ref && n0 == nr && !memcmp(f0, ref, n0), "trained %s differs from %s (tok_gen.py)", path[0],
                 cases[c].ref);
        free(f0);
        free(f1);
        free(ref);
        Tokenizer *t = load_ok(path[0]);
        if (!t) continue;
        TH_CHECK(!strcmp(tok_kind(t), "bpe") && tok_vocab(t) == o.vocab && tok_merges(t) == st[0].merges &&
                     tok_eos(t) == (o.eos ? o.vocab - 1 : -1) && tok_pretok(t) == o.pretok,
                 "bpe info: vocab %d eos %d", tok_vocab(t), tok_eos(t));
        long nt = round_trip(t, corpus, n, "corpus");
        TH_CHECK(nt == (long)st[0].tokens && nt < (long)n * 3 / 5, "corpus: %ld tokens, training said %zu (of %zu bytes)", nt,
                 st[0].tokens, n);
        check_against_naive(t, corpus, n, "corpus");
        char buf[3000];
        for (int k = 0; k < 30; k++) {
            size_t m = rng_below(&r, sizeof buf);
            random_bytes(&r, buf, m, k & 1);
            round_trip(t, buf, m, "bpe random");
            check_against_naive(t, buf, m, "bpe random");
        }
        if (o.eos) {
            size_t len = 0;
            const char *p = tok_piece(t, tok_eos(t), &len);
            TH_CHECK(p && len == strlen(TOK_EOS_TEXT) && !memcmp(p, TOK_EOS_TEXT, len), "eos piece");
        }
        tok_free(t);
    }
    free(corpus);
}

/* Training on random text over a small alphabet: many merges, long tokens, overlapping pairs. */
static void test_train_random(void) {
    Rng r;
    rng_seed(&r, 4, 0);
    char *buf = malloc(20000);
    for (int k = 0; k < 4; k++) {
        size_t n = 20000;
        random_bytes(&r, buf, n, 1);
        if (k == 3) memset(buf + 100, 'a', 5000);
        const char *text = buf;
        char path[256];
        snprintf(path, sizeof path, "%s/random_%d.bpe", dir, k);
        TokTrainOpts o = {.vocab = 600, .pretok = k & 1 ? TOK_PRETOK_GPT2 : TOK_PRETOK_NONE};
        TokTrainStats st;
        TH_CHECK(tok_train_bpe(&text, &n, 1, &o, path, &st) == IM_OK, "train random: %s", err_msg());
        Tokenizer *t = load_ok(path);
        if (!t) continue;
        TH_CHECK(round_trip(t, buf, n, "random corpus") == (long)st.tokens, "random corpus: tokens differ from training");
        check_against_naive(t, buf, n, "random corpus");
        tok_free(t);
    }
    free(buf);
}

/* ---------------------------------------------------------------- corrupted .bpe files */

static void expect_bad(const char *name, const char *content, const char *line, const char *phrase) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.bpe", dir, name);
    write_all(path, content, strlen(content));
    Tokenizer *t = NULL;
    int rc = tok_load(&t, path);
    const char *msg = err_msg();
    TH_CHECK(rc == IM_EFORMAT && !t && strstr(msg, path) && strstr(msg, line) && strstr(msg, phrase),
             "%s: rc %d, message '%s' (want '%s' and '%s')", name, rc, msg, line, phrase);
    tok_free(t);
}

static void test_bpe_corrupt(void) {
    const char *head = "implicit-bpe\nversion 1\nvocab 259\npretokenize gpt2\neos -1\nmerges 3\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n256 257\n", head);
    char path[256];
    snprintf(path, sizeof path, "%s/good.bpe", dir);
    write_all(path, buf, strlen(buf));
    Tokenizer *t = load_ok(path);
    tok_free(t);
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n", head);
    expect_bad("truncated", buf, "line 9", "ends after 2 of 3 merges");
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n256 2", head);
    expect_bad("cut_line", buf, "line 9", "truncated");
    expect_bad("short_header", "implicit-bpe\nversion 1\nvocab 259\n", "line 4", "pretokenize");
    expect_bad("empty", "", "line 1", "not a BPE file");
    expect_bad("magic", "implicit-bpf\nversion 1\n", "line 1", "not a BPE file");
    expect_bad("version", "implicit-bpe\nversion 2\nvocab 256\npretokenize gpt2\neos -1\nmerges 0\n", "line 2", "newer");
    expect_bad("pretok", "implicit-bpe\nversion 1\nvocab 256\npretokenize bert\neos -1\nmerges 0\n", "line 4", "gpt2 or none");
    expect_bad("count", "implicit-bpe\nversion 1\nvocab 260\npretokenize gpt2\neos -1\nmerges 3\n", "line 6", "vocab 260 !=");
    expect_bad("eos", "implicit-bpe\nversion 1\nvocab 257\npretokenize gpt2\neos 3\nmerges 0\n", "line 5", "eos id");
    expect_bad("number", "implicit-bpe\nversion 1\nvocab 2x6\n", "line 3", "needs an integer");
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n256 300\n", head);
    expect_bad("range", buf, "line 9", "outside the vocabulary");
    snprintf(buf, sizeof buf, "%s97 97\n97 258\n256 257\n", head);
    expect_bad("later", buf, "line 8", "defined only later");
    snprintf(buf, sizeof buf, "%s97 97\n97 257\n256 257\n", head);
    expect_bad("self", buf, "line 8", "defined only later");
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n97 97\n", head);
    expect_bad("duplicate", buf, "line 9", "repeats the pair 97 97 of line 7");
    snprintf(buf, sizeof buf, "%s97 97\n97 98\n256 257\n1 2\n", head);
    expect_bad("extra", buf, "line 10", "unexpected content");
    snprintf(buf, sizeof buf, "%s97 97\n97  98\n256 257\n", head);
    expect_bad("spaces", buf, "line 8", "two non-negative ids");
    snprintf(buf, sizeof buf, "%s97 -97\n97 98\n256 257\n", head);
    expect_bad("negative", buf, "line 7", "two non-negative ids");
}

/* ---------------------------------------------------------------- tokenizer.json */

static char *hex_decode(const char *hex, size_t *n) {
    size_t m = strlen(hex) / 2;
    char *out = malloc(m + 1);
    for (size_t i = 0; i < m; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    *n = m;
    return out;
}

static void test_hf_fixture(void) {
    size_t len;
    char *text = read_all(FIX "tok_tiny_cases.json", &len);
    Json *cases = NULL;
    TH_CHECK(text && json_parse(&cases, text, len) == IM_OK && cases->type == JSON_ARRAY, "cases: %s", err_msg());
    free(text);
    if (!cases) return;
    const char *specs[2] = {FIX "tok_tiny.json", FIX "tok_tiny_pairs.json"};
    Rng r;
    rng_seed(&r, 5, 0);
    for (int s = 0; s < 2; s++) {
        Tokenizer *t = load_ok(specs[s]);
        if (!t) continue;
        TH_CHECK(!strcmp(tok_kind(t), "hf") && tok_vocab(t) == 321 && tok_eos(t) == 320 && tok_merges(t) == 64 &&
                     tok_pretok(t) == TOK_PRETOK_GPT2,
                 "hf info: vocab %d eos %d merges %d", tok_vocab(t), tok_eos(t), tok_merges(t));
        for (size_t c = 0; c < cases->count; c++) {
            const Json *cs = &cases->items[c], *want = json_get(cs, "ids");
            size_t n;
            char *bytes = hex_decode(json_get(cs, "hex")->string, &n);
            int *ids = NULL;
            size_t n_ids = 0;
            tok_encode(t, bytes, n, &ids, &n_ids);
            int same = n_ids == want->count;
            for (size_t i = 0; same && i < n_ids; i++) same = ids[i] == want->items[i].integer;
            TH_CHECK(same, "%s: case %zu encodes to %zu ids, want %zu (or different ids)", specs[s], c, n_ids, want->count);
            round_trip(t, bytes, n, "hf case");
            free(ids);
            free(bytes);
        }
        int eos = tok_eos(t);
        char *out = NULL;
        size_t m = 0;
        TH_CHECK(tok_decode(t, &eos, 1, &out, &m) == IM_OK && m == 13 && !memcmp(out, TOK_EOS_TEXT, 13), "hf eos decodes");
        free(out);
        size_t plen;
        const char *p = tok_piece(t, 0, &plen);
        TH_CHECK(p && plen == 1 && p[0] == '!', "hf id 0 is '!' (GPT-2 byte order)");
        char buf[2000];
        for (int k = 0; k < 20; k++) {
            size_t n = rng_below(&r, sizeof buf);
            random_bytes(&r, buf, n, k & 1);
            round_trip(t, buf, n, "hf random");
            check_against_naive(t, buf, n, "hf random");
        }
        tok_free(t);
    }
    json_free(cases);
}

static void expect_hf_bad(const char *name, const char *json, int code, const char *phrase) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    write_all(path, json, strlen(json));
    Tokenizer *t = NULL;
    int rc = tok_load(&t, path);
    TH_CHECK(rc == code && !t && strstr(err_msg(), path) && strstr(err_msg(), phrase), "%s: rc %d, message '%s' (want '%s')",
             name, rc, err_msg(), phrase);
    tok_free(t);
}

#define BL "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}"

static void test_hf_reject(void) {
    expect_hf_bad("wordpiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", IM_EINVAL,
                  "'WordPiece' is not supported");
    expect_hf_bad("unigram", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", IM_EINVAL, "'Unigram' is not supported");
    expect_hf_bad("metaspace", "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\"}}", IM_EINVAL,
                  "pre_tokenizer 'Metaspace'");
    expect_hf_bad("no_pre", "{\"pre_tokenizer\": null, \"model\": {\"type\": \"BPE\"}}", IM_EINVAL, "pre_tokenizer 'null'");
    expect_hf_bad("prefix", "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}, \"model\": {}}",
                  IM_EINVAL, "add_prefix_space");
    expect_hf_bad("fallback", "{" BL ", \"model\": {\"type\": \"BPE\", \"byte_fallback\": true}}", IM_EINVAL, "byte_fallback");
    expect_hf_bad("suffix", "{" BL ", \"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\"}}", IM_EINVAL,
                  "end_of_word_suffix");
    expect_hf_bad("lower", "{" BL ", \"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\"}}", IM_EINVAL,
                  "normalizer 'Lowercase'");
    expect_hf_bad("decoder", "{" BL ", \"decoder\": {\"type\": \"WordPiece\"}, \"model\": {\"type\": \"BPE\"}}", IM_EINVAL,
                  "decoder 'WordPiece'");
    expect_hf_bad("no_model", "{" BL "}", IM_EFORMAT, "no \"model\"");
    expect_hf_bad("bytes", "{" BL ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}",
                  IM_EINVAL, "no token for byte");
    expect_hf_bad("id", "{" BL ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", IM_EFORMAT,
                  "vocab entry 'a' needs an id");
    expect_hf_bad("syntax", "{\"model\": {\"type\": \"BPE\",}}", IM_EFORMAT, "json:");
    /* a merge naming a token that is not in the vocabulary: take the fixture and break one merge */
    size_t n;
    char *good = read_all(FIX "tok_tiny.json", &n);
    char *at = good ? strstr(good, "\"h e\"") : NULL;
    TH_CHECK(at != NULL, "fixture has the merge \"h e\"");
    if (at) {
        at[1] = 'Q';
        expect_hf_bad("merge", good, IM_EFORMAT, "merges[1] uses 'Qe'");
        at[1] = 'h';
    }
    /* use_regex false: no GPT-2 split, merges may cross words */
    char *re = good ? strstr(good, "\"use_regex\": true") : NULL;
    TH_CHECK(re && re < strstr(good, "\"post_processor\""), "fixture pre_tokenizer has use_regex");
    if (re) {
        const char *on = "\"use_regex\": true", *off = "\"use_regex\": false";
        size_t pre = (size_t)(re - good);
        char *edited = malloc(n + 8);
        memcpy(edited, good, pre);
        strcpy(edited + pre, off);
        strcat(edited + pre, re + strlen(on));
        char path[256];
        snprintf(path, sizeof path, "%s/noregex.json", dir);
        write_all(path, edited, strlen(edited));
        free(edited);
        Tokenizer *t = load_ok(path);
        if (t) {
            TH_CHECK(tok_pretok(t) == TOK_PRETOK_NONE, "use_regex false -> no pre-tokenisation");
            const char *s = "the keeper's log, the fog";
            round_trip(t, s, strlen(s), "hf no regex");
            check_against_naive(t, s, strlen(s), "hf no regex");
            tok_free(t);
        }
    }
    free(good);
}

int main(void) {
    th_name = "test_tok";
    snprintf(dir, sizeof dir, "/tmp/implicit-test-tok-%d", (int)getpid());
    char cmd[200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    TH_CHECK(system(cmd) == 0, "mkdir");
    test_byte();
    test_chunks();
    test_train_textbook();
    test_train_corpus();
    test_train_random();
    test_bpe_corrupt();
    test_hf_fixture();
    test_hf_reject();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(system(cmd) == 0, "cleanup");
    return th_done();
}
