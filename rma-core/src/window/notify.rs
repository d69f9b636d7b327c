//! Notified access: puts, gets and accumulates that count at the target (the MPI Forum's
//! RMA notifications, mpi-forum/mpi-issues#59; Intel MPI's `MPIX_Put_notify`; foMPI-NA,
//! Belli and Hoefler, IPDPS 2015).
//!
//! A window may carry notification counters of each process, set collectively by
//! [`Window::set_notify_count`]. A notified op names one counter of its target; the
//! target's counter grows by one once the op's data is in the target's memory (for a get:
//! read from it), so a process that sees the count see the data: a producer's put and its
//! "it is there" are one operation, not a put, a flush and a flag.
//!
//! How each path keeps that order:
//! - **Native, complete in its call** (shared memory): the data's copy or CPU atomic, then
//!   a release-ordered atomic add on the counter, which lives in backend memory the
//!   origin maps (the counters are a window of their own). A reader's acquire load of the
//!   count makes the data visible. No message at all.
//! - **A put the transport carries with its notice**
//!   ([`Capabilities::notified_puts_from`](crate::transport::Capabilities::notified_puts_from):
//!   verbs' RDMA WRITE with immediate data, any size; libfabric tcp's write with remote
//!   CQ data, from 8 KiB): one native op, no message. The target's
//!   NIC places the data, then completes a receive with the window's id and the counter's
//!   index; the target's progress reports it
//!   ([`Event::Notified`](crate::transport::Event::Notified)) and adds to the counter as
//!   for a message, after checking both. The origin's completion of the put
//!   says the data is in; the count follows at the target's next progress, which
//!   [`Window::notify_value`] makes first. Measured in the rxe VM (`halo`, 2 ranks,
//!   300 iterations, two runs each, us per iteration): 8 B halos 84-94 against 95-104
//!   as active messages, 16 KiB 935-939 against 1,304-1,351, 64 KiB 3,433-3,549 against
//!   4,718-4,875. Over libfabric tcp, 16 KiB halos 34-35 against 50-51 (1.17) and 27
//!   against 40-47 (2.5.1) with the put and its counting message before.
//! - **Everything else** (a backend whose ops complete later, a target on another node,
//!   an op queued behind a lock): the op goes as an active message with
//!   [`flags::NOTIFY`] and the counter's index; the target's CPU applies the op, then adds
//!   to the counter. One message, the op's own; large ops go in pieces, in order, the
//!   last one carrying the notification. The op's completion (flush, unlock, fence,
//!   complete) covers its notification, as it covers the op.
//! - **A large put toward a backend that orders messages behind puts**
//!   ([`Capabilities::ordered_puts`](crate::transport::Capabilities::ordered_puts):
//!   libfabric's tcp providers, one stream per pair that the target's provider reads in
//!   order): the put natively (RDMA, no copy through messages), then a notified put of
//!   no data as a message behind it. The target's provider places the put's data before
//!   it reads the message, so the count still follows the data. Two messages instead of
//!   one, so only from [`NOTIFIED_PUT_NATIVE_FROM`] bytes.
//!
//! The counters are never touched by a NIC's atomics (a notified put's NIC writes only
//! its data): only by CPU atomics of processes
//! that share the memory and by the target's own CPU, which are atomic against each other.
//! Where the memory is no shared memory (it goes through copies), the target's threads
//! (the application reading a count, the progress agent counting an arrival) take turns.

use super::api::{to_vec, toward_target, zeroed_vec};
use super::*;
use crate::comm::Comm;
use crate::engine::Engine;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Bytes from which a notified put goes as a native put followed by a message that
/// counts it, where the backend orders messages behind puts
/// ([`Window::put_then_count`]); smaller ones go as one active message with the data,
/// which costs one message instead of two. Measured with `halo` on libfabric 1.17's
/// tcp;ofi_rxm (2 ranks on one host, 1,000 iterations, two runs each, us per
/// iteration): 16 KiB halos 158 and 90 this way against 177 and 238 as messages, 64 KiB
/// 226 and 149 against 339 and 329; at 4 KiB both ways were within this machine's noise.
const NOTIFIED_PUT_NATIVE_FROM: usize = 8192;

