/* test_files.c: the output-path rule of io/atomic.h through every writer. A FIFO or a device node
 * at an output path is never replaced (file outputs refuse it, reports write into it), a folder is
 * an error, "-" is standard output for reports and refused for files; then the same through the
 * `implicit` binary beside this test (init, train, eval, generate, mc, data, tokenizer).
 * Device nodes are clones made with mknod in the test's own folder (root only; otherwise the
 * FIFO cases run alone), so a regression can never replace a system device. */
#define _DEFAULT_SOURCE   /* mknod, flock */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/core/fsutil.h"
#include "../src/data/datafile.h"
#include "../src/data/textdata.h"
#include "../src/io/atomic.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
#include "../src/tok/tokenizer.h"
#include "../src/train/evaluate.h"
#include "th.h"

static char dir[128], fifo[192], chr[192], blk[192], folder[192];
static int have_chr, have_blk;
static Model model;

static mode_t kind_of(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0 ? st.st_mode & S_IFMT : 0;
}

/* The special nodes still what they were, and no temp file left anywhere in dir. */
static int nodes_intact(void) {
    int ok = kind_of(fifo) == S_IFIFO && kind_of(folder) == S_IFDIR;
    if (have_chr) ok &= kind_of(chr) == S_IFCHR;
    if (have_blk) ok &= kind_of(blk) == S_IFBLK;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -q '\\.tmp\\.'", dir);
    return ok && system(cmd) != 0;
}

/* ---- the writers ---------------------------------------------------------------------------- */
static const int IDS[6] = {1, 2, 3, 4, 5, 6};

static int w_atomic(const char *p) { return atomic_write_bytes(p, "x\n", 2); }
static int w_st(const char *p) {
    float v[2] = {1, 2};
    StWriteTensor t = {"w", ST_F32, 1, {2}, v};
    return st_write(p, &t, 1, NULL);
}
static int w_ckpt(const char *p) { return ckpt_save(&model, p, NULL); }
static int w_tokens(const char *p) { return textdata_write(p, "byte", 256, IDS, 4, IDS + 4, 2); }
static int w_dump(const char *p) {
    DataHeader h = {1, 2, 3, 10, 0};
    DataWriter w;
    int rc = datafile_create(&w, p, &h);
    if (!rc) rc = datafile_put(&w, 0, 2, IDS, IDS);
    return rc ? rc : datafile_commit(&w);
}
static int w_bpe(const char *p) {
    const char *text = "abababab abab";
    size_t len = strlen(text);
    TokTrainOpts o = {0};
    o.vocab = 258;
    return tok_train_bpe(&text, &len, 1, &o, p, NULL);
}

static EvalRow ROW = {.len = 8, .len_min = 8, .len_max = 8, .p = -1, .samples = 4, .loss = 0.5, .seq_acc = 1, .agree = -1};
static int r_bytes(const char *p) { return report_write_bytes(p, "{\"r\": 1}\n", 9); }
static int r_json(const char *p) { return eval_write_json(p, "ckpt", "word", &ROW, 1, "seq_acc", 0.9); }
static int r_csv(const char *p) { return eval_write_csv(p, &ROW, 1); }

typedef struct {
    const char *name;
    int (*write)(const char *path);
    const char *starts;   /* reports: what the content starts with */
} Writer;

static const Writer FILES[] = {{"atomic_write", w_atomic, NULL},     {"st_write", w_st, NULL},
                               {"ckpt_save", w_ckpt, NULL},         {"textdata_write", w_tokens, NULL},
                               {"datafile", w_dump, NULL},          {"tok_train_bpe", w_bpe, NULL}};
static const Writer REPORTS[] = {{"report_write", r_bytes, "{\"r\": 1}"}, {"eval_write_json", r_json, "{"},
                                 {"eval_write_csv", r_csv, "len,"}};

