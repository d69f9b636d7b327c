//! PSCW (seed 004): start, complete, post, wait and test, with the post and complete
//! notices native where the backend offers them.

use super::*;

impl WindowShared {
    pub(super) fn check_group(&self, group: &[Rank]) -> Result<()> {
        for (i, r) in group.iter().enumerate() {
            self.check_rank(*r)?;
            if group[..i].contains(r) {
                return Err(UsageError::BadLayout.into());
            }
        }
        Ok(())
    }

    pub(super) fn start(&self, group: &[Rank], assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "start" }.into());
        }
        self.check_group(group)?;
        self.sync_call("start", |mut st| {
            if !Self::no_access_epoch(&st) {
                return Err(UsageError::EpochConflict {
                    call: "start",
                    state: st.epoch.name(),
                }
                .into());
            }
            let nocheck = assert.contains(Assert::NOCHECK);
            let mut access = st.spare_access.take().unwrap_or_default();
            access.group.clear();
            access.group.extend_from_slice(group);
            access.granted.clear();
            access.granted.resize(group.len(), nocheck);
            st.epoch = WindowEpoch::Pscw(access);
            // Posts already left natively: the first ops go at once.
            st.take_native_notices(self);
            // seed 004 RMA+shm, PSCW row: WIN_START has MEM_SYNC after PROC_SYNC; the PROC_SYNC
            // (posts) is awaited lazily per target, so the barrier is taken here, before any op.
            self.engine.transport.memory_sync();
            st.grant_posted();
            Ok(((), st))
        })
    }

    pub(super) fn complete(&self) -> Result<()> {
        self.sync_call("complete", |mut st| {
            let members = match &st.epoch {
                WindowEpoch::Pscw(p) => p.group.len(),
                _ => return Err(UsageError::NoExposureEpoch.into()),
            };
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC before PROC_SYNC in WIN_COMPLETE
                                                 // Hot path, in this one hold of the state: every target posted already and has
                                                 // nothing of the epoch queued (its ops completed in their calls): its complete
                                                 // notice goes now. The first target that is not so, and the rest after it,
                                                 // take the waiting path.
            for i in 0..members {
                let rank = Self::pscw_member(&st, i);
                if !(st.table.get(rank).is_none() && st.access_granted(self, rank)) {
                    drop(st);
                    self.complete_waiting(i)?;
                    st = self.lock_state();
                    break;
                }
                self.complete_notice(&mut st, rank)?;
            }
            if !st.table.iter().all(|t| t.is_idle()) {
                drop(st);
                self.wait_for("complete", |st| Ok(st.table.iter().all(|t| t.is_idle())))?;
                st = self.lock_state();
            }
            for rank in st.table.ranks() {
                st.free_target(self, rank);
            }
            if let WindowEpoch::Pscw(access) = std::mem::replace(&mut st.epoch, WindowEpoch::Unset)
            {
                st.spare_access = Some(access);
            }
            st.restoring = false;
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(((), st)),
            }
        })
    }

    /// The `i`th target of the open access epoch.
    fn pscw_member(st: &WinState, i: usize) -> Rank {
        match &st.epoch {
            WindowEpoch::Pscw(p) => p.group[i],
            _ => unreachable!("complete holds the access epoch open"),
        }
    }

    /// `rank`'s complete notice, natively or by message.
    fn complete_notice(&self, st: &mut WinState, rank: Rank) -> Result<()> {
        if !self.notify(rank, Notice::Complete)? {
            st.send_control(self, rank, Kind::Done, flags::COMPLETE, 0)?;
        }
        Ok(())
    }

    /// Complete's waiting path, from the group's `first`th target on: each target's ops
    /// go once it posted (complete waits for that post); the caller then waits for them.
    fn complete_waiting(&self, first: usize) -> Result<()> {
        let group = match &self.lock_state().epoch {
            WindowEpoch::Pscw(p) => p.group[first..].to_vec(),
            _ => unreachable!("complete holds the access epoch open"),
        };
        for rank in group {
            let close = |st: &mut WinState| -> Result<bool> {
                if !st.access_granted(self, rank) {
                    return Ok(false);
                }
                if st.table.get(rank).is_none() {
                    self.complete_notice(st, rank)?;
                } else {
                    st.table.get_mut(rank).expect("exists").sync = SyncFlag::Complete;
                    st.issue_ops_target(self, rank)?;
                }
                Ok(true)
            };
            // Usually the post is in already: no progress pass before closing.
            let closed = close(&mut self.lock_state())?;
            if !closed {
                self.wait_for("complete", close)?;
            }
        }
        Ok(())
    }

    pub(super) fn post_exposure(&self, group: &[Rank], assert: Assert) -> Result<()> {
        if !assert.only(Assert::NOCHECK | Assert::NOSTORE | Assert::NOPUT) {
            return Err(UsageError::BadAssert { call: "post" }.into());
        }
        self.check_group(group)?;
        let mut st = self.lock_state();
        if st.target.exposure.is_some() {
            return Err(UsageError::EpochConflict {
                call: "post",
                state: "exposure epoch open",
            }
            .into());
        }
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC before PROC_SYNC in WIN_POST
        if !assert.contains(Assert::NOCHECK) {
            for &r in group {
                if !self.notify(r, Notice::Post)? {
                    st.send_control(self, r, Kind::Post, 0, 0)?;
                }
            }
        }
        let mut exposure = std::mem::take(&mut st.target.spare_exposure);
        exposure.clear();
        exposure.extend_from_slice(group);
        st.target.exposure = Some(exposure);
        // Post does not block: only a post notice that found no room yet is pushed on
        // (the engine's passes do it too). A pass here on every post was a quarter of it.
        if st.outbox.is_empty() {
            return Ok(());
        }
        st.make_progress(self)
    }

    pub(super) fn exposure_done(st: &mut WinState) -> bool {
        let target = &mut st.target;
        let Some(group) = &target.exposure else {
            return true;
        };
        if !group
            .iter()
            .all(|r| target.completes.get(r).is_some_and(|n| *n > 0))
        {
            return false;
        }
        for r in group {
            let n = target.completes.get_mut(r).expect("checked");
            *n -= 1;
            if *n == 0 {
                target.completes.remove(r);
            }
        }
        if let Some(group) = target.exposure.take() {
            target.spare_exposure = group;
        }
        true
    }

    pub(super) fn wait_exposure(&self) -> Result<()> {
        let done = |st: &mut WinState| {
            st.take_native_completes(self);
            Ok(Self::exposure_done(st))
        };
        let mut st = self.lock_state();
        if st.target.exposure.is_none() {
            return Err(UsageError::NoExposureEpoch.into());
        }
        // The completes may all be in already: no progress pass then.
        let finished = done(&mut st)?;
        drop(st);
        if !finished {
            self.wait_for("wait", done)?;
        }
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC after PROC_SYNC in WIN_WAIT
        Ok(())
    }

    pub(super) fn test_exposure(&self) -> Result<bool> {
        if self.lock_state().target.exposure.is_none() {
            return Err(UsageError::NoExposureEpoch.into());
        }
        self.engine.progress()?;
        let mut st = self.lock_state();
        st.make_progress(self)?;
        let done = Self::exposure_done(&mut st);
        if done {
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, PSCW row: MEM_SYNC after PROC_SYNC in WIN_TEST
        }
        Ok(done)
    }
}

impl WinState {
    /// At start: the targets whose post is in already are granted now (what their first
    /// op or complete would do), and with nothing of the window outstanding their ops go
    /// [direct](super::direct) from the first: a PSCW epoch usually has one op per
    /// target, which otherwise always took the locked path.
    fn grant_posted(&mut self) {
        let open = self.deferred.is_none();
        let WinState {
            epoch,
            target,
            direct,
            table,
            ..
        } = self;
        let WindowEpoch::Pscw(p) = epoch else {
            return;
        };
        for (i, &rank) in p.group.iter().enumerate() {
            if !p.granted[i] {
                match target.posts.get_mut(&rank) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        p.granted[i] = true;
                    }
                    _ => continue,
                }
            }
            if open && table.get(rank).is_none() {
                direct.open(rank, false);
            }
        }
    }
}
