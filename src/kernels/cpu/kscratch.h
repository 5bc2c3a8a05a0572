/* cpu/kscratch.h: persistent scratch buffers of the fast CPU kernels (internal to cpu/).
 *
 * Large kernel temporaries (SSD chunk states, attention score blocks, GEMM packing, norm partial
 * sums) used to be malloc'd and freed on every call. Above glibc's mmap threshold that hands
 * fresh pages to every call, and the page faults plus the kernel zeroing them cost several percent
 * of a training step. Instead each call site owns one slot: a grow-only, 64-byte aligned buffer
 * that is reused by the next call and kept until the process exits. So the memory held is bounded
 * by the largest request each site has seen (documented per kernel, see kernels.h), never by the
 * number of calls.
 *
 * Rules: call kscratch only from the thread that called the kernel, outside any OpenMP parallel
 * region (CHECKed); carve per-thread parts out of the one buffer. The slots are thread-local, so
 * two application threads running kernels at the same time never share a buffer. Contents are
 * undefined on return (not zeroed), and a buffer stays valid only until the next kscratch call on
 * the same slot, i.e. for the duration of one kernel call.
 * Out of scope: freeing (the buffers live as long as the thread; LeakSanitizer sees them as
 * reachable).
 */
#ifndef IMPLICIT_KERNELS_CPU_KSCRATCH_H
#define IMPLICIT_KERNELS_CPU_KSCRATCH_H

#include <stddef.h>

/* One slot per call site that needs scratch; two buffers needed at once need two slots. */
typedef enum {
    KS_GEMM,                                /* blocked GEMM packing buffers */
    KS_GEMM_SMALL,                          /* small-M GEMM: op(A) rows or a padded column block */
    KS_SSD_WS, KS_SSD_ST, KS_SSD_PART,      /* SSD: per-thread chunk workspaces, chunk states, dA/dD partials */
    KS_SSD_STEP,                            /* SSD step: one state row per thread */
    KS_ATTN_WS, KS_ATTN_STEP, KS_ROPE,      /* attention workspaces, step scores, RoPE table */
    KS_NORM, KS_NORM_ROW,                   /* norm backward partial dw rows, per-thread row temp */
    KS_CONV_WT, KS_CONV_ACC,                /* conv1d transposed taps, parameter-gradient sums */
    KS_S6_WS, KS_S6_PART, KS_S6_AT,         /* Mamba-1 scan: per-thread state blocks, gradient partials, A transposed */
    KS_COUNT
} KsSlot;

/* A buffer of at least `bytes` bytes (64-byte aligned) for `slot`; CHECKs on out of memory and
 * when called inside an OpenMP parallel region. */
void *kscratch(KsSlot slot, size_t bytes);

/* Typed convenience: n floats. */
static inline float *kscratch_floats(KsSlot slot, size_t n) {
    return (float *)kscratch(slot, n * sizeof(float));
}

#endif
