//! rma-shm: the shared-memory transport of rma, for ranks on one node.
//!
//! - **Window memory** from `allocate`/`allocate_shared` lives in shared memory that
//!   every local rank maps; put and get are copies into or out of the peer's
//!   mapping, accumulates, fetch-and-op and compare-and-swap are CPU atomics per element
//!   (all integer widths natively, other ops and floats by compare-exchange loops), so
//!   accumulates stay atomic with respect to each other across processes.
//! - **Windows over user memory** (`create`) live in shared memory too: the user's bytes
//!   are copied in at creation and back at free. With `RMA_SHM_CMA=1` they stay in the
//!   user's memory instead and are reached by cross-memory attach
//!   (process_vm_writev/readv; their accumulates are active messages), as are windows
//!   created in place (`Comm::create_window_in_place`, MPI_Win_create of librma-mpi):
//!   for that, and only then, each rank lifts Yama's ptrace restriction for processes of
//!   the same user (`PR_SET_PTRACER_ANY`), which lets any of them attach to it.
//! - **Dynamic windows**: each rank lists the regions it attaches in a directory in its
//!   inbox (a seqlock, at the window's lock slot), with no action by the owner per op. A
//!   region attached as a `Vec` (rma's `attach`) moves into a segment of its own, which
//!   peers map through its descriptor on first use: every op on it native, as on
//!   allocated memory. A region of the application's memory in place (`attach_memory`,
//!   librma-mpi's MPI_Win_attach) is reached by cross-memory attach for puts and gets.
//!   Accumulates on it, and anything unlisted (past a directory's 127 regions), go as
//!   active messages, which the owner checks against its regions. (As for every
//!   cross-memory write, an op racing the owner's detach of its region is the
//!   program's error, as MPI says; a mapped region outlives its detach in the peers
//!   that mapped it.)
//! - **MINLOC and MAXLOC** (and replace and no-op) on (value, location) pairs are a
//!   read-modify-write of the whole pair under the target window's accumulate lock, a
//!   word beside its lock word (one pair may be 16 bytes or sit 4-aligned, where no
//!   CPU atomic reaches): origins take it for their native updates, the owner for the
//!   active messages it applies, so every pair update of the window is whole.
//! - **Passive-target locks** are words in shared memory taken with atomics: lock, put
//!   and unlock complete while the target computes, with no action by the target. Each
//!   live window (allocated, shared or over user memory) takes one of a process's 1023
//!   lock slots ([`MAX_LIVE_WINDOWS`]); the 1024th window alive at once is an error. An
//!   exclusive word names its holder, so that the exclusive lock of a rank that dies is
//!   revoked by the survivors; a dead rank's shared locks (a count) stay taken.
//! - **Control** (fence barriers, PSCW post/complete, RMA_DONE, acks) travels through
//!   single-producer single-consumer rings in shared memory, one per ordered pair.
//! - **Waiting** (for a notice, an acknowledgement, a peer's barrier) spins; the engine's
//!   waits yield the core now and then only when the job's ranks outnumber the CPUs they
//!   may run on together (rma-backend's `oversubscribed`). Beside other work a yield
//!   hands the slice away and the notice waits for it: beside two CPU hogs on 2 cores,
//!   put + fence took 0.36-6.0 us yielding and 0.20 us not, PSCW 6-19 us and 0.17.
//! - **Segments** (window memory and each rank's inbox) are anonymous: memfds that peers
//!   of the same user open through `/proc/<pid>/fd/<fd>` while window creation runs, and
//!   whose descriptor the owner closes once every rank has mapped them. They have no name,
//!   so nothing stays in /dev/shm whatever ends the job (an exit, a crash, SIGKILL of every
//!   rank at once), and a process's descriptors stay flat however many windows it makes.
//!   A rank's part of a window prefers the NUMA node the rank runs on when it creates it
//!   (`mbind`, the segment's shared policy), whoever touches a page first.
//! - **Memory barriers** are the engine's `Transport::memory_sync` calls, placed per the
//!   "RMA + shared memory" rows of seed 004 (see rma-core's `window` module); the rings
//!   publish with Release/Acquire.

mod atomics;
mod directory;
mod ring;
mod sys;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rma_core::transport::{
    get_block_by_block, put_block_by_block, Event, Fetched, Issued, NativeAtomic, Notice,
    RemoteSegment, Segment, SharedAmong, Transport, UserMemory, Wake, WindowOps,
};
use rma_core::{AccOp, BackendError, Bootstrap, Capabilities, DataType, Rank, TransportError};

use directory::{Directory, Entry, DIRECTORY_BYTES};
use ring::Ring;
use rma_backend::{process_alive, Collectives, PeerWatch, Region, Word};
use sys::Mapping;

/// Lock words per process (one per live window segment), 64 bytes apart; the last slot
/// is not a lock but this process's departure word.
const LOCK_SLOTS: usize = 1024;
const DEPARTURE_SLOT: usize = LOCK_SLOTS - 1;
/// Windows a process can have alive at once: one lock slot each, the last slot being the
/// departure word.
pub const MAX_LIVE_WINDOWS: usize = LOCK_SLOTS - 1;
const DEPARTED: u64 = 0x6465_7061_7274_6564;
/// In the departure word's cache line: the doorbell (a futex word senders of active
/// messages bump when the owner's progress agent sleeps) and the agent's sleeping flag.
const DOORBELL: usize = DEPARTURE_SLOT * 64 + 8;
const SLEEPING: usize = DEPARTURE_SLOT * 64 + 12;
const LOCK_TABLE: usize = LOCK_SLOTS * 64;
/// Bytes of each ring (one per sender in every inbox).
const RING_BYTES: usize = 256 * 1024;
/// Packet buffers kept for the next polls (a pass rarely takes more at once).
const SPARE_PACKETS: usize = 16;
const EXCLUSIVE: u64 = 1 << 63;

/// The numeric variables this backend reads (see rma-ofi's `ENV_NUMBERS`).
pub const ENV_NUMBERS: &[(&str, usize, usize, &str)] = &[("RMA_SHM_CMA", 0, 1, "0 or 1")];

/// A system call's failure, kept whole under what was being done (an action: "opening
/// rank 1's inbox").
fn fail(doing: impl Into<String>, e: std::io::Error) -> TransportError {
    BackendError::new(doing, e).into()
}

/// The lock slots of this process's inbox.
#[derive(Debug, Default)]
struct SlotTable {
    used: Vec<bool>,
}

/// A window segment in this process.
struct LocalSegment {
    region: Region,
    /// Shared-memory mapping (allocate, allocate_shared); `None` for user memory.
    mapping: Option<Arc<Mapping>>,
    /// For shared-memory segments: (where peers open it, offset of this rank's part,
    /// bytes of the whole segment), what peers need to map it.
    shm: Option<(String, u64, u64)>,
    user: Mutex<Option<Box<dyn UserMemory>>>,
    lock_slot: u32,
    slots: Arc<Mutex<SlotTable>>,
    /// A dynamic window's part (no bytes of its own: a lock slot, whose directory lists
    /// the regions this rank attaches).
    dynamic: bool,
    /// The words of this window's lock slot in this rank's inbox (lock word, accumulate
    /// lock), for shared-memory segments: the active messages of pair updates this
    /// rank applies take the accumulate lock, as peers' native ones do.
    lock_words: Option<Region>,
}

impl Drop for LocalSegment {
    fn drop(&mut self) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).used[self.lock_slot as usize] = false;
    }
}

impl Segment for LocalSegment {
    fn len(&self) -> usize {
        self.region.len()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.region.read(offset, dst);
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.region.write(offset, src);
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        // Active-message accumulates arrive here one element at a time (the engine's
        // target side). On mapped memory, ranks of this node may be applying CPU atomics
        // to the same element at the same moment (in a hybrid world the network's ranks
        // reach this window through active messages while the node's ranks use native
        // atomics): a compare-exchange loop keeps the element atomic against both.
        if self.mapping.is_some() && atomics::update_element(&self.region, offset, len, f) {
            return;
        }
        // User memory (reached by peers through active messages only, serialized by the
        // engine's window lock) or a misaligned element: through a copy.
        self.region.update_through_copy(offset, len, f);
    }
    fn only_messages_reach(&self) -> bool {
        // The application's memory (not mapped by peers): peers reach it by cross-memory
        // attach for puts and gets, and by active messages for every accumulate.
        self.mapping.is_none()
    }
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        match &self.lock_words {
            Some(words) => {
                with_accumulate_lock(words, || self.region.update_through_copy(offset, len, f))
            }
            // No peer updates this memory natively: the engine's serialization suffices.
            None => self.region.update_through_copy(offset, len, f),
        }
    }
    fn descriptor(&self) -> Vec<u8> {
        let mut d = Vec::new();
        if self.dynamic {
            d.push(2);
            d.extend_from_slice(&self.lock_slot.to_le_bytes());
            d.extend_from_slice(&sys::pid().to_le_bytes());
            // A byte of ours that peers read once, to learn whether cross-memory attach
            // to this process is allowed.
            d.extend_from_slice(&(std::ptr::addr_of!(PROBE) as u64).to_le_bytes());
            return d;
        }
        match &self.shm {
            Some((name, offset, total)) => {
                d.push(0);
                d.extend_from_slice(&self.lock_slot.to_le_bytes());
                d.extend_from_slice(&offset.to_le_bytes());
                d.extend_from_slice(&total.to_le_bytes());
                d.extend_from_slice(name.as_bytes());
            }
            None => {
                d.push(1);
                d.extend_from_slice(&self.lock_slot.to_le_bytes());
                d.extend_from_slice(&sys::pid().to_le_bytes());
                d.extend_from_slice(&(self.region.base() as u64).to_le_bytes());
            }
        }
        d
    }
    fn shared_base(&self) -> Option<usize> {
        self.mapping.as_ref().map(|_| self.region.base() as usize)
    }
    fn local_base(&self) -> Option<usize> {
        Some(self.region.base() as usize)
    }
    fn atomic_u64(&self, offset: usize) -> Option<&std::sync::atomic::AtomicU64> {
        // Mapped segments only: peers reach them by CPU atomics. (User memory in place
        // is reached by cross-memory attach, which is no atomic.)
        let aligned = (self.region.base() as usize)
            .wrapping_add(offset)
            .is_multiple_of(8);
        (self.mapping.is_some() && aligned && self.region.contains(offset, 8))
            .then(|| self.region.atomic_u64(offset))
    }
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>> {
        let me = Arc::into_inner(self)?;
        let user = me.user.lock().unwrap_or_else(|e| e.into_inner()).take();
        user
    }
}

