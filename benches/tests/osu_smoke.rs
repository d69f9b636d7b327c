//! Smoke tests of the OSU-style binaries: each runs between two processes started by
//! the launcher (with a deadline), and what rank 0 writes (`-o FILE`) must read as OSU's
//! format: `#` lines first, then one row per size with an integer size and positive
//! finite numbers. Also: `--reference` columns, `--json` and `rma-plot`, the self-launch
//! of a binary started by hand, the error of a World of one, the simulated backends.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rma::launcher::{launch, Launch, Outcome};

/// The jobs spin while they wait: one at a time on a small machine.
static SERIAL: Mutex<()> = Mutex::new(());
const DEADLINE: Duration = Duration::from_secs(60);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

struct Bin {
    name: &'static str,
    exe: &'static str,
    bandwidth: bool,
    atomic: bool,
}

const BINS: [Bin; 9] = [
    Bin {
        name: "osu_put_latency",
        exe: env!("CARGO_BIN_EXE_osu_put_latency"),
        bandwidth: false,
        atomic: false,
    },
    Bin {
        name: "osu_get_latency",
        exe: env!("CARGO_BIN_EXE_osu_get_latency"),
        bandwidth: false,
        atomic: false,
    },
    Bin {
        name: "osu_acc_latency",
        exe: env!("CARGO_BIN_EXE_osu_acc_latency"),
        bandwidth: false,
        atomic: false,
    },
    Bin {
        name: "osu_get_acc_latency",
        exe: env!("CARGO_BIN_EXE_osu_get_acc_latency"),
        bandwidth: false,
        atomic: false,
    },
    Bin {
        name: "osu_fop_latency",
        exe: env!("CARGO_BIN_EXE_osu_fop_latency"),
        bandwidth: false,
        atomic: true,
    },
    Bin {
        name: "osu_cas_latency",
        exe: env!("CARGO_BIN_EXE_osu_cas_latency"),
        bandwidth: false,
        atomic: true,
    },
    Bin {
        name: "osu_put_bw",
        exe: env!("CARGO_BIN_EXE_osu_put_bw"),
        bandwidth: true,
        atomic: false,
    },
    Bin {
        name: "osu_get_bw",
        exe: env!("CARGO_BIN_EXE_osu_get_bw"),
        bandwidth: true,
        atomic: false,
    },
    Bin {
        name: "osu_put_bibw",
        exe: env!("CARGO_BIN_EXE_osu_put_bibw"),
        bandwidth: true,
        atomic: false,
    },
];

fn bin(name: &str) -> &'static Bin {
    BINS.iter()
        .find(|b| b.name == name)
        .expect("a binary of the suite")
}

/// A fresh file name in the temporary directory (removed by the caller).
fn scratch(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "rma-benches-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn launch2(exe: &str, args: &[String]) -> Outcome {
    let mut l = Launch::new(2, exe, args.to_vec());
    l.timeout = Some(DEADLINE);
    l.grace = Duration::from_secs(10);
    l.env.push(("RMA_TIMEOUT_MS".into(), "30000".into()));
    launch(&l).expect("launch")
}

/// Runs `cmd` to its end or kills it at the deadline.
fn run_with_deadline(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("{cmd:?} still running after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

/// Runs `cmd` to its end, reading its output as it comes (however much it writes), or
/// kills it at the deadline.
fn drained_with_deadline(mut cmd: Command) -> Output {
    let child = cmd.spawn().expect("spawn");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our child, which has not been waited for.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} still running after {DEADLINE:?}");
        }
    }
}

/// A table as OSU prints it.
#[derive(Debug)]
struct Table {
    header: Vec<String>,
    rows: Vec<(usize, Vec<f64>)>,
}

