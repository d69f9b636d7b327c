//! `rma-conformance CASE [KIND]`: one case of the conformance suite, run by every rank of
//! a job (`rma-run -n N rma-conformance CASE`). Exits 0 when the case holds, 3 when a
//! case expecting a dead peer saw one, non-zero otherwise. Backend and launcher come
//! from the environment (`RMA_BACKEND`, the launcher's variables), so the same suite
//! runs unchanged on every backend. `RMA_LOG` logs rma's spans and events on stderr
//! (`rma::logging`).

/// `eprintln!` in one `write(2)`: ranks share the launcher's stderr, and the standard
/// macro writes each piece of its format separately, so lines of two ranks interleave
/// mid-line (a checker counting "as expected" lines then counts one where there were two).
/// A line under PIPE_BUF bytes written at once reaches a pipe whole.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

mod comm;
mod failure;
mod locs;
mod notify;
mod progress;

use std::time::{Duration, Instant};

use rma::{
    AccOp, Assert, Comm, Error, ErrorKind, LockType, PeerError, Rank, Request, Result, UsageError,
    Window, World,
};

const N: usize = 16;

fn main() {
    rma::logging::init_or_exit("rma-conformance");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let case = args.first().map(String::as_str).unwrap_or("");
    let kind = args.get(1).map(String::as_str).unwrap_or("allocate");
    if case == "peer_never_arrives" && std::env::var("RMA_RUN_RANK").as_deref() == Ok("1") {
        // This rank never joins: its peers' init must fail by itself, with a clear error.
        std::process::exit(0);
    }
    failure::before_init(case);
    let world = match World::init() {
        Ok(w) => w,
        Err(e) => {
            // Debug: the message and its causes (what `fn main() -> Result` prints).
            say!("init failed: {e:?}");
            let dead = victim(case).is_some_and(|v| e.peer() == Some(&PeerError::Dead { rank: v }));
            std::process::exit(if dead && case == "kill_trial" { 3 } else { 1 });
        }
    };
    let out = match case {
        "ops" if kind == "dynamic" => ops(&world.comm(), kind).and_then(|()| dynamic_paths(&world)),
        "ops" => ops(&world.comm(), kind),
        "comm_ops" => comm::comm_ops(&world, kind),
        "collectives" => comm::collectives(&world),
        "node_collectives" => comm::node_collectives(&world),
        "subset_epochs" => comm::subset_epochs(&world),
        "overlapping" => comm::overlapping(&world),
        "comm_errors" => comm::comm_errors(&world),
        "spawn" => comm::spawn_parent(&world, kind == "multiple"),
        "spawn_child" => comm::spawn_child(&world, kind),
        "spawn_refused" => comm::spawn_refused(&world),
        "progress" => progress(&world),
        "fence_then_lock" => fence_then_lock(&world),
        "stress_fetch_and_op" => stress_fetch_and_op(&world),
        "stress_compare_and_swap" => stress_compare_and_swap(&world),
        "stress_lock_counter" => stress_lock_counter(&world),
        "threads_lock_counter" => threads_lock_counter(&world),
        "stress_overlap" => stress_overlap(&world),
        "litmus" => litmus(&world, kind),
        "notify" => notify::notify(&world),
        "locs" => locs::locs(&world),
        "bad_input" => bad_input(&world),
        "dead_peer" => dead_peer(&world),
        "passive_target" => passive_target(&world),
        "local_guard" => local_guard(&world),
        "no_segments_left" => no_segments_left(&world),
        "paths" => paths(&world),
        "kill_trial" => failure::kill_trial(&world),
        "creation_fails_on_one_rank" => failure::creation_fails_on_one_rank(&world),
        "mismatched_creation" => failure::mismatched_creation(&world),
        "departs_before_collective" => failure::departs_before_collective(&world).map(drop),
        "leaves_between_collectives" => failure::leaves_between_collectives(&world, kind),
        "fence_against_free" => failure::fence_against_free(&world),
        "timeout_names_the_rank" => failure::timeout_names_the_rank(&world),
        "window_limit" => failure::window_limit(&world),
        "dropped_lock_holder" => failure::dropped_lock_holder(&world),
        "large_op_under_lock" => failure::large_op_under_lock(&world),
        "lock_soak" => failure::lock_soak(&world),
        "large_ops" => failure::large_ops(&world),
        "launcher_values" => failure::launcher_values(&world),
        "target_elsewhere" => progress::target_elsewhere(&world, kind),
        _ => {
            say!("unknown case {case:?}");
            std::process::exit(2);
        }
    };
    let rank = world.rank();
    // Leave the launcher properly (PMI finalize): Hydra kills a job one of whose
    // processes exits without it.
    drop(world);
    match out {
        Ok(()) => std::process::exit(0),
        // Exit 3 only for the death of the rank the case kills: a survivor naming anyone
        // else (a survivor that left after seeing the death, say) names the messenger.
        Err(e) if victim(case).is_some_and(|v| e.peer() == Some(&PeerError::Dead { rank: v })) => {
            say!("rank {rank}: the killed peer is dead, as expected: {e}");
            std::process::exit(3);
        }
        Err(e) => {
            // With its causes (what the system or the provider said beneath it).
            say!("rank {rank}: case {case} failed: {e:?}");
            std::process::exit(1);
        }
    }
}

/// The rank the case kills (`dead_peer`: rank 1; `kill_trial`: the last rank), whose
/// death every survivor must name.
fn victim(case: &str) -> Option<Rank> {
    let size = std::env::var("RMA_RUN_SIZE")
        .or_else(|_| std::env::var("PMI_SIZE"))
        .or_else(|_| std::env::var("SLURM_NTASKS"))
        .or_else(|_| std::env::var("OMPI_COMM_WORLD_SIZE"))
        .ok()
        .and_then(|v| v.parse::<Rank>().ok());
    match case {
        "dead_peer" => Some(1),
        "kill_trial" => size.map(|s| s - 1),
        _ => None,
    }
}

