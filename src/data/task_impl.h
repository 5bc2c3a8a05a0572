/* task_impl.h: the Task struct and the per-family generator entry points, shared by task.c (config,
 * dispatch, word problems, scoring) and the task families in tasks_copy.c, tasks_formal.c and
 * babi.c. Private to src/data/: programs use task.h. */
#ifndef IMPLICIT_TASK_IMPL_H
#define IMPLICIT_TASK_IMPL_H

#include "../core/rng.h"
#include "babi.h"
#include "task.h"
#include "textdata.h"

/* Stream tags: training and evaluation rows come from disjoint hash inputs and PCG streams. */
enum { STREAM_TRAIN = 1, STREAM_EVAL = 2 };

struct Task {
    TaskCfg cfg;
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
