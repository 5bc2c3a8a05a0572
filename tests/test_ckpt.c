/* test_ckpt.c: model checkpoints — round trip for every family, atomic overwrite, and broken or
 * foreign checkpoints each rejected with a clear message (never a crash; run under ASan in CI).
 * Byte-level safetensors corruption is covered by test_safetensors; here the files are valid
 * safetensors that do not fit the model (missing / extra / mis-shaped tensors, bad metadata).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
#include "th.h"
#include "model_check.h"

static char dir[64];

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static int make_model(Model *m, const char *family) {
    const char *const kv[] = {"d_model", "16", "vocab_size", "20", "d_state", "4", "headdim", "8",
                              "d_inner", !strcmp(family, "llama") ? "32" : "0", NULL};
    int rc = th_model_create(m, family, kv);
    if (!rc) model_init_params(m, 11);
    return rc;
}

static void round_trip(const char *family) {
    Model m, r;
    char p[256];
    path_of(p, sizeof p, "rt.safetensors");
    TH_CHECK(make_model(&m, family) == 0, "%s: %s", family, err_msg());
    const char *extra[] = {"note", "hello", NULL};
    TH_CHECK(ckpt_save(&m, p, extra) == 0, "%s save: %s", family, err_msg());
    TH_CHECK(ckpt_load(&r, p, NULL) == 0, "%s load: %s", family, err_msg());
    TH_CHECK(r.tab.total == m.tab.total && !memcmp(r.params, m.params, m.tab.total * sizeof(float)),
             "%s: parameters differ after round trip", family);
    TH_CHECK(!strcmp(r.cfg.model, family) && r.cfg.d_model == 16 && r.cfg.vocab_size == 20,
             "%s: config differs after round trip", family);
    char *note = NULL;
    TH_CHECK(ckpt_read_meta(p, "note", &note) == 0 && note && !strcmp(note, "hello"), "extra metadata lost");
    free(note);
    model_free(&r);
    model_free(&m);
}

/* Write a safetensors file with the model's tensors, letting `edit` change one aspect. */
typedef struct {
    const char *drop;        /* tensor to leave out */
    const char *rename_to;   /* ... or to write under another name */
    int bad_shape;           /* write `drop` with its first dim + 1 */
    int bad_dtype;           /* write `drop` as I32 */
    const char *format, *version, *model, *config;  /* metadata overrides (NULL = correct) */
} Edit;

static int write_edited(const Model *m, const char *path, const Edit *e) {
    StWriteTensor ts[256];
    int n = 0;
    static float pad[4096];
    for (int i = 0; i < m->tab.n && n < 255; i++) {
        const ParamInfo *p = &m->tab.p[i];
        StWriteTensor *t = &ts[n];
        memset(t, 0, sizeof *t);
        t->name = p->name;
        t->dtype = ST_F32;
        t->ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
        t->data = m->params + p->offset;
        if (e->drop && !strcmp(p->name, e->drop)) {
            if (e->rename_to) t->name = e->rename_to;
            else if (e->bad_shape) { t->shape[0] += 1; t->data = pad; }
            else if (e->bad_dtype) t->dtype = ST_I32;
            else continue;
        }
        n++;
    }
    char cfg[4096];
    cfg_to_json(&m->cfg, cfg, sizeof cfg);
    const char *kv[] = {"format", e->format ? e->format : CKPT_FORMAT, "format_version", e->version ? e->version : "1",
                        "model", e->model ? e->model : m->type->name, "config", e->config ? e->config : cfg, NULL};
    return st_write(path, ts, n, kv);
}

static void rejects(const Model *m, const Edit *e, int want_rc, const char *needle, const char *what) {
    char p[256];
    path_of(p, sizeof p, "bad.safetensors");
    TH_CHECK(write_edited(m, p, e) == 0, "%s: writing the broken file failed: %s", what, err_msg());
    Model r;
    int rc = ckpt_load(&r, p, NULL);
    TH_CHECK(rc == want_rc, "%s: rc %d, want %d (%s)", what, rc, want_rc, err_msg());
    TH_CHECK(strstr(err_msg(), needle) != NULL, "%s: message '%s' lacks '%s'", what, err_msg(), needle);
    if (rc == 0) model_free(&r);
}

