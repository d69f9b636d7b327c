/* Is a flushed put complete at the target? MPI-4.1 12.5.4: after MPI_Win_flush returns,
 * the operations "are completed both at the origin and at the target". A litmus of three
 * processes: rank 0 puts round r into rank 1's window, flushes, and tells rank 2 (a
 * message); rank 2 then gets the value from rank 1 and must see r. Rank 1 computes
 * between progress calls, as an application does, so a put still in flight when the
 * flush returned is taken in whenever rank 1 next polls, racing rank 2's get. Prints the
 * number of stale reads (0 is what MPI asks for) and exits 1 if there was any.
 *
 * usage: flush_litmus ROUNDS [COMPUTE_US]   (3 ranks)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void compute(double us) {
    double end = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < end) {
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || size != 3) {
        if (rank == 0) fprintf(stderr, "usage: flush_litmus ROUNDS [COMPUTE_US] (3 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rounds = atoi(argv[1]);
    double compute_us = argc > 2 ? atof(argv[2]) : 200;
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    *base = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    long stale = 0;
    if (rank == 0) {
        for (int64_t r = 1; r <= rounds; r++) {
            MPI_Put(&r, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win);
            MPI_Win_flush(1, win);
            MPI_Send(&r, 1, MPI_INT64_T, 2, 0, MPI_COMM_WORLD);
            MPI_Recv(NULL, 0, MPI_BYTE, 2, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    } else if (rank == 2) {
        for (int i = 0; i < rounds; i++) {
            int64_t r, seen;
            MPI_Recv(&r, 1, MPI_INT64_T, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Get(&seen, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win);
            MPI_Win_flush(1, win);
            if (seen != r) stale++;
            MPI_Send(NULL, 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        printf("flush litmus: %ld stale reads in %d rounds\n", stale, rounds);
    } else {
        /* Rank 1: computes, polling now and then, until rank 2 says it is done. */
        int done = 0;
        MPI_Request req;
        MPI_Irecv(NULL, 0, MPI_BYTE, 2, 2, MPI_COMM_WORLD, &req);
        while (!done) {
            compute(compute_us);
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        }
    }
    if (rank == 2) MPI_Send(NULL, 0, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
    MPI_Win_unlock_all(win);
    MPI_Bcast(&stale, 1, MPI_LONG, 2, MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return stale ? 1 : 0;
}
