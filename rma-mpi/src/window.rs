//! Windows: the table of librma-mpi's window handles, creation and free over an MPI
//! communicator, attributes, and the per-window state the calls need.
//!
//! An MPI window is an rma `Window<u8>` over an rma communicator with the same members
//! in the same order (the MPI communicator's group translated to MPI_COMM_WORLD ranks,
//! which are rma's World ranks: the World is made over MPI_COMM_WORLD at MPI_Init).
//! rma's displacement unit is the byte; MPI's per-rank units (and sizes) are
//! exchanged at creation and applied at the origin, and rma's target still checks every
//! byte range against its window.

use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rma::{Elements, Rank};

use crate::error::{MpiError, MpiResult};
use crate::handle_table::{self, HandleTable, Unavailable};
use crate::request::Shared;
use crate::sys::{self, int, HandleBits, MPI_Aint, MPI_Comm, MPI_Errhandler, MPI_Group, MPI_Win};

/// The typed views of a window, one per rma element type (accumulates name theirs).
pub struct Views {
    pub u8: Elements<u8>,
    pub u16: Elements<u16>,
    pub u32: Elements<u32>,
    pub u64: Elements<u64>,
    pub i8: Elements<i8>,
    pub i16: Elements<i16>,
    pub i32: Elements<i32>,
    pub i64: Elements<i64>,
    pub f32: Elements<f32>,
    pub f64: Elements<f64>,
    /// The pair types of MINLOC and MAXLOC (MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT,
    /// MPI_2INT, MPI_SHORT_INT).
    pub loc_f32: Elements<rma::LocF32>,
    pub loc_f64: Elements<rma::LocF64>,
    pub loc_i64: Elements<rma::LocI64>,
    pub loc_i32: Elements<rma::LocI32>,
    pub loc_i16: Elements<rma::LocI16>,
    /// MPI_LONG_DOUBLE (x86-64's 80-bit long double, C's arithmetic).
    pub long_double: Elements<rma::LongDouble>,
    /// MPI_LONG_DOUBLE_INT.
    pub loc_long_double: Elements<rma::LocLongDouble>,
    /// MPI_C_FLOAT_COMPLEX (and Fortran's COMPLEX of 4-byte REALs).
    pub complex_f32: Elements<rma::ComplexF32>,
    /// MPI_C_DOUBLE_COMPLEX (and Fortran's DOUBLE COMPLEX).
    pub complex_f64: Elements<rma::ComplexF64>,
    /// MPI_C_LONG_DOUBLE_COMPLEX (two of x86-64's long doubles).
    pub complex_long_double: Elements<rma::ComplexLongDouble>,
}

impl Views {
    fn of(w: &rma::Window<u8>) -> Views {
        Views {
            u8: w.elements(),
            u16: w.elements(),
            u32: w.elements(),
            u64: w.elements(),
            i8: w.elements(),
            i16: w.elements(),
            i32: w.elements(),
            i64: w.elements(),
            f32: w.elements(),
            f64: w.elements(),
            loc_f32: w.elements(),
            loc_f64: w.elements(),
            loc_i64: w.elements(),
            loc_i32: w.elements(),
            loc_i16: w.elements(),
            long_double: w.elements(),
            loc_long_double: w.elements(),
            complex_f32: w.elements(),
            complex_f64: w.elements(),
            complex_long_double: w.elements(),
        }
    }
}

/// An MPI handle kept by a window (a group, an error handler): a plain value of the
/// ABI's handle type.
#[derive(Clone, Copy, PartialEq)]
pub struct Handle<H>(pub H);
// SAFETY: MPI handles are values naming MPI's objects, usable from any thread the
// application's thread level allows; librma-mpi passes them only to MPI.
unsafe impl<H> Send for Handle<H> {}
// SAFETY: as above.
unsafe impl<H> Sync for Handle<H> {}

/// One MPI window: the rma window, its typed views, and the rest ([`WinInfo`], which
/// it derefs to).
pub struct Win {
    pub rma: rma::Window<u8>,
    pub views: Views,
    pub info: WinInfo,
}

