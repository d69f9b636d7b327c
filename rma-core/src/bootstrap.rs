//! What a process learns from whatever launched it: its rank, the job size, which ranks
//! share its node, a key-value space and a barrier. Backends use it to exchange
//! addresses; implementations (rma-run, PMI) live in the `rma` facade.

use crate::error::TransportError;
use crate::Rank;

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

    /// Every rank's `value`, in rank order (put, barrier, get each).
    fn allgather(&self, tag: &str, value: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.put(&format!("{tag}:{}", self.rank()), value)?;
        self.barrier()?;
        (0..self.size())
            .map(|r| self.get(&format!("{tag}:{r}")))
            .collect()
    }
}
