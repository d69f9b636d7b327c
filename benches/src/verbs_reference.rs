//! `--reference` over verbs (`-b verbs`): the benchmark's operation done with raw verbs
//! between the same two ranks in the same run (their own RC QP on the same device), so
//! that the library's figure is a ratio against what the device does by itself, with
//! both measured by the same processes on the same cores: on an emulated machine (the
//! rxe VM) the spread between runs is larger than the difference being measured, and
//! only a pairing inside one invocation cancels it.
//!
//! | benchmark | reference |
//! | --- | --- |
//! | put, accumulate latency (every sync mode) | RDMA WRITE (inline up to the QP's inline size), signaled, completion polled: the RC ack says it is at the target |
//! | get latency | RDMA READ, completion polled |
//! | fetch_and_op, compare_and_swap, get_accumulate | 8-byte FETCH_AND_ADD (READ of 8 bytes when the device has no atomics) |
//! | put, get bandwidth | the window's WRITEs (READs) back to back, every 16th and the last signaled, then their completions |
//!
//! Rank 0 issues; rank 1 waits in the engine's barrier that follows, as it does while
//! the library's loop runs (spinning, or asleep on the completion channel with
//! `RMA_VERBS_BLOCK_AFTER`), so the target behaves alike in both. No lock is taken: it
//! is the fastest pattern that completes the operation at the target, for every
//! synchronization mode.

use std::sync::Arc;
use std::time::Duration;

use rma_core::{Engine, Result, TransportError};
use rma_verbs::ib::{
    empty_wc, Access, Buffer, Context, Cq, Endpoint, Local, Pd, Qp, QpParams, ResetQp, SendOp,
};

use crate::osu::{Benchmark, Operation};
use crate::reference::{exchange, mb_per_s, timed};

/// Work requests in flight at most (the QP's send queue depth).
const DEPTH: u32 = 128;
/// One in this many back-to-back work requests is signaled.
const SIGNAL_EVERY: usize = 16;

fn failed(e: impl std::fmt::Display) -> rma_core::Error {
    TransportError::Failed(format!("verbs reference: {e}")).into()
}

/// The raw verbs pattern between the two ranks.
pub struct VerbsReference {
    me: u32,
    ctx: Arc<Context>,
    // Field order: the QP goes before the buffers and CQ it uses.
    qp: Qp,
    cq: Arc<Cq>,
    /// Rank 0's source and destination of every op.
    local: Buffer,
    /// What the peer reads and writes.
    _target: Buffer,
    /// The peer's target buffer: address and key.
    remote: (u64, u32),
    _pd: Arc<Pd>,
}

impl std::fmt::Debug for VerbsReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsReference")
            .field("device", &self.ctx.name)
            .finish()
    }
}

impl VerbsReference {
    /// Opens both ranks' QP with `cap` bytes of buffer each (collective).
    pub fn join(engine: &Engine, cap: usize) -> Result<VerbsReference> {
        let env_u8 = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
        let device = std::env::var("RMA_VERBS_DEVICE").ok();
        let ctx = Context::open(
            device.as_deref(),
            env_u8("RMA_VERBS_PORT").unwrap_or(1),
            env_u8("RMA_VERBS_GID_INDEX"),
        )
        .map_err(failed)?;
        let pd = Pd::new(&ctx).map_err(failed)?;
        let cq = Cq::new(&ctx, 2 * DEPTH, false).map_err(failed)?;
        let qp = ResetQp::new(&pd, &cq, DEPTH, 1, 256).map_err(failed)?;
        let len = cap.max(8);
        let target = Buffer::new(&pd, len, Access::window(ctx.atomics)).map_err(failed)?;
        let local = Buffer::new(&pd, len, Access::LOCAL).map_err(failed)?;
        let psn = 0x4321 + engine.rank();
        let mut blob = Vec::new();
        Endpoint {
            qpn: qp.qpn(),
            psn,
            lid: ctx.lid,
            gid: ctx.gid,
        }
        .encode(&mut blob);
        blob.extend_from_slice(&(target.addr() as u64).to_le_bytes());
        blob.extend_from_slice(&target.rkey().to_le_bytes());
        let peer = exchange(engine, &blob)?;
        let endpoint = Endpoint::decode(&peer).ok_or_else(|| failed("bad peer endpoint"))?;
        let at = Endpoint::LEN;
        let field = |r: std::ops::Range<usize>| peer.get(r).ok_or_else(|| failed("short blob"));
        let addr = u64::from_le_bytes(field(at..at + 8)?.try_into().expect("8 bytes"));
        let rkey = u32::from_le_bytes(field(at + 8..at + 12)?.try_into().expect("4 bytes"));
        let params = QpParams {
            timeout: 17,
            retry_cnt: 6,
            rnr_retry: 7,
            rd_atomic: ctx.max_qp_rd_atom.clamp(1, 16) as u8,
        };
        let qp = qp
            .init()
            .and_then(|q| q.ready_to_receive(&endpoint, params))
            .and_then(|q| q.ready_to_send(psn))
            .map_err(failed)?;
        // Both QPs are ready to receive before either sends.
        engine.barrier()?;
        Ok(VerbsReference {
            me: engine.rank(),
            ctx,
            qp,
            cq,
            local,
            _target: target,
            remote: (addr, rkey),
            _pd: pd,
        })
    }

