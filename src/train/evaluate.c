/* evaluate.c: see evaluate.h. */
#include "evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/timer.h"
#include "../io/atomic.h"
#include "../io/json.h"
#include "../kernels/kernels.h"

int eval_mode_parse(const char *s) {
    if (!strcmp(s, "simultaneous")) return EVAL_SIMULTANEOUS;
    if (!strcmp(s, "sequential")) return EVAL_SEQUENTIAL;
    if (!strcmp(s, "both")) return EVAL_BOTH;
    return -1;
}

const char *eval_mode_name(int mode) {
    return mode == EVAL_SEQUENTIAL ? "sequential" : mode == EVAL_BOTH ? "both" : "simultaneous";
}

/* Token by token: logits (B,T,V) through model_step; returns the mean iterations per token. */
static int hist_bin(double iters) {
    int bin = 0;
    for (long lim = 0; bin < EVAL_HIST_BINS - 1 && iters > lim; lim = lim ? 2 * lim : 1) bin++;
    return bin;
}

/* conv[0] += rows whose token solve reached the tolerance, conv[1] += rows counted. */
static int run_sequential(Model *m, const int *ids, int B, int T, float *logits, int *col, double *iters, long *hist,
                          double *conv) {
    int rc = model_state_init(m, B);
    double it = 0;
    for (int t = 0; t < T && !rc; t++) {
        for (int b = 0; b < B; b++) col[b] = ids[b * T + t];
        float *lg = logits + (size_t)B * T * m->V;   /* spare row block after the (B,T,V) logits */
        rc = model_step(m, col, lg);
        if (m->fp_conv >= 0) conv[0] += m->fp_conv * B, conv[1] += B;
        it += m->fp_iters;
        hist[hist_bin(m->fp_iters)]++;
        for (int b = 0; b < B; b++) memcpy(logits + ((size_t)b * T + t) * m->V, lg + (size_t)b * m->V, sizeof(float) * m->V);
    }
    *iters = it / T;
    return rc;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* eval_run; with pos_sum / pos_n (T each) also the loss sum and count per position. */
static int eval_core(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out,
                     double *pos_sum, double *pos_n, EvalProgressFn progress, void *progress_ctx) {
    memset(out, 0, sizeof *out);
    out->len = len;
    out->mode = mode;
    out->agree = out->conv_sim = out->conv_seq = -1;
    out->p = task_kind(t) == TASK_WORD ? p : -1.0f;
    task_eval_len_range(t, len, &out->len_min, &out->len_max);
    long long avail = task_eval_count(t, len);
    if (avail >= 0 && samples > avail) samples = (int)avail;
    out->samples = samples;
    out->chance = task_chance(t);
    out->max_iter = m->cfg.eval_f_max_iter > 0 ? m->cfg.eval_f_max_iter : (int)(m->cfg.f_max_iter * m->cfg.eval_factor);
    if (m->type->family == MODEL_FP_RNN) out->max_iter = m->cfg.fp_eval_cap;
    else if (m->type->family == MODEL_EXPLICIT) out->max_iter = 0;
    out->seq_max_iter = out->max_iter;
    if (m->type->family == MODEL_IMPLICIT && m->cfg.eval_seq_f_max_iter > 0 && m->cfg.eval_seq_f_max_iter < out->max_iter)
        out->seq_max_iter = m->cfg.eval_seq_f_max_iter;   /* as the model applies it: at most the evaluation cap */
    if (len < 1 && !(len == TASK_LEN_VAL && task_chance(t) > 0))
        return err_set(IM_EINVAL, "evaluation length %d must be >= 1", len);
    if (samples < 1 || batch < 1) return err_set(IM_EINVAL, "evaluation needs samples >= 1 and batch >= 1");
    int T = task_seq_len(t, len), V = m->V;
    size_t nl = (size_t)batch * T * V + (size_t)batch * V;
    int *ids = malloc(sizeof(int) * (size_t)batch * T), *tg = malloc(sizeof(int) * (size_t)batch * T);
    int *col = malloc(sizeof(int) * (size_t)batch), *amax = malloc(sizeof(int) * (size_t)batch * T);
    float *lg = mode != EVAL_SIMULTANEOUS ? malloc(sizeof(float) * nl) : NULL;
    float *losses = malloc(sizeof(float) * (size_t)batch * T);
    if (!ids || !tg || !col || !amax || !losses || (mode != EVAL_SIMULTANEOUS && !lg)) {
        free(ids); free(tg); free(col); free(amax); free(lg); free(losses);
        return err_set(IM_ENOMEM, "eval buffers");
    }
    int was_training = m->training, was_no_grad = m->no_grad, rc = IM_OK;
    m->training = 0;
    m->no_grad = 1;
    TaskScore s = {0};
    double loss_sum = 0, loss_n = 0, iters = 0, agree = 0, agree_n = 0, t0 = timer_now();
    double conv_sim[2] = {0, 0}, conv_seq[2] = {0, 0};   /* converged, counted */
    int nbatch = 0;
    for (int i = 0; i < samples && !rc; i += batch) {
        int B = samples - i < batch ? samples - i : batch;
        task_eval_batch(t, len, p, (uint64_t)i, B, ids, tg);
        const float *logits = NULL;
        double it = 0;
        if (mode != EVAL_SEQUENTIAL) {
            if ((rc = model_fwd(m, ids, NULL, B, T, NULL))) break;
            logits = m->logits;
            it = m->fp_iters;
            if (m->fp_conv >= 0) conv_sim[0] += m->fp_conv * B, conv_sim[1] += B;
            if (mode == EVAL_BOTH)
                for (int j = 0; j < B * T; j++) amax[j] = argmax(m->logits + (size_t)j * V, task_vocab(t));
        }
        if (mode != EVAL_SIMULTANEOUS) {
            if ((rc = run_sequential(m, ids, B, T, lg, col, &it, out->iter_hist, conv_seq))) break;
            logits = lg;
            if (mode == EVAL_BOTH)
                for (int j = 0; j < B * T; j++, agree_n++) agree += amax[j] == argmax(lg + (size_t)j * V, task_vocab(t));
        }
        iters += it;
        nbatch++;
        /* the loss over scored positions, as a per-position mean over the whole eval set */
        k_xent_fwd(losses, logits, tg, B * T, V, IGNORE_INDEX);
        for (int j = 0; j < B * T; j++)
            if (tg[j] != IGNORE_INDEX) {
                loss_sum += losses[j], loss_n++;
                if (pos_sum) pos_sum[j % T] += losses[j], pos_n[j % T] += 1;
            }
        task_score(&s, logits, task_vocab(t), V, tg, B, T);
        if (progress) progress(progress_ctx, i + B, samples);
    }
    m->training = was_training;
    m->no_grad = was_no_grad;
    free(ids); free(tg); free(col); free(amax); free(lg); free(losses);
    if (rc) return rc;
    out->loss = loss_n > 0 ? loss_sum / loss_n : 0;
    out->tok_acc = s.tok_n > 0 ? s.tok_ok / s.tok_n : 0;
    out->last10_acc = s.last10_n > 0 ? s.last10_ok / s.last10_n : 0;
    out->seq_acc = s.seq_n > 0 ? s.seq_ok / s.seq_n : 0;
    out->scaled_acc = (out->tok_acc - out->chance) / (1 - out->chance);
    out->iters = nbatch ? iters / nbatch : 0;
    out->iters_ref = m->type->family == MODEL_FP_RNN ? out->iters + 1 : 0; /* the mean of (iter_idx + 1) per solve */
    out->agree = agree_n > 0 ? agree / agree_n : -1;
    out->conv_sim = conv_sim[1] > 0 ? conv_sim[0] / conv_sim[1] : -1;
    out->conv_seq = conv_seq[1] > 0 ? conv_seq[0] / conv_seq[1] : -1;
    out->ppl = task_kind(t) == TASK_LM ? exp(out->loss) : 0;
    out->seconds = timer_now() - t0;
    return IM_OK;
}

int eval_run(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out) {
    return eval_core(m, t, len, p, samples, batch, mode, out, NULL, NULL, NULL, NULL);
}

int eval_run_progress(Model *m, const Task *t, int len, float p, int samples, int batch, int mode, EvalRow *out,
                      EvalProgressFn progress, void *ctx) {
    return eval_core(m, t, len, p, samples, batch, mode, out, NULL, NULL, progress, ctx);
}

int eval_gap(Model *m, const Task *t, int len, float p, int samples, int batch, double tol, int max_iter, EvalGap *out) {
    memset(out, 0, sizeof *out);
    if (m->type->family != MODEL_IMPLICIT)
        return err_set(IM_EINVAL, "the fixed-point gap applies to implicit models (this is '%s')", m->cfg.model);
    if (!(tol > 0) || max_iter < 2)
        return err_set(IM_EINVAL, "fixed-point gap: the tight solve needs tol > 0 and max_iter >= 2 (got %g, %d)", tol, max_iter);
    m->eval_solve = 1;
    int rc = eval_core(m, t, len, p, samples, batch, EVAL_SIMULTANEOUS, &out->train_cap, NULL, NULL, NULL, NULL);
    m->eval_solve = 0;
    if (rc) return rc;
    double own_tol = m->cfg.f_tol, own_eval_tol = m->cfg.eval_f_tol;
    int own_cap = m->cfg.eval_f_max_iter;
    m->cfg.f_tol = m->cfg.eval_f_tol = tol;   /* the evaluation loop stops at exactly tol */
    m->cfg.eval_f_max_iter = max_iter;
    rc = eval_core(m, t, len, p, samples, batch, EVAL_SIMULTANEOUS, &out->tight, NULL, NULL, NULL, NULL);
    m->cfg.f_tol = own_tol;
    m->cfg.eval_f_tol = own_eval_tol;
    m->cfg.eval_f_max_iter = own_cap;
    return rc;
}

int eval_positions(Model *m, const Task *t, int len, int width, int samples, int batch, int mode, EvalPos *out) {
    memset(out, 0, sizeof *out);
    if (width < 1) return err_set(IM_EINVAL, "position buckets need a width >= 1 (got %d)", width);
    if (len < 1 || (len + width - 1) / width > EVAL_MAX_BUCKETS)
        return err_set(IM_EINVAL, "windows of %d tokens in buckets of %d: 1 to %d buckets allowed", len, width,
                       EVAL_MAX_BUCKETS);
    int T = task_seq_len(t, len);
    double *sum = xcalloc((size_t)T, sizeof *sum), *cnt = xcalloc((size_t)T, sizeof *cnt);
    int rc = eval_core(m, t, len, -1, samples, batch, mode, &out->row, sum, cnt, NULL, NULL);
    if (!rc) {
        out->width = width;
        out->n_buckets = (T + width - 1) / width;
        double s[EVAL_MAX_BUCKETS] = {0};
        for (int i = 0; i < T; i++) s[i / width] += sum[i], out->tokens[i / width] += cnt[i];
        for (int k = 0; k < out->n_buckets; k++) out->loss[k] = out->tokens[k] > 0 ? s[k] / out->tokens[k] : 0;
    }
    free(sum);
    free(cnt);
    return rc;
}

/* Inclusive window positions of bucket k (the last one may be shorter). */
static void bucket_range(const EvalPos *e, int k, int *lo, int *hi) {
    *lo = k * e->width;
    *hi = *lo + e->width - 1 < e->row.len - 1 ? *lo + e->width - 1 : e->row.len - 1;
}

void eval_print_positions(const EvalPos *pos, int n, FILE *f) {
    for (int i = 0; i < n; i++) {
        const EvalPos *e = &pos[i];
        fprintf(f, "loss by position: %d windows of %d tokens, buckets of %d, %s", e->row.samples, e->row.len, e->width,
                eval_mode_name(e->row.mode));
        if (e->row.max_iter > 0) fprintf(f, ", iteration cap %d", e->row.max_iter);
        fprintf(f, "; overall loss %.4f, perplexity %.4f\n", e->row.loss, exp(e->row.loss));
        fprintf(f, "| positions | tokens |   loss |      ppl |\n|----------:|-------:|-------:|---------:|\n");
        for (int k = 0; k < e->n_buckets; k++) {
            int lo, hi;
            bucket_range(e, k, &lo, &hi);
            char r[32];
            snprintf(r, sizeof r, "%d-%d", lo, hi);
            fprintf(f, "| %9s | %6.0f | %6.4f | %8.4f |\n", r, e->tokens[k], e->loss[k], exp(e->loss[k]));
        }
    }
}

int eval_metric(const EvalRow *r, const char *name, double *value, int *higher_is_better) {
    *higher_is_better = 1;
    if (!strcmp(name, "seq_acc")) *value = r->seq_acc;
    else if (!strcmp(name, "tok_acc")) *value = r->tok_acc;
    else if (!strcmp(name, "last10_acc")) *value = r->last10_acc;
    else if (!strcmp(name, "scaled_acc")) *value = r->scaled_acc;
    else if (!strcmp(name, "loss")) { *value = r->loss; *higher_is_better = 0; }
    else return err_set(IM_EINVAL, "unknown metric '%s' (seq_acc | tok_acc | last10_acc | scaled_acc | loss)", name);
    return IM_OK;
}

void eval_print_hist(const EvalRow *rows, int n, FILE *f) {
    static const char *label[EVAL_HIST_BINS] = {"0", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", ">128"};
    for (int i = 0; i < n; i++) {
        long total = 0;
        for (int k = 0; k < EVAL_HIST_BINS; k++) total += rows[i].iter_hist[k];
        if (!total || rows[i].seq_max_iter <= 0) continue;
        fprintf(f, "iterations per token, length %d, cap %d:", rows[i].len, rows[i].seq_max_iter);
        for (int k = 0; k < EVAL_HIST_BINS; k++)
            if (rows[i].iter_hist[k]) fprintf(f, "  %s: %.1f%%", label[k], 100.0 * rows[i].iter_hist[k] / total);
        fputc('\n', f);
    }
}

/* "val" for the val mix, else the length. */
static void len_label(const EvalRow *r, char *buf, size_t cap) {
    if (r->len == TASK_LEN_VAL) snprintf(buf, cap, "val");
    else snprintf(buf, cap, "%d", r->len);
}

void eval_print_table(const EvalRow *rows, int n, FILE *f) {
    int implicit = 0, both = 0, scaled = 0, lm = 0, csim = 0, cseq = 0, ref = 0;
    for (int i = 0; i < n; i++)
        implicit |= rows[i].max_iter > 0, both |= rows[i].agree >= 0, scaled |= rows[i].chance > 0, lm |= rows[i].ppl > 0,
            csim |= rows[i].conv_sim >= 0, cseq |= rows[i].conv_seq >= 0, ref |= rows[i].iters_ref > 0;
    fprintf(f, "| length |    p | mode         | samples |   loss |%s tok acc | last10 acc | seq acc |%s%s%s%s%s%s\n",
            lm ? "      ppl |" : "", scaled ? " scaled |" : "", implicit ? " max it | iters |" : "",
            implicit && ref ? " iters (ref) |" : "", both ? " agree |" : "", csim ? " conv sim |" : "",
            cseq ? " conv seq |" : "");
    fprintf(f, "|-------:|-----:|--------------|--------:|-------:|%s--------:|-----------:|--------:|%s%s%s%s%s%s\n",
            lm ? "---------:|" : "", scaled ? "-------:|" : "", implicit ? "-------:|------:|" : "",
            implicit && ref ? "------------:|" : "", both ? "------:|" : "", csim ? "---------:|" : "",
            cseq ? "---------:|" : "");
    for (int i = 0; i < n; i++) {
        const EvalRow *r = &rows[i];
        char p[16], len[16];
        if (r->p < 0) snprintf(p, sizeof p, "  -");
        else snprintf(p, sizeof p, "%.2f", r->p);
        len_label(r, len, sizeof len);
        fprintf(f, "| %6s | %4s | %-12s | %7d | %6.4f |", len, p, eval_mode_name(r->mode), r->samples, r->loss);
        if (lm) fprintf(f, " %8.4f |", r->ppl);
        fprintf(f, " %6.2f%% | %9.2f%% | %6.2f%% |", 100 * r->tok_acc, 100 * r->last10_acc, 100 * r->seq_acc);
        if (scaled) fprintf(f, " %6.3f |", r->scaled_acc);
        if (implicit) fprintf(f, " %6d | %5.1f |", r->max_iter, r->iters);
        if (implicit && ref) fprintf(f, " %11.1f |", r->iters_ref > 0 ? r->iters_ref : 0.0);
        if (both) fprintf(f, " %4.1f%% |", r->agree >= 0 ? 100 * r->agree : 0.0);
        /* share of solves that reached the tolerance; "-" where that mode did not run */
        if (csim) r->conv_sim >= 0 ? fprintf(f, "   %5.1f%% |", 100 * r->conv_sim) : fprintf(f, "        - |");
        if (cseq) r->conv_seq >= 0 ? fprintf(f, "   %5.1f%% |", 100 * r->conv_seq) : fprintf(f, "        - |");
        fputc('\n', f);
    }
}

void eval_length_summary(const EvalRow *rows, int n, const char *metric, double thr, int *longest, int *first_fail) {
    int *lens = xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    double *acc = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        int hib;
        lens[i] = rows[i].len;
        if (eval_metric(&rows[i], metric, &acc[i], &hib)) acc[i] = 0;
    }
    *longest = task_longest_len(lens, acc, n, thr);
    *first_fail = task_first_fail_len(lens, acc, n, thr);
    free(lens);
    free(acc);
}

/* p is a float: write the shortest decimal that reads back as that float (0.9, not 0.899999976). */
static double p_value(float p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.9g", (double)p);
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)p);
        if ((float)strtod(buf, NULL) == p) break;
    }
    return strtod(buf, NULL);
}

