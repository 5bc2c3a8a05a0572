/* bench_layers.c: forward+backward throughput of one block (pre-norm + mixer (+ MLP) + residual),
 * the unit an implicit model iterates. Same cases as bench/torch_bench.py so bench/run.sh can
 * print the two side by side:
 *   mamba2_small  D=64,  N=16,  E=128,  P=16,  B=32, T=256
 *   mamba2_large  D=256, N=128, E=1024, P=64,  B=32, T=256
 *   llama         D=256, 4 heads, d_inner 1024 (SwiGLU h=682), B=32, T=256
 * Output: one parseable line per case, `implicit <case> fwdbwd_tok_s=... ms=... cpu_ms=... <roofline
 * fields>` (wall and process-CPU milliseconds, medians; cpu_ms is the steadier one for 1-thread runs
 * on a busy machine; bench_util.h's roofline fields, the work counted next to the print).
 * Usage: bench_layers [--quick] [--cases a,b] [--repeats N]   (N timed repeats after one warm-up;
 *        default 5, --quick 2; the median is reported)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "../src/core/rng.h"
#include "../src/core/timer.h"
#include "../src/kernels/cpu/gemm.h"
#include "../src/kernels/kernels.h"
#include "../src/layers/block.h"

typedef struct {
    const char *name;
    int mixer;      /* MIXER_MAMBA2 | MIXER_ATTN */
    int D, N, E, P, n_head, d_inner;
} Case;

static const Case CASES[] = {
    {"mamba2_small", MIXER_MAMBA2, 64, 16, 128, 16, 0, 0},
    {"mamba2_large", MIXER_MAMBA2, 256, 128, 1024, 64, 0, 0},
    {"llama", MIXER_ATTN, 256, 0, 0, 0, 4, 1024},
};

static float *randn(size_t n, Rng *r, float s) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = s * rng_normal(r);
    return x;
}