static void broken_files(void) {
    Model m;
    TH_CHECK(make_model(&m, "mamba2") == 0, "%s", err_msg());
    const char *inp = "backbone.layers.1.mixer.in_proj.weight";
    rejects(&m, &(Edit){.drop = inp}, IM_EMISMATCH, "missing tensor 'backbone.layers.1.mixer.in_proj.weight'", "missing tensor");
    rejects(&m, &(Edit){.drop = inp, .rename_to = "backbone.layers.1.mixer.in_proj.wieght"}, IM_EMISMATCH, "missing tensor",
            "misspelled tensor");
    rejects(&m, &(Edit){.drop = inp, .bad_shape = 1}, IM_EMISMATCH, "has shape", "wrong shape");
    rejects(&m, &(Edit){.drop = inp, .bad_dtype = 1}, IM_EMISMATCH, "must be F32", "wrong dtype");
    /* a foreign format tag is a file written elsewhere: its config is still read */
    {
        char p[256];
        path_of(p, sizeof p, "tagged.safetensors");
        Model r;
        TH_CHECK(write_edited(&m, p, &(Edit){.format = "pt"}) == 0 && ckpt_load(&r, p, NULL) == 0 &&
                     !memcmp(r.params, m.params, m.tab.total * sizeof(float)), "format 'pt': %s", err_msg());
        model_free(&r);
    }
    rejects(&m, &(Edit){.version = "2"}, IM_EFORMAT, "format_version", "newer version");
    rejects(&m, &(Edit){.model = "mamba3"}, IM_EFORMAT, "unknown model type 'mamba3'", "unknown model type");
    rejects(&m, &(Edit){.model = "llama"}, IM_EFORMAT, "disagrees", "model vs config");
    rejects(&m, &(Edit){.config = "{\"model\": \"mamba2\", \"d_model\": 16, \"headdim\": 5}"}, IM_EINVAL,
            "headdim", "impossible config");
    rejects(&m, &(Edit){.config = "{\"model\": \"mamba2\", \"n_layers\": 2}"}, IM_EINVAL, "unknown key 'n_layers'",
            "unknown config key");
    rejects(&m, &(Edit){.config = "{\"model\": \"mamba2\", \"d_model\": \"wide\"}"}, IM_EINVAL, "d_model", "ill-typed key");
    rejects(&m, &(Edit){.config = "{\"model\": \"mamba2\", "}, IM_EFORMAT, "config", "config not JSON");
    /* a config that validates but has other sizes: tensors no longer fit */
    rejects(&m, &(Edit){.config = "{\"model\": \"mamba2\", \"d_model\": 32, \"vocab_size\": 20, \"d_state\": 4, \"headdim\": 8}"},
            IM_EMISMATCH, "has shape", "config/tensor size mismatch");
    /* an extra tensor that does not belong to the model */
    {
        Model l;
        TH_CHECK(make_model(&l, "llama") == 0, "%s", err_msg());
        char p[256];
        path_of(p, sizeof p, "llama.safetensors");
        ckpt_save(&l, p, NULL);
        StFile f;
        TH_CHECK(st_read(&f, p) == 0, "%s", err_msg());
        StWriteTensor ts[64];
        int n = 0;
        for (int i = 0; i < f.n_tensors && n < 63; i++, n++) {
            const StTensor *t = &f.tensors[i];
            ts[n] = (StWriteTensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = st_data(&f, t)};
            memcpy(ts[n].shape, t->shape, sizeof t->shape);
        }
        float extra[3] = {1, 2, 3};
        ts[n++] = (StWriteTensor){.name = "backbone.layers.7.mixer.wq.weight", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = extra};
        char cfg[4096];
        cfg_to_json(&l.cfg, cfg, sizeof cfg);
        const char *kv[] = {"format", CKPT_FORMAT, "format_version", "1", "model", "llama", "config", cfg, NULL};
        TH_CHECK(st_write(p, ts, n, kv) == 0, "%s", err_msg());
        st_free(&f);
        Model r;
        TH_CHECK(ckpt_load(&r, p, NULL) == IM_EMISMATCH && strstr(err_msg(), "unexpected tensor"),
                 "extra tensor: %s", err_msg());
        model_free(&l);
    }
    /* not a file / not safetensors at all */
    Model r;
    char p[256];
    path_of(p, sizeof p, "does-not-exist.safetensors");
    TH_CHECK(ckpt_load(&r, p, NULL) == IM_EIO, "missing file: %s", err_msg());
    path_of(p, sizeof p, "text.safetensors");
    FILE *fp = fopen(p, "w");
    fputs("this is not a checkpoint\n", fp);
    fclose(fp);
    TH_CHECK(ckpt_load(&r, p, NULL) == IM_EFORMAT, "text file: %s", err_msg());
    /* a failed save into a missing directory leaves nothing behind and reports the path */
    TH_CHECK(ckpt_save(&m, "/nonexistent-dir-xyz/m.safetensors", NULL) == IM_EIO && strstr(err_msg(), "nonexistent-dir-xyz"),
             "save to a missing dir: %s", err_msg());
    model_free(&m);
}

