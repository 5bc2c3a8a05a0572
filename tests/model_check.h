/* model_check.h: checks on whole models shared by the model tests. Include after th.h. */
#ifndef IMPLICIT_MODEL_CHECK_H
#define IMPLICIT_MODEL_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/check.h"
#include "../src/models/model.h"

/* Runs the parallel forward on ids (B x T), then feeds the same ids column by column through
 * model_step from a fresh state, and returns the largest relative error of a step's logits row
 * against the forward's row for that token (per row, so every sequence counts on its own). A
 * failed call is a check failure named after `label`. */
static inline double th_step_vs_parallel(Model *m, const int *ids, int B, int T, const char *label) {
    TH_CHECK(model_fwd(m, ids, NULL, B, T, NULL) == 0, "%s fwd: %s", label, err_msg());
    size_t V = (size_t)m->V;
    float *full = th_alloc((size_t)B * T * V), *lg = th_alloc((size_t)B * V);
    int *col = malloc(sizeof(int) * (size_t)B);
    memcpy(full, m->logits, sizeof(float) * (size_t)B * T * V);
    TH_CHECK(model_state_init(m, B) == 0, "%s state: %s", label, err_msg());
    double worst = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) col[b] = ids[(size_t)b * T + t];
        TH_CHECK(model_step(m, col, lg) == 0, "%s step: %s", label, err_msg());
        for (int b = 0; b < B; b++) worst = fmax(worst, th_rel_err(lg + b * V, full + ((size_t)b * T + t) * V, V));
    }
    free(full); free(lg); free(col);
    return worst;
}

#endif
