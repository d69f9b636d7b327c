//! `RMA_LOG`: what the binaries of this workspace (rma-run, the benchmarks, the
//! conformance suite) log of rma's `tracing` spans and events, on standard error.
//!
//! The value is a [`tracing_subscriber::EnvFilter`]: comma-separated directives
//! `target=level`, or a bare `level` for every other target, e.g.
//! `RMA_LOG=rma_core=debug,info` or `RMA_LOG=warn`. The closing of a span is logged with
//! its busy and idle time: a fence, start, complete or unlock_all is a `rma_sync` span
//! (debug level, fields `call` and `win`). Each line starts with the process, `[rank R
//! pid P]` (`[pid P]` where no launcher gave a rank), since the ranks of a job share one
//! terminal.
//!
//! Unset or empty, nothing is installed and nothing is logged: a program's output is what
//! it is without this module. The library itself never installs a subscriber: an
//! application that wants rma's events installs its own, or calls [`init_from_env`].
//!
//! Only with the `cli` feature of this crate (on by default), which brings in
//! `tracing-subscriber`.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FmtSpan, Full};
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The variable read.
pub const VAR: &str = "RMA_LOG";

/// Variables in which launchers give a process its rank (rma-run, PMI as Hydra and
/// Slurm's PMI-2 set it, PMIx, Slurm itself).
const RANK_VARS: [&str; 4] = ["RMA_RUN_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"];

/// Installs a subscriber that writes what `RMA_LOG` selects to standard error, if
/// `RMA_LOG` is set and not empty. `Ok(false)`: unset, nothing installed; `Ok(true)`:
/// installed. A value that is not a filter (`RMA_LOG=rma_core=loud`), or a process that
/// already has a global subscriber, is an error saying so.
pub fn init_from_env() -> Result<bool, String> {
    let Some(value) = std::env::var_os(VAR) else {
        return Ok(false);
    };
    let value = value
        .into_string()
        .map_err(|v| format!("{VAR}={v:?} is not UTF-8"))?;
    if value.trim().is_empty() {
        return Ok(false);
    }
    let filter = EnvFilter::builder().parse(&value).map_err(|e| {
        format!(
            "{VAR}={value:?} is not a filter ({e}); expected directives like \
             RMA_LOG=rma_core=debug,info (target=level, levels: error, warn, info, debug, \
             trace, off)"
        )
    })?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        // A closed stderr (`2>&1 | head`) loses the lines, as eprintln would, but must
        // not panic: tracing-subscriber would report it with eprint!, which does.
        .log_internal_errors(false)
        .with_span_events(FmtSpan::CLOSE)
        .event_format(Tagged {
            tag: process_tag(),
            inner: Format::default(),
        })
        .try_init()
        .map_err(|e| format!("{VAR}: cannot install the subscriber: {e}"))?;
    Ok(true)
}

/// [`init_from_env`] for a binary's `main`: on error, says so on standard error as
/// `program: ...` and exits with status 2 (a bad invocation, as a bad option is).
pub fn init_or_exit(program: &str) {
    if let Err(e) = init_from_env() {
        eprintln!("{program}: {e}");
        std::process::exit(2);
    }
}

/// `rank R pid P`, or `pid P`.
fn process_tag() -> String {
    let pid = std::process::id();
    match RANK_VARS.iter().find_map(|v| std::env::var(v).ok()) {
        Some(rank) => format!("rank {rank} pid {pid}"),
        None => format!("pid {pid}"),
    }
}

/// tracing-subscriber's full format, after the process's tag.
struct Tagged {
    tag: String,
    inner: Format<Full, SystemTime>,
}

impl<S, N> FormatEvent<S, N> for Tagged
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "[{}] ", self.tag)?;
        self.inner.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_or_explain() {
        for good in ["rma_core=debug,info", "warn", "rma_core=trace", "off"] {
            assert!(EnvFilter::builder().parse(good).is_ok(), "{good}");
        }
        for bad in ["rma_core=loud", "rma_core=debug,=", "[{"] {
            assert!(EnvFilter::builder().parse(bad).is_err(), "{bad}");
        }
    }
}
