//! Communicators across real processes: windows of every kind and sync mode over splits,
//! one-process and node communicators, overlapping communicators at once, epochs among
//! a subset while the others compute, collectives against sequential results, and the
//! typed errors of misuse.

use std::time::{Duration, Instant};

use rma::{AccOp, Assert, Comm, Error, Group, LocOp, LockType, PeerError, Rank, Result};
use rma::{ErrorKind, UsageError, World};

use crate::{check, ops};

/// `ops` over communicators: the two halves of the World (ordered by a key that reverses
/// the ranks), a one-process communicator per rank, and the node communicator.
pub(crate) fn comm_ops(world: &World, kind: &str) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    let lower = me < n / 2;
    // Which stage failed, in the error (a failure in CI names it).
    let stage = |what: &'static str| {
        move |e: Error| -> Error { rma::TransportError::Failed(format!("{what}: {e}")).into() }
    };
    let half = w
        .split(Some(u32::from(!lower)), -i64::from(me))
        .map_err(stage("split into halves"))?
        .expect("a color");
    // The half's ranks run backwards: the highest World rank of the half is its rank 0.
    let members: Vec<Rank> = (0..n).filter(|&r| (r < n / 2) == lower).rev().collect();
    check(half.group().members() == members, "split order by key")?;
    check(
        half.group().world_rank(half.rank()) == Some(me),
        "own rank in the half",
    )?;
    ops(&half, kind).map_err(stage("ops over a half"))?;
    let single = w
        .split(Some(me), 0)
        .map_err(stage("split into single ranks"))?
        .expect("a color");
    check(
        single.size() == 1 && single.rank() == 0,
        "one-process split",
    )?;
    ops(&single, kind).map_err(stage("ops over one rank"))?;
    let node = w.split_shared().map_err(stage("split_shared"))?;
    // Every member of a node communicator names the same members.
    let first = node
        .allreduce(&[node.group().members()[0]], AccOp::Min)
        .map_err(stage("allreduce over the node"))?;
    check(first[0] == node.group().members()[0], "one node, one group")?;
    if kind != "shared" || node.size() > 1 {
        ops(&node, kind).map_err(stage("ops over the node"))?;
    }
    if node.size() > 1 && kind != "shared" {
        // A node's communicator shares memory, whatever the backend between nodes.
        ops(&node, "shared").map_err(stage("shared ops over the node"))?;
    }
    w.barrier().map_err(stage("the last barrier"))
}

const LEN: usize = 5;

macro_rules! reduce_integers {
    ($c:expr, $($t:ty),*) => {$({
        let c: &Comm = $c;
        let (p, me) = (c.size() as usize, c.rank() as usize);
        let value = |r: usize, i: usize| -> $t {
            if (r + i) % 3 == 0 { 0 } else { ((r * 37 + i * 11 + 3) % 120) as $t }
        };
        let mine: Vec<$t> = (0..LEN).map(|i| value(me, i)).collect();
        for op in [AccOp::Sum, AccOp::Prod, AccOp::Min, AccOp::Max, AccOp::Band, AccOp::Bor,
                   AccOp::Bxor, AccOp::Land, AccOp::Lor, AccOp::Lxor] {
            let f = |a: $t, b: $t| -> $t {
                match op {
                    AccOp::Sum => a.wrapping_add(b),
                    AccOp::Prod => a.wrapping_mul(b),
                    AccOp::Min => a.min(b),
                    AccOp::Max => a.max(b),
                    AccOp::Band => a & b,
                    AccOp::Bor => a | b,
                    AccOp::Bxor => a ^ b,
                    AccOp::Land => (a != 0 && b != 0) as $t,
                    AccOp::Lor => (a != 0 || b != 0) as $t,
                    _ => ((a != 0) != (b != 0)) as $t,
                }
            };
            let expect: Vec<$t> = (0..LEN)
                .map(|i| (1..p).fold(value(0, i), |acc, r| f(acc, value(r, i))))
                .collect();
            let what = format!("allreduce {op:?} on {}", stringify!($t));
            check(c.allreduce(&mine, op)? == expect, &what)?;
            for root in 0..p {
                let got = c.reduce(&mine, op, root as Rank)?;
                check(got == (me == root).then(|| expect.clone()), &format!("reduce at {root}: {what}"))?;
            }
        }
    })*};
}

