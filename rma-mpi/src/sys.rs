//! The MPI library underneath: its types and PMPI calls (bindings of the `mpi.h` that
//! `MPICC` names, made by build.rs), and the ABI layer of `csrc/abi.c` (handles and
//! predefined objects, which differ between MPICH's ABI, Open MPI's and the MPI-5
//! standard ABI).

use std::os::raw::{c_int, c_void};

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unsafe_op_in_unsafe_fn
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/mpi_bindings.rs"));
}
pub use bindings::*;

extern "C" {
    pub fn rmampi_win_handle(index: c_int) -> MPI_Win;
    pub fn rmampi_win_index(win: MPI_Win) -> c_int;
    pub fn rmampi_request_handle(index: c_int) -> MPI_Request;
    pub fn rmampi_request_index(req: MPI_Request) -> c_int;
    pub fn rmampi_max_requests() -> c_int;
    pub fn rmampi_predefined_code(datatype: MPI_Datatype) -> c_int;
    pub fn rmampi_is_datatype_null(datatype: MPI_Datatype) -> c_int;
    pub fn rmampi_is_win_null(win: MPI_Win) -> c_int;
    pub fn rmampi_is_pair(datatype: MPI_Datatype) -> c_int;
    pub fn rmampi_op_code(op: MPI_Op) -> c_int;
    pub fn rmampi_comm_world() -> MPI_Comm;
    pub fn rmampi_comm_self() -> MPI_Comm;
    pub fn rmampi_group_null() -> MPI_Group;
    pub fn rmampi_win_null() -> MPI_Win;
    pub fn rmampi_info_null() -> MPI_Info;
    pub fn rmampi_request_null() -> MPI_Request;
    pub fn rmampi_errors_are_fatal() -> MPI_Errhandler;
    pub fn rmampi_errors_return() -> MPI_Errhandler;
    pub fn rmampi_errors_abort() -> MPI_Errhandler;
    pub fn rmampi_errhandler_null() -> MPI_Errhandler;
    pub fn rmampi_status_ignore() -> *mut MPI_Status;
    pub fn rmampi_empty_status(status: *mut MPI_Status);
    pub fn rmampi_status_at(array: *mut MPI_Status, i: c_int) -> *mut MPI_Status;
    pub fn rmampi_byte() -> MPI_Datatype;
    pub fn rmampi_int() -> MPI_Datatype;
    pub fn rmampi_thread_level_serialized() -> c_int;
    pub fn rmampi_thread_level_multiple() -> c_int;
    pub fn rmampi_has_long_double() -> c_int;
    pub fn rmampi_long_double_apply(op: c_int, target: *mut c_void, origin: *const c_void);
}

/// The bits of a handle, whatever the ABI makes it (an `int` in MPICH, a pointer in
/// Open MPI): a key for caches.
pub trait HandleBits {
    /// The handle as a number.
    fn bits(self) -> u64;
}
impl HandleBits for c_int {
    fn bits(self) -> u64 {
        self as u32 as u64
    }
}
impl<T> HandleBits for *mut T {
    fn bits(self) -> u64 {
        self as usize as u64
    }
}

/// The key of a datatype handle.
pub fn datatype_key(datatype: MPI_Datatype) -> u64 {
    datatype.0.bits()
}

