//! The operation table (seed 004, "Data structures"): a slot array of target lists, each
//! target element holding that target's operation elements.
//!
//! Nothing here grows with the number of processes. Target and operation elements come
//! from bounded [pools](crate::pool), and the slot array starts at the configured size
//! ([`Config::slots`](crate::Config::slots)) and grows only with the number of targets
//! that hold an element at once. Seed 004 keeps the array fixed and accepts a lookup
//! linear in the targets that share a slot ("can cause overhead" with many active
//! targets); here the array doubles whenever the active targets outnumber its slots, so
//! a lookup walks about one element however many targets are active (an op toward one
//! of 4,096 active targets cost 7x one toward one of 256 with 64 fixed slots). The array
//! is then as large as the most targets active at once, which the target pool bounds:
//! memory follows what a process talks to, never the job's size.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::datatype::{AccOp, DataType};
use crate::epoch::TargetState;
use crate::request::RequestState;
use crate::wire::Extent;
use crate::Rank;

/// What an operation element does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum OpKind {
    #[default]
    Put,
    Get,
    Accumulate,
    GetAccumulate,
    CompareAndSwap,
}

impl OpKind {
    /// Ops whose completion needs data back from the target (moved to the tail of the
    /// list when RMA_DONE is piggybacked, so the response carries the ack).
    pub(crate) fn has_response(self) -> bool {
        matches!(
            self,
            OpKind::Get | OpKind::GetAccumulate | OpKind::CompareAndSwap
        )
    }
    /// The accumulate family (accumulate, get_accumulate, fetch_and_op,
    /// compare_and_swap): ops that MPI orders among themselves from one origin to one
    /// target location (accumulate_ordering's default, rar, raw, war and waw).
    pub(crate) fn is_atomic(self) -> bool {
        matches!(
            self,
            OpKind::Accumulate | OpKind::GetAccumulate | OpKind::CompareAndSwap
        )
    }
}

/// An operation element: PENDING while queued, ISSUED while waiting for completion.
#[derive(Debug, Default)]
pub(crate) struct OpElem {
    pub kind: OpKind,
    pub extent: Extent,
    pub op: Option<AccOp>,
    pub datatype: Option<DataType>,
    /// Origin payload (for compare-and-swap: compare then swap), copied when queued.
    pub data: Vec<u8>,
    /// The payload is still the caller's (`data` empty): a put or accumulate by message
    /// that its own call issues is encoded from the caller's slice, and copied into
    /// `data` only if it stays queued (see `WinState::try_post`).
    pub staged: bool,
    pub native: bool,
    /// A notified access: the target's notification counter that counts it (sent with
    /// the op as [`flags::NOTIFY`](crate::wire::flags::NOTIFY); never native once queued).
    pub notify: Option<u32>,
    pub token: u64,
    /// Where the result or completion goes (get data, fetched values, rput completion).
    pub request: Option<Arc<RequestState>>,
    /// A get's buffer of its own and the byte its reply goes to (see `OpDesc`).
    pub landing: Option<(Arc<crate::request::Landing>, usize)>,
    /// The request state of an earlier use of this element, kept for the next op that
    /// wants a result ([`RequestState::reuse_or_new`]); never completed.
    pub spare_request: Option<Arc<RequestState>>,
}

impl OpElem {
    /// Whether this queued op, once issued, is complete at its target only when a message
    /// after it arrives there: an active message, or a native put of a backend with
    /// `ordered` puts ([`Capabilities::ordered_puts`](crate::transport::Capabilities::ordered_puts)).
    pub(crate) fn needs_done(&self, ordered: bool) -> bool {
        !self.native || ordered && self.kind == OpKind::Put
    }
    /// Whether this queued op, once issued, is an active message that changes the
    /// target's memory and gets no response (a put or an accumulate): nothing that comes
    /// back says when the target applied it.
    pub(crate) fn unanswered_am(&self) -> bool {
        !self.native && !self.kind.has_response()
    }
}

impl Default for Extent {
    fn default() -> Self {
        Extent::contiguous(0, 0)
    }
}

/// A pending synchronization to send to a target when its queue drains, piggybacked on
/// the last active-message op if there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SyncFlag {
    #[default]
    None,
    /// RMA_DONE, acknowledged (flush, fence end, lock_all restore).
    Flush,
    /// RMA_DONE + UNLOCK, acknowledged.
    Unlock,
    /// PSCW complete, not acknowledged.
    Complete,
}

