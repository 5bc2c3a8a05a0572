/* cpu/gemm.h: internal to src/kernels, tests and benches (not part of the model-facing
 * contract in kernels.h).
 *
 * k_gemm dispatches to OpenBLAS when built with it and single-threaded; the built-in cache-blocked
 * GEMM stays reachable here so the parity test and the bench can exercise it in every build.
 */
#ifndef IMPLICIT_KERNELS_CPU_GEMM_H
#define IMPLICIT_KERNELS_CPU_GEMM_H

/* Same contract as k_gemm (kernels.h), always the built-in blocked GEMM. Bit-identical at
 * any thread count: each C element is summed by one thread in a fixed order. */
void k_gemm_blocked(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Which GEMM k_gemm runs at the current thread count: "openblas" (BLAS build, one thread) or
 * "builtin" (k_gemm_blocked: no BLAS, or more than one thread; see cpu/gemm.c). For banners. */
const char *k_gemm_backend(void);

#endif
