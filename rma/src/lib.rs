//! `rma`: one-sided communication (remote memory access) between the processes of an
//! HPC job, with MPI-3/MPI-4.1 semantics.
//!
//! A user depends on this crate alone. [`World::init`] finds out who started the
//! process (`rma-run`, MPICH's Hydra, Slurm's `srun`, Open MPI's `mpirun`, or nothing: a
//! World of one), joins the transports by locality (shared memory for the ranks of this
//! node; with the `ofi` or `verbs` feature, libfabric or InfiniBand verbs toward the
//! ranks of other nodes, in the same windows: see `hybrid`), and gives the [`Engine`]
//! that creates windows:
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
//! Start N processes on this node with `rma-run -n N program args` (`--hosts` spreads
//! them over simulated hosts). Configuration comes from [`Config`] in code or `RMA_*`
//! environment variables ([`Config::from_env`]); [`World::route`] and
//! [`World::traffic`] say which backend reaches a target and what went through it.

pub mod bootstrap;
#[cfg(any(feature = "ofi", feature = "verbs"))]
pub mod hybrid;
pub mod launcher;
mod local;
#[cfg(feature = "cli")]
pub mod logging;
mod spawn;
pub mod topology;

pub use local::{LocalAccess, LocalGuard};
pub use rma_core::bootstrap::SpawnCommand;
pub use spawn::InterComm;

use std::sync::Arc;

use rma_core::Transport;

// What a program calls: windows and their operations, communicators and collectives,
// configuration, errors, counters.
pub use rma_core::wire::Kind as MessageKind;
pub use rma_core::{
    AccOp, Assert, AsyncProgress, BackendError, Bootstrap, Comm, ComplexF32, ComplexF64,
    ComplexLongDouble, Config, DataType, Element, Elements, Engine, Error, ErrorKind, FreeError,
    GetBuffer, GetInto, Group, Layout, LocF32, LocF64, LocI16, LocI32, LocI64, LocLongDouble,
    LocOp, LockType, LongDouble, PeerError, PutBuffer, Rank, Request, Result, Stats,
    TransportError, UsageError, UserMemory, Window, WindowKind,
};

/// The engine underneath, whole: the `Transport` contract and its
/// capabilities, the wire format, bootstrap and element pools, the simulated transport
/// (feature `sim` of rma-core). For backends, tools and tests that drive a transport
/// themselves; a program needs none of it.
pub use rma_core as engine;

/// Which backend reaches a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Shared memory: the target is on this node.
    SharedMemory,
    /// The network (libfabric, or verbs with `RMA_BACKEND=verbs`).
    Network,
}

/// What this process sent toward one target, and how (a hybrid world's per-target path
/// counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// The backend that reaches the target.
    pub route: Route,
    /// Native operations (puts, gets, atomics) issued through it.
    pub native_ops: u64,
    /// Active messages sent through it.
    pub messages: u64,
}

/// The backend behind a World, kept for what the engine does not expose.
enum Backend {
    SharedMemory(Arc<rma_shm::ShmTransport>),
    #[cfg(feature = "ofi")]
    Network(Arc<rma_ofi::OfiTransport>),
    #[cfg(any(feature = "ofi", feature = "verbs"))]
    Hybrid(Arc<hybrid::HybridTransport>),
    /// libibverbs toward every rank.
    #[cfg(feature = "verbs")]
    Verbs(Arc<rma_verbs::VerbsTransport>),
}