/// The bytes `[lo, hi)` of a target's window (offsets, or addresses of a dynamic
/// window) that some ops touch: the hull of their extents, for the order rule of the
/// accumulate family across paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteSpan {
    lo: u64,
    hi: u64,
}

impl ByteSpan {
    /// No byte.
    pub(crate) const EMPTY: ByteSpan = ByteSpan {
        lo: u64::MAX,
        hi: 0,
    };

    /// The bytes an extent spans, from its first to one past its last.
    pub(crate) fn of(extent: &Extent) -> ByteSpan {
        ByteSpan {
            lo: extent.offset,
            hi: extent.offset.saturating_add(extent.span()),
        }
    }

    pub(crate) fn union(self, other: ByteSpan) -> ByteSpan {
        ByteSpan {
            lo: self.lo.min(other.lo),
            hi: self.hi.max(other.hi),
        }
    }

    /// Whether a byte lies in both (an empty span overlaps nothing).
    pub(crate) fn overlaps(self, other: ByteSpan) -> bool {
        self.lo < other.hi && other.lo < self.hi
    }
}

impl Default for ByteSpan {
    fn default() -> Self {
        ByteSpan::EMPTY
    }
}

/// A target element: one target's operations and per-target epoch state.
///
/// Laid out by hand on cache lines of its own: what posting an op and the walks read
/// (its queue, rank, counts, state and listings) fills the first line, what issuing and
/// completing ops read the second. A process that talks to thousands of targets in turn
/// finds none of them in its caches; an op then pays for the lines it touches, and
/// Rust's own order spread these fields over three.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct TargetElem {
    /// PENDING ops, in posting order.
    pub pending: OpQueue,
    pub rank: Rank,
    /// Active-message ops sent since the last RMA_DONE (the target counts them too).
    pub am_since_done: u32,
    /// RMA_DONE / UNLOCK acknowledgements still to come from this target.
    pub acks_awaited: u32,
    /// Its place in each of [`OpTable`]'s listings ([`BUSY`], [`WORK`]) (kept by the
    /// table).
    listed: [ListedAt; 2],
    pub state: TargetState,
    /// The sync to send when the queue drains.
    pub sync: SyncFlag,
    /// Someone waits on an op of this target (a request, flush_local): issue at once,
    /// no delay for piggybacking or single-op.
    pub no_delay: bool,
    /// The op at the head of the queue waits for order (see `am_atomics`); counted once.
    pub held_for_order: bool,
    // ----- second line
    /// ISSUED ops waiting for a completion or a response.
    #[allow(clippy::vec_box)] // boxes come from the element pools and go back to them
    pub issued: Vec<Box<OpElem>>,
    /// The bytes the accumulate-family active messages not yet known applied touch
    /// (their hull): a native op of the family waits only if it overlaps them.
    pub am_atomic_span: ByteSpan,
    /// The bytes the native ops under way touch (their hull): an active message of the
    /// accumulate family waits only if it overlaps them.
    pub native_span: ByteSpan,
    /// Native puts of a backend with [`ordered_puts`](crate::transport::Capabilities::ordered_puts)
    /// issued since the last RMA_DONE: complete at the origin, placed at the target only
    /// once a message after them is delivered there, so like active messages they need
    /// one (not counted on the wire: the target never sees them).
    pub puts_since_done: u32,
    /// Native ops under way (an RMA_DONE may only follow once they are complete).
    pub native_in_flight: u32,
    // ----- third line
    /// An active message that changes the target's memory and gets no response (see
    /// [`OpElem::unanswered_am`]) went since the last RMA_DONE: only an acknowledgement
    /// says the target's CPU applied it, and until then a native op (the provider's)
    /// could overtake it.
    pub am_unanswered: bool,
    /// Ops of the accumulate family went as active messages and no ack after them has
    /// come back yet: the target's CPU may not have applied them, so a native one (the
    /// NIC's, or the provider's) could overtake them. Native ones of the family wait
    /// until [`am_atomics_applied`](Self::am_atomics_applied).
    pub am_atomics: bool,
    /// The next element of its slot in the [`OpTable`] (kept by the table).
    next_in_slot: Option<Box<TargetElem>>,
}

