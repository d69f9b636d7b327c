//! FLUSH (seed 004): flush, flush_all, flush_local and flush_local_all, their hot path
//! and their MEM_SYNC.

use super::*;

impl WindowShared {
    pub(super) fn check_passive(&self, st: &WinState, target: Option<Rank>) -> Result<()> {
        match (&st.epoch, target) {
            (WindowEpoch::PerTarget, Some(t)) if !st.locks.contains_key(&t) => {
                Err(UsageError::NotLocked { target: t }.into())
            }
            (WindowEpoch::PerTarget, _) => Ok(()),
            (e, _) if e.is_lock_all() => Ok(()),
            (e, _) => Err(UsageError::EpochConflict {
                call: "flush",
                state: e.name(),
            }
            .into()),
        }
    }

    #[inline]
    pub(super) fn flush(&self, target: Option<Rank>, remote: bool) -> Result<()> {
        if let Some(t) = target {
            if self.direct.allows_flush(t) {
                // A direct target in a passive epoch: every op to it completed in its
                // call, nothing is awaited (see `direct`). MEM_SYNC is all that is left.
                // Its span (RMA_LOG shows every flush) only when debug events can be on:
                // a disabled span still cost a tenth of a put + flush.
                if tracing::level_enabled!(tracing::Level::DEBUG) {
                    return self.flush_direct_traced(t, remote);
                }
                self.engine.activity.bump();
                self.flush_memory_sync();
                return Ok(());
            }
        }
        self.flush_not_direct(target, remote)
    }

    /// [`flush`](Self::flush) of a target that is not direct: counted (its ops are its
    /// count's), or through the window's state. Out of line, so that the direct flush
    /// stays small enough to inline in its callers.
    #[inline(never)]
    fn flush_not_direct(&self, target: Option<Rank>, remote: bool) -> Result<()> {
        if let Some(t) = target {
            if self.direct.counts_ops_to(t) {
                // A target whose ops go counted (a network): complete once its count is
                // zero.
                if self.direct.ops_settled(t) && !tracing::level_enabled!(tracing::Level::DEBUG) {
                    self.engine.activity.bump();
                    // A hybrid window's targets on this node: their puts were stores.
                    self.flush_memory_sync();
                    return Ok(());
                }
                return self.flush_counted(t, remote);
            }
        }
        self.flush_locked(target, remote)
    }

    /// A flush of a target whose ops go counted: waits for its count, then, if the
    /// target is still marked (no failure cleared the marks meanwhile), it is done;
    /// otherwise the locked flush reports what happened.
    #[inline(never)]
    fn flush_counted(&self, target: Rank, remote: bool) -> Result<()> {
        let call = if remote { "flush" } else { "flush_local" };
        let _span = sync_span!(call, win = self.id, target);
        self.settle_counted_ops(call, Some(target))?;
        if self.direct.counts_ops_to(target) {
            self.flush_memory_sync();
            return Ok(());
        }
        self.flush_locked(Some(target), remote)
    }

    /// Before an unlock of `target` (unlock_all: `None`) looks at the state: its ops go
    /// counted no more, and those under way complete.
    #[inline(never)]
    pub(super) fn end_counted_ops(&self, call: &'static str, target: Option<Rank>) -> Result<()> {
        let marked = match target {
            Some(t) => self.direct.counts_ops_to(t) || !self.direct.ops_settled(t),
            None => true,
        };
        if !marked {
            return Ok(());
        }
        {
            let _st = self.lock_state();
            match target {
                Some(t) => self.direct.close(t),
                None => self.direct.close_all(),
            }
        }
        self.settle_counted_ops(call, target)
    }

    /// Waits until no counted op toward `target` (every target: `None`) is under way
    /// (see [`direct`](super::direct)): polls the backend and takes what it finds,
    /// without this window's state.
    pub(super) fn settle_counted_ops(
        &self,
        call: &'static str,
        target: Option<Rank>,
    ) -> Result<()> {
        let settled = || match target {
            Some(t) => self.direct.ops_settled(t),
            None => self.direct.all_ops_settled(),
        };
        if settled() {
            return Ok(());
        }
        self.engine
            .wait_for_completions(call, || Ok(settled()))
            .map_err(|e| match e.peer() {
                Some(&PeerError::Timeout { call, rank: None }) => {
                    PeerError::Timeout { call, rank: target }.into()
                }
                _ => e,
            })
    }

    /// A direct flush inside its span (debug events may be on: `RMA_LOG`).
    #[cold]
    #[inline(never)]
    fn flush_direct_traced(&self, target: Rank, remote: bool) -> Result<()> {
        let call = if remote { "flush" } else { "flush_local" };
        let _span = tracing::debug_span!("rma_sync", call, win = self.id, target).entered();
        self.engine.activity.bump();
        self.flush_memory_sync();
        Ok(())
    }

