//! The bare pattern: one libfabric operation with remote completion between two
//! processes, nothing around it. The benchmarks' reference mode over this backend
//! (`osu_* -b ofi --reference`) times it in the same run as the library, so that the
//! library's cost is a ratio against what the provider itself can do.
//!
//! Rank 0 issues (`write`, `read`, `fetch_add`, each waiting for its completion, or
//! `ping`, a message answered by rank 1); rank 1 only drives its completion queue
//! ([`BarePair::serve`]) until rank 0 says it is done: manual-progress providers move
//! data only while the target polls.
//! Writes and atomics ask for `FI_DELIVERY_COMPLETE`, so the completion means the data
//! is at the target, the guarantee a flush gives.

use std::time::{Duration, Instant};

use rma_core::{AccOp, BackendError, DataType, TransportError};

use crate::sys::{fi_error, is_again, Atomic, Completion, Endpoint, Local, Mr, OpContext, Remote};

/// The registered buffer each side exposes, in u64 for aligned atomics.
struct Registered {
    /// Owned until the region is closed; the peer writes it through the fabric.
    _buf: Box<[u64]>,
    mr: Mr,
}

/// One endpoint of a two-process bare pattern (see the module docs).
pub struct BarePair {
    // Field order: the region closes (Drop) before the endpoint and the buffers go.
    reg: Option<Registered>,
    ep: Endpoint,
    /// The peer's registered buffer.
    remote: Remote,
    cap: usize,
    src: Vec<u8>,
    result: Vec<u8>,
    ctx: Box<OpContext>,
    recv: Box<[u8; 64]>,
    recv_ctx: Box<OpContext>,
    entries: Vec<Completion>,
}

impl std::fmt::Debug for BarePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BarePair")
            .field("provider", &self.ep.offer.provider)
            .field("cap", &self.cap)
            .finish()
    }
}

const OP: u64 = 1;
const RECV: u64 = 2;
/// First byte of a message: the round is over / answer me / the answer.
const DONE: u8 = 1;
const PING: u8 = 2;
const PONG: u8 = 3;
/// Largest payload of a [`BarePair::ping`] (the receive buffer is 64 bytes).
pub const MAX_PING: usize = 63;
/// A peer that does not answer for this long has failed.
const STALL: Duration = Duration::from_secs(30);

impl BarePair {
    /// Opens an endpoint on `provider` (`None`: libfabric's choice, honouring
    /// `FI_PROVIDER`), registers `cap` bytes, and swaps (name, address, key) with the
    /// other process through `swap` (which sends ours and returns theirs).
    pub fn connect(
        provider: Option<&str>,
        cap: usize,
        swap: impl FnOnce(&[u8]) -> Result<Vec<u8>, TransportError>,
    ) -> Result<BarePair, TransportError> {
        let mut ep = Endpoint::open(provider, true, 2)?;
        let cap = cap.max(8);
        let buf = vec![0u64; cap.div_ceil(8)].into_boxed_slice();
        // SAFETY: `buf` is owned by the Registered kept in the pair, whose region is
        // closed in Drop before the buffer is freed.
        let mr = unsafe { ep.mr_reg(buf.as_ptr().cast(), cap, 1)? };
        let key = mr.key();
        let addr = if ep.offer.virt_addr() {
            buf.as_ptr() as u64
        } else {
            0
        };
        let name = ep.name()?;
        let mut mine = addr.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        mine.extend_from_slice(&name);
        let mut pair = BarePair {
            reg: Some(Registered { _buf: buf, mr }),
            remote: Remote {
                peer: 0,
                addr: 0,
                key: 0,
            },
            cap,
            src: vec![b'a'; cap],
            result: vec![0; cap],
            ctx: Box::new(OpContext::new(OP)),
            recv: Box::new([0; 64]),
            recv_ctx: Box::new(OpContext::new(RECV)),
            entries: vec![Completion::default(); 16],
            ep,
        };
        pair.post_recv()?;
        let theirs = swap(&mine)?;
        if theirs.len() <= 16 {
            return Err(TransportError::Failed(
                "bare pattern: short peer address".into(),
            ));
        }
        pair.remote = Remote {
            addr: u64::from_le_bytes(theirs[0..8].try_into().expect("8 bytes")),
            key: u64::from_le_bytes(theirs[8..16].try_into().expect("8 bytes")),
            peer: pair.ep.insert(&[theirs[16..].to_vec()])?[0],
        };
        Ok(pair)
    }

