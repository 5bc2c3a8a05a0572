/* test_badinput.c: every row of the bad-input table in docs/bad-input.md, run through the CLI.
 *
 * The document is the test's only input, so the table users read is the table that is checked:
 * its first ```sh block makes the fixtures in a fresh temporary folder, then each table row
 *   | kind | `command` | exit | `message` | `afterwards` |
 * runs `command` there (with the folder of this binary, the build folder, first on PATH) and
 * requires the exit status, that stderr contains `message` (and, on failure, an `error: ` line),
 * and that the shell condition `afterwards` (a file left alone, say) holds. A cell of `-` checks
 * nothing. Commands run under `timeout`, so a hang is a failure, not a stuck suite.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/fsutil.h"
#include "th.h"

#define DOC "docs/bad-input.md"

static char tmpdir[] = "/tmp/implicit_badinput_XXXXXX";

/* Run `cmd` in tmpdir under sh; stdout/stderr to files there. Returns the exit status, or 128 +
 * signal for a command killed by a signal (a crash). */
static int run_sh(const char *cmd, const char *bindir) {
    char script[PATH_MAX];
    snprintf(script, sizeof script, "%s/.case.sh", tmpdir);
    FILE *f = fopen(script, "w");
    if (!f) return -1;
    fprintf(f, "cd '%s' || exit 99\nPATH='%s':\"$PATH\"\nexport PATH OMP_NUM_THREADS=1\n%s\n", tmpdir, bindir, cmd);
    fclose(f);
    char line[PATH_MAX * 2 + 128];
    snprintf(line, sizeof line, "timeout 60 sh '%s' </dev/null >'%s/.stdout' 2>'%s/.stderr'", script, tmpdir, tmpdir);
    int st = system(line);
    if (st == -1) return -1;
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

/* Trim spaces and one pair of surrounding backticks, in place. */
static char *cell(char *s) {
    while (*s == ' ') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\n')) *--e = 0;
    if (e - s >= 2 && s[0] == '`' && e[-1] == '`') {
        e[-1] = 0;
        s++;
    }
    return s;
}

static void run_case(char *row, const char *bindir, int *n_cases) {
    char *c[7];
    int n = 0;
    for (char *p = row; n < 7;) {
        c[n++] = p;
        char *bar = strchr(p, '|');
        if (!bar) break;
        *bar = 0;
        p = bar + 1;
    }
    /* "| a | b | c | d | e |": an empty cell before the first bar and after the last */
    TH_CHECK(n == 7, "%s: a table row needs 5 cells (no '|' inside a cell): %s", DOC, row);
    if (n != 7) return;
    const char *kind = cell(c[1]), *cmd = cell(c[2]), *exit_s = cell(c[3]), *msg = cell(c[4]), *after = cell(c[5]);
    char *end;
    long want = strtol(exit_s, &end, 10);
    TH_CHECK(*exit_s && !*end, "%s: '%s': exit cell '%s' is not a number", DOC, kind, exit_s);
    int rc = run_sh(cmd, bindir);
    (*n_cases)++;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.stderr", tmpdir);
    char *err = th_read_file(path, NULL);
    const char *e = err ? err : "";
    TH_CHECK(rc == want, "%s: `%s` exited %d, the table says %ld; stderr: %.300s", kind, cmd, rc, want, e);
    if (strcmp(msg, "-")) TH_CHECK(strstr(e, msg) != NULL, "%s: `%s`: stderr lacks '%s'; it said: %.300s", kind, cmd, msg, e);
    if (want != 0)
        TH_CHECK(!strncmp(e, "error: ", 7) || strstr(e, "\nerror: "), "%s: `%s`: no 'error: ' line on stderr: %.300s",
                 kind, cmd, e);
    if (strcmp(after, "-")) TH_CHECK(run_sh(after, bindir) == 0, "%s: afterwards `%s` does not hold", kind, after);
    free(err);
}

int main(int argc, char **argv) {
    th_name = "test_badinput";
    (void)argc;
    char bindir[PATH_MAX];
    if (!realpath(argv[0], bindir)) {
        printf("FAIL: cannot resolve %s\n", argv[0]);
        return 1;
    }
    *strrchr(bindir, '/') = 0;
    char *doc = th_read_file(DOC, NULL);
    TH_CHECK(doc != NULL, "cannot read %s (tests run from the repository root)", DOC);
    if (!doc) return th_done();
    TH_CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    /* the fixtures: the first ```sh block */
    char *fx = strstr(doc, "\n```sh\n");
    TH_CHECK(fx != NULL, "%s: no ```sh fixture block", DOC);
    if (fx) {
        fx += 7;
        char *fe = strstr(fx, "\n```");
        TH_CHECK(fe != NULL, "%s: unterminated fixture block", DOC);
        if (fe) {
            *fe = 0;
            int rc = run_sh(fx, bindir);
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/.stderr", tmpdir);
            char *err = th_read_file(path, NULL);
            TH_CHECK(rc == 0, "fixture script exited %d: %.500s", rc, err ? err : "");
            free(err);
            fx = fe + 4;
        }
    }
    /* the table: rows after the header row "| kind |", skipping the |---| separator */
    int n_cases = 0, in_table = 0;
    for (char *line = fx ? fx : doc; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!strncmp(line, "| kind ", 7)) in_table = 1;
        else if (in_table && line[0] != '|') in_table = 0;
        else if (in_table && strncmp(line, "|---", 4)) run_case(line, bindir, &n_cases);
        line = nl ? nl + 1 : NULL;
    }
    TH_CHECK(n_cases >= 40, "%s: only %d cases found", DOC, n_cases);
    printf("bad-input table: %d cases\n", n_cases);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    free(doc);
    return th_done();
}