/// `n` repetitions, divided by `RMA_CONFORMANCE_DIVISOR` (default 1): slow platforms
/// (ci/verbs.sh runs the suite in an emulated VM, tens of times slower) run fewer.
fn reps(n: u64) -> u64 {
    let d = std::env::var("RMA_CONFORMANCE_DIVISOR")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    (n / d).max(1)
}

fn check(cond: bool, what: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(rma::TransportError::Failed(format!("check failed: {what}")).into())
    }
}

// ----- every op under every sync mode -------------------------------------------------

struct Fetched {
    get_acc: Request<Vec<u64>>,
    fop: Request<u64>,
    cas: Request<u64>,
    get: Request<Vec<u64>>,
}

fn initial(me: Rank) -> Vec<u64> {
    let m = me as u64;
    let mut v = vec![0u64; N];
    v[4..8].copy_from_slice(&[100, 100, 100, 100]);
    v[8..10].copy_from_slice(&[7, 8]);
    v[10] = 1000;
    v[12..16].copy_from_slice(&[m * 10, m * 10 + 1, m * 10 + 2, m * 10 + 3]);
    v
}

/// Window addressing: element displacement (static windows) or attached address.
fn issue(win: &Window<u64>, base: u64, me: Rank, right: Rank) -> Result<Fetched> {
    let m = me as u64;
    let d = |i: u64| base + i * if base == 0 { 1 } else { 8 };
    win.put(&[m, m + 1, m + 2, m + 3], right, d(0))?;
    win.accumulate(&[1, 2, 3, 4], AccOp::Sum, right, d(4))?;
    Ok(Fetched {
        get_acc: win.get_accumulate(&[10, 10], AccOp::Sum, right, d(8))?,
        fop: win.fetch_and_op(5, AccOp::Sum, right, d(10))?,
        cas: win.compare_and_swap(0, m + 1, right, d(11))?,
        get: win.get(right, d(12), 4)?,
    })
}

fn check_fetched(f: Fetched, right: Rank) -> Result<()> {
    let r = right as u64;
    check(f.get_acc.wait()? == vec![7, 8], "get_accumulate result")?;
    check(f.fop.wait()? == 1000, "fetch_and_op result")?;
    check(f.cas.wait()? == 0, "compare_and_swap result")?;
    check(
        f.get.wait()? == vec![r * 10, r * 10 + 1, r * 10 + 2, r * 10 + 3],
        "get result",
    )
}

fn check_window(v: &[u64], left: Rank) -> Result<()> {
    let l = left as u64;
    check(v[0..4] == [l, l + 1, l + 2, l + 3], "put landed")?;
    check(v[4..8] == [101, 102, 103, 104], "accumulate landed")?;
    check(v[8..10] == [17, 18], "get_accumulate landed")?;
    check(v[10] == 1005, "fetch_and_op landed")?;
    check(v[11] == l + 1, "compare_and_swap landed")
}

/// Which path a dynamic window's ops take. On shared memory alone, a region attached as
/// a `Vec` moves into the backend's memory, and peers' puts, gets and accumulates on it
/// are native (they map it); one attached in place (`attach_memory`, MPI_Win_attach's
/// way) is reached by cross-memory attach for puts and gets, its accumulates going as
/// messages; an address outside the regions is a message the target refuses (at the
/// flush), as a detached region's is. The contents are exact either way.
fn dynamic_paths(world: &World) -> Result<()> {
    let (me, n) = (world.rank(), world.size() as Rank);
    let right = (me + 1) % n;
    let win = world.create_dynamic::<u64>()?;
    let moved = win.attach(vec![0u64; 8])?;
    let spare = win.attach(vec![0u64; 2])?;
    let in_place = win.attach_memory(Box::new(vec![0u64; 4]))?;
    let all = world.comm().allgather(&[moved, spare, in_place])?;
    let theirs = |i: usize| all[3 * right as usize + i];
    world.barrier()?;
    let before = win.stats();
    win.lock_all(Assert::NONE)?;
    for (at, what) in [(theirs(0), "moved"), (theirs(2), "in place")] {
        win.put(&[me as u64 + 1, 2], right, at + 8)?;
        win.accumulate(&[5], AccOp::Sum, right, at + 24)?;
        win.flush(right)?;
        check(
            win.get(right, at, 4)?.wait()? == [0, me as u64 + 1, 2, 5],
            &format!("put, accumulate and get of a region attached {what}"),
        )?;
    }
    // Past the region's end: refused by the target.
    let past = win
        .put(&[1, 2], right, theirs(0) + 56)
        .and_then(|()| win.flush(right));
    check(past.is_err(), "a put past the attached region is an error")?;
    win.unlock_all()?;
    let s = win.stats().since(&before);
    let pure_shared_memory =
        world.route(right) == rma::Route::SharedMemory && world.traffic(right).is_none();
    let env_is = |name: &str, v: &str| std::env::var(name).as_deref() == Ok(v);
    // (RMA_SHM_CMA=1 keeps every region in place, RMA_NATIVE=0 sends every op.)
    if pure_shared_memory && !env_is("RMA_NATIVE", "0") && !env_is("RMA_SHM_CMA", "1") {
        check(
            s.ops_native >= 5 && s.ops_active_message >= 2,
            &format!("ops on the moved region native, in place puts and gets: {s:?}"),
        )?;
    }
    world.barrier()?;
    check(
        win.detach(spare)? == [0, 0],
        "the spare region is untouched",
    )?;
    world.barrier()?;
    win.lock_all(Assert::NONE)?;
    let gone = win
        .put(&[7], right, theirs(1))
        .and_then(|()| win.flush(right));
    check(gone.is_err(), "a put to a detached region is an error")?;
    win.unlock_all()?;
    world.barrier()?;
    let left = (me + n - 1) % n;
    let expected = [0, left as u64 + 1, 2, 5];
    check(
        win.detach(moved)?[..4] == expected,
        "the moved region's contents",
    )?;
    check(
        win.detach(in_place)? == expected,
        "the region in place's contents",
    )?;
    win.free()?;
    Ok(())
}

