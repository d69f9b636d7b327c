//! rma's synchronization primitives that need `unsafe`, small and argued, so that the
//! engine (rma-core, which forbids unsafe code) uses them safely:
//!
//! - [`asymmetric`]: memory barriers for handshakes with a frequent and a rare side (the
//!   rare side runs Linux's `membarrier`);
//! - [`BiasedLock`]: a lock held without a locked instruction by the thread that uses
//!   it, through a mutex by every thread once another one held it (a window's state).

pub mod asymmetric;
mod biased;

pub use biased::{thread_id, BiasedGuard, BiasedLock};
