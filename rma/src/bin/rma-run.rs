//! `rma-run -n N [--timeout SECS] [--hosts NS1,NS2,...] [--] program [args...]`: starts N
//! local processes of an rma program and serves their bootstrap (the embedded default
//! launcher). `--hosts` spreads the ranks over simulated hosts: network namespaces made
//! beforehand (`ci/netns/up.sh`), each rank with its own host name; `uts:NAME` gives a
//! host name only, on this machine's network.

use std::time::Duration;

fn usage() -> ! {
    eprintln!("usage: rma-run -n N [--timeout SECS] [--hosts NS1,NS2,...] [--] program [args...]");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut ranks = None;
    let mut timeout = None;
    let mut hosts = Vec::new();
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-n" | "-np" => ranks = args.next().and_then(|v| v.parse::<usize>().ok()),
            "--timeout" => {
                timeout = args
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(Duration::from_secs)
            }
            "--hosts" => {
                hosts = args
                    .next()
                    .map(|v| v.split(',').map(str::to_string).collect())
                    .unwrap_or_default()
            }
            "--" => {
                rest.extend(args.by_ref());
                break;
            }
            "-h" | "--help" => usage(),
            _ => {
                rest.push(a);
                rest.extend(args.by_ref());
                break;
            }
        }
    }
    let Some(ranks) = ranks.filter(|n| *n > 0) else {
        usage()
    };
    if rest.is_empty() {
        usage();
    }
    let program = rest.remove(0);
    let mut launch = rma::launcher::Launch::new(ranks, program, rest);
    launch.timeout = timeout;
    launch.hosts = hosts;
    match rma::launcher::launch(&launch) {
        Ok(out) => {
            if out.timed_out {
                eprintln!("rma-run: job killed after its timeout");
            }
            std::process::exit(out.code())
        }
        Err(e) => {
            eprintln!("rma-run: {e}");
            std::process::exit(1)
        }
    }
}
