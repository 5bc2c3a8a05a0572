/* kernels.h: the closed list of compute kernels, and the only boundary between model code and
 * OpenMP / BLAS (later CUDA).
 *
 * Every kernel `k_<name>` (fast CPU version, src/kernels/cpu/) has a scalar reference
 * `k_<name>_ref` (src/kernels/ref/) with the same signature. The reference is obviously correct,
 * single-threaded and never uses BLAS; tests compare the two. Model and layer code calls only
 * `k_<name>`. KERNEL_LIST below is the registry: adding a kernel means one line there, one
 * declaration pair here, and its parity test.
 *
 * Conventions (written once, used everywhere):
 *  - Plain float* row-major buffers, contiguous, dimensions in the signature. Shapes in comments.
 *  - Outputs named y/o/... are written (=). Gradients named d* ACCUMULATE (+=): the caller zeroes
 *    them. A NULL gradient pointer means "not wanted" and is skipped.
 *  - Our own kernels are bit-identical at any OpenMP thread count: every reduction is done by one
 *    thread in a fixed order (BLAS calls are the exception and are tested, not assumed).
 *  - No kernel allocates per call. Kernels that need large temporaries (GEMM packing, SSD chunk
 *    states, attention score blocks, norm partial sums, conv taps) keep them in bounded persistent
 *    scratch (cpu/kscratch.h): one grow-only, 64-byte aligned buffer per call site and calling
 *    thread, sized by the largest call seen so far (documented at the kernel), reused by later calls
 *    and held until the process exits. This avoids fresh zeroed pages (page faults) on every call.
 *  - Gradients of matmul-like ops: dW += dy^T x, so parameter gradients of a batch sum over rows.
 */
#ifndef IMPLICIT_KERNELS_H
#define IMPLICIT_KERNELS_H

#include <stddef.h>

/* Registry of kernel names. tests/test_kernel_list.c builds a table from it, so a listed kernel
 * needs both entry points, every declared reference needs its row here, and every row needs a test
 * that compares the kernel with its reference. */
#define KERNEL_LIST(X) \
    X(gemm) X(gemm_pb) X(linear_fwd) X(linear_bwd) X(weightnorm_fwd) X(weightnorm_bwd) \
    X(rmsnorm_fwd) X(rmsnorm_bwd) X(gated_rmsnorm_fwd) X(gated_rmsnorm_bwd) X(layernorm_fwd) X(layernorm_bwd) \
    X(softmax) X(xent_fwd) X(xent_bwd) X(silu_fwd) X(silu_bwd) X(swiglu_fwd) X(swiglu_bwd) \
    X(softplus) X(sigmoid) X(mul_sigmoid) X(mul_silu) X(neg_exp) X(mul_dsilu) X(mul_dsigmoid) X(mul_dsoftplus_out) \
    X(embed_fwd) X(embed_bwd) X(conv1d_fwd) X(conv1d_silu_fwd) X(conv1d_bwd) X(conv1d_step) \
    X(ssd_fwd) X(ssd_bwd) X(ssd_step) X(s6_decay) X(s6_fwd) X(s6_bwd) X(s6_step) X(s6_step_decay) X(rope_fwd) X(rope_bwd) \
    X(attn_fwd) X(attn_bwd) X(attn_step) X(lstm_cell_fwd) X(lstm_cell_bwd) \
    X(delta_fwd) X(delta_bwd) X(delta_step) \
    X(adamw) X(sumsq) X(resid_rel_inf) X(resid_sumsq) X(axpby) X(copy_rows) X(zero) X(foreach)

/* ---- threads -------------------------------------------------------------------------------- */
/* Set the number of threads used by OpenMP kernels (no-op without OpenMP). OpenBLAS, where built
 * in, is only called for products too small to split and always runs on one thread (cpu/gemm.c). */
void k_set_threads(int n);
int k_get_threads(void);
/* A kernel call forks only when its estimated one-thread time reaches this many nanoseconds
 * (cpu/threading.h: the measured costs, and why 7 us by default); below, it runs on the calling
 * thread without entering OpenMP. Set by tests (0: fork whenever there are two items, so that
 * bit-identity tests reach the parallel code on small shapes) and benches (bench_threads); a
 * negative value restores the default. */
void k_set_fork_ns(double ns);
double k_fork_ns(void);
/* "none"/"openblas" and "omp"/"serial": what this build uses, for banners and bench tables. */
const char *k_blas_name(void);
const char *k_omp_name(void);
/* The kernel OpenBLAS chose for this CPU ("Haswell", "SkylakeX", "Prescott", ...; "none" without
 * BLAS), and whether one-thread products use it: 0 when it is a generic kernel (OpenBLAS's choice
 * for processors it does not know) in a build with AVX2 + FMA, so the built-in GEMM runs them. */
