/* bench_lm.c: language-model throughput at the tinyshakespeare sizes of docs/results/language-modelling.md (byte vocabulary
 * 256, 4 layers, d_model 128, context 64, batch 12): one training step (forward, backward, AdamW with
 * clipping 1) and batch-1 generation (256 greedy tokens through model_step, the path of `implicit
 * generate`), for each family. bench/torch_bench.py has the same cases (lm_*_train, lm_*_gen) for
 * lm_llama, lm_mamba2 and lm_imp_mamba2; lm_fp_mamba is C only.
 *   lm_llama       explicit Llama (4 heads, d_inner 512)
 *   lm_mamba2      explicit Mamba2 (N 16, P 32, gated MLP 512)
 *   lm_imp_mamba2  implicit Mamba2, the free phase of the README run ("8+2"; evaluation cap 16) with
 *                  f_tol 0, so no loop stops early and both sides do the same f calls: training 8
 *                  no-grad + 2 relaxed (tau 0.8), generation 15 loop calls + 1 committing call per
 *                  token (gen_iters = 15); the README run's f_tol 0.05 stops after ~10 when untrained
 *   lm_fp_mamba    FP-Mamba-H r 1 (short conv, gate in the loop, ℓ_max 16, evaluation cap 100)
 * Generation only, at the shapes of llama2.c's checkpoints (random weights; vocabulary 32000 with
 * random ids, as the head's cost is the point, not the text), bound by reading the weights once
 * per token:
 *   lm_stories15m  Llama D 288, 6 layers, 6 heads, SwiGLU hidden 768 (d_inner 1152), V 32000, tied:
 *                  15.2M parameters, 61 MB read per token; 64 tokens
 *   lm_llama110m   Llama D 768, 12 layers, 12 heads, SwiGLU hidden 2048 (d_inner 3072), V 32000,
 *                  tied: 84.9M in the layers + 24.6M embedding/head = 109.5M, 438 MB per token;
 *                  16 tokens (with V 256 it would be the 85M of the layers alone); one process
 *                  holds θ and dθ, 0.9 GB
 * Output: two lines per case, in the `implicit NAME metric=value ...` form bench/run.sh pairs with
 * the torch side by NAME and its first metric:
 *   implicit <case>_train train_tok_s=... ms=... iters=... params=... <roofline fields>
 *   implicit <case>_gen gen_tok_s=... gen_ms_tok=... gen_iters=... params=... <roofline fields>
 * (medians after one warm-up; train iters / gen_iters: solver f evaluations per step / token, 0 for
 * explicit models). --cases takes the case names (both lines) or the line names.
 * Work (bench_util.h, from the parameter table): training = work_train with the measured no-grad
 * f calls and the model's graded ones (~6 x params x tokens + attention 6 x 4 D x (T+1)/2 per layer
 * and token + scan 3 x 5 E N; bytes = 11 floats per parameter + the stored activations twice);
 * generation = work_gen with the f calls per token (bytes = the weights once per token + state /
 * KV cache).
 * With lm_imp_mamba2 (or --cases lm_imp_mamba2_solver) also the solver overhead line (see
 * solver_overhead below).
 * Usage: bench_lm [--quick] [--cases a,b]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../src/core/check.h"
#include "../src/core/timer.h"
#include "../src/kernels/kernels.h"
#include "../src/models/model.h"
#include "../src/train/optim.h"

typedef struct {
    const char *name;
    int gen_only;    /* 1: no training line (and no optimizer state) */
    int gen;         /* generated tokens */
    const char *model[24];
} Case;

enum { B = 12, T = 64, GEN = 256 };

static const Case CASES[] = {
    {"lm_llama", 0, GEN, {"model", "llama", "n_head", "4", "d_inner", "512", NULL}},
    {"lm_mamba2", 0, GEN, {"model", "mamba2", "d_state", "16", "headdim", "32", "d_inner", "512", NULL}},
    {"lm_imp_mamba2", 0, GEN, {"model", "implicit_mamba2", "d_state", "16", "headdim", "32", "d_inner", "512",
                               "f_max_iter", "8", "grad", "2", "eval_f_max_iter", "16", "f_tol", "0", NULL}},
    {"lm_fp_mamba", 0, GEN, {"model", "fp_mamba", "short_conv", "1", "glu_in_loop", "1", "bc_norm", "0", "mixer_type",
                             "householder", "fp_max_iter", "16", "fp_eval_cap", "100", NULL}},
    {"lm_stories15m", 1, 64, {"model", "llama", "vocab_size", "32000", "n_layer", "6", "d_model", "288", "n_head",
                              "6", "d_inner", "1152", "max_seq_len", "64", NULL}},
    {"lm_llama110m", 1, 16, {"model", "llama", "vocab_size", "32000", "n_layer", "12", "d_model", "768", "n_head",
                             "12", "d_inner", "3072", "max_seq_len", "16", NULL}},
};

