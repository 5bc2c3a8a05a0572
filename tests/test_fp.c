/* test_fp.c: the fixed-point seam (src/fixedpoint, STYLE §8.11 item 4; spec implicit-lm §3, §5.4,
 * §5.5, §13 item 4).
 *
 * Maps are per-sample affine f(z)_b = A_b z_b + c_b (exact fixed point (I−A_b)⁻¹c_b, solved in
 * double here) or f(z)_b = tanh(A_b z_b + c_b). The tests check:
 *  - Picard: convergence to the exact solution; the stop rule (every sample below tol: the batch
 *    runs exactly as long as its slowest sample alone, and one evaluation fewer leaves that sample
 *    above tol); per-sample stats and the returned tensor against a hand-written torchdeq loop;
 *    the lowest-residual return on a map that diverges after a few steps (best_step = argmin);
 *  - Anderson: same fixed point in fewer f calls than Picard on a slowly contracting map (affine
 *    and tanh), convergence where Picard diverges (eigenvalues in (−1.5, 0.9)), samples that never
 *    interact (batch = each sample alone, bitwise);
 *  - Broyden: the exact fixed point in fewer f calls than Picard (affine with m 32 and m 4, tanh),
 *    convergence on affine maps with eigenvalues above 1 (Picard diverges; also as an IFT
 *    adjoint), the restart after a residual spike (from the best f-output), samples independent;
 *  - the evaluation loop: bitwise equal to a hand-written §3.2 loop (plain and EMA), the first
 *    iteration cannot stop from z0 = 0, max_iter = 1 rejected;
 *  - the adjoint: exact on an affine map; on the tanh map the IFT bias gradient equals central
 *    finite differences of the converged solve AND backprop through a long unrolled solve;
 *  - the spectral radius of symmetric maps; NaN/inf in f or vjp gives IM_ENUM and keeps the last
 *    finite iterate; invalid options give IM_EINVAL.
 * TH_VERBOSE=1 prints the measured numbers.
 */
#include <stdint.h>

#include "th.h"
#include "../src/core/check.h"
#include "../src/fixedpoint/fp.h"

static int verbose;
#define NOTE(...) do { if (verbose) { printf("  " __VA_ARGS__); printf("\n"); } } while (0)

/* ---- test maps --------------------------------------------------------------------------------- */

typedef struct {
    int nb, d;
    const float *A; /* (nb, d, d) row-major per-sample matrix */
    const float *c; /* (nb, d) offset (affine) or bias (tanh) */
    int is_tanh;
    float *s;       /* (nb, d) 1 − tanh² at the linearisation point | NULL (affine) */
    long calls, vjp_calls;
    long nan_at, vjp_nan_at; /* the call (1-based) that writes a NaN; 0 = never */
    float *last_in; /* (nb, d) input of the last f call | NULL */
    long spike_at;  /* the call (1-based) whose output is multiplied by 1e6; 0 = never */
} Map;

static void map_f(void *ctx, float *out, const float *z) {
    Map *m = ctx;
    m->calls++;
    if (m->last_in) memcpy(m->last_in, z, (size_t)m->nb * m->d * sizeof(float));
    for (int b = 0; b < m->nb; b++)
        for (int i = 0; i < m->d; i++) {
            const float *a = m->A + ((size_t)b * m->d + i) * m->d, *zb = z + (size_t)b * m->d;
            double acc = m->c[b * m->d + i];
            for (int j = 0; j < m->d; j++) acc += (double)a[j] * zb[j];
            out[b * m->d + i] = m->is_tanh ? (float)tanh(acc) : (float)acc;
        }
    if (m->calls == m->nan_at) out[m->d / 2] = NAN;
    if (m->calls == m->spike_at)
        for (int i = 0; i < m->nb * m->d; i++) out[i] *= 1e6f;
}

/* dz_b += A_bᵀ (s_b ⊙ g_b): the Jacobian transpose at the linearisation point */
static void map_vjp(void *ctx, float *dz, const float *g) {
    Map *m = ctx;
    m->vjp_calls++;
    for (int b = 0; b < m->nb; b++)
        for (int j = 0; j < m->d; j++) {
            double acc = 0.0;
            for (int i = 0; i < m->d; i++) {
                size_t r = (size_t)b * m->d + i;
                acc += (double)m->A[r * m->d + j] * g[r] * (m->s ? m->s[r] : 1.0f);
            }
            dz[b * m->d + j] += (float)acc;
        }
    if (m->vjp_calls == m->vjp_nan_at) dz[0] = INFINITY;
}

/* s = 1 − tanh(A z + c)²: linearise the tanh map at z */
static void map_linearise(Map *m, const float *z) {
    for (int b = 0; b < m->nb; b++)
        for (int i = 0; i < m->d; i++) {
            double acc = m->c[b * m->d + i];
            for (int j = 0; j < m->d; j++)
                acc += (double)m->A[((size_t)b * m->d + i) * m->d + j] * z[b * m->d + j];
            double t = tanh(acc);
            m->s[b * m->d + i] = (float)(1.0 - t * t);
        }
}

static FpMap fpmap(Map *m) {
    FpMap f = {m, (size_t)m->nb * m->d, m->nb, map_f, map_vjp};
    return f;
}

/* The one-sample map of sample b of m (shares its matrices). */
static Map map_sample(const Map *m, int b) {
    Map s = {1, m->d, m->A + (size_t)b * m->d * m->d, m->c + (size_t)b * m->d, m->is_tanh,
             m->s ? m->s + (size_t)b * m->d : NULL, 0, 0, 0, 0, NULL, 0};
    return s;
}

/* A = scale · G / ‖G‖_F with G Gaussian: ‖A‖₂ ≤ scale. */
static void fill_contractive(float *A, int d, float scale, Rng *r) {
    double ss = 0.0;
    for (int i = 0; i < d * d; i++) {
        A[i] = rng_normal(r);
        ss += (double)A[i] * A[i];
    }
    for (int i = 0; i < d * d; i++) A[i] = (float)(A[i] * scale / sqrt(ss));
}

