/* cmd_generate.c: `implicit generate` — sample text from a checkpoint token by token.
 *
 *   implicit generate CKPT --prompt TEXT [--max_tokens N] [--temperature T] [--top_k K] [--top_p P]
 *                    [--seed S] [--stop STR] [--tokenizer SPEC] [--threads N] [--json OUT] [--echo 0|1]
 *                    [model evaluation keys: --max_seq_len N --eval_seq_f_max_iter N --seq_solver ...]
 *
 * The text streams to stdout as it is produced; the statistics (tokens/s, solver iterations per
 * token, peak resident memory) go to stderr, so `> out.txt` keeps only the text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine.h"
#include "cli.h"
#include "../src/io/atomic.h"
#include "../src/train/sample.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

typedef struct {
    int to_stdout;
    char *text;      /* (len) everything emitted, kept for --json only */
    size_t len, cap;
    int last_nl;
} Sink;

static int emit(void *ctx, const char *p, size_t n) {
    Sink *s = ctx;
    if (s->to_stdout) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
    }
    if (n) s->last_nl = p[n - 1] == '\n';
    if (s->cap) {
        if (s->len + n + 1 > s->cap) {
            size_t cap = 2 * (s->len + n + 1);
            char *t = realloc(s->text, cap);
            if (!t) return err_set(IM_ENOMEM, "out of memory keeping the text for --json");
            s->text = t;
            s->cap = cap;
        }
        memcpy(s->text + s->len, p, n);
        s->len += n;
        s->text[s->len] = 0;
    }
    return IM_OK;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;   /* Linux: kilobytes */
}

static int write_json(const char *path, const char *ckpt, const Model *m, const Tokenizer *tok, const SampleCfg *sc,
                      const GenStats *st, const Sink *sink, double rss) {
    JsonBuf b;
    json_buf_init(&b, 2);
    json_buf_begin_obj(&b);
    json_buf_kv_str(&b, "checkpoint", ckpt);
    json_buf_kv_str(&b, "model", m->type->name);
    json_buf_kv_str(&b, "tokenizer", tok_spec(tok));
    json_buf_kv_num(&b, "temperature", sc->temperature);
    json_buf_kv_int(&b, "top_k", sc->top_k);
    json_buf_kv_num(&b, "top_p", sc->top_p);
    json_buf_kv_int(&b, "seed", (int64_t)sc->seed);
    json_buf_kv_int(&b, "prompt_tokens", st->n_prompt);
    json_buf_kv_int(&b, "generated_tokens", st->n_gen);
    json_buf_kv_num(&b, "prompt_seconds", st->prompt_s);
    json_buf_kv_num(&b, "generation_seconds", st->gen_s);
    json_buf_kv_num(&b, "prompt_tokens_per_s", st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0);
    json_buf_kv_num(&b, "generation_tokens_per_s", st->gen_s > 0 ? st->n_gen / st->gen_s : 0);
    json_buf_kv_num(&b, "prompt_iters_per_token", st->prompt_iters);
    json_buf_kv_num(&b, "generation_iters_per_token", st->gen_iters);
    if (m->type->family == MODEL_FP_RNN) { /* the reference's convention: iter_idx + 1 per solve */
        json_buf_kv_num(&b, "prompt_iters_per_token_ref", st->prompt_iters > 0 ? st->prompt_iters + 1 : 0);
        json_buf_kv_num(&b, "generation_iters_per_token_ref", st->gen_iters > 0 ? st->gen_iters + 1 : 0);
    }
    json_buf_kv_num(&b, "peak_rss_mb", rss);
    json_buf_kv_str(&b, "stop_reason", st->stop_reason);
    json_buf_key(&b, "text");
    json_buf_strn(&b, sink->text ? sink->text : "", sink->len);
    json_buf_end_obj(&b);
    json_buf_append(&b, "\n", 1);
    int rc = b.failed ? err_set(IM_ENOMEM, "out of memory writing %s", path) : report_write_bytes(path, b.data, b.len);
    json_buf_free(&b);
    return rc;
}

typedef struct {
    const char *prompt, *stop, *tokenizer, *json;
    long long max_tokens, top_k, seed, threads, echo;
    double temperature, top_p;
    int allow_nonfinite;
    const char *config;
} GenArgs;

