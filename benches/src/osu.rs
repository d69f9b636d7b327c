//! What the OSU-style binaries share: which benchmark each binary is ([`Benchmark`]),
//! options spelled as OSU 7.4 spells them, message sizes and iteration counts chosen as
//! OSU chooses them, and OSU's output format.
//!
//! Output follows OSU 7.4 (`osu_util_mpi.c`, built with its configure's `FIELD_WIDTH` of
//! 18): a `#` preamble, then one line per message size printed as `%-10d%18.2f`. With
//! `--reference` two more columns follow (the reference and the ratio ours/reference),
//! so the first two stay OSU-parseable. With `--json` each size is one JSON object on its
//! own line instead, and no preamble is printed.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use rma_core::sim::Profile;
use rma_core::LockType;

/// The OSU release whose output format and defaults these binaries follow.
pub const OSU_VERSION: &str = "7.4";
/// Sizes above this use the "large" iteration and warm-up counts (OSU's
/// `LARGE_MESSAGE_SIZE`).
pub const LARGE_MESSAGE_SIZE: usize = 8192;
/// Timed iterations per size up to [`LARGE_MESSAGE_SIZE`] of a latency test (OSU's
/// `LAT_LOOP_SMALL`).
pub const LAT_LOOP_SMALL: usize = 10_000;
/// Warm-up iterations per small size of a latency test (OSU's `LAT_SKIP_SMALL`).
pub const LAT_SKIP_SMALL: usize = 100;
/// Timed iterations per size above [`LARGE_MESSAGE_SIZE`] of a latency test (OSU's
/// `LAT_LOOP_LARGE`).
pub const LAT_LOOP_LARGE: usize = 1_000;
/// Warm-up iterations per large size of a latency test (OSU's `LAT_SKIP_LARGE`).
pub const LAT_SKIP_LARGE: usize = 10;
/// Timed iterations per small size of a bandwidth test (OSU's `BW_LOOP_SMALL`).
pub const BW_LOOP_SMALL: usize = 100;
/// Warm-up iterations per small size of a bandwidth test (OSU's `BW_SKIP_SMALL`).
pub const BW_SKIP_SMALL: usize = 10;
/// Timed iterations per large size of a bandwidth test (OSU's `BW_LOOP_LARGE`).
pub const BW_LOOP_LARGE: usize = 20;
/// Warm-up iterations per large size of a bandwidth test (OSU's `BW_SKIP_LARGE`).
pub const BW_SKIP_LARGE: usize = 2;
/// Messages in flight per iteration of a bandwidth test (OSU's `WINDOW_SIZE_LARGE`, `-W`).
pub const WINDOW_SIZE: usize = 64;
/// Default smallest message size in bytes (OSU's `MIN_MESSAGE_SIZE`).
pub const DEFAULT_MIN_SIZE: usize = 1;
/// Default largest message size in bytes (OSU's `MAX_MESSAGE_SIZE`, 4 MiB). Paths that
/// carry the op as an active message cut it to what they carry.
pub const DEFAULT_MAX_SIZE: usize = 1 << 22;
/// Width of the size column.
const SIZE_WIDTH: usize = 10;
/// Width of a value column (OSU's `FIELD_WIDTH` as its configure sets it).
const FIELD_WIDTH: usize = 18;
/// Width of the ratio column.
const RATIO_WIDTH: usize = 10;

/// How an origin synchronizes around its operations (OSU's `-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// `lock` / op / `unlock` every iteration.
    Lock,
    /// `lock` once, then op / `flush` every iteration.
    Flush,
    /// `lock` once, then op / `flush_local` every iteration.
    FlushLocal,
    /// `lock_all` / op / `unlock_all` every iteration.
    LockAll,
    /// Fence epochs; latency tests put in both directions and report half a round trip.
    Fence,
    /// Post/start/complete/wait; latency tests put in both directions and report half a
    /// round trip.
    Pscw,
    /// rma's notified access (no OSU counterpart, `osu_put_latency` only): a notified put
    /// each way, each side waiting for the other's count; half a round trip, in a
    /// lock_all epoch held throughout. What a put + flush + flag costs without it.
    Notify,
}

impl SyncMode {
    /// OSU's modes, in the order of its help text, then rma's notified put
    /// (`osu_put_latency` only).
    pub const WITH_NOTIFY: [SyncMode; 7] = [
        SyncMode::Lock,
        SyncMode::Flush,
        SyncMode::FlushLocal,
        SyncMode::LockAll,
        SyncMode::Pscw,
        SyncMode::Fence,
        SyncMode::Notify,
    ];
    /// Every mode of OSU's.
    pub const ALL: [SyncMode; 6] = {
        let m = Self::WITH_NOTIFY;
        [m[0], m[1], m[2], m[3], m[4], m[5]]
    };
    /// The modes of OSU's `ACTIVE_SYNC` benchmarks (`osu_put_bibw`).
    pub const ACTIVE: [SyncMode; 2] = [SyncMode::Pscw, SyncMode::Fence];

