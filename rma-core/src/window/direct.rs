//! Direct access: ops that go straight to the backend, past the window's state lock,
//! op table and pools, where nothing of the design is left for them to do.
//!
//! Seed 004 queues an op (RMA_OP) so that ISSUE_OPS can hold it until its target's lock
//! or post arrives, piggyback a synchronization on it, or track it until its completion
//! comes back. On a backend whose every native op on the window completes in its call
//! (shared memory: a store, a copy, a CPU atomic), toward a target whose access is
//! granted and that has nothing queued, under way or awaited, none of that has work: the
//! op's call is its issue and its completion, and a flush of that target is MEM_SYNC
//! alone. Taking the window's mutex, finding the target element and counting the op
//! under it was then the op's whole cost on top of the copy (callgrind: most of a put
//! + flush).
//!
//! The window marks such targets, one bit each, and the op's and flush's public calls
//! look at the bit without the lock. The invariant, kept under the window's state lock:
//! **a target's bit is set only while its access is granted in the current epoch, nothing
//! of it is queued, issued, in flight or awaited (no active message since its last
//! completion), no error is deferred, and the window's ops all complete in the call.**
//!
//! - Set by the locked path once it finds that so: a native op completed in its call
//!   toward a settled, granted target ([`rma_op`](super::rma_op)), a lock taken
//!   natively in `lock`'s call ([`lock`](super::lock)), every member at the end of a
//!   fence that granted them all with nothing outstanding ([`fence`](super::fence)),
//!   each target whose post is in when `start` opens its epoch ([`pscw`](super::pscw)).
//!   Fence and PSCW epochs usually hold one op per target: left to the op, every one
//!   took the locked path.
//! - Cleared before anything can break it: every op that takes the locked path clears
//!   its target's bit first (whatever it queues, the next op must not overtake it);
//!   every synchronization call that ends or changes an epoch (fence, start, complete,
//!   unlock_all, on entry; lock and lock_all when they leave a fence's epoch) clears
//!   them all, `unlock` its target's; a deferred error, a failed epoch, an abandoned
//!   target, a dropped or freed window clear them all.
//!
//! Every check MPI asks for stays on the direct path or is implied by the bit: the
//! displacement against the target's window (the public call's extent, and the backend's
//! own check of its mapping); the epoch (the bit exists only inside a granted one; a
//! flush also needs it passive, recorded beside the bits). An op racing the call that
//! ends its epoch in another thread is erroneous in MPI (an RMA call belongs to the epoch
//! its process's synchronization calls delimit, and threads order those themselves); here
//! it then lands in the target's memory as it would have a moment
//! earlier: no memory of this process is touched unsafely, the mapping lives as long as
//! the window.
//!
//! # Counted ops, on a network
//!
//! Over a network (verbs, libfabric) a native op is under way after its call: its
//! completion comes back later, through the backend's poll. Seed 004's path for it is
//! still heavier than the op: the window's state lock, the target element's count, and a
//! flush that waits through whole progress passes (every window's ISSUE_OPS and CLEANUP
//! for every look at the completion queue). Callgrind, the echo transport completing
//! each put at the next poll: about 1,900 instructions per put + flush, of which the
//! backend's own are some 300; in the rxe VM, where every instruction is emulated, that
//! is most of what a put + flush adds to raw verbs.
//!
//! A window whose ops may stay pending therefore has a second set of marks: targets that
//! **puts and gets** may reach directly, each counted in flight until its completion
//! comes. The invariant, kept under the window's state lock like the first: **a target's
//! mark is set only in a passive epoch, while its access is granted, nothing of it is
//! queued, issued or awaited in its target element (no active message since its last
//! completion, no ordered put waiting for a message after it), no error is deferred, and
//! its puts complete at the target when their completions come (not [`ordered_puts`]).**
//! A marked op counts itself in its target's in-flight count, then goes to the backend
//! with a token that names the window and, for a put, the target, for a get, its entry
//! among the window's [`CountedGets`] (its target and request); no op element, no table.
//! Its completion, taken by whichever thread polls, uncounts it without the state lock: a
//! get's request gets its bytes first, so a flush that sees the count drop finds them. A
//! failed put defers its error and clears every mark first, under the lock; a failed
//! get's error is its request's, as for any get.
//!
//! - Set by the locked path's put or get ([`rma_op`](super::rma_op)) that finds its
//!   target so (a get only where the backend reads into a buffer of its own: a large get
//!   it reads straight into the caller's keeps the locked path).
//! - Cleared where the first marks are, and the same way.
//! - Awaited by every call that must see the ops complete: a flush of a marked target
//!   waits for its count alone, polling the backend and handling what it finds (and
//!   a full progress pass now and then, so that everything else still progresses); the
//!   locked flush, unlock and unlock_all wait for the counts of their targets before
//!   they look at the state (the unlocks take the marks away first).
//!
//! Why MPI's rules still hold:
//! - **Completion.** A flush returns once the backend reported every counted op of its
//!   target complete, and a backend reports a native put or get complete only once it
//!   is done at the target (a verbs RDMA WRITE's acknowledgement, a delivery-complete
//!   libfabric write; ordered puts, complete at the origin alone, are never counted).
//!   Unlock and unlock_all wait for the same before they release a lock word or send an
//!   UNLOCK.
//! - **Order.** Only puts and gets are counted, and MPI orders neither against other ops
//!   to the same bytes within an epoch (such accesses conflict; a program that makes
//!   them is erroneous). Accumulates, whose order MPI keeps per location, take the
//!   locked path, which closes their target's mark first; the counts still cover the
//!   puts and gets before them.
//! - **Epochs.** Marks exist only inside a granted passive epoch; every call that ends
//!   or changes one clears them under the state lock, as for the first kind.
//! - **Errors.** A failed op's error is reported by the next call that would have
//!   reported it on the locked path: a put's by the flush or unlock that waits for it, a
//!   get's by its request.
//!
//! Marks and counts are kept in [`COUNTED_SLOTS`] slots, rank `r` in slot `r %
//! COUNTED_SLOTS`, so that a window's memory stays flat in the number of ranks: up to
//! that many ranks each has a slot of its own. Beyond them, a slot's mark is one rank's
//! at a time (the others' ops take the locked path; their puts are counted in the slot
//! all the same), and a flush may wait for ops to another rank of its slot as well (more
//! than MPI asks, never less).
//!
//! [`ordered_puts`]: crate::transport::Capabilities::ordered_puts

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::request::RequestState;
use crate::Rank;