/* Overwriting a checkpoint replaces it whole: the old file stays readable until the rename. */
static void overwrite(void) {
    Model a, b, r;
    char p[256];
    path_of(p, sizeof p, "ow.safetensors");
    TH_CHECK(make_model(&a, "lstm") == 0 && make_model(&b, "lstm") == 0, "%s", err_msg());
    model_init_params(&b, 99);
    TH_CHECK(ckpt_save(&a, p, NULL) == 0 && ckpt_save(&b, p, NULL) == 0, "%s", err_msg());
    TH_CHECK(ckpt_load(&r, p, NULL) == 0 && !memcmp(r.params, b.params, b.tab.total * sizeof(float)), "overwrite");
    model_free(&r);
    model_free(&a);
    model_free(&b);
}

/* Spec §14: a weight-norm checkpoint loads into a plain model (W = g v/|v|) and the reverse
 * (g = |W_r|, v = W); both give the same logits. */
static void weight_norm_conversion(void) {
    static const char *const kv[] = {"model", "implicit_mamba2", "d_model", "16", "vocab_size", "20", "d_state", "4",
                                     "headdim", "8", NULL};
    ModelCfg wn, plain;
    cfg_defaults(&wn);
    for (int i = 0; kv[i]; i += 2) cfg_set(&wn, kv[i], kv[i + 1]);
    plain = wn;
    plain.weight_norm = 0;
    Model a, b, c;
    TH_CHECK(model_create(&a, &wn) == 0, "%s", err_msg());
    model_init_params(&a, 3);
    /* make g differ from |v| so a conversion that ignores g fails */
    for (int i = 0; i < a.tab.n; i++)
        if (strstr(a.tab.p[i].name, "_g"))
            for (size_t j = 0; j < a.tab.p[i].numel; j++) a.params[a.tab.p[i].offset + j] *= 0.7f + 0.01f * (float)(j % 7);
    char p1[256], p2[256];
    path_of(p1, sizeof p1, "wn.safetensors");
    path_of(p2, sizeof p2, "plain.safetensors");
    TH_CHECK(ckpt_save(&a, p1, NULL) == 0, "%s", err_msg());
    TH_CHECK(ckpt_load(&b, p1, &plain) == 0, "fold g/v into weight: %s", err_msg());
    TH_CHECK(ckpt_save(&b, p2, NULL) == 0, "%s", err_msg());
    TH_CHECK(ckpt_load(&c, p2, &wn) == 0, "split weight into g/v: %s", err_msg());
    int ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (i * 7) % 20;
    float *la = th_alloc(12 * 20), *lb = th_alloc(12 * 20);
    Model *ms[3] = {&a, &b, &c};
    for (int k = 0; k < 3; k++) {
        ms[k]->training = 0;
        TH_CHECK(model_fwd(ms[k], ids, NULL, 2, 6, NULL) == 0, "%s", err_msg());
        memcpy(k ? lb : la, ms[k]->logits, sizeof(float) * 12 * 20);
        if (k) TH_CHECK(th_rel_err(lb, la, 12 * 20) < 1e-5, "converted model %d: logits differ by %g", k, th_rel_err(lb, la, 12 * 20));
    }
    free(la);
    free(lb);
    model_free(&a);
    model_free(&b);
    model_free(&c);
}

/* The tied head's name is accepted for the embedding. */
static void tied_alias(void) {
    Model m, r;
    TH_CHECK(make_model(&m, "lstm") == 0, "%s", err_msg());
    StWriteTensor ts[64];
    int n = 0;
    for (int i = 0; i < m.tab.n; i++, n++) {
        const ParamInfo *p = &m.tab.p[i];
        ts[n] = (StWriteTensor){.name = !strcmp(p->name, "word_emb.emb.weight") ? "criterion.decoder.weight" : p->name,
                                .dtype = ST_F32, .ndim = p->ndim, .data = m.params + p->offset};
        for (int d = 0; d < p->ndim; d++) ts[n].shape[d] = p->shape[d];
    }
    char cfg[4096], path[256];
    cfg_to_json(&m.cfg, cfg, sizeof cfg);
    const char *kv[] = {"format", CKPT_FORMAT, "format_version", "1", "model", "lstm", "config", cfg, NULL};
    path_of(path, sizeof path, "alias.safetensors");
    TH_CHECK(st_write(path, ts, n, kv) == 0, "%s", err_msg());
    TH_CHECK(ckpt_load(&r, path, NULL) == 0 && !memcmp(r.params, m.params, m.tab.total * sizeof(float)),
             "tied alias: %s", err_msg());
    model_free(&r);
    model_free(&m);
}

