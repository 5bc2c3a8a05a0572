/* fp.h: the fixed-point seam (STYLE §8.4): one map interface and the solvers behind it, shared
 * by the implicit LMs (spec implicit-lm §3-§5) and the Fixed-Point RNNs (spec fp-rnn §1).
 *
 * A map is f: R^n -> R^n over a batch of `nb` samples (n = nb * per-sample size); the solver
 * never knows what z means. Forward solves are gradient-free: f is called with no cache, so a
 * solve stores nothing and its memory does not grow with the number of iterations. Gradients are
 * the caller's business (phantom / unrolled steps call the model's own cached forward), except
 * the implicit (IFT) backward, which is a second fixed point solved here through `vjp_z`.
 *
 * Solvers and their semantics:
 *   FP_PICARD   torchdeq fixed_point_iter (spec §3.1): undamped unless tau < 1; per-sample
 *               residuals ‖f(x)−x‖ (abs) or ‖f(x)−x‖/(‖f(x)‖+1e-9) (rel); stop when EVERY sample is
 *               below tol; returns, per sample, the f-output with the lowest residual.
 *               With tau < 1 the step is torchdeq's damped one: fx = τ·f(x) + (1−τ)·x, and the
 *               residual and the returned value are those of the damped fx.
 *   FP_ANDERSON Anderson acceleration (type II) with history m and Tikhonov regularisation lambda,
 *               same stopping and lowest-residual return (torchdeq anderson semantics), one small
 *               least-squares system PER SAMPLE, so samples never interact. The mixing weight is
 *               anderson_beta (torchdeq calls it tau); `tau` is not used by Anderson. lambda is
 *               absolute, as in torchdeq: once a sample's ‖f(x)−x‖² falls well below lambda, the
 *               weights tend to uniform and the step to a plain average of the history, slower
 *               than Picard. Keep lambda well below ‖f(x)−x‖² at tol (per sample): fine for
 *               T·D-sized samples at tol 1e-3..0.05, too big for small vectors at tight tol or
 *               for tiny loss gradients in fp_adjoint (tests/test_fp.c uses 1e-12).
 *               Unlike torchdeq, the first two (plain) evaluations also count as candidates for
 *               the lowest residual, and steps are numbered by f evaluation (1 … iters).
 *   FP_BROYDEN  Broyden's good method on g(x) = f(x) − x with a low-rank inverse-Jacobian estimate
 *               (torchdeq broyden_solver, no line search), per sample like Anderson, the last
 *               broyden_m updates kept; a sample whose residual grows 100× over its lowest, or whose
 *               step is not finite, restarts from its best f-output with a cleared history.
 *               Same stopping and lowest-residual return as Picard (returns an f-output, where
 *               torchdeq returns the iterate). `tau` is not used. Solves affine maps whose
 *               Jacobian has eigenvalues above 1 (where Picard diverges): the IFT adjoint of a
 *               non-contractive model is such a map. See broyden.c.
 *   FP_EVALLOOP the reference's evaluation loop (spec §3.2): z ← (1−τ)z + τ f(z) for at most
 *               max_iter−1 calls, one global Frobenius ratio ‖f(z)−z‖/(1e-6+‖z‖) with the OLD
 *               iterate in the denominator, optional EMA (ema_alpha) of the f-outputs; returns the
 *               relaxed iterate (or the EMA) — the caller makes the final f call itself (with
 *               cache commits in sequential mode). Requires max_iter >= 2 (IM_EINVAL otherwise).
 *               Float arithmetic, exactly (tests replay it bitwise): z = (1−τ)·z + τ·zn and, with
 *               a = (float)ema_alpha, m = (1−a)·m + a·zn; norms are accumulated in double.
 *   FP_OPTIMIZER the Fixed-Point RNNs' FixedPointOptimizer (fpo.h, spec fp-rnn §1.4): per-token
 *               relative ∞-norm residuals (tokens of `tok` floats), per-sample damped steps from
 *               step0 that decay on lack of progress, stop when the `quantile` of the samples'
 *               best residuals is below tol (or every step fell below step_min, or max_iter);
 *               returns the damped iterate (not the best one).
 *
 * Every residual is accumulated in double; the iterates stay float. Options that come from a
 * config (max_iter, tol, tau, ema_alpha, lambda) are checked at solve time and give IM_EINVAL;
 * anderson_m outside [1, FP_ANDERSON_MAX_M] is a programmer error (CHECK): validate configs first.
 */
#ifndef IMPLICIT_FP_H
#define IMPLICIT_FP_H

