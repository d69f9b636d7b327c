//! Fortran programs (`mpif.h`, `use mpi`, `use mpi_f08`) on librma-mpi's windows. The
//! MPIs' Fortran layers are thin wrappers over C, reached at different depths:
//!
//! - MPICH: `mpif.h` and `use mpi` call the C `MPI_` names (librma-mpi's); `use mpi_f08`
//!   calls `MPI_` for the calls with a buffer and the `PMPI_` names for the others
//!   (librma-mpi exports both, `api::mpi_and_pmpi`). Handles are the C ints. Window
//!   attributes go through MPICH's internal `MPII_Win_get_attr` / `MPII_Win_set_attr`
//!   with the Fortran keyvals (the C ones plus one) and the value itself, not a pointer
//!   to it: defined here for librma-mpi's windows.
//! - Open MPI: every Fortran routine converts its INTEGER handle with `PMPI_Win_f2c`,
//!   then calls a `PMPI_` name. librma-mpi's windows are pointers into a reserved range
//!   (csrc/abi.c); their Fortran handles, here, are [`FORTRAN_WINDOWS`] plus the index,
//!   far past the indexes of Open MPI's own table. Attributes go through Open MPI's
//!   internals from the Fortran symbols `mpi_win_get_attr_` (and the `pmpi_` one
//!   mpi_f08 calls), defined here for librma-mpi's windows.
//!
//! Everything else a definition here is not for goes on to the MPI's own, found with
//! `dlsym(RTLD_NEXT)` (the next definition after librma-mpi's, preloaded or linked
//! first). RMA requests (MPI_RPUT and the others) are waited for from Fortran through
//! the completion calls' `PMPI_` names, which librma-mpi defines beside the `MPI_` ones
//! (MPICH's `use mpi_f08` and all of Open MPI's Fortran call those), and under Open MPI
//! through its request handle conversions, defined here like the windows'.
//!
//! Keyvals made by MPI_WIN_CREATE_KEYVAL are librma-mpi's, whatever the language; one
//! made in Fortran keeps its delete function as Fortran's (`window::DeleteFunction`),
//! called with every argument by reference. MPICH's Fortran layer calls C's
//! MPI_Win_create_keyval with the Fortran procedure, then `MPII_Keyval_set_proxy`, which
//! marks our keyval Fortran's; Open MPI's would make the keyval in its own tables and
//! set attributes in its own window object, so its `mpi_win_create_keyval_`,
//! `mpi_win_set_attr_` (and the `pmpi_` and mpi_f08 `ompi_..._f` names) are defined here.

use std::os::raw::{c_int, c_void};

use crate::api::MPI_Win_get_attr;
#[cfg(mpich_abi)]
use crate::api::MPI_Win_set_attr;
#[cfg(open_mpi)]
use crate::sys::MPI_Request;
use crate::sys::{self, int, mpi_own, MPI_Aint, MPI_Win};

/// Whether `win` is one of librma-mpi's windows.
fn ours(win: MPI_Win) -> bool {
    // SAFETY: a plain function of a handle value.
    unsafe { sys::rmampi_win_index(win) >= 0 }
}

/// The value a Fortran program reads for a window attribute whose C value (a pointer
/// to the value for the predefined keyvals, the stored pointer for others) is `p`.
fn fortran_value(c_keyval: c_int, p: *mut c_void) -> MPI_Aint {
    if c_keyval == int!(MPI_WIN_SIZE) {
        // SAFETY: the C value of MPI_WIN_SIZE points at the window's MPI_Aint field
        // (api's MPI_Win_get_attr), alive with the window.
        unsafe { *p.cast::<MPI_Aint>() }
    } else if c_keyval == int!(MPI_WIN_DISP_UNIT)
        || c_keyval == int!(MPI_WIN_CREATE_FLAVOR)
        || c_keyval == int!(MPI_WIN_MODEL)
    {
        // SAFETY: these C values point at the window's int fields, alive with it.
        unsafe { *p.cast::<c_int>() as MPI_Aint }
    } else {
        // MPI_WIN_BASE (the address itself) and attributes the program set.
        p as MPI_Aint
    }
}