/// A target's PENDING ops in posting order, the first of them in the target element
/// itself: a target has one op queued at a time more often than not (an op held for
/// piggybacking, a lock not yet granted), and queueing it then writes no buffer of its
/// own, a cache line less per op for a process that visits thousands of targets in turn.
/// The methods are `VecDeque`'s that the engine uses.
#[derive(Debug, Default)]
pub(crate) struct OpQueue {
    /// `None` only while the queue is empty (then `rest` is empty too).
    head: Option<Box<OpElem>>,
    rest: VecDeque<Box<OpElem>>,
}

impl OpQueue {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }
    #[inline]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }
    #[inline]
    pub(crate) fn front(&self) -> Option<&OpElem> {
        self.head.as_deref()
    }
    #[inline]
    pub(crate) fn push_back(&mut self, op: Box<OpElem>) {
        if self.head.is_none() {
            debug_assert!(self.rest.is_empty());
            self.head = Some(op);
        } else {
            self.rest.push_back(op);
        }
    }
    pub(crate) fn push_front(&mut self, op: Box<OpElem>) {
        if let Some(second) = self.head.replace(op) {
            self.rest.push_front(second);
        }
    }
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Box<OpElem>> {
        let first = self.head.take()?;
        self.head = self.rest.pop_front();
        Some(first)
    }
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &OpElem> {
        self.head.iter().chain(&self.rest).map(|b| &**b)
    }
    pub(crate) fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut OpElem> {
        self.head.iter_mut().chain(&mut self.rest).map(|b| &mut **b)
    }
    /// Every op, in order; the queue is empty after.
    pub(crate) fn drain_all(&mut self) -> impl Iterator<Item = Box<OpElem>> {
        self.head
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.rest))
    }
}

impl std::ops::Index<usize> for OpQueue {
    type Output = OpElem;
    fn index(&self, i: usize) -> &OpElem {
        match i {
            0 => self.head.as_deref().expect("index past the queue"),
            _ => &self.rest[i - 1],
        }
    }
}

impl FromIterator<Box<OpElem>> for OpQueue {
    fn from_iter<I: IntoIterator<Item = Box<OpElem>>>(ops: I) -> Self {
        let mut queue = OpQueue::default();
        for op in ops {
            queue.push_back(op);
        }
        queue
    }
}

/// An element's place in one of [`OpTable`]'s listings, or none ([`UNLISTED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListedAt(u32);

impl ListedAt {
    const NOWHERE: ListedAt = ListedAt(UNLISTED);
    fn get(self) -> Option<usize> {
        (self != Self::NOWHERE).then_some(self.0 as usize)
    }
}

impl Default for ListedAt {
    fn default() -> Self {
        Self::NOWHERE
    }
}

