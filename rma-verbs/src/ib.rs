//! A thin safe layer over libibverbs (rdma-sys): device context, protection domain,
//! completion queue, memory regions and reliable-connected queue pairs.
//!
//! Ownership mirrors rdma-core's: a child holds an `Arc` of its parent (a memory region
//! its protection domain, a queue pair its domain and completion queue), so parents are
//! destroyed last; each `Drop` is one `ibv_destroy_*`/`ibv_dealloc_*`/`ibv_dereg_*` call.
//! A queue pair goes through its states as types: [`ResetQp`] → [`InitQp`] → [`RtrQp`] →
//! [`Qp`] (ready to send); only the last can post sends.
//!
//! Everything that can fail returns a [`VerbsError`] naming the call and errno, or for
//! completions the work-completion status by name.

use std::ffi::CStr;
use std::fmt;
use std::ptr;
use std::sync::Arc;

use rdma_sys as sys;
use rma_core::{BackendError, TransportError};

/// What went wrong in the verbs layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsError {
    /// No RDMA device, or not the one asked for.
    NoDevice(String),
    /// The port or GID asked for is not usable.
    Port(String),
    /// A verbs call failed with this errno.
    Call {
        /// The verbs function.
        call: &'static str,
        /// `errno` (or the negative/positive return value the call gave).
        errno: i32,
    },
    /// A work request completed with an error status.
    Completion {
        /// `ibv_wc_status` value.
        status: u32,
        /// Its name from `ibv_wc_status_str` (e.g. "transport retry counter exceeded").
        name: String,
        /// The provider's vendor error code.
        vendor_err: u32,
    },
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NoDevice(s) => write!(f, "verbs: no device: {s}"),
            VerbsError::Port(s) => write!(f, "verbs: port: {s}"),
            VerbsError::Call { call, errno } => write!(
                f,
                "verbs: {call} failed: {} (errno {errno})",
                std::io::Error::from_raw_os_error(*errno)
            ),
            VerbsError::Completion {
                status,
                name,
                vendor_err,
            } => write!(
                f,
                "verbs: work completion status {status} ({name}), vendor error {vendor_err:#x}"
            ),
        }
    }
}

impl std::error::Error for VerbsError {}

impl VerbsError {
    /// This failure as the transport's error, kept whole as the source under what was
    /// being done (an action: "registering 4096 bytes for remote access"). A missing
    /// device or port has no failure under it and stays a message.
    pub fn while_doing(self, doing: impl Into<String>) -> TransportError {
        match self {
            VerbsError::NoDevice(_) | VerbsError::Port(_) => {
                TransportError::Failed(self.to_string())
            }
            e => BackendError::new(doing, e).into(),
        }
    }
}

// Where the caller did not say what it was doing (a `?`), the kind of failure says it.
impl From<VerbsError> for TransportError {
    fn from(e: VerbsError) -> TransportError {
        let doing = match e {
            VerbsError::Completion { .. } => "completing a work request",
            _ => "calling the verbs library",
        };
        e.while_doing(doing)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn call_err(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        errno: errno(),
    }
}

/// The name of a work-completion status.
pub fn status_name(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a pointer to a static string for any value
    // (an "unknown" text for values it does not know).
    let s = unsafe { sys::ibv_wc_status_str(status) };
    if s.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// The 16 bytes of a GID.
pub type Gid = [u8; 16];

/// An open device with the port and GID chosen for this process.
pub struct Context {
    raw: *mut sys::ibv_context,
    /// Device name (e.g. "rxe0").
    pub name: String,
    /// Port number (1-based).
    pub port: u8,
    /// GID index used as source GID (RoCE, or IB with a GID asked for).
    pub gid_index: Option<u8>,
    /// Our GID at `gid_index` (zero without one).
    pub gid: Gid,
    /// Our LID (0 on RoCE).
    pub lid: u16,
    /// Active MTU of the port (an `ibv_mtu` value).
    pub active_mtu: u32,
    /// Whether the device does 8-byte atomics between processes (`atomic_cap` is HCA or
    /// GLOB).
    pub atomics: bool,
    /// Outstanding RDMA READ / atomic requests a QP may have (`max_qp_rd_atom`).
    pub max_qp_rd_atom: u32,
    /// Largest work-request count of a queue.
    pub max_qp_wr: u32,
    /// Largest completion queue.
    pub max_cqe: u32,
}

// SAFETY: an ibv_context is thread-safe per rdma-core's documentation (verbs calls may be
// made from several threads); the fields besides the pointer are plain data.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("gid_index", &self.gid_index)
            .field("lid", &self.lid)
            .field("atomics", &self.atomics)
            .finish()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device; every child (PD, CQ) holds an Arc of this
        // context, so none is alive any more.
        unsafe { sys::ibv_close_device(self.raw) };
    }
}

