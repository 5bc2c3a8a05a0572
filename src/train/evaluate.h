/* evaluate.h: evaluation of a model on a task at one (length, p): loss and accuracies over a
 * fixed, seeded set of samples (the task's eval stream), so numbers are comparable across runs
 * and independent of batch size and thread count; and the length-generalisation curve over
 * several lengths: its summary and its CSV / JSON files.
 * Language models (task lm) also get perplexity per row, and the loss by position within long
 * windows (eval_positions): the length-extrapolation curve of implicit-lm §9.1 (paper Fig. 4). */
#ifndef IMPLICIT_EVALUATE_H
#define IMPLICIT_EVALUATE_H

#include "../data/task.h"
#include "../io/json.h"
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
    int seq_max_iter; /* the per-token cap of the sequential solve (implicit: eval_seq_f_max_iter) */
    double iters;     /* mean solver f-evaluations per forward (simultaneous) or per token */
    double iters_ref; /* Fixed-Point RNNs: iters in the reference's convention (iter_idx + 1 per
                       * solve: iters + 1, so >= 1); 0 for the other models */
    double agree;     /* EVAL_BOTH: argmax agreement simultaneous vs sequential (-1: not run) */
    double conv_sim;  /* simultaneous: share of the sequences whose solve reached f_tol (-1: not run / no tolerance) */
    double conv_seq;  /* sequential: share of the (sequence, token) solves that reached f_tol (-1: likewise) */
    long iter_hist[EVAL_HIST_BINS]; /* sequential: tokens whose solve took iterations in bin k */
    float p;          /* word-problem p (-1: not applicable) */
    int samples;
    double loss;      /* mean CE over scored positions */
    double tok_acc, last10_acc, seq_acc;
    double chance;    /* task_chance: > 0 where scaled accuracy applies (formal tasks), else 0 */
    double scaled_acc;/* (tok_acc - chance) / (1 - chance): 1 = perfect, 0 = chance (= tok_acc when chance is 0) */
    double ppl;       /* task lm: exp(loss), the validation perplexity (0: not a language-modelling row) */
    double seconds;
} EvalRow;

/* Evaluate `samples` sequences in batches of `batch` (fewer when the task has fewer distinct eval
 * samples: catbabi windows). The model is put in eval mode. */
int eval_run(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out);
/* eval_run, calling progress(ctx, done, total) after each batch (sequences done of total). */
typedef void (*EvalProgressFn)(void *ctx, int done, int total);
int eval_run_progress(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out,
                      EvalProgressFn progress, void *ctx);
/* Perplexity by position for language models: windows of `len` tokens (the task's eval windows,
 * e.g. 4 x the training context) cut into buckets of `width` positions. Position i is the
 * prediction of window token i+1 from tokens 0..i, so bucket k = positions [k width, (k+1) width)
 * holds the predictions made with k width+1 .. (k+1) width tokens of context. */
#define EVAL_MAX_BUCKETS 64
typedef struct {
    EvalRow row;          /* the whole windows: loss, ppl, iterations, agreement, samples */
    int width, n_buckets; /* n_buckets = ceil(len / width) <= EVAL_MAX_BUCKETS */
    double loss[EVAL_MAX_BUCKETS];   /* (n_buckets) mean CE over the bucket's scored positions */
    double tokens[EVAL_MAX_BUCKETS]; /* (n_buckets) scored positions in the bucket */
} EvalPos;

/* eval_run at length len plus the per-bucket losses (any task; `implicit eval --pos_buckets`
 * uses it for lm). The token-weighted mean of the bucket losses equals out->row.loss.
 * IM_EINVAL when width < 1 or len needs more than EVAL_MAX_BUCKETS buckets. */
int eval_positions(Model *m, const Task *t, int len, int width, int samples, int batch, int mode, EvalPos *out);
/* One markdown table per entry: positions, tokens, loss, perplexity. */
void eval_print_positions(const EvalPos *pos, int n, FILE *f);
/* CSV, one line per bucket: len,width,lo,hi,mode,max_iter,samples,tokens,loss,ppl (lo..hi inclusive
 * positions; max_iter empty for explicit models). A report (io/atomic.h; "-" = stdout). */
int eval_write_pos_csv(const char *path, const EvalPos *pos, int n);

/* The fixed-point gap of an implicit model at one (length, p): the training forward (the training
 * solve at the curriculum's current cap and tolerance, then the phantom steps; no dropout)
 * against a tight solve (the evaluation loop at tolerance `tol` with cap `max_iter`), both
 * simultaneous, on the same samples. A model that has learned its fixed point scores the same on
 * both; one that has learned the truncated iterate scores better at the training cap. */
typedef struct {
    EvalRow train_cap, tight;
} EvalGap;
int eval_gap(Model *m, const Task *t, int len, float p, int samples, int batch, double tol, int max_iter, EvalGap *out);

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
 * len,len_min,len_max,p,mode,samples,loss,tok_acc,last10_acc,seq_acc,scaled_acc,max_iter,iters,agree,conv_sim,conv_seq,seconds
 * (len "val" for the val mix; empty cells where a value does not apply), plus a last column ppl
 * when the rows are language-modelling rows (task lm). A report (io/atomic.h; "-" = stdout). */
int eval_write_csv(const char *path, const EvalRow *rows, int n);
/* The curve as JSON: {"checkpoint", "task", "metric", "threshold", "longest_len", "first_fail_len",
 * "rows": [{len, p?, samples, loss, ppl?, tok_acc, last10_acc, seq_acc, chance?, scaled_acc?, mode,
 * max_iter?, iters?, agree?, conv_sim?, conv_seq?, iter_hist?, seconds}]} with len "val" plus len_min / len_max for the val mix.
 * ckpt, task may be NULL (left out); metric NULL leaves out metric, threshold and the length
 * summary (language models have no accuracy criterion). A report (io/atomic.h; "-" = stdout). */
int eval_write_json(const char *path, const char *ckpt, const char *task, const EvalRow *rows, int n, const char *metric,
                    double thr);
/* The same, plus "positions": [{len, width, samples, mode, max_iter?, loss, ppl,
 * "buckets": [{lo, hi, tokens, loss, ppl}]}] when n_pos > 0. */
int eval_write_json_pos(const char *path, const char *ckpt, const char *task, const EvalRow *rows, int n,
                        const char *metric, double thr, const EvalPos *pos, int n_pos);
/* The same JSON as text (malloc'ed, *len bytes, NUL-terminated; NULL when out of memory), for
 * readers in the same process (`implicit eval --report`, the demo's report). */
char *eval_json_text(const char *ckpt, const char *task, const EvalRow *rows, int n, const char *metric, double thr,
                     const EvalPos *pos, int n_pos, size_t *len);
/* "iter_hist": [10 counts] of a sequential row of an implicit model (nothing otherwise), in a
 * JSON row being written (eval files and the training log). */
void eval_json_hist(JsonBuf *b, const EvalRow *r);


#endif