const char *k_blas_core(void);
int k_blas_used(void);
/* The BLAS for banners and logs: "none", "openblas (SkylakeX)", "openblas (Prescott, generic:
 * built-in GEMM)"; buf holds n bytes (80 are enough). */
void k_blas_describe(char *buf, size_t n);

/* ---- GEMM ----------------------------------------------------------------------------------- */
/* C = alpha * op(A) @ op(B) + beta * C       row-major; op(X) = X or X^T (transA/transB = 0/1)
 * op(A):(M,K)  op(B):(K,N)  C:(M,N); lda/ldb/ldc are row strides of A, B, C as stored.
 * beta = 0 means C is written without being read (NaNs in C are ignored). */
void k_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc);
void k_gemm_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

/* ---- weights packed once -------------------------------------------------------------------
 * A weight read by many products between two changes (every iteration of a fixed-point solve,
 * its relaxed steps and its backward; every token of a generation) can have op(B) copied once
 * into the GEMM's panel layout; k_gemm_pb then skips the copy k_gemm makes of op(B) on every
 * call, which costs as much as the product itself when op(A) has few rows (M of 32-64: 2-3x).
 *   k_gemm_pack_floats(N, K): floats of the packed form of op(B) (K, N)
 *   k_gemm_pack_b: packed = op(B), B stored (K, N) or, if transB, (N, K), row stride ldb. The
 *     form depends on the build's tile sizes (make it in the process that uses it); it is a copy:
 *     pack again after every change of B.
 *   k_gemm_pb: k_gemm with op(B) also given packed (packed = NULL: exactly k_gemm). B is still
 *     read where few rows stream it in place (k_gemm_small). The same result as k_gemm to rounding;
 *     bit for bit in builds without BLAS, except one row on mostly full panels, which reads the
 *     panels (row 0 of the blocked GEMM, bit for bit). */
size_t k_gemm_pack_floats(int N, int K);
void k_gemm_pack_b(float *packed, int transB, int N, int K, const float *B, int ldb);
void k_gemm_pb(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, const float *packed, float beta, float *C, int ldc);
void k_gemm_pb_ref(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, const float *packed, float beta, float *C, int ldc);
/* Whether k_gemm_pb runs a one-row product of N columns on the packed panels (row 0 of the blocked
 * GEMM, bit for bit) rather than streaming op(B) in place: panels mostly full, in AVX-512 builds,
 * and in AVX2 and SSE2 builds only for op(B) = B (transB = 0). Where it does not, a pack serves
 * one-row products nothing. */
int k_gemm_pb_row_panels(int N, int transB);

/* y = x @ W^T (+ b)          x:(M,C)  W:(OC,C)  b:(OC)|NULL  y:(M,OC)     writes y */
void k_linear_fwd(float *y, const float *x, const float *W, const float *b, int M, int C, int OC);
void k_linear_fwd_ref(float *y, const float *x, const float *W, const float *b, int M, int C, int OC);
/* dx += dy @ W;  dW += dy^T @ x;  db += sum_M dy      any of dx, dW, db may be NULL */
void k_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x, const float *W,
                  int M, int C, int OC);
void k_linear_bwd_ref(float *dx, float *dW, float *db, const float *dy, const float *x,
                      const float *W, int M, int C, int OC);

/* ---- weight normalisation (spec implicit-lm §6): W_i = s_i * v_i / ||v_i||, one s per row ----
 * g:(R)  v:(R,C)  W:(R,C) written.  If g == NULL, s_i = target (norm_no_scale); if clip > 0, the
 * factor s_i/||v_i|| is min(factor, clip). Rows with ||v_i|| = 0 give W_i = 0. */
void k_weightnorm_fwd(float *W, const float *g, const float *v, int R, int C, float target, float clip);
void k_weightnorm_fwd_ref(float *W, const float *g, const float *v, int R, int C, float target, float clip);
/* dg += <dW_i, v_i>/||v_i||;   dv += (s_i/||v_i||)(dW_i - <dW_i,v_i> v_i/||v_i||^2)
 * (when g == NULL, dg is ignored and the s_i = target path is differentiated; clipped rows pass
 * dW_i * factor to dv with no normalisation term) */
void k_weightnorm_bwd(float *dg, float *dv, const float *dW, const float *g, const float *v, int R,
                      int C, float target, float clip);
void k_weightnorm_bwd_ref(float *dg, float *dv, const float *dW, const float *g, const float *v,
                          int R, int C, float target, float clip);

