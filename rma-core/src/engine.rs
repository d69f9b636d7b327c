//! The engine: one per process. It owns the transport, the global element pools, the
//! process-wide counters and the registry of windows, and it runs global progress
//! (MAKE_RMA_PROGRESS_GLOBAL, PROGRESS_WAIT).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use crate::barrier::Dissemination;
use crate::collective;
use crate::comm::{as_transport_error, Comm, GroupCreations};
use crate::config::{AsyncProgress, Config};
use crate::datatype::Element;
use crate::error::{Error, ErrorKind, PeerError, Result, TransportError, UsageError};
use crate::group::Group;
use crate::node_collective::NodeCollectives;
use crate::op_table::{OpElem, TargetElem};
use crate::pool::GlobalPool;
use crate::progress::{self, Activity};
use crate::stats::{Counters, Stats};
use crate::target::Memory;
use crate::transport::{Event, RemoteSegment, Segment, SharedAmong, Transport};
use crate::window::{WinState, Window, WindowKind, WindowShared, COUNTED, COUNTED_GET};
use crate::wire::{self, Body, Kind};
use crate::Rank;

/// Window id of the engine's own packets (its barrier, departures, collectives).
pub(crate) const ENGINE_WINDOW: u32 = u32::MAX;

/// A peer that left the job: the engine barriers it had started, and the peer it blamed.
type Departed = (u32, Option<Rank>);

/// How long a survivor told of a departure waits for the departed peer's own notice
/// (which says whether it left because another rank died) before naming it: the notice
/// is sent before the launcher is told, so it is normally in at once; over a network
/// it may trail the launcher's word by a few round trips.
const DEPARTURE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Bit of a blame word (a departure's done count): the blamed rank is dead.
const BLAME_DEAD: u32 = 1 << 31;
/// Bit of a blame word: the blamed rank was in another collective call, whose
/// [`Departure::call_code`](wire::Departure::call_code) is in bits 24..30.
pub(crate) const BLAME_MISMATCH: u32 = 1 << 30;
/// The blamed rank plus one, in the low bits of a blame word.
pub(crate) const BLAME_RANK: u32 = (1 << 24) - 1;

/// Process-wide state, shared by windows, requests and the progress thread.
pub(crate) struct EngineShared {
    pub transport: Arc<dyn Transport>,
    pub config: Config,
    pub rank: Rank,
    pub size: usize,
    /// [`Transport::yields_while_waiting`], asked once.
    pub(crate) yields_while_waiting: bool,
    windows: RwLock<Vec<Arc<WindowShared>>>,
    /// The id this process proposes for its next window: ids are agreed by the members
    /// of a window (the largest proposal), so that each is new to every member.
    next_window: AtomicU32,
    /// Creations of World windows so far (the same count on every rank).
    world_creations: AtomicU32,
    /// The context this process proposes for its next communicator (0 is the World's).
    next_context: AtomicU32,
    /// Held while a communicator or window is made (its id or context agreed and taken),
    /// so that two threads never take the same one; counts group creations.
    creating: Mutex<GroupCreations>,
    /// Collective calls on the World communicator (shared by its handles).
    world_calls: Arc<AtomicU32>,
    /// How the World communicator's barrier, allreduce and broadcast run (shared by its
    /// handles; its arena dropped when the process departs: the arena's window holds
    /// the engine).
    world_node: Arc<Mutex<NodeCollectives>>,
    /// Pieces of communicators' collectives, waiting to be taken.
    pub(crate) collectives: Mutex<collective::Inbox>,
    pub op_pool: GlobalPool<OpElem>,
    pub target_pool: GlobalPool<TargetElem>,
    pub stats: Counters,
    /// Poll buffer; holding it is holding the right to poll (one poller at a time).
    events: Mutex<Vec<Event>>,
    /// A peer that failed: its rank + 1, or 0 (read on every pass of every wait).
    failed: AtomicU64,
    barrier: Mutex<EngineBarrier>,
    stop: AtomicBool,
    /// Whether the progress agent was started.
    agent: AtomicBool,
    /// Bumped by the application's waits: the progress agent's hand-off.
    pub(crate) activity: Activity,
    /// Per peer that left the job (its World is gone): the engine barriers it started,
    /// and the peer it blamed for leaving, if it left on an error naming one.
    departed: Mutex<Vec<Option<Departed>>>,
    /// This process left the job: it says so only once.
    left: AtomicBool,
    /// The peer this process's errors named first, plus one (0: none); see `blame`.
    blamed: AtomicU64,
    /// The dead rank (plus one) whose locks the windows have revoked.
    revoked: AtomicU64,
    /// The memory of windows dropped without `free` (see [`park_abandoned`]), kept
    /// until the engine goes.
    ///
    /// [`park_abandoned`]: EngineShared::park_abandoned
    abandoned: Mutex<Vec<Arc<dyn crate::transport::Segment>>>,
}

#[derive(Default)]
struct EngineBarrier {
    seq: u32,
    arrivals: HashMap<(u32, u8), u32>,
}

/// The RMA engine of one process: create windows with it.
///
/// ```
/// use rma_core::{sim, Assert, LockType};
/// sim::run(2, sim::Profile::Rdma, 3, |engine| {
///     let win = engine.allocate::<u32>(8)?;
///     if engine.rank() == 0 {
///         win.lock(LockType::Exclusive, 1, Assert::NONE)?;
///         win.put(&[7, 8, 9], 1, 2)?;
///         win.unlock(1)?;
///     }
///     engine.barrier()?;
///     if engine.rank() == 1 {
///         assert_eq!(&win.local_to_vec()[2..5], &[7, 8, 9]);
///     }
///     win.free()?;
///     Ok(())
/// }).unwrap();
/// ```
#[derive(Clone)]
pub struct Engine {
    pub(crate) shared: Arc<EngineShared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .finish()
    }
}

impl Engine {
    /// Runs the body of the public call `call`, saying on its error which call and rank
    /// raised it.
    #[inline]
    fn raised<R>(&self, call: &'static str, body: impl FnOnce() -> Result<R>) -> Result<R> {
        body().map_err(|e| {
            self.shared
                .explained(e)
                .raised_in(call, self.shared.rank, None)
        })
    }

