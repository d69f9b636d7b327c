/* The parts of librma-mpi that depend on the MPI library's ABI, compiled with that
 * library's mpicc: its handle types (ints in MPICH, pointers in Open MPI), its predefined
 * objects (compile-time ints in MPICH, addresses of globals in Open MPI), and the
 * handles librma-mpi makes for its own windows and requests. Everything here is a plain
 * function of plain values; the logic is in Rust. */
#include <mpi.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* ---- rma-mpi's own handles ------------------------------------------------------ */
/* They must never equal a handle of the MPI library, and must be recognised as ours in
 * calls that take both (MPI_Wait on a request). MPICH's handles carry their kind in bits
 * 31..30 (never 00 for a valid object): ours have them 00. Open MPI's handles, and the
 * MPI-5 standard ABI's (mpi_abi.h, MPI_ABI_VERSION: predefined ones small integers below
 * 0x1000, others the implementation's pointers), are pointers: ours point into a
 * reserved array of ours (never touched, so it costs address space only). */
#define RMAMPI_WINDOWS (1 << 16)
#define RMAMPI_REQUESTS (1 << 22)

#if defined(OPEN_MPI) || defined(MPI_ABI_VERSION)
static char window_space[RMAMPI_WINDOWS];
static char request_space[RMAMPI_REQUESTS];

MPI_Win rmampi_win_handle(int index) { return (MPI_Win)(void *)&window_space[index]; }
int rmampi_win_index(MPI_Win win) {
    uintptr_t p = (uintptr_t)(void *)win, base = (uintptr_t)window_space;
    return p >= base && p < base + RMAMPI_WINDOWS ? (int)(p - base) : -1;
}
MPI_Request rmampi_request_handle(int index) {
    return (MPI_Request)(void *)&request_space[index];
}
int rmampi_request_index(MPI_Request req) {
    uintptr_t p = (uintptr_t)(void *)req, base = (uintptr_t)request_space;
    return p >= base && p < base + RMAMPI_REQUESTS ? (int)(p - base) : -1;
}
#else
#define WINDOW_BASE 0x13000000
#define REQUEST_BASE 0x00400000
MPI_Win rmampi_win_handle(int index) { return (MPI_Win)(WINDOW_BASE + index); }
int rmampi_win_index(MPI_Win win) {
    int v = (int)win;
    return v >= WINDOW_BASE && v < WINDOW_BASE + RMAMPI_WINDOWS ? v - WINDOW_BASE : -1;
}
MPI_Request rmampi_request_handle(int index) { return (MPI_Request)(REQUEST_BASE + index); }
int rmampi_request_index(MPI_Request req) {
    int v = (int)req;
    return v >= REQUEST_BASE && v < REQUEST_BASE + RMAMPI_REQUESTS ? v - REQUEST_BASE : -1;
}
#endif
int rmampi_max_requests(void) { return RMAMPI_REQUESTS; }

/* ---- predefined objects ----------------------------------------------------------- */
/* Element codes of rma (rma_core::DataType): 1 u8, 2 u16, 3 u32, 4 u64, 5 i8, 6 i16,
 * 7 i32, 8 i64, 9 f32, 10 f64, the (value, int) pairs of MINLOC/MAXLOC: 11 float,
 * 12 double, 13 64-bit integer, 14 int, 15 short, 17 long double; 16 long double (x86-64's
 * 80 bits in 16 bytes); complex numbers 18 of floats, 19 of doubles, 20 of long doubles; 0: no
 * rma element (bytes only: put
 * and get work, an accumulate other than REPLACE/NO_OP is unsupported); -1: not a
 * predefined type. */
static int code_of_int(size_t size, int is_signed) {
    switch (size) {
    case 1: return is_signed ? 5 : 1;
    case 2: return is_signed ? 6 : 2;
    case 4: return is_signed ? 7 : 3;
    case 8: return is_signed ? 8 : 4;
    default: return 0;
    }
}
#define SIGNED_INT(ctype) code_of_int(sizeof(ctype), 1)
#define UNSIGNED_INT(ctype) code_of_int(sizeof(ctype), 0)

