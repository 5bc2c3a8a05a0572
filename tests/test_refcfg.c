/* test_refcfg.c: configs written for the PyTorch reference (io/refcfg.h, spec implicit-lm §11).
 *
 * Loads the two fixtures (tests/fixtures/ref_state_tracking.json = the released state-tracking
 * config of §1.9/§8.4 in the reference's layout; ref_mamba2_130m.json = a Mamba2-130m implicit
 * config that spells out the mixer defaults) through keyjson_apply with the three tables of
 * `implicit train`, and checks the resulting ModelCfg field by field. Then: a Llama and two
 * explicit configs, the reference defaults of missing keys, the derived keys (padding, weight norm,
 * clip, hook_ift, rescale), every forbidden value and unknown key at each nesting level (rejected,
 * message naming the file and the key path, objects untouched), and that flat / sectioned configs
 * of our own format behave exactly as before.
 */
#include "th.h"

#include "../src/core/check.h"
#include "../src/data/task.h"
#include "../src/io/json.h"
#include "../src/io/keyjson.h"
#include "../src/io/refcfg.h"
#include "../src/models/model.h"
#include "../src/train/train_cfg.h"

typedef struct {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
} Cfgs;

/* The state of `implicit train` before its config file is read. */
static void defaults(Cfgs *c) {
    memset(c, 0, sizeof *c);
    cfg_defaults(&c->m);
    task_cfg_defaults(&c->t);
    train_cfg_defaults(&c->r);
    c->m.vocab_size = -1;
}

static int load_text(Cfgs *c, const char *json, const char *where) {
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&c->m, &c->t, &c->r};
    return keyjson_apply(tabs, objs, 3, json, strlen(json), where);
}

static int load_file(Cfgs *c, const char *path) {
    char *text;
    size_t len;
    int rc = keyjson_read_file(path, &text, &len);
    if (rc) return rc;
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&c->m, &c->t, &c->r};
    rc = keyjson_apply(tabs, objs, 3, text, len, path);
    free(text);
    return rc;
}

#define EQ_I(a, b) TH_CHECK((a) == (b), "%s = %d, expected %d", #a, (int)(a), (int)(b))
#define EQ_F(a, b) TH_CHECK((a) == (b), "%s = %.17g, expected %.17g", #a, (double)(a), (double)(b))
#define EQ_S(a, b) TH_CHECK(!strcmp((a), (b)), "%s = '%s', expected '%s'", #a, (a), (b))

static void test_state_tracking(void) {
    Cfgs c;
    defaults(&c);
    int rc = load_file(&c, "tests/fixtures/ref_state_tracking.json");
    TH_CHECK(rc == IM_OK, "state-tracking fixture: %s", err_msg());
    const ModelCfg *m = &c.m;
    EQ_S(m->model, "implicit_mamba2");
    EQ_I(m->vocab_size, 240);
    EQ_I(m->pad_vocab_multiple, 16);
    EQ_I(m->d_model, 256);
    EQ_I(m->n_layer, 1);
    EQ_I(m->d_inner, 0);
    EQ_S(m->mlp_type, "gated");
    EQ_F(m->norm_eps, 1e-5);
    EQ_I(m->d_state, 128);
    EQ_I(m->d_conv, 4);   /* absent: REF default */
    EQ_I(m->expand, 4);
    EQ_I(m->headdim, 64);
    EQ_F(m->dropout, 0.05);
    EQ_F(m->backbone_dropout, 0.05);
    EQ_I(m->rescale_out_proj, 0);   /* implicit + weight norm: REF's rescale never fires (12-B1) */
    EQ_F(m->emb_init_std, 0.02);    /* the config's 0.01 is ignored by REF */
    EQ_F(m->tau, 0.8);
    EQ_S(m->f_solver, "fixed_point_iter");
    EQ_I(m->f_max_iter, 32);
    EQ_F(m->f_tol, 0.05);
    EQ_S(m->f_stop_mode, "rel");
    EQ_I(m->grad, 4);
    EQ_I(m->ift, 0);
    EQ_S(m->b_solver, "fixed_point_iter");
    EQ_I(m->b_max_iter, 32);
    EQ_F(m->b_tol, 1e-3);
    EQ_S(m->b_stop_mode, "rel");
    EQ_F(m->eval_factor, 0.0);
    EQ_I(m->eval_f_max_iter, 2048);
    EQ_I(m->pretrain_steps, 0);
    EQ_I(m->pretrain_iter, 1);      /* 0 in the config: REF's unroll then makes one f call */
    EQ_I(m->weight_norm, 1);
    EQ_I(m->norm_no_scale, 0);
    EQ_F(m->norm_target_norm, 1.0);
    EQ_F(m->norm_clip_value, 0.0);  /* norm_clip false; the misspelled norm_clip_val is inert */
    EQ_F(m->ema_alpha, 0.0);
    EQ_F(c.r.weight_decay, 0.0);    /* the config's optimiser field reaches the train table */
    EQ_S(c.t.task, "word");         /* task keys untouched */
    EQ_S(c.t.group, "A5");
    TH_CHECK(cfg_validate(m) == IM_OK, "state-tracking config validates: %s", err_msg());
    EQ_I(cfg_vocab_padded(m), 240);

    /* the same text through cfg_from_json (model table only): weight_decay has nowhere to go */
    char *text;
    TH_CHECK(keyjson_read_file("tests/fixtures/ref_state_tracking.json", &text, NULL) == IM_OK, "read");
    ModelCfg m2;
    cfg_defaults(&m2);
    TH_CHECK(cfg_from_json(&m2, text) == IM_OK, "cfg_from_json of a reference config: %s", err_msg());
    EQ_I(m2.d_model, 256);
    EQ_I(m2.eval_f_max_iter, 2048);
    free(text);
}

