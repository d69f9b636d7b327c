/* The reference for `comm`'s allreduce row: MPI_Allreduce of one uint64 sum, timed as
 * OSU's osu_allreduce times it (warm-up, then the mean of ITERS calls, rank 0 prints).
 * Built and run by benches/compare_allreduce.sh under MPICH and Open MPI. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10000;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double t[3];
    for (int run = 0; run < 3; run++) {
        for (int i = 0; i < iters / 10; i++) {
            uint64_t in = (uint64_t)i, out = 0;
            MPI_Allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            uint64_t in = (uint64_t)i, out = 0;
            MPI_Allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            if (out != (uint64_t)i * (uint64_t)size) {
                fprintf(stderr, "wrong sum %llu\n", (unsigned long long)out);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        t[run] = (MPI_Wtime() - start) * 1e6 / iters;
    }
    /* The median of the three runs, as `comm` reports. */
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    double median = t[2] < lo ? lo : (t[2] > hi ? hi : t[2]);
    if (rank == 0) printf("%-12d%.2f\n", 8, median);
    MPI_Finalize();
    return 0;
}
