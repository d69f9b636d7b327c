//! `--reference` over libfabric (`-b ofi[:PROVIDER]`): the benchmark's operation done
//! with bare libfabric calls between the same two ranks in the same run
//! ([`rma_ofi::bare::BarePair`], its own endpoint on the same provider), so that the
//! library's figure is a ratio against what the provider does by itself.
//!
//! | benchmark | reference |
//! | --- | --- |
//! | put latency, bandwidth | `fi_writemsg` with `FI_DELIVERY_COMPLETE` (the completion a flush needs), waited for; bandwidth: the window's writes back to back, then all completions |
//! | put and accumulate latency with a lock per op (`-s lock`), up to 63 bytes | a message carrying the data and the target's answer (`fi_inject` each way): one round trip, what the single-op lock, put and unlock costs at least |
//! | get latency, bandwidth | `fi_read`, waited for |
//! | fetch_and_op, compare_and_swap, get_accumulate | `fi_fetch_atomic` sum of one u64, waited for |
//! | accumulate | `fi_writemsg` with delivery complete of the message (what a native accumulate costs at least) |
//!
//! Rank 0 issues; rank 1 drives its completion queue until rank 0 is done (manual
//! progress providers need the target's polling). No lock is taken in the reference: it
//! is the fastest bare pattern that completes the operation at the target, for every
//! synchronization mode.

use std::time::Duration;

use rma_core::{Engine, Result, TransportError};
use rma_ofi::bare::BarePair;

use crate::osu::{Benchmark, Operation, SyncMode};
use crate::reference::{exchange, mb_per_s, timed};

/// The bare libfabric pattern between the two ranks.
#[derive(Debug)]
pub struct OfiReference {
    pair: BarePair,
    me: u32,
}

impl OfiReference {
    /// Opens the bare endpoints of both ranks with `cap` bytes each (collective).
    pub fn join(engine: &Engine, cap: usize) -> Result<OfiReference> {
        let provider = rma_ofi::provider_from_env();
        let pair = BarePair::connect(provider.as_deref(), cap, |mine| {
            exchange(engine, mine).map_err(|e| TransportError::Failed(e.to_string()))
        })?;
        engine.barrier()?;
        Ok(OfiReference {
            pair,
            me: engine.rank(),
        })
    }

    /// Runs `op` `skip + iterations` times on rank 0 (timing the last `iterations`) while
    /// rank 1 serves; rank 0 gets the time per iteration in microseconds, rank 1 zero.
    fn timed(
        &mut self,
        iterations: usize,
        skip: usize,
        mut op: impl FnMut(&mut BarePair) -> std::result::Result<(), TransportError>,
    ) -> Result<Duration> {
        if self.me != 0 {
            self.pair.serve()?;
            return Ok(Duration::ZERO);
        }
        let pair = &mut self.pair;
        let d = timed(skip, skip + iterations, || Ok(op(pair)?))?;
        self.pair.done()?;
        Ok(d)
    }

    /// The reference latency, microseconds (collective; rank 1 gets 0).
    pub fn latency(
        &mut self,
        bench: &Benchmark,
        sync: SyncMode,
        size: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        let d = match bench.operation {
            Operation::Put | Operation::Accumulate if answered(sync, size) => {
                self.timed(iterations, skip, |p| p.ping(size))?
            }
            Operation::Put | Operation::Accumulate => {
                self.timed(iterations, skip, |p| p.write(size))?
            }
            Operation::Get => self.timed(iterations, skip, |p| p.read(size))?,
            Operation::FetchAndOp | Operation::CompareAndSwap | Operation::GetAccumulate => {
                self.timed(iterations, skip, |p| p.fetch_add())?
            }
        };
        Ok(d.as_secs_f64() * 1e6 / iterations as f64)
    }

    /// The reference bandwidth, MB/s: `window` operations back to back per iteration
    /// (collective; rank 1 gets 0).
    pub fn bandwidth(
        &mut self,
        bench: &Benchmark,
        size: usize,
        window: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        let d = match bench.operation {
            Operation::Get => self.timed(iterations, skip, |p| p.read_many(size, window))?,
            _ => self.timed(iterations, skip, |p| p.write_many(size, window))?,
        };
        Ok(mb_per_s(size, iterations * window, d))
    }

    /// The preamble lines saying what the reference column measures.
    pub fn notes(&self, bench: &Benchmark, sync: SyncMode) -> Vec<String> {
        let how = match bench.operation {
            Operation::Put | Operation::Accumulate if sync == SyncMode::Lock => {
                "a message carrying the data and the target's answer (fi_inject each way) up \
                 to 63 bytes, fi_writemsg with FI_DELIVERY_COMPLETE above"
            }
            Operation::Put | Operation::Accumulate => {
                "fi_writemsg with FI_DELIVERY_COMPLETE, completion awaited"
            }
            Operation::Get => "fi_read, completion awaited",
            _ => "fi_fetch_atomic (u64 sum), completion awaited",
        };
        vec![
            format!(
                "# Reference: bare libfabric on {} between the same ranks: {how}; no lock, \
                 no library (the fastest pattern that completes at the target)",
                self.pair.provider()
            ),
            "# Ratio: ours / reference".to_string(),
        ]
    }
}

/// Whether the reference of a put or accumulate is a message and its answer: with a lock
/// per op the target must take part (grant, apply, release) and answer, so one round
/// trip carrying the data is the least any protocol can do; small enough for one
/// injected message.
fn answered(sync: SyncMode, size: usize) -> bool {
    sync == SyncMode::Lock && size <= rma_ofi::bare::MAX_PING
}