/* A = Q diag(lam) Qᵀ with Q a random orthogonal matrix (Gram–Schmidt in double). */
static void fill_symmetric(float *A, int d, const double *lam, Rng *r) {
    double Q[32 * 32];
    CHECK(d <= 32, "fill_symmetric: d too big");
    for (int k = 0; k < d; k++) {
        double *q = Q + k * d;
        for (int i = 0; i < d; i++) q[i] = rng_normal(r);
        for (int p = 0; p < k; p++) {
            double dot = 0.0;
            for (int i = 0; i < d; i++) dot += q[i] * Q[p * d + i];
            for (int i = 0; i < d; i++) q[i] -= dot * Q[p * d + i];
        }
        double nq = 0.0;
        for (int i = 0; i < d; i++) nq += q[i] * q[i];
        for (int i = 0; i < d; i++) q[i] /= sqrt(nq);
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double acc = 0.0;
            for (int k = 0; k < d; k++) acc += Q[k * d + i] * lam[k] * Q[k * d + j];
            A[i * d + j] = (float)acc;
        }
}

/* Solve (I − A) x = c (transpose = 0) or (I − A)ᵀ x = c (transpose = 1) in double, d <= 32. */
static void solve_exact(double *x, const float *A, const float *c, int d, int transpose) {
    double M[32 * 33];
    CHECK(d <= 32, "solve_exact: d too big");
    for (int i = 0; i < d; i++) {
        for (int j = 0; j < d; j++)
            M[i * (d + 1) + j] = (i == j) - (double)(transpose ? A[j * d + i] : A[i * d + j]);
        M[i * (d + 1) + d] = c[i];
    }
    for (int k = 0; k < d; k++) {
        int p = k;
        for (int i = k + 1; i < d; i++)
            if (fabs(M[i * (d + 1) + k]) > fabs(M[p * (d + 1) + k])) p = i;
        for (int j = 0; j <= d; j++) {
            double t = M[k * (d + 1) + j];
            M[k * (d + 1) + j] = M[p * (d + 1) + j];
            M[p * (d + 1) + j] = t;
        }
        for (int i = k + 1; i < d; i++) {
            double l = M[i * (d + 1) + k] / M[k * (d + 1) + k];
            for (int j = k; j <= d; j++) M[i * (d + 1) + j] -= l * M[k * (d + 1) + j];
        }
    }
    for (int i = d - 1; i >= 0; i--) {
        double s = M[i * (d + 1) + d];
        for (int j = i + 1; j < d; j++) s -= M[i * (d + 1) + j] * x[j];
        x[i] = s / M[i * (d + 1) + i];
    }
}

/* Max relative error of z against the exact fixed point (or adjoint) of every sample. */
static double exact_err(const Map *m, const float *z, int transpose, const float *rhs) {
    float ex[64 * 32];
    CHECK(m->nb * m->d <= 64 * 32, "exact_err: too big");
    for (int b = 0; b < m->nb; b++) {
        double x[32];
        solve_exact(x, m->A + (size_t)b * m->d * m->d, (rhs ? rhs : m->c) + b * m->d, m->d, transpose);
        for (int i = 0; i < m->d; i++) ex[b * m->d + i] = (float)x[i];
    }
    return th_rel_err(z, ex, (size_t)m->nb * m->d);
}

/* fp_solve with a scratch of exactly fp_scratch_floats floats (ASan sees any overrun). */
static int solve(Map *m, float *z, const FpOpts *o, FpStats *st) {
    FpMap f = fpmap(m);
    float *scr = th_alloc(fp_scratch_floats(o, f.n, f.nb));
    int rc = fp_solve(&f, z, o, st, scr);
    free(scr);
    return rc;
}

static FpOpts opts(FpSolver s, int max_iter, double tol, FpStop stop) {
    FpOpts o;
    fp_opts_default(&o);
    o.solver = s;
    o.max_iter = max_iter;
    o.tol = tol;
    o.stop = stop;
    return o;
}

/* ---- a hand-written torchdeq fixed_point_iter (spec §3.1), undamped ---------------------------- */

#define NBMAX 8
typedef struct {
    double low[2][NBMAX]; /* [abs, rel] lowest residual per sample */
    int step[2][NBMAX];
    double last[NBMAX];   /* stop-mode residual of the last step */
    int iters;
} RefStats;

static void ref_picard(Map *m, float *best, const float *z0, int max_iter, double tol, FpStop stop,
                       RefStats *rs) {
    size_t n = (size_t)m->nb * m->d;
    float *x = th_alloc(n), *fx = th_alloc(n);
    memcpy(x, z0, n * sizeof(float));
    memcpy(best, z0, n * sizeof(float));
    for (int b = 0; b < m->nb; b++)
        for (int md = 0; md < 2; md++) rs->low[md][b] = 1e8, rs->step[md][b] = 0;
    for (int k = 1; k <= max_iter; k++) {
        map_f(m, fx, x);
        double worst = 0.0;
        for (int b = 0; b < m->nb; b++) {
            double sd = 0.0, sf = 0.0;
            for (int i = b * m->d; i < (b + 1) * m->d; i++) {
                double df = (double)fx[i] - (double)x[i];
                sd += df * df;
                sf += (double)fx[i] * fx[i];
            }
            double r[2] = {sqrt(sd), sqrt(sd) / (sqrt(sf) + 1e-9)};
            for (int md = 0; md < 2; md++)
                if (r[md] < rs->low[md][b]) {
                    rs->low[md][b] = r[md];
                    rs->step[md][b] = k;
                    if (md == (int)stop) memcpy(best + b * m->d, fx + b * m->d, m->d * sizeof(float));
                }
            rs->last[b] = r[stop];
            if (r[stop] > worst) worst = r[stop];
        }
        rs->iters = k;
        if (worst < tol) break;
        memcpy(x, fx, n * sizeof(float));
    }
    free(x);
    free(fx);
}

/* Compare the solver's stats and output with the reference loop. */
static void check_against_ref(Map *m, const float *z0, const FpOpts *o, const char *what) {
    size_t n = (size_t)m->nb * m->d;
    float *z = th_alloc(n), *zr = th_alloc(n), sres[NBMAX];
    int sstep[NBMAX];
    RefStats rs;
    ref_picard(m, zr, z0, o->max_iter, o->tol, o->stop, &rs);
    memcpy(z, z0, n * sizeof(float));
    FpStats st = {0};
    st.sample_res = sres;
    st.sample_step = sstep;
    long c0 = m->calls;
    TH_CHECK(solve(m, z, o, &st) == IM_OK, "%s: solve failed", what);
    TH_CHECK(st.iters == rs.iters && m->calls - c0 == st.iters, "%s: iters %d ref %d calls %ld", what,
             st.iters, rs.iters, m->calls - c0);
    TH_CHECK(!memcmp(z, zr, n * sizeof(float)), "%s: returned tensor differs from the reference", what);
    double ma = 0, mr = 0, ms = 0;
    int same = 1;
    for (int b = 0; b < m->nb; b++) {
        same &= sres[b] == (float)rs.low[o->stop][b] && sstep[b] == rs.step[o->stop][b];
        ma += rs.low[0][b] / m->nb;
        mr += rs.low[1][b] / m->nb;
        ms += (double)rs.step[o->stop][b] / m->nb;
    }
    TH_CHECK(same, "%s: per-sample lowest residuals/steps differ from the reference", what);
    TH_CHECK(fabs(st.abs_res - ma) <= 1e-6 * ma && fabs(st.rel_res - mr) <= 1e-6 * mr &&
             fabs(st.best_step - ms) < 1e-12,
             "%s: means abs %g/%g rel %g/%g step %g/%g", what, st.abs_res, ma, st.rel_res, mr,
             st.best_step, ms);
    free(z);
    free(zr);
}

