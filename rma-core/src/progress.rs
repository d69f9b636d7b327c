//! The progress agent (MPI-4.1 section 12.7, seed 003): a thread that makes RMA progress
//! while no thread of the process is inside the library, so that peers' passive-target
//! and PSCW epochs toward this process complete while it computes or blocks elsewhere.
//!
//! Hand-off without a lock on the fast path: every wait, flush and synchronization call
//! of the application's threads bumps [`Activity`] (one relaxed store, and one per 64
//! polls of a long wait). The agent looks at the count; while it moves, the application
//! polls by itself and the agent only naps ([`BACK_OFF`], longer while that lasts).
//! Once the count stands still for a whole nap, the agent sleeps on the transport's
//! wait object ([`Transport::wait_for_traffic`](crate::Transport::wait_for_traffic))
//! and runs a progress pass for what wakes it. Progress passes are mutually exclusive
//! already (one poller at a time), so an agent and an application meeting in one take
//! turns.
//!
//! Cost when idle: one wake-up per [`IDLE_SLEEP`] (the transport's keepalives and
//! liveness checks ride on it), or, where the transport has no wait object, one
//! progress pass per `async_progress_interval`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::engine::EngineShared;
use crate::transport::Wake;

/// How long the agent naps at first while the application is inside the library; the
/// nap doubles while the application stays there, up to [`LONGEST_BACK_OFF`] (each nap
/// is a wake-up that takes a core from a polling thread for a moment: 1 ms naps cost a
/// 2-core machine's ofi put + flush 6% of its latency, measured).
pub(crate) const BACK_OFF: Duration = Duration::from_millis(1);
/// The longest nap: once the application leaves the library for good (to compute),
/// the agent takes over within this.
pub(crate) const LONGEST_BACK_OFF: Duration = Duration::from_millis(16);
/// The agent's longest sleep on a wait object with no traffic.
pub(crate) const IDLE_SLEEP: Duration = Duration::from_millis(50);

/// How many calls that end at once (no wait, no progress pass of their own) may follow
/// each other before one makes a pass ([`Activity::bump_quick`]).
const POLL_EVERY_QUICK: u64 = 64;

/// A count the application's threads bump while they wait inside the library.
#[derive(Debug, Default)]
pub(crate) struct Activity(AtomicU64);

impl Activity {
    /// An application thread is inside the library (waiting, flushing, synchronizing).
    ///
    /// A plain load and store, not a read-modify-write: the agent only asks whether the
    /// count moved, which two threads bumping at once still make it do (a lost
    /// increment changes nothing the agent sees but one nap's timing), and a locked add
    /// on every op and flush cost the shared-memory fast path about 20 cycles each.
    #[inline]
    pub(crate) fn bump(&self) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }

    /// [`bump`](Self::bump) by a call that ends at once, without a progress pass: true
    /// once in [`POLL_EVERY_QUICK`] such calls, when the caller makes a pass after all.
    /// A thread that spins on calls with nothing to wait for (a flag loop around a
    /// flush with nothing outstanding) keeps the agent away, so it must poll itself now
    /// and then, or its peers' requests are never answered (seen: two ranks' flag loops
    /// on libfabric tcp, each flush_all waiting for the other's ack forever).
    #[inline]
    pub(crate) fn bump_quick(&self) -> bool {
        let n = self.0.load(Ordering::Relaxed).wrapping_add(1);
        self.0.store(n, Ordering::Relaxed);
        n.is_multiple_of(POLL_EVERY_QUICK)
    }
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Starts the agent for `engine` (held weakly: the agent ends when the engine does, or
/// when its `stop` flag is set by a departure).
pub(crate) fn spawn(engine: &Arc<EngineShared>) -> std::io::Result<()> {
    let weak = Arc::downgrade(engine);
    let poll_every = engine.config.async_progress_interval;
    let start = engine.config.agent_start.clone();
    std::thread::Builder::new()
        .name("rma-progress".into())
        .spawn(move || {
            if let Some(start) = start {
                (start.0)();
            }
            run(weak, poll_every)
        })
        .map(drop)
}

fn run(weak: Weak<EngineShared>, poll_every: Duration) {
    let mut seen = None;
    let mut nap = BACK_OFF;
    loop {
        let Some(e) = weak.upgrade() else { return };
        if e.stop_requested() {
            return;
        }
        let now = e.activity.now();
        if seen != Some(now) {
            // The application polls (or just did): it makes progress by itself.
            let again = seen.is_some();
            seen = Some(now);
            drop(e);
            std::thread::sleep(nap);
            nap = if again {
                (nap * 2).min(LONGEST_BACK_OFF)
            } else {
                BACK_OFF
            };
            continue;
        }
        nap = BACK_OFF;
        // Not the engine held across the sleep (its last handle may go meanwhile), only
        // the transport, which outlives a departure on purpose.
        let transport = Arc::clone(&e.transport);
        drop(e);
        let traffic = transport.wait_for_traffic(IDLE_SLEEP);
        drop(transport);
        let Some(e) = weak.upgrade() else { return };
        if e.stop_requested() {
            return;
        }
        match traffic {
            Ok(Wake::Traffic | Wake::Timeout) => {
                // Quiet too: the transport's periodic work (keepalives, liveness) rides
                // on the pass, at most once per IDLE_SLEEP.
                if e.activity.now() == now {
                    e.stats.agent_pass();
                    if let Err(err) = e.progress() {
                        tracing::debug!(error = %err, "progress agent: a pass failed");
                    }
                }
            }
            Ok(Wake::NoWaitObject) => {
                if e.activity.now() == now {
                    e.stats.agent_pass();
                    let _ = e.progress();
                }
                drop(e);
                std::thread::sleep(poll_every);
            }
            Err(err) => {
                tracing::warn!(error = %err, "progress agent: the wait object failed; polling");
                drop(e);
                std::thread::sleep(poll_every);
            }
        }
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use crate::config::{AgentStart, AsyncProgress};
    use crate::sim::{Network, Profile};
    use crate::{Config, Engine};
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    #[test]
    fn the_agent_runs_its_start_hook_on_its_own_thread_first() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let hook = move || {
            let name = std::thread::current().name().map(str::to_string);
            let _ = tx.lock().map(|t| t.send(name));
        };
        let config = Config {
            async_progress: AsyncProgress::On,
            agent_start: Some(AgentStart(Arc::new(hook))),
            ..Config::default()
        };
        let net = Network::new(1, Profile::SharedMemory, 1);
        let _engine = Engine::new(Arc::new(net.endpoint(0)), config);
        let ran_on = rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(ran_on, Ok(Some("rma-progress".to_string())));
    }
}