/// The first RoCE v2 GID index of `dev`/`port`, preferring an IPv4-mapped one, from sysfs
/// (`gid_attrs/types/N` reads "RoCE v2").
fn find_roce_v2_gid(dev: &str, port: u8, table_len: i32) -> Option<u8> {
    let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
    let mut any = None;
    for i in 0..table_len.clamp(0, 256) {
        let Ok(t) = std::fs::read_to_string(format!("{base}/gid_attrs/types/{i}")) else {
            continue;
        };
        if !t.trim().eq_ignore_ascii_case("RoCE v2") {
            continue;
        }
        let Ok(g) = std::fs::read_to_string(format!("{base}/gids/{i}")) else {
            continue;
        };
        let g = g.trim();
        if g.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        if g.starts_with("0000:0000:0000:0000:0000:ffff:") {
            return Some(i as u8);
        }
        any.get_or_insert(i as u8);
    }
    any
}

impl Context {
    /// Opens `device` (or the first device), queries `port`, and picks the GID: `gid_index`
    /// if given, else on Ethernet (RoCE) the first RoCE v2 GID (IPv4-mapped first), else
    /// none (InfiniBand: LID routing).
    pub fn open(
        device: Option<&str>,
        port: u8,
        gid_index: Option<u8>,
    ) -> Result<Arc<Context>, VerbsError> {
        let mut n = 0i32;
        // SAFETY: n is a valid out-pointer; the list is freed below.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError::NoDevice(format!(
                "ibv_get_device_list: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut chosen: *mut sys::ibv_device = ptr::null_mut();
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: the list has n entries.
            let dev = unsafe { *list.add(i) };
            // SAFETY: dev is a device of the list; the name is NUL-terminated.
            let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if chosen.is_null() && device.is_none_or(|d| d == name) {
                chosen = dev;
            }
            names.push(name);
        }
        let raw = if chosen.is_null() {
            ptr::null_mut()
        } else {
            // SAFETY: chosen is a device of the (still allocated) list.
            unsafe { sys::ibv_open_device(chosen) }
        };
        let open_errno = errno();
        // SAFETY: freed once; an opened context stays valid after the list is freed.
        unsafe { sys::ibv_free_device_list(list) };
        if chosen.is_null() {
            return Err(VerbsError::NoDevice(match device {
                Some(d) => format!("{d} is not among {names:?}"),
                None => "no RDMA device (is rdma_rxe or a provider loaded?)".into(),
            }));
        }
        if raw.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_open_device",
                errno: open_errno,
            });
        }
        let name = device
            .map(str::to_string)
            .unwrap_or_else(|| names.first().cloned().unwrap_or_default());
        let mut ctx = Context {
            raw,
            name,
            port,
            gid_index: None,
            gid: [0; 16],
            lid: 0,
            active_mtu: 0,
            atomics: false,
            max_qp_rd_atom: 0,
            max_qp_wr: 0,
            max_cqe: 0,
        };
        // SAFETY: zeroed is a valid ibv_device_attr (plain data).
        let mut dattr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: raw is open; dattr is a valid out-pointer.
        if unsafe { sys::ibv_query_device(raw, &mut dattr) } != 0 {
            return Err(call_err("ibv_query_device"));
        }
        ctx.atomics = dattr.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_HCA
            || dattr.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_GLOB;
        ctx.max_qp_rd_atom = dattr.max_qp_rd_atom.max(0) as u32;
        ctx.max_qp_wr = dattr.max_qp_wr.max(0) as u32;
        ctx.max_cqe = dattr.max_cqe.max(0) as u32;
        // SAFETY: zeroed is a valid ibv_port_attr (plain data).
        let mut pattr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: raw is open; pattr is a valid out-pointer of the size passed.
        if unsafe { sys::___ibv_query_port(raw, port, &mut pattr) } != 0 {
            return Err(call_err("ibv_query_port"));
        }
        if pattr.state != sys::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::Port(format!(
                "{} port {port} is not active (state {})",
                ctx.name, pattr.state
            )));
        }
        ctx.lid = pattr.lid;
        ctx.active_mtu = pattr.active_mtu;
        // IBV_LINK_LAYER_ETHERNET (an anonymous enum of verbs.h that rdma-sys does not bind).
        let ethernet = pattr.link_layer == 2;
        let index = match gid_index {
            Some(i) => Some(i),
            None if ethernet => Some(
                find_roce_v2_gid(&ctx.name, port, pattr.gid_tbl_len).ok_or_else(|| {
                    VerbsError::Port(format!(
                        "{} port {port}: no RoCE v2 GID (set RMA_VERBS_GID_INDEX)",
                        ctx.name
                    ))
                })?,
            ),
            None => None,
        };
        if let Some(i) = index {
            // SAFETY: zeroed is a valid ibv_gid (16 bytes).
            let mut gid: sys::ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: raw is open; gid is a valid out-pointer.
            if unsafe { sys::ibv_query_gid(raw, port, i as i32, &mut gid) } != 0 {
                return Err(call_err("ibv_query_gid"));
            }
            ctx.gid_index = Some(i);
            // SAFETY: every bit pattern of the union is a valid [u8; 16].
            ctx.gid = unsafe { gid.raw };
        }
        Ok(Arc::new(ctx))
    }
}