/* The shortest "%.*g" text that reads back as x exactly (CSV readable and lossless). */
static const char *num(char *buf, size_t cap, double x) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

typedef struct {
    const EvalRow *rows;
    int n;
} RowList;

static int emit_csv(FILE *f, void *ctx) {
    const EvalRow *rows = ((const RowList *)ctx)->rows;
    int n = ((const RowList *)ctx)->n;
    char a[32], b[32], c[32], d[32];
    int lm = 0, ref = 0;
    for (int i = 0; i < n; i++) lm |= rows[i].ppl > 0, ref |= rows[i].iters_ref > 0;
    fprintf(f, "len,len_min,len_max,p,mode,samples,loss,tok_acc,last10_acc,seq_acc,scaled_acc,max_iter,iters,agree,conv_sim,conv_seq,seconds%s%s\n",
            lm ? ",ppl" : "", ref ? ",iters_ref" : "");
    for (int i = 0; i < n; i++) {
        const EvalRow *r = &rows[i];
        char len[16];
        len_label(r, len, sizeof len);
        fprintf(f, "%s,%d,%d,%s,", len, r->len_min, r->len_max, r->p >= 0 ? num(a, sizeof a, p_value(r->p)) : "");
        fprintf(f, "%s,%d,%s,%s,%s,%s,", eval_mode_name(r->mode), r->samples, num(a, sizeof a, r->loss),
                num(b, sizeof b, r->tok_acc), num(c, sizeof c, r->last10_acc), num(d, sizeof d, r->seq_acc));
        fprintf(f, "%s,", r->chance > 0 ? num(a, sizeof a, r->scaled_acc) : "");
        if (r->max_iter > 0) fprintf(f, "%d,%s,", r->max_iter, num(a, sizeof a, r->iters));
        else fprintf(f, ",,");
        fprintf(f, "%s,", r->agree >= 0 ? num(a, sizeof a, r->agree) : "");
        fprintf(f, "%s,", r->conv_sim >= 0 ? num(a, sizeof a, r->conv_sim) : "");
        fprintf(f, "%s,%.6f", r->conv_seq >= 0 ? num(a, sizeof a, r->conv_seq) : "", r->seconds);
        if (lm) fprintf(f, ",%s", r->ppl > 0 ? num(a, sizeof a, r->ppl) : "");
        if (ref) fprintf(f, ",%s", r->iters_ref > 0 ? num(a, sizeof a, r->iters_ref) : "");
        fputc('\n', f);
    }
    return ferror(f) ? err_set(IM_EIO, "write error") : IM_OK;
}

