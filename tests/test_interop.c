/* test_interop.c: checkpoints written by other tools load as they are (models/layouts.h), with
 * the logits of the independent PyTorch references.
 *
 * Sources (tests/ref/gen_interop.py writes them from the weights of tests/ref/{mamba2, llama,
 * implicit_mamba2}.safetensors; the expected logits are those files' out.logits / eval.logits):
 *   hf_mamba2/                  transformers Mamba2 folder: config.json with Infinity, format "pt"
 *   hf_llama/                   transformers Llama, two shards + index, tied lm_head stored, inv_freq
 *   ref_implicit_mamba2.safetensors   reference names, format "pt", reference config in metadata
 *   ref_llama/                  reference names, no metadata, reference config.json beside
 *   hf_llama_untied/            a tiny transformers Llama with its own lm_head (tie_word_embeddings
 *                               false); logits in hf_llama_untied_ref.safetensors
 * Also: the name tables themselves (wildcards pair up, every parameter name round-trips), the
 * config given with --config, and the refusals (an untied head under a tied config, missing tensor under the source's
 * name, unknown config keys, unsupported options, no config at all).
 */
#include <math.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/io/keyjson.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
#include "../src/models/layouts.h"
#include "th.h"
#include "model_check.h"

#define REF "tests/ref/"
#define IOP "tests/ref/interop/"

static char dir[64];

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    TH_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

/* The wildcards of a pattern in order ("i*" for {i} then *). */
static void wilds(const char *p, char *out) {
    for (; *p; p++) {
        if (!strncmp(p, "{i}", 3)) *out++ = 'i', p += 2;
        else if (*p == '*') *out++ = '*';
    }
    *out = 0;
}

static int model_of(Model *m, const char *family) {
    int llama = strstr(family, "llama") != NULL;
    const char *const kv[] = {"d_model", "16", "vocab_size", "20", "d_state", "4", "headdim", "8", "n_layer", "2",
                              "d_inner", llama ? "32" : "0", "mlp_type", llama ? "swiglu" : "auto", NULL};
    return th_model_create(m, family, kv);
}

static void tables(void) {
    static const char *const families[] = {"mamba2", "llama", "implicit_mamba2", "implicit_llama", "lstm"};
    for (int l = 0; l < layout_count(); l++) {
        const CkptLayout *L = layout_at(l);
        for (int r = 0; r < L->n_rules; r++) {
            char a[16], b[16];
            if (!L->rules[r].ours) continue;
            wilds(L->rules[r].ours, a);
            wilds(L->rules[r].theirs, b);
            TH_CHECK(!strcmp(a, b), "layout %s row %d: wildcards %s vs %s", L->name, r, a, b);
        }
        for (int r = 0; r < L->n_tails; r++) {
            char a[16], b[16];
            wilds(L->tails[r].ours, a);
            wilds(L->tails[r].theirs, b);
            TH_CHECK(!strcmp(a, b), "layout %s tail row %d: wildcards %s vs %s", L->name, r, a, b);
        }
        /* every parameter of the models it holds: a name of theirs that maps back, no two alike */
        for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
            if (L->families && !strstr(L->families, families[f])) continue;
            if (L->families && strstr(families[f], "implicit")) continue;
            Model m;
            if (model_of(&m, families[f])) { TH_CHECK(0, "%s: %s", families[f], err_msg()); continue; }
            char (*theirs)[300] = calloc((size_t)m.tab.n, sizeof *theirs);
            for (int i = 0; i < m.tab.n; i++) {
                char back[300];
                TH_CHECK(layout_to_theirs(L, m.tab.p[i].name, theirs[i], sizeof theirs[i]) >= 0 &&
                             layout_to_ours(L, theirs[i], back, sizeof back) >= 0 && !strcmp(back, m.tab.p[i].name),
                         "layout %s, %s: '%s' -> '%s' -> '%s'", L->name, families[f], m.tab.p[i].name, theirs[i], back);
                for (int j = 0; j < i; j++)
                    TH_CHECK(strcmp(theirs[i], theirs[j]), "layout %s: '%s' twice", L->name, theirs[i]);
            }
            free(theirs);
            model_free(&m);
        }
    }
    /* detection, and the untouched names of a layout */
    const char *hf[] = {"backbone.norm_f.weight", "backbone.embeddings.weight"};
    const CkptLayout *L = layout_detect(hf, 2);
    char out[300];
    TH_CHECK(!strcmp(L->name, "hf") && strstr(L->families, "mamba2"), "hf mamba2 detected: %s", L->name);
    TH_CHECK(layout_to_ours(L, "backbone.embeddings.weight", out, sizeof out) == 1 && !strcmp(out, "word_emb.emb.weight"),
             "embedding renamed: %s", out);
    TH_CHECK(layout_to_ours(L, "lm_head.weight", out, sizeof out) == 1 && !strcmp(out, HEAD_TENSOR), "head: %s", out);
    const char *ours[] = {"word_emb.emb.weight"};
    TH_CHECK(layout_is_ours(layout_detect(ours, 1)), "our names: the identity layout");
    TH_CHECK(layout_for_export("hf", "lstm") == NULL && strstr(err_msg(), "holds mamba2 | llama"), "hf lstm: %s", err_msg());
    TH_CHECK(layout_for_export("onnx", "mamba2") == NULL && strstr(err_msg(), "unknown layout 'onnx'"), "onnx: %s", err_msg());
}