/// The targets of one window that ops may reach directly (see the module's docs).
#[derive(Debug)]
pub(crate) struct DirectAccess {
    /// One bit per World rank; empty where the backend's ops do not all complete in
    /// their call (no target is ever direct).
    bits: Box<[AtomicU64]>,
    /// The window's members, as the bits they have in `bits` (empty with it).
    members: Box<[u64]>,
    /// The bits were set in a passive epoch (lock, lock_all): a flush may take them.
    passive: AtomicBool,
    /// The slots of counted ops (see the module's docs): [`COUNTED_SLOTS`] of them,
    /// rank `r` in slot `r % COUNTED_SLOTS`; empty where the window's ops complete in
    /// their call, or none of its targets takes a native put.
    slots: Box<[CountedSlot]>,
    /// Which slots hold a mark (bit `i`: slot `i`), so that clearing them all looks at
    /// those alone. Changed under the window's state lock only.
    marked_slots: AtomicU64,
}

/// The counted ops of the ranks of one slot.
#[derive(Debug, Default)]
struct CountedSlot {
    /// The rank whose ops go direct and counted, plus one; 0: none.
    mark: AtomicU64,
    /// Counted ops under way toward the slot's ranks.
    in_flight: AtomicU64,
}

/// The slots of a window's counted ops: as many ranks have marks of their own at once
/// (a power of two, so that a rank's slot is a mask of it).
pub(crate) const COUNTED_SLOTS: usize = 64;

impl DirectAccess {
    /// For a window of `ranks` World ranks whose members are `members`; `enabled`:
    /// every native op of the window's backend completes in its call.
    /// `counted`: puts and gets may go direct and counted instead (ops that stay pending).
    pub(crate) fn new(
        ranks: usize,
        members: impl Iterator<Item = Rank>,
        enabled: bool,
        counted: bool,
    ) -> Self {
        let slots = if counted && !enabled {
            COUNTED_SLOTS
        } else {
            0
        };
        let words = if enabled { ranks.div_ceil(64) } else { 0 };
        let mut mask = vec![0u64; words];
        for rank in members {
            let (word, bit) = Self::at(rank);
            if let Some(m) = mask.get_mut(word) {
                *m |= bit;
            }
        }
        DirectAccess {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            members: mask.into(),
            passive: AtomicBool::new(false),
            slots: (0..slots).map(|_| CountedSlot::default()).collect(),
            marked_slots: AtomicU64::new(0),
        }
    }