int rmampi_predefined_code(MPI_Datatype t) {
    if (t == MPI_CHAR) return code_of_int(1, (char)-1 < 1);
    if (t == MPI_SIGNED_CHAR) return 5;
    if (t == MPI_UNSIGNED_CHAR || t == MPI_BYTE || t == MPI_PACKED) return 1;
    if (t == MPI_SHORT) return SIGNED_INT(short);
    if (t == MPI_UNSIGNED_SHORT) return UNSIGNED_INT(unsigned short);
    if (t == MPI_INT) return SIGNED_INT(int);
    if (t == MPI_UNSIGNED) return UNSIGNED_INT(unsigned);
    if (t == MPI_LONG) return SIGNED_INT(long);
    if (t == MPI_UNSIGNED_LONG) return UNSIGNED_INT(unsigned long);
    if (t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT) return SIGNED_INT(long long);
    if (t == MPI_UNSIGNED_LONG_LONG) return UNSIGNED_INT(unsigned long long);
    if (t == MPI_INT8_T) return 5;
    if (t == MPI_INT16_T) return 6;
    if (t == MPI_INT32_T) return 7;
    if (t == MPI_INT64_T) return 8;
    if (t == MPI_UINT8_T) return 1;
    if (t == MPI_UINT16_T) return 2;
    if (t == MPI_UINT32_T) return 3;
    if (t == MPI_UINT64_T) return 4;
    if (t == MPI_AINT) return code_of_int(sizeof(MPI_Aint), 1);
    if (t == MPI_OFFSET) return code_of_int(sizeof(MPI_Offset), 1);
    if (t == MPI_COUNT) return code_of_int(sizeof(MPI_Count), 1);
    if (t == MPI_C_BOOL) return code_of_int(sizeof(_Bool), 0);
    if (t == MPI_WCHAR) return code_of_int(sizeof(wchar_t), (wchar_t)-1 < 1);
    if (t == MPI_FLOAT) return 9;
    if (t == MPI_DOUBLE) return 10;
    if (t == MPI_INTEGER) {
        /* Fortran's INTEGER as the library was built (the standard ABI has no MPI_Fint). */
        int size = 0;
        PMPI_Type_size(MPI_INTEGER, &size);
        return code_of_int((size_t)size, 1);
    }
    if (t == MPI_REAL) return 9;
    if (t == MPI_DOUBLE_PRECISION) return 10;
    /* x86-64's long double: 80 bits in 16 bytes, rma's LongDouble (arithmetic below). */
    if (t == MPI_LONG_DOUBLE) return sizeof(long double) == 16 ? 16 : 0;
    /* Complex numbers: rma's ComplexF32 and ComplexF64 (two floats, two doubles). */
    if (t == MPI_C_FLOAT_COMPLEX) return 18;
    if (t == MPI_C_DOUBLE_COMPLEX) return 19;
    if (t == MPI_COMPLEX || t == MPI_DOUBLE_COMPLEX) {
        /* Fortran's, two REALs or two DOUBLE PRECISIONs as the library was built. */
        int size = 0;
        PMPI_Type_size(t, &size);
        return size == 8 ? 18 : size == 16 ? 19 : 0;
    }
    /* Two of x86-64's long doubles: rma's ComplexLongDouble (the same arithmetic). */
    if (t == MPI_C_LONG_DOUBLE_COMPLEX) return sizeof(long double) == 16 ? 20 : 0;
    if (t == MPI_CHARACTER || t == MPI_LOGICAL) return 0;
    /* The pair types of MINLOC and MAXLOC: rma's pair elements (C's struct layout). */
    if (t == MPI_FLOAT_INT) return 11;
    if (t == MPI_DOUBLE_INT) return 12;
    if (t == MPI_LONG_INT) return sizeof(long) == 8 ? 13 : 14;
    if (t == MPI_2INT) return 14;
    if (t == MPI_SHORT_INT) return 15;
    if (t == MPI_LONG_DOUBLE_INT) return sizeof(long double) == 16 ? 17 : 0;
    return -1;
}

