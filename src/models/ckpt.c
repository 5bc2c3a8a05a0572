/* ckpt.c: model <-> safetensors; see ckpt.h. */
#include "ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../io/safetensors.h"
#include "../kernels/kernels.h"

int ckpt_save(const Model *m, const char *path, const char *const *extra_kv) {
    int n = m->tab.n;
    StWriteTensor *ts = xcalloc((size_t)n, sizeof *ts);
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        ts[i].name = p->name;
        ts[i].dtype = ST_F32;
        ts[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) ts[i].shape[d] = p->shape[d];
        ts[i].data = m->params + p->offset;
    }
    size_t need = cfg_to_json(&m->cfg, NULL, 0);
    char *cfg_json = xmalloc(need);
    cfg_to_json(&m->cfg, cfg_json, need);
    char version[16], count[32];
    snprintf(version, sizeof version, "%d", CKPT_VERSION);
    snprintf(count, sizeof count, "%zu", ptab_count(&m->tab));
    const char *kv[64];
    int k = 0;
    kv[k++] = "format"; kv[k++] = CKPT_FORMAT;
    kv[k++] = "format_version"; kv[k++] = version;
    kv[k++] = "model"; kv[k++] = m->type->name;
    kv[k++] = "config"; kv[k++] = cfg_json;
    kv[k++] = "param_count"; kv[k++] = count;
    for (int i = 0; extra_kv && extra_kv[i] && extra_kv[i + 1] && k < 62; i += 2) {
        kv[k++] = extra_kv[i];
        kv[k++] = extra_kv[i + 1];
    }
    kv[k] = NULL;
    int rc = st_write(path, ts, n, kv);
    free(cfg_json);
    free(ts);
    return rc;
}

/* Names a checkpoint may carry besides the table: the tied head alias (spec §14) and, in
 * PyTorch reference files, the test vectors. */
static int ignorable(const char *name, int is_ref) {
    /* reference files also carry inputs, outputs, gradients and activations */
    return is_ref && strncmp(name, "backbone.", 9) && strncmp(name, "word_emb.", 9);
}

static int shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return 0;
}

static int check_header(const StFile *f, const char *path, int *is_ref) {
    const char *fmt = st_meta(f, "format");
    *is_ref = fmt && !strcmp(fmt, "implicit.ref");
    if (!fmt) return IM_OK; /* a bare state_dict export: the caller must supply the config */
    if (strcmp(fmt, CKPT_FORMAT) && !*is_ref)
        return err_set(IM_EFORMAT, "%s: unknown checkpoint format '%s' (expected '%s')", path, fmt, CKPT_FORMAT);
    const char *ver = st_meta(f, "format_version");
    if (!*is_ref && (!ver || atoi(ver) < 1 || atoi(ver) > CKPT_VERSION))
        return err_set(IM_EFORMAT, "%s: checkpoint format_version '%s' is not supported by this build (<= %d)",
                       path, ver ? ver : "(missing)", CKPT_VERSION);
    return IM_OK;
}

static int config_of(const StFile *f, const char *path, const ModelCfg *given, ModelCfg *out) {
    if (given) { *out = *given; return IM_OK; }
    const char *model = st_meta(f, "model"), *json = st_meta(f, "config");
    if (!json) return err_set(IM_EFORMAT, "%s: no 'config' in the metadata (not an implicit checkpoint?)", path);
    cfg_defaults(out);
    int rc = cfg_from_json(out, json);
    if (rc) return err_wrap(rc, "%s", path);
    if (model && !model_type_find(model))
        return err_set(IM_EFORMAT, "%s: unknown model type '%s' (known: %s)", path, model, model_type_names());
    if (model && strcmp(model, out->model))
        return err_set(IM_EFORMAT, "%s: metadata model '%s' disagrees with config model '%s'", path, model, out->model);
    return IM_OK;
}

