/* The hardware's floor under a notified put + wait on shared memory (issue #28): two
 * processes pinned to CPUs 0 and 1 ping-pong through memory both map, each round trip
 * what `osu_put_latency -s notify` times: one side stores 8 bytes of "halo" into the
 * other's part, adds one to the other's counter (release) and waits for its own counter
 * (acquire); the other waits, then does the same back. Data and counters on cache lines
 * of their own, as a window's and its notification counters' are. No library around it:
 * what rma's notified put + wait and a plain put + flush (a local store, no partner
 * waiting) are set against.
 *
 * Prints half a round trip, as `osu_put_latency -s notify` does.
 *
 * usage: cc -O2 -o notify_floor benches/scripts/notify_floor.c && ./notify_floor [ITERS] */
#include "floor.h"
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* One process's part: its halo and, a page away, its counter. */
struct part {
    _Alignas(64) volatile uint64_t halo;
    _Alignas(4096) _Atomic uint64_t counter;
    char pad[4096 - sizeof(uint64_t)];
};

static void step(struct part *mine, struct part *peer, uint64_t n, int first) {
    if (!first) {
        while (atomic_load_explicit(&mine->counter, memory_order_acquire) < n) {
            __builtin_ia32_pause();
        }
    }
    peer->halo = n;
    atomic_fetch_add_explicit(&peer->counter, 1, memory_order_release);
    if (first) {
        while (atomic_load_explicit(&mine->counter, memory_order_acquire) < n) {
            __builtin_ia32_pause();
        }
    }
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    struct part *p = mmap(NULL, 2 * sizeof(struct part), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pid_t child = fork();
    int me = child == 0;
    pin(me);
    long warmup = iters / 10;
    double start = 0;
    for (long i = 1; i <= warmup + iters; i++) {
        if (i == warmup + 1) start = now();
        step(&p[me], &p[1 - me], (uint64_t)i, me == 0);
        /* The halo of this step, or of the next where the peer is a step ahead. */
        if (p[me].halo < (uint64_t)i) {
            fprintf(stderr, "stale halo %lu at %ld\n", (unsigned long)p[me].halo, i);
            if (child != 0) kill(child, SIGKILL);
            return 1;
        }
    }
    /* Half a round trip, as OSU's latency tests with both sides active report it. */
    double us = (now() - start) / iters * 1e6 / 2;
    if (child == 0) return 0;
    waitpid(child, NULL, 0);
    printf("notified put + wait by hand (half a round trip): %.4f us\n", us);
    return 0;
}