/* ---- Picard ----------------------------------------------------------------------------------- */

static void test_picard_converges(Rng *r) {
    enum { NB = 3, D = 12 };
    float A[NB * D * D], c[NB * D], z0[NB * D], z[NB * D], sres[NB];
    const float scale[NB] = {0.3f, 0.9f, 0.6f}; /* sample 1 contracts slowest */
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, scale[b], r);
    th_fill_normal(c, NB * D, r, 1.0f);
    th_fill_normal(z0, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};

    FpOpts o = opts(FP_PICARD, 1000, 1e-5, FP_STOP_ABS);
    memcpy(z, z0, sizeof z);
    FpStats st = {0};
    st.sample_res = sres;
    TH_CHECK(solve(&m, z, &o, &st) == IM_OK && st.converged, "picard: not converged");
    double err = exact_err(&m, z, 0, NULL);
    TH_CHECK(err < 1e-5, "picard: error to the exact fixed point %.3g", err);
    for (int b = 0; b < NB; b++) TH_CHECK(sres[b] < 1e-5, "picard: sample %d residual %g", b, sres[b]);
    NOTE("picard affine: %d iters, err to exact %.2e", st.iters, err);

    /* stop rule: the batch runs exactly as long as its slowest sample alone */
    int alone[NB], most = 0, least = 1 << 30;
    for (int b = 0; b < NB; b++) {
        Map mb = map_sample(&m, b);
        float zb[D];
        memcpy(zb, z0 + b * D, sizeof zb);
        FpStats sb = {0};
        TH_CHECK(solve(&mb, zb, &o, &sb) == IM_OK && sb.converged, "picard: sample %d alone", b);
        alone[b] = sb.iters;
        most = alone[b] > most ? alone[b] : most;
        least = alone[b] < least ? alone[b] : least;
    }
    TH_CHECK(st.iters == most && alone[1] == most && least < most,
             "picard stop rule: batch %d, alone %d %d %d", st.iters, alone[0], alone[1], alone[2]);
    /* one evaluation fewer: the slow sample is still above tol, the fast ones are below */
    FpOpts o2 = o;
    o2.max_iter = st.iters - 1;
    memcpy(z, z0, sizeof z);
    TH_CHECK(solve(&m, z, &o2, &st) == IM_OK && !st.converged && st.iters == o2.max_iter,
             "picard: stopped early or converged one step too soon");
    TH_CHECK(sres[1] >= 1e-5 && sres[0] < 1e-5, "picard: residuals one step early %g %g", sres[0], sres[1]);

    check_against_ref(&m, z0, &o, "picard abs");
    FpOpts orel = opts(FP_PICARD, 1000, 1e-6, FP_STOP_REL);
    check_against_ref(&m, z0, &orel, "picard rel");
    FpOpts omax = opts(FP_PICARD, 7, 0.0, FP_STOP_ABS); /* tol 0: runs max_iter */
    check_against_ref(&m, z0, &omax, "picard max_iter");

    /* damping: with tau < 1 it still converges to the same point */
    FpOpts od = o;
    od.tau = 0.7f;
    memcpy(z, z0, sizeof z);
    TH_CHECK(solve(&m, z, &od, &st) == IM_OK && st.converged, "picard damped: not converged");
    err = exact_err(&m, z, 0, NULL);
    TH_CHECK(err < 3e-5, "picard damped: error to exact %.3g", err);
}

static void test_picard_lowest(void) {
    /* Diagonal maps with one expanding direction (1.3, 1.5) whose initial error is tiny: the
     * residual first falls (fast directions), then grows. z0 = 0; fixed points x* are chosen. */
    enum { NB = 2, D = 3 };
    const float diag[NB][D] = {{0.1f, 1.3f, 0.05f}, {0.2f, 1.5f, 0.1f}};
    const float xs[NB][D] = {{10.0f, 1e-3f, 1.0f}, {5.0f, 1e-4f, 2.0f}};
    float A[NB * D * D] = {0}, c[NB * D], z[NB * D] = {0}, zero[NB * D] = {0};
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < D; i++) {
            A[(b * D + i) * D + i] = diag[b][i];
            c[b * D + i] = (1.0f - diag[b][i]) * xs[b][i];
        }
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    FpOpts o = opts(FP_PICARD, 40, 1e-12, FP_STOP_ABS);
    RefStats rs;
    float zr[NB * D];
    ref_picard(&m, zr, zero, 40, 1e-12, FP_STOP_ABS, &rs);
    int sstep[NB];
    float sres[NB];
    FpStats st = {0};
    st.sample_step = sstep;
    st.sample_res = sres;
    TH_CHECK(solve(&m, z, &o, &st) == IM_OK && !st.converged && st.iters == 40,
             "lowest: should run all 40 iterations");
    for (int b = 0; b < NB; b++) {
        /* the argmin is an interior step and far below the last residual */
        TH_CHECK(sstep[b] == rs.step[0][b] && sstep[b] > 2 && sstep[b] < 40,
                 "lowest: sample %d best_step %d ref %d", b, sstep[b], rs.step[0][b]);
        TH_CHECK(rs.last[b] > 1e3 * sres[b], "lowest: sample %d last %g lowest %g", b, rs.last[b], sres[b]);
        NOTE("lowest residual: sample %d argmin step %d (res %.3g, last %.3g)", b, sstep[b], sres[b], rs.last[b]);
    }
    TH_CHECK(sstep[0] != sstep[1], "lowest: samples should have different argmins");
    TH_CHECK(fabs(st.best_step - 0.5 * (sstep[0] + sstep[1])) < 1e-12, "lowest: best_step not the mean");
    TH_CHECK(!memcmp(z, zr, sizeof z), "lowest: returned tensor is not the argmin f-output");
    check_against_ref(&m, zero, &o, "lowest");
}

