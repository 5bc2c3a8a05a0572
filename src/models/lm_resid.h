/* lm_resid.h: the residual-stream LM of spec fp-rnn §3.4 (mamba_ssm MixerModel with
 * d_intermediate = 0), with pluggable per-layer mixers. Internal to src/models/.
 *
 *   r_0 = E[ids]                                   (embedding dropout as every LM, lm_common.h)
 *   r_{l+1} = r_l + Mixer_l(Norm_l(r_l))           l = 0 .. n_layer-1, no MLP
 *   logits = Norm_f(r_L) E^T                       tied head, padded vocabulary
 * Norm = RMSNorm or, with norm_type layernorm, LayerNorm with bias (mamba_ssm's rms_norm = False),
 * eps norm_eps (layers/blocknorm.h).
 * Names: the shared ends of lm_common.h (EMB_NAME, NORM_F_NAME, NORM_F_BIAS_NAME),
 * "backbone.layers.<l>.norm.weight" (and ".norm.bias") and the mixer's own tensors under
 * "backbone.layers.<l>.mixer.".
 *
 * The LM is an explicit stack family of lm_stack.h (layer y = x + Mixer_l(Norm_l(x))).
 * A mixer kind (LmMixerKind) is everything the wrapper needs to know about one layer type: its
 * hyperparameters (built once per model from the ModelCfg), its tensors, its three kinds of
 * memory (cache / scratch / state, STYLE §8.3) and its fwd / bwd / step. The wrapper owns all
 * memory and calls the kind per layer; a kind never allocates activations.
 * Registered kinds (lm_resid.c, table KINDS; the model name picks the kind):
 *   "mamba1"    Mamba-1 mixer (layers/mamba1.h), spec §5.2.
 *   "fp_mamba"  FP-Mamba fixed-point mixer (layers/fp_mamba.h, kind in lm_fp.c), spec §3.1.
 *   "fp_mamba2" FPMamba2 (layers/fp_mamba2.h, kind in lm_fp.c), spec §3.2.
 *   "fp_rnn"    the vector FP-RNN (layers/fp_rnn.h, kind in lm_fp.c), spec §3.3.
 * Adding a kind: write an LmMixerKind (ideally in its own file, declared here),
 * add it to KINDS in lm_resid.c, define its ModelType with LM_RESID_TYPE("<name>", <ModelFamily>,
 * <CFG_USE_* key groups>) there (the kind is looked up by cfg.model at build) and list that in
 * model.c's registry.
 */
#ifndef IMPLICIT_LM_RESID_H
#define IMPLICIT_LM_RESID_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* What every call of a kind receives besides its buffers. */
typedef struct {
    Model *m;          /* the model: training flag, rng, cfg, fp_* diagnostics, train_step */
    const void *cfg;   /* the kind's hyperparameters (from init) */
    int layer;         /* 0 .. n_layer-1 */
    double *layer_stat;/* (2·n_layer) scratch for per-layer diagnostics (fixed-point kinds: solver
                        * iterations, for their median over layers) */
} LmMixCtx;

/* Weight structs of a kind hold pointers into θ (or dθ). While the table is built they hold
 * offsets instead: add_params stores LM_OFF(ptab_add(...)), bind turns them into LM_AT(base, off). */
#define LM_OFF(offset) ((float *)(uintptr_t)(offset))
#define LM_AT(base, off) ((base) + (size_t)(uintptr_t)(off))

typedef struct {
    const char *name;  /* the ModelCfg.model value of the LM built from this kind */
    size_t w_size;     /* bytes of the kind's weight struct (one per layer, for θ and for dθ) */
    /* Validate the config for this kind and allocate its hyperparameters into *cfg (IM_EINVAL
     * with a message naming the key on a bad config; *cfg freed by free_cfg). */
    int (*init)(void **cfg, const ModelCfg *c);
    void (*free_cfg)(void *cfg);
    /* Add layer `layer`'s tensors (names "backbone.layers.<layer>.mixer.*", init rules, decay)
     * to t and store their offsets in w_off (a weight struct, see LM_OFF). */
    void (*add_params)(const void *cfg, const ModelCfg *c, ParamTable *t, int layer, void *w_off);
    /* w = w_off with every offset turned into a pointer into base (θ or dθ); t is the model's
     * table (for kinds that find their tensors by name). */
    void (*bind)(const void *cfg, void *w, const void *w_off, const ParamTable *t, float *base);
    /* Release what bind allocated for w (e.g. effective-weight buffers) | NULL. */
    void (*unbind)(const void *cfg, void *w);
    /* Init rules the table cannot express, after ptab_init_values (w points into θ) | NULL. */
    void (*post_init)(const LmMixCtx *x, void *w);
    /* Refresh derived weights (e.g. weight norm) before a forward or a run of steps | NULL. */
    void (*prepare)(const LmMixCtx *x, const void *w);
    /* Memory per layer, in floats: kept fwd -> bwd; temporaries (shared by all layers); the
     * recurrent state of step; step temporaries. */
    size_t (*cache_floats)(const void *cfg, int B, int T);
    size_t (*scratch_floats)(const void *cfg, int B, int T);
    size_t (*state_floats)(const void *cfg, int B);
    size_t (*step_scratch_floats)(const void *cfg, int B);
    /* y:(B,T,D) = Mixer(x:(B,T,D)) from the zero state; fills cache (always given). Runtime
     * failures (e.g. a diverging solver) return a status. */
    int (*fwd)(const LmMixCtx *x, const void *w, float *y, const float *xin, float *cache,
               float *scratch, int B, int T);
    /* dx:(B,T,D) += dy J, dw += parameter gradients, for the fwd that filled cache. */
    void (*bwd)(const LmMixCtx *x, const void *w, void *dw, float *dx, const float *dy,
                const float *xin, const float *cache, float *scratch, int B, int T);
    /* One token y:(B,D) = Mixer(x:(B,D)); commits the new state into `state` (in place). */
    int (*step)(const LmMixCtx *x, const void *w, float *y, const float *xin, float *state,
                float *scratch, int B);
} LmMixerKind;

extern const LmMixerKind lm_mixer_mamba1, lm_mixer_fp_mamba, lm_mixer_fp_mamba2, lm_mixer_fp_rnn;

#endif