/// A window attribute of one of librma-mpi's windows, as Fortran reads it: (flag,
/// value, error code).
fn get_attr_for_fortran(win: MPI_Win, c_keyval: c_int) -> (c_int, MPI_Aint, c_int) {
    let mut p: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: our own call, with out pointers to locals.
    let rc = unsafe {
        MPI_Win_get_attr(
            win,
            c_keyval,
            (&mut p as *mut *mut c_void).cast(),
            &mut flag,
        )
    };
    let value = if rc == 0 && flag != 0 {
        fortran_value(c_keyval, p)
    } else {
        0
    };
    (flag, value, rc)
}

/// The handle a Fortran program holds for `win` (what a Fortran delete function is
/// given): MPICH's handles are the same ints in both languages.
pub(crate) fn fortran_handle(win: MPI_Win) -> c_int {
    #[cfg(open_mpi)]
    {
        win_c2f(win)
    }
    #[cfg(mpich_abi)]
    {
        win.0
    }
}

// ---- MPICH ---------------------------------------------------------------------------

/// MPICH's `MPIR_Attr_type`: how the Fortran layer passes an attribute value (any
/// other: `MPIR_ATTR_AINT`, an `MPI_Aint`, INTEGER(KIND=MPI_ADDRESS_KIND)).
#[cfg(mpich_abi)]
mod attr_type {
    use std::os::raw::c_int;
    /// A pointer (C's convention).
    pub const POINTER: c_int = 0;
    /// An `int` value (MPI-1's INTEGER attributes).
    pub const INT: c_int = 3;
}

/// MPICH's Fortran keyvals of the predefined window attributes are the C ones plus one.
#[cfg(mpich_abi)]
fn c_keyval_of(keyval: c_int) -> c_int {
    let predefined = [
        int!(MPI_WIN_BASE),
        int!(MPI_WIN_SIZE),
        int!(MPI_WIN_DISP_UNIT),
        int!(MPI_WIN_CREATE_FLAVOR),
        int!(MPI_WIN_MODEL),
    ];
    if predefined.iter().any(|&k| k + 1 == keyval) {
        keyval - 1
    } else {
        keyval
    }
}

/// MPICH's Fortran MPI_WIN_GET_ATTR (all three interfaces) lands here.
///
/// # Safety
/// MPICH's internal contract: `value` points at a value of the kind `kind` says,
/// `flag` at an int.
#[cfg(mpich_abi)]
#[no_mangle]
pub unsafe extern "C" fn MPII_Win_get_attr(
    win: MPI_Win,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
    kind: c_int,
) -> c_int {
    if !ours(win) {
        let next = mpi_own!(
            c"MPII_Win_get_attr"
                as unsafe extern "C" fn(MPI_Win, c_int, *mut c_void, *mut c_int, c_int) -> c_int
        );
        // SAFETY: MPICH's definition of this very function, with the caller's arguments.
        return unsafe { next(win, keyval, value, flag, kind) };
    }
    if kind == attr_type::POINTER {
        // SAFETY: C's convention, the caller's pointers.
        return unsafe { MPI_Win_get_attr(win, c_keyval_of(keyval), value, flag) };
    }
    let (found, v, rc) = get_attr_for_fortran(win, c_keyval_of(keyval));
    // SAFETY: the caller's out pointers, of the types `kind` names.
    unsafe {
        if !flag.is_null() {
            *flag = found;
        }
        if rc == 0 && found != 0 && !value.is_null() {
            if kind == attr_type::INT {
                *value.cast::<c_int>() = v as c_int;
            } else {
                *value.cast::<MPI_Aint>() = v;
            }
        }
    }
    rc
}

/// MPICH's Fortran MPI_WIN_SET_ATTR lands here (the value itself, as a pointer).
///
/// # Safety
/// MPICH's internal contract.
#[cfg(mpich_abi)]
#[no_mangle]
pub unsafe extern "C" fn MPII_Win_set_attr(
    win: MPI_Win,
    keyval: c_int,
    value: *mut c_void,
    kind: c_int,
) -> c_int {
    if !ours(win) {
        let next = mpi_own!(
            c"MPII_Win_set_attr"
                as unsafe extern "C" fn(MPI_Win, c_int, *mut c_void, c_int) -> c_int
        );
        // SAFETY: MPICH's definition of this very function, with the caller's arguments.
        return unsafe { next(win, keyval, value, kind) };
    }
    // SAFETY: our own call; the value is stored, not read.
    unsafe { MPI_Win_set_attr(win, keyval, value) }
}