impl TargetElem {
    pub(crate) fn reset(&mut self, rank: Rank, state: TargetState) {
        debug_assert!(self.pending.is_empty() && self.issued.is_empty());
        self.rank = rank;
        self.state = state;
        self.am_since_done = 0;
        self.puts_since_done = 0;
        self.am_unanswered = false;
        self.native_in_flight = 0;
        self.am_atomics = false;
        self.am_atomic_span = ByteSpan::EMPTY;
        self.native_span = ByteSpan::EMPTY;
        self.held_for_order = false;
        self.sync = SyncFlag::None;
        self.acks_awaited = 0;
        self.no_delay = false;
    }
    /// No op queued or under way and nothing awaited: the element may be freed.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_empty()
            && self.issued.is_empty()
            && self.native_in_flight == 0
            && self.acks_awaited == 0
            && self.sync == SyncFlag::None
    }
    /// Ops went since the last RMA_DONE that only a message after them completes at the
    /// target: active messages, and ordered native puts.
    pub(crate) fn needs_done(&self) -> bool {
        self.am_since_done > 0 || self.puts_since_done > 0
    }
    /// An RMA_DONE (or a sync carrying one, or a message that stands for one) went: what
    /// it follows is complete at the target once it is delivered.
    pub(crate) fn done_sent(&mut self) {
        self.am_since_done = 0;
        self.puts_since_done = 0;
        self.am_unanswered = false;
    }
    /// Something to issue or send: pending ops, a sync, a lock to retry.
    pub(crate) fn has_work(&self) -> bool {
        !self.pending.is_empty()
            || self.sync != SyncFlag::None
            || self.state == TargetState::LockIssued
    }
    /// Whether every op of the accumulate family sent as an active message is known
    /// applied at the target: none was sent, or no active message went since the last
    /// RMA_DONE and every ack is back (delivery is ordered, and the target acks an
    /// RMA_DONE after applying what came before it).
    pub(crate) fn am_atomics_applied(&self) -> bool {
        !self.am_atomics || (self.am_since_done == 0 && self.acks_awaited == 0)
    }
    /// Whether a native op of the accumulate family on `extent` may go now: every active
    /// message of the family before it is known applied, or none touches its bytes (MPI
    /// orders the family per location: accumulate_ordering's default, rar, raw, war and
    /// waw, is of accesses "to the same memory location").
    #[inline]
    pub(crate) fn native_atomic_may_go(&self, extent: &Extent) -> bool {
        self.am_atomics_applied() || !self.am_atomic_span.overlaps(ByteSpan::of(extent))
    }
    /// Whether an active message of the accumulate family on `extent` may go now: no
    /// native op under way touches its bytes.
    #[inline]
    pub(crate) fn am_atomic_may_go(&self, extent: &Extent) -> bool {
        self.native_in_flight == 0 || !self.native_span.overlaps(ByteSpan::of(extent))
    }
    /// An accumulate-family active message on `span` is about to go (before the counts
    /// that say whether it is applied change).
    pub(crate) fn am_atomic_sent(&mut self, span: ByteSpan) {
        self.am_atomic_span = if self.am_atomics_applied() {
            span
        } else {
            self.am_atomic_span.union(span)
        };
        self.am_atomics = true;
    }
    /// A native op on `span` is under way.
    pub(crate) fn native_issued(&mut self, span: ByteSpan) {
        self.native_span = if self.native_in_flight == 0 {
            span
        } else {
            self.native_span.union(span)
        };
        self.native_in_flight += 1;
    }
    /// A native op completed (or failed).
    pub(crate) fn native_completed(&mut self) {
        self.native_in_flight = self.native_in_flight.saturating_sub(1);
        if self.native_in_flight == 0 {
            self.native_span = ByteSpan::EMPTY;
        }
    }
    /// Every op is locally complete.
    pub(crate) fn ops_complete(&self) -> bool {
        self.pending.is_empty() && self.issued.is_empty() && self.native_in_flight == 0
    }
    /// Nothing to issue, send, wait for or complete, and nothing a flush would send for
    /// (no op since the last RMA_DONE): a flush_all passes it by, and it stays so until
    /// it is changed, which only [`OpTable::get_mut`] allows.
    pub(crate) fn quiet(&self) -> bool {
        self.is_idle() && !self.needs_done() && !self.has_work() && !self.no_delay
    }
    /// Whether the element stays in listing `which` (see [`OpTable`]).
    fn stays_listed(&self, which: usize) -> bool {
        if which == BUSY {
            !self.quiet()
        } else {
            self.has_work()
        }
    }
}

/// No position in [`OpTable::occupied`].
const UNLISTED: u32 = u32::MAX;

/// One slot's target list, chained through the elements themselves (`next_in_slot`): a
/// slot is one pointer, eight to a cache line, and a lookup of a target alone in its
/// slot (the usual case once the array has grown to the active targets) reads the slot
/// and the element's first line, nothing between them. (A slot of a first element and
/// a vector of the others took 32 bytes: a process visiting thousands of targets in
/// turn missed the cache on every other slot.)
#[derive(Debug, Default)]
struct Slot {
    first: Option<Box<TargetElem>>,
}

impl Slot {
    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
    fn iter(&self) -> impl Iterator<Item = &TargetElem> {
        std::iter::successors(self.first.as_deref(), |e| e.next_in_slot.as_deref())
    }
    #[inline]
    fn get(&self, rank: Rank) -> Option<&TargetElem> {
        // A loop of its own, as `get_mut`'s: `iter().find` cost a post 7 instructions.
        let mut at = self.first.as_deref();
        while let Some(e) = at {
            if e.rank == rank {
                return Some(e);
            }
            at = e.next_in_slot.as_deref();
        }
        None
    }
    #[inline]
    fn get_mut(&mut self, rank: Rank) -> Option<&mut TargetElem> {
        let mut at = self.first.as_deref_mut();
        while let Some(e) = at {
            if e.rank == rank {
                return Some(e);
            }
            at = e.next_in_slot.as_deref_mut();
        }
        None
    }
    /// Adds `elem` first (the order within a slot carries no meaning: ops are per
    /// target); returns it.
    fn push(&mut self, mut elem: Box<TargetElem>) -> &mut TargetElem {
        debug_assert!(elem.next_in_slot.is_none());
        elem.next_in_slot = self.first.take();
        self.first.insert(elem)
    }
    fn remove(&mut self, rank: Rank) -> Option<Box<TargetElem>> {
        let mut link = &mut self.first;
        while link.as_ref().is_some_and(|e| e.rank != rank) {
            link = &mut link.as_mut().expect("checked").next_in_slot;
        }
        let mut elem = link.take()?;
        *link = elem.next_in_slot.take();
        Some(elem)
    }
    fn take_all(&mut self) -> impl Iterator<Item = Box<TargetElem>> + '_ {
        std::iter::from_fn(move || {
            let mut elem = self.first.take()?;
            self.first = elem.next_in_slot.take();
            Some(elem)
        })
    }
}

