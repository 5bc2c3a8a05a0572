/* gradcheck.h: the gradient-check harness shared by the layer tests: register tensors with
 * their gradients in a GradCase, then compare the backward against central finite differences
 * per entry and along random directions (see the functions below). Include after th.h. */
#ifndef IMPLICIT_GRADCHECK_H
#define IMPLICIT_GRADCHECK_H

#include "../src/core/check.h"

typedef struct {
    const char *name;
    float *p; /* (n) the tensor, perturbed in place */
    float *g; /* (n) its gradient as accumulated by bwd */
    size_t n;
    int fd; /* entries sampled for the FD check (0 = none) */
} Tensor;

typedef struct {
    const char *name;
    double (*loss)(void *ctx); /* L = <w, f> from a no-grad forward */
    void (*bwd)(void *ctx);    /* caching forward + backward; accumulates into every t[i].g */
    void *ctx;
    Tensor t[16];
    int nt;
    float h;     /* FD step */
    double tol;  /* relative tolerance of the per-entry FD check */
} GradCase;

static double worst_fd, worst_dir; /* reported at the end */
/* The directional test with a 4-point stencil is sharp (measured <= 2e-4 on every case), so it
 * has one tight tolerance; FD per entry is normalised by the tensor's largest gradient and
 * suffers more from rounding in tensors with small gradients (A_log, dt_bias): per-case tol. */
#define DIR_TOL 1e-3

static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* 4-point central stencil (error O(h^4)): (8 (L(h) - L(-h)) - (L(2h) - L(-2h))) / 12h */
static double fd_at(GradCase *gc, float *p, float h) {
    float keep = *p;
    double l[4];
    const float k[4] = {1, -1, 2, -2};
    for (int i = 0; i < 4; i++) {
        *p = keep + k[i] * h;
        l[i] = gc->loss(gc->ctx);
    }
    *p = keep;
    return (8.0 * (l[0] - l[1]) - (l[2] - l[3])) / (12.0 * h);
}

static void zero_grads(GradCase *gc) {
    for (int i = 0; i < gc->nt; i++) memset(gc->t[i].g, 0, gc->t[i].n * sizeof(float));
}

/* FD on sampled entries: max |fd - g| / max(max |g| over the tensor, 1e-4). */
static void check_fd_tensor(GradCase *gc, Tensor *t, Rng *r) {
    double gmax = 1e-4, err = 0;
    for (size_t i = 0; i < t->n; i++) gmax = fmax(gmax, fabs(t->g[i]));
    int k = t->n < (size_t)t->fd ? (int)t->n : t->fd;
    for (int s = 0; s < k; s++) {
        size_t i = t->n <= (size_t)t->fd ? (size_t)s : rng_below(r, (uint32_t)t->n);
        double num = fd_at(gc, &t->p[i], gc->h);
        double e = fabs(num - t->g[i]) / gmax;
        if (!(e <= err)) err = e;
    }
    if (err > worst_fd) worst_fd = err;
    if (getenv("TH_VERBOSE")) printf("  %s d%s fd %.3g\n", gc->name, t->name, err);
    TH_CHECK(err <= gc->tol, "%s: FD d%s rel err %.3g > %.3g", gc->name, t->name, err, gc->tol);
}

/* Directional derivative along random v over all tensors vs <v, g>. */
static void check_direction(GradCase *gc, Rng *r) {
    float *v[16];
    double ana = 0, vv = 0, gg = 0;
    for (int i = 0; i < gc->nt; i++) {
        v[i] = th_alloc(gc->t[i].n);
        th_fill_uniform(v[i], gc->t[i].n, r, -1.f, 1.f);
        ana += dotd(v[i], gc->t[i].g, gc->t[i].n);
        vv += dotd(v[i], v[i], gc->t[i].n);
        gg += dotd(gc->t[i].g, gc->t[i].g, gc->t[i].n);
    }
    /* the same 4-point stencil along v */
    double l[4];
    const float k[4] = {1, -1, 2, -2};
    for (int s = 0; s < 4; s++) {
        float step = k[s] * gc->h;
        float *save[16];
        for (int i = 0; i < gc->nt; i++) {
            save[i] = th_alloc(gc->t[i].n);
            memcpy(save[i], gc->t[i].p, gc->t[i].n * sizeof(float));
            for (size_t j = 0; j < gc->t[i].n; j++) gc->t[i].p[j] += step * v[i][j];
        }
        l[s] = gc->loss(gc->ctx);
        for (int i = 0; i < gc->nt; i++) {
            memcpy(gc->t[i].p, save[i], gc->t[i].n * sizeof(float));
            free(save[i]);
        }
    }
    double num = (8.0 * (l[0] - l[1]) - (l[2] - l[3])) / (12.0 * gc->h);
    /* relative to |<v, g>|, bounded below by a fraction of ||v|| ||g|| (cancellation guard) */
    double err = fabs(num - ana) / fmax(fabs(ana), 0.01 * sqrt(vv * gg) + 1e-6);
    if (err > worst_dir) worst_dir = err;
    if (getenv("TH_VERBOSE")) printf("  %s dir %.3g\n", gc->name, err);
    TH_CHECK(err <= DIR_TOL, "%s: directional <v,J^T w> %.6g vs FD %.6g (rel %.3g)", gc->name, ana,
             num, err);
    for (int i = 0; i < gc->nt; i++) free(v[i]);
}

static void run_grad_case(GradCase *gc, Rng *r) {
    zero_grads(gc);
    gc->bwd(gc->ctx);
    for (int i = 0; i < gc->nt; i++)
        if (gc->t[i].fd) check_fd_tensor(gc, &gc->t[i], r);
    check_direction(gc, r);
    /* accumulation: a second backward without zeroing gives exactly twice the gradient
     * (x + x == 2x in float, so this is an equality test up to the kernel's own determinism) */
    float *g1[16];
    for (int i = 0; i < gc->nt; i++) {
        g1[i] = th_alloc(gc->t[i].n);
        for (size_t j = 0; j < gc->t[i].n; j++) g1[i][j] = 2.0f * gc->t[i].g[j];
    }
    gc->bwd(gc->ctx);
    for (int i = 0; i < gc->nt; i++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s: d%s accumulates", gc->name, gc->t[i].name);
        TH_CLOSE(gc->t[i].g, g1[i], gc->t[i].n, 1e-6, nm);
        free(g1[i]);
    }
}

static void add_tensor(GradCase *gc, const char *name, float *p, float *g, size_t n, int fd) {
    CHECK(gc->nt < 16, "too many tensors");
    gc->t[gc->nt++] = (Tensor){name, p, g, n, fd};
}

#ifdef IMPLICIT_MODEL_H
/* A whole model's mean loss on one batch (include models/model.h first): ctx of a GradCase with
 * .loss = grad_model_loss, .bwd = grad_model_bwd. */
typedef struct {
    Model *m;
    int *ids, *tg, B, T;
} GradModelCtx;

static inline double grad_model_loss(void *p) {
    GradModelCtx *c = p;
    float l = 0;
    model_fwd(c->m, c->ids, c->tg, c->B, c->T, &l);
    return l;
}

static inline void grad_model_bwd(void *p) {
    GradModelCtx *c = p;
    float l;
    model_fwd(c->m, c->ids, c->tg, c->B, c->T, &l);
    model_bwd(c->m);
}
#endif

#endif
