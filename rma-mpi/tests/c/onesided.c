/* librma-mpi's C test of MPI's one-sided interface: every window flavor (allocate,
 * create, dynamic, allocate_shared) x every synchronization mode (fence, PSCW, lock,
 * lock_all), on MPI_COMM_WORLD and on a split communicator in reversed rank order; put,
 * get, accumulate, get_accumulate, fetch_and_op, compare_and_swap and the request forms,
 * with contiguous, vector, indexed, struct, resized, subarray and darray datatypes on
 * either side; attributes, group, info, name, shared_query, MPI_PROC_NULL. Every result is
 * checked exactly; prints " No Errors" on rank 0 when all hold. Runs on 2 or 4 ranks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 128 /* ints per rank */
static int world_rank;

#define CHECK_RANK world_rank
#include "check.h"

enum flavor { ALLOCATE, CREATE, DYNAMIC, SHARED, FLAVORS };
/* The flavors run: all but SHARED over the network (RMA_BACKEND=ofi), whose ranks share
 * no memory (MPI_Win_allocate_shared is then checked to fail with an error class). */
static int flavors = FLAVORS;
enum sync { FENCE, PSCW, LOCK, LOCK_ALL, SYNCS };
static const char *flavor_name[] = {"allocate", "create", "dynamic", "shared"};
static const char *sync_name[] = {"fence", "pscw", "lock", "lock_all"};

struct win {
    MPI_Win win;
    MPI_Comm comm;
    int rank, size;
    enum flavor flavor;
    int *mem;           /* this rank's N ints */
    MPI_Aint *addrs;    /* dynamic: every rank's region address */
    void *own;          /* memory to free (create, dynamic) */
};

/* Displacement of int `i` at `t`. */
static MPI_Aint D(struct win *w, int t, int i) {
    return w->flavor == DYNAMIC ? w->addrs[t] + (MPI_Aint)i * (MPI_Aint)sizeof(int) : i;
}

static void make(struct win *w, MPI_Comm comm, enum flavor f) {
    w->comm = comm;
    w->flavor = f;
    w->own = NULL;
    w->addrs = NULL;
    MPI_Comm_rank(comm, &w->rank);
    MPI_Comm_size(comm, &w->size);
    MPI_Aint bytes = N * sizeof(int);
    switch (f) {
    case ALLOCATE:
        OK(MPI_Win_allocate(bytes, sizeof(int), MPI_INFO_NULL, comm, &w->mem, &w->win));
        break;
    case SHARED:
        OK(MPI_Win_allocate_shared(bytes, sizeof(int), MPI_INFO_NULL, comm, &w->mem, &w->win));
        break;
    case CREATE:
        w->own = w->mem = malloc(bytes);
        OK(MPI_Win_create(w->mem, bytes, sizeof(int), MPI_INFO_NULL, comm, &w->win));
        break;
    case DYNAMIC: {
        w->own = w->mem = malloc(bytes);
        OK(MPI_Win_create_dynamic(MPI_INFO_NULL, comm, &w->win));
        OK(MPI_Win_attach(w->win, w->mem, bytes));
        MPI_Aint mine;
        MPI_Get_address(w->mem, &mine);
        w->addrs = malloc(w->size * sizeof(MPI_Aint));
        MPI_Allgather(&mine, 1, MPI_AINT, w->addrs, 1, MPI_AINT, comm);
        break;
    }
    default:
        break;
    }
}

static void destroy(struct win *w) {
    if (w->flavor == DYNAMIC) OK(MPI_Win_detach(w->win, w->mem));
    OK(MPI_Win_free(&w->win));
    CHECK(w->win == MPI_WIN_NULL, "the handle is MPI_WIN_NULL after free");
    free(w->own);
    free(w->addrs);
}

/* The calls around each epoch, per sync mode: begin/end of the whole epoch and, for
 * lock mode, around each target. */
static MPI_Group comm_group(MPI_Comm comm) {
    MPI_Group g;
    MPI_Comm_group(comm, &g);
    return g;
}

static void epoch_begin(struct win *w, enum sync s) {
    if (s == FENCE) OK(MPI_Win_fence(0, w->win));
    if (s == PSCW) {
        MPI_Group g = comm_group(w->comm);
        OK(MPI_Win_post(g, 0, w->win));
        OK(MPI_Win_start(g, 0, w->win));
        MPI_Group_free(&g);
    }
    if (s == LOCK_ALL) OK(MPI_Win_lock_all(0, w->win));
}

static void epoch_end(struct win *w, enum sync s) {
    if (s == FENCE) OK(MPI_Win_fence(0, w->win));
    if (s == PSCW) {
        OK(MPI_Win_complete(w->win));
        int flag = 0;
        OK(MPI_Win_test(w->win, &flag));
        if (!flag) OK(MPI_Win_wait(w->win));
    }
    if (s == LOCK_ALL) {
        OK(MPI_Win_sync(w->win));
        OK(MPI_Win_unlock_all(w->win));
    }
    /* Passive target: everyone's ops are done once all passed this barrier. */
    if (s == LOCK || s == LOCK_ALL) MPI_Barrier(w->comm);
}

static void target_begin(struct win *w, enum sync s, int t) {
    if (s == LOCK) OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, w->win));
}
static void target_end(struct win *w, enum sync s, int t) {
    if (s == LOCK) OK(MPI_Win_unlock(t, w->win));
    if (s == LOCK_ALL) OK(MPI_Win_flush(t, w->win));
}

/* Local stores to the window, then whatever makes them public. */
static void init_local(struct win *w, enum sync s) {
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, w->rank, 0, w->win));
    for (int i = 0; i < N; i++) w->mem[i] = -1;
    /* The sums start from 0. */
    w->mem[64] = w->mem[66] = w->mem[100] = w->mem[101] = 0;
    w->mem[112] = 7, w->mem[113] = 8;
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_unlock(w->rank, w->win));
    MPI_Barrier(w->comm);
}

