//! rma-verbs: the InfiniBand verbs transport of rma, over the system's rdma-core
//! (libibverbs, bound by the `rdma-sys` crate and linked dynamically), with a thin safe
//! layer of our own in [`ib`].
//!
//! - **Device**: `RMA_VERBS_DEVICE` (default: the first device), `RMA_VERBS_PORT`
//!   (default 1), `RMA_VERBS_GID_INDEX` (default: on RoCE the first RoCE v2 GID,
//!   IPv4-mapped first; on InfiniBand none, LID routing). One protection domain and one
//!   completion queue per transport.
//! - **Connections**: one reliable-connected QP per peer, its (QPN, PSN, LID, GID)
//!   exchanged through the bootstrap's allgather, taken through INIT, RTR and RTS with
//!   `RMA_VERBS_TIMEOUT` (ACK timeout exponent, default 17: 0.54 s a try) and
//!   `RMA_VERBS_RETRY` (default and at most 6: rxe retries forever at 7) retries, so that
//!   a dead peer's QP errors out within about 3.8 s; receiver-not-ready retries are
//!   unbounded (a busy peer is not a dead one). Native operations on our own window go over a pair of QPs connected to each
//!   other, so that the HCA applies every native atomic on a window, ours included.
//! - **Active messages** are SENDs into receive buffers pre-posted per QP
//!   (`RMA_VERBS_RECV_BUFFERS` per peer, default 16, of `RMA_VERBS_MAX_MESSAGE` bytes,
//!   default 64 KiB), reposted as soon as consumed; an RC QP delivers in order, so
//!   delivery is in order per pair without sequence numbers. Messages up to the QP's
//!   inline size go inline and unsignaled (every 16th signaled), larger ones from a
//!   registered send buffer, signaled. Sends to oneself never touch the device.
//! - **Windows**: memory from `allocate` (8-byte aligned, zeroed) or the user's is
//!   registered once per window with local write, remote read, remote write and (when the
//!   device does atomics) remote atomic access; (address, rkey) is the segment descriptor.
//!   Dynamic windows use active messages only.
//! - **Passive-target locks** are native where the device does atomics
//!   (`RMA_VERBS_NATIVE_LOCKS=0`: the engine's lock messages): each window segment has an
//!   8-byte lock word of its own (registered with remote atomic access, its address and
//!   rkey appended to the segment descriptor); exclusive is a compare-and-swap 0 →
//!   EXCLUSIVE, shared a fetch-and-add of 1 (taken back if EXCLUSIVE was set), unlock a
//!   fetch-and-add of the negated amount. The HCA applies them: a target that computes
//!   without calling the library does not hold its origins up.
//! - **Native operations**: puts are RDMA WRITEs (inline up to `max_inline_data`), gets
//!   RDMA READs, and on devices with `atomic_cap` HCA or GLOB: Sum (fetching or not) and
//!   NoOp (an atomic read) on u64/i64 are 8-byte fetch-and-adds, one per element, and
//!   compare-and-swap on u64/i64 is the verbs compare-and-swap. Everything else is an
//!   active message. An RC completion of a WRITE means the remote HCA acknowledged it: the
//!   data is at the target. Every target range is checked against the target's window at
//!   the origin: nothing out of range reaches the wire. Operands and results live in
//!   registered buffers owned by the transport until the completion.
//! - **Complete in the call**: right after posting an op the transport reads the
//!   completion queue once, and an op found complete is reported so
//!   ([`Issued::Complete`]): the engine then neither tracks nor waits for it. On a
//!   software device (rxe, siw) that is every op: the kernel runs a WRITE inside the
//!   post's system call, and a READ's responder (a tasklet) preempts the caller before
//!   the call returns to user space; measured in the rxe VM, 2376 of 2376 puts and gets of
//!   a latency run. On an HCA it is none: after 8 misses in a row only every 64th post
//!   looks (`RMA_VERBS_POLL_AFTER_POST=0`: never).
//! - **Notified puts** (issue #28): one RDMA WRITE with immediate data (the window's id
//!   and the counter's index, 16 bits each), whatever the size; the target's receive
//!   completion, which comes once the data is placed, becomes [`Event::Notified`] and
//!   the engine counts it. `RMA_VERBS_NOTIFIED_PUTS=0`: as active messages, to compare.
//! - **Resources**: at most `RMA_VERBS_SEND_DEPTH` (default 256) work requests
//!   outstanding per QP and 1024 buffers in flight; beyond that (after driving the
//!   completion queue once) [`TransportError::Busy`].
//! - **Failures**: a completion with an error status becomes [`Event::Failed`] (native
//!   operations) or [`Event::PeerFailed`] (sends), naming the status
//!   ([`ib::VerbsError::Completion`]); peers' pids are also checked now and then when
//!   every rank is on this node (unless `RMA_VERBS_PID_CHECK=0`). Since RC tells only a
//!   sender that its peer is gone, polling sends a zero-byte RDMA WRITE to each idle
//!   peer every `RMA_VERBS_KEEPALIVE_MS` (default 1000; 0: never): a dead peer surfaces
//!   within about keepalive + 3.8 s.
//! - **Waiting**: polls spin (yielding the core every `RMA_VERBS_YIELD_EVERY` empty
//!   polls, default 8). With `RMA_VERBS_BLOCK_AFTER=N` (default 0: never), after N empty
//!   polls in a row a poll arms the completion queue and sleeps on its completion channel
//!   until the next completion or for 1 ms, so that an idle target (whose memory the HCA
//!   serves alone) leaves the core to others. Measured in the rxe VM (2 host cores, 4
//!   vCPUs): a target spinning the way the engine's does doubles the origin's raw WRITE +
//!   poll latency (35 to 80-97 us), which is most of the gap between `-b verbs` and raw
//!   verbs there. In a hybrid world the sleep does not see shared-memory arrivals: the
//!   node's messages then wait up to the 1 ms.
//! - **Closing**: the transport says goodbye (a SEND with immediate data) to every peer
//!   and lingers, progressing, until every peer said goodbye or is gone
//!   (`RMA_VERBS_LINGER_MS`, default 10 s).
//! - **Logs**: `tracing` events under the target `rma_verbs` (`RMA_LOG=rma_verbs=info`
//!   in the binaries): the device, port, GID and what runs natively when the transport
//!   starts, peers that fail, and (at leaving) how often a poll right after a post found
//!   the op complete.
//!
//! Measured (soft-RoCE in a qemu TCG VM, 4 vCPUs on 2 host cores, 8 bytes, ours against
//! raw verbs between the same two processes in 16 alternating rounds): put + flush 1.05
//! times a raw WRITE + CQ poll and get + flush 1.08-1.09 times a raw READ + poll (medians
//! of 20 invocations in one boot, target spinning); `ci/verbs.sh` reports the medians of
//! 11 invocations, which swing by +-0.1 each. In the emulator a call and its return cost
//! 40-70 ns, a plain instruction under 1 ns (measured by adding either to the raw loop:
//! the translator looks up every return's target), so the per-op path is kept short in
//! calls as well as instructions: ops found complete right after their post are retired
//! on the spot, small helpers are inlined, and the engine takes no op element for an op
//! that completes in the call. Per op (callgrind inside the VM, rdma-core included): put +
//! flush 1073 instructions and 16 calls, get + flush 1299 and 18.
//!
//! Not atomic: a native fetch-and-add or compare-and-swap and an active-message
//! accumulate of another (op, type) on the same bytes at the same time (the HCA and the
//! target's CPU do not share a lock). The engine sends each (op, type) pair one way only.

pub mod ib;

/// Polls between two looks at the clock for keepalives and the pid check.
const HOUSEKEEPING_EVERY: u64 = 256;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rma_backend::{
    env_usize, Collectives, Link, LocalMemory, PeerWatch, Registration, SegmentRegistration,
    WindowSegment,
};
use rma_core::transport::{
    Event, Fetched, Issued, NativeAtomic, PeerTables, Periodic, RemoteSegment, Segment,
    SharedAmong, Transport, UserMemory, Wake, NOTICE_LIMIT,
};
use rma_core::{AccOp, Bootstrap, Capabilities, DataType, Rank, TransportError};

use ib::{Access, Buffer, Context, Cq, Endpoint, Local, Mr, Pd, Qp, QpParams, SendOp, VerbsError};