/// One window of the kind, initialized; returns it, the base displacement, and for
/// dynamic windows the attached address.
fn make(world: &Comm, kind: &str) -> Result<(Window<u64>, u64)> {
    let me = world.rank();
    Ok(match kind {
        "allocate" => {
            let w = world.allocate::<u64>(N)?;
            w.write_local(0, &initial(me))?;
            (w, 0)
        }
        "shared" => {
            let w = world.allocate_shared::<u64>(N)?;
            w.write_local(0, &initial(me))?;
            let (base, len) = w.shared_query((me + 1) % world.size() as Rank)?;
            check(base != 0 && len == N * 8, "shared_query")?;
            // Contiguous by default: each rank's part follows the previous rank's.
            for r in 1..world.size() as Rank {
                check(
                    w.shared_query(r)?.0 == w.shared_query(r - 1)?.0 + N * 8,
                    "contiguous parts",
                )?;
            }
            (w, 0)
        }
        "create" => (world.create_window(initial(me))?, 0),
        "dynamic" => {
            let w = world.create_dynamic::<u64>()?;
            // The region's address in this process; peers learn it by exchange.
            let addr = w.attach(initial(me))?;
            (w, addr)
        }
        other => {
            return Err(rma::TransportError::Failed(format!("unknown window kind {other}")).into())
        }
    })
}

fn snapshot(win: &Window<u64>, kind: &str, base: u64) -> Result<Vec<u64>> {
    if kind == "dynamic" {
        // Read our own region through the window (a self get under a self lock).
        win.lock(LockType::Shared, 0, Assert::NONE).ok();
        let me_get = win.get(0, base, N);
        win.unlock(0).ok();
        let _ = me_get;
    }
    Ok(win.local_to_vec())
}

/// Every op under every sync mode on windows of `kind` over `world` (the World or any
/// communicator: ranks are its own), checked by exact contents and results.
pub(crate) fn ops(world: &Comm, kind: &str) -> Result<()> {
    let (me, n) = (world.rank(), world.size() as Rank);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for mode in [
        "fence",
        "pscw",
        "lock_exclusive",
        "lock_shared",
        "lock_all",
        "lock_all_nocheck",
    ] {
        let (win, base) = make(world, kind)?;
        // Where ops to the right neighbour go: its attached region's address (dynamic
        // windows, as MPI_Get_address gives it), else displacement 0.
        let target = if kind == "dynamic" {
            world.allgather(&[base])?[right as usize]
        } else {
            base
        };
        world.barrier()?;
        if kind == "shared" {
            // Direct load of the neighbour's memory between synchronizations.
            win.lock_all(Assert::NOCHECK)?;
            win.sync()?;
            let (addr, _) = win.shared_query(right)?;
            // SAFETY: `addr` is the start of the right neighbour's N-element part of this
            // shared window, mapped in this process for the window's life; the neighbour
            // wrote it before the barrier and nobody writes it during this read.
            let seen = unsafe { std::ptr::read_volatile((addr as *const u64).add(12)) };
            win.unlock_all()?;
            check(seen == right as u64 * 10, "load through shared_query")?;
            world.barrier()?;
        }
        let f = match mode {
            "fence" => {
                win.fence(Assert::NOPRECEDE)?;
                let f = issue(&win, target, me, right)?;
                win.fence(Assert::NOSUCCEED)?;
                f
            }
            "pscw" => {
                win.post(&[left], Assert::NONE)?;
                win.start(&[right], Assert::NONE)?;
                let f = issue(&win, target, me, right)?;
                win.complete()?;
                win.wait()?;
                f
            }
            "lock_exclusive" | "lock_shared" => {
                let t = if mode == "lock_shared" {
                    LockType::Shared
                } else {
                    LockType::Exclusive
                };
                win.lock(t, right, Assert::NONE)?;
                let f = issue(&win, target, me, right)?;
                win.unlock(right)?;
                f
            }
            _ => {
                win.lock_all(if mode == "lock_all" {
                    Assert::NONE
                } else {
                    Assert::NOCHECK
                })?;
                let f = issue(&win, target, me, right)?;
                win.flush(right)?;
                win.unlock_all()?;
                f
            }
        };
        check_fetched(f, right)?;
        world.barrier()?;
        let v = if kind == "dynamic" {
            let mine = win.detach(base)?;
            win.free()?;
            mine
        } else if kind == "create" {
            win.free()?.unwrap_or_default()
        } else {
            let v = snapshot(&win, kind, base)?;
            win.free()?;
            v
        };
        check_window(&v, left)
            .map_err(|e| rma::TransportError::Failed(format!("{mode} on {kind}: {e}")))?;
    }
    Ok(())
}

// ----- progress (seed 003) and fence completion (seed 001) ----------------------------

