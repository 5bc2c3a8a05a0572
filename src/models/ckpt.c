/* ckpt.c: model <-> safetensors; see ckpt.h. */
#include "ckpt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "../core/check.h"
#include "../io/keyjson.h"
#include "../io/safetensors.h"
#include "../kernels/kernels.h"
#include "layouts.h"

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
    int rc = st_write_aligned(path, ts, n, kv, 64); /* mapped loads (st_map) find the data aligned */
    free(cfg_json);
    free(ts);
    return rc;
}

/* ---- where the tensors come from ----------------------------------------------------------- */

/* A checkpoint argument names a file, a shard index (NAME.index.json) or a folder holding
 * model.safetensors or the index of its shards. Every shard is read; the first one's metadata is
 * the checkpoint's. */
#define MAX_SHARDS 256
#define INDEX_NAME "model.safetensors.index.json"

typedef struct {
    char *paths[MAX_SHARDS];
    int n;
    char dir[4096];       /* the folder holding the checkpoint ("." for a bare name) */
} Shards;

static char *xstrdup(const char *s) {
    char *r = xmalloc(strlen(s) + 1);
    strcpy(r, s);
    return r;
}

static void shards_free(Shards *s) {
    for (int i = 0; i < s->n; i++) free(s->paths[i]);
    s->n = 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}
static int exists(const char *p) {
    struct stat st;
    return !stat(p, &st);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *r = xmalloc(n);
    snprintf(r, n, "%s/%s", dir, name);
    return r;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The shard files named by an index's weight_map, in order of first appearance. */
static int read_index(Shards *s, const char *index) {
    char *text = NULL;
    size_t len = 0;
    int rc = keyjson_read_file(index, &text, &len);
    if (rc) return rc;
    Json *root = NULL;
    rc = json_parse(&root, text, len);
    free(text);
    if (rc) return err_wrap(rc, "%s", index);
    const Json *map = json_get(root, "weight_map");
    if (!map || map->type != JSON_OBJECT || !json_len(map))
        rc = err_set(IM_EFORMAT, "%s: no 'weight_map' object naming the shard of each tensor", index);
    for (size_t i = 0; !rc && i < json_len(map); i++) {
        const Json *v = json_at(map, i);
        if (v->type != JSON_STRING || !v->str_len || strchr(v->string, '/') || !strcmp(v->string, "..")) {
            rc = err_set(IM_EFORMAT, "%s: weight_map['%s'] must be a file name in the index's folder", index,
                         json_key_at(map, i));
            break;
        }
        int seen = 0;
        for (int k = 0; k < s->n && !seen; k++) seen = ends_with(s->paths[k], v->string) &&
                                                   s->paths[k][strlen(s->paths[k]) - v->str_len - 1] == '/';
        if (seen) continue;
        if (s->n == MAX_SHARDS) rc = err_set(IM_EFORMAT, "%s: more than %d shards", index, MAX_SHARDS);
        else s->paths[s->n++] = join(s->dir, v->string);
    }
    json_free(root);
    return rc;
}

static int find_shards(Shards *s, const char *path) {
    memset(s, 0, sizeof *s);
    if (is_dir(path)) {
        snprintf(s->dir, sizeof s->dir, "%s", path);
        char *single = join(path, "model.safetensors"), *index = join(path, INDEX_NAME);
        int rc = IM_OK;
        if (exists(single)) s->paths[s->n++] = single, single = NULL;
        else if (exists(index)) rc = read_index(s, index);
        else rc = err_set(IM_EIO, "%s: a folder without model.safetensors or %s", path, INDEX_NAME);
        free(single);
        free(index);
        return rc;
    }
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(s->dir, sizeof s->dir, "%.*s", (int)(slash - path), path);
    else snprintf(s->dir, sizeof s->dir, ".");
    if (!s->dir[0]) snprintf(s->dir, sizeof s->dir, "/");
    if (ends_with(path, ".index.json")) return read_index(s, path);
    s->paths[s->n++] = xstrdup(path);
    return IM_OK;
}

/* One tensor of the checkpoint under our name. */
typedef struct {
    char name[ST_MAX_NAME + 1];   /* ours */
    const char *orig;             /* as in the file */
    const StFile *f;
    const StTensor *t;
} Entry;

typedef struct {
    StFile files[MAX_SHARDS];
    int n_files;
    Shards shards;
    const CkptLayout *layout;
    Entry *e;                     /* (n) sorted by name */
    int n;
    const char *path;             /* the argument, for messages */
    int data_adopted;             /* files[0].data is the model's weights now (use_in_place) */
} Source;

static int entry_cmp(const void *a, const void *b) { return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name); }

