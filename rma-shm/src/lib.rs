//! Shared-memory transport for ranks on one node (to come: see the rma-shm issue).
