/* fpmap.h: the interface between whoever defines a fixed point and whoever solves it (STYLE
 * §8.4). The implicit LMs (src/models/) and the Fixed-Point RNN layers (src/layers/) describe
 * their map f as an FpMap; the solvers (src/fixedpoint/fp.h) solve any FpMap.
 *
 * It sits in core, below both, for the layers: a Fixed-Point RNN layer is a fixed point itself,
 * but a layer must not depend on the solvers above it. So a layer builds its FpMap and hands it
 * to an FpSolve its caller gave it; the caller (a model) picks the solver from the one solver
 * table, which therefore serves the implicit LMs and the FP-RNNs alike.
 */
#ifndef IMPLICIT_CORE_FPMAP_H
#define IMPLICIT_CORE_FPMAP_H

#include <stddef.h>

/* A map f: R^n -> R^n over a batch of nb samples (n = nb * per-sample size); the solver never
 * knows what z means. */
typedef struct {
    void *ctx;
    size_t n;      /* floats in z */
    int nb;        /* samples; n % nb == 0; per-sample residuals are over n/nb floats */
    /* z_out = f(z); gradient-free (no cache). z_out never aliases z. */
    void (*f)(void *ctx, float *z_out, const float *z);
    /* dz += g · ∂f/∂z, the vector-Jacobian product at the point the map was linearised at (the
     * model does a cached forward at z* before the adjoint solve). NULL if the map has none. */
    void (*vjp_z)(void *ctx, float *dz, const float *g);
} FpMap;

/* A solve asked of the caller: z = f(z) for m, from z (in: the start, out: the solution); a
 * sample of m is made of tokens of tok floats (for solvers whose residual is per token, the
 * FixedPointOptimizer's). The caller chose the solver and keeps its options, scratch and
 * statistics behind ctx. Returns IM_OK or the solver's status (IM_EINVAL bad options, IM_ENUM a
 * non-finite f). */
typedef struct {
    int (*run)(void *ctx, const FpMap *m, size_t tok, float *z);
    void *ctx;
} FpSolve;

#endif