/* ---- normalisation -------------------------------------------------------------------------- */
/* y = x * rstd * w, rstd = (mean(x^2) + eps)^-1/2 per row.   x,y:(M,C) w:(C) rstd:(M) written
 * (rstd may be NULL when no backward follows). y may alias x. */
void k_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int M, int C, float eps);
void k_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *w, int M, int C, float eps);
/* dx += r*a - (r^3/C) x sum(a*x), a = dy*w;  dw += sum_M dy * x * r      dx, dw may be NULL */
void k_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                   const float *rstd, int M, int C);
void k_rmsnorm_bwd_ref(float *dx, float *dw, const float *dy, const float *x, const float *w,
                       const float *rstd, int M, int C);
/* Gated RMSNorm (norm_before_gate = false): v = x * silu(z); y = v * rstd(v) * w.
 * x,z,y:(M,C) w:(C) rstd:(M)|NULL written. */
void k_gated_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w,
                         int M, int C, float eps);
void k_gated_rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *z, const float *w,
                             int M, int C, float eps);
/* dx, dz, dw accumulate; any may be NULL. */
void k_gated_rmsnorm_bwd(float *dx, float *dz, float *dw, const float *dy, const float *x,
                         const float *z, const float *w, const float *rstd, int M, int C);
void k_gated_rmsnorm_bwd_ref(float *dx, float *dz, float *dw, const float *dy, const float *x,
                             const float *z, const float *w, const float *rstd, int M, int C);

/* LayerNorm (torch.nn.LayerNorm, biased variance): y = (x - mu) r w + b per row, mu = mean(x),
 * r = (mean((x - mu)^2) + eps)^-1/2, both summed in double.  x,y:(M,C) w,b:(C) y written (must
 * not alias x); mean, rstd:(M)|NULL receive mu and r (both or neither: NULL when no backward). */
void k_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                     int M, int C, float eps);
void k_layernorm_fwd_ref(float *y, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int M, int C, float eps);
/* xh = (x - mu) r:  dx += r (dy w - mean(dy w) - xh mean(dy w xh));  dw += sum_M dy xh;
 * db += sum_M dy (column sums in row order, in double). dx, dw, db may be NULL. */
void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                     const float *mean, const float *rstd, int M, int C);
void k_layernorm_bwd_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const float *mean, const float *rstd, int M, int C);

/* ---- softmax and cross-entropy -------------------------------------------------------------- */
/* y = softmax(x) per row (max-subtracted).  x,y:(M,C); y may alias x. */
void k_softmax(float *y, const float *x, int M, int C);
void k_softmax_ref(float *y, const float *x, int M, int C);
/* loss[i] = logsumexp(logits_i) - logits_i[t_i], or 0 where t_i == ignore.
 * logits:(M,V) targets:(M) loss:(M) written. CHECKs 0 <= t_i < V for non-ignored rows. */
void k_xent_fwd(float *loss, const float *logits, const int *targets, int M, int V, int ignore);
void k_xent_fwd_ref(float *loss, const float *logits, const int *targets, int M, int V, int ignore);
/* dlogits_i += dloss_i * (softmax(logits_i) - onehot(t_i)); rows with t_i == ignore untouched.
 * dloss:(M) (e.g. 1/count for a mean loss). */
void k_xent_bwd(float *dlogits, const float *logits, const int *targets, const float *dloss, int M,
                int V, int ignore);
void k_xent_bwd_ref(float *dlogits, const float *logits, const int *targets, const float *dloss,
                    int M, int V, int ignore);

/* ---- activations (elementwise, n floats) ---------------------------------------------------- */
/* y = x * sigmoid(x); y may alias x */
void k_silu_fwd(float *y, const float *x, size_t n);
void k_silu_fwd_ref(float *y, const float *x, size_t n);
/* dx += dy * silu'(x),  silu'(x) = s(1 + x(1 - s)), s = sigmoid(x) */
void k_silu_bwd(float *dx, const float *dy, const float *x, size_t n);
void k_silu_bwd_ref(float *dx, const float *dy, const float *x, size_t n);
/* y = silu(a) * b  (SwiGLU: a = W1 x "gate", b = W3 x "up") */
void k_swiglu_fwd(float *y, const float *a, const float *b, size_t n);
void k_swiglu_fwd_ref(float *y, const float *a, const float *b, size_t n);
/* da += dy * b * silu'(a);  db += dy * silu(a)      da, db may be NULL */
void k_swiglu_bwd(float *da, float *db, const float *dy, const float *a, const float *b, size_t n);
void k_swiglu_bwd_ref(float *da, float *db, const float *dy, const float *a, const float *b, size_t n);

