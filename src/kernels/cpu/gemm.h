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

/* op(B) packed once for many products with the same B (a weight across the iterations of a
 * fixed-point solve): k_gemm_packed skips the packing k_gemm_blocked does on every call and gives
 * bit for bit its result. For products with many rows; few-row ones never pack (k_gemm_small).
 *   k_gemm_pack_floats: floats of the packed form of op(B) (K, N)
 *   k_gemm_pack_b:      packed = op(B), B stored (K, N) or, if transB, (N, K), row stride ldb
 *   k_gemm_packed:      C = alpha op(A) @ op(B) + beta C, as k_gemm_blocked (transB is in packed)
 * The packed form depends on the build's tile sizes: make it in the process that uses it. */
size_t k_gemm_pack_floats(int N, int K);
void k_gemm_pack_b(float *packed, int transB, int N, int K, const float *B, int ldb);
void k_gemm_packed(int transA, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *packed, float beta, float *C, int ldc);

/* Which GEMM k_gemm runs for large products at the current thread count: "openblas" (BLAS build,
 * one thread) or "builtin" (k_gemm_blocked: no BLAS, or more than one thread). For banners. */
const char *k_gemm_backend(void);

#endif