static const Entry *src_find(const Source *s, const char *name) {
    Entry key;
    if (strlen(name) > ST_MAX_NAME) return NULL;
    strcpy(key.name, name);
    return bsearch(&key, s->e, (size_t)s->n, sizeof *s->e, entry_cmp);
}

/* A tensor as the user's file spells it, with our name when the layout renamed it. */
static const char *shown(const Entry *e, char *buf, size_t cap) {
    if (strcmp(e->orig, e->name)) snprintf(buf, cap, "'%s' (read as '%s')", e->orig, e->name);
    else snprintf(buf, cap, "'%s'", e->name);
    return buf;
}

static void src_free(Source *s) {
    if (s->data_adopted) s->files[0].data = NULL;
    for (int i = 0; i < s->n_files; i++) st_free(&s->files[i]);
    shards_free(&s->shards);
    free(s->e);
    memset(s, 0, sizeof *s);
}

/* Read every shard, detect the layout from the tensor names and index them under our names. */
static int src_open(Source *s, const char *path, int map) {
    memset(s, 0, sizeof *s);
    s->path = path;
    int rc = find_shards(&s->shards, path);
    map = map && s->shards.n == 1;
    for (int i = 0; !rc && i < s->shards.n; i++) {
        rc = map ? st_map(&s->files[i], s->shards.paths[i]) : st_read(&s->files[i], s->shards.paths[i]);
        if (!rc) s->n_files++;
    }
    int total = 0;
    for (int i = 0; !rc && i < s->n_files; i++) total += s->files[i].n_tensors;
    const char **names = rc ? NULL : xcalloc((size_t)total + 1, sizeof *names);
    int k = 0;
    for (int i = 0; !rc && i < s->n_files; i++)
        for (int j = 0; j < s->files[i].n_tensors; j++) names[k++] = s->files[i].tensors[j].name;
    if (!rc) {
        s->layout = layout_detect(names, total);
        s->e = xcalloc((size_t)total + 1, sizeof *s->e);
    }
    for (int i = 0; !rc && i < s->n_files; i++)
        for (int j = 0; !rc && j < s->files[i].n_tensors; j++) {
            const StTensor *t = &s->files[i].tensors[j];
            Entry *e = &s->e[s->n];
            int r = layout_to_ours(s->layout, t->name, e->name, sizeof e->name);
            if (r == 2) continue;   /* a buffer the source stored, not a parameter */
            if (r < 0) rc = err_set(IM_EFORMAT, "%s: tensor name '%s' is too long", path, t->name);
            e->orig = t->name;
            e->f = &s->files[i];
            e->t = t;
            s->n++;
        }
    free(names);
    if (rc) {
        src_free(s);
        return rc;
    }
    qsort(s->e, (size_t)s->n, sizeof *s->e, entry_cmp);
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->e[i].name, s->e[i - 1].name)) {
            char a[600], b[600];
            rc = err_set(IM_EFORMAT, "%s: tensors %s and %s are the same parameter (a tensor twice, or in two shards)",
                         path, shown(&s->e[i - 1], a, sizeof a), shown(&s->e[i], b, sizeof b));
            src_free(s);
            return rc;
        }
    return IM_OK;
}

static const char *src_meta(const Source *s, const char *key) { return s->n_files ? st_meta(&s->files[0], key) : NULL; }

/* ---- the header and the config -------------------------------------------------------------- */

/* Our own files carry format "implicit.ckpt" and a version; the PyTorch reference vectors of
 * tests/ref "implicit.ref" (with test tensors besides the weights); any other tag ("pt", "np", ...)
 * or none is a file written elsewhere, whose config comes from its metadata, a config.json beside
 * it or --config. */
enum { SRC_OURS, SRC_REF, SRC_FOREIGN };

