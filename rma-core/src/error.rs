//! Errors, split by who is at fault: the caller ([`UsageError`]), a peer ([`PeerError`]),
//! or the transport underneath ([`TransportError`]); an [`Error`] carries one of them
//! ([`ErrorKind`]) and where it was raised: the call, this process's rank, the window.
//!
//! ```
//! use rma_core::{sim, ErrorKind, UsageError};
//! sim::run(2, sim::Profile::ActiveMessages, 1, |engine| {
//!     let win = engine.allocate::<u64>(4)?;
//!     // A put with no epoch open: refused, nothing sent.
//!     let err = win.put(&[1], 1 - engine.rank(), 0).unwrap_err();
//!     assert!(matches!(err.kind(), ErrorKind::Usage(UsageError::NoEpoch { .. })));
//!     assert_eq!(err.call(), Some("put"));
//!     assert_eq!(err.rank(), Some(engine.rank()));
//!     // Displayed, it says all of that and what to do.
//!     let text = err.to_string();
//!     assert!(text.starts_with(&format!("`put` on rank {}, window ", engine.rank())), "{text}");
//!     assert!(text.contains("open one with fence, start, lock or lock_all first"), "{text}");
//!     win.free()?;
//!     Ok(())
//! }).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;

use crate::Rank;

/// Result of every fallible call of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error the engine returns: what went wrong ([`kind`](Error::kind)), and where:
/// the call that raised it, the rank of the process that raised it and the window, where
/// those are known. Boxed, so that a `Result` of the hot path stays one word wider than
/// its value.
///
/// Two errors are equal when their kinds are (where they were raised aside), so tests and
/// callers can compare against an expected [`ErrorKind`] made into an `Error`.
#[derive(Clone)]
pub struct Error(Box<ErrorInner>);

#[derive(Clone)]
struct ErrorInner {
    kind: ErrorKind,
    call: Option<&'static str>,
    rank: Option<Rank>,
    window: Option<u32>,
}

/// What went wrong, by who is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller used the API in a way MPI-4.1 forbids; nothing was sent.
    Usage(UsageError),
    /// A peer sent something malformed, or died.
    Peer(PeerError),
    /// The transport failed.
    Transport(TransportError),
}

impl Error {
    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }
    /// What went wrong, by value.
    pub fn into_kind(self) -> ErrorKind {
        self.0.kind
    }
    /// The API call that raised it (`"put"`, `"fence"`, `"allreduce"`...), where known.
    pub fn call(&self) -> Option<&'static str> {
        self.0.call
    }
    /// The rank (in the World) of the process that raised it, where known.
    pub fn rank(&self) -> Option<Rank> {
        self.0.rank
    }
    /// The id of the window the call was on, for window calls.
    pub fn window(&self) -> Option<u32> {
        self.0.window
    }
    /// The misuse, if the caller is at fault.
    pub fn usage(&self) -> Option<&UsageError> {
        match self.kind() {
            ErrorKind::Usage(u) => Some(u),
            _ => None,
        }
    }
    /// The peer's fault, if a peer is at fault.
    pub fn peer(&self) -> Option<&PeerError> {
        match self.kind() {
            ErrorKind::Peer(p) => Some(p),
            _ => None,
        }
    }
    /// The transport's failure, if the transport is at fault.
    pub fn transport(&self) -> Option<&TransportError> {
        match self.kind() {
            ErrorKind::Transport(t) => Some(t),
            _ => None,
        }
    }
    /// Whether the caller is at fault (nothing was sent or changed).
    pub fn is_usage(&self) -> bool {
        self.usage().is_some()
    }

    /// The same error with the ranks a misuse names (`NoEpoch`, `NotInGroup`,
    /// `NotLocked`, `AlreadyLocked`, `OutOfBounds`) put through `f`: a window over a
    /// communicator works in World ranks inside and says the communicator's outside.
    pub(crate) fn map_usage_target(mut self, f: impl Fn(Rank) -> Rank) -> Self {
        if let ErrorKind::Usage(
            UsageError::NoEpoch { target }
            | UsageError::NotInGroup { target }
            | UsageError::NotLocked { target }
            | UsageError::AlreadyLocked { target }
            | UsageError::OutOfBounds { target, .. }
            | UsageError::NotifyIndex { target, .. },
        ) = &mut self.0.kind
        {
            *target = f(*target);
        }
        self
    }

    /// Says where the error was raised: the public call the user made. A public call
    /// made inside another (`get` through `get_strided`, `Engine::allocate` through
    /// `Comm::allocate`) is overwritten by the outer one as the error goes up.
    pub(crate) fn raised_in(mut self, call: &'static str, rank: Rank, window: Option<u32>) -> Self {
        let inner = &mut *self.0;
        inner.call = Some(call);
        inner.rank = Some(rank);
        inner.window = window;
        self
    }
}