static MPI_Datatype vec_stride2(int count) {
    MPI_Datatype t;
    MPI_Type_vector(count, 1, 2, MPI_INT, &t);
    MPI_Type_commit(&t);
    return t;
}

/* Epoch A: writes. Origin r to target t. */
static void writes(struct win *w, int t) {
    int r = w->rank, n = w->size;
    int four[4], eight[8];
    /* R1 [0,16): contiguous put at 4r. */
    for (int k = 0; k < 4; k++) four[k] = r * 100 + k;
    OK(MPI_Put(four, 4, MPI_INT, t, D(w, t, 4 * r), 4, MPI_INT, w->win));
    /* R2 [16,32): origin vector (every other int) to contiguous. */
    for (int k = 0; k < 8; k++) eight[k] = (k % 2 == 0) ? r * 1000 + k / 2 : -7;
    MPI_Datatype ov = vec_stride2(4);
    OK(MPI_Put(eight, 1, ov, t, D(w, t, 16 + 4 * r), 4, MPI_INT, w->win));
    /* R3 [32,64): contiguous origin to a target vector at 32+8r (slots +0,+2,+4,+6). */
    int r3[4];
    for (int k = 0; k < 4; k++) r3[k] = r * 10 + k;
    OK(MPI_Put(r3, 4, MPI_INT, t, D(w, t, 32 + 8 * r), 1, ov, w->win));
    MPI_Type_free(&ov);
    /* R4 [64,72): accumulates. */
    int one = 1, mine = r, plus = r + 1;
    OK(MPI_Accumulate(&one, 1, MPI_INT, t, D(w, t, 64), 1, MPI_INT, MPI_SUM, w->win));
    OK(MPI_Accumulate(&mine, 1, MPI_INT, t, D(w, t, 65), 1, MPI_INT, MPI_MAX, w->win));
    MPI_Request req;
    OK(MPI_Raccumulate(&plus, 1, MPI_INT, t, D(w, t, 66), 1, MPI_INT, MPI_SUM, w->win, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL, "request freed by MPI_Wait");
    /* R5 [72,80): Rput of r + 5 at 72 + r. */
    int five = r + 5;
    OK(MPI_Rput(&five, 1, MPI_INT, t, D(w, t, 72 + r), 1, MPI_INT, w->win, &req));
    int flag = 0;
    while (!flag) OK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    /* R6 [80,96): a 2x2 subarray of a 4x4 array, by rank 0 only. */
    if (r == 0) {
        int sizes[2] = {4, 4}, subs[2] = {2, 2}, starts[2] = {1, 1};
        MPI_Datatype sub;
        MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub);
        MPI_Type_commit(&sub);
        int vals[4] = {1, 2, 3, 4};
        OK(MPI_Put(vals, 4, MPI_INT, t, D(w, t, 80), 1, sub, w->win));
        MPI_Type_free(&sub);
    }
    /* R7 [96,100): a struct of two ints with a hole, resized to 3 ints, by the last rank:
     * two items of it are four ints. */
    if (r == n - 1) {
        int blocks[2] = {1, 1};
        MPI_Aint displs[2] = {0, 2 * sizeof(int)};
        MPI_Datatype types[2] = {MPI_INT, MPI_INT}, st, rs;
        MPI_Type_create_struct(2, blocks, displs, types, &st);
        MPI_Type_create_resized(st, 0, 3 * sizeof(int), &rs);
        MPI_Type_commit(&rs);
        int src[6] = {11, -9, 12, 13, -9, 14};
        OK(MPI_Put(src, 2, rs, t, D(w, t, 96), 4, MPI_INT, w->win));
        MPI_Type_free(&st);
        MPI_Type_free(&rs);
    }
    /* R8 [104,112): every rank adds 1 to the even slots, a target vector (stride 2). */
    int ones[4] = {1, 1, 1, 1};
    MPI_Datatype tv = vec_stride2(4);
    OK(MPI_Accumulate(ones, 4, MPI_INT, t, D(w, t, 104), 1, tv, MPI_SUM, w->win));
    MPI_Type_free(&tv);
    /* Nothing happens for MPI_PROC_NULL. */
    OK(MPI_Put(four, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, w->win));
}

static void check_writes(struct win *w) {
    int n = w->size, *m = w->mem;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 4; k++) {
            CHECK(m[4 * r + k] == r * 100 + k, "R1 slot %d = %d", 4 * r + k, m[4 * r + k]);
            CHECK(m[16 + 4 * r + k] == r * 1000 + k, "R2 slot %d = %d", 16 + 4 * r + k,
                  m[16 + 4 * r + k]);
            CHECK(m[32 + 8 * r + 2 * k] == r * 10 + k, "R3 slot %d", 32 + 8 * r + 2 * k);
            CHECK(m[32 + 8 * r + 2 * k + 1] == -1, "R3 hole %d", 32 + 8 * r + 2 * k + 1);
        }
    CHECK(m[64] == n, "SUM of ones = %d", m[64]);
    CHECK(m[65] == n - 1, "MAX of ranks = %d", m[65]);
    CHECK(m[66] == n * (n + 1) / 2, "Raccumulate SUM = %d", m[66]);
    for (int r = 0; r < n; r++) CHECK(m[72 + r] == r + 5, "Rput slot %d = %d", 72 + r, m[72 + r]);
    int expect6[16] = {-1, -1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1, -1, -1, -1};
    for (int k = 0; k < 16; k++) CHECK(m[80 + k] == expect6[k], "subarray slot %d = %d", 80 + k, m[80 + k]);
    for (int k = 0; k < 8; k++)
        CHECK(m[104 + k] == (k % 2 == 0 ? -1 + n : -1), "vector accumulate slot %d = %d", 104 + k,
              m[104 + k]);
    int expect7[4] = {11, 12, 13, 14};
    for (int k = 0; k < 4; k++) CHECK(m[96 + k] == expect7[k], "struct slot %d = %d", 96 + k, m[96 + k]);
}