fn progress(world: &World) -> Result<()> {
    let win = world.allocate::<u32>(2)?;
    let me = world.rank();
    let peer = if me < 2 { 1 - me } else { me };
    if me < 2 {
        // Symmetric post-start-put-complete-wait.
        win.post(&[peer], Assert::NONE)?;
        win.start(&[peer], Assert::NONE)?;
        win.put(&[me + 5], peer, 0)?;
        win.complete()?;
        win.wait()?;
        check(win.local_to_vec()[0] == peer + 5, "symmetric PSCW")?;
    }
    world.barrier()?;
    // start-put-complete then "send" (a barrier) on rank 0; post, "recv", wait on rank 1.
    if me == 0 {
        win.start(&[1], Assert::NONE)?;
        win.put(&[77], 1, 1)?;
        win.complete()?;
        world.barrier()?;
    } else {
        if me == 1 {
            win.post(&[0], Assert::NONE)?;
        }
        world.barrier()?;
        if me == 1 {
            win.wait()?;
            check(win.local_to_vec()[1] == 77, "complete before wait")?;
        }
    }
    world.barrier()?;
    win.free()?;
    Ok(())
}

fn fence_then_lock(world: &World) -> Result<()> {
    let win = world.allocate::<u64>(2)?;
    win.fence(Assert::NONE)?;
    if world.rank() == 0 {
        win.put(&[1234], 1, 0)?;
    }
    win.fence(Assert::NOSUCCEED)?;
    let last = world.size() as Rank - 1;
    if world.rank() == last {
        win.lock(LockType::Shared, 1, Assert::NOCHECK)?;
        let g = win.get(1, 0, 1)?;
        win.unlock(1)?;
        check(
            g.wait()? == vec![1234],
            "a fence completes its puts at the target",
        )?;
    }
    world.barrier()?;
    win.free()?;
    Ok(())
}

// ----- stress -------------------------------------------------------------------------------

fn stress_fetch_and_op(world: &World) -> Result<()> {
    let win = world.allocate::<u64>(1)?;
    win.lock_all(Assert::NONE)?;
    let mut last = 0;
    // What the window saw when a wait runs out: a stall (nothing moving) reads
    // differently from slowness (counts still growing in the last rounds).
    let win_ref = &win;
    let stalled =
        |round: u64| move |e: &rma::Error| say!("round {round}: {e}; {:?}", win_ref.stats());
    let rounds = reps(100_000);
    for round in 0..rounds {
        let old = win
            .fetch_and_op(1, AccOp::Sum, 0, 0)
            .and_then(|r| r.wait())
            .inspect_err(stalled(round))?;
        check(old >= last, "fetch_and_op results of one origin increase")?;
        last = old;
    }
    win.unlock_all()?;
    world.barrier().inspect_err(stalled(rounds))?;
    if world.rank() == 0 {
        check(
            win.local_to_vec()[0] == rounds * world.size() as u64,
            "every fetch_and_op counted",
        )?;
    }
    win.free()?;
    Ok(())
}

/// Every rank counts to 2,000 on rank 0's word by compare-and-swap alone (read it, swap
/// it for one more, again from what the swap found when another rank came first): a
/// swap that found what it compared landed alone, so the word ends at 2,000 per rank,
/// and each rank's successful swaps found increasing values.
fn stress_compare_and_swap(world: &World) -> Result<()> {
    const PER_RANK: u64 = 2_000;
    let win = world.allocate::<u64>(1)?;
    win.lock_all(Assert::NONE)?;
    let mut seen = win.fetch_and_op(0, AccOp::NoOp, 0, 0)?.wait()?;
    let (mut won, mut last_won, mut lost) = (0u64, None, 0u64);
    while won < PER_RANK {
        let found = win.compare_and_swap(seen, seen + 1, 0, 0)?.wait()?;
        if found == seen {
            check(
                last_won.is_none_or(|l| seen > l),
                "a rank's successful swaps find increasing values",
            )?;
            last_won = Some(seen);
            won += 1;
            seen += 1;
        } else {
            check(found > seen, "the word only grows")?;
            lost += 1;
            seen = found;
        }
    }
    win.unlock_all()?;
    world.barrier()?;
    if world.rank() == 0 {
        let total = win.local_to_vec()[0];
        check(
            total == PER_RANK * world.size() as u64,
            &format!("every swap counted once: {total} ({lost} lost here)"),
        )?;
    }
    win.free()?;
    Ok(())
}

fn stress_lock_counter(world: &World) -> Result<()> {
    let win = world.allocate::<u64>(1)?;
    let n = reps(10_000);
    for _ in 0..n {
        win.lock(LockType::Exclusive, 0, Assert::NONE)?;
        let v = win.get(0, 0, 1)?.wait()?[0];
        win.put(&[v + 1], 0, 0)?;
        win.unlock(0)?;
    }
    world.barrier()?;
    if world.rank() == 0 {
        check(
            win.local_to_vec()[0] == n * world.size() as u64,
            "no increment lost under exclusive locks",
        )?;
    }
    win.free()?;
    Ok(())
}

/// Two threads of every rank share one window, each an exclusive-lock counter of its own
/// at its own target (thread t counts at rank t, element t): the window's state is held
/// by both threads at once (its lock leaves the first thread's bias in the middle of the
/// run), and no increment is lost.
fn threads_lock_counter(world: &World) -> Result<()> {
    const THREADS: u64 = 2;
    let win = world.allocate::<u64>(THREADS as usize)?;
    let n = reps(5_000);
    let size = world.size() as u64;
    let count = |t: u64| -> Result<()> {
        let target = (t % size) as Rank;
        for _ in 0..n {
            win.lock(LockType::Exclusive, target, Assert::NONE)?;
            let v = win.get(target, t, 1)?.wait()?[0];
            win.put(&[v + 1], target, t)?;
            win.unlock(target)?;
        }
        Ok(())
    };
    // Thread 0 is the one that made the window (its state's owner), counting from the
    // start; thread 1 joins while it runs and takes the state over from the bias.
    std::thread::scope(|s| -> Result<()> {
        let second = s.spawn(|| count(1));
        count(0)?;
        second.join().expect("the second thread panicked")
    })?;
    world.barrier()?;
    let v = win.local_to_vec();
    for t in (0..THREADS).filter(|t| t % size == world.rank() as u64) {
        // Every rank's thread t counted here; with more threads than ranks, thread t and
        // t + size share this target, each at its own element.
        check(
            v[t as usize] == n * size,
            "no increment lost with two threads per rank",
        )?;
    }
    win.free()?;
    Ok(())
}

