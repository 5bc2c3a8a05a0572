/* config.c: everything generated from MODEL_CFG_KEYS (see config.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"
#include "../fixedpoint/fp.h"
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

static int is_solver(const char *s) {
    return !strcmp(s, "fixed_point_iter") || !strcmp(s, "anderson") || !strcmp(s, "broyden");
}
static int is_stop(const char *s) { return !strcmp(s, "rel") || !strcmp(s, "abs"); }

static int deq_validate(const ModelCfg *c) {
    if (!(c->tau > 0 && c->tau <= 1)) BAD("config key 'tau': %g must be in (0, 1]", c->tau);
    if (!is_solver(c->f_solver)) BAD("config key 'f_solver': unknown '%s' (fixed_point_iter | anderson | broyden)", c->f_solver);
    if (!is_solver(c->b_solver)) BAD("config key 'b_solver': unknown '%s' (fixed_point_iter | anderson | broyden)", c->b_solver);
    if (!is_stop(c->f_stop_mode)) BAD("config key 'f_stop_mode': unknown '%s' (rel | abs)", c->f_stop_mode);
    if (!is_stop(c->b_stop_mode)) BAD("config key 'b_stop_mode': unknown '%s' (rel | abs)", c->b_stop_mode);
    if (c->f_max_iter < 0 || c->f_max_iter > 100000) BAD("config key 'f_max_iter': %d out of range 0..100000", c->f_max_iter);
    if (c->b_max_iter < 1) BAD("config key 'b_max_iter' must be >= 1");
    if (c->grad < 1 || c->grad > 64) BAD("config key 'grad': %d out of range 1..64 (phantom steps)", c->grad);
    if (!(c->f_tol >= 0) || !(c->b_tol >= 0)) BAD("config keys 'f_tol', 'b_tol' must be >= 0");
    if (!(c->eval_factor >= 0)) BAD("config key 'eval_factor' must be >= 0");
    int f_thres = c->eval_f_max_iter > 0 ? c->eval_f_max_iter : (int)(c->f_max_iter * c->eval_factor);
    if (f_thres < 2)
        BAD("config keys 'eval_f_max_iter'/'eval_factor': evaluation needs at least 2 iterations (got %d; the reference crashes on 1)", f_thres);
    if (c->pretrain_steps < 0) BAD("config key 'pretrain_steps' must be >= 0");
    if (c->pretrain_iter < 1 || c->pretrain_iter > 256) BAD("config key 'pretrain_iter': %d out of range 1..256", c->pretrain_iter);
    if (!(c->bounded_frac >= 0 && c->bounded_frac <= 1)) BAD("config key 'bounded_frac' must be in [0, 1]");
    if (c->bounded_frac > 0 && c->bounded_steps > 0) BAD("config keys 'bounded_frac' and 'bounded_steps': give one, not both");
    if (c->bounded_steps < 0 || c->bounded_f_max_iter < 0 || c->bounded_grad < 1 || c->bounded_grad > 64)
        BAD("config keys 'bounded_steps', 'bounded_f_max_iter' >= 0 and 'bounded_grad' in 1..64");
    if (!(c->norm_target_norm > 0)) BAD("config key 'norm_target_norm' must be > 0");
    if (!(c->norm_clip_value >= 0)) BAD("config key 'norm_clip_value' must be >= 0");
    if (strcmp(c->noise_mode, "multiplicative") && strcmp(c->noise_mode, "additive"))
        BAD("config key 'noise_mode': unknown '%s' (multiplicative | additive)", c->noise_mode);
    if ((c->latent_noise_db > 0 || c->state_noise_db > 0) && strcmp(c->model, "implicit_mamba2"))
        BAD("config keys 'latent_noise_db', 'state_noise_db': noise injection applies to implicit_mamba2 (spec 7)");
    if (strcmp(c->seq_solver, "loop") && strcmp(c->seq_solver, "anderson") && strcmp(c->seq_solver, "broyden"))
        BAD("config key 'seq_solver': unknown '%s' (loop | anderson | broyden)", c->seq_solver);
    if (!(c->ema_alpha >= 0 && c->ema_alpha < 1)) BAD("config key 'ema_alpha' must be in [0, 1)");
    if (c->anderson_m < 1 || c->anderson_m > 16) BAD("config key 'anderson_m': %d out of range 1..16", c->anderson_m);
    if (!(c->anderson_lambda >= 0)) BAD("config key 'anderson_lambda' must be >= 0");
    if (c->broyden_m < 1 || c->broyden_m > FP_BROYDEN_MAX_M)
        BAD("config key 'broyden_m': %d out of range 1..%d", c->broyden_m, FP_BROYDEN_MAX_M);
    if (!(c->jac_weight >= 0)) BAD("config key 'jac_weight' must be >= 0");
    if (!(c->jac_freq >= 0 && c->jac_freq <= 1)) BAD("config key 'jac_freq' must be in [0, 1]");
    return IM_OK;
}

static int is_one_of(const char *s, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(s, *names)) return 1;
    return 0;
}

static int fp_validate(const ModelCfg *c) {
    static const char *const mixers[] = {"householder", "dplr", "kronecker", "monarch", "selectivedense",
                                         "nonselective", "mixture", NULL};
    static const char *const acs[] = {"identity", "relu", "silu", NULL};
    if (!is_one_of(c->mixer_type, mixers))
        BAD("config key 'mixer_type': unknown '%s' (householder | dplr | kronecker | monarch | selectivedense | nonselective | mixture)", c->mixer_type);
    if (c->mixer_rank < 1 || c->mixer_rank > 4096) BAD("config key 'mixer_rank': %d out of range 1..4096", c->mixer_rank);
    if (!is_one_of(c->mixer_ac, acs)) BAD("config key 'mixer_ac': unknown '%s' (identity | relu | silu)", c->mixer_ac);
    if (c->mixer_proj_rank == 0 || c->mixer_proj_rank < -1) BAD("config key 'mixer_proj_rank': %d must be -1 (full) or >= 1", c->mixer_proj_rank);
    if (strcmp(c->kron_norm, "column-wise") && strcmp(c->kron_norm, "spectral"))
        BAD("config key 'kron_norm': unknown '%s' (column-wise | spectral)", c->kron_norm);
    if (strcmp(c->fp_gamma, "code") && strcmp(c->fp_gamma, "paper"))
        BAD("config key 'fp_gamma': unknown '%s' (code | paper)", c->fp_gamma);
    if (c->fp_max_iter == 0 || c->fp_max_iter > 100000) BAD("config key 'fp_max_iter': %d must be in 1..100000 or < 0 (random)", c->fp_max_iter);
    if (c->fp_gamma_k < 1) BAD("config key 'fp_gamma_k' must be >= 1");
    if (c->fp_n_backwards < 1 || c->fp_n_backwards > 64) BAD("config key 'fp_n_backwards': %d out of range 1..64", c->fp_n_backwards);
    if (!(c->fp_threshold > 0)) BAD("config key 'fp_threshold' must be > 0");
    if (!(c->fp_step0 > 0 && c->fp_step0 <= 1)) BAD("config key 'fp_step0' must be in (0, 1]");
    if (!(c->fp_decay > 0 && c->fp_decay <= 1)) BAD("config key 'fp_decay' must be in (0, 1]");
    if (c->fp_patience < 1) BAD("config key 'fp_patience' must be >= 1");
    if (!(c->fp_outlier_q >= 0 && c->fp_outlier_q < 1)) BAD("config key 'fp_outlier_q' must be in [0, 1)");
    if (c->fp_eval_cap < 1) BAD("config key 'fp_eval_cap' must be >= 1");
    return IM_OK;
}

int cfg_validate(const ModelCfg *c) {
    int imp = !strncmp(c->model, "implicit_", 9);
    const char *fam = imp ? c->model + 9 : c->model;
    int is_m = !strcmp(fam, "mamba2"), is_l = !strcmp(fam, "llama"), is_r = !imp && !strcmp(fam, "lstm");
    int is_fp = !imp && (!strcmp(fam, "fp_mamba") || !strcmp(fam, "fp_mamba2") || !strcmp(fam, "fp_rnn"));
    int is_m1 = !imp && (!strcmp(fam, "mamba1") || is_fp);
    int is_delta = !imp && (!strcmp(fam, "deltanet") || !strcmp(fam, "gated_deltanet"));
    if (!is_m && !is_l && !is_r && !is_m1 && !is_delta)
        BAD("config key 'model': unknown model '%s' (mamba2 | llama | lstm | implicit_mamba2 | implicit_llama | "
            "mamba1 | fp_mamba | fp_mamba2 | fp_rnn | deltanet | gated_deltanet)", c->model);
    if (!strcmp(fam, "fp_mamba2") && (c->headdim < 1 || (c->expand * c->d_model) % c->headdim))
        BAD("config key 'headdim': %d does not divide expand*d_model = %d", c->headdim, c->expand * c->d_model);
    if (imp) {
        int rc = deq_validate(c);
        if (rc) return rc;
    }
    if (is_fp) {
        int rc = fp_validate(c);
        if (rc) return rc;
    }
    if (c->short_conv < -1 || c->short_conv > 1) BAD("config key 'short_conv': %d must be 1, 0 or -1 (model default)", c->short_conv);
    if (c->dt_rank < 0) BAD("config key 'dt_rank' must be >= 0 (0 = ceil(d_model/16))");
    if (is_m1) {
        if (c->d_state < 1) BAD("config key 'd_state' must be >= 1");
        if (c->d_conv < 1 || c->d_conv > 64) BAD("config key 'd_conv': %d out of range 1..64", c->d_conv);
        if (c->expand < 1) BAD("config key 'expand' must be >= 1");
    }
    if (is_delta) {
        if (c->n_head < 1) BAD("config key 'n_head' must be >= 1");
        if (c->delta_head_dim < 1) BAD("config key 'delta_head_dim' must be >= 1");
        if (c->expand_v < 1) BAD("config key 'expand_v' must be >= 1");
        if (c->n_householder < 1 || c->n_householder > 16) BAD("config key 'n_householder': %d out of range 1..16", c->n_householder);
        if (c->allow_neg_eigval != 0 && c->allow_neg_eigval != 1) BAD("config key 'allow_neg_eigval' must be 0 or 1");
    }
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