/// MPICH's Fortran MPI_WIN_CREATE_KEYVAL calls C's MPI_Win_create_keyval (librma-mpi's)
/// with the Fortran procedure and the address of the extra state, then says so here
/// (its proxies would call the procedure in Fortran's convention): a keyval of ours
/// becomes Fortran's; any other (a communicator's, a datatype's) goes on to MPICH.
///
/// # Safety
/// MPICH's internal contract: the two proxies are MPICH's functions.
#[cfg(mpich_abi)]
#[no_mangle]
pub unsafe extern "C" fn MPII_Keyval_set_proxy(
    keyval: c_int,
    copy_proxy: *mut c_void,
    delete_proxy: *mut c_void,
) {
    if crate::window::keyval_made_in_fortran(keyval) {
        return;
    }
    let next =
        mpi_own!(c"MPII_Keyval_set_proxy" as unsafe extern "C" fn(c_int, *mut c_void, *mut c_void));
    // SAFETY: MPICH's definition of this very function, with the caller's arguments.
    unsafe { next(keyval, copy_proxy, delete_proxy) }
}

// ---- Open MPI ------------------------------------------------------------------------

/// Fortran handles of librma-mpi's windows under Open MPI: this plus the window's
/// index (Open MPI's own are indexes of a dense table from 0).
#[cfg(open_mpi)]
pub const FORTRAN_WINDOWS: c_int = 0x1300_0000;

#[cfg(open_mpi)]
const FORTRAN_WINDOW_COUNT: c_int = 1 << 16;

/// A window's Fortran handle.
#[cfg(open_mpi)]
fn win_c2f(win: MPI_Win) -> c_int {
    // SAFETY: a plain function of a handle value.
    let index = unsafe { sys::rmampi_win_index(win) };
    if index >= 0 {
        return FORTRAN_WINDOWS + index;
    }
    let next = mpi_own!(c"PMPI_Win_c2f" as unsafe extern "C" fn(MPI_Win) -> c_int);
    // SAFETY: Open MPI's definition of this very function.
    unsafe { next(win) }
}

