//! One libfabric endpoint and what it needs (fabric, domain, address vector, completion
//! queue), its memory regions, and the operations posted on it.

use std::ffi::c_void;
use std::ptr;

use rma_core::{DataType, TransportError};

use super::{
    check, context_id, datatype, ffi, fi_error, is_again, op, Atomic, AtomicKind, Completion,
    CompletionError, Desc, Info, Local, OpContext, Remote,
};

/// One endpoint with its fabric, domain, AV and CQ, opened from one fi_info entry.
/// Closed in reverse order on drop.
pub struct Endpoint {
    fabric: *mut ffi::fid_fabric,
    domain: *mut ffi::fid_domain,
    av: *mut ffi::fid_av,
    cq: *mut ffi::fid_cq,
    ep: *mut ffi::fid_ep,
    /// The entry it was opened from (freed after the handles: fields drop after Drop).
    _info: Info,
    /// What the provider offers.
    pub offer: super::Offer,
    /// Local buffers must be registered and their descriptors passed (FI_MR_LOCAL asked
    /// for by the provider, or forced with [`force_local_mr`](Self::force_local_mr)).
    local_mr: bool,
    /// Regions of [`LocalBuf`]s (null: free slot), closed after the endpoint and before
    /// the domain.
    local_regions: Vec<*mut ffi::fid_mr>,
    /// The completion queue's wait object (`FI_WAIT_FD`), where the provider has one:
    /// what the progress agent sleeps on. Owned by the CQ (closed with it).
    wait_fd: Option<i32>,
    /// Requested keys of local regions (providers without FI_MR_PROV_KEY take ours), far
    /// from the windows' keys that count from 1.
    next_local_key: u64,
    /// Local regions registered so far (a buffer that grew is registered again).
    local_registrations: u64,
    /// Where [`cq_read`](Self::cq_read) reads the provider's entries.
    entries: Vec<ffi::fi_cq_data_entry>,
}

// SAFETY: the handles are plain pointers to libfabric objects opened with
// FI_THREAD_DOMAIN; every use is serialized by the owner (`&mut self`, or `&self` under
// the owner's mutex), which is what FI_THREAD_DOMAIN asks, whatever the thread.
unsafe impl Send for Endpoint {}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("offer", &self.offer)
            .finish()
    }
}

/// A region of memory registered for remote access ([`Endpoint::mr_reg`]). Closed with
/// [`Endpoint::mr_close`]; dropped without, it stays open (and its memory must stay
/// allocated, as `mr_reg` requires until the close).
#[derive(Debug)]
pub struct Mr {
    raw: *mut ffi::fid_mr,
    key: u64,
    /// The domain it belongs to (closed through that domain's endpoint only).
    domain: *mut ffi::fid_domain,
}

// SAFETY: a handle that is only used (closed) through its endpoint, whose calls its
// owner serializes (FI_THREAD_DOMAIN); the key is plain data.
unsafe impl Send for Mr {}
// SAFETY: `&Mr` only reads the key.
unsafe impl Sync for Mr {}

impl Mr {
    /// The key peers name the region by.
    pub fn key(&self) -> u64 {
        self.key
    }
}

