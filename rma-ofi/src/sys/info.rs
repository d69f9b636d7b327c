//! `fi_getinfo`: the list of what the providers offer, and one entry of it to open.

use std::ffi::{CStr, CString};
use std::ptr;

use rma_core::TransportError;

use super::{ffi, fi_error};

/// The mr_mode bits every user of an endpoint honours. FI_MR_LOCAL (local buffers
/// registered, their descriptors passed) is added by those that pass
/// [`LocalBuf`](super::LocalBuf) descriptors (`local_mr` of [`InfoList::query`]).
const MR_MODE_SUPPORTED: u64 = (ffi::FI_MR_VIRT_ADDR
    | ffi::FI_MR_ALLOCATED
    | ffi::FI_MR_PROV_KEY
    | ffi::FI_MR_ENDPOINT
    | ffi::FI_MR_RMA_EVENT) as u64;

/// Capability bits of `fi_getinfo`'s hints, as [`InfoList::query`] takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps(pub u64);

impl Caps {
    /// Messages and RMA: what every endpoint of this crate asks for.
    pub const BASE: Caps = Caps((ffi::FI_MSG | ffi::FI_RMA) as u64);
    /// Atomics.
    pub const ATOMIC: Caps = Caps(ffi::FI_ATOMIC as u64);
    /// Multi-message receive buffers.
    pub const MULTI_RECV: Caps = Caps(ffi::FI_MULTI_RECV as u64);
    /// No capability.
    pub const NONE: Caps = Caps(0);

    /// Both sets.
    pub fn with(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }

    /// Whether every bit of `other` is set here.
    pub fn has(self, other: Caps) -> bool {
        other.0 != 0 && self.0 & other.0 == other.0
    }
}

fn cstr_or_empty(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the non-null strings this is given are NUL-terminated C strings owned
        // by an fi_info (or a buffer) that outlives the call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `fi_getinfo`'s list for an RDM endpoint: one entry per usable interface of each
/// matching provider, freed on drop.
#[derive(Debug)]
pub struct InfoList(*mut ffi::fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo, is ours, and is freed once.
        unsafe { ffi::fi_freeinfo(self.0) };
    }
}

impl InfoList {
    /// fi_getinfo for an RDM endpoint with `caps`, on `provider` if given, with
    /// FI_CONTEXT/FI_CONTEXT2, FI_THREAD_DOMAIN, send-after-send order (and send- and
    /// read-after-write with `send_after_write`), and the mr_mode bits this crate honours
    /// (FI_MR_LOCAL too with `local_mr`).
    pub fn query(
        provider: Option<&str>,
        caps: Caps,
        local_mr: bool,
        send_after_write: bool,
    ) -> Result<InfoList, TransportError> {
        let order = if send_after_write {
            (ffi::FI_ORDER_SAS | ffi::FI_ORDER_SAW | ffi::FI_ORDER_RAW) as u64
        } else {
            ffi::FI_ORDER_SAS as u64
        };
        let name = provider
            .map(|p| {
                CString::new(p)
                    .map_err(|_| TransportError::Failed("provider name with a NUL".into()))
            })
            .transpose()?;
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structs.
        let hints = unsafe { ffi::fi_dupinfo(ptr::null()) };
        if hints.is_null() {
            return Err(TransportError::Failed("fi_dupinfo: out of memory".into()));
        }
        let mut info = ptr::null_mut();
        // SAFETY: `hints` and its attribute pointers were allocated by fi_dupinfo above
        // and are exclusively ours until fi_freeinfo; the provider name is strdup'ed
        // (fi_freeinfo frees it); `info` receives the list.
        let rc = unsafe {
            let h = &mut *hints;
            h.caps = caps.0;
            h.mode = ffi::FI_CONTEXT | ffi::FI_CONTEXT2;
            (*h.ep_attr).type_ = ffi::fi_ep_type_FI_EP_RDM;
            (*h.domain_attr).mr_mode = if local_mr {
                (MR_MODE_SUPPORTED | ffi::FI_MR_LOCAL as u64) as i32
            } else {
                MR_MODE_SUPPORTED as i32
            };
            (*h.domain_attr).threading = ffi::fi_threading_FI_THREAD_DOMAIN;
            (*h.tx_attr).msg_order = order;
            (*h.rx_attr).msg_order = order;
            if let Some(c) = &name {
                (*h.fabric_attr).prov_name = libc::strdup(c.as_ptr());
            }
            let rc = ffi::fi_getinfo(
                ffi::rma_fi_version(ffi::FI_MAJOR_VERSION, ffi::FI_MINOR_VERSION),
                ptr::null(),
                ptr::null(),
                0,
                hints,
                &mut info,
            );
            ffi::fi_freeinfo(hints);
            rc
        };
        if rc != 0 {
            return Err(fi_error(
                format!(
                    "asking libfabric for an FI_EP_RDM endpoint (provider {})",
                    provider.unwrap_or("any")
                ),
                "fi_getinfo",
                rc as i64,
            ));
        }
        Ok(InfoList(info))
    }

