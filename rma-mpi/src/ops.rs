//! The communication calls: put, get, accumulate, get_accumulate, fetch_and_op and
//! compare_and_swap, each with MPI datatypes on both sides, on rma's typed operations.
//!
//! The origin's data is packed (borrowed in place when contiguous); the target's
//! datatype becomes its runs of bytes, each one rma operation at the target's byte
//! displacement (rma's target checks each against its window). Accumulates go in the
//! element type of the datatypes' basic elements. Results (gets, fetches) land in the
//! application's buffer at completion: in the call where the backend completes it
//! there (shared memory), else at the window's next synchronization or the request's
//! MPI_Wait (see `request`).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use rma::{AccOp, Element, Layout, Rank, Request};

use crate::datatype::{Flat, FlatRef};
use crate::error::{MpiError, MpiResult};
use crate::request::{Completion, Dest, Shared};
use crate::sys::int;
use crate::window::Win;

/// One side of an operation: a buffer, a count and its datatype.
pub struct Buffer {
    pub addr: *const u8,
    pub count: usize,
    pub flat: FlatRef,
}

impl Buffer {
    #[inline]
    fn bytes(&self) -> MpiResult<usize> {
        self.count.checked_mul(self.flat.size).ok_or_else(|| {
            MpiError::new(int!(MPI_ERR_COUNT), "count times datatype size overflows")
        })
    }

    /// The buffer's data, packed. Inlined whole (the gathering of a noncontiguous one is
    /// not): a result built out of line came back through the stack in pieces that the
    /// caller read whole, a store-forwarding stall on every accumulate.
    #[inline(always)]
    fn packed(&self) -> MpiResult<Cow<'_, [u8]>> {
        let n = self.bytes()?;
        if n == 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        if self.flat.contiguous(self.count) {
            // SAFETY: MPI's contract for an origin buffer: `count` items of the datatype
            // at `addr` are readable during the call (here contiguous: `n` bytes).
            return Ok(Cow::Borrowed(unsafe {
                std::slice::from_raw_parts(self.addr, n)
            }));
        }
        Ok(Cow::Owned(self.gathered(n)))
    }

    /// The `n` bytes of a noncontiguous buffer, gathered.
    #[inline(never)]
    fn gathered(&self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        for (off, len) in self.flat.runs(self.count) {
            // SAFETY: as above, each run of the datatype's type map.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(self.addr.offset(off), len)
            });
        }
        out
    }

    /// The runs of the buffer (offsets from `addr`).
    fn runs(&self) -> Vec<(isize, usize)> {
        if self.flat.contiguous(self.count) {
            vec![(0, self.count * self.flat.size)]
        } else {
            self.flat.runs(self.count)
        }
    }
}

/// The target side of an operation.
pub struct Target {
    pub rank: Rank,
    pub disp: i64,
    pub count: usize,
    pub flat: FlatRef,
}

/// A target's runs of bytes: (byte offset in its window, length).
enum Runs {
    One([(u64, usize); 1]),
    Many(Vec<(u64, usize)>),
    /// Regular: listed only if an op per run is wanted after all.
    Regular(Strided),
}

impl Runs {
    fn as_slice(&self) -> std::borrow::Cow<'_, [(u64, usize)]> {
        match self {
            Runs::One(one) => one[..].into(),
            Runs::Many(many) => many[..].into(),
            Runs::Regular(v) => (0..v.count)
                .map(|i| (v.disp + (i * v.stride) as u64, v.block))
                .collect::<Vec<_>>()
                .into(),
        }
    }
}

/// A regular pattern of runs (a vector at the target): `count` runs of `block` bytes,
/// `stride` bytes apart from the first run's displacement.
#[derive(Clone, Copy)]
struct Strided {
    disp: u64,
    count: usize,
    block: usize,
    stride: usize,
}

/// Blocks up to this many bytes go as one strided op even where that op is an active
/// message (its blocks packed in it) and each block could be a native op of its own:
/// below it one message beats a native op per block on every network path.
const SMALL_BLOCK: usize = 1024;

impl Runs {
    /// The runs as one strided pattern, if they are one (two runs or more, of one length,
    /// evenly spaced).
    fn strided(&self) -> Option<Strided> {
        if let Runs::Regular(v) = self {
            return Some(*v);
        }
        let runs = self.as_slice();
        if runs.len() < 2 {
            return None;
        }
        let (first, block) = runs[0];
        let stride = runs[1].0.checked_sub(first)?;
        let regular = runs
            .windows(2)
            .all(|w| w[1].1 == block && w[1].0.checked_sub(w[0].0) == Some(stride));
        (regular && stride >= block as u64).then_some(Strided {
            disp: first,
            count: runs.len(),
            block,
            stride: usize::try_from(stride).ok()?,
        })
    }
}

/// The rma accumulate operation of an MPI_Op code (see `rmampi_op_code`).
pub fn acc_op(code: i32) -> MpiResult<AccOp> {
    Ok(match code {
        1 => AccOp::Sum,
        2 => AccOp::Prod,
        3 => AccOp::Min,
        4 => AccOp::Max,
        5 => AccOp::Band,
        6 => AccOp::Bor,
        7 => AccOp::Bxor,
        8 => AccOp::Land,
        9 => AccOp::Lor,
        10 => AccOp::Lxor,
        11 => AccOp::Replace,
        12 => AccOp::NoOp,
        13 => AccOp::MinLoc,
        14 => AccOp::MaxLoc,
        _ => {
            return Err(MpiError::new(
                int!(MPI_ERR_OP),
                "an operation rma does not apply in accumulates (user-defined)",
            ))
        }
    })
}