int rmampi_is_datatype_null(MPI_Datatype t) { return t == MPI_DATATYPE_NULL; }
int rmampi_is_win_null(MPI_Win w) { return w == MPI_WIN_NULL; }

/* The pair types of MINLOC and MAXLOC (a value and an int, C struct layout). */
int rmampi_is_pair(MPI_Datatype t) {
    return t == MPI_FLOAT_INT || t == MPI_DOUBLE_INT || t == MPI_LONG_INT || t == MPI_2INT ||
           t == MPI_SHORT_INT || t == MPI_LONG_DOUBLE_INT;
}

/* Reduction operations as rma's AccOp codes: 1 sum, 2 prod, 3 min, 4 max, 5 band, 6 bor,
 * 7 bxor, 8 land, 9 lor, 10 lxor, 11 replace, 12 no_op, 13 minloc, 14 maxloc; 0: not one
 * rma applies (user-defined). */
int rmampi_op_code(MPI_Op op) {
    if (op == MPI_SUM) return 1;
    if (op == MPI_PROD) return 2;
    if (op == MPI_MIN) return 3;
    if (op == MPI_MAX) return 4;
    if (op == MPI_BAND) return 5;
    if (op == MPI_BOR) return 6;
    if (op == MPI_BXOR) return 7;
    if (op == MPI_LAND) return 8;
    if (op == MPI_LOR) return 9;
    if (op == MPI_LXOR) return 10;
    if (op == MPI_REPLACE) return 11;
    if (op == MPI_NO_OP) return 12;
    if (op == MPI_MINLOC) return 13;
    if (op == MPI_MAXLOC) return 14;
    return 0;
}

/* Predefined handles and constants the Rust side needs as values. */
MPI_Comm rmampi_comm_world(void) { return MPI_COMM_WORLD; }
MPI_Comm rmampi_comm_self(void) { return MPI_COMM_SELF; }
MPI_Group rmampi_group_null(void) { return MPI_GROUP_NULL; }
MPI_Win rmampi_win_null(void) { return MPI_WIN_NULL; }
MPI_Info rmampi_info_null(void) { return MPI_INFO_NULL; }
MPI_Request rmampi_request_null(void) { return MPI_REQUEST_NULL; }
MPI_Errhandler rmampi_errors_are_fatal(void) { return MPI_ERRORS_ARE_FATAL; }
MPI_Errhandler rmampi_errors_return(void) { return MPI_ERRORS_RETURN; }
MPI_Errhandler rmampi_errors_abort(void) {
#ifdef MPI_ERRORS_ABORT
    return MPI_ERRORS_ABORT;
#else
    return MPI_ERRORS_ARE_FATAL;
#endif
}
MPI_Errhandler rmampi_errhandler_null(void) { return MPI_ERRHANDLER_NULL; }
MPI_Status *rmampi_status_ignore(void) { return MPI_STATUS_IGNORE; }
MPI_Status *rmampi_statuses_ignore(void) { return MPI_STATUSES_IGNORE; }

/* An empty status (MPI_Wait on a completed RMA request): source MPI_ANY_SOURCE, tag
 * MPI_ANY_TAG, error MPI_SUCCESS, count 0; the element count goes through MPI's own
 * setter, whatever the status layout. */
