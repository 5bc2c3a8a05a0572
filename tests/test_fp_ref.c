/* test_fp_ref.c: PyTorch parity of the fp_mamba LM (spec fp-rnn §1.4, §1.5, §3.1, §3.4) against
 * tests/ref/gen_fp_mamba.py, whose files are loaded with ckpt_load as the CLI would:
 *   fp_mamba.safetensors       Householder r=2, concat h-dep, no conv, glu outside the loop,
 *                              n_backwards 1, 2 layers (training solves stop on the quantile)
 *   fp_mamba_kron.safetensors  Kronecker, conv, glu_in_loop, n_backwards 2, 1 layer (the training
 *                              solve runs into the cap; the evaluation solve takes 46 evaluations
 *                              with damping decays)
 *   fp_mamba_ln.safetensors    LayerNorm blocks and norm_f (norm_type layernorm, eps 1e-5) with the
 *                              layer's own eps apart (mixer_norm_eps 0.02), Householder r=1, conv,
 *                              2 layers
 * Per file: the training-mode forward (quantile 0.75, cap fp_max_iter) gives the same solver
 * iteration counts (exactly), logits and loss (rel <= 1e-4) and, after the backward, every
 * parameter gradient (rel <= 1e-4 per tensor); the evaluation-mode forward (quantile 1, cap 1000)
 * the same iteration counts and logits; the worst best-residual loosely (the solver's discrete
 * decisions were checked non-marginal by the generator, so a float32 port must take them all alike).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
#include "../src/models/layouts.h"
#include "../src/models/model.h"
#include "refload.h"

#define TOL 1e-4

/* The reference's config: the shared keys through refload.h, then its implicit_cfg (C keys). */
static int load_cfg(const StFile *f, ModelCfg *c, int *B, int *T) {
    if (ref_config(f, c, B, T)) return -1;
    const char *text = st_meta(f, "implicit_cfg");
    Json *j = NULL;
    if (!text || json_parse(&j, text, strlen(text))) return -1;
    int rc = 0;
    for (size_t i = 0; i < json_len(j) && !rc; i++) {
        const Json *v = json_at(j, i);
        rc = v->type == JSON_STRING ? cfg_set(c, json_key_at(j, i), v->string) : -1;
    }
    json_free(j);
    return rc;
}

static double mean_iters(const StTensor *t, const StFile *f) {
    const int *it = (const int *)st_data(f, t);
    double s = 0;
    for (size_t i = 0; i < st_numel(t); i++) s += it[i];
    return s / (double)st_numel(t);
}