int eval_write_csv(const char *path, const EvalRow *rows, int n) {
    RowList l = {rows, n};
    return report_write(path, emit_csv, &l);
}

typedef struct {
    const EvalPos *pos;
    int n;
} PosList;

static int emit_pos_csv(FILE *f, void *ctx) {
    const PosList *l = ctx;
    char a[32], b[32];
    fprintf(f, "len,width,lo,hi,mode,max_iter,samples,tokens,loss,ppl\n");
    for (int i = 0; i < l->n; i++) {
        const EvalPos *e = &l->pos[i];
        for (int k = 0; k < e->n_buckets; k++) {
            int lo, hi;
            bucket_range(e, k, &lo, &hi);
            fprintf(f, "%d,%d,%d,%d,%s,", e->row.len, e->width, lo, hi, eval_mode_name(e->row.mode));
            if (e->row.max_iter > 0) fprintf(f, "%d", e->row.max_iter);
            fprintf(f, ",%d,%.0f,%s,%s\n", e->row.samples, e->tokens[k], num(a, sizeof a, e->loss[k]),
                    num(b, sizeof b, exp(e->loss[k])));
        }
    }
    return ferror(f) ? err_set(IM_EIO, "write error") : IM_OK;
}

int eval_write_pos_csv(const char *path, const EvalPos *pos, int n) {
    PosList l = {pos, n};
    return report_write(path, emit_pos_csv, &l);
}

