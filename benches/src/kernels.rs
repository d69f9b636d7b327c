//! The timed loops, as OSU 7.4's one-sided benchmarks run them, on any [`Engine`]: the
//! same code for the two processes of `-b shm` and the two threads of the simulated
//! transports. Rank 0 is the origin and keeps the clock; rank 1 is the target.
//!
//! Latency loops (per iteration, timed from the first iteration after the warm-up):
//! `lock` is lock/op/unlock; `flush` and `flush_local` hold a lock over the whole loop
//! and do op + flush (or flush_local); `lock_all` is lock_all/op/unlock_all; `fence` and
//! `pscw` do the op in both directions and report half the loop time, as OSU does. Locks
//! are shared, except where OSU takes exclusive ones ([`Benchmark::lock_type`]).
//! Bandwidth loops issue `-W` messages per iteration into consecutive slots of the
//! window, then synchronize once; `osu_put_bibw` does that on both ranks at once.
//!
//! Each size gets a fresh window (OSU frees and creates one per size); fetch_and_op and
//! compare_and_swap have one size, one `u64`.

use std::cell::RefCell;
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rma_core::{
    AccOp, Assert, Element, Engine, GetInto, Rank, Request, Result, TransportError, Window,
};

use crate::osu::{self, Benchmark, Measure, Operation, Options, Record, SyncMode, WindowCreation};
use crate::reference::{timed, Reference};

const ORIGIN: Rank = 0;
const TARGET: Rank = 1;

/// Where rank 0's table goes.
#[derive(Debug)]
pub enum Sink {
    /// Standard output.
    Stdout,
    /// A file (`-o`).
    File(PathBuf, std::fs::File),
}

impl Sink {
    /// Standard output, or the file `-o` names (created or truncated now).
    pub fn open(opts: &Options) -> std::result::Result<Sink, String> {
        match &opts.output {
            None => Ok(Sink::Stdout),
            Some(p) => std::fs::File::create(p)
                .map(|f| Sink::File(p.clone(), f))
                .map_err(|e| format!("cannot create {}: {e}", p.display())),
        }
    }

    /// Writes `text` and flushes (OSU flushes every line).
    pub fn write(&mut self, text: &str) -> Result<()> {
        let r = match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).and_then(|()| out.flush())
            }
            Sink::File(_, f) => f.write_all(text.as_bytes()).and_then(|()| f.flush()),
        };
        r.map_err(|e| {
            let to = match self {
                Sink::Stdout => "stdout".to_string(),
                Sink::File(p, _) => p.display().to_string(),
            };
            TransportError::Failed(format!("writing to {to}: {e}")).into()
        })
    }
}

/// What both ranks run with.
#[derive(Debug)]
pub struct Context {
    /// The benchmark.
    pub bench: &'static Benchmark,
    /// Its options (already fitted to the backend).
    pub opts: Options,
    /// Rank 0's output (rank 1 never writes).
    pub sink: Mutex<Option<Sink>>,
    /// Name of the reference segment (`--reference`), the same on both ranks.
    pub reference_name: String,
}

impl Context {
    fn emit(&self, text: &str) -> Result<()> {
        let mut s = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        match s.as_mut() {
            Some(sink) => sink.write(text),
            None => Ok(()),
        }
    }
}

/// Elements the benchmarks move: bytes, and the `u64` of fetch_and_op and
/// compare_and_swap.
trait Elem: Element + Copy {
    const ZERO: Self;
    /// The origin's fill value (OSU fills with `a`; atomics add 1).
    const FILL: Self;
}

impl Elem for u8 {
    const ZERO: u8 = 0;
    const FILL: u8 = b'a';
}

impl Elem for u64 {
    const ZERO: u64 = 0;
    const FILL: u64 = 1;
}

