/* fp.c: the fixed-point seam (fp.h, STYLE §8.4): Picard (torchdeq fixed_point_iter, spec
 * implicit-lm §3.1), the reference's evaluation loop (§3.2), the IFT adjoint solve (§5.4) and the
 * power-iteration spectral radius (§5.5). Anderson acceleration is in anderson.c, Broyden in
 * broyden.c, the per-sample residual tracking they all use in fp_track.c.
 *
 * The solvers see a map only through FpMap: n floats split into nb equal samples. All iterate
 * arithmetic is float; every norm is accumulated in double. A solve allocates nothing: its buffers
 * are carved from the caller's scratch (fp_scratch_floats). Per-sample work is one thread per
 * sample, so results are bit-identical at any thread count.
 * Out of scope: gradients through the iterations (phantom / unrolled steps are the model's own
 * cached forwards).
 */
#include "fp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_impl.h"

void fp_opts_default(FpOpts *o) {
    memset(o, 0, sizeof *o);
    o->solver = FP_PICARD;
    o->max_iter = 40;
    o->tol = 1e-3;
    o->stop = FP_STOP_ABS;
    o->tau = 1.0f;
    o->anderson_m = 6;
    o->anderson_lambda = 1e-4;
    o->anderson_beta = 1.0;
    o->ema_alpha = 0.0;
    o->broyden_m = 8;
    o->step0 = 0.99f;
    o->decay = 0.9f;
    o->patience = 15;
    o->quantile = 0.75;
    o->step_min = 1e-3;
    o->res_eps = 1e-8;
}

/* ---- Picard: torchdeq fixed_point_iter ------------------------------------------------------ */

static int picard(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    size_t n = m->n;
    float *x = scratch, *fx = scratch + n;
    FpTrack t;
    fp_track_init(&t, m, o->stop, scratch + 2 * n);
    /* z doubles as torchdeq's lowest_xest: it starts as z0 and takes f-outputs sample by sample */
    memcpy(x, z, n * sizeof(float));
    int iters = 0, converged = 0;
    for (int k = 1; k <= o->max_iter; k++) {
        m->f(m->ctx, fx, x);
        if (o->tau != 1.0f) {
            /* fx = tau * func(x) + (1 - tau) * x */
            for (size_t i = 0; i < n; i++) fx[i] = o->tau * fx[i] + (1.0f - o->tau) * x[i];
        }
        int done = fp_track_eval(&t, z, fx, x, k, o->tol, st);
        if (done < 0) return IM_ENUM;
        iters = k;
        if (done) {
            converged = 1;
            break;
        }
        float *tmp = x;         /* x = fx: swap the buffers instead of copying n floats */
        x = fx;
        fx = tmp;
    }
    fp_track_stats(&t, st, iters, converged);
    return IM_OK;
}

/* ---- the reference's evaluation loop (spec §3.2) --------------------------------------------- */

/* Sums of one evaluation-loop step over one sample's d floats, before anything is overwritten:
 * num = ‖zn − z‖² (EMA: ‖m' − m‖²), den = ‖z‖² (EMA: ‖m‖²). z, zn, ema: (d); ema may be NULL. */
static void evalloop_sums(const float *z, const float *zn, const float *ema, float a, size_t d,
                          double *num, double *den) {
    if (!ema) { /* sum (z - zn)^2 = num and sum z^2 = den, on the kernel's lanes */
        double s[2];
        k_resid_sumsq(z, zn, d, s);
        *num = s[0], *den = s[1];
        return;
    }
    double sn = 0.0, sd = 0.0;
    for (size_t i = 0; i < d; i++) {
        float mp = (1.0f - a) * ema[i] + a * zn[i];   /* the m' the update below will store */
        double diff = (double)mp - (double)ema[i], old = ema[i];
        sn += diff * diff;
        sd += old * old;
    }
    *num = sn;
    *den = sd;
}

