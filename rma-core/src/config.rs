//! Every threshold and pool size of the engine, set in code or from `RMA_*` variables.

use std::time::Duration;

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
    /// Size of each window's slot array (`RMA_SLOTS`; rounded up to a power of two).
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
    /// Run a thread that makes progress in the background (`RMA_ASYNC_PROGRESS`, 0 or 1).
    pub async_progress: bool,
    /// Interval of the background progress thread (`RMA_ASYNC_PROGRESS_US`).
    pub async_progress_interval: Duration,
    /// A blocking call that sees no completion for this long returns
    /// [`PeerError::Timeout`](crate::PeerError::Timeout) (`RMA_TIMEOUT_MS`; 0 = never).
    pub timeout: Option<Duration>,
    /// Let the transport do ops natively where it can (`RMA_NATIVE`, 0 or 1); off, every op
    /// is an active message.
    pub native_ops: bool,
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
            async_progress: false,
            async_progress_interval: Duration::from_micros(50),
            timeout: Some(Duration::from_secs(60)),
            native_ops: true,
        }
    }
}

impl Config {
    /// The defaults, overridden by any `RMA_*` variable that is set and parses.
    pub fn from_env() -> Self {
        Self::default().with_env(|k| std::env::var(k).ok())
    }

    /// Overrides fields from a variable lookup (testable without touching the process
    /// environment). A value that does not parse leaves the field as it was.
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> Self {
        fn num(get: &impl Fn(&str) -> Option<String>, k: &str, field: &mut usize) {
            if let Some(v) = get(k).and_then(|v| v.trim().parse().ok()) {
                *field = v;
            }
        }
        fn flag(get: &impl Fn(&str) -> Option<String>, k: &str, field: &mut bool) {
            match get(k).as_deref().map(str::trim) {
                Some("1" | "true" | "on" | "yes") => *field = true,
                Some("0" | "false" | "off" | "no") => *field = false,
                _ => {}
            }
        }
        num(&get, "RMA_SLOTS", &mut self.slots);
        num(&get, "RMA_OP_POOL_LOCAL", &mut self.op_pool_local);
        num(&get, "RMA_OP_POOL_GLOBAL", &mut self.op_pool_global);
        num(&get, "RMA_TARGET_POOL_LOCAL", &mut self.target_pool_local);
        num(&get, "RMA_TARGET_POOL_GLOBAL", &mut self.target_pool_global);
        num(
            &get,
            "RMA_PIGGYBACK_THRESHOLD",
            &mut self.piggyback_threshold,
        );
        num(
            &get,
            "RMA_SINGLE_OP_THRESHOLD",
            &mut self.single_op_threshold,
        );
        num(&get, "RMA_QUEUE_MAX_BYTES", &mut self.queue_max_bytes);
        flag(&get, "RMA_PIGGYBACK", &mut self.piggyback);
        flag(&get, "RMA_SINGLE_OP", &mut self.single_op);
        flag(&get, "RMA_LAZY_TARGET_FREE", &mut self.lazy_target_free);
        flag(&get, "RMA_ASYNC_PROGRESS", &mut self.async_progress);
        flag(&get, "RMA_NATIVE", &mut self.native_ops);
        let mut us = self.async_progress_interval.as_micros() as usize;
        num(&get, "RMA_ASYNC_PROGRESS_US", &mut us);
        self.async_progress_interval = Duration::from_micros(us as u64);
        let mut ms = self.timeout.map_or(0, |t| t.as_millis() as usize);
        num(&get, "RMA_TIMEOUT_MS", &mut ms);
        self.timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
        // A pool or slot array of size zero could never hold an element.
        self.slots = self.slots.max(1);
        self.op_pool_local = self.op_pool_local.max(1);
        self.target_pool_local = self.target_pool_local.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_and_ignores_garbage() {
        let c = Config::default().with_env(|k| match k {
            "RMA_SLOTS" => Some("8".into()),
            "RMA_SINGLE_OP" => Some("0".into()),
            "RMA_OP_POOL_LOCAL" => Some("many".into()),
            "RMA_TIMEOUT_MS" => Some("0".into()),
            _ => None,
        });
        assert_eq!(c.slots, 8);
        assert!(!c.single_op);
        assert_eq!(c.op_pool_local, Config::default().op_pool_local);
        assert_eq!(c.timeout, None);
    }
}