/// An operation's result still to collect after the synchronization that completes it.
enum Pending<'b, T: Element> {
    Nothing,
    One(Request<T>),
    /// A get into the caller's buffer (MPI_Get's pattern: no buffer per op).
    Into(GetInto<'b, T>),
    /// A get into (or put from) a buffer its request holds, back to the spares once
    /// waited for.
    Owned(Request<Vec<T>>, &'b RefCell<Vec<Vec<T>>>),
}

impl<T: Element> Pending<'_, T> {
    #[inline(always)]
    fn finish(self) -> Result<()> {
        match self {
            Pending::Nothing => {}
            Pending::One(r) => {
                black_box(r.wait()?);
            }
            Pending::Into(g) => {
                black_box(g.wait()?);
            }
            Pending::Owned(r, spares) => {
                let buf = black_box(r.wait()?);
                spares.borrow_mut().push(buf);
            }
        }
        Ok(())
    }
}

/// The operation a latency loop is specialized for (a const parameter: the loop calls the
/// library's function itself, as OSU's C loop does, with no dispatch per iteration).
const fn operation(code: u8) -> Operation {
    match code {
        0 => Operation::Put,
        1 => Operation::Get,
        2 => Operation::Accumulate,
        3 => Operation::GetAccumulate,
        4 => Operation::FetchAndOp,
        _ => Operation::CompareAndSwap,
    }
}

#[inline(always)]
fn issue<'b, T: Elem>(
    op: Operation,
    win: &Window<T>,
    data: &[T],
    dst: &'b mut [T],
    target: Rank,
    disp: u64,
) -> Result<Pending<'b, T>> {
    Ok(match op {
        Operation::Put => {
            win.put(data, target, disp)?;
            Pending::Nothing
        }
        Operation::Get => Pending::Into(win.get_into(target, disp, &mut dst[..data.len()])?),
        Operation::Accumulate => {
            win.accumulate(data, AccOp::Sum, target, disp)?;
            Pending::Nothing
        }
        // The result into the caller's buffer, as MPI_Get_accumulate's.
        Operation::GetAccumulate => Pending::Into(win.get_accumulate_into(
            data,
            AccOp::Sum,
            target,
            disp,
            &mut dst[..data.len()],
        )?),
        Operation::FetchAndOp => {
            Pending::One(win.fetch_and_op(data[0], AccOp::Sum, target, disp)?)
        }
        // Compare 0, swap 0: every swap succeeds and the value stays what it was.
        Operation::CompareAndSwap => {
            Pending::One(win.compare_and_swap(T::ZERO, T::ZERO, target, disp)?)
        }
    })
}

/// A window of one size, with the displacement of the peer's memory in it.
struct BenchWindow<T: Element> {
    win: Window<T>,
    /// Displacement of the start of the peer's memory (its attached address for
    /// dynamic windows, 0 otherwise).
    disp: u64,
    /// Our own attached address (dynamic windows).
    attached: Option<u64>,
}

/// Sends `mine` to the other rank and returns what it sent (collective), through a
/// one-element window and a fence: how the ranks learn each other's attached address.
fn exchange(engine: &Engine, mine: u64) -> Result<u64> {
    let peer = 1 - engine.rank();
    let w = engine.allocate::<u64>(1)?;
    w.fence(Assert::NOPRECEDE)?;
    w.put(&[mine], peer, 0)?;
    w.fence(Assert::NOSUCCEED)?;
    let theirs = w.local_to_vec()[0];
    w.free()?;
    Ok(theirs)
}

fn open_window<T: Elem>(
    engine: &Engine,
    kind: WindowCreation,
    len: usize,
) -> Result<BenchWindow<T>> {
    Ok(match kind {
        WindowCreation::Allocate => BenchWindow {
            win: engine.allocate::<T>(len)?,
            disp: 0,
            attached: None,
        },
        WindowCreation::Create => BenchWindow {
            win: engine.create(vec![T::ZERO; len])?,
            disp: 0,
            attached: None,
        },
        WindowCreation::Dynamic => {
            let win = engine.create_dynamic::<T>()?;
            let mine = win.attach(vec![T::ZERO; len])?;
            let disp = exchange(engine, mine)?;
            BenchWindow {
                win,
                disp,
                attached: Some(mine),
            }
        }
    })
}

