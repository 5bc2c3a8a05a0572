/* block.c: pre-norm residual block over a Mamba2 or attention mixer and an optional MLP
 * (spec implicit-lm §1.3); see block.h. The mixer dispatch lives in the small static helpers
 * mix_*; everything else is composition of rmsnorm, the mixer and mlp.
 *
 * Backward (g = dz_out):
 *   MLP part:   g1 = g + RMSNorm2_bwd(z1, MLP_bwd(xn2, g))       (identity residual + MLP path)
 *   mixer part: dz += g1 + RMSNorm1_bwd(z, Mixer_bwd(xn1, u, g1))
 */
#include "block.h"
#include "noise.h"

#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"
#include "rmsnorm.h"

void block_cfg_mamba2(BlockCfg *c, const Mamba2Cfg *m, MlpKind mlp, int d_inner, float eps) {
    memset(c, 0, sizeof *c);
    c->mixer = MIXER_MAMBA2;
    c->D = m->D;
    c->eps = eps;
    c->mamba2 = *m;
    c->mlp = mlp_cfg(mlp, m->D, d_inner);
}

void block_cfg_attn(BlockCfg *c, const AttnCfg *a, MlpKind mlp, int d_inner, float eps) {
    memset(c, 0, sizeof *c);
    c->mixer = MIXER_ATTN;
    c->D = a->D;
    c->eps = eps;
    c->attn = *a;
    c->mlp = mlp_cfg(mlp, a->D, d_inner);
}

int block_u_dim(const BlockCfg *c) { return c->mixer == MIXER_MAMBA2 ? c->mamba2.K : 3 * c->D; }

void block_set_u_parts(BlockCfg *c, int on) { c->mamba2.u_parts = c->attn.u_parts = on ? 1 : 0; }

int block_u_parts(const BlockCfg *c, int n[BLOCK_U_PARTS]) {
    if (c->mixer == MIXER_MAMBA2) return mamba2_u_parts(&c->mamba2, n);
    n[0] = n[1] = n[2] = c->D;
    return 3;
}

/* One strided copy per part: rows of n_p floats, block_u_dim apart on the rows side. */
static void u_convert(const BlockCfg *c, float *dst, const float *src, size_t M, int to_parts) {
    int n[BLOCK_U_PARTS], np = block_u_parts(c, n);
    size_t K = (size_t)block_u_dim(c), off = 0;
    for (int p = 0; p < np; p++) {
        size_t w = (size_t)n[p];
        if (to_parts) k_copy_rows(dst + M * off, w, src + off, K, M, w, 0);
        else k_copy_rows(dst + off, K, src + M * off, w, M, w, 0);
        off += w;
    }
}

void block_u_to_parts(const BlockCfg *c, float *dst, const float *u, size_t M) { u_convert(c, dst, u, M, 1); }
void block_u_to_rows(const BlockCfg *c, float *dst, const float *src, size_t M) { u_convert(c, dst, src, M, 0); }

/* ---- mixer dispatch ------------------------------------------------------------------------
 * The two mixers share the shape "fwd(y, x, u, cache, scratch, state_out)" but differ in small
 * ways: only Mamba2 takes a variational mask (attention dropout is 0 in every config), and their
 * step APIs differ (Mamba2: state_in/state_out; attention: in-place KV cache + commit flag). */

static size_t mix_cache_floats(const BlockCfg *c, int B, int T) {
    return c->mixer == MIXER_MAMBA2 ? mamba2_cache_floats(&c->mamba2, B, T)
                                    : attn_cache_floats(&c->attn, B, T);
}

static size_t mix_scratch_floats(const BlockCfg *c, int B, int T) {
    return c->mixer == MIXER_MAMBA2 ? mamba2_scratch_floats(&c->mamba2, B, T)
                                    : attn_scratch_floats(&c->attn, B, T);
}

