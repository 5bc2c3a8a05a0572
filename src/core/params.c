/* params.c: see params.h. */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

void ptab_init(ParamTable *t) { memset(t, 0, sizeof *t); }

void ptab_free(ParamTable *t) { free(t->p); memset(t, 0, sizeof *t); }

size_t ptab_add(ParamTable *t, const char *name, InitRule init, float a, float b, int decay, int ndim, ...) {
    CHECK(ndim >= 0 && ndim <= PARAM_MAX_DIM, "bad ndim %d for %s", ndim, name);
    CHECK(strlen(name) < PARAM_NAME_LEN, "parameter name too long: %s", name);
    CHECK(!ptab_find(t, name), "duplicate parameter %s", name);
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 32;
        t->p = realloc(t->p, (size_t)t->cap * sizeof *t->p);
        CHECK(t->p, "out of memory");
    }
    ParamInfo *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = va_arg(ap, int);
        CHECK(p->shape[i] >= 0, "negative dim for %s", name);
        p->numel *= (size_t)p->shape[i];
    }
    va_end(ap);
    p->init = init;
    p->a = a;
    p->b = b;
    p->decay = decay;
    /* 16 floats = 64 bytes: every tensor starts cache-line aligned in θ, dθ, m and v */
    p->offset = t->total;
    t->total += (p->numel + 15) & ~(size_t)15;
    return p->offset;
}

const ParamInfo *ptab_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->p[i].name, name)) return &t->p[i];
    return NULL;
}

size_t ptab_count(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->p[i].numel;
    return n;
}

static float softplus_inv(float y) { return y + logf(-expm1f(-y)); }

void ptab_init_values(const ParamTable *t, float *block, uint64_t seed) {
    memset(block, 0, t->total * sizeof(float));
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        float *x = block + p->offset;
        Rng r;
        rng_seed(&r, seed, 1000 + (uint64_t)i);
        for (size_t j = 0; j < p->numel; j++) {
            switch (p->init) {
            case INIT_ZERO: x[j] = 0; break;
            case INIT_ONE: x[j] = 1; break;
            case INIT_NORMAL: x[j] = p->a * rng_normal(&r); break;
            case INIT_UNIFORM: x[j] = rng_uniform_range(&r, -p->a, p->a); break;
            case INIT_A_LOG: x[j] = logf(rng_uniform_range(&r, p->a, p->b)); break;
            case INIT_DT_BIAS: {
                /* dt = exp(U(0,1)(ln dt_max - ln dt_min) + ln dt_min), floored (spec §1.4) */
                float dt = expf(rng_uniform(&r) * (logf(p->b) - logf(p->a)) + logf(p->a));
                if (dt < 1e-4f) dt = 1e-4f;
                x[j] = softplus_inv(dt);
                break;
            }
            }
        }
    }
}