impl std::ops::Deref for Win {
    type Target = WinInfo;
    fn deref(&self) -> &WinInfo {
        &self.info
    }
}

/// What librma-mpi keeps of a window besides the rma window.
pub struct WinInfo {
    /// Its handle.
    pub handle: Handle<MPI_Win>,
    /// The communicator's group (MPI_Win_get_group; PSCW groups translate against it).
    pub group: Handle<MPI_Group>,
    /// Members, and this process's rank among them.
    pub size: usize,
    pub rank: usize,
    /// Each member's displacement unit and window size in bytes.
    pub disp_units: Vec<u64>,
    pub sizes: Vec<u64>,
    /// The attributes MPI_Win_get_attr hands out pointers to.
    pub attr_base: usize,
    pub attr_size: Box<MPI_Aint>,
    pub attr_disp_unit: Box<c_int>,
    pub attr_flavor: Box<c_int>,
    pub attr_model: Box<c_int>,
    pub errhandler: Mutex<Handle<MPI_Errhandler>>,
    /// Completions still due, by target.
    pub pending: Mutex<Vec<(Rank, Shared)>>,
    /// Whether `pending` may hold any: a synchronization call with none due (the
    /// common case: puts, and gets complete in the call) takes no lock for them.
    pub any_pending: std::sync::atomic::AtomicBool,
    /// User attributes: keyval to value.
    pub attrs: Mutex<HashMap<c_int, usize>>,
    pub name: Mutex<String>,
    /// The info hints in force (MPI_Win_get_info), as set at creation or by
    /// MPI_Win_set_info; none changes what rma does.
    pub hints: Mutex<Vec<(&'static str, String)>>,
    /// The window's own World, when some member is not in this MPI_COMM_WORLD
    /// (`rma_comm`): kept until the window is freed (last field: dropped after the rest).
    pub own_world: Option<rma::World>,
}

impl Win {
    /// The flavor (MPI_WIN_FLAVOR_*).
    pub fn flavor(&self) -> c_int {
        *self.attr_flavor
    }

    /// Whether this is a dynamic window (displacements are addresses).
    pub fn is_dynamic(&self) -> bool {
        *self.attr_flavor == int!(MPI_WIN_FLAVOR_DYNAMIC)
    }
}

/// The window handles' table: lookups take no lock (`handle_table`).
fn table() -> &'static HandleTable<Win> {
    static TABLE: OnceLock<HandleTable<Win>> = OnceLock::new();
    // rma has 1023 live windows per process (shared memory's lock slots); a few more
    // handles let a program see that error rather than one of ours.
    TABLE.get_or_init(|| HandleTable::new(4096))
}

/// At MPI_Init, before any window: below MPI_THREAD_MULTIPLE no two calls run at once,
/// and the handles' lookups need no thread-local (`HandleTable::calls_one_at_a_time`).
pub fn follow_thread_level() {
    // SAFETY: a plain query, MPI initialized.
    if unsafe { sys::rmampi_thread_level_multiple() } == 0 {
        table().calls_one_at_a_time();
    }
}

/// The table index `handle` names: its distance from the handle of index 0 (the ABI
/// layer's handles are consecutive, `csrc/abi.c`). A handle below or far past them
/// comes out past the table, whose lookup refuses it as any empty index. Computed here
/// rather than by the ABI layer's `rmampi_win_index`: a call per MPI call on a window,
/// which its arithmetic did not need.
#[inline]
fn index_of(handle: MPI_Win) -> MpiResult<usize> {
    let i = handle.0.bits().wrapping_sub(first_window_handle());
    usize::try_from(i).map_err(|_| bad_window())
}

/// The bits of the window handle of index 0, asked of the ABI layer once.
#[inline]
fn first_window_handle() -> u64 {
    // 0 until asked: no handle of ours is 0 (a pointer into our array, or MPICH's
    // encoding from 0x13000000).
    static FIRST: AtomicU64 = AtomicU64::new(0);
    match FIRST.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: a pure function of the ABI layer.
            let first = unsafe { sys::rmampi_win_handle(0) }.0.bits();
            FIRST.store(first, Ordering::Relaxed);
            first
        }
        first => first,
    }
}