static void mix_fwd(const BlockCfg *c, const BlockW *w, float *y, const float *x, const float *u,
                    const float *mask, float *cache, float *scratch, float *state_out, int B,
                    int T) {
    if (c->mixer == MIXER_MAMBA2) {
        mamba2_fwd(&c->mamba2, &w->mamba2, y, x, u, mask, cache, scratch, state_out, B, T);
    } else {
        CHECK(!mask, "block: a mixer dropout mask is only supported for Mamba2");
        attn_fwd(&c->attn, &w->attn, y, x, u, cache, scratch, state_out, B, T);
    }
}

static void mix_bwd(const BlockCfg *c, const BlockW *w, BlockW *dW, float *dx, float *du,
                    const float *dy, const float *x, const float *u, const float *mask,
                    const float *cache, float *scratch, int B, int T) {
    if (c->mixer == MIXER_MAMBA2)
        mamba2_bwd(&c->mamba2, &w->mamba2, dW ? &dW->mamba2 : NULL, dx, du, dy, x, u, mask, cache,
                   scratch, B, T);
    else
        attn_bwd(&c->attn, &w->attn, dW ? &dW->attn : NULL, dx, du, dy, x, u, cache, scratch, B, T);
}

/* ---- sizes ---------------------------------------------------------------------------------- */

/* has_mlp <=> the backbone's d_inner > 0 (spec §1.3); mlp_cfg maps d_inner <= 0 to MLP_NONE. */
static int has_mlp(const BlockCfg *c) { return c->mlp.kind != MLP_NONE; }

/* The block keeps the normed inputs of both sublayers (their backward needs them as "x") and z1,
 * the input of RMSNorm2; it does not keep z, which the caller still holds for block_bwd. */
size_t block_cache_floats(const BlockCfg *c, int B, int T) {
    size_t M = (size_t)B * T, MD = M * c->D;
    size_t n = M + MD + mix_cache_floats(c, B, T);
    if (has_mlp(c)) n += MD + M + MD + mlp_cache_floats(&c->mlp, B, T);
    return n;
}

size_t block_scratch_floats(const BlockCfg *c, int B, int T) {
    size_t MD = (size_t)B * T * c->D, r = mix_scratch_floats(c, B, T);
    size_t m = has_mlp(c) ? mlp_scratch_floats(&c->mlp, B, T) : 0;
    return 2 * MD + (r > m ? r : m);
}

size_t block_state_floats(const BlockCfg *c, int B) {
    return c->mixer == MIXER_MAMBA2 ? mamba2_state_floats(&c->mamba2, B)
                                    : attn_state_floats(&c->attn, B);
}

size_t block_step_scratch_floats(const BlockCfg *c, int B) {
    size_t r = c->mixer == MIXER_MAMBA2 ? mamba2_step_scratch_floats(&c->mamba2, B)
                                        : attn_step_scratch_floats(&c->attn, B);
    size_t m = has_mlp(c) ? mlp_scratch_floats(&c->mlp, B, 1) : 0;
    return 3 * (size_t)B * c->D + (r > m ? r : m);
}

size_t block_pack_floats(const BlockCfg *c) {
    size_t mix = c->mixer == MIXER_MAMBA2 ? mamba2_pack_floats(&c->mamba2) : attn_pack_floats(&c->attn);
    return mix + (has_mlp(c) ? mlp_pack_floats(&c->mlp) : 0);
}

void block_pack(const BlockCfg *c, BlockW *w, float *packed) {
    if (!packed) {
        w->mamba2.packed = w->attn.packed = w->mlp.packed = NULL;
        return;
    }
    size_t mix;
    if (c->mixer == MIXER_MAMBA2) {
        mamba2_pack(&c->mamba2, &w->mamba2, packed);
        mix = mamba2_pack_floats(&c->mamba2);
    } else {
        attn_pack(&c->attn, &w->attn, packed);
        mix = attn_pack_floats(&c->attn);
    }
    if (has_mlp(c)) mlp_pack(&c->mlp, &w->mlp, packed + mix);
}