/* ---- gates (elementwise; x:(M,C), bias:(C)|NULL added to every row, y may alias x) ----------
 * The softplus / sigmoid / SiLU gates of the Mamba, FP-RNN and delta-rule layers. The fast
 * versions use cpu/vmath.h (error bounds there: softplus <= 2.5 ulp, sigmoid and silu <= 3 ulp
 * where the result is a normal float); the references use libm. */
/* y = softplus(x + bias) = log(1 + e^(x + bias)); = x + bias above 20 (PyTorch's threshold) */
void k_softplus(float *y, const float *x, const float *bias, int M, int C);
void k_softplus_ref(float *y, const float *x, const float *bias, int M, int C);
/* y = sigmoid(x + bias) */
void k_sigmoid(float *y, const float *x, const float *bias, int M, int C);
void k_sigmoid_ref(float *y, const float *x, const float *bias, int M, int C);
/* y *= sigmoid(x + bias): the backward of y' = softplus(x + bias), in place on its gradient */
void k_mul_sigmoid(float *y, const float *x, const float *bias, int M, int C);
void k_mul_sigmoid_ref(float *y, const float *x, const float *bias, int M, int C);
/* y *= silu(x)     x, y:(n) (a SiLU gate applied in place, or its backward onto the other input) */
void k_mul_silu(float *y, const float *x, size_t n);
void k_mul_silu_ref(float *y, const float *x, size_t n);
/* y = -exp(x)      x, y:(n) (the state matrices A = -exp(A_log) of the Mamba layers, per call;
 * vexp's bound, 1.5 ulp, in the fast version) */
void k_neg_exp(float *y, const float *x, size_t n);
void k_neg_exp_ref(float *y, const float *x, size_t n);
/* Activation gradients in place on the gradient y, x:(n) the pre-activation (y *= f'(x)):
 * y *= silu'(x) = s (1 + x (1 - s)), s = sigmoid(x); y *= sigmoid'(x) = sigmoid(x) sigmoid(-x)
 * (no cancellation in 1 - s for large x). */
void k_mul_dsilu(float *y, const float *x, size_t n);
void k_mul_dsilu_ref(float *y, const float *x, size_t n);
void k_mul_dsigmoid(float *y, const float *x, size_t n);
void k_mul_dsigmoid_ref(float *y, const float *x, size_t n);
/* y *= 1 - e^(-sp): the softplus gradient sigmoid(v) from its output sp = softplus(v), so the
 * pre-activation need not be kept (-expm1(-sp): vmath.h's vexpm1, 2 ulp, in the fast version) */
void k_mul_dsoftplus_out(float *y, const float *sp, size_t n);
void k_mul_dsoftplus_out_ref(float *y, const float *sp, size_t n);

/* ---- embedding ------------------------------------------------------------------------------ */
/* y[i] = E[ids[i]]     ids:(M)  E:(V,D)  y:(M,D) written.  CHECKs 0 <= ids[i] < V (callers
 * validate user input first and report a runtime error). */
void k_embed_fwd(float *y, const int *ids, const float *E, int M, int V, int D);
void k_embed_fwd_ref(float *y, const int *ids, const float *E, int M, int V, int D);
/* dE[ids[i]] += dy[i]   (scatter-add; deterministic order over i) */
void k_embed_bwd(float *dE, const float *dy, const int *ids, int M, int V, int D);
void k_embed_bwd_ref(float *dE, const float *dy, const int *ids, int M, int V, int D);

/* ---- causal depthwise conv1d (spec §1.4) ----------------------------------------------------- */
/* y[b,t,c] = bias[c] + sum_{k=0..W-1} w[c,k] * x[b, t-W+1+k, c]   (x at negative t is 0)
 * x,y:(B,T,C)  w:(C,W)  bias:(C)|NULL   y written (no activation). */
void k_conv1d_fwd(float *y, const float *x, const float *w, const float *bias, int B, int T, int C, int W);
void k_conv1d_fwd_ref(float *y, const float *x, const float *w, const float *bias, int B, int T,
                      int C, int W);
/* ya = silu(conv1d(x)) and, unless y is NULL, y = conv1d(x) (a backward's saved pre-activation):
 * k_conv1d_fwd then k_silu_fwd in one pass. ya and y must not overlap x. */
void k_conv1d_silu_fwd(float *y, float *ya, const float *x, const float *w, const float *bias, int B, int T, int C,
                       int W);
void k_conv1d_silu_fwd_ref(float *y, float *ya, const float *x, const float *w, const float *bias, int B, int T,
                           int C, int W);
/* dx, dw, dbias accumulate; any may be NULL. */
void k_conv1d_bwd(float *dx, float *dw, float *dbias, const float *dy, const float *x, const float *w,
                  int B, int T, int C, int W);