static int evalloop(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    size_t n = m->n, d = n / (size_t)m->nb;
    int nb = m->nb;
    float *zn = scratch, *ema = o->ema_alpha > 0 ? scratch + n : NULL;
    float a = (float)o->ema_alpha, tau = o->tau;
    if (ema) memcpy(ema, z, n * sizeof(float));
    if (st && st->sample_step)
        for (int b = 0; b < nb; b++) st->sample_step[b] = 0;
    double r = INFINITY, num_all = INFINITY;
    int count = 0, converged = 0;
    /* REF: for count in range(f_thres - 1). With z0 = 0 the first ratio is ‖zn‖/1e-6, so the
     * first iteration never stops; we keep that, it is what defines `steps` in the paper. */
    for (count = 0; count <= o->max_iter - 2; count++) {
        m->f(m->ctx, zn, z);
        double num_b, den_b;
        num_all = 0.0;
        double den_all = 0.0;
        /* one sample at a time so the per-sample ratios come for free; the global sums add the
         * per-sample partials in sample order */
        for (int b = 0; b < nb; b++) {
            size_t off = (size_t)b * d;
            evalloop_sums(z + off, zn + off, ema ? ema + off : NULL, a, d, &num_b, &den_b);
            num_all += num_b;
            den_all += den_b;
            double rb = sqrt(num_b) / (1e-6 + sqrt(den_b));
            if (st && st->sample_res) st->sample_res[b] = (float)rb;
            if (st && st->sample_step && st->sample_step[b] == 0 && rb < o->tol)
                st->sample_step[b] = count + 1;
        }
        if (!isfinite(num_all)) {
            /* z (and the EMA) still hold the last finite iterate */
            if (ema) memcpy(z, ema, n * sizeof(float));
            if (st) {
                st->iters = count + 1;
                st->converged = 0;
            }
            return fp_nonfinite(count + 1);
        }
        /* one Frobenius ratio over the whole batch, OLD iterate (or old EMA) in the denominator;
         * the sums were taken before the updates below so a NaN leaves z untouched */
        r = sqrt(num_all) / (1e-6 + sqrt(den_all));
        if (ema)
            for (size_t i = 0; i < n; i++) ema[i] = (1.0f - a) * ema[i] + a * zn[i];
        for (size_t i = 0; i < n; i++) z[i] = (1.0f - tau) * z[i] + tau * zn[i];
        if (r < o->tol) {
            converged = 1;
            break;
        }
    }
    if (count > o->max_iter - 2) count = o->max_iter - 2;  /* the loop ran out: last count */
    if (ema) memcpy(z, ema, n * sizeof(float));
    if (st) {
        st->iters = count + 1;
        st->converged = converged;
        st->abs_res = sqrt(num_all);
        st->rel_res = r;
        st->best_step = count + 1;
        st->best_max = r;
        if (st->sample_step)
            for (int b = 0; b < nb; b++)
                if (st->sample_step[b] == 0) st->sample_step[b] = count + 1;
    }
    return IM_OK;
}

/* ---- the table: one row per FP_SOLVER_LIST entry ------------------------------------------------ */

static size_t picard_scratch(const FpOpts *o, size_t n, int nb) { (void)o; return 2 * n + fp_track_floats(nb); }
static size_t evalloop_scratch(const FpOpts *o, size_t n, int nb) { (void)nb; return o->ema_alpha > 0 ? 2 * n : n; }

/* Adding a solver: its FP_SOLVER_LIST entry (fp.h), its file with the two functions, its row here. */
static const FpSolverOps SOLVERS[] = {
    [FP_PICARD] = {picard_scratch, picard},
    [FP_EVALLOOP] = {evalloop_scratch, evalloop},
    [FP_ANDERSON] = {fp_anderson_scratch, fp_anderson},
    [FP_BROYDEN] = {fp_broyden_scratch, fp_broyden},
    [FP_OPTIMIZER] = {fp_optimizer_scratch, fp_optimizer},
};
#define FP_SOLVER_NAME(id, nm, u) [id] = {nm, u},
static const struct {
    const char *name;
    int use; /* FP_USE_* */
} NAMES[] = {FP_SOLVER_LIST(FP_SOLVER_NAME)};
#undef FP_SOLVER_NAME
_Static_assert(sizeof SOLVERS / sizeof SOLVERS[0] == FP_N_SOLVER, "one row per FpSolver");
_Static_assert(sizeof NAMES / sizeof NAMES[0] == FP_N_SOLVER, "one name per FpSolver");

