/* cmd_report.c: `implicit report RUN_DIR... [--out FILE.html] [--title T]`: run folders (and
 * evaluation files) as one self-contained HTML page of plots; see src/train/run_report.h and
 * docs/report.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "implicit.h"
#include "cli.h"
#include "../src/core/fsutil.h"
#include "../src/io/atomic.h"
#include "../src/train/run_report.h"

typedef struct {
    const char *out, *title;
} ReportArgs;

static const OptSpec REPORT_OPTS[] = {
    OPT(ReportArgs, out, 0, 0, "FILE", "the HTML page (default: RUN_DIR/report.html for one folder, else report.html; - = stdout)"),
    OPT(ReportArgs, title, 0, 0, "T", "the page's title (default: from the runs)"),
};
const CmdSpec report_cmd = {
    "report", "RUN_DIR... [--out FILE.html] [--title T]", "plots of training runs as one self-contained HTML page",
    "Reads each run folder's config.json, log.jsonl (a torn last line, malformed lines and steps logged\n"
    "twice are handled and noted) and evaluation files (*.json from `implicit eval --json` in the folder),\n"
    "and writes one HTML page with inline SVG plots: no scripts, no network, it opens from disk and prints.\n"
    "Several folders overlay their curves, one colour per run. An evaluation file may also be given in\n"
    "place of a folder. Panels appear when their data exists: loss, accuracy, learning rate, gradient norm,\n"
    "throughput, solver iterations and residuals, accuracy per length / p / iteration cap, iteration\n"
    "histograms, duality, loss by position. An existing --out must be an HTML page (never a log or a\n"
    "checkpoint). `implicit train` writes DIR/report.html by itself (--report 0: not).\n",
    REPORT_OPTS, 2, NULL, 0, 1, -1};

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

/* An evaluation file given in place of a run folder: its own source. */
static int add_file(RunReport *r, const char *path) {
    FILE *f = fs_open_regular(path, NULL);
    if (!f) return IM_EIO;
    char *text;
    size_t n;
    int rc = fs_read_all(f, (size_t)64 << 20, &text, &n);
    fclose(f);
    if (rc) return err_wrap(rc, "%s", path);
    int run = run_report_add_source(r, path);
    rc = run_report_add_eval_json(r, run, text, n, path);
    free(text);
    return rc;
}

int cmd_report(int argc, char **argv) {
    ReportArgs a = {0};
    OptArgs o;
    int rc;
    if (!opts_get(&report_cmd, &a, argc, argv, &o, &rc)) return rc;
    char def[4200];
    const char *out = a.out;
    if (!out) {
        struct stat st;
        if (o.n_pos == 1 && !stat(o.pos[0], &st) && S_ISDIR(st.st_mode)) snprintf(def, sizeof def, "%s/report.html", o.pos[0]);
        else snprintf(def, sizeof def, "report.html");
        out = def;
    }
    RunReport *r = run_report_new(a.title);
    rc = run_report_check_out(out);
    for (int i = 0; i < o.n_pos && !rc; i++) {
        struct stat st;
        if (!stat(o.pos[i], &st) && S_ISREG(st.st_mode)) rc = add_file(r, o.pos[i]);
        else rc = run_report_add_run(r, o.pos[i]) < 0 ? IM_EINVAL : IM_OK;
    }
    if (!rc) rc = run_report_write(r, out);
    run_report_free(r);
    opts_free(&o);
    if (rc) return fail("`implicit report --help`: give the folders that `implicit train --out` wrote");
    if (!report_is_stdout(out)) printf("wrote %s\n", out);
    return 0;
}