void k_conv1d_bwd_ref(float *dx, float *dw, float *dbias, const float *dy, const float *x,
                      const float *w, int B, int T, int C, int W);
/* One token. state_in:(B,C,W) holds the last W inputs, oldest first. The new window is
 * state_in shifted left by one with x:(B,C) in the last slot; y:(B,C) = bias + sum_k w[c,k]*win[k].
 * state_out:(B,C,W) receives the new window (NULL = do not commit; may alias state_in). */
void k_conv1d_step(float *y, float *state_out, const float *state_in, const float *x, const float *w,
                   const float *bias, int B, int C, int W);
void k_conv1d_step_ref(float *y, float *state_out, const float *state_in, const float *x,
                       const float *w, const float *bias, int B, int C, int W);

/* ---- Mamba2 SSD scan (spec §1.4), G = 1 ---------------------------------------------------- */
/* Per batch b and head h, state S:(P,N), S_{-1} = 0 (or h0):
 *   S_t = exp(dt_t*A_h) S_{t-1} + dt_t * x_t (x) B_t ;   y_t = S_t C_t + D_h x_t
 * x,y:(B,T,H,P)  dt:(B,T,H) (post-softplus)  A:(H) (negative)  Bm,Cm:(B,T,N)  Dskip:(H)
 * h0:(B,H,P,N)|NULL initial state;  hT:(B,H,P,N)|NULL receives S_{T-1}.
 * saved:(k_ssd_saved_floats(B,T,H,P,N))|NULL: what the backward needs beyond the inputs
 * (the fast version keeps chunk-boundary states; the reference fills it too so either backward
 * can follow either forward). NULL = no backward will follow. */
#define SSD_CHUNK 64
size_t k_ssd_saved_floats(int B, int T, int H, int P, int N);
void k_ssd_fwd(float *y, float *saved, float *hT, const float *x, const float *dt, const float *A,
               const float *Bm, const float *Cm, const float *Dskip, const float *h0,
               int B, int T, int H, int P, int N);
void k_ssd_fwd_ref(float *y, float *saved, float *hT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, int B, int T, int H, int P, int N);
/* Backward given dy:(B,T,H,P) (and dhT:(B,H,P,N)|NULL, the gradient on the final state).
 * Accumulates dx:(B,T,H,P) ddt:(B,T,H) dA:(H) dBm,dCm:(B,T,N) dD:(H) dh0:(B,H,P,N); any may be NULL. */
void k_ssd_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
               const float *dy, const float *dhT, const float *x, const float *dt, const float *A,
               const float *Bm, const float *Cm, const float *Dskip, const float *h0,
               const float *saved, int B, int T, int H, int P, int N);
void k_ssd_bwd_ref(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, float *dh0,
                   const float *dy, const float *dhT, const float *x, const float *dt,
                   const float *A, const float *Bm, const float *Cm, const float *Dskip,
                   const float *h0, const float *saved, int B, int T, int H, int P, int N);
/* One token: S' = exp(dt*A) S_in + dt * x (x) Bm;  y = S' Cm + D x.
 * x,y:(B,H,P) dt:(B,H) Bm,Cm:(B,N) S_in:(B,H,P,N); S_out:(B,H,P,N)|NULL (may alias S_in). */
void k_ssd_step(float *y, float *S_out, const float *S_in, const float *x, const float *dt,
                const float *A, const float *Bm, const float *Cm, const float *Dskip,
                int B, int H, int P, int N);
void k_ssd_step_ref(float *y, float *S_out, const float *S_in, const float *x, const float *dt,
                    const float *A, const float *Bm, const float *Cm, const float *Dskip,
                    int B, int H, int P, int N);

/* ---- Mamba-1 selective scan S6 (spec fp-rnn §3.1, §3.5, §5.2) ------------------------------ */
/* Mamba-1 selective scan (S6): per sequence b, channel i < E, state j < N, from H_0 = 0:
 *   H_t[i,j] = exp(dt_t[i]·A[i,j])·H_{t-1}[i,j] + dt_t[i]·Bm_t[j]·x_t[i]
 *   y_t[i]   = Σ_j Cm_t[j]·H_t[i,j] + D[i]·x_t[i]
 * x, dt, y:(B,T,E)  A:(E,N)  Bm, Cm:(B,T,N)  D:(E)|NULL.  h_out:(B,E,N)|NULL receives H_T.
 * dt is used as given (post-softplus); y must not alias the inputs. Scratch (kscratch.h): forward
 * (2N+3)*64 floats per thread; backward (2TN + 3N + 5)*cw + 34N floats per thread (cw = channel
 * block, 64, narrowing to 16 as T*N grows) plus partials of B*E*(N+1) + 2*B*T*N*ceil(E/cw)
 * floats; both E*N for A transposed (not the forward given a decay table).
 * decay: NULL, or the table k_s6_decay made from the same dt and A. The exps are most of a scan's
 * cost; a caller that runs several scans with the same dt and A (the FP-Mamba solve: x, Bm, Cm
 * change from iteration to iteration, dt and A do not) takes them once. The same results as
 * without it, to rounding (the fast kernels' table holds the values they would compute). */