/// A protection domain.
pub struct Pd {
    raw: *mut sys::ibv_pd,
    /// The device.
    pub ctx: Arc<Context>,
}

// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>, VerbsError> {
        // SAFETY: the context is open.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.raw) };
        if raw.is_null() {
            return Err(call_err("ibv_alloc_pd"));
        }
        Ok(Arc::new(Pd {
            raw,
            ctx: ctx.clone(),
        }))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; MRs and QPs hold an Arc of it, so none is left.
        unsafe { sys::ibv_dealloc_pd(self.raw) };
    }
}

/// A completion queue, with a completion channel to sleep on if asked for.
pub struct Cq {
    raw: *mut sys::ibv_cq,
    /// Null without a channel.
    channel: *mut sys::ibv_comp_channel,
    _ctx: Arc<Context>,
}

// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

/// One work completion.
pub type Wc = sys::ibv_wc;

/// A zeroed work completion to poll into.
pub fn empty_wc() -> Wc {
    // SAFETY: ibv_wc is plain data; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

impl Cq {
    /// Creates a completion queue of at least `entries` entries; with `channel`, also a
    /// completion channel (non-blocking) that [`wait`](Self::wait) sleeps on.
    pub fn new(ctx: &Arc<Context>, entries: u32, channel: bool) -> Result<Arc<Cq>, VerbsError> {
        let entries = entries.min(ctx.max_cqe.max(1)) as i32;
        let ch = if channel {
            // SAFETY: the context is open.
            let ch = unsafe { sys::ibv_create_comp_channel(ctx.raw) };
            if ch.is_null() {
                return Err(call_err("ibv_create_comp_channel"));
            }
            // SAFETY: ch is a live channel; its fd is ours to make non-blocking (so
            // that ibv_get_cq_event never blocks).
            unsafe {
                let fd = (*ch).fd;
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            ch
        } else {
            ptr::null_mut()
        };
        // SAFETY: the context is open; the channel is null or live; no user context.
        let raw = unsafe { sys::ibv_create_cq(ctx.raw, entries, ptr::null_mut(), ch, 0) };
        if raw.is_null() {
            let e = call_err("ibv_create_cq");
            if !ch.is_null() {
                // SAFETY: created above, used by no CQ.
                unsafe { sys::ibv_destroy_comp_channel(ch) };
            }
            return Err(e);
        }
        Ok(Arc::new(Cq {
            raw,
            channel: ch,
            _ctx: ctx.clone(),
        }))
    }

    /// Asks for an event on the channel at the next completion (`ibv_req_notify_cq`).
    pub fn arm(&self) -> Result<(), VerbsError> {
        if self.channel.is_null() {
            return Ok(());
        }
        // SAFETY: the CQ is alive.
        let rc = unsafe { sys::ibv_req_notify_cq(self.raw, 0) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_req_notify_cq",
                errno: rc,
            });
        }
        Ok(())
    }

    /// Sleeps until the armed CQ has an event or `timeout_ms` passed (at once without a
    /// channel). Returns whether an event came (it is read and acknowledged).
    pub fn wait(&self, timeout_ms: i32) -> Result<bool, VerbsError> {
        if self.channel.is_null() {
            return Ok(false);
        }
        // SAFETY: the channel is alive as long as self.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc <= 0 {
            return Ok(false);
        }
        let mut cq = ptr::null_mut();
        let mut cq_ctx = ptr::null_mut();
        // SAFETY: live channel, valid out-pointers; the fd is non-blocking (EAGAIN when
        // another thread took the event).
        if unsafe { sys::ibv_get_cq_event(self.channel, &mut cq, &mut cq_ctx) } != 0 {
            return Ok(false);
        }
        // SAFETY: the event is for our CQ (the only one on this channel); acknowledged
        // once, so that destroying the CQ does not wait for it.
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }

    /// Polls up to `wcs.len()` completions; returns how many were written.
    #[inline]
    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize, VerbsError> {
        let n = wcs.len().min(i32::MAX as usize) as i32;
        // SAFETY: the CQ is alive; wcs has room for n entries.
        let rc = unsafe { sys::ibv_poll_cq(self.raw, n, wcs.as_mut_ptr()) };
        if rc < 0 {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                errno: -rc,
            });
        }
        Ok(rc as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq; QPs using it hold an Arc, so none is left;
        // every event was acknowledged in `wait`. The channel goes after its CQ.
        unsafe {
            sys::ibv_destroy_cq(self.raw);
            if !self.channel.is_null() {
                sys::ibv_destroy_comp_channel(self.channel);
            }
        }
    }
}