/* Epoch B: reads and atomics, origin r from target t; results checked after the epoch. */
struct results {
    int r1[4], r5, r2[8], r3[4], gacc, fop, fop_noop, cas, rgacc, repl;
    /* get_accumulate's previous values at mis + 1: not aligned for an int. */
    unsigned char mis[12];
};

static void reads(struct win *w, int t, struct results *res, MPI_Request reqs[2]) {
    int r = w->rank;
    OK(MPI_Get(res->r1, 4, MPI_INT, t, D(w, t, 4 * r), 4, MPI_INT, w->win));
    OK(MPI_Rget(&res->r5, 1, MPI_INT, t, D(w, t, 72 + r), 1, MPI_INT, w->win, &reqs[0]));
    for (int k = 0; k < 8; k++) res->r2[k] = -3;
    MPI_Datatype ov = vec_stride2(4);
    OK(MPI_Get(res->r2, 1, ov, t, D(w, t, 16 + 4 * r), 4, MPI_INT, w->win));
    /* Target side indexed: blocks at 0, 2, 4, 6. */
    int blocks[4] = {1, 1, 1, 1}, displs[4] = {0, 2, 4, 6};
    MPI_Datatype ti;
    MPI_Type_indexed(4, blocks, displs, MPI_INT, &ti);
    MPI_Type_commit(&ti);
    OK(MPI_Get(res->r3, 4, MPI_INT, t, D(w, t, 32 + 8 * r), 1, ti, w->win));
    MPI_Type_free(&ti);
    MPI_Type_free(&ov);
    int ten = 10, one = 1, me = r;
    OK(MPI_Get_accumulate(&ten, 1, MPI_INT, &res->gacc, 1, MPI_INT, t, D(w, t, 100), 1, MPI_INT,
                          MPI_SUM, w->win));
    OK(MPI_Fetch_and_op(&one, &res->fop, MPI_INT, t, D(w, t, 101), MPI_SUM, w->win));
    OK(MPI_Fetch_and_op(NULL, &res->fop_noop, MPI_INT, t, D(w, t, 64), MPI_NO_OP, w->win));
    int compare = -1;
    OK(MPI_Compare_and_swap(&me, &compare, &res->cas, MPI_INT, t, D(w, t, 102), w->win));
    OK(MPI_Rget_accumulate(NULL, 0, MPI_INT, &res->rgacc, 1, MPI_INT, t, D(w, t, 65), 1,
                           MPI_INT, MPI_NO_OP, w->win, &reqs[1]));
    OK(MPI_Get_accumulate(&me, 1, MPI_INT, &res->repl, 1, MPI_INT, t, D(w, t, 103), 1, MPI_INT,
                          MPI_REPLACE, w->win));
    int add[2] = {5, 6};
    OK(MPI_Get_accumulate(add, 2, MPI_INT, res->mis + 1, 2, MPI_INT, t, D(w, t, 112), 2, MPI_INT,
                          MPI_SUM, w->win));
}

static void check_reads(struct win *w, struct results *res) {
    int r = w->rank, n = w->size;
    for (int k = 0; k < 4; k++) CHECK(res->r1[k] == r * 100 + k, "get R1[%d] = %d", k, res->r1[k]);
    CHECK(res->r5 == r + 5, "Rget = %d", res->r5);
    for (int k = 0; k < 8; k++)
        CHECK(res->r2[k] == ((k % 2 == 0) ? r * 1000 + k / 2 : -3), "get into vector [%d] = %d", k,
              res->r2[k]);
    for (int k = 0; k < 4; k++) CHECK(res->r3[k] == r * 10 + k, "get indexed [%d] = %d", k, res->r3[k]);
    CHECK(res->gacc >= 0 && res->gacc % 10 == 0 && res->gacc <= 10 * (n - 1), "get_accumulate %d",
          res->gacc);
    CHECK(res->fop >= 0 && res->fop < n, "fetch_and_op %d", res->fop);
    CHECK(res->fop_noop == n, "fetch_and_op NO_OP %d", res->fop_noop);
    CHECK(res->cas == -1 || (res->cas >= 0 && res->cas < n), "compare_and_swap %d", res->cas);
    CHECK(res->rgacc == n - 1, "Rget_accumulate NO_OP %d", res->rgacc);
    CHECK(res->repl == -1 || (res->repl >= 0 && res->repl < n), "REPLACE fetched %d", res->repl);
    int mis[2];
    memcpy(mis, res->mis + 1, sizeof mis);
    CHECK(mis[0] == 7 && mis[1] == 8, "get_accumulate into an unaligned result: %d %d", mis[0],
          mis[1]);
}