/// The window of a Fortran handle.
#[cfg(open_mpi)]
fn win_f2c(handle: c_int) -> MPI_Win {
    if (FORTRAN_WINDOWS..FORTRAN_WINDOWS + FORTRAN_WINDOW_COUNT).contains(&handle) {
        // SAFETY: a plain function of an index in the reserved range.
        return unsafe { sys::rmampi_win_handle(handle - FORTRAN_WINDOWS) };
    }
    let next = mpi_own!(c"PMPI_Win_f2c" as unsafe extern "C" fn(c_int) -> MPI_Win);
    // SAFETY: Open MPI's definition of this very function.
    unsafe { next(handle) }
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn MPI_Win_c2f(win: MPI_Win) -> c_int {
    win_c2f(win)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn PMPI_Win_c2f(win: MPI_Win) -> c_int {
    win_c2f(win)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn MPI_Win_f2c(handle: c_int) -> MPI_Win {
    win_f2c(handle)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn PMPI_Win_f2c(handle: c_int) -> MPI_Win {
    win_f2c(handle)
}

/// Fortran handles of librma-mpi's requests (MPI_RPUT and the others) under Open MPI:
/// this plus the request's index, past its windows' range.
#[cfg(open_mpi)]
pub const FORTRAN_REQUESTS: c_int = 0x1400_0000;

/// A request's Fortran handle. Open MPI's Fortran layer converts every request it
/// returns or takes (MPI_RPUT, MPI_WAIT, MPI_TESTALL, ...) through these two, then calls
/// the `PMPI_` completion calls, which librma-mpi defines for its requests.
#[cfg(open_mpi)]
fn request_c2f(req: MPI_Request) -> c_int {
    // SAFETY: a plain function of a handle value.
    let index = unsafe { sys::rmampi_request_index(req) };
    if index >= 0 {
        return FORTRAN_REQUESTS + index;
    }
    let next = mpi_own!(c"PMPI_Request_c2f" as unsafe extern "C" fn(MPI_Request) -> c_int);
    // SAFETY: Open MPI's definition of this very function.
    unsafe { next(req) }
}

/// The request of a Fortran handle.
#[cfg(open_mpi)]
fn request_f2c(handle: c_int) -> MPI_Request {
    // SAFETY: a plain function.
    let count = unsafe { sys::rmampi_max_requests() };
    if (FORTRAN_REQUESTS..FORTRAN_REQUESTS.saturating_add(count)).contains(&handle) {
        // SAFETY: a plain function of an index in the reserved range.
        return unsafe { sys::rmampi_request_handle(handle - FORTRAN_REQUESTS) };
    }
    let next = mpi_own!(c"PMPI_Request_f2c" as unsafe extern "C" fn(c_int) -> MPI_Request);
    // SAFETY: Open MPI's definition of this very function.
    unsafe { next(handle) }
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn MPI_Request_c2f(req: MPI_Request) -> c_int {
    request_c2f(req)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn PMPI_Request_c2f(req: MPI_Request) -> c_int {
    request_c2f(req)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn MPI_Request_f2c(handle: c_int) -> MPI_Request {
    request_f2c(handle)
}

#[cfg(open_mpi)]
#[no_mangle]
pub extern "C" fn PMPI_Request_f2c(handle: c_int) -> MPI_Request {
    request_f2c(handle)
}

/// Open MPI's Fortran MPI_WIN_GET_ATTR (gfortran's convention: every argument by
/// reference).
#[cfg(open_mpi)]
type FortranGetAttr =
    unsafe extern "C" fn(*const c_int, *const c_int, *mut MPI_Aint, *mut c_int, *mut c_int);

/// Open MPI's Fortran MPI_WIN_GET_ATTR, for librma-mpi's windows; others go on to
/// Open MPI's (`next`).
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
unsafe fn fortran_get_attr(
    next: FortranGetAttr,
    win: *const c_int,
    keyval: *const c_int,
    value: *mut MPI_Aint,
    flag: *mut c_int,
    ierr: *mut c_int,
) {
    // SAFETY: the caller's arguments, by reference as Fortran passes them.
    unsafe {
        let c_win = win_f2c(*win);
        if !ours(c_win) {
            next(win, keyval, value, flag, ierr);
            return;
        }
        let (found, v, rc) = get_attr_for_fortran(c_win, *keyval);
        *flag = found;
        if rc == 0 && found != 0 {
            *value = v;
        }
        if !ierr.is_null() {
            *ierr = rc;
        }
    }
}

/// `MPI_WIN_GET_ATTR` of `mpif.h` and `use mpi` under Open MPI.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn mpi_win_get_attr_(
    win: *const c_int,
    keyval: *const c_int,
    value: *mut MPI_Aint,
    flag: *mut c_int,
    ierr: *mut c_int,
) {
    let next = mpi_own!(c"mpi_win_get_attr_" as FortranGetAttr);
    // SAFETY: the caller's arguments.
    unsafe { fortran_get_attr(next, win, keyval, value, flag, ierr) }
}

/// The same under its profiling name, which `use mpi_f08`'s MPI_Win_get_attr calls.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn pmpi_win_get_attr_(
    win: *const c_int,
    keyval: *const c_int,
    value: *mut MPI_Aint,
    flag: *mut c_int,
    ierr: *mut c_int,
) {
    let next = mpi_own!(c"pmpi_win_get_attr_" as FortranGetAttr);
    // SAFETY: the caller's arguments.
    unsafe { fortran_get_attr(next, win, keyval, value, flag, ierr) }
}

/// MPI_WIN_CREATE_KEYVAL from Fortran under Open MPI, whose Fortran layer would make
/// the keyval in its own tables and set attributes on the window object itself: a
/// librma-mpi keyval instead, whose delete function librma-mpi calls in Fortran's
/// convention. Windows are only ever librma-mpi's under it, and so are keyvals for them
/// (C's MPI_Win_create_keyval makes librma-mpi's too; MPI_WIN_FREE_KEYVAL and
/// MPI_WIN_DELETE_ATTR reach librma-mpi through their PMPI_ names).
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
unsafe fn fortran_create_keyval(
    delete: Option<crate::window::FortranDeleteFunction>,
    keyval: *mut c_int,
    extra_state: *const MPI_Aint,
    ierr: *mut c_int,
) {
    let rc = match (delete, keyval.is_null(), extra_state.is_null()) {
        (Some(delete), false, false) => {
            // SAFETY: the program's INTEGER(KIND=MPI_ADDRESS_KIND), by reference.
            let extra = unsafe { *extra_state };
            let k = crate::window::create_fortran_keyval(
                delete,
                crate::window::FortranExtraState::Value(extra),
            );
            // SAFETY: the program's INTEGER, by reference.
            unsafe { *keyval = k };
            0
        }
        _ => int!(MPI_ERR_ARG),
    };
    if !ierr.is_null() {
        // SAFETY: the program's INTEGER, by reference.
        unsafe { *ierr = rc };
    }
}

/// `MPI_WIN_CREATE_KEYVAL` of `mpif.h` and `use mpi` under Open MPI.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn mpi_win_create_keyval_(
    _copy: *mut c_void,
    delete: Option<crate::window::FortranDeleteFunction>,
    keyval: *mut c_int,
    extra_state: *const MPI_Aint,
    ierr: *mut c_int,
) {
    // SAFETY: the caller's arguments.
    unsafe { fortran_create_keyval(delete, keyval, extra_state, ierr) }
}

/// The same under its profiling name.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn pmpi_win_create_keyval_(
    _copy: *mut c_void,
    delete: Option<crate::window::FortranDeleteFunction>,
    keyval: *mut c_int,
    extra_state: *const MPI_Aint,
    ierr: *mut c_int,
) {
    // SAFETY: the caller's arguments.
    unsafe { fortran_create_keyval(delete, keyval, extra_state, ierr) }
}

/// The same as `use mpi_f08`'s MPI_Win_create_keyval reaches it (Open MPI's C body of
/// the Fortran routines, called by name from its mpi_f08 library).
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn ompi_win_create_keyval_f(
    _copy: *mut c_void,
    delete: Option<crate::window::FortranDeleteFunction>,
    keyval: *mut c_int,
    extra_state: *const MPI_Aint,
    ierr: *mut c_int,
) {
    // SAFETY: the caller's arguments.
    unsafe { fortran_create_keyval(delete, keyval, extra_state, ierr) }
}

/// Open MPI's Fortran MPI_WIN_SET_ATTR: `(win, keyval, attribute_val, ierror)`.
#[cfg(open_mpi)]
type FortranSetAttr = unsafe extern "C" fn(*const c_int, *const c_int, *const MPI_Aint, *mut c_int);

/// MPI_WIN_SET_ATTR from Fortran under Open MPI, for librma-mpi's windows (Open MPI's
/// layer would store the value in its own window object); others go on to Open MPI's
/// (`next`).
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
unsafe fn fortran_set_attr(
    next: FortranSetAttr,
    win: *const c_int,
    keyval: *const c_int,
    value: *const MPI_Aint,
    ierr: *mut c_int,
) {
    // SAFETY: the caller's arguments, by reference as Fortran passes them.
    unsafe {
        let c_win = win_f2c(*win);
        if !ours(c_win) {
            next(win, keyval, value, ierr);
            return;
        }
        // The value itself, stored as C's pointer-sized attribute (what
        // MPI_WIN_GET_ATTR gives back).
        let rc = crate::api::MPI_Win_set_attr(c_win, *keyval, *value as *mut c_void);
        if !ierr.is_null() {
            *ierr = rc;
        }
    }
}

/// `MPI_WIN_SET_ATTR` of `mpif.h` and `use mpi` under Open MPI.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn mpi_win_set_attr_(
    win: *const c_int,
    keyval: *const c_int,
    value: *const MPI_Aint,
    ierr: *mut c_int,
) {
    let next = mpi_own!(c"mpi_win_set_attr_" as FortranSetAttr);
    // SAFETY: the caller's arguments.
    unsafe { fortran_set_attr(next, win, keyval, value, ierr) }
}

/// The same under its profiling name.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn pmpi_win_set_attr_(
    win: *const c_int,
    keyval: *const c_int,
    value: *const MPI_Aint,
    ierr: *mut c_int,
) {
    let next = mpi_own!(c"pmpi_win_set_attr_" as FortranSetAttr);
    // SAFETY: the caller's arguments.
    unsafe { fortran_set_attr(next, win, keyval, value, ierr) }
}

/// The same as `use mpi_f08`'s MPI_Win_set_attr reaches it.
///
/// # Safety
/// gfortran's convention: every argument by reference.
#[cfg(open_mpi)]
#[no_mangle]
pub unsafe extern "C" fn ompi_win_set_attr_f(
    win: *const c_int,
    keyval: *const c_int,
    value: *const MPI_Aint,
    ierr: *mut c_int,
) {
    let next = mpi_own!(c"ompi_win_set_attr_f" as FortranSetAttr);
    // SAFETY: the caller's arguments.
    unsafe { fortran_set_attr(next, win, keyval, value, ierr) }
}
