/* mc.h: multiple-choice log-likelihood evaluation in the lm-evaluation-harness sense (issue 6,
 * item 6; HellaSwag / PIQA / ARC-style "loglikelihood" requests).
 *
 * Task file: JSONL, one item per line: {"context": str, "choices": [str, ...], "gold": int}.
 * Aliases: "query" or "ctx" for context, "endings" for choices, "label" for gold (an int or a
 * string of digits, as in HellaSwag files). Blank lines are skipped; other keys are ignored.
 *
 * Scoring: for each choice, loglik = sum over the continuation tokens of log p(token | prefix),
 * from one full-sequence forward (model_fwd, evaluation mode) over context+choice. The harness's
 * request rule: trailing whitespace of the context moves to the front of the continuation; the
 * whole string context+continuation is encoded once (joint tokenisation) and the continuation is
 * the tokens after the context's own token count. When the joint tokens do not start with the
 * context's tokens (a merge across the boundary, possible with BPE), the context and the
 * continuation are encoded separately and concatenated, so the context part is scored exactly as
 * encoded alone (`n_split` counts such pairs). Log-probabilities are normalised over the model's
 * whole (padded) output row, as the training loss is. Sequences longer than max_seq_len + 1
 * tokens lose context tokens from the left (the harness truncates the same way).
 *
 * Metrics: acc = argmax_i loglik_i == gold; acc_norm = argmax_i loglik_i / bytes(choice_i) == gold
 * (the harness's character normalisation, in bytes); greedy_acc = the gold continuation is the
 * greedy argmax at every one of its tokens (the LAMBADA metric when each item has one choice).
 * Ties pick the lowest index.
 */
#ifndef IMPLICIT_MC_H
#define IMPLICIT_MC_H

#include <stddef.h>

#include "../models/model.h"
#include "../tok/tokenizer.h"

typedef struct {
    char *context;          /* (context_len + 1) bytes, NUL-terminated (may hold \0 from \u0000) */
    size_t context_len;
    char **choices;         /* (n_choices) each (choice_len[i] + 1) bytes */
    size_t *choice_len;     /* (n_choices) */
    int n_choices;          /* >= 1 */
    int gold;               /* 0 .. n_choices-1 */
    int line;               /* 1-based line in the file */
} McItem;

typedef struct {
    McItem *items;          /* (n) */
    int n;
} McTask;

/* Read a JSONL task; at most `limit` items (<= 0 = all). IM_EIO / IM_EFORMAT naming the file and
 * line (missing key, empty choice list, gold out of range, an empty choice). Free with mc_free. */
int mc_load(McTask *t, const char *path, int limit);
/* Parse JSONL text (the same rules; `where` names it in messages). */
int mc_parse(McTask *t, const char *text, size_t len, int limit, const char *where);
void mc_free(McTask *t);

/* Token ids of context+choice as scored: *ids (malloc'd, caller frees) of *n ids whose first
 * *n_ctx are context; *split = 1 when the separate-encoding fallback was used. delim (may be "")
 * is inserted between context and choice. IM_EINVAL when the context encodes to nothing and the
 * tokenizer has no end-of-text id to stand for it (the harness's empty-context rule). */
int mc_tokenize(const Tokenizer *tok, const McItem *it, int choice, const char *delim, int **ids, int *n, int *n_ctx,
                int *split);

typedef struct {
    double *loglik;         /* (n_choices) summed log-likelihood of each continuation */
    int *n_tokens;          /* (n_choices) continuation tokens */
    int *greedy;            /* (n_choices) 1 if every continuation token was the argmax */
    int pred, pred_norm;    /* argmax of loglik, of loglik / bytes */
} McItemResult;

typedef struct {
    int n;                  /* items scored */
    double acc, acc_norm, greedy_acc;
    double gold_loglik;     /* mean over items of the gold choice's loglik */
    double gold_nll_per_token; /* total -loglik / tokens of the gold choices */
    long forwards;          /* (context, choice) pairs = full-sequence forwards */
    long tokens;            /* tokens run through the model */
    int n_split;            /* pairs scored with the separate-encoding fallback */
    int n_truncated;        /* pairs whose context was cut on the left */
    double iters;           /* implicit / fp models: mean solver f-evaluations per forward */
    double iters_ref;       /* fp models: iters in the reference's convention (iters + 1); 0 otherwise */
    double seconds;
} McSummary;

typedef struct {
    const char *delim;      /* between context and choice ("" = none) */
    /* called after each item (may be NULL) */
    void (*progress)(void *ctx, int done, int total, const McSummary *so_far);
    void *progress_ctx;
} McOpts;

/* Score every item of t. res:(t->n) filled (free with mc_results_free) | NULL; *sum the totals.
 * The model is put in evaluation mode (restored after). */
int mc_run(Model *m, const Tokenizer *tok, const McTask *t, const McOpts *o, McItemResult *res, McSummary *sum);
void mc_results_free(McItemResult *res, int n);
/* {"checkpoint", "task", "tokenizer", "n", "acc", "acc_norm", "greedy_acc", "gold_loglik",
 *  "gold_nll_per_token", "n_split", "n_truncated", "iters", "iters_ref" (fp models), "seconds",
 *  "items": [{"line", "gold", "pred", "pred_norm", "loglik": [...], "tokens": [...]}]}.
 * A report (io/atomic.h; "-" = stdout). */
int mc_write_json(const char *path, const char *ckpt, const char *task_path, const char *tok_spec, const McTask *t,
                  const McItemResult *res, const McSummary *sum);

#endif