/* Load `path` and compare the logits with `want_name` of the reference file `ref`. */
static void source(const char *path, const CkptLoadOpts *o, const char *ref, const char *want_name, const char *model,
                   int want_iters) {
    StFile f;
    if (st_read(&f, ref)) { TH_CHECK(0, "%s: %s", ref, err_msg()); return; }
    Model m;
    int rc = ckpt_load_opts(&m, path, NULL, o);
    TH_CHECK(rc == 0, "%s: %s", path, err_msg());
    if (rc) { st_free(&f); return; }
    TH_CHECK(!strcmp(m.cfg.model, model), "%s: model %s, want %s", path, m.cfg.model, model);
    const StTensor *ids_t = st_find(&f, "input.ids"), *want = st_find(&f, want_name);
    int B = (int)ids_t->shape[0], T = (int)ids_t->shape[1];
    m.training = 0;
    TH_CHECK(model_fwd(&m, st_data(&f, ids_t), NULL, B, T, NULL) == 0, "%s fwd: %s", path, err_msg());
    size_t n = (size_t)B * T * m.V;
    double e = st_numel(want) == n ? th_rel_err(m.logits, st_data(&f, want), n) : 1;
    TH_CHECK(e < 1e-4, "%s: logits vs %s of %s: rel err %.3g", path, want_name, ref, e);
    if (want_iters) TH_CHECK(m.fp_iters == want_iters, "%s: %g solver calls, want %d", path, m.fp_iters, want_iters);
    printf("  %-44s %-16s logits rel err %.1e\n", path, model, e);
    model_free(&m);
    st_free(&f);
}