/// Runs `f` on the window `handle` names; MPI_ERR_WIN for a handle that names none.
#[inline]
pub fn with_win<R>(handle: MPI_Win, f: impl FnOnce(&Win) -> R) -> Result<R, MpiError> {
    table().with(index_of(handle)?, f).map_err(unavailable)
}

fn unavailable(why: Unavailable) -> MpiError {
    match why {
        Unavailable::Empty => bad_window(),
        Unavailable::InUse => MpiError::new(
            int!(MPI_ERR_WIN),
            "the window is in use by another call (of another thread, or a callback's caller)",
        ),
        Unavailable::TooDeep => MpiError::new(
            int!(MPI_ERR_INTERN),
            format!(
                "calls on windows nest deeper than {} (callbacks calling MPI)",
                handle_table::NESTING
            ),
        ),
    }
}

fn bad_window() -> MpiError {
    MpiError::new(
        int!(MPI_ERR_WIN),
        "invalid window handle (not a window, or freed)",
    )
}

/// The error handler of the window `handle` names, if it names one.
pub fn errhandler_of(handle: MPI_Win) -> Option<MPI_Errhandler> {
    with_win(handle, |w| {
        w.errhandler.lock().unwrap_or_else(|e| e.into_inner()).0
    })
    .ok()
}

/// The World librma-mpi made at MPI_Init, and its communicator.
pub fn world() -> &'static Mutex<Option<rma::World>> {
    static WORLD: OnceLock<Mutex<Option<rma::World>>> = OnceLock::new();
    WORLD.get_or_init(|| Mutex::new(None))
}

/// The World's engine, when the World reaches some rank over the network: there a peer's
/// native reads and writes of this process's windows move only while this process polls
/// (libfabric's tcp provider), so a barrier keeps rma's progress going (`MPI_Barrier`).
/// `None` before MPI_Init and after MPI_Finalize, on one node, and while another thread
/// holds the World (a window's creation: that barrier is the MPI's own).
pub fn network_engine() -> Option<rma::Engine> {
    static NETWORK: OnceLock<bool> = OnceLock::new();
    let world = world().try_lock().ok()?;
    let w = world.as_ref()?;
    let network = *NETWORK
        .get_or_init(|| (0..w.size() as rma::Rank).any(|r| w.route(r) == rma::Route::Network));
    network.then(|| w.engine().clone())
}

/// The rma communicator of a window over `comm`, with the members of `comm` in its
/// order.
struct WindowComm {
    comm: rma::Comm,
    group: Handle<MPI_Group>,
    size: usize,
    rank: usize,
    /// A World of the window's own, when some member is not in this MPI_COMM_WORLD.
    own_world: Option<rma::World>,
}