/* A NaN or inf weight is refused by default, naming the tensor and the flat index; the opt-out
 * loads it as it is. */
static void nonfinite(void) {
    Model m, r;
    char p[256];
    path_of(p, sizeof p, "nan.safetensors");
    TH_CHECK(make_model(&m, "lstm") == 0, "%s", err_msg());
    const ParamInfo *t2 = &m.tab.p[2], *t3 = &m.tab.p[3];
    m.params[t2->offset + 5] = NAN;
    m.params[t3->offset] = -INFINITY;
    TH_CHECK(ckpt_save(&m, p, NULL) == 0, "%s", err_msg());
    char want[PARAM_NAME_LEN + 96];
    snprintf(want, sizeof want, "tensor '%s' holds NaN at flat index 5 (2 non-finite weights in all)", t2->name);
    int rc = ckpt_load(&r, p, NULL);
    TH_CHECK(rc == IM_ENUM && strstr(err_msg(), want), "NaN weight: rc %d, %s", rc, err_msg());
    if (!rc) model_free(&r);
    CkptLoadOpts inspect = {.allow_nonfinite = 1};
    rc = ckpt_load_opts(&r, p, NULL, &inspect);
    TH_CHECK(rc == 0 && isnan(r.params[t2->offset + 5]) && isinf(r.params[t3->offset]), "allow_nonfinite: %s", err_msg());
    TH_CHECK(rc || ckpt_check_finite(&r, p) == IM_ENUM, "check_finite on the loaded model");
    if (!rc) model_free(&r);
    model_free(&m);
}

/* Loading with .map = 1: our own file is used in place (the model's weights are the mapping),
 * equal to the copied load; writing to them does not reach the file (copy-on-write); a file whose
 * tensors are laid out otherwise is copied, the same weights; a NaN and a truncated file are
 * refused as without mapping. */
static void mapped_load(void) {
    Model m, r, c;
    char p[256], q[256], t[256];
    path_of(p, sizeof p, "map.safetensors");
    path_of(q, sizeof q, "map_reversed.safetensors");
    path_of(t, sizeof t, "map_truncated.safetensors");
    TH_CHECK(make_model(&m, "llama") == 0 && ckpt_save(&m, p, NULL) == 0, "%s", err_msg());
    size_t bytes = m.tab.total * sizeof(float);
    CkptLoadOpts map = {.map = 1};
    int rc = ckpt_load_opts(&r, p, NULL, &map);
    TH_CHECK(rc == 0 && r.params_map_ && !memcmp(r.params, m.params, bytes), "mapped load: rc %d, in place %d, %s", rc,
             rc ? 0 : r.params_map_ != NULL, err_msg());
    TH_CHECK(rc || (uintptr_t)r.params % 64 == 0, "mapped weights at %p: not 64-byte aligned", rc ? NULL : (void *)r.params);
    if (!rc) {
        r.params[0] += 1.0f;
        model_free(&r);
        TH_CHECK(ckpt_load(&c, p, NULL) == 0 && !memcmp(c.params, m.params, bytes), "a write to mapped weights reached the file");
        model_free(&c);
    }
    /* the same tensors in reverse order: valid, but not the model's layout */
    StWriteTensor ts[64];
    int n = m.tab.n < 64 ? m.tab.n : 64;
    for (int i = 0; i < n; i++) {
        const ParamInfo *pi = &m.tab.p[m.tab.n - 1 - i];
        ts[i] = (StWriteTensor){pi->name, ST_F32, pi->ndim, {0}, m.params + pi->offset};
        for (int d = 0; d < pi->ndim; d++) ts[i].shape[d] = pi->shape[d];
    }
    TH_CHECK(n == m.tab.n && st_write(q, ts, n, NULL) == 0, "write reversed: %s", err_msg());
    ModelCfg cfg = m.cfg;
    rc = ckpt_load_opts(&r, q, &cfg, &map);
    TH_CHECK(rc == 0 && !r.params_map_ && !memcmp(r.params, m.params, bytes), "reversed layout: rc %d, %s", rc, err_msg());
    if (!rc) model_free(&r);
    /* truncated in the data: the same refusal as st_read's */
    FILE *in = fopen(p, "rb"), *out = fopen(t, "wb");
    char buf[4096];
    size_t got, left = 0;
    if (in && out) {
        fseek(in, 0, SEEK_END);
        left = (size_t)ftell(in) - 7;
        fseek(in, 0, SEEK_SET);
        while (left && (got = fread(buf, 1, left < sizeof buf ? left : sizeof buf, in)) > 0) fwrite(buf, 1, got, out), left -= got;
    }
    if (in) fclose(in);
    if (out) fclose(out);
    rc = ckpt_load_opts(&r, t, NULL, &map);
    char mapped_msg[1024];
    snprintf(mapped_msg, sizeof mapped_msg, "%s", err_msg());
    int rc_read = ckpt_load(&c, t, NULL);
    TH_CHECK(rc != 0 && rc == rc_read && !strcmp(mapped_msg, err_msg()), "truncated, mapped: rc %d (read: %d), '%s' vs '%s'",
             rc, rc_read, mapped_msg, err_msg());
    if (!rc) model_free(&r);
    if (!rc_read) model_free(&c);
    /* non-finite weights: refused in place too */
    path_of(p, sizeof p, "nan.safetensors");   /* from nonfinite() */
    rc = ckpt_load_opts(&r, p, NULL, &map);
    TH_CHECK(rc == IM_ENUM && strstr(err_msg(), "holds NaN"), "mapped NaN checkpoint: rc %d, %s", rc, err_msg());
    if (!rc) model_free(&r);
    model_free(&m);
}

