//! The echo transport: rank 0 of a job of any size in which no other rank exists.
//!
//! What the engine costs per target, and what it keeps per rank, at job sizes this
//! machine cannot run: window creation's allgather answers with this rank's own
//! contribution for every rank, and whatever is sent to a peer is answered at once as
//! that peer's target side would answer it. Benches time the origin's paths over it
//! (`benches/benches/engine.rs`); tests count what windows allocate over it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::transport::{Capabilities, Event, Fetched, Issued, NativeAtomic, Segment, UserMemory};
use crate::wire::{self, flags, Body, Departure, Encoder, Kind};
use crate::{Rank, Transport, TransportError};

/// The echo transport's own rank.
pub const ME: Rank = 0;

/// Window memory of the echo transport: bytes behind a mutex.
pub struct EchoSegment {
    bytes: Mutex<Vec<u8>>,
}

impl EchoSegment {
    fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self.bytes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Segment for EchoSegment {
    fn len(&self) -> usize {
        self.with(|b| b.len())
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.with(|b| dst.copy_from_slice(&b[offset..offset + dst.len()]));
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.with(|b| b[offset..offset + src.len()].copy_from_slice(src));
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        self.with(|b| f(&mut b[offset..offset + len]));
    }
    fn descriptor(&self) -> Vec<u8> {
        Vec::new()
    }
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>> {
        None
    }
}

#[derive(Default)]
struct EchoState {
    /// Packets waiting for the next poll, with their sender.
    inbox: VecDeque<(Rank, Vec<u8>)>,
    /// Native operations issued (token, fetched bytes or the failure that ends them, the
    /// poll that completes them).
    completions: VecDeque<(u64, Result<Option<Fetched>, TransportError>, u64)>,
    /// The next native op issued fails at its completion.
    fail_next: bool,
    /// Polls so far.
    polls: u64,
    enc: Encoder,
    zeros: Vec<u8>,
}

/// Rank 0 of a job of `size` ranks in which no other rank exists: whatever is sent to a
/// peer is answered at once, as that peer's target side would answer it (acks for
/// RMA_DONE and UNLOCK, responses of zeros for fetching ops, lock grants, and barrier
/// and `free` messages sent straight back). Messages to itself are delivered as they are.
///
/// With `native`, puts and gets are native operations (as RDMA writes and reads are) that
/// complete at the next poll: what the engine costs on such a backend, the wire excluded.
pub struct Echo {
    size: usize,
    native: bool,
    /// Native ops complete in the call instead of at the next poll.
    in_call: bool,
    /// Polls a native op is under way: 1 completes it at the next poll, more leave the
    /// polls before empty (a wire's latency, in the waiter's passes).
    polls_in_flight: u64,
    state: Mutex<EchoState>,
}

impl Echo {
    /// Rank 0 of `size` ranks, every op an active message.
    pub fn new(size: usize) -> Self {
        Echo {
            size,
            native: false,
            in_call: false,
            polls_in_flight: 1,
            state: Mutex::default(),
        }
    }

    /// As [`new`](Self::new), with puts and gets native, completed at the next poll.
    pub fn native(size: usize) -> Self {
        Echo {
            native: true,
            ..Echo::new(size)
        }
    }

    /// As [`native`](Self::native), with each native op complete at the `polls`-th poll
    /// after its call (at least the next): the polls before find nothing, as a waiter's
    /// passes over a network do until the completion arrives.
    pub fn native_after_polls(size: usize, polls: u64) -> Self {
        Echo {
            polls_in_flight: polls.max(1),
            ..Echo::native(size)
        }
    }

    /// As [`native`](Self::native), with puts and gets completed in their call.
    pub fn native_in_call(size: usize) -> Self {
        Echo {
            in_call: true,
            ..Echo::native(size)
        }
    }