/// Calls `$body` with `$v` the window's view of the element type `$code` names and
/// `$t` that type.
macro_rules! by_element {
    ($w:expr, $code:expr, |$v:ident : $t:ident| $body:expr) => {
        match $code {
            1 => {
                type $t = u8;
                let $v = &$w.views.u8;
                $body
            }
            2 => {
                type $t = u16;
                let $v = &$w.views.u16;
                $body
            }
            3 => {
                type $t = u32;
                let $v = &$w.views.u32;
                $body
            }
            4 => {
                type $t = u64;
                let $v = &$w.views.u64;
                $body
            }
            5 => {
                type $t = i8;
                let $v = &$w.views.i8;
                $body
            }
            6 => {
                type $t = i16;
                let $v = &$w.views.i16;
                $body
            }
            7 => {
                type $t = i32;
                let $v = &$w.views.i32;
                $body
            }
            8 => {
                type $t = i64;
                let $v = &$w.views.i64;
                $body
            }
            9 => {
                type $t = f32;
                let $v = &$w.views.f32;
                $body
            }
            10 => {
                type $t = f64;
                let $v = &$w.views.f64;
                $body
            }
            11 => {
                type $t = rma::LocF32;
                let $v = &$w.views.loc_f32;
                $body
            }
            12 => {
                type $t = rma::LocF64;
                let $v = &$w.views.loc_f64;
                $body
            }
            13 => {
                type $t = rma::LocI64;
                let $v = &$w.views.loc_i64;
                $body
            }
            14 => {
                type $t = rma::LocI32;
                let $v = &$w.views.loc_i32;
                $body
            }
            15 => {
                type $t = rma::LocI16;
                let $v = &$w.views.loc_i16;
                $body
            }
            16 => {
                type $t = rma::LongDouble;
                let $v = &$w.views.long_double;
                $body
            }
            17 => {
                type $t = rma::LocLongDouble;
                let $v = &$w.views.loc_long_double;
                $body
            }
            18 => {
                type $t = rma::ComplexF32;
                let $v = &$w.views.complex_f32;
                $body
            }
            19 => {
                type $t = rma::ComplexF64;
                let $v = &$w.views.complex_f64;
                $body
            }
            20 => {
                type $t = rma::ComplexLongDouble;
                let $v = &$w.views.complex_long_double;
                $body
            }
            _ => Err(MpiError::new(
                int!(MPI_ERR_TYPE),
                "accumulate on a datatype whose elements rma has no type for (a long \
                 double other than x86-64's) or of mixed types",
            )),
        }
    };
}

/// The element code for `op` on data of code `code`: MPI_REPLACE and MPI_NO_OP move
/// bits, so a datatype rma has no element type for (0: Fortran's CHARACTER and LOGICAL,
/// mixed types) moves as the widest unsigned integers that tile it, where one word holds
/// a whole basic element. A wider one (`wide`: a long double complex where long double
/// is not x86-64's) would go as several words, each atomic alone, and a reader
/// racing a writer could see half of each (MPICH's atomic_get tests saw pairs whose
/// halves came from different writers): a wrong answer is worse than a refusal, so it is
/// MPI_ERR_TYPE.
#[inline(always)]
fn bitwise(code: u8, op: AccOp, data: &[u8], wide: bool) -> MpiResult<u8> {
    if code != 0 || !matches!(op, AccOp::Replace | AccOp::NoOp) {
        return Ok(code);
    }
    if wide {
        return Err(would_tear());
    }
    Ok(match data.len() {
        n if n % 8 == 0 => 4,
        n if n % 4 == 0 => 3,
        n if n % 2 == 0 => 2,
        _ => 1,
    })
}

/// A fetching atomic's old value, done in its call (shared memory's atomics), to the
/// application's result buffer: no request, nothing due.
#[inline(always)]
fn land_now<E: Element>(old: E, result: *mut u8) -> MpiResult<()> {
    // SAFETY: MPI's contract for a result buffer: one writable element of the datatype
    // at `result` (any alignment), not accessed by the application during the call.
    unsafe { std::ptr::write_unaligned(result.cast::<E>(), old) };
    Ok(())
}

/// MPI_ERR_DISP, saying why.
#[cold]
#[inline(never)]
fn disp_error(why: &'static str) -> MpiError {
    MpiError::new(int!(MPI_ERR_DISP), why)
}

/// The refusal of a [`Flat::wide`] element under MPI_REPLACE or MPI_NO_OP.
#[cold]
fn would_tear() -> MpiError {
    MpiError::new(
        int!(MPI_ERR_TYPE),
        "MPI_REPLACE or MPI_NO_OP on a basic datatype wider than 8 bytes that rma has no \
         atomic element for (a long double complex of this platform): it cannot be updated \
         atomically, and is refused rather than torn",
    )
}

/// A contiguous run of `size` bytes, with no element type: the layout of one element of
/// a datatype that rma moves as bits.
fn bits_of(size: usize) -> &'static Flat {
    use std::collections::HashMap;
    static RUNS: std::sync::OnceLock<Mutex<HashMap<usize, &'static Flat>>> =
        std::sync::OnceLock::new();
    let mut runs = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    runs.entry(size)
        .or_insert_with(|| Box::leak(Box::new(Flat::new(size, size as isize, vec![(0, size)], 0))))
}