fn parse_osu(text: &str) -> Table {
    let mut t = Table {
        header: Vec::new(),
        rows: Vec::new(),
    };
    for line in text.lines() {
        if line.starts_with('#') {
            assert!(
                t.rows.is_empty(),
                "a # line after the rows: {line:?}\n{text}"
            );
            t.header.push(line.to_string());
            continue;
        }
        let mut fields = line.split_whitespace();
        let size = fields
            .next()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no integer size: {line:?}\n{text}"));
        let values: Vec<f64> = fields
            .map(|f| {
                f.parse::<f64>()
                    .unwrap_or_else(|_| panic!("{f:?} in {line:?}"))
            })
            .collect();
        assert!(!values.is_empty(), "no value: {line:?}");
        // Our figure is positive; the reference and the ratio are finite (a ratio printed
        // with two decimals may round to 0.00 on a simulated backend).
        assert!(
            values[0].is_finite() && values[0] > 0.0,
            "{} in {line:?}\n{text}",
            values[0]
        );
        for v in &values[1..] {
            assert!(v.is_finite() && *v >= 0.0, "{v} in {line:?}\n{text}");
        }
        t.rows.push((size, values));
    }
    assert!(!t.rows.is_empty(), "no rows:\n{text}");
    t
}

fn doubling(from: usize, to: usize) -> Vec<usize> {
    std::iter::successors(Some(from), |s| Some(s * 2))
        .take_while(|s| *s <= to)
        .collect()
}

/// Runs `b` under the launcher with `extra` arguments and returns rank 0's output.
fn run_bin(b: &Bin, extra: &[&str]) -> String {
    let out = scratch("out");
    let max = if b.bandwidth { "1:4096" } else { "1:64" };
    let mut args: Vec<String> = ["-m", max, "-i", "50", "-x", "5"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    args.push("-o".into());
    args.push(out.display().to_string());
    let outcome = launch2(b.exe, &args);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    assert!(
        outcome.success(),
        "{} {args:?}: {outcome:?}\noutput:\n{text}",
        b.name
    );
    text
}

fn expected_sizes(b: &Bin) -> Vec<usize> {
    if b.atomic {
        vec![8]
    } else if b.bandwidth {
        doubling(1, 4096)
    } else {
        doubling(1, 64)
    }
}

#[test]
fn every_binary_runs_between_two_processes() {
    let _g = serial();
    for b in &BINS {
        let text = run_bin(b, &[]);
        let t = parse_osu(&text);
        assert!(
            t.header[0].starts_with("# OSU MPI_") && t.header[0].ends_with(" v7.4 (rma)"),
            "{}: {:?}",
            b.name,
            t.header[0]
        );
        assert!(t
            .header
            .iter()
            .any(|h| h.starts_with("# Window creation: MPI_Win_")));
        assert!(t
            .header
            .iter()
            .any(|h| h.starts_with("# Synchronization: MPI_Win_")));
        let heading = if b.bandwidth {
            "# Size      Bandwidth (MB/s)"
        } else {
            "# Size          Latency (us)"
        };
        assert_eq!(
            t.header.last().map(String::as_str),
            Some(heading),
            "{}",
            b.name
        );
        let sizes: Vec<usize> = t.rows.iter().map(|r| r.0).collect();
        assert_eq!(sizes, expected_sizes(b), "{}:\n{text}", b.name);
        assert!(t.rows.iter().all(|r| r.1.len() == 1), "{}:\n{text}", b.name);
    }
}

#[test]
fn every_sync_and_window_of_put_latency() {
    let _g = serial();
    let b = bin("osu_put_latency");
    for sync in ["lock", "flush", "flush_local", "lock_all", "pscw", "fence"] {
        for win in ["allocate", "create", "dynamic"] {
            let text = run_bin(b, &["-s", sync, "-w", win, "-i", "20", "-x", "2"]);
            let t = parse_osu(&text);
            assert_eq!(t.rows.len(), 7, "-s {sync} -w {win}:\n{text}");
        }
    }
}

#[test]
fn reference_adds_two_columns() {
    let _g = serial();
    for (name, sync) in [
        ("osu_put_latency", "flush"),
        ("osu_get_latency", "fence"),
        ("osu_fop_latency", "lock"),
        ("osu_put_bw", "flush"),
        ("osu_put_bibw", "pscw"),
    ] {
        let b = bin(name);
        let text = run_bin(b, &["--reference", "-s", sync]);
        let t = parse_osu(&text);
        let heading = t.header.last().expect("a heading");
        assert!(heading.ends_with("Ratio"), "{name}: {heading:?}");
        assert!(
            t.header.iter().any(|h| h.starts_with("# Reference")),
            "{name}:\n{text}"
        );
        for (size, v) in &t.rows {
            assert_eq!(v.len(), 3, "{name} {size}:\n{text}");
        }
    }
}

#[test]
fn json_lines_plot_as_svg_and_png() {
    let _g = serial();
    let json = run_bin(bin("osu_put_latency"), &["--json", "--reference"]);
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), 7, "{json}");
    for l in &lines {
        assert!(l.starts_with("{\"benchmark\":\"osu_put_latency\""), "{l}");
        assert!(
            l.contains("\"latency_us\":") && l.contains("\"reference_us\":"),
            "{l}"
        );
    }
    let input = scratch("run.json");
    std::fs::write(&input, &json).unwrap();
    let stem = scratch("plot");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rma-plot"));
    cmd.arg("-o").arg(&stem).arg(&input);
    let out = run_with_deadline(cmd);
    assert!(out.status.success(), "{out:?}");
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let svg_text = std::fs::read_to_string(&svg).expect("an svg");
    let png_bytes = std::fs::read(&png).expect("a png");
    for p in [&input, &svg, &png] {
        let _ = std::fs::remove_file(p);
    }
    assert!(svg_text.contains("<svg") && svg_text.contains("Latency (us)"));
    assert!(svg_text.contains("osu_put_latency shm/allocate/flush"));
    assert!(png_bytes.starts_with(b"\x89PNG"), "not a PNG");
}