/* Files: refused at a FIFO, a device, a folder and "-"; nothing there is touched. */
static void file_outputs(void) {
    char cwd[4096];
    TH_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        const Writer *w = &FILES[i];
        int rc = w->write(fifo);
        TH_CHECK(rc == IM_EIO && strstr(err_msg(), "named pipe"), "%s to a FIFO: rc %d, %s", w->name, rc, err_msg());
        if (have_chr) {
            rc = w->write(chr);
            TH_CHECK(rc == IM_EIO && strstr(err_msg(), "character device"), "%s to a device: rc %d, %s", w->name, rc,
                     err_msg());
        }
        rc = w->write(folder);
        TH_CHECK(rc == IM_EIO && strstr(err_msg(), "is a folder"), "%s to a folder: rc %d, %s", w->name, rc, err_msg());
        TH_CHECK(chdir(dir) == 0, "chdir");   /* a wrong "-" would land here, not in the checkout */
        rc = w->write("-");
        TH_CHECK(rc == IM_EIO && strstr(err_msg(), "standard output") && access("-", F_OK) != 0, "%s to '-': rc %d, %s",
                 w->name, rc, err_msg());
        TH_CHECK(chdir(cwd) == 0, "chdir back");
        TH_CHECK(nodes_intact(), "%s: a special node was replaced or a temp file left", w->name);
    }
    if (have_blk) {
        TH_CHECK(w_atomic(blk) == IM_EIO && strstr(err_msg(), "block device"), "file to a block device: %s", err_msg());
        TH_CHECK(r_bytes(blk) == IM_EIO && strstr(err_msg(), "block device"), "report to a block device: %s", err_msg());
        TH_CHECK(nodes_intact(), "block device untouched");
    }
}

/* Reports: written into a FIFO (read back here) and a device, to stdout for "-"; a folder is an error. */
static void report_outputs(void) {
    char cap[256], cwd[4096];
    TH_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    snprintf(cap, sizeof cap, "%s/stdout.txt", dir);
    for (size_t i = 0; i < sizeof REPORTS / sizeof *REPORTS; i++) {
        const Writer *w = &REPORTS[i];
        int rfd = open(fifo, O_RDONLY | O_NONBLOCK);   /* a reader, so that the writer's open does not wait */
        int rc = w->write(fifo);
        char buf[4096] = "";
        ssize_t n = rfd >= 0 ? read(rfd, buf, sizeof buf - 1) : -1;
        if (rfd >= 0) close(rfd);
        buf[n > 0 ? n : 0] = 0;
        TH_CHECK(rc == IM_OK && !strncmp(buf, w->starts, strlen(w->starts)), "%s into a FIFO: rc %d (%s), read '%.20s'",
                 w->name, rc, err_msg(), buf);
        if (have_chr) TH_CHECK(w->write(chr) == IM_OK, "%s into a device: %s", w->name, err_msg());
        rc = w->write(folder);
        TH_CHECK(rc == IM_EIO && strstr(err_msg(), "is a folder"), "%s to a folder: rc %d, %s", w->name, rc, err_msg());
        /* "-": standard output, captured in a file; run in dir, where a wrong "./-" would land */
        TH_CHECK(chdir(dir) == 0, "chdir");
        fflush(stdout);
        int saved = dup(STDOUT_FILENO), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, STDOUT_FILENO);
        close(fd);
        rc = w->write("-");
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
        close(saved);
        TH_CHECK(access("-", F_OK) != 0 && chdir(cwd) == 0, "%s to '-' made no file called '-'", w->name);
        char *got = th_read_file(cap, NULL);
        TH_CHECK(rc == IM_OK && got && !strncmp(got, w->starts, strlen(w->starts)), "%s to '-': rc %d, got '%.20s'", w->name,
                 rc, got ? got : "(nothing)");
        free(got);
        TH_CHECK(nodes_intact(), "%s: a special node was replaced or a temp file left", w->name);
    }
}

/* report_check says in advance what a report write would say, and writes nothing. */
static void report_checks(void) {
    TH_CHECK(report_check(folder) == IM_EIO && strstr(err_msg(), "is a folder"), "check a folder: %s", err_msg());
    TH_CHECK(report_check(fifo) == IM_OK && report_check("-") == IM_OK && report_check(NULL) == IM_OK,
             "check a FIFO, '-', no path: %s", err_msg());
    if (have_blk) TH_CHECK(report_check(blk) == IM_EIO, "check a block device");
    TH_CHECK(nodes_intact(), "report_check touched nothing");
}

/* A link to a regular file keeps the link; its target is replaced. */
static void links(void) {
    char target[256], link[256];
    snprintf(target, sizeof target, "%s/target.json", dir);
    snprintf(link, sizeof link, "%s/link.json", dir);
    TH_CHECK(atomic_write_bytes(target, "old", 3) == IM_OK && symlink("target.json", link) == 0, "setup");
    TH_CHECK(atomic_write_bytes(link, "new", 3) == IM_OK, "write through a link: %s", err_msg());
    char *got = th_read_file(target, NULL);
    TH_CHECK(kind_of(link) == S_IFLNK && got && !strcmp(got, "new"), "the link stays, its target is replaced");
    free(got);
}

