/* config.h: the model configuration, listed once.
 *
 * MODEL_CFG_KEYS is the single table of model hyperparameters (spec implicit-lm §11 names where
 * they exist). It generates the ModelCfg struct, defaults, `--key value` parsing with type checks,
 * validation messages that name the key, the JSON written into checkpoint metadata, and the
 * reader for that JSON. Adding a key touches this table only.
 */
#ifndef IMPLICIT_CONFIG_H
#define IMPLICIT_CONFIG_H

#include <stddef.h>

#include "../core/keytab.h"


/* X(type, name, default, help) with type INT | FLOAT | STR (see core/keytab.h) */
#define MODEL_CFG_KEYS(X)                                                                          \
    X(STR, model, "mamba2", "model family")                                                      \
    X(INT, vocab_size, 256, "vocabulary size V (tokens are 0..V-1)")                               \
    X(INT, pad_vocab_multiple, 0, "round the embedding rows up to a multiple of this (0 = off)")   \
    X(INT, d_model, 64, "model width D")                                                           \
    X(INT, n_layer, 2, "number of blocks (LSTM layers for lstm)")                                  \
    X(INT, d_inner, 0, "MLP width (0 = no MLP); SwiGLU hidden = floor(2*d_inner/3)")               \
    X(STR, mlp_type, "auto", "auto | swiglu | gated (auto: swiglu for llama, gated for mamba2)")   \
    X(FLOAT, norm_eps, 1e-5, "epsilon of every norm (fp_*: the fp layer's own norms use mixer_norm_eps when it is set)") \
    X(STR, norm_type, "rmsnorm", "mamba1 / fp_*: block pre-norms and norm_f: rmsnorm | layernorm (with bias; mamba_ssm rms_norm False)") \
    X(INT, d_state, 16, "Mamba2 state size N")                                                     \
    X(INT, d_conv, 4, "Mamba2 causal conv width W")                                                \
    X(INT, expand, 2, "Mamba2 inner width E = expand * D")                                         \
    X(INT, headdim, 16, "Mamba2 head dim P (H = E / P)")                                           \
    X(INT, n_head, 4, "attention heads (head dim = D / n_head)")                                   \
    X(FLOAT, rope_theta, 500000.0, "RoPE base")                                                    \
    X(INT, max_seq_len, 2048, "attention KV-cache capacity for generation")                        \
    X(FLOAT, dropout, 0.0, "embedding dropout probability")                                        \
    X(FLOAT, backbone_dropout, 0.0, "variational dropout on mixer/MLP outputs")                    \
    X(INT, rescale_out_proj, -1, "GPT-2 rescale of out_proj/fc2 by 1/sqrt(n_res*n_layer): 1 | 0 | "  \
                                 "-1 = as the reference (explicit yes, implicit no: spec 12-B1)")   \
    X(FLOAT, emb_init_std, 0.02, "embedding init N(0, std)")                                       \
    X(INT, tie_embeddings, 1, "1: the output head is the embedding matrix | 0: a separate V x D head " \
                              "criterion.decoder.weight (transformers tie_word_embeddings false)")      \
    X(INT, dt_rank, 0, "mamba1 / fp_mamba: rank of the dt projection (0 = ceil(d_model/16))")      \
    X(INT, short_conv, -1, "fp_mamba / delta models: short causal conv (1 | 0 | -1 = model default: " \
                           "fp_mamba off as the word-problem runs, delta models on)")             \
    X(INT, delta_head_dim, 32, "deltanet: key head dim (value head dim = expand_v * this)")        \
    X(INT, expand_v, 2, "deltanet: value head dim / key head dim")                                  \
    X(INT, n_householder, 1, "deltanet: Householder steps per token (> 1 = DeltaProduct)")          \
    X(INT, allow_neg_eigval, 1, "deltanet: beta = 2 sigmoid (eigenvalues in (-1,1]) | 0: sigmoid") \
    FP_CFG_KEYS(X)                                                                                 \
    DEQ_CFG_KEYS(X)

