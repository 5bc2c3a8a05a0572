/* tasks_babi.c: the catbabi task's row of the task table (fp-rnn §6.4): windows over the stories of
 * babi.c (a bAbI folder, or generated stories), scored per token. */
#include <stdio.h>
#include <string.h>

#include "../core/check.h"
#include "task_impl.h"

static int babi_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    (void)kind;
    int rc = task_check_eval_pad(c), Lmin, Lmax, C, K;
    if (rc) return rc;
    task_resolve(c, ops, &Lmin, &Lmax, &C, &K);
    if (C < 2) return err_set(IM_EINVAL, "task key 'context': a catbabi window needs >= 2 tokens (got %d)", C);
    if (strcmp(c->babi_split, "valid") && strcmp(c->babi_split, "test"))
        return err_set(IM_EINVAL, "task key 'babi_split': unknown '%s' (valid | test)", c->babi_split);
    return IM_OK;
}

static int babi_task_create(Task *t) {
    const TaskCfg *c = &t->cfg;
    int rc = babi_create(&t->babi, c->babi_dir, c->babi_split, c->babi_eval_stories,
                         rng_hash((uint64_t)c->seed, STREAM_EVAL, 0));
    if (rc) return rc;
    t->V = babi_vocab(t->babi);
    return IM_OK;
}

static void babi_train(const Task *t, Rng *r, int T, int *ids, int *tg) { babi_train_window(t->babi, r, T, ids, tg); }

static void babi_eval(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)r, (void)p, (void)T;
    babi_eval_window(t->babi, len, index, ids, tg);
}

static long long babi_count(const Task *t, int len) { return (long long)babi_eval_windows(t->babi, len); }

static int babi_describe(const Task *t, char *buf, size_t cap) {
    const TaskCfg *c = &t->cfg;
    if (babi_is_generated(t->babi))
        return snprintf(buf, cap, "catbabi: generated stories (%d eval), vocab %d, window %d", c->babi_eval_stories, t->V,
                        t->C);
    return snprintf(buf, cap, "catbabi: %s (%d train / %d %s stories), vocab %d, window %d", c->babi_dir,
                    babi_n_stories(t->babi, BABI_TRAIN), babi_n_stories(t->babi, BABI_EVAL), c->babi_split, t->V, t->C);
}

static int babi_token_str(const Task *t, int id, char *buf, size_t cap) {
    return snprintf(buf, cap, "%s", babi_word(t->babi, id));
}

const TaskOps task_catbabi_ops = {
    .name = "catbabi", .help = "catbabi (6.4)", .metric = "tok_acc", .def_min_len = 3, .def_max_len = 40,
    .def_context = 200, .def_modulus = 2, .check = babi_check, .create = babi_task_create,
    .default_evals = task_context_evals, .seq_len = task_len_as_is, .train_seq_len = task_context_len,
    .train_row = babi_train, .eval_row = babi_eval, .eval_count = babi_count, .describe = babi_describe,
    .token_str = babi_token_str,
};
