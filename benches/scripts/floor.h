/* What the hardware-floor scripts (lock_floor.c, notify_floor.c) share: a clock and
 * pinning to a CPU. Included by path from the same directory. */
#ifndef RMA_FLOOR_H
#define RMA_FLOOR_H
#define _GNU_SOURCE
#include <sched.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}
#endif
