/* cmd_data.c: `implicit data prepare`, `implicit data dump` and `implicit data show`.
 *
 *   implicit data prepare TEXT... --out FILE.tok [--tokenizer byte] [--val_frac 0.1] [--val_split tail|per_file]
 *   implicit data dump OUT [--task word] [--group A5] [--p 0.9] [--len 64] [--n 1000]
 *                          [--split eval|train] [--batch 32] [--start 0] [--seed S] [any task key]
 *   implicit data show FILE [--rows 3] [--cols 32]
 *
 * Training never needs these files (tasks are generated on the fly from the seed); a dump is for
 * inspecting the data or feeding another program. The format is in src/data/datafile.h. The eval
 * split holds samples start..start+N-1 of the eval stream at length --len and identity
 * probability --p; the train split holds the rows of steps start, start+1, ... in order, --batch
 * rows per step, exactly the batches `implicit train` draws with that batch size.
 * `prepare` is different: it makes the token file the language-modelling task (task lm) trains on
 * (format in src/data/textdata.h); `show` also reads token files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/data/datafile.h"
#include "../src/data/task.h"
#include "../src/data/textdata.h"
#include "../src/tok/tokenizer.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static void data_help(FILE *f) {
    TaskCfg c;
    task_cfg_defaults(&c);
    fprintf(f,
            "usage: implicit data prepare TEXT... --out FILE.tok [--tokenizer byte] [--val_frac 0.1]\n"
            "                             [--val_split tail|per_file]   tokenize text files for task lm\n"
            "       implicit data dump OUT [--key value ...]   write task rows to a binary file\n"
            "       implicit data show FILE [--rows 3] [--cols 32]   check a dump or token file and print its start\n"
            "prepare options:\n"
            "  --out FILE       the token file (written atomically)\n"
            "  --tokenizer S    byte (default: 256 ids, no files) | FILE.bpe (`implicit tokenizer train`) |\n"
            "                   FILE.json (a Hugging Face tokenizer.json); files are joined with its end-of-text token\n"
            "  --val_frac F     share of the tokens held out for validation, in [0, 1) (default 0.1)\n"
            "  --val_split S    tail (default): the last F of all tokens | per_file: the last F of each file\n"
            "dump options:\n"
            "  --len L        task length (default: train_len; ios rows have L+1 tokens with BOS)\n"
            "  --n N          rows (default 1000)\n"
            "  --split S      eval (default): eval-stream samples at --len and --p; train: training batches\n"
            "  --batch B      train split: rows per optimizer step (default 32)\n"
            "  --start I      first eval sample index, or first training step (default 0)\n"
            "task keys:\n");
    keytab_print(&task_keytab, &c, f);
    fprintf(f, "dump file: \"IMPLDATA\", u32 version, N, T, V, flags, then N*T u16 inputs and N*T u16 targets\n"
               "(little-endian; 0xFFFF = target not scored)\n"
               "token file: \"IMPLTOK\\0\", u32 version, vocab, width (2|4), u64 n_train, n_val, u32 spec length, the\n"
               "tokenizer spec, then the train and validation tokens (little-endian; docs/formats.md)\n");
}

/* A non-negative integer option value, with a message naming the option. */
static int parse_count(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return err_set(IM_EINVAL, "option '--%s': expected an integer in %lld..%lld, got '%s'", opt, lo, hi, s);
    *out = v;
    return IM_OK;
}

typedef struct {
    const char *out;
    long long len, n, batch, start;
    int train;
    TaskCfg cfg;
} DumpArgs;

