/* test_mpi.c: data-parallel training over MPI (src/train/dist.h), run by tests/run.sh as
 * `mpirun -np 2` when the build has MPI=1.
 *
 * The collectives are checked for exact, rank-ordered sums that are bit-identical on every rank.
 * The main check is equivalence: a P-process run of a small Mamba2 on the ios task and a
 * one-process run of the same global batch (rank 0 runs it alone in the same job) give the same
 * per-step losses and final weights up to float summation order, with and without gradient
 * accumulation; a resumed P-process run (with dropout) continues bit for bit; a batch that the
 * ranks cannot split evenly and a failure on rank 0 alone are reported on every rank.
 * Without MPI=1 (or without mpirun) it prints a `skipped` line and passes with 0 checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/check.h"
#include "../src/io/keyjson.h"
#include "../src/train/dist.h"
#include "../src/train/trainer.h"
#include "th.h"

static char root[64];

/* ---- collectives ------------------------------------------------------------------------------ */
static float val(int rank, size_t i) { return (float)((i * 7 + 3) % 101) * 0.37f + (float)rank * 1.1f + 1e-3f * (float)i; }

static void collectives(void) {
    int P = dist_size(), R = dist_rank();
    size_t sizes[] = {1, 5, 4096, 10007};   /* the small (allgather) path and the slice path */
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        float *x = th_alloc(n), *want = th_alloc(n), *x0 = th_alloc(n);
        double *d = calloc(n, sizeof(double)), *dw = calloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            x[i] = val(R, i);
            d[i] = (double)val(R, i) * 1e-3;
            want[i] = val(0, i);
            dw[i] = (double)val(0, i) * 1e-3;
            for (int r = 1; r < P; r++) want[i] += val(r, i), dw[i] += (double)val(r, i) * 1e-3;  /* rank order */
        }
        dist_allreduce_sum(x, n);
        dist_allreduce_sum_f64(d, n);
        TH_CHECK(!memcmp(x, want, n * sizeof(float)), "allreduce float n=%zu: not the rank-ordered sum", n);
        TH_CHECK(!memcmp(d, dw, n * sizeof(double)), "allreduce double n=%zu: not the rank-ordered sum", n);
        memcpy(x0, x, n * sizeof(float));
        dist_bcast(x0, n * sizeof(float), 0);
        TH_CHECK(!memcmp(x0, x, n * sizeof(float)), "allreduce n=%zu: rank %d differs from rank 0", n, R);
        free(x); free(want); free(x0); free(d); free(dw);
    }
    int v = R == P - 1 ? 42 : -1;
    dist_bcast(&v, sizeof v, P - 1);
    TH_CHECK(v == 42, "bcast from the last rank: %d", v);
    /* one rank fails alone: every rank gets its status and message */
    int rc = R == P - 1 ? err_set(IM_EIO, "disk full on the last rank") : IM_OK;
    rc = dist_agree(rc);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "disk full on the last rank"), "agree: rc %d, '%s'", rc, err_msg());
    TH_CHECK(dist_agree(IM_OK) == IM_OK, "agree: no failure");
    dist_barrier();
}