fn by_hand(exe: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_remove("RMA_RUN_SOCKET")
        .env_remove("RMA_BOOTSTRAP")
        .env_remove("PMI_FD")
        .env_remove("PMI_RANK")
        .env("RMA_TIMEOUT_MS", "30000");
    run_with_deadline(cmd)
}

#[test]
fn started_by_hand_it_launches_itself_or_explains() {
    let _g = serial();
    let b = bin("osu_get_latency");
    let out = scratch("self");
    let o = by_hand(
        b.exe,
        &[
            "-m",
            "1:8",
            "-i",
            "20",
            "-x",
            "2",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(parse_osu(&text).rows.len(), 4, "{text}");

    let o = by_hand(b.exe, &["--no-launch", "-m", "1:8"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("needs 2 processes: run it under rma-run -n 2"),
        "{err}"
    );

    // A bad command line is a usage error: exit 2, as getopt's tools do.
    for bad in [
        &["-s", "sometimes"][..],
        &["--bogus"],
        &["-m"],
        &["extra"],
        &["--json=1"],
    ] {
        let o = by_hand(b.exe, bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("osu_get_latency: ") && err.contains("Usage: "),
            "{bad:?}: {err}"
        );
        assert!(o.stdout.is_empty() && !err.contains("panicked"), "{o:?}");
    }
    let o = by_hand(b.exe, &["--help"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("--reference"));
}

/// `RMA_LOG`: rma's spans on stderr, each line naming its rank, while stdout stays OSU's
/// table; unset, stderr stays empty; a bad filter is a clear error; a closed stderr loses
/// the lines but not the run.
#[test]
fn rma_log_writes_spans_to_stderr_only() {
    let _g = serial();
    let b = bin("osu_put_latency");
    let args = ["-s", "fence", "-m", "1:4", "-i", "5", "-x", "1"];
    let with_log = |value: Option<&str>, stderr: Stdio| {
        let mut cmd = Command::new(b.exe);
        cmd.args(args)
            .env_remove("RMA_RUN_SOCKET")
            .env_remove("RMA_BOOTSTRAP")
            .env_remove("PMI_FD")
            .env_remove("PMI_RANK")
            .env_remove("RMA_LOG")
            .env("RMA_TIMEOUT_MS", "30000")
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(v) = value {
            cmd.env("RMA_LOG", v);
        }
        cmd
    };
    let o = drained_with_deadline(with_log(Some("rma_core=trace"), Stdio::piped()));
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{o:?}");
    let t = parse_osu(&out);
    assert_eq!(t.rows.len(), 3, "{out}");
    assert!(!out.contains("rma_sync") && !out.contains("DEBUG"), "{out}");
    for rank in ["0", "1"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("[rank {rank} pid "))
                    && l.contains("rma_sync")
                    && l.contains("fence")),
            "no fence span of rank {rank} on stderr:\n{err}"
        );
    }
    // Passive target too: the lock, each flush and the unlock of rank 0's epoch.
    let mut passive = with_log(Some("rma_core=debug"), Stdio::piped());
    passive.args(["-s", "flush"]);
    let o = drained_with_deadline(passive);
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    for call in ["lock", "flush", "unlock"] {
        assert!(
            err.lines().any(|l| l.starts_with("[rank 0 pid ")
                && l.contains("rma_sync")
                && l.contains(&format!("call=\"{call}\""))),
            "no {call} span of rank 0 on stderr:\n{err}"
        );
    }

    let o = run_with_deadline(with_log(None, Stdio::piped()));
    assert!(o.status.success(), "{o:?}");
    assert_eq!(parse_osu(&String::from_utf8_lossy(&o.stdout)).rows.len(), 3);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    for bad in ["rma_core=loud", "rma_core=debug,=info"] {
        let o = run_with_deadline(with_log(Some(bad), Stdio::piped()));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.starts_with("osu_put_latency: RMA_LOG=") && err.contains("is not a filter"),
            "{bad}: {err}"
        );
        assert!(
            !err.contains("panicked") && o.stdout.is_empty(),
            "{bad}: {o:?}"
        );
    }

    // Logs into a pipe nobody reads (`2>&1 | head`): the run goes on.
    let mut cmd = with_log(Some("rma_core=trace"), Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    drop(child.stderr.take());
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        assert!(
            start.elapsed() < DEADLINE,
            "still running after {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().expect("output");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(parse_osu(&String::from_utf8_lossy(&o.stdout)).rows.len(), 3);
}

#[test]
fn a_job_of_three_is_refused() {
    let _g = serial();
    let mut l = Launch::new(
        3,
        bin("osu_put_latency").exe,
        vec!["-m".into(), "1:8".into()],
    );
    l.timeout = Some(DEADLINE);
    let out = launch(&l).expect("launch");
    assert!(!out.success() && !out.timed_out, "{out:?}");
}

#[test]
fn simulated_backends_run_in_one_process() {
    let _g = serial();
    for backend in ["sim-am", "sim-rdma"] {
        for (name, max) in [
            ("osu_put_latency", "1:64"),
            ("osu_acc_latency", "1:64"),
            ("osu_cas_latency", "1:64"),
            ("osu_get_bw", "1:1024"),
        ] {
            let out = scratch("sim");
            let o = by_hand(
                bin(name).exe,
                &[
                    "-b",
                    backend,
                    "-m",
                    max,
                    "-i",
                    "20",
                    "-x",
                    "2",
                    "--reference",
                    "-o",
                    out.to_str().unwrap(),
                ],
            );
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let _ = std::fs::remove_file(&out);
            assert!(o.status.success(), "{name} -b {backend}: {o:?}");
            let t = parse_osu(&text);
            assert!(t.rows.iter().all(|r| r.1.len() == 3), "{text}");
        }
    }
}

#[test]
fn sizes_beyond_an_active_message_go_in_pieces() {
    let _g = serial();
    let b = bin("osu_put_latency");
    // Dynamic windows go by active messages, and the engine splits an op larger than one
    // (since #25): an explicit 1 MiB runs...
    let o = by_hand(
        b.exe,
        &[
            "-w",
            "dynamic",
            "-m",
            "1048576:1048576",
            "-i",
            "3",
            "-x",
            "1",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let sizes: Vec<usize> = parse_osu(&String::from_utf8_lossy(&o.stdout))
        .rows
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(sizes, vec![1 << 20], "{o:?}");
    // ...and a defaulted range runs to OSU's largest size.
    let out = scratch("cut");
    let o = by_hand(
        b.exe,
        &[
            "-w",
            "dynamic",
            "-m",
            "65536:",
            "-i",
            "3",
            "-x",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(Path::new(&out));
    assert!(o.status.success(), "{o:?}");
    let sizes: Vec<usize> = parse_osu(&text).rows.iter().map(|r| r.0).collect();
    assert_eq!(
        sizes,
        vec![
            1 << 16,
            1 << 17,
            1 << 18,
            1 << 19,
            1 << 20,
            1 << 21,
            1 << 22
        ],
        "{text}"
    );
}

/// Under MPICH's mpiexec (PMI-1) too, when it is installed (CI requires it through
/// `RMA_REQUIRE_MPIEXEC`): every binary, rank 0's table read as OSU's.
#[test]
fn every_binary_runs_under_mpiexec() {
    let has = Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_ok();
    if !has {
        assert!(
            std::env::var_os("RMA_REQUIRE_MPIEXEC").is_none(),
            "mpiexec.hydra is required"
        );
        eprintln!("mpiexec.hydra not installed: the Hydra runs are not done here");
        return;
    }
    let _g = serial();
    for b in &BINS {
        let out = scratch("hydra");
        let max = if b.bandwidth { "1:4096" } else { "1:64" };
        let mut cmd = Command::new("mpiexec.hydra");
        cmd.args(["-n", "2", b.exe, "-m", max, "-i", "20", "-x", "2", "-o"])
            .arg(&out);
        let o = run_with_deadline(cmd);
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        assert!(
            o.status.success(),
            "{} under mpiexec: {}",
            b.name,
            String::from_utf8_lossy(&o.stderr)
        );
        let t = parse_osu(&text);
        assert!(t.header[0].starts_with("# OSU MPI"), "{}: {text}", b.name);
        assert!(!t.rows.is_empty());
    }
}

/// `-b ofi:tcp`: the same binary over rma's libfabric backend (tcp;ofi_rxm).
#[cfg(feature = "ofi")]
#[test]
fn put_and_get_latency_over_ofi_tcp() {
    let _g = serial();
    for b in BINS
        .iter()
        .filter(|b| b.name == "osu_put_latency" || b.name == "osu_get_latency")
    {
        let text = run_bin(b, &["-b", "ofi:tcp"]);
        let t = parse_osu(&text);
        assert!(!t.rows.is_empty(), "{}: {text}", b.name);
    }
}

/// `-b ofi --reference`: the bare libfabric pattern on the same provider in the same run.
#[cfg(feature = "ofi")]
#[test]
fn ofi_reference_is_bare_libfabric() {
    let _g = serial();
    for name in ["osu_put_latency", "osu_fop_latency", "osu_get_bw"] {
        let text = run_bin(bin(name), &["-b", "ofi:tcp", "--reference", "-m", "1:64"]);
        let t = parse_osu(&text);
        assert!(
            t.header
                .iter()
                .any(|h| h.starts_with("# Reference: bare libfabric on tcp;ofi_rxm")),
            "{name}:\n{text}"
        );
        for (size, v) in &t.rows {
            assert_eq!(v.len(), 3, "{name} {size}:\n{text}");
            assert!(v[1] > 0.0, "{name} {size}: the reference ran:\n{text}");
        }
    }
    // A lock per op: the reference is a message and its answer.
    let text = run_bin(
        bin("osu_put_latency"),
        &["-b", "ofi:tcp", "--reference", "-s", "lock", "-m", "1:64"],
    );
    let t = parse_osu(&text);
    assert!(
        t.header
            .iter()
            .any(|h| h.contains("a message carrying the data and the target's answer")),
        "{text}"
    );
    assert!(
        t.rows.iter().all(|(_, v)| v.len() == 3 && v[1] > 0.0),
        "{text}"
    );
}

/// `halo` on a ring of 2 and a 2 x 2 torus of 4 (four halos a rank, each neighbour
/// twice): every method's last halos, from every direction, are checked by the binary,
/// which fails on a stale one.
#[test]
fn halo_exchanges_check_every_halo_in_one_and_two_dimensions() {
    let _g = serial();
    for (ranks, dims) in [(2, "1"), (4, "2")] {
        let mut l = Launch::new(
            ranks,
            env!("CARGO_BIN_EXE_halo"),
            vec!["20".into(), "--dims".into(), dims.into()],
        );
        l.timeout = Some(DEADLINE);
        l.grace = Duration::from_secs(10);
        l.env.push(("RMA_TIMEOUT_MS".into(), "30000".into()));
        let o = launch(&l).expect("launch");
        assert!(o.success(), "halo on {ranks} ranks, --dims {dims}: {o:?}");
    }
    let o = by_hand(env!("CARGO_BIN_EXE_halo"), &["--dims", "3"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("1 or 2"),
        "{o:?}"
    );
}
