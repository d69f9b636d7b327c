//! The target side (seed 004 and MPI-4.1 13.5): what this process does when packets
//! arrive for one of its windows. Locks are granted in FIFO order, accumulates applied
//! element by element under the window's update atomicity, gets answered, RMA_DONE
//! acknowledged, PSCW posts and completes counted, and every op checked against the window.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::datatype::{self, AccOp};
use crate::transport::Segment;
use crate::wire::{self, flags, Body, Extent, Packet};
use crate::Rank;

/// FIFO lock queue: a request is granted at once only when compatible with the holders
/// and nobody waits before it, so exclusive requests are not starved by shared ones.
/// The one exception is a lock_all epoch's shared request ([`Waiter::lock_all`]): it
/// is granted whenever no exclusive lock is held, past waiting exclusive requests.
/// A lock_all epoch holds some targets' locks while it waits for others', so queueing
/// it behind a waiting exclusive request closes a cycle when another lock_all epoch
/// holds the lock that request waits for (A holds t0 and waits at t1 behind X, which
/// waits for B's hold on t1, while B waits at t0 behind Y, which waits for A). An
/// exclusive request can then wait while lock_all epochs keep coming; MPI promises no
/// fairness between them, and each lock_all epoch ends by itself.
///
/// When the window's lock is also a native word that other ranks take themselves (the
/// node's ranks in shared memory), the queue holds the ranks that ask by message, and a
/// grant must also take the word for them: `take(exclusive)` does, and a request it
/// refuses stays at the head of the queue until a later try succeeds.
#[derive(Debug, Default)]
pub(crate) struct LockQueue {
    exclusive: Option<Rank>,
    /// Shared holders and how many shared locks each holds (self-locks may nest across
    /// windows of one process; per window it is at most one).
    shared: HashMap<Rank, u32>,
    waiting: VecDeque<Waiter>,
}

/// A lock request that could not be granted yet; a single-op packet waits with it.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub origin: Rank,
    pub exclusive: bool,
    /// A lock_all epoch's shared request (the wire's `LOCK_ALL` flag).
    pub lock_all: bool,
    pub single_op: Option<Vec<u8>>,
}

impl Waiter {
    /// Whether this request may be granted past waiting requests (see [`LockQueue`]).
    fn jumps_the_queue(&self) -> bool {
        self.lock_all && !self.exclusive
    }
}

impl LockQueue {
    fn compatible(&self, exclusive: bool) -> bool {
        self.exclusive.is_none() && (!exclusive || self.shared.is_empty())
    }
    fn acquire(&mut self, origin: Rank, exclusive: bool) {
        if exclusive {
            self.exclusive = Some(origin);
        } else {
            *self.shared.entry(origin).or_default() += 1;
        }
    }
    /// Grants now or queues the request (`take`: see the type's docs).
    pub(crate) fn request(
        &mut self,
        waiter: Waiter,
        take: &mut dyn FnMut(bool) -> bool,
    ) -> Option<Waiter> {
        if (self.waiting.is_empty() || waiter.jumps_the_queue())
            && self.compatible(waiter.exclusive)
            && take(waiter.exclusive)
        {
            self.acquire(waiter.origin, waiter.exclusive);
            Some(waiter)
        } else {
            self.waiting.push_back(waiter);
            None
        }
    }
    /// Releases `origin`'s lock; returns whether it was exclusive, if it held one.
    pub(crate) fn release(&mut self, origin: Rank) -> Option<bool> {
        if self.exclusive == Some(origin) {
            self.exclusive = None;
            return Some(true);
        }
        match self.shared.get_mut(&origin) {
            Some(n) if *n > 1 => {
                *n -= 1;
                Some(false)
            }
            Some(_) => {
                self.shared.remove(&origin);
                Some(false)
            }
            None => None,
        }
    }
    /// Takes away everything `origin` holds or waits for (it dropped its window, left or
    /// died: it will never unlock). Returns the kinds of the holds released (true:
    /// exclusive), for the caller to release the native word it held for them.
    pub(crate) fn revoke(&mut self, origin: Rank) -> Vec<bool> {
        self.waiting.retain(|w| w.origin != origin);
        let mut released = Vec::new();
        while let Some(exclusive) = self.release(origin) {
            released.push(exclusive);
        }
        released
    }
    /// Whether requests wait.
    pub(crate) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }
    /// Waiters that can be granted now, in order (`take`: see the type's docs).
    pub(crate) fn grant_waiting(&mut self, take: &mut dyn FnMut(bool) -> bool) -> Vec<Waiter> {
        let mut granted = Vec::new();
        while let Some(w) = self.waiting.front() {
            if !self.compatible(w.exclusive) || !take(w.exclusive) {
                break;
            }
            let w = self.waiting.pop_front().expect("front exists");
            self.acquire(w.origin, w.exclusive);
            granted.push(w);
        }
        // lock_all requests further back go past the exclusive request at the head.
        if self.exclusive.is_none() && self.waiting.iter().any(Waiter::jumps_the_queue) {
            let mut kept = VecDeque::with_capacity(self.waiting.len());
            while let Some(w) = self.waiting.pop_front() {
                if w.jumps_the_queue() && take(false) {
                    self.acquire(w.origin, false);
                    granted.push(w);
                } else {
                    kept.push_back(w);
                }
            }
            self.waiting = kept;
        }
        granted
    }
}