int eval_write_json(const char *path, const char *ckpt, const char *task, const EvalRow *rows, int n, const char *metric,
                    double thr) {
    return eval_write_json_pos(path, ckpt, task, rows, n, metric, thr, NULL, 0);
}

static void json_positions(JsonBuf *b, const EvalPos *pos, int n_pos) {
    json_buf_key(b, "positions");
    json_buf_begin_arr(b);
    for (int i = 0; i < n_pos; i++) {
        const EvalPos *e = &pos[i];
        json_buf_begin_obj(b);
        json_buf_kv_int(b, "len", e->row.len);
        json_buf_kv_int(b, "width", e->width);
        json_buf_kv_int(b, "samples", e->row.samples);
        json_buf_kv_str(b, "mode", eval_mode_name(e->row.mode));
        if (e->row.max_iter > 0) json_buf_kv_int(b, "max_iter", e->row.max_iter);
        json_buf_kv_num(b, "loss", e->row.loss);
        json_buf_kv_num(b, "ppl", exp(e->row.loss));
        json_buf_key(b, "buckets");
        json_buf_begin_arr(b);
        for (int k = 0; k < e->n_buckets; k++) {
            int lo, hi;
            bucket_range(e, k, &lo, &hi);
            json_buf_begin_obj(b);
            json_buf_kv_int(b, "lo", lo);
            json_buf_kv_int(b, "hi", hi);
            json_buf_kv_num(b, "tokens", e->tokens[k]);
            json_buf_kv_num(b, "loss", e->loss[k]);
            json_buf_kv_num(b, "ppl", exp(e->loss[k]));
            json_buf_end_obj(b);
        }
        json_buf_end_arr(b);
        json_buf_end_obj(b);
    }
    json_buf_end_arr(b);
}

