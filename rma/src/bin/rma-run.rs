//! `rma-run -n N [--timeout SECS] [--hosts NS1,NS2,...] [--bind-to core|numa|none] [--]
//! program [args...]`: starts N local processes of an rma program and serves their
//! bootstrap (the embedded default launcher). `--bind-to` (default `core`: one core per
//! rank, when there are enough; see `rma::topology`) binds the ranks, unless rma-run is
//! itself bound already (by srun, mpirun or a parent rma-run): then they keep that.
//! `--hosts` spreads the ranks over simulated hosts: network namespaces made
//! beforehand (`ci/netns/up.sh`), each rank with its own host name; `uts:NAME` gives a
//! host name only, on this machine's network. `RMA_LOG` logs rma's tracing events on
//! standard error (`rma::logging`).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use lexopt::prelude::*;

const USAGE: &str = "usage: rma-run -n N [--timeout SECS] [--hosts NS1,NS2,...] \
     [--bind-to core|numa|none] [--] program [args...]";

/// What the command line asks for.
struct Args {
    ranks: u64,
    timeout: Option<Duration>,
    hosts: Vec<String>,
    bind: rma::topology::BindTo,
    program: OsString,
    args: Vec<String>,
}

/// Options up to the program's name; everything after it is the program's.
fn parse_args(mut p: lexopt::Parser) -> Result<Option<Args>, lexopt::Error> {
    let mut ranks = None;
    let mut timeout = None;
    let mut hosts = Vec::new();
    let mut bind = rma::topology::BindTo::default();
    while let Some(arg) = p.next()? {
        match arg {
            Short('n') => {
                // `-np N` too, as mpiexec spells it (lexopt reads it as `-n` `p`).
                let v = match p.optional_value() {
                    Some(v) if v == "p" => p.value()?,
                    Some(v) => v,
                    None => p.value()?,
                };
                ranks = Some(count(v, "-n", 1)?);
            }
            Long("timeout") => {
                timeout = Some(Duration::from_secs(count(p.value()?, "--timeout", 0)?))
            }
            Long("hosts") => {
                hosts = p
                    .value()?
                    .string()?
                    .split(',')
                    .map(str::to_string)
                    .collect();
            }
            Long("bind-to") => {
                let v = p.value()?.string()?;
                bind = v
                    .parse()
                    .map_err(|_| format!("--bind-to takes core, numa or none, not {v:?}"))?;
            }
            Short('h') | Long("help") => return Ok(None),
            Value(program) => {
                let args = p
                    .raw_args()?
                    .map(|a| {
                        a.into_string()
                            .map_err(|a| format!("argument {a:?} is not UTF-8").into())
                    })
                    .collect::<Result<_, lexopt::Error>>()?;
                let ranks = ranks.ok_or("-n N is required")?;
                return Ok(Some(Args {
                    ranks,
                    timeout,
                    hosts,
                    bind,
                    program,
                    args,
                }));
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Err("no program to run".into())
}

/// A count of at least `min` for `option`.
fn count(v: OsString, option: &str, min: u64) -> Result<u64, lexopt::Error> {
    let v = v.string()?;
    v.parse::<u64>()
        .ok()
        .filter(|n| *n >= min)
        .ok_or_else(|| format!("{option} needs an integer >= {min}, not {v:?}").into())
}

fn main() -> ExitCode {
    rma::logging::init_or_exit("rma-run");
    let args = match parse_args(lexopt::Parser::from_env()) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rma-run: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut launch = rma::launcher::Launch::new(args.ranks as usize, args.program, args.args);
    launch.timeout = args.timeout;
    launch.hosts = args.hosts;
    launch.bind = args.bind;
    match rma::launcher::launch(&launch) {
        Ok(out) => {
            if out.timed_out {
                eprintln!("rma-run: job killed after its timeout");
            }
            std::process::exit(out.code())
        }
        Err(e) => {
            eprintln!("rma-run: {e}");
            ExitCode::FAILURE
        }
    }
}