    /// The provider in use.
    pub fn provider(&self) -> &str {
        &self.ep.offer.provider
    }

    fn post_recv(&mut self) -> Result<(), TransportError> {
        let buf = Local::plain(self.recv.as_mut_ptr(), 64);
        // SAFETY: the receive buffer and its context are boxed in the pair and not touched
        // until the receive's completion is read (or the endpoint closes: it drops before
        // them, field order).
        let rc = unsafe { self.ep.post_recv(buf, &mut *self.recv_ctx) };
        if rc != 0 {
            return Err(fi_error(
                "posting the bare pattern's receive",
                "fi_recv",
                rc as i64,
            ));
        }
        Ok(())
    }

    /// Reads the completion queue once: how many completions with `id` came.
    fn reap(&mut self, id: u64) -> Result<usize, TransportError> {
        match self.ep.cq_read(&mut self.entries) {
            Ok(n) => Ok(self.entries[..n]
                .iter()
                .filter(|c| c.id == Some(id))
                .count()),
            Err(_) => match self.ep.cq_readerr() {
                Some((_, e)) => {
                    Err(BackendError::new("completing a bare pattern operation", e).into())
                }
                None => Err(TransportError::Failed("bare pattern: unknown".into())),
            },
        }
    }

    /// Drives the completion queue until `count` completions with `id` came.
    fn wait(&mut self, id: u64, mut count: usize) -> Result<(), TransportError> {
        let start = Instant::now();
        while count > 0 {
            count = count.saturating_sub(self.reap(id)?);
            if start.elapsed() > STALL {
                return Err(TransportError::Failed("bare pattern: peer stalled".into()));
            }
        }
        Ok(())
    }

    /// Posts `count` operations with `post` (retrying on -FI_EAGAIN while reaping), then
    /// waits for all their completions.
    fn issue(
        &mut self,
        call: &'static str,
        count: usize,
        mut post: impl FnMut(&mut BarePair) -> isize,
    ) -> Result<(), TransportError> {
        let mut done = 0;
        for _ in 0..count {
            loop {
                let rc = post(self);
                if rc == 0 {
                    break;
                }
                if !is_again(rc) {
                    return Err(fi_error(
                        format!("posting {count} bare pattern operations"),
                        call,
                        rc as i64,
                    ));
                }
                done += self.reap(OP)?;
            }
        }
        self.wait(OP, count.saturating_sub(done))
    }

    fn check(&self, len: usize) -> Result<(), TransportError> {
        if len > self.cap {
            return Err(TransportError::Failed(format!(
                "bare pattern: {len} bytes exceed the {} registered",
                self.cap
            )));
        }
        Ok(())
    }

    /// `len` bytes written into the peer's buffer, delivered (FI_DELIVERY_COMPLETE, and
    /// FI_INJECT when small, as the library's puts).
    pub fn write(&mut self, len: usize) -> Result<(), TransportError> {
        self.write_many(len, 1)
    }

    /// `count` writes of `len` bytes issued back to back, then all their completions.
    pub fn write_many(&mut self, len: usize, count: usize) -> Result<(), TransportError> {
        self.check(len)?;
        let inject = len <= self.ep.offer.inject_size;
        self.issue("fi_writemsg", count, |p| {
            let src = Local::plain(p.src.as_mut_ptr(), len);
            // SAFETY: the source buffer and context are the pair's and untouched until
            // the completion `issue` waits for (or the endpoint closes: it drops before
            // them, field order); the range lies in the peer's registered `cap` bytes
            // (checked).
            unsafe { p.ep.write(src, p.remote, inject, true, None, &mut *p.ctx) }
        })
    }