/// wr_id bit of receives: `RECV | peer << 32 | buffer index`.
const RECV: u64 = 1 << 63;
/// Immediate data of the goodbye.
const BYE_IMM: u32 = 0xb1e;
/// Buffers (send buffers and native-op slots) in flight at most (beyond that: Busy).
const MAX_SLOTS: usize = 1024;
/// One inline send in this many is signaled, so the send queue is retired.
const SIGNAL_EVERY: u32 = 16;
/// `IBV_WC_WITH_IMM`.
const WC_WITH_IMM: u32 = 1 << 1;

/// The numeric variables this backend reads, with what each accepts: checked when a
/// World starts ([`rma_core::config::check_env_numbers`]), so that a typo is an error,
/// not a silent default.
pub const ENV_NUMBERS: &[(&str, usize, usize, &str)] = &[
    ("RMA_VERBS_PORT", 1, 255, "a port number from 1 to 255"),
    ("RMA_VERBS_GID_INDEX", 0, 255, "a GID index from 0 to 255"),
    (
        "RMA_VERBS_TIMEOUT",
        0,
        31,
        "a QP timeout exponent from 0 to 31",
    ),
    ("RMA_VERBS_RETRY", 0, 7, "a retry count from 0 to 7"),
    (
        "RMA_VERBS_MAX_MESSAGE",
        1024,
        1 << 30,
        "bytes from 1024 to 1073741824",
    ),
    (
        "RMA_VERBS_RECV_BUFFERS",
        1,
        65536,
        "a count from 1 to 65536",
    ),
    ("RMA_VERBS_SEND_DEPTH", 1, 65536, "a count from 1 to 65536"),
    (
        "RMA_VERBS_LINGER_MS",
        0,
        600_000,
        "milliseconds from 0 to 600000",
    ),
    (
        "RMA_VERBS_YIELD_EVERY",
        0,
        1 << 20,
        "a count from 0 to 1048576",
    ),
    (
        "RMA_VERBS_BLOCK_AFTER",
        0,
        1 << 30,
        "a count from 0 to 1073741824",
    ),
    (
        "RMA_VERBS_KEEPALIVE_MS",
        0,
        600_000,
        "milliseconds from 0 to 600000",
    ),
    ("RMA_VERBS_DISABLE_RMA", 0, 1, "0 or 1"),
    ("RMA_VERBS_NOTIFIED_PUTS", 0, 1, "0 or 1"),
    ("RMA_VERBS_DISABLE_ATOMICS", 0, 1, "0 or 1"),
    ("RMA_VERBS_NATIVE_LOCKS", 0, 1, "0 or 1"),
    ("RMA_VERBS_PID_CHECK", 0, 1, "0 or 1"),
    ("RMA_VERBS_POLL_AFTER_POST", 0, 1, "0 or 1"),
];

/// What a posted send-queue work request holds until it is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Nothing (inline send).
    Nothing,
    /// An active-message send buffer: free it.
    SendBuf(usize),
    /// One part of a native op: count it.
    OpPart(usize),
    /// A whole native op sent inline (nothing to hold, nothing to fetch): report its
    /// token.
    InlineOp(u64),
    /// The goodbye.
    Bye,
}

/// A registered buffer and what it is used for while in flight.
struct Slot {
    buf: Option<Buffer>,
    token: u64,
    /// Parts of a native op not yet completed.
    parts_left: u32,
    /// Parts not yet posted (atomics of many elements beyond the queue's room).
    unposted: VecDeque<(SendOp, u32)>,
    /// Bytes of the result to hand back (gets, fetching atomics).
    fetch: Option<usize>,
    error: Option<VerbsError>,
    /// Waited for inside a call (native locks): finished into `done`, not an event.
    sync: bool,
    done: Option<Result<u64, VerbsError>>,
}

impl Slot {
    /// The result to hand back, copied out of the registered buffer (inline when small:
    /// no allocation), which then serves the next op.
    fn fetched(&self) -> Option<Fetched> {
        self.fetch.map(|n| {
            self.buf
                .as_ref()
                .map(|b| Fetched::copy_of(b.bytes(n)))
                .unwrap_or_default()
        })
    }

    /// The local side of the part at `off` of `len` bytes in the slot's buffer (sized by
    /// the caller for every part).
    fn local(&self, off: u32, len: u32) -> Local {
        let b = self.buf.as_ref().expect("slot has a buffer");
        debug_assert!(
            off as usize + len as usize <= b.len(),
            "part outside its slot"
        );
        Local {
            // Only handed to the device, never dereferenced here.
            addr: b.addr().wrapping_add(off as usize),
            len,
            lkey: b.lkey(),
        }
    }
}

/// One peer (or ourselves): its QP and the bookkeeping of its send queue.
struct Peer {
    qp: Qp,
    /// For ourselves: the QP our loopback QP is connected to (responder only).
    _loopback: Option<Qp>,
    recv: Vec<Buffer>,
    /// Posted send work requests in order: (wr_id, what it holds).
    posted: VecDeque<(u64, Held)>,
    next_wr: u64,
    unsignaled: u32,
    /// Slots with parts waiting for room in this send queue.
    backlog: VecDeque<usize>,
    dead: bool,
    bye: bool,
}

/// How this process reaches one rank's part of one window natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RemoteMem {
    addr: u64,
    rkey: u32,
    len: u64,
    /// The window's lock word at that rank (address, rkey), for native locks.
    lock: Option<(u64, u32)>,
}

/// Lock word: this bit is an exclusive holder, the rest counts shared holders.
const EXCLUSIVE: u64 = 1 << 63;

/// Everything behind the transport's one mutex.
struct Inner {
    // Field order: QPs (in peers) are destroyed before the buffers and CQ they use.
    peers: Vec<Peer>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    wcs: Vec<ib::Wc>,
    pending: VecDeque<Event>,
    me: Rank,
    depth: u32,
    max_inline: usize,
    /// Polls so far (paces liveness checks, keepalives and yields).
    polls: u64,
    /// Empty polls in a row.
    idle: u64,
    /// Rounds of keepalives sent (for [`Transport::diagnose`]).
    keepalive_rounds: u64,
    /// Whether a look at the completion queue right after a post pays.
    post_poll: PostPoll,
}

/// Whether a poll right after posting an op tends to find it complete. On a software
/// device (rxe, siw) the kernel runs the whole operation inside the post's system call or
/// before it returns to user space (the READ responder's tasklet preempts the caller), so
/// the completion is usually there: the op is then reported complete in the call and the
/// engine skips its tracking and its wait. On an HCA it never is: after
/// [`PostPoll::MISSES`] misses in a row only every [`PostPoll::EVERY`]th post looks, so
/// the look costs one empty poll per that many operations.
#[derive(Debug)]
struct PostPoll {
    enabled: bool,
    misses: u32,
    skip: u32,
    /// Looks so far, and how many found the op complete.
    looks: u64,
    found: u64,
}

impl PostPoll {
    const MISSES: u32 = 8;
    const EVERY: u32 = 64;

    fn new(enabled: bool) -> Self {
        PostPoll {
            enabled,
            misses: 0,
            skip: 0,
            looks: 0,
            found: 0,
        }
    }

    fn should_look(&mut self) -> bool {
        if !self.enabled {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    fn record(&mut self, found: bool) {
        self.looks += 1;
        self.found += u64::from(found);
        if found {
            self.misses = 0;
        } else {
            self.misses = self.misses.saturating_add(1);
            if self.misses >= Self::MISSES {
                self.skip = Self::EVERY - 1;
            }
        }
    }
}

/// The verbs transport of one process.
pub struct VerbsTransport {
    collectives: Collectives,
    rank: Rank,
    size: usize,
    inner: Mutex<Inner>,
    ctx: Arc<Context>,
    caps: Capabilities,
    native: Capabilities,
    /// Passive-target locks as atomics on a lock word per window and rank
    /// (`RMA_VERBS_NATIVE_LOCKS`, default on where the device does atomics).
    native_locks: bool,
    /// Per window, each rank's registered memory (None: active messages toward it).
    windows: PeerTables<RemoteMem>,
    max_message: usize,
    /// The peers' processes, when every rank is on this node (and
    /// `RMA_VERBS_PID_CHECK` is not 0).
    watch: PeerWatch,
    yield_every: u64,
    /// Empty polls before a poll sleeps on the completion channel (0: never).
    block_after: u64,
    /// Keepalives (`RMA_VERBS_KEEPALIVE_MS`, 0: none), asked every
    /// [`HOUSEKEEPING_EVERY`] polls.
    keepalive: Periodic,
    departed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.ctx)
            .finish()
    }
}

