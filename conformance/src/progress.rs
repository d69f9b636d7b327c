//! Progress without the target (issue #16; MPI-4.1 section 12.7, seed 003): an origin's
//! passive-target and PSCW epochs complete while the target is busy outside the
//! library, with the defaults (the progress agent where the backend needs one).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rma::{AccOp, Assert, LockType, Rank, Result, World};

use crate::check;

/// Where the target spends its time instead of calling the library.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Elsewhere {
    /// A busy loop with no library call.
    Compute,
    /// Asleep (`std::thread::sleep`).
    Sleep,
    /// Blocked in a read of a named pipe that the origin writes once its epochs are
    /// over (seed 003's "blocking receive by other means").
    Pipe,
}

/// `target_elsewhere compute|sleep|pipe` on 2 or more ranks: rank 1 posts an exposure
/// epoch to rank 0 on one window, then goes elsewhere (`RMA_ELSEWHERE_MS`, default
/// 3000). Rank 0 meanwhile runs, on another window, lock + put + unlock and lock +
/// fetch_and_op + unlock, and on the posted window start + put + complete: all must
/// end within half the target's absence (with the pipe, at all: the target comes back
/// only when the origin is done). Nothing crosses the network between the two ranks
/// before (they meet through the launcher only), so the first message of a new
/// connection is among them. Exact contents checked at the end.
pub fn target_elsewhere(world: &World, how: &str) -> Result<()> {
    let how = match how {
        "compute" => Elsewhere::Compute,
        "sleep" => Elsewhere::Sleep,
        "pipe" => Elsewhere::Pipe,
        other => {
            return Err(rma::TransportError::Failed(format!(
                "target_elsewhere: {other:?} is not compute, sleep or pipe"
            ))
            .into())
        }
    };
    let away = Duration::from_millis(
        std::env::var("RMA_ELSEWHERE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000),
    );
    let me = world.rank();
    let passive = world.allocate::<u64>(2)?;
    let active = world.allocate::<u64>(1)?;
    let fifo =
        std::env::temp_dir().join(format!("rma-{}-elsewhere.fifo", world.bootstrap().job_id()));
    if me == 1 && how == Elsewhere::Pipe {
        make_fifo(&fifo)?;
    }
    // Meet through the launcher only: no message between the ranks before the epochs.
    world.bootstrap().barrier()?;
    let (origin, target): (Rank, Rank) = (0, 1);
    if me == target {
        active.post(&[origin], Assert::NONE)?;
        match how {
            Elsewhere::Compute => {
                let start = Instant::now();
                let mut x = 0u64;
                while start.elapsed() < away {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                std::hint::black_box(x);
            }
            Elsewhere::Sleep => std::thread::sleep(away),
            Elsewhere::Pipe => {
                // Blocks until the origin, done with its epochs, writes.
                let mut byte = [0u8; 1];
                std::fs::File::open(&fifo)
                    .and_then(|mut f| f.read_exact(&mut byte))
                    .map_err(|e| io_failed("reading the pipe", e))?;
                let _ = std::fs::remove_file(&fifo);
            }
        }
        active.wait()?;
        check(
            active.local_to_vec() == vec![22],
            "the put of the PSCW epoch landed",
        )?;
    } else if me == origin {
        let start = Instant::now();
        passive.lock(LockType::Exclusive, target, Assert::NONE)?;
        passive.put(&[11], target, 0)?;
        passive.unlock(target)?;
        let locked_put = start.elapsed();
        passive.lock(LockType::Shared, target, Assert::NONE)?;
        let old = passive.fetch_and_op(5, AccOp::Sum, target, 1)?;
        passive.unlock(target)?;
        check(old.wait()? == 0, "fetch_and_op fetched the initial 0")?;
        active.start(&[target], Assert::NONE)?;
        active.put(&[22], target, 0)?;
        active.complete()?;
        let took = start.elapsed();
        say!(
            "rank {me}: target {how:?} for {away:?}: lock+put+unlock {locked_put:?}, \
             all three epochs {took:?}"
        );
        if how == Elsewhere::Pipe {
            // The "send" the target's blocking receive waits for.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .and_then(|mut f| f.write_all(&[1]))
                .map_err(|e| io_failed("writing the pipe", e))?;
        } else {
            check(
                took < away / 2,
                &format!("epochs toward a target {how:?} took {took:?} of its {away:?}"),
            )?;
        }
    }
    world.barrier()?;
    if me == target {
        check(
            passive.local_to_vec() == vec![11, 5],
            "the passive-target put and fetch_and_op landed",
        )?;
    }
    passive.free()?;
    active.free()?;
    Ok(())
}

fn make_fifo(path: &std::path::Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| rma::TransportError::Failed("a fifo path with a NUL".into()))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io_failed("mkfifo", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn io_failed(what: &str, e: std::io::Error) -> rma::Error {
    rma::TransportError::Failed(format!("{what}: {e}")).into()
}
