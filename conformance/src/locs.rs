//! MINLOC and MAXLOC (issue #29): (value, location) pairs of 8 and 16 bytes updated
//! whole. Every rank reduces its values into rank 0's pairs at once (passive and fence
//! epochs), the result is the exact MINLOC/MAXLOC of every value sent (ties to the
//! smaller location); meanwhile every rank swaps its pairs into one more (fetch_and_op
//! with replace) and reads it (get_accumulate with no-op): a pair read must always be
//! one some rank wrote (its value the one its location names), never half of two, and
//! every pair swapped in must come out exactly once (fetched by a swap, or left last):
//! a swap that is not whole loses or doubles one.
//!
//! Complex numbers (MPI_C_DOUBLE_COMPLEX) too: sums and products from every rank at
//! once (multiplications by i, exact in floating point: a lost one leaves a power of i
//! other than 1), swaps read whole (every number swapped in has im = -re). Long doubles
//! (MPI_LONG_DOUBLE, 16 bytes) and complex long doubles (MPI_C_LONG_DOUBLE_COMPLEX, 32)
//! swapped and read whole the same way. And ops across two
//! regions attached side by side to a dynamic window (MPICH's win_dynamic_rma_flush_get
//! runs them): puts, sums and gets that start in one region and end in the next.

use rma::{
    AccOp, Assert, ComplexF64, ComplexLongDouble, Element, LocF64, LocI32, LockType, LongDouble,
    Rank, Result, UserMemory, Window, World,
};

use crate::{check, reps};

/// The value rank `r` sends in round `k`: few distinct values, so that ties (broken by
/// the smaller location) happen all the time.
fn value_of(r: u64, k: u64) -> i32 {
    ((r * 31 + k * 17) % 101) as i32 - 50
}

/// The location of rank `r`'s round `k` among `rounds` per rank.
fn location(r: u64, k: u64, rounds: u64) -> i32 {
    (r * rounds + k) as i32
}

/// The value a location names (inverse of [`location`]).
fn value_at(loc: i32, rounds: u64) -> i32 {
    let loc = loc as u64;
    value_of(loc / rounds, loc % rounds)
}

/// A pair type of the case, built from and read as (value, location).
trait Pair: Element + Copy {
    fn pair(value: i32, location: i32) -> Self;
    fn parts(&self) -> (i32, i32);
}

impl Pair for LocF64 {
    fn pair(value: i32, location: i32) -> Self {
        LocF64::new(f64::from(value), location)
    }
    fn parts(&self) -> (i32, i32) {
        (self.value as i32, self.index)
    }
}

impl Pair for LocI32 {
    fn pair(value: i32, location: i32) -> Self {
        LocI32::new(value, location)
    }
    fn parts(&self) -> (i32, i32) {
        (self.value, self.index)
    }
}

/// MINLOC and MAXLOC of every (value, location) the ranks send.
fn expected(ranks: u64, rounds: u64) -> ((i32, i32), (i32, i32)) {
    let all =
        (0..ranks).flat_map(|r| (0..rounds).map(move |k| (value_of(r, k), location(r, k, rounds))));
    let min = all.clone().min_by_key(|&(v, l)| (v, l)).expect("values");
    let max = all.min_by_key(|&(v, l)| (-v, l)).expect("values");
    (min, max)
}

/// Slots of rank 0's window: 0 MINLOC, 1 MAXLOC, 2 the pair replaced and read.
fn run<P: Pair>(world: &World, fence: bool) -> Result<()> {
    let rounds = reps(2_000);
    let (me, n) = (world.rank() as u64, world.size() as u64);
    let win: Window<P> = world.allocate::<P>(3)?;
    // Start values every update beats: MINLOC from the top, MAXLOC from the bottom.
    win.write_local(
        0,
        &[
            P::pair(i32::MAX, i32::MAX),
            P::pair(i32::MIN, i32::MAX),
            P::pair(value_at(0, rounds), 0),
        ],
    )?;
    world.barrier()?;
    let target: Rank = 0;
    if fence {
        win.fence(Assert::NONE)?;
    } else {
        win.lock_all(Assert::NONE)?;
    }
    let mut torn = 0u64;
    // Sum of (location + 1) of the pairs this rank's swaps took out.
    let mut swapped_out = 0u64;
    for k in 0..rounds {
        let (v, l) = (value_of(me, k), location(me, k, rounds));
        win.accumulate(&[P::pair(v, l)], AccOp::MinLoc, target, 0)?;
        win.accumulate(&[P::pair(v, l)], AccOp::MaxLoc, target, 1)?;
        if !fence {
            let old = win
                .fetch_and_op(P::pair(v, l), AccOp::Replace, target, 2)?
                .wait()?;
            let seen = win
                .get_accumulate(&[P::pair(0, 0)], AccOp::NoOp, target, 2)?
                .wait()?;
            swapped_out += old.parts().1 as u64 + 1;
            for p in [old, seen[0]] {
                let (pv, pl) = p.parts();
                if pv != value_at(pl, rounds) {
                    torn += 1;
                }
            }
        }
    }
    if fence {
        win.fence(Assert::NONE)?;
    } else {
        win.flush_all()?;
        win.unlock_all()?;
    }
    check(torn == 0, "every pair read is one a rank wrote whole")?;
    // Every rank's ops are done everywhere (the engine's barrier makes progress: with
    // active messages rank 0 still serves the others' swaps) before the sums meet.
    world.barrier()?;
    let out = world.comm().allreduce(&[swapped_out], AccOp::Sum)?[0];
    if me == 0 {
        let got = win.local_to_vec();
        let (min, max) = expected(n, rounds);
        check(
            got[0].parts() == min,
            "MINLOC of every value, ties to the smaller location",
        )?;
        check(
            got[1].parts() == max,
            "MAXLOC of every value, ties to the smaller location",
        )?;
        if !fence {
            let (pv, pl) = got[2].parts();
            check(
                pv == value_at(pl, rounds),
                "the last pair swapped in is whole",
            )?;
            // In: the first pair (location 0) and every rank's; out: every swap's and the
            // last one left.
            let swapped_in: u64 = 1 + (0..n * rounds).map(|l| l + 1).sum::<u64>();
            check(
                out + pl as u64 + 1 == swapped_in,
                "every pair swapped in came out exactly once",
            )?;
        }
    }
    win.free()?;
    Ok(())
}