/// How this process reaches one rank's part of one window.
#[derive(Debug)]
enum PeerMemory {
    /// Mapped here: load/store and atomics.
    Mapped(Region),
    /// Another process's user memory: cross-memory attach.
    CrossMemory { pid: u32, addr: u64, len: usize },
    /// A dynamic window's regions in another process (or this one), as its [`Directory`]
    /// lists them: mapped here (regions the library copied into a segment of its own),
    /// or cross-memory attach (the application's memory in place).
    Dynamic {
        pid: u32,
        directory: Directory,
        /// The peer's region segments mapped here so far: (address, generation) and the
        /// mapping (kept until the window goes).
        mapped: RwLock<Vec<MappedRegion>>,
    },
    /// Not reachable natively: active messages.
    None,
}

/// A peer's region of a dynamic window, mapped here.
#[derive(Debug)]
struct MappedRegion {
    address: u64,
    generation: u64,
    region: Region,
    _mapping: Arc<Mapping>,
}

/// How an op reaches bytes of a peer's dynamic window.
enum Reached {
    /// Mapped here: the region and the bytes' offset in it.
    Mapped(Region, usize),
    /// The application's memory of process `pid`, at the op's address.
    CrossMemory(u32),
}

struct PeerWindow {
    memory: PeerMemory,
    /// The peer's words of this window: the lock word, the barrier's, the accumulate
    /// lock ([`lock_word_at`]).
    lock: Option<Region>,
    /// The lock word alone, checked once: a lock and an unlock reach it directly.
    lock_word: Option<Word>,
    /// The peer's lock slot for this window, which also indexes the PSCW notice counters
    /// in both inboxes (None: a dynamic window made without this backend's part, whose
    /// notices go by message).
    slot: Option<usize>,
    /// The PSCW notice counters of this window between the peer and this process: ours
    /// in the peer's inbox (what we notify), the peer's in ours (what we take). Found
    /// once here, so a notice and a wait's poll look nothing up.
    notices_to: Option<NoticeWords>,
    notices_from: Option<NoticeWords>,
}

/// A pair of PSCW notice counters (posts, completes) as words checked once.
struct NoticeWords {
    post: Word,
    complete: Word,
}

impl NoticeWords {
    fn of(counters: &Region) -> NoticeWords {
        NoticeWords {
            post: counters.word_u64(0),
            complete: counters.word_u64(8),
        }
    }

    #[inline(always)]
    fn get(&self, notice: Notice) -> &AtomicU64 {
        match notice {
            Notice::Post => self.post.get(),
            Notice::Complete => self.complete.get(),
        }
    }
}

struct ShmWindow {
    peers: Vec<PeerWindow>,
    /// The fence barrier's arrival count and generation: two words after the first
    /// member's lock word for this window.
    barrier: Option<BarrierWords>,
    /// Ranks of the window's communicator (the barrier's count).
    members: usize,
    /// This process's rank: what its exclusive holds write into lock words.
    rank: Rank,
    /// A dynamic window's regions attached here, as its directory lists them (in order
    /// of attach; attach and detach rewrite the directory under this lock).
    regions: Mutex<Vec<Entry>>,
    _mappings: Vec<Arc<Mapping>>,
}

impl ShmWindow {
    /// On a dynamic window: how `len` bytes at address `address` of `target` are
    /// reached, if a region its directory lists holds them.
    #[inline]
    fn dynamic_reach(&self, target: Rank, address: u64, len: usize) -> Option<Reached> {
        let PeerMemory::Dynamic {
            pid,
            directory,
            mapped,
        } = &self.peers[target as usize].memory
        else {
            return None;
        };
        let (entry, at) = directory.find(address, len as u64)?;
        let Some(fd) = entry.fd else {
            return Some(Reached::CrossMemory(*pid));
        };
        let known =
            |m: &MappedRegion| m.address == entry.address && m.generation == entry.generation;
        if let Some(m) = mapped
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|m| known(m))
        {
            return Some(Reached::Mapped(m.region, at as usize));
        }
        let mapping =
            Arc::new(Mapping::open(&format!("/proc/{pid}/fd/{fd}"), entry.len as usize).ok()?);
        // Still listed after the open: the owner closes a region's descriptor only after
        // it took the region off its directory, so the descriptor opened was that
        // region's, not a later file's under the same number.
        if directory.find(address, len as u64).map(|(e, _)| e) != Some(entry) {
            return None;
        }
        // SAFETY: the whole mapping (its length is the entry's, checked against the
        // segment's size when opened); the mapping lives in `mapped` for the window's life.
        let region = unsafe { Region::new(mapping.ptr(), entry.len as usize) };
        mapped
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(MappedRegion {
                address: entry.address,
                generation: entry.generation,
                region,
                _mapping: mapping,
            });
        Some(Reached::Mapped(region, at as usize))
    }

    /// The owner rewrites its directory (a dynamic window's).
    fn publish_regions(&self, change: impl FnOnce(&mut Vec<Entry>)) {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut regions);
        if let Some(PeerWindow {
            memory: PeerMemory::Dynamic { directory, .. },
            ..
        }) = self.peers.get(self.rank as usize)
        {
            directory.publish(&regions);
        }
    }
}

/// An op past a dynamic window's listed regions (the engine asks
/// [`WindowOps::reaches`] first: only a region detached meanwhile comes here).
fn unlisted(what: &str) -> TransportError {
    TransportError::Failed(format!(
        "{what} outside the regions the target has attached"
    ))
}

/// A window's native operations, bound to it (what [`Transport::window_ops`] hands the
/// engine, and what the transport's own methods run after looking the window up): every
/// access checked against the target's mapping, whatever the engine checked before.
/// The most bytes of an accumulate that fetches nothing whose previous values go to
/// scratch space on the stack (larger ones to a buffer of their own).
const SCRATCH: usize = 64;

impl WindowOps for ShmWindow {
    #[inline]
    fn put_in_call(&self, target: Rank, offset: u64, data: &[u8]) -> bool {
        match self.plainly_mapped(target, offset, data.len()) {
            Some((region, at)) => {
                region.write(at, data);
                true
            }
            // Memory reached otherwise (cross-memory attach, a dynamic window's regions)
            // completes in the call too, at a syscall's or a lookup's cost; an access
            // outside the mapping fails there, and the general path reports it.
            None => {
                (target as usize) < self.peers.len()
                    && matches!(self.put(target, offset, data), Ok(Issued::Complete(_)))
            }
        }
    }

    #[inline]
    fn get_in_call(&self, target: Rank, offset: u64, dst: &mut [u8]) -> bool {
        match self.plainly_mapped(target, offset, dst.len()) {
            Some((region, at)) => {
                region.read(at, dst);
                true
            }
            None => {
                (target as usize) < self.peers.len()
                    && matches!(self.get_into(target, offset, dst), Ok(true))
            }
        }
    }

    fn put(&self, target: Rank, offset: u64, data: &[u8]) -> Result<Issued, TransportError> {
        match &self.peers[target as usize].memory {
            PeerMemory::Mapped(region) => {
                let off = offset as usize;
                if !region.contains(off, data.len()) {
                    return Err(TransportError::Failed(
                        "put outside the target's window".into(),
                    ));
                }
                region.write(off, data);
            }
            PeerMemory::CrossMemory { pid, addr, len } => {
                if offset as usize + data.len() > *len {
                    return Err(TransportError::Failed(
                        "put outside the target's window".into(),
                    ));
                }
                sys::write_remote(*pid, addr + offset, data).map_err(|e| {
                    fail(
                        format!(
                            "writing {} bytes to rank {target} (process_vm_writev)",
                            data.len()
                        ),
                        e,
                    )
                })?;
            }
            PeerMemory::Dynamic { .. } => {
                let pid = match self.dynamic_reach(target, offset, data.len()) {
                    Some(Reached::Mapped(region, at)) => {
                        region.write(at, data);
                        return Ok(Issued::Complete(None));
                    }
                    Some(Reached::CrossMemory(pid)) => pid,
                    None => return Err(unlisted("put")),
                };
                sys::write_remote(pid, offset, data).map_err(|e| {
                    fail(
                        format!(
                            "writing {} bytes to rank {target} (process_vm_writev)",
                            data.len()
                        ),
                        e,
                    )
                })?;
            }
            PeerMemory::None => return Err(TransportError::Unsupported("put to unmapped memory")),
        }
        Ok(Issued::Complete(None))
    }

