//! The `main` of every OSU-style binary: parse the options, bring up the two ranks on
//! the chosen backend, run [`kernels::run_rank`] on both, report errors.
//!
//! - `-b shm` (default): two processes over rma's shared-memory transport, joined by
//!   [`rma::World::init`]. Started by `rma-run -n 2` (or another launcher rma knows),
//!   each process is one rank. Started by hand (no `RMA_RUN_SOCKET`, `RMA_BOOTSTRAP`,
//!   `PMI_FD`, `PMI_RANK`, `PMIX_RANK` or `PMIX_NAMESPACE`), the binary starts two processes of itself with the same
//!   arguments through [`rma::launcher::launch`] and exits as they do; `--no-launch`
//!   turns that off. A job of any other size fails with "needs 2
//!   processes: run it under rma-run -n 2".
//! - `-b sim-am`, `-b sim-rdma`: two threads of this process over the simulated
//!   transport.
//!
//! Only rank 0 writes the table (to stdout, or to the `-o` file).

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rma::launcher::{launch, Launch};
use rma_core::sim::{self, Network};
use rma_core::{Config, TransportError};

use crate::kernels::{self, Context, Sink};
use crate::osu::{self, Backend, Benchmark, Command, Options};

/// Seed of the simulated network (its delivery order is reproducible for a given seed).
const SEED: u64 = 0x05EED;
/// The whole simulated run's deadline; a stuck call fails sooner, at the engine's own
/// timeout.
const SIM_DEADLINE: Duration = Duration::from_secs(6 * 3600);
/// Variables whose presence says a launcher started this process (rma-run's socket,
/// PMI's descriptor and rank as MPICH's Hydra sets them) or that the user forced a
/// bootstrap: then it never starts processes of its own.
const LAUNCHED: [&str; 6] = [
    "RMA_RUN_SOCKET",
    "RMA_BOOTSTRAP",
    "PMI_FD",
    "PMI_RANK",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
];

/// Runs `bench`'s binary; what its `main` returns: 0, 1 when the run failed, 2 for a
/// bad command line (or `RMA_LOG`).
pub fn main(bench: &'static Benchmark) -> ExitCode {
    rma::logging::init_or_exit(bench.name);
    match run(bench) {
        Ok(code) => code,
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "{}: {msg}", bench.name);
            ExitCode::FAILURE
        }
    }
}

fn run(bench: &'static Benchmark) -> Result<ExitCode, String> {
    let mut argv = std::env::args_os();
    let program = argv
        .next()
        .and_then(|p| p.into_string().ok())
        .unwrap_or_else(|| bench.name.into());
    // Kept as text: a self-launch passes them on to its two processes.
    let args = argv
        .map(|a| a.into_string())
        .collect::<Result<Vec<String>, _>>();
    let parsed = match &args {
        Ok(args) => osu::parse_args(bench, args),
        Err(a) => Err(format!("argument {a:?} is not UTF-8")),
    };
    let opts = match parsed {
        Ok(Command::Help) => {
            println!("{}", osu::usage(bench, &program));
            return Ok(ExitCode::SUCCESS);
        }
        Ok(Command::Run(o)) => o,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "{}: {e}\nUsage: {program} [options] (--help lists them)",
                bench.name
            );
            return Ok(ExitCode::from(2));
        }
    };
    let args = args.unwrap_or_default();
    match opts.backend {
        Backend::Shm | Backend::Ofi | Backend::Verbs => run_shm(bench, opts, args),
        Backend::SimAm | Backend::SimRdma => run_sim(bench, opts),
    }
}

/// Whether this process should start the two ranks itself: `-b shm`, no launcher and
/// no forced bootstrap.
fn should_self_launch(opts: &Options) -> bool {
    opts.self_launch && LAUNCHED.iter().all(|v| std::env::var_os(v).is_none())
}

