//! Windows: the origin side of every operation and synchronization (seed 004's
//! algorithms for FENCE, PSCW, LOCK, LOCK_ALL and FLUSH), and the dispatch of incoming
//! packets to the [target side](crate::target).
//!
//! All state of one window sits behind one mutex ([`WinState`]). Blocking calls never
//! hold it while they wait: each turn of a wait loop takes it, makes progress on this
//! window, checks its condition and lets go, then drives the engine's global progress.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::barrier::Dissemination;
use crate::datatype::{AccOp, DataType, Element};
use crate::engine::{EngineShared, BLAME_MISMATCH};
use crate::epoch::{Assert, LockInfo, LockType, PscwAccess, TargetState, WindowEpoch};
use crate::error::{Error, PeerError, Result, TransportError, UsageError};
use crate::op_table::{OpElem, OpKind, OpTable, SyncFlag, TargetElem};
use crate::pool::LocalPool;
use crate::request::{Request, RequestState};
use crate::stats::{Counters, Stats};
use crate::target::{Memory, Reply, TargetSide, Waiter, REGION_SHIFT};
use crate::transport::{Fetched, Issued, NativeAtomic, Notice, RemoteSegment, Segment, UserMemory};
use crate::wire::{self, flags, Body, Departure, Encoder, Extent, Kind, Packet};
use crate::Rank;

/// How a window's memory came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Memory allocated by the library (`allocate`).
    Allocate,
    /// Memory the user handed over (`create`).
    Create,
    /// Regions attached and detached at run time (`create_dynamic`).
    Dynamic,
    /// Memory shared by the ranks of a node, loadable and storable directly
    /// (`allocate_shared`).
    Shared,
}

/// A strided layout in elements: `count` blocks of `block` elements, `stride` elements
/// apart. [`Layout::contiguous`] is one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Number of blocks.
    pub count: usize,
    /// Elements per block.
    pub block: usize,
    /// Elements from the start of one block to the next.
    pub stride: usize,
}

impl Layout {
    /// `len` elements in one block.
    pub fn contiguous(len: usize) -> Self {
        Layout {
            count: 1,
            block: len,
            stride: len,
        }
    }
    /// `count` blocks of `block` elements every `stride` elements.
    pub fn strided(count: usize, block: usize, stride: usize) -> Self {
        Layout {
            count,
            block,
            stride,
        }
    }
    /// Elements described (`usize::MAX` when that overflows: such a layout is refused
    /// by every call).
    pub fn elements(&self) -> usize {
        self.count.saturating_mul(self.block)
    }
    /// Blocks in order and not overlapping, and every count computable.
    fn valid(&self) -> bool {
        (self.count <= 1 || self.stride >= self.block)
            && self.count.checked_mul(self.block).is_some()
            && self.span().is_some()
    }
    /// Elements from the first to one past the last, if that fits.
    fn span(&self) -> Option<usize> {
        match self.count {
            0 => Some(0),
            n => (n - 1).checked_mul(self.stride)?.checked_add(self.block),
        }
    }
}

/// A window's state shared by its handle and the engine's progress.
pub(crate) struct WindowShared {
    pub id: u32,
    pub kind: WindowKind,
    pub engine: Arc<EngineShared>,
    pub remote: Vec<RemoteSegment>,
    pub memory: RwLock<Memory>,
    pub state: Mutex<WinState>,
    pub counters: Counters,
    /// Per-target route: index into `classes`, decided once at creation (the native
    /// capabilities of the backend toward that target on this window).
    routes: Vec<u8>,
    classes: Vec<crate::transport::Capabilities>,
    /// Some target shares memory with us (load/store): the flushes' MEM_SYNC matters.
    shares_memory: bool,
    /// Next dynamic region id.
    next_region: Mutex<u32>,
    /// A `create` window's user buffer, kept aside while its bytes live in backend
    /// memory ([`Transport::copies_user_memory`](crate::Transport::copies_user_memory)).
    pub(crate) user_copy: Mutex<Option<Box<dyn UserMemory>>>,
    /// Freed collectively: its drop tells nobody (otherwise peers learn it was abandoned).
    freed: std::sync::atomic::AtomicBool,
}

/// Ops up to this many bytes never need pieces (every backend carries at least this in
/// one message): the hot path of small contiguous ops skips the question.
const SPLIT_ABOVE: u64 = 512;

/// The largest op on a dynamic window (sent in pieces), whose target's regions the
/// origin cannot check.
const DYNAMIC_SPLIT_MAX: u64 = 1 << 30;

/// Token bit of native ops tracked by their target's count alone (no op element): the
/// low 32 bits are the target rank. A token is `window id << 40 | bits`.
const UNTRACKED: u64 = 1 << 39;

/// The token of an untracked native op of window `win` toward `rank`.
fn untracked_token(win: u32, rank: Rank) -> u64 {
    (u64::from(win) << 40) | UNTRACKED | u64::from(rank)
}