/* ---- Anderson --------------------------------------------------------------------------------- */

/* Solve from z0 with Picard and Anderson; returns the f calls of each through pc, ac. */
static void race(Map *m, const float *z0, double tol, int *pc, int *ac, float *zp, float *za) {
    size_t n = (size_t)m->nb * m->d;
    FpOpts op = opts(FP_PICARD, 5000, tol, FP_STOP_ABS), oa = op;
    oa.solver = FP_ANDERSON;
    /* lambda is absolute (torchdeq): with these tiny maps ‖G‖² reaches 1e-10 near tol, so the
     * default 1e-4 would swamp the Gram matrix and turn the mix into an average */
    oa.anderson_lambda = 1e-12;
    FpStats sp = {0}, sa = {0};
    memcpy(zp, z0, n * sizeof(float));
    memcpy(za, z0, n * sizeof(float));
    long c0 = m->calls;
    TH_CHECK(solve(m, zp, &op, &sp) == IM_OK && sp.converged, "race: picard did not converge");
    *pc = (int)(m->calls - c0);
    c0 = m->calls;
    TH_CHECK(solve(m, za, &oa, &sa) == IM_OK && sa.converged, "race: anderson did not converge");
    *ac = (int)(m->calls - c0);
    TH_CHECK(*pc == sp.iters && *ac == sa.iters, "race: iters != calls");
}