static void sources(void) {
    source(IOP "hf_mamba2", NULL, REF "mamba2.safetensors", "out.logits", "mamba2", 0);
    source(IOP "hf_mamba2/model.safetensors", NULL, REF "mamba2.safetensors", "out.logits", "mamba2", 0);
    source(IOP "hf_llama", NULL, REF "llama.safetensors", "out.logits", "llama", 0);
    source(IOP "hf_llama/model.safetensors.index.json", NULL, REF "llama.safetensors", "out.logits", "llama", 0);
    source(IOP "ref_llama", NULL, REF "llama.safetensors", "out.logits", "llama", 0);
    /* its own head: lm_head.weight, with tie_word_embeddings false */
    source(IOP "hf_llama_untied", NULL, IOP "hf_llama_untied_ref.safetensors", "out.logits", "llama", 0);
    /* eval loop of the reference: f_thres 8 = 7 loop calls (tests/ref/README.md) */
    source(IOP "ref_implicit_mamba2.safetensors", NULL, REF "implicit_mamba2.safetensors", "eval.logits",
           "implicit_mamba2", 7);
    /* --config: a config file for a file that has none (its folder's config.json, given elsewhere) */
    char p[256];
    path_of(p, sizeof p, "model.safetensors");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp " IOP "ref_llama/model.safetensors %s", p);
    TH_CHECK(system(cmd) == 0, "copy");
    Model m;
    TH_CHECK(ckpt_load(&m, p, NULL) == IM_EFORMAT && strstr(err_msg(), "--config FILE"), "no config: %s", err_msg());
    source(p, &(CkptLoadOpts){.config_path = IOP "ref_llama/config.json"}, REF "llama.safetensors", "out.logits", "llama", 0);
    /* and a wrong one: the tensors do not fit */
    TH_CHECK(ckpt_load_opts(&m, p, NULL, &(CkptLoadOpts){.config_path = IOP "hf_mamba2/config.json"}) == IM_EMISMATCH &&
                 strstr(err_msg(), "missing tensor"), "wrong --config: %s", err_msg());
}

/* A copy of the HF Mamba2 folder with one edit: a config text, or the tensors rewritten. */
static void hf_variant(const char *name, const char *config, int untie, const char *drop, char *out, size_t cap) {
    char d[256], cmd[1200];
    path_of(d, sizeof d, name);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp " IOP "hf_mamba2/* %s/", d, d, d);
    TH_CHECK(system(cmd) == 0, "copy");
    snprintf(out, cap, "%s", d);
    if (config) {
        char c[300];
        snprintf(c, sizeof c, "%s/config.json", d);
        write_text(c, config);
    }
    if (!untie && !drop) return;
    StFile f;
    char st[300];
    snprintf(st, sizeof st, "%s/model.safetensors", d);
    if (st_read(&f, st)) { TH_CHECK(0, "%s", err_msg()); return; }
    StWriteTensor ts[64];
    int n = 0;
    float *head = NULL;
    for (int i = 0; i < f.n_tensors && n < 63; i++) {
        const StTensor *t = &f.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        ts[n] = (StWriteTensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = st_data(&f, t)};
        memcpy(ts[n].shape, t->shape, sizeof t->shape);
        if (untie && !strcmp(t->name, "backbone.embeddings.weight")) {
            head = th_alloc(st_numel(t));
            memcpy(head, st_data(&f, t), st_numel(t) * sizeof(float));
            head[5] += 0.25f;   /* one weight differs: an untied head */
            ts[n + 1] = ts[n];
            ts[n + 1].name = "lm_head.weight";
            ts[n + 1].data = head;
            n++;
        }
        n++;
    }
    const char *kv[] = {"format", "pt", NULL};
    TH_CHECK(st_write(st, ts, n, kv) == 0, "%s", err_msg());
    free(head);
    st_free(&f);
}

static void expect_fail(const char *path, int want_rc, const char *needle, const char *what) {
    Model m;
    int rc = ckpt_load(&m, path, NULL);
    TH_CHECK(rc == want_rc && strstr(err_msg(), needle), "%s: rc %d (want %d), '%s' lacks '%s'", what, rc, want_rc, err_msg(),
             needle);
    if (!rc) model_free(&m);
}

