/* cpu/s6.c: fast Mamba-1 selective scan S6 (spec fp-rnn §3.1, §3.5, §5.2); contract in kernels.h,
 * equations and the backward in ref/s6.c.
 *
 * Layout: the scan is independent per channel, so the vector lanes run over CHANNELS, not over the
 * N states. A work item is one sequence b and a block of up to 64 consecutive channels; it keeps its
 * states transposed, h[j][c] (N rows of the block width), and A transposed the same way. Then every
 * update H = exp(dt A) H + (dt x) B_j is a vertical vector op along c, and the readout
 * y = sum_j C_j H[j] is a vector accumulation with no horizontal sum (with lanes along N, every
 * (t, i) would end in a horizontal reduction of N = 16 values). x, dt, dy rows are contiguous along
 * channels in (B,T,E), so a block reads them directly. exp is cpu/vmath.h's vexp (vectorisable).
 *
 * Backward, per item: recompute the block's states H_t and decays a_t for all t into a per-thread
 * buffer (2 T N cw floats), then run the reverse recurrence G_t = dy_t C_t + a_{t+1} G_{t+1} with
 * the carried term a_{t+1} G_{t+1} kept as one (N, cw) array. dx, ddt belong to the item. The sums
 * over channels (dBm, dCm: per (t, j), 16-lane partials fused into the same pass, then the rows'
 * lanes summed together, cpu/vecw.h) and over sequences (dA, dD) are written as per-item partials
 * and reduced afterwards in a fixed order (blocks in order for dBm, dCm; sequences in order, in
 * double, for dA, dD), so the result never depends on the thread count. The block width cw
 * depends only on (T, N) (64, down to 16 when the per-thread buffer would pass 512 KB). The inner
 * loops take restrict pointers: gcc leaves them scalar otherwise (too many arrays for its alias
 * checks), which cost 2x.
 * Measured (1 thread, AVX-512, B 64, T 17, E 1024, N 16): fwd ~9 ms, bwd ~25 ms; the reference
 * takes ~65 and ~205 ms.
 *
 * Decay table (k_s6_decay): the forward's exps, taken once for callers that scan repeatedly with
 * the same dt and A (the FP-Mamba solve). It is laid out in the forward's order of reading, per
 * sequence and block of 64 channels, token by token, 16-channel groups of N rows (kernels.h), so a
 * block streams it front to back: with rows along all E channels a block read 4 KB, then skipped
 * the rest of the token, and the prefetchers lost it at every page (B 12, T 64, E 512: 1.54 ms
 * now against 2.1 with that layout and 1.95 taking the exps). The forward then does 3 FMAs and a
 * load per state element (B 64, T 17, E 128, N 16: 260 us against 718). The backward does not
 * read it: its recompute stores the decays next to the states in an L2-sized workspace, and
 * copying them from the table (L3 or memory) cost as much as the exps or more.
 *
 * Step: lanes along N (the state is (B,E,N) there); a work item is a sequence and 16 channels.
 * When N is whole vectors (<= 32) the channels go KV_W at a time and their readouts are summed
 * together (cpu/vecw.h; `bench_kernels --only step`, 1 thread, B 1, E 256, N 16: 2.53 -> 1.60 us
 * with AVX-512, 3.17 -> 2.00 with AVX2, level with SSE2, against four channels at a time with a
 * tree each); else, and for the channels past the last group, a 16-lane dot per channel.
 * Out of scope: an initial state for the full scan, gradients through the final state.
 */
#include <math.h>
#include <string.h>

#include "../kernels.h"
#include "../../core/check.h"
#include "kscratch.h"
#include "vecw.h"
#include "vmath.h"

#include "threading.h"

#define CW_MAX 64
/* The decay table's channel groups (kernels.h: K_S6_GROUP channels, N rows of them, per token). */
#define GW K_S6_GROUP
_Static_assert(CW_MAX == K_S6_BLOCK && CW_MAX % GW == 0, "a forward block is a block of the table");
/* Per-thread backward buffer (H_t and a_t of a block) above which the block narrows, in floats. */
#define BWD_BUF_FLOATS (128 * 1024)
/* A pass that reads its decays from a k_s6_decay table costs about this share of one that takes
 * the exps (bench_kernels' scan section). */
#define S6_DEC_SHARE 0.3
/* The team of a scan over B T E N state elements (threading.h); the backward is about three
 * forwards (recompute, reverse sweep, partial sums). */
static int s6_team(int B, int T, int E, int N, double passes, long items) {
    return kt_team(passes * B * (double)T * E * N * KT_NS_SCAN_EXP, items);
}

static void check_dims(int B, int T, int E, int N) {
    CHECK(B >= 0 && T >= 0 && E > 0 && N > 0, "s6: bad dims B=%d T=%d E=%d N=%d", B, T, E, N);
}

/* Block width of the backward: a function of (T, N) only, so the reduction order is fixed. */
static int bwd_width(int T, int N) {
    int cw = CW_MAX;
    while (cw > 16 && 2 * (size_t)T * N * cw > BWD_BUF_FLOATS) cw /= 2;
    return cw;
}

