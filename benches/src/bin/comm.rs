//! `comm`: the cost of communicators, in one invocation: `rma-run -n P comm [ITERS]`.
//!
//! - creation of a World window and free, against a split of the World into halves
//!   plus a window over a half and free (the goal: within 2x), with the
//!   collective messages each sends per rank (rounds: ceil(log2 p) per allgather);
//! - allreduce of 8 bytes (one u64 sum) over the World, OSU's osu_allreduce columns.
//!
//! Prints rank 0's medians of three alternating runs.

use std::time::{Duration, Instant};

use rma::MessageKind as Kind;
use rma::{AccOp, World};

const USAGE: &str = "usage: rma-run -n P comm [ITERS]   (default 200)\n\
    The cost of communicators: World window create+free against split + half window,\n\
    and an 8-byte allreduce; rank 0 prints the medians of three runs.";

fn main() -> std::process::ExitCode {
    let iters = rma_benches::start("comm", USAGE, true).unwrap_or(200);
    match run(iters) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("comm: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn run(iters: u32) -> Result<(), String> {
    let e = |e: rma::Error| e.to_string();
    let world = World::init().map_err(e)?;
    let w = world.comm();
    let (me, p) = (w.rank(), w.size());
    let collective = || world.stats().messages(Kind::Collective);
    let world_window = |n: u32| -> Result<Duration, String> {
        let start = Instant::now();
        for _ in 0..n {
            world
                .allocate::<u64>(1)
                .map_err(e)?
                .free()
                .map_err(|e| e.to_string())?;
        }
        Ok(start.elapsed() / n.max(1))
    };
    let split_window = |n: u32| -> Result<(Duration, u64), String> {
        let before = collective();
        let start = Instant::now();
        for _ in 0..n {
            let half = w.split(Some(me % 2), 0).map_err(e)?.expect("a color");
            half.allocate::<u64>(1)
                .map_err(e)?
                .free()
                .map_err(|e| e.to_string())?;
        }
        Ok((
            start.elapsed() / n.max(1),
            (collective() - before) / u64::from(n.max(1)),
        ))
    };
    let allreduce = |n: u32| -> Result<Duration, String> {
        let start = Instant::now();
        for i in 0..n {
            let got = w.allreduce(&[u64::from(i)], AccOp::Sum).map_err(e)?;
            if got[0] != u64::from(i) * p as u64 {
                return Err(format!("allreduce gave {}", got[0]));
            }
        }
        Ok(start.elapsed() / n.max(1))
    };
    world_window(iters / 10 + 1)?;
    split_window(iters / 10 + 1)?;
    allreduce(iters * 10)?;
    let (mut ww, mut sw, mut ar, mut msgs) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for _ in 0..3 {
        w.barrier().map_err(e)?;
        ww.push(world_window(iters)?);
        w.barrier().map_err(e)?;
        let (t, m) = split_window(iters)?;
        sw.push(t);
        msgs = m;
        w.barrier().map_err(e)?;
        ar.push(allreduce(iters * 50)?);
    }
    let rounds = u32::BITS - (p.max(1) - 1).leading_zeros();
    if me == 0 {
        let (ww, sw, ar) = (median(ww), median(sw), median(ar));
        println!("# rma communicators on {p} ranks (medians of 3 runs, rank 0)");
        println!("# World window create+free (us)   {ww:.2}");
        println!(
            "# split + half window create+free (us)   {sw:.2}   ratio to the World window {:.2}",
            sw / ww
        );
        println!(
            "# collective messages per rank for split + window   {msgs}   (ceil(log2 p) = {rounds} per allgather)"
        );
        println!("# OSU MPI Allreduce Latency Test (rma Comm::allreduce, u64 sum)");
        println!("# Size       Avg Latency(us)");
        println!("{:<12}{ar:.2}", 8);
    }
    w.barrier().map_err(e)?;
    Ok(())
}
