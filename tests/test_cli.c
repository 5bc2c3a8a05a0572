/* test_cli.c: the command line's option parser (cli/opts.c) on its own, then the built binary
 * (beside this test in the build folder): every subcommand's --help / -h exits 0 and leaves its
 * working folder empty (nothing trained, written or created), no command exits 2, --key=value
 * works, a misspelt key names the right one; and the progress line's fit to a terminal width. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "th.h"
#include "../cli/opts.h"
#include "../src/core/check.h"
#include "../src/train/progress.h"
#include "../src/data/task.h"
#include "../src/train/train_cfg.h"

/* ---- the parser ------------------------------------------------------------------------------- */

typedef struct {
    const char *dest;
    long long count;
    double rate;
    int dry;
} TArgs;

static const OptSpec T_OPTS[] = {
    OPT(TArgs, dest, 0, 0, "DIR", "where"),
    OPT(TArgs, count, 1, 100, "N", "how many"),
    OPT(TArgs, rate, 0, 1, "X", "how fast"),
    OPT(TArgs, dry, 0, 0, "", "a flag: no value"),
};
static const char *const T_ONLY[] = {"steps", "lr", "seed", NULL};
static const OptKeys T_KEYS[] = {{&train_keytab, T_ONLY, 1}};
static const CmdSpec T_CMD = {"test", "IN [OUT]", "a test command", NULL, T_OPTS, 4, T_KEYS, 1, 1, 2};

static const TArgs T_DEFAULTS = {"d", 3, 0.25, 0};

/* Parse a NULL-terminated word list; the words are copied into writable storage as argv is. */
static int parse(TArgs *a, OptArgs *o, const char *const *words) {
    static char store[16][64];
    static char *argv[16];
    int argc = 0;
    for (; words[argc]; argc++) {
        snprintf(store[argc], sizeof store[argc], "%s", words[argc]);
        argv[argc] = store[argc];
    }
    *a = T_DEFAULTS;
    return opts_parse(&T_CMD, a, argc, argv, o);
}

static int args_untouched(const TArgs *a) {
    return !strcmp(a->dest, "d") && a->count == 3 && a->rate == 0.25 && a->dry == 0;
}

static void test_parse_both_syntaxes(void) {
    TArgs a;
    OptArgs o;
    const char *w[] = {"in", "--dest", "x", "--count=5", "--rate", "0.5", "--dry", "--steps", "7", "--lr=0.01", "--",
                       "--out", NULL};
    int rc = parse(&a, &o, w);
    TH_CHECK(rc == IM_OK, "parse: %s", err_msg());
    TH_CHECK(!strcmp(a.dest, "x") && a.count == 5 && a.rate == 0.5 && a.dry == 1, "own options %s %lld %g %d", a.dest,
             a.count, a.rate, a.dry);
    TH_CHECK(o.n_pos == 2 && !strcmp(o.pos[0], "in") && !strcmp(o.pos[1], "--out"), "positionals (-- ends options)");
    TH_CHECK(o.n_kv == 2 && !strcmp(o.kv[0].key, "steps") && !strcmp(o.kv[0].value, "7") &&
                 !strcmp(o.kv[1].key, "lr") && !strcmp(o.kv[1].value, "0.01") && o.kv[0].tab == &train_keytab,
             "key options in order");
    TrainCfg c;
    train_cfg_defaults(&c);
    const KeyTab *tabs[] = {&train_keytab};
    void *objs[] = {&c};
    TH_CHECK(opts_apply_keys(&o, tabs, objs, 1) == IM_OK && c.steps == 7 && c.lr == 0.01, "applied: steps %d lr %g",
             c.steps, c.lr);
    opts_free(&o);
}

