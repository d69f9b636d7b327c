//! The contract between the engine and a backend: what a backend can do natively
//! ([`Capabilities`]), the window memory it provides ([`Segment`]), and the byte moving
//! and completion reporting the engine asks of it ([`Transport`]).
//!
//! The engine decides what to send and when; a backend only moves bytes and reports
//! completions. A backend never decides when an epoch ends.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::datatype::{AccOp, DataType, Element};
use crate::error::TransportError;
use crate::per_rank::PerRank;
use crate::Rank;

/// What a backend does natively toward one target. The engine picks, per operation, the
/// native path where this allows it and an active message otherwise, in a fixed order:
/// native first, then active message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Puts complete without the target's help (RDMA write, shared-memory store).
    pub rdma_write: bool,
    /// Gets complete without the target's help.
    pub rdma_read: bool,
    /// Which (accumulate op, datatype) pairs of plain numbers run natively as (fetching)
    /// atomics: bit `(op - 1) * 10 + (datatype - 1)` of the wire codes (ops 1 to 12,
    /// datatypes 1 to 10).
    pub atomics: u128,
    /// The operations on elements no CPU or network atomic takes
    /// ([`DataType::updated_whole`]: the (value, location) pairs of MINLOC and MAXLOC,
    /// long double) run natively, each element updated whole against every other such
    /// update of the window (rma-shm: under the target window's accumulate lock, which
    /// its own application of active messages takes too).
    pub locked_atomics: bool,
    /// Datatypes whose compare-and-swap runs natively: bit `datatype`.
    pub compare_and_swap: u16,
    /// Largest payload sent inline with the request (no completion needed for the buffer).
    pub inject_size: usize,
    /// Largest active message the backend carries.
    pub max_message: usize,
    /// Processes on this target share memory with us (load/store on its window).
    pub shared_memory: bool,
    /// Passive-target locks are taken and released by the backend
    /// ([`Transport::try_lock`]) without the target's help: no lock messages.
    pub native_locks: bool,
    /// Gets can complete within the call, straight into the caller's buffer
    /// ([`Transport::get_into`]: a copy from mapped memory, or a large read the call
    /// waits for): the engine asks there first, and the backend may decline.
    pub get_in_call: bool,
    /// Most elements one native (fetching) atomic takes (a provider's `fi_atomicvalid`
    /// count); a larger accumulate goes as active messages.
    pub max_atomic_elements: usize,
    /// Native puts are ordered before messages: a put toward a target is placed in its
    /// memory before any message sent to that target after it is delivered there (a
    /// byte stream per pair that the target's provider reads in order, as libfabric's tcp
    /// providers do). Such a backend reports a put [`Issued::Complete`] once it owns the
    /// data (the origin's buffer is free), not when it is placed: the engine then
    /// completes it at the target with the next message it sends there (an RMA_DONE,
    /// unlock, PSCW complete or fence barrier message), as it does active messages,
    /// instead of waiting for the put before sending that message; a flush with nothing
    /// else outstanding waits for [`Transport::ordered_puts_delivered`] instead. A later
    /// failure of such a put is reported as the peer's ([`Event::PeerFailed`]).
    pub ordered_puts: bool,
    /// Puts of at least this many bytes may carry a notification
    /// ([`Transport::put_notified`]): the target's transport reports it
    /// ([`Event::Notified`]) once the put's data is in the target's memory, so one native
    /// operation is a notified put (RDMA WRITE with immediate data on verbs, a write with
    /// remote CQ data on libfabric). Smaller notified puts go as active messages (where
    /// one message is cheaper than a write that notifies). Window ids and counter indexes
    /// below [`NOTICE_LIMIT`] only. `usize::MAX`: never.
    pub notified_puts_from: usize,
    /// Gets of at least this many bytes into a buffer their request owns
    /// ([`Window::get_owned`](crate::Window::get_owned)) are read straight into it while
    /// it is lent to the backend ([`Transport::get_lent`]), many in flight together,
    /// rather than each completed in its call ([`get_in_call`](Self::get_in_call)) or
    /// read into a buffer of the backend's and copied. `usize::MAX`: never.
    pub lent_gets_from: usize,
    /// Puts of at least this many bytes from a buffer their request holds
    /// ([`Window::put_from_buffer`](crate::Window::put_from_buffer)) are written straight
    /// from it while it is lent to the backend ([`Transport::put_lent`]), many in flight
    /// together, each complete at the target when its completion comes. `usize::MAX`:
    /// never.
    pub lent_puts_from: usize,
}

/// Window ids and notification counter indexes below this go with a notified put
/// ([`Capabilities::notified_puts_from`]): 16 bits each, the 32 bits of an RDMA WRITE's
/// immediate data.
pub const NOTICE_LIMIT: u32 = 1 << 16;

impl Capabilities {
    /// Nothing native: every operation is an active message.
    pub const ACTIVE_MESSAGES_ONLY: Capabilities = Capabilities {
        rdma_write: false,
        rdma_read: false,
        atomics: 0,
        compare_and_swap: 0,
        inject_size: 0,
        max_message: 1 << 20,
        shared_memory: false,
        native_locks: false,
        get_in_call: false,
        locked_atomics: false,
        max_atomic_elements: usize::MAX,
        ordered_puts: false,
        notified_puts_from: usize::MAX,
        lent_gets_from: usize::MAX,
        lent_puts_from: usize::MAX,
    };

    /// The bit for an (op, datatype) pair of plain numbers in [`atomics`](Self::atomics)
    /// (pairs and MINLOC/MAXLOC have [`locked_atomics`](Self::locked_atomics) instead).
    pub const fn atomic_bit(op: AccOp, datatype: DataType) -> u128 {
        // 12 ops x 10 types = 120 bits.
        1u128 << ((op as u32 - 1) * 10 + (datatype as u32 - 1))
    }

    /// Whether (op, datatype) runs natively. Inline: on every atomic's path, where the
    /// datatype is a constant of the caller's element type and the pair and long double
    /// branch folds away.
    #[inline]
    pub const fn has_atomic(&self, op: AccOp, datatype: DataType) -> bool {
        if datatype.updated_whole() || matches!(op, AccOp::MinLoc | AccOp::MaxLoc) {
            return self.locked_atomics && op.valid_for(datatype);
        }
        self.atomics & Self::atomic_bit(op, datatype) != 0
    }

