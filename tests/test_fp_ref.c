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
#include <string.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/models/ckpt.h"
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

int main(void) {
    th_name = "test_fp_ref";
    ref_case("tests/ref/fp_mamba.safetensors");
    ref_case("tests/ref/fp_mamba_kron.safetensors");
    ref_case("tests/ref/fp_mamba_ln.safetensors");
    return th_done();
}