/// The processes of a job as this process sees them: its bootstrap and the engine over
/// the transports. Dereferences to [`Engine`].
pub struct World {
    engine: Engine,
    bootstrap: Arc<dyn Bootstrap>,
    backend: Backend,
    /// For a spawned process: the inter-communicator to its parents.
    parent: Option<Box<spawn::InterComm>>,
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
        Self::init_with(Config::from_env()?)
    }

    /// Initializes with the given configuration.
    ///
    /// The backend follows locality: when every rank is on this node, shared memory;
    /// when the job spans nodes (by the bootstrap's node identity), shared memory among
    /// each node's ranks and the network between nodes in the same windows: libfabric
    /// (the `ofi` cargo feature; provider from `RMA_OFI_PROVIDER` or `FI_PROVIDER`), or
    /// verbs with `RMA_NETWORK=verbs` (the `verbs` feature). `RMA_BACKEND`
    /// forces one: `shm`, `ofi` (libfabric toward every rank), `hybrid` or `verbs`
    /// (libibverbs toward every rank, with the `verbs` cargo feature; device from
    /// `RMA_VERBS_DEVICE`).
    pub fn init_with(config: Config) -> Result<World> {
        // Every numeric variable of the backends built in, before anything starts: a
        // value that does not parse is an error naming it, not a silent default.
        rma_core::config::check_env_numbers(bootstrap::ENV_NUMBERS)?;
        rma_core::config::check_env_numbers(rma_shm::ENV_NUMBERS)?;
        #[cfg(feature = "ofi")]
        rma_core::config::check_env_numbers(rma_ofi::ENV_NUMBERS)?;
        #[cfg(feature = "verbs")]
        rma_core::config::check_env_numbers(rma_verbs::ENV_NUMBERS)?;
        let bootstrap = bootstrap::detect()?;
        let mut world = Self::init_over(bootstrap, config.clone())?;
        // A process that rma-run spawned joins its parents too (MPI_Init's part of
        // MPI_Comm_spawn): the parents wait in `spawn` for every child.
        if let Some((union, parents)) = world.bootstrap.parent()? {
            let union = Self::init_over(union, config)?;
            world.parent = Some(Box::new(spawn::InterComm::children(union, parents)?));
        }
        Ok(world)
    }

    /// A World over the processes of an MPI communicator, in its rank order, in a process
    /// where MPI is initialized (cargo feature `mpi`): the bootstrap's exchanges go
    /// through MPI's collectives on a duplicate of `comm`, so that rma and MPI never
    /// share the launcher's connection. Collective over `comm`. Drop the World before or
    /// after MPI_Finalize (free its windows before). [`World::init`] does this with
    /// MPI_COMM_WORLD when MPI is initialized.
    #[cfg(feature = "mpi")]
    pub fn from_mpi<C: ::mpi::topology::Communicator>(comm: &C) -> Result<World> {
        Self::from_mpi_with(comm, Config::from_env()?)
    }

    /// [`from_mpi`](Self::from_mpi) with the given configuration.
    #[cfg(feature = "mpi")]
    pub fn from_mpi_with<C: ::mpi::topology::Communicator>(
        comm: &C,
        config: Config,
    ) -> Result<World> {
        let bootstrap: Arc<dyn Bootstrap> = Arc::new(bootstrap::MpiBootstrap::new(comm)?);
        Self::from_bootstrap(bootstrap, config)
    }

    /// A World over a bootstrap of the caller's own: rank, size, node identity and every
    /// exchange go through it (collective over its ranks, like every bootstrap). For a
    /// runtime rma has no bootstrap for, or reaches another way: librma-mpi builds its
    /// World over the MPI library it interposes on, through that library's PMPI calls,
    /// without the `mpi` crate (whose bindings need an ABI the crate knows).
    pub fn from_bootstrap(bootstrap: Arc<dyn Bootstrap>, config: Config) -> Result<World> {
        rma_core::config::check_env_numbers(rma_shm::ENV_NUMBERS)?;
        #[cfg(feature = "ofi")]
        rma_core::config::check_env_numbers(rma_ofi::ENV_NUMBERS)?;
        #[cfg(feature = "verbs")]
        rma_core::config::check_env_numbers(rma_verbs::ENV_NUMBERS)?;
        Self::init_over(bootstrap, config)
    }

    fn init_over(bootstrap: Arc<dyn Bootstrap>, config: Config) -> Result<World> {
        let forced = std::env::var("RMA_BACKEND").ok().filter(|b| !b.is_empty());
        let nodes = match forced.as_deref() {
            // One collective tells every rank the same thing about locality.
            None | Some("hybrid") => {
                Some(bootstrap.allgather("world-node", bootstrap.node_id().as_bytes())?)
            }
            _ => None,
        };
        let one_node = nodes.as_ref().is_some_and(|n| n.iter().all(|x| *x == n[0]));
        let choice = match forced.as_deref() {
            None if one_node => "shm",
            None => "hybrid",
            Some(b) => b,
        };
        let (transport, backend): (Arc<dyn Transport>, Backend) = match choice {
            "shm" => {
                let t = Arc::new(rma_shm::ShmTransport::new(bootstrap.clone())?);
                (t.clone(), Backend::SharedMemory(t))
            }
            #[cfg(feature = "ofi")]
            "ofi" => {
                let t = Arc::new(rma_ofi::OfiTransport::new(bootstrap.clone())?);
                (t.clone(), Backend::Network(t))
            }
            #[cfg(any(feature = "ofi", feature = "verbs"))]
            "hybrid" => {
                let nodes = nodes.unwrap_or_default();
                let t = Arc::new(hybrid::HybridTransport::new(bootstrap.clone(), &nodes)?);
                (t.clone(), Backend::Hybrid(t))
            }
            #[cfg(not(any(feature = "ofi", feature = "verbs")))]
            "hybrid" => {
                let why = if forced.is_some() {
                    "RMA_BACKEND=hybrid"
                } else {
                    "the ranks span several nodes"
                };
                return Err(TransportError::Failed(format!(
                    "{why}: this build has no network backend (build rma with the `ofi` or \
                     `verbs` feature)"
                ))
                .into());
            }
            #[cfg(not(feature = "ofi"))]
            "ofi" => return Err(not_built("ofi", "libfabric")),
            #[cfg(feature = "verbs")]
            "verbs" => {
                let t = Arc::new(rma_verbs::VerbsTransport::new(bootstrap.clone())?);
                (t.clone(), Backend::Verbs(t))
            }
            #[cfg(not(feature = "verbs"))]
            "verbs" => return Err(not_built("verbs", "verbs")),
            other => {
                return Err(TransportError::Failed(format!(
                    "RMA_BACKEND={other}: not a backend rma knows (shm, ofi, hybrid, verbs)"
                ))
                .into())
            }
        };
        // rma-run's choice of a free core for the progress agent, if it made one.
        let config = topology::with_agent_binding(config)?;
        let engine = Engine::new(transport, config);
        // PMI's blocking waits now notice peers that die or leave (rma-run's server tells
        // its ranks itself).
        bootstrap.set_watch(engine.liveness_watch());
        Ok(World {
            engine,
            bootstrap,
            backend,
            parent: None,
        })
    }

    /// Which backend reaches `target`.
    pub fn route(&self, target: Rank) -> Route {
        // One backend for every target unless the world is hybrid.
        let _ = target;
        match &self.backend {
            Backend::SharedMemory(_) => Route::SharedMemory,
            #[cfg(feature = "ofi")]
            Backend::Network(_) => Route::Network,
            #[cfg(any(feature = "ofi", feature = "verbs"))]
            Backend::Hybrid(h) => h.route(target),
            #[cfg(feature = "verbs")]
            Backend::Verbs(_) => Route::Network,
        }
    }

    /// What this process sent toward `target` so far and through which backend, in a
    /// hybrid world (`None` with a single backend: the engine's [`Stats`] say it all).
    pub fn traffic(&self, target: Rank) -> Option<Traffic> {
        match &self.backend {
            #[cfg(any(feature = "ofi", feature = "verbs"))]
            Backend::Hybrid(h) => h.traffic(target),
            _ => {
                let _ = target;
                None
            }
        }
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

impl World {
    /// The World communicator (every rank, in World order): the one the others are made
    /// from ([`Comm::split`], [`Comm::split_shared`], [`Comm::create`]).
    pub fn comm(&self) -> Comm {
        self.engine.world()
    }
}

impl Drop for World {
    /// Leaving normally: peers still finishing their part must not take our exit for a
    /// failure.
    fn drop(&mut self) {
        // First the peers: one in a barrier this process never joins fails at once, and
        // the notice says whom this process blames for leaving (a dead rank, say), so
        // that a peer told of the departure by the launcher (next) finds the cause
        // already in its transport and names the dead rank, not this one.
        self.engine.depart();
        // Then the launcher: peers blocked in a bootstrap collective we will never join
        // learn it now, and do not keep us lingering for their goodbyes below.
        self.bootstrap.depart();
        match &self.backend {
            Backend::SharedMemory(shm) => shm.depart(),
            #[cfg(any(feature = "ofi", feature = "verbs"))]
            Backend::Hybrid(h) => h.depart(),
            #[cfg(feature = "ofi")]
            Backend::Network(ofi) => ofi.depart(),
            #[cfg(feature = "verbs")]
            Backend::Verbs(verbs) => verbs.depart(),
        }
    }
}

impl std::ops::Deref for World {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

/// The error for `RMA_BACKEND=FEATURE` in a build without that feature.
#[cfg(any(not(feature = "ofi"), not(feature = "verbs")))]
fn not_built(feature: &str, what: &str) -> Error {
    TransportError::Failed(format!(
        "RMA_BACKEND={feature}: this build has no {what} backend (build rma with the \
         `{feature}` feature)"
    ))
    .into()
}
