/* librma-mpi's C test of notified access (issue #28), written once for both spellings:
 * the MPI Forum draft's names (default) and Intel MPI's MPIX_ names (-DINTEL_NAMES).
 * A halo ring in which each consumer reads its halo when the count says it is there
 * (never stale), acknowledged by notifications of zero elements; a notified get; a
 * notified put in a fence epoch; a bad index; counters set and removed. Prints
 * " No Errors" on rank 0 when all hold. Runs on 2 or 4 ranks, linked with -lrma_mpi. */
#include <mpi.h>
#include <rma_mpi_notify.h>
#include <stdio.h>
#include <string.h>

#ifdef INTEL_NAMES
#define PUT_NOTIFY(buf, n, t, disp, idx, win) \
    MPIX_Put_notify(buf, n, MPI_INT, t, disp, n, MPI_INT, win, idx)
#define GET_NOTIFY(buf, n, t, disp, idx, win) \
    MPIX_Get_notify(buf, n, MPI_INT, t, disp, n, MPI_INT, win, idx)
#define SET_COUNTERS(win, n) MPIX_Win_create_notify(win, n)
#define FREE_COUNTERS(win) MPIX_Win_free_notify(win)
#define GET_VALUE(win, idx, v) MPIX_Win_get_notify(win, idx, v)
#define SET_VALUE(win, idx, v) MPIX_Win_set_notify(win, idx, v)
#else
#define PUT_NOTIFY(buf, n, t, disp, idx, win) \
    MPI_Put_notify(buf, n, MPI_INT, t, disp, n, MPI_INT, idx, win)
#define GET_NOTIFY(buf, n, t, disp, idx, win) \
    MPI_Get_notify(buf, n, MPI_INT, t, disp, n, MPI_INT, idx, win)
#define SET_COUNTERS(win, n) MPI_Win_notify_set_num(win, MPI_INFO_NULL, n)
#define FREE_COUNTERS(win) MPI_Win_notify_set_num(win, MPI_INFO_NULL, 0)
#define GET_VALUE(win, idx, v) MPI_Win_notify_get_value(win, idx, v)
#define SET_VALUE(win, idx, v) MPI_Win_notify_set_value(win, idx, v)
#endif

enum { SLOT = 8, ROUNDS = 2000, HALO = 0, ACK = 1, GETS = 2, EPOCH = 3, COUNTERS = 4 };

static int errors = 0, rank;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "[%d] line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
            errors++;                                      \
        }                                                  \
    } while (0)

/* Spins until counter `idx` reaches `at_least` (the library's progress applies what
 * came as messages meanwhile). */
static MPI_Count wait_for(MPI_Win win, int idx, MPI_Count at_least) {
    MPI_Count v = 0;
    double start = MPI_Wtime();
    do {
        GET_VALUE(win, idx, &v);
    } while (v < at_least && MPI_Wtime() - start < 60.0);
    return v;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(SLOT * size * sizeof(int)), sizeof(int), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    memset(base, 0, SLOT * size * sizeof(int));
    CHECK(SET_COUNTERS(win, COUNTERS) == MPI_SUCCESS, "setting the counters");
    for (int i = 0; i < COUNTERS; i++) {
        MPI_Count v = -1;
        GET_VALUE(win, i, &v);
        CHECK(v == 0, "counter %d starts at %lld", i, (long long)v);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* The halo ring: our halo into our slot at the right neighbour, notified. */
    MPI_Win_lock_all(0, win);
    int halo[SLOT];
    for (int round = 1; round <= ROUNDS && errors == 0; round++) {
        for (int j = 0; j < SLOT; j++) halo[j] = rank * 100000 + round;
        CHECK(PUT_NOTIFY(halo, SLOT, right, rank * SLOT, HALO, win) == MPI_SUCCESS, "put");
        MPI_Count seen = wait_for(win, HALO, round);
        CHECK(seen == round, "round %d: halo count %lld", round, (long long)seen);
        for (int j = 0; j < SLOT; j++)
            CHECK(base[left * SLOT + j] == left * 100000 + round,
                  "round %d: the halo seen with its count is %d", round, base[left * SLOT + j]);
        /* Consumed: a notification alone (no elements) lets the left one go on. */
        CHECK(PUT_NOTIFY(NULL, 0, left, 0, ACK, win) == MPI_SUCCESS, "ack");
        CHECK(wait_for(win, ACK, round) == round, "round %d: ack", round);
    }
    /* A counter past the target's: MPI_ERR_ARG, nothing sent. */
    int rc = PUT_NOTIFY(halo, 1, right, 0, COUNTERS, win), class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_ARG, "an index past the counters gave class %d", class);
    /* A notified get of our last halo back from the right neighbour. */
    int back[SLOT] = {0};
    CHECK(GET_NOTIFY(back, SLOT, right, rank * SLOT, GETS, win) == MPI_SUCCESS, "get");
    MPI_Win_flush(right, win);
    for (int j = 0; j < SLOT; j++)
        CHECK(back[j] == rank * 100000 + ROUNDS, "the notified get's data: %d", back[j]);
    MPI_Win_unlock_all(win);
    CHECK(wait_for(win, GETS, 1) == 1, "one notified get");

    /* In a fence epoch: counted by the fence's end at the latest. */
    MPI_Win_fence(0, win);
    int seven = 7;
    PUT_NOTIFY(&seven, 1, right, 0, EPOCH, win);
    MPI_Win_fence(0, win);
    MPI_Count v = 0;
    GET_VALUE(win, EPOCH, &v);
    CHECK(v == 1 && base[0] == 7, "fence epoch: count %lld, value %d", (long long)v, base[0]);
    MPI_Win_fence(0, win);

    SET_VALUE(win, HALO, 0);
    GET_VALUE(win, HALO, &v);
    CHECK(v == 0, "set_value");
    CHECK(FREE_COUNTERS(win) == MPI_SUCCESS, "removing the counters");
    rc = GET_VALUE(win, 0, &v);
    CHECK(rc != MPI_SUCCESS, "a counter after removal");
    MPI_Win_free(&win);

    int all = 0;
    MPI_Reduce(&errors, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf(" No Errors\n");
    MPI_Finalize();
    return all != 0;
}
