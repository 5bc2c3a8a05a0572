/* optim.h: AdamW over a model's parameter table, with global grad-norm clipping.
 *
 * Moments m and v share the parameter block's layout, so the update is one k_adamw call per
 * tensor; the table's `decay` flag selects weight decay (no decay for norms, biases, A_log,
 * dt_bias, D and the embedding: the reference's no-decay set). Clipping follows
 * torch.nn.utils.clip_grad_norm_: coef = max_norm / (‖g‖ + 1e-6), applied when < 1.
 */
#ifndef IMPLICIT_OPTIM_H
#define IMPLICIT_OPTIM_H

#include "../models/model.h"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float clip;          /* max global grad norm; <= 0 disables clipping */
} AdamWCfg;

typedef struct {
    AdamWCfg cfg;
    float *m, *v;        /* (tab.total) each */
    size_t n;
    int t;               /* updates done */
} AdamW;

void adamw_cfg_default(AdamWCfg *c);                  /* lr 1e-3, (0.9, 0.95), 1e-8, wd 0.1, clip 1 */
int adamw_init(AdamW *o, const Model *m, const AdamWCfg *c);
void adamw_free(AdamW *o);
/* Global L2 norm of the gradient block (fixed-order reduction). */
double optim_grad_norm(const Model *m);
/* One update with learning rate lr (schedules pass theirs). Returns the pre-clip grad norm, or
 * a negative value (and leaves θ untouched) when the gradient is not finite. */
double adamw_step(AdamW *o, Model *m, float lr);

#endif