/* The cache, cut into its named parts (pointers are NULL for a NULL cache). */
typedef struct {
    float *rstd1, *xn1, *mix, *z1, *rstd2, *xn2, *mlp;
} BlockCache;

static BlockCache cache_parts(const BlockCfg *c, float *cache, int B, int T) {
    BlockCache p = {0};
    if (!cache) return p;
    size_t M = (size_t)B * T, MD = M * c->D;
    p.rstd1 = cache;
    p.xn1 = p.rstd1 + M;
    p.mix = p.xn1 + MD;
    if (has_mlp(c)) {
        p.z1 = p.mix + mix_cache_floats(c, B, T);
        p.rstd2 = p.z1 + MD;
        p.xn2 = p.rstd2 + M;
        p.mlp = p.xn2 + MD;
    }
    return p;
}

static void check_block(const BlockCfg *c, const BlockW *w, int B, int T) {
    CHECK(c && w && w->norm_w, "block: NULL cfg or weights");
    CHECK(c->mixer == MIXER_MAMBA2 || c->mixer == MIXER_ATTN, "block: bad mixer kind %d",
          (int)c->mixer);
    CHECK(c->D == (c->mixer == MIXER_MAMBA2 ? c->mamba2.D : c->attn.D), "block: D mismatch");
    CHECK(!has_mlp(c) || (w->norm2_w && c->mlp.D == c->D), "block: MLP needs norm2_w and D");
    CHECK(B > 0 && T > 0, "block: bad dims B=%d T=%d", B, T);
}

/* y = a + b (y may alias a) */
static void add_into(float *y, const float *a, const float *b, size_t n) {
    if (y != a) k_copy_rows(y, n, a, n, 1, n, 0);
    k_axpby(y, 1.0f, b, 1.0f, n);
}

/* ---- forward, backward, step ---------------------------------------------------------------- */

void block_fwd(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
               const BlockMasks *masks, float *cache, float *scratch, float *state_out, int B,
               int T) {
    check_block(c, w, B, T);
    CHECK(z_out && z && scratch, "block_fwd: NULL buffer");
    const BlockMasks none = {0};
    if (!masks) masks = &none;
    const int D = c->D, M = B * T;
    const size_t MD = (size_t)M * D;
    BlockCache p = cache_parts(c, cache, B, T);
    float *xn = scratch, *y = xn + MD, *rest = y + MD;

    /* z1 = z + Mixer(RMSNorm1(z), u): xn1 is kept when a backward follows */
    float *xn1 = cache ? p.xn1 : xn;
    rmsnorm_fwd(xn1, p.rstd1, z, w->norm_w, M, D, c->eps);
    mix_fwd(c, w, y, xn1, u, masks->mixer, p.mix, rest, state_out, B, T);
    add_into(z_out, z, y, MD);
    if (!has_mlp(c)) return;

    /* z2 = z1 + MLP(RMSNorm2(z1)); z1 is needed by RMSNorm2's backward */
    if (cache) k_copy_rows(p.z1, MD, z_out, MD, 1, MD, 0);
    float *xn2 = cache ? p.xn2 : xn;
    rmsnorm_fwd(xn2, p.rstd2, z_out, w->norm2_w, M, D, c->eps);
    mlp_fwd(&c->mlp, &w->mlp, y, xn2, masks->mlp_h, masks->mlp_o, p.mlp, rest, B, T);
    k_axpby(z_out, 1.0f, y, 1.0f, MD);
}

