//! MPI error classes from rma's typed errors, and error handlers on windows.
//!
//! Every call returns an MPI error class (a valid error code). Where a window is known its
//! error handler decides: MPI_ERRORS_RETURN returns the class, a handler made by
//! MPI_Win_create_errhandler is called first, MPI_ERRORS_ARE_FATAL (the default of
//! windows, MPI-4.1 9.3) prints what failed (the call, this rank, rma's message) and
//! aborts the job. Errors with no window (an invalid window handle) go to the handler
//! of MPI_COMM_SELF, as MPI-4.1 9.3 says for errors not tied to an object; errors of a
//! window creation to the communicator's.

use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::{Mutex, OnceLock};

use rma::{Error, ErrorKind, PeerError, TransportError, UsageError};

use crate::sys::{self, int, HandleBits, MPI_Comm, MPI_Errhandler, MPI_Win};

/// An MPI error: its class and what happened ([`Details`], which it derefs to).
///
/// One pointer, as rma's own `Error`: a call's `MpiResult<()>` then travels in a register.
/// Unboxed (a class and a `String`, 32 bytes) every result went through the stack in
/// pieces of different sizes, and reading them back whole stalled store forwarding:
/// a third of an `MPI_Win_flush` on shared memory went there.
#[derive(Debug, Clone)]
pub struct MpiError(Box<Details>);

/// What an [`MpiError`] says.
#[derive(Debug, Clone)]
pub struct Details {
    /// The MPI error class (MPI_ERR_*).
    pub class: c_int,
    /// What failed, for the fatal handler's message.
    pub message: String,
}

impl std::ops::Deref for MpiError {
    type Target = Details;
    fn deref(&self) -> &Details {
        &self.0
    }
}

impl std::ops::DerefMut for MpiError {
    fn deref_mut(&mut self) -> &mut Details {
        &mut self.0
    }
}

/// The result of a call's body.
pub type MpiResult<T> = Result<T, MpiError>;

impl MpiError {
    /// An error of `class` with `message`.
    #[cold]
    pub fn new(class: c_int, message: impl Into<String>) -> MpiError {
        MpiError(Box::new(Details {
            class,
            message: message.into(),
        }))
    }
}

impl From<Error> for MpiError {
    fn from(e: Error) -> MpiError {
        let class = match e.kind() {
            ErrorKind::Usage(u) => match u {
                UsageError::NoEpoch { .. }
                | UsageError::EpochConflict { .. }
                | UsageError::NotInGroup { .. }
                | UsageError::NotLocked { .. }
                | UsageError::AlreadyLocked { .. }
                | UsageError::ConcurrentSync { .. }
                | UsageError::NoExposureEpoch
                | UsageError::EpochOpen => int!(MPI_ERR_RMA_SYNC),
                UsageError::RankOutOfRange { .. } => int!(MPI_ERR_RANK),
                UsageError::NotifyIndex { .. } => int!(MPI_ERR_ARG),
                UsageError::OutOfBounds { .. } | UsageError::TooLarge { .. } => {
                    int!(MPI_ERR_RMA_RANGE)
                }
                UsageError::OpNotForType { .. } | UsageError::BadReduction { .. } => {
                    int!(MPI_ERR_OP)
                }
                UsageError::BadLayout => int!(MPI_ERR_TYPE),
                UsageError::BadAssert { .. } => int!(MPI_ERR_ASSERT),
                UsageError::NotAttached => int!(MPI_ERR_RMA_ATTACH),
                UsageError::BadGroup { .. } => int!(MPI_ERR_GROUP),
                UsageError::Unsupported { .. } => int!(MPI_ERR_UNSUPPORTED_OPERATION),
                _ => int!(MPI_ERR_OTHER),
            },
            ErrorKind::Peer(PeerError::OutOfBounds { .. } | PeerError::Refused { .. }) => {
                int!(MPI_ERR_RMA_RANGE)
            }
            ErrorKind::Peer(_) => int!(MPI_ERR_OTHER),
            ErrorKind::Transport(TransportError::Unsupported(_)) => {
                int!(MPI_ERR_UNSUPPORTED_OPERATION)
            }
            ErrorKind::Transport(_) => int!(MPI_ERR_OTHER),
            _ => int!(MPI_ERR_OTHER),
        };
        // The MPI call and the rank are said by the handler; rma's own call name would
        // only repeat them in Rust's words.
        MpiError::new(class, e.kind().to_string())
    }
}