    /// Whether compare-and-swap on the datatype runs natively.
    #[inline]
    pub const fn has_compare_and_swap(&self, datatype: DataType) -> bool {
        self.compare_and_swap & (1 << datatype as u16) != 0
    }

    /// Every (op, datatype) pair the engine defines, as a native-atomics mask.
    pub const fn all_atomics() -> u128 {
        let mut mask = 0;
        let mut op = 1;
        while op <= 12 {
            let mut dt = 1;
            while dt <= 10 {
                // Bitwise and logical ops (5..=10) are integer-only; F32 and F64 are 9, 10.
                let float = dt >= 9;
                let bitwise = op >= 5 && op <= 10;
                if !(float && bitwise) {
                    mask |= 1u128 << ((op - 1) * 10 + (dt - 1));
                }
                dt += 1;
            }
            op += 1;
        }
        mask
    }
}

/// How a native operation went.
#[derive(Debug, PartialEq, Eq)]
pub enum Issued {
    /// Done at the target before the call returned; with the fetched bytes for gets and
    /// fetching atomics.
    Complete(Option<Fetched>),
    /// Under way; an [`Event::Completed`] (or [`Event::Failed`]) with the token follows.
    Pending,
}

/// A native atomic the engine asks for.
#[derive(Debug, Clone, Copy)]
pub enum NativeAtomic<'a> {
    /// `target = op(target, operand)` element-wise; fetch the old values if asked.
    Accumulate {
        /// Operation.
        op: AccOp,
        /// Element type.
        datatype: DataType,
        /// Origin values.
        operand: &'a [u8],
        /// Return the previous target values.
        fetch: bool,
    },
    /// Compare-and-swap of one element, always fetching.
    CompareAndSwap {
        /// Element type.
        datatype: DataType,
        /// Expected value.
        compare: &'a [u8],
        /// New value.
        swap: &'a [u8],
    },
}

impl NativeAtomic<'static> {
    /// One added to a `u64`, fetching nothing: a notification counter's add
    /// ([`WindowOps::add_one_in_call`]).
    pub const ADD_ONE_U64: NativeAtomic<'static> = NativeAtomic::Accumulate {
        op: AccOp::Sum,
        datatype: DataType::U64,
        operand: &ONE_U64,
        fetch: false,
    };
}

/// The operand of [`NativeAtomic::ADD_ONE_U64`].
const ONE_U64: [u8; 8] = 1u64.to_ne_bytes();

impl NativeAtomic<'_> {
    /// Bytes of the target it touches.
    pub fn len(&self) -> usize {
        match self {
            NativeAtomic::Accumulate { operand, .. } => operand.len(),
            NativeAtomic::CompareAndSwap { compare, .. } => compare.len(),
        }
    }
    /// Whether it touches no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The native operations of one window, bound to it (as a UCX endpoint holds its remote