static void test_anderson_faster(Rng *r) {
    enum { NB = 2, D = 16 };
    float A[NB * D * D], c[NB * D], z0[NB * D], zp[NB * D], za[NB * D];
    double lam[D];
    /* slowly contracting symmetric affine maps: eigenvalues in [-0.5, 0.98] */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = -0.5 + 1.48 * i / (D - 1);
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    th_fill_normal(c, NB * D, r, 1.0f);
    th_fill_normal(z0, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    int pc, ac;
    race(&m, z0, 1e-5, &pc, &ac, zp, za);
    double ep = exact_err(&m, zp, 0, NULL), ea = exact_err(&m, za, 0, NULL);
    TH_CHECK(ep < 1e-3 && ea < 1e-4, "anderson affine: err picard %.3g anderson %.3g", ep, ea);
    TH_CHECK(ac * 4 < pc, "anderson affine: %d calls vs picard %d", ac, pc);
    NOTE("affine, eigenvalues in [-0.5, 0.98], tol 1e-5 abs: picard %d calls (err %.2e), anderson %d (err %.2e)",
         pc, ep, ac, ea);

    /* the nonlinear map: tanh(W z + b) with ‖W‖₂ = 0.95 */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = i % 2 ? 0.95 : -0.95 + 0.1 * i / D;
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    th_fill_normal(c, NB * D, r, 0.3f);
    Map mt = {NB, D, A, c, 1, NULL, 0, 0, 0, 0, NULL, 0};
    race(&mt, z0, 1e-6, &pc, &ac, zp, za);
    double e = th_rel_err(za, zp, NB * D);
    TH_CHECK(e < 1e-4, "anderson tanh: differs from picard by %.3g", e);
    /* margin 1.5x: over 300 seeds the closest was 27 vs 53 calls */
    TH_CHECK(3 * ac < 2 * pc, "anderson tanh: %d calls vs picard %d", ac, pc);
    NOTE("tanh, |W|_2 = 0.95, tol 1e-6 abs: picard %d calls, anderson %d (rel diff %.2e)", pc, ac, e);
}

static void test_anderson_robust(Rng *r) {
    enum { NB = 2, D = 16 };
    float A[NB * D * D], c[NB * D], z0[NB * D], zp[NB * D], za[NB * D];
    double lam[D];
    th_fill_normal(z0, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    /* Picard diverges (eigenvalue -1.4), Anderson converges to the exact solution */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = -1.4 + 2.25 * i / (D - 1);
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    th_fill_normal(c, NB * D, r, 1.0f);
    FpOpts o = opts(FP_PICARD, 200, 1e-5, FP_STOP_ABS);
    FpStats st = {0};
    memcpy(zp, z0, sizeof zp);
    TH_CHECK(solve(&m, zp, &o, &st) == IM_OK && !st.converged && st.abs_res > 1e-2,
             "diverging: picard should fail (res %g)", st.abs_res);
    double pres = st.abs_res;
    o.solver = FP_ANDERSON;
    o.anderson_m = 8;
    memcpy(za, z0, sizeof za);
    TH_CHECK(solve(&m, za, &o, &st) == IM_OK && st.converged, "diverging: anderson did not converge");
    double ea = exact_err(&m, za, 0, NULL);
    TH_CHECK(ea < 1e-4, "diverging: anderson err to exact %.3g", ea);
    NOTE("eigenvalues in [-1.4, 0.85]: picard lowest res %.3g after 200, anderson m=8 %d calls (err %.2e)",
         pres, st.iters, ea);

    /* m = 1 has weight 1 on the one slot: x ← β f(x) + (1−β) x in double, returning f(x_last);
     * written out by hand on a fast contraction (residuals still falling after 15 steps) */
    float Ac[NB * D * D], xh[NB * D], fh[NB * D];
    for (int b = 0; b < NB; b++) fill_contractive(Ac + b * D * D, D, 0.5f, r);
    Map mc = {NB, D, Ac, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    memcpy(xh, z0, sizeof xh);
    for (int k = 0; k < 15; k++) {
        map_f(&mc, fh, xh);
        if (k < 14)
            for (int i = 0; i < NB * D; i++) xh[i] = (float)(1.0 * (0.6 * (double)fh[i] + 0.4 * (double)xh[i]));
    }
    o = opts(FP_ANDERSON, 15, 0.0, FP_STOP_ABS);
    o.anderson_m = 1;
    o.anderson_beta = 0.6;
    memcpy(za, z0, sizeof za);
    TH_CHECK(solve(&mc, za, &o, &st) == IM_OK && st.best_step == 15 && !memcmp(za, fh, sizeof za),
             "anderson m=1 beta=0.6: not the damped iteration (best step %g)", st.best_step);

    /* samples never interact: tol 0 runs max_iter; batch == each sample alone, bitwise */
    for (int s = 0; s < 2; s++) {
        o = opts(s ? FP_ANDERSON : FP_PICARD, 25, 0.0, FP_STOP_REL);
        memcpy(za, z0, sizeof za);
        TH_CHECK(solve(&m, za, &o, NULL) == IM_OK, "independence: solve failed");
        for (int b = 0; b < NB; b++) {
            Map mb = map_sample(&m, b);
            float zb[D];
            memcpy(zb, z0 + b * D, sizeof zb);
            TH_CHECK(solve(&mb, zb, &o, NULL) == IM_OK && !memcmp(zb, za + b * D, sizeof zb),
                     "independence: %s sample %d differs from its solo run", s ? "anderson" : "picard", b);
        }
    }
}

/* ---- Broyden ---------------------------------------------------------------------------------- */

static void test_broyden(Rng *r) {
    enum { NB = 2, D = 16 };
    float A[NB * D * D], c[NB * D], z0[NB * D], zp[NB * D], zb[NB * D];
    double lam[D];
    th_fill_normal(z0, NB * D, r, 1.0f);
    th_fill_normal(c, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    FpStats sp = {0}, sb = {0};

    /* slowly contracting affine maps (eigenvalues in [-0.5, 0.98]): the exact fixed point in far
     * fewer evaluations than Picard */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = -0.5 + 1.48 * i / (D - 1);
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    FpOpts op = opts(FP_PICARD, 5000, 1e-5, FP_STOP_ABS), ob = op;
    ob.solver = FP_BROYDEN;
    ob.broyden_m = 32;
    memcpy(zp, z0, sizeof zp);
    memcpy(zb, z0, sizeof zb);
    TH_CHECK(solve(&m, zp, &op, &sp) == IM_OK && sp.converged, "broyden race: picard did not converge");
    TH_CHECK(solve(&m, zb, &ob, &sb) == IM_OK && sb.converged, "broyden race: broyden did not converge");
    double ep = exact_err(&m, zp, 0, NULL), eb = exact_err(&m, zb, 0, NULL);
    TH_CHECK(eb < 1e-4 && 4 * sb.iters < sp.iters, "broyden affine: err %.3g, %d calls vs picard %d (err %.3g)",
             eb, sb.iters, sp.iters, ep);
    NOTE("broyden affine, eigenvalues in [-0.5, 0.98], tol 1e-5: picard %d calls, broyden m=32 %d (err %.2e)",
         sp.iters, sb.iters, eb);
    /* a short history (m = 4) still beats Picard; bounded memory is the point of the limit */
    ob.broyden_m = 4;
    memcpy(zb, z0, sizeof zb);
    TH_CHECK(solve(&m, zb, &ob, &sb) == IM_OK && sb.converged && exact_err(&m, zb, 0, NULL) < 1e-4 &&
                 2 * sb.iters < sp.iters,
             "broyden m=4: %d calls vs picard %d", sb.iters, sp.iters);
    NOTE("broyden m=4: %d calls", sb.iters);

    /* eigenvalues up to 1.5 (and down to -1.3; none near 1): Picard diverges, Broyden solves the
     * system */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = -1.3 + 2.8 * (i + 0.5) / D;
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    op.max_iter = 100;   /* 1.5^100 still fits a float */
    memcpy(zp, z0, sizeof zp);
    TH_CHECK(solve(&m, zp, &op, &sp) == IM_OK && !sp.converged, "broyden: picard should diverge here");
    ob.broyden_m = 32;
    ob.max_iter = 200;
    memcpy(zb, z0, sizeof zb);
    TH_CHECK(solve(&m, zb, &ob, &sb) == IM_OK && sb.converged, "broyden expansive: did not converge (res %g)",
             sb.abs_res);
    eb = exact_err(&m, zb, 0, NULL);
    TH_CHECK(eb < 1e-4, "broyden expansive: err to exact %.3g", eb);
    NOTE("broyden, eigenvalues in [-1.3, 1.5]: picard lowest res %.3g after 100, broyden %d calls (err %.2e)",
         sp.abs_res, sb.iters, eb);

    /* the nonlinear tanh map (‖W‖₂ = 0.95): Picard's fixed point, fewer evaluations */
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < D; i++) lam[i] = i % 2 ? 0.95 : -0.95 + 0.1 * i / D;
        fill_symmetric(A + b * D * D, D, lam, r);
    }
    float ct[NB * D];
    th_fill_normal(ct, NB * D, r, 0.3f);
    Map mt = {NB, D, A, ct, 1, NULL, 0, 0, 0, 0, NULL, 0};
    op = opts(FP_PICARD, 5000, 1e-6, FP_STOP_ABS);
    ob = op;
    ob.solver = FP_BROYDEN;
    memcpy(zp, z0, sizeof zp);
    memcpy(zb, z0, sizeof zb);
    TH_CHECK(solve(&mt, zp, &op, &sp) == IM_OK && sp.converged && solve(&mt, zb, &ob, &sb) == IM_OK &&
                 sb.converged, "broyden tanh: a solve did not converge");
    double e = th_rel_err(zb, zp, NB * D);
    TH_CHECK(e < 1e-4 && 3 * sb.iters < 2 * sp.iters, "broyden tanh: diff %.3g, %d calls vs picard %d", e, sb.iters,
             sp.iters);
    NOTE("broyden tanh, tol 1e-6: picard %d calls, broyden m=8 %d (rel diff %.2e)", sp.iters, sb.iters, e);

    /* restart: call 4 returns f·1e6 (a residual spike); the sample restarts from its best
     * f-output (call 5's input) with a cleared history and still reaches the fixed point */
    float last[NB * D], best3[NB * D];
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, 0.9f, r);
    Map ms = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, last, 0};
    ob = opts(FP_BROYDEN, 3, 0.0, FP_STOP_ABS);
    memcpy(best3, z0, sizeof best3);
    TH_CHECK(solve(&ms, best3, &ob, NULL) == IM_OK, "broyden restart: 3-step solve failed");
    ob.max_iter = 5;
    memcpy(zb, z0, sizeof zb);
    ms.spike_at = ms.calls + 4;
    TH_CHECK(solve(&ms, zb, &ob, NULL) == IM_OK && !memcmp(last, best3, sizeof last),
             "broyden restart: call 5 is not at the best f-output of calls 1-3");
    ob = opts(FP_BROYDEN, 100, 1e-5, FP_STOP_ABS);
    memcpy(zb, z0, sizeof zb);
    ms.spike_at = ms.calls + 4;
    TH_CHECK(solve(&ms, zb, &ob, &sb) == IM_OK && sb.converged && exact_err(&ms, zb, 0, NULL) < 1e-4,
             "broyden restart: no convergence after the spike (res %g)", sb.abs_res);

    /* samples never interact: batch == each sample alone, bitwise */
    ob = opts(FP_BROYDEN, 25, 0.0, FP_STOP_REL);
    ob.broyden_m = 5;
    memcpy(zb, z0, sizeof zb);
    TH_CHECK(solve(&m, zb, &ob, NULL) == IM_OK, "broyden independence: solve failed");
    for (int b = 0; b < NB; b++) {
        Map mb = map_sample(&m, b);
        float z1[D];
        memcpy(z1, z0 + b * D, sizeof z1);
        TH_CHECK(solve(&mb, z1, &ob, NULL) == IM_OK && !memcmp(z1, zb + b * D, sizeof z1),
                 "broyden independence: sample %d differs from its solo run", b);
    }
}

