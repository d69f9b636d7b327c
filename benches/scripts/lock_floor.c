/* The hardware's floor under a passive-target epoch on shared memory: two processes, the
 * origin takes a lock word in memory both map (compare-and-swap), stores 8 bytes of
 * "window", releases the word (release store; with argument 1 a full fence before it),
 * while the other process waits by yielding. What a lock + put + unlock costs with no
 * library around it, to set rma's and the MPIs' times against (README, the AMD guest:
 * 3-6 ns against rma's 120 and Open MPI's 61).
 *
 * usage: cc -O2 -o lock_floor benches/scripts/lock_floor.c && ./lock_floor [0|1]
 * (pins itself to CPU 0 and the waiter to CPU 1) */
#include "floor.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int fence = argc > 1 ? atoi(argv[1]) : 0;
    char *m = mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    volatile uint64_t *data = (uint64_t *)m, *stop = (uint64_t *)(m + 8192);
    uint64_t *lock = (uint64_t *)(m + 65536);
    pid_t child = fork();
    if (child == 0) {
        pin(1);
        while (!*stop) sched_yield();
        _exit(0);
    }
    pin(0);
    const int warmup = 100000, n = 2000000;
    double t0 = 0;
    for (int i = 0; i < warmup + n; i++) {
        if (i == warmup) t0 = now();
        uint64_t free_word = 0;
        while (!__atomic_compare_exchange_n(lock, &free_word, 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
            free_word = 0;
        *data = (uint64_t)i;
        if (fence) __atomic_thread_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
    }
    double t = now() - t0;
    *stop = 1;
    waitpid(child, NULL, 0);
    printf("fence %d: %.1f ns per lock + put + unlock\n", fence, t / n * 1e9);
    return 0;
}
