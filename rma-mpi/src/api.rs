//! The C entry points: MPI's one-sided interface with C linkage, as `mpi.h` declares
//! it, plus the calls librma-mpi must see to run it (MPI_Init and MPI_Finalize to start
//! and stop rma, the completion calls for its requests, MPI_Type_commit and
//! MPI_Type_free for its datatype cache, MPI_Barrier to make rma's progress while the
//! application waits there). Each entry point checks its arguments,
//! calls the Rust body and turns the outcome into MPI's: a code, through the window's
//! error handler. A panic never crosses into C: it is MPI_ERR_INTERN.

#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// each is MPI's function of the same name

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rma::Rank;

use crate::datatype;
use crate::error::{self, MpiError, MpiResult};
use crate::ops::{acc_op, Buffer, Target};
use crate::request::{self, Shared};
use crate::sys::{self, int, *};
use crate::window::{self, Flavor, Win};

const SUCCESS: c_int = 0;
/// Defines an MPI call under its MPI_ name and its profiling (PMPI_) name. The MPIs'
/// own Fortran layers call the PMPI_ names (Open MPI's `mpif.h`, `use mpi` and
/// `use mpi_f08` routines all do, after `PMPI_Win_f2c`; MPICH's `use mpi_f08` does for
/// the calls without a buffer), so a Fortran program reaches librma-mpi's windows only
/// through them. Given only to calls librma-mpi serves whole, which it never makes to
/// the MPI underneath itself (no PMPI_ call of its own lands back here). A profiling
/// tool layered on PMPI sees librma-mpi's calls as the MPI's.
macro_rules! mpi_and_pmpi {
    ($(#[$attr:meta])* pub unsafe extern "C" fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body

        $(#[$attr])*
        const _: () = {
            #[export_name = concat!("P", stringify!($name))]
            unsafe extern "C" fn profiling_name($($arg: $ty),*) -> $ret {
                // SAFETY: the same call under its other name, with the caller's
                // arguments and contract.
                unsafe { $name($($arg),*) }
            }
        };
    };
}

/// MPI_NO_OP's code (see `rmampi_op_code`).
const NO_OP: c_int = 12;

#[inline]
fn guarded<R>(call: &str, f: impl FnOnce() -> MpiResult<R>) -> MpiResult<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(panicked(call)),
    }
}

/// A panic of librma-mpi's, as the error the call returns.
#[cold]
fn panicked(call: &str) -> MpiError {
    MpiError::new(
        int!(MPI_ERR_INTERN),
        format!("internal error of librma-mpi in {call} (a panic); please report it"),
    )
}

/// Runs `f` on the window `win` names; the outcome through its error handler.
///
/// The closure `catch_unwind` runs holds a single reference: catch_unwind hands its
/// closure over through memory, and a closure of several captures was copied in 16-byte
/// loads of what the caller had stored in smaller pieces, a store-forwarding stall on
/// every call (a quarter of an `MPI_Put` on shared memory). One pointer is one load.
#[inline(always)]
fn on_window(call: &str, win: MPI_Win, f: impl Fn(&Win) -> MpiResult<()>) -> c_int {
    let job = &(win, f);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let (win, f) = job;
        window::with_win(*win, f)
    }));
    match outcome {
        Ok(Ok(Ok(()))) => SUCCESS,
        Ok(Ok(Err(e)) | Err(e)) => window_error(call, win, e),
        Err(_) => window_error(call, win, panicked(call)),
    }
}

/// A window call's error, through the window's handler (or MPI_COMM_SELF's when the
/// handle names no window).
#[cold]
#[inline(never)]
fn window_error(call: &str, win: MPI_Win, e: MpiError) -> c_int {
    match window::errhandler_of(win) {
        Some(h) => error::raise_on_window(call, win, h, &e),
        // SAFETY: a constant of the ABI layer.
        None => error::raise_on_comm(call, unsafe { sys::rmampi_comm_self() }, &e),
    }
}

/// Runs `f`, a call with no window yet (creation): errors go to `comm`'s handler.
fn on_comm(call: &str, comm: MPI_Comm, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    match guarded(call, f) {
        Ok(()) => SUCCESS,
        Err(e) => error::raise_on_comm(call, comm, &e),
    }
}

fn proc_null() -> c_int {
    int!(MPI_PROC_NULL)
}

#[inline]
fn count(n: i64, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(int!(MPI_ERR_COUNT), format!("negative {what}")))
}

#[inline]
fn rank_of(rank: c_int) -> MpiResult<Rank> {
    Rank::try_from(rank)
        .map_err(|_| MpiError::new(int!(MPI_ERR_RANK), format!("invalid target rank {rank}")))
}

fn out_ptr<T>(p: *mut T, what: &str) -> MpiResult<*mut T> {
    if p.is_null() {
        Err(MpiError::new(int!(MPI_ERR_ARG), format!("{what} is NULL")))
    } else {
        Ok(p)
    }
}

#[inline]
fn buffer(addr: *const c_void, n: i64, dt: MPI_Datatype, what: &str) -> MpiResult<Buffer> {
    Ok(Buffer {
        addr: addr.cast(),
        count: count(n, what)?,
        flat: datatype::flat(dt)?,
    })
}

#[inline]
fn target(rank: c_int, disp: MPI_Aint, n: i64, dt: MPI_Datatype) -> MpiResult<Target> {
    Ok(Target {
        rank: rank_of(rank)?,
        disp: disp as i64,
        count: count(n, "target count")?,
        flat: datatype::flat(dt)?,
    })
}

// ---- start and stop ----------------------------------------------------------------

/// C's long double arithmetic, for rma's LongDouble accumulates (MPI_LONG_DOUBLE).
fn long_double_arithmetic(op: rma::AccOp, target: &mut [u8; 16], origin: &[u8; 16]) {
    // SAFETY: two 16-byte buffers, which the C side reads and writes as one long double
    // each (rmampi_has_long_double said it is 16 bytes).
    unsafe {
        sys::rmampi_long_double_apply(
            op as c_int,
            target.as_mut_ptr().cast(),
            origin.as_ptr().cast(),
        )
    }
}

fn start_rma() {
    window::follow_thread_level();
    // SAFETY: a plain query.
    if unsafe { sys::rmampi_has_long_double() } != 0 {
        rma::engine::set_long_double_arithmetic(long_double_arithmetic);
    }
    // The configuration from the environment: the progress agent runs where peers need
    // it from the start (networks) and is started by the first window of active
    // messages on shared memory (`window::create`), unless RMA_ASYNC_PROGRESS=0.
    let world = rma::Config::from_env().and_then(|mut config| {
        // Below MPI_THREAD_MULTIPLE the application makes one call at a time.
        // SAFETY: a plain query.
        config.calls_one_at_a_time = unsafe { sys::rmampi_thread_level_multiple() } == 0;
        let bootstrap = crate::bootstrap::over_comm_world()?;
        rma::World::from_bootstrap(std::sync::Arc::new(bootstrap), config)
    });
    match world {
        Ok(w) => *window::world().lock().unwrap_or_else(|e| e.into_inner()) = Some(w),
        Err(e) => {
            say!("librma-mpi: rma did not start: {e}; one-sided calls will fail with MPI_ERR_OTHER")
        }
    }
}

