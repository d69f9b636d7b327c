//! Criterion benches of the engine (filled in below).
fn main() {}