/// The slot array.
#[derive(Debug)]
pub(crate) struct OpTable {
    slots: Vec<Slot>,
    /// Number of target elements in the table.
    pub active: usize,
    /// Indices of the non-empty slots (seed 004 keeps their count on the window so that
    /// ISSUE_OPS and CLEANUP_OPS need not walk every slot; we keep the list).
    occupied: Vec<usize>,
    /// Per slot, its index in `occupied` ([`UNLISTED`] while empty): a slot that empties
    /// leaves the list in constant time, however many are listed.
    listed_at: Vec<u32>,
    /// Two listings of the elements a walk may have to visit, each element listed once
    /// per listing (its `listed` says where), taken off when a walk finds nothing for
    /// it: [`BUSY`], those changed since they were last found [quiet](TargetElem::quiet)
    /// (what flush_all visits), and [`WORK`], those changed since they were last found
    /// with nothing to issue or send ([`TargetElem::has_work`]: what every progress pass
    /// visits). With lazy target free a lock_all epoch keeps an element for every target
    /// it touched; walks over all of them cost a flush_all after 16 puts 4,096 visits
    /// (40x the puts), and every pass of a fetch_and_op's wait as many.
    listings: [Listing; 2],
}

impl OpTable {
    /// A table of `slots` slots, rounded up to a power of two (a rank's slot is then a
    /// mask of it, not a division: the lookup runs several times per op).
    pub(crate) fn new(slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        OpTable {
            slots: (0..n).map(|_| Slot::default()).collect(),
            active: 0,
            occupied: Vec::new(),
            listed_at: vec![UNLISTED; n],
            listings: Default::default(),
        }
    }
    /// Number of slots (a power of two).
    #[cfg(test)]
    fn slot_count(&self) -> usize {
        self.slots.len()
    }
    #[inline]
    fn slot(&self, rank: Rank) -> usize {
        rank as usize & (self.slots.len() - 1)
    }
    #[inline]
    pub(crate) fn get(&self, rank: Rank) -> Option<&TargetElem> {
        // An empty table (every op of the epoch went direct, shared memory's usual
        // case: lock and unlock ask it each) answers without a slot's cache line.
        if self.active == 0 {
            return None;
        }
        self.slots[self.slot(rank)].get(rank)
    }
    /// The element of `rank`, to change: it is listed in both listings (where it was
    /// not) until walks find nothing for it.
    #[inline]
    pub(crate) fn get_mut(&mut self, rank: Rank) -> Option<&mut TargetElem> {
        if self.active == 0 {
            return None;
        }
        let s = self.slot(rank);
        let elem = self.slots[s].get_mut(rank)?;
        if elem.listed[BUSY] == ListedAt::NOWHERE || elem.listed[WORK] == ListedAt::NOWHERE {
            list_changed(&mut self.listings, elem);
        }
        Some(elem)
    }
    pub(crate) fn insert(&mut self, mut elem: Box<TargetElem>) -> &mut TargetElem {
        if self.active >= self.slots.len() {
            self.grow();
        }
        self.active += 1;
        list_changed(&mut self.listings, &mut elem);
        let s = self.list(elem.rank);
        self.slots[s].push(elem)
    }
    /// The slot of `rank`, listed among the occupied ones if it was empty (its element
    /// is about to be pushed).
    fn list(&mut self, rank: Rank) -> usize {
        let s = self.slot(rank);
        if self.slots[s].is_empty() {
            self.listed_at[s] = self.occupied.len() as u32;
            self.occupied.push(s);
        }
        s
    }
    /// Doubles the slot array and spreads the elements over it. Each element keeps its
    /// place relative to the others of its new slot (ops are per target, so the order
    /// across targets carries no meaning).
    #[cold]
    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let mut old = std::mem::replace(&mut self.slots, (0..n).map(|_| Slot::default()).collect());
        let listed = std::mem::take(&mut self.occupied);
        self.listed_at = vec![UNLISTED; n];
        for s in listed {
            for elem in old[s].take_all() {
                let to = self.list(elem.rank);
                self.slots[to].push(elem);
            }
        }
    }
    pub(crate) fn remove(&mut self, rank: Rank) -> Option<Box<TargetElem>> {
        let s = self.slot(rank);
        let mut elem = self.slots[s].remove(rank)?;
        self.active -= 1;
        for which in [BUSY, WORK] {
            if let Some(k) = std::mem::take(&mut elem.listed[which]).get() {
                self.unlist(which, k);
            }
        }
        if self.slots[s].is_empty() {
            let k = std::mem::replace(&mut self.listed_at[s], UNLISTED) as usize;
            debug_assert_eq!(self.occupied[k], s, "slot listed where it says");
            self.occupied.swap_remove(k);
            if let Some(&moved) = self.occupied.get(k) {
                self.listed_at[moved] = k as u32;
            }
        }
        Some(elem)
    }
    /// Ranks of all target elements: what the calls that end an epoch visit (each
    /// target they hold a lock or an exposure at), and a failure's cleanup.
    pub(crate) fn ranks(&self) -> Vec<Rank> {
        self.iter().map(|t| t.rank).collect()
    }

    /// Ranks of target elements with something to issue or send (pending ops, a sync, a
    /// lock to retry), starting at the round-robin position, into `out`: what
    /// ISSUE_OPS_WIN visits.
    pub(crate) fn ranks_with_work(&mut self, out: &mut Vec<Rank>) {
        self.walk_listing(WORK, out)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &TargetElem> {
        self.occupied.iter().flat_map(|s| self.slots[*s].iter())
    }

    /// Takes the element at `k` off listing `which`; the last one takes its place.
    fn unlist(&mut self, which: usize, k: usize) {
        let ranks = &mut self.listings[which].ranks;
        ranks.swap_remove(k);
        if let Some(&moved) = ranks.get(k) {
            let s = self.slot(moved);
            let elem = self.slots[s]
                .get_mut(moved)
                .expect("listed ranks are in the table");
            elem.listed[which] = ListedAt(k as u32);
        }
    }

    /// Ranks of listing `which`, starting at its round-robin position, into `out`
    /// (cleared first); elements that no longer stay listed leave it on the way.
    fn walk_listing(&mut self, which: usize, out: &mut Vec<Rank>) {
        out.clear();
        let mut k = 0;
        while let Some(&rank) = self.listings[which].ranks.get(k) {
            let s = self.slot(rank);
            let elem = self.slots[s]
                .get_mut(rank)
                .expect("listed ranks are in the table");
            if elem.stays_listed(which) {
                out.push(rank);
                k += 1;
            } else {
                elem.listed[which] = ListedAt::NOWHERE;
                self.unlist(which, k);
            }
        }
        if out.len() > 1 {
            let listing = &mut self.listings[which];
            let start = listing.next % out.len();
            out.rotate_left(start);
            listing.next = start + 1;
        }
    }

    /// Ranks of the elements that may have something to do, in round-robin order: every
    /// element not among them is [quiet](TargetElem::quiet). What flush_all visits.
    pub(crate) fn busy_ranks(&mut self) -> Vec<Rank> {
        let mut out = Vec::new();
        self.walk_listing(BUSY, &mut out);
        out
    }

    /// The elements listed busy, quiet ones among them until a walk takes them off: a
    /// question that every quiet element answers alike (all done? any waiting for a
    /// lock?) needs to ask these alone.
    pub(crate) fn busy_iter(&self) -> impl Iterator<Item = &TargetElem> {
        self.listings[BUSY].ranks.iter().map(|&rank| {
            self.slots[self.slot(rank)]
                .get(rank)
                .expect("listed ranks are in the table")
        })
    }
}