/* Fixed-Point RNNs (spec fp-rnn §1-§3, §8; names of the reference's options where they exist). */
#define FP_CFG_KEYS(X)                                                                             \
    X(STR, mixer_type, "householder", "fp_mamba channel mixer Q") /* names: layers/mixer.h */      \
    X(INT, mixer_rank, 1, "mixer rank r (reflections / DPLR rank / mixture terms; monarch: block size)") \
    X(STR, mixer_ac, "silu", "activation on the mixer projections")                                 \
    X(INT, mixer_proj_rank, -1, "mixer projections factorised through this rank (-1 = full)")      \
    X(INT, mixer_h_dep, 1, "Q, b, c depend on the shifted previous iterate (fp-rnn 1.2)")         \
    X(INT, symm_mixer, 0, "mixer input x + shift(y) instead of the concatenation [x; shift(y)]")   \
    X(STR, kron_norm, "column-wise", "kronecker factor normalisation: column-wise | spectral")      \
    X(INT, bc_norm, 1, "fp_mamba: L2-normalise b and c")                                           \
    X(INT, glu_in_loop, 0, "fp_mamba: gate silu(z) inside the fixed-point loop")                   \
    X(FLOAT, mixer_norm_eps, 0.0, "epsilon inside the fp layer (its in-loop norm, the mixer's normalisations; the reference's ssm_cfg norm_eps); 0 = norm_eps") \
    X(INT, fp_max_iter, 16, "training cap l_max on no-grad iterations per layer (< 0: Gamma-random per batch)") \
    X(STR, fp_gamma, "code", "random l_max: code = ceil(Gamma(4, k/16+1)) | paper = ceil(Gamma(4, 1))") \
    X(INT, fp_gamma_k, 16, "random l_max: the train length k of the code's parameterisation")      \
    X(INT, fp_n_backwards, 1, "differentiable steps after the loop (paper's k truncated steps = this - 1)") \
    X(FLOAT, fp_threshold, 0.1, "stop when the relative inf-norm residual is below this")          \
    X(FLOAT, fp_step0, 0.99, "initial damping step size s0")                                        \
    X(FLOAT, fp_decay, 0.9, "step size decay after `fp_patience` iterations without progress")     \
    X(INT, fp_patience, 15, "iterations without a new best residual before the step decays")        \
    X(FLOAT, fp_outlier_q, 0.25, "training stops when the (1 - q) quantile of the batch converged") \
    X(INT, fp_eval_cap, 1000, "evaluation cap on iterations (all sequences must converge)")         \
    X(STR, fp_solver, "fixed_point_optimizer", "solver of the fixed-point layers (the reference's FixedPointOptimizer by default)")

/* Implicit models (spec implicit-lm §2-§6, names of the reference's deq_params where they exist). */
#define DEQ_CFG_KEYS(X)                                                                            \
    X(FLOAT, tau, 0.8, "relaxation z <- (1-tau) z + tau f(z) of phantom steps and eval loop")     \
    X(STR, f_solver, "fixed_point_iter", "training forward solver")   \
    X(INT, f_max_iter, 32, "training solve: max f evaluations (eval: x eval_factor)")             \
    X(FLOAT, f_tol, 0.05, "solve / eval-loop tolerance")                                           \
    X(INT, f_extend_max_iter, 0, "converge-or-extend: sequences still above f_tol after f_max_iter iterate on, alone, up to this many (0 = off)") \
    X(FLOAT, eval_f_tol, 0.01, "evaluation loop and sequential solve stop at min(f_tol, eval_f_tol) (0 = f_tol)") \
    X(STR, f_stop_mode, "rel", "training solve residual: rel | abs")                               \
    X(INT, grad, 4, "phantom-gradient steps k (1 with tau 1 = JFB)")                               \
    X(INT, ift, 0, "1 = implicit differentiation (adjoint solve) instead of phantom steps")       \
    X(STR, b_solver, "fixed_point_iter", "adjoint solver")            \
    X(INT, b_max_iter, 32, "adjoint solve: max iterations")                                        \
    X(FLOAT, b_tol, 1e-3, "adjoint solve tolerance")                                               \
    X(STR, b_stop_mode, "rel", "adjoint residual: rel | abs")                                      \
    X(FLOAT, eval_factor, 4.0, "eval max iterations = floor(f_max_iter * eval_factor)")            \
    X(INT, eval_f_max_iter, 0, "eval max iterations if > 0 (overrides eval_factor)")              \
    X(INT, eval_seq_f_max_iter, 32, "sequential mode: max iterations per token, at most the eval cap (0 = the eval cap)") \
    X(INT, pretrain_steps, 0, "unrolled warm-up: training forwards with full backprop")           \
    X(INT, pretrain_iter, 4, "f calls of the unrolled warm-up")                                    \
    X(INT, bounded_steps, 0, "after the warm-up, steps of the bounded phase (paper's 4+1)")       \
    X(FLOAT, bounded_frac, 0.0, "or: the bounded phase ends at this fraction of training (tokens)") \
    X(INT, bounded_f_max_iter, 4, "bounded phase: solver iterations")                              \
    X(INT, bounded_grad, 1, "bounded phase: phantom steps")                                        \
    X(INT, weight_norm, 1, "weight-normalise every backbone Linear/Conv1d (spec 6)")               \
    X(INT, norm_no_scale, 0, "weight norm without learned gain (W = target * v/|v|)")              \
    X(FLOAT, norm_target_norm, 1.0, "weight-norm target when norm_no_scale")                       \
    X(FLOAT, norm_clip_value, 0.0, "clip the weight-norm factor at this value (0 = off)")          \
    X(FLOAT, ema_alpha, 0.0, "eval loop: test convergence on an EMA of f-outputs (0 = off)")       \
    X(FLOAT, latent_noise_db, 0.0, "sequential mode, Mamba2: noise on the mixer input, SNR dB (0 = off; spec 7)") \
    X(FLOAT, state_noise_db, 0.0, "sequential mode, Mamba2: noise on committed conv/SSM states, SNR dB (0 = off)") \
    X(STR, noise_mode, "multiplicative", "noise: multiplicative x(1+n) | additive x+n")              \
    X(INT, noise_seed, 0, "seed of the noise stream")                                              \
    X(INT, seq_warm_start, 0, "sequential mode: start each token's solve from the previous token's z*") \
    X(STR, seq_solver, "loop", "sequential mode solver: loop (the reference's damped loop) | anderson | broyden") \
    X(INT, anderson_m, 6, "Anderson history size")                                                 \
    X(FLOAT, anderson_lambda, 1e-4, "Anderson Tikhonov regularisation")                            \
    X(INT, broyden_m, 8, "Broyden: rank-one updates kept (memory (2m+5) x the solve's size)")      \
    X(FLOAT, jac_weight, 0.0, "Jacobian regularisation: loss += w ||eps^T df/dz||^2 / numel at z* (0 = off)") \
    X(FLOAT, jac_freq, 1.0, "Jacobian regularisation: probability that a training step computes it")

