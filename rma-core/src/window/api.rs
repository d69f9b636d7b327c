//! The public window: [`Window`], its operations and synchronization calls (each
//! checked, then handed to [`WindowShared`]), [`GetInto`], [`FreeError`] and dropping a
//! window.

use super::*;

/// A window of elements of type `T`, spanning every rank of the engine.
///
/// Operations are methods of the window; each checks at run time that an epoch grants
/// access to its target and that the target range lies in the target's window, and
/// returns a typed [`UsageError`] otherwise. Origin data is only borrowed during the
/// call (copied if the op must wait); fetched data is only reachable through a
/// [`Request`] once complete. A window is `Send + Sync`: operations, fences and flushes
/// may come from several threads (seed 004, "RMA + threads").
///
/// Fence epochs:
/// ```
/// use rma_core::{sim, Assert};
/// sim::run(3, sim::Profile::ActiveMessages, 7, |engine| {
///     let (me, n) = (engine.rank(), engine.size() as u32);
///     let win = engine.allocate::<u64>(n as usize)?;
///     win.fence(Assert::NOPRECEDE)?;
///     for t in 0..n {
///         win.put(&[me as u64 + 100], t, me as u64)?; // my slot in every window
///     }
///     win.fence(Assert::NOSUCCEED)?;
///     assert_eq!(win.local_to_vec(), vec![100, 101, 102]);
///     win.free()?;
///     Ok(())
/// }).unwrap();
/// ```
pub struct Window<T: Element> {
    pub(crate) shared: Arc<WindowShared>,
    /// A view of another window ([`Window::elements`]): dropping it leaves the window.
    pub(crate) view: bool,
    pub(crate) _elem: PhantomData<fn() -> T>,
}

impl<T: Element> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("id", &self.shared.id)
            .field("kind", &self.shared.kind)
            .finish()
    }
}

pub(super) fn to_vec<T: Element>(bytes: Fetched) -> Vec<T> {
    bytemuck::pod_collect_to_vec(&bytes)
}

pub(super) fn to_one<T: Element>(bytes: Fetched) -> T {
    // Replies are checked against their request's length when they arrive; a short one
    // (never expected here) reads as zero rather than panicking.
    if let Fetched::Inline { len, bytes } = &bytes {
        if usize::from(*len) == std::mem::size_of::<T>() {
            // The usual case (a fetching atomic's element, inline): one unaligned read.
            return bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<T>()]);
        }
    }
    let mut one = T::zeroed();
    let out: &mut [u8] = bytemuck::bytes_of_mut(&mut one);
    let n = out.len().min(bytes.len());
    out[..n].copy_from_slice(&bytes[..n]);
    one
}

impl Window<u8> {
    /// This window of bytes seen as a window of `E`: the same window (its epochs,
    /// displacements in its displacement unit, bounds), whose operations carry elements
    /// of type `E`. This is how MPI's interface, whose windows are bytes and whose
    /// operations name their datatype, runs on typed operations.
    ///
    /// ```
    /// use rma_core::{sim, AccOp, Assert};
    /// sim::run(2, sim::Profile::ActiveMessages, 3, |engine| {
    ///     let win = engine.allocate::<u8>(16)?; // bytes; displacements in bytes
    ///     win.fence(Assert::NOPRECEDE)?;
    ///     win.elements::<u32>().accumulate(&[1, 2], AccOp::Sum, 0, 8)?;
    ///     win.fence(Assert::NOSUCCEED)?;
    ///     if engine.rank() == 0 {
    ///         let mut two = [0u32; 2];
    ///         win.elements::<u32>().read_local(2, &mut two)?; // elements 2, 3: bytes 8..16
    ///         assert_eq!(two, [2, 4]);
    ///     }
    ///     win.free()?;
    ///     Ok(())
    /// }).unwrap();
    /// ```
    pub fn elements<E: Element>(&self) -> Elements<E> {
        Elements(Window {
            shared: self.shared.clone(),
            view: true,
            _elem: PhantomData,
        })
    }
}

/// A window of bytes seen as a window of `E` ([`Window::elements`]): it has every
/// method of [`Window<E>`] but [`free`](Window::free) (the window is the byte window's),
/// and dropping it leaves the window as it was.
pub struct Elements<E: Element>(Window<E>);

impl<E: Element> std::ops::Deref for Elements<E> {
    type Target = Window<E>;
    fn deref(&self) -> &Window<E> {
        &self.0
    }
}

impl<E: Element> std::fmt::Debug for Elements<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Elements").field(&self.0).finish()
    }
}

/// `raised`'s work for a call toward `target` whose direct path stays inline in the
/// caller: refused while the memory is lent (a LocalGuard), `target` translated to its
/// World rank for `body`, an error named after `call`. A macro rather than `raised`'s
/// closure: LLVM kept those closures out of line, and what they returned through the
/// stack (a get's `GetInto`, a fetch_and_op's request) the caller read back in other
/// widths than written, a store-forwarding stall per op (perf, librma-mpi's MPI_Get:
/// 29% of its closure's samples on that copy; osu_fop_latency: over half the loop's).
macro_rules! toward_target {
    ($w:expr, $call:literal, $target:expr, |$t:ident| $body:expr) => {{
        if $w.shared.local_access.load(Ordering::Relaxed) {
            return Err($w.local_access_refused($call));
        }
        let outcome = match $w.shared.world($target) {
            Ok($t) => $body,
            Err(e) => Err(e),
        };
        outcome.map_err(|e| $w.shared.raised($call, e))
    }};
}
pub(super) use toward_target;

impl<T: Element> Window<T> {
    pub(super) const SIZE: usize = std::mem::size_of::<T>();

    /// Runs the body of the public call `call`, saying on its error which call, rank and
    /// window raised it.
    #[inline(always)]
    pub(super) fn raised<R>(
        &self,
        call: &'static str,
        body: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        if self.shared.local_access.load(Ordering::Relaxed) {
            return Err(self.local_access_refused(call));
        }
        body().map_err(|e| self.shared.raised(call, e))
    }

    /// The error of a call made while this process lends the window's memory as a slice
    /// (a LocalGuard): any call, from any thread, could touch it underneath.
    #[cold]
    #[inline(never)]
    pub(super) fn local_access_refused(&self, call: &'static str) -> Error {
        self.shared
            .raised(call, UsageError::LocalAccess { call }.into())
    }

    pub(super) fn check_op(op: AccOp) -> Result<()> {
        if crate::datatype::computable(op, T::DATATYPE) {
            Ok(())
        } else {
            Err(UsageError::OpNotForType {
                op,
                datatype: T::DATATYPE,
            }
            .into())
        }
    }

    /// The pieces an op goes in when it travels as active messages and one message
    /// cannot carry it (request, or reply for a get): each piece a run of whole
    /// elements (so accumulates stay atomic per element, as MPI asks), whole blocks of
    /// the target layout where a block fits, else parts of one block. `None`: one
    /// message (or the native path) takes it whole.
    #[inline]
    fn pieces(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
    ) -> Result<Option<Vec<Piece>>> {
        self.pieces_of(kind, op, target, disp, layout, extent, true)
    }

    /// As [`pieces`](Self::pieces), for an op that may go natively only if
    /// `may_be_native` (a notified op whose counter cannot follow natively goes as
    /// messages, in pieces if large).
    #[allow(clippy::too_many_arguments)] // pieces' arguments and the one that differs
    #[inline]
    pub(super) fn pieces_of(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
        may_be_native: bool,
    ) -> Result<Option<Vec<Piece>>> {
        if extent.bytes() <= SPLIT_ABOVE {
            return Ok(None);
        }
        self.pieces_of_large(kind, op, target, disp, layout, extent, may_be_native)
    }

    #[allow(clippy::too_many_arguments)] // as pieces_of
    #[inline(never)]
    fn pieces_of_large(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
        may_be_native: bool,
    ) -> Result<Option<Vec<Piece>>> {
        let w = &self.shared;
        let max = w.caps(target).max_message as u64;
        let native = may_be_native && w.native_allowed(kind, op, T::DATATYPE, target, extent);
        if native || extent.bytes().saturating_add(64) <= max {
            return Ok(None);
        }
        if w.kind == WindowKind::Dynamic && extent.bytes() > DYNAMIC_SPLIT_MAX {
            // Only the target knows its regions: a bound here, instead of millions of
            // pieces for a count no region holds.
            return Err(UsageError::TooLarge {
                what: "an op on a dynamic window past 1 GiB",
            }
            .into());
        }
        // Room for the header, token, op and extent, with a margin.
        let per_piece = (max.saturating_sub(128) as usize / Self::SIZE).max(1);
        let disp_unit = match w.kind {
            WindowKind::Dynamic => 1,
            _ => w.remote.get(target).disp_unit.max(1) as usize,
        };
        if !Self::SIZE.is_multiple_of(disp_unit) {
            // A piece could not start on a displacement: refuse as before.
            return Err(TransportError::Unsupported(
                "active message larger than the transport carries",
            )
            .into());
        }
        let step = (Self::SIZE / disp_unit) as u64;
        let at = |elements: usize| -> Result<u64> {
            (elements as u64)
                .checked_mul(step)
                .and_then(|o| disp.checked_add(o))
                .ok_or_else(|| UsageError::TooLarge { what: "the layout" }.into())
        };
        let mut pieces = Vec::new();
        if layout.block <= per_piece {
            let blocks = (per_piece / layout.block.max(1)).max(1);
            let mut i = 0;
            while i < layout.count {
                let k = blocks.min(layout.count - i);
                let sub = if k == 1 {
                    Layout::contiguous(layout.block)
                } else {
                    Layout::strided(k, layout.block, layout.stride)
                };
                pieces.push(Piece {
                    data_at: i * layout.block,
                    layout: sub,
                    disp: at(i * layout.stride)?,
                });
                i += k;
            }
        } else {
            for i in 0..layout.count {
                let mut j = 0;
                while j < layout.block {
                    let n = per_piece.min(layout.block - j);
                    pieces.push(Piece {
                        data_at: i * layout.block + j,
                        layout: Layout::contiguous(n),
                        disp: at(i * layout.stride + j)?,
                    });
                    j += n;
                }
            }
        }
        w.counters.split(pieces.len());
        w.engine.stats.split(pieces.len());
        Ok(Some(pieces))
    }