fn stress_overlap(world: &World) -> Result<()> {
    let me = world.rank() as i64;
    let win = world.allocate::<i64>(64)?;
    win.lock_all(Assert::NONE)?;
    for i in 0..2_000i64 {
        // Rank r adds over [r*8, r*8+32): ranges overlap between neighbours.
        let start = (me * 8) as u64;
        win.accumulate(&[1; 32], AccOp::Sum, 0, start)?;
        win.accumulate(&[i * 10 + me], AccOp::Max, 0, 63)?;
    }
    win.unlock_all()?;
    world.barrier()?;
    if me == 0 {
        let v = win.local_to_vec();
        let n = world.size() as i64;
        for (k, x) in v.iter().enumerate().take(63) {
            let covering = (0..n)
                .filter(|r| (r * 8..r * 8 + 32).contains(&(k as i64)))
                .count() as i64;
            check(*x == covering * 2_000, "overlapping sums exact")?;
        }
        check(v[63] == 1_999 * 10 + n - 1, "max exact")?;
    }
    win.free()?;
    Ok(())
}

// ----- message-passing litmus ------------------------------------------------------------

fn litmus(world: &World, mode: &str) -> Result<()> {
    let reps = reps(100_000);
    let me = world.rank();
    // Slot 0: data, slot 1: flag.
    let win = world.allocate::<u64>(2)?;
    world.barrier()?;
    match mode {
        "fence" => {
            win.fence(Assert::NOPRECEDE)?;
            for i in 1..=reps {
                if me == 0 {
                    win.put(&[i], 1, 0)?;
                    win.put(&[i], 1, 1)?;
                }
                win.fence(Assert::NONE)?;
                if me == 1 {
                    let v = win.local_to_vec();
                    check(v[1] != i || v[0] == i, "flag seen without its data (fence)")?;
                    check(v[1] == i, "fence completed the epoch's puts")?;
                }
                win.fence(Assert::NONE)?;
            }
            win.fence(Assert::NOSUCCEED)?;
        }
        "pscw" => {
            for i in 1..=reps {
                if me == 0 {
                    win.start(&[1], Assert::NONE)?;
                    win.put(&[i], 1, 0)?;
                    win.put(&[i], 1, 1)?;
                    win.complete()?;
                } else if me == 1 {
                    win.post(&[0], Assert::NONE)?;
                    win.wait()?;
                    let v = win.local_to_vec();
                    check(
                        v[1] == i && v[0] == i,
                        "wait returned before the epoch's puts",
                    )?;
                }
            }
        }
        "lock" => {
            // Rank 0 writes data then flag under exclusive locks; rank 1 reads flag then
            // data under a lock of its own window: data is never older than the flag.
            for i in 1..=reps {
                if me == 0 {
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                    win.put(&[i], 1, 0)?;
                    win.flush(1)?;
                    win.put(&[i], 1, 1)?;
                    win.unlock(1)?;
                } else if me == 1 {
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                    let v = win.local_to_vec();
                    win.unlock(1)?;
                    check(v[0] >= v[1], "flag seen without its data (lock)")?;
                }
            }
        }
        "lock_all" => {
            win.lock_all(Assert::NONE)?;
            for i in 1..=reps {
                if me == 0 {
                    win.put(&[i], 1, 0)?;
                    win.flush(1)?;
                    win.put(&[i], 1, 1)?;
                    win.flush(1)?;
                } else if me == 1 {
                    let flag = win.get(1, 1, 1)?;
                    win.flush(1)?;
                    let flag = flag.wait()?[0];
                    let data = win.get(1, 0, 1)?;
                    win.flush(1)?;
                    check(
                        data.wait()?[0] >= flag,
                        "flag seen without its data (lock_all/flush)",
                    )?;
                }
            }
            win.unlock_all()?;
        }
        "third_party" => {
            // A flushed put is complete at its target (MPI-4.1 12.5.4), whoever looks
            // next: rank 0 puts round i into a block of rank 1's window, flushes, then
            // raises rank 2's flag; rank 2, once it sees the flag, gets the block's last
            // element from rank 1, which computes and makes a progress pass only every
            // 100 us (run it with RMA_ASYNC_PROGRESS=0, or its agent answers at once and
            // the race is rare). A flush that returned before the data was in place (the
            // block's tail still in rank 1's socket, or not yet sent) lets rank 2's get
            // overtake it on another connection when rank 1 next polls: MPICH 5.0.2 over
            // libfabric tcp reads stale data in most rounds of
            // benches/mpi/flush_litmus.c, the same pattern in C with one element. The
            // block (256 KiB) is past RMA_OFI_ZERO_COPY's 128 KiB: those puts go from
            // the caller's buffer, and a flush must read behind them.
            check(world.size() >= 3, "litmus third_party needs 3 ranks")?;
            const BLOCK: usize = 32 * 1024;
            // A fiftieth of the other modes' rounds: each is a block, two flushes and
            // a get across three processes.
            let reps = (reps / 50).max(1);
            // Rank 1: the block, then its done flag; rank 2: its round flag after it.
            let tp = world.allocate::<u64>(BLOCK + 2)?;
            tp.lock_all(Assert::NONE)?;
            let (flag, done) = (BLOCK as u64, BLOCK as u64 + 1);
            match me {
                0 => {
                    let mut block = vec![0u64; BLOCK];
                    for i in 1..=reps {
                        block.fill(i);
                        tp.put(&block, 1, 0)?;
                        tp.flush(1)?;
                        tp.put(&[i], 2, flag)?;
                        tp.flush(2)?;
                    }
                }
                2 => {
                    let mut stale = 0u64;
                    for i in 1..=reps {
                        loop {
                            let seen = tp.get(2, flag, 1)?;
                            tp.flush(2)?;
                            if seen.wait()?[0] >= i {
                                break;
                            }
                        }
                        let tail = tp.get(1, BLOCK as u64 - 1, 1)?;
                        tp.flush(1)?;
                        if tail.wait()?[0] < i {
                            stale += 1;
                        }
                    }
                    // Rank 1 may stop computing.
                    tp.put(&[1], 1, done)?;
                    tp.flush(1)?;
                    check(
                        stale == 0,
                        &format!("{stale} of {reps} reads older than a flushed put"),
                    )?;
                }
                1 => {
                    while tp.local_to_vec()[done as usize] == 0 {
                        let until = Instant::now() + Duration::from_micros(100);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                        world.progress()?;
                    }
                }
                _ => {}
            }
            tp.unlock_all()?;
            world.barrier()?;
            tp.free()?;
        }
        other => {
            return Err(rma::TransportError::Failed(format!("unknown litmus mode {other}")).into())
        }
    }
    world.barrier()?;
    win.free()?;
    Ok(())
}