    fn get_into(&self, target: Rank, offset: u64, dst: &mut [u8]) -> Result<bool, TransportError> {
        match &self.peers[target as usize].memory {
            PeerMemory::Mapped(region) => {
                if !region.contains(offset as usize, dst.len()) {
                    return Err(TransportError::Failed(
                        "get outside the target's window".into(),
                    ));
                }
                region.read(offset as usize, dst);
            }
            PeerMemory::CrossMemory { pid, addr, len } => {
                if offset as usize + dst.len() > *len {
                    return Err(TransportError::Failed(
                        "get outside the target's window".into(),
                    ));
                }
                sys::read_remote(*pid, addr + offset, dst).map_err(|e| {
                    fail(
                        format!(
                            "reading {} bytes from rank {target} (process_vm_readv)",
                            dst.len()
                        ),
                        e,
                    )
                })?;
            }
            PeerMemory::Dynamic { .. } => {
                let pid = match self.dynamic_reach(target, offset, dst.len()) {
                    Some(Reached::Mapped(region, at)) => {
                        region.read(at, dst);
                        return Ok(true);
                    }
                    Some(Reached::CrossMemory(pid)) => pid,
                    None => return Err(unlisted("get")),
                };
                sys::read_remote(pid, offset, dst).map_err(|e| {
                    fail(
                        format!(
                            "reading {} bytes from rank {target} (process_vm_readv)",
                            dst.len()
                        ),
                        e,
                    )
                })?;
            }
            PeerMemory::None => return Ok(false),
        }
        Ok(true)
    }

    fn reaches(&self, target: Rank, offset: u64, len: u64, atomic: bool) -> bool {
        match &self.peers[target as usize].memory {
            // Atomics need the region mapped here (the library's copy of a Vec).
            PeerMemory::Dynamic { directory, .. } => directory
                .find(offset, len)
                .is_some_and(|(e, _)| !atomic || e.fd.is_some()),
            PeerMemory::Mapped(_) | PeerMemory::CrossMemory { .. } => true,
            PeerMemory::None => false,
        }
    }

    fn atomic(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
    ) -> Result<Issued, TransportError> {
        let old = match atomic {
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                fetch,
            } if datatype.updated_whole() => {
                let mut old = Fetched::zeroed(operand.len());
                self.accumulate_locked(target, offset, op, datatype, operand, old.as_mut_slice())?;
                fetch.then_some(old)
            }
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                fetch: false,
            } if operand.len() <= SCRATCH => {
                // Nothing to fetch: the previous values go to scratch space on the stack,
                // not into a result carried back.
                let mut scratch = [0u8; SCRATCH];
                let old = &mut scratch[..operand.len()];
                self.accumulate_atomically(target, offset, op, datatype, operand, old)?;
                None
            }
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                fetch,
            } => {
                let old = self.with_mapped(target, offset, operand.len(), |region, off| {
                    atomics::accumulate(region, off, op, datatype, operand)
                        .ok_or(TransportError::Unsupported("misaligned atomic"))
                })?;
                fetch.then_some(old)
            }
            NativeAtomic::CompareAndSwap {
                datatype,
                compare,
                swap,
            } => {
                debug_assert_eq!(compare.len(), DataType::size(datatype));
                Some(
                    self.with_mapped(target, offset, compare.len(), |region, off| {
                        atomics::compare_and_swap(region, off, compare, swap)
                            .ok_or(TransportError::Unsupported("misaligned atomic"))
                    })?,
                )
            }
        };
        Ok(Issued::Complete(old))
    }

    fn atomic_into(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> Result<bool, TransportError> {
        self.atomic_now(target, offset, atomic, old)
    }

    fn atomic_in_call(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> bool {
        // The same body, its outcome read in place rather than built in memory.
        matches!(self.atomic_now(target, offset, atomic, old), Ok(true))
    }

    fn add_one_in_call(&self, target: Rank, offset: u64) -> bool {
        // A notification counter is one aligned word of the counters' window, mapped
        // wherever the data's window is: one release add after the data's stores.
        if let Some(word) = self.mapped_word(target, offset) {
            word.fetch_add(1, Ordering::Release);
            return true;
        }
        std::sync::atomic::fence(Ordering::Release);
        self.atomic_in_call(target, offset, NativeAtomic::ADD_ONE_U64, &mut [0u8; 8])
    }

    fn barrier_arrive(&self) -> Result<Option<u64>, TransportError> {
        let Some(b) = &self.barrier else {
            return Ok(None);
        };
        let (count, generation) = (b.count.get(), b.generation.get());
        // The generation before our arrival is the ticket: the barrier is over when it
        // moves. The last to arrive resets the count before moving the generation, so
        // nobody can arrive at the next barrier before the reset (seed 004's PROC_SYNC;
        // the engine puts the MEM_SYNCs around it).
        let ticket = generation.load(Ordering::Acquire);
        if count.fetch_add(1, Ordering::AcqRel) + 1 == self.members as u64 {
            count.store(0, Ordering::Relaxed);
            generation.fetch_add(1, Ordering::Release);
        }
        Ok(Some(ticket))
    }

    fn barrier_done(&self, ticket: u64) -> Result<bool, TransportError> {
        let b = self
            .barrier
            .as_ref()
            .ok_or(TransportError::Unsupported("native barrier"))?;
        Ok(b.generation.get().load(Ordering::Acquire) != ticket)
    }

    fn completes_in_call(&self) -> bool {
        // Every op is a copy, a process_vm call or a CPU atomic, done when it returns.
        true
    }

    fn put_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        data: &[u8],
    ) -> Result<Issued, TransportError> {
        let PeerMemory::Mapped(region) = &self.peers[target as usize].memory else {
            return put_block_by_block(self, target, offset, stride, block, data);
        };
        let (off, stride, n) = blocks_inside(region, offset, stride, block, data.len(), "put")?;
        region.write_blocks(off, stride, block, &data[..n]);
        Ok(Issued::Complete(None))
    }

    fn accumulate_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        op: AccOp,
        datatype: DataType,
        operand: &[u8],
    ) -> Result<(), TransportError> {
        let region = match &self.peers[target as usize].memory {
            PeerMemory::Mapped(r) => r,
            _ => return Err(TransportError::Unsupported("window memory not mapped")),
        };
        let (off, stride, n) =
            blocks_inside(region, offset, stride, block, operand.len(), "accumulate")?;
        let operand = &operand[..n];
        if datatype.updated_whole() {
            // Pairs and long doubles: no CPU atomic takes them; every block under the
            // window's accumulate lock, as their single updates (`atomic_into`).
            let words = self.lock_word(target)?;
            with_accumulate_lock(words, || {
                for (i, chunk) in operand.chunks(block).enumerate() {
                    region.update_through_copy(off + i * stride, chunk.len(), &mut |t| {
                        rma_core::apply_accumulate(op, datatype, t, chunk)
                    });
                }
            });
            return Ok(());
        }
        atomics::accumulate_blocks(region, off, stride, block, op, datatype, operand)
            .ok_or(TransportError::Unsupported("misaligned atomic"))
    }

    fn get_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let PeerMemory::Mapped(region) = &self.peers[target as usize].memory else {
            return get_block_by_block(self, target, offset, stride, block, dst);
        };
        let (off, stride, n) = blocks_inside(region, offset, stride, block, dst.len(), "get")?;
        region.read_blocks(off, stride, block, &mut dst[..n]);
        Ok(true)
    }

    fn try_lock(&self, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        let word = self.checked_lock_word(target)?.get();
        Ok(Self::try_lock_word(word, self.rank, exclusive))
    }

    #[inline]
    fn lock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        self.lock_word_of(target)
            .is_some_and(|word| Self::try_lock_word(word.get(), self.rank, exclusive))
    }

    #[inline]
    fn unlock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        let Some(word) = self.lock_word_of(target) else {
            return false;
        };
        Self::unlock_word(word.get(), exclusive);
        true
    }

    fn unlock(&self, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        Self::unlock_word(self.checked_lock_word(target)?.get(), exclusive);
        Ok(())
    }

    fn notify(&self, rank: Rank, notice: Notice) -> Result<bool, TransportError> {
        let Some(counters) = self
            .peers
            .get(rank as usize)
            .and_then(|p| p.notices_to.as_ref())
        else {
            return Ok(false);
        };
        // Release: the epoch's accesses (made visible by the engine's MEM_SYNC) before
        // the notice (seed 004's PSCW row: PROC_SYNC after MEM_SYNC).
        counters.get(notice).fetch_add(1, Ordering::Release);
        Ok(true)
    }

    fn take_notices(&self, from: Rank, notice: Notice) -> u64 {
        let Some(counters) = self
            .peers
            .get(from as usize)
            .and_then(|p| p.notices_from.as_ref())
        else {
            return 0;
        };
        let word = counters.get(notice);
        // A plain load first: a waiting loop reads without taking the line exclusively.
        if word.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Acquire: the peer's accesses before its notice are visible after it (the
        // engine's MEM_SYNC after PROC_SYNC follows in WIN_WAIT).
        word.swap(0, Ordering::Acquire)
    }
}

