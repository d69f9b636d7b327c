//! A bootstrap over a communicator of an MPI library already running in this process
//! (cargo feature `mpi`, through the `mpi` crate): rank, size and every exchange go
//! through MPI's own collectives on a duplicate of the application's communicator, so
//! that rma never talks to the launcher MPI is talking to (under MPICH both would use
//! the one PMI descriptor, and MPI aborted at its finalize).
//!
//! Put/get follow PMI's fence: values put since the last barrier are exchanged by it.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::Mutex;
use std::thread::ThreadId;

use mpi::datatype::PartitionMut;
use mpi::environment::Threading;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Root};
use rma_core::{Bootstrap, Rank, TransportError};

/// A [`Bootstrap`] over an MPI communicator. Make it with [`MpiBootstrap::new`] (or let
/// [`World::from_mpi`](crate::World::from_mpi) do it).
pub struct MpiBootstrap {
    rank: Rank,
    size: usize,
    job: String,
    node: String,
    /// MPI calls from other threads need MPI_THREAD_SERIALIZED or more (the mutex
    /// serializes ours).
    owner: ThreadId,
    serialized: bool,
    state: Mutex<State>,
}

struct State {
    comm: Duplicate,
    /// Put since the last barrier, exchanged by the next.
    pending: Vec<(String, Vec<u8>)>,
    store: HashMap<String, Vec<u8>>,
}

/// rma's own duplicate of the application's communicator: freed only while MPI runs
/// (an application may finalize MPI before it drops rma's World).
struct Duplicate(ManuallyDrop<SimpleCommunicator>);

// SAFETY: the handle is used only under `MpiBootstrap::state`'s mutex (one call at a
// time), and only from the thread that made it unless MPI was initialized with
// MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (`MpiBootstrap::check_thread`): exactly the
// calls MPI's threading levels allow. Open MPI's handle is a pointer, hence no auto
// Send; the object it points to is MPI's, not tied to a thread.
unsafe impl Send for Duplicate {}

impl Drop for Duplicate {
    fn drop(&mut self) {
        if mpi::environment::is_initialized() && !mpi::environment::is_finalized() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.0) }
        }
        // After MPI_Finalize the handle is gone with MPI: nothing to free.
    }
}

fn failed(what: &str) -> TransportError {
    TransportError::Failed(format!("MPI bootstrap: {what}"))
}

