/* attention.h: the Llama attention mixer (spec implicit-lm §1.5), with the implicit-model
 * injection u (§2.1) and a KV cache for sequential decoding (§4.1).
 *
 *   q = x Wq^T + u_q,  k = x Wk^T + u_k,  v = x Wv^T + u_v       x:(B,T,D) normed input
 *   q, k <- RoPE(q, k) at absolute positions (rotate-half layout, theta from the config)
 *   o    = causal softmax(q k^T / sqrt(HD)) v, per head          (no GQA: n_kv_heads = n_head)
 *   y    = o Wo^T                                                 Wo = mixer.out_proj.weight
 * Heads: feature h*HD .. (h+1)*HD-1 of q/k/v/o belongs to head h (the (B,T,NH,HD) view of (B,T,D)).
 * Injection: u:(B,T,3D), each row is [u_q (D) | u_k (D) | u_v (D)] (or in parts: AttnCfg.u_parts),
 * added before RoPE.
 * No biases, no dropout (0 in every config). The caller does the pre-norm and the residual add.
 *
 * Memory (STYLE §8.3); layers never malloc, every buffer is sized by the *_floats functions:
 *  - cache   (attn_cache_floats): kept from attn_fwd for attn_bwd; NULL in attn_fwd = no grad.
 *            Layout: q_rot | k_rot | v | o each (B,T,D), then lse (B,NH,T).
 *  - scratch (attn_scratch_floats / attn_step_scratch_floats): temporaries, dead after return.
 *  - state   (attn_state_floats): the KV cache for attn_step, post-RoPE keys and values:
 *            K (B,NH,Tmax,HD) followed by V (B,NH,Tmax,HD). Only positions < pos are ever read,
 *            so a fresh state needs no zeroing.
 *
 * Sequential mode (§4.1): the solver's inner iterations call attn_step(..., commit = 0), which
 * attends to [K_cache ; k_t] without changing the cache; the final call uses commit = 1 and writes
 * k_t, v_t at position pos. A prompt can be prefilled with attn_fwd(..., state_out) instead.
 * Out of scope: GQA, RoPE scaling, attention dropout, prefill at a nonzero position offset.
 */
#ifndef IMPLICIT_LAYERS_ATTENTION_H
#define IMPLICIT_LAYERS_ATTENTION_H

#include <stddef.h>

typedef struct {
    int D;       /* model width */
    int NH;      /* number of heads (= KV heads) */
    int HD;      /* head dim = D / NH, even (RoPE pairs i, i + HD/2) */
    float theta; /* RoPE base, 500000 in the reference */
    int Tmax;    /* KV-cache capacity in positions (for attn_step / prefill); 0 = no cache */
    int u_parts; /* layout of the injection u and of du (attn_cfg_init: 0): 0 rows, as below; 1
                    parts, u_q, u_k, u_v each a contiguous (M, D) array, one after the other (see
                    Mamba2Cfg.u_parts) */
} AttnCfg;

/* Fills cfg; CHECKs D % n_head == 0, D / n_head even, theta > 0, Tmax >= 0. */
void attn_cfg_init(AttnCfg *cfg, int D, int n_head, float theta, int Tmax);

/* Pointers into the parameter block; the same struct points into the gradient block for dW,
 * where a NULL field (or a NULL dW) means "this gradient is not wanted". */
typedef struct {
    float *wq; /* (D, D)  mixer.wq.weight */
    float *wk; /* (D, D)  mixer.wk.weight */
    float *wv; /* (D, D)  mixer.wv.weight */
    float *wo; /* (D, D)  mixer.out_proj.weight */
    const float *packed; /* (attn_pack_floats) | NULL: wq, wk, wv, wo packed by attn_pack */
} AttnW;

/* Weights packed once (linear.h): wq, wk, wv, wo, each in both forms. attn_pack fills `packed`
 * from w and points w->packed at it; pack again after w changes. */
size_t attn_pack_floats(const AttnCfg *cfg);
void attn_pack(const AttnCfg *cfg, AttnW *w, float *packed);

/* Buffer sizes in floats. */
size_t attn_cache_floats(const AttnCfg *cfg, int B, int T);   /* 4*B*T*D + B*NH*T */
size_t attn_scratch_floats(const AttnCfg *cfg, int B, int T); /* 4*B*T*D (fwd and bwd) */
size_t attn_state_floats(const AttnCfg *cfg, int B);          /* 2*B*NH*Tmax*HD */
size_t attn_step_scratch_floats(const AttnCfg *cfg, int B);   /* 4*B*D */

/* Forward over a whole sequence, positions 0..T-1.
 *   y:(B,T,D) written (may alias x);  x:(B,T,D);  u:(B,T,3D)|NULL (no injection)
 *   cache:(attn_cache_floats)|NULL    NULL = no-grad forward (the solver's inner iterations)
 *   scratch:(attn_scratch_floats)     used only when cache == NULL (may then be NULL otherwise)
 *   state_out:(attn_state_floats)|NULL  if set, positions 0..T-1 of the KV cache are written
 *                                     (prefill; CHECKs T <= Tmax); positions >= T untouched. */
void attn_fwd(const AttnCfg *cfg, const AttnW *w, float *y, const float *x, const float *u,
              float *cache, float *scratch, float *state_out, int B, int T);

/* Backward of attn_fwd given dy:(B,T,D), the same x, u and the cache that forward filled.
 * Accumulates (+=): dW fields (D,D) each, dx:(B,T,D), du:(B,T,3D). dW, any dW field, dx and du
 * may be NULL (= not wanted). scratch:(attn_scratch_floats) required. dy, x, u, cache unchanged. */
void attn_bwd(const AttnCfg *cfg, const AttnW *w, AttnW *dW, float *dx, float *du,
              const float *dy, const float *x, const float *u, const float *cache, float *scratch,
              int B, int T);

/* One token per sequence at position pos (= the number of positions already in the cache).
 *   y:(B,D) written (may alias x);  x:(B,D);  u:(B,3D)|NULL
 *   state:(attn_state_floats) the KV cache holding positions 0..pos-1; read-only unless commit
 *   commit: 1 = write this token's post-RoPE k and v at position pos; 0 = leave state untouched
 *   scratch:(attn_step_scratch_floats)
 * CHECKs 0 <= pos < Tmax (the model reports a full cache as a runtime error before calling). */
void attn_step(const AttnCfg *cfg, const AttnW *w, float *y, const float *x, const float *u,
               float *state, int pos, int commit, float *scratch, int B);

#endif