/* One flavor x one sync mode, every rank targeting `targets` (all, or its neighbour). */
static void run(MPI_Comm comm, enum flavor f, enum sync s) {
    struct win w;
    make(&w, comm, f);
    init_local(&w, s);
    int n = w.size;
    /* Epoch A: every rank writes to every rank. */
    epoch_begin(&w, s);
    for (int t = 0; t < n; t++) {
        target_begin(&w, s, t);
        writes(&w, t);
        target_end(&w, s, t);
    }
    epoch_end(&w, s);
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_lock(MPI_LOCK_SHARED, w.rank, 0, w.win));
    check_writes(&w);
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_unlock(w.rank, w.win));
    MPI_Barrier(comm);
    /* Epoch B: every rank reads from its right neighbour. */
    int t = (w.rank + 1) % n;
    struct results res;
    MPI_Request reqs[2];
    epoch_begin(&w, s);
    target_begin(&w, s, t);
    reads(&w, t, &res, reqs);
    /* One request completed before the epoch ends, one after. */
    OK(MPI_Wait(&reqs[0], MPI_STATUS_IGNORE));
    target_end(&w, s, t);
    epoch_end(&w, s);
    OK(MPI_Waitall(1, &reqs[1], MPI_STATUSES_IGNORE));
    check_reads(&w, &res);
    /* Exactly one rank found -1 with its compare-and-swap at each target. */
    int got = res.cas == -1, total = 0;
    MPI_Allreduce(&got, &total, 1, MPI_INT, MPI_SUM, comm);
    CHECK(total == n, "compare_and_swap winners: %d of %d targets", total, n);
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_lock(MPI_LOCK_SHARED, w.rank, 0, w.win));
    CHECK(w.mem[100] == 10, "get_accumulate total %d", w.mem[100]);
    CHECK(w.mem[101] == 1, "fetch_and_op total %d", w.mem[101]);
    CHECK(w.mem[103] == (w.rank + n - 1) % n, "REPLACE left %d", w.mem[103]);
    CHECK(w.mem[112] == 12 && w.mem[113] == 14, "get_accumulate into an unaligned result left %d %d",
          w.mem[112], w.mem[113]);
    if (s == LOCK || s == LOCK_ALL) OK(MPI_Win_unlock(w.rank, w.win));
    MPI_Barrier(comm);
    /* Shared memory: the neighbour's window by load. */
    if (f == SHARED) {
        MPI_Aint size;
        int unit;
        int *base;
        OK(MPI_Win_shared_query(w.win, t, &size, &unit, &base));
        CHECK(size == N * (MPI_Aint)sizeof(int) && unit == sizeof(int), "shared_query %ld %d",
              (long)size, unit);
        CHECK(base != NULL && base[64] == n, "neighbour's slot 64 by load: %d", base ? base[64] : -99);
        OK(MPI_Win_shared_query(w.win, MPI_PROC_NULL, &size, &unit, &base));
        CHECK(size == N * (MPI_Aint)sizeof(int), "shared_query(MPI_PROC_NULL) %ld", (long)size);
    }
    /* Any flavor may be queried (MPI-4.1 12.2.3): MPI_Win_allocate's memory is shared on
     * one node under librma-mpi, so the neighbour's slot loads too; over the network
     * (RMA_BACKEND=ofi) it is not, and the query says so (size 0, no base). */
    if (f == ALLOCATE) {
        MPI_Aint size;
        int unit;
        int *base;
        const char *backend = getenv("RMA_BACKEND");
        OK(MPI_Win_shared_query(w.win, t, &size, &unit, &base));
        if (backend && !strcmp(backend, "ofi"))
            CHECK(size == 0 && base == NULL, "shared_query of an allocated window over ofi %ld",
                  (long)size);
        else
            CHECK(size == N * (MPI_Aint)sizeof(int) && base != NULL && base[64] == n,
                  "shared_query of an allocated window %ld: %d", (long)size,
                  base ? base[64] : -99);
    }
    destroy(&w);
}

/* A delete function that counts its calls, sums the values it gets (pointers to ints)
 * and keeps the window and extra state of its last call. */
static int deletes, deleted_sum;
static MPI_Win deleted_win;
static void *deleted_extra;
static int count_delete(MPI_Win win, int keyval, void *value, void *extra) {
    (void)keyval;
    deletes++;
    deleted_sum += *(int *)value;
    deleted_win = win;
    deleted_extra = extra;
    return MPI_SUCCESS;
}

static void attributes(MPI_Comm comm) {
    for (int f = 0; f < flavors; f++) {
        struct win w;
        make(&w, comm, f);
        void *base;
        MPI_Aint *size;
        int *unit, *flavor, *model, flag;
        OK(MPI_Win_get_attr(w.win, MPI_WIN_BASE, &base, &flag));
        CHECK(flag && (f == DYNAMIC ? base == NULL : base == (void *)w.mem), "MPI_WIN_BASE");
        OK(MPI_Win_get_attr(w.win, MPI_WIN_SIZE, &size, &flag));
        CHECK(flag && *size == (f == DYNAMIC ? 0 : N * (MPI_Aint)sizeof(int)), "MPI_WIN_SIZE %ld",
              (long)*size);
        OK(MPI_Win_get_attr(w.win, MPI_WIN_DISP_UNIT, &unit, &flag));
        CHECK(flag && *unit == (f == DYNAMIC ? 1 : (int)sizeof(int)), "MPI_WIN_DISP_UNIT %d", *unit);
        OK(MPI_Win_get_attr(w.win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
        int expect[] = {MPI_WIN_FLAVOR_ALLOCATE, MPI_WIN_FLAVOR_CREATE, MPI_WIN_FLAVOR_DYNAMIC,
                        MPI_WIN_FLAVOR_SHARED};
        CHECK(flag && *flavor == expect[f], "MPI_WIN_CREATE_FLAVOR %d", *flavor);
        OK(MPI_Win_get_attr(w.win, MPI_WIN_MODEL, &model, &flag));
        CHECK(flag && *model == MPI_WIN_UNIFIED, "MPI_WIN_MODEL %d", *model);
        MPI_Group g, cg;
        int cmp;
        OK(MPI_Win_get_group(w.win, &g));
        MPI_Comm_group(comm, &cg);
        MPI_Group_compare(g, cg, &cmp);
        CHECK(cmp == MPI_IDENT, "MPI_Win_get_group is the communicator's group");
        MPI_Group_free(&g);
        MPI_Group_free(&cg);
        MPI_Info info;
        OK(MPI_Win_get_info(w.win, &info));
        char value[64];
        MPI_Info_get(info, "no_locks", sizeof value - 1, value, &flag);
        CHECK(flag && strcmp(value, "false") == 0, "info no_locks");
        MPI_Info_free(&info);
        OK(MPI_Win_set_name(w.win, "rma window"));
        char name[MPI_MAX_OBJECT_NAME];
        int len;
        OK(MPI_Win_get_name(w.win, name, &len));
        CHECK(strcmp(name, "rma window") == 0 && len == 10, "name %s", name);
        /* MPI-4.1: the null handle's name is its own. */
        OK(MPI_Win_get_name(MPI_WIN_NULL, name, &len));
        CHECK(strcmp(name, "MPI_WIN_NULL") == 0 && len == 12, "name of MPI_WIN_NULL: %s", name);
        /* A user attribute and its keyval. */
        int key;
        OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &key, NULL));
        static int value_of_attr = 42;
        OK(MPI_Win_set_attr(w.win, key, &value_of_attr));
        int *got;
        OK(MPI_Win_get_attr(w.win, key, &got, &flag));
        CHECK(flag && got == &value_of_attr, "user attribute");
        OK(MPI_Win_delete_attr(w.win, key));
        OK(MPI_Win_get_attr(w.win, key, &got, &flag));
        CHECK(!flag, "deleted attribute");
        OK(MPI_Win_free_keyval(&key));
        /* A delete function runs when its value is replaced, deleted, and when the window
         * goes (after its keyval was freed), with the window and the extra state. */
        static int values[3] = {1, 10, 100}, extra_state;
        OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, count_delete, &key, &extra_state));
        deletes = deleted_sum = 0;
        OK(MPI_Win_set_attr(w.win, key, &values[0]));
        OK(MPI_Win_set_attr(w.win, key, &values[1]));
        CHECK(deletes == 1 && deleted_sum == 1, "delete on replacement: %d calls, sum %d",
              deletes, deleted_sum);
        CHECK(deleted_win == w.win && deleted_extra == &extra_state,
              "delete got the window and the extra state");
        OK(MPI_Win_delete_attr(w.win, key));
        CHECK(deletes == 2 && deleted_sum == 11, "delete on MPI_Win_delete_attr");
        OK(MPI_Win_set_attr(w.win, key, &values[2]));
        OK(MPI_Win_free_keyval(&key));
        MPI_Win freed = w.win;
        destroy(&w);
        CHECK(deletes == 3 && deleted_sum == 111 && deleted_win == freed,
              "delete on MPI_Win_free: %d calls, sum %d", deletes, deleted_sum);
    }
}

