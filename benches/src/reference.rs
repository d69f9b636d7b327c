//! `--reference`: the pattern of each benchmark done by hand, with no library in the
//! way, by the same two ranks in the same run, right after the library's loop for each
//! size (same sizes, same iteration and warm-up counts, same timer on rank 0).
//!
//! Rank 0 creates a shared-memory segment ([`SharedSegment`]) that rank 1 maps too: a
//! control page (a flag per rank, each on its own 128-byte line, and a lock word), then
//! one data region per rank (its "window"). What the reference does per iteration:
//!
//! | benchmark, sync | reference |
//! | --- | --- |
//! | latency, flush / flush_local | rank 0 alone: the op on rank 1's region (memcpy for put and get; a CPU atomic per byte for accumulate and get_accumulate, on the `u64` for fetch_and_op and compare_and_swap), then a full fence: what completing the op at the target costs on shared memory at least |
//! | latency, lock / lock_all | the same inside a lock word of rank 1 taken (compare-exchange) and released (store or decrement): shared or exclusive as the benchmark's lock |
//! | latency, fence / pscw | ping-pong: rank 0 does the op on rank 1's region and raises its flag; rank 1, spinning on that flag, does the op on rank 0's region and raises its own; latency = round trip / 2, as OSU halves its fence and PSCW loops |
//! | bandwidth, passive modes | rank 0: the window's messages as memcpys into (put) or out of (get) rank 1's region, a full fence, per iteration (and the lock word for lock and lock_all) |
//! | bandwidth, fence / pscw | the memcpys, then a flag round trip (rank 1 answers) per iteration |
//! | bi-directional bandwidth | both ranks memcpy the window's messages into each other's region, then raise their flag and wait for the other's |
//!
//! Once, when the segment is set up, the bare flag round trip is measured too and
//! printed in the preamble: the one-way cache-line transfer between the two ranks.

use std::hint::{black_box, spin_loop};
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rma_core::{Engine, LockType, Result, TransportError};

use crate::osu::{Benchmark, Measure, Operation, SyncMode};
use crate::shm::SharedSegment;

/// The control page: flags, lock word.
const CONTROL: usize = 4096;
/// Offset of the flag each rank raises (one line apart, and a line between them).
const FLAG: [usize; 2] = [0, 128];
/// Offset of the lock word (of rank 1's "window").
const LOCK_WORD: usize = 256;
/// The lock word's exclusive bit (shared holders count below it).
const EXCLUSIVE: u64 = 1 << 63;
/// A peer that does not answer for this long has failed.
const STALL: Duration = Duration::from_secs(30);
/// Iterations of the bare flag round trip measured at setup (after as many warm-ups).
const FLAG_ROUNDS: usize = 10_000;

fn failed(msg: String) -> rma_core::Error {
    TransportError::Failed(msg).into()
}

/// Times iterations `skip..total` of `step` (the first `skip` warm up): every timed loop
/// of the benchmarks, the library's and the references'.
pub(crate) fn timed(
    skip: usize,
    total: usize,
    mut step: impl FnMut() -> Result<()>,
) -> Result<Duration> {
    let mut start = Instant::now();
    for i in 0..total {
        if i == skip {
            start = Instant::now();
        }
        step()?;
    }
    Ok(start.elapsed())
}

/// One rank's side of the reference patterns.
#[derive(Debug)]
pub struct Reference {
    seg: SharedSegment,
    /// Bytes of each rank's data region.
    cap: usize,
    me: usize,
    /// The round number both ranks count alike; a flag holds the last round its rank
    /// finished.
    seq: u64,
    /// The origin buffer (filled with `a`, like OSU's).
    local: Vec<u8>,
    /// Where fetched values land.
    result: Vec<u8>,
    /// Half the bare flag round trip, microseconds (measured at setup).
    pub flag_half_round_trip_us: f64,
}

