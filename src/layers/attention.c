/* attention.c: the Llama attention mixer (spec implicit-lm §1.5) with injection (§2.1) and the
 * KV-cache step of sequential mode (§4.1). Contract and memory layout: attention.h.
 *
 * Everything heavy is a kernel call (k_linear_*, k_rope_*, k_attn_*); this file only wires
 * buffers. The injection's adds go through k_copy_rows (threads at sequence sizes); copying into
 * the KV cache is O(B*T*D) plumbing next to the O(B*T*D*D) projections and stays plain.
 * Out of scope: GQA, RoPE scaling, dropout, prefill at a nonzero position offset.
 */
#include <string.h>

#include "attention.h"
#include "../core/check.h"
#include "../kernels/kernels.h"
#include "linear.h"

void attn_cfg_init(AttnCfg *cfg, int D, int n_head, float theta, int Tmax) {
    CHECK(cfg != NULL, "attn_cfg_init: cfg is NULL");
    CHECK(D > 0 && n_head > 0 && D % n_head == 0, "attn: D=%d not divisible by n_head=%d", D, n_head);
    CHECK((D / n_head) % 2 == 0, "attn: head dim %d must be even for RoPE", D / n_head);
    CHECK(theta > 0.0f, "attn: RoPE theta must be positive");
    CHECK(Tmax >= 0, "attn: Tmax=%d < 0", Tmax);
    cfg->D = D;
    cfg->NH = n_head;
    cfg->HD = D / n_head;
    cfg->theta = theta;
    cfg->Tmax = Tmax;
    cfg->u_parts = 0;
}

/* The backward needs post-RoPE q and k and v (for k_attn_bwd), o (for dWo) and the per-row lse
 * (so the softmax need not be recomputed from scratch); x and u are the caller's and not copied. */
size_t attn_cache_floats(const AttnCfg *cfg, int B, int T) {
    size_t bt = (size_t)B * (size_t)T;
    return 4 * bt * (size_t)cfg->D + bt * (size_t)cfg->NH;
}

/* Forward without cache: q, k, v, o.  Backward: four (B,T,D) gradient buffers (see attn_bwd). */
size_t attn_scratch_floats(const AttnCfg *cfg, int B, int T) {
    return 4 * (size_t)B * (size_t)T * (size_t)cfg->D;
}

/* K then V, each (B,NH,Tmax,HD): the layout k_attn_step reads, so stepping needs no copy. */
size_t attn_state_floats(const AttnCfg *cfg, int B) {
    return 2 * (size_t)B * (size_t)cfg->NH * (size_t)cfg->Tmax * (size_t)cfg->HD;
}

size_t attn_step_scratch_floats(const AttnCfg *cfg, int B) {
    return 4 * (size_t)B * (size_t)cfg->D;
}

static void check_args(const AttnCfg *cfg, const AttnW *w, int B, int T) {
    CHECK(cfg != NULL && w != NULL, "attn: cfg or weights NULL");
    CHECK(cfg->NH > 0 && cfg->HD > 0 && cfg->NH * cfg->HD == cfg->D, "attn: cfg not initialised");
    CHECK(w->wq && w->wk && w->wv && w->wo, "attn: a weight pointer is NULL");
    CHECK(B >= 0 && T >= 0, "attn: bad dims B=%d T=%d", B, T);
}

/* The pack (attn_pack): wq | wk | wv | wo, each linear_pack's two forms. */
enum { PK_Q, PK_K, PK_V, PK_O };

static const float *pack_of(const AttnCfg *cfg, const AttnW *w, int which) {
    return w->packed ? w->packed + (size_t)which * linear_pack_floats(cfg->D, cfg->D) : NULL;
}

size_t attn_pack_floats(const AttnCfg *cfg) { return 4 * linear_pack_floats(cfg->D, cfg->D); }

void attn_pack(const AttnCfg *cfg, AttnW *w, float *packed) {
    const float *W[4] = {w->wq, w->wk, w->wv, w->wo};
    w->packed = packed;
    for (int i = 0; i < 4; i++) linear_pack((float *)pack_of(cfg, w, i), W[i], cfg->D, cfg->D);
}

/* The distance from one part of the injection (u_q, u_k, u_v) to the next, and their row stride. */
static size_t u_part_step(const AttnCfg *cfg, int M, size_t *ld) {
    *ld = cfg->u_parts ? (size_t)cfg->D : 3 * (size_t)cfg->D;
    return cfg->u_parts ? (size_t)M * (size_t)cfg->D : (size_t)cfg->D;
}