/* Requests of every completion call, mixed with MPI's own (a self send and receive);
 * the flushes; info; and MPI-4's large-count forms where the header has them. */
static void requests_and_flushes(MPI_Comm comm) {
    struct win w;
    make(&w, comm, ALLOCATE);
    init_local(&w, LOCK_ALL);
    int n = w.size, r = w.rank, t = (r + 1) % n;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "accumulate_ordering", "none");
    MPI_Info_set(info, "no_such_hint", "1");
    OK(MPI_Win_set_info(w.win, info));
    MPI_Info_free(&info);
    /* The hint is in force; an unknown key is ignored. */
    OK(MPI_Win_get_info(w.win, &info));
    char value[64];
    int found = 0;
    MPI_Info_get(info, "accumulate_ordering", sizeof value - 1, value, &found);
    CHECK(found && strcmp(value, "none") == 0, "accumulate_ordering after set_info: %s",
          found ? value : "(none)");
    MPI_Info_get(info, "no_such_hint", sizeof value - 1, value, &found);
    CHECK(!found, "an unknown hint is not kept");
    MPI_Info_free(&info);
    OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, w.win));
    int vals[4], got[4] = {0, 0, 0, 0}, ping = 5 + r, pong = -1;
    MPI_Request reqs[6];
    for (int k = 0; k < 4; k++) {
        vals[k] = 1000 * r + k;
        OK(MPI_Rput(&vals[k], 1, MPI_INT, t, D(&w, t, k), 1, MPI_INT, w.win, &reqs[k]));
    }
    MPI_Irecv(&pong, 1, MPI_INT, 0, 77, MPI_COMM_SELF, &reqs[4]);
    MPI_Isend(&ping, 1, MPI_INT, 0, 77, MPI_COMM_SELF, &reqs[5]);
    int flag = 0;
    while (!flag) OK(MPI_Testall(6, reqs, &flag, MPI_STATUSES_IGNORE));
    for (int k = 0; k < 6; k++) CHECK(reqs[k] == MPI_REQUEST_NULL, "Testall freed request %d", k);
    CHECK(pong == 5 + r, "MPI's own request in MPI_Testall: %d", pong);
    OK(MPI_Win_flush_local(t, w.win));
    OK(MPI_Win_flush(t, w.win));
    /* Gets with Waitany, Testany, Waitsome, Testsome, Request_get_status, Request_free. */
    for (int k = 0; k < 4; k++)
        OK(MPI_Rget(&got[k], 1, MPI_INT, t, D(&w, t, k), 1, MPI_INT, w.win, &reqs[k]));
    int index = -1, left = 4;
    OK(MPI_Waitany(4, reqs, &index, MPI_STATUS_IGNORE));
    CHECK(index >= 0 && index < 4 && reqs[index] == MPI_REQUEST_NULL, "Waitany index %d", index);
    left--;
    flag = 0;
    while (!flag) OK(MPI_Testany(4, reqs, &index, &flag, MPI_STATUS_IGNORE));
    if (index != MPI_UNDEFINED) left--;
    int outcount = 0, indices[4];
    while (left > 0) {
        OK(MPI_Waitsome(4, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
        if (outcount == MPI_UNDEFINED) break;
        left -= outcount;
    }
    OK(MPI_Testsome(4, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
    CHECK(outcount == MPI_UNDEFINED, "Testsome on inactive requests: %d", outcount);
    for (int k = 0; k < 4; k++) CHECK(got[k] == 1000 * r + k, "Rget %d = %d", k, got[k]);
    int one = 0;
    OK(MPI_Rget(&one, 1, MPI_INT, t, D(&w, t, 2), 1, MPI_INT, w.win, &reqs[0]));
    flag = 0;
    while (!flag) OK(MPI_Request_get_status(reqs[0], &flag, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&reqs[0]));
    CHECK(reqs[0] == MPI_REQUEST_NULL && one == 1000 * r + 2, "Request_get_status/free %d", one);
    int acc = 3;
    OK(MPI_Accumulate(&acc, 1, MPI_INT, t, D(&w, t, 10), 1, MPI_INT, MPI_SUM, w.win));
    OK(MPI_Win_flush_local_all(w.win));
    OK(MPI_Win_flush_all(w.win));
#if MPI_VERSION >= 4 && defined(MPICH)
    /* MPI-4's large-count forms. */
    MPI_Count four = 4;
    int big[4] = {7, 8, 9, 10}, back[4] = {0, 0, 0, 0};
    OK(MPI_Put_c(big, four, MPI_INT, t, D(&w, t, 20), four, MPI_INT, w.win));
    OK(MPI_Win_flush(t, w.win));
    OK(MPI_Get_c(back, four, MPI_INT, t, D(&w, t, 20), four, MPI_INT, w.win));
    OK(MPI_Accumulate_c(big, (MPI_Count)1, MPI_INT, t, D(&w, t, 11), (MPI_Count)1, MPI_INT,
                        MPI_SUM, w.win));
    OK(MPI_Win_flush(t, w.win));
    for (int k = 0; k < 4; k++) CHECK(back[k] == big[k], "MPI_Get_c %d = %d", k, back[k]);
#endif
    OK(MPI_Win_unlock_all(w.win));
    MPI_Barrier(comm);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, w.win));
    CHECK(w.mem[10] == -1 + 3, "accumulate before flush_all: %d", w.mem[10]);
#if MPI_VERSION >= 4 && defined(MPICH)
    CHECK(w.mem[11] == -1 + 7, "MPI_Accumulate_c: %d", w.mem[11]);
#endif
    OK(MPI_Win_unlock(r, w.win));
    destroy(&w);
#if MPI_VERSION >= 4 && defined(MPICH)
    MPI_Win win;
    int *base;
    OK(MPI_Win_allocate_c(64, 8, MPI_INFO_NULL, comm, &base, &win));
    OK(MPI_Win_free(&win));
    if (flavors > SHARED) {
        OK(MPI_Win_allocate_shared_c(64, 8, MPI_INFO_NULL, comm, &base, &win));
        MPI_Aint size, unit;
        int *peer;
        OK(MPI_Win_shared_query_c(win, t, &size, &unit, &peer));
        CHECK(size == 64 && unit == 8 && peer != NULL, "MPI_Win_shared_query_c %ld %ld",
              (long)size, (long)unit);
        OK(MPI_Win_free(&win));
    }
    int mem[4];
    OK(MPI_Win_create_c(mem, sizeof mem, 4, MPI_INFO_NULL, comm, &win));
    OK(MPI_Win_free(&win));
#endif
}

/* A dynamic window whose rank attaches one array in two halves, side by side: a put,
 * an accumulate and a get of the right neighbour's array run across the boundary (MPI
 * lets an op span adjacent attachments), under lock and in a fence epoch. */
static void adjacent_regions(MPI_Comm comm) {
    enum { LONGS = 64, HALF = LONGS / 2, LEN = 16 };
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long *mem = calloc(LONGS, sizeof(long));
    MPI_Win win;
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, comm, &win));
    OK(MPI_Win_attach(win, mem, HALF * sizeof(long)));
    OK(MPI_Win_attach(win, mem + HALF, HALF * sizeof(long)));
    MPI_Aint mine, *addrs = malloc(size * sizeof(MPI_Aint));
    MPI_Get_address(mem, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, comm);
    /* LEN longs from HALF - LEN/2: half in each attachment. */
    MPI_Aint at = addrs[right] + (HALF - LEN / 2) * sizeof(long);
    long out[LEN], ones[LEN], back[LEN];
    for (int i = 0; i < LEN; i++) {
        out[i] = 1000 * rank + i;
        ones[i] = 1;
        back[i] = -1;
    }
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
    OK(MPI_Put(out, LEN, MPI_LONG, right, at, LEN, MPI_LONG, win));
    OK(MPI_Win_flush(right, win));
    OK(MPI_Accumulate(ones, LEN, MPI_LONG, right, at, LEN, MPI_LONG, MPI_SUM, win));
    OK(MPI_Win_flush(right, win));
    OK(MPI_Get(back, LEN, MPI_LONG, right, at, LEN, MPI_LONG, win));
    OK(MPI_Win_unlock(right, win));
    for (int i = 0; i < LEN; i++)
        CHECK(back[i] == 1000 * rank + i + 1, "across attachments: element %d is %ld", i, back[i]);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Accumulate(ones, LEN, MPI_LONG, right, at, LEN, MPI_LONG, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < LEN; i++)
        CHECK(mem[HALF - LEN / 2 + i] == 1000 * left + i + 2,
              "across attachments, from the left: element %d is %ld", i, mem[HALF - LEN / 2 + i]);
    CHECK(mem[HALF - LEN / 2 - 1] == 0 && mem[HALF + LEN / 2] == 0, "outside the op untouched");
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_detach(win, mem));
    OK(MPI_Win_detach(win, mem + HALF));
    OK(MPI_Win_free(&win));
    free(addrs);
    free(mem);
}