/// Access rights of a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// Local writes only (send, receive and result buffers).
    pub const LOCAL: Access = Access(sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// What a window needs: peers read, write and (if `atomics`) run atomics on it; local
    /// write is required by verbs for remote write and atomics.
    pub fn window(atomics: bool) -> Access {
        let mut a = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        if atomics {
            a |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        }
        Access(a.0)
    }
}

/// A registered memory region.
pub struct Mr {
    raw: *mut sys::ibv_mr,
    _pd: Arc<Pd>,
}

// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr+len` stays allocated (and is not unmapped) until the region is dropped.
    pub unsafe fn register(
        pd: &Arc<Pd>,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        debug_assert!(len > 0, "empty registration");
        // SAFETY: the PD is alive; the caller keeps the memory allocated.
        let raw = unsafe { sys::ibv_reg_mr(pd.raw, addr.cast(), len, access.0 as i32) };
        if raw.is_null() {
            return Err(call_err("ibv_reg_mr"));
        }
        Ok(Mr {
            raw,
            _pd: pd.clone(),
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the region is registered until drop.
        unsafe { (*self.raw).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.raw).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr, deregistered once.
        unsafe { sys::ibv_dereg_mr(self.raw) };
    }
}

/// A registered buffer owned by us: the bytes and their region.
pub struct Buffer {
    // Field order: the region is deregistered before the memory is freed.
    mr: Mr,
    mem: Box<[u64]>,
    len: usize,
}

impl Buffer {
    /// Allocates and registers `len` zeroed bytes (8-byte aligned) with `access`.
    pub fn new(pd: &Arc<Pd>, len: usize, access: Access) -> Result<Buffer, VerbsError> {
        let mut mem = vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice();
        // SAFETY: `mem` is owned by the buffer and freed after the region (field order).
        let mr = unsafe { Mr::register(pd, mem.as_mut_ptr().cast(), mem.len() * 8, access)? };
        Ok(Buffer { mr, mem, len })
    }
    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Address of the first byte.
    pub fn addr(&self) -> *mut u8 {
        self.mem.as_ptr() as *mut u8
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    /// Copies `src` to the start of the buffer. Only while no work request uses it.
    pub fn fill(&mut self, src: &[u8]) {
        assert!(src.len() <= self.len, "buffer too small");
        let bytes: &mut [u8] = bytemuck_bytes_mut(&mut self.mem);
        rma_backend::copy::copy_slice(&mut bytes[..src.len()], src);
    }
    /// The first `n` bytes. Only while no work request writes it.
    pub fn bytes(&self, n: usize) -> &[u8] {
        assert!(n <= self.len, "buffer too small");
        // SAFETY: `mem` is `len.div_ceil(8)` u64s, so `n <= len` bytes are in bounds;
        // u8 has no alignment or validity requirement.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().cast::<u8>(), n) }
    }
}

fn bytemuck_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: any u64 slice is a valid byte slice of 8x its length (u8: align 1, no
    // invalid values), and the borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// What a peer needs to connect a QP to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// GID (zero without one).
    pub gid: Gid,
}

impl Endpoint {
    /// Bytes on the wire of the bootstrap exchange.
    pub const LEN: usize = 26;
    /// Encodes (little-endian).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
    }
    /// Decodes what [`encode`](Self::encode) wrote.
    pub fn decode(b: &[u8]) -> Option<Endpoint> {
        if b.len() < Self::LEN {
            return None;
        }
        Some(Endpoint {
            qpn: u32::from_le_bytes(b[0..4].try_into().ok()?),
            psn: u32::from_le_bytes(b[4..8].try_into().ok()?),
            lid: u16::from_le_bytes(b[8..10].try_into().ok()?),
            gid: b[10..26].try_into().ok()?,
        })
    }
}

/// Connection parameters of RTR and RTS.
#[derive(Debug, Clone, Copy)]
pub struct QpParams {
    /// Local ACK timeout exponent: 4.096 us * 2^timeout per try.
    pub timeout: u8,
    /// Transport retries before IBV_WC_RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (7: forever).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomics we issue, and accept.
    pub rd_atomic: u8,
}

struct QpHandle {
    raw: *mut sys::ibv_qp,
    pd: Arc<Pd>,
    _cq: Arc<Cq>,
    max_inline: u32,
    max_send_wr: u32,
}

// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for QpHandle {}
// SAFETY: as above.
unsafe impl Sync for QpHandle {}

impl Drop for QpHandle {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp, destroyed once; its CQ and PD outlive it
        // (Arcs held here).
        unsafe { sys::ibv_destroy_qp(self.raw) };
    }
}