static void refusals(void) {
    char d[256];
    hf_variant("untied", NULL, 1, NULL, d, sizeof d);
    expect_fail(d, IM_EMISMATCH, "untied head", "untied head");
    TH_CHECK(strstr(err_msg(), "'lm_head.weight'") && strstr(err_msg(), "'backbone.embeddings.weight'"),
             "the message names the file's tensors: %s", err_msg());
    hf_variant("missing", NULL, 0, "backbone.layers.1.mixer.A_log", d, sizeof d);
    expect_fail(d, IM_EMISMATCH, "missing tensor 'backbone.layers.1.mixer.A_log'", "missing tensor");
    hf_variant("noemb", NULL, 0, "backbone.embeddings.weight", d, sizeof d);
    /* without its probe the file reads as our layout: the embedding is missing under our name */
    expect_fail(d, IM_EMISMATCH, "missing tensor 'word_emb.emb.weight'", "no embedding");
    static const char *const bad[][2] = {
        {"{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"use_flash\": true}", "unknown Hugging Face config key 'use_flash'"},
        {"{\"model_type\": \"mamba2\", \"n_groups\": 2}", "ngroups > 1 is not implemented"},
        {"{\"model_type\": \"mamba2\", \"expand\": 1.5}", "'expand' must be an integer"},
        {"{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"expand\": 2, \"head_dim\": 16, \"num_heads\": 5}", "num_heads 5"},
        {"{\"model_type\": \"mamba2\", \"time_step_limit\": [0.0, 0.5]}", "a dt limit is not implemented"},
        {"{\"model_type\": \"mamba\", \"hidden_size\": 32}", "model_type 'mamba' is not one this build reads"},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2}", "grouped-query attention"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", "RoPE scaling is not implemented"},
        {"{\"model_type\": \"llama\", \"hidden_act\": \"gelu\"}", "only the SwiGLU MLP"},
        {"{\"backbone_config\": {\"d_model\": 32, \"n_layr\": 2}}", "unknown reference config key 'backbone_config.n_layr'"},
        {"[1, 2]", "a config must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hf_variant("badcfg", bad[i][0], 0, NULL, d, sizeof d);
        expect_fail(d, IM_EINVAL, bad[i][1], bad[i][1]);
        TH_CHECK(strstr(err_msg(), "config.json"), "the message names the config file: %s", err_msg());
    }
    /* folders and indexes */
    path_of(d, sizeof d, "empty");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", d);
    TH_CHECK(system(cmd) == 0, "mkdir");
    expect_fail(d, IM_EIO, "a folder without model.safetensors", "empty folder");
    path_of(d, sizeof d, "bad.index.json");
    write_text(d, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
    expect_fail(d, IM_EFORMAT, "must be a file name in the index's folder", "index escaping its folder");
    write_text(d, "{\"metadata\": {}}");
    expect_fail(d, IM_EFORMAT, "no 'weight_map'", "index without weight_map");
    /* a tensor in two shards */
    path_of(d, sizeof d, "dup");
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r " IOP "hf_llama %s && cp %s/model-00001-of-00002.safetensors %s/extra.safetensors",
             d, d, d, d);
    TH_CHECK(system(cmd) == 0, "copy");
    char idx[300];
    snprintf(idx, sizeof idx, "%s/two.index.json", d);
    write_text(idx, "{\"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\", \"y\": \"extra.safetensors\", "
                    "\"z\": \"model-00002-of-00002.safetensors\"}}");
    expect_fail(idx, IM_EFORMAT, "are the same parameter", "a tensor in two shards");
}

