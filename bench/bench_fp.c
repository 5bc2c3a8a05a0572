/* bench_fp.c: one training step of the FP-Mamba-H LM (spec fp-rnn §3.1, §3.4) at the word-problem
 * setting: Householder r=1, concat h-dep mixer input, no conv, 1 layer, d_state 16, expand 2,
 * A5 vocabulary (67, padded to 72), T = 17 (BOS + 16), B = 64.
 *   fp_h64   d_model 64  (E 128,  mixer input 256)
 *   fp_h512  d_model 512 (E 1024, mixer input 2048)
 * A step = forward (the FixedPointOptimizer without gradient, ℓ_max 16, then one graded step and the
 * output gate, tied head + CE) + backward + AdamW. The threshold is set to 1e-30 so no solve stops
 * early: every step runs exactly 16 no-grad f evaluations (+ 1 graded), and bench/torch_bench.py's
 * fp_* cases (the torch FP-Mamba of tests/ref/gen_fp_mamba.py, threshold 0) run exactly the same
 * count; both sides print it (iters = mean no-grad evaluations per step and layer).
 * The baselines of the paper's comparison run the same step at d_model 64 (C only; their PyTorch
 * counterparts are not in bench/torch_bench.py): m2_64 (Mamba-2, 2 layers, headdim 16), m1_64
 * (Mamba-1, 2 layers), gdn_64 (Gated DeltaNet, 2 layers, 2 heads of 16), lstm_64 (1 layer).
 * Output: `implicit <case> step_tok_s=... ms=... cpu_ms=... iters=... <roofline fields>` (medians after
 * one warm-up; bench_util.h's roofline fields).
 * Usage: bench_fp [--quick] [--cases a,b] [--repeats N] [--scaling PAIRS]   (--quick: fewer timed
 * repeats; --scaling: instead of the timed line, the speedup of the current thread count over one
 * thread as the median of PAIRS step-by-step alternations, bench_util.h bench_scaling)
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

typedef struct {
    const char *name;
    const char *d_model;
    int repeats, quick_repeats;
    const char *model[12]; /* NULL: the FP-Mamba-H config below; else the model keys of a baseline */
} Case;

static const Case CASES[] = {
    {"fp_h64", "64", 5, 2, {NULL}},
    {"fp_h512", "512", 3, 1, {NULL}},
    {"m2_64", "64", 5, 2, {"model", "mamba2", "n_layer", "2", "d_state", "16", "headdim", "16", NULL}},
    {"m1_64", "64", 5, 2, {"model", "mamba1", "n_layer", "2", "d_state", "16", NULL}},
    {"gdn_64", "64", 5, 2, {"model", "gated_deltanet", "n_layer", "2", "n_head", "2", "delta_head_dim", "16", NULL}},
    {"lstm_64", "64", 5, 2, {"model", "lstm", "n_layer", "1", NULL}},
};

enum { B = 64, T = 17, V = 67 };
#define L_MAX "16"

/* One training step: forward, backward, AdamW. */
typedef struct {
    Model *m;
    AdamW *opt;
    const int *ids, *tg;
} Step;

static void step(void *ctx) {
    Step *st = ctx;
    float loss;
    CHECK(model_fwd(st->m, st->ids, st->tg, B, T, &loss) == 0, "%s", err_msg());
    model_zero_grad(st->m);
    model_bwd(st->m);
    adamw_step(st->opt, st->m, 1e-4f);
}

/* scaling > 0: only the step-by-step alternation of one thread and the current count
 * (bench_util.h bench_scaling), no timed line. */
