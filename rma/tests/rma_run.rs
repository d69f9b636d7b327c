//! The `rma-run` binary's command line and `RMA_LOG`: options up to the program's name,
//! everything after it the program's own; a bad command line or a bad `RMA_LOG` is a
//! usage error (exit 2), never a panic.

use std::process::{Command, Output};

const RMA_RUN: &str = env!("CARGO_BIN_EXE_rma-run");

fn rma_run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(RMA_RUN);
    cmd.args(args)
        .env_remove("RMA_LOG")
        .env_remove("RMA_RUN_SOCKET")
        .env_remove("PMI_FD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("rma-run starts")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Each rank's line of `sh -c 'echo $RMA_RUN_RANK "$@"' sh ARGS...`, sorted.
fn lines(o: &Output) -> Vec<String> {
    let mut l: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    l.sort();
    l
}

const ECHO: [&str; 3] = ["sh", "-c", "echo $RMA_RUN_RANK \"$@\""];

#[test]
fn every_spelling_of_the_ranks_and_the_program_keeps_its_arguments() {
    for n in [
        &["-n", "2"][..],
        &["-np", "2"],
        &["-n2"],
        &["-n=2"],
        &["--timeout", "30", "-n", "2", "--"],
    ] {
        let args: Vec<&str> = n
            .iter()
            .chain(&ECHO)
            .chain(&["sh", "-n", "3", "--hosts", "--"])
            .copied()
            .collect();
        let o = rma_run(&args, &[]);
        assert!(o.status.success(), "{args:?}: {o:?}");
        assert_eq!(
            lines(&o),
            ["0 -n 3 --hosts --", "1 -n 3 --hosts --"],
            "{args:?}"
        );
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn a_bad_command_line_is_a_usage_error() {
    for args in [
        &[][..],
        &["-n"],
        &["-n", "0", "true"],
        &["-n", "two", "true"],
        &["true"],
        &["-n", "2"],
        &["--timeout", "soon", "-n", "2", "true"],
        &["--bogus", "-n", "2", "true"],
        &["-q", "-n", "2", "true"],
    ] {
        let o = rma_run(args, &[]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("rma-run: ") && err.contains("usage: rma-run -n N"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("panicked") && o.stdout.is_empty(),
            "{args:?}: {o:?}"
        );
    }
    let o = rma_run(&["--help"], &[]);
    assert!(o.status.success(), "{o:?}");
    assert!(text(&o.stdout).starts_with("usage: rma-run -n N"));
}

#[test]
fn rma_log_is_read_and_passed_on() {
    // A filter: rma-run runs, and its ranks see the same RMA_LOG.
    let mut args = vec!["-n", "2", "sh", "-c", "echo $RMA_RUN_RANK $RMA_LOG"];
    let o = rma_run(&args, &[("RMA_LOG", "rma_core=trace,info")]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        lines(&o),
        ["0 rma_core=trace,info", "1 rma_core=trace,info"]
    );
    // Not a filter: a clear error before anything starts.
    args[4] = "echo started";
    for bad in ["rma_core=loud", "warn,rma=[", "rma_core=debug,=info"] {
        let o = rma_run(&args, &[("RMA_LOG", bad)]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.starts_with(&format!("rma-run: RMA_LOG={bad:?} is not a filter")),
            "{bad}: {err}"
        );
        assert!(
            !err.contains("panicked") && o.stdout.is_empty(),
            "{bad}: {o:?}"
        );
    }
    // Empty is unset.
    let o = rma_run(&args, &[("RMA_LOG", "")]);
    assert!(o.status.success() && o.stderr.is_empty(), "{o:?}");
}