static int check_header(const Source *s, int *kind) {
    const char *fmt = src_meta(s, "format");
    *kind = !fmt ? SRC_FOREIGN : !strcmp(fmt, CKPT_FORMAT) ? SRC_OURS : !strcmp(fmt, "implicit.ref") ? SRC_REF : SRC_FOREIGN;
    if (*kind != SRC_OURS) return IM_OK;
    const char *ver = src_meta(s, "format_version");
    if (!ver || atoi(ver) < 1 || atoi(ver) > CKPT_VERSION)
        return err_set(IM_EFORMAT, "%s: checkpoint format_version '%s' is not supported by this build (<= %d)",
                       s->path, ver ? ver : "(missing)", CKPT_VERSION);
    return IM_OK;
}

static int config_file(const char *file, ModelCfg *out) {
    char *text = NULL;
    size_t len = 0;
    int rc = keyjson_read_file(file, &text, &len);
    if (!rc) rc = layout_config_parse(text, len, file, out);
    free(text);
    return rc;
}

/* The model config, from the first of: the caller's, --config FILE, the file's metadata (our keys,
 * or the reference's), a config.json beside the file (or in the folder). */
static int config_of(const Source *s, int kind, const ModelCfg *given, const CkptLoadOpts *o, ModelCfg *out) {
    if (given) { *out = *given; return IM_OK; }
    if (o && o->config_path) return config_file(o->config_path, out);
    const char *model = src_meta(s, "model"), *json = src_meta(s, "config");
    if (json && kind == SRC_OURS) {
        cfg_defaults(out);
        int rc = cfg_from_json(out, json);
        if (rc) return err_wrap(rc, "%s", s->path);
        if (model && !model_type_find(model))
            return err_set(IM_EFORMAT, "%s: unknown model type '%s' (known: %s)", s->path, model, model_type_names());
        if (model && strcmp(model, out->model))
            return err_set(IM_EFORMAT, "%s: metadata model '%s' disagrees with config model '%s'", s->path, model, out->model);
        return IM_OK;
    }
    if (json) {
        char where[4200];
        snprintf(where, sizeof where, "%s: metadata 'config'", s->path);
        return layout_config_parse(json, strlen(json), where, out);
    }
    char *side = join(s->shards.dir, "config.json");
    int rc;
    if (exists(side)) rc = config_file(side, out);
    else rc = err_set(IM_EFORMAT, "%s: no model config: no 'config' in the file's metadata and no %s; give one with "
                      "--config FILE (our keys, the reference's or a Hugging Face config.json)", s->path, side);
    free(side);
    return rc;
}

/* ---- tensors -------------------------------------------------------------------------------- */

/* Names a checkpoint may carry besides the table: in PyTorch reference files, the test vectors. */
static int ignorable(const char *name, int kind) {
    /* reference files also carry inputs, outputs, gradients and activations */
    return kind == SRC_REF && strncmp(name, "backbone.", 9) && strncmp(name, "word_emb.", 9) && strcmp(name, HEAD_TENSOR);
}

static int shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return 0;
}

static int check_shape(const Entry *e, const ParamInfo *p, const char *path) {
    char want[96], got[96], nm[600];
    if (e->t->dtype != ST_F32) return err_set(IM_EMISMATCH, "%s: tensor %s must be F32", path, shown(e, nm, sizeof nm));
    int same = e->t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->t->shape[d] == p->shape[d];
    if (same) return IM_OK;
    shape_str(want, sizeof want, p->ndim, p->shape);
    shape_str(got, sizeof got, e->t->ndim, e->t->shape);
    return err_set(IM_EMISMATCH, "%s: tensor %s has shape %s but the config needs %s", path, shown(e, nm, sizeof nm), got, want);
}

static const float *edata(const Entry *e) { return st_data(e->f, e->t); }

/* Spec §14 conversions between explicit and implicit checkpoints: a plain X.weight where the
 * model has the weight-norm pair (g = row norms, v = W), the pair where the model has X.weight
 * (W = g v/|v|), and the tied head's alias for the embedding. */