static void ref_case(const char *path) {
    StFile f;
    if (st_read(&f, path)) { TH_CHECK(0, "%s: %s", path, err_msg()); return; }
    ModelCfg c;
    int B = 0, T = 0;
    TH_CHECK(load_cfg(&f, &c, &B, &T) == 0, "%s: cannot read the reference config: %s", path, err_msg());
    Model m;
    int rc = ckpt_load(&m, path, &c);
    TH_CHECK(rc == 0, "%s: load: %s", path, err_msg());
    if (rc) { st_free(&f); return; }
    const int L = c.n_layer, V = m.V;
    const size_t nl = (size_t)B * T * V;
    const int *ids = (const int *)ref_tensor(&f, "input.ids", (size_t)B * T);
    const int *tg = (const int *)ref_tensor(&f, "input.targets", (size_t)B * T);
    const float *logits = ref_tensor(&f, "out.logits", nl), *loss_ref = ref_tensor(&f, "out.loss", 1);
    const float *elogits = ref_tensor(&f, "eval.logits", nl);
    const float *res = ref_tensor(&f, "solve.res_max", 1), *eres = ref_tensor(&f, "eval.res_max", 1);
    const StTensor *its = st_find(&f, "solve.iters"), *eits = st_find(&f, "eval.iters");
    int ok = ids && tg && logits && loss_ref && elogits && res && eres && its && eits && st_numel(its) == (size_t)L &&
             st_numel(eits) == (size_t)L && V == 16;
    TH_CHECK(ok, "%s: missing reference tensors", path);
    if (!ok) { model_free(&m); st_free(&f); return; }

    /* training mode: solve, graded steps, loss, backward */
    m.training = 1;
    float loss = 0;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &loss) == 0, "fwd: %s", err_msg());
    double want = mean_iters(its, &f), el = th_rel_err(m.logits, logits, nl);
    TH_CHECK(m.fp_iters == want, "%s: training solver iterations (mean over layers) %g vs %g", path, m.fp_iters, want);
    TH_CHECK(el <= TOL, "%s: logits rel err %.3g", path, el);
    TH_CHECK(fabsf(loss - *loss_ref) <= TOL * fabsf(*loss_ref), "%s: loss %.7f vs %.7f", path, loss, *loss_ref);
    TH_CHECK(fabs(m.fp_res_max - *res) <= 1e-3 * *res, "%s: worst best residual %.6g vs %.6g", path, m.fp_res_max,
             (double)*res);
    model_zero_grad(&m);
    model_bwd(&m);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < m.tab.n; i++) {
        const ParamInfo *p = &m.tab.p[i];
        char gname[PARAM_NAME_LEN + 8];
        snprintf(gname, sizeof gname, "grad.%s", p->name);
        const float *g = ref_tensor(&f, gname, p->numel);
        TH_CHECK(g != NULL, "%s: no reference gradient %s", path, gname);
        if (!g) continue;
        double e = th_rel_err(m.grads + p->offset, g, p->numel);
        if (e > worst) worst = e, worst_name = p->name;
        TH_CHECK(e <= TOL, "%s: gradient %s rel err %.3g", path, p->name, e);
    }
    printf("  %s: train: %g iterations/layer, logits %.2e, loss %.2e, worst grad %.2e (%s)\n", path, m.fp_iters, el,
           fabs(loss - *loss_ref) / fabs(*loss_ref), worst, worst_name);

    /* evaluation mode: every sequence converged, cap 1000 */
    m.training = 0;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &loss) == 0, "eval fwd: %s", err_msg());
    want = mean_iters(eits, &f);
    el = th_rel_err(m.logits, elogits, nl);
    TH_CHECK(m.fp_iters == want, "%s: evaluation solver iterations %g vs %g", path, m.fp_iters, want);
    TH_CHECK(el <= TOL, "%s: eval logits rel err %.3g", path, el);
    TH_CHECK(fabs(m.fp_res_max - *eres) <= 1e-3 * *eres, "%s: eval worst best residual %.6g vs %.6g", path,
             m.fp_res_max, (double)*eres);
    printf("  %s: eval: %g iterations/layer, logits %.2e\n", path, m.fp_iters, el);
    model_free(&m);
    st_free(&f);
}

/* A checkpoint of the Fixed-Point-RNN reference as it is (tests/ref/gen_fp_interop.py: its tensor
 * names, torch 1 or torch 2 weight norm, its config.json beside): loaded as a folder through the
 * "fp-rnn" layout and its config dialect, it is the model of `ref` (the same weights under our
 * names, with the outputs of the independent PyTorch code): the config says LayerNorm blocks at
 * 1e-5 and the layer's eps 1e-6; evaluation and training forwards give ref's logits and iteration
 * counts, in both conventions (fp_iters_ref = the reference's logged iter_idx + 1). */