/* An untied head under a config that ties it (true, or no key) is refused, naming the key to set. */
static void untied_refusals(void) {
    static const char *const configs[] = {"\"tie_word_embeddings\": true, ", ""};
    for (int i = 0; i < 2; i++) {
        char d[256], cmd[1400], cfgp[300], text[1200];
        path_of(d, sizeof d, i ? "untied_nokey" : "untied_tied");
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp " IOP "hf_llama_untied/model.safetensors %s/", d, d, d);
        TH_CHECK(system(cmd) == 0, "copy");
        snprintf(text, sizeof text, "{\"model_type\": \"llama\", %s\"hidden_size\": 16, \"intermediate_size\": 24, "
                 "\"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
                 "\"max_position_embeddings\": 64, \"vocab_size\": 16}", configs[i]);
        snprintf(cfgp, sizeof cfgp, "%s/config.json", d);
        write_text(cfgp, text);
        expect_fail(d, IM_EMISMATCH, "set tie_embeddings 0", "untied head, tied config");
        TH_CHECK(strstr(err_msg(), "'lm_head.weight'") && strstr(err_msg(), "tie_word_embeddings"),
                 "the message names the tensor and transformers' key: %s", err_msg());
    }
    /* transformers' Mamba2 with its own head: loaded into criterion.decoder.weight, the embedding kept */
    {
        char *text = th_read_file(IOP "hf_mamba2/config.json", NULL), *at = text ? strstr(text, "\"tie_word_embeddings\": true") : NULL;
        TH_CHECK(at != NULL, "hf_mamba2's config.json says tie_word_embeddings true");
        if (at) {
            static const char key[] = "\"tie_word_embeddings\": true";
            char d0[256], *cfg = malloc(strlen(text) + 2);
            sprintf(cfg, "%.*s\"tie_word_embeddings\": false%s", (int)(at - text), text, at + sizeof key - 1);
            hf_variant("untied_mamba2", cfg, 1, NULL, d0, sizeof d0);
            free(cfg);
            Model m;
            int rc = ckpt_load(&m, d0, NULL);
            TH_CHECK(rc == 0, "untied Mamba2: %s", err_msg());
            if (!rc) {
                const float *E = model_tensor(&m, m.params, "word_emb.emb.weight"), *H = model_tensor(&m, m.params, "criterion.decoder.weight");
                TH_CHECK(m.cfg.tie_embeddings == 0 && H && H[5] == E[5] + 0.25f && H[6] == E[6], "untied Mamba2: the head is the file's");
                model_free(&m);
            }
        }
        free(text);
    }
    /* a config saying untied for a file without a head: the head is missing, by its name in the file */
    char d[256], cmd[1400];
    path_of(d, sizeof d, "untied_nohead");
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp " IOP "hf_llama_untied/config.json " IOP
             "hf_llama/model-0000* " IOP "hf_llama/model.safetensors.index.json %s/", d, d, d);
    TH_CHECK(system(cmd) == 0, "copy");
    char cfgp[300];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", d);
    write_text(cfgp, "{\"model_type\": \"llama\", \"tie_word_embeddings\": false, \"hidden_size\": 32, "
                     "\"intermediate_size\": 85, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-05, "
                     "\"rope_theta\": 500000.0, \"vocab_size\": 32}");
    /* hf_llama stores its tied lm_head.weight: with the config untied it is the head, and loads */
    Model m;
    int rc = ckpt_load(&m, d, NULL);
    TH_CHECK(rc == 0 && m.cfg.tie_embeddings == 0, "an untied config over a stored tied head loads: %s", err_msg());
    if (!rc) model_free(&m);
    write_text(cfgp, "{\"model_type\": \"llama\", \"tie_word_embeddings\": 0}");
    expect_fail(d, IM_EINVAL, "'tie_word_embeddings' must be true or false", "tie_word_embeddings 0");
}

/* ---- the command line: export, and tokenizers inside checkpoints ----------------------------- */

static char bin[512];

/* Run `implicit ARGS` (stdout and stderr into *out); the exit status. */
static int run(const char *args, char *out, size_t cap) {
    char cmd[2048], log[256];
    path_of(log, sizeof log, "cli.out");
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", bin, args, log);
    return th_run_log(cmd, log, out, cap);
}

static int same_file(const char *a, const char *b) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

/* Both config files read as the same model config (as JSON text of our keys). */
static int same_config(const char *a, const char *b) {
    const char *paths[2] = {a, b};
    char *json[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        char *text = NULL;
        size_t len = 0;
        ModelCfg c;
        if (keyjson_read_file(paths[i], &text, &len) || layout_config_parse(text, len, paths[i], &c)) {
            printf("  %s: %s\n", paths[i], err_msg());
            free(text);
            free(json[0]);
            return 0;
        }
        free(text);
        size_t need = cfg_to_json(&c, NULL, 0);
        json[i] = malloc(need);
        cfg_to_json(&c, json[i], need);
    }
    int same = !strcmp(json[0], json[1]);
    free(json[0]);
    free(json[1]);
    return same;
}

/* `implicit export SRC DIR --layout L` writes exactly the committed folder that PyTorch code read
 * (tests/ref/gen_interop.py: the same tensors; an hf config.json byte for byte, a reference one
 * naming the same model), and that folder loads back here with PyTorch's logits and the
 * source's weights, bit for bit. */
