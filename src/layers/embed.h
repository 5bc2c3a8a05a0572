/* embed.h: token embedding lookup (spec implicit-lm §1.1: Embedding(V_pad, D)).
 *
 * Forward is a gather of rows of E, backward a deterministic scatter-add into dE. Token ids come
 * from users and files, so embed_check_ids turns a bad id into a runtime error status (the kernels
 * CHECK and abort). Out of scope: embedding dropout (the caller multiplies its own mask) and the
 * tied head (head.h).
 */
#ifndef IMPLICIT_LAYERS_EMBED_H
#define IMPLICIT_LAYERS_EMBED_H

#include <stddef.h>

/* IM_OK if every 0 <= ids[i] < V; otherwise IM_EINVAL with err_msg naming the first bad position
 * and its value.   ids:(n) */
int embed_check_ids(const int *ids, size_t n, int V);
/* y[i] = E[ids[i]]      ids:(M)  E:(V,D)  y:(M,D) written (ids must be valid) */
void embed_fwd(float *y, const int *ids, const float *E, int M, int V, int D);
/* dE[ids[i]] += dy[i]   dy:(M,D)  dE:(V,D) (NULL: nothing to do) */
void embed_bwd(float *dE, const float *dy, const int *ids, int M, int V, int D);

#endif
