/* The MPI side of benches/compare_peers.sh: one-sided 8-byte latencies with exactly the
 * loops of rma's OSU binaries (benches/src/kernels.rs), so that one invocation compares
 * rma with an MPI's own one-sided implementation on the same pattern:
 *
 *   rma_latency OP SYNC ITERS WARMUP [WINDOW]
 *   OP:     put | get | acc | get_acc | fop | cas
 *   SYNC:   flush | lock | lock_all | fence | pscw
 *   WINDOW: allocate (the default: MPI_Win_allocate) | create (MPI_Win_create over
 *           malloc'd memory) | dynamic (MPI_Win_create_dynamic, the memory attached and
 *           its address exchanged; displacements are addresses), as OSU's -w
 *
 * put, get, acc and get_acc move 8 elements of MPI_UINT8_T (acc and get_acc: MPI_SUM);
 * fop and cas one MPI_UINT64_T. Lock types as rma's: shared,
 * but exclusive for get_acc under flush and lock and for fop and cas under lock. Rank 0
 * is the origin and prints "OP SYNC LATENCY_US"; fence and pscw are ping-pongs whose time
 * is halved, as OSU and rma halve them. Every fetched value is checked. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { PUT, GET, ACC, GET_ACC, FOP, CAS };

static enum op parse_op(const char *s) {
    const char *names[] = {"put", "get", "acc", "get_acc", "fop", "cas"};
    for (int i = 0; i < 6; i++)
        if (!strcmp(s, names[i])) return (enum op)i;
    fprintf(stderr, "unknown op %s\n", s);
    exit(2);
}

static uint8_t bytes[8], got[8];
static uint64_t one = 1, old, compare, swap; /* fop adds one; cas swaps i for i + 1 */
static MPI_Aint at = 0; /* the target's displacement 0: its region's address on dynamic windows */

