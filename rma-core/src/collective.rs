//! The message layer under communicators' collectives: one step of a collective sends
//! some bytes to some members and receives some bytes from others, in
//! [`Kind::Collective`] pieces no larger than the backend's messages, while the engine
//! keeps making RMA progress. The algorithms (Bruck's allgather, binomial trees) are in
//! [`comm`](crate::comm); here is what they share: the inbox the progress pass fills,
//! and the wait that turns a dead, departed or mismatched member into a typed error.

use std::collections::HashMap;

use crate::engine::{EngineShared, ENGINE_WINDOW};
use crate::error::{PeerError, Result, TransportError};
use crate::wire::{self, Kind};
use crate::Rank;

/// The collective calls, by their code on the wire (the index): a member in another
/// collective call of the same communicator is a [`PeerError::Mismatch`] naming both.
const CALLS: &[&str] = &[
    "barrier",
    "broadcast",
    "allgather",
    "allreduce",
    "reduce",
    "gather",
    "scatter",
    "split",
    "create",
    "allocate",
    "create_window",
    "create_dynamic",
    "allocate_shared",
    "dup",
];

pub(crate) fn call_code(call: &str) -> u8 {
    CALLS.iter().position(|c| *c == call).unwrap_or(CALLS.len()) as u8
}

pub(crate) fn call_name(code: u8) -> &'static str {
    CALLS
        .get(code as usize)
        .copied()
        .unwrap_or("an unknown collective")
}

/// What arrived from one member for one step of one collective call.
struct Arrival {
    call: u8,
    total: u64,
    data: Vec<u8>,
}

/// Collective pieces received and not yet taken, by (tag, step, sender).
#[derive(Default)]
pub(crate) struct Inbox {
    arrived: HashMap<(u64, u32, Rank), Arrival>,
}

/// A collective message the sender built wrong (pieces out of order or past their total).
pub(crate) type PieceError = &'static str;

impl Inbox {
    /// Files one piece. Pieces of a pair arrive in order (the transport's contract), so
    /// each must start where the previous ended; the buffer grows with what arrives, not
    /// with what the sender claims.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn piece(
        &mut self,
        from: Rank,
        tag: u64,
        step: u32,
        call: u8,
        total: u64,
        offset: u64,
        data: &[u8],
    ) -> std::result::Result<(), PieceError> {
        let a = self
            .arrived
            .entry((tag, step, from))
            .or_insert_with(|| Arrival {
                call,
                total,
                data: Vec::with_capacity(total.min(1 << 20) as usize),
            });
        if a.call != call || a.total != total || a.data.len() as u64 != offset {
            return Err("collective piece out of order");
        }
        rma_sync::copy::extend(&mut a.data, data);
        Ok(())
    }

    /// The whole message of `from` for this step, once it is all here; `Err` with the
    /// sender's call when it is in another collective.
    fn take(&mut self, tag: u64, step: u32, from: Rank, call: u8) -> Option<Result<Vec<u8>, u8>> {
        let key = (tag, step, from);
        let a = self.arrived.get(&key)?;
        if a.call != call {
            return Some(Err(a.call));
        }
        if (a.data.len() as u64) < a.total {
            return None;
        }
        self.arrived.remove(&key).map(|a| Ok(a.data))
    }
}

/// One step of a collective: these sends, then these receives.
pub(crate) struct Step<'a> {
    /// The collective call (for mismatch errors and the wire's check).
    pub call: &'static str,
    /// The communicator's context and call number.
    pub tag: u64,
    /// Which step of the call.
    pub step: u32,
    /// (World rank, bytes) to send.
    pub sends: &'a [(Rank, &'a [u8])],
    /// World ranks to receive from, in the order the result has them.
    pub receives: &'a [Rank],
}

impl EngineShared {
    /// Runs one step: every send goes (in pieces, retried while the backend is busy),
    /// every receive arrives; RMA progress continues meanwhile. A member that is dead,
    /// left the job, or is in another collective call makes it a typed error naming it.
    pub(crate) fn exchange(&self, s: Step<'_>) -> Result<Vec<Vec<u8>>> {
        let code = call_code(s.call);
        let mut enc = wire::Encoder::default();
        let (mut next, mut sent) = (0usize, 0usize);
        let mut got: Vec<Option<Vec<u8>>> = vec![None; s.receives.len()];
        let mut awaited = None;
        self.wait_until(s.call, || {
            while let Some(&(peer, data)) = s.sends.get(next) {
                // Headroom for the header and this body's fields under the backend's
                // largest message.
                let room = self
                    .transport
                    .capabilities(peer)
                    .max_message
                    .saturating_sub(64)
                    .max(64);
                let end = data.len().min(sent + room);
                enc.start(Kind::Collective, 0, ENGINE_WINDOW, 0)
                    .u64(s.tag)
                    .u32(s.step)
                    .u8(code)
                    .u64(data.len() as u64)
                    .u64(sent as u64)
                    .bytes(&data[sent..end]);
                match self.transport.send(peer, enc.finish()) {
                    Ok(()) => {
                        self.stats.message(Kind::Collective, enc.finish().len());
                        sent = end;
                        if sent == data.len() {
                            (next, sent) = (next + 1, 0);
                        }
                    }
                    Err(TransportError::Busy) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            let mut inbox = self.collectives.lock().unwrap_or_else(|x| x.into_inner());
            awaited = None;
            for (slot, &from) in got.iter_mut().zip(s.receives) {
                if slot.is_some() {
                    continue;
                }
                match inbox.take(s.tag, s.step, from, code) {
                    Some(Ok(data)) => *slot = Some(data),
                    Some(Err(theirs)) => {
                        return Err(PeerError::Mismatch {
                            rank: from,
                            call: s.call,
                            theirs: call_name(theirs),
                        }
                        .into())
                    }
                    None => {
                        // Pieces of a pair arrive in order, and a departure after them: a
                        // member that left with its part missing never sends it.
                        if self.has_departed(from) {
                            return Err(PeerError::Departed {
                                rank: from,
                                call: s.call,
                            }
                            .into());
                        }
                        awaited.get_or_insert(from);
                    }
                }
            }
            Ok(next == s.sends.len() && awaited.is_none())
        })
        .map_err(|err| match err.peer() {
            Some(&PeerError::Timeout { call, rank: None }) => PeerError::Timeout {
                call,
                rank: awaited,
            }
            .into(),
            _ => err,
        })?;
        Ok(got.into_iter().map(Option::unwrap_or_default).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_assemble_in_order_and_refuse_otherwise() {
        let mut inbox = Inbox::default();
        let code = call_code("allgather");
        inbox.piece(3, 7, 0, code, 5, 0, &[1, 2]).unwrap();
        assert!(inbox.take(7, 0, 3, code).is_none(), "not whole yet");
        assert!(inbox.piece(3, 7, 0, code, 5, 4, &[9]).is_err(), "a gap");
        inbox.piece(3, 7, 0, code, 5, 2, &[3, 4, 5]).unwrap();
        assert_eq!(inbox.take(7, 0, 3, code), Some(Ok(vec![1, 2, 3, 4, 5])));
        assert!(inbox.take(7, 0, 3, code).is_none(), "taken once");
        // Another call under the same tag is the other member's mismatch.
        inbox
            .piece(1, 8, 0, call_code("barrier"), 0, 0, &[])
            .unwrap();
        assert_eq!(inbox.take(8, 0, 1, code), Some(Err(call_code("barrier"))));
        assert_eq!(call_name(call_code("split")), "split");
        assert_eq!(call_name(200), "an unknown collective");
    }
}
