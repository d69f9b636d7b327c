//! librma-mpi: MPI's one-sided interface as a C library over rma, for unmodified MPI
//! programs in C, C++ and Fortran (`mpif.h`, `use mpi`, `use mpi_f08`: `fortran`).
//!
//! The library exports MPI-4.1's window calls (creation of every flavor, attach and
//! detach, shared_query, free), the communication calls (MPI_Put, MPI_Get,
//! MPI_Accumulate, MPI_Get_accumulate, MPI_Fetch_and_op, MPI_Compare_and_swap and the
//! request forms, with MPI-4's large-count `_c` forms where the MPI header has them),
//! every synchronization call, MPI_Win_get_group, attributes, names, info and error
//! handlers. Linked before libmpi (`-lrma_mpi -lmpi`) or preloaded
//! (`LD_PRELOAD=librma_mpi.so mpiexec ...`), these take the place of MPI's own; the
//! rest of MPI (MPI_Init, point-to-point, communicators, datatypes, collectives) stays
//! MPI's, reached through the profiling interface (PMPI_*), as Casper does.
//!
//! How the parts meet:
//! - At MPI_Init (intercepted) rma's World starts over MPI_COMM_WORLD through a
//!   bootstrap over MPI's own collectives on a duplicate communicator, called through
//!   PMPI (`bootstrap`); MPI_Finalize stops it first. MPI programs wait in MPI's own
//!   calls, where rma cannot serve its peers: the progress agent runs wherever peers need
//!   it (networks; on shared memory from the first window over the application's memory
//!   or dynamic window, whose operations are active messages), unless
//!   `RMA_ASYNC_PROGRESS=0`. MPI_Barrier (intercepted) makes rma's progress itself where
//!   the World reaches a rank over the network: the MPI's own MPI_Ibarrier, tested in
//!   turn with a progress pass.
//! - A window over a communicator is an rma window of bytes over an rma communicator of
//!   the same members in the same order (`window`); displacement units are applied at
//!   the origin, bounds checked by the target.
//! - Datatypes are decoded once with MPI_Type_get_envelope/contents and cached
//!   (`datatype`); an operation is one rma operation per contiguous run at the target,
//!   in the element type of its basic elements for accumulates (`ops`).
//! - Results land in the application's buffers when rma completes them (`request`):
//!   at once on shared memory, else at the synchronization that completes them or at
//!   MPI_Wait of the request.
//! - Errors are MPI error classes, through the window's error handler (`error`).
//!
//! The ABI (MPICH's int handles, Open MPI's pointers, or the MPI-5 standard ABI of
//! `mpi_abi.h` with MPICH 5's `mpicc_abi`) is fixed at build time by the MPI compiler
//! wrapper `MPICC` names: build.rs binds its `mpi.h` with its flags, and `csrc/abi.c`,
//! compiled by it, holds what differs in C.

// MPI_Aint is `long` in MPICH's header and `ptrdiff_t` in Open MPI's (i64 or isize here),
// MPI_Count `long` or `long long`: a cast is a no-op for one ABI and not the other.
#![allow(clippy::unnecessary_cast)]

/// `eprintln!` in one `write(2)`: the ranks of a job share the launcher's stderr, and the
/// standard macro writes each piece of its format separately (stderr is unbuffered), so
/// two ranks' messages interleaved mid-line, and a rank killed by another's MPI_Abort
/// between its pieces lost its message. A line under PIPE_BUF bytes written at once
/// reaches a pipe whole.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

mod api;
mod bootstrap;
mod datatype;
mod error;
// The standard ABI has no Fortran layer of the MPI's to meet (MPI-5 leaves Fortran to
// libraries over the C ABI, which reach librma-mpi through the C names).
#[cfg(any(open_mpi, mpich_abi))]
mod fortran;
mod handle_table;
mod ops;
mod request;
mod sync;
mod sys;
mod window;