/// key): what [`Transport::window_ops`] gives for a backend whose operations complete
/// within the call (shared memory), so that each of them skips the backend's lookup of
/// the window by id (a lock and a reference count there). The same contract as the
/// transport's methods of the same names; the handle keeps whatever the window's memory
/// needs alive for as long as the engine holds it, so a call after the window is freed
/// is checked like any other, never a use of unmapped memory.
pub trait WindowOps: Send + Sync {
    /// As [`Transport::put`].
    fn put(&self, target: Rank, offset: u64, data: &[u8]) -> Result<Issued, TransportError>;
    /// As [`Transport::get_into`].
    fn get_into(&self, target: Rank, offset: u64, dst: &mut [u8]) -> Result<bool, TransportError>;
    /// A direct put's whole call ([`put`](Self::put) for an op that goes past the
    /// window's op table): `true` once `data` is in `target`'s memory; `false` when
    /// nothing was done (an error, no room now, memory not reached in the call), and
    /// the engine then takes the general path, which reports whatever failed. A `bool`
    /// comes back in a register: the hottest call of a put on shared memory builds no
    /// [`Issued`] or error to be matched (43 instructions of a 222-instruction put +
    /// flush went to `put`'s result).
    fn put_in_call(&self, target: Rank, offset: u64, data: &[u8]) -> bool {
        let _ = (target, offset, data);
        false
    }
    /// A direct get's whole call, as [`put_in_call`](Self::put_in_call): `true` once
    /// `dst` holds the bytes.
    fn get_in_call(&self, target: Rank, offset: u64, dst: &mut [u8]) -> bool {
        let _ = (target, offset, dst);
        false
    }
    /// As [`Transport::atomic`].
    fn atomic(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
    ) -> Result<Issued, TransportError>;
    /// As [`atomic`](Self::atomic) for an atomic that fetches (an accumulate with
    /// `fetch`, a compare-and-swap), completing in the call: the previous values land in
    /// `old` (as long as the operand, one element for a compare-and-swap) rather than in a
    /// [`Fetched`] carried back, so that a fetch_and_op's element goes from the target's
    /// memory to its caller in one copy. `Ok(false)`: not done in the call (nothing was
    /// done; the engine takes [`atomic`](Self::atomic)'s path).
    fn atomic_into(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> Result<bool, TransportError> {
        let _ = (target, offset, atomic, old);
        Ok(false)
    }
    /// A direct fetching atomic's whole call, as [`put_in_call`](Self::put_in_call):
    /// `true` once the atomic is done and the previous values are in `old`; `false` when
    /// nothing was done (the engine then takes its general path, which reports what
    /// failed). An [`atomic_into`](Self::atomic_into) answers in memory (a result of
    /// 40 bytes the caller reads back); this one in a register.
    fn atomic_in_call(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> bool {
        matches!(self.atomic_into(target, offset, atomic, old), Ok(true))
    }
    /// Adds one to the `u64` at `offset` of `target`'s memory, release-ordered, in the
    /// call: a notification counter's add after its op's data (`true` once done;
    /// `false` when nothing was done, and the engine takes
    /// [`atomic`](Self::atomic)'s path, which reports what failed). By default
    /// [`atomic_in_call`](Self::atomic_in_call)'s sum; a backend whose counters are
    /// mapped words does the one add (a notified put's add went through the general
    /// atomic's checks of op, type and lengths: 75 instructions on shared memory).
    fn add_one_in_call(&self, target: Rank, offset: u64) -> bool {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.atomic_in_call(target, offset, NativeAtomic::ADD_ONE_U64, &mut [0u8; 8])
    }
    /// As [`Transport::try_lock`], with acquire ordering: this process's accesses after
    /// a lock taken here cannot move before it (the engine takes it as the MEM_SYNC
    /// that seed 004 puts after PROC_SYNC in WIN_LOCK: no fence of its own).
    fn try_lock(&self, target: Rank, exclusive: bool) -> Result<bool, TransportError>;
    /// As [`Transport::unlock`], with release ordering: this process's accesses before it
    /// are visible to whoever takes the lock next (the MEM_SYNC before PROC_SYNC in
    /// WIN_UNLOCK).
    fn unlock(&self, target: Rank, exclusive: bool) -> Result<(), TransportError>;
    /// [`try_lock`](Self::try_lock) for the lock's hot path, answering in a register
    /// as [`put_in_call`](Self::put_in_call) does: `true` once the lock is taken;
    /// `false` when it is not (busy, or an error: nothing is held), and the engine takes
    /// its general path, which asks [`try_lock`](Self::try_lock) again and reports what
    /// failed.
    fn lock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        matches!(self.try_lock(target, exclusive), Ok(true))
    }
    /// [`unlock`](Self::unlock) for the unlock's hot path: `true` once released; `false`
    /// when nothing was done (an error), and the engine calls [`unlock`](Self::unlock)
    /// for it.
    fn unlock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        self.unlock(target, exclusive).is_ok()
    }
    /// As [`Transport::notify`] (a wait polls [`take_notices`](Self::take_notices) in
    /// its loop, and a PSCW ping-pong is its notices: bound to the window, neither
    /// looks the window up).
    fn notify(&self, rank: Rank, notice: Notice) -> Result<bool, TransportError>;
    /// As [`Transport::take_notices`].
    fn take_notices(&self, from: Rank, notice: Notice) -> u64;
    /// As [`Transport::barrier_arrive`].
    fn barrier_arrive(&self) -> Result<Option<u64>, TransportError>;
    /// As [`Transport::barrier_done`].
    fn barrier_done(&self, ticket: u64) -> Result<bool, TransportError>;
    /// Every native op on this window (these methods and the transport's `get` for
    /// it) completes in its call: never [`Issued::Pending`], never
    /// [`TransportError::Busy`] for lack of room. The engine then lets ops toward a
    /// granted, settled target go straight here, without its op table (a promise
    /// broken is reported as the op's failure, not tracked).
    fn completes_in_call(&self) -> bool {
        false
    }
    /// A strided put (asked only where [`completes_in_call`](Self::completes_in_call)):
    /// `data` in blocks of `block` bytes, `stride` bytes apart from `offset`. By default a
    /// [`put`](Self::put) per block; a backend may check the span once and copy.
    fn put_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        data: &[u8],
    ) -> Result<Issued, TransportError> {
        put_block_by_block(self, target, offset, stride, block, data)
    }
    /// A strided accumulate that fetches nothing: `op` on `datatype` elements, `operand`
    /// in blocks of `block` bytes, `stride` bytes apart from `offset` (as
    /// [`put_blocks`](Self::put_blocks)). By default an [`atomic`](Self::atomic) per
    /// block.
    #[allow(clippy::too_many_arguments)] // the strided extent's parts and the atomic's
    fn accumulate_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        op: AccOp,
        datatype: DataType,
        operand: &[u8],
    ) -> Result<(), TransportError> {
        for (i, chunk) in operand.chunks(block.max(1)).enumerate() {
            let atomic = NativeAtomic::Accumulate {
                op,
                datatype,
                operand: chunk,
                fetch: false,
            };
            if let Issued::Pending = self.atomic(target, offset + i as u64 * stride, atomic)? {
                return Err(TransportError::Failed(
                    "an atomic left pending by a backend whose ops complete in the call".into(),
                ));
            }
        }
        Ok(())
    }
    /// A strided get into `dst`, packed (as [`put_blocks`](Self::put_blocks)); `false`:
    /// not possible in the call. By default a [`get_into`](Self::get_into) per block.
    fn get_blocks(
        &self,
        target: Rank,
        offset: u64,
        stride: u64,
        block: usize,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        get_block_by_block(self, target, offset, stride, block, dst)
    }
    /// Whether these ops reach `len` bytes at `offset` of `target`'s part (for an
    /// `atomic`, with an atomic). Always, but on a dynamic window, where `offset` is an
    /// address in the target process: whether it lies in a region the target has
    /// attached and published to this backend, reachable so (the engine sends the op as
    /// an active message otherwise, and the target checks it).
    fn reaches(&self, target: Rank, offset: u64, len: u64, atomic: bool) -> bool {
        let _ = (target, offset, len, atomic);
        true
    }
}

/// [`WindowOps::put_blocks`] by default: a [`WindowOps::put`] per block (for a backend's
/// override to fall back on where it has no faster way).
pub fn put_block_by_block<W: WindowOps + ?Sized>(
    ops: &W,
    target: Rank,
    offset: u64,
    stride: u64,
    block: usize,
    data: &[u8],
) -> Result<Issued, TransportError> {
    for (i, chunk) in data.chunks(block.max(1)).enumerate() {
        if let Issued::Pending = ops.put(target, offset + i as u64 * stride, chunk)? {
            return Err(TransportError::Failed(
                "a put left pending by a backend whose ops complete in the call".into(),
            ));
        }
    }
    Ok(Issued::Complete(None))
}

