/* cpu/ssd_paths.h: the two implementations behind k_ssd_fwd / k_ssd_bwd (internal to src/kernels,
 * tests and benches; not part of the model-facing contract in kernels.h).
 *
 * k_ssd_fwd / k_ssd_bwd pick the recurrent scan (cpu/ssd_scan.c) when kssd_use_scan(P, N), else
 * the chunked form (cpu/ssd.c). Both have exactly the contract of kernels.h, share the `saved`
 * layout (so either backward can follow either forward), and are bit-identical at any thread
 * count. They are exposed here so that tests and benches can exercise each path at any shape.
 */
#ifndef IMPLICIT_KERNELS_CPU_SSD_PATHS_H
#define IMPLICIT_KERNELS_CPU_SSD_PATHS_H

/* 1 when the recurrent scan is the faster path for a state of P x N. */
int kssd_use_scan(int P, int N);

void kssd_chunked_fwd(float *y, float *saved, float *hT, const float *x, const float *dt,
                      const float *A, const float *Bm, const float *Cm, const float *Dskip,
                      const float *h0, int B, int T, int H, int P, int N);
void kssd_chunked_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                      float *dh0, const float *dy, const float *dhT, const float *x, const float *dt,
                      const float *A, const float *Bm, const float *Cm, const float *Dskip,
                      const float *h0, const float *saved, int B, int T, int H, int P, int N);
void kssd_scan_fwd(float *y, float *saved, float *hT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, int B, int T, int H, int P, int N);
void kssd_scan_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
                   const float *dy, const float *dhT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, const float *saved, int B, int T, int H, int P, int N);

#endif