/* Large contiguous gets (64 KiB to 512 KiB) into the application's buffers, many under
 * way at once: twelve MPI_Get and an MPI_Rget in a lock_all epoch (the request waited
 * before the flush, the gets read after it), then thirteen MPI_Get in a fence epoch. Over the
 * network librma-mpi hands each buffer to the get, read straight into, all in flight. */
static void large_gets(MPI_Comm comm) {
    enum { GETS = 12, WIN_LONGS = 1 << 19 };
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int right = (rank + 1) % size;
    long *base;
    MPI_Win win;
    OK(MPI_Win_allocate(WIN_LONGS * sizeof(long), sizeof(long), MPI_INFO_NULL, comm, &base, &win));
    for (long i = 0; i < WIN_LONGS; i++) base[i] = ((long)rank << 40) | (i * 7);
    MPI_Barrier(comm);
    long *out[GETS + 1];
    int len[GETS + 1];
    MPI_Aint at[GETS + 1];
    for (int k = 0; k <= GETS; k++) {
        len[k] = 8192 + k * 3001; /* 64 KiB to about 350 KiB */
        if (k == GETS) len[k] = 65536; /* the request's: 512 KiB */
        at[k] = (MPI_Aint)((k * 40009) % (WIN_LONGS - 70000));
        out[k] = malloc(len[k] * sizeof(long));
    }
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int k = 0; k <= GETS; k++)
            for (int i = 0; i < len[k]; i++) out[k][i] = -1;
        MPI_Request req;
        if (epoch == 0) OK(MPI_Win_lock_all(0, win));
        else OK(MPI_Win_fence(0, win));
        for (int k = 0; k < GETS; k++)
            OK(MPI_Get(out[k], len[k], MPI_LONG, right, at[k], len[k], MPI_LONG, win));
        if (epoch == 0) { /* request-based ops: passive-target epochs only */
            OK(MPI_Rget(out[GETS], len[GETS], MPI_LONG, right, at[GETS], len[GETS], MPI_LONG, win,
                        &req));
            OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Get(out[GETS], len[GETS], MPI_LONG, right, at[GETS], len[GETS], MPI_LONG, win));
        }
        if (epoch == 0) {
            OK(MPI_Win_flush(right, win));
        } else {
            OK(MPI_Win_fence(0, win));
        }
        for (int k = 0; k <= GETS; k++) {
            int wrong = -1;
            for (int i = 0; i < len[k] && wrong < 0; i++)
                if (out[k][i] != (((long)right << 40) | ((at[k] + i) * 7))) wrong = i;
            CHECK(wrong < 0, "large get %d of %d longs (epoch %d): element %d is %ld", k, len[k],
                  epoch, wrong, wrong < 0 ? 0 : out[k][wrong]);
        }
        if (epoch == 0) OK(MPI_Win_unlock_all(win));
        else OK(MPI_Win_fence(0, win));
    }
    for (int k = 0; k <= GETS; k++) free(out[k]);
    OK(MPI_Win_free(&win));
}