macro_rules! reduce_floats {
    ($c:expr, $($t:ty),*) => {$({
        let c: &Comm = $c;
        let (p, me) = (c.size() as usize, c.rank() as usize);
        let value = |r: usize, i: usize| -> $t { r as $t * 0.5 + i as $t * 0.25 - 1.0 };
        let mine: Vec<$t> = (0..LEN).map(|i| value(me, i)).collect();
        for op in [AccOp::Sum, AccOp::Prod, AccOp::Min, AccOp::Max] {
            let f = |a: $t, b: $t| -> $t {
                match op {
                    AccOp::Sum => a + b,
                    AccOp::Prod => a * b,
                    AccOp::Min => a.min(b),
                    _ => a.max(b),
                }
            };
            // In rank order: the same bits on every rank.
            let expect: Vec<$t> = (0..LEN)
                .map(|i| (1..p).fold(value(0, i), |acc, r| f(acc, value(r, i))))
                .collect();
            let what = format!("allreduce {op:?} on {}", stringify!($t));
            check(c.allreduce(&mine, op)? == expect, &what)?;
            let got = c.reduce(&mine, op, (p - 1) as Rank)?;
            check(got == (me == p - 1).then(|| expect.clone()), &format!("reduce: {what}"))?;
        }
    })*};
}

/// Every collective on one communicator, against results computed here in sequence.
fn collectives_on(c: &Comm) -> Result<()> {
    let (p, me) = (c.size(), c.rank());
    c.barrier()?;
    for root in 0..p as Rank {
        let mut data: Vec<u32> = if me == root {
            (0..7).map(|i| root * 100 + i).collect()
        } else {
            vec![0; 7]
        };
        c.broadcast(&mut data, root)?;
        check(
            data == (0..7).map(|i| root * 100 + i).collect::<Vec<_>>(),
            "broadcast",
        )?;
        let mine = [u64::from(me), u64::from(me) * u64::from(me)];
        let all: Vec<u64> = (0..p as u64).flat_map(|r| [r, r * r]).collect();
        let got = c.gather(&mine, root)?;
        check(got == (me == root).then(|| all.clone()), "gather")?;
        let parts: Vec<i16> = (0..2 * p as i16).map(|i| i - 3).collect();
        let part = c.scatter((me == root).then_some(&parts[..]), root)?;
        check(
            part == parts[2 * me as usize..2 * me as usize + 2],
            "scatter",
        )?;
    }
    let mine = [me as u16, 7, me as u16 * 3];
    let all: Vec<u16> = (0..p as u16).flat_map(|r| [r, 7, r * 3]).collect();
    check(c.allgather(&mine)? == all, "allgather")?;
    reduce_integers!(c, u8, u16, u32, u64, i8, i16, i32, i64);
    reduce_floats!(c, f32, f64);
    // MINLOC / MAXLOC: values with ties, the smallest index wins a tie.
    let pairs: Vec<(f64, u64)> = (0..3)
        .map(|i| (((u64::from(me) + i) % 2) as f64, u64::from(me) + 10 * i))
        .collect();
    let min = c.allreduce_loc(&pairs, LocOp::MinLoc)?;
    let max = c.allreduce_loc(&pairs, LocOp::MaxLoc)?;
    for i in 0..3u64 {
        let members = 0..p as u64;
        let value = |r: u64| ((r + i) % 2) as f64;
        let lo = members.clone().map(value).fold(f64::MAX, f64::min);
        let hi = members.clone().map(value).fold(f64::MIN, f64::max);
        let at = |v: f64| members.clone().find(|&r| value(r) == v).unwrap() + 10 * i;
        check(min[i as usize] == (lo, at(lo)), "minloc")?;
        check(max[i as usize] == (hi, at(hi)), "maxloc")?;
    }
    Ok(())
}

