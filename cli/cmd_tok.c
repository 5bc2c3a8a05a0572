/* cmd_tok.c: `implicit tokenizer train | encode | decode | info`.
 *
 *   implicit tokenizer train TEXT... --vocab N --out FILE.bpe [--pretokenize gpt2|none] [--eos 0|1]
 *   implicit tokenizer encode SPEC [--text S | --file F] [--stats 1]   (neither: stdin)
 *   implicit tokenizer decode SPEC [IDS...]                            (no ids: read them from stdin)
 *   implicit tokenizer info SPEC
 *
 * SPEC is "byte", FILE.bpe or FILE.json (src/tok/tokenizer.h). encode prints the ids on one line,
 * decode writes the exact bytes (no newline added), so `encode | decode` reproduces the input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/tok/tokenizer.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

#define TOK_SPEC_HELP                                                                                 \
    "SPEC: byte (256 byte ids, no file) | FILE.bpe (from `tokenizer train`) | FILE.json (Hugging Face\n" \
    "      tokenizer.json, byte-level BPE as GPT-2 / GPT-NeoX)\n"

/* A whole file (or stdin for "-") into memory. */
static int slurp(const char *path, char **buf, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return err_set(IM_EIO, "cannot open '%s': %s", path, strerror(errno));
    int rc = fs_read_all(f, 0, buf, n);
    if (f != stdin) fclose(f);
    return rc ? err_wrap(rc, "cannot read '%s'", path) : IM_OK;
}

typedef struct {
    long long vocab, eos;
    const char *out, *pretokenize;
} TokTrainArgs;

static const OptSpec TOK_TRAIN_OPTS[] = {
    OPT(TokTrainArgs, vocab, 256, 1 << 22, "N", "vocabulary size: N - 256 merges (N - 257 with --eos 1)"),
    OPT(TokTrainArgs, out, 0, 0, "FILE.bpe", "the merges file"),
    OPT(TokTrainArgs, pretokenize, 0, 0, "S", "gpt2: merges stay inside GPT-2-style chunks | none: they cross any boundary"),
    OPT(TokTrainArgs, eos, 0, 1, "0|1", "1 reserves the last id for <|endoftext|>"),
};
static const CmdSpec tok_train_cmd = {
    "tokenizer train", "TEXT... --vocab N --out FILE.bpe [options]",
    "learn byte-level BPE merges from text files",
    "GPT-2-style chunks are words, numbers, punctuation and whitespace.\n",
    TOK_TRAIN_OPTS, (int)(sizeof TOK_TRAIN_OPTS / sizeof *TOK_TRAIN_OPTS), NULL, 0, 1, -1};