/* report_reserve_stdout: ordinary output moves to stderr, the report alone reaches stdout. */
static void reserved_stdout(void) {
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/reserved.out", dir);
    snprintf(err, sizeof err, "%s/reserved.err", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        report_reserve_stdout();
        printf("a table\n");
        _exit(report_write_bytes("-", "{}\n", 3) == IM_OK ? 0 : 1);
    }
    int status = 1;
    waitpid(pid, &status, 0);
    char *o = th_read_file(out, NULL), *e = th_read_file(err, NULL);
    TH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && o && !strcmp(o, "{}\n") && e && !strcmp(e, "a table\n"),
             "reserved stdout: out '%s', err '%s'", o ? o : "", e ? e : "");
    free(o);
    free(e);
}

/* ---- through the binary --------------------------------------------------------------------- */
static char bin[4200];

/* Run `implicit ARGS` in dir (so that a wrong "-" lands there) with stdout and stderr in
 * dir/cli.out, dir/cli.err; its exit status. */
static int cli(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s >cli.out 2>cli.err", dir, bin, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int cli_err_has(const char *needle) {
    char p[256];
    snprintf(p, sizeof p, "%s/cli.err", dir);
    char *e = th_read_file(p, NULL);
    int ok = e && strstr(e, needle);
    if (!ok) printf("  stderr was: %s\n", e ? e : "(none)");
    free(e);
    return ok;
}

static void through_cli(void) {
    char a[8192], run[256], ckpt[300], txt[256];
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", run);
    snprintf(txt, sizeof txt, "%s/a.txt", dir);
    FILE *f = fopen(txt, "w");
    fputs("hello world hello there\n", f);
    fclose(f);
    const char *node[2] = {fifo, chr};
    for (int k = 0; k < 1 + have_chr; k++) {
        snprintf(a, sizeof a, "init %s --model lstm --d_model 8", node[k]);
        TH_CHECK(cli(a) == 1 && cli_err_has("error: "), "init into %s", node[k]);
        snprintf(a, sizeof a, "data dump %s --n 4", node[k]);
        TH_CHECK(cli(a) == 1, "data dump into %s", node[k]);
        snprintf(a, sizeof a, "data prepare %s --out %s", txt, node[k]);
        TH_CHECK(cli(a) == 1, "data prepare into %s", node[k]);
        TH_CHECK(nodes_intact(), "the CLI file writers left %s as it was", node[k]);
    }
    snprintf(a, sizeof a, "tokenizer train %s --vocab 260 --out %s/pipe.bpe", txt, dir);
    char bpe[256];
    snprintf(bpe, sizeof bpe, "%s/pipe.bpe", dir);
    TH_CHECK(mkfifo(bpe, 0644) == 0 && cli(a) == 1 && kind_of(bpe) == S_IFIFO, "tokenizer train into a FIFO refused");
    /* a tiny run: twice into one folder is refused, a held lock names its pid */
    const char *keys = "--model lstm --d_model 8 --n_layer 1 --group S3 --train_len 8 --eval_lens 8 --eval_samples 8 "
                       "--batch 4 --steps 10 --log_every 5 --eval_every 5 --ckpt_every 5 --progress none";
    snprintf(a, sizeof a, "train %s --out %s", keys, run);
    TH_CHECK(cli(a) == 0, "train");
    TH_CHECK(cli(a) == 1 && cli_err_has("already holds a training run") && cli_err_has("--overwrite"),
             "a second train into a finished run");
    char lock[300], pid[32];
    snprintf(lock, sizeof lock, "%s/.lock", run);
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    int fd = open(lock, O_RDWR);
    TH_CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && pwrite(fd, pid + 4, strlen(pid + 4), 0) > 0, "hold the lock");
    snprintf(a, sizeof a, "train --resume %s", run);
    TH_CHECK(cli(a) == 1 && cli_err_has(pid) && cli_err_has("in use"), "resume into a folder in use names the pid");
    snprintf(a, sizeof a, "train %s --out %s --overwrite 1", keys, run);
    TH_CHECK(cli(a) == 1 && cli_err_has(pid), "train --overwrite into a folder in use names the pid");
    if (fd >= 0) close(fd);
    snprintf(a, sizeof a, "train %s --out %s --overwrite 1", keys, run);
    TH_CHECK(cli(a) == 0, "train --overwrite 1 once the folder is free");
    /* reports: "-" is stdout (and the table moves to stderr), a FIFO and a device are written in place */
    snprintf(a, sizeof a, "eval %s --json -", ckpt);
    char out[256];
    snprintf(out, sizeof out, "%s/cli.out", dir);
    int rc = cli(a);
    char *o = th_read_file(out, NULL);
    Json *j = NULL;
    TH_CHECK(rc == 0 && o && json_parse(&j, o, strlen(o)) == IM_OK && json_get(j, "rows") && cli_err_has("| length"),
             "eval --json -: JSON alone on stdout");
    json_free(j);
    free(o);
    char cmd[16384], got[256];
    snprintf(got, sizeof got, "%s/fifo.out", dir);
    /* the reader gives up after a while, so that a writer that never opens the FIFO cannot hang the test */
    snprintf(cmd, sizeof cmd, "timeout 120 cat %s > %s & %s eval %s --csv %s > /dev/null 2>&1; st=$?; wait; exit $st",
             fifo, got, bin, ckpt, fifo);
    rc = system(cmd);
    o = th_read_file(got, NULL);
    TH_CHECK(rc == 0 && o && !strncmp(o, "len,", 4) && kind_of(fifo) == S_IFIFO, "eval --csv into a FIFO");
    free(o);
    if (have_chr) {
        snprintf(a, sizeof a, "eval %s --json %s", ckpt, chr);
        TH_CHECK(cli(a) == 0 && kind_of(chr) == S_IFCHR, "eval --json into a device");
    }
    snprintf(a, sizeof a, "init %s/g.safetensors --model lstm --d_model 8 --vocab_size 256", dir);
    TH_CHECK(cli(a) == 0, "init");
    snprintf(a, sizeof a, "generate %s/g.safetensors --prompt hi --max_tokens 3 --json -", dir);
    rc = cli(a);
    o = th_read_file(out, NULL);
    TH_CHECK(rc == 0 && o && o[0] == '{' && json_parse(&j, o, strlen(o)) == IM_OK,
             "generate --json -: JSON alone on stdout");
    json_free(j);
    free(o);
    char cwd[4096];
    TH_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    snprintf(a, sizeof a, "mc %s/g.safetensors %s/tests/fixtures/mc_tiny.jsonl --json %s", dir, cwd, have_chr ? chr : "-");
    TH_CHECK(cli(a) == 0, "mc --json %s", have_chr ? chr : "-");
    TH_CHECK(nodes_intact(), "the CLI reports left the nodes as they were");
}