/* X(key, lo, hi): the range of every integer key (and of the floats a size is computed from),
 * checked before anything else, so that the widths derived from them (E = expand * d_model, ...)
 * are computed in 64 bits and bounded by CFG_MAX_WIDTH before any int arithmetic sees them.
 * Sizes are capped far above any CPU-trainable model; flags are 0..1, "-1 = default" keys start
 * at -1. Family-specific rules (headdim dividing E, ...) are in cfg_check, by key group. */
#define MODEL_CFG_BOUNDS(X)                                                                        \
    X(vocab_size, 1, 1 << 24) X(pad_vocab_multiple, 0, 65536) X(d_model, 1, 65536)                 \
    X(n_layer, 1, 1024) X(d_inner, 0, 1 << 20) X(d_state, 1, 65536) X(d_conv, 1, 64)              \
    X(expand, 1, 64) X(headdim, 1, 65536) X(n_head, 1, 65536) X(max_seq_len, 1, 1 << 24)          \
    X(rescale_out_proj, -1, 1) X(tie_embeddings, 0, 1) X(dt_rank, 0, 65536) X(short_conv, -1, 1)                           \
    X(delta_head_dim, 1, 65536) X(expand_v, 1, 64) X(n_householder, 1, 16) X(allow_neg_eigval, 0, 1) \
    X(mixer_rank, 1, 4096) X(mixer_proj_rank, -1, 65536) X(mixer_h_dep, 0, 1) X(symm_mixer, 0, 1)  \
    X(bc_norm, 0, 1) X(glu_in_loop, 0, 1) X(mixer_norm_eps, 0, 1) X(fp_max_iter, -100000, 100000) X(fp_gamma_k, 1, 1 << 20) \
    X(fp_n_backwards, 1, 64) X(fp_patience, 1, 1 << 20) X(fp_eval_cap, 1, 10000000)               \
    X(f_max_iter, 0, 100000) X(f_extend_max_iter, 0, 100000) X(grad, 1, 64) X(ift, 0, 1) X(b_max_iter, 1, 100000)                  \
    X(eval_factor, 0, 1000) X(eval_f_max_iter, 0, 10000000) X(eval_seq_f_max_iter, 0, 10000000)  \
    X(pretrain_steps, 0, 1 << 30)                                                                  \
    X(pretrain_iter, 1, 256) X(bounded_steps, 0, 1 << 30) X(bounded_f_max_iter, 0, 100000)         \
    X(bounded_grad, 1, 64) X(weight_norm, 0, 1) X(norm_no_scale, 0, 1) X(noise_seed, 0, 2147483647) \
    X(seq_warm_start, 0, 1) X(anderson_m, 1, 16) X(broyden_m, 1, 64)