/* ---- training --------------------------------------------------------------------------------- */
static void configs(ModelCfg *m, TaskCfg *t, TrainCfg *r, const char *out, int batch, int accum, int steps) {
    cfg_defaults(m);
    task_cfg_defaults(t);
    train_cfg_defaults(r);
    cfg_set(m, "model", "mamba2");
    cfg_set(m, "d_model", "32");
    cfg_set(m, "n_layer", "2");
    cfg_set(m, "d_state", "8");
    cfg_set(m, "headdim", "8");
    keytab_set(&task_keytab, t, "task", "ios");
    keytab_set(&task_keytab, t, "group", "S3");
    keytab_set(&task_keytab, t, "train_len", "12");   /* rows of 2..12 tokens + padding: uneven target counts */
    keytab_set(&task_keytab, t, "eval_lens", "8");
    keytab_set(&task_keytab, t, "eval_samples", "8");
    Task *tk;
    task_create(&tk, t);
    m->vocab_size = task_vocab(tk);
    task_free(tk);
    snprintf(r->out, sizeof r->out, "%s/%s", root, out);
    r->steps = steps;
    r->batch = batch;
    r->grad_accum = accum;
    r->warmup = 2;
    r->lr = 3e-3;
    r->threads = 1;
    r->log_every = 1;
    r->eval_every = 0;
    r->ckpt_every = 0;
    snprintf(r->progress, sizeof r->progress, "none");
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

/* P processes vs one, same global batch: losses within 1e-5 relative, weights within 1e-5. */
static void equivalence(int batch, int accum) {
    enum { N = 5 };
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer d, one;
    char name[64];
    snprintf(name, sizeof name, "dist_b%d_a%d", batch, accum);
    configs(&m, &t, &r, name, batch, accum, N);
    int ok = trainer_init(&d, &m, &t, &r) == 0;
    TH_CHECK(ok, "init (batch %d, accum %d): %s", batch, accum, err_msg());
    if (!ok) return;
    TH_CHECK(trainer_run(&d, 0) == 0, "distributed run: %s", err_msg());
    size_t n = d.model.tab.total;
    /* replicas hold identical weights (trainer_run checks too; this checks the check) */
    float *w0 = th_alloc(n);
    memcpy(w0, d.model.params, n * sizeof(float));
    dist_bcast(w0, n * sizeof(float), 0);
    TH_CHECK(!memcmp(w0, d.model.params, n * sizeof(float)), "rank %d's weights differ from rank 0's", dist_rank());
    free(w0);
    if (dist_rank() == 0) {
        dist_set_solo(1);
        snprintf(name, sizeof name, "one_b%d_a%d", batch, accum);
        configs(&m, &t, &r, name, batch, accum, N);
        TH_CHECK(trainer_init(&one, &m, &t, &r) == 0, "single-process init: %s", err_msg());
        TH_CHECK(trainer_run(&one, 0) == 0, "single-process run: %s", err_msg());
        dist_set_solo(0);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double e = fabs(d.losses[i] - one.losses[i]) / fabs(one.losses[i]);
            if (!(e <= worst)) worst = e;
        }
        TH_CHECK(worst <= 1e-5, "batch %d accum %d: losses differ by %.3g relative (step 1: %.8f vs %.8f)", batch, accum,
                 worst, d.losses[0], one.losses[0]);
        double dw = max_abs_diff(d.model.params, one.model.params, n);
        TH_CHECK(dw <= 1e-5, "batch %d accum %d: final weights differ by %.3g", batch, accum, dw);
        TH_CHECK(one.losses[N - 1] < one.losses[0], "the loss did not go down (%g -> %g)", one.losses[0], one.losses[N - 1]);
        printf("  %d processes vs 1, batch %d, grad_accum %d: loss rel diff %.2g, weight max diff %.2g\n", dist_size(),
               batch, accum, worst, dw);
        trainer_free(&one);
    }
    dist_barrier();   /* the other ranks wait for rank 0's reference run */
    trainer_free(&d);
}

/* Interrupted at step 3 (checkpoint), resumed by every rank: the same losses and weights as the
 * uninterrupted run, bit for bit, with dropout drawing from the per-rank streams. */