/* ---- the evaluation loop (spec §3.2) ----------------------------------------------------------- */

/* The reference loop, written out: returns the number of loop calls; rb:(nb) last per-sample r. */
static int ref_evalloop(Map *m, float *z, int f_thres, double tol, float tau, double alpha, double *rb,
                        int *conv) {
    size_t n = (size_t)m->nb * m->d;
    float *zn = th_alloc(n), *ema = th_alloc(n);
    float a = (float)alpha;
    memcpy(ema, z, n * sizeof(float));
    int count;
    *conv = 0;
    for (count = 0; count <= f_thres - 2; count++) {
        map_f(m, zn, z);
        double num = 0, den = 0;
        for (int b = 0; b < m->nb; b++) {
            double nb_ = 0, db_ = 0;
            for (int i = b * m->d; i < (b + 1) * m->d; i++) {
                double diff, old;
                if (alpha > 0) {
                    float mp = (1.0f - a) * ema[i] + a * zn[i];
                    diff = (double)mp - ema[i];
                    old = ema[i];
                    ema[i] = mp;
                } else {
                    diff = (double)zn[i] - z[i];
                    old = z[i];
                }
                nb_ += diff * diff;
                db_ += old * old;
                z[i] = (1.0f - tau) * z[i] + tau * zn[i];
            }
            rb[b] = sqrt(nb_) / (1e-6 + sqrt(db_));
            num += nb_;
            den += db_;
        }
        if (sqrt(num) / (1e-6 + sqrt(den)) < tol) {
            *conv = 1;
            break;
        }
    }
    if (count > f_thres - 2) count = f_thres - 2;
    if (alpha > 0) memcpy(z, ema, n * sizeof(float));
    free(zn);
    free(ema);
    return count + 1;
}

static void test_evalloop(Rng *r) {
    enum { NB = 3, D = 10 };
    float A[NB * D * D], c[NB * D], z[NB * D], zr[NB * D], z0[NB * D], sres[NB];
    int sstep[NB];
    double rb[NB];
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, 0.4f + 0.25f * b, r);
    th_fill_normal(c, NB * D, r, 1.0f);
    th_fill_normal(z0, NB * D, r, 0.5f);
    Map m = {NB, D, A, c, 1, NULL, 0, 0, 0, 0, NULL, 0};
    const struct { int f_thres; double tol; float tau; double ema; int zero_start; } cs[] = {
        {50, 1e-3, 0.8f, 0.0, 1}, {50, 1e-3, 1.0f, 0.3, 1}, {50, 1e-4, 0.6f, 0.2, 0},
        {5, 0.0, 0.8f, 0.0, 0},   {2, 1e-3, 1.0f, 0.0, 1},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        FpOpts o = opts(FP_EVALLOOP, cs[k].f_thres, cs[k].tol, FP_STOP_REL);
        o.tau = cs[k].tau;
        o.ema_alpha = cs[k].ema;
        if (cs[k].zero_start) memset(z, 0, sizeof z);
        else memcpy(z, z0, sizeof z);
        memcpy(zr, z, sizeof zr);
        int conv;
        int it = ref_evalloop(&m, zr, cs[k].f_thres, cs[k].tol, cs[k].tau, cs[k].ema, rb, &conv);
        FpStats st = {0};
        st.sample_res = sres;
        st.sample_step = sstep;
        long c0 = m.calls;
        TH_CHECK(solve(&m, z, &o, &st) == IM_OK, "evalloop %zu: failed", k);
        TH_CHECK(st.iters == it && m.calls - c0 == it, "evalloop %zu: iters %d ref %d", k, st.iters, it);
        TH_CHECK(!memcmp(z, zr, sizeof z), "evalloop %zu: not bitwise equal to the reference loop", k);
        TH_CHECK(st.converged == conv, "evalloop %zu: converged flag %d", k, st.converged);
        int ok = 1;
        for (int b = 0; b < NB; b++) ok &= fabs(sres[b] - rb[b]) <= 1e-6 * rb[b] && sstep[b] >= 1 && sstep[b] <= it;
        TH_CHECK(ok, "evalloop %zu: per-sample ratios or steps wrong", k);
        NOTE("evalloop case %zu: %d calls, r %.3g, per-sample steps %d %d %d", k, it, st.rel_res,
             sstep[0], sstep[1], sstep[2]);
    }
    /* the first iteration never stops from z0 = 0 (‖z‖ = 0), even with a huge tol ... */
    FpOpts o = opts(FP_EVALLOOP, 50, 1e3, FP_STOP_REL);
    FpStats st = {0};
    memset(z, 0, sizeof z);
    TH_CHECK(solve(&m, z, &o, &st) == IM_OK && st.iters == 2 && st.converged,
             "evalloop: from 0 should stop at the second call, got %d", st.iters);
    /* ... but does from a nonzero start */
    memcpy(z, c, sizeof z);
    TH_CHECK(solve(&m, z, &o, &st) == IM_OK && st.iters == 1, "evalloop: from c, %d calls", st.iters);
    o.max_iter = 1;
    TH_CHECK(solve(&m, z, &o, &st) == IM_EINVAL, "evalloop: max_iter 1 must be rejected");
}

/* ---- the adjoint (IFT) solve ------------------------------------------------------------------- */

static int adjoint(Map *m, float *y, const float *g, const FpOpts *o, FpStats *st) {
    FpMap f = fpmap(m);
    float *scr = th_alloc(fp_scratch_floats(o, f.n, f.nb));
    int rc = fp_adjoint(&f, y, g, o, st, scr);
    free(scr);
    return rc;
}

/* L = Σ w·z* of a converged solve of the tanh map (z* left in z). */
static double tanh_loss(Map *m, float *z, const float *w) {
    size_t n = (size_t)m->nb * m->d;
    FpOpts o = opts(FP_PICARD, 300, 1e-10, FP_STOP_ABS);
    memset(z, 0, n * sizeof(float));
    TH_CHECK(solve(m, z, &o, NULL) == IM_OK, "tanh_loss: solve failed");
    double L = 0.0;
    for (size_t i = 0; i < n; i++) L += (double)w[i] * z[i];
    return L;
}

