/* bench_machine.c: the roofline of this host, which every other bench line is read against.
 *   FMA peak   12 independent FMA chains in vector registers of the widest ISA the build targets
 *              (AVX-512 / AVX2+FMA / SSE2 / scalar), on 1 and on N threads, GFLOP/s
 *   bandwidth  a streaming sum over a buffer of max(512 MiB, 4 x L3), on 1 and N threads, GB/s;
 *              and on one thread over working sets that stay in cache (16 KiB .. 16 MiB, re-read:
 *              the bound of a loop that re-reads its weights, as the generation lines print it)
 * (best of 5 each, as rates per second of each thread's CPU time: the machine may be shared, and
 * time slices taken by other jobs must not lower the limits); with N > 1 also the N-thread peak
 * on the wall clock, which shows whether the N threads really get N cores (a virtual machine's
 * vCPUs may share them). Prints the CPU, ISA and thread count, then
 *   BENCH_MACHINE=1:<gflops>:<gbs>,N:<gflops>:<gbs>
 * which bench/run.sh exports so that the other programs need not measure it again.
 * Usage: bench_machine [--threads N]   (default: all online CPUs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

/* Which OpenBLAS kernel this host gets and what runs the products: OpenBLAS gives processors newer
 * than its tables a generic SSE3 kernel, and the products then run on the built-in GEMM
 * (cpu/gemm.c). (bench/torch_bench.py gives PyTorch's OpenBLAS the host's kernel in that case.) */
static void blas_line(void) {
    if (!strcmp(k_blas_name(), "none")) {
        printf("machine blas=none: products run on the built-in GEMM\n");
        return;
    }
    printf("machine blas=openblas core=%s: one-thread products run on %s\n", k_blas_core(),
           k_blas_used() ? "OpenBLAS" : "the built-in GEMM (a generic OpenBLAS kernel)");
}

int main(int argc, char **argv) {
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = atol(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) continue;
        else {
            fprintf(stderr, "error: unknown option '%s'\nhint: bench_machine [--threads N]\n", argv[i]);
            return 1;
        }
    }
    if (nt < 1 || nt > MACHINE_MAX_THREADS) {
        fprintf(stderr, "error: --threads must be 1..%d\nhint: bench_machine [--threads N]\n", MACHINE_MAX_THREADS);
        return 1;
    }
    char cpu[256];
    machine_cpu_name(cpu, sizeof cpu);
    /* always measured: a BENCH_MACHINE already in the environment is what this replaces */
    Roof one = {1, machine_peak_gflops(1), machine_read_gbs(1)}, all = one;
    if (nt > 1) all = (Roof){(int)nt, machine_peak_gflops((int)nt), machine_read_gbs((int)nt)};
    printf("machine cpu=\"%s\" isa=%s threads=%ld l3_mib=%zu read_buffer_mib=%zu\n", cpu, BENCH_ISA, nt,
           machine_l3_bytes() >> 20, machine_read_buffer_bytes() >> 20);
    printf("machine FMA peak: 1 thread %.1f GFLOP/s", one.gflops);
    if (nt > 1) printf(", %ld threads %.1f GFLOP/s", nt, all.gflops);
    if (nt > 1) {
        double wall = machine_peak_gflops_wall((int)nt);
        printf(" (%ld threads at once, wall clock: %.1f GFLOP/s = %.2fx one thread)", nt, wall, wall / one.gflops);
    }
    printf("; read bandwidth: 1 thread %.1f GB/s", one.gbs);
    if (nt > 1) printf(", %ld threads %.1f GB/s", nt, all.gbs);
    printf("\n");
    printf("machine re-read bandwidth, 1 thread:");
    static const double sets_kib[] = {16, 256, 1024, 4096, 16384};
    for (int i = 0; i < 5; i++) {
        double kib = sets_kib[i];
        printf(" %g %s %.1f GB/s%s", kib >= 1024 ? kib / 1024 : kib, kib >= 1024 ? "MiB" : "KiB",
               machine_read_gbs_resident(1, kib * 1024), i < 4 ? "," : "\n");
    }
    blas_line();
    printf("BENCH_MACHINE=1:%.2f:%.3f", one.gflops, one.gbs);
    if (nt > 1) printf(",%ld:%.2f:%.3f", nt, all.gflops, all.gbs);
    printf("\n");
    return 0;
}