/// Where incoming ops land: the window's segment, or a dynamic window's attached regions.
#[derive(Clone)]
pub(crate) enum Memory {
    Static(Arc<dyn Segment>),
    /// Each region with the address peers name it by: the address of the attached
    /// memory in the target process (MPI_Get_address of it, as MPI's dynamic windows
    /// have it).
    Dynamic(Vec<(u64, Arc<dyn Segment>)>),
}

impl Memory {
    /// The segment and in-segment offset an extent falls in, if it lies wholly inside:
    /// the window's segment, one attached region, or attached regions that follow each
    /// other without a gap (MPI lets an op of a dynamic window run across regions
    /// attached side by side: [`Adjacent`]).
    pub(crate) fn resolve(&self, e: &Extent) -> Option<(Arc<dyn Segment>, usize)> {
        let (seg, offset) = match self {
            Memory::Static(s) => (s.clone(), e.offset),
            Memory::Dynamic(regions) => {
                let (base, first) = regions
                    .iter()
                    .find(|(base, s)| e.offset >= *base && e.offset - base < s.len() as u64)?;
                let offset = e.offset - base;
                let end = offset.checked_add(e.span())?;
                if end <= first.len() as u64 {
                    (first.clone(), offset)
                } else {
                    (Adjacent::from(regions, *base, end)?, offset)
                }
            }
        };
        let end = offset.checked_add(e.span())?;
        (end <= seg.len() as u64).then_some((seg, offset as usize))
    }
}

/// Attached regions that follow each other in the target's address space, as one
/// segment from the first one's start: an op that runs across them lands in each its
/// part. An element cut by a boundary is updated through a copy, not atomically (MPI
/// says nothing of an element split between two attachments; none of its basic types
/// straddles memory the program attached in two pieces).
struct Adjacent {
    /// (offset of the region in the span, the region).
    parts: Vec<(usize, Arc<dyn Segment>)>,
    len: usize,
}

impl Adjacent {
    /// The regions from the one at `base` on, each starting where the last ended, as
    /// far as `end` bytes past `base`; `None` where a gap comes first.
    fn from(regions: &[(u64, Arc<dyn Segment>)], base: u64, end: u64) -> Option<Arc<dyn Segment>> {
        let mut parts = Vec::new();
        let mut at = base;
        while at - base < end {
            let (_, s) = regions.iter().find(|(b, s)| *b == at && !s.is_empty())?;
            parts.push(((at - base) as usize, s.clone()));
            at = at.checked_add(s.len() as u64)?;
        }
        Some(Arc::new(Adjacent {
            parts,
            len: (at - base) as usize,
        }))
    }

