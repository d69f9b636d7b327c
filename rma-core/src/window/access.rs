//! When ops to a target may go: the grants of fence, PSCW (posts, native notices),
//! lock and lock_all epochs, lock requests (native or by message), the LOCK_ALL window
//! protocol, and the progress of one window (MAKE_RMA_PROGRESS_WIN).

use super::*;

impl WinState {
    /// Whether ops to `rank` may go on the wire now: the one rule of every epoch, for the
    /// op fast path (RMA_OP), ISSUE_OPS_TARGET and `complete`. For PSCW it takes the
    /// target's post, native or by message, when one is in.
    #[inline]
    pub(super) fn access_granted(&mut self, w: &WindowShared, rank: Rank) -> bool {
        let state = self.table.get(rank).map(|t| t.state);
        self.access_granted_in(w, rank, state)
    }

    /// [`access_granted`](Self::access_granted) with the state of `rank`'s target element
    /// (`None`: there is none) already looked up, as the op fast path has it.
    #[inline(always)] // the op fast path: within callgrind's count of before the merge
    pub(super) fn access_granted_in(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        state: Option<TargetState>,
    ) -> bool {
        if matches!(self.epoch, WindowEpoch::Pscw(_)) {
            // A post left natively counts at once (no element queued to wait for the
            // next progress pass).
            self.take_native_posts(w, rank);
        }
        match &mut self.epoch {
            WindowEpoch::FenceGranted | WindowEpoch::LockAllGranted { .. } => true,
            WindowEpoch::Pscw(p) => match p.index(rank) {
                Some(i) if p.granted[i] => true,
                Some(i) => match self.target.posts.get_mut(&rank) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        p.granted[i] = true;
                        true
                    }
                    _ => false,
                },
                None => false,
            },
            WindowEpoch::PerTarget | WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => {
                match state {
                    Some(s) => matches!(s, TargetState::LockGranted | TargetState::Ready),
                    // A lock the backend granted in the `lock` call needs no element.
                    None => {
                        matches!(self.epoch, WindowEpoch::PerTarget)
                            && self.locks.get(&rank).is_some_and(|l| l.granted)
                    }
                }
            }
            _ => false,
        }
    }

    pub(super) fn advance_barrier(&mut self, w: &WindowShared) -> Result<bool> {
        // A native barrier alone (shared memory's fences): one load of its generation,
        // on every turn of the fence's wait.
        if let (Some(Barrier::Native(ticket)), true) =
            (&self.barrier, self.background_barriers.is_empty())
        {
            let done = w.barrier_done(*ticket)?;
            if done {
                self.barrier = None;
            }
            return Ok(done);
        }
        // The dissemination runs over the members' indices.
        let (rank, size) = (w.member_index() as Rank, w.member_count());
        let mut sends = Vec::new();
        let mut done = true;
        let current = match &self.barrier {
            Some(Barrier::Messages(d)) => d.seq,
            _ => u32::MAX,
        };
        let messages = self.barrier.iter_mut().filter_map(|b| match b {
            Barrier::Messages(d) => Some(d),
            Barrier::Native(_) => None,
        });
        for b in messages.chain(self.background_barriers.iter_mut()) {
            let finished =
                b.advance::<Error>(rank, size, &mut self.target.barrier_arrivals, |p, s, r| {
                    sends.push((p, s, r));
                    Ok(true)
                })?;
            if b.seq == current {
                done = finished;
            }
        }
        for (peer, seq, round) in sends {
            // A fence of two members: the first barrier message after the epoch's ops
            // is their RMA_DONE, unacknowledged (see `fence`).
            let (fl, count) = match self.pair_done.take() {
                Some(count) => (flags::DONE, count),
                None => (0, 0),
            };
            self.enc
                .start(Kind::Barrier, fl, w.id, count)
                .u32(seq)
                .u8(round);
            self.send_encoded(w, w.member(peer as usize), Kind::Barrier)?;
        }
        self.background_barriers.retain(|b| !b.is_done());
        if let Some(Barrier::Native(ticket)) = self.barrier {
            done = w.barrier_done(ticket)?;
        }
        if done {
            self.barrier = None;
        }
        Ok(done)
    }

    /// Starts this window's next barrier. A native barrier must not be outstanding (the
    /// fence waits for it first).
    pub(super) fn start_barrier(&mut self, w: &WindowShared) -> Result<()> {
        self.barrier_seq = self.barrier_seq.wrapping_add(1);
        match self.barrier.take() {
            Some(Barrier::Messages(old)) => self.background_barriers.push(old),
            Some(Barrier::Native(_)) => unreachable!("fence waits for a native barrier first"),
            None => {}
        }
        self.barrier = Some(match w.barrier_arrive()? {
            Some(ticket) => Barrier::Native(ticket),
            None => {
                self.barrier_by_messages = true;
                Barrier::Messages(Dissemination::new(self.barrier_seq, w.member_count()))
            }
        });
        Ok(())
    }

    /// MAKE_RMA_PROGRESS_WIN: advance barriers, issue what can go, clean up.
    pub(crate) fn make_progress(&mut self, w: &WindowShared) -> Result<()> {
        self.grant_waiting_native(w)?;
        self.take_native_notices(w);
        if self.table.active == 0
            && self.outbox.is_empty()
            && self.barrier.is_none()
            && self.background_barriers.is_empty()
            && !matches!(self.epoch, WindowEpoch::LockAllIssued)
        {
            return Ok(());
        }
        self.flush_outbox(w)?;
        if self.barrier.is_some() || !self.background_barriers.is_empty() {
            self.advance_barrier(w)?;
            if self.barrier.is_none() && matches!(self.epoch, WindowEpoch::FenceIssued) {
                self.epoch = WindowEpoch::FenceGranted;
            }
        }
        if matches!(self.epoch, WindowEpoch::LockAllIssued) {
            self.advance_native_window_locks(w)?;
            self.lock_all_issued_done();
        }
        let mut work = std::mem::take(&mut self.work);
        self.table.ranks_with_work(&mut work);
        let issued = work
            .iter()
            .try_for_each(|&rank| self.issue_ops_target(w, rank).map(drop));
        self.work = work;
        issued?;
        self.cleanup_ops_win(w);
        Ok(())
    }

    /// CLEANUP_OPS_WIN: free idle target elements where the epoch allows.
    #[inline]
    pub(super) fn cleanup_ops_win(&mut self, w: &WindowShared) {
        // Every progress pass asks: with lazy target free, only a restore frees early.
        let eager = self.restoring || !w.engine.config.lazy_target_free;
        if self.table.active != 0 && eager {
            self.free_idle_targets(w);
        }
    }

    #[inline(never)]
    fn free_idle_targets(&mut self, w: &WindowShared) {
        let keep_locks = matches!(self.epoch, WindowEpoch::LockAllCalled);
        let idle: Vec<Rank> = self
            .table
            .iter()
            .filter(|t| {
                t.is_idle() && !t.needs_done() && !(keep_locks && t.state != TargetState::Ready)
            })
            .filter(|t| t.state != TargetState::LockIssued)
            .map(|t| t.rank)
            .collect();
        for r in idle {
            self.free_target(w, r);
        }
    }

    /// ISSUE_OPS_TARGET: issue queued ops to one target as far as its state allows, with
    /// the pending sync piggybacked on the last active-message op.
    pub(super) fn issue_ops_target(&mut self, w: &WindowShared, rank: Rank) -> Result<usize> {
        self.issue_ops_target_with(w, rank, None)
    }

    /// [`issue_ops_target`](Self::issue_ops_target), `staged` the bytes of the queue's
    /// staged op (`OpElem::staged`: its call's, not yet in its element) if it has one.
    pub(super) fn issue_ops_target_with(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        staged: Option<&[u8]>,
    ) -> Result<usize> {
        let config = &w.engine.config;
        let Some(elem) = self.table.get(rank) else {
            return Ok(0);
        };
        // Nothing queued, no sync to send, no lock to ask for or retry (every progress
        // pass of a flush comes here for a target whose native ops are under way).
        if elem.pending.is_empty()
            && elem.sync == SyncFlag::None
            && !elem.no_delay
            && elem.state != TargetState::LockIssued
        {
            return Ok(0);
        }
        // Native locks: retry a lock the backend could not take yet.
        if elem.state == TargetState::LockIssued && Self::native_locks(w, rank) {
            let exclusive = self.lock_is_exclusive(rank);
            if w.try_lock_word(rank, exclusive)? {
                self.table.get_mut(rank).expect("exists").state = TargetState::LockGranted;
                if let Some(l) = self.locks.get_mut(&rank) {
                    l.granted = true;
                }
            } else {
                return Ok(0);
            }
        }
        let Some(elem) = self.table.get(rank) else {
            return Ok(0);
        };
        // LOCK_CALLED: the single-short-op optimization, or ask for the lock.
        if elem.state == TargetState::LockCalled {
            let native_locks = Self::native_locks(w, rank);
            if elem.pending.is_empty() && elem.sync == SyncFlag::None && !elem.no_delay {
                return Ok(0);
            }
            if elem.sync == SyncFlag::None
                && !elem.no_delay
                && !elem.pending.is_empty()
                && !native_locks
            {
                // Wait: the op may yet be the single short op of this epoch.
                let waits = config.single_op
                    && elem.pending.len() == 1
                    && short_op(&elem.pending[0], config.single_op_threshold);
                if waits {
                    return Ok(0);
                }
            }
            let single = config.single_op
                && !native_locks
                && elem.sync == SyncFlag::Unlock
                && elem.pending.len() == 1
                && short_op(&elem.pending[0], config.single_op_threshold);
            let exclusive = self.lock_is_exclusive(rank);
            if single {
                let elem = self.table.get_mut(rank).expect("exists");
                let op = elem.pending.pop_front().expect("one op");
                let lock = if exclusive {
                    flags::LOCK_EXCLUSIVE
                } else {
                    flags::LOCK_SHARED
                };
                let fl = lock | flags::UNLOCK;
                elem.sync = SyncFlag::None;
                elem.acks_awaited += 1;
                elem.state = TargetState::LockGranted;
                self.locks.remove(&rank);
                self.send_op_am(w, rank, op, fl, 1, staged)?;
                return Ok(1);
            }
            if elem.pending.is_empty()
                && elem.sync == SyncFlag::Unlock
                && !self.must_take_lock(w, rank)
            {
                // An epoch with no operation: the lock need never be taken.
                let elem = self.table.get_mut(rank).expect("exists");
                elem.sync = SyncFlag::None;
                return Ok(0);
            }
            self.request_lock(w, rank)?;
            if self
                .table
                .get(rank)
                .is_none_or(|t| t.state != TargetState::LockGranted)
            {
                return Ok(0);
            }
        }
        if !self.access_granted(w, rank) {
            return Ok(0);
        }
        let elem = self.table.get_mut(rank).expect("exists");
        // Piggyback: hold small active-message ops until the epoch closes or too many pile up.
        let delay = config.piggyback
            && !elem.no_delay
            && elem.sync == SyncFlag::None
            && !elem.pending.is_empty()
            && elem.pending.len() <= config.piggyback_threshold
            && !elem.pending.iter().any(|o| o.native);
        if delay {
            return Ok(0);
        }
        if elem.sync != SyncFlag::None
            && elem.pending.len() > 1
            && elem.pending.iter().any(|o| o.kind.has_response())
        {
            // Move ops with responses to the tail so the last response carries the ack.
            let (rest, tail): (Vec<_>, Vec<_>) = elem
                .pending
                .drain_all()
                .partition(|o| !o.kind.has_response());
            elem.pending = rest.into_iter().chain(tail).collect();
        }
        let mut issued = 0;
        loop {
            let elem = self.table.get_mut(rank).expect("exists");
            let Some(next) = elem.pending.front() else {
                break;
            };
            // A large op by message goes once the window's backlog has room for it; until
            // then it stays queued, and progress tries again.
            if !next.native && next.extent.bytes() > config.queue_max_bytes as u64 {
                let kind = next.kind;
                if self.am_backlog_full(w, rank, kind)? {
                    break;
                }
            }
            let elem = self.table.get_mut(rank).expect("exists");
            let Some(op) = elem.pending.pop_front() else {
                break;
            };
            if op.kind.is_atomic() && Self::must_wait_for_order(elem, &op) {
                elem.pending.push_front(op);
                if !std::mem::replace(&mut elem.held_for_order, true) {
                    w.counters.held_for_order();
                    w.engine.stats.held_for_order();
                }
                if elem.am_since_done > 0 {
                    // Ask for the ack that says the active messages before it are
                    // applied (an RMA_DONE of their count, as a flush sends).
                    let count = elem.am_since_done;
                    elem.done_sent();
                    elem.acks_awaited += 1;
                    self.send_control(w, rank, Kind::Done, flags::DONE, count)?;
                }
                break;
            }
            elem.held_for_order = false;
            let last = elem.pending.is_empty();
            let sync = elem.sync;
            if !op.native && last && sync != SyncFlag::None {
                let fl = sync_flags(sync);
                let count = elem.am_since_done + 1;
                elem.sync = SyncFlag::None;
                if sync != SyncFlag::Complete {
                    elem.acks_awaited += 1;
                }
                self.send_op_am(w, rank, op, fl, count, staged)?;
            } else if op.native {
                self.issue_native(w, rank, op)?;
            } else {
                self.send_op_am(w, rank, op, 0, 0, staged)?;
            }
            issued += 1;
        }
        // A sync no op could carry goes alone, once native ops are complete at the target
        // (and after every op: one held for order waits in the queue).
        let elem = self.table.get_mut(rank).expect("exists");
        if !elem.pending.is_empty() {
            return Ok(issued);
        }
        // Whoever waited for these ops has them issued; piggybacking may resume.
        elem.no_delay = false;
        if elem.sync != SyncFlag::None && elem.native_in_flight == 0 {
            let sync = elem.sync;
            let count = elem.am_since_done;
            let ordered_puts = elem.puts_since_done;
            elem.sync = SyncFlag::None;
            elem.done_sent();
            if sync != SyncFlag::Complete {
                elem.acks_awaited += 1;
            }
            // A complete with no active message to count goes natively where it can.
            // (Not after ordered puts: only a message follows them in order.)
            let native = sync == SyncFlag::Complete
                && count == 0
                && ordered_puts == 0
                && w.notify(rank, Notice::Complete)?;
            if !native {
                self.send_control(w, rank, Kind::Done, sync_flags(sync), count)?;
            }
        }
        Ok(issued)
    }

    /// Whether an op of the accumulate family toward `elem`'s target must wait before it
    /// goes, so that it cannot overtake one of the family sent before it by the other
    /// path (MPI orders them from one origin to one location). A native one waits until
    /// the active messages before it are known applied: the target's CPU applies those
    /// when it reads them, the NIC or provider a native one when it arrives. An active
    /// message waits until native ops before it are complete (delivery-complete on every
    /// backend: applied at the target); no provider is asked to order atomics against
    /// messages. Ops of one path keep their order by themselves (the wire's sequence, the
    /// queue pair's or endpoint's order). Mixed paths are rare: an (op, type) the backend
    /// has no atomic for, or one longer than its atomics take. Only ops whose bytes
    /// overlap wait: MPI's order is per location, and a wait is a round trip (a verbs
    /// origin alternating a native Sum with a Max by message on other bytes paid one per
    /// op, 30 s for 2,000 pairs in the emulated VM).
    fn must_wait_for_order(elem: &TargetElem, op: &OpElem) -> bool {
        if op.native {
            !elem.native_atomic_may_go(&op.extent)
        } else {
            !elem.am_atomic_may_go(&op.extent)
        }
    }

    /// Whether `rank`'s lock is a word the backend takes natively. Every target of a lock
    /// is a member of the window: where all members' are (one backend, shared memory),
    /// one flag answers without the per-rank table.
    #[inline]
    pub(super) fn native_locks(w: &WindowShared, rank: Rank) -> bool {
        w.members_lock_natively || w.caps(rank).native_locks
    }

    /// Asks for `rank`'s lock: natively (one attempt now, retried by progress) or by a
    /// LOCK message.
    pub(super) fn request_lock(&mut self, w: &WindowShared, rank: Rank) -> Result<()> {
        let exclusive = self.lock_is_exclusive(rank);
        let granted = if Self::native_locks(w, rank) {
            w.try_lock_word(rank, exclusive)?
        } else {
            let fl = if exclusive {
                flags::LOCK_EXCLUSIVE
            } else if self.epoch.is_lock_all() {
                flags::LOCK_SHARED | flags::LOCK_ALL
            } else {
                flags::LOCK_SHARED
            };
            self.send_control(w, rank, Kind::Lock, fl, 0)?;
            false
        };
        let t = self.table.get_mut(rank).expect("target element exists");
        if granted {
            t.state = TargetState::LockGranted;
            if let Some(l) = self.locks.get_mut(&rank) {
                l.granted = true;
            }
        } else {
            t.state = TargetState::LockIssued;
        }
        Ok(())
    }

    pub(super) fn lock_is_exclusive(&self, rank: Rank) -> bool {
        self.locks.get(&rank).is_some_and(|l| l.exclusive)
    }

    /// Local loads and stores may depend on the lock: self targets and shared memory.
    pub(super) fn must_take_lock(&self, w: &WindowShared, rank: Rank) -> bool {
        rank == w.engine.rank || w.kind == WindowKind::Shared
    }

    /// Sends an op as an active message. Ops without a response complete locally here.
    pub(super) fn send_op_am(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        mut op: Box<OpElem>,
        fl: u16,
        done_count: u32,
        staged: Option<&[u8]>,
    ) -> Result<()> {
        match (&op.landing, op.kind) {
            // A put from a buffer its request holds goes natively (`put_from_buffer`
            // checks); should one go by message, its bytes are the buffer's.
            (Some((landing, at)), OpKind::Put) => {
                let enc = &mut self.enc;
                landing
                    .with_bytes(*at, |data| encode_op(enc, w.id, &op, data, fl, done_count))
                    .ok_or(TransportError::Failed(
                        "a held put's buffer is not there".into(),
                    ))?;
            }
            _ => {
                let data = match staged {
                    Some(data) if op.staged => data,
                    _ => &op.data,
                };
                encode_op(&mut self.enc, w.id, &op, data, fl, done_count);
            }
        }
        op.staged = false;
        let kind = op_kind_wire(op.kind);
        self.send_encoded(w, rank, kind)?;
        w.counters.op_under_lock(false);
        let elem = self.table.get_mut(rank).expect("target element exists");
        if op.kind.is_atomic() {
            elem.am_atomic_sent(ByteSpan::of(&op.extent));
        }
        if fl & (flags::DONE | flags::UNLOCK | flags::COMPLETE) != 0 {
            elem.done_sent();
        } else {
            elem.am_since_done += 1;
            elem.am_unanswered |= !op.kind.has_response();
        }
        if op.kind.has_response() {
            op.native = false;
            elem.issued.push(op);
        } else {
            if let Some(r) = op.request.take() {
                r.complete(Ok(Fetched::default()));
            }
            self.free_op(w, op);
        }
        Ok(())
    }

    pub(super) fn issue_native(
        &mut self,
        w: &WindowShared,
        rank: Rank,
        mut op: Box<OpElem>,
    ) -> Result<()> {
        let token = self.new_token(w);
        op.token = token;
        match native_call(w, rank, &op, token, !self.epoch.is_passive()) {
            Ok(Issued::Complete(data)) => {
                w.counters.op_under_lock(true);
                if op.kind == OpKind::Put && w.caps(rank).ordered_puts {
                    self.table.get_mut(rank).expect("exists").puts_since_done += 1;
                }
                if let Some(index) = op
                    .notify
                    .filter(|_| !w.transport_notifies(rank, op.data.len()))
                {
                    // Queued, notified, native: only where ops complete in their call
                    // (`post`), so its data is in now. (A put whose notice went with it
                    // is counted by the target.)
                    if let Err(e) = w.notification_native(rank, index) {
                        if let Some(r) = op.request.take() {
                            r.complete(Err(e.clone()));
                        }
                        self.free_op(w, op);
                        return Err(e);
                    }
                }
                if let Some(r) = op.request.take() {
                    r.complete(Ok(data.unwrap_or_default()));
                }
                self.free_op(w, op);
            }
            Ok(Issued::Pending) => {
                w.counters.op_under_lock(true);
                self.native_index.insert(token, rank);
                let elem = self.table.get_mut(rank).expect("target element exists");
                elem.native_issued(ByteSpan::of(&op.extent));
                elem.issued.push(op);
            }
            Err(TransportError::Busy) => {
                self.table
                    .get_mut(rank)
                    .expect("exists")
                    .pending
                    .push_front(op);
            }
            Err(e) => {
                if let Some(r) = op.request.take() {
                    r.complete(Err(e.clone().into()));
                }
                self.free_op(w, op);
                return Err(e.into());
            }
        }
        Ok(())
    }
}