/* Large contiguous puts (64 KiB to 512 KiB) from the application's buffers, many under
 * way at once: twelve MPI_Put and an MPI_Rput in a lock_all epoch (the request waited
 * before the flush), then thirteen MPI_Put in a fence epoch; each epoch's values are new,
 * and the target checks every element after it. Over the network librma-mpi hands each
 * buffer to its put, written straight from it, all in flight. */
static void large_puts(MPI_Comm comm) {
    enum { PUTS = 12, WIN_LONGS = 1 << 19 };
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long *base;
    MPI_Win win;
    OK(MPI_Win_allocate(WIN_LONGS * sizeof(long), sizeof(long), MPI_INFO_NULL, comm, &base, &win));
    for (long i = 0; i < WIN_LONGS; i++) base[i] = -1;
    long *src[PUTS + 1];
    int len[PUTS + 1];
    MPI_Aint at[PUTS + 1];
    for (int k = 0; k <= PUTS; k++) {
        len[k] = k == PUTS ? 65536 : 8192 + k * 3001;
        at[k] = k == 0 ? 0 : at[k - 1] + len[k - 1]; /* side by side, no overlap */
        src[k] = malloc(len[k] * sizeof(long));
    }
    MPI_Barrier(comm);
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int k = 0; k <= PUTS; k++)
            for (int i = 0; i < len[k]; i++)
                src[k][i] = ((long)rank << 40) | ((long)epoch << 36) | ((at[k] + i) * 3);
        MPI_Request req;
        if (epoch == 0) OK(MPI_Win_lock_all(0, win));
        else OK(MPI_Win_fence(0, win));
        for (int k = 0; k < PUTS; k++)
            OK(MPI_Put(src[k], len[k], MPI_LONG, right, at[k], len[k], MPI_LONG, win));
        if (epoch == 0) { /* request-based ops: passive-target epochs only */
            OK(MPI_Rput(src[PUTS], len[PUTS], MPI_LONG, right, at[PUTS], len[PUTS], MPI_LONG, win,
                        &req));
            OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
            OK(MPI_Win_flush(right, win));
            OK(MPI_Win_unlock_all(win));
            MPI_Barrier(comm);
        } else {
            OK(MPI_Put(src[PUTS], len[PUTS], MPI_LONG, right, at[PUTS], len[PUTS], MPI_LONG, win));
            OK(MPI_Win_fence(0, win));
        }
        for (int k = 0; k <= PUTS; k++) {
            int wrong = -1;
            for (int i = 0; i < len[k] && wrong < 0; i++)
                if (base[at[k] + i] != (((long)left << 40) | ((long)epoch << 36) | ((at[k] + i) * 3)))
                    wrong = i;
            CHECK(wrong < 0, "large put %d of %d longs (epoch %d): element %d is %ld", k, len[k],
                  epoch, wrong, wrong < 0 ? 0 : base[at[k] + wrong]);
        }
        if (epoch == 1) OK(MPI_Win_fence(0, win));
        MPI_Barrier(comm);
    }
    for (int k = 0; k <= PUTS; k++) free(src[k]);
    OK(MPI_Win_free(&win));
}

/* Darray datatypes (MPI_Type_create_darray) at the target: a 7x9 array of ints over a
 * 2 x size/2 process grid, block-cyclic, in C and in Fortran order. Every rank puts its
 * part into every rank's copy, accumulates 1 onto it and reads it back; MPI's own
 * MPI_Pack of the same type says which elements each part holds. */