impl<T: Element> BenchWindow<T> {
    fn close(self) -> Result<()> {
        if let Some(a) = self.attached {
            self.win.detach(a)?;
        }
        self.win.free()?;
        Ok(())
    }
}

/// The reference of `--reference`: by hand on shared memory, bare libfabric calls for
/// `-b ofi`, raw verbs for `-b verbs`.
enum AnyReference {
    SharedMemory(Reference),
    #[cfg(feature = "ofi")]
    Libfabric(Box<crate::ofi_reference::OfiReference>),
    #[cfg(feature = "verbs")]
    Verbs(Box<crate::verbs_reference::VerbsReference>),
}

impl AnyReference {
    fn join(engine: &Engine, ctx: &Context, cap: usize) -> Result<AnyReference> {
        #[cfg(feature = "ofi")]
        if ctx.opts.backend == crate::osu::Backend::Ofi {
            return Ok(AnyReference::Libfabric(Box::new(
                crate::ofi_reference::OfiReference::join(engine, cap)?,
            )));
        }
        #[cfg(feature = "verbs")]
        if ctx.opts.backend == crate::osu::Backend::Verbs {
            return Ok(AnyReference::Verbs(Box::new(
                crate::verbs_reference::VerbsReference::join(engine, cap)?,
            )));
        }
        Ok(AnyReference::SharedMemory(Reference::join(
            engine,
            &ctx.reference_name,
            cap,
        )?))
    }

    fn latency(
        &mut self,
        bench: &Benchmark,
        sync: SyncMode,
        size: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        match self {
            AnyReference::SharedMemory(r) => r.latency(bench, sync, size, iterations, skip),
            #[cfg(feature = "ofi")]
            AnyReference::Libfabric(r) => r.latency(bench, sync, size, iterations, skip),
            #[cfg(feature = "verbs")]
            AnyReference::Verbs(r) => r.latency(bench, size, iterations, skip),
        }
    }

    fn bandwidth(
        &mut self,
        bench: &Benchmark,
        sync: SyncMode,
        size: usize,
        window: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        match self {
            AnyReference::SharedMemory(r) => {
                r.bandwidth(bench, sync, size, window, iterations, skip)
            }
            #[cfg(feature = "ofi")]
            AnyReference::Libfabric(r) => r.bandwidth(bench, size, window, iterations, skip),
            #[cfg(feature = "verbs")]
            AnyReference::Verbs(r) => r.bandwidth(bench, size, window, iterations, skip),
        }
    }

    fn notes(&self, bench: &Benchmark, sync: SyncMode, window: usize) -> Vec<String> {
        match self {
            AnyReference::SharedMemory(r) => r.notes(bench, sync, window),
            #[cfg(feature = "ofi")]
            AnyReference::Libfabric(r) => r.notes(bench, sync),
            #[cfg(feature = "verbs")]
            AnyReference::Verbs(r) => r.notes(bench),
        }
    }
}

/// Runs the benchmark on this rank: preamble, then every size (collective).
pub fn run_rank(engine: &Engine, ctx: &Context) -> Result<()> {
    let (bench, o) = (ctx.bench, &ctx.opts);
    let sizes = o.sizes(bench);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut reference = if o.reference {
        let cap = largest * o.messages_per_iteration(bench);
        Some(AnyReference::join(engine, ctx, cap)?)
    } else {
        None
    };
    if engine.rank() == ORIGIN && !o.json {
        let notes = reference
            .as_ref()
            .map(|r| r.notes(bench, o.sync, o.window_size))
            .unwrap_or_default();
        ctx.emit(&osu::preamble(bench, o, &notes))?;
    }
    if bench.operation.is_atomic() {
        run_sizes::<u64>(engine, ctx, &sizes, reference.as_mut())
    } else {
        run_sizes::<u8>(engine, ctx, &sizes, reference.as_mut())
    }
}