/// A window's notification counters.
pub(crate) struct Notifications {
    /// The counters' window: its own counters (u64 each) in backend memory, so that
    /// peers sharing memory add to them natively. Taken by `free` or a new count.
    window: Mutex<Option<Window<u64>>>,
    /// The counters' window's state, for its native ops.
    counters: Arc<WindowShared>,
    /// [`adds_toward`](Self::adds_toward) every target, folded once.
    every_target_adds: bool,
    /// Counters of each World rank (0 outside the window's group).
    counts: Vec<u32>,
    /// This process's counters' memory.
    local: Arc<dyn Segment>,
    /// Taken around every access of a counter that is no atomic (memory only the network
    /// reaches): the application thread reads or sets while the progress agent counts,
    /// and an update goes through a copy that it writes back. Without it, a read racing an
    /// arrival wrote the stale count back (verbs, 4 ranks: a halo counted to 18 read 17
    /// afterwards, and the ring stalled).
    unshared: Mutex<()>,
    /// Per counter of this process, the value `notify_value` last returned: a read that
    /// returns it again, where the node's ranks outnumber its CPUs, yields the core (a
    /// loop of reads is a wait, and the producer may need this core).
    last_read: Box<[AtomicU64]>,
    /// Reads by [`Window::notify_value`] that saw no counter move, where such a read
    /// may skip the progress pass ([`Notifications::unchanged_read`]). Approximate
    /// where threads race on it (a skipped or extra pass, nothing else).
    unchanged_reads: AtomicU32,
}

/// Of [`Window::notify_value`]'s reads that see nothing new, where ops complete in
/// their call, the one in this many that makes a progress pass.
const PASS_EVERY_UNCHANGED: u32 = 16;

