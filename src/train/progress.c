/* progress.c: see progress.h. */
#include "progress.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../core/timer.h"

enum { BAR_MAX = 30, BAR_MIN = 10, DEFAULT_WIDTH = 80 };
#define TICK_S 0.2   /* a step redraws the bar at most this often (so at least twice a second) */
#define PHASE_S 0.1

/* A resize only sets this flag (all a signal handler may safely do); the next draw re-reads the
 * width. Starts set so that the first draw reads it. */
static volatile sig_atomic_t winch = 1;
static struct sigaction old_winch;

static void on_winch(int sig) {
    (void)sig;
    winch = 1;
}

static int terminal_width(Progress *p) {
    if (winch || p->width <= 0) {
        struct winsize ws;
        winch = 0;
        p->width = ioctl(fileno(stderr), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : DEFAULT_WIDTH;
    }
    return p->width;
}

void progress_init(Progress *p, const char *mode, int total, int step_start) {
    memset(p, 0, sizeof *p);
    p->total = total;
    p->step_start = step_start;
    p->step = step_start;
    p->t_start = timer_now();
    if (!strcmp(mode, "none")) p->mode = PROGRESS_NONE;
    else if (!strcmp(mode, "bar")) p->mode = PROGRESS_BAR;
    else if (!strcmp(mode, "plain")) p->mode = PROGRESS_PLAIN;
    else p->mode = isatty(fileno(stderr)) ? PROGRESS_BAR : PROGRESS_PLAIN;
    if (p->mode == PROGRESS_BAR) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_winch;
        sa.sa_flags = SA_RESTART;   /* reads and writes of checkpoints must not fail with EINTR */
        sigemptyset(&sa.sa_mask);
        p->restore_winch = sigaction(SIGWINCH, &sa, &old_winch) == 0;
        winch = 1;
    }
}

size_t progress_format(char *buf, size_t cap, int width, double frac, const char *text) {
    if (!cap) return 0;
    size_t avail = width > 1 ? (size_t)width - 1 : 0, tlen = strlen(text);
    /* bar cells: a quarter of the line, BAR_MIN..BAR_MAX, so that the bar keeps its size while the
     * text changes; none on a line too narrow for a bar and some text. "[" cells "] " take cells + 3
     * columns. */
    size_t cells = avail / 4 < BAR_MIN ? BAR_MIN : avail / 4 > BAR_MAX ? BAR_MAX : avail / 4;
    if (avail < 3 * BAR_MIN) cells = 0;
    size_t at = 0;
    if (!(frac >= 0)) frac = 0;   /* also NaN */
    if (frac > 1) frac = 1;
    if (cells && cells + 3 < cap) {
        size_t fill = (size_t)(frac * (double)cells + 1e-9);
        buf[at++] = '[';
        for (size_t i = 0; i < cells; i++) buf[at++] = i < fill ? '#' : '.';
        buf[at++] = ']';
        buf[at++] = ' ';
    }
    size_t room = avail > at ? avail - at : 0, n = 0;
    /* the longest prefix of whole characters with at most `room` columns */
    for (size_t c = 0; n < tlen; c++) {
        size_t next = n + 1;
        while (next < tlen && ((unsigned char)text[next] & 0xC0) == 0x80) next++;
        if (c + 1 > room || at + next >= cap) break;
        n = next;
    }
    memcpy(buf + at, text, n);
    at += n;
    buf[at] = 0;
    return at;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, cap, "--:--");
    else if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, cap, "%02d:%02d", (int)s / 60, (int)s % 60);
}

/* Put p->line on screen in place of the previous bar line. */
static void show_line(Progress *p) {
    fprintf(stderr, "\r%s\033[K", p->line);
    fflush(stderr);
    p->drawn = 1;
    p->t_drawn = timer_now();
}

