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

#include "cli.h"
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

#define DATA_FORMATS                                                                                     \
    "dump file: \"IMPLDATA\", u32 version, N, T, V, flags, then N*T u16 inputs and N*T u16 targets\n"        \
    "(little-endian; 0xFFFF = target not scored)\n"                                                       \
    "token file: \"IMPLTOK\\0\", u32 version, vocab, width (2|4), u64 n_train, n_val, u32 spec length, the\n"  \
    "tokenizer spec, then the train and validation tokens (little-endian; docs/formats.md)\n"

typedef struct {
    long long len, n, batch, start;
    const char *split;
} DumpOpts;

static const OptSpec DUMP_OPTS[] = {
    OPT(DumpOpts, len, 1, 1 << 20, "L", "task length (0 = train_len; ios rows have L+1 tokens with BOS)"),
    OPT(DumpOpts, n, 1, 0xFFFFFFFFLL, "N", "rows"),
    OPT(DumpOpts, split, 0, 0, "S", "eval: eval-stream samples at --len and --p | train: training batches"),
    OPT(DumpOpts, batch, 1, 1 << 20, "B", "train split: rows per optimizer step"),
    OPT(DumpOpts, start, 0, 9007199254740992.0, "I", "first eval sample index, or first training step"),
};
static const OptKeys DUMP_KEYS[] = {{&task_keytab, NULL, 1}};
static const CmdSpec dump_cmd = {
    "data dump", "OUT [--key value ...]", "write task rows to a binary file",
    "The eval split holds samples start..start+N-1 of the eval stream at length --len and identity\n"
    "probability --p; the train split holds the rows of steps start, start+1, ... in order, --batch rows\n"
    "per step, exactly the batches `implicit train` draws with that batch size.\n" DATA_FORMATS,
    DUMP_OPTS, (int)(sizeof DUMP_OPTS / sizeof *DUMP_OPTS), DUMP_KEYS, 1, 1, 1};

typedef struct {
    const char *out;
    long long len, n, batch, start;
    int train;
    TaskCfg cfg;
} DumpArgs;