impl Reference {
    /// Sets the segment up between the two ranks (collective): rank 0 creates `name`
    /// with a data region of `cap` bytes per rank, rank 1 maps it, the name goes; then
    /// measures the bare flag round trip.
    pub fn join(engine: &Engine, name: &str, cap: usize) -> Result<Reference> {
        let me = engine.rank() as usize;
        let cap = cap.max(64).div_ceil(4096) * 4096;
        let len = CONTROL + 2 * cap;
        let created = if me == 0 {
            Some(SharedSegment::create(name, len))
        } else {
            None
        };
        engine.barrier()?;
        let seg = match created {
            Some(s) => s,
            None => SharedSegment::open(name, len),
        };
        engine.barrier()?;
        if me == 0 {
            let _ = SharedSegment::unlink(name);
        }
        let seg = seg.map_err(|e| failed(format!("reference segment {name}: {e}")))?;
        let mut r = Reference {
            seg,
            cap,
            me,
            seq: 0,
            local: vec![b'a'; cap],
            result: Vec::new(),
            flag_half_round_trip_us: 0.0,
        };
        r.flag_half_round_trip_us = r.flag_round_trip(FLAG_ROUNDS, FLAG_ROUNDS / 10)?;
        engine.barrier()?;
        Ok(r)
    }

