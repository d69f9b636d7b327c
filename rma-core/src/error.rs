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
    /// Any other failure, with the backend's message.
    Failed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(e) => write!(f, "usage error: {e:?}"),
            Error::Peer(e) => write!(f, "peer error: {e:?}"),
            Error::Transport(e) => write!(f, "transport error: {e}"),
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Busy => f.write_str("no resources, retry"),
            TransportError::Unsupported(what) => write!(f, "unsupported: {what}"),
            TransportError::PeerUnreachable(r) => write!(f, "rank {r} unreachable"),
            TransportError::Failed(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {}
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
            e => Error::Transport(e),
        }
    }
}
