//! Posting ops toward one of N active targets in turn, for `benches/callgrind_scale.sh`:
//! rank 0 of a job of 4,097 over the echo transport (`rma_core::sim::echo`), a
//! `lock_all(NOCHECK)` epoch in which one put to each of the first N targets made their
//! target elements, then ITERS ops round robin over them: puts with a `flush_all` after
//! every 16, or fetch_and_ops each waited on. Callgrind's counts of two runs of
//! different ITERS, subtracted, are what one op costs (the set-up cancels out).
//!
//! usage: post_scale N ITERS [put|fop]

use std::sync::Arc;
use std::time::Duration;

use rma_core::sim::echo::Echo;
use rma_core::{AccOp, Assert, Config, Engine, Rank};

/// Ranks in the echo job: this rank and the most targets the script asks for.
const WORLD: usize = 4096 + 1;

fn main() -> rma_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut number = |what: &str| -> usize {
        args.next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("usage: post_scale N ITERS [put|fop] ({what})"))
    };
    let active = number("N").clamp(1, WORLD - 1);
    let iters = number("ITERS");
    let fop = std::env::args().nth(3).as_deref() == Some("fop");
    let config = Config {
        target_pool_global: 2 * WORLD,
        op_pool_global: 2 * WORLD,
        timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    };
    let engine = Engine::new(Arc::new(Echo::new(WORLD)), config);
    let win = engine.allocate::<u64>(8)?;
    win.lock_all(Assert::NOCHECK)?;
    for t in 1..=active {
        win.put(&[1], t as Rank, 0)?;
    }
    win.flush_all()?;
    for i in 0..iters {
        let target = (i % active) as Rank + 1;
        if fop {
            std::hint::black_box(win.fetch_and_op(1, AccOp::Sum, target, 0)?.wait()?);
        } else {
            win.put(std::hint::black_box(&[1u64]), target, 0)?;
            if (i + 1) % 16 == 0 {
                win.flush_all()?;
            }
        }
    }
    win.flush_all()?;
    win.unlock_all()?;
    win.free().expect("free");
    Ok(())
}
