/* mc.c: multiple-choice log-likelihood evaluation; see mc.h. */
#include "mc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../core/timer.h"
#include "../io/atomic.h"
#include "../io/json.h"
#include "../io/keyjson.h"

/* ---- task file ------------------------------------------------------------------------------- */

static const Json *get_any(const Json *o, const char *const *keys, const char **which) {
    for (int i = 0; keys[i]; i++) {
        const Json *v = json_get(o, keys[i]);
        if (v) { *which = keys[i]; return v; }
    }
    return NULL;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

static void item_free(McItem *it) {
    for (int i = 0; i < it->n_choices; i++) free(it->choices ? it->choices[i] : NULL);
    free(it->choices);
    free(it->choice_len);
    free(it->context);
    memset(it, 0, sizeof *it);
}

#define BAD(...) (err_set(IM_EFORMAT, __VA_ARGS__))

/* One parsed line into *it. */
static int parse_item(McItem *it, const Json *o, const char *where, int line) {
    static const char *const CTX[] = {"context", "query", "ctx", NULL}, *const CH[] = {"choices", "endings", NULL},
                             *const GOLD[] = {"gold", "label", NULL};
    const char *k = NULL;
    memset(it, 0, sizeof *it);
    it->line = line;
    if (!o || o->type != JSON_OBJECT) return BAD("%s:%d: each line must be a JSON object", where, line);
    const Json *c = get_any(o, CTX, &k), *ch = get_any(o, CH, &k), *g;
    if (!c || c->type != JSON_STRING)
        return BAD("%s:%d: missing string \"context\" (or \"query\" / \"ctx\")", where, line);
    if (!ch || ch->type != JSON_ARRAY || !ch->count)
        return BAD("%s:%d: missing non-empty array \"choices\" (or \"endings\")", where, line);
    if (!(g = get_any(o, GOLD, &k))) return BAD("%s:%d: missing \"gold\" (or \"label\")", where, line);
    long gold = -1;
    if (g->type == JSON_NUMBER && g->is_int) gold = (long)g->integer;
    else if (g->type == JSON_STRING && g->str_len && g->str_len < 10 && strspn(g->string, "0123456789") == g->str_len)
        gold = atol(g->string);
    else return BAD("%s:%d: \"%s\" must be an integer or a string of digits", where, line, k);
    if (gold < 0 || gold >= (long)ch->count)
        return BAD("%s:%d: \"%s\" %ld is not an index of the %zu choices", where, line, k, gold, ch->count);
    it->gold = (int)gold;
    it->context = dup_bytes(c->string, c->str_len);
    it->context_len = c->str_len;
    it->choices = calloc(ch->count, sizeof *it->choices);
    it->choice_len = calloc(ch->count, sizeof *it->choice_len);
    if (!it->context || !it->choices || !it->choice_len) return err_set(IM_ENOMEM, "mc: out of memory");
    it->n_choices = (int)ch->count;
    for (size_t i = 0; i < ch->count; i++) {
        const Json *s = &ch->items[i];
        if (s->type != JSON_STRING || !s->str_len)
            return BAD("%s:%d: choice %zu must be a non-empty string", where, line, i);
        if (!(it->choices[i] = dup_bytes(s->string, s->str_len))) return err_set(IM_ENOMEM, "mc: out of memory");
        it->choice_len[i] = s->str_len;
    }
    return IM_OK;
}

int mc_parse(McTask *t, const char *text, size_t len, int limit, const char *where) {
    memset(t, 0, sizeof *t);
    int cap = 0, line = 0, rc = IM_OK;
    for (size_t at = 0; at < len && (limit <= 0 || t->n < limit);) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, a = at;
        line++;
        at = end + 1;
        while (a < end && strchr(" \t\r", text[a])) a++;
        if (a == end) continue;
        Json *j = NULL;
        if ((rc = json_parse(&j, text + a, end - a))) {
            rc = err_wrap(rc, "%s:%d", where, line);
            break;
        }
        if (t->n == cap) {
            cap = cap ? 2 * cap : 64;
            McItem *p = realloc(t->items, sizeof *p * (size_t)cap);
            if (!p) { json_free(j); rc = err_set(IM_ENOMEM, "mc: out of memory"); break; }
            t->items = p;
        }
        rc = parse_item(&t->items[t->n], j, where, line);
        json_free(j);
        t->n++;   /* a partly filled item is freed with the rest */
        if (rc) break;
    }
    if (!rc && !t->n) rc = BAD("%s: no items (one JSON object per line expected)", where);
    if (rc) mc_free(t);
    return rc;
}

