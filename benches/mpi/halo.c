/* The MPI side of benches/compare_halo.sh (issue #28): the halo exchange of rma's
 * `halo` binary (benches/src/bin/halo.rs) in MPI, so that one invocation compares
 * notified puts with the MPIs' own PSCW and fence on the same pattern:
 *
 *   halo MODE BYTES ITERS WARMUP [DIMS]
 *   MODE: pscw | fence | notify (notify: built with -DRMA_NOTIFY against librma-mpi's
 *         rma_mpi_notify.h and linked with -lrma_mpi: MPI_Put_notify, the draft's name)
 *   DIMS: 1 (a ring, the default) or 2 (a px x py torus as halo.rs builds it: px >= py,
 *         as near square as the rank count divides; a dimension of one rank has no
 *         halos)
 *
 * Each iteration every rank puts its halo (BYTES, MPI_BYTE) into each neighbour's window,
 * one per direction, landing in the receiver's slot for the direction it came from, and
 * waits for theirs: pscw posts to and starts the neighbours; fence puts and fences;
 * notify puts into one of two buffers by the iteration's parity with counter 0 or 1,
 * then spins on its own counter until every neighbour's halo is counted, in a lock_all
 * epoch held throughout. Rank 0 prints "MODE BYTES US_PER_ITERATION". The last halos
 * are checked. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef RMA_NOTIFY
#include <rma_mpi_notify.h>
#endif

/* Directions by where a halo comes from: west, east, south, north. */
#define DIRECTIONS 4

static int rank, size;
/* Per halo this rank sends: the neighbour, and the direction it lands in there. */
static int out_rank[DIRECTIONS], out_dir[DIRECTIONS], nout;

/* Where the halo from direction dir lands, in parity buffer p: [p][dir][bytes]. */
static MPI_Aint slot(int dir, int p, int bytes) {
    return (MPI_Aint)(p * DIRECTIONS + dir) * bytes;
}

static void fill(unsigned char *halo, int bytes, long i) {
    memset(halo, (int)(i & 0x7f) + 1, (size_t)bytes);
}

static int check(const unsigned char *base, int bytes, long last, int p) {
    for (int k = 0; k < nout; k++)
        for (int j = 0; j < bytes; j++)
            if (base[slot(out_dir[k], p, bytes) + j] != (unsigned char)((last & 0x7f) + 1)) {
                fprintf(stderr, "[%d] halo %d of iteration %ld is stale\n", rank, out_dir[k],
                        last);
                return 1;
            }
    return 0;
}

/* The grid as halo.rs builds it: a ring, or a px x py torus (rank = y * px + x). */
static void grid(int dims) {
    int px = size, py = 1;
    if (dims == 2)
        for (int d = 1; d * d <= size; d++)
            if (size % d == 0) py = d, px = size / d;
    int x = rank % px, y = rank / px;
    nout = 0;
    if (px > 1) {
        /* To the east we are its west (0), to the west its east (1). */
        out_rank[nout] = y * px + (x + 1) % px, out_dir[nout++] = 0;
        out_rank[nout] = y * px + (x + px - 1) % px, out_dir[nout++] = 1;
    }
    if (py > 1) {
        /* To the north we are its south (2), to the south its north (3). */
        out_rank[nout] = ((y + 1) % py) * px + x, out_dir[nout++] = 2;
        out_rank[nout] = ((y + py - 1) % py) * px + x, out_dir[nout++] = 3;
    }
}

static void put_all(const unsigned char *halo, int bytes, int p, MPI_Win win) {
    for (int k = 0; k < nout; k++)
        MPI_Put(halo, bytes, MPI_BYTE, out_rank[k], slot(out_dir[k], p, bytes), bytes, MPI_BYTE,
                win);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 5) {
        fprintf(stderr, "usage: halo pscw|fence|notify BYTES ITERS WARMUP [1|2]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *mode = argv[1];
    int bytes = atoi(argv[2]);
    long iters = atol(argv[3]), warmup = atol(argv[4]);
    int dims = argc > 5 ? atoi(argv[5]) : 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    grid(dims);
    unsigned char *base, *halo = malloc((size_t)bytes);
    MPI_Win win;
    MPI_Aint window = (MPI_Aint)2 * DIRECTIONS * bytes;
    MPI_Win_allocate(window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, (size_t)window);
    /* PSCW's group: the neighbours, each once. */
    MPI_Group world, both;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int ranks[DIRECTIONS], nranks = 0;
    for (int k = 0; k < nout; k++) {
        int seen = 0;
        for (int j = 0; j < nranks; j++) seen |= ranks[j] == out_rank[k];
        if (!seen) ranks[nranks++] = out_rank[k];
    }
    MPI_Group_incl(world, nranks, ranks, &both);
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
            put_all(halo, bytes, 0, win);
            MPI_Win_complete(win);
            MPI_Win_wait(win);
        }
        bad = check(base, bytes, last, 0);
    } else if (!strcmp(mode, "fence")) {
        MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
        for (long i = 0; i < total; i++) {
            if (i == warmup) start = MPI_Wtime();
            fill(halo, bytes, i);
            put_all(halo, bytes, 0, win);
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
            for (int k = 0; k < nout; k++)
                MPI_Put_notify(halo, bytes, MPI_BYTE, out_rank[k], slot(out_dir[k], p, bytes),
                               bytes, MPI_BYTE, p, win);
            /* Every neighbour's halo of this iteration: nout per use of parity p. */
            MPI_Count want = (MPI_Count)nout * (i / 2 + 1), v = 0;
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
