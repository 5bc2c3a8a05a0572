/* model_list.h: the model families, one row each, in the order `--help` and messages list them.
 * X(name, ModelType symbol). model.c builds the registry from it; config.c takes the names for the
 * `model` key's --help, so the list is written once and config.c needs no call into the registry
 * (test_models checks that each row's name is its ModelType's). Adding a family: its file (with
 * its ModelType) and one row here. */
#ifndef IMPLICIT_MODEL_LIST_H
#define IMPLICIT_MODEL_LIST_H

#define MODEL_LIST(X)                          \
    X(mamba2, model_mamba2_lm)                 \
    X(llama, model_llama_lm)                   \
    X(lstm, model_lstm_lm)                     \
    X(implicit_mamba2, model_implicit_mamba2)  \
    X(implicit_llama, model_implicit_llama)    \
    X(mamba1, model_mamba1_lm)                 \
    X(fp_mamba, model_fp_mamba_lm)             \
    X(fp_mamba2, model_fp_mamba2_lm)           \
    X(fp_rnn, model_fp_rnn_lm)                 \
    X(deltanet, model_deltanet_lm)             \
    X(gated_deltanet, model_gated_deltanet_lm)

#endif
