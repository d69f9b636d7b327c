/* librma-mpi's C test of windows whose members are not all in one MPI_COMM_WORLD: the
 * ranks of the job spawn 2 more processes (MPI_Comm_spawn), parents and children merge
 * the intercommunicator (MPI_Intercomm_merge) and make windows over the result. Every
 * member puts into every member's window under fence, sums into rank 0's under
 * lock_all, fetches and reads its neighbour's under a shared lock; an MPI_Win_create
 * window over the program's memory too. Every result is checked exactly; prints
 * " No Errors" on rank 0 of the merged communicator when all hold. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHILDREN 2
static int rank;

#define CHECK_RANK rank
#include "check.h"

/* Every member puts 100 + its rank into slot `rank` of every member's window (fence),
 * adds rank + 1 to rank 0's slot `size` (lock_all), fetches its right neighbour's
 * slot of the left neighbour (shared lock). */
static void exercise(MPI_Win win, long *mem, MPI_Comm comm, const char *what) {
    int size;
    MPI_Comm_size(comm, &size);
    OK(MPI_Win_fence(0, win));
    long mine = 100 + rank;
    for (int t = 0; t < size; t++) OK(MPI_Put(&mine, 1, MPI_LONG, t, rank, 1, MPI_LONG, win));
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < size; r++) CHECK(mem[r] == 100 + r, "%s: slot %d is %ld", what, r, mem[r]);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_lock_all(0, win));
    long one = rank + 1, old = -1;
    OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, size, 1, MPI_LONG, MPI_SUM, win));
    OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, size + 1, MPI_SUM, win));
    OK(MPI_Win_unlock_all(win));
    CHECK(old >= 0, "%s: fetch_and_op fetched %ld", what, old);
    MPI_Barrier(comm);
    if (rank == 0) {
        long want = (long)size * (size + 1) / 2;
        CHECK(mem[size] == want && mem[size + 1] == want, "%s: sums %ld %ld, not %ld", what,
              mem[size], mem[size + 1], want);
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long got = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
    OK(MPI_Get(&got, 1, MPI_LONG, right, left, 1, MPI_LONG, win));
    OK(MPI_Win_unlock(right, win));
    CHECK(got == 100 + left, "%s: got %ld from rank %d", what, got, right);
    MPI_Barrier(comm);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm parent, inter, merged;
    MPI_Comm_get_parent(&parent);
    /* Parents: "rma LIB"; children: "child LIB". */
    const char *lib = argc > 2 ? argv[2] : NULL;
    if (argc > 1 && (!strcmp(argv[1], "rma") || !strcmp(argv[1], "child"))) {
        Dl_info where;
        if (!dladdr((void *)MPI_Put, &where) || !where.dli_fname ||
            !strstr(where.dli_fname, "librma_mpi")) {
            fprintf(stderr, "%s: MPI_Put is not librma-mpi's but %s's\n", argv[1],
                    where.dli_fname ? where.dli_fname : "?");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (parent == MPI_COMM_NULL) {
        char *args[] = {"child", (char *)(lib ? lib : ""), NULL};
        int codes[CHILDREN];
        /* An MPI that cannot spawn at all (Debian's MPICH 4.0.2 over UCX) says so, and the
         * test driver decides whether that MPI may. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc = MPI_Comm_spawn(argv[0], args, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                                &inter, codes);
        if (rc != MPI_SUCCESS) {
            int world_rank;
            MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
            if (world_rank == 0) printf(" Spawn unavailable\n");
            MPI_Finalize();
            return 0;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        for (int i = 0; i < CHILDREN; i++) CHECK(codes[i] == MPI_SUCCESS, "spawn code %d", codes[i]);
    } else {
        inter = parent;
    }
    /* Parents first, children after them. */
    OK(MPI_Intercomm_merge(inter, parent != MPI_COMM_NULL, &merged));
    int size, world_size, remote_size;
    MPI_Comm_rank(merged, &rank);
    MPI_Comm_size(merged, &size);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_remote_size(inter, &remote_size);
    CHECK(size == world_size + remote_size, "merged size %d", size);
    CHECK(parent != MPI_COMM_NULL || remote_size == CHILDREN, "%d children", remote_size);
    long *mem = NULL;
    MPI_Win win;
    OK(MPI_Win_allocate((size + 2) * sizeof(long), sizeof(long), MPI_INFO_NULL, merged, &mem, &win));
    for (int i = 0; i < size + 2; i++) mem[i] = i < size ? -1 : 0;
    exercise(win, mem, merged, "MPI_Win_allocate");
    OK(MPI_Win_free(&win));
    long *own = calloc(size + 2, sizeof(long));
    for (int i = 0; i < size; i++) own[i] = -1;
    OK(MPI_Win_create(own, (size + 2) * sizeof(long), sizeof(long), MPI_INFO_NULL, merged, &win));
    exercise(win, own, merged, "MPI_Win_create");
    OK(MPI_Win_free(&win));
    free(own);
    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, merged);
    if (rank == 0) {
        if (total == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", total);
        fflush(stdout);
    }
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return total != 0;
}