/* One case: `repeats` timed training steps after one warm-up step, then `repeats` timed
 * generations after one warm-up generation; prints the lines asked for (train, gen). */
static void run(const Case *c, int repeats, int train, int gen) {
    ModelCfg mc;
    cfg_defaults(&mc);
    const char *base[] = {"vocab_size", "256", "n_layer", "4", "d_model", "128", NULL};
    for (int i = 0; base[i]; i += 2) CHECK(cfg_set(&mc, base[i], base[i + 1]) == 0, "%s", err_msg());
    for (int i = 0; c->model[i]; i += 2) CHECK(cfg_set(&mc, c->model[i], c->model[i + 1]) == 0, "%s", err_msg());
    Model m;
    CHECK(model_create(&m, &mc) == 0, "%s", err_msg());
    model_init_params(&m, 1);
    AdamW opt;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    if (train) adamw_init(&opt, &m, &oc);
    int *ids = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    Rng r;
    rng_seed(&r, 3, 0);
    /* printable bytes, as in text */
    for (int i = 0; i < B * T; i++) ids[i] = 32 + (int)rng_below(&r, 95), tg[i] = 32 + (int)rng_below(&r, 95);
    double *ts = calloc((size_t)repeats, sizeof(double)), *gs = calloc((size_t)repeats, sizeof(double));
    double *cts = calloc((size_t)repeats, sizeof(double)), *cgs = calloc((size_t)repeats, sizeof(double));
    double iters = 0, titers = 0;
    float *logits = malloc(sizeof(float) * (size_t)m.V);
    /* the training steps back to back, then the generations: a switch between training and
     * generation re-plans the model's activation arena (model_plan), which a training loop does
     * once per evaluation, not once per step, so it is no part of a step's time */
    for (int i = 0; train && i < 1 + repeats; i++) {
        double t0 = timer_now(), c0 = cpu_now();
        m.training = 1;
        float loss;
        CHECK(model_fwd(&m, ids, tg, B, T, &loss) == 0, "%s", err_msg());
        double ti = m.fp_iters;
        model_zero_grad(&m);
        model_bwd(&m);
        adamw_step(&opt, &m, 1e-4f);
        double t1 = timer_now(), c1 = cpu_now();
        if (i >= 1) ts[i - 1] = t1 - t0, cts[i - 1] = c1 - c0, titers += ti;
    }
    for (int i = 0; gen && i < 1 + repeats; i++) {
        /* generation: batch 1, c->gen tokens, greedy on the last logits */
        m.training = 0;
        CHECK(model_state_init(&m, 1) == 0, "%s", err_msg());
        int tok = 'T';
        double it = 0, g0 = timer_now(), cg0 = cpu_now();
        for (int k = 0; k < c->gen; k++) {
            CHECK(model_step(&m, &tok, logits) == 0, "%s", err_msg());
            it += m.fp_iters;
            int best = 0;
            for (int v = 1; v < mc.vocab_size; v++) best = logits[v] > logits[best] ? v : best;
            tok = best;
        }
        double g1 = timer_now(), cg1 = cpu_now();
        if (i >= 1) gs[i - 1] = g1 - g0, cgs[i - 1] = cg1 - cg0, iters += it / c->gen;
    }
    double s = median(ts, repeats), g = median(gs, repeats), cs = median(cts, repeats), cg = median(cgs, repeats);
    char tail[160], roof[320];
    snprintf(tail, sizeof tail, "params=%zu repeats=%d threads=%d blas=%s", ptab_count(&m.tab), repeats,
             k_get_threads(), k_blas_name());
    Shape sh = shape_of_model(&m);
    if (train) {
        Work w = work_train(&sh, (double)m.act_bytes, B, T, titers / repeats, f_grad_passes(&mc));
        printf("implicit %s_train train_tok_s=%.1f ms=%.1f iters=%.2f B=%d T=%d %s %s\n", c->name, B * T / s, s * 1e3,
               titers / repeats, B, T, tail, roof_fields(roof, sizeof roof, w, s, cs, k_get_threads()));
    }
    if (gen) {
        Work w = work_gen(&sh, 1, c->gen, f_gen_calls(&mc, iters / repeats));
        printf("implicit %s_gen gen_tok_s=%.1f gen_ms_tok=%.4f gen_iters=%.2f tokens=%d B=1 %s %s\n", c->name,
               c->gen / g, g * 1e3 / c->gen, iters / repeats, c->gen, tail,
               roof_fields(roof, sizeof roof, w, g, cg, k_get_threads()));
    }
    fflush(stdout);
    free(ts); free(gs); free(cts); free(cgs); free(ids); free(tg); free(logits);
    if (train) adamw_free(&opt);
    model_free(&m);
}