/// Collectives over the World, its parity halves, a one-process communicator, and a
/// communicator of two ranks in reverse order made by those two alone.
pub(crate) fn collectives(world: &World) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    collectives_on(&w)?;
    let parity = w.split(Some(me % 2), i64::from(me))?.expect("a color");
    collectives_on(&parity)?;
    let single = w.create(&[me])?;
    collectives_on(&single)?;
    if n >= 2 && (me == 0 || me == n - 1) {
        let pair = w.create(&[n - 1, 0])?;
        check(pair.rank() == u32::from(me == 0), "create's order")?;
        collectives_on(&pair)?;
    }
    // A count of rounds: an allreduce of 8 bytes sends ceil(log2 p) messages per rank,
    // or none where the members share memory (it then runs there, counted so).
    let before = world.stats();
    let sum = w.allreduce(&[1u64], AccOp::Sum)?;
    check(sum == [u64::from(n)], "allreduce's sum")?;
    let after = world.stats().since(&before);
    let sent = after.messages(rma::MessageKind::Collective);
    let rounds = u64::from(usize::BITS - (n as usize - 1).leading_zeros());
    let expected = if after.collectives_in_shared_memory == 1 {
        0
    } else {
        rounds
    };
    check(
        sent == expected,
        &format!(
            "allreduce sent {sent}, not {expected} messages ({} in shared memory)",
            after.collectives_in_shared_memory
        ),
    )?;
    check(
        after.collectives_in_shared_memory
            == u64::from(n > 1 && (0..n).all(|r| world.shares_memory_with(r))),
        "an allreduce among ranks that all share memory runs in it",
    )?;
    w.barrier()
}

/// Fence, PSCW and lock_all epochs among all ranks but the last, which computes and
/// calls nothing of theirs; it learns they are done from a flag they put in its memory.
pub(crate) fn subset_epochs(world: &World) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    let flag = w.allocate::<u64>(1)?;
    if me == n - 1 {
        let start = Instant::now();
        let mut x = 1u64;
        loop {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            flag.lock(LockType::Shared, me, Assert::NONE)?;
            let mut seen = [0u64];
            flag.read_local(0, &mut seen)?;
            flag.unlock(me)?;
            if seen[0] == 1 {
                break;
            }
            check(
                start.elapsed() < Duration::from_secs(60),
                "the subset finished while this rank computed",
            )?;
            std::thread::sleep(Duration::from_millis(5));
        }
        std::hint::black_box(x);
    } else {
        let members: Vec<Rank> = (0..n - 1).collect();
        let sub = w.create(&members)?;
        let (r, p) = (sub.rank(), sub.size() as Rank);
        let (right, left) = ((r + 1) % p, (r + p - 1) % p);
        let win = sub.allocate::<u64>(4)?;
        win.fence(Assert::NOPRECEDE)?;
        win.put(&[u64::from(me) + 1], right, 0)?;
        win.fence(Assert::NONE)?;
        win.post(&[left], Assert::NONE)?;
        win.start(&[right], Assert::NONE)?;
        win.accumulate(&[10], AccOp::Sum, right, 1)?;
        win.complete()?;
        win.wait()?;
        win.lock_all(Assert::NONE)?;
        for t in 0..p {
            win.accumulate(&[1], AccOp::Sum, t, 2)?;
        }
        win.flush_all()?;
        win.unlock_all()?;
        sub.barrier()?;
        let v = win.local_to_vec();
        let left_world = sub.group().world_rank(left).unwrap();
        check(
            v[..3] == [u64::from(left_world) + 1, 10, u64::from(p)],
            &format!("subset window contents {v:?}"),
        )?;
        win.free()?;
        // Out of range in the subset's numbering, though a World rank.
        check(
            matches!(
                sub.allocate::<u8>(1)?
                    .put(&[1], p, 0)
                    .map_err(Error::into_kind),
                Err(ErrorKind::Usage(UsageError::RankOutOfRange { .. }))
            ),
            "a rank past the subset",
        )?;
        if r == 0 {
            flag.lock(LockType::Exclusive, n - 1, Assert::NONE)?;
            flag.put(&[1], n - 1, 0)?;
            flag.unlock(n - 1)?;
        }
    }
    w.barrier()?;
    flag.free().map(drop).map_err(Into::into)
}

