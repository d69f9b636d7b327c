/* Put or get bandwidth in MPI, the loop of rma's osu_put_bw / osu_get_bw with -s flush:
 * rank 0 locks rank 1's window once, then each iteration issues WINDOW operations of
 * SIZE bytes back to back and flushes; rank 1 only waits. Prints "OP SIZE MB/s" (MB =
 * 10^6 bytes, as OSU). The target's window is checked afterwards (put: every byte the
 * origin's pattern), so a wrong transfer fails instead of being timed.
 *
 * usage: rma_bw put|get SIZE WINDOW ITERS WARMUP
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: rma_bw put|get SIZE WINDOW ITERS WARMUP (2 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int put = !strcmp(argv[1], "put");
    long bytes = atol(argv[2]);
    int window = atoi(argv[3]), iters = atoi(argv[4]), skip = atoi(argv[5]);
    char *base;
    MPI_Win win;
    MPI_Win_allocate(bytes * window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    char *buf = malloc(bytes * window);
    for (long i = 0; i < bytes * window; i++) buf[i] = (char)(i * 7 + 1);
    memset(base, 0, bytes * window);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = 0;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) start = MPI_Wtime();
            for (int w = 0; w < window; w++) {
                if (put)
                    MPI_Put(buf + w * bytes, bytes, MPI_BYTE, 1, w * bytes, bytes, MPI_BYTE, win);
                else
                    MPI_Get(buf + w * bytes, bytes, MPI_BYTE, 1, w * bytes, bytes, MPI_BYTE, win);
            }
            MPI_Win_flush(1, win);
        }
        double t = MPI_Wtime() - start;
        MPI_Win_unlock(1, win);
        printf("%s %ld %.2f\n", argv[1], bytes, (double)bytes * window * iters / t / 1e6);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1 && put) {
        for (long i = 0; i < bytes * window; i++) {
            if (base[i] != (char)(i * 7 + 1)) {
                fprintf(stderr, "byte %ld wrong\n", i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    free(buf);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