/* Solver overhead (lm_imp_mamba2_solver): the implicit training step (forward + backward, no
 * optimizer) against what its f calls cost without the solver around them: the explicit Mamba2
 * LM of the same shapes (the same blocks, embedding and head) timed on its own,
 *   ideal = f calls x (one explicit no-grad forward) + graded calls x (one explicit backward),
 *   backward = (explicit forward + backward) - (explicit forward with caches),
 * and overhead = step / ideal (1.0 = the solver adds nothing; the target is <= 1.15). The
 * explicit forward also runs the embedding and the head, which the implicit step runs once, so
 * the ideal is a little generous. CPU time (robust to a loaded machine), min over repeats.
 * Prints `solver lm_imp_mamba2 overhead=... step_ms=... ideal_ms=... fwd_ms=... bwd_ms=...
 * f_calls=... graded=...` (not an `implicit` line: its number is a ratio, lower is better). */
static void solver_overhead(int repeats) {
    const char *base[] = {"vocab_size", "256", "n_layer", "4", "d_model", "128", "d_state", "16", "headdim", "32",
                          "d_inner", "512", NULL};
    const Case *ic = &CASES[2]; /* lm_imp_mamba2 */
    ModelCfg mi, me;
    cfg_defaults(&mi), cfg_defaults(&me);
    for (int i = 0; base[i]; i += 2)
        CHECK(cfg_set(&mi, base[i], base[i + 1]) == 0 && cfg_set(&me, base[i], base[i + 1]) == 0, "%s", err_msg());
    for (int i = 0; ic->model[i]; i += 2) CHECK(cfg_set(&mi, ic->model[i], ic->model[i + 1]) == 0, "%s", err_msg());
    CHECK(cfg_set(&me, "model", "mamba2") == 0, "%s", err_msg());
    Model m[2];
    CHECK(model_create(&m[0], &mi) == 0 && model_create(&m[1], &me) == 0, "%s", err_msg());
    model_init_params(&m[0], 1), model_init_params(&m[1], 1);
    int *ids = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    Rng r;
    rng_seed(&r, 3, 0);
    for (int i = 0; i < B * T; i++) ids[i] = 32 + (int)rng_below(&r, 95), tg[i] = 32 + (int)rng_below(&r, 95);
    /* best CPU seconds of: [0] implicit fwd+bwd, [1] explicit no-grad fwd, [2] explicit training
     * fwd, [3] explicit training fwd+bwd; one untimed warm-up of each */
    double best[4] = {1e30, 1e30, 1e30, 1e30}, f_calls = 0;
    float loss;
    for (int kind = 0; kind < 4; kind++) {
        Model *x = &m[kind == 0 ? 0 : 1];
        x->training = kind != 1;
        for (int i = 0; i < 1 + repeats; i++) {
            double c0 = cpu_now();
            CHECK(model_fwd(x, ids, tg, B, T, &loss) == 0, "%s", err_msg());
            if (kind == 0 || kind == 3) {
                model_zero_grad(x);
                model_bwd(x);
            }
            double c = cpu_now() - c0;
            if (kind == 0) f_calls = x->fp_iters + mi.grad;
            if (i > 0 && c < best[kind]) best[kind] = c;
        }
    }
    double fwd = best[1], bwd = best[3] - best[2];
    double ideal = f_calls * fwd + mi.grad * bwd;
    printf("solver lm_imp_mamba2 overhead=%.3f step_ms=%.1f ideal_ms=%.1f fwd_ms=%.2f bwd_ms=%.2f f_calls=%.0f "
           "graded=%d B=%d T=%d threads=%d blas=%s (CPU time)\n",
           best[0] / ideal, best[0] * 1e3, ideal * 1e3, fwd * 1e3, bwd * 1e3, f_calls, mi.grad, B, T, k_get_threads(),
           k_blas_name());
    fflush(stdout);
    free(ids), free(tg);
    model_free(&m[0]), model_free(&m[1]);
}

/* Is `name` in the comma-separated list? */
static int listed(const char *list, const char *name) {
    char want[80], all[1024];
    snprintf(want, sizeof want, ",%s,", name);
    snprintf(all, sizeof all, ",%s,", list);
    return strstr(all, want) != NULL;
}

int main(int argc, char **argv) {
    bench_threads_as_cli();
    int quick = 0;
    const char *cases = "lm_llama,lm_mamba2,lm_imp_mamba2,lm_fp_mamba,lm_stories15m,lm_llama110m";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strncmp(argv[i], "--", 2) && i + 1 < argc && argv[i + 1][0] != '-') i++; /* another bench's option */
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        char tr[64], ge[64];
        snprintf(tr, sizeof tr, "%s_train", CASES[i].name);
        snprintf(ge, sizeof ge, "%s_gen", CASES[i].name);
        int all = listed(cases, CASES[i].name), gen = all || listed(cases, ge);
        int train = !CASES[i].gen_only && (all || listed(cases, tr));
        if (train || gen) run(&CASES[i], quick ? 2 : 3, train, gen);
    }
    if (listed(cases, "lm_imp_mamba2") || listed(cases, "lm_imp_mamba2_solver")) solver_overhead(quick ? 2 : 3);
    return 0;
}