/// Windows over the World, its halves and its parity halves alive at once, their epochs
/// and the halves' collectives interleaved from one thread.
pub(crate) fn overlapping(world: &World) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    let half = w.split(Some(me / n.div_ceil(2)), 0)?.expect("a color");
    let parity = w.split(Some(me % 2), 0)?.expect("a color");
    let on_half = half.allocate::<u64>(2)?;
    let on_parity = parity.create_window(vec![0u64; 2])?;
    let on_world = w.allocate::<u64>(1)?;
    let next = |c: &Comm| (c.rank() + 1) % c.size() as Rank;
    on_half.lock_all(Assert::NONE)?;
    on_parity.fence(Assert::NOPRECEDE)?;
    on_world.lock_all(Assert::NONE)?;
    on_half.put(&[u64::from(me) + 100], next(&half), 0)?;
    let sum = half.allreduce(&[u64::from(me)], AccOp::Sum)?;
    on_parity.put(&[u64::from(me) + 200], next(&parity), 1)?;
    for t in 0..n {
        on_world.accumulate(&[u64::from(me)], AccOp::Sum, t, 0)?;
    }
    on_half.flush_all()?;
    on_parity.fence(Assert::NOSUCCEED)?;
    let max = parity.allreduce(&[me], AccOp::Max)?;
    on_world.unlock_all()?;
    on_half.unlock_all()?;
    w.barrier()?;
    let prev = |c: &Comm| {
        c.group()
            .world_rank((c.rank() + c.size() as Rank - 1) % c.size() as Rank)
            .unwrap()
    };
    check(
        on_half.local_to_vec()[0] == u64::from(prev(&half)) + 100,
        "put over the half",
    )?;
    check(
        on_parity.local_to_vec()[1] == u64::from(prev(&parity)) + 200,
        "put over the parity half",
    )?;
    check(
        on_world.local_to_vec()[0] == u64::from(n * (n - 1) / 2),
        "accumulates over the World",
    )?;
    let half_sum: u64 = half.group().members().iter().map(|&r| u64::from(r)).sum();
    check(sum[0] == half_sum, "allreduce inside an epoch")?;
    check(
        max[0] == *parity.group().members().iter().max().unwrap(),
        "allreduce over the parity half",
    )?;
    on_half.free()?;
    on_parity.free()?;
    on_world.free()?;
    Ok(())
}

/// Misuse of communicators: typed errors, on every rank where it is collective.
pub(crate) fn comm_errors(world: &World) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    let mut data = [0u8; 4];
    check(
        matches!(
            w.broadcast(&mut data, n).map_err(Error::into_kind),
            Err(ErrorKind::Usage(UsageError::RankOutOfRange { .. }))
        ),
        "a root past the communicator",
    )?;
    check(
        matches!(
            w.allreduce(&[1.5f64], AccOp::Replace)
                .map_err(Error::into_kind),
            Err(ErrorKind::Usage(UsageError::BadReduction { .. }))
        ),
        "Replace is no reduction",
    )?;
    check(
        matches!(
            w.allreduce(&[1.5f64], AccOp::Band)
                .map_err(Error::into_kind),
            Err(ErrorKind::Usage(UsageError::BadReduction { .. }))
        ),
        "a bitwise reduction of floats",
    )?;
    check(
        matches!(
            w.create(&[(me + 1) % n]).map_err(Error::into_kind),
            Err(ErrorKind::Usage(UsageError::BadGroup { .. }))
        ),
        "create by a rank outside the new group",
    )?;
    check(Group::new(&[0, 0], n).is_err(), "a rank twice")?;
    // Different collectives on one communicator: a mismatch on every member, naming
    // both calls.
    let pair = w.split(Some(me / 2), 0)?.expect("a color");
    if pair.size() == 2 {
        let got = if pair.rank() == 0 {
            pair.barrier()
        } else {
            pair.allreduce(&[1u32], AccOp::Sum).map(drop)
        };
        let theirs = if pair.rank() == 0 {
            "allreduce"
        } else {
            "barrier"
        };
        check(
            matches!(got.as_ref().map_err(Error::kind), Err(ErrorKind::Peer(PeerError::Mismatch { theirs: t, .. })) if *t == theirs),
            &format!("mismatched collectives: {got:?}"),
        )?;
    }
    // Buffers of different lengths in one allgather: the same error on every member.
    let mine = vec![1u8; 1 + (me == 0) as usize];
    check(
        matches!(
            w.allgather(&mine).map_err(Error::into_kind),
            Err(ErrorKind::Usage(UsageError::BadGroup { .. }))
        ),
        "allgather of different lengths",
    )?;
    world.barrier()
}