int mc_load(McTask *t, const char *path, int limit) {
    char *text;
    size_t len;
    memset(t, 0, sizeof *t);
    int rc = keyjson_read_file(path, &text, &len);
    if (rc) return rc;
    rc = mc_parse(t, text, len, limit, path);
    free(text);
    return rc;
}

void mc_free(McTask *t) {
    for (int i = 0; i < t->n; i++) item_free(&t->items[i]);
    free(t->items);
    memset(t, 0, sizeof *t);
}

/* ---- tokenisation ---------------------------------------------------------------------------- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int mc_tokenize(const Tokenizer *tok, const McItem *it, int choice, const char *delim, int **ids, int *n, int *n_ctx,
                int *split) {
    *ids = NULL;
    *n = *n_ctx = *split = 0;
    size_t nd = strlen(delim), nch = it->choice_len[choice], nc = it->context_len, total = nc + nd + nch;
    char *full = malloc(total + 1);
    if (!full) return err_set(IM_ENOMEM, "mc: out of memory");
    memcpy(full, it->context, nc);
    memcpy(full + nc, delim, nd);
    memcpy(full + nc + nd, it->choices[choice], nch);
    /* the harness moves the context's trailing whitespace into the continuation, so " word"
     * is one token with GPT-2-style BPE instead of a dangling space */
    size_t cut = nc;
    while (cut && is_space(full[cut - 1])) cut--;
    int *c_ids = NULL, *w_ids = NULL, *r_ids = NULL, *out = NULL, rc;
    size_t n_c = 0, n_w = 0, n_r = 0;
    int eos = tok_eos(tok);
    if ((rc = tok_encode(tok, full, cut, &c_ids, &n_c))) goto done;
    if (n_c == 0) {
        if (eos < 0) {
            rc = err_set(IM_EINVAL, "item at line %d: empty context and tokenizer '%s' has no end-of-text token to "
                         "stand for it", it->line, tok_spec(tok));
            goto done;
        }
        free(c_ids);
        if (!(c_ids = malloc(sizeof *c_ids))) { rc = err_set(IM_ENOMEM, "mc: out of memory"); goto done; }
        c_ids[0] = eos;
        n_c = 1;
        if ((rc = tok_encode(tok, full, total, &r_ids, &n_r))) goto done;
        *split = 1;
    } else {
        if ((rc = tok_encode(tok, full, total, &w_ids, &n_w))) goto done;
        int joint = n_w > n_c && !memcmp(w_ids, c_ids, n_c * sizeof *c_ids);
        if (joint) {
            *ids = w_ids;
            w_ids = NULL;
            *n = (int)n_w;
            *n_ctx = (int)n_c;
            goto done;
        }
        *split = 1;
        if ((rc = tok_encode(tok, full + cut, total - cut, &r_ids, &n_r))) goto done;
    }
    if (!(out = malloc(sizeof *out * (n_c + n_r)))) { rc = err_set(IM_ENOMEM, "mc: out of memory"); goto done; }
    memcpy(out, c_ids, n_c * sizeof *out);
    memcpy(out + n_c, r_ids, n_r * sizeof *out);
    *ids = out;
    *n = (int)(n_c + n_r);
    *n_ctx = (int)n_c;
done:
    free(full);
    free(c_ids);
    free(w_ids);
    free(r_ids);
    return rc;
}

/* ---- scoring --------------------------------------------------------------------------------- */

typedef struct {
    double loglik;
    int greedy, truncated;
    double iters;
} PairScore;

