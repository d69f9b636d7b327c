//! LOCK_ALL / UNLOCK_ALL (seed 004): per-target locks taken lazily, or the window
//! protocol when resources run short.

use super::*;

impl WindowShared {
    /// UNLOCK_ALL's hot path, in one hold of the window's state: per-target locks (not
    /// the window protocol), every one of them native, and nothing of the epoch queued,
    /// under way or awaited (every op completed in its call, as on shared memory). Then
    /// MEM_SYNC, each lock word held released (PROC_SYNC), the elements freed: no
    /// progress pass, no message. `None`: the full algorithm below is needed.
    fn unlock_all_settled(&self, st: &mut WinState) -> Option<Result<()>> {
        if matches!(st.epoch, WindowEpoch::LockAllGranted { nocheck: false })
            && st.window_acks == 0
            && st.table.active == 0
            && st.outbox.is_empty()
            && self.members_lock_natively
        {
            // Hottest: every member's native word held (taken at once by `lock_all`, or
            // by the window protocol over native words) and every op of the epoch
            // went direct.
            self.lock_word_memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in UNLOCK_ALL
            return Some(Self::unlock_all_closed(st, self.release_member_words()));
        }
        let per_target = matches!(
            st.epoch,
            WindowEpoch::LockAllCalled | WindowEpoch::LockAllGranted { nocheck: true }
        );
        let nocheck = matches!(st.epoch, WindowEpoch::LockAllGranted { nocheck: true });
        // The window protocol over native words only (`lock_all` took them all at once,
        // or progress did): every member's word is held, no message was involved.
        let every_word = matches!(st.epoch, WindowEpoch::LockAllGranted { nocheck: false })
            && st.window_acks == 0
            && self.members_lock_natively;
        let settled = |t: &TargetElem| {
            t.is_idle()
                && !t.needs_done()
                && (nocheck && t.state == TargetState::Ready
                    || every_word
                    || matches!(t.state, TargetState::LockCalled | TargetState::LockGranted)
                        && WinState::native_locks(self, t.rank))
        };
        if !(per_target || every_word) || !st.outbox.is_empty() || !st.table.iter().all(settled) {
            return None;
        }
        // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in UNLOCK_ALL (with
        // NOCHECK there is no lock word to release, so no atomic to carry it).
        if nocheck {
            self.engine.transport.memory_sync();
        } else {
            self.lock_word_memory_sync();
        }
        let mut ranks = std::mem::take(&mut st.work);
        ranks.clear();
        ranks.extend(st.table.iter().map(|t| t.rank));
        let mut released = Ok(());
        for &rank in &ranks {
            let held = st
                .table
                .get(rank)
                .is_some_and(|t| t.state == TargetState::LockGranted);
            if held && !nocheck && !every_word {
                released = released.and(self.unlock_word(rank, false));
            }
            st.free_target(self, rank);
        }
        st.work = ranks;
        if every_word {
            released = released.and(self.release_member_words());
        }
        Some(Self::unlock_all_closed(st, released))
    }

