/* test_fpo.c: the Fixed-Point RNN solver (src/fixedpoint/fpo.h, spec fp-rnn §1.4, §1.6, §10).
 *
 * Toy maps with known behaviour:
 *  - a constant map F: the loop stops after exactly 2 evaluations (res 1, then 0.01 < 0.1) and
 *    returns 0.99F + 0.01·0.99F (spec §10);
 *  - a map that never converges (f(y) = −y + c): the step decays by `decay` every `patience`
 *    evaluations without progress, and the loop stops when every step fell below step_min;
 *  - a batch where one sample never converges: the training quantile (q = 0.75 of 5 samples)
 *    stops once the other four converged, the evaluation criterion (q = 1) runs to the cap;
 *  - a contraction: the result is within the threshold of the exact fixed point, per token;
 *  - NaN in f gives IM_ENUM, bad options IM_EINVAL; torch.quantile's interpolation; the Gamma
 *    sampler's mean and variance.
 */
#include "th.h"
#include "../src/core/check.h"
#include "../src/fixedpoint/fpo.h"

typedef struct {
    int kind;        /* 0 constant c, 1 f(y) = −y + c, 2 per-sample: sample `stuck` is kind 1, others 0,
                      * 3 contraction y = 0.5·roll(y) + c per token, 4 NaN at call nan_at */
    int nb, per, stuck;
    const float *c;
    long calls, nan_at;
} Toy;

static void toy_f(void *ctx, float *out, const float *y) {
    Toy *t = ctx;
    t->calls++;
    for (int b = 0; b < t->nb; b++)
        for (int i = 0; i < t->per; i++) {
            size_t k = (size_t)b * t->per + i;
            int kind = t->kind == 2 ? (b == t->stuck ? 1 : 0) : t->kind;
            if (kind == 0 || kind == 4) out[k] = t->c[k];
            else if (kind == 1) out[k] = -y[k] + t->c[k];
            else out[k] = 0.5f * y[(size_t)b * t->per + (i + 1) % t->per] + t->c[k];
        }
    if (t->kind == 4 && t->calls == t->nan_at) out[1] = NAN;
}

static void test_constant(void) {
    int nb = 3, per = 8;
    float c[24], y[24] = {0};
    Rng r;
    rng_seed(&r, 1, 1);
    th_fill_uniform(c, 24, &r, -2, 2);
    Toy t = {.kind = 0, .nb = nb, .per = per, .c = c};
    FpMap m = {.ctx = &t, .n = 24, .nb = nb, .f = toy_f};
    FpoOpts o;
    fpo_opts_default(&o);
    float *scratch = th_alloc(fpo_scratch_floats(24, nb));
    float best[3];
    int conv[3];
    FpoStats st = {.sample_best = best, .sample_conv = conv};
    TH_CHECK(fpo_solve(&m, 4, y, &o, &st, scratch) == IM_OK, "solve");
    TH_CHECK(st.iters == 2 && t.calls == 2, "constant map: %d iterations (want 2)", st.iters);
    float want[24];
    for (int i = 0; i < 24; i++) want[i] = 0.99f * c[i] + 0.01f * (0.99f * c[i]);
    TH_CLOSE(y, want, 24, 1e-6, "constant map result 0.9999 F");
    TH_CHECK(fabsf(best[0] - 0.01f) < 1e-5f && conv[0] == 2 && st.converged, "best %g conv %d", best[0], conv[0]);
    free(scratch);
}

static void test_decay(void) {
    int nb = 2, per = 4;
    float c[8] = {1, 2, 3, 4, -1, -2, -3, -4}, y[8] = {0};
    Toy t = {.kind = 1, .nb = nb, .per = per, .c = c};
    FpMap m = {.ctx = &t, .n = 8, .nb = nb, .f = toy_f};
    FpoOpts o;
    fpo_opts_default(&o);
    o.step0 = 1.0f; /* f(y) = −y + c from 0 with step 1 oscillates between c and 0: res 1, 2(?), ... */
    o.patience = 3;
    o.decay = 0.5f;
    o.cap = 1000;
    o.step_min = 0.1;
    float *scratch = th_alloc(fpo_scratch_floats(8, nb));
    FpoStats st = {0};
    TH_CHECK(fpo_solve(&m, 4, y, &o, &st, scratch) == IM_OK, "solve");
    /* A damped step s on y = −y + c converges to c/2 when s < 1: the decay must rescue it. */
    float want[8];
    for (int i = 0; i < 8; i++) want[i] = c[i] / 2;
    TH_CLOSE(y, want, 8, 0.1, "decay rescues the oscillation (y -> c/2)");
    TH_CHECK(st.converged && st.iters < 1000, "converged after %d", st.iters);
    /* step_min stops a hopeless loop: decay 0.5 every evaluation w/o progress, c alternating */
    o.step0 = 1.0f;
    o.patience = 1;
    o.decay = 0.5f;
    o.thr = 1e-30;
    o.step_min = 0.3; /* 1 → 0.5 → 0.25: stops after the second decay */
    memset(y, 0, sizeof y);
    t.calls = 0;
    TH_CHECK(fpo_solve(&m, 4, y, &o, &st, scratch) == IM_OK, "solve");
    TH_CHECK(st.iters < 40 && !st.converged, "step_min stops the loop (%d iterations)", st.iters);
    free(scratch);
}

