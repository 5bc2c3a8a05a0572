/* progress.h: the training progress display. On a terminal: one line redrawn in place with a
 * bar, step, loss, accuracy, tokens/s and ETA, fitted to the terminal's width (re-read after a
 * resize), redrawn at least twice a second, and a bar of its own during evaluations; notes
 * (evaluation results, skipped steps) are printed above it. Elsewhere (pipes, CI logs): a plain
 * line per update. Writes to stderr so stdout stays for tables. */
#ifndef IMPLICIT_PROGRESS_H
#define IMPLICIT_PROGRESS_H

#include <stddef.h>

typedef enum { PROGRESS_NONE, PROGRESS_BAR, PROGRESS_PLAIN } ProgressMode;

typedef struct {
    ProgressMode mode;
    int total;
    double t_start;
    int step_start;   /* steps already done when this process started (resume) */
    int drawn;        /* a bar line is on screen */
    int width;        /* terminal columns (bar mode) */
    double t_drawn;   /* when the bar was last drawn */
    /* the latest training values, redrawn by progress_tick between updates */
    int step;
    double loss, acc, tok_s;
    int have_stats;   /* loss/acc/tok_s hold an update's values */
    char extra[96];
    char line[512];   /* the bar line on screen (without the bar's \r and erase codes) */
    int phase_shown;  /* the line on screen is a progress_phase bar */
    int restore_winch;/* a SIGWINCH handler was installed by progress_init */
} Progress;

/* mode: "auto" | "bar" | "plain" | "none" (auto = bar on a TTY, plain otherwise). */
void progress_init(Progress *p, const char *mode, int total, int step_start);
/* A log point: a plain line, or the bar redrawn with these values. */
void progress_update(Progress *p, int step, double loss, double acc, double tok_s, const char *extra);
/* Every step: the bar is redrawn (with this step's loss and accuracy) when 0.5 s have passed
 * since it was last drawn; a cheap clock read otherwise, and nothing in plain mode. */
void progress_tick(Progress *p, int step, double loss, double acc);
/* A bar for a secondary job (an evaluation): frac of it done, described by label. Bar mode only;
 * redrawn at most every 0.1 s (always at frac 0). */
void progress_phase(Progress *p, const char *label, double frac);
/* An evaluation sweep's bar, "eval 3/17  length 16 p 0.90  64/256  00:01": pass progress_eval_batch
 * and a ProgressEval to eval_run_progress (evaluate.h), one ProgressEval per row of the sweep. */
typedef struct {
    Progress *pg;
    int row, rows;    /* this row of the sweep (0-based) and the sweep's rows */
    int len;          /* the row's length */
    float p;          /* its word-problem p (< 0: none) */
    double t0;        /* when the sweep started (timer_now) */
} ProgressEval;
void progress_eval_batch(void *eval_ctx, int done, int total);

/* Print a message without tearing the bar (it is redrawn below the message). */
void progress_note(Progress *p, const char *msg);
/* Ends the display: the training line stays on screen; a display that only showed evaluation
 * bars (no progress_update) is wiped. */
void progress_done(Progress *p);

/* The bar line for a terminal of `width` columns into buf (cap bytes): "[###...] " then text,
 * using at most width - 1 columns (a line that fills the last column makes some terminals wrap):
 * the bar takes a quarter of them (10 to 30 cells; none below 31 columns) and the text is cut to
 * the rest (at a UTF-8 character boundary; one column per character). frac in [0, 1]. Returns
 * the bytes written. */
size_t progress_format(char *buf, size_t cap, int width, double frac, const char *text);

#endif
