/* model.h: the Model vtable and registry (STYLE §8.5).
 *
 * A Model is a config, a parameter table and two flat blocks (θ and dθ with the table's layout),
 * plus family-specific state behind `impl`. Each family (the explicit baselines, the implicit LMs,
 * the Fixed-Point RNNs) implements a ModelType in its own file and is listed once in the registry
 * array of model.c.
 *
 * Usage: model_create(cfg) → model_init_params(seed) or ckpt_load → model_plan(B, T) →
 * model_fwd / model_bwd (training, simultaneous) or model_state_init + model_step (generation).
 */
#ifndef IMPLICIT_MODEL_H
#define IMPLICIT_MODEL_H

#include <stdint.h>

#include "../core/rng.h"
#include "../core/params.h"
#include "config.h"

#define IGNORE_INDEX (-100)

typedef struct Model Model;

/* What kind of network a family is: code that treats the kinds differently (evaluation caps,
 * solver statistics, generation, config validation) asks the registry row, never the family's
 * name. X(id, name, key groups every family of this kind reads (config.h CFG_USE_*)) */
#define MODEL_FAMILY_LIST(X)                                                                       \
    X(MODEL_EXPLICIT, "explicit", 0)              /* one pass per layer: Mamba2, Llama, LSTM, ... */ \
    X(MODEL_IMPLICIT, "implicit", CFG_USE_DEQ)    /* a DEQ over the layer stack: implicit_mamba2, ... */ \
    X(MODEL_FP_RNN, "fp_rnn", CFG_USE_FP_LAYER)   /* a fixed point in time per layer: fp_mamba, ... */
typedef enum {
#define X(id, name, uses) id,
    MODEL_FAMILY_LIST(X)
#undef X
    MODEL_N_FAMILY
} ModelFamily;

typedef struct {
    const char *name;                               /* registry key = cfg.model */
    ModelFamily family;
    unsigned cfg_uses;                              /* CFG_USE_* key groups beyond the family's */
    int (*build)(Model *m);                         /* fill m->tab and m->impl from m->cfg */
    int (*plan)(Model *m, int B, int T);            /* size and allocate activations */
    /* Forward over ids:(B,T); fills m->logits (B,T,V_pad). With targets:(B,T) (IGNORE_INDEX
     * allowed) *loss receives the mean cross-entropy over non-ignored positions. Stores what
     * model_bwd needs. Runtime errors (bad ids) return a status. */
    int (*fwd)(Model *m, const int *ids, const int *targets, int B, int T, float *loss);
    void (*bwd)(Model *m);                          /* dθ += ∂loss/∂θ of the last fwd */
    int (*state_init)(Model *m, int B);             /* allocate + zero the recurrent state */
    int (*step)(Model *m, const int *ids, float *logits); /* ids:(B) → logits:(B,V_pad); commits */
    void (*free_impl)(Model *m);
    void (*post_init)(Model *m);                    /* after the table's init rules | NULL */
    /* Implicit models: spectral radius of ∂f/∂z at the evaluated fixed point of ids:(B,T) by
     * `iters` power iterations (diagnostic, spec §5.5) | NULL for explicit models. */
    int (*spectral_radius)(Model *m, const int *ids, int B, int T, int iters, double *out);
} ModelType;