    fn complete_later(&self, token: u64, data: Option<Fetched>) -> Result<Issued, TransportError> {
        if self.in_call {
            return Ok(Issued::Complete(data));
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = st.polls + self.polls_in_flight;
        let outcome = if std::mem::take(&mut st.fail_next) {
            Err(TransportError::Failed(
                "the echo transport failed it, as asked".into(),
            ))
        } else {
            Ok(data)
        };
        st.completions.push_back((token, outcome, due));
        Ok(Issued::Pending)
    }

    /// The next native op that goes under way (not one complete in its call) fails at its
    /// completion, as a remote access error would: its [`Event::Failed`] comes when its
    /// [`Event::Completed`] would have.
    pub fn fail_next_native(&self) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fail_next = true;
    }
}

impl Transport for Echo {
    fn rank(&self) -> Rank {
        ME
    }
    fn size(&self) -> usize {
        self.size
    }
    fn capabilities(&self, _target: Rank) -> Capabilities {
        Capabilities {
            rdma_write: self.native,
            rdma_read: self.native,
            ..Capabilities::ACTIVE_MESSAGES_ONLY
        }
    }
    fn allocate(
        &self,
        len: usize,
        _shared: Option<&crate::SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError> {
        Ok(Arc::new(EchoSegment {
            bytes: Mutex::new(vec![0; len]),
        }))
    }
    fn expose(&self, mut memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError> {
        Ok(Arc::new(EchoSegment {
            bytes: Mutex::new(memory.bytes_mut().to_vec()),
        }))
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        Ok(vec![mine.to_vec(); self.size])
    }
    fn barrier(&self) -> Result<(), TransportError> {
        Ok(())
    }

    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError> {
        if target as usize >= self.size {
            return Err(TransportError::PeerUnreachable(target));
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if target == ME {
            st.inbox.push_back((ME, packet.to_vec()));
            return Ok(());
        }
        let p = wire::decode(packet).map_err(|e| TransportError::Failed(format!("echo: {e}")))?;
        let ack = p.flags & (flags::DONE | flags::UNLOCK) != 0;
        let fetched = match &p.body {
            Body::Get { token, extent } | Body::GetAccumulate { token, extent, .. } => {
                Some((*token, extent.bytes() as usize))
            }
            Body::CompareAndSwap { token, compare, .. } => Some((*token, compare.len())),
            _ => None,
        };
        let EchoState {
            inbox, enc, zeros, ..
        } = &mut *st;
        let reply: Option<&[u8]> = match (fetched, &p.body) {
            (Some((token, len)), _) => {
                zeros.resize(zeros.len().max(len), 0);
                let fl = if ack { flags::ACK } else { 0 };
                Some(
                    enc.start(Kind::Response, fl, p.win, 0)
                        .u64(token)
                        .u8(1)
                        .bytes(&zeros[..len])
                        .finish(),
                )
            }
            (None, Body::Barrier { seq, round }) => {
                // Counts as the arrival the dissemination round waits for.
                Some(
                    enc.start(Kind::Barrier, 0, p.win, 0)
                        .u32(*seq)
                        .u8(*round)
                        .finish(),
                )
            }
            (None, Body::Depart { what, seq }) if *what == Departure::Free => {
                // `free`'s exchange: every member says it frees the window.
                Some(
                    enc.start(Kind::Depart, 0, p.win, 0)
                        .u8(Departure::Free as u8)
                        .u32(*seq)
                        .finish(),
                )
            }
            _ if p.kind == Kind::Lock => Some(enc.start(Kind::LockGranted, 0, p.win, 0).finish()),
            _ if ack => Some(enc.start(Kind::Ack, 0, p.win, 0).finish()),
            _ => None,
        };
        if let Some(bytes) = reply {
            inbox.push_back((target, bytes.to_vec()));
        }
        Ok(())
    }

    fn put(&self, _: u32, _: Rank, _: u64, _: &[u8], token: u64) -> Result<Issued, TransportError> {
        if !self.native {
            return Err(TransportError::Unsupported("echo: no native put"));
        }
        self.complete_later(token, None)
    }
    fn get(
        &self,
        _: u32,
        _: Rank,
        _: u64,
        len: usize,
        token: u64,
    ) -> Result<Issued, TransportError> {
        if !self.native {
            return Err(TransportError::Unsupported("echo: no native get"));
        }
        self.complete_later(token, Some(Fetched::zeroed(len)))
    }
    fn atomic(
        &self,
        _: u32,
        _: Rank,
        _: u64,
        _: NativeAtomic<'_>,
        _: u64,
    ) -> Result<Issued, TransportError> {
        Err(TransportError::Unsupported("echo: no native atomics"))
    }

    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.polls += 1;
        let n = events.len();
        if !st.inbox.is_empty() {
            events.extend(
                st.inbox
                    .drain(..)
                    .map(|(from, data)| Event::Received { from, data }),
            );
        }
        // Issued in order, each as long under way: the due ones are a prefix.
        while st.completions.front().is_some_and(|c| c.2 <= st.polls) {
            let (token, outcome, _) = st.completions.pop_front().expect("checked");
            events.push(match outcome {
                Ok(data) => Event::Completed { token, data },
                Err(error) => Event::Failed { token, error },
            });
        }
        Ok(events.len() - n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A native op of `native_after_polls(_, 3)` completes at the third poll after its
    /// call, the polls before it empty; ops issued one after another complete in order.
    #[test]
    fn native_ops_complete_after_their_polls() {
        let echo = Echo::native_after_polls(2, 3);
        assert!(matches!(echo.put(0, 1, 0, &[1], 7), Ok(Issued::Pending)));
        let mut events = Vec::new();
        assert_eq!(echo.poll(&mut events).unwrap(), 0);
        assert!(matches!(echo.put(0, 1, 0, &[2], 8), Ok(Issued::Pending)));
        assert_eq!(echo.poll(&mut events).unwrap(), 0);
        assert_eq!(echo.poll(&mut events).unwrap(), 1);
        assert!(matches!(events[..], [Event::Completed { token: 7, .. }]));
        // The second, called after the first poll, at the fourth.
        assert_eq!(echo.poll(&mut events).unwrap(), 1);
        assert!(matches!(events[1], Event::Completed { token: 8, .. }));
        assert_eq!(echo.poll(&mut events).unwrap(), 0);
        // 0 polls is the next one, as `native`'s.
        let echo = Echo::native_after_polls(2, 0);
        assert!(matches!(echo.put(0, 1, 0, &[1], 9), Ok(Issued::Pending)));
        assert_eq!(echo.poll(&mut events).unwrap(), 1);
    }
}