impl ShmWindow {
    /// [`WindowOps::atomic_into`]'s body, inline in it and in
    /// [`WindowOps::atomic_in_call`].
    #[inline(always)]
    fn atomic_now(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> Result<bool, TransportError> {
        match atomic {
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                ..
            } if datatype.updated_whole() => {
                self.accumulate_locked(target, offset, op, datatype, operand, old)?
            }
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                ..
            } => {
                // One 8-byte element in mapped memory (fetch_and_op of a u64, a notified
                // op's counter): its word found with one check.
                if (operand.len(), datatype.size(), old.len()) == (8, 8, 8) {
                    if let Some(word) = self.mapped_word(target, offset) {
                        atomics::word_accumulate(word, op, datatype, operand, old);
                        return Ok(true);
                    }
                }
                self.accumulate_atomically(target, offset, op, datatype, operand, old)?
            }
            NativeAtomic::CompareAndSwap { compare, swap, .. } => {
                // One 8-byte element in mapped memory: as the accumulate's above.
                if (compare.len(), swap.len(), old.len()) == (8, 8, 8) {
                    if let Some(word) = self.mapped_word(target, offset) {
                        atomics::word_compare_and_swap(word, compare, swap, old);
                        return Ok(true);
                    }
                }
                self.with_mapped(target, offset, compare.len(), |region, off| {
                    atomics::compare_and_swap_into(region, off, compare, swap, old)
                        .ok_or(TransportError::Unsupported("misaligned atomic"))
                })?
            }
        }
        Ok(true)
    }

    /// The 8-byte word at `offset` of `target`'s window where that memory is mapped here
    /// and the word lies inside it, aligned (`None` otherwise: the general path decides).
    #[inline]
    fn mapped_word(&self, target: Rank, offset: u64) -> Option<&AtomicU64> {
        let PeerMemory::Mapped(region) = &self.peers[target as usize].memory else {
            return None;
        };
        region.checked_u64(usize::try_from(offset).ok()?)
    }

    /// One attempt at a target's lock word for `rank`: taken (`true`), or held by
    /// others in a way that excludes this lock.
    #[inline(always)]
    fn try_lock_word(word: &AtomicU64, rank: Rank, exclusive: bool) -> bool {
        let cur = word.load(Ordering::Acquire);
        if cur & EXCLUSIVE != 0 || (exclusive && cur != 0) {
            return false;
        }
        // An exclusive word says who holds it (rank + 1 below the bit): a holder that
        // dies can be told from a live one, and its lock revoked (`revoke_exclusive`).
        let next = if exclusive {
            EXCLUSIVE | (u64::from(rank) + 1)
        } else {
            cur + 1
        };
        // Acquire: the lock is taken before any access of the epoch (seed 004, passive
        // row: PROC_SYNC "lock granted", then MEM_SYNC by the engine).
        word.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases a lock word this process holds.
    #[inline(always)]
    fn unlock_word(word: &AtomicU64, exclusive: bool) {
        // Release: every access of the epoch happens before the lock is seen free (seed
        // 004, passive row: MEM_SYNC by the engine, then PROC_SYNC "lock released").
        if exclusive {
            word.store(0, Ordering::Release);
        } else {
            word.fetch_sub(1, Ordering::Release);
        }
    }

    /// `target`'s lock word of this window, as an atomic checked once.
    #[inline]
    fn checked_lock_word(&self, target: Rank) -> Result<&Word, TransportError> {
        self.lock_word_of(target)
            .ok_or(TransportError::Unsupported("native locks"))
    }

    /// `target`'s lock word of this window, if it has one.
    #[inline(always)]
    fn lock_word_of(&self, target: Rank) -> Option<&Word> {
        self.peers.get(target as usize)?.lock_word.as_ref()
    }

    /// `len` bytes at `offset` of `target`'s window where its memory is mapped here as
    /// one region (not a dynamic window's regions, not memory reached by cross-memory
    /// attach), checked against the mapping: the region and the offset in it. A direct
    /// put's or get's whole call on shared memory.
    #[inline(always)]
    fn plainly_mapped(&self, target: Rank, offset: u64, len: usize) -> Option<(&Region, usize)> {
        let PeerMemory::Mapped(region) = &self.peers.get(target as usize)?.memory else {
            return None;
        };
        let at = offset as usize;
        region.contains(at, len).then_some((region, at))
    }

    /// `target`'s lock words of this window.
    #[inline]
    fn lock_word(&self, target: Rank) -> Result<&Region, TransportError> {
        self.peers[target as usize]
            .lock
            .as_ref()
            .ok_or(TransportError::Unsupported("native locks"))
    }

    /// `op` on the `datatype` elements of `operand` at `offset` of `target`'s window by
    /// CPU atomics, their previous values into `old`. Inline: the whole of an accumulate
    /// or fetch_and_op on shared memory, beside the engine's checks.
    #[inline(always)]
    fn accumulate_atomically(
        &self,
        target: Rank,
        offset: u64,
        op: AccOp,
        datatype: DataType,
        operand: &[u8],
        old: &mut [u8],
    ) -> Result<(), TransportError> {
        self.with_mapped(target, offset, operand.len(), |region, off| {
            atomics::accumulate_into(region, off, op, datatype, operand, old)
                .ok_or(TransportError::Unsupported("misaligned atomic"))
        })
    }

    /// As [`accumulate_atomically`](Self::accumulate_atomically) for elements no CPU
    /// atomic takes (MINLOC/MAXLOC pairs, long doubles): under the target window's
    /// accumulate lock, which the target's own application of active messages takes too.
    /// Out of line: it kept the atomics' path from inlining.
    #[inline(never)]
    fn accumulate_locked(
        &self,
        target: Rank,
        offset: u64,
        op: AccOp,
        datatype: DataType,
        operand: &[u8],
        old: &mut [u8],
    ) -> Result<(), TransportError> {
        let words = self.lock_word(target)?;
        self.with_mapped(target, offset, operand.len(), |region, off| {
            with_accumulate_lock(words, || {
                region.read(off, &mut old[..operand.len()]);
                region.update_through_copy(off, operand.len(), &mut |t| {
                    rma_core::apply_accumulate(op, datatype, t, operand)
                });
            });
            Ok(())
        })
    }

    /// Runs `f` on `len` bytes at `offset` of `target`'s mapped window memory, checked
    /// against the mapping. Inline always: it is most of an atomic's path, and the
    /// compiler left it out of line once the locked path of pairs joined its callers.
    #[inline(always)]
    fn with_mapped<R>(
        &self,
        target: Rank,
        offset: u64,
        len: usize,
        f: impl FnOnce(&Region, usize) -> Result<R, TransportError>,
    ) -> Result<R, TransportError> {
        let region = match &self.peers[target as usize].memory {
            PeerMemory::Mapped(r) => r,
            PeerMemory::Dynamic { .. } => {
                return match self.dynamic_reach(target, offset, len) {
                    Some(Reached::Mapped(region, at)) => f(&region, at),
                    Some(Reached::CrossMemory(_)) => {
                        Err(TransportError::Unsupported("atomic on memory in place"))
                    }
                    None => Err(unlisted("an atomic")),
                };
            }
            _ => return Err(TransportError::Unsupported("window memory not mapped")),
        };
        let off = offset as usize;
        if !region.contains(off, len) {
            return Err(outside_window());
        }
        f(region, off)
    }
}

/// An access past the target's mapped window (the engine checked the window's bounds
/// already: a mapping smaller than the window).
#[cold]
#[inline(never)]
fn outside_window() -> TransportError {
    TransportError::Failed("access outside the target's window".into())
}

/// The blocks of a strided op of `len` bytes (`block` each, `stride` apart from `offset`)
/// checked inside `region`, all of them: (offset, stride, bytes of whole blocks).
fn blocks_inside(
    region: &Region,
    offset: u64,
    stride: u64,
    block: usize,
    len: usize,
    what: &str,
) -> Result<(usize, usize, usize), TransportError> {
    let (off, stride) = (offset as usize, stride as usize);
    let count = len.checked_div(block).unwrap_or(0);
    if block == 0 || stride < block || !region.contains_blocks(off, count, block, stride) {
        return Err(TransportError::Failed(format!(
            "strided {what} outside the target's window"
        )));
    }
    Ok((off, stride, count * block))
}

