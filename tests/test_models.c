/* test_models.c: the explicit LMs against the independent PyTorch reference (tests/ref/<name>.py,
 * committed vectors tests/ref/<name>.safetensors; llm.c's test_gpt2 pattern), plus step-vs-parallel
 * agreement of every family and reproducibility.
 * For each reference file: logits and loss (rel ≤ 1e-4), every parameter gradient (rel ≤ 1e-3),
 * and the losses and pre-clip gradient norms of 10 AdamW steps with clipping.
 */
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/data/task.h"
#include "../src/io/json.h"
#include "../src/io/safetensors.h"
#include "../src/kernels/kernels.h"
#include "../src/models/ckpt.h"
#include "../src/train/optim.h"
#include "../src/train/train_cfg.h"
#include "th.h"
#include "model_check.h"

static void check_ref(const char *path) {
    StFile f;
    Model m;
    int B = 0, T = 0, rc;
    if (th_ref_open(&f, &m, path, NULL, &B, &T)) return;
    const int *ids = (const int *)ref_tensor(&f, "input.ids", (size_t)B * T);
    const int *tg = (const int *)ref_tensor(&f, "input.targets", (size_t)B * T);
    const float *logits = ref_tensor(&f, "out.logits", (size_t)B * T * m.V);
    const float *loss_ref = ref_tensor(&f, "out.loss", 1);
    TH_CHECK(ids && tg && logits && loss_ref, "%s: missing reference tensors", path);
    if (!ids || !tg || !logits || !loss_ref) { model_free(&m); st_free(&f); return; }

    float loss = 0;
    rc = model_fwd(&m, ids, tg, B, T, &loss);
    TH_CHECK(rc == 0, "%s: fwd: %s", path, err_msg());
    char what[256];
    snprintf(what, sizeof what, "%s logits", path);
    TH_CLOSE(m.logits, logits, (size_t)B * T * m.V, 1e-4, what);
    TH_CHECK(fabsf(loss - *loss_ref) <= 1e-4f * fabsf(*loss_ref), "%s loss %.7f vs %.7f", path, loss, *loss_ref);

    model_zero_grad(&m);
    model_bwd(&m);
    double worst = th_ref_grads(&m, &f, "grad.", 1e-3, path);
    printf("  %-34s logits %.2e  loss %.2e  worst grad %.2e\n", path, th_rel_err(m.logits, logits, (size_t)B * T * m.V),
           fabs(loss - *loss_ref) / fabs(*loss_ref), worst);

    /* 10 AdamW steps (lr 1e-2, betas (0.9, 0.95), wd 0.1 on the decay set, clip 1.0) */
    const float *losses = ref_tensor(&f, "adamw.losses", 10), *norms = ref_tensor(&f, "adamw.grad_norms", 10);
    TH_CHECK(losses && norms, "%s: missing adamw reference", path);
    if (losses && norms) {
        double worst_l, worst_n;
        ref_adamw_replay(&m, ids, tg, B, T, losses, norms, &worst_l, &worst_n);
        TH_CHECK(worst_l <= 1e-3, "%s: adamw losses rel err %.3g", path, worst_l);
        TH_CHECK(worst_n <= 1e-3, "%s: adamw grad norms rel err %.3g", path, worst_n);
        printf("  %-34s adamw 10 steps: loss %.2e  grad norm %.2e  (final loss %.4f)\n", path, worst_l, worst_n,
               losses[9]);
    }
    model_free(&m);
    st_free(&f);
}

/* A freshly initialised `model` with the given keys; returns 0 (and says why) if it cannot be made. */
static int make_model(Model *m, const char *model, const char *const *kv, uint64_t seed) {
    int ok = th_model_create(m, model, kv) == 0;
    TH_CHECK(ok, "%s: %s", model, err_msg());
    if (ok) model_init_params(m, seed);
    return ok;
}

