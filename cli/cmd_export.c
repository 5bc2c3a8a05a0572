/* cmd_export.c: `implicit export` — write a checkpoint in the layout another tool reads.
 *
 *   implicit export CKPT DIR --layout hf|reference|fp-rnn [--overwrite 1] [--config FILE] [--tokenizer SPEC]
 *
 * DIR receives config.json (the layout's dialect), model.safetensors (format "pt", the layout's
 * tensor names; models/layouts.h) and the checkpoint's tokenizer file (tokenizer.json, or our
 * tokenizer.bpe). Every file is written atomically; a DIR that holds anything is refused unless
 * --overwrite 1, which replaces these files and leaves the others alone.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include "cli.h"
#include "../src/io/atomic.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/layouts.h"
#include "../src/train/sample.h"

static int fail(const char *hint) {
    fprintf(stderr, "error: %s\n", err_msg());
    if (hint) fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

typedef struct {
    const char *layout, *config, *tokenizer;
    long long overwrite;
} ExportArgs;

static const OptSpec EXPORT_OPTS[] = {
    OPT(ExportArgs, layout, 0, 0, "NAME", "hf (transformers Mamba2 / Llama) | reference (the PyTorch reference; any model) | fp-rnn (the Fixed-Point-RNN reference)"),
    OPT(ExportArgs, overwrite, 0, 1, "0|1", "1: write into a DIR that already holds files (replacing these three)"),
    OPT(ExportArgs, config, 0, 0, "FILE", "the model config when the checkpoint has none"),
    OPT(ExportArgs, tokenizer, 0, 0, "SPEC", "the tokenizer to write (default: the checkpoint's; none for byte)"),
};
const CmdSpec export_cmd = {
    "export", "CKPT DIR --layout hf|reference|fp-rnn [--overwrite 1]", "write a checkpoint as config.json + model.safetensors for PyTorch / transformers",
    "DIR receives config.json in the layout's dialect (transformers' Mamba2Config / LlamaConfig, or the\n"
    "reference's backbone_config / deq_params with our full config under \"model\", or the Fixed-Point-RNN\n"
    "reference's MambaConfig with ssm_cfg), model.safetensors\n"
    "(format \"pt\", the layout's tensor names, float32, a tied head stored once) and the tokenizer file\n"
    "(tokenizer.json, or tokenizer.bpe for ours). `implicit info DIR` / `generate DIR` load it back.\n"
    "docs/interop.md lists the layouts and what each holds.\n",
    EXPORT_OPTS, (int)(sizeof EXPORT_OPTS / sizeof *EXPORT_OPTS), NULL, 0, 2, 2};

/* 1 if the folder holds any entry, 0 if empty, -1 if it cannot be read. */
static int folder_used(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int used = 0;
    while (!used && (e = readdir(d))) used = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return used;
}

static int check_dir(const char *dir, int overwrite) {
    struct stat st;
    if (stat(dir, &st)) return make_dirs(dir);
    if (!S_ISDIR(st.st_mode)) return err_set(IM_EIO, "'%s' exists and is not a folder", dir);
    int used = folder_used(dir);
    if (used < 0) return err_set(IM_EIO, "cannot read the folder '%s'", dir);
    if (used && !overwrite)
        return err_set(IM_EIO, "'%s' is not empty: export writes into an empty or new folder (--overwrite 1 replaces "
                       "config.json, model.safetensors and the tokenizer file there)", dir);
    return IM_OK;
}

static int write_tensors(const Model *m, const CkptLayout *l, const char *path) {
    int n = m->tab.n, rc = IM_OK;
    StWriteTensor *ts = xcalloc((size_t)n, sizeof *ts);
    char (*names)[300] = xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n && !rc; i++) {
        const ParamInfo *p = &m->tab.p[i];
        if (layout_to_theirs(l, p->name, names[i], sizeof names[i]) < 0)
            rc = err_set(IM_EINVAL, "tensor '%s': its name in layout %s is too long", p->name, l->name);
        ts[i] = (StWriteTensor){.name = names[i], .dtype = ST_F32, .ndim = p->ndim, .data = m->params + p->offset};
        for (int d = 0; d < p->ndim; d++) ts[i].shape[d] = p->shape[d];
    }
    const char *kv[] = {"format", "pt", NULL};
    if (!rc) rc = st_write(path, ts, n, kv);
    free(names);
    free(ts);
    return rc;
}

int cmd_export(int argc, char **argv) {
    ExportArgs a = {0};
    OptArgs o;
    int rc;
    if (!opts_get(&export_cmd, &a, argc, argv, &o, &rc)) return rc;
    const char *ckpt = o.pos[0], *dir = o.pos[1];
    opts_free(&o);
    if (!a.layout) {
        err_set(IM_EINVAL, "missing --layout (%s)", layout_names());
        return fail("implicit export CKPT DIR --layout hf");
    }
    Model m;
    int rc_load = ckpt_load_opts(&m, ckpt, NULL, &(CkptLoadOpts){.config_path = a.config});
    if (rc_load) return fail(cli_load_hint(rc_load));
    const CkptLayout *l = layout_for_export(a.layout, m.cfg.model);
    JsonBuf cfg;
    json_buf_init(&cfg, 2);
    Tokenizer *tok = NULL;
    char path[4200];
    const char *tok_name = NULL;
    rc = l ? IM_OK : IM_EINVAL;
    if (!rc) rc = l->config_write ? l->config_write(&m.cfg, &cfg) : IM_OK;
    if (!rc && !l->config_write) {
        size_t need = cfg_to_json(&m.cfg, NULL, 0);
        char *flat = xmalloc(need);
        cfg_to_json(&m.cfg, flat, need);
        json_buf_raw(&cfg, flat);
        free(flat);
    }
    if (!rc && cfg.failed) rc = err_set(IM_ENOMEM, "out of memory");
    if (!rc && (rc = gen_find_tokenizer(&tok, ckpt, a.tokenizer))) rc = err_wrap(rc, "the tokenizer to export");
    if (!rc && tok_vocab(tok) > m.cfg.vocab_size && tok_source(tok, NULL))
        rc = err_set(IM_EMISMATCH, "tokenizer '%s' has %d ids but the model's vocabulary is %d", tok_spec(tok),
                     tok_vocab(tok), m.cfg.vocab_size);
    if (!rc) rc = check_dir(dir, (int)a.overwrite);
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        json_buf_append(&cfg, "\n", 1);
        rc = atomic_write_bytes(path, cfg.data, cfg.len);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = write_tensors(&m, l, path);
    }
    size_t n_src = 0;
    const char *src = tok && !rc ? tok_source(tok, &n_src) : NULL;
    if (src) {
        tok_name = !strcmp(tok_kind(tok), "bpe") ? "tokenizer.bpe" : "tokenizer.json";
        snprintf(path, sizeof path, "%s/%s", dir, tok_name);
        rc = atomic_write_bytes(path, src, n_src);
    }
    if (!rc)
        printf("wrote %s: config.json, model.safetensors (%d tensors, %zu parameters; layout %s: %s)%s%s\n", dir, m.tab.n,
               ptab_count(&m.tab), l->name, l->summary, tok_name ? ", " : ", no tokenizer file (byte level)",
               tok_name ? tok_name : "");
    json_buf_free(&cfg);
    tok_free(tok);
    model_free(&m);
    return rc ? fail(rc == IM_EIO ? "choose a new or empty folder, or --overwrite 1" : "run `implicit export --help`") : 0;
}