/// The int constants of `mpi.h` librma-mpi uses (`csrc/abi.c`'s `rmampi_constants`,
/// field for field).
#[repr(C)]
#[allow(non_snake_case)]
pub struct Constants {
    pub MPI_COMBINER_CONTIGUOUS: c_int,
    pub MPI_COMBINER_DARRAY: c_int,
    pub MPI_COMBINER_DUP: c_int,
    pub MPI_COMBINER_HINDEXED: c_int,
    pub MPI_COMBINER_HINDEXED_BLOCK: c_int,
    pub MPI_COMBINER_HVECTOR: c_int,
    pub MPI_COMBINER_INDEXED: c_int,
    pub MPI_COMBINER_INDEXED_BLOCK: c_int,
    pub MPI_COMBINER_NAMED: c_int,
    pub MPI_COMBINER_RESIZED: c_int,
    pub MPI_COMBINER_STRUCT: c_int,
    pub MPI_COMBINER_SUBARRAY: c_int,
    pub MPI_COMBINER_VECTOR: c_int,
    pub MPI_DISTRIBUTE_BLOCK: c_int,
    pub MPI_DISTRIBUTE_CYCLIC: c_int,
    pub MPI_DISTRIBUTE_DFLT_DARG: c_int,
    pub MPI_DISTRIBUTE_NONE: c_int,
    pub MPI_ERR_ARG: c_int,
    pub MPI_ERR_ASSERT: c_int,
    pub MPI_ERR_COMM: c_int,
    pub MPI_ERR_COUNT: c_int,
    pub MPI_ERR_DISP: c_int,
    pub MPI_ERR_GROUP: c_int,
    pub MPI_ERR_INTERN: c_int,
    pub MPI_ERR_KEYVAL: c_int,
    pub MPI_ERR_LOCKTYPE: c_int,
    pub MPI_ERR_NO_MEM: c_int,
    pub MPI_ERR_OP: c_int,
    pub MPI_ERR_OTHER: c_int,
    pub MPI_ERR_RANK: c_int,
    pub MPI_ERR_REQUEST: c_int,
    pub MPI_ERR_RMA_ATTACH: c_int,
    pub MPI_ERR_RMA_FLAVOR: c_int,
    pub MPI_ERR_RMA_RANGE: c_int,
    pub MPI_ERR_RMA_SYNC: c_int,
    pub MPI_ERR_SIZE: c_int,
    pub MPI_ERR_TYPE: c_int,
    pub MPI_ERR_UNSUPPORTED_OPERATION: c_int,
    pub MPI_ERR_WIN: c_int,
    pub MPI_KEYVAL_INVALID: c_int,
    pub MPI_LOCK_EXCLUSIVE: c_int,
    pub MPI_LOCK_SHARED: c_int,
    pub MPI_MAX_OBJECT_NAME: c_int,
    pub MPI_MODE_NOCHECK: c_int,
    pub MPI_MODE_NOPRECEDE: c_int,
    pub MPI_MODE_NOPUT: c_int,
    pub MPI_MODE_NOSTORE: c_int,
    pub MPI_MODE_NOSUCCEED: c_int,
    pub MPI_ORDER_C: c_int,
    pub MPI_PROC_NULL: c_int,
    pub MPI_UNDEFINED: c_int,
    pub MPI_WIN_BASE: c_int,
    pub MPI_WIN_CREATE_FLAVOR: c_int,
    pub MPI_WIN_DISP_UNIT: c_int,
    pub MPI_WIN_FLAVOR_ALLOCATE: c_int,
    pub MPI_WIN_FLAVOR_CREATE: c_int,
    pub MPI_WIN_FLAVOR_DYNAMIC: c_int,
    pub MPI_WIN_FLAVOR_SHARED: c_int,
    pub MPI_WIN_MODEL: c_int,
    pub MPI_WIN_SIZE: c_int,
    pub MPI_WIN_UNIFIED: c_int,
}

extern "C" {
    static rmampi_constants: Constants;
}

/// The constants.
pub fn constants() -> &'static Constants {
    // SAFETY: a `const` struct of ints defined by the ABI layer, never written.
    unsafe { &rmampi_constants }
}

/// An int constant of `mpi.h`.
macro_rules! int {
    ($name:ident) => {
        $crate::sys::constants().$name
    };
}
pub(crate) use int;

/// The MPI's own definition of `name`: the next one after librma-mpi's (preloaded or
/// linked before libmpi), for the names librma-mpi defines too (PMPI_Init, which MPIs'
/// Fortran layers call; the handle conversions of Open MPI's; MPICH's attribute
/// internals). Aborts with a message if the MPI has none.
pub fn next_definition(name: &'static std::ffi::CStr, cache: &std::sync::OnceLock<usize>) -> usize {
    *cache.get_or_init(|| {
        // SAFETY: a lookup of a NUL-terminated name; RTLD_NEXT searches the objects
        // loaded after this one.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        if f.is_null() {
            say!("librma-mpi: the MPI library has no {name:?}; aborting");
            std::process::abort();
        }
        f as usize
    })
}