/* Token-by-token step must reproduce the parallel forward for every family. */
static void check_step(const char *model, const char *const *kv) {
    Model m;
    if (!make_model(&m, model, kv, 3)) return;
    const ModelCfg c = m.cfg;
    enum { B = 2, T = 70 };  /* T > SSD_CHUNK: the chunked scan against the recurrent step */
    int ids[B * T], col[B];
    Rng r;
    rng_seed(&r, 9, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int)rng_below(&r, (uint32_t)c.vocab_size);
    double worst = th_step_vs_parallel(&m, ids, B, T, model, NULL);
    TH_CHECK(worst <= 1e-5, "%s: step vs parallel rel err %.3g", model, worst);
    printf("  step vs parallel %-8s rel err %.2e (B=%d, T=%d)\n", model, worst, B, T);
    /* a bad token is a runtime error, not a crash */
    float *lg = th_alloc((size_t)B * m.V);
    for (int b = 0; b < B; b++) col[b] = ids[b * T];
    col[0] = c.vocab_size;
    TH_CHECK(model_step(&m, col, lg) == IM_EINVAL, "%s: out-of-range token accepted", model);
    ids[5] = -1;
    TH_CHECK(model_fwd(&m, ids, NULL, B, T, NULL) == IM_EINVAL, "%s: negative token accepted", model);
    free(lg);
    model_free(&m);
}

/* Initialisation follows spec §1.8: check the families' distinctive rules. */
static void check_init(void) {
    ModelCfg c;
    cfg_defaults(&c);
    cfg_set(&c, "model", "mamba2");
    cfg_set(&c, "d_model", "64");
    cfg_set(&c, "n_layer", "4");
    Model m;
    TH_CHECK(model_create(&m, &c) == 0, "create: %s", err_msg());
    model_init_params(&m, 5);
    const ParamInfo *a = ptab_find(&m.tab, "backbone.layers.0.mixer.A_log");
    const ParamInfo *dtb = ptab_find(&m.tab, "backbone.layers.0.mixer.dt_bias");
    const ParamInfo *op = ptab_find(&m.tab, "backbone.layers.0.mixer.out_proj.weight");
    const ParamInfo *emb = ptab_find(&m.tab, "word_emb.emb.weight");
    int ok = 1;
    for (size_t i = 0; i < a->numel; i++) {
        float A = expf(m.params[a->offset + i]);
        ok &= A >= 1 && A <= 16;
        float dt = log1pf(expf(m.params[dtb->offset + i]));   /* softplus(dt_bias) = dt */
        ok &= dt >= 0.9e-3f && dt <= 0.11f;
    }
    TH_CHECK(ok, "A_log / dt_bias outside spec ranges");
    float bound = 1.0f / sqrtf((float)(2 * 64)) / sqrtf(4.0f), mx = 0;
    for (size_t i = 0; i < op->numel; i++) mx = fmaxf(mx, fabsf(m.params[op->offset + i]));
    TH_CHECK(mx <= bound && mx > 0.8f * bound, "out_proj not rescaled: max %g, bound %g", mx, bound);
    double s2 = 0;
    for (size_t i = 0; i < emb->numel; i++) s2 += (double)m.params[emb->offset + i] * m.params[emb->offset + i];
    double sd = sqrt(s2 / emb->numel);
    TH_CHECK(fabs(sd - 0.02) < 0.002, "embedding std %g, want 0.02", sd);
    TH_CHECK(!ptab_find(&m.tab, "backbone.layers.0.mixer.A_log")->decay &&
                 ptab_find(&m.tab, "backbone.layers.0.mixer.in_proj.weight")->decay && !emb->decay,
             "weight-decay groups");
    model_free(&m);
}

/* A no_grad forward (evaluation) keeps no backward state: the same logits and loss, bitwise, from a
 * smaller activation plan; a later ordinary forward plans again and its backward works. */