static void ref_checkpoint(const char *dir, const char *ref) {
    StFile f;
    if (st_read(&f, ref)) { TH_CHECK(0, "%s: %s", ref, err_msg()); return; }
    Model m;
    int rc = ckpt_load(&m, dir, NULL);
    TH_CHECK(rc == 0, "%s: load: %s", dir, err_msg());
    if (rc) { st_free(&f); return; }
    const ModelCfg *c = &m.cfg;
    TH_CHECK(!strcmp(c->model, "fp_mamba") && !strcmp(c->norm_type, "layernorm") && c->norm_eps == 1e-5 &&
             c->mixer_norm_eps == 1e-6 && c->fp_max_iter == 16 && c->fp_outlier_q == 0.25 && c->fp_step0 == 0.99,
             "%s: config %s, norm %s %g, layer eps %g, cap %d, q %g, s0 %g", dir, c->model, c->norm_type, c->norm_eps,
             c->mixer_norm_eps, c->fp_max_iter, c->fp_outlier_q, c->fp_step0);
    const StTensor *ids_t = st_find(&f, "input.ids");
    const int B = (int)ids_t->shape[0], T = (int)ids_t->shape[1], L = c->n_layer;
    const size_t nl = (size_t)B * T * m.V;
    const int *ids = (const int *)st_data(&f, ids_t), *tg = (const int *)ref_tensor(&f, "input.targets", (size_t)B * T);
    const float *el = ref_tensor(&f, "eval.logits", nl), *tl = ref_tensor(&f, "out.logits", nl);
    const StTensor *eits = st_find(&f, "eval.iters"), *tits = st_find(&f, "solve.iters");
    if (!el || !tl || !eits || !tits || st_numel(eits) != (size_t)L) {
        TH_CHECK(0, "%s: missing reference tensors", ref);
        model_free(&m);
        st_free(&f);
        return;
    }
    for (int mode = 0; mode < 2; mode++) {
        m.training = mode;
        float loss = 0;
        TH_CHECK(model_fwd(&m, ids, tg, B, T, &loss) == 0, "%s fwd: %s", dir, err_msg());
        double want = mean_iters(mode ? tits : eits, &f), e = th_rel_err(m.logits, mode ? tl : el, nl);
        TH_CHECK(e <= TOL, "%s: %s logits rel err %.3g", dir, mode ? "training" : "evaluation", e);
        TH_CHECK(m.fp_iters == want && m.fp_iters_ref == want + 1, "%s: %s iterations %g (reference convention %g), want %g",
                 dir, mode ? "training" : "evaluation", m.fp_iters, m.fp_iters_ref, want);
        printf("  %s: %s: logits %.2e, %g iterations/layer (%g as the reference logs them)\n", dir,
               mode ? "train" : "eval", e, m.fp_iters, m.fp_iters_ref);
    }
    model_free(&m);
    st_free(&f);
}

/* The "fp-rnn" layout's tables: every parameter of the models it holds (each mixer, projections
 * factorised or not, the mixture's terms) has a name of the reference that maps back, no two alike,
 * none left with our mixer names (proj_*) or our weight-norm names (torch 2's are written), and
 * the FPRNN row is told from the FPMamba row by its names. */
/* the layer's eps as the model uses it (mixer_norm_eps, or norm_eps when 0) */
static float lm_eps(const ModelCfg *c) { return (float)(c->mixer_norm_eps > 0 ? c->mixer_norm_eps : c->norm_eps); }