    /// Whether an op toward `rank` may go directly (a rank past the window: no).
    #[inline(always)]
    pub(crate) fn allows(&self, rank: Rank) -> bool {
        let (word, bit) = Self::at(rank);
        // Acquire: pairs with the Release of `open`, whose thread held the state that
        // granted access (a lock word taken, a post seen) before it set the bit.
        self.bits
            .get(word)
            .is_some_and(|w| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Whether a flush of `rank` is MEM_SYNC alone: the rank is direct, in a passive
    /// epoch.
    #[inline(always)]
    pub(crate) fn allows_flush(&self, rank: Rank) -> bool {
        self.allows(rank) && self.passive.load(Ordering::Acquire)
    }

    /// Marks `rank` direct, in a passive epoch or not. Under the window's state lock only
    /// (which orders every writer: a load and a store, no locked add).
    pub(super) fn open(&self, rank: Rank, passive: bool) {
        let (word, bit) = Self::at(rank);
        if let Some(w) = self.bits.get(word) {
            self.passive.store(passive, Ordering::Relaxed);
            let now = w.load(Ordering::Relaxed);
            if now & bit == 0 {
                w.store(now | bit, Ordering::Release);
            }
        }
    }

    /// Marks every member direct: an epoch that granted access to all of them with
    /// nothing of any outstanding (a fence's, a lock_all's that took every lock word).
    /// Under the window's state lock only. (Each epoch of a fence loop has one op per
    /// target: left to the first op of each, every op took the locked path.)
    pub(super) fn open_members(&self, passive: bool) {
        if self.bits.is_empty() {
            return;
        }
        self.passive.store(passive, Ordering::Relaxed);
        for (w, &mask) in self.bits.iter().zip(self.members.iter()) {
            let now = w.load(Ordering::Relaxed);
            if now | mask != now {
                w.store(now | mask, Ordering::Release);
            }
        }
    }

    /// Takes `rank`'s marks away (both kinds). Under the window's state lock only.
    #[inline]
    pub(super) fn close(&self, rank: Rank) {
        let (word, bit) = Self::at(rank);
        if let Some(w) = self.bits.get(word) {
            let now = w.load(Ordering::Relaxed);
            if now & bit != 0 {
                w.store(now & !bit, Ordering::Release);
            }
            // A window has one kind of marks or the other (see `new`).
            return;
        }
        if !self.slots.is_empty() {
            self.close_counted(rank);
        }
    }

    /// [`close`](Self::close) on a window with counted ops (out of line: shared memory's
    /// unlock and locked ops close their target's mark on every call).
    #[inline(never)]
    fn close_counted(&self, rank: Rank) {
        if let Some(s) = self.slot(rank) {
            if s.mark.load(Ordering::Relaxed) == u64::from(rank) + 1 {
                s.mark.store(0, Ordering::Release);
                let i = rank as usize % COUNTED_SLOTS;
                let marked = self.marked_slots.load(Ordering::Relaxed);
                self.marked_slots
                    .store(marked & !(1 << i), Ordering::Relaxed);
            }
        }
    }

    /// Takes every mark away (both kinds). Under the window's state lock only.
    pub(super) fn close_all(&self) {
        for w in self.bits.iter() {
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Release);
            }
        }
        let mut marked = self.marked_slots.load(Ordering::Relaxed);
        if marked != 0 {
            self.marked_slots.store(0, Ordering::Relaxed);
            while marked != 0 {
                let i = marked.trailing_zeros() as usize;
                marked &= marked - 1;
                self.slots[i].mark.store(0, Ordering::Release);
            }
        }
    }