static void run(const Case *c, int repeats, int scaling) {
    ModelCfg mc;
    cfg_defaults(&mc);
    const char *kv[] = {"model", "fp_mamba", "n_layer", "1", "vocab_size", "67", "pad_vocab_multiple", "8",
                        "d_model", c->d_model, "d_state", "16", "expand", "2", "mixer_type", "householder",
                        "mixer_rank", "1", "mixer_h_dep", "1", "symm_mixer", "0", "short_conv", "0",
                        "glu_in_loop", "0", "fp_n_backwards", "1", "fp_max_iter", L_MAX, "fp_threshold", "1e-30",
                        NULL};
    if (c->model[0]) {
        cfg_defaults(&mc);
        const char *base[] = {"vocab_size", "67", "pad_vocab_multiple", "8", "d_model", c->d_model, NULL};
        for (int i = 0; base[i]; i += 2) CHECK(cfg_set(&mc, base[i], base[i + 1]) == 0, "%s", err_msg());
        for (int i = 0; c->model[i]; i += 2) CHECK(cfg_set(&mc, c->model[i], c->model[i + 1]) == 0, "%s", err_msg());
    } else {
        for (int i = 0; kv[i]; i += 2) CHECK(cfg_set(&mc, kv[i], kv[i + 1]) == 0, "%s", err_msg());
    }
    Model m;
    CHECK(model_create(&m, &mc) == 0, "%s", err_msg());
    model_init_params(&m, 1);
    m.training = 1;
    AdamW opt;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    adamw_init(&opt, &m, &oc);
    int *ids = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    Rng r;
    rng_seed(&r, 3, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int)rng_below(&r, V), tg[i] = (int)rng_below(&r, V);
    Step st = {&m, &opt, ids, tg};
    if (scaling > 0) {
        bench_scaling(c->name, k_get_threads(), scaling, step, &st);
        free(ids), free(tg);
        adamw_free(&opt);
        model_free(&m);
        return;
    }
    double *ts = malloc(sizeof(double) * (size_t)repeats), *cs = malloc(sizeof(double) * (size_t)repeats);
    double iters = 0;
    for (int i = 0; i < 1 + repeats; i++) {
        double t0 = timer_now(), c0 = cpu_now();
        step(&st);
        if (i >= 1) ts[i - 1] = timer_now() - t0, cs[i - 1] = cpu_now() - c0, iters += m.fp_iters;
    }
    double s = median(ts, repeats), cpu = median(cs, repeats);
    char fp[96] = "";
    if (!c->model[0]) snprintf(fp, sizeof fp, " iters=%.1f l_max=%s f_evals=%s+1", iters / repeats, L_MAX, L_MAX);
    /* work (bench_util.h): the measured no-grad iterations (16 per layer for FP-Mamba, none for the
     * baselines) as forward passes through the layers, plus the graded passes, head and AdamW */
    Shape sh = shape_of_model(&m);
    Work w = work_train(&sh, (double)m.act_bytes, B, T, iters / repeats, f_grad_passes(&mc));
    char roof[320];
    printf("implicit %s step_tok_s=%.1f ms=%.1f cpu_ms=%.1f%s model=%s B=%d T=%d D=%s params=%zu repeats=%d "
           "threads=%d blas=%s gemm=%s %s\n",
           c->name, B * T / s, s * 1e3, cpu * 1e3, fp, mc.model, B, T, c->d_model, ptab_count(&m.tab), repeats,
           k_get_threads(), k_blas_name(), k_gemm_backend(), roof_fields(roof, sizeof roof, w, s, cpu, k_get_threads()));
    fflush(stdout);
    free(ts); free(cs); free(ids); free(tg);
    adamw_free(&opt);
    model_free(&m);
}

int main(int argc, char **argv) {
    bench_threads_as_cli();
    int quick = 0, repeats = 0, scaling = 0;
    const char *cases = "fp_h64,fp_h512,m2_64,m1_64,gdn_64,lstm_64";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scaling") && i + 1 < argc) scaling = bench_count_arg("bench_fp", "--scaling", argv[++i]);
        else { fprintf(stderr, "usage: bench_fp [--quick] [--cases a,b] [--repeats N] [--scaling PAIRS]\n"); return 1; }
    }
    if (scaling) bench_scaling_needs_threads("bench_fp");
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const Case *c = &CASES[i];
        char want[64];
        snprintf(want, sizeof want, ",%s,", c->name);
        char list[512];
        snprintf(list, sizeof list, ",%s,", cases);
        if (strstr(list, want)) run(c, repeats > 0 ? repeats : quick ? c->quick_repeats : c->repeats, scaling);
    }
    return 0;
}