static int check_shape(const StTensor *t, const ParamInfo *p, const char *path) {
    char want[96], got[96];
    if (t->dtype != ST_F32) return err_set(IM_EMISMATCH, "%s: tensor '%s' must be F32", path, t->name);
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (same) return IM_OK;
    shape_str(want, sizeof want, p->ndim, p->shape);
    shape_str(got, sizeof got, t->ndim, t->shape);
    return err_set(IM_EMISMATCH, "%s: tensor '%s' has shape %s but the config needs %s", path, t->name, got, want);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Spec §14 conversions between explicit and implicit checkpoints: a plain X.weight where the
 * model has the weight-norm pair (g = row norms, v = W), the pair where the model has X.weight
 * (W = g v/|v|), and the tied head's alias for the embedding. */
static int load_converted(Model *m, const ParamInfo *p, const StFile *f, const char *path, int *done) {
    char base[PARAM_NAME_LEN + 8], gname[PARAM_NAME_LEN + 8], vname[PARAM_NAME_LEN + 8];
    float *dst = m->params + p->offset;
    int rc;
    *done = 0;
    if (!strcmp(p->name, "word_emb.emb.weight")) {
        const StTensor *t = st_find(f, "criterion.decoder.weight");
        if (!t) return IM_OK;
        if ((rc = check_shape(t, p, path))) return rc;
        memcpy(dst, st_data(f, t), p->numel * sizeof(float));
        *done = 1;
        return IM_OK;
    }
    if (ends_with(p->name, ".weight")) {   /* fold a weight-norm pair */
        snprintf(gname, sizeof gname, "%s_g", p->name);
        snprintf(vname, sizeof vname, "%s_v", p->name);
        const StTensor *g = st_find(f, gname), *v = st_find(f, vname);
        if (!g || !v) return IM_OK;
        if ((rc = check_shape(v, p, path))) return rc;
        size_t rows = (size_t)p->shape[0], cols = p->numel / (rows ? rows : 1);
        if (g->dtype != ST_F32 || st_numel(g) != rows) return err_set(IM_EMISMATCH, "%s: '%s' needs %zu gains", path, gname, rows);
        k_weightnorm_fwd(dst, st_data(f, g), st_data(f, v), (int)rows, (int)cols, 1.0f, 0.0f);
        *done = 1;
        return IM_OK;
    }
    int is_g = ends_with(p->name, ".weight_g"), is_v = ends_with(p->name, ".weight_v");
    if (!is_g && !is_v) return IM_OK;
    snprintf(base, sizeof base, "%.*s", (int)strlen(p->name) - 2, p->name);
    const StTensor *w = st_find(f, base);
    if (!w) return IM_OK;
    if (w->dtype != ST_F32) return err_set(IM_EMISMATCH, "%s: tensor '%s' must be F32", path, base);
    const float *W = st_data(f, w);
    if (is_v) {
        if ((rc = check_shape(w, p, path))) return rc;
        memcpy(dst, W, p->numel * sizeof(float));
    } else {
        size_t rows = p->numel, cols = st_numel(w) / (rows ? rows : 1);
        if (w->ndim < 1 || (size_t)w->shape[0] != rows) return err_set(IM_EMISMATCH, "%s: '%s' does not have %zu rows", path, base, rows);
        for (size_t r = 0; r < rows; r++) {
            double s2 = 0;
            for (size_t j = 0; j < cols; j++) s2 += (double)W[r * cols + j] * W[r * cols + j];
            dst[r] = (float)sqrt(s2);   /* g = |W_r| so that g v/|v| = W */
        }
    }
    *done = 1;
    return IM_OK;
}

/* A file tensor the model consumed through a conversion. */
static int consumed(const Model *m, const char *name) {
    char buf[300];
    if (!strcmp(name, "criterion.decoder.weight")) return 1;
    if (ends_with(name, ".weight_g") || ends_with(name, ".weight_v")) {
        snprintf(buf, sizeof buf, "%.*s", (int)strlen(name) - 2, name);
        return ptab_find(&m->tab, buf) != NULL;
    }
    snprintf(buf, sizeof buf, "%s_v", name);
    return ptab_find(&m->tab, buf) != NULL;
}

static int load_tensors(Model *m, const StFile *f, const char *path, int is_ref) {
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        const StTensor *t = st_find(f, p->name);
        int rc, done = 0;
        if (!t) {
            if ((rc = load_converted(m, p, f, path, &done))) return rc;
            if (done) continue;
            return err_set(IM_EMISMATCH, "%s: missing tensor '%s' required by model '%s'", path, p->name, m->type->name);
        }
        if ((rc = check_shape(t, p, path))) return rc;
        memcpy(m->params + p->offset, st_data(f, t), p->numel * sizeof(float));
    }
    for (int i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        if (!ptab_find(&m->tab, name) && !ignorable(name, is_ref) && !consumed(m, name))
            return err_set(IM_EMISMATCH, "%s: unexpected tensor '%s' (not part of a '%s' model with this config)",
                           path, name, m->type->name);
    }
    return IM_OK;
}

static size_t find_nonfinite(const Model *m, int *tensor, size_t *index) {
    size_t count = 0;
    *tensor = -1;
    *index = 0;
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        const float *x = m->params + p->offset;
        for (size_t j = 0; j < p->numel; j++) {
            if (isfinite(x[j])) continue;
            if (!count++) *tensor = i, *index = j;
        }
    }
    return count;
}

int ckpt_check_finite(const Model *m, const char *path) {
    int tensor;
    size_t index, count = find_nonfinite(m, &tensor, &index);
    if (!count) return IM_OK;
    const ParamInfo *p = &m->tab.p[tensor];
    float v = m->params[p->offset + index];
    return err_set(IM_ENUM, "%s: tensor '%s' holds %s at flat index %zu (%zu non-finite weight%s in all): the run "
                   "that wrote it diverged, or the file is damaged",
                   path, p->name, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", index, count, count == 1 ? "" : "s");
}

int ckpt_load(Model *m, const char *path, const ModelCfg *cfg) { return ckpt_load_opts(m, path, cfg, NULL); }

int ckpt_load_opts(Model *m, const char *path, const ModelCfg *cfg, const CkptLoadOpts *o) {
    memset(m, 0, sizeof *m);
    StFile f;
    int rc = st_read(&f, path), is_ref = 0;
    if (rc) return rc;
    ModelCfg c;
    if (!(rc = check_header(&f, path, &is_ref)) && !(rc = config_of(&f, path, cfg, &c))) {
        rc = model_create(m, &c);
        if (rc) rc = err_wrap(rc, "%s", path);
        else if ((rc = load_tensors(m, &f, path, is_ref)) || (!(o && o->allow_nonfinite) && (rc = ckpt_check_finite(m, path))))
            model_free(m);
    }
    st_free(&f);
    return rc;
}

int ckpt_read_meta(const char *path, const char *key, char **out) {
    StFile f;
    *out = NULL;
    int rc = st_read(&f, path);
    if (rc) return rc;
    const char *v = st_meta(&f, key);
    if (v) {
        *out = xmalloc(strlen(v) + 1);
        strcpy(*out, v);
    }
    st_free(&f);
    return IM_OK;
}