/// The rma communicator with the members of `comm` in its order, its group, and this
/// process's rank in it. Members outside this process's MPI_COMM_WORLD (processes of
/// MPI_Comm_spawn and their parents, joined by MPI_Intercomm_merge) are not in the World
/// librma-mpi made at MPI_Init: the window then gets a World of its own over `comm`,
/// built through MPI's collectives on it as the first one was on MPI_COMM_WORLD.
fn rma_comm(comm: MPI_Comm) -> MpiResult<WindowComm> {
    let world_comm = world()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(rma::World::comm)
        .ok_or_else(|| {
            MpiError::new(
                int!(MPI_ERR_OTHER),
                "rma is not running: MPI_Init did not reach librma-mpi (link it before \
                 libmpi, or LD_PRELOAD it), or rma's start failed",
            )
        })?;
    // SAFETY: out pointers to locals; MPI checks `comm` and returns an error for an
    // invalid one.
    let (group, n, rank, world_group) = unsafe {
        let mut group = sys::rmampi_group_null();
        if sys::PMPI_Comm_group(comm, &mut group) != 0 {
            return Err(MpiError::new(int!(MPI_ERR_COMM), "invalid communicator"));
        }
        let (mut n, mut rank) = (0, 0);
        sys::PMPI_Group_size(group, &mut n);
        sys::PMPI_Comm_rank(comm, &mut rank);
        let mut world_group = sys::rmampi_group_null();
        sys::PMPI_Comm_group(sys::rmampi_comm_world(), &mut world_group);
        (group, n, rank, world_group)
    };
    let ranks: Vec<c_int> = (0..n).collect();
    let mut world_ranks = vec![0 as c_int; n as usize];
    // SAFETY: arrays of `n` ranks; both groups valid.
    unsafe {
        sys::PMPI_Group_translate_ranks(
            group,
            n,
            ranks.as_ptr(),
            world_group,
            world_ranks.as_mut_ptr(),
        );
        let mut g = world_group;
        sys::PMPI_Group_free(&mut g);
    }
    // Whether every member is in MPI_COMM_WORLD is the same answer on every member (the
    // group is the same): all take the same way.
    let (c, own_world) = if world_ranks.iter().any(|&r| r < 0) {
        let world = rma::Config::from_env()
            .and_then(|config| {
                let bootstrap = crate::bootstrap::over_comm(comm)?;
                rma::World::from_bootstrap(std::sync::Arc::new(bootstrap), config)
            })
            .inspect_err(|_| {
                let mut g = group;
                // SAFETY: the group taken above, freed once on this path.
                unsafe { sys::PMPI_Group_free(&mut g) };
            })?;
        (world.comm(), Some(world))
    } else {
        let world_ranks: Vec<Rank> = world_ranks.iter().map(|&r| r as Rank).collect();
        let identity = world_ranks.len() == world_comm.size() as usize
            && world_ranks.iter().enumerate().all(|(i, &r)| i as Rank == r);
        let c = if identity {
            world_comm
        } else {
            world_comm.create(&world_ranks)?
        };
        (c, None)
    };
    Ok(WindowComm {
        comm: c,
        group: Handle(group),
        size: n as usize,
        rank: rank as usize,
        own_world,
    })
}

/// How a window's memory comes, with the sizes as the application gave them (checked
/// by [`create`]).
pub enum Flavor {
    /// MPI_Win_allocate: bytes.
    Allocate(i64),
    /// MPI_Win_allocate_shared.
    Shared(i64),
    /// MPI_Win_create over the application's memory: its address and bytes.
    Create(usize, i64),
    /// MPI_Win_create_dynamic.
    Dynamic,
}

impl Flavor {
    fn bytes(&self) -> i64 {
        match *self {
            Flavor::Allocate(n) | Flavor::Shared(n) | Flavor::Create(_, n) => n,
            Flavor::Dynamic => 0,
        }
    }
}

/// Memory of the application exposed in place (MPI_Win_create, MPI_Win_attach).
pub struct AppMemory {
    ptr: *mut u8,
    len: usize,
}
// SAFETY: the application's memory, which MPI requires to stay valid and not be freed
// until the window is freed or the region detached (MPI-4.1 12.2.1, 12.2.4); rma
// reaches it only inside RMA operations, which MPI's rules order with the application's
// own accesses.
unsafe impl Send for AppMemory {}
// SAFETY: as above.
unsafe impl Sync for AppMemory {}

impl AppMemory {
    /// `len` bytes at `ptr` (any pointer when `len` is 0).
    pub fn new(ptr: *mut c_void, len: usize) -> AppMemory {
        let ptr = if len == 0 || ptr.is_null() {
            std::ptr::NonNull::<u64>::dangling().as_ptr().cast()
        } else {
            ptr.cast()
        };
        AppMemory {
            ptr,
            len: if ptr.is_null() { 0 } else { len },
        }
    }
}

