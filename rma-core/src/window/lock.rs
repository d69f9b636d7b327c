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
        // A World rank its public call translated and checked (`world`).
        debug_assert!(self.check_rank(target).is_ok());
        if assert.only(Assert::NONE) && self.lock_at_once(lock_type, target) {
            return Ok(());
        }
        self.lock_general(lock_type, target, assert)
    }

    /// LOCK's hottest path, small enough to stay inline in its call: a native lock free
    /// at the first try, opening or joining a per-target epoch, of a target with nothing
    /// outstanding. `false`: nothing was done (the general path's case).
    #[inline(always)]
    fn lock_at_once(&self, lock_type: LockType, target: Rank) -> bool {
        let mut st = self.lock_state();
        if !(matches!(st.epoch, WindowEpoch::PerTarget | WindowEpoch::Unset)
            && st.deferred.is_none()
            && st.table.get(target).is_none()
            && !st.locks.contains_key(&target)
            && WinState::native_locks(self, target))
        {
            return false;
        }
        let exclusive = lock_type == LockType::Exclusive;
        if !self.lock_word_now(target, exclusive) {
            // Busy (or failed): the general path waits for it (or reports it).
            return false;
        }
        st.epoch = WindowEpoch::PerTarget;
        st.locks.push(
            target,
            LockInfo {
                exclusive,
                nocheck: false,
                granted: true,
            },
        );
        // Granted with nothing of the target outstanding: the epoch's ops go direct
        // from the first.
        self.direct.open(target, true);
        drop(st);
        self.lock_word_memory_sync(); // seed 004 RMA+shm, passive row: MEM_SYNC after PROC_SYNC in WIN_LOCK
        true
    }

    /// LOCK past [`lock_at_once`](Self::lock_at_once).
    #[inline(never)]
    fn lock_general(&self, lock_type: LockType, target: Rank, assert: Assert) -> Result<()> {
        let eager = {
            let mut st = self.lock_state();
            match st.epoch {
                WindowEpoch::PerTarget => {}
                _ if Self::no_access_epoch(&st) => {
                    // A fence's epoch left every member direct: only locked targets are.
                    self.direct.close_all();
                    st.epoch = WindowEpoch::PerTarget;
                }
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
            if !nocheck && st.table.get(target).is_none() && WinState::native_locks(self, target) {
                // Native locks cost no message: take the lock now, so the epoch's ops go
                // straight to the target (seed 004's LOCK, "do PROGRESS_WAIT until I got
                // the lock", for every target). A free lock is taken at the first try,
                // still holding the state: nothing else to wait for.
                let granted = match self.try_lock_word(target, exclusive) {
                    Ok(granted) => granted,
                    Err(e) => {
                        // No lock of this call stays behind, nor the epoch it opened.
                        st.end_epoch_without_locks();
                        return Err(e.into());
                    }
                };
                st.locks.push(
                    target,
                    LockInfo {
                        exclusive,
                        nocheck,
                        granted,
                    },
                );
                if granted {
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
                self.engine.wait_until("lock", || {
                    self.lock_state().make_progress(self)?;
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
            st.locks.push(
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
        // A World rank its public call translated and checked (`world`).
        debug_assert!(self.check_rank(target).is_ok());
        if let Some(done) = self.unlock_settled(target) {
            return done;
        }
        self.unlock_general(target)
    }

    /// UNLOCK's hottest path, small enough to stay inline in its call: a native lock
    /// whose target has no element (every op of the epoch went direct, or none was
    /// made) and nothing waits to be sent, on a window whose ops are never counted.
    /// `None`: the general path's case.
    #[inline(always)]
    fn unlock_settled(&self, target: Rank) -> Option<Result<()>> {
        if self.direct.counts_ops() {
            return None;
        }
        let mut st = self.lock_state();
        if !(matches!(st.epoch, WindowEpoch::PerTarget)
            && st.table.get(target).is_none()
            && st.outbox.is_empty()
            && WinState::native_locks(self, target))
        {
            return None;
        }
        // The lock's ops go no more past the state.
        self.direct.close(target);
        let Some(info) = st.locks.remove(&target) else {
            return Some(Err(UsageError::NotLocked { target }.into()));
        };
        // seed 004 RMA+shm, passive row: MEM_SYNC before PROC_SYNC in WIN_UNLOCK (a
        // NOCHECK lock holds no word whose release would carry it).
        let released = if info.nocheck || !info.granted {
            self.engine.transport.memory_sync();
            Ok(())
        } else {
            self.lock_word_memory_sync();
            self.unlock_word_now(target, info.exclusive)
        };
        st.end_epoch_without_locks();
        Some(match released {
            Ok(()) => st.deferred.take().map_or(Ok(()), Err),
            Err(e) => Err(e.into()),
        })
    }

    /// UNLOCK past [`unlock_settled`](Self::unlock_settled): ops of the epoch still
    /// queued or under way, or a lock by message.
    #[inline(never)]
    fn unlock_general(&self, target: Rank) -> Result<()> {
        // Ops that may have gone counted (see `direct`): toward `target` they go counted
        // no more, and complete first. The epoch ends all the same if that fails (the
        // error handling below); the first error is the one reported.
        let counted = if self.direct.counts_ops() {
            self.end_counted_ops("unlock", Some(target))
        } else {
            Ok(())
        };
        let unlocked = self.unlock_inner(target);
        counted.and(unlocked).inspect_err(|e| {
            if !e.is_usage() {
                // The lock of `target` is over either way: release what this rank holds
                // of it and fail its ops, so that the window is not stuck in the epoch.
                let mut st = self.lock_state();
                st.abandon_target(self, target, e);
                let _ = st.release_lock(self, target);
            }
        })
    }

    fn unlock_inner(&self, target: Rank) -> Result<()> {
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
        self.end_epoch_without_locks();
        Ok(released?)
    }

    /// Closes the per-target epoch once it has no lock and no target element left.
    #[inline(always)]
    pub(super) fn end_epoch_without_locks(&mut self) {
        if self.locks.is_empty() && self.table.active == 0 {
            self.epoch = WindowEpoch::Unset;
            self.restoring = false;
        }
    }
}