/// [`OpTable`]'s listing of the elements that may not be quiet.
const BUSY: usize = 0;
/// [`OpTable`]'s listing of the elements that may have something to issue or send.
const WORK: usize = 1;

/// Lists `elem` where it is not listed yet: it is about to change (out of line: an
/// element changed again before a walk is listed already, the usual case while its ops
/// are under way).
#[inline(never)]
fn list_changed(listings: &mut [Listing; 2], elem: &mut TargetElem) {
    for (at, listing) in elem.listed.iter_mut().zip(listings) {
        if *at == ListedAt::NOWHERE {
            *at = ListedAt(listing.ranks.len() as u32);
            listing.ranks.push(elem.rank);
        }
    }
}

/// Some of the table's elements, by rank, and a round-robin start.
#[derive(Debug, Default)]
struct Listing {
    ranks: Vec<Rank>,
    next: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elem(rank: Rank) -> Box<TargetElem> {
        let mut e = Box::<TargetElem>::default();
        e.reset(rank, TargetState::default());
        e
    }

    /// The longest list of any slot.
    fn longest_chain(t: &OpTable) -> usize {
        t.slots.iter().map(|s| s.iter().count()).max().unwrap_or(0)
    }

    fn sorted_ranks(t: &mut OpTable) -> Vec<Rank> {
        let mut r = t.ranks();
        r.sort_unstable();
        r
    }

