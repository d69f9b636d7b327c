//! Finding out who we are from whatever launched us: MPICH's Hydra (`mpiexec`, PMI-1
//! over `PMI_FD`), `rma-run` (the embedded default), or nothing (a World of one).
//! With the `pmix` feature, PMIx (`srun --mpi=pmix`, Open MPI's `mpirun`) comes first.
//! With the `mpi` feature, an MPI library already initialized in this process comes
//! before all of them (its MPI_COMM_WORLD: rma never competes with MPI for the launcher).
//! `RMA_BOOTSTRAP=pmix|pmi2|pmi1|run|single` forces one.

pub mod collective;
#[cfg(feature = "mpi")]
mod mpi;
mod pmi1;
mod pmi2;
#[cfg(feature = "pmix")]
mod pmix;
mod run;
mod single;

use std::sync::Arc;

use rma_core::{BackendError, Bootstrap, Error, Rank, TransportError};

#[cfg(feature = "mpi")]
pub use self::mpi::{Duplicate, MpiBootstrap};
pub use pmi1::Pmi1;
pub use pmi2::Pmi2;
#[cfg(feature = "pmix")]
pub use pmix::{Pmix, PmixError};
pub use run::{RunClient, RunServer};
pub use single::Single;

/// Where the parents and children of a spawn under a launcher other than rma-run meet:
/// an rma-run server of the spawning rank (a Unix socket: every one of them on its node),
/// serving their joint job. Kept alive by the spawning rank's bootstrap.
pub(crate) struct Rendezvous {
    server: RunServer,
    dir: std::path::PathBuf,
    /// What the children are told (`PATH\nPARENTS\nJOB`).
    pub for_children: String,
    /// What the parents join ([`join_rendezvous`]): `PATH\nJOB`.
    pub for_parents: String,
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendezvous")
            .field("dir", &self.dir)
            .finish()
    }
}