    /// An engine over `transport`. Starts the progress thread if the config asks.
    pub fn new(transport: Arc<dyn Transport>, config: Config) -> Engine {
        let shared = Arc::new(EngineShared {
            rank: transport.rank(),
            size: transport.size(),
            yields_while_waiting: transport.yields_while_waiting(),
            op_pool: GlobalPool::new(config.op_pool_global),
            target_pool: GlobalPool::new(config.target_pool_global),
            transport,
            windows: RwLock::new(Vec::new()),
            next_window: AtomicU32::new(0),
            world_creations: AtomicU32::new(0),
            next_context: AtomicU32::new(1),
            creating: Mutex::new(GroupCreations::default()),
            world_calls: Arc::new(AtomicU32::new(0)),
            world_node: Arc::new(Mutex::new(NodeCollectives::Undecided)),
            collectives: Mutex::new(collective::Inbox::default()),
            stats: Counters::default(),
            events: Mutex::new(Vec::new()),
            failed: AtomicU64::new(0),
            barrier: Mutex::new(EngineBarrier::default()),
            stop: AtomicBool::new(false),
            agent: AtomicBool::new(false),
            activity: Activity::default(),
            departed: Mutex::new(Vec::new()),
            left: AtomicBool::new(false),
            blamed: AtomicU64::new(0),
            revoked: AtomicU64::new(0),
            abandoned: Mutex::new(Vec::new()),
            config,
        });
        let agent = match shared.config.async_progress {
            AsyncProgress::On => true,
            AsyncProgress::Off => false,
            AsyncProgress::Auto => shared.transport.needs_target_progress(),
        };
        let engine = Engine { shared };
        if agent {
            engine.start_progress_agent();
        }
        engine
    }