static void test_mamba2_130m(void) {
    Cfgs c;
    defaults(&c);
    c.r.weight_decay = 0.5;
    int rc = load_file(&c, "tests/fixtures/ref_mamba2_130m.json");
    TH_CHECK(rc == IM_OK, "130m fixture: %s", err_msg());
    const ModelCfg *m = &c.m;
    EQ_S(m->model, "implicit_mamba2");
    EQ_I(m->vocab_size, 50277);
    EQ_I(m->pad_vocab_multiple, 16);
    EQ_I(cfg_vocab_padded(m), 50288);   /* spec 1.9 */
    EQ_I(m->d_model, 768);
    EQ_I(m->n_layer, 24);
    EQ_I(m->expand, 2);
    EQ_I(m->d_state, 128);
    EQ_I(m->headdim, 64);
    EQ_I(m->d_conv, 4);
    EQ_F(m->dropout, 0.0);
    EQ_F(m->backbone_dropout, 0.0);
    EQ_I(m->f_max_iter, 32);
    EQ_F(m->eval_factor, 4.0);
    EQ_I(m->eval_f_max_iter, 0);
    EQ_I(m->grad, 4);
    EQ_F(m->tau, 0.8);
    EQ_I(m->pretrain_iter, 4);
    EQ_I(m->weight_norm, 1);
    EQ_I(m->rescale_out_proj, 0);
    EQ_F(m->ema_alpha, 0.0);        /* null = None = off */
    EQ_F(c.r.weight_decay, 0.0);
    TH_CHECK(cfg_validate(m) == IM_OK, "130m config validates: %s", err_msg());
}

