/* evaluate.h: evaluation of a model on a task at one (length, p): loss and accuracies over a
 * fixed, seeded set of samples (the task's eval stream), so numbers are comparable across runs
 * and independent of batch size and thread count; and the length-generalisation curve over
 * several lengths: its summary and its CSV / JSON files. */
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
    int len;          /* task length (TASK_LEN_VAL: the formal tasks' val mix) */
    int len_min, len_max; /* task lengths actually drawn (formal: the val range, odd or minimum lengths) */
    int mode;         /* EvalMode */
    int max_iter;     /* implicit models: the eval iteration cap used (0: explicit model) */
    double iters;     /* mean solver f-evaluations per forward (simultaneous) or per token */
    double agree;     /* EVAL_BOTH: argmax agreement simultaneous vs sequential (-1: not run) */
    long iter_hist[EVAL_HIST_BINS]; /* sequential: tokens whose solve took iterations in bin k */
    float p;          /* word-problem p (-1: not applicable) */
    int samples;
    double loss;      /* mean CE over scored positions */
    double tok_acc, last10_acc, seq_acc;
    double chance;    /* task_chance: > 0 where scaled accuracy applies (formal tasks), else 0 */
    double scaled_acc;/* (tok_acc - chance) / (1 - chance): 1 = perfect, 0 = chance (= tok_acc when chance is 0) */
    double seconds;
} EvalRow;

/* Evaluate `samples` sequences in batches of `batch` (fewer when the task has fewer distinct eval
 * samples: catbabi windows). The model is put in eval mode. */
int eval_run(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out);
/* Value of a metric by name ("seq_acc", "tok_acc", "last10_acc", "scaled_acc", "loss"); *higher_is_better set. */
int eval_metric(const EvalRow *r, const char *name, double *value, int *higher_is_better);
/* Print the per-token iteration histograms of the sequential rows (nothing if none). */
void eval_print_hist(const EvalRow *rows, int n, FILE *f);
/* Print a table of rows (markdown-style) to f. */
void eval_print_table(const EvalRow *rows, int n, FILE *f);

/* Length generalisation (fp-rnn §6.1) over rows: the longest length whose `metric` is > thr and
 * the shortest where it is <= thr (0 when none); the val row never counts. */
void eval_length_summary(const EvalRow *rows, int n, const char *metric, double thr, int *longest, int *first_fail);
/* The curve as CSV: a header line, then one line per row with the columns
 * len,len_min,len_max,p,mode,samples,loss,tok_acc,last10_acc,seq_acc,scaled_acc,max_iter,iters,agree,seconds
 * (len "val" for the val mix; empty cells where a value does not apply). Atomic write. */
int eval_write_csv(const char *path, const EvalRow *rows, int n);
/* The curve as JSON: {"checkpoint", "task", "metric", "threshold", "longest_len", "first_fail_len",
 * "rows": [{len, p?, samples, loss, tok_acc, last10_acc, seq_acc, chance?, scaled_acc?, mode,
 * max_iter?, iters?, agree?, seconds}]} with len "val" plus len_min / len_max for the val mix.
 * ckpt, task may be NULL (left out). Atomic write. */
int eval_write_json(const char *path, const char *ckpt, const char *task, const EvalRow *rows, int n, const char *metric,
                    double thr);

#endif
