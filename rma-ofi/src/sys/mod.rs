//! The libfabric layer of this crate: the raw bindings (`ffi`, private to this module)
//! and thin wrappers over them. Every call into libfabric, and every other unsafe
//! operation of the crate, is in this module, argued where it is made; outside it, only
//! the callers' promises below.
//!
//! - [`InfoList`] and [`Info`]: `fi_getinfo`'s answer, freed on drop; [`Offer`], what an
//!   entry offers, read out of it.
//! - [`Endpoint`]: fabric, domain, address vector, completion queue and endpoint of one
//!   entry, closed in reverse order on drop; every call on it takes `&mut self` or is
//!   made under its owner's mutex (the domain is `FI_THREAD_DOMAIN`).
//! - [`LocalBuf`]: bytes handed to the provider, registered where it asks for
//!   `FI_MR_LOCAL`; [`Mr`]: a region peers reach, closed through its endpoint.
//! - Completions come out as [`Completion`]s naming the [`OpContext`] of their
//!   operation by its id: every operation posted here carries one.
//!
//! Two kinds of call stay `unsafe` for the caller, because what makes them sound lives
//! past the call and no borrow can say so: posting an operation (a receive, a send, a
//! native RMA or atomic), whose buffers and context the provider reads or writes until
//! the operation's completion is read; and registering memory for remote access
//! ([`Endpoint::mr_reg`]), which peers write at any time until the region is closed.
//! Their contracts are stated on each; the callers argue them at every call.

mod endpoint;
mod ffi;
mod info;

use std::ffi::{c_void, CStr};
use std::time::Duration;

use rma_core::{AccOp, BackendError, DataType, TransportError};

pub use endpoint::{Endpoint, LocalBuf, Mr};
pub use ffi::fi_addr_t;
pub use info::{Caps, Entry, Info, InfoList, Offer};

/// A libfabric call's failure: the call and the error code it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfiError {
    /// The call, e.g. "fi_av_insert".
    pub call: &'static str,
    /// The error code (`FI_E*`, an errno), positive: the call returned its negation.
    pub code: i32,
}

impl OfiError {
    /// The failure of `call`, which returned `rc` (a negative error code).
    pub fn new(call: &'static str, rc: i64) -> OfiError {
        OfiError {
            call,
            code: rc.unsigned_abs() as i32,
        }
    }
}

impl std::fmt::Display for OfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.call, strerror(self.code), -self.code)
    }
}

impl std::error::Error for OfiError {}

/// An error completion (`fi_cq_readerr`): libfabric's error code and the provider's
/// own text for it (`fi_cq_strerror`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionError {
    /// The error code (`FI_E*`, an errno), positive.
    pub code: i32,
    /// The provider's explanation.
    pub provider: String,
}

impl std::fmt::Display for CompletionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (err {}, provider: {})",
            strerror(self.code),
            self.code,
            self.provider
        )
    }
}

impl std::error::Error for CompletionError {}

/// A libfabric return code as a typed error: `call` returned `rc` while doing `doing`
/// (an action: "inserting a peer's address"), its [`OfiError`] kept as the source.
pub fn fi_error(doing: impl Into<String>, call: &'static str, rc: i64) -> TransportError {
    BackendError::new(doing, OfiError::new(call, rc)).into()
}

