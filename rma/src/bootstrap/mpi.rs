//! A bootstrap over a communicator of an MPI library already running in this process
//! (cargo feature `mpi`, through the `mpi` crate): a [`Collectives`] over a duplicate of
//! the application's communicator (see [`collective`](super::collective)).

use std::mem::ManuallyDrop;

use mpi::datatype::PartitionMut;
use mpi::environment::Threading;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use rma_core::{Rank, TransportError};

use super::collective::{allgather_varcount, Collectives, OverCollectives};

/// A [`Bootstrap`](rma_core::Bootstrap) over an MPI communicator. Make it with
/// [`MpiBootstrap::new`] (or let [`World::from_mpi`](crate::World::from_mpi) do it).
pub type MpiBootstrap = OverCollectives<Duplicate>;

/// rma's own duplicate of the application's communicator: freed only while MPI runs
/// (an application may finalize MPI before it drops rma's World).
pub struct Duplicate(ManuallyDrop<SimpleCommunicator>, std::thread::ThreadId);

// SAFETY: the handle is used only under the bootstrap's mutex (one call at a time), and
// only from the thread that made it unless MPI was initialized with
// MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (`OverCollectives`'s `any_thread`):
// exactly the calls MPI's threading levels allow. Open MPI's handle is a pointer, hence
// no auto Send; the object it points to is MPI's, not tied to a thread.
unsafe impl Send for Duplicate {}

impl Drop for Duplicate {
    fn drop(&mut self) {
        // Freed by the thread that made it, while MPI runs: the last reference may go
        // with another thread (the progress agent), whose MPI call could run beside the
        // application's MPI_Finalize; MPI frees its communicators at finalize anyway.
        if std::thread::current().id() == self.1 && mpi_running() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.0) }
        }
    }
}

fn failed(what: &str) -> TransportError {
    TransportError::Failed(format!("MPI bootstrap: {what}"))
}

fn mpi_running() -> bool {
    mpi::environment::is_initialized() && !mpi::environment::is_finalized()
}

impl OverCollectives<Duplicate> {
    /// A bootstrap over a duplicate of `comm` (collective over `comm`, like every
    /// bootstrap's creation). MPI must be initialized and not finalized.
    pub fn new<C: Communicator>(comm: &C) -> Result<MpiBootstrap, TransportError> {
        if !mpi_running() {
            return Err(failed("MPI is not initialized (or already finalized)"));
        }
        let any_thread = matches!(
            mpi::environment::threading_support(),
            Threading::Serialized | Threading::Multiple
        );
        let dup = Duplicate(
            ManuallyDrop::new(comm.duplicate()),
            std::thread::current().id(),
        );
        OverCollectives::over(dup, any_thread)
    }
}

impl Collectives for Duplicate {
    fn rank(&self) -> Rank {
        self.0.rank() as Rank
    }
    fn size(&self) -> usize {
        self.0.size() as usize
    }
    fn usable(&self) -> Result<(), TransportError> {
        if mpi::environment::is_finalized() {
            return Err(failed("MPI was finalized while rma still needed it"));
        }
        Ok(())
    }
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        let comm = &*self.0;
        allgather_varcount(
            mine,
            |len| {
                let mut lens = vec![0i32; comm.size() as usize];
                comm.all_gather_into(&len, &mut lens[..]);
                Ok(lens)
            },
            |framed, lens, displs, all| {
                let mut part = PartitionMut::new(all, lens, displs);
                comm.all_gather_varcount_into(framed, &mut part);
                Ok(())
            },
        )
    }
}
