/* Every rank passes the same wrong argument under MPI_ERRORS_ARE_FATAL: each must say
 * so in one whole line before the job aborts (librma-mpi's messages used to interleave
 * mid-line, and a rank killed by another's abort lost its message). The test checks the
 * lines; this program must not reach its end. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *base;
    MPI_Win win;
    MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_ARE_FATAL);
    MPI_Win_fence(0, win);
    int x = 1;
    MPI_Put(&x, 1, MPI_INT, size + 5, 0, 1, MPI_INT, win);
    printf("MPI_Put to rank %d returned\n", size + 5);
    MPI_Finalize();
    return 0;
}