static void test_parse_values(void) {
    TArgs a;
    OptArgs o;
    /* a value-taking option takes the next word even when it looks like an option, and "" */
    const char *w1[] = {"--dest", "--count", "-", "--rate=", NULL};
    TH_CHECK(parse(&a, &o, w1) != IM_OK, "--rate= (empty number) is an error");
    opts_free(&o);
    const char *w2[] = {"--dest", "--count", "-", NULL};
    TH_CHECK(parse(&a, &o, w2) == IM_OK && !strcmp(a.dest, "--count") && o.n_pos == 1 && !strcmp(o.pos[0], "-"),
             "--dest --count: a value; '-' is positional");
    opts_free(&o);
    const char *w3[] = {"in", "--dest=", "--seed", "-3", NULL};
    TH_CHECK(parse(&a, &o, w3) == IM_OK && !strcmp(a.dest, "") && o.n_kv == 1 && !strcmp(o.kv[0].value, "-3"),
             "--dest= is empty; --seed -3 is a negative value");
    opts_free(&o);
    /* options may come before the positionals (GNU permutation) */
    const char *w4[] = {"--count", "9", "in", "out", NULL};
    TH_CHECK(parse(&a, &o, w4) == IM_OK && a.count == 9 && o.n_pos == 2, "permutation");
    opts_free(&o);
}

/* One failing parse: the message and the hint contain the given words; the defaults stay. */
static void expect_error(const char *const *w, const char *msg_part, const char *hint_part) {
    TArgs a;
    OptArgs o;
    int rc = parse(&a, &o, w);
    TH_CHECK(rc == IM_EINVAL, "%s: rc %d", w[0], rc);
    TH_CHECK(strstr(err_msg(), msg_part) != NULL, "message '%s' lacks '%s'", err_msg(), msg_part);
    TH_CHECK(!hint_part || strstr(o.hint, hint_part), "hint '%s' lacks '%s'", o.hint, hint_part ? hint_part : "");
    TH_CHECK(args_untouched(&a), "an error leaves the defaults");
    opts_free(&o);
}

static void test_parse_errors(void) {
    expect_error((const char *const[]){"in", "--count", "4", "--count", NULL}, "'--count' needs a value", "--count N");
    expect_error((const char *const[]){"in", "--stpes", "5", NULL}, "unknown option '--stpes'", "did you mean --steps?");
    expect_error((const char *const[]){"in", "--stpes=5", NULL}, "unknown option '--stpes'", "did you mean --steps?");
    expect_error((const char *const[]){"in", "--cuont", "5", NULL}, "unknown option", "did you mean --count?");
    /* a key of the table outside the accepted subset is unknown here */
    expect_error((const char *const[]){"in", "--warmup", "5", NULL}, "unknown option '--warmup'", NULL);
    expect_error((const char *const[]){"in", "--zzzzzzzz", "5", NULL}, "unknown option", "--help");
    expect_error((const char *const[]){"in", "--count", "500", NULL}, "1..100", NULL);
    expect_error((const char *const[]){"in", "--count", "5x", NULL}, "expected an integer", NULL);
    expect_error((const char *const[]){"in", "--rate=2", NULL}, "expected a number", NULL);
    expect_error((const char *const[]){"in", "--dry=1", NULL}, "takes no value", NULL);
    expect_error((const char *const[]){"in", "--steps", "many", NULL}, "steps", NULL);
    expect_error((const char *const[]){"in", "-x", NULL}, "unknown option '-x'", NULL);
    expect_error((const char *const[]){"--count", "5", NULL}, "needs at least 1 argument", "usage: implicit test IN");
    expect_error((const char *const[]){"a", "b", "c", NULL}, "unexpected argument 'c'", NULL);
    TH_CHECK(!strcmp(opts_closest("trian", (const char *const[]){"info", "train", "eval"}, 3), "train"), "trian");
    TH_CHECK(opts_closest("xyzzy", (const char *const[]){"info", "train", "eval"}, 3) == NULL, "no close name");
}

/* A name two tables share (seed: task and train) goes to the first with --seed and to either
 * with --SECTION.seed; a section or key the command does not have is an unknown option. */