static void fp_layout_names(void) {
    static const char *const cases[][4] = {
        {"fp_mamba", "householder", "2", "-1"}, {"fp_mamba", "dplr", "2", "3"}, {"fp_mamba", "kronecker", "1", "-1"},
        {"fp_mamba", "mixture", "3", "-1"},     {"fp_mamba", "selectivedense", "1", "-1"},
        {"fp_mamba2", "householder", "1", "-1"}, {"fp_rnn", "householder", "2", "-1"}, {"fp_rnn", "kronecker", "1", "4"},
        {"mamba1", "householder", "1", "-1"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ModelCfg c;
        cfg_defaults(&c);
        const char *kv[] = {"model", cases[k][0], "mixer_type", cases[k][1], "mixer_rank", cases[k][2], "mixer_proj_rank",
                            cases[k][3], "d_model", "8", "n_layer", "2", "d_state", "4", "headdim", "8",
                            "norm_type", "layernorm", NULL};
        for (int i = 0; kv[i]; i += 2) cfg_set(&c, kv[i], kv[i + 1]);
        Model m;
        if (model_create(&m, &c)) { TH_CHECK(0, "%s %s: %s", cases[k][0], cases[k][1], err_msg()); continue; }
        const CkptLayout *L = layout_for_export("fp-rnn", c.model);
        TH_CHECK(L != NULL, "fp-rnn holds %s: %s", c.model, err_msg());
        if (!L) { model_free(&m); continue; }
        char (*theirs)[300] = calloc((size_t)m.tab.n, sizeof *theirs);
        const char **names = calloc((size_t)m.tab.n, sizeof *names);
        int bad = 0;
        for (int i = 0; i < m.tab.n; i++) {
            char back[300];
            const char *ours = m.tab.p[i].name;
            int ok = layout_to_theirs(L, ours, theirs[i], sizeof theirs[i]) >= 0 &&
                     layout_to_ours(L, theirs[i], back, sizeof back) >= 0 && !strcmp(back, ours);
            ok &= !strstr(theirs[i], ".proj_") && !strstr(theirs[i], "weight_g") && !strstr(theirs[i], "weight_v") &&
                  !strstr(theirs[i], "word_emb");
            for (int j = 0; j < i; j++) ok &= strcmp(theirs[i], theirs[j]) != 0;
            if (!ok && bad++ < 3) TH_CHECK(0, "fp-rnn, %s %s: '%s' -> '%s'", cases[k][0], cases[k][1], ours, theirs[i]);
            names[i] = theirs[i];
        }
        TH_CHECK(!bad, "fp-rnn, %s %s: %d names do not round-trip", cases[k][0], cases[k][1], bad);
        TH_CHECK(layout_detect(names, m.tab.n) == L, "fp-rnn, %s: the file's names pick its row", c.model);
        free(names);
        free(theirs);
        model_free(&m);
    }
}

/* The reference's config.json dialect: what it cannot say here is refused, naming the key. */
static void fp_config_refusals(void) {
    {   /* mamba_ssm's tie_embeddings false: the model gets its own head (lm_head.weight) */
        const char *j = "{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\"}, \"tie_embeddings\": false}";
        ModelCfg c;
        int rc = layout_config_parse(j, strlen(j), "config.json", &c);
        TH_CHECK(rc == IM_OK && c.tie_embeddings == 0, "untied fp config: rc %d tie %d (%s)", rc, c.tie_embeddings,
                 rc ? err_msg() : "");
    }
    static const char *const bad[][2] = {
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\", \"mixer_type\": \"monarch\"}}", "'ssm_cfg.mixer_type' = monarch"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"Mamba2\"}}", "'ssm_cfg.layer' = 'Mamba2'"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\", \"use_flash\": true}}", "unknown Fixed-Point-RNN reference config key 'ssm_cfg.use_flash'"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\"}, \"d_intermediate\": 32}", "an MLP in the blocks"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\"}, \"attn_layer_idx\": [0]}", "attention layers"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba1\"}, \"rms_norm\": 1}", "'rms_norm' must be true or false"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"Mamba1\", \"mixer_rank\": 2}}", "'ssm_cfg.mixer_rank' for layer Mamba1"},
        {"{\"d_model\": 8, \"ssm_cfg\": {\"layer\": \"FPMamba2\", \"ngroups\": 2}}", "ngroups > 1 is not implemented"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ModelCfg c;
        int rc = layout_config_parse(bad[i][0], strlen(bad[i][0]), "config.json", &c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i][1]), "'%s': rc %d, '%s' lacks '%s'", bad[i][0], rc, err_msg(),
                 bad[i][1]);
    }
    /* and what it can: the class defaults of FPRNN (no damping, q_out 0.10, cap 1000, spectral Kronecker) */
    const char *ok = "{\"d_model\": 8, \"n_layer\": 1, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"FPRNN\", "
                     "\"use_short_conv\": true, \"mixer_type\": \"kronecker\", \"damping_decay_rate\": 0.5}}";
    ModelCfg c;
    TH_CHECK(layout_config_parse(ok, strlen(ok), "config.json", &c) == IM_OK && !strcmp(c.model, "fp_rnn") &&
             c.fp_step0 == 1 && c.fp_decay == 1 && c.fp_outlier_q == 0.1 && c.fp_max_iter == 1000 &&
             !strcmp(c.kron_norm, "spectral") && !strcmp(c.norm_type, "rmsnorm") && c.pad_vocab_multiple == 8,
             "FPRNN defaults: %s", err_msg());
}

/* The config the fp-rnn layout writes (for export) reads back as the same model, and a model with
 * solver constants the reference fixes otherwise cannot be written. */
