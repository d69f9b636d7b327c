//! FENCE (seed 004): the fence's barrier (the backend's or dissemination by message),
//! RMA_DONE on the last op to each target, and the epoch it opens.

use super::*;

impl WindowShared {
    pub(super) fn fence(&self, assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOSTORE | Assert::NOPUT | Assert::NOPRECEDE | Assert::NOSUCCEED) {
            return Err(UsageError::BadAssert { call: "fence" }.into());
        }
        self.sync_call("fence", |mut st| {
            let t = &self.engine.transport;
            match st.epoch {
                WindowEpoch::Unset | WindowEpoch::FenceIssued | WindowEpoch::FenceGranted => {}
                ref e => {
                    return Err(UsageError::EpochConflict {
                        call: "fence",
                        state: e.name(),
                    }
                    .into())
                }
            }
            if assert.contains(Assert::NOPRECEDE) && st.table.active == 0 {
                drop(st);
                self.fence_noprecede(assert)?;
                return Ok(((), self.lock_state()));
            }
            // Hot path: no barrier under way and every op of the epoch complete already
            // (each completed in its call, as on shared memory; or, toward the pair's
            // other member, issued), nothing to wait for before this fence's own
            // barrier, all in one hold of the state.
            let pair = st.fence_pair(self);
            let settled = st.barrier.is_none()
                && st.outbox.is_empty()
                && (st.table.iter()).all(|t| {
                    t.is_idle()
                        && (!t.needs_done() || pair == Some(t.rank) && self.pair_completes(t))
                });
            if !settled {
                drop(st);
                self.fence_complete_epoch(pair)?;
                st = self.lock_state();
            }
            st.pair_done = pair
                .and_then(|p| st.table.get(p))
                .filter(|t| t.needs_done())
                .map(|t| t.am_since_done);
            t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC before PROC_SYNC
            if st.table.active != 0 {
                for rank in st.table.ranks() {
                    st.free_target(self, rank);
                }
            }
            st.start_barrier(self)?;
            st.epoch = WindowEpoch::FenceIssued;
            // The last to arrive finds the barrier over at once: no wait, no second hold.
            if !st.advance_barrier(self)? {
                drop(st);
                // The barrier is looked at on every turn of the wait, not only by the
                // progress passes between turns: its end is seen a pass sooner.
                self.wait_issued("fence", |st| {
                    if st.barrier.is_some() {
                        st.advance_barrier(self)?;
                    }
                    Ok(st.barrier.is_none())
                })?;
                st = self.lock_state();
            }
            t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC after PROC_SYNC
            st.epoch = if assert.contains(Assert::NOSUCCEED) {
                WindowEpoch::Unset
            } else {
                WindowEpoch::FenceGranted
            };
            st.restoring = false;
            if let Some(e) = st.deferred.take() {
                return Err(e);
            }
            // Every member is granted and nothing of any is outstanding (each target was
            // freed before the barrier): the epoch's ops may go direct from its first.
            if matches!(st.epoch, WindowEpoch::FenceGranted) && st.table.active == 0 {
                self.direct.open_members(false);
            }
            Ok(((), st))
        })
    }

    /// A fence that asserts no ops precede it and finds none: nothing to complete, so
    /// it does not block (FENCE_ISSUED with a non-blocking barrier).
    fn fence_noprecede(&self, assert: Assert) -> Result<()> {
        // One native barrier at a time per window: wait for a previous one.
        self.wait_for("fence", |st| {
            Ok(!matches!(st.barrier, Some(Barrier::Native(_))))
        })?;
        let mut st = self.lock_state();
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC before PROC_SYNC
        st.start_barrier(self)?;
        st.epoch = WindowEpoch::FenceIssued;
        st.make_progress(self)?;
        if assert.contains(Assert::NOSUCCEED) {
            st.epoch = WindowEpoch::Unset;
        }
        Ok(())
    }

    /// Before a fence's barrier, when its epoch has ops not complete yet: a previous
    /// NOPRECEDE fence's barrier finishes, then every op completes at its target (seed
    /// 001), except toward `pair` (see [`WinState::fence_pair`]), where every op is
    /// issued and complete at the origin: the barrier message that follows them
    /// completes them at the target.
    fn fence_complete_epoch(&self, pair: Option<Rank>) -> Result<()> {
        self.wait_for("fence", |st| Ok(st.barrier.is_none()))?;
        {
            let mut st = self.lock_state();
            if matches!(st.epoch, WindowEpoch::FenceIssued) {
                st.epoch = WindowEpoch::FenceGranted;
            }
            for rank in st.table.ranks() {
                let ordered = self.caps(rank).ordered_puts;
                let t = st.table.get_mut(rank).expect("listed");
                if pair == Some(rank) && self.pair_completes(t) {
                    if !t.pending.is_empty() {
                        st.force_issue(self, rank)?;
                    }
                } else if t.needs_done() || t.pending.iter().any(|o| o.needs_done(ordered)) {
                    t.sync = SyncFlag::Flush;
                }
            }
        }
        self.wait_for("fence", |st| Ok(st.table.iter().all(|t| t.is_idle())))
    }

    /// Whether the barrier message to the other member of a two-member fence completes
    /// the ops to it (see [`WinState::fence_pair`]): it does for what the target's
    /// provider places in order (ordered native puts) and for active messages as long as
    /// every later op reaches the target through its engine too. Once an active message
    /// that changes the target's memory and gets no response went and the target is
    /// reachable natively, it does not: the other member's barrier message may leave
    /// before it took ours in, we would leave the fence, and a native get or put of the
    /// next epoch could be served by its provider before its engine applied the message
    /// (a get read the value before an accumulate; a put was summed over). Such a pair
    /// is flushed as any target is (an RMA_DONE and its acknowledgement).
    fn pair_completes(&self, t: &TargetElem) -> bool {
        let caps = self.caps(t.rank);
        let native =
            caps.rdma_write || caps.rdma_read || caps.atomics != 0 || caps.compare_and_swap != 0;
        !native || !t.am_unanswered && !t.pending.iter().any(|o| o.unanswered_am())
    }

    /// From FENCE_GRANTED with nothing queued, other epochs may begin directly.
    pub(super) fn no_access_epoch(st: &WinState) -> bool {
        match st.epoch {
            WindowEpoch::Unset => true,
            WindowEpoch::FenceGranted | WindowEpoch::FenceIssued => st.table.active == 0,
            _ => false,
        }
    }
}

impl WinState {
    /// The other member of a two-member window whose fence barrier goes as messages.
    /// Its one barrier message to it follows this process's ops to it on the same
    /// ordered channel, so it stands for their RMA_DONE: the other member leaves its
    /// fence only once that message, and so every op before it, was applied, and no
    /// third process could read its memory in between. (With more members one could:
    /// the dissemination barrier lets a third member leave the fence and read the target
    /// natively before the target took in our ops; there each target is flushed first.)
    pub(super) fn fence_pair(&self, w: &WindowShared) -> Option<Rank> {
        if !self.barrier_by_messages || w.member_count() != 2 {
            return None;
        }
        w.members().find(|&r| r != w.engine.rank)
    }
}
