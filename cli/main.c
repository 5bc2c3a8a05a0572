/* main.c: the `implicit` command line. One function per subcommand, listed in one table (cli.h);
 * each parses its options with opts.h, prints one error line plus `hint:` lines and returns 1
 * on failure (the library itself never exits). No command or an unknown one exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "cli.h"
#include "../src/train/dist.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

typedef struct {
    int allow_nonfinite;
    const char *config;
} InfoArgs;
static const OptSpec INFO_OPTS[] = {
    OPT(InfoArgs, allow_nonfinite, 0, 0, NULL, "accepted for symmetry: info always loads, and warns of NaN/inf weights"),
    OPT(InfoArgs, config, 0, 0, "FILE", "the model config when the checkpoint has none (a config.json of ours, the reference's or Hugging Face's)"),
};
const CmdSpec info_cmd = {"info", "CKPT [--config FILE]", "model type, sizes, parameter count and stored config of a checkpoint",
                          NULL, INFO_OPTS, (int)(sizeof INFO_OPTS / sizeof *INFO_OPTS), NULL, 0, 1, 1};

int cmd_info(int argc, char **argv) {
    OptArgs o;
    int rc;
    InfoArgs a = {0};
    if (!opts_get(&info_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *path = o.pos[0];
    opts_free(&o);
    Model m;
    const CkptLoadOpts inspect = {.allow_nonfinite = 1, .config_path = a.config};
    if (ckpt_load_opts(&m, path, NULL, &inspect)) return fail(cli_load_hint(IM_EFORMAT));
    if (ckpt_check_finite(&m, path)) fprintf(stderr, "warning: %s\n", err_msg());
    printf("checkpoint   %s\n", path);
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

typedef struct {
    long long seed;
} InitArgs;

static const OptSpec INIT_OPTS[] = {
    OPT(InitArgs, seed, 0, 1e18, "N", "seed of the initialisation"),
};
static const OptKeys INIT_KEYS[] = {{&model_keytab, NULL, 1}};
const CmdSpec init_cmd = {"init", "OUT.safetensors [--key value ...]",
                          "write a freshly initialised model checkpoint", NULL,
                          INIT_OPTS, 1, INIT_KEYS, 1, 1, 1};

int cmd_init(int argc, char **argv) {
    InitArgs a = {0};
    OptArgs o;
    int rc;
    if (!opts_get(&init_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *out = o.pos[0];
    ModelCfg c;
    cfg_defaults(&c);
    const KeyTab *tabs[] = {&model_keytab};
    void *objs[] = {&c};
    rc = opts_apply_keys(&o, tabs, objs, 1);
    opts_free(&o);
    if (rc || cfg_validate(&c)) return fail("see `implicit init --help` for the keys");
    Model m;
    if (model_create(&m, &c)) return fail(NULL);
    model_init_params(&m, (unsigned long long)a.seed);
    rc = ckpt_save(&m, out, NULL);
    if (!rc) printf("wrote %s: %s, %zu parameters\n", out, m.type->name, ptab_count(&m.tab));
    model_free(&m);
    return rc ? fail("is the output directory writable?") : 0;
}

static const OptCommand COMMANDS[] = {
#define CLI_ENTRY(name) {&name##_cmd, cmd_##name},
    CLI_COMMANDS(CLI_ENTRY)
#undef CLI_ENTRY
};

/* A `make MPI=1` build joins the MPI job in `implicit train`, the one data-parallel command (after
 * its options parsed: --help starts nothing; see src/train/dist.h), and leaves it here. The other
 * commands run as single processes (under mpirun: one per rank, redundantly). */
int main(int argc, char **argv) {
    int rc = opts_dispatch("", COMMANDS, (int)(sizeof COMMANDS / sizeof *COMMANDS), NULL, argc - 1, argv + 1);
    dist_finalize();
    return rc;
}
