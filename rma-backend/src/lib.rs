//! rma-backend: what rma's backends share, below all three (shared memory, libfabric,
//! verbs), so that no backend depends on another.
//!
//! - **Memory of this process** that peers or devices read and write at any time:
//!   [`Region`] (bounds-checked raw copies and atomics, never a Rust reference to shared
//!   bytes) and [`LocalMemory`] (a network backend's window memory: our zeroed, 8-byte
//!   aligned allocation, or the user's buffer in place).
//! - **Window segments** of the network backends: [`WindowSegment`], memory and the
//!   device's [`Registration`] of it, closed before the memory goes; and
//!   [`SegmentRegistration`], another backend's segment (a hybrid world's shared memory)
//!   registered with a network device.
//! - **Peers**: [`process_alive`] and [`PeerWatch`] (the processes of this node, each
//!   failure reported once), [`Collectives`] through the bootstrap.
//! - **Network plumbing** around a device ([`Link`]): [`send`] of an active message
//!   (to oneself without the device, retried once after driving it, `Busy` after) and
//!   [`depart`] (goodbyes, then lingering until the peers said theirs).
//!
//! - **Copies** of window memory: [`copy`] (rma-sync's), `memcpy` except where
//!   it is known to be slow (misaligned pairs on x86-64 CPUs whose `rep movsb` stalls).
//!
//! The calls into the system (the allocation, the liveness check) are in one `sys`
//! module; the only other unsafe code is [`Region`]'s.

mod link;
mod memory;
mod peers;
mod region;
mod segment;
mod sys;

pub use link::{check_message, depart, send, Link};
pub use memory::LocalMemory;
pub use peers::{env_usize, oversubscribed, process_alive, Collectives, PeerWatch};
pub use region::{Region, Word};
pub use rma_sync::copy;
pub use segment::{split_descriptor, Memory, Registration, SegmentRegistration, WindowSegment};
