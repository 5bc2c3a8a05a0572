/* config.c: everything generated from MODEL_CFG_KEYS (see config.h). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../io/json.h"

void cfg_defaults(ModelCfg *c) {
    memset(c, 0, sizeof *c);
#define SET_INT(name, def) c->name = (def);
#define SET_FLOAT(name, def) c->name = (def);
#define SET_STR(name, def) snprintf(c->name, CFG_STR_LEN, "%s", (def));
#define X(type, name, def, help) SET_##type(name, def)
    MODEL_CFG_KEYS(X)
#undef X
}

static int parse_int(const char *key, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
        return err_set(IM_EINVAL, "config key '%s': expected an integer, got '%s'", key, s);
    *out = (int)v;
    return IM_OK;
}

static int parse_float(const char *key, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return err_set(IM_EINVAL, "config key '%s': expected a number, got '%s'", key, s);
    *out = v;
    return IM_OK;
}

static int parse_str(const char *key, const char *s, char *out) {
    if (strlen(s) >= CFG_STR_LEN)
        return err_set(IM_EINVAL, "config key '%s': value '%s' is too long", key, s);
    snprintf(out, CFG_STR_LEN, "%s", s);
    return IM_OK;
}

#define PARSE_INT(key, s, field) parse_int(key, s, &(field))
#define PARSE_FLOAT(key, s, field) parse_float(key, s, &(field))
#define PARSE_STR(key, s, field) parse_str(key, s, (field))

int cfg_set(ModelCfg *c, const char *key, const char *value) {
#define X(type, name, def, help) \
    if (!strcmp(key, #name)) return PARSE_##type(key, value, c->name);
    MODEL_CFG_KEYS(X)
#undef X
    return err_set(IM_EINVAL, "unknown config key '%s' (see `implicit train --help` for the list)", key);
}

#define BAD(...) return err_set(IM_EINVAL, __VA_ARGS__)

int cfg_validate(const ModelCfg *c) {
    int is_m = !strcmp(c->model, "mamba2"), is_l = !strcmp(c->model, "llama"), is_r = !strcmp(c->model, "lstm");
    if (!is_m && !is_l && !is_r) BAD("config key 'model': unknown model '%s' (mamba2 | llama | lstm)", c->model);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24)) BAD("config key 'vocab_size': %d out of range 1..16777216", c->vocab_size);
    if (c->pad_vocab_multiple < 0) BAD("config key 'pad_vocab_multiple' must be >= 0");
    if (c->d_model < 1 || c->d_model > 65536) BAD("config key 'd_model': %d out of range 1..65536", c->d_model);
    if (c->n_layer < 1 || c->n_layer > 1024) BAD("config key 'n_layer': %d out of range 1..1024", c->n_layer);
    if (c->d_inner < 0) BAD("config key 'd_inner' must be >= 0");
    if (strcmp(c->mlp_type, "auto") && strcmp(c->mlp_type, "swiglu") && strcmp(c->mlp_type, "gated"))
        BAD("config key 'mlp_type': unknown '%s' (auto | swiglu | gated)", c->mlp_type);
    if (!(c->norm_eps > 0)) BAD("config key 'norm_eps' must be > 0");
    if (!(c->dropout >= 0 && c->dropout < 1)) BAD("config key 'dropout' must be in [0, 1)");
    if (!(c->backbone_dropout >= 0 && c->backbone_dropout < 1)) BAD("config key 'backbone_dropout' must be in [0, 1)");
    if (is_m) {
        if (c->d_state < 1) BAD("config key 'd_state' must be >= 1");
        if (c->d_conv < 1 || c->d_conv > 64) BAD("config key 'd_conv': %d out of range 1..64", c->d_conv);
        if (c->expand < 1) BAD("config key 'expand' must be >= 1");
        if (c->headdim < 1 || (c->expand * c->d_model) % c->headdim)
            BAD("config key 'headdim': %d does not divide expand*d_model = %d", c->headdim, c->expand * c->d_model);
    }
    if (is_l) {
        if (c->n_head < 1 || c->d_model % c->n_head)
            BAD("config key 'n_head': %d does not divide d_model = %d", c->n_head, c->d_model);
        if ((c->d_model / c->n_head) % 2) BAD("config key 'n_head': head dim d_model/n_head = %d must be even for RoPE", c->d_model / c->n_head);
        if (!(c->rope_theta > 1)) BAD("config key 'rope_theta' must be > 1");
        if (c->max_seq_len < 1) BAD("config key 'max_seq_len' must be >= 1");
        if (c->d_inner > 0 && (2 * c->d_inner) / 3 < 1) BAD("config key 'd_inner': too small for SwiGLU (hidden floor(2*d_inner/3) = 0)");
    }
    return IM_OK;
}

static size_t append(char *buf, size_t cap, size_t at, const char *fmt, ...) IM_PRINTF(4, 5);
#include <stdarg.h>
static size_t append(char *buf, size_t cap, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, fmt, ap);
    va_end(ap);
    return at + (n > 0 ? (size_t)n : 0);
}

/* %.9g round-trips a float; config floats are doubles, so use %.17g for bit-exact reload. */
#define JSON_INT(name) at = append(buf, cap, at, "%s\"%s\": %d", sep, #name, c->name);
#define JSON_FLOAT(name) at = append(buf, cap, at, "%s\"%s\": %.17g", sep, #name, c->name);
#define JSON_STR(name) at = append(buf, cap, at, "%s\"%s\": \"%s\"", sep, #name, c->name);