    /// The pieces of `[offset, offset + len)`: (region, offset in it, offset in the
    /// range, length).
    fn pieces(
        &self,
        offset: usize,
        len: usize,
    ) -> impl Iterator<Item = (&Arc<dyn Segment>, usize, usize, usize)> {
        self.parts.iter().filter_map(move |(start, s)| {
            let from = offset.max(*start);
            let to = (offset + len).min(start + s.len());
            (from < to).then(|| (s, from - start, from - offset, to - from))
        })
    }

    /// The one region holding all of `[offset, offset + len)`, with the offset in it.
    fn within_one(&self, offset: usize, len: usize) -> Option<(&Arc<dyn Segment>, usize)> {
        let mut pieces = self.pieces(offset, len);
        let (s, at, _, n) = pieces.next()?;
        (n == len).then_some((s, at))
    }

    fn through_copy(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        let mut buf = vec![0; len];
        self.read(offset, &mut buf);
        f(&mut buf);
        self.write(offset, &buf);
    }
}

impl Segment for Adjacent {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        for (s, at, into, n) in self.pieces(offset, dst.len()) {
            s.read(at, &mut dst[into..into + n]);
        }
    }
    fn write(&self, offset: usize, src: &[u8]) {
        for (s, at, from, n) in self.pieces(offset, src.len()) {
            s.write(at, &src[from..from + n]);
        }
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        match self.within_one(offset, len) {
            Some((s, at)) => s.update(at, len, f),
            None => self.through_copy(offset, len, f),
        }
    }
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        match self.within_one(offset, len) {
            Some((s, at)) => s.update_locked(at, len, f),
            None => self.through_copy(offset, len, f),
        }
    }
    fn descriptor(&self) -> Vec<u8> {
        // Never sent: made per op at the target.
        Vec::new()
    }
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn crate::transport::UserMemory>> {
        // A view of regions the window keeps: nothing of the user's to give back.
        None
    }
}

/// What a handled packet asks the window to do next (sending happens in the window,
/// which owns the outgoing queue).
#[derive(Debug, Default)]
pub(crate) struct Reply {
    /// Response packet to the origin, if any (get data, fetched values, refusals).
    pub response: Option<Response>,
    /// Send an ack (after the response, or riding on it).
    pub ack: bool,
    /// A lock was released (exclusive or not): grant waiters.
    pub released: Option<bool>,
}

/// A response to an op that asked for one: its token, whether the op was applied, and its
/// data.
#[derive(Debug)]
pub(crate) struct Response {
    pub token: u64,
    pub ok: bool,
    /// The data; a get's after [`wire::RESPONSE_HEAD`] bytes kept for the packet's head
    /// (`head_reserved`), so that the packet goes from this buffer.
    pub data: Vec<u8>,
    pub head_reserved: bool,
}

impl Response {
    /// A response whose data is all of `data` (nothing reserved before it).
    fn plain(token: u64, ok: bool, data: Vec<u8>) -> Response {
        Response {
            token,
            ok,
            data,
            head_reserved: false,
        }
    }
}

/// A map keyed by rank, hashed by one multiplication.
pub(crate) type RankMap<V> =
    HashMap<Rank, V, std::hash::BuildHasherDefault<crate::window::TokenHasher>>;