impl From<ErrorKind> for Error {
    #[cold] // errors are made off the hot path, out of line
    #[inline(never)]
    fn from(kind: ErrorKind) -> Self {
        Error(Box::new(ErrorInner {
            kind,
            call: None,
            rank: None,
            window: None,
        }))
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind()
    }
}
impl Eq for Error {}

impl PartialEq<ErrorKind> for Error {
    fn eq(&self, other: &ErrorKind) -> bool {
        self.kind() == other
    }
}

// `{:?}` is what `fn main() -> Result<(), Error>` prints on failure: the message a user
// can act on, and the chain of causes under it; `{:#?}` is the structure.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            let mut d = f.debug_struct("Error");
            d.field("kind", self.kind());
            if let Some(call) = self.call() {
                d.field("call", &call);
            }
            if let Some(rank) = self.rank() {
                d.field("rank", &rank);
            }
            if let Some(window) = self.window() {
                d.field("window", &window);
            }
            return d.finish();
        }
        f.write_str(&with_causes(self))
    }
}

/// `e`'s message followed by each of its sources ("allocating a window of 4096 bytes
/// failed: caused by: Cannot allocate memory (os error 12)"): what [`Error`]'s `{:?}`
/// prints, and what travels where only text can (a peer's share of a collective's
/// outcome).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": caused by: ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Misuse by the caller. Nothing was sent or changed when this is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UsageError {
    /// An RMA operation with no access epoch open to that target.
    NoEpoch {
        /// The target of the operation.
        target: Rank,
    },
    /// A synchronization call that conflicts with the epoch already open
    /// (for example `lock_all` inside a fence epoch, or a second `start`).
    EpochConflict {
        /// What was called.
        call: &'static str,
        /// The window state it met.
        state: &'static str,
    },
    /// The target is not in the group given to `start`.
    NotInGroup {
        /// The target of the operation.
        target: Rank,
    },
    /// `unlock` of a target that was never locked.
    NotLocked {
        /// The target named by `unlock`.
        target: Rank,
    },
    /// `lock` of a target this process already holds a lock on.
    AlreadyLocked {
        /// The target named by `lock`.
        target: Rank,
    },
    /// A rank outside the window's group.
    RankOutOfRange {
        /// The rank given.
        rank: Rank,
        /// The size of the window's group.
        size: Rank,
    },
    /// Displacement and length reach past the end of the target's window. In the units
    /// the call took: elements of the window's type, the displacement in the target's
    /// displacement unit (the element, unless the window was made with another).
    OutOfBounds {
        /// The target (its rank in the window's communicator).
        target: Rank,
        /// The displacement asked for.
        disp: u64,
        /// Elements the op spans from there (first to last touched).
        count: u64,
        /// Size of the target's window, in elements.
        window_len: u64,
    },
    /// The accumulate operation is not defined for the element type
    /// (bitwise and logical operations on floating point).
    OpNotForType {
        /// The operation.
        op: crate::AccOp,
        /// The element type.
        datatype: crate::DataType,
    },
    /// Origin and target layouts describe different numbers of elements, or a stride
    /// shorter than its block.
    BadLayout,
    /// An assert bit that this call does not accept.
    BadAssert {
        /// The call.
        call: &'static str,
    },
    /// Two synchronization calls overlapped from different threads in a way seed 004's
    /// "RMA + threads" rules do not allow.
    ConcurrentSync {
        /// The call that found another in progress.
        call: &'static str,
    },
    /// `wait`/`test` with no exposure epoch posted, or `complete` with no `start`.
    NoExposureEpoch,
    /// The window kind does not support this call (for example `shared_query` on a
    /// window that is not from `allocate_shared`, or the transport cannot share memory).
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// A dynamic window address that no attached region holds.
    NotAttached,
    /// The window still has an epoch open where the call needs none (for example `free`).
    EpochOpen,
    /// A call on a window this process holds for local access in place (the facade's
    /// `LocalGuard`, [`Window::begin_local_access`](crate::Window::begin_local_access)):
    /// it would touch the memory the guard lends.
    LocalAccess {
        /// The call refused.
        call: &'static str,
    },
    /// An `RMA_*` environment variable with a value rma does not accept.
    BadEnvironment {
        /// The variable.
        variable: &'static str,
        /// Its value (the first 64 characters).
        value: String,
        /// What it accepts.
        expected: &'static str,
    },
    /// A size that no memory can hold or no address reach: a count, layout or
    /// displacement whose bytes overflow (past `isize::MAX`, or 64 bits).
    TooLarge {
        /// What was too large.
        what: &'static str,
    },
    /// A group or communicator argument MPI forbids (a rank named twice, a root outside
    /// the communicator, buffers of different lengths across the ranks of a collective).
    BadGroup {
        /// What is wrong with it.
        why: &'static str,
    },
    /// A reduction with an operation that is not one (`Replace`, `NoOp`), or not defined
    /// for the element type.
    BadReduction {
        /// The operation.
        op: crate::AccOp,
        /// The element type.
        datatype: crate::DataType,
    },
    /// A notification counter index past the counters the target set
    /// ([`Window::set_notify_count`](crate::Window::set_notify_count)); `count` 0: it set
    /// none.
    NotifyIndex {
        /// The process whose counter was named (this one's for a local counter call).
        target: Rank,
        /// The index given.
        index: u32,
        /// The counters it has.
        count: u32,
    },
}