fn psn_for(rank: usize, peer: usize) -> u32 {
    let x = (std::process::id() as u64)
        .wrapping_mul(0x9e37_79b9)
        .wrapping_add((rank * 131 + peer) as u64 * 0x85eb_ca6b);
    (x ^ (x >> 24)) as u32 & 0xff_ffff
}

impl VerbsTransport {
    /// Opens the device, creates one QP per rank, exchanges endpoints through the
    /// bootstrap, connects them (INIT, RTR, RTS) and posts the receive buffers.
    pub fn new(boot: Arc<dyn Bootstrap>) -> Result<VerbsTransport, TransportError> {
        let (rank, size) = (boot.rank(), boot.size());
        let device = std::env::var("RMA_VERBS_DEVICE")
            .ok()
            .filter(|d| !d.is_empty());
        let port = env_usize("RMA_VERBS_PORT", 1).clamp(1, 255) as u8;
        let gid_index = std::env::var("RMA_VERBS_GID_INDEX")
            .ok()
            .and_then(|v| v.parse::<u8>().ok());
        let ctx = Context::open(device.as_deref(), port, gid_index)
            .map_err(|e| e.while_doing("opening the RDMA device"))?;
        let pd = Pd::new(&ctx).map_err(|e| e.while_doing("allocating a protection domain"))?;
        let depth = (env_usize("RMA_VERBS_SEND_DEPTH", 256) as u32)
            .clamp(SIGNAL_EVERY * 2, ctx.max_qp_wr.max(SIGNAL_EVERY * 2));
        let nrecv = env_usize("RMA_VERBS_RECV_BUFFERS", 16).clamp(2, 4096) as u32;
        let max_message = env_usize("RMA_VERBS_MAX_MESSAGE", 64 * 1024).clamp(64, 1 << 30);
        let cq_len = (depth + nrecv) * (size as u32 + 1) + 64;
        // Off by default: in the rxe VM it did not measurably help the OSU latencies (the
        // timings swing 2x with the host's load) and slowed the lock litmus under
        // RMA_ASYNC_PROGRESS (a progress thread that sleeps answers lock requests late).
        let block_after = env_usize("RMA_VERBS_BLOCK_AFTER", 0) as u64;
        // Always with a completion channel: the progress agent sleeps on it. Free while
        // nobody arms it (the device raises an event only for an armed CQ).
        let cq = Cq::new(&ctx, cq_len, true).map_err(|e| {
            e.while_doing(format!("creating a completion queue of {cq_len} entries"))
        })?;
        let rd_atomic = ctx.max_qp_rd_atom.clamp(1, 16) as u8;
        let params = QpParams {
            timeout: env_usize("RMA_VERBS_TIMEOUT", 17).clamp(1, 31) as u8,
            // 6, not 7: rxe (and the spec for rnr_retry only) treats 7 as "retry forever".
            retry_cnt: env_usize("RMA_VERBS_RETRY", 6).min(6) as u8,
            rnr_retry: 7,
            rd_atomic,
        };
        // One QP per rank (ours: the requester of the loopback pair), in RESET.
        let mut fresh = Vec::with_capacity(size);
        for _ in 0..size {
            fresh.push(
                ib::ResetQp::new(&pd, &cq, depth, nrecv, 256)
                    .map_err(|e| e.while_doing("creating a queue pair"))?,
            );
        }
        let mut blob = Vec::with_capacity(size * Endpoint::LEN);
        for (j, q) in fresh.iter().enumerate() {
            Endpoint {
                qpn: q.qpn(),
                psn: psn_for(rank as usize, j),
                lid: ctx.lid,
                gid: ctx.gid,
            }
            .encode(&mut blob);
        }
        // One collective: every rank's pid, node and queue pair endpoints.
        let hellos = rma_core::exchange_hellos(&*boot, "verbs-hello", &blob)?;
        // RMA_VERBS_PID_CHECK=0: peers' deaths only through QP errors (to test those).
        let pid_check = env_usize("RMA_VERBS_PID_CHECK", 1) != 0;
        let watch = PeerWatch::from_hellos(rank, &hellos, boot.node_id(), pid_check);

        let mut peers = Vec::with_capacity(size);
        for (j, q) in fresh.into_iter().enumerate() {
            let ours = psn_for(rank as usize, j);
            let init = q.init()?;
            let mut recv = Vec::new();
            let (qp, loopback) = if j == rank as usize {
                // Native ops on our own windows: a second QP, connected to this one.
                let lb = ib::ResetQp::new(&pd, &cq, 4, 1, 0)
                    .map_err(|e| e.while_doing("creating the loopback queue pair"))?;
                let lb_psn = ours ^ 0x5555;
                let me = Endpoint {
                    qpn: init.qpn(),
                    psn: ours,
                    lid: ctx.lid,
                    gid: ctx.gid,
                };
                let lb_ep = Endpoint {
                    qpn: lb.qpn(),
                    psn: lb_psn,
                    lid: ctx.lid,
                    gid: ctx.gid,
                };
                let lb = lb
                    .init()?
                    .ready_to_receive(&me, params)?
                    .ready_to_send(lb_psn)?;
                let qp = init.ready_to_receive(&lb_ep, params)?.ready_to_send(ours)?;
                (qp, Some(lb))
            } else {
                let theirs = hellos
                    .get(j)
                    .and_then(|h| h.address.get(rank as usize * Endpoint::LEN..))
                    .and_then(Endpoint::decode)
                    .ok_or_else(|| {
                        TransportError::Failed(format!("bad QP endpoint from rank {j}"))
                    })?;
                for i in 0..nrecv {
                    let b = Buffer::new(&pd, max_message, Access::LOCAL).map_err(|e| {
                        e.while_doing(format!(
                            "registering a receive buffer of {max_message} bytes"
                        ))
                    })?;
                    // SAFETY: the buffer is kept in `recv` (a field of the peer that
                    // owns the QP, destroyed first) and not touched until its completion.
                    unsafe {
                        init.post_recv(
                            RECV | (j as u64) << 32 | i as u64,
                            b.addr(),
                            b.len() as u32,
                            b.lkey(),
                        )?
                    };
                    recv.push(b);
                }
                let qp = init
                    .ready_to_receive(&theirs, params)?
                    .ready_to_send(ours)?;
                (qp, None)
            };
            peers.push(Peer {
                qp,
                _loopback: loopback,
                recv,
                posted: VecDeque::new(),
                next_wr: 0,
                unsignaled: 0,
                backlog: VecDeque::new(),
                dead: false,
                bye: false,
            });
        }
        let max_inline = peers.iter().map(|p| p.qp.max_inline()).min().unwrap_or(0) as usize;
        let atomics = ctx.atomics && env_usize("RMA_VERBS_DISABLE_ATOMICS", 0) != 1;
        let rma = env_usize("RMA_VERBS_DISABLE_RMA", 0) != 1;
        let mut mask = 0;
        if atomics {
            for dt in [DataType::U64, DataType::I64] {
                mask |= Capabilities::atomic_bit(AccOp::Sum, dt)
                    | Capabilities::atomic_bit(AccOp::NoOp, dt);
            }
        }
        let native = Capabilities {
            rdma_write: rma,
            rdma_read: rma,
            atomics: mask,
            compare_and_swap: if atomics {
                (1 << DataType::U64 as u16) | (1 << DataType::I64 as u16)
            } else {
                0
            },
            inject_size: max_inline,
            max_message,
            // RDMA WRITE with immediate data (RMA_VERBS_NOTIFIED_PUTS=0: notified puts as
            // active messages, to compare).
            notified_puts_from: if rma && env_usize("RMA_VERBS_NOTIFIED_PUTS", 1) == 1 {
                0
            } else {
                usize::MAX
            },
            ..Capabilities::ACTIVE_MESSAGES_ONLY
        };
        tracing::info!(
            rank,
            device = %ctx.name,
            port = ctx.port,
            gid = ?ctx.gid,
            max_inline,
            send_depth = depth,
            rdma = rma,
            atomics,
            ?native,
            "verbs transport: what runs natively"
        );
        let inner = Inner {
            peers,
            slots: Vec::new(),
            free: Vec::new(),
            pd,
            cq,
            wcs: (0..32).map(|_| ib::empty_wc()).collect(),
            polls: 0,
            idle: 0,
            keepalive_rounds: 0,
            post_poll: PostPoll::new(env_usize("RMA_VERBS_POLL_AFTER_POST", 1) != 0),
            pending: VecDeque::new(),
            me: rank,
            depth,
            max_inline,
        };
        // Everyone's QPs are connected and receives posted before anyone sends.
        boot.barrier()?;
        Ok(VerbsTransport {
            collectives: Collectives::new(boot, "verbs-ag"),
            rank,
            size,
            inner: Mutex::new(inner),
            ctx,
            caps: Capabilities {
                max_message,
                ..Capabilities::ACTIVE_MESSAGES_ONLY
            },
            native,
            native_locks: atomics && env_usize("RMA_VERBS_NATIVE_LOCKS", 1) != 0,
            windows: PeerTables::default(),
            max_message,
            watch,
            departed: std::sync::atomic::AtomicBool::new(false),
            yield_every: env_usize("RMA_VERBS_YIELD_EVERY", 8) as u64,
            block_after,
            keepalive: Periodic::new(std::time::Duration::from_millis(env_usize(
                "RMA_VERBS_KEEPALIVE_MS",
                1000,
            ) as u64)),
        })
    }

