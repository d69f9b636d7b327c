//! What every backend does with its peers the same way: collectives through the
//! bootstrap, and the watch over the processes of this node.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rma_core::transport::{Event, Periodic};
use rma_core::{Bootstrap, Rank, TransportError};

/// Whether process `pid` of this node still runs (not gone, not a zombie awaiting its
/// parent): how the backends of one node tell a dead peer.
pub fn process_alive(pid: u32) -> bool {
    crate::sys::alive(pid)
}

/// A backend's collectives (window creation and free only): the bootstrap's, each
/// allgather under a tag of its own (`<prefix><count>`), the same on every rank since
/// every rank makes them in the same order.
pub struct Collectives {
    boot: Arc<dyn Bootstrap>,
    prefix: &'static str,
    count: AtomicU32,
}

impl std::fmt::Debug for Collectives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectives")
            .field("prefix", &self.prefix)
            .field("count", &self.count)
            .finish()
    }
}

impl Collectives {
    /// Collectives over `boot`, their tags starting with `prefix` (one per backend, e.g.
    /// "ofi-ag").
    pub fn new(boot: Arc<dyn Bootstrap>, prefix: &'static str) -> Self {
        Collectives {
            boot,
            prefix,
            count: AtomicU32::new(0),
        }
    }

    /// The bootstrap.
    pub fn boot(&self) -> &Arc<dyn Bootstrap> {
        &self.boot
    }

    /// Every rank's `mine`, in rank order.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        self.boot.allgather(&format!("{}{n}", self.prefix), mine)
    }

    /// Every rank arrives before any leaves.
    pub fn barrier(&self) -> Result<(), TransportError> {
        self.boot.barrier()
    }
}

/// Whether the job has more ranks on this node (`node`, by the bootstrap's hellos) than
/// CPUs they may run on together (the union of their affinity masks, read from
/// `/proc/<pid>/status`; our own CPU count where that cannot be read): then a rank that
/// polls for its peer holds a core the peer needs, and should give it up now and then.
/// Otherwise it should not: a yield hands the rest of the time slice to whatever else
/// runs (another job, a build), and the peer's message waits for it (measured over tcp
/// beside two CPU hogs on 2 cores: put + fence 3.4 ms yielding, 42-65 us not).
/// The union, not our own mask: ranks bound a core each see one CPU each.
pub fn oversubscribed(hellos: &[rma_core::bootstrap::Hello], node: &str) -> bool {
    let here: Vec<u32> = (hellos.iter())
        .filter(|h| h.node == node.as_bytes())
        .map(|h| h.pid)
        .collect();
    let mut cpus = std::collections::BTreeSet::new();
    for pid in &here {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
        match status.as_deref().and_then(allowed_cpus) {
            Some(list) => cpus.extend(list),
            None => {
                let ours = std::thread::available_parallelism().map_or(1, |n| n.get());
                return here.len() > ours;
            }
        }
    }
    here.len() > cpus.len()
}

/// The CPUs of a `/proc/<pid>/status` text's `Cpus_allowed_list` ("0-3,8,10-11").
fn allowed_cpus(status: &str) -> Option<Vec<u32>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// Time between two checks of the peers' pids by a network backend, asked every so many
/// polls: a signal and a read of /proc per peer is too much to do as often as a latency
/// loop polls.
const PID_CHECK_EVERY: Duration = Duration::from_millis(50);

/// The watch over peers' processes where they are on this node (their pids, from the
/// bootstrap's hellos), and which peers were reported failed: each once.
#[derive(Debug)]
pub struct PeerWatch {
    rank: Rank,
    pids: Option<Vec<u32>>,
    reported: Mutex<Vec<bool>>,
    pid_check: Periodic,
}

impl PeerWatch {
    /// Watches the processes `pids` (every rank's, in rank order), or none (`None`: the
    /// ranks are not all on this node, or the check is off), for rank `rank` of `size`.
    pub fn new(rank: Rank, size: usize, pids: Option<Vec<u32>>) -> Self {
        PeerWatch {
            rank,
            pids,
            reported: Mutex::new(vec![false; size]),
            pid_check: Periodic::new(PID_CHECK_EVERY),
        }
    }