/// Elements of `bytes` (copied when not aligned for `E`).
fn elements<E: Pod>(bytes: &[u8]) -> Cow<'_, [E]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(e) => Cow::Borrowed(e),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

impl Win {
    /// The byte offset of displacement `disp` in `target`'s window.
    /// Inline in every communication call (it was a call of its own in the accumulate
    /// family's); its errors are built out of line.
    #[inline(always)]
    fn byte_disp(&self, target: Rank, disp: i64) -> MpiResult<u64> {
        if disp < 0 {
            return Err(disp_error("negative target displacement"));
        }
        if self.is_dynamic() {
            return Ok(disp as u64);
        }
        let unit = self.disp_units.get(target as usize).copied().unwrap_or(1);
        (disp as u64)
            .checked_mul(unit)
            .ok_or_else(|| disp_error("displacement times unit overflows"))
    }

    #[inline(always)]
    fn check_rank(&self, rank: Rank) -> MpiResult<()> {
        if (rank as usize) < self.size {
            Ok(())
        } else {
            Err(self.rank_error(rank))
        }
    }

    /// MPI_ERR_RANK for `rank`.
    #[cold]
    #[inline(never)]
    fn rank_error(&self, rank: Rank) -> MpiError {
        MpiError::new(
            int!(MPI_ERR_RANK),
            format!(
                "target rank {rank} is outside the window's group of {}",
                self.size
            ),
        )
    }

    /// The target's runs as (byte offset in its window, length). Inlined whole for a
    /// contiguous target (as [`Buffer::packed`], for the same reason).
    #[inline(always)]
    fn target_runs(&self, t: &Target) -> MpiResult<Runs> {
        self.check_rank(t.rank)?;
        let base = self.byte_disp(t.rank, t.disp)?;
        if t.flat.contiguous(t.count) {
            // The common case, without an allocation.
            return Ok(Runs::One([(base, t.count.saturating_mul(t.flat.size))]));
        }
        self.noncontiguous_runs(t, base)
    }

    /// [`target_runs`](Self::target_runs) of a noncontiguous target at byte `base`.
    #[inline(never)]
    fn noncontiguous_runs(&self, t: &Target, base: u64) -> MpiResult<Runs> {
        if let Some((first, count, block, stride)) = t.flat.regular(t.count) {
            // A vector, a subarray's rows, a regular indexed type: the pattern found when
            // the datatype was decoded, no list of its runs.
            let at = u64::try_from(base as i128 + first as i128).map_err(|_| {
                MpiError::new(
                    int!(MPI_ERR_DISP),
                    "the target datatype reaches below byte 0",
                )
            })?;
            return Ok(Runs::Regular(Strided {
                disp: at,
                count,
                block,
                stride: stride as usize,
            }));
        }
        t.flat
            .runs(t.count)
            .into_iter()
            .map(|(off, len)| {
                let at = base as i128 + off as i128;
                u64::try_from(at).map(|at| (at, len)).map_err(|_| {
                    MpiError::new(
                        int!(MPI_ERR_DISP),
                        "the target datatype reaches below byte 0",
                    )
                })
            })
            .collect::<MpiResult<Vec<_>>>()
            .map(Runs::Many)
    }

    #[inline]
    fn same_size(origin: usize, target: &Target) -> MpiResult<()> {
        let t = target.count.saturating_mul(target.flat.size);
        if origin == t {
            Ok(())
        } else {
            Err(MpiError::new(
                int!(MPI_ERR_TYPE),
                format!("origin has {origin} bytes of data, target {t}"),
            ))
        }
    }

    fn element_code(a: &Flat, b: &Flat) -> MpiResult<u8> {
        if a.code != 0 && b.code != 0 && a.code != b.code {
            return Err(MpiError::new(
                int!(MPI_ERR_TYPE),
                "origin and target datatypes have different basic elements",
            ));
        }
        Ok(if b.code != 0 { b.code } else { a.code })
    }

    /// Keeps `c` until the window's next synchronization completing ops to `target`.
    fn due(&self, target: Rank, c: Box<dyn Completion>) -> Shared {
        let shared: Shared = Arc::new(Mutex::new(Some(c)));
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push((target, shared.clone()));
        // Under the lock: a finisher that sees `false` also saw an empty list. Another
        // thread's sync call that must see this op is ordered after it by the
        // application (MPI-4.1 12.7), which carries this store.
        self.any_pending.store(true, Ordering::Release);
        shared
    }

    /// MPI_Put.
    #[inline]
    pub fn put(&self, origin: &Buffer, target: &Target) -> MpiResult<()> {
        let data = origin.packed()?;
        Self::same_size(data.len(), target)?;
        let runs = self.target_runs(target)?;
        if let Runs::One([(disp, len)]) = runs {
            // Contiguous at the target: one put, nothing to list.
            return Ok(self.rma.put(&data[..len], target.rank, disp)?);
        }
        if let Some(v) = runs.strided().filter(|v| self.one_op_for(target.rank, v)) {
            let layout = Layout::strided(v.count, v.block, v.stride);
            let all = Layout::contiguous(data.len());
            return Ok(self
                .rma
                .put_strided(&data, all, target.rank, v.disp, layout)?);
        }
        let mut at = 0;
        for &(disp, len) in runs.as_slice().iter() {
            self.rma.put(&data[at..at + len], target.rank, disp)?;
            at += len;
        }
        Ok(())
    }

