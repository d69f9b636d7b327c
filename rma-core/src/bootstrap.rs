//! What a process learns from whatever launched it: its rank, the job size, which ranks
//! share its node, a key-value space and a barrier. Backends use it to exchange
//! addresses; implementations (rma-run, PMI) live in the `rma` facade.

use std::sync::Arc;

use crate::error::TransportError;
use crate::Rank;

/// A check a bootstrap's blocking waits run now and then (every 100 ms or so): an error
/// says the wait is hopeless (a peer died, or left the job and will make no more
/// bootstrap calls), and the wait returns it. The engine provides one
/// ([`Engine::liveness_watch`](crate::Engine::liveness_watch)).
pub type LivenessWatch = Arc<dyn Fn() -> Result<(), TransportError> + Send + Sync>;

/// One command of a spawn: `processes` copies of `program` with `args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnCommand {
    /// The program (a path, or a name the launcher finds on its PATH).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How many processes run it.
    pub processes: usize,
}

/// Launcher services for one process of a job.
pub trait Bootstrap: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// A name unique to this job, safe in file names (for shared-memory segments).
    fn job_id(&self) -> &str;
    /// Identity of this process's node: ranks with equal values share memory.
    fn node_id(&self) -> &str;
    /// Publishes `value` under `key` (visible to `get` after the next `barrier`, or
    /// earlier where the launcher allows).
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError>;
    /// The value another rank published under `key`; blocks until it appears or the
    /// launcher's timeout passes.
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError>;
    /// Blocks until every rank has called it.
    fn barrier(&self) -> Result<(), TransportError>;

    /// Installs the check that blocking waits run now and then, for launchers that cannot
    /// tell a waiting process that a peer is gone (PMI). Ignored where the launcher tells
    /// it (rma-run) or the wait cannot be interrupted.
    fn set_watch(&self, watch: LivenessWatch) {
        let _ = watch;
    }

    /// This process leaves the job normally: it makes no more bootstrap calls. Peers
    /// blocked in a collective it will never join learn it from the launcher, where the
    /// launcher can tell them (rma-run); otherwise nothing.
    fn depart(&self) {}

    /// Ranks the launcher knows are gone (dead, or departed), where it can tell; empty
    /// otherwise. For a leaving process not to wait for their goodbyes.
    fn gone(&self) -> Vec<Rank> {
        Vec::new()
    }

    /// The tags this bootstrap's allgathers have used, where it keeps them (see
    /// [`Tags`]).
    fn tags(&self) -> Option<&Tags> {
        None
    }

    /// Starts the processes of a spawn (MPI_Comm_spawn_multiple), asked by one parent
    /// for `parents` of them: returns the id of the job of parents and children together
    /// (parents its ranks 0..parents, in their communicator's order, then the
    /// children in command order): `PATH\nJOB`, the socket of the rma-run server that
    /// serves it and its name there, which every parent joins. The children learn theirs
    /// from their launcher. Launchers that cannot spawn say so.
    fn spawn(&self, commands: &[SpawnCommand], parents: usize) -> Result<String, TransportError> {
        let _ = (commands, parents);
        Err(TransportError::Unsupported(
            "spawn: this launcher cannot start processes for rma (launch with rma-run)",
        ))
    }

    /// For a process started by a spawn: a bootstrap for its rank in the job of its
    /// parents and itself, and how many parents there are (their ranks come first);
    /// `None` for a process that was not spawned.
    #[allow(clippy::type_complexity)]
    fn parent(&self) -> Result<Option<(Arc<dyn Bootstrap>, usize)>, TransportError> {
        Ok(None)
    }

    /// Every rank's `value`, in rank order (put, barrier, get each). A tag names one
    /// allgather: using it again is an error (the keys of the first would answer the
    /// second, silently mixing their results).
    fn allgather(&self, tag: &str, value: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        if let Some(tags) = self.tags() {
            tags.claim(tag)?;
        }
        self.put(&format!("{tag}:{}", self.rank()), value)?;
        self.barrier()?;
        (0..self.size())
            .map(|r| self.get(&format!("{tag}:{r}")))
            .collect()
    }
}