/// Hashes the tokens of native ops and ranks: distinct counters, so one multiplication
/// spreads them (these maps are on every native op's and every PSCW epoch's path;
/// SipHash's flood resistance buys nothing for keys we make ourselves or ranks the
/// transport vouches for).
#[derive(Default)]
pub(crate) struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, token: u64) {
        self.0 = token.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, rank: u32) {
        self.write_u64(u64::from(rank));
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Everything mutable about a window (origin and target side).
pub(crate) struct WinState {
    epoch: WindowEpoch,
    table: OpTable,
    op_pool: LocalPool<OpElem>,
    target_pool: LocalPool<TargetElem>,
    /// Per-target locks of PER_TARGET epochs (bounded by the locks the user holds).
    locks: LockTable,
    next_token: u64,
    /// Native ops under way: token to target rank (bounded by the op pool).
    native_index: HashMap<u64, Rank, BuildHasherDefault<TokenHasher>>,
    /// Ranks ISSUE_OPS_WIN visits, reused from pass to pass.
    work: Vec<Rank>,
    /// Window-protocol lock grants and unlock acks still to come (LOCK_ALL window protocol).
    window_grants: u32,
    window_acks: u32,
    /// Next rank whose lock the native window protocol takes.
    native_lock_cursor: Rank,
    barrier: Option<Barrier>,
    background_barriers: Vec<Dissemination>,
    barrier_seq: u32,
    /// A synchronization call in progress (other than flush), for the thread rules.
    sync_call: Option<&'static str>,
    /// Resource pressure: free idle target elements eagerly.
    restoring: bool,
    /// Errors found asynchronously (refused ops), reported by the next sync call.
    deferred: Option<Error>,
    pub target: TargetSide,
    outbox: VecDeque<(Rank, Kind, Vec<u8>)>,
    enc: Encoder,
    /// What peers said of leaving this window (their `Depart` packets).
    departures: PeerDepartures,
}

/// What peers said of leaving a window: the collectives on it that can no longer
/// complete, and who is to blame.
#[derive(Debug, Default)]
struct PeerDepartures {
    /// Per peer that dropped the window without freeing it: the barriers it had started
    /// on it (the one furthest behind is the one to blame for a collective that cannot
    /// complete; others may have dropped it only because that collective failed).
    abandoned: Vec<Option<u32>>,
    /// The first peer whose collective call failed as a mismatch, and that call.
    mismatch: Option<(Rank, &'static str)>,
    /// Per peer, in `free`: the barriers it had started on the window before.
    freeing: Vec<Option<u32>>,
}

/// The locks of a PER_TARGET epoch: few (the ones the user holds at once), so a vector
/// searched linearly beats hashing.
#[derive(Debug, Default)]
struct LockTable(Vec<(Rank, LockInfo)>);

impl LockTable {
    fn get(&self, rank: &Rank) -> Option<&LockInfo> {
        self.0.iter().find(|(r, _)| r == rank).map(|(_, l)| l)
    }
    fn get_mut(&mut self, rank: &Rank) -> Option<&mut LockInfo> {
        self.0.iter_mut().find(|(r, _)| r == rank).map(|(_, l)| l)
    }
    fn contains_key(&self, rank: &Rank) -> bool {
        self.get(rank).is_some()
    }
    fn insert(&mut self, rank: Rank, info: LockInfo) {
        match self.get_mut(&rank) {
            Some(l) => *l = info,
            None => self.0.push((rank, info)),
        }
    }
    fn remove(&mut self, rank: &Rank) -> Option<LockInfo> {
        let i = self.0.iter().position(|(r, _)| r == rank)?;
        Some(self.0.swap_remove(i).1)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The IBARRIER of a fence: active messages (dissemination), or the backend's own
/// (shared counters) when it offers one for the window.
#[derive(Debug)]
enum Barrier {
    Messages(Dissemination),
    Native(u64),
}

/// What an attempt that may need resources or other ranks came to.
enum Step<T> {
    Done(T),
    Blocked,
}

/// An operation, origin side, before it has an element.
struct OpDesc<'a> {
    kind: OpKind,
    target: Rank,
    extent: Extent,
    op: Option<AccOp>,
    datatype: DataType,
    /// Payload (compare-and-swap: compare then swap).
    data: &'a [u8],
    /// The caller wants a request for the op's completion or fetched data.
    wants_result: bool,
    /// A get's destination, filled directly when the backend completes it in the call.
    into: Option<std::cell::RefCell<&'a mut [u8]>>,
}

/// What posting an op came to.
pub(crate) enum Posted {
    /// Complete already; with the fetched bytes when a result was wanted.
    Done(Option<Fetched>),
    /// Queued or under way; the request completes later.
    Later(Option<Arc<RequestState>>),
}

impl WinState {
    pub(crate) fn new(engine: &EngineShared) -> Self {
        let c = &engine.config;
        WinState {
            epoch: WindowEpoch::Unset,
            table: OpTable::new(c.slots),
            op_pool: LocalPool::new(c.op_pool_local),
            target_pool: LocalPool::new(c.target_pool_local),
            locks: LockTable::default(),
            next_token: 0,
            native_index: HashMap::default(),
            work: Vec::new(),
            window_grants: 0,
            window_acks: 0,
            native_lock_cursor: 0,
            barrier: None,
            background_barriers: Vec::new(),
            barrier_seq: 0,
            sync_call: None,
            restoring: false,
            deferred: None,
            target: TargetSide::default(),
            outbox: VecDeque::new(),
            enc: Encoder::default(),
            departures: PeerDepartures::default(),
        }
    }

    // ----- sending -------------------------------------------------------------------

    /// Sends the packet in `self.enc`, or queues it behind earlier ones (order per target
    /// is part of the transport contract, so nothing overtakes the outbox).
    fn send_encoded(&mut self, w: &WindowShared, to: Rank, kind: Kind) -> Result<()> {
        let bytes = self.enc.finish();
        if self.outbox.is_empty() {
            match w.engine.transport.send(to, bytes) {
                Ok(()) => {
                    w.count_message(kind, bytes.len());
                    return Ok(());
                }
                Err(TransportError::Busy) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.outbox.push_back((to, kind, bytes.to_vec()));
        Ok(())
    }

    fn flush_outbox(&mut self, w: &WindowShared) -> Result<()> {
        while let Some((to, kind, bytes)) = self.outbox.front() {
            match w.engine.transport.send(*to, bytes) {
                Ok(()) => {
                    w.count_message(*kind, bytes.len());
                    self.outbox.pop_front();
                }
                Err(TransportError::Busy) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn send_control(
        &mut self,
        w: &WindowShared,
        to: Rank,
        kind: Kind,
        fl: u16,
        done_count: u32,
    ) -> Result<()> {
        self.enc.start(kind, fl, w.id, done_count);
        self.send_encoded(w, to, kind)
    }

    /// The peer a blocked synchronization call most likely waits for, to name in its
    /// timeout: the sender of the barrier round under way, a target with work or
    /// acknowledgements outstanding, a PSCW peer whose post or complete has not come,
    /// or a peer that has not announced its `free`.
    fn awaited_rank(&self, w: &WindowShared) -> Option<Rank> {
        let (me, size) = (w.engine.rank, w.engine.size);
        if let Some(Barrier::Messages(d)) = &self.barrier {
            return d.awaited(me, size);
        }
        if let Some(t) = self.table.iter().find(|t| !t.is_idle()) {
            return Some(t.rank);
        }
        if let WindowEpoch::Pscw(p) = &self.epoch {
            let waiting = (p.group.iter().zip(&p.granted))
                .find(|(r, granted)| !**granted && !self.target.posts.contains_key(*r));
            if let Some((r, _)) = waiting {
                return Some(*r);
            }
        }
        if let Some(group) = &self.target.exposure {
            if let Some(r) = group
                .iter()
                .find(|r| !self.target.completes.contains_key(*r))
            {
                return Some(*r);
            }
        }
        let freeing = &self.departures.freeing;
        if !freeing.is_empty() {
            return (0..size as Rank).find(|r| *r != me && freeing[*r as usize].is_none());
        }
        // A backend's own barrier does not say who is missing; between two ranks it is
        // the other one.
        (size == 2).then_some(1 - me)
    }

    /// Fails every op of `rank` still queued or under way with `err` and frees its
    /// target element (its native ops' late completions find nothing and are ignored).
    fn abandon_target(&mut self, w: &WindowShared, rank: Rank, err: &Error) {
        let Some(t) = self.table.get_mut(rank) else {
            return;
        };
        let mut ops: Vec<Box<OpElem>> = t.pending.drain(..).collect();
        ops.append(&mut t.issued);
        for op in ops {
            if let Some(r) = &op.request {
                r.complete(Err(err.clone()));
            }
            self.native_index.remove(&op.token);
            self.free_op(w, op);
        }
        self.free_target(w, rank);
    }

    /// Releases the native lock words this window holds at its targets: per-target
    /// locks, and a lock_all's shared locks (per target, or on every target by the
    /// window protocol). For a window that is dropped, or whose epoch failed.
    fn release_native_locks(&mut self, w: &WindowShared) {
        let unlock = |rank: Rank, exclusive: bool| {
            if Self::native_locks(w, rank) {
                let _ = w.engine.transport.unlock(w.id, rank, exclusive);
            }
        };
        match self.epoch {
            WindowEpoch::PerTarget => {
                for (rank, l) in &self.locks.0 {
                    if l.granted && !l.nocheck {
                        unlock(*rank, l.exclusive);
                    }
                }
            }
            WindowEpoch::LockAllGranted { nocheck: false } => {
                for rank in 0..w.engine.size as Rank {
                    unlock(rank, false);
                }
            }
            WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => {
                for t in self.table.iter() {
                    if t.state == TargetState::LockGranted {
                        unlock(t.rank, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Tells every peer what this rank does of the window (a [`Kind::Depart`] packet).
    fn send_departure(&mut self, w: &WindowShared, what: Departure, seq: u32) -> Result<()> {
        // Only a rank that leaves says whom it blames (a free or a mismatch announcement
        // is no departure of the process, and an old blame would mislead).
        let blame = match what {
            Departure::Abandoned => w.engine.blame_word(),
            _ => 0,
        };
        for peer in (0..w.engine.size as Rank).filter(|r| *r != w.engine.rank) {
            self.enc
                .start(Kind::Depart, 0, w.id, blame)
                .u8(what as u8)
                .u32(seq);
            self.send_encoded(w, peer, Kind::Depart)?;
        }
        Ok(())
    }

    /// For a wait of `call` on this window whose condition does not hold after a
    /// progress pass: the error if a peer's departure means it never will. A peer that
    /// abandoned the window joins no collective on it again; a peer that failed a
    /// collective as a mismatch fails ours too; a peer in `free` while this rank is in
    /// `fence` with fewer barriers behind it is in another collective.
    fn departure_error(&mut self, w: &WindowShared, call: &'static str) -> Result<()> {
        if let Some(rank) = w.engine.failed_rank() {
            // The cause before its consequences (peers that left because of it).
            return Err(PeerError::Dead { rank }.into());
        }
        if let Some((rank, theirs)) = self.departures.mismatch {
            return Err(PeerError::Mismatch { rank, call, theirs }.into());
        }
        // A peer that dropped the window is blamed by a fence only if it never started
        // this fence's barrier (one that did may still let it complete).
        let mine = self.barrier_seq;
        // Only collectives wait for every rank: passive-target calls go on among the
        // others (the dropped window's locks were revoked at its target).
        let collective = matches!(call, "fence" | "free" | "complete" | "wait");
        let behind = (self.departures.abandoned.iter().enumerate())
            .filter_map(|(r, s)| s.map(|s| (s, r)))
            .filter(|(s, _)| collective && (call != "fence" || *s < mine))
            .min();
        if let Some((_, rank)) = behind {
            return Err(PeerError::Departed {
                rank: rank as Rank,
                call,
            }
            .into());
        }
        if call == "fence" {
            let early = self
                .departures
                .freeing
                .iter()
                .position(|s| s.is_some_and(|s| s < mine));
            if let Some(rank) = early {
                self.send_departure(w, Departure::Mismatch, Departure::call_code(call))?;
                return Err(PeerError::Mismatch {
                    rank: rank as Rank,
                    call,
                    theirs: "free",
                }
                .into());
            }
        }
        Ok(())
    }

    // ----- elements --------------------------------------------------------------------

    fn new_token(&mut self, w: &WindowShared) -> u64 {
        self.next_token += 1;
        (u64::from(w.id) << 40) | (self.next_token & (UNTRACKED - 1))
    }

    /// The target element of `rank`, created in the state the epoch implies; `None` when
    /// the pools are empty (the caller restores resources).
    fn target_elem(&mut self, w: &WindowShared, rank: Rank) -> Option<&mut TargetElem> {
        if self.table.get(rank).is_none() {
            let mut elem = self.target_pool.get(&w.engine.target_pool)?;
            let state = match &self.epoch {
                WindowEpoch::PerTarget => match self.locks.get(&rank) {
                    Some(l) if l.granted => TargetState::LockGranted,
                    _ => TargetState::LockCalled,
                },
                WindowEpoch::LockAllCalled => TargetState::LockCalled,
                _ => TargetState::Ready,
            };
            elem.reset(rank, state);
            self.table.insert(elem);
            w.counters
                .elements_in_use(self.op_pool.in_use(), self.target_pool.in_use());
        }
        self.table.get_mut(rank)
    }

    fn free_target(&mut self, w: &WindowShared, rank: Rank) {
        if let Some(elem) = self.table.remove(rank) {
            self.target_pool.put(elem, &w.engine.target_pool);
        }
    }

    fn free_op(&mut self, w: &WindowShared, mut op: Box<OpElem>) {
        // The request state stays with the element, for its next op that wants a result
        // once the request is gone (RequestState::reuse_or_new).
        if let Some(r) = op.request.take() {
            op.spare_request = Some(r);
        }
        op.data.clear();
        self.op_pool.put(op, &w.engine.op_pool);
    }

    /// PSCW notices that peers left natively ([`Transport::notify`]) join the ones that
    /// came by message: posts of targets this access epoch still waits for, completes of
    /// origins of the open exposure epoch.
    fn take_native_notices(&mut self, w: &WindowShared) {
        let transport = &w.engine.transport;
        if let WindowEpoch::Pscw(p) = &self.epoch {
            for (i, &rank) in p.group.iter().enumerate() {
                if !p.granted[i] {
                    let n = transport.take_notices(w.id, rank, Notice::Post);
                    if n > 0 {
                        *self.target.posts.entry(rank).or_default() += n as u32;
                    }
                }
            }
        }
        self.take_native_completes(w);
    }

    /// Posts `rank` left natively for this access epoch, if it still waits for one.
    fn take_native_posts(&mut self, w: &WindowShared, rank: Rank) {
        if let WindowEpoch::Pscw(p) = &self.epoch {
            if p.index(rank).is_some_and(|i| !p.granted[i]) {
                let n = w.engine.transport.take_notices(w.id, rank, Notice::Post);
                if n > 0 {
                    *self.target.posts.entry(rank).or_default() += n as u32;
                }
            }
        }
    }

    /// Completes the origins of the open exposure epoch left natively.
    fn take_native_completes(&mut self, w: &WindowShared) {
        let transport = &w.engine.transport;
        if let Some(group) = &self.target.exposure {
            for &rank in group {
                let n = transport.take_notices(w.id, rank, Notice::Complete);
                if n > 0 {
                    *self.target.completes.entry(rank).or_default() += n as u32;
                }
            }
        }
    }

    // ----- access ----------------------------------------------------------------------

    /// Whether ops to `rank` may go on the wire now (and, for PSCW, consumes its post).
    fn access_granted(&mut self, rank: Rank) -> bool {
        match &mut self.epoch {
            WindowEpoch::FenceGranted | WindowEpoch::LockAllGranted { .. } => true,
            WindowEpoch::Pscw(p) => match p.index(rank) {
                Some(i) if p.granted[i] => true,
                Some(i) => match self.target.posts.get_mut(&rank) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        p.granted[i] = true;
                        true
                    }
                    _ => false,
                },
                None => false,
            },
            WindowEpoch::PerTarget | WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => {
                matches!(
                    self.table.get(rank).map(|t| t.state),
                    Some(TargetState::LockGranted | TargetState::Ready)
                )
            }
            _ => false,
        }
    }

    fn advance_barrier(&mut self, w: &WindowShared) -> Result<bool> {
        let (rank, size) = (w.engine.rank, w.engine.size);
        let mut sends = Vec::new();
        let mut done = true;
        let current = match &self.barrier {
            Some(Barrier::Messages(d)) => d.seq,
            _ => u32::MAX,
        };
        let messages = self.barrier.iter_mut().filter_map(|b| match b {
            Barrier::Messages(d) => Some(d),
            Barrier::Native(_) => None,
        });
        for b in messages.chain(self.background_barriers.iter_mut()) {
            let finished =
                b.advance::<Error>(rank, size, &mut self.target.barrier_arrivals, |p, s, r| {
                    sends.push((p, s, r));
                    Ok(true)
                })?;
            if b.seq == current {
                done = finished;
            }
        }
        for (peer, seq, round) in sends {
            self.enc.start(Kind::Barrier, 0, w.id, 0).u32(seq).u8(round);
            self.send_encoded(w, peer, Kind::Barrier)?;
        }
        self.background_barriers.retain(|b| !b.is_done());
        if let Some(Barrier::Native(ticket)) = self.barrier {
            done = w.engine.transport.barrier_done(w.id, ticket)?;
        }
        if done {
            self.barrier = None;
        }
        Ok(done)
    }

    /// Starts this window's next barrier. A native barrier must not be outstanding (the
    /// fence waits for it first).
    fn start_barrier(&mut self, w: &WindowShared) -> Result<()> {
        self.barrier_seq = self.barrier_seq.wrapping_add(1);
        match self.barrier.take() {
            Some(Barrier::Messages(old)) => self.background_barriers.push(old),
            Some(Barrier::Native(_)) => unreachable!("fence waits for a native barrier first"),
            None => {}
        }
        self.barrier = Some(match w.engine.transport.barrier_arrive(w.id)? {
            Some(ticket) => Barrier::Native(ticket),
            None => Barrier::Messages(Dissemination::new(self.barrier_seq, w.engine.size)),
        });
        Ok(())
    }

    /// MAKE_RMA_PROGRESS_WIN: advance barriers, issue what can go, clean up.
    pub(crate) fn make_progress(&mut self, w: &WindowShared) -> Result<()> {
        self.grant_waiting_native(w)?;
        self.take_native_notices(w);
        if self.table.active == 0
            && self.outbox.is_empty()
            && self.barrier.is_none()
            && self.background_barriers.is_empty()
            && !matches!(self.epoch, WindowEpoch::LockAllIssued)
        {
            return Ok(());
        }
        self.flush_outbox(w)?;
        if self.barrier.is_some() || !self.background_barriers.is_empty() {
            self.advance_barrier(w)?;
            if self.barrier.is_none() && matches!(self.epoch, WindowEpoch::FenceIssued) {
                self.epoch = WindowEpoch::FenceGranted;
            }
        }
        if matches!(self.epoch, WindowEpoch::LockAllIssued) {
            self.advance_native_window_locks(w)?;
            self.lock_all_issued_done();
        }
        let mut work = std::mem::take(&mut self.work);
        self.table.ranks_with_work(&mut work);
        let issued = work
            .iter()
            .try_for_each(|&rank| self.issue_ops_target(w, rank).map(drop));
        self.work = work;
        issued?;
        self.cleanup_ops_win(w);
        Ok(())
    }

    /// CLEANUP_OPS_WIN: free idle target elements where the epoch allows.
    fn cleanup_ops_win(&mut self, w: &WindowShared) {
        if self.table.active == 0 {
            return;
        }
        let eager = self.restoring || !w.engine.config.lazy_target_free;
        if !eager {
            return;
        }
        let keep_locks = matches!(self.epoch, WindowEpoch::LockAllCalled);
        let idle: Vec<Rank> = self
            .table
            .iter()
            .filter(|t| {
                t.is_idle()
                    && t.am_since_done == 0
                    && !(keep_locks && t.state != TargetState::Ready)
            })
            .filter(|t| t.state != TargetState::LockIssued)
            .map(|t| t.rank)
            .collect();
        for r in idle {
            self.free_target(w, r);
        }
    }

    /// ISSUE_OPS_TARGET: issue queued ops to one target as far as its state allows, with
    /// the pending sync piggybacked on the last active-message op.
    fn issue_ops_target(&mut self, w: &WindowShared, rank: Rank) -> Result<usize> {
        let config = &w.engine.config;
        let Some(elem) = self.table.get(rank) else {
            return Ok(0);
        };
        // Nothing queued, no sync to send, no lock to ask for or retry (every progress
        // pass of a flush comes here for a target whose native ops are under way).
        if elem.pending.is_empty()
            && elem.sync == SyncFlag::None
            && !elem.no_delay
            && elem.state != TargetState::LockIssued
        {
            return Ok(0);
        }
        // Native locks: retry a lock the backend could not take yet.
        if elem.state == TargetState::LockIssued && Self::native_locks(w, rank) {
            let exclusive = self.lock_is_exclusive(rank);
            if w.engine.transport.try_lock(w.id, rank, exclusive)? {
                self.table.get_mut(rank).expect("exists").state = TargetState::LockGranted;
                if let Some(l) = self.locks.get_mut(&rank) {
                    l.granted = true;
                }
            } else {
                return Ok(0);
            }
        }
        let Some(elem) = self.table.get(rank) else {
            return Ok(0);
        };
        // LOCK_CALLED: the single-short-op optimization, or ask for the lock.
        if elem.state == TargetState::LockCalled {
            let native_locks = Self::native_locks(w, rank);
            if elem.pending.is_empty() && elem.sync == SyncFlag::None && !elem.no_delay {
                return Ok(0);
            }
            if elem.sync == SyncFlag::None
                && !elem.no_delay
                && !elem.pending.is_empty()
                && !native_locks
            {
                // Wait: the op may yet be the single short op of this epoch.
                let waits = config.single_op
                    && elem.pending.len() == 1
                    && short_op(&elem.pending[0], config.single_op_threshold);
                if waits {
                    return Ok(0);
                }
            }
            let single = config.single_op
                && !native_locks
                && elem.sync == SyncFlag::Unlock
                && elem.pending.len() == 1
                && short_op(&elem.pending[0], config.single_op_threshold);
            let exclusive = self.lock_is_exclusive(rank);
            if single {
                let elem = self.table.get_mut(rank).expect("exists");
                let op = elem.pending.pop_front().expect("one op");
                let lock = if exclusive {
                    flags::LOCK_EXCLUSIVE
                } else {
                    flags::LOCK_SHARED
                };
                let fl = lock | flags::UNLOCK;
                elem.sync = SyncFlag::None;
                elem.acks_awaited += 1;
                elem.state = TargetState::LockGranted;
                self.locks.remove(&rank);
                self.send_op_am(w, rank, op, fl, 1)?;
                return Ok(1);
            }
            if elem.pending.is_empty()
                && elem.sync == SyncFlag::Unlock
                && !self.must_take_lock(w, rank)
            {
                // An epoch with no operation: the lock need never be taken.
                let elem = self.table.get_mut(rank).expect("exists");
                elem.sync = SyncFlag::None;
                return Ok(0);
            }
            self.request_lock(w, rank)?;
            if self
                .table
                .get(rank)
                .is_none_or(|t| t.state != TargetState::LockGranted)
            {
                return Ok(0);
            }
        }
        if !self.access_granted(rank) {
            return Ok(0);
        }
        let elem = self.table.get_mut(rank).expect("exists");
        // Piggyback: hold small active-message ops until the epoch closes or too many pile up.
        let delay = config.piggyback
            && !elem.no_delay
            && elem.sync == SyncFlag::None
            && !elem.pending.is_empty()
            && elem.pending.len() <= config.piggyback_threshold
            && !elem.pending.iter().any(|o| o.native);
        if delay {
            return Ok(0);
        }
        if elem.sync != SyncFlag::None && elem.pending.len() > 1 {
            // Move ops with responses to the tail so the last response carries the ack.
            let (mut rest, tail): (VecDeque<_>, VecDeque<_>) =
                elem.pending.drain(..).partition(|o| !o.kind.has_response());
            rest.extend(tail);
            elem.pending = rest;
        }
        let mut issued = 0;
        loop {
            let elem = self.table.get_mut(rank).expect("exists");
            let Some(op) = elem.pending.pop_front() else {
                break;
            };
            let last = elem.pending.is_empty();
            let sync = elem.sync;
            if !op.native && last && sync != SyncFlag::None {
                let fl = sync_flags(sync);
                let count = elem.am_since_done + 1;
                elem.sync = SyncFlag::None;
                if sync != SyncFlag::Complete {
                    elem.acks_awaited += 1;
                }
                self.send_op_am(w, rank, op, fl, count)?;
            } else if op.native {
                self.issue_native(w, rank, op)?;
            } else {
                self.send_op_am(w, rank, op, 0, 0)?;
            }
            issued += 1;
        }
        // A sync no op could carry goes alone, once native ops are complete at the target.
        let elem = self.table.get_mut(rank).expect("exists");
        // Whoever waited for these ops has them issued; piggybacking may resume.
        elem.no_delay = false;
        if elem.sync != SyncFlag::None && elem.native_in_flight == 0 {
            let sync = elem.sync;
            let count = elem.am_since_done;
            elem.sync = SyncFlag::None;
            elem.am_since_done = 0;
            if sync != SyncFlag::Complete {
                elem.acks_awaited += 1;
            }
            // A complete with no active message to count goes natively where it can.
            let native = sync == SyncFlag::Complete
                && count == 0
                && w.engine.transport.notify(w.id, rank, Notice::Complete)?;
            if !native {
                self.send_control(w, rank, Kind::Done, sync_flags(sync), count)?;
            }
        }
        Ok(issued)
    }

    fn native_locks(w: &WindowShared, rank: Rank) -> bool {
        w.caps(rank).native_locks
    }

    /// Asks for `rank`'s lock: natively (one attempt now, retried by progress) or by a
    /// LOCK message.
    fn request_lock(&mut self, w: &WindowShared, rank: Rank) -> Result<()> {
        let exclusive = self.lock_is_exclusive(rank);
        let granted = if Self::native_locks(w, rank) {
            w.engine.transport.try_lock(w.id, rank, exclusive)?
        } else {
            let fl = if exclusive {
                flags::LOCK_EXCLUSIVE
            } else if self.epoch.is_lock_all() {
                flags::LOCK_SHARED | flags::LOCK_ALL
            } else {
                flags::LOCK_SHARED
            };
            self.send_control(w, rank, Kind::Lock, fl, 0)?;
            false
        };
        let t = self.table.get_mut(rank).expect("target element exists");
        if granted {
            t.state = TargetState::LockGranted;
            if let Some(l) = self.locks.get_mut(&rank) {
                l.granted = true;
            }
        } else {
            t.state = TargetState::LockIssued;
        }
        Ok(())
    }

    fn lock_is_exclusive(&self, rank: Rank) -> bool {
        self.locks.get(&rank).is_some_and(|l| l.exclusive)
    }

    /// Local loads and stores may depend on the lock: self targets and shared memory.
    fn must_take_lock(&self, w: &WindowShared, rank: Rank) -> bool {
        rank == w.engine.rank || w.kind == WindowKind::Shared
    }

    /// Sends an op as an active message. Ops without a response complete locally here.
    fn send_op_am(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        mut op: Box<OpElem>,
        fl: u16,
        done_count: u32,
    ) -> Result<()> {
        encode_op(&mut self.enc, w.id, &op, fl, done_count);
        let kind = op_kind_wire(op.kind);
        self.send_encoded(w, rank, kind)?;
        w.counters.op(false);
        let elem = self.table.get_mut(rank).expect("target element exists");
        if fl & (flags::DONE | flags::UNLOCK | flags::COMPLETE) != 0 {
            elem.am_since_done = 0;
        } else {
            elem.am_since_done += 1;
        }
        if op.kind.has_response() {
            op.native = false;
            elem.issued.push(op);
        } else {
            if let Some(r) = op.request.take() {
                r.complete(Ok(Fetched::default()));
            }
            self.free_op(w, op);
        }
        Ok(())
    }

    fn issue_native(&mut self, w: &WindowShared, rank: Rank, mut op: Box<OpElem>) -> Result<()> {
        let token = self.new_token(w);
        op.token = token;
        match native_call(w, rank, &op, token) {
            Ok(Issued::Complete(data)) => {
                w.counters.op(true);
                if let Some(r) = op.request.take() {
                    r.complete(Ok(data.unwrap_or_default()));
                }
                self.free_op(w, op);
            }
            Ok(Issued::Pending) => {
                w.counters.op(true);
                self.native_index.insert(token, rank);
                let elem = self.table.get_mut(rank).expect("target element exists");
                elem.native_in_flight += 1;
                elem.issued.push(op);
            }
            Err(TransportError::Busy) => {
                self.table
                    .get_mut(rank)
                    .expect("exists")
                    .pending
                    .push_front(op);
            }
            Err(e) => {
                if let Some(r) = op.request.take() {
                    r.complete(Err(e.clone().into()));
                }
                self.free_op(w, op);
                return Err(e.into());
            }
        }
        Ok(())
    }

    // ----- posting an op (RMA_OP) -------------------------------------------------------

    fn try_post(&mut self, w: &WindowShared, d: &OpDesc<'_>, native: bool) -> Result<Step<Posted>> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let rank = d.target;
        // Which epoch grants access to this target?
        match &self.epoch {
            WindowEpoch::Unset => return Err(UsageError::NoEpoch { target: rank }.into()),
            WindowEpoch::Pscw(p) if p.index(rank).is_none() => {
                return Err(UsageError::NotInGroup { target: rank }.into())
            }
            WindowEpoch::PerTarget
                if !self.locks.contains_key(&rank) && self.table.get(rank).is_none() =>
            {
                return Err(UsageError::NoEpoch { target: rank }.into())
            }
            _ => {}
        }
        if matches!(self.epoch, WindowEpoch::FenceIssued) && self.advance_barrier(w)? {
            self.epoch = WindowEpoch::FenceGranted;
        }
        // Fast path: native, access granted, nothing queued before it. The target
        // element is looked up once (the state and whether there is one).
        let elem_state = self
            .table
            .get(rank)
            .map(|t| (t.state, t.pending.is_empty()));
        let has_elem = elem_state.is_some();
        if native && elem_state.is_none_or(|(s, empty)| empty && s != TargetState::LockCalled) {
            let granted = match (&self.epoch, elem_state) {
                (WindowEpoch::FenceGranted | WindowEpoch::LockAllGranted { .. }, _) => true,
                (WindowEpoch::PerTarget, Some((s, _))) => {
                    matches!(s, TargetState::LockGranted | TargetState::Ready)
                }
                (WindowEpoch::PerTarget, None) => self.locks.get(&rank).is_some_and(|l| l.granted),
                (WindowEpoch::Pscw(_), _) => {
                    // A post left natively goes straight to this op (no element queued
                    // to wait for the next progress pass).
                    self.take_native_posts(w, rank);
                    self.access_granted(rank)
                }
                _ => has_elem && self.access_granted(rank),
            };
            // A get into the caller's buffer that the backend completes in the call: no
            // element, no copy of ours.
            if granted && d.kind == OpKind::Get && w.caps(rank).get_in_call {
                if let Some(dst) = &d.into {
                    let mut dst = dst.borrow_mut();
                    if w.engine
                        .transport
                        .get_into(w.id, rank, d.extent.offset, &mut dst)?
                    {
                        w.counters.op(true);
                        return Ok(Step::Done(Posted::Done(None)));
                    }
                }
            }
            // Resources to track the op in case it does not complete at once.
            let room = has_elem || !self.target_pool_empty(w);
            if granted && room && !d.wants_result {
                // Nothing to hand back: no op element, no token of its own. The target
                // element counts it, and its completion names the target (as a provider
                // counter would); the backend bounds how many are under way (Busy).
                let token = untracked_token(w.id, rank);
                return match native_call_desc(w, d, token) {
                    Ok(Issued::Complete(_)) => {
                        w.counters.op(true);
                        Ok(Step::Done(Posted::Done(None)))
                    }
                    Ok(Issued::Pending) => {
                        w.counters.op(true);
                        let elem = self.target_elem(w, rank).expect("room checked");
                        elem.native_in_flight += 1;
                        Ok(Step::Done(Posted::Later(None)))
                    }
                    Err(TransportError::Busy) => Ok(Step::Blocked),
                    Err(e) => Err(e.into()),
                };
            }
            // An op that hands a result back needs an op element only if it does not
            // complete in the call. One free in the window's local pool (which only this
            // locked state touches) is still free after the call, so it is taken then;
            // otherwise one is taken from the global pool first.
            let held = if granted && room && !self.op_pool.has_local() {
                self.op_pool.get(&w.engine.op_pool)
            } else {
                None
            };
            if granted && room && (held.is_some() || self.op_pool.has_local()) {
                let token = self.new_token(w);
                let issued = native_call_desc(w, d, token);
                // Kept only for an op that stays pending.
                let held = match held {
                    Some(op) if !matches!(issued, Ok(Issued::Pending)) => {
                        self.free_op(w, op);
                        None
                    }
                    held => held,
                };
                match issued {
                    Ok(Issued::Complete(data)) => {
                        w.counters.op(true);
                        // A get into the caller's buffer, complete in the call: the bytes
                        // go there now (no request to make and wait on).
                        if let (Some(dst), Some(bytes)) = (&d.into, &data) {
                            let mut dst = dst.borrow_mut();
                            if bytes.len() == dst.len() {
                                dst.copy_from_slice(bytes);
                                return Ok(Step::Done(Posted::Done(None)));
                            }
                        }
                        let data = d.wants_result.then(|| data.unwrap_or_default());
                        return Ok(Step::Done(Posted::Done(data)));
                    }
                    Ok(Issued::Pending) => {
                        let op = match held {
                            Some(op) => op,
                            None => self
                                .op_pool
                                .get(&w.engine.op_pool)
                                .expect("a local element was free before the call"),
                        };
                        return self.track_native(w, d, token, op);
                    }
                    Err(TransportError::Busy) => return Ok(Step::Blocked),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // Everything else needs a target element and an op element.
        if self.table.get(rank).is_none() {
            if self.target_pool_empty(w) {
                return self.restore_target_elem_resources(w, rank);
            }
            self.target_elem(w, rank).expect("pool checked");
        }
        let Some(mut op) = self.op_pool.get(&w.engine.op_pool) else {
            return self.restore_op_elem_resources(w, rank);
        };
        w.counters
            .elements_in_use(self.op_pool.in_use(), self.target_pool.in_use());
        op.kind = d.kind;
        op.extent = d.extent;
        op.op = d.op;
        op.datatype = Some(d.datatype);
        op.data.clear();
        op.data.extend_from_slice(d.data);
        op.native = native;
        op.token = self.new_token(w);
        op.request = if d.wants_result {
            Some(RequestState::reuse_or_new(op.spare_request.take()))
        } else {
            None
        };
        let request = op.request.clone();
        let config = &w.engine.config;
        let elem = self.table.get_mut(rank).expect("created above");
        elem.pending.push_back(op);
        // Issue now unless the op may wait for piggybacking (or single-op at unlock).
        let big = d.data.len() > config.queue_max_bytes;
        let issue_now =
            big || elem.pending.len() > config.piggyback_threshold || !config.piggyback || native;
        let lock_now = elem.state == TargetState::LockCalled
            && (elem.pending.len() > 1
                || !config.single_op
                || d.data.len() > config.single_op_threshold
                || d.extent.bytes() > config.single_op_threshold as u64);
        if issue_now || lock_now {
            self.issue_ops_target(w, rank)?;
        }
        if self.table.get(rank).is_some_and(|t| !t.pending.is_empty()) {
            w.counters.queued();
        }
        Ok(Step::Done(Posted::Later(request)))
    }

    /// Tracks a native op that is under way, in the element reserved for it, so that its
    /// completion (matched by token) finds its request.
    fn track_native(
        &mut self,
        w: &WindowShared,
        d: &OpDesc<'_>,
        token: u64,
        mut op: Box<OpElem>,
    ) -> Result<Step<Posted>> {
        w.counters.op(true);
        self.native_index.insert(token, d.target);
        op.kind = d.kind;
        op.token = token;
        op.native = true;
        op.request = if d.wants_result {
            Some(RequestState::reuse_or_new(op.spare_request.take()))
        } else {
            None
        };
        let request = op.request.clone();
        let elem = self
            .target_elem(w, d.target)
            .expect("room checked before issue");
        elem.native_in_flight += 1;
        elem.issued.push(op);
        Ok(Step::Done(Posted::Later(request)))
    }

    fn target_pool_empty(&self, w: &WindowShared) -> bool {
        self.target_pool.in_use() >= w.engine.config.target_pool_local
            && w.engine.target_pool.available() == 0
    }

    /// RESTORE_TARGET_ELEM_RESOURCES, as a step: pick an element to drain and let
    /// progress complete it; LOCK_ALL_CALLED falls back to the window protocol instead.
    fn restore_target_elem_resources<T>(
        &mut self,
        w: &WindowShared,
        _for_rank: Rank,
    ) -> Result<Step<T>> {
        w.counters.restore();
        if matches!(self.epoch, WindowEpoch::LockAllCalled) {
            self.lock_all_window_protocol(w)?;
            return Ok(Step::Blocked);
        }
        self.restoring = true;
        self.drain_one();
        self.cleanup_ops_win(w);
        Ok(Step::Blocked)
    }

    /// RESTORE_OP_ELEM_RESOURCES: flush one target with queued ops.
    fn restore_op_elem_resources<T>(
        &mut self,
        w: &WindowShared,
        for_rank: Rank,
    ) -> Result<Step<T>> {
        w.counters.restore();
        let victim = match self.table.get(for_rank) {
            Some(t) if !t.pending.is_empty() => Some(for_rank),
            _ => self
                .table
                .iter()
                .find(|t| !t.pending.is_empty())
                .map(|t| t.rank),
        };
        if let Some(v) = victim {
            let elem = self.table.get_mut(v).expect("exists");
            if elem.sync == SyncFlag::None {
                elem.sync = if matches!(self.epoch, WindowEpoch::Pscw(_)) {
                    SyncFlag::None
                } else {
                    SyncFlag::Flush
                };
            }
            // In PSCW no RMA_DONE is needed: just issue (the complete closes it).
            self.force_issue(w, v)?;
        }
        Ok(Step::Blocked)
    }

    /// Issues a target's queued ops now, asking for its lock if needed (a request is
    /// waited on, or flush_local).
    pub(crate) fn force_issue(&mut self, w: &WindowShared, rank: Rank) -> Result<()> {
        if let Some(t) = self.table.get_mut(rank) {
            t.no_delay = true;
            self.issue_ops_target(w, rank)?;
        }
        Ok(())
    }

    fn drain_one(&mut self) {
        let in_pscw = matches!(self.epoch, WindowEpoch::Pscw(_));
        let victim = self
            .table
            .iter()
            .find(|t| t.state == TargetState::LockGranted || t.state == TargetState::Ready)
            .or_else(|| self.table.iter().next())
            .map(|t| t.rank);
        if let Some(v) = victim {
            let elem = self.table.get_mut(v).expect("exists");
            elem.no_delay = true;
            if elem.sync == SyncFlag::None && (!elem.pending.is_empty() || elem.am_since_done > 0) {
                elem.sync = if in_pscw {
                    SyncFlag::None
                } else {
                    SyncFlag::Flush
                };
                if in_pscw {
                    // PSCW needs no RMA_DONE until complete: issuing frees the op elements,
                    // and the count rides on the complete.
                    elem.am_since_done = 0;
                }
            }
        }
    }

    /// LOCK_ALL: fall back from the per-target to the window protocol.
    fn lock_all_window_protocol(&mut self, w: &WindowShared) -> Result<()> {
        tracing::debug!(win = w.id, "lock_all falls back to the window protocol");
        self.epoch = WindowEpoch::LockAllIssued;
        self.native_lock_cursor = 0;
        for rank in 0..w.engine.size as Rank {
            match self.table.get(rank).map(|t| t.state) {
                Some(TargetState::LockCalled) => self.request_lock(w, rank)?,
                Some(_) => {}
                None => {
                    self.window_grants += 1;
                    if !Self::native_locks(w, rank) {
                        let fl = flags::LOCK_SHARED | flags::LOCK_ALL;
                        self.send_control(w, rank, Kind::Lock, fl, 0)?;
                    }
                }
            }
        }
        self.advance_native_window_locks(w)
    }

    /// Window protocol over native locks: take the remaining targets' locks in rank order,
    /// as far as they are free now.
    fn advance_native_window_locks(&mut self, w: &WindowShared) -> Result<()> {
        while (self.native_lock_cursor as usize) < w.engine.size {
            let rank = self.native_lock_cursor;
            if self.table.get(rank).is_none() && Self::native_locks(w, rank) {
                if !w.engine.transport.try_lock(w.id, rank, false)? {
                    return Ok(());
                }
                self.window_grants -= 1;
            }
            self.native_lock_cursor += 1;
        }
        Ok(())
    }

    fn lock_all_issued_done(&mut self) -> bool {
        if !matches!(self.epoch, WindowEpoch::LockAllIssued) {
            return true;
        }
        let done = self.window_grants == 0
            && self
                .table
                .iter()
                .all(|t| t.state != TargetState::LockIssued);
        if done {
            for t in self.table.ranks() {
                if let Some(t) = self.table.get_mut(t) {
                    // Every target is locked by the window now.
                    t.state = TargetState::Ready;
                }
            }
            self.epoch = WindowEpoch::LockAllGranted { nocheck: false };
        }
        done
    }

    // ----- incoming --------------------------------------------------------------------

    /// Handles one decoded packet from `from`.
    pub(crate) fn handle_packet(
        &mut self,
        w: &WindowShared,
        from: Rank,
        p: &Packet<'_>,
        raw: &[u8],
    ) -> Result<()> {
        match p.kind {
            k if k.is_op() => {
                if p.flags & (flags::LOCK_SHARED | flags::LOCK_EXCLUSIVE) != 0 {
                    let waiter = Waiter {
                        origin: from,
                        exclusive: p.flags & flags::LOCK_EXCLUSIVE != 0,
                        lock_all: false,
                        single_op: Some(raw.to_vec()),
                    };
                    let granted = self.target.locks.request(waiter, &mut Self::own_lock(w));
                    if let Some(granted) = granted {
                        self.apply_granted(w, granted)?;
                    }
                } else {
                    self.apply_and_reply(w, from, p)?;
                }
            }
            Kind::Response => {
                let Body::Response { token, ok, data } = &p.body else {
                    unreachable!("decoded")
                };
                if let Some(elem) = self.table.get_mut(from) {
                    if let Some(i) = elem
                        .issued
                        .iter()
                        .position(|o| o.token == *token && !o.native)
                    {
                        let op = elem.issued.swap_remove(i);
                        // What the request asked back, to the byte: a peer that answers
                        // with more or less is malformed, whatever it claims.
                        let expected = match op.kind {
                            OpKind::CompareAndSwap => op.datatype.map_or(0, |d| d.size() as u64),
                            OpKind::Get | OpKind::GetAccumulate => op.extent.bytes(),
                            OpKind::Put | OpKind::Accumulate => 0,
                        };
                        if let Some(r) = &op.request {
                            r.complete(if !*ok {
                                Err(PeerError::Refused { rank: from }.into())
                            } else if data.len() as u64 != expected {
                                Err(PeerError::Malformed {
                                    from,
                                    reason: "a reply whose length differs from the request",
                                }
                                .into())
                            } else {
                                Ok(Fetched::copy_of(data))
                            });
                        }
                        self.free_op(w, op);
                    }
                }
                if p.flags & flags::ACK != 0 {
                    self.handle_ack(from, p.flags);
                }
            }
            Kind::Lock => {
                let waiter = Waiter {
                    origin: from,
                    exclusive: p.flags & flags::LOCK_EXCLUSIVE != 0,
                    lock_all: p.flags & flags::LOCK_ALL != 0,
                    single_op: None,
                };
                if let Some(g) = self.target.locks.request(waiter, &mut Self::own_lock(w)) {
                    self.apply_granted(w, g)?;
                }
            }
            Kind::LockGranted => {
                if let Some(l) = self.locks.get_mut(&from) {
                    l.granted = true;
                }
                match self.table.get_mut(from) {
                    Some(t) if t.state == TargetState::LockIssued => {
                        t.state = TargetState::LockGranted
                    }
                    _ => self.window_grants = self.window_grants.saturating_sub(1),
                }
            }
            Kind::Done => {
                let mut reply = Reply::default();
                self.target.handle_sync_flags(from, p, &mut reply);
                self.finish_reply(w, from, reply)?;
            }
            Kind::Ack => self.handle_ack(from, p.flags),
            Kind::Post => *self.target.posts.entry(from).or_default() += 1,
            Kind::Barrier => {
                if let Body::Barrier { seq, round } = p.body {
                    *self
                        .target
                        .barrier_arrivals
                        .entry((seq, round))
                        .or_default() += 1;
                }
            }
            Kind::Depart => {
                if let Body::Depart { what, seq } = p.body {
                    let blamed = w.engine.heard_blame(from, p.done_count);
                    let mismatch =
                        p.done_count & BLAME_MISMATCH != 0 && what == Departure::Abandoned;
                    if let Some(rank) = blamed.filter(|r| mismatch && *r != w.engine.rank) {
                        // It left over a mismatch with `rank`: that is what this window's
                        // collectives report, whichever word arrives first.
                        let theirs = Departure::call_of((p.done_count >> 24) & 0x3f);
                        self.departures.mismatch.get_or_insert((rank, theirs));
                    }
                    let d = &mut self.departures;
                    match what {
                        Departure::Abandoned => {
                            if d.abandoned.len() < w.engine.size {
                                d.abandoned.resize(w.engine.size, None);
                            }
                            d.abandoned[from as usize] = Some(seq);
                            // It will never unlock: what it holds or waits for here goes.
                            self.revoke_locks(w, from)?;
                        }
                        Departure::Mismatch => {
                            d.mismatch.get_or_insert((from, Departure::call_of(seq)));
                        }
                        Departure::Free => {
                            if d.freeing.len() < w.engine.size {
                                d.freeing.resize(w.engine.size, None);
                            }
                            d.freeing[from as usize] = Some(seq);
                        }
                        Departure::Job => {}
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn handle_ack(&mut self, from: Rank, fl: u16) {
        if fl & flags::REFUSED != 0 {
            self.deferred = Some(PeerError::Refused { rank: from }.into());
        }
        match self.table.get_mut(from) {
            Some(t) if t.acks_awaited > 0 => t.acks_awaited -= 1,
            _ => self.window_acks = self.window_acks.saturating_sub(1),
        }
    }

    fn apply_granted(&mut self, w: &WindowShared, granted: Waiter) -> Result<()> {
        let mut queue = vec![granted];
        while let Some(g) = queue.pop() {
            match g.single_op {
                Some(bytes) => {
                    let p = wire::decode(&bytes).map_err(|reason| PeerError::Malformed {
                        from: g.origin,
                        reason,
                    })?;
                    if let Some(mut more) = self.apply_and_reply(w, g.origin, &p)? {
                        more.reverse();
                        queue.extend(more);
                    }
                }
                None => self.send_control(w, g.origin, Kind::LockGranted, 0, 0)?,
            }
        }
        Ok(())
    }

    /// Applies an op packet and sends what it calls for; returns lock waiters granted by
    /// an UNLOCK it carried.
    fn apply_and_reply(
        &mut self,
        w: &WindowShared,
        from: Rank,
        p: &Packet<'_>,
    ) -> Result<Option<Vec<Waiter>>> {
        let memory = w.memory.read().unwrap_or_else(|e| e.into_inner()).clone();
        let response = self.target.apply_op(&memory, from, p);
        if response.as_ref().is_some_and(|r| !r.1) || self.target.refused.contains(&from) {
            w.counters.refused();
        }
        let mut reply = Reply {
            response,
            ..Reply::default()
        };
        self.target.handle_sync_flags(from, p, &mut reply);
        let released = reply.released.is_some();
        self.finish_reply(w, from, reply)?;
        Ok(released.then(|| self.target.locks.grant_waiting(&mut Self::own_lock(w))))
    }

    fn finish_reply(&mut self, w: &WindowShared, from: Rank, reply: Reply) -> Result<()> {
        let mut ack_flags = 0;
        if reply.ack && self.target.take_refused(from) {
            ack_flags |= flags::REFUSED;
        }
        match reply.response {
            Some((token, ok, data)) => {
                let fl = if reply.ack { flags::ACK | ack_flags } else { 0 };
                self.enc
                    .start(Kind::Response, fl, w.id, 0)
                    .u64(token)
                    .u8(ok as u8)
                    .bytes(&data);
                self.send_encoded(w, from, Kind::Response)?;
            }
            None if reply.ack => self.send_control(w, from, Kind::Ack, ack_flags, 0)?,
            None => {}
        }
        if let Some(exclusive) = reply.released {
            if Self::own_lock_is_native(w) {
                w.engine.transport.unlock(w.id, w.engine.rank, exclusive)?;
            }
            for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
                self.apply_granted(w, g)?;
            }
        }
        Ok(())
    }

    /// Takes away the locks `origin` holds on this window's target side (and its waiting
    /// requests), releasing the native word held for them, and grants whoever waits.
    pub(crate) fn revoke_locks(&mut self, w: &WindowShared, origin: Rank) -> Result<()> {
        let released = self.target.locks.revoke(origin);
        if released.is_empty() {
            return Ok(());
        }
        tracing::warn!(origin, win = w.id, "locks of a rank that is gone revoked");
        for exclusive in released {
            if Self::own_lock_is_native(w) {
                w.engine.transport.unlock(w.id, w.engine.rank, exclusive)?;
            }
        }
        for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
            self.apply_granted(w, g)?;
        }
        Ok(())
    }

    /// Whether this process's own window lock is a native word (shared memory) that the
    /// node's ranks take themselves: then ranks that lock by message (other nodes) take
    /// it through us, and we hold the word for them while they hold the lock.
    fn own_lock_is_native(w: &WindowShared) -> bool {
        Self::native_locks(w, w.engine.rank)
    }

    /// The `take` of the lock queue: one attempt at the native word where there is one.
    fn own_lock(w: &WindowShared) -> impl FnMut(bool) -> bool + '_ {
        let native = Self::own_lock_is_native(w);
        move |exclusive| {
            !native
                || w.engine
                    .transport
                    .try_lock(w.id, w.engine.rank, exclusive)
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "native lock word of our window");
                        false
                    })
        }
    }

    /// Retries the message-lock requests that wait for our native lock word.
    fn grant_waiting_native(&mut self, w: &WindowShared) -> Result<()> {
        if self.target.locks.has_waiting() && Self::own_lock_is_native(w) {
            for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
                self.apply_granted(w, g)?;
            }
        }
        Ok(())
    }

    /// A native op completed (or failed).
    pub(crate) fn handle_completion(
        &mut self,
        w: &WindowShared,
        token: u64,
        result: Result<Option<Fetched>>,
    ) {
        if token & UNTRACKED != 0 {
            let rank = token as Rank;
            if let Some(elem) = self.table.get_mut(rank) {
                elem.native_in_flight = elem.native_in_flight.saturating_sub(1);
            }
            if let Err(e) = result {
                self.deferred = Some(e);
            }
            return;
        }
        let Some(rank) = self.native_index.remove(&token) else {
            return;
        };
        let Some(elem) = self.table.get_mut(rank) else {
            return;
        };
        elem.native_in_flight = elem.native_in_flight.saturating_sub(1);
        if let Some(i) = elem
            .issued
            .iter()
            .position(|o| o.token == token && o.native)
        {
            let op = elem.issued.swap_remove(i);
            if let Some(r) = &op.request {
                r.complete(result.map(Option::unwrap_or_default));
            } else if let Err(e) = result {
                self.deferred = Some(e);
            }
            self.free_op(w, op);
        }
    }
}

fn sync_flags(sync: SyncFlag) -> u16 {
    match sync {
        SyncFlag::None => 0,
        SyncFlag::Flush => flags::DONE,
        SyncFlag::Unlock => flags::UNLOCK,
        SyncFlag::Complete => flags::COMPLETE,
    }
}

fn op_kind_wire(k: OpKind) -> Kind {
    match k {
        OpKind::Put => Kind::Put,
        OpKind::Get => Kind::Get,
        OpKind::Accumulate => Kind::Accumulate,
        OpKind::GetAccumulate => Kind::GetAccumulate,
        OpKind::CompareAndSwap => Kind::CompareAndSwap,
    }
}

fn encode_op(enc: &mut Encoder, win: u32, op: &OpElem, fl: u16, done_count: u32) {
    let kind = op_kind_wire(op.kind);
    enc.start(kind, fl, win, done_count);
    let dt = op.datatype.unwrap_or(DataType::U8);
    match op.kind {
        OpKind::Put => {
            enc.extent(op.extent).bytes(&op.data);
        }
        OpKind::Get => {
            enc.u64(op.token).extent(op.extent);
        }
        OpKind::Accumulate => {
            enc.u8(op.op.unwrap_or(AccOp::Replace) as u8)
                .u8(dt as u8)
                .extent(op.extent)
                .bytes(&op.data);
        }
        OpKind::GetAccumulate => {
            enc.u64(op.token)
                .u8(op.op.unwrap_or(AccOp::NoOp) as u8)
                .u8(dt as u8)
                .extent(op.extent);
            if op.op != Some(AccOp::NoOp) {
                enc.bytes(&op.data);
            }
        }
        OpKind::CompareAndSwap => {
            enc.u64(op.token)
                .u8(dt as u8)
                .u64(op.extent.offset)
                .bytes(&op.data);
        }
    }
}

fn native_call(
    w: &WindowShared,
    rank: Rank,
    op: &OpElem,
    token: u64,
) -> std::result::Result<Issued, TransportError> {
    let t = &w.engine.transport;
    let off = op.extent.offset;
    let dt = op.datatype.unwrap_or(DataType::U8);
    match op.kind {
        OpKind::Put => t.put(w.id, rank, off, &op.data, token),
        OpKind::Get => t.get(w.id, rank, off, op.extent.bytes() as usize, token),
        OpKind::Accumulate | OpKind::GetAccumulate => t.atomic(
            w.id,
            rank,
            off,
            NativeAtomic::Accumulate {
                op: op.op.unwrap_or(AccOp::Replace),
                datatype: dt,
                operand: &op.data,
                fetch: op.kind == OpKind::GetAccumulate,
            },
            token,
        ),
        OpKind::CompareAndSwap => {
            let (c, s) = op.data.split_at(dt.size());
            t.atomic(
                w.id,
                rank,
                off,
                NativeAtomic::CompareAndSwap {
                    datatype: dt,
                    compare: c,
                    swap: s,
                },
                token,
            )
        }
    }
}

#[inline(always)] // on every native op's path; a call costs the emulator more than its code
fn native_call_desc(
    w: &WindowShared,
    d: &OpDesc<'_>,
    token: u64,
) -> std::result::Result<Issued, TransportError> {
    let t = &w.engine.transport;
    let off = d.extent.offset;
    match d.kind {
        OpKind::Put => t.put(w.id, d.target, off, d.data, token),
        OpKind::Get => t.get(w.id, d.target, off, d.extent.bytes() as usize, token),
        OpKind::Accumulate | OpKind::GetAccumulate => t.atomic(
            w.id,
            d.target,
            off,
            NativeAtomic::Accumulate {
                op: d.op.unwrap_or(AccOp::Replace),
                datatype: d.datatype,
                operand: d.data,
                fetch: d.kind == OpKind::GetAccumulate,
            },
            token,
        ),
        OpKind::CompareAndSwap => {
            let (c, s) = d.data.split_at(d.datatype.size());
            t.atomic(
                w.id,
                d.target,
                off,
                NativeAtomic::CompareAndSwap {
                    datatype: d.datatype,
                    compare: c,
                    swap: s,
                },
                token,
            )
        }
    }
}

impl WindowShared {
    pub(crate) fn new(
        id: u32,
        kind: WindowKind,
        engine: Arc<EngineShared>,
        remote: Vec<RemoteSegment>,
        memory: Memory,
    ) -> Self {
        let state = Mutex::new(WinState::new(&engine));
        // Capabilities per target, once: a byte per rank and the few distinct classes.
        let mut classes: Vec<crate::transport::Capabilities> = Vec::new();
        let routes = (0..engine.size as Rank)
            .map(|r| {
                let c = engine.transport.window_capabilities(id, r);
                match classes.iter().position(|x| *x == c) {
                    Some(i) => i as u8,
                    None => {
                        classes.push(c);
                        (classes.len() - 1) as u8
                    }
                }
            })
            .collect();
        let shares_memory = classes.iter().any(|c| c.shared_memory);
        WindowShared {
            routes,
            classes,
            shares_memory,
            id,
            kind,
            engine,
            remote,
            memory: RwLock::new(memory),
            state,
            counters: Counters::default(),
            next_region: Mutex::new(1),
            user_copy: Mutex::new(None),
            freed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn count_message(&self, kind: Kind, bytes: usize) {
        self.counters.message(kind, bytes);
        self.engine.stats.message(kind, bytes);
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, WinState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until `cond` holds on this window's state, making progress on the way.
    fn wait_for(
        &self,
        call: &'static str,
        cond: impl FnMut(&mut WinState) -> Result<bool>,
    ) -> Result<()> {
        self.lock_state().make_progress(self)?;
        self.wait_issued(call, cond)
    }

    /// As [`wait_for`](Self::wait_for), for a caller that has just issued what it waits
    /// on: ISSUE_OPS is left to the engine's progress passes, which run it on every
    /// registered window (or another thread's pass does).
    fn wait_issued(
        &self,
        call: &'static str,
        mut cond: impl FnMut(&mut WinState) -> Result<bool>,
    ) -> Result<()> {
        self.engine
            .wait_until(call, || {
                let mut st = self.lock_state();
                if cond(&mut st)? {
                    return Ok(true);
                }
                st.departure_error(self, call).map(|()| false)
            })
            .map_err(|e| match e {
                Error::Peer(PeerError::Timeout { call, rank: None }) => PeerError::Timeout {
                    call,
                    rank: self.lock_state().awaited_rank(self),
                }
                .into(),
                e => e,
            })
    }

    fn check_rank(&self, rank: Rank) -> Result<()> {
        if (rank as usize) < self.engine.size {
            Ok(())
        } else {
            Err(UsageError::RankOutOfRange {
                rank,
                size: self.engine.size,
            }
            .into())
        }
    }

    /// Origin-side bounds check and conversion of a displacement to a byte extent.
    #[inline]
    fn extent(&self, target: Rank, disp: u64, layout: Layout, elem: usize) -> Result<Extent> {
        self.check_rank(target)?;
        if !layout.valid() {
            return Err(UsageError::BadLayout.into());
        }
        // Every size in bytes, checked: a layout whose bytes overflow is an error, never
        // a wrapped or truncated extent.
        let bytes = |x: usize| {
            x.checked_mul(elem)
                .map(|b| b as u64)
                .ok_or(UsageError::TooLarge { what: "the layout" })
        };
        let extent = |offset: u64| -> Result<Extent> {
            let e = Extent {
                offset,
                count: layout.count as u64,
                block: bytes(layout.block)?,
                stride: bytes(layout.stride)?,
            };
            if e.is_well_formed() {
                Ok(e)
            } else {
                Err(UsageError::TooLarge { what: "the layout" }.into())
            }
        };
        if self.kind == WindowKind::Dynamic {
            // Addresses come from `attach`; the target checks them against its regions.
            return extent(disp);
        }
        let r = &self.remote[target as usize];
        let offset = disp
            .checked_mul(u64::from(r.disp_unit))
            .ok_or(UsageError::TooLarge {
                what: "the displacement",
            })?;
        let len = layout
            .span()
            .and_then(|s| s.checked_mul(elem))
            .map(|b| b as u64)
            .ok_or(UsageError::TooLarge { what: "the layout" })?;
        if offset.checked_add(len).is_none_or(|end| end > r.len) {
            return Err(UsageError::OutOfBounds {
                target,
                offset,
                len,
                window_len: r.len,
            }
            .into());
        }
        extent(offset)
    }

    /// The backend's native capabilities toward `target` on this window.
    pub(crate) fn caps(&self, target: Rank) -> &crate::transport::Capabilities {
        &self.classes[self.routes[target as usize] as usize]
    }

    fn native_allowed(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        dt: DataType,
        target: Rank,
        extent: Extent,
    ) -> bool {
        let contiguous = extent.count <= 1;
        if !self.engine.config.native_ops || self.kind == WindowKind::Dynamic || !contiguous {
            return false;
        }
        let caps = self.caps(target);
        match kind {
            OpKind::Put => caps.rdma_write,
            OpKind::Get => caps.rdma_read,
            OpKind::Accumulate | OpKind::GetAccumulate => {
                op.is_some_and(|o| caps.has_atomic(o, dt))
                    && extent.block / dt.size() as u64 <= caps.max_atomic_elements as u64
            }
            OpKind::CompareAndSwap => caps.has_compare_and_swap(dt),
        }
    }

    fn post(&self, d: OpDesc<'_>) -> Result<Posted> {
        let native = self.native_allowed(d.kind, d.op, d.datatype, d.target, d.extent);
        if !native {
            self.check_active_message(d.target, d.extent)?;
        }
        // Most ops post at the first try: no waiting machinery for them.
        if let Step::Done(p) = self.lock_state().try_post(self, &d, native)? {
            return Ok(p);
        }
        let mut result = Ok(Posted::Later(None));
        self.engine.wait_until("operation", || {
            let mut st = self.lock_state();
            st.make_progress(self)?;
            match st.try_post(self, &d, native) {
                Ok(Step::Done(p)) => {
                    result = Ok(p);
                    Ok(true)
                }
                Ok(Step::Blocked) => Ok(false),
                Err(e) => {
                    result = Err(e);
                    Ok(true)
                }
            }
        })?;
        result
    }

    /// An op that goes as an active message must fit in one (its request, or its reply
    /// for a get): what does not is refused here, before anything is sent or allocated.
    fn check_active_message(&self, target: Rank, extent: Extent) -> Result<()> {
        let max = self.caps(target).max_message as u64;
        if extent.bytes().saturating_add(64) > max {
            return Err(TransportError::Unsupported(
                "active message larger than the transport carries",
            )
            .into());
        }
        Ok(())
    }

    fn enter_sync(&self, st: &mut WinState, call: &'static str) -> Result<()> {
        if let Some(other) = st.sync_call {
            let _ = other;
            return Err(UsageError::ConcurrentSync { call }.into());
        }
        st.sync_call = Some(call);
        Ok(())
    }

    fn leave_sync(&self) {
        self.lock_state().sync_call = None;
    }

    /// Runs a sync call with the thread rules enforced and the call traced.
    fn sync_call<R>(&self, call: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.engine.activity.bump();
        {
            let mut st = self.lock_state();
            self.enter_sync(&mut st, call)?;
        }
        let span = tracing::debug_span!("rma_sync", call, win = self.id);
        let _g = span.enter();
        let r = f();
        if let Err(e) = &r {
            // Misuse changes nothing; any other failure (a peer dead or gone, a
            // transport error, a timeout) must not leave the epoch half closed.
            if !matches!(e, Error::Usage(_)) {
                self.close_after_failure(call, e);
            }
        }
        self.leave_sync();
        r
    }

    /// After a synchronization call failed for a reason other than misuse: what this
    /// rank holds is released (native lock words it took), every op still queued or
    /// under way fails with the error (no request waits forever), and the window has no
    /// epoch open, so that it can be freed or dropped. Locks taken by message stay with
    /// their target until it learns this window is gone (its drop, or this rank's death
    /// or departure, revokes them there).
    fn close_after_failure(&self, call: &'static str, err: &Error) {
        tracing::warn!(call, win = self.id, error = %err, "synchronization failed: epoch closed");
        let mut st = self.lock_state();
        st.release_native_locks(self);
        for rank in st.table.ranks() {
            st.abandon_target(self, rank, err);
        }
        st.locks = LockTable::default();
        if call == "fence" {
            st.barrier = None;
        }
        st.epoch = WindowEpoch::Unset;
        st.restoring = false;
    }

    // ----- FENCE -----------------------------------------------------------------------

    fn fence(&self, assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOSTORE | Assert::NOPUT | Assert::NOPRECEDE | Assert::NOSUCCEED) {
            return Err(UsageError::BadAssert { call: "fence" }.into());
        }
        self.sync_call("fence", || {
            let t = &self.engine.transport;
            {
                let st = self.lock_state();
                match st.epoch {
                    WindowEpoch::Unset | WindowEpoch::FenceIssued | WindowEpoch::FenceGranted => {}
                    ref e => {
                        return Err(UsageError::EpochConflict {
                            call: "fence",
                            state: e.name(),
                        }
                        .into())
                    }
                }
            }
            let noprecede =
                assert.contains(Assert::NOPRECEDE) && self.lock_state().table.active == 0;
            if noprecede {
                // Nothing to complete: do not block (FENCE_ISSUED with a non-blocking barrier).
                // One native barrier at a time per window: wait for a previous one.
                self.wait_for("fence", |st| {
                    Ok(!matches!(st.barrier, Some(Barrier::Native(_))))
                })?;
                let mut st = self.lock_state();
                t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC before PROC_SYNC
                st.start_barrier(self)?;
                st.epoch = WindowEpoch::FenceIssued;
                st.make_progress(self)?;
                if assert.contains(Assert::NOSUCCEED) {
                    st.epoch = WindowEpoch::Unset;
                }
                return Ok(());
            }
            // A previous NOPRECEDE fence's barrier must finish first.
            self.wait_for("fence", |st| Ok(st.barrier.is_none()))?;
            {
                let mut st = self.lock_state();
                if matches!(st.epoch, WindowEpoch::FenceIssued) {
                    st.epoch = WindowEpoch::FenceGranted;
                }
                for rank in st.table.ranks() {
                    let t = st.table.get_mut(rank).expect("listed");
                    if t.am_since_done > 0 || t.pending.iter().any(|o| !o.native) {
                        t.sync = SyncFlag::Flush;
                    }
                }
            }
            // Every op of the epoch complete at its target (seed 001).
            self.wait_for("fence", |st| Ok(st.table.iter().all(|t| t.is_idle())))?;
            t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC before PROC_SYNC
            {
                let mut st = self.lock_state();
                for rank in st.table.ranks() {
                    st.free_target(self, rank);
                }
                st.start_barrier(self)?;
                st.epoch = WindowEpoch::FenceIssued;
            }
            self.wait_for("fence", |st| Ok(st.barrier.is_none()))?;
            t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC after PROC_SYNC
            let mut st = self.lock_state();
            st.epoch = if assert.contains(Assert::NOSUCCEED) {
                WindowEpoch::Unset
            } else {
                WindowEpoch::FenceGranted
            };
            st.restoring = false;
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }

    /// From FENCE_GRANTED with nothing queued, other epochs may begin directly.
    fn no_access_epoch(st: &WinState) -> bool {
        match st.epoch {
            WindowEpoch::Unset => true,
            WindowEpoch::FenceGranted | WindowEpoch::FenceIssued => st.table.active == 0,
            _ => false,
        }
    }

    // ----- PSCW ------------------------------------------------------------------------

    fn check_group(&self, group: &[Rank]) -> Result<()> {
        for (i, r) in group.iter().enumerate() {
            self.check_rank(*r)?;
            if group[..i].contains(r) {
                return Err(UsageError::BadLayout.into());
            }
        }
        Ok(())
    }

    fn start(&self, group: &[Rank], assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "start" }.into());
        }
        self.check_group(group)?;
        self.sync_call("start", || {
            let mut st = self.lock_state();
            if !Self::no_access_epoch(&st) {
                return Err(UsageError::EpochConflict {
                    call: "start",
                    state: st.epoch.name(),
                }
                .into());
            }
            let nocheck = assert.contains(Assert::NOCHECK);
            st.epoch = WindowEpoch::Pscw(PscwAccess {
                group: group.to_vec(),
                granted: vec![nocheck; group.len()],
            });
            // Posts already left natively: the first ops go at once.
            st.take_native_notices(self);
            drop(st);
            // seed 004 RMA+shm, PSCW row: WIN_START has MEM_SYNC after PROC_SYNC; the PROC_SYNC
            // (posts) is awaited lazily per target, so the barrier is taken here, before any op.
            self.engine.transport.memory_sync();
            Ok(())
        })
    }

    fn complete(&self) -> Result<()> {
        self.sync_call("complete", || {
            let group = match &self.lock_state().epoch {
                WindowEpoch::Pscw(p) => p.group.clone(),
                _ => return Err(UsageError::NoExposureEpoch.into()),
            };
            let transport = &self.engine.transport;
            transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC before PROC_SYNC in WIN_COMPLETE
            for &rank in &group {
                // Ops may only go once the target posted; complete waits for that post.
                let close = |st: &mut WinState| -> Result<bool> {
                    st.take_native_posts(self, rank);
                    if !st.access_granted(rank) {
                        return Ok(false);
                    }
                    if st.table.get(rank).is_none() {
                        if !transport.notify(self.id, rank, Notice::Complete)? {
                            st.send_control(self, rank, Kind::Done, flags::COMPLETE, 0)?;
                        }
                    } else {
                        st.table.get_mut(rank).expect("exists").sync = SyncFlag::Complete;
                        st.issue_ops_target(self, rank)?;
                    }
                    Ok(true)
                };
                // Usually the post is in already: no progress pass before closing.
                let closed = close(&mut self.lock_state())?;
                if !closed {
                    self.wait_for("complete", close)?;
                }
            }
            let idle = |st: &mut WinState| Ok(st.table.iter().all(|t| t.is_idle()));
            if !idle(&mut self.lock_state())? {
                self.wait_for("complete", idle)?;
            }
            let mut st = self.lock_state();
            for rank in st.table.ranks() {
                st.free_target(self, rank);
            }
            st.epoch = WindowEpoch::Unset;
            st.restoring = false;
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }

    fn post_exposure(&self, group: &[Rank], assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK | Assert::NOSTORE | Assert::NOPUT) {
            return Err(UsageError::BadAssert { call: "post" }.into());
        }
        self.check_group(group)?;
        let mut st = self.lock_state();
        if st.target.exposure.is_some() {
            return Err(UsageError::EpochConflict {
                call: "post",
                state: "exposure epoch open",
            }
            .into());
        }
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC before PROC_SYNC in WIN_POST
        if !assert.contains(Assert::NOCHECK) {
            for &r in group {
                if !self.engine.transport.notify(self.id, r, Notice::Post)? {
                    st.send_control(self, r, Kind::Post, 0, 0)?;
                }
            }
        }
        st.target.exposure = Some(group.to_vec());
        st.make_progress(self)
    }

    fn exposure_done(st: &mut WinState) -> bool {
        let Some(group) = &st.target.exposure else {
            return true;
        };
        if group
            .iter()
            .all(|r| st.target.completes.get(r).is_some_and(|n| *n > 0))
        {
            for r in group.clone() {
                let n = st.target.completes.get_mut(&r).expect("checked");
                *n -= 1;
                if *n == 0 {
                    st.target.completes.remove(&r);
                }
            }
            st.target.exposure = None;
            true
        } else {
            false
        }
    }

    fn wait_exposure(&self) -> Result<()> {
        if self.lock_state().target.exposure.is_none() {
            return Err(UsageError::NoExposureEpoch.into());
        }
        let done = |st: &mut WinState| {
            st.take_native_completes(self);
            Ok(Self::exposure_done(st))
        };
        // The completes may all be in already: no progress pass then.
        if !done(&mut self.lock_state())? {
            self.wait_for("wait", done)?;
        }
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC after PROC_SYNC in WIN_WAIT
        Ok(())
    }

    fn test_exposure(&self) -> Result<bool> {
        if self.lock_state().target.exposure.is_none() {
            return Err(UsageError::NoExposureEpoch.into());
        }
        self.engine.progress()?;
        let mut st = self.lock_state();
        st.make_progress(self)?;
        let done = Self::exposure_done(&mut st);
        if done {
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC after PROC_SYNC in WIN_TEST
        }
        Ok(done)
    }

    // ----- LOCK / UNLOCK -------------------------------------------------------------------

    fn lock(&self, lock_type: LockType, target: Rank, assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "lock" }.into());
        }
        self.check_rank(target)?;
        let eager = {
            let mut st = self.lock_state();
            match st.epoch {
                WindowEpoch::PerTarget => {}
                _ if Self::no_access_epoch(&st) => st.epoch = WindowEpoch::PerTarget,
                ref e => {
                    return Err(UsageError::EpochConflict {
                        call: "lock",
                        state: e.name(),
                    }
                    .into())
                }
            }
            if st.locks.contains_key(&target) {
                return Err(UsageError::AlreadyLocked { target }.into());
            }
            let nocheck = assert.contains(Assert::NOCHECK);
            let exclusive = lock_type == LockType::Exclusive;
            st.locks.insert(
                target,
                LockInfo {
                    exclusive,
                    nocheck,
                    granted: nocheck,
                },
            );
            let state = if nocheck {
                TargetState::LockGranted
            } else {
                TargetState::LockCalled
            };
            if let Some(t) = st.table.get_mut(target) {
                t.state = state;
            }
            if !nocheck && WinState::native_locks(self, target) && st.table.get(target).is_none() {
                // Native locks cost no message: take the lock now, so the epoch's ops go
                // straight to the target (seed 004's LOCK, "do PROGRESS_WAIT until I got
                // the lock", for every target).
                drop(st);
                let mut first = true;
                self.engine.wait_until("lock", || {
                    if !first {
                        self.lock_state().make_progress(self)?;
                    }
                    first = false;
                    if self.engine.transport.try_lock(self.id, target, exclusive)? {
                        let mut st = self.lock_state();
                        if let Some(l) = st.locks.get_mut(&target) {
                            l.granted = true;
                        }
                        if let Some(t) = st.table.get_mut(target) {
                            t.state = TargetState::LockGranted;
                        }
                        return Ok(true);
                    }
                    Ok(false)
                })?;
                self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
                return Ok(());
            }
            !nocheck && st.must_take_lock(self, target)
        };
        if eager {
            // Local loads/stores after lock must be protected: take the lock now.
            self.wait_for("lock", |st| {
                if st.table.get(target).is_none() && st.target_elem(self, target).is_none() {
                    st.restore_target_elem_resources::<()>(self, target)?;
                    return Ok(false);
                }
                let t = st.table.get_mut(target).expect("exists");
                if t.state == TargetState::LockCalled {
                    st.request_lock(self, target)?;
                } else if t.state == TargetState::LockIssued {
                    st.issue_ops_target(self, target)?;
                }
                Ok(st.locks.get(&target).is_some_and(|l| l.granted))
            })?;
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
        }
        Ok(())
    }

    fn unlock(&self, target: Rank) -> Result<()> {
        self.unlock_inner(target).inspect_err(|e| {
            if !matches!(e, Error::Usage(_)) {
                // The lock of `target` is over either way: release what this rank holds
                // of it and fail its ops, so that the window is not stuck in the epoch.
                let mut st = self.lock_state();
                if let Some(info) = st.locks.remove(&target) {
                    if info.granted && !info.nocheck && WinState::native_locks(self, target) {
                        let _ = self
                            .engine
                            .transport
                            .unlock(self.id, target, info.exclusive);
                    }
                }
                st.abandon_target(self, target, e);
                if st.locks.is_empty() && st.table.active == 0 {
                    st.epoch = WindowEpoch::Unset;
                    st.restoring = false;
                }
            }
        })
    }

    fn unlock_inner(&self, target: Rank) -> Result<()> {
        self.check_rank(target)?;
        let info = {
            let mut st = self.lock_state();
            if !matches!(st.epoch, WindowEpoch::PerTarget) {
                return Err(UsageError::NotLocked { target }.into());
            }
            let info = *st
                .locks
                .get(&target)
                .ok_or(UsageError::NotLocked { target })?;
            // Hot path: native lock, nothing of the epoch left to complete.
            let settled = st
                .table
                .get(target)
                .is_none_or(|t| t.is_idle() && t.am_since_done == 0);
            if WinState::native_locks(self, target) && settled && st.outbox.is_empty() {
                self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in WIN_UNLOCK
                st.free_target(self, target);
                st.locks.remove(&target);
                if info.granted && !info.nocheck {
                    self.engine
                        .transport
                        .unlock(self.id, target, info.exclusive)?;
                }
                if st.locks.is_empty() && st.table.active == 0 {
                    st.epoch = WindowEpoch::Unset;
                    st.restoring = false;
                }
                return st.deferred.take().map_or(Ok(()), Err);
            }
            info
        };
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in WIN_UNLOCK
        self.wait_for("unlock", |st| {
            if st.table.get(target).is_none() && st.target_elem(self, target).is_none() {
                st.restore_target_elem_resources::<()>(self, target)?;
                return Ok(false);
            }
            let native = WinState::native_locks(self, target);
            let t = st.table.get_mut(target).expect("exists");
            t.sync = if info.nocheck || native {
                if t.am_since_done > 0 || !t.pending.is_empty() {
                    SyncFlag::Flush
                } else {
                    SyncFlag::None
                }
            } else {
                SyncFlag::Unlock
            };
            st.issue_ops_target(self, target)?;
            Ok(true)
        })?;
        self.wait_for("unlock", |st| {
            Ok(st.table.get(target).is_none_or(|t| t.is_idle()))
        })?;
        let mut st = self.lock_state();
        st.free_target(self, target);
        let held = st
            .locks
            .remove(&target)
            .is_some_and(|l| l.granted && !l.nocheck);
        if held && WinState::native_locks(self, target) {
            self.engine
                .transport
                .unlock(self.id, target, info.exclusive)?;
        }
        if st.locks.is_empty() && st.table.active == 0 {
            st.epoch = WindowEpoch::Unset;
            st.restoring = false;
        }
        match st.deferred.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn lock_all(&self, assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "lock_all" }.into());
        }
        let mut st = self.lock_state();
        if !Self::no_access_epoch(&st) {
            return Err(UsageError::EpochConflict {
                call: "lock_all",
                state: st.epoch.name(),
            }
            .into());
        }
        st.epoch = if assert.contains(Assert::NOCHECK) {
            WindowEpoch::LockAllGranted { nocheck: true }
        } else {
            WindowEpoch::LockAllCalled
        };
        for rank in st.table.ranks() {
            let state = if assert.contains(Assert::NOCHECK) {
                TargetState::Ready
            } else {
                TargetState::LockCalled
            };
            st.table.get_mut(rank).expect("listed").state = state;
        }
        drop(st);
        if self.kind == WindowKind::Shared && !assert.contains(Assert::NOCHECK) {
            // Shared memory may be touched by load/store: hold every lock before returning.
            let mut st = self.lock_state();
            st.lock_all_window_protocol(self)?;
            drop(st);
            self.wait_for("lock_all", |st| Ok(st.lock_all_issued_done()))?;
        }
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: LOCK_ALL as LOCK
        Ok(())
    }

    fn unlock_all(&self) -> Result<()> {
        self.sync_call("unlock_all", || {
            let nocheck = {
                let st = self.lock_state();
                match st.epoch {
                    WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => None,
                    WindowEpoch::LockAllGranted { nocheck } => Some(nocheck),
                    ref e => {
                        return Err(UsageError::EpochConflict {
                            call: "unlock_all",
                            state: e.name(),
                        }
                        .into())
                    }
                }
            };
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in UNLOCK_ALL
            self.wait_for("unlock_all", |st| Ok(st.lock_all_issued_done()))?;
            let window_protocol = matches!(
                self.lock_state().epoch,
                WindowEpoch::LockAllGranted { nocheck: false }
            );
            {
                let mut st = self.lock_state();
                for rank in st.table.ranks() {
                    let native = WinState::native_locks(self, rank);
                    let t = st.table.get_mut(rank).expect("listed");
                    let needs_done = t.am_since_done > 0 || !t.pending.is_empty();
                    t.sync = match t.state {
                        // Native locks: complete remotely, release after (below).
                        TargetState::LockCalled
                        | TargetState::LockIssued
                        | TargetState::LockGranted
                            if native =>
                        {
                            if needs_done {
                                SyncFlag::Flush
                            } else {
                                SyncFlag::None
                            }
                        }
                        // Per-target protocol: RMA_DONE+UNLOCK to each locked target.
                        TargetState::LockCalled
                        | TargetState::LockIssued
                        | TargetState::LockGranted => SyncFlag::Unlock,
                        TargetState::Ready if t.am_since_done > 0 || !t.pending.is_empty() => {
                            SyncFlag::Flush
                        }
                        TargetState::Ready => SyncFlag::None,
                    };
                    st.issue_ops_target(self, rank)?;
                }
            }
            self.wait_for("unlock_all", |st| Ok(st.table.iter().all(|t| t.is_idle())))?;
            {
                let mut st = self.lock_state();
                for rank in st.table.ranks() {
                    let held = st
                        .table
                        .get(rank)
                        .is_some_and(|t| t.state == TargetState::LockGranted);
                    if held && !window_protocol && WinState::native_locks(self, rank) {
                        self.engine.transport.unlock(self.id, rank, false)?;
                    }
                    st.free_target(self, rank);
                }
                // Released (or being released) from here on: a failure below must not
                // release them twice.
                st.epoch = WindowEpoch::Unset;
                if window_protocol && nocheck != Some(true) {
                    // Window protocol: every target was locked; unlock them all.
                    for rank in 0..self.engine.size as Rank {
                        if WinState::native_locks(self, rank) {
                            self.engine.transport.unlock(self.id, rank, false)?;
                        } else {
                            st.window_acks += 1;
                            st.send_control(self, rank, Kind::Done, flags::UNLOCK, 0)?;
                        }
                    }
                }
            }
            self.wait_for("unlock_all", |st| Ok(st.window_acks == 0))?;
            let mut st = self.lock_state();
            st.epoch = WindowEpoch::Unset;
            st.restoring = false;
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }

    // ----- FLUSH ---------------------------------------------------------------------------

    fn check_passive(&self, st: &WinState, target: Option<Rank>) -> Result<()> {
        match (&st.epoch, target) {
            (WindowEpoch::PerTarget, Some(t)) if !st.locks.contains_key(&t) => {
                Err(UsageError::NotLocked { target: t }.into())
            }
            (WindowEpoch::PerTarget, _) => Ok(()),
            (e, _) if e.is_lock_all() => Ok(()),
            (e, _) => Err(UsageError::EpochConflict {
                call: "flush",
                state: e.name(),
            }
            .into()),
        }
    }

    fn flush(&self, target: Option<Rank>, remote: bool) -> Result<()> {
        // In the library: the progress agent stays away (also when the hot path below
        // returns at once).
        self.engine.activity.bump();
        if let Some(t) = target {
            self.check_rank(t)?;
        }
        let done = |t: &TargetElem| {
            if remote {
                t.ops_complete() && t.acks_awaited == 0 && t.sync == SyncFlag::None
            } else {
                t.ops_complete()
            }
        };
        // Hot path: nothing of this target is queued, under way or awaited.
        {
            let mut st = self.lock_state();
            self.check_passive(&st, target)?;
            let settled = match target {
                Some(t) => st
                    .table
                    .get(t)
                    .is_none_or(|e| done(e) && e.am_since_done == 0 || !remote && done(e)),
                None => false,
            };
            if settled && st.deferred.is_none() && st.outbox.is_empty() {
                drop(st);
                self.flush_memory_sync();
                return Ok(());
            }
            let all;
            let ranks: &[Rank] = match &target {
                Some(t) => std::slice::from_ref(t),
                None => {
                    all = st.table.ranks();
                    &all
                }
            };
            for &rank in ranks {
                let Some(t) = st.table.get_mut(rank) else {
                    continue;
                };
                if remote
                    && t.sync == SyncFlag::None
                    && (t.am_since_done > 0 || t.pending.iter().any(|o| !o.native))
                {
                    t.sync = SyncFlag::Flush;
                }
                if !remote && !t.pending.is_empty() {
                    st.force_issue(self, rank)?;
                } else {
                    st.issue_ops_target(self, rank)?;
                }
            }
        }
        let mut deferred = None;
        self.wait_issued("flush", |st| {
            // Locks still being acquired must be granted before their ops can complete.
            let waiting = |t: &TargetElem| {
                t.state == TargetState::LockCalled
                    && !t.pending.is_empty()
                    && target.is_none_or(|x| x == t.rank)
            };
            let any_waiting = match target {
                Some(r) => st.table.get(r).is_some_and(waiting),
                None => st.table.iter().any(waiting),
            };
            if any_waiting {
                for rank in st.table.ranks() {
                    if st.table.get(rank).is_some_and(waiting) {
                        let t = st.table.get_mut(rank).expect("listed");
                        if t.sync == SyncFlag::None {
                            t.sync = SyncFlag::Flush;
                        }
                        st.issue_ops_target(self, rank)?;
                    }
                }
            }
            let finished = match target {
                Some(r) => st.table.get(r).is_none_or(done),
                None => st.table.iter().all(done),
            };
            if finished {
                deferred = st.deferred.take();
            }
            Ok(finished)
        })?;
        self.flush_memory_sync();
        deferred.map_or(Ok(()), Err)
    }

    /// Seed 004, RMA+shm, passive row: MEM_SYNC in WIN_FLUSH. Only where some target
    /// shares memory with us: a network backend's completions already say the data is at
    /// the target, and no load or store of a peer meets ours.
    fn flush_memory_sync(&self) {
        if self.shares_memory {
            self.engine.transport.memory_sync();
        }
    }
}

/// A window of elements of type `T`, spanning every rank of the engine.
///
/// Operations are methods of the window; each checks at run time that an epoch grants
/// access to its target and that the target range lies in the target's window, and
/// returns a typed [`UsageError`] otherwise. Origin data is only borrowed during the
/// call (copied if the op must wait); fetched data is only reachable through a
/// [`Request`] once complete. A window is `Send + Sync`: operations, fences and flushes
/// may come from several threads (seed 004, "RMA + threads").
///
/// Fence epochs:
/// ```
/// use rma_core::{sim, Assert};
/// sim::run(3, sim::Profile::ActiveMessages, 7, |engine| {
///     let (me, n) = (engine.rank(), engine.size() as u32);
///     let win = engine.allocate::<u64>(n as usize)?;
///     win.fence(Assert::NOPRECEDE)?;
///     for t in 0..n {
///         win.put(&[me as u64 + 100], t, me as u64)?; // my slot in every window
///     }
///     win.fence(Assert::NOSUCCEED)?;
///     assert_eq!(win.local_to_vec(), vec![100, 101, 102]);
///     win.free()?;
///     Ok(())
/// }).unwrap();
/// ```
pub struct Window<T: Element> {
    pub(crate) shared: Arc<WindowShared>,
    pub(crate) _elem: PhantomData<fn() -> T>,
}

impl<T: Element> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("id", &self.shared.id)
            .field("kind", &self.shared.kind)
            .finish()
    }
}

fn to_vec<T: Element>(bytes: Fetched) -> Vec<T> {
    bytemuck::pod_collect_to_vec(&bytes)
}

fn to_one<T: Element>(bytes: Fetched) -> T {
    // Replies are checked against their request's length when they arrive; a short one
    // (never expected here) reads as zero rather than panicking.
    let mut one = T::zeroed();
    let out: &mut [u8] = bytemuck::bytes_of_mut(&mut one);
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
    one
}

impl<T: Element> Window<T> {
    const SIZE: usize = std::mem::size_of::<T>();

    fn check_op(op: AccOp) -> Result<()> {
        if op.valid_for(T::DATATYPE) {
            Ok(())
        } else {
            Err(UsageError::OpNotForType {
                op,
                datatype: T::DATATYPE,
            }
            .into())
        }
    }

    /// The pieces an op goes in when it travels as active messages and one message
    /// cannot carry it (request, or reply for a get): each piece a run of whole
    /// elements (so accumulates stay atomic per element, as MPI asks), whole blocks of
    /// the target layout where a block fits, else parts of one block. `None`: one
    /// message (or the native path) takes it whole.
    #[inline]
    fn pieces(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
    ) -> Result<Option<Vec<Piece>>> {
        if extent.bytes() <= SPLIT_ABOVE {
            return Ok(None);
        }
        self.pieces_of_large(kind, op, target, disp, layout, extent)
    }

    #[inline(never)]
    fn pieces_of_large(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
    ) -> Result<Option<Vec<Piece>>> {
        let w = &self.shared;
        let max = w.caps(target).max_message as u64;
        let native = w.native_allowed(kind, op, T::DATATYPE, target, extent);
        if native || extent.bytes().saturating_add(64) <= max {
            return Ok(None);
        }
        if w.kind == WindowKind::Dynamic && extent.bytes() > DYNAMIC_SPLIT_MAX {
            // Only the target knows its regions: a bound here, instead of millions of
            // pieces for a count no region holds.
            return Err(UsageError::TooLarge {
                what: "an op on a dynamic window past 1 GiB",
            }
            .into());
        }
        // Room for the header, token, op and extent, with a margin.
        let per_piece = (max.saturating_sub(128) as usize / Self::SIZE).max(1);
        let disp_unit = match w.kind {
            WindowKind::Dynamic => 1,
            _ => w.remote[target as usize].disp_unit.max(1) as usize,
        };
        if !Self::SIZE.is_multiple_of(disp_unit) {
            // A piece could not start on a displacement: refuse as before.
            return Err(TransportError::Unsupported(
                "active message larger than the transport carries",
            )
            .into());
        }
        let step = (Self::SIZE / disp_unit) as u64;
        let at = |elements: usize| -> Result<u64> {
            (elements as u64)
                .checked_mul(step)
                .and_then(|o| disp.checked_add(o))
                .ok_or_else(|| UsageError::TooLarge { what: "the layout" }.into())
        };
        let mut pieces = Vec::new();
        if layout.block <= per_piece {
            let blocks = (per_piece / layout.block.max(1)).max(1);
            let mut i = 0;
            while i < layout.count {
                let k = blocks.min(layout.count - i);
                let sub = if k == 1 {
                    Layout::contiguous(layout.block)
                } else {
                    Layout::strided(k, layout.block, layout.stride)
                };
                pieces.push(Piece {
                    data_at: i * layout.block,
                    layout: sub,
                    disp: at(i * layout.stride)?,
                });
                i += k;
            }
        } else {
            for i in 0..layout.count {
                let mut j = 0;
                while j < layout.block {
                    let n = per_piece.min(layout.block - j);
                    pieces.push(Piece {
                        data_at: i * layout.block + j,
                        layout: Layout::contiguous(n),
                        disp: at(i * layout.stride + j)?,
                    });
                    j += n;
                }
            }
        }
        w.counters.split(pieces.len());
        w.engine.stats.split(pieces.len());
        Ok(Some(pieces))
    }

    /// Posts the pieces of an op (see [`pieces`](Self::pieces)) with `packed`'s elements
    /// (none for a get); the request of the whole completes when every piece has.
    fn post_pieces(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        pieces: Vec<Piece>,
        packed: &[T],
        wants_result: bool,
    ) -> Result<Vec<Request<Fetched>>> {
        let mut requests = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let extent = self
                .shared
                .extent(target, piece.disp, piece.layout, Self::SIZE)?;
            let data: &[T] = if packed.is_empty() {
                &[]
            } else {
                &packed[piece.data_at..piece.data_at + piece.layout.elements()]
            };
            let posted = self.shared.post(OpDesc {
                kind,
                target,
                extent,
                op,
                datatype: T::DATATYPE,
                data: bytemuck::cast_slice(data),
                wants_result,
                into: None,
            })?;
            if wants_result {
                requests.push(self.request(posted, target, |bytes| bytes));
            }
        }
        Ok(requests)
    }

    fn request<R>(&self, posted: Posted, target: Rank, convert: fn(Fetched) -> R) -> Request<R> {
        match posted {
            Posted::Done(data) => Request::ready(data.unwrap_or_default(), convert),
            Posted::Later(Some(state)) => Request::new(state, self.shared.clone(), target, convert),
            Posted::Later(None) => Request::ready(Fetched::default(), convert),
        }
    }

    /// The window's kind.
    pub fn kind(&self) -> WindowKind {
        self.shared.kind
    }

    /// Puts `data` at element displacement `disp` of `target`'s window.
    pub fn put(&self, data: &[T], target: Rank, disp: u64) -> Result<()> {
        // Contiguous on both sides: nothing to gather.
        let layout = Layout::contiguous(data.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(p) = self.pieces(OpKind::Put, None, target, disp, layout, extent)? {
            return self
                .post_pieces(OpKind::Put, None, target, p, data, false)
                .map(drop);
        }
        self.post_put(data, target, extent)
    }

    /// Posts a put of the packed `data` to `extent` at `target`.
    #[inline]
    fn post_put(&self, data: &[T], target: Rank, extent: Extent) -> Result<()> {
        self.shared
            .post(OpDesc {
                kind: OpKind::Put,
                target,
                extent,
                op: None,
                datatype: T::DATATYPE,
                data: bytemuck::cast_slice(data),
                wants_result: false,
                into: None,
            })
            .map(drop)
    }

    /// Puts the elements `origin` selects from `data` into the elements `target_layout`
    /// selects at `disp` (both layouts must describe the same number of elements).
    pub fn put_strided(
        &self,
        data: &[T],
        origin: Layout,
        target: Rank,
        disp: u64,
        target_layout: Layout,
    ) -> Result<()> {
        let packed = gather(data, origin, target_layout)?;
        let extent = self
            .shared
            .extent(target, disp, target_layout, Self::SIZE)?;
        if let Some(p) = self.pieces(OpKind::Put, None, target, disp, target_layout, extent)? {
            return self
                .post_pieces(OpKind::Put, None, target, p, &packed, false)
                .map(drop);
        }
        self.post_put(&packed, target, extent)
    }

    /// A put whose local completion can be waited on (MPI_Rput).
    pub fn rput(&self, data: &[T], target: Rank, disp: u64) -> Result<Request<()>> {
        let extent =
            self.shared
                .extent(target, disp, Layout::contiguous(data.len()), Self::SIZE)?;
        let posted = self.shared.post(OpDesc {
            kind: OpKind::Put,
            target,
            extent,
            op: None,
            datatype: T::DATATYPE,
            data: bytemuck::cast_slice(data),
            wants_result: true,
            into: None,
        })?;
        Ok(self.request(posted, target, |_| ()))
    }

    /// Gets `count` elements at `disp` of `target`'s window. The data is the request's
    /// value; the request completes no later than the epoch's next flush or end.
    pub fn get(&self, target: Rank, disp: u64, count: usize) -> Result<Request<Vec<T>>> {
        self.get_strided(target, disp, Layout::contiguous(count))
    }

    /// Request-based get (MPI_Rget); the same as [`get`](Self::get).
    pub fn rget(&self, target: Rank, disp: u64, count: usize) -> Result<Request<Vec<T>>> {
        self.get(target, disp, count)
    }

    /// Gets the elements `layout` selects at `disp`, packed.
    pub fn get_strided(&self, target: Rank, disp: u64, layout: Layout) -> Result<Request<Vec<T>>> {
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(p) = self.pieces(OpKind::Get, None, target, disp, layout, extent)? {
            let parts = self.post_pieces(OpKind::Get, None, target, p, &[], true)?;
            return Ok(Request::joined(parts, to_vec::<T>));
        }
        // Contiguous gets land straight in the result where the backend completes them in
        // the call: one buffer, one copy.
        let mut out = if extent.count <= 1 {
            zeroed_vec::<T>(layout.elements())?
        } else {
            Vec::new()
        };
        let into = (extent.count <= 1)
            .then(|| std::cell::RefCell::new(bytemuck::cast_slice_mut(out.as_mut_slice())));
        let posted = self.shared.post(OpDesc {
            kind: OpKind::Get,
            target,
            extent,
            op: None,
            datatype: T::DATATYPE,
            data: &[],
            wants_result: true,
            into,
        })?;
        Ok(match posted {
            Posted::Done(None) => Request::value(out),
            other => self.request(other, target, to_vec::<T>),
        })
    }

    /// Gets `buf.len()` elements at `disp` of `target`'s window into `buf`. The buffer
    /// stays borrowed by the returned [`GetInto`] until [`GetInto::wait`], so it cannot be
    /// read before the data is there. Where the backend completes the get in the call
    /// (shared memory) the data lands in `buf` directly, with no copy of ours.
    pub fn get_into<'b>(
        &self,
        target: Rank,
        disp: u64,
        buf: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        let layout = Layout::contiguous(buf.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(p) = self.pieces(OpKind::Get, None, target, disp, layout, extent)? {
            let parts = self.post_pieces(OpKind::Get, None, target, p, &[], true)?;
            let pending = Some(Request::joined(parts, |bytes| bytes));
            return Ok(GetInto { buf, pending });
        }
        let posted = self.shared.post(OpDesc {
            kind: OpKind::Get,
            target,
            extent,
            op: None,
            datatype: T::DATATYPE,
            data: &[],
            wants_result: true,
            into: Some(std::cell::RefCell::new(bytemuck::cast_slice_mut(&mut *buf))),
        })?;
        let pending = match posted {
            Posted::Done(None) => None,
            other => Some(self.request(other, target, |bytes| bytes)),
        };
        Ok(GetInto { buf, pending })
    }

    /// Accumulates `data` into `target`'s window with `op`, element-wise and atomically
    /// with respect to other accumulates.
    pub fn accumulate(&self, data: &[T], op: AccOp, target: Rank, disp: u64) -> Result<()> {
        self.accumulate_strided(
            data,
            Layout::contiguous(data.len()),
            op,
            target,
            disp,
            Layout::contiguous(data.len()),
        )
    }

    /// Strided accumulate.
    pub fn accumulate_strided(
        &self,
        data: &[T],
        origin: Layout,
        op: AccOp,
        target: Rank,
        disp: u64,
        target_layout: Layout,
    ) -> Result<()> {
        Self::check_op(op)?;
        let packed = gather(data, origin, target_layout)?;
        let extent = self
            .shared
            .extent(target, disp, target_layout, Self::SIZE)?;
        let kind = OpKind::Accumulate;
        if let Some(p) = self.pieces(kind, Some(op), target, disp, target_layout, extent)? {
            return self
                .post_pieces(kind, Some(op), target, p, &packed, false)
                .map(drop);
        }
        self.shared
            .post(OpDesc {
                kind: OpKind::Accumulate,
                target,
                extent,
                op: Some(op),
                datatype: T::DATATYPE,
                data: bytemuck::cast_slice(&packed),
                wants_result: false,
                into: None,
            })
            .map(drop)
    }

    /// Request-based accumulate (MPI_Raccumulate): completes locally.
    pub fn raccumulate(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
    ) -> Result<Request<()>> {
        Self::check_op(op)?;
        let extent =
            self.shared
                .extent(target, disp, Layout::contiguous(data.len()), Self::SIZE)?;
        let posted = self.shared.post(OpDesc {
            kind: OpKind::Accumulate,
            target,
            extent,
            op: Some(op),
            datatype: T::DATATYPE,
            data: bytemuck::cast_slice(data),
            wants_result: true,
            into: None,
        })?;
        Ok(self.request(posted, target, |_| ()))
    }

    /// Atomically fetches the target elements and accumulates `data` into them; with
    /// [`AccOp::NoOp`] it is an atomic read of `data.len()` elements.
    pub fn get_accumulate(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
    ) -> Result<Request<Vec<T>>> {
        Self::check_op(op)?;
        let layout = Layout::contiguous(data.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        let kind = OpKind::GetAccumulate;
        if let Some(p) = self.pieces(kind, Some(op), target, disp, layout, extent)? {
            let parts = self.post_pieces(kind, Some(op), target, p, data, true)?;
            return Ok(Request::joined(parts, to_vec::<T>));
        }
        let posted = self.shared.post(OpDesc {
            kind: OpKind::GetAccumulate,
            target,
            extent,
            op: Some(op),
            datatype: T::DATATYPE,
            data: bytemuck::cast_slice(data),
            wants_result: true,
            into: None,
        })?;
        Ok(self.request(posted, target, to_vec::<T>))
    }

    /// Request-based get_accumulate (MPI_Rget_accumulate); the same as
    /// [`get_accumulate`](Self::get_accumulate).
    pub fn rget_accumulate(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
    ) -> Result<Request<Vec<T>>> {
        self.get_accumulate(data, op, target, disp)
    }

    /// Atomic fetch-and-op on one element; the request's value is the old value.
    pub fn fetch_and_op(&self, value: T, op: AccOp, target: Rank, disp: u64) -> Result<Request<T>> {
        Self::check_op(op)?;
        let extent = self
            .shared
            .extent(target, disp, Layout::contiguous(1), Self::SIZE)?;
        let posted = self.shared.post(OpDesc {
            kind: OpKind::GetAccumulate,
            target,
            extent,
            op: Some(op),
            datatype: T::DATATYPE,
            data: bytemuck::bytes_of(&value),
            wants_result: true,
            into: None,
        })?;
        Ok(self.request(posted, target, to_one::<T>))
    }

    /// Atomic compare-and-swap of one element: `swap` replaces it if it equals `compare`
    /// (bitwise). The request's value is the old value.
    pub fn compare_and_swap(
        &self,
        compare: T,
        swap: T,
        target: Rank,
        disp: u64,
    ) -> Result<Request<T>> {
        if !T::DATATYPE.is_integer() {
            // MPI-4.1 12.3.4: integer, logical and byte types only (equality of floats is
            // not bitwise: -0.0 == 0.0, NaN != NaN).
            return Err(UsageError::Unsupported {
                what: "compare_and_swap on floating-point elements (MPI allows integer \
                       types only)",
            }
            .into());
        }
        let extent = self
            .shared
            .extent(target, disp, Layout::contiguous(1), Self::SIZE)?;
        let mut data = bytemuck::bytes_of(&compare).to_vec();
        data.extend_from_slice(bytemuck::bytes_of(&swap));
        let posted = self.shared.post(OpDesc {
            kind: OpKind::CompareAndSwap,
            target,
            extent,
            op: None,
            datatype: T::DATATYPE,
            data: &data,
            wants_result: true,
            into: None,
        })?;
        Ok(self.request(posted, target, to_one::<T>))
    }

    /// Fence (MPI_Win_fence). Ends the previous fence epoch, completing each of its
    /// operations at its target (seed 001), and starts the next unless
    /// [`Assert::NOSUCCEED`]. With [`Assert::NOPRECEDE`] it does not block.
    pub fn fence(&self, assert: Assert) -> Result<()> {
        self.shared.fence(assert)
    }

    /// Starts an access epoch to `group` (MPI_Win_start).
    pub fn start(&self, group: &[Rank], assert: Assert) -> Result<()> {
        self.shared.start(group, assert)
    }

    /// Ends the access epoch of [`start`](Self::start) (MPI_Win_complete).
    pub fn complete(&self) -> Result<()> {
        self.shared.complete()
    }

    /// Starts an exposure epoch to `group` (MPI_Win_post).
    pub fn post(&self, group: &[Rank], assert: Assert) -> Result<()> {
        self.shared.post_exposure(group, assert)
    }

    /// Waits for every origin of the exposure epoch to complete (MPI_Win_wait).
    pub fn wait(&self) -> Result<()> {
        self.shared.wait_exposure()
    }

    /// Whether the exposure epoch is over, ending it if so (MPI_Win_test).
    pub fn test(&self) -> Result<bool> {
        self.shared.test_exposure()
    }

    /// Locks `target`'s window (MPI_Win_lock).
    pub fn lock(&self, lock_type: LockType, target: Rank, assert: Assert) -> Result<()> {
        self.shared.lock(lock_type, target, assert)
    }

    /// Completes every op to `target` at the target and releases the lock (MPI_Win_unlock).
    pub fn unlock(&self, target: Rank) -> Result<()> {
        self.shared.unlock(target)
    }

    /// Shared lock on every rank's window (MPI_Win_lock_all).
    pub fn lock_all(&self, assert: Assert) -> Result<()> {
        self.shared.lock_all(assert)
    }

    /// Ends a [`lock_all`](Self::lock_all) epoch (MPI_Win_unlock_all).
    pub fn unlock_all(&self) -> Result<()> {
        self.shared.unlock_all()
    }

    /// Completes every op to `target` at the target (MPI_Win_flush).
    pub fn flush(&self, target: Rank) -> Result<()> {
        self.shared.flush(Some(target), true)
    }

    /// Completes every op at its target (MPI_Win_flush_all).
    pub fn flush_all(&self) -> Result<()> {
        self.shared.flush(None, true)
    }

    /// Completes every op to `target` locally: origin buffers reusable, fetched data
    /// available (MPI_Win_flush_local).
    pub fn flush_local(&self, target: Rank) -> Result<()> {
        self.shared.flush(Some(target), false)
    }

    /// Local completion of every op (MPI_Win_flush_local_all).
    pub fn flush_local_all(&self) -> Result<()> {
        self.shared.flush(None, false)
    }

    /// Synchronizes the public and private copies of this window (MPI_Win_sync): a
    /// full memory barrier.
    pub fn sync(&self) -> Result<()> {
        self.shared.engine.transport.memory_sync();
        Ok(())
    }

    /// Reads this process's own window memory (outside epochs, or under a self lock).
    pub fn read_local(&self, disp: usize, out: &mut [T]) -> Result<()> {
        let mem = self.shared.memory.read().unwrap_or_else(|e| e.into_inner());
        let Memory::Static(seg) = &*mem else {
            return Err(UsageError::Unsupported {
                what: "read_local on a dynamic window",
            }
            .into());
        };
        let off = disp.saturating_mul(Self::SIZE);
        let len = std::mem::size_of_val(out);
        if off.checked_add(len).is_none_or(|end| end > seg.len()) {
            return Err(UsageError::OutOfBounds {
                target: self.shared.engine.rank,
                offset: off as u64,
                len: len as u64,
                window_len: seg.len() as u64,
            }
            .into());
        }
        seg.read(off, bytemuck::cast_slice_mut(out));
        Ok(())
    }

    /// Writes this process's own window memory.
    pub fn write_local(&self, disp: usize, data: &[T]) -> Result<()> {
        let mem = self.shared.memory.read().unwrap_or_else(|e| e.into_inner());
        let Memory::Static(seg) = &*mem else {
            return Err(UsageError::Unsupported {
                what: "write_local on a dynamic window",
            }
            .into());
        };
        let off = disp.saturating_mul(Self::SIZE);
        let len = std::mem::size_of_val(data);
        if off.checked_add(len).is_none_or(|end| end > seg.len()) {
            return Err(UsageError::OutOfBounds {
                target: self.shared.engine.rank,
                offset: off as u64,
                len: std::mem::size_of_val(data) as u64,
                window_len: seg.len() as u64,
            }
            .into());
        }
        seg.write(off, bytemuck::cast_slice(data));
        Ok(())
    }

    /// A copy of this process's whole window (empty for dynamic windows).
    pub fn local_to_vec(&self) -> Vec<T> {
        let mem = self.shared.memory.read().unwrap_or_else(|e| e.into_inner());
        match &*mem {
            Memory::Static(seg) => {
                let mut v = vec![T::zeroed(); seg.len() / Self::SIZE];
                seg.read(0, bytemuck::cast_slice_mut(&mut v));
                v
            }
            Memory::Dynamic(_) => Vec::new(),
        }
    }

    /// Elements in `rank`'s window.
    pub fn len_of(&self, rank: Rank) -> Result<usize> {
        self.shared.check_rank(rank)?;
        let r = &self.shared.remote[rank as usize];
        Ok(r.len as usize / Self::SIZE)
    }

    /// For windows from `allocate_shared`: the address and byte length of `rank`'s
    /// segment in this process, for direct load/store between synchronizations.
    pub fn shared_query(&self, rank: Rank) -> Result<(usize, usize)> {
        self.shared.check_rank(rank)?;
        if self.shared.kind != WindowKind::Shared {
            return Err(UsageError::Unsupported {
                what: "shared_query on a window not from allocate_shared",
            }
            .into());
        }
        self.shared
            .engine
            .transport
            .shared_base(self.shared.id, rank)
            .map(|base| (base, self.shared.remote[rank as usize].len as usize))
            .ok_or_else(|| {
                UsageError::Unsupported {
                    what: "peer memory not shared with this process",
                }
                .into()
            })
    }

    /// Attaches `memory` to a dynamic window; returns the address peers use as
    /// displacement (MPI_Win_attach + MPI_Get_address).
    pub fn attach(&self, memory: Vec<T>) -> Result<u64> {
        if self.shared.kind != WindowKind::Dynamic {
            return Err(UsageError::Unsupported {
                what: "attach on a window not from create_dynamic",
            }
            .into());
        }
        let seg = self.shared.engine.transport.expose(Box::new(memory))?;
        let id = {
            let mut n = self
                .shared
                .next_region
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *n += 1;
            *n
        };
        let mut mem = self
            .shared
            .memory
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if let Memory::Dynamic(regions) = &mut *mem {
            regions.push((id, seg));
        }
        Ok(u64::from(id) << REGION_SHIFT)
    }

    /// Detaches the region at `address` and gives its memory back.
    pub fn detach(&self, address: u64) -> Result<Vec<T>> {
        let id = (address >> REGION_SHIFT) as u32;
        let mut mem = self
            .shared
            .memory
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let Memory::Dynamic(regions) = &mut *mem else {
            return Err(UsageError::NotAttached.into());
        };
        let i = regions
            .iter()
            .position(|(r, _)| *r == id)
            .ok_or(UsageError::NotAttached)?;
        let (_, seg) = regions.swap_remove(i);
        user_vec(seg).ok_or_else(|| UsageError::NotAttached.into())
    }

    /// This window's counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Frees the window (collective, MPI_Win_free). Every epoch must be closed. Gives
    /// back the memory of a window from `create`.
    ///
    /// On failure the window comes back in the [`FreeError`]: an epoch still open
    /// ([`UsageError::EpochOpen`]) can be closed and the free tried again. With `?` into
    /// [`Error`] the window is dropped instead (which releases the locks it holds and
    /// tells the peers it is gone).
    pub fn free(self) -> std::result::Result<Option<Vec<T>>, FreeError<T>> {
        match self.free_inner() {
            Ok(memory) => Ok(memory),
            Err(error) => Err(FreeError {
                error,
                window: self,
            }),
        }
    }

    fn free_inner(&self) -> Result<Option<Vec<T>>> {
        let w = &self.shared;
        {
            let st = w.lock_state();
            if !WindowShared::no_access_epoch(&st)
                || st.target.exposure.is_some()
                || !st.locks.is_empty()
            {
                return Err(UsageError::EpochOpen.into());
            }
        }
        // Outstanding barriers first; then every rank tells every other that it frees the
        // window, with the barriers it started on it: once all have said so with the same
        // count, no peer needs this window any more (each said it last, after everything
        // else it sent on it). A peer in another collective (a fence) or with another
        // count is a mismatch, on both sides.
        w.wait_for("free", |st| {
            Ok(st.barrier.is_none() && st.background_barriers.is_empty() && st.outbox.is_empty())
        })?;
        let mine = {
            let mut st = w.lock_state();
            let mine = st.barrier_seq;
            st.send_departure(w, Departure::Free, mine)?;
            mine
        };
        let (me, size) = (w.engine.rank as usize, w.engine.size);
        w.wait_for("free", |st| {
            let freeing = &st.departures.freeing;
            let all = size == 1
                || (freeing.len() == size && (0..size).all(|r| r == me || freeing[r].is_some()));
            if !all || !st.outbox.is_empty() {
                return Ok(false);
            }
            match (0..size).find(|&r| r != me && freeing[r] != Some(mine)) {
                None => Ok(true),
                Some(rank) => {
                    st.send_departure(w, Departure::Mismatch, Departure::call_code("free"))?;
                    Err(PeerError::Mismatch {
                        rank: rank as Rank,
                        call: "free",
                        theirs: "fence",
                    }
                    .into())
                }
            }
        })?;
        w.freed.store(true, std::sync::atomic::Ordering::Relaxed);
        w.engine.unregister(w.id);
        let mut st = w.lock_state();
        let WinState {
            op_pool,
            target_pool,
            ..
        } = &mut *st;
        op_pool.release(&w.engine.op_pool);
        target_pool.release(&w.engine.target_pool);
        drop(st);
        let mem = std::mem::replace(
            &mut *w.memory.write().unwrap_or_else(|e| e.into_inner()),
            Memory::Dynamic(Vec::new()),
        );
        let kept = w.user_copy.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (w.kind, mem, kept) {
            (WindowKind::Create, Memory::Static(seg), Some(mut user)) => {
                // The window's bytes go back into the user's buffer.
                seg.read(0, user.bytes_mut());
                Ok(user.into_any().downcast::<Vec<T>>().ok().map(|b| *b))
            }
            (WindowKind::Create, Memory::Static(seg), None) => Ok(user_vec(seg)),
            _ => Ok(None),
        }
    }
}

/// A [`Window::free`] that failed, with the window given back.
///
/// ```
/// use rma_core::{sim, Assert, Error, UsageError};
/// sim::run(1, sim::Profile::SharedMemory, 1, |engine| {
///     let win = engine.allocate::<u64>(4)?;
///     win.lock_all(Assert::NONE)?;
///     let refused = win.free().unwrap_err();
///     assert_eq!(refused.error, Error::Usage(UsageError::EpochOpen));
///     let win = refused.window; // close the epoch, then free again
///     win.unlock_all()?;
///     win.free()?;
///     Ok(())
/// }).unwrap();
/// ```
pub struct FreeError<T: Element> {
    /// Why the window was not freed.
    pub error: Error,
    /// The window, as it was.
    pub window: Window<T>,
}

impl<T: Element> std::fmt::Debug for FreeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreeError")
            .field("error", &self.error)
            .field("window", &self.window.shared.id)
            .finish()
    }
}

impl<T: Element> std::fmt::Display for FreeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "free of window {} failed: {}",
            self.window.shared.id, self.error
        )
    }
}

impl<T: Element> std::error::Error for FreeError<T> {}

impl<T: Element> From<FreeError<T>> for Error {
    /// The error alone; the window is dropped.
    fn from(e: FreeError<T>) -> Error {
        e.error
    }
}

/// A get into a caller's buffer ([`Window::get_into`]); the buffer is readable again
/// once [`wait`](GetInto::wait) returns it.
#[must_use = "the buffer is only filled once the get is waited on"]
pub struct GetInto<'b, T: Element> {
    buf: &'b mut [T],
    pending: Option<Request<Fetched>>,
}

impl<T: Element> std::fmt::Debug for GetInto<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetInto")
            .field("len", &self.buf.len())
            .field("done", &self.pending.is_none())
            .finish()
    }
}

impl<'b, T: Element> GetInto<'b, T> {
    /// Blocks (making progress) until the data is in the buffer, and gives it back.
    #[inline]
    pub fn wait(self) -> Result<&'b mut [T]> {
        if let Some(r) = self.pending {
            let bytes = r.wait()?;
            let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut *self.buf);
            if bytes.len() != dst.len() {
                return Err(TransportError::Failed("get returned a short reply".into()).into());
            }
            dst.copy_from_slice(&bytes);
        }
        Ok(self.buf)
    }
}

impl<T: Element> Drop for Window<T> {
    /// A window dropped without [`free`](Window::free) leaves the engine's registry (no
    /// collective, no message): peers that still address it get their packets refused.
    fn drop(&mut self) {
        let w = &self.shared;
        if !w.freed.load(std::sync::atomic::Ordering::Relaxed) && w.engine.size > 1 {
            // Peers waiting in a collective on this window learn that it will never
            // complete. Best effort, bounded: what the transport cannot take now is given
            // a few progress passes, then dropped with the window.
            let mut st = w.lock_state();
            // Locks it holds in shared memory go now; locks held by message are revoked
            // by their targets when the departure below reaches them.
            st.release_native_locks(w);
            let seq = st.barrier_seq;
            if st.send_departure(w, Departure::Abandoned, seq).is_ok() {
                for _ in 0..1000 {
                    if st.outbox.is_empty() || st.flush_outbox(w).is_err() {
                        break;
                    }
                    drop(st);
                    let _ = w.engine.progress();
                    st = w.lock_state();
                }
            }
        }
        w.engine.unregister(w.id);
    }
}

/// `n` zeroed elements, or the typed error for a count no memory can hold (a get of a
/// dynamic window is bounded only at the target).
fn zeroed_vec<T: Element>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| UsageError::TooLarge { what: "the result" })?;
    v.resize(n, T::zeroed());
    Ok(v)
}