static void fp_config_roundtrip(void) {
    static const char *const cases[][6] = {
        {"fp_mamba", "householder", "layernorm", "1e-06", "1", "0"}, {"fp_mamba2", "kronecker", "rmsnorm", "0", "0", "1"},
        {"fp_rnn", "dplr", "layernorm", "1e-06", "-1", "0"},         {"mamba1", "householder", "rmsnorm", "0", "-1", "0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ModelCfg c, back;
        cfg_defaults(&c);
        const char *kv[] = {"model", cases[k][0], "mixer_type", cases[k][1], "norm_type", cases[k][2], "mixer_norm_eps",
                            cases[k][3], "short_conv", cases[k][4], "glu_in_loop", cases[k][5], "d_model", "16",
                            "n_layer", "3", "vocab_size", "37", "pad_vocab_multiple", "4", "d_state", "8", "headdim", "8",
                            "mixer_rank", "2", "fp_max_iter", "12", "fp_n_backwards", "2", NULL};
        for (int i = 0; kv[i]; i += 2) cfg_set(&c, kv[i], kv[i + 1]);
        if (!strcmp(c.model, "fp_mamba2")) c.fp_outlier_q = 0.1;
        if (!strcmp(c.model, "fp_rnn")) c.fp_outlier_q = 0.1, c.fp_step0 = 1, c.fp_decay = 1, snprintf(c.kron_norm, sizeof c.kron_norm, "spectral");
        TH_CHECK(cfg_validate(&c) == IM_OK, "%s: %s", c.model, err_msg());
        const CkptLayout *L = layout_for_export("fp-rnn", c.model);
        JsonBuf b;
        json_buf_init(&b, 2);
        int rc = L && L->config_write ? L->config_write(&c, &b) : -1;
        TH_CHECK(rc == IM_OK && !b.failed, "%s: write: %s", c.model, err_msg());
        rc = rc ? rc : layout_config_parse(b.data, b.len, "written", &back);
        TH_CHECK(rc == IM_OK, "%s: read back: %s\n%s", c.model, err_msg(), b.data ? b.data : "");
        int fp = strcmp(c.model, "mamba1") != 0;
        int same = !rc && !strcmp(back.model, c.model) && back.d_model == c.d_model && back.n_layer == c.n_layer &&
                   back.vocab_size == c.vocab_size && back.pad_vocab_multiple == c.pad_vocab_multiple &&
                   !strcmp(back.norm_type, c.norm_type) && back.norm_eps == c.norm_eps &&
                   (back.d_state == c.d_state || !strcmp(c.model, "fp_rnn")) &&   /* fp_rnn has no d_state */
                   back.expand == c.expand && back.d_conv == c.d_conv;
        if (fp)
            same &= !strcmp(back.mixer_type, c.mixer_type) && back.mixer_rank == c.mixer_rank &&
                    back.fp_max_iter == c.fp_max_iter && back.fp_n_backwards == c.fp_n_backwards &&
                    back.glu_in_loop == c.glu_in_loop && (back.short_conv == 1) == (c.short_conv == 1 || (!strcmp(c.model, "fp_rnn") && c.short_conv)) &&
                    (float)back.mixer_norm_eps == lm_eps(&c) && back.fp_step0 == c.fp_step0 && back.fp_decay == c.fp_decay &&
                    back.fp_outlier_q == c.fp_outlier_q && !strcmp(back.kron_norm, c.kron_norm);
        TH_CHECK(same, "%s: the written config reads back as another model:\n%s", c.model, b.data ? b.data : "");
        json_buf_free(&b);
        if (fp) { /* a solver constant the reference fixes */
            c.fp_patience = 7;
            json_buf_init(&b, 0);
            TH_CHECK(L->config_write(&c, &b) == IM_EINVAL && strstr(err_msg(), "fp_patience 15"), "%s: patience 7: %s",
                     c.model, err_msg());
            json_buf_free(&b);
        }
    }
}

/* `implicit export tests/ref/interop/fp_rnn_k DIR --layout fp-rnn` writes exactly the committed
 * folder that PyTorch code read back (tests/ref/gen_fp_interop.py: the reference's module tree,
 * strict but for the tied head), and the export loads here with PyTorch's logits and iteration
 * counts. */
static void fp_export(const char *bin) {
    char dir[128], cmd[2400], a[256];
    snprintf(dir, sizeof dir, "/tmp/implicit-test-fp-export-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && %s export tests/ref/interop/fp_rnn_k %s --layout fp-rnn > /dev/null", dir, bin, dir);
    TH_CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "cmp -s %s/model.safetensors tests/ref/interop/export_fp_rnn_k/model.safetensors", dir);
    TH_CHECK(system(cmd) == 0, "the export differs from the committed tests/ref/interop/export_fp_rnn_k (docs/interop.md)");
    snprintf(cmd, sizeof cmd, "cmp -s %s/config.json tests/ref/interop/export_fp_rnn_k/config.json", dir);
    TH_CHECK(system(cmd) == 0, "the export's config.json differs from the committed one");
    StFile f;
    Model m;
    if (st_read(&f, "tests/ref/interop/export_fp_logits.safetensors")) { TH_CHECK(0, "%s", err_msg()); return; }
    snprintf(a, sizeof a, "%s", dir);
    if (ckpt_load(&m, a, NULL)) { TH_CHECK(0, "%s: %s", a, err_msg()); st_free(&f); return; }
    const StTensor *ids = st_find(&f, "export_fp_rnn_k.ids"), *want = st_find(&f, "export_fp_rnn_k.logits"),
                   *its = st_find(&f, "export_fp_rnn_k.iters");
    if (ids && want && its) {
        int B = (int)ids->shape[0], T = (int)ids->shape[1];
        m.training = 0;
        TH_CHECK(model_fwd(&m, st_data(&f, ids), NULL, B, T, NULL) == 0, "%s", err_msg());
        size_t n = (size_t)B * T * m.V;
        double e = st_numel(want) == n ? th_rel_err(m.logits, st_data(&f, want), n) : 1;
        TH_CHECK(e <= TOL && m.fp_iters == mean_iters(its, &f), "export fp-rnn: logits vs PyTorch reading it %.3g, "
                 "iterations %g vs %g", e, m.fp_iters, mean_iters(its, &f));
        printf("  export --layout fp-rnn: PyTorch logits rel err %.1e, %g iterations\n", e, m.fp_iters);
    } else {
        TH_CHECK(0, "export_fp_logits.safetensors: missing tensors");
    }
    model_free(&m);
    st_free(&f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
    th_name = "test_fp_ref";
    (void)argc;
    fp_config_roundtrip();
    fp_layout_names();
    fp_config_refusals();
    ref_case("tests/ref/fp_mamba.safetensors");
    ref_case("tests/ref/fp_mamba_kron.safetensors");
    ref_case("tests/ref/fp_mamba_ln.safetensors");
    ref_case("tests/ref/fp_ref_h.safetensors");
    ref_case("tests/ref/fp_ref_k.safetensors");
    ref_checkpoint("tests/ref/interop/fp_rnn_h", "tests/ref/fp_ref_h.safetensors");
    ref_checkpoint("tests/ref/interop/fp_rnn_k", "tests/ref/fp_ref_k.safetensors");
    /* mamba_ssm's Mamba-1 LM (the reference's baseline) under its names and MambaConfig */
    {
        StFile f;
        Model m;
        if (!st_read(&f, "tests/ref/mamba1.safetensors")) {
            int rc = ckpt_load(&m, "tests/ref/interop/mamba_ssm_mamba1", NULL);
            TH_CHECK(rc == 0, "mamba_ssm_mamba1: %s", err_msg());
            const StTensor *ids = st_find(&f, "input.ids"), *want = st_find(&f, "out.logits");
            if (!rc && ids && want) {
                int B = (int)ids->shape[0], T = (int)ids->shape[1];
                m.training = 0;
                TH_CHECK(model_fwd(&m, st_data(&f, ids), NULL, B, T, NULL) == 0, "%s", err_msg());
                size_t n = (size_t)B * T * m.V;
                double e = st_numel(want) == n ? th_rel_err(m.logits, st_data(&f, want), n) : 1;
                TH_CHECK(!strcmp(m.cfg.model, "mamba1") && !strcmp(m.cfg.norm_type, "rmsnorm") && e <= TOL,
                         "mamba_ssm_mamba1: model %s, logits rel err %.3g", m.cfg.model, e);
                printf("  tests/ref/interop/mamba_ssm_mamba1: logits %.2e\n", e);
            }
            if (!rc) model_free(&m);
            st_free(&f);
        } else {
            TH_CHECK(0, "mamba1.safetensors: %s", err_msg());
        }
    }
    /* the CLI is built beside this test */
    char bin[1024];
    const char *slash = strrchr(argv[0], '/');
    snprintf(bin, sizeof bin, "%.*s%simplicit", slash ? (int)(slash - argv[0]) : 0, argv[0], slash ? "/" : "./");
    fp_export(bin);
    return th_done();
}