static void draw_train(Progress *p) {
    double el = timer_now() - p->t_start;
    int done = p->step - p->step_start;
    double eta = done > 0 ? el / done * (p->total - p->step) : -1;
    char e[16], r[16], text[400], rate[32] = "- tok/s";
    fmt_time(e, sizeof e, el);
    fmt_time(r, sizeof r, eta);
    if (p->have_stats) snprintf(rate, sizeof rate, "%.0f tok/s", p->tok_s);
    if (p->step > p->step_start || p->have_stats)
        snprintf(text, sizeof text, "%d/%d  loss %.4f  acc %5.1f%%  %s  %s<%s%s%s", p->step, p->total, p->loss,
                 100 * p->acc, rate, e, r, p->extra[0] ? "  " : "", p->extra);
    else
        snprintf(text, sizeof text, "%d/%d  %s<%s", p->step, p->total, e, r);
    progress_format(p->line, sizeof p->line, terminal_width(p), p->total > 0 ? (double)p->step / p->total : 0, text);
    show_line(p);
    p->phase_shown = 0;
}

void progress_update(Progress *p, int step, double loss, double acc, double tok_s, const char *extra) {
    if (p->mode == PROGRESS_NONE) return;
    p->step = step;
    p->loss = loss;
    p->acc = acc;
    p->tok_s = tok_s;
    p->have_stats = 1;
    snprintf(p->extra, sizeof p->extra, "%s", extra ? extra : "");
    if (p->mode == PROGRESS_PLAIN) {
        char e[16], r[16];
        double el = timer_now() - p->t_start;
        int done = step - p->step_start;
        fmt_time(e, sizeof e, el);
        fmt_time(r, sizeof r, done > 0 ? el / done * (p->total - step) : -1);
        fprintf(stderr, "step %d/%d  loss %.4f  acc %.2f%%  %.0f tok/s  elapsed %s  eta %s%s%s\n", step, p->total, loss,
                100 * acc, tok_s, e, r, extra ? "  " : "", extra ? extra : "");
        return;
    }
    draw_train(p);
}

void progress_tick(Progress *p, int step, double loss, double acc) {
    if (p->mode != PROGRESS_BAR) return;
    p->step = step;
    p->loss = loss;
    p->acc = acc;
    if (timer_now() - p->t_drawn >= TICK_S) draw_train(p);
}

void progress_phase(Progress *p, const char *label, double frac) {
    if (p->mode != PROGRESS_BAR || (frac > 0 && timer_now() - p->t_drawn < PHASE_S)) return;
    progress_format(p->line, sizeof p->line, terminal_width(p), frac, label);
    show_line(p);
    p->phase_shown = 1;
}

void progress_eval_batch(void *eval_ctx, int done, int total) {
    const ProgressEval *e = eval_ctx;
    char label[160], pstr[32] = "", el[16];
    if (e->p >= 0) snprintf(pstr, sizeof pstr, " p %.2f", e->p);
    fmt_time(el, sizeof el, timer_now() - e->t0);
    snprintf(label, sizeof label, "eval %d/%d  length %d%s  %d/%d  %s", e->row + 1, e->rows, e->len, pstr, done, total, el);
    progress_phase(e->pg, label, (e->row + (total > 0 ? (double)done / total : 1)) / (e->rows > 0 ? e->rows : 1));
}

void progress_note(Progress *p, const char *msg) {
    if (p->drawn) fputs("\r\033[K", stderr);   /* the note takes the bar's line ... */
    fprintf(stderr, "%s\n", msg);
    if (p->drawn) draw_train(p);               /* ... and the training bar comes back below it */
    fflush(stderr);
}

void progress_done(Progress *p) {
    if (p->drawn && p->phase_shown && p->have_stats) draw_train(p);   /* end on the training line, not an eval bar */
    if (p->drawn) {
        /* a training line stays; a display of evaluation bars only is wiped (the results follow) */
        fputs(p->have_stats ? "\n" : "\r\033[K", stderr);
        fflush(stderr);
        p->drawn = 0;
    }
    if (p->restore_winch) {
        sigaction(SIGWINCH, &old_winch, NULL);
        p->restore_winch = 0;
    }
}
