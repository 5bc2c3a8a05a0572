/* progress.h: the training progress display. On a terminal: one line redrawn in place with a
 * bar, step, loss, accuracy, tokens/s and ETA. Elsewhere (pipes, CI logs): a plain line per
 * update. Writes to stderr so stdout stays for tables. */
#ifndef IMPLICIT_PROGRESS_H
#define IMPLICIT_PROGRESS_H

typedef enum { PROGRESS_NONE, PROGRESS_BAR, PROGRESS_PLAIN } ProgressMode;

typedef struct {
    ProgressMode mode;
    int total;
    double t_start;
    int step_start;   /* steps already done when this process started (resume) */
    int drawn;        /* a bar line is on screen */
} Progress;

/* mode: "auto" | "bar" | "plain" | "none" (auto = bar on a TTY, plain otherwise). */
void progress_init(Progress *p, const char *mode, int total, int step_start);
void progress_update(Progress *p, int step, double loss, double acc, double tok_s, const char *extra);
/* Print a message without tearing the bar (ends the bar line first). */
void progress_note(Progress *p, const char *msg);
void progress_done(Progress *p);

#endif