int main(int argc, char **argv) {
    (void)argc;
    th_name = "test_files";
    snprintf(dir, sizeof dir, "/tmp/implicit-test-files-%d", (int)getpid());
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(chr, sizeof chr, "%s/null", dir);
    snprintf(blk, sizeof blk, "%s/blk", dir);
    snprintf(folder, sizeof folder, "%s/folder", dir);
    TH_CHECK(mkdir(dir, 0755) == 0 && mkdir(folder, 0755) == 0 && mkfifo(fifo, 0644) == 0, "setup %s", dir);
    struct stat null_st;
    have_chr = stat("/dev/null", &null_st) == 0 && mknod(chr, S_IFCHR | 0666, null_st.st_rdev) == 0;
    /* a loop device number that is not set up: the node exists, the device behind it does not */
    have_blk = mknod(blk, S_IFBLK | 0600, makedev(7, 250)) == 0;
    if (!have_chr) printf("note: cannot mknod a character device here (not root); the FIFO cases run alone\n");
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", "lstm");
    cfg_set(&c, "d_model", "8");
    cfg_set(&c, "vocab_size", "16");
    TH_CHECK(model_create(&model, &c) == IM_OK, "model: %s", err_msg());
    model_init_params(&model, 1);
    file_outputs();
    report_outputs();
    report_checks();
    links();
    reserved_stdout();
    const char *slash = strrchr(argv[0], '/');
    char cwd[4096];
    TH_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    snprintf(bin, sizeof bin, "%s%s%.*s/implicit", argv[0][0] == '/' ? "" : cwd, argv[0][0] == '/' ? "" : "/",
             slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    if (access(bin, X_OK) == 0) through_cli();
    else TH_CHECK(0, "no %s beside the test (run it through `make test`)", bin);
    model_free(&model);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(system(cmd) == 0, "cleanup");
    return th_done();
}
