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
    X(STR, model, "mamba2", "model family: mamba2 | llama | lstm")                                 \
    X(INT, vocab_size, 256, "vocabulary size V (tokens are 0..V-1)")                               \
    X(INT, pad_vocab_multiple, 0, "round the embedding rows up to a multiple of this (0 = off)")   \
    X(INT, d_model, 64, "model width D")                                                           \
    X(INT, n_layer, 2, "number of blocks (LSTM layers for lstm)")                                  \
    X(INT, d_inner, 0, "MLP width (0 = no MLP); SwiGLU hidden = floor(2*d_inner/3)")               \
    X(STR, mlp_type, "auto", "auto | swiglu | gated (auto: swiglu for llama, gated for mamba2)")   \
    X(FLOAT, norm_eps, 1e-5, "epsilon of every RMSNorm")                                           \
    X(INT, d_state, 16, "Mamba2 state size N")                                                     \
    X(INT, d_conv, 4, "Mamba2 causal conv width W")                                                \
    X(INT, expand, 2, "Mamba2 inner width E = expand * D")                                         \
    X(INT, headdim, 16, "Mamba2 head dim P (H = E / P)")                                           \
    X(INT, n_head, 4, "attention heads (head dim = D / n_head)")                                   \
    X(FLOAT, rope_theta, 500000.0, "RoPE base")                                                    \
    X(INT, max_seq_len, 2048, "attention KV-cache capacity for generation")                        \
    X(FLOAT, dropout, 0.0, "embedding dropout probability")                                        \
    X(FLOAT, backbone_dropout, 0.0, "variational dropout on mixer/MLP outputs")                    \
    X(INT, rescale_out_proj, 1, "GPT-2 rescale of out_proj/fc2 by 1/sqrt(n_res*n_layer)")          \
    X(FLOAT, emb_init_std, 0.02, "embedding init N(0, std)")

typedef struct {
    MODEL_CFG_KEYS(KEY_FIELD)
} ModelCfg;

extern const KeyTab model_keytab;

void cfg_defaults(ModelCfg *c);
/* Set one key from text ("--d_model 64"). IM_EINVAL with a message naming the key on an unknown
 * key or a value of the wrong type. */
int cfg_set(ModelCfg *c, const char *key, const char *value);
/* Check ranges and consistency (heads dividing widths, ...). IM_EINVAL naming the key. */
int cfg_validate(const ModelCfg *c);
/* Write the config as one JSON object into buf (NUL-terminated). Returns bytes needed. */
size_t cfg_to_json(const ModelCfg *c, char *buf, size_t cap);
/* Read keys from a JSON object text; unknown keys are errors. Missing keys keep defaults. */
int cfg_from_json(ModelCfg *c, const char *json);
/* Print "key = value  # help" lines (for --help and `implicit info`). */
void cfg_print(const ModelCfg *c, void *file);
/* Embedding rows after padding. */
int cfg_vocab_padded(const ModelCfg *c);

#endif
