/* head.h: tied LM head and cross-entropy loss (spec implicit-lm §1.1).
 *
 *   logits = h E^T              (no bias; E:(V,D) is the embedding matrix itself)
 *   loss   = mean over rows with target != ignore of  logsumexp(logits_i) - logits_i[t_i]
 * Because the head is tied, its weight gradient is added into the embedding gradient dE.
 * Targets come from data, so they are validated with a runtime error status (out-of-range,
 * non-ignored target = IM_EINVAL) before the kernels, which would abort, ever see them.
 * The shift "logits[:, t] predicts ids[:, t+1]" is the caller's (the model builds targets).
 * A batch where every row is ignored has loss 0 and zero gradient (REF's mean would be NaN).
 * Out of scope: the untied 2-layer head for d_embed != d_model (unused), REF's V_pad loss quirk
 * (§12): callers choose V (padded or not) explicitly.
 */
#ifndef IMPLICIT_LAYERS_HEAD_H
#define IMPLICIT_LAYERS_HEAD_H

#include <stddef.h>

#define HEAD_IGNORE (-100)

/* logits = h E^T    h:(M,D)  E:(V,D)  logits:(M,V) written */
void head_logits(float *logits, const float *h, const float *E, int M, int V, int D);
/* IM_OK if every target is ignore or in [0, V); else IM_EINVAL naming the first bad position. */
int head_check_targets(const int *targets, size_t n, int V, int ignore);

/* cache = the logits (M,V); scratch = per-row losses and dlogits. */
size_t head_cache_floats(int M, int V);
size_t head_scratch_floats(int M, int V);

/* Validates targets, computes logits into cache:(M,V) and *loss = mean loss over the *count
 * non-ignored rows (0 when count is 0). Returns IM_OK or IM_EINVAL (then nothing else is set).
 * h:(M,D)  E:(V,D)  targets:(M)  count may be NULL. */
int head_loss_fwd(float *loss, int *count, float *cache, float *scratch, const float *h,
                  const float *E, const int *targets, int M, int V, int D, int ignore);
/* Backward of dloss * loss (dloss usually 1):  dh += dlogits E;  dE += dlogits^T h,
 * dlogits_i = dloss/count * (softmax(logits_i) - onehot(t_i)), ignored rows 0.
 * dh, dE may be NULL; targets as validated by head_loss_fwd; cache from head_loss_fwd. */
void head_loss_bwd(float *dh, float *dE, float dloss, const float *cache, float *scratch,
                   const float *h, const float *E, const int *targets, int M, int V, int D,
                   int ignore);

#endif
