//! Notified access (issue #28): counters exact under concurrency, data visible when the
//! count is seen, notifications in every epoch kind, bad indices, counters removed.

use rma::MessageKind as Kind;
use rma::{AccOp, Assert, ErrorKind, LockType, Rank, Result, UsageError, World};

use crate::{check, reps};

/// Counter indices of the case.
const PUTS: u32 = 0;
const SUMS: u32 = 1;
const HALO: u32 = 2;
const ACK: u32 = 3;
const GETS: u32 = 4;
const EPOCHS: u32 = 5;
const LARGE: u32 = 6;
const POLLED: u32 = 7;
const COUNTERS: u32 = 8;

/// Halo slots per rank, and a large op's elements (past one message on every backend).
const SLOT: usize = 8;
const LARGE_LEN: usize = 160 * 1024;

/// Whether this run's backend carries a notified put toward `target` as one write with
/// its notice: verbs (RDMA WRITE with immediate data, any size), or, for a `large` put,
/// libfabric's tcp providers (remote CQ data, from 8 KiB); as the environment sets it up.
fn notices_carried(world: &World, target: Rank, large: bool) -> bool {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let verbs = (env("RMA_BACKEND") == "verbs" || env("RMA_NETWORK") == "verbs")
        && env("RMA_VERBS_NOTIFIED_PUTS") != "0";
    let provider = [env("RMA_OFI_PROVIDER"), env("FI_PROVIDER")].concat();
    let ofi_tcp = env("RMA_BACKEND") == "ofi"
        && provider.starts_with("tcp")
        && env("RMA_OFI_NOTIFIED_PUTS") != "0";
    world.route(target) == rma::Route::Network
        && env("RMA_NATIVE") != "0"
        && (verbs || (large && ofi_tcp))
}

fn notify_index_error(r: Result<()>) -> Option<(Rank, u32, u32)> {
    match r.map_err(|e| e.into_kind()) {
        Err(ErrorKind::Usage(UsageError::NotifyIndex {
            target,
            index,
            count,
        })) => Some((target, index, count)),
        _ => None,
    }
}

/// Counts that another thread of the target makes while the application only reads
/// them: rank 0 spins on `notify_value` (whose progress pass finds the agent's under way
/// most of the time, and leaves the dispatch to it) while every other rank
/// sends it notified puts, which its progress agent applies and counts, where it has one
/// (network backends); on shared memory the origins count natively. A read that raced an
/// arrival once wrote a stale count back over it (verbs, 4 ranks). Where nothing else
/// progresses for this process (no agent), a wait for the next count does.
fn counted_while_read(world: &World, win: &rma::Window<u64>) -> Result<()> {
    let me = world.rank();
    let n = world.size() as Rank;
    let k = reps(20_000);
    let expect = k * u64::from(n - 1);
    win.lock_all(Assert::NONE)?;
    if me != 0 {
        for i in 0..k {
            win.put_notify(&[i], 0, u64::from(me), POLLED)?;
        }
    } else {
        let mut seen = win.notify_value(POLLED)?;
        let mut last_move = std::time::Instant::now();
        let mut reads = 0u64;
        while seen < expect {
            let now = win.notify_value(POLLED)?;
            reads += 1;
            if now != seen {
                check(
                    now > seen,
                    &format!("the count went back from {seen} to {now}"),
                )?;
                seen = now;
                last_move = std::time::Instant::now();
            } else if reads.is_multiple_of(1024)
                && last_move.elapsed() > std::time::Duration::from_millis(50)
            {
                // Nobody counted for a while: no agent here, or a count was lost (then
                // this wait runs out, RMA_TIMEOUT_MS, and says so).
                seen = win.wait_notify(POLLED, seen + 1).inspect_err(|_| {
                    say!("counted while read: {seen} of {expect} after {reads} reads");
                })?;
                last_move = std::time::Instant::now();
            }
        }
    }
    win.unlock_all()?;
    world.barrier()?;
    let v = win.notify_value(POLLED)?;
    check(
        v == if me == 0 { expect } else { 0 },
        &format!("counted while read: {v} of {expect}"),
    )
}

