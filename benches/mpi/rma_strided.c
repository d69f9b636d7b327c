/* Strided and derived-datatype one-sided transfers, timed the same way under any MPI
 * (and under an MPI with librma-mpi preloaded): benches/compare_strided.sh runs it.
 *
 *   rma_strided ITERS WARMUP
 *
 * For each pattern (vector, subarray, indexed), op (put, get, acc with MPI_SUM) and block
 * count (1, 16, 256, 1024 blocks of one double, every other double of the target's
 * window), rank 0 times ITERS rounds of "op; MPI_Win_flush" inside one MPI_Win_lock_all
 * epoch on a window from MPI_Win_allocate, and prints "PATTERN OP BLOCKS LATENCY_US".
 * The origin buffer is contiguous; the target's layout is the derived datatype: a vector
 * of blocks of 1 every 2; the same as a 2-D subarray (BLOCKS rows of 2 columns, column
 * 0); the same as an indexed type (BLOCKS blocks of 1 at 0, 2, 4, ...). After the timing,
 * the target's window is read back with a contiguous get and checked element by element
 * (each pattern's last op, put: the origin values; acc: their sums). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pattern { VECTOR, SUBARRAY, INDEXED };
enum op { PUT, GET, ACC };
static const char *pattern_names[] = {"vector", "subarray", "indexed"};
static const char *op_names[] = {"put", "get", "acc"};

static MPI_Datatype target_type(enum pattern p, int blocks) {
    MPI_Datatype t;
    if (p == VECTOR) {
        MPI_Type_vector(blocks, 1, 2, MPI_DOUBLE, &t);
    } else if (p == SUBARRAY) {
        int sizes[2] = {blocks, 2}, subs[2] = {blocks, 1}, starts[2] = {0, 0};
        MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
    } else {
        int *lens = malloc(sizeof(int) * blocks), *displs = malloc(sizeof(int) * blocks);
        for (int i = 0; i < blocks; i++) {
            lens[i] = 1;
            displs[i] = 2 * i;
        }
        MPI_Type_indexed(blocks, lens, displs, MPI_DOUBLE, &t);
        free(lens);
        free(displs);
    }
    MPI_Type_commit(&t);
    return t;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: rma_strided ITERS WARMUP\n");
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
    int iters = atoi(argv[1]), skip = atoi(argv[2]);
    const int max_blocks = 1024, counts[] = {1, 16, 256, 1024};
    double *base, *origin = malloc(sizeof(double) * max_blocks);
    double *back = malloc(sizeof(double) * 2 * max_blocks);
    MPI_Win win;
    MPI_Win_allocate(sizeof(double) * 2 * max_blocks, sizeof(double), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    int bad = 0;
    for (int p = VECTOR; p <= INDEXED; p++) {
        for (int o = PUT; o <= ACC; o++) {
            for (int c = 0; c < 4; c++) {
                int blocks = counts[c];
                MPI_Datatype t = target_type((enum pattern)p, blocks);
                MPI_Win_lock_all(0, win);
                memset(base, 0, sizeof(double) * 2 * max_blocks);
                MPI_Win_sync(win);
                MPI_Barrier(MPI_COMM_WORLD);
                if (rank == 0) {
                    for (int i = 0; i < blocks; i++) origin[i] = i + 1;
                    double start = 0;
                    for (int i = 0; i < iters + skip; i++) {
                        if (i == skip) start = MPI_Wtime();
                        if (o == PUT)
                            MPI_Put(origin, blocks, MPI_DOUBLE, 1, 0, 1, t, win);
                        else if (o == GET)
                            MPI_Get(origin, blocks, MPI_DOUBLE, 1, 0, 1, t, win);
                        else
                            MPI_Accumulate(origin, blocks, MPI_DOUBLE, 1, 0, 1, t, MPI_SUM, win);
                        MPI_Win_flush(1, win);
                    }
                    double us = (MPI_Wtime() - start) * 1e6 / iters;
                    /* Check what the target holds: the blocks, and nothing between them. */
                    MPI_Get(back, 2 * blocks, MPI_DOUBLE, 1, 0, 2 * blocks, MPI_DOUBLE, win);
                    MPI_Win_flush(1, win);
                    for (int i = 0; i < 2 * blocks; i++) {
                        double want = 0;
                        if (i % 2 == 0 && o == PUT) want = i / 2 + 1;
                        if (i % 2 == 0 && o == ACC) want = (double)(iters + skip) * (i / 2 + 1);
                        if (o == GET && i % 2 == 0) want = 0;
                        if (back[i] != want) {
                            if (!bad)
                                fprintf(stderr, "%s %s %d: element %d is %g, not %g\n",
                                        pattern_names[p], op_names[o], blocks, i, back[i], want);
                            bad = 1;
                        }
                    }
                    printf("%s %s %d %.3f\n", pattern_names[p], op_names[o], blocks, us);
                    fflush(stdout);
                }
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Win_unlock_all(win);
                MPI_Type_free(&t);
            }
        }
    }
    MPI_Win_free(&win);
    free(origin);
    free(back);
    MPI_Finalize();
    return bad;
}
