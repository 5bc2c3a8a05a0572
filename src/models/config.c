/* config.c: everything generated from MODEL_CFG_KEYS (see config.h). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../fixedpoint/fp.h"
#include "../layers/mixer.h"
#include "../io/keyjson.h"
#include "../layers/blocknorm.h"
#include "model_list.h"

#define KEY_STRUCT ModelCfg
static const KeyInfo MODEL_KEYS[] = {MODEL_CFG_KEYS(KEY_INFO)};
static const KeyBound MODEL_BOUNDS[] = {MODEL_CFG_BOUNDS(KEY_BOUND)};
#undef KEY_STRUCT
/* "mamba2 | llama | ...", from MODEL_LIST (skip the first separator) */
#define MODEL_NAME_STR(name, sym) " | " #name
static const char MODEL_NAMES_STR[] = MODEL_LIST(MODEL_NAME_STR);
#undef MODEL_NAME_STR

/* Keys whose values are a list of kinds: --help prints the list from its table. */
static const char *model_key_choices(const char *key) {
    if (!strcmp(key, "model")) return MODEL_NAMES_STR + 3;
    if (!strcmp(key, "mixer_type")) return mixer_type_names();
    if (!strcmp(key, "mixer_ac")) return mixer_ac_names();
    if (!strcmp(key, "f_solver") || !strcmp(key, "b_solver")) return fp_solver_names(FP_USE_SOLVE);
    if (!strcmp(key, "fp_solver")) return fp_solver_names(FP_USE_FPRNN);
    return NULL;
}
const KeyTab model_keytab = {"model", MODEL_KEYS, (int)(sizeof MODEL_KEYS / sizeof MODEL_KEYS[0]), MODEL_BOUNDS,
                             (int)(sizeof MODEL_BOUNDS / sizeof MODEL_BOUNDS[0]), model_key_choices};

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

_Static_assert(FP_BROYDEN_MAX_M == 64, "the bound of model key 'broyden_m' (config.h) is 1..FP_BROYDEN_MAX_M");

static int is_stop(const char *s) { return !strcmp(s, "rel") || !strcmp(s, "abs"); }

static int deq_validate(const ModelCfg *c, unsigned uses, const char *(*users)(unsigned use)) {
    if (!(c->tau > 0 && c->tau <= 1)) BAD("config key 'tau': %g must be in (0, 1]", c->tau);
    if (fp_solver_parse(c->f_solver, FP_USE_SOLVE) < 0)
        BAD("config key 'f_solver': unknown '%s' (%s)", c->f_solver, fp_solver_names(FP_USE_SOLVE));
    if (fp_solver_parse(c->b_solver, FP_USE_SOLVE) < 0)
        BAD("config key 'b_solver': unknown '%s' (%s)", c->b_solver, fp_solver_names(FP_USE_SOLVE));
    if (!is_stop(c->f_stop_mode)) BAD("config key 'f_stop_mode': unknown '%s' (rel | abs)", c->f_stop_mode);
    if (!is_stop(c->b_stop_mode)) BAD("config key 'b_stop_mode': unknown '%s' (rel | abs)", c->b_stop_mode);
    if (!(c->f_tol >= 0) || !(c->b_tol >= 0) || !(c->eval_f_tol >= 0)) BAD("config keys 'f_tol', 'b_tol', 'eval_f_tol' must be >= 0");
    if (c->f_extend_max_iter > 0 && c->f_extend_max_iter <= c->f_max_iter)
        BAD("config key 'f_extend_max_iter': %d must be above f_max_iter %d (or 0 = off)", c->f_extend_max_iter, c->f_max_iter);
    int f_thres = c->eval_f_max_iter > 0 ? c->eval_f_max_iter : (int)(c->f_max_iter * c->eval_factor);
    if (f_thres < 2)
        BAD("config keys 'eval_f_max_iter'/'eval_factor': evaluation needs at least 2 iterations (got %d; the reference crashes on 1)", f_thres);
    if (c->eval_seq_f_max_iter == 1)
        BAD("config key 'eval_seq_f_max_iter': the sequential solve needs at least 2 iterations (got 1; 0 = the evaluation cap)");
    if (!(c->bounded_frac >= 0 && c->bounded_frac <= 1)) BAD("config key 'bounded_frac' must be in [0, 1]");
    if (c->bounded_frac > 0 && c->bounded_steps > 0) BAD("config keys 'bounded_frac' and 'bounded_steps': give one, not both");
    if (!(c->norm_target_norm > 0)) BAD("config key 'norm_target_norm' must be > 0");
    if (!(c->norm_clip_value >= 0)) BAD("config key 'norm_clip_value' must be >= 0");
    if (strcmp(c->noise_mode, "multiplicative") && strcmp(c->noise_mode, "additive"))
        BAD("config key 'noise_mode': unknown '%s' (multiplicative | additive)", c->noise_mode);
    if ((c->latent_noise_db > 0 || c->state_noise_db > 0) && !(uses & CFG_USE_NOISE))
        BAD("config keys 'latent_noise_db', 'state_noise_db': noise injection applies to %s (spec 7)", users(CFG_USE_NOISE));
    if (fp_solver_parse(c->seq_solver, FP_USE_SEQ) < 0)
        BAD("config key 'seq_solver': unknown '%s' (%s)", c->seq_solver, fp_solver_names(FP_USE_SEQ));
    if (!(c->ema_alpha >= 0 && c->ema_alpha < 1)) BAD("config key 'ema_alpha' must be in [0, 1)");
    if (!(c->anderson_lambda >= 0)) BAD("config key 'anderson_lambda' must be >= 0");
    if (!(c->jac_weight >= 0)) BAD("config key 'jac_weight' must be >= 0");
    if (!(c->jac_freq >= 0 && c->jac_freq <= 1)) BAD("config key 'jac_freq' must be in [0, 1]");
    return IM_OK;
}

