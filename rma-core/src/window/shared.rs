//! [`WindowShared`]: creation, waiting (PROGRESS_WAIT on one window), the checks of
//! ranks and extents, the choice of path per op, and the rules of synchronization calls
//! (one at a time, closing what a failure left open).

use super::*;

impl WindowShared {
    pub(crate) fn new(
        id: u32,
        kind: WindowKind,
        engine: Arc<EngineShared>,
        remote: &[RemoteSegment],
        memory: Memory,
        anchor: Option<Arc<dyn Segment>>,
        comm: Option<Comm>,
    ) -> Self {
        let group = comm.as_ref().map(|c| c.group().clone());
        let ops = engine.transport.window_ops(id);
        let blocks_in_call = ops.as_ref().is_some_and(|o| o.completes_in_call());
        let members: Box<dyn Iterator<Item = Rank>> = match &group {
            Some(g) => Box::new(g.members().iter().copied()),
            None => Box::new(0..engine.size as Rank),
        };
        // Capabilities per target, once: the few distinct classes, and which class each
        // rank's is (in runs: consecutive ranks usually share one).
        let mut classes: Vec<crate::transport::Capabilities> = Vec::new();
        let routes = (0..engine.size as Rank)
            .map(|r| {
                let c = engine.transport.window_capabilities(id, r);
                match classes.iter().position(|x| *x == c) {
                    Some(i) => i as u8,
                    None => {
                        classes.push(c);
                        (classes.len() - 1) as u8
                    }
                }
            })
            .collect::<Vec<u8>>();
        let routes = PerRank::new(&routes);
        // Counted direct puts where ops may stay pending (a network), native ops are
        // allowed, and the origin knows the target's extent (not a dynamic window, whose
        // regions only the target knows: those puts take the locked path's checks).
        let counted = engine.config.native_ops
            && kind != WindowKind::Dynamic
            && classes.iter().any(|c| c.rdma_write && !c.ordered_puts);
        let direct = Arc::new(DirectAccess::new(
            engine.size,
            members,
            blocks_in_call,
            counted,
        ));
        let state = StateLock::new(WinState::new(&engine, direct.clone()));
        let shares_memory = classes.iter().any(|c| c.shared_memory);
        let members_lock_natively = match &group {
            None => classes.iter().all(|c| c.native_locks),
            Some(g) => g
                .members()
                .iter()
                .all(|&r| classes[*routes.get(r) as usize].native_locks),
        };
        let counters = Counters::new(engine.config.calls_one_at_a_time);
        WindowShared {
            every_target_writes: classes.iter().all(|c| c.rdma_write),
            every_target_reads: classes.iter().all(|c| c.rdma_read),
            members_lock_natively,
            ops,
            direct,
            counted_gets: Mutex::default(),
            blocks_in_call,
            routes,
            classes,
            shares_memory,
            id,
            kind,
            engine,
            remote: PerRank::new(
                &remote
                    .iter()
                    .map(|r| TargetMemory {
                        len: r.len,
                        disp_unit: r.disp_unit,
                    })
                    .collect::<Vec<_>>(),
            ),
            memory: RwLock::new(memory),
            anchor: Mutex::new(anchor),
            state,
            counters,
            user_copy: Mutex::new(None),
            freed: std::sync::atomic::AtomicBool::new(false),
            local_access: std::sync::atomic::AtomicBool::new(false),
            group,
            comm,
            notify: StateLock::new(None),
        }
    }

    /// The World rank of the window's rank `rank` (the communicator's numbering), or
    /// the error for a rank outside its group.
    #[inline(always)]
    pub(super) fn world(&self, rank: Rank) -> Result<Rank> {
        match &self.group {
            None => self.check_rank(rank).map(|()| rank),
            Some(g) => g.world_rank(rank).ok_or_else(|| {
                UsageError::RankOutOfRange {
                    rank,
                    size: g.size(),
                }
                .into()
            }),
        }
    }

    /// Runs `f` on the World ranks of the window's ranks `group` (a PSCW group). A window
    /// over the World names World ranks already: `f` gets `group` itself (start and post
    /// check each rank, `check_group`); a group of a communicator's window is translated on the stack when small
    /// (start and post are per-epoch calls: an allocation was a fifth of their cost).
    #[inline]
    pub(super) fn with_world_group<R>(
        &self,
        group: &[Rank],
        f: impl FnOnce(&[Rank]) -> Result<R>,
    ) -> Result<R> {
        const ON_STACK: usize = 16;
        let Some(g) = &self.group else {
            return f(group);
        };
        if group.len() > ON_STACK {
            return f(&g.world_ranks(group)?);
        }
        let mut world = [0 as Rank; ON_STACK];
        for (w, &r) in world.iter_mut().zip(group) {
            *w = g.world_rank(r).ok_or(UsageError::RankOutOfRange {
                rank: r,
                size: g.size(),
            })?;
        }
        f(&world[..group.len()])
    }

