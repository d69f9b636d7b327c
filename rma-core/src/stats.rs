//! Counters: messages and bytes by kind, ops by path, pool use. Per window and per
//! process, readable at any time by tests and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::wire::Kind;

/// Live counters (atomics, updated on the hot path with relaxed ordering).
#[derive(Debug, Default)]
pub struct Counters {
    messages: [AtomicU64; Kind::COUNT],
    bytes: [AtomicU64; Kind::COUNT],
    ops_native: AtomicU64,
    ops_direct: PerThreadCount,
    ops_active_message: AtomicU64,
    ops_queued: AtomicU64,
    op_elements_high_water: AtomicU64,
    target_elements_high_water: AtomicU64,
    restores: AtomicU64,
    refused: AtomicU64,
    ops_split: AtomicU64,
    pieces: AtomicU64,
    ops_held_for_order: AtomicU64,
    ops_waited_for_backlog: AtomicU64,
    agent_passes: AtomicU64,
    collectives_in_shared_memory: AtomicU64,
    gets_lent: AtomicU64,
    puts_lent: AtomicU64,
}

impl Counters {
    /// Counters of a window whose application calls from one thread at a time
    /// ([`Config::calls_one_at_a_time`](crate::Config::calls_one_at_a_time)) when
    /// `one_at_a_time`, of any number of threads otherwise.
    pub(crate) fn new(one_at_a_time: bool) -> Counters {
        let mut c = Counters::default();
        c.ops_direct.one_caller = one_at_a_time;
        c
    }
    /// A communicator's collective ran in its members' shared memory.
    pub(crate) fn collective_in_shared_memory(&self) {
        self.collectives_in_shared_memory.fetch_add(1, Relaxed);
    }
    /// An op too large for one active message went in `pieces`.
    pub(crate) fn split(&self, pieces: usize) {
        self.ops_split.fetch_add(1, Relaxed);
        self.pieces.fetch_add(pieces as u64, Relaxed);
    }
    /// An op of the accumulate family waited for one of the other path before it.
    pub(crate) fn held_for_order(&self) {
        self.ops_held_for_order.fetch_add(1, Relaxed);
    }
    /// A large op by message waited in its call for the bytes under way to drain.
    pub(crate) fn waited_for_backlog(&self) {
        self.ops_waited_for_backlog.fetch_add(1, Relaxed);
    }
    pub(crate) fn message(&self, kind: Kind, bytes: usize) {
        self.messages[kind as usize].fetch_add(1, Relaxed);
        self.bytes[kind as usize].fetch_add(bytes as u64, Relaxed);
    }
    /// An op took the native path (or the active-message one). For a window's own
    /// counters, whose ops are counted by their window's state, under its lock: the
    /// lock orders the writers, so a load and a store count exactly, without the locked
    /// add that every op paid (readers may see a count one behind, as with any relaxed
    /// counter).
    pub(crate) fn op_under_lock(&self, native: bool) {
        let counter = if native {
            &self.ops_native
        } else {
            &self.ops_active_message
        };
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }
    /// An op went straight to the backend, past the window's state
    /// ([`direct`](crate::window)), from any thread.
    #[inline(always)]
    pub(crate) fn op_direct(&self) {
        self.ops_direct.add_one();
    }
    pub(crate) fn queued(&self) {
        self.ops_queued.fetch_add(1, Relaxed);
    }
    pub(crate) fn restore(&self) {
        self.restores.fetch_add(1, Relaxed);
    }
    pub(crate) fn agent_pass(&self) {
        self.agent_passes.fetch_add(1, Relaxed);
    }
    /// A get was read straight into the buffer its request owns, lent to the backend.
    pub(crate) fn get_lent(&self) {
        self.gets_lent.fetch_add(1, Relaxed);
    }
    /// A put was written straight from the buffer its request holds, lent to the backend.
    pub(crate) fn put_lent(&self) {
        self.puts_lent.fetch_add(1, Relaxed);
    }
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }
    pub(crate) fn elements_in_use(&self, ops: usize, targets: usize) {
        self.op_elements_high_water.fetch_max(ops as u64, Relaxed);
        self.target_elements_high_water
            .fetch_max(targets as u64, Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> Stats {
        let load = |a: &[AtomicU64; Kind::COUNT]| std::array::from_fn(|i| a[i].load(Relaxed));
        Stats {
            messages: load(&self.messages),
            bytes: load(&self.bytes),
            // Direct ops are native ones that skipped the lock their count took.
            ops_native: self.ops_native.load(Relaxed) + self.ops_direct.sum(),
            ops_direct: self.ops_direct.sum(),
            ops_active_message: self.ops_active_message.load(Relaxed),
            ops_queued: self.ops_queued.load(Relaxed),
            op_elements_high_water: self.op_elements_high_water.load(Relaxed),
            target_elements_high_water: self.target_elements_high_water.load(Relaxed),
            restores: self.restores.load(Relaxed),
            refused: self.refused.load(Relaxed),
            ops_split: self.ops_split.load(Relaxed),
            pieces: self.pieces.load(Relaxed),
            ops_held_for_order: self.ops_held_for_order.load(Relaxed),
            ops_waited_for_backlog: self.ops_waited_for_backlog.load(Relaxed),
            agent_passes: self.agent_passes.load(Relaxed),
            collectives_in_shared_memory: self.collectives_in_shared_memory.load(Relaxed),
            gets_lent: self.gets_lent.load(Relaxed),
            puts_lent: self.puts_lent.load(Relaxed),
        }
    }
}

/// A count that many threads add to, exactly and without a locked instruction in the
/// common case: a direct op is about 30 ns on shared memory, and a locked add a fifth
/// of it. Each of the process's first [`SHARDS`](PerThreadCount::SHARDS) threads (as
/// `rma_sync::thread_id` numbers them, the numbering the window state's lock uses) owns
/// a shard, where a load and a store add exactly (one writer); later threads share a
/// locked add. A sum may be a few counts behind the adds
/// happening meanwhile, as any relaxed counter.
///
/// Where calls come one at a time (`one_caller`), every add is a load and a store of
/// `shared`: the application's order of its calls orders them, and no thread looks its
/// shard up (a thread-local: in a shared library, a call into the dynamic linker).
#[derive(Debug, Default)]
struct PerThreadCount {
    shards: [Shard; PerThreadCount::SHARDS],
    shared: AtomicU64,
    one_caller: bool,
}

/// One thread's share of a [`PerThreadCount`], on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard(AtomicU64);

impl PerThreadCount {
    const SHARDS: usize = 8;

    #[inline(always)]
    fn add_one(&self) {
        if self.one_caller {
            self.shared.store(self.shared.load(Relaxed) + 1, Relaxed);
            return;
        }
        match self.shards.get(thread_shard()) {
            Some(Shard(mine)) => mine.store(mine.load(Relaxed) + 1, Relaxed),
            None => {
                self.shared.fetch_add(1, Relaxed);
            }
        }
    }

    fn sum(&self) -> u64 {
        let shards: u64 = self.shards.iter().map(|s| s.0.load(Relaxed)).sum();
        shards + self.shared.load(Relaxed)
    }
}

/// This thread's shard index in every [`PerThreadCount`]: its process-wide number, from
/// 0 (a thread's shard is its own for good: no other thread ever stores to it).
#[inline(always)]
fn thread_shard() -> usize {
    (rma_sync::thread_id() - 1) as usize
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    messages: [u64; Kind::COUNT],
    bytes: [u64; Kind::COUNT],
    /// Operations done through the backend's native path.
    pub ops_native: u64,
    /// Of those, the ones that went straight to the backend without the window's state
    /// lock or op table: toward a granted target with nothing outstanding, on a backend
    /// whose ops complete in the call (shared memory).
    pub ops_direct: u64,
    /// Operations sent as active messages.
    pub ops_active_message: u64,
    /// Operations queued in the op table before issue (piggyback, single-op, waiting for
    /// a lock or a post).
    pub ops_queued: u64,
    /// Most operation elements in use at once.
    pub op_elements_high_water: u64,
    /// Most target elements in use at once.
    pub target_elements_high_water: u64,
    /// Times RESTORE_OP_ELEM_RESOURCES or RESTORE_TARGET_ELEM_RESOURCES ran.
    pub restores: u64,
    /// Incoming operations refused (malformed or out of the window).
    pub refused: u64,
    /// Operations too large for one active message, sent in pieces.
    pub ops_split: u64,
    /// The pieces they went in.
    pub pieces: u64,
    /// Ops of the accumulate family (accumulate, get_accumulate, fetch_and_op,
    /// compare_and_swap) that waited before going because one before them to the same
    /// target took the other path (native after active messages: until an ack says
    /// those are applied; an active message after native ones: until they complete), so
    /// that neither overtakes the other (MPI's accumulate ordering).
    pub ops_held_for_order: u64,
    /// Large ops by message that waited in their call for room: the bytes a window keeps
    /// under way (its outbox, a target's replies owed) were at their bound.
    pub ops_waited_for_backlog: u64,
    /// Progress passes the progress agent ran (process-wide; see
    /// [`AsyncProgress`](crate::AsyncProgress)).
    pub agent_passes: u64,
    /// Barriers, allreduces and broadcasts of communicators that ran in their members'
    /// shared memory, without messages (process-wide).
    pub collectives_in_shared_memory: u64,
    /// Gets read straight into the buffer their request owns, lent to the backend
    /// ([`Capabilities::lent_gets_from`](crate::transport::Capabilities::lent_gets_from)).
    pub gets_lent: u64,
    /// Puts written straight from the buffer their request holds, lent to the backend
    /// ([`Capabilities::lent_puts_from`](crate::transport::Capabilities::lent_puts_from)).
    pub puts_lent: u64,
}

impl Stats {
    /// Messages sent of one kind.
    pub fn messages(&self, kind: Kind) -> u64 {
        self.messages[kind as usize]
    }
    /// Bytes sent in messages of one kind.
    pub fn bytes(&self, kind: Kind) -> u64 {
        self.bytes[kind as usize]
    }
    /// All messages sent.
    pub fn total_messages(&self) -> u64 {
        self.messages.iter().sum()
    }
    /// The change from `earlier` to `self` (high-water marks are kept as they are).
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            messages: std::array::from_fn(|i| self.messages[i] - earlier.messages[i]),
            bytes: std::array::from_fn(|i| self.bytes[i] - earlier.bytes[i]),
            ops_native: self.ops_native - earlier.ops_native,
            ops_direct: self.ops_direct - earlier.ops_direct,
            ops_active_message: self.ops_active_message - earlier.ops_active_message,
            ops_queued: self.ops_queued - earlier.ops_queued,
            restores: self.restores - earlier.restores,
            refused: self.refused - earlier.refused,
            ops_split: self.ops_split - earlier.ops_split,
            pieces: self.pieces - earlier.pieces,
            ops_held_for_order: self.ops_held_for_order - earlier.ops_held_for_order,
            ops_waited_for_backlog: self.ops_waited_for_backlog - earlier.ops_waited_for_backlog,
            agent_passes: self.agent_passes - earlier.agent_passes,
            collectives_in_shared_memory: self.collectives_in_shared_memory
                - earlier.collectives_in_shared_memory,
            gets_lent: self.gets_lent - earlier.gets_lent,
            puts_lent: self.puts_lent - earlier.puts_lent,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More threads than shards count at once: the sum is exact (owned shards lose no
    /// add, the rest share a locked one).
    #[test]
    fn per_thread_count_is_exact_across_threads() {
        let count = std::sync::Arc::new(PerThreadCount::default());
        let threads: Vec<_> = (0..PerThreadCount::SHARDS + 4)
            .map(|_| {
                let count = count.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        count.add_one();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.sum(), (PerThreadCount::SHARDS as u64 + 4) * 10_000);
    }

    /// Calls one at a time from several threads, each handing over to the next (as an
    /// application at MPI_THREAD_SERIALIZED orders them): one place counts every add.
    #[test]
    fn one_caller_count_is_exact_across_handed_over_threads() {
        let counters = std::sync::Arc::new(Counters::new(true));
        for _ in 0..PerThreadCount::SHARDS + 4 {
            let c = counters.clone();
            // join() is the hand-over: the next thread's adds come after this one's.
            std::thread::spawn(move || (0..1_000).for_each(|_| c.op_direct()))
                .join()
                .unwrap();
        }
        let stats = counters.snapshot();
        assert_eq!(
            stats.ops_direct,
            (PerThreadCount::SHARDS as u64 + 4) * 1_000
        );
        assert_eq!(stats.ops_native, stats.ops_direct);
        // Every add went to the shared word: no thread's shard holds any.
        assert!(counters
            .ops_direct
            .shards
            .iter()
            .all(|s| s.0.load(Relaxed) == 0));
    }
}