    #[test]
    fn the_slot_array_grows_with_the_active_targets_so_every_lookup_stays_short() {
        let mut t = OpTable::new(64);
        for r in 1..=4096 {
            t.insert(elem(r));
            assert_eq!(t.active, r as usize);
            assert!(
                t.slot_count() >= t.active,
                "one slot or more per active target"
            );
        }
        // Ranks are spread by their low bits: consecutive ranks get a slot each.
        assert_eq!(longest_chain(&t), 1);
        assert_eq!(t.slot_count(), 4096);
        for r in 1..=4096 {
            assert_eq!(t.get(r).map(|e| e.rank), Some(r));
        }
        assert!(t.get(0).is_none() && t.get(4097).is_none());
        assert_eq!(sorted_ranks(&mut t), (1..=4096).collect::<Vec<_>>());
    }

    #[test]
    fn the_array_stays_at_its_configured_size_while_few_targets_are_active() {
        let mut t = OpTable::new(64);
        // 64 targets, 16 of them sharing slot 0: no growth, lists of up to 16.
        for r in (0..16).map(|i| i * 64).chain(1..49) {
            t.insert(elem(r));
        }
        assert_eq!(t.slot_count(), 64);
        assert_eq!(longest_chain(&t), 16);
        assert!(t.get(15 * 64).is_some() && t.get(16 * 64).is_none());
        // The 65th grows the array; every element is still found.
        t.insert(elem(5000));
        assert_eq!(t.slot_count(), 128);
        for r in (0..16).map(|i| i * 64).chain(1..49).chain([5000]) {
            assert_eq!(t.get_mut(r).map(|e| e.rank), Some(r));
        }
    }

    #[test]
    fn removing_in_any_order_keeps_the_occupied_list_exact() {
        let mut t = OpTable::new(4);
        let ranks: Vec<Rank> = (0..300).map(|i| (i * 37) % 1000).collect();
        for &r in &ranks {
            t.insert(elem(r));
        }
        // A fixed shuffle: every 7th of what is left.
        let mut left = ranks.clone();
        let mut k = 0;
        while !left.is_empty() {
            k = (k + 7) % left.len();
            let r = left.swap_remove(k);
            assert_eq!(t.remove(r).map(|e| e.rank), Some(r));
            assert!(t.remove(r).is_none(), "removed once");
            let mut want = left.clone();
            want.sort_unstable();
            assert_eq!(sorted_ranks(&mut t), want);
            assert_eq!(t.active, left.len());
            assert_eq!(
                t.occupied.len(),
                t.slots.iter().filter(|s| !s.is_empty()).count()
            );
            for (i, &s) in t.occupied.iter().enumerate() {
                assert_eq!(t.listed_at[s] as usize, i);
            }
        }
        assert!(t.occupied.is_empty());
    }

