/* lstm.h: one LSTM layer with PyTorch nn.LSTM semantics (baseline model, not an implicit model).
 *
 *   pre_t = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh          (B, 4H), gate order i, f, g, o
 *   i, f, o = sigmoid, g = tanh;   c_t = f c_{t-1} + i g;   h_t = o tanh(c_t);   y_t = h_t
 * The input projection of all T tokens is one GEMM (k_linear_fwd); the recurrence is one small
 * GEMM plus k_lstm_cell_fwd per step. The backward is BPTT in reverse time, after which dW_ih and
 * dx are again one GEMM over all B*T rows and dW_hh one GEMM over all steps.
 *
 * State (lstm_state_floats): h (B,H) followed by c (B,H); all zeros = PyTorch's default (h0, c0).
 * Memory (STYLE §8.3): cache (time-major, so each step's slice is contiguous):
 *   act (T, B, 4H) activated gates | c (T+1, B, H) | h (T+1, B, H)   (slot 0 = initial state)
 * NULL cache = a no-grad forward. The layer never allocates.
 * Out of scope: multi-layer stacking, dropout between layers, bidirectional, proj_size (the model
 * composes layers; PyTorch's inter-layer dropout is the model's).
 */
#ifndef IMPLICIT_LAYERS_LSTM_H
#define IMPLICIT_LAYERS_LSTM_H

#include <stddef.h>

typedef struct {
    int D; /* input width */
    int H; /* hidden width */
} LstmCfg;

/* Parameter pointers (checkpoint names weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0).
 * The dW struct has the same layout; NULL members = not wanted. Biases may be NULL (bias=False). */
typedef struct {
    float *W_ih; /* (4H, D) */
    float *W_hh; /* (4H, H) */
    float *b_ih; /* (4H) | NULL */
    float *b_hh; /* (4H) | NULL */
} LstmW;

size_t lstm_cache_floats(const LstmCfg *c, int B, int T);
size_t lstm_scratch_floats(const LstmCfg *c, int B, int T); /* fwd and bwd */
size_t lstm_state_floats(const LstmCfg *c, int B);          /* 2*B*H: h then c */
size_t lstm_step_scratch_floats(const LstmCfg *c, int B);

/* y:(B,T,H) written.  x:(B,T,D).  state0:(2,B,H)|NULL initial (h, c) (NULL = zeros).
 * stateT:(2,B,H)|NULL receives the final (h, c) (may alias state0).
 * cache:(lstm_cache_floats)|NULL (NULL = no backward).  scratch:(lstm_scratch_floats). T >= 1. */
void lstm_fwd(const LstmCfg *c, const LstmW *w, float *y, float *stateT, const float *x,
              const float *state0, float *cache, float *scratch, int B, int T);
/* BPTT. dy:(B,T,H) gradient on y (NULL = 0); dstateT:(2,B,H)|NULL gradient on the final (h, c).
 * Accumulates (+=): dW members, dx:(B,T,D), dstate0:(2,B,H); any may be NULL.
 * x and cache as given to / filled by lstm_fwd (cache holds the initial state). */
void lstm_bwd(const LstmCfg *c, const LstmW *w, LstmW *dW, float *dx, float *dstate0,
              const float *dy, const float *dstateT, const float *x, const float *cache,
              float *scratch, int B, int T);
/* One token:  y:(B,H) written (= new h).  x:(B,D).  state_in:(2,B,H) read.
 * state_out:(2,B,H)|NULL receives the new (h, c); NULL = do not commit; may equal state_in.
 * scratch:(lstm_step_scratch_floats). */
void lstm_step(const LstmCfg *c, const LstmW *w, float *y, const float *x, const float *state_in,
               float *state_out, float *scratch, int B);

#endif