fn user_vec<T: Element>(seg: Arc<dyn Segment>) -> Option<Vec<T>> {
    let user: Box<dyn UserMemory> = seg.into_user_memory()?;
    user.into_any().downcast::<Vec<T>>().ok().map(|b| *b)
}

/// Whether `op` may be the single short op of its epoch (lock, op and unlock in one
/// message, its answer in one): both what it carries and what it fetches are short.
fn short_op(op: &OpElem, threshold: usize) -> bool {
    op.data.len() <= threshold && op.extent.bytes() <= threshold as u64
}

/// One active message of an op too large for one: a run of the packed elements (from
/// `data_at`) and where they go.
#[derive(Debug, Clone, Copy)]
struct Piece {
    data_at: usize,
    layout: Layout,
    disp: u64,
}

/// Packs the elements `origin` selects from `data`, checking it matches `target`.
fn gather<T: Element>(
    data: &[T],
    origin: Layout,
    target: Layout,
) -> Result<std::borrow::Cow<'_, [T]>> {
    if !origin.valid()
        || !target.valid()
        || origin.elements() != target.elements()
        || origin.span().is_none_or(|s| s > data.len())
    {
        return Err(UsageError::BadLayout.into());
    }
    if origin.count <= 1 {
        return Ok(std::borrow::Cow::Borrowed(&data[..origin.elements()]));
    }
    let mut out = Vec::with_capacity(origin.elements());
    for i in 0..origin.count {
        out.extend_from_slice(&data[i * origin.stride..i * origin.stride + origin.block]);
    }
    Ok(std::borrow::Cow::Owned(out))
}
