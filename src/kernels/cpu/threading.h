/* threading.h: how the CPU kernels use OpenMP (internal to src/kernels/cpu/), with serial
 * fallbacks so every kernel builds with OMP=0.
 *
 * When to fork: a kernel estimates the time its call would take on one thread (its work times a
 * per-kernel cost, KT_NS_* below) and asks kt_team() for the team: every thread when that estimate
 * reaches k_fork_ns() (KT_MIN_NS unless a test or bench set another), else 1. With 1 the kernel runs its loop without
 * entering OpenMP at all (KT_FOR): even an inactive region (`#pragma omp parallel if (0)`) costs
 * about 0.3 us in libgomp, and the small kernels of batch-1 generation are called thousands of
 * times per token.
 *
 * How the numbers were measured: bench_threads (bench/bench_threads.c, part of `make bench`)
 * times an empty fork/join of the full team and every kernel at one thread and at the full team,
 * on sizes around its threshold; it prints the measured ns per unit of work next to the KT_NS_*
 * constant and the two-thread speedup at the threshold. On the Zen 4 host of docs/benchmarks.md
 * (2 vCPUs, AVX-512) an empty fork/join of two threads costs 0.5-0.9 us when the machine is quiet,
 * and a whole time slice when another process holds the second core. KT_MIN_NS = 7 us makes a
 * call at the threshold about 1.5-1.7x faster on two threads than on one when quiet (7 us of work
 * becomes 3.5 + ~0.6 us; the per-kernel costs below are measured, so an estimate of 7 us is about
 * 7 us). It was 20 us: the D-64 training steps (bench_fp) are chains of 5-20 us kernels, which then
 * ran on one thread, and went 1.3-1.65x on two threads; at 7 us they go 1.6-1.8x, and the other
 * benchmark cases were level with or faster than at 20 us but for two that went both ways
 * (docs/benchmarks.md, "the fork threshold at 7 us").
 *
 * Bit-identity does not depend on this choice: every kernel splits only independent items (rows,
 * heads, column blocks), each computed by one thread in a fixed order, so the team size (and
 * whether there is a team) changes which thread computes an item, never how.
 */
#ifndef IMPLICIT_KERNELS_THREADING_H
#define IMPLICIT_KERNELS_THREADING_H

#include "../kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static inline int kt_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int kt_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* One-thread nanoseconds of work from which a kernel call forks by default (see above; kernels.h
 * k_set_fork_ns changes it). */
#define KT_MIN_NS 7000.0


/* The team for a call whose one-thread time is estimated at `ns`, split into `items`
 * independent pieces: 1 (run without entering OpenMP) below the threshold, else every thread of
 * the pool but no more than there are items. The one place that decides. */
static inline int kt_team(double ns, long items) {
    int nt = kt_max_threads();
    if (nt <= 1 || items <= 1 || ns < k_fork_ns()) return 1;
    return items < nt ? (int)items : nt;
}

/* Products of one or a few rows (one row on packed panels, the small-M path: batch-1 and small-batch
 * generation) fork only from KT_MIN_NS_ROWS: their weights come from L3 (a model's layers re-read
 * token after token), and a second core reading the other half gained nothing there below
 * ~20 us (lm_imp_mamba2_gen, two threads: 867-888 tok/s forking from 7 us, 901-906 from 20 us,
 * 892-901 never forking, 906-907 on one thread; later rounds read 865-923 with this floor and
 * 912-917 without, within the host's swing). So these products keep the threshold they had
 * before KT_MIN_NS was lowered. Tests that force forking (k_set_fork_ns(0)) still reach their
 * parallel code. */
#define KT_MIN_NS_ROWS 20000.0
static inline int kt_team_rows(double ns, long items) {
    return kt_team(ns < KT_MIN_NS_ROWS ? 0.0 : ns, items);
}

/* Per-kernel costs: estimated one-thread nanoseconds per unit of work, the unit named at each
 * (measured by bench_threads on the Zen 4 host at one thread, rounded down, i.e. towards forking
 * later on faster hosts only by the rounding). */
#define KT_NS_ELEM 0.25     /* elementwise map with one transcendental (silu, swiglu, gates): per element */
#define KT_NS_COPY 0.1      /* add / scale / copy / partial sums: per element */
#define KT_NS_ROW 5.0       /* a strided row's start (k_copy_rows out of cache): per row */
#define KT_NS_ROW_ELEM 0.25 /* row-wise norm / softmax / xent (2-3 passes over a row): per element */
#define KT_NS_ADAMW 0.7     /* AdamW: per parameter */
#define KT_NS_CONV_TAP 0.06 /* depthwise conv1d: per (token, channel, tap) */
#define KT_NS_LSTM 1.8      /* LSTM cell: per hidden unit (4 gates, 5 transcendentals) */
#define KT_NS_SCAN 0.06     /* recurrent scan (SSD scan path, delta rule): per state element and token */
#define KT_NS_STEP 0.5      /* one-token delta-rule step: per state element (short rows, copies) */
#define KT_NS_SSD_STEP 0.15 /* one-token SSD step (rows in registers, cpu/ssd.c): per state element */
#define KT_NS_SSD 0.015     /* chunked SSD: per token, head and (P N + Q (P + N) / 2) (cpu/ssd.c) */
#define KT_NS_SCAN_EXP 0.3  /* S6 scan, one exp per state element: per state element and token */
#define KT_NS_ATTN 0.03     /* attention: per multiply-add of q.k and of p.v */
#define KT_NS_MAC 0.01      /* blocked GEMM: per multiply-add (~100 GFLOP/s) */

/* KT_FOR(nt, for (...) body): the loop over a team of nt threads (schedule(static)), or with no
 * parallel region at all when nt == 1. The loop's variables are private as in any omp for. A
 * one-statement body needs no semicolon of its own: KT_FOR(nt, for (...) y[i] = x[i]); */
#ifdef _OPENMP
#define KT_PRAGMA_(x) _Pragma(#x)
#define KT_FOR(nt, ...)                                                                             \
    do {                                                                                            \
        const int kt_nt_ = (nt);                                                                    \
        if (kt_nt_ > 1) {                                                                           \
            KT_PRAGMA_(omp parallel for schedule(static) num_threads(kt_nt_))                       \
            __VA_ARGS__;                                                                            \
        } else {                                                                                    \
            __VA_ARGS__;                                                                            \
        }                                                                                           \
    } while (0)
#else
#define KT_FOR(nt, ...)                                                                             \
    do {                                                                                            \
        (void)(nt);                                                                                 \
        __VA_ARGS__;                                                                                \
    } while (0)
#endif

#endif
