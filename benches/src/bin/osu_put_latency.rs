//! `osu_put_latency`: OSU 7.4's MPI_Put latency test on rma, between two ranks (rank 0
//! origin, rank 1 target). Run `rma-run -n 2 osu_put_latency`, or start it by hand and it
//! starts its two processes itself; `--help` lists the options. See `rma_benches::kernels`
//! for the timed loops and `rma_benches::reference` for `--reference`.

fn main() -> std::process::ExitCode {
    rma_benches::run::main(&rma_benches::osu::PUT_LATENCY)
}
