//! `osu_put_latency`: OSU's MPI_Put latency test on rma, between two ranks of the
//! simulated transport (rank 0 puts, rank 1 is the target) until the shared-memory
//! backend exists.
//!
//! The timed loops are OSU 7.4's: `lock` is lock(shared)/put/unlock per iteration,
//! `flush` (the default) and `flush_local` hold a shared lock and put + flush per
//! iteration, `lock_all` is lock_all/put/unlock_all per iteration, and `fence` and `pscw`
//! put in both directions and report half the round trip. Run with `--help` for options.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rma_benches::osu::{self, Command, Options, SyncMode, WindowCreation};
use rma_core::sim::{self, Network};
use rma_core::{Assert, Config, Engine, LockType, Rank, Transport, Window};

const BENCHMARK: &str = "osu_put_latency";
const ORIGIN: Rank = 0;
const TARGET: Rank = 1;
/// Seed of the simulated network (its delivery order is reproducible for a given seed).
const SEED: u64 = 0x05EED;
/// Bytes the engine reserves for the packet header when it checks an active-message put
/// against the transport's largest message (see `WindowShared::post` in rma-core).
const AM_HEADER_ALLOWANCE: usize = 64;
/// The whole run's deadline; a stuck call fails sooner, at the engine's own timeout.
const DEADLINE: Duration = Duration::from_secs(6 * 3600);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "{BENCHMARK}: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args_os().map(OsString::into_string);
    let program = args
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| BENCHMARK.into());
    let args = args
        .collect::<Result<Vec<String>, OsString>>()
        .map_err(|a| format!("argument {a:?} is not UTF-8"))?;
    let mut opts = match osu::parse_args(args)? {
        Command::Help => return print(&osu::usage(&program)),
        Command::Run(o) => o,
    };
    let config = Config::from_env();
    let net = Network::new(2, opts.backend.profile(), SEED);
    fit_to_backend(&net, &config, &mut opts)?;
    if !opts.json {
        print(&osu::latency_preamble("MPI_Put", &opts))?;
    }

    let opts = Arc::new(opts);
    // The first failure of either rank, in its own words (the other rank then only sees
    // its peer die).
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let (net2, failure2) = (net.clone(), failure.clone());
    let result = sim::run_on(&net, config, DEADLINE, move |engine| {
        let me = engine.rank();
        let out = bench(&engine, &opts);
        if let Err(e) = &out {
            let mut f = failure2.lock().unwrap_or_else(|p| p.into_inner());
            if f.is_none() {
                *f = Some(format!("rank {me}: {e}"));
                // Wake the peer: its blocking calls fail now instead of at the timeout.
                net2.kill(me);
            }
        }
        out
    });
    let first = failure.lock().unwrap_or_else(|p| p.into_inner()).take();
    match (result, first) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(msg)) | (Err(msg), None) => Err(msg),
    }
}

fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to stdout: {e}"))
}

/// Puts the transport cannot carry are refused by the engine (it does not split them):
/// a defaulted size range is cut to what fits, an explicit one is an error.
fn fit_to_backend(net: &Arc<Network>, config: &Config, opts: &mut Options) -> Result<(), String> {
    let caps = net.endpoint(ORIGIN).capabilities(TARGET);
    if caps.rdma_write && config.native_ops {
        return Ok(());
    }
    let largest = caps.max_message.saturating_sub(AM_HEADER_ALLOWANCE);
    if opts.max_size <= largest {
        return Ok(());
    }
    if opts.max_size_given || opts.min_size > largest {
        return Err(format!(
            "{} sends puts as active messages of at most {largest} bytes, and the engine \
             does not split larger ones: use -m MIN:MAX with MAX <= {largest}",
            opts.backend.name()
        ));
    }
    opts.max_size = largest;
    let last = opts.sizes().last().copied().unwrap_or(largest);
    let _ = writeln!(
        std::io::stderr(),
        "{BENCHMARK}: note: {} carries puts of at most {largest} bytes; sizes stop at {last}",
        opts.backend.name()
    );
    Ok(())
}