/// [`WindowOps::get_blocks`] by default: a [`WindowOps::get_into`] per block.
pub fn get_block_by_block<W: WindowOps + ?Sized>(
    ops: &W,
    target: Rank,
    offset: u64,
    stride: u64,
    block: usize,
    dst: &mut [u8],
) -> Result<bool, TransportError> {
    for (i, chunk) in dst.chunks_mut(block.max(1)).enumerate() {
        if !ops.get_into(target, offset + i as u64 * stride, chunk)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Bytes a native operation fetched (a get, a fetching atomic): up to
/// [`Fetched::INLINE`] of them inline, without an allocation (an atomic's 8 bytes, a small
/// get), more on the heap. A latency loop of small gets then allocates nothing per
/// operation between the completion queue and the caller's buffer.
///
/// ```
/// use rma_core::transport::Fetched;
/// let small = Fetched::copy_of(&42u64.to_ne_bytes());
/// assert!(matches!(small, Fetched::Inline { .. }));
/// assert_eq!(small.as_slice(), &42u64.to_ne_bytes());
/// let large = Fetched::copy_of(&[7u8; 100]);
/// assert_eq!(large.len(), 100);
/// assert_eq!(large.into_vec(), vec![7u8; 100]);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum Fetched {
    /// Up to [`Fetched::INLINE`] bytes: the first `len` of `bytes`.
    Inline {
        /// How many of `bytes` were fetched.
        len: u8,
        /// The bytes (the first `len`).
        bytes: InlineBytes,
    },
    /// More bytes.
    Heap(Vec<u8>),
    /// The bytes from `at` to the end of `packet`: a reply by message taken whole, its
    /// header before them, where copying them out would cost more than the header
    /// takes. Its buffer goes back to the transport once they are read
    /// ([`Transport::recycle`]).
    InPacket {
        /// The received packet.
        packet: Vec<u8>,
        /// Where the bytes start in it.
        at: usize,
    },
}

/// [`Fetched`]'s inline bytes, on an 8-byte boundary. Unaligned (a byte array after the
/// enum's tag), a fetched word was stored in one width and copied through the stack in
/// others, on its way from the backend to the caller: store-forwarding stalls, a fifth of
/// a fetch_and_op on shared memory. Aligned, a word goes whole.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[repr(C, align(8))]
pub struct InlineBytes(pub [u8; Fetched::INLINE]);

impl std::ops::Deref for InlineBytes {
    type Target = [u8; Fetched::INLINE];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for InlineBytes {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Fetched {
    /// The most bytes held inline.
    pub const INLINE: usize = 16;

    /// A copy of `data`: inline when it fits.
    #[inline]
    pub fn copy_of(data: &[u8]) -> Self {
        if data.len() <= Self::INLINE {
            let mut bytes = InlineBytes::default();
            bytes[..data.len()].copy_from_slice(data);
            Fetched::Inline {
                len: data.len() as u8,
                bytes,
            }
        } else {
            Fetched::Heap(rma_sync::copy::to_vec(data))
        }
    }

    /// `len` zero bytes to fill in place: inline when they fit.
    pub fn zeroed(len: usize) -> Self {
        if len <= Self::INLINE {
            Fetched::Inline {
                len: len as u8,
                bytes: InlineBytes::default(),
            }
        } else {
            Fetched::Heap(vec![0; len])
        }
    }

    /// The bytes, to fill in place.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Fetched::Inline { len, bytes } => &mut bytes[..usize::from(*len)],
            Fetched::Heap(v) => v,
            Fetched::InPacket { packet, at } => &mut packet[*at..],
        }
    }

    /// The fetched bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Fetched::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Fetched::Heap(v) => v,
            Fetched::InPacket { packet, at } => &packet[*at..],
        }
    }

    /// How many bytes were fetched.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether nothing was fetched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives a buffer of the heap back to `transport` for its next get or message
    /// ([`Transport::recycle_fetched`], [`Transport::recycle`]), once the bytes are read.
    pub fn give_back(self, transport: &dyn Transport) {
        match self {
            Fetched::Inline { .. } => {}
            Fetched::Heap(v) => transport.recycle_fetched(v),
            Fetched::InPacket { packet, .. } => transport.recycle(packet),
        }
    }

    /// The bytes as a vector (no copy when they are on the heap).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Fetched::Inline { .. } => self.as_slice().to_vec(),
            Fetched::Heap(v) => v,
            Fetched::InPacket { packet, at: 0 } => packet,
            Fetched::InPacket { packet, at } => rma_sync::copy::to_vec(&packet[at..]),
        }
    }
}

impl Default for Fetched {
    fn default() -> Self {
        Fetched::Inline {
            len: 0,
            bytes: InlineBytes::default(),
        }
    }
}

impl From<Vec<u8>> for Fetched {
    /// Takes the vector as it is (no copy).
    fn from(v: Vec<u8>) -> Self {
        Fetched::Heap(v)
    }
}

impl std::ops::Deref for Fetched {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Fetched").field(&self.as_slice()).finish()
    }
}

/// A buffer an op's request holds, lent to the backend for the op's one native call: a
/// get's destination ([`Transport::get_lent`]) or a put's source
/// ([`Transport::put_lent`]). While the backend holds it, nothing else can reach the
/// buffer (it is out of its request), so the provider may use it until the op's
/// completion. Dropping it hands it back to the request, whose wait finds it there.
pub struct LentBuf {
    buf: Option<crate::request::Held>,
    len: usize,
    home: std::sync::Arc<crate::request::Landing>,
}

impl LentBuf {
    pub(crate) fn new(
        buf: crate::request::Held,
        len: usize,
        home: std::sync::Arc<crate::request::Landing>,
    ) -> Self {
        LentBuf {
            buf: Some(buf),
            len,
            home,
        }
    }

    /// A get's buffer, for the read to land in (a put's source has no bytes to write:
    /// empty). Their address stays the same while the loan lives (the
    /// [`GetBuffer`](crate::GetBuffer) contract; moving the loan moves a pointer to the
    /// buffer, not the buffer).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut().map_or(&mut [], |b| b.bytes_mut())
    }

    /// The bytes, to read: a put's source (or a get's buffer). At the same address while
    /// the loan lives, and written by nothing.
    pub fn bytes(&mut self) -> &[u8] {
        self.buf.as_mut().map_or(&[], |b| b.bytes())
    }

    /// How many bytes it has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for LentBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.home.restore(buf);
        }
    }
}

impl std::fmt::Debug for LentBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentBuf").field("len", &self.len()).finish()
    }
}

/// What happened in the backend since the last poll.
#[derive(Debug)]
pub enum Event {
    /// An active message arrived.
    Received {
        /// Sender.
        from: Rank,
        /// The packet, to decode with [`wire::decode`](crate::wire::decode).
        data: Vec<u8>,
    },
    /// A native operation completed at the target.
    Completed {
        /// The token it was issued with.
        token: u64,
        /// Fetched bytes (gets, fetching atomics).
        data: Option<Fetched>,
    },
    /// A native operation failed.
    Failed {
        /// The token it was issued with.
        token: u64,
        /// Why.
        error: TransportError,
    },
    /// A notified put's notice ([`Transport::put_notified`]): its data is in this
    /// process's window `win`; counter `index` of that window counts it.
    Notified {
        /// Sender.
        from: Rank,
        /// The window (its id).
        win: u32,
        /// The counter.
        index: u32,
    },
    /// A peer is gone; whatever waits on it must fail.
    PeerFailed {
        /// The peer.
        rank: Rank,
    },
}