static void check_no_grad(const char *model, const char *const *kv) {
    Model m;
    if (!make_model(&m, model, kv, 5)) return;
    enum { B = 3, T = 20 };
    int ids[B * T], tg[B * T];
    Rng r;
    rng_seed(&r, 4, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int)rng_below(&r, 40), tg[i] = (int)rng_below(&r, 40);
    float l1 = 0, l2 = 0;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &l1) == 0, "%s: %s", model, err_msg());
    size_t full = m.act_bytes;
    float *lg = th_alloc((size_t)B * T * m.V);
    memcpy(lg, m.logits, sizeof(float) * (size_t)B * T * m.V);
    m.no_grad = 1;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &l2) == 0, "%s no_grad: %s", model, err_msg());
    TH_CHECK(l1 == l2 && !memcmp(lg, m.logits, sizeof(float) * (size_t)B * T * m.V),
             "%s: no_grad forward differs (loss %.9g vs %.9g)", model, l1, l2);
    TH_CHECK(3 * m.act_bytes < 2 * full, "%s: no_grad plan %zu bytes vs %zu", model, m.act_bytes, full);
    printf("  %-8s no_grad forward: same logits, activations %zu -> %zu bytes\n", model, full, m.act_bytes);
    m.no_grad = 0;
    TH_CHECK(model_fwd(&m, ids, tg, B, T, &l2) == 0 && l1 == l2, "%s: forward after no_grad", model);
    model_zero_grad(&m);
    model_bwd(&m);
    TH_CHECK(k_sumsq(m.grads, m.tab.total) > 0, "%s: no gradient after re-planning", model);
    free(lg);
    model_free(&m);
}

/* A config from {"key", "value", ..., NULL} over the defaults. */
static void cfg_of(ModelCfg *c, const char *const *kv) {
    cfg_defaults(c);
    for (int i = 0; kv[i]; i += 2) TH_CHECK(cfg_set(c, kv[i], kv[i + 1]) == 0, "set %s: %s", kv[i], err_msg());
}

/* Every integer key of the three config tables has a range, and sizes out of it (or derived
 * widths above CFG_MAX_WIDTH) are refused by name before any arithmetic: the first two configs
 * overflowed int inside cfg_validate itself. */
static void config_bounds(void) {
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < tabs[t]->n; i++)
            TH_CHECK(tabs[t]->keys[i].type != KEY_INT || keytab_bound(tabs[t], tabs[t]->keys[i].name),
                     "%s key '%s' has no bound", tabs[t]->section, tabs[t]->keys[i].name);
    static const char *const k0[] = {"model", "llama", "d_model", "64", "d_inner", "2147483647", NULL};
    static const char *const k1[] = {"model", "fp_mamba2", "d_model", "4096", "expand", "1000000", NULL};
    static const char *const k2[] = {"model", "fp_mamba", "d_model", "8192", "mixer_type", "selectivedense", NULL};
    static const char *const k3[] = {"model", "gated_deltanet", "n_head", "65536", "delta_head_dim", "4096", NULL};
    static const char *const k4[] = {"model", "mamba2", "vocab_size", "0", NULL};
    struct { const char *const *kv; const char *needle; } bad[] = {
        {k0, "model key 'd_inner' must be in 0..1048576 (got 2147483647)"},
        {k1, "model key 'expand' must be in 1..64 (got 1000000)"},
        {k2, "the mixer projection width = 134225920 is above the largest supported width 16777216"},
        {k3, "n_head x delta_head_dim x expand_v x n_householder = 536870912"},
        {k4, "model key 'vocab_size' must be in 1..16777216 (got 0)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ModelCfg c;
        cfg_of(&c, bad[i].kv);
        int rc = cfg_validate(&c);
        TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), bad[i].needle), "bad config %zu: rc %d, %s", i, rc, err_msg());
    }
    /* every key in range, the model absurd: counted in size_t and refused before allocating */
    static const char *const huge[] = {"model", "llama", "vocab_size", "16777216", "d_model", "65536", NULL};
    ModelCfg c;
    Model m;
    cfg_of(&c, huge);
    int rc = model_create(&m, &c);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "this config has 1133871562752 parameters"), "huge model: rc %d, %s", rc,
             err_msg());
    if (!rc) model_free(&m);
    /* a forward of more tokens than the layers' int row counts allow */
    static const char *const tiny[] = {"model", "lstm", "d_model", "8", "vocab_size", "10", NULL};
    cfg_of(&c, tiny);
    TH_CHECK(model_create(&m, &c) == 0, "%s", err_msg());
    rc = model_plan(&m, 65536, 1 << 20);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "68719476736 tokens in one forward"), "huge batch: rc %d, %s", rc,
             err_msg());
    model_free(&m);
    /* task and training keys: copy's 2 max_len + 3 overflowed; steps sized an array of doubles */
    TaskCfg t;
    task_cfg_defaults(&t);
    task_cfg_set(&t, "task", "copy");
    task_cfg_set(&t, "max_len", "2147483647");
    rc = task_cfg_validate(&t);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "task key 'max_len' must be in 0..1048576"), "max_len: %s", err_msg());
    TrainCfg r;
    train_cfg_defaults(&r);
    keytab_set(&train_keytab, &r, "steps", "2147483647");
    rc = train_cfg_validate(&r);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "train key 'steps' must be in 1..100000000"), "steps: %s", err_msg());
}

