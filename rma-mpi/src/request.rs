//! Completions of operations whose result lands later (gets, fetching accumulates) and
//! MPI requests of the R* calls.
//!
//! A [`Completion`] finishes an operation: waits for rma's request and moves its bytes
//! where the application asked. It is shared ([`Shared`]) between the window, whose
//! synchronization calls (flush, unlock, fence, complete) finish every one still due,
//! and the MPI request of an R* call, finished by MPI_Wait/MPI_Test: whichever comes
//! first does it once.
//!
//! Request handles are librma-mpi's own (see `csrc/abi.c`): MPI_Wait, MPI_Test and the
//! other completion calls are intercepted, take ours and pass MPI's to PMPI.

use std::os::raw::c_int;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::MpiResult;
use crate::sys::{self, MPI_Request, MPI_Status};

/// An operation's completion at the origin.
pub trait Completion: Send {
    /// Whether it can finish without waiting (makes progress).
    fn test(&mut self) -> rma::Result<bool>;
    /// Waits, then delivers the result.
    fn finish(self: Box<Self>) -> rma::Result<()>;
}

/// A completion shared between a window and a request; `None` once finished.
pub type Shared = Arc<Mutex<Option<Box<dyn Completion>>>>;

/// Finishes `shared` if nobody has.
pub fn finish(shared: &Shared) -> MpiResult<()> {
    let taken = shared.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(c) = taken {
        c.finish()?;
    }
    Ok(())
}

/// Whether `shared` is finished, finishing it if it can be.
fn test(shared: &Shared) -> MpiResult<bool> {
    let mut slot = shared.lock().unwrap_or_else(|e| e.into_inner());
    match slot.as_mut() {
        None => Ok(true),
        Some(c) => {
            if c.test()? {
                if let Some(c) = slot.take() {
                    c.finish()?;
                }
                Ok(true)
            } else {
                Ok(false)
            }
        }
    }
}

/// A raw pointer into the application's memory that an operation writes at
/// completion.
#[derive(Clone, Copy)]
pub struct Dest(pub *mut u8);
// SAFETY: the memory is the application's buffer of an RMA call, which MPI forbids it
// to touch until the operation completes (MPI-4.1 12.3); whichever thread completes the
// operation is the only one to write it meanwhile.
unsafe impl Send for Dest {}

/// The requests alive: a slab of completions (`None` inside: complete already).
struct Table {
    slots: Vec<Option<Option<Shared>>>,
    free: Vec<usize>,
}

fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(|| {
        Mutex::new(Table {
            slots: Vec::new(),
            free: Vec::new(),
        })
    })
}

/// A new request for `completion` (`None`: complete already, as an op on MPI_PROC_NULL).
pub fn new_request(completion: Option<Shared>) -> MpiResult<MPI_Request> {
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    let index = match t.free.pop() {
        Some(i) => i,
        None => {
            // SAFETY: a constant of the ABI layer.
            let max = unsafe { sys::rmampi_max_requests() } as usize;
            if t.slots.len() >= max {
                return Err(crate::error::MpiError::new(
                    sys::int!(MPI_ERR_NO_MEM),
                    "more RMA requests alive at once than librma-mpi has handles for",
                ));
            }
            t.slots.push(None);
            t.slots.len() - 1
        }
    };
    t.slots[index] = Some(completion);
    // SAFETY: `index` is below the ABI layer's maximum.
    Ok(unsafe { sys::rmampi_request_handle(index as c_int) })
}

/// The slab index of `req` if it is one of ours.
pub fn ours(req: MPI_Request) -> Option<usize> {
    // SAFETY: the ABI layer compares the handle with its own range.
    let i = unsafe { sys::rmampi_request_index(req) };
    (i >= 0).then_some(i as usize)
}

fn release(index: usize) {
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = t.slots.get_mut(index) {
        if slot.take().is_some() {
            t.free.push(index);
        }
    }
}

fn completion_of(index: usize) -> MpiResult<Option<Shared>> {
    let t = table().lock().unwrap_or_else(|e| e.into_inner());
    match t.slots.get(index) {
        Some(Some(c)) => Ok(c.clone()),
        _ => Err(crate::error::MpiError::new(
            sys::int!(MPI_ERR_REQUEST),
            "not an active request",
        )),
    }
}

/// MPI_Wait on one of ours: finishes it, frees it, sets the handle to MPI_REQUEST_NULL.
///
/// # Safety
/// `req` and `status` are the application's pointers of an MPI_Wait call.
pub unsafe fn wait(index: usize, req: *mut MPI_Request, status: *mut MPI_Status) -> MpiResult<()> {
    if let Some(c) = completion_of(index)? {
        finish(&c)?;
    }
    release(index);
    // SAFETY: the caller's pointers.
    unsafe {
        *req = sys::rmampi_request_null();
        sys::rmampi_empty_status(status);
    }
    Ok(())
}

/// MPI_Test on one of ours.
///
/// # Safety
/// As for [`wait`].
pub unsafe fn test_one(
    index: usize,
    req: *mut MPI_Request,
    status: *mut MPI_Status,
) -> MpiResult<bool> {
    let done = match completion_of(index)? {
        Some(c) => test(&c)?,
        None => true,
    };
    if done {
        // SAFETY: the caller's pointers.
        unsafe { wait(index, req, status)? };
    }
    Ok(done)
}

/// Whether one of ours is complete, without freeing it (MPI_Request_get_status).
pub fn is_complete(index: usize) -> MpiResult<bool> {
    match completion_of(index)? {
        Some(c) => test(&c),
        None => Ok(true),
    }
}

/// MPI_Request_free on one of ours: the operation still completes at the window's
/// next synchronization.
pub fn free(index: usize) {
    release(index);
}