    /// Whether one strided op beats one op per block for the pattern `v` toward
    /// `target`: where strided ops run natively in their call (shared memory), where
    /// every op travels as active messages anyway (windows over the application's
    /// memory, dynamic ones: a block each would be a message each), and for small blocks
    /// (one message instead of a native op per block).
    fn one_op_for(&self, target: Rank, v: &Strided) -> bool {
        v.block <= SMALL_BLOCK
            || self.rma.strided_is_native(target)
            || self.is_dynamic()
            || self.flavor() == int!(MPI_WIN_FLAVOR_CREATE)
    }

    /// MPI_Put_notify (the MPI Forum's draft) and MPIX_Put_notify (Intel MPI's): a put
    /// that the target's notification counter `index` counts once its data is there.
    /// The target's datatype must be contiguous (the count rides on one op); the origin's
    /// may be anything. A count of 0 is a notification alone.
    pub fn put_notify(&self, origin: &Buffer, target: &Target, index: u32) -> MpiResult<()> {
        let data = origin.packed()?;
        Self::same_size(data.len(), target)?;
        let (disp, len) = self.notified_run(target)?;
        Ok(self
            .rma
            .put_notify(&data[..len], target.rank, disp, index)?)
    }

    /// MPI_Get_notify and MPIX_Get_notify: a get that the target's counter `index`
    /// counts once its data is read (the target may then reuse it); contiguous at the
    /// target, as [`put_notify`](Self::put_notify).
    pub fn get_notify(
        &self,
        origin: &Buffer,
        target: &Target,
        index: u32,
    ) -> MpiResult<Option<Shared>> {
        let n = origin.bytes()?;
        Self::same_size(n, target)?;
        let (disp, len) = self.notified_run(target)?;
        let request = self.rma.get_notify(target.rank, disp, len, index)?;
        let c = Unpack {
            requests: vec![request],
            dst: Dest(origin.addr as *mut u8),
            runs: origin.runs(),
        };
        Ok(Some(self.due(target.rank, Box::new(c))))
    }

    /// The one run of bytes at the target of a notified op.
    fn notified_run(&self, target: &Target) -> MpiResult<(u64, usize)> {
        match self.target_runs(target)? {
            Runs::One([run]) => Ok(run),
            _ => Err(MpiError::new(
                int!(MPI_ERR_TYPE),
                "a notified access needs a contiguous target datatype (its count rides on \
                 one operation)",
            )),
        }
    }

    /// MPI_Rput: a put whose request completes with the window's ops (rma completes
    /// our copy of the origin in the call).
    #[inline]
    pub fn rput(&self, origin: &Buffer, target: &Target) -> MpiResult<Option<Shared>> {
        self.put(origin, target).map(|()| None)
    }

    /// MPI_Put of `n` bytes at `addr` to `disp` of `rank`, contiguous on both sides
    /// (the caller found one predefined datatype and one count on both).
    #[inline(always)]
    pub fn put_contiguous(
        &self,
        addr: *const u8,
        n: usize,
        rank: Rank,
        disp: i64,
    ) -> MpiResult<Option<Shared>> {
        self.check_rank(rank)?;
        let at = self.byte_disp(rank, disp)?;
        if n >= HELD_OPS_FROM {
            return self.put_held(addr, n, rank, at);
        }
        // SAFETY: MPI's contract for an origin buffer: `n` bytes at `addr` (`count`
        // contiguous items) are readable during the call.
        let data = unsafe { std::slice::from_raw_parts(addr, n) };
        self.rma.put(data, rank, at)?;
        Ok(None)
    }

    /// A large contiguous put from the application's buffer as a buffer the put holds
    /// ([`OriginSource`]), to byte `at` of `rank`'s window: out of line. Due (MPI_Rput's
    /// request, too) until it is complete at the origin.
    #[inline(never)]
    fn put_held(
        &self,
        addr: *const u8,
        n: usize,
        rank: Rank,
        at: u64,
    ) -> MpiResult<Option<Shared>> {
        let source = OriginSource { ptr: addr, len: n };
        let request = self.rma.put_from_buffer(source, rank, at)?;
        self.held_due(rank, request)
    }