/// Rounds in which the library's loop and the reference's alternate (`--reference`).
const REFERENCE_ROUNDS: usize = 16;

fn run_sizes<T: Elem>(
    engine: &Engine,
    ctx: &Context,
    sizes: &[usize],
    mut reference: Option<&mut AnyReference>,
) -> Result<()> {
    let (bench, o) = (ctx.bench, &ctx.opts);
    let elem = std::mem::size_of::<T>();
    let per_iteration = o.messages_per_iteration(bench);
    for &size in sizes {
        let (iterations, skip) = o.iterations_for(size);
        let count = size / elem;
        let w = open_window::<T>(engine, o.window, count * per_iteration)?;
        let buf = vec![T::FILL; count * per_iteration];
        // With a reference, ours and the reference alternate in rounds of equal iteration
        // counts, so that a slow stretch of the machine (an emulator, a busy host) falls
        // on both alike; a round after the first warms up again briefly.
        let rounds = if reference.is_some() {
            REFERENCE_ROUNDS.min(iterations).max(1)
        } else {
            1
        };
        let mut elapsed = Duration::ZERO;
        // The reference's time, microseconds (rank 0; rank 1 gets zeros).
        let mut reference_us = 0.0;
        for round in 0..rounds {
            let n = iterations / rounds + usize::from(round < iterations % rounds);
            let warm = if round == 0 {
                skip
            } else {
                skip.div_ceil(rounds)
            };
            elapsed += if bench.is_bandwidth() {
                bandwidth_loop(
                    engine,
                    bench,
                    o.sync,
                    &w,
                    &buf,
                    count,
                    per_iteration,
                    n,
                    warm,
                    o.owned_buffers,
                )?
            } else {
                latency_loop(engine, bench, o.sync, &w, &buf, n, warm)?
            };
            engine.barrier()?;
            if let Some(r) = reference.as_deref_mut() {
                reference_us += if bench.is_bandwidth() {
                    let mb_s = r.bandwidth(bench, o.sync, size, per_iteration, n, warm)?;
                    let mb = size as f64 / 1e6 * (n * per_iteration) as f64;
                    if mb_s > 0.0 {
                        mb / mb_s * 1e6
                    } else {
                        0.0
                    }
                } else {
                    r.latency(bench, o.sync, size, n, warm)? * n as f64
                };
                engine.barrier()?;
            }
        }
        let value = match bench.measure {
            Measure::Latency => {
                let us = elapsed.as_secs_f64() * 1e6 / iterations as f64;
                if o.sync.is_active() {
                    us / 2.0
                } else {
                    us
                }
            }
            Measure::Bandwidth | Measure::BiBandwidth => {
                let mb =
                    size as f64 / 1e6 * (iterations * per_iteration) as f64 / elapsed.as_secs_f64();
                if bench.measure == Measure::BiBandwidth {
                    2.0 * mb
                } else {
                    mb
                }
            }
        };
        let reference_value = reference.is_some().then(|| match bench.measure {
            Measure::Latency => reference_us / iterations as f64,
            Measure::Bandwidth | Measure::BiBandwidth if reference_us > 0.0 => {
                size as f64 * (iterations * per_iteration) as f64 / reference_us
            }
            Measure::Bandwidth | Measure::BiBandwidth => 0.0,
        });
        if engine.rank() == ORIGIN {
            let rec = Record {
                size,
                iterations,
                warmup: skip,
                value,
                reference: reference_value,
            };
            let line = if o.json {
                osu::json(bench, o, &rec)
            } else {
                osu::row(size, value, reference_value)
            };
            ctx.emit(&format!("{line}\n"))?;
        }
        w.close()?;
    }
    Ok(())
}

