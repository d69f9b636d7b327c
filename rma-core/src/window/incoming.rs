//! Incoming packets and completions: the target side's handling of ops and lock
//! requests (through [`crate::target`]), responses, acks, posts, barriers and peers'
//! departures.

use super::*;

/// Replies by message longer than this are taken whole with their packet
/// ([`Fetched::InPacket`]) rather than copied out of it.
const TAKE_REPLY_ABOVE: usize = 4096;

/// A reply whose packet completes its request as it is ([`Fetched::InPacket`]): the
/// caller of [`WinState::handle_packet`], which owns the packet, hands it over.
#[derive(Debug)]
pub(crate) struct TakenReply {
    /// The request the reply completes.
    pub request: Arc<crate::request::RequestState>,
    /// Where its bytes start in the packet (they run to its end).
    pub at: usize,
}

impl TakenReply {
    /// Completes the request with `packet`, the one its reply came in.
    pub(crate) fn complete(self, packet: Vec<u8>) {
        let at = self.at;
        self.request.complete(Ok(Fetched::InPacket { packet, at }));
    }
}

impl WinState {
    /// The reply the last packet handled left to take whole ([`TakenReply`]).
    pub(crate) fn take_reply(&mut self) -> Option<TakenReply> {
        self.taken_reply.take()
    }