/// The allgather tags a bootstrap has used: a second allgather under one tag is an
/// error.
///
/// ```
/// let tags = rma_core::bootstrap::Tags::default();
/// assert!(tags.claim("hello").is_ok());
/// assert!(tags.claim("hello").is_err());
/// ```
#[derive(Debug, Default)]
pub struct Tags(std::sync::Mutex<std::collections::HashSet<String>>);

impl Tags {
    /// Takes `tag` for one allgather; an error if it was taken before.
    pub fn claim(&self, tag: &str) -> Result<(), TransportError> {
        let mut used = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if used.insert(tag.to_string()) {
            Ok(())
        } else {
            Err(TransportError::Failed(format!(
                "allgather tag {tag:?} used twice: each allgather needs a tag of its own"
            )))
        }
    }
}

/// What a transport tells every rank about this process when it is created, in one
/// collective ([`exchange_hellos`]): its pid (for liveness checks among ranks of one
/// node), its node identity and its transport address (empty for shared memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The process id.
    pub pid: u32,
    /// [`Bootstrap::node_id`] of the process.
    pub node: Vec<u8>,
    /// The transport's address bytes (an endpoint name, queue pair numbers, ...).
    pub address: Vec<u8>,
}

impl Hello {
    /// `pid u32 | node length u16 | node | address`, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(6 + self.node.len() + self.address.len());
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&(self.node.len() as u16).to_le_bytes());
        v.extend_from_slice(&self.node);
        v.extend_from_slice(&self.address);
        v
    }

    /// Splits a peer's hello without trusting its lengths.
    pub fn decode(v: &[u8]) -> Result<Hello, TransportError> {
        let bad = || TransportError::Failed("bad hello from the bootstrap".into());
        let pid = v.get(..4).ok_or_else(bad)?;
        let node_len = v.get(4..6).ok_or_else(bad)?;
        let node_end = 6 + u16::from_le_bytes([node_len[0], node_len[1]]) as usize;
        Ok(Hello {
            pid: u32::from_le_bytes([pid[0], pid[1], pid[2], pid[3]]),
            node: v.get(6..node_end).ok_or_else(bad)?.to_vec(),
            address: v.get(node_end..).ok_or_else(bad)?.to_vec(),
        })
    }
}

/// Every rank's [`Hello`] in rank order, from one allgather under `tag`: this
/// process's pid and node with `address`.
pub fn exchange_hellos(
    boot: &dyn Bootstrap,
    tag: &str,
    address: &[u8],
) -> Result<Vec<Hello>, TransportError> {
    let node = boot.node_id().as_bytes();
    if node.len() > u16::MAX as usize {
        return Err(TransportError::Failed("node id longer than 64 KiB".into()));
    }
    let mine = Hello {
        pid: std::process::id(),
        node: node.to_vec(),
        address: address.to_vec(),
    };
    boot.allgather(tag, &mine.encode())?
        .iter()
        .map(|h| Hello::decode(h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_round_trips_and_a_truncated_or_lying_one_is_an_error() {
        let hello = Hello {
            pid: 4242,
            node: b"host/slurm-node-1".to_vec(),
            address: b"\x02\x00\x1f\x90endpoint".to_vec(),
        };
        let bytes = hello.encode();
        assert_eq!(Hello::decode(&bytes).unwrap(), hello);
        // Cut inside the pid, the length or the node: an error, never a panic.
        for len in 0..6 + hello.node.len() {
            assert!(Hello::decode(&bytes[..len]).is_err(), "length {len}");
        }
        let mut lying = bytes.clone();
        lying[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(Hello::decode(&lying).is_err());
    }
}
