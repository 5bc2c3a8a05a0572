/* config.c: everything generated from MODEL_CFG_KEYS (see config.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../io/keyjson.h"

#define KEY_STRUCT ModelCfg
static const KeyInfo MODEL_KEYS[] = {MODEL_CFG_KEYS(KEY_INFO)};
#undef KEY_STRUCT
const KeyTab model_keytab = {"model", MODEL_KEYS, (int)(sizeof MODEL_KEYS / sizeof MODEL_KEYS[0])};

void cfg_defaults(ModelCfg *c) {
    memset(c, 0, sizeof *c);
    keytab_defaults(&model_keytab, c);
}

int cfg_set(ModelCfg *c, const char *key, const char *value) {
    int rc = keytab_set(&model_keytab, c, key, value);
    if (rc == KEY_NOT_MINE)
        return err_set(IM_EINVAL, "unknown config key '%s' (see `implicit init --help` for the list)", key);
    return rc;
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

size_t cfg_to_json(const ModelCfg *c, char *buf, size_t cap) { return keytab_json(&model_keytab, c, buf, cap); }

int cfg_from_json(ModelCfg *c, const char *json) {
    const KeyTab *tabs[] = {&model_keytab};
    void *objs[] = {c};
    return keyjson_apply(tabs, objs, 1, json, strlen(json), "model config");
}

void cfg_print(const ModelCfg *c, void *file) { keytab_print(&model_keytab, c, file); }

int cfg_vocab_padded(const ModelCfg *c) {
    int m = c->pad_vocab_multiple;
    return m > 1 ? (c->vocab_size + m - 1) / m * m : c->vocab_size;
}
