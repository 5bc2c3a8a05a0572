/* bench_implicit.c: the implicit Mamba2 LM (spec implicit-lm §2-§5) in the three ways it is used:
 * a phantom-gradient training step, simultaneous evaluation and sequential generation. Same cases
 * and semantics as bench/torch_bench.py's imp_* cases, so bench/run.sh prints the ratio. All cases:
 * 1 layer, V=240, weight norm on (spec §6), tau 0.8, f_tol 0 so no solve ever stops early.
 *   imp_train_small/large  "32+4": 32 undamped Picard f calls without gradient (per-sample lowest
 *                          residual returned, §3.1), 4 relaxed steps z = τf(z) + (1−τ)z with
 *                          gradient, tied head + CE, backward, AdamW (clip 1); metric step_tok_s
 *   imp_eval_small/large   the damped evaluation loop (§3.2) with eval_f_max_iter 32 (31 loop calls)
 *                          + the final call = 32 f calls, logits; metric eval_tok_s
 *   imp_gen_b1 / _b32      small size, greedy generation of `tokens` tokens from one random token
 *                          per sequence; per token the loop with eval_f_max_iter 8 (7 calls with
 *                          read-only caches) + 1 committing call (§4); metric gen_tok_s (tokens of
 *                          all sequences per second), and gen_ms_tok (ms per generated position)
 * Sizes: small D=64, E=128, N=16, P=16; large D=256, E=1024, N=128, P=64. B and T per case below
 * (B=32, T=256, except B=8 for the large cases; printed on every line; torch_bench.py has the same
 * table).
 * Output: `implicit <case> <metric>=... ms=... cpu_ms=... <sizes> <roofline fields>` (medians after
 * one warm-up; the roofline fields of bench_util.h, work counted next to the print).
 * Usage: bench_implicit [--quick] [--cases a,b] [--repeats N] [--scaling PAIRS] (--scaling: instead of
 * the timed line, the speedup of the current thread count over one thread as the median of PAIRS
 * call-by-call alternations, bench_util.h bench_scaling). Out of scope: Anderson, IFT,
 * implicit Llama (same seam, other mixer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../src/core/check.h"
#include "../src/core/timer.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/kernels.h"
#include "../src/models/model.h"
#include "../src/train/optim.h"

enum { TRAIN, EVAL, GEN };

typedef struct {
    const char *name;
    int kind;
    int large;          /* 0: D 64, E 128, N 16, P 16; 1: D 256, E 1024, N 128, P 64 */
    int B, T;           /* T = generated tokens for GEN */
    int repeats, quick_repeats;
} Case;

/* The large cases run B=8 × T=256 (not B=32): at B=32 one PyTorch training step takes
 * about 25 s on one core (36 f calls), which would put `make bench` far past its budget. T and
 * the layer sizes are the spec's; per-token cost hardly depends on B at these GEMM heights. */
static const Case CASES[] = {
    {"imp_train_small", TRAIN, 0, 32, 256, 5, 2},
    {"imp_train_large", TRAIN, 1, 8, 256, 3, 2},
    {"imp_eval_small", EVAL, 0, 32, 256, 5, 2},
    {"imp_eval_large", EVAL, 1, 8, 256, 3, 2},
    {"imp_gen_b1", GEN, 0, 1, 256, 5, 2},
    {"imp_gen_b32", GEN, 0, 32, 256, 5, 2},
};

enum { V = 240, SOLVE_ITERS = 32, GRAD_STEPS = 4, EVAL_ITERS = 32, GEN_ITERS = 8 };