    /// Whether ops may go direct and counted on this window at all.
    #[inline(always)]
    pub(crate) fn counts_ops(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Whether an op toward `rank` may go direct and counted.
    #[inline(always)]
    pub(crate) fn counts_ops_to(&self, rank: Rank) -> bool {
        // Acquire: pairs with the Release of `open_counted`, as in `allows`.
        self.slot(rank)
            .is_some_and(|s| s.mark.load(Ordering::Acquire) == u64::from(rank) + 1)
    }

    /// Marks `rank`'s ops direct and counted, unless another rank of its slot holds the
    /// slot's mark (its ops then take the locked path). Under the
    /// window's state lock only, in a passive epoch, with the module's invariant checked
    /// by the caller.
    pub(super) fn open_counted(&self, rank: Rank) {
        if let Some(s) = self.slot(rank) {
            if s.mark.load(Ordering::Relaxed) == 0 {
                let i = rank as usize % COUNTED_SLOTS;
                let marked = self.marked_slots.load(Ordering::Relaxed);
                self.marked_slots.store(marked | 1 << i, Ordering::Relaxed);
                s.mark.store(u64::from(rank) + 1, Ordering::Release);
            }
        }
    }

    /// The slot of `rank`'s counted ops (none on a window without them).
    #[inline(always)]
    fn slot(&self, rank: Rank) -> Option<&CountedSlot> {
        if self.slots.is_empty() {
            return None;
        }
        self.slots.get(rank as usize % COUNTED_SLOTS)
    }

    /// A counted op toward `rank` is about to go to the backend (counted before, so its
    /// completion, which any thread may take, never finds the count without it).
    #[inline(always)]
    pub(crate) fn op_issued(&self, rank: Rank) {
        if let Some(s) = self.slot(rank) {
            s.in_flight.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A counted op toward `rank` completed (or failed, or never went).
    #[inline(always)]
    pub(crate) fn op_completed(&self, rank: Rank) {
        if let Some(s) = self.slot(rank) {
            // Release: whatever the completion's handler did before (a deferred error,
            // the marks cleared) is seen by the waiter that sees the count drop.
            s.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether no counted op toward `rank` (or another rank of its slot) is under way.
    #[inline(always)]
    pub(crate) fn ops_settled(&self, rank: Rank) -> bool {
        self.slot(rank)
            .is_none_or(|s| s.in_flight.load(Ordering::Acquire) == 0)
    }

    /// Whether no counted op is under way toward any rank.
    pub(crate) fn all_ops_settled(&self) -> bool {
        self.slots
            .iter()
            .all(|s| s.in_flight.load(Ordering::Acquire) == 0)
    }

    fn at(rank: Rank) -> (usize, u64) {
        ((rank / 64) as usize, 1 << (rank % 64))
    }
}

/// The counted gets of a window under way: each one's target and request, found by the
/// index its token carries (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct CountedGets {
    /// By index: the target and the request of a get under way.
    waiting: Vec<Option<(Rank, Arc<RequestState>)>>,
    /// Indices free for the next gets.
    free: Vec<u32>,
    /// The request state of the last get that completed, for the next get once its
    /// request is done with it: a loop of gets allocates none.
    spare: Option<Arc<RequestState>>,
}

impl CountedGets {
    /// A get toward `rank` is about to go: its index and its request's state.
    pub(crate) fn start(&mut self, rank: Rank) -> (u32, Arc<RequestState>) {
        let state = RequestState::reuse_or_new(self.spare.take());
        let entry = Some((rank, state.clone()));
        let index = match self.free.pop() {
            Some(i) => {
                self.waiting[i as usize] = entry;
                i
            }
            None => {
                self.waiting.push(entry);
                (self.waiting.len() - 1) as u32
            }
        };
        (index, state)
    }

    /// Get `index` completed, failed or never went: its target and request state, if it
    /// was under way (a token this window never gave: `None`).
    pub(crate) fn finish(&mut self, index: u32) -> Option<(Rank, Arc<RequestState>)> {
        let entry = self.waiting.get_mut(index as usize)?.take()?;
        self.free.push(index);
        self.spare = Some(entry.1.clone());
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_open_and_close_per_rank_and_all_at_once() {
        let d = DirectAccess::new(130, [1, 63, 64, 129, 7].into_iter(), true, false);
        assert!(!d.allows(0) && !d.allows(129) && !d.allows(130) && !d.allows(u32::MAX));
        d.open(129, true);
        d.open(3, true);
        assert!(d.allows(129) && d.allows(3) && !d.allows(2) && !d.allows(65));
        assert!(d.allows_flush(3));
        d.close(3);
        assert!(!d.allows(3) && d.allows(129));
        d.open(64, false);
        assert!(
            d.allows(64) && !d.allows_flush(64),
            "an active epoch has no flush"
        );
        d.close_all();
        assert!(!d.allows(129) && !d.allows(64));
        d.open_members(false);
        assert!(d.allows(1) && d.allows(63) && d.allows(64) && d.allows(129) && d.allows(7));
        assert!(!d.allows(0) && !d.allows(65) && !d.allows_flush(1));
        d.open_members(true);
        assert!(d.allows_flush(129) && !d.allows(2));
        d.close_all();
        // Past the window: never direct, opening it changes nothing.
        d.open(500, true);
        assert!(!d.allows(500));
    }

    #[test]
    fn a_backend_whose_ops_may_stay_pending_has_no_direct_target() {
        let d = DirectAccess::new(4, 0..4, false, false);
        d.open_members(true);
        assert!(!d.allows(2));
        d.open(1, true);
        assert!(!d.allows(1) && !d.allows_flush(1));
    }
}