/// A peer at fault: it died, or sent something this process refuses to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerError {
    /// A packet failed to decode; it was dropped unapplied.
    Malformed {
        /// The sender.
        from: Rank,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A packet asked for memory outside this process's window; it was refused.
    OutOfBounds {
        /// The sender.
        from: Rank,
    },
    /// The peer is gone (its process died or its endpoint failed).
    Dead {
        /// The peer.
        rank: Rank,
    },
    /// The peer refused an operation we sent (for example it was out of its window).
    Refused {
        /// The peer.
        rank: Rank,
    },
    /// A blocking call did not finish within the configured deadline.
    Timeout {
        /// The call that timed out.
        call: &'static str,
        /// The peer whose part was awaited, where one is known.
        rank: Option<Rank>,
    },
    /// The peer left the job (its World was dropped, it returned an error or panicked)
    /// before joining a collective call this process is in: the call can never finish.
    Departed {
        /// The peer.
        rank: Rank,
        /// The collective call this process was in.
        call: &'static str,
    },
    /// The peer is in a different collective call than this process (for example
    /// `allocate` against `create_dynamic`, or `fence` against `free`): MPI requires every
    /// process to make the same collective calls in the same order.
    Mismatch {
        /// The peer.
        rank: Rank,
        /// The call this process made.
        call: &'static str,
        /// The call the peer made.
        theirs: &'static str,
    },
    /// A collective call failed on the peer (for example its window memory could not be
    /// allocated); every process of the collective returns this error and none keeps a
    /// half-made window.
    CollectiveFailed {
        /// The peer that failed.
        rank: Rank,
        /// The collective call.
        call: &'static str,
        /// What the peer reported.
        reason: String,
    },
}

/// A failure of the transport underneath, with its own message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// No resource right now (send queue full, no credits); retry after progress.
    Busy,
    /// The transport cannot do what was asked.
    Unsupported(&'static str),
    /// The peer cannot be reached any more.
    PeerUnreachable(Rank),
    /// The peer left the job normally before joining the collective this process waits
    /// in (the launcher saw it go).
    PeerDeparted(Rank),
    /// Any other failure, with the backend's message.
    Failed(String),
    /// A failure of the system or library under the backend (an `io::Error`, a
    /// libfabric or verbs return code), kept whole as the [`source`](std::error::Error::source)
    /// of this error, with what the backend was doing.
    Backend(BackendError),
}