    /// The device in use.
    pub fn device(&self) -> &str {
        &self.ctx.name
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registered memory of `target` in window `win`, checked for `len` bytes at
    /// `offset`: nothing outside the target's window reaches the wire.
    #[inline]
    fn remote(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
    ) -> Result<RemoteMem, TransportError> {
        let m = self
            .windows
            .get(win, target)
            .ok_or(TransportError::Unsupported("window memory not registered"))?;
        if offset.checked_add(len as u64).is_none_or(|e| e > m.len) {
            return Err(TransportError::Failed(format!(
                "access of {len} bytes at offset {offset} outside rank {target}'s window of {} bytes",
                m.len
            )));
        }
        Ok(m)
    }

    /// Every `keepalive` of polling, a zero-byte RDMA WRITE (signaled, no memory touched)
    /// to each live peer: RC reports a dead peer only to a sender,
    /// so a rank that only waits to hear from a dead peer would never learn of it. The
    /// write's retries run out (IBV_WC_RETRY_EXC_ERR) within timeout x (retry_cnt + 1).
    fn send_keepalives(&self, events: &mut Vec<Event>) -> Result<(), TransportError> {
        let mut inner = self.lock();
        inner.keepalive_rounds += 1;
        for t in (0..self.size).filter(|t| *t != self.rank as usize) {
            let p = &inner.peers[t];
            // Also retires unsignaled sends that no signaled one followed yet.
            if p.dead || p.bye || inner.room(t) == 0 {
                continue;
            }
            let local = Local {
                addr: std::ptr::null(),
                len: 0,
                lkey: 0,
            };
            // SAFETY: zero bytes: no local memory is read, no remote memory written (a
            // zero-length RDMA WRITE carries no address or key to check).
            let r =
                unsafe { inner.post(t, SendOp::Write(0, 0), local, false, true, Held::Nothing) };
            if let Err(e) = r {
                inner.peer_failed(t as Rank, &e.to_string());
            }
        }
        while let Some(e) = inner.pending.pop_front() {
            events.push(e);
        }
        Ok(())
    }

    /// Runs one 8-byte atomic on `target` and waits for its result (the HCA answers: no
    /// progress of the target is needed). For native locks, which the engine takes and
    /// releases within one call.
    fn sync_atomic(&self, target: Rank, op: SendOp) -> Result<u64, TransportError> {
        let t = target as usize;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut inner = self.lock();
        let s = loop {
            if inner.peers[t].dead {
                return Err(TransportError::PeerUnreachable(target));
            }
            if inner.room(t) > 0 {
                if let Some(s) = inner.take_slot(8)? {
                    break s;
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(TransportError::Failed(format!(
                    "no room for a lock operation toward rank {target}"
                )));
            }
            inner.drive()?;
        };
        let slot = &mut inner.slots[s];
        slot.sync = true;
        slot.done = None;
        slot.error = None;
        slot.fetch = Some(8);
        slot.parts_left = 1;
        slot.unposted.clear();
        slot.unposted.push_back((op, 0));
        if let Err(e) = inner.post_parts(t, s, 8, None) {
            inner.slots[s].sync = false;
            inner.free.push(s);
            return Err(e);
        }
        let result = loop {
            if let Some(r) = inner.slots[s].done.take() {
                break r.map_err(TransportError::from);
            }
            if std::time::Instant::now() > deadline {
                // Leave the slot to its completion (never reused while sync and not done).
                return Err(TransportError::Failed(format!(
                    "lock operation toward rank {target} did not complete in 60 s"
                )));
            }
            if let Err(e) = inner.drive() {
                break Err(e);
            }
        };
        inner.slots[s].sync = false;
        inner.free.push(s);
        result
    }

    /// The lock word of `target` in window `win`.
    fn lock_word(&self, win: u32, target: Rank) -> Result<(u64, u32), TransportError> {
        self.windows
            .get(win, target)
            .and_then(|m| m.lock)
            .ok_or(TransportError::Unsupported("no native lock word"))
    }

    /// Keepalives and the pid check, each when its interval has passed (one clock read).
    fn housekeeping(&self, events: &mut Vec<Event>) -> Result<(), TransportError> {
        let now = std::time::Instant::now();
        if self.watch.due(now) {
            self.check_liveness(events);
        }
        if self.keepalive.due(now) {
            self.send_keepalives(events)?;
        }
        Ok(())
    }

    fn check_liveness(&self, events: &mut Vec<Event>) {
        // Its goodbye is read only now that it is gone: read before, a peer that says
        // goodbye and exits between the two reads was taken for dead. It may still sit in
        // the completion queue (the peer exits right after it).
        self.watch.check(events, |r| {
            let mut inner = self.lock();
            let _ = inner.drive();
            inner.said_bye(r)
        });
    }

    /// Issues a native op of `parts` work requests on a slot of `buf_len` bytes (the
    /// local bytes of part i are `i * part_len ..`), first copying `fill` into the slot.
    #[allow(clippy::too_many_arguments)] // one internal call shape for every native op
    #[inline(always)] // folded into put, get and atomic: their constant arguments prune it
    fn issue(
        &self,
        target: Rank,
        token: u64,
        buf_len: usize,
        fill: &[u8],
        fetch: Option<usize>,
        parts: &[SendOp],
        part_len: u32,
        inline: bool,
    ) -> Result<Issued, TransportError> {
        let mut inner = self.lock();
        let t = target as usize;
        if inner.peers[t].dead {
            return Err(TransportError::PeerUnreachable(target));
        }
        // One inline part, nothing fetched (small puts): no slot, the work request's
        // completion names the token.
        let whole_inline = inline && fetch.is_none() && parts.len() == 1;
        for attempt in 0..2 {
            if inner.room(t) > 0 && whole_inline {
                let local = Local {
                    addr: fill.as_ptr(),
                    len: fill.len() as u32,
                    lkey: 0,
                };
                // SAFETY: inline: the call copies the bytes; nothing is held after it.
                unsafe { inner.post(t, parts[0], local, true, true, Held::InlineOp(token)) }?;
                return Ok(inner.complete_in_call(t, token));
            }
            if inner.room(t) > 0 {
                if let Some(s) = inner.take_slot(buf_len)? {
                    let slot = &mut inner.slots[s];
                    if !inline && !fill.is_empty() {
                        if let Some(b) = slot.buf.as_mut() {
                            b.fill(fill);
                        }
                    }
                    slot.token = token;
                    slot.sync = false;
                    slot.fetch = fetch;
                    slot.error = None;
                    slot.parts_left = parts.len() as u32;
                    // Reused (clear + extend keeps its capacity): no allocation per op.
                    slot.unposted.clear();
                    if let ([op], false) = (parts, inline) {
                        // One part, room for it: posted now, nothing left for later.
                        let local = slot.local(0, part_len);
                        // SAFETY: the slot's registered buffer (at least `buf_len` >=
                        // `part_len` bytes), held (Held::OpPart) until the part is retired.
                        let r = unsafe { inner.post(t, *op, local, false, true, Held::OpPart(s)) };
                        if let Err(e) = r {
                            // Nothing went out: the slot is free again, the caller fails.
                            inner.free.push(s);
                            return Err(e.into());
                        }
                        return Ok(inner.complete_in_call(t, token));
                    }
                    slot.unposted.extend(
                        parts
                            .iter()
                            .enumerate()
                            .map(|(i, op)| (*op, i as u32 * part_len)),
                    );
                    let inline_src = inline.then_some(fill);
                    inner.post_parts(t, s, part_len, inline_src)?;
                    if !inner.slots[s].unposted.is_empty() {
                        inner.peers[t].backlog.push_back(s);
                        return Ok(Issued::Pending);
                    }
                    return Ok(inner.complete_in_call(t, token));
                }
            }
            if attempt == 0 {
                inner.drive()?;
            }
        }
        Err(TransportError::Busy)
    }
}

impl Inner {
    /// Just after posting the op of `token` to peer `t`: when that tends to pay
    /// ([`PostPoll`]), reads the completion queue once and, if the op is complete, takes
    /// its event and reports it complete in the call.
    #[inline]
    fn complete_in_call(&mut self, t: usize, token: u64) -> Issued {
        if !self.post_poll.should_look() {
            return Issued::Pending;
        }
        if let Some(issued) = self.complete_alone(t) {
            self.post_poll.record(matches!(issued, Issued::Complete(_)));
            return issued;
        }
        // An error here (the completion queue itself failing) recurs at the next poll,
        // which reports it; the op stays pending, as posted.
        let _ = self.drive();
        let ours = |e: &Event| matches!(e, Event::Completed { token: k, .. } if *k == token);
        // Usually the newest event (the op just posted is the last to complete).
        let event = if self.pending.back().is_some_and(ours) {
            self.pending.pop_back()
        } else {
            let i = self.pending.iter().rposition(ours);
            i.and_then(|i| self.pending.remove(i))
        };
        self.post_poll.record(event.is_some());
        match event {
            Some(Event::Completed { data, .. }) => Issued::Complete(data),
            _ => Issued::Pending,
        }
    }

    /// [`complete_in_call`](Self::complete_in_call)'s common case, without events: the
    /// op just posted to peer `t` is the one request in flight there, so the first
    /// completion read is most likely its own (events already waiting, such as received
    /// messages, cannot be its). `None`: not that case, or the completion read was
    /// another's (handled; the caller drives on).
    #[inline]
    fn complete_alone(&mut self, t: usize) -> Option<Issued> {
        let p = &self.peers[t];
        if p.posted.len() != 1 {
            return None;
        }
        let (wr_id, held) = p.posted[0];
        let mut wc = [ib::empty_wc()];
        match self.cq.poll(&mut wc) {
            Ok(0) => return Some(Issued::Pending),
            Ok(_) => {}
            Err(_) => return None,
        }
        let wc = &wc[0];
        if wc.wr_id != wr_id || wc.status != rdma_sys::ibv_wc_status::IBV_WC_SUCCESS {
            // Another request's completion (a receive, another peer's op) or an error:
            // the general path; an error there recurs at the next poll, which reports it.
            let _ = self.complete(wc);
            return None;
        }
        match held {
            Held::InlineOp(_) => {
                self.peers[t].posted.pop_front();
                Some(Issued::Complete(None))
            }
            Held::OpPart(s) if self.slots[s].parts_left == 1 && !self.slots[s].sync => {
                self.peers[t].posted.pop_front();
                self.slots[s].parts_left = 0;
                let data = self.slots[s].fetched();
                self.free.push(s);
                Some(Issued::Complete(data))
            }
            _ => {
                self.retire(t, wr_id, None);
                None
            }
        }
    }

    /// Work requests that can still be posted to peer `t`.
    fn room(&self, t: usize) -> u32 {
        self.depth.saturating_sub(self.peers[t].posted.len() as u32)
    }

    /// A free slot with a registered buffer of at least `len` bytes, or None (Busy).
    #[inline]
    fn take_slot(&mut self, len: usize) -> Result<Option<usize>, TransportError> {
        // The common case inline: a free slot whose buffer is large enough.
        if let Some(&s) = self.free.last() {
            if self.slots[s].buf.as_ref().is_some_and(|b| b.len() >= len) {
                self.free.pop();
                return Ok(Some(s));
            }
        }
        self.take_slot_growing(len)
    }

    /// [`take_slot`](Self::take_slot) when it must create a slot or grow its buffer.
    #[cold]
    fn take_slot_growing(&mut self, len: usize) -> Result<Option<usize>, TransportError> {
        let s = match self.free.pop() {
            Some(s) => s,
            None if self.slots.len() < MAX_SLOTS => {
                self.slots.push(Slot {
                    buf: None,
                    token: 0,
                    parts_left: 0,
                    unposted: VecDeque::new(),
                    fetch: None,
                    error: None,
                    sync: false,
                    done: None,
                });
                self.slots.len() - 1
            }
            None => return Ok(None),
        };
        let slot = &mut self.slots[s];
        if slot.buf.as_ref().is_none_or(|b| b.len() < len) {
            // Grow (registrations are kept across uses of the slot).
            slot.buf = None;
            let size = len.next_power_of_two().max(4096);
            match Buffer::new(&self.pd, size, Access::LOCAL) {
                Ok(b) => slot.buf = Some(b),
                Err(e) => {
                    self.free.push(s);
                    return Err(e.into());
                }
            }
        }
        Ok(Some(s))
    }

    /// Posts one send work request to peer `t`, recording what it holds.
    ///
    /// # Safety
    /// As [`Qp::post_send`]: unless inline, `local` lies in a registered buffer held
    /// (by `held`) until the request is retired.
    #[inline(always)] // on every op's path; a call costs the emulator more than the code
    unsafe fn post(
        &mut self,
        t: usize,
        op: SendOp,
        local: Local,
        inline: bool,
        mut signaled: bool,
        held: Held,
    ) -> Result<(), VerbsError> {
        let p = &mut self.peers[t];
        debug_assert!((p.posted.len() as u32) < self.depth, "send queue full");
        if p.unsignaled + 1 >= SIGNAL_EVERY {
            signaled = true;
        }
        let wr_id = (t as u64) << 40 | (p.next_wr & ((1 << 40) - 1));
        // SAFETY: caller's contract.
        unsafe { p.qp.post_send(wr_id, op, local, inline, signaled)? };
        p.next_wr = p.next_wr.wrapping_add(1);
        p.unsignaled = if signaled { 0 } else { p.unsignaled + 1 };
        p.posted.push_back((wr_id, held));
        Ok(())
    }

    /// Posts as many unposted parts of slot `s` to peer `t` as there is room for.
    #[inline]
    fn post_parts(
        &mut self,
        t: usize,
        s: usize,
        part_len: u32,
        inline_src: Option<&[u8]>,
    ) -> Result<(), TransportError> {
        while self.room(t) > 0 {
            let Some((op, off)) = self.slots[s].unposted.pop_front() else {
                break;
            };
            let local = match inline_src {
                Some(src) => Local {
                    addr: src.as_ptr(),
                    len: src.len() as u32,
                    lkey: 0,
                },
                None => self.slots[s].local(off, part_len),
            };
            // SAFETY: inline data is copied by the call; otherwise the bytes are the
            // slot's registered buffer, held (Held::OpPart) until this part is retired.
            let r = unsafe { self.post(t, op, local, inline_src.is_some(), true, Held::OpPart(s)) };
            if let Err(e) = r {
                // Nothing of this part is in flight: count it as failed.
                let slot = &mut self.slots[s];
                slot.parts_left -= 1;
                slot.error.get_or_insert(e.clone());
                let rest = slot.unposted.len() as u32;
                slot.unposted.clear();
                slot.parts_left -= rest;
                self.maybe_finish(s);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Reports slot `s`'s op once all its parts are done, and frees it.
    fn maybe_finish(&mut self, s: usize) {
        let slot = &mut self.slots[s];
        if slot.parts_left != 0 {
            return;
        }
        if slot.sync {
            // The caller waiting in `sync_atomic` takes the result and frees the slot.
            slot.done = Some(match slot.error.take() {
                Some(e) => Err(e),
                None => Ok(slot.buf.as_ref().map_or(0, |b| {
                    u64::from_ne_bytes(b.bytes(8).try_into().expect("8 bytes"))
                })),
            });
            return;
        }
        let event = match slot.error.take() {
            Some(e) => Event::Failed {
                token: slot.token,
                error: e.into(),
            },
            None => Event::Completed {
                token: slot.token,
                data: slot.fetched(),
            },
        };
        self.pending.push_back(event);
        self.free.push(s);
    }

    fn peer_failed(&mut self, rank: Rank, why: &str) {
        let p = &mut self.peers[rank as usize];
        if !p.dead {
            p.dead = true;
            tracing::warn!(rank, why, "verbs: peer failed");
            // A peer that said goodbye left normally: its QP going away is no failure.
            if rank != self.me && !p.bye {
                self.pending.push_back(Event::PeerFailed { rank });
            }
        }
    }

    /// Retires every posted request of peer `t` up to `wr_id` (earlier unsignaled ones
    /// completed too: an RC send queue completes in order); `error` applies to `wr_id`.
    fn retire(&mut self, t: usize, wr_id: u64, error: Option<VerbsError>) {
        if !self.peers[t].posted.iter().any(|(id, _)| *id == wr_id) {
            return;
        }
        while let Some((id, held)) = self.peers[t].posted.pop_front() {
            let err = if id == wr_id { error.clone() } else { None };
            match held {
                Held::Nothing => {}
                Held::SendBuf(s) => self.free.push(s),
                Held::Bye => {}
                Held::InlineOp(token) => self.pending.push_back(match err.clone() {
                    Some(e) => Event::Failed {
                        token,
                        error: e.into(),
                    },
                    None => Event::Completed { token, data: None },
                }),
                Held::OpPart(s) => {
                    let slot = &mut self.slots[s];
                    slot.parts_left -= 1;
                    if let Some(e) = err.clone() {
                        slot.error.get_or_insert(e);
                    }
                    self.maybe_finish(s);
                }
            }
            if let Some(e) = err {
                // Any error completion puts an RC QP in the error state: nothing more
                // reaches this peer (the op itself was failed above).
                self.peer_failed(t as Rank, &e.to_string());
            }
            if id == wr_id {
                break;
            }
        }
    }

    /// Reads every completion there is, turning them into pending events, and posts
    /// backlogged parts.
    fn drive(&mut self) -> Result<(), TransportError> {
        let mut wcs = std::mem::take(&mut self.wcs);
        let result = loop {
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => break Err(e.into()),
            };
            for wc in &wcs[..n] {
                if let Err(e) = self.complete(wc) {
                    self.wcs = wcs;
                    return Err(e);
                }
            }
            if n < wcs.len() {
                break Ok(());
            }
        };
        self.wcs = wcs;
        for t in 0..self.peers.len() {
            while let Some(&s) = self.peers[t].backlog.front() {
                if self.room(t) == 0 {
                    break;
                }
                let part_len = if matches!(
                    self.slots[s].unposted.front(),
                    Some((SendOp::FetchAdd(..) | SendOp::CompareSwap(..), _))
                ) {
                    8
                } else {
                    0
                };
                self.post_parts(t, s, part_len, None)?;
                if self.slots[s].unposted.is_empty() {
                    self.peers[t].backlog.pop_front();
                }
            }
        }
        result
    }

    fn complete(&mut self, wc: &ib::Wc) -> Result<(), TransportError> {
        let ok = wc.status == rdma_sys::ibv_wc_status::IBV_WC_SUCCESS;
        let error = (!ok).then(|| VerbsError::Completion {
            status: wc.status,
            name: ib::status_name(wc.status),
            vendor_err: wc.vendor_err,
        });
        if wc.wr_id & RECV != 0 {
            let t = ((wc.wr_id >> 32) & 0x7fff_ffff) as usize;
            let i = (wc.wr_id & 0xffff_ffff) as usize;
            if t >= self.peers.len() || i >= self.peers[t].recv.len() {
                return Err(TransportError::Failed(format!(
                    "receive completion with unknown id {:#x}",
                    wc.wr_id
                )));
            }
            if let Some(e) = error {
                // Flushed receives of a QP in error: the peer is gone.
                self.peer_failed(t as Rank, &e.to_string());
                return Ok(());
            }
            let len = wc.byte_len as usize;
            let p = &mut self.peers[t];
            if wc.opcode == rdma_sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
                // A notified put's data is in place (its write came before this
                // completion): the engine counts it, checking window and counter.
                // SAFETY: a completion with immediate data (this opcode) holds it in this
                // member of the union; any 32 bits are a valid u32.
                let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
                self.pending.push_back(Event::Notified {
                    from: t as Rank,
                    win: imm >> 16,
                    index: imm & 0xffff,
                });
            } else if wc.wc_flags & WC_WITH_IMM != 0 {
                p.bye = true;
            } else {
                let b = &p.recv[i];
                if len > b.len() {
                    return Err(TransportError::Failed(format!(
                        "active message of {len} bytes received"
                    )));
                }
                let data = rma_backend::copy::to_vec(b.bytes(len));
                self.pending.push_back(Event::Received {
                    from: t as Rank,
                    data,
                });
            }
            let p = &self.peers[t];
            let b = &p.recv[i];
            // SAFETY: the buffer belongs to this peer (kept as long as its QP) and is not
            // touched again until this receive completes.
            let r = unsafe { p.qp.post_recv(wc.wr_id, b.addr(), b.len() as u32, b.lkey()) };
            if let Err(e) = r {
                self.peer_failed(t as Rank, &e.to_string());
            }
            return Ok(());
        }
        let t = ((wc.wr_id >> 40) & 0x7f_ffff) as usize;
        if t >= self.peers.len() {
            return Err(TransportError::Failed(format!(
                "send completion with unknown id {:#x}",
                wc.wr_id
            )));
        }
        self.retire(t, wc.wr_id, error);
        Ok(())
    }

    /// One attempt at sending an active message (or the goodbye) to peer `t`.
    fn send_packet(&mut self, t: usize, packet: &[u8], bye: bool) -> Result<bool, TransportError> {
        if self.room(t) == 0 {
            return Ok(false);
        }
        let op = if bye {
            SendOp::SendImm(BYE_IMM)
        } else {
            SendOp::Send
        };
        if packet.len() <= self.max_inline {
            let local = Local {
                addr: packet.as_ptr(),
                len: packet.len() as u32,
                lkey: 0,
            };
            let held = if bye { Held::Bye } else { Held::Nothing };
            // SAFETY: inline: the bytes are copied by the call.
            unsafe { self.post(t, op, local, true, bye, held)? };
            return Ok(true);
        }
        let Some(s) = self.take_slot(packet.len())? else {
            return Ok(false);
        };
        let b = self.slots[s].buf.as_mut().expect("slot has a buffer");
        b.fill(packet);
        let local = Local {
            addr: b.addr(),
            len: packet.len() as u32,
            lkey: b.lkey(),
        };
        // SAFETY: the slot's registered buffer is held (SendBuf) until retired.
        let r = unsafe { self.post(t, op, local, false, true, Held::SendBuf(s)) };
        if let Err(e) = r {
            self.free.push(s);
            return Err(e.into());
        }
        Ok(true)
    }
}

impl Drop for VerbsTransport {
    fn drop(&mut self) {
        self.depart();
    }
}

impl VerbsTransport {
    /// Says goodbye to every peer and lingers until every peer has said goodbye (or is
    /// gone, or `RMA_VERBS_LINGER_MS`, default 10 s, passed): our goodbye's completion
    /// means everything sent before it arrived, and a peer may still send to us until its
    /// own goodbye. Called when the World is dropped (a progress thread may hold the
    /// transport longer) and by Drop; only the first call does anything.
    pub fn depart(&self) {
        self.depart_except(&[])
    }

    /// [`depart`](Self::depart), but the ranks in `elsewhere` (sorted) leave by another
    /// way and get no goodbye here, nor is theirs awaited: a hybrid world's node ranks,
    /// which shared memory reaches (none of our traffic to them went through this
    /// device, and a goodbye would open a connection to a process that may have left).
    pub fn depart_except(&self, elsewhere: &[Rank]) {
        if self
            .departed
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let linger = Duration::from_millis(env_usize("RMA_VERBS_LINGER_MS", 10_000) as u64);
        let PostPoll { looks, found, .. } = self.lock().post_poll;
        tracing::info!(
            rank = self.rank,
            looks,
            found,
            "verbs: polls right after a post that found the op complete"
        );
        rma_backend::depart(
            &**self.collectives.boot(),
            self.rank,
            self.size,
            &self.watch,
            linger,
            elsewhere,
            || self.lock(),
        );
    }
}

impl Link for Inner {
    fn pending(&mut self) -> &mut VecDeque<Event> {
        &mut self.pending
    }
    fn dead(&self, peer: Rank) -> bool {
        self.peers[peer as usize].dead
    }
    fn said_bye(&self, peer: Rank) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| p.bye)
    }
    /// Its goodbye came and what we posted toward it is retired (our goodbye's completion
    /// means everything sent before it arrived).
    fn finished(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        p.bye && p.posted.is_empty()
    }
    fn try_send(&mut self, peer: Rank, packet: &[u8], bye: bool) -> Result<bool, TransportError> {
        self.send_packet(peer as usize, packet, bye)
    }
    fn drive(&mut self) -> Result<(), TransportError> {
        Inner::drive(self)
    }
}

/// Window memory in this process (8-byte aligned memory of ours, or the user's), its
/// registration and lock word.
type LocalSegment = WindowSegment<LocalMemory, VerbsRegistration>;

/// What peers reach a window segment through: the memory's registration, and the
/// window's lock word at this rank (taken and released by peers' atomics: native locks,
/// when the device does atomics). Deregistered on drop.
struct VerbsRegistration {
    mr: Option<Mr>,
    lock: Option<Buffer>,
}

impl VerbsRegistration {
    /// `None` when nothing is registered (then the descriptor is empty).
    fn of(mr: Option<Mr>, lock: Option<Buffer>) -> Option<VerbsRegistration> {
        (mr.is_some() || lock.is_some()).then_some(VerbsRegistration { mr, lock })
    }
}

impl Registration for VerbsRegistration {
    /// (address, rkey) of the memory, then (address, rkey) of the lock word if any:
    /// 12 or 24 bytes.
    fn descriptor(&self, base: usize) -> Vec<u8> {
        let (addr, rkey) = match &self.mr {
            Some(m) => (base as u64, m.rkey()),
            None => (0, 0),
        };
        let mut d = addr.to_le_bytes().to_vec();
        d.extend_from_slice(&rkey.to_le_bytes());
        if let Some(l) = &self.lock {
            d.extend_from_slice(&(l.addr() as u64).to_le_bytes());
            d.extend_from_slice(&l.rkey().to_le_bytes());
        }
        d
    }
}

impl VerbsTransport {
    /// Registers window memory for native access, if anything is native.
    ///
    /// # Safety
    /// `base..base+len` stays allocated until the returned region is dropped.
    unsafe fn register(&self, base: *mut u8, len: usize) -> Result<Option<Mr>, TransportError> {
        let n = &self.native;
        if len == 0 || !(n.rdma_write || n.rdma_read || n.atomics != 0 || n.compare_and_swap != 0) {
            return Ok(None);
        }
        let atomics = n.atomics != 0 || n.compare_and_swap != 0;
        let pd = self.lock().pd.clone();
        // SAFETY: caller's contract.
        Ok(Some(unsafe {
            Mr::register(&pd, base, len, Access::window(atomics))
                .map_err(|e| e.while_doing(format!("registering {len} bytes for remote access")))?
        }))
    }