impl MpiBootstrap {
    /// A bootstrap over a duplicate of `comm` (collective over `comm`, like every
    /// bootstrap's creation). MPI must be initialized and not finalized.
    pub fn new<C: Communicator>(comm: &C) -> Result<MpiBootstrap, TransportError> {
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(failed("MPI is not initialized (or already finalized)"));
        }
        let comm = comm.duplicate();
        let (rank, size) = (comm.rank() as Rank, comm.size() as usize);
        // A job id every member shares: rank 0's pid and clock.
        let mut job = [0u64; 2];
        if rank == 0 {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            job = [u64::from(std::process::id()), t];
        }
        comm.process_at_rank(0).broadcast_into(&mut job[..]);
        let serialized = matches!(
            mpi::environment::threading_support(),
            Threading::Serialized | Threading::Multiple
        );
        Ok(MpiBootstrap {
            rank,
            size,
            job: format!("mpi-{:x}-{:x}", job[0], job[1]),
            node: super::node_id(),
            owner: std::thread::current().id(),
            serialized,
            state: Mutex::new(State {
                comm: Duplicate(ManuallyDrop::new(comm)),
                pending: Vec::new(),
                store: HashMap::new(),
            }),
        })
    }

    fn check_thread(&self) -> Result<(), TransportError> {
        if self.serialized || std::thread::current().id() == self.owner {
            Ok(())
        } else {
            Err(failed(
                "MPI was initialized below MPI_THREAD_SERIALIZED: make rma's collective \
                 calls from the thread that created the World",
            ))
        }
    }

    fn live(&self) -> Result<std::sync::MutexGuard<'_, State>, TransportError> {
        self.check_thread()?;
        if mpi::environment::is_finalized() {
            return Err(failed("MPI was finalized while rma still needed it"));
        }
        Ok(self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Every member's bytes over `comm`, in rank order: lengths, then the bytes.
fn allgather(comm: &SimpleCommunicator, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
    // One byte ahead of every value: an empty Rust slice's address is 1, which Open MPI
    // takes for MPI_IN_PLACE (an MPI_ERR_ARG abort), so no buffer handed over is empty.
    let mut framed = Vec::with_capacity(mine.len() + 1);
    framed.push(0u8);
    framed.extend_from_slice(mine);
    let n = comm.size() as usize;
    let len = i32::try_from(framed.len()).map_err(|_| failed("a value past 2 GiB"))?;
    let mut lens = vec![0i32; n];
    comm.all_gather_into(&len, &mut lens[..]);
    let mut displs = Vec::with_capacity(n);
    let mut total = 0i32;
    for l in &lens {
        if *l < 1 {
            return Err(failed("a member sent no frame"));
        }
        displs.push(total);
        total = total
            .checked_add(*l)
            .ok_or_else(|| failed("values past 2 GiB in all"))?;
    }
    let mut all = vec![0u8; total as usize];
    {
        let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
        comm.all_gather_varcount_into(&framed[..], &mut part);
    }
    Ok(lens
        .iter()
        .zip(&displs)
        .map(|(l, d)| all[*d as usize + 1..(*d + *l) as usize].to_vec())
        .collect())
}

/// One (key length, key, value length, value) record of a barrier's exchange, and the
/// bytes after it.
fn record(b: &[u8]) -> Option<(String, Vec<u8>, &[u8])> {
    let (kl, b) = b.split_at_checked(8)?;
    let (k, b) =
        b.split_at_checked(usize::try_from(u64::from_le_bytes(kl.try_into().ok()?)).ok()?)?;
    let (vl, b) = b.split_at_checked(8)?;
    let (v, b) =
        b.split_at_checked(usize::try_from(u64::from_le_bytes(vl.try_into().ok()?)).ok()?)?;
    Some((String::from_utf8_lossy(k).into_owned(), v.to_vec(), b))
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn job_id(&self) -> &str {
        &self.job
    }
    fn node_id(&self) -> &str {
        &self.node
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.pending.push((key.to_string(), value.to_vec()));
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.store.get(key).cloned().ok_or_else(|| {
            failed(&format!(
                "no value for {key:?} (put, then barrier, then get)"
            ))
        })
    }
    fn barrier(&self) -> Result<(), TransportError> {
        let mut s = self.live()?;
        // The puts since the last barrier go to everyone: (key length, key, value
        // length, value) records.
        let mut mine = Vec::new();
        for (k, v) in s.pending.drain(..) {
            mine.extend_from_slice(&(k.len() as u64).to_le_bytes());
            mine.extend_from_slice(k.as_bytes());
            mine.extend_from_slice(&(v.len() as u64).to_le_bytes());
            mine.extend_from_slice(&v);
        }
        let all = allgather(&s.comm.0, &mine)?;
        for bytes in all {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let (key, value, tail) = record(rest).ok_or_else(|| failed("bad record"))?;
                s.store.insert(key, value);
                rest = tail;
            }
        }
        Ok(())
    }
    fn allgather(&self, _tag: &str, value: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        let s = self.live()?;
        allgather(&s.comm.0, value)
    }
}

#[cfg(test)]
mod tests {
    use super::record;

    #[test]
    fn records_parse_back_and_refuse_truncation() {
        let mut b = Vec::new();
        for (k, v) in [("addr-0", &b"xyz"[..]), ("", &b""[..])] {
            b.extend_from_slice(&(k.len() as u64).to_le_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&(v.len() as u64).to_le_bytes());
            b.extend_from_slice(v);
        }
        let (k, v, rest) = record(&b).unwrap();
        assert_eq!((k.as_str(), &v[..]), ("addr-0", &b"xyz"[..]));
        let (k, v, rest) = record(rest).unwrap();
        assert_eq!((k.as_str(), v.len(), rest.len()), ("", 0, 0));
        for cut in 1..b.len() - 16 {
            if let Some((_, _, rest)) = record(&b[..cut]) {
                assert!(record(rest).is_none() || rest.is_empty());
            }
        }
        assert!(record(&u64::MAX.to_le_bytes()).is_none());
    }
}
