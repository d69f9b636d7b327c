//! RMA_OP (seed 004): posting an op, native where the backend can, queued in the op
//! table otherwise; the single short op; ops too large for one message in pieces.

use super::*;

impl WinState {
    pub(super) fn try_post(
        &mut self,
        w: &WindowShared,
        d: &OpDesc<'_>,
        native: bool,
    ) -> Result<Step<Posted>> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let rank = d.target;
        // Whatever this op comes to (queued, under way), the next one to its target must
        // not overtake it: direct again only once it is found settled below.
        self.direct.close(rank);
        // Which epoch grants access to this target?
        match &self.epoch {
            WindowEpoch::Unset => return Err(UsageError::NoEpoch { target: rank }.into()),
            WindowEpoch::Pscw(p) if p.index(rank).is_none() => {
                return Err(UsageError::NotInGroup { target: rank }.into())
            }
            WindowEpoch::PerTarget
                if !self.locks.contains_key(&rank) && self.table.get(rank).is_none() =>
            {
                return Err(UsageError::NoEpoch { target: rank }.into())
            }
            _ => {}
        }
        if matches!(self.epoch, WindowEpoch::FenceIssued) && self.advance_barrier(w)? {
            self.epoch = WindowEpoch::FenceGranted;
        }
        // A large op by message: room for its bytes under way first.
        if !native
            && d.extent.bytes() > w.engine.config.queue_max_bytes as u64
            && self.am_backlog_full(w, rank, d.kind)?
        {
            return Ok(Step::Blocked);
        }
        if native
            && matches!(self.epoch, WindowEpoch::LockAllCalled)
            && self.table.get(rank).is_none()
            && Self::native_locks(w, rank)
            && !self.target_pool_empty(w)
        {
            // LOCK_ALL's lazy lock of a target with a native lock word, taken in the op's
            // call (what ISSUE_OPS would do a step later, for a queued op element): the op
            // then goes the fast path below. A lock not free now leaves the element
            // LOCK_ISSUED, and the op the queued path that retries it.
            self.target_elem(w, rank).expect("pool checked");
            self.request_lock(w, rank)?;
        }
        // Fast path: native, access granted, nothing queued before it.
        // (An op of the accumulate family after active-message ones not yet known
        // applied queues: ISSUE_OPS_TARGET keeps their order.)
        let elem_state = self.table.get(rank).map(|t| {
            let clear =
                t.pending.is_empty() && (!d.kind.is_atomic() || t.native_atomic_may_go(&d.extent));
            (t.state, clear)
        });
        let has_elem = elem_state.is_some();
        if native && elem_state.is_none_or(|(s, empty)| empty && s != TargetState::LockCalled) {
            let granted = self.access_granted_in(w, rank, elem_state.map(|(s, _)| s));
            // A get into the caller's buffer that the backend completes in the call: no
            // element, no copy of ours.
            if granted && d.kind == OpKind::Get && w.caps(rank).get_in_call {
                if let Some(dst) = &d.into {
                    let mut dst = dst.borrow_mut();
                    let e = d.extent;
                    let done = match &w.ops {
                        Some(ops) if e.count > 1 => {
                            ops.get_blocks(rank, e.offset, e.stride, e.block as usize, &mut dst)?
                        }
                        Some(ops) => ops.get_into(rank, e.offset, &mut dst)?,
                        // Strided extents are native only where the window has its ops
                        // (`native_allowed`): this get is contiguous.
                        None => (w.engine.transport).get_into(w.id, rank, e.offset, &mut dst)?,
                    };
                    if done {
                        w.counters.op_under_lock(true);
                        self.open_direct_if_settled(rank);
                        return Ok(Step::Done(Posted::Done(None)));
                    }
                }
            }
            // A get toward a target with nothing else outstanding, in a passive epoch, on
            // a window whose ops may stay pending: counted, and the target's next ops go
            // direct (see `direct`).
            if granted && d.kind == OpKind::Get && self.may_count_ops(w, d, rank) {
                self.direct.open_counted(rank);
                if let Some(posted) = w.get_counted(
                    rank,
                    d.extent.offset,
                    d.extent.bytes() as usize,
                    d.landing.as_ref(),
                ) {
                    return posted.map(Step::Done);
                }
                // Not one the backend reads into a buffer of its own, or no room now:
                // tracked below, and the mark goes (its element is no longer idle).
                self.direct.close(rank);
            }
            // Resources to track the op in case it does not complete at once.
            let room = has_elem || !self.target_pool_empty(w);
            if granted && room && !d.wants_result {
                // Nothing to hand back: no op element, no token of its own. The target
                // element counts it, and its completion names the target (as a provider
                // counter would); the backend bounds how many are under way (Busy).
                // A put toward a target with nothing else outstanding, in a passive
                // epoch, on a window whose ops may stay pending: counted, and the target's
                // next ops go direct (see `direct`).
                let counted = self.may_count_ops(w, d, rank);
                let token = if counted {
                    w.direct.op_issued(rank);
                    counted_token(w.id, rank)
                } else {
                    untracked_token(w.id, rank)
                };
                let issued = native_call_desc(w, d, token, !self.epoch.is_passive(), notice_of(d));
                if counted && !matches!(issued, Ok(Issued::Pending)) {
                    w.direct.op_completed(rank);
                }
                return match issued {
                    Ok(Issued::Complete(_)) => {
                        w.counters.op_under_lock(true);
                        self.native_done_in_call(w, rank, d.kind);
                        if counted {
                            self.direct.open_counted(rank);
                        }
                        Ok(Step::Done(Posted::Done(None)))
                    }
                    Ok(Issued::Pending) if counted => {
                        w.counters.op_under_lock(true);
                        self.direct.open_counted(rank);
                        Ok(Step::Done(Posted::Later(None)))
                    }
                    Ok(Issued::Pending) => {
                        w.counters.op_under_lock(true);
                        let elem = self.target_elem(w, rank).expect("room checked");
                        elem.native_issued(ByteSpan::of(&d.extent));
                        Ok(Step::Done(Posted::Later(None)))
                    }
                    Err(TransportError::Busy) => Ok(Step::Blocked),
                    Err(e) => Err(e.into()),
                };
            }
            // An op that hands a result back needs an op element only if it does not
            // complete in the call. One free in the window's local pool (which only this
            // locked state touches) is still free after the call, so it is taken then;
            // otherwise one is taken from the global pool first.
            let held = if granted && room && !self.op_pool.has_local() {
                self.op_pool.get(&w.engine.op_pool)
            } else {
                None
            };
            if granted && room && (held.is_some() || self.op_pool.has_local()) {
                let token = self.new_token(w);
                let issued = native_call_desc(w, d, token, !self.epoch.is_passive(), notice_of(d));
                // Kept only for an op that stays pending.
                let held = match held {
                    Some(op) if !matches!(issued, Ok(Issued::Pending)) => {
                        self.free_op(w, op);
                        None
                    }
                    held => held,
                };
                match issued {
                    Ok(Issued::Complete(data)) => {
                        w.counters.op_under_lock(true);
                        self.native_done_in_call(w, rank, d.kind);
                        // A get into the caller's buffer, complete in the call: the bytes
                        // go there now (no request to make and wait on).
                        if let (Some(dst), Some(bytes)) = (&d.into, &data) {
                            let mut dst = dst.borrow_mut();
                            if bytes.len() == dst.len() {
                                rma_sync::copy::copy_slice(&mut dst, bytes);
                                return Ok(Step::Done(Posted::Done(None)));
                            }
                        }
                        let data = d.wants_result.then(|| data.unwrap_or_default());
                        return Ok(Step::Done(Posted::Done(data)));
                    }
                    Ok(Issued::Pending) => {
                        let op = match held {
                            Some(op) => op,
                            None => self
                                .op_pool
                                .get(&w.engine.op_pool)
                                .expect("a local element was free before the call"),
                        };
                        return self.track_native(w, d, token, op);
                    }
                    Err(TransportError::Busy) => return Ok(Step::Blocked),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // Everything else needs a target element and an op element.
        if self.table.get(rank).is_none() {
            if self.target_pool_empty(w) {
                return self.restore_target_elem_resources(w, rank);
            }
            self.target_elem(w, rank).expect("pool checked");
        }
        let Some(mut op) = self.op_pool.get(&w.engine.op_pool) else {
            return self.restore_op_elem_resources(w, rank);
        };
        w.counters
            .elements_in_use(self.op_pool.in_use(), self.target_pool.in_use());
        op.kind = d.kind;
        op.extent = d.extent;
        op.op = d.op;
        op.datatype = Some(d.datatype);
        op.data.clear();
        // A put or accumulate by message that this call issues (see `issue_now` below)
        // is encoded from the caller's slice: a large one's bytes are copied once into
        // its packet, not first into the element. Copied here only if it stays queued.
        let queue_max = w.engine.config.queue_max_bytes;
        let staged = d.data.len() > queue_max && !native && !d.kind.has_response();
        if !staged {
            rma_sync::copy::extend(&mut op.data, d.data);
        }
        op.staged = staged;
        op.landing = d.landing.clone();
        op.native = native;
        op.notify = d.notify.filter(|n| n.counts).map(|n| n.index);
        op.token = self.new_token(w);
        op.request = if d.wants_result {
            Some(RequestState::reuse_or_new(op.spare_request.take()))
        } else {
            None
        };
        let request = op.request.clone();
        let config = &w.engine.config;
        let elem = self.table.get_mut(rank).expect("created above");
        elem.pending.push_back(op);
        // Issue now unless the op may wait for piggybacking (or single-op at unlock). A
        // notified op never waits: its target waits for the count, not for our next
        // synchronization call.
        // A large op goes now, a large get too (nothing to gain from holding it).
        let big = d.data.len() > queue_max || d.extent.bytes() > queue_max as u64;
        let notified = d.notify.is_some();
        // (Nor later, once its lock comes: no piggybacking, no single short op.)
        elem.no_delay |= notified;
        let issue_now = big
            || elem.pending.len() > config.piggyback_threshold
            || !config.piggyback
            || native
            || notified;
        let lock_now = elem.state == TargetState::LockCalled
            && (notified
                || elem.pending.len() > 1
                || !config.single_op
                || d.data.len() > config.single_op_threshold
                || d.extent.bytes() > config.single_op_threshold as u64);
        if issue_now || lock_now {
            let issued = self.issue_ops_target_with(w, rank, staged.then_some(d.data));
            if staged {
                self.keep_staged(rank, d.data);
            }
            issued?;
        } else if staged {
            self.keep_staged(rank, d.data);
        }
        if self.table.get(rank).is_some_and(|t| !t.pending.is_empty()) {
            w.counters.queued();
        }
        Ok(Step::Done(Posted::Later(request)))
    }

    /// The staged op toward `rank` (`OpElem::staged`), if its call left it queued: its
    /// bytes, `data`, copied into its element now, as any queued op's are.
    fn keep_staged(&mut self, rank: Rank, data: &[u8]) {
        let staged = self
            .table
            .get_mut(rank)
            .and_then(|t| t.pending.iter_mut().rfind(|o| o.staged));
        if let Some(op) = staged {
            rma_sync::copy::extend(&mut op.data, data);
            op.staged = false;
        }
    }

    /// A native op toward `rank` (access granted, room for its target element) said it
    /// completed in its call. An ordered put (`Capabilities::ordered_puts`) is only
    /// complete at the origin: its target element remembers that a message must follow
    /// it. Anything else is complete at the target, and the target may go direct.
    #[inline]
    fn native_done_in_call(&mut self, w: &WindowShared, rank: Rank, kind: OpKind) {
        if kind == OpKind::Put && w.caps(rank).ordered_puts {
            let elem = self.target_elem(w, rank).expect("room checked");
            elem.puts_since_done += 1;
        } else {
            self.open_direct_if_settled(rank);
        }
    }

    /// Whether the native put or get `d` toward `rank` (access granted) may go counted
    /// and mark its target's ops direct: the invariant of [`direct`](super::direct)'s
    /// counted ops holds once it has gone. (A get asks the backend's read besides, in
    /// [`WindowShared::get_counted`].)
    #[inline]
    fn may_count_ops(&self, w: &WindowShared, d: &OpDesc<'_>, rank: Rank) -> bool {
        if !(self.direct.counts_ops() && matches!(d.kind, OpKind::Put | OpKind::Get)) {
            return false;
        }
        let caps = w.caps(rank);
        d.notify.is_none()
            && d.extent.count <= 1
            && self.epoch.is_passive()
            && self.deferred.is_none()
            && caps.rdma_write
            && !caps.ordered_puts
            && self.table.get(rank).is_none_or(|t| {
                t.is_idle()
                    && !t.needs_done()
                    && matches!(t.state, TargetState::LockGranted | TargetState::Ready)
            })
    }

    /// After a native op toward `rank` completed in its call, access granted: the next
    /// ones go [direct](super::direct) if nothing of the target is outstanding (and no
    /// error waits to be reported).
    fn open_direct_if_settled(&self, rank: Rank) {
        let settled = self.table.get(rank).is_none_or(|t| {
            t.is_idle()
                && !t.needs_done()
                && matches!(t.state, TargetState::LockGranted | TargetState::Ready)
        });
        if settled && self.deferred.is_none() {
            self.direct.open(rank, self.epoch.is_passive());
        }
    }

    /// Tracks a native op that is under way, in the element reserved for it, so that its
    /// completion (matched by token) finds its request.
    pub(super) fn track_native(
        &mut self,
        w: &WindowShared,
        d: &OpDesc<'_>,
        token: u64,
        mut op: Box<OpElem>,
    ) -> Result<Step<Posted>> {
        w.counters.op_under_lock(true);
        self.native_index.insert(token, d.target);
        op.kind = d.kind;
        op.token = token;
        op.native = true;
        op.notify = None;
        op.request = if d.wants_result {
            Some(RequestState::reuse_or_new(op.spare_request.take()))
        } else {
            None
        };
        let request = op.request.clone();
        let elem = self
            .target_elem(w, d.target)
            .expect("room checked before issue");
        elem.native_issued(ByteSpan::of(&d.extent));
        elem.issued.push(op);
        Ok(Step::Done(Posted::Later(request)))
    }

    pub(super) fn target_pool_empty(&self, w: &WindowShared) -> bool {
        self.target_pool.in_use() >= w.engine.config.target_pool_local
            && w.engine.target_pool.available() == 0
    }

    /// RESTORE_TARGET_ELEM_RESOURCES, as a step: pick an element to drain and let
    /// progress complete it; LOCK_ALL_CALLED falls back to the window protocol instead.
    pub(super) fn restore_target_elem_resources<T>(
        &mut self,
        w: &WindowShared,
        _for_rank: Rank,
    ) -> Result<Step<T>> {
        w.counters.restore();
        if matches!(self.epoch, WindowEpoch::LockAllCalled) {
            self.lock_all_window_protocol(w)?;
            return Ok(Step::Blocked);
        }
        self.restoring = true;
        self.drain_one();
        self.cleanup_ops_win(w);
        Ok(Step::Blocked)
    }

    /// RESTORE_OP_ELEM_RESOURCES: flush one target with queued ops.
    pub(super) fn restore_op_elem_resources<T>(
        &mut self,
        w: &WindowShared,
        for_rank: Rank,
    ) -> Result<Step<T>> {
        w.counters.restore();
        let victim = match self.table.get(for_rank) {
            Some(t) if !t.pending.is_empty() => Some(for_rank),
            _ => self
                .table
                .iter()
                .find(|t| !t.pending.is_empty())
                .map(|t| t.rank),
        };
        if let Some(v) = victim {
            let elem = self.table.get_mut(v).expect("exists");
            if elem.sync == SyncFlag::None {
                elem.sync = if matches!(self.epoch, WindowEpoch::Pscw(_)) {
                    SyncFlag::None
                } else {
                    SyncFlag::Flush
                };
            }
            // In PSCW no RMA_DONE is needed: just issue (the complete closes it).
            self.force_issue(w, v)?;
        }
        Ok(Step::Blocked)
    }

    /// Issues a target's queued ops now, asking for its lock if needed (a request is
    /// waited on, or flush_local).
    pub(crate) fn force_issue(&mut self, w: &WindowShared, rank: Rank) -> Result<()> {
        if let Some(t) = self.table.get_mut(rank) {
            t.no_delay = true;
            self.issue_ops_target(w, rank)?;
        }
        Ok(())
    }

    pub(super) fn drain_one(&mut self) {
        let in_pscw = matches!(self.epoch, WindowEpoch::Pscw(_));
        let victim = self
            .table
            .iter()
            .find(|t| t.state == TargetState::LockGranted || t.state == TargetState::Ready)
            .or_else(|| self.table.iter().next())
            .map(|t| t.rank);
        if let Some(v) = victim {
            let elem = self.table.get_mut(v).expect("exists");
            elem.no_delay = true;
            if elem.sync == SyncFlag::None && (!elem.pending.is_empty() || elem.needs_done()) {
                elem.sync = if in_pscw {
                    SyncFlag::None
                } else {
                    SyncFlag::Flush
                };
                if in_pscw {
                    // PSCW needs no RMA_DONE until complete: issuing frees the op elements,
                    // and the count rides on the complete.
                    elem.done_sent();
                }
            }
        }
    }

    /// LOCK_ALL: fall back from the per-target to the window protocol.
    pub(super) fn lock_all_window_protocol(&mut self, w: &WindowShared) -> Result<()> {
        tracing::debug!(win = w.id, "lock_all falls back to the window protocol");
        self.epoch = WindowEpoch::LockAllIssued;
        self.native_lock_cursor = 0;
        for rank in w.members() {
            match self.table.get(rank).map(|t| t.state) {
                Some(TargetState::LockCalled) => self.request_lock(w, rank)?,
                Some(_) => {}
                None => {
                    self.window_grants += 1;
                    if !Self::native_locks(w, rank) {
                        let fl = flags::LOCK_SHARED | flags::LOCK_ALL;
                        self.send_control(w, rank, Kind::Lock, fl, 0)?;
                    }
                }
            }
        }
        self.advance_native_window_locks(w)
    }

    /// Window protocol over native locks: take the remaining targets' locks in rank order,
    /// as far as they are free now.
    pub(super) fn advance_native_window_locks(&mut self, w: &WindowShared) -> Result<()> {
        // The cursor is a member index: targets are locked in the window's rank order.
        while (self.native_lock_cursor as usize) < w.member_count() {
            let rank = w.member(self.native_lock_cursor as usize);
            if self.table.get(rank).is_none() && Self::native_locks(w, rank) {
                if !w.try_lock_word(rank, false)? {
                    return Ok(());
                }
                self.window_grants -= 1;
            }
            self.native_lock_cursor += 1;
        }
        Ok(())
    }

    pub(super) fn lock_all_issued_done(&mut self) -> bool {
        if !matches!(self.epoch, WindowEpoch::LockAllIssued) {
            return true;
        }
        let done = self.window_grants == 0
            && self
                .table
                .iter()
                .all(|t| t.state != TargetState::LockIssued);
        if done {
            for t in self.table.ranks() {
                if let Some(t) = self.table.get_mut(t) {
                    // Every target is locked by the window now.
                    t.state = TargetState::Ready;
                }
            }
            self.epoch = WindowEpoch::LockAllGranted { nocheck: false };
        }
        done
    }
}

/// Whether `op` may be the single short op of its epoch (lock, op and unlock in one
/// message, its answer in one): both what it carries and what it fetches are short.
pub(super) fn short_op(op: &OpElem, threshold: usize) -> bool {
    op.data.len() <= threshold && op.extent.bytes() <= threshold as u64
}

/// The counter a notified op's native call carries ([`native_call_desc`]): a counting
/// op's; none for others (a piece of a large op that does not count).
#[inline(always)]
fn notice_of(d: &OpDesc<'_>) -> Option<u32> {
    d.notify.filter(|n| n.counts).map(|n| n.index)
}
