//! Protocol tests on the simulated transport: message counts of the optimizations,
//! tiny element pools, the progress cases of seeds 001 and 003, mutual exclusion and
//! atomicity, misuse and dead peers.

use std::time::Duration;

use rma_core::sim::{self, Profile};
use rma_core::wire::Kind;
use rma_core::{
    AccOp, Assert, Config, Engine, Error, ErrorKind, LocF64, LocI32, LockType, PeerError, Result,
    UsageError,
};

fn config() -> Config {
    Config {
        timeout: Some(Duration::from_secs(20)),
        ..Config::default()
    }
}

/// [`config`] with a progress agent in every process beside the application's thread.
fn config_with_progress_agent() -> Config {
    Config {
        async_progress: rma_core::AsyncProgress::On,
        ..config()
    }
}

fn run(n: usize, profile: Profile, seed: u64, config: Config, f: fn(Engine) -> Result<()>) {
    sim::run_with(n, profile, seed, config, f)
        .unwrap_or_else(|e| panic!("{profile:?} seed {seed}: {e}"));
}

// ----- message counts -------------------------------------------------------------------

/// Issue #26's hot paths, on a backend whose ops complete in the call and whose locks and
/// fence barrier are native (the shared-memory profile): LOCK_ALL's lazy locks taken in
/// the ops' own calls, UNLOCK_ALL and FENCE with nothing under way. Epochs of puts and
/// fetch_and_ops to every rank send no message and queue no op, and the contents are
/// exact.
#[test]
fn shared_memory_lock_all_and_fence_epochs_send_nothing_and_queue_nothing() {
    run(3, Profile::SharedMemory, 7, config(), |e| {
        const ROUNDS: u64 = 50;
        let win = e.allocate::<u64>(4)?;
        let (me, n) = (e.rank(), e.size());
        let before = win.stats();
        for round in 1..=ROUNDS {
            win.lock_all(Assert::NONE)?;
            for t in 0..n {
                win.put(&[round], t, u64::from(me))?;
                win.flush(t)?;
            }
            win.unlock_all()?;
        }
        // Each put went straight to its target: the lazy lock was taken in its call, not
        // through a queued op element and ISSUE_OPS.
        let puts = win.stats();
        assert_eq!(puts.op_elements_high_water, 0, "{puts:?}");
        for _ in 1..=ROUNDS {
            win.lock_all(Assert::NONE)?;
            for t in 0..n {
                let old = win.fetch_and_op(1, AccOp::Sum, t, 3)?;
                win.flush(t)?;
                old.wait()?;
            }
            win.unlock_all()?;
        }
        e.barrier()?;
        let mut expected: Vec<u64> = vec![ROUNDS; n as usize];
        expected.push(ROUNDS * u64::from(n));
        assert_eq!(win.local_to_vec(), expected);
        win.fence(Assert::NONE)?;
        win.put(&[100 + u64::from(me)], (me + 1) % n, 0)?;
        win.fence(Assert::NONE)?;
        assert_eq!(win.local_to_vec()[0], 100 + u64::from((me + n - 1) % n));
        win.fence(Assert::NOSUCCEED)?;
        let s = win.stats().since(&before);
        assert_eq!(s.total_messages(), 0, "{s:?}");
        assert_eq!(s.ops_queued, 0, "{s:?}");
        assert_eq!(s.ops_active_message, 0, "{s:?}");
        assert_eq!(s.ops_native, 2 * ROUNDS * u64::from(n) + 1, "{s:?}");
        win.free()?;
        Ok(())
    });
}

