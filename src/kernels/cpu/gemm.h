/* cpu/gemm.h: internal to src/kernels, tests and benches (not part of the model-facing
 * contract in kernels.h).
 *
 * k_gemm dispatches to the small-M path, OpenBLAS or the built-in cache-blocked GEMM (see use_blas
 * in cpu/gemm.c); each stays reachable here so the parity tests and the benches can exercise it in
 * every build.
 */
#ifndef IMPLICIT_KERNELS_CPU_GEMM_H
#define IMPLICIT_KERNELS_CPU_GEMM_H

#include <stddef.h>

/* Same contract as k_gemm (kernels.h), always the built-in blocked GEMM. Bit-identical at
 * any thread count: each C element is summed by one thread in a fixed order. */
void k_gemm_blocked(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Same contract as k_gemm, for few rows (any M works; k_gemm routes M <= GEMM_SMALL_M here):
 * streams op(B) once in place, no packing (cpu/gemm_small.c). Bit-identical at any thread count. */
void k_gemm_small(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* The blocked GEMM on an op(B) packed by k_gemm_pack_b (kernels.h): C = alpha op(A) @ op(B) +
 * beta C, bit for bit k_gemm_blocked's result (transB is in packed). k_gemm_pb routes here. */
void k_gemm_packed(int transA, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *packed, float beta, float *C, int ldc);


/* Which GEMM k_gemm runs for large products at the current thread count: "openblas" (BLAS build,
 * one thread, an OpenBLAS kernel of the build's class) or "builtin" (k_gemm_blocked: no BLAS, more
 * than one thread, or a generic OpenBLAS kernel). For banners. */
const char *k_gemm_backend(void);

/* Whether k_gemm may hand products to an OpenBLAS running the kernel named core: 1 when that
 * kernel has this build's vector class (AVX2 + FMA or AVX-512 in such builds; any kernel in builds
 * without them), 0 for a generic one, such as OpenBLAS gives processors it does not know. */
int k_gemm_blas_core_ok(const char *core);

#endif