fn latency_loop<T: Elem>(
    engine: &Engine,
    bench: &Benchmark,
    sync: SyncMode,
    w: &BenchWindow<T>,
    buf: &[T],
    iterations: usize,
    skip: usize,
) -> Result<Duration> {
    let run = match bench.operation {
        Operation::Put => latency_loop_of::<T, 0>,
        Operation::Get => latency_loop_of::<T, 1>,
        Operation::Accumulate => latency_loop_of::<T, 2>,
        Operation::GetAccumulate => latency_loop_of::<T, 3>,
        Operation::FetchAndOp => latency_loop_of::<T, 4>,
        Operation::CompareAndSwap => latency_loop_of::<T, 5>,
    };
    run(engine, bench, sync, w, buf, iterations, skip)
}

fn latency_loop_of<T: Elem, const OP: u8>(
    engine: &Engine,
    bench: &Benchmark,
    sync: SyncMode,
    w: &BenchWindow<T>,
    buf: &[T],
    iterations: usize,
    skip: usize,
) -> Result<Duration> {
    let (win, disp, op) = (&w.win, w.disp, operation(OP));
    debug_assert_eq!(op, bench.operation);
    let total = skip + iterations;
    let me = engine.rank();
    let lock = bench.lock_type(sync);
    // Where gets land, reused across iterations like OSU's receive buffer.
    let mut dst = vec![T::ZERO; buf.len()];
    match sync {
        SyncMode::Lock if me == ORIGIN => timed(skip, total, || {
            win.lock(lock, TARGET, Assert::NONE)?;
            let p = issue(op, win, buf, &mut dst, TARGET, disp)?;
            win.unlock(TARGET)?;
            p.finish()
        }),
        SyncMode::Flush | SyncMode::FlushLocal if me == ORIGIN => {
            win.lock(lock, TARGET, Assert::NONE)?;
            let flush = || match sync {
                SyncMode::Flush => win.flush(TARGET),
                _ => win.flush_local(TARGET),
            };
            // Put and get, the latency benchmarks' ops, called as OSU's loop calls them
            // (no dispatch per iteration: the library is what is timed).
            let elapsed = match op {
                Operation::Put => timed(skip, total, || {
                    win.put(buf, TARGET, disp)?;
                    flush()
                }),
                Operation::Get => timed(skip, total, || {
                    let got = win.get_into(TARGET, disp, &mut dst[..buf.len()])?;
                    flush()?;
                    black_box(got.wait()?);
                    Ok(())
                }),
                _ => timed(skip, total, || {
                    let p = issue(op, win, buf, &mut dst, TARGET, disp)?;
                    flush()?;
                    p.finish()
                }),
            }?;
            win.unlock(TARGET)?;
            Ok(elapsed)
        }
        SyncMode::LockAll if me == ORIGIN => timed(skip, total, || {
            win.lock_all(Assert::NONE)?;
            let p = issue(op, win, buf, &mut dst, TARGET, disp)?;
            win.unlock_all()?;
            p.finish()
        }),
        SyncMode::Lock | SyncMode::Flush | SyncMode::FlushLocal | SyncMode::LockAll => {
            Ok(Duration::ZERO)
        }
        SyncMode::Fence => {
            engine.barrier()?;
            if me == ORIGIN {
                timed(skip, total, || {
                    win.fence(Assert::NONE)?;
                    let p = issue(op, win, buf, &mut dst, TARGET, disp)?;
                    win.fence(Assert::NONE)?;
                    p.finish()?;
                    win.fence(Assert::NONE)
                })
            } else {
                timed(skip, total, || {
                    win.fence(Assert::NONE)?;
                    win.fence(Assert::NONE)?;
                    let p = issue(op, win, buf, &mut dst, ORIGIN, disp)?;
                    win.fence(Assert::NONE)?;
                    p.finish()
                })
            }
        }
        SyncMode::Notify => {
            // A notified put each way; each side waits for the other's count (counter 0,
            // set afresh for this size: both ranks are here).
            win.set_notify_count(1)?;
            win.lock_all(Assert::NONE)?;
            let peer = if me == ORIGIN { TARGET } else { ORIGIN };
            let mut n = 0u64;
            let mut step = || -> Result<()> {
                n += 1;
                if me == ORIGIN {
                    win.put_notify(buf, peer, disp, 0)?;
                    win.wait_notify(0, n)?;
                } else {
                    win.wait_notify(0, n)?;
                    win.put_notify(buf, peer, disp, 0)?;
                }
                Ok(())
            };
            let elapsed = timed(skip, total, &mut step)?;
            win.unlock_all()?;
            win.set_notify_count(0)?;
            Ok(elapsed)
        }
        SyncMode::Pscw => {
            engine.barrier()?;
            if me == ORIGIN {
                // OSU starts the clock after the first timed start.
                let mut start = Instant::now();
                for i in 0..total {
                    win.start(&[TARGET], Assert::NONE)?;
                    if i == skip {
                        start = Instant::now();
                    }
                    let p = issue(op, win, buf, &mut dst, TARGET, disp)?;
                    win.complete()?;
                    p.finish()?;
                    win.post(&[TARGET], Assert::NONE)?;
                    win.wait()?;
                }
                Ok(start.elapsed())
            } else {
                timed(skip, total, || {
                    win.post(&[ORIGIN], Assert::NONE)?;
                    win.wait()?;
                    win.start(&[ORIGIN], Assert::NONE)?;
                    let p = issue(op, win, buf, &mut dst, ORIGIN, disp)?;
                    win.complete()?;
                    p.finish()
                })
            }
        }
    }
}