/// A failure of the system or library under a backend, with what the backend was doing
/// and the failure itself as the error's [`source`](std::error::Error::source).
#[derive(Clone)]
pub struct BackendError {
    doing: String,
    source: Arc<dyn std::error::Error + Send + Sync>,
}

impl BackendError {
    /// `doing`: what failed, said as an action ("mapping the window segment");
    /// `source`: the failure underneath.
    pub fn new(
        doing: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError {
            doing: doing.into(),
            source: Arc::new(source),
        }
    }
    /// What the backend was doing.
    pub fn doing(&self) -> &str {
        &self.doing
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("doing", &self.doing)
            .field("source", &self.source)
            .finish()
    }
}

// Equal when they say the same: the sources are compared by their messages (a system
// error has no other identity that survives a clone).
impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.doing == other.doing && self.source.to_string() == other.source.to_string()
    }
}
impl Eq for BackendError {}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.doing)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl From<BackendError> for TransportError {
    fn from(e: BackendError) -> Self {
        TransportError::Backend(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.call(), self.rank(), self.window()) {
            (Some(call), Some(rank), Some(win)) => {
                write!(f, "`{call}` on rank {rank}, window {win}: ")?
            }
            (Some(call), Some(rank), None) => write!(f, "`{call}` on rank {rank}: ")?,
            (Some(call), None, _) => write!(f, "`{call}`: ")?,
            _ => {}
        }
        fmt::Display::fmt(self.kind(), f)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Usage(e) => write!(f, "usage error: {e}"),
            ErrorKind::Peer(e) => write!(f, "peer error: {e}"),
            ErrorKind::Transport(e) => write!(f, "transport error: {e}"),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use UsageError::*;
        match self {
            NoEpoch { target } => write!(
                f,
                "no access epoch is open toward rank {target}: open one with fence, start, \
                 lock or lock_all first"
            ),
            EpochConflict { call, state } => write!(
                f,
                "`{call}` cannot be called while the window is in state {state}: close that \
                 epoch first"
            ),
            NotInGroup { target } => write!(
                f,
                "rank {target} is not in the group given to `start`: an access epoch of \
                 post/start only reaches the ranks of its group"
            ),
            NotLocked { target } => write!(
                f,
                "`unlock` of rank {target}, which this process has not locked in this window"
            ),
            AlreadyLocked { target } => write!(
                f,
                "rank {target} is already locked by this process in this window: unlock it \
                 before locking it again"
            ),
            RankOutOfRange { rank, size } => write!(
                f,
                "rank {rank} is outside the group of {size} ranks (0..{size}) of the window or \
                 communicator"
            ),
            OutOfBounds {
                target,
                disp,
                count,
                window_len,
            } => write!(
                f,
                "{count} elements at displacement {disp} reach past the end of rank \
                 {target}'s window, which holds {window_len} elements"
            ),
            OpNotForType { op, datatype } => write!(
                f,
                "the accumulate operation {op:?} is not defined for {datatype:?} elements"
            ),
            BadLayout => f.write_str(
                "the origin and target layouts select different numbers of elements, a \
                 stride is shorter than its block, or a group names a rank twice",
            ),
            BadAssert { call } => write!(f, "`{call}` does not accept the assert bits given"),
            ConcurrentSync { call } => write!(
                f,
                "`{call}` overlapped another synchronization call on this window from \
                 another thread: synchronize the threads first"
            ),
            NoExposureEpoch => f.write_str(
                "no exposure epoch (post) or access epoch (start) is open for \
                 `wait`/`test`/`complete`",
            ),
            Unsupported { what } => write!(f, "not supported: {what}"),
            NotAttached => f.write_str(
                "no memory attached to the dynamic window holds that address: attach it first",
            ),
            LocalAccess { call } => write!(
                f,
                "`{call}` is refused while this process holds its window memory for local \
                 access (a LocalGuard): drop the guard first"
            ),
            BadEnvironment {
                variable,
                value,
                expected,
            } => write!(
                f,
                "{variable}={value:?} is not accepted: it takes {expected}"
            ),
            TooLarge { what } => write!(
                f,
                "{what} is too large: its size in bytes overflows what memory can hold"
            ),
            BadGroup { why } => write!(f, "bad group or communicator argument: {why}"),
            BadReduction { op, datatype } => write!(
                f,
                "{op:?} is not a reduction defined for {datatype:?} elements (reductions: \
                 Sum, Prod, Min, Max and, for integers, the bitwise and logical operations)"
            ),
            NotifyIndex {
                target,
                index,
                count: 0,
            } => write!(
                f,
                "notification counter {index} of rank {target}: it has none (set them \
                 with set_notify_count, collectively)"
            ),
            NotifyIndex {
                target,
                index,
                count,
            } => write!(
                f,
                "notification counter {index} of rank {target}: it has {count} (0 to {})",
                count - 1
            ),
            EpochOpen => f.write_str(
                "an epoch is still open on the window: close it (fence with NOSUCCEED, \
                 complete, wait, unlock, unlock_all) before this call",
            ),
        }
    }
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PeerError::*;
        match self {
            Malformed { from, reason } => write!(
                f,
                "rank {from} sent a malformed packet ({reason}); it was dropped unapplied"
            ),
            OutOfBounds { from } => write!(
                f,
                "rank {from} asked for memory outside this process's window; refused"
            ),
            Dead { rank } => write!(
                f,
                "rank {rank} is dead (its process or endpoint is gone); what waited on it \
                 failed"
            ),
            Refused { rank } => write!(
                f,
                "rank {rank} refused the operation (outside its window, or not \
                 applicable there)"
            ),
            Timeout {
                call,
                rank: Some(r),
            } => write!(
                f,
                "`{call}` waited for rank {r} and did not finish within the deadline \
                 (RMA_TIMEOUT_MS)"
            ),
            Timeout { call, rank: None } => write!(
                f,
                "`{call}` did not finish within the deadline (RMA_TIMEOUT_MS)"
            ),
            Departed { rank, call } => write!(
                f,
                "rank {rank} left the job before joining `{call}`, a collective this process \
                 is in: it can never complete"
            ),
            Mismatch { rank, call, theirs } => write!(
                f,
                "collective mismatch: this process called `{call}` while rank {rank} called \
                 `{theirs}`; every rank must make the same collective calls in the same order"
            ),
            CollectiveFailed { rank, call, reason } => {
                write!(f, "`{call}` failed on rank {rank}: {reason}")
            }
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Busy => f.write_str("no resources, retry"),
            TransportError::Unsupported(what) => write!(f, "unsupported: {what}"),
            TransportError::PeerUnreachable(r) => write!(f, "rank {r} unreachable"),
            TransportError::PeerDeparted(r) => {
                write!(f, "rank {r} left the job before joining the collective")
            }
            TransportError::Failed(msg) => f.write_str(msg),
            // The source's own message follows in the chain (`source`), not here.
            TransportError::Backend(e) => write!(f, "{e}"),
        }
    }
}