/// The shared-memory transport of one process.
pub struct ShmTransport {
    collectives: Collectives,
    rank: Rank,
    size: usize,
    /// Every rank's inbox, mapped here (ours included).
    inboxes: Vec<Arc<Mapping>>,
    /// Per destination: the producer lock of our ring in its inbox, holding our cached
    /// view of its consumer index.
    send_locks: Vec<Mutex<u64>>,
    pids: Vec<u32>,
    /// The job's ranks outnumber the CPUs they may run on together: waits yield.
    oversubscribed: bool,
    /// Windows by id (ids are small: the members agree on the largest of their
    /// proposals, each one past the ids its proposer used).
    windows: RwLock<Vec<Option<Arc<ShmWindow>>>>,
    slots: Arc<Mutex<SlotTable>>,
    polls: AtomicU64,
    /// Every peer's process (all on this node), each failure reported once.
    watch: PeerWatch,
    /// Packet buffers the engine gave back ([`Transport::recycle`]), filled by the next
    /// polls: no allocation (and no fresh pages) per active message.
    spare_packets: Mutex<Vec<Vec<u8>>>,
    /// `RMA_SHM_CMA=1`: windows over user memory stay in user memory (reached by
    /// cross-memory attach) instead of being copied into a shared segment.
    cross_memory_only: bool,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

fn inbox_len(size: usize) -> usize {
    directory_table(size) + LOCK_SLOTS * DIRECTORY_BYTES
}

/// Where the dynamic windows' directories start in an inbox of a `size`-rank world: after
/// the notice counters, one per lock slot (pages of slots no dynamic window took are
/// never touched, so they take no memory).
fn directory_table(size: usize) -> usize {
    notice_table(size) + LOCK_SLOTS * size * NOTICE_BYTES
}

/// The directory of `slot` in an inbox mapping.
fn directory_at(inbox: &Arc<Mapping>, size: usize, slot: usize) -> Directory {
    assert!(slot < LOCK_SLOTS);
    let at = directory_table(size) + slot * DIRECTORY_BYTES;
    assert!(at + DIRECTORY_BYTES <= inbox.len());
    // SAFETY: inside the inbox's directory table (checked above); inbox mappings live as
    // long as the transport, which outlives its windows.
    Directory::new(unsafe { Region::new(inbox.ptr().add(at), DIRECTORY_BYTES) })
}

/// What peers read of this process once per dynamic window, to learn whether they may
/// reach it by cross-memory attach.
static PROBE: u8 = 1;

/// Where the PSCW notice counters start in an inbox of a `size`-rank world: after the
/// lock table and the rings, one pair of counters (posts, completes) per lock slot and
/// peer, that the peer increments and the inbox's owner takes.
fn notice_table(size: usize) -> usize {
    LOCK_TABLE + size * Ring::footprint(RING_BYTES)
}

/// Bytes of one (slot, peer) pair of notice counters.
const NOTICE_BYTES: usize = 16;

impl ShmTransport {
    /// Joins the job's shared-memory world: creates this rank's inbox, maps every
    /// peer's, and unlinks the names once all are mapped. Every rank must be on this node.
    pub fn new(boot: Arc<dyn Bootstrap>) -> Result<ShmTransport, TransportError> {
        let (rank, size) = (boot.rank(), boot.size());
        let cross_memory_only = std::env::var("RMA_SHM_CMA").is_ok_and(|v| v.trim() == "1");
        if cross_memory_only {
            // Peers read and write windows over our user memory with process_vm_*: Yama's
            // ptrace scope must let them. Only then: it lets any process of this user
            // attach to this one.
            sys::allow_cross_memory_attach();
        }
        let own = Arc::new(Mapping::create_anonymous(inbox_len(size)).map_err(|e| {
            fail(
                format!("creating this rank's inbox of {} bytes", inbox_len(size)),
                e,
            )
        })?);
        let path = own.path().unwrap_or_default();
        // Whatever fails from here on, the name must not outlive this call.
        let joined = (|| {
            // One collective says who is where (every rank's pid and node) and that every
            // inbox exists: the inbox is created before it, and unlinked again below if
            // the ranks turn out not to share a node.
            let hellos = rma_core::exchange_hellos(&*boot, "shm-hello", path.as_bytes())?;
            if hellos.iter().any(|h| h.node != boot.node_id().as_bytes()) {
                return Err(TransportError::Unsupported(
                    "shared memory needs every rank on one node",
                ));
            }
            let pids: Vec<u32> = hellos.iter().map(|h| h.pid).collect();
            let oversubscribed = rma_backend::oversubscribed(&hellos, boot.node_id());
            let inboxes = (0..size as Rank)
                .map(|r| {
                    if r == rank {
                        return Ok(own.clone());
                    }
                    let n = String::from_utf8_lossy(&hellos[r as usize].address);
                    Mapping::open(&n, inbox_len(size))
                        .map(Arc::new)
                        .map_err(|e| {
                            // Its descriptor gone with its process: a dead peer (typed), even
                            // where the barrier below completes (it arrived, then died).
                            if process_alive(pids[r as usize]) {
                                fail(format!("opening rank {r}'s inbox {n}"), e)
                            } else {
                                TransportError::PeerUnreachable(r)
                            }
                        })
                })
                .collect::<Result<Vec<_>, _>>();
            // The barrier even when an inbox could not be opened: a peer that already
            // unlinked its name did so because a rank died or left, and the barrier says
            // which (a typed error), where the failed open says only "no such file".
            boot.barrier()?;
            Ok::<_, TransportError>((pids, inboxes?, oversubscribed))
        })();
        // Every peer has opened it (or the job failed): the descriptor can go.
        own.unpublish();
        if joined.is_err() {
            // This process leaves the job here. Peers that mapped our inbox already (the
            // barrier passed, then a peer died before we opened its inbox) take our exit
            // for a departure, not a death of ours: they name the rank that died.
            Self::region_of(&own)
                .atomic_u64(DEPARTURE_SLOT * 64)
                .store(DEPARTED, Ordering::Release);
        }
        let (pids, inboxes, oversubscribed) = joined?;
        Ok(ShmTransport {
            oversubscribed,
            collectives: Collectives::new(boot, "shm-ag"),
            watch: PeerWatch::new(rank, size, Some(pids.clone())),
            rank,
            size,
            inboxes,
            send_locks: (0..size).map(|_| Mutex::new(0)).collect(),
            pids,
            windows: RwLock::new(Vec::new()),
            slots: Arc::new(Mutex::new(SlotTable {
                // The departure word is never a lock.
                used: (0..LOCK_SLOTS).map(|i| i == DEPARTURE_SLOT).collect(),
            })),
            polls: AtomicU64::new(0),
            spare_packets: Mutex::new(Vec::new()),
            cross_memory_only,
        })
    }

    fn region_of(m: &Mapping) -> Region {
        // SAFETY: the mapping is kept alive by an Arc held wherever the region is used
        // (inboxes for the transport's life, window mappings in ShmWindow).
        unsafe { Region::new(m.ptr(), m.len()) }
    }

    /// The ring that `from` writes and `to` reads.
    fn ring(&self, from: Rank, to: Rank) -> Ring {
        Ring::new(
            Self::region_of(&self.inboxes[to as usize]),
            LOCK_TABLE + from as usize * Ring::footprint(RING_BYTES),
            RING_BYTES,
        )
    }

    /// Wakes `target`'s progress agent if it sleeps on its doorbell: the message just
    /// pushed needs it (the target may be computing, or waiting in another library).
    fn ring_doorbell(&self, target: Rank) {
        // Our push, then our read of the flag; the agent's store of the flag, then its
        // read of the rings: with both fenced, one of the two sees the other.
        std::sync::atomic::fence(Ordering::SeqCst);
        let inbox = Self::region_of(&self.inboxes[target as usize]);
        if inbox.atomic_u32(SLEEPING).load(Ordering::Relaxed) != 0 {
            let bell = inbox.atomic_u32(DOORBELL);
            bell.fetch_add(1, Ordering::SeqCst);
            sys::futex_wake(bell);
        }
    }

    /// Marks this process as leaving normally, so that peers still finishing their part
    /// do not take its exit for a failure. Called when the World is dropped.
    pub fn depart(&self) {
        Self::region_of(&self.inboxes[self.rank as usize])
            .atomic_u64(DEPARTURE_SLOT * 64)
            .store(DEPARTED, Ordering::Release);
    }

    fn take_slot(&self) -> Result<u32, TransportError> {
        let mut t = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let i = t.used.iter().position(|u| !u).ok_or_else(|| {
            TransportError::Failed(format!(
                "more than {MAX_LIVE_WINDOWS} live windows in this process (shared \
                     memory's limit): free some first"
            ))
        })?;
        t.used[i] = true;
        // A fresh lock word and accumulate lock (nobody holds them) and barrier count.
        // The barrier generation is never reset: a rank still leaving the previous
        // window's last barrier compares against it.
        let inbox = Self::region_of(&self.inboxes[self.rank as usize]);
        for word in [0, 8, ACCUMULATE_LOCK] {
            inbox.atomic_u64(i * 64 + word).store(0, Ordering::SeqCst);
        }
        // No notice left from the slot's previous window (peers learn the slot of a new
        // window only from its creation, after this).
        for from in 0..self.size {
            let notices = notice_counters(&self.inboxes[self.rank as usize], self.size, i, from);
            notices.atomic_u64(0).store(0, Ordering::SeqCst);
            notices.atomic_u64(8).store(0, Ordering::SeqCst);
        }
        Ok(i as u32)
    }

    fn window(&self, win: u32) -> Result<Arc<ShmWindow>, TransportError> {
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        match ws.get(win as usize) {
            Some(Some(w)) => Ok(w.clone()),
            _ => Err(unknown_window(win)),
        }
    }

    fn insert_window(&self, win: u32, w: ShmWindow) {
        let mut ws = self.windows.write().unwrap_or_else(|e| e.into_inner());
        if ws.len() <= win as usize {
            ws.resize_with(win as usize + 1, || None);
        }
        ws[win as usize] = Some(Arc::new(w));
    }

    /// Runs `f` on window `win`, borrowed through the table's read guard: the hot paths
    /// (every native op, lock word and notice) take no reference count of their own, two
    /// atomic read-modify-writes fewer than cloning the `Arc` out.
    #[inline]
    fn with_window<R>(
        &self,
        win: u32,
        f: impl FnOnce(&ShmWindow) -> Result<R, TransportError>,
    ) -> Result<R, TransportError> {
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        match ws.get(win as usize) {
            Some(Some(w)) => f(w),
            _ => Err(unknown_window(win)),
        }
    }

