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
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("rma-plot: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut out = PathBuf::from("rma-plot");
    let mut title: Option<String> = None;
    let mut inputs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "-o" | "--output" => out = args.next().ok_or("-o needs a file name")?.into(),
            "--title" => title = Some(args.next().ok_or("--title needs a text")?),
            _ if a.starts_with('-') && a != "-" => {
                return Err(format!("unknown option {a:?}\n{USAGE}"))
            }
            _ => inputs.push(a),
        }
    }
    if inputs.is_empty() {
        return Err(format!("no input\n{USAGE}"));
    }
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