static int load_converted(Model *m, const ParamInfo *p, const Source *s, int *done) {
    char base[PARAM_NAME_LEN + 8], gname[PARAM_NAME_LEN + 8], vname[PARAM_NAME_LEN + 8], nm[600];
    float *dst = m->params + p->offset;
    int rc;
    *done = 0;
    if (!strcmp(p->name, "word_emb.emb.weight")) {
        /* only a tied head stands for the embedding; an untied model needs both */
        const Entry *t = ptab_find(&m->tab, HEAD_TENSOR) ? NULL : src_find(s, HEAD_TENSOR);
        if (!t) return IM_OK;
        if ((rc = check_shape(t, p, s->path))) return rc;
        memcpy(dst, edata(t), p->numel * sizeof(float));
        *done = 1;
        return IM_OK;
    }
    if (ends_with(p->name, ".weight")) {   /* fold a weight-norm pair */
        snprintf(gname, sizeof gname, "%s_g", p->name);
        snprintf(vname, sizeof vname, "%s_v", p->name);
        const Entry *g = src_find(s, gname), *v = src_find(s, vname);
        if (!g || !v) return IM_OK;
        if ((rc = check_shape(v, p, s->path))) return rc;
        size_t rows = (size_t)p->shape[0], cols = p->numel / (rows ? rows : 1);
        if (g->t->dtype != ST_F32 || st_numel(g->t) != rows)
            return err_set(IM_EMISMATCH, "%s: %s needs %zu gains", s->path, shown(g, nm, sizeof nm), rows);
        k_weightnorm_fwd(dst, edata(g), edata(v), (int)rows, (int)cols, 1.0f, 0.0f);
        *done = 1;
        return IM_OK;
    }
    int is_g = ends_with(p->name, ".weight_g"), is_v = ends_with(p->name, ".weight_v");
    if (!is_g && !is_v) return IM_OK;
    snprintf(base, sizeof base, "%.*s", (int)strlen(p->name) - 2, p->name);
    const Entry *w = src_find(s, base);
    if (!w) return IM_OK;
    if (w->t->dtype != ST_F32) return err_set(IM_EMISMATCH, "%s: tensor %s must be F32", s->path, shown(w, nm, sizeof nm));
    const float *W = edata(w);
    if (is_v) {
        if ((rc = check_shape(w, p, s->path))) return rc;
        memcpy(dst, W, p->numel * sizeof(float));
    } else {
        size_t rows = p->numel, cols = st_numel(w->t) / (rows ? rows : 1);
        if (w->t->ndim < 1 || (size_t)w->t->shape[0] != rows)
            return err_set(IM_EMISMATCH, "%s: %s does not have %zu rows", s->path, shown(w, nm, sizeof nm), rows);
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
    if (!strcmp(name, HEAD_TENSOR)) return ptab_find(&m->tab, "word_emb.emb.weight") != NULL;
    if (ends_with(name, ".weight_g") || ends_with(name, ".weight_v")) {
        snprintf(buf, sizeof buf, "%.*s", (int)strlen(name) - 2, name);
        return ptab_find(&m->tab, buf) != NULL;
    }
    snprintf(buf, sizeof buf, "%s_v", name);
    return ptab_find(&m->tab, buf) != NULL;
}

/* A head stored besides the embedding of a tied model (tie_embeddings 1) is the same tensor
 * (accepted) or an untied head: refused, naming the key that loads it, never dropped. */
static int check_head(const Model *m, const Source *s) {
    const Entry *h = src_find(s, HEAD_TENSOR), *e = src_find(s, "word_emb.emb.weight");
    if (!h || !e || ptab_find(&m->tab, HEAD_TENSOR)) return IM_OK;
    char hn[600], en[600];
    int same = h->t->dtype == e->t->dtype && h->t->nbytes == e->t->nbytes && h->t->ndim == e->t->ndim &&
               !memcmp(h->t->shape, e->t->shape, sizeof(int64_t) * (size_t)h->t->ndim) &&
               !memcmp(st_data(h->f, h->t), st_data(e->f, e->t), h->t->nbytes);
    if (same) return IM_OK;
    return err_set(IM_EMISMATCH, "%s: the output head %s differs from the embedding %s: an untied head, but the "
                   "config ties them; set tie_embeddings 0 in the config (transformers' config.json: "
                   "\"tie_word_embeddings\": false)", s->path, shown(h, hn, sizeof hn), shown(e, en, sizeof en));
}

/* Where the mapped file holds every parameter as the model's buffer would (the same names, shapes
 * and relative offsets, float32 and aligned), the buffer is the mapping: the model takes it over. */
static int use_in_place(Model *m, Source *s) {
    StFile *f = &s->files[0];
    if (s->n_files != 1 || !f->map || !m->tab.n) return 0;
    const unsigned char *base = NULL;
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        const Entry *t = src_find(s, p->name);
        if (!t || check_shape(t, p, s->path)) return 0; /* the copy below says what is wrong */
        const unsigned char *at = (const unsigned char *)edata(t) - p->offset * sizeof(float);
        if (!base) base = at;
        if (at != base || (uintptr_t)base % sizeof(float)) return 0;
    }
    /* the model's buffer has 64 bytes of slack after the weights: the mapping must too (a
     * vector kernel may load past a tensor's end and drop the lanes); a mapping reads zeros from
     * its end to the end of its last page */
    long page = sysconf(_SC_PAGESIZE);
    size_t mapped = page > 0 ? (f->map_len + (size_t)page - 1) / (size_t)page * (size_t)page : f->map_len;
    if ((size_t)(base - (const unsigned char *)f->map) + m->tab.total * sizeof(float) + 64 > mapped) return 0;
    model_adopt_params(m, (float *)base, f->map, f->map_len);
    f->map = NULL;   /* the model unmaps it; the file's tables are still freed with it */
    s->data_adopted = 1;
    return 1;
}

