//! Latency of put + flush, get + flush and fetch_and_op (8 bytes) from rank 0 to rank 1
//! in a lock_all epoch, on whatever backend `RMA_BACKEND` picks:
//! `rma-run -n 2 target/release/examples/put_latency [iterations]`.

use std::time::Instant;

use rma::{AccOp, Assert, World};

fn main() -> Result<(), rma::Error> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let world = World::init()?;
    let win = world.allocate::<u64>(1)?;
    win.lock_all(Assert::NONE)?;
    if world.rank() == 0 {
        let time = |name: &str, f: &mut dyn FnMut() -> Result<(), rma::Error>| {
            for _ in 0..iters / 10 {
                f()?;
            }
            let start = Instant::now();
            for _ in 0..iters {
                f()?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
            println!("{name:<16} {us:8.2} us");
            Ok::<(), rma::Error>(())
        };
        time("put + flush", &mut || {
            win.put(&[1], 1, 0)?;
            win.flush(1)
        })?;
        time("get + flush", &mut || {
            let g = win.get(1, 0, 1)?;
            win.flush(1)?;
            g.wait().map(|_| ())
        })?;
        time("fetch_and_op", &mut || {
            win.fetch_and_op(1, AccOp::Sum, 1, 0)?.wait().map(|_| ())
        })?;
    }
    win.unlock_all()?;
    world.barrier()?;
    win.free()?;
    Ok(())
}