/* One full-sequence forward over ids[0..n-1); the continuation ids[n_ctx..n) is scored. */
static int score_pair(Model *m, const int *ids, int n, int n_ctx, PairScore *ps) {
    int T = n - 1, drop = 0, Vp = m->V;
    memset(ps, 0, sizeof *ps);
    if (T > m->cfg.max_seq_len) {
        drop = T - m->cfg.max_seq_len;
        if (drop > n_ctx - 1)
            return err_set(IM_EINVAL, "a continuation of %d tokens does not fit max_seq_len %d", n - n_ctx,
                           m->cfg.max_seq_len);
        ps->truncated = 1;
    }
    int rc = model_fwd(m, ids + drop, NULL, 1, T - drop, NULL);
    if (rc) return rc;
    ps->iters = m->fp_iters;
    ps->greedy = 1;
    for (int j = n_ctx; j < n; j++) {
        const float *row = m->logits + (size_t)(j - 1 - drop) * Vp;
        int best = 0;
        double mx = row[0], s = 0;
        for (int v = 1; v < Vp; v++)
            if (row[v] > row[best]) best = v;
        mx = row[best];
        for (int v = 0; v < Vp; v++) s += exp((double)row[v] - mx);
        double lp = (double)row[ids[j]] - mx - log(s);
        if (!isfinite(lp)) return err_set(IM_ENUM, "the model produced NaN/inf logits");
        ps->loglik += lp;
        ps->greedy &= best == ids[j];
    }
    return IM_OK;
}

