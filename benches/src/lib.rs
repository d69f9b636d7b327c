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

/// The start of the small binaries' `main` (`comm`, `halo`, `progress_agent`,
/// `rma_init`): `RMA_LOG` ([`rma::logging`]), then a command line of `-h`/`--help` or at
/// most one argument, a count of iterations when `takes_count`. Returns the count if one
/// was given; prints `usage` and exits 0 for `--help`, exits 2 with `usage` on a bad
/// command line.
pub fn start(program: &str, usage: &str, takes_count: bool) -> Option<u32> {
    rma::logging::init_or_exit(program);
    match parse_count_line(lexopt::Parser::from_env(), takes_count) {
        Ok(CountLine::Run(count)) => count,
        Ok(CountLine::Help) => {
            println!("{usage}");
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("{program}: {e}\n{usage}");
            std::process::exit(2)
        }
    }
}

/// What a small binary's command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum CountLine {
    Help,
    Run(Option<u32>),
}

fn parse_count_line(mut p: lexopt::Parser, takes_count: bool) -> Result<CountLine, lexopt::Error> {
    use lexopt::prelude::*;
    let mut count = None;
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(CountLine::Help),
            Value(v) if takes_count && count.is_none() => {
                let v = v.string()?;
                count = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("{v:?} is not a number of iterations"))?,
                );
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(CountLine::Run(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str], takes_count: bool) -> Result<CountLine, String> {
        parse_count_line(lexopt::Parser::from_args(args), takes_count).map_err(|e| e.to_string())
    }

    #[test]
    fn small_binaries_take_a_count_or_help() {
        assert_eq!(line(&[], true), Ok(CountLine::Run(None)));
        assert_eq!(line(&["200"], true), Ok(CountLine::Run(Some(200))));
        assert_eq!(line(&["--help"], false), Ok(CountLine::Help));
        for bad in [&["x"][..], &["1", "2"], &["-1"], &["--iters=3"]] {
            assert!(line(bad, true).is_err(), "{bad:?}");
        }
        assert!(line(&["200"], false).is_err());
    }
}
