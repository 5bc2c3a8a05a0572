/* dist.c: the distributed layer over MPI, or its one-process stand-in; see dist.h. */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/check.h"

#ifdef IM_MPI
#include <mpi.h>

static int g_inited;   /* 1: this module called MPI_Init and must finalise */
static int g_rank, g_size = 1, g_solo;

/* MPI counts are ints: reductions go through the buffer in chunks of at most this many elements. */
#define CHUNK ((size_t)1 << 24)
/* Below this many elements a whole-buffer allgather is cheaper than the slice exchange. */
#define SMALL 4096

int dist_init(int *argc, char ***argv) {
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag) {
        /* only the main thread calls MPI, never from inside an OpenMP region */
        int provided;
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        g_inited = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return IM_OK;
}

void dist_finalize(void) {
    if (!g_inited) return;
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
    g_inited = 0;
    g_rank = 0;
    g_size = 1;
}

int dist_rank(void) { return g_solo ? 0 : g_rank; }
int dist_size(void) { return g_solo ? 1 : g_size; }
int dist_built(void) { return 1; }
const char *dist_name(void) { return "yes"; }
void dist_set_solo(int on) { g_solo = on; }

static void sum_rows(void *out, const void *rows, size_t len, int nrow, int f64) {
    /* out[k] = ((rows[0][k] + rows[1][k]) + rows[2][k]) + ...: the fixed order of dist.h */
    if (f64) {
        double *o = out;
        const double *r = rows;
        for (size_t k = 0; k < len; k++) o[k] = r[k];
        for (int i = 1; i < nrow; i++)
            for (size_t k = 0; k < len; k++) o[k] += r[(size_t)i * len + k];
    } else {
        float *o = out;
        const float *r = rows;
        for (size_t k = 0; k < len; k++) o[k] = r[k];
        for (int i = 1; i < nrow; i++)
            for (size_t k = 0; k < len; k++) o[k] += r[(size_t)i * len + k];
    }
}

static void reduce(void *buf, size_t n, int f64) {
    int P = dist_size();
    if (P == 1 || n == 0) return;
    size_t es = f64 ? sizeof(double) : sizeof(float);
    MPI_Datatype ty = f64 ? MPI_DOUBLE : MPI_FLOAT;
    if (n <= SMALL) {
        /* every rank gathers every copy and sums them in rank order: one collective */
        char *all = xmalloc(n * es * (size_t)P);
        MPI_Allgather(buf, (int)n, ty, all, (int)n, ty, MPI_COMM_WORLD);
        sum_rows(buf, all, n, P, f64);
        free(all);
        return;
    }
    /* reduce-scatter by hand (rank r sums slice r of every copy), then an allgather of the sums */
    int *cnt = xmalloc(4 * sizeof(int) * (size_t)P);
    int *dsp = cnt + P, *rcnt = cnt + 2 * P, *rdsp = cnt + 3 * P;
    size_t most = n < CHUNK ? n : CHUNK;
    char *recv = xmalloc((most / (size_t)P + 1) * (size_t)P * es);
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t c = n - off < CHUNK ? n - off : CHUNK;
        char *b = (char *)buf + off * es;
        for (int j = 0; j < P; j++) {
            dsp[j] = (int)(c * (size_t)j / (size_t)P);
            cnt[j] = (int)(c * (size_t)(j + 1) / (size_t)P) - dsp[j];
        }
        int mine = cnt[g_rank];
        for (int i = 0; i < P; i++) rcnt[i] = mine, rdsp[i] = i * mine;
        MPI_Alltoallv(b, cnt, dsp, ty, recv, rcnt, rdsp, ty, MPI_COMM_WORLD);
        sum_rows(b + (size_t)dsp[g_rank] * es, recv, (size_t)mine, P, f64);
        MPI_Allgatherv(MPI_IN_PLACE, 0, ty, b, cnt, dsp, ty, MPI_COMM_WORLD);
    }
    free(recv);
    free(cnt);
}

void dist_allreduce_sum(float *buf, size_t n) { reduce(buf, n, 0); }
void dist_allreduce_sum_f64(double *buf, size_t n) { reduce(buf, n, 1); }

void dist_bcast(void *buf, size_t bytes, int root) {
    if (dist_size() == 1) return;
    for (size_t off = 0; off < bytes; off += CHUNK) {
        size_t c = bytes - off < CHUNK ? bytes - off : CHUNK;
        MPI_Bcast((char *)buf + off, (int)c, MPI_BYTE, root, MPI_COMM_WORLD);
    }
}

void dist_barrier(void) {
    if (dist_size() > 1) MPI_Barrier(MPI_COMM_WORLD);
}

int dist_agree(int rc) {
    int P = dist_size();
    if (P == 1) return rc;
    int *all = xmalloc(sizeof(int) * (size_t)P), first = -1;
    MPI_Allgather(&rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < P && first < 0; i++)
        if (all[i]) first = i;
    int out = first < 0 ? IM_OK : all[first];
    free(all);
    if (first < 0) return IM_OK;
    /* the failing rank's message travels to the others, so rank 0's error line names the cause */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err_msg());
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
    msg[sizeof msg - 1] = 0;
    if (first != g_rank) err_set(out, "rank %d: %.1000s", first, msg);
    return out;
}

#else /* one process */

int dist_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return IM_OK;
}
void dist_finalize(void) {}
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
int dist_built(void) { return 0; }
const char *dist_name(void) { return "no"; }
void dist_set_solo(int on) { (void)on; }
void dist_allreduce_sum(float *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_sum_f64(double *buf, size_t n) { (void)buf; (void)n; }
void dist_bcast(void *buf, size_t bytes, int root) { (void)buf; (void)bytes; (void)root; }
void dist_barrier(void) {}
int dist_agree(int rc) { return rc; }

#endif