/// Complex numbers at rank 0, every rank at once: slot 0 summed (1 + 2i per op), slot
/// 1 multiplied by i (4 per round, so the product of all is 1), slot 2 swapped and read
/// (each number swapped in has im = -re).
fn complex(world: &World) -> Result<()> {
    let rounds = reps(1_000);
    let (me, n) = (world.rank() as u64, world.size() as u64);
    let win: Window<ComplexF64> = world.allocate::<ComplexF64>(3)?;
    let start = ComplexF64::new(3.0, -5.0);
    win.write_local(
        0,
        &[ComplexF64::default(), start, ComplexF64::new(1.0, -1.0)],
    )?;
    world.barrier()?;
    win.lock_all(Assert::NONE)?;
    let i = ComplexF64::new(0.0, 1.0);
    let mut torn = 0u64;
    for k in 0..rounds {
        win.accumulate(&[ComplexF64::new(1.0, 2.0)], AccOp::Sum, 0, 0)?;
        for _ in 0..4 {
            win.accumulate(&[i], AccOp::Prod, 0, 1)?;
        }
        let v = (me * rounds + k) as f64 + 2.0;
        let old = win
            .fetch_and_op(ComplexF64::new(v, -v), AccOp::Replace, 0, 2)?
            .wait()?;
        let seen = win
            .get_accumulate(&[ComplexF64::default()], AccOp::NoOp, 0, 2)?
            .wait()?;
        for z in [old, seen[0]] {
            if z.im != -z.re {
                torn += 1;
            }
        }
    }
    win.flush_all()?;
    win.unlock_all()?;
    check(
        torn == 0,
        "every complex number read is one a rank wrote whole",
    )?;
    world.barrier()?;
    if me == 0 {
        let got = win.local_to_vec();
        let ops = (n * rounds) as f64;
        check(
            got[0] == ComplexF64::new(ops, 2.0 * ops),
            "the sum of every rank's complex numbers",
        )?;
        check(
            got[1] == start,
            "a product of 4 x ranks x rounds factors i: none lost",
        )?;
        check(
            got[2].im == -got[2].re,
            "the last number swapped in is whole",
        )?;
    }
    win.free()?;
    Ok(())
}

/// A long double whose two 8-byte halves name each other (the second the first's
/// complement): a read that pairs halves of two writes is seen.
fn long_double_of(k: u64) -> LongDouble {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&k.to_le_bytes());
    b[8..].copy_from_slice(&(!k).to_le_bytes());
    LongDouble(b)
}

/// The `k` of [`long_double_of`], if the value is whole.
fn long_double_k(v: &LongDouble) -> Option<u64> {
    let lo = u64::from_le_bytes(v.0[..8].try_into().expect("8 bytes"));
    let hi = u64::from_le_bytes(v.0[8..].try_into().expect("8 bytes"));
    (hi == !lo).then_some(lo)
}

/// A complex long double whose parts both carry `k` ([`long_double_of`]).
fn complex_long_double_of(k: u64) -> ComplexLongDouble {
    ComplexLongDouble::new(long_double_of(k), long_double_of(k))
}

/// The `k` of [`complex_long_double_of`], if the number is whole (its 32 bytes from one
/// write).
fn complex_long_double_k(v: &ComplexLongDouble) -> Option<u64> {
    let (re, im) = (long_double_k(&v.re), long_double_k(&v.im));
    re.filter(|_| re == im)
}