/// Per-window target state.
#[derive(Default)]
pub(crate) struct TargetSide {
    pub locks: LockQueue,
    /// Posts received per origin rank (only ranks that posted to us: bounded by the
    /// access groups that include us, not by the job size).
    pub posts: RankMap<u32>,
    /// PSCW completes received per origin.
    pub completes: RankMap<u32>,
    /// The exposure epoch's group, between post and wait.
    pub exposure: Option<Vec<Rank>>,
    /// The last exposure's group, kept for the next post to reuse its allocation.
    pub spare_exposure: Vec<Rank>,
    /// Barrier messages received, by (sequence, round).
    pub barrier_arrivals: HashMap<(u32, u8), u32>,
    /// Origins with an op refused since their last RMA_DONE.
    pub refused: Vec<Rank>,
    /// Ops received per origin since its last RMA_DONE (checked against its count).
    pub since_done: HashMap<Rank, u32>,
    /// The last get's reply buffer, once encoded, for the next get: a piece of a large
    /// get is up to a message long, and a fresh zeroed buffer each time was a fresh
    /// mapping to fault in.
    pub spare_reply: Vec<u8>,
}

impl TargetSide {
    /// Applies an op packet (already decoded and version-checked) to the window memory.
    /// Returns the response to send, if the op has one. `refuse`: the op is refused
    /// whatever its extent (a notification counter past this process's), as one
    /// outside the window is.
    pub(crate) fn apply_op(
        &mut self,
        memory: &Memory,
        from: Rank,
        p: &Packet<'_>,
        refuse: bool,
    ) -> Option<Response> {
        *self.since_done.entry(from).or_default() += 1;
        let extent = match &p.body {
            Body::Put { extent, .. }
            | Body::Get { extent, .. }
            | Body::Accumulate { extent, .. }
            | Body::GetAccumulate { extent, .. } => *extent,
            Body::CompareAndSwap {
                datatype, offset, ..
            } => Extent::contiguous(*offset, datatype.size()),
            _ => return None,
        };
        let token = match &p.body {
            Body::Get { token, .. }
            | Body::GetAccumulate { token, .. }
            | Body::CompareAndSwap { token, .. } => Some(*token),
            _ => None,
        };
        let Some((seg, base)) = memory.resolve(&extent).filter(|_| !refuse) else {
            tracing::debug!(
                from,
                offset = extent.offset,
                "refused op outside the window"
            );
            if !self.refused.contains(&from) {
                self.refused.push(from);
            }
            return token.map(|t| Response::plain(t, false, Vec::new()));
        };
        let block = extent.block as usize;
        match &p.body {
            Body::Put { data, .. } => {
                for ((off, len), chunk) in extent.blocks().zip(data.chunks(block.max(1))) {
                    seg.write(base + off as usize, &chunk[..len]);
                }
                None
            }
            Body::Get { token, .. } => {
                // Read straight after the room for the reply's head: the packet goes from
                // this buffer.
                let mut out = std::mem::take(&mut self.spare_reply);
                let n = wire::RESPONSE_HEAD + extent.bytes() as usize;
                if out.len() < n {
                    out.resize(n, 0);
                } else {
                    out.truncate(n);
                }
                let data = &mut out[wire::RESPONSE_HEAD..];
                for ((off, len), chunk) in extent.blocks().zip(data.chunks_mut(block.max(1))) {
                    seg.read(base + off as usize, &mut chunk[..len]);
                }
                Some(Response {
                    token: *token,
                    ok: true,
                    data: out,
                    head_reserved: true,
                })
            }
            Body::Accumulate {
                op, datatype, data, ..
            } => {
                // Element by element: MPI's atomicity is per element, and a backend whose
                // peers use native atomics on the same memory (shared memory) makes each
                // element's update atomic against them.
                let size = datatype.size();
                let whole_blocks = !datatype.updated_whole() && seg.only_messages_reach();
                for ((off, len), chunk) in extent.blocks().zip(data.chunks(block.max(1))) {
                    if whole_blocks {
                        // No native atomic touches this memory: the block in one update
                        // (a 2 MiB sum was 512 K updates of an element each, through a
                        // copy each).
                        let operand = chunk.get(..len).unwrap_or(&[]);
                        seg.update(base + off as usize, len, &mut |t: &mut [u8]| {
                            datatype::accumulate(*op, *datatype, t, operand)
                        });
                        continue;
                    }
                    for e in (0..len).step_by(size) {
                        let n = size.min(len - e);
                        let operand = chunk.get(e..e + n).unwrap_or(&[]);
                        let apply =
                            &mut |t: &mut [u8]| datatype::accumulate(*op, *datatype, t, operand);
                        if datatype.updated_whole() {
                            seg.update_locked(base + off as usize + e, n, apply);
                        } else {
                            seg.update(base + off as usize + e, n, apply);
                        }
                    }
                }
                None
            }
            Body::GetAccumulate {
                token,
                op,
                datatype,
                data,
                ..
            } => {
                let mut out = vec![0; extent.bytes() as usize];
                let size = datatype.size();
                for (i, ((off, len), chunk)) in extent
                    .blocks()
                    .zip(out.chunks_mut(block.max(1)))
                    .enumerate()
                {
                    for e in (0..len).step_by(size) {
                        let n = size.min(len - e);
                        // NoOp carries no data; the decoder checked the others' length.
                        let operand = data.get(i * block + e..i * block + e + n).unwrap_or(&[]);
                        // The update may run more than once (a compare-exchange loop):
                        // the fetched value is the one of the run that took effect.
                        let apply = &mut |t: &mut [u8]| {
                            chunk[e..e + n].copy_from_slice(t);
                            if *op != AccOp::NoOp {
                                datatype::accumulate(*op, *datatype, t, operand);
                            }
                        };
                        if datatype.updated_whole() {
                            seg.update_locked(base + off as usize + e, n, apply);
                        } else {
                            seg.update(base + off as usize + e, n, apply);
                        }
                    }
                }
                Some(Response::plain(*token, true, out))
            }
            Body::CompareAndSwap {
                token,
                compare,
                swap,
                ..
            } => {
                let mut old = vec![0; compare.len()];
                seg.update(base, compare.len(), &mut |t| {
                    old.copy_from_slice(t);
                    datatype::compare_and_swap(t, compare, swap);
                });
                Some(Response::plain(*token, true, old))
            }
            _ => None,
        }
    }