static const OptSpec GEN_OPTS[] = {
    OPT(GenArgs, prompt, 0, 0, "TEXT", "the text to continue (may be empty if the tokenizer has an end-of-text token)"),
    OPT(GenArgs, max_tokens, 0, 1 << 30, "N", "tokens to generate"),
    OPT(GenArgs, temperature, 0, 0, "T", "0 = greedy"),
    OPT(GenArgs, top_k, 0, 2147483647, "K", "sample among the K most likely (0 = all)"),
    OPT(GenArgs, top_p, 0, 0, "P", "sample among the smallest set with mass >= P (1 = all)"),
    OPT(GenArgs, seed, 0, 1e18, "S", "seed of the draws: the same seed gives the same text"),
    OPT(GenArgs, stop, 0, 0, "STR", "stop when the text contains STR (STR is not printed)"),
    OPT(GenArgs, tokenizer, 0, 0, "SPEC", "byte | FILE.bpe | FILE.json (default: the checkpoint's, else byte)"),
    OPT(GenArgs, echo, 0, 1, "0|1", "print the prompt before the continuation"),
    OPT(GenArgs, threads, 0, 4096, "N", "OpenMP / BLAS threads (0 = all cores)"),
    OPT(GenArgs, json, 0, 0, "OUT", "write a summary (text, token counts, tokens/s, iterations, memory)"),
    OPT(GenArgs, allow_nonfinite, 0, 0, NULL, "load a checkpoint with NaN/inf weights anyway, for inspection"),
    OPT(GenArgs, config, 0, 0, "FILE", "the model config when the checkpoint has none (a config.json of ours, the reference's or Hugging Face's)"),
};
static const OptKeys GEN_KEYS[] = {{&model_keytab, NULL, 0}};
const CmdSpec generate_cmd = {
    "generate", "CKPT --prompt TEXT [options]", "sample text token by token from a checkpoint",
    "Feeds the prompt token by token (sequential mode: recurrent state, KV cache, or the per-token\n"
    "fixed point of implicit / fixed-point models), then samples; the text streams to stdout.\n"
    "Model keys are applied before loading: --max_seq_len N (KV-cache capacity of attention models),\n"
    "and for implicit / fp models --eval_seq_f_max_iter (each token's cap) --f_tol --tau --seq_solver\n"
    "--seq_warm_start --anderson_m --fp_eval_cap --fp_threshold (test-time compute).\n"
    "stderr receives tokens/s for the prompt and the generation, mean solver iterations per token\n"
    "(0 for explicit models) and the peak resident memory (getrusage ru_maxrss).\n",
    GEN_OPTS, (int)(sizeof GEN_OPTS / sizeof *GEN_OPTS), GEN_KEYS, 1, 1, 1};