static void test_adjoint(Rng *r) {
    enum { NB = 2, D = 10, K = 300 };
    float A[NB * D * D], c[NB * D], g[NB * D], y[NB * D];
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, 0.5f + 0.3f * b, r);
    th_fill_normal(c, NB * D, r, 1.0f);
    th_fill_normal(g, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    const FpSolver adj_solvers[3] = {FP_PICARD, FP_ANDERSON, FP_BROYDEN};
    const char *adj_names[3] = {"picard", "anderson", "broyden"};
    for (int s = 0; s < 3; s++) {
        FpOpts o = opts(adj_solvers[s], 200, 1e-9, FP_STOP_REL);
        FpStats st = {0};
        long v0 = m.vjp_calls;
        TH_CHECK(adjoint(&m, y, g, &o, &st) == IM_OK && m.vjp_calls - v0 == st.iters, "adjoint %d failed", s);
        double e = exact_err(&m, y, 1, g);
        TH_CHECK(e < 1e-5, "adjoint %s: err to the exact y(I-A) = g: %.3g", adj_names[s], e);
        NOTE("adjoint affine (%s): rel err %.2e, lowest rel res %.2e at step %.0f of %d",
             adj_names[s], e, st.rel_res, st.best_step, st.iters);
    }
    /* a non-contractive Jacobian (eigenvalues up to 1.5, as a trained implicit model has): the
     * Picard adjoint diverges, Broyden's solves y(I − A) = g */
    {
        double lam[D];
        for (int b = 0; b < NB; b++) {
            for (int i = 0; i < D; i++) lam[i] = -0.8 + 2.3 * i / (D - 1);
            fill_symmetric(A + b * D * D, D, lam, r);
        }
        FpOpts o = opts(FP_PICARD, 200, 1e-7, FP_STOP_REL);
        FpStats st = {0};
        TH_CHECK(adjoint(&m, y, g, &o, &st) == IM_OK && !st.converged, "adjoint expansive: picard converged?");
        o.solver = FP_BROYDEN;
        o.broyden_m = 32;
        TH_CHECK(adjoint(&m, y, g, &o, &st) == IM_OK && st.converged, "adjoint expansive: broyden failed");
        double e = exact_err(&m, y, 1, g);
        TH_CHECK(e < 1e-4, "adjoint expansive (broyden): err %.3g", e);
        NOTE("adjoint, eigenvalues in [-0.8, 1.5]: broyden %d vjp calls, rel err %.2e", st.iters, e);
    }

    /* the tanh map: dL/db for L = <w, z*> */
    float s_[NB * D], w[NB * D], zs[NB * D], gift[NB * D], gfd[NB * D], gun[NB * D] = {0};
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, 0.8f, r);
    th_fill_normal(c, NB * D, r, 0.5f);
    th_fill_normal(w, NB * D, r, 1.0f);
    Map mt = {NB, D, A, c, 1, s_, 0, 0, 0, 0, NULL, 0};
    tanh_loss(&mt, zs, w);
    map_linearise(&mt, zs);
    FpOpts o = opts(FP_PICARD, 300, 1e-10, FP_STOP_REL);
    TH_CHECK(adjoint(&mt, y, w, &o, NULL) == IM_OK, "adjoint tanh failed");
    for (int i = 0; i < NB * D; i++) gift[i] = s_[i] * y[i];   /* dL/db = y ⊙ (1 − tanh²) */

    /* central finite differences of the converged solve */
    const float h = 5e-3f;
    float zt[NB * D];
    for (int i = 0; i < NB * D; i++) {
        float keep = c[i];
        c[i] = keep + h;
        double lp = tanh_loss(&mt, zt, w);
        c[i] = keep - h;
        double lm = tanh_loss(&mt, zt, w);
        c[i] = keep;
        gfd[i] = (float)((lp - lm) / (2.0 * h));
    }
    double efd = th_rel_err(gift, gfd, NB * D);
    TH_CHECK(efd < 1e-3, "IFT vs finite differences: rel err %.3g", efd);

    /* backprop through K unrolled steps z_{k+1} = tanh(A z_k + c) from z_0 = 0 */
    float *zk = th_alloc((size_t)(K + 1) * NB * D), gz[NB * D], gnext[NB * D];
    Map mu = {NB, D, A, c, 1, NULL, 0, 0, 0, 0, NULL, 0};
    for (int k = 0; k < K; k++) map_f(&mu, zk + (size_t)(k + 1) * NB * D, zk + (size_t)k * NB * D);
    memcpy(gz, w, sizeof gz);
    for (int k = K - 1; k >= 0; k--) {
        const float *out = zk + (size_t)(k + 1) * NB * D;
        for (int b = 0; b < NB; b++)
            for (int i = 0; i < D; i++) {   /* through tanh: the pre-activation gradient */
                int q = b * D + i;
                gnext[q] = gz[q] * (1.0f - out[q] * out[q]);
                gun[q] += gnext[q];            /* ∂/∂c of this step */
            }
        for (int b = 0; b < NB; b++)
            for (int j = 0; j < D; j++) {   /* to z_k: Aᵀ · */
                double acc = 0.0;
                for (int i = 0; i < D; i++) acc += (double)A[(b * D + i) * D + j] * gnext[b * D + i];
                gz[b * D + j] = (float)acc;
            }
    }
    free(zk);
    double eun = th_rel_err(gift, gun, NB * D);
    TH_CHECK(eun < 1e-4, "IFT vs unrolled backprop (%d steps): rel err %.3g", K, eun);
    NOTE("tanh IFT gradient: vs central FD %.2e, vs backprop through %d unrolled steps %.2e", efd, K, eun);
}

/* ---- a batch big enough for the threaded per-sample loops ---------------------------------------- */

typedef struct {
    size_t n;
    const float *a, *c; /* (n) f(z) = tanh(a ⊙ z + c), elementwise */
} EwMap;

static void ew_f(void *ctx, float *out, const float *z) {
    const EwMap *m = ctx;
    for (size_t i = 0; i < m->n; i++) out[i] = tanhf(m->a[i] * z[i] + m->c[i]);
}

/* Per-sample work is split over threads (k_foreach, forced to fork here): a batch must still give
 * each sample, bitwise, what it gets alone (one item, never split), for Picard and Anderson. */