    /// Frees every exclusive lock word of every window that `dead` holds (its own
    /// process can no longer release them). Shared holds are counts that do not say
    /// whose they are: those stay (documented).
    fn revoke_exclusive(&self, dead: Rank) {
        let held = EXCLUSIVE | (u64::from(dead) + 1);
        let windows = self.windows.read().unwrap_or_else(|e| e.into_inner());
        for w in windows.iter().flatten() {
            for peer in &w.peers {
                if let Some(word) = &peer.lock {
                    let word = word.atomic_u64(0);
                    if word
                        .compare_exchange(held, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        tracing::warn!(rank = dead, "exclusive lock of a dead rank revoked");
                    }
                }
            }
        }
    }

    fn check_liveness(&self, events: &mut Vec<Event>) {
        let before = events.len();
        // A peer that left after finishing its part (it marked its departure before it
        // exited) is not a failure: what it sent is in our rings. Read only once the
        // process is known gone: read before, a peer that departs and exits between the
        // two reads was taken for dead (seen: a rank finishing a collective early failed
        // a slower peer still in it).
        self.watch.check(events, |r| {
            Self::region_of(&self.inboxes[r as usize])
                .atomic_u64(DEPARTURE_SLOT * 64)
                .load(Ordering::Acquire)
                == DEPARTED
        });
        for e in &events[before..] {
            if let Event::PeerFailed { rank } = e {
                self.revoke_exclusive(*rank);
            }
        }
    }
}

fn unknown_window(win: u32) -> TransportError {
    TransportError::Failed(format!("window {win} unknown to the shm transport"))
}

fn full_capabilities() -> Capabilities {
    Capabilities {
        rdma_write: true,
        rdma_read: true,
        atomics: Capabilities::all_atomics(),
        compare_and_swap: 0x7fe,
        inject_size: usize::MAX,
        max_message: RING_BYTES / 2 - 8,
        shared_memory: true,
        native_locks: true,
        get_in_call: true,
        locked_atomics: true,
        max_atomic_elements: usize::MAX,
        ordered_puts: false,
        notified_puts_from: usize::MAX,
        lent_gets_from: usize::MAX,
        lent_puts_from: usize::MAX,
    }
}

impl Transport for ShmTransport {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn capabilities(&self, _target: Rank) -> Capabilities {
        full_capabilities()
    }
    fn yields_while_waiting(&self) -> bool {
        // Only where a peer may need this core (rma_backend's `oversubscribed`): beside
        // other work a yield hands the slice away, and the peer's notice waits for it.
        self.oversubscribed
    }
    fn window_capabilities(&self, win: u32, target: Rank) -> Capabilities {
        let am = Capabilities {
            max_message: RING_BYTES / 2 - 8,
            ..Capabilities::ACTIVE_MESSAGES_ONLY
        };
        let Ok(w) = self.window(win) else { return am };
        let peer = &w.peers[target as usize];
        let native_locks = peer.lock.is_some();
        match peer.memory {
            PeerMemory::Mapped(_) => full_capabilities(),
            // Atomics where the region is mapped (WindowOps::reaches says which); pair
            // updates as messages (the owner's segments of attached regions keep no
            // accumulate lock).
            PeerMemory::Dynamic { .. } => Capabilities {
                native_locks,
                locked_atomics: false,
                ..full_capabilities()
            },
            PeerMemory::CrossMemory { .. } => Capabilities {
                rdma_write: true,
                rdma_read: true,
                native_locks,
                get_in_call: true,
                max_atomic_elements: usize::MAX,
                ..am
            },
            PeerMemory::None => Capabilities { native_locks, ..am },
        }
    }