static void export_case(const char *src, const char *layout, const char *folder) {
    char d[256], args[1200], out[8192], a[600], b[600];
    path_of(d, sizeof d, folder);
    snprintf(args, sizeof args, "export %s %s --layout %s", src, d, layout);
    int rc = run(args, out, sizeof out);
    TH_CHECK(rc == 0 && strstr(out, "wrote"), "%s: exit %d: %s", args, rc, out);
    snprintf(a, sizeof a, "%s/model.safetensors", d);
    snprintf(b, sizeof b, IOP "%s/model.safetensors", folder);
    TH_CHECK(same_file(a, b), "%s differs from the committed %s (regenerate: docs/interop.md)", a, b);
    /* the configs say the same model (the committed one may predate keys added since: defaults) */
    snprintf(a, sizeof a, "%s/config.json", d);
    snprintf(b, sizeof b, IOP "%s/config.json", folder);
    TH_CHECK(same_config(a, b), "%s and the committed %s describe different models (regenerate: docs/interop.md)", a, b);
    if (strcmp(layout, "hf") == 0) TH_CHECK(same_file(a, b), "%s differs from the committed %s", a, b);
    Model m, s;
    if (ckpt_load(&m, d, NULL)) { TH_CHECK(0, "%s: %s", d, err_msg()); return; }
    TH_CHECK(ckpt_load(&s, src, NULL) == 0 && s.tab.total == m.tab.total &&
                 !memcmp(s.params, m.params, m.tab.total * sizeof(float)), "%s: the weights round-trip: %s", d, err_msg());
    model_free(&s);
    StFile f;
    if (st_read(&f, IOP "export_logits.safetensors")) { TH_CHECK(0, "%s", err_msg()); model_free(&m); return; }
    char key[128];
    snprintf(key, sizeof key, "%s.ids", folder);
    const StTensor *ids = st_find(&f, key);
    snprintf(key, sizeof key, "%s.logits", folder);
    const StTensor *want = st_find(&f, key);
    if (!ids || !want) { TH_CHECK(0, "%s: no %s", folder, key); st_free(&f); model_free(&m); return; }
    int B = (int)ids->shape[0], T = (int)ids->shape[1];
    m.training = 0;
    TH_CHECK(model_fwd(&m, st_data(&f, ids), NULL, B, T, NULL) == 0, "%s", err_msg());
    size_t n = (size_t)B * T * m.V;
    double e = st_numel(want) == n ? th_rel_err(m.logits, st_data(&f, want), n) : 1;
    TH_CHECK(e < 1e-4, "%s: logits vs PyTorch reading the export: %.3g", folder, e);
    printf("  export --layout %-9s %-28s PyTorch logits rel err %.1e\n", layout, folder, e);
    st_free(&f);
    model_free(&m);
}

/* The untied head exported under each layout's name, with the layout's key, and loaded back. */
static void export_untied(void) {
    static const char *const cases[][4] = {{"hf", "lm_head.weight", "\"tie_word_embeddings\": false", "untied_hf"},
                                           {"reference", "criterion.decoder.weight", "\"tie_embeddings\": false", "untied_ref"}};
    for (int i = 0; i < 2; i++) {
        char d[256], args[1200], out[8192], p[300];
        path_of(d, sizeof d, cases[i][3]);
        snprintf(args, sizeof args, "export " IOP "hf_llama_untied %s --layout %s", d, cases[i][0]);
        TH_CHECK(run(args, out, sizeof out) == 0, "%s: %s", args, out);
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        StFile f;
        if (st_read(&f, p)) { TH_CHECK(0, "%s: %s", p, err_msg()); continue; }
        TH_CHECK(st_find(&f, cases[i][1]) != NULL, "%s: no %s", p, cases[i][1]);
        st_free(&f);
        snprintf(p, sizeof p, "%s/config.json", d);
        char *text = th_read_file(p, NULL);
        TH_CHECK(text && strstr(text, cases[i][2]), "%s lacks %s", p, cases[i][2]);
        free(text);
        source(d, NULL, IOP "hf_llama_untied_ref.safetensors", "out.logits", "llama", 0);
        Model a, b;
        TH_CHECK(ckpt_load(&a, d, NULL) == 0 && ckpt_load(&b, IOP "hf_llama_untied", NULL) == 0 && a.tab.total == b.tab.total &&
                     !memcmp(a.params, b.params, a.tab.total * sizeof(float)), "%s: the weights round-trip", d);
        model_free(&a);
        model_free(&b);
    }
}

