/* librma-mpi's C test of bad input: under MPI_ERRORS_RETURN every misuse returns the
 * error class MPI prescribes, never a crash, and loses nothing (a correct operation
 * afterwards still works); a handler of MPI_Win_create_errhandler is called. Prints
 * " No Errors" on rank 0 when all hold. Runs on 2 or 4 ranks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors = 0;
static int rank;

#define EXPECT(call, class)                                                          \
    do {                                                                             \
        int rc_ = (call), class_ = MPI_SUCCESS;                                      \
        if (rc_ != MPI_SUCCESS) MPI_Error_class(rc_, &class_);                       \
        if (class_ != (class)) {                                                     \
            fprintf(stderr, "[%d] %s:%d: %s returned class %d, expected %s (%d)\n", \
                    rank, __FILE__, __LINE__, #call, class_, #class, (class));       \
            errors++;                                                                \
        }                                                                            \
    } while (0)

static int handler_calls = 0, handler_code = 0;
static void count_errors(MPI_Win *win, int *code, ...) {
    (void)win;
    handler_calls++;
    handler_code = *code;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* With the argument "rma": MPI_Put must be librma-mpi's (preloaded or linked first). */
    if (argc > 1 && strcmp(argv[1], "rma") == 0) {
        Dl_info where;
        if (!dladdr((void *)MPI_Put, &where) || !where.dli_fname ||
            !strstr(where.dli_fname, "librma_mpi")) {
            fprintf(stderr, "[%d] MPI_Put is not librma-mpi's but %s's\n", rank,
                    where.dli_fname ? where.dli_fname : "?");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* And the very library the test built (not a stale copy on a library path). */
        char want[4096], got[4096];
        if (argc > 2 && (!realpath(argv[2], want) || !realpath(where.dli_fname, got) ||
                         strcmp(want, got) != 0)) {
            fprintf(stderr, "[%d] MPI_Put is from %s, not %s\n", rank, where.dli_fname, argv[2]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Errors without a window go to MPI_COMM_SELF's handler. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int *base, value = 7, out = 0;
    MPI_Win win;
    /* A bad argument on one rank of a creation is the same error on every rank, and
     * nobody is left waiting in it. */
    EXPECT(MPI_Win_allocate(rank == size - 1 ? -8 : 64, sizeof(int), MPI_INFO_NULL,
                            MPI_COMM_WORLD, &base, &win),
           MPI_ERR_SIZE);
    EXPECT(MPI_Win_allocate(64, rank == 0 ? 0 : 4, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
           MPI_ERR_DISP);
    EXPECT(MPI_Win_allocate(16 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                            &win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), MPI_SUCCESS);
    for (int i = 0; i < 16; i++) base[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    int right = (rank + 1) % size;

    /* Invalid window handles. */
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, 0, 1, MPI_INT, MPI_WIN_NULL), MPI_ERR_WIN);
    EXPECT(MPI_Win_fence(0, MPI_WIN_NULL), MPI_ERR_WIN);
    /* Outside an epoch. */
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, 0, 1, MPI_INT, win), MPI_ERR_RMA_SYNC);
    EXPECT(MPI_Get(&out, 1, MPI_INT, right, 0, 1, MPI_INT, win), MPI_ERR_RMA_SYNC);
    EXPECT(MPI_Win_unlock(right, win), MPI_ERR_RMA_SYNC);
    EXPECT(MPI_Win_flush(right, win), MPI_ERR_RMA_SYNC);
    EXPECT(MPI_Win_complete(win), MPI_ERR_RMA_SYNC);
    /* Bad lock type and assertion. */
    EXPECT(MPI_Win_lock(12345, right, 0, win), MPI_ERR_LOCKTYPE);
    EXPECT(MPI_Win_lock_all(0x40000000, win), MPI_ERR_ASSERT);

    EXPECT(MPI_Win_lock_all(0, win), MPI_SUCCESS);
    /* A target outside the group. */
    EXPECT(MPI_Put(&value, 1, MPI_INT, size, 0, 1, MPI_INT, win), MPI_ERR_RANK);
    EXPECT(MPI_Put(&value, 1, MPI_INT, -5, 0, 1, MPI_INT, win), MPI_ERR_RANK);
    /* Past the window. */
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, 16, 1, MPI_INT, win), MPI_ERR_RMA_RANGE);
    EXPECT(MPI_Get(&out, 4, MPI_INT, right, 14, 4, MPI_INT, win), MPI_ERR_RMA_RANGE);
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, -1, 1, MPI_INT, win), MPI_ERR_DISP);
    /* Wrong datatypes: null, uncommitted, mismatched sizes; a negative count. */
    EXPECT(MPI_Put(&value, 1, MPI_DATATYPE_NULL, right, 0, 1, MPI_INT, win), MPI_ERR_TYPE);
    MPI_Datatype uncommitted;
    MPI_Type_contiguous(2, MPI_INT, &uncommitted);
    EXPECT(MPI_Put(&value, 1, uncommitted, right, 0, 2, MPI_INT, win), MPI_ERR_TYPE);
    MPI_Type_free(&uncommitted);
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, 0, 2, MPI_INT, win), MPI_ERR_TYPE);
    EXPECT(MPI_Put(&value, -1, MPI_INT, right, 0, 1, MPI_INT, win), MPI_ERR_COUNT);
    /* Operations rma does not apply: MAXLOC on a type that is no pair, a bitwise op on
     * floats. */
    EXPECT(MPI_Accumulate(&value, 1, MPI_INT, right, 0, 1, MPI_INT, MPI_MAXLOC, win), MPI_ERR_OP);
    float f = 1.0f;
    EXPECT(MPI_Accumulate(&f, 1, MPI_FLOAT, right, 0, 1, MPI_FLOAT, MPI_BAND, win), MPI_ERR_OP);
    /* Compare-and-swap on floats is not MPI's (integer, logical and byte types). */
    float g = 0;
    EXPECT(MPI_Compare_and_swap(&f, &f, &g, MPI_FLOAT, right, 0, win), MPI_ERR_UNSUPPORTED_OPERATION);
    /* Pairs are rma elements, updated whole: MPI_REPLACE and MPI_NO_OP on 16-byte pairs
     * go, and read back what was written. */
    struct { long v; int i; } li = {5 + rank, 1}, li_out = {0, 0}, lis[2] = {{1, 1}, {2, 2}};
    struct { double v; int i; } di = {1.5, 2}, di_out = {0, 0};
    struct { long double v; int i; } ldi = {1.0L, 1};
    long double ld = 1.0L;
    EXPECT(MPI_Accumulate(&li, 1, MPI_LONG_INT, right, 0, 1, MPI_LONG_INT, MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Get_accumulate(&li, 1, MPI_LONG_INT, &li_out, 1, MPI_LONG_INT, right, 0, 1,
                              MPI_LONG_INT, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (li_out.v != 5 + rank || li_out.i != 1) {
        fprintf(stderr, "[%d] MPI_LONG_INT by MPI_REPLACE read back %ld %d\n", rank, li_out.v,
                li_out.i);
        errors++;
    }
    EXPECT(MPI_Fetch_and_op(&di, &di_out, MPI_DOUBLE_INT, right, 0, MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (di_out.i != 1) { /* the MPI_LONG_INT's int, read as a pair of the same place */
        fprintf(stderr, "[%d] MPI_DOUBLE_INT swap fetched index %d\n", rank, di_out.i);
        errors++;
    }
    /* MPI_LONG_DOUBLE_INT: a 32-byte pair, whole; MAXLOC compares the long doubles. */
    struct { long double v; int i; } ldi_big = {2.5L, 9}, ldi_out = {0, 0};
    EXPECT(MPI_Accumulate(&ldi, 1, MPI_LONG_DOUBLE_INT, right, 0, 1, MPI_LONG_DOUBLE_INT,
                          MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(&ldi_big, 1, MPI_LONG_DOUBLE_INT, right, 0, 1, MPI_LONG_DOUBLE_INT,
                          MPI_MAXLOC, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, &ldi_out, MPI_LONG_DOUBLE_INT, right, 0, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (ldi_out.v != 2.5L || ldi_out.i != 9) {
        fprintf(stderr, "[%d] MAXLOC of MPI_LONG_DOUBLE_INT gave (%Lg, %d)\n", rank, ldi_out.v,
                ldi_out.i);
        errors++;
    }
    /* Long double is rma's LongDouble, with C's arithmetic: 1 + 2^-60 exists in 80 bits
     * (64 of mantissa), not in a double. */
    long double tiny = 1.0L / (1ULL << 60), ld_out = 0;
    EXPECT(MPI_Accumulate(&ld, 1, MPI_LONG_DOUBLE, right, 0, 1, MPI_LONG_DOUBLE, MPI_REPLACE,
                          win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(&tiny, 1, MPI_LONG_DOUBLE, right, 0, 1, MPI_LONG_DOUBLE, MPI_SUM, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, &ld_out, MPI_LONG_DOUBLE, right, 0, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (ld_out != 1.0L + tiny || ld_out == 1.0L) {
        fprintf(stderr, "[%d] long double sum read back %.21Lg\n", rank, ld_out);
        errors++;
    }
    /* Complex numbers are rma's ComplexF64, ComplexF32 and ComplexLongDouble: summed
     * and multiplied as complex numbers, whole; MPI_MAX is not defined for them. */
    double dc[2] = {1.0, 2.0}, dc_i[2] = {0.0, 1.0}, dc_out[2] = {0, 0};
    EXPECT(MPI_Accumulate(dc, 1, MPI_C_DOUBLE_COMPLEX, right, 0, 1, MPI_C_DOUBLE_COMPLEX,
                          MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(dc, 1, MPI_C_DOUBLE_COMPLEX, right, 0, 1, MPI_C_DOUBLE_COMPLEX,
                          MPI_SUM, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(dc_i, 1, MPI_C_DOUBLE_COMPLEX, right, 0, 1, MPI_C_DOUBLE_COMPLEX,
                          MPI_PROD, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, dc_out, MPI_C_DOUBLE_COMPLEX, right, 0, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (dc_out[0] != -4.0 || dc_out[1] != 2.0) { /* (1 + 2i) * 2 * i */
        fprintf(stderr, "[%d] MPI_C_DOUBLE_COMPLEX sum and product gave %g%+gi\n", rank,
                dc_out[0], dc_out[1]);
        errors++;
    }
    EXPECT(MPI_Accumulate(dc, 1, MPI_C_DOUBLE_COMPLEX, right, 0, 1, MPI_C_DOUBLE_COMPLEX,
                          MPI_MAX, win),
           MPI_ERR_OP);
    float fc[2] = {3.0f, -1.0f}, fc_out[2] = {0, 0};
    EXPECT(MPI_Accumulate(fc, 1, MPI_C_FLOAT_COMPLEX, right, 0, 1, MPI_C_FLOAT_COMPLEX,
                          MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(fc, 1, MPI_C_FLOAT_COMPLEX, right, 0, 1, MPI_C_FLOAT_COMPLEX,
                          MPI_PROD, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Get_accumulate(fc, 1, MPI_C_FLOAT_COMPLEX, fc_out, 1, MPI_C_FLOAT_COMPLEX, right,
                              0, 1, MPI_C_FLOAT_COMPLEX, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (fc_out[0] != 8.0f || fc_out[1] != -6.0f) { /* (3 - i)^2 */
        fprintf(stderr, "[%d] MPI_C_FLOAT_COMPLEX product gave %g%+gi\n", rank, fc_out[0],
                fc_out[1]);
        errors++;
    }
    /* Long double complex with C's long double arithmetic: (1 + 2^-60 + 2i), plus
     * (2^-60 - i), times i gives -1 + (1 + 2^-59)i, which no pair of doubles holds. */
    long double ldc[2] = {1.0L + tiny, 2.0L}, ldc_sum[2] = {tiny, -1.0L},
                ldc_i[2] = {0.0L, 1.0L}, ldc_out[2] = {0, 0};
    EXPECT(MPI_Accumulate(ldc, 1, MPI_C_LONG_DOUBLE_COMPLEX, right, 0, 1,
                          MPI_C_LONG_DOUBLE_COMPLEX, MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(ldc_sum, 1, MPI_C_LONG_DOUBLE_COMPLEX, right, 0, 1,
                          MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, win),
           MPI_SUCCESS);
    EXPECT(MPI_Accumulate(ldc_i, 1, MPI_C_LONG_DOUBLE_COMPLEX, right, 0, 1,
                          MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, ldc_out, MPI_C_LONG_DOUBLE_COMPLEX, right, 0, MPI_NO_OP, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (ldc_out[0] != -1.0L || ldc_out[1] != 1.0L + 2 * tiny) {
        fprintf(stderr, "[%d] MPI_C_LONG_DOUBLE_COMPLEX sum and product gave %.21Lg%+.21Lgi\n",
                rank, ldc_out[0], ldc_out[1]);
        errors++;
    }
    EXPECT(MPI_Accumulate(ldc, 1, MPI_C_LONG_DOUBLE_COMPLEX, right, 0, 1,
                          MPI_C_LONG_DOUBLE_COMPLEX, MPI_MIN, win),
           MPI_ERR_OP);
    MPI_Datatype pairs;
    MPI_Type_contiguous(2, MPI_LONG_INT, &pairs);
    MPI_Type_commit(&pairs);
    EXPECT(MPI_Accumulate(lis, 1, pairs, right, 0, 1, pairs, MPI_REPLACE, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    /* MINLOC over them, pair by pair. */
    struct { long v; int i; } lmin[2] = {{0, 7}, {2, 1}}, lgot[2];
    EXPECT(MPI_Accumulate(lmin, 1, pairs, right, 0, 1, pairs, MPI_MINLOC, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Get(lgot, 1, pairs, right, 0, 1, pairs, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    /* (1,1) vs (0,7): 0 is smaller; (2,2) vs (2,1): equal values, the smaller index. */
    if (lgot[0].v != 0 || lgot[0].i != 7 || lgot[1].v != 2 || lgot[1].i != 1) {
        fprintf(stderr, "[%d] MINLOC of MPI_LONG_INT pairs gave (%ld,%d) (%ld,%d)\n", rank,
                lgot[0].v, lgot[0].i, lgot[1].v, lgot[1].i);
        errors++;
    }
    MPI_Type_free(&pairs);
    int two_ints[2] = {40 + rank, 41}, got_ints[2] = {0, 0};
    EXPECT(MPI_Accumulate(two_ints, 1, MPI_2INT, right, 8, 1, MPI_2INT, MPI_REPLACE, win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, got_ints, MPI_2INT, right, 8, MPI_NO_OP, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (got_ints[0] != 40 + rank || got_ints[1] != 41) {
        fprintf(stderr, "[%d] MPI_2INT by MPI_REPLACE read back %d %d\n", rank, got_ints[0],
                got_ints[1]);
        errors++;
    }
    /* MAXLOC of MPI_2INT by fetch_and_op: the larger value with its index. */
    int bigger[2] = {50, 3}, old_ints[2] = {0, 0};
    EXPECT(MPI_Fetch_and_op(bigger, old_ints, MPI_2INT, right, 8, MPI_MAXLOC, win), MPI_SUCCESS);
    EXPECT(MPI_Fetch_and_op(NULL, got_ints, MPI_2INT, right, 8, MPI_NO_OP, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (old_ints[0] != 40 + rank || got_ints[0] != 50 || got_ints[1] != 3) {
        fprintf(stderr, "[%d] MAXLOC of MPI_2INT: old %d, now %d %d\n", rank, old_ints[0],
                got_ints[0], got_ints[1]);
        errors++;
    }
    /* A second lock_all while one is open. */
    EXPECT(MPI_Win_lock_all(0, win), MPI_ERR_RMA_SYNC);
    /* Free while the epoch is open: refused, the window stays. */
    EXPECT(MPI_Win_free(&win), MPI_ERR_RMA_SYNC);
    /* Attach on a window that is not dynamic. */
    EXPECT(MPI_Win_attach(win, &value, sizeof value), MPI_ERR_RMA_FLAVOR);

    /* Nothing was lost: a correct put and get still work. */
    value = 100 + rank;
    EXPECT(MPI_Put(&value, 1, MPI_INT, right, 3, 1, MPI_INT, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    EXPECT(MPI_Get(&out, 1, MPI_INT, right, 3, 1, MPI_INT, win), MPI_SUCCESS);
    EXPECT(MPI_Win_flush(right, win), MPI_SUCCESS);
    if (out != 100 + rank) {
        fprintf(stderr, "[%d] get after the errors read %d\n", rank, out);
        errors++;
    }
    EXPECT(MPI_Win_unlock_all(win), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    int left = (rank + size - 1) % size;
    if (base[3] != 100 + left) {
        fprintf(stderr, "[%d] slot 3 holds %d, expected %d\n", rank, base[3], 100 + left);
        errors++;
    }

    /* A handler of the application's. */
    MPI_Errhandler eh;
    EXPECT(MPI_Win_create_errhandler(count_errors, &eh), MPI_SUCCESS);
    EXPECT(MPI_Win_set_errhandler(win, eh), MPI_SUCCESS);
    int rc = MPI_Put(&value, 1, MPI_INT, right, 0, 1, MPI_INT, win);
    if (handler_calls != 1 || handler_code != rc || rc == MPI_SUCCESS) {
        fprintf(stderr, "[%d] handler called %d times with %d (call returned %d)\n", rank,
                handler_calls, handler_code, rc);
        errors++;
    }
    MPI_Errhandler got;
    EXPECT(MPI_Win_get_errhandler(win, &got), MPI_SUCCESS);
    EXPECT(MPI_Win_call_errhandler(win, MPI_ERR_OTHER), MPI_SUCCESS);
    if (handler_calls != 2 || handler_code != MPI_ERR_OTHER) {
        fprintf(stderr, "[%d] MPI_Win_call_errhandler did not call the handler\n", rank);
        errors++;
    }
    EXPECT(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), MPI_SUCCESS);
    MPI_Errhandler_free(&eh);

    EXPECT(MPI_Win_free(&win), MPI_SUCCESS);
    /* A freed window's handle. */
    EXPECT(MPI_Win_fence(0, win), MPI_ERR_WIN);

    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", total);
    }
    MPI_Finalize();
    return total != 0;
}