    fn allocate(
        &self,
        len: usize,
        shared: Option<&SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError> {
        // allocate_shared: one segment for the window's members, each member's part after
        // the previous one's (contiguous, each part rounded up to 8 bytes for aligned
        // atomics), created by the first member, which then tells the others where to
        // open it. Otherwise one segment per rank. Segments are anonymous (memfd):
        // nothing is left behind however the job ends. The shared case is collective:
        // every member goes through both of its steps (the allgather of lengths, the
        // allgather of where to open the segment) whatever failed before, so that a
        // failure on one member is an error on every member (the engine agrees on the
        // outcome), not a hang.
        let (offset, total, mapping, at) = if let Some(among) = shared {
            let lens = (among.allgather)(&(len as u64).to_le_bytes())?;
            let lens: Vec<u64> = lens
                .iter()
                .map(|b| b.as_slice().try_into().map(u64::from_le_bytes))
                .collect::<Result<_, _>>()
                .map_err(|_| TransportError::Failed("bad length from bootstrap".into()))?;
            let rounded = |l: &u64| l.checked_next_multiple_of(8);
            let sum = |ls: &[u64]| {
                ls.iter()
                    .try_fold(0u64, |acc, l| acc.checked_add(rounded(l)?))
                    .filter(|t| isize::try_from(*t).is_ok())
            };
            let too_large = || {
                TransportError::Failed("the shared window's parts add up past isize::MAX".into())
            };
            let (offset, total) = (
                sum(&lens[..among.index.min(lens.len())]).ok_or_else(too_large),
                sum(&lens).ok_or_else(too_large),
            );
            let created = match (among.index, &total) {
                (0, Ok(total)) => {
                    Some(Mapping::create_anonymous(*total as usize).map_err(|e| {
                        fail(format!("creating the shared segment of {total} bytes"), e)
                    }))
                }
                (0, Err(e)) => Some(Err(e.clone())),
                _ => None,
            };
            // The first member says where its segment is, or why there is none; the
            // others say nothing (a non-empty nothing: some launchers refuse empty
            // values).
            let said = match &created {
                Some(Ok(m)) => format!("at {}", m.path().unwrap_or_default()),
                Some(Err(e)) => format!("failed {}", rma_core::with_causes(e)),
                None => "-".into(),
            };
            let at = (among.allgather)(said.as_bytes())?;
            let (offset, total) = (offset?, total?);
            // Where every rank's part of the window is (rank 0's segment), kept in the
            // descriptor: the ranks of this node find each other's parts in the mapping
            // they have, contiguous (window_ready).
            let zero = String::from_utf8_lossy(&at[0]);
            let at = zero.strip_prefix("at ").unwrap_or_default().to_string();
            let mapping = match created {
                Some(m) => m?,
                None if at.is_empty() => {
                    return Err(TransportError::Failed(format!(
                        "the window's first member could not create the shared segment: {zero}"
                    )))
                }
                None => Mapping::open(&at, total as usize).map_err(|e| {
                    fail(format!("opening the first member's shared segment {at}"), e)
                })?,
            };
            (offset, total, mapping, at)
        } else {
            let m = Mapping::create_anonymous(len)
                .map_err(|e| fail(format!("creating a segment of {len} bytes"), e))?;
            let at = m.path().unwrap_or_default();
            (0, len as u64, m, at)
        };
        // This rank's part on this rank's NUMA node (where it runs now: its core under
        // rma-run's binding), even where a peer touches a page first.
        if let Err(e) = mapping.prefer_this_node(offset as usize, len) {
            tracing::debug!(error = %e, "window segment left to first touch");
        }
        let mapping = Arc::new(mapping);
        let lock_slot = self.take_slot()?;
        // SAFETY: offset + len <= total by construction; the mapping lives as long as the
        // segment (held in `mapping`).
        let region = unsafe { Region::new(mapping.ptr().add(offset as usize), len) };
        Ok(Arc::new(LocalSegment {
            region,
            mapping: Some(mapping),
            shm: Some((at, offset, total)),
            user: Mutex::new(None),
            lock_slot,
            slots: self.slots.clone(),
            dynamic: false,
            lock_words: Some(lock_word_at(
                &self.inboxes[self.rank as usize],
                lock_slot as usize,
            )),
        }))
    }

    fn copies_user_memory(&self) -> bool {
        // Mapped memory gives put/get at a copy's cost and native atomics; user memory
        // costs a process_vm_writev system call per op (0.5 us) and atomics by messages.
        !self.cross_memory_only
    }

    fn expose(&self, mut memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError> {
        // User memory in place is reached by peers through process_vm_* (a window created
        // in place, a region of a dynamic window): Yama's ptrace scope must let them,
        // from now on.
        allow_cross_memory_attach_once();
        let bytes = memory.bytes_mut();
        // SAFETY: the heap buffer of the user's Vec does not move while the box is owned
        // by the segment (it is only handed back by `into_user_memory`, consuming it).
        let region = unsafe { Region::new(bytes.as_mut_ptr(), bytes.len()) };
        let lock_slot = self.take_slot()?;
        Ok(Arc::new(LocalSegment {
            region,
            mapping: None,
            shm: None,
            user: Mutex::new(Some(memory)),
            lock_slot,
            slots: self.slots.clone(),
            dynamic: false,
            lock_words: None,
        }))
    }

    fn allocate_dynamic(&self) -> Result<Option<Arc<dyn Segment>>, TransportError> {
        // Peers reach the regions this rank attaches by cross-memory attach, listed in
        // the directory of the lock slot taken here (which also holds the window's lock
        // word, barrier words and notice counters, as for every other window).
        allow_cross_memory_attach_once();
        let lock_slot = self.take_slot()?;
        Ok(Some(Arc::new(LocalSegment {
            // SAFETY: no bytes: nothing is ever read or written through it.
            region: unsafe { Region::new(std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), 0) },
            mapping: None,
            shm: None,
            user: Mutex::new(None),
            lock_slot,
            slots: self.slots.clone(),
            dynamic: true,
            lock_words: None,
        })))
    }

    fn region_attached(&self, win: u32, address: u64, segment: &Arc<dyn Segment>) {
        // A segment of ours (the library's copy) is mapped by peers through its
        // descriptor, which stays open while it is attached; the application's memory in
        // place is reached by cross-memory attach.
        let any: &dyn std::any::Any = segment.as_ref();
        let fd = any
            .downcast_ref::<LocalSegment>()
            .and_then(|l| l.mapping.as_ref())
            .and_then(|m| m.published_fd());
        static GENERATION: AtomicU64 = AtomicU64::new(1);
        let entry = Entry {
            address,
            len: segment.len() as u64,
            fd,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        };
        if let Ok(w) = self.window(win) {
            w.publish_regions(|regions| regions.push(entry));
        }
    }

    fn region_detached(&self, win: u32, address: u64) {
        if let Ok(w) = self.window(win) {
            w.publish_regions(|regions| regions.retain(|e| e.address != address));
        }
    }

    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        remote: &[RemoteSegment],
    ) -> Result<(), TransportError> {
        if local.is_none() {
            // Dynamic window: regions are reached by active messages.
            let peers = (0..self.size)
                .map(|_| PeerWindow {
                    memory: PeerMemory::None,
                    lock: None,
                    lock_word: None,
                    slot: None,
                    notices_to: None,
                    notices_from: None,
                })
                .collect();
            self.insert_window(
                win,
                ShmWindow {
                    peers,
                    barrier: None,
                    members: 0,
                    rank: self.rank,
                    regions: Mutex::new(Vec::new()),
                    _mappings: Vec::new(),
                },
            );
            return Ok(());
        }
        let mut peers = Vec::with_capacity(self.size);
        let mut mappings = Vec::new();
        let mut barrier_slot = None;
        let mut members = 0;
        let mut opened: Vec<(String, Arc<Mapping>)> = Vec::new();
        // Our own segment is mapped already: reuse that mapping, so that the parts of an
        // allocate_shared window are contiguous in this process too.
        if let Some(seg) = local {
            let any: &dyn std::any::Any = seg.as_ref();
            if let Some(l) = any.downcast_ref::<LocalSegment>() {
                if let (Some((name, _, _)), Some(m)) = (&l.shm, &l.mapping) {
                    opened.push((name.clone(), m.clone()));
                    mappings.push(m.clone());
                }
            }
        }
        for (r, seg) in remote.iter().enumerate() {
            let k = &seg.key;
            if k.is_empty() {
                // Not a member of the window's communicator: nothing of it here.
                peers.push(PeerWindow {
                    memory: PeerMemory::None,
                    lock: None,
                    lock_word: None,
                    slot: None,
                    notices_to: None,
                    notices_from: None,
                });
                continue;
            }
            members += 1;
            if k.len() < 5 {
                return Err(TransportError::Failed(format!(
                    "bad window descriptor from rank {r}"
                )));
            }
            let slot = u32::from_le_bytes(k[1..5].try_into().expect("4 bytes")) as usize;
            if slot >= LOCK_SLOTS {
                return Err(TransportError::Failed(format!(
                    "bad lock slot from rank {r}"
                )));
            }
            let lock = lock_word_at(&self.inboxes[r], slot);
            // The first member's lock slot holds the window's barrier words.
            barrier_slot.get_or_insert((r, slot));
            let memory = match k[0] {
                0 if k.len() > 21 => {
                    let offset = u64::from_le_bytes(k[5..13].try_into().expect("8 bytes"));
                    let total = u64::from_le_bytes(k[13..21].try_into().expect("8 bytes"));
                    let name = std::str::from_utf8(&k[21..])
                        .map_err(|_| TransportError::Failed("bad segment name".into()))?;
                    if offset.checked_add(seg.len).is_none_or(|end| end > total) {
                        return Err(TransportError::Failed(format!(
                            "bad segment bounds from rank {r}"
                        )));
                    }
                    // One mapping per segment (allocate_shared parts share one).
                    let m = match opened.iter().find(|(n, _)| n == name) {
                        Some((_, m)) => Arc::clone(m),
                        None => {
                            let m = Arc::new(Mapping::open(name, total as usize).map_err(|e| {
                                // A peer's segment gone from under us: it died.
                                if process_alive(self.pids[r]) {
                                    fail(format!("opening rank {r}'s segment {name}"), e)
                                } else {
                                    TransportError::PeerUnreachable(r as Rank)
                                }
                            })?);
                            opened.push((name.to_string(), m.clone()));
                            mappings.push(m.clone());
                            m
                        }
                    };
                    // SAFETY: offset + len <= total (checked above); `m` stays alive in
                    // this window's `_mappings`.
                    let region =
                        unsafe { Region::new(m.ptr().add(offset as usize), seg.len as usize) };
                    PeerMemory::Mapped(region)
                }
                1 if k.len() >= 17 => {
                    let pid = u32::from_le_bytes(k[5..9].try_into().expect("4 bytes"));
                    let addr = u64::from_le_bytes(k[9..17].try_into().expect("8 bytes"));
                    let len = seg.len as usize;
                    // Probe: cross-memory attach may be forbidden (ptrace scope, containers).
                    let mut probe = [0u8; 1];
                    if len == 0 || sys::read_remote(pid, addr, &mut probe).is_ok() {
                        PeerMemory::CrossMemory { pid, addr, len }
                    } else {
                        tracing::info!(rank = r, "cross-memory attach refused: active messages");
                        PeerMemory::None
                    }
                }
                2 if k.len() >= 17 => {
                    let pid = u32::from_le_bytes(k[5..9].try_into().expect("4 bytes"));
                    let probe = u64::from_le_bytes(k[9..17].try_into().expect("8 bytes"));
                    // Probe: cross-memory attach may be forbidden (ptrace scope, containers).
                    let mut byte = [0u8; 1];
                    if sys::read_remote(pid, probe, &mut byte).is_ok() {
                        PeerMemory::Dynamic {
                            pid,
                            directory: directory_at(&self.inboxes[r], self.size, slot),
                            mapped: RwLock::new(Vec::new()),
                        }
                    } else {
                        tracing::info!(rank = r, "cross-memory attach refused: active messages");
                        PeerMemory::None
                    }
                }
                _ => {
                    return Err(TransportError::Failed(format!(
                        "bad window descriptor from rank {r}"
                    )))
                }
            };
            peers.push(PeerWindow {
                memory,
                lock_word: Some(lock.word_u64(0)),
                lock: Some(lock),
                slot: Some(slot),
                // In `r`'s inbox, at its slot for this window, our counters.
                notices_to: Some(NoticeWords::of(&notice_counters(
                    &self.inboxes[r],
                    self.size,
                    slot,
                    self.rank as usize,
                ))),
                notices_from: None,
            });
        }
        // In our inbox, at our own slot (the one we gave the peers), each peer's counters.
        if let Some(own) = peers.get(self.rank as usize).and_then(|p| p.slot) {
            for (r, peer) in peers.iter_mut().enumerate() {
                if peer.slot.is_some() {
                    peer.notices_from = Some(NoticeWords::of(&notice_counters(
                        &self.inboxes[self.rank as usize],
                        self.size,
                        own,
                        r,
                    )));
                }
            }
        }
        let barrier = barrier_slot.map(|(r, slot)| barrier_words(&self.inboxes[r], slot));
        self.insert_window(
            win,
            ShmWindow {
                peers,
                barrier,
                members,
                rank: self.rank,
                regions: Mutex::new(Vec::new()),
                _mappings: mappings,
            },
        );
        Ok(())
    }

    fn window_established(&self, _win: u32, local: Option<&Arc<dyn Segment>>) {
        // Everyone has mapped every segment: its descriptor can go.
        if let Some(seg) = local {
            let any: &dyn std::any::Any = seg.as_ref();
            if let Some(m) = any
                .downcast_ref::<LocalSegment>()
                .and_then(|l| l.mapping.as_ref())
            {
                m.unpublish();
            }
        }
    }

    fn window_freed(&self, win: u32) {
        if let Some(slot) = self
            .windows
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(win as usize)
        {
            *slot = None;
        }
    }

    fn shared_base(&self, win: u32, rank: Rank) -> Option<usize> {
        let w = self.window(win).ok()?;
        match w.peers.get(rank as usize)?.memory {
            PeerMemory::Mapped(r) => Some(r.base() as usize),
            _ => None,
        }
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.collectives.allgather(mine)
    }

    fn barrier(&self) -> Result<(), TransportError> {
        self.collectives.barrier()
    }

    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError> {
        let ring = self.ring(self.rank, target);
        if packet.len() > ring.max_payload() {
            return Err(TransportError::Failed(format!(
                "active message of {} bytes exceeds the ring",
                packet.len()
            )));
        }
        let mut cached_head = self.send_locks[target as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !ring.push(packet, &mut cached_head) {
            return Err(TransportError::Busy);
        }
        drop(cached_head);
        self.ring_doorbell(target);
        Ok(())
    }

    fn window_ops(&self, win: u32) -> Option<Arc<dyn WindowOps>> {
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        let w: Arc<dyn WindowOps> = ws.get(win as usize)?.clone()?;
        Some(w)
    }

    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        _token: u64,
    ) -> Result<Issued, TransportError> {
        self.with_window(win, |w| WindowOps::put(w, target, offset, data))
    }

    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        _token: u64,
    ) -> Result<Issued, TransportError> {
        // Hot path: borrow through the read guard, no Arc clone.
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        let Some(Some(w)) = ws.get(win as usize) else {
            return Err(unknown_window(win));
        };
        let mut out = vec![0; len];
        match &w.peers[target as usize].memory {
            PeerMemory::Mapped(region) => {
                if !region.contains(offset as usize, len) {
                    return Err(TransportError::Failed(
                        "get outside the target's window".into(),
                    ));
                }
                region.read(offset as usize, &mut out);
            }
            PeerMemory::CrossMemory { .. } | PeerMemory::Dynamic { .. } => {
                w.get_into(target, offset, &mut out)?;
            }
            PeerMemory::None => {
                return Err(TransportError::Unsupported("get from unmapped memory"))
            }
        }
        Ok(Issued::Complete(Some(Fetched::from(out))))
    }