static void distributed_array(MPI_Comm comm) {
    enum { ROWS = 7, COLS = 9, ALL = ROWS * COLS };
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size % 2) return;
    int gsizes[2] = {ROWS, COLS}, psizes[2] = {2, size / 2};
    int orders[2] = {MPI_ORDER_C, MPI_ORDER_FORTRAN};
    for (int o = 0; o < 2; o++) {
        int distribs[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK};
        int dargs[2] = {2, MPI_DISTRIBUTE_DFLT_DARG};
        if (o == 1) {
            distribs[0] = MPI_DISTRIBUTE_BLOCK;
            distribs[1] = MPI_DISTRIBUTE_CYCLIC;
            dargs[0] = MPI_DISTRIBUTE_DFLT_DARG;
            dargs[1] = MPI_DISTRIBUTE_DFLT_DARG;
        }
        MPI_Datatype part[16];
        int count[16];
        /* index[r][i]: the array element of the i-th int of rank r's part (MPI_Pack). */
        int index[16][ALL], iota[ALL];
        for (int k = 0; k < ALL; k++) iota[k] = k;
        for (int r = 0; r < size && r < 16; r++) {
            OK(MPI_Type_create_darray(size, r, 2, gsizes, distribs, dargs, psizes, orders[o],
                                      MPI_INT, &part[r]));
            OK(MPI_Type_commit(&part[r]));
            int bytes, pos = 0;
            MPI_Type_size(part[r], &bytes);
            count[r] = bytes / (int)sizeof(int);
            OK(MPI_Pack(iota, 1, part[r], index[r], sizeof(index[r]), &pos, comm));
        }
        int *mem;
        MPI_Win win;
        OK(MPI_Win_allocate(ALL * sizeof(int), sizeof(int), MPI_INFO_NULL, comm, &mem, &win));
        for (int k = 0; k < ALL; k++) mem[k] = -1;
        int mine[ALL], ones[ALL], back[ALL];
        for (int i = 0; i < count[rank]; i++) {
            mine[i] = 1000 * (rank + 1) + index[rank][i];
            ones[i] = 1;
            back[i] = -1;
        }
        OK(MPI_Win_fence(0, win));
        for (int t = 0; t < size; t++)
            OK(MPI_Put(mine, count[rank], MPI_INT, t, 0, 1, part[rank], win));
        OK(MPI_Win_fence(0, win));
        for (int t = 0; t < size; t++)
            OK(MPI_Accumulate(ones, count[rank], MPI_INT, t, 0, 1, part[rank], MPI_SUM, win));
        OK(MPI_Win_fence(0, win));
        int right = (rank + 1) % size, seen[ALL] = {0};
        OK(MPI_Get(back, count[rank], MPI_INT, right, 0, 1, part[rank], win));
        OK(MPI_Win_fence(0, win));
        for (int r = 0; r < size; r++)
            for (int i = 0; i < count[r]; i++) {
                int k = index[r][i];
                CHECK(k >= 0 && k < ALL && mem[k] == 1000 * (r + 1) + k + 1,
                      "darray (order %d): element %d of rank %d's part is %d", o, k, r,
                      k >= 0 && k < ALL ? mem[k] : -1);
                if (k >= 0 && k < ALL) seen[k]++;
            }
        for (int k = 0; k < ALL; k++) CHECK(seen[k] == 1, "darray: element %d in %d parts", k, seen[k]);
        for (int i = 0; i < count[rank]; i++)
            CHECK(back[i] == 1000 * (rank + 1) + index[rank][i] + 1,
                  "darray (order %d): got %d at %d", o, back[i], i);
        OK(MPI_Win_free(&win));
        for (int r = 0; r < size && r < 16; r++) MPI_Type_free(&part[r]);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    /* With the argument "rma": MPI_Put must be librma-mpi's (preloaded or linked first). */
    if (argc > 1 && strcmp(argv[1], "rma") == 0) {
        Dl_info where;
        if (!dladdr((void *)MPI_Put, &where) || !where.dli_fname ||
            !strstr(where.dli_fname, "librma_mpi")) {
            fprintf(stderr, "[%d] MPI_Put is not librma-mpi's but %s's\n", world_rank,
                    where.dli_fname ? where.dli_fname : "?");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* And the very library the test built (not a stale copy on a library path). */
        char want[4096], got[4096];
        if (argc > 2 && (!realpath(argv[2], want) || !realpath(where.dli_fname, got) ||
                         strcmp(want, got) != 0)) {
            fprintf(stderr, "[%d] MPI_Put is from %s, not %s\n", world_rank, where.dli_fname, argv[2]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
#ifdef MPI_ABI_VERSION
    /* Built with mpicc_abi: the MPI-5 standard ABI underneath (libmpi_abi), and
     * librma-mpi built for it. */
    {
        int major = -1, minor = -1;
        if (MPI_Abi_get_version(&major, &minor) != MPI_SUCCESS || major < 1) {
            fprintf(stderr, "[%d] MPI_Abi_get_version: %d.%d\n", world_rank, major, minor);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (world_rank == 0) printf("MPI ABI %d.%d\n", major, minor);
    }
#endif
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *backend = getenv("RMA_BACKEND");
    if (backend && !strcmp(backend, "ofi")) {
        flavors = SHARED;
        void *base = NULL;
        MPI_Win win;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc = MPI_Win_allocate_shared(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        int class = -1;
        MPI_Error_class(rc, &class);
        CHECK(rc != MPI_SUCCESS && class != MPI_SUCCESS,
              "MPI_Win_allocate_shared over the network: %d (class %d)", rc, class);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    /* The World, then halves (or, on 2 ranks, the whole) in reversed order. */
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, size >= 4 ? world_rank % 2 : 0, size - world_rank, &split);
    MPI_Comm comms[2] = {MPI_COMM_WORLD, split};
    const char *comm_name[2] = {"world", "split"};
    for (int c = 0; c < 2; c++)
        for (int f = 0; f < flavors; f++)
            for (int s = 0; s < SYNCS; s++) {
                int before = errors;
                run(comms[c], f, s);
                if (errors != before && world_rank == 0)
                    fprintf(stderr, "^ in %s %s %s\n", comm_name[c], flavor_name[f], sync_name[s]);
            }
    attributes(MPI_COMM_WORLD);
    requests_and_flushes(MPI_COMM_WORLD);
    requests_and_flushes(split);
    adjacent_regions(MPI_COMM_WORLD);
    large_gets(MPI_COMM_WORLD);
    large_puts(MPI_COMM_WORLD);
    distributed_array(MPI_COMM_WORLD);
    MPI_Comm_free(&split);
    int total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0) {
        if (total == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", total);
    }
    MPI_Finalize();
    return total != 0;
}