void k_s6_fwd(float *y, float *h_out, const float *x, const float *dt, const float *A, const float *decay,
              const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N);
void k_s6_fwd_ref(float *y, float *h_out, const float *x, const float *dt, const float *A, const float *decay,
                  const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N);
/* The decays of a scan, exp(dt[b,t,i]·A[i,j]), in the order the scans read them. The channels go
 * in groups of K_S6_GROUP (g = i / K_S6_GROUP, lane l = i % K_S6_GROUP; the lanes past E are 0),
 * the groups in blocks of K_S6_BLOCK channels; per sequence, block by block, token by token, the
 * block's groups of that token, each N rows of K_S6_GROUP lanes:
 *   a[b·T·G·N·S + k·T·4·N·S + t·n_k·N·S + q·N·S + j·S + l]   (S = K_S6_GROUP)
 * for block k = i / K_S6_BLOCK, its q-th group, n_k = min(4, G − 4k) groups in it, G =
 * ceil(E / S). a: k_s6_decay_floats(B, T, E, N) written. */
#define K_S6_GROUP 16
#define K_S6_BLOCK 64
static inline size_t k_s6_decay_floats(int B, int T, int E, int N) {
    return (size_t)B * T * ((size_t)(E + K_S6_GROUP - 1) / K_S6_GROUP) * K_S6_GROUP * N;
}
void k_s6_decay(float *a, const float *dt, const float *A, int B, int T, int E, int N);
void k_s6_decay_ref(float *a, const float *dt, const float *A, int B, int T, int E, int N);
/* Backward: dx, ddt:(B,T,E), dA:(E,N), dBm, dCm:(B,T,N), dD:(E) accumulate (+=), any may be NULL.
 * Recomputes the states (no per-step state is cached by the forward), exps included: read from
 * a decay table instead, they cost as much or more (the table comes from L3 or memory while the
 * states' workspace wants L2; `bench_kernels --only scan`). */
void k_s6_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, const float *dy,
              const float *x, const float *dt, const float *A, const float *Bm, const float *Cm,
              const float *D, int B, int T, int E, int N);
void k_s6_bwd_ref(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD,
                  const float *dy, const float *x, const float *dt, const float *A,
                  const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N);
/* One token: y:(B,E) written; h_in:(B,E,N) state after the previous tokens; h_out:(B,E,N)|NULL
 * new state (NULL = do not commit; may equal h_in). x, dt:(B,E); Bm, Cm:(B,N). decay: NULL, or
 * this token's exp(dt·A) from k_s6_step_decay (an FP-Mamba token's iterations share dt and A);
 * the same results as without it, to rounding. */
void k_s6_step(float *y, float *h_out, const float *h_in, const float *x, const float *dt,
               const float *A, const float *decay, const float *Bm, const float *Cm, const float *D, int B,
               int E, int N);
void k_s6_step_ref(float *y, float *h_out, const float *h_in, const float *x, const float *dt,
                   const float *A, const float *decay, const float *Bm, const float *Cm, const float *D,
                   int B, int E, int N);
/* One token's decays, in the state's layout: a[b,i,j] = exp(dt[b,i]·A[i,j]), a:(B,E,N) written. */
void k_s6_step_decay(float *a, const float *dt, const float *A, int B, int E, int N);
void k_s6_step_decay_ref(float *a, const float *dt, const float *A, int B, int E, int N);

/* ---- rotary embedding (spec §1.5, rotate-half / NeoX layout) -------------------------------- */
/* For token t at position p = pos0 + t, head-dim pairs (i, i+HD/2), i < HD/2, with
 * inv_freq_i = theta^(-2i/HD):  y_i = x_i cos - x_{i+HD/2} sin;  y_{i+HD/2} = x_{i+HD/2} cos + x_i sin.
 * x,y:(B,T,NH,HD); y may alias x. HD must be even. */
void k_rope_fwd(float *y, const float *x, int B, int T, int NH, int HD, int pos0, float theta);
void k_rope_fwd_ref(float *y, const float *x, int B, int T, int NH, int HD, int pos0, float theta);
/* dx += R^T dy  (the inverse rotation) */
void k_rope_bwd(float *dx, const float *dy, int B, int T, int NH, int HD, int pos0, float theta);
void k_rope_bwd_ref(float *dx, const float *dy, int B, int T, int NH, int HD, int pos0, float theta);