impl rma::UserMemory for AppMemory {
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes at `ptr` are the application's window memory (see the
        // Send impl), or `len` is 0 with a dangling, aligned pointer.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Creates a window over `comm`; returns its handle and local base. Arguments are
/// checked collectively: a bad size or unit on one rank is the same error on every
/// member (naming that rank), never a member left waiting in the creation.
pub fn create(
    comm: MPI_Comm,
    flavor: Flavor,
    disp_unit: i64,
    info: sys::MPI_Info,
) -> MpiResult<(MPI_Win, *mut c_void)> {
    let WindowComm {
        comm: c,
        group,
        size,
        rank,
        own_world,
    } = rma_comm(comm)?;
    let requested = flavor.bytes();
    let mine = if requested < 0 {
        int!(MPI_ERR_SIZE)
    } else if disp_unit <= 0 || disp_unit > i64::from(c_int::MAX) {
        int!(MPI_ERR_DISP)
    } else {
        0
    };
    // Every member's size, unit and verdict (MPI_Win_shared_query; displacements scale
    // by the target's unit).
    let all = c.allgather::<i64>(&[requested.max(0), disp_unit, i64::from(mine)])?;
    if let Some((i, b)) = all.chunks(3).enumerate().find(|(_, b)| b[2] != 0) {
        let why = if b[2] == i64::from(int!(MPI_ERR_SIZE)) {
            "a negative window size"
        } else {
            "a displacement unit that is not positive (or past an int)"
        };
        return Err(MpiError::new(
            b[2] as c_int,
            format!("rank {i} of the communicator gave {why}"),
        ));
    }
    let sizes: Vec<u64> = all.chunks(3).map(|b| b[0] as u64).collect();
    let disp_units: Vec<u64> = all.chunks(3).map(|b| b[1] as u64).collect();
    let bytes = requested as usize;
    let disp_unit = disp_unit as c_int;
    if matches!(flavor, Flavor::Create(..) | Flavor::Dynamic) {
        // Accumulates to the application's memory (and every op to a dynamic window)
        // are active messages, which need this process's progress while the application
        // waits in MPI's own calls (MPI-4.1 12.7): the progress agent provides it.
        c.engine().start_progress_agent();
    }
    let (win, flavor_code, base) = match flavor {
        Flavor::Allocate(_) => (
            c.allocate::<u8>(bytes)?,
            int!(MPI_WIN_FLAVOR_ALLOCATE),
            None,
        ),
        Flavor::Shared(_) => (
            c.allocate_shared::<u8>(bytes)?,
            int!(MPI_WIN_FLAVOR_SHARED),
            None,
        ),
        Flavor::Create(ptr, _) => (
            c.create_window_in_place::<u8>(Box::new(AppMemory::new(ptr as *mut c_void, bytes)))?,
            int!(MPI_WIN_FLAVOR_CREATE),
            Some(ptr),
        ),
        Flavor::Dynamic => (
            c.create_dynamic::<u8>()?,
            int!(MPI_WIN_FLAVOR_DYNAMIC),
            Some(0),
        ),
    };
    let base = base.unwrap_or_else(|| {
        if bytes == 0 {
            0
        } else {
            win.local_base().unwrap_or(0)
        }
    });
    let index = table()
        .reserve()
        .ok_or_else(|| MpiError::new(int!(MPI_ERR_NO_MEM), "no window handle left"))?;
    // SAFETY: `index` is within the ABI layer's range (4096 < its maximum).
    let handle = unsafe { sys::rmampi_win_handle(index as c_int) };
    // SAFETY: a constant of the ABI layer.
    let fatal = unsafe { sys::rmampi_errors_are_fatal() };
    let w = Win {
        views: Views::of(&win),
        rma: win,
        info: WinInfo {
            handle: Handle(handle),
            group,
            size,
            rank,
            disp_units,
            sizes,
            attr_base: base,
            attr_size: Box::new(bytes as MPI_Aint),
            attr_disp_unit: Box::new(disp_unit),
            attr_flavor: Box::new(flavor_code),
            attr_model: Box::new(int!(MPI_WIN_UNIFIED)),
            errhandler: Mutex::new(Handle(fatal)),
            pending: Mutex::new(Vec::new()),
            any_pending: std::sync::atomic::AtomicBool::new(false),
            attrs: Mutex::new(HashMap::new()),
            name: Mutex::new(String::new()),
            hints: Mutex::new(default_hints(flavor_code)),
            own_world,
        },
    };
    w.apply_info(info);
    table().fill(index, Box::new(w));
    Ok((handle, base as *mut c_void))
}

/// The window hints MPI-4.1 12.2.1 defines, with their defaults.
fn default_hints(flavor: c_int) -> Vec<(&'static str, String)> {
    let shared = flavor == int!(MPI_WIN_FLAVOR_SHARED);
    vec![
        ("no_locks", "false".into()),
        ("accumulate_ordering", "rar,raw,war,waw".into()),
        ("accumulate_ops", "same_op_no_op".into()),
        ("same_size", "false".into()),
        ("same_disp_unit", "false".into()),
        (
            "alloc_shared_noncontig",
            if shared { "false" } else { "true" }.into(),
        ),
    ]
}

impl Win {
    /// Takes the values `info` gives for the hints MPI defines; other keys are ignored
    /// (MPI-4.1 10.1: an implementation may ignore hints).
    pub fn apply_info(&self, info: sys::MPI_Info) {
        // SAFETY: a constant of the ABI layer.
        if info == unsafe { sys::rmampi_info_null() } {
            return;
        }
        let mut hints = self.hints.lock().unwrap_or_else(|e| e.into_inner());
        for (key, value) in hints.iter_mut() {
            let k = std::ffi::CString::new(*key).unwrap_or_default();
            let (mut len, mut flag) = (0, 0);
            // SAFETY: a NUL-terminated key, valid out pointers; MPI checks `info`.
            let rc = unsafe { sys::PMPI_Info_get_valuelen(info, k.as_ptr(), &mut len, &mut flag) };
            if rc != 0 || flag == 0 || len < 0 {
                continue;
            }
            let mut buf = vec![0u8; len as usize + 1];
            // SAFETY: `buf` holds `len` bytes and the NUL.
            unsafe {
                sys::PMPI_Info_get(info, k.as_ptr(), len, buf.as_mut_ptr().cast(), &mut flag)
            };
            if flag != 0 {
                buf.truncate(len as usize);
                *value = String::from_utf8_lossy(&buf).trim().to_string();
            }
        }
    }
}

/// MPI_Win_free: the window is freed (collective) and its handle invalid; on an error
/// (an epoch still open) it stays as it was.
pub fn free(handle: MPI_Win) -> MpiResult<()> {
    let index = index_of(handle)?;
    let w = table().take(index).map_err(unavailable)?;
    // The attributes' delete functions run first (MPI-4.1 7.7.4); an error of theirs
    // keeps the window.
    if let Err(e) = delete_all_attrs(&w) {
        table().fill(index, w);
        return Err(e);
    }
    let Win {
        rma,
        views,
        mut info,
    } = *w;
    drop(views);
    match rma.free() {
        Ok(_) => {
            table().remove(index);
            let mut g = info.group.0;
            // SAFETY: the group librma-mpi took at creation, freed once.
            unsafe { sys::PMPI_Group_free(&mut g) };
            if let Some(world) = info.own_world.take() {
                // Every member is done with the window before any leaves its World (a
                // departure seen inside `free` would be taken for a failure).
                world.barrier()?;
            }
            Ok(())
        }
        Err(refused) => {
            // An epoch still open: the window stays as it was.
            let error = MpiError::from(refused.error.clone());
            let rma = refused.window;
            table().fill(
                index,
                Box::new(Win {
                    views: Views::of(&rma),
                    rma,
                    info,
                }),
            );
            Err(error)
        }
    }
}

/// MPI_Finalize: windows the application did not free are dropped (their peers learn
/// it); MPI calls that erroneous, rma survives it.
pub fn drop_all() {
    for index in table().filled() {
        if let Ok(w) = table().take(index) {
            drop(w);
            table().remove(index);
        }
    }
}

// ---- user attributes -------------------------------------------------------------------

/// A keyval of MPI_Win_create_keyval: its delete function and extra state.
struct Keyval {
    delete: DeleteFunction,
    /// MPI_Win_free_keyval was called: no new use, but attributes already set keep it
    /// (their delete function still runs when they go, MPI-4.1 7.7.4).
    freed: bool,
}

/// A keyval's delete function, in the convention of the language that made it.
#[derive(Clone, Copy)]
enum DeleteFunction {
    /// C's: `(win, keyval, value, extra_state)` by value.
    C {
        function: sys::MPI_Win_delete_attr_function,
        extra_state: usize,
    },
    /// Fortran's (MPI_WIN_CREATE_KEYVAL from `mpif.h`, `use mpi`, `use mpi_f08`): every
    /// argument by reference, the window as its Fortran handle, the value an
    /// INTEGER(KIND=MPI_ADDRESS_KIND).
    #[cfg(any(open_mpi, mpich_abi))]
    Fortran {
        function: FortranDeleteFunction,
        extra_state: FortranExtraState,
    },
}

/// A Fortran delete function: `(win, keyval, attribute_val, extra_state, ierror)`.
#[cfg(any(open_mpi, mpich_abi))]
pub type FortranDeleteFunction = unsafe extern "C" fn(
    *mut c_int,
    *mut c_int,
    *mut sys::MPI_Aint,
    *mut sys::MPI_Aint,
    *mut c_int,
);

/// What a Fortran delete function gets as its extra state, as the MPI's Fortran layer
/// handed it over.
#[cfg(any(open_mpi, mpich_abi))]
#[derive(Clone, Copy)]
pub enum FortranExtraState {
    /// The address of the program's variable (MPICH's layer passes it on as C's
    /// `extra_state`, and its own proxy hands that address to the function).
    #[cfg(mpich_abi)]
    At(usize),
    /// The value (Open MPI's layer reads it at creation).
    #[cfg(open_mpi)]
    Value(sys::MPI_Aint),
}

fn keyvals() -> &'static Mutex<HashMap<c_int, Keyval>> {
    static KEYVALS: OnceLock<Mutex<HashMap<c_int, Keyval>>> = OnceLock::new();
    KEYVALS.get_or_init(Default::default)
}