static const FpSolverOps *row(FpSolver s) {
    CHECK((int)s >= 0 && s < FP_N_SOLVER && SOLVERS[s].solve, "unknown solver %d", (int)s);
    return &SOLVERS[s];
}

const FpSolverOps *fp_solver_ops(FpSolver s) { return row(s); }

const char *fp_solver_names(int use) {
    static char buf[8][128];
    char *b = buf[use & 7];
    if (!b[0])
        for (int i = 0, at = 0; i < FP_N_SOLVER; i++)
            if (NAMES[i].use & use) at += snprintf(b + at, sizeof buf[0] - (size_t)at, "%s%s", at ? " | " : "", NAMES[i].name);
    return b;
}

int fp_solver_parse(const char *name, int use) {
    for (int i = 0; name && i < FP_N_SOLVER; i++)
        if ((NAMES[i].use & use) && !strcmp(name, NAMES[i].name)) return i;
    return -1;
}

size_t fp_scratch_floats(const FpOpts *o, size_t n, int nb) {
    CHECK(o && nb >= 1, "fp_scratch_floats: NULL options or nb=%d", nb);
    return row(o->solver)->scratch(o, n, nb);
}

/* ---- entry points ---------------------------------------------------------------------------- */

static void check_map(const FpMap *m) {
    CHECK(m && m->f, "fixed-point map without f");
    CHECK(m->nb >= 1 && m->n > 0 && m->n % (size_t)m->nb == 0,
          "fixed-point map: n=%zu not divisible into nb=%d samples", m->n, m->nb);
}

/* Runtime check of the options that come from a config. */
static int check_opts(const FpOpts *o) {
    /* the Anderson system lives on the stack: its size is a hard limit, not a config error */
    if (o->solver == FP_ANDERSON)
        CHECK(o->anderson_m >= 1 && o->anderson_m <= FP_ANDERSON_MAX_M,
              "anderson_m=%d outside [1, %d]", o->anderson_m, FP_ANDERSON_MAX_M);
    if (o->solver == FP_BROYDEN)
        CHECK(o->broyden_m >= 1 && o->broyden_m <= FP_BROYDEN_MAX_M,
              "broyden_m=%d outside [1, %d]", o->broyden_m, FP_BROYDEN_MAX_M);
    if (o->solver == FP_EVALLOOP && o->max_iter < 2)
        return err_set(IM_EINVAL, "evaluation loop needs max_iter >= 2 (got %d)", o->max_iter);
    if (o->max_iter < 1) return err_set(IM_EINVAL, "fixed-point solve: max_iter %d < 1", o->max_iter);
    if (!(o->tol >= 0)) return err_set(IM_EINVAL, "fixed-point solve: tol %g < 0", o->tol);
    if (!(o->tau > 0 && o->tau <= 1))
        return err_set(IM_EINVAL, "fixed-point solve: tau %g outside (0, 1]", (double)o->tau);
    if (!(o->ema_alpha >= 0 && o->ema_alpha <= 1))
        return err_set(IM_EINVAL, "fixed-point solve: ema_alpha %g outside [0, 1]", o->ema_alpha);
    if (!(o->anderson_lambda >= 0) || !isfinite(o->anderson_beta))
        return err_set(IM_EINVAL, "Anderson: lambda %g < 0 or beta %g not finite",
                       o->anderson_lambda, o->anderson_beta);
    return IM_OK;
}

int fp_solve_ops(const FpSolverOps *ops, const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    /* shapes and NULLs are programmer errors; options may come from a user's config */
    check_map(m);
    CHECK(ops && ops->solve && z && o && scratch, "fp_solve: NULL solver row, z, options or scratch");
    int rc = check_opts(o);
    if (rc) return rc;
    if (st) st->best_max = 0;
    return ops->solve(m, z, o, st, scratch);
}