    /// `len` bytes read from the peer's buffer.
    pub fn read(&mut self, len: usize) -> Result<(), TransportError> {
        self.read_many(len, 1)
    }

    /// `count` reads of `len` bytes issued back to back, then all their completions.
    pub fn read_many(&mut self, len: usize, count: usize) -> Result<(), TransportError> {
        self.check(len)?;
        self.issue("fi_read", count, |p| {
            let dst = Local::plain(p.result.as_mut_ptr(), len);
            // SAFETY: the result buffer and context are the pair's and untouched until the
            // completion `issue` waits for (or the endpoint closes first); range checked.
            unsafe { p.ep.read(dst, p.remote, &mut *p.ctx) }
        })
    }

    /// A fetching atomic sum of one u64 at the peer's offset 0 (what fetch_and_op does).
    pub fn fetch_add(&mut self) -> Result<(), TransportError> {
        self.src[..8].copy_from_slice(&1u64.to_le_bytes());
        let sum = Atomic {
            op: AccOp::Sum,
            datatype: DataType::U64,
            count: 1,
        };
        self.issue("fi_fetch_atomic", 1, |p| {
            let (operand, result) = (
                Local::plain(p.src.as_mut_ptr(), 8),
                Local::plain(p.result.as_mut_ptr(), 8),
            );
            // SAFETY: operand, result and context are the pair's, untouched until the
            // completion (or the endpoint closes first); one u64 at offset 0 of the
            // peer's registered buffer.
            unsafe {
                p.ep.fetch_atomic(operand, result, p.remote, sum, &mut *p.ctx)
            }
        })
    }

    /// Rank 1's part: drives the completion queue (the provider's progress for the
    /// peer's operations on our buffer), answering [`ping`](Self::ping)s, until the
    /// peer's [`done`](Self::done).
    pub fn serve(&mut self) -> Result<(), TransportError> {
        loop {
            self.wait(RECV, 1)?;
            let kind = self.recv[0];
            self.post_recv()?;
            match kind {
                PING => self.send(&[PONG])?,
                _ => return Ok(()),
            }
        }
    }

    /// Rank 0's part: tells the peer this round is over.
    pub fn done(&mut self) -> Result<(), TransportError> {
        self.send(&[DONE])
    }

    /// A message of `len` payload bytes (at most [`MAX_PING`]) to the peer and its
    /// one-byte answer: one message each way, what a request answered by the target
    /// (the single-op lock, put and unlock of a passive-target epoch) costs at least.
    pub fn ping(&mut self, len: usize) -> Result<(), TransportError> {
        if len > MAX_PING {
            return Err(TransportError::Failed(format!(
                "bare pattern: a ping carries at most {MAX_PING} bytes"
            )));
        }
        let mut msg = [b'a'; MAX_PING + 1];
        msg[0] = PING;
        self.send(&msg[..len + 1])?;
        self.wait(RECV, 1)?;
        self.post_recv()
    }

    /// Injects `data` (a few bytes) to the peer, retrying while the provider says
    /// -FI_EAGAIN (reaping meanwhile), for up to [`STALL`].
    fn send(&mut self, data: &[u8]) -> Result<(), TransportError> {
        let start = Instant::now();
        loop {
            let rc = self.ep.inject(data, self.remote.peer);
            if rc == 0 {
                return Ok(());
            }
            if !is_again(rc) || start.elapsed() > STALL {
                return Err(fi_error(
                    "sending the bare pattern's message",
                    "fi_inject",
                    rc as i64,
                ));
            }
            let _ = self.ep.cq_read(&mut self.entries);
        }
    }
}

impl Drop for BarePair {
    fn drop(&mut self) {
        if let Some(Registered { _buf, mr }) = self.reg.take() {
            // Closed before its buffer (dropped right after).
            self.ep.mr_close(mr);
        }
    }
}
