/* bench_train.c: one full training step (forward, backward, AdamW) of the explicit Mamba2 LM at
 * the state-tracking sizes, the unit of `implicit train`. Same cases as bench/torch_bench.py's
 * train_* cases, so bench/run.sh prints the ratio:
 *   train_small  mamba2, 2 layers, D=64,  E=128,  N=16,  P=16, V=240, B=32, T=256
 *   train_large  mamba2, 2 layers, D=256, E=1024, N=128, P=64, V=240, B=32, T=256
 * Output: `implicit <case> step_tok_s=... ms=... cpu_ms=... <roofline fields>` (wall / process-CPU
 * ms, medians; bench_util.h's roofline fields). Usage: bench_train [--quick] [--cases a,b] [--repeats N]
 * (N timed repeats after one warm-up; default 5, --quick 2; the median is reported)
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
    const char *d_model, *expand, *d_state, *headdim;
} Case;

static const Case CASES[] = {
    {"train_small", "64", "2", "16", "16"},
    {"train_large", "256", "4", "128", "64"},
};

static void run(const Case *c, int B, int T, int warmup, int repeats) {
    ModelCfg mc;
    cfg_defaults(&mc);
    const char *kv[] = {"model", "mamba2", "n_layer", "2", "vocab_size", "240", "d_model", c->d_model,
                        "expand", c->expand, "d_state", c->d_state, "headdim", c->headdim, NULL};
    for (int i = 0; kv[i]; i += 2) CHECK(cfg_set(&mc, kv[i], kv[i + 1]) == 0, "%s", err_msg());
    Model m;
    CHECK(model_create(&m, &mc) == 0, "%s", err_msg());
    model_init_params(&m, 1);
    AdamW opt;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    adamw_init(&opt, &m, &oc);
    int *ids = malloc(sizeof(int) * (size_t)B * T), *tg = malloc(sizeof(int) * (size_t)B * T);
    Rng r;
    rng_seed(&r, 3, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int)rng_below(&r, 240), tg[i] = (int)rng_below(&r, 240);
    double *ts = malloc(sizeof(double) * (size_t)repeats), *cs = malloc(sizeof(double) * (size_t)repeats);
    for (int i = 0; i < warmup + repeats; i++) {
        double t0 = timer_now(), c0 = cpu_now();
        float loss;
        CHECK(model_fwd(&m, ids, tg, B, T, &loss) == 0, "%s", err_msg());
        model_zero_grad(&m);
        model_bwd(&m);
        adamw_step(&opt, &m, 1e-4f);
        if (i >= warmup) ts[i - warmup] = timer_now() - t0, cs[i - warmup] = cpu_now() - c0;
    }
    qsort(ts, (size_t)repeats, sizeof *ts, cmp_double);
    qsort(cs, (size_t)repeats, sizeof *cs, cmp_double);
    double s = ts[repeats / 2];
    /* work (bench_util.h): one forward + backward through the layers and head, AdamW */
    Shape sh = shape_of_model(&m);
    char roof[320];
    printf("implicit %s step_tok_s=%.1f ms=%.1f cpu_ms=%.1f B=%d T=%d D=%s params=%zu threads=%d blas=%s gemm=%s %s\n",
           c->name, B * T / s, s * 1e3, cs[repeats / 2] * 1e3, B, T, c->d_model, ptab_count(&m.tab), k_get_threads(),
           k_blas_name(), k_gemm_backend(),
           roof_fields(roof, sizeof roof, work_train(&sh, (double)m.act_bytes, B, T, 0, 1), s, cs[repeats / 2],
                       k_get_threads()));
    fflush(stdout);
    free(ts); free(cs); free(ids); free(tg);
    adamw_free(&opt);
    model_free(&m);
}

int main(int argc, char **argv) {
    bench_threads_as_cli();
    int quick = 0, repeats = 0;
    const char *cases = "train_small,train_large";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_train [--quick] [--cases a,b] [--repeats N]\n"); return 1; }
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (strstr(cases, CASES[i].name)) run(&CASES[i], 32, 256, 1, repeats > 0 ? repeats : quick ? 2 : 5);
    return 0;
}
