/* refcfg.c: the reference-config adapter (see refcfg.h; spec implicit-lm §11, §1.9, §12-B11).
 *
 * Three passes, so that a rejected config leaves the caller's objects untouched:
 *   1. walk   the JSON tree against SECS (the nesting) and KEYS (the leaves): every member must be
 *             a known section or key, of the right type, with an implemented value. Values are
 *             only recorded (one slot per table row).
 *   2. derive the (our key, text) pairs: RC_COPY rows copy their value (or the REF default),
 *             RC_DERIVED rows are combined by derive() (model name, vocabulary padding, weight
 *             norm, clip, IFT, MLP kind, out_proj rescale) with the cross-key checks.
 *   3. apply  the pairs through keytab_set, table by table, then the caller's own sections.
 */
#include "refcfg.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

/* ---- the mapping table ------------------------------------------------------------------- */
/* Each row of KEYS is one reference key: where it lives, its JSON type, how it reaches our keys,
 * the reference default used when it is absent, and which values we can honour. Paths are built
 * from SECS, so a message always shows the full dotted path the user wrote. */

/* Where a key lives in the reference object. */
typedef enum {
    SEC_TOP, SEC_BACKBONE, SEC_BLOCK, SEC_INIT, SEC_DEQ, SEC_SOLVER, SEC_TRAINING, SEC_NORM, SEC_REG, N_SEC
} RefSec;

static const struct {
    RefSec parent;
    const char *name;  /* member name in the parent */
    const char *path;  /* full path, for messages */
    int null_ok;       /* null = absent (Python None) */
} SECS[N_SEC] = {
    [SEC_TOP] = {SEC_TOP, "", "", 0},
    [SEC_BACKBONE] = {SEC_TOP, "backbone_config", "backbone_config", 0},
    [SEC_BLOCK] = {SEC_BACKBONE, "block_cfg", "backbone_config.block_cfg", 1},
    [SEC_INIT] = {SEC_BACKBONE, "initializer_cfg", "backbone_config.initializer_cfg", 1},
    [SEC_DEQ] = {SEC_TOP, "deq_params", "deq_params", 0},
    [SEC_SOLVER] = {SEC_DEQ, "solver", "deq_params.solver", 0},
    [SEC_TRAINING] = {SEC_DEQ, "training", "deq_params.training", 0},
    [SEC_NORM] = {SEC_DEQ, "norm", "deq_params.norm", 0},
    [SEC_REG] = {SEC_DEQ, "regularization", "deq_params.regularization", 0},
};

typedef enum { RT_INT, RT_NUM, RT_BOOL, RT_STR, RT_LIST, RT_ANY } RefType;

/* Conversion to our keys. */
typedef enum {
    RC_INERT,   /* accepted (after its value check) and ignored: the reference ignores it too, or it
                   can only hold the one value we implement */
    RC_COPY,    /* value as text -> ours (bools as 0/1); absent -> the REF default `def`, if any */
    RC_MIN1,    /* as RC_COPY, values < 1 become 1 (pretrain_iter: range(n-1) of REF runs one f call) */
    RC_DERIVED, /* read by derive(), together with other keys; `ours` documents the target */
} RefConv;

/* Accepted values (checked in pass 1). */
typedef enum {
    CK_ANY,
    CK_EQ,     /* only `arg` ("true", "1", "0.001", "sliced") */
    CK_ONEOF,  /* a string in the '|'-separated list `arg` */
    CK_LE0,    /* a number <= 0 (off) */
    CK_EMPTY,  /* an empty list */
    CK_NUMS,   /* a list of numbers equal to the ','-separated `arg` ("inf" matches >= 1e300) */
    CK_ABSENT, /* only null / absent */
} RefCheck;

enum { RF_NULL = 1,      /* null = absent (Python None is a valid value) */
       RF_ALSO_BB = 2,   /* a top-level key also accepted inside backbone_config */
       RF_OPTIONAL = 4 };/* the target may be missing from the caller's tables (then ignored) */

typedef struct {
    RefSec sec;
    const char *name;
    RefType type;
    int flags;
    RefConv conv;
    const char *ours;  /* our key (for RC_DERIVED: the key derive() writes), NULL = none */
    const char *def;   /* REF default when absent, as JSON text ("true", "40", "abs"); NULL = none */
    RefCheck check;
    const char *arg;   /* for the check */
    const char *why;   /* appended to a rejection */
} RefKey;