    /// Posts the pieces of an op (see [`pieces`](Self::pieces)) with `packed`'s elements
    /// (none for a get); the request of the whole completes when every piece has.
    fn post_pieces(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        pieces: Vec<Piece>,
        packed: &[T],
        wants_result: bool,
    ) -> Result<Vec<Request<Fetched>>> {
        self.post_pieces_inner(kind, op, target, pieces, packed, wants_result, None)
    }

    /// As [`post_pieces`](Self::post_pieces), the last piece notified: the pieces go as
    /// messages (the caller found no native path for the notification), which the target
    /// applies in order, so the count comes after all of them.
    #[allow(clippy::too_many_arguments)] // post_pieces' arguments and the counter
    pub(super) fn post_pieces_notified(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        pieces: Vec<Piece>,
        packed: &[T],
        wants_result: bool,
        notify: super::notify::NotifyDesc<'_>,
    ) -> Result<Vec<Request<Fetched>>> {
        self.post_pieces_inner(kind, op, target, pieces, packed, wants_result, Some(notify))
    }

    #[allow(clippy::too_many_arguments)] // as post_pieces_notified
    fn post_pieces_inner(
        &self,
        kind: OpKind,
        op: Option<AccOp>,
        target: Rank,
        pieces: Vec<Piece>,
        packed: &[T],
        wants_result: bool,
        notify: Option<super::notify::NotifyDesc<'_>>,
    ) -> Result<Vec<Request<Fetched>>> {
        let mut requests = Vec::with_capacity(pieces.len());
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.into_iter().enumerate() {
            let extent = self
                .shared
                .extent(target, piece.disp, piece.layout, Self::SIZE)?;
            let data: &[T] = if packed.is_empty() {
                &[]
            } else {
                &packed[piece.data_at..piece.data_at + piece.layout.elements()]
            };
            let posted = self.shared.post(OpDesc {
                // Every piece as a notified op (none native: see `post`), the last one
                // counting.
                notify: notify.map(|n| super::notify::NotifyDesc {
                    counts: i == last,
                    ..n
                }),
                ..Self::desc(
                    kind,
                    target,
                    extent,
                    op,
                    bytemuck::cast_slice(data),
                    wants_result,
                )
            })?;
            if wants_result {
                requests.push(self.request(posted, target, |bytes| bytes));
            }
        }
        Ok(requests)
    }