/* Returns 1 to go on, else 0 with the exit status in *status. */
static int parse_dump(DumpArgs *a, int argc, char **argv, int *status) {
    DumpOpts d = {.n = 1000, .batch = 32, .split = "eval"};
    OptArgs o;
    if (!opts_get(&dump_cmd, &d, argc, argv, &o, status)) return 0;
    int rc;
    memset(a, 0, sizeof *a);
    a->out = o.pos[0];
    a->len = d.len > 0 ? d.len : -1;
    a->n = d.n;
    a->batch = d.batch;
    a->start = d.start;
    a->train = !strcmp(d.split, "train");
    task_cfg_defaults(&a->cfg);
    const KeyTab *tabs[] = {&task_keytab};
    void *objs[] = {&a->cfg};
    rc = opts_apply_keys(&o, tabs, objs, 1);
    opts_free(&o);
    if (!rc && !a->train && strcmp(d.split, "eval")) rc = err_set(IM_EINVAL, "option '--split': '%s' is not train or eval", d.split);
    /* the train split draws at train_len, so --len sets it */
    if (!rc && a->len > 0 && a->train) {
        char s[32];
        snprintf(s, sizeof s, "%lld", a->len);
        task_cfg_set(&a->cfg, "train_len", s);
    }
    if (rc) *status = fail("see `implicit data dump --help`");
    return !rc;
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
    int rc;
    if (!parse_dump(&a, argc, argv, &rc)) return rc;
    Task *t;
    if (task_create(&t, &a.cfg)) return fail("see `implicit data dump --help` for the task keys");
    int len = a.len > 0 ? (int)a.len : a.cfg.train_len;
    int T = a.train ? task_train_seq_len(t) : task_seq_len(t, len);
    DataHeader h = {DATAFILE_VERSION, (uint32_t)a.n, (uint32_t)T, (uint32_t)task_vocab(t),
                    (task_is_ios(t) ? DATAFILE_FLAG_IOS : 0u) | (a.train ? DATAFILE_FLAG_TRAIN : 0u)};
    DataWriter w;
    rc = datafile_create(&w, a.out, &h);
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

typedef struct {
    const char *out, *tokenizer, *val_split;
    double val_frac;
} PrepArgs;

static const OptSpec PREP_OPTS[] = {
    OPT(PrepArgs, out, 0, 0, "FILE", "the token file (written atomically)"),
    OPT(PrepArgs, tokenizer, 0, 0, "S", "byte (256 ids, no files) | FILE.bpe (`implicit tokenizer train`) | FILE.json"),
    OPT(PrepArgs, val_frac, 0, 1, "F", "share of the tokens held out for validation, in [0, 1)"),
    OPT(PrepArgs, val_split, 0, 0, "S", "tail: the last F of all tokens | per_file: the last F of each file"),
};
static const CmdSpec prepare_cmd = {
    "data prepare", "TEXT... --out FILE.tok [options]",
    "tokenize text files into the token file of task lm",
    "Files are joined with the tokenizer's end-of-text token (a Hugging Face tokenizer.json: its own).\n"
    DATA_FORMATS, PREP_OPTS, (int)(sizeof PREP_OPTS / sizeof *PREP_OPTS), NULL, 0, 1, -1};

static int cmd_prepare(int argc, char **argv) {
    PrepArgs a = {NULL, "byte", "tail", 0.1};
    OptArgs o;
    int rc;
    if (!opts_get(&prepare_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *out = a.out, *spec = a.tokenizer;
    double val_frac = a.val_frac;
    int per_file = !strcmp(a.val_split, "per_file");
    if (!(val_frac < 1)) rc = err_set(IM_EINVAL, "option '--val_frac': expected a number in [0, 1), got '%g'", val_frac);
    if (!rc && !per_file && strcmp(a.val_split, "tail"))
        rc = err_set(IM_EINVAL, "option '--val_split': '%s' is not tail or per_file", a.val_split);
    if (!rc && !out) rc = err_set(IM_EINVAL, "`implicit data prepare` needs --out FILE.tok");
    if (rc) {
        opts_free(&o);
        return fail("implicit data prepare input.txt --tokenizer byte --out data.tok [--val_frac 0.1]");
    }
    const char **texts = (const char **)o.pos;
    int n_texts = o.n_pos;
    TextPrepInfo info;
    rc = textdata_prepare(out, texts, n_texts, spec, val_frac, per_file, &info);
    opts_free(&o);
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

typedef struct {
    long long rows, cols;
} ShowArgs;

static const OptSpec SHOW_OPTS[] = {
    OPT(ShowArgs, rows, 0, 0xFFFFFFFFLL, "N", "rows of a dump to print"),
    OPT(ShowArgs, cols, 1, 1 << 20, "N", "tokens per row to print"),
};
static const CmdSpec show_cmd = {"data show", "FILE [options]", "check a dump or token file and print its start",
                                 DATA_FORMATS, SHOW_OPTS, 2, NULL, 0, 1, 1};

static int cmd_show(int argc, char **argv) {
    ShowArgs a = {3, 32};
    OptArgs o;
    int rc;
    if (!opts_get(&show_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *path = o.pos[0];
    opts_free(&o);
    long long rows = a.rows, cols = a.cols;
    FILE *probe = fs_open_regular(path, NULL); /* NULL: datafile_open below says why */
    char magic[8] = {0};
    if (probe) {
        if (fread(magic, 1, 8, probe) != 8) magic[0] = 0;
        fclose(probe);
    }
    if (!memcmp(magic, TEXTDATA_MAGIC, 8)) return show_tokens(path, cols);
    DataReader r;
    rc = datafile_open(&r, path);
    if (rc) return fail(rc == IM_EIO ? "check the path" : "was it written by `implicit data dump` and copied completely?");
    printf("%s: %s v%u, N %u rows, T %u tokens, V %u, flags 0x%x (%s, %s split)\n", path, DATAFILE_MAGIC, r.h.version,
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

const CmdSpec data_cmd = {"data", "prepare|dump|show ...", "tokenize text into a token file; write or inspect a task's data",
                          NULL, NULL, 0, NULL, 0, 0, -1};

int cmd_data(int argc, char **argv) {
    static const OptCommand cmds[] = {{&prepare_cmd, cmd_prepare}, {&dump_cmd, cmd_dump}, {&show_cmd, cmd_show}};
    return opts_dispatch("data", cmds, 3,
                         "Training never needs these files (tasks are generated on the fly from the seed); a dump is\n"
                         "for inspecting the data or feeding another program.\n" DATA_FORMATS,
                         argc, argv);
}
