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

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/tok/tokenizer.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static void tok_help(FILE *f) {
    fprintf(f,
            "usage: implicit tokenizer train TEXT... --vocab N --out FILE.bpe [--pretokenize gpt2|none] [--eos 0|1]\n"
            "       implicit tokenizer encode SPEC [--text S | --file F] [--stats 1]\n"
            "       implicit tokenizer decode SPEC [IDS...]\n"
            "       implicit tokenizer info SPEC\n"
            "SPEC: byte (256 byte ids, no file) | FILE.bpe (from `tokenizer train`) | FILE.json (Hugging Face\n"
            "      tokenizer.json, byte-level BPE as GPT-2 / GPT-NeoX)\n"
            "train: learns N - 256 merges (N - 257 with --eos 1, which reserves the last id for <|endoftext|>);\n"
            "       --pretokenize gpt2 (default) keeps merges inside GPT-2-style chunks (words, numbers,\n"
            "       punctuation, whitespace), none lets them cross any boundary\n"
            "encode: reads --text, --file or stdin and prints the ids; --stats 1 adds bytes/token on stderr\n"
            "decode: ids as arguments (spaces or commas allowed) or on stdin; writes the exact bytes\n");
}

/* A whole file (or stdin for "-") into memory. */
static int slurp(const char *path, char **buf, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return err_set(IM_EIO, "cannot open '%s': %s", path, strerror(errno));
    int rc = fs_read_all(f, 0, buf, n);
    if (f != stdin) fclose(f);
    return rc ? err_wrap(rc, "cannot read '%s'", path) : IM_OK;
}

static int parse_int_opt(const char *opt, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return err_set(IM_EINVAL, "option '%s': expected an integer in %ld..%ld, got '%s'", opt, lo, hi, s);
    *out = (int)v;
    return IM_OK;
}

static int cmd_train_tok(int argc, char **argv) {
    TokTrainOpts o = {.vocab = 0, .pretok = TOK_PRETOK_GPT2, .eos = 0};
    const char *out = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int n_files = 0, rc = IM_OK;
    for (int i = 0; i < argc && !rc; i++) {
        if (strncmp(argv[i], "--", 2)) {
            files[n_files++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            rc = err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
            break;
        }
        const char *k = argv[i], *v = argv[++i];
        if (!strcmp(k, "--vocab")) rc = parse_int_opt(k, v, 256, 1 << 22, &o.vocab);
        else if (!strcmp(k, "--out")) out = v;
        else if (!strcmp(k, "--pretokenize")) rc = tok_pretok_parse(v, &o.pretok);
        else if (!strcmp(k, "--eos")) rc = parse_int_opt(k, v, 0, 1, &o.eos);
        else rc = err_set(IM_EINVAL, "unknown option '%s'", k);
    }
    if (!rc && !n_files) rc = err_set(IM_EINVAL, "`tokenizer train` needs at least one text file");
    if (!rc && !o.vocab) rc = err_set(IM_EINVAL, "`tokenizer train` needs --vocab N (e.g. 1280 = 256 bytes + 1024 merges)");
    if (!rc && !out) rc = err_set(IM_EINVAL, "`tokenizer train` needs --out FILE.bpe");
    if (!rc && (strlen(out) < 4 || strcmp(out + strlen(out) - 4, ".bpe")))
        rc = err_set(IM_EINVAL, "the output '%s' must end in .bpe (the spec names the kind by its extension)", out);
    if (rc) {
        free(files);
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
    free(files);
    if (rc) return fail(rc == IM_EIO ? "are the files there and the output folder writable?" : NULL);
    printf("wrote %s: %d merges, vocab %d, pretokenize %s, eos %d\n", out, st.merges, st.vocab, tok_pretok_name(o.pretok),
           o.eos ? st.vocab - 1 : -1);
    printf("text: %zu bytes, %zu chunks (%zu distinct) -> %zu tokens, %.3f bytes/token; trained in %.2f s\n", st.bytes,
           st.chunks, st.unique, st.tokens, st.tokens ? (double)st.bytes / (double)st.tokens : 0.0, st.seconds);
    if (st.vocab < o.vocab)
        printf("note: stopped at vocab %d of %d: no pair occurs twice any more (the text is too small)\n", st.vocab, o.vocab);
    return 0;
}

static int cmd_encode(int argc, char **argv) {
    if (argc < 1 || !strncmp(argv[0], "--", 2)) {
        err_set(IM_EINVAL, "`tokenizer encode` needs a SPEC first");
        return fail("implicit tokenizer encode byte --text 'hello'");
    }
    const char *text = NULL, *file = NULL;
    int stats = 0, rc = IM_OK;
    for (int i = 1; i < argc && !rc; i += 2) {
        if (i + 1 >= argc) rc = err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
        else if (!strcmp(argv[i], "--text")) text = argv[i + 1];
        else if (!strcmp(argv[i], "--file")) file = argv[i + 1];
        else if (!strcmp(argv[i], "--stats")) rc = parse_int_opt("--stats", argv[i + 1], 0, 1, &stats);
        else rc = err_set(IM_EINVAL, "unknown option '%s'", argv[i]);
    }
    if (!rc && text && file) rc = err_set(IM_EINVAL, "give --text or --file, not both");
    if (rc) return fail("see `implicit tokenizer --help`");
    Tokenizer *t;
    if (tok_load(&t, argv[0])) return fail("SPEC is byte, FILE.bpe or FILE.json");
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

static int cmd_decode(int argc, char **argv) {
    if (argc < 1) {
        err_set(IM_EINVAL, "`tokenizer decode` needs a SPEC first");
        return fail("implicit tokenizer decode byte 104 105");
    }
    Tokenizer *t;
    if (tok_load(&t, argv[0])) return fail("SPEC is byte, FILE.bpe or FILE.json");
    int *ids = NULL, rc = IM_OK;
    size_t n = 0, cap = 0;
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
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = tok_decode(t, ids, n, &text, &len);
    if (!rc && len && fwrite(text, 1, len, stdout) != len) rc = err_set(IM_EIO, "cannot write the text: %s", strerror(errno));
    free(text);
    free(ids);
    tok_free(t);
    return rc ? fail(NULL) : 0;
}

static int cmd_tok_info(int argc, char **argv) {
    if (argc != 1) {
        err_set(IM_EINVAL, "`tokenizer info` takes exactly one SPEC");
        return fail("implicit tokenizer info data.bpe");
    }
    Tokenizer *t;
    if (tok_load(&t, argv[0])) return fail("SPEC is byte, FILE.bpe or FILE.json");
    printf("spec         %s\nkind         %s\nvocab        %d\n", tok_spec(t), tok_kind(t), tok_vocab(t));
    size_t len = 0;
    const char *eos = tok_eos(t) >= 0 ? tok_piece(t, tok_eos(t), &len) : NULL;
    if (eos) printf("eos          %d (%.*s)\n", tok_eos(t), (int)len, eos);
    else printf("eos          -1 (none)\n");
    printf("merges       %d\npretokenize  %s\n", tok_merges(t), tok_pretok_name(tok_pretok(t)));
    tok_free(t);
    return 0;
}

int cmd_tok(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        tok_help(argc < 1 ? stderr : stdout);
        return argc < 1;
    }
    if (!strcmp(argv[0], "train")) return cmd_train_tok(argc - 1, argv + 1);
    if (!strcmp(argv[0], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "info")) return cmd_tok_info(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown tokenizer command '%s'\nhint: train | encode | decode | info\n", argv[0]);
    return 1;
}