static int parse_dump(DumpArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->len = -1;
    a->n = 1000;
    a->batch = 32;
    task_cfg_defaults(&a->cfg);
    if (argc < 1 || !strncmp(argv[0], "--", 2)) return err_set(IM_EINVAL, "`implicit data dump` needs an output path first");
    a->out = argv[0];
    for (int i = 1; i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2)) return err_set(IM_EINVAL, "unexpected argument '%s' (options are --key value)", argv[i]);
        if (i + 1 >= argc) return err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
        const char *k = argv[i] + 2, *v = argv[i + 1];
        int rc;
        if (!strcmp(k, "len")) rc = parse_count(k, v, 1, 1 << 20, &a->len);
        else if (!strcmp(k, "n")) rc = parse_count(k, v, 1, 0xFFFFFFFFLL, &a->n);
        else if (!strcmp(k, "batch")) rc = parse_count(k, v, 1, 1 << 20, &a->batch);
        else if (!strcmp(k, "start")) rc = parse_count(k, v, 0, 1LL << 53, &a->start);
        else if (!strcmp(k, "split")) {
            a->train = !strcmp(v, "train");
            rc = a->train || !strcmp(v, "eval") ? IM_OK : err_set(IM_EINVAL, "option '--split': '%s' is not train or eval", v);
        } else {
            rc = task_cfg_set(&a->cfg, k, v);
        }
        if (rc) return rc;
    }
    /* the train split draws at train_len, so --len sets it */
    if (a->len > 0 && a->train) {
        char s[32];
        snprintf(s, sizeof s, "%lld", a->len);
        task_cfg_set(&a->cfg, "train_len", s);
    }
    return IM_OK;
}

/* Generate the rows in chunks and store them; pure functions of the index, so order is free. */
static int dump_rows(const Task *t, const DumpArgs *a, DataWriter *w, int len, int T) {
    long long chunk = (1 << 20) / T > 0 ? (1 << 20) / T : 1;
    int *ids = xmalloc(sizeof(int) * (size_t)(chunk * T)), *tg = xmalloc(sizeof(int) * (size_t)(chunk * T));
    int rc = IM_OK;
    for (long long r0 = 0; r0 < a->n && !rc; r0 += chunk) {
        long long nr = a->n - r0 < chunk ? a->n - r0 : chunk;
        if (a->train) {
            /* row i of the file = row i % batch of step start + i / batch */
            for (long long i = 0; i < nr; i++) {
                long long g = r0 + i;
                task_train_batch(t, (uint64_t)(a->start + g / a->batch), (int)(g % a->batch), 1, ids + i * T, tg + i * T);
            }
        } else {
            task_eval_batch(t, len, (float)task_cfg(t)->p, (uint64_t)(a->start + r0), (int)nr, ids, tg);
        }
        rc = datafile_put(w, (uint32_t)r0, (uint32_t)nr, ids, tg);
    }
    free(ids);
    free(tg);
    return rc;
}

static int cmd_dump(int argc, char **argv) {
    DumpArgs a;
    if (parse_dump(&a, argc, argv)) return fail("see `implicit data --help`");
    Task *t;
    if (task_create(&t, &a.cfg)) return fail("see `implicit data --help` for the task keys");
    int len = a.len > 0 ? (int)a.len : a.cfg.train_len;
    int T = a.train ? task_train_seq_len(t) : task_seq_len(t, len);
    DataHeader h = {DATAFILE_VERSION, (uint32_t)a.n, (uint32_t)T, (uint32_t)task_vocab(t),
                    (task_is_ios(t) ? DATAFILE_FLAG_IOS : 0u) | (a.train ? DATAFILE_FLAG_TRAIN : 0u)};
    DataWriter w;
    int rc = datafile_create(&w, a.out, &h);
    if (rc) {
        task_free(t);
        return fail(rc == IM_EIO ? "is the output directory there and writable?" : "use fewer rows or a shorter --len");
    }
    rc = dump_rows(t, &a, &w, len, T);
    if (rc) datafile_abort(&w);
    else rc = datafile_commit(&w);
    if (!rc)
        printf("wrote %s: %s task on %s, %lld %s rows x %d tokens, vocab %d\n", a.out, a.cfg.task, task_group(t)->name, a.n,
               a.train ? "train" : "eval", T, task_vocab(t));
    task_free(t);
    return rc ? fail("is the output directory writable and is there space on the disk?") : 0;
}