/// The parents' side of a spawn under rma-run: two children of this program (and with
/// `multiple`, one more from a second command), a merged communicator of parents and
/// children, a window over it with exact contents; then a spawn of a program that does
/// not exist, a typed error on every parent.
pub(crate) fn spawn_parent(world: &World, multiple: bool) -> Result<()> {
    let w = world.comm();
    let me = std::env::current_exe().map_err(|e| rma::TransportError::Failed(e.to_string()))?;
    let me = me.to_string_lossy().into_owned();
    let inter = if multiple {
        let command = |arg: &str, n| rma::SpawnCommand {
            program: me.clone(),
            args: vec!["spawn_child".into(), arg.into()],
            processes: n,
        };
        world.spawn_multiple(&w, &[command("a", 2), command("b", 1)], 0)?
    } else {
        world.spawn(&w, &me, &["spawn_child", "a"], 2, 0)?
    };
    check(
        inter.size() == w.size() && inter.rank() == w.rank(),
        "parents' group",
    )?;
    merged_window(&inter.merge(false)?, inter.size() + inter.remote_size())?;
    // A program that cannot start: the root's launcher error, CollectiveFailed elsewhere.
    match world
        .spawn(&w, "/nonexistent/rma-child", &[], 1, 0)
        .map_err(Error::into_kind)
    {
        Err(ErrorKind::Transport(rma::TransportError::Failed(m))) if w.rank() == 0 => {
            check(m.contains("cannot start"), &m)?
        }
        Err(ErrorKind::Peer(PeerError::CollectiveFailed {
            rank: 0,
            call: "spawn",
            ..
        })) if w.rank() != 0 => {}
        other => {
            return Err(rma::TransportError::Failed(format!("spawn of nothing: {other:?}")).into())
        }
    }
    w.barrier()
}

/// The children's side: their World, their parents' inter-communicator, the merge.
pub(crate) fn spawn_child(world: &World, arg: &str) -> Result<()> {
    let parent = world
        .parent()
        .ok_or_else(|| rma::TransportError::Failed("no parent".into()))?;
    check(
        parent.size() == world.size(),
        "children's group is their World",
    )?;
    check(matches!(arg, "a" | "b"), "argument passed")?;
    merged_window(&parent.merge(true)?, parent.size() + parent.remote_size())?;
    world.comm().barrier()
}

/// Over the merged communicator (parents first): each puts its rank to the next, and
/// an allreduce counts everyone.
fn merged_window(merged: &Comm, expected: Rank) -> Result<()> {
    check(merged.size() == expected, "merged size")?;
    let (r, p) = (merged.rank(), merged.size() as Rank);
    let win = merged.allocate::<u32>(1)?;
    win.fence(Assert::NOPRECEDE)?;
    win.put(&[r + 1000], (r + 1) % p, 0)?;
    win.fence(Assert::NOSUCCEED)?;
    check(
        win.local_to_vec()[0] == (r + p - 1) % p + 1000,
        "put over the merged communicator",
    )?;
    let count = merged.allreduce(&[1u32], AccOp::Sum)?;
    check(count[0] == p, "allreduce over the merged communicator")?;
    win.free().map(drop).map_err(Into::into)
}

/// Under a launcher that cannot spawn: a typed error on every rank, never a hang.
pub(crate) fn spawn_refused(world: &World) -> Result<()> {
    let w = world.comm();
    let got = world.spawn(&w, "/bin/true", &[], 1, 0);
    let typed = match got.as_ref().map_err(Error::kind) {
        Err(ErrorKind::Transport(
            rma::TransportError::Unsupported(_) | rma::TransportError::Failed(_),
        )) => w.rank() == 0,
        Err(ErrorKind::Peer(PeerError::CollectiveFailed { call: "spawn", .. })) => w.rank() != 0,
        _ => false,
    };
    check(typed, &format!("spawn here: {got:?}"))?;
    w.barrier()
}

