/* mixer_expm.c: the matrix exponential and its Fréchet derivative, for the nonselective mixer
 * O = O0 expm(S - S^T) (spec fp-rnn §2.6; torch's `orthogonal` parametrisation, matrix_exp map).
 *
 * expm by scaling and squaring: X/2^s with ||X/2^s||_1 <= 1/2, a Taylor polynomial of degree 12
 * (remainder < 0.5^13/13! ~ 2e-14, far below float rounding), then s squarings.
 * Fréchet derivative L(X, E) = d/dt expm(X + t E) by the block identity
 *     expm([[X, E], [0, X]]) = [[expm(X), L(X, E)], [0, expm(X)]],
 * evaluated on the 2x2 block structure instead of a 2d x 2d matrix: powers of the block matrix are
 * [[X^k, D_k], [0, X^k]] with D_k = X D_{k-1} + E X^{k-1}, and a squaring maps (P, Q) to
 * (P^2, P Q + Q P). The backward needs the adjoint, which is L(X^T, G) (Frobenius inner product).
 * Products are k_gemm calls (float; the mixer's forward is float anyway).
 */
#include <math.h>
#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "mixer.h"

#define TAYLOR_DEG 12

static void mm(float *C, const float *A, const float *B, int d, float beta) {
    k_gemm(0, 0, d, d, d, 1.0f, A, d, B, d, beta, C, d);
}

static void eye(float *A, int d) {
    memset(A, 0, (size_t)d * d * sizeof(float));
    for (int i = 0; i < d; i++) A[(size_t)i * d + i] = 1.0f;
}

/* Squarings so that ||A||_1 / 2^s <= 1/2 (max column sum, in double). */
static int scaling(const float *A, int d) {
    double nrm = 0;
    for (int j = 0; j < d; j++) {
        double c = 0;
        for (int i = 0; i < d; i++) c += fabs((double)A[(size_t)i * d + j]);
        if (c > nrm) nrm = c;
    }
    int s = 0;
    while (nrm > 0.5 && s < 64) nrm *= 0.5, s++;
    return s;
}

void mixer_expm(float *E, const float *A, int d, float *work) {
    size_t dd = (size_t)d * d;
    float *X = work, *T = work + dd, *Tn = work + 2 * dd;
    int s = scaling(A, d);
    float f = ldexpf(1.0f, -s);
    for (size_t i = 0; i < dd; i++) X[i] = A[i] * f;
    eye(T, d);
    eye(E, d);
    for (int k = 1; k <= TAYLOR_DEG; k++) {
        mm(Tn, X, T, d, 0.0f); /* T_k = X T_{k-1} / k */
        for (size_t i = 0; i < dd; i++) T[i] = Tn[i] / (float)k, E[i] += T[i];
    }
    for (int k = 0; k < s; k++) {
        mm(T, E, E, d, 0.0f);
        memcpy(E, T, dd * sizeof(float));
    }
}

void mixer_expm_frechet(float *L, const float *A, const float *Edir, int d, float *work) {
    size_t dd = (size_t)d * d;
    float *X = work, *Es = X + dd, *T = Es + dd, *D = T + dd, *Tn = D + dd, *Dn = Tn + dd, *P = Dn + dd;
    float *Q = L;
    int s = scaling(A, d);
    float f = ldexpf(1.0f, -s);
    /* the block matrix is scaled as a whole: both X and the direction */
    for (size_t i = 0; i < dd; i++) X[i] = A[i] * f, Es[i] = Edir[i] * f;
    eye(T, d);
    eye(P, d);
    memset(D, 0, dd * sizeof(float));
    memset(Q, 0, dd * sizeof(float));
    for (int k = 1; k <= TAYLOR_DEG; k++) {
        mm(Dn, X, D, d, 0.0f); /* D_k = (X D_{k-1} + E T_{k-1}) / k */
        mm(Dn, Es, T, d, 1.0f);
        mm(Tn, X, T, d, 0.0f);
        for (size_t i = 0; i < dd; i++) {
            T[i] = Tn[i] / (float)k, D[i] = Dn[i] / (float)k;
            P[i] += T[i], Q[i] += D[i];
        }
    }
    for (int k = 0; k < s; k++) {
        mm(Tn, P, Q, d, 0.0f);
        mm(Tn, Q, P, d, 1.0f);
        mm(T, P, P, d, 0.0f);
        memcpy(Q, Tn, dd * sizeof(float));
        memcpy(P, T, dd * sizeof(float));
    }
}