/// Keyvals of librma-mpi's own: a range no predefined keyval of either MPI uses.
const FIRST_KEYVAL: c_int = 0x0100_0000;

/// A new keyval with this delete function.
fn new_keyval(delete: DeleteFunction) -> c_int {
    let mut k = keyvals().lock().unwrap_or_else(|e| e.into_inner());
    let next = (FIRST_KEYVAL..)
        .find(|n| !k.contains_key(n))
        .unwrap_or(FIRST_KEYVAL);
    k.insert(
        next,
        Keyval {
            delete,
            freed: false,
        },
    );
    next
}

/// MPI_Win_create_keyval.
pub fn create_keyval(delete: sys::MPI_Win_delete_attr_function, extra_state: usize) -> c_int {
    new_keyval(DeleteFunction::C {
        function: delete,
        extra_state,
    })
}

/// MPI_WIN_CREATE_KEYVAL from Fortran, where the MPI's Fortran layer hands the
/// function to librma-mpi as Fortran's (Open MPI's).
#[cfg(open_mpi)]
pub fn create_fortran_keyval(
    function: FortranDeleteFunction,
    extra_state: FortranExtraState,
) -> c_int {
    new_keyval(DeleteFunction::Fortran {
        function,
        extra_state,
    })
}

/// Says that `keyval`, made by MPI_Win_create_keyval, was made from Fortran: its
/// function and extra state are Fortran's (MPICH's layer passes them through C's call
/// and then says so). `false`: not one of ours.
#[cfg(mpich_abi)]
pub fn keyval_made_in_fortran(keyval: c_int) -> bool {
    let mut k = keyvals().lock().unwrap_or_else(|e| e.into_inner());
    let Some(entry) = k.get_mut(&keyval) else {
        return false;
    };
    if let DeleteFunction::C {
        function,
        extra_state,
    } = entry.delete
    {
        entry.delete = match function {
            Some(f) => DeleteFunction::Fortran {
                // SAFETY: MPICH's Fortran layer gave a Fortran procedure in C's place
                // (MPI_WIN_NULL_DELETE_FN's Fortran symbol included); a function pointer
                // of one signature read as another's, called only with Fortran's.
                function: unsafe {
                    std::mem::transmute::<
                        unsafe extern "C" fn(MPI_Win, c_int, *mut c_void, *mut c_void) -> c_int,
                        FortranDeleteFunction,
                    >(f)
                },
                extra_state: FortranExtraState::At(extra_state),
            },
            None => entry.delete,
        };
    }
    true
}