static void test_llama_and_explicit(void) {
    Cfgs c;
    defaults(&c);
    const char *llama =
        "{\"backbone_config\": {\"block_cfg\": {\"n_head\": 12}, \"block_type\": \"transformer\", \"d_inner\": 3072,"
        " \"d_model\": 768, \"dropout\": 0.0, \"init_gain\": 0.5, \"mlp_type\": \"llama_mlp\", \"n_layer\": 12,"
        " \"pre_norm\": true, \"pretrain_iter\": 4, \"pretrain_steps\": 0, \"rms_norm\": true},"
        " \"backbone_type\": \"implicit\", \"d_embed\": 768, \"deq_params\": {\"solver\": {\"f_max_iter\": 32,"
        " \"eval_factor\": 4.0, \"eval_f_max_iter\": 0, \"f_tol\": 0.05, \"f_stop_mode\": \"rel\"},"
        " \"training\": {\"grad\": 4, \"tau\": 0.8}}, \"dropout\": 0.0, \"model_type\": \"implicit_llama3\","
        " \"pad_vocab\": false, \"pad_vocab_size_multiple\": 8, \"tie_embeddings\": true, \"vocab_size\": 50277,"
        " \"weight_decay\": 0.1}";
    TH_CHECK(load_text(&c, llama, "llama.json") == IM_OK, "llama config: %s", err_msg());
    EQ_S(c.m.model, "implicit_llama");
    EQ_S(c.m.mlp_type, "swiglu");
    EQ_I(c.m.n_head, 12);
    EQ_I(c.m.d_inner, 3072);
    EQ_I(c.m.vocab_size, 50277);
    EQ_I(c.m.pad_vocab_multiple, 0);
    EQ_I(c.m.max_seq_len, 2048);
    EQ_F(c.m.rope_theta, 500000.0);
    EQ_F(c.r.weight_decay, 0.1);
    TH_CHECK(cfg_validate(&c.m) == IM_OK, "llama config validates: %s", err_msg());

    /* explicit configs: deq_params is {} (REF pops it); no weight norm, so the rescale applies */
    defaults(&c);
    const char *expl =
        "{\"backbone_config\": {\"block_cfg\": {\"d_state\": 128, \"expand\": 2, \"headdim\": 64}, \"block_type\": \"mamba2\","
        " \"d_inner\": 0, \"d_model\": 768, \"dropout\": 0.0, \"n_layer\": 24, \"pre_norm\": true, \"rms_norm\": true},"
        " \"backbone_type\": \"explicit\", \"deq_params\": {}, \"dropout\": 0.0, \"n_tokens\": 50277, \"pad_vocab\": false,"
        " \"pad_vocab_size_multiple\": 8, \"vocab_size\": 50277}";
    TH_CHECK(load_text(&c, expl, "explicit.json") == IM_OK, "explicit config: %s", err_msg());
    EQ_S(c.m.model, "mamba2");
    EQ_I(c.m.rescale_out_proj, 1);
    EQ_I(c.m.pad_vocab_multiple, 0);
    TH_CHECK(cfg_validate(&c.m) == IM_OK, "explicit config validates: %s", err_msg());
    defaults(&c);
    TH_CHECK(load_text(&c, "{\"backbone_type\": \"explicit\", \"backbone_config\": {\"block_type\": \"transformer\","
                           " \"block_cfg\": {\"n_head\": 4}, \"d_model\": 64, \"n_layer\": 2, \"d_inner\": 256}}", "x.json") == IM_OK,
             "explicit transformer: %s", err_msg());
    EQ_S(c.m.model, "llama");
    EQ_S(c.m.mlp_type, "gated");   /* REF's default mlp_type is gated_mlp for either mixer */
}

/* Missing keys take the reference's defaults (torchdeq's for deq_params), not ours. */
static void test_reference_defaults(void) {
    Cfgs c;
    defaults(&c);
    int rc = load_text(&c, "{\"backbone_config\": {\"d_model\": 64, \"n_layer\": 2, \"d_inner\": 0, \"pre_norm\": true}}", "min.json");
    TH_CHECK(rc == IM_OK, "minimal config: %s", err_msg());
    EQ_S(c.m.model, "implicit_mamba2");
    EQ_I(c.m.vocab_size, -1);          /* no default: the task decides */
    EQ_I(c.m.pad_vocab_multiple, 0);
    EQ_I(c.m.d_state, 128);
    EQ_I(c.m.headdim, 64);
    EQ_I(c.m.expand, 2);
    EQ_F(c.m.dropout, 0.05);
    EQ_F(c.m.backbone_dropout, 0.0);
    EQ_I(c.m.f_max_iter, 40);
    EQ_F(c.m.f_tol, 1e-3);
    EQ_S(c.m.f_stop_mode, "abs");
    EQ_I(c.m.b_max_iter, 40);
    EQ_F(c.m.b_tol, 1e-6);
    EQ_S(c.m.b_stop_mode, "abs");
    EQ_F(c.m.eval_factor, 1.0);
    EQ_I(c.m.grad, 1);
    EQ_F(c.m.tau, 1.0);
    EQ_I(c.m.pretrain_iter, 4);
    EQ_I(c.m.weight_norm, 1);
    EQ_F(c.r.weight_decay, 0.1);       /* absent: our own default stays */
    EQ_F(c.m.emb_init_std, 0.02);
}