    /// The descriptor of an op on elements of type `T`, with no buffer for a get to land
    /// in.
    #[inline]
    pub(super) fn desc<'a>(
        kind: OpKind,
        target: Rank,
        extent: Extent,
        op: Option<AccOp>,
        data: &'a [u8],
        wants_result: bool,
    ) -> OpDesc<'a> {
        OpDesc {
            kind,
            target,
            extent,
            op,
            datatype: T::DATATYPE,
            data,
            wants_result,
            into: None,
            notify: None,
            landing: None,
        }
    }

    #[inline]
    pub(super) fn request<R: 'static>(
        &self,
        posted: Posted,
        target: Rank,
        convert: fn(Fetched) -> R,
    ) -> Request<R> {
        match posted {
            // Complete in the call: the value now (a fetch_and_op's old value; a get's
            // vector, allocated now instead of at the wait).
            Posted::Done(data) => Request::value(convert(data.unwrap_or_default())),
            Posted::Later(Some(state)) => Request::new(state, self.shared.clone(), target, convert),
            Posted::Later(None) => Request::ready(Fetched::default(), convert),
        }
    }

    /// Whether strided ops toward `target` ([`put_strided`](Self::put_strided),
    /// [`get_strided`](Self::get_strided), [`accumulate_strided`](Self::accumulate_strided))
    /// run natively, every block in the op's own call (shared memory): one strided op is
    /// then cheaper than one op per block, whatever the blocks' size. Elsewhere a strided
    /// op travels as active messages (its blocks packed), which beats one native op per
    /// block for small blocks only.
    pub fn strided_is_native(&self, target: Rank) -> bool {
        self.shared
            .world(target)
            .is_ok_and(|t| self.shared.strided_native(t))
    }

    /// The window's kind.
    pub fn kind(&self) -> WindowKind {
        self.shared.kind
    }

    /// This process's rank in the window's communicator (the numbering of every target
    /// and group the window takes).
    pub fn rank(&self) -> Rank {
        self.shared.member_index() as Rank
    }

    /// Number of ranks in the window's communicator.
    pub fn size(&self) -> Rank {
        self.shared.member_count() as Rank
    }

    /// An accumulate of `operand` (packed elements of `T`) toward a direct target, fetching
    /// the previous values or not ([`WindowShared::atomic_direct`]).
    #[inline(always)]
    fn accumulate_direct(
        &self,
        operand: &[u8],
        op: AccOp,
        target: Rank,
        extent: Extent,
        fetch: bool,
    ) -> Option<Result<Option<Fetched>>> {
        let atomic = NativeAtomic::Accumulate {
            op,
            datatype: T::DATATYPE,
            operand,
            fetch,
        };
        self.shared.atomic_direct(target, extent.offset, atomic)
    }

    /// An accumulate that fetches nothing toward a direct target. A short one goes
    /// through [`WindowShared::atomic_direct_into`] with scratch space on the stack for
    /// the previous values the backend's atomics produce anyway: no [`Fetched`] result is
    /// built and carried back only to be dropped (callgrind, acc + flush of 8 bytes on
    /// shared memory: 592 instructions a call before, 564 after).
    #[inline(always)]
    fn accumulate_direct_discarding(
        &self,
        operand: &[u8],
        op: AccOp,
        target: Rank,
        extent: Extent,
    ) -> Option<Result<()>> {
        const SCRATCH: usize = 64;
        if operand.len() <= SCRATCH {
            let mut scratch = [0u8; SCRATCH];
            let atomic = NativeAtomic::Accumulate {
                op,
                datatype: T::DATATYPE,
                operand,
                fetch: false,
            };
            let old = &mut scratch[..operand.len()];
            if let Some(done) = self
                .shared
                .atomic_direct_into(target, extent.offset, atomic, old)
            {
                return Some(done);
            }
        }
        // Longer, or a backend without `atomic_into`.
        self.accumulate_direct(operand, op, target, extent, false)
            .map(|r| r.map(drop))
    }

    /// An accumulate of `operand` toward a direct target whose previous values land in
    /// `old` ([`WindowShared::atomic_direct_into`]).
    #[inline(always)]
    fn fetch_direct(
        &self,
        operand: &[u8],
        op: AccOp,
        target: Rank,
        extent: Extent,
        old: &mut [u8],
    ) -> Option<Result<()>> {
        let atomic = NativeAtomic::Accumulate {
            op,
            datatype: T::DATATYPE,
            operand,
            fetch: true,
        };
        self.shared
            .atomic_direct_into(target, extent.offset, atomic, old)
    }

    /// Puts `data` at element displacement `disp` of `target`'s window.
    #[inline(always)]
    pub fn put(&self, data: &[T], target: Rank, disp: u64) -> Result<()> {
        toward_target!(self, "put", target, |target| self
            .put_contiguous(data, target, disp))
    }

    /// [`put`](Self::put) toward World rank `target`: the direct path here, the rest out
    /// of line.
    #[inline(always)]
    fn put_contiguous(&self, data: &[T], target: Rank, disp: u64) -> Result<()> {
        // Contiguous on both sides: nothing to gather.
        let layout = Layout::contiguous(data.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(done) =
            (self.shared).put_direct(target, extent.offset, bytemuck::cast_slice(data))
        {
            return done;
        }
        self.post_contiguous_put(data, target, disp, extent)
    }

    /// Posts a put of the contiguous `data` to `extent` (at `disp`) of World rank
    /// `target`: in pieces where one op cannot carry it.
    #[inline(never)]
    pub(super) fn post_contiguous_put(
        &self,
        data: &[T],
        target: Rank,
        disp: u64,
        extent: Extent,
    ) -> Result<()> {
        // A network's direct put (see `direct`).
        if let Some(done) =
            (self.shared).put_counted(target, extent.offset, bytemuck::cast_slice(data))
        {
            return done;
        }
        let layout = Layout::contiguous(data.len());
        if let Some(p) = self.pieces(OpKind::Put, None, target, disp, layout, extent)? {
            return self
                .post_pieces(OpKind::Put, None, target, p, data, false)
                .map(drop);
        }
        self.post_put(data, target, extent)
    }

    /// Posts a put of the packed `data` to `extent` at `target`.
    #[inline]
    fn post_put(&self, data: &[T], target: Rank, extent: Extent) -> Result<()> {
        self.shared
            .post(Self::desc(
                OpKind::Put,
                target,
                extent,
                None,
                bytemuck::cast_slice(data),
                false,
            ))
            .map(drop)
    }

    /// Puts the elements `origin` selects from `data` into the elements `target_layout`
    /// selects at `disp` (both layouts must describe the same number of elements).
    pub fn put_strided(
        &self,
        data: &[T],
        origin: Layout,
        target: Rank,
        disp: u64,
        target_layout: Layout,
    ) -> Result<()> {
        self.raised("put_strided", || {
            let target = self.shared.world(target)?;
            let packed = gather(data, origin, target_layout)?;
            let extent = self
                .shared
                .extent(target, disp, target_layout, Self::SIZE)?;
            if let Some(p) = self.pieces(OpKind::Put, None, target, disp, target_layout, extent)? {
                return self
                    .post_pieces(OpKind::Put, None, target, p, &packed, false)
                    .map(drop);
            }
            self.post_put(&packed, target, extent)
        })
    }

    /// A put whose local completion can be waited on (MPI_Rput).
    pub fn rput(&self, data: &[T], target: Rank, disp: u64) -> Result<Request<()>> {
        self.raised("rput", || {
            let target = self.shared.world(target)?;
            let layout = Layout::contiguous(data.len());
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            if let Some(p) = self.pieces(OpKind::Put, None, target, disp, layout, extent)? {
                // One request for the whole: complete when every piece is.
                let parts = self.post_pieces(OpKind::Put, None, target, p, data, true)?;
                return Ok(Request::joined(parts, |_| ()));
            }
            let posted = self.shared.post(Self::desc(
                OpKind::Put,
                target,
                extent,
                None,
                bytemuck::cast_slice(data),
                true,
            ))?;
            Ok(self.request(posted, target, |_| ()))
        })
    }

    /// Gets `count` elements at `disp` of `target`'s window. The data is the request's
    /// value; the request completes no later than the epoch's next flush or end. (MPI_Get
    /// and MPI_Rget in one: the request is what MPI_Rget returns, and a get with no
    /// request to wait on would have nowhere to put its data.)
    pub fn get(&self, target: Rank, disp: u64, count: usize) -> Result<Request<Vec<T>>> {
        self.raised("get", || {
            self.get_strided(target, disp, Layout::contiguous(count))
        })
    }

    /// Gets the elements `layout` selects at `disp`, packed.
    pub fn get_strided(&self, target: Rank, disp: u64, layout: Layout) -> Result<Request<Vec<T>>> {
        self.raised("get_strided", || {
            let target = self.shared.world(target)?;
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            if let Some(p) = self.pieces(OpKind::Get, None, target, disp, layout, extent)? {
                let parts = self.post_pieces(OpKind::Get, None, target, p, &[], true)?;
                return Ok(Request::joined(parts, to_vec::<T>));
            }
            // Contiguous gets land straight in the result where the backend completes them in
            // the call: one buffer, one copy.
            let mut out = if extent.count <= 1 {
                zeroed_vec::<T>(layout.elements())?
            } else {
                Vec::new()
            };
            let into = (extent.count <= 1)
                .then(|| std::cell::RefCell::new(bytemuck::cast_slice_mut(out.as_mut_slice())));
            let posted = self.shared.post(OpDesc {
                into,
                ..Self::desc(OpKind::Get, target, extent, None, &[], true)
            })?;
            Ok(match posted {
                Posted::Done(None) => Request::value(out),
                other => self.request(other, target, to_vec::<T>),
            })
        })
    }

    /// Gets `buf.len()` elements at `disp` of `target`'s window into `buf`. The buffer
    /// stays borrowed by the returned [`GetInto`] until [`GetInto::wait`], so it cannot be
    /// read before the data is there. Where the backend completes the get in the call
    /// (shared memory) the data lands in `buf` directly, with no copy of ours.
    #[inline(always)]
    pub fn get_into<'b>(
        &self,
        target: Rank,
        disp: u64,
        buf: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        toward_target!(self, "get_into", target, |target| self.get_layout_into(
            target,
            disp,
            Layout::contiguous(buf.len()),
            buf
        ))
    }

    /// Gets `buf.len()` elements at `disp` of `target`'s window into `buf`, which the
    /// request owns until its [`wait`](Request::wait) hands it back, the data in it. As
    /// [`get_into`](Self::get_into), with one difference that matters where gets travel
    /// as messages (a backend or target with no native read, `RMA_NATIVE=0`): each
    /// reply is copied into `buf` as it arrives, where `get_into`'s wait, not the
    /// reply, can reach the caller's borrowed buffer (its replies wait in their
    /// packets, and a burst's are copied out after the last one is in). Where the
    /// backend completes the get in the call (shared memory) the data lands in `buf`
    /// then.
    ///
    /// ```
    /// # rma_core::sim::run(2, rma_core::sim::Profile::ActiveMessages, 1, |engine| {
    /// let win = engine.allocate::<u32>(1024)?;
    /// let peer = (engine.rank() + 1) % 2;
    /// win.lock_all(rma_core::Assert::NONE)?;
    /// win.put(&vec![engine.rank(); 1024], engine.rank(), 0)?;
    /// win.flush_all()?;
    /// engine.barrier()?;
    /// let got = win.get_owned(peer, 0, vec![0u32; 1024])?;
    /// win.flush(peer)?;
    /// assert_eq!(got.wait()?, vec![peer; 1024]);
    /// win.unlock_all()?;
    /// engine.barrier()?;
    /// win.free()?;
    /// # Ok(())
    /// # }).unwrap();
    /// ```
    pub fn get_owned(&self, target: Rank, disp: u64, buf: Vec<T>) -> Result<Request<Vec<T>>> {
        let elements = buf.len();
        self.raised("get_owned", || self.get_landed(target, disp, buf, elements))
    }

    /// Gets whole elements at `disp` of `target`'s window into `buf`, as many as its
    /// bytes hold, as [`get_owned`](Self::get_owned) does into a vector: the request holds
    /// the buffer until its [`wait`](Request::wait) hands it back, the data in it. For
    /// buffers of other kinds, such as memory Rust does not own that a [`GetBuffer`]
    /// implementation vouches for (librma-mpi's MPI_Get into the application's origin
    /// buffer). Where the backend reads natively into lent buffers
    /// ([`Capabilities::lent_gets_from`](crate::transport::Capabilities::lent_gets_from)),
    /// many such gets stay in flight, none copied.
    ///
    /// ```
    /// # rma_core::sim::run(2, rma_core::sim::Profile::Rdma, 1, |engine| {
    /// /// Bytes on the heap, a get's to fill.
    /// struct Landing(Box<[u8]>);
    /// impl rma_core::GetBuffer for Landing {
    ///     fn bytes_mut(&mut self) -> &mut [u8] {
    ///         &mut self.0
    ///     }
    /// }
    /// let win = engine.allocate::<u64>(512)?;
    /// let peer = (engine.rank() + 1) % 2;
    /// win.lock_all(rma_core::Assert::NONE)?;
    /// win.put(&vec![u64::from(engine.rank()); 512], engine.rank(), 0)?;
    /// win.flush_all()?;
    /// engine.barrier()?;
    /// let got = win.get_into_buffer(peer, 0, Landing(vec![0; 4096].into()))?;
    /// win.flush(peer)?;
    /// let Landing(bytes) = got.wait()?;
    /// assert!(bytes.chunks(8).all(|w| w == u64::from(peer).to_ne_bytes()));
    /// win.unlock_all()?;
    /// engine.barrier()?;
    /// win.free()?;
    /// # Ok(())
    /// # }).unwrap();
    /// ```
    pub fn get_into_buffer<B: GetBuffer>(
        &self,
        target: Rank,
        disp: u64,
        mut buf: B,
    ) -> Result<Request<B>> {
        self.raised("get_into_buffer", || {
            let bytes = buf.bytes_mut().len();
            if !bytes.is_multiple_of(Self::SIZE) {
                return Err(UsageError::BadLayout.into());
            }
            self.get_landed(target, disp, buf, bytes / Self::SIZE)
        })
    }

    /// Puts the bytes of `buf` (whole elements) at `disp` of `target`'s window, the
    /// request holding `buf` until its [`wait`](Request::wait) hands it back, once the
    /// put is complete at the origin (MPI_Rput's local completion); the epoch's flush or
    /// end completes it at the target, as any put. Where the backend writes natively
    /// from lent buffers ([`Capabilities::lent_puts_from`](crate::transport::Capabilities::lent_puts_from):
    /// libfabric, from 16 KiB), the data goes straight from `buf`, many such puts in
    /// flight, none copied and none waiting in its call; elsewhere the put is an ordinary
    /// one and the request is done at once.
    ///
    /// ```
    /// # rma_core::sim::run(2, rma_core::sim::Profile::Rdma, 1, |engine| {
    /// let win = engine.allocate::<u64>(512)?;
    /// let peer = (engine.rank() + 1) % 2;
    /// win.lock_all(rma_core::Assert::NONE)?;
    /// let sent = win.put_from_buffer(vec![u64::from(engine.rank()); 512], peer, 0)?;
    /// win.flush(peer)?;
    /// let back: Vec<u64> = sent.wait()?; // the buffer, to fill again
    /// assert_eq!(back.len(), 512);
    /// engine.barrier()?;
    /// assert_eq!(win.local_to_vec(), vec![u64::from(peer); 512]);
    /// win.unlock_all()?;
    /// engine.barrier()?;
    /// win.free()?;
    /// # Ok(())
    /// # }).unwrap();
    /// ```
    pub fn put_from_buffer<B: PutBuffer>(
        &self,
        buf: B,
        target: Rank,
        disp: u64,
    ) -> Result<Request<B>> {
        self.raised("put_from_buffer", || {
            let target = self.shared.world(target)?;
            let bytes = buf.bytes().len();
            if !bytes.is_multiple_of(Self::SIZE) {
                return Err(UsageError::BadLayout.into());
            }
            let layout = Layout::contiguous(bytes / Self::SIZE);
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            let lend = bytes >= self.shared.caps(target).lent_puts_from
                && self
                    .shared
                    .native_allowed(OpKind::Put, None, DataType::U8, target, extent);
            if !lend {
                // An ordinary put: its bytes taken in the call (copied, sent, or written),
                // the buffer free again.
                let data = buf.bytes();
                if let Some(p) = self.pieces(OpKind::Put, None, target, disp, layout, extent)? {
                    // As elements (copied where the bytes are not aligned for them).
                    let copied: Vec<T>;
                    let elements: &[T] = match bytemuck::try_cast_slice(data) {
                        Ok(elements) => elements,
                        Err(_) => {
                            copied = bytemuck::pod_collect_to_vec(data);
                            &copied
                        }
                    };
                    self.post_pieces(OpKind::Put, None, target, p, elements, false)?;
                } else {
                    self.shared
                        .post(Self::desc(OpKind::Put, target, extent, None, data, false))?;
                }
                return Ok(Request::value(buf));
            }
            let held = crate::request::Held::Put(Box::new(buf));
            let landing = Arc::new(crate::request::Landing::new(held));
            let posted = self.shared.post(OpDesc {
                landing: Some((Arc::clone(&landing), 0)),
                ..Self::desc(OpKind::Put, target, extent, None, &[], true)
            })?;
            let part = (self.request(posted, target, |bytes| bytes), 0);
            Ok(Request::landed(vec![part], landing))
        })
    }

    /// A get of `elements` at `disp` of `target` into `buf`, which its request holds
    /// until the wait: in the call where the backend completes it there (unless it reads
    /// this size into lent buffers), else landing in `buf` (lent to the backend, or the
    /// replies copied in as they arrive).
    fn get_landed<B: GetBuffer>(
        &self,
        target: Rank,
        disp: u64,
        mut buf: B,
        elements: usize,
    ) -> Result<Request<B>> {
        let target = self.shared.world(target)?;
        let layout = Layout::contiguous(elements);
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        let dst = buf.bytes_mut();
        // A get the backend would complete in the call, unless it reads this size into
        // the buffer lent to it, with others in flight (`lent_gets_from`).
        let lent = dst.len() >= self.shared.caps(target).lent_gets_from;
        if let Some(done) = (!lent)
            .then(|| self.shared.get_direct(target, extent.offset, dst))
            .flatten()
        {
            return done.map(|()| Request::value(buf));
        }
        let landing = Arc::new(crate::request::Landing::new(crate::request::Held::Get(
            Box::new(buf),
        )));
        let mut parts = Vec::new();
        match self.pieces(OpKind::Get, None, target, disp, layout, extent)? {
            Some(pieces) => {
                for piece in pieces {
                    let at = piece.data_at * Self::SIZE;
                    let extent =
                        self.shared
                            .extent(target, piece.disp, piece.layout, Self::SIZE)?;
                    let posted = self.shared.post(OpDesc {
                        landing: Some((Arc::clone(&landing), at)),
                        ..Self::desc(OpKind::Get, target, extent, None, &[], true)
                    })?;
                    parts.push((self.request(posted, target, |bytes| bytes), at));
                }
            }
            None => {
                let posted = self.shared.post(OpDesc {
                    landing: Some((Arc::clone(&landing), 0)),
                    ..Self::desc(OpKind::Get, target, extent, None, &[], true)
                })?;
                parts.push((self.request(posted, target, |bytes| bytes), 0));
            }
        }
        Ok(Request::landed(parts, landing))
    }

    /// Gets the elements `layout` selects at `disp` of `target`'s window into `buf`,
    /// packed (`buf.len()` must be the layout's element count), as
    /// [`get_into`](Self::get_into) does for a contiguous range: where the backend completes
    /// the get in the call (shared memory) every block lands in `buf` directly.
    pub fn get_strided_into<'b>(
        &self,
        target: Rank,
        disp: u64,
        layout: Layout,
        buf: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        self.raised("get_strided_into", || {
            if layout.elements() != buf.len() {
                return Err(UsageError::BadLayout.into());
            }
            let target = self.shared.world(target)?;
            self.get_layout_into(target, disp, layout, buf)
        })
    }

    /// A get of `layout` at `disp` of World rank `target` into `buf` (its element count):
    /// direct where it can be, in pieces where one message cannot carry it. The direct
    /// path is inlined into the caller: a `GetInto` built out of line came back through
    /// the stack in pieces the caller read whole (store-forwarding stalls, a third of a
    /// get through librma-mpi).
    #[inline(always)]
    fn get_layout_into<'b>(
        &self,
        target: Rank,
        disp: u64,
        layout: Layout,
        buf: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if extent.count <= 1 {
            let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut *buf);
            if let Some(done) = self.shared.get_direct(target, extent.offset, dst) {
                return done.map(|()| GetInto { buf, pending: None });
            }
        }
        self.get_posted_into(target, disp, layout, extent, buf)
    }

    /// [`get_layout_into`](Self::get_layout_into) past the direct path.
    #[inline(never)]
    fn get_posted_into<'b>(
        &self,
        target: Rank,
        disp: u64,
        layout: Layout,
        extent: Extent,
        buf: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        if extent.count <= 1 {
            if let Some(posted) =
                (self.shared).get_counted(target, extent.offset, extent.bytes() as usize, None)
            {
                let pending = Some(self.request(posted?, target, |bytes| bytes));
                return Ok(GetInto { buf, pending });
            }
        }
        if let Some(p) = self.pieces(OpKind::Get, None, target, disp, layout, extent)? {
            let parts = self.post_pieces(OpKind::Get, None, target, p, &[], true)?;
            let pending = Some(Request::joined(parts, |bytes| bytes));
            return Ok(GetInto { buf, pending });
        }
        let posted = self.shared.post(OpDesc {
            into: Some(std::cell::RefCell::new(bytemuck::cast_slice_mut(&mut *buf))),
            ..Self::desc(OpKind::Get, target, extent, None, &[], true)
        })?;
        let pending = match posted {
            Posted::Done(None) => None,
            other => Some(self.request(other, target, |bytes| bytes)),
        };
        Ok(GetInto { buf, pending })
    }

    /// Accumulates `data` into `target`'s window with `op`, element-wise and atomically
    /// with respect to other accumulates.
    #[inline(always)]
    pub fn accumulate(&self, data: &[T], op: AccOp, target: Rank, disp: u64) -> Result<()> {
        toward_target!(self, "accumulate", target, |target| self
            .accumulate_contiguous(data, op, target, disp))
    }

    /// [`accumulate`](Self::accumulate) toward World rank `target`: the direct path here,
    /// the rest out of line.
    #[inline(always)]
    fn accumulate_contiguous(&self, data: &[T], op: AccOp, target: Rank, disp: u64) -> Result<()> {
        Self::check_op(op)?;
        // Contiguous on both sides: nothing to gather, the caller's elements go as they
        // are.
        let layout = Layout::contiguous(data.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(done) =
            self.accumulate_direct_discarding(bytemuck::cast_slice(data), op, target, extent)
        {
            return done;
        }
        self.accumulate_posted(data, op, target, disp, extent)
    }

    /// [`accumulate_contiguous`](Self::accumulate_contiguous) past the direct path.
    #[inline(never)]
    fn accumulate_posted(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
        extent: Extent,
    ) -> Result<()> {
        let kind = OpKind::Accumulate;
        let layout = Layout::contiguous(data.len());
        if let Some(p) = self.pieces(kind, Some(op), target, disp, layout, extent)? {
            return self
                .post_pieces(kind, Some(op), target, p, data, false)
                .map(drop);
        }
        self.shared
            .post(Self::desc(
                kind,
                target,
                extent,
                Some(op),
                bytemuck::cast_slice(data),
                false,
            ))
            .map(drop)
    }

    /// Strided accumulate.
    pub fn accumulate_strided(
        &self,
        data: &[T],
        origin: Layout,
        op: AccOp,
        target: Rank,
        disp: u64,
        target_layout: Layout,
    ) -> Result<()> {
        self.raised("accumulate_strided", || {
            let target = self.shared.world(target)?;
            Self::check_op(op)?;
            let packed = gather(data, origin, target_layout)?;
            let extent = self
                .shared
                .extent(target, disp, target_layout, Self::SIZE)?;
            let kind = OpKind::Accumulate;
            if let Some(p) = self.pieces(kind, Some(op), target, disp, target_layout, extent)? {
                return self
                    .post_pieces(kind, Some(op), target, p, &packed, false)
                    .map(drop);
            }
            self.shared
                .post(Self::desc(
                    OpKind::Accumulate,
                    target,
                    extent,
                    Some(op),
                    bytemuck::cast_slice(&packed),
                    false,
                ))
                .map(drop)
        })
    }

    /// Request-based accumulate (MPI_Raccumulate): completes locally.
    pub fn raccumulate(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
    ) -> Result<Request<()>> {
        self.raised("raccumulate", || {
            let target = self.shared.world(target)?;
            Self::check_op(op)?;
            let layout = Layout::contiguous(data.len());
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            let kind = OpKind::Accumulate;
            if let Some(p) = self.pieces(kind, Some(op), target, disp, layout, extent)? {
                let parts = self.post_pieces(kind, Some(op), target, p, data, true)?;
                return Ok(Request::joined(parts, |_| ()));
            }
            let posted = self.shared.post(Self::desc(
                OpKind::Accumulate,
                target,
                extent,
                Some(op),
                bytemuck::cast_slice(data),
                true,
            ))?;
            Ok(self.request(posted, target, |_| ()))
        })
    }

    /// Atomically fetches the target elements and accumulates `data` into them; with
    /// [`AccOp::NoOp`] it is an atomic read of `data.len()` elements. (MPI_Get_accumulate
    /// and MPI_Rget_accumulate in one, as [`get`](Self::get).)
    pub fn get_accumulate(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
    ) -> Result<Request<Vec<T>>> {
        self.raised("get_accumulate", || {
            let target = self.shared.world(target)?;
            Self::check_op(op)?;
            let layout = Layout::contiguous(data.len());
            let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
            if let Some(done) =
                self.accumulate_direct(bytemuck::cast_slice(data), op, target, extent, true)
            {
                return done.map(|old| Request::value(to_vec(old.unwrap_or_default())));
            }
            let kind = OpKind::GetAccumulate;
            if let Some(p) = self.pieces(kind, Some(op), target, disp, layout, extent)? {
                let parts = self.post_pieces(kind, Some(op), target, p, data, true)?;
                return Ok(Request::joined(parts, to_vec::<T>));
            }
            let posted = self.shared.post(Self::desc(
                OpKind::GetAccumulate,
                target,
                extent,
                Some(op),
                bytemuck::cast_slice(data),
                true,
            ))?;
            Ok(self.request(posted, target, to_vec::<T>))
        })
    }

    /// As [`get_accumulate`](Self::get_accumulate), the target's previous elements landing
    /// in `result` (of `data.len()` elements; MPI_Get_accumulate's result buffer), which
    /// stays borrowed by the returned [`GetInto`] until it is waited on. Where the
    /// backend completes the op in the call (shared memory) nothing is allocated.
    #[inline(always)]
    pub fn get_accumulate_into<'b>(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
        result: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        toward_target!(self, "get_accumulate_into", target, |target| self
            .get_accumulate_direct(data, op, target, disp, result))
    }

    /// [`get_accumulate_into`](Self::get_accumulate_into) toward World rank `target`:
    /// the direct path here, the rest out of line.
    #[inline(always)]
    fn get_accumulate_direct<'b>(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
        result: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        if result.len() != data.len() {
            return Err(UsageError::BadLayout.into());
        }
        Self::check_op(op)?;
        let layout = Layout::contiguous(data.len());
        let extent = self.shared.extent(target, disp, layout, Self::SIZE)?;
        if let Some(done) = self.fetch_direct(
            bytemuck::cast_slice(data),
            op,
            target,
            extent,
            bytemuck::cast_slice_mut(&mut *result),
        ) {
            done?;
            return Ok(GetInto {
                buf: result,
                pending: None,
            });
        }
        self.get_accumulate_posted(data, op, target, disp, extent, result)
    }

    /// [`get_accumulate_direct`](Self::get_accumulate_direct) past the direct path.
    #[inline(never)]
    fn get_accumulate_posted<'b>(
        &self,
        data: &[T],
        op: AccOp,
        target: Rank,
        disp: u64,
        extent: Extent,
        result: &'b mut [T],
    ) -> Result<GetInto<'b, T>> {
        let kind = OpKind::GetAccumulate;
        let layout = Layout::contiguous(data.len());
        if let Some(p) = self.pieces(kind, Some(op), target, disp, layout, extent)? {
            let parts = self.post_pieces(kind, Some(op), target, p, data, true)?;
            let pending = Some(Request::joined(parts, |bytes| bytes));
            return Ok(GetInto {
                buf: result,
                pending,
            });
        }
        let posted = self.shared.post(Self::desc(
            kind,
            target,
            extent,
            Some(op),
            bytemuck::cast_slice(data),
            true,
        ))?;
        let pending = Some(self.request(posted, target, |bytes| bytes));
        Ok(GetInto {
            buf: result,
            pending,
        })
    }

    /// Atomic fetch-and-op on one element; the request's value is the old value.
    #[inline(always)]
    pub fn fetch_and_op(&self, value: T, op: AccOp, target: Rank, disp: u64) -> Result<Request<T>> {
        let mut old = T::zeroed();
        Ok(self
            .fetch_and_op_into(value, op, target, disp, &mut old)?
            .unwrap_or_else(|| Request::value(old)))
    }

    /// [`fetch_and_op`](Self::fetch_and_op) whose old value lands in `old` where the
    /// backend completes it in the call (shared memory): `None` then, with no request
    /// made; otherwise the request that carries it (`old` untouched). MPI_Fetch_and_op's
    /// form, for a caller that keeps the result's place.
    #[inline(always)]
    pub fn fetch_and_op_into(
        &self,
        value: T,
        op: AccOp,
        target: Rank,
        disp: u64,
        old: &mut T,
    ) -> Result<Option<Request<T>>> {
        toward_target!(self, "fetch_and_op", target, |target| self
            .fetch_and_op_direct(value, op, target, disp, old))
    }

    /// [`fetch_and_op_into`](Self::fetch_and_op_into) toward World rank `target`: the
    /// direct path here, the rest out of line.
    #[inline(always)]
    fn fetch_and_op_direct(
        &self,
        value: T,
        op: AccOp,
        target: Rank,
        disp: u64,
        old: &mut T,
    ) -> Result<Option<Request<T>>> {
        Self::check_op(op)?;
        let extent = self
            .shared
            .extent(target, disp, Layout::contiguous(1), Self::SIZE)?;
        if let Some(done) = self.fetch_direct(
            bytemuck::bytes_of(&value),
            op,
            target,
            extent,
            bytemuck::bytes_of_mut(old),
        ) {
            return done.map(|()| None);
        }
        self.fetch_and_op_posted(value, op, target, extent)
    }

    /// [`fetch_and_op_direct`](Self::fetch_and_op_direct) past the direct path.
    #[inline(never)]
    fn fetch_and_op_posted(
        &self,
        value: T,
        op: AccOp,
        target: Rank,
        extent: Extent,
    ) -> Result<Option<Request<T>>> {
        let posted = self.shared.post(Self::desc(
            OpKind::GetAccumulate,
            target,
            extent,
            Some(op),
            bytemuck::bytes_of(&value),
            true,
        ))?;
        Ok(Some(self.request(posted, target, to_one::<T>)))
    }

    /// Atomic compare-and-swap of one element: `swap` replaces it if it equals `compare`
    /// (bitwise). The request's value is the old value.
    #[inline(always)]
    pub fn compare_and_swap(
        &self,
        compare: T,
        swap: T,
        target: Rank,
        disp: u64,
    ) -> Result<Request<T>> {
        let mut old = T::zeroed();
        Ok(self
            .compare_and_swap_into(compare, swap, target, disp, &mut old)?
            .unwrap_or_else(|| Request::value(old)))
    }

    /// [`compare_and_swap`](Self::compare_and_swap) whose old value lands in `old` where
    /// the backend completes it in the call, as
    /// [`fetch_and_op_into`](Self::fetch_and_op_into) (and inline as it is).
    #[inline(always)]
    pub fn compare_and_swap_into(
        &self,
        compare: T,
        swap: T,
        target: Rank,
        disp: u64,
        old: &mut T,
    ) -> Result<Option<Request<T>>> {
        toward_target!(self, "compare_and_swap", target, |target| self
            .compare_and_swap_direct(compare, swap, target, disp, old))
    }

    /// [`compare_and_swap_into`](Self::compare_and_swap_into) toward World rank `target`:
    /// the direct path here, the rest out of line.
    #[inline(always)]
    fn compare_and_swap_direct(
        &self,
        compare: T,
        swap: T,
        target: Rank,
        disp: u64,
        old: &mut T,
    ) -> Result<Option<Request<T>>> {
        if !T::DATATYPE.is_integer() {
            // MPI-4.1 12.3.4: integer, logical and byte types only (equality of floats is
            // not bitwise: -0.0 == 0.0, NaN != NaN).
            return Err(UsageError::Unsupported {
                what: "compare_and_swap on floating-point elements (MPI allows integer \
                   types only)",
            }
            .into());
        }
        let extent = self
            .shared
            .extent(target, disp, Layout::contiguous(1), Self::SIZE)?;
        // Compare then swap, side by side on the stack (elements are at most 8 bytes).
        let atomic = NativeAtomic::CompareAndSwap {
            datatype: T::DATATYPE,
            compare: bytemuck::bytes_of(&compare),
            swap: bytemuck::bytes_of(&swap),
        };
        if let Some(done) = self.shared.atomic_direct_into(
            target,
            extent.offset,
            atomic,
            bytemuck::bytes_of_mut(old),
        ) {
            return done.map(|()| None);
        }
        self.compare_and_swap_posted(compare, swap, target, extent)
    }

    /// [`compare_and_swap_direct`](Self::compare_and_swap_direct) past the direct path.
    #[inline(never)]
    fn compare_and_swap_posted(
        &self,
        compare: T,
        swap: T,
        target: Rank,
        extent: Extent,
    ) -> Result<Option<Request<T>>> {
        let mut pair = [0u8; 16];
        pair[..Self::SIZE].copy_from_slice(bytemuck::bytes_of(&compare));
        pair[Self::SIZE..2 * Self::SIZE].copy_from_slice(bytemuck::bytes_of(&swap));
        let posted = self.shared.post(Self::desc(
            OpKind::CompareAndSwap,
            target,
            extent,
            None,
            &pair[..2 * Self::SIZE],
            true,
        ))?;
        Ok(Some(self.request(posted, target, to_one::<T>)))
    }

    /// Fence (MPI_Win_fence). Ends the previous fence epoch, completing each of its
    /// operations at its target (seed 001), and starts the next unless
    /// [`Assert::NOSUCCEED`]. With [`Assert::NOPRECEDE`] it does not block.
    pub fn fence(&self, assert: Assert) -> Result<()> {
        self.raised("fence", || self.shared.fence(assert))
    }

    /// Starts an access epoch to `group` (MPI_Win_start).
    pub fn start(&self, group: &[Rank], assert: Assert) -> Result<()> {
        self.raised("start", || {
            (self.shared).with_world_group(group, |g| self.shared.start(g, assert))
        })
    }

    /// Ends the access epoch of [`start`](Self::start) (MPI_Win_complete).
    pub fn complete(&self) -> Result<()> {
        self.raised("complete", || self.shared.complete())
    }

    /// Starts an exposure epoch to `group` (MPI_Win_post).
    pub fn post(&self, group: &[Rank], assert: Assert) -> Result<()> {
        self.raised("post", || {
            (self.shared).with_world_group(group, |g| self.shared.post_exposure(g, assert))
        })
    }

    /// Waits for every origin of the exposure epoch to complete (MPI_Win_wait).
    pub fn wait(&self) -> Result<()> {
        self.raised("wait", || self.shared.wait_exposure())
    }

    /// Whether the exposure epoch is over, ending it if so (MPI_Win_test).
    pub fn test(&self) -> Result<bool> {
        self.raised("test", || self.shared.test_exposure())
    }

    /// Locks `target`'s window (MPI_Win_lock).
    pub fn lock(&self, lock_type: LockType, target: Rank, assert: Assert) -> Result<()> {
        self.raised("lock", || {
            self.shared
                .lock(lock_type, self.shared.world(target)?, assert)
        })
    }

    /// Completes every op to `target` at the target and releases the lock (MPI_Win_unlock).
    pub fn unlock(&self, target: Rank) -> Result<()> {
        self.raised("unlock", || self.shared.unlock(self.shared.world(target)?))
    }

    /// Shared lock on every rank's window (MPI_Win_lock_all).
    pub fn lock_all(&self, assert: Assert) -> Result<()> {
        self.raised("lock_all", || self.shared.lock_all(assert))
    }

    /// Ends a [`lock_all`](Self::lock_all) epoch (MPI_Win_unlock_all).
    pub fn unlock_all(&self) -> Result<()> {
        self.raised("unlock_all", || self.shared.unlock_all())
    }

    /// Completes every op to `target` at the target (MPI_Win_flush).
    #[inline(always)]
    pub fn flush(&self, target: Rank) -> Result<()> {
        toward_target!(self, "flush", target, |target| self
            .shared
            .flush(Some(target), true))
    }

    /// Completes every op at its target (MPI_Win_flush_all).
    pub fn flush_all(&self) -> Result<()> {
        self.raised("flush_all", || self.shared.flush(None, true))
    }

    /// Completes every op to `target` locally: origin buffers reusable, fetched data
    /// available (MPI_Win_flush_local).
    pub fn flush_local(&self, target: Rank) -> Result<()> {
        self.raised("flush_local", || {
            self.shared.flush(Some(self.shared.world(target)?), false)
        })
    }

    /// Local completion of every op (MPI_Win_flush_local_all).
    pub fn flush_local_all(&self) -> Result<()> {
        self.raised("flush_local_all", || self.shared.flush(None, false))
    }

    /// Synchronizes the public and private copies of this window (MPI_Win_sync): a
    /// full memory barrier.
    pub fn sync(&self) -> Result<()> {
        self.raised("sync", || {
            self.shared.engine.transport.memory_sync();
            Ok(())
        })
    }

    /// Reads this process's own window memory (outside epochs, or under a self lock).
    pub fn read_local(&self, disp: usize, out: &mut [T]) -> Result<()> {
        self.raised("read_local", || {
            let len = std::mem::size_of_val(out);
            self.local_bytes(disp, len, "read_local on a dynamic window", |seg, off| {
                seg.read(off, bytemuck::cast_slice_mut(out))
            })
        })
    }

    /// Writes this process's own window memory.
    pub fn write_local(&self, disp: usize, data: &[T]) -> Result<()> {
        self.raised("write_local", || {
            let len = std::mem::size_of_val(data);
            self.local_bytes(disp, len, "write_local on a dynamic window", |seg, off| {
                seg.write(off, bytemuck::cast_slice(data))
            })
        })
    }

    /// Runs `access` on this process's static segment at the byte offset of element
    /// `disp`, once `len` bytes from there are checked to be inside it.
    fn local_bytes(
        &self,
        disp: usize,
        len: usize,
        dynamic: &'static str,
        access: impl FnOnce(&dyn Segment, usize),
    ) -> Result<()> {
        let mem = self.shared.memory.read().unwrap_or_else(|e| e.into_inner());
        let Memory::Static(seg) = &*mem else {
            return Err(UsageError::Unsupported { what: dynamic }.into());
        };
        let off = disp.saturating_mul(Self::SIZE);
        if off.checked_add(len).is_none_or(|end| end > seg.len()) {
            return Err(UsageError::OutOfBounds {
                target: self.shared.engine.rank,
                disp: disp as u64,
                count: (len / Self::SIZE) as u64,
                window_len: (seg.len() / Self::SIZE) as u64,
            }
            .into());
        }
        access(seg.as_ref(), off);
        Ok(())
    }

    /// A copy of this process's whole window (empty for dynamic windows, and for a view
    /// of a window whose memory a `LocalGuard` holds).
    pub fn local_to_vec(&self) -> Vec<T> {
        if self.shared.local_access.load(Ordering::Acquire) {
            tracing::warn!(
                win = self.shared.id,
                "local_to_vec of a window lent to a LocalGuard"
            );
            return Vec::new();
        }
        let mem = self.shared.memory.read().unwrap_or_else(|e| e.into_inner());
        match &*mem {
            Memory::Static(seg) => {
                let mut v = vec![T::zeroed(); seg.len() / Self::SIZE];
                seg.read(0, bytemuck::cast_slice_mut(&mut v));
                v
            }
            Memory::Dynamic(_) => Vec::new(),
        }
    }

    /// Elements in `rank`'s window.
    pub fn len_of(&self, rank: Rank) -> Result<usize> {
        self.raised("len_of", || {
            let rank = self.shared.world(rank)?;
            let r = self.shared.remote.get(rank);
            Ok(r.len as usize / Self::SIZE)
        })
    }

    /// The address and byte length of `rank`'s part of the window in this process, for
    /// direct load/store between synchronizations: every part of a window from
    /// `allocate_shared`, and (MPI-4.1 12.2.3 allows any flavor) the parts of other
    /// windows whose memory the backend maps here (shared memory: `allocate`, and
    /// `create` where the window's elements moved into shared memory). An error where the
    /// part is not memory this process can load and store (another node, the
    /// application's memory in place, a dynamic window).
    pub fn shared_query(&self, rank: Rank) -> Result<(usize, usize)> {
        self.raised("shared_query", || {
            let rank = self.shared.world(rank)?;
            if self.shared.kind == WindowKind::Dynamic {
                return Err(UsageError::Unsupported {
                    what: "shared_query on a dynamic window (its memory is regions)",
                }
                .into());
            }
            self.shared
                .engine
                .transport
                .shared_base(self.shared.id, rank)
                .map(|base| (base, self.shared.remote.get(rank).len as usize))
                .ok_or_else(|| {
                    UsageError::Unsupported {
                        what: "peer memory not shared with this process",
                    }
                    .into()
                })
        })
    }

    /// Attaches `memory` to a dynamic window; returns the address peers use as
    /// displacement (MPI_Win_attach + MPI_Get_address: the address of the memory in
    /// this process). Where the backend serves its own memory faster than the
    /// application's (shared memory: loads, stores and atomics by peers, instead of a
    /// system call per op and atomics by message), the elements move into the backend's
    /// memory, as a window's of [`create`](crate::Engine::create) do, and come back out
    /// at [`detach`](Self::detach); the address is theirs there.
    pub fn attach(&self, memory: Vec<T>) -> Result<u64> {
        self.raised("attach", || {
            let t = &self.shared.engine.transport;
            if self.shared.kind == WindowKind::Dynamic && t.copies_user_memory() {
                let bytes: &[u8] = bytemuck::cast_slice(&memory);
                // Past the backend's segments (shared memory: one per live window or
                // region), in place.
                if let Ok(seg) = t.allocate(bytes.len(), None) {
                    if let Some(base) = seg.local_base() {
                        seg.write(0, bytes);
                        return self.attach_segment(base as u64, seg);
                    }
                }
            }
            self.attach_memory(Box::new(memory))
        })
    }

    /// Attaches any [`UserMemory`] to a dynamic window, in place (peers reach its bytes
    /// where they are); returns its address, the displacement peers name it by.
    pub fn attach_memory(&self, mut memory: Box<dyn UserMemory>) -> Result<u64> {
        self.raised("attach_memory", || {
            self.check_dynamic()?;
            let address = memory.bytes_mut().as_ptr() as u64;
            let len = memory.bytes_mut().len() as u64;
            if self.overlaps(
                &self.shared.memory.read().unwrap_or_else(|e| e.into_inner()),
                address,
                len,
            ) {
                return Err(Self::overlap());
            }
            // Registered outside the memory lock: the target side reads it meanwhile.
            let seg = self.shared.engine.transport.expose(memory)?;
            self.attach_segment(address, seg)
        })
    }

    fn check_dynamic(&self) -> Result<()> {
        if self.shared.kind != WindowKind::Dynamic {
            return Err(UsageError::Unsupported {
                what: "attach on a window not from create_dynamic",
            }
            .into());
        }
        Ok(())
    }

    /// Whether `len` bytes at `address` overlap a region already attached: refused
    /// (MPI-4.1 12.2.4), an address names one region.
    fn overlaps(&self, mem: &Memory, address: u64, len: u64) -> bool {
        match mem {
            Memory::Dynamic(regions) => regions.iter().any(|(base, s)| {
                len > 0 && address < base.saturating_add(s.len() as u64) && *base < address + len
            }),
            Memory::Static(_) => false,
        }
    }

    fn overlap() -> Error {
        UsageError::Unsupported {
            what: "attaching memory that overlaps a region already attached",
        }
        .into()
    }

    /// Records `seg` as the region at `address`, then has the backend publish it.
    fn attach_segment(&self, address: u64, seg: Arc<dyn Segment>) -> Result<u64> {
        self.check_dynamic()?;
        let mut mem = self
            .shared
            .memory
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if self.overlaps(&mem, address, seg.len() as u64) {
            return Err(Self::overlap());
        }
        // Published under the memory lock: an op that the backend does not reach
        // natively goes as a message, whose target side waits for the lock and finds
        // the region too.
        self.shared
            .engine
            .transport
            .region_attached(self.shared.id, address, &seg);
        if let Memory::Dynamic(regions) = &mut *mem {
            regions.push((address, seg));
        }
        Ok(address)
    }

    /// Detaches the region at `address` and gives its memory back.
    pub fn detach(&self, address: u64) -> Result<Vec<T>> {
        self.raised("detach", || {
            let seg = self.detach_region(address)?;
            if seg.shared_base().is_some() {
                // The backend's copy (`attach`): the elements come back out.
                let mut out = vec![T::zeroed(); seg.len() / Self::SIZE];
                seg.read(0, bytemuck::cast_slice_mut(&mut out));
                return Ok(out);
            }
            seg.into_user_memory()
                .ok_or(UsageError::NotAttached)?
                .into_any()
                .downcast::<Vec<T>>()
                .map(|b| *b)
                .map_err(|_| UsageError::NotAttached.into())
        })
    }

    /// Detaches the region attached at `address` (by [`attach`](Self::attach) or
    /// [`attach_memory`](Self::attach_memory)) and gives its memory back (a region that
    /// `attach` moved into the backend's memory as its bytes, a `Vec<u8>`).
    pub fn detach_memory(&self, address: u64) -> Result<Box<dyn UserMemory>> {
        self.raised("detach_memory", || {
            let seg = self.detach_region(address)?;
            if seg.shared_base().is_some() {
                let mut out = vec![0u8; seg.len()];
                seg.read(0, &mut out);
                let memory: Box<dyn UserMemory> = Box::new(out);
                return Ok(memory);
            }
            seg.into_user_memory()
                .ok_or_else(|| UsageError::NotAttached.into())
        })
    }

    /// Takes the region at `address` out of the window: peers stop reaching it natively
    /// first.
    fn detach_region(&self, address: u64) -> Result<Arc<dyn Segment>> {
        let mut mem = self
            .shared
            .memory
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let Memory::Dynamic(regions) = &mut *mem else {
            return Err(UsageError::NotAttached.into());
        };
        let i = regions
            .iter()
            .position(|(base, _)| *base == address)
            .ok_or(UsageError::NotAttached)?;
        self.shared
            .engine
            .transport
            .region_detached(self.shared.id, address);
        Ok(regions.swap_remove(i).1)
    }

    /// The address of this process's part of the window, for loads and stores in place
    /// between synchronizations (MPI's window base): `None` for a dynamic window and
    /// where the backend keeps the bytes elsewhere (a simulation). Reading or writing
    /// through it is the caller's business: MPI's rules on local access (seed 004) say
    /// when it does not race with peers' operations.
    pub fn local_base(&self) -> Option<usize> {
        match &*self.shared.memory.read().unwrap_or_else(|e| e.into_inner()) {
            Memory::Static(seg) => seg.local_base(),
            Memory::Dynamic(_) => None,
        }
    }

    /// Starts a local access epoch: this process takes the exclusive lock of its own
    /// window (MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me), waiting as `lock` waits), so that no
    /// peer that synchronizes as MPI asks can access it, and from then on every call on
    /// this window is refused ([`UsageError::LocalAccess`]) until
    /// [`end_local_access`](Self::end_local_access). Returns the address and byte length
    /// of this process's window memory, which may be read and written in place meanwhile.
    ///
    /// This is the engine's half of the facade's safe `LocalGuard` (`rma::LocalAccess`),
    /// which lends that memory as a slice; a program uses the guard.
    pub fn begin_local_access(&self) -> Result<(usize, usize)> {
        self.raised("begin_local_access", || {
            let (base, len) = match &*self.shared.memory.read().unwrap_or_else(|e| e.into_inner()) {
                Memory::Static(seg) => (seg.local_base(), seg.len()),
                Memory::Dynamic(_) => (None, 0),
            };
            let base = base.ok_or(UsageError::Unsupported {
                what: "local access in place to a window whose memory is not mapped in this \
                       process (dynamic windows, simulated transports)",
            })?;
            let me = self.shared.engine.rank;
            self.shared.lock(LockType::Exclusive, me, Assert::NONE)?;
            self.shared.local_access.store(true, Ordering::Release);
            Ok((base, len))
        })
    }

    /// Ends the local access epoch [`begin_local_access`](Self::begin_local_access)
    /// started: calls on the window are accepted again and the lock of this process's
    /// window is released. An error if none was started.
    pub fn end_local_access(&self) -> Result<()> {
        if !self.shared.local_access.swap(false, Ordering::AcqRel) {
            return Err(self.shared.raised(
                "end_local_access",
                UsageError::NotLocked {
                    target: self.shared.engine.rank,
                }
                .into(),
            ));
        }
        self.raised("end_local_access", || {
            self.shared.unlock(self.shared.engine.rank)
        })
    }

    /// This window's counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Frees the window (collective, MPI_Win_free). Every epoch must be closed. Gives
    /// back the memory of a window from `create`.
    ///
    /// On failure the window comes back in the [`FreeError`]: an epoch still open
    /// ([`UsageError::EpochOpen`]) can be closed and the free tried again. With `?` into
    /// [`Error`] the window is dropped instead (which releases the locks it holds and
    /// tells the peers it is gone).
    pub fn free(self) -> std::result::Result<Option<Vec<T>>, FreeError<T>> {
        match self.free_inner() {
            Ok(memory) => Ok(memory),
            Err(error) => Err(FreeError {
                error: self.shared.raised("free", error),
                window: self,
            }),
        }
    }

    fn free_inner(&self) -> Result<Option<Vec<T>>> {
        let w = &self.shared;
        {
            let st = w.lock_state();
            if !WindowShared::no_access_epoch(&st)
                || st.target.exposure.is_some()
                || !st.locks.is_empty()
            {
                return Err(UsageError::EpochOpen.into());
            }
        }
        // The notification counters' window first (collective too, in the same order on
        // every rank).
        let notify = w.notify.lock().take();
        if let Some(n) = notify {
            n.free()?;
        }
        // Outstanding barriers first; then every rank tells every other that it frees the
        // window, with the barriers it started on it: once all have said so with the same
        // count, no peer needs this window any more (each said it last, after everything
        // else it sent on it). A peer in another collective (a fence) or with another
        // count is a mismatch, on both sides.
        w.wait_for("free", |st| {
            Ok(st.barrier.is_none() && st.background_barriers.is_empty() && st.outbox.is_empty())
        })?;
        let mine = {
            let mut st = w.lock_state();
            let mine = st.barrier_seq;
            st.send_departure(w, Departure::Free, mine)?;
            mine
        };
        let me = w.engine.rank;
        w.wait_for("free", |st| {
            let freeing = &st.departures.freeing;
            let said = |r: Rank| freeing.get(r as usize).copied().flatten();
            let all = w.members().all(|r| r == me || said(r).is_some());
            if !all || !st.outbox.is_empty() {
                return Ok(false);
            }
            match w.members().find(|&r| r != me && said(r) != Some(mine)) {
                None => Ok(true),
                Some(rank) => {
                    st.send_departure(w, Departure::Mismatch, Departure::call_code("free"))?;
                    Err(PeerError::Mismatch {
                        rank,
                        call: "free",
                        theirs: "fence",
                    }
                    .into())
                }
            }
        })?;
        w.freed.store(true, std::sync::atomic::Ordering::Relaxed);
        w.engine.unregister(w.id);
        let mut st = w.lock_state();
        let WinState {
            op_pool,
            target_pool,
            ..
        } = &mut *st;
        op_pool.release(&w.engine.op_pool);
        target_pool.release(&w.engine.target_pool);
        drop(st);
        let mem = std::mem::replace(
            &mut *w.memory.write().unwrap_or_else(|e| e.into_inner()),
            Memory::Dynamic(Vec::new()),
        );
        drop(w.anchor.lock().unwrap_or_else(|e| e.into_inner()).take());
        let kept = w.user_copy.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (w.kind, mem, kept) {
            (WindowKind::Create, Memory::Static(seg), Some(mut user)) => {
                // The window's bytes go back into the user's buffer.
                seg.read(0, user.bytes_mut());
                Ok(user.into_any().downcast::<Vec<T>>().ok().map(|b| *b))
            }
            (WindowKind::Create, Memory::Static(seg), None) => Ok(user_vec(seg)),
            _ => Ok(None),
        }
    }
}