static void exports(void) {
    export_untied();
    export_case(IOP "ref_llama", "hf", "export_hf_llama");
    export_case(IOP "hf_mamba2", "reference", "export_ref_mamba2");
    export_case(IOP "export_ref_mamba2", "hf", "export_hf_mamba2");
    export_case(IOP "ref_implicit_mamba2.safetensors", "reference", "export_ref_implicit_mamba2");
    char d[256], args[1200], out[8192], probe[300];
    path_of(d, sizeof d, "export_hf_llama");   /* written above: not empty */
    snprintf(args, sizeof args, "export " IOP "ref_llama %s --layout hf", d);
    TH_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "is not empty") && strstr(out, "--overwrite 1"),
             "refuses a used folder: %s", out);
    snprintf(args, sizeof args, "export " IOP "ref_llama %s --layout hf --overwrite 1", d);
    TH_CHECK(run(args, out, sizeof out) == 0, "--overwrite 1: %s", out);
    snprintf(args, sizeof args, "export " IOP "ref_implicit_mamba2.safetensors %s/x --layout hf", dir);
    TH_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "holds mamba2 | llama models, not 'implicit_mamba2'"),
             "hf of an implicit model: %s", out);
    snprintf(probe, sizeof probe, "%s/x", dir);
    TH_CHECK(access(probe, F_OK) != 0, "a refused export creates nothing");
    snprintf(args, sizeof args, "export " IOP "hf_mamba2 %s/y", dir);
    TH_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "missing --layout"), "no layout: %s", out);
    snprintf(args, sizeof args, "export " IOP "hf_mamba2 %s/y --layout onnx", dir);
    TH_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "unknown layout 'onnx'"), "unknown layout: %s", out);
    path_of(probe, sizeof probe, "afile");
    FILE *f = fopen(probe, "w");
    if (f) fclose(f);
    snprintf(args, sizeof args, "export " IOP "hf_mamba2 %s --layout hf", probe);
    TH_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "is not a folder"), "DIR a file: %s", out);
}

/* A training run stores its tokenizer file inside the checkpoint: generate works after the file
 * is moved away, with the same text as with --tokenizer; export writes it beside the weights, and
 * a folder's tokenizer is picked up. */
