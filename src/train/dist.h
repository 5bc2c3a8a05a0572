/* dist.h: the few collective operations data-parallel training needs, over MPI.
 *
 * Built with `make MPI=1` (compiler mpicc, -DIM_MPI) this wraps MPI_COMM_WORLD; otherwise every
 * function is the one-process case (rank 0 of 1, collectives are copies or no-ops), so callers
 * never need an #ifdef. Nothing here is needed before dist_init: an uninitialised layer is one
 * process too, which is what the tests and programs that never call dist_init get.
 *
 * Reductions are deterministic and bit-identical on every rank: each rank sums its slice of the
 * buffer over the ranks in rank order 0, 1, .., size-1 and the slices are then gathered, instead
 * of MPI_Allreduce, whose summation order depends on the library's algorithm choice. Identical
 * bits on every rank are what keep the replicas' weights equal step after step.
 *
 * Errors in MPI itself abort the job (MPI's default handler): a lost peer is not recoverable.
 * Out of scope: several communicators, overlapping communication with the backward pass.
 */
#ifndef IMPLICIT_DIST_H
#define IMPLICIT_DIST_H

#include <stddef.h>

/* MPI_Init once per process (argc/argv may be NULL). Returns IM_OK; a no-op without IM_MPI. */
int dist_init(int *argc, char ***argv);
/* MPI_Finalize if dist_init initialised MPI. */
void dist_finalize(void);
int dist_rank(void);             /* 0 .. dist_size()-1 */
int dist_size(void);             /* processes in the job (1 without MPI or before dist_init) */
int dist_built(void);            /* 1 when built with MPI=1 */
const char *dist_name(void);     /* "yes" (MPI=1) or "no", for --version lines */

/* buf:(n) summed over all ranks in place, in rank order (see the top). Collective. */
void dist_allreduce_sum(float *buf, size_t n);
void dist_allreduce_sum_f64(double *buf, size_t n);
/* buf:(bytes) copied from rank `root` to every rank. Collective. */
void dist_bcast(void *buf, size_t bytes, int root);
void dist_barrier(void);
/* Collective error agreement: every rank passes its own status and gets back the status of the
 * lowest failing rank (IM_OK when none failed), with that rank's err_msg() set on every rank
 * ("rank R: ..." on the others). Call it wherever one rank may fail alone (file writes on rank
 * 0), so that no rank is left waiting in a collective its peers have abandoned. */
int dist_agree(int rc);

/* Tests: while on, this process acts alone (rank 0 of 1) and issues no collectives, e.g. to run a
 * single-process reference inside an MPI job while the other ranks wait at a barrier. */
void dist_set_solo(int on);

#endif