    /// The name `-s` takes.
    pub const fn name(self) -> &'static str {
        match self {
            SyncMode::Lock => "lock",
            SyncMode::Flush => "flush",
            SyncMode::FlushLocal => "flush_local",
            SyncMode::LockAll => "lock_all",
            SyncMode::Fence => "fence",
            SyncMode::Pscw => "pscw",
            SyncMode::Notify => "notify",
        }
    }

    /// What OSU's preamble prints after `# Synchronization: `.
    pub const fn osu_name(self) -> &'static str {
        match self {
            SyncMode::Lock => "MPI_Win_lock/unlock",
            SyncMode::Flush => "MPI_Win_flush",
            SyncMode::FlushLocal => "MPI_Win_flush_local",
            SyncMode::LockAll => "MPI_Win_lock_all/unlock_all",
            SyncMode::Fence => "MPI_Win_fence",
            SyncMode::Pscw => "MPI_Win_post/start/complete/wait",
            SyncMode::Notify => "notified put + wait (rma's put_notify)",
        }
    }

    /// Active-target synchronization (both ranks take part in every epoch).
    pub const fn is_active(self) -> bool {
        matches!(self, SyncMode::Fence | SyncMode::Pscw | SyncMode::Notify)
    }

    fn parse(s: &str) -> Option<SyncMode> {
        SyncMode::WITH_NOTIFY
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
    }
}

/// Which transport carries the two ranks (`-b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Two processes over rma's shared-memory transport (`rma::World`).
    Shm,
    /// Two processes over rma's libfabric transport (`-b ofi[:PROVIDER]`; needs the
    /// `ofi` feature of this crate).
    Ofi,
    /// Two processes over rma's InfiniBand verbs transport (`-b verbs`; needs the `verbs`
    /// feature of this crate and an RDMA device, e.g. rdma_rxe in ci/rxe-vm).
    Verbs,
    /// Two threads over the simulated transport, every operation an active message.
    SimAm,
    /// Two threads over the simulated transport with native put, get and some atomics.
    SimRdma,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 5] = [
        Backend::Shm,
        Backend::Ofi,
        Backend::Verbs,
        Backend::SimAm,
        Backend::SimRdma,
    ];

    /// The name `-b` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Shm => "shm",
            Backend::Ofi => "ofi",
            Backend::Verbs => "verbs",
            Backend::SimAm => "sim-am",
            Backend::SimRdma => "sim-rdma",
        }
    }

    /// The simulated network's capability profile (`None` for real transports).
    pub const fn profile(self) -> Option<Profile> {
        match self {
            Backend::Shm | Backend::Ofi | Backend::Verbs => None,
            Backend::SimAm => Some(Profile::ActiveMessages),
            Backend::SimRdma => Some(Profile::Rdma),
        }
    }

    fn parse(s: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// How the window is created (OSU's `-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowCreation {
    /// The window is created over user memory (`MPI_Win_create`).
    Create,
    /// The library allocates the memory (`MPI_Win_allocate`).
    Allocate,
    /// A dynamic window; each rank attaches one region and sends its address to the
    /// other (`MPI_Win_create_dynamic`).
    Dynamic,
}

impl WindowCreation {
    /// Every kind, in OSU's order.
    pub const ALL: [WindowCreation; 3] = [
        WindowCreation::Create,
        WindowCreation::Allocate,
        WindowCreation::Dynamic,
    ];

    /// The name `-w` takes.
    pub const fn name(self) -> &'static str {
        match self {
            WindowCreation::Allocate => "allocate",
            WindowCreation::Create => "create",
            WindowCreation::Dynamic => "dynamic",
        }
    }

    /// What OSU's preamble prints after `# Window creation: `.
    pub const fn osu_name(self) -> &'static str {
        match self {
            WindowCreation::Allocate => "MPI_Win_allocate",
            WindowCreation::Create => "MPI_Win_create",
            WindowCreation::Dynamic => "MPI_Win_create_dynamic",
        }
    }

    fn parse(s: &str) -> Option<WindowCreation> {
        WindowCreation::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s))
    }
}

/// The RMA operation a benchmark times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `put` of the message.
    Put,
    /// `get` of the message.
    Get,
    /// `accumulate` (sum) of the message, byte-wise.
    Accumulate,
    /// `get_accumulate` (sum) of the message, byte-wise.
    GetAccumulate,
    /// `fetch_and_op` (sum) of one `u64`.
    FetchAndOp,
    /// `compare_and_swap` of one `u64`.
    CompareAndSwap,
}

impl Operation {
    /// Whether it works on one `u64` (and the size is fixed at 8 bytes).
    pub const fn is_atomic(self) -> bool {
        matches!(self, Operation::FetchAndOp | Operation::CompareAndSwap)
    }
}

/// What a benchmark reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Microseconds per operation.
    Latency,
    /// MB/s (10^6 bytes per second) from rank 0 to rank 1 (or back, for gets).
    Bandwidth,
    /// MB/s of both directions at once.
    BiBandwidth,
}