    /// Starts the progress agent (seed 003; see `progress`) if it is not running, unless
    /// the configuration says `Off`: for a process that learns only later that peers
    /// will need its progress (librma-mpi does when a window of active messages appears
    /// on shared memory: one over the application's memory, or a dynamic one). Returns
    /// whether an agent runs.
    pub fn start_progress_agent(&self) -> bool {
        let shared = &self.shared;
        if shared.config.async_progress == AsyncProgress::Off {
            return false;
        }
        if shared.agent.swap(true, Ordering::AcqRel) {
            return true;
        }
        match progress::spawn(shared) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "no progress agent: the thread did not start");
                shared.agent.store(false, Ordering::Release);
                false
            }
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.shared.rank
    }
    /// Number of ranks (a count of ranks is a [`Rank`], as MPI_Comm_size is an int).
    pub fn size(&self) -> Rank {
        self.shared.size as Rank
    }
    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }
    /// Process-wide counters (all windows).
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }
    /// Makes progress once on every window (MAKE_RMA_PROGRESS_GLOBAL).
    pub fn progress(&self) -> Result<()> {
        self.shared.activity.bump();
        self.shared.progress()
    }
    /// A barrier over all ranks that keeps making RMA progress while it waits.
    pub fn barrier(&self) -> Result<()> {
        self.raised("barrier", || {
            let e = &self.shared;
            let mut bar = {
                let mut b = e.barrier.lock().unwrap_or_else(|x| x.into_inner());
                b.seq += 1;
                Dissemination::new(b.seq, e.size)
            };
            let mut enc = wire::Encoder::default();
            e.wait_until("barrier", || {
                let mut b = e.barrier.lock().unwrap_or_else(|x| x.into_inner());
                let done = bar.advance::<crate::Error>(
                    e.rank,
                    e.size,
                    &mut b.arrivals,
                    |peer, seq, round| {
                        enc.start(Kind::Barrier, 0, ENGINE_WINDOW, 0)
                            .u32(seq)
                            .u8(round);
                        match e.transport.send(peer, enc.finish()) {
                            Ok(()) => {
                                e.stats.message(Kind::Barrier, enc.finish().len());
                                Ok(true)
                            }
                            Err(TransportError::Busy) => Ok(false),
                            Err(x) => Err(x.into()),
                        }
                    },
                )?;
                drop(b);
                if !done {
                    if let Some(rank) = e.failed_rank() {
                        return Err(PeerError::Dead { rank }.into());
                    }
                    // A peer that left before starting this barrier never will.
                    let departed = e.departed.lock().unwrap_or_else(|x| x.into_inner());
                    let behind = (departed.iter().enumerate())
                        .filter_map(|(r, s)| s.filter(|s| s.0 < bar.seq).map(|s| (s.0, r)))
                        .min();
                    if let Some((_, rank)) = behind {
                        return Err(PeerError::Departed {
                            rank: rank as Rank,
                            call: "barrier",
                        }
                        .into());
                    }
                }
                Ok(done)
            })
            .map_err(|err| match err.peer() {
                Some(&PeerError::Timeout { call, rank: None }) => PeerError::Timeout {
                    call,
                    rank: bar.awaited(e.rank, e.size),
                }
                .into(),
                _ => err,
            })
        })
    }

    /// The check a bootstrap's blocking waits run now and then
    /// ([`Bootstrap::set_watch`](crate::Bootstrap::set_watch)): one progress pass (so that
    /// peers' departures and deaths arrive), then an error if a peer died or left the job
    /// (a departed peer makes no more bootstrap calls, so a bootstrap collective waiting
    /// for it never ends). Holds the engine weakly.
    pub fn liveness_watch(&self) -> crate::bootstrap::LivenessWatch {
        let weak = Arc::downgrade(&self.shared);
        Arc::new(move || {
            let Some(e) = weak.upgrade() else {
                return Ok(());
            };
            let _ = e.progress();
            e.check_peers();
            if let Some(rank) = e.failed_rank() {
                e.transport.peer_gone(rank);
            }
            let failed = e.failed.load(Ordering::Acquire);
            if failed != 0 {
                return Err(TransportError::PeerUnreachable((failed - 1) as Rank));
            }
            let departed = e.departed.lock().unwrap_or_else(|x| x.into_inner());
            // The cause rather than the messenger: a peer that left blaming nobody
            // (or blaming a peer that is not gone) first.
            let gone = |r: Rank| departed.get(r as usize).is_some_and(Option::is_some);
            let cause = (0..departed.len())
                .find(|&r| departed[r].is_some_and(|(_, blamed)| blamed.is_none_or(|b| !gone(b))));
            let any = departed.iter().position(Option::is_some);
            match cause.or(any) {
                Some(rank) => {
                    let err = TransportError::PeerDeparted(rank as Rank);
                    e.blame(&err.clone().into());
                    Err(err)
                }
                None => Ok(()),
            }
        })
    }

    /// This process leaves the job normally (its World is dropped): every peer is told,
    /// with the engine barriers this process started, so that a peer waiting in a
    /// barrier this process never joins fails naming it instead of waiting for a
    /// timeout. Best effort and bounded (a peer that cannot take the message within a
    /// second of progress is not told). Only the first call does anything.
    pub fn depart(&self) {
        let e = &self.shared;
        // The World's arena holds a window, which holds the engine: dropped here, the
        // engine is freed with its last handle.
        let arena = std::mem::replace(
            &mut *e.world_node.lock().unwrap_or_else(|x| x.into_inner()),
            NodeCollectives::Messages,
        );
        drop(arena);
        // The progress agent ends: the process is leaving (its transport lingers by
        // itself for peers' goodbyes).
        e.stop.store(true, Ordering::Relaxed);
        if e.left.swap(true, Ordering::AcqRel) || e.size == 1 {
            return;
        }
        let seq = e.barrier.lock().unwrap_or_else(|x| x.into_inner()).seq;
        let mut enc = wire::Encoder::default();
        enc.start(Kind::Depart, 0, ENGINE_WINDOW, e.blame_word())
            .u8(wire::Departure::Job as u8)
            .u32(seq);
        let start = Instant::now();
        for peer in (0..e.size as Rank).filter(|r| *r != e.rank) {
            loop {
                match e.transport.send(peer, enc.finish()) {
                    Ok(()) => {
                        e.stats.message(Kind::Depart, enc.finish().len());
                        break;
                    }
                    Err(TransportError::Busy)
                        if start.elapsed() < std::time::Duration::from_secs(1) =>
                    {
                        let _ = e.progress();
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// The World communicator: every process, in World rank order. Windows made by the
    /// engine's own `allocate`, `create`, ... are over it.
    pub fn world(&self) -> Comm {
        Comm::world(
            self.clone(),
            self.shared.world_calls.clone(),
            self.shared.world_node.clone(),
        )
    }

    /// Held while a communicator is made (its context agreed and taken).
    pub(crate) fn creation_lock(&self) -> MutexGuard<'_, GroupCreations> {
        self.shared
            .creating
            .lock()
            .unwrap_or_else(|x| x.into_inner())
    }

    /// The context this process proposes for its next communicator.
    pub(crate) fn proposed_context(&self) -> u32 {
        self.shared.next_context.load(Ordering::Relaxed)
    }

    /// Context `context` is taken: later proposals are larger.
    pub(crate) fn context_taken(&self, context: u32) {
        self.shared
            .next_context
            .fetch_max(context.saturating_add(1), Ordering::Relaxed);
    }

    /// Whether this process reaches World rank `rank`'s memory by load and store (the
    /// backend toward it is shared memory: the same node).
    pub fn shares_memory_with(&self, rank: Rank) -> bool {
        self.shared.transport.capabilities(rank).shared_memory
    }

    /// Allocates a window of `len` elements on every rank (collective, MPI_Win_allocate).
    ///
    /// Every rank returns the same outcome: when the memory cannot be had on one rank (an
    /// impossible size, no memory, a registration refused), the others return
    /// [`PeerError::CollectiveFailed`] naming it, and nobody keeps a window.
    pub fn allocate<T: Element>(&self, len: usize) -> Result<Window<T>> {
        self.raised("allocate", || self.allocate_over(None, len))
    }

    pub(crate) fn allocate_in<T: Element>(&self, comm: &Comm, len: usize) -> Result<Window<T>> {
        self.allocate_over(Some(comm).filter(|c| !c.is_world()), len)
    }

    pub(crate) fn allocate_over<T: Element>(
        &self,
        comm: Option<&Comm>,
        len: usize,
    ) -> Result<Window<T>> {
        let seg = window_bytes::<T>(len)
            .and_then(|bytes| Ok(self.shared.transport.allocate(bytes, None)?));
        self.make_window(
            comm,
            WindowKind::Allocate,
            seg.map(Memory::Static),
            std::mem::size_of::<T>(),
        )
    }

    /// Allocates a window whose memory the ranks of a node share for direct load/store
    /// (collective, MPI_Win_allocate_shared). Fails on every rank, with
    /// [`TransportError::Unsupported`], where some ranks of the window share no memory
    /// (a network backend, a job over several nodes).
    pub fn allocate_shared<T: Element>(&self, len: usize) -> Result<Window<T>> {
        self.raised("allocate_shared", || self.allocate_shared_over(None, len))
    }

    pub(crate) fn allocate_shared_in<T: Element>(
        &self,
        comm: &Comm,
        len: usize,
    ) -> Result<Window<T>> {
        self.allocate_shared_over(Some(comm).filter(|c| !c.is_world()), len)
    }

    fn allocate_shared_over<T: Element>(
        &self,
        comm: Option<&Comm>,
        len: usize,
    ) -> Result<Window<T>> {
        // The backend's allocation of shared memory is itself collective: every rank
        // must know beforehand that every other will take part.
        let bytes = window_bytes::<T>(len);
        let checked = bytes.as_ref().map(|_| Vec::new()).map_err(Clone::clone);
        let seq = self.shared.world_creations.load(Ordering::Relaxed);
        if let Err(e) = self.agree(comm, WindowKind::Shared, seq, checked) {
            if comm.is_none() {
                self.shared.world_creations.fetch_add(1, Ordering::Relaxed);
            }
            return Err(e);
        }
        let t = &self.shared.transport;
        let seg = bytes.and_then(|bytes| {
            Ok(match comm {
                None => {
                    let all = |mine: &[u8]| t.allgather(mine);
                    t.allocate(
                        bytes,
                        Some(&SharedAmong {
                            members: Group::world(self.size()).members(),
                            index: self.rank() as usize,
                            allgather: &all,
                        }),
                    )?
                }
                Some(c) => {
                    let all = |mine: &[u8]| {
                        c.allgather_as("allocate_shared", mine)
                            .map_err(as_transport_error)
                    };
                    t.allocate(
                        bytes,
                        Some(&SharedAmong {
                            members: c.group().members(),
                            index: c.rank() as usize,
                            allgather: &all,
                        }),
                    )?
                }
            })
        });
        self.make_window(
            comm,
            WindowKind::Shared,
            seg.map(Memory::Static),
            std::mem::size_of::<T>(),
        )
    }

    /// Creates a window over memory the user hands over (collective, MPI_Win_create);
    /// [`Window::free`] gives it back.
    pub fn create<T: Element>(&self, memory: Vec<T>) -> Result<Window<T>> {
        self.raised("create", || self.create_over(None, memory))
    }

    pub(crate) fn create_in<T: Element>(&self, comm: &Comm, memory: Vec<T>) -> Result<Window<T>> {
        self.create_over(Some(comm).filter(|c| !c.is_world()), memory)
    }

    pub(crate) fn create_in_place<T: Element>(
        &self,
        comm: &Comm,
        memory: Box<dyn crate::transport::UserMemory>,
    ) -> Result<Window<T>> {
        let seg = self.shared.transport.expose(memory);
        self.make_window(
            Some(comm).filter(|c| !c.is_world()),
            WindowKind::Create,
            seg.map(Memory::Static).map_err(Into::into),
            std::mem::size_of::<T>(),
        )
    }

    fn create_over<T: Element>(&self, comm: Option<&Comm>, memory: Vec<T>) -> Result<Window<T>> {
        let t = &self.shared.transport;
        if t.copies_user_memory() {
            let mut memory: Box<dyn crate::transport::UserMemory> = Box::new(memory);
            let bytes = memory.bytes_mut();
            let seg = t
                .allocate(bytes.len(), None)
                .inspect(|seg| seg.write(0, bytes));
            let w = self.make_window(
                comm,
                WindowKind::Create,
                seg.map(Memory::Static).map_err(Into::into),
                std::mem::size_of::<T>(),
            )?;
            *w.shared.user_copy.lock().unwrap_or_else(|e| e.into_inner()) = Some(memory);
            return Ok(w);
        }
        let seg = t.expose(Box::new(memory));
        self.make_window(
            comm,
            WindowKind::Create,
            seg.map(Memory::Static).map_err(Into::into),
            std::mem::size_of::<T>(),
        )
    }

    /// Creates a dynamic window with no memory yet (collective, MPI_Win_create_dynamic);
    /// use [`Window::attach`].
    pub fn create_dynamic<T: Element>(&self) -> Result<Window<T>> {
        self.raised("create_dynamic", || {
            self.make_window(
                None,
                WindowKind::Dynamic,
                Ok(Memory::Dynamic(Vec::new())),
                1,
            )
        })
    }

    pub(crate) fn create_dynamic_in<T: Element>(&self, comm: &Comm) -> Result<Window<T>> {
        let comm = Some(comm).filter(|c| !c.is_world());
        self.make_window(
            comm,
            WindowKind::Dynamic,
            Ok(Memory::Dynamic(Vec::new())),
            1,
        )
    }

    /// The collective of window creation over the World (`comm` None) or a
    /// communicator's members: every member brings its memory (or why it has none), and
    /// every member returns the same outcome. Two agreements: on the memory (with the
    /// descriptors peers need and the window id each proposes), then on the backend's
    /// registration of them.
    fn make_window<T: Element>(
        &self,
        comm: Option<&Comm>,
        kind: WindowKind,
        memory: Result<Memory>,
        disp_unit: usize,
    ) -> Result<Window<T>> {
        let e = &self.shared;
        // One creation at a time in this process: the id agreed is then new to it.
        let creating = self.creation_lock();
        let seq = match comm {
            None => e.world_creations.fetch_add(1, Ordering::Relaxed),
            Some(_) => 0,
        };
        let proposal = e.next_window.load(Ordering::Relaxed);
        // A dynamic window's part where the backend reaches attached regions natively.
        let (memory, anchor) = match memory {
            Ok(Memory::Dynamic(regions)) => match e.transport.allocate_dynamic() {
                Ok(anchor) => (Ok(Memory::Dynamic(regions)), anchor),
                Err(err) => (Err(err.into()), None),
            },
            other => (other, None),
        };
        let mine = memory.as_ref().map_err(Clone::clone).map(|memory| {
            let (len, key) = match (memory, &anchor) {
                (Memory::Static(seg), _) => (seg.len() as u64, seg.descriptor()),
                (Memory::Dynamic(_), Some(anchor)) => (u64::MAX, anchor.descriptor()),
                (Memory::Dynamic(_), None) => (u64::MAX, Vec::new()),
            };
            let mut mine = Vec::with_capacity(16 + key.len());
            mine.extend_from_slice(&proposal.to_le_bytes());
            mine.extend_from_slice(&len.to_le_bytes());
            mine.extend_from_slice(&(disp_unit as u32).to_le_bytes());
            mine.extend_from_slice(&key);
            mine
        });
        let all = self.agree(comm, kind, seq, mine)?;
        let memory = memory?;
        let members = comm.map(|c| c.group().members());
        let world_rank = |i: usize| members.map_or(i as Rank, |m| m[i]);
        let mut id = 0;
        let mut remote = vec![RemoteSegment::default(); e.size];
        for (i, b) in all.iter().enumerate() {
            if b.len() < 16 {
                return Err(PeerError::Malformed {
                    from: world_rank(i),
                    reason: "short window descriptor",
                }
                .into());
            }
            id = id.max(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")));
            remote[world_rank(i) as usize] = RemoteSegment {
                len: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
                disp_unit: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
                key: b[16..].to_vec(),
            };
        }
        if id == ENGINE_WINDOW {
            return Err(UsageError::Unsupported {
                what: "more than 2^32 - 1 window creations in one process",
            }
            .into());
        }
        e.next_window.fetch_max(id + 1, Ordering::Relaxed);
        drop(creating);
        let local: Option<Arc<dyn Segment>> = match &memory {
            Memory::Static(s) => Some(s.clone()),
            Memory::Dynamic(_) => anchor.clone(),
        };
        // The backend maps or registers every member's part; that too can fail on one
        // rank alone, and the agreement on it is also the barrier after which peers may
        // send to this window (everyone has registered it).
        let ready = e
            .transport
            .window_ready(id, local.as_ref(), &remote)
            .map(|()| Vec::new())
            .map_err(Error::from);
        // Registered before that agreement ends: a peer leaving it first may send at once,
        // and a progress pass of another thread of ours (the progress agent's, or the
        // application's own) would otherwise find no window for the packet and drop it
        // (seen: a lock_all request across nodes lost, its origin's flush timing out).
        // Nobody sends before every rank registered with its backend, which the
        // agreement also says; if it fails, nobody sends at all.
        let w = Arc::new(WindowShared::new(
            id,
            kind,
            e.clone(),
            &remote,
            memory,
            anchor,
            comm.cloned(),
        ));
        e.windows
            .write()
            .unwrap_or_else(|x| x.into_inner())
            .push(w.clone());
        if let Err(err) = self.agree(comm, kind, seq, ready) {
            e.windows
                .write()
                .unwrap_or_else(|x| x.into_inner())
                .retain(|x| x.id != id);
            e.transport.window_freed(id);
            return Err(err);
        }
        e.transport.window_established(id, local.as_ref());
        Ok(Window {
            view: false,
            shared: w,
            _elem: std::marker::PhantomData,
        })
    }

    /// One agreement of window creation: every member's `mine` (or its failure), in rank
    /// order, once every member made the same call for the same window. This rank's own
    /// failure comes back as it was; another's as [`PeerError::CollectiveFailed`]; a rank
    /// in another collective as [`PeerError::Mismatch`].
    fn agree(
        &self,
        comm: Option<&Comm>,
        kind: WindowKind,
        seq: u32,
        mine: Result<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>> {
        self.agree_inner(comm, kind, seq, mine)
            .inspect_err(|e| self.shared.blame(e))
    }

    fn agree_inner(
        &self,
        comm: Option<&Comm>,
        kind: WindowKind,
        seq: u32,
        mine: Result<Vec<u8>>,
    ) -> Result<Vec<Vec<u8>>> {
        let call = creation_call(kind as u8);
        // Status 0: ok, with the bytes; 1: failed, with the reason; 2 and 3: failed because
        // a peer is dead or left, with its rank (every rank then names that peer).
        let (status, body) = match mine.as_ref().map_err(Error::kind) {
            Ok(bytes) => (0u8, bytes.clone()),
            Err(ErrorKind::Peer(PeerError::Dead { rank })) => (2u8, rank.to_le_bytes().to_vec()),
            Err(ErrorKind::Peer(PeerError::Departed { rank, .. })) => {
                (3u8, rank.to_le_bytes().to_vec())
            }
            // The others name this rank and the call themselves (CollectiveFailed); the
            // failure goes with what caused it (a backend's system error).
            Err(kind) => (1u8, crate::with_causes(kind).into_bytes()),
        };
        let mut msg = Vec::with_capacity(6 + body.len());
        msg.push(status);
        msg.push(kind as u8);
        msg.extend_from_slice(&seq.to_le_bytes());
        msg.extend_from_slice(&body);
        let all = match comm {
            // The World's creations go through the bootstrap, which also watches the
            // launcher for ranks that never started.
            None => self.shared.transport.allgather(&msg).map_err(|err| {
                let err = Error::from(err);
                match err.peer() {
                    Some(&PeerError::Departed { rank, .. }) => {
                        PeerError::Departed { rank, call }.into()
                    }
                    _ => err,
                }
            })?,
            Some(c) => c.allgather_as(call, &msg)?,
        };
        let world_rank = |i: usize| comm.map_or(i as Rank, |c| c.group().members()[i]);
        let mut out = Vec::with_capacity(all.len());
        let mut failed = None;
        for (i, theirs) in all.into_iter().enumerate() {
            let rank = world_rank(i);
            if theirs.len() < 6 {
                return Err(PeerError::Malformed {
                    from: rank,
                    reason: "short window-creation message",
                }
                .into());
            }
            let their_seq = u32::from_le_bytes(theirs[2..6].try_into().expect("4 bytes"));
            if theirs[1] != kind as u8 || their_seq != seq {
                let theirs = if theirs[1] != kind as u8 {
                    creation_call(theirs[1])
                } else {
                    "the creation of another window"
                };
                return Err(PeerError::Mismatch { rank, call, theirs }.into());
            }
            let named = || -> Option<Rank> {
                Some(Rank::from_le_bytes(theirs.get(6..10)?.try_into().ok()?))
            };
            let why = match theirs[0] {
                0 => None,
                2 => named().map(|rank| PeerError::Dead { rank }),
                3 => named().map(|rank| PeerError::Departed { rank, call }),
                _ => None,
            };
            if theirs[0] != 0 && !matches!(failed, Some(PeerError::Dead { .. })) {
                // A dead peer explains the most; then the first other failure.
                let reason = || String::from_utf8_lossy(&theirs[6..]).into_owned();
                match why {
                    Some(w @ PeerError::Dead { .. }) => failed = Some(w),
                    Some(w) if failed.is_none() => failed = Some(w),
                    None if failed.is_none() => {
                        failed = Some(PeerError::CollectiveFailed {
                            rank,
                            call,
                            reason: reason(),
                        })
                    }
                    _ => {}
                }
            }
            out.push(theirs[6..].to_vec());
        }
        mine?;
        match failed {
            Some(f) => Err(f.into()),
            None => Ok(out),
        }
    }
}

/// The call that creates a window of the kind with this code.
fn creation_call(code: u8) -> &'static str {
    match code {
        c if c == WindowKind::Allocate as u8 => "allocate",
        c if c == WindowKind::Create as u8 => "create",
        c if c == WindowKind::Dynamic as u8 => "create_dynamic",
        c if c == WindowKind::Shared as u8 => "allocate_shared",
        _ => "an unknown collective",
    }
}

/// Bytes of a window of `len` elements of `T`, or the error for a size no memory can
/// hold (past `isize::MAX`, as Rust's allocations).
pub(crate) fn window_bytes<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .filter(|b| isize::try_from(*b).is_ok())
        .ok_or_else(|| {
            UsageError::Unsupported {
                what: "a window larger than isize::MAX bytes",
            }
            .into()
        })
}

impl Drop for EngineShared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl EngineShared {
    /// Whether the engine is going (dropped, or its process departed): the progress
    /// agent ends.
    pub(crate) fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Keeps the memory of a window dropped without `free` (and its registration with
    /// the backend) until the engine goes, after the transport's goodbyes: a peer may
    /// still have an op on it under way, and it learns of the drop only from the
    /// departure notice. Freed at once, its write would find no registration: on verbs
    /// a remote access error, which breaks the pair's connection and made the peer take
    /// this live process for dead (the `dead_peer` case, one run in 25 in the rxe VM).
    /// Shared memory needs none of this (a peer's mapping outlives ours) but it costs
    /// nothing there either: what is kept is what a correct program frees collectively.
    pub(crate) fn park_abandoned(
        &self,
        segments: impl IntoIterator<Item = Arc<dyn crate::transport::Segment>>,
    ) {
        let mut kept = self.abandoned.lock().unwrap_or_else(|x| x.into_inner());
        kept.extend(segments);
    }

    pub(crate) fn unregister(&self, id: u32) {
        let mut ws = self.windows.write().unwrap_or_else(|x| x.into_inner());
        ws.retain(|w| w.id != id);
        drop(ws);
        self.transport.window_freed(id);
    }

    /// MAKE_RMA_PROGRESS_GLOBAL: poll the transport, dispatch what arrived, then issue and
    /// clean up on every window.
    ///
    /// A window's state is locked once for everything of one pass that concerns it in a
    /// row (its completions, its packets, its ISSUE_OPS and CLEANUP_OPS), and never
    /// together with another window's.
    pub(crate) fn progress(&self) -> Result<()> {
        self.progress_pass().map(drop)
    }

    /// [`progress`](Self::progress), saying whether this thread made the pass (false:
    /// another thread was polling, and dispatches for it).
    fn progress_pass(&self) -> Result<bool> {
        self.pass(false)
    }

    /// [`progress_pass`](Self::progress_pass), or with `completions_only` a pass of a wait
    /// for completions alone ([`wait_for_completions`](Self::wait_for_completions)): it
    /// polls the backend and handles what it finds, but when that is nothing, or only
    /// counted ops' completions (which change no window's state), it leaves out the
    /// dead-rank checks and every window's ISSUE_OPS, which nothing new asks for.
    #[inline(always)]
    fn pass(&self, completions_only: bool) -> Result<bool> {
        let Ok(mut events) = self.events.try_lock() else {
            // Another thread is polling; it will dispatch for us.
            std::thread::yield_now();
            return Ok(false);
        };
        self.transport.poll(&mut events)?;
        if completions_only && events.is_empty() {
            return Ok(true);
        }
        let mut failed_now: Vec<Rank> = Vec::new();
        let windows = self.windows.read().unwrap_or_else(|x| x.into_inner());
        let mut held = HeldState::default();
        // Whether every event was a counted op's completion.
        let mut only_counted = true;
        // Most passes of a wait find nothing: no drain to set up and tear down.
        if !events.is_empty() {
            for ev in events.drain(..) {
                // A counted op (a put, a get): its count and its request, without the
                // window's state. (A counted put's failure goes through the state below,
                // which defers it; a get's request carries its own.)
                let counted = match &ev {
                    Event::Completed { token, .. } => token & COUNTED != 0,
                    Event::Failed { token, .. } => {
                        token & (COUNTED | COUNTED_GET) == COUNTED | COUNTED_GET
                    }
                    _ => false,
                };
                if counted {
                    let (token, result) = match ev {
                        Event::Failed { token, error } => (token, Err(error.into())),
                        Event::Completed { token, data } => (token, Ok(data)),
                        _ => continue,
                    };
                    if let Some(i) = find(&windows, (token >> 40) as u32) {
                        windows[i].counted_op_completed(token, result);
                    }
                    continue;
                }
                only_counted = false;
                match ev {
                    Event::Received { from, data } => {
                        match self.dispatch(&windows, &mut held, from, &data) {
                            Some(reply) => reply.complete(data),
                            None => self.transport.recycle(data),
                        }
                    }
                    Event::Completed { token, data } => {
                        if let Some(i) = find(&windows, (token >> 40) as u32) {
                            held.state(&windows, i)
                                .handle_completion(&windows[i], token, Ok(data));
                        }
                    }
                    Event::Failed { token, error } => {
                        if let Some(i) = find(&windows, (token >> 40) as u32) {
                            held.state(&windows, i).handle_completion(
                                &windows[i],
                                token,
                                Err(error.into()),
                            );
                        }
                    }
                    Event::Notified { from, win, index } => {
                        // The data is in (the backend's promise); the counter is checked here,
                        // whatever the origin claimed: a window or index this process does
                        // not have is refused, as an active message's would be.
                        match find(&windows, win) {
                            Some(i) if windows[i].has_notification(index) => {
                                windows[i].notification_arrived(index);
                            }
                            Some(i) => {
                                tracing::warn!(from, win, index, "refused a notice of no counter");
                                windows[i].counters.refused();
                            }
                            None => {
                                tracing::warn!(from, win, index, "refused a notice of no window");
                                self.stats.refused();
                            }
                        }
                    }
                    Event::PeerFailed { rank } => failed_now.push(rank),
                }
            }
        }
        drop(events);
        if completions_only && only_counted {
            return Ok(true);
        }
        // After the batch's packets: a peer whose departure notice came in the same poll
        // (or before) left the job; that its process is gone now (a pid check, a closed
        // connection) is its exit, not a death. Its notice names whom it blamed. And the
        // first death known stays the one named: a rank that left because of it (after
        // its window's departure blamed the dead rank) fails later, a messenger (on verbs
        // its window's memory, deregistered on its way out, refuses our write).
        for rank in failed_now {
            if !self.has_departed(rank) {
                self.record_death(rank);
            }
        }
        // A rank known dead (from its transport, the launcher or a peer) never unlocks:
        // every window takes its locks away, once.
        let failed = self.failed.load(Ordering::Acquire);
        if failed != 0 && self.revoked.swap(failed, Ordering::AcqRel) != failed {
            let rank = (failed - 1) as Rank;
            for (i, w) in windows.iter().enumerate() {
                if let Err(e) = held.state(&windows, i).revoke_locks(w, rank) {
                    tracing::warn!(rank, error = %e, "revoking a dead rank's locks");
                }
            }
        }
        for (i, w) in windows.iter().enumerate() {
            held.state(&windows, i).make_progress(w)?;
        }
        Ok(true)
    }

    /// Whether World rank `rank` left the job (its World was dropped).
    pub(crate) fn has_departed(&self, rank: Rank) -> bool {
        let d = self.departed.lock().unwrap_or_else(|x| x.into_inner());
        d.get(rank as usize).is_some_and(Option::is_some)
    }

    fn dispatch<'w>(
        &self,
        windows: &'w [Arc<WindowShared>],
        held: &mut HeldState<'w>,
        from: Rank,
        data: &[u8],
    ) -> Option<crate::window::TakenReply> {
        let p = match wire::decode(data) {
            Ok(p) => p,
            Err(reason) => {
                tracing::warn!(from, reason, "dropped malformed packet");
                self.stats.refused();
                return None;
            }
        };
        if p.win == ENGINE_WINDOW {
            match p.body {
                Body::Barrier { seq, round } => {
                    // Never a window lock and the barrier's at once.
                    held.release();
                    let mut b = self.barrier.lock().unwrap_or_else(|x| x.into_inner());
                    *b.arrivals.entry((seq, round)).or_default() += 1;
                }
                Body::Collective {
                    tag,
                    step,
                    call,
                    total,
                    offset,
                    data,
                } => {
                    held.release();
                    let mut inbox = self.collectives.lock().unwrap_or_else(|x| x.into_inner());
                    if let Err(reason) = inbox.piece(from, tag, step, call, total, offset, data) {
                        tracing::warn!(from, reason, "dropped collective piece");
                        self.stats.refused();
                    }
                }
                Body::Depart {
                    what: wire::Departure::Job,
                    seq,
                } => {
                    let mut d = self.departed.lock().unwrap_or_else(|x| x.into_inner());
                    if (from as usize) < self.size {
                        d.resize(self.size, None);
                        let blamed = self.heard_blame(from, p.done_count);
                        d[from as usize] = Some((seq, blamed));
                    }
                }
                _ => {}
            }
            return None;
        }
        match find(windows, p.win) {
            Some(i) => {
                let st = held.state(windows, i);
                if let Err(e) = st.handle_packet(&windows[i], from, &p, data) {
                    tracing::warn!(from, error = %e, "packet handling failed");
                }
                return st.take_reply();
            }
            None => {
                tracing::warn!(from, win = p.win, kind = ?p.kind, flags = p.flags, "packet for unknown window");
                self.stats.refused();
            }
        }
        None
    }

    /// PROGRESS_WAIT: makes progress until `cond` holds, a peer fails, or the configured
    /// timeout passes without `cond` holding.
    pub(crate) fn wait_until(
        &self,
        call: &'static str,
        cond: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        self.wait_until_inner(call, cond, false)
            .inspect_err(|e| self.blame(e))
    }

    /// PROGRESS_WAIT for `cond`, which only completions change (counted ops): as
    /// [`wait_until`](Self::wait_until), with passes for completions alone
    /// ([`pass`](Self::pass)) and a full progress pass every [`FULL_PASS_EVERY`] of them, so that whatever else
    /// waits for this thread (a busy backend's sends, a lock word to retry, another
    /// window's ops) still moves.
    pub(crate) fn wait_for_completions(
        &self,
        call: &'static str,
        cond: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        self.wait_until_inner(call, cond, true)
            .inspect_err(|e| self.blame(e))
    }

    /// Remembers the first peer this process's errors named (dead, departed, in another
    /// collective): when this process then leaves, its departure names that peer, so
    /// that others blame the cause and not the messenger.
    pub(crate) fn blame(&self, e: &Error) {
        let (rank, dead) = match e.peer() {
            Some(PeerError::Dead { rank }) => (*rank, BLAME_DEAD),
            Some(PeerError::Mismatch { rank, theirs, .. }) => (
                *rank,
                BLAME_MISMATCH | (wire::Departure::call_code(theirs) & 0x3f) << 24,
            ),
            Some(PeerError::Departed { rank, .. } | PeerError::CollectiveFailed { rank, .. }) => {
                (*rank, 0)
            }
            _ => return,
        };
        let _ = self.blamed.compare_exchange(
            0,
            u64::from((rank + 1) | dead),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if dead & BLAME_DEAD != 0 {
            // Known dead from now on (the launcher or a peer said so): every wait on it
            // fails, and the transport neither sends to it nor waits for its goodbye.
            self.record_death(rank);
            self.transport.peer_gone(rank);
        }
    }

    /// The cause rather than the messenger, for the errors a death elsewhere causes:
    ///
    /// - a peer that departed ([`PeerError::Departed`]) may have left because another
    ///   rank died (its departure notice then blames the dead rank);
    /// - a failure of the transport (a native operation's error completion, a
    ///   connection reset) may be the target's death seen first by the network.
    ///
    /// Both become [`PeerError::Dead`] naming the dead rank when a death is known, as
    /// does a [`PeerError::Dead`] naming another rank than the first death known. A
    /// survivor hears of a departure from the launcher or its own collective as soon as
    /// from the peer's notice, and of a reset connection before the launcher or the
    /// process table says who died, so before deciding it makes progress and checks its
    /// peers until a death is known, the departed peer's notice is in (its blame, if
    /// any, now known), or `DEPARTURE_GRACE` passes. The failure path only.
    #[cold]
    #[inline(never)]
    pub(crate) fn explained(&self, e: Error) -> Error {
        if e.call().is_some() {
            // Raised by a public call inside this one (get through get_strided, allocate
            // through Comm::allocate): explained there already, not waited for twice.
            return e;
        }
        if let Some(&PeerError::Dead { rank }) = e.peer() {
            // Unreachable now, but another death was known first: that one is the
            // cause (a rank that left because of it, its window's memory gone, is
            // unreachable after it).
            return match self.failed_rank() {
                Some(first) if first != rank => PeerError::Dead { rank: first }.into(),
                _ => e,
            };
        }
        let departed = match e.peer() {
            Some(&PeerError::Departed { rank, .. }) => Some(rank),
            _ => None,
        };
        let transport = matches!(
            e.kind(),
            ErrorKind::Transport(TransportError::Backend(_) | TransportError::Failed(_))
        );
        if departed.is_none() && !transport {
            return e;
        }
        let start = Instant::now();
        loop {
            let _ = self.progress();
            self.check_peers();
            if let Some(dead) = self.failed_rank() {
                let why: Error = PeerError::Dead { rank: dead }.into();
                self.blame(&why);
                return why;
            }
            let notice_in = departed.is_some_and(|rank| self.has_departed(rank));
            if notice_in || start.elapsed() >= DEPARTURE_GRACE {
                return e;
            }
            std::thread::yield_now();
        }
    }

    /// Asks the transport which peers it finds dead now (for a process blocked outside
    /// the engine's own waits) and takes the first for failed, unless it departed: a
    /// process gone after its departure notice exited, it did not die.
    fn check_peers(&self) {
        let mut found = Vec::new();
        self.transport.check_peers(&mut found);
        for ev in found {
            if let Event::PeerFailed { rank } = ev {
                if self.has_departed(rank) {
                    continue;
                }
                self.record_death(rank);
            }
        }
    }

    /// The blame word a departure carries (the header's done count): see `blame`.
    pub(crate) fn blame_word(&self) -> u32 {
        self.blamed.load(Ordering::Acquire) as u32
    }

    /// A peer's departure that blames a dead rank: this process takes that rank for dead
    /// too (the peer saw it die; our own liveness check may come later), so that every
    /// survivor names the dead rank, not the survivors that left because of it. Returns
    /// the peer the word blames, if any.
    pub(crate) fn heard_blame(&self, from: Rank, word: u32) -> Option<Rank> {
        let rank = (word & BLAME_RANK).checked_sub(1)?;
        if rank == from || rank as usize >= self.size {
            return None;
        }
        if word & BLAME_DEAD != 0 {
            self.record_death(rank);
            self.transport.peer_gone(rank);
        }
        Some(rank)
    }

    /// `rank` is dead, unless a death is known already: the first one known stays the
    /// one every wait names (a rank that fails after it most likely left because of it).
    fn record_death(&self, rank: Rank) {
        let _ = self.failed.compare_exchange(
            0,
            u64::from(rank) + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The rank known dead, if any.
    pub(crate) fn failed_rank(&self) -> Option<Rank> {
        let failed = self.failed.load(Ordering::Acquire);
        (failed != 0).then(|| (failed - 1) as Rank)
    }

    fn wait_until_inner(
        &self,
        call: &'static str,
        mut cond: impl FnMut() -> Result<bool>,
        completions_only: bool,
    ) -> Result<()> {
        // The progress agent stays out of the way while this thread uses the library,
        // also when its waits end at once (ops complete in the call: without this, a
        // latency loop of them looked idle to the agent, which then armed the completion
        // queue and woke for every one of them: verbs put + flush 1.07 -> 1.66x raw).
        let poll = self.activity.bump_quick();
        if cond()? {
            if poll {
                self.progress()?;
            }
            return Ok(());
        }
        // Taken at the first yield, not here: most waits end before it, and a clock read
        // is a good share of a short wait (the timeout is seconds, the shift microseconds).
        let mut start = None;
        let mut spins = 0u32;
        let mut passes_left_to_others = 0u32;
        loop {
            let full = !completions_only || (spins + 1).is_multiple_of(FULL_PASS_EVERY);
            if !self.pass(!full)? {
                passes_left_to_others += 1;
            }
            if cond()? {
                return Ok(());
            }
            let failed = self.failed.load(Ordering::Acquire);
            if failed != 0 {
                let rank = (failed - 1) as Rank;
                return Err(PeerError::Dead { rank }.into());
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                self.activity.bump();
                let start = *start.get_or_insert_with(Instant::now);
                if self.config.timeout.is_some_and(|t| start.elapsed() > t) {
                    // Whether this thread polled at all: a pass another thread holds
                    // (the progress agent) dispatches what this wait looks for.
                    tracing::warn!(
                        call,
                        spins,
                        passes_left_to_others,
                        agent_passes = self.stats.snapshot().agent_passes,
                        "timed out"
                    );
                    return Err(PeerError::Timeout { call, rank: None }.into());
                }
                if self.yields_while_waiting {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// A [wait for completions](Engine::wait_for_completions) makes a full progress pass once
/// in this many passes.
const FULL_PASS_EVERY: u32 = 16;

/// The index of window `id` among the registered ones.
fn find(windows: &[Arc<WindowShared>], id: u32) -> Option<usize> {
    windows.iter().position(|w| w.id == id)
}

/// The one window state a progress pass holds locked: the window the last event was for,
/// kept while the next events are for it too, released before another window's is taken
/// (so no two window locks are ever held at once).
#[derive(Default)]
struct HeldState<'w> {
    held: Option<(usize, crate::window::StateGuard<'w, WinState>)>,
}

impl<'w> HeldState<'w> {
    fn release(&mut self) {
        self.held = None;
    }

    fn state(&mut self, windows: &'w [Arc<WindowShared>], i: usize) -> &mut WinState {
        if self.held.as_ref().is_none_or(|(j, _)| *j != i) {
            self.held = None;
            self.held = Some((i, windows[i].lock_state()));
        }
        &mut self.held.as_mut().expect("just taken").1
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Engine>();
    is::<Window<u64>>();
    let _ = UsageError::NotAttached;
}