static void resume(void) {
    enum { N = 5, H = 3 };
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer a, b;
    int P = dist_size();
    configs(&m, &t, &r, "full", 2 * P, 1, N);
    cfg_set(&m, "dropout", "0.1");
    TH_CHECK(trainer_init(&a, &m, &t, &r) == 0 && trainer_run(&a, 0) == 0, "full run: %s", err_msg());
    configs(&m, &t, &r, "half", 2 * P, 1, N);
    cfg_set(&m, "dropout", "0.1");
    r.ckpt_every = H;
    TH_CHECK(trainer_init(&b, &m, &t, &r) == 0, "init: %s", err_msg());
    TH_CHECK(trainer_run(&b, H) == 0 && b.step == H, "half run: %s", err_msg());
    trainer_free(&b);
    TH_CHECK(trainer_resume(&b, r.out, NULL, NULL) == 0 && b.step == H, "resume: %s", err_msg());
    TH_CHECK(trainer_run(&b, 0) == 0, "resumed run: %s", err_msg());
    int same = 1;
    for (int i = H; i < N; i++) same &= b.losses[i] == a.losses[i];
    TH_CHECK(same, "resumed losses differ from the uninterrupted run");
    TH_CHECK(!memcmp(a.model.params, b.model.params, a.model.tab.total * sizeof(float)), "weights differ after resume");
    trainer_free(&a);
    trainer_free(&b);
}

static void rejections(void) {
    ModelCfg m;
    TaskCfg t;
    TrainCfg r;
    Trainer x;
    int P = dist_size();
    configs(&m, &t, &r, "odd", 2 * P + 1, 1, 2);
    int rc = trainer_init(&x, &m, &t, &r);
    TH_CHECK(rc == IM_EINVAL && strstr(err_msg(), "not divisible by the"), "batch %d on %d ranks: rc %d, '%s'",
             2 * P + 1, P, rc, err_msg());
    /* rank 0 alone writes the output folder; its failure must not leave the other ranks waiting */
    configs(&m, &t, &r, "x", 2 * P, 1, 2);
    snprintf(r.out, sizeof r.out, "/proc/implicit-no-such-dir/run");
    rc = trainer_init(&x, &m, &t, &r);
    TH_CHECK(rc != IM_OK, "an unwritable output folder was accepted");
    if (dist_rank() > 0) TH_CHECK(strstr(err_msg(), "rank 0:") != NULL, "rank %d: '%s'", dist_rank(), err_msg());
    /* a folder in use: rank 0 alone holds the lock, and its refusal of a second run stops every rank */
    Trainer owner;
    configs(&m, &t, &r, "owned", 2 * P, 1, 2);
    TH_CHECK(trainer_init(&owner, &m, &t, &r) == 0, "init: %s", err_msg());
    rc = trainer_init(&x, &m, &t, &r);
    TH_CHECK(rc == IM_EIO && strstr(err_msg(), "in use"), "rank %d: a second run into a folder in use: rc %d, '%s'",
             dist_rank(), rc, err_msg());
    trainer_free(&owner);
}

int main(int argc, char **argv) {
    th_name = "test_mpi";
    if (!dist_built()) {
        printf("skipped: not built with MPI=1 (`make test MPI=1` runs this test under mpirun -np 2)\n");
        return th_done();
    }
    dist_init(&argc, &argv);
    int P = dist_size(), R = dist_rank();
    if (P == 1) {
        printf("skipped: a single process; run it as `mpirun -np 2 %s` (tests/run.sh does)\n", argv[0]);
        dist_finalize();
        return th_done();
    }
    int pid = (int)getpid();
    dist_bcast(&pid, sizeof pid, 0);   /* one output root for the whole job */
    snprintf(root, sizeof root, "/tmp/implicit-test-mpi-%d", pid);
    if (R == 0) printf("  %d processes\n", P);
    collectives();
    equivalence(4 * P, 1);   /* 2 ranks: batch 8 */
    equivalence(2 * P, 2);
    resume();
    rejections();
    char cmd[128];
    dist_barrier();
    if (R == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        TH_CHECK(system(cmd) == 0, "cleanup");
    }
    /* one summary line for the job: rank 0 prints the checks of all ranks */
    double c[2] = {th_passed, th_failed};
    dist_allreduce_sum_f64(c, 2);
    dist_finalize();
    if (R != 0) return th_failed ? 1 : 0;
    th_passed = (int)c[0];
    th_failed = (int)c[1];
    return th_done();
}
