/* main.c: the `implicit` command line. One function per subcommand; each prints one error
 * line plus `hint:` lines and returns 1 on failure (the library itself never exits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "implicit.h"
#include "../src/train/dist.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: implicit <command> [options]\n"
            "commands:\n"
            "  --version            print version and build configuration\n"
            "  info CKPT            model type, sizes, parameter count and stored config of a checkpoint\n"
            "  init OUT [--key v]   write a freshly initialised model checkpoint (keys: `implicit init --help`)\n"
            "  train [CFG] [--k v]  train a model on a task (`implicit train --help` lists every key)\n"
            "  train --resume DIR   continue an interrupted run bit-exactly\n"
            "  eval CKPT [--k v]    evaluate a checkpoint at several lengths / p values\n"
            "  data prepare|dump|show   tokenize text into a token file; write or inspect a task's data\n"
            "  demo [--threads N]   train explicit and implicit Mamba2 on a word problem, compare out of distribution\n"
            "  smoke                build every model family, run forward/backward/step, save and reload\n"
            "  generate CKPT --prompt TEXT   sample text token by token (`implicit generate --help`)\n"
            "  mc CKPT TASK.jsonl   multiple-choice log-likelihood evaluation: acc, acc_norm\n"
            "  tokenizer train|encode|decode|info   byte-level BPE: learn merges, use a .bpe or tokenizer.json\n");
}

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static int cmd_info(int argc, char **argv) {
    if (argc != 1) {
        fprintf(stderr, "error: `implicit info` takes exactly one checkpoint path\nhint: implicit info run/model.safetensors\n");
        return 1;
    }
    Model m;
    if (ckpt_load(&m, argv[0], NULL)) return fail("is this a checkpoint written by `implicit`?");
    printf("checkpoint   %s\n", argv[0]);
    printf("model        %s\n", m.type->name);
    printf("parameters   %zu (%d tensors, %.2f MB fp32)\n", ptab_count(&m.tab), m.tab.n,
           (double)ptab_count(&m.tab) * 4 / 1e6);
    printf("vocab        %d (embedding rows %d)\n", m.cfg.vocab_size, m.V);
    printf("config\n");
    cfg_print(&m.cfg, stdout);
    printf("tensors\n");
    for (int i = 0; i < m.tab.n; i++) {
        const ParamInfo *p = &m.tab.p[i];
        printf("  %-48s (", p->name);
        for (int d = 0; d < p->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)p->shape[d]);
        printf(")\n");
    }
    model_free(&m);
    return 0;
}

/* Parse `--key value` pairs into a model config; returns the index of the first non-option. */
static int parse_cfg_args(ModelCfg *c, int argc, char **argv) {
    for (int i = 0; i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2)) return err_set(IM_EINVAL, "unexpected argument '%s'", argv[i]);
        if (i + 1 >= argc) return err_set(IM_EINVAL, "option '%s' needs a value", argv[i]);
        int rc = cfg_set(c, argv[i] + 2, argv[i + 1]);
        if (rc) return rc;
    }
    return cfg_validate(c);
}

static int cmd_init(int argc, char **argv) {
    ModelCfg c;
    cfg_defaults(&c);
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: implicit init OUT.safetensors [--key value ...] [--seed N]\nmodel keys (defaults):\n");
        cfg_print(&c, stdout);
        return 0;
    }
    if (argc < 1) { fprintf(stderr, "error: missing output path\nhint: implicit init model.safetensors --model llama\n"); return 1; }
    unsigned long long seed = 0;
    int n = argc - 1;
    char **rest = argv + 1;
    if (n >= 2 && !strcmp(rest[n - 2], "--seed")) { seed = strtoull(rest[n - 1], NULL, 10); n -= 2; }
    if (parse_cfg_args(&c, n, rest)) return fail("see `implicit init --help` for the keys");
    Model m;
    if (model_create(&m, &c)) return fail(NULL);
    model_init_params(&m, seed);
    int rc = ckpt_save(&m, argv[0], NULL);
    if (!rc) printf("wrote %s: %s, %zu parameters\n", argv[0], m.type->name, ptab_count(&m.tab));
    model_free(&m);
    return rc ? fail("is the output directory writable?") : 0;
}

int cmd_smoke(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_mc(int argc, char **argv);
int cmd_tok(int argc, char **argv);

static int dispatch(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("implicit %s (blas=%s, threads=%s, mpi=%s)\n", IM_VERSION, k_blas_name(), k_omp_name(), dist_name());
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "init")) return cmd_init(argc - 2, argv + 2);
    if (!strcmp(cmd, "smoke")) return cmd_smoke(argc - 2, argv + 2);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return cmd_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "mc")) return cmd_mc(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenizer")) return cmd_tok(argc - 2, argv + 2);
    fprintf(stderr, "error: unknown command '%s'\nhint: run `implicit --help`\n", cmd);
    return 1;
}

/* A `make MPI=1` build joins the MPI job here (every command; only `train` is data-parallel, see
 * src/train/dist.h), and leaves it on every return path of the commands. */
int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    int rc = dispatch(argc, argv);
    dist_finalize();
    return rc;
}