/* A failed allocation reports the size that failed (it once freed the table first and said "0
 * parameters"). Address-space limit in a child: under ASan, which reserves terabytes of shadow
 * memory up front, the limit cannot be set, so the check is skipped there. */
static void alloc_failure(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("  alloc_failure: skipped under ASan\n");
#else
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
        fclose(f);
        struct rlimit rl;
        getrlimit(RLIMIT_AS, &rl);
        rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
        if (setrlimit(RLIMIT_AS, &rl)) _exit(2);
        static const char *const kv[] = {"model", "lstm", "vocab_size", "1048576", "d_model", "256", NULL};
        ModelCfg c;
        cfg_of(&c, kv);
        Model m;
        int rc = model_create(&m, &c);   /* 2^28 + 2^18 + ... floats: 1 GB for the weights alone */
        int ok = rc == IM_ENOMEM && strstr(err_msg(), "cannot allocate 269") != NULL;
        if (!ok) printf("  child: rc %d, %s\n", rc, rc ? err_msg() : "allocated");
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 2, "alloc_failure: could not limit the address space");
    TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a failed parameter allocation does not report its size");
#endif
}

/* Every registry row says which kind of network it is; code branches on that, not on names. */
static void families(void) {
    static const struct { const char *name; ModelFamily f; } want[] = {
        {"mamba2", MODEL_EXPLICIT},         {"llama", MODEL_EXPLICIT},         {"lstm", MODEL_EXPLICIT},
        {"mamba1", MODEL_EXPLICIT},         {"deltanet", MODEL_EXPLICIT},      {"gated_deltanet", MODEL_EXPLICIT},
        {"implicit_mamba2", MODEL_IMPLICIT}, {"implicit_llama", MODEL_IMPLICIT}, {"fp_mamba", MODEL_FP_RNN},
        {"fp_mamba2", MODEL_FP_RNN},        {"fp_rnn", MODEL_FP_RNN}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ModelType *t = model_type_find(want[i].name);
        TH_CHECK(t && t->family == want[i].f, "%s: family %s, expected %s", want[i].name,
                 t ? model_family_name(t->family) : "(not registered)", model_family_name(want[i].f));
    }
    TH_CHECK(!strcmp(model_family_name(MODEL_FP_RNN), "fp_rnn") && !strcmp(model_family_name(MODEL_N_FAMILY), "?"),
             "family names");
}

/* cfg_validate asks the row which key groups a family reads (config.h CFG_USE_*): the groups each
 * family must have, the kinds' own groups included, and messages that list the families of a
 * group from the registry. */