#include <stddef.h>

#include "../core/fpmap.h" /* FpMap, FpSolve */


/* The solvers, listed once: id, config name, and where a config may choose it: FP_USE_SOLVE for the
 * implicit LMs' whole-sequence solves (model keys f_solver, b_solver), FP_USE_SEQ for their
 * per-token solve of the sequential mode (seq_solver), FP_USE_FPRNN for the Fixed-Point RNN
 * layers (fp_solver). Each has a row (scratch size, solve) in fp.c's SOLVERS; the key names, their
 * help and their messages come from this list (docs/extending.md). */
enum { FP_USE_SOLVE = 1, FP_USE_SEQ = 2, FP_USE_FPRNN = 4 };
#define FP_SOLVER_LIST(X)                                                                          \
    X(FP_PICARD, "fixed_point_iter", FP_USE_SOLVE | FP_USE_FPRNN)                                  \
    X(FP_EVALLOOP, "loop", FP_USE_SEQ)                                                             \
    X(FP_ANDERSON, "anderson", FP_USE_SOLVE | FP_USE_SEQ | FP_USE_FPRNN)                           \
    X(FP_BROYDEN, "broyden", FP_USE_SOLVE | FP_USE_SEQ | FP_USE_FPRNN)                             \
    X(FP_OPTIMIZER, "fixed_point_optimizer", FP_USE_FPRNN)
#define FP_SOLVER_ID(id, name, use) id,
typedef enum { FP_SOLVER_LIST(FP_SOLVER_ID) FP_N_SOLVER } FpSolver;
#undef FP_SOLVER_ID
typedef enum { FP_STOP_ABS = 0, FP_STOP_REL = 1 } FpStop;

/* Largest Anderson history: the per-sample (m+1)×(m+1) system lives on the stack. */
#define FP_ANDERSON_MAX_M 16
/* Largest Broyden history (the per-sample coefficients live on the stack). */
#define FP_BROYDEN_MAX_M 64

typedef struct {
    FpSolver solver;
    int max_iter;        /* f evaluations at most (FP_EVALLOOP: at most max_iter-1 in the loop) */
    double tol;
    FpStop stop;         /* FP_PICARD / FP_ANDERSON; FP_EVALLOOP is always relative */
    float tau;           /* damping: z ← (1−τ)z + τ f(z); 1 = undamped */
    int anderson_m;      /* history size (torchdeq default 6), 1 … FP_ANDERSON_MAX_M */
    double anderson_lambda; /* Tikhonov regularisation (1e-4) */
    double anderson_beta;   /* mixing (1.0) */
    double ema_alpha;    /* FP_EVALLOOP only: 0 = off */
    int broyden_m;       /* FP_BROYDEN: rank-one updates kept (8), 1 … FP_BROYDEN_MAX_M */
    /* FP_OPTIMIZER only (fpo.h's FpoOpts; its threshold is tol, its cap max_iter) */
    float step0;         /* initial damping step (0.99) */
    float decay;         /* step decay on lack of progress (0.9; 1 = never) */
    int patience;        /* evaluations without a new best before decaying (15) */
    double quantile;     /* batch quantile of the best residuals that must be below tol (0.75) */
    double step_min;     /* stop once every sample's step fell below this (1e-3) */
    double res_eps;      /* residual denominator guard (1e-8) */
    size_t tok;          /* floats per token of a sample (0: the whole sample is one token) */
} FpOpts;

/* Per-solve statistics. Per-sample arrays are owned by the caller (may be NULL).
 * PICARD/ANDERSON: abs_res and rel_res are each mode's own lowest (torchdeq logs both), best_step
 * and the per-sample arrays follow the stop mode. EVALLOOP: abs_res = ‖zn−z‖ (‖m'−m‖ with EMA) and
 * rel_res = r of the last iteration (whole batch), best_step = iters; sample_res[b] = that
 * iteration's ratio computed over sample b alone, sample_step[b] = the first iteration at which
 * sample b's own ratio was below tol (iters if never): per-sample diagnostics of a global loop.
 * OPTIMIZER: rel_res = the quantile of the samples' best residuals, abs_res 0, best_step = iters,
 * sample_res = each sample's best residual, sample_step = the evaluation at which it first fell
 * below tol (iters + 1 if never). */
