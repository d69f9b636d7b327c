//! `with_mpi [ORDER]`: an application that uses MPI (through the `mpi` crate) and rma in
//! one process. rma's World comes from MPI's communicator (`World::from_mpi`, or
//! `World::init` finding MPI initialized with `RMA_WITH_MPI_INIT=1`); both libraries
//! compute the same sums; windows over the World and over a split move exact data. ORDER
//! `rma-first` drops rma's World before MPI_Finalize, `mpi-first` after. `with_mpi which`
//! prints the MPI library's version (before any init) for the test to pick the launcher.

use mpi::collective::SystemOperation;
use mpi::traits::{Communicator, CommunicatorCollectives};
use rma::{AccOp, Assert, Result, World};

fn main() -> std::process::ExitCode {
    rma::logging::init_or_exit("with_mpi");
    let order = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "rma-first".into());
    if order == "which" {
        println!(
            "{}",
            mpi::environment::library_version().unwrap_or_default()
        );
        return std::process::ExitCode::SUCCESS;
    }
    let Some(universe) = mpi::initialize() else {
        eprintln!("with_mpi: MPI did not initialize");
        return std::process::ExitCode::FAILURE;
    };
    let comm = universe.world();
    let world = if std::env::var_os("RMA_WITH_MPI_INIT").is_some() {
        World::init()
    } else {
        World::from_mpi(&comm)
    };
    let outcome = world.and_then(|world| {
        work(&world, &comm)?;
        Ok(world)
    });
    let rank = comm.rank();
    let world = match outcome {
        Ok(w) => w,
        Err(e) => {
            eprintln!("with_mpi: rank {rank}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if order == "mpi-first" {
        drop(comm);
        drop(universe); // MPI_Finalize, then rma's World goes
        drop(world);
    } else {
        drop(world);
        drop(comm);
        drop(universe);
    }
    println!("with_mpi: rank {rank} done ({order})");
    std::process::ExitCode::SUCCESS
}

fn work(world: &World, comm: &mpi::topology::SimpleCommunicator) -> Result<()> {
    let fail = |what: String| rma::Error::from(rma::TransportError::Failed(what));
    let (me, n) = (world.rank(), world.size());
    if me as i32 != comm.rank() || n as i32 != comm.size() {
        return Err(fail(format!(
            "rma's rank {me} of {n}, MPI's {} of {}",
            comm.rank(),
            comm.size()
        )));
    }
    // The same sum from both libraries.
    let mut mpi_sum = 0u64;
    comm.all_reduce_into(&(u64::from(me) + 1), &mut mpi_sum, SystemOperation::sum());
    let rma_sum = world.comm().allreduce(&[u64::from(me) + 1], AccOp::Sum)?;
    if rma_sum[0] != mpi_sum || mpi_sum != u64::from(n * (n + 1) / 2) {
        return Err(fail(format!("sums: rma {rma_sum:?}, MPI {mpi_sum}")));
    }
    // A window over the World: each puts its rank to its right neighbour; MPI's barrier
    // between the epochs' ends and the reads is not needed (unlock_all completes at the
    // target, the fence makes it visible), but MPI calls interleave with rma's.
    let win = world.allocate::<u64>(2)?;
    win.fence(Assert::NOPRECEDE)?;
    win.put(&[u64::from(me) + 100], (me + 1) % n, 0)?;
    comm.barrier();
    win.fence(Assert::NOSUCCEED)?;
    let left = (me + n - 1) % n;
    if win.local_to_vec()[0] != u64::from(left) + 100 {
        return Err(fail(format!("window holds {:?}", win.local_to_vec())));
    }
    win.free()?;
    // A window over rma's halves of the World.
    let w = world.comm();
    let half = w.split(Some(me % 2), 0)?.expect("a color");
    let hw = half.allocate::<u32>(1)?;
    hw.lock_all(Assert::NONE)?;
    for t in 0..half.size() {
        hw.accumulate(&[1], AccOp::Sum, t, 0)?;
    }
    hw.unlock_all()?;
    half.barrier()?;
    if hw.local_to_vec()[0] != half.size() {
        return Err(fail(format!("half window holds {:?}", hw.local_to_vec())));
    }
    hw.free()?;
    Ok(())
}