size_t cfg_to_json(const ModelCfg *c, char *buf, size_t cap) {
    size_t at = 0;
    const char *sep = "";
    at = append(buf, cap, at, "{");
#define X(type, name, def, help) JSON_##type(name) sep = ", ";
    MODEL_CFG_KEYS(X)
#undef X
    at = append(buf, cap, at, "}");
    if (cap) buf[at < cap ? at : cap - 1] = 0;
    return at + 1;
}

static int set_from_json(ModelCfg *c, const char *key, const Json *v) {
    char tmp[64];
    if (v->type == JSON_STRING) return cfg_set(c, key, v->string);
    if (v->type == JSON_NUMBER) {
        if (v->is_int) snprintf(tmp, sizeof tmp, "%lld", (long long)v->integer);
        else snprintf(tmp, sizeof tmp, "%.17g", v->number);
        return cfg_set(c, key, tmp);
    }
    if (v->type == JSON_BOOL) return cfg_set(c, key, v->boolean ? "1" : "0");
    return err_set(IM_EINVAL, "config key '%s': unsupported JSON value type", key);
}

int cfg_from_json(ModelCfg *c, const char *text) {
    Json *root = NULL;
    int rc = json_parse(&root, text, strlen(text));
    if (rc) return err_wrap(rc, "model config");
    if (root->type != JSON_OBJECT) { json_free(root); return err_set(IM_EINVAL, "model config: not a JSON object"); }
    for (size_t i = 0; i < json_len(root) && !rc; i++) rc = set_from_json(c, json_key_at(root, i), json_at(root, i));
    json_free(root);
    return rc;
}

#define PRINT_INT(name, help) fprintf(f, "  %-20s %-12d # %s\n", #name, c->name, help);
#define PRINT_FLOAT(name, help) fprintf(f, "  %-20s %-12g # %s\n", #name, c->name, help);
#define PRINT_STR(name, help) fprintf(f, "  %-20s %-12s # %s\n", #name, c->name, help);

void cfg_print(const ModelCfg *c, void *file) {
    FILE *f = file;
#define X(type, name, def, help) PRINT_##type(name, help)
    MODEL_CFG_KEYS(X)
#undef X
}

int cfg_vocab_padded(const ModelCfg *c) {
    int m = c->pad_vocab_multiple;
    return m > 1 ? (c->vocab_size + m - 1) / m * m : c->vocab_size;
}