static void run(const Case *c, int B, int T, int warmup, int repeats) {
    BlockCfg bc;
    Rng r;
    rng_seed(&r, 1, 0);
    BlockW w, dw;
    memset(&w, 0, sizeof w);
    memset(&dw, 0, sizeof dw);
    int D = c->D;
    if (c->mixer == MIXER_MAMBA2) {
        Mamba2Cfg mc;
        mamba2_cfg_init(&mc, D, c->E / D, c->N, c->P, 4, 1e-5f);
        block_cfg_mamba2(&bc, &mc, MLP_NONE, 0, 1e-5f);
        int K = mc.K, C = mc.C, H = mc.H, E = mc.E;
        w.mamba2 = (Mamba2W){randn((size_t)K * D, &r, 0.05f), randn((size_t)C * 4, &r, 0.3f), randn(C, &r, 0.1f),
                             randn(H, &r, 0.1f), randn(H, &r, 0.1f), randn(H, &r, 0.1f), randn(E, &r, 0.1f),
                             randn((size_t)D * E, &r, 0.02f), NULL};
        dw.mamba2 = (Mamba2W){randn((size_t)K * D, &r, 0), randn((size_t)C * 4, &r, 0), randn(C, &r, 0), randn(H, &r, 0),
                              randn(H, &r, 0), randn(H, &r, 0), randn(E, &r, 0), randn((size_t)D * E, &r, 0), NULL};
        for (int h = 0; h < H; h++) w.mamba2.A_log[h] = 0.5f, w.mamba2.dt_bias[h] = -3.0f, w.mamba2.norm_w[h] = 1;
        for (int e = 0; e < E; e++) w.mamba2.norm_w[e] = 1;
    } else {
        AttnCfg ac;
        attn_cfg_init(&ac, D, c->n_head, 500000.0f, T);
        block_cfg_attn(&bc, &ac, MLP_SWIGLU, c->d_inner, 1e-5f);
        size_t DD = (size_t)D * D, h = (size_t)bc.mlp.h;
        w.attn = (AttnW){randn(DD, &r, 0.05f), randn(DD, &r, 0.05f), randn(DD, &r, 0.05f), randn(DD, &r, 0.05f), NULL};
        dw.attn = (AttnW){randn(DD, &r, 0), randn(DD, &r, 0), randn(DD, &r, 0), randn(DD, &r, 0), NULL};
        w.norm2_w = randn(D, &r, 0);
        dw.norm2_w = randn(D, &r, 0);
        for (int i = 0; i < D; i++) w.norm2_w[i] = 1;
        w.mlp = (MlpW){randn(h * D, &r, 0.05f), randn(h * D, &r, 0.05f), NULL, randn(h * D, &r, 0.05f), NULL};
        dw.mlp = (MlpW){randn(h * D, &r, 0), randn(h * D, &r, 0), NULL, randn(h * D, &r, 0), NULL};
    }
    w.norm_w = randn(D, &r, 0);
    dw.norm_w = randn(D, &r, 0);
    for (int i = 0; i < D; i++) w.norm_w[i] = 1;
    size_t MD = (size_t)B * T * D;
    float *z = randn(MD, &r, 1), *zo = randn(MD, &r, 0), *dzo = randn(MD, &r, 1), *dz = randn(MD, &r, 0);
    float *cache = malloc(block_cache_floats(&bc, B, T) * sizeof(float));
    float *scratch = malloc(block_scratch_floats(&bc, B, T) * sizeof(float));
    BlockMasks none = {0};
    double *ts = malloc(sizeof(double) * (size_t)repeats), *cs = malloc(sizeof(double) * (size_t)repeats);
    for (int i = 0; i < warmup + repeats; i++) {
        double t0 = timer_now(), c0 = cpu_now();
        block_fwd(&bc, &w, zo, z, NULL, &none, cache, scratch, NULL, B, T);
        block_bwd(&bc, &w, &dw, dz, NULL, dzo, z, NULL, &none, cache, scratch, B, T);
        if (i >= warmup) ts[i - warmup] = timer_now() - t0, cs[i - warmup] = cpu_now() - c0;
    }
    qsort(ts, (size_t)repeats, sizeof *ts, cmp_double);
    qsort(cs, (size_t)repeats, sizeof *cs, cmp_double);
    double s = ts[repeats / 2];
    /* work (bench_util.h): the block's weights (Mamba2: in_proj K D, conv C W + C, dt_bias A_log D
     * 3H, gated norm E, out_proj D E; Llama: wq wk wv wo 4 D^2, SwiGLU 3 h D) and mixer terms, one
     * forward + backward; activations = the block cache plus z in, z out, dz out and dz in */
    Shape sh;
    memset(&sh, 0, sizeof sh);
    if (c->mixer == MIXER_MAMBA2) {
        const Mamba2Cfg *mc = &bc.mamba2;
        sh.body = (double)mc->K * D + (double)mc->C * (mc->W + 1) + 3.0 * mc->H + mc->E + (double)D * mc->E + D;
        shape_add_mixer(&sh, "mamba2", D, mc->E, mc->N, mc->W, mc->H, 0, 0);
    } else {
        sh.body = 4.0 * D * D + 3.0 * bc.mlp.h * D + 2.0 * D;
        shape_add_mixer(&sh, "llama", D, 0, 0, 0, c->n_head, 0, 0);
    }
    sh.params = sh.body;
    double act = 4.0 * ((double)block_cache_floats(&bc, B, T) + 2.0 * (double)MD);
    char roof[320];
    printf("implicit %s fwdbwd_tok_s=%.1f ms=%.1f cpu_ms=%.1f B=%d T=%d D=%d threads=%d blas=%s gemm=%s %s\n", c->name,
           B * T / s, s * 1e3, cs[repeats / 2] * 1e3, B, T, D, k_get_threads(), k_blas_name(), k_gemm_backend(),
           roof_fields(roof, sizeof roof, work_fwdbwd(&sh, act, B, T, 0, 1), s, cs[repeats / 2], k_get_threads()));
    fflush(stdout);
    free(ts); free(cs); free(z); free(zo); free(dzo); free(dz); free(cache); free(scratch);
    /* weights are leaked on purpose: a bench process exits right after */
}

int main(int argc, char **argv) {
    bench_threads_as_cli();
    int quick = 0, repeats = 0;
    const char *cases = "mamba2_small,mamba2_large,llama";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_layers [--quick] [--cases a,b] [--repeats N]\n"); return 1; }
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (strstr(cases, CASES[i].name)) run(&CASES[i], 32, 256, 1, repeats > 0 ? repeats : quick ? 2 : 5);
    return 0;
}
