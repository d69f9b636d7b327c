//! `rma`: one-sided communication (remote memory access) between the processes of an
//! HPC job, with MPI-3/MPI-4.1 semantics.
//!
//! A user depends on this crate alone. [`World::init`] finds out who started the
//! process (`rma-run`, or nothing: a World of one), joins the transports (shared memory
//! for the ranks of this node), and gives the [`Engine`] that creates windows:
//!
//! ```
//! use rma::{Assert, World};
//! # fn main() -> Result<(), rma::Error> {
//! let world = World::init()?; // a World of one when started by hand
//! let win = world.allocate::<u64>(16)?;
//! win.lock_all(Assert::NONE)?;
//! win.put(&[7, 8], world.rank(), 2)?;
//! let old = win.fetch_and_op(1, rma::AccOp::Sum, world.rank(), 2)?;
//! win.flush_all()?;
//! assert_eq!(old.wait()?, 7);
//! win.unlock_all()?;
//! assert_eq!(&win.local_to_vec()[2..4], &[8, 8]);
//! win.free()?;
//! # Ok(()) }
//! ```
//!
//! Start N processes on this node with `rma-run -n N program args`. Configuration comes
//! from [`Config`] in code or `RMA_*` environment variables ([`Config::from_env`]).

pub mod bootstrap;
pub mod launcher;

use std::sync::Arc;

pub use rma_core::*;

/// The processes of a job as this process sees them: its bootstrap and the engine over
/// the transports. Dereferences to [`Engine`].
pub struct World {
    engine: Engine,
    bootstrap: Arc<dyn Bootstrap>,
    /// The shared-memory transport, when it is the backend (to mark our departure).
    shm: Option<Arc<rma_shm::ShmTransport>>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.engine.rank())
            .field("size", &self.engine.size())
            .finish()
    }
}

impl World {
    /// Initializes from the launcher's environment with [`Config::from_env`].
    pub fn init() -> Result<World> {
        Self::init_with(Config::from_env())
    }

    /// Initializes with the given configuration. `RMA_BACKEND` picks the backend: `shm`
    /// (the default: every rank on this node), `ofi` (libfabric, with the `ofi` cargo
    /// feature; provider from `RMA_OFI_PROVIDER` or `FI_PROVIDER`) or `verbs` (libibverbs,
    /// with the `verbs` cargo feature; device from `RMA_VERBS_DEVICE`).
    pub fn init_with(config: Config) -> Result<World> {
        let bootstrap = bootstrap::detect()?;
        let (transport, shm): (Arc<dyn Transport>, Option<Arc<rma_shm::ShmTransport>>) =
            match std::env::var("RMA_BACKEND").as_deref() {
                Ok("shm") | Err(_) => {
                    let t = Arc::new(rma_shm::ShmTransport::new(bootstrap.clone())?);
                    (t.clone(), Some(t))
                }
                #[cfg(feature = "ofi")]
                Ok("ofi") => (
                    Arc::new(rma_ofi::OfiTransport::new(bootstrap.clone())?),
                    None,
                ),
                #[cfg(not(feature = "ofi"))]
                Ok("ofi") => {
                    return Err(TransportError::Failed(
                        "RMA_BACKEND=ofi: this build has no libfabric backend (build rma with \
                         the `ofi` feature)"
                            .into(),
                    )
                    .into())
                }
                #[cfg(feature = "verbs")]
                Ok("verbs") => (
                    Arc::new(rma_verbs::VerbsTransport::new(bootstrap.clone())?),
                    None,
                ),
                #[cfg(not(feature = "verbs"))]
                Ok("verbs") => {
                    return Err(TransportError::Failed(
                        "RMA_BACKEND=verbs: this build has no verbs backend (build rma with \
                         the `verbs` feature)"
                            .into(),
                    )
                    .into())
                }
                Ok(other) => {
                    return Err(TransportError::Failed(format!(
                        "RMA_BACKEND={other}: not a backend rma knows (shm, ofi, verbs)"
                    ))
                    .into())
                }
            };
        Ok(World {
            engine: Engine::new(transport, config),
            bootstrap,
            shm,
        })
    }

    /// The engine (also reachable through `Deref`).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The launcher services (rank, size, node, key-value space).
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.bootstrap
    }
}

impl Drop for World {
    /// Leaving normally: peers still finishing their part must not take our exit for a
    /// failure.
    fn drop(&mut self) {
        if let Some(shm) = &self.shm {
            shm.depart();
        }
    }
}

impl std::ops::Deref for World {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}
