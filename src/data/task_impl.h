/* task_impl.h: the Task struct, the TaskOps row every family provides, and the families' own entry
 * points, shared by task.c (config, the table, batches, scoring) and the families (tasks_group.c,
 * tasks_copy.c, tasks_formal.c, tasks_babi.c, tasks_lm.c). Private to src/data/ (and to the tests
 * that define a family of their own): programs use task.h. */
#ifndef IMPLICIT_TASK_IMPL_H
#define IMPLICIT_TASK_IMPL_H

#include "../core/rng.h"
#include "babi.h"
#include "task.h"
#include "textdata.h"

/* Stream tags: training and evaluation rows come from disjoint hash inputs and PCG streams. */
enum { STREAM_TRAIN = 1, STREAM_EVAL = 2 };

/* One task family: everything task.c needs to know about it (docs/extending.md). The rows of the
 * TaskKind enum are listed in task.c (TASKS); each row lives in its family's file. Functions may
 * be NULL where said. */
typedef struct TaskOps {
    const char *name;       /* the `task` key's value */
    const char *help;       /* its entry in the key's help */
    int uses_group;         /* the group and monoid keys apply (word, ios); the others get Z1 */
    int uses_monoid;        /* the monoid M is built from the key (word), else trivial */
    int uses_p;             /* evaluated at the eval_ps values (word), else at p = -1 */
    int formal;             /* answer-only formal task: eval length 'val', chance 1/modulus */
    int min_train_len;      /* smallest train_len (0 = 1) */
    int len_curriculum;     /* the len_curriculum key applies: train_row's T follows seq_len(train length) */
    const char *metric;     /* the length metric: "seq_acc" | "tok_acc" | "loss" */
    /* defaults of the "0 = task default" keys min_len, max_len, context, modulus */
    int def_min_len, def_max_len, def_context, def_modulus;
    /* family key checks, after the shared ones (bounds, group, train_len, eval lists) | NULL */
    int (*check)(const TaskCfg *c, const struct TaskOps *ops, int kind);
    int (*create)(Task *t);                 /* set t->V (open data files); status */
    int (*finish)(const Task *t);           /* once the eval lengths are known | NULL */
    void (*default_evals)(Task *t);         /* t->lens (t->ps is {-1} unless set here) */
    int (*seq_len)(const Task *t, int len); /* model positions of an eval row at length len */
    int (*train_seq_len)(const Task *t);    /* model positions of a training row */
    /* T: the step's model positions (task_train_seq_len, or seq_len of the curriculum's length) */
    void (*train_row)(const Task *t, Rng *r, int T, int *ids, int *tg);
    /* index: the row's number in the evaluation stream (windowed tasks read it, not r) */
    void (*eval_row)(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg);
    long long (*eval_count)(const Task *t, int len); /* distinct eval rows at len >= 1 | NULL = unbounded */
    void (*len_range)(const Task *t, int len, int *lo, int *hi); /* lengths an eval row spans | NULL = len */
    int (*describe)(const Task *t, char *buf, size_t cap);
    int (*token_str)(const Task *t, int id, char *buf, size_t cap);
} TaskOps;

extern const TaskOps task_word_ops, task_ios_ops, task_copy_ops, task_catbabi_ops, task_lm_ops;
extern const TaskOps task_parity_ops, task_even_pairs_ops, task_cycle_ops, task_modarith_ops, task_brackets_ops;

/* A task of a family given by its row rather than by cfg->task (a family outside the table, e.g. a
 * test's); kind is what task_kind reports. Same contract as task_create. */
int task_create_ops(Task **out, const TaskOps *ops, int kind, const TaskCfg *c);
/* The key checks of every task that is not a group task (eval_pad), for the rows' check. */
int task_check_eval_pad(const TaskCfg *c);
/* Add L to t->lens unless present (default_evals helpers). */
void task_add_len(Task *t, int L);
/* The "0 = task default" keys min_len, max_len, context, modulus, resolved with the row's defaults. */
void task_resolve(const TaskCfg *c, const TaskOps *ops, int *Lmin, int *Lmax, int *C, int *K);
/* Rows shared by the windowed tasks (catbabi, lm): T = len, train rows of the context, one
 * eval length (the context). */
int task_len_as_is(const Task *t, int len);
int task_context_len(const Task *t);
void task_context_evals(Task *t);

struct Task {
    TaskCfg cfg;
    const TaskOps *ops;           /* its family's row */
    int kind;                     /* TaskKind */
    int ios;                      /* kind == TASK_IOS (kept for the word-problem code paths) */
    Group G;                      /* word problems: the group; other tasks: Z1, named "-" */
    Group M;                      /* word task: the monoid (order 1 for trivial); unused otherwise */
    int V;                        /* vocabulary */
    float p;                      /* cfg.p as the float the sampler compares against */
    int C;                        /* copy / formal: row length; catbabi: window length */
    int Lmin, Lmax;               /* copy / formal: training length range (defaults resolved) */
    int modulus;                  /* formal tasks: the answer alphabet (chance = 1/modulus) */
    BabiData *babi;               /* catbabi: stories and vocabulary */
    TextData *text;               /* lm: the token file */
    int n_lens, n_ps;
    int lens[TASK_MAX_EVAL];      /* (n_lens) eval task lengths; TASK_LEN_VAL = the val range */
    float ps[TASK_MAX_EVAL];      /* (n_ps) eval p values ({-1} for every task but word) */
    int n_cur;                    /* len_curriculum entries: length cur_len[i] before step cur_step[i] */
    int cur_len[TASK_MAX_EVAL], cur_step[TASK_MAX_EVAL];
};

/* The generator of one row: a pure function of (seed, stream, a, b). */
void task_row_rng(Rng *r, const Task *t, uint64_t stream, uint64_t a, uint64_t b);

/* copy (tasks_copy.c). Row lengths are the task_seq_len of the caller. */
int copy_seq_len(const Task *t, int len);
void copy_train_row(const Task *t, Rng *r, int *ids, int *tg);
void copy_eval_row(const Task *t, Rng *r, int len, int T, int *ids, int *tg);

/* formal-language tasks (tasks_formal.c). len = TASK_LEN_VAL draws from [val_min, val_max]. */
int formal_vocab(int kind, int modulus);
int formal_seq_len(const Task *t, int len);
void formal_len_range(const Task *t, int len, int *lo, int *hi);
void formal_train_row(const Task *t, Rng *r, int T, int *ids, int *tg);
void formal_eval_row(const Task *t, Rng *r, int len, int T, int *ids, int *tg);
int formal_token_str(const Task *t, int id, char *buf, size_t cap);

/* language modelling on a token file (tasks_lm.c). lm_create opens cfg.data, sets V and fills
 * cfg.tokenizer from the file when empty (IM_EIO / IM_EFORMAT from the reader, IM_EINVAL when
 * the tokenizer key names another tokenizer); lm_check, once the eval lengths are known:
 * IM_EINVAL when a split is too short for the context or for one window of an eval length. */
int lm_create(Task *t);
int lm_check(const Task *t);
void lm_train_row(const Task *t, Rng *r, int *ids, int *tg);
int64_t lm_eval_windows(const Task *t, int len);
void lm_eval_row(const Task *t, int len, int64_t index, int *ids, int *tg);
int lm_describe(const Task *t, char *buf, size_t cap);
int lm_token_str(const Task *t, int id, char *buf, size_t cap);

#endif