impl Notifications {
    /// Frees the counters' window (collective).
    pub(super) fn free(&self) -> Result<()> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner()).take();
        match window {
            Some(window) => window.free().map(drop).map_err(|e| e.error),
            None => Ok(()),
        }
    }

    /// The counter `index` of this process, as an atomic where the backend's memory is
    /// shared memory ([`Segment::atomic_u64`]).
    fn local_counter(&self, index: u32) -> Option<&std::sync::atomic::AtomicU64> {
        self.local.atomic_u64(index as usize * 8)
    }

    /// [`Self::unshared`], held around an access of a counter that is no atomic.
    fn one_at_a_time(&self) -> std::sync::MutexGuard<'_, ()> {
        self.unshared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds one to this process's counter `index` (the target side of a notified op, once
    /// its data is in), release-ordered; nothing for an index past the counters.
    fn bump(&self, index: u32) {
        if index as usize >= self.local.len() / 8 {
            return;
        }
        match self.local_counter(index) {
            Some(c) => {
                c.fetch_add(1, Ordering::Release);
            }
            None => {
                let _turn = self.one_at_a_time();
                self.local.update(index as usize * 8, 8, &mut |b| {
                    let v = u64::from_ne_bytes(b.try_into().expect("8 bytes")).wrapping_add(1);
                    b.copy_from_slice(&v.to_ne_bytes());
                });
            }
        }
    }

    /// Counts a read that saw nothing new: whether it may skip the progress pass (all
    /// but every [`PASS_EVERY_UNCHANGED`]th). A load and a store, no locked
    /// instruction.
    fn unchanged_read(&self) -> bool {
        let n = self.unchanged_reads.load(Ordering::Relaxed).wrapping_add(1);
        self.unchanged_reads.store(n, Ordering::Relaxed);
        !n.is_multiple_of(PASS_EVERY_UNCHANGED)
    }

    /// This process's counter `index` (checked by the caller), acquire-ordered.
    fn value(&self, index: u32) -> u64 {
        match self.local_counter(index) {
            Some(c) => c.load(Ordering::Acquire),
            None => {
                // A read, never an update (an update writes its copy back).
                let mut b = [0u8; 8];
                let _turn = self.one_at_a_time();
                self.local.read(index as usize * 8, &mut b);
                u64::from_ne_bytes(b)
            }
        }
    }

    fn set(&self, index: u32, value: u64) {
        if let Some(l) = self.last_read.get(index as usize) {
            l.store(value, Ordering::Relaxed);
        }
        match self.local_counter(index) {
            Some(c) => c.store(value, Ordering::Release),
            None => {
                let _turn = self.one_at_a_time();
                self.local.write(index as usize * 8, &value.to_ne_bytes());
            }
        }
    }

    /// Whether a notified op toward `target` may take the native path of `w`: every op of
    /// both windows completes in its call, and the counter's add is a native atomic
    /// there. Then the data is in place when the add runs. (The other native path, a
    /// put that carries its notice, is [`WindowShared::notified_native`]'s.)
    #[inline]
    pub(super) fn native_toward(&self, w: &WindowShared, target: Rank) -> bool {
        w.blocks_in_call && (self.every_target_adds || self.adds_toward(target))
    }

    /// Whether the counters' window adds natively, in the call, on `target`'s counters.
    fn adds_toward(&self, target: Rank) -> bool {
        let c = &self.counters;
        c.blocks_in_call && c.ops.is_some() && c.caps(target).has_atomic(AccOp::Sum, DataType::U64)
    }

    /// After the native op of a notified access completed in its call: the target's
    /// counter, natively (release: the op's stores before the add).
    #[inline]
    pub(super) fn add_native(&self, target: Rank, index: u32) -> Result<()> {
        if let Some(ops) = self.counters.ops.as_deref() {
            if ops.add_one_in_call(target, u64::from(index) * 8) {
                self.counters.counters.op_direct();
                return Ok(());
            }
        }
        self.add_native_general(target, index)
    }

    /// [`add_native`](Self::add_native) where the backend's one add was not done: its
    /// general atomic, which reports what failed.
    #[cold]
    #[inline(never)]
    fn add_native_general(&self, target: Rank, index: u32) -> Result<()> {
        let ops = self
            .counters
            .ops
            .as_deref()
            .ok_or(TransportError::Unsupported(
                "notification counters without native ops",
            ))?;
        // Release: the op's stores before the add.
        std::sync::atomic::fence(Ordering::Release);
        loop {
            match ops.atomic(target, u64::from(index) * 8, NativeAtomic::ADD_ONE_U64) {
                Ok(Issued::Complete(_)) => {
                    self.counters.counters.op_direct();
                    return Ok(());
                }
                Ok(Issued::Pending) => {
                    return Err(TransportError::Failed(
                        "a notification's add left pending by a backend whose ops complete \
                         in their call"
                            .into(),
                    )
                    .into())
                }
                // The backend's room for ops is full: it drains by itself (shared memory
                // has none to drain); try again.
                Err(TransportError::Busy) => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A notified op's counter, as the op's descriptor carries it.
#[derive(Clone, Copy)]
pub(super) struct NotifyDesc<'a> {
    pub index: u32,
    pub counters: &'a Notifications,
    /// This op adds to the counter (all but the last piece of a large op do not, but go
    /// the same path, so that the last one's count follows them).
    pub counts: bool,
}

impl WindowShared {
    /// Whether a notified op of `kind` and `len` bytes toward `target`, counting on `index`, goes
    /// natively with its count: the data's op completes in its call and the counter's add
    /// follows natively ([`Notifications::native_toward`], shared memory), or it is a put
    /// the transport carries with its notice ([`transport_notifies`](Self::transport_notifies),
    /// RDMA WRITE with immediate data), the window's id and the index small enough to go
    /// with it.
    pub(super) fn notified_native(
        &self,
        n: &Notifications,
        kind: OpKind,
        target: Rank,
        len: usize,
        index: u32,
    ) -> bool {
        n.native_toward(self, target)
            || (kind == OpKind::Put
                && self.transport_notifies(target, len)
                && self.id < NOTICE_LIMIT
                && index < NOTICE_LIMIT)
    }

    /// A notified put toward a [direct](super::direct) target whose counters this
    /// process adds to natively (shared memory): the copy, then the counter's release
    /// add, both in the call, past the op table as a plain put's direct path goes (a
    /// halo's notified put cost four plain puts' instructions through the general path).
    /// The index is checked as ever. `None`: not this case (nothing was done; the
    /// general path takes it).
    #[inline]
    pub(super) fn put_notified_direct(
        &self,
        target: Rank,
        offset: u64,
        data: &[u8],
        index: u32,
    ) -> Option<Result<()>> {
        // The hold, not a clone of the counters' Arc: no reference count per put. Held
        // across the put and the add, which make no progress.
        let notify = self.notify.lock();
        let n = notify.as_deref()?;
        if index >= n.counts.get(target as usize).copied().unwrap_or(0)
            || !n.native_toward(self, target)
        {
            // A bad index is the general path's error to report.
            return None;
        }
        let done = self.put_direct(target, offset, data)?;
        Some(done.and_then(|()| n.add_native(target, index)))
    }

    /// Whether a native notified put toward `target` goes as the transport's notified put
    /// ([`Transport::put_notified`]): the target's transport reports the notice once the
    /// data is in, and the target's progress counts it; the origin adds nothing.
    #[inline]
    pub(super) fn transport_notifies(&self, target: Rank, len: usize) -> bool {
        self.ops.is_none() && len >= self.caps(target).notified_puts_from
    }

    /// The counters, with `index` checked against `target`'s (World rank).
    pub(super) fn notifications(&self, target: Rank, index: u32) -> Result<Arc<Notifications>> {
        let n = self.notify.lock().clone();
        let count = n
            .as_ref()
            .and_then(|n| n.counts.get(target as usize).copied())
            .unwrap_or(0);
        match n {
            Some(n) if index < count => Ok(n),
            _ => Err(UsageError::NotifyIndex {
                target,
                index,
                count,
            }
            .into()),
        }
    }

    /// The target side of a notified op, once its data is in (its index checked by
    /// [`has_notification`](Self::has_notification) before the op was applied).
    pub(crate) fn notification_arrived(&self, index: u32) {
        let n = self.notify.lock();
        if let Some(n) = n.as_ref() {
            n.bump(index);
        }
    }

    /// Whether this process has counter `index` (an incoming notified op's is checked
    /// before anything of the op is applied).
    pub(crate) fn has_notification(&self, index: u32) -> bool {
        let n = self.notify.lock();
        n.as_ref().is_some_and(|n| {
            n.counts
                .get(self.engine.rank as usize)
                .is_some_and(|c| index < *c)
        })
    }

    /// `f` of this process's counters, `index` checked against them, held for `f`
    /// alone (no progress in it): a wait's every look, no reference count taken.
    #[inline]
    fn with_own_counters<R>(&self, index: u32, f: impl FnOnce(&Notifications) -> R) -> Result<R> {
        let held = self.notify.lock();
        let count = held
            .as_ref()
            .and_then(|n| n.counts.get(self.engine.rank as usize).copied())
            .unwrap_or(0);
        match held.as_deref() {
            Some(n) if index < count => Ok(f(n)),
            _ => Err(self.no_own_counter(index, count)),
        }
    }

    #[cold]
    #[inline(never)]
    fn no_own_counter(&self, index: u32, count: u32) -> Error {
        UsageError::NotifyIndex {
            target: self.engine.rank,
            index,
            count,
        }
        .into()
    }
}

impl<T: Element> Window<T> {
    /// Gives each process of the window `count` notification counters of its own (all at
    /// zero), replacing those it had; 0 removes them. Collective over the window's
    /// processes, outside any epoch; the counts may differ from process to process (each
    /// learns the others'). Notified ops name a counter of their target
    /// ([`put_notify`](Self::put_notify)); the target reads it with
    /// [`notify_value`](Self::notify_value) or waits for it with
    /// [`wait_notify`](Self::wait_notify).
    ///
    /// A ring of producers and consumers, each halo read when its count says it is there:
    /// ```
    /// use rma_core::{sim, Assert};
    /// sim::run(3, sim::Profile::ActiveMessages, 7, |engine| {
    ///     let (me, n) = (engine.rank(), engine.size() as u32);
    ///     let win = engine.allocate::<u64>(4)?;
    ///     win.set_notify_count(1)?;
    ///     win.lock_all(Assert::NONE)?;
    ///     win.put_notify(&[u64::from(me); 4], (me + 1) % n, 0, 0)?;
    ///     win.wait_notify(0, 1)?; // the left neighbour's halo is here
    ///     assert_eq!(win.local_to_vec(), vec![u64::from((me + n - 1) % n); 4]);
    ///     win.unlock_all()?;
    ///     win.free()?;
    ///     Ok(())
    /// }).unwrap();
    /// ```
    pub fn set_notify_count(&self, count: u32) -> Result<()> {
        self.raised("set_notify_count", || {
            let w = &self.shared;
            if !WindowShared::no_access_epoch(&w.lock_state()) {
                return Err(UsageError::EpochOpen.into());
            }
            let engine = Engine {
                shared: w.engine.clone(),
            };
            let comm: Option<&Comm> = w.comm.as_ref();
            let world;
            let members: &Comm = match comm {
                Some(c) => c,
                None => {
                    world = engine.world();
                    &world
                }
            };
            // Every process is here before any counter goes (no notified op of the old
            // counters is still to arrive once the epochs that carried them ended), and
            // learns everyone's count.
            let all = members.allgather(&[count])?;
            let old = w.notify.lock().take();
            if let Some(old) = old {
                old.free()?;
            }
            // Each process's counters on cache lines of their own: a consumer spinning on
            // its counter must not share the line with a neighbour's (64-byte parts).
            let padded = (count as usize).div_ceil(8) * 8;
            let window = engine.allocate_over::<u64>(comm, padded)?;
            let counters = window.shared.clone();
            let local = match &*counters.memory.read().unwrap_or_else(|e| e.into_inner()) {
                crate::target::Memory::Static(seg) => seg.clone(),
                crate::target::Memory::Dynamic(_) => unreachable!("an allocated window"),
            };
            let mut counts = vec![0u32; w.engine.size];
            for (i, c) in all.iter().enumerate() {
                let rank = w.group.as_ref().map_or(i as Rank, |g| g.members()[i]);
                counts[rank as usize] = *c;
            }
            let any = all.iter().any(|c| *c > 0);
            if any {
                let every_target_adds = counters.blocks_in_call
                    && counters.ops.is_some()
                    && (counters.classes.iter()).all(|c| c.has_atomic(AccOp::Sum, DataType::U64));
                let n = Notifications {
                    window: Mutex::new(Some(window)),
                    counters,
                    every_target_adds,
                    counts,
                    last_read: (0..local.len() / 8).map(|_| AtomicU64::new(0)).collect(),
                    unchanged_reads: AtomicU32::new(0),
                    local,
                    unshared: Mutex::new(()),
                };
                // A window's memory starts as the backend gives it (MPI promises no
                // zeros); counters start at 0, before anyone may count on them.
                for i in 0..count {
                    n.set(i, 0);
                }
                *w.notify.lock() = Some(Arc::new(n));
            } else {
                window.free().map_err(|e| e.error)?;
            }
            // Nobody notifies a process before it holds its counters.
            members.barrier()
        })
    }

    /// This process's notification counters ([`set_notify_count`](Self::set_notify_count)).
    pub fn notify_count(&self) -> u32 {
        let n = self.shared.notify.lock();
        n.as_ref()
            .and_then(|n| n.counts.get(self.shared.engine.rank as usize).copied())
            .unwrap_or(0)
    }

    /// This process's counter `index`: how many notified ops named it since it was set.
    /// A count seen here means those ops' data is seen too (acquire).
    ///
    /// Makes progress first where a count may wait for it: a count that comes as a
    /// message, or as a notified put's notice the backend reports
    /// ([`Event::Notified`](crate::transport::Event::Notified)), is counted by the
    /// progress of this process, so a count read after the origin's op completed (a
    /// flush, then a barrier) includes it. (On shared memory such a count is in before
    /// its origin's op completes; a loop of reads that see nothing new makes progress
    /// every few reads, so that counts by message come in too.)
    pub fn notify_value(&self, index: u32) -> Result<u64> {
        self.raised("notify_value", || {
            let w = &self.shared;
            // The value, and whether it is the one the last read returned.
            let read = |n: &Notifications| {
                let v = n.value(index);
                let last = n.last_read.get(index as usize);
                (v, last.is_some_and(|l| l.swap(v, Ordering::Relaxed) == v))
            };
            // Where the backend's ops all complete in their call (shared memory), no
            // transport reports notices: each one is an origin's own atomic add, or
            // comes with an active message that this process applied before its
            // origin's flush could complete. A count that moved since the last read is
            // then as current as a progress pass would make it; one that did not move
            // gets the pass (messages may wait to be applied). A C loop polling
            // MPI_Win_notify_get_value paid a pass of every window's state per read.
            //
            // A read that sees nothing new makes the pass only every
            // `PASS_EVERY_UNCHANGED`th time where the core is this process's
            // own: a poll loop's every read paid the pass (the C halo's reads through
            // librma-mpi, 2x rma's own wait), and a count by message waits a few reads
            // for it at most. Where the core is shared, every such read makes the pass
            // and hands the core over below.
            if w.ops.is_some() {
                let yields = w.engine.yields_while_waiting;
                let (v, same, skip) = w.with_own_counters(index, |n| {
                    let (v, same) = read(n);
                    (v, same, same && !yields && n.unchanged_read())
                })?;
                if !same || skip {
                    return Ok(v);
                }
            }
            w.engine.progress()?;
            let (v, same) = w.with_own_counters(index, read)?;
            // A loop of reads is a wait: where the producer may need this core, a read
            // that sees nothing new hands it over (Open MPI's progress yields when idle
            // and oversubscribed the same way). A spinning reader of 4 ranks on 2 cores
            // held the core for a scheduler slice: 4 ms a halo through librma-mpi.
            if same && w.engine.yields_while_waiting {
                std::thread::yield_now();
            }
            Ok(v)
        })
    }

    /// Sets this process's counter `index` to `value` (release), for example back to 0
    /// before the next round. Ops counting on it meanwhile are the caller's to order.
    pub fn notify_set(&self, index: u32, value: u64) -> Result<()> {
        self.raised("notify_set", || {
            self.shared
                .with_own_counters(index, |n| n.set(index, value))
        })
    }

    /// Waits until this process's counter `index` is at least `at_least`, making progress
    /// meanwhile (notified ops that came as messages are applied by it), within the
    /// library's deadline. Returns the value seen.
    pub fn wait_notify(&self, index: u32, at_least: u64) -> Result<u64> {
        self.raised("wait_notify", || {
            let w = &self.shared;
            // Each look holds the counters for its read alone: the wait's progress
            // counts arriving notifications under a hold of its own.
            let look = || w.with_own_counters(index, |n| n.value(index));
            // Where the node's ranks outnumber its CPUs, the producer may need this
            // core: every look that misses hands it over. Otherwise a while on the
            // counter alone first: on shared memory the count comes from the producers'
            // own atomic adds, and a progress pass per look would only slow the look
            // (messages wait for the pass at most this long); and no yield, which would
            // hand the rest of the slice to whatever else runs (a CPU hog) while the
            // count comes. (Spinning first with 4 ranks on 2 cores cost a 4-rank halo
            // on shared memory half again what a flag it yields for costs.)
            let yields = w.engine.yields_while_waiting;
            let mut seen = look()?;
            for _ in 0..if yields { 0 } else { 32 } {
                if seen >= at_least {
                    return Ok(seen);
                }
                std::hint::spin_loop();
                seen = look()?;
            }
            w.engine.wait_until("wait_notify", || {
                seen = look()?;
                if seen < at_least && yields {
                    std::thread::yield_now();
                }
                Ok(seen >= at_least)
            })?;
            Ok(seen)
        })
    }

    /// [`put`](Self::put), notified: `target`'s counter `index` counts it once its data is
    /// in `target`'s memory.
    pub fn put_notify(&self, data: &[T], target: Rank, disp: u64, index: u32) -> Result<()> {
        toward_target!(self, "put_notify", target, |target| self
            .put_notify_contiguous(data, target, disp, index))
    }

    /// [`put_notify`](Self::put_notify) toward World rank `target`: the direct path here,
    /// as a plain put's (a halo's notified put went through the general path's prologue
    /// and a closure: 353 instructions with the counters' read lock, 249 now; a plain
    /// put + flush 181), the rest out of line.
    #[inline(always)]
    fn put_notify_contiguous(&self, data: &[T], target: Rank, disp: u64, index: u32) -> Result<()> {
        if self.shared.direct.allows(target) {
            let layout = Layout::contiguous(data.len());
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            let bytes = bytemuck::cast_slice(data);
            if let Some(done) =
                (self.shared).put_notified_direct(target, extent.offset, bytes, index)
            {
                return done;
            }
        }
        self.post_notified(OpKind::Put, None, data, target, disp, index)
    }

    /// A notified put or accumulate of contiguous `data` toward World rank `target`: in
    /// pieces as messages where it is larger than one and its counter cannot follow
    /// natively, otherwise one op.
    #[inline(never)]
    fn post_notified(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        data: &[T],
        target: Rank,
        disp: u64,
        index: u32,
    ) -> Result<()> {
        if let Some(op) = op {
            Self::check_op(op)?;
        }
        let layout = Layout::contiguous(data.len());
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let n = self.shared.notifications(target, index)?;
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        let notify = NotifyDesc {
            index,
            counters: &n,
            counts: true,
        };
        let native = (self.shared).notified_native(&n, kind, target, bytes.len(), index);
        if !native && self.put_then_count(kind, target, extent, bytes.len()) {
            // The put natively, then its count as a message of no data behind it on the
            // ordered channel: the target takes the count in after the data is placed.
            self.post_contiguous_put(data, target, disp, extent)?;
            return self.post_notified(kind, None, &[], target, disp, index);
        }
        if let Some(p) = self.pieces_of(kind, op, target, disp, layout, extent, native)? {
            return self
                .post_pieces_notified(kind, op, target, p, data, false, notify)
                .map(drop);
        }
        self.shared
            .post(OpDesc {
                notify: Some(notify),
                ..Self::desc(kind, target, extent, op, bytes, false)
            })
            .map(drop)
    }

    /// Whether a notified put of `len` bytes goes as a native put and a message of no
    /// data that counts it, rather than as messages that carry the data: where the
    /// counter cannot be added natively but the put can go natively and the backend
    /// orders a message behind a put ([`Capabilities::ordered_puts`]: the target places
    /// the put's data before it takes in the message, so the count still follows the
    /// data), and the data is large enough that moving it by RDMA beats copying it
    /// through active messages.
    ///
    /// [`Capabilities::ordered_puts`]: crate::transport::Capabilities::ordered_puts
    fn put_then_count(&self, kind: OpKind, target: Rank, extent: Extent, len: usize) -> bool {
        kind == OpKind::Put
            && len >= NOTIFIED_PUT_NATIVE_FROM
            && self.shared.caps(target).ordered_puts
            && self
                .shared
                .native_allowed(kind, None, T::DATATYPE, target, extent)
    }

    /// [`get`](Self::get), notified: `target`'s counter `index` counts it once its data is
    /// read from `target`'s memory (the target may then reuse it).
    pub fn get_notify(
        &self,
        target: Rank,
        disp: u64,
        count: usize,
        index: u32,
    ) -> Result<Request<Vec<T>>> {
        self.raised("get_notify", || {
            let target = self.shared.world(target)?;
            let n = self.shared.notifications(target, index)?;
            let layout = Layout::contiguous(count);
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            let notify = NotifyDesc {
                index,
                counters: &n,
                counts: true,
            };
            let native = n.native_toward(&self.shared, target);
            if let Some(p) =
                self.pieces_of(OpKind::Get, None, target, disp, layout, extent, native)?
            {
                let parts =
                    self.post_pieces_notified(OpKind::Get, None, target, p, &[], true, notify)?;
                return Ok(Request::joined(parts, to_vec::<T>));
            }
            let mut out = zeroed_vec::<T>(count)?;
            let into = Some(std::cell::RefCell::new(bytemuck::cast_slice_mut(
                out.as_mut_slice(),
            )));
            let posted = self.shared.post(OpDesc {
                into,
                notify: Some(notify),
                ..Self::desc(OpKind::Get, target, extent, None, &[], true)
            })?;
            Ok(match posted {
                Posted::Done(None) => Request::value(out),
                other => self.request(other, target, to_vec::<T>),
            })
        })
    }

    /// [`accumulate`](Self::accumulate), notified: `target`'s counter `index` counts it
    /// once its elements are updated.
    pub fn accumulate_notify(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
        index: u32,
    ) -> Result<()> {
        toward_target!(self, "accumulate_notify", target, |target| self
            .post_notified(OpKind::Accumulate, Some(op), data, target, disp, index))
    }
}
