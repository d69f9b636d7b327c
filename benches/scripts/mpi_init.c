/* The MPI side of the rma_init comparison: the time of MPI_Init on every rank, reduced
 * to min, max and mean on rank 0, printed like rma_init. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    double start = now_us();
    MPI_Init(&argc, &argv);
    double took = now_us() - start, min, max, sum;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Reduce(&took, &min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&took, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&took, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("nprocs: %d, min: %.0f us, max: %.0f us, avg: %.0f us\n", size, min, max, sum / size);
    MPI_Finalize();
    return 0;
}