    /// An RMA_DONE from `from` counting `count` active messages before it: the count
    /// starts afresh.
    pub(crate) fn done_received(&mut self, from: Rank, count: u32) {
        let seen = self.since_done.remove(&from).unwrap_or(0);
        if seen != count {
            // Ordered delivery makes this impossible for a correct peer.
            tracing::warn!(from, seen, expected = count, "RMA_DONE count mismatch");
        }
    }

    /// Handles the sync flags a packet carries once its op (if any) was applied:
    /// RMA_DONE, UNLOCK, COMPLETE. Returns what to send back.
    pub(crate) fn handle_sync_flags(&mut self, from: Rank, p: &Packet<'_>, reply: &mut Reply) {
        if p.flags & (flags::DONE | flags::UNLOCK | flags::COMPLETE) != 0 {
            self.done_received(from, p.done_count);
        }
        if p.flags & flags::UNLOCK != 0 {
            reply.released = self.locks.release(from);
            reply.ack = true;
        }
        if p.flags & flags::DONE != 0 {
            reply.ack = true;
        }
        if p.flags & flags::COMPLETE != 0 {
            *self.completes.entry(from).or_default() += 1;
        }
    }

    /// Takes (and clears) whether `origin` had an op refused since its last ack.
    pub(crate) fn take_refused(&mut self, origin: Rank) -> bool {
        match self.refused.iter().position(|r| *r == origin) {
            Some(i) => {
                self.refused.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(origin: Rank, exclusive: bool) -> Waiter {
        Waiter {
            origin,
            exclusive,
            lock_all: false,
            single_op: None,
        }
    }

    fn all(origin: Rank) -> Waiter {
        Waiter {
            lock_all: true,
            ..w(origin, false)
        }
    }

    #[test]
    fn lock_all_requests_pass_waiting_exclusive_ones_and_break_the_cycle() {
        // Two targets, two lock_all origins (A=1, B=2), two exclusive ones (X=3 at t1,
        // Y=4 at t0). A holds t0, B holds t1; X waits at t1, Y at t0. A's request at
        // t1 and B's at t0 would wait behind X and Y forever in FIFO order.
        let yes = &mut |_| true;
        let (mut t0, mut t1) = (LockQueue::default(), LockQueue::default());
        assert!(t0.request(all(1), yes).is_some());
        assert!(t1.request(all(2), yes).is_some());
        assert!(t1.request(w(3, true), yes).is_none());
        assert!(t0.request(w(4, true), yes).is_none());
        // lock_all requests are granted past them: both epochs hold every target.
        assert!(t1.request(all(1), yes).is_some());
        assert!(t0.request(all(2), yes).is_some());
        // A plain shared request still queues behind the exclusive one (no starvation).
        assert!(t0.request(w(5, false), yes).is_none());
        // Both epochs end: the exclusive requests go first, then the shared one.
        for q in [&mut t0, &mut t1] {
            assert_eq!(q.release(1), Some(false));
            assert_eq!(q.release(2), Some(false));
        }
        let g0 = t0.grant_waiting(yes);
        assert_eq!(g0.iter().map(|w| w.origin).collect::<Vec<_>>(), vec![4]);
        assert_eq!(t1.grant_waiting(yes).len(), 1);
        // Held exclusively: a lock_all request waits, and is granted (past the shared
        // request queued before it, by the same rule) once the exclusive lock goes.
        assert!(t0.request(all(6), yes).is_none());
        assert_eq!(t0.release(4), Some(true));
        let g0 = t0.grant_waiting(yes);
        assert_eq!(g0.iter().map(|w| w.origin).collect::<Vec<_>>(), vec![5, 6]);
        assert!(!t0.has_waiting());
    }

    #[test]
    fn lock_queue_is_fifo_and_exclusive() {
        let mut q = LockQueue::default();
        let yes = &mut |_| true;
        assert!(q.request(w(1, false), yes).is_some());
        assert!(q.request(w(2, false), yes).is_some());
        assert!(q.request(w(3, true), yes).is_none());
        // A shared request behind a waiting exclusive one waits too (no starvation).
        assert!(q.request(w(4, false), yes).is_none());
        assert_eq!(q.release(1), Some(false));
        assert!(q.grant_waiting(yes).is_empty());
        assert_eq!(q.release(2), Some(false));
        let g = q.grant_waiting(yes);
        assert_eq!(g.iter().map(|w| w.origin).collect::<Vec<_>>(), vec![3]);
        assert_eq!(q.release(9), None);
        assert_eq!(q.release(3), Some(true));
        assert_eq!(q.grant_waiting(yes).len(), 1);
    }

    #[test]
    fn a_native_word_held_elsewhere_keeps_requests_queued_in_order() {
        let mut q = LockQueue::default();
        // The word is held by a rank of the node (not in this queue): nothing is granted.
        let mut word_free = false;
        assert!(q.request(w(5, true), &mut |_| word_free).is_none());
        assert!(q.request(w(6, false), &mut |_| word_free).is_none());
        assert!(q.has_waiting());
        assert!(q.grant_waiting(&mut |_| word_free).is_empty());
        // Freed: the exclusive request at the head goes first, the shared one after it.
        word_free = true;
        let g = q.grant_waiting(&mut |_| word_free);
        assert_eq!(g.iter().map(|w| w.origin).collect::<Vec<_>>(), vec![5]);
        assert_eq!(q.release(5), Some(true));
        let g = q.grant_waiting(&mut |_| word_free);
        assert_eq!(g.iter().map(|w| w.origin).collect::<Vec<_>>(), vec![6]);
        assert!(!q.has_waiting());
    }
}