static void build(Model *m, const Case *c) {
    static const char *sz[2][4] = {{"64", "2", "16", "16"}, {"256", "4", "128", "64"}};
    const char **s = sz[c->large];
    char solve[16], eval[16];
    snprintf(solve, sizeof solve, "%d", SOLVE_ITERS);
    snprintf(eval, sizeof eval, "%d", c->kind == GEN ? GEN_ITERS : EVAL_ITERS);
    ModelCfg mc;
    cfg_defaults(&mc);
    /* f_tol 0: the stop rules compare residual < tol, so every solve runs its full count */
    const char *kv[] = {"model", "implicit_mamba2", "n_layer", "1", "vocab_size", "240", "d_model", s[0],
                        "expand", s[1], "d_state", s[2], "headdim", s[3], "f_solver", "fixed_point_iter",
                        "f_max_iter", solve, "f_tol", "0", "grad", "4", "tau", "0.8", "eval_f_max_iter", eval,
                        "weight_norm", "1", "pretrain_steps", "0", "bounded_steps", "0", "ift", "0", NULL};
    for (int i = 0; kv[i]; i += 2) CHECK(cfg_set(&mc, kv[i], kv[i + 1]) == 0, "%s", err_msg());
    CHECK(model_create(m, &mc) == 0, "%s", err_msg());
    model_init_params(m, 1);
}

typedef struct {
    Model m;
    AdamW opt;
    int *ids, *tg;      /* (B, T) */
    int *tok;           /* (B) current generation tokens */
    float *logits;      /* (B, V_pad) of one generation step */
} Bench;

static void train_once(Bench *b, const Case *c) {
    float loss;
    CHECK(model_fwd(&b->m, b->ids, b->tg, c->B, c->T, &loss) == 0, "%s", err_msg());
    /* the solve must have run its 32 calls, or the case would not be "32+4" */
    CHECK(b->m.fp_iters == SOLVE_ITERS, "solve ran %g f calls, not %d", b->m.fp_iters, SOLVE_ITERS);
    model_zero_grad(&b->m);
    model_bwd(&b->m);
    adamw_step(&b->opt, &b->m, 1e-4f);
}

static void eval_once(Bench *b, const Case *c) {
    CHECK(model_fwd(&b->m, b->ids, NULL, c->B, c->T, NULL) == 0, "%s", err_msg());
    CHECK(b->m.fp_iters == EVAL_ITERS - 1, "eval loop ran %g f calls", b->m.fp_iters);
}

/* Greedy generation: the argmax of each step's logits is the next input. */
static void gen_once(Bench *b, const Case *c) {
    Model *m = &b->m;
    CHECK(model_state_init(m, c->B) == 0, "%s", err_msg());
    for (int i = 0; i < c->B; i++) b->tok[i] = b->ids[i];
    for (int t = 0; t < c->T; t++) {
        CHECK(model_step(m, b->tok, b->logits) == 0, "%s", err_msg());
        for (int i = 0; i < c->B; i++) {
            const float *l = b->logits + (size_t)i * m->V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best]) best = v;
            b->tok[i] = best;
        }
    }
    CHECK(m->fp_iters == GEN_ITERS - 1, "generation loop ran %g f calls per token", m->fp_iters);
}

/* One call of the case (bench_scaling's step). */
typedef struct {
    Bench *b;
    const Case *c;
} Once;

static void once(void *ctx) {
    Once *o = ctx;
    if (o->c->kind == TRAIN) train_once(o->b, o->c);
    else if (o->c->kind == EVAL) eval_once(o->b, o->c);
    else gen_once(o->b, o->c);
}

/* scaling > 0: only the call-by-call alternation of one thread and the current count
 * (bench_util.h bench_scaling), no timed line. */