/// One burst of a bandwidth iteration: `per_iteration` messages of `count` elements.
struct Burst<'w, T: Elem> {
    op: Operation,
    w: &'w BenchWindow<T>,
    buf: &'w [T],
    count: usize,
    per_iteration: usize,
    /// Gets into and puts from buffers their requests hold (`--owned-buffers`), from
    /// these spares.
    owned: Option<RefCell<Vec<Vec<T>>>>,
}

impl<T: Elem> Burst<'_, T> {
    /// Issues the burst to `target`, into consecutive slots (gets into consecutive
    /// chunks of `dst`, or buffers of their own); returns what is to be finished after
    /// the synchronization.
    fn send<'b>(&'b self, dst: &'b mut [T], target: Rank) -> Result<Vec<Pending<'b, T>>> {
        let count = self.count;
        let mut pending = Vec::with_capacity(self.per_iteration);
        if let (Some(spares), Operation::Get | Operation::Put) = (&self.owned, self.op) {
            for j in 0..self.per_iteration {
                let disp = self.w.disp + (j * count) as u64;
                let buf = spares.borrow_mut().pop();
                let request = match self.op {
                    Operation::Get => {
                        let buf = buf.unwrap_or_else(|| vec![T::ZERO; count]);
                        self.w.win.get_owned(target, disp, buf)?
                    }
                    // The spares hold the data already (filled once, as OSU fills its
                    // buffer): no copy per put.
                    _ => {
                        let slot = || self.buf[j * count..(j + 1) * count].to_vec();
                        let buf = buf.unwrap_or_else(slot);
                        self.w.win.put_from_buffer(buf, target, disp)?
                    }
                };
                pending.push(Pending::Owned(request, spares));
            }
            return Ok(pending);
        }
        for (j, out) in dst
            .chunks_mut(count.max(1))
            .take(self.per_iteration)
            .enumerate()
        {
            let slot = &self.buf[j * count..(j + 1) * count];
            pending.push(issue(
                self.op,
                &self.w.win,
                slot,
                out,
                target,
                self.w.disp + (j * count) as u64,
            )?);
        }
        Ok(pending)
    }
}