void rmampi_empty_status(MPI_Status *s) {
    if (s == MPI_STATUS_IGNORE) return;
    s->MPI_SOURCE = MPI_ANY_SOURCE;
    s->MPI_TAG = MPI_ANY_TAG;
    s->MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements(s, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(s, 0);
}
MPI_Status *rmampi_status_at(MPI_Status *array, int i) {
    return array == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &array[i];
}

/* ---- int constants ------------------------------------------------------------- */
/* The int constants of mpi.h librma-mpi uses, as data (MPICH defines some as enums,
 * some as macros with casts, which bindings do not all carry). Field order is
 * sys.rs's Constants. */
struct rmampi_constants {
    int c_MPI_COMBINER_CONTIGUOUS;
    int c_MPI_COMBINER_DARRAY;
    int c_MPI_COMBINER_DUP;
    int c_MPI_COMBINER_HINDEXED;
    int c_MPI_COMBINER_HINDEXED_BLOCK;
    int c_MPI_COMBINER_HVECTOR;
    int c_MPI_COMBINER_INDEXED;
    int c_MPI_COMBINER_INDEXED_BLOCK;
    int c_MPI_COMBINER_NAMED;
    int c_MPI_COMBINER_RESIZED;
    int c_MPI_COMBINER_STRUCT;
    int c_MPI_COMBINER_SUBARRAY;
    int c_MPI_COMBINER_VECTOR;
    int c_MPI_DISTRIBUTE_BLOCK;
    int c_MPI_DISTRIBUTE_CYCLIC;
    int c_MPI_DISTRIBUTE_DFLT_DARG;
    int c_MPI_DISTRIBUTE_NONE;
    int c_MPI_ERR_ARG;
    int c_MPI_ERR_ASSERT;
    int c_MPI_ERR_COMM;
    int c_MPI_ERR_COUNT;
    int c_MPI_ERR_DISP;
    int c_MPI_ERR_GROUP;
    int c_MPI_ERR_INTERN;
    int c_MPI_ERR_KEYVAL;
    int c_MPI_ERR_LOCKTYPE;
    int c_MPI_ERR_NO_MEM;
    int c_MPI_ERR_OP;
    int c_MPI_ERR_OTHER;
    int c_MPI_ERR_RANK;
    int c_MPI_ERR_REQUEST;
    int c_MPI_ERR_RMA_ATTACH;
    int c_MPI_ERR_RMA_FLAVOR;
    int c_MPI_ERR_RMA_RANGE;
    int c_MPI_ERR_RMA_SYNC;
    int c_MPI_ERR_SIZE;
    int c_MPI_ERR_TYPE;
    int c_MPI_ERR_UNSUPPORTED_OPERATION;
    int c_MPI_ERR_WIN;
    int c_MPI_KEYVAL_INVALID;
    int c_MPI_LOCK_EXCLUSIVE;
    int c_MPI_LOCK_SHARED;
    int c_MPI_MAX_OBJECT_NAME;
    int c_MPI_MODE_NOCHECK;
    int c_MPI_MODE_NOPRECEDE;
    int c_MPI_MODE_NOPUT;
    int c_MPI_MODE_NOSTORE;
    int c_MPI_MODE_NOSUCCEED;
    int c_MPI_ORDER_C;
    int c_MPI_PROC_NULL;
    int c_MPI_UNDEFINED;
    int c_MPI_WIN_BASE;
    int c_MPI_WIN_CREATE_FLAVOR;
    int c_MPI_WIN_DISP_UNIT;
    int c_MPI_WIN_FLAVOR_ALLOCATE;
    int c_MPI_WIN_FLAVOR_CREATE;
    int c_MPI_WIN_FLAVOR_DYNAMIC;
    int c_MPI_WIN_FLAVOR_SHARED;
    int c_MPI_WIN_MODEL;
    int c_MPI_WIN_SIZE;
    int c_MPI_WIN_UNIFIED;
};
const struct rmampi_constants rmampi_constants = {
    MPI_COMBINER_CONTIGUOUS,
    MPI_COMBINER_DARRAY,
    MPI_COMBINER_DUP,
    MPI_COMBINER_HINDEXED,
    MPI_COMBINER_HINDEXED_BLOCK,
    MPI_COMBINER_HVECTOR,
    MPI_COMBINER_INDEXED,
    MPI_COMBINER_INDEXED_BLOCK,
    MPI_COMBINER_NAMED,
    MPI_COMBINER_RESIZED,
    MPI_COMBINER_STRUCT,
    MPI_COMBINER_SUBARRAY,
    MPI_COMBINER_VECTOR,
    MPI_DISTRIBUTE_BLOCK,
    MPI_DISTRIBUTE_CYCLIC,
    MPI_DISTRIBUTE_DFLT_DARG,
    MPI_DISTRIBUTE_NONE,
    MPI_ERR_ARG,
    MPI_ERR_ASSERT,
    MPI_ERR_COMM,
    MPI_ERR_COUNT,
    MPI_ERR_DISP,
    MPI_ERR_GROUP,
    MPI_ERR_INTERN,
    MPI_ERR_KEYVAL,
    MPI_ERR_LOCKTYPE,
    MPI_ERR_NO_MEM,
    MPI_ERR_OP,
    MPI_ERR_OTHER,
    MPI_ERR_RANK,
    MPI_ERR_REQUEST,
    MPI_ERR_RMA_ATTACH,
    MPI_ERR_RMA_FLAVOR,
    MPI_ERR_RMA_RANGE,
    MPI_ERR_RMA_SYNC,
    MPI_ERR_SIZE,
    MPI_ERR_TYPE,
    MPI_ERR_UNSUPPORTED_OPERATION,
    MPI_ERR_WIN,
    MPI_KEYVAL_INVALID,
    MPI_LOCK_EXCLUSIVE,
    MPI_LOCK_SHARED,
    MPI_MAX_OBJECT_NAME,
    MPI_MODE_NOCHECK,
    MPI_MODE_NOPRECEDE,
    MPI_MODE_NOPUT,
    MPI_MODE_NOSTORE,
    MPI_MODE_NOSUCCEED,
    MPI_ORDER_C,
    MPI_PROC_NULL,
    MPI_UNDEFINED,
    MPI_WIN_BASE,
    MPI_WIN_CREATE_FLAVOR,
    MPI_WIN_DISP_UNIT,
    MPI_WIN_FLAVOR_ALLOCATE,
    MPI_WIN_FLAVOR_CREATE,
    MPI_WIN_FLAVOR_DYNAMIC,
    MPI_WIN_FLAVOR_SHARED,
    MPI_WIN_MODEL,
    MPI_WIN_SIZE,
    MPI_WIN_UNIFIED,
};

/* ---- long double arithmetic, for rma's LongDouble elements ---------------------- */
/* Whether rma can carry C's long double as its LongDouble (16 bytes). */
int rmampi_has_long_double(void) { return sizeof(long double) == 16; }

/* target = op(target, origin) for one long double, with rma's AccOp codes: 1 sum, 2
 * prod, 3 min, 4 max (the others never reach here). */
void rmampi_long_double_apply(int op, void *target, const void *origin) {
    long double t, o;
    memcpy(&t, target, sizeof t);
    memcpy(&o, origin, sizeof o);
    switch (op) {
    case 1: t = t + o; break;
    case 2: t = t * o; break;
    case 3: t = o < t ? o : t; break;
    case 4: t = o > t ? o : t; break;
    default: return;
    }
    memcpy(target, &t, sizeof t);
}

/* ---- for rma's bootstrap over MPI (bootstrap.rs) ----------------------------- */
MPI_Datatype rmampi_byte(void) { return MPI_BYTE; }
MPI_Datatype rmampi_int(void) { return MPI_INT; }
/* Whether MPI runs at MPI_THREAD_SERIALIZED or more (calls from any thread, one at a
 * time). */
int rmampi_thread_level_serialized(void) {
    int level = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    return level == MPI_THREAD_SERIALIZED || level == MPI_THREAD_MULTIPLE;
}
/* Whether MPI runs at MPI_THREAD_MULTIPLE (calls from several threads at once). */
int rmampi_thread_level_multiple(void) {
    int level = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
}
