//! OSU-style benchmarks for rma (binaries such as `osu_put_latency`, more come with the
//! benches issue) and criterion benches of the engine.
//!
//! The [`osu`] module holds what the OSU-style binaries share: option parsing in OSU's
//! spelling, the list of message sizes and iteration counts, and the output format
//! (OSU's text table, or one JSON object per line).

pub mod osu;
