//! `rma-plot [-o OUT] [--title TITLE] RUN.json...`: draws the `--json` output of one or
//! more runs of the OSU-style binaries, latency or bandwidth against message size,
//! log-log, one line per run (dashed: its reference), into `OUT.svg` and `OUT.png`
//! (default `OUT`: `rma-plot`). `-` reads standard input.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rma_benches::plot;

const USAGE: &str = "usage: rma-plot [-o OUT] [--title TITLE] RUN.json... (- for stdin)\n\
    Draws the --json output of the osu_* binaries: one line per run, log-log axes,\n\
    into OUT.svg and OUT.png (default OUT: rma-plot).";

fn main() -> ExitCode {
    let args = match parse_args(lexopt::Parser::from_env()) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("rma-plot: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("rma-plot: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// What the command line asks for.
struct Args {
    out: PathBuf,
    title: Option<String>,
    inputs: Vec<String>,
}

/// The arguments; `None` for `--help`.
fn parse_args(mut p: lexopt::Parser) -> Result<Option<Args>, lexopt::Error> {
    use lexopt::prelude::*;
    let mut args = Args {
        out: PathBuf::from("rma-plot"),
        title: None,
        inputs: Vec::new(),
    };
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Short('o') | Long("output") => args.out = p.value()?.into(),
            Long("title") => args.title = Some(p.value()?.string()?),
            Value(input) => args.inputs.push(input.string()?),
            _ => return Err(arg.unexpected()),
        }
    }
    if args.inputs.is_empty() {
        return Err("no input".into());
    }
    Ok(Some(args))
}

fn run(Args { out, title, inputs }: Args) -> Result<(), String> {
    let mut files = Vec::with_capacity(inputs.len());
    for name in inputs {
        let contents = if name == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("reading stdin: {e}"))?;
            s
        } else {
            std::fs::read_to_string(&name).map_err(|e| format!("{name}: {e}"))?
        };
        files.push((name, contents));
    }
    let runs = plot::read_runs(&files)?;
    let title = title.unwrap_or_else(|| {
        let what = runs[0].metric.heading();
        format!("rma, OSU-style one-sided benchmarks: {what}")
    });
    for p in plot::draw(&runs, &title, &out)? {
        println!("{}", p.display());
    }
    Ok(())
}