/* Keys computed from several reference keys, inert keys, and our own sections inside the object. */
static void test_derived(void) {
    Cfgs c;
    defaults(&c);
    const char *a =
        "{\"backbone_type\": \"implicit\", \"backbone_config\": {\"backbone_type\": \"implicit\", \"d_model\": 64,"
        " \"n_layer\": 1, \"d_inner\": 0, \"do_weight_norm\": true, \"ema_alpha\": 0.1, \"pretrain_steps\": 5,"
        " \"pretrain_iter\": 3, \"block_cfg\": {\"d_state\": 8, \"headdim\": 16, \"d_ssm\": 128}},"
        " \"deq_params\": {\"training\": {\"hook_ift\": true}, \"norm\": {\"norm_type\": \"none\", \"norm_clip\": true,"
        " \"norm_clip_value\": 2.5, \"norm_clip_val\": 9.0}, \"regularization\": {\"jac_loss_weight\": 1.0, \"jac_loss_freq\": 0.0}},"
        " \"model\": {\"seq_solver\": \"anderson\", \"tau\": 0.5}, \"task\": {\"group\": \"S3\"}, \"train\": {\"lr\": 0.01}}";
    TH_CHECK(load_text(&c, a, "a.json") == IM_OK, "derived keys: %s", err_msg());
    EQ_I(c.m.ift, 1);                   /* hook_ift = ift through a hook */
    EQ_I(c.m.weight_norm, 0);           /* norm_type none */
    EQ_I(c.m.rescale_out_proj, 1);      /* implicit without weight norm: REF's rescale fires */
    EQ_F(c.m.norm_clip_value, 2.5);
    EQ_F(c.m.ema_alpha, 0.1);
    EQ_I(c.m.pretrain_steps, 5);
    EQ_I(c.m.pretrain_iter, 3);
    EQ_S(c.m.seq_solver, "anderson");   /* our sections apply after the reference keys */
    EQ_F(c.m.tau, 0.5);
    EQ_S(c.t.group, "S3");
    EQ_F(c.r.lr, 0.01);

    /* torchdeq's broyden is a solver here too */
    defaults(&c);
    const char *br = "{\"deq_params\": {\"solver\": {\"f_solver\": \"broyden\", \"b_solver\": \"broyden\"}}}";
    TH_CHECK(load_text(&c, br, "br.json") == IM_OK, "broyden solvers: %s", err_msg());
    EQ_S(c.m.f_solver, "broyden");
    EQ_S(c.m.b_solver, "broyden");

    defaults(&c);
    const char *b = "{\"backbone_config\": {\"do_weight_norm\": false, \"initializer_cfg\": {\"rescale_prenorm_residual\": false}},"
                    " \"deq_params\": {\"norm\": {\"norm_clip\": true, \"norm_clip_val\": 5.0}}, \"pad_vocab\": true,"
                    " \"pad_vocab_size_multiple\": 64, \"n_tokens\": 100}";
    TH_CHECK(load_text(&c, b, "b.json") == IM_OK, "derived keys 2: %s", err_msg());
    EQ_I(c.m.weight_norm, 0);
    EQ_I(c.m.rescale_out_proj, 0);      /* rescale_prenorm_residual false */
    EQ_F(c.m.norm_clip_value, 1.0);     /* torchdeq's default: the misspelled key is ignored */
    EQ_I(c.m.pad_vocab_multiple, 64);
    EQ_I(c.m.vocab_size, 100);
    EQ_I(cfg_vocab_padded(&c.m), 128);
}

/* A reference object with one member inserted into one of its sections. */
enum { AT_TOP, AT_BB, AT_BLOCK, AT_DEQ, AT_SOLVER, AT_TRAIN, AT_NORM, AT_REG, N_AT };
#define TEMPLATE                                                                                                 \
    "{%s\"backbone_config\": {%s\"d_model\": 64, \"n_layer\": 2, \"d_inner\": 0, \"block_cfg\": {%s\"d_state\": 16,"  \
    " \"headdim\": 16}}, \"deq_params\": {%s\"solver\": {%s\"f_max_iter\": 4}, \"training\": {%s\"grad\": 1},"       \
    " \"norm\": {%s\"norm_no_scale\": false}, \"regularization\": {%s\"sradius_mode\": false}}}"