/* A (E, N) transposed to (N, E), once per call (every item of a call reads the same A): the
 * items copied their block from A itself, one strided store per element, and with B items per
 * block that was 1-2% of a Mamba-1 training step (`perf annotate`, m1_64). Strided reads, rows
 * written in order. */
static const float *transpose_A(const float *A, int E, int N) {
    float *AT = kscratch_floats(KS_S6_AT, (size_t)E * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < E; i++) AT[(size_t)j * E + i] = A[(size_t)i * N + j];
    return AT;
}

/* At[j][c] = A[i0 + c][j] for c < cw (the block's A, transposed; row stride cs), from
 * AT = transpose_A(A). */
static void load_At(float *At, const float *AT, int i0, int cw, int cs, int E, int N) {
    for (int j = 0; j < N; j++) memcpy(At + (size_t)j * cs, AT + (size_t)j * E + i0, sizeof(float) * (size_t)cw);
}

/* ---- decays ---------------------------------------------------------------------------------- */

static int imin(int a, int b) { return a < b ? a : b; }

/* Offset in the decay table (kernels.h) of sequence b, token t, the group of channel i0 (a
 * multiple of GW), row 0; the groups after it in the same block follow at N GW floats each. */
static size_t dec_at(int b, int t, int i0, int T, int E, int N) {
    const size_t per = CW_MAX / GW, G = ((size_t)E + GW - 1) / GW, NS = (size_t)N * GW;
    size_t g = (size_t)i0 / GW, k = g / per, nk = G - per * k < per ? G - per * k : per;
    return ((size_t)b * T * G + k * T * per + (size_t)t * nk + g % per) * NS;
}

/* One sequence's decays in one block of channels [i0, i0 + cw), token by token: group q, row j,
 * lane l = vexp(dt A) of channel i0 + q GW + l; Ag is A in the table's layout (0 past E), the
 * padding lanes 0. */
static void decay_block(float *table, const float *dt, const float *Ag, int b, int i0, int cw, int T, int E,
                        int N) {
    const int full = cw / GW;
    for (int t = 0; t < T; t++) {
        float *restrict a = table + dec_at(b, t, i0, T, E, N);
        const float *restrict d = dt + ((size_t)b * T + t) * E + i0;
        const float *restrict Ab = Ag + (size_t)i0 * N;
        for (int q = 0; q < full; q++)
            for (int j = 0; j < N; j++)
                for (int l = 0; l < GW; l++) {
                    size_t k = ((size_t)q * N + j) * GW + l;
                    a[k] = vexp(d[q * GW + l] * Ab[k]);
                }
        if (full * GW < cw)
            for (int j = 0; j < N; j++)
                for (int l = 0; l < GW; l++) {
                    size_t k = ((size_t)full * N + j) * GW + l;
                    a[k] = full * GW + l < cw ? vexp(d[full * GW + l] * Ab[k]) : 0.f;
                }
    }
}