impl QpHandle {
    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
        call: &'static str,
    ) -> Result<(), VerbsError> {
        // SAFETY: the QP is alive; attr is a valid attribute struct for the mask's fields.
        let rc = unsafe { sys::ibv_modify_qp(self.raw, attr, mask.0 as i32) };
        if rc != 0 {
            return Err(VerbsError::Call { call, errno: rc });
        }
        Ok(())
    }
    fn qpn(&self) -> u32 {
        // SAFETY: the QP is alive.
        unsafe { (*self.raw).qp_num }
    }
}

/// A reliable-connected QP just created (RESET).
pub struct ResetQp(QpHandle);
/// In INIT: receives may be posted.
pub struct InitQp(QpHandle);
/// In RTR: connected to its peer, receiving.
pub struct RtrQp(QpHandle, QpParams);
/// In RTS: ready to send.
pub struct Qp(QpHandle);

impl ResetQp {
    /// Creates an RC QP on `pd` with `cq` for both queues.
    pub fn new(
        pd: &Arc<Pd>,
        cq: &Arc<Cq>,
        send_wr: u32,
        recv_wr: u32,
        inline: u32,
    ) -> Result<ResetQp, VerbsError> {
        let mut last = 0;
        // Providers differ in the inline size they take: ask for less until it works.
        for inline in [inline, inline.min(64), 0] {
            // SAFETY: zeroed is a valid ibv_qp_init_attr (pointers null, numbers 0).
            let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            init.send_cq = cq.raw;
            init.recv_cq = cq.raw;
            init.cap.max_send_wr = send_wr;
            init.cap.max_recv_wr = recv_wr;
            init.cap.max_send_sge = 1;
            init.cap.max_recv_sge = 1;
            init.cap.max_inline_data = inline;
            init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            init.sq_sig_all = 0;
            // SAFETY: the PD and CQ are alive (and kept by the handle); init is valid.
            let raw = unsafe { sys::ibv_create_qp(pd.raw, &mut init) };
            if !raw.is_null() {
                return Ok(ResetQp(QpHandle {
                    raw,
                    pd: pd.clone(),
                    _cq: cq.clone(),
                    max_inline: init.cap.max_inline_data,
                    max_send_wr: init.cap.max_send_wr,
                }));
            }
            last = errno();
        }
        Err(VerbsError::Call {
            call: "ibv_create_qp",
            errno: last,
        })
    }

    /// Queue pair number.
    pub fn qpn(&self) -> u32 {
        self.0.qpn()
    }