// ----- bad input, dead peers, passive target ---------------------------------------------

fn usage<T: std::fmt::Debug>(r: Result<T>) -> Result<UsageError> {
    match r.map_err(Error::into_kind) {
        Err(ErrorKind::Usage(u)) => Ok(u),
        other => Err(
            rma::TransportError::Failed(format!("expected a usage error, got {other:?}")).into(),
        ),
    }
}

fn bad_input(world: &World) -> Result<()> {
    let win = world.allocate::<f64>(4)?;
    let me = world.rank();
    let peer = (me + 1) % world.size() as Rank;
    check(
        matches!(usage(win.put(&[1.0], peer, 0))?, UsageError::NoEpoch { .. }),
        "op outside an epoch",
    )?;
    check(
        matches!(usage(win.unlock(peer))?, UsageError::NotLocked { .. }),
        "unlock without lock",
    )?;
    win.lock(LockType::Shared, peer, Assert::NONE)?;
    check(
        matches!(
            usage(win.put(&[1.0; 2], peer, 3))?,
            UsageError::OutOfBounds { .. }
        ),
        "displacement past the window",
    )?;
    check(
        matches!(
            usage(win.accumulate(&[1.0], AccOp::Bxor, peer, 0))?,
            UsageError::OpNotForType { .. }
        ),
        "wrong op for the type",
    )?;
    check(
        matches!(
            usage(win.lock_all(Assert::NONE))?,
            UsageError::EpochConflict { .. }
        ),
        "nested epochs",
    )?;
    // Sizes no memory holds, and what MPI does not define (issue #15).
    check(
        matches!(
            usage(win.get(peer, 0, 1 << 61))?,
            UsageError::TooLarge { .. }
        ),
        "a get whose bytes overflow",
    )?;
    check(
        matches!(
            usage(win.get_strided(peer, 0, rma::Layout::strided(2, 1, (1 << 32) + 1)))?,
            UsageError::OutOfBounds { .. }
        ),
        "a stride past 32 bits is not cut to 32 bits",
    )?;
    check(
        matches!(
            usage(win.read_local(1 << 61, &mut [0.0]))?,
            UsageError::OutOfBounds { .. }
        ),
        "read_local past the window does not wrap",
    )?;
    check(
        matches!(
            usage(win.compare_and_swap(0.0, 1.0, peer, 0))?,
            UsageError::Unsupported { .. }
        ),
        "compare_and_swap on floats",
    )?;
    // Valid ops (zeros: the window must stay as it was) before and after each epoch's
    // end: on shared memory they go straight to the target, past the window's state,
    // and the epoch's end must still be seen by the next op and flush.
    let direct_before = win.stats().ops_direct;
    win.put(&[0.0], peer, 1)?;
    win.accumulate(&[0.0], AccOp::Sum, peer, 2)?;
    win.flush(peer)?;
    win.put(&[0.0], peer, 3)?;
    win.unlock(peer)?;
    check(
        matches!(usage(win.put(&[0.0], peer, 0))?, UsageError::NoEpoch { .. }),
        "an op after unlock, its epoch's ops direct",
    )?;
    check(
        matches!(
            usage(win.flush(peer))?,
            UsageError::NotLocked { .. } | UsageError::EpochConflict { .. }
        ),
        "a flush after unlock",
    )?;
    win.fence(Assert::NONE)?;
    win.put(&[0.0], peer, 1)?;
    win.put(&[0.0], peer, 1)?;
    check(
        matches!(usage(win.flush(peer))?, UsageError::EpochConflict { .. }),
        "a flush in a fence epoch, its ops direct",
    )?;
    win.fence(Assert::NOSUCCEED)?;
    check(
        matches!(usage(win.get(peer, 0, 1))?, UsageError::NoEpoch { .. }),
        "an op after the last fence",
    )?;
    // A fence's epoch leaves every member direct on shared memory; a lock begun from
    // it grants its own target only. (Begun with nothing of the fence's epoch queued: on
    // a network a put of that epoch would still be tracked, and the lock refused.)
    win.fence(Assert::NONE)?;
    win.lock(LockType::Shared, peer, Assert::NONE)?;
    if me != peer {
        check(
            matches!(usage(win.put(&[0.0], me, 0))?, UsageError::NoEpoch { .. }),
            "an op toward a target not locked, in a lock epoch begun after a fence",
        )?;
    }
    win.put(&[0.0], peer, 1)?;
    win.unlock(peer)?;
    win.lock_all(Assert::NONE)?;
    win.put(&[0.0], peer, 0)?;
    win.put(&[0.0], peer, 0)?;
    check(
        matches!(
            usage(win.put(&[0.0; 2], peer, 3))?,
            UsageError::OutOfBounds { .. }
        ),
        "a displacement past the window, toward a direct target",
    )?;
    win.unlock_all()?;
    check(
        matches!(usage(win.put(&[0.0], peer, 0))?, UsageError::NoEpoch { .. }),
        "an op after unlock_all",
    )?;
    let pure_shared_memory = world.route(peer) == rma::Route::SharedMemory
        && world.traffic(peer).is_none()
        && std::env::var("RMA_NATIVE").as_deref() != Ok("0");
    if pure_shared_memory {
        let direct = win.stats().ops_direct - direct_before;
        check(
            direct >= 4,
            &format!("ops went directly to the target on shared memory: {direct}"),
        )?;
    }
    world.barrier()?;
    check(
        matches!(
            usage(world.allocate::<u64>((1 << 61) + 16).map(drop))?,
            UsageError::Unsupported { .. }
        ),
        "a window whose bytes overflow, refused on every rank",
    )?;
    win.start(&[peer], Assert::NONE)?;
    check(
        matches!(
            usage(win.put(&[1.0], me, 0))?,
            UsageError::NotInGroup { .. }
        ) || me == peer,
        "target outside the group",
    )?;
    win.post(
        &[(me + world.size() as Rank - 1) % world.size() as Rank],
        Assert::NONE,
    )?;
    win.complete()?;
    win.wait()?;
    check(win.local_to_vec() == vec![0.0; 4], "misuse changed nothing")?;
    world.barrier()?;
    win.free()?;
    Ok(())
}