    /// Posts `n` copies of `op` of `len` bytes back to back (every 16th and the last
    /// signaled) and polls until all are complete.
    fn post_and_wait(&mut self, op: SendOp, len: usize, n: usize) -> Result<()> {
        let inline = matches!(op, SendOp::Write(..)) && len <= self.qp.max_inline() as usize;
        let mut wcs = [empty_wc()];
        let mut signaled_in_flight = 0usize;
        for i in 0..n {
            let signaled = i + 1 == n || (i + 1) % SIGNAL_EVERY == 0;
            // Room for one more chunk: wait for the oldest signaled request.
            if signaled && signaled_in_flight * SIGNAL_EVERY >= DEPTH as usize - SIGNAL_EVERY {
                self.poll_one(&mut wcs)?;
                signaled_in_flight -= 1;
            }
            let l = Local {
                addr: self.local.addr(),
                len: len as u32,
                lkey: self.local.lkey(),
            };
            // SAFETY: `local` is registered, holds `len` bytes (sized for the largest
            // message) and outlives the request, which completes before this returns.
            unsafe { self.qp.post_send(i as u64, op, l, inline, signaled) }.map_err(failed)?;
            if signaled {
                signaled_in_flight += 1;
            }
        }
        while signaled_in_flight > 0 {
            self.poll_one(&mut wcs)?;
            signaled_in_flight -= 1;
        }
        Ok(())
    }

    fn poll_one(&self, wcs: &mut [rma_verbs::ib::Wc; 1]) -> Result<()> {
        loop {
            if self.cq.poll(wcs).map_err(failed)? == 1 {
                if wcs[0].status != 0 {
                    return Err(failed(format!(
                        "completion status {}",
                        rma_verbs::ib::status_name(wcs[0].status)
                    )));
                }
                return Ok(());
            }
        }
    }

    /// Runs `op` `skip + iterations` times on rank 0 (timing the last `iterations`);
    /// rank 1 returns at once (zero) and waits in the caller's barrier.
    fn timed(
        &mut self,
        iterations: usize,
        skip: usize,
        mut op: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<Duration> {
        if self.me != 0 {
            return Ok(Duration::ZERO);
        }
        timed(skip, skip + iterations, || op(self))
    }

    /// The raw op of `bench` at `size` bytes.
    fn op_of(&self, bench: &Benchmark, size: usize) -> (SendOp, usize) {
        let (addr, rkey) = self.remote;
        match bench.operation {
            Operation::Put | Operation::Accumulate => (SendOp::Write(addr, rkey), size),
            Operation::Get => (SendOp::Read(addr, rkey), size),
            Operation::FetchAndOp | Operation::CompareAndSwap | Operation::GetAccumulate
                if self.ctx.atomics =>
            {
                (SendOp::FetchAdd(addr, rkey, 1), 8)
            }
            Operation::FetchAndOp | Operation::CompareAndSwap | Operation::GetAccumulate => {
                (SendOp::Read(addr, rkey), 8)
            }
        }
    }

    /// The reference latency, microseconds (collective; rank 1 gets 0).
    pub fn latency(
        &mut self,
        bench: &Benchmark,
        size: usize,
        iterations: usize,
        skip: usize,
    ) -> Result<f64> {
        let (op, len) = self.op_of(bench, size);
        let d = self.timed(iterations, skip, |r| r.post_and_wait(op, len, 1))?;
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
        let (op, len) = self.op_of(bench, size);
        let d = self.timed(iterations, skip, |r| r.post_and_wait(op, len, window))?;
        Ok(mb_per_s(size, iterations * window, d))
    }

    /// The preamble lines saying what the reference column measures.
    pub fn notes(&self, bench: &Benchmark) -> Vec<String> {
        let how = match bench.operation {
            Operation::Put | Operation::Accumulate => "RDMA WRITE (inline when small), signaled",
            Operation::Get => "RDMA READ",
            _ if self.ctx.atomics => "8-byte FETCH_AND_ADD",
            _ => "8-byte RDMA READ (the device has no atomics)",
        };
        vec![
            format!(
                "# Reference: raw verbs on {} between the same ranks (their own RC QP): {how}, \
                 completion polled; no lock, no library",
                self.ctx.name
            ),
            "# Ratio: ours / reference".to_string(),
        ]
    }
}