static int argmax_d(const double *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void mc_results_free(McItemResult *res, int n) {
    for (int i = 0; res && i < n; i++) {
        free(res[i].loglik);
        free(res[i].n_tokens);
        free(res[i].greedy);
    }
}

int mc_run(Model *m, const Tokenizer *tok, const McTask *t, const McOpts *o, McItemResult *res, McSummary *sum) {
    memset(sum, 0, sizeof *sum);
    if (res) memset(res, 0, sizeof *res * (size_t)t->n);
    const char *delim = o && o->delim ? o->delim : "";
    int was_training = m->training, was_no_grad = m->no_grad, rc = IM_OK, n_ok = 0;
    m->training = 0;
    m->no_grad = 1;
    double t0 = timer_now(), acc = 0, acc_norm = 0, greedy = 0, gold_ll = 0, gold_nll = 0, iters = 0;
    long gold_tokens = 0;
    int maxc = 1;
    for (int i = 0; i < t->n; i++) maxc = t->items[i].n_choices > maxc ? t->items[i].n_choices : maxc;
    double *ll = malloc(sizeof *ll * (size_t)maxc), *lln = malloc(sizeof *lln * (size_t)maxc);
    int *ntok = malloc(sizeof *ntok * (size_t)maxc), *gr = malloc(sizeof *gr * (size_t)maxc);
    if (!ll || !lln || !ntok || !gr) rc = err_set(IM_ENOMEM, "mc: out of memory");
    for (int i = 0; i < t->n && !rc; i++) {
        const McItem *it = &t->items[i];
        for (int c = 0; c < it->n_choices && !rc; c++) {
            int *ids, n, n_ctx, split;
            PairScore ps;
            if ((rc = mc_tokenize(tok, it, c, delim, &ids, &n, &n_ctx, &split))) break;
            rc = score_pair(m, ids, n, n_ctx, &ps);
            free(ids);
            if (rc) { err_wrap(rc, "item at line %d, choice %d", it->line, c); break; }
            ll[c] = ps.loglik;
            lln[c] = ps.loglik / (double)it->choice_len[c];
            ntok[c] = n - n_ctx;
            gr[c] = ps.greedy;
            sum->forwards++;
            sum->tokens += n - 1;
            sum->n_split += split;
            sum->n_truncated += ps.truncated;
            iters += ps.iters;
        }
        if (rc) break;
        int pred = argmax_d(ll, it->n_choices), pred_norm = argmax_d(lln, it->n_choices);
        acc += pred == it->gold;
        acc_norm += pred_norm == it->gold;
        greedy += gr[it->gold];
        gold_ll += ll[it->gold];
        gold_nll -= ll[it->gold];
        gold_tokens += ntok[it->gold];
        n_ok++;
        if (res) {
            McItemResult *r = &res[i];
            size_t nc = (size_t)it->n_choices;
            r->loglik = malloc(sizeof *r->loglik * nc);
            r->n_tokens = malloc(sizeof *r->n_tokens * nc);
            r->greedy = malloc(sizeof *r->greedy * nc);
            if (!r->loglik || !r->n_tokens || !r->greedy) { rc = err_set(IM_ENOMEM, "mc: out of memory"); break; }
            memcpy(r->loglik, ll, sizeof *ll * nc);
            memcpy(r->n_tokens, ntok, sizeof *ntok * nc);
            memcpy(r->greedy, gr, sizeof *gr * nc);
            r->pred = pred;
            r->pred_norm = pred_norm;
        }
        sum->n = n_ok;
        sum->acc = acc / n_ok;
        sum->acc_norm = acc_norm / n_ok;
        sum->greedy_acc = greedy / n_ok;
        sum->gold_loglik = gold_ll / n_ok;
        sum->gold_nll_per_token = gold_tokens ? gold_nll / (double)gold_tokens : 0;
        sum->iters = sum->forwards ? iters / (double)sum->forwards : 0;
        sum->iters_ref = m->type->family == MODEL_FP_RNN && sum->forwards ? sum->iters + 1 : 0;
        sum->seconds = timer_now() - t0;
        if (o && o->progress) o->progress(o->progress_ctx, i + 1, t->n, sum);
    }
    free(ll);
    free(lln);
    free(ntok);
    free(gr);
    m->training = was_training;
    m->no_grad = was_no_grad;
    return rc;
}

/* ---- output ---------------------------------------------------------------------------------- */

int mc_write_json(const char *path, const char *ckpt, const char *task_path, const char *tok_spec, const McTask *t,
                  const McItemResult *res, const McSummary *sum) {
    JsonBuf b;
    json_buf_init(&b, 0);
    json_buf_begin_obj(&b);
    if (ckpt) json_buf_kv_str(&b, "checkpoint", ckpt);
    if (task_path) json_buf_kv_str(&b, "task", task_path);
    if (tok_spec) json_buf_kv_str(&b, "tokenizer", tok_spec);
    json_buf_kv_int(&b, "n", sum->n);
    json_buf_kv_num(&b, "acc", sum->acc);
    json_buf_kv_num(&b, "acc_norm", sum->acc_norm);
    json_buf_kv_num(&b, "greedy_acc", sum->greedy_acc);
    json_buf_kv_num(&b, "gold_loglik", sum->gold_loglik);
    json_buf_kv_num(&b, "gold_nll_per_token", sum->gold_nll_per_token);
    json_buf_kv_int(&b, "forwards", sum->forwards);
    json_buf_kv_int(&b, "tokens", sum->tokens);
    json_buf_kv_int(&b, "n_split", sum->n_split);
    json_buf_kv_int(&b, "n_truncated", sum->n_truncated);
    json_buf_kv_num(&b, "iters", sum->iters);
    if (sum->iters_ref > 0) json_buf_kv_num(&b, "iters_ref", sum->iters_ref);
    json_buf_kv_num(&b, "seconds", sum->seconds);
    if (res) {
        json_buf_key(&b, "items");
        json_buf_begin_arr(&b);
        for (int i = 0; i < sum->n; i++) {
            const McItem *it = &t->items[i];
            json_buf_begin_obj(&b);
            json_buf_kv_int(&b, "line", it->line);
            json_buf_kv_int(&b, "gold", it->gold);
            json_buf_kv_int(&b, "pred", res[i].pred);
            json_buf_kv_int(&b, "pred_norm", res[i].pred_norm);
            json_buf_key(&b, "loglik");
            json_buf_begin_arr(&b);
            for (int c = 0; c < it->n_choices; c++) json_buf_num(&b, res[i].loglik[c]);
            json_buf_end_arr(&b);
            json_buf_key(&b, "tokens");
            json_buf_begin_arr(&b);
            for (int c = 0; c < it->n_choices; c++) json_buf_int(&b, res[i].n_tokens[c]);
            json_buf_end_arr(&b);
            json_buf_end_obj(&b);
        }
        json_buf_end_arr(&b);
    }
    json_buf_end_obj(&b);
    json_buf_append(&b, "\n", 1);
    int rc = b.failed ? err_set(IM_ENOMEM, "mc: out of memory writing %s", path) : report_write_bytes(path, b.data, b.len);
    json_buf_free(&b);
    return rc;
}
