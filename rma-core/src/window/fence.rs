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
            // (each completed in its call, as on shared memory): nothing to wait for
            // before this fence's own barrier, all in one hold of the state.
            let settled = st.barrier.is_none()
                && st.outbox.is_empty()
                && st.table.iter().all(|t| t.is_idle() && t.am_since_done == 0);
            if !settled {
                drop(st);
                self.fence_complete_epoch()?;
                st = self.lock_state();
            }
            t.memory_sync(); // seed 004 RMA+shm, FENCE row: MEM_SYNC before PROC_SYNC
            for rank in st.table.ranks() {
                st.free_target(self, rank);
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
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(((), st)),
            }
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
    /// 001).
    fn fence_complete_epoch(&self) -> Result<()> {
        self.wait_for("fence", |st| Ok(st.barrier.is_none()))?;
        {
            let mut st = self.lock_state();
            if matches!(st.epoch, WindowEpoch::FenceIssued) {
                st.epoch = WindowEpoch::FenceGranted;
            }
            for rank in st.table.ranks() {
                let t = st.table.get_mut(rank).expect("listed");
                if t.am_since_done > 0 || t.pending.iter().any(|o| !o.native) {
                    t.sync = SyncFlag::Flush;
                }
            }
        }
        self.wait_for("fence", |st| Ok(st.table.iter().all(|t| t.is_idle())))
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
