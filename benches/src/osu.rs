//! What the OSU-style binaries share: options spelled as OSU spells them, message sizes
//! and iteration counts chosen as OSU chooses them, and OSU's output format.
//!
//! Output follows OSU 7.4 (`osu_util_mpi.c`): a `#` preamble, then one line per message
//! size printed as `%-10d%18.2f`. With `--json` each size is one JSON object on its own
//! line instead, and no preamble is printed.

use std::fmt::Write as _;

use rma_core::sim::Profile;

/// The OSU release whose output format and defaults these binaries follow.
pub const OSU_VERSION: &str = "7.4";
/// Sizes above this use the "large" iteration and warm-up counts (OSU's
/// `LARGE_MESSAGE_SIZE`).
pub const LARGE_MESSAGE_SIZE: usize = 8192;
/// Timed iterations per size up to [`LARGE_MESSAGE_SIZE`] (OSU's `LAT_LOOP_SMALL`).
pub const ITERATIONS_SMALL: usize = 10_000;
/// Warm-up iterations per size up to [`LARGE_MESSAGE_SIZE`] (OSU's `LAT_SKIP_SMALL`).
pub const SKIP_SMALL: usize = 100;
/// Timed iterations per size above [`LARGE_MESSAGE_SIZE`] (OSU's `LAT_LOOP_LARGE`).
pub const ITERATIONS_LARGE: usize = 1_000;
/// Warm-up iterations per size above [`LARGE_MESSAGE_SIZE`] (OSU's `LAT_SKIP_LARGE`).
pub const SKIP_LARGE: usize = 10;
/// Default smallest message size in bytes.
pub const DEFAULT_MIN_SIZE: usize = 1;
/// Default largest message size in bytes (OSU's own default is 4 MiB; the simulated
/// transports carry at most 1 MiB per active message).
pub const DEFAULT_MAX_SIZE: usize = 1 << 20;
/// Width of the size column.
const SIZE_WIDTH: usize = 10;
/// Width of a value column (OSU's `FIELD_WIDTH`).
const FIELD_WIDTH: usize = 18;

/// How an origin synchronizes around its operations (OSU's `-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// `lock(shared)` / op / `unlock` every iteration.
    Lock,
    /// `lock(shared)` once, then op / `flush` every iteration (OSU's default).
    Flush,
    /// `lock(shared)` once, then op / `flush_local` every iteration.
    FlushLocal,
    /// `lock_all` / op / `unlock_all` every iteration.
    LockAll,
    /// Fence epochs in both directions; the latency is half a round trip.
    Fence,
    /// Post/start/complete/wait in both directions; the latency is half a round trip.
    Pscw,
}

impl SyncMode {
    /// Every mode, in the order of OSU's help text.
    pub const ALL: [SyncMode; 6] = [
        SyncMode::Lock,
        SyncMode::Flush,
        SyncMode::FlushLocal,
        SyncMode::LockAll,
        SyncMode::Pscw,
        SyncMode::Fence,
    ];

    /// The name `-s` takes.
    pub const fn name(self) -> &'static str {
        match self {
            SyncMode::Lock => "lock",
            SyncMode::Flush => "flush",
            SyncMode::FlushLocal => "flush_local",
            SyncMode::LockAll => "lock_all",
            SyncMode::Fence => "fence",
            SyncMode::Pscw => "pscw",
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
        }
    }

    /// Whether the timed loop is a round trip (both ranks put), as OSU's fence and PSCW
    /// tests are: their latency is the loop time per iteration halved.
    pub const fn is_round_trip(self) -> bool {
        matches!(self, SyncMode::Fence | SyncMode::Pscw)
    }

    fn parse(s: &str) -> Option<SyncMode> {
        SyncMode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Which transport carries the two ranks (`-b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The simulated transport, every operation an active message.
    SimAm,
    /// The simulated transport with native put, get and some atomics.
    SimRdma,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 2] = [Backend::SimAm, Backend::SimRdma];

    /// The name `-b` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::SimAm => "sim-am",
            Backend::SimRdma => "sim-rdma",
        }
    }

    /// The simulated network's capability profile.
    pub const fn profile(self) -> Profile {
        match self {
            Backend::SimAm => Profile::ActiveMessages,
            Backend::SimRdma => Profile::Rdma,
        }
    }

    fn parse(s: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// How the window is created (OSU's `-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowCreation {
    /// The library allocates the memory (`MPI_Win_allocate`).
    Allocate,
    /// The window is created over user memory (`MPI_Win_create`).
    Create,
}

impl WindowCreation {
    /// The name `-w` takes.
    pub const fn name(self) -> &'static str {
        match self {
            WindowCreation::Allocate => "allocate",
            WindowCreation::Create => "create",
        }
    }

    /// What OSU's preamble prints after `# Window creation: `.
    pub const fn osu_name(self) -> &'static str {
        match self {
            WindowCreation::Allocate => "MPI_Win_allocate",
            WindowCreation::Create => "MPI_Win_create",
        }
    }

    fn parse(s: &str) -> Option<WindowCreation> {
        [WindowCreation::Allocate, WindowCreation::Create]
            .into_iter()
            .find(|w| w.name() == s)
    }
}