pub(crate) fn notify(world: &World) -> Result<()> {
    let me = world.rank();
    let ranks = world.size() as usize;
    let n = ranks as Rank;
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let win = world.allocate::<u64>(SLOT * ranks + 1 + LARGE_LEN)?;
    let large_at = (SLOT * ranks + 1) as u64;

    // No counters yet: a typed error at the origin, nothing sent.
    win.lock_all(Assert::NONE)?;
    let none = notify_index_error(win.put_notify(&[1], right, 0, 0));
    check(
        none == Some((right, 0, 0)),
        &format!("no counters: {none:?}"),
    )?;
    win.unlock_all()?;
    check(
        win.notify_count() == 0,
        "no counters before set_notify_count",
    )?;

    win.set_notify_count(COUNTERS)?;
    check(win.notify_count() == COUNTERS, "the counters set")?;
    for i in 0..COUNTERS {
        let v = win.notify_value(i)?;
        check(v == 0, &format!("counter {i} starts at 0, not {v}"))?;
    }
    check(
        win.notify_value(COUNTERS)
            .map_err(|e| e.into_kind())
            .is_err_and(|k| {
                matches!(
                    k,
                    ErrorKind::Usage(UsageError::NotifyIndex {
                        index: COUNTERS,
                        ..
                    })
                )
            }),
        "a local counter past the counters",
    )?;
    // Everyone has looked at its zeros before anyone counts on them.
    world.barrier()?;

    // Every other rank notifies rank 0 concurrently: puts into its own slot, and Sum
    // accumulates on one shared element; the counts are exact.
    let k = reps(2000);
    win.lock_all(Assert::NONE)?;
    let past = notify_index_error(win.put_notify(&[1], 0, 0, COUNTERS));
    check(
        past == Some((0, COUNTERS, COUNTERS)),
        &format!("an index past the target's counters: {past:?}"),
    )?;
    let before = win.stats();
    if me != 0 {
        for i in 0..k {
            let slot = [u64::from(me) << 32 | i; SLOT];
            win.put_notify(&slot, 0, u64::from(me) * SLOT as u64, PUTS)?;
            win.accumulate_notify(&[1], AccOp::Sum, 0, (SLOT * ranks) as u64, SUMS)?;
        }
        win.flush(0)?;
        // On shared memory, natively: the copy, then the counter's atomic add, and not
        // one message.
        let native = world.route(0) == rma::Route::SharedMemory
            && world.traffic(0).is_none()
            && std::env::var("RMA_NATIVE").as_deref() != Ok("0");
        let s = win.stats().since(&before);
        check(
            !native || (s.messages(Kind::Put) == 0 && s.messages(Kind::Accumulate) == 0),
            &format!("notified ops on shared memory send nothing: {s:?}"),
        )?;
        // On verbs, a notified put is one RDMA WRITE with immediate data: no message.
        check(
            !notices_carried(world, 0, false) || (s.messages(Kind::Put) == 0 && s.ops_native >= k),
            &format!("notified puts on verbs are native writes, no messages: {s:?}"),
        )?;
    } else {
        let expect = k * u64::from(n - 1);
        let puts = win.wait_notify(PUTS, expect)?;
        let sums = win.wait_notify(SUMS, expect)?;
        check(
            puts == expect,
            &format!("put notifications {puts} of {expect}"),
        )?;
        check(
            sums == expect,
            &format!("accumulate notifications {sums} of {expect}"),
        )?;
        // Seen the counts, so the data: every slot's last put, and every sum.
        let local = win.local_to_vec();
        for r in 1..n {
            let at = r as usize * SLOT;
            check(
                local[at..at + SLOT]
                    .iter()
                    .all(|v| *v == (u64::from(r) << 32 | (k - 1))),
                &format!(
                    "rank {r}'s last put, seen with its count: {:?}",
                    &local[at..at + SLOT]
                ),
            )?;
        }
        check(
            local[SLOT * ranks] == expect,
            &format!(
                "the sum of every notified accumulate: {}",
                local[SLOT * ranks]
            ),
        )?;
    }
    win.unlock_all()?;
    world.barrier()?;
    check(
        win.notify_value(PUTS)? == if me == 0 { k * u64::from(n - 1) } else { 0 },
        "no notification beyond the ops",
    )?;
    counted_while_read(world, &win)?;

    // Litmus: a halo ping-pong around the ring, each side writing the next round's halo
    // only after the other acknowledged the last one (a notified put back). The consumer
    // reads its halo when the count says it is there and must never see a stale value.
    // 10^5 rounds between two ranks; fewer around a ring of more, where two cores
    // take turns among four spinning ranks.
    let rounds = reps(if n <= 2 { 100_000 } else { 10_000 });
    win.lock_all(Assert::NONE)?;
    let mine = u64::from(me) * SLOT as u64;
    for round in 1..=rounds {
        let halo = [u64::from(me) << 40 | round; SLOT];
        win.put_notify(&halo, right, mine, HALO)?;
        win.wait_notify(HALO, round).inspect_err(|_| {
            // What the window's counters say of a wait that ran out.
            say!(
                "round {round}: halo count {:?}, {:?}",
                win.notify_value(HALO),
                win.stats()
            );
        })?;
        let seen = win.local_to_vec();
        let at = left as usize * SLOT;
        let want = u64::from(left) << 40 | round;
        check(
            seen[at..at + SLOT].iter().all(|v| *v == want),
            &format!(
                "round {round}: the halo seen with its count is {:?}, not {want}",
                &seen[at..at + SLOT]
            ),
        )?;
        // Consumed: the left neighbour may write the next one.
        win.put_notify(&[], left, 0, ACK)?;
        win.wait_notify(ACK, round)?;
    }
    win.unlock_all()?;
    world.barrier()?;

    // A notified get: the target's count says its data was read (it may reuse it).
    win.lock(LockType::Shared, right, Assert::NONE)?;
    // (Our last halo, in our slot there.)
    let got = win.get_notify(right, mine, SLOT, GETS)?;
    win.unlock(right)?;
    let got = got.wait()?;
    check(
        got.iter().all(|v| *v == u64::from(me) << 40 | rounds),
        &format!("the notified get's data: {got:?}"),
    )?;
    win.wait_notify(GETS, 1)?;
    world.barrier()?;
    check(win.notify_value(GETS)? == 1, "one notified get")?;

    // In a fence epoch and a PSCW epoch: counted when the epoch ends at the latest.
    win.fence(Assert::NONE)?;
    win.put_notify(&[7], right, 0, EPOCHS)?;
    win.fence(Assert::NONE)?;
    check(
        win.notify_value(EPOCHS)? == 1,
        "a notified put in a fence epoch",
    )?;
    win.post(&[left], Assert::NONE)?;
    win.start(&[right], Assert::NONE)?;
    win.accumulate_notify(&[1], AccOp::Sum, right, 0, EPOCHS)?;
    win.complete()?;
    win.wait()?;
    check(
        win.notify_value(EPOCHS)? == 2,
        "a notified accumulate in a PSCW epoch",
    )?;
    win.fence(Assert::NOPRECEDE)?;
    check(win.local_to_vec()[0] == 8, "the epochs' ops landed")?;
    win.fence(Assert::NOSUCCEED)?;

    // A large put (pieces where it goes as messages): one count, after all of its data.
    let large: Vec<u64> = (0..LARGE_LEN as u64).map(|i| i ^ u64::from(me)).collect();
    win.lock(LockType::Shared, right, Assert::NONE)?;
    let before = win.stats();
    win.put_notify(&large, right, large_at, LARGE)?;
    win.unlock(right)?;
    // (Its lock's and unlock's messages aside.)
    let s = win.stats().since(&before);
    // Where the backend carries a large put's notice with the write (verbs; libfabric's
    // tcp providers, remote CQ data), it is one native op and no message.
    check(
        !notices_carried(world, right, true) || (s.messages(Kind::Put) == 0 && s.ops_native >= 1),
        &format!("a large notified put is one write with its notice: {s:?}"),
    )?;
    win.wait_notify(LARGE, 1)?;
    let local = win.local_to_vec();
    check(
        local[large_at as usize..]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == i as u64 ^ u64::from(left)),
        "the large notified put's data, seen with its count",
    )?;
    world.barrier()?;
    check(win.notify_value(LARGE)? == 1, "one count for a large put")?;

    // Set and reset: a counter set locally; new counters start at 0; 0 removes them.
    win.notify_set(HALO, 5)?;
    check(win.notify_value(HALO)? == 5, "notify_set")?;
    win.set_notify_count(2)?;
    check(
        win.notify_count() == 2 && win.notify_value(0)? == 0,
        "new counters, at 0",
    )?;
    win.set_notify_count(0)?;
    check(win.notify_count() == 0, "counters removed")?;
    win.lock_all(Assert::NONE)?;
    let gone = notify_index_error(win.put_notify(&[1], right, 0, 0));
    check(
        gone == Some((right, 0, 0)),
        &format!("removed counters: {gone:?}"),
    )?;
    win.unlock_all()?;
    world.barrier()?;
    win.free()?;
    Ok(())
}
