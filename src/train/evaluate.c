/* evaluate.c: see evaluate.h. */
#include "evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/timer.h"

int eval_run(Model *m, const Task *t, int len, float p, int samples, int batch, EvalRow *out) {
    memset(out, 0, sizeof *out);
    out->len = len;
    out->p = task_is_ios(t) ? -1.0f : p;
    out->samples = samples;
    if (len < 1) return err_set(IM_EINVAL, "evaluation length %d must be >= 1", len);
    if (samples < 1 || batch < 1) return err_set(IM_EINVAL, "evaluation needs samples >= 1 and batch >= 1");
    int T = task_seq_len(t, len);
    int *ids = malloc(sizeof(int) * (size_t)batch * T), *tg = malloc(sizeof(int) * (size_t)batch * T);
    if (!ids || !tg) { free(ids); free(tg); return err_set(IM_ENOMEM, "eval buffers"); }
    int was_training = m->training, rc = IM_OK;
    m->training = 0;
    TaskScore s = {0};
    double loss_sum = 0, loss_n = 0, t0 = timer_now();
    for (int i = 0; i < samples && !rc; i += batch) {
        int B = samples - i < batch ? samples - i : batch;
        task_eval_batch(t, len, p, (uint64_t)i, B, ids, tg);
        float loss = 0;
        rc = model_fwd(m, ids, tg, B, T, &loss);
        if (rc) break;
        /* weight the batch mean by its scored positions so the total is a per-position mean */
        double n = 0;
        for (int j = 0; j < B * T; j++) n += tg[j] != IGNORE_INDEX;
        loss_sum += (double)loss * n;
        loss_n += n;
        task_score(&s, m->logits, task_vocab(t), m->V, tg, B, T);
    }
    m->training = was_training;
    free(ids);
    free(tg);
    if (rc) return rc;
    out->loss = loss_n > 0 ? loss_sum / loss_n : 0;
    out->tok_acc = s.tok_n > 0 ? s.tok_ok / s.tok_n : 0;
    out->last10_acc = s.last10_n > 0 ? s.last10_ok / s.last10_n : 0;
    out->seq_acc = s.seq_n > 0 ? s.seq_ok / s.seq_n : 0;
    out->seconds = timer_now() - t0;
    return IM_OK;
}

int eval_metric(const EvalRow *r, const char *name, double *value, int *higher_is_better) {
    *higher_is_better = 1;
    if (!strcmp(name, "seq_acc")) *value = r->seq_acc;
    else if (!strcmp(name, "tok_acc")) *value = r->tok_acc;
    else if (!strcmp(name, "last10_acc")) *value = r->last10_acc;
    else if (!strcmp(name, "loss")) { *value = r->loss; *higher_is_better = 0; }
    else return err_set(IM_EINVAL, "unknown metric '%s' (seq_acc | tok_acc | last10_acc | loss)", name);
    return IM_OK;
}

void eval_print_table(const EvalRow *rows, int n, FILE *f) {
    fprintf(f, "| length |    p | samples |   loss | tok acc | last10 acc | seq acc |\n");
    fprintf(f, "|-------:|-----:|--------:|-------:|--------:|-----------:|--------:|\n");
    for (int i = 0; i < n; i++) {
        const EvalRow *r = &rows[i];
        char p[16];
        if (r->p < 0) snprintf(p, sizeof p, "  -");
        else snprintf(p, sizeof p, "%.2f", r->p);
        fprintf(f, "| %6d | %4s | %7d | %6.4f | %6.2f%% | %9.2f%% | %6.2f%% |\n", r->len, p, r->samples, r->loss,
                100 * r->tok_acc, 100 * r->last10_acc, 100 * r->seq_acc);
    }
}
