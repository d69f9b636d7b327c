//! A deterministic simulated transport: ranks are threads of one process, joined by a
//! simulated network whose seeded random number generator delays deliveries and
//! interleaves senders (order per pair is kept, as the transport contract says), and
//! which completes native operations late.
//!
//! It implements the same [`Transport`] trait as the real backends; nothing in the engine
//! knows it is simulated. Capability profiles: [`Profile::ActiveMessages`] (nothing
//! native), [`Profile::Rdma`] (native put, get, some atomics, completed
//! asynchronously), [`Profile::OrderedPuts`] (puts in the pair's message stream, as
//! libfabric's tcp providers carry them) and [`Profile::SharedMemory`]. It proves
//! protocol logic; real multi-process proof is the backends'.

pub mod echo;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use crate::datatype::{self, AccOp, DataType};
use crate::error::{Error, Result, TransportError};
use crate::transport::{
    Capabilities, Event, Fetched, Issued, LentBuf, NativeAtomic, Notice, RemoteSegment, Segment,
    Transport, UserMemory,
};
use crate::{Config, Engine, Rank};

/// The largest window a simulated rank allocates (1 GiB).
const SIM_MAX_WINDOW: usize = 1 << 30;

/// What the simulated network does natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Every operation is an active message, applied by the target's progress.
    ActiveMessages,
    /// Put, get, fetch-and-add/replace/no-op on 4- and 8-byte integers and
    /// compare-and-swap on 8-byte integers are native, completing asynchronously.
    Rdma,
    /// Like shared memory: every op native (all atomics), native passive-target locks
    /// and PSCW notices that need no message and no help from the target.
    SharedMemory,
    /// Native puts and gets, no native atomics; a put is complete at the origin in its
    /// call and travels in the pair's message stream: the target places it when it
    /// takes in what came before it, and before anything after it
    /// ([`Capabilities::ordered_puts`], as libfabric's tcp providers do).
    OrderedPuts,
    /// [`Rdma`](Profile::Rdma) whose puts carry notifications
    /// ([`Capabilities::notified_puts_from`] 0, as verbs' RDMA WRITE with immediate data): a
    /// notified put is one native op, and its notice reaches the target's poll after
    /// the data, in order with the sender's messages.
    RdmaNotified,
}

impl Profile {
    fn capabilities(self) -> Capabilities {
        match self {
            Profile::ActiveMessages => Capabilities::ACTIVE_MESSAGES_ONLY,
            Profile::Rdma => {
                let mut atomics = 0;
                for dt in [DataType::U64, DataType::I64, DataType::U32, DataType::I32] {
                    for op in [AccOp::Sum, AccOp::Replace, AccOp::NoOp] {
                        atomics |= Capabilities::atomic_bit(op, dt);
                    }
                }
                Capabilities {
                    rdma_write: true,
                    rdma_read: true,
                    atomics,
                    compare_and_swap: (1 << DataType::U64 as u16) | (1 << DataType::I64 as u16),
                    inject_size: 64,
                    max_message: 1 << 20,
                    shared_memory: true,
                    native_locks: false,
                    get_in_call: false,
                    locked_atomics: false,
                    max_atomic_elements: usize::MAX,
                    ordered_puts: false,
                    notified_puts_from: usize::MAX,
                    // Gets of a buffer the request owns from this size land in it
                    // (`get_lent`), as on libfabric.
                    lent_gets_from: SIM_LENT_FROM,
                    lent_puts_from: SIM_LENT_FROM,
                }
            }
            Profile::SharedMemory => Capabilities {
                atomics: Capabilities::all_atomics(),
                compare_and_swap: 0x7fe,
                locked_atomics: true,
                native_locks: true,
                ..Profile::Rdma.capabilities()
            },
            Profile::OrderedPuts => Capabilities {
                atomics: 0,
                compare_and_swap: 0,
                shared_memory: false,
                ordered_puts: true,
                ..Profile::Rdma.capabilities()
            },
            Profile::RdmaNotified => Capabilities {
                notified_puts_from: 0,
                ..Profile::Rdma.capabilities()
            },
        }
    }
}

/// xorshift64*: small, seeded, reproducible.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

enum Bytes {
    Owned(Vec<u8>),
    User(Box<dyn UserMemory>),
}

impl Bytes {
    fn get(&mut self) -> &mut [u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::User(u) => u.bytes_mut(),
        }
    }
}