static void print_row(const char *label, const int *v, int T, int cols) {
    printf("  %s", label);
    for (int j = 0; j < T && j < cols; j++) {
        if (v[j] == TASK_IGNORE) printf(" -");
        else printf(" %d", v[j]);
    }
    if (T > cols) printf(" ... (+%d)", T - cols);
    printf("\n");
}

static int cmd_prepare(int argc, char **argv) {
    const char *out = NULL, *spec = "byte", **texts = xcalloc((size_t)argc + 1, sizeof *texts);
    double val_frac = 0.1;
    int n_texts = 0, per_file = 0, rc = IM_OK;
    for (int i = 0; i < argc && !rc; i++) {
        if (strncmp(argv[i], "--", 2)) { texts[n_texts++] = argv[i]; continue; }
        const char *k = argv[i] + 2, *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) { rc = err_set(IM_EINVAL, "option '--%s' needs a value", k); break; }
        if (!strcmp(k, "out")) out = v;
        else if (!strcmp(k, "tokenizer")) spec = v;
        else if (!strcmp(k, "val_frac")) {
            char *end;
            errno = 0;
            val_frac = strtod(v, &end);
            if (errno || end == v || *end || !(val_frac >= 0 && val_frac < 1))
                rc = err_set(IM_EINVAL, "option '--val_frac': expected a number in [0, 1), got '%s'", v);
        } else if (!strcmp(k, "val_split")) {
            per_file = !strcmp(v, "per_file");
            if (!per_file && strcmp(v, "tail")) rc = err_set(IM_EINVAL, "option '--val_split': '%s' is not tail or per_file", v);
        } else {
            rc = err_set(IM_EINVAL, "unknown option '--%s' for `implicit data prepare`", k);
        }
    }
    if (!rc && !out) rc = err_set(IM_EINVAL, "`implicit data prepare` needs --out FILE.tok");
    if (!rc && !n_texts) rc = err_set(IM_EINVAL, "`implicit data prepare` needs at least one text file");
    if (rc) {
        free(texts);
        return fail("implicit data prepare input.txt --tokenizer byte --out data.tok [--val_frac 0.1]");
    }
    TextPrepInfo info;
    rc = textdata_prepare(out, texts, n_texts, spec, val_frac, per_file, &info);
    free(texts);
    if (rc) return fail(rc == IM_EIO ? "check the input paths and that the output folder is writable" : NULL);
    uint64_t n = info.n_train + info.n_val;
    printf("wrote %s: %d file%s, %llu bytes -> %llu tokens (%.3f bytes/token), %llu train / %llu validation (%s), "
           "vocab %d, %s tokens, tokenizer %s\n",
           out, info.n_files, info.n_files == 1 ? "" : "s", (unsigned long long)info.bytes, (unsigned long long)n,
           n ? (double)info.bytes / (double)n : 0.0, (unsigned long long)info.n_train, (unsigned long long)info.n_val,
           per_file ? "the last share of each file" : "the last share of the text", info.vocab,
           info.width == 2 ? "u16" : "u32", spec);
    return 0;
}

/* Header and the first tokens of a token file (decoded when its tokenizer loads). */
static int show_tokens(const char *path, long long cols) {
    TextData *d;
    if (textdata_open(&d, path)) return fail("was it written by `implicit data prepare` and copied completely?");
    printf("%s: token file v%u, vocab %d, %d-byte tokens, %llu train / %llu validation tokens, tokenizer %s\n", path,
           TEXTDATA_VERSION, textdata_vocab(d), textdata_width(d), (unsigned long long)textdata_count(d, TEXT_TRAIN),
           (unsigned long long)textdata_count(d, TEXT_VAL), textdata_spec(d));
    Tokenizer *tk = NULL;
    if (tok_load(&tk, textdata_spec(d))) fprintf(stderr, "note: cannot load the tokenizer (%s); ids only\n", err_msg());
    for (int s = 0; s < 2; s++) {
        uint64_t n = textdata_count(d, s) < (uint64_t)cols ? textdata_count(d, s) : (uint64_t)cols;
        int *ids = xmalloc(sizeof(int) * (size_t)(n ? n : 1));
        textdata_get(d, s, 0, (int)n, ids);
        print_row(s ? "val  " : "train", ids, (int)n, (int)cols);
        char *text;
        size_t len;
        if (tk && !tok_decode(tk, ids, n, &text, &len)) {
            printf("  text   \"");
            for (size_t j = 0; j < len; j++) {
                unsigned char c = (unsigned char)text[j];
                if (c == '\n') printf("\\n");
                else if (c == '"' || c == '\\') printf("\\%c", c);
                else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
                else putchar(c);
            }
            printf("\"\n");
            free(text);
        }
        free(ids);
    }
    tok_free(tk);
    textdata_free(d);
    return 0;
}