#[test]
fn single_op_lock_put_unlock_is_one_request_and_one_ack() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(2, profile, 5, config(), |e| {
            let win = e.allocate::<u64>(4)?;
            if e.rank() == 0 {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                win.put(&[42], 1, 2)?;
                win.unlock(1)?;
                let s = win.stats();
                assert_eq!(s.messages(Kind::Put), 1, "{s:?}");
                assert_eq!(
                    s.total_messages(),
                    1,
                    "lock and unlock ride on the put: {s:?}"
                );
            }
            e.barrier()?;
            if e.rank() == 1 {
                let s = win.stats();
                assert_eq!(s.messages(Kind::Ack), 1, "{s:?}");
                assert_eq!(s.total_messages(), 1, "{s:?}");
                assert_eq!(win.local_to_vec()[2], 42);
            }
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn native_locks_need_no_message_and_no_target_progress() {
    run(2, Profile::SharedMemory, 28, config(), |e| {
        let win = e.allocate::<u64>(4)?;
        e.barrier()?;
        if e.rank() == 0 {
            for _ in 0..10 {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                win.accumulate(&[1], AccOp::Sum, 1, 0)?;
                win.unlock(1)?;
            }
            win.lock_all(Assert::NONE)?;
            win.put(&[3], 1, 1)?;
            win.flush(1)?;
            win.unlock_all()?;
            let s = win.stats();
            assert_eq!(s.total_messages(), 0, "{s:?}");
        }
        e.barrier()?;
        if e.rank() == 1 {
            assert_eq!(&win.local_to_vec()[..2], &[10, 3]);
        }
        win.free()?;
        Ok(())
    });
}

#[test]
fn pscw_notices_go_natively_where_the_backend_has_them() {
    // Shared-memory-like: post and complete are notices in memory, a put native: a PSCW
    // epoch sends no message at all, in either direction, and the put lands.
    run(2, Profile::SharedMemory, 31, config(), |e| {
        let win = e.allocate::<u64>(2)?;
        e.barrier()?;
        let (me, peer) = (e.rank(), 1 - e.rank());
        let before = win.stats();
        for i in 0..50u64 {
            win.post(&[peer], Assert::NONE)?;
            win.start(&[peer], Assert::NONE)?;
            win.put(&[i + 10 * u64::from(me)], peer, 0)?;
            win.complete()?;
            win.wait()?;
            assert_eq!(win.local_to_vec()[0], i + 10 * u64::from(peer));
        }
        let s = win.stats().since(&before);
        assert_eq!(s.total_messages(), 0, "{s:?}");
        e.barrier()?;
        win.free()?;
        Ok(())
    });
    // Without them (active messages only), one POST and one DONE|COMPLETE (riding on
    // the put) per epoch and direction.
    run(2, Profile::ActiveMessages, 32, config(), |e| {
        let win = e.allocate::<u64>(2)?;
        e.barrier()?;
        let peer = 1 - e.rank();
        let before = win.stats();
        for i in 0..50u64 {
            win.post(&[peer], Assert::NONE)?;
            win.start(&[peer], Assert::NONE)?;
            win.put(&[i], peer, 0)?;
            win.complete()?;
            win.wait()?;
        }
        let s = win.stats().since(&before);
        assert_eq!(s.messages(Kind::Post), 50, "{s:?}");
        assert_eq!(s.messages(Kind::Put), 50, "{s:?}");
        e.barrier()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn without_single_op_lock_put_unlock_takes_more_messages() {
    let cfg = Config {
        single_op: false,
        ..config()
    };
    run(2, Profile::ActiveMessages, 6, cfg, |e| {
        let win = e.allocate::<u64>(4)?;
        if e.rank() == 0 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            win.put(&[42], 1, 2)?;
            win.unlock(1)?;
            let s = win.stats();
            assert_eq!(s.messages(Kind::Lock), 1, "{s:?}");
            assert_eq!(s.messages(Kind::Put), 1, "{s:?}");
            assert_eq!(
                s.total_messages(),
                2,
                "lock, then put carrying UNLOCK: {s:?}"
            );
        }
        e.barrier()?;
        if e.rank() == 1 {
            let s = win.stats();
            assert_eq!(s.messages(Kind::LockGranted), 1, "{s:?}");
            assert_eq!(s.messages(Kind::Ack), 1, "{s:?}");
            assert_eq!(win.local_to_vec()[2], 42);
        }
        win.free()?;
        Ok(())
    });
}

/// Issue #27: a fence of two members needs no RMA_DONE round trip. The one barrier
/// message each way follows the epoch's ops on the ordered channel and carries their
/// RMA_DONE count unacknowledged: the target leaves its fence only once it took that
/// message in, so every op before it is applied. Active messages and ordered native
/// puts alike; per fence and rank, exactly the ops and one barrier message.
#[test]
fn a_two_member_fence_completes_its_ops_with_the_barrier_message() {
    for (profile, seed) in [(Profile::ActiveMessages, 7), (Profile::OrderedPuts, 7)]
        .into_iter()
        .chain((20..28).map(|s| (Profile::OrderedPuts, s)))
    {
        run(2, profile, seed, config(), |e| {
            let win = e.allocate::<u64>(10)?;
            win.fence(Assert::NOPRECEDE)?;
            for round in 1..=20u64 {
                // Alternate halves: the next round's puts may land while the target
                // still reads this one's (its fence is over at the origin).
                let half = (round % 2) * 5;
                let before = win.stats();
                if e.rank() == 0 {
                    for k in 0..5u64 {
                        win.put(&[round * 10 + k], 1, half + k)?;
                    }
                }
                win.fence(Assert::NONE)?;
                let s = win.stats().since(&before);
                // Native puts (the ordered profile) or active messages: every op one way.
                let native = s.ops_native > 0;
                if e.rank() == 0 {
                    assert_eq!(s.ops_native + s.ops_active_message, 5, "{s:?}");
                }
                if e.rank() == 0 {
                    let puts = if native { 0 } else { 5 };
                    assert_eq!(s.messages(Kind::Put), puts, "{s:?}");
                    assert_eq!(s.messages(Kind::Done), 0, "no RMA_DONE: {s:?}");
                } else {
                    let got = &win.local_to_vec()[half as usize..half as usize + 5];
                    let want: Vec<u64> = (0..5).map(|k| round * 10 + k).collect();
                    assert_eq!(
                        got,
                        &want[..],
                        "round {round}: the fence completed the puts"
                    );
                }
                assert_eq!(s.messages(Kind::Ack), 0, "no acknowledgement: {s:?}");
                assert_eq!(s.messages(Kind::Barrier), 1, "{s:?}");
                let ops = if e.rank() == 0 && !native { 5 } else { 0 };
                assert_eq!(s.total_messages(), ops + 1, "{s:?}");
            }
            win.fence(Assert::NOSUCCEED)?;
            win.free()?;
            Ok(())
        });
    }
}

/// A two-member fence after ops the target's engine applies (active messages: here
/// accumulates with no native form) must not let the origin reach the target natively
/// before they are applied: the other member's barrier message may leave before it took
/// ours in, so a native get or put of the next epoch could overtake them (a get read
/// the value before the sum, a put was summed over). Such a pair is flushed as any
/// target is; a pair with ordered native puts alone keeps its unacknowledged fence.
#[test]
fn a_two_member_fence_applies_active_messages_before_the_next_native_op() {
    for (profile, seed) in [Profile::OrderedPuts, Profile::Rdma]
        .into_iter()
        .flat_map(|p| (40..46).map(move |s| (p, s)))
    {
        run(2, profile, seed, config(), |e| {
            let win = e.allocate::<u64>(2)?;
            win.fence(Assert::NOPRECEDE)?;
            for round in 1..=30u64 {
                if e.rank() == 0 {
                    // Max has no native form on either profile: an active message.
                    win.accumulate(&[round * 10], AccOp::Max, 1, 0)?;
                    win.accumulate(&[round], AccOp::Max, 1, 1)?;
                }
                win.fence(Assert::NONE)?;
                if e.rank() == 0 {
                    let got = win.get(1, 0, 1)?;
                    win.put(&[0], 1, 1)?;
                    win.fence(Assert::NONE)?;
                    assert_eq!(got.wait()?, vec![round * 10], "round {round}: get");
                } else {
                    win.fence(Assert::NONE)?;
                    assert_eq!(
                        win.local_to_vec(),
                        vec![round * 10, 0],
                        "round {round}: the put came after the max"
                    );
                }
                // The next round's ops may not touch the memory until it is read.
                win.fence(Assert::NONE)?;
            }
            win.fence(Assert::NOSUCCEED)?;
            win.free()?;
            Ok(())
        });
    }
}

/// With three members a third could read the target before it took in the puts (the
/// dissemination barrier does not pass through every pair), so each target is flushed
/// before the barrier: the RMA_DONE rides on the last put, and the target acknowledges.
#[test]
fn fence_puts_of_three_members_carry_rma_done_on_the_last_op() {
    run(3, Profile::ActiveMessages, 7, config(), |e| {
        let win = e.allocate::<u64>(8)?;
        win.fence(Assert::NOPRECEDE)?;
        let before = win.stats();
        if e.rank() == 0 {
            for k in 0..5u64 {
                win.put(&[k + 1], 1, k)?;
            }
        }
        win.fence(Assert::NOSUCCEED)?;
        let s = win.stats().since(&before);
        if e.rank() == 0 {
            assert_eq!(s.messages(Kind::Put), 5, "{s:?}");
            assert_eq!(
                s.messages(Kind::Done),
                0,
                "RMA_DONE rides on the last put: {s:?}"
            );
        } else if e.rank() == 1 {
            assert_eq!(s.messages(Kind::Ack), 1, "{s:?}");
            assert_eq!(&win.local_to_vec()[..5], &[1, 2, 3, 4, 5]);
        }
        win.free()?;
        Ok(())
    });
}

/// Issue #27: puts a backend orders before later messages (libfabric's tcp providers)
/// complete at the origin in their call and at the target with the next message there.
/// PSCW's complete sends its notice right behind them (no wait for the puts); a flush
/// waits until the backend says they are placed (no message); unlock takes one UNLOCK and one
/// acknowledgement whatever the number of puts; each target sees every put when the
/// origin's synchronization returns.
#[test]
fn ordered_puts_complete_with_the_next_message() {
    for seed in 1..9 {
        run(2, Profile::OrderedPuts, seed, config(), |e| {
            let win = e.allocate::<u64>(16)?;
            let (me, peer) = (e.rank(), 1 - e.rank());
            // PSCW, both ways: 8 native puts, then the complete notice alone.
            for round in 1..=10u64 {
                let before = win.stats();
                win.post(&[peer], Assert::NONE)?;
                win.start(&[peer], Assert::NONE)?;
                for k in 0..8 {
                    win.put(&[round * 100 + u64::from(me) * 10 + k], peer, k)?;
                }
                win.complete()?;
                win.wait()?;
                let got = win.local_to_vec();
                let want: Vec<u64> = (0..8)
                    .map(|k| round * 100 + u64::from(peer) * 10 + k)
                    .collect();
                assert_eq!(&got[..8], &want[..], "round {round}");
                let s = win.stats().since(&before);
                assert_eq!(s.messages(Kind::Put), 0, "{s:?}");
                assert_eq!(s.messages(Kind::Post), 1, "{s:?}");
                assert_eq!(s.messages(Kind::Done), 1, "the complete notice: {s:?}");
                assert_eq!(s.total_messages(), 2, "{s:?}");
                assert_eq!(s.ops_native, 8, "{s:?}");
            }
            e.barrier()?;
            // Passive target: 8 puts and a flush are one RMA_DONE and one ack; unlock the
            // same with UNLOCK.
            let before = win.stats();
            if me == 0 {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                for k in 0..8 {
                    win.put(&[1000 + k], 1, 8 + k)?;
                }
                win.flush(1)?; // an RMA_DONE: the puts waited for the lock
                let sent = win.stats().since(&before).total_messages();
                for k in 0..8 {
                    win.put(&[3000 + k], 1, 8 + k)?;
                }
                win.flush(1)?; // until the backend says they are placed
                let s = win.stats().since(&before);
                assert_eq!(s.total_messages(), sent, "the flush sent nothing: {s:?}");
                e.barrier()?; // rank 1 looks
                e.barrier()?;
                for k in 0..8 {
                    win.put(&[2000 + k], 1, k)?;
                }
                win.unlock(1)?;
                let s = win.stats().since(&before);
                assert_eq!(s.messages(Kind::Put), 0, "{s:?}");
                assert_eq!(s.messages(Kind::Lock), 1, "{s:?}");
                assert_eq!(s.messages(Kind::Done), 2, "first flush, unlock: {s:?}");
                assert_eq!(s.total_messages(), 3, "{s:?}");
            } else {
                e.barrier()?;
                let flushed = &win.local_to_vec()[8..];
                let want: Vec<u64> = (3000..3008).collect();
                assert_eq!(flushed, &want[..], "the flush completed them");
                e.barrier()?;
            }
            e.barrier()?;
            if me == 1 {
                let s = win.stats().since(&before);
                assert_eq!(s.messages(Kind::Ack), 2, "{s:?}");
                let got = win.local_to_vec();
                let want: Vec<u64> = (0..8)
                    .map(|k| 2000 + k)
                    .chain((0..8).map(|k| 3000 + k))
                    .collect();
                assert_eq!(got, want);
            }
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn fence_get_moves_last_and_its_reply_carries_the_ack() {
    run(2, Profile::ActiveMessages, 8, config(), |e| {
        let win = e.allocate::<u64>(8)?;
        win.write_local(7, &[e.rank() as u64 + 70])?;
        // Counted from before the first fence: the target may take in the ops while
        // still in it (the origin left it at once).
        let before = win.stats();
        win.fence(Assert::NONE)?;
        let mut got = None;
        if e.rank() == 0 {
            win.put(&[1], 1, 0)?;
            got = Some(win.get(1, 7, 1)?); // posted in the middle...
            win.put(&[2], 1, 1)?;
            win.put(&[3], 1, 2)?;
        }
        win.fence(Assert::NOSUCCEED)?;
        let s = win.stats().since(&before);
        if let Some(g) = got {
            assert_eq!(g.wait()?, vec![71]);
            assert_eq!(s.messages(Kind::Put), 3);
            assert_eq!(s.messages(Kind::Get), 1);
            assert_eq!(s.messages(Kind::Done), 0, "{s:?}");
        } else {
            assert_eq!(s.messages(Kind::Response), 1, "{s:?}");
            assert_eq!(
                s.messages(Kind::Ack),
                0,
                "...issued last, its response acknowledges: {s:?}"
            );
            assert_eq!(&win.local_to_vec()[..3], &[1, 2, 3]);
        }
        win.free()?;
        Ok(())
    });
}

#[test]
fn flush_with_native_puts_needs_no_message() {
    run(2, Profile::Rdma, 9, config(), |e| {
        let win = e.allocate::<u64>(8)?;
        win.lock_all(Assert::NOCHECK)?;
        let before = win.stats();
        if e.rank() == 0 {
            for k in 0..4 {
                win.put(&[9], 1, k)?;
                win.flush(1)?;
            }
            let s = win.stats().since(&before);
            assert_eq!(s.ops_native, 4);
            assert_eq!(
                s.total_messages(),
                0,
                "remote completion is the transport's: {s:?}"
            );
        }
        win.unlock_all()?;
        e.barrier()?;
        if e.rank() == 1 {
            assert_eq!(&win.local_to_vec()[..4], &[9; 4]);
        }
        win.free()?;
        Ok(())
    });
}

/// Counted puts (a network's direct puts, `window::direct`): after the first put of a
/// passive epoch, puts to a target go straight to the backend, counted, and a flush waits
/// for the count alone. The simulated network places a native put only when its
/// completion is polled, in any order its seed picks: a flush that returned before its
/// puts completed would leave the target's memory stale here.
#[test]
fn counted_puts_are_at_the_target_when_flush_unlock_and_unlock_all_return() {
    for seed in 0..4 {
        run(2, Profile::Rdma, 40 + seed, config(), |e| {
            let win = e.allocate::<u64>(8)?;
            let expect = |round: u64| -> [u64; 8] { std::array::from_fn(|k| round * 8 + k as u64) };
            let check = |round: u64, how: &str| -> Result<()> {
                e.barrier()?;
                if e.rank() == 1 {
                    let mut seen = [0u64; 8];
                    win.read_local(0, &mut seen)?;
                    assert_eq!(seen, expect(round), "after {how}, round {round}");
                }
                e.barrier()
            };
            let rounds = 100;
            win.lock_all(Assert::NONE)?;
            let before = win.stats();
            for round in 0..rounds {
                if e.rank() == 0 {
                    win.put(&expect(round), 1, 0)?;
                    win.flush(1)?;
                }
                check(round, "flush")?;
            }
            if e.rank() == 0 {
                let s = win.stats().since(&before);
                assert_eq!(s.ops_native, rounds, "{s:?}");
                // The first waits for lock_all's lazy lock of its target, the second
                // marks it: every one after goes direct.
                assert_eq!(
                    s.ops_direct,
                    rounds - 2,
                    "the puts after the second went direct: {s:?}"
                );
                assert_eq!(s.ops_active_message, 0, "{s:?}");
                // Gets of what the puts left, direct and counted as well: each one's bytes
                // are in the caller's buffer once its flush returns.
                let before = win.stats();
                for _ in 0..10 {
                    let mut seen = [0u64; 8];
                    let get = win.get_into(1, 0, &mut seen)?;
                    win.flush(1)?;
                    assert!(get.test()?, "the get is complete once its flush returns");
                    get.wait()?;
                    assert_eq!(seen, expect(rounds - 1));
                }
                let mut one = [0u64; 1];
                for k in 0..8 {
                    let get = win.get_into(1, k, &mut one)?;
                    win.flush(1)?;
                    assert_eq!(get.wait()?, &[expect(rounds - 1)[k as usize]]);
                }
                let s = win.stats().since(&before);
                assert_eq!((s.ops_native, s.ops_direct), (18, 18), "{s:?}");
                win.put(&expect(rounds), 1, 0)?;
            }
            win.unlock_all()?;
            check(rounds, "unlock_all")?;
            if e.rank() == 0 {
                win.lock(LockType::Shared, 1, Assert::NONE)?;
                // Granted by the first flush: the puts after it go direct, and only the
                // unlock completes them.
                win.put(&expect(rounds + 1), 1, 0)?;
                win.flush(1)?;
                let before = win.stats();
                for round in rounds + 2..rounds + 5 {
                    for k in 0..8 {
                        win.put(&[expect(round)[k]], 1, k as u64)?;
                    }
                }
                assert!(win.stats().since(&before).ops_direct >= 23);
                win.unlock(1)?;
            }
            check(rounds + 4, "unlock")?;
            // Under NOCHECK no lock message is sent: nothing but the counts' wait keeps
            // unlock_all from returning before the puts are in.
            win.lock_all(Assert::NOCHECK)?;
            if e.rank() == 0 {
                win.put(&expect(rounds + 5), 1, 0)?;
                win.flush(1)?;
                for round in rounds + 6..rounds + 9 {
                    for k in 0..8 {
                        win.put(&[expect(round)[k]], 1, k as u64)?;
                    }
                }
            }
            win.unlock_all()?;
            check(rounds + 8, "unlock_all under NOCHECK")?;
            win.free()?;
            Ok(())
        });
    }
}

/// A counted put that fails at its completion (a remote access error) is reported, typed,
/// by the flush that waits for it, a counted get's by its request; the window goes on.
#[test]
fn a_counted_put_that_fails_is_reported_by_its_flush_a_get_by_its_request() {
    use rma_core::sim::echo::Echo;
    use rma_core::TransportError;
    use std::sync::Arc;
    let echo = Arc::new(Echo::native_after_polls(2, 3));
    let engine = Engine::new(echo.clone(), config());
    let win = engine.allocate::<u64>(8).expect("allocate");
    win.lock_all(Assert::NONE).expect("lock_all");
    // The first put waits for the lazy lock, the second marks its target.
    for k in 0..2 {
        win.put(&[1], 1, k).expect("put");
        win.flush(1).expect("flush");
    }
    let before = win.stats();
    win.put(&[2], 1, 0).expect("put");
    echo.fail_next_native();
    win.put(&[3], 1, 1).expect("put");
    assert_eq!(win.stats().since(&before).ops_direct, 2, "both went direct");
    let failed = win.flush(1).map_err(Error::into_kind);
    assert!(
        matches!(failed, Err(ErrorKind::Transport(TransportError::Failed(_)))),
        "{failed:?}"
    );
    // Reported once; the next puts and flushes go on.
    for k in 0..4 {
        win.put(&[k], 1, k).expect("put");
        win.flush(1).expect("flush after the failure");
    }
    // A counted get that fails: its request carries the error, not the flush.
    let mut one = [0u64; 1];
    let before = win.stats();
    echo.fail_next_native();
    let get = win.get_into(1, 0, &mut one).expect("get");
    assert_eq!(
        win.stats().since(&before).ops_direct,
        1,
        "the get went direct"
    );
    win.flush(1).expect("the flush of a failed get");
    let failed = get.wait().map_err(Error::into_kind);
    assert!(
        matches!(failed, Err(ErrorKind::Transport(TransportError::Failed(_)))),
        "{failed:?}"
    );
    let get = win.get_into(1, 0, &mut one).expect("get");
    win.flush(1).expect("flush");
    get.wait().expect("the next get");
    win.unlock_all().expect("unlock_all");
    win.free().expect("free");
}

/// Past 64 ranks, ranks share the slots of counted puts: a slot marks one rank at a time,
/// so rank 65's puts (the slot of rank 1) take the locked path, counted in the slot, and
/// each flush still waits for its own puts.
#[test]
fn ranks_that_share_a_slot_of_counted_puts_each_flush_their_own() {
    use rma_core::sim::echo::Echo;
    use std::sync::Arc;
    let engine = Engine::new(Arc::new(Echo::native_after_polls(130, 2)), config());
    let win = engine.allocate::<u64>(8).expect("allocate");
    win.lock_all(Assert::NONE).expect("lock_all");
    let before = win.stats();
    for k in 0..20 {
        win.put(&[k], 1, 0).expect("put to 1");
        win.put(&[k], 65, 0).expect("put to 65");
        win.flush(65).expect("flush 65");
        win.flush(1).expect("flush 1");
    }
    let s = win.stats().since(&before);
    assert_eq!(s.ops_native, 40, "{s:?}");
    // Rank 1's after its first two (the first waits for its lazy lock, the second marks
    // it), none of 65's.
    assert_eq!(s.ops_direct, 18, "{s:?}");
    win.flush_all().expect("flush_all");
    win.unlock_all().expect("unlock_all");
    win.free().expect("free");
}

/// A lock_all epoch keeps a target element for every target it touched; flush_all
/// completes the ones with something outstanding and passes the others by. By message,
/// each round's put to one of seven touched targets is the one message its flush_all
/// sends (the put, carrying RMA_DONE), whichever target it is; on every profile each
/// target holds every round's value at the end.
#[test]
fn flush_all_completes_the_targets_with_ops_outstanding_among_all_it_touched() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(8, profile, 13, config(), move |e| {
            const ROUNDS: u64 = 40;
            let n = e.size() as u64;
            let win = e.allocate::<u64>(ROUNDS as usize)?;
            if e.rank() == 0 {
                win.lock_all(Assert::NONE)?;
                for t in 1..n {
                    win.put(&[u64::MAX], t as rma_core::Rank, 0)?;
                }
                win.flush_all()?;
                for round in 0..ROUNDS {
                    let t = 1 + (round * 3) % (n - 1);
                    let before = win.stats();
                    win.put(&[round + 1], t as rma_core::Rank, round)?;
                    win.flush_all()?;
                    let s = win.stats().since(&before);
                    if win.stats().ops_native == 0 {
                        assert_eq!(s.messages(Kind::Put), 1, "round {round}: {s:?}");
                        assert_eq!(s.total_messages(), 1, "round {round}: {s:?}");
                    }
                }
                win.unlock_all()?;
            }
            e.barrier()?;
            if e.rank() != 0 {
                let mine = win.local_to_vec();
                for round in 0..ROUNDS {
                    let t = 1 + (round * 3) % (n - 1);
                    let want = match (t == e.rank() as u64, round) {
                        (true, _) => round + 1,
                        (false, 0) => u64::MAX, // the first put, to every target
                        (false, _) => 0,
                    };
                    assert_eq!(mine[round as usize], want, "round {round}");
                }
            }
            win.free()?;
            Ok(())
        });
    }
}

// ----- tiny pools ------------------------------------------------------------------------

/// Large ops by message: a put whose call leaves it queued (its lock not yet granted)
/// keeps the bytes it was called with, though the caller reuses its buffer at once; a
/// burst of gets keeps at most `AM_BACKLOG_MAX` of replies owed, waiting in the ops'
/// calls for the rest (counted), and every byte arrives where it was asked to.
#[test]
fn large_ops_by_message_keep_their_bytes_and_a_bounded_backlog() {
    const OPS: usize = 12;
    const LEN: usize = 64 * 1024; // u64 elements: 512 KiB per op
    run(2, Profile::ActiveMessages, 21, config(), |e| {
        let win = e.allocate::<u64>(OPS * LEN)?;
        let pattern = |op: usize, i: usize| (op as u64) << 32 | i as u64;
        if e.rank() == 0 {
            let before = win.stats();
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            // One buffer for every put, rewritten after each call returns.
            let mut data = vec![0u64; LEN];
            for op in 0..OPS {
                for (i, x) in data.iter_mut().enumerate() {
                    *x = pattern(op, i);
                }
                win.put(&data, 1, (op * LEN) as u64)?;
            }
            data.fill(u64::MAX);
            win.flush(1)?;
            let mut got = vec![vec![0u64; LEN]; OPS];
            let pending = got
                .iter_mut()
                .enumerate()
                .map(|(op, buf)| win.get_into(1, (op * LEN) as u64, buf))
                .collect::<Result<Vec<_>>>()?;
            for p in pending {
                p.wait()?;
            }
            win.unlock(1)?;
            for (op, buf) in got.iter().enumerate() {
                let wrong = (0..LEN).find(|&i| buf[i] != pattern(op, i));
                assert_eq!(wrong, None, "op {op}: first wrong element");
            }
            let stats = win.stats().since(&before);
            // The first put waited for its lock in the queue (its bytes copied then).
            assert!(stats.ops_queued >= 1, "{stats:?}");
            assert!(stats.ops_waited_for_backlog >= 1, "{stats:?}");
        }
        e.barrier()?;
        if e.rank() == 1 {
            let mine = win.local_to_vec();
            for op in 0..OPS {
                let wrong = (0..LEN).find(|&i| mine[op * LEN + i] != pattern(op, i));
                assert_eq!(wrong, None, "op {op} at the target: first wrong element");
            }
        }
        win.free()?;
        Ok(())
    });
}

/// Gets into buffers of their own (`get_owned`), large (in pieces by message) and
/// small, on every path: replies by message land as they arrive, native ones at the
/// wait or in the call; each request hands its buffer back with exactly the target's
/// bytes.
#[test]
fn gets_into_owned_buffers_hand_them_back_filled() {
    for profile in [
        Profile::ActiveMessages,
        Profile::Rdma,
        Profile::SharedMemory,
    ] {
        run(2, profile, 22, config(), |e| {
            const LEN: usize = 300 * 1024; // u32 elements: 1.2 MB, pieces by message
            let win = e.allocate::<u32>(LEN)?;
            let peer = (e.rank() + 1) % 2;
            let value = |rank: u32, i: usize| rank << 24 | i as u32;
            win.lock_all(Assert::NONE)?;
            let mine: Vec<u32> = (0..LEN).map(|i| value(e.rank(), i)).collect();
            win.put(&mine, e.rank(), 0)?;
            win.flush_all()?;
            e.barrier()?;
            let sizes = [LEN, 7, 1000, LEN / 2];
            let requests = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    let disp = (k * 13) as u64;
                    let n = n.min(LEN - disp as usize);
                    (win.get_owned(peer, disp, vec![0; n])).map(|r| (r, disp as usize, n))
                })
                .collect::<Result<Vec<_>>>()?;
            win.flush(peer)?;
            for (r, disp, n) in requests {
                let got = r.wait()?;
                assert_eq!(got.len(), n);
                let wrong = (0..n).find(|&i| got[i] != value(peer, disp + i));
                assert_eq!(wrong, None, "get of {n} at {disp}: first wrong element");
            }
            win.unlock_all()?;
            e.barrier()?;
            win.free()?;
            Ok(())
        });
    }
}

/// Gets into buffers their requests own, from `SIM_LENT_FROM` bytes, are lent to a
/// backend that reads natively (`Transport::get_lent`): sixteen in flight before one
/// flush (some queued behind the lazy lock, some issued at once), one request dropped
/// unwaited, one waited for before the flush; every waited one hands its buffer back
/// with the target's bytes, every large get was lent (the count) and no small one, and
/// with active messages none is, with the same results.
#[test]
fn gets_into_owned_buffers_are_lent_to_the_backend_many_in_flight() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        for seed in 0..6 {
            let test = move |e: Engine| -> Result<()> {
                const LEN: usize = 4096;
                let win = e.allocate::<u64>(LEN)?;
                let peer = 1 - e.rank();
                let value = |rank: u32, i: usize| u64::from(rank) << 32 | i as u64;
                win.lock_all(Assert::NONE)?;
                let mine: Vec<u64> = (0..LEN).map(|i| value(e.rank(), i)).collect();
                win.put(&mine, e.rank(), 0)?;
                win.flush_all()?;
                e.barrier()?;
                let before = win.stats();
                // (displacement, elements): sixteen of 512 bytes and more, four of 24.
                let gets: Vec<(usize, usize)> = (0..16)
                    .map(|k| (k * 200, 64 + k * 8))
                    .chain((0..4).map(|k| (k * 5, 3)))
                    .collect();
                let mut requests = gets
                    .iter()
                    .map(|&(d, n)| {
                        let r = win.get_owned(peer, d as u64, vec![0; n])?;
                        Ok((r, d, n))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let check = |got: Vec<u64>, d: usize, n: usize| {
                    assert_eq!(got.len(), n);
                    let wrong = (0..n).find(|&i| got[i] != value(peer, d + i));
                    assert_eq!(wrong, None, "get of {n} at {d}: first wrong element");
                };
                // Dropped before it completes: its buffer goes with the loan, nothing
                // else is touched.
                drop(requests.remove(3));
                // Waited for before the flush (its wait makes progress).
                let (first, d, n) = requests.remove(0);
                check(first.wait()?, d, n);
                win.flush(peer)?;
                for (r, d, n) in requests {
                    check(r.wait()?, d, n);
                }
                // A buffer of no whole number of elements is refused, the epoch intact.
                struct Bytes(Vec<u8>);
                impl rma_core::GetBuffer for Bytes {
                    fn bytes_mut(&mut self) -> &mut [u8] {
                        &mut self.0
                    }
                }
                let odd = win.get_into_buffer(peer, 0, Bytes(vec![0; 8 * 64 + 3]));
                let refused = odd.map(drop).unwrap_err();
                let bad_layout = ErrorKind::Usage(UsageError::BadLayout);
                assert_eq!(refused.kind(), &bad_layout, "{refused}");
                let got = win.get_into_buffer(peer, 8, Bytes(vec![0; 8 * 64]))?;
                win.flush(peer)?;
                let Bytes(bytes) = got.wait()?;
                let words: Vec<u64> = bytes
                    .chunks(8)
                    .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                    .collect();
                check(words, 8, 64);
                let stats = win.stats().since(&before);
                // The sixteen large ones and the buffer of 64 elements.
                let large = 1 + gets
                    .iter()
                    .filter(|&&(_, n)| n * 8 >= sim::SIM_LENT_FROM)
                    .count() as u64;
                let lent = match profile {
                    Profile::ActiveMessages => 0,
                    _ => large,
                };
                assert_eq!(stats.gets_lent, lent, "{stats:?}");
                win.unlock_all()?;
                e.barrier()?;
                win.free()?;
                Ok(())
            };
            sim::run_with(2, profile, seed, config(), test)
                .unwrap_or_else(|e| panic!("{profile:?} seed {seed}: {e}"));
        }
    }
}

/// Puts from buffers their requests hold (`put_from_buffer`), from `SIM_LENT_FROM` bytes,
/// are lent to a backend that writes natively (`Transport::put_lent`): sixteen in flight
/// before one flush, in a lock_all epoch and then in a fence epoch, one request dropped
/// unwaited and one waited before the flush; every request hands its buffer back, the
/// target holds every put's bytes, every large put was lent (the count) and no small
/// one, and with active messages none is, with the same results. Outside an epoch, past
/// the window, or of no whole number of elements, such a put is a typed error.
#[test]
fn puts_from_held_buffers_are_lent_to_the_backend_many_in_flight() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        for seed in 0..6 {
            let test = move |e: Engine| -> Result<()> {
                const LEN: usize = 8192;
                let win = e.allocate::<u64>(LEN)?;
                let peer = 1 - e.rank();
                let value = |rank: u32, round: u64, i: usize| {
                    u64::from(rank) << 40 | round << 32 | i as u64
                };
                // (displacement, elements): sixteen of 512 bytes and more, four of 24,
                // apart.
                let puts: Vec<(usize, usize)> = (0..16)
                    .map(|k| (k * 400, 64 + k * 8))
                    .chain((0..4).map(|k| (7000 + k * 10, 3)))
                    .collect();
                // Bad input, before any epoch: each a typed error, nothing sent or lent.
                let outside = win.put_from_buffer(vec![1u64; 64], peer, 0).map(drop);
                let no_epoch = outside.unwrap_err();
                assert!(
                    matches!(
                        no_epoch.kind(),
                        ErrorKind::Usage(UsageError::NoEpoch { .. })
                    ),
                    "{no_epoch}"
                );
                win.lock_all(Assert::NONE)?;
                let past = win.put_from_buffer(vec![1u64; 64], peer, LEN as u64 - 8);
                let past = past.map(drop).unwrap_err();
                assert!(
                    matches!(
                        past.kind(),
                        ErrorKind::Usage(UsageError::OutOfBounds { .. })
                    ),
                    "{past}"
                );
                struct Bytes(Vec<u8>);
                impl rma_core::PutBuffer for Bytes {
                    fn bytes(&self) -> &[u8] {
                        &self.0
                    }
                }
                let odd = win.put_from_buffer(Bytes(vec![0; 8 * 64 + 3]), peer, 0);
                let odd = odd.map(drop).unwrap_err();
                let bad_layout = ErrorKind::Usage(UsageError::BadLayout);
                assert_eq!(odd.kind(), &bad_layout, "{odd}");
                win.unlock_all()?;
                e.barrier()?;
                let before = win.stats();
                for round in 0..2u64 {
                    if round == 0 {
                        win.lock_all(Assert::NONE)?;
                    } else {
                        win.fence(Assert::NONE)?;
                    }
                    let mut requests = puts
                        .iter()
                        .map(|&(d, n)| {
                            let data: Vec<u64> =
                                (0..n).map(|i| value(e.rank(), round, d + i)).collect();
                            Ok((win.put_from_buffer(data, peer, d as u64)?, n))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    // Dropped before it completes: its buffer goes with the loan.
                    drop(requests.remove(3));
                    // Waited before the flush: complete at the origin, its buffer back.
                    let (first, n) = requests.remove(0);
                    assert_eq!(first.wait()?.len(), n);
                    if round == 0 {
                        win.flush(peer)?;
                    } else {
                        win.fence(Assert::NONE)?;
                    }
                    for (r, n) in requests {
                        assert_eq!(r.wait()?.len(), n);
                    }
                    if round == 0 {
                        win.unlock_all()?;
                    }
                    e.barrier()?;
                    let mine = win.local_to_vec();
                    for &(d, n) in &puts {
                        let wrong = (0..n).find(|&i| mine[d + i] != value(peer, round, d + i));
                        assert_eq!(wrong, None, "round {round}: put of {n} at {d}: first wrong");
                    }
                    e.barrier()?;
                    if round == 1 {
                        win.fence(Assert::NONE)?;
                    }
                }
                let stats = win.stats().since(&before);
                let large = puts
                    .iter()
                    .filter(|&&(_, n)| n * 8 >= sim::SIM_LENT_FROM)
                    .count() as u64;
                let lent = match profile {
                    Profile::ActiveMessages => 0,
                    _ => 2 * large,
                };
                assert_eq!(stats.puts_lent, lent, "{stats:?}");
                e.barrier()?;
                win.free()?;
                Ok(())
            };
            sim::run_with(2, profile, seed, config(), test)
                .unwrap_or_else(|e| panic!("{profile:?} seed {seed}: {e}"));
        }
    }
}

fn tiny() -> Config {
    Config {
        op_pool_local: 2,
        op_pool_global: 0,
        target_pool_local: 1,
        target_pool_global: 0,
        // Rank 0's 10,000 ops through one element take 4-9 s in the debug build, and
        // past 20 s (the others' wait in the barrier after them) with three copies of
        // the suite beside a CI run on two cores: the run's own 60 s deadline is the
        // hang's bound.
        timeout: Some(Duration::from_secs(50)),
        ..config()
    }
}

const OPS: u64 = 10_000;

/// Rank 0 sends OPS accumulates round robin to ranks 1..=3; each target counts.
fn check_counts(win: &rma_core::Window<u64>, e: &Engine) -> Result<()> {
    if e.rank() != 0 {
        let expect = (0..OPS).filter(|i| i % 3 + 1 == e.rank() as u64).count() as u64;
        assert_eq!(win.local_to_vec()[0], expect, "rank {}", e.rank());
        let even = (0..OPS)
            .filter(|i| i % 3 + 1 == e.rank() as u64 && i % 2 == 0)
            .count() as u64;
        assert_eq!(win.local_to_vec()[1], even * 4, "rank {}", e.rank());
    }
    Ok(())
}

fn blast(win: &rma_core::Window<u64>) -> Result<()> {
    for i in 0..OPS {
        let t = (i % 3 + 1) as u32;
        win.accumulate(&[1], AccOp::Sum, t, 0)?;
        win.put(&[0], t, 2)?;
        if i % 2 == 0 {
            win.accumulate(&[4], AccOp::Sum, t, 1)?;
        }
    }
    Ok(())
}

#[test]
fn tiny_pools_fence() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(4, profile, 11, tiny(), |e| {
            let win = e.allocate::<u64>(4)?;
            win.fence(Assert::NOPRECEDE)?;
            if e.rank() == 0 {
                blast(&win)?;
                assert!(win.stats().restores > 0);
                assert!(win.stats().target_elements_high_water <= 1);
                assert!(win.stats().op_elements_high_water <= 2);
            }
            win.fence(Assert::NOSUCCEED)?;
            check_counts(&win, &e)?;
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn tiny_pools_pscw() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(4, profile, 12, tiny(), |e| {
            let win = e.allocate::<u64>(4)?;
            if e.rank() == 0 {
                win.start(&[1, 2, 3], Assert::NONE)?;
                blast(&win)?;
                win.complete()?;
            } else {
                win.post(&[0], Assert::NONE)?;
                win.wait()?;
                check_counts(&win, &e)?;
            }
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn tiny_pools_lock() {
    for profile in [
        Profile::ActiveMessages,
        Profile::Rdma,
        Profile::SharedMemory,
    ] {
        run(4, profile, 13, tiny(), |e| {
            let win = e.allocate::<u64>(4)?;
            if e.rank() == 0 {
                for t in 1..=3 {
                    win.lock(LockType::Exclusive, t, Assert::NONE)?;
                }
                blast(&win)?;
                for t in 1..=3 {
                    win.unlock(t)?;
                }
            }
            e.barrier()?;
            check_counts(&win, &e)?;
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn tiny_pools_lock_all() {
    for profile in [
        Profile::ActiveMessages,
        Profile::Rdma,
        Profile::SharedMemory,
    ] {
        run(4, profile, 14, tiny(), |e| {
            let win = e.allocate::<u64>(4)?;
            if e.rank() == 0 {
                win.lock_all(Assert::NONE)?;
                blast(&win)?;
                win.unlock_all()?;
            }
            e.barrier()?;
            check_counts(&win, &e)?;
            win.free()?;
            Ok(())
        });
    }
}

// ----- progress (seed 003) and fence completion (seed 001) ----------------------------

#[test]
fn symmetric_post_start_put_complete_wait() {
    run(2, Profile::ActiveMessages, 15, config(), |e| {
        let win = e.allocate::<u32>(2)?;
        let peer = 1 - e.rank();
        win.post(&[peer], Assert::NONE)?;
        win.start(&[peer], Assert::NONE)?;
        win.put(&[e.rank() + 5], peer, 0)?;
        win.complete()?;
        win.wait()?;
        assert_eq!(win.local_to_vec()[0], peer + 5);
        win.free()?;
        Ok(())
    });
}

#[test]
fn complete_does_not_wait_for_the_targets_wait() {
    // Rank 0: start, put, complete, then "send" (a barrier); rank 1: post, "recv" (the
    // barrier), wait. Complete must not need rank 1 to be in wait.
    run(2, Profile::ActiveMessages, 16, config(), |e| {
        let win = e.allocate::<u32>(2)?;
        if e.rank() == 0 {
            win.start(&[1], Assert::NONE)?;
            win.put(&[77], 1, 1)?;
            win.complete()?;
            e.barrier()?;
        } else {
            win.post(&[0], Assert::NONE)?;
            e.barrier()?;
            win.wait()?;
            assert_eq!(win.local_to_vec()[1], 77);
        }
        win.free()?;
        Ok(())
    });
}

#[test]
fn fence_completes_at_target_so_a_later_lock_get_sees_the_put() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(3, profile, 17, config(), |e| {
            let win = e.allocate::<u64>(2)?;
            win.fence(Assert::NONE)?;
            if e.rank() == 0 {
                win.put(&[1234], 1, 0)?;
            }
            win.fence(Assert::NOSUCCEED)?;
            // No other synchronization: the fence completed the put at rank 1 (seed 001).
            if e.rank() == 2 {
                win.lock(LockType::Shared, 1, Assert::NOCHECK)?;
                let g = win.get(1, 0, 1)?;
                win.unlock(1)?;
                assert_eq!(g.wait()?, vec![1234]);
            }
            e.barrier()?;
            win.free()?;
            Ok(())
        });
    }
}

// ----- mutual exclusion and atomicity ------------------------------------------------

#[test]
fn exclusive_locks_exclude() {
    for profile in [
        Profile::ActiveMessages,
        Profile::Rdma,
        Profile::SharedMemory,
    ] {
        run(4, profile, 18, config(), |e| {
            let win = e.allocate::<u64>(1)?;
            for _ in 0..300 {
                // A non-atomic read-modify-write, safe only under mutual exclusion.
                win.lock(LockType::Exclusive, 0, Assert::NONE)?;
                let v = win.get(0, 0, 1)?.wait()?[0];
                win.put(&[v + 1], 0, 0)?;
                win.unlock(0)?;
            }
            e.barrier()?;
            if e.rank() == 0 {
                assert_eq!(win.local_to_vec()[0], 1200);
            }
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn concurrent_accumulates_are_atomic() {
    for profile in [Profile::ActiveMessages, Profile::Rdma, Profile::OrderedPuts] {
        run(4, profile, 19, config(), |e| {
            let win = e.allocate::<u64>(4)?;
            win.lock_all(Assert::NONE)?;
            let mut olds = Vec::new();
            for i in 0..500u64 {
                win.accumulate(&[1, 2, 3, 4], AccOp::Sum, 0, 0)?;
                win.accumulate(&[i + 1000 * e.rank() as u64], AccOp::Max, 1, 3)?;
                olds.push(win.fetch_and_op(1, AccOp::Sum, 1, 0)?);
            }
            win.flush_all()?;
            let olds: Vec<u64> = olds.into_iter().map(|r| r.wait()).collect::<Result<_>>()?;
            assert!(
                olds.windows(2).all(|w| w[0] < w[1]),
                "fetch_and_op results of one origin increase: {olds:?}"
            );
            win.unlock_all()?;
            e.barrier()?;
            match e.rank() {
                0 => assert_eq!(win.local_to_vec(), vec![2000, 4000, 6000, 8000]),
                1 => assert_eq!((win.local_to_vec()[0], win.local_to_vec()[3]), (2000, 3499)),
                _ => {}
            }
            win.free()?;
            Ok(())
        });
    }
}

#[test]
fn threads_may_put_and_flush_concurrently() {
    run(2, Profile::ActiveMessages, 20, config(), |e| {
        let win = e.allocate::<u64>(64)?;
        win.lock_all(Assert::NONE)?;
        if e.rank() == 0 {
            std::thread::scope(|s| {
                for t in 0..4u64 {
                    let win = &win;
                    s.spawn(move || -> Result<()> {
                        for k in 0..16u64 {
                            win.put(&[t * 100 + k], 1, t * 16 + k)?;
                            if k % 4 == 0 {
                                win.flush(1)?;
                            }
                        }
                        win.flush(1)
                    });
                }
            });
        }
        win.unlock_all()?;
        e.barrier()?;
        if e.rank() == 1 {
            let v = win.local_to_vec();
            for t in 0..4u64 {
                for k in 0..16u64 {
                    assert_eq!(v[(t * 16 + k) as usize], t * 100 + k);
                }
            }
        }
        win.free()?;
        Ok(())
    });
}

// ----- misuse and failures -------------------------------------------------------------

fn usage<T: std::fmt::Debug>(r: Result<T>) -> UsageError {
    match r.map_err(Error::into_kind) {
        Err(ErrorKind::Usage(u)) => u,
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn misuse_gets_typed_errors_and_changes_nothing() {
    run(2, Profile::ActiveMessages, 21, config(), |e| {
        let win = e.allocate::<f64>(4)?;
        let peer = 1 - e.rank();
        assert!(matches!(
            usage(win.put(&[1.0], peer, 0)),
            UsageError::NoEpoch { .. }
        ));
        assert!(matches!(
            usage(win.unlock(peer)),
            UsageError::NotLocked { .. }
        ));
        assert!(matches!(usage(win.wait()), UsageError::NoExposureEpoch));
        assert!(matches!(
            usage(win.flush(peer)),
            UsageError::EpochConflict { .. }
        ));
        assert!(matches!(
            usage(win.put(&[1.0], 9, 0)),
            UsageError::RankOutOfRange { .. }
        ));
        win.lock(LockType::Shared, peer, Assert::NONE)?;
        assert!(matches!(
            usage(win.lock(LockType::Shared, peer, Assert::NONE)),
            UsageError::AlreadyLocked { .. }
        ));
        assert!(matches!(
            usage(win.put(&[1.0; 2], peer, 3)),
            UsageError::OutOfBounds { .. }
        ));
        assert!(matches!(
            usage(win.accumulate(&[1.0], AccOp::Band, peer, 0)),
            UsageError::OpNotForType { .. }
        ));
        assert!(matches!(
            usage(win.lock_all(Assert::NONE)),
            UsageError::EpochConflict { .. }
        ));
        assert!(matches!(
            usage(win.fence(Assert::NONE)),
            UsageError::EpochConflict { .. }
        ));
        assert!(matches!(
            usage(win.lock(LockType::Shared, peer, Assert::NOPRECEDE)),
            UsageError::BadAssert { .. }
        ));
        win.unlock(peer)?;
        win.start(&[peer], Assert::NONE)?;
        assert!(matches!(
            usage(win.put(&[1.0], e.rank(), 0)),
            UsageError::NotInGroup { .. }
        ));
        win.post(&[peer], Assert::NONE)?;
        assert!(matches!(
            usage(win.post(&[peer], Assert::NONE)),
            UsageError::EpochConflict { .. }
        ));
        win.complete()?;
        win.wait()?;
        // Nothing above reached any window.
        assert_eq!(win.local_to_vec(), vec![0.0; 4]);
        e.barrier()?;
        win.lock_all(Assert::NONE)?;
        let open = e.allocate::<u8>(1);
        drop(open);
        win.unlock_all()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn free_with_an_open_epoch_is_refused() {
    run(1, Profile::ActiveMessages, 22, config(), |e| {
        let win = e.allocate::<u8>(8)?;
        win.lock_all(Assert::NONE)?;
        let w2 = e.allocate::<u8>(8)?;
        w2.lock(LockType::Exclusive, 0, Assert::NONE)?;
        // The window comes back: its epoch can be closed and the free tried again.
        let refused = w2.free().unwrap_err();
        assert_eq!(refused.error.usage(), Some(&UsageError::EpochOpen));
        let w2 = refused.window;
        w2.unlock(0)?;
        w2.free()?;
        win.unlock_all()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn a_dead_peer_fails_blocking_calls_instead_of_hanging() {
    let net = sim::Network::new(2, Profile::ActiveMessages, 23);
    let killer = net.clone();
    let started = std::time::Instant::now();
    let out = sim::run_on(&net, config(), Duration::from_secs(30), move |e| {
        let win = e.allocate::<u64>(4)?;
        if e.rank() == 1 {
            // Dies mid-epoch without a word.
            killer.kill(1);
            return Ok(());
        }
        win.lock(LockType::Exclusive, 1, Assert::NONE)?;
        win.put(&[1, 2], 1, 0)?;
        match win.unlock(1).map_err(Error::into_kind) {
            Err(ErrorKind::Peer(PeerError::Dead { rank: 1 })) => Ok(()),
            other => panic!("expected a dead peer, got {other:?}"),
        }
    });
    out.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_first_death_known_is_named_not_the_messenger_that_left_after_it() {
    // Rank 1 dies; rank 2 sees it, abandons its window (the departure blames rank 1) and
    // then its process ends too; rank 0, out of the library meanwhile, finds all of it in
    // one poll: the blame, then both ranks failed. It names rank 1, the first death it
    // knew of (from the blame), not rank 2, whose end is the messenger's (on verbs: its
    // deregistered window refusing rank 0's write, a remote access error).
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    static PAST_FIRST_FENCE: AtomicUsize = AtomicUsize::new(0);
    static RANK_2_ENDED: AtomicBool = AtomicBool::new(false);
    let wait_for = |done: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "never came");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let net = sim::Network::new(3, Profile::ActiveMessages, 29);
    let killer = net.clone();
    let out = sim::run_on(&net, config(), Duration::from_secs(30), move |e| {
        let win = e.allocate::<u64>(4)?;
        win.fence(Assert::NOPRECEDE)?;
        PAST_FIRST_FENCE.fetch_add(1, Ordering::SeqCst);
        match e.rank() {
            1 => {
                wait_for(&|| PAST_FIRST_FENCE.load(Ordering::SeqCst) == 3);
                killer.kill(1);
            }
            2 => {
                let seen = win.fence(Assert::NONE).map_err(Error::into_kind);
                assert!(
                    matches!(seen, Err(ErrorKind::Peer(PeerError::Dead { rank: 1 }))),
                    "rank 2: {seen:?}"
                );
                drop(win);
                killer.kill(2);
                RANK_2_ENDED.store(true, Ordering::SeqCst);
            }
            _ => {
                wait_for(&|| RANK_2_ENDED.load(Ordering::SeqCst));
                let seen = win.fence(Assert::NONE).map_err(Error::into_kind);
                assert!(
                    matches!(seen, Err(ErrorKind::Peer(PeerError::Dead { rank: 1 }))),
                    "rank 0 named the messenger: {seen:?}"
                );
            }
        }
        Ok(())
    });
    out.unwrap();
}

// ----- threads and progress ------------------------------------------------------------

#[test]
fn async_progress_lets_passive_target_complete_while_the_target_computes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    let cfg = config_with_progress_agent();
    run(2, Profile::ActiveMessages, 24, cfg, |e| {
        let win = e.allocate::<u64>(2)?;
        e.barrier()?;
        if e.rank() == 0 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            win.put(&[5, 6], 1, 0)?;
            win.unlock(1)?;
            DONE.store(true, Ordering::SeqCst);
        } else {
            // Compute without a single library call until the origin is done.
            let start = std::time::Instant::now();
            while !DONE.load(Ordering::SeqCst) {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "origin waited on the computing target"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(win.local_to_vec(), vec![5, 6]);
        }
        e.barrier()?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn overlapping_sync_calls_from_two_threads_are_refused() {
    run(2, Profile::ActiveMessages, 25, config(), |e| {
        let win = e.allocate::<u64>(2)?;
        win.fence(Assert::NOPRECEDE)?;
        if e.rank() == 0 {
            std::thread::scope(|s| -> Result<()> {
                // Thread A: a fence that blocks until rank 1 joins it.
                let a = s.spawn(|| win.fence(Assert::NONE));
                std::thread::sleep(Duration::from_millis(100));
                // Thread B: a second fence while A's is in progress (not allowed by seed 004).
                let b = win.fence(Assert::NONE);
                assert!(
                    matches!(
                        b.as_ref().map_err(Error::kind),
                        Err(ErrorKind::Usage(UsageError::ConcurrentSync { .. }))
                    ),
                    "{b:?}"
                );
                a.join().expect("thread A")
            })?;
        } else {
            std::thread::sleep(Duration::from_millis(400));
            win.fence(Assert::NONE)?;
        }
        win.fence(Assert::NOSUCCEED)?;
        win.free()?;
        Ok(())
    });
}

#[test]
fn shared_windows_give_peer_addresses_where_memory_is_shared() {
    run(2, Profile::Rdma, 26, config(), |e| {
        let win = e.allocate_shared::<u32>(16)?;
        let (base0, len0) = win.shared_query(0)?;
        let (base1, len1) = win.shared_query(1)?;
        assert!(base0 != 0 && base1 != 0 && base0 != base1);
        assert_eq!((len0, len1), (64, 64));
        assert!(matches!(
            usage(win.shared_query(7)),
            UsageError::RankOutOfRange { .. }
        ));
        win.free()?;
        // Any flavor whose memory the backend maps here (MPI-4.1 12.2.3): this
        // profile's segments are all in the process; a dynamic window has none.
        let plain = e.allocate::<u32>(4)?;
        let (base, len) = plain.shared_query(1 - e.rank())?;
        assert!(base != 0 && len == 16);
        plain.free()?;
        let dynamic = e.create_dynamic::<u32>()?;
        assert!(matches!(
            usage(dynamic.shared_query(0)),
            UsageError::Unsupported { .. }
        ));
        dynamic.free()?;
        Ok(())
    });
    run(2, Profile::ActiveMessages, 27, config(), |e| {
        assert!(matches!(
            e.allocate_shared::<u32>(4).map_err(Error::into_kind),
            Err(ErrorKind::Transport(_))
        ));
        Ok(())
    });
}

#[test]
fn consecutive_noprecede_fences_with_native_and_message_barriers() {
    for profile in [Profile::ActiveMessages, Profile::SharedMemory] {
        run(3, profile, 29, config(), |e| {
            let win = e.allocate::<u64>(3)?;
            // Non-blocking fences in a row: barriers overlap (messages) or wait for each
            // other (native), and none is lost.
            for _ in 0..5 {
                win.fence(Assert::NOPRECEDE)?;
            }
            let n = e.size();
            win.put(&[e.rank() as u64 + 1], (e.rank() + 1) % n, e.rank() as u64)?;
            win.fence(Assert::NOSUCCEED)?;
            let left = (e.rank() + n - 1) % n;
            assert_eq!(win.local_to_vec()[left as usize], left as u64 + 1);
            win.free()?;
            Ok(())
        });
    }
}

// ----- communicators ----------------------------------------------------------------------

/// Rounds of a communicator's collectives, counted in messages per rank: barrier,
/// allgather and allreduce ceil(log2 p); a split and a window over a half, one allgather
/// over the parent and two over the half; a broadcast, p - 1 messages in all.
#[test]
fn communicator_collectives_take_ceil_log2_p_rounds() {
    fn rounds(p: u32) -> u64 {
        u64::from(u32::BITS - (p.max(1) - 1).leading_zeros())
    }
    for n in 1..=9 {
        for seed in [3, 17] {
            sim::run_with(n, Profile::ActiveMessages, seed, config(), move |e| {
                let w = e.world();
                let sent = || e.stats().messages(Kind::Collective);
                let p = w.size();
                let before = sent();
                w.barrier()?;
                assert_eq!(sent() - before, rounds(p), "barrier on {p}");
                let before = sent();
                let sum = w.allreduce(&[u64::from(w.rank()) + 1], AccOp::Sum)?;
                assert_eq!(sum, vec![(p * (p + 1) / 2) as u64]);
                assert_eq!(sent() - before, rounds(p), "allreduce on {p}");
                let before = sent();
                let half = w.split(Some(w.rank() % 2), 0)?.expect("a color");
                let win = half.allocate::<u32>(2)?;
                let h = half.size();
                assert_eq!(
                    sent() - before,
                    rounds(p) + 2 * rounds(h),
                    "split on {p}, window on {h}"
                );
                win.fence(Assert::NONE)?;
                win.put(&[w.rank()], (half.rank() + 1) % h, 1)?;
                win.fence(Assert::NONE)?;
                let left = (half.rank() + h - 1) % h;
                assert_eq!(
                    win.local_to_vec()[1],
                    half.group().world_rank(left).unwrap()
                );
                win.free()?;
                let before = sent();
                let mut v = [w.rank(); 3];
                w.broadcast(&mut v, p - 1)?;
                assert_eq!(v, [p - 1; 3]);
                let mine = sent() - before;
                let all = w.allreduce(&[mine], AccOp::Sum)?;
                assert_eq!(all[0], (p - 1) as u64, "broadcast on {p}");
                Ok(())
            })
            .unwrap_or_else(|err| panic!("{n} ranks, seed {seed}: {err}"));
        }
    }
}

/// A member that calls another collective than the others: every member of the
/// communicator gets a mismatch naming both calls; the others never block.
#[test]
fn mismatched_collectives_on_a_communicator_are_errors_on_its_members() {
    run(4, Profile::ActiveMessages, 9, config(), |e| {
        let w = e.world();
        let pair = w.split(Some(w.rank() / 2), 0)?.expect("a color");
        if w.rank() < 2 {
            let got = if pair.rank() == 0 {
                pair.barrier()
            } else {
                pair.allgather(&[1u8]).map(drop)
            };
            match got.map_err(Error::into_kind) {
                Err(ErrorKind::Peer(PeerError::Mismatch { call, theirs, .. })) => {
                    assert_ne!(call, theirs);
                }
                other => panic!("expected a mismatch, got {other:?}"),
            }
        } else {
            // The other pair goes on undisturbed.
            assert_eq!(pair.allreduce(&[1u8], AccOp::Sum)?, vec![2]);
        }
        Ok(())
    });
}

// ----- accumulate ordering across paths ---------------------------------------------------

/// MPI orders accumulates from one origin to one location (accumulate_ordering's
/// default), whichever path each takes. On the RDMA profile Max and Min are active
/// messages (the target's progress applies them) and Sum is native (the simulated NIC
/// applies it at once): a fetch_and_op after an accumulate by message must see it, and
/// a Min by message after a native Sum must come after it, with the target busy
/// elsewhere and deliveries late. Each wait is counted.
#[test]
fn accumulates_keep_their_order_across_the_native_and_message_paths() {
    for seed in 0..16 {
        run(2, Profile::Rdma, seed, config(), |e| {
            let win = e.allocate::<u64>(2)?;
            win.lock_all(Assert::NONE)?;
            if e.rank() == 0 {
                let before = win.stats();
                for k in 1..=40u64 {
                    // Active message, then native: the fetch sees the max.
                    win.accumulate(&[k * 100], AccOp::Max, 1, 0)?;
                    let old = win.fetch_and_op(1, AccOp::Sum, 1, 0)?.wait()?;
                    assert_eq!(old, k * 100, "round {k}: fetch_and_op overtook the max");
                    // Native, then active message: the min comes last.
                    win.accumulate(&[5], AccOp::Sum, 1, 1)?;
                    win.accumulate(&[k], AccOp::Min, 1, 1)?;
                }
                win.flush(1)?;
                let last = win.get_accumulate(&[0], AccOp::NoOp, 1, 1)?.wait()?;
                assert_eq!(last, vec![40], "a Sum overtook the Min after it");
                let s = win.stats().since(&before);
                assert!(
                    s.ops_held_for_order >= 40,
                    "every fetch_and_op after a max waits for its ack: {s:?}"
                );
                assert!(s.ops_native >= 80 && s.ops_active_message >= 80, "{s:?}");
            }
            win.unlock_all()?;
            e.barrier()?;
            win.free()?;
            Ok(())
        });
    }
}

/// The order is per location: a native Sum and a Max by message on bytes of their own
/// never wait for each other (each wait is a round trip), and the results are exact;
/// the same ops on shared bytes still wait, every time the path changes.
#[test]
fn accumulates_on_disjoint_bytes_never_wait_for_each_other_across_paths() {
    for seed in 0..8 {
        run(2, Profile::Rdma, seed, config(), |e| {
            let win = e.allocate::<u64>(8)?;
            win.lock_all(Assert::NONE)?;
            if e.rank() == 0 {
                let before = win.stats();
                for k in 1..=50u64 {
                    // Sum (native) over elements 0..4, Max (message) at 7: disjoint.
                    win.accumulate(&[1; 4], AccOp::Sum, 1, 0)?;
                    win.accumulate(&[k], AccOp::Max, 1, 7)?;
                }
                win.flush(1)?;
                let s = win.stats().since(&before);
                assert_eq!(s.ops_held_for_order, 0, "disjoint bytes waited: {s:?}");
                // The 50 Max messages and the flush's RMA_DONE: no RMA_DONE asked for
                // order.
                let messages = s.total_messages();
                assert!(messages <= 51, "{messages} messages: {s:?}");
                assert!(s.ops_native >= 50 && s.ops_active_message >= 50, "{s:?}");
                let before = win.stats();
                for k in 1..=20u64 {
                    // Element 4: Sum (native) then Max (message) on the same bytes.
                    win.accumulate(&[1], AccOp::Sum, 1, 4)?;
                    win.accumulate(&[k * 1000], AccOp::Max, 1, 4)?;
                }
                win.flush(1)?;
                let s = win.stats().since(&before);
                assert!(
                    s.ops_held_for_order >= 20,
                    "the same bytes wait at each change of path: {s:?}"
                );
                let all = win.get_accumulate(&[0; 8], AccOp::NoOp, 1, 0)?.wait()?;
                assert_eq!(all[..4], [50; 4], "sums exact");
                assert_eq!(all[4], 20 * 1000, "the last max is last");
                assert_eq!(all[7], 50, "max exact");
            }
            win.unlock_all()?;
            e.barrier()?;
            win.free()?;
            Ok(())
        });
    }
}

// ----- notified access ----------------------------------------------------------------

/// Issue #28: a notified put is the put's own message (the target counts it after
/// applying it: no second message, no round trip), on every profile (the simulation's
/// ops never complete in their call, so even its shared-memory profile sends them; the
/// native path of real shared memory, no message at all, is the conformance suite's
/// `notify` case). The target sees the count and then the data; a get and an
/// accumulate count too; a counter past the target's is an error before anything goes.
#[test]
fn a_notified_put_is_one_message_or_none_and_its_target_sees_the_data_with_the_count() {
    for profile in [
        Profile::ActiveMessages,
        Profile::Rdma,
        Profile::SharedMemory,
    ] {
        for seed in 0..4 {
            run(2, profile, seed, config(), notified_puts);
        }
    }
}

fn notified_puts(e: Engine) -> Result<()> {
    const N: u64 = 20;
    let win = e.allocate::<u64>(8)?;
    win.set_notify_count(3)?;
    win.lock_all(Assert::NONE)?;
    if e.rank() == 0 {
        let past = win.put_notify(&[1], 1, 0, 3).map_err(Error::into_kind);
        assert!(
            matches!(
                past,
                Err(ErrorKind::Usage(UsageError::NotifyIndex {
                    target: 1,
                    index: 3,
                    count: 3
                }))
            ),
            "{past:?}"
        );
        // The lock_all epoch's lock of rank 1 first (a message epoch asks for it).
        win.put(&[0], 1, 7)?;
        win.flush(1)?;
        let before = win.stats();
        for i in 1..=N {
            win.put_notify(&[i; 4], 1, 0, 0)?;
        }
        let s = win.stats().since(&before);
        assert_eq!(
            s.messages(Kind::Put),
            N,
            "one message per notified put: {s:?}"
        );
        for k in [Kind::Accumulate, Kind::Done, Kind::Lock] {
            assert_eq!(s.messages(k), 0, "nothing but the puts: {k:?} in {s:?}");
        }
        win.accumulate_notify(&[5], AccOp::Sum, 1, 4, 1)?;
        let got = win.get_notify(1, 0, 4, 2)?;
        win.flush(1)?;
        assert_eq!(got.wait()?.len(), 4);
    } else {
        for i in 1..=N {
            win.wait_notify(0, i)?;
            // Seen the count, so the data of that put (or a later one's).
            let now = win.local_to_vec()[0];
            assert!(now >= i, "count {i} seen before its data: {now}");
        }
        win.wait_notify(1, 1)?;
        assert_eq!(win.local_to_vec()[4], 5, "the notified accumulate's data");
        win.wait_notify(2, 1)?;
        assert_eq!(win.notify_value(0)?, N);
    }
    win.unlock_all()?;
    e.barrier()?;
    win.free()?;
    Ok(())
}

/// A large notified put where the backend orders messages behind puts (libfabric's tcp
/// providers): the data by one native put, the count by one Put message of no data
/// behind it, never the data as messages; a small one stays one message with its data.
/// The target sees every count after its data, whatever the seed's delays. The same
/// ops on the RDMA profile (no ordering) go as messages that carry the data.
#[test]
fn a_large_notified_put_on_an_ordered_backend_is_a_native_put_and_a_counting_message() {
    for seed in 0..6 {
        run(2, Profile::OrderedPuts, seed, config(), |e| {
            large_notified_puts(e, true)
        });
        run(2, Profile::Rdma, seed, config(), |e| {
            large_notified_puts(e, false)
        });
    }
}

fn large_notified_puts(e: Engine, ordered: bool) -> Result<()> {
    const N: u64 = 8;
    // 16 KiB a put, past the size from which the put goes natively.
    const LEN: usize = 2048;
    // The large puts' place, then 4 elements for a small one.
    let win = e.allocate::<u64>(LEN + 4)?;
    win.set_notify_count(2)?;
    win.lock_all(Assert::NONE)?;
    if e.rank() == 0 {
        win.put(&[0], 1, 0)?;
        win.flush(1)?;
        let before = win.stats();
        for i in 1..=N {
            win.put_notify(&vec![i; LEN], 1, 0, 0)?;
        }
        let s = win.stats().since(&before);
        if ordered {
            assert_eq!(s.ops_native, N, "one native put each: {s:?}");
            assert_eq!(s.messages(Kind::Put), N, "one counting message each: {s:?}");
            assert!(
                s.bytes(Kind::Put) < N * 1024,
                "no data in the counting messages: {s:?}"
            );
        } else {
            assert_eq!(s.ops_native, 0, "the data as messages: {s:?}");
            assert!(s.bytes(Kind::Put) >= N * LEN as u64 * 8, "{s:?}");
        }
        let before = win.stats();
        win.put_notify(&[7; 4], 1, LEN as u64, 1)?;
        let s = win.stats().since(&before);
        assert_eq!(
            (s.ops_native, s.messages(Kind::Put)),
            (0, 1),
            "a small notified put is one message with its data: {s:?}"
        );
        win.flush(1)?;
    } else {
        for i in 1..=N {
            win.wait_notify(0, i)?;
            // The count seen, so every element of that put is there (or a later one's).
            let now = win.local_to_vec()[..LEN].to_vec();
            assert!(
                now.iter().all(|v| *v >= i),
                "count {i} seen before all its data: {:?}",
                now.iter().min()
            );
        }
        win.wait_notify(1, 1)?;
        assert_eq!(win.local_to_vec()[LEN..], [7; 4]);
        assert_eq!(win.notify_value(0)?, N);
    }
    win.unlock_all()?;
    e.barrier()?;
    win.free()?;
    Ok(())
}

/// Where the transport carries a put's notice with it (`Capabilities::notified_puts`:
/// verbs' RDMA WRITE with immediate data), a notified put of any size is one native op
/// and no message; the target counts the notice its transport reports, after the data,
/// and a count read after the origin's flush and a barrier includes every put. A counter
/// past what the notice can name goes as a message, counted the same.
#[test]
fn a_notified_put_the_transport_carries_is_one_native_op_and_no_message() {
    for seed in 0..6 {
        run(
            2,
            Profile::RdmaNotified,
            seed,
            config(),
            transport_notified_puts,
        );
    }
}

fn transport_notified_puts(e: Engine) -> Result<()> {
    const N: u64 = 12;
    // 16 KiB, past one active message on other backends.
    const LEN: usize = 2048;
    let far = rma_core::transport::NOTICE_LIMIT;
    let win = e.allocate::<u64>(LEN + 4)?;
    win.set_notify_count(far + 1)?;
    win.lock_all(Assert::NONE)?;
    if e.rank() == 0 {
        win.put(&[0], 1, 0)?;
        win.flush(1)?;
        let before = win.stats();
        for i in 1..=N {
            let len = if i % 2 == 0 { LEN } else { 4 };
            win.put_notify(&vec![i; len], 1, 0, 0)?;
        }
        let s = win.stats().since(&before);
        assert_eq!(s.ops_native, N, "one native op each: {s:?}");
        assert_eq!(s.total_messages(), 0, "no message: {s:?}");
        let before = win.stats();
        win.put_notify(&[7; 4], 1, LEN as u64, far)?;
        let s = win.stats().since(&before);
        assert_eq!(
            (s.ops_native, s.messages(Kind::Put)),
            (0, 1),
            "a counter past the notice's bits: one message: {s:?}"
        );
        win.flush(1)?;
    } else {
        for i in 1..=N {
            win.wait_notify(0, i)?;
            // The count seen, so that put's data is there (or a later one's).
            let now = win.local_to_vec()[0];
            assert!(now >= i, "count {i} seen before its data: {now}");
        }
    }
    win.unlock_all()?;
    e.barrier()?;
    if e.rank() == 1 {
        assert_eq!(win.notify_value(0)?, N);
        assert_eq!(win.notify_value(far)?, 1);
        assert_eq!(win.local_to_vec()[LEN..], [7; 4]);
    }
    e.barrier()?;
    win.free()?;
    Ok(())
}

/// MINLOC/MAXLOC on pairs: one Accumulate message each where nothing is native (no put,
/// get or lock for them), none at all where the backend updates
/// pairs natively (`locked_atomics`: the simulated shared memory), and never natively where
/// the backend has only plain atomics (`Profile::Rdma`). The target's pairs end exact.
#[test]
fn a_pair_update_is_one_message_or_none_and_lands_whole() {
    for (profile, updates) in [
        (
            Profile::ActiveMessages,
            pair_updates_by_message as fn(Engine) -> Result<()>,
        ),
        (Profile::Rdma, pair_updates_by_message),
        (Profile::SharedMemory, pair_updates_native),
    ] {
        for seed in 0..3 {
            run(2, profile, seed, config(), updates);
        }
    }
}

fn pair_updates_by_message(e: Engine) -> Result<()> {
    pair_updates(e, false)
}

fn pair_updates_native(e: Engine) -> Result<()> {
    pair_updates(e, true)
}

fn pair_updates(e: Engine, native: bool) -> Result<()> {
    const N: u64 = 12;
    let wide = e.allocate::<LocF64>(2)?;
    let narrow = e.allocate::<LocI32>(1)?;
    wide.write_local(0, &[LocF64::new(f64::MAX, -1), LocF64::new(f64::MIN, -1)])?;
    narrow.write_local(0, &[LocI32::new(0, 0)])?;
    e.barrier()?;
    wide.lock_all(Assert::NONE)?;
    narrow.lock_all(Assert::NONE)?;
    if e.rank() == 0 {
        // The epochs' locks of rank 1 first (a message epoch asks for them).
        wide.get(1, 0, 1)?.wait()?;
        narrow.get(1, 0, 1)?.wait()?;
        let (before_wide, before_narrow) = (wide.stats(), narrow.stats());
        for i in 0..N {
            let v = (i % 5) as f64;
            wide.accumulate(&[LocF64::new(v, i as i32)], AccOp::MinLoc, 1, 0)?;
            wide.accumulate(&[LocF64::new(v, i as i32)], AccOp::MaxLoc, 1, 1)?;
        }
        let old = narrow.fetch_and_op(LocI32::new(7, 70), AccOp::MaxLoc, 1, 0)?;
        assert_eq!(old.wait()?, LocI32::new(0, 0));
        // Counted once all are out (more than the op elements a target takes at once
        // wait their turn).
        wide.flush(1)?;
        let (w, n) = (
            wide.stats().since(&before_wide),
            narrow.stats().since(&before_narrow),
        );
        let messages = w.total_messages() + n.total_messages();
        if native {
            assert_eq!(messages, 0, "pairs native: {w:?} {n:?}");
        } else {
            assert_eq!(
                w.messages(Kind::Accumulate),
                2 * N,
                "one message per pair update: {w:?}"
            );
            assert_eq!(n.messages(Kind::GetAccumulate), 1, "{n:?}");
            for k in [Kind::Lock, Kind::Put, Kind::Get] {
                assert_eq!(w.messages(k) + n.messages(k), 0, "nothing else: {k:?}");
            }
        }
    }
    wide.unlock_all()?;
    narrow.unlock_all()?;
    e.barrier()?;
    if e.rank() == 1 {
        // Values 0..4 repeat: the first 0 (location 0) and the first 4 (location 4).
        assert_eq!(
            wide.local_to_vec(),
            vec![LocF64::new(0.0, 0), LocF64::new(4.0, 4)]
        );
        assert_eq!(narrow.local_to_vec(), vec![LocI32::new(7, 70)]);
    }
    wide.free()?;
    narrow.free()?;
    Ok(())
}

/// A get waited for into the caller's buffer gives its result buffer back to the backend
/// once copied (`Transport::recycle_fetched`), for the next get to read into: every one
/// of them as active messages (each reply a result on the heap), and those of the RDMA
/// profile that completed after their call (the others completed in it). The data is
/// exact either way.
#[test]
fn gets_into_a_buffer_give_their_result_buffers_back() {
    const GETS: u64 = 40;
    for (profile, seed) in [(Profile::ActiveMessages, 51), (Profile::Rdma, 52)] {
        let net = sim::Network::new(2, profile, seed);
        sim::run_on(&net, config(), Duration::from_secs(30), |e| {
            let win = e.allocate::<u64>(64)?;
            if e.rank() == 1 {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                win.put(&(0..64).map(|i| 1000 + i).collect::<Vec<u64>>(), 1, 0)?;
                win.unlock(1)?;
            }
            e.barrier()?;
            if e.rank() == 0 {
                win.lock_all(Assert::NONE)?;
                let mut buf = vec![0u64; 64];
                for round in 0..GETS {
                    buf.fill(0);
                    let n = 3 + (round as usize % 61);
                    win.get_into(1, 0, &mut buf[..n])?.wait()?;
                    assert!(buf[..n]
                        .iter()
                        .enumerate()
                        .all(|(i, v)| *v == 1000 + i as u64));
                    assert!(buf[n..].iter().all(|v| *v == 0), "nothing past the get");
                }
                win.unlock_all()?;
            }
            e.barrier()?;
            win.free()?;
            Ok(())
        })
        .unwrap_or_else(|err| panic!("{profile:?}: {err}"));
        let recycled = net.fetched_recycled();
        match profile {
            Profile::ActiveMessages => assert_eq!(recycled, GETS),
            _ => assert!(
                (1..=GETS).contains(&recycled),
                "{recycled} of {GETS} gets recycled"
            ),
        }
    }
}

#[test]
fn pscw_with_native_notices_and_progress_agents_loses_no_notice() {
    // The hybrid litmus's shape (a CI run hung in it once: rank 0 in complete, rank 1 in
    // wait): native post and complete notices, each process's progress agent passing
    // over the window beside the application's thread, two more ranks idle.
    let cfg = config_with_progress_agent();
    run(4, Profile::SharedMemory, 31, cfg, |e| {
        let win = e.allocate::<u64>(2)?;
        e.barrier()?;
        for i in 1..=5_000u64 {
            match e.rank() {
                0 => {
                    win.start(&[1], Assert::NONE)?;
                    win.put(&[i], 1, 0)?;
                    win.put(&[i], 1, 1)?;
                    win.complete()?;
                }
                1 => {
                    win.post(&[0], Assert::NONE)?;
                    win.wait()?;
                    assert_eq!(win.local_to_vec(), vec![i, i], "round {i}");
                }
                _ => break,
            }
        }
        e.barrier()?;
        win.free()?;
        Ok(())
    });
}