/// Window memory of a simulated rank: bytes behind a mutex, which also makes `update`
/// atomic with respect to the simulated native atomics.
pub struct SimSegment {
    bytes: Mutex<Bytes>,
    len: usize,
}

impl SimSegment {
    fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(self.bytes.lock().unwrap_or_else(|e| e.into_inner()).get())
    }
}

impl Segment for SimSegment {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.with(|b| dst.copy_from_slice(&b[offset..offset + dst.len()]));
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.with(|b| b[offset..offset + src.len()].copy_from_slice(src));
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        self.with(|b| f(&mut b[offset..offset + len]));
    }
    fn descriptor(&self) -> Vec<u8> {
        Vec::new()
    }
    fn shared_base(&self) -> Option<usize> {
        Some(self.with(|b| b.as_ptr() as usize))
    }
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>> {
        let me = Arc::into_inner(self)?;
        match me.bytes.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Bytes::User(u) => Some(u),
            Bytes::Owned(_) => None,
        }
    }
}

struct PendingNative {
    token: u64,
    target: Rank,
    win: u32,
    offset: u64,
    what: NativeOwned,
    /// A notified put's counter: its notice follows the data to the target.
    notice: Option<u32>,
    /// A get's buffer lent by its request (`get_lent`): the data lands there, and the
    /// loan goes back before the completion is reported.
    lent: Option<LentBuf>,
}

enum NativeOwned {
    Put(Vec<u8>),
    Get(usize),
    Accumulate {
        op: AccOp,
        datatype: DataType,
        operand: Vec<u8>,
        fetch: bool,
    },
    CompareAndSwap {
        compare: Vec<u8>,
        swap: Vec<u8>,
    },
}

#[derive(Default)]
struct Collective {
    generation: u64,
    arrived: usize,
    slots: Vec<Vec<u8>>,
    result: Arc<Vec<Vec<u8>>>,
}

/// What travels from one rank to another, in order.
enum Arrival {
    /// An active message, handed to the engine.
    Message(Vec<u8>),
    /// An ordered put ([`Profile::OrderedPuts`]), placed by the receiver when it takes
    /// it in.
    Put {
        win: u32,
        offset: u64,
        data: Vec<u8>,
    },
    /// A notified put's notice ([`Profile::RdmaNotified`]), sent once its data is in.
    Notice { win: u32, index: u32 },
}

/// The simulated network shared by all ranks of one run.
pub struct Network {
    size: usize,
    profile: Profile,
    /// inboxes[receiver][sender]: FIFO per pair.
    inboxes: Vec<Mutex<Vec<VecDeque<Arrival>>>>,
    segments: Mutex<HashMap<(u32, Rank), Arc<dyn Segment>>>,
    /// Native lock words: (exclusive held, shared holders) per (window, rank).
    locks: Mutex<HashMap<(u32, Rank), (bool, u32)>>,
    /// Native barriers (SharedMemory profile): (arrived, generation) per window.
    barriers: Mutex<HashMap<u32, (usize, u64)>>,
    /// Native PSCW notices (SharedMemory profile): count per (window, receiver, sender,
    /// complete?).
    notices: Mutex<HashMap<(u32, Rank, Rank, bool), u64>>,
    collective: Mutex<Collective>,
    collective_cv: Condvar,
    dead: Vec<AtomicBool>,
    seed: u64,
    /// Fetched buffers the engines gave back ([`Transport::recycle_fetched`]).
    fetched_recycled: AtomicU64,
}

impl Network {
    /// A network of `size` ranks.
    pub fn new(size: usize, profile: Profile, seed: u64) -> Arc<Network> {
        Arc::new(Network {
            size,
            profile,
            inboxes: (0..size)
                .map(|_| Mutex::new((0..size).map(|_| VecDeque::new()).collect()))
                .collect(),
            segments: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            barriers: Mutex::new(HashMap::new()),
            notices: Mutex::new(HashMap::new()),
            collective: Mutex::new(Collective {
                slots: vec![Vec::new(); size],
                ..Default::default()
            }),
            collective_cv: Condvar::new(),
            dead: (0..size).map(|_| AtomicBool::new(false)).collect(),
            seed,
            fetched_recycled: AtomicU64::new(0),
        })
    }

    /// How many fetched buffers the engines of this network gave back after copying them
    /// to their callers ([`Transport::recycle_fetched`]).
    pub fn fetched_recycled(&self) -> u64 {
        self.fetched_recycled.load(Ordering::Relaxed)
    }