    /// A control word of the segment.
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= CONTROL);
        // SAFETY: `offset` is one of the control words: inside the mapping (which is
        // page-aligned, so the word is 8-aligned), alive as long as `self`, and accessed
        // only atomically by both ranks.
        unsafe { AtomicU64::from_ptr(self.seg.as_ptr().add(offset).cast()) }
    }

    /// The first byte of `rank`'s data region.
    fn region(&self, rank: usize) -> *mut u8 {
        // SAFETY: CONTROL + rank * cap (rank < 2) is inside the mapping of
        // CONTROL + 2 * cap bytes.
        unsafe { self.seg.as_ptr().add(CONTROL + rank * self.cap) }
    }

    fn signal(&self) {
        self.word(FLAG[self.me]).store(self.seq, Ordering::Release);
    }

    fn await_peer(&self) -> Result<()> {
        let w = self.word(FLAG[1 - self.me]);
        let mut spins = 0u32;
        let mut since: Option<Instant> = None;
        while w.load(Ordering::Acquire) < self.seq {
            spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 14) {
                // Only when the peer is slow (or shares our core): look at the clock and
                // let the peer run.
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() > STALL {
                    return Err(failed(format!(
                        "reference: rank {} did not answer for {STALL:?}",
                        1 - self.me
                    )));
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Rank 0's half of a round: act, raise the flag, wait for the answer.
    fn lead(&mut self, act: impl FnOnce(&mut Self)) -> Result<()> {
        self.seq += 1;
        act(self);
        self.signal();
        self.await_peer()
    }

    /// Rank 1's half of a round: wait for rank 0, act, answer.
    fn follow(&mut self, act: impl FnOnce(&mut Self)) -> Result<()> {
        self.seq += 1;
        self.await_peer()?;
        act(self);
        self.signal();
        Ok(())
    }

    /// Half the bare flag round trip in microseconds (rank 0's figure; rank 1 gets 0).
    fn flag_round_trip(&mut self, iterations: usize, skip: usize) -> Result<f64> {
        let total = iterations + skip;
        if self.me == 0 {
            let d = timed(skip, total, || self.lead(|_| ()))?;
            Ok(d.as_secs_f64() * 1e6 / iterations as f64 / 2.0)
        } else {
            for _ in 0..total {
                self.follow(|_| ())?;
            }
            Ok(0.0)
        }
    }

    fn acquire(&self, exclusive: bool) {
        let w = self.word(LOCK_WORD);
        loop {
            let cur = w.load(Ordering::Relaxed);
            let next = if exclusive { EXCLUSIVE } else { cur + 1 };
            let free = if exclusive {
                cur == 0
            } else {
                cur & EXCLUSIVE == 0
            };
            if free
                && w.compare_exchange_weak(cur, next, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            spin_loop();
        }
    }

    fn release(&self, exclusive: bool) {
        let w = self.word(LOCK_WORD);
        if exclusive {
            w.store(0, Ordering::Release);
        } else {
            w.fetch_sub(1, Ordering::Release);
        }
    }

    /// `op` by hand on `size` bytes at `offset` of `peer`'s region, from (or into)
    /// `offset` of the local buffers.
    fn raw_op(&mut self, op: Operation, peer: usize, offset: usize, size: usize) {
        debug_assert!(offset + size <= self.cap);
        let remote = self.region(peer);
        match op {
            Operation::Put => {
                // SAFETY: `offset + size <= cap`: inside `local` and inside the peer's
                // region of the mapping; the two never overlap (one is process memory).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.local.as_ptr().add(offset),
                        remote.add(offset),
                        size,
                    )
                };
            }
            Operation::Get => {
                // SAFETY: as for Put, the other way round.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        remote.add(offset),
                        self.local.as_mut_ptr().add(offset),
                        size,
                    )
                };
                black_box(&mut self.local);
            }
            Operation::Accumulate | Operation::GetAccumulate => {
                let fetch = op == Operation::GetAccumulate;
                if fetch && self.result.len() < offset + size {
                    self.result.resize(offset + size, 0);
                }
                for i in offset..offset + size {
                    // SAFETY: byte `i` of the peer's region (i < cap); u8 atomics need no
                    // alignment; the region lives as long as `self`.
                    let a = unsafe { AtomicU8::from_ptr(remote.add(i)) };
                    let old = a.fetch_add(self.local[i], Ordering::Relaxed);
                    if fetch {
                        self.result[i] = old;
                    }
                }
                black_box(&mut self.result);
            }
            Operation::FetchAndOp | Operation::CompareAndSwap => {
                // SAFETY: `offset` is 0 here and regions are page-aligned, so the u64 is
                // aligned and inside the peer's region (cap >= 64).
                let a = unsafe { AtomicU64::from_ptr(remote.add(offset).cast()) };
                if op == Operation::FetchAndOp {
                    black_box(a.fetch_add(1, Ordering::AcqRel));
                } else {
                    let _ =
                        black_box(a.compare_exchange(0, 0, Ordering::AcqRel, Ordering::Acquire));
                }
            }
        }
    }

    /// The reference latency of `bench` under `sync` for messages of `size` bytes,
    /// microseconds (collective: both ranks call it; rank 1 gets 0 for passive modes).
    pub fn latency(
        &mut self,
        bench: &Benchmark,
        sync: SyncMode,
        size: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        let op = bench.operation;
        let total = iterations + skip;
        let per_op = |d: Duration| d.as_secs_f64() * 1e6 / iterations as f64;
        if sync.is_active() {
            return if self.me == 0 {
                let d = timed(skip, total, || self.lead(|r| r.raw_op(op, 1, 0, size)))?;
                Ok(per_op(d) / 2.0)
            } else {
                for _ in 0..total {
                    self.follow(|r| r.raw_op(op, 0, 0, size))?;
                }
                Ok(0.0)
            };
        }
        if self.me != 0 {
            return Ok(0.0);
        }
        let locked = matches!(sync, SyncMode::Lock | SyncMode::LockAll);
        let exclusive = bench.lock_type(sync) == LockType::Exclusive;
        let d = timed(skip, total, || {
            if locked {
                self.acquire(exclusive);
            }
            self.raw_op(op, 1, 0, size);
            fence(Ordering::SeqCst);
            if locked {
                self.release(exclusive);
            }
            Ok(())
        })?;
        Ok(per_op(d))
    }

    /// The reference bandwidth of `bench` under `sync`, `window` messages of `size`
    /// bytes per iteration, MB/s (collective; rank 1 gets 0).
    pub fn bandwidth(
        &mut self,
        bench: &Benchmark,
        sync: SyncMode,
        size: usize,
        window: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        let op = bench.operation;
        let total = iterations + skip;
        let peer = 1 - self.me;
        let mb = |d: Duration| mb_per_s(size, iterations * window, d);
        let burst = move |r: &mut Self| {
            for j in 0..window {
                r.raw_op(op, peer, j * size, size);
            }
        };
        if bench.measure == Measure::BiBandwidth {
            let d = timed(skip, total, || {
                burst(self);
                self.seq += 1;
                self.signal();
                self.await_peer()
            })?;
            return Ok(if self.me == 0 { 2.0 * mb(d) } else { 0.0 });
        }
        if sync.is_active() {
            return if self.me == 0 {
                let d = timed(skip, total, || {
                    burst(self);
                    self.lead(|_| ())
                })?;
                Ok(mb(d))
            } else {
                for _ in 0..total {
                    self.follow(|_| ())?;
                }
                Ok(0.0)
            };
        }
        if self.me != 0 {
            return Ok(0.0);
        }
        let locked = matches!(sync, SyncMode::Lock | SyncMode::LockAll);
        let d = timed(skip, total, || {
            if locked {
                self.acquire(false);
            }
            burst(self);
            fence(Ordering::SeqCst);
            if locked {
                self.release(false);
            }
            Ok(())
        })?;
        Ok(mb(d))
    }

    /// The preamble lines (`# ...`) saying what the reference column measures.
    pub fn notes(&self, bench: &Benchmark, sync: SyncMode, window: usize) -> Vec<String> {
        let lock = match (sync, bench.lock_type(sync)) {
            (SyncMode::Lock | SyncMode::LockAll, LockType::Shared) => {
                ", inside a shared lock word of rank 1 taken and released"
            }
            (SyncMode::Lock | SyncMode::LockAll, LockType::Exclusive) => {
                ", inside an exclusive lock word of rank 1 taken and released"
            }
            _ => "",
        };
        let how = match bench.operation {
            Operation::Put | Operation::Get => "memcpy",
            Operation::Accumulate | Operation::GetAccumulate => "a CPU atomic add per byte",
            Operation::FetchAndOp => "an atomic fetch_add on the u64",
            Operation::CompareAndSwap => "an atomic compare_exchange on the u64",
        };
        let pattern = match (bench.measure, sync.is_active()) {
            (Measure::Latency, false) => format!(
                "# Reference: by hand on a segment both ranks map: {how} on rank 1's \
                 memory, then a full fence{lock}; rank 0 alone"
            ),
            (Measure::Latency, true) => format!(
                "# Reference: by hand on a segment both ranks map: ping-pong of {how} on the \
                 other rank's memory, then a cache-line flag the other spins on; round trip / 2"
            ),
            (Measure::Bandwidth, false) => format!(
                "# Reference: by hand on a segment both ranks map: {window} memcpys {} rank 1's \
                 memory, then a full fence{lock}, per iteration",
                if bench.operation == Operation::Get {
                    "from"
                } else {
                    "into"
                }
            ),
            (Measure::Bandwidth, true) => format!(
                "# Reference: by hand on a segment both ranks map: {window} memcpys {} rank 1's \
                 memory, then a cache-line flag round trip, per iteration",
                if bench.operation == Operation::Get {
                    "from"
                } else {
                    "into"
                }
            ),
            (Measure::BiBandwidth, _) => format!(
                "# Reference: by hand on a segment both ranks map: both ranks memcpy {window} \
                 messages into the other's memory, then exchange cache-line flags, per iteration"
            ),
        };
        vec![
            pattern,
            format!(
                "# Reference flag round trip / 2 (one cache line to the other rank): {:.3} us",
                self.flag_half_round_trip_us
            ),
            "# Ratio: ours / reference".to_string(),
        ]
    }
}

