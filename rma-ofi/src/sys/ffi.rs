//! Raw bindings: bindgen over the installed libfabric headers plus out-of-line wrappers
//! (`rma_fi_*`) of its `static inline` calls. Everything here is `unsafe` to call; the
//! safe layer over it is the rest of [`sys`](super), and only that layer calls these.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `FI_ADDR_UNSPECIFIED` (`((uint64_t) -1)`, a cast bindgen does not bind).
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