static void test_parse_sections(void) {
    static const OptKeys K2[] = {{&task_keytab, NULL, 1}, {&train_keytab, NULL, 1}};
    static const CmdSpec C2 = {"two", "", "two key tables", NULL, NULL, 0, K2, 2, 0, 0};
    static char w[8][32] = {"--seed", "3", "--train.seed", "5", "--task.train_len=9", "--train.steps", "7"};
    char *argv[8];
    for (int i = 0; i < 7; i++) argv[i] = w[i];
    OptArgs o;
    TH_CHECK(opts_parse(&C2, NULL, 7, argv, &o) == IM_OK, "sections: %s", err_msg());
    TH_CHECK(o.n_kv == 4 && o.kv[0].tab == &task_keytab && !strcmp(o.kv[0].key, "seed") && o.kv[1].tab == &train_keytab &&
                 !strcmp(o.kv[1].key, "seed") && !strcmp(o.kv[1].value, "5") && o.kv[2].tab == &task_keytab &&
                 !strcmp(o.kv[2].key, "train_len") && !strcmp(o.kv[2].value, "9") && o.kv[3].tab == &train_keytab,
             "--seed to the task, --train.seed to train, --task.train_len=9, --train.steps");
    opts_free(&o);
    static const char *const bad[][2] = {{"--model.seed", "1"}, {"--task.steps", "1"}, {"--train.", "1"}, {"--.seed", "1"}};
    for (int b = 0; b < 4; b++) {
        char w0[32], w1[32], *av[2] = {w0, w1};
        snprintf(w0, sizeof w0, "%s", bad[b][0]), snprintf(w1, sizeof w1, "%s", bad[b][1]);
        TH_CHECK(opts_parse(&C2, NULL, 2, av, &o) == IM_EINVAL && strstr(err_msg(), "unknown option"), "%s: %s", bad[b][0],
                 err_msg());
        opts_free(&o);
    }
    FILE *f = tmpfile();
    opts_help(&C2, NULL, f);
    rewind(f);
    char line[512];
    int note = 0;
    while (fgets(line, sizeof line, f)) note += strstr(line, "--train.seed") != NULL;
    fclose(f);
    TH_CHECK(note == 1, "--help names --train.seed once for the shadowed key (%d)", note);
}

