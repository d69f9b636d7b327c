//! OSU-style benchmarks for rma and criterion benches of the engine.
//!
//! The binaries mirror OSU 7.4's one-sided suite: `osu_put_latency`, `osu_get_latency`,
//! `osu_acc_latency`, `osu_get_acc_latency`, `osu_fop_latency`, `osu_cas_latency`,
//! `osu_put_bw`, `osu_get_bw` and `osu_put_bibw`, each between two ranks (rank 0 origin,
//! rank 1 target) of the shared-memory transport (two processes, `rma-run -n 2`) or of
//! the simulated transport (two threads), with OSU's options, defaults and output.
//! `rma-plot` draws their `--json` output.
//!
//! - [`osu`]: which benchmark each binary is, option parsing in OSU's spelling, message
//!   sizes and iteration counts, and the output format (OSU's table, or JSON lines);
//! - [`run`]: a binary's `main`: backends, self-launch, errors;
//! - [`kernels`]: the timed loops;
//! - [`reference`](mod@reference): `--reference`, the same patterns by hand on a segment both ranks map
//!   ([`shm`]); over libfabric (`-b ofi`, feature `ofi`), `ofi_reference`: bare libfabric
//!   calls on the same provider; over verbs (`-b verbs`, feature `verbs`),
//!   `verbs_reference`: raw verbs on the same device;
//! - [`plot`]: `rma-plot`'s reading of JSON lines and drawing (SVG and PNG).

pub mod kernels;
#[cfg(feature = "ofi")]
pub mod ofi_reference;
pub mod osu;
pub mod plot;
pub mod reference;
pub mod run;
pub mod shm;
#[cfg(feature = "verbs")]
pub mod verbs_reference;