fn dead_peer(world: &World) -> Result<()> {
    let win = world.allocate::<u64>(4)?;
    win.fence(Assert::NOPRECEDE)?;
    if world.rank() == 1 {
        // Die mid-epoch without a word.
        // SAFETY: kill(2) on our own pid with SIGKILL: the process ends here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    win.put(&[1], 0, 0)?;
    let start = Instant::now();
    let r = win.fence(Assert::NONE);
    check(
        start.elapsed() < Duration::from_secs(10),
        "the dead peer was noticed within 10 s",
    )?;
    r
}

/// The local guard: rank 0 writes its window in place through a slice while every other
/// rank waits for its exclusive lock of rank 0's window, then reads all of the writes
/// (the last one made after a pause: the guard excluded them until it went); a view of a
/// lent window is refused; and the window works as before after.
fn local_guard(world: &World) -> Result<()> {
    use rma::LocalAccess;
    let me = world.rank();
    // The window's own handle is borrowed by the guard (the compiler refuses its use); a
    // view of it is refused at run time.
    let mut bytes = world.allocate::<u8>(64)?;
    let view = bytes.elements::<u64>();
    {
        let lent = bytes.local_guard()?;
        check(lent.len() == 64, "the guard lends the whole window")?;
        let refused = view.put(&[1], me, 0).map_err(Error::into_kind);
        check(
            matches!(
                refused,
                Err(ErrorKind::Usage(UsageError::LocalAccess { call: "put" }))
            ),
            &format!("a put through a view while the guard lives: {refused:?}"),
        )?;
        check(
            view.local_to_vec().is_empty(),
            "no copy through a view either",
        )?;
        lent.release()?;
    }
    check(view.local_to_vec().len() == 8, "the view after the guard")?;
    drop(view);
    world.barrier()?;
    bytes.free()?;

    let mut win = world.allocate::<u64>(8)?;
    if me == 0 {
        let mut mine = win.local_guard()?;
        check(mine.len() == 8, "the guard lends the whole window")?;
        world.barrier()?; // the others now wait for the lock of this window
        for (i, x) in mine.iter_mut().enumerate() {
            *x = 100 + i as u64;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        mine[7] = 999;
        mine.release()?;
    } else {
        world.barrier()?;
        win.lock(LockType::Exclusive, 0, Assert::NONE)?;
        let got = win.get(0, 0, 8)?;
        win.unlock(0)?;
        let mut want: Vec<u64> = (100..108).collect();
        want[7] = 999;
        let got = got.wait()?;
        check(got == want, &format!("rank 0's writes in place: {got:?}"))?;
    }
    world.barrier()?;
    // After the guard: an ordinary epoch on rank 0's window.
    win.fence(Assert::NONE)?;
    if me == 1 {
        win.put(&[7], 0, 0)?;
    }
    win.fence(Assert::NONE)?;
    if me == 0 {
        check(win.local_to_vec()[0] == 7, "a put after the guard")?;
    }
    win.fence(Assert::NOSUCCEED)?;
    win.free()?;
    Ok(())
}

fn passive_target(world: &World) -> Result<()> {
    let win = world.allocate::<u64>(2)?;
    world.barrier()?;
    if world.rank() == 1 {
        // Two seconds of computing with no library call.
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_secs(2) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    } else if world.rank() == 0 {
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        win.lock(LockType::Exclusive, 1, Assert::NONE)?;
        win.put(&[41, 42], 1, 0)?;
        win.unlock(1)?;
        let took = start.elapsed();
        check(
            took < Duration::from_millis(1500),
            "lock/put/unlock waited for the computing target",
        )?;
    }
    world.barrier()?;
    if world.rank() == 1 {
        check(win.local_to_vec() == vec![41, 42], "the put landed")?;
    }
    win.free()?;
    Ok(())
}

fn no_segments_left(world: &World) -> Result<()> {
    let a = world.allocate::<u64>(1024)?;
    // Shared windows exist only where the ranks share memory (every network backend
    // refuses them, alike on every rank).
    let s = match world.allocate_shared::<u8>(4096) {
        Ok(s) => Some(s),
        Err(e) if matches!(e.transport(), Some(rma::TransportError::Unsupported(_))) => None,
        Err(e) => return Err(e),
    };
    world.barrier()?;
    let prefix = format!("rma-{}-", world.bootstrap().job_id());
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    check(
        left.is_empty(),
        &format!("segments unlinked once mapped, found {left:?}"),
    )?;
    // Anonymous segments: their descriptors are closed once every rank mapped them.
    let open: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|t| t.to_string_lossy().into_owned())
                .filter(|t| t.starts_with("/memfd:rma-segment"))
                .collect()
        })
        .unwrap_or_default();
    check(
        open.is_empty(),
        &format!("segment descriptors closed once mapped, found {open:?}"),
    )?;
    a.free()?;
    if let Some(s) = s {
        s.free()?;
    }
    Ok(())
}

