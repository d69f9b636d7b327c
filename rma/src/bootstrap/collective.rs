//! A bootstrap over the collectives of a runtime already running in this process (an
//! MPI library's communicator): rank, size and every exchange go through its
//! allgather, so that rma never talks to the launcher that runtime is talking to (under
//! MPICH both would use the one PMI descriptor, and MPI aborted at its finalize).
//! [`MpiBootstrap`](super::MpiBootstrap) is one over the `mpi` crate; librma-mpi has
//! one over the PMPI calls of whichever MPI ABI it is built for.
//!
//! Put/get follow PMI's fence: values put since the last barrier are exchanged by it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;

use rma_core::{Bootstrap, Rank, TransportError};

/// What a runtime's communicator offers a bootstrap: its members, and an allgather of
/// bytes among them. Called one at a time (the bootstrap's mutex).
pub trait Collectives: Send {
    /// This process's rank in the communicator.
    fn rank(&self) -> Rank;
    /// The communicator's size.
    fn size(&self) -> usize;
    /// Every member's bytes, in rank order. Collective.
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError>;
    /// Whether the runtime can still be called (an MPI not finalized yet).
    fn usable(&self) -> Result<(), TransportError> {
        Ok(())
    }
}

/// A [`Bootstrap`] over a runtime's [`Collectives`].
pub struct OverCollectives<C> {
    rank: Rank,
    size: usize,
    job: String,
    node: String,
    /// Calls from other threads than the creator's need the runtime's leave (MPI's
    /// MPI_THREAD_SERIALIZED or more); the mutex serializes ours.
    owner: ThreadId,
    any_thread: bool,
    state: Mutex<State<C>>,
}

struct State<C> {
    comm: C,
    /// Put since the last barrier, exchanged by the next.
    pending: Vec<(String, Vec<u8>)>,
    store: HashMap<String, Vec<u8>>,
}

fn failed(what: &str) -> TransportError {
    TransportError::Failed(format!("bootstrap over collectives: {what}"))
}

impl<C: Collectives> OverCollectives<C> {
    /// A bootstrap over `comm` (collective over its members, like every bootstrap's
    /// creation: they agree on a job id). `any_thread`: whether the runtime takes calls
    /// from threads other than this one (one at a time).
    pub fn over(mut comm: C, any_thread: bool) -> Result<OverCollectives<C>, TransportError> {
        comm.usable()?;
        let (rank, size) = (comm.rank(), comm.size());
        // A job id every member shares: rank 0's pid and clock.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mine = format!("{:x}-{t:x}", std::process::id());
        let all = comm.allgather(mine.as_bytes())?;
        let first = all
            .first()
            .ok_or_else(|| failed("a communicator of no members"))?;
        Ok(OverCollectives {
            rank,
            size,
            job: format!("mpi-{}", String::from_utf8_lossy(first)),
            node: super::node_id(),
            owner: std::thread::current().id(),
            any_thread,
            state: Mutex::new(State {
                comm,
                pending: Vec::new(),
                store: HashMap::new(),
            }),
        })
    }

    fn live(&self) -> Result<std::sync::MutexGuard<'_, State<C>>, TransportError> {
        if !self.any_thread && std::thread::current().id() != self.owner {
            return Err(failed(
                "the runtime takes calls only from the thread that created the World \
                 (MPI below MPI_THREAD_SERIALIZED): make rma's collective calls there",
            ));
        }
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.comm.usable()?;
        Ok(s)
    }
}

/// An allgather of values of any length over MPI-style collectives: every member's
/// length first (`gather_lengths`: one `i32` in, every member's in rank order out), then
/// the bytes (`gather_bytes(mine, lengths, displacements, all)`: MPI_Allgatherv's
/// arguments). Each value goes with one byte ahead of it, so that no buffer handed to
/// MPI is empty: an empty Rust slice's address is 1, which Open MPI takes for
/// MPI_IN_PLACE (an MPI_ERR_ARG abort).
pub fn allgather_varcount(
    mine: &[u8],
    gather_lengths: impl FnOnce(i32) -> Result<Vec<i32>, TransportError>,
    gather_bytes: impl FnOnce(&[u8], &[i32], &[i32], &mut [u8]) -> Result<(), TransportError>,
) -> Result<Vec<Vec<u8>>, TransportError> {
    let mut framed = Vec::with_capacity(mine.len() + 1);
    framed.push(0u8);
    framed.extend_from_slice(mine);
    let len = i32::try_from(framed.len()).map_err(|_| failed("a value past 2 GiB"))?;
    let lens = gather_lengths(len)?;
    let mut displs = Vec::with_capacity(lens.len());
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
    gather_bytes(&framed, &lens, &displs, &mut all)?;
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

impl<C: Collectives> Bootstrap for OverCollectives<C> {
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
        for (k, v) in std::mem::take(&mut s.pending) {
            mine.extend_from_slice(&(k.len() as u64).to_le_bytes());
            mine.extend_from_slice(k.as_bytes());
            mine.extend_from_slice(&(v.len() as u64).to_le_bytes());
            mine.extend_from_slice(&v);
        }
        let all = s.comm.allgather(&mine)?;
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
        self.live()?.comm.allgather(value)
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