fn finish_all<T: Element>(pending: &mut Vec<Pending<'_, T>>) -> Result<()> {
    for p in pending.drain(..) {
        p.finish()?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn bandwidth_loop<T: Elem>(
    engine: &Engine,
    bench: &Benchmark,
    sync: SyncMode,
    w: &BenchWindow<T>,
    buf: &[T],
    count: usize,
    per_iteration: usize,
    iterations: usize,
    skip: usize,
    owned_buffers: bool,
) -> Result<Duration> {
    let (win, op) = (&w.win, bench.operation);
    let total = skip + iterations;
    let me = engine.rank();
    let peer = 1 - me;
    let mut dst = vec![T::ZERO; buf.len()];
    let burst = Burst {
        op,
        w,
        buf,
        count,
        per_iteration,
        owned: owned_buffers.then(|| RefCell::new(Vec::new())),
    };
    if bench.measure == Measure::BiBandwidth {
        engine.barrier()?;
        return match sync {
            SyncMode::Fence => timed(skip, total, || {
                win.fence(Assert::NONE)?;
                let mut pending = burst.send(&mut dst, peer)?;
                win.fence(Assert::NONE)?;
                finish_all(&mut pending)
            }),
            _ => timed(skip, total, || {
                win.post(&[peer], Assert::NONE)?;
                win.start(&[peer], Assert::NONE)?;
                let mut pending = burst.send(&mut dst, peer)?;
                win.complete()?;
                finish_all(&mut pending)?;
                win.wait()
            }),
        };
    }
    match sync {
        SyncMode::Flush | SyncMode::FlushLocal if me == ORIGIN => {
            win.lock(bench.lock_type(sync), TARGET, Assert::NONE)?;
            let elapsed = timed(skip, total, || {
                let mut pending = burst.send(&mut dst, TARGET)?;
                if sync == SyncMode::Flush {
                    win.flush(TARGET)?;
                } else {
                    win.flush_local(TARGET)?;
                }
                finish_all(&mut pending)
            })?;
            win.unlock(TARGET)?;
            Ok(elapsed)
        }
        SyncMode::LockAll if me == ORIGIN => timed(skip, total, || {
            win.lock_all(Assert::NONE)?;
            let mut pending = burst.send(&mut dst, TARGET)?;
            win.unlock_all()?;
            finish_all(&mut pending)
        }),
        SyncMode::Lock if me == ORIGIN => timed(skip, total, || {
            win.lock(bench.lock_type(sync), TARGET, Assert::NONE)?;
            let mut pending = burst.send(&mut dst, TARGET)?;
            win.unlock(TARGET)?;
            finish_all(&mut pending)
        }),
        SyncMode::Lock | SyncMode::Flush | SyncMode::FlushLocal | SyncMode::LockAll => {
            Ok(Duration::ZERO)
        }
        SyncMode::Fence => {
            engine.barrier()?;
            if me == ORIGIN {
                timed(skip, total, || {
                    win.fence(Assert::NONE)?;
                    let mut pending = burst.send(&mut dst, TARGET)?;
                    win.fence(Assert::NONE)?;
                    finish_all(&mut pending)
                })
            } else {
                timed(skip, total, || {
                    win.fence(Assert::NONE)?;
                    win.fence(Assert::NONE)
                })
            }
        }
        SyncMode::Pscw => {
            engine.barrier()?;
            if me == ORIGIN {
                let mut start = Instant::now();
                for i in 0..total {
                    win.start(&[TARGET], Assert::NONE)?;
                    if i == skip {
                        start = Instant::now();
                    }
                    let mut pending = burst.send(&mut dst, TARGET)?;
                    win.complete()?;
                    finish_all(&mut pending)?;
                }
                Ok(start.elapsed())
            } else {
                timed(skip, total, || {
                    win.post(&[ORIGIN], Assert::NONE)?;
                    win.wait()
                })
            }
        }
        // Offered by osu_put_latency only (the options refuse it elsewhere).
        SyncMode::Notify => Err(rma::UsageError::Unsupported {
            what: "-s notify in a bandwidth benchmark",
        }
        .into()),
    }
}