static int cmd_show(int argc, char **argv) {
    if (argc < 1 || !strncmp(argv[0], "--", 2)) {
        err_set(IM_EINVAL, "`implicit data show` needs a file");
        return fail("implicit data show data.bin --rows 3");
    }
    long long rows = 3, cols = 32;
    for (int i = 1; i < argc; i += 2) {
        int rc;
        if (i + 1 >= argc) rc = err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
        else if (!strcmp(argv[i], "--rows")) rc = parse_count("rows", argv[i + 1], 0, 0xFFFFFFFFLL, &rows);
        else if (!strcmp(argv[i], "--cols")) rc = parse_count("cols", argv[i + 1], 1, 1 << 20, &cols);
        else rc = err_set(IM_EINVAL, "unknown option '%s' for `implicit data show`", argv[i]);
        if (rc) return fail("implicit data show FILE [--rows 3] [--cols 32]");
    }
    FILE *probe = fs_open_regular(argv[0], NULL); /* NULL: datafile_open below says why */
    char magic[8] = {0};
    if (probe) {
        if (fread(magic, 1, 8, probe) != 8) magic[0] = 0;
        fclose(probe);
    }
    if (!memcmp(magic, TEXTDATA_MAGIC, 8)) return show_tokens(argv[0], cols);
    DataReader r;
    int rc = datafile_open(&r, argv[0]);
    if (rc) return fail(rc == IM_EIO ? "check the path" : "was it written by `implicit data dump` and copied completely?");
    printf("%s: %s v%u, N %u rows, T %u tokens, V %u, flags 0x%x (%s, %s split)\n", argv[0], DATAFILE_MAGIC, r.h.version,
           r.h.N, r.h.T, r.h.V, r.h.flags, r.h.flags & DATAFILE_FLAG_IOS ? "ios" : "word",
           r.h.flags & DATAFILE_FLAG_TRAIN ? "train" : "eval");
    int *ids = xmalloc(sizeof(int) * r.h.T), *tg = xmalloc(sizeof(int) * r.h.T);
    for (uint32_t i = 0; i < r.h.N && i < rows && !rc; i++) {
        rc = datafile_row(&r, i, ids, tg);
        if (rc) break;
        printf("row %u\n", i);
        print_row("input ", ids, (int)r.h.T, (int)cols);
        print_row("target", tg, (int)r.h.T, (int)cols);
    }
    free(ids);
    free(tg);
    datafile_close(&r);
    return rc ? fail("the file is damaged") : 0;
}

int cmd_data(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help")) {
        data_help(argc < 1 ? stderr : stdout);
        return argc < 1;
    }
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        data_help(stdout);
        return 0;
    }
    if (!strcmp(argv[0], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    if (!strcmp(argv[0], "dump")) return cmd_dump(argc - 1, argv + 1);
    if (!strcmp(argv[0], "show")) return cmd_show(argc - 1, argv + 1);
    err_set(IM_EINVAL, "unknown `implicit data` command '%s'", argv[0]);
    return fail("the commands are `implicit data prepare TEXT... --out FILE.tok`, `implicit data dump OUT ...` and "
                "`implicit data show FILE`");
}