/* ---- causal softmax attention ---------------------------------------------------------------
 * o_t = sum_{s<=t} softmax_s(q_t . k_s * scale) v_s, scale = 1/sqrt(HD).
 * q,k,v,o:(B,T,NH,HD) (q, k already rotated)  lse:(B,NH,T)|NULL receives the per-row
 * log-sum-exp of the scaled scores (what the backward needs; NULL = no backward). */
void k_attn_fwd(float *o, float *lse, const float *q, const float *k, const float *v,
                int B, int T, int NH, int HD);
void k_attn_fwd_ref(float *o, float *lse, const float *q, const float *k, const float *v,
                    int B, int T, int NH, int HD);
/* dq, dk, dv accumulate (any may be NULL), given o and lse from the forward. */
void k_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *o, const float *lse, int B, int T, int NH, int HD);
void k_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *q,
                    const float *k, const float *v, const float *o, const float *lse,
                    int B, int T, int NH, int HD);
/* One query per sequence against a KV cache plus the new key/value (which the cache does not
 * yet contain: committing is the caller's choice).  q,k_new,v_new,o:(B,NH,HD)
 * kcache,vcache:(B,NH,Tmax,HD) hold positions [0, n_cached) (post-RoPE keys). */
void k_attn_step(float *o, const float *q, const float *k_new, const float *v_new,
                 const float *kcache, const float *vcache, int n_cached, int Tmax,
                 int B, int NH, int HD);
void k_attn_step_ref(float *o, const float *q, const float *k_new, const float *v_new,
                     const float *kcache, const float *vcache, int n_cached, int Tmax,
                     int B, int NH, int HD);

/* ---- LSTM cell (PyTorch gate order i, f, g, o) ---------------------------------------------- */
/* pre:(B,4*Hd) = x W_ih^T + h_prev W_hh^T + b (computed by the layer).
 * i,f,o = sigmoid, g = tanh;  c = f*c_prev + i*g;  h = o*tanh(c).
 * act:(B,4*Hd) receives the activated gates (for the backward); c, h:(B,Hd) written. */
void k_lstm_cell_fwd(float *h, float *c, float *act, const float *pre, const float *c_prev, int B, int Hd);
void k_lstm_cell_fwd_ref(float *h, float *c, float *act, const float *pre, const float *c_prev,
                         int B, int Hd);
/* Given dh, dc (gradient arriving at h and at c; dc may be NULL), accumulate dpre:(B,4Hd) and
 * dc_prev:(B,Hd) (NULL ok). */
void k_lstm_cell_bwd(float *dpre, float *dc_prev, const float *dh, const float *dc, const float *act,
                     const float *c_prev, const float *c, int B, int Hd);
void k_lstm_cell_bwd_ref(float *dpre, float *dc_prev, const float *dh, const float *dc,
                         const float *act, const float *c_prev, const float *c, int B, int Hd);

/* ---- delta rule: DeltaNet / Gated DeltaNet / DeltaProduct (spec fp-rnn §5.4, §5.5) ---------
 * Per batch b and head h, state S:(K,V), S = 0 before token 0. Token t:
 *   S <- exp(g_t) S                                          (no gate when g == NULL)
 *   for j = 0..nh-1:  S <- S + beta_{t,j} k_{t,j} (v_{t,j} - S^T k_{t,j})^T
 *                       (= (I - beta k k^T) S + beta k v^T: nh Householder-like steps)
 *   o_t = S^T q_t     (read after the last sub-step)
 * Inputs are already projected and normalised by the layer (q, k L2-normalised, q scaled).
 * q:(B,T,H,K)  k:(B,T,nh,H,K)  v:(B,T,nh,H,V)  beta:(B,T,nh,H)  g:(B,T,H)|NULL (log decay)
 * o:(B,T,H,V) written;  S_out:(B,H,K,V)|NULL receives the state after the last token. */
void k_delta_fwd(float *o, float *S_out, const float *q, const float *k, const float *v,
                 const float *beta, const float *g, int B, int T, int H, int nh, int K, int V);
void k_delta_fwd_ref(float *o, float *S_out, const float *q, const float *k, const float *v,
                     const float *beta, const float *g, int B, int T, int H, int nh, int K, int V);
/* Backward of k_delta_fwd's o given dout:(B,T,H,V): accumulates dq, dk, dv, dbeta, dg (shapes
 * of q, k, v, beta, g; any may be NULL; dg is ignored when g == NULL). Nothing is saved between
 * fwd and bwd: the states are recomputed (fast version: checkpoints in scratch). */