/* The command line around it (the CLI beside this binary, as `make test` builds both): eval
 * refuses the NaN checkpoint unless --allow_nonfinite, and info prints it with a warning. */
static int run_cli(const char *bin, const char *args, char *err, size_t cap) {
    char cmd[1024], errp[256];
    path_of(errp, sizeof errp, "cli.err");
    snprintf(cmd, sizeof cmd, "%s %s > /dev/null 2> %s", bin, args, errp);
    return th_run_log(cmd, errp, err, cap);
}

static void cli_checks(const char *argv0) {
    char bin[512], args[768], err[4096], nan_p[256], good_p[256];
    const char *slash = strrchr(argv0, '/');
    int n_dir = slash ? (int)(slash - argv0) : 1;
    snprintf(bin, sizeof bin, "%.*s/implicit", n_dir < 400 ? n_dir : 400, slash ? argv0 : ".");
    if (access(bin, X_OK)) { printf("skip: %s not built; the command-line checks need it\n", bin); return; }
    path_of(nan_p, sizeof nan_p, "nan.safetensors");   /* from nonfinite() */
    path_of(good_p, sizeof good_p, "good.safetensors");
    Model m;
    TH_CHECK(make_model(&m, "lstm") == 0 && ckpt_save(&m, good_p, NULL) == 0, "%s", err_msg());
    model_free(&m);
    const char *task = "--task copy --alphabet 16 --eval_lens 4 --eval_samples 2";   /* vocab 16 + 4 = 20 */
    snprintf(args, sizeof args, "eval %s %s", nan_p, task);
    int rc = run_cli(bin, args, err, sizeof err);
    TH_CHECK(rc == 1 && strstr(err, "holds NaN") && strstr(err, "--allow_nonfinite"), "eval of a NaN checkpoint: exit %d, %s",
             rc, err);
    snprintf(args, sizeof args, "eval %s --allow_nonfinite %s", nan_p, task);
    rc = run_cli(bin, args, err, sizeof err);
    TH_CHECK(rc == 0, "eval --allow_nonfinite: exit %d, %s", rc, err);
    snprintf(args, sizeof args, "info %s", nan_p);
    rc = run_cli(bin, args, err, sizeof err);
    TH_CHECK(rc == 0 && strstr(err, "warning:") && strstr(err, "holds NaN"), "info of a NaN checkpoint: exit %d, %s", rc, err);
    snprintf(args, sizeof args, "eval %s %s", good_p, task);
    rc = run_cli(bin, args, err, sizeof err);
    TH_CHECK(rc == 0, "eval of a finite checkpoint: exit %d, %s", rc, err);
}

int main(int argc, char **argv) {
    (void)argc;
    th_name = "test_ckpt";
    snprintf(dir, sizeof dir, "/tmp/implicit-test-ckpt-%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    TH_CHECK(system(cmd) == 0, "mkdir");
    round_trip("mamba2");
    round_trip("llama");
    round_trip("lstm");
    broken_files();
    overwrite();
    weight_norm_conversion();
    tied_alias();
    nonfinite();
    mapped_load();
    cli_checks(argv[0]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(system(cmd) == 0, "cleanup");
    return th_done();
}