    /// Handles one decoded packet from `from`.
    pub(crate) fn handle_packet(
        &mut self,
        w: &WindowShared,
        from: Rank,
        p: &Packet<'_>,
        raw: &[u8],
    ) -> Result<()> {
        if !w.is_member(from) {
            // Not of this window's communicator, whatever the packet claims.
            w.engine.stats.refused();
            return Err(PeerError::Malformed {
                from,
                reason: "a packet for a window of a communicator it is not in",
            }
            .into());
        }
        match p.kind {
            k if k.is_op() => {
                if p.flags & (flags::LOCK_SHARED | flags::LOCK_EXCLUSIVE) != 0 {
                    let waiter = Waiter {
                        origin: from,
                        exclusive: p.flags & flags::LOCK_EXCLUSIVE != 0,
                        lock_all: false,
                        single_op: Some(raw.to_vec()),
                    };
                    let granted = self.target.locks.request(waiter, &mut Self::own_lock(w));
                    if let Some(granted) = granted {
                        self.apply_granted(w, granted)?;
                    }
                } else {
                    self.apply_and_reply(w, from, p)?;
                }
            }
            Kind::Response => {
                let Body::Response { token, ok, data } = &p.body else {
                    unreachable!("decoded")
                };
                if let Some(elem) = self.table.get_mut(from) {
                    if let Some(i) = elem
                        .issued
                        .iter()
                        .position(|o| o.token == *token && !o.native)
                    {
                        let op = elem.issued.swap_remove(i);
                        // What the request asked back, to the byte: a peer that answers
                        // with more or less is malformed, whatever it claims.
                        let expected = match op.kind {
                            OpKind::CompareAndSwap => op.datatype.map_or(0, |d| d.size() as u64),
                            OpKind::Get | OpKind::GetAccumulate => op.extent.bytes(),
                            OpKind::Put | OpKind::Accumulate => 0,
                        };
                        if let Some(r) = &op.request {
                            // Where a large reply's bytes start in the packet, if they run
                            // to its end: the packet is then taken whole (its header
                            // before them), not copied.
                            let at = (data.as_ptr() as usize).wrapping_sub(raw.as_ptr() as usize);
                            if !*ok {
                                r.complete(Err(PeerError::Refused { rank: from }.into()));
                            } else if data.len() as u64 != expected {
                                r.complete(Err(PeerError::Malformed {
                                    from,
                                    reason: "a reply whose length differs from the request",
                                }
                                .into()));
                            } else if (op.landing.as_ref())
                                .is_some_and(|(landing, at)| landing.write(*at, data))
                            {
                                // In the caller's buffer (`get_owned`): nothing to hand over.
                                r.complete(Ok(Fetched::default()));
                            } else if data.len() > TAKE_REPLY_ABOVE
                                && at.checked_add(data.len()) == Some(raw.len())
                            {
                                self.taken_reply = Some(TakenReply {
                                    request: Arc::clone(r),
                                    at,
                                });
                            } else {
                                r.complete(Ok(Fetched::copy_of(data)));
                            }
                        }
                        self.free_op(w, op);
                    }
                }
                if p.flags & flags::ACK != 0 {
                    self.handle_ack(from, p.flags);
                }
            }
            Kind::Lock => {
                let waiter = Waiter {
                    origin: from,
                    exclusive: p.flags & flags::LOCK_EXCLUSIVE != 0,
                    lock_all: p.flags & flags::LOCK_ALL != 0,
                    single_op: None,
                };
                if let Some(g) = self.target.locks.request(waiter, &mut Self::own_lock(w)) {
                    self.apply_granted(w, g)?;
                }
            }
            Kind::LockGranted => {
                if let Some(l) = self.locks.get_mut(&from) {
                    l.granted = true;
                }
                match self.table.get_mut(from) {
                    Some(t) if t.state == TargetState::LockIssued => {
                        t.state = TargetState::LockGranted
                    }
                    _ => self.window_grants = self.window_grants.saturating_sub(1),
                }
            }
            Kind::Done => {
                let mut reply = Reply::default();
                self.target.handle_sync_flags(from, p, &mut reply);
                self.finish_reply(w, from, reply)?;
            }
            Kind::Ack => self.handle_ack(from, p.flags),
            Kind::Post => *self.target.posts.entry(from).or_default() += 1,
            Kind::Barrier => {
                if p.flags & flags::DONE != 0 {
                    // A two-member fence's RMA_DONE (unacknowledged): the ops before it
                    // are applied, delivery being ordered.
                    self.target.done_received(from, p.done_count);
                }
                if let Body::Barrier { seq, round } = p.body {
                    *self
                        .target
                        .barrier_arrivals
                        .entry((seq, round))
                        .or_default() += 1;
                }
            }
            Kind::Depart => {
                if let Body::Depart { what, seq } = p.body {
                    let blamed = w.engine.heard_blame(from, p.done_count);
                    let mismatch =
                        p.done_count & BLAME_MISMATCH != 0 && what == Departure::Abandoned;
                    if let Some(rank) = blamed.filter(|r| mismatch && *r != w.engine.rank) {
                        // It left over a mismatch with `rank`: that is what this window's
                        // collectives report, whichever word arrives first.
                        let theirs = Departure::call_of((p.done_count >> 24) & 0x3f);
                        self.departures.mismatch.get_or_insert((rank, theirs));
                    }
                    let d = &mut self.departures;
                    match what {
                        Departure::Abandoned => {
                            if d.abandoned.len() < w.engine.size {
                                d.abandoned.resize(w.engine.size, None);
                            }
                            d.abandoned[from as usize] = Some(seq);
                            // It will never unlock: what it holds or waits for here goes.
                            self.revoke_locks(w, from)?;
                        }
                        Departure::Mismatch => {
                            d.mismatch.get_or_insert((from, Departure::call_of(seq)));
                        }
                        Departure::Free => {
                            if d.freeing.len() < w.engine.size {
                                d.freeing.resize(w.engine.size, None);
                            }
                            d.freeing[from as usize] = Some(seq);
                        }
                        Departure::Job => {}
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn handle_ack(&mut self, from: Rank, fl: u16) {
        if fl & flags::REFUSED != 0 {
            self.defer(PeerError::Refused { rank: from }.into());
        }
        match self.table.get_mut(from) {
            Some(t) if t.acks_awaited > 0 => t.acks_awaited -= 1,
            _ => self.window_acks = self.window_acks.saturating_sub(1),
        }
    }

    pub(super) fn apply_granted(&mut self, w: &WindowShared, granted: Waiter) -> Result<()> {
        let mut queue = vec![granted];
        while let Some(g) = queue.pop() {
            match g.single_op {
                Some(bytes) => {
                    let p = wire::decode(&bytes).map_err(|reason| PeerError::Malformed {
                        from: g.origin,
                        reason,
                    })?;
                    if let Some(mut more) = self.apply_and_reply(w, g.origin, &p)? {
                        more.reverse();
                        queue.extend(more);
                    }
                }
                None => self.send_control(w, g.origin, Kind::LockGranted, 0, 0)?,
            }
        }
        Ok(())
    }

    /// Applies an op packet and sends what it calls for; returns lock waiters granted by
    /// an UNLOCK it carried.
    pub(super) fn apply_and_reply(
        &mut self,
        w: &WindowShared,
        from: Rank,
        p: &Packet<'_>,
    ) -> Result<Option<Vec<Waiter>>> {
        let memory = w.memory.read().unwrap_or_else(|e| e.into_inner()).clone();
        let refused_before = self.target.refused.contains(&from);
        // A notified op naming a counter past this process's is refused whole: nothing
        // of it applied, nothing counted.
        let counter_ok = p.notify.is_none_or(|index| w.has_notification(index));
        let response = self.target.apply_op(&memory, from, p, !counter_ok);
        if let Some(index) = p.notify {
            // Counted once the op is applied, before its reply goes.
            let applied = response.as_ref().is_none_or(|r| r.ok)
                && (refused_before || !self.target.refused.contains(&from));
            if counter_ok && applied {
                w.notification_arrived(index);
            } else {
                tracing::debug!(from, index, "refused a notified op");
            }
        }
        if response.as_ref().is_some_and(|r| !r.ok) || self.target.refused.contains(&from) {
            w.counters.refused();
        }
        let mut reply = Reply {
            response,
            ..Reply::default()
        };
        self.target.handle_sync_flags(from, p, &mut reply);
        let released = reply.released.is_some();
        self.finish_reply(w, from, reply)?;
        Ok(released.then(|| self.target.locks.grant_waiting(&mut Self::own_lock(w))))
    }

    pub(super) fn finish_reply(
        &mut self,
        w: &WindowShared,
        from: Rank,
        reply: Reply,
    ) -> Result<()> {
        let mut ack_flags = 0;
        if reply.ack && self.target.take_refused(from) {
            ack_flags |= flags::REFUSED;
        }
        match reply.response {
            Some(r) => {
                let fl = if reply.ack { flags::ACK | ack_flags } else { 0 };
                if r.head_reserved {
                    // A get's reply: its head in place, the packet sent from its buffer.
                    let mut packet = r.data;
                    wire::response_head(&mut packet, fl, w.id, r.token, r.ok);
                    self.send_packet(w, from, Kind::Response, packet)?;
                } else {
                    self.enc
                        .start(Kind::Response, fl, w.id, 0)
                        .u64(r.token)
                        .u8(r.ok as u8)
                        .bytes(&r.data);
                    self.send_encoded(w, from, Kind::Response)?;
                }
            }
            None if reply.ack => self.send_control(w, from, Kind::Ack, ack_flags, 0)?,
            None => {}
        }
        if let Some(exclusive) = reply.released {
            if Self::own_lock_is_native(w) {
                w.unlock_word(w.engine.rank, exclusive)?;
            }
            for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
                self.apply_granted(w, g)?;
            }
        }
        Ok(())
    }

    /// Takes away the locks `origin` holds on this window's target side (and its waiting
    /// requests), releasing the native word held for them, and grants whoever waits.
    pub(crate) fn revoke_locks(&mut self, w: &WindowShared, origin: Rank) -> Result<()> {
        let released = self.target.locks.revoke(origin);
        if released.is_empty() {
            return Ok(());
        }
        tracing::warn!(origin, win = w.id, "locks of a rank that is gone revoked");
        for exclusive in released {
            if Self::own_lock_is_native(w) {
                w.unlock_word(w.engine.rank, exclusive)?;
            }
        }
        for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
            self.apply_granted(w, g)?;
        }
        Ok(())
    }

    /// Whether this process's own window lock is a native word (shared memory) that the
    /// node's ranks take themselves: then ranks that lock by message (other nodes) take
    /// it through us, and we hold the word for them while they hold the lock.
    pub(super) fn own_lock_is_native(w: &WindowShared) -> bool {
        Self::native_locks(w, w.engine.rank)
    }

    /// The `take` of the lock queue: one attempt at the native word where there is one.
    pub(super) fn own_lock(w: &WindowShared) -> impl FnMut(bool) -> bool + '_ {
        let native = Self::own_lock_is_native(w);
        move |exclusive| {
            !native
                || w.engine
                    .transport
                    .try_lock(w.id, w.engine.rank, exclusive)
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "native lock word of our window");
                        false
                    })
        }
    }

    /// Retries the message-lock requests that wait for our native lock word.
    pub(super) fn grant_waiting_native(&mut self, w: &WindowShared) -> Result<()> {
        if self.target.locks.has_waiting() && Self::own_lock_is_native(w) {
            for g in self.target.locks.grant_waiting(&mut Self::own_lock(w)) {
                self.apply_granted(w, g)?;
            }
        }
        Ok(())
    }

    /// A native op completed (or failed).
    pub(crate) fn handle_completion(
        &mut self,
        w: &WindowShared,
        token: u64,
        result: Result<Option<Fetched>>,
    ) {
        if token & COUNTED != 0 {
            // A counted put that failed (a success is taken without the state): its error
            // for the next synchronization call, every mark cleared (`defer`) before its
            // count drops, so that the flush waiting for it takes the locked path and
            // reports it.
            if let Err(e) = result {
                self.defer(e);
            }
            w.direct.op_completed(token as Rank);
            return;
        }
        if token & UNTRACKED != 0 {
            let rank = token as Rank;
            if let Some(elem) = self.table.get_mut(rank) {
                elem.native_completed();
            }
            if let Err(e) = result {
                self.defer(e);
            }
            return;
        }
        let Some(rank) = self.native_index.remove(&token) else {
            return;
        };
        let Some(elem) = self.table.get_mut(rank) else {
            return;
        };
        elem.native_completed();
        if let Some(i) = elem
            .issued
            .iter()
            .position(|o| o.token == token && o.native)
        {
            let op = elem.issued.swap_remove(i);
            if let Some(r) = &op.request {
                r.complete(result.map(Option::unwrap_or_default));
            } else if let Err(e) = result {
                self.defer(e);
            }
            self.free_op(w, op);
        }
    }
}