impl Rendezvous {
    /// A server for `parents + children` ranks.
    pub(crate) fn start(parents: usize, children: usize) -> Result<Rendezvous, TransportError> {
        static SPAWNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = SPAWNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let job = format!("s{}x{k}", std::process::id());
        let dir = std::env::temp_dir().join(format!("rma-{job}"));
        crate::launcher::private_dir(&dir).map_err(|e| {
            BackendError::new(
                format!("making the spawn's rendezvous directory {}", dir.display()),
                e,
            )
        })?;
        // The joint job, named as rma-run names a spawn's (every join is alike).
        let server = RunServer::start(&dir, 0)
            .map_err(|e| BackendError::new("starting the spawn's rendezvous server", e))?;
        server.add_job(&job, parents + children);
        let path = server.path().to_string_lossy().into_owned();
        Ok(Rendezvous {
            for_children: format!("{path}\n{parents}\n{job}"),
            for_parents: format!("{path}\n{job}"),
            server,
            dir,
        })
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        self.server.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A parent's bootstrap in the joint job of a spawn: `PATH\nJOB` of the rma-run server
/// that serves it ([`Bootstrap::spawn`]'s answer, [`Rendezvous::for_parents`]).
pub(crate) fn join_rendezvous(
    at: &str,
    rank: Rank,
    size: usize,
) -> Result<Arc<dyn Bootstrap>, TransportError> {
    let (path, job) = at
        .split_once('\n')
        .ok_or_else(|| TransportError::Failed("a bad spawn rendezvous".into()))?;
    let client = RunClient::connect_named(std::path::Path::new(path), rank, size, job.into())
        .map_err(|e| BackendError::new(format!("joining the spawn's rendezvous at {path}"), e))?;
    Ok(Arc::new(client))
}

/// A child's bootstrap in the joint job of its spawn, from what it was told
/// ([`Rendezvous::for_children`]) and its rank and size among the children; with the
/// number of parents.
#[allow(clippy::type_complexity)]
pub(crate) fn child_rendezvous(
    told: &str,
    rank: Rank,
    size: usize,
) -> Result<(Arc<dyn Bootstrap>, usize), TransportError> {
    let bad = || TransportError::Failed("a bad spawn rendezvous".into());
    let mut parts = told.split('\n');
    let (Some(path), Some(parents), Some(job)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let parents: usize = parents.parse().map_err(|_| bad())?;
    let client = RunClient::connect_named(
        std::path::Path::new(path),
        (parents + rank as usize) as Rank,
        parents + size,
        job.into(),
    )
    .map_err(|e| BackendError::new(format!("joining the spawn's rendezvous at {path}"), e))?;
    Ok((Arc::new(client), parents))
}

/// The launchers' numeric variables (see rma-ofi's `ENV_NUMBERS`).
pub const ENV_NUMBERS: &[(&str, usize, usize, &str)] = &[(
    "RMA_BOOT_TIMEOUT_MS",
    1,
    86_400_000,
    "milliseconds from 1 to 86400000",
)];

/// Environment variables `rma-run` gives each process it starts.
pub mod env {
    /// Path of the launcher's Unix socket.
    pub const SOCKET: &str = "RMA_RUN_SOCKET";
    /// The process's rank.
    pub const RANK: &str = "RMA_RUN_RANK";
    /// Number of ranks.
    pub const SIZE: &str = "RMA_RUN_SIZE";
    /// The job's id.
    pub const JOB: &str = "RMA_RUN_JOB";
    /// Set for a spawned process: its job is one the server made for the spawn.
    pub const SPAWNED: &str = "RMA_RUN_SPAWNED";
    /// A spawned process's job together with its parents (parents first).
    pub const PARENT_JOB: &str = "RMA_RUN_PARENT_JOB";
    /// Its rank there.
    pub const PARENT_RANK: &str = "RMA_RUN_PARENT_RANK";
    /// That job's size (parents and children).
    pub const PARENT_SIZE: &str = "RMA_RUN_PARENT_SIZE";
    /// How many of them are parents (ranks 0..this).
    pub const PARENT_COUNT: &str = "RMA_RUN_PARENT_COUNT";
    /// For a process spawned through PMIx: where its parents and it meet (hex of
    /// `PATH\nPARENTS\nJOB`, see the spawn's rendezvous).
    pub const RENDEZVOUS: &str = "RMA_SPAWN_RENDEZVOUS";
}

/// The launcher's socket from `PMI_FD`, checked to be an open socket (`Ok(None)` if the
/// variable is unset).
pub(crate) fn pmi_socket() -> Result<Option<std::os::unix::net::UnixStream>, Error> {
    use std::os::fd::FromRawFd;
    let Ok(fd) = std::env::var("PMI_FD") else {
        return Ok(None);
    };
    let bad = |what: String| -> Error { TransportError::Failed(format!("PMI: {what}")).into() };
    let fd: i32 = fd
        .trim()
        .parse()
        .map_err(|_| bad(format!("PMI_FD={fd} is not a descriptor")))?;
    // Refuse anything but an open socket instead of adopting a random descriptor.
    // SAFETY: `libc::stat` is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let is_socket = fd >= 0 && {
        // SAFETY: fstat only writes the metadata of `fd` into `st`, a valid out-pointer;
        // an invalid fd yields an error, not undefined behaviour.
        let r = unsafe { libc::fstat(fd, &mut st) };
        r == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
    };
    if !is_socket {
        return Err(bad(format!("PMI_FD={fd} is not an open socket")));
    }
    // SAFETY: the launcher handed this socket to us; we own it from here on.
    let stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    // Waits poll in steps and ask their watch in between (Watch::readable); this is the
    // backstop for a read that starts and then stalls.
    stream.set_read_timeout(Some(WAIT_LIMIT)).ok();
    Ok(Some(stream))
}

/// How long a bootstrap wait may go on without an answer (the launcher's own timeout).
pub(crate) const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a waiting bootstrap asks its [`Watch`].
pub(crate) const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The liveness check a PMI bootstrap's blocking waits run ([`Bootstrap::set_watch`]).
#[derive(Default)]
pub(crate) struct Watch(std::sync::Mutex<Option<rma_core::bootstrap::LivenessWatch>>);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

impl Watch {
    pub(crate) fn set(&self, w: rma_core::bootstrap::LivenessWatch) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
    }

    /// The watch's verdict now (`Ok` when none is installed).
    pub(crate) fn check(&self) -> Result<(), TransportError> {
        let w = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        w.map_or(Ok(()), |w| w())
    }

    /// Waits until the launcher's socket has bytes to read (or is closed), asking the
    /// watch every [`WATCH_EVERY`], for at most [`WAIT_LIMIT`].
    pub(crate) fn readable(
        &self,
        stream: &std::os::unix::net::UnixStream,
        what: &str,
    ) -> Result<(), TransportError> {
        use std::os::fd::AsRawFd;
        let start = std::time::Instant::now();
        loop {
            let mut p = libc::pollfd {
                fd: stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for an open descriptor the stream owns, count 1;
            // poll only writes `revents`.
            let r = unsafe { libc::poll(&mut p, 1, WATCH_EVERY.as_millis() as libc::c_int) };
            if r > 0 {
                // Readable, or hung up / failed: the read that follows says which.
                return Ok(());
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    let doing = format!("waiting on the launcher's socket for `{what:.30}`");
                    return Err(BackendError::new(doing, e).into());
                }
            }
            self.check()?;
            if start.elapsed() > WAIT_LIMIT {
                return Err(TransportError::Failed(format!(
                    "the launcher did not answer `{what:.30}` within {WAIT_LIMIT:?}: a peer \
                     never arrived or died"
                )));
            }
        }
    }
}

/// Values travel as lowercase hex in the launchers' text protocols.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string; `None` if it is not one.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The node identity: `RMA_NODE_ID` if set, else the host name (a UTS namespace's own
/// for simulated hosts), qualified by Slurm's node id in a task `srun` started: Slurm's
/// nodes are nodes to rma even where several share one host (`slurmd -N`). The host name
/// stays part of it because launchers that forward the whole environment to other hosts
/// (Hydra over ssh inside an allocation) would otherwise carry one node id everywhere.
pub fn node_id() -> String {
    if let Ok(id) = std::env::var("RMA_NODE_ID") {
        return id;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    match (
        std::env::var("SLURM_STEP_ID"),
        std::env::var("SLURM_NODEID"),
    ) {
        (Ok(_), Ok(node)) => format!("{host}/slurm-node-{node}"),
        _ => host,
    }
}

/// Detects the launcher: `RMA_BOOTSTRAP` if set, then `PMI_FD` (PMI-1), then rma-run's
/// variables, then a World
/// of one. A forced launcher that is not there is an error naming what was looked for.
pub fn detect() -> Result<Arc<dyn Bootstrap>, Error> {
    let forced = std::env::var("RMA_BOOTSTRAP").ok();
    match forced.as_deref() {
        Some("single") => return Ok(Arc::new(Single::new())),
        Some("run") => {
            return Ok(Arc::new(
                RunClient::from_env()?.ok_or_else(|| missing("run", env::SOCKET))?,
            ))
        }
        #[cfg(feature = "pmix")]
        Some("pmix") => {
            return Ok(Arc::new(
                Pmix::from_env()?.ok_or_else(|| missing("pmix", "PMIX_NAMESPACE"))?,
            ))
        }
        #[cfg(not(feature = "pmix"))]
        Some("pmix") => {
            return Err(TransportError::Failed(
                "RMA_BOOTSTRAP=pmix, but this build has no PMIx (cargo feature `pmix` of rma)"
                    .into(),
            )
            .into())
        }
        Some("pmi2") => {
            return Ok(Arc::new(
                Pmi2::from_env()?.ok_or_else(|| missing("pmi2", "PMI_FD"))?,
            ))
        }
        Some("pmi1") => {
            return Ok(Arc::new(
                Pmi1::from_env()?.ok_or_else(|| missing("pmi1", "PMI_FD"))?,
            ))
        }
        Some(other) => {
            return Err(TransportError::Failed(format!(
                "RMA_BOOTSTRAP={other} is not a launcher rma knows (pmix, pmi2, pmi1, run, single)"
            ))
            .into())
        }
        None => {}
    }
    #[cfg(feature = "mpi")]
    if ::mpi::environment::is_initialized() && !::mpi::environment::is_finalized() {
        let world = ::mpi::topology::SimpleCommunicator::world();
        return Ok(Arc::new(MpiBootstrap::new(&world)?));
    }
    #[cfg(feature = "pmix")]
    if let Some(c) = Pmix::from_env()? {
        return Ok(Arc::new(c));
    }
    // Slurm's PMI-2 plugin sets PMI_JOBID and speaks only PMI-2; Hydra speaks both.
    if std::env::var_os("PMI_FD").is_some() && std::env::var_os("PMI_JOBID").is_some() {
        if let Some(c) = Pmi2::from_env()? {
            return Ok(Arc::new(c));
        }
    }
    if let Some(c) = Pmi1::from_env()? {
        return Ok(Arc::new(c));
    }
    if let Some(c) = RunClient::from_env()? {
        return Ok(Arc::new(c));
    }
    if let Some(why) = unsupported_launcher() {
        return Err(TransportError::Failed(why).into());
    }
    Ok(Arc::new(Single::new()))
}

/// A launcher that started this process as one of several but that this build cannot
/// talk to: without this, each process would run as a World of one (`mpirun -n 3` on a
/// build without PMIx ran three worlds of one, silently). Says what to do instead.
fn unsupported_launcher() -> Option<String> {
    let many = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n > 1)
    };
    // Reached with PMIx built in only when its server was not found (no namespace).
    let pmix = if cfg!(feature = "pmix") {
        "its PMIx server is not in the environment (PMIX_NAMESPACE unset)"
    } else {
        "this build of rma has no PMIx: build rma with the cargo feature `pmix` (or \
         launch with rma-run, MPICH's mpiexec, srun --mpi=pmi2)"
    };
    if let Some(n) = many("OMPI_COMM_WORLD_SIZE").or(many("PMIX_SIZE")) {
        return Some(format!(
            "started by a PMIx launcher (Open MPI's mpirun or srun --mpi=pmix) as one of \
             {n} processes, but {pmix}"
        ));
    }
    if std::env::var_os("PMIX_NAMESPACE").is_some() && many("SLURM_NTASKS").is_some() {
        return Some(format!("started by srun --mpi=pmix, but {pmix}"));
    }
    if let (Some(n), Some(_)) = (many("SLURM_NTASKS"), std::env::var_os("SLURM_STEP_ID")) {
        if std::env::var_os("PMI_FD").is_none() && std::env::var_os("PMIX_NAMESPACE").is_none() {
            return Some(format!(
                "started by srun as one of {n} tasks without a process-management interface: \
                 run srun --mpi=pmi2 (or --mpi=pmix with rma's `pmix` feature)"
            ));
        }
    }
    None
}

fn missing(which: &str, var: &str) -> Error {
    TransportError::Failed(format!(
        "RMA_BOOTSTRAP={which}, but {var} is not set: not started by that launcher"
    ))
    .into()
}