    /// Watches every rank's process when the hellos say that all are on this node
    /// (`node`) and `enabled`; otherwise none.
    pub fn from_hellos(
        rank: Rank,
        hellos: &[rma_core::bootstrap::Hello],
        node: &str,
        enabled: bool,
    ) -> Self {
        let one_node = hellos.iter().all(|h| h.node == node.as_bytes());
        let pids = (enabled && one_node).then(|| hellos.iter().map(|h| h.pid).collect());
        Self::new(rank, hellos.len(), pids)
    }

    /// Whether processes are watched at all.
    pub fn watching(&self) -> bool {
        self.pids.is_some()
    }

    /// Whether a check is due at `now` (at most one per 50 ms, for network backends
    /// that ask every so many polls); never when nothing is watched.
    pub fn due(&self, now: Instant) -> bool {
        self.pids.is_some() && self.pid_check.due(now)
    }

    /// Whether `rank`'s process is known to be gone (watched, and no longer alive).
    pub fn process_gone(&self, rank: usize) -> bool {
        self.pids
            .as_ref()
            .and_then(|p| p.get(rank))
            .is_some_and(|pid| !process_alive(*pid))
    }

    /// Marks `rank` as reported failed: `true` the first time, `false` after.
    pub fn report(&self, rank: Rank) -> bool {
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        match reported.get_mut(rank as usize) {
            Some(r) if !*r => {
                *r = true;
                true
            }
            _ => false,
        }
    }

    /// Looks at every watched peer not yet reported: one whose process is gone and that
    /// did not leave normally becomes an [`Event::PeerFailed`], once. `left_normally` is
    /// asked only once the process is known gone: asked before, a peer that says goodbye
    /// and exits between the two looks would be taken for dead.
    pub fn check(&self, events: &mut Vec<Event>, mut left_normally: impl FnMut(Rank) -> bool) {
        let Some(pids) = &self.pids else { return };
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        for (r, pid) in pids.iter().enumerate() {
            if r as Rank == self.rank || reported[r] || process_alive(*pid) {
                continue;
            }
            if left_normally(r as Rank) {
                continue;
            }
            reported[r] = true;
            tracing::warn!(rank = r, pid, "peer process is gone");
            events.push(Event::PeerFailed { rank: r as Rank });
        }
    }
}

/// A number from the environment variable `name`, `default` when it is unset or not a
/// number (the numbers a backend reads are checked when a World starts:
/// [`rma_core::config::check_env_numbers`]).
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    #[test]
    fn allowed_cpus_reads_ranges_and_single_cpus() {
        let status = "Name:\tx\nCpus_allowed:\tf0f\nCpus_allowed_list:\t0-3,8,10-11\n";
        assert_eq!(
            super::allowed_cpus(status),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(
            super::allowed_cpus("Cpus_allowed_list:\t1\n"),
            Some(vec![1])
        );
        assert_eq!(super::allowed_cpus("Name:\tx\n"), None);
        assert_eq!(super::allowed_cpus("Cpus_allowed_list:\tx-1\n"), None);
    }

    #[test]
    fn this_process_alone_is_not_oversubscribed() {
        let hello = rma_core::bootstrap::Hello {
            pid: std::process::id(),
            node: b"n".to_vec(),
            address: Vec::new(),
        };
        assert!(!super::oversubscribed(std::slice::from_ref(&hello), "n"));
        // As many ranks on this node as it has CPUs, plus one: oversubscribed.
        let cpus = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| super::allowed_cpus(&s))
            .map_or(1, |c| c.len());
        let many = vec![hello; cpus + 1];
        assert!(super::oversubscribed(&many, "n"));
    }

    use super::*;

    #[test]
    fn a_dead_peer_is_reported_once_and_one_that_left_not_at_all() {
        let dead = {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        };
        let me = std::process::id();
        let watch = PeerWatch::new(0, 4, Some(vec![me, dead, me, dead]));
        let mut events = Vec::new();
        // Rank 3 left normally.
        watch.check(&mut events, |r| r == 3);
        assert_eq!(events.len(), 1);
        assert!(matches!(events[0], Event::PeerFailed { rank: 1 }));
        watch.check(&mut events, |_| false);
        assert_eq!(events.len(), 2, "rank 3 now counts, rank 1 not again");
        assert!(!watch.report(1));
        assert!(watch.report(2));
        assert!(watch.process_gone(1) && !watch.process_gone(2));
        let blind = PeerWatch::new(0, 2, None);
        blind.check(&mut events, |_| false);
        assert_eq!(events.len(), 2);
        assert!(!blind.process_gone(1) && !blind.due(Instant::now()));
    }
}
