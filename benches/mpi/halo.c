/* The MPI side of benches/compare_halo.sh (issue #28): the 1-D halo exchange of rma's
 * `halo` binary (benches/src/bin/halo.rs) in MPI, so that one invocation compares
 * notified puts with the MPIs' own PSCW and fence on the same pattern:
 *
 *   halo MODE BYTES ITERS WARMUP
 *   MODE: pscw | fence | notify (notify: built with -DRMA_NOTIFY against librma-mpi's
 *         rma_mpi_notify.h and linked with -lrma_mpi: MPI_Put_notify, the draft's name)
 *
 * Each iteration every rank puts its halo (BYTES, MPI_BYTE) into both neighbours'
 * windows and waits for theirs: pscw posts to and starts both neighbours; fence puts and
 * fences; notify puts into one of two buffers by the iteration's parity with counter
 * 0 or 1, then spins on its own counter until both neighbours' halos are counted, in a
 * lock_all epoch held throughout. Rank 0 prints "MODE BYTES US_PER_ITERATION". The last
 * halos are checked. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef RMA_NOTIFY
#include <rma_mpi_notify.h>
#endif

static int rank, size, left, right;

/* Where the halo from the left (or right) lands, in parity buffer p. */
static MPI_Aint slot(int from_left, int p, int bytes) {
    return (MPI_Aint)(p * 2 + (from_left ? 0 : 1)) * bytes;
}

static void fill(unsigned char *halo, int bytes, long i) {
    memset(halo, (int)(i & 0x7f) + 1, (size_t)bytes);
}

static int check(const unsigned char *base, int bytes, long last, int p) {
    for (int side = 0; side < 2; side++)
        for (int j = 0; j < bytes; j++)
            if (base[slot(side == 0, p, bytes) + j] != (unsigned char)((last & 0x7f) + 1)) {
                fprintf(stderr, "[%d] halo %d of iteration %ld is stale\n", rank, side, last);
                return 1;
            }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 5) {
        fprintf(stderr, "usage: halo pscw|fence|notify BYTES ITERS WARMUP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *mode = argv[1];
    int bytes = atoi(argv[2]);
    long iters = atol(argv[3]), warmup = atol(argv[4]);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    left = (rank + size - 1) % size;
    right = (rank + 1) % size;
    unsigned char *base, *halo = malloc((size_t)bytes);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)4 * bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, (size_t)4 * bytes);
    MPI_Group world, both;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int ranks[2] = {left, right};
    MPI_Group_incl(world, left == right ? 1 : 2, ranks, &both);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = 0;
    long total = warmup + iters, last = total - 1;
    int bad = 0;
    if (!strcmp(mode, "pscw")) {
        for (long i = 0; i < total; i++) {
            if (i == warmup) start = MPI_Wtime();
            fill(halo, bytes, i);
            MPI_Win_post(both, 0, win);
            MPI_Win_start(both, 0, win);
            MPI_Put(halo, bytes, MPI_BYTE, right, slot(1, 0, bytes), bytes, MPI_BYTE, win);
            MPI_Put(halo, bytes, MPI_BYTE, left, slot(0, 0, bytes), bytes, MPI_BYTE, win);
            MPI_Win_complete(win);
            MPI_Win_wait(win);
        }
        bad = check(base, bytes, last, 0);
    } else if (!strcmp(mode, "fence")) {
        MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
        for (long i = 0; i < total; i++) {
            if (i == warmup) start = MPI_Wtime();
            fill(halo, bytes, i);
            MPI_Put(halo, bytes, MPI_BYTE, right, slot(1, 0, bytes), bytes, MPI_BYTE, win);
            MPI_Put(halo, bytes, MPI_BYTE, left, slot(0, 0, bytes), bytes, MPI_BYTE, win);
            MPI_Win_fence(0, win);
        }
        MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
        bad = check(base, bytes, last, 0);
#ifdef RMA_NOTIFY
    } else if (!strcmp(mode, "notify")) {
        MPI_Win_notify_set_num(win, MPI_INFO_NULL, 2);
        MPI_Win_lock_all(0, win);
        for (long i = 0; i < total; i++) {
            if (i == warmup) start = MPI_Wtime();
            int p = (int)(i % 2);
            fill(halo, bytes, i);
            MPI_Put_notify(halo, bytes, MPI_BYTE, right, slot(1, p, bytes), bytes, MPI_BYTE, p,
                           win);
            MPI_Put_notify(halo, bytes, MPI_BYTE, left, slot(0, p, bytes), bytes, MPI_BYTE, p,
                           win);
            /* Both neighbours' halos of this iteration: two per use of parity p. */
            MPI_Count want = 2 * (i / 2 + 1), v = 0;
            do {
                MPI_Win_notify_get_value(win, p, &v);
            } while (v < want);
        }
        MPI_Win_unlock_all(win);
        bad = check(base, bytes, last, (int)(last % 2));
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_notify_set_num(win, MPI_INFO_NULL, 0);
#endif
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double us = (MPI_Wtime() - start) * 1e6 / (double)iters;
    int all = 0;
    MPI_Reduce(&bad, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all) {
            fprintf(stderr, "halo %s %d: stale halos\n", mode, bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        printf("%s %d %.3f\n", mode, bytes, us);
    }
    MPI_Group_free(&both);
    MPI_Group_free(&world);
    MPI_Win_free(&win);
    free(halo);
    MPI_Finalize();
    return 0;
}