    /// Registers window memory that another backend owns (the shared-memory segment of
    /// a hybrid world, reached by the node's ranks through load/store) so that ranks of
    /// other nodes reach it with RDMA too. `None` when the segment is not plain mapped
    /// memory or nothing is native. Its descriptor has no lock word: locks across nodes
    /// are the engine's messages, granted by the target with the node's own lock word.
    pub fn register_segment(
        &self,
        segment: &Arc<dyn Segment>,
    ) -> Result<Option<SegmentRegistration>, TransportError> {
        let Some(base) = segment.shared_base() else {
            return Ok(None);
        };
        // SAFETY: `base..base+len()` is the segment's memory (Segment contract), kept
        // mapped by the clone of `segment` the registration holds, which it releases only
        // after deregistering (field order of SegmentRegistration).
        let mr = unsafe { self.register(base as *mut u8, segment.len())? };
        Ok(VerbsRegistration::of(mr, None).map(|r| SegmentRegistration::new(r, segment, base)))
    }

    /// A lock word for a new window segment, if locks are native.
    fn lock_word_buffer(&self) -> Result<Option<Buffer>, TransportError> {
        if !self.native_locks {
            return Ok(None);
        }
        let pd = self.lock().pd.clone();
        Ok(Some(Buffer::new(&pd, 8, Access::window(true))?))
    }
}

impl VerbsTransport {
    /// Capabilities `c` toward `target`: no notified puts toward this rank (its loopback
    /// queue pair posts no receives for their immediate data).
    fn toward(&self, target: Rank, c: Capabilities) -> Capabilities {
        Capabilities {
            notified_puts_from: if target == self.rank {
                usize::MAX
            } else {
                c.notified_puts_from
            },
            ..c
        }
    }
}

impl Transport for VerbsTransport {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn capabilities(&self, target: Rank) -> Capabilities {
        self.toward(target, self.caps)
    }