    /// RESET → INIT, allowing peers remote read, write and atomics on our windows (the
    /// memory regions decide what each window allows).
    pub fn init(self) -> Result<InitQp, VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.0.pd.ctx.port;
        a.qp_access_flags = (sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC)
            .0;
        self.0.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;
        Ok(InitQp(self.0))
    }
}

impl InitQp {
    /// Queue pair number.
    pub fn qpn(&self) -> u32 {
        self.0.qpn()
    }

    /// Posts a receive (allowed from INIT on).
    ///
    /// # Safety
    /// As [`Qp::post_recv`].
    pub unsafe fn post_recv(
        &self,
        wr_id: u64,
        addr: *mut u8,
        len: u32,
        lkey: u32,
    ) -> Result<(), VerbsError> {
        // SAFETY: caller's contract.
        unsafe { post_recv(&self.0, wr_id, addr, len, lkey) }
    }

    /// INIT → RTR: connected to `remote`.
    pub fn ready_to_receive(
        self,
        remote: &Endpoint,
        params: QpParams,
    ) -> Result<RtrQp, VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        let ctx = &self.0.pd.ctx;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = ctx.active_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = params.rd_atomic;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.src_path_bits = 0;
        a.ah_attr.port_num = ctx.port;
        if let Some(i) = ctx.gid_index {
            // RoCE: routed by GID (is_global), dlid 0.
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = sys::ibv_gid { raw: remote.gid };
            a.ah_attr.grh.sgid_index = i;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.flow_label = 0;
            a.ah_attr.grh.traffic_class = 0;
        }
        self.0.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;
        Ok(RtrQp(self.0, params))
    }
}

impl RtrQp {
    /// RTR → RTS with our first PSN `psn`.
    pub fn ready_to_send(self, psn: u32) -> Result<Qp, VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.timeout = self.1.timeout;
        a.retry_cnt = self.1.retry_cnt;
        a.rnr_retry = self.1.rnr_retry;
        a.sq_psn = psn;
        a.max_rd_atomic = self.1.rd_atomic;
        self.0.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )?;
        Ok(Qp(self.0))
    }
}

/// # Safety
/// `addr..addr+len` lies in memory registered with `lkey` that stays allocated and
/// untouched until this receive's completion is polled (or the QP is destroyed).
unsafe fn post_recv(
    qp: &QpHandle,
    wr_id: u64,
    addr: *mut u8,
    len: u32,
    lkey: u32,
) -> Result<(), VerbsError> {
    let mut sge = sys::ibv_sge {
        addr: addr as u64,
        length: len,
        lkey,
    };
    // SAFETY: zeroed is a valid ibv_recv_wr (next null).
    let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad = ptr::null_mut();
    // SAFETY: the QP is alive; wr and sge live for the call (the provider copies them);
    // the buffer per the caller's contract.
    let rc = unsafe { sys::ibv_post_recv(qp.raw, &mut wr, &mut bad) };
    if rc != 0 {
        return Err(VerbsError::Call {
            call: "ibv_post_recv",
            errno: rc,
        });
    }
    Ok(())
}

/// One send-queue work request, as this crate uses them.
#[derive(Debug, Clone, Copy)]
pub enum SendOp {
    /// SEND of the local bytes (an active message).
    Send,
    /// SEND with immediate data (the goodbye).
    SendImm(u32),
    /// RDMA WRITE of the local bytes to (remote address, rkey).
    Write(u64, u32),
    /// RDMA WRITE with immediate data: the write, then a completion at the target (it
    /// takes a posted receive, whose buffer it leaves alone) carrying the 32 bits, once
    /// the data is in place.
    WriteImm(u64, u32, u32),
    /// RDMA READ into the local bytes from (remote address, rkey).
    Read(u64, u32),
    /// 8-byte fetch-and-add at (remote address, rkey) of `add`; old value into the local
    /// 8 bytes.
    FetchAdd(u64, u32, u64),
    /// 8-byte compare-and-swap at (remote address, rkey): if equal to `compare` store
    /// `swap`; old value into the local 8 bytes.
    CompareSwap(u64, u32, u64, u64),
}

/// Local bytes of a send work request.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// Address.
    pub addr: *const u8,
    /// Length.
    pub len: u32,
    /// Local key (ignored when inline).
    pub lkey: u32,
}

impl Qp {
    /// Queue pair number.
    pub fn qpn(&self) -> u32 {
        self.0.qpn()
    }
    /// Largest inline payload.
    pub fn max_inline(&self) -> u32 {
        self.0.max_inline
    }
    /// Send queue depth.
    pub fn max_send_wr(&self) -> u32 {
        self.0.max_send_wr
    }

