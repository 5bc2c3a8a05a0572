/* cpu/vecw.h: the widest float vector of the build, as a GNU vector type (internal to
 * src/kernels): 16 lanes with AVX-512, 8 with AVX, 4 otherwise (an SSE build would pass a wider
 * GNU vector in memory; gcc warns about the ABI). Kernels written on it compile to whole-register
 * arithmetic on every ISA the project targets. Loads and stores go through memcpy: no alignment
 * is assumed.
 */
#ifndef IMPLICIT_KERNELS_CPU_VECW_H
#define IMPLICIT_KERNELS_CPU_VECW_H

#include <string.h>

#if defined(__AVX512F__)
#define KV_W 16
#elif defined(__AVX__)
#define KV_W 8
#else
#define KV_W 4
#endif
typedef float kv_f __attribute__((vector_size(KV_W * sizeof(float))));
typedef int kv_i __attribute__((vector_size(KV_W * sizeof(int))));

static inline kv_f kv_load(const float *p) {
    kv_f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void kv_store(float *p, kv_f v) { memcpy(p, &v, sizeof v); }

#endif