/// `fi_strerror`'s text for an error code.
fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any
    // code (a generic text for codes it does not know).
    unsafe { CStr::from_ptr(ffi::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

fn check(doing: &str, call: &'static str, rc: i32) -> Result<(), TransportError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(fi_error(doing, call, rc as i64))
    }
}

/// Whether a data-transfer call returned -FI_EAGAIN.
pub fn is_again(rc: isize) -> bool {
    rc == -(ffi::FI_EAGAIN as isize)
}

/// Whether [`Endpoint::cq_read`] failed because an error completion waits
/// (-FI_EAVAIL): [`Endpoint::cq_readerr`] reads it.
pub fn error_waiting(rc: isize) -> bool {
    rc == -(ffi::FI_EAVAIL as isize)
}

/// A context that libfabric may scribble on (`FI_CONTEXT` / `FI_CONTEXT2`) followed by
/// our identification of the operation. Every operation posted through this module
/// carries one, which lives (boxed, at a stable address) until the operation's
/// completion is read; the completion names it by [`id`](Self::id).
#[repr(C)]
#[derive(Debug, Default)]
pub struct OpContext {
    /// The provider's scratch space; first, so that the context pointer is the struct's.
    fi: ffi::fi_context2,
    /// Which operation: kind in the high bits, index in the low.
    pub id: u64,
}

// SAFETY: the provider's scratch pointers are only ever used by libfabric itself, inside
// calls on the endpoint the operation was posted to, which its owner serializes
// (FI_THREAD_DOMAIN); moving the context between threads moves plain bytes.
unsafe impl Send for OpContext {}

impl OpContext {
    /// A fresh context for the operation `id`.
    pub fn new(id: u64) -> OpContext {
        OpContext {
            id,
            ..Default::default()
        }
    }
}

/// One completion read from the completion queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completion {
    /// The [`OpContext::id`] of the operation (`None`: the provider gave no context).
    pub id: Option<u64>,
    /// Bytes received.
    pub len: usize,
    /// Where the message is, for a multi-message receive buffer (an address in it).
    pub at: usize,
    flags: u64,
    /// The remote CQ data of a write that carried some (`FI_REMOTE_CQ_DATA`).
    data: u64,
}

impl Completion {
    /// The data a peer's write carried with it ([`Endpoint::write`]'s `cq_data`): this
    /// completion reports that write, done in this process's memory.
    pub fn remote_cq_data(&self) -> Option<u64> {
        (self.flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(self.data)
    }

    /// A completion of a receive.
    pub fn is_recv(&self) -> bool {
        self.flags & ffi::FI_RECV as u64 != 0
    }

    /// Whether the provider released a multi-message receive buffer with this
    /// completion (`FI_MULTI_RECV`): it may be posted again.
    pub fn released(&self) -> bool {
        self.flags & ffi::FI_MULTI_RECV as u64 != 0
    }
}

/// The id of the [`OpContext`] a completion points at.
///
/// # Safety
/// `ctx` is null or the context of an operation posted through this module, whose
/// completion is being read now: every post function takes an `OpContext` and requires
/// it to live until then.
unsafe fn context_id(ctx: *mut c_void) -> Option<u64> {
    // SAFETY: caller's contract: null, or a live OpContext.
    (!ctx.is_null()).then(|| unsafe { (*ctx.cast::<OpContext>()).id })
}

/// The descriptor of a local buffer's region, to pass with the buffer
/// ([`LocalBuf::desc`]); none where the provider does not ask for local registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc(*mut c_void);

impl Desc {
    /// No descriptor (the buffer is not registered).
    pub const NONE: Desc = Desc(std::ptr::null_mut());

    /// Whether this is [`Desc::NONE`].
    pub fn is_none(&self) -> bool {
        self.0.is_null()
    }
}

/// A buffer of ours handed to the provider: where, how many bytes, and its descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// First byte.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
    /// Its region's descriptor, or [`Desc::NONE`].
    pub desc: Desc,
}

impl Local {
    /// `len` bytes at `ptr`, not registered.
    pub fn plain(ptr: *mut u8, len: usize) -> Local {
        Local {
            ptr,
            len,
            desc: Desc::NONE,
        }
    }

    /// The `len` bytes from byte `at` of this buffer (within it: the caller's to keep),
    /// under the same descriptor.
    pub fn part(self, at: usize, len: usize) -> Local {
        debug_assert!(at + len <= self.len);
        Local {
            ptr: self.ptr.wrapping_add(at),
            len,
            desc: self.desc,
        }
    }
}

/// Registered memory of a peer: the peer, the address to name there (virtual address or
/// offset, per `FI_MR_VIRT_ADDR`) and the region's key.
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    /// The peer's address in the address vector.
    pub peer: fi_addr_t,
    /// Where in its region.
    pub addr: u64,
    /// Its region's key.
    pub key: u64,
}

