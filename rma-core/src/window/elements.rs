//! Op and target elements (seed 004's resource management): taking them from the
//! pools, freeing them, CLEANUP_OPS and the RESTORE steps when pools run dry.

use super::*;

impl WinState {
    pub(super) fn new_token(&mut self, w: &WindowShared) -> u64 {
        self.next_token += 1;
        (u64::from(w.id) << 40) | (self.next_token & (COUNTED - 1))
    }

    /// The target element of `rank`, created in the state the epoch implies; `None` when
    /// the pools are empty (the caller restores resources).
    pub(super) fn target_elem(&mut self, w: &WindowShared, rank: Rank) -> Option<&mut TargetElem> {
        if self.table.get(rank).is_none() {
            let mut elem = self.target_pool.get(&w.engine.target_pool)?;
            let state = match &self.epoch {
                WindowEpoch::PerTarget => match self.locks.get(&rank) {
                    Some(l) if l.granted => TargetState::LockGranted,
                    _ => TargetState::LockCalled,
                },
                WindowEpoch::LockAllCalled => TargetState::LockCalled,
                _ => TargetState::Ready,
            };
            elem.reset(rank, state);
            self.table.insert(elem);
            w.counters
                .elements_in_use(self.op_pool.in_use(), self.target_pool.in_use());
        }
        self.table.get_mut(rank)
    }

    pub(super) fn free_target(&mut self, w: &WindowShared, rank: Rank) {
        if let Some(elem) = self.table.remove(rank) {
            self.target_pool.put(elem, &w.engine.target_pool);
        }
    }

    pub(super) fn free_op(&mut self, w: &WindowShared, mut op: Box<OpElem>) {
        // The request state stays with the element, for its next op that wants a result
        // once the request is gone (RequestState::reuse_or_new).
        if let Some(r) = op.request.take() {
            op.spare_request = Some(r);
        }
        op.data.clear();
        op.staged = false;
        op.landing = None;
        self.op_pool.put(op, &w.engine.op_pool);
    }

    /// PSCW notices that peers left natively ([`Transport::notify`](crate::Transport::notify)) join the ones that
    /// came by message: posts of targets this access epoch still waits for, completes of
    /// origins of the open exposure epoch.
    #[inline]
    pub(super) fn take_native_notices(&mut self, w: &WindowShared) {
        // Every progress pass asks: outside PSCW there is nothing to look at.
        if matches!(self.epoch, WindowEpoch::Pscw(_)) || self.target.exposure.is_some() {
            self.take_native_notices_of_pscw(w);
        }
    }

    #[inline(never)]
    fn take_native_notices_of_pscw(&mut self, w: &WindowShared) {
        if let WindowEpoch::Pscw(p) = &self.epoch {
            for (i, &rank) in p.group.iter().enumerate() {
                if !p.granted[i] {
                    let n = w.take_notices(rank, Notice::Post);
                    if n > 0 {
                        *self.target.posts.entry(rank).or_default() += n as u32;
                    }
                }
            }
        }
        self.take_native_completes(w);
    }

    /// Posts `rank` left natively for this access epoch, if it still waits for one.
    pub(super) fn take_native_posts(&mut self, w: &WindowShared, rank: Rank) {
        if let WindowEpoch::Pscw(p) = &self.epoch {
            if p.index(rank).is_some_and(|i| !p.granted[i]) {
                let n = w.take_notices(rank, Notice::Post);
                if n > 0 {
                    *self.target.posts.entry(rank).or_default() += n as u32;
                }
            }
        }
    }

    /// Completes the origins of the open exposure epoch left natively.
    pub(super) fn take_native_completes(&mut self, w: &WindowShared) {
        if let Some(group) = &self.target.exposure {
            for &rank in group {
                let n = w.take_notices(rank, Notice::Complete);
                if n > 0 {
                    *self.target.completes.entry(rank).or_default() += n as u32;
                }
            }
        }
    }
}
