/* params.h: a model's parameter table — names, shapes, offsets, init rules, weight decay.
 *
 * Each model lists its tensors once (an X-macro per block in the model file); that list fills a
 * ParamTable, which then drives everything else: the size of the parameter block (θ, dθ, Adam m,
 * v share one layout), initialisation (spec implicit-lm §1.8), the safetensors names and shapes
 * (spec §14), weight-decay groups, and per-tensor reporting in tests.
 */
#ifndef IMPLICIT_PARAMS_H
#define IMPLICIT_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

#define PARAM_NAME_LEN 96
#define PARAM_MAX_DIM 4

typedef enum {
    INIT_ZERO,     /* 0 */
    INIT_ONE,      /* 1 (norm weights, Mamba2 D) */
    INIT_NORMAL,   /* N(0, a^2) (embedding, a = 0.02) */
    INIT_UNIFORM,  /* U(-a, a): PyTorch Linear/Conv1d default has a = 1/sqrt(fan_in) */
    INIT_A_LOG,    /* ln U(a, b): Mamba2 A_log, A_init_range (1, 16) */
    INIT_DT_BIAS,  /* inverse softplus of dt = exp(U(ln a, ln b)) floored at 1e-4 (dt_min, dt_max) */
} InitRule;

typedef struct {
    char name[PARAM_NAME_LEN];     /* state_dict key */
    int ndim;
    int64_t shape[PARAM_MAX_DIM];  /* as stored in checkpoints */
    size_t offset;                 /* floats from the start of the block (64-byte aligned) */
    size_t numel;
    InitRule init;
    float a, b;                    /* init arguments (see InitRule) */
    int decay;                     /* 1 = AdamW weight decay applies */
} ParamInfo;

typedef struct {
    ParamInfo *p;
    int n, cap;
    size_t total;                  /* floats in the block, incl. alignment padding */
} ParamTable;

void ptab_init(ParamTable *t);
void ptab_free(ParamTable *t);
/* Add a tensor; shape given as ndim values. Returns its offset in floats. CHECKs the name fits. */
size_t ptab_add(ParamTable *t, const char *name, InitRule init, float a, float b, int decay, int ndim, ...);
const ParamInfo *ptab_find(const ParamTable *t, const char *name);
size_t ptab_count(const ParamTable *t);   /* number of scalars (without padding) */
/* Fill the block by the init rules; tensor i draws from its own RNG stream (seed, i), so adding
 * a tensor does not change the others. */
void ptab_init_values(const ParamTable *t, float *block, uint64_t seed);

#endif