/// A [`Window::free`] that failed, with the window given back.
///
/// ```
/// use rma_core::{sim, Assert, UsageError};
/// sim::run(1, sim::Profile::SharedMemory, 1, |engine| {
///     let win = engine.allocate::<u64>(4)?;
///     win.lock_all(Assert::NONE)?;
///     let refused = win.free().unwrap_err();
///     assert_eq!(refused.error.usage(), Some(&UsageError::EpochOpen));
///     assert_eq!(refused.error.call(), Some("free"));
///     let win = refused.window; // close the epoch, then free again
///     win.unlock_all()?;
///     win.free()?;
///     Ok(())
/// }).unwrap();
/// ```
pub struct FreeError<T: Element> {
    /// Why the window was not freed.
    pub error: Error,
    /// The window, as it was.
    pub window: Window<T>,
}

impl<T: Element> std::fmt::Debug for FreeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreeError")
            .field("error", &self.error)
            .field("window", &self.window.shared.id)
            .finish()
    }
}

impl<T: Element> std::fmt::Display for FreeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "free of window {} failed: {}",
            self.window.shared.id, self.error
        )
    }
}

impl<T: Element> std::error::Error for FreeError<T> {}

impl<T: Element> From<FreeError<T>> for Error {
    /// The error alone; the window is dropped.
    fn from(e: FreeError<T>) -> Error {
        e.error
    }
}