/// One binary of the suite: its name, OSU's title, what it times and the options OSU's
/// binary of that name offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Benchmark {
    /// The binary's name (`osu_put_latency`).
    pub name: &'static str,
    /// OSU's title, capitalised as OSU's binary prints it (`OSU MPI_Get latency Test`).
    pub title: &'static str,
    /// The operation timed.
    pub operation: Operation,
    /// Latency or bandwidth.
    pub measure: Measure,
    /// The synchronizations `-s` accepts.
    pub syncs: &'static [SyncMode],
    /// OSU's default `-s`.
    pub default_sync: SyncMode,
    /// OSU's default `-w`.
    pub default_window: WindowCreation,
    /// What OSU prints after `# Datatype: ` (`None`: OSU's binary prints no such line).
    pub datatype: Option<&'static str>,
}

/// `osu_put_latency`.
pub const PUT_LATENCY: Benchmark = Benchmark {
    name: "osu_put_latency",
    title: "OSU MPI_Put Latency Test",
    operation: Operation::Put,
    measure: Measure::Latency,
    syncs: &SyncMode::WITH_NOTIFY,
    default_sync: SyncMode::Flush,
    default_window: WindowCreation::Allocate,
    datatype: Some("MPI_CHAR"),
};

/// `osu_get_latency`.
pub const GET_LATENCY: Benchmark = Benchmark {
    name: "osu_get_latency",
    title: "OSU MPI_Get latency Test",
    operation: Operation::Get,
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_acc_latency`.
pub const ACC_LATENCY: Benchmark = Benchmark {
    name: "osu_acc_latency",
    title: "OSU MPI_Accumulate latency Test",
    operation: Operation::Accumulate,
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_get_acc_latency`. OSU's binary sets no defaults of its own, so its `-w` and
/// `-s` default to the first of each list: `MPI_Win_create` and lock/unlock; its locks
/// are exclusive; its preamble has no datatype line.
pub const GET_ACC_LATENCY: Benchmark = Benchmark {
    name: "osu_get_acc_latency",
    title: "OSU MPI_Get_accumulate latency Test",
    operation: Operation::GetAccumulate,
    default_sync: SyncMode::Lock,
    default_window: WindowCreation::Create,
    datatype: None,
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_fop_latency`: one `u64`, reported as 8 bytes.
pub const FOP_LATENCY: Benchmark = Benchmark {
    name: "osu_fop_latency",
    title: "OSU MPI_Fetch_and_op latency Test",
    operation: Operation::FetchAndOp,
    datatype: Some("MPI_UINT64_T"),
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_cas_latency`: one `u64`, reported as 8 bytes.
pub const CAS_LATENCY: Benchmark = Benchmark {
    name: "osu_cas_latency",
    title: "OSU MPI_Compare_and_swap latency Test",
    operation: Operation::CompareAndSwap,
    datatype: Some("MPI_UINT64_T"),
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_put_bw`.
pub const PUT_BW: Benchmark = Benchmark {
    name: "osu_put_bw",
    title: "OSU MPI_Put Bandwidth Test",
    operation: Operation::Put,
    measure: Measure::Bandwidth,
    syncs: &SyncMode::ALL,
    ..PUT_LATENCY
};

/// `osu_get_bw`.
pub const GET_BW: Benchmark = Benchmark {
    name: "osu_get_bw",
    title: "OSU MPI_Get Bandwidth Test",
    operation: Operation::Get,
    ..PUT_BW
};

/// `osu_put_bibw`: fence or post/start/complete/wait only (OSU's `ACTIVE_SYNC`).
pub const PUT_BIBW: Benchmark = Benchmark {
    name: "osu_put_bibw",
    title: "OSU MPI_Put Bi-directional Bandwidth Test",
    measure: Measure::BiBandwidth,
    syncs: &SyncMode::ACTIVE,
    default_sync: SyncMode::Pscw,
    ..PUT_BW
};

/// Every benchmark of the suite.
pub const ALL: [&Benchmark; 9] = [
    &PUT_LATENCY,
    &GET_LATENCY,
    &ACC_LATENCY,
    &GET_ACC_LATENCY,
    &FOP_LATENCY,
    &CAS_LATENCY,
    &PUT_BW,
    &GET_BW,
    &PUT_BIBW,
];

impl Benchmark {
    /// Whether it reports bandwidth.
    pub const fn is_bandwidth(&self) -> bool {
        !matches!(self.measure, Measure::Latency)
    }

    /// The lock OSU's binary takes in lock-based modes: exclusive for get_accumulate
    /// (lock, flush, flush_local) and for fetch_and_op and compare_and_swap with
    /// lock/unlock per op; shared otherwise.
    pub const fn lock_type(&self, sync: SyncMode) -> LockType {
        match (self.operation, sync) {
            (Operation::GetAccumulate, SyncMode::Lock | SyncMode::Flush | SyncMode::FlushLocal)
            | (Operation::FetchAndOp | Operation::CompareAndSwap, SyncMode::Lock) => {
                LockType::Exclusive
            }
            _ => LockType::Shared,
        }
    }

    /// The value column's heading.
    pub const fn unit_heading(&self) -> &'static str {
        if self.is_bandwidth() {
            "Bandwidth (MB/s)"
        } else {
            "Latency (us)"
        }
    }

    /// The reference column's heading.
    pub const fn reference_heading(&self) -> &'static str {
        if self.is_bandwidth() {
            "Reference (MB/s)"
        } else {
            "Reference (us)"
        }
    }
}

/// A benchmark's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Smallest message size in bytes.
    pub min_size: usize,
    /// Largest message size in bytes.
    pub max_size: usize,
    /// Whether the largest size was given on the command line (rather than defaulted).
    pub max_size_given: bool,
    /// Timed iterations for sizes up to [`LARGE_MESSAGE_SIZE`].
    pub iterations: usize,
    /// Timed iterations for larger sizes.
    pub iterations_large: usize,
    /// Warm-up iterations for sizes up to [`LARGE_MESSAGE_SIZE`].
    pub skip: usize,
    /// Warm-up iterations for larger sizes.
    pub skip_large: usize,
    /// Messages per iteration of a bandwidth test (`-W`).
    pub window_size: usize,
    /// Synchronization mode.
    pub sync: SyncMode,
    /// Transport.
    pub backend: Backend,
    /// libfabric provider of `-b ofi:PROVIDER` (else `FI_PROVIDER` or tcp).
    pub provider: Option<String>,
    /// Window creation.
    pub window: WindowCreation,
    /// One JSON object per size instead of OSU's table.
    pub json: bool,
    /// Also time the same pattern with no library in the way, and print it and the ratio.
    pub reference: bool,
    /// Bandwidth of gets into and puts from buffers the requests hold
    /// (`Window::get_owned`, `Window::put_from_buffer`) rather than borrowed ones
    /// (`get_into`, `put`).
    pub owned_buffers: bool,
    /// Write the table (or JSON) to this file instead of standard output.
    pub output: Option<PathBuf>,
    /// Started by hand with `-b shm`, start two processes of itself (default on).
    pub self_launch: bool,
    /// Pin rank r to the r-th CPU this process may run on (`--pin`; off by default, as
    /// OSU leaves binding to the launcher).
    pub pin: bool,
}

impl Options {
    /// OSU's defaults for `bench`.
    pub fn defaults(bench: &Benchmark) -> Options {
        let (iterations, skip, iterations_large, skip_large) = if bench.is_bandwidth() {
            (BW_LOOP_SMALL, BW_SKIP_SMALL, BW_LOOP_LARGE, BW_SKIP_LARGE)
        } else {
            (
                LAT_LOOP_SMALL,
                LAT_SKIP_SMALL,
                LAT_LOOP_LARGE,
                LAT_SKIP_LARGE,
            )
        };
        Options {
            min_size: DEFAULT_MIN_SIZE,
            max_size: DEFAULT_MAX_SIZE,
            max_size_given: false,
            iterations,
            iterations_large,
            skip,
            skip_large,
            window_size: WINDOW_SIZE,
            sync: bench.default_sync,
            backend: Backend::Shm,
            provider: None,
            window: bench.default_window,
            json: false,
            reference: false,
            owned_buffers: false,
            output: None,
            self_launch: true,
            pin: false,
        }
    }

    /// The message sizes to run, as OSU walks them: from the smallest, doubling, up to
    /// the largest; the one size of an atomic (8 bytes) for fetch_and_op and
    /// compare_and_swap.
    pub fn sizes(&self, bench: &Benchmark) -> Vec<usize> {
        if bench.operation.is_atomic() {
            return vec![std::mem::size_of::<u64>()];
        }
        let mut out = Vec::new();
        let mut size = self.min_size.max(1);
        while size <= self.max_size {
            out.push(size);
            match size.checked_mul(2) {
                Some(next) => size = next,
                None => break,
            }
        }
        out
    }

    /// Timed and warm-up iterations for one message size.
    pub fn iterations_for(&self, size: usize) -> (usize, usize) {
        if size > LARGE_MESSAGE_SIZE {
            (self.iterations_large, self.skip_large)
        } else {
            (self.iterations, self.skip)
        }
    }

    /// Messages per iteration: the window size for bandwidth tests, 1 for latency tests.
    pub fn messages_per_iteration(&self, bench: &Benchmark) -> usize {
        if bench.is_bandwidth() {
            self.window_size
        } else {
            1
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the benchmark.
    Run(Options),
    /// Print the usage text and stop.
    Help,
}

/// The usage text of `bench`'s binary.
pub fn usage(bench: &Benchmark, program: &str) -> String {
    let syncs: Vec<&str> = bench.syncs.iter().map(|m| m.name()).collect();
    let windows: Vec<&str> = WindowCreation::ALL.iter().map(|w| w.name()).collect();
    let backends: Vec<&str> = Backend::ALL.iter().map(|b| b.name()).collect();
    let o = Options::defaults(bench);
    let what = match bench.measure {
        Measure::Latency => "latency",
        Measure::Bandwidth => "bandwidth",
        Measure::BiBandwidth => "bi-directional bandwidth",
    };
    let mut s = format!(
        "Usage: {program} [options]\n\
         {}: OSU {OSU_VERSION}-style {what} test of rma between two ranks (rank 0 origin,\n\
         rank 1 target). Run it under `rma-run -n 2 {program}`; started by hand with\n\
         -b shm it starts its two processes itself.\n\
         Options:\n",
        bench.name
    );
    if bench.operation.is_atomic() {
        s +=
            "  -m, --message-size [MIN:]MAX  accepted and ignored: the size is one u64 (8 bytes)\n";
    } else {
        let _ = writeln!(
            s,
            "  -m, --message-size [MIN:]MAX  message sizes in bytes (default {DEFAULT_MIN_SIZE}:{DEFAULT_MAX_SIZE});\n\
             \x20                               MIN: sets only the smallest, :MAX only the largest"
        );
    }
    let _ = writeln!(
        s,
        "  -i, --iterations ITER   timed iterations per size (default {}, {} above {LARGE_MESSAGE_SIZE} bytes)\n\
         \x20 -x, --warmup WARMUP     warm-up iterations per size (default {}, {} above {LARGE_MESSAGE_SIZE} bytes)",
        o.iterations, o.iterations_large, o.skip, o.skip_large
    );
    if bench.is_bandwidth() {
        let _ = writeln!(
            s,
            "  -W, --window-size SIZE  messages in flight per iteration (default {WINDOW_SIZE})"
        );
    }
    let _ = writeln!(
        s,
        "  -s, --sync-option SYNC  synchronization: {} (default {})\n\
         \x20 -w, --win-option WIN    window creation: {} (default {})\n\
         \x20 -b, --backend BACKEND   transport: {} (default shm)\n\
         \x20     --reference         also time the same pattern by hand (no library), print it\n\
         \x20                         and the ratio ours/reference\n\
         \x20     --owned-buffers     gets into and puts from buffers their requests hold\n\
         \x20                         (get_owned, put_from_buffer), not borrowed ones\n\
         \x20                         (get_into, put); bandwidth only\n\
         \x20     --json              one JSON object per size instead of OSU's table\n\
         \x20 -o, --output FILE       write the table (or JSON) to FILE instead of stdout\n\
         \x20     --no-launch         with -b shm and no launcher, fail instead of starting\n\
         \x20                         two processes of itself\n\
         \x20 -h, --help              this text\n\
         The engine's RMA_* environment variables (see rma_core::Config) apply.",
        syncs.join(", "),
        bench.default_sync.name(),
        windows.join(", "),
        bench.default_window.name(),
        backends.join(", "),
    );
    s
}

fn parse_count(flag: &str, value: &str, min: usize) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "invalid value {value:?} for {flag}: expected an integer >= {min}"
        )),
    }
}

fn parse_size(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("invalid message size {value:?}"))
}

/// Applies `-m`: `MAX`, `MIN:MAX`, `MIN:` or `:MAX`, as OSU reads it.
fn apply_message_size(o: &mut Options, value: &str) -> Result<(), String> {
    match value.split_once(':') {
        None => {
            o.max_size = parse_size(value)?;
            o.max_size_given = true;
        }
        Some((min, max)) => {
            if max.contains(':') || (min.is_empty() && max.is_empty()) {
                return Err(format!("invalid message size {value:?}"));
            }
            if !min.is_empty() {
                o.min_size = parse_size(min)?;
            }
            if !max.is_empty() {
                o.max_size = parse_size(max)?;
                o.max_size_given = true;
            }
        }
    }
    if o.min_size == 0 {
        return Err("the smallest message size must be at least 1 byte".into());
    }
    Ok(())
}

/// Parses the arguments after the program name for `bench`'s binary: `-x VALUE`,
/// `-xVALUE`, `--name VALUE` and `--name=VALUE` alike. An error is a usage error.
pub fn parse_args<I, S>(bench: &Benchmark, args: I) -> Result<Command, String>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    parse_lexopt(bench, lexopt::Parser::from_args(args)).map_err(|e| e.to_string())
}

fn parse_lexopt(bench: &Benchmark, mut p: lexopt::Parser) -> Result<Command, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Options::defaults(bench);
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("json") => o.json = true,
            Long("reference") => o.reference = true,
            Long("owned-buffers") => o.owned_buffers = true,
            Long("no-launch") => o.self_launch = false,
            Long("pin") => o.pin = true,
            Short('m') | Long("message-size") => apply_message_size(&mut o, &p.value()?.string()?)?,
            Short('i') | Long("iterations") => {
                o.iterations = parse_count("-i", &p.value()?.string()?, 1)?;
                o.iterations_large = o.iterations;
            }
            Short('x') | Long("warmup") => {
                o.skip = parse_count("-x", &p.value()?.string()?, 0)?;
                o.skip_large = o.skip;
            }
            Short('W') | Long("window-size") if bench.is_bandwidth() => {
                o.window_size = parse_count("-W", &p.value()?.string()?, 1)?
            }
            Short('s') | Long("sync-option") => {
                let value = p.value()?.string()?;
                let sync = SyncMode::parse(&value)
                    .ok_or_else(|| format!("unknown synchronization {value:?}"))?;
                if !bench.syncs.contains(&sync) {
                    let offered: Vec<&str> = bench.syncs.iter().map(|m| m.name()).collect();
                    return Err(
                        format!("{} offers -s {} only", bench.name, offered.join(", ")).into(),
                    );
                }
                o.sync = sync;
            }
            Short('w') | Long("win-option") => {
                let value = p.value()?.string()?;
                o.window = WindowCreation::parse(&value)
                    .ok_or_else(|| format!("unknown window creation {value:?}"))?;
            }
            Short('b') | Long("backend") => {
                let value = p.value()?.string()?;
                let (name, provider) = match value.split_once(':') {
                    Some((n, p)) => (n, Some(p.to_string())),
                    None => (value.as_str(), None),
                };
                o.backend =
                    Backend::parse(name).ok_or_else(|| format!("unknown backend {value:?}"))?;
                if provider.is_some() && o.backend != Backend::Ofi {
                    return Err(format!("only -b ofi takes a provider: {value:?}").into());
                }
                o.provider = provider;
            }
            Short('o') | Long("output") => {
                let value = p.value()?;
                if value.is_empty() {
                    return Err("option -o needs a file name".into());
                }
                o.output = Some(PathBuf::from(value));
            }
            _ => return Err(arg.unexpected()),
        }
    }
    if o.min_size > o.max_size && !bench.operation.is_atomic() {
        return Err(format!(
            "no message sizes: the smallest ({}) is above the largest ({})",
            o.min_size, o.max_size
        )
        .into());
    }
    Ok(Command::Run(o))
}

/// OSU's preamble of `bench` run with `o`: title, window creation, synchronization,
/// datatype (where OSU prints one), then `notes` (each already starting with `# `), then
/// the column headings (two more with `--reference`).
pub fn preamble(bench: &Benchmark, o: &Options, notes: &[String]) -> String {
    let mut s = format!(
        "# {} v{OSU_VERSION} (rma)\n\
         # Window creation: {}\n\
         # Synchronization: {}\n",
        bench.title,
        o.window.osu_name(),
        o.sync.osu_name(),
    );
    if let Some(dt) = bench.datatype {
        let _ = writeln!(s, "# Datatype: {dt}.");
    }
    for n in notes {
        let _ = writeln!(s, "{n}");
    }
    let _ = write!(
        s,
        "{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}",
        "# Size",
        bench.unit_heading()
    );
    if o.reference {
        let _ = write!(
            s,
            "{:>FIELD_WIDTH$}{:>RATIO_WIDTH$}",
            bench.reference_heading(),
            "Ratio"
        );
    }
    s.push('\n');
    s
}

/// One line of OSU's table: size left-aligned in 10 columns, the value right-aligned in
/// 18 with 2 decimals (`%-10d%18.2f`); with a reference, the reference (3 decimals) and
/// the ratio value/reference follow.
pub fn row(size: usize, value: f64, reference: Option<f64>) -> String {
    let mut s = format!("{size:<SIZE_WIDTH$}{value:>FIELD_WIDTH$.2}");
    if let Some(r) = reference {
        let _ = write!(s, "{r:>FIELD_WIDTH$.3}{:>RATIO_WIDTH$.2}", value / r);
    }
    s
}

/// One size's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations.
    pub iterations: usize,
    /// Warm-up iterations.
    pub warmup: usize,
    /// Microseconds per op, or MB/s.
    pub value: f64,
    /// The same pattern by hand, in the same unit.
    pub reference: Option<f64>,
}

/// One line of `--json` output: one size's result, as the binaries write it and
/// `rma-plot` reads it. The value is `latency_us` or `bandwidth_mb_s`; with
/// `--reference`, `reference_us` or `reference_mb_s` and `ratio` (value/reference)
/// follow; bandwidth tests also give `window_size`. Numbers JSON cannot represent (NaN,
/// infinities) are `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonLine {
    /// The binary (`osu_put_latency`).
    #[serde(default)]
    pub benchmark: String,
    /// [`OSU_VERSION`].
    #[serde(default)]
    pub osu_version: String,
    /// `-b`'s name.
    #[serde(default)]
    pub backend: String,
    /// `-w`'s name.
    #[serde(default)]
    pub window: String,
    /// `-s`'s name.
    #[serde(default)]
    pub sync: String,
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations.
    #[serde(default)]
    pub iterations: usize,
    /// Warm-up iterations.
    #[serde(default)]
    pub warmup: usize,
    /// Messages per iteration (bandwidth tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<usize>,
    /// Microseconds per op (latency tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// The reference's microseconds per op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_us: Option<f64>,
    /// MB/s (bandwidth tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mb_s: Option<f64>,
    /// The reference's MB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_mb_s: Option<f64>,
    /// Value / reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl JsonLine {
    /// `r`, a result of `bench` run with `o`.
    pub fn new(bench: &Benchmark, o: &Options, r: &Record) -> JsonLine {
        let bw = bench.is_bandwidth();
        let (value, reference) = (Some(r.value), r.reference);
        JsonLine {
            benchmark: bench.name.into(),
            osu_version: OSU_VERSION.into(),
            backend: o.backend.name().into(),
            window: o.window.name().into(),
            sync: o.sync.name().into(),
            size: r.size,
            iterations: r.iterations,
            warmup: r.warmup,
            window_size: bw.then_some(o.window_size),
            latency_us: value.filter(|_| !bw),
            reference_us: reference.filter(|_| !bw),
            bandwidth_mb_s: value.filter(|_| bw),
            reference_mb_s: reference.filter(|_| bw),
            ratio: reference.map(|reference| r.value / reference),
        }
    }
}

/// One size's result as a JSON object on one line ([`JsonLine`]).
pub fn json(bench: &Benchmark, o: &Options, r: &Record) -> String {
    serde_json::to_string(&JsonLine::new(bench, o, r)).expect("a JsonLine serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bench: &Benchmark, args: &[&str]) -> Options {
        match parse_args(bench, args.iter().copied()) {
            Ok(Command::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_osu() {
        let o = run(&PUT_LATENCY, &[]);
        assert_eq!(o, Options::defaults(&PUT_LATENCY));
        assert_eq!(o.sizes(&PUT_LATENCY).len(), 23);
        assert_eq!(o.iterations_for(8192), (10_000, 100));
        assert_eq!(o.iterations_for(16384), (1_000, 10));
        assert_eq!(
            (o.sync, o.window),
            (SyncMode::Flush, WindowCreation::Allocate)
        );
        let bw = run(&PUT_BW, &[]);
        assert_eq!(bw.iterations_for(8), (100, 10));
        assert_eq!(bw.iterations_for(1 << 20), (20, 2));
        assert_eq!(bw.messages_per_iteration(&PUT_BW), 64);
        assert_eq!(bw.sync, SyncMode::Flush);
        assert_eq!(run(&PUT_BIBW, &[]).sync, SyncMode::Pscw);
        let ga = run(&GET_ACC_LATENCY, &[]);
        assert_eq!(
            (ga.sync, ga.window),
            (SyncMode::Lock, WindowCreation::Create)
        );
        assert_eq!(
            run(&FOP_LATENCY, &["-m", "1:64"]).sizes(&FOP_LATENCY),
            vec![8]
        );
        assert_eq!(
            GET_ACC_LATENCY.lock_type(SyncMode::Flush),
            LockType::Exclusive
        );
        assert_eq!(FOP_LATENCY.lock_type(SyncMode::Lock), LockType::Exclusive);
        assert_eq!(FOP_LATENCY.lock_type(SyncMode::Flush), LockType::Shared);
        assert_eq!(PUT_LATENCY.lock_type(SyncMode::Lock), LockType::Shared);
    }

    #[test]
    fn parses_every_spelling() {
        let o = run(
            &PUT_BW,
            &[
                "-m",
                "4:64",
                "-i200",
                "--warmup=20",
                "-s",
                "pscw",
                "-b",
                "sim-am",
                "-w",
                "dynamic",
                "-W",
                "8",
                "--json",
                "--reference",
                "-o",
                "out.txt",
                "--no-launch",
                "--pin",
            ],
        );
        assert_eq!((o.min_size, o.max_size, o.max_size_given), (4, 64, true));
        assert_eq!(o.sizes(&PUT_BW), vec![4, 8, 16, 32, 64]);
        assert_eq!(o.iterations_for(1 << 20), (200, 20));
        assert_eq!(o.sync, SyncMode::Pscw);
        assert_eq!(o.backend, Backend::SimAm);
        assert_eq!(o.window, WindowCreation::Dynamic);
        assert_eq!(o.window_size, 8);
        assert!(o.json && o.reference && !o.self_launch && o.pin);
        assert_eq!(o.output, Some(PathBuf::from("out.txt")));
        let p = &PUT_LATENCY;
        assert_eq!(run(p, &["-m", "128"]).sizes(p).first(), Some(&1));
        assert_eq!(run(p, &["-m", "8:"]).max_size, DEFAULT_MAX_SIZE);
        assert_eq!(run(p, &["-m", ":2"]).sizes(p), vec![1, 2]);
        assert_eq!(run(p, &["-m", "3:13"]).sizes(p), vec![3, 6, 12]);
        assert_eq!(run(p, &["-s", "FLUSH_LOCAL"]).sync, SyncMode::FlushLocal);
        assert_eq!(parse_args(p, ["--help"]), Ok(Command::Help));
        assert_eq!(parse_args(p, ["-m", "4", "-h"]), Ok(Command::Help));
        // Long names, with a space or an `=`.
        let long = run(
            &PUT_BW,
            &[
                "--message-size=4:64",
                "--iterations",
                "200",
                "--sync-option=fence",
                "--win-option",
                "create",
                "--window-size=8",
                "--backend=sim-rdma",
                "--output=x",
            ],
        );
        assert_eq!(
            (long.min_size, long.max_size, long.iterations),
            (4, 64, 200)
        );
        assert_eq!(
            (long.sync, long.window),
            (SyncMode::Fence, WindowCreation::Create)
        );
        assert_eq!((long.window_size, long.backend), (8, Backend::SimRdma));
        assert_eq!(long.output, Some(PathBuf::from("x")));
        let ofi = run(p, &["-bofi:tcp"]);
        assert_eq!(
            (ofi.backend, ofi.provider.as_deref()),
            (Backend::Ofi, Some("tcp"))
        );
    }

    #[test]
    fn refuses_nonsense() {
        for bad in [
            &["-m"][..],
            &["-m", "0:8"],
            &["-m", "9:8"],
            &["-m", "a:b"],
            &["-m", "1:2:3"],
            &["-i", "0"],
            &["-x", "-1"],
            &["-s", "sometimes"],
            &["-b", "tcp"],
            &["-w", "shared"],
            &["-W", "8"],
            &["--json=1"],
            &["-o"],
            &["-o", ""],
            &["-b", "shm:tcp"],
            &["--message-size"],
            &["--pin=yes"],
            &["--", "-i", "5"],
            &["extra"],
        ] {
            assert!(
                parse_args(&PUT_LATENCY, bad.iter().copied()).is_err(),
                "{bad:?}"
            );
        }
        let e = parse_args(&PUT_BIBW, ["-s", "flush"]).unwrap_err();
        assert!(e.contains("pscw, fence"), "{e}");
        assert!(parse_args(&PUT_BW, ["-W", "0"]).is_err());
    }

    #[test]
    fn formats_like_osu() {
        let o = Options::defaults(&GET_LATENCY);
        assert_eq!(
            preamble(&GET_LATENCY, &o, &[]),
            "# OSU MPI_Get latency Test v7.4 (rma)\n\
             # Window creation: MPI_Win_allocate\n\
             # Synchronization: MPI_Win_flush\n\
             # Datatype: MPI_CHAR.\n\
             # Size          Latency (us)\n"
        );
        let bw = Options {
            reference: true,
            ..Options::defaults(&PUT_BW)
        };
        assert_eq!(
            preamble(&PUT_BW, &bw, &["# Reference: x".into()]),
            "# OSU MPI_Put Bandwidth Test v7.4 (rma)\n\
             # Window creation: MPI_Win_allocate\n\
             # Synchronization: MPI_Win_flush\n\
             # Datatype: MPI_CHAR.\n\
             # Reference: x\n\
             # Size      Bandwidth (MB/s)  Reference (MB/s)     Ratio\n"
        );
        let ga = Options::defaults(&GET_ACC_LATENCY);
        assert!(!preamble(&GET_ACC_LATENCY, &ga, &[]).contains("Datatype"));
        assert_eq!(row(1, 0.123, None), "1                       0.12");
        assert_eq!(row(1048576, 899.826, None), "1048576               899.83");
        assert_eq!(
            row(8, 0.5, Some(0.25)),
            "8                       0.50             0.250      2.00"
        );
        let r = Record {
            size: 8,
            iterations: 100,
            warmup: 10,
            value: 1.5,
            reference: None,
        };
        assert_eq!(
            json(&PUT_LATENCY, &Options::defaults(&PUT_LATENCY), &r),
            "{\"benchmark\":\"osu_put_latency\",\"osu_version\":\"7.4\",\"backend\":\"shm\",\
             \"window\":\"allocate\",\"sync\":\"flush\",\"size\":8,\"iterations\":100,\
             \"warmup\":10,\"latency_us\":1.5}"
        );
        let r = Record {
            reference: Some(3.0),
            ..r
        };
        assert_eq!(
            json(&PUT_BW, &Options::defaults(&PUT_BW), &r),
            "{\"benchmark\":\"osu_put_bw\",\"osu_version\":\"7.4\",\"backend\":\"shm\",\
             \"window\":\"allocate\",\"sync\":\"flush\",\"size\":8,\"iterations\":100,\
             \"warmup\":10,\"window_size\":64,\"bandwidth_mb_s\":1.5,\"reference_mb_s\":3.0,\
             \"ratio\":0.5}"
        );
        // What JSON cannot represent is null, and reads back as nothing.
        let r = Record {
            value: f64::NAN,
            reference: Some(0.0),
            ..r
        };
        let line = json(&PUT_LATENCY, &Options::defaults(&PUT_LATENCY), &r);
        assert!(line.ends_with("\"latency_us\":null,\"reference_us\":0.0,\"ratio\":null}"));
        let back: JsonLine = serde_json::from_str(&line).unwrap();
        assert_eq!((back.latency_us, back.reference_us), (None, Some(0.0)));
    }
}
