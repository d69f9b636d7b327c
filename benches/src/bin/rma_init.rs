//! `rma_init`: the time of `World::init()` on every rank, in the style of OSU's
//! `osu_init` (which times `MPI_Init`). Run it under any launcher:
//! `rma-run -n 4 rma_init`, `mpiexec.hydra -n 4 rma_init`, `srun --mpi=pmi2 -n 4 rma_init`.
//! Rank 0 prints `nprocs`, and the minimum, maximum and mean over ranks, in microseconds.

use std::time::Instant;

use rma::{Assert, World};

const USAGE: &str = "usage: rma-run -n P rma_init   (or under any launcher)\n\
    The time of World::init() on every rank; rank 0 prints the minimum, maximum and mean.";

fn main() {
    rma_benches::start("rma_init", USAGE, false);
    let start = Instant::now();
    let world = match World::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rma_init: {e}");
            std::process::exit(1);
        }
    };
    let took = start.elapsed().as_nanos() as u64;
    if let Err(e) = report(&world, took) {
        eprintln!("rma_init: {e}");
        std::process::exit(1);
    }
}

fn report(world: &World, took_ns: u64) -> Result<(), rma::Error> {
    let n = world.size();
    let win = world.allocate::<u64>(n as usize)?;
    win.fence(Assert::NOPRECEDE)?;
    win.put(&[took_ns], 0, world.rank() as u64)?;
    win.fence(Assert::NOSUCCEED)?;
    if world.rank() == 0 {
        let all = win.local_to_vec();
        let us = |ns: u64| ns as f64 / 1000.0;
        let min = all.iter().copied().min().unwrap_or(0);
        let max = all.iter().copied().max().unwrap_or(0);
        let avg = all.iter().sum::<u64>() / n as u64;
        println!("# OSU MPI Init Test v7.4 (rma: World::init)");
        println!(
            "nprocs: {n}, min: {:.0} us, max: {:.0} us, avg: {:.0} us",
            us(min),
            us(max),
            us(avg)
        );
    }
    win.free()?;
    Ok(())
}
