//! Windows: the origin side of every operation and synchronization (seed 004's
//! algorithms for FENCE, PSCW, LOCK, LOCK_ALL and FLUSH), and the dispatch of incoming
//! packets to the [target side](crate::target).
//!
//! All state of one window sits behind one mutex ([`WinState`]). Blocking calls never
//! hold it while they wait: each turn of a wait loop takes it, makes progress on this
//! window, checks its condition and lets go, then drives the engine's global progress.
//!
//! One file per concept of the design: this one holds the types ([`WindowShared`],
//! [`WinState`] and their parts); [`rma_op`] posts an op (RMA_OP); [`issue`] puts ops
//! and control on the wire (ISSUE_OPS); [`elements`] takes and gives back op and target
//! elements (CLEANUP_OPS, RESTORE); [`access`] says when ops to a target may go and
//! runs one window's progress; [`incoming`] handles packets and completions; [`direct`]
//! lets ops toward granted, settled targets past the state (shared memory); [`shared`]
//! waits and checks; [`fence`], [`pscw`], [`lock`], [`lock_all`] and [`flush`] are the
//! synchronization algorithms; [`api`] is the public [`Window`].

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

pub(crate) use rma_sync::{BiasedGuard as StateGuard, BiasedLock as StateLock};

use crate::barrier::Dissemination;
use crate::comm::Comm;
use crate::datatype::{AccOp, DataType, Element};
use crate::engine::{EngineShared, BLAME_MISMATCH};
use crate::epoch::{Assert, LockInfo, LockType, PscwAccess, TargetState, WindowEpoch};
use crate::error::{Error, PeerError, Result, TransportError, UsageError};
use crate::group::Group;
use crate::op_table::{ByteSpan, OpElem, OpKind, OpTable, SyncFlag, TargetElem};
use crate::per_rank::PerRank;
use crate::pool::LocalPool;
use crate::request::{GetBuffer, PutBuffer, Request, RequestState};
use crate::stats::{Counters, Stats};
use crate::target::{Memory, Reply, TargetSide, Waiter};
use crate::transport::{
    Fetched, Issued, NativeAtomic, Notice, RemoteSegment, Segment, UserMemory, NOTICE_LIMIT,
};
use crate::wire::{self, flags, Body, Departure, Encoder, Extent, Kind, Packet};
use crate::Rank;

/// The span of a synchronization call (`RMA_LOG=rma_core=debug` shows every one), made
/// only where debug events can be on: a disabled span still cost a lock + unlock on
/// shared memory a tenth of its instructions.
macro_rules! sync_span {
    ($($field:tt)*) => {
        tracing::level_enabled!(tracing::Level::DEBUG)
            .then(|| tracing::debug_span!("rma_sync", $($field)*).entered())
    };
}

mod access;
mod api;
mod direct;
mod elements;
mod fence;
mod flush;
mod incoming;
pub(crate) use incoming::TakenReply;
mod issue;
mod lock;
mod lock_all;
mod notify;
mod pscw;
mod rma_op;
mod shared;

