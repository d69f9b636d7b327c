//! A safe owner of one libfabric endpoint and what it needs (fabric, domain, address
//! vector, completion queue), opened from `fi_getinfo` for an `FI_EP_RDM` endpoint.
//!
//! Every call takes `&mut self` or is used under the transport's mutex: the domain is
//! opened with `FI_THREAD_DOMAIN`, so libfabric does no locking of its own.

use std::ffi::{c_void, CStr, CString};
use std::ptr;

use rma_core::TransportError;

use crate::sys;

/// A libfabric return code as a typed error, with `fi_strerror`'s text.
pub fn fi_error(what: &str, rc: i64) -> TransportError {
    let code = rc.unsigned_abs() as u32;
    // SAFETY: fi_strerror returns a pointer to a static string for any code.
    let msg = unsafe { CStr::from_ptr(sys::fi_strerror(code as i32)) };
    TransportError::Failed(format!("{what}: {} ({rc})", msg.to_string_lossy()))
}

fn check(what: &str, rc: i32) -> Result<(), TransportError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(fi_error(what, rc as i64))
    }
}

/// Whether a data-transfer call returned -FI_EAGAIN.
pub fn is_again(rc: isize) -> bool {
    rc == -(sys::FI_EAGAIN as isize)
}

/// The mr_mode bits every user of [`Endpoint`] honours. FI_MR_LOCAL (local buffers
/// registered, their descriptors passed) is added by those that pass [`LocalBuf`]
/// descriptors: [`Endpoint::open_with`] with `local_mr`.
const MR_MODE_SUPPORTED: u64 = (sys::FI_MR_VIRT_ADDR
    | sys::FI_MR_ALLOCATED
    | sys::FI_MR_PROV_KEY
    | sys::FI_MR_ENDPOINT
    | sys::FI_MR_RMA_EVENT) as u64;

/// What the chosen provider offers.
#[derive(Debug, Clone)]
pub struct Offer {
    /// `prov_name`, e.g. "tcp;ofi_rxm".
    pub provider: String,
    /// `fabric_attr->name`.
    pub fabric: String,
    /// mr_mode bits required.
    pub mr_mode: u64,
    /// caps granted.
    pub caps: u64,
    /// Largest inject.
    pub inject_size: usize,
    /// Largest message.
    pub max_msg_size: usize,
    /// tx msg_order granted.
    pub msg_order: u64,
    /// Manual data progress (the target must poll for data to move).
    pub manual_progress: bool,
    /// Receive buffers take several messages (`FI_MULTI_RECV`, minimum free space set).
    pub multi_recv: bool,
}

/// One endpoint with its fabric, domain, AV and CQ. Closed in reverse order on drop.
pub struct Endpoint {
    info: *mut sys::fi_info,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    av: *mut sys::fid_av,
    cq: *mut sys::fid_cq,
    ep: *mut sys::fid_ep,
    /// What the provider offers.
    pub offer: Offer,
    /// Local buffers must be registered and their descriptors passed (FI_MR_LOCAL asked
    /// for by the provider, or forced with [`force_local_mr`](Self::force_local_mr)).
    local_mr: bool,
    /// Regions of [`LocalBuf`]s (null: free slot), closed after the endpoint and before
    /// the domain.
    local_regions: Vec<*mut sys::fid_mr>,
    /// The completion queue's wait object (`FI_WAIT_FD`), where the provider has one:
    /// what the progress agent sleeps on. Owned by the CQ (closed with it).
    wait_fd: Option<i32>,
    /// Requested keys of local regions (providers without FI_MR_PROV_KEY take ours), far
    /// from the windows' keys that count from 1.
    next_local_key: u64,
    /// Local regions registered so far (a buffer that grew is registered again).
    local_registrations: u64,
}

// SAFETY: the handles are plain pointers to libfabric objects opened with
// FI_THREAD_DOMAIN; every use is serialized by the owner (the transport's mutex, or a
// single thread in tests), which is what FI_THREAD_DOMAIN asks.
unsafe impl Send for Endpoint {}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("offer", &self.offer)
            .finish()
    }
}