static int load_tensors(Model *m, Source *s, int kind) {
    int rc = check_head(m, s);
    if (rc) return rc;
    int in_place = use_in_place(m, s);
    for (int i = 0; i < m->tab.n; i++) {
        const ParamInfo *p = &m->tab.p[i];
        const Entry *t = src_find(s, p->name);
        int done = 0;
        if (!t) {
            if ((rc = load_converted(m, p, s, &done))) return rc;
            if (done) continue;
            char theirs[600] = "";
            if (!layout_is_ours(s->layout) && layout_to_theirs(s->layout, p->name, theirs, sizeof theirs) == 1)
                return err_set(IM_EMISMATCH, "%s: missing tensor '%s' (ours: '%s') required by model '%s' (layout %s: %s)",
                               s->path, theirs, p->name, m->type->name, s->layout->name, s->layout->summary);
            return err_set(IM_EMISMATCH, "%s: missing tensor '%s' required by model '%s'", s->path, p->name, m->type->name);
        }
        if ((rc = check_shape(t, p, s->path))) return rc;
        if (!in_place) memcpy(m->params + p->offset, edata(t), p->numel * sizeof(float));
    }
    for (int i = 0; i < s->n; i++) {
        const Entry *e = &s->e[i];
        char nm[600];
        if (!ptab_find(&m->tab, e->name) && !ignorable(e->name, kind) && !consumed(m, e->name))
            return err_set(IM_EMISMATCH, "%s: unexpected tensor %s (not part of a '%s' model with this config%s%s)",
                           s->path, shown(e, nm, sizeof nm), m->type->name, layout_is_ours(s->layout) ? "" : "; layout ",
                           layout_is_ours(s->layout) ? "" : s->layout->summary);
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
    Source *s = xcalloc(1, sizeof *s);
    int rc = src_open(s, path, o && o->map), kind = SRC_OURS;
    if (rc) {
        free(s);
        return rc;
    }
    ModelCfg c;
    if (!(rc = check_header(s, &kind)) && !(rc = config_of(s, kind, cfg, o, &c))) {
        rc = model_create(m, &c);
        if (rc) rc = err_wrap(rc, "%s", path);
        else if ((rc = load_tensors(m, s, kind)) || (!(o && o->allow_nonfinite) && (rc = ckpt_check_finite(m, path))))
            model_free(m);
    }
    src_free(s);
    free(s);
    return rc;
}

int ckpt_read_meta(const char *path, const char *key, char **out) {
    Shards sh;
    *out = NULL;
    int rc = find_shards(&sh, path);
    StFile f;
    if (!rc) rc = st_map(&f, sh.paths[0]); /* mapped: only the header is read */
    shards_free(&sh);
    if (rc) return rc;
    const char *v = st_meta(&f, key);
    if (v) *out = xstrdup(v);
    st_free(&f);
    return IM_OK;
}

int ckpt_dir(const char *path, char *dir, size_t cap) {
    Shards sh;
    int rc = find_shards(&sh, path);
    if (!rc) snprintf(dir, cap, "%s", sh.dir);
    shards_free(&sh);
    return rc;
}
