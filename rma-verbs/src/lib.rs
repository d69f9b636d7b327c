//! InfiniBand verbs transport over rdma-core (to come: see the rma-verbs issue).