void block_bwd(const BlockCfg *c, const BlockW *w, BlockW *dW, float *dz, float *du,
               const float *dz_out, const float *z, const float *u, const BlockMasks *masks,
               const float *cache, float *scratch, int B, int T) {
    check_block(c, w, B, T);
    CHECK(dz_out && z && cache && scratch, "block_bwd: NULL buffer (a backward needs the cache)");
    const BlockMasks none = {0};
    if (!masks) masks = &none;
    const int D = c->D, M = B * T;
    const size_t MD = (size_t)M * D;
    /* cache_parts only computes offsets; the cache is read-only below */
    BlockCache p = cache_parts(c, (float *)cache, B, T);
    float *g1 = scratch, *dxn = g1 + MD, *rest = dxn + MD;
    float *dnorm_w = dW ? dW->norm_w : NULL;

    const float *g = dz_out; /* gradient arriving at z1 */
    if (has_mlp(c)) {
        k_copy_rows(g1, MD, dz_out, MD, 1, MD, 0);
        k_zero(dxn, MD);
        mlp_bwd(&c->mlp, &w->mlp, dW ? &dW->mlp : NULL, dxn, dz_out, p.xn2, masks->mlp_h,
                masks->mlp_o, p.mlp, rest, B, T);
        rmsnorm_bwd(g1, dW ? dW->norm2_w : NULL, dxn, p.z1, w->norm2_w, p.rstd2, M, D);
        g = g1;
    }
    if (dz) k_axpby(dz, 1.0f, g, 1.0f, MD); /* the residual path */
    /* the mixer's input gradient is only needed if someone consumes RMSNorm1's backward */
    float *dxn1 = (dz || dnorm_w) ? dxn : NULL;
    if (dxn1) k_zero(dxn1, MD);
    mix_bwd(c, w, dW, dxn1, du, g, p.xn1, u, masks->mixer, p.mix, rest, B, T);
    if (dxn1) rmsnorm_bwd(dz, dnorm_w, dxn1, z, w->norm_w, p.rstd1, M, D);
}

void block_step(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
                float *state, int pos, int commit, float *scratch, int B) {
    block_step_noisy(c, w, z_out, z, u, state, pos, commit, scratch, B, NULL);
}

void block_step_noisy(const BlockCfg *c, const BlockW *w, float *z_out, const float *z, const float *u,
                      float *state, int pos, int commit, float *scratch, int B, const BlockNoise *noise) {
    check_block(c, w, B, 1);
    CHECK(z_out && z && state && scratch, "block_step: NULL buffer");
    const int D = c->D;
    const size_t BD = (size_t)B * D;
    float *xn = scratch, *y = xn + BD, *z1 = y + BD, *rest = z1 + BD;

    rmsnorm_fwd(xn, NULL, z, w->norm_w, B, D, c->eps);
    int noisy = noise && c->mixer == MIXER_MAMBA2;
    if (noisy) noise_inject(xn, BD, noise->latent_db, noise->multiplicative, noise->rng);
    /* one commit flag for both: Mamba2 commits by writing its new state over the old one */
    if (c->mixer == MIXER_MAMBA2) {
        mamba2_step(&c->mamba2, &w->mamba2, y, xn, u, state, commit ? state : NULL, rest, B);
        if (noisy && commit) {   /* state layout: conv_state (B,C,W) then ssm_state (B,H,P,N) */
            const Mamba2Cfg *m = &c->mamba2;
            size_t nconv = (size_t)B * m->C * m->W, nssm = (size_t)B * m->H * m->P * m->N;
            noise_inject(state, nconv, noise->state_db, noise->multiplicative, noise->rng);
            noise_inject(state + nconv, nssm, noise->state_db, noise->multiplicative, noise->rng);
        }
    } else
        attn_step(&c->attn, &w->attn, y, xn, u, state, pos, commit, rest, B);
    /* z1 goes to scratch: z_out may alias z */
    add_into(z1, z, y, BD);
    if (has_mlp(c)) {
        rmsnorm_fwd(xn, NULL, z1, w->norm2_w, B, D, c->eps);
        mlp_fwd(&c->mlp, &w->mlp, y, xn, NULL, NULL, NULL, rest, B, 1);
        k_axpby(z1, 1.0f, y, 1.0f, BD);
    }
    memcpy(z_out, z1, BD * sizeof(float));
}
