/* refload.h: reading the PyTorch reference files of tests/ref/ (their own config key names)
 * into our configs, and replaying their AdamW traces; shared by the parity tests. */
#ifndef IMPLICIT_REFLOAD_H
#define IMPLICIT_REFLOAD_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/config.h"
#include "../src/models/model.h"
#include "../src/train/optim.h"

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

/* The references' optimizer trace: 10 AdamW steps (default config, lr 1e-2) from m's current
 * parameters on (ids, tg); *wl, *wn receive the worst relative error of the step losses and of the
 * gradient norms against losses[10], norms[10]. The caller asserts with its own tolerance. */
static inline void ref_adamw_replay(Model *m, const int *ids, const int *tg, int B, int T, const float *losses,
                                    const float *norms, double *wl, double *wn) {
    AdamW opt;
    AdamWCfg oc;
    adamw_cfg_default(&oc);
    oc.lr = 1e-2f;
    adamw_init(&opt, m, &oc);
    *wl = *wn = 0;
    for (int s = 0; s < 10; s++) {
        float loss = 0;
        model_fwd(m, ids, tg, B, T, &loss);
        model_zero_grad(m);
        model_bwd(m);
        double n = adamw_step(&opt, m, oc.lr);
        *wl = fmax(*wl, fabs(loss - losses[s]) / fabs(losses[s]));
        *wn = fmax(*wn, fabs(n - norms[s]) / fabs(norms[s]));
    }
    adamw_free(&opt);
}

#endif