// ----- hybrid worlds: which backend each target took ----------------------------------

/// Every rank puts, accumulates, fetches-and-adds, compares-and-swaps and gets on every
/// rank of a window in one lock_all epoch; the results must be exact, and the per-target
/// path counters must show shared memory toward the ranks of this node (by the
/// bootstrap's node identity) and the network toward the others. Fails outside a hybrid
/// world (no per-target counters) or when every rank is on one node.
fn paths(world: &World) -> Result<()> {
    let (me, size) = (world.rank(), world.size());
    let nodes = world
        .bootstrap()
        .allgather("paths-node", world.bootstrap().node_id().as_bytes())?;
    let mut distinct = nodes.clone();
    distinct.sort();
    distinct.dedup();
    check(distinct.len() > 1, "the job spans more than one node")?;
    // Per origin o, at target t: [o*4] put, [o*4+1] accumulated, [o*4+2] fetch-and-op
    // counter (every origin adds 1 at slot 2 of each target's row 0), [o*4+3] CAS.
    let win = world.allocate::<u64>(size as usize * 4)?;
    let before = win.stats();
    win.lock_all(Assert::NONE)?;
    let mut fetched = Vec::new();
    for t in 0..size as Rank {
        let row = me as u64 * 4;
        win.put(&[1000 + me as u64], t, row)?;
        win.accumulate(&[5, 0], AccOp::Sum, t, row + 1)?;
        win.accumulate(&[7], AccOp::Sum, t, row + 1)?;
        let fop = win.fetch_and_op(1, AccOp::Sum, t, 2)?;
        let cas = win.compare_and_swap(0, 77 + me as u64, t, row + 3)?;
        fetched.push((fop, cas));
    }
    win.flush_all()?;
    let mut seen_counter = Vec::new();
    for (t, (fop, cas)) in fetched.into_iter().enumerate() {
        seen_counter.push(fop.wait()?);
        check(
            cas.wait()? == 0,
            &format!("compare-and-swap at rank {t} found 0"),
        )?;
    }
    let gets: Vec<_> = (0..size as Rank)
        .map(|t| win.get(t, me as u64 * 4, 4))
        .collect::<Result<_>>()?;
    win.flush_all()?;
    for (t, g) in gets.into_iter().enumerate() {
        let row = g.wait()?;
        check(
            row[0] == 1000 + me as u64 && row[1] == 12 && row[3] == 77 + me as u64,
            &format!("own row at rank {t} read back: {row:?}"),
        )?;
    }
    win.unlock_all()?;
    world.barrier()?;
    // Slot 2 of every window counted one increment per origin, fetched values distinct.
    let local = win.local_to_vec();
    check(
        local[2] == size as u64,
        &format!("one increment per origin at slot 2: {}", local[2]),
    )?;
    check(
        seen_counter.iter().all(|v| *v < size as u64),
        &format!("fetched counter values below {size}: {seen_counter:?}"),
    )?;
    let stats = win.stats().since(&before);
    for t in 0..size as Rank {
        let traffic = world.traffic(t).ok_or_else(|| {
            rma::TransportError::Failed("no per-target path counters: not a hybrid world".into())
        })?;
        let same_node = nodes[t as usize] == nodes[me as usize];
        let want = if same_node {
            rma::Route::SharedMemory
        } else {
            rma::Route::Network
        };
        check(
            traffic.route == want && world.route(t) == want,
            &format!(
                "rank {t} reached through {want:?}, took {:?}",
                traffic.route
            ),
        )?;
        // Puts and gets are native on both backends; atomics are native (CPU) on this
        // node and active messages across the network.
        check(
            traffic.native_ops >= 2,
            &format!("native puts and gets toward rank {t}"),
        )?;
        if !same_node {
            check(
                traffic.messages >= 4,
                &format!("accumulates as active messages toward rank {t} on another node"),
            )?;
        }
        println!(
            "rank {me} -> {t}: {:?}, {} native ops, {} messages",
            traffic.route, traffic.native_ops, traffic.messages
        );
    }
    check(
        stats.ops_native > 0 && stats.ops_active_message > 0,
        "both native ops and active messages in this window's counters",
    )?;
    win.free()?;
    Ok(())
}