/// A get into a caller's buffer ([`Window::get_into`]); the buffer is readable again
/// once [`wait`](GetInto::wait) returns it.
#[must_use = "the buffer is only filled once the get is waited on"]
pub struct GetInto<'b, T: Element> {
    buf: &'b mut [T],
    pending: Option<Request<Fetched>>,
}

impl<T: Element> std::fmt::Debug for GetInto<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetInto")
            .field("len", &self.buf.len())
            .field("done", &self.pending.is_none())
            .finish()
    }
}

impl<'b, T: Element> GetInto<'b, T> {
    /// Whether the data landed in the buffer in the call already (shared memory):
    /// nothing to wait for, no progress made.
    #[inline]
    pub fn landed(&self) -> bool {
        self.pending.is_none()
    }

    /// Whether the data is there ([`wait`](Self::wait) then returns at once); makes
    /// progress if not.
    pub fn test(&self) -> Result<bool> {
        self.pending.as_ref().map_or(Ok(true), Request::test)
    }

    /// Blocks (making progress) until the data is in the buffer, and gives it back.
    #[inline]
    pub fn wait(self) -> Result<&'b mut [T]> {
        if let Some(r) = self.pending {
            r.wait_into(bytemuck::cast_slice_mut(&mut *self.buf))?;
        }
        Ok(self.buf)
    }
}