/* The per-token iteration histogram of a sequential row (nothing for a simultaneous one). */
void eval_json_hist(JsonBuf *b, const EvalRow *r) {
    if (r->mode == EVAL_SIMULTANEOUS || r->max_iter <= 0) return;
    json_buf_key(b, "iter_hist");
    json_buf_begin_arr(b);
    for (int k = 0; k < EVAL_HIST_BINS; k++) json_buf_int(b, r->iter_hist[k]);
    json_buf_end_arr(b);
}

int eval_write_json_pos(const char *path, const char *ckpt, const char *task, const EvalRow *rows, int n,
                        const char *metric, double thr, const EvalPos *pos, int n_pos) {
    size_t len;
    char *text = eval_json_text(ckpt, task, rows, n, metric, thr, pos, n_pos, &len);
    if (!text) return err_set(IM_ENOMEM, "out of memory writing %s", path);
    int rc = report_write_bytes(path, text, len);
    free(text);
    return rc;
}

char *eval_json_text(const char *ckpt, const char *task, const EvalRow *rows, int n, const char *metric, double thr,
                     const EvalPos *pos, int n_pos, size_t *len) {
    JsonBuf b;
    json_buf_init(&b, 2);
    json_buf_begin_obj(&b);
    if (ckpt) json_buf_kv_str(&b, "checkpoint", ckpt);
    if (task) json_buf_kv_str(&b, "task", task);
    if (metric) {
        int longest, first_fail;
        eval_length_summary(rows, n, metric, thr, &longest, &first_fail);
        json_buf_kv_str(&b, "metric", metric);
        json_buf_kv_num(&b, "threshold", thr);
        json_buf_kv_int(&b, "longest_len", longest);
        json_buf_kv_int(&b, "first_fail_len", first_fail);
    }
    json_buf_key(&b, "rows");
    json_buf_begin_arr(&b);
    for (int i = 0; i < n; i++) {
        const EvalRow *r = &rows[i];
        json_buf_begin_obj(&b);
        if (r->len == TASK_LEN_VAL) json_buf_kv_str(&b, "len", "val");
        else json_buf_kv_int(&b, "len", r->len);
        if (r->len_min != r->len || r->len_max != r->len) {
            json_buf_kv_int(&b, "len_min", r->len_min);
            json_buf_kv_int(&b, "len_max", r->len_max);
        }
        if (r->p >= 0) json_buf_kv_num(&b, "p", p_value(r->p));
        json_buf_kv_int(&b, "samples", r->samples);
        json_buf_kv_num(&b, "loss", r->loss);
        if (r->ppl > 0) json_buf_kv_num(&b, "ppl", r->ppl);
        json_buf_kv_num(&b, "tok_acc", r->tok_acc);
        json_buf_kv_num(&b, "last10_acc", r->last10_acc);
        json_buf_kv_num(&b, "seq_acc", r->seq_acc);
        if (r->chance > 0) json_buf_kv_num(&b, "chance", r->chance), json_buf_kv_num(&b, "scaled_acc", r->scaled_acc);
        json_buf_kv_str(&b, "mode", eval_mode_name(r->mode));
        if (r->max_iter > 0) json_buf_kv_int(&b, "max_iter", r->max_iter), json_buf_kv_num(&b, "iters", r->iters);
        if (r->max_iter > 0 && r->iters_ref > 0) json_buf_kv_num(&b, "iters_ref", r->iters_ref);
        if (r->agree >= 0) json_buf_kv_num(&b, "agree", r->agree);
        if (r->conv_sim >= 0) json_buf_kv_num(&b, "conv_sim", r->conv_sim);
        if (r->conv_seq >= 0) json_buf_kv_num(&b, "conv_seq", r->conv_seq);
        eval_json_hist(&b, r);
        json_buf_kv_num(&b, "seconds", r->seconds);
        json_buf_end_obj(&b);
    }
    json_buf_end_arr(&b);
    if (n_pos > 0) json_positions(&b, pos, n_pos);
    json_buf_end_obj(&b);
    json_buf_append(&b, "\n", 1);
    if (b.failed) {
        json_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;   /* the buffer's text, now the caller's */
}