void k_s6_decay(float *a, const float *dt, const float *A, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    if (B == 0 || T == 0) return;
    const size_t row = k_s6_decay_floats(1, 1, E, N);
    float *Ag = kscratch_floats(KS_S6_WS, row);
    for (size_t k = 0; k < row; k++) { /* A in the table's layout, one token's worth */
        size_t g = k / ((size_t)N * GW), j = k / GW % (size_t)N, i = g * GW + k % GW;
        Ag[k] = i < (size_t)E ? A[i * N + j] : 0.f;
    }
    const int nblk = (E + CW_MAX - 1) / CW_MAX, items = B * nblk;
    KT_FOR(s6_team(B, T, E, N, 1.0, items),
           for (int it = 0; it < items; it++) {
               int b = it / nblk, i0 = (it % nblk) * CW_MAX;
               decay_block(a, dt, Ag, b, i0, imin(CW_MAX, E - i0), T, E, N);
           });
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Per-thread forward workspace: h (N, CW_MAX), At (N, CW_MAX), u, acc, dt (CW_MAX each). */
static size_t fwd_ws_floats(int N) { return (2 * (size_t)N + 3) * CW_MAX; }

/* Channels per inner chunk: the chunk's dt, dt x and readout stay in registers over the N states
 * (one AVX-512 vector, two AVX2 ones); only the state rows go through memory. */
#define FWD_CHUNK 16
_Static_assert(FWD_CHUNK == GW, "a forward chunk is one group of the table");

/* One chunk of FWD_CHUNK channels at one t: H_j = exp(dt A_j) H_j + (dt x) B_j for every j, and
 * acc = sum_j C_j H_j. The same operations in the same order as a loop over c inside j. */
static void fwd_chunk(float *restrict h, const float *restrict At, float *restrict acc,
                      const float *restrict dtc, const float *restrict uc, const float *restrict bm,
                      const float *restrict cm, int N) {
    float a[FWD_CHUNK], dtv[FWD_CHUNK], uv[FWD_CHUNK];
    for (int l = 0; l < FWD_CHUNK; l++) {
        a[l] = 0.f;
        dtv[l] = dtc[l];
        uv[l] = uc[l];
    }
    for (int j = 0; j < N; j++) {
        float bj = bm[j], cj = cm[j];
        float *restrict hj = h + (size_t)j * CW_MAX;
        const float *restrict aj = At + (size_t)j * CW_MAX;
        for (int l = 0; l < FWD_CHUNK; l++) {
            float hv = vexp(dtv[l] * aj[l]) * hj[l] + uv[l] * bj;
            hj[l] = hv;
            a[l] += cj * hv;
        }
    }
    for (int l = 0; l < FWD_CHUNK; l++) acc[l] = a[l];
}

/* fwd_chunk with the decays given: one group of k_s6_decay's table, row j at dec + j GW. The same
 * operations on the same values, the exp taken out (vexp's bits, computed once). On GNU vectors:
 * without the exp in the loop, gcc unrolled the 16 lanes and left them scalar. */
#define GV (GW / KV_W)
static void fwd_chunk_dec(float *restrict h, const float *restrict dec, float *restrict acc,
                          const float *restrict uc, const float *restrict bm, const float *restrict cm, int N) {
    kv_f a[GV], uv[GV];
    for (int q = 0; q < GV; q++) {
        a[q] = (kv_f){0};
        uv[q] = kv_load(uc + q * KV_W);
    }
    for (int j = 0; j < N; j++) {
        float bj = bm[j], cj = cm[j];
        float *hj = h + (size_t)j * CW_MAX;
        const float *ej = dec + (size_t)j * GW;
        for (int q = 0; q < GV; q++) {
            kv_f hv = kv_load(ej + q * KV_W) * kv_load(hj + q * KV_W) + uv[q] * bj;
            kv_store(hj + q * KV_W, hv);
            a[q] += cj * hv;
        }
    }
    for (int q = 0; q < GV; q++) kv_store(acc + q * KV_W, a[q]);
}

static void fwd_block(float *ws, float *y, float *h_out, const float *x, const float *dt,
                      const float *AT, const float *dec, const float *Bm, const float *Cm, const float *D, int b,
                      int i0, int cw, int T, int E, int N) {
    float *h = ws, *At = h + (size_t)N * CW_MAX, *u = At + (size_t)N * CW_MAX, *acc = u + CW_MAX,
          *dtb = acc + CW_MAX;
    /* a narrow last block runs whole chunks: its padding lanes have A = 0, dt = 0, u = 0, so
     * their states stay 0 and nothing of them is written out */
    const int cwp = (cw + FWD_CHUNK - 1) / FWD_CHUNK * FWD_CHUNK;
    if (!dec) { /* A and dt feed the exps only: with a table they are not read */
        memset(At, 0, sizeof(float) * (size_t)N * CW_MAX);
        load_At(At, AT, i0, cw, CW_MAX, E, N);
    }
    memset(h, 0, sizeof(float) * (size_t)N * CW_MAX);
    for (int c = cw; c < cwp; c++) u[c] = dtb[c] = 0.f;
    for (int t = 0; t < T; t++) {
        size_t bt = (size_t)b * T + t, r = bt * E + i0;
        const float *xt = x + r, *dtt = dt + r, *bm = Bm + bt * N, *cm = Cm + bt * N;
        if (dec)
            for (int c = 0; c < cw; c++) u[c] = dtt[c] * xt[c];
        else
            for (int c = 0; c < cw; c++) {
                dtb[c] = dtt[c];
                u[c] = dtt[c] * xt[c];
            }
        if (dec) { /* the block's groups of the token, in order (a padding lane's decay is 0) */
            const float *et = dec + dec_at(b, t, i0, T, E, N);
            for (int c0 = 0; c0 < cwp; c0 += FWD_CHUNK)
                fwd_chunk_dec(h + c0, et + (size_t)c0 * N, acc + c0, u + c0, bm, cm, N);
        } else {
            for (int c0 = 0; c0 < cwp; c0 += FWD_CHUNK)
                fwd_chunk(h + c0, At + c0, acc + c0, dtb + c0, u + c0, bm, cm, N);
        }
        float *yt = y + r;
        if (D)
            for (int c = 0; c < cw; c++) yt[c] = acc[c] + D[i0 + c] * xt[c];
        else
            memcpy(yt, acc, sizeof(float) * (size_t)cw);
    }
    if (h_out)
        for (int c = 0; c < cw; c++)
            for (int j = 0; j < N; j++)
                h_out[((size_t)b * E + i0 + c) * N + j] = h[(size_t)j * CW_MAX + c];
}

void k_s6_fwd(float *y, float *h_out, const float *x, const float *dt, const float *A, const float *decay,
              const float *Bm, const float *Cm, const float *D, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    if (B == 0) return;
    if (T == 0) {
        if (h_out) memset(h_out, 0, sizeof(float) * (size_t)B * E * N);
        return;
    }
    const int nblk = (E + CW_MAX - 1) / CW_MAX, items = B * nblk;
    const size_t wsz = fwd_ws_floats(N);
    float *wsbuf = kscratch_floats(KS_S6_WS, wsz * (size_t)kt_max_threads());
    const float *AT = decay ? NULL : transpose_A(A, E, N); /* with a table, A is not read */
    KT_FOR(s6_team(B, T, E, N, decay ? S6_DEC_SHARE : 1.0, items),
    for (int it = 0; it < items; it++) {
        int b = it / nblk, i0 = (it % nblk) * CW_MAX;
        fwd_block(wsbuf + wsz * (size_t)kt_thread_id(), y, h_out, x, dt, AT, decay, Bm, Cm, D, b, i0,
                  imin(CW_MAX, E - i0), T, E, N);
    });
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Views of one backward call, shared by every item. */
typedef struct {
    float *dx, *ddt;                    /* (B,T,E) += ; NULL ok */
    float *pA, *pD, *pB, *pC;           /* partials (see k_s6_bwd); NULL when not wanted */
    const float *dy, *x, *dt, *AT, *Bm, *Cm, *D; /* AT: A transposed (transpose_A) */
    int T, E, N, cw, nblk;
} Bwd;

/* VL lanes of partial sums for the per-row dots over channels (one AVX-512 vector): the loop
 * runs in chunks of VL channels with a fixed-length inner loop, which gcc turns into vector code. */
#define VL 16

/* Per-thread backward workspace, block width cw: Hs, As (T, N, cw); carry, At, dAc (N, cw);
 * zero, u, gs, gdt, dDc (cw); lB, lC (N, VL) and tB, tC (N), a token's channel-sum partials. */
static size_t bwd_ws_floats(int T, int N, int cw) {
    return (2 * (size_t)T * N + 3 * (size_t)N + 5) * cw + 2 * (size_t)N * (VL + 1);
}

/* a = exp(dt A_j), H_t = a H_{t-1} + (dt x) B_j; H_{t-1} = a zero row at t = 0 */
static void recompute_row(float *restrict hc, float *restrict ac, const float *restrict hp,
                          const float *restrict aj, const float *restrict dtt, const float *restrict u,
                          float bj, int cw) {
    for (int c = 0; c < cw; c++) {
        float a = vexp(dtt[c] * aj[c]);
        ac[c] = a;
        hc[c] = a * hp[c] + u[c] * bj;
    }
}

/* acc[0] + ... + acc[VL-1] as a pairwise tree: a fixed order (clobbers acc). */
static inline float tree_sum(float *acc) {
    _Static_assert(VL == 16, "tree_sum adds 16 lanes"); /* halves spelled out, as lanes_total */
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

/* The reverse step, per state row j and channel:
 *   G = dy C_j + carry;  q = G a H_{t-1};  gs += G B_j;  gdt += q A_j;  dA_j += q dt;
 *   carry = a G (the a_{t+1} G_{t+1} of the next, earlier step);
 * and the two channel sums sum_c G (dt x), sum_c dy H_t, fused into the same pass: VL-lane partials
 * per row into lB, lC, the channels past the last whole chunk into tB, tC (row_sums adds them up
 * for all rows of the token; the order depends on cw only). ddt's other term, sum_j G B_j x =
 * x gs, is added once per token after the rows (token_finish): 9 operations per element.
 *
 * reverse_slab: one token over a slab of nch whole VL-lane chunks of channels, all N rows, with the
 * token's dy, dt, u and its sums over the rows (gs, gdt) held in registers across the rows: row by
 * row over the block, those were 5 more loads and 2 more stores per element, and the kernel alone
 * (B 64, T 17, E 128, N 16, one thread) went 25% faster with AVX-512 (4 chunks per slab), 11%
 * with AVX2 (1 chunk), level with SSE2; the same bits on all three. Row j's chunk sums continue
 * from lB, lC (the previous slab's) unless first, so each lane still adds its chunks in order.
 * Pointers start at the slab's first channel; rows are cs apart, hp's hps apart (0: the one zero
 * row before the first token). */
#define CV (VL / KV_W)
static inline __attribute__((always_inline)) void reverse_slab(
    const int nch, int first, float *restrict carry, float *restrict dAc, float *restrict gs, float *restrict gdt,
    const float *restrict go, const float *restrict hc0, const float *restrict hp0, const float *restrict ac0,
    const float *restrict At, const float *restrict dtt, const float *restrict u, const float *restrict bm,
    const float *restrict cm, float *restrict lB, float *restrict lC, int N, int cs, int hps) {
    kv_f vgo[4 * CV], vdt[4 * CV], vu[4 * CV], vgs[4 * CV], vgdt[4 * CV];
    for (int q = 0; q < nch * CV; q++) {
        vgo[q] = kv_load(go + q * KV_W);
        vdt[q] = kv_load(dtt + q * KV_W);
        vu[q] = kv_load(u + q * KV_W);
        vgs[q] = vgdt[q] = (kv_f){0};
    }
    for (int j = 0; j < N; j++) {
        const size_t o = (size_t)j * cs;
        const float bj = bm[j], cj = cm[j];
        float *lBj = lB + (size_t)j * VL, *lCj = lC + (size_t)j * VL;
        kv_f aB[CV], aC[CV];
        for (int p = 0; p < CV; p++) {
            aB[p] = first ? (kv_f){0} : kv_load(lBj + p * KV_W);
            aC[p] = first ? (kv_f){0} : kv_load(lCj + p * KV_W);
        }
        for (int q = 0; q < nch * CV; q++) {
            const size_t e = o + (size_t)q * KV_W;
            kv_f ac = kv_load(ac0 + e);
            kv_f G = vgo[q] * cj + kv_load(carry + e);
            kv_f qq = G * (ac * kv_load(hp0 + (size_t)j * hps + (size_t)q * KV_W));
            vgs[q] += G * bj;
            vgdt[q] += qq * kv_load(At + e);
            kv_store(dAc + e, kv_load(dAc + e) + qq * vdt[q]);
            kv_store(carry + e, ac * G);
            aB[q % CV] += G * vu[q];
            aC[q % CV] += vgo[q] * kv_load(hc0 + e);
        }
        for (int p = 0; p < CV; p++) {
            kv_store(lBj + p * KV_W, aB[p]);
            kv_store(lCj + p * KV_W, aC[p]);
        }
    }
    for (int q = 0; q < nch * CV; q++) {
        kv_store(gs + q * KV_W, vgs[q]);
        kv_store(gdt + q * KV_W, vgdt[q]);
    }
}

/* VL-lane chunks per slab: the slab's 5 arrays of registers and the row's 2 chunk sums must fit
 * the register file (32 zmm: 4 chunks, 22 vectors; 16 ymm or xmm: 1 chunk, 14 ymm / 28 xmm). */
#if KV_W == 16
#define SLAB_MAX 4
#else
#define SLAB_MAX 1
#endif

/* One token's reverse step over the whole block: slabs over the whole chunks, then the channels
 * past them row by row. */
static void reverse_token(float *restrict carry, float *restrict dAc, float *restrict gs, float *restrict gdt,
                          const float *restrict go, const float *restrict hc, const float *restrict hp,
                          const float *restrict ac, const float *restrict At, const float *restrict dtt,
                          const float *restrict u, const float *restrict bm, const float *restrict cm,
                          float *restrict lB, float *restrict lC, float *restrict tB, float *restrict tC, int N,
                          int cw, int cs, int hps) {
    const int cwv = cw / VL * VL;
    for (int c0 = 0; c0 < cwv;) {
        int nch = imin(SLAB_MAX, (cwv - c0) / VL);
#define SLAB(n) reverse_slab(n, c0 == 0, carry + c0, dAc + c0, gs + c0, gdt + c0, go + c0, hc + c0, hp + c0, \
                             ac + c0, At + c0, dtt + c0, u + c0, bm, cm, lB, lC, N, cs, hps)
        switch (nch) {
#if SLAB_MAX == 4
        case 4: SLAB(4); break;
        case 3: SLAB(3); break;
        case 2: SLAB(2); break;
#endif
        default: SLAB(1); break;
        }
#undef SLAB
        c0 += nch * VL;
    }
    if (cwv == 0) {
        memset(lB, 0, sizeof(float) * (size_t)N * VL);
        memset(lC, 0, sizeof(float) * (size_t)N * VL);
    }
    for (int j = 0; j < N; j++) {
        const size_t o = (size_t)j * cs;
        float *cr = carry + o, *da = dAc + o;
        const float bj = bm[j], cj = cm[j];
        float sB = 0.f, sC = 0.f;
        for (int c = cwv; c < cw; c++) {
            float G = go[c] * cj + cr[c];
            float q = G * (ac[o + c] * hp[(size_t)j * hps + c]);
            gs[c] += G * bj;
            gdt[c] += q * At[o + c];
            da[c] += q * dtt[c];
            cr[c] = ac[o + c] * G;
            sB += G * u[c];
            sC += go[c] * hc[o + c];
        }
        tB[j] = sB;
        tC[j] = sC;
    }
}

/* out[j] = tail[j] + the sum of lanes[j][0..VL) for j < N: KV_W rows at a time, each row's VL lanes
 * folded to one vector ((lo + hi) halves) and the rows' lanes summed together (kv_sum_rows,
 * cpu/vecw.h), ~3 operations per row where a tree per row took ~8 (`k_s6_bwd` alone, B 64, T 17,
 * E 128, N 16, AVX-512: 2,348-2,401 -> 2,211-2,286 us; level with AVX2 and SSE2). */
static void row_sums(float *restrict out, const float *restrict lanes, const float *restrict tail, int N) {
    _Static_assert(VL % KV_W == 0, "a row's lanes fold into one vector");
    for (int j0 = 0; j0 < N; j0 += KV_W) {
        kv_f in[KV_W];
        for (int k = 0; k < KV_W; k++) {
            int j = j0 + kv_slot_row(k);
            kv_f v = {0};
            if (j < N) {
                kv_f f[VL / KV_W];
                for (int q = 0; q < VL / KV_W; q++) f[q] = kv_load(lanes + (size_t)j * VL + q * KV_W);
                for (int w = VL / KV_W; w > 1; w /= 2) /* pairwise halves */
                    for (int q = 0; q < w / 2; q++) f[q] = f[q] + f[q + w / 2];
                v = f[0];
            }
            in[k] = v;
        }
        kv_f sum = kv_sum_rows(in);
        for (int k = 0; k < KV_W && j0 + k < N; k++) out[j0 + k] = tail[j0 + k] + sum[k];
    }
}

/* Per token, before the rows: u = dt x, gs = gdt = 0, dD's partial += dy x. In functions of their
 * own for the restrict pointers: inline in bwd_block, with every buffer in one workspace, gcc left
 * the first loop scalar and versioned the others. */
static void token_start(float *restrict u, float *restrict gs, float *restrict gdt,
                        float *restrict dDc, const float *restrict dtt, const float *restrict xt,
                        const float *restrict go, int cw) {
    for (int c = 0; c < cw; c++) {
        u[c] = dtt[c] * xt[c];
        gs[c] = 0.f;
        gdt[c] = 0.f;
        dDc[c] += go[c] * xt[c];
    }
}

/* Per token, after the rows: dx += D dy + dt gs, ddt += gdt + x gs (dx, ddt, D may be NULL). */
static void token_finish(float *restrict dx, float *restrict ddt, const float *restrict D,
                         const float *restrict go, const float *restrict dtt, const float *restrict xt,
                         const float *restrict gs, const float *restrict gdt, int cw) {
    if (dx && D)
        for (int c = 0; c < cw; c++) dx[c] += D[c] * go[c] + dtt[c] * gs[c];
    else if (dx)
        for (int c = 0; c < cw; c++) dx[c] += dtt[c] * gs[c];
    if (ddt)
        for (int c = 0; c < cw; c++) ddt[c] += gdt[c] + xt[c] * gs[c];
}

static void bwd_block(const Bwd *v, float *ws, int b, int blk) {
    const int T = v->T, E = v->E, N = v->N, cs = v->cw, i0 = blk * cs, cw = imin(cs, E - i0);
    const size_t NC = (size_t)N * cs;
    float *Hs = ws, *As = Hs + (size_t)T * NC, *carry = As + (size_t)T * NC, *At = carry + NC;
    float *dAc = At + NC, *zero = dAc + NC, *u = zero + cs, *gs = u + cs, *gdt = gs + cs;
    float *dDc = gdt + cs, *lB = dDc + cs, *lC = lB + (size_t)N * VL, *tB = lC + (size_t)N * VL;
    float *tC = tB + N;
    load_At(At, v->AT, i0, cw, cs, E, N);
    memset(zero, 0, sizeof(float) * (size_t)cs);

    /* recompute the block's states: Hs[t] = H_{t+1} in the kernels.h numbering, As[t] = a_t */
    for (int t = 0; t < T; t++) {
        size_t bt = (size_t)b * T + t, r = bt * E + i0;
        const float *xt = v->x + r, *dtt = v->dt + r, *bm = v->Bm + bt * N;
        for (int c = 0; c < cw; c++) u[c] = dtt[c] * xt[c];
        for (int j = 0; j < N; j++)
            recompute_row(Hs + (size_t)t * NC + (size_t)j * cs, As + (size_t)t * NC + (size_t)j * cs,
                          t ? Hs + (size_t)(t - 1) * NC + (size_t)j * cs : zero, At + (size_t)j * cs, dtt, u,
                          bm[j], cw);
    }

    /* reverse time: carry[j] = a_{t+1} G_{t+1}[j] */
    memset(carry, 0, sizeof(float) * NC);
    memset(dAc, 0, sizeof(float) * NC);
    memset(dDc, 0, sizeof(float) * (size_t)cs);
    for (int t = T - 1; t >= 0; t--) {
        size_t bt = (size_t)b * T + t, r = bt * E + i0;
        const float *xt = v->x + r, *dtt = v->dt + r, *go = v->dy + r;
        const float *bm = v->Bm + bt * N, *cm = v->Cm + bt * N;
        float *pB = v->pB ? v->pB + (((size_t)b * v->nblk + blk) * T + t) * N : NULL;
        float *pC = v->pC ? v->pC + (((size_t)b * v->nblk + blk) * T + t) * N : NULL;
        token_start(u, gs, gdt, dDc, dtt, xt, go, cw);
        reverse_token(carry, dAc, gs, gdt, go, Hs + (size_t)t * NC, t ? Hs + (size_t)(t - 1) * NC : zero,
                      As + (size_t)t * NC, At, dtt, u, bm, cm, lB, lC, tB, tC, N, cw, cs, t ? cs : 0);
        if (pB) row_sums(pB, lB, tB, N);
        if (pC) row_sums(pC, lC, tC, N);
        token_finish(v->dx ? v->dx + r : NULL, v->ddt ? v->ddt + r : NULL, v->D ? v->D + i0 : NULL, go, dtt,
                     xt, gs, gdt, cw);
    }
    if (v->pA)
        for (int c = 0; c < cw; c++)
            for (int j = 0; j < N; j++)
                v->pA[((size_t)b * E + i0 + c) * N + j] = dAc[(size_t)j * cs + c];
    if (v->pD) memcpy(v->pD + (size_t)b * E + i0, dDc, sizeof(float) * (size_t)cw);
}

/* dst[q] += sum_{k<K} src[k*stride + q] for q in [q0, q0+n), n <= RCH: the sums run in double, in
 * k order, over one contiguous chunk at a time (vector loads, no strided access). */
#define RCH 256
static void sum_parts(float *restrict dst, const float *restrict src, size_t stride, int K, size_t q0, size_t n) {
    for (size_t c = 0; c < n; c += RCH) {
        size_t m = n - c < RCH ? n - c : RCH;
        double acc[RCH];
        for (size_t q = 0; q < m; q++) acc[q] = 0;
        for (int k = 0; k < K; k++) {
            const float *s = src + (size_t)k * stride + q0 + c;
            for (size_t q = 0; q < m; q++) acc[q] += s[q];
        }
        for (size_t q = 0; q < m; q++) dst[q0 + c + q] += (float)acc[q];
    }
}

void k_s6_bwd(float *dx, float *ddt, float *dA, float *dBm, float *dCm, float *dD, const float *dy,
              const float *x, const float *dt, const float *A, const float *Bm, const float *Cm,
              const float *D, int B, int T, int E, int N) {
    check_dims(B, T, E, N);
    if (B == 0 || T == 0) return;
    if (!dx && !ddt && !dA && !dBm && !dCm && !dD) return;
    const int cw = bwd_width(T, N), nblk = (E + cw - 1) / cw, items = B * nblk;
    /* partials: pA (B,E,N), pD (B,E), pB, pC (B, nblk, T, N) */
    size_t nA = dA ? (size_t)B * E * N : 0, nD = dD ? (size_t)B * E : 0;
    size_t nBC = (size_t)B * nblk * T * N, nB = dBm ? nBC : 0, nC = dCm ? nBC : 0;
    float *part = kscratch_floats(KS_S6_PART, nA + nD + nB + nC);
    Bwd v = {dx, ddt, dA ? part : NULL, dD ? part + nA : NULL, dBm ? part + nA + nD : NULL,
             dCm ? part + nA + nD + nB : NULL, dy, x, dt, transpose_A(A, E, N), Bm, Cm, D, T, E, N, cw, nblk};
    const size_t wsz = bwd_ws_floats(T, N, cw);
    float *wsbuf = kscratch_floats(KS_S6_WS, wsz * (size_t)kt_max_threads());
    KT_FOR(s6_team(B, T, E, N, 3.0, items),
           for (int it = 0; it < items; it++)
               bwd_block(&v, wsbuf + wsz * (size_t)kt_thread_id(), it / nblk, it % nblk));
    /* fixed-order reductions of the partials, after every item */
    if (dBm || dCm) {
        KT_FOR(kt_team((double)B * T * N * nblk * KT_NS_COPY, B),
        for (int b = 0; b < B; b++) {
            size_t TN = (size_t)T * N, o = (size_t)b * nblk * TN;
            if (dBm) sum_parts(dBm + (size_t)b * TN, v.pB + o, TN, nblk, 0, TN);
            if (dCm) sum_parts(dCm + (size_t)b * TN, v.pC + o, TN, nblk, 0, TN);
        });
    }
    const size_t EN = (size_t)E * N, nchA = dA ? (EN + RCH - 1) / RCH : 0;
    const size_t nchD = dD ? ((size_t)E + RCH - 1) / RCH : 0;
    if (dA || dD) {
        KT_FOR(kt_team((double)B * (EN + E) * KT_NS_COPY, (long)(nchA + nchD)),
        for (size_t k = 0; k < nchA + nchD; k++) {
            if (k < nchA) sum_parts(dA, v.pA, EN, B, k * RCH, imin(RCH, (int)(EN - k * RCH)));
            else sum_parts(dD, v.pD, (size_t)E, B, (k - nchA) * RCH, imin(RCH, (int)(E - (k - nchA) * RCH)));
        });
    }
}

/* ---- step ------------------------------------------------------------------------------------ */

#define SL 16 /* lanes of the step's dot over N */

/* Channels of one step work item (the division b, i = r / E, r % E once per item, not per row). */
#define STEP_CH 16

/* One channel of the step: its N states (lanes along N), the new state into hn / ho, the readout.
 * ei: the channel's decays (k_s6_step_decay) | NULL (taken here: the same values). */
static inline float step_channel(float *ho, const float *hi, const float *restrict Ai, const float *restrict ei,
                                 const float *restrict bm, const float *restrict cm, float d, float u, int N) {
    float acc[SL], hn[SL], e[SL];
    for (int l = 0; l < SL; l++) acc[l] = 0.f;
    int j = 0;
    for (; j + SL <= N; j += SL) {
        if (ei) memcpy(e, ei + j, sizeof e);
        else
            for (int l = 0; l < SL; l++) e[l] = vexp(d * Ai[j + l]);
        /* all SL lanes read before any is written: h_out may be h_in */
        for (int l = 0; l < SL; l++) hn[l] = e[l] * hi[j + l] + u * bm[j + l];
        for (int l = 0; l < SL; l++) acc[l] += cm[j + l] * hn[l];
        if (ho) memcpy(ho + j, hn, sizeof hn);
    }
    float s = 0.f;
    for (; j < N; j++) {
        float h1 = (ei ? ei[j] : vexp(d * Ai[j])) * hi[j] + u * bm[j];
        s += cm[j] * h1;
        if (ho) ho[j] = h1;
    }
    _Static_assert(SL == VL, "the step's dot uses the backward's 16-lane tree");
    return s + tree_sum(acc);
}

#define STEP_GROUP_N 32 /* the largest N of the grouped step */

/* KV_W channels at once when N is whole vectors (cpu/vecw.h) and at most STEP_GROUP_N: each
 * channel's new state and the lanes of its readout, then the KV_W readouts summed together
 * (kv_sum_rows) instead of a 16-lane tree per channel, whose shuffles were 64 of the 264
 * instructions of the four-channel form this replaces (perf annotate); the channels' exp chains
 * are independent, so the unrolled group keeps the FMA units busy. ho may equal hi: every state is
 * read before it is written. */
static inline __attribute__((always_inline)) void step_group(
    float *yg, float *ho, const float *hi, const float *restrict Ag, const float *restrict eg,
    const float *restrict bm, const float *restrict cm, const float *restrict dg, const float *restrict xg,
    const float *restrict Dg, const int N) {
    float eloc[KV_W * STEP_GROUP_N]; /* the decays, one plain loop per channel: gcc vectorises it on
                                       * every ISA (inside the unrolled group, AVX2 and SSE2 got
                                       * scalar exps, 3.6x slower); or eg's, the same values */
    const float *e = eg;
    if (!eg) {
        for (int k = 0; k < KV_W; k++)
            for (int l = 0; l < N; l++) eloc[k * N + l] = vexp(dg[k] * Ag[(size_t)k * N + l]);
        e = eloc;
    }
    kv_f acc[KV_W];
#pragma GCC unroll 16
    for (int j = 0; j < KV_W; j++) {
        int k = kv_slot_row(j);
        float u = dg[k] * xg[k];
        kv_f a = {0};
        for (int c = 0; c < N; c += KV_W) {
            kv_f h = kv_load(e + k * N + c) * kv_load(hi + (size_t)k * N + c) + u * kv_load(bm + c);
            if (ho) kv_store(ho + (size_t)k * N + c, h);
            a += kv_load(cm + c) * h;
        }
        acc[j] = a;
    }
    kv_f y = kv_sum_rows(acc);
    if (Dg) y += kv_load(Dg) * kv_load(xg);
    kv_store(yg, y);
}

/* eg NULL and not NULL get code of their own (a constant NULL leaves step_group's code as it was
 * before the decays could be given: with eg a run-time value, the step without them ran 3-5%
 * slower, `bench_kernels --only step`). */
static void step_group_any(float *yg, float *ho, const float *hi, const float *Ag, const float *eg,
                           const float *bm, const float *cm, const float *dg, const float *xg, const float *Dg, int N) {
#define STEP_GROUP_AT(n)                                                        \
    do {                                                                       \
        if (eg) step_group(yg, ho, hi, Ag, eg, bm, cm, dg, xg, Dg, n);         \
        else step_group(yg, ho, hi, Ag, NULL, bm, cm, dg, xg, Dg, n);          \
    } while (0)
    if (N == KV_W) STEP_GROUP_AT(KV_W);
    else if (N == 2 * KV_W) STEP_GROUP_AT(2 * KV_W);
    else STEP_GROUP_AT(N);
#undef STEP_GROUP_AT
}

/* One sequence's decays for channels [c0, c1): vectorised along N. */
static void step_decay_rows(float *restrict a, const float *restrict dt, const float *restrict A, int c0, int c1,
                            int N) {
    for (int i = c0; i < c1; i++)
        for (int j = 0; j < N; j++) a[(size_t)i * N + j] = vexp(dt[i] * A[(size_t)i * N + j]);
}

void k_s6_step_decay(float *a, const float *dt, const float *A, int B, int E, int N) {
    check_dims(B, 1, E, N);
    const int nch = (E + STEP_CH - 1) / STEP_CH;
    const long items = (long)B * nch;
    KT_FOR(s6_team(B, 1, E, N, 1.0, items),
    for (long it = 0; it < items; it++) {
        int b = (int)(it / nch), c0 = (int)(it % nch) * STEP_CH;
        step_decay_rows(a + (size_t)b * E * N, dt + (size_t)b * E, A, c0, imin(E, c0 + STEP_CH), N);
    });
}

void k_s6_step(float *y, float *h_out, const float *h_in, const float *x, const float *dt,
               const float *A, const float *decay, const float *Bm, const float *Cm, const float *D, int B, int E,
               int N) {
    check_dims(B, 1, E, N);
    const int nch = (E + STEP_CH - 1) / STEP_CH;
    const long items = (long)B * nch;
    KT_FOR(s6_team(B, 1, E, N, decay ? S6_DEC_SHARE : 1.0, items),
    for (long it = 0; it < items; it++) {
        int b = (int)(it / nch), c0 = (int)(it % nch) * STEP_CH, c1 = imin(E, c0 + STEP_CH);
        const float *bm = Bm + (size_t)b * N, *cm = Cm + (size_t)b * N;
        int i = c0;
        if (N % KV_W == 0 && N <= STEP_GROUP_N)
            for (; i + KV_W <= c1; i += KV_W) {
                size_t r = (size_t)b * E + i;
                step_group_any(y + r, h_out ? h_out + r * N : NULL, h_in + r * N, A + (size_t)i * N,
                               decay ? decay + r * N : NULL, bm, cm, dt + r, x + r, D ? D + i : NULL, N);
            }
        for (; i < c1; i++) { /* the channels past the last group, and rows of other N */
            size_t r = (size_t)b * E + i;
            float d = dt[r];
            float s = step_channel(h_out ? h_out + r * N : NULL, h_in + r * N, A + (size_t)i * N,
                                   decay ? decay + r * N : NULL, bm, cm, d, d * x[r], N);
            y[r] = D ? s + D[i] * x[r] : s;
        }
    });
}
