//! Every threshold and pool size of the engine, set in code or from `RMA_*` variables.

use std::time::Duration;

/// Whether a process runs a progress agent (`RMA_ASYNC_PROGRESS`).
///
/// MPI's one-sided operations must complete while their target is busy elsewhere
/// (MPI-4.1 section 12.7, "progress"). Over shared memory a target does nothing for
/// them; over a network a target answers lock requests, applies active messages and
/// accepts connections, so without help a computing target stalls its peers' epochs.
/// The agent is a thread that sleeps on the transport's wait object (libfabric's
/// `FI_WAIT_FD`, a verbs completion channel) while no thread of the process is inside
/// the library, wakes for incoming traffic and runs a progress pass; while the
/// application itself waits inside the library it stays out of the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AsyncProgress {
    /// An agent where the transport says peers' operations need this process's
    /// progress ([`Transport::needs_target_progress`](crate::Transport::needs_target_progress)):
    /// the network backends and hybrids, not shared memory alone. The default.
    #[default]
    Auto,
    /// An agent whatever the transport (`RMA_ASYNC_PROGRESS=1`).
    On,
    /// No agent (`RMA_ASYNC_PROGRESS=0`): peers' epochs toward this process move only
    /// while it calls the library.
    Off,
}

/// Code the progress agent's thread runs before anything else (the facade pins the agent
/// to a core of its own with it: binding is a system call rma-core leaves to the
/// facade). Equal only to itself (a clone of the same hook).
#[derive(Clone)]
pub struct AgentStart(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for AgentStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentStart(..)")
    }
}

impl PartialEq for AgentStart {
    fn eq(&self, other: &AgentStart) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Tuning of the engine. [`Config::default`] gives the defaults; [`Config::from_env`] reads
/// `RMA_*` environment variables over them.
///
/// ```
/// let mut config = rma_core::Config::default();
/// config.op_pool_local = 2;
/// config.single_op = false;
/// assert!(config.slots > 0);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Initial size of each window's slot array (`RMA_SLOTS`; rounded up to a power of
    /// two). The array doubles whenever more targets hold an element at once than it
    /// has slots, so that finding a target's element stays one step.
    pub slots: usize,
    /// Operation elements in each window's local pool (`RMA_OP_POOL_LOCAL`).
    pub op_pool_local: usize,
    /// Operation elements in the global pool shared by all windows (`RMA_OP_POOL_GLOBAL`).
    pub op_pool_global: usize,
    /// Target elements in each window's local pool (`RMA_TARGET_POOL_LOCAL`).
    pub target_pool_local: usize,
    /// Target elements in the global pool (`RMA_TARGET_POOL_GLOBAL`).
    pub target_pool_global: usize,
    /// Queue up to this many active-message operations per target so that RMA_DONE or
    /// UNLOCK rides on the last one (`RMA_PIGGYBACK_THRESHOLD`).
    pub piggyback_threshold: usize,
    /// Whether ops are delayed for piggybacking at all (`RMA_PIGGYBACK`, 0 or 1).
    pub piggyback: bool,
    /// Largest payload in bytes for the single-short-op optimization
    /// (`RMA_SINGLE_OP_THRESHOLD`).
    pub single_op_threshold: usize,
    /// Lock + op + unlock in one message (`RMA_SINGLE_OP`, 0 or 1).
    pub single_op: bool,
    /// Keep target elements after their ops complete, until the epoch ends or resources
    /// run out (`RMA_LAZY_TARGET_FREE`, 0 or 1).
    pub lazy_target_free: bool,
    /// Largest queued payload copied into an op element; larger ops issue at once
    /// (`RMA_QUEUE_MAX_BYTES`).
    pub queue_max_bytes: usize,
    /// The progress agent: a thread that makes progress while no thread of the process
    /// is in the library, so that peers' epochs complete while this process computes
    /// (`RMA_ASYNC_PROGRESS`: `auto`, 1 or 0). See [`AsyncProgress`].
    pub async_progress: AsyncProgress,
    /// How often the agent polls a transport that has no wait object to sleep on
    /// (`RMA_ASYNC_PROGRESS_US`; with a wait object it sleeps until traffic arrives).
    pub async_progress_interval: Duration,
    /// Run first on the progress agent's thread, if set (no variable: the facade sets it
    /// from rma-run's `RMA_AGENT_CPUS`).
    pub agent_start: Option<AgentStart>,
    /// A blocking call that has not finished after this long (counted from its first
    /// wait, whatever arrived meanwhile) returns
    /// [`PeerError::Timeout`](crate::PeerError::Timeout) (`RMA_TIMEOUT_MS`, or `none` for
    /// no deadline at all; `None` here).
    pub timeout: Option<Duration>,
    /// Let the transport do ops natively where it can (`RMA_NATIVE`, 0 or 1); off, every op
    /// is an active message.
    pub native_ops: bool,
    /// The application calls into the library from one thread at a time (MPI's
    /// `MPI_THREAD_SERIALIZED` and below: it orders calls made from several threads
    /// itself). Then the count of ops that go straight to the backend
    /// ([`Stats::ops_direct`](crate::Stats::ops_direct)) is kept in one place, without
    /// finding the calling thread's share of it: in a shared library (librma-mpi) that
    /// is a call into the dynamic linker per op. Off by default; set where it holds, a
    /// count with calls from two threads at once may come out short (the counts only:
    /// the operations are unaffected).
    pub calls_one_at_a_time: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            slots: 64,
            op_pool_local: 256,
            op_pool_global: 4096,
            target_pool_local: 64,
            target_pool_global: 1024,
            piggyback_threshold: 16,
            piggyback: true,
            single_op_threshold: 256,
            single_op: true,
            lazy_target_free: true,
            queue_max_bytes: 4096,
            async_progress: AsyncProgress::Auto,
            async_progress_interval: Duration::from_micros(1000),
            agent_start: None,
            timeout: Some(Duration::from_secs(60)),
            native_ops: true,
            calls_one_at_a_time: false,
        }
    }
}

