//! ISSUE_OPS and what goes on the wire (seed 004): the outbox, control packets,
//! ISSUE_OPS_TARGET with piggybacked RMA_DONE / UNLOCK / COMPLETE, native calls, and
//! the encoding of active-message ops.

use super::*;

/// Packets up to this long are copied into the outbox when the transport is busy; longer
/// ones move there with their buffer.
const QUEUE_BY_MOVE_ABOVE: usize = 4096;

impl WinState {
    /// Sends the packet in `self.enc`, or queues it behind earlier ones (order per target
    /// is part of the transport contract, so nothing overtakes the outbox).
    pub(super) fn send_encoded(&mut self, w: &WindowShared, to: Rank, kind: Kind) -> Result<()> {
        let bytes = self.enc.finish();
        if self.outbox.is_empty() {
            match w.engine.transport.send(to, bytes) {
                Ok(()) => {
                    w.count_message(kind, bytes.len());
                    return Ok(());
                }
                Err(TransportError::Busy) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Queued: a large packet's buffer moves into the queue (an active message's
        // piece is up to the largest message: no copy of it), a small one is copied
        // and the encoder keeps its buffer.
        let packet = if bytes.len() > QUEUE_BY_MOVE_ABOVE {
            let spare = std::mem::take(&mut self.target.spare_reply);
            self.enc.take(spare)
        } else {
            bytes.to_vec()
        };
        self.outbox_bytes += packet.len();
        self.outbox.push_back((to, kind, packet));
        Ok(())
    }

    /// Sends `packet`, a buffer of its own (a get's reply, its head written in place), or
    /// queues it behind earlier ones as it is; once sent, its buffer serves the next.
    pub(super) fn send_packet(
        &mut self,
        w: &WindowShared,
        to: Rank,
        kind: Kind,
        packet: Vec<u8>,
    ) -> Result<()> {
        if self.outbox.is_empty() {
            match w.engine.transport.send(to, &packet) {
                Ok(()) => {
                    w.count_message(kind, packet.len());
                    self.keep_sent(packet);
                    return Ok(());
                }
                Err(TransportError::Busy) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.outbox_bytes += packet.len();
        self.outbox.push_back((to, kind, packet));
        Ok(())
    }

    /// A sent packet's buffer, kept as the spare when larger than the one kept: the next
    /// large reply's, or the encoder's when a large packet of its moves into the outbox
    /// (a fresh buffer of a piece's size is fresh pages to fault in).
    fn keep_sent(&mut self, packet: Vec<u8>) {
        if packet.capacity() > self.target.spare_reply.capacity() {
            self.target.spare_reply = packet;
        }
    }

    pub(super) fn flush_outbox(&mut self, w: &WindowShared) -> Result<()> {
        while let Some((to, kind, bytes)) = self.outbox.front() {
            match w.engine.transport.send(*to, bytes) {
                Ok(()) => {
                    w.count_message(*kind, bytes.len());
                    if let Some((_, _, sent)) = self.outbox.pop_front() {
                        self.outbox_bytes -= sent.len();
                        self.keep_sent(sent);
                    }
                }
                Err(TransportError::Busy) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Whether a large op by message (`kind`) toward `rank` must wait for room
    /// ([`AM_BACKLOG_MAX`]): the outbox, once what the transport takes now is sent, or
    /// for an op with a reply, the replies `rank` owes.
    pub(super) fn am_backlog_full(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        kind: OpKind,
    ) -> Result<bool> {
        let full = self.backlog_at_bound(w, rank, kind)?;
        // One count per op that waits, however many tries it takes.
        if full && !std::mem::replace(&mut self.waiting_for_backlog, true) {
            w.counters.waited_for_backlog();
            w.engine.stats.waited_for_backlog();
        }
        if !full {
            self.waiting_for_backlog = false;
        }
        Ok(full)
    }

    fn backlog_at_bound(&mut self, w: &WindowShared, rank: Rank, kind: OpKind) -> Result<bool> {
        if self.outbox_bytes as u64 > AM_BACKLOG_MAX {
            self.flush_outbox(w)?;
            if self.outbox_bytes as u64 > AM_BACKLOG_MAX {
                return Ok(true);
            }
        }
        if !kind.has_response() {
            return Ok(false);
        }
        let owed = self.table.get(rank).map_or(0, |t| {
            (t.issued.iter())
                .filter(|o| !o.native)
                .map(|o| o.extent.bytes())
                .sum::<u64>()
        });
        Ok(owed > AM_BACKLOG_MAX)
    }

    pub(super) fn send_control(
        &mut self,
        w: &WindowShared,
        to: Rank,
        kind: Kind,
        fl: u16,
        done_count: u32,
    ) -> Result<()> {
        self.enc.start(kind, fl, w.id, done_count);
        self.send_encoded(w, to, kind)
    }

    /// The peer a blocked synchronization call most likely waits for, to name in its
    /// timeout: the sender of the barrier round under way, a target with work or
    /// acknowledgements outstanding, a PSCW peer whose post or complete has not come,
    /// or a peer that has not announced its `free`.
    pub(super) fn awaited_rank(&self, w: &WindowShared) -> Option<Rank> {
        let me = w.engine.rank;
        if let Some(Barrier::Messages(d)) = &self.barrier {
            let index = d.awaited(w.member_index() as Rank, w.member_count())?;
            return Some(w.member(index as usize));
        }
        if let Some(t) = self.table.iter().find(|t| !t.is_idle()) {
            return Some(t.rank);
        }
        if let WindowEpoch::Pscw(p) = &self.epoch {
            let waiting = (p.group.iter().zip(&p.granted))
                .find(|(r, granted)| !**granted && !self.target.posts.contains_key(*r));
            if let Some((r, _)) = waiting {
                return Some(*r);
            }
        }
        if let Some(group) = &self.target.exposure {
            if let Some(r) = group
                .iter()
                .find(|r| !self.target.completes.contains_key(*r))
            {
                return Some(*r);
            }
        }
        let freeing = &self.departures.freeing;
        if !freeing.is_empty() {
            return w
                .members()
                .find(|&r| r != me && freeing.get(r as usize).is_none_or(Option::is_none));
        }
        // A backend's own barrier does not say who is missing; between two ranks it is
        // the other one.
        (w.member_count() == 2).then(|| w.members().find(|&r| r != me))?
    }

    /// What a blocked call's wait consists of, for the warning its timeout logs: the
    /// epoch, messages not yet sent, window-protocol acks, and every target element that
    /// is not idle (its queues, counts and sync), so that a hang reported from a run
    /// says which step never came.
    pub(super) fn wait_summary(&self) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "epoch {}, outbox {}, window grants {} acks {}",
            self.epoch.name(),
            self.outbox.len(),
            self.window_grants,
            self.window_acks
        );
        for t in self.table.iter().filter(|t| !t.is_idle() || t.needs_done()) {
            let head = t.pending.front().map(|o| (o.kind, o.native));
            let _ = write!(
                s,
                "; target {}: {:?}, pending {} (head {:?}), issued {}, native in flight {}, \
                 am since done {}, puts since done {}, acks awaited {}, sync {:?}, \
                 am atomics {}, held for order {}",
                t.rank,
                t.state,
                t.pending.len(),
                head,
                t.issued.len(),
                t.native_in_flight,
                t.am_since_done,
                t.puts_since_done,
                t.acks_awaited,
                t.sync,
                t.am_atomics,
                t.held_for_order
            );
        }
        s
    }

    /// Fails every op of `rank` still queued or under way with `err` and frees its
    /// target element (its native ops' late completions find nothing and are ignored).
    pub(super) fn abandon_target(&mut self, w: &WindowShared, rank: Rank, err: &Error) {
        self.direct.close(rank);
        let Some(t) = self.table.get_mut(rank) else {
            return;
        };
        let mut ops: Vec<Box<OpElem>> = t.pending.drain_all().collect();
        ops.append(&mut t.issued);
        for op in ops {
            if let Some(r) = &op.request {
                r.complete(Err(err.clone()));
            }
            self.native_index.remove(&op.token);
            self.free_op(w, op);
        }
        self.free_target(w, rank);
    }

    /// Releases the native lock words this window holds at its targets: per-target
    /// locks, and a lock_all's shared locks (per target, or on every target by the
    /// window protocol). For a window that is dropped, or whose epoch failed.
    pub(super) fn release_native_locks(&mut self, w: &WindowShared) {
        self.direct.close_all();
        let unlock = |rank: Rank, exclusive: bool| {
            if Self::native_locks(w, rank) {
                let _ = w.unlock_word(rank, exclusive);
            }
        };
        match self.epoch {
            WindowEpoch::PerTarget => {
                for (rank, l) in &self.locks.0 {
                    if l.granted && !l.nocheck {
                        unlock(*rank, l.exclusive);
                    }
                }
            }
            WindowEpoch::LockAllGranted { nocheck: false } => {
                for rank in w.members() {
                    unlock(rank, false);
                }
            }
            WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => {
                for t in self.table.iter() {
                    if t.state == TargetState::LockGranted {
                        unlock(t.rank, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Tells every peer what this rank does of the window (a [`Kind::Depart`] packet).
    pub(super) fn send_departure(
        &mut self,
        w: &WindowShared,
        what: Departure,
        seq: u32,
    ) -> Result<()> {
        // Only a rank that leaves says whom it blames (a free or a mismatch announcement
        // is no departure of the process, and an old blame would mislead).
        let blame = match what {
            Departure::Abandoned => w.engine.blame_word(),
            _ => 0,
        };
        for peer in w.members().filter(|r| *r != w.engine.rank) {
            self.enc
                .start(Kind::Depart, 0, w.id, blame)
                .u8(what as u8)
                .u32(seq);
            self.send_encoded(w, peer, Kind::Depart)?;
        }
        Ok(())
    }

    /// For a wait of `call` on this window whose condition does not hold after a
    /// progress pass: the error if a peer's departure means it never will. A peer that
    /// abandoned the window joins no collective on it again; a peer that failed a
    /// collective as a mismatch fails ours too; a peer in `free` while this rank is in
    /// `fence` with fewer barriers behind it is in another collective.
    pub(super) fn departure_error(&mut self, w: &WindowShared, call: &'static str) -> Result<()> {
        if let Some(rank) = w.engine.failed_rank() {
            // The cause before its consequences (peers that left because of it).
            return Err(PeerError::Dead { rank }.into());
        }
        // Every pass of every wait asks: nothing heard, nothing to compare calls against.
        if self.departures.none_heard() {
            return Ok(());
        }
        if let Some((rank, theirs)) = self.departures.mismatch {
            return Err(PeerError::Mismatch { rank, call, theirs }.into());
        }
        // A peer that dropped the window is blamed by a fence only if it never started
        // this fence's barrier (one that did may still let it complete).
        let mine = self.barrier_seq;
        // Only collectives wait for every rank: passive-target calls go on among the
        // others (the dropped window's locks were revoked at its target).
        let collective = matches!(call, "fence" | "free" | "complete" | "wait");
        let behind = (self.departures.abandoned.iter().enumerate())
            .filter_map(|(r, s)| s.map(|s| (s, r)))
            .filter(|(s, _)| collective && (call != "fence" || *s < mine))
            .min();
        if let Some((_, rank)) = behind {
            return Err(PeerError::Departed {
                rank: rank as Rank,
                call,
            }
            .into());
        }
        if call == "fence" {
            let early = self
                .departures
                .freeing
                .iter()
                .position(|s| s.is_some_and(|s| s < mine));
            if let Some(rank) = early {
                self.send_departure(w, Departure::Mismatch, Departure::call_code(call))?;
                return Err(PeerError::Mismatch {
                    rank: rank as Rank,
                    call,
                    theirs: "free",
                }
                .into());
            }
        }
        Ok(())
    }
}

pub(super) fn sync_flags(sync: SyncFlag) -> u16 {
    match sync {
        SyncFlag::None => 0,
        SyncFlag::Flush => flags::DONE,
        SyncFlag::Unlock => flags::UNLOCK,
        SyncFlag::Complete => flags::COMPLETE,
    }
}

pub(super) fn op_kind_wire(k: OpKind) -> Kind {
    match k {
        OpKind::Put => Kind::Put,
        OpKind::Get => Kind::Get,
        OpKind::Accumulate => Kind::Accumulate,
        OpKind::GetAccumulate => Kind::GetAccumulate,
        OpKind::CompareAndSwap => Kind::CompareAndSwap,
    }
}

/// Encodes `op` into `enc`, `data` its payload (its element's, or its call's while
/// staged).
pub(super) fn encode_op(
    enc: &mut Encoder,
    win: u32,
    op: &OpElem,
    data: &[u8],
    fl: u16,
    done_count: u32,
) {
    let kind = op_kind_wire(op.kind);
    match op.notify {
        Some(index) => {
            enc.start(kind, fl | flags::NOTIFY, win, done_count)
                .u32(index);
        }
        None => {
            enc.start(kind, fl, win, done_count);
        }
    }
    let dt = op.datatype.unwrap_or(DataType::U8);
    match op.kind {
        OpKind::Put => {
            enc.extent(op.extent).bytes(data);
        }
        OpKind::Get => {
            enc.u64(op.token).extent(op.extent);
        }
        OpKind::Accumulate => {
            enc.u8(op.op.unwrap_or(AccOp::Replace) as u8)
                .u8(dt as u8)
                .extent(op.extent)
                .bytes(data);
        }
        OpKind::GetAccumulate => {
            enc.u64(op.token)
                .u8(op.op.unwrap_or(AccOp::NoOp) as u8)
                .u8(dt as u8)
                .extent(op.extent);
            if op.op != Some(AccOp::NoOp) {
                enc.bytes(data);
            }
        }
        OpKind::CompareAndSwap => {
            enc.u64(op.token)
                .u8(dt as u8)
                .u64(op.extent.offset)
                .bytes(data);
        }
    }
}

/// A native op on a strided extent, on a window whose ops complete in their call
/// (`native_allowed` allows no other): the window's native call for each block in turn,
/// its data (or fetched bytes) the op's packed ones. Atomic per element, as MPI asks of
/// accumulates; every block checked by the backend against its mapping.
#[inline(never)]
pub(super) fn native_blocks(
    w: &WindowShared,
    d: &OpDesc<'_>,
) -> std::result::Result<Issued, TransportError> {
    let ops = w.ops.as_deref().ok_or(TransportError::Unsupported(
        "strided native ops without the window's bound ops",
    ))?;
    let e = d.extent;
    let (count, block) = (e.count as usize, e.block as usize);
    let at = |i: usize| e.offset + i as u64 * e.stride;
    let pending = || {
        TransportError::Failed(
            "the backend left a block pending after saying its ops complete in the call".into(),
        )
    };
    match d.kind {
        OpKind::Put => {
            let data = &d.data[..(count * block).min(d.data.len())];
            match ops.put_blocks(d.target, e.offset, e.stride, block, data)? {
                Issued::Pending => Err(pending()),
                done => Ok(done),
            }
        }
        OpKind::Get => {
            let mut out = vec![0u8; count * block];
            if !ops.get_blocks(d.target, e.offset, e.stride, block, &mut out)? {
                return Err(TransportError::Unsupported(
                    "a strided get the backend cannot complete in the call",
                ));
            }
            Ok(Issued::Complete(Some(Fetched::from(out))))
        }
        OpKind::Accumulate if !d.data.is_empty() => {
            let op = d.op.unwrap_or(AccOp::Replace);
            let data = &d.data[..(count * block).min(d.data.len())];
            ops.accumulate_blocks(d.target, e.offset, e.stride, block, op, d.datatype, data)?;
            Ok(Issued::Complete(None))
        }
        OpKind::Accumulate | OpKind::GetAccumulate => {
            let fetch = d.kind == OpKind::GetAccumulate;
            let mut old = Vec::with_capacity(if fetch { count * block } else { 0 });
            let op = d.op.unwrap_or(AccOp::Replace);
            for i in 0..count {
                // A get_accumulate with NO_OP carries no operand: zeros of the block's size
                // stand in for it (the backend reads, leaves the target as it is).
                let zeros;
                let operand = if d.data.is_empty() {
                    zeros = vec![0u8; block];
                    &zeros[..]
                } else {
                    &d.data[i * block..(i + 1) * block]
                };
                let atomic = NativeAtomic::Accumulate {
                    op,
                    datatype: d.datatype,
                    operand,
                    fetch,
                };
                match ops.atomic(d.target, at(i), atomic)? {
                    Issued::Complete(data) => {
                        if fetch {
                            old.extend_from_slice(data.as_ref().map_or(&[][..], |f| f));
                        }
                    }
                    Issued::Pending => return Err(pending()),
                }
            }
            Ok(Issued::Complete(fetch.then(|| Fetched::from(old))))
        }
        OpKind::CompareAndSwap => Err(TransportError::Unsupported(
            "compare-and-swap of more than one element",
        )),
    }
}

/// A put from a buffer its request holds ([`Window::put_from_buffer`](crate::Window::put_from_buffer)):
/// lent to the backend for the write ([`Transport::put_lent`](crate::transport::Transport::put_lent)),
/// which may also write its bytes as an ordinary put and leave the loan.
#[inline(never)]
fn put_held(
    w: &WindowShared,
    d: &OpDesc<'_>,
    token: u64,
) -> std::result::Result<Issued, TransportError> {
    let Some((landing, at)) = &d.landing else {
        return Err(TransportError::Failed(
            "a held put without its buffer".into(),
        ));
    };
    let Some(loan) = landing.lend(*at, d.extent.bytes() as usize) else {
        return Err(TransportError::Failed(
            "a held put's buffer is not there".into(),
        ));
    };
    w.issue_lent(OpKind::Put, d.target, d.extent.offset, loan, token)
}

/// The transport call of a native op issued from its element (queued first); `active`:
/// in an active-target epoch (see [`native_call_desc`]).
pub(super) fn native_call(
    w: &WindowShared,
    rank: Rank,
    op: &OpElem,
    token: u64,
    active: bool,
) -> std::result::Result<Issued, TransportError> {
    // The same call as an op still in its descriptor makes.
    let d = OpDesc {
        kind: op.kind,
        target: rank,
        extent: op.extent,
        op: op.op,
        datatype: op.datatype.unwrap_or(DataType::U8),
        data: &op.data,
        wants_result: false,
        into: None,
        notify: None,
        // A get's or put's buffer its request holds, to lend to the backend.
        landing: match op.kind {
            OpKind::Get | OpKind::Put => op.landing.clone(),
            _ => None,
        },
    };
    native_call_desc(w, &d, token, active, op.notify)
}

/// The transport call of a native op. `active`: the epoch is an active-target one (fence,
/// PSCW), where an ordered put needs no acknowledgement of its own
/// ([`Transport::put_unacknowledged`](crate::transport::Transport::put_unacknowledged)).
/// `notice`: the counter of a notified op that counts, which a put carries where the
/// transport takes it ([`WindowShared::transport_notifies`]; elsewhere the caller adds
/// to the counter once the op is done).
#[inline(always)] // on every native op's path; a call costs the emulator more than its code
pub(super) fn native_call_desc(
    w: &WindowShared,
    d: &OpDesc<'_>,
    token: u64,
    active: bool,
    notice: Option<u32>,
) -> std::result::Result<Issued, TransportError> {
    let off = d.extent.offset;
    let t = &w.engine.transport;
    if d.extent.count > 1 {
        return native_blocks(w, d);
    }
    let atomic = match d.kind {
        OpKind::Put if d.landing.is_some() => return put_held(w, d, token),
        OpKind::Put => {
            if let Some(index) = notice.filter(|_| w.transport_notifies(d.target, d.data.len())) {
                return t.put_notified(w.id, d.target, off, d.data, index, token);
            }
            return match &w.ops {
                // Bound to the window: no lookup of it by id in the backend.
                Some(ops) => ops.put(d.target, off, d.data),
                None if active && w.caps(d.target).ordered_puts => {
                    t.put_unacknowledged(w.id, d.target, off, d.data, token)
                }
                None => t.put(w.id, d.target, off, d.data, token),
            };
        }
        OpKind::Get => {
            let len = d.extent.bytes() as usize;
            // A get of a whole buffer its request owns, lent to the backend to read into
            // (the loan goes back to the request if the backend does not take it).
            if let Some(loan) = w.loan_for_get(d.target, len, d.landing.as_ref()) {
                return w.issue_lent(OpKind::Get, d.target, off, loan, token);
            }
            return t.get(w.id, d.target, off, len, token);
        }
        OpKind::Accumulate | OpKind::GetAccumulate => NativeAtomic::Accumulate {
            op: d.op.unwrap_or(AccOp::Replace),
            datatype: d.datatype,
            operand: d.data,
            fetch: d.kind == OpKind::GetAccumulate,
        },
        OpKind::CompareAndSwap => {
            let (compare, swap) = d.data.split_at(d.datatype.size());
            NativeAtomic::CompareAndSwap {
                datatype: d.datatype,
                compare,
                swap,
            }
        }
    };
    match &w.ops {
        Some(ops) => ops.atomic(d.target, off, atomic),
        None => t.atomic(w.id, d.target, off, atomic, token),
    }
}