static void run(const Case *c, int repeats, int scaling) {
    Bench b;
    memset(&b, 0, sizeof b);
    build(&b.m, c);
    b.m.training = c->kind == TRAIN;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    if (c->kind == TRAIN) adamw_init(&b.opt, &b.m, &oc);
    size_t n = (size_t)c->B * c->T;
    b.ids = malloc(sizeof(int) * n);
    b.tg = malloc(sizeof(int) * n);
    b.tok = malloc(sizeof(int) * (size_t)c->B);
    b.logits = malloc(sizeof(float) * (size_t)c->B * b.m.V);
    CHECK(b.ids && b.tg && b.tok && b.logits, "out of memory");
    Rng r;
    rng_seed(&r, 3, 0);
    for (size_t i = 0; i < n; i++) b.ids[i] = (int)rng_below(&r, V), b.tg[i] = (int)rng_below(&r, V);
    Once o = {&b, c};
    if (scaling > 0) {
        bench_scaling(c->name, k_get_threads(), scaling, once, &o);
        free(b.ids); free(b.tg); free(b.tok); free(b.logits);
        if (c->kind == TRAIN) adamw_free(&b.opt);
        model_free(&b.m);
        return;
    }
    double *ts = malloc(sizeof(double) * (size_t)repeats), *cs = malloc(sizeof(double) * (size_t)repeats);
    for (int i = 0; i < 1 + repeats; i++) {   /* one warm-up, then the timed repeats */
        double t0 = timer_now(), c0 = cpu_now();
        once(&o);
        if (i >= 1) ts[i - 1] = timer_now() - t0, cs[i - 1] = cpu_now() - c0;
    }
    qsort(ts, (size_t)repeats, sizeof *ts, cmp_double);
    qsort(cs, (size_t)repeats, sizeof *cs, cmp_double);
    double s = ts[(repeats - 1) / 2], tok = (double)n;   /* lower median, as torch_bench.py */
    printf("implicit %s ", c->name);
    if (c->kind == TRAIN)
        printf("step_tok_s=%.1f ms=%.1f cpu_ms=%.1f f_calls=%d+%d", tok / s, s * 1e3, cs[(repeats - 1) / 2] * 1e3,
               SOLVE_ITERS, GRAD_STEPS);
    else if (c->kind == EVAL)
        printf("eval_tok_s=%.1f ms=%.1f cpu_ms=%.1f f_calls=%d", tok / s, s * 1e3, cs[(repeats - 1) / 2] * 1e3,
               EVAL_ITERS);
    else
        printf("gen_tok_s=%.1f gen_ms_tok=%.4f ms=%.1f cpu_ms=%.1f f_calls_tok=%d tokens=%d", tok / s, s * 1e3 / c->T,
               s * 1e3, cs[(repeats - 1) / 2] * 1e3, GEN_ITERS, c->T);
    /* work (bench_util.h): training "32+4" = 32 forward passes + 4 graded ones through the layer;
     * evaluation 32 forward passes; generation 8 passes per token, weights read once per token */
    Shape sh = shape_of_model(&b.m);
    Work w = c->kind == TRAIN  ? work_train(&sh, (double)b.m.act_bytes, c->B, c->T, SOLVE_ITERS, GRAD_STEPS)
             : c->kind == EVAL ? work_eval(&sh, (double)b.m.act_bytes, c->B, c->T, EVAL_ITERS)
                               : work_gen(&sh, c->B, c->T, GEN_ITERS);
    char roof[320];
    printf(" B=%d T=%d D=%s params=%zu repeats=%d threads=%d blas=%s gemm=%s %s\n", c->B, c->T, c->large ? "256" : "64",
           ptab_count(&b.m.tab), repeats, k_get_threads(), k_blas_name(), k_gemm_backend(),
           roof_fields(roof, sizeof roof, w, s, cs[(repeats - 1) / 2], k_get_threads()));
    fflush(stdout);
    free(ts); free(cs); free(b.ids); free(b.tg); free(b.tok); free(b.logits);
    if (c->kind == TRAIN) adamw_free(&b.opt);
    model_free(&b.m);
}

int main(int argc, char **argv) {
    bench_threads_as_cli();
    int quick = 0, repeats = 0, scaling = 0;
    const char *cases = "imp_train_small,imp_train_large,imp_eval_small,imp_eval_large,imp_gen_b1,imp_gen_b32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scaling") && i + 1 < argc) scaling = bench_count_arg("bench_implicit", "--scaling", argv[++i]);
        else {
            fprintf(stderr, "usage: bench_implicit [--quick] [--cases a,b] [--repeats N] [--scaling PAIRS]\n");
            return 1;
        }
    }
    if (scaling) bench_scaling_needs_threads("bench_implicit");
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const Case *c = &CASES[i];
        /* exact names: "imp_gen_b1" must not select "imp_gen_b32" */
        size_t len = strlen(c->name);
        int hit = 0;
        for (const char *p = strstr(cases, c->name); p && !hit; p = strstr(p + 1, c->name))
            hit = (p == cases || p[-1] == ',') && (p[len] == ',' || p[len] == '\0');
        if (hit) run(c, repeats > 0 ? repeats : quick ? c->quick_repeats : c->repeats, scaling);
    }
    return 0;
}