    /// A held op's request ([`Held`]): finished now if it is complete, else due.
    fn held_due<B: Send + 'static>(
        &self,
        rank: Rank,
        request: rma::Request<B>,
    ) -> MpiResult<Option<Shared>> {
        if request.test()? {
            request.wait()?;
            return Ok(None);
        }
        Ok(Some(self.due(rank, Box::new(Held(Some(request))))))
    }

    /// MPI_Put_notify (and MPIX_Put_notify) of `n` bytes at `addr` to `disp` of `rank`,
    /// counted by `rank`'s counter `index`, contiguous on both sides (as
    /// [`put_contiguous`](Self::put_contiguous)).
    #[inline(always)]
    pub fn put_notify_contiguous(
        &self,
        addr: *const u8,
        n: usize,
        rank: Rank,
        disp: i64,
        index: u32,
    ) -> MpiResult<()> {
        self.check_rank(rank)?;
        let at = self.byte_disp(rank, disp)?;
        // SAFETY: as `put_contiguous`'s: `n` readable bytes at `addr` during the call.
        let data = unsafe { std::slice::from_raw_parts(addr, n) };
        Ok(self.rma.put_notify(data, rank, at, index)?)
    }

    /// MPI_Accumulate of `n` bytes at `addr` (elements of code `code`) to `disp` of
    /// `rank`, contiguous on both sides.
    #[inline(always)]
    pub fn accumulate_contiguous(
        &self,
        addr: *const u8,
        n: usize,
        flat: &Flat,
        op: AccOp,
        rank: Rank,
        disp: i64,
    ) -> MpiResult<()> {
        self.check_rank(rank)?;
        if op == AccOp::NoOp {
            return Ok(());
        }
        let at = self.byte_disp(rank, disp)?;
        // SAFETY: as `put_contiguous`'s: `n` readable bytes at `addr` during the call.
        let data = unsafe { std::slice::from_raw_parts(addr, n) };
        by_element!(self, bitwise(flat.code, op, data, flat.wide)?, |view: E| {
            Ok(view.accumulate(&elements::<E>(data), op, rank, at)?)
        })
    }

    /// MPI_Get (and MPI_Rget) of `n` bytes into `addr` from `disp` of `rank`,
    /// contiguous on both sides: `None` when the data is in place already.
    #[inline(always)]
    pub fn get_contiguous(
        &self,
        addr: *const u8,
        n: usize,
        rank: Rank,
        disp: i64,
    ) -> MpiResult<Option<Shared>> {
        self.check_rank(rank)?;
        let at = self.byte_disp(rank, disp)?;
        if n >= HELD_OPS_FROM {
            return self.get_held(addr, n, rank, at);
        }
        // SAFETY: MPI's contract for a get's origin buffer: `n` writable bytes at `addr`,
        // not accessed by the application until the get completes (the borrow lives in
        // the completion until then).
        let buf: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, n) };
        let into = self.rma.get_into(rank, at, buf)?;
        self.landed_or_due(rank, into)
    }

    /// A large contiguous get into the application's buffer as a buffer the get holds
    /// ([`OriginBuffer`]), at byte `at` of `rank`'s window: out of line.
    #[inline(never)]
    fn get_held(
        &self,
        addr: *const u8,
        n: usize,
        rank: Rank,
        at: u64,
    ) -> MpiResult<Option<Shared>> {
        let buf = OriginBuffer {
            ptr: addr as *mut u8,
            len: n,
        };
        let request = self.rma.get_into_buffer(rank, at, buf)?;
        self.held_due(rank, request)
    }

    /// MPI_Get (and MPI_Rget): `None` when the data is in place already.
    pub fn get(&self, origin: &Buffer, target: &Target) -> MpiResult<Option<Shared>> {
        let n = origin.bytes()?;
        Self::same_size(n, target)?;
        let all_runs = self.target_runs(target)?;
        let regular = all_runs
            .strided()
            .filter(|v| self.one_op_for(target.rank, v));
        if let (true, Runs::One([(disp, _)])) =
            (origin.flat.contiguous(origin.count) && n > 0, &all_runs)
        {
            if n >= HELD_OPS_FROM {
                return self.get_held(origin.addr, n, target.rank, *disp);
            }
            // SAFETY: MPI's contract for a get's origin buffer: `n` writable bytes at
            // `addr`, not accessed by the application until the get completes (the
            // borrow lives in the completion until then).
            let buf: &'static mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(origin.addr as *mut u8, n) };
            let into = self.rma.get_into(target.rank, *disp, buf)?;
            return self.landed_or_due(target.rank, into);
        }
        if let (true, Some(v)) = (origin.flat.contiguous(origin.count) && n > 0, regular) {
            // SAFETY: as above: `n` writable bytes at `addr`, the application's until the
            // get completes.
            let buf: &'static mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(origin.addr as *mut u8, n) };
            let layout = Layout::strided(v.count, v.block, v.stride);
            let into = self
                .rma
                .get_strided_into(target.rank, v.disp, layout, buf)?;
            return self.landed_or_due(target.rank, into);
        }
        let mut requests = Vec::new();
        match regular {
            Some(v) => {
                let layout = Layout::strided(v.count, v.block, v.stride);
                requests.push(self.rma.get_strided(target.rank, v.disp, layout)?);
            }
            None => {
                for &(disp, len) in all_runs.as_slice().iter() {
                    requests.push(self.rma.get(target.rank, disp, len)?);
                }
            }
        }
        let c = Unpack {
            requests,
            dst: Dest(origin.addr as *mut u8),
            runs: origin.runs(),
        };
        Ok(Some(self.due(target.rank, Box::new(c))))
    }

    /// MPI_Accumulate (and MPI_Raccumulate).
    pub fn accumulate(&self, origin: &Buffer, op: AccOp, target: &Target) -> MpiResult<()> {
        if op == AccOp::NoOp {
            self.check_rank(target.rank)?;
            return Ok(());
        }
        if origin.bytes()? == 0 {
            // Nothing to apply, whatever the datatypes (MPI allows zero counts of any).
            self.check_rank(target.rank)?;
            return Self::same_size(0, target);
        }
        let data = origin.packed()?;
        Self::same_size(data.len(), target)?;
        let wide = origin.flat.wide || target.flat.wide;
        let code = bitwise(
            Self::element_code(&origin.flat, &target.flat)?,
            op,
            &data,
            wide,
        )?;
        let runs = self.target_runs(target)?;
        let regular = runs.strided().filter(|v| self.one_op_for(target.rank, v));
        by_element!(self, code, |view: E| {
            let size = std::mem::size_of::<E>();
            if let Some(v) = regular.filter(|v| v.block % size == 0 && v.stride % size == 0) {
                // One op for the whole vector: blocks and stride in elements.
                let all = elements::<E>(&data);
                let layout = Layout::strided(v.count, v.block / size, v.stride / size);
                let origin_layout = Layout::contiguous(all.len());
                view.accumulate_strided(&all, origin_layout, op, target.rank, v.disp, layout)?;
                return Ok(());
            }
            let mut at = 0;
            for &(disp, len) in runs.as_slice().iter() {
                let chunk = elements::<E>(&data[at..at + len]);
                view.accumulate(&chunk, op, target.rank, disp)?;
                at += len;
            }
            Ok(())
        })
    }

    /// MPI_Get_accumulate (and MPI_Rget_accumulate): the target's data before the
    /// operation lands in `result`.
    pub fn get_accumulate(
        &self,
        origin: &Buffer,
        result: &Buffer,
        op: AccOp,
        target: &Target,
    ) -> MpiResult<Option<Shared>> {
        let n = result.bytes()?;
        Self::same_size(n, target)?;
        if n == 0 {
            self.check_rank(target.rank)?;
            return Ok(None);
        }
        let code = Self::element_code(&result.flat, &target.flat)?;
        let data = if op == AccOp::NoOp {
            Cow::Owned(vec![0; n])
        } else {
            Self::element_code(&origin.flat, &target.flat)?;
            let d = origin.packed()?;
            Self::same_size(d.len(), target)?;
            d
        };
        let wide = origin.flat.wide || result.flat.wide || target.flat.wide;
        let code = bitwise(code, op, &data, wide)?;
        let runs = self.target_runs(target)?;
        by_element!(self, code, |view: E| {
            if let (Runs::One([(disp, _)]), true) = (&runs, result.flat.contiguous(result.count)) {
                if (result.addr as usize).is_multiple_of(std::mem::align_of::<E>()) {
                    // Contiguous on both sides, the result buffer aligned for its
                    // elements: the previous values land in it (at once on shared memory),
                    // nothing to unpack, nothing due unless the op is under way.
                    // SAFETY: MPI's contract for a result buffer: `n` writable bytes at
                    // `addr`, not accessed by the application until the op completes (the
                    // borrow lives in the completion until then); aligned for `E` (checked).
                    let dst: &'static mut [E] = unsafe {
                        std::slice::from_raw_parts_mut(
                            result.addr as *mut E,
                            n / std::mem::size_of::<E>(),
                        )
                    };
                    let chunk = elements::<E>(&data);
                    let into = view.get_accumulate_into(&chunk, op, target.rank, *disp, dst)?;
                    return self.landed_or_due(target.rank, into);
                }
            }
            let mut requests = Vec::with_capacity(runs.as_slice().len());
            let mut at = 0;
            for &(disp, len) in runs.as_slice().iter() {
                let chunk = elements::<E>(&data[at..at + len]);
                requests.push(view.get_accumulate(&chunk, op, target.rank, disp)?);
                at += len;
            }
            let c = Unpack {
                requests,
                dst: Dest(result.addr as *mut u8),
                runs: result.runs(),
            };
            Ok(Some(self.due(target.rank, Box::new(c))))
        })
    }

    /// MPI_Get_accumulate (and MPI_Rget_accumulate) of `n` bytes at `addr` (elements of
    /// the predefined `flat`), the previous values into `n` bytes at `result`, both
    /// contiguous, as the target: straight to the window's op where the result buffer
    /// is aligned for its elements, the general path otherwise.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn get_accumulate_contiguous(
        &self,
        addr: *const u8,
        result: *mut u8,
        n: usize,
        flat: &'static Flat,
        op: AccOp,
        rank: Rank,
        disp: i64,
    ) -> MpiResult<Option<Shared>> {
        self.check_rank(rank)?;
        let at = self.byte_disp(rank, disp)?;
        // SAFETY: MPI's contract for an origin buffer: `n` readable bytes at `addr`
        // during the call.
        let data = unsafe { std::slice::from_raw_parts(addr, n) };
        by_element!(self, bitwise(flat.code, op, data, flat.wide)?, |view: E| {
            let size = std::mem::size_of::<E>();
            if !(result as usize).is_multiple_of(std::mem::align_of::<E>())
                || !n.is_multiple_of(size)
            {
                return self.get_accumulate_described(addr, result, n, flat, op, rank, disp);
            }
            // SAFETY: MPI's contract for a result buffer: `n` writable bytes at `result`,
            // not accessed by the application until the op completes (the borrow lives
            // in the completion until then); aligned for `E` (checked).
            let dst: &'static mut [E] =
                unsafe { std::slice::from_raw_parts_mut(result.cast::<E>(), n / size) };
            let into = view.get_accumulate_into(&elements::<E>(data), op, rank, at, dst)?;
            self.landed_or_due(rank, into)
        })
    }

    /// [`get_accumulate_contiguous`](Self::get_accumulate_contiguous) through the
    /// general path (a result buffer not aligned for its elements).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn get_accumulate_described(
        &self,
        addr: *const u8,
        result: *mut u8,
        n: usize,
        flat: &'static Flat,
        op: AccOp,
        rank: Rank,
        disp: i64,
    ) -> MpiResult<Option<Shared>> {
        let count = n / flat.size;
        let buffer = |addr: *const u8| Buffer {
            addr,
            count,
            flat: FlatRef::Predefined(flat),
        };
        let target = Target {
            rank,
            disp,
            count,
            flat: FlatRef::Predefined(flat),
        };
        self.get_accumulate(&buffer(addr), &buffer(result.cast_const()), op, &target)
    }

    /// MPI_Fetch_and_op: one element of a predefined datatype.
    pub fn fetch_and_op(
        &self,
        origin: *const u8,
        result: *mut u8,
        flat: &Flat,
        op: AccOp,
        target: Rank,
        disp: i64,
    ) -> MpiResult<()> {
        self.check_rank(target)?;
        if flat.code == 0 && matches!(op, AccOp::NoOp | AccOp::Replace) {
            // A datatype rma has no element for (long double, a pair type): an atomic
            // read or swap moves its bits, as get_accumulate does.
            return self.fetch_bits(origin, result, flat, op, target, disp);
        }
        let at = self.byte_disp(target, disp)?;
        by_element!(self, flat.code, |view: E| {
            let value: E = if op == AccOp::NoOp || origin.is_null() {
                E::zeroed()
            } else {
                // SAFETY: MPI's contract: one element of the datatype at `origin`.
                unsafe { std::ptr::read_unaligned(origin.cast::<E>()) }
            };
            let mut old = E::zeroed();
            match view.fetch_and_op_into(value, op, target, at, &mut old)? {
                None => land_now(old, result),
                Some(request) => self.land_one(target, request, result),
            }
        })
    }

    /// fetch_and_op of one element of a datatype with no rma element type, for MPI_NO_OP
    /// and MPI_REPLACE: get_accumulate of its bits.
    fn fetch_bits(
        &self,
        origin: *const u8,
        result: *mut u8,
        flat: &Flat,
        op: AccOp,
        target: Rank,
        disp: i64,
    ) -> MpiResult<()> {
        if flat.wide {
            return Err(would_tear());
        }
        let one = |addr: *const u8| Buffer {
            addr,
            count: 1,
            flat: FlatRef::Predefined(bits_of(flat.size)),
        };
        let origin = if op == AccOp::NoOp {
            Buffer {
                addr: std::ptr::null(),
                count: 0,
                flat: crate::datatype::nothing(),
            }
        } else {
            one(origin)
        };
        let t = Target {
            rank: target,
            disp,
            count: 1,
            flat: FlatRef::Predefined(bits_of(flat.size)),
        };
        self.get_accumulate(&origin, &one(result), op, &t).map(drop)
    }

    /// MPI_Compare_and_swap.
    pub fn compare_and_swap(
        &self,
        origin: *const u8,
        compare: *const u8,
        result: *mut u8,
        flat: &Flat,
        target: Rank,
        disp: i64,
    ) -> MpiResult<()> {
        self.check_rank(target)?;
        let at = self.byte_disp(target, disp)?;
        by_element!(self, flat.code, |view: E| {
            // SAFETY: MPI's contract: one element of the datatype at each.
            let (swap, expected) = unsafe {
                (
                    std::ptr::read_unaligned(origin.cast::<E>()),
                    std::ptr::read_unaligned(compare.cast::<E>()),
                )
            };
            let mut old = E::zeroed();
            match view.compare_and_swap_into(expected, swap, target, at, &mut old)? {
                None => land_now(old, result),
                Some(request) => self.land_one(target, request, result),
            }
        })
    }

    fn land_one<E: Element>(
        &self,
        target: Rank,
        request: Request<E>,
        result: *mut u8,
    ) -> MpiResult<()> {
        let mut c = One {
            request: Some(request),
            dst: Dest(result),
        };
        if c.test()? {
            // Done in the call (shared memory's atomics): the value lands now, with
            // nothing boxed.
            return c.land().map_err(Into::into);
        }
        self.due(target, Box::new(c));
        Ok(())
    }

    /// A get (or get_accumulate) into the application's buffer: done when it landed in
    /// its call or completes now, else due at the synchronization that completes it.
    #[inline(always)]
    fn landed_or_due<E: Element>(
        &self,
        target: Rank,
        into: rma::GetInto<'static, E>,
    ) -> MpiResult<Option<Shared>> {
        if into.landed() {
            // Nothing pending, so nothing to drop: forgotten rather than dropped, which
            // was a call per get on shared memory.
            std::mem::forget(into);
            return Ok(None);
        }
        self.due_unless_done(target, into)
    }

    /// [`landed_or_due`](Self::landed_or_due) of a get still under way: out of line.
    #[inline(never)]
    fn due_unless_done<E: Element>(
        &self,
        target: Rank,
        into: rma::GetInto<'static, E>,
    ) -> MpiResult<Option<Shared>> {
        if into.test()? {
            into.wait()?;
            return Ok(None);
        }
        Ok(Some(self.due(target, Box::new(IntoBuffer(Some(into))))))
    }

    /// Finishes the completions due for `target` (`None`: all), after a synchronization
    /// that completed them.
    #[inline]
    pub fn finish_due(&self, target: Option<Rank>) -> MpiResult<()> {
        if !self.any_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        self.finish_pending(target)
    }

    /// [`finish_due`](Self::finish_due) where requests are pending, out of line: the
    /// common call (nothing pending) is one load in its caller.
    #[inline(never)]
    fn finish_pending(&self, target: Option<Rank>) -> MpiResult<()> {
        let due: Vec<Shared> = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.is_empty() {
                self.any_pending.store(false, Ordering::Release);
                return Ok(());
            }
            let due = match target {
                None => p.drain(..).map(|(_, s)| s).collect(),
                Some(t) => {
                    let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(r, _)| *r == t);
                    *p = rest;
                    mine.into_iter().map(|(_, s)| s).collect()
                }
            };
            if p.is_empty() {
                self.any_pending.store(false, Ordering::Release);
            }
            due
        };
        let mut first = Ok(());
        for s in due {
            if let Err(e) = crate::request::finish(&s) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// Contiguous gets and puts of at least this many bytes go into or from the
/// application's buffer as a buffer the op holds ([`OriginBuffer`], [`OriginSource`];
/// rma's `Window::get_into_buffer` and `Window::put_from_buffer`): where the backend
/// reads into or writes from such buffers natively (libfabric: gets from 128 KiB, puts
/// from 16 KiB), many stay in flight, none waiting in its call nor copied; on shared
/// memory such an op is the same copy in the call as a borrowed one's. Smaller ones keep
/// the borrowed calls, whose shared-memory paths cost fewer instructions.
const HELD_OPS_FROM: usize = 64 * 1024;

/// An MPI_Put's origin buffer: MPI's contract gives it to the library, unchanged, until
/// the put completes at the origin, so the put may hold it as its own source
/// ([`rma::PutBuffer`]).
struct OriginSource {
    ptr: *const u8,
    len: usize,
}

// SAFETY: an OriginSource is the one handle on its bytes while the put holds them (it is
// never copied), and they are only read; moving it to another thread (the progress
// agent's completion) moves that claim, as moving a `Vec<u8>` would.
unsafe impl Send for OriginSource {}

impl rma::PutBuffer for OriginSource {
    fn bytes(&self) -> &[u8] {
        // SAFETY: MPI's contract for a put's origin buffer: `len` readable bytes at `ptr`,
        // not modified by the application until the put completes at the origin, which is
        // when this handle comes back to us from the request's wait (or is dropped with
        // the request); the slice borrows the handle.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// An MPI_Get's origin buffer: MPI's contract gives it to the library until the get
/// completes, so the get may hold it as its own ([`rma::GetBuffer`]).
struct OriginBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: an OriginBuffer is the one handle on its bytes while the get holds them (it is
// never copied); moving it to another thread (the progress agent's completion) moves
// that claim, as moving a `Vec<u8>` would.
unsafe impl Send for OriginBuffer {}

impl rma::GetBuffer for OriginBuffer {
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: MPI's contract for a get's origin buffer: `len` writable bytes at
        // `ptr`, not accessed by the application until the get completes, which is
        // when this handle comes back to us from the request's wait (or is dropped with
        // the request); the slice borrows the handle.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A contiguous get into or put from the application's buffer, held by the op
/// ([`OriginBuffer`], [`OriginSource`]) until its request hands it back.
struct Held<B>(Option<rma::Request<B>>);

impl<B: Send + 'static> Completion for Held<B> {
    fn test(&mut self) -> rma::Result<bool> {
        self.0.as_ref().map_or(Ok(true), |r| r.test())
    }
    fn finish(mut self: Box<Self>) -> rma::Result<()> {
        match self.0.take() {
            Some(r) => r.wait().map(drop),
            None => Ok(()),
        }
    }
}

/// A contiguous get (or get_accumulate) straight into the application's buffer.
struct IntoBuffer<E: Element>(Option<rma::GetInto<'static, E>>);

impl<E: Element> Completion for IntoBuffer<E> {
    fn test(&mut self) -> rma::Result<bool> {
        self.0.as_ref().map_or(Ok(true), |g| g.test())
    }
    fn finish(mut self: Box<Self>) -> rma::Result<()> {
        match self.0.take() {
            Some(g) => g.wait().map(drop),
            None => Ok(()),
        }
    }
}

/// Results of runs, scattered into the application's buffer along its runs.
struct Unpack<E: Element> {
    requests: Vec<Request<Vec<E>>>,
    dst: Dest,
    runs: Vec<(isize, usize)>,
}

impl<E: Element> Completion for Unpack<E> {
    fn test(&mut self) -> rma::Result<bool> {
        for r in &self.requests {
            if !r.test()? {
                return Ok(false);
            }
        }
        Ok(true)
    }
    fn finish(self: Box<Self>) -> rma::Result<()> {
        let mut bytes: Vec<u8> = Vec::new();
        for r in self.requests {
            bytes.extend_from_slice(bytemuck::cast_slice(&r.wait()?));
        }
        let mut at = 0;
        for (off, len) in self.runs {
            let n = len.min(bytes.len().saturating_sub(at));
            // SAFETY: MPI's contract for a result buffer: the runs of its datatype are
            // writable and untouched by the application until the op completes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes[at..].as_ptr(), self.dst.0.offset(off), n)
            };
            at += len;
        }
        Ok(())
    }
}

/// One fetched element (fetch_and_op, compare_and_swap).
struct One<E: Element> {
    request: Option<Request<E>>,
    dst: Dest,
}

impl<E: Element> Completion for One<E> {
    fn test(&mut self) -> rma::Result<bool> {
        self.request.as_ref().map_or(Ok(true), Request::test)
    }
    fn finish(mut self: Box<Self>) -> rma::Result<()> {
        self.land()
    }
}

impl<E: Element> One<E> {
    /// Waits for the element and writes it to the application's result address.
    fn land(&mut self) -> rma::Result<()> {
        if let Some(r) = self.request.take() {
            let value = r.wait()?;
            // SAFETY: MPI's contract: one element of the datatype is writable at the
            // result address until the op completes.
            unsafe { std::ptr::write_unaligned(self.dst.0.cast::<E>(), value) };
        }
        Ok(())
    }
}