/// A latency benchmark's options.
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
    /// Synchronization mode.
    pub sync: SyncMode,
    /// Transport.
    pub backend: Backend,
    /// Window creation.
    pub window: WindowCreation,
    /// One JSON object per size instead of OSU's table.
    pub json: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min_size: DEFAULT_MIN_SIZE,
            max_size: DEFAULT_MAX_SIZE,
            max_size_given: false,
            iterations: ITERATIONS_SMALL,
            iterations_large: ITERATIONS_LARGE,
            skip: SKIP_SMALL,
            skip_large: SKIP_LARGE,
            sync: SyncMode::Flush,
            backend: Backend::SimRdma,
            window: WindowCreation::Allocate,
            json: false,
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

impl Options {
    /// The message sizes to run, as OSU walks them: from the smallest, doubling, up to
    /// the largest.
    pub fn sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut size = self.min_size;
        while size <= self.max_size {
            out.push(size);
            size = match size {
                0 => 1,
                s => match s.checked_mul(2) {
                    Some(next) => next,
                    None => break,
                },
            };
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
}

/// The usage text of a latency binary.
pub fn usage(program: &str) -> String {
    let syncs: Vec<&str> = SyncMode::ALL.iter().map(|m| m.name()).collect();
    let backends: Vec<&str> = Backend::ALL.iter().map(|b| b.name()).collect();
    format!(
        "Usage: {program} [options]\n\
         OSU-style latency test of rma between two ranks (rank 0 origin, rank 1 target).\n\
         options:\n\
         \x20 -m, --message-size [MIN:]MAX  message sizes in bytes (default {DEFAULT_MIN_SIZE}:{DEFAULT_MAX_SIZE});\n\
         \x20                               MIN: sets only the smallest, :MAX only the largest\n\
         \x20 -i, --iterations ITER   timed iterations per size (default {ITERATIONS_SMALL}, \
         {ITERATIONS_LARGE} above {LARGE_MESSAGE_SIZE} bytes)\n\
         \x20 -x, --warmup WARMUP     warm-up iterations per size (default {SKIP_SMALL}, \
         {SKIP_LARGE} above {LARGE_MESSAGE_SIZE} bytes)\n\
         \x20 -s, --sync-option SYNC  synchronization: {} (default flush)\n\
         \x20 -w, --win-option WIN    window creation: allocate, create (default allocate)\n\
         \x20 -b, --backend BACKEND   transport: {} (default sim-rdma)\n\
         \x20     --json              one JSON object per size instead of OSU's table\n\
         \x20 -h, --help              this text\n\
         The engine's RMA_* environment variables (see rma_core::Config) apply.\n",
        syncs.join(", "),
        backends.join(", "),
    )
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

/// Parses the arguments after the program name.
pub fn parse_args<I, S>(args: I) -> Result<Command, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut o = Options::default();
    let mut args = args.into_iter().map(Into::into);
    while let Some(arg) = args.next() {
        // `--name=value`, `-xVALUE` and `-x VALUE` are all accepted.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ if !arg.starts_with("--") && arg.starts_with('-') && arg.len() > 2 => {
                (arg[..2].to_string(), Some(arg[2..].to_string()))
            }
            _ => (arg.clone(), None),
        };
        let takes_value = matches!(
            flag.as_str(),
            "-m" | "--message-size"
                | "-i"
                | "--iterations"
                | "-x"
                | "--warmup"
                | "-s"
                | "--sync-option"
                | "-w"
                | "--win-option"
                | "-b"
                | "--backend"
        );
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => args
                    .next()
                    .ok_or_else(|| format!("option {flag} needs a value"))?,
            }
        } else {
            if inline.is_some() {
                return Err(format!("unknown option {arg:?}"));
            }
            String::new()
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--json" => o.json = true,
            "-m" | "--message-size" => apply_message_size(&mut o, &value)?,
            "-i" | "--iterations" => {
                o.iterations = parse_count(&flag, &value, 1)?;
                o.iterations_large = o.iterations;
            }
            "-x" | "--warmup" => {
                o.skip = parse_count(&flag, &value, 0)?;
                o.skip_large = o.skip;
            }
            "-s" | "--sync-option" => {
                o.sync = SyncMode::parse(&value)
                    .ok_or_else(|| format!("unknown synchronization {value:?}"))?;
            }
            "-w" | "--win-option" => {
                o.window = WindowCreation::parse(&value)
                    .ok_or_else(|| format!("unknown window creation {value:?}"))?;
            }
            "-b" | "--backend" => {
                o.backend =
                    Backend::parse(&value).ok_or_else(|| format!("unknown backend {value:?}"))?;
            }
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    if o.min_size > o.max_size {
        return Err(format!(
            "no message sizes: the smallest ({}) is above the largest ({})",
            o.min_size, o.max_size
        ));
    }
    Ok(Command::Run(o))
}