static int fp_validate(const ModelCfg *c) {
    /* norm_eps > 0 is checked for every family below */
    int rc = mixer_check_keys(c->mixer_type, c->mixer_ac, c->mixer_proj_rank, c->kron_norm, 0.0f);
    if (rc) return rc;
    if (strcmp(c->fp_gamma, "code") && strcmp(c->fp_gamma, "paper"))
        BAD("config key 'fp_gamma': unknown '%s' (code | paper)", c->fp_gamma);
    if (c->fp_max_iter == 0) BAD("config key 'fp_max_iter': 0 must be 1..100000 or < 0 (random)");
    if (!(c->fp_threshold > 0)) BAD("config key 'fp_threshold' must be > 0");
    if (fp_solver_parse(c->fp_solver, FP_USE_FPRNN) < 0)
        BAD("config key 'fp_solver': unknown '%s' (%s)", c->fp_solver, fp_solver_names(FP_USE_FPRNN));
    if (!(c->fp_step0 > 0 && c->fp_step0 <= 1)) BAD("config key 'fp_step0' must be in (0, 1]");
    if (!(c->fp_decay > 0 && c->fp_decay <= 1)) BAD("config key 'fp_decay' must be in (0, 1]");
    if (!(c->fp_outlier_q >= 0 && c->fp_outlier_q < 1)) BAD("config key 'fp_outlier_q' must be in [0, 1)");
    return IM_OK;
}

/* The widths a model derives from its keys, in 64 bits (every key is in its bound, so none of
 * these products overflows int64): each must be at most CFG_MAX_WIDTH before the layers compute
 * them in int. The largest of a family's widths is what counts; unused ones are harmless. */