/// Swaps a blob (an address, a key) with the other rank (collective) through a small
/// window and a fence: how the bare references of the network backends meet.
#[cfg(any(feature = "ofi", feature = "verbs"))]
pub(crate) fn exchange(engine: &Engine, mine: &[u8]) -> Result<Vec<u8>> {
    const MAX: usize = 256;
    if mine.len() + 2 > MAX {
        return Err(TransportError::Failed("reference: address too long".into()).into());
    }
    let peer = 1 - engine.rank();
    let w = engine.allocate::<u8>(MAX)?;
    let mut framed = (mine.len() as u16).to_le_bytes().to_vec();
    framed.extend_from_slice(mine);
    w.fence(rma_core::Assert::NOPRECEDE)?;
    w.put(&framed, peer, 0)?;
    w.fence(rma_core::Assert::NOSUCCEED)?;
    let got = w.local_to_vec();
    w.free()?;
    let len = u16::from_le_bytes([got[0], got[1]]) as usize;
    got.get(2..2 + len)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| TransportError::Failed("reference: bad peer address".into()).into())
}

/// MB/s of `count` messages of `size` bytes in `d` (0 for no time: the rank that did
/// not time the loop).
pub(crate) fn mb_per_s(size: usize, count: usize, d: Duration) -> f64 {
    if d.is_zero() {
        return 0.0;
    }
    size as f64 / 1e6 * count as f64 / d.as_secs_f64()
}