/// The MPI's own definition of a name librma-mpi defines too, as a function pointer of
/// the given type: `mpi_own!(c"PMPI_Init" as unsafe extern "C" fn(...) -> c_int)`.
macro_rules! mpi_own {
    ($name:literal as $ty:ty) => {{
        static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let f = $crate::sys::next_definition($name, &NEXT);
        // SAFETY: `f` is the MPI library's definition of `$name`, a function of C type
        // `$ty` (its mpi.h, or its Fortran layer's convention).
        unsafe { std::mem::transmute::<usize, $ty>(f) }
    }};
    // The name as any expression of type `&'static CStr`.
    ($name:expr => $ty:ty) => {{
        static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let f = $crate::sys::next_definition($name, &NEXT);
        // SAFETY: as above.
        unsafe { std::mem::transmute::<usize, $ty>(f) }
    }};
}
pub(crate) use mpi_own;

/// The MPI's own completion calls. librma-mpi defines these names as well as the `MPI_`
/// ones (Fortran layers call `PMPI_Wait` and the others: Open MPI's always, MPICH's
/// from `use mpi_f08`), so a call by name from here would come back to librma-mpi's:
/// requests that are not ours go on to these, the next definitions.
#[allow(non_snake_case)]
pub mod next {
    use super::{MPI_Comm, MPI_Request, MPI_Status};
    use std::os::raw::c_int;

    macro_rules! next_calls {
        ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
            /// The MPI library's own definition, with the caller's arguments.
            ///
            /// # Safety
            /// The contract of the MPI call of this name.
            pub unsafe fn $name($($arg: $ty),*) -> c_int {
                let f = super::mpi_own!(
                    $crate::sys::cstr_of!($name) => unsafe extern "C" fn($($ty),*) -> c_int
                );
                // SAFETY: the MPI's definition of this call; the caller's arguments.
                unsafe { f($($arg),*) }
            }
        )*};
    }

    next_calls! {
        PMPI_Barrier(comm: MPI_Comm);
        PMPI_Ibarrier(comm: MPI_Comm, req: *mut MPI_Request);
        PMPI_Wait(req: *mut MPI_Request, status: *mut MPI_Status);
        PMPI_Test(req: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status);
        PMPI_Request_free(req: *mut MPI_Request);
        PMPI_Request_get_status(req: MPI_Request, flag: *mut c_int, status: *mut MPI_Status);
        PMPI_Waitall(n: c_int, reqs: *mut MPI_Request, statuses: *mut MPI_Status);
        PMPI_Testall(n: c_int, reqs: *mut MPI_Request, flag: *mut c_int, statuses: *mut MPI_Status);
        PMPI_Waitany(n: c_int, reqs: *mut MPI_Request, index: *mut c_int, status: *mut MPI_Status);
        PMPI_Testany(
            n: c_int,
            reqs: *mut MPI_Request,
            index: *mut c_int,
            flag: *mut c_int,
            status: *mut MPI_Status
        );
        PMPI_Waitsome(
            n: c_int,
            reqs: *mut MPI_Request,
            outcount: *mut c_int,
            indices: *mut c_int,
            statuses: *mut MPI_Status
        );
        PMPI_Testsome(
            n: c_int,
            reqs: *mut MPI_Request,
            outcount: *mut c_int,
            indices: *mut c_int,
            statuses: *mut MPI_Status
        );
    }
}

/// `c"NAME"` of an identifier.
macro_rules! cstr_of {
    ($name:ident) => {
        const {
            match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(s) => s,
                Err(_) => panic!("a name without NUL"),
            }
        }
    };
}
pub(crate) use cstr_of;