/* X(key): the keys that change how a trained model is evaluated, not what was trained (iteration
 * caps, tolerances, the sequential solver, noise): `implicit eval` accepts exactly these. The sizeof
 * names the field, so an entry for a key that does not exist does not compile. */
#define MODEL_EVAL_KEYS(X)                                                                         \
    X(tau) X(f_tol) X(eval_f_tol) X(eval_factor) X(eval_f_max_iter) X(eval_seq_f_max_iter) X(ema_alpha)   \
    X(seq_warm_start) X(seq_solver)                                                                \
    X(anderson_m) X(anderson_lambda) X(broyden_m) X(latent_noise_db) X(state_noise_db) X(noise_mode) \
    X(noise_seed) X(fp_eval_cap) X(fp_threshold)
#define MODEL_KEY_NAME(name) (#name + 0 * sizeof(((ModelCfg *)0)->name)),

/* The widest per-token width a model may derive from its keys (the Mamba2 in_proj rows
 * 2E + 2N + H, the MLP hidden, the LSTM gates 4D, a mixer's projection width ...): 2^24, so that
 * the layers' int arithmetic on widths (a few of them times a small factor) cannot overflow. */
#define CFG_MAX_WIDTH (1 << 24)

typedef struct {
    MODEL_CFG_KEYS(KEY_FIELD)
} ModelCfg;

extern const KeyTab model_keytab;

void cfg_defaults(ModelCfg *c);
/* Set one key from text ("--d_model 64"). IM_EINVAL with a message naming the key on an unknown
 * key or a value of the wrong type. */
int cfg_set(ModelCfg *c, const char *key, const char *value);
/* The key groups a model family reads beyond the common ones. A family's registry row (model.h)
 * lists its groups; cfg_validate (model.h) asks the row and checks the keys of those groups
 * through cfg_check, so this file never needs to know a family by its name (and never calls
 * into the registry, which calls cfg_validate). */
#define CFG_USE_LIST(X)                                                                            \
    X(CFG_USE_ATTN, 1u << 0)      /* attention blocks: n_head divides d_model, RoPE, SwiGLU */    \
    X(CFG_USE_SSD_HEADS, 1u << 1) /* Mamba2 heads: headdim divides expand*d_model */              \
    X(CFG_USE_SCAN, 1u << 2)      /* the Mamba-1 selective scan: dt_rank */                      \
    X(CFG_USE_NORM_TYPE, 1u << 3) /* block norms built from norm_type (RMSNorm or LayerNorm) */   \
    X(CFG_USE_DELTA, 1u << 4)     /* delta-rule mixers, with their own untied head */             \
    X(CFG_USE_FP_LAYER, 1u << 5)  /* a fixed-point layer: the channel mixer and fp_* keys */      \
    X(CFG_USE_DEQ, 1u << 6)       /* a fixed point over the layer stack: solver keys */           \
    X(CFG_USE_NOISE, 1u << 7)     /* noise injection into the solve (latent/state_noise_db) */
enum {
#define X(id, bit) id = bit,
    CFG_USE_LIST(X)
#undef X
};
/* Check ranges and consistency (heads dividing widths, ...) of a config whose family reads the
 * key groups `uses`. IM_EINVAL naming the key. users(bit) names the families that read one
 * group ("mamba1, fp_mamba and fp_rnn"), for the messages that reject a key on the others. */
int cfg_check(const ModelCfg *c, unsigned uses, const char *(*users)(unsigned use));
/* Write the config as one JSON object into buf (NUL-terminated). Returns bytes needed. */
size_t cfg_to_json(const ModelCfg *c, char *buf, size_t cap);
/* Read keys from a JSON object text; unknown keys are errors. Missing keys keep defaults. */
int cfg_from_json(ModelCfg *c, const char *json);
/* Print "key = value  # help" lines (for --help and `implicit info`). */
void cfg_print(const ModelCfg *c, void *file);
/* Embedding rows after padding. */
int cfg_vocab_padded(const ModelCfg *c);

#endif