    /// [`flush`](Self::flush) through the window's state (seed 004's FLUSH).
    #[inline(never)]
    fn flush_locked(&self, target: Option<Rank>, remote: bool) -> Result<()> {
        let call = if remote { "flush" } else { "flush_local" };
        let _span = sync_span!(call, win = self.id, target = ?target);
        if let Some(t) = target {
            self.check_rank(t)?;
        }
        // Counted ops (a network's direct ones) are outside the state: complete first.
        self.settle_counted_ops(call, target)?;
        let done = |t: &TargetElem| {
            if remote {
                t.ops_complete()
                    && t.acks_awaited == 0
                    && t.sync == SyncFlag::None
                    && t.puts_since_done == 0
            } else {
                t.ops_complete()
            }
        };
        // Hot path: nothing of this target is queued, under way or awaited.
        {
            let mut st = self.lock_state();
            self.check_passive(&st, target)?;
            let settled = match target {
                Some(t) => st
                    .table
                    .get(t)
                    .is_none_or(|e| done(e) && !e.needs_done() || !remote && done(e)),
                None => false,
            };
            if settled && st.deferred.is_none() && st.outbox.is_empty() {
                drop(st);
                // In the library all the same: the progress agent stays away (a flush
                // that waits says so in its wait), so now and then a pass of our own.
                if self.engine.activity.bump_quick() {
                    self.engine.progress()?;
                }
                self.flush_memory_sync();
                return Ok(());
            }
            // flush_all: the elements that may have something to do (a lock_all epoch
            // keeps one for every target it touched; the others are quiet, done).
            let all;
            let ranks: &[Rank] = match &target {
                Some(t) => std::slice::from_ref(t),
                None => {
                    all = st.table.busy_ranks();
                    &all
                }
            };
            for &rank in ranks {
                let ordered = self.caps(rank).ordered_puts;
                let Some(t) = st.table.get_mut(rank) else {
                    continue;
                };
                // Ordered puts alone: the backend says when they are placed (below).
                let puts_alone = ordered && t.am_since_done == 0 && t.pending.is_empty();
                if remote
                    && t.sync == SyncFlag::None
                    && !puts_alone
                    && (t.needs_done() || t.pending.iter().any(|o| o.needs_done(ordered)))
                {
                    t.sync = SyncFlag::Flush;
                }
                if !remote && !t.pending.is_empty() {
                    st.force_issue(self, rank)?;
                } else {
                    st.issue_ops_target(self, rank)?;
                }
            }
        }
        let mut deferred = None;
        self.wait_issued("flush", |st| {
            // Locks still being acquired must be granted before their ops can complete.
            let waiting = |t: &TargetElem| {
                t.state == TargetState::LockCalled
                    && !t.pending.is_empty()
                    && target.is_none_or(|x| x == t.rank)
            };
            if let Some(r) = target {
                // One target (every look of a wait for one, on a network backend: one
                // lookup of its element for all the questions of a look).
                match st.table.get_mut(r) {
                    None => {
                        deferred = st.deferred.take();
                        return Ok(true);
                    }
                    Some(t) if !waiting(t) => {
                        if remote {
                            take_delivered_puts_of(self, t);
                        }
                        let finished = done(t);
                        if finished {
                            deferred = st.deferred.take();
                        }
                        return Ok(finished);
                    }
                    Some(_) => {}
                }
            }
            let any_waiting = match target {
                Some(r) => st.table.get(r).is_some_and(waiting),
                None => st.table.busy_iter().any(waiting),
            };
            if any_waiting {
                for rank in st.table.busy_ranks() {
                    if st.table.get(rank).is_some_and(waiting) {
                        let t = st.table.get_mut(rank).expect("listed");
                        if t.sync == SyncFlag::None {
                            t.sync = SyncFlag::Flush;
                        }
                        st.issue_ops_target(self, rank)?;
                    }
                }
            }
            if remote {
                st.take_delivered_puts(self, target);
            }
            let finished = match target {
                Some(r) => st.table.get(r).is_none_or(done),
                None => st.table.busy_iter().all(done),
            };
            if finished {
                deferred = st.deferred.take();
            }
            Ok(finished)
        })?;
        self.flush_memory_sync();
        deferred.map_or(Ok(()), Err)
    }

    /// Seed 004, RMA+shm, passive row: MEM_SYNC in WIN_FLUSH. Only where some target
    /// shares memory with us: a network backend's completions already say the data is at
    /// the target, and no load or store of a peer meets ours.
    #[inline(always)]
    pub(super) fn flush_memory_sync(&self) {
        if self.shares_memory {
            self.engine.transport.memory_sync();
        }
    }
}

impl WinState {
    /// Flush's part in ordered puts ([`Capabilities::ordered_puts`](crate::transport::Capabilities::ordered_puts)):
    /// toward `target` (or every target), once the backend says the puts it reported
    /// complete are placed, they need no RMA_DONE. A flush of puts alone then costs the
    /// backend's own delivery acknowledgements, no message of the engine's.
    fn take_delivered_puts(&mut self, w: &WindowShared, target: Option<Rank>) {
        let all;
        let ranks: &[Rank] = match &target {
            Some(t) => std::slice::from_ref(t),
            None => {
                all = self.table.busy_ranks();
                &all
            }
        };
        for &rank in ranks {
            if let Some(t) = self.table.get_mut(rank) {
                take_delivered_puts_of(w, t);
            }
        }
    }
}

/// [`take_delivered_puts`](WinState::take_delivered_puts) for one target's element.
#[inline]
fn take_delivered_puts_of(w: &WindowShared, t: &mut TargetElem) {
    if t.puts_since_done > 0 && w.engine.transport.ordered_puts_delivered(t.rank) {
        t.puts_since_done = 0;
    }
}