/// MPI_Win_free_keyval.
pub fn free_keyval(keyval: c_int) -> MpiResult<()> {
    match keyvals()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&keyval)
    {
        Some(k) if !k.freed => {
            k.freed = true;
            Ok(())
        }
        _ => Err(MpiError::new(int!(MPI_ERR_KEYVAL), "invalid keyval")),
    }
}

/// Whether `keyval` was made by MPI_Win_create_keyval and not freed.
pub fn keyval_exists(keyval: c_int) -> bool {
    keyvals()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&keyval)
        .is_some_and(|k| !k.freed)
}

/// Calls `keyval`'s delete function on `value` of window `w`.
fn call_delete(w: &Win, keyval: c_int, value: usize) -> MpiResult<()> {
    let delete = keyvals()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&keyval)
        .map(|k| k.delete);
    let rc = match delete {
        None | Some(DeleteFunction::C { function: None, .. }) => 0,
        Some(DeleteFunction::C {
            function: Some(delete),
            extra_state,
        }) => {
            // SAFETY: the application's delete function, called as MPI calls it.
            unsafe {
                delete(
                    w.handle.0,
                    keyval,
                    value as *mut c_void,
                    extra_state as *mut c_void,
                )
            }
        }
        #[cfg(any(open_mpi, mpich_abi))]
        Some(DeleteFunction::Fortran {
            function,
            extra_state,
        }) => {
            let mut win = crate::fortran::fortran_handle(w.handle.0);
            let mut keyval = keyval;
            let mut value = value as sys::MPI_Aint;
            #[cfg(mpich_abi)]
            let FortranExtraState::At(address) = extra_state;
            #[cfg(mpich_abi)]
            let extra = address as *mut sys::MPI_Aint;
            #[cfg(open_mpi)]
            let FortranExtraState::Value(mut extra_value) = extra_state;
            #[cfg(open_mpi)]
            let extra: *mut sys::MPI_Aint = &mut extra_value;
            let mut ierr: c_int = 0;
            // SAFETY: the application's Fortran procedure, every argument a reference
            // to a local (the extra state: where the MPI's Fortran layer said it is).
            unsafe { function(&mut win, &mut keyval, &mut value, extra, &mut ierr) };
            ierr
        }
    };
    if rc != 0 {
        return Err(MpiError::new(rc, "the attribute's delete function failed"));
    }
    Ok(())
}

