/* embed.c: embedding gather / scatter-add and id validation; see embed.h. */
#include "embed.h"

#include "../core/check.h"
#include "../kernels/kernels.h"

int embed_check_ids(const int *ids, size_t n, int V) {
    CHECK(ids || n == 0, "embed_check_ids: NULL ids");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return err_set(IM_EINVAL, "token id %d at position %zu is out of range [0, %d)", ids[i],
                           i, V);
    return IM_OK;
}

void embed_fwd(float *y, const int *ids, const float *E, int M, int V, int D) {
    CHECK(y && E && (ids || M == 0), "embed_fwd: NULL buffer");
    k_embed_fwd(y, ids, E, M, V, D);
}

void embed_bwd(float *dE, const float *dy, const int *ids, int M, int V, int D) {
    if (!dE) return;
    CHECK(dy && (ids || M == 0), "embed_bwd: NULL buffer");
    k_embed_bwd(dE, dy, ids, M, V, D);
}