/// One native atomic: the operation, the element type, and how many elements.
#[derive(Debug, Clone, Copy)]
pub struct Atomic {
    /// The operation (Replace is an atomic write, NoOp an atomic read).
    pub op: AccOp,
    /// The element type.
    pub datatype: DataType,
    /// Elements.
    pub count: usize,
}

/// Which atomic call a validity query asks about ([`Endpoint::atomic_valid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    /// `fi_atomic` with this operation.
    Plain(AccOp),
    /// `fi_fetch_atomic` with this operation.
    Fetch(AccOp),
    /// `fi_compare_atomic` with `FI_CSWAP`.
    CompareSwap,
}

fn datatype(dt: DataType) -> ffi::fi_datatype {
    match dt {
        DataType::U8 => ffi::fi_datatype_FI_UINT8,
        DataType::U16 => ffi::fi_datatype_FI_UINT16,
        DataType::U32 => ffi::fi_datatype_FI_UINT32,
        DataType::U64 => ffi::fi_datatype_FI_UINT64,
        DataType::I8 => ffi::fi_datatype_FI_INT8,
        DataType::I16 => ffi::fi_datatype_FI_INT16,
        DataType::I32 => ffi::fi_datatype_FI_INT32,
        DataType::I64 => ffi::fi_datatype_FI_INT64,
        DataType::F32 => ffi::fi_datatype_FI_FLOAT,
        DataType::F64 => ffi::fi_datatype_FI_DOUBLE,
        // libfabric has no (value, location) pairs: the end of its enumeration, which
        // every atomic call and validity query refuses (the engine never posts one:
        // `Capabilities::locked_atomics` is false here).
        DataType::LocF32
        | DataType::LocF64
        | DataType::LocI64
        | DataType::LocI32
        | DataType::LocI16
        // Nor long double and complex numbers: FI_LONG_DOUBLE and FI_FLOAT_COMPLEX,
        // FI_DOUBLE_COMPLEX exist, but providers' support differs, and a native atomic
        // of them would not meet the CPU's under one lock at the target.
        | DataType::LongDouble
        | DataType::LocLongDouble
        | DataType::ComplexF32
        | DataType::ComplexF64
        | DataType::ComplexLongDouble => ffi::fi_datatype_FI_DATATYPE_LAST,
    }
}

fn op(op: AccOp) -> ffi::fi_op {
    match op {
        AccOp::Sum => ffi::fi_op_FI_SUM,
        AccOp::Prod => ffi::fi_op_FI_PROD,
        AccOp::Min => ffi::fi_op_FI_MIN,
        AccOp::Max => ffi::fi_op_FI_MAX,
        AccOp::Band => ffi::fi_op_FI_BAND,
        AccOp::Bor => ffi::fi_op_FI_BOR,
        AccOp::Bxor => ffi::fi_op_FI_BXOR,
        AccOp::Land => ffi::fi_op_FI_LAND,
        AccOp::Lor => ffi::fi_op_FI_LOR,
        AccOp::Lxor => ffi::fi_op_FI_LXOR,
        AccOp::Replace => ffi::fi_op_FI_ATOMIC_WRITE,
        AccOp::NoOp => ffi::fi_op_FI_ATOMIC_READ,
        // No MINLOC or MAXLOC in libfabric: refused as `datatype`'s pairs are.
        AccOp::MinLoc | AccOp::MaxLoc => ffi::fi_op_FI_ATOMIC_OP_LAST,
    }
}

/// Sleeps until the file descriptor `fd` (a completion queue's wait object,
/// [`Endpoint::wait_fd`]) is readable or `timeout` passed: `Ok(true)` when readable or
/// interrupted by a signal (look again), `Ok(false)` at the timeout.
pub fn poll_fd(fd: i32, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd that outlives the call. The kernel only reads the number
    // `fd`: a descriptor closed meanwhile is POLLNVAL, not memory unsafety.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    match rc {
        0 => Ok(false),
        r if r > 0 => Ok(true),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(true)
            } else {
                Err(e)
            }
        }
    }
}
