/* sched.h: learning-rate schedules: linear warm-up, then cosine, linear or constant decay to
 * min_lr (spec implicit-lm §8.4 uses linear warm-up over 10% then linear decay to 0; §9.1 cosine). */
#ifndef IMPLICIT_SCHED_H
#define IMPLICIT_SCHED_H

typedef enum { SCHED_COSINE, SCHED_LINEAR, SCHED_CONSTANT } SchedKind;

/* Parse "cosine" | "linear" | "constant"; -1 if unknown. */
int sched_parse(const char *name);
/* lr at optimizer step `step` (0-based) of `total`, warm-up over `warmup` steps. */
float sched_lr(int kind, int step, int total, int warmup, float lr, float min_lr);

#endif