// Start and stop under both names: MPICH's `use mpi_f08` calls PMPI_Init and
// PMPI_Finalize. The MPI's own are found past librma-mpi's (`sys::mpi_own`).
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
        let init = sys::mpi_own!(
            c"PMPI_Init" as unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int
        );
        // SAFETY: the application's arguments, passed on.
        let rc = unsafe { init(argc, argv) };
        if rc == SUCCESS {
            start_rma();
        }
        rc
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Init_thread(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int {
        let init = sys::mpi_own!(
            c"PMPI_Init_thread"
                as unsafe extern "C" fn(
                    *mut c_int,
                    *mut *mut *mut c_char,
                    c_int,
                    *mut c_int,
                ) -> c_int
        );
        // SAFETY: the application's arguments, passed on.
        let rc = unsafe { init(argc, argv, required, provided) };
        if rc == SUCCESS {
            start_rma();
        }
        rc
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Finalize() -> c_int {
        window::drop_all();
        drop(
            window::world()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        let finalize = sys::mpi_own!(c"PMPI_Finalize" as unsafe extern "C" fn() -> c_int);
        // SAFETY: MPI's own finalize, after rma let go of its communicator.
        unsafe { finalize() }
    }
}

// A barrier of the application keeps rma's progress going where the World reaches some
// rank over the network, since there a peer's native reads and writes of this process's
// windows move only while this process polls (libfabric's tcp provider). Otherwise a
// target waiting in the MPI's own barrier (which knows nothing of rma) leaves them to
// rma's progress agent, on a core the barrier's spin also wants: 1 MiB gets over tcp
// under Debian's MPICH 4.0.2 ran at 2.0 GB/s. MPI_Barrier is then the MPI's own
// MPI_Ibarrier, tested in turn with a progress pass of rma: the same synchronization.
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
        let Some(engine) = window::network_engine() else {
            // SAFETY: the application's communicator, passed on.
            return unsafe { sys::next::PMPI_Barrier(comm) };
        };
        // SAFETY: a constant of the ABI layer.
        let mut req = unsafe { sys::rmampi_request_null() };
        // SAFETY: the application's communicator, passed on; `req` is ours to fill.
        let rc = unsafe { sys::next::PMPI_Ibarrier(comm, &mut req) };
        if rc != SUCCESS {
            return rc;
        }
        loop {
            let mut done: c_int = 0;
            // SAFETY: the request the MPI made above, our flag, MPI_STATUS_IGNORE.
            let rc = unsafe {
                sys::next::PMPI_Test(&mut req, &mut done, sys::rmampi_status_ignore())
            };
            if rc != SUCCESS || done != 0 {
                return rc;
            }
            // A failure here is the failed op's: its own call reports it.
            let _ = engine.progress();
        }
    }
}

// ---- windows -------------------------------------------------------------------------

