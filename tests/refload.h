/* refload.h: reading the PyTorch reference files of tests/ref/ (their own config key names)
 * into our configs; shared by test_models and test_implicit. */
#ifndef IMPLICIT_REFLOAD_H
#define IMPLICIT_REFLOAD_H

#include <stdio.h>
#include <string.h>

#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/config.h"

/* Map the reference's config JSON (its own key names) onto ours. */
static inline int ref_config(const StFile *f, ModelCfg *c, int *B, int *T) {
    const char *model = st_meta(f, "model"), *text = st_meta(f, "config");
    if (!model || !text) return -1;
    Json *j = NULL;
    if (json_parse(&j, text, strlen(text))) return -1;
    cfg_defaults(c);
    cfg_set(c, "model", model);
    static const char *map[][2] = {{"vocab", "vocab_size"}, {"d_model", "d_model"}, {"n_layer", "n_layer"},
                                   {"d_state", "d_state"},  {"d_conv", "d_conv"},   {"expand", "expand"},
                                   {"headdim", "headdim"},  {"n_head", "n_head"},   {"d_inner", "d_inner"},
                                   {"norm_eps", "norm_eps"}, {"rope_theta", "rope_theta"},
                                   /* implicit files: the DEQ settings under the spec §11 names */
                                   {"f_max_iter", "f_max_iter"}, {"f_tol", "f_tol"}, {"grad", "grad"}, {"tau", "tau"},
                                   {"pretrain_iter", "pretrain_iter"}, {"eval_f_max_iter", "eval_f_max_iter"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        const Json *v = json_get(j, map[i][0]);
        if (!v || v->type != JSON_NUMBER) continue;
        if (!strcmp(map[i][0], "rope_theta") && v->number <= 1) continue; /* unused by this family */
        char buf[64];
        snprintf(buf, sizeof buf, "%.17g", v->number);
        if (cfg_set(c, map[i][1], buf)) { json_free(j); return -1; }
    }
    *B = (int)json_get(j, "batch")->number;
    *T = (int)json_get(j, "seq_len")->number;
    json_free(j);
    if (strstr(model, "llama")) cfg_set(c, "mlp_type", "swiglu");
    return 0;
}

static inline const float *ref_tensor(const StFile *f, const char *name, size_t numel) {
    const StTensor *t = st_find(f, name);
    if (!t || st_numel(t) != numel) return NULL;
    return st_data(f, t);
}

#endif
