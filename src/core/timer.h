/* timer.h: monotonic wall-clock seconds. */
#ifndef IMPLICIT_TIMER_H
#define IMPLICIT_TIMER_H

#include <time.h>

static inline double timer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