struct Model {
    const ModelType *type;
    ModelCfg cfg;
    ParamTable tab;
    float *params;   /* (tab.total); 64-byte aligned, or in place in a mapped checkpoint (ckpt.h) */
    float *grads;    /* (tab.total), zeroed by model_zero_grad */
    void *params_block_, *grads_block_; /* private: what params and grads were allocated in */
    void *params_map_;                  /* private: the mapped checkpoint params points into | NULL */
    size_t params_map_len_;
    void *impl;      /* family-specific */
    int B, T;        /* planned batch and length */
    int planned_training; /* the training flag the activations were planned for */
    int planned_no_grad;  /* the no_grad flag they were planned for */
    int V;           /* padded vocabulary rows of the embedding / logits width */
    float *logits;   /* (B, T, V) after fwd; owned by impl */
    int training;    /* 1: dropout active */
    int no_grad;     /* 1: no model_bwd follows these forwards (evaluation, scoring), so a model may
                      * keep no activations for it; model_bwd after such a forward is an error */
    Rng rng;         /* dropout stream */
    int step_B;      /* batch of the step state */
    size_t act_bytes;/* activation memory of the planned batch (one allocation) */
    int train_total; /* optimizer steps of the whole run (fraction-based curricula); set by the trainer */
    int train_step;  /* optimizer step of the next training forward (curricula); set by the trainer */
    /* Fixed-point diagnostics of the last forward / step (implicit models; 0 for explicit ones) */
    double fp_iters;     /* solver f-evaluations (mean over tokens for step) */
    double fp_iters_median; /* fixed-point RNNs: median over layers of the f-evaluations */
    double fp_iters_ref; /* fixed-point RNNs: fp_iters in the reference's convention, which logs
                          * iter_idx + 1 for a solve of iter_idx f-evaluations: fp_iters + 1 (0 for
                          * the other models) */
    double jac_loss;     /* implicit models: the Jacobian regulariser of the last backward (0 = none) */
    double fp_res;       /* final relative residual (mean over samples) */
    double fp_res_max;   /* worst sample's residual (training solve: per-sample lowest; eval: last) */
    double fp_step_max;  /* training solve: latest per-sample best step; eval loop: latest step a
                          * sample alone fell below tol (the reference logs only batch means) */
    const char *fp_phase;/* "unrolled", "phantom 4+1", "ift", "eval" ... */
    double fp_conv;      /* share of the samples (step: of this token's batch rows) whose solve reached
                          * its tolerance; -1 where no tolerance applies (explicit models, the unrolled
                          * warm-up, an evaluation cap of 1) */
    double fp_extended;  /* converge-or-extend: share of the samples whose training solve went on past
                          * f_max_iter (-1: the rule is off or did not apply) */
    int eval_solve;      /* implicit models, evaluation: 0 = the evaluation loop; 1 = the training
                          * forward without dropout (the training solve at the curriculum's current
                          * cap, then the phantom steps): the "training cap" side of the fixed-point gap */
    int pos;         /* tokens consumed by step since state_init */
};

const ModelType *model_type_find(const char *name);
const char *model_type_names(void);                /* "mamba2 | llama | lstm" */
const char *model_family_name(ModelFamily f);      /* "explicit" | "implicit" | "fp_rnn" */
/* 1 for the families that solve a fixed point (implicit LMs and Fixed-Point RNNs). */
int model_is_fixed_point(const Model *m);
/* The CFG_USE_* key groups a family reads: its row's and its kind's (MODEL_FAMILY_LIST). */
unsigned model_type_cfg_uses(const ModelType *t);
/* Check a config: its model must be in the registry, and its keys must hold for the key groups
 * that model reads (cfg_check, config.h). IM_EINVAL with a message naming the key. */
int cfg_validate(const ModelCfg *c);
/* Validate cfg, build the table, allocate θ and dθ (zeroed). */
int model_create(Model *m, const ModelCfg *cfg);
void model_free(Model *m);
/* The weights are `params` from now on (the checkpoint loader's in-place use of a mapped file):
 * the model's own buffer is freed, and model_free unmaps `map` (map_len bytes; NULL: nothing). */
void model_adopt_params(Model *m, float *params, void *map, size_t map_len);
void model_init_params(Model *m, uint64_t seed);   /* spec §1.8 rules from the table */
void model_zero_grad(Model *m);
/* Most tokens B x T in one forward: the layers index rows of a batch with int M = B * T (and
 * kernels a few widths times M in size_t), so this keeps every such product far from overflow. */
#define MODEL_MAX_TOKENS (1 << 24)
int model_plan(Model *m, int B, int T);
int model_fwd(Model *m, const int *ids, const int *targets, int B, int T, float *loss);
void model_bwd(Model *m);
int model_state_init(Model *m, int B);
int model_step(Model *m, const int *ids, float *logits);
/* See ModelType.spectral_radius; IM_EINVAL for a model without a fixed point. */
int model_spectral_radius(Model *m, const int *ids, int B, int T, int iters, double *out);
/* Pointer to tensor `name` inside block (θ or dθ); CHECKs that it exists. */
float *model_tensor(const Model *m, float *block, const char *name);
/* Runtime check of token ids against the vocabulary (message names the position). */
int model_check_ids(const Model *m, const int *ids, long n, const char *what);

#endif