/* q, k, v:(M,D) = x Wq^T (+ u_q) etc., no RoPE yet. Shared by the sequence forward and the step. */
static void project_qkv(const AttnCfg *cfg, const AttnW *w, float *q, float *k, float *v,
                        const float *x, const float *u, int M) {
    int D = cfg->D;
    linear_fwd_pk(q, x, w->wq, pack_of(cfg, w, PK_Q), NULL, M, D, D);
    linear_fwd_pk(k, x, w->wk, pack_of(cfg, w, PK_K), NULL, M, D, D);
    linear_fwd_pk(v, x, w->wv, pack_of(cfg, w, PK_V), NULL, M, D, D);
    if (u) {
        // (uq, uk, uv) = split(u, 3 equal parts of D); q += uq; k += uk; v += uv
        size_t ld, step = u_part_step(cfg, M, &ld);
        k_copy_rows(q, (size_t)D, u, ld, (size_t)M, (size_t)D, 1);
        k_copy_rows(k, (size_t)D, u + step, ld, (size_t)M, (size_t)D, 1);
        k_copy_rows(v, (size_t)D, u + 2 * step, ld, (size_t)M, (size_t)D, 1);
    }
}

/* Copies rows of (B,T,NH,HD) at positions t0 .. t0+T-1 into the cache layout (B,NH,Tmax,HD). */
static void write_kv(float *cache, const float *src, int B, int T, int NH, int HD, int Tmax, int t0) {
    size_t hd = (size_t)HD;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *s = src + (((size_t)b * T + t) * NH + h) * hd;
                float *d = cache + (((size_t)b * NH + h) * Tmax + (size_t)(t0 + t)) * hd;
                memcpy(d, s, hd * sizeof(float));
            }
}

void attn_fwd(const AttnCfg *cfg, const AttnW *w, float *y, const float *x, const float *u,
              float *cache, float *scratch, float *state_out, int B, int T) {
    check_args(cfg, w, B, T);
    CHECK(y && x, "attn_fwd: y or x NULL");
    int D = cfg->D, NH = cfg->NH, HD = cfg->HD, M = B * T;
    size_t n = (size_t)M * (size_t)D;
    // With a cache the intermediates are kept for the backward; without one they live in scratch
    // (and lse, needed only by the backward, is not computed).
    float *buf = cache ? cache : scratch;
    CHECK(buf != NULL, "attn_fwd: scratch is NULL in a no-grad forward");
    float *q = buf, *k = buf + n, *v = buf + 2 * n, *o = buf + 3 * n;
    float *lse = cache ? cache + 4 * n : NULL;

    project_qkv(cfg, w, q, k, v, x, u, M);
    // RoPE on q and k at positions 0..T-1 (in place; the kernel allows y == x)
    k_rope_fwd(q, q, B, T, NH, HD, 0, cfg->theta);
    k_rope_fwd(k, k, B, T, NH, HD, 0, cfg->theta);
    if (state_out) {
        // prefill: the KV cache stores post-RoPE keys and the values
        CHECK(T <= cfg->Tmax, "attn_fwd: prefill of T=%d exceeds Tmax=%d", T, cfg->Tmax);
        size_t half = attn_state_floats(cfg, B) / 2;
        write_kv(state_out, k, B, T, NH, HD, cfg->Tmax, 0);
        write_kv(state_out + half, v, B, T, NH, HD, cfg->Tmax, 0);
    }
    k_attn_fwd(o, lse, q, k, v, B, T, NH, HD);
    // out = o merged · Wo^T   (y may alias x: x is no longer read)
    linear_fwd_pk(y, o, w->wo, pack_of(cfg, w, PK_O), NULL, M, D, D);
}

