//! librma-mpi from C: the C tests of `tests/c` compiled with the MPI compiler wrapper
//! `MPICC` names (the MPI this build of librma-mpi is for: MPICH's ABI, Open MPI's, or
//! the MPI-5 standard ABI with MPICH 5's `mpicc_abi`), run on 2 and 4 ranks under that
//! MPI's launcher, with librma-mpi preloaded (`LD_PRELOAD`) and linked before libmpi
//! (`-lrma_mpi`). Each program checks that MPI_Put is librma-mpi's, checks every result
//! exactly and prints " No Errors"; each run has a deadline. The Fortran program of
//! `tests/fortran` the same way, compiled three times (`mpif.h`, `use mpi`,
//! `use mpi_f08`) with the MPI's Fortran wrapper.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mpicc() -> String {
    std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into())
}

/// Whether `MPICC` is Open MPI's wrapper (else MPICH's).
fn open_mpi() -> bool {
    let out = Command::new(mpicc()).arg("-showme:version").output();
    out.is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
}

/// Whether `MPICC` builds for the MPI-5 standard ABI (`mpicc_abi`: `-DMPI_ABI`, which
/// makes MPICH's mpi.h the standard mpi_abi.h, and libmpi_abi).
fn standard_abi() -> bool {
    let out = Command::new(mpicc()).arg("-show").output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("-DMPI_ABI"))
}

/// The MPI `MPICC` builds for, for messages.
fn which_mpi() -> &'static str {
    if open_mpi() {
        "Open MPI"
    } else if standard_abi() {
        "the MPI-5 ABI (MPICH)"
    } else {
        "MPICH"
    }
}

/// MPICH's launcher: the `mpiexec` beside a wrapper named by its path (a venv's MPICH),
/// else Debian's `mpiexec.mpich`.
fn mpich_launcher() -> PathBuf {
    let cc = mpicc();
    if cc.contains('/') {
        if let Some(beside) = Path::new(&cc).parent().map(|d| d.join("mpiexec")) {
            if beside.exists() {
                return beside;
            }
        }
    }
    PathBuf::from("mpiexec.mpich")
}

/// The directory of librma_mpi.so: this test's own (target/<profile>/deps), where cargo
/// builds the library for the test (the crate is an rlib too for that; cargo copies the
/// .so up to target/<profile> only on `cargo build`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe.parent().expect("deps dir").to_path_buf();
    assert!(
        dir.join("librma_mpi.so").exists(),
        "librma_mpi.so not built in {}",
        dir.display()
    );
    dir
}

/// The MPI's Fortran wrapper beside `MPICC` (`mpicc.mpich` gives `mpif90.mpich`), if
/// there is one.
fn mpif90() -> Option<String> {
    let cc = mpicc();
    let (dir, name) = match cc.rsplit_once('/') {
        Some((dir, name)) => (format!("{dir}/"), name.to_string()),
        None => (String::new(), cc.clone()),
    };
    let fc = format!("{dir}{}", name.replacen("mpicc", "mpif90", 1));
    Command::new(&fc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(fc)
}

fn compile(source: &str, linked: bool) -> PathBuf {
    compile_with(source, linked, &[])
}

/// As [`compile`], with more arguments for the compiler (`-D` flags); the executable's
/// name carries them.
fn compile_with(source: &str, linked: bool, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(source);
    let tag = if open_mpi() {
        "ompi"
    } else if standard_abi() {
        "abi"
    } else {
        "mpich"
    };
    let mode = if linked { "linked" } else { "plain" };
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{}-{tag}-{mode}{}",
        source.trim_end_matches(".c"),
        flags.concat()
    ));
    let mut cmd = Command::new(mpicc());
    cmd.args(["-O1", "-Wall", "-Wno-stringop-overflow", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!(
            "-I{}",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("include")
                .display()
        ))
        .args(flags);
    if linked {
        let dir = lib_dir();
        cmd.arg(format!("-L{}", dir.display()))
            .arg("-lrma_mpi")
            .arg(format!("-Wl,-rpath,{}", dir.display()));
    }
    let out = cmd.output().expect("run MPICC");
    assert!(
        out.status.success(),
        "{} {source}: {}",
        mpicc(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `cmd`, killing it past `deadline`.
fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the launcher");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {deadline:?}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn launch(exe: &Path, ranks: usize, preload: bool) -> Output {
    launch_with(exe, ranks, preload, &[])
}

/// [`launch`] with variables for the ranks (`env`: name, value).
fn launch_with(exe: &Path, ranks: usize, preload: bool, env: &[(&str, &str)]) -> Output {
    let lib = lib_dir().join("librma_mpi.so");
    let mut cmd;
    if open_mpi() {
        cmd = Command::new("mpirun.openmpi");
        cmd.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ]);
        if preload {
            cmd.arg("-x").arg(format!("LD_PRELOAD={}", lib.display()));
        }
    } else {
        cmd = Command::new(mpich_launcher());
        if preload {
            cmd.env("LD_PRELOAD", &lib);
        }
    }
    // The program checks that MPI_Put is this very library's.
    cmd.arg("-n")
        .arg(ranks.to_string())
        .arg(exe)
        .arg("rma")
        .arg(&lib);
    // rma's own launcher variables of an enclosing job must not reach the ranks, nor
    // cargo's library path (it holds target/<profile>, where an older librma_mpi.so
    // copied there by `cargo build` would win over the linked one's run path).
    for var in [
        "RMA_RUN_SOCKET",
        "PMI_FD",
        "RMA_BOOTSTRAP",
        "LD_LIBRARY_PATH",
    ] {
        cmd.env_remove(var);
    }
    // (Open MPI's launcher passes only what -x names.)
    for (name, value) in env {
        cmd.env(name, value);
        if open_mpi() {
            cmd.arg("-x").arg(name);
        }
    }
    run_with_deadline(cmd, Duration::from_secs(180))
}