static void test_big_batch(Rng *r) {
    enum { NB = 4, D = 16384 };
    int keep = k_get_threads();
    th_bitid_threads(keep > 1 ? keep : 2);
    float *a = th_alloc(NB * D), *c = th_alloc(NB * D), *z = th_alloc(NB * D), *zb = th_alloc(D);
    th_fill_uniform(a, NB * D, r, -0.9f, 0.9f);
    th_fill_normal(c, NB * D, r, 1.0f);
    for (int s = 0; s < 2; s++) {
        FpOpts o = opts(s ? FP_ANDERSON : FP_PICARD, 12, 0.0, FP_STOP_REL);
        EwMap m = {NB * D, a, c};
        FpMap f = {&m, NB * D, NB, ew_f, NULL};
        float *scr = th_alloc(fp_scratch_floats(&o, f.n, NB));
        memset(z, 0, NB * D * sizeof(float));
        float sres[NB];
        FpStats st = {0};
        st.sample_res = sres;
        TH_CHECK(fp_solve(&f, z, &o, &st, scr) == IM_OK && st.iters == 12, "big batch %d: failed", s);
        for (int b = 0; b < NB; b++) {
            EwMap mb = {D, a + b * D, c + b * D};
            FpMap fb = {&mb, D, 1, ew_f, NULL};
            float rb;
            FpStats sb = {0};
            sb.sample_res = &rb;
            memset(zb, 0, D * sizeof(float));
            TH_CHECK(fp_solve(&fb, zb, &o, &sb, scr) == IM_OK, "big batch %d: sample %d alone failed", s, b);
            TH_CHECK(!memcmp(zb, z + b * D, D * sizeof(float)) && rb == sres[b],
                     "big batch %s: sample %d differs from its solo run", s ? "anderson" : "picard", b);
        }
        free(scr);
    }
    th_threads_restore(keep);
    free(a);
    free(c);
    free(z);
    free(zb);
}

/* ---- spectral radius, NaN and options ----------------------------------------------------------- */

static void test_spectral(Rng *r) {
    enum { NB = 2, D = 6 };
    float A[NB * D * D] = {0}, c[NB * D] = {0}, v[NB * D], scr[NB * D];
    const float dg[NB][D] = {{0.3f, -0.85f, 0.5f, 0.1f, -0.2f, 0.6f}, {0.7f, 0.2f, -0.6f, 0.4f, 0.0f, 0.5f}};
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < D; i++) A[(b * D + i) * D + i] = dg[b][i];
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    FpMap f = fpmap(&m);
    th_fill_normal(v, NB * D, r, 1.0f);
    double rho = fp_spectral_radius(&f, v, 200, scr);
    TH_CHECK(fabs(rho - 0.85) < 1e-3, "spectral radius diagonal: %.6f, want 0.85", rho);
    NOTE("spectral radius: diagonal %.7f (0.85)", rho);
    double lam[D] = {0.9, -0.7, 0.5, 0.3, -0.1, 0.6};
    fill_symmetric(A, D, lam, r);
    Map m1 = {1, D, A, c, 0, NULL, 0, 0, 0, 0, NULL, 0};
    FpMap f1 = fpmap(&m1);
    th_fill_normal(v, D, r, 1.0f);
    rho = fp_spectral_radius(&f1, v, 200, scr);
    TH_CHECK(fabs(rho - 0.9) < 1e-3, "spectral radius symmetric: %.6f, want 0.9", rho);
    NOTE("spectral radius: symmetric %.7f (0.9)", rho);
    m1.vjp_nan_at = m1.vjp_calls + 3;
    th_fill_normal(v, D, r, 1.0f);
    TH_CHECK(isnan(fp_spectral_radius(&f1, v, 10, scr)), "spectral radius: inf in vjp should give NaN");
}

static void test_nan_and_opts(Rng *r) {
    enum { NB = 2, D = 5 };
    float A[NB * D * D], c[NB * D], z[NB * D], last[NB * D], y[NB * D];
    for (int b = 0; b < NB; b++) fill_contractive(A + b * D * D, D, 0.5f, r);
    th_fill_normal(c, NB * D, r, 1.0f);
    Map m = {NB, D, A, c, 0, NULL, 0, 0, 0, 0, last, 0};
    const FpSolver solvers[4] = {FP_PICARD, FP_ANDERSON, FP_EVALLOOP, FP_BROYDEN};
    for (int s = 0; s < 4; s++) {
        FpOpts o = opts(solvers[s], 20, 1e-12, FP_STOP_ABS);
        m.nan_at = m.calls + 3;
        memset(z, 0, sizeof z);
        FpStats st = {0};
        int rc = solve(&m, z, &o, &st);
        int finite = 1;
        for (int i = 0; i < NB * D; i++) finite &= isfinite(z[i]) != 0;
        TH_CHECK(rc == IM_ENUM && strstr(err_msg(), "NaN") && strstr(err_msg(), "iteration 3"),
                 "nan solver %d: rc %d msg '%s'", s, rc, err_msg());
        TH_CHECK(finite && !memcmp(z, last, sizeof z), "nan solver %d: z is not the last finite iterate", s);
        TH_CHECK(st.iters == 3 && !st.converged, "nan solver %d: iters %d (the failing call counts)", s, st.iters);
    }
    m.nan_at = 0;
    FpOpts o = opts(FP_PICARD, 20, 1e-12, FP_STOP_ABS);
    m.vjp_nan_at = m.vjp_calls + 2;
    TH_CHECK(adjoint(&m, y, c, &o, NULL) == IM_ENUM, "nan: adjoint with inf in vjp should fail");
    /* invalid options */
    o.tau = 0.0f;
    TH_CHECK(solve(&m, z, &o, NULL) == IM_EINVAL, "opts: tau 0 accepted");
    o = opts(FP_PICARD, 0, 1e-3, FP_STOP_ABS);
    TH_CHECK(solve(&m, z, &o, NULL) == IM_EINVAL, "opts: max_iter 0 accepted");
    o = opts(FP_EVALLOOP, 10, 1e-3, FP_STOP_ABS);
    TH_CHECK(adjoint(&m, y, c, &o, NULL) == IM_EINVAL, "opts: evalloop adjoint accepted");
}

int main(void) {
    th_name = "test_fp";
    verbose = getenv("TH_VERBOSE") != NULL;
    Rng r;
    rng_seed(&r, 1234, 7);
    test_picard_converges(&r);
    test_picard_lowest();
    test_anderson_faster(&r);
    test_anderson_robust(&r);
    test_broyden(&r);
    test_evalloop(&r);
    test_adjoint(&r);
    test_big_batch(&r);
    test_spectral(&r);
    test_nan_and_opts(&r);
    return th_done();
}