static void test_quantile_stop(void) {
    int nb = 5, per = 6;
    float c[30], y[30] = {0};
    for (int i = 0; i < 30; i++) c[i] = 1.0f + (float)i / 30;
    Toy t = {.kind = 2, .nb = nb, .per = per, .stuck = 3, .c = c};
    FpMap m = {.ctx = &t, .n = 30, .nb = nb, .f = toy_f};
    FpoOpts o;
    fpo_opts_default(&o);
    o.step0 = 1.0f;
    o.decay = 1.0f; /* the stuck sample never improves */
    o.cap = 50;
    float *scratch = th_alloc(fpo_scratch_floats(30, nb));
    int conv[5];
    FpoStats st = {.sample_conv = conv};
    o.quantile = 0.75; /* 4 of 5 converged is enough */
    TH_CHECK(fpo_solve(&m, 6, y, &o, &st, scratch) == IM_OK, "solve");
    TH_CHECK(st.iters == 2 && st.converged, "training quantile stops at 2 (got %d)", st.iters);
    TH_CHECK(conv[0] == 2 && conv[3] == 3, "per-sample convergence steps %d %d", conv[0], conv[3]);
    o.quantile = 1.0; /* evaluation: all sequences */
    memset(y, 0, sizeof y);
    TH_CHECK(fpo_solve(&m, 6, y, &o, &st, scratch) == IM_OK, "solve");
    TH_CHECK(st.iters == 50 && !st.converged, "eval criterion runs to the cap (%d)", st.iters);
    free(scratch);
}

static void test_contraction(void) {
    int nb = 4, per = 12, tok = 3;
    float c[48], y[48] = {0};
    Rng r;
    rng_seed(&r, 2, 1);
    th_fill_uniform(c, 48, &r, 0.5f, 1.5f);
    Toy t = {.kind = 3, .nb = nb, .per = per, .c = c};
    FpMap m = {.ctx = &t, .n = 48, .nb = nb, .f = toy_f};
    FpoOpts o;
    fpo_opts_default(&o);
    o.quantile = 1.0;
    o.thr = 1e-4;
    float *scratch = th_alloc(fpo_scratch_floats(48, nb));
    FpoStats st = {0};
    TH_CHECK(fpo_solve(&m, tok, y, &o, &st, scratch) == IM_OK, "solve");
    float fy[48];
    toy_f(&t, fy, y);
    /* per-token relative ∞-norm residual of the result */
    double worst = 0;
    for (int k = 0; k < 48; k += tok) {
        double dm = 0, fm = 0;
        for (int i = k; i < k + tok; i++) {
            dm = fmax(dm, fabs(fy[i] - y[i]));
            fm = fmax(fm, fabs(fy[i]));
        }
        worst = fmax(worst, dm / fm);
    }
    TH_CHECK(st.converged && worst < 2e-4, "contraction converged: residual %g after %d", worst, st.iters);
    free(scratch);
}

static void test_errors(void) {
    float c[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y[8] = {0};
    Toy t = {.kind = 4, .nb = 2, .per = 4, .c = c, .nan_at = 1};
    FpMap m = {.ctx = &t, .n = 8, .nb = 2, .f = toy_f};
    FpoOpts o;
    fpo_opts_default(&o);
    float *scratch = th_alloc(fpo_scratch_floats(8, 2));
    TH_CHECK(fpo_solve(&m, 4, y, &o, NULL, scratch) == IM_ENUM, "NaN in f is an error");
    TH_CHECK(y[0] == 0 && y[1] == 0, "y keeps the input of the failing call");
    o.cap = 0;
    TH_CHECK(fpo_solve(&m, 4, y, &o, NULL, scratch) == IM_EINVAL, "cap 0 rejected");
    fpo_opts_default(&o);
    o.step0 = 1.5f;
    TH_CHECK(fpo_solve(&m, 4, y, &o, NULL, scratch) == IM_EINVAL, "step0 > 1 rejected");
    free(scratch);
}

static void test_quantile_gamma(void) {
    /* torch.quantile(torch.tensor([3., 1., 4., 1.5]), q) = 1.375 (q .25), 2.25 (.5), 3.25 (.75), 4 (1) */
    double qs[4] = {0.25, 0.5, 0.75, 1.0}, want[4] = {1.375, 2.25, 3.25, 4.0};
    for (int i = 0; i < 4; i++) {
        double v[4] = {3, 1, 4, 1.5};
        double got = fpo_quantile(v, 4, qs[i]);
        TH_CHECK(fabs(got - want[i]) < 1e-12, "quantile %g: %g (want %g)", qs[i], got, want[i]);
    }
    double one = 7;
    TH_CHECK(fpo_quantile(&one, 1, 0.75) == 7, "quantile of one value");
    Rng r;
    rng_seed(&r, 3, 9);
    int n = 40000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double g = fpo_gamma(&r, 4, 2);
        s += g;
        s2 += g * g;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    TH_CHECK(fabs(mean - 8) < 0.1 && fabs(var - 16) < 0.8, "Gamma(4, 2): mean %g (8), var %g (16)", mean, var);
}

int main(void) {
    th_name = "fpo";
    test_constant();
    test_decay();
    test_quantile_stop();
    test_contraction();
    test_errors();
    test_quantile_gamma();
    return th_done();
}
