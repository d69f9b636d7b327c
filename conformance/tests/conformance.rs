//! The conformance suite across real processes on a real backend, each case started by
//! the launcher (`rma-run`'s engine by default) with a deadline, and checked by the
//! ranks' exit codes. The backend comes from `RMA_BACKEND` (default shm).

use std::path::Path;
use std::time::{Duration, Instant};

use rma::launcher::{launch, Launch, Outcome};

fn run(ranks: usize, args: &[&str]) -> Outcome {
    let mut l = Launch::new(
        ranks,
        env!("CARGO_BIN_EXE_rma-conformance"),
        args.iter().map(|s| s.to_string()).collect(),
    );
    l.timeout = Some(Duration::from_secs(120));
    l.grace = Duration::from_secs(15);
    l.env.push(("RMA_TIMEOUT_MS".into(), "30000".into()));
    launch(&l).expect("launch")
}

fn ok(ranks: usize, args: &[&str]) {
    let out = run(ranks, args);
    assert!(out.success(), "{args:?} on {ranks} ranks: {out:?}");
    assert_no_segments(&out.job);
}

fn assert_no_segments(job: &str) {
    let prefix = format!("rma-{job}-");
    let left: Vec<_> = std::fs::read_dir(Path::new("/dev/shm"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .into_iter()
        .collect();
    assert!(
        left.iter().all(|n| *n == 0),
        "segments of job {job} left in /dev/shm"
    );
}

#[test]
fn every_op_every_sync_mode_every_window_kind() {
    for kind in ["allocate", "create", "dynamic", "shared"] {
        for ranks in [2, 4] {
            ok(ranks, &["ops", kind]);
        }
    }
}

#[test]
fn progress_cases_of_seed_003() {
    ok(2, &["progress"]);
    ok(3, &["progress"]);
}

#[test]
fn fence_completion_of_seed_001() {
    ok(3, &["fence_then_lock"]);
}

#[test]
fn stress_fetch_and_op_counts_every_increment() {
    ok(4, &["stress_fetch_and_op"]);
}

#[test]
fn stress_exclusive_lock_counter() {
    ok(4, &["stress_lock_counter"]);
}

#[test]
fn stress_overlapping_accumulates() {
    ok(4, &["stress_overlap"]);
}

#[test]
fn litmus_message_passing_per_sync_mode() {
    for mode in ["fence", "pscw", "lock", "lock_all"] {
        ok(2, &["litmus", mode]);
    }
}

#[test]
fn bad_input_gets_typed_errors() {
    ok(2, &["bad_input"]);
    ok(3, &["bad_input"]);
}

#[test]
fn passive_target_needs_no_target_progress() {
    ok(2, &["passive_target"]);
}

#[test]
fn segments_are_unlinked_once_mapped() {
    ok(2, &["no_segments_left"]);
}

#[test]
fn a_killed_peer_fails_the_survivors_within_10_seconds() {
    let start = Instant::now();
    let out = run(3, &["dead_peer"]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.statuses[1].signal(), Some(9), "{out:?}");
    assert_eq!(
        out.statuses[0].code(),
        Some(3),
        "rank 0 saw the dead peer: {out:?}"
    );
    assert_eq!(
        out.statuses[2].code(),
        Some(3),
        "rank 2 saw the dead peer: {out:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "survivors ended by themselves"
    );
    assert_no_segments(&out.job);
}
