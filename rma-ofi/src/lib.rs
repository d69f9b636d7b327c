//! libfabric transport (in progress).
#![allow(missing_docs)]
pub mod fabric;
pub mod sys;