    fn allocate(
        &self,
        len: usize,
        shared: Option<&SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError> {
        let memory = LocalMemory::for_network_window(
            len,
            shared.is_some(),
            "allocate_shared: the verbs backend shares no memory between ranks (run the ranks of one node on shared memory)",
        )?;
        // SAFETY: the memory is owned by the segment and freed after the region
        // (WindowSegment's contract).
        let mr = unsafe { self.register(memory.base(), len)? };
        let registration = VerbsRegistration::of(mr, self.lock_word_buffer()?);
        Ok(Arc::new(LocalSegment::new(memory, registration)))
    }

    fn expose(&self, memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError> {
        let memory = LocalMemory::from_user(memory);
        // SAFETY: the user's buffer stays in place while the segment holds it, and the
        // segment deregisters before giving it back or dropping it (WindowSegment's
        // contract).
        let mr = unsafe { self.register(memory.base(), memory.len())? };
        let registration = VerbsRegistration::of(mr, self.lock_word_buffer()?);
        Ok(Arc::new(LocalSegment::new(memory, registration)))
    }

    fn window_capabilities(&self, win: u32, target: Rank) -> Capabilities {
        match self.windows.get(win, target) {
            Some(m) => self.toward(
                target,
                Capabilities {
                    native_locks: m.lock.is_some(),
                    ..self.native
                },
            ),
            None => self.capabilities(target),
        }
    }

    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        remote: &[RemoteSegment],
    ) -> Result<(), TransportError> {
        let peers: Vec<Option<RemoteMem>> = if local.is_none() {
            vec![None; self.size]
        } else {
            remote
                .iter()
                .map(|seg| {
                    {
                        let k = &seg.key;
                        let word = |at: usize| {
                            (
                                u64::from_le_bytes(k[at..at + 8].try_into().expect("8 bytes")),
                                u32::from_le_bytes(k[at + 8..at + 12].try_into().expect("4 bytes")),
                            )
                        };
                        (k.len() == 12 || k.len() == 24).then(|| {
                            let (addr, rkey) = word(0);
                            RemoteMem {
                                addr,
                                rkey,
                                // Without a registration (an empty window): nothing in range.
                                len: if rkey == 0 && addr == 0 { 0 } else { seg.len },
                                lock: (k.len() == 24).then(|| word(12)),
                            }
                        })
                    }
                })
                .collect()
        };
        self.windows.insert(win, peers);
        Ok(())
    }

    fn window_freed(&self, win: u32) {
        self.windows.remove(win);
    }

    fn peer_gone(&self, rank: Rank) {
        if let Some(p) = self.lock().peers.get_mut(rank as usize) {
            p.dead = true;
        }
    }

    fn check_peers(&self, events: &mut Vec<Event>) {
        self.check_liveness(events);
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.collectives.allgather(mine)
    }

    fn barrier(&self) -> Result<(), TransportError> {
        self.collectives.barrier()
    }

    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError> {
        rma_backend::check_message(packet.len(), self.max_message, "RMA_VERBS_MAX_MESSAGE")?;
        rma_backend::send(&mut *self.lock(), self.rank, self.size, target, packet)
    }

    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError> {
        let m = self.remote(win, target, offset, data.len())?;
        if data.is_empty() {
            return Ok(Issued::Complete(None));
        }
        let inline = data.len() <= self.native.inject_size;
        self.issue(
            target,
            token,
            if inline { 8 } else { data.len() },
            data,
            None,
            &[SendOp::Write(m.addr + offset, m.rkey)],
            data.len() as u32,
            inline,
        )
    }

    fn put_notified(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        index: u32,
        token: u64,
    ) -> Result<Issued, TransportError> {
        // The engine asks only below NOTICE_LIMIT, and never toward this rank (the
        // loopback queue pair has no receives for the immediate data).
        if win >= NOTICE_LIMIT || index >= NOTICE_LIMIT || target == self.rank {
            return Err(TransportError::Unsupported("this notified put"));
        }
        let m = self.remote(win, target, offset, data.len())?;
        let inline = data.len() <= self.native.inject_size;
        // One work request whatever the size (a zero-byte one too: its notice is the
        // point): RDMA WRITE with the window and the counter as immediate data.
        self.issue(
            target,
            token,
            if inline { 8 } else { data.len() },
            data,
            None,
            &[SendOp::WriteImm(m.addr + offset, m.rkey, win << 16 | index)],
            data.len() as u32,
            inline,
        )
    }

    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let m = self.remote(win, target, offset, len)?;
        if len == 0 {
            return Ok(Issued::Complete(Some(Fetched::default())));
        }
        self.issue(
            target,
            token,
            len,
            &[],
            Some(len),
            &[SendOp::Read(m.addr + offset, m.rkey)],
            len as u32,
            false,
        )
    }

    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
        let (len, parts, fetch) = match atomic {
            NativeAtomic::Accumulate {
                op,
                datatype,
                operand,
                fetch,
            } => {
                if datatype.size() != 8
                    || !matches!(op, AccOp::Sum | AccOp::NoOp)
                    || operand.len() % 8 != 0
                {
                    return Err(TransportError::Unsupported(
                        "verbs atomics: Sum and NoOp on 8-byte integers only",
                    ));
                }
                if op == AccOp::NoOp && !fetch {
                    self.remote(win, target, offset, operand.len())?;
                    return Ok(Issued::Complete(None));
                }
                let m = self.remote(win, target, offset, operand.len())?;
                check_aligned(m.addr + offset)?;
                let parts: Vec<SendOp> = operand
                    .chunks_exact(8)
                    .enumerate()
                    .map(|(i, v)| {
                        let add = if op == AccOp::NoOp { 0 } else { word(v) };
                        SendOp::FetchAdd(m.addr + offset + 8 * i as u64, m.rkey, add)
                    })
                    .collect();
                (operand.len(), parts, fetch.then_some(operand.len()))
            }
            NativeAtomic::CompareAndSwap {
                datatype,
                compare,
                swap,
            } => {
                if datatype.size() != 8 || compare.len() != 8 || swap.len() != 8 {
                    return Err(TransportError::Unsupported(
                        "verbs compare-and-swap: 8-byte integers only",
                    ));
                }
                let m = self.remote(win, target, offset, 8)?;
                check_aligned(m.addr + offset)?;
                (
                    8,
                    vec![SendOp::CompareSwap(
                        m.addr + offset,
                        m.rkey,
                        word(compare),
                        word(swap),
                    )],
                    Some(8),
                )
            }
        };
        if parts.is_empty() {
            return Ok(Issued::Complete(fetch.map(|_| Fetched::default())));
        }
        self.issue(target, token, len, &[], fetch, &parts, 8, false)
    }

