/* evaluate.h: evaluation of a model on a task at one (length, p): loss and accuracies over a
 * fixed, seeded set of samples (the task's eval stream), so numbers are comparable across runs
 * and independent of batch size and thread count. */
#ifndef IMPLICIT_EVALUATE_H
#define IMPLICIT_EVALUATE_H

#include "../data/task.h"
#include "../models/model.h"

/* Simultaneous: the whole sequence per forward (implicit models: the eval loop of spec §3.2).
 * Sequential: token by token through model_step (implicit: spec §4, explicit: recurrent /
 * KV-cache decoding). Both: sequential metrics plus the duality metric (argmax agreement). */
typedef enum { EVAL_SIMULTANEOUS = 0, EVAL_SEQUENTIAL = 1, EVAL_BOTH = 2 } EvalMode;

int eval_mode_parse(const char *s);   /* "simultaneous" | "sequential" | "both"; -1 if unknown */
const char *eval_mode_name(int mode);

/* Histogram bins of solver iterations per token: 0, 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, >128. */
#define EVAL_HIST_BINS 10

typedef struct {
    int len;          /* task length */
    int mode;         /* EvalMode */
    int max_iter;     /* implicit models: the eval iteration cap used (0: explicit model) */
    double iters;     /* mean solver f-evaluations per forward (simultaneous) or per token */
    double agree;     /* EVAL_BOTH: argmax agreement simultaneous vs sequential (-1: not run) */
    long iter_hist[EVAL_HIST_BINS]; /* sequential: tokens whose solve took iterations in bin k */
    float p;          /* word-problem p (-1: not applicable) */
    int samples;
    double loss;      /* mean CE over scored positions */
    double tok_acc, last10_acc, seq_acc;
    double seconds;
} EvalRow;

/* Evaluate `samples` sequences in batches of `batch`. The model is put in eval mode. */
int eval_run(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out);
/* Value of a metric by name ("seq_acc", "tok_acc", "last10_acc", "loss"); *higher_is_better set. */
int eval_metric(const EvalRow *r, const char *name, double *value, int *higher_is_better);
/* Print the per-token iteration histograms of the sequential rows (nothing if none). */
void eval_print_hist(const EvalRow *rows, int n, FILE *f);
/* Print a table of rows (markdown-style) to f. */
void eval_print_table(const EvalRow *rows, int n, FILE *f);

#endif