static void build(char *buf, size_t cap, int at, const char *ins) {
    const char *s[N_AT];
    for (int i = 0; i < N_AT; i++) s[i] = i == at ? ins : "";
    snprintf(buf, cap, TEMPLATE, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
}

/* rc must be IM_EINVAL with a message naming the file and `path`; the objects must be untouched. */
static void expect_reject(const char *json, const char *path, const char *also) {
    Cfgs c, before;
    defaults(&c);
    memcpy(&before, &c, sizeof c);
    int rc = load_text(&c, json, "case.json");
    const char *msg = err_msg();
    TH_CHECK(rc == IM_EINVAL, "expected a rejection naming %s, got rc %d (%s)", path, rc, msg);
    TH_CHECK(strstr(msg, path) != NULL, "message does not name %s: %s", path, msg);
    TH_CHECK(!strncmp(msg, "case.json", 9), "message does not start with the file: %s", msg);
    if (also) TH_CHECK(strstr(msg, also) != NULL, "message lacks '%s': %s", also, msg);
    TH_CHECK(!memcmp(&c, &before, sizeof c), "a rejected config (%s) changed the objects", path);
}

static void test_rejections(void) {
    static const struct {
        int at;
        const char *ins, *path, *also;
    } cases[] = {
        /* values the port does not implement */
        {AT_BB, "\"pre_norm\": false, ", "'backbone_config.pre_norm'", "post-norm"},
        {AT_BB, "\"rms_norm\": false, ", "'backbone_config.rms_norm'", NULL},
        {AT_NORM, "\"norm_type\": \"spectral_norm\", ", "'deq_params.norm.norm_type'", "spectral_norm is not supported"},
        {AT_TRAIN, "\"core\": \"indexing\", ", "'deq_params.training.core'", "indexing core"},
        {AT_TRAIN, "\"n_states\": 2, ", "'deq_params.training.n_states'", NULL},
        {AT_TRAIN, "\"indexing\": [2], ", "'deq_params.training.indexing'", NULL},
        {AT_TRAIN, "\"sup_gap\": 2, ", "'deq_params.training.sup_gap'", NULL},
        {AT_TRAIN, "\"sup_loc\": [1], ", "'deq_params.training.sup_loc'", NULL},
        {AT_BLOCK, "\"ngroups\": 2, ", "'backbone_config.block_cfg.ngroups'", NULL},
        {AT_TOP, "\"head_bias\": true, ", "'head_bias'", NULL},
        {AT_BLOCK, "\"A_init_range\": [1, 8], ", "'backbone_config.block_cfg.A_init_range'", NULL},
        {AT_BLOCK, "\"dt_min\": 0.01, ", "'backbone_config.block_cfg.dt_min'", NULL},
        {AT_BLOCK, "\"dt_max\": 0.2, ", "'backbone_config.block_cfg.dt_max'", NULL},
        {AT_BLOCK, "\"dt_init_floor\": 0.001, ", "'backbone_config.block_cfg.dt_init_floor'", NULL},
        {AT_BLOCK, "\"dt_limit\": [0, 1], ", "'backbone_config.block_cfg.dt_limit'", NULL},
        {AT_BLOCK, "\"bias\": true, ", "'backbone_config.block_cfg.bias'", NULL},
        {AT_BLOCK, "\"conv_bias\": false, ", "'backbone_config.block_cfg.conv_bias'", NULL},
        {AT_BLOCK, "\"rmsnorm\": false, ", "'backbone_config.block_cfg.rmsnorm'", NULL},
        {AT_BLOCK, "\"norm_before_gate\": true, ", "'backbone_config.block_cfg.norm_before_gate'", NULL},
        {AT_BLOCK, "\"D_has_hdim\": true, ", "'backbone_config.block_cfg.D_has_hdim'", NULL},
        {AT_BLOCK, "\"allow_negative_A_EV\": true, ", "'backbone_config.block_cfg.allow_negative_A_EV'", NULL},
        {AT_BLOCK, "\"d_ssm\": 64, ", "'backbone_config.block_cfg.d_ssm'", NULL},
        {AT_BLOCK, "\"conv_init\": 0.1, ", "'backbone_config.block_cfg.conv_init'", NULL},
        {AT_BLOCK, "\"apply_rotary\": false, ", "'backbone_config.block_cfg.apply_rotary'", NULL},
        {AT_BLOCK, "\"noise_mode\": \"loud\", ", "'backbone_config.block_cfg.noise_mode'", NULL},
        {AT_BB, "\"init_z_mode\": \"input\", ", "'backbone_config.init_z_mode'", NULL},
        {AT_BB, "\"mlp_type\": \"mlp\", ", "'backbone_config.mlp_type'", NULL},
        {AT_BB, "\"block_type\": \"rwkv\", ", "'backbone_config.block_type'", NULL},
        {AT_TOP, "\"backbone_type\": \"hybrid\", ", "'backbone_type'", NULL},
        {AT_TOP, "\"d_embed\": 32, ", "'d_embed'", "embedding projection"},
        {AT_SOLVER, "\"f_solver\": \"simple_fixed_point_iter\", ", "'deq_params.solver.f_solver'", NULL},
        {AT_SOLVER, "\"b_solver\": \"newton\", ", "'deq_params.solver.b_solver'", NULL},
        {AT_SOLVER, "\"f_stop_mode\": \"max\", ", "'deq_params.solver.f_stop_mode'", NULL},
        {AT_REG, "\"jac_loss_weight\": 1.0, \"jac_loss_freq\": 1.5, ", "'deq_params.regularization.jac_loss_weight'", "jac_loss_freq"},
        /* cross-key */
        {AT_TOP, "\"n_tokens\": 240, \"vocab_size\": 250, ", "'n_tokens'", "'vocab_size'"},
        {AT_TOP, "\"pad_vocab\": true, \"pad_vocab_size_multiple\": 0, ", "'pad_vocab_size_multiple'", NULL},
        {AT_NORM, "\"norm_clip\": true, \"norm_clip_value\": 0, ", "'deq_params.norm.norm_clip_value'", NULL},
        /* unknown keys at every level */
        {AT_TOP, "\"foo\": 1, ", "'foo'", "unknown"},
        {AT_BB, "\"foo\": 1, ", "'backbone_config.foo'", "unknown"},
        {AT_BLOCK, "\"foo\": 1, ", "'backbone_config.block_cfg.foo'", "unknown"},
        {AT_BLOCK, "\"dropout\": 0.1, ", "'backbone_config.block_cfg.dropout'", "unknown"},
        {AT_BB, "\"initializer_cfg\": {\"foo\": 1}, ", "'backbone_config.initializer_cfg.foo'", "unknown"},
        {AT_DEQ, "\"foo\": {}, ", "'deq_params.foo'", "unknown"},
        {AT_SOLVER, "\"foo\": 1, ", "'deq_params.solver.foo'", "unknown"},
        {AT_TRAIN, "\"foo\": 1, ", "'deq_params.training.foo'", "unknown"},
        {AT_NORM, "\"foo\": 1, ", "'deq_params.norm.foo'", "unknown"},
        {AT_REG, "\"foo\": 1, ", "'deq_params.regularization.foo'", "unknown"},
        /* ill-typed values */
        {AT_BLOCK, "\"expand\": \"4\", ", "'backbone_config.block_cfg.expand'", "expected an integer"},
        {AT_SOLVER, "\"f_tol\": \"small\", ", "'deq_params.solver.f_tol'", "expected a number"},
        {AT_TRAIN, "\"ift\": \"yes\", ", "'deq_params.training.ift'", "expected true or false"},
        {AT_TRAIN, "\"tau\": true, ", "'deq_params.training.tau'", "expected a number"},
        {AT_TRAIN, "\"indexing\": 0, ", "'deq_params.training.indexing'", "expected a list"},
        {AT_TOP, "\"vocab_size\": 2.5, ", "'vocab_size'", "expected an integer"},
        {AT_TOP, "\"dropout\": null, ", "'dropout'", "null"},
        {AT_BB, "\"dropout\": true, ", "'backbone_config.dropout'", "expected a number"},
        {AT_BB, "\"pretrain_steps\": 3000000000, ", "'backbone_config.pretrain_steps'", "expected an integer"},
        {AT_NORM, "\"norm_clip\": 2, ", "'deq_params.norm.norm_clip'", NULL},
        {AT_BB, "\"initializer_cfg\": [], ", "'backbone_config.initializer_cfg'", "expected an object"},
    };
    char buf[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        build(buf, sizeof buf, cases[i].at, cases[i].ins);
        expect_reject(buf, cases[i].path, cases[i].also);
    }
    /* whole-object cases */
    expect_reject("{\"backbone_config\": 5}", "'backbone_config'", "expected an object");
    expect_reject("{\"deq_params\": {\"solver\": []}}", "'deq_params.solver'", "expected an object");
    expect_reject("{\"backbone_config\": {\"block_cfg\": [1]}}", "'backbone_config.block_cfg'", NULL);
    expect_reject("{\"backbone_type\": \"implicit\", \"backbone_config\": {\"backbone_type\": \"explicit\"}}",
                  "'backbone_config.backbone_type'", "'backbone_type'");
    expect_reject("{\"deq_params\": {}, \"train\": {\"foo\": 1}}", "'train.foo'", NULL);
    expect_reject("{\"deq_params\": {}, \"task\": {\"group\": [1]}}", "'task.group'", NULL);
    expect_reject("{\"deq_params\": {}, \"task\": 3}", "'task'", "unknown");

    /* a table set without the model table cannot take the model keys */
    TaskCfg t;
    task_cfg_defaults(&t);
    const KeyTab *tabs[] = {&task_keytab};
    void *objs[] = {&t};
    const char *j = "{\"deq_params\": {}}";
    TH_CHECK(keyjson_apply(tabs, objs, 1, j, strlen(j), "t.json") == IM_EINVAL && strstr(err_msg(), "t.json"),
             "model keys without a model table: %s", err_msg());
}

/* Values the reference ignores, or that equal the only implemented value, are accepted. */
static void test_accepted(void) {
    static const struct {
        int at;
        const char *ins;
    } cases[] = {
        {AT_TOP, ""},
        {AT_BLOCK, "\"state_noise_db\": 0, \"latent_noise_db\": -1, \"noise_mode\": \"multiplicative\", "},
        {AT_BLOCK, "\"dt_limit\": [0.0, 1e308], \"chunk_size\": 64, \"conv_init\": null, \"d_ssm\": 128, \"ngroups\": 1, "},
        {AT_BLOCK, "\"A_init_range\": [1.0, 16.0], \"dt_min\": 1e-3, \"dt_init_floor\": 1e-4, \"use_mem_eff_path\": false, "},
        {AT_BLOCK, "\"n_head\": 8, \"apply_rotary\": true, \"bias\": false, \"max_seq_len\": 128, \"rope_theta\": 10000, "},
        {AT_TOP, "\"emb_init_std\": 0.5, \"d_embed\": 64, \"tokenizer\": null, \"data_info\": {\"a\": [1]}, \"word_level\": false, "},
        {AT_TRAIN, "\"gamma\": 0.1, \"sup_gap\": 0, \"sup_loc\": [], \"indexing\": [], \"core\": \"sliced\", \"n_states\": 1, "},
        {AT_REG, "\"jac_loss_weight\": 1.0, \"jac_loss_freq\": 0.0, \"jac_incremental\": 3, "},
        {AT_NORM, "\"norm_clip_val\": 9.0, \"sn_n_power_iters\": 5, \"norm_type\": \"weight_norm\", "},
        {AT_BB, "\"tie_embeddings\": true, \"head_bias\": 0, \"residual_in_fp32\": false, \"init_gain\": 3, \"init_z_mode\": null, "},
        {AT_BB, "\"initializer_cfg\": null, \"ema_alpha\": null, \"mlp_type\": \"gated_mlp\", \"block_type\": \"mamba2\", "},
    };
    char buf[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Cfgs c;
        defaults(&c);
        build(buf, sizeof buf, cases[i].at, cases[i].ins);
        int rc = load_text(&c, buf, "ok.json");
        TH_CHECK(rc == IM_OK, "accepted case %zu: %s", i, err_msg());
        EQ_I(c.m.d_model, 64);
        EQ_I(c.m.f_max_iter, 4);
        EQ_F(c.m.emb_init_std, 0.02);
        EQ_F(c.m.norm_clip_value, 0.0);
        c.m.vocab_size = 10;   /* `implicit train` takes it from the task */
        TH_CHECK(cfg_validate(&c.m) == IM_OK, "accepted case %zu validates: %s", i, err_msg());
    }
}

/* Jacobian regularisation maps onto jac_weight / jac_freq; a zero frequency means off. */
static void test_jac(void) {
    char buf[2048];
    Cfgs c;
    defaults(&c);
    build(buf, sizeof buf, AT_REG, "\"jac_loss_weight\": 0.5, \"jac_loss_freq\": 0.25, ");
    TH_CHECK(load_text(&c, buf, "jac.json") == IM_OK, "jac accepted: %s", err_msg());
    EQ_F(c.m.jac_weight, 0.5);
    EQ_F(c.m.jac_freq, 0.25);
    defaults(&c);
    build(buf, sizeof buf, AT_REG, "\"jac_loss_weight\": 0.5, \"jac_loss_freq\": 0.0, ");
    TH_CHECK(load_text(&c, buf, "jac0.json") == IM_OK, "jac freq 0 accepted: %s", err_msg());
    EQ_F(c.m.jac_weight, 0.0);
}

/* Noise keys (spec 7) map onto ours; absent means off (not the reference's 20 dB default). */
static void test_noise(void) {
    char buf[2048];
    Cfgs c;
    defaults(&c);
    build(buf, sizeof buf, AT_BLOCK, "\"state_noise_db\": 20, \"latent_noise_db\": 10.5, \"noise_mode\": \"additive\", ");
    TH_CHECK(load_text(&c, buf, "noise.json") == IM_OK, "noise config: %s", err_msg());
    EQ_F(c.m.state_noise_db, 20.0);
    EQ_F(c.m.latent_noise_db, 10.5);
    TH_CHECK(!strcmp(c.m.noise_mode, "additive"), "noise_mode %s", c.m.noise_mode);
    defaults(&c);
    build(buf, sizeof buf, AT_TOP, "");
    TH_CHECK(load_text(&c, buf, "quiet.json") == IM_OK, "%s", err_msg());
    EQ_F(c.m.state_noise_db, 0.0);
    EQ_F(c.m.latent_noise_db, 0.0);
}

/* Our own flat / sectioned format is untouched by the adapter. */
static void test_flat_configs(void) {
    Cfgs c, before;
    defaults(&c);
    TH_CHECK(load_text(&c, "{\"model\": \"llama\", \"d_model\": 32, \"lr\": 0.01, \"group\": \"S3\", \"n_head\": 2}", "f.json") == IM_OK,
             "flat: %s", err_msg());
    EQ_S(c.m.model, "llama");
    EQ_I(c.m.d_model, 32);
    EQ_F(c.r.lr, 0.01);
    EQ_S(c.t.group, "S3");
    EQ_F(c.m.dropout, 0.0);   /* no reference defaults for our format */
    EQ_I(c.m.d_state, 16);
    defaults(&c);
    TH_CHECK(load_text(&c, "{\"model\": {\"n_layer\": 3}, \"task\": {\"p\": 0.5}, \"train\": {\"steps\": 7}}", "s.json") == IM_OK,
             "sectioned: %s", err_msg());
    EQ_I(c.m.n_layer, 3);
    EQ_F(c.t.p, 0.5);
    EQ_I(c.r.steps, 7);
    defaults(&c);
    TH_CHECK(load_text(&c, "{\"d_model\": 32, \"foo\": 1}", "u.json") == IM_EINVAL && strstr(err_msg(), "'foo'") &&
                 strstr(err_msg(), "u.json"),
             "flat unknown key: %s", err_msg());
    TH_CHECK(load_text(&c, "{\"d_model\": [1]}", "u.json") == IM_EINVAL && strstr(err_msg(), "'d_model'"), "flat ill-typed: %s",
             err_msg());

    /* refcfg_apply itself leaves a flat object alone */
    Json *root;
    const char *flat = "{\"d_model\": 8}";
    TH_CHECK(json_parse(&root, flat, strlen(flat)) == IM_OK, "parse");
    defaults(&c);
    memcpy(&before, &c, sizeof c);
    const KeyTab *tabs[] = {&model_keytab, &task_keytab, &train_keytab};
    void *objs[] = {&c.m, &c.t, &c.r};
    int applied = -1;
    TH_CHECK(refcfg_apply(tabs, objs, 3, root, "f.json", &applied) == IM_OK && applied == 0, "flat root: applied %d", applied);
    TH_CHECK(!memcmp(&c, &before, sizeof c), "flat root left the objects untouched");
    TH_CHECK(refcfg_detect(root) == 0, "flat root is not reference-style");
    json_free(root);

    /* checkpoint metadata (cfg_to_json -> cfg_from_json) still round-trips */
    ModelCfg m, m2;
    cfg_defaults(&m);
    snprintf(m.model, sizeof m.model, "implicit_llama");
    m.tau = 0.25;
    m.f_max_iter = 9;
    char js[8192];
    cfg_to_json(&m, js, sizeof js);
    cfg_defaults(&m2);
    TH_CHECK(cfg_from_json(&m2, js) == IM_OK, "metadata round trip: %s", err_msg());
    TH_CHECK(!memcmp(&m, &m2, sizeof m), "metadata round trip is exact");
}

/* Every key of ours named by the mapping table exists in the model or train table. */
static void test_targets(void) {
    const char *keys[256];
    int n = refcfg_targets(keys, 256);
    TH_CHECK(n > 30 && n <= 256, "mapping table names %d targets", n);
    for (int i = 0; i < n && i < 256; i++)
        TH_CHECK(keytab_find(&model_keytab, keys[i]) || keytab_find(&train_keytab, keys[i]),
                 "mapping target '%s' is no model or train key", keys[i]);
}

int main(void) {
    th_name = "test_refcfg";
    test_state_tracking();
    test_mamba2_130m();
    test_llama_and_explicit();
    test_reference_defaults();
    test_derived();
    test_rejections();
    test_accepted();
    test_noise();
    test_jac();
    test_flat_configs();
    test_targets();
    return th_done();
}