typedef struct {
    int iters;           /* f evaluations done */
    int converged;       /* every sample (PICARD/ANDERSON) or the global ratio (EVALLOOP) below tol */
    double abs_res;      /* mean over samples of the lowest absolute residual (EVALLOOP: last global) */
    double rel_res;      /* same, relative */
    double best_step;    /* mean over samples of the step index that gave the lowest residual */
    double best_max;     /* the worst sample's lowest residual in the stop mode (EVALLOOP: rel_res) */
    float *sample_res;   /* (nb) lowest residual of each sample in the stop mode | NULL */
    int *sample_step;    /* (nb) step of that residual | NULL */
} FpStats;

/* "fixed_point_iter | anderson | broyden": the names of the solvers with `use` (FP_USE_*). */
const char *fp_solver_names(int use);
/* The solver called `name` if it has `use`, else -1. */
int fp_solver_parse(const char *name, int use);

/* Picard, 40 iters, tol 1e-3, abs, tau 1, m 6, lambda 1e-4, broyden_m 8; the FixedPointOptimizer's
 * own fields as fpo_opts_default. */
void fp_opts_default(FpOpts *o);

/* Floats of scratch fp_solve / fp_adjoint need for a map of n floats and nb samples:
 * PICARD 2n + 6nb + 2, ANDERSON 2·m·n + 6nb + 2, BROYDEN (2·broyden_m + 5)·n + 6nb + 2,
 * EVALLOOP n (2n with EMA), OPTIMIZER n + 8nb + 4. Never depends on
 * max_iter. Give malloc'd or arena memory: the solvers keep a few doubles in it. */
size_t fp_scratch_floats(const FpOpts *o, size_t n, int nb);

/* Solve z = f(z) starting from z (in: z0, out: the solution as defined per solver above).
 * z:(n). st may be NULL. scratch: fp_scratch_floats floats. Returns IM_OK; IM_EINVAL for bad
 * options; IM_ENUM if f produced NaN/inf (err_msg says at which evaluation; z then holds the last
 * finite iterate: the input of the failing f call, or the EMA for EVALLOOP with ema_alpha > 0). */
int fp_solve(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);

/* Implicit-function-theorem backward: solve y = g + y·J (J = ∂f/∂z at the linearisation point)
 * with the given solver options (torchdeq b_* options: start from 0, lowest-residual return),
 * i.e. fp_solve on the map h(y) = g + vjp_z(y). y:(n) written, g:(n). Requires m->vjp_z and
 * PICARD, ANDERSON or BROYDEN (EVALLOOP gives IM_EINVAL). Same scratch and status codes as fp_solve.
 * Anderson here meets loss gradients, which are often tiny: see the note on lambda above. */
int fp_adjoint(const FpMap *m, float *y, const float *g, const FpOpts *o, FpStats *st, float *scratch);

/* A solver's row: what fp_scratch_floats and fp_solve look up in fp.c's SOLVERS for a listed
 * solver. A row outside the table (a test's) runs through fp_solve_ops with the same checks. */
typedef struct {
    size_t (*scratch)(const FpOpts *o, size_t n, int nb);
    int (*solve)(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);
} FpSolverOps;

/* The table's row of solver s. */
const FpSolverOps *fp_solver_ops(FpSolver s);
/* fp_solve with the row ops instead of o->solver's. */
int fp_solve_ops(const FpSolverOps *ops, const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch);

/* What the solves of one FpSolve added up to. */
typedef struct {
    int iters;        /* f evaluations, summed over the solves */
    int solves;       /* solves run (per-token solves: tokens) */
    int converged;    /* the last solve's */
    double best_max;  /* the worst of the solves' best_max */
} FpTally;

/* An FpSolve (core/fpmap.h) for a caller that owns the solver: fp_solve_ops with ops (NULL: the
 * table's row of o.solver), o (its tok set by each call) and scratch (fp_scratch_floats of the
 * largest map it will see), adding each successful solve to tally (the caller zeroes it). */
typedef struct {
    const FpSolverOps *ops;
    FpOpts o;
    float *scratch;
    FpTally tally;
} FpSolveCtx;
FpSolve fp_solve_call(FpSolveCtx *s);

/* Power iteration on J^T via vjp_z: spectral radius estimate after `iters` steps (diagnostic,
 * spec §5.5): ‖Jᵀv‖/‖v‖ at the last step, which converges to |λ_max| when the dominant eigenvalue
 * is real. J is block-diagonal over samples, so this estimates the largest radius of the batch.
 * v:(n) nonzero start vector (overwritten by the last unit iterate); scratch:(n) floats (any
 * fp_scratch_floats size is enough). iters >= 1. Returns NAN if vjp_z produced NaN/inf. */
double fp_spectral_radius(const FpMap *m, float *v, int iters, float *scratch);

#endif