static int widths_validate(const ModelCfg *c, int ssd, int mamba1, int delta, int fp) {
    int64_t D = c->d_model, E = (int64_t)c->expand * D, N = c->d_state, r = c->mixer_rank;
    struct { const char *what; int64_t w; } w[] = {
        {"the embedding rows (vocab_size padded to pad_vocab_multiple)", (int64_t)c->vocab_size + c->pad_vocab_multiple},
        {"the LSTM gates 4 x d_model", 4 * D},
        {"the MLP hidden 2 x d_inner", 2 * (int64_t)c->d_inner},
        {"expand x d_model", E},
        {"the Mamba2 in_proj rows 2 expand d_model + 2 d_state + heads", ssd ? 2 * E + 2 * N + E / c->headdim : 0},
        {"dt_rank + 2 d_state", mamba1 ? (int64_t)c->dt_rank + 2 * N : 0},
        {"n_head x delta_head_dim x expand_v x n_householder",
         delta ? (int64_t)c->n_head * c->delta_head_dim * c->expand_v * c->n_householder : 0},
        /* a selective dense mixer projects to E (E + 1) / 2 numbers per token; the others at most
         * (mixer_rank + 1) x 2E (householder, dplr: r E; monarch: E (r + 1) / 2; kronecker < E) */
        {"the mixer projection width", !fp ? 0 : mixer_type_parse(c->mixer_type) == MIX_SELECTIVEDENSE ? E * (E + 1) / 2 : (r + 1) * 2 * E},
    };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        if (w[i].w > CFG_MAX_WIDTH)
            BAD("model keys: %s = %lld is above the largest supported width %d", w[i].what, (long long)w[i].w,
                CFG_MAX_WIDTH);
    return IM_OK;
}

int cfg_check(const ModelCfg *c, unsigned uses, const char *(*users)(unsigned use)) {
    int ssd = !!(uses & CFG_USE_SSD_HEADS), is_fp = !!(uses & CFG_USE_FP_LAYER), is_delta = !!(uses & CFG_USE_DELTA);
    int rc = keytab_check_bounds(&model_keytab, c);
    if (!rc) rc = widths_validate(c, ssd, !!(uses & CFG_USE_SCAN), is_delta, is_fp);
    if (rc) return rc;
    int64_t E = (int64_t)c->expand * c->d_model;   /* <= CFG_MAX_WIDTH from here on */
    if (ssd && E % c->headdim)
        BAD("config key 'headdim': %d does not divide expand*d_model = %lld", c->headdim, (long long)E);
    if ((uses & CFG_USE_DEQ) && (rc = deq_validate(c, uses, users))) return rc;
    if (is_fp && (rc = fp_validate(c))) return rc;
    if (strcmp(c->mlp_type, "auto") && strcmp(c->mlp_type, "swiglu") && strcmp(c->mlp_type, "gated"))
        BAD("config key 'mlp_type': unknown '%s' (auto | swiglu | gated)", c->mlp_type);
    if (!(c->norm_eps > 0)) BAD("config key 'norm_eps' must be > 0");
    if (blocknorm_parse(c->norm_type) < 0)
        BAD("config key 'norm_type': unknown '%s' (%s)", c->norm_type, blocknorm_names());
    /* the residual-stream LM (lm_resid.h) builds its norms from the key; the other families have
     * RMSNorm written into their blocks */
    if (blocknorm_parse(c->norm_type) != BLOCKNORM_RMS && !(uses & CFG_USE_NORM_TYPE))
        BAD("config key 'norm_type': %s applies to %s only (model '%s' uses rmsnorm)", c->norm_type,
            users(CFG_USE_NORM_TYPE), c->model);
    if (c->mixer_norm_eps > 0 && !is_fp)
        BAD("config key 'mixer_norm_eps': applies to %s only (model '%s')", users(CFG_USE_FP_LAYER), c->model);
    if (!c->tie_embeddings && is_delta)
        BAD("config key 'tie_embeddings': %s models always have their own head (lm_head.weight); leave it at 1", c->model);
    if (!(c->dropout >= 0 && c->dropout < 1)) BAD("config key 'dropout' must be in [0, 1)");
    if (!(c->backbone_dropout >= 0 && c->backbone_dropout < 1)) BAD("config key 'backbone_dropout' must be in [0, 1)");
    if (uses & CFG_USE_ATTN) {
        if (c->d_model % c->n_head)
            BAD("config key 'n_head': %d does not divide d_model = %d", c->n_head, c->d_model);
        if ((c->d_model / c->n_head) % 2) BAD("config key 'n_head': head dim d_model/n_head = %d must be even for RoPE", c->d_model / c->n_head);
        if (!(c->rope_theta > 1)) BAD("config key 'rope_theta' must be > 1");
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