    /// The entries, in libfabric's order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        let mut node = self.0;
        std::iter::from_fn(move || {
            if node.is_null() {
                return None;
            }
            // SAFETY: `node` is an entry of this list (non-null), alive while the list
            // is borrowed; its `next` is null or the next entry.
            let entry = unsafe { &*node };
            node = entry.next;
            Some(Entry(entry))
        })
    }
}

/// One entry of an [`InfoList`].
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a>(&'a ffi::fi_info);

impl Entry<'_> {
    /// What the entry offers.
    pub fn offer(&self) -> Offer {
        Offer::of(self.0)
    }

    /// A copy of this one entry (not the list), to open an endpoint with.
    pub fn dup(&self) -> Result<Info, TransportError> {
        // SAFETY: fi_dupinfo copies one entry (its `next` is null in the copy) into a new
        // fi_info that the returned Info owns and frees.
        let one = unsafe { ffi::fi_dupinfo(self.0) };
        if one.is_null() {
            return Err(TransportError::Failed("fi_dupinfo: out of memory".into()));
        }
        Ok(Info(one))
    }
}

/// One fi_info entry of our own (from [`Entry::dup`]), freed on drop: what an
/// [`Endpoint`](super::Endpoint) is opened from and keeps.
#[derive(Debug)]
pub struct Info(pub(super) *mut ffi::fi_info);

// SAFETY: an fi_info is plain data owned by this value alone.
unsafe impl Send for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: the entry came from fi_dupinfo, is ours, and is freed once.
        unsafe { ffi::fi_freeinfo(self.0) };
    }
}

impl Info {
    /// What the entry offers.
    pub fn offer(&self) -> Offer {
        // SAFETY: a valid fi_info from fi_dupinfo, alive as long as `self`.
        Offer::of(unsafe { &*self.0 })
    }
}

/// What a provider offers, read out of its fi_info entry.
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
    /// Bytes of remote CQ data a write may carry to the target's completion queue
    /// (`domain_attr->cq_data_size`; 0: none).
    pub cq_data_size: usize,
}

impl Offer {
    fn of(i: &ffi::fi_info) -> Offer {
        // SAFETY: the attribute pointers of an fi_info from fi_getinfo or fi_dupinfo are
        // valid for its life (the borrow of `i`).
        let (fa, da, ta, ea) =
            unsafe { (&*i.fabric_attr, &*i.domain_attr, &*i.tx_attr, &*i.ep_attr) };
        Offer {
            provider: cstr_or_empty(fa.prov_name),
            fabric: cstr_or_empty(fa.name),
            mr_mode: da.mr_mode as u64,
            caps: i.caps,
            inject_size: ta.inject_size,
            max_msg_size: ea.max_msg_size,
            msg_order: ta.msg_order,
            manual_progress: da.data_progress == ffi::fi_progress_FI_PROGRESS_MANUAL,
            multi_recv: false,
            cq_data_size: da.cq_data_size,
        }
    }

    /// Sends and RMA reads are transmitted after the RMA writes posted before them
    /// (`FI_ORDER_SAW`, `FI_ORDER_RAW`).
    pub fn ordered_after_writes(&self) -> bool {
        let both = (ffi::FI_ORDER_SAW | ffi::FI_ORDER_RAW) as u64;
        self.msg_order & both == both
    }

    /// Native RMA (`FI_RMA`) granted.
    pub fn rma(&self) -> bool {
        self.caps & ffi::FI_RMA as u64 != 0
    }

    /// Native atomics (`FI_ATOMIC`) granted.
    pub fn atomics(&self) -> bool {
        self.caps & ffi::FI_ATOMIC as u64 != 0
    }

    /// Multi-message receive buffers (`FI_MULTI_RECV`) granted (before the endpoint took
    /// the option: [`multi_recv`](Self::multi_recv) says whether it did).
    pub fn caps_multi_recv(&self) -> bool {
        self.caps & ffi::FI_MULTI_RECV as u64 != 0
    }

    /// Remote addresses are virtual addresses (`FI_MR_VIRT_ADDR`), not offsets.
    pub fn virt_addr(&self) -> bool {
        self.mr_mode & ffi::FI_MR_VIRT_ADDR as u64 != 0
    }

    /// Local buffers must be registered (`FI_MR_LOCAL`).
    pub fn local_mr(&self) -> bool {
        self.mr_mode & ffi::FI_MR_LOCAL as u64 != 0
    }

    /// Regions must be bound to the endpoint (`FI_MR_ENDPOINT`).
    fn mr_endpoint(&self) -> bool {
        self.mr_mode & ffi::FI_MR_ENDPOINT as u64 != 0
    }

    /// Regions must be enabled (`FI_MR_ENDPOINT` or `FI_MR_RMA_EVENT`).
    pub(super) fn mr_enable(&self) -> bool {
        self.mr_endpoint() || self.mr_mode & ffi::FI_MR_RMA_EVENT as u64 != 0
    }

    pub(super) fn mr_bind(&self) -> bool {
        self.mr_endpoint()
    }
}
