//! OSU-style benchmarks for rma (binaries come with the benches issue) and criterion benches of the engine.