/// Window memory that lives in this process and that peers reach through the backend.
///
/// Accesses go through these methods (not raw slices) because peers may touch the same
/// bytes concurrently through the backend's native path.
pub trait Segment: Send + Sync + Any {
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether it has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies bytes out. `offset + dst.len() <= len()` is checked by the engine.
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// Copies bytes in.
    fn write(&self, offset: usize, src: &[u8]);
    /// Read-modify-write of `len` bytes, atomic with respect to this backend's native
    /// atomics on the same window.
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8]));
    /// Read-modify-write of one element of `len` bytes that no atomic takes
    /// ([`DataType::updated_whole`]: a MINLOC/MAXLOC pair, a long double), whole with
    /// respect to the native updates of [`Capabilities::locked_atomics`] on this window
    /// (rma-shm takes the window's accumulate lock). The default is
    /// [`update`](Self::update): right for a backend without such native updates, whose
    /// active messages the engine applies one at a time.
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        self.update(offset, len, f)
    }
    /// Whether no native atomic of any process ever touches this memory (only the
    /// engine's active messages reach it, applied one at a time under the window's state
    /// lock): an accumulate's elements may then be updated as one block, in one
    /// [`update`](Self::update) of all their bytes, where elsewhere each is updated alone
    /// to stay atomic against peers' native atomics. By default false.
    fn only_messages_reach(&self) -> bool {
        false
    }
    /// What a peer needs to reach this memory natively (address, key); exchanged at
    /// window creation.
    fn descriptor(&self) -> Vec<u8>;
    /// Base address for direct load/store by processes that share this memory, if it is
    /// shared memory.
    fn shared_base(&self) -> Option<usize> {
        None
    }
    /// Address of this memory in this process, where the application may load and store
    /// it in place (MPI's window base): `None` where the bytes are not plain memory of
    /// this process (a simulation's).
    fn local_base(&self) -> Option<usize> {
        None
    }
    /// The 8 bytes at `offset` as an atomic, where they are memory of this process that
    /// peers change only by CPU atomics (shared memory): the notification counters of
    /// notified access are read, set and counted through it. `None` (the default): the
    /// engine goes through [`update`](Self::update) and [`read`](Self::read) instead.
    fn atomic_u64(&self, offset: usize) -> Option<&std::sync::atomic::AtomicU64> {
        let _ = offset;
        None
    }
    /// Gives back the user memory a window was created over.
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>>;
}

/// Memory a user hands to a window created over it ([`Engine::create`](crate::Engine::create)).
pub trait UserMemory: Any + Send + Sync {
    /// Its bytes.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// For getting the concrete type back.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Element> UserMemory for Vec<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self.as_mut_slice())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The peer-side facts about one target's window, as the origin keeps them. A rank
/// outside the window's communicator has the default: no bytes, an empty key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Bytes in the target's window.
    pub len: u64,
    /// The target's displacement unit.
    pub disp_unit: u32,
    /// The backend's [`Segment::descriptor`] of the target.
    pub key: Vec<u8>,
}

/// Work a backend's poll loop does now and then (keepalives, checks of the peers'
/// pids): the loop asks [`due`](Periodic::due) every so many polls, with one clock read,
/// and the answer is yes at most once per interval. Counted in polls alone, such work
/// comes as often as the loop spins: every few dozen operations of a latency loop.
///
/// ```
/// use std::time::{Duration, Instant};
/// let pid_check = rma_core::transport::Periodic::new(Duration::from_millis(50));
/// let start = Instant::now();
/// assert!(!pid_check.due(start)); // an interval starts at creation
/// assert!(pid_check.due(start + Duration::from_millis(60)));
/// assert!(!pid_check.due(start + Duration::from_millis(70)));
/// assert!(!rma_core::transport::Periodic::new(Duration::ZERO).due(start)); // zero: never
/// ```
#[derive(Debug)]
pub struct Periodic {
    every: std::time::Duration,
    last: std::sync::Mutex<std::time::Instant>,
}

impl Periodic {
    /// Due once per `every` (never when `every` is zero), the first time `every` after now.
    pub fn new(every: std::time::Duration) -> Self {
        Periodic {
            every,
            last: std::sync::Mutex::new(std::time::Instant::now()),
        }
    }

    /// Whether the interval has passed at `now`; if so, the next one starts at `now`.
    pub fn due(&self, now: std::time::Instant) -> bool {
        if self.every.is_zero() {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(*last) < self.every {
            return false;
        }
        *last = now;
        true
    }
}

/// Per window, what a network backend keeps about each rank's part (registered address,
/// key, length): filled by [`Transport::window_ready`], emptied by
/// [`Transport::window_freed`], read on every native operation. Window ids are small and
/// dense (the engine numbers them in order), so this is a vector indexed by id. Each
/// window's entries are kept in runs of equal ones: where the provider takes the keys the
/// backend asks for and names offsets rather than addresses (libfabric's tcp, `mr_mode`
/// 0), the members of a window of one size have one entry between them, and the table
/// does not grow with the job.
#[derive(Debug)]
pub struct PeerTables<M> {
    windows: std::sync::RwLock<Vec<Option<PerRank<Option<M>>>>>,
}

impl<M: Copy + PartialEq> Default for PeerTables<M> {
    fn default() -> Self {
        PeerTables {
            windows: std::sync::RwLock::new(Vec::new()),
        }
    }
}

impl<M: Copy + PartialEq> PeerTables<M> {
    /// Window `win`'s entries, one per rank (`None`: that rank is reached by active
    /// messages).
    pub fn insert(&self, win: u32, peers: Vec<Option<M>>) {
        let peers = PerRank::new(&peers);
        let mut ws = self.windows.write().unwrap_or_else(|e| e.into_inner());
        if ws.len() <= win as usize {
            ws.resize_with(win as usize + 1, || None);
        }
        ws[win as usize] = Some(peers);
    }

    /// Forgets window `win` (again is fine).
    pub fn remove(&self, win: u32) {
        let mut ws = self.windows.write().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = ws.get_mut(win as usize) {
            *w = None;
        }
    }