fn cstr_or_empty(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null strings in fi_info are NUL-terminated C strings owned by it.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// fi_getinfo for an RDM endpoint with `caps`, on `provider` if given.
fn getinfo(
    provider: Option<&str>,
    caps: u64,
    local_mr: bool,
) -> Result<*mut sys::fi_info, TransportError> {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structs.
    let hints = unsafe { sys::fi_dupinfo(ptr::null()) };
    if hints.is_null() {
        return Err(TransportError::Failed("fi_dupinfo: out of memory".into()));
    }
    // SAFETY: `hints` and its attribute pointers were allocated by fi_dupinfo above and
    // are exclusively ours until fi_freeinfo; strings put in it are strdup'ed (freed by
    // fi_freeinfo).
    let out = unsafe {
        let h = &mut *hints;
        h.caps = caps;
        h.mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
        (*h.ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
        (*h.domain_attr).mr_mode = if local_mr {
            (MR_MODE_SUPPORTED | sys::FI_MR_LOCAL as u64) as i32
        } else {
            MR_MODE_SUPPORTED as i32
        };
        (*h.domain_attr).threading = sys::fi_threading_FI_THREAD_DOMAIN;
        (*h.tx_attr).msg_order = sys::FI_ORDER_SAS as u64;
        (*h.rx_attr).msg_order = sys::FI_ORDER_SAS as u64;
        if let Some(p) = provider {
            let c = CString::new(p)
                .map_err(|_| TransportError::Failed("provider name with a NUL".into()))?;
            (*h.fabric_attr).prov_name = libc::strdup(c.as_ptr());
        }
        let mut info = ptr::null_mut();
        let rc = sys::fi_getinfo(
            sys::rma_fi_version(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION),
            ptr::null(),
            ptr::null(),
            0,
            hints,
            &mut info,
        );
        sys::fi_freeinfo(hints);
        if rc != 0 {
            Err(fi_error(
                &format!(
                    "fi_getinfo (FI_EP_RDM, provider {})",
                    provider.unwrap_or("any")
                ),
                rc as i64,
            ))
        } else {
            Ok(info)
        }
    };
    out
}

/// Whether `info` (non-null, from fi_getinfo) is a provider whose `FI_MULTI_RECV` is
/// broken in the libfabric found here (shm, ofi_rxm), so it gets one message per buffer.
///
/// # Safety
/// `info` must be a valid fi_info with its fabric attributes.
unsafe fn multi_recv_breaks(info: *mut sys::fi_info) -> bool {
    // SAFETY: caller's contract.
    let name = unsafe { cstr_or_empty((*(*info).fabric_attr).prov_name) };
    // libfabric 1.17's shm provider crashes (SIGSEGV inside the library) on the first
    // messages once FI_MULTI_RECV is asked for. ofi_rxm (tcp;ofi_rxm, verbs;ofi_rxm)
    // corrupts messages above its eager size (16 KiB: sent in segments or by rendezvous)
    // in multi-message buffers: measured, 4 of 12 runs of 2-rank large active-message
    // ops on tcp;ofi_rxm received garbage ("active message from unknown rank 65536"),
    // 0 of 16 with every message under 16000 bytes, 0 of 12 with one message per
    // buffer (the class of ofiwg/libfabric#5599: the buffer's release overtaking a
    // message still being written into it).
    name == "shm" || name.contains("ofi_rxm")
}

impl Endpoint {
    /// Opens an RDM endpoint with FI_MSG | FI_RMA (| FI_ATOMIC if `atomics` and the
    /// provider has it) on `provider` (libfabric's name, e.g. "tcp;ofi_rxm"; `None`:
    /// libfabric's choice, which honours `FI_PROVIDER`). `av_count`: peers expected.
    pub fn open(
        provider: Option<&str>,
        atomics: bool,
        av_count: usize,
    ) -> Result<Endpoint, TransportError> {
        Self::open_with(provider, atomics, av_count, 0, false)
    }

    /// [`open`](Self::open), also asking for `FI_MULTI_RECV` when `min_multi_recv` is
    /// not 0: then a receive buffer posted with
    /// [`post_multi_recv`](Self::post_multi_recv) takes messages until less than
    /// `min_multi_recv` bytes are left in it ([`Offer::multi_recv`] says whether the
    /// provider agreed). With `local_mr`, providers that need local buffers registered
    /// (FI_MR_LOCAL) are taken too: the caller then passes a [`LocalBuf`]'s descriptor
    /// with every buffer it hands the provider.
    pub fn open_with(
        provider: Option<&str>,
        atomics: bool,
        av_count: usize,
        min_multi_recv: usize,
        local_mr: bool,
    ) -> Result<Endpoint, TransportError> {
        let base = (sys::FI_MSG | sys::FI_RMA) as u64;
        let multi = if min_multi_recv > 0 {
            sys::FI_MULTI_RECV as u64
        } else {
            0
        };
        let atomic = if atomics { sys::FI_ATOMIC as u64 } else { 0 };
        // Most wanted first; a provider without one of the extras still serves.
        let mut tries = vec![base | atomic | multi, base | atomic, base | multi, base];
        tries.dedup();
        let mut last = TransportError::Failed("fi_getinfo: nothing tried".into());
        for caps in tries {
            let list = match getinfo(provider, caps, local_mr) {
                Ok(list) => list,
                Err(e) => {
                    tracing::info!(caps, "no provider with these capabilities ({e})");
                    last = e;
                    continue;
                }
            };
            // fi_getinfo lists one entry per usable interface (tcp: each address of
            // each up link). An entry can fail to open where another works: an IPv6
            // address still in duplicate address detection refuses bind() with
            // EADDRNOTAVAIL for a second or two after its link came up. So each entry
            // is tried in libfabric's order until one opens.
            let mut node = list;
            while !node.is_null() {
                // SAFETY: `node` is an entry of the list fi_getinfo returned, alive until
                // the fi_freeinfo below; `next` is null or the next entry.
                let (skip, next) =
                    unsafe { (caps & multi != 0 && multi_recv_breaks(node), (*node).next) };
                if !skip {
                    // SAFETY: fi_dupinfo copies one entry (not the list: its `next` is
                    // null) into an fi_info the endpoint owns and frees on drop.
                    let one = unsafe { sys::fi_dupinfo(node) };
                    if one.is_null() {
                        last = TransportError::Failed("fi_dupinfo: out of memory".into());
                    } else {
                        match Self::open_info(one, caps, multi, av_count, min_multi_recv) {
                            Ok(me) => {
                                // SAFETY: the list is ours and no longer used.
                                unsafe { sys::fi_freeinfo(list) };
                                return Ok(me);
                            }
                            Err(e) => {
                                tracing::info!(caps, "an fi_getinfo entry did not open ({e})");
                                last = e;
                            }
                        }
                    }
                }
                node = next;
            }
            // SAFETY: the list is ours and no longer used.
            unsafe { sys::fi_freeinfo(list) };
        }
        Err(last)
    }

    /// Opens fabric, domain, AV, CQ and endpoint of `info` (one entry, owned from here
    /// on: freed with the endpoint, or at once if opening fails).
    fn open_info(
        info: *mut sys::fi_info,
        asked: u64,
        multi: u64,
        av_count: usize,
        min_multi_recv: usize,
    ) -> Result<Endpoint, TransportError> {
        let mut me = Endpoint {
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            ep: ptr::null_mut(),
            offer: Offer {
                provider: String::new(),
                fabric: String::new(),
                mr_mode: 0,
                caps: 0,
                inject_size: 0,
                max_msg_size: 0,
                msg_order: 0,
                manual_progress: false,
                multi_recv: false,
            },
            local_mr: false,
            local_regions: Vec::new(),
            wait_fd: None,
            next_local_key: 1 << 30,
            local_registrations: 0,
        };
        // SAFETY: `info` is a non-null entry copied by fi_dupinfo, owned by `me` (freed
        // on drop); its attribute pointers are valid for its life. Each open writes the
        // handle into `me`, whose Drop closes the non-null ones in reverse order, so an
        // early return closes what was opened.
        unsafe {
            let i = &*info;
            let fa = &*i.fabric_attr;
            let da = &*i.domain_attr;
            let ta = &*i.tx_attr;
            me.offer = Offer {
                provider: cstr_or_empty(fa.prov_name),
                fabric: cstr_or_empty(fa.name),
                mr_mode: da.mr_mode as u64,
                caps: i.caps,
                inject_size: ta.inject_size,
                max_msg_size: (*i.ep_attr).max_msg_size,
                msg_order: ta.msg_order,
                manual_progress: da.data_progress == sys::fi_progress_FI_PROGRESS_MANUAL,
                multi_recv: false,
            };
            me.local_mr = da.mr_mode as u64 & sys::FI_MR_LOCAL as u64 != 0;
            check(
                "fi_fabric",
                sys::rma_fi_fabric(i.fabric_attr, &mut me.fabric, ptr::null_mut()),
            )?;
            check(
                "fi_domain",
                sys::rma_fi_domain(me.fabric, info, &mut me.domain, ptr::null_mut()),
            )?;
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                count: av_count.max(1),
                ..Default::default()
            };
            check(
                "fi_av_open",
                sys::rma_fi_av_open(me.domain, &mut av_attr, &mut me.av, ptr::null_mut()),
            )?;
            // A file descriptor to sleep on where the provider has one (the progress
            // agent's wait object); a provider without falls back to no wait object.
            // Cheap when nobody sleeps: libfabric writes to it only when it was reset
            // (by fi_trywait), not per completion.
            // `RMA_OFI_WAIT_FD=0`: none (the progress agent then polls on a timer).
            let fd_wanted = std::env::var("RMA_OFI_WAIT_FD").map_or(true, |v| v.trim() != "0");
            let objs = if fd_wanted {
                &[sys::fi_wait_obj_FI_WAIT_FD, sys::fi_wait_obj_FI_WAIT_NONE][..]
            } else {
                &[sys::fi_wait_obj_FI_WAIT_NONE][..]
            };
            for &wait_obj in objs {
                let mut cq_attr = sys::fi_cq_attr {
                    format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                    wait_obj,
                    size: 0,
                    ..Default::default()
                };
                let rc = sys::rma_fi_cq_open(me.domain, &mut cq_attr, &mut me.cq, ptr::null_mut());
                if rc != 0 && wait_obj == sys::fi_wait_obj_FI_WAIT_FD {
                    tracing::info!(rc, "no FI_WAIT_FD completion queue; no wait object");
                    me.cq = ptr::null_mut();
                    continue;
                }
                check("fi_cq_open", rc)?;
                if wait_obj == sys::fi_wait_obj_FI_WAIT_FD {
                    let mut fd: std::os::raw::c_int = -1;
                    if sys::rma_fi_cq_wait_fd(me.cq, &mut fd) == 0 && fd >= 0 {
                        me.wait_fd = Some(fd);
                    }
                }
                break;
            }
            check(
                "fi_endpoint",
                sys::rma_fi_endpoint(me.domain, info, &mut me.ep, ptr::null_mut()),
            )?;
            check(
                "fi_ep_bind(av)",
                sys::rma_fi_ep_bind(me.ep, &mut (*me.av).fid, 0),
            )?;
            check(
                "fi_ep_bind(cq)",
                sys::rma_fi_ep_bind(
                    me.ep,
                    &mut (*me.cq).fid,
                    (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
                ),
            )?;
            if asked & multi != 0 && i.caps & multi != 0 {
                // Before fi_enable; a provider that refuses the option gets one message
                // per buffer.
                me.offer.multi_recv = sys::rma_fi_setopt_min_multi_recv(me.ep, min_multi_recv) == 0;
            }
            check("fi_enable", sys::rma_fi_enable(me.ep))?;
        }
        Ok(me)
    }

    /// Whether the completion queue has a wait object ([`wait_fd`](Self::wait_fd)).
    pub fn has_wait_object(&self) -> bool {
        self.wait_fd.is_some()
    }

    /// Arms the wait object (`fi_trywait`): true when it is safe to block on it, false
    /// when completions are waiting to be read (or there is no wait object).
    pub fn trywait(&mut self) -> bool {
        if self.wait_fd.is_none() {
            return false;
        }
        // SAFETY: fabric and CQ are open; the caller holds the endpoint (FI_THREAD_DOMAIN:
        // no other call on the domain at the same time).
        unsafe { sys::rma_fi_trywait_cq(self.fabric, self.cq) == 0 }
    }

    /// The wait object's file descriptor, for a thread to poll(2) once
    /// [`trywait`](Self::trywait) said so, without holding the endpoint. It stays open
    /// as long as the endpoint does.
    pub fn wait_fd(&self) -> Option<i32> {
        self.wait_fd
    }

    /// This endpoint's address (fi_getname), for peers to insert.
    pub fn name(&self) -> Result<Vec<u8>, TransportError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `ep` is open; buf has `len` writable bytes; len is updated.
        let rc = unsafe { sys::rma_fi_getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(sys::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above with the size the provider asked for.
            let rc = unsafe { sys::rma_fi_getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
            check("fi_getname", rc)?;
        } else {
            check("fi_getname", rc)?;
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts peers' addresses (all of the same length); returns their fi_addr_t.
    pub fn insert(&mut self, names: &[Vec<u8>]) -> Result<Vec<sys::fi_addr_t>, TransportError> {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let mut a: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
            // SAFETY: `av` is open; `n` holds one address in the provider's format (from
            // fi_getname of a peer endpoint of the same provider); `a` receives one entry.
            let rc = unsafe {
                sys::rma_fi_av_insert(self.av, n.as_ptr().cast(), 1, &mut a, 0, ptr::null_mut())
            };
            if rc != 1 {
                return Err(fi_error("fi_av_insert", rc as i64));
            }
            out.push(a);
        }
        Ok(out)
    }

    /// Posts a receive into `buf..buf+len` with `ctx`.
    ///
    /// # Safety
    /// The buffer and `ctx` (at least a `fi_context2`) must stay valid and unused by
    /// anyone else until the receive's completion is read; `desc` is null or the
    /// descriptor of a local region covering the buffer ([`LocalBuf::desc`]), which stays
    /// open as long.
    pub unsafe fn post_recv(
        &mut self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: caller's contract (buffer, descriptor and context valid until the
        // completion); `ep` is open.
        unsafe { sys::rma_fi_recv(self.ep, buf.cast(), len, desc, sys::FI_ADDR_UNSPEC, ctx) }
    }

    /// Posts a multi-message receive buffer (`FI_MULTI_RECV`): messages land one after
    /// the other in `buf..buf+len`, each completion pointing at its own; the completion
    /// flagged `FI_MULTI_RECV` says the buffer is released.
    ///
    /// # Safety
    /// As [`post_recv`](Self::post_recv), until the releasing completion is read.
    pub unsafe fn post_multi_recv(
        &mut self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: *mut c_void,
    ) -> isize {
        let iov = sys::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let mut desc = desc;
        let msg = sys::fi_msg {
            msg_iov: &iov,
            desc: &mut desc,
            iov_count: 1,
            addr: sys::FI_ADDR_UNSPEC,
            context: ctx,
            data: 0,
        };
        // SAFETY: `iov` and `msg` live for the call; buffer and context per the caller's
        // contract.
        unsafe { sys::rma_fi_recvmsg(self.ep, &msg, sys::FI_MULTI_RECV as u64) }
    }

    /// Sends `buf` to `dest` with `ctx`.
    ///
    /// # Safety
    /// As [`post_recv`](Self::post_recv): buffer and context live until the completion.
    pub unsafe fn send(
        &mut self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: sys::fi_addr_t,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: caller's contract (buffer, descriptor and context valid until the
        // completion); `ep` is open.
        unsafe { sys::rma_fi_send(self.ep, buf.cast(), len, desc, dest, ctx) }
    }

    /// Whether local buffers need registering ([`LocalBuf::desc`] does it then).
    pub fn local_mr(&self) -> bool {
        self.local_mr
    }

    /// Local regions registered so far, and how many are open now.
    pub fn local_registrations(&self) -> (u64, usize) {
        let open = self.local_regions.iter().filter(|m| !m.is_null()).count();
        (self.local_registrations, open)
    }

    /// Registers local buffers even where the provider does not ask for it, to exercise
    /// the FI_MR_LOCAL path on any provider (`RMA_OFI_MR_LOCAL=1`).
    pub fn force_local_mr(&mut self) {
        self.local_mr = true;
    }

    /// Registers `base..base+len` for local use (send, receive, read and write sources
    /// and results); returns the slot of the region and its descriptor.
    ///
    /// # Safety
    /// The memory stays allocated until [`close_local`](Self::close_local) of the slot
    /// or the endpoint's drop.
    unsafe fn register_local(
        &mut self,
        base: *const u8,
        len: usize,
    ) -> Result<(usize, *mut c_void), TransportError> {
        let access = (sys::FI_SEND | sys::FI_RECV | sys::FI_READ | sys::FI_WRITE) as u64;
        let key = self.next_local_key;
        self.next_local_key += 1;
        let mut mr = ptr::null_mut();
        // SAFETY: domain open; memory valid per the caller's contract.
        let rc = unsafe {
            sys::rma_fi_mr_reg(
                self.domain,
                base.cast(),
                len,
                access,
                0,
                key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg (local buffer)", rc)?;
        self.local_registrations += 1;
        let slot = match self.local_regions.iter().position(|m| m.is_null()) {
            Some(i) => {
                self.local_regions[i] = mr;
                i
            }
            None => {
                self.local_regions.push(mr);
                self.local_regions.len() - 1
            }
        };
        // SAFETY: `mr` is open.
        Ok((slot, unsafe { sys::rma_fi_mr_desc(mr) }))
    }

    /// Closes the local region in `slot` (from [`register_local`](Self::register_local)).
    fn close_local(&mut self, slot: usize) {
        if let Some(mr) = self.local_regions.get_mut(slot) {
            if !mr.is_null() {
                // SAFETY: an open region of this domain, closed once (the slot is
                // cleared).
                unsafe { sys::rma_fi_close_mr(*mr) };
                *mr = ptr::null_mut();
            }
        }
    }

    /// Injects `data` (at most `inject_size` bytes) to `dest`: buffer reusable at return,
    /// no completion.
    pub fn inject(&mut self, data: &[u8], dest: sys::fi_addr_t) -> isize {
        // SAFETY: fi_inject copies the bytes before returning and generates no
        // completion; `ep` is open.
        unsafe { sys::rma_fi_inject(self.ep, data.as_ptr().cast(), data.len(), dest) }
    }

    /// Reads up to `out.len()` completions. Ok(n), or Err(rc) (-FI_EAVAIL: an error
    /// entry is waiting; -FI_EAGAIN is Ok(0)).
    pub fn cq_read(&mut self, out: &mut [sys::fi_cq_data_entry]) -> Result<usize, isize> {
        // SAFETY: `cq` is open with FI_CQ_FORMAT_DATA, so each entry is a
        // fi_cq_data_entry; `out` has room for out.len() of them.
        let rc = unsafe { sys::rma_fi_cq_read(self.cq, out.as_mut_ptr().cast(), out.len()) };
        if rc >= 0 {
            Ok(rc as usize)
        } else if is_again(rc) {
            Ok(0)
        } else {
            Err(rc)
        }
    }

    /// Reads one error completion: (its op context, the error text).
    pub fn cq_readerr(&mut self) -> Option<(*mut c_void, String)> {
        let mut e = sys::fi_cq_err_entry::default();
        // SAFETY: `cq` is open; `e` is a writable fi_cq_err_entry (err_data left null:
        // the provider points it at its own storage, valid until the next read).
        let rc = unsafe { sys::rma_fi_cq_readerr(self.cq, &mut e, 0) };
        if rc != 1 {
            return None;
        }
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: as documented by fi_cq_strerror: prov_errno and err_data from the entry
        // just read, a writable buffer of the given length; the result is a C string.
        let prov = unsafe {
            let p = sys::rma_fi_cq_strerror(
                self.cq,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            );
            cstr_or_empty(p)
        };
        // SAFETY: fi_strerror returns a static string.
        let generic = unsafe { CStr::from_ptr(sys::fi_strerror(e.err)) }.to_string_lossy();
        Some((
            e.op_context,
            format!("{generic} (err {}, provider: {prov})", e.err),
        ))
    }

    /// Registers `base..base+len` for remote reads and writes (and atomics) with
    /// `requested_key` (ignored under FI_MR_PROV_KEY), binding and enabling it where
    /// mr_mode asks (FI_MR_ENDPOINT, FI_MR_RMA_EVENT). Returns the region and its key.
    ///
    /// # Safety
    /// The memory must stay allocated until the region is closed with
    /// [`mr_close`](Self::mr_close).
    pub unsafe fn mr_reg(
        &mut self,
        base: *const u8,
        len: usize,
        requested_key: u64,
    ) -> Result<(*mut sys::fid_mr, u64), TransportError> {
        let mut mr = ptr::null_mut();
        let access =
            (sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE | sys::FI_READ | sys::FI_WRITE) as u64;
        // SAFETY: domain open; memory valid per the caller's contract.
        let rc = unsafe {
            sys::rma_fi_mr_reg(
                self.domain,
                base.cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", rc)?;
        let mode = self.offer.mr_mode;
        let bind = mode & sys::FI_MR_ENDPOINT as u64 != 0;
        let enable = bind || mode & sys::FI_MR_RMA_EVENT as u64 != 0;
        // SAFETY: `mr` was just opened on this domain; `ep` is open.
        let r = unsafe {
            if bind {
                check(
                    "fi_mr_bind",
                    sys::rma_fi_mr_bind(mr, &mut (*self.ep).fid, 0),
                )
            } else {
                Ok(())
            }
            .and_then(|_| {
                if enable {
                    check("fi_mr_enable", sys::rma_fi_mr_enable(mr))
                } else {
                    Ok(())
                }
            })
        };
        if let Err(e) = r {
            // SAFETY: close what we opened, once.
            unsafe { sys::rma_fi_close_mr(mr) };
            return Err(e);
        }
        // SAFETY: `mr` is open and enabled.
        let key = unsafe { sys::rma_fi_mr_key(mr) };
        Ok((mr, key))
    }

    /// Closes a region from [`mr_reg`](Self::mr_reg).
    ///
    /// # Safety
    /// `mr` came from this endpoint's `mr_reg` and is closed once.
    pub unsafe fn mr_close(&mut self, mr: *mut sys::fid_mr) {
        // SAFETY: caller's contract.
        unsafe { sys::rma_fi_close_mr(mr) };
    }

    /// Largest element count of a (kind, datatype, op) atomic the provider does, if any:
    /// kind 0 plain, 1 fetching, 2 compare.
    pub fn atomic_valid(
        &mut self,
        kind: u8,
        datatype: sys::fi_datatype,
        op: sys::fi_op,
    ) -> Option<usize> {
        let mut count = 0usize;
        // SAFETY: `ep` is open; the queries only write `count`.
        let rc = unsafe {
            match kind {
                0 => sys::rma_fi_atomicvalid(self.ep, datatype, op, &mut count),
                1 => sys::rma_fi_fetch_atomicvalid(self.ep, datatype, op, &mut count),
                _ => sys::rma_fi_compare_atomicvalid(self.ep, datatype, op, &mut count),
            }
        };
        (rc == 0 && count > 0).then_some(count)
    }

    /// Raw handles for the native-op calls of this crate.
    pub fn raw(&self) -> (*mut sys::fid_ep, *mut sys::fid_domain) {
        (self.ep, self.domain)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: each handle is either null or open and owned here; closed once, in the
        // reverse order of opening (endpoint before what it is bound to).
        unsafe {
            if !self.ep.is_null() {
                sys::rma_fi_close_ep(self.ep);
            }
            for mr in self.local_regions.drain(..) {
                if !mr.is_null() {
                    sys::rma_fi_close_mr(mr);
                }
            }
            if !self.cq.is_null() {
                sys::rma_fi_close_cq(self.cq);
            }
            if !self.av.is_null() {
                sys::rma_fi_close_av(self.av);
            }
            if !self.domain.is_null() {
                sys::rma_fi_close_domain(self.domain);
            }
            if !self.fabric.is_null() {
                sys::rma_fi_close_fabric(self.fabric);
            }
            if !self.info.is_null() {
                sys::fi_freeinfo(self.info);
            }
        }
    }
}

/// A context that libfabric may scribble on (FI_CONTEXT / FI_CONTEXT2) followed by our
/// identification of the operation. Lives (boxed, at a stable address) until the
/// completion is read.
#[repr(C)]
#[derive(Debug, Default)]
pub struct OpContext {
    /// The provider's scratch space; first, so that the context pointer is the struct's.
    pub fi: sys::fi_context2,
    /// Which operation: kind in the high bits, index in the low.
    pub id: u64,
}

/// A buffer of local bytes handed to the provider (a send, a receive, a native op's
/// source, compare value or result). Where the provider asks for FI_MR_LOCAL it is
/// registered with the endpoint's domain, again whenever it moved or grew, and
/// [`desc`](Self::desc) gives the descriptor to pass with it; elsewhere the descriptor is
/// null and nothing is registered.
#[derive(Debug, Default)]
pub struct LocalBuf {
    /// The bytes (the region covers the whole capacity).
    pub bytes: Vec<u8>,
    /// (slot in the endpoint, descriptor, address, capacity) of the current region.
    region: Option<(usize, usize, usize, usize)>,
}

impl LocalBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> LocalBuf {
        LocalBuf {
            bytes: vec![0; len],
            region: None,
        }
    }

    /// The descriptor of the bytes as they are now (registering them if the provider
    /// needs it and the current region does not cover them), for the next call that hands
    /// them to the provider.
    pub fn desc(&mut self, ep: &mut Endpoint) -> Result<*mut c_void, TransportError> {
        if !ep.local_mr {
            return Ok(ptr::null_mut());
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(64);
        }
        let (addr, cap) = (self.bytes.as_ptr() as usize, self.bytes.capacity());
        match self.region {
            Some((_, desc, a, c)) if a == addr && c == cap => return Ok(desc as *mut c_void),
            Some((slot, ..)) => {
                ep.close_local(slot);
                self.region = None;
            }
            None => {}
        }
        // SAFETY: the Vec's allocation (address and capacity as registered) lives until
        // it moves or grows, which the next call notices (closing this region), or until
        // the buffer is dropped; buffers live in the transport beside the endpoint, and
        // the endpoint closes every local region before its domain.
        let (slot, desc) = unsafe { ep.register_local(addr as *const u8, cap)? };
        self.region = Some((slot, desc as usize, addr, cap));
        Ok(desc)
    }
}