#define NOT_IMPL(what) "not implemented: " what
/* clang-format off */
static const RefKey KEYS[] = {
    /* top level (ImplicitMambaConfig / ImplicitLlamaConfig; HF bookkeeping is inert) */
    {SEC_TOP, "backbone_type", RT_STR, RF_ALSO_BB, RC_DERIVED, "model", "implicit", CK_ONEOF, "implicit|explicit", ""},
    {SEC_TOP, "n_tokens", RT_INT, RF_NULL | RF_ALSO_BB, RC_DERIVED, "vocab_size", NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "vocab_size", RT_INT, RF_NULL | RF_ALSO_BB, RC_DERIVED, "vocab_size", NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "pad_vocab", RT_BOOL, RF_ALSO_BB, RC_DERIVED, "pad_vocab_multiple", "false", CK_ANY, NULL, NULL},
    {SEC_TOP, "pad_vocab_size_multiple", RT_INT, RF_ALSO_BB, RC_DERIVED, "pad_vocab_multiple", "8", CK_ANY, NULL, NULL},
    {SEC_TOP, "tie_embeddings", RT_BOOL, RF_ALSO_BB, RC_COPY, "tie_embeddings", "true", CK_ANY, NULL, NULL},
    {SEC_TOP, "head_bias", RT_BOOL, RF_ALSO_BB, RC_INERT, NULL, NULL, CK_EQ, "false", NOT_IMPL("a head bias")},
    {SEC_TOP, "d_embed", RT_INT, RF_NULL, RC_DERIVED, "d_model", NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "dropout", RT_NUM, 0, RC_COPY, "dropout", "0.05", CK_ANY, NULL, NULL},
    {SEC_TOP, "weight_decay", RT_NUM, RF_OPTIONAL, RC_COPY, "weight_decay", NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "emb_init_std", RT_NUM, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* REF inits N(0, 0.02) */
    {SEC_TOP, "average_eval", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "architectures", RT_LIST, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "data_info", RT_ANY, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "dataset_name", RT_ANY, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "keep_sequence_dim", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "load_from_pretrained_shell", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "masked_training", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "save_output_ids", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "word_level", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "model_type", RT_STR, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "tokenizer", RT_ANY, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "torch_dtype", RT_STR, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_TOP, "transformers_version", RT_STR, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    /* backbone_config (ImplicitModel / ExplicitModel / BaseModel arguments) */
    {SEC_BACKBONE, "d_model", RT_INT, 0, RC_COPY, "d_model", NULL, CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "n_layer", RT_INT, 0, RC_COPY, "n_layer", NULL, CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "d_inner", RT_INT, 0, RC_COPY, "d_inner", NULL, CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "block_type", RT_STR, 0, RC_DERIVED, "model", "mamba2", CK_ONEOF, "mamba2|transformer", ""},
    {SEC_BACKBONE, "mlp_type", RT_STR, 0, RC_DERIVED, "mlp_type", "gated_mlp", CK_ONEOF, "gated_mlp|llama_mlp", "; the GELU mlp is not implemented"},
    {SEC_BACKBONE, "pre_norm", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "true", NOT_IMPL("post-norm blocks")},
    {SEC_BACKBONE, "rms_norm", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "true", NOT_IMPL("LayerNorm")},
    {SEC_BACKBONE, "dropout", RT_NUM, 0, RC_COPY, "backbone_dropout", "0.0", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "norm_epsilon", RT_NUM, 0, RC_COPY, "norm_eps", "1e-5", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "residual_in_fp32", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* all fp32 here */
    {SEC_BACKBONE, "pretrain_steps", RT_INT, 0, RC_COPY, "pretrain_steps", "0", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "pretrain_iter", RT_INT, 0, RC_MIN1, "pretrain_iter", "4", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "init_gain", RT_NUM, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* unused by REF (§1.8) */
    {SEC_BACKBONE, "ema_alpha", RT_NUM, RF_NULL, RC_COPY, "ema_alpha", "0", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "do_weight_norm", RT_BOOL, 0, RC_DERIVED, "weight_norm", "true", CK_ANY, NULL, NULL},
    {SEC_BACKBONE, "init_z_mode", RT_ANY, RF_NULL, RC_INERT, NULL, NULL, CK_ABSENT, NULL, NOT_IMPL("init_z_mode (broken in the reference, spec 2.3); use null")},
    /* backbone_config.initializer_cfg (REF _init_weights arguments) */
    {SEC_INIT, "rescale_prenorm_residual", RT_BOOL, 0, RC_DERIVED, "rescale_out_proj", "true", CK_ANY, NULL, NULL},
    /* backbone_config.block_cfg: Mamba2 mixer (REF passes the same dict to either mixer) */
    {SEC_BLOCK, "d_state", RT_INT, 0, RC_COPY, "d_state", "128", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "d_conv", RT_INT, 0, RC_COPY, "d_conv", "4", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "expand", RT_INT, 0, RC_COPY, "expand", "2", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "headdim", RT_INT, 0, RC_COPY, "headdim", "64", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "ngroups", RT_INT, 0, RC_INERT, NULL, NULL, CK_EQ, "1", NOT_IMPL("ngroups > 1")},
    {SEC_BLOCK, "d_ssm", RT_INT, RF_NULL, RC_DERIVED, "expand", NULL, CK_ANY, NULL, NULL},
    {SEC_BLOCK, "conv_init", RT_ANY, RF_NULL, RC_INERT, NULL, NULL, CK_ABSENT, NULL, NOT_IMPL("a custom conv init")},
    {SEC_BLOCK, "A_init_range", RT_LIST, 0, RC_INERT, NULL, NULL, CK_NUMS, "1,16", NOT_IMPL("another A init range")},
    {SEC_BLOCK, "allow_negative_A_EV", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "false", NOT_IMPL("negative A eigenvalues")},
    {SEC_BLOCK, "D_has_hdim", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "false", NOT_IMPL("a per-channel D")},
    {SEC_BLOCK, "rmsnorm", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "true", NOT_IMPL("the ungated-norm mixer")},
    {SEC_BLOCK, "norm_before_gate", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "false", NOT_IMPL("norm before gate")},
    {SEC_BLOCK, "dt_min", RT_NUM, 0, RC_INERT, NULL, NULL, CK_EQ, "0.001", NOT_IMPL("another dt init")},
    {SEC_BLOCK, "dt_max", RT_NUM, 0, RC_INERT, NULL, NULL, CK_EQ, "0.1", NOT_IMPL("another dt init")},
    {SEC_BLOCK, "dt_init_floor", RT_NUM, 0, RC_INERT, NULL, NULL, CK_EQ, "1e-4", NOT_IMPL("another dt init")},
    {SEC_BLOCK, "dt_limit", RT_LIST, 0, RC_INERT, NULL, NULL, CK_NUMS, "0,inf", NOT_IMPL("a dt limit")},
    {SEC_BLOCK, "bias", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "false", NOT_IMPL("mixer biases")},
    {SEC_BLOCK, "conv_bias", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "true", NOT_IMPL("a conv without bias")},
    {SEC_BLOCK, "chunk_size", RT_INT, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* a kernel tiling */
    {SEC_BLOCK, "use_mem_eff_path", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    {SEC_BLOCK, "use_materializing_scan", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},
    /* noise (spec 7): absent means off here, not the reference's 20 dB default (spec 12-B3) */
    {SEC_BLOCK, "state_noise_db", RT_NUM, RF_NULL, RC_COPY, "state_noise_db", NULL, CK_ANY, NULL, NULL},
    {SEC_BLOCK, "latent_noise_db", RT_NUM, RF_NULL, RC_COPY, "latent_noise_db", NULL, CK_ANY, NULL, NULL},
    {SEC_BLOCK, "noise_mode", RT_STR, 0, RC_COPY, "noise_mode", NULL, CK_ONEOF, "additive|multiplicative", ""},
    /* block_cfg: attention mixer */
    {SEC_BLOCK, "n_head", RT_INT, 0, RC_COPY, "n_head", NULL, CK_ANY, NULL, NULL},
    {SEC_BLOCK, "max_seq_len", RT_INT, 0, RC_COPY, "max_seq_len", "2048", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "rope_theta", RT_NUM, 0, RC_COPY, "rope_theta", "500000.0", CK_ANY, NULL, NULL},
    {SEC_BLOCK, "apply_rotary", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_EQ, "true", NOT_IMPL("attention without RoPE")},
    /* deq_params.solver (defaults: torchdeq's) */
    {SEC_SOLVER, "f_solver", RT_STR, 0, RC_COPY, "f_solver", "fixed_point_iter", CK_ONEOF, "fixed_point_iter|anderson|broyden", "; simple_fixed_point_iter is not implemented"},
    {SEC_SOLVER, "f_max_iter", RT_INT, 0, RC_COPY, "f_max_iter", "40", CK_ANY, NULL, NULL},
    {SEC_SOLVER, "f_tol", RT_NUM, 0, RC_COPY, "f_tol", "1e-3", CK_ANY, NULL, NULL},
    {SEC_SOLVER, "f_stop_mode", RT_STR, 0, RC_COPY, "f_stop_mode", "abs", CK_ONEOF, "rel|abs", ""},
    {SEC_SOLVER, "b_solver", RT_STR, 0, RC_COPY, "b_solver", "fixed_point_iter", CK_ONEOF, "fixed_point_iter|anderson|broyden", "; simple_fixed_point_iter is not implemented"},
    {SEC_SOLVER, "b_max_iter", RT_INT, 0, RC_COPY, "b_max_iter", "40", CK_ANY, NULL, NULL},
    {SEC_SOLVER, "b_tol", RT_NUM, 0, RC_COPY, "b_tol", "1e-6", CK_ANY, NULL, NULL},
    {SEC_SOLVER, "b_stop_mode", RT_STR, 0, RC_COPY, "b_stop_mode", "abs", CK_ONEOF, "rel|abs", ""},
    {SEC_SOLVER, "eval_factor", RT_NUM, 0, RC_COPY, "eval_factor", "1.0", CK_ANY, NULL, NULL},
    {SEC_SOLVER, "eval_f_max_iter", RT_INT, 0, RC_COPY, "eval_f_max_iter", "0", CK_ANY, NULL, NULL},
    /* deq_params.training */
    {SEC_TRAINING, "core", RT_STR, 0, RC_INERT, NULL, NULL, CK_EQ, "sliced", NOT_IMPL("the indexing core")},
    {SEC_TRAINING, "grad", RT_INT, 0, RC_COPY, "grad", "1", CK_ANY, NULL, NULL},
    {SEC_TRAINING, "tau", RT_NUM, 0, RC_COPY, "tau", "1.0", CK_ANY, NULL, NULL},
    {SEC_TRAINING, "ift", RT_BOOL, 0, RC_DERIVED, "ift", "false", CK_ANY, NULL, NULL},
    {SEC_TRAINING, "hook_ift", RT_BOOL, 0, RC_DERIVED, "ift", "false", CK_ANY, NULL, NULL},
    {SEC_TRAINING, "n_states", RT_INT, 0, RC_INERT, NULL, NULL, CK_EQ, "1", NOT_IMPL("segmented solves (n_states > 1)")},
    {SEC_TRAINING, "indexing", RT_LIST, 0, RC_INERT, NULL, NULL, CK_EMPTY, NULL, NOT_IMPL("segmented solves (indexing)")},
    {SEC_TRAINING, "gamma", RT_NUM, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* unused by REF */
    {SEC_TRAINING, "sup_gap", RT_INT, 0, RC_INERT, NULL, NULL, CK_LE0, NULL, NOT_IMPL("multi-output phantom supervision; use -1")},
    {SEC_TRAINING, "sup_loc", RT_LIST, 0, RC_INERT, NULL, NULL, CK_EMPTY, NULL, NOT_IMPL("multi-output phantom supervision")},
    /* deq_params.norm */
    {SEC_NORM, "norm_type", RT_STR, 0, RC_DERIVED, "weight_norm", "weight_norm", CK_ONEOF, "weight_norm|none", "; spectral_norm is not supported"},
    {SEC_NORM, "norm_no_scale", RT_BOOL, 0, RC_COPY, "norm_no_scale", "false", CK_ANY, NULL, NULL},
    {SEC_NORM, "norm_target_norm", RT_NUM, 0, RC_COPY, "norm_target_norm", "1.0", CK_ANY, NULL, NULL},
    {SEC_NORM, "norm_clip", RT_BOOL, 0, RC_DERIVED, "norm_clip_value", "false", CK_ANY, NULL, NULL},
    {SEC_NORM, "norm_clip_value", RT_NUM, 0, RC_DERIVED, "norm_clip_value", "1.0", CK_ANY, NULL, NULL},
    {SEC_NORM, "norm_clip_val", RT_NUM, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* misspelled in REF: ignored (12-B11) */
    {SEC_NORM, "sn_n_power_iters", RT_INT, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* spectral norm only */
    /* deq_params.regularization */
    {SEC_REG, "jac_loss_weight", RT_NUM, 0, RC_DERIVED, "jac_weight", "0", CK_ANY, NULL, NULL},
    {SEC_REG, "jac_loss_freq", RT_NUM, 0, RC_DERIVED, "jac_freq", "0", CK_ANY, NULL, NULL},
    {SEC_REG, "jac_incremental", RT_ANY, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL}, /* unused by REF */
    {SEC_REG, "sradius_mode", RT_BOOL, 0, RC_INERT, NULL, NULL, CK_ANY, NULL, NULL},  /* forced off by REF */
};
/* clang-format on */
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))
#define MAX_KEYS 128
#define MAX_EMIT 64
#define MAX_SECTIONS 8
_Static_assert(sizeof KEYS / sizeof KEYS[0] <= MAX_KEYS, "raise MAX_KEYS");

/* ---- state of one application ------------------------------------------------------------- */

typedef struct {
    const char *key;         /* ours */
    char text[KEY_STR_LEN];  /* its value */
    int row;                 /* the reference key it came from (messages) */
} Emit;

typedef struct {
    const KeyTab *const *tabs;
    void *const *objs;
    int n;
    const char *where;
    const Json *val[MAX_KEYS]; /* per KEYS row: the value, NULL = absent */
    RefSec at[MAX_KEYS];       /* where it was found (top-level keys may sit in backbone_config) */
    Emit emit[MAX_EMIT];
    int n_emit;
    const Json *own[MAX_SECTIONS]; /* the caller's sections ("model", "task", "train") */
    int own_tab[MAX_SECTIONS];
    int n_own;
} Ctx;

static const char *kpath(char *buf, size_t cap, RefSec sec, const char *name) {
    snprintf(buf, cap, "%s%s%s", SECS[sec].path, sec == SEC_TOP ? "" : ".", name);
    return buf;
}

static const char *row_path(const Ctx *x, int r, char *buf, size_t cap) {
    return kpath(buf, cap, x->val[r] ? x->at[r] : KEYS[r].sec, KEYS[r].name);
}

/* Scalar as the text keytab_set takes (bools 0/1); -1 for null, arrays and objects. */
static int scalar_text(const Json *v, char *buf, size_t cap) {
    if (v->type == JSON_STRING) snprintf(buf, cap, "%s", v->string);
    else if (v->type == JSON_BOOL) snprintf(buf, cap, "%d", v->boolean);
    else if (v->type == JSON_NUMBER && v->is_int) snprintf(buf, cap, "%lld", (long long)v->integer);
    else if (v->type == JSON_NUMBER) snprintf(buf, cap, "%.17g", v->number);
    else return -1;
    return 0;
}

/* A short rendering of any value for messages. */
static const char *render(const Json *v, char *buf, size_t cap) {
    JsonBuf b;
    json_buf_init(&b, 0);
    json_write(&b, v);
    snprintf(buf, cap, "%.60s%s", b.data && !b.failed ? b.data : "?", b.len > 60 ? "..." : "");
    json_buf_free(&b);
    return buf;
}

static int truthy(const Json *v) { return v->type == JSON_BOOL ? v->boolean : v->integer != 0; }

/* ---- pass 1: walk and check ---------------------------------------------------------------- */

/* NULL when v has the row's type, else the expected type in words. */
static const char *type_error(const RefKey *k, const Json *v) {
    switch (k->type) {
    case RT_INT:
        if (v->type == JSON_NUMBER && v->is_int && v->integer >= INT_MIN && v->integer <= INT_MAX) return NULL;
        return "an integer";
    case RT_NUM: return v->type == JSON_NUMBER ? NULL : "a number";
    case RT_BOOL:  /* REF tests truthiness, so 0 / 1 pass as well */
        if (v->type == JSON_BOOL || (v->type == JSON_NUMBER && v->is_int && (v->integer == 0 || v->integer == 1))) return NULL;
        return "true or false";
    case RT_STR: return v->type == JSON_STRING ? NULL : "a string";
    case RT_LIST: return v->type == JSON_ARRAY ? NULL : "a list";
    case RT_ANY: return NULL;
    }
    return "?";
}

/* 1 if s is one of the '|'-separated words of list. */
static int one_of(const char *list, const char *s) {
    size_t n = strlen(s);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, s, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* 1 if the list v equals the numbers in arg ("1,16"; "inf" matches any value >= 1e300). */
static int nums_equal(const char *arg, const Json *v) {
    size_t i = 0;
    for (const char *p = arg; *p; i++) {
        char *end;
        double want = strtod(p, &end);
        const Json *e = json_at(v, i);
        if (!e || e->type != JSON_NUMBER) return 0;
        if (isinf(want) ? !(e->number >= 1e300) : e->number != want) return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return i == json_len(v);
}

/* The row's value check (the type has been checked already). */
static int value_ok(const RefKey *k, const Json *v) {
    switch (k->check) {
    case CK_ANY: return 1;
    case CK_EQ:
        if (k->type == RT_BOOL) return truthy(v) == !strcmp(k->arg, "true");
        if (k->type == RT_STR) return !strcmp(v->string, k->arg);
        return v->number == strtod(k->arg, NULL);
    case CK_ONEOF: return one_of(k->arg, v->string);
    case CK_LE0: return v->number <= 0;
    case CK_EMPTY: return json_len(v) == 0;
    case CK_NUMS: return nums_equal(k->arg, v);
    case CK_ABSENT: return 0;  /* null never gets here */
    }
    return 0;
}

/* The message for a value that fails its check: path, value as written, and why. */
static int reject(const Ctx *x, const RefKey *k, const char *path, const Json *v) {
    char shown[80];
    render(v, shown, sizeof shown);
    const char *why = k->why ? k->why : "";
    switch (k->check) {
    case CK_EQ:
        return err_set(IM_EINVAL, "%s: reference key '%s' = %s: %s (only %s)", x->where, path, shown, why, k->arg);
    case CK_ONEOF: {
        char list[160];
        size_t at = 0;
        for (const char *c = k->arg; *c && at + 4 < sizeof list; c++)
            at += (size_t)snprintf(list + at, sizeof list - at, *c == '|' ? " | " : "%c", *c);
        return err_set(IM_EINVAL, "%s: reference key '%s' = %s: expected one of %s%s", x->where, path, shown, list, why);
    }
    case CK_NUMS:
        return err_set(IM_EINVAL, "%s: reference key '%s' = %s: %s (only [%s])", x->where, path, shown, why, k->arg);
    default:
        return err_set(IM_EINVAL, "%s: reference key '%s' = %s: %s", x->where, path, shown, why);
    }
}

/* The row of a member of section `sec`; top-level rows flagged RF_ALSO_BB are also found inside
 * backbone_config (an older layout; the released configs keep them at the top). -1 if none. */
static int find_key(RefSec sec, const char *name) {
    for (int r = 0; r < N_KEYS; r++)
        if (!strcmp(KEYS[r].name, name) &&
            (KEYS[r].sec == sec || (sec == SEC_BACKBONE && KEYS[r].sec == SEC_TOP && (KEYS[r].flags & RF_ALSO_BB))))
            return r;
    return -1;
}

/* Record one leaf value after its type and value checks. */
static int take(Ctx *x, int r, RefSec sec, const Json *v, const char *path) {
    const RefKey *k = &KEYS[r];
    if (v->type == JSON_NULL && k->type != RT_ANY && !(k->flags & RF_NULL))
        return err_set(IM_EINVAL, "%s: reference key '%s' is null (expected %s)", x->where, path, type_error(k, v));
    if (v->type == JSON_NULL) return IM_OK;  /* Python None: the default */
    const char *want = type_error(k, v);
    if (want) {
        char shown[80];
        return err_set(IM_EINVAL, "%s: reference key '%s' = %s: expected %s", x->where, path, render(v, shown, sizeof shown), want);
    }
    if (!value_ok(k, v)) return reject(x, k, path, v);
    if (x->val[r]) {
        /* a top-level key given at both levels: fine only if both agree */
        char a[KEY_STR_LEN], b[KEY_STR_LEN], other[128];
        if (scalar_text(x->val[r], a, sizeof a) || scalar_text(v, b, sizeof b) || strcmp(a, b))
            return err_set(IM_EINVAL, "%s: reference key '%s' disagrees with '%s'", x->where, path,
                           kpath(other, sizeof other, x->at[r], k->name));
        return IM_OK;
    }
    x->val[r] = v;
    x->at[r] = sec;
    return IM_OK;
}

/* Visit every member of `obj` (section `sec`): a sub-section recurses, a leaf is checked and
 * recorded, a top-level object named after a caller's table is kept for pass 3, anything else is
 * an unknown key. Nothing is written to the caller's objects here. */
static int walk(Ctx *x, RefSec sec, const Json *obj) {
    for (size_t i = 0; i < json_len(obj); i++) {
        const char *name = json_key_at(obj, i);
        const Json *v = json_at(obj, i);
        char path[160];
        kpath(path, sizeof path, sec, name);
        int child = -1;
        for (int s = 1; s < N_SEC; s++)
            if (SECS[s].parent == sec && !strcmp(SECS[s].name, name)) child = s;
        if (child >= 0) {
            if (v->type == JSON_NULL && SECS[child].null_ok) continue;
            if (v->type != JSON_OBJECT)
                return err_set(IM_EINVAL, "%s: reference key '%s' is a %s (expected an object)", x->where, path,
                               json_type_name(v->type));
            int rc = walk(x, (RefSec)child, v);
            if (rc) return rc;
            continue;
        }
        int r = find_key(sec, name);
        if (r >= 0) {
            int rc = take(x, r, sec, v, path);
            if (rc) return rc;
            continue;
        }
        int own = -1;
        for (int t = 0; sec == SEC_TOP && t < x->n; t++)
            if (!strcmp(name, x->tabs[t]->section)) own = t;
        if (own >= 0 && v->type == JSON_OBJECT && x->n_own < MAX_SECTIONS) {
            x->own[x->n_own] = v;
            x->own_tab[x->n_own++] = own;
            continue;
        }
        return err_set(IM_EINVAL, "%s: unknown reference config key '%s' (spec implicit-lm 11 lists the accepted keys)",
                       x->where, path);
    }
    return IM_OK;
}

/* ---- pass 2: derive our values ------------------------------------------------------------- */

/* The row index of a key derive() needs; a missing row is a bug in this file. */
static int row(RefSec sec, const char *name) {
    for (int r = 0; r < N_KEYS; r++)
        if (KEYS[r].sec == sec && !strcmp(KEYS[r].name, name)) return r;
    CHECK(0, "refcfg: no row %s.%s", SECS[sec].path, name);
}

/* A recorded value, or the row's reference default when the key was absent (or null). */
static int get_bool(const Ctx *x, int r) {
    return x->val[r] ? truthy(x->val[r]) : KEYS[r].def && !strcmp(KEYS[r].def, "true");
}
static double get_num(const Ctx *x, int r) {
    return x->val[r] ? x->val[r]->number : KEYS[r].def ? strtod(KEYS[r].def, NULL) : 0.0;
}
static const char *get_str(const Ctx *x, int r) { return x->val[r] ? x->val[r]->string : KEYS[r].def; }

/* Queue "our key = text" for pass 3; r is the reference row it came from (for messages). */
static void emit(Ctx *x, const char *key, int r, const char *fmt, ...) IM_PRINTF(4, 5);
static void emit(Ctx *x, const char *key, int r, const char *fmt, ...) {
    CHECK(x->n_emit < MAX_EMIT, "refcfg: raise MAX_EMIT");
    Emit *e = &x->emit[x->n_emit++];
    e->key = key;
    e->row = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
}

/* The value an integer key of ours will have: emitted here, else the caller's current one. */
static int effective_int(const Ctx *x, const char *key, int *out) {
    for (int i = x->n_emit - 1; i >= 0; i--)
        if (!strcmp(x->emit[i].key, key)) return *out = atoi(x->emit[i].text), 1;
    for (int t = 0; t < x->n; t++) {
        const KeyInfo *k = keytab_find(x->tabs[t], key);
        if (k && k->type == KEY_INT) return *out = *(const int *)((const char *)x->objs[t] + k->offset), 1;
    }
    return 0;
}

/* RC_COPY / RC_MIN1 rows: the value, or the reference default when absent. */
static void copy_rows(Ctx *x) {
    for (int r = 0; r < N_KEYS; r++) {
        const RefKey *k = &KEYS[r];
        if (k->conv != RC_COPY && k->conv != RC_MIN1) continue;
        char text[KEY_STR_LEN];
        if (x->val[r]) scalar_text(x->val[r], text, sizeof text);
        else if (k->def) snprintf(text, sizeof text, "%s", k->type == RT_BOOL ? (strcmp(k->def, "true") ? "0" : "1") : k->def);
        else continue;
        if (k->conv == RC_MIN1 && atoi(text) < 1) snprintf(text, sizeof text, "1");
        emit(x, k->ours, r, "%s", text);
    }
}

/* A rejection that involves two reference keys: both paths and values are named. */
static int bad_pair(const Ctx *x, int r1, int r2, const char *what) {
    char p1[160], p2[160], v1[80], v2[80];
    return err_set(IM_EINVAL, "%s: reference keys '%s' = %s and '%s' = %s: %s", x->where, row_path(x, r1, p1, sizeof p1),
                   x->val[r1] ? render(x->val[r1], v1, sizeof v1) : KEYS[r1].def, row_path(x, r2, p2, sizeof p2),
                   x->val[r2] ? render(x->val[r2], v2, sizeof v2) : KEYS[r2].def, what);
}

/* Sizes the port fixes: no embedding projection, the SSM over the whole inner width. */
static int check_widths(Ctx *x) {
    int r_de = row(SEC_TOP, "d_embed"), r_ds = row(SEC_BLOCK, "d_ssm"), d_model, expand;
    char p[160];
    if (x->val[r_de] && effective_int(x, "d_model", &d_model) && x->val[r_de]->integer != d_model)
        return err_set(IM_EINVAL, "%s: reference key '%s' = %lld differs from d_model %d: %s", x->where,
                       row_path(x, r_de, p, sizeof p), (long long)x->val[r_de]->integer, d_model,
                       NOT_IMPL("an embedding projection"));
    if (x->val[r_ds] && effective_int(x, "d_model", &d_model) && effective_int(x, "expand", &expand) &&
        x->val[r_ds]->integer != (long long)expand * d_model)
        return err_set(IM_EINVAL, "%s: reference key '%s' = %lld differs from expand * d_model = %d: %s", x->where,
                       row_path(x, r_ds, p, sizeof p), (long long)x->val[r_ds]->integer, expand * d_model,
                       NOT_IMPL("a gated MLP inside the mixer"));
    return IM_OK;
}

/* RC_DERIVED rows: keys of ours that depend on several reference keys. */
static int derive(Ctx *x) {
    int r_bt = row(SEC_TOP, "backbone_type"), r_blk = row(SEC_BACKBONE, "block_type");
    int implicit = strcmp(get_str(x, r_bt), "explicit") != 0, attn = !strcmp(get_str(x, r_blk), "transformer");
    emit(x, "model", r_blk, "%s%s", implicit ? "implicit_" : "", attn ? "llama" : "mamba2");
    /* vocabulary: REF's Mamba2 reads n_tokens, its Llama vocab_size; when both are given they must agree */
    int r_nt = row(SEC_TOP, "n_tokens"), r_vs = row(SEC_TOP, "vocab_size");
    if (x->val[r_nt] && x->val[r_vs] && x->val[r_nt]->integer != x->val[r_vs]->integer)
        return bad_pair(x, r_nt, r_vs, "the vocabulary sizes disagree");
    int r_v = x->val[r_nt] ? r_nt : r_vs;
    if (x->val[r_v]) emit(x, "vocab_size", r_v, "%lld", (long long)x->val[r_v]->integer);
    int r_pad = row(SEC_TOP, "pad_vocab"), r_mult = row(SEC_TOP, "pad_vocab_size_multiple");
    int pad = get_bool(x, r_pad), mult = (int)get_num(x, r_mult);
    if (pad && mult < 1) return bad_pair(x, r_pad, r_mult, "padding needs a multiple >= 1");
    emit(x, "pad_vocab_multiple", r_pad, "%d", pad ? mult : 0);
    int r_mlp = row(SEC_BACKBONE, "mlp_type");
    emit(x, "mlp_type", r_mlp, "%s", strcmp(get_str(x, r_mlp), "llama_mlp") ? "gated" : "swiglu");
    /* weight norm needs both the backbone switch and norm_type weight_norm ("none" = plain weights) */
    int r_dwn = row(SEC_BACKBONE, "do_weight_norm"), r_nty = row(SEC_NORM, "norm_type");
    int wn = get_bool(x, r_dwn) && !strcmp(get_str(x, r_nty), "weight_norm");
    emit(x, "weight_norm", r_nty, "%d", wn);
    /* our clip value 0 means off; REF reads norm_clip_value (torchdeq default 1.0) only when norm_clip */
    int r_clip = row(SEC_NORM, "norm_clip"), r_cv = row(SEC_NORM, "norm_clip_value");
    double cv = get_num(x, r_cv);
    if (get_bool(x, r_clip) && !(cv > 0)) return bad_pair(x, r_clip, r_cv, "the clip value must be > 0");
    emit(x, "norm_clip_value", r_clip, "%.17g", get_bool(x, r_clip) ? cv : 0.0);
    /* hook_ift computes the same adjoint as ift through a gradient hook (spec 5.4) */
    int r_ift = row(SEC_TRAINING, "ift"), r_hook = row(SEC_TRAINING, "hook_ift");
    emit(x, "ift", r_ift, "%d", get_bool(x, r_ift) || get_bool(x, r_hook));
    /* REF computes the Jacobian loss only when weight > 0 and a uniform draw < freq */
    int r_jw = row(SEC_REG, "jac_loss_weight"), r_jf = row(SEC_REG, "jac_loss_freq");
    if (!(get_num(x, r_jf) >= 0 && get_num(x, r_jf) <= 1)) return bad_pair(x, r_jw, r_jf, "jac_loss_freq must be in [0, 1]");
    emit(x, "jac_weight", r_jw, "%.17g", get_num(x, r_jf) > 0 ? get_num(x, r_jw) : 0.0);
    emit(x, "jac_freq", r_jf, "%.17g", get_num(x, r_jf));
    /* the GPT-2 out_proj rescale matches parameter names, which weight norm renames in implicit
     * models (spec 12-B1): it happens iff requested and not (implicit and weight-normalised) */
    int r_rs = row(SEC_INIT, "rescale_prenorm_residual");
    emit(x, "rescale_out_proj", r_rs, "%d", get_bool(x, r_rs) && !(implicit && wn));
    return check_widths(x);
}

/* ---- pass 3: apply ------------------------------------------------------------------------- */

/* 1 if one of the caller's tables has our key. */
static int claimed(const Ctx *x, const char *key) {
    for (int t = 0; t < x->n; t++)
        if (keytab_find(x->tabs[t], key)) return 1;
    return 0;
}

/* A caller's own section ("model": {...}) inside a reference object: same rules as keyjson's
 * sectioned format (scalars only, keys of that table only). */
static int apply_own(const Ctx *x, const Json *sec, int t) {
    for (size_t i = 0; i < json_len(sec); i++) {
        const char *key = json_key_at(sec, i);
        char text[KEY_STR_LEN];
        if (scalar_text(json_at(sec, i), text, sizeof text))
            return err_set(IM_EINVAL, "%s: key '%s.%s' has a %s value (expected a number or string)", x->where,
                           x->tabs[t]->section, key, json_type_name(json_at(sec, i)->type));
        int rc = keytab_set(x->tabs[t], x->objs[t], key, text);
        if (rc == KEY_NOT_MINE)
            return err_set(IM_EINVAL, "%s: unknown %s key '%s.%s'", x->where, x->tabs[t]->section, x->tabs[t]->section, key);
        if (rc) return err_wrap(rc, "%s", x->where);
    }
    return IM_OK;
}

/* Pass 3: write the queued values (first match among the tables, as keyjson_set_any), then the
 * caller's own sections, which therefore override the reference keys. */
static int apply(Ctx *x) {
    char p[160];
    /* first make sure every target exists, so that a rejection leaves the objects untouched */
    for (int i = 0; i < x->n_emit; i++)
        if (!claimed(x, x->emit[i].key) && !(KEYS[x->emit[i].row].flags & RF_OPTIONAL))
            return err_set(IM_EINVAL, "%s: reference key '%s' maps to '%s', which none of the given config tables has",
                           x->where, row_path(x, x->emit[i].row, p, sizeof p), x->emit[i].key);
    for (int i = 0; i < x->n_emit; i++) {
        int rc = KEY_NOT_MINE;
        for (int t = 0; t < x->n && rc == KEY_NOT_MINE; t++) rc = keytab_set(x->tabs[t], x->objs[t], x->emit[i].key, x->emit[i].text);
        if (rc && rc != KEY_NOT_MINE)
            return err_wrap(rc, "%s: reference key '%s'", x->where, row_path(x, x->emit[i].row, p, sizeof p));
    }
    for (int s = 0; s < x->n_own; s++) {
        int rc = apply_own(x, x->own[s], x->own_tab[s]);
        if (rc) return rc;
    }
    return IM_OK;
}

/* Every field of every table as text ("%.17g" floats round-trip exactly), to undo a failed apply. */
static char *snapshot(const Ctx *x) {
    size_t n = 0;
    for (int t = 0; t < x->n; t++) n += (size_t)x->tabs[t]->n;
    char *snap = malloc(n * (KEY_STR_LEN + 32) + 1);
    if (!snap) return NULL;
    size_t i = 0;
    for (int t = 0; t < x->n; t++)
        for (int k = 0; k < x->tabs[t]->n; k++, i++)
            keytab_value(&x->tabs[t]->keys[k], x->objs[t], snap + i * (KEY_STR_LEN + 32), KEY_STR_LEN + 32);
    return snap;
}

static void restore(const Ctx *x, const char *snap) {
    size_t i = 0;
    for (int t = 0; t < x->n; t++)
        for (int k = 0; k < x->tabs[t]->n; k++, i++) {
            const KeyInfo *ki = &x->tabs[t]->keys[k];
            /* clear a string's whole buffer first: a longer value written since leaves bytes behind */
            if (ki->type == KEY_STR) memset((char *)x->objs[t] + ki->offset, 0, KEY_STR_LEN);
            keytab_set(x->tabs[t], x->objs[t], ki->name, snap + i * (KEY_STR_LEN + 32));
        }
}

int refcfg_detect(const Json *root) {
    return root && root->type == JSON_OBJECT && (json_get(root, "backbone_config") || json_get(root, "deq_params"));
}

int refcfg_apply(const KeyTab *const *tabs, void *const *objs, int n, const Json *root, const char *where,
                 int *applied) {
    *applied = refcfg_detect(root);
    if (!*applied) return IM_OK;
    Ctx *x = calloc(1, sizeof *x);  /* ~20 KB of slots */
    if (!x) return err_set(IM_ENOMEM, "%s: out of memory", where);
    x->tabs = tabs;
    x->objs = objs;
    x->n = n;
    x->where = where;
    int rc = walk(x, SEC_TOP, root);
    if (!rc) {
        copy_rows(x);
        rc = derive(x);
    }
    if (!rc) {
        char *snap = snapshot(x);
        rc = snap ? apply(x) : err_set(IM_ENOMEM, "%s: out of memory", where);
        if (rc && snap) restore(x, snap);   /* an override section failed midway */
        free(snap);
    }
    free(x);
    return rc;
}

int refcfg_targets(const char **keys, int cap) {
    int n = 0;
    for (int r = 0; r < N_KEYS; r++) {
        if (!KEYS[r].ours) continue;
        if (n < cap) keys[n] = KEYS[r].ours;
        n++;
    }
    return n;
}