fn new_window(
    call: &str,
    comm: MPI_Comm,
    flavor: Flavor,
    disp_unit: i64,
    info: MPI_Info,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> c_int {
    on_comm(call, comm, || {
        let win = out_ptr(win, "the window argument")?;
        let (handle, base) = window::create(comm, flavor, disp_unit, info)?;
        // SAFETY: the application's out pointers (`baseptr` is a `void **` in C).
        unsafe {
            if !baseptr.is_null() {
                *baseptr.cast::<*mut c_void>() = base;
            }
            *win = handle;
        }
        Ok(())
    })
}

fn size_of_window(size: i64) -> MpiResult<usize> {
    usize::try_from(size).map_err(|_| MpiError::new(int!(MPI_ERR_SIZE), "negative window size"))
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_allocate(
        size: MPI_Aint,
        disp_unit: c_int,
        info: MPI_Info,
        comm: MPI_Comm,
        baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Allocate(size as i64);
        new_window(
            "MPI_Win_allocate",
            comm,
            flavor,
            disp_unit.into(),
            info,
            baseptr,
            win,
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_allocate_shared(
        size: MPI_Aint,
        disp_unit: c_int,
        info: MPI_Info,
        comm: MPI_Comm,
        baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Shared(size as i64);
        new_window(
            "MPI_Win_allocate_shared",
            comm,
            flavor,
            disp_unit.into(),
            info,
            baseptr,
            win,
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_create(
        base: *mut c_void,
        size: MPI_Aint,
        disp_unit: c_int,
        info: MPI_Info,
        comm: MPI_Comm,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Create(base as usize, size as i64);
        new_window(
            "MPI_Win_create",
            comm,
            flavor,
            disp_unit.into(),
            info,
            std::ptr::null_mut(),
            win,
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_create_dynamic(
        info: MPI_Info,
        comm: MPI_Comm,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Dynamic;
        new_window(
            "MPI_Win_create_dynamic",
            comm,
            flavor,
            1,
            info,
            std::ptr::null_mut(),
            win,
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_free(win: *mut MPI_Win) -> c_int {
        if win.is_null() {
            let e = MpiError::new(int!(MPI_ERR_ARG), "the window argument is NULL");
            // SAFETY: a constant of the ABI layer.
            return error::raise_on_comm("MPI_Win_free", unsafe { sys::rmampi_comm_self() }, &e);
        }
        // SAFETY: checked non-null above: the application's handle.
        let handle = unsafe { *win };
        let handler = window::errhandler_of(handle);
        match guarded("MPI_Win_free", || window::free(handle)) {
            Ok(()) => {
                // SAFETY: as above; a constant of the ABI layer.
                unsafe { *win = sys::rmampi_win_null() };
                SUCCESS
            }
            Err(e) => match handler {
                Some(h) => error::raise_on_window("MPI_Win_free", handle, h, &e),
                // SAFETY: a constant of the ABI layer.
                None => error::raise_on_comm("MPI_Win_free", unsafe { sys::rmampi_comm_self() }, &e),
            },
        }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) -> c_int {
        on_window("MPI_Win_attach", win, |w| {
            let n = size_of_window(size as i64)?;
            if !w.is_dynamic() {
                return Err(MpiError::new(
                    int!(MPI_ERR_RMA_FLAVOR),
                    "MPI_Win_attach on a window not from MPI_Win_create_dynamic",
                ));
            }
            w.rma
                .attach_memory(Box::new(window::AppMemory::new(base, n)))
                .map_err(|e| {
                    let mut e = MpiError::from(e);
                    e.class = int!(MPI_ERR_RMA_ATTACH);
                    e
                })?;
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_detach(win: MPI_Win, base: *const c_void) -> c_int {
        on_window("MPI_Win_detach", win, |w| {
            if !w.is_dynamic() {
                return Err(MpiError::new(
                    int!(MPI_ERR_RMA_FLAVOR),
                    "MPI_Win_detach on a window not from MPI_Win_create_dynamic",
                ));
            }
            w.rma.detach_memory(base as u64).map(drop).map_err(|e| {
                let mut e = MpiError::from(e);
                e.class = int!(MPI_ERR_RMA_ATTACH);
                e
            })
        })
    }
}

fn shared_query(w: &Win, rank: c_int) -> MpiResult<(MPI_Aint, i64, *mut c_void)> {
    let rank = if rank == proc_null() {
        // The lowest rank with memory (MPI-4.1 12.2.3).
        match w.sizes.iter().position(|&s| s > 0) {
            Some(r) => r as Rank,
            None => {
                return Ok((
                    0,
                    w.disp_units.first().copied().unwrap_or(1) as i64,
                    std::ptr::null_mut(),
                ))
            }
        }
    } else {
        rank_of(rank).and_then(|r| {
            if (r as usize) < w.size {
                Ok(r)
            } else {
                Err(MpiError::new(
                    int!(MPI_ERR_RANK),
                    format!("rank {r} is outside the window's group"),
                ))
            }
        })?
    };
    let size = w.sizes[rank as usize] as MPI_Aint;
    let unit = w.disp_units[rank as usize] as i64;
    if size == 0 {
        // No memory at that rank: no base either (MPI-4.1 12.2.3).
        return Ok((0, unit, std::ptr::null_mut()));
    }
    if w.flavor() == int!(MPI_WIN_FLAVOR_SHARED) {
        let (base, _) = w.rma.shared_query(rank)?;
        return Ok((size, unit, base as *mut c_void));
    }
    if w.flavor() == int!(MPI_WIN_FLAVOR_ALLOCATE) {
        // MPI-4.1 12.2.3: any flavor's memory that this process can load and store (a
        // window of MPI_Win_allocate on shared memory is mapped here).
        if let Ok((base, _)) = w.rma.shared_query(rank) {
            return Ok((size, unit, base as *mut c_void));
        }
    }
    if rank as usize == w.rank && !w.is_dynamic() {
        return Ok((size, unit, w.attr_base as *mut c_void));
    }
    // Not memory this process loads and stores (MPI-4.1: size 0, no base).
    Ok((0, unit, std::ptr::null_mut()))
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_shared_query(
        win: MPI_Win,
        rank: c_int,
        size: *mut MPI_Aint,
        disp_unit: *mut c_int,
        baseptr: *mut c_void,
    ) -> c_int {
        on_window("MPI_Win_shared_query", win, |w| {
            let (s, u, b) = shared_query(w, rank)?;
            // SAFETY: the application's out pointers (`baseptr` is a `void **`).
            unsafe {
                *out_ptr(size, "size")? = s;
                *out_ptr(disp_unit, "disp_unit")? = u as c_int;
                *out_ptr(baseptr.cast::<*mut c_void>(), "baseptr")? = b;
            }
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_get_group(win: MPI_Win, group: *mut MPI_Group) -> c_int {
        on_window("MPI_Win_get_group", win, |w| {
            let out = out_ptr(group, "group")?;
            let ranks: Vec<c_int> = (0..w.size as c_int).collect();
            // SAFETY: the window's group; `out` checked non-null.
            unsafe { sys::PMPI_Group_incl(w.group.0, ranks.len() as c_int, ranks.as_ptr(), out) };
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_get_attr(
        win: MPI_Win,
        keyval: c_int,
        value: *mut c_void,
        flag: *mut c_int,
    ) -> c_int {
        on_window("MPI_Win_get_attr", win, |w| {
            let value = out_ptr(value.cast::<*mut c_void>(), "attribute_val")?;
            let flag = out_ptr(flag, "flag")?;
            let found: Option<*mut c_void> = if keyval == int!(MPI_WIN_BASE) {
                Some(w.attr_base as *mut c_void)
            } else if keyval == int!(MPI_WIN_SIZE) {
                Some(&*w.attr_size as *const MPI_Aint as *mut c_void)
            } else if keyval == int!(MPI_WIN_DISP_UNIT) {
                Some(&*w.attr_disp_unit as *const c_int as *mut c_void)
            } else if keyval == int!(MPI_WIN_CREATE_FLAVOR) {
                Some(&*w.attr_flavor as *const c_int as *mut c_void)
            } else if keyval == int!(MPI_WIN_MODEL) {
                Some(&*w.attr_model as *const c_int as *mut c_void)
            } else {
                window::check_keyval(keyval)?;
                w.attrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&keyval)
                    .map(|&v| v as *mut c_void)
            };
            // SAFETY: checked non-null out pointers of the application.
            unsafe {
                *flag = c_int::from(found.is_some());
                if let Some(v) = found {
                    *value = v;
                }
            }
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_set_attr(
        win: MPI_Win,
        keyval: c_int,
        value: *mut c_void,
    ) -> c_int {
        on_window("MPI_Win_set_attr", win, |w| {
            window::set_attr(w, keyval, value as usize)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_delete_attr(win: MPI_Win, keyval: c_int) -> c_int {
        on_window("MPI_Win_delete_attr", win, |w| {
            window::delete_attr(w, keyval)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_create_keyval(
        _copy: MPI_Win_copy_attr_function,
        delete: MPI_Win_delete_attr_function,
        keyval: *mut c_int,
        extra_state: *mut c_void,
    ) -> c_int {
        // SAFETY: a constant of the ABI layer.
        on_comm(
            "MPI_Win_create_keyval",
            unsafe { sys::rmampi_comm_self() },
            || {
                let k = window::create_keyval(delete, extra_state as usize);
                // SAFETY: the application's out pointer, checked.
                unsafe { *out_ptr(keyval, "keyval")? = k };
                Ok(())
            },
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
        // SAFETY: a constant of the ABI layer.
        on_comm(
            "MPI_Win_free_keyval",
            unsafe { sys::rmampi_comm_self() },
            || {
                let k = out_ptr(keyval, "keyval")?;
                // SAFETY: checked non-null.
                unsafe {
                    window::free_keyval(*k)?;
                    *k = int!(MPI_KEYVAL_INVALID);
                }
                Ok(())
            },
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_set_name(win: MPI_Win, name: *const c_char) -> c_int {
        on_window("MPI_Win_set_name", win, |w| {
            let name = out_ptr(name as *mut c_char, "name")?;
            // SAFETY: a NUL-terminated string of the application.
            let s = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            *w.name.lock().unwrap_or_else(|e| e.into_inner()) = s;
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_get_name(
        win: MPI_Win,
        name: *mut c_char,
        len: *mut c_int,
    ) -> c_int {
        // MPI-4.1 7.8: the null handle's name is its own.
        // SAFETY: a comparison with a constant of the ABI layer.
        if unsafe { sys::rmampi_is_win_null(win) } != 0 {
            // SAFETY: a constant of the ABI layer.
            let comm_self = unsafe { sys::rmampi_comm_self() };
            return on_comm("MPI_Win_get_name", comm_self, || {
                write_name(name, len, "MPI_WIN_NULL")
            });
        }
        on_window("MPI_Win_get_name", win, |w| {
            let s = w.name.lock().unwrap_or_else(|e| e.into_inner()).clone();
            write_name(name, len, &s)
        })
    }
}

/// An object's name into MPI_*_get_name's `name` (MPI_MAX_OBJECT_NAME bytes, cut to fit
/// with its terminating zero) and its length into `len`.
fn write_name(name: *mut c_char, len: *mut c_int, s: &str) -> MpiResult<()> {
    let name = out_ptr(name, "name")?;
    let len = out_ptr(len, "resultlen")?;
    let max = int!(MPI_MAX_OBJECT_NAME) as usize - 1;
    let bytes = &s.as_bytes()[..s.len().min(max)];
    // SAFETY: MPI's contract: `name` has MPI_MAX_OBJECT_NAME bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), bytes.len());
        *name.add(bytes.len()) = 0;
        *len = bytes.len() as c_int;
    }
    Ok(())
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_set_info(win: MPI_Win, info: MPI_Info) -> c_int {
        // Info keys are hints: MPI's are kept (MPI_Win_get_info says them back), none
        // changes what rma does; others are ignored (MPI-4.1 12.2.7).
        on_window("MPI_Win_set_info", win, |w| {
            w.apply_info(info);
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_get_info(win: MPI_Win, info: *mut MPI_Info) -> c_int {
        on_window("MPI_Win_get_info", win, |w| {
            let info = out_ptr(info, "info_used")?;
            let keys = w.hints.lock().unwrap_or_else(|e| e.into_inner()).clone();
            // SAFETY: `info` checked non-null; NUL-terminated keys and values.
            unsafe {
                sys::PMPI_Info_create(info);
                for (k, v) in keys {
                    let k = std::ffi::CString::new(k).unwrap_or_default();
                    let v = std::ffi::CString::new(v).unwrap_or_default();
                    sys::PMPI_Info_set(*info, k.as_ptr(), v.as_ptr());
                }
            }
            Ok(())
        })
    }
}

// ---- error handlers -----------------------------------------------------------------

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_create_errhandler(
        function: MPI_Win_errhandler_function,
        handler: *mut MPI_Errhandler,
    ) -> c_int {
        // SAFETY: a constant of the ABI layer.
        on_comm(
            "MPI_Win_create_errhandler",
            unsafe { sys::rmampi_comm_self() },
            || {
                let out = out_ptr(handler, "errhandler")?;
                let f = function.ok_or_else(|| MpiError::new(int!(MPI_ERR_ARG), "NULL function"))?;
                // SAFETY: MPI makes a handle for the function; it never calls it, since no
                // window of MPI's exists (librma-mpi calls it, as a window handler). Both are C
                // function pointers of one shape but for the handle's type.
                let as_comm: MPI_Comm_errhandler_function = unsafe { std::mem::transmute(function) };
                // SAFETY: `out` checked non-null.
                if unsafe { sys::PMPI_Comm_create_errhandler(as_comm, out) } != 0 {
                    return Err(MpiError::new(
                        int!(MPI_ERR_OTHER),
                        "MPI could not make the handler",
                    ));
                }
                // SAFETY: as above.
                error::register_handler(unsafe { *out }, f);
                Ok(())
            },
        )
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_set_errhandler(win: MPI_Win, handler: MPI_Errhandler) -> c_int {
        on_window("MPI_Win_set_errhandler", win, |w| {
            if !error::is_window_handler(handler) {
                return Err(MpiError::new(
                    int!(MPI_ERR_ARG),
                    "not an error handler for windows",
                ));
            }
            w.errhandler.lock().unwrap_or_else(|e| e.into_inner()).0 = handler;
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_get_errhandler(
        win: MPI_Win,
        handler: *mut MPI_Errhandler,
    ) -> c_int {
        on_window("MPI_Win_get_errhandler", win, |w| {
            let out = out_ptr(handler, "errhandler")?;
            // SAFETY: checked non-null.
            unsafe { *out = w.errhandler.lock().unwrap_or_else(|e| e.into_inner()).0 };
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_call_errhandler(win: MPI_Win, code: c_int) -> c_int {
        match window::errhandler_of(win) {
            Some(h) => {
                let e = MpiError::new(code, "MPI_Win_call_errhandler");
                error::raise_on_window("MPI_Win_call_errhandler", win, h, &e);
                SUCCESS
            }
            None => {
                let e = MpiError::new(int!(MPI_ERR_WIN), "invalid window handle");
                // SAFETY: a constant of the ABI layer.
                error::raise_on_comm(
                    "MPI_Win_call_errhandler",
                    unsafe { sys::rmampi_comm_self() },
                    &e,
                )
            }
        }
    }
}

// ---- synchronization ------------------------------------------------------------------

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_fence(assert: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_fence", win, |w| w.fence(assert))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_start(group: MPI_Group, assert: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_start", win, |w| w.start(group, assert))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_complete(win: MPI_Win) -> c_int {
        on_window("MPI_Win_complete", win, Win::complete)
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_post(group: MPI_Group, assert: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_post", win, |w| w.post(group, assert))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_wait(win: MPI_Win) -> c_int {
        on_window("MPI_Win_wait", win, Win::wait)
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_test(win: MPI_Win, flag: *mut c_int) -> c_int {
        on_window("MPI_Win_test", win, |w| {
            let flag = out_ptr(flag, "flag")?;
            let done = w.test()?;
            // SAFETY: checked non-null.
            unsafe { *flag = c_int::from(done) };
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_lock(
        lock_type: c_int,
        rank: c_int,
        assert: c_int,
        win: MPI_Win,
    ) -> c_int {
        on_window("MPI_Win_lock", win, |w| {
            if rank == proc_null() {
                return Ok(());
            }
            w.lock(lock_type, rank_of(rank)?, assert)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_unlock(rank: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_unlock", win, |w| {
            if rank == proc_null() {
                return Ok(());
            }
            w.unlock(rank_of(rank)?)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_lock_all(assert: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_lock_all", win, |w| w.lock_all(assert))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_unlock_all(win: MPI_Win) -> c_int {
        on_window("MPI_Win_unlock_all", win, Win::unlock_all)
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_flush(rank: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_flush", win, |w| {
            if rank == proc_null() {
                return Ok(());
            }
            w.flush(rank_of(rank)?, false)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_flush_local(rank: c_int, win: MPI_Win) -> c_int {
        on_window("MPI_Win_flush_local", win, |w| {
            if rank == proc_null() {
                return Ok(());
            }
            w.flush(rank_of(rank)?, true)
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_flush_all(win: MPI_Win) -> c_int {
        on_window("MPI_Win_flush_all", win, |w| w.flush_all(false))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_flush_local_all(win: MPI_Win) -> c_int {
        on_window("MPI_Win_flush_local_all", win, |w| w.flush_all(true))
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_sync(win: MPI_Win) -> c_int {
        on_window("MPI_Win_sync", win, |w| w.rma.sync().map_err(Into::into))
    }
}

// ---- communication ----------------------------------------------------------------------

/// The body of every put, get and accumulate: MPI_PROC_NULL targets do nothing (once
/// the window and datatypes are checked).
///
/// The common call (one predefined contiguous datatype and one count on both sides, a
/// put or a get) goes straight to the window, inline; the rest out of line, whose frame
/// the common call then does not pay.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn communicate(
    w: &Win,
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    disp: MPI_Aint,
    tgt: (i64, MPI_Datatype),
    what: Comm,
) -> MpiResult<Option<Shared>> {
    if let Comm::GetAccumulate(op, result) = what {
        // The common fetching call: the result buffer as the origin's, MPI_NO_OP aside
        // (its origin arguments are ignored, often MPI_DATATYPE_NULL).
        if op != NO_OP
            && result.1 == origin.1
            && sys::datatype_key(result.2) == sys::datatype_key(origin.2)
        {
            if let Some((n, flat)) = contiguous_both(origin, rank, tgt) {
                return w.get_accumulate_contiguous(
                    origin.0.cast(),
                    result.0 as *mut u8,
                    n,
                    flat,
                    acc_op(op)?,
                    rank_of(rank)?,
                    disp as i64,
                );
            }
        }
    }
    if matches!(what, Comm::Put | Comm::Get | Comm::Accumulate(_)) {
        if let Some((n, flat)) = contiguous_both(origin, rank, tgt) {
            // The common call: one predefined contiguous datatype, one count, both sides.
            let (addr, rank, disp) = (origin.0.cast(), rank_of(rank)?, disp as i64);
            return match what {
                Comm::Put => w.put_contiguous(addr, n, rank, disp),
                Comm::Get => w.get_contiguous(addr, n, rank, disp),
                Comm::Accumulate(op) => w
                    .accumulate_contiguous(addr, n, flat, acc_op(op)?, rank, disp)
                    .map(|()| None),
                Comm::GetAccumulate(..) | Comm::PutNotify(_) | Comm::GetNotify(_) => {
                    unreachable!("not taken here")
                }
            };
        }
    }

    communicate_described(w, origin, rank, disp, tgt, what)
}

/// [`communicate`] of any call: origin and target described (datatypes flattened,
/// counts checked), then the window's op for them.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn communicate_described(
    w: &Win,
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    disp: MPI_Aint,
    tgt: (i64, MPI_Datatype),
    what: Comm,
) -> MpiResult<Option<Shared>> {
    let o = match what {
        // MPI_NO_OP ignores the origin's arguments (MPI_DATATYPE_NULL is common there).
        Comm::GetAccumulate(op, _) if op == NO_OP => Buffer {
            addr: std::ptr::null(),
            count: 0,
            flat: datatype::nothing(),
        },
        _ => buffer(origin.0, origin.1, origin.2, "origin count")?,
    };
    if rank == proc_null() {
        datatype::flat(tgt.1)?;
        return Ok(None);
    }
    let t = if sys::datatype_key(tgt.1) == sys::datatype_key(origin.2) && o.count > 0 {
        // The usual call names one datatype on both sides: looked up once.
        Target {
            rank: rank_of(rank)?,
            disp: disp as i64,
            count: count(tgt.0, "target count")?,
            flat: o.flat.clone(),
        }
    } else {
        target(rank, disp, tgt.0, tgt.1)?
    };
    match what {
        Comm::Put => w.rput(&o, &t),
        Comm::Get => w.get(&o, &t),
        Comm::Accumulate(op) => w.accumulate(&o, acc_op(op)?, &t).map(|()| None),
        Comm::GetAccumulate(op, result) => {
            let r = buffer(result.0, result.1, result.2, "result count")?;
            w.get_accumulate(&o, &r, acc_op(op)?, &t)
        }
        Comm::PutNotify(index) => w.put_notify(&o, &t, notify_index(index)?).map(|()| None),
        Comm::GetNotify(index) => w.get_notify(&o, &t, notify_index(index)?),
    }
}

/// The bytes of a call whose origin and target name one predefined contiguous datatype
/// and one positive count (not MPI_PROC_NULL): what it moves in one run each side, and
/// the datatype. `None` for every other call (the general path then checks and
/// describes both).
#[inline(always)]
fn contiguous_both(
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    tgt: (i64, MPI_Datatype),
) -> Option<(usize, &'static datatype::Flat)> {
    if origin.1 <= 0
        || origin.1 != tgt.0
        || sys::datatype_key(origin.2) != sys::datatype_key(tgt.1)
        || rank == proc_null()
    {
        return None;
    }
    let f = match datatype::predefined_flat(origin.2) {
        Some(f) => f,
        // Not seen yet, or not predefined: looked up (and remembered) the long way.
        None => match datatype::flat(origin.2) {
            Ok(datatype::FlatRef::Predefined(f)) => f,
            _ => return None,
        },
    };
    if !f.contiguous(origin.1 as usize) {
        return None;
    }
    let n = (origin.1 as usize).checked_mul(f.size).filter(|&n| n > 0)?;
    Some((n, f))
}

/// Which communication call.
#[derive(Clone, Copy)]
enum Comm {
    Put,
    Get,
    Accumulate(c_int),
    GetAccumulate(c_int, (*const c_void, i64, MPI_Datatype)),
    /// A notified put or get (issue #28): the target's counter.
    PutNotify(c_int),
    GetNotify(c_int),
}

#[inline]
fn op_code(op: MPI_Op) -> c_int {
    // SAFETY: the ABI layer compares the handle with predefined ones.
    unsafe { sys::rmampi_op_code(op) }
}

/// A communication call without a request.
///
/// `what` names the call as a closure, not a [`Comm`] value: each MPI function's call
/// is then an instance of its own, where the kind is a constant and the paths of the
/// other kinds fold away (one instance for all kept a 73 KiB body that matched on the
/// kind and copied every argument of every kind, on every call).
#[allow(clippy::too_many_arguments)]
#[inline]
fn call(
    name: &str,
    win: MPI_Win,
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    disp: MPI_Aint,
    tgt: (i64, MPI_Datatype),
    what: impl Fn() -> Comm,
) -> c_int {
    on_window(name, win, |w| {
        communicate(w, origin, rank, disp, tgt, what()).map(drop)
    })
}

/// A communication call with a request (the R* forms).
#[allow(clippy::too_many_arguments)]
fn call_with_request(
    name: &str,
    win: MPI_Win,
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    disp: MPI_Aint,
    tgt: (i64, MPI_Datatype),
    what: impl Fn() -> Comm,
    request: *mut MPI_Request,
) -> c_int {
    on_window(name, win, |w| {
        let out = out_ptr(request, "request")?;
        let c = communicate(w, origin, rank, disp, tgt, what())?;
        let handle = request::new_request(c)?;
        // SAFETY: checked non-null.
        unsafe { *out = handle };
        Ok(())
    })
}

macro_rules! communication_calls {
    ($count:ty, $put:ident, $get:ident, $acc:ident, $getacc:ident, $rput:ident, $rget:ident,
     $racc:ident, $rgetacc:ident) => {
        mpi_and_pmpi! {
            pub unsafe extern "C" fn $put(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                win: MPI_Win,
            ) -> c_int {
                call(
                    stringify!($put),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Put,
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $get(
                origin_addr: *mut c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                win: MPI_Win,
            ) -> c_int {
                call(
                    stringify!($get),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Get,
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $acc(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                op: MPI_Op,
                win: MPI_Win,
            ) -> c_int {
                call(
                    stringify!($acc),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Accumulate(op_code(op)),
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $getacc(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                result_addr: *mut c_void,
                result_count: $count,
                result_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                op: MPI_Op,
                win: MPI_Win,
            ) -> c_int {
                call(
                    stringify!($getacc),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || {
                        Comm::GetAccumulate(
                            op_code(op),
                            (result_addr, result_count as i64, result_datatype),
                        )
                    },
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $rput(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                win: MPI_Win,
                request: *mut MPI_Request,
            ) -> c_int {
                call_with_request(
                    stringify!($rput),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Put,
                    request,
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $rget(
                origin_addr: *mut c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                win: MPI_Win,
                request: *mut MPI_Request,
            ) -> c_int {
                call_with_request(
                    stringify!($rget),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Get,
                    request,
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $racc(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                op: MPI_Op,
                win: MPI_Win,
                request: *mut MPI_Request,
            ) -> c_int {
                call_with_request(
                    stringify!($racc),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || Comm::Accumulate(op_code(op)),
                    request,
                )
            }
        }

        mpi_and_pmpi! {
            pub unsafe extern "C" fn $rgetacc(
                origin_addr: *const c_void,
                origin_count: $count,
                origin_datatype: MPI_Datatype,
                result_addr: *mut c_void,
                result_count: $count,
                result_datatype: MPI_Datatype,
                target_rank: c_int,
                target_disp: MPI_Aint,
                target_count: $count,
                target_datatype: MPI_Datatype,
                op: MPI_Op,
                win: MPI_Win,
                request: *mut MPI_Request,
            ) -> c_int {
                call_with_request(
                    stringify!($rgetacc),
                    win,
                    (origin_addr, origin_count as i64, origin_datatype),
                    target_rank,
                    target_disp,
                    (target_count as i64, target_datatype),
                    || {
                        Comm::GetAccumulate(
                            op_code(op),
                            (result_addr, result_count as i64, result_datatype),
                        )
                    },
                    request,
                )
            }
        }
    };
}

communication_calls!(
    c_int,
    MPI_Put,
    MPI_Get,
    MPI_Accumulate,
    MPI_Get_accumulate,
    MPI_Rput,
    MPI_Rget,
    MPI_Raccumulate,
    MPI_Rget_accumulate
);

#[cfg(large_count)]
communication_calls!(
    MPI_Count,
    MPI_Put_c,
    MPI_Get_c,
    MPI_Accumulate_c,
    MPI_Get_accumulate_c,
    MPI_Rput_c,
    MPI_Rget_c,
    MPI_Raccumulate_c,
    MPI_Rget_accumulate_c
);

#[cfg(large_count)]
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_allocate_c(
        size: MPI_Aint,
        disp_unit: MPI_Aint,
        info: MPI_Info,
        comm: MPI_Comm,
        baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Allocate(size as i64);
        new_window(
            "MPI_Win_allocate_c",
            comm,
            flavor,
            disp_unit as i64,
            info,
            baseptr,
            win,
        )
    }
}

#[cfg(large_count)]
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_allocate_shared_c(
        size: MPI_Aint,
        disp_unit: MPI_Aint,
        info: MPI_Info,
        comm: MPI_Comm,
        baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Shared(size as i64);
        new_window(
            "MPI_Win_allocate_shared_c",
            comm,
            flavor,
            disp_unit as i64,
            info,
            baseptr,
            win,
        )
    }
}

#[cfg(large_count)]
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_create_c(
        base: *mut c_void,
        size: MPI_Aint,
        disp_unit: MPI_Aint,
        info: MPI_Info,
        comm: MPI_Comm,
        win: *mut MPI_Win,
    ) -> c_int {
        let flavor = Flavor::Create(base as usize, size as i64);
        new_window(
            "MPI_Win_create_c",
            comm,
            flavor,
            disp_unit as i64,
            info,
            std::ptr::null_mut(),
            win,
        )
    }
}

#[cfg(large_count)]
mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Win_shared_query_c(
        win: MPI_Win,
        rank: c_int,
        size: *mut MPI_Aint,
        disp_unit: *mut MPI_Aint,
        baseptr: *mut c_void,
    ) -> c_int {
        on_window("MPI_Win_shared_query_c", win, |w| {
            let (s, u, b) = shared_query(w, rank)?;
            // SAFETY: the application's out pointers (`baseptr` is a `void **`).
            unsafe {
                *out_ptr(size, "size")? = s;
                *out_ptr(disp_unit, "disp_unit")? = u as MPI_Aint;
                *out_ptr(baseptr.cast::<*mut c_void>(), "baseptr")? = b;
            }
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Fetch_and_op(
        origin_addr: *const c_void,
        result_addr: *mut c_void,
        datatype: MPI_Datatype,
        target_rank: c_int,
        target_disp: MPI_Aint,
        op: MPI_Op,
        win: MPI_Win,
    ) -> c_int {
        on_window("MPI_Fetch_and_op", win, |w| {
            let derived;
            let flat = match datatype::predefined_flat(datatype) {
                Some(f) => f,
                None => {
                    derived = datatype::flat(datatype)?;
                    &*derived
                }
            };
            let op = acc_op(op_code(op))?;
            if target_rank == proc_null() {
                return Ok(());
            }
            let result = out_ptr(result_addr, "result_addr")?;
            w.fetch_and_op(
                origin_addr.cast(),
                result.cast(),
                flat,
                op,
                rank_of(target_rank)?,
                target_disp as i64,
            )
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Compare_and_swap(
        origin_addr: *const c_void,
        compare_addr: *const c_void,
        result_addr: *mut c_void,
        datatype: MPI_Datatype,
        target_rank: c_int,
        target_disp: MPI_Aint,
        win: MPI_Win,
    ) -> c_int {
        on_window("MPI_Compare_and_swap", win, |w| {
            let derived;
            let flat = match datatype::predefined_flat(datatype) {
                Some(f) => f,
                None => {
                    derived = datatype::flat(datatype)?;
                    &*derived
                }
            };
            if target_rank == proc_null() {
                return Ok(());
            }
            let origin = out_ptr(origin_addr as *mut c_void, "origin_addr")?;
            let compare = out_ptr(compare_addr as *mut c_void, "compare_addr")?;
            let result = out_ptr(result_addr, "result_addr")?;
            w.compare_and_swap(
                origin.cast(),
                compare.cast(),
                result.cast(),
                flat,
                rank_of(target_rank)?,
                target_disp as i64,
            )
        })
    }
}

// ---- requests ------------------------------------------------------------------------------

fn on_request(call: &str, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    // SAFETY: a constant of the ABI layer.
    on_comm(call, unsafe { sys::rmampi_comm_self() }, f)
}

/// The slab index of the request `req` points to, if it is one of ours.
///
/// # Safety
/// `req` is null or the application's valid request pointer.
unsafe fn ours_at(req: *const MPI_Request) -> Option<usize> {
    if req.is_null() {
        return None;
    }
    // SAFETY: non-null: the caller's valid pointer.
    request::ours(unsafe { *req })
}

/// The requests of `reqs[..n]` that are ours.
unsafe fn any_ours(reqs: *mut MPI_Request, n: c_int) -> bool {
    // SAFETY: MPI's contract: `n` requests.
    (0..n.max(0) as usize).any(|i| request::ours(unsafe { *reqs.add(i) }).is_some())
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Wait(req: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
        // SAFETY: the application's request pointer (MPI checks it on its path).
        match unsafe { ours_at(req) } {
            // SAFETY: the application's pointers.
            Some(i) => on_request("MPI_Wait", || unsafe { request::wait(i, req, status) }),
            // SAFETY: passed on.
            None => unsafe { sys::next::PMPI_Wait(req, status) },
        }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Test(
        req: *mut MPI_Request,
        flag: *mut c_int,
        status: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: as in MPI_Wait.
        match unsafe { ours_at(req) } {
            Some(i) => on_request("MPI_Test", || {
                let flag = out_ptr(flag, "flag")?;
                // SAFETY: the application's pointers.
                let done = unsafe { request::test_one(i, req, status)? };
                // SAFETY: checked non-null.
                unsafe { *flag = c_int::from(done) };
                Ok(())
            }),
            // SAFETY: passed on.
            None => unsafe { sys::next::PMPI_Test(req, flag, status) },
        }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Request_free(req: *mut MPI_Request) -> c_int {
        // SAFETY: as in MPI_Wait.
        match unsafe { ours_at(req) } {
            Some(i) => {
                request::free(i);
                // SAFETY: the application's pointer; a constant of the ABI layer.
                unsafe { *req = sys::rmampi_request_null() };
                SUCCESS
            }
            // SAFETY: passed on.
            None => unsafe { sys::next::PMPI_Request_free(req) },
        }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Request_get_status(
        req: MPI_Request,
        flag: *mut c_int,
        status: *mut MPI_Status,
    ) -> c_int {
        match request::ours(req) {
            Some(i) => on_request("MPI_Request_get_status", || {
                let flag = out_ptr(flag, "flag")?;
                let done = request::is_complete(i)?;
                // SAFETY: the application's pointers.
                unsafe {
                    *flag = c_int::from(done);
                    if done {
                        sys::rmampi_empty_status(status);
                    }
                }
                Ok(())
            }),
            // SAFETY: passed on.
            None => unsafe { sys::next::PMPI_Request_get_status(req, flag, status) },
        }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Waitall(
        n: c_int,
        reqs: *mut MPI_Request,
        statuses: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Waitall(n, reqs, statuses) };
        }
        on_request("MPI_Waitall", || {
            for i in 0..n {
                // SAFETY: `i < n`: the application's arrays (statuses may be IGNORE).
                unsafe {
                    let r = reqs.add(i as usize);
                    let s = sys::rmampi_status_at(statuses, i);
                    match request::ours(*r) {
                        Some(k) => request::wait(k, r, s)?,
                        None => {
                            let rc = sys::next::PMPI_Wait(r, s);
                            if rc != SUCCESS {
                                return Err(MpiError::new(rc, "MPI_Wait of a request in MPI_Waitall"));
                            }
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Testall(
        n: c_int,
        reqs: *mut MPI_Request,
        flag: *mut c_int,
        statuses: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Testall(n, reqs, flag, statuses) };
        }
        on_request("MPI_Testall", || {
            let flag = out_ptr(flag, "flag")?;
            // All or nothing: ours first (they complete without being freed), then MPI's,
            // which MPI frees only when all of them are complete.
            // SAFETY: `i < n` in each access: the application's arrays.
            unsafe {
                for i in 0..n as usize {
                    if let Some(k) = request::ours(*reqs.add(i)) {
                        if !request::is_complete(k)? {
                            *flag = 0;
                            return Ok(());
                        }
                    }
                }
                let theirs: Vec<usize> = (0..n as usize)
                    .filter(|&i| request::ours(*reqs.add(i)).is_none())
                    .collect();
                let mut their_reqs: Vec<MPI_Request> = theirs.iter().map(|&i| *reqs.add(i)).collect();
                let mut their_statuses: Vec<MPI_Status> = vec![std::mem::zeroed(); theirs.len()];
                let mut done: c_int = 0;
                let rc = sys::next::PMPI_Testall(
                    theirs.len() as c_int,
                    their_reqs.as_mut_ptr(),
                    &mut done,
                    their_statuses.as_mut_ptr(),
                );
                if rc != SUCCESS {
                    return Err(MpiError::new(rc, "MPI_Testall of MPI's requests"));
                }
                if done == 0 {
                    *flag = 0;
                    return Ok(());
                }
                for (j, &i) in theirs.iter().enumerate() {
                    *reqs.add(i) = their_reqs[j];
                    let s = sys::rmampi_status_at(statuses, i as c_int);
                    if s != sys::rmampi_status_ignore() {
                        *s = their_statuses[j];
                    }
                }
                for i in 0..n {
                    let r = reqs.add(i as usize);
                    if let Some(k) = request::ours(*r) {
                        request::wait(k, r, sys::rmampi_status_at(statuses, i))?;
                    }
                }
                *flag = 1;
            }
            Ok(())
        })
    }
}

/// One pass over `reqs` for the any/some calls: the indices complete now (ours
/// finished, MPI's tested), up to `limit`; `None` when every request is inactive.
unsafe fn complete_some(
    n: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
    limit: usize,
    packed_statuses: bool,
) -> MpiResult<Option<Vec<c_int>>> {
    let mut done = Vec::new();
    let mut active = false;
    // SAFETY: `i < n`: the application's arrays.
    unsafe {
        let null = sys::rmampi_request_null();
        for i in 0..n {
            if done.len() >= limit {
                break;
            }
            let r = reqs.add(i as usize);
            if *r == null {
                continue;
            }
            active = true;
            let at = if packed_statuses {
                done.len() as c_int
            } else {
                i
            };
            let s = sys::rmampi_status_at(statuses, at);
            match request::ours(*r) {
                Some(k) => {
                    if request::test_one(k, r, s)? {
                        done.push(i);
                    }
                }
                None => {
                    let mut flag = 0;
                    let rc = sys::next::PMPI_Test(r, &mut flag, s);
                    if rc != SUCCESS {
                        return Err(MpiError::new(rc, "MPI_Test of one of MPI's requests"));
                    }
                    if flag != 0 {
                        done.push(i);
                    }
                }
            }
        }
    }
    Ok(active.then_some(done))
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Waitany(
        n: c_int,
        reqs: *mut MPI_Request,
        index: *mut c_int,
        status: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Waitany(n, reqs, index, status) };
        }
        on_request("MPI_Waitany", || {
            let index = out_ptr(index, "index")?;
            loop {
                // A status for one request: the same pointer whatever the index.
                // SAFETY: the application's arrays; `status` is one status.
                match unsafe { complete_some_one(n, reqs, status)? } {
                    None => {
                        // SAFETY: checked non-null.
                        unsafe {
                            *index = int!(MPI_UNDEFINED);
                            sys::rmampi_empty_status(status);
                        }
                        return Ok(());
                    }
                    Some(Some(i)) => {
                        // SAFETY: checked non-null.
                        unsafe { *index = i };
                        return Ok(());
                    }
                    Some(None) => std::thread::yield_now(),
                }
            }
        })
    }
}

/// One pass for the any calls: `None` all inactive, `Some(None)` none complete yet,
/// else the index completed (its status in `status`).
unsafe fn complete_some_one(
    n: c_int,
    reqs: *mut MPI_Request,
    status: *mut MPI_Status,
) -> MpiResult<Option<Option<c_int>>> {
    // SAFETY: the caller's arrays; with a limit of one and packed statuses, the one
    // status written is `status` itself (index 0).
    let done = unsafe { complete_some(n, reqs, status, 1, true)? };
    Ok(done.map(|d| d.first().copied()))
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Testany(
        n: c_int,
        reqs: *mut MPI_Request,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Testany(n, reqs, index, flag, status) };
        }
        on_request("MPI_Testany", || {
            let index = out_ptr(index, "index")?;
            let flag = out_ptr(flag, "flag")?;
            // SAFETY: the application's arrays and out pointers.
            unsafe {
                match complete_some_one(n, reqs, status)? {
                    None => {
                        *index = int!(MPI_UNDEFINED);
                        *flag = 1;
                        sys::rmampi_empty_status(status);
                    }
                    Some(Some(i)) => {
                        *index = i;
                        *flag = 1;
                    }
                    Some(None) => {
                        *index = int!(MPI_UNDEFINED);
                        *flag = 0;
                    }
                }
            }
            Ok(())
        })
    }
}

unsafe fn some(
    call: &str,
    wait: bool,
    n: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    on_request(call, || {
        let outcount = out_ptr(outcount, "outcount")?;
        loop {
            // SAFETY: the application's arrays.
            match unsafe { complete_some(n, reqs, statuses, usize::MAX, true)? } {
                None => {
                    // SAFETY: checked non-null.
                    unsafe { *outcount = int!(MPI_UNDEFINED) };
                    return Ok(());
                }
                Some(done) if !done.is_empty() || !wait => {
                    // SAFETY: MPI's contract: `indices` holds `n`.
                    unsafe {
                        *outcount = done.len() as c_int;
                        for (j, i) in done.iter().enumerate() {
                            *indices.add(j) = *i;
                        }
                    }
                    return Ok(());
                }
                Some(_) => std::thread::yield_now(),
            }
        }
    })
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Waitsome(
        n: c_int,
        reqs: *mut MPI_Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Waitsome(n, reqs, outcount, indices, statuses) };
        }
        // SAFETY: the application's arguments.
        unsafe { some("MPI_Waitsome", true, n, reqs, outcount, indices, statuses) }
    }
}

mpi_and_pmpi! {
    pub unsafe extern "C" fn MPI_Testsome(
        n: c_int,
        reqs: *mut MPI_Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
    ) -> c_int {
        // SAFETY: MPI's contract: `n` requests at `reqs`.
        if reqs.is_null() || !unsafe { any_ours(reqs, n) } {
            // SAFETY: passed on.
            return unsafe { sys::next::PMPI_Testsome(n, reqs, outcount, indices, statuses) };
        }
        // SAFETY: the application's arguments.
        unsafe { some("MPI_Testsome", false, n, reqs, outcount, indices, statuses) }
    }
}

// ---- datatypes ------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    // SAFETY: passed on.
    let rc = unsafe { sys::PMPI_Type_commit(datatype) };
    if rc == SUCCESS && !datatype.is_null() {
        // SAFETY: MPI accepted the pointer.
        datatype::committed(unsafe { *datatype });
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    if !datatype.is_null() {
        // SAFETY: the application's pointer, checked non-null.
        datatype::freed(unsafe { *datatype });
    }
    // SAFETY: passed on.
    unsafe { sys::PMPI_Type_free(datatype) }
}

// ----- notified access (issue #28) ----------------------------------------------------
//
// Two spellings of one feature: the MPI Forum's draft (mpi-forum/mpi-issues#59:
// MPI_Put_notify, MPI_Get_notify with the counter before the window, MPI_Win_notify_*)
// and Intel MPI's extension (MPIX_*, the counter after the window). Declared for C in
// include/rma_mpi_notify.h. A notified op's target counter grows by one once the op's
// data is in (for a get: read from) the target's memory; the target reads it with
// MPI_Win_notify_get_value / MPIX_Win_get_notify.

/// A counter index from C: negative ones are refused here, past the target's there.
fn notify_index(index: c_int) -> MpiResult<u32> {
    u32::try_from(index).map_err(|_| {
        MpiError::new(
            int!(MPI_ERR_ARG),
            format!("notification counter {index}: indices start at 0"),
        )
    })
}

fn set_notify_count(call: &str, win: MPI_Win, count: c_int) -> c_int {
    on_window(call, win, |w| {
        let count = u32::try_from(count).map_err(|_| {
            MpiError::new(
                int!(MPI_ERR_ARG),
                format!("{count} notification counters: a count is 0 or more"),
            )
        })?;
        Ok(w.rma.set_notify_count(count)?)
    })
}

fn get_notify_value(call: &str, win: MPI_Win, index: c_int, value: *mut MPI_Count) -> c_int {
    on_window(call, win, |w| {
        let out = out_ptr(value, "value")?;
        let v = w.rma.notify_value(notify_index(index)?)?;
        // SAFETY: checked non-null; MPI's contract: a writable MPI_Count.
        unsafe { *out = v as MPI_Count };
        Ok(())
    })
}

fn set_notify_value(call: &str, win: MPI_Win, index: c_int, value: MPI_Count) -> c_int {
    on_window(call, win, |w| {
        let v = u64::try_from(value).map_err(|_| {
            MpiError::new(
                int!(MPI_ERR_ARG),
                "a notification counter is never negative",
            )
        })?;
        Ok(w.rma.notify_set(notify_index(index)?, v)?)
    })
}

/// MPI_Win_notify_set_num (draft): `num` counters of this process, collectively; 0
/// removes them. The info argument has no key librma-mpi reads.
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_notify_set_num(win: MPI_Win, info: MPI_Info, num: c_int) -> c_int {
    let _ = info;
    set_notify_count("MPI_Win_notify_set_num", win, num)
}

/// MPI_Win_notify_get_value (draft).
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_notify_get_value(
    win: MPI_Win,
    notification_idx: c_int,
    value: *mut MPI_Count,
) -> c_int {
    get_notify_value("MPI_Win_notify_get_value", win, notification_idx, value)
}

/// MPI_Win_notify_set_value (draft).
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_notify_set_value(
    win: MPI_Win,
    notification_idx: c_int,
    value: MPI_Count,
) -> c_int {
    set_notify_value("MPI_Win_notify_set_value", win, notification_idx, value)
}

/// MPIX_Win_create_notify (Intel MPI): `notify_num` counters, collectively.
#[no_mangle]
pub unsafe extern "C" fn MPIX_Win_create_notify(win: MPI_Win, notify_num: c_int) -> c_int {
    set_notify_count("MPIX_Win_create_notify", win, notify_num)
}

/// MPIX_Win_free_notify (Intel MPI): the counters go, collectively.
#[no_mangle]
pub unsafe extern "C" fn MPIX_Win_free_notify(win: MPI_Win) -> c_int {
    set_notify_count("MPIX_Win_free_notify", win, 0)
}

/// MPIX_Win_get_notify (Intel MPI).
#[no_mangle]
pub unsafe extern "C" fn MPIX_Win_get_notify(
    win: MPI_Win,
    notify_idx: c_int,
    value: *mut MPI_Count,
) -> c_int {
    get_notify_value("MPIX_Win_get_notify", win, notify_idx, value)
}

/// MPIX_Win_set_notify (Intel MPI).
#[no_mangle]
pub unsafe extern "C" fn MPIX_Win_set_notify(
    win: MPI_Win,
    notify_idx: c_int,
    value: MPI_Count,
) -> c_int {
    set_notify_value("MPIX_Win_set_notify", win, notify_idx, value)
}

macro_rules! notified_calls {
    ($put:ident, $get:ident, $index_first:tt) => {
        notified_calls!(@one $put, Comm::PutNotify, *const c_void, $index_first);
        notified_calls!(@one $get, Comm::GetNotify, *mut c_void, $index_first);
    };
    (@one $name:ident, $what:path, $addr:ty, true) => {
        /// A notified access, the draft's argument order (the counter, then the window).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            origin_addr: $addr,
            origin_count: c_int,
            origin_datatype: MPI_Datatype,
            target_rank: c_int,
            target_disp: MPI_Aint,
            target_count: c_int,
            target_datatype: MPI_Datatype,
            notification_idx: c_int,
            win: MPI_Win,
        ) -> c_int {
            notified_call(
                stringify!($name),
                win,
                (origin_addr as *const c_void, origin_count as i64, origin_datatype),
                target_rank,
                target_disp,
                (target_count as i64, target_datatype),
                || $what(notification_idx),
            )
        }
    };
    (@one $name:ident, $what:path, $addr:ty, false) => {
        /// A notified access, Intel MPI's argument order (the window, then the counter).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            origin_addr: $addr,
            origin_count: c_int,
            origin_datatype: MPI_Datatype,
            target_rank: c_int,
            target_disp: MPI_Aint,
            target_count: c_int,
            target_datatype: MPI_Datatype,
            win: MPI_Win,
            notification_idx: c_int,
        ) -> c_int {
            notified_call(
                stringify!($name),
                win,
                (origin_addr as *const c_void, origin_count as i64, origin_datatype),
                target_rank,
                target_disp,
                (target_count as i64, target_datatype),
                || $what(notification_idx),
            )
        }
    };
}

/// A notified access call: a put of one predefined contiguous datatype on both sides
/// the way MPI_Put's common call goes ([`communicate`]'s fast path, kept out of it: its
/// code there cost every MPI_Put and MPI_Get 15 instructions, callgrind), anything else
/// as [`call`].
fn notified_call(
    name: &str,
    win: MPI_Win,
    origin: (*const c_void, i64, MPI_Datatype),
    rank: c_int,
    disp: MPI_Aint,
    tgt: (i64, MPI_Datatype),
    what: impl Fn() -> Comm,
) -> c_int {
    on_window(name, win, |w| {
        let what = what();
        if let Comm::PutNotify(index) = what {
            if let Some((n, _)) = contiguous_both(origin, rank, tgt) {
                let (addr, rank, disp) = (origin.0.cast(), rank_of(rank)?, disp as i64);
                return w.put_notify_contiguous(addr, n, rank, disp, notify_index(index)?);
            }
        }
        communicate(w, origin, rank, disp, tgt, what).map(drop)
    })
}

notified_calls!(MPI_Put_notify, MPI_Get_notify, true);
notified_calls!(MPIX_Put_notify, MPIX_Get_notify, false);