/// MPI_ERR_KEYVAL unless `keyval` exists (made and not freed).
pub fn check_keyval(keyval: c_int) -> MpiResult<()> {
    if keyval_exists(keyval) {
        Ok(())
    } else {
        Err(MpiError::new(int!(MPI_ERR_KEYVAL), "invalid keyval"))
    }
}

/// MPI_Win_set_attr.
pub fn set_attr(w: &Win, keyval: c_int, value: usize) -> MpiResult<()> {
    check_keyval(keyval)?;
    let old = w
        .attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(keyval, value);
    if let Some(old) = old {
        call_delete(w, keyval, old)?;
    }
    Ok(())
}

/// MPI_Win_delete_attr.
pub fn delete_attr(w: &Win, keyval: c_int) -> MpiResult<()> {
    check_keyval(keyval)?;
    let old = w
        .attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&keyval);
    match old {
        Some(v) => call_delete(w, keyval, v),
        None => Err(MpiError::new(
            int!(MPI_ERR_KEYVAL),
            "no such attribute on the window",
        )),
    }
}

/// Calls the delete functions of a window's attributes (MPI_Win_free).
pub fn delete_all_attrs(w: &Win) -> MpiResult<()> {
    let all: Vec<(c_int, usize)> = w
        .attrs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain()
        .collect();
    for (k, v) in all {
        call_delete(w, k, v)?;
    }
    Ok(())
}
