/* head.c: tied LM head and mean cross-entropy with an ignore index; see head.h. */
#include "head.h"

#include <string.h>

#include "../core/check.h"
#include "../kernels/kernels.h"

void head_logits(float *logits, const float *h, const float *E, int M, int V, int D) {
    CHECK(logits && h && E, "head_logits: NULL buffer");
    CHECK(M >= 0 && V > 0 && D > 0, "head_logits: bad dims M=%d V=%d D=%d", M, V, D);
    k_linear_fwd(logits, h, E, NULL, M, D, V);
}

int head_check_targets(const int *targets, size_t n, int V, int ignore) {
    CHECK(targets || n == 0, "head_check_targets: NULL targets");
    for (size_t i = 0; i < n; i++) {
        int t = targets[i];
        if (t != ignore && (t < 0 || t >= V))
            return err_set(IM_EINVAL,
                           "target %d at position %zu is out of range [0, %d) and is not the "
                           "ignore index %d", t, i, V, ignore);
    }
    return IM_OK;
}

size_t head_cache_floats(int M, int V) { return (size_t)M * (size_t)V; }

size_t head_scratch_floats(int M, int V) { return (size_t)M * (size_t)V + (size_t)M; }

static int count_kept(const int *targets, int M, int ignore) {
    int n = 0;
    for (int i = 0; i < M; i++) n += targets[i] != ignore;
    return n;
}

int head_loss_fwd(float *loss, int *count, float *cache, float *scratch, const float *h,
                  const float *E, const int *targets, int M, int V, int D, int ignore) {
    CHECK(loss && cache && scratch, "head_loss_fwd: NULL buffer");
    int rc = head_check_targets(targets, (size_t)M, V, ignore);
    if (rc) return rc;
    head_logits(cache, h, E, M, V, D);
    /* the logits stay in the cache: the backward needs softmax(logits) and recomputing them
     * would cost another (M,V,D) GEMM */
    float *row_loss = scratch; /* (M) */
    k_xent_fwd(row_loss, cache, targets, M, V, ignore);
    /* mean in double, fixed order: ignored rows hold 0 and are not counted */
    int n = count_kept(targets, M, ignore);
    double sum = 0;
    for (int i = 0; i < M; i++) sum += row_loss[i];
    *loss = n ? (float)(sum / n) : 0.0f;
    if (count) *count = n;
    return IM_OK;
}

void head_loss_bwd(float *dh, float *dE, float dloss, const float *cache, float *scratch,
                   const float *h, const float *E, const int *targets, int M, int V, int D,
                   int ignore) {
    if (!dh && !dE) return;
    CHECK(cache && scratch && h && E && targets, "head_loss_bwd: NULL buffer");
    int n = count_kept(targets, M, ignore);
    if (n == 0) return; /* loss is the constant 0: no gradient */
    /* d(mean)/d(row loss) = dloss / count for every kept row; the kernel skips ignored rows */
    float *drow = scratch, *dlogits = scratch + M; /* (M), (M,V) */
    for (int i = 0; i < M; i++) drow[i] = dloss / (float)n;
    k_zero(dlogits, (size_t)M * (size_t)V);
    k_xent_bwd(dlogits, cache, targets, drow, M, V, ignore);
    /* logits = h E^T is a bias-free linear with weight E: dh += dlogits E, dE += dlogits^T h */
    k_linear_bwd(dh, dE, NULL, dlogits, h, E, M, D, V);
}