impl<T: Element> Window<T> {
    /// The window's id (the engine's and the backend's).
    pub(crate) fn id(&self) -> u32 {
        self.shared.id
    }

    /// Drops the window without telling its peers (each member drops its own): for the
    /// engine's windows, which no user epoch uses.
    pub(crate) fn leave_quietly(self) {
        self.shared
            .freed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<T: Element> Drop for Window<T> {
    /// A window dropped without [`free`](Window::free) leaves the engine's registry (no
    /// collective; a departure notice to its peers): peers that still address it get
    /// their packets refused. Its memory stays allocated and registered until the World
    /// goes, so that a peer's op under way lands instead of failing its connection.
    fn drop(&mut self) {
        if self.view {
            return;
        }
        let w = &self.shared;
        if !w.freed.load(std::sync::atomic::Ordering::Relaxed) && w.member_count() > 1 {
            // Peers waiting in a collective on this window learn that it will never
            // complete. Best effort, bounded: what the transport cannot take now is given
            // a few progress passes, then dropped with the window.
            let segments: Vec<Arc<dyn Segment>> =
                match &*w.memory.read().unwrap_or_else(|e| e.into_inner()) {
                    Memory::Static(seg) => vec![seg.clone()],
                    Memory::Dynamic(regions) => regions.iter().map(|(_, s)| s.clone()).collect(),
                };
            let anchor = w.anchor.lock().unwrap_or_else(|e| e.into_inner()).clone();
            w.engine.park_abandoned(segments.into_iter().chain(anchor));
            let mut st = w.lock_state();
            // Locks it holds in shared memory go now; locks held by message are revoked
            // by their targets when the departure below reaches them.
            st.release_native_locks(w);
            let seq = st.barrier_seq;
            if st.send_departure(w, Departure::Abandoned, seq).is_ok() {
                for _ in 0..1000 {
                    if st.outbox.is_empty() || st.flush_outbox(w).is_err() {
                        break;
                    }
                    drop(st);
                    let _ = w.engine.progress();
                    st = w.lock_state();
                }
            }
        }
        w.engine.unregister(w.id);
    }
}

/// `n` zeroed elements, or the typed error for a count no memory can hold (a get of a
/// dynamic window is bounded only at the target).
pub(super) fn zeroed_vec<T: Element>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| UsageError::TooLarge { what: "the result" })?;
    v.resize(n, T::zeroed());
    Ok(v)
}

pub(super) fn user_vec<T: Element>(seg: Arc<dyn Segment>) -> Option<Vec<T>> {
    let user: Box<dyn UserMemory> = seg.into_user_memory()?;
    user.into_any().downcast::<Vec<T>>().ok().map(|b| *b)
}

/// One active message of an op too large for one: a run of the packed elements (from
/// `data_at`) and where they go.
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    data_at: usize,
    layout: Layout,
    disp: u64,
}

/// Packs the elements `origin` selects from `data`, checking it matches `target`.
fn gather<T: Element>(
    data: &[T],
    origin: Layout,
    target: Layout,
) -> Result<std::borrow::Cow<'_, [T]>> {
    if !origin.valid()
        || !target.valid()
        || origin.elements() != target.elements()
        || origin.span().is_none_or(|s| s > data.len())
    {
        return Err(UsageError::BadLayout.into());
    }
    if origin.count <= 1 {
        return Ok(std::borrow::Cow::Borrowed(&data[..origin.elements()]));
    }
    let mut out = Vec::with_capacity(origin.elements());
    for i in 0..origin.count {
        out.extend_from_slice(&data[i * origin.stride..i * origin.stride + origin.block]);
    }
    Ok(std::borrow::Cow::Owned(out))
}