    /// The members' World ranks, in the window's order.
    pub(super) fn members(&self) -> MemberRanks<'_> {
        match &self.group {
            None => MemberRanks::All(0..self.engine.size as Rank),
            Some(g) => MemberRanks::Some(g.members().iter()),
        }
    }

    /// Number of members.
    pub(crate) fn member_count(&self) -> usize {
        self.group
            .as_ref()
            .map_or(self.engine.size, |g| g.size() as usize)
    }

    /// This process's index among the members (its rank in the window).
    pub(super) fn member_index(&self) -> usize {
        match &self.group {
            None => self.engine.rank as usize,
            Some(g) => g.rank_of(self.engine.rank).expect("a member") as usize,
        }
    }

    /// The World rank of member `index`.
    pub(super) fn member(&self, index: usize) -> Rank {
        match &self.group {
            None => index as Rank,
            Some(g) => g.members()[index],
        }
    }

    /// Whether World rank `rank` is a member.
    pub(super) fn is_member(&self, rank: Rank) -> bool {
        match &self.group {
            None => (rank as usize) < self.engine.size,
            Some(g) => g.contains(rank),
        }
    }

    pub(super) fn count_message(&self, kind: Kind, bytes: usize) {
        self.counters.message(kind, bytes);
        self.engine.stats.message(kind, bytes);
    }

    /// Holds the window's state (`state_lock`: biased to the thread that uses it).
    #[inline]
    pub(crate) fn lock_state(&self) -> StateGuard<'_, WinState> {
        self.state.lock()
    }

    /// Blocks until `cond` holds on this window's state, making progress on the way.
    pub(super) fn wait_for(
        &self,
        call: &'static str,
        cond: impl FnMut(&mut WinState) -> Result<bool>,
    ) -> Result<()> {
        self.lock_state().make_progress(self)?;
        self.wait_issued(call, cond)
    }

    /// As [`wait_for`](Self::wait_for), for a caller that has just issued what it waits
    /// on: ISSUE_OPS is left to the engine's progress passes, which run it on every
    /// registered window (or another thread's pass does).
    pub(super) fn wait_issued(
        &self,
        call: &'static str,
        mut cond: impl FnMut(&mut WinState) -> Result<bool>,
    ) -> Result<()> {
        self.engine
            .wait_until(call, || {
                let mut st = self.lock_state();
                if cond(&mut st)? {
                    return Ok(true);
                }
                st.departure_error(self, call).map(|()| false)
            })
            .map_err(|e| match e.peer() {
                Some(&PeerError::Timeout { call, rank: None }) => {
                    let st = self.lock_state();
                    tracing::warn!(
                        call,
                        win = self.id,
                        state = %st.wait_summary(),
                        backend = %self.engine.transport.diagnose(),
                        "timed out"
                    );
                    PeerError::Timeout {
                        call,
                        rank: st.awaited_rank(self),
                    }
                    .into()
                }
                _ => e,
            })
    }

    #[inline]
    pub(super) fn check_rank(&self, rank: Rank) -> Result<()> {
        if (rank as usize) < self.engine.size {
            Ok(())
        } else {
            Err(self.rank_out_of_range(rank))
        }
    }

    #[cold]
    #[inline(never)]
    fn rank_out_of_range(&self, rank: Rank) -> Error {
        UsageError::RankOutOfRange {
            rank,
            size: self.engine.size as Rank,
        }
        .into()
    }

    /// Seed 004's MEM_SYNC beside the PROC_SYNC of a native lock word (after taking it,
    /// before releasing it): the word's own atomic where the window's ops hold the words
    /// (their `try_lock` acquires and their `unlock` releases: `WindowOps`), a full
    /// fence otherwise. The fence cost the shared-memory lock row two of its slowest
    /// instructions per epoch for nothing the atomics do not already order.
    #[inline]
    pub(super) fn lock_word_memory_sync(&self) {
        if self.ops.is_none() {
            self.engine.transport.memory_sync();
        }
    }

    /// On a dynamic window: whether the window's ops reach `extent` of `target` natively
    /// (a region it attached and the backend published); otherwise the op is a message
    /// and the target checks it against its regions.
    #[inline(never)]
    fn reaches_region(&self, target: Rank, extent: Extent, atomic: bool) -> bool {
        self.ops
            .as_deref()
            .is_some_and(|ops| ops.reaches(target, extent.offset, extent.span(), atomic))
    }

    /// Whether a strided op toward `target` runs natively in its call (shared memory):
    /// one op for all its blocks beats one op per block; elsewhere a strided op is one
    /// active message, and large blocks may be better off as native ops each.
    pub(crate) fn strided_native(&self, target: Rank) -> bool {
        self.blocks_in_call
            && self.kind != WindowKind::Dynamic
            && self.engine.config.native_ops
            && (target as usize) < self.engine.size
            && self.caps(target).rdma_write
    }

    /// Origin-side bounds check and conversion of a displacement to a byte extent.
    /// Always inline (its hot path is a few instructions, the rest out of line): left to
    /// LLVM inside librma-mpi's larger functions it became a call whose `Extent` came back
    /// through the stack, read in other widths than written (a store-forwarding stall).
    #[inline(always)]
    pub(super) fn extent(
        &self,
        target: Rank,
        disp: u64,
        layout: Layout,
        elem: usize,
    ) -> Result<Extent> {
        // `target` is a World rank the public call translated and checked already
        // (`world`), once per op.
        debug_assert!((target as usize) < self.engine.size);
        if layout.count == 1 && self.kind != WindowKind::Dynamic {
            // Hot path, one block (every contiguous op): in 128 bits nothing overflows
            // (64-bit displacement times 32-bit unit, 64-bit count times element size),
            // so one comparison with the window's length is the whole check. A block
            // inside the window fits in 64 bits and in the address space (the window
            // does); anything else goes the checked way below, which names the error.
            let r = self.remote.get(target);
            let offset = u128::from(disp) * u128::from(r.disp_unit);
            let len = layout.block as u128 * elem as u128;
            if offset + len <= u128::from(r.len) {
                return Ok(Extent::contiguous(offset as u64, len as usize));
            }
        }
        self.checked_extent(target, disp, layout, elem)
    }

    /// [`extent`](Self::extent) past its hot path: every size checked, the error named.
    #[inline(never)]
    fn checked_extent(
        &self,
        target: Rank,
        disp: u64,
        layout: Layout,
        elem: usize,
    ) -> Result<Extent> {
        if !layout.valid() {
            return Err(UsageError::BadLayout.into());
        }
        // Every size in bytes, checked: a layout whose bytes overflow is an error, never
        // a wrapped or truncated extent.
        let bytes = |x: usize| {
            x.checked_mul(elem)
                .map(|b| b as u64)
                .ok_or(UsageError::TooLarge { what: "the layout" })
        };
        let extent = |offset: u64| -> Result<Extent> {
            let e = Extent {
                offset,
                count: layout.count as u64,
                block: bytes(layout.block)?,
                stride: bytes(layout.stride)?,
            };
            if e.is_well_formed() {
                Ok(e)
            } else {
                Err(UsageError::TooLarge { what: "the layout" }.into())
            }
        };
        if self.kind == WindowKind::Dynamic {
            // Addresses come from `attach`; the target checks them against its regions.
            return extent(disp);
        }
        let r = self.remote.get(target);
        let offset = disp
            .checked_mul(u64::from(r.disp_unit))
            .ok_or(UsageError::TooLarge {
                what: "the displacement",
            })?;
        let len = layout
            .span()
            .and_then(|s| s.checked_mul(elem))
            .map(|b| b as u64)
            .ok_or(UsageError::TooLarge { what: "the layout" })?;
        if offset.checked_add(len).is_none_or(|end| end > r.len) {
            return Err(UsageError::OutOfBounds {
                target,
                disp,
                count: layout.span().unwrap_or(usize::MAX) as u64,
                window_len: r.len / elem as u64,
            }
            .into());
        }
        extent(offset)
    }

    /// Takes `target`'s lock word of this window natively: through the window's bound
    /// operations where the backend gives them, else the transport.
    #[inline]
    pub(super) fn try_lock_word(
        &self,
        target: Rank,
        exclusive: bool,
    ) -> std::result::Result<bool, TransportError> {
        match &self.ops {
            Some(ops) => ops.try_lock(target, exclusive),
            None => self.engine.transport.try_lock(self.id, target, exclusive),
        }
    }

    /// [`try_lock_word`](Self::try_lock_word) for the lock's hot path: `true` once
    /// taken, `false` when not taken now (busy, or an error the general path reports).
    #[inline(always)]
    pub(super) fn lock_word_now(&self, target: Rank, exclusive: bool) -> bool {
        match &self.ops {
            Some(ops) => ops.lock_in_call(target, exclusive),
            None => matches!(
                self.engine.transport.try_lock(self.id, target, exclusive),
                Ok(true)
            ),
        }
    }

    /// [`unlock_word`](Self::unlock_word) for the unlock's hot path: the bound ops'
    /// release answering in a register, the full call only for its error.
    #[inline(always)]
    pub(super) fn unlock_word_now(
        &self,
        target: Rank,
        exclusive: bool,
    ) -> std::result::Result<(), TransportError> {
        match &self.ops {
            Some(ops) if ops.unlock_in_call(target, exclusive) => Ok(()),
            _ => self.unlock_word(target, exclusive),
        }
    }

    /// Releases `target`'s lock word of this window (see [`try_lock_word`](Self::try_lock_word)).
    #[inline]
    pub(super) fn unlock_word(
        &self,
        target: Rank,
        exclusive: bool,
    ) -> std::result::Result<(), TransportError> {
        match &self.ops {
            Some(ops) => ops.unlock(target, exclusive),
            None => self.engine.transport.unlock(self.id, target, exclusive),
        }
    }

    /// Leaves a PSCW notice for `rank` natively, if the backend can ([`Transport::notify`]).
    #[inline]
    pub(super) fn notify(
        &self,
        rank: Rank,
        notice: Notice,
    ) -> std::result::Result<bool, TransportError> {
        match &self.ops {
            Some(ops) => ops.notify(rank, notice),
            None => self.engine.transport.notify(self.id, rank, notice),
        }
    }

    /// Takes the PSCW notices `from` left natively ([`Transport::take_notices`]).
    #[inline]
    pub(super) fn take_notices(&self, from: Rank, notice: Notice) -> u64 {
        match &self.ops {
            Some(ops) => ops.take_notices(from, notice),
            None => self.engine.transport.take_notices(self.id, from, notice),
        }
    }

    /// Arrives at the window's native barrier, if it has one (fence).
    #[inline]
    pub(super) fn barrier_arrive(&self) -> std::result::Result<Option<u64>, TransportError> {
        match &self.ops {
            Some(ops) => ops.barrier_arrive(),
            None => self.engine.transport.barrier_arrive(self.id),
        }
    }

    /// Whether the native barrier entered with `ticket` is over.
    #[inline]
    pub(super) fn barrier_done(&self, ticket: u64) -> std::result::Result<bool, TransportError> {
        match &self.ops {
            Some(ops) => ops.barrier_done(ticket),
            None => self.engine.transport.barrier_done(self.id, ticket),
        }
    }

    /// The backend's native capabilities toward `target` on this window.
    #[inline(always)]
    pub(crate) fn caps(&self, target: Rank) -> &crate::transport::Capabilities {
        &self.classes[*self.routes.get(target) as usize]
    }

    pub(super) fn native_allowed(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        dt: DataType,
        target: Rank,
        extent: Extent,
    ) -> bool {
        // A strided extent runs natively where every op completes in its call: one
        // call per block, inside this op's (see `native_blocks`).
        let contiguous = extent.count <= 1 || self.blocks_in_call;
        if !self.engine.config.native_ops || !contiguous {
            return false;
        }
        if self.kind == WindowKind::Dynamic
            && !self.reaches_region(target, extent, !matches!(kind, OpKind::Put | OpKind::Get))
        {
            return false;
        }
        let caps = self.caps(target);
        match kind {
            OpKind::Put => caps.rdma_write,
            OpKind::Get => caps.rdma_read,
            OpKind::Accumulate | OpKind::GetAccumulate => {
                op.is_some_and(|o| caps.has_atomic(o, dt))
                    && extent.block / dt.size() as u64 <= caps.max_atomic_elements as u64
            }
            OpKind::CompareAndSwap => caps.has_compare_and_swap(dt),
        }
    }

    #[inline]
    pub(super) fn post(&self, d: OpDesc<'_>) -> Result<Posted> {
        let native = self.native_allowed(d.kind, d.op, d.datatype, d.target, d.extent);
        if let Some(n) = d.notify {
            let native =
                native && self.notified_native(n.counters, d.kind, d.target, d.data.len(), n.index);
            return self.post_notified(d, native);
        }
        if native && self.direct.allows(d.target) {
            if let Some(posted) = self.post_direct(&d) {
                return posted;
            }
        }
        self.post_locked(d, native)
    }

    /// [`post`](Self::post) of a notified op ([`notify`]): natively only where the
    /// counter's add follows natively, in the call, or the transport carries the notice
    /// with the put; otherwise an active message that the target counts. An op that
    /// completed in its call went natively: its counter now, unless its notice went with
    /// it.
    #[inline(never)]
    fn post_notified(&self, d: OpDesc<'_>, native: bool) -> Result<Posted> {
        let n = d.notify.expect("a notified op");
        let target = d.target;
        let noticed = native && self.transport_notifies(target, d.data.len());
        let direct = if native && !noticed && self.direct.allows(target) {
            self.post_direct(&d)
        } else {
            None
        };
        let posted = match direct {
            Some(posted) => posted?,
            None => self.post_locked(d, native)?,
        };
        if n.counts && !noticed && matches!(posted, Posted::Done(_)) {
            n.counters.add_native(target, n.index)?;
        }
        Ok(posted)
    }

    /// The native add of a queued notified op's counter, once the op completed in its
    /// call.
    pub(super) fn notification_native(&self, target: Rank, index: u32) -> Result<()> {
        self.notifications(target, index)?.add_native(target, index)
    }

    /// [`post`](Self::post) through the window's state: RMA_OP with the op table.
    #[inline(never)]
    fn post_locked(&self, d: OpDesc<'_>, native: bool) -> Result<Posted> {
        // The application is in the library: the progress agent stays away. (A burst of
        // large puts on libfabric tcp, each a copy and a send of a MiB, looked idle to it
        // otherwise: it woke every 200 us to poll beside them and contended for the
        // transport's lock, 3,500 futex calls in 20 iterations of osu_put_bw.)
        self.engine.activity.bump();
        if !native {
            self.check_active_message(d.target, d.extent)?;
        }
        // Most ops post at the first try: no waiting machinery for them. (The state's
        // guard goes at the end of the `let`, before the error is looked at: one drop on
        // every path, inlined.)
        let first = self.lock_state().try_post(self, &d, native);
        if let Step::Done(p) = first? {
            return Ok(p);
        }
        let mut result = Ok(Posted::Later(None));
        self.engine.wait_until("operation", || {
            let mut st = self.lock_state();
            st.make_progress(self)?;
            match st.try_post(self, &d, native) {
                Ok(Step::Done(p)) => {
                    result = Ok(p);
                    Ok(true)
                }
                Ok(Step::Blocked) => Ok(false),
                Err(e) => {
                    result = Err(e);
                    Ok(true)
                }
            }
        })?;
        result
    }

    /// The window's bound ops, if an op toward `target` may go [direct](super::direct)
    /// (the target's mark, and native ops on a window that has them): what every
    /// `*_direct` call asks first, before the capability of its own kind.
    /// On a dynamic window, also whether the ops reach `len` bytes at `offset` (an
    /// address) of `target` (with an atomic if `atomic`): a region its owner listed.
    #[inline(always)]
    fn direct_ops(
        &self,
        target: Rank,
        offset: u64,
        len: usize,
        atomic: bool,
    ) -> Option<&dyn crate::transport::WindowOps> {
        if !self.direct.allows(target) || !self.engine.config.native_ops {
            return None;
        }
        let ops = self.ops.as_deref()?;
        if self.kind == WindowKind::Dynamic && !ops.reaches(target, offset, len as u64, atomic) {
            return None;
        }
        Some(ops)
    }

    /// A put toward a [direct](super::direct) target, contiguous, native: the
    /// backend's call is all of it ([`post_direct`](Self::post_direct) for a put, without
    /// the descriptor every other kind of op needs). `None`: not direct, or no room in the
    /// backend now; the general path takes it.
    #[inline(always)]
    pub(super) fn put_direct(&self, target: Rank, offset: u64, data: &[u8]) -> Option<Result<()>> {
        let ops = self.direct_ops(target, offset, data.len(), false)?;
        if !(self.every_target_writes || self.caps(target).rdma_write) {
            return None;
        }
        ops.put_in_call(target, offset, data)
            .then(|| self.counters.op_direct())
            .map(Ok)
    }

    /// A put toward a target whose ops go [direct and counted](super::direct) (a
    /// network): counted in flight, then the backend's put with a token that names the
    /// target; its completion uncounts it. `None`: not such a target, or no room in the
    /// backend now (nothing was done); the locked path takes it. (Asked past the direct
    /// path, in [`Window::put`](super::Window::put)'s out-of-line part: shared memory's
    /// direct put pays nothing for it.)
    #[inline(always)]
    pub(super) fn put_counted(&self, target: Rank, offset: u64, data: &[u8]) -> Option<Result<()>> {
        if !self.direct.counts_ops_to(target) {
            return None;
        }
        // The application is in the library: the progress agent stays away.
        self.engine.activity.bump();
        self.direct.op_issued(target);
        let issued = (self.engine.transport).put(
            self.id,
            target,
            offset,
            data,
            counted_token(self.id, target),
        );
        match issued {
            Ok(Issued::Pending) => {}
            Ok(Issued::Complete(_)) => self.direct.op_completed(target),
            Err(e) => {
                self.direct.op_completed(target);
                return refused(e);
            }
        }
        self.counters.op_direct();
        Some(Ok(()))
    }

    /// A contiguous get of `len` bytes toward a target whose ops go [direct and
    /// counted](super::direct) (a network): counted in flight, then the backend's get
    /// with a token that names it among the window's counted gets, whose completion
    /// completes its request. `None`: not such a target, a get the backend would read
    /// straight into the caller's buffer (a large one, where it can), or no room in the
    /// backend now (nothing was done); the locked path takes it.
    #[inline]
    pub(super) fn get_counted(
        &self,
        target: Rank,
        offset: u64,
        len: usize,
        landing: Option<&(Arc<crate::request::Landing>, usize)>,
    ) -> Option<Result<Posted>> {
        if !self.direct.counts_ops_to(target) {
            return None;
        }
        let caps = self.caps(target);
        if !caps.rdma_read {
            return None;
        }
        let loan = self.loan_for_get(target, len, landing);
        if loan.is_none() && caps.get_in_call && len as u64 > SPLIT_ABOVE {
            return None;
        }
        self.engine.activity.bump();
        let (index, state) = self.lock_counted_gets().start(target);
        self.direct.op_issued(target);
        let token = counted_get_token(self.id, index);
        let issued = match loan {
            Some(loan) => self.issue_lent(OpKind::Get, target, offset, loan, token),
            None => (self.engine.transport).get(self.id, target, offset, len, token),
        };
        let posted = match issued {
            Ok(Issued::Pending) => Posted::Later(Some(state)),
            Ok(Issued::Complete(data)) => {
                self.lock_counted_gets().finish(index);
                self.direct.op_completed(target);
                Posted::Done(Some(data.unwrap_or_default()))
            }
            Err(e) => {
                self.lock_counted_gets().finish(index);
                self.direct.op_completed(target);
                return refused(e);
            }
        };
        self.counters.op_direct();
        Some(Ok(posted))
    }

    /// The buffer a get of `len` bytes toward `target` lands in, lent to the backend
    /// (`LentBuf`): where the get's request holds one (`landing`) and the backend reads
    /// this size into lent buffers (`Capabilities::lent_gets_from`).
    pub(super) fn loan_for_get(
        &self,
        target: Rank,
        len: usize,
        landing: Option<&(Arc<crate::request::Landing>, usize)>,
    ) -> Option<crate::transport::LentBuf> {
        let (landing, at) = landing.filter(|_| len >= self.caps(target).lent_gets_from)?;
        landing.lend(*at, len)
    }

    /// The backend's get or put (`kind`) of `loan`'s bytes at `offset` of `target`
    /// (`Transport::get_lent`, `Transport::put_lent`), counted as lent if the backend
    /// took the loan (one that it did not take goes back to its request here).
    pub(super) fn issue_lent(
        &self,
        kind: OpKind,
        target: Rank,
        offset: u64,
        loan: crate::transport::LentBuf,
        token: u64,
    ) -> std::result::Result<Issued, TransportError> {
        let (t, mut loan) = (&self.engine.transport, Some(loan));
        let issued = match kind {
            OpKind::Put => t.put_lent(self.id, target, offset, &mut loan, token),
            _ => t.get_lent(self.id, target, offset, &mut loan, token),
        };
        if issued.is_ok() && loan.is_none() {
            match kind {
                OpKind::Put => self.counters.put_lent(),
                _ => self.counters.get_lent(),
            }
        }
        issued
    }

    /// The window's counted gets: a lock of their own, taken alone or inside the state's
    /// (a get's locked path), never the other way round.
    fn lock_counted_gets(&self) -> std::sync::MutexGuard<'_, super::direct::CountedGets> {
        self.counted_gets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A counted op of this window completed (the engine's progress pass, any thread,
    /// without the window's state): a get's request gets its bytes or its error, and the
    /// op leaves its target's in-flight count. (A counted put's failure goes through
    /// the state instead: `WinState::handle_completion` defers it.)
    #[inline(always)]
    pub(crate) fn counted_op_completed(&self, token: u64, result: Result<Option<Fetched>>) {
        if token & COUNTED_GET == 0 {
            self.direct.op_completed(token as Rank);
            return;
        }
        self.counted_get_completed(token as u32, result);
    }

    /// [`counted_op_completed`](Self::counted_op_completed) of get `index`.
    #[inline(never)]
    fn counted_get_completed(&self, index: u32, result: Result<Option<Fetched>>) {
        let Some((rank, state)) = self.lock_counted_gets().finish(index) else {
            return;
        };
        // The request before the count: a flush that sees the count drop finds the data.
        state.complete(result.map(Option::unwrap_or_default));
        self.direct.op_completed(rank);
    }

    /// What a direct op's call came to: done (with what it fetched), failed, or `None`
    /// for no room in the backend now (nothing was done: the general path retries).
    #[inline(always)]
    fn direct_outcome(
        &self,
        issued: std::result::Result<Issued, TransportError>,
    ) -> Option<Result<Option<Fetched>>> {
        match issued {
            Ok(Issued::Complete(fetched)) => {
                self.counters.op_direct();
                Some(Ok(fetched))
            }
            Ok(Issued::Pending) => Some(Err(TransportError::Failed(
                "the backend left an op pending after saying its ops complete in the call".into(),
            )
            .into())),
            Err(e) => refused(e),
        }
    }

    /// A contiguous get into `dst` toward a [direct](super::direct) target, as
    /// [`put_direct`](Self::put_direct).
    #[inline(always)]
    pub(super) fn get_direct(
        &self,
        target: Rank,
        offset: u64,
        dst: &mut [u8],
    ) -> Option<Result<()>> {
        let ops = self.direct_ops(target, offset, dst.len(), false)?;
        if !(self.every_target_reads || self.caps(target).rdma_read) {
            return None;
        }
        ops.get_in_call(target, offset, dst)
            .then(|| self.counters.op_direct())
            .map(Ok)
    }

    /// A native atomic of one element toward a [direct](super::direct) target, as
    /// [`put_direct`](Self::put_direct): what it fetched.
    #[inline(always)]
    pub(super) fn atomic_direct(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
    ) -> Option<Result<Option<Fetched>>> {
        let ops = self.direct_ops(target, offset, atomic.len(), true)?;
        if !self.native_atomic(target, &atomic) {
            return None;
        }
        let issued = ops.atomic(target, offset, atomic);
        self.direct_outcome(issued)
    }

    /// As [`atomic_direct`](Self::atomic_direct) for an atomic that fetches, the previous
    /// values landing in `old` ([`WindowOps::atomic_into`](crate::transport::WindowOps::atomic_into)).
    #[inline(always)]
    pub(super) fn atomic_direct_into(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> Option<Result<()>> {
        let ops = self.direct_ops(target, offset, atomic.len(), true)?;
        if !self.native_atomic(target, &atomic) {
            return None;
        }
        // Not done in the call (an error among them): the general path asks again and
        // reports it.
        if !ops.atomic_in_call(target, offset, atomic, old) {
            return None;
        }
        self.counters.op_direct();
        Some(Ok(()))
    }

    /// Whether the backend does `atomic` natively toward `target`.
    #[inline(always)]
    fn native_atomic(&self, target: Rank, atomic: &NativeAtomic<'_>) -> bool {
        let caps = self.caps(target);
        match *atomic {
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                ..
            } => {
                // At most max_atomic_elements elements, counted without a division (on
                // the path of every atomic): element sizes are powers of two.
                debug_assert!(datatype.size().is_power_of_two());
                caps.has_atomic(op, datatype)
                    && operand.len() >> datatype.size().trailing_zeros() <= caps.max_atomic_elements
            }
            NativeAtomic::CompareAndSwap { datatype, .. } => caps.has_compare_and_swap(datatype),
        }
    }

    /// A native op toward a [direct](super::direct) target: the backend's call is its
    /// issue and its completion. `None`: the backend had no room now (nothing was
    /// done); the locked path retries it.
    #[inline(always)]
    fn post_direct(&self, d: &OpDesc<'_>) -> Option<Result<Posted>> {
        let ops = self.ops.as_deref()?;
        if let (OpKind::Get, Some(dst)) = (d.kind, &d.into) {
            // Into the caller's buffer, no copy of ours.
            let mut dst = dst.borrow_mut();
            let e = d.extent;
            let done = if e.count > 1 {
                ops.get_blocks(d.target, e.offset, e.stride, e.block as usize, &mut dst)
            } else {
                ops.get_into(d.target, e.offset, &mut dst)
            };
            return match done {
                Ok(true) => {
                    self.counters.op_direct();
                    Some(Ok(Posted::Done(None)))
                }
                Ok(false) => None,
                Err(e) => Some(Err(e.into())),
            };
        }
        // The token names nothing: no completion of a direct op ever comes. (A notified put
        // whose notice the transport carries never comes here: `post_notified`.)
        let issued = native_call_desc(self, d, untracked_token(self.id, d.target), false, None);
        Some(self.direct_outcome(issued)?.map(|data| {
            if let (Some(dst), Some(bytes)) = (&d.into, &data) {
                let mut dst = dst.borrow_mut();
                if bytes.len() == dst.len() {
                    rma_sync::copy::copy_slice(&mut dst, bytes);
                    return Posted::Done(None);
                }
            }
            Posted::Done(d.wants_result.then(|| data.unwrap_or_default()))
        }))
    }

    /// An op that goes as an active message must fit in one (its request, or its reply
    /// for a get): what does not is refused here, before anything is sent or allocated.
    pub(super) fn check_active_message(&self, target: Rank, extent: Extent) -> Result<()> {
        let max = self.caps(target).max_message as u64;
        if extent.bytes().saturating_add(64) > max {
            return Err(TransportError::Unsupported(
                "active message larger than the transport carries",
            )
            .into());
        }
        Ok(())
    }

    pub(super) fn enter_sync(&self, st: &mut WinState, call: &'static str) -> Result<()> {
        if let Some(other) = st.sync_call {
            let _ = other;
            return Err(UsageError::ConcurrentSync { call }.into());
        }
        st.sync_call = Some(call);
        Ok(())
    }

    pub(super) fn leave_sync(&self) {
        self.lock_state().sync_call = None;
    }

    /// Says on an error which call raised it, on which rank and window (the error path
    /// only: kept out of line, off the hot path).
    #[cold]
    #[inline(never)]
    pub(super) fn raised(&self, call: &'static str, e: Error) -> Error {
        let e = self.engine.explained(e);
        let e = match &self.group {
            Some(g) => e.map_usage_target(|world| g.rank_of(world).unwrap_or(world)),
            None => e,
        };
        e.raised_in(call, self.engine.rank, Some(self.id))
    }

    /// Runs a sync call with the thread rules enforced and the call traced.
    ///
    /// The call's body gets the state as held here to enter the call, and gives it back
    /// held when it succeeds, where the call's end is recorded: a call that needs one
    /// hold of the state for its work (a fence that arrives last, a complete of posted
    /// targets) takes one in all, not three.
    pub(super) fn sync_call<'s, R>(
        &'s self,
        call: &'static str,
        f: impl FnOnce(StateGuard<'s, WinState>) -> Result<(R, StateGuard<'s, WinState>)>,
    ) -> Result<R> {
        self.engine.activity.bump();
        let mut st = self.lock_state();
        self.enter_sync(&mut st, call)?;
        // Every call through here ends or changes an epoch: no op goes past the state
        // until the new epoch's first op finds its target granted.
        self.direct.close_all();
        let _span = sync_span!(call, win = self.id);
        match f(st) {
            Ok((r, mut st)) => {
                st.sync_call = None;
                Ok(r)
            }
            Err(e) => {
                // Misuse changes nothing; any other failure (a peer dead or gone, a
                // transport error, a timeout) must not leave the epoch half closed.
                if !e.is_usage() {
                    self.close_after_failure(call, &e);
                }
                self.leave_sync();
                Err(e)
            }
        }
    }

    /// After a synchronization call failed for a reason other than misuse: what this
    /// rank holds is released (native lock words it took), every op still queued or
    /// under way fails with the error (no request waits forever), and the window has no
    /// epoch open, so that it can be freed or dropped. Locks taken by message stay with
    /// their target until it learns this window is gone (its drop, or this rank's death
    /// or departure, revokes them there).
    pub(super) fn close_after_failure(&self, call: &'static str, err: &Error) {
        tracing::warn!(call, win = self.id, error = %err, "synchronization failed: epoch closed");
        let mut st = self.lock_state();
        self.direct.close_all();
        st.release_native_locks(self);
        for rank in st.table.ranks() {
            st.abandon_target(self, rank, err);
        }
        st.locks = LockTable::default();
        if call == "fence" {
            st.barrier = None;
        }
        st.epoch = WindowEpoch::Unset;
        st.restoring = false;
    }
}

/// What a direct op the backend refused comes to: no room now (`Busy`) is `None`, nothing
/// was done and the locked path takes the op; anything else is the op's error.
#[inline(always)]
fn refused<T>(e: TransportError) -> Option<Result<T>> {
    match e {
        TransportError::Busy => None,
        e => Some(Err(e.into())),
    }
}
