/* tasks_lm.c: the "lm" task, language modelling on a token file (see task.h, textdata.h).
 *
 * Training windows start anywhere in the train split, drawn from the row's own generator, so a
 * batch is a pure function of (seed, step, row) like every other task and resuming needs only the
 * step. Evaluation windows of length L tile the validation split: window i has inputs
 * val[iL .. iL+L-1] and targets val[iL+1 .. iL+L], so the targets of consecutive windows cover
 * val[1 .. nL] exactly once and in order. Every window starts from an empty state, as in training.
 */
#include <stdio.h>
#include <string.h>

#include "../core/check.h"
#include "task_impl.h"

int lm_create(Task *t) {
    int rc = textdata_open(&t->text, t->cfg.data);
    if (rc) return err_wrap(rc, "task key 'data'");
    const char *spec = textdata_spec(t->text);
    if (!t->cfg.tokenizer[0]) {
        snprintf(t->cfg.tokenizer, sizeof t->cfg.tokenizer, "%s", spec);
    } else if (strcmp(t->cfg.tokenizer, spec)) {
        /* the ids would be decoded with another tokenizer than the one that made them */
        return err_set(IM_EINVAL, "task key 'tokenizer': '%s', but %s was made with '%s' (give --tokenizer \"\" to use the "
                       "file's)", t->cfg.tokenizer, t->cfg.data, spec);
    }
    t->V = textdata_vocab(t->text);
    return IM_OK;
}

int lm_check(const Task *t) {
    uint64_t n_train = textdata_count(t->text, TEXT_TRAIN), n_val = textdata_count(t->text, TEXT_VAL);
    if (n_train < (uint64_t)t->C + 1)
        return err_set(IM_EINVAL, "task lm: the train split of %s has %llu tokens, fewer than context + 1 = %d", t->cfg.data,
                       (unsigned long long)n_train, t->C + 1);
    for (int i = 0; i < t->n_lens; i++)
        if (n_val < (uint64_t)t->lens[i] + 1)
            return err_set(IM_EINVAL, "task lm: the validation split of %s has %llu tokens, too few for one eval window of "
                           "length %d (needs %d; prepare with a larger --val_frac or choose shorter --eval_lens)",
                           t->cfg.data, (unsigned long long)n_val, t->lens[i], t->lens[i] + 1);
    return IM_OK;
}

void lm_train_row(const Task *t, Rng *r, int *ids, int *tg) {
    int C = t->C;
    uint64_t starts = textdata_count(t->text, TEXT_TRAIN) - (uint64_t)C, s;
    if (starts <= UINT32_MAX) {
        s = rng_below(r, (uint32_t)starts);
    } else {
        /* corpora beyond 4G tokens: the modulo bias is below starts / 2^64, negligible */
        uint64_t hi = rng_u32(r);
        s = (hi << 32 | rng_u32(r)) % starts;
    }
    textdata_get(t->text, TEXT_TRAIN, s, C, ids);
    memcpy(tg, ids + 1, sizeof(int) * (size_t)(C - 1));
    textdata_get(t->text, TEXT_TRAIN, s + (uint64_t)C, 1, tg + C - 1);
}

int64_t lm_eval_windows(const Task *t, int len) {
    uint64_t n = textdata_count(t->text, TEXT_VAL);
    return n < 2 ? 0 : (int64_t)((n - 1) / (uint64_t)len);
}

void lm_eval_row(const Task *t, int len, int64_t index, int *ids, int *tg) {
    CHECK(index >= 0 && index < lm_eval_windows(t, len), "lm eval window %lld of %lld at length %d", (long long)index,
          (long long)lm_eval_windows(t, len), len);
    uint64_t s = (uint64_t)index * (uint64_t)len;
    textdata_get(t->text, TEXT_VAL, s, len, ids);
    memcpy(tg, ids + 1, sizeof(int) * (size_t)(len - 1));
    textdata_get(t->text, TEXT_VAL, s + (uint64_t)len, 1, tg + len - 1);
}

int lm_describe(const Task *t, char *buf, size_t cap) {
    return snprintf(buf, cap, "lm: %s (tokenizer %s, vocab %d), %llu train / %llu validation tokens, context %d", t->cfg.data,
                    t->cfg.tokenizer, t->V, (unsigned long long)textdata_count(t->text, TEXT_TRAIN),
                    (unsigned long long)textdata_count(t->text, TEXT_VAL), t->C);
}

int lm_token_str(const Task *t, int id, char *buf, size_t cap) {
    if (strcmp(t->cfg.tokenizer, "byte")) return snprintf(buf, cap, "#%d", id);
    if (id == '\n') return snprintf(buf, cap, "\\n");
    if (id == '\\') return snprintf(buf, cap, "\\\\");
    if (id >= 0x20 && id < 0x7f) return snprintf(buf, cap, "%c", id);
    return snprintf(buf, cap, "\\x%02x", id);
}

/* ---- the row ------------------------------------------------------------------------------------- */

static int lm_cfg_check(const TaskCfg *c, const TaskOps *ops, int kind) {
    (void)ops, (void)kind;
    int rc = task_check_eval_pad(c);
    if (rc) return rc;
    if (!c->data[0])
        return err_set(IM_EINVAL, "task lm: task key 'data' must name a token file (make one with `implicit data prepare`)");
    return IM_OK;
}

static void lm_train(const Task *t, Rng *r, int T, int *ids, int *tg) {
    (void)T;
    lm_train_row(t, r, ids, tg);
}

static void lm_eval(const Task *t, Rng *r, int len, float p, int64_t index, int T, int *ids, int *tg) {
    (void)r, (void)p, (void)T;
    lm_eval_row(t, len, index, ids, tg);
}

static long long lm_count(const Task *t, int len) { return (long long)lm_eval_windows(t, len); }

const TaskOps task_lm_ops = {
    .name = "lm", .help = "lm (a token file)", .metric = "loss", .def_min_len = 3, .def_max_len = 40,
    .def_context = 256, .def_modulus = 2, .check = lm_cfg_check, .create = lm_create, .finish = lm_check,
    .default_evals = task_context_evals, .seq_len = task_len_as_is, .train_seq_len = task_context_len,
    .train_row = lm_train, .eval_row = lm_eval, .eval_count = lm_count, .describe = lm_describe,
    .token_str = lm_token_str,
};