impl Endpoint {
    /// Opens fabric, domain, AV (`av_count` peers), CQ and endpoint of `info`. The CQ has
    /// a file descriptor to sleep on (`FI_WAIT_FD`) if `wait_fd` and the provider has
    /// one, else no wait object. `min_multi_recv`: receive buffers take several messages,
    /// each posted buffer being released once fewer bytes are left in it (where the
    /// provider takes the option: [`Offer::multi_recv`](super::Offer::multi_recv)).
    pub fn open_info(
        info: Info,
        av_count: usize,
        wait_fd: bool,
        min_multi_recv: Option<usize>,
    ) -> Result<Endpoint, TransportError> {
        let offer = info.offer();
        let doing = format!("opening a libfabric endpoint ({})", offer.provider);
        let raw_info = info.0;
        let mut me = Endpoint {
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            ep: ptr::null_mut(),
            _info: info,
            local_mr: offer.local_mr(),
            offer,
            local_regions: Vec::new(),
            wait_fd: None,
            next_local_key: 1 << 30,
            local_registrations: 0,
            entries: Vec::new(),
        };
        // SAFETY: `raw_info` is the entry `me` owns (freed after its handles); its
        // attribute pointers are valid for its life. Each open writes the handle into
        // `me`, whose Drop closes the non-null ones in reverse order, so an early return
        // closes what was opened. The attribute structs passed live for their calls.
        unsafe {
            let i = &*raw_info;
            check(
                &doing,
                "fi_fabric",
                ffi::rma_fi_fabric(i.fabric_attr, &mut me.fabric, ptr::null_mut()),
            )?;
            check(
                &doing,
                "fi_domain",
                ffi::rma_fi_domain(me.fabric, raw_info, &mut me.domain, ptr::null_mut()),
            )?;
            let mut av_attr = ffi::fi_av_attr {
                type_: ffi::fi_av_type_FI_AV_TABLE,
                count: av_count.max(1),
                ..Default::default()
            };
            check(
                &doing,
                "fi_av_open",
                ffi::rma_fi_av_open(me.domain, &mut av_attr, &mut me.av, ptr::null_mut()),
            )?;
            // Cheap when nobody sleeps: libfabric writes to the descriptor only when it
            // was reset (by fi_trywait), not per completion.
            let objs = if wait_fd {
                &[ffi::fi_wait_obj_FI_WAIT_FD, ffi::fi_wait_obj_FI_WAIT_NONE][..]
            } else {
                &[ffi::fi_wait_obj_FI_WAIT_NONE][..]
            };
            for &wait_obj in objs {
                let mut cq_attr = ffi::fi_cq_attr {
                    format: ffi::fi_cq_format_FI_CQ_FORMAT_DATA,
                    wait_obj,
                    size: 0,
                    ..Default::default()
                };
                let rc = ffi::rma_fi_cq_open(me.domain, &mut cq_attr, &mut me.cq, ptr::null_mut());
                if rc != 0 && wait_obj == ffi::fi_wait_obj_FI_WAIT_FD {
                    tracing::info!(rc, "no FI_WAIT_FD completion queue; no wait object");
                    me.cq = ptr::null_mut();
                    continue;
                }
                check(&doing, "fi_cq_open", rc)?;
                if wait_obj == ffi::fi_wait_obj_FI_WAIT_FD {
                    let mut fd: std::os::raw::c_int = -1;
                    if ffi::rma_fi_cq_wait_fd(me.cq, &mut fd) == 0 && fd >= 0 {
                        me.wait_fd = Some(fd);
                    }
                }
                break;
            }
            check(
                &doing,
                "fi_endpoint",
                ffi::rma_fi_endpoint(me.domain, raw_info, &mut me.ep, ptr::null_mut()),
            )?;
            check(
                &doing,
                "fi_ep_bind(av)",
                ffi::rma_fi_ep_bind(me.ep, &mut (*me.av).fid, 0),
            )?;
            check(
                &doing,
                "fi_ep_bind(cq)",
                ffi::rma_fi_ep_bind(
                    me.ep,
                    &mut (*me.cq).fid,
                    (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64,
                ),
            )?;
            if let Some(min) = min_multi_recv {
                // Before fi_enable; a provider that refuses the option gets one message
                // per buffer.
                me.offer.multi_recv = ffi::rma_fi_setopt_min_multi_recv(me.ep, min) == 0;
            }
            check(&doing, "fi_enable", ffi::rma_fi_enable(me.ep))?;
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
        // SAFETY: fabric and CQ are open; `&mut self` serializes the call (FI_THREAD_DOMAIN).
        unsafe { ffi::rma_fi_trywait_cq(self.fabric, self.cq) == 0 }
    }

    /// The wait object's file descriptor, for a thread to poll(2)
    /// ([`poll_fd`](super::poll_fd)) once [`trywait`](Self::trywait) said so, without
    /// holding the endpoint. It stays open as long as the endpoint does.
    pub fn wait_fd(&self) -> Option<i32> {
        self.wait_fd
    }

    /// This endpoint's address (fi_getname), for peers to insert.
    pub fn name(&self) -> Result<Vec<u8>, TransportError> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `ep` is open; buf has `len` writable bytes; len is updated.
        let rc = unsafe { ffi::rma_fi_getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
        if rc == -(ffi::FI_ETOOSMALL as i32) {
            buf.resize(len, 0);
            // SAFETY: as above with the size the provider asked for.
            let rc = unsafe { ffi::rma_fi_getname(self.ep, buf.as_mut_ptr().cast(), &mut len) };
            check("reading this endpoint's address", "fi_getname", rc)?;
        } else {
            check("reading this endpoint's address", "fi_getname", rc)?;
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts peers' addresses (from their [`name`](Self::name)); returns their
    /// fi_addr_t.
    pub fn insert(&mut self, names: &[Vec<u8>]) -> Result<Vec<ffi::fi_addr_t>, TransportError> {
        // The provider reads as many bytes as its address format holds, whatever a
        // (possibly short or hostile) name from a peer has: each is handed over zero
        // padded to at least 256 bytes, more than any sockaddr, and NUL-terminated for
        // string formats.
        let mut padded = Vec::new();
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            padded.clear();
            padded.extend_from_slice(n);
            padded.resize(n.len().max(256) + 1, 0);
            let mut a: ffi::fi_addr_t = ffi::FI_ADDR_UNSPEC;
            // SAFETY: `av` is open; `padded` holds one address, readable past any
            // address the provider's format takes (above); `a` receives one entry.
            let rc = unsafe {
                ffi::rma_fi_av_insert(
                    self.av,
                    padded.as_ptr().cast(),
                    1,
                    &mut a,
                    0,
                    ptr::null_mut(),
                )
            };
            if rc != 1 {
                return Err(fi_error(
                    "inserting a peer's address",
                    "fi_av_insert",
                    rc as i64,
                ));
            }
            out.push(a);
        }
        Ok(out)
    }

    /// Posts a receive into `buf` with `ctx`.
    ///
    /// # Safety
    /// `buf`'s bytes and `ctx` must stay valid and unused by anyone else until the
    /// receive's completion is read (or the endpoint is closed); `buf.desc` is none or the
    /// descriptor of a local region covering the bytes ([`LocalBuf::local`]), open as
    /// long.
    pub unsafe fn post_recv(&mut self, buf: Local, ctx: *mut OpContext) -> isize {
        // SAFETY: caller's contract (buffer, descriptor and context valid until the
        // completion); `ep` is open.
        unsafe {
            ffi::rma_fi_recv(
                self.ep,
                buf.ptr.cast(),
                buf.len,
                buf.desc.0,
                ffi::FI_ADDR_UNSPEC,
                ctx.cast(),
            )
        }
    }

    /// Posts a multi-message receive buffer (`FI_MULTI_RECV`): messages land one after
    /// the other in `buf`, each completion pointing at its own; the completion that says
    /// [`released`](Completion::released) ends the buffer's use.
    ///
    /// # Safety
    /// As [`post_recv`](Self::post_recv), until the releasing completion is read.
    pub unsafe fn post_multi_recv(&mut self, buf: Local, ctx: *mut OpContext) -> isize {
        let iov = ffi::iovec {
            iov_base: buf.ptr.cast(),
            iov_len: buf.len,
        };
        let mut desc = buf.desc.0;
        let msg = ffi::fi_msg {
            msg_iov: &iov,
            desc: &mut desc,
            iov_count: 1,
            addr: ffi::FI_ADDR_UNSPEC,
            context: ctx.cast(),
            data: 0,
        };
        // SAFETY: `iov`, `desc` and `msg` live for the call; buffer and context per the
        // caller's contract.
        unsafe { ffi::rma_fi_recvmsg(self.ep, &msg, ffi::FI_MULTI_RECV as u64) }
    }

    /// Sends `buf`'s bytes to `dest` with `ctx`.
    ///
    /// # Safety
    /// As [`post_recv`](Self::post_recv): the bytes (unchanged) and the context live
    /// until the send's completion is read.
    pub unsafe fn send(&mut self, buf: Local, dest: ffi::fi_addr_t, ctx: *mut OpContext) -> isize {
        // SAFETY: caller's contract (buffer, descriptor and context valid until the
        // completion); `ep` is open.
        unsafe {
            ffi::rma_fi_send(
                self.ep,
                buf.ptr.cast(),
                buf.len,
                buf.desc.0,
                dest,
                ctx.cast(),
            )
        }
    }

    /// Injects `data` (at most `inject_size` bytes) to `dest`: the bytes are copied
    /// before the call returns, and there is no completion.
    pub fn inject(&mut self, data: &[u8], dest: ffi::fi_addr_t) -> isize {
        if data.len() > self.offer.inject_size {
            return -(ffi::FI_EMSGSIZE as isize);
        }
        // SAFETY: fi_inject reads `data` (no more than inject_size bytes, checked above)
        // only during the call and generates no completion (no context to keep); `ep` is
        // open.
        unsafe { ffi::rma_fi_inject(self.ep, data.as_ptr().cast(), data.len(), dest) }
    }

    /// Writes `src`'s bytes into `to` (`fi_writemsg`), with `FI_DELIVERY_COMPLETE` when
    /// `delivered` (the completion then means the data is at the target; otherwise only
    /// that the provider is done with the source), and `FI_INJECT` with `inject` (the
    /// source is then copied before the call returns). With `cq_data`, the write carries
    /// it (`FI_REMOTE_CQ_DATA`, at most the offer's `cq_data_size` bytes of it): the
    /// target's completion queue reports the write, with the data, once it is done.
    ///
    /// # Safety
    /// The source bytes (unchanged), their descriptor and `ctx` live until the
    /// completion is read; the target range lies in the peer's registered region (or
    /// the peer reports an error).
    pub unsafe fn write(
        &mut self,
        src: Local,
        to: Remote,
        inject: bool,
        delivered: bool,
        cq_data: Option<u64>,
        ctx: *mut OpContext,
    ) -> isize {
        let iov = ffi::iovec {
            iov_base: src.ptr.cast(),
            iov_len: src.len,
        };
        let rma = ffi::fi_rma_iov {
            addr: to.addr,
            len: src.len,
            key: to.key,
        };
        let mut desc = src.desc.0;
        let msg = ffi::fi_msg_rma {
            msg_iov: &iov,
            desc: &mut desc,
            iov_count: 1,
            addr: to.peer,
            rma_iov: &rma,
            rma_iov_count: 1,
            context: ctx.cast(),
            data: cq_data.unwrap_or(0),
        };
        let mut flags = ffi::FI_COMPLETION as u64;
        if cq_data.is_some() {
            flags |= ffi::FI_REMOTE_CQ_DATA as u64;
        }
        if delivered {
            flags |= ffi::FI_DELIVERY_COMPLETE as u64;
        }
        if inject {
            flags |= ffi::FI_INJECT as u64;
        }
        // SAFETY: iov, rma, desc and msg live for the call; the source and the context
        // per the caller's contract.
        unsafe { ffi::rma_fi_writemsg(self.ep, &msg, flags) }
    }

    /// Reads `dst.len` bytes from `from` into `dst` (`fi_read`).
    ///
    /// # Safety
    /// `dst`'s bytes (written by the provider, read by nobody else), their descriptor
    /// and `ctx` live until the completion is read.
    pub unsafe fn read(&mut self, dst: Local, from: Remote, ctx: *mut OpContext) -> isize {
        // SAFETY: caller's contract; `ep` is open.
        unsafe {
            ffi::rma_fi_read(
                self.ep,
                dst.ptr.cast(),
                dst.len,
                dst.desc.0,
                from.peer,
                from.addr,
                from.key,
                ctx.cast(),
            )
        }
    }

    /// Applies `atomic` with `operand`'s elements to `to` (`fi_atomicmsg`,
    /// `FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    /// As [`write`](Self::write), `operand` holding `atomic.count` elements.
    pub unsafe fn atomic(
        &mut self,
        operand: Local,
        to: Remote,
        atomic: Atomic,
        ctx: *mut OpContext,
    ) -> isize {
        let ioc = ffi::fi_ioc {
            addr: operand.ptr.cast(),
            count: atomic.count,
        };
        let rma = ffi::fi_rma_ioc {
            addr: to.addr,
            count: atomic.count,
            key: to.key,
        };
        let mut desc = operand.desc.0;
        let msg = ffi::fi_msg_atomic {
            msg_iov: &ioc,
            desc: &mut desc,
            iov_count: 1,
            addr: to.peer,
            rma_iov: &rma,
            rma_iov_count: 1,
            datatype: datatype(atomic.datatype),
            op: op(atomic.op),
            context: ctx.cast(),
            data: 0,
        };
        let flags = (ffi::FI_COMPLETION | ffi::FI_DELIVERY_COMPLETE) as u64;
        // SAFETY: ioc, rma, desc and msg live for the call; operand and context per the
        // caller's contract.
        unsafe { ffi::rma_fi_atomicmsg(self.ep, &msg, flags) }
    }

    /// Applies `atomic` with `operand`'s elements to `to` and fetches the elements before
    /// into `result` (`fi_fetch_atomic`: it completes once the target applied it).
    ///
    /// # Safety
    /// As [`write`](Self::write) for `operand` and as [`read`](Self::read) for `result`,
    /// both holding `atomic.count` elements.
    pub unsafe fn fetch_atomic(
        &mut self,
        operand: Local,
        result: Local,
        to: Remote,
        atomic: Atomic,
        ctx: *mut OpContext,
    ) -> isize {
        // SAFETY: caller's contract; `ep` is open.
        unsafe {
            ffi::rma_fi_fetch_atomic(
                self.ep,
                operand.ptr.cast(),
                atomic.count,
                operand.desc.0,
                result.ptr.cast(),
                result.desc.0,
                to.peer,
                to.addr,
                to.key,
                datatype(atomic.datatype),
                op(atomic.op),
                ctx.cast(),
            )
        }
    }

    /// Compare-and-swap of one element of `datatype` at `to`: `swap` where it equals
    /// `compare`, the element before in `result` (`fi_compare_atomic`).
    ///
    /// # Safety
    /// As [`fetch_atomic`](Self::fetch_atomic), `compare` like the operand.
    pub unsafe fn compare_atomic(
        &mut self,
        swap: Local,
        compare: Local,
        result: Local,
        to: Remote,
        datatype_: DataType,
        ctx: *mut OpContext,
    ) -> isize {
        // SAFETY: caller's contract; `ep` is open.
        unsafe {
            ffi::rma_fi_compare_atomic(
                self.ep,
                swap.ptr.cast(),
                1,
                swap.desc.0,
                compare.ptr.cast(),
                compare.desc.0,
                result.ptr.cast(),
                result.desc.0,
                to.peer,
                to.addr,
                to.key,
                datatype(datatype_),
                ffi::fi_op_FI_CSWAP,
                ctx.cast(),
            )
        }
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
    ) -> Result<(usize, Desc), TransportError> {
        let access = (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE) as u64;
        let key = self.next_local_key;
        self.next_local_key += 1;
        // SAFETY: the caller's contract.
        let mr = unsafe { self.mr_open(base, len, access, key) }.map_err(|rc| {
            fi_error(
                format!("registering a local buffer of {len} bytes"),
                "fi_mr_reg",
                rc as i64,
            )
        })?;
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
        Ok((slot, Desc(unsafe { ffi::rma_fi_mr_desc(mr) })))
    }

    /// `fi_mr_reg` of `base..base+len` on the domain with `access` and `key`: the open
    /// region, or libfabric's return code.
    ///
    /// # Safety
    /// The memory stays allocated until the region is closed.
    unsafe fn mr_open(
        &mut self,
        base: *const u8,
        len: usize,
        access: u64,
        key: u64,
    ) -> Result<*mut ffi::fid_mr, i32> {
        let mut mr = ptr::null_mut();
        // SAFETY: domain open; `mr` receives the region; memory valid per the caller's
        // contract.
        let rc = unsafe {
            ffi::rma_fi_mr_reg(
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
        if rc == 0 {
            Ok(mr)
        } else {
            Err(rc)
        }
    }

    /// Closes the local region in `slot` (from [`register_local`](Self::register_local)).
    fn close_local(&mut self, slot: usize) {
        if let Some(mr) = self.local_regions.get_mut(slot) {
            if !mr.is_null() {
                // SAFETY: an open region of this domain, closed once (the slot is
                // cleared).
                unsafe { ffi::rma_fi_close_mr(*mr) };
                *mr = ptr::null_mut();
            }
        }
    }

    /// Reads up to `out.len()` completions into `out`. Ok(n), or Err(rc)
    /// ([`error_waiting`](super::error_waiting): an error entry is waiting, read it with
    /// [`cq_readerr`](Self::cq_readerr); -FI_EAGAIN is Ok(0)).
    pub fn cq_read(&mut self, out: &mut [Completion]) -> Result<usize, isize> {
        if self.entries.len() < out.len() {
            self.entries
                .resize(out.len(), ffi::fi_cq_data_entry::default());
        }
        // SAFETY: `cq` is open with FI_CQ_FORMAT_DATA, so each entry is a
        // fi_cq_data_entry; `entries` has room for out.len() of them.
        let rc =
            unsafe { ffi::rma_fi_cq_read(self.cq, self.entries.as_mut_ptr().cast(), out.len()) };
        if rc < 0 {
            return if is_again(rc) { Ok(0) } else { Err(rc) };
        }
        let n = rc as usize;
        for (o, e) in out.iter_mut().zip(&self.entries[..n]) {
            *o = Completion {
                // SAFETY: every operation on this endpoint was posted through this
                // module with an OpContext that lives until its completion is read (the
                // post functions' contract): this one.
                id: unsafe { context_id(e.op_context) },
                len: e.len,
                at: e.buf as usize,
                flags: e.flags,
                data: e.data,
            };
        }
        Ok(n)
    }

    /// Reads one error completion: the [`OpContext::id`] of its operation, and the error
    /// (its code and the provider's text).
    pub fn cq_readerr(&mut self) -> Option<(Option<u64>, CompletionError)> {
        let mut e = ffi::fi_cq_err_entry::default();
        // SAFETY: `cq` is open; `e` is a writable fi_cq_err_entry (err_data left null:
        // the provider points it at its own storage, valid until the next read).
        let rc = unsafe { ffi::rma_fi_cq_readerr(self.cq, &mut e, 0) };
        if rc != 1 {
            return None;
        }
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: as documented by fi_cq_strerror: prov_errno and err_data from the entry
        // just read, a writable buffer of the given length; the result is a C string
        // (in `buf` or the provider's), read before anything else is called.
        let prov = unsafe {
            let p = ffi::rma_fi_cq_strerror(
                self.cq,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            );
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: as in `cq_read`: the operation's context lives until this (error)
        // completion is read.
        let id = unsafe { context_id(e.op_context) };
        Some((
            id,
            CompletionError {
                code: e.err,
                provider: prov,
            },
        ))
    }

    /// Registers `base..base+len` for remote reads and writes (and atomics) with
    /// `requested_key` (ignored under FI_MR_PROV_KEY), binding and enabling it where
    /// mr_mode asks (FI_MR_ENDPOINT, FI_MR_RMA_EVENT).
    ///
    /// # Safety
    /// The memory must stay allocated until the region is closed with
    /// [`mr_close`](Self::mr_close): peers write it at any time until then.
    pub unsafe fn mr_reg(
        &mut self,
        base: *const u8,
        len: usize,
        requested_key: u64,
    ) -> Result<Mr, TransportError> {
        let access =
            (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE | ffi::FI_READ | ffi::FI_WRITE) as u64;
        // SAFETY: the caller's contract.
        let mr = unsafe { self.mr_open(base, len, access, requested_key) }.map_err(|rc| {
            fi_error(
                format!("registering {len} bytes for remote access"),
                "fi_mr_reg",
                rc as i64,
            )
        })?;
        let (bind, enable) = (self.offer.mr_bind(), self.offer.mr_enable());
        // SAFETY: `mr` was just opened on this domain; `ep` is open.
        let r = unsafe {
            if bind {
                check(
                    &format!("registering {len} bytes for remote access"),
                    "fi_mr_bind",
                    ffi::rma_fi_mr_bind(mr, &mut (*self.ep).fid, 0),
                )
            } else {
                Ok(())
            }
            .and_then(|_| {
                if enable {
                    check(
                        &format!("registering {len} bytes for remote access"),
                        "fi_mr_enable",
                        ffi::rma_fi_mr_enable(mr),
                    )
                } else {
                    Ok(())
                }
            })
        };
        if let Err(e) = r {
            // SAFETY: close what we opened, once.
            unsafe { ffi::rma_fi_close_mr(mr) };
            return Err(e);
        }
        // SAFETY: `mr` is open and enabled.
        let key = unsafe { ffi::rma_fi_mr_key(mr) };
        Ok(Mr {
            raw: mr,
            key,
            domain: self.domain,
        })
    }

    /// Closes a region from this endpoint's [`mr_reg`](Self::mr_reg) (once: it is taken).
    /// Peers' operations on it fail from now on.
    pub fn mr_close(&mut self, mr: Mr) {
        assert_eq!(
            mr.domain, self.domain,
            "a memory region closed through another endpoint"
        );
        // SAFETY: an open region of this domain (checked), closed once (moved in here);
        // `&mut self` serializes the call.
        unsafe { ffi::rma_fi_close_mr(mr.raw) };
    }

    /// Largest element count of an atomic of `kind` on `dt` the provider does, if any.
    pub fn atomic_valid(&mut self, kind: AtomicKind, dt: DataType) -> Option<usize> {
        let mut count = 0usize;
        let dt = datatype(dt);
        // SAFETY: `ep` is open; the queries only write `count`.
        let rc = unsafe {
            match kind {
                AtomicKind::Plain(o) => ffi::rma_fi_atomicvalid(self.ep, dt, op(o), &mut count),
                AtomicKind::Fetch(o) => {
                    ffi::rma_fi_fetch_atomicvalid(self.ep, dt, op(o), &mut count)
                }
                AtomicKind::CompareSwap => {
                    ffi::rma_fi_compare_atomicvalid(self.ep, dt, ffi::fi_op_FI_CSWAP, &mut count)
                }
            }
        };
        (rc == 0 && count > 0).then_some(count)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: each handle is either null or open and owned here; closed once, in the
        // reverse order of opening (endpoint before what it is bound to). The fi_info
        // entry is freed after this, with the fields.
        unsafe {
            if !self.ep.is_null() {
                ffi::rma_fi_close_ep(self.ep);
            }
            for mr in self.local_regions.drain(..) {
                if !mr.is_null() {
                    ffi::rma_fi_close_mr(mr);
                }
            }
            if !self.cq.is_null() {
                ffi::rma_fi_close_cq(self.cq);
            }
            if !self.av.is_null() {
                ffi::rma_fi_close_av(self.av);
            }
            if !self.domain.is_null() {
                ffi::rma_fi_close_domain(self.domain);
            }
            if !self.fabric.is_null() {
                ffi::rma_fi_close_fabric(self.fabric);
            }
        }
    }
}

/// A buffer of local bytes handed to the provider (a send, a receive, a native op's
/// source, compare value or result). Where the provider asks for FI_MR_LOCAL it is
/// registered with the endpoint's domain, again whenever it moved or grew, and
/// [`desc`](Self::desc) gives the descriptor to pass with it; elsewhere the descriptor is
/// none and nothing is registered.
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
    pub fn desc(&mut self, ep: &mut Endpoint) -> Result<Desc, TransportError> {
        if !ep.local_mr {
            return Ok(Desc::NONE);
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(64);
        }
        let (addr, cap) = (self.bytes.as_ptr() as usize, self.bytes.capacity());
        match self.region {
            Some((_, desc, a, c)) if a == addr && c == cap => return Ok(Desc(desc as *mut c_void)),
            Some((slot, ..)) => {
                ep.close_local(slot);
                self.region = None;
            }
            None => {}
        }
        // SAFETY: the Vec's allocation (address and capacity as registered) lives until
        // it moves or grows, which the next call notices (closing this region), or until
        // the buffer is dropped; buffers live in the transport beside the endpoint, and
        // the endpoint closes every local region before its domain. A region over freed
        // memory is never used: a call that hands the bytes over asks for `desc` first.
        let (slot, desc) = unsafe { ep.register_local(addr as *const u8, cap)? };
        self.region = Some((slot, desc.0 as usize, addr, cap));
        Ok(desc)
    }

    /// The bytes as a [`Local`] to post (with their [`desc`](Self::desc)).
    pub fn local(&mut self, ep: &mut Endpoint) -> Result<Local, TransportError> {
        let desc = self.desc(ep)?;
        Ok(Local {
            ptr: self.bytes.as_mut_ptr(),
            len: self.bytes.len(),
            desc,
        })
    }
}
