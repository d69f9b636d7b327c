//! `halo`: a 1-D halo exchange on a ring of ranks, one 8-byte put to the right
//! neighbour per epoch, timed with PSCW (post to the left, start to the right, put,
//! complete, wait) and with fence (put, fence), in the same invocation:
//! `rma-run -n P halo [ITERS]`. PSCW involves two neighbours whatever P; a fence all P.
//! Prints `ranks pscw_us fence_us pscw/fence` (rank 0's mean epoch, microseconds).

use std::time::{Duration, Instant};

use rma::{Assert, Rank, World};

const USAGE: &str = "usage: rma-run -n P halo [ITERS]   (default 10000)\n\
    A 1-D halo exchange on a ring of ranks, timed with PSCW and with fence; rank 0\n\
    prints `ranks pscw_us fence_us pscw/fence`.";

fn main() -> std::process::ExitCode {
    let iters = rma_benches::start("halo", USAGE, true).unwrap_or(10_000);
    match run(iters) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(iters: u32) -> Result<(), String> {
    let e = |e: rma::Error| e.to_string();
    let world = World::init().map_err(e)?;
    let (me, size) = (world.rank(), world.size() as Rank);
    let (left, right) = ((me + size - 1) % size, (me + 1) % size);
    let win = world.allocate::<u64>(1).map_err(e)?;
    let pscw = |n: u32| -> Result<Duration, String> {
        let start = Instant::now();
        for i in 0..n {
            win.post(&[left], Assert::NONE).map_err(e)?;
            win.start(&[right], Assert::NONE).map_err(e)?;
            win.put(&[u64::from(i)], right, 0).map_err(e)?;
            win.complete().map_err(e)?;
            win.wait().map_err(e)?;
        }
        Ok(start.elapsed() / n.max(1))
    };
    let fence = |n: u32| -> Result<Duration, String> {
        win.fence(Assert::NOPRECEDE).map_err(e)?;
        let start = Instant::now();
        for i in 0..n {
            win.put(&[u64::from(i)], right, 0).map_err(e)?;
            win.fence(Assert::NONE).map_err(e)?;
        }
        let took = start.elapsed() / n.max(1);
        win.fence(Assert::NOSUCCEED).map_err(e)?;
        Ok(took)
    };
    // Warm-up, then alternate the two three times; the medians count.
    pscw(iters / 10 + 1)?;
    fence(iters / 10 + 1)?;
    let (mut p, mut f) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        world.barrier().map_err(e)?;
        p.push(pscw(iters)?);
        world.barrier().map_err(e)?;
        f.push(fence(iters)?);
    }
    p.sort();
    f.sort();
    let check = win.local_to_vec()[0];
    if check != u64::from(iters - 1) {
        return Err(format!("the last put from the left read {check}"));
    }
    if me == 0 {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!("# ranks  pscw (us)  fence (us)  pscw/fence");
        println!(
            "{size:<8} {:<10.2} {:<11.2} {:.3}",
            us(p[1]),
            us(f[1]),
            us(p[1]) / us(f[1])
        );
    }
    world.barrier().map_err(e)?;
    win.free().map_err(|e| e.to_string())?;
    Ok(())
}