impl Config {
    /// The defaults, overridden by every `RMA_*` variable that is set; a value that does
    /// not parse, or lies outside what the field accepts, is
    /// [`UsageError::BadEnvironment`](crate::UsageError::BadEnvironment) naming the
    /// variable and what it accepts (never ignored, never a later panic).
    pub fn from_env() -> crate::Result<Self> {
        Self::default().with_env(|k| std::env::var(k).ok())
    }

    /// Overrides fields from a variable lookup (testable without touching the process
    /// environment); see [`from_env`](Self::from_env).
    ///
    /// ```
    /// use rma_core::{Config, UsageError};
    /// let c = Config::default().with_env(|k| (k == "RMA_SLOTS").then(|| "8".into()));
    /// assert_eq!(c.unwrap().slots, 8);
    /// let bad = Config::default().with_env(|k| (k == "RMA_PIGGYBACK").then(|| "maybe".into()));
    /// assert!(matches!(
    ///     bad.unwrap_err().usage(),
    ///     Some(UsageError::BadEnvironment { variable: "RMA_PIGGYBACK", .. })
    /// ));
    /// ```
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> crate::Result<Self> {
        let bad = |variable: &'static str, value: &str, expected: &'static str| {
            crate::UsageError::BadEnvironment {
                variable,
                value: value.chars().take(64).collect(),
                expected,
            }
        };
        // A whole number in `range`, or the error saying which.
        let num = |k: &'static str,
                   range: std::ops::RangeInclusive<usize>,
                   expected: &'static str,
                   field: &mut usize|
         -> crate::Result<()> {
            if let Some(v) = get(k) {
                match v.trim().parse::<usize>() {
                    Ok(n) if range.contains(&n) => *field = n,
                    _ => return Err(bad(k, &v, expected).into()),
                }
            }
            Ok(())
        };
        let flag = |k: &'static str, field: &mut bool| -> crate::Result<()> {
            if let Some(v) = get(k) {
                *field = match v.trim() {
                    "1" | "true" | "on" | "yes" => true,
                    "0" | "false" | "off" | "no" => false,
                    _ => return Err(bad(k, &v, "0 or 1 (or true/false, on/off, yes/no)").into()),
                };
            }
            Ok(())
        };
        // Bounds: what a process can hold (pools and slots are allocated up front).
        const MANY: usize = 1 << 20;
        const BYTES: usize = 1 << 30;
        let pool = "a whole number from 1 to 1048576";
        num("RMA_SLOTS", 1..=MANY, pool, &mut self.slots)?;
        num("RMA_OP_POOL_LOCAL", 1..=MANY, pool, &mut self.op_pool_local)?;
        num(
            "RMA_TARGET_POOL_LOCAL",
            1..=MANY,
            pool,
            &mut self.target_pool_local,
        )?;
        let global = "a whole number from 0 to 1048576";
        num(
            "RMA_OP_POOL_GLOBAL",
            0..=MANY,
            global,
            &mut self.op_pool_global,
        )?;
        num(
            "RMA_TARGET_POOL_GLOBAL",
            0..=MANY,
            global,
            &mut self.target_pool_global,
        )?;
        let count = "a whole number from 0 to 1048576";
        num(
            "RMA_PIGGYBACK_THRESHOLD",
            0..=MANY,
            count,
            &mut self.piggyback_threshold,
        )?;
        let bytes = "a number of bytes from 0 to 1073741824";
        num(
            "RMA_SINGLE_OP_THRESHOLD",
            0..=BYTES,
            bytes,
            &mut self.single_op_threshold,
        )?;
        num(
            "RMA_QUEUE_MAX_BYTES",
            0..=BYTES,
            bytes,
            &mut self.queue_max_bytes,
        )?;
        flag("RMA_PIGGYBACK", &mut self.piggyback)?;
        flag("RMA_SINGLE_OP", &mut self.single_op)?;
        flag("RMA_LAZY_TARGET_FREE", &mut self.lazy_target_free)?;
        if let Some(v) = get("RMA_ASYNC_PROGRESS") {
            self.async_progress = match v.trim() {
                "auto" => AsyncProgress::Auto,
                "1" | "true" | "on" | "yes" => AsyncProgress::On,
                "0" | "false" | "off" | "no" => AsyncProgress::Off,
                _ => {
                    let what = "auto, 1 or 0 (or true/false, on/off, yes/no)";
                    return Err(bad("RMA_ASYNC_PROGRESS", &v, what).into());
                }
            };
        }
        flag("RMA_NATIVE", &mut self.native_ops)?;
        let mut us = self.async_progress_interval.as_micros() as usize;
        num(
            "RMA_ASYNC_PROGRESS_US",
            1..=10_000_000,
            "microseconds from 1 to 10000000",
            &mut us,
        )?;
        self.async_progress_interval = Duration::from_micros(us as u64);
        // Deadlines are what turns a lost peer into an error: 0 does not switch them off
        // by accident; `none` does, on purpose.
        match get("RMA_TIMEOUT_MS") {
            Some(v) if v.trim() == "none" => self.timeout = None,
            Some(_) => {
                let mut ms = 0;
                num(
                    "RMA_TIMEOUT_MS",
                    1..=86_400_000,
                    "milliseconds from 1 to 86400000, or none (no deadline at all)",
                    &mut ms,
                )?;
                self.timeout = Some(Duration::from_millis(ms as u64));
            }
            None => {}
        }
        Ok(self)
    }
}