static int cmd_train_tok(int argc, char **argv) {
    TokTrainArgs a = {0, 0, NULL, "gpt2"};
    OptArgs cl;
    int rc;
    if (!opts_get(&tok_train_cmd, &a, argc, argv, &cl, &rc)) return rc;
    TokTrainOpts o = {.vocab = (int)a.vocab, .pretok = TOK_PRETOK_GPT2, .eos = (int)a.eos};
    const char *out = a.out, **files = (const char **)cl.pos;
    int n_files = cl.n_pos;
    rc = tok_pretok_parse(a.pretokenize, &o.pretok);
    if (!rc && !o.vocab) rc = err_set(IM_EINVAL, "`tokenizer train` needs --vocab N (e.g. 1280 = 256 bytes + 1024 merges)");
    if (!rc && !out) rc = err_set(IM_EINVAL, "`tokenizer train` needs --out FILE.bpe");
    if (!rc && (strlen(out) < 4 || strcmp(out + strlen(out) - 4, ".bpe")))
        rc = err_set(IM_EINVAL, "the output '%s' must end in .bpe (the spec names the kind by its extension)", out);
    if (rc) {
        opts_free(&cl);
        return fail("implicit tokenizer train data.txt --vocab 1280 --out data.bpe");
    }
    char **texts = calloc((size_t)n_files, sizeof *texts);
    size_t *lens = calloc((size_t)n_files, sizeof *lens);
    for (int i = 0; i < n_files && !rc; i++) rc = slurp(files[i], &texts[i], &lens[i]);
    TokTrainStats st;
    if (!rc) rc = tok_train_bpe((const char *const *)texts, lens, n_files, &o, out, &st);
    for (int i = 0; i < n_files; i++) free(texts[i]);
    free(texts);
    free(lens);
    opts_free(&cl);
    if (rc)
        return fail(rc == IM_EIO      ? "are the files there and the output folder writable?"
                    : rc == IM_EINVAL ? "train on more text: a merge needs a pair of tokens that occurs at least twice"
                                      : NULL);
    printf("wrote %s: %d merges, vocab %d, pretokenize %s, eos %d\n", out, st.merges, st.vocab, tok_pretok_name(o.pretok),
           o.eos ? st.vocab - 1 : -1);
    printf("text: %zu bytes, %zu chunks (%zu distinct) -> %zu tokens, %.3f bytes/token; trained in %.2f s\n", st.bytes,
           st.chunks, st.unique, st.tokens, st.tokens ? (double)st.bytes / (double)st.tokens : 0.0, st.seconds);
    if (st.vocab < o.vocab)
        printf("note: stopped at vocab %d of %d: no pair occurs twice any more (the text is too small)\n", st.vocab, o.vocab);
    return 0;
}

typedef struct {
    const char *text, *file;
    long long stats;
} EncodeArgs;

static const OptSpec ENCODE_OPTS[] = {
    OPT(EncodeArgs, text, 0, 0, "S", "the text to encode"),
    OPT(EncodeArgs, file, 0, 0, "F", "a file to encode (- = stdin; neither --text nor --file: stdin)"),
    OPT(EncodeArgs, stats, 0, 1, "0|1", "1 adds bytes/token on stderr"),
};
static const CmdSpec encode_cmd = {"tokenizer encode", "SPEC [--text S | --file F] [options]",
                                   "print the ids of a text on one line", TOK_SPEC_HELP, ENCODE_OPTS, 3, NULL, 0, 1, 1};

static int cmd_encode(int argc, char **argv) {
    EncodeArgs a = {0};
    OptArgs cl;
    int rc;
    if (!opts_get(&encode_cmd, &a, argc, argv, &cl, &rc)) return rc;
    const char *spec = cl.pos[0], *text = a.text, *file = a.file;
    int stats = (int)a.stats;
    opts_free(&cl);
    if (text && file) rc = err_set(IM_EINVAL, "give --text or --file, not both");
    if (rc) return fail("see `implicit tokenizer encode --help`");
    Tokenizer *t;
    if (tok_load(&t, spec)) return fail("SPEC is byte, FILE.bpe or FILE.json");
    char *buf = NULL;
    size_t n = 0;
    if (text) n = strlen(text);
    else rc = slurp(file ? file : "-", &buf, &n);
    int *ids = NULL;
    size_t n_ids = 0;
    if (!rc) rc = tok_encode(t, text ? text : buf, n, &ids, &n_ids);
    if (!rc) {
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        if (stats)
            fprintf(stderr, "%zu bytes -> %zu tokens (%.3f bytes/token)\n", n, n_ids, n_ids ? (double)n / (double)n_ids : 0.0);
    }
    free(ids);
    free(buf);
    tok_free(t);
    return rc ? fail(NULL) : 0;
}

/* Ids from s: integers separated by spaces, tabs, newlines or commas. */
static int parse_ids(const char *s, int **ids, size_t *n, size_t *cap) {
    for (const char *p = s;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) return IM_OK;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7FFFFFFF || (*end && !strchr(" ,\t\r\n", *end)))
            return err_set(IM_EINVAL, "'%.20s' is not a token id", p);
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 1024;
            int *nb = realloc(*ids, *cap * sizeof *nb);
            if (!nb) return err_set(IM_ENOMEM, "out of memory");
            *ids = nb;
        }
        (*ids)[(*n)++] = (int)v;
        p = end;
    }
}

