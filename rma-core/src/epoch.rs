//! Epoch states (seed 004, "Epoch States"): the nine window states and the three
//! per-target lock states, and the asserts synchronization calls take.

use crate::Rank;

/// Assert bits of synchronization calls (MPI_MODE_*). Combine with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Assert(u32);

impl Assert {
    /// No assertion.
    pub const NONE: Assert = Assert(0);
    /// No conflicting lock or matching post/start is outstanding (lock, lock_all, start, post).
    pub const NOCHECK: Assert = Assert(1);
    /// The window was not updated by local stores since the last synchronization (post, fence).
    pub const NOSTORE: Assert = Assert(2);
    /// The window will not be updated by puts or accumulates until the next synchronization
    /// (post, fence).
    pub const NOPUT: Assert = Assert(4);
    /// The fence does not complete any sequence of RMA calls.
    pub const NOPRECEDE: Assert = Assert(8);
    /// The fence does not start any sequence of RMA calls.
    pub const NOSUCCEED: Assert = Assert(16);

    /// No bits set.
    pub const fn empty() -> Assert {
        Assert(0)
    }
    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Assert) -> bool {
        self.0 & other.0 == other.0
    }
    pub(crate) const fn only(self, allowed: Assert) -> bool {
        self.0 & !allowed.0 == 0
    }
}

impl std::ops::BitOr for Assert {
    type Output = Assert;
    fn bitor(self, rhs: Assert) -> Assert {
        Assert(self.0 | rhs.0)
    }
}

/// Kind of passive-target lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockType {
    /// Many origins may hold it at once.
    Shared,
    /// One origin holds it alone.
    Exclusive,
}

/// The window state (seed 004's nine window states), with the data valid in each.
#[derive(Debug)]
pub(crate) enum WindowEpoch {
    /// MPIDI_EPOCH_UNSET: no access epoch.
    Unset,
    /// MPIDI_EPOCH_FENCE_ISSUED: a fence's barrier is under way; ops queue.
    FenceIssued,
    /// MPIDI_EPOCH_FENCE_GRANTED: everyone has entered the fence; ops may issue.
    FenceGranted,
    /// MPIDI_EPOCH_PSCW_ISSUED / _GRANTED: `start` was called; per target, ops wait for its
    /// post (granted once every post has arrived).
    Pscw(PscwAccess),
    /// MPIDI_EPOCH_LOCK_ALL_CALLED: per-target protocol, locks taken lazily.
    LockAllCalled,
    /// MPIDI_EPOCH_LOCK_ALL_ISSUED: fell back to the window protocol; waiting for grants.
    LockAllIssued,
    /// MPIDI_EPOCH_LOCK_ALL_GRANTED: every target locked (or NOCHECK).
    LockAllGranted {
        /// Locks were not taken (NOCHECK): unlock sends no UNLOCK.
        nocheck: bool,
    },
    /// MPIDI_EPOCH_PER_TARGET: lock/unlock epochs, state per target.
    PerTarget,
}

impl WindowEpoch {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            WindowEpoch::Unset => "UNSET",
            WindowEpoch::FenceIssued => "FENCE_ISSUED",
            WindowEpoch::FenceGranted => "FENCE_GRANTED",
            WindowEpoch::Pscw(p) if p.all_granted() => "PSCW_GRANTED",
            WindowEpoch::Pscw(_) => "PSCW_ISSUED",
            WindowEpoch::LockAllCalled => "LOCK_ALL_CALLED",
            WindowEpoch::LockAllIssued => "LOCK_ALL_ISSUED",
            WindowEpoch::LockAllGranted { .. } => "LOCK_ALL_GRANTED",
            WindowEpoch::PerTarget => "PER_TARGET",
        }
    }
    /// Whether a passive-target epoch is open (lock or lock_all): flush is its call.
    pub(crate) fn is_passive(&self) -> bool {
        matches!(self, WindowEpoch::PerTarget) || self.is_lock_all()
    }
    /// Whether a lock_all epoch is open (in any of its states).
    pub(crate) fn is_lock_all(&self) -> bool {
        matches!(
            self,
            WindowEpoch::LockAllCalled
                | WindowEpoch::LockAllIssued
                | WindowEpoch::LockAllGranted { .. }
        )
    }
}

/// The access group of a `start` and which of its targets have posted.
#[derive(Debug, Default)]
pub(crate) struct PscwAccess {
    pub group: Vec<Rank>,
    pub granted: Vec<bool>,
}

impl PscwAccess {
    pub(crate) fn all_granted(&self) -> bool {
        self.granted.iter().all(|g| *g)
    }
    pub(crate) fn index(&self, rank: Rank) -> Option<usize> {
        self.group.iter().position(|r| *r == rank)
    }
}

/// Seed 004's per-target states (MPIDI_EPOCH_LOCK_*), plus `Ready` for targets whose
/// access the window state grants (fence, PSCW, lock_all window protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum TargetState {
    #[default]
    Ready,
    /// Lock requested by the user, nothing sent yet (single-op optimization may still apply).
    LockCalled,
    /// Lock request sent.
    LockIssued,
    /// Lock granted.
    LockGranted,
}

/// A lock this origin holds or has asked for, kept outside the target element so that it
/// survives the element's deallocation (no NOCHECK information is lost, unlike seed 004).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockInfo {
    pub exclusive: bool,
    pub nocheck: bool,
    /// The lock is held at the target (granted, or NOCHECK).
    pub granted: bool,
}