/// Every rank swaps elements made by `of` into rank 0's one and reads it: always whole
/// (`k_of` finds the number it was made of), and every one swapped in comes out exactly
/// once. For the elements wider than any CPU atomic (long doubles, complex long doubles:
/// updated under the target's lock, or as one message).
fn swapped_whole<E: Element>(
    world: &World,
    what: &str,
    of: fn(u64) -> E,
    k_of: fn(&E) -> Option<u64>,
) -> Result<()> {
    let rounds = reps(1_000);
    let (me, n) = (world.rank() as u64, world.size() as u64);
    let win: Window<E> = world.allocate::<E>(1)?;
    win.write_local(0, &[of(0)])?;
    world.barrier()?;
    win.lock_all(Assert::NONE)?;
    let (mut torn, mut out) = (0u64, 0u64);
    for k in 0..rounds {
        let mine = of(me * rounds + k + 1);
        let old = win.fetch_and_op(mine, AccOp::Replace, 0, 0)?.wait()?;
        let seen = win.get_accumulate(&[of(0)], AccOp::NoOp, 0, 0)?.wait()?;
        match (k_of(&old), k_of(&seen[0])) {
            (Some(k), Some(_)) => out += k,
            _ => torn += 1,
        }
    }
    win.flush_all()?;
    win.unlock_all()?;
    check(
        torn == 0,
        &format!("every {what} read is one a rank wrote whole"),
    )?;
    world.barrier()?;
    let out = world.comm().allreduce(&[out], AccOp::Sum)?[0];
    if me == 0 {
        let last = k_of(&win.local_to_vec()[0]);
        check(
            last.is_some(),
            &format!("the last {what} swapped in is whole"),
        )?;
        // In: 0 and every rank's 1..=n x rounds; out: every swap's and the last one.
        let swapped_in: u64 = (1..=n * rounds).sum();
        check(
            out + last.unwrap_or(0) == swapped_in,
            &format!("every {what} swapped in came out exactly once"),
        )?;
    }
    win.free()?;
    Ok(())
}

/// Memory of the program attached in place: one half of a buffer that lives as long as
/// the process.
struct Half(&'static mut [u8]);

impl UserMemory for Half {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.0
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Ops across two regions attached side by side: 16 bytes from 8 before the boundary,
/// put, summed and read back by the left neighbour under an exclusive lock, summed again
/// under fence; the bytes around them untouched.
fn across_regions(world: &World) -> Result<()> {
    const HALF: usize = 32;
    let (me, n) = (world.rank(), world.size() as Rank);
    let right = (me + 1) % n;
    let win: Window<u8> = world.create_dynamic::<u8>()?;
    let (lo, hi) = Vec::leak(vec![0u8; 2 * HALF]).split_at_mut(HALF);
    let a = win.attach_memory(Box::new(Half(lo)))?;
    let b = win.attach_memory(Box::new(Half(hi)))?;
    check(b == a + HALF as u64, "the halves are attached side by side")?;
    let at = world.comm().allgather(&[a + HALF as u64 - 8])?[right as usize];
    let mine: Vec<u8> = (0..16).map(|i| 50 * (me % 4) as u8 + i).collect();
    win.lock(LockType::Exclusive, right, Assert::NONE)?;
    win.put(&mine, right, at)?;
    win.flush(right)?;
    win.accumulate(&[1u8; 16], AccOp::Sum, right, at)?;
    win.flush(right)?;
    let back = win.get(right, at, 16)?.wait()?;
    win.unlock(right)?;
    let plus = |k: u8| mine.iter().map(|v| v + k).collect::<Vec<u8>>();
    check(back == plus(1), "put and sum across the regions, read back")?;
    win.fence(Assert::NONE)?;
    win.accumulate(&[1u8; 16], AccOp::Sum, right, at)?;
    win.fence(Assert::NONE)?;
    win.lock(LockType::Shared, right, Assert::NONE)?;
    let around = win.get(right, at - 1, 18)?.wait()?;
    win.unlock(right)?;
    check(
        around[1..17] == plus(2)[..] && around[0] == 0 && around[17] == 0,
        "a second sum under fence; the bytes around untouched",
    )?;
    world.barrier()?;
    win.detach_memory(a)?;
    win.detach_memory(b)?;
    win.free()?;
    Ok(())
}

/// The case: 16-byte pairs (LocF64, MPI_DOUBLE_INT) and 8-byte 4-aligned ones (LocI32,
/// MPI_2INT), passive and fence epochs; then complex numbers, long doubles and ops across
/// adjacent regions.
pub fn locs(world: &World) -> Result<()> {
    for fence in [false, true] {
        run::<LocF64>(world, fence)?;
        run::<LocI32>(world, fence)?;
    }
    complex(world)?;
    swapped_whole(world, "long double", long_double_of, long_double_k)?;
    swapped_whole(
        world,
        "complex long double",
        complex_long_double_of,
        complex_long_double_k,
    )?;
    across_regions(world)
}