/// Both ranks: every message size, with a fresh window each (as OSU does).
fn bench(engine: &Engine, opts: &Options) -> rma_core::Result<()> {
    for size in opts.sizes() {
        let (iterations, skip) = opts.iterations_for(size);
        let win = match opts.window {
            WindowCreation::Allocate => engine.allocate::<u8>(size)?,
            WindowCreation::Create => engine.create(vec![0u8; size])?,
        };
        let buf = vec![b'a'; size];
        let total = skip + iterations;
        let elapsed = match opts.sync {
            SyncMode::Lock => with_lock(engine, &win, &buf, skip, total)?,
            SyncMode::Flush => with_flush(engine, &win, &buf, skip, total, true)?,
            SyncMode::FlushLocal => with_flush(engine, &win, &buf, skip, total, false)?,
            SyncMode::LockAll => with_lock_all(engine, &win, &buf, skip, total)?,
            SyncMode::Fence => with_fence(engine, &win, &buf, skip, total)?,
            SyncMode::Pscw => with_pscw(engine, &win, &buf, skip, total)?,
        };
        engine.barrier()?;
        if engine.rank() == ORIGIN {
            let mut latency = elapsed.as_secs_f64() * 1e6 / iterations as f64;
            if opts.sync.is_round_trip() {
                latency /= 2.0;
            }
            let line = if opts.json {
                osu::latency_json(BENCHMARK, opts, size, iterations, skip, latency)
            } else {
                osu::latency_row(size, latency)
            };
            print(&format!("{line}\n")).map_err(sim::failed)?;
        }
        win.free()?;
    }
    Ok(())
}

/// Times iterations `skip..total` of `step` (called with the iteration number).
fn timed(
    skip: usize,
    total: usize,
    mut step: impl FnMut(usize) -> rma_core::Result<()>,
) -> rma_core::Result<Duration> {
    let mut start = Instant::now();
    for i in 0..total {
        if i == skip {
            start = Instant::now();
        }
        step(i)?;
    }
    Ok(start.elapsed())
}

fn with_lock(
    engine: &Engine,
    win: &Window<u8>,
    buf: &[u8],
    skip: usize,
    total: usize,
) -> rma_core::Result<Duration> {
    if engine.rank() != ORIGIN {
        return Ok(Duration::ZERO);
    }
    timed(skip, total, |_| {
        win.lock(LockType::Shared, TARGET, Assert::NONE)?;
        win.put(buf, TARGET, 0)?;
        win.unlock(TARGET)
    })
}

fn with_flush(
    engine: &Engine,
    win: &Window<u8>,
    buf: &[u8],
    skip: usize,
    total: usize,
    remote: bool,
) -> rma_core::Result<Duration> {
    if engine.rank() != ORIGIN {
        return Ok(Duration::ZERO);
    }
    win.lock(LockType::Shared, TARGET, Assert::NONE)?;
    let elapsed = timed(skip, total, |_| {
        win.put(buf, TARGET, 0)?;
        if remote {
            win.flush(TARGET)
        } else {
            win.flush_local(TARGET)
        }
    })?;
    win.unlock(TARGET)?;
    Ok(elapsed)
}

fn with_lock_all(
    engine: &Engine,
    win: &Window<u8>,
    buf: &[u8],
    skip: usize,
    total: usize,
) -> rma_core::Result<Duration> {
    if engine.rank() != ORIGIN {
        return Ok(Duration::ZERO);
    }
    timed(skip, total, |_| {
        win.lock_all(Assert::NONE)?;
        win.put(buf, TARGET, 0)?;
        win.unlock_all()
    })
}

fn with_fence(
    engine: &Engine,
    win: &Window<u8>,
    buf: &[u8],
    skip: usize,
    total: usize,
) -> rma_core::Result<Duration> {
    engine.barrier()?;
    if engine.rank() == ORIGIN {
        timed(skip, total, |_| {
            win.fence(Assert::NONE)?;
            win.put(buf, TARGET, 0)?;
            win.fence(Assert::NONE)?;
            win.fence(Assert::NONE)
        })
    } else {
        timed(skip, total, |_| {
            win.fence(Assert::NONE)?;
            win.fence(Assert::NONE)?;
            win.put(buf, ORIGIN, 0)?;
            win.fence(Assert::NONE)
        })
    }
}

fn with_pscw(
    engine: &Engine,
    win: &Window<u8>,
    buf: &[u8],
    skip: usize,
    total: usize,
) -> rma_core::Result<Duration> {
    engine.barrier()?;
    if engine.rank() == ORIGIN {
        // OSU starts the clock after the first timed start.
        let mut start = Instant::now();
        for i in 0..total {
            win.start(&[TARGET], Assert::NONE)?;
            if i == skip {
                start = Instant::now();
            }
            win.put(buf, TARGET, 0)?;
            win.complete()?;
            win.post(&[TARGET], Assert::NONE)?;
            win.wait()?;
        }
        Ok(start.elapsed())
    } else {
        timed(skip, total, |_| {
            win.post(&[ORIGIN], Assert::NONE)?;
            win.wait()?;
            win.start(&[ORIGIN], Assert::NONE)?;
            win.put(buf, ORIGIN, 0)?;
            win.complete()
        })
    }
}
