/* sched.c: see sched.h. */
#include "sched.h"

#include <math.h>
#include <string.h>

int sched_parse(const char *name) {
    if (!strcmp(name, "cosine")) return SCHED_COSINE;
    if (!strcmp(name, "linear")) return SCHED_LINEAR;
    if (!strcmp(name, "constant")) return SCHED_CONSTANT;
    return -1;
}

float sched_lr(int kind, int step, int total, int warmup, float lr, float min_lr) {
    /* warm-up reaches lr at step = warmup - 1, so step 0 already trains (lr/warmup) */
    if (warmup > 0 && step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (kind == SCHED_CONSTANT || total <= warmup) return lr;
    float frac = (float)(step - warmup) / (float)(total - warmup);
    if (frac > 1) frac = 1;
    if (kind == SCHED_LINEAR) return min_lr + (lr - min_lr) * (1 - frac);
    return min_lr + (lr - min_lr) * 0.5f * (1 + cosf(3.14159265358979f * frac));
}
