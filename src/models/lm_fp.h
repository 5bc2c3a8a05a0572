/* lm_fp.h: the solver policy shared by the fixed-point mixer kinds of the residual LM (fp_mamba in
 * lm_fp.c, fp_mamba2 / fp_rnn in lm_fp2.c; spec fp-rnn §1.4, §1.6). Internal to src/models/.
 *
 *   training   quantile 1 − fp_outlier_q of the batch, cap ℓ_max = fp_max_iter, or, when
 *              fp_max_iter < 0, ceil(Gamma(4, fp_gamma_k/16 + 1)) ("code") or ceil(Gamma(4, 1))
 *              ("paper") drawn once per optimizer step for all layers (a pure function of the
 *              step, so a resumed run draws the same values)
 *   evaluation quantile 1 (every sequence), cap fp_eval_cap; sequential steps use the same rule
 *              per token.
 * The options are read from the live config at every call, so evaluation-time overrides
 * (`implicit eval --fp_eval_cap N --max_iters ...`) apply without rebuilding the model.
 */
#ifndef IMPLICIT_LM_FP_H
#define IMPLICIT_LM_FP_H

#include "../fixedpoint/fpo.h"
#include "lm_resid.h"

/* The epsilon inside a fixed-point layer (its in-loop norm and the mixer's normalisations):
 * mixer_norm_eps when set, else norm_eps. The reference sets the two apart (its word-problem and
 * arithmetic runs pass norm_eps 1e-6 to the layer while the block norms keep 1e-5). */
static inline float lm_fp_layer_eps(const ModelCfg *c) {
    return (float)(c->mixer_norm_eps > 0 ? c->mixer_norm_eps : c->norm_eps);
}

/* Options of a forward (m->training picks the rule) or, with step = 1, of a sequential step. */
FpoOpts lm_fp_solver_opts(const Model *m, int step);

/* Record one layer's solve: m->fp_iters = mean over layers of the f evaluations (per token in
 * sequential mode), m->fp_iters_median = their median over layers, m->fp_iters_ref = the mean of
 * the reference's logged counts (iter_idx + 1 per solve, so fp_iters + 1),
 * m->fp_res = mean and m->fp_res_max = worst of the layers' worst best-residuals, m->fp_step_max
 * = the cap, m->fp_phase = phase. iters: this layer's evaluations (per token in step mode). */
void lm_fp_note_stats(const LmMixCtx *x, double iters, double best_max, int cap, const char *phase);

#endif
