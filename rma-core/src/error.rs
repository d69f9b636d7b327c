//! Errors, split by who is at fault: the caller ([`UsageError`]), a peer ([`PeerError`]),
//! or the transport underneath ([`TransportError`]).

use std::fmt;

use crate::Rank;

/// Result of every fallible call of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error the engine returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The caller used the API in a way MPI-4.1 forbids; nothing was sent.
    Usage(UsageError),
    /// A peer sent something malformed, or died.
    Peer(PeerError),
    /// The transport failed.
    Transport(TransportError),
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
        size: usize,
    },
    /// Displacement and length reach past the end of the target's window.
    OutOfBounds {
        /// The target.
        target: Rank,
        /// First byte touched.
        offset: u64,
        /// Bytes touched.
        len: u64,
        /// Size of the target's window in bytes.
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
    /// A blocking call made no progress before the configured deadline.
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(e) => write!(f, "usage error: {e}"),
            Error::Peer(e) => write!(f, "peer error: {e}"),
            Error::Transport(e) => write!(f, "transport error: {e}"),
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
                offset,
                len,
                window_len,
            } => write!(
                f,
                "bytes {offset}..{} of rank {target}'s window are asked for, but it has \
                 {window_len} bytes",
                offset.saturating_add(*len)
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
                "`{call}` waited for rank {r} and made no progress before the deadline \
                 (RMA_TIMEOUT_MS)"
            ),
            Timeout { call, rank: None } => write!(
                f,
                "`{call}` made no progress before the deadline (RMA_TIMEOUT_MS)"
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
        }
    }
}

// The wrapper's Display already says the inner error: no `source`, or reporters print it twice.
impl std::error::Error for Error {}
impl std::error::Error for UsageError {}
impl std::error::Error for PeerError {}
impl std::error::Error for TransportError {}

impl From<UsageError> for Error {
    fn from(e: UsageError) -> Self {
        Error::Usage(e)
    }
}
impl From<PeerError> for Error {
    fn from(e: PeerError) -> Self {
        Error::Peer(e)
    }
}
impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        match e {
            TransportError::PeerUnreachable(rank) => Error::Peer(PeerError::Dead { rank }),
            TransportError::PeerDeparted(rank) => Error::Peer(PeerError::Departed {
                rank,
                call: "a bootstrap collective",
            }),
            e => Error::Transport(e),
        }
    }
}