fn run_shm(
    bench: &'static Benchmark,
    opts: Options,
    args: Vec<String>,
) -> Result<ExitCode, String> {
    if opts.backend == Backend::Ofi {
        // The facade picks the backend from the environment; ranks started by the
        // self-launch inherit it.
        std::env::set_var("RMA_BACKEND", "ofi");
        if let Some(p) = &opts.provider {
            std::env::set_var("FI_PROVIDER", p);
        }
    }
    if opts.backend == Backend::Verbs {
        std::env::set_var("RMA_BACKEND", "verbs");
    }
    if should_self_launch(&opts) {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let out = launch(&Launch::new(2, exe, args))
            .map_err(|e| format!("cannot start 2 processes: {e}"))?;
        if out.timed_out {
            return Err("the job was killed after its timeout".into());
        }
        return Ok(ExitCode::from(out.code().clamp(0, 255) as u8));
    }
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let world = rma::World::init_with(config).map_err(|e| format!("init: {e}"))?;
    let rank = world.rank();
    if world.size() != 2 {
        if rank == 0 {
            let n = world.size();
            let started = if n == 1 {
                String::new()
            } else {
                format!(" (this job has {n})")
            };
            return Err(format!(
                "needs 2 processes: run it under rma-run -n 2{started}"
            ));
        }
        return Ok(ExitCode::FAILURE);
    }
    if opts.pin {
        pin_to_nth_cpu(rank as usize)?;
    }
    let sink = if rank == 0 {
        Some(Sink::open(&opts)?)
    } else {
        None
    };
    let job = std::env::var("RMA_RUN_JOB").unwrap_or_else(|_| format!("p{}", std::process::id()));
    let ctx = Context {
        bench,
        opts,
        sink: Mutex::new(sink),
        reference_name: format!("/rma-{job}-bench-reference"),
    };
    let result = kernels::run_rank(world.engine(), &ctx);
    // Leave the job properly before exiting.
    drop(world);
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(format!("rank {rank}: {e}")),
    }
}

fn run_sim(bench: &'static Benchmark, opts: Options) -> Result<ExitCode, String> {
    let profile = opts.backend.profile().expect("a simulated backend");
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let net = Network::new(2, profile, SEED);
    let sink = Sink::open(&opts)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let ctx = Arc::new(Context {
        bench,
        opts,
        sink: Mutex::new(Some(sink)),
        reference_name: format!("/rma-sim{}x{nanos}-bench-reference", std::process::id()),
    });
    // The first failure of either rank, in its own words (the other rank then only sees
    // its peer die).
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let (net2, failure2) = (net.clone(), failure.clone());
    let result = sim::run_on(&net, config, SIM_DEADLINE, move |engine| {
        let me = engine.rank();
        if ctx.opts.pin {
            if let Err(e) = pin_to_nth_cpu(me as usize) {
                return record(Err(TransportError::Failed(e).into()), me, &failure2, &net2);
            }
        }
        // Both ranks share the context; only rank 0 writes.
        let out = kernels::run_rank(&engine, &ctx);
        record(out, me, &failure2, &net2)
    });
    let first = failure.lock().unwrap_or_else(|p| p.into_inner()).take();
    match (result, first) {
        (Ok(()), _) => Ok(ExitCode::SUCCESS),
        (Err(_), Some(msg)) | (Err(msg), None) => Err(msg),
    }
}

/// Keeps a simulated rank's first failure and wakes its peer.
fn record(
    out: rma_core::Result<()>,
    me: rma_core::Rank,
    failure: &Mutex<Option<String>>,
    net: &Network,
) -> rma_core::Result<()> {
    if let Err(e) = &out {
        let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(format!("rank {me}: {e}"));
            // Wake the peer: its blocking calls fail now instead of at the timeout.
            net.kill(me);
        }
    }
    out
}

/// Pins the calling thread to the `n`-th CPU (modulo their number) of those it may run
/// on now.
fn pin_to_nth_cpu(n: usize) -> Result<(), String> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value of the plain C type.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a writable cpu_set_t of `size` bytes; pid 0 is this thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE, inside the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    let Some(&cpu) = cpus.get(n % cpus.len().max(1)) else {
        return Err("no CPU to pin to".into());
    };
    // SAFETY: as above, the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE (it came from the set).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: `one` is a valid cpu_set_t of `size` bytes; pid 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
        return Err(format!(
            "sched_setaffinity to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