void k_delta_bwd(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                 const float *q, const float *k, const float *v, const float *beta, const float *g,
                 int B, int T, int H, int nh, int K, int V);
void k_delta_bwd_ref(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                     const float *q, const float *k, const float *v, const float *beta,
                     const float *g, int B, int T, int H, int nh, int K, int V);
/* One token from S_in:(B,H,K,V): q:(B,H,K) k:(B,nh,H,K) v:(B,nh,H,V) beta:(B,nh,H) g:(B,H)|NULL;
 * o:(B,H,V) written; S_out:(B,H,K,V)|NULL receives the new state (NULL = do not commit; may
 * equal S_in). */
void k_delta_step(float *o, float *S_out, const float *S_in, const float *q, const float *k,
                  const float *v, const float *beta, const float *g, int B, int H, int nh, int K,
                  int V);
void k_delta_step_ref(float *o, float *S_out, const float *S_in, const float *q, const float *k,
                      const float *v, const float *beta, const float *g, int B, int H, int nh,
                      int K, int V);

/* ---- optimisation --------------------------------------------------------------------------- */
/* AdamW (decoupled decay, PyTorch semantics), step t >= 1 (bias correction uses t):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * wd * p;
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).    g is scaled by gscale first. */
void k_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
             float eps, float wd, float gscale, int t);
void k_adamw_ref(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                 float b2, float eps, float wd, float gscale, int t);
/* sum of squares in double (for the global grad norm); fixed-order reduction. */
double k_sumsq(const float *x, size_t n);
double k_sumsq_ref(const float *x, size_t n);
/* The fixed-point solver's residual of one sample of per floats, tokens of tok floats (per a
 * multiple of tok): the largest over its tokens of max_i |y_i - F_i| / (max_i |F_i| + eps), in
 * double; NAN when F holds an inf or a NaN (a NaN in y alone is passed over, as max passes over
 * it). Maxima only, so the value does not depend on the order of the elements. */
double k_resid_rel_inf(const float *y, const float *F, size_t per, size_t tok, double eps);
double k_resid_rel_inf_ref(const float *y, const float *F, size_t per, size_t tok, double eps);
/* The sums of squares of a solver's per-sample 2-norm residual, in double: out[0] = sum (f - x)^2
 * (the difference taken in double), out[1] = sum f^2. The fast kernel keeps 16 partial sums,
 * combined in a fixed order (a function of n only); NaN and inf propagate. */
void k_resid_sumsq(const float *f, const float *x, size_t n, double out[2]);
void k_resid_sumsq_ref(const float *f, const float *x, size_t n, double out[2]);
/* y = a*x + b*y  (relaxation steps, residual adds, scaling) */
void k_axpby(float *y, float a, const float *x, float b, size_t n);
void k_axpby_ref(float *y, float a, const float *x, float b, size_t n);
/* Row blocks between strided matrices: y[r, 0..n) = x[r, 0..n) (add 0) or y[r, 0..n) += x[r, 0..n)
 * (add 1) for r < rows, rows ldy and ldx floats apart (ld = n: contiguous arrays). Scatters and
 * gathers column blocks (an injection into a blocked pre-activation and its gradient back) and
 * copies or adds whole activations, on the kernels' threads; y and x do not overlap. */
void k_copy_rows(float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t n, int add);
void k_copy_rows_ref(float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t n, int add);
/* y[0..n) = 0, on the kernels' threads: a gradient buffer cleared before a kernel that adds into
 * it, split as the elementwise kernels split, so each part is cleared by the thread that later
 * adds into it (a plain memset in a layer is serial: at D 64 it was the largest serial part of a
 * Mamba-1 training step on two threads). */
void k_zero(float *y, size_t n);
void k_zero_ref(float *y, size_t n);

/* ---- a parallel loop for the layers and solvers ---------------------------------------------
 * fn(ctx, i0, i1) for contiguous ranges covering [0, n) exactly once, in increasing order within
 * each range. The fast version splits [0, n) into one range per thread (schedule(static)) when
 * the estimated one-thread time n * ns_per_item reaches the fork threshold (k_fork_ns), else
 * calls fn(ctx, 0, n) on the calling thread without entering OpenMP; the reference always does
 * the latter. For loops whose items are independent but whose body is a layer's or a solver's
 * own math (a mixer's token, a solver's sample): fn must write only what item i owns, so the
 * results do not depend on the split. ns_per_item is the caller's measured or estimated cost. */
typedef void (*KForeachFn)(void *ctx, long i0, long i1);
void k_foreach(long n, double ns_per_item, KForeachFn fn, void *ctx);
void k_foreach_ref(long n, double ns_per_item, KForeachFn fn, void *ctx);

#endif
