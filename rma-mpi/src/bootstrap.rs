//! rma's bootstrap over the MPI library librma-mpi interposes on, through its PMPI
//! calls: [`rma::bootstrap::collective`]'s bootstrap over a duplicate of
//! MPI_COMM_WORLD, so that rma never talks to the launcher MPI is talking to. Written
//! against the bindings of whichever `mpi.h` the build names, so it serves MPICH's ABI,
//! Open MPI's and the MPI-5 standard ABI alike (the `mpi` crate's C shim cannot be built
//! against the last: it needs MPI_Fint, which the standard ABI dropped).

use std::os::raw::{c_int, c_void};

use rma::bootstrap::collective::{allgather_varcount, Collectives, OverCollectives};
use rma::{Rank, TransportError};

use crate::sys::{self, MPI_Comm};

fn failed(what: &str) -> TransportError {
    TransportError::Failed(format!("MPI bootstrap: {what}"))
}

/// Fails unless an MPI call returned MPI_SUCCESS.
fn check(rc: c_int, call: &str) -> Result<(), TransportError> {
    // MPI_SUCCESS is 0 in every ABI (MPI-4.1 9.4).
    if rc == 0 {
        Ok(())
    } else {
        Err(failed(&format!("{call} returned error {rc}")))
    }
}

/// Whether MPI runs now: initialized and not finalized.
fn mpi_running() -> bool {
    let (mut initialized, mut finalized) = (0, 0);
    // SAFETY: both may be called at any time, before MPI_Init and after MPI_Finalize;
    // each writes one int.
    unsafe {
        sys::PMPI_Initialized(&mut initialized);
        sys::PMPI_Finalized(&mut finalized);
    }
    initialized != 0 && finalized == 0
}

/// rma's own duplicate of MPI_COMM_WORLD (or of a communicator with spawned members),
/// with its rank and size: freed only while MPI
/// runs (a bootstrap may outlive MPI_Finalize).
pub struct Duplicate {
    comm: MPI_Comm,
    rank: Rank,
    size: usize,
    /// The thread that made it: the only one that frees it (below).
    owner: std::thread::ThreadId,
}

// SAFETY: the handle is used only under the bootstrap's mutex (one call at a time), and
// only from the thread that made it unless MPI was initialized with
// MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (`OverCollectives`'s `any_thread`):
// exactly the calls MPI's threading levels allow. A handle is a value (an int, or a
// pointer to an object of MPI's), not tied to a thread.
unsafe impl Send for Duplicate {}

impl Drop for Duplicate {
    fn drop(&mut self) {
        // Freed by the thread that made it (MPI_Init's), while MPI runs. The last
        // reference may go with another thread (the progress agent leaving as the World
        // stops in MPI_Finalize): an MPI call from there could run beside MPI_Finalize
        // (MPICH crashed so in its test fetch_and_op_long_double), and MPI frees its
        // communicators at finalize anyway.
        if std::thread::current().id() == self.owner && mpi_running() {
            // SAFETY: our own communicator, freed once, here.
            unsafe { sys::PMPI_Comm_free(&mut self.comm) };
        }
    }
}

/// A bootstrap over a duplicate of MPI_COMM_WORLD (collective over it). MPI must be
/// initialized and not finalized.
pub fn over_comm_world() -> Result<OverCollectives<Duplicate>, TransportError> {
    // SAFETY: a predefined handle, returned by value.
    over_comm(unsafe { sys::rmampi_comm_world() })
}

/// A bootstrap over a duplicate of `comm`, an intracommunicator (collective over it):
/// for a World of processes that are not all in this MPI_COMM_WORLD (spawned ones, and
/// their parents, after MPI_Intercomm_merge). MPI must be initialized and not finalized.
pub fn over_comm(comm: MPI_Comm) -> Result<OverCollectives<Duplicate>, TransportError> {
    if !mpi_running() {
        return Err(failed("MPI is not initialized (or already finalized)"));
    }
    let mut dup = std::mem::MaybeUninit::<MPI_Comm>::uninit();
    // SAFETY: MPI runs; the out pointer is ours and written on success; MPI checks
    // `comm`.
    let rc = unsafe { sys::PMPI_Comm_dup(comm, dup.as_mut_ptr()) };
    check(rc, "MPI_Comm_dup")?;
    let mut comm = Duplicate {
        // SAFETY: written by the successful MPI_Comm_dup.
        comm: unsafe { dup.assume_init() },
        rank: 0,
        size: 0,
        owner: std::thread::current().id(),
    };
    let (mut rank, mut size) = (0, 0);
    // SAFETY: a live communicator; each call writes one int.
    unsafe {
        check(sys::PMPI_Comm_rank(comm.comm, &mut rank), "MPI_Comm_rank")?;
        check(sys::PMPI_Comm_size(comm.comm, &mut size), "MPI_Comm_size")?;
    }
    comm.rank = rank as Rank;
    comm.size = size as usize;
    // SAFETY: a query of MPI's thread level; MPI runs.
    let any_thread = unsafe { sys::rmampi_thread_level_serialized() } != 0;
    OverCollectives::over(comm, any_thread)
}

impl Collectives for Duplicate {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn usable(&self) -> Result<(), TransportError> {
        if mpi_running() {
            Ok(())
        } else {
            Err(failed("MPI was finalized while rma still needed it"))
        }
    }
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        let comm = self.comm;
        allgather_varcount(
            mine,
            |len| {
                let mut lens: Vec<c_int> = vec![0; self.size];
                // SAFETY: a live communicator of `size` members; one int sent, `size`
                // received into `lens`.
                let rc = unsafe {
                    sys::PMPI_Allgather(
                        (&len as *const c_int).cast::<c_void>(),
                        1,
                        sys::rmampi_int(),
                        lens.as_mut_ptr().cast::<c_void>(),
                        1,
                        sys::rmampi_int(),
                        comm,
                    )
                };
                check(rc, "MPI_Allgather")?;
                Ok(lens)
            },
            |framed, lens, displs, all| {
                let len = framed.len() as c_int;
                // SAFETY: `framed` holds `len` bytes; `all` holds the sum of `lens` at
                // `displs`, which the allgather of lengths made every member agree on.
                let rc = unsafe {
                    sys::PMPI_Allgatherv(
                        framed.as_ptr().cast::<c_void>(),
                        len,
                        sys::rmampi_byte(),
                        all.as_mut_ptr().cast::<c_void>(),
                        lens.as_ptr(),
                        displs.as_ptr(),
                        sys::rmampi_byte(),
                        comm,
                    )
                };
                check(rc, "MPI_Allgatherv")
            },
        )
    }
}