/// A handler of MPI_Win_create_errhandler.
pub type WinErrhandlerFn = unsafe extern "C" fn(*mut MPI_Win, *mut c_int, ...);

/// The user's window error handlers, by the bits of the handle MPI made for them.
fn user_handlers() -> &'static Mutex<HashMap<u64, WinErrhandlerFn>> {
    static HANDLERS: OnceLock<Mutex<HashMap<u64, WinErrhandlerFn>>> = OnceLock::new();
    HANDLERS.get_or_init(Default::default)
}

/// Registers `function` under the handle MPI made for it.
pub fn register_handler(handle: MPI_Errhandler, function: WinErrhandlerFn) {
    user_handlers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(handle.0.bits(), function);
}

/// Whether `handle` is an error handler windows can take.
pub fn is_window_handler(handle: MPI_Errhandler) -> bool {
    // SAFETY: calls of the ABI layer returning predefined handles.
    let predefined = unsafe {
        [
            sys::rmampi_errors_are_fatal(),
            sys::rmampi_errors_return(),
            sys::rmampi_errors_abort(),
        ]
    };
    predefined.contains(&handle)
        || user_handlers()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&handle.0.bits())
}

fn rank() -> c_int {
    let mut rank = -1;
    // SAFETY: MPI_COMM_WORLD is valid while MPI runs; `rank` is a valid out pointer. A
    // failure leaves -1.
    unsafe { sys::PMPI_Comm_rank(sys::rmampi_comm_world(), &mut rank) };
    rank
}

/// Raises `error` of `call` on window `win` (handle `handle`) with its handler
/// `handler`; returns the code the call returns.
pub fn raise_on_window(
    call: &str,
    handle: MPI_Win,
    handler: MPI_Errhandler,
    error: &MpiError,
) -> c_int {
    // SAFETY: calls of the ABI layer returning predefined handles.
    let (ret, fatal, abort) = unsafe {
        (
            sys::rmampi_errors_return(),
            sys::rmampi_errors_are_fatal(),
            sys::rmampi_errors_abort(),
        )
    };
    if handler == ret {
        return error.class;
    }
    if handler == fatal || handler == abort {
        fatal_error(call, error);
    }
    let function = user_handlers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&handler.0.bits())
        .copied();
    if let Some(function) = function {
        let (mut win, mut code) = (handle, error.class);
        // SAFETY: a handler the application registered with MPI_Win_create_errhandler,
        // called as MPI calls one: with the window and the error code.
        unsafe { function(&mut win, &mut code) };
    }
    error.class
}

/// Raises `error` of `call` where no window is known: on `comm`'s error handler.
pub fn raise_on_comm(call: &str, comm: MPI_Comm, error: &MpiError) -> c_int {
    // SAFETY: the ABI layer's constants.
    let (ret, null) = unsafe { (sys::rmampi_errors_return(), sys::rmampi_errhandler_null()) };
    let mut handler = null;
    // SAFETY: `comm` came from the application (an invalid one makes MPI return an
    // error, leaving `handler` null); `handler` is a valid out pointer.
    unsafe { sys::PMPI_Comm_get_errhandler(comm, &mut handler) };
    if handler == ret {
        return error.class;
    }
    say!(
        "librma-mpi: {call} on rank {}: {} (MPI error class {})",
        rank(),
        error.message,
        error.class
    );
    // SAFETY: as above; MPI applies the communicator's handler (aborts when fatal).
    unsafe { sys::PMPI_Comm_call_errhandler(comm, error.class) };
    error.class
}

/// MPI_ERRORS_ARE_FATAL: says what failed, then aborts the job.
pub fn fatal_error(call: &str, error: &MpiError) -> ! {
    say!(
        "librma-mpi: {call} on rank {}: {} (MPI error class {}); aborting (the window's \
         error handler is MPI_ERRORS_ARE_FATAL)",
        rank(),
        error.message,
        error.class
    );
    // A moment before the abort, which kills every rank: ranks that failed at the same
    // time (a wrong argument every rank passed) say so too, instead of being killed
    // before their message (4 ranks failing at once: 34 of 40 messages without it, over
    // 10 runs).
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: aborts the job through MPI; does not return when MPI runs.
    unsafe { sys::PMPI_Abort(sys::rmampi_comm_world(), error.class) };
    std::process::abort()
}