static const CmdSpec decode_cmd = {"tokenizer decode", "SPEC [IDS...]",
                                   "write the exact bytes of token ids (arguments, or stdin when none)",
                                   TOK_SPEC_HELP "IDS: integers separated by spaces or commas\n", NULL, 0, NULL, 0, 1, -1};

static int cmd_decode(int argc, char **argv) {
    OptArgs cl;
    int rc;
    if (!opts_get(&decode_cmd, NULL, argc, argv, &cl, &rc)) return rc;
    Tokenizer *t;
    if (tok_load(&t, cl.pos[0])) {
        opts_free(&cl);
        return fail("SPEC is byte, FILE.bpe or FILE.json");
    }
    int *ids = NULL;
    size_t n = 0, cap = 0;
    argc = cl.n_pos;
    argv = cl.pos;
    if (argc == 1) {
        char *buf;
        size_t len;
        if (!(rc = slurp("-", &buf, &len))) {
            rc = memchr(buf, 0, len) ? err_set(IM_EINVAL, "stdin holds a NUL byte, not token ids")
                                     : parse_ids(buf, &ids, &n, &cap);
            free(buf);
        }
    }
    for (int i = 1; i < argc && !rc; i++) rc = parse_ids(argv[i], &ids, &n, &cap);
    opts_free(&cl);
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = tok_decode(t, ids, n, &text, &len);
    if (!rc && len && fwrite(text, 1, len, stdout) != len) rc = err_set(IM_EIO, "cannot write the text: %s", strerror(errno));
    free(text);
    free(ids);
    tok_free(t);
    return rc ? fail(NULL) : 0;
}

static const CmdSpec tok_info_cmd = {"tokenizer info", "SPEC", "kind, vocabulary, end-of-text id, merges", TOK_SPEC_HELP,
                                     NULL, 0, NULL, 0, 1, 1};

static int cmd_tok_info(int argc, char **argv) {
    OptArgs cl;
    int rc;
    if (!opts_get(&tok_info_cmd, NULL, argc, argv, &cl, &rc)) return rc;
    Tokenizer *t;
    rc = tok_load(&t, cl.pos[0]);
    opts_free(&cl);
    if (rc) return fail("SPEC is byte, FILE.bpe or FILE.json");
    printf("spec         %s\nkind         %s\nvocab        %d\n", tok_spec(t), tok_kind(t), tok_vocab(t));
    size_t len = 0;
    const char *eos = tok_eos(t) >= 0 ? tok_piece(t, tok_eos(t), &len) : NULL;
    if (eos) printf("eos          %d (%.*s)\n", tok_eos(t), (int)len, eos);
    else printf("eos          -1 (none)\n");
    printf("merges       %d\npretokenize  %s\n", tok_merges(t), tok_pretok_name(tok_pretok(t)));
    tok_free(t);
    return 0;
}

const CmdSpec tokenizer_cmd = {"tokenizer", "train|encode|decode|info ...",
                               "byte-level BPE: learn merges, use a .bpe or tokenizer.json", NULL, NULL, 0, NULL, 0, 0, -1};

int cmd_tokenizer(int argc, char **argv) {
    static const OptCommand cmds[] = {{&tok_train_cmd, cmd_train_tok}, {&encode_cmd, cmd_encode},
                                      {&decode_cmd, cmd_decode}, {&tok_info_cmd, cmd_tok_info}};
    return opts_dispatch("tokenizer", cmds, 4,
                         TOK_SPEC_HELP "encode | decode reproduces the input: decode writes the exact bytes, no newline added.\n",
                         argc, argv);
}