static void tokenizers(void) {
    char args[2400], out[16384], out2[16384], tok[300], gone[300], data[300], run_dir[300], ex[300];
    path_of(tok, sizeof tok, "tok.bpe");
    path_of(gone, sizeof gone, "moved.bpe");
    path_of(data, sizeof data, "corpus.tok");
    path_of(run_dir, sizeof run_dir, "run");
    path_of(ex, sizeof ex, "export_tok");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/tok_corpus_gpt2.bpe %s", tok);
    TH_CHECK(system(cmd) == 0, "copy the tokenizer");
    snprintf(args, sizeof args, "data prepare tests/fixtures/tok_corpus.txt --tokenizer %s --out %s", tok, data);
    TH_CHECK(run(args, out, sizeof out) == 0, "data prepare: %s", out);
    snprintf(args, sizeof args, "train --task lm --data %s --model mamba2 --d_model 16 --n_layer 1 --d_state 4 --headdim 8 "
             "--context 16 --steps 3 --batch 2 --out %s", data, run_dir);
    TH_CHECK(run(args, out, sizeof out) == 0, "train: %s", out);
    char ck[400], *kind = NULL, *stored = NULL;
    snprintf(ck, sizeof ck, "%s/model.safetensors", run_dir);
    TH_CHECK(ckpt_read_meta(ck, "tokenizer.kind", &kind) == 0 && kind && !strcmp(kind, "bpe"), "stored kind: %s",
             kind ? kind : "(none)");
    TH_CHECK(ckpt_read_meta(ck, "tokenizer.data", &stored) == 0 && stored && !strncmp(stored, "implicit-bpe", 12),
             "the file's text is stored");
    free(kind);
    free(stored);
    TH_CHECK(rename(tok, gone) == 0, "move the tokenizer away");
    snprintf(args, sizeof args, "generate %s --prompt \"the \" --max_tokens 8 --seed 3", ck);
    TH_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "bpe tokenizer"), "generate, tokenizer moved: %s", out);
    snprintf(args, sizeof args, "generate %s --prompt \"the \" --max_tokens 8 --seed 3 --tokenizer %s", ck, gone);
    TH_CHECK(run(args, out2, sizeof out2) == 0, "generate --tokenizer: %s", out2);
    char *e1 = strstr(out, "[mamba2"), *e2 = strstr(out2, "[mamba2");   /* the statistics line: timings differ */
    if (e1) *e1 = 0;
    if (e2) *e2 = 0;
    TH_CHECK(!strcmp(out, out2), "the stored tokenizer decodes as the file: '%s' vs '%s'", out, out2);
    /* export: the tokenizer file beside the weights, used when the folder is the checkpoint */
    snprintf(args, sizeof args, "export %s %s --layout hf", ck, ex);
    TH_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "tokenizer.bpe"), "export with its tokenizer: %s", out);
    char tb[400];
    snprintf(tb, sizeof tb, "%s/tokenizer.bpe", ex);
    TH_CHECK(same_file(tb, gone), "the exported tokenizer is the original file");
    snprintf(args, sizeof args, "generate %s --prompt \"the \" --max_tokens 8 --seed 3", ex);
    TH_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "bpe tokenizer"), "generate from the export folder: %s", out);
    if ((e1 = strstr(out, "[mamba2"))) *e1 = 0;
    TH_CHECK(!strcmp(out, out2), "the export generates the same text: '%s' vs '%s'", out, out2);
    /* a Hugging Face folder's tokenizer.json (a model with room for its 321 ids) */
    char hf[300];
    path_of(hf, sizeof hf, "hf_tok");
    snprintf(args, sizeof args, "init %s/m.safetensors --model mamba2 --vocab_size 330 --d_model 16 --n_layer 1 --d_state 4 "
             "--headdim 8", dir);
    TH_CHECK(run(args, out, sizeof out) == 0, "init: %s", out);
    snprintf(args, sizeof args, "export %s/m.safetensors %s --layout hf", dir, hf);
    TH_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "no tokenizer file"), "export without a tokenizer: %s", out);
    snprintf(cmd, sizeof cmd, "cp tests/fixtures/tok_tiny.json %s/tokenizer.json", hf);
    TH_CHECK(system(cmd) == 0, "copy tokenizer.json");
    snprintf(args, sizeof args, "generate %s --prompt hi --max_tokens 4", hf);
    TH_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "hf tokenizer"), "a folder's tokenizer.json: %s", out);
}

int main(int argc, char **argv) {
    (void)argc;
    th_name = "test_interop";
    snprintf(dir, sizeof dir, "/tmp/implicit-test-interop-%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    TH_CHECK(system(cmd) == 0, "mkdir");
    tables();
    sources();
    refusals();
    untied_refusals();
    const char *slash = strrchr(argv[0], '/');
    int n_dir = slash ? (int)(slash - argv[0]) : 1;
    snprintf(bin, sizeof bin, "%.*s/implicit", n_dir < 400 ? n_dir : 400, slash ? argv[0] : ".");
    if (access(bin, X_OK)) printf("skip: %s not built; the command-line checks need it\n", bin);
    else {
        exports();
        tokenizers();
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(system(cmd) == 0, "cleanup");
    return th_done();
}
