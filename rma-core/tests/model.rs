//! Property tests: random well-formed epoch programs on 2-4 simulated ranks against a
//! sequential model, and random ill-formed call sequences that must end in typed errors.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rma_core::sim::{self, Profile};
use rma_core::{
    AccOp, Assert, Config, Error, ErrorKind, LockType, PeerError, Rank, Request, Result,
};

/// Window layout per rank (u64): slot `o` (o < 4) is written only by origin `o`; slots
/// 4..8 take sum accumulates and fetch-and-adds from anyone.
const SLOTS: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    Put {
        target: Rank,
        value: u64,
    },
    Acc {
        target: Rank,
        slot: usize,
        value: u64,
    },
    Fop {
        target: Rank,
        slot: usize,
        value: u64,
    },
    Get {
        target: Rank,
        slot: usize,
    },
}

impl Op {
    fn target(&self) -> Rank {
        match self {
            Op::Put { target, .. }
            | Op::Acc { target, .. }
            | Op::Fop { target, .. }
            | Op::Get { target, .. } => *target,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Fence,
    LockAll,
    LockShared,
    LockExclusive,
    Pscw,
}

#[derive(Debug, Clone)]
struct Epoch {
    mode: Mode,
    /// ops[origin]
    ops: Vec<Vec<Op>>,
}

#[derive(Debug, Clone)]
struct Program {
    ranks: usize,
    epochs: Vec<Epoch>,
    profile: Profile,
    tiny_pools: bool,
    piggyback: bool,
    single_op: bool,
}

fn op_strategy(ranks: usize) -> impl Strategy<Value = Op> {
    let t = 0..ranks as Rank;
    prop_oneof![
        (t.clone(), 1..1000u64).prop_map(|(target, value)| Op::Put { target, value }),
        (t.clone(), 4..SLOTS, 1..100u64).prop_map(|(target, slot, value)| Op::Acc {
            target,
            slot,
            value
        }),
        (t.clone(), 4..SLOTS, 1..100u64).prop_map(|(target, slot, value)| Op::Fop {
            target,
            slot,
            value
        }),
        (t, 0..ranks).prop_map(|(target, slot)| Op::Get { target, slot }),
    ]
}

fn program() -> impl Strategy<Value = Program> {
    (2..=4usize)
        .prop_flat_map(|ranks| {
            let mode = prop_oneof![
                Just(Mode::Fence),
                Just(Mode::LockAll),
                Just(Mode::LockShared),
                Just(Mode::LockExclusive),
                Just(Mode::Pscw)
            ];
            let epoch = (
                mode,
                prop::collection::vec(prop::collection::vec(op_strategy(ranks), 0..6), ranks),
            )
                .prop_map(|(mode, ops)| Epoch { mode, ops });
            (
                Just(ranks),
                prop::collection::vec(epoch, 1..4),
                prop_oneof![
                    Just(Profile::ActiveMessages),
                    Just(Profile::Rdma),
                    Just(Profile::SharedMemory),
                    Just(Profile::OrderedPuts)
                ],
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(
            |(ranks, mut epochs, profile, tiny_pools, piggyback, single_op)| {
                for e in &mut epochs {
                    // One put per (origin, target) per epoch: puts to one location in one
                    // epoch are otherwise unordered in MPI.
                    for ops in &mut e.ops {
                        let mut seen = Vec::new();
                        ops.retain(|op| match op {
                            Op::Put { target, .. } if seen.contains(target) => false,
                            Op::Put { target, .. } => {
                                seen.push(*target);
                                true
                            }
                            _ => true,
                        });
                    }
                }
                Program {
                    ranks,
                    epochs,
                    profile,
                    tiny_pools,
                    piggyback,
                    single_op,
                }
            },
        )
}

/// The sequential model: windows after each epoch, and what each get must return
/// (`None` where a put to the same slot in the same epoch makes it undefined).
/// Expected get results: [epoch][origin][nth get].
type ExpectedGets = Vec<Vec<Vec<Option<u64>>>>;

fn model(p: &Program) -> (Vec<Vec<u64>>, ExpectedGets) {
    let mut win = vec![vec![0u64; SLOTS]; p.ranks];
    let mut gets = Vec::new();
    for e in &p.epochs {
        let before = win.clone();
        let mut epoch_gets = Vec::new();
        for (origin, ops) in e.ops.iter().enumerate() {
            let mut mine = Vec::new();
            for op in ops {
                match *op {
                    Op::Put { target, value } => win[target as usize][origin] = value,
                    Op::Acc {
                        target,
                        slot,
                        value,
                    }
                    | Op::Fop {
                        target,
                        slot,
                        value,
                    } => win[target as usize][slot] += value,
                    Op::Get { target, slot } => {
                        let conflict = e.ops[slot]
                            .iter()
                            .any(|o| matches!(o, Op::Put { target: t, .. } if *t == target));
                        mine.push((!conflict).then(|| before[target as usize][slot]));
                    }
                }
            }
            epoch_gets.push(mine);
        }
        gets.push(epoch_gets);
    }
    (win, gets)
}

fn run_ops(
    win: &rma_core::Window<u64>,
    me: Rank,
    ops: &[Op],
    only: Option<Rank>,
) -> Result<Vec<Request<Vec<u64>>>> {
    let mut reqs = Vec::new();
    for op in ops.iter().filter(|o| only.is_none_or(|t| o.target() == t)) {
        match *op {
            Op::Put { target, value } => win.put(&[value], target, me as u64)?,
            Op::Acc {
                target,
                slot,
                value,
            } => win.accumulate(&[value], AccOp::Sum, target, slot as u64)?,
            Op::Fop {
                target,
                slot,
                value,
            } => drop(win.fetch_and_op(value, AccOp::Sum, target, slot as u64)?),
            Op::Get { target, slot } => reqs.push(win.get(target, slot as u64, 1)?),
        }
    }
    Ok(reqs)
}

fn execute(p: Arc<Program>) -> std::result::Result<(), String> {
    let mut config = Config {
        timeout: Some(Duration::from_secs(20)),
        ..Config::default()
    };
    if p.tiny_pools {
        config.op_pool_local = 2;
        config.op_pool_global = 0;
        config.target_pool_local = 1;
        config.target_pool_global = 0;
    }
    config.piggyback = p.piggyback;
    config.single_op = p.single_op;
    let (expect_win, expect_gets) = model(&p);
    let expect = Arc::new((expect_win, expect_gets));
    sim::run_with(p.ranks, p.profile, 99, config, move |e| {
        let me = e.rank();
        let win = e.allocate::<u64>(SLOTS)?;
        for (ei, epoch) in p.epochs.iter().enumerate() {
            let ops = &epoch.ops[me as usize];
            let mut targets: Vec<Rank> = ops.iter().map(Op::target).collect();
            targets.sort_unstable();
            targets.dedup();
            let mut reqs = Vec::new();
            match epoch.mode {
                Mode::Fence => {
                    win.fence(Assert::NONE)?;
                    reqs = run_ops(&win, me, ops, None)?;
                    win.fence(Assert::NONE)?;
                }
                Mode::LockAll => {
                    e.barrier()?;
                    win.lock_all(Assert::NONE)?;
                    reqs = run_ops(&win, me, ops, None)?;
                    win.unlock_all()?;
                    e.barrier()?;
                }
                Mode::LockShared => {
                    e.barrier()?;
                    for &t in &targets {
                        win.lock(LockType::Shared, t, Assert::NONE)?;
                    }
                    reqs = run_ops(&win, me, ops, None)?;
                    for &t in &targets {
                        win.unlock(t)?;
                    }
                    e.barrier()?;
                }
                Mode::LockExclusive => {
                    e.barrier()?;
                    // One exclusive lock at a time (several at once may deadlock).
                    let mut by_target = Vec::new();
                    for &t in &targets {
                        win.lock(LockType::Exclusive, t, Assert::NONE)?;
                        by_target.push((t, run_ops(&win, me, ops, Some(t))?));
                        win.unlock(t)?;
                    }
                    // Restore the posting order of gets for the check below.
                    let mut order: Vec<Request<Vec<u64>>> = Vec::new();
                    let mut per: Vec<(Rank, std::vec::IntoIter<Request<Vec<u64>>>)> = by_target
                        .into_iter()
                        .map(|(t, r)| (t, r.into_iter()))
                        .collect();
                    for op in ops {
                        if let Op::Get { target, .. } = op {
                            let it = &mut per
                                .iter_mut()
                                .find(|(t, _)| t == target)
                                .expect("target locked")
                                .1;
                            order.push(it.next().expect("one request per get"));
                        }
                    }
                    reqs = order;
                    e.barrier()?;
                }
                Mode::Pscw => {
                    let origins: Vec<Rank> = (0..p.ranks as Rank)
                        .filter(|o| epoch.ops[*o as usize].iter().any(|op| op.target() == me))
                        .collect();
                    if !origins.is_empty() {
                        win.post(&origins, Assert::NONE)?;
                    }
                    if !targets.is_empty() {
                        win.start(&targets, Assert::NONE)?;
                        reqs = run_ops(&win, me, ops, None)?;
                        win.complete()?;
                    }
                    if !origins.is_empty() {
                        win.wait()?;
                    }
                }
            }
            for (r, want) in reqs.into_iter().zip(&expect.1[ei][me as usize]) {
                let got = r.wait()?[0];
                if let Some(want) = want {
                    assert_eq!(got, *want, "get in epoch {ei}");
                }
            }
        }
        e.barrier()?;
        assert_eq!(
            win.local_to_vec(),
            expect.0[me as usize],
            "final window of rank {me}"
        );
        win.free()?;
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn well_formed_programs_match_the_sequential_model(p in program()) {
        let p = Arc::new(p);
        let out = execute(p.clone());
        prop_assert!(out.is_ok(), "{:?}: {:?}", p, out);
    }
}

// ----- ill-formed sequences ------------------------------------------------------------

#[derive(Debug, Clone)]
enum Call {
    Put(Rank, u64),
    Get(Rank, u64),
    Acc(Rank, bool),
    Fence(u32),
    Start(Rank),
    Complete,
    Post(Rank),
    Wait,
    Test,
    Lock(bool, Rank, bool),
    Unlock(Rank),
    LockAll(bool),
    UnlockAll,
    Flush(Rank),
    FlushLocalAll,
}

fn call() -> impl Strategy<Value = Call> {
    let r = 0..2u32; // rank 1 does not exist in a world of one
    prop_oneof![
        (r.clone(), 0..8u64).prop_map(|(t, d)| Call::Put(t, d)),
        (r.clone(), 0..8u64).prop_map(|(t, d)| Call::Get(t, d)),
        (r.clone(), any::<bool>()).prop_map(|(t, b)| Call::Acc(t, b)),
        (0..32u32).prop_map(Call::Fence),
        r.clone().prop_map(Call::Start),
        Just(Call::Complete),
        r.clone().prop_map(Call::Post),
        Just(Call::Wait),
        Just(Call::Test),
        (any::<bool>(), r.clone(), any::<bool>()).prop_map(|(x, t, n)| Call::Lock(x, t, n)),
        r.clone().prop_map(Call::Unlock),
        any::<bool>().prop_map(Call::LockAll),
        Just(Call::UnlockAll),
        r.prop_map(Call::Flush),
        Just(Call::FlushLocalAll),
    ]
}

fn assert_bits(bits: u32) -> Assert {
    let all = [
        Assert::NOCHECK,
        Assert::NOSTORE,
        Assert::NOPUT,
        Assert::NOPRECEDE,
        Assert::NOSUCCEED,
    ];
    all.iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .fold(Assert::NONE, |a, (_, b)| a | *b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn ill_formed_sequences_end_in_typed_errors(calls in prop::collection::vec(call(), 1..24)) {
        let calls = Arc::new(calls);
        let config = Config { timeout: Some(Duration::from_millis(200)), ..Config::default() };
        let out = sim::run_with(1, Profile::ActiveMessages, 5, config, move |e| {
            let win = e.allocate::<f32>(4)?;
            for c in calls.iter() {
                let r: Result<()> = match *c {
                    Call::Put(t, d) => win.put(&[1.0], t, d),
                    Call::Get(t, d) => win.get(t, d, 1).map(drop),
                    Call::Acc(t, bitwise) => win.accumulate(&[1.0], if bitwise { AccOp::Bor } else { AccOp::Sum }, t, 0),
                    Call::Fence(bits) => win.fence(assert_bits(bits)),
                    Call::Start(t) => win.start(&[t], Assert::NONE),
                    Call::Complete => win.complete(),
                    Call::Post(t) => win.post(&[t], Assert::NONE),
                    Call::Wait => win.wait(),
                    Call::Test => win.test().map(drop),
                    Call::Lock(x, t, n) => win.lock(
                        if x { LockType::Exclusive } else { LockType::Shared },
                        t,
                        if n { Assert::NOCHECK } else { Assert::NONE },
                    ),
                    Call::Unlock(t) => win.unlock(t),
                    Call::LockAll(n) => win.lock_all(if n { Assert::NOCHECK } else { Assert::NONE }),
                    Call::UnlockAll => win.unlock_all(),
                    Call::Flush(t) => win.flush(t),
                    Call::FlushLocalAll => win.flush_local_all(),
                };
                match r.map_err(Error::into_kind) {
                    Ok(()) | Err(ErrorKind::Usage(_)) => {}
                    // A sequence may wait for something it never arranged (complete with no
                    // post): a bounded, typed timeout, never a hang.
                    Err(ErrorKind::Peer(PeerError::Timeout { .. })) => {}
                    Err(other) => panic!("{c:?} gave {other:?}"),
                }
            }
            Ok(())
        });
        prop_assert!(out.is_ok(), "{:?}", out);
    }
}