static void test_parse_help(void) {
    TArgs a;
    OptArgs o;
    /* -h / --help anywhere (before --) wins and stores nothing; positional counts are not checked */
    const char *w1[] = {"--count", "5", "-h", NULL};
    TH_CHECK(parse(&a, &o, w1) == IM_OK && o.help && args_untouched(&a), "-h");
    opts_free(&o);
    const char *w2[] = {"--help", NULL};
    TH_CHECK(parse(&a, &o, w2) == IM_OK && o.help, "--help without the positional");
    opts_free(&o);
    const char *w3[] = {"in", "-V", NULL};
    TH_CHECK(parse(&a, &o, w3) == IM_OK && o.version && !o.help, "-V");
    opts_free(&o);
    const char *w4[] = {"in", "--", "-h", NULL};
    TH_CHECK(parse(&a, &o, w4) == IM_OK && !o.help && o.n_pos == 2, "-- -h is positional");
    opts_free(&o);
    /* the help lists the table: own options with defaults, then the accepted keys only */
    char buf[8192] = "";
    FILE *f = tmpfile();
    if (f) {
        opts_help(&T_CMD, &T_DEFAULTS, f);
        rewind(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    TH_CHECK(strstr(buf, "usage: implicit test IN [OUT]") && strstr(buf, "--count N") && strstr(buf, "0.25") &&
                 strstr(buf, "--steps") && !strstr(buf, "--warmup"),
             "help text:\n%s", buf);
}

/* ---- the binary ----------------------------------------------------------------------------------- */

static char bin[4096], work[64], logs[64];

static int folder_is_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n == 0;
}

/* Run the binary with argv words in the (empty) work folder; stdout and stderr go to files under
 * logs, read back into out / err. Returns the exit status (-1 if it did not exit normally). */
static int run(const char *const *words, char *out, char *err, size_t cap) {
    char o_path[128], e_path[128];
    snprintf(o_path, sizeof o_path, "%s/out", logs);
    snprintf(e_path, sizeof e_path, "%s/err", logs);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[16] = {bin};
        for (int i = 0; words[i] && i < 14; i++) argv[i + 1] = (char *)words[i];
        int fo = open(o_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(e_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fi = open("/dev/null", O_RDONLY);   /* a command that waits for stdin gets EOF at once */
        if (fo < 0 || fe < 0 || fi < 0 || chdir(work)) _exit(127);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(bin, argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    const char *paths[2] = {o_path, e_path};
    char *bufs[2] = {out, err};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(paths[k], "rb");
        size_t n = f ? fread(bufs[k], 1, cap - 1, f) : 0;
        bufs[k][n] = 0;
        if (f) fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_help_everywhere(void) {
    static const char *const cmds[][2] = {
        {"info", NULL},      {"init", NULL},       {"train", NULL},    {"eval", NULL},       {"data", NULL},
        {"data", "prepare"}, {"data", "dump"},     {"data", "show"},   {"demo", NULL},       {"smoke", NULL},
        {"generate", NULL},  {"mc", NULL},         {"tokenizer", NULL}, {"tokenizer", "train"},
        {"tokenizer", "encode"}, {"tokenizer", "decode"}, {"tokenizer", "info"},
    };
    static char out[16384], err[4096];
    /* --help for every command, -h for every third one (each run starts a process: keep it fast) */
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        for (int h = 0; h < 1 + (i % 3 == 0); h++) {
            const char *w[4] = {cmds[i][0], cmds[i][1] ? cmds[i][1] : (h ? "-h" : "--help"), cmds[i][1] ? (h ? "-h" : "--help") : NULL, NULL};
            int rc = run(w, out, err, sizeof out);
            char name[64];
            snprintf(name, sizeof name, "%s%s%s %s", w[0], cmds[i][1] ? " " : "", cmds[i][1] ? cmds[i][1] : "", h ? "-h" : "--help");
            TH_CHECK(rc == 0, "`implicit %s` exits %d: %s", name, rc, err);
            TH_CHECK(!strncmp(out, "usage: implicit", 15), "`implicit %s` prints its usage first: %.80s", name, out);
            TH_CHECK(folder_is_empty(work), "`implicit %s` created files", name);
        }
    /* the help of a command with a key table lists its keys, from the table */
    const char *w[] = {"train", "--steps", "5", "--help", NULL};
    TH_CHECK(run(w, out, err, sizeof out) == 0 && strstr(out, "--steps") && strstr(out, "--d_model") &&
                 strstr(out, "--eval_every") && folder_is_empty(work),
             "train --steps 5 --help: %s", err);
}

static void test_binary_basics(void) {
    static char out[8192], err[8192];
    const char *none[] = {NULL};
    TH_CHECK(run(none, out, err, sizeof out) == 2 && strstr(err, "usage: implicit") && !out[0], "no command: exit 2");
    const char *typo[] = {"trian", NULL};
    TH_CHECK(run(typo, out, err, sizeof out) == 2 && strstr(err, "did you mean `implicit train`"), "trian: %s", err);
    const char *sub[] = {"data", "dupm", NULL};
    TH_CHECK(run(sub, out, err, sizeof out) == 2 && strstr(err, "`implicit data dump`"), "data dupm: %s", err);
    const char *ver[] = {"-V", NULL};
    TH_CHECK(run(ver, out, err, sizeof out) == 0 && !strncmp(out, "implicit ", 9), "-V: %s", out);
    const char *ver2[] = {"info", "--version", NULL};
    TH_CHECK(run(ver2, out, err, sizeof out) == 0 && !strncmp(out, "implicit ", 9), "info --version: %s", out);
    const char *eq[] = {"tokenizer", "encode", "byte", "--text=hi", NULL};
    TH_CHECK(run(eq, out, err, sizeof out) == 0 && !strcmp(out, "104 105\n"), "--text=hi: '%s' %s", out, err);
    const char *sp[] = {"tokenizer", "encode", "--text", "hi", "byte", NULL};
    TH_CHECK(run(sp, out, err, sizeof out) == 0 && !strcmp(out, "104 105\n"), "--text hi before SPEC: '%s' %s", out, err);
    const char *steps[] = {"train", "--stpes", "5", NULL};
    TH_CHECK(run(steps, out, err, sizeof out) == 1 && strstr(err, "did you mean --steps?") && folder_is_empty(work),
             "--stpes: %s", err);
    const char *tval[] = {"train", "--steps=abc", NULL};
    TH_CHECK(run(tval, out, err, sizeof out) == 1 && strstr(err, "steps") && folder_is_empty(work), "--steps=abc: %s", err);
    const char *ex[] = {"smoke", "a", "b", NULL};
    TH_CHECK(run(ex, out, err, sizeof out) == 1 && strstr(err, "unexpected argument 'b'") && folder_is_empty(work),
             "smoke a b: %s", err);
}

/* `implicit generate --json` of a Fixed-Point RNN reports its iterations per token in both
 * conventions: ours and the reference's (iter_idx + 1 per solve), one more; an explicit model
 * reports only ours. */
static double json_num_after(const char *text, const char *key) {
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(text, k);
    return p ? strtod(p + strlen(k), NULL) : -1;
}

static void test_generate_iters_ref(void) {
    static char out[8192], err[8192];
    const char *models[] = {"fp_mamba", "mamba1"};
    for (int k = 0; k < 2; k++) {
        const char *init[] = {"init", "m.safetensors", "--model", models[k], "--vocab_size", "256", "--d_model", "8",
                              "--n_layer", "1", "--d_state", "4", NULL};
        const char *gen[] = {"generate", "m.safetensors", "--prompt", "ab", "--max_tokens", "3", "--json", "g.json", NULL};
        TH_CHECK(run(init, out, err, sizeof out) == 0 && run(gen, out, err, sizeof out) == 0, "%s: init / generate: %s",
                 models[k], err);
        char path[128];
        snprintf(path, sizeof path, "%s/g.json", work);
        FILE *f = fopen(path, "rb");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        out[n] = 0;
        if (f) fclose(f);
        double p = json_num_after(out, "prompt_iters_per_token"), g = json_num_after(out, "generation_iters_per_token");
        double pr = json_num_after(out, "prompt_iters_per_token_ref"), gr = json_num_after(out, "generation_iters_per_token_ref");
        if (k == 0)
            TH_CHECK(p >= 1 && g >= 1 && pr == p + 1 && gr == g + 1, "fp_mamba generate json: %g %g, ref %g %g", p, g, pr, gr);
        else
            TH_CHECK(p == 0 && !strstr(out, "_ref"), "mamba1 generate json: no reference convention (%g)", p);
        unlink(path);
        snprintf(path, sizeof path, "%s/m.safetensors", work);
        unlink(path);
    }
}

/* ---- the progress line ------------------------------------------------------------------------------ */

static void test_progress_format(void) {
    char buf[512];
    const char *text = "120/1000  loss 1.2345  acc  50.0%  12345 tok/s  00:12<01:30  warmup: 12 it, res 1e-3";
    int widths[] = {200, 120, 80, 60, 40, 31, 30, 20, 5, 1, 0};
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++) {
        int w = widths[i];
        size_t n = progress_format(buf, sizeof buf, w, 0.5, text);
        TH_CHECK(n == strlen(buf) && (int)n <= (w > 1 ? w - 1 : 0), "width %d: %zu columns '%s'", w, n, buf);
        if (w >= 31) {
            size_t cells = strchr(buf, ']') - buf - 1, fill = 0;
            for (size_t j = 1; j <= cells; j++) fill += buf[j] == '#';
            TH_CHECK(buf[0] == '[' && cells >= 10 && cells <= 30 && fill == cells / 2, "width %d bar: '%s'", w, buf);
        } else {
            TH_CHECK(w < 2 || !strncmp(buf, text, n), "width %d: text only '%s'", w, buf);
        }
    }
    /* wide terminals get the whole text; the bar never changes size with the text */
    size_t n1 = progress_format(buf, sizeof buf, 200, 1.0, text);
    TH_CHECK(strstr(buf, "res 1e-3") && n1 == 30 + 3 + strlen(text), "width 200: '%s'", buf);
    progress_format(buf, sizeof buf, 80, 0.0, "short");
    TH_CHECK(!strcmp(buf, "[...................] short"), "width 80, frac 0: '%s'", buf);
    /* a cut never splits a UTF-8 character, and a character counts one column */
    progress_format(buf, sizeof buf, 8, 0.0, "ab\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    TH_CHECK(!strcmp(buf, "ab\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"), "utf-8, 7 columns in 7: '%s'", buf);
    progress_format(buf, sizeof buf, 5, 0.0, "ab\xc3\xa9\xc3\xa9\xc3\xa9");
    TH_CHECK(!strcmp(buf, "ab\xc3\xa9\xc3\xa9"), "utf-8 cut at 4 columns: '%s'", buf);
    /* a small buffer is never overrun */
    char tiny[8];
    size_t n = progress_format(tiny, sizeof tiny, 200, 0.5, text);
    TH_CHECK(n < sizeof tiny && strlen(tiny) == n, "tiny buffer: %zu", n);
}

/* Bar mode into a file: an evaluation note replaces the bar's line and the training bar comes back
 * below it (not the evaluation bar); done ends the line. */
static void test_progress_note(void) {
    char path[] = "/tmp/implicit-progress-XXXXXX", text[4096] = "";
    int fd = mkstemp(path), saved = dup(2);
    if (fd < 0 || saved < 0) {
        TH_CHECK(0, "mkstemp / dup");
        return;
    }
    fflush(stderr);
    dup2(fd, 2);
    Progress p;
    progress_init(&p, "bar", 100, 0);
    progress_update(&p, 10, 1.5, 0.25, 1000, NULL);
    progress_phase(&p, "eval 1/2  length 16", 0.0);
    progress_note(&p, "eval @ step 10: mean seq_acc 0.5000");
    progress_done(&p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fdopen(fd, "rb");
    if (f) {
        rewind(f);
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    unlink(path);
    const char *note = strstr(text, "\r\033[Keval @ step 10: mean seq_acc 0.5000\n\r[");
    TH_CHECK(note != NULL, "the note replaces the bar line and a bar follows: '%s'", text);
    TH_CHECK(note && strstr(note + 5, "] 10/100  loss 1.5000") && !strstr(note + 5, "eval 1/2"),
             "the training bar comes back after the note");
    const char *bar = strstr(text, "eval 1/2  length 16");
    TH_CHECK(note && bar && bar < note, "the eval bar was drawn before the note");
    TH_CHECK(text[0] && text[strlen(text) - 1] == '\n', "progress_done ends the line");
}

int main(int argc, char **argv) {
    th_name = "test_cli";
    (void)argc;
    test_parse_both_syntaxes();
    test_parse_values();
    test_parse_errors();
    test_parse_sections();
    test_parse_help();
    test_progress_format();
    test_progress_note();
    /* the binary is built beside this test */
    char cwd[2048] = "";
    if (argv[0][0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    const char *slash = strrchr(argv[0], '/');
    snprintf(bin, sizeof bin, "%s%s%.*s%simplicit", cwd, cwd[0] ? "/" : "", slash ? (int)(slash - argv[0]) : 0, argv[0],
             slash ? "/" : "");
    snprintf(work, sizeof work, "/tmp/implicit-cli-XXXXXX");
    snprintf(logs, sizeof logs, "/tmp/implicit-cli-log-XXXXXX");
    if (access(bin, X_OK) || !mkdtemp(work) || !mkdtemp(logs)) {
        printf("FAIL cannot run %s or make temporary folders\n", bin);
        th_failed++;
    } else {
        test_help_everywhere();
        test_binary_basics();
        test_generate_iters_ref();
        char p[128];
        snprintf(p, sizeof p, "%s/out", logs);
        unlink(p);
        snprintf(p, sizeof p, "%s/err", logs);
        unlink(p);
        rmdir(logs);
        if (rmdir(work)) printf("note: %s is not empty\n", work);
    }
    return th_done();
}
