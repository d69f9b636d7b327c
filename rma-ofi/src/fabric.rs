//! How an endpoint is chosen and opened: which capabilities are asked for in which
//! order, which `fi_getinfo` entries are tried, which providers are kept from features
//! that break them. The endpoint itself and every libfabric call are in [`sys`](crate::sys).
//!
//! Every call on an [`Endpoint`] takes `&mut self` or is made under the transport's
//! mutex: the domain is opened with `FI_THREAD_DOMAIN`, so libfabric does no locking of
//! its own.

use rma_core::TransportError;

pub use crate::sys::{
    fi_error, is_again, Caps, Completion, Desc, Endpoint, InfoList, Local, LocalBuf, Offer,
    OpContext, Remote,
};

/// Whether a provider (its `prov_name`) has an `FI_MULTI_RECV` that is broken in the
/// libfabric found here (shm, ofi_rxm), so it gets one message per buffer.
fn multi_recv_breaks(provider: &str) -> bool {
    // libfabric 1.17's shm provider crashes (SIGSEGV inside the library) on the first
    // messages once FI_MULTI_RECV is asked for. ofi_rxm (tcp;ofi_rxm, verbs;ofi_rxm)
    // corrupts messages above its eager size (16 KiB: sent in segments or by rendezvous)
    // in multi-message buffers: measured, 4 of 12 runs of 2-rank large active-message
    // ops on tcp;ofi_rxm received garbage ("active message from unknown rank 65536"),
    // 0 of 16 with every message under 16000 bytes, 0 of 12 with one message per
    // buffer (the class of ofiwg/libfabric#5599: the buffer's release overtaking a
    // message still being written into it).
    provider == "shm" || provider.contains("ofi_rxm")
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
        Self::open_with(provider, atomics, av_count, 0, false, false)
    }

    /// [`open`](Self::open), also asking for `FI_MULTI_RECV` when `min_multi_recv` is
    /// not 0: then a receive buffer posted with
    /// [`post_multi_recv`](Self::post_multi_recv) takes messages until less than
    /// `min_multi_recv` bytes are left in it ([`Offer::multi_recv`] says whether the
    /// provider agreed). With `local_mr`, providers that need local buffers registered
    /// (FI_MR_LOCAL) are taken too: the caller then passes a [`LocalBuf`]'s descriptor
    /// with every buffer it hands the provider. The completion queue gets a file
    /// descriptor to sleep on where the provider has one, unless `RMA_OFI_WAIT_FD=0`
    /// (then the progress agent polls on a timer). With `send_after_write`, sends and
    /// reads are asked to follow the writes posted before them (`FI_ORDER_SAW`,
    /// `FI_ORDER_RAW`) first, and the same without it if no provider offers that.
    pub fn open_with(
        provider: Option<&str>,
        atomics: bool,
        av_count: usize,
        min_multi_recv: usize,
        local_mr: bool,
        send_after_write: bool,
    ) -> Result<Endpoint, TransportError> {
        let multi = if min_multi_recv > 0 {
            Caps::MULTI_RECV
        } else {
            Caps::NONE
        };
        let atomic = if atomics { Caps::ATOMIC } else { Caps::NONE };
        let base = Caps::BASE;
        // Most wanted first; a provider without one of the extras still serves.
        let mut tries: Vec<(Caps, bool)> = Vec::new();
        for ordered in [send_after_write, false] {
            for caps in [
                base.with(atomic).with(multi),
                base.with(atomic),
                base.with(multi),
                base,
            ] {
                tries.push((caps, ordered));
            }
        }
        tries.dedup();
        let wait_fd = std::env::var("RMA_OFI_WAIT_FD").map_or(true, |v| v.trim() != "0");
        let mut last = TransportError::Failed("fi_getinfo: nothing tried".into());
        for (caps, ordered) in tries {
            let list = match InfoList::query(provider, caps, local_mr, ordered) {
                Ok(list) => list,
                Err(e) => {
                    tracing::info!(
                        caps = caps.0,
                        "no provider with these capabilities ({})",
                        rma_core::with_causes(&e)
                    );
                    last = e;
                    continue;
                }
            };
            let multi_wanted = caps.has(Caps::MULTI_RECV);
            // fi_getinfo lists one entry per usable interface (tcp: each address of
            // each up link). An entry can fail to open where another works: an IPv6
            // address still in duplicate address detection refuses bind() with
            // EADDRNOTAVAIL for a second or two after its link came up. So each entry
            // is tried in libfabric's order until one opens, link-local ones last
            // ([`link_local`]).
            let mut entries: Vec<_> = list.entries().collect();
            entries.sort_by_key(|entry| link_local(&entry.offer().fabric));
            for entry in entries {
                let offer = entry.offer();
                if multi_wanted && multi_recv_breaks(&offer.provider) {
                    continue;
                }
                let min = (multi_wanted && offer.caps_multi_recv()).then_some(min_multi_recv);
                match entry
                    .dup()
                    .and_then(|info| Endpoint::open_info(info, av_count, wait_fd, min))
                {
                    Ok(me) => return Ok(me),
                    Err(e) => {
                        tracing::info!(
                            caps = caps.0,
                            "an fi_getinfo entry did not open ({})",
                            rma_core::with_causes(&e)
                        );
                        last = e;
                    }
                }
            }
        }
        Err(last)
    }
}

/// Whether an fi_getinfo entry's fabric is an IPv6 link-local network (an IP provider
/// names its fabric after the network of its address: "fe80::/64"). Such an address
/// names a host only together with its link: ranks that took link-local addresses on
/// different links cannot connect (the kernel refuses the connect, and the first
/// message of the job fails with fi_inject's -22: seen once in CI, where libfabric lists
/// the link-local addresses of a test's bridge and veths before the machine's own,
/// their links reporting a higher speed, while another test re-created them). A global
/// or IPv4 address reaches every rank that can reach it by name; link-local ones still
/// serve where nothing else is listed.
fn link_local(fabric: &str) -> bool {
    fabric
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("fe80:"))
}

#[cfg(test)]
mod tests {
    use super::link_local;

    #[test]
    fn link_local_networks_are_known_by_their_fabric_name() {
        assert!(link_local("fe80::/64"));
        assert!(link_local("FE80::/10"));
        assert!(!link_local("fd00::/64"));
        assert!(!link_local("192.0.2.0/24"));
        assert!(!link_local("IB-0xfe80000000000000"));
        assert!(!link_local("fe8"));
    }
}