    fn try_lock(&self, win: u32, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        let (addr, rkey) = self.lock_word(win, target)?;
        if exclusive {
            let old = self.sync_atomic(target, SendOp::CompareSwap(addr, rkey, 0, EXCLUSIVE))?;
            return Ok(old == 0);
        }
        let old = self.sync_atomic(target, SendOp::FetchAdd(addr, rkey, 1))?;
        if old & EXCLUSIVE != 0 {
            // Held exclusively: take our count back.
            self.sync_atomic(target, SendOp::FetchAdd(addr, rkey, 1u64.wrapping_neg()))?;
            return Ok(false);
        }
        Ok(true)
    }

    fn unlock(&self, win: u32, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        let (addr, rkey) = self.lock_word(win, target)?;
        // Subtract (not store 0): a shared locker's passing increment stays counted. The
        // engine completed the epoch's operations before unlocking (and RC executes this
        // atomic after every earlier request on the QP).
        let sub = if exclusive { EXCLUSIVE } else { 1 };
        self.sync_atomic(target, SendOp::FetchAdd(addr, rkey, sub.wrapping_neg()))?;
        Ok(())
    }

    fn needs_target_progress(&self) -> bool {
        // Native puts, gets, atomics and lock words need nothing of us, but active
        // messages (accumulates the device cannot do, dynamic windows, PSCW and fence
        // control) wait for our progress.
        true
    }

