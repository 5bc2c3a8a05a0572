/* cmd_mc.c: `implicit mc` — multiple-choice log-likelihood evaluation (src/train/mc.h).
 *
 *   implicit mc CKPT TASK.jsonl [--limit N] [--json OUT] [--tokenizer SPEC] [--delimiter STR]
 *               [--threads N] [model evaluation keys: --max_seq_len N --eval_seq_f_max_iter N ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "cli.h"
#include "../src/train/mc.h"
#include "../src/train/sample.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

typedef struct {
    long long limit, threads;
    const char *json, *tokenizer, *delimiter;
    int allow_nonfinite;
    const char *config;
} McArgs;

static const OptSpec MC_OPTS[] = {
    OPT(McArgs, limit, 0, 2147483647, "N", "score the first N items only (0 = all)"),
    OPT(McArgs, json, 0, 0, "OUT", "write the metrics and per-item log-likelihoods"),
    OPT(McArgs, tokenizer, 0, 0, "SPEC", "byte | FILE.bpe | FILE.json (default: the checkpoint's, else byte)"),
    OPT(McArgs, delimiter, 0, 0, "STR", "inserted between context and choice (' ' for choices without a leading space)"),
    OPT(McArgs, threads, 0, 4096, "N", "OpenMP / BLAS threads (0 = all cores)"),
    OPT(McArgs, allow_nonfinite, 0, 0, NULL, "load a checkpoint with NaN/inf weights anyway, for inspection"),
    OPT(McArgs, config, 0, 0, "FILE", "the model config when the checkpoint has none (a config.json of ours, the reference's or Hugging Face's)"),
};
static const OptKeys MC_KEYS[] = {{&model_keytab, NULL, 0}};
const CmdSpec mc_cmd = {
    "mc", "CKPT TASK.jsonl [options]", "multiple-choice log-likelihood evaluation: acc, acc_norm",
    "Scores every choice of every item by the summed log-likelihood of its tokens after the context\n"
    "(one full-sequence forward per context+choice, joint tokenisation as lm-evaluation-harness) and\n"
    "reports acc (argmax log-likelihood), acc_norm (argmax log-likelihood per byte of the choice) and\n"
    "greedy_acc (the gold choice is the greedy continuation: LAMBADA's metric).\n"
    "TASK.jsonl: one object per line, {\"context\": str, \"choices\": [str, ...], \"gold\": int}; also\n"
    "\"query\"/\"ctx\", \"endings\" and \"label\" (int or digit string), as in HellaSwag files.\n"
    "Model keys are applied before loading: --max_seq_len N (longer inputs lose context on the left),\n"
    "--eval_seq_f_max_iter N (each token's cap), --f_tol X, ... (implicit / fp models).\n",
    MC_OPTS, (int)(sizeof MC_OPTS / sizeof *MC_OPTS), MC_KEYS, 1, 2, 2};

static void progress(void *ctx, int done, int total, const McSummary *s) {
    (void)ctx;
    int step = total >= 20 ? total / 20 : 1;
    if (done % step && done != total) return;
    fprintf(stderr, "\r[%d/%d] acc %.4f acc_norm %.4f (%.1f s)%s", done, total, s->acc, s->acc_norm, s->seconds,
            done == total ? "\n" : "");
}

int cmd_mc(int argc, char **argv) {
    McArgs a = {.delimiter = ""};
    OptArgs cl;
    int rc;
    if (!opts_get(&mc_cmd, &a, argc, argv, &cl, &rc)) return rc;
    const char *ckpt = cl.pos[0], *task_path = cl.pos[1], *tok_arg = a.tokenizer, *json_out = a.json, *delim = a.delimiter;
    int limit = (int)a.limit;
    const char *kv[64];
    rc = opts_key_list(&cl, kv, 64);
    opts_free(&cl);
    if (rc) return fail(NULL);
    if (a.threads > 0) k_set_threads((int)a.threads);
    if (report_check(json_out)) return fail(NULL);
    if (report_is_stdout(json_out)) report_reserve_stdout();   /* the summary to stderr, the JSON alone to stdout */
    McTask task;
    if (mc_load(&task, task_path, limit))
        return fail("one JSON object per line: {\"context\": ..., \"choices\": [...], \"gold\": N}");
    Model m;
    int rc_load = gen_load_model(&m, ckpt, kv, &(CkptLoadOpts){.allow_nonfinite = a.allow_nonfinite, .config_path = a.config, .map = 1});
    if (rc_load) {
        mc_free(&task);
        return fail(cli_load_hint(rc_load));
    }
    Tokenizer *tok;
    if (gen_load_tokenizer(&tok, ckpt, tok_arg, &m)) {
        model_free(&m);
        mc_free(&task);
        return fail("choose a tokenizer whose vocabulary fits the model with --tokenizer");
    }
    if (tok_vocab(tok) < m.cfg.vocab_size)
        fprintf(stderr, "note: tokenizer '%s' has %d ids, the model %d (only the tokenizer's ids are meaningful); if the "
                "model was trained with another tokenizer, give it with --tokenizer\n", tok_spec(tok), tok_vocab(tok),
                m.cfg.vocab_size);
    McItemResult *res = calloc((size_t)task.n, sizeof *res);
    McSummary sum;
    McOpts o = {delim, isatty(STDERR_FILENO) ? progress : NULL, NULL};
    rc = res ? mc_run(&m, tok, &task, &o, res, &sum) : err_set(IM_ENOMEM, "out of memory");
    if (!rc) {
        int implicit = model_is_fixed_point(&m);
        printf("%s on %s: %d items, %ld forwards, %s model, %s tokenizer\n", ckpt, task_path, sum.n, sum.forwards,
               m.type->name, tok_spec(tok));
        printf("acc         %.4f\n", sum.acc);
        printf("acc_norm    %.4f\n", sum.acc_norm);
        printf("greedy_acc  %.4f\n", sum.greedy_acc);
        printf("gold loglik %.4f per item, %.4f nats per token\n", sum.gold_loglik, -sum.gold_nll_per_token);
        if (implicit) printf("solver iterations per forward %.2f\n", sum.iters);
        printf("%ld tokens in %.2f s (%.0f tokens/s)", sum.tokens, sum.seconds, sum.seconds > 0 ? sum.tokens / sum.seconds : 0);
        if (sum.n_split) printf("; %d pairs tokenised separately at the boundary", sum.n_split);
        if (sum.n_truncated) printf("; %d pairs truncated to max_seq_len", sum.n_truncated);
        printf("\n");
        if (json_out) rc = mc_write_json(json_out, ckpt, task_path, tok_spec(tok), &task, res, &sum);
    }
    mc_results_free(res, task.n);
    free(res);
    tok_free(tok);
    model_free(&m);
    mc_free(&task);
    return rc ? fail(NULL) : 0;
}