    #[test]
    fn what_posting_reads_of_a_target_element_is_one_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<TargetElem>(), 64);
        assert!(offset_of!(TargetElem, held_for_order) < 64);
        assert_eq!(offset_of!(TargetElem, issued), 64);
        assert_eq!(size_of::<TargetElem>(), 192);
        assert_eq!(size_of::<Slot>(), 8);
    }

    #[test]
    fn the_op_queue_keeps_posting_order_with_its_first_op_inline() {
        let op = |token| {
            let mut o = Box::<OpElem>::default();
            o.token = token;
            o
        };
        let tokens = |q: &OpQueue| q.iter().map(|o| o.token).collect::<Vec<_>>();
        let mut q = OpQueue::default();
        assert_eq!((q.is_empty(), q.len()), (true, 0));
        assert!(q.front().is_none() && q.pop_front().is_none());
        q.push_back(op(1));
        assert!(q.rest.is_empty(), "one op: in the element itself");
        q.push_back(op(2));
        q.push_back(op(3));
        q.push_front(op(0));
        assert_eq!(tokens(&q), [0, 1, 2, 3]);
        assert_eq!((q.len(), q[0].token, q[3].token), (4, 0, 3));
        assert_eq!(
            q.iter_mut().rfind(|o| o.token < 2).map(|o| o.token),
            Some(1)
        );
        assert_eq!(q.pop_front().map(|o| o.token), Some(0));
        assert_eq!(q.front().map(|o| o.token), Some(1));
        let (odd, even): (Vec<_>, Vec<_>) = q.drain_all().partition(|o| o.token % 2 == 1);
        assert!(q.is_empty() && q.rest.is_empty());
        q = odd.into_iter().chain(even).collect();
        assert_eq!(tokens(&q), [1, 3, 2]);
        while q.pop_front().is_some() {}
        assert_eq!((q.is_empty(), q.len()), (true, 0));
    }

    /// The listings' invariant: each listed rank once, where its element says, and every
    /// element not listed one that would leave the listing.
    fn assert_listings_exact(t: &OpTable) {
        for which in [BUSY, WORK] {
            for (k, &r) in t.listings[which].ranks.iter().enumerate() {
                assert_eq!(
                    t.get(r).and_then(|e| e.listed[which].get()),
                    Some(k),
                    "rank {r}"
                );
            }
            for e in t.iter() {
                assert!(
                    e.listed[which].get().is_some() || !e.stays_listed(which),
                    "rank {} not in listing {which}",
                    e.rank
                );
            }
        }
    }

    #[test]
    fn walks_visit_the_elements_changed_since_they_were_last_found_quiet() {
        let mut t = OpTable::new(8);
        for r in 0..64 {
            t.insert(elem(r));
        }
        // Fresh elements are listed until a walk finds them quiet.
        assert_eq!(t.listings[BUSY].ranks.len(), 64);
        assert!(t.busy_ranks().is_empty());
        assert!(t.listings[BUSY].ranks.is_empty());
        assert_listings_exact(&t);
        // Three of them get something to do; only they are walked.
        t.get_mut(5).unwrap().sync = SyncFlag::Flush;
        t.get_mut(17).unwrap().am_since_done = 1;
        t.get_mut(40).unwrap().acks_awaited = 1;
        // A lookup to change that changes nothing lists it until the next walk.
        let _ = t.get_mut(41);
        assert_listings_exact(&t);
        let mut busy = t.busy_ranks();
        busy.sort_unstable();
        assert_eq!(busy, vec![5, 17, 40]);
        let mut work = Vec::new();
        t.ranks_with_work(&mut work);
        assert_eq!(work, vec![5], "only a sync is work to issue");
        assert_eq!(t.listings[WORK].ranks, vec![5]);
        assert_listings_exact(&t);
        assert_eq!(t.busy_iter().filter(|e| e.needs_done()).count(), 1);
        // Done with: the next walk lets them go; removing listed ones keeps the list exact.
        t.get_mut(5).unwrap().sync = SyncFlag::None;
        assert!(t.remove(17).is_some());
        assert_listings_exact(&t);
        assert_eq!(t.busy_ranks(), vec![40]);
        t.get_mut(40).unwrap().acks_awaited = 0;
        assert!(t.busy_ranks().is_empty());
        assert_listings_exact(&t);
        // Growth keeps every element's place in the list.
        for r in 64..300 {
            t.insert(elem(r));
            if r % 3 == 0 {
                t.get_mut(r).unwrap().no_delay = true;
            }
        }
        assert_listings_exact(&t);
        assert_eq!(
            t.busy_ranks().len(),
            (64..300).filter(|r| r % 3 == 0).count()
        );
        for r in (64..300).rev().step_by(2) {
            t.remove(r);
            assert_listings_exact(&t);
        }
    }
}