int cmd_generate(int argc, char **argv) {
    SampleCfg sc;
    GenOpts go;
    sample_cfg_default(&sc);
    gen_opts_default(&go);
    /* all cores by default: the kernels fork only calls big enough to win on two threads
     * (kernels/cpu/threading.h), so the many tiny calls of batch-1 steps stay on one */
    GenArgs a = {.max_tokens = go.max_tokens, .top_k = sc.top_k, .seed = (long long)sc.seed, .threads = 0, .echo = 1,
                 .temperature = sc.temperature, .top_p = sc.top_p};
    OptArgs o;
    int rc;
    if (!opts_get(&generate_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *ckpt = o.pos[0], *prompt = a.prompt, *tok_spec_arg = a.tokenizer, *json_out = a.json, *kv[64];
    rc = opts_key_list(&o, kv, 64);
    opts_free(&o);
    if (rc) return fail(NULL);
    if (!prompt) {
        err_set(IM_EINVAL, "missing --prompt");
        return fail("implicit generate CKPT --prompt \"Once upon a time\"");
    }
    if (report_check(json_out)) return fail(NULL);
    if (report_is_stdout(json_out)) report_reserve_stdout();   /* the text to stderr, the JSON alone to stdout */
    if (a.threads > 0) k_set_threads((int)a.threads);
    sc.temperature = (float)a.temperature;
    sc.top_k = (int)a.top_k;
    sc.top_p = (float)a.top_p;
    sc.seed = (uint64_t)a.seed;
    go.max_tokens = (int)a.max_tokens;
    go.stop = a.stop && *a.stop ? a.stop : NULL;
    int echo = (int)a.echo;
    Model m;
    int rc_load = gen_load_model(&m, ckpt, kv, &(CkptLoadOpts){.allow_nonfinite = a.allow_nonfinite, .config_path = a.config, .map = 1});
    if (rc_load) return fail(cli_load_hint(rc_load));
    Tokenizer *tok;
    if (gen_load_tokenizer(&tok, ckpt, tok_spec_arg, &m)) {
        model_free(&m);
        return fail("choose a tokenizer whose vocabulary fits the model with --tokenizer");
    }
    if (tok_vocab(tok) < m.cfg.vocab_size)
        fprintf(stderr, "note: tokenizer '%s' has %d ids, the model %d (only the tokenizer's ids are sampled); if the "
                "model was trained with another tokenizer, give it with --tokenizer\n", tok_spec(tok), tok_vocab(tok),
                m.cfg.vocab_size);
    Sampler s;
    int *ids = NULL, *out = NULL;
    size_t n_ids = 0;
    if ((rc = sampler_init(&s, &sc, tok_vocab(tok)))) goto done;
    if ((rc = tok_encode(tok, prompt, strlen(prompt), &ids, &n_ids))) goto done;
    if (n_ids == 0) {
        if (tok_eos(tok) < 0) {
            rc = err_set(IM_EINVAL, "the prompt is empty and tokenizer '%s' has no end-of-text token to start from; "
                         "give --prompt TEXT", tok_spec(tok));
            goto done;
        }
        free(ids);
        if (!(ids = malloc(sizeof *ids))) { rc = err_set(IM_ENOMEM, "out of memory"); goto done; }
        ids[0] = tok_eos(tok);
        n_ids = 1;
    }
    out = malloc(sizeof *out * (size_t)(go.max_tokens > 0 ? go.max_tokens : 1));
    Sink sink = {1, NULL, 0, json_out ? 1 : 0, 1};
    if (json_out && !(sink.text = calloc(1, 1))) rc = err_set(IM_ENOMEM, "out of memory");
    if (!out || rc) { rc = rc ? rc : err_set(IM_ENOMEM, "out of memory"); goto done; }
    if (echo && *prompt) {
        fputs(prompt, stdout);
        fflush(stdout);
        sink.last_nl = prompt[strlen(prompt) - 1] == '\n';
    }
    go.emit = emit;
    go.emit_ctx = &sink;
    GenStats st;
    rc = gen_run(&m, tok, &s, ids, (int)n_ids, &go, out, &st);
    if (isatty(STDOUT_FILENO) && !sink.last_nl) fputc('\n', stdout);
    fflush(stdout);
    double rss = peak_rss_mb();
    int implicit = model_is_fixed_point(&m);
    fprintf(stderr, "[%s, %s tokenizer] prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens in %.3f s "
            "(%.1f tok/s); stop: %s\n",
            m.type->name, tok_kind(tok), st.n_prompt, st.prompt_s, st.prompt_s > 0 ? st.n_prompt / st.prompt_s : 0,
            st.n_gen, st.gen_s, st.gen_s > 0 ? st.n_gen / st.gen_s : 0, st.stop_reason);
    fprintf(stderr, "solver iterations per token: prompt %.2f, generation %.2f%s; peak resident memory %.1f MB\n",
            st.prompt_iters, st.gen_iters, implicit ? "" : " (explicit model)", rss);
    if (!rc && json_out) rc = write_json(json_out, ckpt, &m, tok, &sc, &st, &sink, rss);
    free(sink.text);
done:
    free(out);
    free(ids);
    sampler_free(&s);
    tok_free(tok);
    model_free(&m);
    return rc ? fail(rc == IM_EINVAL && strstr(err_msg(), "KV cache") ? "raise the KV-cache capacity with --max_seq_len N"
                                                                       : NULL)
              : 0;
}
