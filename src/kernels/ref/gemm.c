/* ref/gemm.c: scalar reference GEMM and the Linear layer built on it (kernels.h "GEMM").
 *
 * Obviously-correct triple loops in the textbook order: one float accumulator per output,
 * summed over k = 0..K-1 in order. No OpenMP, no BLAS, no blocking; the fast versions in
 * cpu/gemm.c are tested against these. Out of scope: speed.
 */
#include "../kernels.h"

#include "../../core/check.h"

/* op(X)[r, c] for a row-major X with row stride ld: X[r, c] or X[c, r] when transposed. */
static float at(const float *X, int ld, int trans, int r, int c) {
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

void k_gemm_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d", M, N, K);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += at(A, lda, transA, i, k) * at(B, ldb, transB, k, j);
            float *c = &C[(size_t)i * ldc + j];
            /* beta == 0 must not read C (it may hold NaNs), as BLAS specifies */
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
    }
}

void k_linear_fwd_ref(float *y, const float *x, const float *W, const float *b, int M, int C, int OC) {
    for (int i = 0; i < M; i++) {
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int c = 0; c < C; c++) acc += x[(size_t)i * C + c] * W[(size_t)o * C + c];
            y[(size_t)i * OC + o] = b ? acc + b[o] : acc;
        }
    }
}

void k_linear_bwd_ref(float *dx, float *dW, float *db, const float *dy, const float *x,
                      const float *W, int M, int C, int OC) {
    /* dx[i, c] += sum_o dy[i, o] W[o, c] */
    if (dx) {
        for (int i = 0; i < M; i++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int o = 0; o < OC; o++) acc += dy[(size_t)i * OC + o] * W[(size_t)o * C + c];
                dx[(size_t)i * C + c] += acc;
            }
        }
    }
    /* dW[o, c] += sum_i dy[i, o] x[i, c]: the batch rows are summed into the parameter grad */
    if (dW) {
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int i = 0; i < M; i++) acc += dy[(size_t)i * OC + o] * x[(size_t)i * C + c];
                dW[(size_t)o * C + c] += acc;
            }
        }
    }
    if (db) {
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int i = 0; i < M; i++) acc += dy[(size_t)i * OC + o];
            db[o] += acc;
        }
    }
}

/* The reference ignores the packed copy: it is the plain product of the unpacked operands. */
void k_gemm_pb_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, const float *packed, float beta, float *C, int ldc) {
    (void)packed;
    k_gemm_ref(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
