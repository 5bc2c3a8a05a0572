/* anderson.c: Anderson acceleration (type II) for fp_solve, with torchdeq's anderson_solver
 * semantics (spec implicit-lm §3.1 "Other solver choices"; Walker & Ni 2011 for the method).
 *
 * History of the last m iterates X_i and their images F_i = f(X_i), G_i = F_i − X_i. Each step
 * picks the weights α (Σα = 1) minimising ‖Σ α_i G_i‖² + λ‖α‖², i.e. solves the bordered system
 *     [ 0   1ᵀ        ] [ν]   [1]
 *     [ 1   GGᵀ + λI  ] [α] = [0]
 * and moves to x = Σ α_i (β F_i + (1−β) X_i). torchdeq solves one such system per batch element
 * (its bmm / linalg.solve are batched), so we do too: samples never interact, and a batch gives
 * each sample exactly the iterates it would get alone. Stopping and the lowest-residual return
 * are Picard's (fp_track_*): every evaluation's f-output is a candidate.
 * Out of scope: the λ scaling (absolute, as in torchdeq; see fp.h). Broyden is in broyden.c.
 */
#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "fp_impl.h"

#define MAXM FP_ANDERSON_MAX_M

/* Solve the k×k system A s = r in place (A row-major, r → s) by Gaussian elimination with
 * partial pivoting, in double. Returns 0 when A is singular or the result is not finite. */
static int solve_small(double *A, double *r, int k) {
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int i = c + 1; i < k; i++)
            if (fabs(A[i * k + c]) > fabs(A[p * k + c])) p = i;
        if (!(fabs(A[p * k + c]) > 0.0)) return 0;
        if (p != c) {
            for (int j = 0; j < k; j++) {
                double tmp = A[c * k + j];
                A[c * k + j] = A[p * k + j];
                A[p * k + j] = tmp;
            }
            double tmp = r[c];
            r[c] = r[p];
            r[p] = tmp;
        }
        for (int i = c + 1; i < k; i++) {
            double l = A[i * k + c] / A[c * k + c];
            for (int j = c; j < k; j++) A[i * k + j] -= l * A[c * k + j];
            r[i] -= l * r[c];
        }
    }
    for (int c = k - 1; c >= 0; c--) {
        double s = r[c];
        for (int j = c + 1; j < k; j++) s -= A[c * k + j] * r[j];
        r[c] = s / A[c * k + c];
        if (!isfinite(r[c])) return 0;
    }
    return 1;
}

/* The mixing weights of one sample: alpha:(nh) from the Gram matrix of its residuals. X, F hold
 * nh slots of n floats; the sample is the d floats at offset off of each slot. Falls back to the
 * plain step (all weight on slot `latest`) if the system is singular (only possible with λ = 0). */
static void sample_weights(double *alpha, const float *X, const float *F, size_t n, size_t off,
                           size_t d, int nh, int latest, double lambda) {
    double gram[MAXM * MAXM] = {0};
    for (size_t e = off; e < off + d; e++) {
        double g[MAXM];
        for (int i = 0; i < nh; i++) g[i] = (double)F[i * n + e] - (double)X[i * n + e];
        for (int i = 0; i < nh; i++)   /* lower triangle; one pass over the history */
            for (int j = 0; j <= i; j++) gram[i * MAXM + j] += g[i] * g[j];
    }
    int k = nh + 1;
    double A[(MAXM + 1) * (MAXM + 1)], s[MAXM + 1];
    A[0] = 0.0;
    s[0] = 1.0;
    for (int i = 0; i < nh; i++) {
        A[i + 1] = A[(i + 1) * k] = 1.0;
        s[i + 1] = 0.0;
        for (int j = 0; j < nh; j++) {
            double h = i >= j ? gram[i * MAXM + j] : gram[j * MAXM + i];
            A[(i + 1) * k + j + 1] = h + (i == j ? lambda : 0.0);
        }
    }
    if (solve_small(A, s, k)) {
        for (int i = 0; i < nh; i++) alpha[i] = s[i + 1];
    } else {
        for (int i = 0; i < nh; i++) alpha[i] = i == latest ? 1.0 : 0.0;
    }
}

/* Next iterate of one sample into slot s_new: x = Σ α_i (β F_i + (1−β) X_i). Element by element,
 * so s_new may be one of the slots being mixed (the oldest, once the history is full). */
static void sample_mix(float *X, const float *F, const double *alpha, size_t n, size_t off,
                       size_t d, int nh, int s_new, double beta) {
    float *dst = X + (size_t)s_new * n;
    for (size_t e = off; e < off + d; e++) {
        double acc = 0.0;
        for (int i = 0; i < nh; i++)
            acc += alpha[i] * (beta * (double)F[i * n + e] + (1.0 - beta) * (double)X[i * n + e]);
        dst[e] = (float)acc;
    }
}

size_t fp_anderson_scratch(const FpOpts *o, size_t n, int nb) {
    CHECK(o->anderson_m >= 1 && o->anderson_m <= FP_ANDERSON_MAX_M, "anderson_m=%d outside [1, %d]", o->anderson_m,
          FP_ANDERSON_MAX_M);
    return 2 * (size_t)o->anderson_m * n + fp_track_floats(nb);
}

/* The mixing step of the samples [b0, b1) (k_foreach items): each sample owns its d floats of
 * every history slot. */
typedef struct { float *X, *F; size_t n, d; int nh, s, s_new; double lambda, beta; } AndersonStep;

static void anderson_samples(void *ctx, long b0, long b1) {
    const AndersonStep *a = ctx;
    for (long b = b0; b < b1; b++) {
        double alpha[MAXM];
        size_t off = (size_t)b * a->d;
        sample_weights(alpha, a->X, a->F, a->n, off, a->d, a->nh, a->s, a->lambda);
        sample_mix(a->X, a->F, alpha, a->n, off, a->d, a->nh, a->s_new, a->beta);
    }
}

int fp_anderson(const FpMap *m, float *z, const FpOpts *o, FpStats *st, float *scratch) {
    size_t n = m->n, d = n / (size_t)m->nb;
    int mm = o->anderson_m, nb = m->nb;
    CHECK(mm >= 1 && mm <= MAXM, "anderson_m=%d outside [1, %d]", mm, MAXM);
    /* X[s], F[s]: slot s of the history, each (n); iterate k lives in slot k % m */
    float *X = scratch, *F = scratch + (size_t)mm * n;
    FpTrack t;
    fp_track_init(&t, m, o->stop, scratch + 2 * (size_t)mm * n);
    memcpy(X, z, n * sizeof(float));   /* z is now the per-sample best, starting at z0 */
    int iters = 0, converged = 0;
    for (int k = 0; k < o->max_iter; k++) {
        int s = k % mm;
        float *xs = X + (size_t)s * n, *fs = F + (size_t)s * n;
        m->f(m->ctx, fs, xs);
        int done = fp_track_eval(&t, z, fs, xs, k + 1, o->tol, st);
        if (done < 0) return IM_ENUM;
        iters = k + 1;
        if (done) {
            converged = 1;
            break;
        }
        if (k + 1 == o->max_iter) break;   /* no evaluation left for a new iterate */
        int nh = k + 1 < mm ? k + 1 : mm, s_new = (k + 1) % mm;
        AndersonStep a = {X, F, n, d, nh, s, s_new, o->anderson_lambda, o->anderson_beta};
        k_foreach(nb, (double)d * nh * FP_NS_PER_FLOAT, anderson_samples, &a);
    }
    fp_track_stats(&t, st, iters, converged);
    return IM_OK;
}