void attn_bwd(const AttnCfg *cfg, const AttnW *w, AttnW *dW, float *dx, float *du,
              const float *dy, const float *x, const float *u, const float *cache, float *scratch,
              int B, int T) {
    check_args(cfg, w, B, T);
    CHECK(dy && x && cache && scratch, "attn_bwd: dy, x, cache or scratch NULL");
    (void)u; // u enters additively: its value is not needed, only where its gradient goes
    int D = cfg->D, NH = cfg->NH, HD = cfg->HD, M = B * T;
    size_t n = (size_t)M * (size_t)D;
    const float *q = cache, *k = cache + n, *v = cache + 2 * n, *o = cache + 3 * n;
    const float *lse = cache + 4 * n;
    // scratch: s0 = d(o), then dq before RoPE; s1 = dq after RoPE, then dk before RoPE;
    //          s2 = dk after RoPE; s3 = dv.  Every kernel below accumulates, so zero first.
    float *s0 = scratch, *s1 = scratch + n, *s2 = scratch + 2 * n, *s3 = scratch + 3 * n;
    // (four buffers instead of six: each is reused as soon as the kernel reading it has run)
    memset(scratch, 0, 4 * n * sizeof(float));

    // y = o Wo^T:  do += dy Wo;  dWo += dy^T o
    linear_bwd_pk(s0, dW ? dW->wo : NULL, NULL, dy, o, w->wo, pack_of(cfg, w, PK_O), M, D, D);
    k_attn_bwd(s1, s2, s3, s0, q, k, v, o, lse, B, T, NH, HD);
    // undo RoPE: d(pre-rotation) = R^T d(post-rotation)
    memset(s0, 0, n * sizeof(float));
    k_rope_bwd(s0, s1, B, T, NH, HD, 0, cfg->theta);
    memset(s1, 0, n * sizeof(float));
    k_rope_bwd(s1, s2, B, T, NH, HD, 0, cfg->theta);
    const float *dq = s0, *dk = s1, *dv = s3; // gradients w.r.t. the pre-RoPE q, k and v

    if (du) {
        // u was added to q, k, v: its gradient is (dq | dk | dv), in u's layout
        size_t ld, step = u_part_step(cfg, M, &ld);
        k_copy_rows(du, ld, dq, (size_t)D, (size_t)M, (size_t)D, 1);
        k_copy_rows(du + step, ld, dk, (size_t)D, (size_t)M, (size_t)D, 1);
        k_copy_rows(du + 2 * step, ld, dv, (size_t)D, (size_t)M, (size_t)D, 1);
    }
    // The three input projections are separate (D,D) tensors in the checkpoint (§14), hence three
    // calls rather than one fused (3D,D) GEMM; a call is skipped when nothing it feeds is wanted.
    // q = x Wq^T etc.: dx += dq Wq + dk Wk + dv Wv;  dWq += dq^T x etc.
    float *dwq = dW ? dW->wq : NULL, *dwk = dW ? dW->wk : NULL, *dwv = dW ? dW->wv : NULL;
    if (dx || dwq) linear_bwd_pk(dx, dwq, NULL, dq, x, w->wq, pack_of(cfg, w, PK_Q), M, D, D);
    if (dx || dwk) linear_bwd_pk(dx, dwk, NULL, dk, x, w->wk, pack_of(cfg, w, PK_K), M, D, D);
    if (dx || dwv) linear_bwd_pk(dx, dwv, NULL, dv, x, w->wv, pack_of(cfg, w, PK_V), M, D, D);
}

void attn_step(const AttnCfg *cfg, const AttnW *w, float *y, const float *x, const float *u,
               float *state, int pos, int commit, float *scratch, int B) {
    check_args(cfg, w, B, 1);
    CHECK(y && x && state && scratch, "attn_step: y, x, state or scratch NULL");
    CHECK(pos >= 0 && pos < cfg->Tmax, "attn_step: pos=%d outside the KV cache [0, %d)", pos,
          cfg->Tmax);
    int D = cfg->D, NH = cfg->NH, HD = cfg->HD;
    size_t n = (size_t)B * (size_t)D;
    float *q = scratch, *k = scratch + n, *v = scratch + 2 * n, *o = scratch + 3 * n;
    float *kc = state, *vc = state + attn_state_floats(cfg, B) / 2;

    project_qkv(cfg, w, q, k, v, x, u, B);
    // (B,D) is the (B,1,NH,HD) view: one token at absolute position pos
    k_rope_fwd(q, q, B, 1, NH, HD, pos, cfg->theta);
    k_rope_fwd(k, k, B, 1, NH, HD, pos, cfg->theta);
    // q_t attends to [K_cache[0..pos) ; k_t]; the cache is not changed by the kernel
    k_attn_step(o, q, k, v, kc, vc, pos, cfg->Tmax, B, NH, HD);
    // Only the solver's final call per token commits (§4.1): the inner iterations must all see the
    // cache of tokens < pos, never a k_t from an unconverged z.
    if (commit) {
        write_kv(kc, k, B, 1, NH, HD, cfg->Tmax, pos);
        write_kv(vc, v, B, 1, NH, HD, cfg->Tmax, pos);
    }
    linear_fwd_pk(y, o, w->wo, pack_of(cfg, w, PK_O), NULL, B, D, D);
}