// The wrappers' Display already says the inner error, so their `source` skips it (or
// reporters print it twice) and goes on to what the inner error has under it: a backend
// failure's system error.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.kind().source()
    }
}
impl std::error::Error for ErrorKind {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ErrorKind::Transport(t) => t.source(),
            _ => None,
        }
    }
}
impl std::error::Error for UsageError {}
impl std::error::Error for PeerError {}
impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Backend(e) => e.source(),
            _ => None,
        }
    }
}

impl From<UsageError> for Error {
    #[cold] // errors are made off the hot path, out of line
    #[inline(never)]
    fn from(e: UsageError) -> Self {
        ErrorKind::Usage(e).into()
    }
}
impl From<PeerError> for Error {
    #[cold] // errors are made off the hot path, out of line
    #[inline(never)]
    fn from(e: PeerError) -> Self {
        ErrorKind::Peer(e).into()
    }
}
impl From<TransportError> for Error {
    #[cold] // errors are made off the hot path, out of line
    #[inline(never)]
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::PeerUnreachable(rank) => PeerError::Dead { rank }.into(),
            TransportError::PeerDeparted(rank) => PeerError::Departed {
                rank,
                call: "a bootstrap collective",
            }
            .into(),
            e => ErrorKind::Transport(e).into(),
        }
    }
}
impl From<BackendError> for Error {
    #[cold] // errors are made off the hot path, out of line
    #[inline(never)]
    fn from(e: BackendError) -> Self {
        TransportError::Backend(e).into()
    }
}