/// A backend's numeric `RMA_*` variables, checked once when it starts: each one that is
/// set must be a whole number in its range, or the start fails with
/// [`UsageError::BadEnvironment`](crate::UsageError::BadEnvironment) naming it (the
/// backend then reads them where it needs them, knowing they parse).
///
/// ```
/// std::env::set_var("RMA_DOC_EXAMPLE_DEPTH", "lots");
/// let r = rma_core::config::check_env_numbers(&[("RMA_DOC_EXAMPLE_DEPTH", 1, 64, "1 to 64")]);
/// assert!(r.is_err());
/// ```
pub fn check_env_numbers(vars: &[(&'static str, usize, usize, &'static str)]) -> crate::Result<()> {
    for &(variable, low, high, expected) in vars {
        if let Ok(v) = std::env::var(variable) {
            let ok = v
                .trim()
                .parse::<usize>()
                .is_ok_and(|n| (low..=high).contains(&n));
            if !ok {
                return Err(crate::UsageError::BadEnvironment {
                    variable,
                    value: v.chars().take(64).collect(),
                    expected,
                }
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, UsageError};

    fn with(k: &'static str, v: &str) -> crate::Result<Config> {
        let v = v.to_string();
        Config::default().with_env(move |key| (key == k).then(|| v.clone()))
    }

    #[test]
    fn env_overrides_and_refuses_garbage_naming_the_variable() {
        assert_eq!(with("RMA_SLOTS", "8").unwrap().slots, 8);
        assert!(!with("RMA_SINGLE_OP", "0").unwrap().single_op);
        assert_eq!(with("RMA_TIMEOUT_MS", "none").unwrap().timeout, None);
        assert_eq!(
            with("RMA_TIMEOUT_MS", "250").unwrap().timeout,
            Some(Duration::from_millis(250))
        );
        for (k, v) in [
            ("RMA_TIMEOUT_MS", "abc"),
            ("RMA_TIMEOUT_MS", "-5"),
            ("RMA_TIMEOUT_MS", "0"),
            ("RMA_PIGGYBACK", "maybe"),
            ("RMA_NATIVE", "2"),
            ("RMA_SLOTS", "0"),
            ("RMA_SLOTS", "99999999999999999999"),
            ("RMA_OP_POOL_LOCAL", "many"),
            ("RMA_OP_POOL_GLOBAL", "18446744073709551615"),
            ("RMA_QUEUE_MAX_BYTES", "1e9"),
            ("RMA_ASYNC_PROGRESS_US", "0"),
            ("RMA_ASYNC_PROGRESS", "sometimes"),
        ] {
            match with(k, v).map_err(Error::into_kind) {
                Err(crate::ErrorKind::Usage(UsageError::BadEnvironment {
                    variable,
                    value,
                    ..
                })) => {
                    assert_eq!(variable, k);
                    assert_eq!(value, v);
                }
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }
}
