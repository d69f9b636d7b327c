//! LOCK / UNLOCK (seed 004): per-target passive epochs, the single short op, and
//! releasing what an unlock holds on every path, errors included.

use super::*;

impl WindowShared {
    pub(super) fn lock(&self, lock_type: LockType, target: Rank, assert: Assert) -> Result<()> {
        // The calls outside `sync_call` (lock, unlock, lock_all, flush) open the same span:
        // RMA_LOG=rma_core=debug shows every epoch's synchronization, whatever its mode.
        let _span = sync_span!(call = "lock", win = self.id, target);
        if !assert.only(Assert::NOCHECK) {
            return Err(UsageError::BadAssert { call: "lock" }.into());
        }
        self.check_rank(target)?;
        let eager = {
            let mut st = self.lock_state();
            match st.epoch {
                WindowEpoch::PerTarget => {}
                _ if Self::no_access_epoch(&st) => st.epoch = WindowEpoch::PerTarget,
                ref e => {
                    return Err(UsageError::EpochConflict {
                        call: "lock",
                        state: e.name(),
                    }
                    .into())
                }
            }
            if st.locks.contains_key(&target) {
                return Err(UsageError::AlreadyLocked { target }.into());
            }
            let nocheck = assert.contains(Assert::NOCHECK);
            let exclusive = lock_type == LockType::Exclusive;
            st.locks.insert(
                target,
                LockInfo {
                    exclusive,
                    nocheck,
                    granted: nocheck,
                },
            );
            let state = if nocheck {
                TargetState::LockGranted
            } else {
                TargetState::LockCalled
            };
            if let Some(t) = st.table.get_mut(target) {
                t.state = state;
            }
            if !nocheck && WinState::native_locks(self, target) && st.table.get(target).is_none() {
                // Native locks cost no message: take the lock now, so the epoch's ops go
                // straight to the target (seed 004's LOCK, "do PROGRESS_WAIT until I got
                // the lock", for every target). A free lock is taken at the first try,
                // still holding the state: nothing else to wait for.
                if self.try_lock_word(target, exclusive)? {
                    if let Some(l) = st.locks.get_mut(&target) {
                        l.granted = true;
                    }
                    // Granted with nothing of the target outstanding: the epoch's ops
                    // go direct from the first.
                    if st.deferred.is_none() {
                        self.direct.open(target, true);
                    }
                    drop(st);
                    self.lock_word_memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
                    return Ok(());
                }
                drop(st);
                let mut first = true;
                self.engine.wait_until("lock", || {
                    if !first {
                        self.lock_state().make_progress(self)?;
                    }
                    first = false;
                    if self.try_lock_word(target, exclusive)? {
                        let mut st = self.lock_state();
                        if let Some(l) = st.locks.get_mut(&target) {
                            l.granted = true;
                        }
                        if let Some(t) = st.table.get_mut(target) {
                            t.state = TargetState::LockGranted;
                        } else if st.deferred.is_none() {
                            self.direct.open(target, true);
                        }
                        return Ok(true);
                    }
                    Ok(false)
                })?;
                self.lock_word_memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
                return Ok(());
            }
            !nocheck && st.must_take_lock(self, target)
        };
        if eager {
            // Local loads/stores after lock must be protected: take the lock now.
            self.wait_for("lock", |st| {
                if st.table.get(target).is_none() && st.target_elem(self, target).is_none() {
                    st.restore_target_elem_resources::<()>(self, target)?;
                    return Ok(false);
                }
                let t = st.table.get_mut(target).expect("exists");
                if t.state == TargetState::LockCalled {
                    st.request_lock(self, target)?;
                } else if t.state == TargetState::LockIssued {
                    st.issue_ops_target(self, target)?;
                }
                Ok(st.locks.get(&target).is_some_and(|l| l.granted))
            })?;
            self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
        }
        Ok(())
    }

    pub(super) fn unlock(&self, target: Rank) -> Result<()> {
        let _span = sync_span!(call = "unlock", win = self.id, target);
        self.unlock_inner(target).inspect_err(|e| {
            if !e.is_usage() {
                // The lock of `target` is over either way: release what this rank holds
                // of it and fail its ops, so that the window is not stuck in the epoch.
                let mut st = self.lock_state();
                st.abandon_target(self, target, e);
                let _ = st.release_lock(self, target);
            }
        })
    }

    pub(super) fn unlock_inner(&self, target: Rank) -> Result<()> {
        self.check_rank(target)?;
        let info = {
            let mut st = self.lock_state();
            // Whatever follows, the lock's ops go no more past the state.
            self.direct.close(target);
            if !matches!(st.epoch, WindowEpoch::PerTarget) {
                return Err(UsageError::NotLocked { target }.into());
            }
            let info = *st
                .locks
                .get(&target)
                .ok_or(UsageError::NotLocked { target })?;
            // Hot path: native lock, nothing of the epoch left to complete.
            let settled = st
                .table
                .get(target)
                .is_none_or(|t| t.is_idle() && !t.needs_done());
            if WinState::native_locks(self, target) && settled && st.outbox.is_empty() {
                // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in WIN_UNLOCK
                // (a NOCHECK lock holds no word whose release would carry it).
                if info.nocheck {
                    self.engine.transport.memory_sync();
                } else {
                    self.lock_word_memory_sync();
                }
                st.free_target(self, target);
                st.release_lock(self, target)?;
                return st.deferred.take().map_or(Ok(()), Err);
            }
            info
        };
        self.engine.transport.memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in WIN_UNLOCK
        self.wait_for("unlock", |st| {
            if st.table.get(target).is_none() && st.target_elem(self, target).is_none() {
                st.restore_target_elem_resources::<()>(self, target)?;
                return Ok(false);
            }
            let native = WinState::native_locks(self, target);
            let t = st.table.get_mut(target).expect("exists");
            t.sync = if info.nocheck || native {
                if t.needs_done() || !t.pending.is_empty() {
                    SyncFlag::Flush
                } else {
                    SyncFlag::None
                }
            } else {
                SyncFlag::Unlock
            };
            st.issue_ops_target(self, target)?;
            Ok(true)
        })?;
        self.wait_for("unlock", |st| {
            Ok(st.table.get(target).is_none_or(|t| t.is_idle()))
        })?;
        let mut st = self.lock_state();
        st.free_target(self, target);
        st.release_lock(self, target)?;
        st.deferred.take().map_or(Ok(()), Err)
    }
}

impl WinState {
    /// Ends this process's lock of `target`, on every way out of `unlock`: the backend's
    /// lock word released where the lock was taken natively (granted, and not under
    /// MODE_NOCHECK), and the per-target epoch closed with its last lock and element.
    pub(super) fn release_lock(&mut self, w: &WindowShared, target: Rank) -> Result<()> {
        let held = self
            .locks
            .remove(&target)
            .filter(|l| l.granted && !l.nocheck);
        let released = match held {
            Some(l) if Self::native_locks(w, target) => w.unlock_word(target, l.exclusive),
            _ => Ok(()),
        };
        if self.locks.is_empty() && self.table.active == 0 {
            self.epoch = WindowEpoch::Unset;
            self.restoring = false;
        }
        Ok(released?)
    }
}