    /// Releases every member's lock word (shared), all of them whatever fails: the first
    /// error. The loop carries a flag, not a result: a result of every release, combined
    /// in turn, went through memory twice per member (a fifth of an unlock_all).
    #[inline(always)]
    fn release_member_words(&self) -> std::result::Result<(), TransportError> {
        let mut first_error = None;
        for rank in self.members() {
            if let Err(e) = self.unlock_word_now(rank, false) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// UNLOCK_ALL's end on its settled paths: no epoch, and the first error of the lock
    /// words' release or of the epoch (deferred) reported.
    #[inline(always)]
    fn unlock_all_closed(
        st: &mut WinState,
        released: std::result::Result<(), TransportError>,
    ) -> Result<()> {
        st.epoch = WindowEpoch::Unset;
        st.restoring = false;
        match (released, st.deferred.take()) {
            (Err(e), _) => Err(e.into()),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Whether `lock_all` takes every target's lock word in its call: the window's ops
    /// (and lock words) are CPU atomics of this node, every member has a native lock word,
    /// nothing is left of an earlier epoch, and the members are few enough that one
    /// atomic each costs less than a lazy lock per target touched.
    #[inline]
    fn takes_every_word_at_once(&self, st: &WinState) -> bool {
        const EAGER_UP_TO: usize = 64;
        self.ops.is_some()
            && self.member_count() <= EAGER_UP_TO
            && st.table.active == 0
            && self.members_lock_natively
    }

    pub(super) fn lock_all(&self, assert: Assert) -> Result<()> {
        let _span = sync_span!(call = "lock_all", win = self.id);
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "lock_all" }.into());
        }
        if assert.only(Assert::NONE) && self.lock_all_at_once() {
            return Ok(());
        }
        self.lock_all_general(assert)
    }

    /// LOCK_ALL's hottest path, small enough to stay inline in its call: no epoch and
    /// nothing left of one, every member's native lock word free at the first try
    /// ([`takes_every_word_at_once`](Self::takes_every_word_at_once)). `false`: nothing
    /// was done (a word taken is given back), the general path's case.
    #[inline(always)]
    fn lock_all_at_once(&self) -> bool {
        let mut st = self.lock_state();
        if !(matches!(st.epoch, WindowEpoch::Unset)
            && st.deferred.is_none()
            && self.kind != WindowKind::Shared
            && self.takes_every_word_at_once(&st))
        {
            return false;
        }
        for (taken, rank) in self.members().enumerate() {
            if !self.lock_word_now(rank, false) {
                for rank in self.members().take(taken) {
                    let _ = self.unlock_word(rank, false);
                }
                return false;
            }
        }
        st.epoch = WindowEpoch::LockAllGranted { nocheck: false };
        // Granted everywhere, nothing queued anywhere: every target is direct.
        self.direct.open_members(true);
        drop(st);
        // seed 004 RMA+shm, passive row: LOCK_ALL as LOCK; each lock word carries it.
        self.lock_word_memory_sync();
        true
    }

    /// LOCK_ALL past [`lock_all_at_once`](Self::lock_all_at_once).
    #[inline(never)]
    fn lock_all_general(&self, assert: Assert) -> Result<()> {
        let mut st = self.lock_state();
        if !Self::no_access_epoch(&st) {
            return Err(UsageError::EpochConflict {
                call: "lock_all",
                state: st.epoch.name(),
            }
            .into());
        }
        // A fence's epoch left every member direct: a lazy lock must not be overtaken.
        self.direct.close_all();
        st.epoch = if assert.contains(Assert::NOCHECK) {
            WindowEpoch::LockAllGranted { nocheck: true }
        } else {
            WindowEpoch::LockAllCalled
        };
        for rank in st.table.ranks() {
            let state = if assert.contains(Assert::NOCHECK) {
                TargetState::Ready
            } else {
                TargetState::LockCalled
            };
            st.table.get_mut(rank).expect("listed").state = state;
        }
        if !assert.contains(Assert::NOCHECK) && self.takes_every_word_at_once(&st) {
            // Every lock word free now is taken now, one atomic each (as Open MPI's
            // osc/sm does): then the epoch holds the window protocol's locks and its ops
            // go direct from the first, with no target element or lazy lock per target.
            // One word not free, and the lazy locks of seed 004 take over: nothing waits.
            let (mut taken, mut failed) = (0, None);
            for rank in self.members() {
                match self.try_lock_word(rank, false) {
                    Ok(true) => taken += 1,
                    Ok(false) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                // No epoch after a failed lock_all, and no word of it held.
                for rank in self.members().take(taken) {
                    let _ = self.unlock_word(rank, false);
                }
                st.epoch = WindowEpoch::Unset;
                return Err(e.into());
            }
            if taken == self.member_count() {
                st.epoch = WindowEpoch::LockAllGranted { nocheck: false };
                if st.deferred.is_none() {
                    // Granted everywhere, nothing queued anywhere: every target is direct.
                    self.direct.open_members(true);
                }
            } else {
                for rank in self.members().take(taken) {
                    self.unlock_word(rank, false)?;
                }
            }
        }
        drop(st);
        if self.kind == WindowKind::Shared && !assert.contains(Assert::NOCHECK) {
            // Shared memory may be touched by load/store: hold every lock before returning.
            let mut st = self.lock_state();
            st.lock_all_window_protocol(self)?;
            drop(st);
            self.wait_for("lock_all", |st| Ok(st.lock_all_issued_done()))?;
        }
        // seed 004 RMA+shm, passive row: LOCK_ALL as LOCK. Each lock word taken (now, or
        // lazily before the first op to its target) carries it; NOCHECK takes none.
        if assert.contains(Assert::NOCHECK) {
            self.engine.transport.memory_sync();
        } else {
            self.lock_word_memory_sync();
        }
        Ok(())
    }

    pub(super) fn unlock_all(&self) -> Result<()> {
        if self.direct.counts_ops() {
            return self.unlock_all_counted();
        }
        self.unlock_all_after_counted_ops()
    }

    /// UNLOCK_ALL on a window whose ops may go [counted](super::direct): they go counted
    /// no more and complete first.
    #[inline(never)]
    fn unlock_all_counted(&self) -> Result<()> {
        if let Err(e) = self.end_counted_ops("unlock_all", None) {
            // The epoch ends all the same; the first error is the one reported.
            return self.unlock_all_after_counted_ops().and(Err(e));
        }
        self.unlock_all_after_counted_ops()
    }

    /// [`unlock_all`](Self::unlock_all) once no counted op is under way.
    #[inline(always)]
    fn unlock_all_after_counted_ops(&self) -> Result<()> {
        {
            // The hot path in one hold of the state, outside `sync_call` (which would take
            // it twice more): no other synchronization call under way, the epoch settled.
            let _span = sync_span!(call = "unlock_all", win = self.id);
            let mut st = self.lock_state();
            if st.sync_call.is_none() {
                // The epoch ends here if it is settled: no op goes direct from now on
                // (before its words are released).
                self.direct.close_all();
                if let Some(done) = self.unlock_all_settled(&mut st) {
                    self.engine.activity.bump();
                    return done;
                }
            }
        }
        self.sync_call("unlock_all", |mut st| {
            if let Some(done) = self.unlock_all_settled(&mut st) {
                return done.map(|()| ((), st));
            }
            let nocheck = {
                match st.epoch {
                    WindowEpoch::LockAllCalled | WindowEpoch::LockAllIssued => None,
                    WindowEpoch::LockAllGranted { nocheck } => Some(nocheck),
                    ref e => {
                        return Err(UsageError::EpochConflict {
                            call: "unlock_all",
                            state: e.name(),
                        }
                        .into())
                    }
                }
            };
            drop(st);
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in UNLOCK_ALL
            self.wait_for("unlock_all", |st| Ok(st.lock_all_issued_done()))?;
            let window_protocol = matches!(
                self.lock_state().epoch,
                WindowEpoch::LockAllGranted { nocheck: false }
            );
            {
                let mut st = self.lock_state();
                for rank in st.table.ranks() {
                    let native = WinState::native_locks(self, rank);
                    let t = st.table.get_mut(rank).expect("listed");
                    let needs_done = t.needs_done() || !t.pending.is_empty();
                    t.sync = match t.state {
                        // Native locks: complete remotely, release after (below).
                        TargetState::LockCalled
                        | TargetState::LockIssued
                        | TargetState::LockGranted
                            if native =>
                        {
                            if needs_done {
                                SyncFlag::Flush
                            } else {
                                SyncFlag::None
                            }
                        }
                        // Per-target protocol: RMA_DONE+UNLOCK to each locked target.
                        TargetState::LockCalled
                        | TargetState::LockIssued
                        | TargetState::LockGranted => SyncFlag::Unlock,
                        TargetState::Ready if t.needs_done() || !t.pending.is_empty() => {
                            SyncFlag::Flush
                        }
                        TargetState::Ready => SyncFlag::None,
                    };
                    st.issue_ops_target(self, rank)?;
                }
            }
            self.wait_for("unlock_all", |st| Ok(st.table.iter().all(|t| t.is_idle())))?;
            {
                let mut st = self.lock_state();
                for rank in st.table.ranks() {
                    let held = st
                        .table
                        .get(rank)
                        .is_some_and(|t| t.state == TargetState::LockGranted);
                    if held && !window_protocol && WinState::native_locks(self, rank) {
                        self.unlock_word(rank, false)?;
                    }
                    st.free_target(self, rank);
                }
                // Released (or being released) from here on: a failure below must not
                // release them twice.
                st.epoch = WindowEpoch::Unset;
                if window_protocol && nocheck != Some(true) {
                    // Window protocol: every target was locked; unlock them all.
                    for rank in self.members() {
                        if WinState::native_locks(self, rank) {
                            self.unlock_word(rank, false)?;
                        } else {
                            st.window_acks += 1;
                            st.send_control(self, rank, Kind::Done, flags::UNLOCK, 0)?;
                        }
                    }
                }
            }
            self.wait_for("unlock_all", |st| Ok(st.window_acks == 0))?;
            let mut st = self.lock_state();
            st.epoch = WindowEpoch::Unset;
            st.restoring = false;
            match st.deferred.take() {
                Some(e) => Err(e),
                None => Ok(((), st)),
            }
        })
    }
}