static void key_groups(void) {
    enum { ATTN = CFG_USE_ATTN, SSD = CFG_USE_SSD_HEADS, SCAN = CFG_USE_SCAN, NT = CFG_USE_NORM_TYPE,
           DELTA = CFG_USE_DELTA, FPL = CFG_USE_FP_LAYER, DEQ = CFG_USE_DEQ, NOISE = CFG_USE_NOISE };
    static const struct { const char *name; unsigned uses; } want[] = {
        {"mamba2", SSD}, {"llama", ATTN}, {"lstm", 0}, {"implicit_mamba2", SSD | NOISE | DEQ},
        {"implicit_llama", ATTN | DEQ}, {"mamba1", SCAN | NT}, {"fp_mamba", SCAN | NT | FPL},
        {"fp_mamba2", SCAN | NT | SSD | FPL}, {"fp_rnn", SCAN | NT | FPL}, {"deltanet", DELTA},
        {"gated_deltanet", DELTA}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ModelType *t = model_type_find(want[i].name);
        TH_CHECK(t && model_type_cfg_uses(t) == want[i].uses, "%s: key groups 0x%x, expected 0x%x", want[i].name,
                 t ? model_type_cfg_uses(t) : 0u, want[i].uses);
    }
    ModelCfg c;
    cfg_defaults(&c);
    snprintf(c.model, sizeof c.model, "llama");
    snprintf(c.norm_type, sizeof c.norm_type, "layernorm");
    TH_CHECK(cfg_validate(&c) == IM_EINVAL &&
                 strstr(err_msg(), "layernorm applies to mamba1, fp_mamba, fp_mamba2 and fp_rnn only (model 'llama'"),
             "norm_type message from the registry: %s", err_msg());
    cfg_defaults(&c);
    snprintf(c.model, sizeof c.model, "implicit_llama");
    c.latent_noise_db = 10;
    TH_CHECK(cfg_validate(&c) == IM_EINVAL && strstr(err_msg(), "noise injection applies to implicit_mamba2 (spec 7)"),
             "noise message from the registry: %s", err_msg());
    snprintf(c.model, sizeof c.model, "implicit_mamba2");
    TH_CHECK(cfg_validate(&c) == IM_OK, "implicit_mamba2 takes noise: %s", err_msg());
    snprintf(c.model, sizeof c.model, "mamba3");
    char want_msg[512];
    snprintf(want_msg, sizeof want_msg, "config key 'model': unknown model 'mamba3' (%s)", model_type_names());
    TH_CHECK(cfg_validate(&c) == IM_EINVAL && !strcmp(err_msg(), want_msg), "unknown model: %s", err_msg());
    /* the model key's --help choices (MODEL_LIST's names, config.c) are the registry's names, in
     * its order: each row's name is its ModelType's */
    const char *choices = model_keytab.choices ? model_keytab.choices("model") : NULL;
    TH_CHECK(choices && !strcmp(choices, model_type_names()), "the model key's help lists %s (got %s)",
             model_type_names(), choices ? choices : "nothing");
}

int main(void) {
    th_name = "test_models";
    families();
    key_groups();
    config_bounds();
    alloc_failure();
    check_ref("tests/ref/mamba2.safetensors");
    check_ref("tests/ref/mamba2_long.safetensors");
    check_ref("tests/ref/llama.safetensors");
    check_ref("tests/ref/lstm.safetensors");
    static const char *const m2[] = {"d_model", "32", "d_state", "8", "headdim", "8", "vocab_size", "40", NULL};
    static const char *const ll[] = {"d_model", "32", "n_head", "4", "d_inner", "64", "vocab_size", "40", NULL};
    static const char *const ls[] = {"d_model", "24", "vocab_size", "40", NULL};
    static const char *const m2g[] = {"d_model", "32", "d_state", "8", "headdim", "8", "vocab_size", "40",
                                      "d_inner", "64", "mlp_type", "gated", NULL};
    check_step("mamba2", m2);
    check_step("mamba2", m2g);
    check_step("llama", ll);
    check_step("lstm", ls);
    static const char *const m2l[] = {"d_model", "32", "d_state", "8", "headdim", "8", "vocab_size", "40",
                                      "d_inner", "64", "mlp_type", "gated", "n_layer", "3", NULL};
    static const char *const lll[] = {"d_model", "32", "n_head", "4", "d_inner", "64", "vocab_size", "40",
                                      "n_layer", "3", NULL};
    check_no_grad("mamba2", m2l);
    check_no_grad("llama", lll);
    static const char *const mb1[] = {"d_model", "32", "d_state", "8", "vocab_size", "40", "n_layer", "3", NULL};
    static const char *const fpm[] = {"d_model", "32", "d_state", "8", "vocab_size", "40", "n_layer", "3",
                                      "mixer_type", "householder", "fp_max_iter", "8", NULL};
    check_no_grad("mamba1", mb1);
    check_no_grad("fp_mamba", fpm);
    static const char *const lsl[] = {"d_model", "24", "vocab_size", "40", "n_layer", "3", NULL};
    check_no_grad("lstm", lsl);
    static const char *const gdn[] = {"d_model", "32", "n_head", "2", "vocab_size", "40", "n_layer", "3", NULL};
    check_no_grad("gated_deltanet", gdn);
    check_init();
    return th_done();
}