/// OSU's preamble of a latency test of `operation` (such as `MPI_Put`).
pub fn latency_preamble(operation: &str, o: &Options) -> String {
    format!(
        "# OSU {operation} Latency Test v{OSU_VERSION} (rma)\n\
         # Window creation: {}\n\
         # Synchronization: {}\n\
         {:<SIZE_WIDTH$}{:>FIELD_WIDTH$}\n",
        o.window.osu_name(),
        o.sync.osu_name(),
        "# Size",
        "Latency (us)",
    )
}

/// One line of OSU's table: size left-aligned in 10 columns, latency right-aligned in
/// 18 with 2 decimals (`%-10d%18.2f`).
pub fn latency_row(size: usize, latency_us: f64) -> String {
    format!("{size:<SIZE_WIDTH$}{latency_us:>FIELD_WIDTH$.2}")
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number, or `null` for what JSON cannot represent.
fn json_f64(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// One size's result as a JSON object on one line.
pub fn latency_json(
    benchmark: &str,
    o: &Options,
    size: usize,
    iterations: usize,
    warmup: usize,
    latency_us: f64,
) -> String {
    format!(
        "{{\"benchmark\":{},\"osu_version\":{},\"backend\":{},\"window\":{},\"sync\":{},\
         \"size\":{size},\"iterations\":{iterations},\"warmup\":{warmup},\"latency_us\":{}}}",
        json_str(benchmark),
        json_str(OSU_VERSION),
        json_str(o.backend.name()),
        json_str(o.window.name()),
        json_str(o.sync.name()),
        json_f64(latency_us),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse_args(args.iter().copied()) {
            Ok(Command::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_osu() {
        let o = run(&[]);
        assert_eq!(o, Options::default());
        assert_eq!(o.sizes().len(), 21);
        assert_eq!(o.iterations_for(8192), (10_000, 100));
        assert_eq!(o.iterations_for(16384), (1_000, 10));
    }

    #[test]
    fn parses_every_spelling() {
        let o = run(&[
            "-m",
            "4:64",
            "-i200",
            "--warmup=20",
            "-s",
            "pscw",
            "-b",
            "sim-am",
            "-w",
            "create",
            "--json",
        ]);
        assert_eq!((o.min_size, o.max_size, o.max_size_given), (4, 64, true));
        assert_eq!(o.sizes(), vec![4, 8, 16, 32, 64]);
        assert_eq!(o.iterations_for(1 << 20), (200, 20));
        assert_eq!(o.sync, SyncMode::Pscw);
        assert_eq!(o.backend, Backend::SimAm);
        assert_eq!(o.window, WindowCreation::Create);
        assert!(o.json);
        assert_eq!(run(&["-m", "128"]).sizes().first(), Some(&1));
        assert_eq!(run(&["-m", "8:"]).max_size, DEFAULT_MAX_SIZE);
        assert_eq!(run(&["-m", ":2"]).sizes(), vec![1, 2]);
        assert_eq!(run(&["-m", "3:13"]).sizes(), vec![3, 6, 12]);
        assert_eq!(parse_args(["--help"]), Ok(Command::Help));
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
            &["-w", "dynamic"],
            &["--json=1"],
            &["extra"],
        ] {
            assert!(parse_args(bad.iter().copied()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formats_like_osu() {
        let o = Options::default();
        assert_eq!(
            latency_preamble("MPI_Put", &o),
            "# OSU MPI_Put Latency Test v7.4 (rma)\n\
             # Window creation: MPI_Win_allocate\n\
             # Synchronization: MPI_Win_flush\n\
             # Size          Latency (us)\n"
        );
        assert_eq!(latency_row(1, 0.123), "1                       0.12");
        assert_eq!(
            latency_row(1048576, 899.826),
            "1048576               899.83"
        );
        assert_eq!(
            latency_json("osu_put_latency", &o, 8, 100, 10, 1.5),
            "{\"benchmark\":\"osu_put_latency\",\"osu_version\":\"7.4\",\"backend\":\"sim-rdma\",\
             \"window\":\"allocate\",\"sync\":\"flush\",\"size\":8,\"iterations\":100,\
             \"warmup\":10,\"latency_us\":1.5}"
        );
        assert_eq!(json_str("a\"\\\n"), "\"a\\\"\\\\\\u000a\"");
        assert_eq!(json_f64(f64::NAN), "null");
    }
}