pub use api::{Elements, FreeError, GetInto, Window};
use direct::{CountedGets, DirectAccess};
use issue::{encode_op, native_call, native_call_desc, op_kind_wire, sync_flags};
use rma_op::short_op;

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
    /// Every target's window length and displacement unit, in runs of equal values
    /// ([`PerRank`]): flat in the job's size where the members' windows are alike.
    pub remote: PerRank<TargetMemory>,
    pub memory: RwLock<Memory>,
    /// A dynamic window's part of this rank where the backend reaches attached regions
    /// natively ([`Transport::allocate_dynamic`](crate::transport::Transport::allocate_dynamic)),
    /// kept until the window is freed.
    pub anchor: Mutex<Option<Arc<dyn Segment>>>,
    pub state: StateLock<WinState>,
    pub counters: Counters,
    /// Per-target route: index into `classes`, decided once at creation (the native
    /// capabilities of the backend toward that target on this window), in runs.
    routes: PerRank<u8>,
    classes: Vec<crate::transport::Capabilities>,
    /// Every target's puts and gets are native ([`Capabilities::rdma_write`],
    /// [`Capabilities::rdma_read`]), folded once: a direct op looks no class up.
    ///
    /// [`Capabilities::rdma_write`]: crate::transport::Capabilities::rdma_write
    /// [`Capabilities::rdma_read`]: crate::transport::Capabilities::rdma_read
    every_target_writes: bool,
    every_target_reads: bool,
    /// Some target shares memory with us (load/store): the flushes' MEM_SYNC matters.
    shares_memory: bool,
    /// Every member of the window has a native lock word toward this process
    /// ([`Capabilities::native_locks`](crate::transport::Capabilities::native_locks)):
    /// lock_all may take them all in its call.
    members_lock_natively: bool,
    /// The backend's native operations bound to this window
    /// ([`Transport::window_ops`](crate::Transport::window_ops)), where it has them.
    pub(crate) ops: Option<Arc<dyn crate::transport::WindowOps>>,
    /// The targets ops may reach without this state's lock ([`direct`]).
    direct: Arc<DirectAccess>,
    /// The counted gets under way ([`direct`]), each found by the index its token
    /// carries.
    counted_gets: Mutex<CountedGets>,
    /// The window's ops complete in their call ([`WindowOps::completes_in_call`]): a
    /// strided op runs natively, block by block, in its own call
    /// ([`native_blocks`](issue::native_blocks)).
    ///
    /// [`WindowOps::completes_in_call`]: crate::transport::WindowOps::completes_in_call
    blocks_in_call: bool,
    /// A `create` window's user buffer, kept aside while its bytes live in backend
    /// memory ([`Transport::copies_user_memory`](crate::Transport::copies_user_memory)).
    pub(crate) user_copy: Mutex<Option<Box<dyn UserMemory>>>,
    /// Freed collectively: its drop tells nobody (otherwise peers learn it was abandoned).
    freed: std::sync::atomic::AtomicBool,
    /// This process holds its own window for local access in place
    /// ([`Window::begin_local_access`]): every call on the window is refused until it ends.
    local_access: std::sync::atomic::AtomicBool,
    /// The communicator's group, whose numbering the public API's ranks are in; `None`:
    /// the World (ranks are World ranks). Everything inside works in World ranks.
    group: Option<Group>,
    /// The communicator itself, for the window's own collective calls that make windows
    /// ([`Window::set_notify_count`]); `None`: the World.
    comm: Option<Comm>,
    /// The notification counters of notified access ([`notify`]), while set. Biased to
    /// the thread that uses the window, as its state is: a notified put's look at them
    /// is no locked instruction (an `RwLock`'s read and release were two, 6.7 ns of a
    /// halo's 120 per put). Held briefly and never across progress, which counts
    /// arriving notifications under its own hold.
    pub(crate) notify: StateLock<Option<Arc<notify::Notifications>>>,
}

/// What an origin checks its ops against in a target's window (the backend's key of it
/// goes to the backend at creation and is not kept here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TargetMemory {
    /// Bytes in the target's window.
    pub len: u64,
    /// The target's displacement unit.
    pub disp_unit: u32,
}

/// The World ranks of a window's members, without allocating.
pub(super) enum MemberRanks<'a> {
    All(std::ops::Range<Rank>),
    Some(std::slice::Iter<'a, Rank>),
}

impl Iterator for MemberRanks<'_> {
    type Item = Rank;
    fn next(&mut self) -> Option<Rank> {
        match self {
            MemberRanks::All(r) => r.next(),
            MemberRanks::Some(i) => i.next().copied(),
        }
    }
}

/// Ops up to this many bytes never need pieces (every backend carries at least this in
/// one message): the hot path of small contiguous ops skips the question.
const SPLIT_ABOVE: u64 = 512;

/// The most bytes of large ops by message a window keeps under way: in its outbox (sent
/// when the transport has room), and per target in gets' replies not yet in. A large op
/// past it waits in its call, making progress, until there is room (as one past the op
/// pool waits for an element). Unbounded, a burst of large ops by message queued all its
/// bytes at once, at both ends: a burst of 64 puts of 1 MiB through shared memory put 64
/// MiB of fresh buffers in the origin's outbox, and 64 gets as many replies in the
/// target's, each copied into memory no cache holds and copied out again. Four pieces
/// of a 256 KiB ring's size keep the transport busy.
const AM_BACKLOG_MAX: u64 = 1 << 20;

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

