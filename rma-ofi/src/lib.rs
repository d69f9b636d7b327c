//! libfabric transport (to come: see the rma-ofi issue).