    /// `rank`'s entry in window `win`, if the window is known and the rank has one.
    pub fn get(&self, win: u32, rank: Rank) -> Option<M> {
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        ws.get(win as usize)?
            .as_ref()?
            .get_checked(rank)
            .copied()
            .flatten()
    }
}

/// A PSCW synchronization notice ([`Transport::notify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// MPI_Win_post: the target's window is exposed to the origin.
    Post,
    /// MPI_Win_complete: the origin's accesses of the epoch are done.
    Complete,
}

/// Why [`Transport::wait_for_traffic`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Something may have arrived: make a progress pass.
    Traffic,
    /// The timeout passed with nothing seen.
    Timeout,
    /// This transport has no wait object to sleep on.
    NoWaitObject,
}

/// The ranks that allocate one shared segment together
/// ([`Transport::allocate`] for allocate_shared): the members of the window's
/// communicator, with the allgather over them the backend uses to agree on the segment.
pub struct SharedAmong<'a> {
    /// The members' World ranks, in the communicator's order (the order of their parts).
    pub members: &'a [Rank],
    /// This process's index in `members`.
    pub index: usize,
    /// Every member's bytes, in member order; collective over the members.
    pub allgather: &'a MemberAllgather<'a>,
}

/// The allgather over a window's members that [`SharedAmong`] carries.
pub type MemberAllgather<'a> = dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>, TransportError> + 'a;

impl std::fmt::Debug for SharedAmong<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAmong")
            .field("members", &self.members)
            .field("index", &self.index)
            .finish()
    }
}

