/* cmd_data.c: `implicit data dump` and `implicit data show`.
 *
 *   implicit data dump OUT [--task word] [--group A5] [--p 0.9] [--len 64] [--n 1000]
 *                          [--split eval|train] [--batch 32] [--start 0] [--seed S] [any task key]
 *   implicit data show FILE [--rows 3] [--cols 32]
 *
 * Training never needs these files (tasks are generated on the fly from the seed); a dump is for
 * inspecting the data or feeding another program. The format is in src/data/datafile.h. The eval
 * split holds samples start..start+N-1 of the eval stream at length --len and identity
 * probability --p; the train split holds the rows of steps start, start+1, ... in order, --batch
 * rows per step, exactly the batches `implicit train` draws with that batch size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/data/datafile.h"
#include "../src/data/task.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static void data_help(FILE *f) {
    TaskCfg c;
    task_cfg_defaults(&c);
    fprintf(f,
            "usage: implicit data dump OUT [--key value ...]   write task rows to a binary file\n"
            "       implicit data show FILE [--rows 3] [--cols 32]   check a dump and print its first rows\n"
            "dump options:\n"
            "  --len L        task length (default: train_len; ios rows have L+1 tokens with BOS)\n"
            "  --n N          rows (default 1000)\n"
            "  --split S      eval (default): eval-stream samples at --len and --p; train: training batches\n"
            "  --batch B      train split: rows per optimizer step (default 32)\n"
            "  --start I      first eval sample index, or first training step (default 0)\n"
            "task keys:\n");
    keytab_print(&task_keytab, &c, f);
    fprintf(f, "file: \"IMPLDATA\", u32 version, N, T, V, flags, then N*T u16 inputs and N*T u16 targets\n"
               "(little-endian; 0xFFFF = target not scored)\n");
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
    if (!strcmp(argv[0], "dump")) return cmd_dump(argc - 1, argv + 1);
    if (!strcmp(argv[0], "show")) return cmd_show(argc - 1, argv + 1);
    err_set(IM_EINVAL, "unknown `implicit data` command '%s'", argv[0]);
    return fail("the commands are `implicit data dump OUT ...` and `implicit data show FILE`");
}