int fp_solve(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    CHECK(o, "fp_solve: NULL options");
    if ((int)o->solver < 0 || o->solver >= FP_N_SOLVER) return err_set(IM_EINVAL, "fp_solve: unknown solver %d", (int)o->solver);
    return fp_solve_ops(row(o->solver), m, z, o, st, scratch);
}

static int solve_call(void *ctx, const FpMap *m, size_t tok, float *z) {
    FpSolveCtx *s = ctx;
    FpStats st = {0};
    s->o.tok = tok;
    int rc = fp_solve_ops(s->ops ? s->ops : fp_solver_ops(s->o.solver), m, z, &s->o, &st, s->scratch);
    if (rc) return rc;
    s->tally.iters += st.iters;
    s->tally.solves += 1;
    s->tally.converged = st.converged;
    if (st.best_max > s->tally.best_max) s->tally.best_max = st.best_max;
    return IM_OK;
}

FpSolve fp_solve_call(FpSolveCtx *s) { return (FpSolve){solve_call, s}; }

/* The adjoint map h(y) = g + y·J, built on the model's vjp_z. */
typedef struct {
    const FpMap *m;
    const float *g;  /* (n) */
} AdjCtx;

static void adjoint_f(void *ctx, float *out, const float *y) {
    const AdjCtx *a = ctx;
    memcpy(out, a->g, a->m->n * sizeof(float));
    a->m->vjp_z(a->m->ctx, out, y);   /* accumulates y·J onto g */
}

int fp_adjoint(const FpMap *m, float *y, const float *g, const FpOpts *o, FpStats *st, float *scratch) {
    check_map(m);
    CHECK(m->vjp_z && y && g && o, "fp_adjoint: the map has no vjp_z, or a NULL buffer");
    if (o->solver == FP_EVALLOOP)
        return err_set(IM_EINVAL, "fp_adjoint: the evaluation loop is not an adjoint solver");
    AdjCtx a = {m, g};
    FpMap h = {&a, m->n, m->nb, adjoint_f, NULL};
    memset(y, 0, m->n * sizeof(float));   /* torchdeq backward: start from 0, so h(0) = g */
    int rc = fp_solve(&h, y, o, st, scratch);
    return rc ? err_wrap(rc, "IFT adjoint") : IM_OK;
}

double fp_spectral_radius(const FpMap *m, float *v, int iters, float *scratch) {
    check_map(m);
    CHECK(m->vjp_z && v && scratch && iters >= 1, "fp_spectral_radius: no vjp_z, NULL buffer or iters < 1");
    size_t n = m->n;
    /* plain power iteration with the norm ratio as estimate: it needs no eigenvector sign and
     * gives |λ| for a negative dominant eigenvalue too (a Rayleigh quotient would give λ) */
    double nv = 0.0;
    for (size_t i = 0; i < n; i++) nv += (double)v[i] * (double)v[i];
    nv = sqrt(nv);
    CHECK(nv > 0 && isfinite(nv), "fp_spectral_radius: start vector is zero or not finite");
    for (size_t i = 0; i < n; i++) v[i] = (float)(v[i] / nv);
    double est = 0.0;
    for (int it = 0; it < iters; it++) {
        memset(scratch, 0, n * sizeof(float));
        m->vjp_z(m->ctx, scratch, v);   /* u = Jᵀ v with ‖v‖ = 1, so ‖u‖ is the ratio */
        double nu = 0.0;
        for (size_t i = 0; i < n; i++) nu += (double)scratch[i] * (double)scratch[i];
        est = sqrt(nu);
        if (!isfinite(est)) return NAN;
        if (est == 0.0) return 0.0;   /* v is in the null space: J^T v = 0 */
        for (size_t i = 0; i < n; i++) v[i] = (float)(scratch[i] / est);
    }
    return est;
}