    fn get_into(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        self.with_window(win, |w| w.get_into(target, offset, dst))
    }

    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        _token: u64,
    ) -> Result<Issued, TransportError> {
        self.with_window(win, |w| w.atomic(target, offset, atomic))
    }

    fn barrier_arrive(&self, win: u32) -> Result<Option<u64>, TransportError> {
        self.with_window(win, |w| w.barrier_arrive())
    }

    fn barrier_done(&self, win: u32, ticket: u64) -> Result<bool, TransportError> {
        self.with_window(win, |w| w.barrier_done(ticket))
    }

    fn try_lock(&self, win: u32, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        self.with_window(win, |w| w.try_lock(target, exclusive))
    }

    fn unlock(&self, win: u32, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        self.with_window(win, |w| WindowOps::unlock(w, target, exclusive))
    }

    fn notify(&self, win: u32, rank: Rank, notice: Notice) -> Result<bool, TransportError> {
        self.with_window(win, |w| WindowOps::notify(w, rank, notice))
    }

    fn take_notices(&self, win: u32, from: Rank, notice: Notice) -> u64 {
        self.with_window(win, |w| Ok(WindowOps::take_notices(w, from, notice)))
            .unwrap_or(0)
    }

    fn check_peers(&self, events: &mut Vec<Event>) {
        self.check_liveness(events);
    }

    fn peer_gone(&self, rank: Rank) {
        self.revoke_exclusive(rank);
    }

    /// The progress agent sleeps on this rank's doorbell until a peer pushes an active
    /// message into one of its rings (or `timeout`).
    fn wait_for_traffic(&self, timeout: std::time::Duration) -> Result<Wake, TransportError> {
        let inbox = Self::region_of(&self.inboxes[self.rank as usize]);
        let (bell, sleeping) = (inbox.atomic_u32(DOORBELL), inbox.atomic_u32(SLEEPING));
        let rung = bell.load(Ordering::SeqCst);
        sleeping.store(1, Ordering::SeqCst);
        let pending = (0..self.size as Rank).any(|from| !self.ring(from, self.rank).is_empty());
        if !pending {
            sys::futex_wait(bell, rung, timeout);
        }
        sleeping.store(0, Ordering::Relaxed);
        Ok(if pending || bell.load(Ordering::Relaxed) != rung {
            Wake::Traffic
        } else {
            Wake::Timeout
        })
    }

    fn recycle(&self, packet: Vec<u8>) {
        let mut spare = self.spare_packets.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < SPARE_PACKETS {
            spare.push(packet);
        }
    }

    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError> {
        let before = events.len();
        // Most polls (each turn of a wait) find every ring empty: they take no lock.
        if !(0..self.size as Rank).all(|from| self.ring(from, self.rank).is_empty()) {
            self.drain_rings(events);
        }
        // Liveness is a syscall per peer: check it now and then, not on every poll, and
        // after the rings (what a peer sent before it went is read first). The count is a
        // cadence, not a tally: a plain load and store (no locked instruction on every
        // turn of every wait); a count lost to a concurrent poll is harmless.
        let polls = self.polls.load(Ordering::Relaxed).wrapping_add(1);
        self.polls.store(polls, Ordering::Relaxed);
        if polls.is_multiple_of(4096) {
            self.check_liveness(events);
        }
        Ok(events.len() - before)
    }
}

impl ShmTransport {
    /// Reads every message in this rank's rings into `events`.
    fn drain_rings(&self, events: &mut Vec<Event>) {
        let mut spare = self.spare_packets.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = spare.pop().unwrap_or_default();
        for from in 0..self.size as Rank {
            let ring = self.ring(from, self.rank);
            let mut freed = false;
            loop {
                match ring.pop(&mut buf) {
                    Ok(true) => {
                        freed = true;
                        let next = spare.pop().unwrap_or_default();
                        events.push(Event::Received {
                            from,
                            data: std::mem::replace(&mut buf, next),
                        })
                    }
                    Ok(false) => {
                        if freed {
                            // Room in the ring again: a sender whose agent sleeps with
                            // messages the full ring refused retries now, not at its
                            // next timeout.
                            self.ring_doorbell(from);
                        }
                        break;
                    }
                    Err(ring::Corrupt) => {
                        // A peer that writes nonsense into its ring is broken or hostile:
                        // it fails, once, and nothing more is read from it.
                        if self.watch.report(from) {
                            tracing::warn!(rank = from, "corrupt ring: peer taken as failed");
                            events.push(Event::PeerFailed { rank: from });
                        }
                        break;
                    }
                }
            }
        }
        spare.push(buf);
    }
}

/// The PSCW notice counters (posts, completes) that `from` increments for `slot`'s
/// window in an inbox mapping of a `size`-rank world.
fn notice_counters(inbox: &Arc<Mapping>, size: usize, slot: usize, from: usize) -> Region {
    assert!(slot < LOCK_SLOTS && from < size);
    let at = notice_table(size) + (slot * size + from) * NOTICE_BYTES;
    assert!(at + NOTICE_BYTES <= inbox.len());
    // SAFETY: inside the inbox's notice table (checked above); inbox mappings live as
    // long as the transport, which outlives its windows.
    unsafe { Region::new(inbox.ptr().add(at), NOTICE_BYTES) }
}

/// The barrier words (count, generation) of `slot` in an inbox mapping.
fn barrier_words(inbox: &Arc<Mapping>, slot: usize) -> BarrierWords {
    assert!(slot < LOCK_SLOTS);
    // SAFETY: bytes 8..24 of a slot inside the inbox's lock table; inbox mappings live
    // as long as the transport, which outlives its windows.
    let words = unsafe { Region::new(inbox.ptr().add(slot * 64 + 8), 16) };
    BarrierWords {
        count: words.word_u64(0),
        generation: words.word_u64(8),
    }
}

/// A window's fence barrier: its arrival count and generation, checked once.
struct BarrierWords {
    count: Word,
    generation: Word,
}

/// Lets peers of this user reach this process by cross-memory attach (Yama's ptrace
/// scope), once: for windows over user memory in place and dynamic windows.
fn allow_cross_memory_attach_once() {
    static CROSS_MEMORY: std::sync::Once = std::sync::Once::new();
    CROSS_MEMORY.call_once(sys::allow_cross_memory_attach);
}

/// The lock word of `slot` in an inbox mapping.
/// Offset of a window's accumulate lock in its slot of the lock table: after the lock
/// word (0) and the barrier words (8..24).
const ACCUMULATE_LOCK: usize = 24;

/// A window's words in a rank's lock table, one cache line per slot: its lock word
/// (offset 0) up to its accumulate lock ([`ACCUMULATE_LOCK`]).
fn lock_word_at(inbox: &Arc<Mapping>, slot: usize) -> Region {
    assert!(slot < DEPARTURE_SLOT);
    // SAFETY: slot < LOCK_SLOTS keeps the slot's first 32 bytes inside the inbox's lock
    // table; inbox mappings live as long as the transport, which outlives its windows.
    unsafe { Region::new(inbox.ptr().add(slot * 64), ACCUMULATE_LOCK + 8) }
}

/// Runs `f` holding the accumulate lock of a window's lock words (pair updates, whole).
/// The lock is held for a copy of a few pairs; a holder that is descheduled (more ranks
/// than cores) is waited for by yielding.
fn with_accumulate_lock<R>(words: &Region, f: impl FnOnce() -> R) -> R {
    let lock = words.atomic_u64(ACCUMULATE_LOCK);
    let mut spins = 0u32;
    // Acquire: the previous holder's update happens before ours.
    while lock
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    let out = f();
    // Release: our update happens before the next holder's.
    lock.store(0, Ordering::Release);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // A system call's failure stays the error's source: process_vm_readv from a process
    // that is gone (a reaped child) is ESRCH, under what the backend was doing.
    #[test]
    fn a_failed_system_call_is_the_source_of_the_rma_error() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("reap the child");
        let mut buf = [0u8; 8];
        let read = sys::read_remote(pid, 4096, &mut buf).expect_err("read from a dead pid");
        let err = rma_core::Error::from(fail("reading 8 bytes from rank 1", read));
        let io = std::error::Error::source(&err)
            .and_then(|c| c.downcast_ref::<std::io::Error>())
            .unwrap_or_else(|| panic!("no io::Error under {err:?}"));
        assert_eq!(io.raw_os_error(), Some(libc::ESRCH), "{err:?}");
        let text = format!("{err:?}");
        assert!(
            text.contains("reading 8 bytes from rank 1 failed: caused by: "),
            "{text}"
        );
    }
}
