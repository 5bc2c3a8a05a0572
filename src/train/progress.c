/* progress.c: see progress.h. */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/timer.h"

void progress_init(Progress *p, const char *mode, int total, int step_start) {
    memset(p, 0, sizeof *p);
    p->total = total;
    p->step_start = step_start;
    p->t_start = timer_now();
    if (!strcmp(mode, "none")) p->mode = PROGRESS_NONE;
    else if (!strcmp(mode, "bar")) p->mode = PROGRESS_BAR;
    else if (!strcmp(mode, "plain")) p->mode = PROGRESS_PLAIN;
    else p->mode = isatty(fileno(stderr)) ? PROGRESS_BAR : PROGRESS_PLAIN;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, cap, "--:--");
    else if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, cap, "%02d:%02d", (int)s / 60, (int)s % 60);
}

void progress_update(Progress *p, int step, double loss, double acc, double tok_s, const char *extra) {
    if (p->mode == PROGRESS_NONE) return;
    double el = timer_now() - p->t_start;
    int done = step - p->step_start;
    double eta = done > 0 ? el / done * (p->total - step) : -1;
    char e[16], r[16];
    fmt_time(e, sizeof e, el);
    fmt_time(r, sizeof r, eta);
    if (p->mode == PROGRESS_PLAIN) {
        fprintf(stderr, "step %d/%d  loss %.4f  acc %.2f%%  %.0f tok/s  elapsed %s  eta %s%s%s\n", step, p->total, loss,
                100 * acc, tok_s, e, r, extra ? "  " : "", extra ? extra : "");
        return;
    }
    enum { W = 24 };
    char bar[W + 1];
    int fill = p->total > 0 ? (int)((double)W * step / p->total) : 0;
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
    bar[W] = 0;
    fprintf(stderr, "\r[%s] %d/%d  loss %.4f  acc %5.1f%%  %.0f tok/s  %s<%s%s%s\033[K", bar, step, p->total, loss,
            100 * acc, tok_s, e, r, extra ? "  " : "", extra ? extra : "");
    fflush(stderr);
    p->drawn = 1;
}

void progress_note(Progress *p, const char *msg) {
    if (p->drawn) { fputc('\n', stderr); p->drawn = 0; }
    fprintf(stderr, "%s\n", msg);
}

void progress_done(Progress *p) {
    if (p->drawn) { fputc('\n', stderr); p->drawn = 0; }
}
