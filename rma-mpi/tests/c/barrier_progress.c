/* librma-mpi's C test of progress in the application's barrier: rank 0 reads and writes
 * the last rank's window (gets and puts of 128 KiB, passive target) while that rank waits
 * in MPI_Barrier, which knows nothing of rma. Run over the network with rma's progress
 * agent off (RMA_ASYNC_PROGRESS=0): where a peer's native reads and writes move only
 * while the target polls (libfabric's tcp provider), only the barrier's progress serves
 * them, and without it the flush would reach the library's deadline. Prints
 * " No Errors" on rank 0 when all hold. Runs on 2 or more ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int world_rank;
#define CHECK_RANK world_rank
#include "check.h"

enum { LONGS = 1 << 17, OPS = 8, EACH = LONGS / OPS };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int last = size - 1;
    long *base;
    MPI_Win win;
    OK(MPI_Win_allocate(LONGS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                        &win));
    for (long i = 0; i < LONGS; i++) base[i] = ((long)world_rank << 40) | (i * 5);
    MPI_Barrier(MPI_COMM_WORLD);
    long *got = malloc(LONGS * sizeof(long)), *mine = malloc(LONGS * sizeof(long));
    for (int round = 0; round < 3; round++) {
        if (world_rank == 0) {
            for (long i = 0; i < LONGS; i++) {
                got[i] = -1;
                mine[i] = -(long)round - 2 - i;
            }
            OK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win));
            for (int k = 0; k < OPS; k++)
                OK(MPI_Get(got + k * EACH, EACH, MPI_LONG, last, k * EACH, EACH, MPI_LONG, win));
            OK(MPI_Win_flush(last, win));
            for (int k = 0; k < OPS; k++)
                OK(MPI_Put(mine + k * EACH, EACH, MPI_LONG, last, k * EACH, EACH, MPI_LONG, win));
            OK(MPI_Win_unlock(last, win));
            long want_base = round == 0 ? ((long)last << 40) : 0;
            int wrong = -1;
            for (long i = 0; i < LONGS && wrong < 0; i++) {
                long want = round == 0 ? (want_base | (i * 5)) : -(long)round - 1 - i;
                if (got[i] != want) wrong = (int)i;
            }
            CHECK(wrong < 0, "round %d: element %d of the gets is %ld", round, wrong,
                  wrong < 0 ? 0 : got[wrong]);
        }
        /* The last rank is here all along, serving rank 0's reads and writes. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank == last) {
            int wrong = -1;
            for (long i = 0; i < LONGS && wrong < 0; i++)
                if (base[i] != -(long)round - 2 - i) wrong = (int)i;
            CHECK(wrong < 0, "round %d: element %d of the window is %ld", round, wrong,
                  wrong < 0 ? 0 : base[wrong]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(got);
    free(mine);
    OK(MPI_Win_free(&win));
    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0) printf(total == 0 ? " No Errors\n" : " Found %d errors\n", total);
    MPI_Finalize();
    return total != 0;
}