/// A backend: moves bytes, reports completions, and offers the bootstrap collectives a
/// window needs.
///
/// Contract the engine relies on:
/// - active messages between one pair of ranks are delivered in order, and a rank can
///   send to itself;
/// - a native completion ([`Issued::Complete`] or [`Event::Completed`]) means the
///   operation is complete at the target;
/// - no call keeps a borrowed slice past its return (copy, inject, or complete first);
/// - no call blocks on the progress of other ranks, except the collectives.
pub trait Transport: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// What this backend does natively toward `target`.
    fn capabilities(&self, target: Rank) -> Capabilities;
    /// What it does natively on window `win` toward `target` (for example fewer native
    /// atomics on a window over user memory). Defaults to [`capabilities`](Self::capabilities).
    fn window_capabilities(&self, win: u32, target: Rank) -> Capabilities {
        let _ = win;
        self.capabilities(target)
    }

    /// Allocates window memory of `len` bytes, zeroed. `shared` (allocate_shared) asks for
    /// memory that the ranks it names load and store directly, one segment with their
    /// parts contiguous in their order: collective over them, through its `allgather`.
    fn allocate(
        &self,
        len: usize,
        shared: Option<&SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError>;
    /// Whether windows over user memory should rather live in memory from
    /// [`allocate`](Self::allocate): the engine then copies the user's bytes in at
    /// creation and back at free (the user gave the buffer away for the window's life, so
    /// nothing can tell), and the window gets the native paths of allocated memory. For
    /// backends that reach user memory as fast as their own (RDMA registration), false.
    fn copies_user_memory(&self) -> bool {
        false
    }
    /// Exposes user memory as a window segment.
    fn expose(&self, memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError>;
    /// This rank's part of a new dynamic window for a backend that reaches attached
    /// regions natively: a segment of no bytes whose descriptor tells peers where to
    /// find the regions this rank attaches (what [`region_attached`](Self::region_attached)
    /// publishes), handed to [`window_ready`](Self::window_ready) as `local`. `None` (the
    /// default): the window's ops are active messages, checked by the target.
    fn allocate_dynamic(&self) -> Result<Option<Arc<dyn Segment>>, TransportError> {
        Ok(None)
    }
    /// `segment` (from [`expose`](Self::expose), or [`allocate`](Self::allocate) where
    /// the engine copied an attached `Vec` into the backend's memory) was attached at
    /// `address` to dynamic window `win` (made with an
    /// [`allocate_dynamic`](Self::allocate_dynamic) part): peers may reach it natively
    /// from now on. The engine's own record of the region is in place already.
    fn region_attached(&self, win: u32, address: u64, segment: &Arc<dyn Segment>) {
        let _ = (win, address, segment);
    }
    /// The region at `address` of dynamic window `win` is being detached: peers stop
    /// reaching it natively before its memory goes back to the application.
    fn region_detached(&self, win: u32, address: u64) {
        let _ = (win, address);
    }
    /// Tells the backend the window `win` is made of these segments (one per rank, from
    /// the allgather; `local` is `None` for dynamic windows, or this rank's
    /// [`allocate_dynamic`](Self::allocate_dynamic) part), so that native ops can
    /// reach them. Collective: every rank calls it for the same window, but it must not
    /// block on the others (a rank whose call fails returns at once; the engine then
    /// agrees on every rank's outcome).
    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        remote: &[RemoteSegment],
    ) -> Result<(), TransportError> {
        let _ = (win, local, remote);
        Ok(())
    }
    /// Every rank's [`window_ready`](Self::window_ready) for `win` succeeded (the
    /// engine's agreement on that is a barrier): what had to wait until every peer had
    /// mapped or registered the window happens here (unlinking a segment's name).
    fn window_established(&self, win: u32, local: Option<&Arc<dyn Segment>>) {
        let _ = (win, local);
    }
    /// The native operations of window `win`, bound to it once ([`WindowOps`]), for a
    /// backend that completes them within the call; the engine then calls them instead
    /// of [`put`](Self::put), [`get_into`](Self::get_into) and [`atomic`](Self::atomic)
    /// for this window. Asked once, after [`window_ready`](Self::window_ready). `None`
    /// (the default): the engine uses the transport's methods.
    fn window_ops(&self, win: u32) -> Option<Arc<dyn WindowOps>> {
        let _ = win;
        None
    }
    /// The native ops of window `win` toward the ranks that share memory with this one
    /// (targets are World ranks, as everywhere), each completing in its call: what the
    /// engine's collectives in a node's shared memory run on (`node_collective`), for a
    /// window whose members all share memory. By default [`window_ops`](Self::window_ops)
    /// where they all complete in their call; a backend that reaches only some ranks
    /// through shared memory (the hybrid one) gives its node's.
    fn node_window_ops(&self, win: u32) -> Option<Arc<dyn WindowOps>> {
        self.window_ops(win).filter(|ops| ops.completes_in_call())
    }
    /// The window is freed (or dropped): forget it. May be called more than once.
    fn window_freed(&self, win: u32) {
        let _ = win;
    }

    /// Blocking allgather over all ranks (window creation only).
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError>;
    /// Blocking barrier over all ranks (window creation and free only).
    fn barrier(&self) -> Result<(), TransportError>;

    /// Sends an active message. [`TransportError::Busy`] means try again after polling.
    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError>;
    /// Native put of `data` at `offset` of `target`'s window `win`.
    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError>;
    /// A [`put`](Self::put) in an active-target epoch (fence, PSCW) toward a target with
    /// [`Capabilities::ordered_puts`]: no flush can ask for it, the message that closes
    /// the epoch completes it at the target, so the backend may leave out its delivery
    /// acknowledgement (and [`ordered_puts_delivered`](Self::ordered_puts_delivered) need
    /// not count it).
    fn put_unacknowledged(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.put(win, target, offset, data, token)
    }
    /// A [`put`](Self::put) that carries a notification (asked only for targets whose
    /// capabilities say [`notified_puts_from`](Capabilities::notified_puts_from) `data`'s length, with `win` and
    /// `index` below [`NOTICE_LIMIT`]): the target's poll reports [`Event::Notified`]
    /// once the data is in its memory, after every notified put sent to it before this
    /// one. The put completes at the origin as a plain put does.
    fn put_notified(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        index: u32,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let _ = (win, target, offset, data, index, token);
        Err(TransportError::Unsupported("notified puts"))
    }
    /// Native get of `len` bytes at `offset`.
    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        token: u64,
    ) -> Result<Issued, TransportError>;
    /// Native get straight into `dst`, if the backend can complete it within the call
    /// (a copy from mapped memory; a large read whose completion the call waits for,
    /// rather than reading into a buffer of its own to copy from later). `Ok(false)`:
    /// not done, the engine uses [`get`](Self::get).
    /// Asked only for targets whose capabilities say [`get_in_call`](Capabilities::get_in_call).
    fn get_into(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let _ = (win, target, offset, dst);
        Ok(false)
    }
    /// Native get of `len` bytes at `offset` straight into `loan` (`len` bytes, a buffer
    /// a request owns, lent for the op: [`Capabilities::lent_gets_from`]). A backend that
    /// posts the read takes the loan out of the option and keeps it until the read's
    /// completion, then drops it (which hands the buffer back to its request) before it
    /// reports the completion, with no bytes ([`Event::Completed`]). A backend that does
    /// not take it leaves it, and the get is an ordinary one (this default).
    fn get_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let len = loan.as_ref().map_or(0, LentBuf::len);
        self.get(win, target, offset, len, token)
    }
    /// Native put at `offset` straight from `loan` (a buffer its request holds, lent for
    /// the op: [`Capabilities::lent_puts_from`]). A backend that posts the write takes
    /// the loan out of the option and keeps it until the write's completion, which must
    /// mean the data is in the target's memory, then drops it (handing the buffer back)
    /// before it reports the completion. This default writes the loan's bytes as an
    /// ordinary [`put`](Self::put) and leaves the loan.
    fn put_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        match loan.as_mut() {
            Some(lent) => self.put(win, target, offset, lent.bytes(), token),
            None => Err(TransportError::Busy),
        }
    }
    /// Native atomic at `offset`.
    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        token: u64,
    ) -> Result<Issued, TransportError>;

    /// Tries once to take the passive-target lock of `target`'s window `win` natively
    /// (only with [`Capabilities::native_locks`]). Never blocks.
    fn try_lock(&self, win: u32, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        let _ = (win, target, exclusive);
        Err(TransportError::Unsupported("native locks"))
    }
    /// Releases a lock taken by [`try_lock`](Self::try_lock).
    fn unlock(&self, win: u32, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        let _ = (win, target, exclusive);
        Err(TransportError::Unsupported("native locks"))
    }

    /// Arrives at a barrier of every rank of window `win` that the backend runs itself
    /// (for example counters in shared memory): returns a ticket to test with
    /// [`barrier_done`](Self::barrier_done), or `None` if the backend has no such barrier
    /// for this window (then the engine exchanges barrier messages). The answer must be the
    /// same on every rank. One barrier per window is outstanding at a time.
    fn barrier_arrive(&self, win: u32) -> Result<Option<u64>, TransportError> {
        let _ = win;
        Ok(None)
    }
    /// Whether every rank has arrived at the barrier of `ticket`.
    fn barrier_done(&self, win: u32, ticket: u64) -> Result<bool, TransportError> {
        let _ = (win, ticket);
        Ok(true)
    }

    /// Leaves a PSCW notice ([`Notice`]) for `rank` on window `win` natively (in memory
    /// `rank` reads by itself, no message and no progress of `rank` needed). Ok(false):
    /// not native toward `rank`; the engine sends a message instead. The caller has made
    /// its epoch's accesses visible first (seed 004's MEM_SYNC before PROC_SYNC);
    /// implementations publish the notice with release ordering.
    fn notify(&self, win: u32, rank: Rank, notice: Notice) -> Result<bool, TransportError> {
        let _ = (win, rank, notice);
        Ok(false)
    }

    /// With [`Capabilities::ordered_puts`]: whether every put toward `target` reported
    /// complete so far is placed in its memory (the backend learns it from its own
    /// delivery-complete completions). A flush of puts alone waits for this.
    fn ordered_puts_delivered(&self, target: Rank) -> bool {
        let _ = target;
        true
    }

    /// Takes the notices of kind `notice` that `from` left natively for this process on
    /// window `win` since the last call (acquire ordering): how many.
    fn take_notices(&self, win: u32, from: Rank, notice: Notice) -> u64 {
        let _ = (win, from, notice);
        0
    }

    /// Checks now whether the peers are alive, appending [`Event::PeerFailed`] for the
    /// ones found dead (what [`poll`](Self::poll) does now and then by itself). For a
    /// process blocked outside the engine (in a launcher's collective), whose polls are
    /// too rare for the now-and-then.
    fn check_peers(&self, events: &mut Vec<Event>) {
        let _ = events;
    }

    /// The engine learned that `rank` is dead by other means (a peer's word, the
    /// launcher): nothing more is to be sent to it or awaited from it (a closing
    /// transport does not wait for its goodbye).
    fn peer_gone(&self, rank: Rank) {
        let _ = rank;
    }

    /// Appends what happened since the last call. Returns how many events were added.
    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError>;
    /// What the backend holds toward its peers (queued requests, backlogs, peers known
    /// gone), in one line, for the warning a timed-out call logs: a hang then says
    /// whether the backend or the engine held the step that never came. Empty by
    /// default.
    fn diagnose(&self) -> String {
        String::new()
    }

    /// A packet of an [`Event::Received`] the engine is done with, for the backend to
    /// fill again: an active message of a large op is a piece of up to the largest
    /// message, and a fresh buffer for each was a fresh mapping to fault in (glibc maps
    /// allocations of that size). By default dropped.
    fn recycle(&self, packet: Vec<u8>) {
        drop(packet);
    }

    /// The bytes of an [`Event::Completed`] (a get's result on the heap) the engine has
    /// copied into the caller's buffer, for the backend's next get to read into: a fresh
    /// result buffer per get was fresh pages to fault in and zero (glibc gives freed
    /// memory back to the kernel once enough is free at the heap's top, which a burst
    /// of gets in flight frees at once). By default dropped.
    fn recycle_fetched(&self, bytes: Vec<u8>) {
        drop(bytes);
    }

    /// Whether a thread that waits on this transport (polling for a peer's message or
    /// completion) should give its core up now and then. Yes by default: where the
    /// job's ranks outnumber the node's CPUs, the peer being waited for may need ours.
    /// A transport that knows they do not says no: a yield hands the rest of the time
    /// slice to whatever else runs on the core, and the message waited for sits until
    /// it is back (beside two CPU hogs on 2 cores: put + fence over tcp 3.4 ms yielding,
    /// 42-65 us not; on shared memory 0.36-6.0 us against 0.20).
    fn yields_while_waiting(&self) -> bool {
        true
    }

    /// Whether peers' operations on this process need this process's progress (lock
    /// requests, active messages, replies, connections to accept): where they do, the
    /// engine runs a progress agent by default ([`AsyncProgress`](crate::AsyncProgress)).
    /// False for a transport whose peers reach its memory and locks by themselves.
    fn needs_target_progress(&self) -> bool {
        false
    }

    /// The progress agent's sleep: blocks until traffic may have arrived for this
    /// process or `timeout` passes, whichever is first. [`Wake::Traffic`] asks for a
    /// progress pass; [`Wake::NoWaitObject`] (the default) says this transport has no
    /// wait object, and the agent polls on a timer instead.
    ///
    /// Called by the agent only, while the application is not polling; but an
    /// application thread may start polling during the wait, so an implementation
    /// holds no lock while it blocks, and a wake-up for traffic that thread has already
    /// read is harmless (the agent's pass then finds nothing).
    fn wait_for_traffic(&self, timeout: Duration) -> Result<Wake, TransportError> {
        let _ = timeout;
        Ok(Wake::NoWaitObject)
    }

    /// For a shared window `win`: the address in this process of `rank`'s segment, if
    /// this process can load and store it directly.
    fn shared_base(&self, win: u32, rank: Rank) -> Option<usize> {
        let _ = (win, rank);
        None
    }

    /// A full memory barrier for shared-memory windows (seed 004's MEM_SYNC).
    fn memory_sync(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_tables_keep_alike_entries_once() {
        let tables = PeerTables::<(u64, u64)>::default();
        // libfabric's tcp: offset 0 and the key every rank asked for, on 65,536 ranks.
        tables.insert(3, vec![Some((0, 7)); 65_536]);
        // Addresses and keys of their own (verbs): one entry each.
        let own: Vec<_> = (0..64u64).map(|r| Some((r << 12, r + 100))).collect();
        tables.insert(0, own.clone());
        assert_eq!(tables.get(3, 0), Some((0, 7)));
        assert_eq!(tables.get(3, 65_535), Some((0, 7)));
        assert_eq!(tables.get(3, 65_536), None, "past the job");
        for (rank, entry) in own.iter().enumerate() {
            assert_eq!(tables.get(0, rank as Rank), *entry);
        }
        assert_eq!(tables.get(1, 0), None, "a window never made");
        {
            let ws = tables.windows.read().unwrap();
            assert_eq!(ws[3].as_ref().unwrap().heap_bytes(), 24, "one entry");
        }
        tables.remove(3);
        assert_eq!(tables.get(3, 0), None);
    }

    #[test]
    fn all_atomics_is_every_valid_pair() {
        let all = Capabilities::all_atomics();
        for op in 1..=12 {
            for dt in 1..=10 {
                let (op, dt) = (
                    AccOp::from_code(op).unwrap(),
                    DataType::from_code(dt).unwrap(),
                );
                let caps = Capabilities {
                    atomics: all,
                    ..Capabilities::ACTIVE_MESSAGES_ONLY
                };
                assert_eq!(caps.has_atomic(op, dt), op.valid_for(dt), "{op:?} {dt:?}");
            }
        }
    }

    // The pairs of MINLOC/MAXLOC are native exactly where a backend says it updates them
    // whole (`locked_atomics`), for the ops valid on them, and never through the mask of
    // plain numbers (whose bits would run past 128).
    #[test]
    fn pairs_are_native_only_with_locked_atomics() {
        let with = Capabilities {
            atomics: Capabilities::all_atomics(),
            locked_atomics: true,
            ..Capabilities::ACTIVE_MESSAGES_ONLY
        };
        let without = Capabilities {
            locked_atomics: false,
            ..with
        };
        for op in (1..=14).filter_map(AccOp::from_code) {
            for dt in (1..=19).filter_map(DataType::from_code) {
                let pairs = dt.updated_whole() || matches!(op, AccOp::MinLoc | AccOp::MaxLoc);
                assert_eq!(with.has_atomic(op, dt), op.valid_for(dt), "{op:?} {dt:?}");
                if pairs {
                    assert!(!without.has_atomic(op, dt), "{op:?} {dt:?}");
                }
            }
        }
        assert!(with.has_atomic(AccOp::MinLoc, DataType::LocF64));
        assert!(!with.has_atomic(AccOp::MinLoc, DataType::F64));
        assert!(!with.has_atomic(AccOp::Sum, DataType::LocI32));
    }
}
