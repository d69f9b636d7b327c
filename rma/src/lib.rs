//! `rma`: one-sided communication (remote memory access) between the processes of an HPC job.
//!
//! This facade re-exports the engine of [`rma_core`]; bootstrap from launchers and the
//! backends join it in later work.
pub use rma_core::*;