/// Token bit of [counted](direct) ops: tracked by their target's in-flight count alone,
/// outside the window's state. The low 32 bits are a put's target rank, or with
/// [`COUNTED_GET`] a get's index.
pub(crate) const COUNTED: u64 = 1 << 38;

/// Token bit, beside [`COUNTED`], of counted gets: the low 32 bits are the get's index
/// among the window's [`CountedGets`].
pub(crate) const COUNTED_GET: u64 = 1 << 37;

/// The token of a counted put of window `win` toward `rank`.
#[inline(always)]
fn counted_token(win: u32, rank: Rank) -> u64 {
    (u64::from(win) << 40) | COUNTED | u64::from(rank)
}

/// The token of counted get `index` of window `win`.
#[inline(always)]
fn counted_get_token(win: u32, index: u32) -> u64 {
    (u64::from(win) << 40) | COUNTED | COUNTED_GET | u64::from(index)
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
    /// The last PSCW access epoch's group, kept for the next `start` to reuse its
    /// allocations (a PSCW ping-pong allocated twice per start).
    spare_access: Option<PscwAccess>,
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
    /// This window's fence barriers go as messages (known after the first one; the
    /// backend answers the same for every barrier of a window).
    barrier_by_messages: bool,
    /// The RMA_DONE count the next barrier message to the other member of a two-member
    /// window carries (`fence`: that message completes the epoch's ops at it).
    pair_done: Option<u32>,
    /// A synchronization call in progress (other than flush), for the thread rules.
    sync_call: Option<&'static str>,
    /// Resource pressure: free idle target elements eagerly.
    restoring: bool,
    /// Errors found asynchronously (refused ops), reported by the next sync call (set
    /// through [`WinState::defer`]).
    deferred: Option<Error>,
    /// The window's direct targets (the same as [`WindowShared`]'s), whose marks every
    /// change of this state that could break them takes away.
    direct: Arc<DirectAccess>,
    pub target: TargetSide,
    outbox: VecDeque<(Rank, Kind, Vec<u8>)>,
    /// Bytes of the packets in `outbox`.
    outbox_bytes: usize,
    /// A reply the packet being handled completes as it is (see
    /// [`incoming::TakenReply`]), for the engine to hand the packet to.
    taken_reply: Option<incoming::TakenReply>,
    /// A large op by message waits in its call for room ([`AM_BACKLOG_MAX`]).
    waiting_for_backlog: bool,
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

impl PeerDepartures {
    /// No peer said anything of leaving (the vectors grow at the first notice).
    #[inline]
    fn none_heard(&self) -> bool {
        self.mismatch.is_none() && self.abandoned.is_empty() && self.freeing.is_empty()
    }
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
    /// Adds `rank`'s lock; `rank` holds none in the table (callers check first).
    fn push(&mut self, rank: Rank, info: LockInfo) {
        debug_assert!(!self.contains_key(&rank));
        self.0.push((rank, info));
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
    /// A notified access: the target's counter that counts it ([`notify`]).
    notify: Option<notify::NotifyDesc<'a>>,
    /// A get's buffer of its own ([`Window::get_owned`]) and the byte its bytes go to:
    /// a reply by message lands there as it arrives.
    landing: Option<(Arc<crate::request::Landing>, usize)>,
}

/// What posting an op came to.
pub(crate) enum Posted {
    /// Complete already; with the fetched bytes when a result was wanted.
    Done(Option<Fetched>),
    /// Queued or under way; the request completes later.
    Later(Option<Arc<RequestState>>),
}

impl WinState {
    pub(crate) fn new(engine: &EngineShared, direct: Arc<DirectAccess>) -> Self {
        let c = &engine.config;
        WinState {
            epoch: WindowEpoch::Unset,
            spare_access: None,
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
            barrier_by_messages: false,
            pair_done: None,
            sync_call: None,
            restoring: false,
            deferred: None,
            direct,
            target: TargetSide::default(),
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            taken_reply: None,
            waiting_for_backlog: false,
            enc: Encoder::default(),
            departures: PeerDepartures::default(),
        }
    }

    /// Keeps `e` for the next synchronization call to report; no target is direct
    /// until then (the next op takes the locked path, which reports it).
    pub(super) fn defer(&mut self, e: Error) {
        self.direct.close_all();
        self.deferred = Some(e);
    }
}
