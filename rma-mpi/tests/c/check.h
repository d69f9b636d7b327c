/* The checks of librma-mpi's C tests. CHECK(cond, format, ...) counts a failed condition
 * in `errors` and prints the first 20, with the rank in CHECK_RANK (an int expression the
 * test defines before including this); OK(call) checks that an MPI call succeeded. */
#ifndef RMA_MPI_TEST_CHECK_H
#define RMA_MPI_TEST_CHECK_H
#include <stdio.h>

static int errors = 0;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            if (errors < 20) {                                                    \
                fprintf(stderr, "[%d] %s:%d: check failed: %s: ", CHECK_RANK,     \
                        __FILE__, __LINE__, #cond);                               \
                fprintf(stderr, __VA_ARGS__);                                     \
                fprintf(stderr, "\n");                                            \
            }                                                                     \
            errors++;                                                             \
        }                                                                         \
    } while (0)

#define OK(call) CHECK((call) == MPI_SUCCESS, "%s", #call)

#endif