    /// Marks `rank` dead: peers' next polls report [`Event::PeerFailed`].
    pub fn kill(&self, rank: Rank) {
        self.dead[rank as usize].store(true, Ordering::SeqCst);
        self.collective_cv.notify_all();
    }

    /// The endpoint of `rank`.
    pub fn endpoint(self: &Arc<Self>, rank: Rank) -> SimTransport {
        SimTransport {
            net: self.clone(),
            rank,
            rng: Mutex::new(Rng::new(self.seed ^ (u64::from(rank) << 32))),
            pending: Mutex::new(VecDeque::new()),
            reported_dead: Mutex::new(vec![false; self.size]),
        }
    }

    fn segment(&self, win: u32, rank: Rank) -> Option<Arc<dyn Segment>> {
        self.segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(win, rank))
            .cloned()
    }
}

/// Gets and puts of a buffer their request holds, from this many bytes, are lent to the
/// simulated transport ([`Capabilities::lent_gets_from`], [`Capabilities::lent_puts_from`])
/// in the RDMA profiles.
pub const SIM_LENT_FROM: usize = 256;

/// What a completed native op hands the engine: its fetched bytes, or, for a get into
/// a lent buffer, none (they are in the buffer, which goes back to its request here).
fn land(p: &mut PendingNative, data: Option<Vec<u8>>) -> Option<Fetched> {
    match p.lent.take() {
        Some(mut lent) => {
            let bytes = data.unwrap_or_default();
            let dst = lent.bytes_mut();
            let n = dst.len().min(bytes.len());
            dst[..n].copy_from_slice(&bytes[..n]);
            drop(lent);
            Some(Fetched::default())
        }
        None => data.map(|v| Fetched::copy_of(&v)),
    }
}

/// One rank's endpoint on the simulated [`Network`].
pub struct SimTransport {
    net: Arc<Network>,
    rank: Rank,
    rng: Mutex<Rng>,
    pending: Mutex<VecDeque<PendingNative>>,
    reported_dead: Mutex<Vec<bool>>,
}

impl SimTransport {
    fn roll(&self, n: u64) -> u64 {
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).below(n)
    }

    fn alive(&self, target: Rank) -> std::result::Result<(), TransportError> {
        if self.net.dead[target as usize].load(Ordering::SeqCst) {
            Err(TransportError::PeerUnreachable(target))
        } else {
            Ok(())
        }
    }

    fn apply(&self, p: &mut PendingNative) -> std::result::Result<Option<Vec<u8>>, TransportError> {
        let seg = self
            .net
            .segment(p.win, p.target)
            .ok_or(TransportError::Failed("no such window".into()))?;
        let off = p.offset as usize;
        let len = match &p.what {
            NativeOwned::Put(d) => p.lent.as_ref().map_or(d.len(), LentBuf::len),
            NativeOwned::Get(n) => *n,
            NativeOwned::Accumulate { operand, .. } => operand.len(),
            NativeOwned::CompareAndSwap { compare, .. } => compare.len(),
        };
        if off + len > seg.len() {
            return Err(TransportError::Failed(
                "remote access outside the registered region".into(),
            ));
        }
        let lent_source = match p.what {
            NativeOwned::Put(_) => p.lent.as_mut().map(|l| l.bytes().to_vec()),
            _ => None,
        };
        let mut out = None;
        seg.update(off, len, &mut |t| match &p.what {
            // A put from a lent buffer: its bytes, read now (the write).
            NativeOwned::Put(d) => match lent_source.as_deref() {
                Some(src) => t.copy_from_slice(src),
                None => t.copy_from_slice(d),
            },
            NativeOwned::Get(_) => out = Some(t.to_vec()),
            NativeOwned::Accumulate {
                op,
                datatype,
                operand,
                fetch,
            } => {
                if *fetch {
                    out = Some(t.to_vec());
                }
                datatype::accumulate(*op, *datatype, t, operand);
            }
            NativeOwned::CompareAndSwap { compare, swap } => {
                out = Some(t.to_vec());
                datatype::compare_and_swap(t, compare, swap);
            }
        });
        if let Some(index) = p.notice {
            // The data is in: the notice goes behind whatever this rank sent before.
            let mut inbox = self.net.inboxes[p.target as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            inbox[self.rank as usize].push_back(Arrival::Notice { win: p.win, index });
        }
        Ok(out)
    }

    /// Native op: half the time complete at once, else later at a poll.
    fn native(&self, p: PendingNative) -> std::result::Result<Issued, TransportError> {
        self.alive(p.target)?;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        // Like an RDMA queue pair, ops apply in issue order; completions may come late.
        if pending.is_empty() && self.roll(2) == 0 {
            drop(pending);
            let mut p = p;
            return self
                .apply(&mut p)
                .map(|d| Issued::Complete(land(&mut p, d)));
        }
        pending.push_back(p);
        Ok(Issued::Pending)
    }
}