/// Barriers, allreduces, broadcasts, allgathers (each member's length its own) and
/// reduces back to back in every order, of lengths around
/// the 4080 bytes one shared-memory call carries (none, one element, just under, at and
/// past it, several times it), over the World, its parity halves and its nodes: exact results
/// every time, each barrier a real one (every rank's put before it is seen by every
/// rank's get after it), the members told of a length mismatch and in step after it,
/// and the calls in the members' shared memory exactly where they all share it.
pub(crate) fn node_collectives(world: &World) -> Result<()> {
    let w = world.comm();
    let (me, n) = (w.rank(), w.size() as Rank);
    let half = w.split(Some(me % 2), 0)?.expect("a color");
    let node = w.split_shared()?;
    let seen = w.allocate::<u64>(1)?;
    seen.lock_all(Assert::NONE)?;
    let before = world.stats();
    let mut in_shared_memory = 0;
    for c in [&w, &half, &node] {
        let (p, r) = (u64::from(c.size()), u64::from(c.rank()));
        let shared = (0..c.size()).all(|i| {
            c.group()
                .world_rank(i)
                .is_some_and(|wr| world.shares_memory_with(wr))
        });
        let mut calls = 0;
        for round in 0..300u64 {
            let len = [0usize, 1, 509, 510, 511, 2000][(round / 3 % 6) as usize];
            // Each kind after each (a broadcast before an allreduce reuses a slot
            // differently from an allreduce before one: all 25 pairs occur), the same
            // order on every rank.
            match splitmix(round) % 5 {
                3 => {
                    // Lengths that differ by member, bytes.
                    let of = |m: u64| (len * 8 + m as usize * 1001) % 9000;
                    let byte = |m: u64, i: usize| (m as usize * 7 + i + round as usize) as u8;
                    let mine: Vec<u8> = (0..of(r)).map(|i| byte(r, i)).collect();
                    let all = c.allgather_bytes(&mine)?;
                    let expect: Vec<Vec<u8>> = (0..p)
                        .map(|m| (0..of(m)).map(|i| byte(m, i)).collect())
                        .collect();
                    check(all == expect, "allgather_bytes")?;
                }
                4 => {
                    let root = round / 5 % p;
                    let mine: Vec<i32> = (0..len as i32).map(|i| i - r as i32 * 3).collect();
                    let expect: Vec<i32> = (0..len as i32)
                        .map(|i| (0..p as i32).map(|m| i - m * 3).max().unwrap_or(0))
                        .collect();
                    let got = c.reduce(&mine, AccOp::Max, root as Rank)?;
                    check(got == (r == root).then_some(expect), "reduce")?;
                }
                0 => {
                    let mine: Vec<u64> = (0..len as u64).map(|i| r * 1000 + i + round).collect();
                    let expect: Vec<u64> = (0..len as u64)
                        .map(|i| 1000 * p * (p - 1) / 2 + p * (i + round))
                        .collect();
                    check(c.allreduce(&mine, AccOp::Sum)? == expect, "allreduce")?;
                }
                1 => {
                    let root = round / 3 % p;
                    let value = |i: u64| root << 40 | round << 20 | i;
                    let mut data: Vec<u64> = (0..len as u64)
                        .map(|i| if r == root { value(i) } else { 0 })
                        .collect();
                    c.broadcast(&mut data, root as Rank)?;
                    check(
                        data.iter().enumerate().all(|(i, &v)| v == value(i as u64)),
                        "broadcast",
                    )?;
                }
                _ => {
                    // Mine at my World rank's window, complete there before the barrier;
                    // every member's read after it must see this round's.
                    seen.put(&[round], me, 0)?;
                    seen.flush(me)?;
                    c.barrier()?;
                    for i in 0..c.size() {
                        let wr = c.group().world_rank(i).expect("a member");
                        let got = seen.get(wr, 0, 1)?;
                        seen.flush(wr)?;
                        let got = got.wait()?[0];
                        check(
                            got >= round,
                            &format!("barrier: rank {wr} at {got}, not {round}"),
                        )?;
                    }
                    // Nobody writes the next round's before all have read this one's.
                    c.barrier()?;
                    calls += 1;
                }
            }
            calls += 1;
        }
        if shared && p > 1 {
            in_shared_memory += calls;
        }
    }
    // Lengths that differ: every member is told, and the next call works.
    if n > 1 {
        let mine = vec![1u64; if me == 0 { 3 } else { 4 }];
        match w.allreduce(&mine, AccOp::Sum) {
            Err(e) if matches!(e.usage(), Some(UsageError::BadGroup { .. })) => {}
            other => return Err(check_failed(format!("a length mismatch gave {other:?}"))),
        }
        let mut data = vec![7u64; if me == 0 { 600 } else { 2 }];
        match w.broadcast(&mut data, 0) {
            Ok(()) if me == 0 => {}
            Err(e) if me != 0 && matches!(e.usage(), Some(UsageError::BadGroup { .. })) => {}
            other => return Err(check_failed(format!("a broadcast mismatch gave {other:?}"))),
        }
        check(
            w.allreduce(&[1u64], AccOp::Sum)? == [u64::from(n)],
            "in step after a mismatch",
        )?;
        if (0..n).all(|r| world.shares_memory_with(r)) {
            in_shared_memory += 3;
        }
    }
    let counted = world.stats().since(&before).collectives_in_shared_memory;
    check(
        counted == in_shared_memory,
        &format!("{counted} collectives in shared memory, not {in_shared_memory}"),
    )?;
    seen.unlock_all()?;
    seen.free().map_err(|e| e.error)?;
    Ok(())
}

fn check_failed(why: String) -> Error {
    rma::TransportError::Failed(why).into()
}

/// A well-mixed function of `x` (splitmix64's finalizer): an order of calls that every
/// rank computes alike.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