fn passes(source: &str) {
    passes_with(source, &[]);
}

/// [`passes`] with variables for the ranks (`env`: name, value).
fn passes_with(source: &str, env: &[(&str, &str)]) {
    let which = which_mpi();
    for linked in [false, true] {
        let exe = compile(source, linked);
        for ranks in [2, 4] {
            let out = launch_with(&exe, ranks, !linked, env);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let how = if linked { "-lrma_mpi" } else { "LD_PRELOAD" };
            assert!(
                out.status.success() && stdout.contains(" No Errors"),
                "{source} under {which} on {ranks} ranks with {how} {env:?}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // onesided.c says which standard ABI it ran on, when built for one.
            if standard_abi() && source == "onesided.c" {
                assert!(
                    stdout.contains("MPI ABI 1."),
                    "{source}: no ABI version: {stdout}"
                );
            }
        }
    }
}

#[test]
fn every_call_flavor_and_sync_mode_gives_exact_results() {
    passes("onesided.c");
}

#[test]
fn bad_input_returns_the_error_class_mpi_prescribes() {
    passes("errors.c");
}

/// The same programs with rma over libfabric's tcp provider (`RMA_BACKEND=ofi`): every
/// window's operations across the network path (native RDMA where the provider has it,
/// active messages otherwise), not shared memory. Needs librma-mpi built with the `ofi`
/// feature (without it rma does not start and every call fails, so the test cannot pass
/// on shared memory by mistake).
#[cfg(feature = "ofi")]
#[test]
fn over_libfabric_tcp_every_call_gives_exact_results() {
    let ofi = [("RMA_BACKEND", "ofi"), ("RMA_OFI_PROVIDER", "tcp")];
    for source in ["onesided.c", "errors.c"] {
        passes_with(source, &ofi);
    }
    // Progress in the application's MPI_Barrier: with rma's progress agent off, the
    // target's side of rank 0's large gets and puts is served from the barrier alone.
    let exe = compile("barrier_progress.c", false);
    let no_agent = [
        ofi[0],
        ofi[1],
        ("RMA_ASYNC_PROGRESS", "0"),
        ("RMA_TIMEOUT_MS", "20000"),
    ];
    for ranks in [2, 3] {
        let out = launch_with(&exe, ranks, true, &no_agent);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(" No Errors"),
            "barrier_progress.c over libfabric tcp on {ranks} ranks: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Notified access (issue #28) over the network: each notified op an active message
    // the target counts, or a put and its count behind it.
    let exe = compile("notify.c", true);
    for ranks in [2, 4] {
        let out = launch_with(&exe, ranks, false, &ofi);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(" No Errors"),
            "notify.c over libfabric tcp on {ranks} ranks: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A fatal error on every rank at once (MPI_ERRORS_ARE_FATAL): each rank's message is
/// one whole line on the job's stderr, none lost to another rank's abort, and the job
/// fails.
#[test]
fn fatal_errors_of_every_rank_say_so_in_whole_lines() {
    let which = which_mpi();
    let exe = compile("fatal.c", false);
    let ranks = 4;
    let bad = ranks + 5;
    for round in 0..3 {
        let out = launch(&exe, ranks, true);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "fatal.c under {which} succeeded: {stderr}"
        );
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("librma-mpi") || l.contains("MPI_Put on rank"))
            .collect();
        for rank in 0..ranks {
            let whole = format!(
                "librma-mpi: MPI_Put on rank {rank}: target rank {bad} is outside the \
                 window's group of {ranks} (MPI error class "
            );
            let n = said
                .iter()
                .filter(|l| l.starts_with(&whole) && l.ends_with("MPI_ERRORS_ARE_FATAL)"))
                .count();
            assert_eq!(
                n, 1,
                "round {round} under {which}: rank {rank}'s message, whole, once: {stderr}"
            );
        }
        assert_eq!(
            said.len(),
            ranks,
            "round {round} under {which}: only whole messages: {stderr}"
        );
    }
}

/// Fortran programs through each of the MPI's three Fortran interfaces reach
/// librma-mpi's windows (their handles are librma-mpi's: the program checks) and get
/// exact results, preloaded and linked. The MPIs' Fortran layers call C at different
/// depths (see `src/fortran.rs`). PyPI's MPI wheels (MPICH 5 with both its ABIs, Open
/// MPI 5) have no Fortran at all; with `RMA_REQUIRE_FORTRAN=1` (.ci/run, for Debian's
/// MPICH and Open MPI) a missing Fortran wrapper fails the test.
#[test]
fn fortran_programs_through_mpif_h_use_mpi_and_use_mpi_f08() {
    let Some(fc) = mpif90() else {
        assert!(
            std::env::var("RMA_REQUIRE_FORTRAN").as_deref() != Ok("1"),
            "no Fortran wrapper beside {} (gfortran and the MPI's Fortran libraries)",
            mpicc()
        );
        eprintln!("{}: no Fortran in this MPI; nothing to test", which_mpi());
        return;
    };
    let which = which_mpi();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fortran/onesided.F90");
    let tag = if open_mpi() { "ompi" } else { "mpich" };
    for interface in ["MPIF_H", "USE_MPI", "F08"] {
        for linked in [false, true] {
            let exe = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fortran-{tag}-{interface}-{linked}"));
            let mut cmd = Command::new(&fc);
            cmd.args(["-cpp", "-O1", "-Wall"])
                .arg(format!("-D{interface}"))
                .arg("-o")
                .arg(&exe)
                .arg(&src)
                .current_dir(env!("CARGO_TARGET_TMPDIR"));
            if linked {
                // A Fortran program calls the MPI's Fortran library, never librma-mpi
                // directly: with the toolchain's --as-needed the link would drop it.
                let dir = lib_dir();
                cmd.arg(format!("-L{}", dir.display()))
                    .args(["-Wl,--no-as-needed", "-lrma_mpi", "-Wl,--as-needed"])
                    .arg(format!("-Wl,-rpath,{}", dir.display()));
            }
            let out = cmd.output().expect("run the Fortran wrapper");
            assert!(
                out.status.success(),
                "{fc} -D{interface}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            for ranks in [2, 4] {
                let out = launch(&exe, ranks, !linked);
                let stdout = String::from_utf8_lossy(&out.stdout);
                let how = if linked { "-lrma_mpi" } else { "LD_PRELOAD" };
                assert!(
                    out.status.success() && stdout.contains(" No Errors"),
                    "Fortran {interface} under {which} on {ranks} ranks with {how}: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// Notified access (issue #28), from a program written against the MPI Forum draft's
/// names and the same one against Intel MPI's MPIX_ names: they exist in no MPI, so the
/// programs link librma-mpi (-lrma_mpi) and include its rma_mpi_notify.h.
#[test]
fn notified_access_under_both_spellings() {
    let which = which_mpi();
    for flags in [&[][..], &["-DINTEL_NAMES"][..]] {
        let exe = compile_with("notify.c", true, flags);
        for ranks in [2, 4] {
            let out = launch(&exe, ranks, false);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(" No Errors"),
                "notify.c {flags:?} under {which} on {ranks} ranks: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Windows over processes of more than one MPI_COMM_WORLD (issue #29): the job's ranks
/// spawn two more, merge with them and make windows over the result, which librma-mpi
/// serves with a World of the window's own. Debian's MPICH 4.0.2 (over UCX) cannot spawn
/// at all (MPI_Comm_spawn fails without librma-mpi too): the program says so, and only
/// that MPI may.
#[test]
fn windows_over_spawned_processes_give_exact_results() {
    let which = which_mpi();
    let spawn_less = !open_mpi() && mpich_launcher() == Path::new("mpiexec.mpich");
    for linked in [false, true] {
        let exe = compile("spawn.c", linked);
        for ranks in [2, 3] {
            let out = launch(&exe, ranks, !linked);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let how = if linked { "-lrma_mpi" } else { "LD_PRELOAD" };
            if spawn_less && out.status.success() && stdout.contains(" Spawn unavailable") {
                eprintln!("spawn.c: {which} ({}) cannot spawn; skipped", mpicc());
                return;
            }
            assert!(
                out.status.success() && stdout.contains(" No Errors"),
                "spawn.c under {which} on {ranks} ranks with {how}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