/* One op toward `target`; the caller completes it (flush, unlock, fence, complete). */
static void issue(enum op op, int target, MPI_Win win) {
    switch (op) {
    case PUT: MPI_Put(bytes, 8, MPI_UINT8_T, target, at, 8, MPI_UINT8_T, win); break;
    case GET: MPI_Get(got, 8, MPI_UINT8_T, target, at, 8, MPI_UINT8_T, win); break;
    case ACC: MPI_Accumulate(bytes, 8, MPI_UINT8_T, target, at, 8, MPI_UINT8_T, MPI_SUM, win); break;
    case GET_ACC:
        MPI_Get_accumulate(bytes, 8, MPI_UINT8_T, got, 8, MPI_UINT8_T, target, at, 8,
                           MPI_UINT8_T, MPI_SUM, win);
        break;
    case FOP: MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, target, at + 8, MPI_SUM, win); break;
    case CAS: MPI_Compare_and_swap(&swap, &compare, &old, MPI_UINT64_T, target, at + 8, win); break;
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: rma_latency OP SYNC ITERS WARMUP [allocate|create|dynamic]\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "needs 2 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    enum op op = parse_op(argv[1]);
    const char *sync = argv[2];
    int iters = atoi(argv[3]), skip = atoi(argv[4]), total = iters + skip;
    int peer = 1 - rank;
    memset(bytes, 'a', sizeof bytes);
    const char *flavor = argc > 5 ? argv[5] : "allocate";
    uint8_t *base = NULL;
    MPI_Win win;
    if (!strcmp(flavor, "allocate")) {
        MPI_Win_allocate(16, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    } else if (!strcmp(flavor, "create")) {
        base = malloc(16);
        MPI_Win_create(base, 16, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else if (!strcmp(flavor, "dynamic")) {
        base = malloc(16);
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        MPI_Win_attach(win, base, 16);
        MPI_Aint mine, theirs[2];
        MPI_Get_address(base, &mine);
        MPI_Allgather(&mine, 1, MPI_AINT, theirs, 1, MPI_AINT, MPI_COMM_WORLD);
        at = theirs[peer];
    } else {
        if (rank == 0) fprintf(stderr, "unknown window %s\n", flavor);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(base, 0, 16);
    int exclusive = (op == GET_ACC && (!strcmp(sync, "flush") || !strcmp(sync, "lock"))) ||
                    ((op == FOP || op == CAS) && !strcmp(sync, "lock"));
    int lock = exclusive ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED;
    MPI_Group world, other;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &peer, &other);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = 0, elapsed = 0;
    int active = !strcmp(sync, "fence") || !strcmp(sync, "pscw");
    if (!strcmp(sync, "flush")) {
        if (rank == 0) {
            MPI_Win_lock(lock, 1, 0, win);
            for (int i = 0; i < total; i++) {
                if (i == skip) start = MPI_Wtime();
                /* The counter holds i after i successful swaps: each one succeeds. */
                compare = (uint64_t)i;
                swap = (uint64_t)i + 1;
                issue(op, 1, win);
                MPI_Win_flush(1, win);
            }
            elapsed = MPI_Wtime() - start;
            MPI_Win_unlock(1, win);
        }
    } else if (!strcmp(sync, "lock") || !strcmp(sync, "lock_all")) {
        if (rank == 0) {
            for (int i = 0; i < total; i++) {
                if (i == skip) start = MPI_Wtime();
                compare = (uint64_t)i;
                swap = (uint64_t)i + 1;
                if (sync[4] == '_') MPI_Win_lock_all(0, win); else MPI_Win_lock(lock, 1, 0, win);
                issue(op, 1, win);
                if (sync[4] == '_') MPI_Win_unlock_all(win); else MPI_Win_unlock(1, win);
            }
            elapsed = MPI_Wtime() - start;
        }
    } else if (!strcmp(sync, "fence")) {
        for (int i = 0; i < total; i++) {
            if (i == skip) start = MPI_Wtime();
            if (rank == 0) {
                MPI_Win_fence(0, win);
                issue(op, 1, win);
                MPI_Win_fence(0, win);
                MPI_Win_fence(0, win);
            } else {
                MPI_Win_fence(0, win);
                MPI_Win_fence(0, win);
                issue(op, 0, win);
                MPI_Win_fence(0, win);
            }
        }
        elapsed = MPI_Wtime() - start;
    } else if (!strcmp(sync, "pscw")) {
        for (int i = 0; i < total; i++) {
            if (rank == 0) {
                MPI_Win_start(other, 0, win);
                if (i == skip) start = MPI_Wtime();
                issue(op, 1, win);
                MPI_Win_complete(win);
                MPI_Win_post(other, 0, win);
                MPI_Win_wait(win);
            } else {
                if (i == skip) start = MPI_Wtime();
                MPI_Win_post(other, 0, win);
                MPI_Win_wait(win);
                MPI_Win_start(other, 0, win);
                issue(op, 0, win);
                MPI_Win_complete(win);
            }
        }
        elapsed = MPI_Wtime() - start;
    } else {
        if (rank == 0) fprintf(stderr, "unknown sync %s\n", sync);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* The counter the fetch_and_ops and compare_and_swaps of the passive modes advanced by
     * one each: all of them landed, in order. */
    if (rank == 1 && (op == FOP || op == CAS) && !active) {
        uint64_t v;
        memcpy(&v, base + 8, 8);
        if (v != (uint64_t)total) {
            fprintf(stderr, "counter %llu, expected %d\n", (unsigned long long)v, total);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double us = elapsed * 1e6 / iters;
    /* Four decimals (OSU prints two): the 8-byte rows of the peers differ by nanoseconds. */
    if (rank == 0) printf("%s %s %.4f\n", argv[1], sync, active ? us / 2 : us);
    MPI_Group_free(&other);
    MPI_Group_free(&world);
    if (!strcmp(flavor, "dynamic")) MPI_Win_detach(win, base);
    MPI_Win_free(&win);
    if (strcmp(flavor, "allocate")) free(base);
    MPI_Finalize();
    return 0;
}
