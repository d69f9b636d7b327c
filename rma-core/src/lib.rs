//! rma-core: the transport-independent engine of rma, one-sided communication (remote
//! memory access) with MPI-3/MPI-4.1 semantics.
//!
//! The engine decides **what** to send and **when**; backends implementing [`Transport`]
//! only move bytes and report completions. It knows MPI semantics and MPICH's "New RMA
//! Design" (seed 004) and no hardware: no sockets, no memory mapping, no FFI, no
//! `unsafe`; what it asks of the operating system is listed below (a yield, the clock, a
//! thread and its naps), all through `std`.
//!
//! # Sans-IO, precisely
//!
//! The decisions are sans-IO: every transition of the epoch states, the op table and the
//! target side is a function of the calls made and the events the transport reports,
//! which is how the `sim` transport replays them deterministically. Around them the
//! engine does three things a blocking MPI library must, and only these:
//!
//! - **It blocks the calling thread** in the calls MPI defines as blocking (fence,
//!   complete, wait, unlock, flush, a lock that must be taken at once, window creation
//!   and free, collectives): PROGRESS_WAIT polls the transport ([`Transport::poll`]) and
//!   dispatches what arrived, in a loop that yields the thread
//!   ([`std::thread::yield_now`]) every 64 passes. It never sleeps in the kernel of its
//!   own accord. Posting an op, [`Request::test`], [`Window::test`] and
//!   [`Engine::progress`] return at once.
//! - **It reads the clock** ([`std::time::Instant`]) in those waits only, from their
//!   first yield on, to turn a wait past [`Config::timeout`] (`RMA_TIMEOUT_MS`) into a
//!   typed [`PeerError::Timeout`]; an op that posts at once never reads it.
//! - **It may start one thread**, the progress agent ([`Config::async_progress`]: by
//!   default only where the transport says peers need this process's progress, that is
//!   over a network; [`Engine::start_progress_agent`]). The agent runs the same progress
//!   passes while the application is elsewhere, napping ([`std::thread::sleep`]) while
//!   the application is in the library and sleeping on the transport's wait object
//!   ([`Transport::wait_for_traffic`]) when idle; [`Config::agent_start`] runs first on it
//!   (the facade pins it to a free core there).
//!
//! A program that wants no thread sets `RMA_ASYNC_PROGRESS=0` and calls
//! [`Engine::progress`] itself; one that wants no blocking uses only the calls that return
//! at once and the request's `test`.
//!
//! The map of the code follows the design document:
//! - [`window`](Window): window kinds and the origin side of every operation and
//!   synchronization (FENCE, PSCW, LOCK, LOCK_ALL, FLUSH algorithms);
//! - `epoch`: the nine window states and three per-target states;
//! - `op_table`: the slot array, target elements and operation elements;
//! - `pool`: two-level (window, global) element pools;
//! - `target`: the lock queue and the application of incoming operations;
//! - `engine` ([`Engine`]): global progress (MAKE_RMA_PROGRESS_GLOBAL, PROGRESS_WAIT);
//! - [`Group`] and [`Comm`]: communicators (split, create, dup), windows over them, and
//!   their collectives; `collective`: the message layer under those collectives;
//! - [`wire`]: the versioned active-message format;
//! - [`transport`](Transport): the backend contract and [`Capabilities`];
//! - [`Stats`]: counters of messages, bytes, paths and pool use.
//!
//! One runnable example per synchronization mode is on [`Window`] (fence),
//! [`Engine`] (lock), [`Request`] (lock_all) and here (post/start/complete/wait), all on
//! the in-process simulated transport of the `sim` feature:
//!
//! ```
//! use rma_core::{sim, Assert};
//! sim::run(2, sim::Profile::ActiveMessages, 11, |engine| {
//!     let win = engine.allocate::<i32>(4)?;
//!     let peer = 1 - engine.rank();
//!     // Each rank exposes its window to the other and accesses the other's.
//!     win.post(&[peer], Assert::NONE)?;
//!     win.start(&[peer], Assert::NONE)?;
//!     win.put(&[engine.rank() as i32 + 40], peer, 3)?;
//!     win.complete()?;
//!     win.wait()?;
//!     assert_eq!(win.local_to_vec()[3], peer as i32 + 40);
//!     win.free()?;
//!     Ok(())
//! }).unwrap();
//! ```
#![forbid(unsafe_code)]

mod barrier;
pub mod bootstrap;
mod collective;
mod comm;
pub mod config;
mod datatype;
mod engine;
mod epoch;
mod error;
mod group;
mod node_collective;
mod op_table;
mod per_rank;
mod pool;
mod progress;
mod request;
mod stats;
mod target;
pub mod transport;
mod window;
pub mod wire;

#[cfg(feature = "sim")]
pub mod sim;

pub use bootstrap::{exchange_hellos, Bootstrap, Hello};
pub use comm::{Comm, LocOp};
pub use config::{AsyncProgress, Config};
pub use datatype::{
    accumulate as apply_accumulate, set_long_double_arithmetic, AccOp, ComplexF32, ComplexF64,
    ComplexLongDouble, DataType, Element, LocF32, LocF64, LocI16, LocI32, LocI64, LocLongDouble,
    LongDouble, LongDoubleArithmetic, LongDoubleOrder,
};
pub use engine::Engine;
pub use epoch::{Assert, LockType};
pub use error::{
    with_causes, BackendError, Error, ErrorKind, PeerError, Result, TransportError, UsageError,
};
pub use group::Group;
pub use pool::{GlobalPool, LocalPool};
pub use request::{GetBuffer, PutBuffer, Request};
pub use stats::{Counters, Stats};
pub use transport::{
    Capabilities, Event, Fetched, Issued, NativeAtomic, RemoteSegment, Segment, SharedAmong,
    Transport, UserMemory, Wake, WindowOps,
};
pub use window::{Elements, FreeError, GetInto, Layout, Window, WindowKind};

/// A process's rank in the job.
pub type Rank = u32;