impl Transport for SimTransport {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn recycle_fetched(&self, bytes: Vec<u8>) {
        drop(bytes);
        self.net.fetched_recycled.fetch_add(1, Ordering::Relaxed);
    }
    fn size(&self) -> usize {
        self.net.size
    }
    fn capabilities(&self, _target: Rank) -> Capabilities {
        self.net.profile.capabilities()
    }
    fn allocate(
        &self,
        len: usize,
        shared: Option<&crate::transport::SharedAmong<'_>>,
    ) -> std::result::Result<Arc<dyn Segment>, TransportError> {
        if shared.is_some() && !self.net.profile.capabilities().shared_memory {
            return Err(TransportError::Unsupported(
                "shared memory in the active-message profile",
            ));
        }
        // Threads of one process share its memory: a bound instead of an abort.
        if len > SIM_MAX_WINDOW {
            return Err(TransportError::Failed(format!(
                "the simulated transport allocates at most {SIM_MAX_WINDOW} bytes per window"
            )));
        }
        Ok(Arc::new(SimSegment {
            bytes: Mutex::new(Bytes::Owned(vec![0; len])),
            len,
        }))
    }
    fn expose(
        &self,
        mut memory: Box<dyn UserMemory>,
    ) -> std::result::Result<Arc<dyn Segment>, TransportError> {
        let len = memory.bytes_mut().len();
        Ok(Arc::new(SimSegment {
            bytes: Mutex::new(Bytes::User(memory)),
            len,
        }))
    }
    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        _remote: &[RemoteSegment],
    ) -> std::result::Result<(), TransportError> {
        if let Some(s) = local {
            self.net
                .segments
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((win, self.rank), s.clone());
        }
        Ok(())
    }
    fn window_freed(&self, win: u32) {
        self.net
            .segments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(win, self.rank));
    }
    fn shared_base(&self, win: u32, rank: Rank) -> Option<usize> {
        self.net.segment(win, rank)?.shared_base()
    }
    fn allgather(&self, mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, TransportError> {
        let net = &self.net;
        let mut c = net.collective.lock().unwrap_or_else(|e| e.into_inner());
        let generation = c.generation;
        c.slots[self.rank as usize] = mine.to_vec();
        c.arrived += 1;
        if c.arrived == net.size {
            c.result = Arc::new(std::mem::replace(&mut c.slots, vec![Vec::new(); net.size]));
            c.arrived = 0;
            c.generation += 1;
            net.collective_cv.notify_all();
            return Ok(c.result.as_ref().clone());
        }
        loop {
            let (g, timeout) = net
                .collective_cv
                .wait_timeout(c, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner());
            c = g;
            if c.generation != generation {
                return Ok(c.result.as_ref().clone());
            }
            if let Some(dead) = net.dead.iter().position(|d| d.load(Ordering::SeqCst)) {
                return Err(TransportError::PeerUnreachable(dead as Rank));
            }
            let _ = timeout;
        }
    }
    fn barrier(&self) -> std::result::Result<(), TransportError> {
        self.allgather(&[]).map(|_| ())
    }
    fn send(&self, target: Rank, packet: &[u8]) -> std::result::Result<(), TransportError> {
        self.alive(target)?;
        let mut inbox = self.net.inboxes[target as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        inbox[self.rank as usize].push_back(Arrival::Message(packet.to_vec()));
        Ok(())
    }
    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        if self.net.profile == Profile::OrderedPuts {
            // Into the pair's stream: complete here, placed when the target polls.
            self.alive(target)?;
            let mut inbox = self.net.inboxes[target as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            inbox[self.rank as usize].push_back(Arrival::Put {
                win,
                offset,
                data: data.to_vec(),
            });
            return Ok(Issued::Complete(None));
        }
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what: NativeOwned::Put(data.to_vec()),
            notice: None,
            lent: None,
        })
    }
    fn put_notified(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        index: u32,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        if data.len() < self.net.profile.capabilities().notified_puts_from {
            return Err(TransportError::Unsupported("notified puts"));
        }
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what: NativeOwned::Put(data.to_vec()),
            notice: Some(index),
            lent: None,
        })
    }
    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what: NativeOwned::Get(len),
            notice: None,
            lent: None,
        })
    }
    fn put_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        // A dead target takes no loan: the caller keeps it.
        self.alive(target)?;
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what: NativeOwned::Put(Vec::new()),
            notice: None,
            lent: loan.take(),
        })
    }
    fn get_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        let len = loan.as_ref().map_or(0, LentBuf::len);
        // A dead target takes no loan: the caller keeps it.
        self.alive(target)?;
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what: NativeOwned::Get(len),
            notice: None,
            lent: loan.take(),
        })
    }
    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        let what = match atomic {
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                fetch,
            } => {
                if !self.net.profile.capabilities().has_atomic(op, datatype) {
                    return Err(TransportError::Unsupported("atomic not offered"));
                }
                NativeOwned::Accumulate {
                    op,
                    datatype,
                    operand: operand.to_vec(),
                    fetch,
                }
            }
            NativeAtomic::CompareAndSwap { compare, swap, .. } => NativeOwned::CompareAndSwap {
                compare: compare.to_vec(),
                swap: swap.to_vec(),
            },
        };
        self.native(PendingNative {
            token,
            target,
            win,
            offset,
            what,
            notice: None,
            lent: None,
        })
    }
    fn barrier_arrive(&self, win: u32) -> std::result::Result<Option<u64>, TransportError> {
        if self.net.profile != Profile::SharedMemory {
            return Ok(None);
        }
        let mut b = self.net.barriers.lock().unwrap_or_else(|e| e.into_inner());
        let (arrived, generation) = b.entry(win).or_default();
        let ticket = *generation;
        *arrived += 1;
        if *arrived == self.net.size {
            *arrived = 0;
            *generation += 1;
        }
        Ok(Some(ticket))
    }
    fn barrier_done(&self, win: u32, ticket: u64) -> std::result::Result<bool, TransportError> {
        let b = self.net.barriers.lock().unwrap_or_else(|e| e.into_inner());
        Ok(b.get(&win).is_some_and(|(_, g)| *g != ticket))
    }
    fn notify(
        &self,
        win: u32,
        rank: Rank,
        notice: Notice,
    ) -> std::result::Result<bool, TransportError> {
        if self.net.profile != Profile::SharedMemory {
            return Ok(false);
        }
        self.alive(rank)?;
        let key = (win, rank, self.rank, notice == Notice::Complete);
        *self
            .net
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
        Ok(true)
    }
    fn take_notices(&self, win: u32, from: Rank, notice: Notice) -> u64 {
        let key = (win, self.rank, from, notice == Notice::Complete);
        self.net
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .unwrap_or(0)
    }
    fn try_lock(
        &self,
        win: u32,
        target: Rank,
        exclusive: bool,
    ) -> std::result::Result<bool, TransportError> {
        self.alive(target)?;
        if self.net.profile != Profile::SharedMemory {
            return Err(TransportError::Unsupported("native locks"));
        }
        let mut locks = self.net.locks.lock().unwrap_or_else(|e| e.into_inner());
        let word = locks.entry((win, target)).or_default();
        let free = !word.0 && (!exclusive || word.1 == 0);
        if free {
            if exclusive {
                word.0 = true;
            } else {
                word.1 += 1;
            }
        }
        Ok(free)
    }
    fn unlock(
        &self,
        win: u32,
        target: Rank,
        exclusive: bool,
    ) -> std::result::Result<(), TransportError> {
        let mut locks = self.net.locks.lock().unwrap_or_else(|e| e.into_inner());
        let word = locks.entry((win, target)).or_default();
        if exclusive {
            word.0 = false;
        } else {
            word.1 = word.1.saturating_sub(1);
        }
        Ok(())
    }
    fn ordered_puts_delivered(&self, target: Rank) -> bool {
        let inbox = self.net.inboxes[target as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        !inbox[self.rank as usize]
            .iter()
            .any(|a| matches!(a, Arrival::Put { .. }))
    }
    fn poll(&self, events: &mut Vec<Event>) -> std::result::Result<usize, TransportError> {
        let before = events.len();
        // Native completions: a random number from the front (issue order).
        let mut done = Vec::new();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let n = self.roll(pending.len() as u64 + 1) as usize;
            done.extend(pending.drain(..n));
        }
        for mut p in done {
            match self.apply(&mut p) {
                Ok(data) => events.push(Event::Completed {
                    token: p.token,
                    data: land(&mut p, data),
                }),
                Err(error) => events.push(Event::Failed {
                    token: p.token,
                    error,
                }),
            }
        }
        // Messages: a random subset of senders delivers a random number each (delays and
        // interleaving across senders; FIFO within one sender).
        if self.roll(4) != 0 {
            let mut inbox = self.net.inboxes[self.rank as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let n = inbox.len();
            let start = self.roll(n as u64) as usize;
            for k in 0..n {
                let from = (start + k) % n;
                let take = 1 + self.roll(4) as usize;
                let mut taken = 0;
                while taken < take {
                    match inbox[from].pop_front() {
                        Some(Arrival::Message(data)) => {
                            taken += 1;
                            events.push(Event::Received {
                                from: from as Rank,
                                data,
                            })
                        }
                        Some(Arrival::Notice { win, index }) => {
                            taken += 1;
                            events.push(Event::Notified {
                                from: from as Rank,
                                win,
                                index,
                            })
                        }
                        Some(Arrival::Put { win, offset, data }) => {
                            // Placed in order, as the target's provider would; one the
                            // target cannot place (no such window, out of its bounds)
                            // fails the origin's connection in a real backend: dropped
                            // here, the protocol tests never send one.
                            if let Some(seg) = self.net.segment(win, self.rank) {
                                let off = offset as usize;
                                if off + data.len() <= seg.len() {
                                    seg.update(off, data.len(), &mut |t| t.copy_from_slice(&data));
                                }
                            }
                        }
                        None => break,
                    }
                }
            }
        }
        let mut reported = self.reported_dead.lock().unwrap_or_else(|e| e.into_inner());
        for (r, d) in self.net.dead.iter().enumerate() {
            if d.load(Ordering::SeqCst) && !reported[r] && r as Rank != self.rank {
                reported[r] = true;
                events.push(Event::PeerFailed { rank: r as Rank });
            }
        }
        Ok(events.len() - before)
    }
}

