//! rma's primitives that need `unsafe`, small and argued, so that the engine (rma-core,
//! which forbids unsafe code) uses them safely: synchronization, and the copy of bytes.
//!
//! - [`asymmetric`]: memory barriers for handshakes with a frequent and a rare side (the
//!   rare side runs Linux's `membarrier`);
//! - [`BiasedLock`]: a lock held without a locked instruction by the thread that uses
//!   it, through a mutex by every thread once another one held it (a window's state);
//! - [`copy`]: `memcpy` except where it is known to be slow (pairs misaligned within a
//!   cache line on x86-64 CPUs whose `rep movsb` stalls on them), safe forms for slices
//!   and vectors.

pub mod asymmetric;
mod biased;
pub mod copy;

pub use biased::{thread_id, BiasedGuard, BiasedLock};