    /// Posts a receive.
    ///
    /// # Safety
    /// `addr..addr+len` lies in memory registered with `lkey` that stays allocated and
    /// untouched until this receive's completion is polled (or the QP is destroyed).
    pub unsafe fn post_recv(
        &self,
        wr_id: u64,
        addr: *mut u8,
        len: u32,
        lkey: u32,
    ) -> Result<(), VerbsError> {
        // SAFETY: caller's contract.
        unsafe { post_recv(&self.0, wr_id, addr, len, lkey) }
    }

    /// Posts one send-queue work request. `inline` copies the local bytes into the
    /// request (at most [`max_inline`](Self::max_inline)); `signaled` asks for a completion.
    ///
    /// # Safety
    /// Unless inline, the local bytes lie in memory registered with `local.lkey` that
    /// stays allocated and is neither written (sends, writes) nor read (reads, atomics)
    /// until the completion of this request or of a later signaled one on this QP is
    /// polled. The remote range is the caller's to have checked against the target's
    /// window.
    #[inline]
    pub unsafe fn post_send(
        &self,
        wr_id: u64,
        op: SendOp,
        local: Local,
        inline: bool,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        debug_assert!(
            !inline || local.len <= self.0.max_inline,
            "inline too large"
        );
        let mut sge = sys::ibv_sge {
            addr: local.addr as u64,
            length: local.len,
            lkey: local.lkey,
        };
        // SAFETY: zeroed is a valid ibv_send_wr (next null, unions zero).
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = if local.len == 0 { 0 } else { 1 };
        let mut flags = 0u32;
        if signaled {
            flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if inline && local.len > 0 {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        use sys::ibv_wr_opcode as O;
        match op {
            SendOp::Send => wr.opcode = O::IBV_WR_SEND,
            SendOp::SendImm(imm) => {
                wr.opcode = O::IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Write(addr, rkey) => {
                wr.opcode = O::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: addr,
                    rkey,
                };
            }
            SendOp::WriteImm(addr, rkey, imm) => {
                wr.opcode = O::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: addr,
                    rkey,
                };
            }
            SendOp::Read(addr, rkey) => {
                wr.opcode = O::IBV_WR_RDMA_READ;
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: addr,
                    rkey,
                };
            }
            SendOp::FetchAdd(addr, rkey, add) => {
                wr.opcode = O::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
            SendOp::CompareSwap(addr, rkey, compare, swap) => {
                wr.opcode = O::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: addr,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
        }
        wr.send_flags = flags;
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is alive; wr and sge live for the call; buffers per the caller's
        // contract.
        let rc = unsafe { sys::ibv_post_send(self.0.raw, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_post_send",
                errno: rc,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips() {
        let e = Endpoint {
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            lid: 7,
            gid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(b.len(), Endpoint::LEN);
        assert_eq!(Endpoint::decode(&b), Some(e));
        assert_eq!(Endpoint::decode(&b[..Endpoint::LEN - 1]), None);
    }

    #[test]
    fn status_names_come_from_libibverbs() {
        assert_eq!(status_name(0), "success");
        let retry = rdma_sys::ibv_wc_status::IBV_WC_RETRY_EXC_ERR;
        assert!(
            status_name(retry).contains("retry"),
            "{}",
            status_name(retry)
        );
        let e = VerbsError::Completion {
            status: retry,
            name: status_name(retry),
            vendor_err: 0,
        };
        let t: TransportError = e.clone().into();
        assert_eq!(t.to_string(), "completing a work request failed");
        // The status is kept whole as the cause.
        let cause = std::error::Error::source(&t).and_then(|c| c.downcast_ref::<VerbsError>());
        assert_eq!(cause, Some(&e), "{t:?}");
        assert!(
            cause.is_some_and(|c| c.to_string().contains("retry")),
            "{t:?}"
        );
    }

    /// Without an RDMA device (the host of CI: its kernel has no RDMA) opening fails
    /// with an error, not a panic; with one, the named device that is not there too.
    #[test]
    fn a_missing_device_is_an_error() {
        match Context::open(Some("no-such-device"), 1, None) {
            Err(VerbsError::NoDevice(_)) => {}
            other => panic!("expected NoDevice, got {other:?}"),
        }
    }
}