    fn diagnose(&self) -> String {
        use std::fmt::Write;
        let inner = self.lock();
        let mut s = format!(
            "verbs: {} polls, {} keepalive rounds, {} events pending, {} of {} slots free, \
             {} idle polls",
            inner.polls,
            inner.keepalive_rounds,
            inner.pending.len(),
            inner.free.len(),
            inner.slots.len(),
            inner.idle
        );
        for (t, p) in inner.peers.iter().enumerate() {
            if p.posted.is_empty() && p.backlog.is_empty() && !p.dead && !p.bye {
                continue;
            }
            let _ = write!(
                s,
                "; peer {t}: {} posts, {} posted ({} unsignaled in a row), {} backlogged{}{}",
                p.next_wr,
                p.posted.len(),
                p.unsignaled,
                p.backlog.len(),
                if p.dead { ", dead" } else { "" },
                if p.bye { ", said goodbye" } else { "" }
            );
        }
        s
    }

    fn wait_for_traffic(&self, timeout: Duration) -> Result<Wake, TransportError> {
        let cq = {
            let mut inner = self.lock();
            if !inner.pending.is_empty() {
                return Ok(Wake::Traffic);
            }
            // Armed first, then polled once more: a completion that came in between
            // raises no event.
            inner.cq.arm()?;
            inner.drive()?;
            if !inner.pending.is_empty() {
                return Ok(Wake::Traffic);
            }
            inner.cq.clone()
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        Ok(if cq.wait(ms)? {
            Wake::Traffic
        } else {
            Wake::Timeout
        })
    }

    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError> {
        let before = events.len();
        let mut slept = false;
        // The counters live under the lock this poll holds anyway: no atomic RMW per poll.
        let polls;
        {
            let mut inner = self.lock();
            polls = inner.polls;
            inner.polls += 1;
            let r = inner.drive();
            // One by one: usually none or one, where a drain costs more than the moves.
            while let Some(e) = inner.pending.pop_front() {
                events.push(e);
            }
            r?;
            if events.len() > before || self.block_after == 0 {
                inner.idle = 0;
            } else {
                inner.idle += 1;
                if inner.idle >= self.block_after {
                    // Idle for a while: sleep until a completion (or 1 ms) instead of
                    // spinning, leaving the core to whoever has work (peers, the kernel's
                    // rxe tasks). Armed first, then polled once more: a completion that
                    // came in between raises no event.
                    inner.cq.arm()?;
                    let r = inner.drive();
                    while let Some(e) = inner.pending.pop_front() {
                        events.push(e);
                    }
                    r?;
                    if events.len() == before {
                        let cq = inner.cq.clone();
                        drop(inner);
                        cq.wait(1)?;
                        slept = true;
                    } else {
                        inner.idle = 0;
                    }
                }
            }
        }
        if polls % HOUSEKEEPING_EVERY == HOUSEKEEPING_EVERY - 1 {
            self.housekeeping(events)?;
        }
        let found = events.len() - before;
        if found == 0
            && !slept
            && self.yield_every != 0
            && polls % self.yield_every == self.yield_every - 1
        {
            // More ranks than cores (CI, the VM): give the core to a peer now and then.
            std::thread::yield_now();
        }
        Ok(found)
    }
}

/// Verbs atomics need an 8-byte aligned remote address (a misaligned one puts the QP in
/// error): refuse it at the origin.
fn check_aligned(addr: u64) -> Result<(), TransportError> {
    if !addr.is_multiple_of(8) {
        return Err(TransportError::Failed(format!(
            "verbs atomic at {addr:#x}: not 8-byte aligned"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::PostPoll;

    #[test]
    fn polls_after_posts_back_off_while_they_miss_and_resume_when_they_find() {
        let mut p = PostPoll::new(true);
        // Looks after every post while it finds ops complete (a software device).
        for _ in 0..100 {
            assert!(p.should_look());
            p.record(true);
        }
        // Misses (an HCA): after MISSES in a row, one look per EVERY posts.
        for _ in 0..PostPoll::MISSES {
            assert!(p.should_look());
            p.record(false);
        }
        let looks = (0..10 * PostPoll::EVERY)
            .filter(|_| {
                let look = p.should_look();
                if look {
                    p.record(false);
                }
                look
            })
            .count();
        assert_eq!(looks, 10);
        // One find and it looks after every post again.
        while !p.should_look() {}
        p.record(true);
        assert!(p.should_look());
        assert_eq!((p.looks, p.found), (100 + 8 + 10 + 1, 101));
        assert!(!PostPoll::new(false).should_look(), "disabled: never");
    }
}