/// Runs `f` on `n` simulated ranks (threads) with the default [`Config`] (timeout 20 s).
/// Returns the first error or panic of any rank, or a deadline error if the run takes
/// longer than 60 s (it never hangs a test).
pub fn run<F>(n: usize, profile: Profile, seed: u64, f: F) -> std::result::Result<(), String>
where
    F: Fn(Engine) -> Result<()> + Send + Sync + 'static,
{
    let config = Config {
        timeout: Some(Duration::from_secs(20)),
        ..Config::default()
    };
    run_with(n, profile, seed, config, f)
}

/// [`run`] with a given configuration.
pub fn run_with<F>(
    n: usize,
    profile: Profile,
    seed: u64,
    config: Config,
    f: F,
) -> std::result::Result<(), String>
where
    F: Fn(Engine) -> Result<()> + Send + Sync + 'static,
{
    let net = Network::new(n, profile, seed);
    run_on(&net, config, Duration::from_secs(60), f)
}

/// Runs `f` on every rank of `net`, with a deadline for the whole run.
pub fn run_on<F>(
    net: &Arc<Network>,
    config: Config,
    deadline: Duration,
    f: F,
) -> std::result::Result<(), String>
where
    F: Fn(Engine) -> Result<()> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel::<(Rank, std::result::Result<(), String>)>();
    for rank in 0..net.size as Rank {
        let (f, tx, config) = (f.clone(), tx.clone(), config.clone());
        let transport = Arc::new(net.endpoint(rank));
        std::thread::Builder::new()
            .name(format!("sim-rank-{rank}"))
            .spawn(move || {
                let engine = Engine::new(transport, config);
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(engine)));
                let out = match out {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(format!("rank {rank}: {e}")),
                    Err(p) => Err(format!(
                        "rank {rank} panicked: {}",
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    )),
                };
                let _ = tx.send((rank, out));
            })
            .map_err(|e| e.to_string())?;
    }
    drop(tx);
    let end = std::time::Instant::now() + deadline;
    let mut first_err = None;
    for _ in 0..net.size {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((_, Ok(()))) => {}
            Ok((_, Err(e))) => {
                first_err.get_or_insert(e);
            }
            Err(_) => return Err(format!("deadline of {deadline:?} passed: a rank hangs")),
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Converts a run's error text back for `?` in tests.
pub fn failed(msg: impl Into<String>) -> Error {
    TransportError::Failed(msg.into()).into()
}
